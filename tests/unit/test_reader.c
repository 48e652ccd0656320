/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the read path (read/reader.h), its reads: trees and
 * file boundaries, chains of deltas fetched cold or over cached bases
 * (counting exactly which objects the reader fetches), trees unloaded,
 * a reopen that fetches nothing again, a tiny cache budget, concurrent
 * readers, a version made by dcr_commit, coalesced and read-ahead GETs,
 * one reader per cache directory, a prefetch that settles a chunk whose
 * write is still queued, and format 1 stores (older
 * committers). The fixture is test_reader_util.h's; damage is
 * test_reader_damage.c's, versions test_reader_versions.c's.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "testutil.h"

#include "chunk.h"
#include "commit.h"
#include "common.h"
#include "dirstore.h"
#include "frame.h"
#include "hash.h"
#include "manifest.h"
#include "reader.h"
#include "test_reader_util.h"

/* ------------------------------------------------------------ tests */

static void test_tree_and_boundaries(void **state)
{
	struct fx *f = *state;
	const struct dcr_version_info *vi;
	const struct tfile *w;
	uint8_t buf[3 * CS];
	uint64_t latest = 99, *vs;
	size_t nvs;

	build_chain(f, 1);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_latest(f->r), 0);
	assert_int_equal(dcr_reader_version(f->r, 1, &vi), -ENOENT);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 1);
	assert_int_equal(dcr_reader_versions(f->r, &vs, &nvs), 0);
	assert_int_equal(nvs, 1);
	assert_int_equal(vs[0], 1);
	free(vs);

	/* The tree: root, a/, a/w.bin, b.bin, empty, tiny. */
	assert_int_equal(dcr_reader_version(f->r, 1, &vi), 0);
	assert_int_equal(vi->version, 1);
	assert_int_equal(vi->parent, 0);
	assert_int_equal(vi->chunk_size, CS);
	assert_int_equal(vi->nentries, 6);
	assert_string_equal(vi->entries[0].path, "");
	assert_int_equal(vi->entries[0].type, DCR_FT_DIR);
	assert_int_equal(vi->entries[0].first_child, 1);
	assert_string_equal(vi->entries[1].name, "a");
	assert_int_equal(vi->entries[1].first_child, 2);
	assert_int_equal(vi->entries[1].next_sibling, 3);
	assert_string_equal(vi->entries[2].path, "a/w.bin");
	assert_string_equal(vi->entries[2].name, "w.bin");
	assert_int_equal(vi->entries[2].parent, 1);
	assert_int_equal(vi->entries[2].next_sibling, UINT32_MAX);
	assert_int_equal(vi->entries[2].size, 5 * CS + 100);
	assert_int_equal(vi->entries[2].mode, 0644);
	assert_int_equal(vi->entries[3].next_sibling, 4);
	assert_int_equal(vi->entries[5].parent, 0);
	assert_int_equal(vi->entries[5].next_sibling, UINT32_MAX);
	{
		const struct dcr_version_info *again;
		assert_int_equal(dcr_reader_version(f->r, 1, &again), 0);
		assert_ptr_equal(again, vi); /* stable pointers */
	}

	w = &f->v[1].f[1];
	/* First byte, last byte of chunk 0, first of chunk 1. */
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 0, buf, 1), 1);
	assert_int_equal(buf[0], w->data[0]);
	assert_int_equal(dcr_reader_read(f->r, 1, 2, CS - 1, buf, 1), 1);
	assert_int_equal(buf[0], w->data[CS - 1]);
	assert_int_equal(dcr_reader_read(f->r, 1, 2, CS, buf, 1), 1);
	assert_int_equal(buf[0], w->data[CS]);
	/* A range spanning three chunks. */
	assert_int_equal(dcr_reader_read(f->r, 1, 2, CS - 10, buf, 2 * CS + 20),
			 2 * CS + 20);
	assert_memory_equal(buf, w->data + CS - 10, 2 * CS + 20);
	/* The short last chunk, its last byte, a read running past EOF. */
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 5 * CS + 99, buf, 1), 1);
	assert_int_equal(buf[0], w->data[5 * CS + 99]);
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 5 * CS, buf, 3 * CS), 100);
	assert_memory_equal(buf, w->data + 5 * CS, 100);
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 5 * CS + 100, buf, 10), 0);
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 1ull << 40, buf, 10), 0);
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 0, buf, 0), 0);
	/* A file that is an exact multiple of the chunk size. */
	assert_int_equal(dcr_reader_read(f->r, 1, 3, 2 * CS, buf, CS + 5), CS);
	assert_memory_equal(buf, f->v[1].f[2].data + 2 * CS, CS);
	/* Empty and tiny files. */
	assert_int_equal(dcr_reader_read(f->r, 1, 4, 0, buf, 10), 0);
	assert_int_equal(dcr_reader_read(f->r, 1, 5, 0, buf, 100), 10);
	assert_memory_equal(buf, f->v[1].f[4].data, 10);
	assert_int_equal(dcr_reader_read(f->r, 1, 5, 3, buf, 2), 2);
	assert_memory_equal(buf, f->v[1].f[4].data + 3, 2);
	/* Errors. */
	assert_int_equal(dcr_reader_read(f->r, 1, 0, 0, buf, 1), -EISDIR);
	assert_int_equal(dcr_reader_read(f->r, 1, 1, 0, buf, 1), -EISDIR);
	assert_int_equal(dcr_reader_read(f->r, 1, 6, 0, buf, 1), -ENOENT);
	assert_int_equal(dcr_reader_read(f->r, 2, 1, 0, buf, 1), -ENOENT);
	assert_int_equal(log_errors, 0);
}

static void test_chain_cold_and_cached_base(void **state)
{
	struct fx *f = *state;
	unsigned kinds[3] = { 0, 0, 0 }, want;

	build_chain(f, 5);
	for (int v = 2; v <= 5; v++)
		for (int i = 0; i < f->v[v].nfiles; i++)
			for (int k = 0; k < 6; k++)
				if (!f->v[v].f[i].dir &&
				    (uint64_t)k < dcr_chunk_count(f->v[v].f[i].size, CS))
					kinds[f->v[v].f[i].kind[k]]++;
	/* The chain really mixes all three kinds. */
	assert_true(kinds[DCR_CK_SAME] > 0);
	assert_true(kinds[DCR_CK_DELTA] > 0);
	assert_true(kinds[DCR_CK_FULL] > 0);
	assert_int_equal(f->v[3].f[1].kind[2], DCR_CK_FULL);
	assert_int_equal(f->v[4].f[2].kind[0], DCR_CK_DELTA);

	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	assert_int_equal(dcr_reader_latest(f->r), 5);
	assert_int_equal(f->cs->gets_versions, 5);

	/* Cold: v3 first, then v5 from v3's cached chunks (fewer frames
	 * than a cold walk), then everything else. */
	counts_reset(f->cs);
	want = expect_version(f, 3);
	check_version(f, 3);
	assert_int_equal(f->cs->gets_packs, want);

	counts_reset(f->cs);
	want = expect_version(f, 5);
	check_version(f, 5);
	assert_int_equal(f->cs->gets_packs, want);

	for (uint64_t v = 1; v <= 5; v++) {
		dcr_reader_sync(f->r);
		counts_reset(f->cs);
		want = expect_version(f, v);
		check_version(f, v);
		dcr_reader_sync(f->r);
		assert_int_equal(f->cs->gets_packs, want);
	}
	/* Everything is cached now: no more fetches. */
	counts_reset(f->cs);
	for (uint64_t v = 1; v <= 5; v++)
		check_version(f, v);
	assert_int_equal(f->cs->gets_packs, 0);
	assert_int_equal(log_errors, 0);
}

static void test_chain_fully_cold(void **state)
{
	struct fx *f = *state;
	unsigned want;

	build_chain(f, 5);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	counts_reset(f->cs);
	want = expect_version(f, 5);
	check_version(f, 5);
	assert_int_equal(f->cs->gets_packs, want);
	/* Random ranges across all versions. */
	for (int i = 0; i < 200; i++) {
		uint64_t s = (uint64_t)i + 1;
		uint64_t v = 1 + tu_rand(&s) % 5;
		const struct tfile *tf = &f->v[v].f[1];
		uint64_t off = tu_rand(&s) % (tf->size + 10);
		size_t len = (size_t)(tu_rand(&s) % (3 * CS));
		uint8_t buf[3 * CS];
		size_t exp = off >= tf->size ? 0 : DCR_MIN(len, tf->size - off);

		assert_int_equal(dcr_reader_read(f->r, v, 2, off, buf, len),
				 (ssize_t)exp);
		assert_memory_equal(buf, tf->data + (off < tf->size ? off : 0),
				    exp);
	}
}

static uint64_t trees_loaded(struct fx *f)
{
	struct dcr_reader_stats s;

	dcr_reader_sync(f->r);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0); /* trims */
	dcr_reader_get_stats(f->r, &s);
	assert_int_equal(s.versions, 5);
	return s.trees_loaded;
}

/* With max_trees, the trees nobody holds are unloaded once the reader
 * is idle, a pinned one never, and an unloaded one reads as before. */
static void test_trees_unloaded(void **state)
{
	struct fx *f = *state;
	const struct dcr_version_info *vi;
	struct dcr_reader_stats s;

	build_chain(f, 5);
	f->max_trees = 2;
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	for (uint64_t v = 1; v <= 5; v++)
		check_version(f, v);
	assert_int_equal(trees_loaded(f), 2);

	/* v1 pinned: kept however old; its tree stays usable */
	assert_int_equal(dcr_reader_version(f->r, 1, &vi), 0);
	for (uint64_t v = 2; v <= 5; v++)
		check_version(f, v);
	assert_int_equal(trees_loaded(f), 2);
	assert_int_equal(vi->version, 1);
	assert_int_equal(vi->nentries, (uint32_t)f->v[1].nfiles + 1);
	assert_string_equal(vi->entries[1].path, f->v[1].f[0].path);
	dcr_reader_version_put(f->r, vi);
	check_version(f, 4);
	check_version(f, 5);
	assert_int_equal(trees_loaded(f), 2);

	/* unloaded ones load again from the catalog, bit-exact */
	counts_reset(f->cs);
	for (uint64_t v = 1; v <= 5; v++)
		check_version(f, v);
	assert_int_equal(f->cs->gets_versions, 0);
	dcr_reader_get_stats(f->r, &s);
	assert_true(s.chunk_hits > 0 && s.bytes_verified > 0 && s.bytes_read > 0);
	assert_int_equal(s.read_errors, 0);
	assert_int_equal(log_errors, 0);
}

static void test_reopen_no_refetch(void **state)
{
	struct fx *f = *state;
	uint64_t latest = 0;

	/* Three versions of SAME, delta and full chunks (v4 of build_chain
	 * is all-delta, whose unchanged chunks only a cache addressed by
	 * content would share). */
	build_chain(f, 3);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	for (uint64_t v = 1; v <= 3; v++)
		check_version(f, v);
	dcr_reader_close(f->r);
	f->r = NULL;

	/* Reopen: the catalog and cache survive; no manifest and no pack
	 * is fetched again. */
	counts_reset(f->cs);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_latest(f->r), 3);
	for (uint64_t v = 1; v <= 3; v++)
		check_version(f, v);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 3);
	assert_int_equal(f->cs->gets_versions, 0);
	assert_int_equal(f->cs->gets_packs, 0);

	/* A new version after the restart: only its manifest is fetched,
	 * and reading it needs only its own frames (v3 is cached). */
	f->v[4].v = 4;
	copy_tree(&f->v[4], &f->v[3]);
	nudge(&f->v[4].f[1], 1, 4, 4242);
	publish(f->st, &f->v[4], &f->v[3], B_AUTO, 0);
	counts_reset(f->cs);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 4);
	assert_int_equal(f->cs->gets_versions, 2); /* v4, probe of v5 */
	check_version(f, 4);
	assert_int_equal(f->cs->gets_packs, 1);
	assert_int_equal(log_errors, 0);
}

/* Bytes allocated to the files below @dir (slabs are sparse). */
static long long dir_bytes(const char *dir)
{
	char cmd[PATH_MAX + 128];
	long long n = -1;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "find '%s' -type f -printf '%%b\\n' | "
		 "awk '{s+=$1 * 512} END {print s+0}'", dir);
	p = popen(cmd, "r");
	if (p) {
		if (fscanf(p, "%lld", &n) != 1)
			n = -1;
		pclose(p);
	}
	return n;
}

static void test_tiny_budget(void **state)
{
	struct fx *f = *state;
	char chunks[PATH_MAX];
	uint8_t id[DCR_HASH_LEN];
	char idhex[DCR_HASH_HEX_LEN + 1];

	build_chain(f, 5);
	f->fetch_threads = 1; /* the sequential path */
	open_reader(f, 2 * CS);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	for (int round = 0; round < 2; round++)
		for (uint64_t v = 5; v >= 1; v--)
			check_version(f, v);
	dcr_reader_sync(f->r); /* the cache is written behind the reads */
	dcr_sha256(f->st->url, strlen(f->st->url), id);
	dcr_hash_hex(id, idhex);
	idhex[16] = 0;
	snprintf(chunks, sizeof(chunks), "%.3000s/%s/slabs", f->cache_dir,
		 idhex);
	assert_int_equal(access(chunks, F_OK), 0);
	assert_true(dir_bytes(chunks) <= 2 * CS);
	assert_int_equal(log_errors, 0);
}

struct rd {
	struct fx *f;
	pthread_barrier_t *bar;
	uint64_t v;
	uint32_t idx;
	uint64_t off;
	size_t len;
	uint8_t *buf;
	ssize_t ret;
	int random;
	int errors;
};

static void *reader_main(void *arg)
{
	struct rd *a = arg;

	pthread_barrier_wait(a->bar);
	if (!a->random) {
		a->ret = dcr_reader_read(a->f->r, a->v, a->idx, a->off, a->buf,
					 a->len);
		return NULL;
	}
	for (int i = 0; i < 100; i++) {
		uint64_t s = (uint64_t)i * 31 + a->v;
		uint64_t v = 1 + tu_rand(&s) % 5;
		int fi = 1 + (int)(tu_rand(&s) % 2);
		const struct tfile *tf = &a->f->v[v].f[fi];
		uint64_t off = tu_rand(&s) % tf->size;
		size_t len = (size_t)(tu_rand(&s) % (2 * CS));
		size_t exp = DCR_MIN(len, tf->size - off);
		ssize_t n = dcr_reader_read(a->f->r, v, (uint32_t)fi + 1, off,
					    a->buf, len);

		if (n != (ssize_t)exp || memcmp(a->buf, tf->data + off, exp))
			a->errors++;
	}
	return NULL;
}

static void test_concurrent_same_chunk(void **state)
{
	struct fx *f = *state;
	pthread_barrier_t bar;
	pthread_t th[8];
	struct rd a[8];
	unsigned want;

	build_chain(f, 5);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	/* Slow pack gets so that all eight readers overlap. */
	f->cs->delay_us = 20000;
	counts_reset(f->cs);
	want = expect_chunk(f, 5, 1, 0);
	assert_true(want >= 2);
	pthread_barrier_init(&bar, NULL, 8);
	for (int i = 0; i < 8; i++) {
		a[i] = (struct rd){ .f = f, .bar = &bar, .v = 5, .idx = 2,
				    .off = (uint64_t)i * 100, .len = 1000 };
		a[i].buf = malloc(a[i].len);
		assert_int_equal(pthread_create(&th[i], NULL, reader_main,
						&a[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(a[i].ret, 1000);
		assert_memory_equal(a[i].buf, f->v[5].f[1].data + i * 100, 1000);
		free(a[i].buf);
	}
	pthread_barrier_destroy(&bar);
	/* One fetch of each frame on the chain, shared by all eight. */
	assert_int_equal(f->cs->gets_packs, want);
	assert_int_equal(log_errors, 0);
}

static void test_concurrent_random(void **state)
{
	struct fx *f = *state;
	pthread_barrier_t bar;
	pthread_t th[8];
	struct rd a[8];

	build_chain(f, 5);
	open_reader(f, 3 * CS); /* tiny: evictions race with reads */
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	pthread_barrier_init(&bar, NULL, 8);
	for (int i = 0; i < 8; i++) {
		a[i] = (struct rd){ .f = f, .bar = &bar, .v = (uint64_t)i,
				    .random = 1 };
		a[i].buf = malloc(2 * CS);
		assert_int_equal(pthread_create(&th[i], NULL, reader_main,
						&a[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(a[i].errors, 0);
		free(a[i].buf);
	}
	pthread_barrier_destroy(&bar);
	assert_int_equal(log_errors, 0);
}

/*
 * A prefetch without a buffer returns once every chunk of its range is
 * in the cache, also a chunk that a read has just built: ready in
 * memory, its write-behind still to come (held back by the hook).
 */
static void test_prefetch_settles_write(void **state)
{
#ifdef DCR_TEST_HOOKS
	struct fx *f = *state;
	uint8_t *buf = malloc(CS);

	build_chain(f, 1);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	setenv("DCRFS_TEST_WRITE_DELAY_MS", "300", 1);
	/* b.bin (entry 3, file 2), chunk 0: built, its write queued. */
	assert_int_equal(dcr_reader_read(f->r, 1, 3, 0, buf, CS), CS);
	assert_memory_equal(buf, f->v[1].f[2].data, CS);
	assert_false(in_slab(f, 1, 2, 0));
	assert_int_equal(dcr_reader_prefetch(f->r, 1, 0, 3, 0, NULL, CS), CS);
	assert_true(in_slab(f, 1, 2, 0));
	dcr_reader_sync(f->r);
	unsetenv("DCRFS_TEST_WRITE_DELAY_MS");
	assert_int_equal(log_errors, 0);
	free(buf);
#else
	(void)state;
	tu_missing("needs the write-behind hook DCRFS_TEST_WRITE_DELAY_MS "
		   "(configure --enable-test-hooks)");
#endif
}

/* S6: one reader per cache directory; the second is told who has it. */
static void test_cache_dir_locked(void **state)
{
	struct fx *f = *state;
	struct dcr_reader_opts o = { .cache_dir = f->cache_dir };
	struct dcr_reader *r2 = NULL;
	char want[64];

	build_chain(f, 1);
	open_reader(f, 0);
	log_reset();
	assert_int_equal(dcr_reader_open(f->st, &o, &r2), -EBUSY);
	assert_null(r2);
	assert_int_equal(log_errors, 1);
	assert_non_null(strstr(log_last, f->cache_dir));
	assert_non_null(strstr(log_last, "in use by another dcrfs"));
	snprintf(want, sizeof(want), "(pid %ld)", (long)getpid());
	assert_non_null(strstr(log_last, want));
	/* Released on close. */
	dcr_reader_close(f->r);
	f->r = NULL;
	assert_int_equal(dcr_reader_open(f->st, &o, &r2), 0);
	assert_int_equal(dcr_reader_refresh(r2, NULL), 0);
	dcr_reader_close(r2);
}

/* Write @t's tree below @dir (for dcr_commit). */
static void write_tree(const struct tver *t, const char *dir)
{
	char path[PATH_MAX];

	assert_int_equal(tu_mkdir_p(dir), 0);
	for (int i = 0; i < t->nfiles; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, t->f[i].path);
		if (t->f[i].dir)
			assert_int_equal(tu_mkdir_p(path), 0);
		else
			assert_int_equal(tu_write_file(path, t->f[i].data,
						       t->f[i].size), 0);
	}
}

static void test_commit_roundtrip(void **state)
{
	struct fx *f = *state;
	char dirs[4][PATH_MAX];
	struct dcr_manifest pm;
	struct dcr_commit_result res;

	/* Three versions of a tree, committed with the real pipeline. */
	f->v[1].v = 1;
	add_file(&f->v[1], "a", 1, 0, 0);
	add_file(&f->v[1], "a/w.bin", 0, 7 * CS + 3, 21);
	add_file(&f->v[1], "z.bin", 0, 2 * CS, 22);
	for (int v = 2; v <= 3; v++) {
		f->v[v].v = (uint64_t)v;
		copy_tree(&f->v[v], &f->v[v - 1]);
		nudge(&f->v[v].f[1], (uint64_t)v, 12, (uint64_t)v * 7);
		nudge(&f->v[v].f[1], 0, 3, (uint64_t)v * 9);
	}
	memset(&pm, 0, sizeof(pm));
	for (int v = 1; v <= 3; v++) {
		struct dcr_commit_opts o = { 0 };

		snprintf(dirs[v], sizeof(dirs[v]), "%s/tree%d", f->root, v);
		write_tree(&f->v[v], dirs[v]);
		o.chunk_size = CS;
		o.jobs = 2;
		if (v > 1) {
			o.parent = (uint64_t)v - 1;
			o.parent_manifest = &pm;
			o.parent_dir = dirs[v - 1];
		}
		assert_int_equal(dcr_commit(f->st, dirs[v], &o, &res), 0);
		assert_int_equal(res.version, (uint64_t)v);
		if (v > 1)
			assert_true(res.chunks_delta + res.chunks_same > 0);
		dcr_manifest_free(&pm);
		assert_int_equal(dcr_store_get_manifest(f->st, (uint64_t)v, &pm),
				 0);
	}
	dcr_manifest_free(&pm);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	assert_int_equal(dcr_reader_latest(f->r), 3);
	for (uint64_t v = 3; v >= 1; v--)
		check_version(f, v);
	assert_int_equal(log_errors, 0);
}


/* Distinct packs holding the frames of chunks [0, n) of file @fi of v1. */
static unsigned v1_packs(struct fx *f, int fi, uint64_t n)
{
	unsigned seen = 0, count = 0;

	for (uint64_t k = 0; k < n; k++) {
		unsigned bit = 1u << f->v[1].f[fi].pack[k];

		if (!(seen & bit))
			count++;
		seen |= bit;
	}
	return count;
}

static void test_coalesce(void **state)
{
	struct fx *f = *state;
	unsigned frames, packs;

	build_chain(f, 1);
	f->coalesce_max = 1 << 20;
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	/* a/w.bin: 6 full frames, written one after the other. */
	frames = expect_version(f, 1);
	packs = v1_packs(f, 1, 6);
	counts_reset(f->cs);
	check_file(f, 1, 2);
	/* One ranged GET per pack instead of one per frame. */
	assert_int_equal(f->cs->gets_packs, packs);
	assert_true(packs < 6);
	check_version(f, 1);
	assert_true(f->cs->gets_packs < frames);
	assert_int_equal(log_errors, 0);

	/* A chain (v5 cold) coalesces too, and stays correct. */
	dcr_reader_close(f->r);
	f->r = NULL;
	tu_rm_rf(f->cache_dir);
	for (int v = 2; v <= 5; v++) {
		struct tver *t = &f->v[v];

		t->v = (uint64_t)v;
		copy_tree(t, &f->v[v - 1]);
		nudge(&t->f[1], 0, 20, (uint64_t)v * 100);
		nudge(&t->f[1], 5, 3, (uint64_t)v * 100 + 5);
		publish(f->st, t, &f->v[v - 1], B_AUTO, 0);
		f->nv = v;
	}
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	f->ncached = 0;
	frames = expect_version(f, 5);
	counts_reset(f->cs);
	check_version(f, 5);
	assert_true(f->cs->gets_packs < frames);
	assert_int_equal(log_errors, 0);
}

static void test_readahead(void **state)
{
	struct fx *f = *state;
	const struct tfile *tf;
	uint8_t buf[CS];
	char key[128];
	int all = 0;

	build_chain(f, 1);
	tf = &f->v[1].f[1];
	f->readahead = 64 * CS;
	f->coalesce_max = 2 * CS; /* several jobs, several GETs */
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	/* A read at offset 0 starts read-ahead of the rest of a/w.bin. */
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 0, buf, 10), 10);
	for (int i = 0; i < 500 && !all; i++) {
		all = 1;
		for (uint64_t k = 0; k < 6; k++)
			if (!in_slab(f, 1, 1, k))
				all = 0;
		if (!all)
			usleep(10000);
	}
	assert_true(all);
	counts_reset(f->cs);
	check_file(f, 1, 2);
	assert_int_equal(f->cs->gets_packs, 0);
	assert_int_equal(log_errors, 0);

	/* Read-ahead of a corrupt frame fails quietly; the read that needs
	 * it fails with one line, and the rest of the file reads. */
	dcr_reader_close(f->r);
	f->r = NULL;
	tu_rm_rf(f->cache_dir);
	corrupt_frame(f, 1, 1, 3, DCR_FRAME_HDR_LEN + 100, key, sizeof(key));
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	log_reset();
	for (uint64_t k = 0; k < 6; k++) {
		uint32_t n = (uint32_t)dcr_chunk_len(tf->size, CS, k);
		ssize_t got = dcr_reader_read(f->r, 1, 2, k * CS, buf, CS);

		if (k == 3) {
			assert_int_equal(got, -EIO);
			continue;
		}
		assert_int_equal(got, n);
		assert_memory_equal(buf, tf->data + k * CS, n);
	}
	assert_int_equal(log_errors, 1);
	assert_non_null(strstr(log_last, key));
}

/* Format 1 manifests (older stores): proven by SHA-256, same bytes. */
static void test_format1_store(void **state)
{
	g_format = 1;
	test_chain_fully_cold(state);
}

/*
 * tests/golden/store-format1: two versions committed by dcrfs-commit
 * before format 2 (4 KiB chunks; v2 changes two chunks of sub/w.bin).
 * The new reader reads them, proven by SHA-256, and each file's bytes
 * hash to what its manifest says.
 */
static void test_golden_format1_store(void **state)
{
	static const char *const want_hex[] = {
		/* v2 a.txt, sub/w.bin */
		"5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03",
		"b8ab1902ed1a029ebd0fc71ed7e1053106de8876493d057a35b69b33b8919630",
	};
	struct fx *f = *state;
	char cmd[2 * PATH_MAX];
	uint8_t want[DCR_HASH_LEN], got[DCR_HASH_LEN], buf[4 * 4096];
	uint64_t latest = 0;

	snprintf(cmd, sizeof(cmd), "cp -r '%s/store-format1/versions' "
		 "'%s/store-format1/packs' '%s/'", DCR_GOLDEN_DIR,
		 DCR_GOLDEN_DIR, f->store_dir);
	assert_int_equal(system(cmd), 0);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 2);
	for (uint32_t idx = 1, k = 0; idx <= 3; idx++) {
		ssize_t n;

		if (idx == 2)
			continue; /* "sub", the directory */
		n = dcr_reader_read(f->r, 2, idx, 0, buf, sizeof(buf));
		assert_true(n > 0);
		dcr_sha256(buf, (size_t)n, got);
		assert_int_equal(dcr_hash_unhex(want_hex[k++], want), 0);
		assert_memory_equal(got, want, DCR_HASH_LEN);
	}
	/* v1's w.bin differs from v2's in exactly two bytes. */
	{
		uint8_t v1[4 * 4096];
		ssize_t n1 = dcr_reader_read(f->r, 1, 3, 0, v1, sizeof(v1));
		ssize_t n2 = dcr_reader_read(f->r, 2, 3, 0, buf, sizeof(buf));
		int diff = 0;

		assert_int_equal(n1, 3 * 4096 + 100);
		assert_int_equal(n2, n1);
		for (ssize_t i = 0; i < n1; i++)
			diff += v1[i] != buf[i];
		assert_int_equal(diff, 2);
	}
	assert_int_equal(log_errors, 0);
}

/* A store that switched format mid-chain: v1-v2 format 1, v3- format 2;
 * chains that mix them are proven by the chunk's SHA-256. */
static void test_mixed_format_chain(void **state)
{
	struct fx *f = *state;

	g_format = 1;
	g_format_from = 3;
	build_chain(f, 5);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	for (uint64_t v = 5; v >= 1; v--)
		check_version(f, v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
		T(test_tree_and_boundaries),
		T(test_chain_cold_and_cached_base),
		T(test_chain_fully_cold),
		T(test_trees_unloaded),
		T(test_reopen_no_refetch),
		T(test_tiny_budget),
		T(test_concurrent_same_chunk),
		T(test_concurrent_random),
		T(test_commit_roundtrip),
		T(test_coalesce),
		T(test_readahead),
		T(test_cache_dir_locked),
		T(test_prefetch_settles_write),
		T(test_format1_store),
		T(test_mixed_format_chain),
		T(test_golden_format1_store),
#undef T
	};

	dcr_log_set_prog("test_reader");
	dcr_log_set_sink(log_sink);
	return tu_exit("test_reader", cmocka_run_group_tests(tests, NULL, NULL));
}
