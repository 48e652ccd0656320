/* SPDX-License-Identifier: MIT */
/*
 * synth_step.c - dcrfs-synth step: the checkpoint directory read and
 * its safetensors files parsed, the Adam state file (its format below,
 * at layout_hash), and the next step written by the adam or uniform
 * workers (synth.h: cmd_step).
 */
#include "config.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "buf.h"
#include "fileio.h"
#include "hash.h"
#include "synth.h"

#define ST_MAGIC "DCRSYNST"
#define ST_FORMAT 1

struct ckpt_file {
	char *name;
	bool st;              /* a safetensors file */
	mode_t mode;
	struct stfile f;
	struct map in;
};

static int cmp_names(const void *a, const void *b)
{
	const struct ckpt_file *x = a, *y = b;

	return strcmp(x->name, y->name);
}

static bool has_suffix(const char *s, const char *suf)
{
	size_t ls = strlen(s), lf = strlen(suf);

	return ls >= lf && !strcmp(s + ls - lf, suf);
}

/* List and parse the checkpoint directory @dir (sorted by name). */
static int load_ckpt(const char *dir, struct ckpt_file **out, size_t *nout)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	struct ckpt_file *fs = NULL;
	size_t n = 0, cap = 0;

	if (!d) {
		dcr_err("%s: %s", dir, strerror(errno));
		return -errno;
	}
	while ((de = readdir(d))) {
		struct stat sb;
		char *p;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		p = path_join(dir, de->d_name);
		if (stat(p, &sb) < 0 || !S_ISREG(sb.st_mode)) {
			msg("%s: not a regular file, not copied", p);
			free(p);
			continue;
		}
		free(p);
		if (dcr_array_grow(&fs, sizeof(*fs), n, &cap)) {
			dcr_err("out of memory");
			exit(1);
		}
		memset(&fs[n], 0, sizeof(fs[n]));
		fs[n].name = xstrdup(de->d_name);
		fs[n].mode = sb.st_mode;
		fs[n].st = has_suffix(de->d_name, ".safetensors");
		fs[n].in.fd = -1;
		n++;
	}
	closedir(d);
	if (n)
		qsort(fs, n, sizeof(*fs), cmp_names);
	*out = fs;
	*nout = n;

	for (size_t i = 0; i < n; i++) {
		struct ckpt_file *c = &fs[i];
		char *p;
		int e;

		if (!c->st)
			continue;
		p = path_join(dir, c->name);
		e = map_open(p, false, &c->in);
		if (e) {
			dcr_err("%s: %s", p, strerror(-e));
			free(p);
			return e;
		}
		if (st_parse(c->in.p, c->in.len, &c->f)) {
			dcr_err("%s: not a valid safetensors file", p);
			free(p);
			return -EBADMSG;
		}
		free(p);
	}
	return 0;
}

static void free_ckpt(struct ckpt_file *fs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (fs[i].in.fd >= 0)
			map_close(&fs[i].in);
		stfile_free(&fs[i].f);
		free(fs[i].name);
	}
	free(fs);
}

/*
 * State file: header then, for every element of every BF16/F32 tensor
 * (files by name, tensors by offset), {fp32 master, m, v}.
 *   0  8 magic  8 4 format  12 4 reserved  16 8 step  24 8 elements
 *   32 32 SHA-256 of the layout (file, tensor, dtype, shape list)
 */
static void layout_hash(struct ckpt_file *fs, size_t n, uint64_t *nelem,
			uint8_t out[DCR_HASH_LEN])
{
	struct text tx = { 0 };
	uint64_t idx = 0;

	text_start(&tx);

	for (size_t i = 0; i < n; i++) {
		for (size_t k = 0; fs[i].st && k < fs[i].f.n; k++) {
			struct tensor *t = &fs[i].f.t[k];
			if (!handled(W_ADAM, t))
				continue;
			t->st_index = idx;
			idx += t->nelem;
			fprintf(tx.f, "%s|%s|%s|", fs[i].name, t->name, t->dtype);
			for (int d = 0; d < t->ndim; d++)
				fprintf(tx.f, "%" PRIu64 ",", t->shape[d]);
			fputc('\n', tx.f);
		}
	}
	text_done(&tx);
	dcr_sha256(tx.p, tx.len, out);
	text_free(&tx);
	*nelem = idx;
}

static char *default_state_path(const char *out)
{
	char *dup = xstrdup(out), *slash;
	char *p;

	/* strip trailing slashes, then take the parent directory */
	for (size_t l = strlen(dup); l > 1 && dup[l - 1] == '/'; l--)
		dup[l - 1] = 0;
	slash = strrchr(dup, '/');
	if (!slash)
		p = xstrdup(".dcrfs-synth.state");
	else {
		*slash = 0;
		p = path_join(slash == dup ? "" : dup, ".dcrfs-synth.state");
	}
	free(dup);
	return p;
}

int cmd_step(const char *indir, const char *outdir, bool adam,
		    float lr, double rate, const char *state_arg, uint64_t seed,
		    int jobs)
{
	struct ckpt_file *fs = NULL;
	size_t n = 0;
	char *state = NULL;
	struct map st = { .fd = -1 };
	bool st_valid = false;
	uint64_t nelem = 0, step = 1, bytes = 0;
	uint64_t n16 = 0, c16 = 0, n32 = 0, c32 = 0, resynced = 0;
	uint8_t lh[DCR_HASH_LEN];
	struct stat si, so;
	int64_t t0 = dcr_mono_ns();
	int rc = 1, e;

	if (stat(indir, &si) < 0 || !S_ISDIR(si.st_mode)) {
		dcr_err("%s: not a directory", indir);
		return 1;
	}
	if (load_ckpt(indir, &fs, &n))
		goto out;
	e = dcr_mkdir_p(outdir, 0755);
	if (e) {
		dcr_err("%s: %s", outdir, strerror(-e));
		goto out;
	}
	if (stat(outdir, &so) == 0 && so.st_dev == si.st_dev &&
	    so.st_ino == si.st_ino) {
		dcr_err("--in and --out are the same directory");
		goto out;
	}
	layout_hash(fs, n, &nelem, lh);

	if (adam) {
		state = state_arg ? xstrdup(state_arg) : default_state_path(outdir);
		e = map_open(state, true, &st);
		if (e == -ENOENT) {
			msg("step: no state at %s: warm start from the checkpoint",
			    state);
		} else if (e) {
			dcr_err("%s: %s", state, strerror(-e));
			goto out;
		} else if (st.len != ST_HDR_LEN + 12 * nelem ||
			   memcmp(st.p, ST_MAGIC, 8) ||
			   dcr_get_le32(st.p + 8) != ST_FORMAT ||
			   dcr_get_le64(st.p + 24) != nelem ||
			   memcmp(st.p + 32, lh, DCR_HASH_LEN)) {
			msg("step: state %s is for another model layout: "
			    "warm start from the checkpoint", state);
			map_close(&st);
		} else {
			st_valid = true;
			step = dcr_get_le64(st.p + 16) + 1;
			if (dcr_get_le32(st.p + 12))
				msg("step: the step that last used %s was "
				    "interrupted", state);
		}
		if (!st_valid) {
			e = map_create(state, ST_HDR_LEN + 12 * nelem, &st);
			if (e) {
				dcr_err("%s: %s", state, strerror(-e));
				goto out;
			}
			memcpy(st.p, ST_MAGIC, 8);
			dcr_put_le32(st.p + 8, ST_FORMAT);
			dcr_put_le64(st.p + 16, step - 1);
			dcr_put_le64(st.p + 24, nelem);
			memcpy(st.p + 32, lh, DCR_HASH_LEN);
		}
		dcr_put_le32(st.p + 12, 1); /* in progress */
	}

	for (size_t i = 0; i < n; i++) {
		struct ckpt_file *c = &fs[i];
		char *src = path_join(indir, c->name);
		char *dst = path_join(outdir, c->name);

		if (!c->st) {
			e = copy_file(src, dst, c->mode);
			if (e)
				dcr_err("%s: %s", dst, strerror(-e));
		} else {
			struct map out;
			struct work w;

			e = map_create(dst, c->in.len, &out);
			if (e) {
				dcr_err("%s: %s", dst, strerror(-e));
			} else {
				/* header and unhandled tensors unchanged */
				memcpy(out.p, c->in.p, c->in.len);
				memset(&w, 0, sizeof(w));
				w.kind = adam ? W_ADAM : W_UNIFORM;
				w.f = &c->f;
				w.in = c->in.p + 8 + c->f.hdr_len;
				w.out = out.p + 8 + c->f.hdr_len;
				w.st = st.p ? (float *)(st.p + ST_HDR_LEN) : NULL;
				w.st_valid = st_valid;
				w.out_fd = out.fd;
				w.out_base = 8 + c->f.hdr_len;
				w.seed = seed;
				w.step = step;
				w.lr = lr;
				w.rate = (float)rate;
				e = run_work(&w, jobs);
				n16 += w.n16;
				c16 += w.changed16;
				n32 += w.n32;
				c32 += w.changed32;
				resynced += w.resynced;
				bytes += c->in.len;
				int e2 = map_close(&out);
				e = e ? e : e2;
				if (e)
					dcr_err("%s: %s", dst, strerror(-e));
			}
		}
		free(src);
		free(dst);
		if (e)
			goto out;
	}

	if (adam) {
		dcr_put_le64(st.p + 16, step);
		dcr_put_le32(st.p + 12, 0);
		e = map_close(&st);
		if (e) {
			dcr_err("%s: %s", state, strerror(-e));
			goto out;
		}
		if (resynced)
			msg("step: %" PRIu64 " master weights did not match the "
			    "checkpoint and were reset from it", resynced);
	}

	double dt = (double)(dcr_mono_ns() - t0) * 1e-9;
	char hs[32];
	if (adam)
		msg("step %" PRIu64 ": adam lr %g, state %s", step, (double)lr, state);
	else
		msg("step: uniform rate %g", rate);
	msg("changed %" PRIu64 " of %" PRIu64 " bf16 elements (%.3f%%), "
	    "%" PRIu64 " of %" PRIu64 " f32 elements (%.3f%%)",
	    c16, n16, n16 ? 100.0 * (double)c16 / (double)n16 : 0.0,
	    c32, n32, n32 ? 100.0 * (double)c32 / (double)n32 : 0.0);
	msg("wrote %s in %.2f s (%.0f MB/s)", dcr_format_size(bytes, hs, sizeof(hs)),
	    dt, (double)bytes / 1e6 / (dt > 1e-9 ? dt : 1e-9));
	rc = 0;
out:
	if (st.fd >= 0)
		map_close(&st);
	free(state);
	free_ckpt(fs, n);
	return rc;
}
