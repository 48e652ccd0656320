/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the maintenance modules over a real directory store:
 * the store index and its records (maint/index.h: log, show), diff
 * (diff.h), verify (verify.h) and gc (gc.h). The store holds four
 * versions of a tree (a safetensors file with tensors "a" and "b", a
 * text file that goes in version 3, a file that comes in version 3):
 *   1  anchor                      tag "first"
 *   2  100 bytes of tensor b changed
 *   3  notes.txt removed, extra.bin added
 *   4  50 bytes of tensor a changed
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>
#include <cmocka.h>

#include "testutil.h"
#include "testchain.h"

#include "commit.h"
#include "common.h"
#include "diff.h"
#include "dirstore.h"
#include "gc.h"
#include "index.h"
#include "manifest.h"
#include "compact.h"
#include "sign.h"
#include "verify.h"

#define CS (64u << 10)
#define NE (64u << 10) /* bf16 elements per tensor: 2 chunks each */
#define NCH 5 /* chunks of the model: the header makes it one more */
#define NV 4

struct fx {
	char *root;
	char src[PATH_MAX], par[PATH_MAX], stage[PATH_MAX], store[PATH_MAX];
	struct dcr_store *st;
	struct dcr_store_info info;
	struct dcr_manifest man[NV + 1];
	uint8_t *model;  /* the current model.safetensors */
	size_t len, data; /* its length, where tensor a starts */
	uint64_t nver;
	struct dcr_index ix;
	int loaded;
};

#define sh(...) assert_int_equal(tu_sh(__VA_ARGS__), 0)

static void put_file(struct fx *f, const char *name, const void *p, size_t n)
{
	char path[PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/%s", f->src, name);
	FILE *fp = fopen(path, "wb");
	assert_non_null(fp);
	assert_int_equal(fwrite(p, 1, n, fp), n);
	fclose(fp);
}

static void commit(struct fx *f)
{
	struct tu_chain c = { f->st, f->src, f->par, f->stage, f->man, f->nver };

	put_file(f, "model.safetensors", f->model, f->len);
	tu_chain_commit(&c, CS, 2);
	f->nver = c.nver;
}

/* Flip @n bytes of tensor @t (0: a, 1: b), at distinct even offsets. */
static void step(struct fx *f, int t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		f->model[f->data + (size_t)t * 2 * NE + 2 * (i * 613 % NE)] ^= 0x5a;
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	char hdr[256];

	f->root = tu_mkdtemp("maint");
	snprintf(f->src, sizeof(f->src), "%s/src", f->root);
	snprintf(f->par, sizeof(f->par), "%s/parent", f->root);
	snprintf(f->stage, sizeof(f->stage), "%s/stage", f->root);
	snprintf(f->store, sizeof(f->store), "%s/store", f->root);
	mkdir(f->src, 0755);
	if (dcr_dir_open(f->store, 1, &f->st) || dcr_store_init(f->st, &f->info))
		return -1;
	int n = snprintf(hdr, sizeof(hdr),
			 "{\"a\":{\"dtype\":\"BF16\",\"shape\":[%u],\"data_offsets\":[0,%u]},"
			 "\"b\":{\"dtype\":\"BF16\",\"shape\":[%u],\"data_offsets\":[%u,%u]}}",
			 NE, 2 * NE, NE, 2 * NE, 4 * NE);
	while (n % 8)
		hdr[n++] = ' ';
	f->data = 8 + (size_t)n;
	f->len = f->data + 4 * (size_t)NE;
	f->model = malloc(f->len);
	dcr_put_le64(f->model, (uint64_t)n);
	memcpy(f->model + 8, hdr, (size_t)n);
	/* finite bf16 weights (magnitudes 2^-6 .. 2^-3) */
	uint64_t seed = 7;
	for (size_t i = 0; i < 2 * (size_t)NE; i++) {
		uint32_t x = (uint32_t)tu_rand(&seed);
		dcr_put_le16(f->model + f->data + 2 * i, (uint16_t)((x & 0x8000) |
			     ((0x79 + (x >> 16) % 4) << 7) | (x & 0x7f)));
	}
	put_file(f, "notes.txt", "one\n", 4);
	commit(f);                      /* 1 */
	step(f, 1, 100);
	commit(f);                      /* 2 */
	sh("rm '%s/notes.txt'", f->src);
	put_file(f, "extra.bin", "extra bytes\n", 12);
	commit(f);                      /* 3 */
	step(f, 0, 50);
	commit(f);                      /* 4 */
	if (dcr_store_put_tag(f->st, "first", 1))
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	if (f->loaded)
		dcr_index_free(&f->ix);
	for (int v = 0; v <= NV; v++)
		dcr_manifest_free(&f->man[v]);
	free(f->model);
	dcr_store_close(f->st);
	tu_rm_rf(f->root);
	free(f->root);
	free(f);
	return 0;
}

/* (Re)load the index of the fixture's store. */
static struct dcr_index *load(struct fx *f)
{
	if (f->loaded)
		dcr_index_free(&f->ix);
	assert_int_equal(dcr_index_load(&f->ix, f->st, &f->info), 0);
	f->loaded = 1;
	return &f->ix;
}

/* The key of the pack holding version @v's frames of its model file. */
static void model_pack(struct fx *f, uint64_t v, char *key, size_t cap)
{
	const struct dcr_manifest *m = &f->man[v];

	for (uint32_t i = 0; i < m->nfiles; i++) {
		const struct dcr_file *fl = &m->files[i];
		if (strcmp(fl->path, "model.safetensors"))
			continue;
		for (uint64_t k = 0; k < fl->nchunks; k++)
			if (fl->chunks[k].kind != DCR_CK_SAME) {
				dcr_pack_key(m->packs[fl->chunks[k].pack], key, cap);
				return;
			}
	}
	fail_msg("version %" PRIu64 " stores no frame of model.safetensors", v);
}

/* ------------------------------------------------------------ log, show */

static void test_records(void **state)
{
	struct fx *f = *state;
	struct dcr_index *ix = load(f);
	struct dcr_version_record r;

	assert_int_equal(ix->sv.nvs, NV);
	assert_int_equal(ix->sv.ntags, 1);
	assert_string_equal(ix->sv.tags[0].name, "first");
	assert_int_equal(ix->sv.tags[0].v, 1);
	assert_ptr_equal(dcr_index_resolve(ix, "first"), &ix->sv.vs[0]);
	assert_ptr_equal(dcr_index_resolve(ix, "latest"), &ix->sv.vs[NV - 1]);
	assert_ptr_equal(dcr_index_resolve(ix, "2"), &ix->sv.vs[1]);
	assert_null(dcr_index_resolve(ix, "9"));
	assert_null(dcr_index_resolve(ix, "nosuchtag"));

	assert_int_equal(dcr_index_record(ix, &ix->sv.vs[0], &r), 0);
	assert_int_equal(r.version, 1);
	assert_int_equal(r.parent, 0);
	assert_int_equal(r.base, 0);
	assert_string_equal(r.kind, "anchor");
	assert_int_equal(r.files, 2);
	assert_int_equal(r.bytes, f->len + 4);
	assert_int_equal(r.full, NCH + 1); /* the model's chunks, notes.txt */
	assert_int_equal(r.same + r.delta, 0);
	assert_int_equal(r.chunk_size, CS);
	assert_int_equal(strlen(r.time), 20);

	/* version 2: the two chunks of tensor b changed, the rest the same */
	assert_int_equal(dcr_index_record(ix, &ix->sv.vs[1], &r), 0);
	assert_int_equal(r.parent, 1);
	assert_int_equal(r.base, 1);
	assert_string_equal(r.kind, "delta");
	assert_int_equal(r.delta, 2);
	assert_int_equal(r.same, NCH + 1 - 2);
	assert_int_equal(r.full, 0);
	uint64_t frames = 0;
	for (uint32_t i = 0; i < ix->sv.vs[1].m.nfiles; i++)
		frames += dcr_file_stored_bytes(&ix->sv.vs[1].m.files[i]);
	assert_true(frames > 0);
	assert_int_equal(r.stored_bytes, ix->sv.vs[1].obj_size + frames);

	/* version 3: extra.bin new, notes.txt gone */
	assert_int_equal(dcr_index_record(ix, &ix->sv.vs[2], &r), 0);
	assert_int_equal(r.files, 2);
	assert_int_equal(r.bytes, f->len + 12);
	assert_int_equal(r.full, 1);
}

/* ------------------------------------------------------------------ diff */

static const struct dcr_diff_file *diff_path(const struct dcr_diff_result *r,
					     const char *path)
{
	for (size_t i = 0; i < r->nfiles; i++)
		if (!strcmp(r->files[i].path, path))
			return &r->files[i];
	fail_msg("diff has no %s", path);
	return NULL;
}

static void test_diff(void **state)
{
	struct fx *f = *state;
	struct dcr_index *ix = load(f);
	struct dcr_diff_result r;

	assert_int_equal(dcr_diff(ix, &ix->sv.vs[0], &ix->sv.vs[1], &r), 0);
	assert_int_equal(r.from, 1);
	assert_int_equal(r.to, 2);
	assert_int_equal(r.nfiles, 2);
	const struct dcr_diff_file *m = diff_path(&r, "model.safetensors");
	assert_string_equal(m->status, "changed");
	assert_int_equal(m->d.chunks, NCH);
	assert_int_equal(m->d.changed_chunks, 2);
	assert_int_equal(m->d.changed_bytes, 100);
	assert_true(m->d.stored_bytes > 0);
	assert_int_equal(m->tensors.n, 2);
	assert_string_equal(m->tensors.t[0].name, "a");
	assert_string_equal(m->tensors.t[1].name, "b");
	assert_string_equal(m->tensors.t[1].dtype, "BF16");
	assert_int_equal(m->ts[0].changed_bytes, 0);
	assert_int_equal(m->ts[1].changed_bytes, 100);
	assert_int_equal(m->ts[1].changed_chunks, 2);
	assert_string_equal(diff_path(&r, "notes.txt")->status, "unchanged");
	assert_int_equal(r.total.changed_bytes, 100);
	dcr_diff_result_free(&r);

	/* 2 -> 4 over 3: a file goes, one comes, tensor a changes */
	assert_int_equal(dcr_diff(ix, &ix->sv.vs[1], &ix->sv.vs[3], &r), 0);
	assert_string_equal(diff_path(&r, "notes.txt")->status, "removed");
	assert_int_equal(diff_path(&r, "notes.txt")->d.changed_bytes, 4);
	assert_string_equal(diff_path(&r, "extra.bin")->status, "added");
	assert_int_equal(diff_path(&r, "extra.bin")->d.changed_bytes, 12);
	m = diff_path(&r, "model.safetensors");
	assert_int_equal(m->d.changed_bytes, 50);
	assert_int_equal(m->ts[0].changed_bytes, 50);
	assert_int_equal(m->ts[1].changed_bytes, 0);
	assert_int_equal(r.total.changed_bytes, 50 + 4 + 12);
	dcr_diff_result_free(&r);

	/* a version against itself: nothing changed, nothing stored */
	assert_int_equal(dcr_diff(ix, &ix->sv.vs[3], &ix->sv.vs[3], &r), 0);
	assert_int_equal(r.total.changed_bytes, 0);
	assert_int_equal(r.total.stored_bytes, 0);
	dcr_diff_result_free(&r);
}

/* ---------------------------------------------------------------- verify */

static int pg_calls;
static uint64_t pg_last_done, pg_last_total;

static void count_pg(void *arg, enum dcr_pg_state s, const char *phase,
		     uint64_t done, uint64_t total, const char *unit)
{
	(void)arg;
	(void)phase;
	(void)unit;
	pg_calls++;
	if (s == DCR_PG_LAST) {
		pg_last_done = done;
		pg_last_total = total;
	}
}

static void test_verify(void **state)
{
	struct fx *f = *state;
	struct dcr_index *ix = load(f);
	struct dcr_pg pg = { .fn = count_pg };
	struct dcr_verify_result r;
	char key[128], path[PATH_MAX + 128];

	/* clean, shallow and deep */
	assert_int_equal(dcr_verify(ix, NULL, 0, 0, &pg, &r), 0);
	assert_int_equal(r.ndamage, 0);
	assert_int_equal(r.nversions, NV);
	assert_int_equal(r.packs_checked, ix->npacks);
	assert_true(pg_calls > 0);
	assert_true(pg_last_done == pg_last_total && pg_last_total > 0);
	dcr_verify_result_free(&r);
	assert_int_equal(dcr_verify(ix, NULL, 0, 1, NULL, &r), 0);
	assert_int_equal(r.ndamage, 0);
	dcr_verify_result_free(&r);
	uint64_t nine = 9;
	assert_int_equal(dcr_verify(ix, &nine, 1, 0, NULL, &r), -ENOENT);

	/* one byte of version 2's pack flipped: named, traced to version 2
	 * and the versions built on its chunks */
	model_pack(f, 2, key, sizeof(key));
	snprintf(path, sizeof(path), "%s/%s", f->store, key);
	sh("printf 'Z' | dd of='%s' bs=1 seek=200 conv=notrunc 2>/dev/null", path);
	ix = load(f);
	uint64_t two = 2;
	assert_int_equal(dcr_verify(ix, &two, 1, 0, NULL, &r), 0);
	assert_int_equal(r.ndamage, 1);
	assert_string_equal(r.damage[0].object, key);
	assert_string_equal(r.damage[0].reason, "content does not match its name");
	assert_int_equal(r.damage[0].nhits, 1);
	assert_int_equal(r.damage[0].hits[0].version, 2);
	assert_string_equal(r.damage[0].hits[0].path, "model.safetensors");
	/* the pack fails its name; only the frame holding byte 200 its hash */
	assert_int_equal(r.damage[0].hits[0].chunks, 1);
	assert_int_equal(r.damage[0].hits[0].nchunks, NCH);
	dcr_verify_result_free(&r);
	/* version 1 does not need it */
	uint64_t one = 1;
	assert_int_equal(dcr_verify(ix, &one, 1, 1, NULL, &r), 0);
	assert_int_equal(r.ndamage, 0);
	dcr_verify_result_free(&r);

	/* gone: "missing" */
	sh("rm '%s'", path);
	ix = load(f);
	assert_int_equal(dcr_verify(ix, NULL, 0, 1, NULL, &r), 0);
	assert_int_equal(r.ndamage, 1);
	assert_string_equal(r.damage[0].object, key);
	assert_string_equal(r.damage[0].reason, "missing");
	assert_true(r.damage[0].nhits >= 1);
	dcr_verify_result_free(&r);
}

/* -------------------------------------------------------------------- gc */

struct events {
	int removed, untagged, rebase, packs, orphans;
};

static void count_event(void *arg, const struct dcr_gc_event *e)
{
	struct events *n = arg;

	n->removed += e->what == DCR_GC_REMOVE;
	n->untagged += e->what == DCR_GC_UNTAG;
	n->rebase += e->what == DCR_GC_REBASE;
	n->packs += e->what == DCR_GC_DELETE_PACK;
	n->orphans += e->what == DCR_GC_DELETE_PACK && e->orphan;
}

/* After gc: exactly versions @vs[0..n) listed, every one reads whole. */
static void check_left(struct fx *f, const uint64_t *vs, size_t n)
{
	struct dcr_index *ix = load(f);
	struct dcr_verify_result r;

	assert_int_equal(ix->sv.nvs, n);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(ix->sv.vs[i].v, vs[i]);
	assert_int_equal(dcr_verify(ix, NULL, 0, 1, NULL, &r), 0);
	assert_int_equal(r.ndamage, 0);
	dcr_verify_result_free(&r);
}

static void test_gc_keep_last(void **state)
{
	struct fx *f = *state;
	struct dcr_index *ix = load(f);
	struct events n = { 0 };
	struct dcr_gc_opts o = { .keep_last = 2, .keep_tagged = 0, .grace = 0,
				 .event = count_event, .arg = &n };
	struct dcr_gc_result r;
	size_t packs = ix->npacks;

	/* a dry run changes nothing */
	o.dry_run = 1;
	assert_int_equal(dcr_gc(ix, &o, &r), 0);
	assert_int_equal(r.nremoved, 2);
	dcr_gc_result_free(&r);
	ix = load(f);
	assert_int_equal(ix->sv.nvs, NV);
	assert_int_equal(ix->npacks, packs);

	n = (struct events){ 0 };
	o.dry_run = 0;
	assert_int_equal(dcr_gc(ix, &o, &r), 0);
	assert_int_equal(r.kept, 2);
	assert_int_equal(r.nremoved, 2);
	assert_int_equal(r.removed[0], 1);
	assert_int_equal(r.removed[1], 2);
	assert_int_equal(r.ntags_removed, 1);
	assert_string_equal(r.tags_removed[0], "first");
	/* version 3 was built on 2: rebased, then 1's and 2's packs go */
	assert_true(r.rebased);
	assert_int_equal(n.rebase, 1);
	assert_int_equal(n.removed, 2);
	assert_int_equal(n.untagged, 1);
	assert_true(r.packs > 0 && r.freed > 0);
	assert_int_equal(n.packs, r.packs);
	dcr_gc_result_free(&r);
	uint64_t left[] = { 3, 4 };
	check_left(f, left, 2);
	uint64_t v;
	assert_int_equal(dcr_store_get_tag(f->st, "first", &v), -ENOENT);

	o.keep_last = 0;
	assert_int_equal(dcr_gc(load(f), &o, &r), -EINVAL);
}

static void test_gc_keep_tagged(void **state)
{
	struct fx *f = *state;
	struct dcr_gc_opts o = { .keep_last = 1, .keep_tagged = 1, .grace = 0 };
	struct dcr_gc_result r;

	assert_int_equal(dcr_gc(load(f), &o, &r), 0);
	assert_int_equal(r.kept, 2);
	assert_int_equal(r.nremoved, 2);
	assert_int_equal(r.removed[0], 2);
	assert_int_equal(r.removed[1], 3);
	assert_int_equal(r.ntags_removed, 0);
	assert_true(r.rebased); /* 4 was built on 3 */
	dcr_gc_result_free(&r);
	uint64_t left[] = { 1, 4 };
	check_left(f, left, 2);
	uint64_t v;
	assert_int_equal(dcr_store_get_tag(f->st, "first", &v), 0);
	assert_int_equal(v, 1);
}

static void test_gc_grace(void **state)
{
	struct fx *f = *state;
	struct events n = { 0 };
	struct dcr_gc_opts o = { .keep_last = NV, .keep_tagged = 1, .grace = 600,
				 .event = count_event, .arg = &n };
	struct dcr_gc_result r;
	char key[128], path[PATH_MAX + 128];
	uint8_t h[DCR_HASH_LEN];
	const char orphan[] = "DCRPACK1 named by no manifest";

	/* a pack no manifest names (a commit still publishing, or killed) */
	dcr_sha256(orphan, sizeof(orphan), h);
	dcr_pack_key(h, key, sizeof(key));
	assert_int_equal(dcr_store_put(f->st, key, orphan, sizeof(orphan), 0), 0);
	/* young: kept */
	assert_int_equal(dcr_gc(load(f), &o, &r), 0);
	assert_int_equal(r.nremoved, 0);
	assert_int_equal(r.packs, 0);
	assert_int_equal(r.orphans, 1);
	assert_int_equal(r.orphan_bytes, sizeof(orphan));
	assert_int_equal(r.grace, 600);
	dcr_gc_result_free(&r);
	snprintf(path, sizeof(path), "%s/%s", f->store, key);
	assert_int_equal(access(path, F_OK), 0);
	/* older than the store (less an hour): a placeholder time, the age
	 * unknown: kept */
	struct timespec ts[2] = { { .tv_sec = time(NULL) - 7200 },
				  { .tv_sec = time(NULL) - 7200 } };
	assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
	assert_int_equal(dcr_gc(load(f), &o, &r), 0);
	assert_int_equal(r.packs, 0);
	assert_int_equal(r.orphans, 1);
	dcr_gc_result_free(&r);
	/* 20 minutes old: past the grace, deleted */
	ts[0].tv_sec = ts[1].tv_sec = time(NULL) - 1200;
	assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
	assert_int_equal(dcr_gc(load(f), &o, &r), 0);
	assert_int_equal(r.packs, 1);
	assert_int_equal(r.freed, sizeof(orphan));
	assert_int_equal(r.orphans, 0);
	assert_int_equal(n.orphans, 1);
	dcr_gc_result_free(&r);
	assert_int_equal(access(path, F_OK), -1);
	uint64_t left[] = { 1, 2, 3, 4 };
	check_left(f, left, NV);
}

/* ------------------------------------------------------------ signatures */

/* Publish @m again as versions/<n>, signed with @k (NULL: plain) over
 * the parent check @pcheck; its new check into @check. */
static void resign(struct fx *f, const struct dcr_manifest *m,
		   const struct dcr_sign_key *k, const uint8_t *pcheck,
		   uint8_t check[DCR_HASH_LEN])
{
	struct dcr_buf enc;
	struct dcr_manifest back;
	char key[64];

	dcr_buf_init(&enc, SIZE_MAX);
	if (k)
		assert_int_equal(dcr_manifest_encode_signed(m, k, f->info.id, pcheck, &enc), 0);
	else
		assert_int_equal(dcr_manifest_encode(m, &enc), 0);
	dcr_version_key(m->version, key, sizeof(key));
	assert_int_equal(dcr_store_put(f->st, key, enc.data, enc.len, 0), 0);
	assert_int_equal(dcr_manifest_decode(enc.data, enc.len, &back), 0);
	memcpy(check, back.check, DCR_HASH_LEN);
	dcr_manifest_free(&back);
	dcr_buf_free(&enc);
}

static const struct dcr_verify_sig *sig_of(const struct dcr_verify_result *r,
					   uint64_t v)
{
	for (size_t i = 0; i < r->nsigs; i++)
		if (r->sigs[i].version == v)
			return &r->sigs[i];
	fail_msg("no signature entry for version %" PRIu64, v);
	return NULL;
}

static bool damaged(const struct dcr_verify_result *r, const char *object,
		    const char *why)
{
	for (size_t i = 0; i < r->ndamage; i++)
		if (!strcmp(r->damage[i].object, object) && strstr(r->damage[i].reason, why) &&
		    r->damage[i].nhits == 1 && !r->damage[i].hits[0].path)
			return true;
	return false;
}

/*
 * Versions 1 and 2 signed by key k, 3 unsigned, 4 by k2: log/show
 * records name the signers (a compacted version's too, from its own
 * manifest); verify reports them, and with a trust set of k alone the
 * unsigned and the untrusted one are damage; a version 2 that binds
 * another manifest of version 1 than the store holds is too; tags sign
 * over the version's own manifest.
 */
static void test_signatures(void **state)
{
	struct fx *f = *state;
	char key[PATH_MAX + 8], key2[PATH_MAX + 8], pub[PATH_MAX + 16];
	char id[DCR_KEYID_LEN + 1], id2[DCR_KEYID_LEN + 1];
	uint8_t check[NV + 1][DCR_HASH_LEN] = { { 0 } };
	struct dcr_sign_key *k, *k2;
	struct dcr_trust *t;
	struct dcr_verify_result r;
	struct dcr_version_record rec;

	snprintf(key, sizeof(key), "%s/k", f->root);
	snprintf(key2, sizeof(key2), "%s/k2", f->root);
	snprintf(pub, sizeof(pub), "%s.pub", key);
	assert_int_equal(dcr_sign_keygen(key, id), 0);
	assert_int_equal(dcr_sign_keygen(key2, id2), 0);
	assert_int_equal(dcr_sign_key_load(key, &k), 0);
	assert_int_equal(dcr_sign_key_load(key2, &k2), 0);
	assert_int_equal(dcr_trust_load(pub, &t), 0);
	resign(f, &f->man[1], k, NULL, check[1]);
	resign(f, &f->man[2], k, check[1], check[2]);
	resign(f, &f->man[3], NULL, NULL, check[3]);
	resign(f, &f->man[4], k2, check[3], check[4]);

	struct dcr_index *ix = load(f);
	const char *want[NV + 1] = { NULL, id, id, "unsigned", id2 };
	for (int v = 1; v <= NV; v++) {
		assert_int_equal(dcr_index_record(ix, &ix->sv.vs[v - 1], &rec), 0);
		assert_string_equal(rec.signer, want[v]);
		assert_int_equal(rec.nmeta, 0);
	}
	assert_int_equal(dcr_verify_trust(ix, NULL, 0, 0, NULL, NULL, &r), 0);
	assert_int_equal(r.ndamage, 0);
	assert_int_equal(r.nsigs, NV);
	assert_string_equal(sig_of(&r, 1)->status, "valid");
	assert_string_equal(sig_of(&r, 3)->status, "unsigned");
	assert_true(sig_of(&r, 3)->ok);
	assert_string_equal(sig_of(&r, 4)->signer, id2);
	dcr_verify_result_free(&r);
	assert_int_equal(dcr_verify_trust(ix, NULL, 0, 0, t, NULL, &r), 0);
	assert_int_equal(r.ndamage, 2);
	assert_true(damaged(&r, "versions/0000000003", "unsigned"));
	assert_true(damaged(&r, "versions/0000000004", id2));
	assert_string_equal(sig_of(&r, 4)->status, "untrusted");
	assert_string_equal(sig_of(&r, 2)->status, "valid");
	dcr_verify_result_free(&r);

	/* a signed tag binds the version's own manifest */
	assert_int_equal(dcr_index_put_tag(ix, "best", &ix->sv.vs[1], k), 0);
	struct dcr_tag_sig ts;
	bool is_signed;
	uint64_t tv;
	assert_int_equal(dcr_store_get_tag_sig(f->st, "best", &tv, &ts, &is_signed), 0);
	assert_true(tv == 2 && is_signed);
	assert_int_equal(dcr_tag_sig_check(&ts, f->info.id, "best", 2, check[2], t),
			 DCR_SIG_VALID);

	/* compacted: the records still name the signers of versions/<n> */
	struct dcr_compact_opts co = { .max_depth = 1 };
	struct dcr_compact_stats cs;
	assert_int_equal(dcr_compact_scratch(f->st, &co, &cs), 0);
	ix = load(f);
	int compacted = 0;
	for (int v = 1; v <= NV; v++) {
		assert_int_equal(dcr_index_record(ix, &ix->sv.vs[v - 1], &rec), 0);
		assert_string_equal(rec.signer, want[v]);
		compacted += ix->sv.vs[v - 1].compacted;
	}
	assert_true(compacted > 0);
	assert_int_equal(dcr_verify_trust(ix, NULL, 0, 0, NULL, NULL, &r), 0);
	assert_int_equal(r.ndamage, 0);
	dcr_verify_result_free(&r);

	/* version 1 replaced by another validly signed manifest of it:
	 * version 2 binds the old one */
	f->man[1].ctime_ns++;
	resign(f, &f->man[1], k, NULL, check[1]);
	ix = load(f);
	const uint64_t two = 2;
	assert_int_equal(dcr_verify_trust(ix, &two, 1, 0, t, NULL, &r), 0);
	assert_string_equal(sig_of(&r, 2)->status, "wrong-parent");
	assert_true(damaged(&r, "versions/0000000002", "another manifest of its parent"));
	dcr_verify_result_free(&r);

	dcr_trust_free(t);
	dcr_sign_key_free(k);
	dcr_sign_key_free(k2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_records, setup, teardown),
		cmocka_unit_test_setup_teardown(test_diff, setup, teardown),
		cmocka_unit_test_setup_teardown(test_verify, setup, teardown),
		cmocka_unit_test_setup_teardown(test_gc_keep_last, setup, teardown),
		cmocka_unit_test_setup_teardown(test_gc_keep_tagged, setup, teardown),
		cmocka_unit_test_setup_teardown(test_gc_grace, setup, teardown),
		cmocka_unit_test_setup_teardown(test_signatures, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
