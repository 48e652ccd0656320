/* SPDX-License-Identifier: MIT */
/* Unit tests for cache/catalog.c: schema, versions, chunk lookups, tags,
 * cache bookkeeping, persistence and the store-URL guard. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include <sqlite3.h>

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
		memset(r->xxh, r->hash[0] ^ 0x33, DCR_XXH_LEN);
		if (r->kind != DCR_CK_SAME)
			memset(r->fhash, r->hash[0] ^ 0x55, DCR_HASH_LEN);
	}
}

/* Version @v (parent @v-1 unless v == 1): a dir, two files, one empty. */
static void build(struct dcr_manifest *m, uint64_t v)
{
	uint32_t cs = 4096;
	uint32_t base = v == 1 ? DCR_NO_BASE : 1;

	memset(m, 0, sizeof(*m));
	m->format = DCR_MANIFEST_FORMAT;
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

/* Run @sql on the database at @path behind the catalog's back. */
static void raw_sql(const char *path, const char *sql)
{
	sqlite3 *db;

	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
}

/* Number of entries of @dir whose name starts with @prefix. */
static int count_prefix(const char *dir, const char *prefix)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d)))
		n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
	closedir(d);
	return n;
}

/* A catalog with versions 1 and 2, closed. */
static void make_two(struct fixture *f)
{
	struct dcr_catalog *c = NULL;
	struct dcr_manifest m1, m2;

	build(&m1, 1);
	build(&m2, 2);
	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	assert_true(dcr_catalog_is_new(c));
	assert_int_equal(dcr_catalog_add_version(c, &m1), 0);
	assert_int_equal(dcr_catalog_add_version(c, &m2), 0);
	dcr_catalog_close(c);
	dcr_manifest_free(&m1);
	dcr_manifest_free(&m2);
}

/* Open: the damaged catalog was set aside, a new empty one is in use. */
static void expect_rebuilt(struct fixture *f)
{
	struct dcr_catalog *c = NULL;
	struct dcr_catalog_version *vs;
	size_t n;

	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	assert_true(dcr_catalog_is_new(c));
	assert_int_equal(dcr_catalog_versions(c, &vs, &n), 0);
	assert_int_equal(n, 0);
	free(vs);
	dcr_catalog_close(c);
	assert_int_equal(count_prefix(f->dir, "catalog.db.corrupt-"), 1);
	/* and the new one is trusted at the next open */
	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	assert_false(dcr_catalog_is_new(c));
	dcr_catalog_close(c);
	assert_int_equal(count_prefix(f->dir, "catalog.db.corrupt-"), 1);
}

/* C3: a version row that fails the manifest checks (chunk size 0 would
 * divide by zero, parent >= version would loop) is a corrupt catalog. */
static void test_invalid_version_rows(void **state)
{
	struct fixture *f = *state;

	make_two(f);
	raw_sql(f->db, "UPDATE versions SET chunk_size = 0 WHERE version = 2");
	expect_rebuilt(f);
}

static void test_parent_cycle_row(void **state)
{
	struct fixture *f = *state;

	make_two(f);
	raw_sql(f->db, "UPDATE versions SET parent = 2 WHERE version = 2");
	expect_rebuilt(f);
}

/* Invalid file rows are refused on load and rebuild at the next open. */
static void test_invalid_file_rows(void **state)
{
	static const char *const bad[] = {
		"UPDATE files SET type = 7 WHERE version = 2 AND idx = 3",
		"UPDATE files SET path = '../x' WHERE version = 2 AND idx = 3",
		"UPDATE files SET nchunks = 99 WHERE version = 2 AND idx = 1",
		"UPDATE files SET path = 'q/x' WHERE version = 2 AND idx = 3",
		"UPDATE versions SET nfiles = 2000000000 WHERE version = 2",
	};

	for (size_t i = 0; i < DCR_ARRAY_SIZE(bad); i++) {
		struct fixture *f = *state;
		struct dcr_catalog *c = NULL;
		struct dcr_manifest m;

		tu_rm_rf(f->dir);
		assert_int_equal(tu_mkdir_p(f->dir), 0);
		make_two(f);
		assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
		assert_int_equal(dcr_catalog_load_files(c, 1, &m), 0);
		dcr_manifest_free(&m);
		raw_sql(f->db, bad[i]);
		assert_int_equal(dcr_catalog_load_files(c, 2, &m), -EIO);
		assert_int_equal(dcr_catalog_load_manifest(c, 2, &m), -EIO);
		dcr_catalog_close(c);
		expect_rebuilt(f);
	}
}

/* C4: a file that is not a database, or a truncated one, is set aside
 * (with its -wal) and replaced; the mount does not refuse to start. */
static void test_garbage_db(void **state)
{
	struct fixture *f = *state;
	char junk[8192], wal[PATH_MAX + 8];

	memset(junk, 'x', sizeof(junk));
	assert_int_equal(tu_write_file(f->db, junk, sizeof(junk)), 0);
	snprintf(wal, sizeof(wal), "%s-wal", f->db);
	assert_int_equal(tu_write_file(wal, junk, 100), 0);
	expect_rebuilt(f);
	assert_int_equal(count_prefix(f->dir, "catalog.db-wal"), 0);
}

static void test_truncated_db(void **state)
{
	struct fixture *f = *state;
	struct dcr_catalog *c = NULL;
	struct dcr_manifest m;

	make_two(f);
	/* Checkpointed into the main file, then cut in the middle. */
	raw_sql(f->db, "PRAGMA wal_checkpoint(TRUNCATE)");
	assert_true(tu_file_size(f->db) > 8192);
	assert_int_equal(truncate(f->db, tu_file_size(f->db) / 2), 0);
	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	/* Either found at open (rebuilt, empty) or when the rows are read
	 * (an error now, a rebuild at the next open): never a refusal. */
	if (!dcr_catalog_is_new(c)) {
		int ret = dcr_catalog_load_manifest(c, 2, &m);
		if (ret == 0)
			dcr_manifest_free(&m);
	}
	dcr_catalog_close(c);
	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	dcr_catalog_close(c);
}

/* A catalog written by a newer dcrfs is refused, and left alone. */
static void test_newer_schema(void **state)
{
	struct fixture *f = *state;
	struct dcr_catalog *c = NULL;

	make_two(f);
	raw_sql(f->db, "UPDATE meta SET value = '5' WHERE key = 'schema'");
	assert_int_equal(dcr_catalog_open(f->db, URL, &c), -EPROTONOSUPPORT);
	assert_null(c);
	assert_int_equal(count_prefix(f->dir, "catalog.db.corrupt-"), 0);
}

/*
 * A schema 1 catalog (written before format 2 manifests) is upgraded in
 * place: its rows stay, read as format 1 (no check values), and format
 * 2 versions indexed after the upgrade carry theirs.
 */
static void test_schema1_upgraded(void **state)
{
	struct fixture *f = *state;
	struct dcr_catalog *c = NULL;
	struct dcr_catalog_chunk ref;
	struct dcr_manifest m3, got;

	make_two(f);
	raw_sql(f->db, "ALTER TABLE chunks DROP COLUMN fhash;"
		       "ALTER TABLE chunks DROP COLUMN xxh;"
		       "ALTER TABLE versions DROP COLUMN format;"
		       "ALTER TABLE versions DROP COLUMN mhash;"
		       "ALTER TABLE versions DROP COLUMN obj_size;"
		       "ALTER TABLE versions DROP COLUMN obj_mtime;"
		       "ALTER TABLE versions DROP COLUMN ehash;"
		       "ALTER TABLE versions DROP COLUMN mcheck;"
		       "ALTER TABLE versions DROP COLUMN sig;"
		       "ALTER TABLE versions DROP COLUMN cparent;"
		       "UPDATE meta SET value = '1' WHERE key = 'schema'");
	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	assert_false(dcr_catalog_is_new(c));
	assert_int_equal(dcr_catalog_load_manifest(c, 2, &got), 0);
	assert_int_equal(got.format, 1);
	dcr_manifest_free(&got);
	assert_int_equal(dcr_catalog_get_chunk(c, 2, 1, 1, &ref), 0);
	assert_false(ref.has_check);

	build(&m3, 3);
	assert_int_equal(dcr_catalog_add_version(c, &m3), 0);
	assert_int_equal(dcr_catalog_load_manifest(c, 3, &got), 0);
	assert_int_equal(got.format, DCR_MANIFEST_FORMAT);
	assert_memory_equal(got.files[1].chunks[1].xxh,
			    m3.files[1].chunks[1].xxh, DCR_XXH_LEN);
	dcr_manifest_free(&got);
	assert_int_equal(dcr_catalog_get_chunk(c, 3, 1, 1, &ref), 0);
	assert_true(ref.has_check);
	assert_memory_equal(ref.xxh, m3.files[1].chunks[1].xxh, DCR_XXH_LEN);
	assert_memory_equal(ref.fhash, m3.files[1].chunks[1].fhash,
			    DCR_HASH_LEN);
	dcr_manifest_free(&m3);
	dcr_catalog_close(c);
	/* Reopened: schema 3 now, nothing set aside. */
	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	dcr_catalog_close(c);
	assert_int_equal(count_prefix(f->dir, "catalog.db.corrupt-"), 0);
}

static void ident_of(struct dcr_catalog_ident *id, int seed)
{
	memset(id, 0, sizeof(*id));
	id->has_mhash = true;
	memset(id->mhash, seed, DCR_HASH_LEN);
	id->obj_size = 1000 + (uint64_t)seed;
	id->obj_mtime_ns = 1700000000123456789 + seed;
}

static void assert_ident(const struct dcr_catalog_ident *a,
			 const struct dcr_catalog_ident *b)
{
	assert_int_equal(a->has_mhash, b->has_mhash);
	if (a->has_mhash)
		assert_memory_equal(a->mhash, b->mhash, DCR_HASH_LEN);
	assert_int_equal(a->obj_size, b->obj_size);
	assert_true(a->obj_mtime_ns == b->obj_mtime_ns);
}

/* The rows of table @table for version @v. */
static int64_t rows_of(const char *path, const char *table, uint64_t v)
{
	char sql[128];
	sqlite3_stmt *st;
	sqlite3 *db;
	int64_t n;

	snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM %s WHERE version = %llu",
		 table, (unsigned long long)v);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return n;
}

/*
 * A schema 2 catalog (no manifest identity) is upgraded in place: its
 * versions stay, with an unknown identity, which can be filled later
 * and survives a reopen.
 */
static void test_schema2_upgraded(void **state)
{
	struct fixture *f = *state;
	struct dcr_catalog *c = NULL;
	struct dcr_catalog_version *vs;
	struct dcr_catalog_ident id;
	struct dcr_manifest got;
	size_t n;

	make_two(f);
	raw_sql(f->db, "ALTER TABLE versions DROP COLUMN mhash;"
		       "ALTER TABLE versions DROP COLUMN obj_size;"
		       "ALTER TABLE versions DROP COLUMN obj_mtime;"
		       "ALTER TABLE versions DROP COLUMN ehash;"
		       "ALTER TABLE versions DROP COLUMN mcheck;"
		       "ALTER TABLE versions DROP COLUMN sig;"
		       "ALTER TABLE versions DROP COLUMN cparent;"
		       "UPDATE meta SET value = '2' WHERE key = 'schema'");
	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	assert_false(dcr_catalog_is_new(c));
	assert_int_equal(dcr_catalog_versions(c, &vs, &n), 0);
	assert_int_equal(n, 2);
	assert_false(vs[0].id.has_mhash);
	assert_false(vs[1].id.has_mhash);
	assert_int_equal(vs[1].id.obj_size, 0);
	free(vs);
	assert_int_equal(dcr_catalog_load_manifest(c, 2, &got), 0);
	assert_int_equal(got.format, DCR_MANIFEST_FORMAT);
	dcr_manifest_free(&got);
	ident_of(&id, 7);
	assert_int_equal(dcr_catalog_set_ident(c, 2, &id), 0);
	assert_int_equal(dcr_catalog_set_ident(c, 9, &id), -ENOENT);
	dcr_catalog_close(c);

	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	assert_int_equal(dcr_catalog_versions(c, &vs, &n), 0);
	assert_int_equal(n, 2);
	assert_false(vs[0].id.has_mhash);
	assert_ident(&vs[1].id, &id);
	free(vs);
	dcr_catalog_close(c);
	assert_int_equal(count_prefix(f->dir, "catalog.db.corrupt-"), 0);
}

/* Metadata, the manifest's check and its signature block are kept. */
static void test_provenance(void **state)
{
	struct fixture *f = *state;
	struct dcr_catalog *c = NULL;
	struct dcr_catalog_version *vs;
	struct dcr_manifest m, got;
	size_t n;

	build(&m, 1);
	assert_int_equal(dcr_manifest_set_meta(&m, "step", "1200"), 0);
	assert_int_equal(dcr_manifest_set_meta(&m, "run", "rl-7"), 0);
	memset(m.check, 0xc5, DCR_HASH_LEN);
	m.has_sig = true;
	m.sig.alg = DCR_SIG_ALG_ED25519;
	memset(m.sig.pub, 0x11, DCR_SIG_PUB_LEN);
	memset(m.sig.sig, 0x22, DCR_SIG_LEN);
	memset(m.sig.parent_check, 0x33, DCR_HASH_LEN);
	strcpy(m.sig.store_id, "0123456789abcdef0123456789abcdef");
	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	assert_int_equal(dcr_catalog_add_version(c, &m), 0);
	dcr_catalog_close(c);

	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	assert_int_equal(dcr_catalog_load_manifest(c, 1, &got), 0);
	assert_int_equal(got.nmeta, 2);
	assert_string_equal(got.meta[0].key, "run");
	assert_string_equal(got.meta[0].value, "rl-7");
	assert_string_equal(dcr_manifest_get_meta(&got, "step"), "1200");
	assert_memory_equal(got.check, m.check, DCR_HASH_LEN);
	assert_true(got.has_sig);
	assert_memory_equal(&got.sig, &m.sig, sizeof(m.sig));
	dcr_manifest_free(&got);
	assert_int_equal(dcr_catalog_versions(c, &vs, &n), 0);
	assert_int_equal(n, 1);
	assert_true(vs[0].has_check);
	assert_memory_equal(vs[0].check, m.check, DCR_HASH_LEN);
	assert_true(vs[0].has_sig);
	assert_memory_equal(&vs[0].sig, &m.sig, sizeof(m.sig));
	free(vs);
	/* dropped with its version */
	assert_int_equal(dcr_catalog_remove_version(c, 1), 0);
	dcr_catalog_close(c);
	dcr_manifest_free(&m);
}

/* Schema 3 (no provenance columns) is upgraded: checks unknown. */
static void test_schema3_upgraded(void **state)
{
	struct fixture *f = *state;
	struct dcr_catalog *c = NULL;
	struct dcr_catalog_version *vs;
	size_t n;

	make_two(f);
	raw_sql(f->db, "ALTER TABLE versions DROP COLUMN mcheck;"
		       "ALTER TABLE versions DROP COLUMN sig;"
		       "ALTER TABLE versions DROP COLUMN cparent;"
		       "DROP TABLE vmeta;"
		       "UPDATE meta SET value = '3' WHERE key = 'schema'");
	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	assert_false(dcr_catalog_is_new(c));
	assert_int_equal(dcr_catalog_versions(c, &vs, &n), 0);
	assert_int_equal(n, 2);
	assert_false(vs[1].has_check);
	assert_false(vs[1].has_sig);
	free(vs);
	dcr_catalog_close(c);
	assert_int_equal(count_prefix(f->dir, "catalog.db.corrupt-"), 0);
}

/* @m: build(m, 2) with other bytes: another tree for the same number. */
static void build_other2(struct dcr_manifest *m)
{
	build(m, 2);
	m->ctime_ns += 1000;
	free((char *)m->files[1].path);
	free(m->files[1].chunks);
	set_file(&m->files[1], "d/w.bin", DCR_FT_REG, 3 * 4096 + 5, 4096, 1, 9);
	m->packs[0][1] = 0xee;
}

struct loader {
	struct dcr_catalog *c;
	atomic_int stop;
	unsigned seen_old, seen_new, bad;
};

static void *loader_main(void *arg)
{
	struct loader *l = arg;

	while (!atomic_load(&l->stop)) {
		struct dcr_manifest got;
		int ret = dcr_catalog_load_manifest(l->c, 2, &got);

		if (ret) {
			l->bad++;
			continue;
		}
		/* All of one or all of the other, never a mix. */
		if (got.ctime_ns == 1700000000000000002 &&
		    got.files[1].nchunks == 6 &&
		    got.files[1].chunks[1].hash[0] == 2 * 16 + 2)
			l->seen_old++;
		else if (got.ctime_ns == 1700000000000000002 + 1000 &&
			 got.files[1].nchunks == 4 &&
			 got.files[1].chunks[1].hash[0] == 9 * 16 + 2)
			l->seen_new++;
		else
			l->bad++;
		dcr_manifest_free(&got);
	}
	return NULL;
}

/*
 * dcr_catalog_replace_version swaps a version's whole index at once:
 * the old rows go, the new ones and the new identity are in, a reader
 * never sees a mix, and a replace of a version not indexed is an add.
 */
static void test_replace_version(void **state)
{
	struct fixture *f = *state;
	struct dcr_catalog *c = NULL;
	struct dcr_catalog_version *vs;
	struct dcr_catalog_ident id1, id2, id3;
	struct dcr_catalog_chunk ref;
	struct dcr_manifest m1, m2, o2, got;
	struct loader l = { 0 };
	pthread_t th;
	size_t n;

	build(&m1, 1);
	build(&m2, 2);
	build_other2(&o2);
	ident_of(&id1, 1);
	ident_of(&id2, 2);
	ident_of(&id3, 3);
	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	assert_int_equal(dcr_catalog_add_version_ident(c, &m1, &id1), 0);
	assert_int_equal(dcr_catalog_add_version_ident(c, &m2, &id2), 0);
	assert_int_equal(dcr_catalog_add_version_ident(c, &m2, &id2), -EEXIST);

	l.c = c;
	assert_int_equal(pthread_create(&th, NULL, loader_main, &l), 0);
	while (l.seen_old == 0 && l.bad == 0)
		usleep(100);
	assert_int_equal(dcr_catalog_replace_version(c, &o2, &id3), 0);
	while (l.seen_new == 0 && l.bad == 0)
		usleep(100);
	atomic_store(&l.stop, 1);
	pthread_join(th, NULL);
	assert_int_equal(l.bad, 0);

	assert_int_equal(dcr_catalog_load_manifest(c, 2, &got), 0);
	check_same_manifest(&o2, &got, 1);
	dcr_manifest_free(&got);
	assert_int_equal(dcr_catalog_get_chunk(c, 2, 1, 0, &ref), 0);
	assert_memory_equal(ref.hash, o2.files[1].chunks[0].hash, DCR_HASH_LEN);
	assert_int_equal(dcr_catalog_get_chunk(c, 2, 1, 5, &ref), -ENOENT);
	assert_int_equal(rows_of(f->db, "chunks", 2), 5); /* 4 + z */
	assert_int_equal(dcr_catalog_versions(c, &vs, &n), 0);
	assert_int_equal(n, 2);
	assert_ident(&vs[0].id, &id1);
	assert_ident(&vs[1].id, &id3);
	free(vs);

	/* Removing: gone from every lookup and its rows gone; indexed
	 * again like any version. */
	assert_int_equal(dcr_catalog_remove_version(c, 2), 0);
	assert_int_equal(dcr_catalog_remove_version(c, 2), -ENOENT);
	assert_int_equal(dcr_catalog_load_files(c, 2, &got), -ENOENT);
	assert_int_equal(rows_of(f->db, "chunks", 2), 0);
	assert_int_equal(rows_of(f->db, "files", 2), 0);
	assert_int_equal(rows_of(f->db, "packs", 2), 0);
	assert_int_equal(dcr_catalog_versions(c, &vs, &n), 0);
	assert_int_equal(n, 1);
	free(vs);
	/* A replace of a version not indexed is an add (NULL: unknown). */
	assert_int_equal(dcr_catalog_replace_version(c, &m2, NULL), 0);
	assert_int_equal(dcr_catalog_load_manifest(c, 2, &got), 0);
	check_same_manifest(&m2, &got, 1);
	dcr_manifest_free(&got);
	assert_int_equal(dcr_catalog_versions(c, &vs, &n), 0);
	assert_int_equal(n, 2);
	assert_false(vs[1].id.has_mhash);
	free(vs);
	dcr_catalog_close(c);
	/* And it all persisted. */
	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	assert_int_equal(dcr_catalog_load_manifest(c, 2, &got), 0);
	check_same_manifest(&m2, &got, 1);
	dcr_manifest_free(&got);
	dcr_catalog_close(c);
	dcr_manifest_free(&m1);
	dcr_manifest_free(&m2);
	dcr_manifest_free(&o2);
}

/* A version of one file of @nch full chunks. */
static void build_big(struct dcr_manifest *m, uint64_t v, uint64_t nch)
{
	uint32_t cs = 4096;

	memset(m, 0, sizeof(*m));
	m->version = v;
	m->chunk_size = cs;
	m->npacks = 1;
	m->packs = calloc(1, DCR_HASH_LEN);
	m->nfiles = 1;
	m->files = calloc(1, sizeof(*m->files));
	m->files[0].path = strdup("big");
	m->files[0].type = DCR_FT_REG;
	m->files[0].mode = 0644;
	m->files[0].size = nch * cs;
	m->files[0].base = DCR_NO_BASE;
	m->files[0].nchunks = nch;
	m->files[0].chunks = calloc(nch, sizeof(struct dcr_chunk_ref));
	for (uint64_t i = 0; i < nch; i++) {
		m->files[0].chunks[i].kind = DCR_CK_FULL;
		m->files[0].chunks[i].off = i * 64;
		m->files[0].chunks[i].len = 64;
		dcr_put_le64(m->files[0].chunks[i].hash, i);
	}
}

struct adder {
	struct dcr_catalog *c;
	const struct dcr_manifest *m;
	atomic_int done;
	int64_t ns; /* duration of the add */
	int ret;
};

static void *adder_main(void *arg)
{
	struct adder *a = arg;
	int64_t t0 = dcr_now_ns();

	a->ret = dcr_catalog_add_version(a->c, a->m);
	a->ns = dcr_now_ns() - t0;
	atomic_store(&a->done, 1);
	return NULL;
}

/*
 * S3: indexing a big version does not stall lookups for its whole
 * duration (the lock is released between batches), and the version is
 * never visible before all its rows are in.
 */
static void test_add_does_not_stall_lookups(void **state)
{
	struct fixture *f = *state;
	const uint64_t nch = 100000;
	struct dcr_catalog *c = NULL;
	struct dcr_catalog_chunk ck;
	struct dcr_manifest m1, m2;
	struct adder a = { 0 };
	pthread_t th;
	unsigned during = 0;
	int64_t worst = 0;

	build_big(&m1, 1, 4);
	build_big(&m2, 2, nch);
	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	assert_int_equal(dcr_catalog_add_version(c, &m1), 0);
	a.c = c;
	a.m = &m2;
	assert_int_equal(pthread_create(&th, NULL, adder_main, &a), 0);
	while (!atomic_load(&a.done)) {
		struct dcr_catalog_version *vs;
		int64_t t0 = dcr_now_ns();
		size_t n;

		assert_int_equal(dcr_catalog_get_chunk(c, 1, 0, 3, &ck), 0);
		worst = DCR_MAX(worst, dcr_now_ns() - t0);
		assert_int_equal(dcr_catalog_versions(c, &vs, &n), 0);
		if (n == 2) /* visible: then complete */
			assert_int_equal(dcr_catalog_get_chunk(c, 2, 0, nch - 1,
							       &ck), 0);
		free(vs);
		if (!atomic_load(&a.done))
			during++;
	}
	pthread_join(th, NULL);
	assert_int_equal(a.ret, 0);
	/* 100000 rows are 13 batches: lookups got in between, and
	 * none waited for more than a small part of the whole insert. */
	if (getenv("DCR_TEST_VERBOSE"))
		fprintf(stderr, "add %lld us, %u lookups, worst %lld us\n",
			(long long)a.ns / 1000, during,
			(long long)worst / 1000);
	assert_true(during >= 5);
	assert_true(worst < a.ns / 3);
	assert_int_equal(dcr_catalog_get_chunk(c, 2, 0, nch - 1, &ck), 0);
	assert_int_equal(ck.off, (nch - 1) * 64);
	assert_int_equal(dcr_catalog_add_version(c, &m2), -EEXIST);
	dcr_catalog_close(c);
	dcr_manifest_free(&m1);
	dcr_manifest_free(&m2);
}

/* A version whose rows were only partly written (a crash before its
 * versions row) is invisible, and indexing it again replaces them. */
static void test_partial_version_redone(void **state)
{
	struct fixture *f = *state;
	struct dcr_catalog *c = NULL;
	struct dcr_catalog_version *vs;
	struct dcr_catalog_chunk ck;
	struct dcr_manifest m;
	size_t n;

	build_big(&m, 1, 20000);
	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	assert_int_equal(dcr_catalog_add_version(c, &m), 0);
	dcr_catalog_close(c);
	raw_sql(f->db, "DELETE FROM versions WHERE version = 1;"
		       "DELETE FROM chunks WHERE version = 1 AND idx > 15000;"
		       "UPDATE chunks SET off = 7 WHERE version = 1");
	assert_int_equal(dcr_catalog_open(f->db, URL, &c), 0);
	assert_int_equal(dcr_catalog_versions(c, &vs, &n), 0);
	assert_int_equal(n, 0);
	free(vs);
	assert_int_equal(dcr_catalog_add_version(c, &m), 0);
	assert_int_equal(dcr_catalog_get_chunk(c, 1, 0, 19999, &ck), 0);
	assert_int_equal(dcr_catalog_get_chunk(c, 1, 0, 5, &ck), 0);
	assert_int_equal(ck.off, 5 * 64);
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
		cmocka_unit_test_setup_teardown(test_many_chunks, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_invalid_version_rows,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_parent_cycle_row, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_invalid_file_rows, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_garbage_db, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_truncated_db, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_schema1_upgraded, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_schema2_upgraded, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_replace_version, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_newer_schema, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_provenance, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_schema3_upgraded, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_add_does_not_stall_lookups,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_partial_version_redone,
						setup, teardown),
	};

	dcr_log_set_prog("test_catalog");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
