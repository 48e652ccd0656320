/* SPDX-License-Identifier: MIT */
/* diff.c - what changed from one version to another (diff.h). */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chunk.h"
#include "common.h"
#include "diff.h"
#include "hash.h"
#include "manifest.h"

static uint64_t ndiff(const uint8_t *a, const uint8_t *b, size_t n)
{
	uint64_t d = 0;

	for (size_t i = 0; i < n; i++)
		d += a[i] != b[i];
	return d;
}

/*
 * Per chunk of file @fi of version @b, the bytes of the frames a node
 * holding version @a (or nothing, a = 0) downloads to build it: those of
 * the versions on @b's chain newer than @a, down to the first full frame.
 */
static int chain_stored(struct dcr_index *ix, struct dcr_sview_ver *b, uint32_t fi,
			uint64_t a, uint64_t *stored)
{
	const struct dcr_manifest *m = dcr_index_manifest(ix, b);
	uint64_t n = m->files[fi].nchunks;
	uint8_t *done = calloc(n ? n : 1, 1);

	if (!done)
		return -ENOMEM;
	memset(stored, 0, n * sizeof(*stored));
	for (;;) {
		const struct dcr_file *f = &m->files[fi];
		for (uint64_t k = 0; k < n && k < f->nchunks; k++) {
			if (done[k] || f->chunks[k].kind == DCR_CK_SAME)
				continue;
			stored[k] += f->chunks[k].len;
			done[k] = f->chunks[k].kind == DCR_CK_FULL;
		}
		if (!m->parent || m->parent <= a || f->base == DCR_NO_BASE)
			break;
		struct dcr_sview_ver *p = dcr_index_find(ix, m->parent);
		if (!p || !(m = dcr_index_manifest(ix, p)) || f->base >= m->nfiles)
			break; /* the rest of the chain is gone: verify reports it */
		fi = f->base;
	}
	free(done);
	return 0;
}

/* The tensors of file @fi of version @v, if it is a safetensors file. */
static void file_tensors(struct dcr_index *ix, uint64_t v, const struct dcr_file *f,
			 uint32_t fi, struct dcr_tensors *ts)
{
	uint8_t h[8];
	size_t need, len = strlen(f->path);

	ts->t = NULL;
	ts->n = 0;
	if (len < 12 || strcmp(f->path + len - 12, ".safetensors") || f->size < 8 ||
	    dcr_index_read(ix, v, fi, f->path, 0, h, 8) ||
	    dcr_safetensors_prefix_len(h, 8, f->size, &need))
		return;
	uint8_t *buf = malloc(need);
	if (buf && !dcr_index_read(ix, v, fi, f->path, 0, buf, need) &&
	    dcr_safetensors_tensors(buf, need, f->size, ts))
		dcr_warn("version %" PRIu64 ": %s: safetensors header not understood; "
			 "no per-tensor diff", v, f->path);
	free(buf);
}

/*
 * Compare file @fa of version @va (NULL: absent) with file @fb of @vb
 * chunk by chunk (in @vb's chunks) into @df: a chunk whose SHA-256 is
 * the same is unchanged; the others are materialized and compared byte
 * for byte.
 */
static int diff_file(struct dcr_index *ix, struct dcr_sview_ver *va,
		     const struct dcr_file *fa, uint32_t ia, struct dcr_sview_ver *vb,
		     const struct dcr_file *fb, uint32_t ib, struct dcr_diff_file *df)
{
	const struct dcr_manifest *ma = &va->m, *mb = &vb->m;
	const struct dcr_tensor *tt = df->tensors.t;
	struct dcr_diff_stat *d = &df->d, *ts = df->ts;
	size_t nts = df->tensors.n;
	uint32_t cs = mb->chunk_size;
	uint64_t *stored = calloc(fb->nchunks ? fb->nchunks : 1, sizeof(*stored));
	uint8_t *ba = malloc(cs), *bb = malloc(cs);
	int ret = -ENOMEM;

	if (!stored || !ba || !bb ||
	    (ret = chain_stored(ix, vb, ib, va->v, stored)))
		goto err_free;
	d->chunks = fb->nchunks;
	size_t t0 = 0;
	for (uint64_t k = 0; k < fb->nchunks; k++) {
		uint64_t off = k * cs;
		uint32_t len = dcr_chunk_len(fb->size, cs, k);
		d->stored_bytes += stored[k];
		if (fa && ma->chunk_size == cs && k < fa->nchunks &&
		    dcr_chunk_len(fa->size, cs, k) == len &&
		    dcr_hash_eq(fa->chunks[k].hash, fb->chunks[k].hash))
			continue;
		/* bytes of A that overlap the chunk; the rest of it is new */
		size_t na = !fa || fa->size <= off ? 0 : (size_t)DCR_MIN(fa->size - off, len);
		if ((ret = dcr_index_read(ix, vb->v, ib, fb->path, off, bb, len)) ||
		    (na && (ret = dcr_index_read(ix, va->v, ia, fa->path, off, ba, na))))
			goto err_free;
		uint64_t nd = ndiff(ba, bb, na) + (len - na);
		d->changed_bytes += nd;
		d->changed_chunks += nd != 0;
		while (t0 < nts && tt[t0].off + tt[t0].len <= off)
			t0++;
		for (size_t t = t0; t < nts && tt[t].off < off + len; t++) {
			uint64_t lo = DCR_MAX(tt[t].off, off);
			uint64_t hi = DCR_MIN(tt[t].off + tt[t].len, off + len);
			if (hi <= lo)
				continue;
			uint64_t tna = lo - off >= na ? 0 : DCR_MIN(hi, off + na) - lo;
			uint64_t tnd = ndiff(ba + (lo - off), bb + (lo - off), tna) +
				       (hi - lo - tna);
			ts[t].changed_bytes += tnd;
			ts[t].changed_chunks += tnd != 0;
			/* frames are per chunk: apportion by overlap */
			ts[t].stored_bytes += stored[k] * (hi - lo) / len;
		}
	}
	if (fa && fa->size > fb->size) {
		/* A's bytes past B's end are removed: changed */
		d->changed_bytes += fa->size - fb->size;
		d->changed_chunks += dcr_chunk_count(fa->size - fb->size, cs);
	}
	ret = 0;
err_free:
	free(stored);
	free(ba);
	free(bb);
	return ret;
}

static void diff_file_free(struct dcr_diff_file *df)
{
	free(df->ts);
	dcr_tensors_free(&df->tensors);
}

/* Append @df (its tensors moved) to @r and count it in the total. */
static int diff_add(struct dcr_diff_result *r, struct dcr_diff_file *df)
{
	if (dcr_array_grow(&r->files, sizeof(*r->files), r->nfiles, &r->cap))
		return DCR_ERR(-ENOMEM);
	r->files[r->nfiles++] = *df;
	r->total.chunks += df->d.chunks;
	r->total.changed_chunks += df->d.changed_chunks;
	r->total.changed_bytes += df->d.changed_bytes;
	r->total.stored_bytes += df->d.stored_bytes;
	return 0;
}

int dcr_diff(struct dcr_index *ix, struct dcr_sview_ver *va, struct dcr_sview_ver *vb,
	     struct dcr_diff_result *r)
{
	const struct dcr_manifest *ma = dcr_index_manifest(ix, va);
	const struct dcr_manifest *mb = dcr_index_manifest(ix, vb);
	int ret = 0;

	*r = (struct dcr_diff_result){ 0 };
	if (!ma || !mb)
		return !ma ? va->state : vb->state;
	r->from = va->v;
	r->to = vb->v;
	for (uint32_t i = 0, j = 0; (i < ma->nfiles || j < mb->nfiles) && !ret;) {
		int cmp = i == ma->nfiles ? 1 : j == mb->nfiles ? -1 :
			  strcmp(ma->files[i].path, mb->files[j].path);
		const struct dcr_file *fa = cmp <= 0 ? &ma->files[i] : NULL;
		const struct dcr_file *fb = cmp >= 0 ? &mb->files[j] : NULL;
		uint32_t ia = i, ib = j;
		i += cmp <= 0;
		j += cmp >= 0;
		if (fa && fb && fa->type != fb->type) {
			/* a directory became a file or back: removed and added */
			if (cmp == 0)
				j--;
			fb = NULL;
		}
		struct dcr_diff_file df = {
			.path = fb ? fb->path : fa->path,
			.status = !fa ? "added" : !fb ? "removed" : "changed",
		};
		if ((fb ? fb : fa)->type == DCR_FT_DIR) {
			df.dir = 1;
			if (!fa || !fb)
				ret = diff_add(r, &df);
			continue;
		}
		if (!fb) {
			df.d.chunks = df.d.changed_chunks = fa->nchunks;
			df.d.changed_bytes = fa->size;
		} else if (fa && fa->size == fb->size && dcr_hash_eq(fa->sha256, fb->sha256)) {
			df.d.chunks = fb->nchunks;
			df.status = "unchanged";
		} else {
			file_tensors(ix, vb->v, fb, ib, &df.tensors);
			df.ts = calloc(df.tensors.n ? df.tensors.n : 1, sizeof(*df.ts));
			if (!df.ts) {
				diff_file_free(&df);
				ret = DCR_ERR(-ENOMEM);
				break;
			}
			for (size_t t = 0; t < df.tensors.n; t++) {
				const struct dcr_tensor *tn = &df.tensors.t[t];
				uint32_t cs = mb->chunk_size;
				df.ts[t].chunks = !tn->len ? 0 :
					(tn->off + tn->len - 1) / cs - tn->off / cs + 1;
			}
			ret = diff_file(ix, va, fa, ia, vb, fb, ib, &df);
			if (ret)
				dcr_err("diff of %s: %s", df.path, dcr_strerror(ret));
		}
		if (ret || (ret = diff_add(r, &df)))
			diff_file_free(&df);
	}
	return ret;
}

void dcr_diff_result_free(struct dcr_diff_result *r)
{
	for (size_t i = 0; i < r->nfiles; i++)
		diff_file_free(&r->files[i]);
	free(r->files);
	*r = (struct dcr_diff_result){ 0 };
}
