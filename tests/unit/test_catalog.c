/* SPDX-License-Identifier: MIT */
/* Unit tests for store/catalog.c: schema, versions, chunk lookups, tags,
 * cache bookkeeping, persistence and the store-URL guard. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "testutil.h"

#include "catalog.h"
#include "chunk.h"
#include "common.h"
#include "manifest.h"

#define URL "file:///srv/dcr-test"

struct fixture {
	char *dir;
	char db[PATH_MAX];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	f->dir = tu_mkdtemp("catalog");
	snprintf(f->db, sizeof(f->db), "%s/catalog.db", f->dir);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	tu_rm_rf(f->dir);
	free(f->dir);
	free(f);
	return 0;
}

static void set_file(struct dcr_file *fl, const char *path, int type,
		     uint64_t size, uint32_t cs, uint32_t base, int seed)
{
	memset(fl, 0, sizeof(*fl));
	fl->path = strdup(path);
	fl->type = (uint8_t)type;
	fl->mode = type == DCR_FT_DIR ? 0755 : 0640;
	fl->size = size;
	fl->mtime_ns = -7 + seed;
	fl->base = base;
	memset(fl->sha256, seed, DCR_HASH_LEN);
	if (type == DCR_FT_DIR)
		return;
	fl->nchunks = dcr_chunk_count(size, cs);
	fl->chunks = calloc(fl->nchunks ? fl->nchunks : 1, sizeof(*fl->chunks));
	for (uint64_t i = 0; i < fl->nchunks; i++) {
		struct dcr_chunk_ref *r = &fl->chunks[i];
		r->kind = base == DCR_NO_BASE ? DCR_CK_FULL : (uint8_t)(i % 3);
		if (r->kind != DCR_CK_SAME) {
			r->pack = (uint32_t)(i % 2);
			r->off = 16 + i * 1000;
			r->len = 100 + (uint32_t)i;
		}
		/* A SAME chunk hashes like the parent's (seed - 1). */
		memset(r->hash,
		       (int)((r->kind == DCR_CK_SAME ? seed - 1 : seed) * 16 +
			     (int)i + 1),
		       DCR_HASH_LEN);
	}
}

/* Version @v (parent @v-1 unless v == 1): a dir, two files, one empty. */
static void build(struct dcr_manifest *m, uint64_t v)
{
	uint32_t cs = 4096;
	uint32_t base = v == 1 ? DCR_NO_BASE : 1;

	memset(m, 0, sizeof(*m));
	m->version = v;
	m->parent = v - 1;
	m->ctime_ns = 1700000000000000000 + (int64_t)v;
	m->chunk_size = cs;
	m->npacks = 2;
	m->packs = calloc(2, DCR_HASH_LEN);
	m->packs[0][0] = (uint8_t)v;
	m->packs[1][0] = (uint8_t)(0x80 + v);
	m->nfiles = 4;
	m->files = calloc(4, sizeof(*m->files));
	set_file(&m->files[0], "d", DCR_FT_DIR, 0, cs, DCR_NO_BASE, 1);
	set_file(&m->files[1], "d/w.bin", DCR_FT_REG, 5 * cs + 17, cs, base,
		 (int)v);
	set_file(&m->files[2], "e", DCR_FT_REG, 0, cs, DCR_NO_BASE, 3);
	set_file(&m->files[3], "z", DCR_FT_REG, 10, cs, DCR_NO_BASE, 4);
}

static void test_open_creates_private_db(void **state)
{
	struct fixture *f = *state;
	struct dcr_catalog *c = NULL;
	struct stat sb;

	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	assert_non_null(c);
	assert_int_equal(stat(f->db, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0600);
	dcr_catalog_close(c);
	dcr_catalog_close(NULL);
}

static void test_url_guard(void **state)
{
	struct fixture *f = *state;
	struct dcr_catalog *c = NULL;

	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	dcr_catalog_close(c);
	c = (struct dcr_catalog *)1;
	assert_int_equal(dcr_catalog_open(f->db, "s3://other/prefix", &c),
			 -EEXIST);
	assert_null(c);
	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	dcr_catalog_close(c);
}

static void check_same_manifest(const struct dcr_manifest *a,
				const struct dcr_manifest *b, int chunks)
{
	assert_int_equal(a->version, b->version);
	assert_int_equal(a->parent, b->parent);
	assert_true(a->ctime_ns == b->ctime_ns);
	assert_int_equal(a->chunk_size, b->chunk_size);
	assert_int_equal(a->nfiles, b->nfiles);
	for (uint32_t i = 0; i < a->nfiles; i++) {
		const struct dcr_file *x = &a->files[i], *y = &b->files[i];
		assert_string_equal(x->path, y->path);
		assert_int_equal(x->type, y->type);
		assert_int_equal(x->mode, y->mode);
		assert_int_equal(x->size, y->size);
		assert_true(x->mtime_ns == y->mtime_ns);
		assert_memory_equal(x->sha256, y->sha256, DCR_HASH_LEN);
		assert_int_equal(x->base, y->base);
		assert_int_equal(x->nchunks, y->nchunks);
		if (!chunks) {
			assert_null(y->chunks);
			continue;
		}
		for (uint64_t k = 0; k < x->nchunks; k++) {
			assert_int_equal(x->chunks[k].kind, y->chunks[k].kind);
			assert_int_equal(x->chunks[k].pack, y->chunks[k].pack);
			assert_int_equal(x->chunks[k].off, y->chunks[k].off);
			assert_int_equal(x->chunks[k].len, y->chunks[k].len);
			assert_memory_equal(x->chunks[k].hash,
					    y->chunks[k].hash, DCR_HASH_LEN);
		}
	}
	if (chunks) {
		assert_int_equal(a->npacks, b->npacks);
		assert_memory_equal(a->packs, b->packs,
				    (size_t)a->npacks * DCR_HASH_LEN);
	}
}

static void test_versions_and_chunks(void **state)
{
	struct fixture *f = *state;
	struct dcr_catalog *c = NULL;
	struct dcr_manifest m1, m2, got;
	struct dcr_catalog_version *vs;
	struct dcr_catalog_chunk ck;
	size_t n;

	build(&m1, 1);
	build(&m2, 2);
	assert_int_equal(dcr_manifest_validate(&m1), 0);
	assert_int_equal(dcr_manifest_validate(&m2), 0);
	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	assert_int_equal(dcr_catalog_versions(c, &vs, &n), 0);
	assert_int_equal(n, 0);
	free(vs);

	assert_int_equal(dcr_catalog_add_version(c, &m2), 0);
	assert_int_equal(dcr_catalog_add_version(c, &m1), 0);
	assert_int_equal(dcr_catalog_add_version(c, &m1), -EEXIST);

	assert_int_equal(dcr_catalog_versions(c, &vs, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(vs[0].version, 1);
	assert_int_equal(vs[1].version, 2);
	assert_int_equal(vs[1].parent, 1);
	assert_int_equal(vs[1].chunk_size, 4096);
	assert_int_equal(vs[1].nfiles, 4);
	assert_true(vs[1].ctime_ns == m2.ctime_ns);
	free(vs);

	/* Every chunk reference comes back, pack resolved to its hash. */
	for (uint32_t i = 0; i < m2.nfiles; i++) {
		const struct dcr_file *fl = &m2.files[i];
		for (uint64_t k = 0; k < fl->nchunks; k++) {
			const struct dcr_chunk_ref *r = &fl->chunks[k];
			assert_int_equal(dcr_catalog_get_chunk(c, 2, i, k, &ck),
					 0);
			assert_int_equal(ck.kind, r->kind);
			assert_memory_equal(ck.hash, r->hash, DCR_HASH_LEN);
			if (r->kind != DCR_CK_SAME) {
				assert_int_equal(ck.off, r->off);
				assert_int_equal(ck.len, r->len);
				assert_memory_equal(ck.pack, m2.packs[r->pack],
						    DCR_HASH_LEN);
			}
		}
	}
	assert_int_equal(dcr_catalog_get_chunk(c, 2, 1, 6, &ck), -ENOENT);
	assert_int_equal(dcr_catalog_get_chunk(c, 2, 0, 0, &ck), -ENOENT);
	assert_int_equal(dcr_catalog_get_chunk(c, 3, 1, 0, &ck), -ENOENT);

	assert_int_equal(dcr_catalog_load_files(c, 2, &got), 0);
	check_same_manifest(&m2, &got, 0);
	dcr_manifest_free(&got);
	assert_int_equal(dcr_catalog_load_files(c, 9, &got), -ENOENT);

	assert_int_equal(dcr_catalog_load_manifest(c, 2, &got), 0);
	check_same_manifest(&m2, &got, 1);
	assert_int_equal(dcr_manifest_check_parent(&m2, &m1), 0);
	dcr_manifest_free(&got);
	assert_int_equal(dcr_catalog_load_manifest(c, 1, &got), 0);
	check_same_manifest(&m1, &got, 1);
	/* The rebuilt parent serves dcr_manifest_check_parent. */
	assert_int_equal(dcr_manifest_check_parent(&m2, &got), 0);
	dcr_manifest_free(&got);
	dcr_catalog_close(c);

	/* Everything survives a reopen. */
	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	assert_int_equal(dcr_catalog_versions(c, &vs, &n), 0);
	assert_int_equal(n, 2);
	free(vs);
	assert_int_equal(dcr_catalog_load_manifest(c, 2, &got), 0);
	check_same_manifest(&m2, &got, 1);
	dcr_manifest_free(&got);
	dcr_catalog_close(c);
	dcr_manifest_free(&m1);
	dcr_manifest_free(&m2);
}

struct tag_acc {
	char names[8][32];
	uint64_t vs[8];
	int n;
};

static int tag_cb(const char *name, uint64_t v, void *arg)
{
	struct tag_acc *a = arg;

	snprintf(a->names[a->n], sizeof(a->names[a->n]), "%s", name);
	a->vs[a->n++] = v;
	return 0;
}

static int tag_stop_cb(const char *name, uint64_t v, void *arg)
{
	(void)name;
	(void)v;
	(void)arg;
	return 42;
}

static void test_tags(void **state)
{
	struct fixture *f = *state;
	struct dcr_catalog *c = NULL;
	const char *names[] = { "stable", "best", "canary" };
	uint64_t vs[] = { 3, 7, 9 };
	struct tag_acc a = { .n = 0 };

	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	assert_int_equal(dcr_catalog_tags(c, tag_cb, &a), 0);
	assert_int_equal(a.n, 0);
	assert_int_equal(dcr_catalog_set_tags(c, names, vs, 3), 0);
	assert_int_equal(dcr_catalog_tags(c, tag_cb, &a), 0);
	assert_int_equal(a.n, 3);
	assert_string_equal(a.names[0], "best");
	assert_int_equal(a.vs[0], 7);
	assert_string_equal(a.names[2], "stable");
	assert_int_equal(dcr_catalog_tags(c, tag_stop_cb, NULL), 42);

	/* Replacing drops tags that are gone. */
	vs[0] = 4;
	assert_int_equal(dcr_catalog_set_tags(c, names, vs, 1), 0);
	dcr_catalog_close(c);
	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	a.n = 0;
	assert_int_equal(dcr_catalog_tags(c, tag_cb, &a), 0);
	assert_int_equal(a.n, 1);
	assert_string_equal(a.names[0], "stable");
	assert_int_equal(a.vs[0], 4);
	dcr_catalog_close(c);
}

static void test_cache_rows(void **state)
{
	struct fixture *f = *state;
	struct dcr_catalog *c = NULL;
	uint8_t h[4][DCR_HASH_LEN], out[8][DCR_HASH_LEN];
	uint64_t sizes[8], total, sz;
	size_t n;
	int added = -1;

	for (int i = 0; i < 4; i++)
		memset(h[i], 0x10 * (i + 1), DCR_HASH_LEN);
	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	assert_int_equal(dcr_catalog_cache_total(c, &total), 0);
	assert_int_equal(total, 0);
	assert_int_equal(dcr_catalog_cache_oldest(c, 8, out, sizes, &n), 0);
	assert_int_equal(n, 0);

	assert_int_equal(dcr_catalog_cache_add(c, h[0], 100, 50, &added), 0);
	assert_int_equal(added, 1);
	assert_int_equal(dcr_catalog_cache_add(c, h[1], 200, 10, &added), 0);
	assert_int_equal(dcr_catalog_cache_add(c, h[2], 300, 30, NULL), 0);
	assert_int_equal(dcr_catalog_cache_add(c, h[3], 400, 40, &added), 0);
	/* Re-adding updates the atime but keeps one row. */
	assert_int_equal(dcr_catalog_cache_add(c, h[0], 100, 5, &added), 0);
	assert_int_equal(added, 0);
	assert_int_equal(dcr_catalog_cache_total(c, &total), 0);
	assert_int_equal(total, 1000);

	assert_int_equal(dcr_catalog_cache_oldest(c, 8, out, sizes, &n), 0);
	assert_int_equal(n, 4);
	assert_memory_equal(out[0], h[0], DCR_HASH_LEN);
	assert_memory_equal(out[1], h[1], DCR_HASH_LEN);
	assert_memory_equal(out[2], h[2], DCR_HASH_LEN);
	assert_int_equal(sizes[2], 300);

	assert_int_equal(dcr_catalog_cache_touch(c, h[0], 99), 0);
	assert_int_equal(dcr_catalog_cache_oldest(c, 2, out, sizes, &n), 0);
	assert_int_equal(n, 2);
	assert_memory_equal(out[0], h[1], DCR_HASH_LEN);
	assert_memory_equal(out[1], h[2], DCR_HASH_LEN);

	assert_int_equal(dcr_catalog_cache_del(c, h[1], &sz), 0);
	assert_int_equal(sz, 200);
	assert_int_equal(dcr_catalog_cache_del(c, h[1], &sz), 0);
	assert_int_equal(sz, 0);
	dcr_catalog_close(c);

	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	assert_int_equal(dcr_catalog_cache_total(c, &total), 0);
	assert_int_equal(total, 800);
	dcr_catalog_close(c);
}

/* A big version goes in one transaction and lookups stay exact. */
static void test_many_chunks(void **state)
{
	struct fixture *f = *state;
	struct dcr_catalog *c = NULL;
	struct dcr_catalog_chunk ck;
	struct dcr_manifest m;
	uint32_t cs = 4096;
	uint64_t nch = 20000;

	memset(&m, 0, sizeof(m));
	m.version = 1;
	m.chunk_size = cs;
	m.npacks = 1;
	m.packs = calloc(1, DCR_HASH_LEN);
	m.nfiles = 1;
	m.files = calloc(1, sizeof(*m.files));
	m.files[0].path = strdup("big");
	m.files[0].type = DCR_FT_REG;
	m.files[0].mode = 0644;
	m.files[0].size = nch * cs;
	m.files[0].base = DCR_NO_BASE;
	m.files[0].nchunks = nch;
	m.files[0].chunks = calloc(nch, sizeof(struct dcr_chunk_ref));
	for (uint64_t i = 0; i < nch; i++) {
		m.files[0].chunks[i].kind = DCR_CK_FULL;
		m.files[0].chunks[i].off = i * 64;
		m.files[0].chunks[i].len = 64;
		dcr_put_le64(m.files[0].chunks[i].hash, i);
	}
	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	assert_int_equal(dcr_catalog_add_version(c, &m), 0);
	for (uint64_t i = 0; i < nch; i += 997) {
		assert_int_equal(dcr_catalog_get_chunk(c, 1, 0, i, &ck), 0);
		assert_int_equal(ck.off, i * 64);
		assert_int_equal(dcr_get_le64(ck.hash), i);
	}
	dcr_catalog_close(c);
	dcr_manifest_free(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_open_creates_private_db,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_url_guard, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_versions_and_chunks,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_tags, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache_rows, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_many_chunks, setup,
						teardown),
	};

	dcr_log_set_prog("test_catalog");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
