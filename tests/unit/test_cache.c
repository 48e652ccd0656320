/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for cache/cache.c: the slab cache on a real file system.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "testutil.h"

#include "cache.h"
#include "chunk.h"
#include "common.h"
#include "hash.h"

#define CS 8192        /* chunk size */
#define NCH 6          /* chunks per file */
#define LAST 1000      /* the last chunk's length */
#define FSIZE ((NCH - 1) * CS + LAST)

struct fixture {
	char *dir;
	struct dcr_cache *cache;
	/* file data of versions 1..3, file 0 */
	uint8_t *data[4];
	uint8_t hash[4][NCH][DCR_HASH_LEN];
	uint8_t xxh[4][NCH][DCR_XXH_LEN];
};

static void open_cache(struct fixture *f, uint64_t budget)
{
	assert_int_equal(dcr_cache_open(f->dir, budget, &f->cache), 0);
}

static void close_cache(struct fixture *f)
{
	dcr_cache_close(f->cache);
	f->cache = NULL;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	f->dir = tu_mkdtemp("cache");
	for (int v = 1; v < 4; v++) {
		f->data[v] = aligned_alloc(DCR_CACHE_ALIGN, NCH * CS);
		tu_fill(f->data[v], NCH * CS, (uint64_t)v);
		for (uint64_t i = 0; i < NCH; i++) {
			uint32_t len = dcr_chunk_len(FSIZE, CS, i);
			dcr_sha256(f->data[v] + i * CS, len, f->hash[v][i]);
			dcr_xxh128(f->data[v] + i * CS, len, f->xxh[v][i]);
		}
	}
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	close_cache(f);
	tu_rm_rf(f->dir);
	free(f->dir);
	for (int v = 1; v < 4; v++)
		free(f->data[v]);
	free(f);
	return 0;
}

/* The key of chunk @i of version @v (file 0); format 2 unless @sha_only. */
static struct dcr_cache_key key(struct fixture *f, uint64_t v, uint64_t i,
				bool sha_only)
{
	struct dcr_cache_key k = {
		.v = v,
		.file = 0,
		.chunk = i,
		.file_size = FSIZE,
		.chunk_size = CS,
		.len = dcr_chunk_len(FSIZE, CS, i),
		.hash = f->hash[v][i],
		.xxh = sha_only ? NULL : f->xxh[v][i],
	};
	return k;
}

static void put(struct fixture *f, uint64_t v, uint64_t i, unsigned flags)
{
	struct dcr_cache_key k = key(f, v, i, false);

	assert_int_equal(dcr_cache_put(f->cache, &k, f->data[v] + i * CS,
				       flags), 0);
}

static int get(struct fixture *f, uint64_t v, uint64_t i, uint8_t *buf)
{
	struct dcr_cache_key k = key(f, v, i, false);

	return dcr_cache_read(f->cache, &k, 0, buf, k.len);
}

static void slab_path(struct fixture *f, uint64_t v, char *buf, size_t cap)
{
	dcr_cache_slab_path(f->cache, v, 0, buf, cap);
}

/* Chunks are found again after a reopen, whole or in slices, and the
 * slab is one sparse file as long as the file. */
static void test_put_read(void **state)
{
	struct fixture *f = *state;
	uint8_t *buf = aligned_alloc(DCR_CACHE_ALIGN, CS);
	struct dcr_cache_stats st;
	char path[PATH_MAX];
	struct stat sb;

	open_cache(f, 0);
	assert_int_equal(get(f, 1, 0, buf), -ENOENT);
	put(f, 1, 0, 0);
	put(f, 1, 2, DCR_CACHE_PUT_DIRECT);
	put(f, 1, NCH - 1, DCR_CACHE_PUT_DIRECT); /* short last chunk */
	for (int pass = 0; pass < 2; pass++) {
		for (uint64_t i = 0; i < NCH; i++) {
			int want = i == 0 || i == 2 || i == NCH - 1 ? 0 : -ENOENT;
			uint32_t len = dcr_chunk_len(FSIZE, CS, i);

			memset(buf, 0, CS);
			assert_int_equal(get(f, 1, i, buf), want);
			if (!want)
				assert_memory_equal(buf, f->data[1] + i * CS,
						    len);
		}
		/* A slice. */
		{
			struct dcr_cache_key k = key(f, 1, 2, false);
			uint8_t small[100];

			assert_int_equal(dcr_cache_read(f->cache, &k, 333,
							small, 100), 0);
			assert_memory_equal(small, f->data[1] + 2 * CS + 333,
					    100);
		}
		dcr_cache_get_stats(f->cache, &st);
		assert_int_equal(st.bytes, 2 * CS + DCR_ROUND_UP(LAST, 4096));
		close_cache(f);
		open_cache(f, 0);
	}
	slab_path(f, 1, path, sizeof(path));
	assert_int_equal(stat(path, &sb), 0);
	assert_true((uint64_t)sb.st_size >= FSIZE);
	assert_int_equal(sb.st_mode & 0777, 0600);
	assert_true((uint64_t)sb.st_blocks * 512 < FSIZE); /* sparse */
	free(buf);
}

/* Flip byte @at of @path in place and put its times back (bit rot). */
static void rot(const char *path, off_t at)
{
	struct timespec ts[2];
	struct stat a, b;
	uint8_t byte;
	int fd;

	assert_int_equal(stat(path, &a), 0);
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &byte, 1, at), 1);
	byte ^= 0x01;
	assert_int_equal(pwrite(fd, &byte, 1, at), 1);
	close(fd);
	ts[0] = a.st_atim;
	ts[1] = a.st_mtim;
	assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
	assert_int_equal(stat(path, &b), 0);
	assert_int_equal(a.st_ino, b.st_ino);
	assert_int_equal(a.st_size, b.st_size);
	assert_int_equal(a.st_mtim.tv_sec, b.st_mtim.tv_sec);
	assert_int_equal(a.st_mtim.tv_nsec, b.st_mtim.tv_nsec);
}

/*
 * Silent corruption: a byte flipped under the same inode, size and times
 * is caught on the first use after a reopen, through the copy, check and
 * descriptor paths, with format 2 (XXH3-128) and format 1 (SHA-256)
 * keys; the chunk is punched out, and storing it again heals it.
 */
static void test_bit_rot_is_caught(void **state)
{
	struct fixture *f = *state;
	uint8_t *buf = aligned_alloc(DCR_CACHE_ALIGN, CS);
	struct dcr_cache_stats st;
	struct dcr_cache_pin *pin = NULL;
	struct dcr_cache_key k;
	char path[PATH_MAX];

	open_cache(f, 0);
	for (uint64_t i = 0; i < NCH; i++)
		put(f, 1, i, i & 1 ? DCR_CACHE_PUT_DIRECT : 0);
	slab_path(f, 1, path, sizeof(path));
	close_cache(f);
	rot(path, 0 * CS + 5);
	rot(path, 1 * CS + CS - 1);
	rot(path, 2 * CS + 77);
	rot(path, 5 * CS + LAST - 1);

	open_cache(f, 0);
	/* Not proven in this instance yet: no file to hand the kernel. */
	k = key(f, 1, 3, false);
	assert_int_equal(dcr_cache_pin(f->cache, &k, 0, &pin), -EAGAIN);
	assert_null(pin);
	assert_int_equal(get(f, 1, 0, buf), -ENOENT);
	k = key(f, 1, 1, false);
	assert_int_equal(dcr_cache_check(f->cache, &k), -ENOENT);
	k = key(f, 1, 2, true); /* format 1: SHA-256 */
	assert_int_equal(dcr_cache_read(f->cache, &k, 0, buf, CS), -ENOENT);
	k = key(f, 1, 5, false);
	assert_int_equal(dcr_cache_read(f->cache, &k, LAST - 1, buf, 1),
			 -ENOENT);
	/* The intact ones are fine; still not whole: nothing to pin. */
	assert_int_equal(get(f, 1, 3, buf), 0);
	assert_memory_equal(buf, f->data[1] + 3 * CS, CS);
	k = key(f, 1, 4, true);
	assert_int_equal(dcr_cache_check(f->cache, &k), 1);
	assert_int_equal(dcr_cache_check(f->cache, &k), 0);
	assert_int_equal(dcr_cache_pin(f->cache, &k, 0, &pin), -EAGAIN);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.corrupt, 4);
	assert_int_equal(st.bytes, 2 * CS);
	/* Stored again: whole again, after a reopen too. */
	put(f, 1, 0, 0);
	put(f, 1, 5, DCR_CACHE_PUT_DIRECT);
	close_cache(f);
	open_cache(f, 0);
	assert_int_equal(get(f, 1, 0, buf), 0);
	assert_memory_equal(buf, f->data[1], CS);
	assert_int_equal(get(f, 1, 5, buf), 0);
	assert_memory_equal(buf, f->data[1] + 5 * CS, LAST);
	assert_int_equal(get(f, 1, 1, buf), -ENOENT);
	free(buf);
}

/*
 * Partial reads check only the 64 KiB sub-blocks they cover once the
 * chunk was proven whole in this instance: a byte rotten elsewhere in
 * the chunk does not fail them, one rotten in what they cover does (and
 * its chunk is punched out); a new instance starts with no sums.
 */
#define PCS ((uint32_t)256 << 10) /* four sub-blocks */
#define PSIZE ((uint64_t)PCS + 1000)
static void test_partial_reads(void **state)
{
	struct fixture *f = *state;
	uint8_t *data = aligned_alloc(DCR_CACHE_ALIGN, 2 * PCS);
	uint8_t *whole = aligned_alloc(DCR_CACHE_ALIGN, PCS);
	uint8_t *buf = malloc(PCS);
	uint8_t hash[2][DCR_HASH_LEN], xxh[2][DCR_XXH_LEN];
	struct dcr_cache_key k[2];
	struct dcr_cache_stats st;
	char path[PATH_MAX];

	tu_fill(data, 2 * PCS, 99);
	for (int i = 0; i < 2; i++) {
		k[i] = (struct dcr_cache_key){
			.v = 9, .file = 0, .chunk = (uint64_t)i,
			.file_size = PSIZE, .chunk_size = PCS,
			.len = dcr_chunk_len(PSIZE, PCS, (uint64_t)i),
			.hash = hash[i], .xxh = xxh[i],
		};
		dcr_sha256(data + i * PCS, k[i].len, hash[i]);
		dcr_xxh128(data + i * PCS, k[i].len, xxh[i]);
	}
	open_cache(f, 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(dcr_cache_put(f->cache, &k[i], data + i * PCS,
					       0), 0);
	dcr_cache_slab_path(f->cache, 9, 0, path, sizeof(path));
	close_cache(f);

	open_cache(f, 0);
	/* No sums yet: read whole into @whole, checked, sums kept. */
	assert_int_equal(dcr_cache_read_part(f->cache, &k[0], 65546, buf, 100,
					     whole), 1);
	assert_memory_equal(whole, data, PCS);
	assert_memory_equal(buf, data + 65546, 100);
	assert_int_equal(dcr_cache_read_part(f->cache, &k[0], 65546, buf, 100,
					     whole), 0);
	assert_memory_equal(buf, data + 65546, 100);
	/* Rot in sub-block 0: a read of sub-block 2 checks only that. */
	rot(path, 5);
	memset(buf, 0, PCS);
	assert_int_equal(dcr_cache_read(f->cache, &k[0], 2 * 65536, buf,
					65536), 0);
	assert_memory_equal(buf, data + 2 * 65536, 65536);
	/* One that covers it fails, and the chunk is punched out. */
	assert_int_equal(dcr_cache_read(f->cache, &k[0], 60000, buf, 10000),
			 -ENOENT);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.corrupt, 1);
	assert_int_equal(dcr_cache_read(f->cache, &k[0], 2 * 65536, buf,
					65536), -ENOENT);
	/* Stored again: the same content, so the sums its file kept from
	 * the first proof still check its parts (no whole read). */
	assert_int_equal(dcr_cache_put(f->cache, &k[0], data, 0), 0);
	assert_int_equal(dcr_cache_read_part(f->cache, &k[0], 0, buf, 10,
					     whole), 0);
	assert_memory_equal(buf, data, 10);
	rot(path, 3 * 65536 + 7);
	assert_int_equal(dcr_cache_read(f->cache, &k[0], 3 * 65536, buf, 100),
			 -ENOENT);
	/* The short last chunk: its one short sub-block. */
	assert_int_equal(dcr_cache_read(f->cache, &k[1], 10, buf, 20), 0);
	assert_int_equal(dcr_cache_read(f->cache, &k[1], 990, buf, 10), 0);
	assert_memory_equal(buf, data + PCS + 990, 10);
	close_cache(f);

	/* A new instance has the sums the file kept: the rot in chunk 1's
	 * one sub-block is seen. */
	rot(path, PCS + 5);
	open_cache(f, 0);
	assert_int_equal(dcr_cache_read(f->cache, &k[1], 990, buf, 10),
			 -ENOENT);
	free(buf);
	free(whole);
	free(data);
}

/*
 * Sums outlive the instance that computed them (the slab's sums file): a
 * partial read in a new instance checks only its sub-blocks, never
 * serves a rotten one, and a rotten or foreign sums entry only costs a
 * whole read.
 */
static void test_sums_persist(void **state)
{
	struct fixture *f = *state;
	uint8_t *data = aligned_alloc(DCR_CACHE_ALIGN, PCS);
	uint8_t *whole = aligned_alloc(DCR_CACHE_ALIGN, PCS);
	uint8_t *buf = malloc(PCS);
	uint8_t hash[DCR_HASH_LEN], xxh[DCR_XXH_LEN];
	struct dcr_cache_key k = {
		.v = 7, .file = 1, .chunk = 0, .file_size = PCS,
		.chunk_size = PCS, .len = PCS, .hash = hash, .xxh = xxh,
	};
	struct dcr_cache_stats st;
	char path[PATH_MAX], spath[PATH_MAX + 8];

	tu_fill(data, PCS, 7);
	dcr_sha256(data, PCS, hash);
	dcr_xxh128(data, PCS, xxh);
	open_cache(f, 0);
	assert_int_equal(dcr_cache_put(f->cache, &k, data, 0), 0);
	/* The first partial read proves the chunk whole and keeps sums. */
	assert_int_equal(dcr_cache_read_part(f->cache, &k, 70000, buf, 100,
					     whole), 1);
	assert_memory_equal(buf, data + 70000, 100);
	dcr_cache_slab_path(f->cache, 7, 1, path, sizeof(path));
	snprintf(spath, sizeof(spath), "%s.sums", path);
	assert_int_equal(access(spath, F_OK), 0);
	close_cache(f);

	/* A new instance: the parts are checked against the kept sums. */
	open_cache(f, 0);
	memset(whole, 0, PCS);
	assert_int_equal(dcr_cache_read_part(f->cache, &k, 70000, buf, 100,
					     whole), 0);
	assert_memory_equal(buf, data + 70000, 100);
	/* Rot in sub-block 3 is not read by a read of sub-block 1 ... */
	rot(path, 3 * 65536 + 11);
	assert_int_equal(dcr_cache_read(f->cache, &k, 65536, buf, 65536), 0);
	assert_memory_equal(buf, data + 65536, 65536);
	/* ... and a read that covers it fails and punches the chunk. */
	assert_int_equal(dcr_cache_read(f->cache, &k, 3 * 65536, buf, 10),
			 -ENOENT);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.corrupt, 1);
	close_cache(f);

	/* A rotten sum: the part is read whole, proven, and served right;
	 * the entry is written again and checks the next one. */
	open_cache(f, 0);
	assert_int_equal(dcr_cache_put(f->cache, &k, data, 0), 0);
	close_cache(f);
	rot(spath, DCR_XXH_LEN + 5); /* sub-block 0's sum */
	open_cache(f, 0);
	assert_int_equal(dcr_cache_read_part(f->cache, &k, 10, buf, 100,
					     whole), 1);
	assert_memory_equal(buf, data + 10, 100);
	close_cache(f);
	open_cache(f, 0);
	assert_int_equal(dcr_cache_read_part(f->cache, &k, 10, buf, 100,
					     whole), 0);
	assert_memory_equal(buf, data + 10, 100);
	close_cache(f);

	/* Sums kept for other content (the entry names another check
	 * value) are not used: a store recreated under this cache. */
	rot(spath, 0);
	open_cache(f, 0);
	assert_int_equal(dcr_cache_read_part(f->cache, &k, 10, buf, 100,
					     whole), 1);
	close_cache(f);

	/* The sums file goes with its slab; one left behind alone (a
	 * crash) is removed at open. */
	open_cache(f, 0);
	assert_int_equal(dcr_cache_drop_version(f->cache, 7, 1) > 0, 1);
	assert_int_equal(access(spath, F_OK), -1);
	close_cache(f);
	assert_int_equal(close(open(spath, O_CREAT | O_WRONLY, 0600)), 0);
	open_cache(f, 0);
	assert_int_equal(access(spath, F_OK), -1);
	close_cache(f);
	free(buf);
	free(whole);
	free(data);
}

/*
 * A chunk whose slot holds other bytes (a store recreated under the same
 * cache directory: same version number, other content) is never served.
 */
static void test_other_content_refused(void **state)
{
	struct fixture *f = *state;
	uint8_t *buf = aligned_alloc(DCR_CACHE_ALIGN, CS);
	struct dcr_cache_key k;

	open_cache(f, 0);
	put(f, 1, 0, 0);
	close_cache(f);
	open_cache(f, 0);
	/* Version 1 chunk 0 "is now" version 2's bytes. */
	k = key(f, 1, 0, false);
	k.hash = f->hash[2][0];
	k.xxh = f->xxh[2][0];
	assert_int_equal(dcr_cache_read(f->cache, &k, 0, buf, CS), -ENOENT);
	/* A different chunk size: the slab is replaced, not misread. */
	put(f, 1, 1, 0);
	k = key(f, 1, 0, false);
	k.chunk_size = CS * 2;
	k.len = CS * 2;
	assert_int_equal(dcr_cache_read(f->cache, &k, 0, buf, 16), -ENOENT);
	assert_int_equal(get(f, 1, 1, buf), -ENOENT);
	free(buf);
}

/*
 * A version re-indexed in this instance (dcr_cache_drop_version): its
 * slabs go - proven chunks included, which would otherwise be served
 * unchecked - and keys of the old index (a lower gen) are refused from
 * then on, even a put that was in flight, while the new index's work.
 */
static void test_drop_version(void **state)
{
	struct fixture *f = *state;
	uint8_t *buf = aligned_alloc(DCR_CACHE_ALIGN, CS);
	struct dcr_cache_key k;
	char path[PATH_MAX];
	struct stat sb;

	open_cache(f, 0);
	put(f, 1, 0, 0);
	put(f, 1, 1, 0);
	put(f, 2, 0, 0);
	assert_int_equal(get(f, 1, 0, buf), 0); /* proven */
	assert_int_equal(dcr_cache_drop_version(f->cache, 1, 1), 1);
	slab_path(f, 1, path, sizeof(path));
	assert_int_equal(stat(path, &sb), -1);
	/* The old index: misses, and stores nothing. */
	assert_int_equal(get(f, 1, 0, buf), -ENOENT);
	k = key(f, 1, 0, false);
	assert_int_equal(dcr_cache_put(f->cache, &k, f->data[1], 0), -ESTALE);
	assert_int_equal(stat(path, &sb), -1);
	/* The new index (gen 1) of version 1 holds other bytes. */
	k = key(f, 1, 0, false);
	k.gen = 1;
	k.hash = f->hash[3][0];
	k.xxh = f->xxh[3][0];
	assert_int_equal(dcr_cache_read(f->cache, &k, 0, buf, CS), -ENOENT);
	assert_int_equal(dcr_cache_put(f->cache, &k, f->data[3], 0), 0);
	assert_int_equal(dcr_cache_read(f->cache, &k, 0, buf, CS), 0);
	assert_memory_equal(buf, f->data[3], CS);
	/* Other versions are untouched. */
	assert_int_equal(get(f, 2, 0, buf), 0);
	assert_memory_equal(buf, f->data[2], CS);
	free(buf);
}

/* Read the whole file through @fd and compare it with version @v's. */
static void assert_file(struct fixture *f, int fd, uint64_t v)
{
	uint8_t *buf = malloc(FSIZE + 1);
	struct stat sb;

	assert_int_equal(fstat(fd, &sb), 0);
	assert_int_equal(sb.st_size, FSIZE); /* no padding past the end */
	assert_int_equal(pread(fd, buf, FSIZE + 1, 0), FSIZE);
	assert_memory_equal(buf, f->data[v], FSIZE);
	free(buf);
}

/*
 * A pinned slab (a backing file for FUSE passthrough) is whole, as long
 * as the file, and never changes while pinned: the budget passes over
 * it, a dropped version unlinks it (its bytes counted until the last
 * unpin), and a chunk of it that fails a later check unlinks it instead
 * of punching a hole the kernel would read as zeros.
 */
static void test_pin(void **state)
{
	struct fixture *f = *state;
	uint8_t *buf = aligned_alloc(DCR_CACHE_ALIGN, CS);
	struct dcr_cache_pin *p1 = NULL, *p2 = NULL, *p3 = NULL;
	struct dcr_cache_stats st;
	struct dcr_cache_key k;
	char path[PATH_MAX];
	struct stat sb;
	int fd1, fd2, fd3;

	open_cache(f, 3 * NCH * CS);
	for (uint64_t i = 0; i + 1 < NCH; i++)
		put(f, 1, i, DCR_CACHE_PUT_DIRECT);
	k = key(f, 1, 0, false);
	assert_int_equal(dcr_cache_pin(f->cache, &k, 0, &p1), -EAGAIN);
	put(f, 1, NCH - 1, DCR_CACHE_PUT_DIRECT); /* pads to 4 KiB */
	fd1 = dcr_cache_pin(f->cache, &k, 0, &p1);
	assert_true(fd1 >= 0);
	assert_non_null(p1);
	assert_file(f, fd1, 1);
	/* Two pins of one slab share it. */
	fd2 = dcr_cache_pin(f->cache, &k, 0, &p2);
	assert_true(fd2 >= 0);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.pinned, 2);

	/* The budget (three files) passes over the pinned slab: v2, v3 and
	 * v1 again do not fit with it, the others go. */
	for (uint64_t v = 2; v < 4; v++)
		for (uint64_t i = 0; i < NCH; i++)
			put(f, v, i, 0);
	slab_path(f, 1, path, sizeof(path));
	assert_int_equal(stat(path, &sb), 0);
	assert_file(f, fd1, 1);

	/* Rot found in a pinned slab by a normal read: it is unlinked, not
	 * punched; the pinned descriptors still read every byte. */
	dcr_cache_unpin(f->cache, p2);
	close(fd2);
	{
		int rw = open(path, O_RDWR);
		uint8_t x;
		assert_true(rw >= 0);
		assert_int_equal(pread(rw, &x, 1, 2 * CS + 3), 1);
		x ^= 0x40;
		assert_int_equal(pwrite(rw, &x, 1, 2 * CS + 3), 1);
		close(rw);
	}
	assert_int_equal(get(f, 1, 2, buf), -ENOENT); /* checked: caught */
	assert_int_equal(stat(path, &sb), -1);        /* unlinked whole */
	{
		uint8_t *all = malloc(FSIZE);
		assert_int_equal(pread(fd1, all, FSIZE, 0), FSIZE);
		for (uint64_t i = 0; i < FSIZE; i++)
			if (i != 2 * CS + 3)
				assert_int_equal(all[i], f->data[1][i]);
		free(all);
	}
	/* Stored again into a new slab, pinned anew. */
	for (uint64_t i = 0; i < NCH; i++)
		put(f, 1, i, 0);
	fd3 = dcr_cache_pin(f->cache, &k, 0, &p3);
	assert_true(fd3 >= 0);
	assert_file(f, fd3, 1);

	/* A dropped version's pinned slab: unlinked, its bytes counted
	 * until the last unpin. */
	dcr_cache_get_stats(f->cache, &st);
	uint64_t before = st.bytes;
	assert_int_equal(dcr_cache_drop_version(f->cache, 1, 1), 1);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.bytes, before);
	assert_file(f, fd3, 1);
	dcr_cache_unpin(f->cache, p3);
	close(fd3);
	dcr_cache_get_stats(f->cache, &st);
	assert_true(st.bytes < before);
	dcr_cache_unpin(f->cache, p1);
	close(fd1);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.pinned, 0);
	free(buf);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/*
 * The budget evicts whole slabs, least recently used first (across a
 * reopen too: a slab's last use is its mtime), and, when one slab alone
 * exceeds it, that slab too (a slab is never cut into: readers of its
 * proven chunks must never see a hole).
 */
/* Room asked for by the catalog: the least recently used slabs go, and
 * once there is nothing left to evict it says so; the next put, on a
 * file system with room, is within the whole budget again. */
static void test_make_room(void **state)
{
	struct fixture *f = *state;
	uint8_t *buf = aligned_alloc(DCR_CACHE_ALIGN, CS);
	struct dcr_cache_stats st;

	open_cache(f, 10 * CS);
	for (uint64_t v = 1; v < 4; v++) {
		put(f, v, 0, 0);
		sleep_ms(20);
	}
	assert_int_equal(dcr_cache_make_room(f->cache, CS), 0);
	assert_int_equal(get(f, 1, 0, buf), -ENOENT);
	assert_int_equal(get(f, 2, 0, buf), 0);
	assert_int_equal(get(f, 3, 0, buf), 0);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.bytes, 2 * CS);
	assert_int_equal(dcr_cache_room_hook(f->cache, 2 * CS), 0);
	assert_int_equal(dcr_cache_make_room(f->cache, CS), -ENOSPC);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.bytes, 0);
	for (uint64_t i = 0; i < 3; i++)
		put(f, 1, i, 0);
	put(f, 2, 0, 0);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.bytes, 4 * CS);
	free(buf);
}

static void test_eviction(void **state)
{
	struct fixture *f = *state;
	uint8_t *buf = aligned_alloc(DCR_CACHE_ALIGN, CS);
	struct dcr_cache_stats st;
	char path[PATH_MAX];

	open_cache(f, 3 * CS);
	put(f, 1, 0, 0);
	put(f, 1, 1, 0);
	sleep_ms(20);
	put(f, 2, 0, 0);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.bytes, 3 * CS);
	assert_int_equal(st.evictions, 0);
	sleep_ms(20);
	assert_int_equal(get(f, 1, 0, buf), 0); /* v1 used last now */
	sleep_ms(20);
	put(f, 3, 0, 0); /* over: v2, the least recently used, goes */
	assert_int_equal(get(f, 2, 0, buf), -ENOENT);
	slab_path(f, 2, path, sizeof(path));
	assert_int_equal(tu_file_size(path), -1);
	assert_int_equal(get(f, 1, 1, buf), 0);
	assert_int_equal(get(f, 3, 0, buf), 0);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.bytes, 3 * CS);
	close_cache(f);

	/* A smaller budget at the next open: the oldest slab goes. */
	open_cache(f, 2 * CS);
	assert_int_equal(get(f, 1, 0, buf), -ENOENT);
	assert_int_equal(get(f, 3, 0, buf), 0);
	dcr_cache_get_stats(f->cache, &st);
	assert_true(st.bytes <= 2 * CS);

	/* One slab over the budget: it is dropped whole, and the next
	 * chunk starts a new one. */
	put(f, 3, 1, 0);
	assert_int_equal(get(f, 3, 1, buf), 0);
	put(f, 3, 2, 0);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.bytes, 0);
	assert_int_equal(get(f, 3, 1, buf), -ENOENT);
	put(f, 3, 3, 0);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.bytes, CS);
	assert_int_equal(get(f, 3, 3, buf), 0);
	assert_memory_equal(buf, f->data[3] + 3 * CS, CS);
	assert_int_equal(get(f, 3, 0, buf), -ENOENT);
	free(buf);
}

/* A slab deleted behind the cache's back is a miss, not an error. */
static void test_slab_removed(void **state)
{
	struct fixture *f = *state;
	uint8_t *buf = aligned_alloc(DCR_CACHE_ALIGN, CS);
	char path[PATH_MAX];

	open_cache(f, 0);
	put(f, 1, 0, 0);
	close_cache(f);
	open_cache(f, 0);
	slab_path(f, 1, path, sizeof(path));
	assert_int_equal(unlink(path), 0);
	assert_int_equal(get(f, 1, 0, buf), -ENOENT);
	put(f, 1, 0, 0);
	assert_int_equal(get(f, 1, 0, buf), 0);
	free(buf);
}

/* A slab that is there but cannot be read is a local error, said as
 * itself and counted, not a miss: the reader must not take a failing
 * disk for an empty cache (its own answer, a fetch, is its choice). */
static void test_local_error(void **state)
{
	struct fixture *f = *state;
	uint8_t *buf = aligned_alloc(DCR_CACHE_ALIGN, CS);
	struct dcr_cache_stats st;
	char path[PATH_MAX];

	open_cache(f, 0);
	put(f, 1, 0, 0);
	close_cache(f);
	open_cache(f, 0);
	slab_path(f, 1, path, sizeof(path));
	assert_int_equal(unlink(path), 0);
	assert_int_equal(mkdir(path, 0700), 0); /* open(O_RDWR): EISDIR */
	assert_int_equal(get(f, 1, 0, buf), -EISDIR);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.io_errors, 1);
	assert_int_equal(st.misses, 0);
	assert_int_equal(rmdir(path), 0);
	free(buf);
}

/* A run of neighbouring chunks is written with one call (around the
 * page cache, and through a mapping of the slab); chunks of the run that are there and
 * proven already are left as they are, whatever the run holds for
 * them; keys that do not follow one another are refused, nothing
 * written. */
static void test_put_run(void **state)
{
	struct fixture *f = *state;
	uint8_t *buf = aligned_alloc(DCR_CACHE_ALIGN, CS);
	uint8_t *junk = aligned_alloc(DCR_CACHE_ALIGN, CS);
	struct dcr_cache_key k[NCH];
	const void *data[NCH];
	struct dcr_cache_stats st;

	open_cache(f, 0);
	memset(junk, 0x5a, CS);
	for (int v = 1; v <= 2; v++) {
		for (uint64_t i = 0; i < NCH; i++) {
			k[i] = key(f, (uint64_t)v, i, false);
			data[i] = f->data[v] + i * CS;
		}
		if (v == 2) {
			put(f, 2, 2, 0); /* proven: the run must not touch it */
			data[2] = junk;
		}
		assert_int_equal(dcr_cache_put_run(f->cache, k, data, NCH,
						   v == 1 ? DCR_CACHE_PUT_DIRECT
							  : DCR_CACHE_PUT_MAP),
				 0);
		for (uint64_t i = 0; i < NCH; i++) {
			assert_int_equal(get(f, (uint64_t)v, i, buf), 0);
			assert_memory_equal(buf, f->data[v] + i * CS, k[i].len);
		}
	}
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.inserts, 2 * NCH);
	assert_int_equal(st.corrupt, 0);

	/* A gap in the run: refused whole. */
	k[0] = key(f, 3, 0, false);
	k[1] = key(f, 3, 2, false);
	data[0] = f->data[3];
	data[1] = f->data[3] + 2 * CS;
	assert_int_equal(dcr_cache_put_run(f->cache, k, data, 2, 0), -EINVAL);
	assert_int_equal(get(f, 3, 0, buf), -ENOENT);
	free(junk);
	free(buf);
}

/* Chunks built in place (dcr_cache_build): one ended proven reads back
 * (and after a reopen); one ended unproven is not present and its place
 * is punched; a chunk proven already is refused (-EEXIST), nothing
 * written; a second build of a chunk being built waits for the first. */
static void test_build_in_place(void **state)
{
	struct fixture *f = *state;
	uint8_t *buf = aligned_alloc(DCR_CACHE_ALIGN, CS);
	struct dcr_cache_key k0 = key(f, 1, 0, false), k1 = key(f, 1, 1, false);
	struct dcr_cache_key kl = key(f, 1, NCH - 1, false);
	struct dcr_cache_slot *slot;
	struct dcr_cache_stats st;
	char path[PATH_MAX];
	uint8_t *out;
	int fd;

	open_cache(f, 0);
	assert_int_equal(dcr_cache_build(f->cache, &k0, &out, &slot), 0);
	assert_non_null(out);
	assert_int_equal(get(f, 1, 0, buf), -ENOENT); /* not present yet */
	memcpy(out, f->data[1], k0.len);
	dcr_cache_build_end(f->cache, slot, true);
	assert_int_equal(get(f, 1, 0, buf), 0);
	assert_memory_equal(buf, f->data[1], k0.len);

	/* The last chunk, shorter than the stride. */
	assert_int_equal(dcr_cache_build(f->cache, &kl, &out, &slot), 0);
	memcpy(out, f->data[1] + (NCH - 1) * CS, kl.len);
	dcr_cache_build_end(f->cache, slot, true);

	/* A failed proof: the bytes (another version's) never served. */
	assert_int_equal(dcr_cache_build(f->cache, &k1, &out, &slot), 0);
	memcpy(out, f->data[2] + CS, k1.len);
	dcr_cache_build_end(f->cache, slot, false);
	assert_int_equal(get(f, 1, 1, buf), -ENOENT);
	slab_path(f, 1, path, sizeof(path));
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	off_t d = lseek(fd, CS, SEEK_DATA);
	assert_true(d < 0 || d >= 2 * CS); /* punched */
	close(fd);

	/* Proven already: refused, left as it is. */
	assert_int_equal(dcr_cache_build(f->cache, &k0, &out, &slot), -EEXIST);
	assert_null(slot);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.inserts, 2);
	assert_int_equal(st.corrupt, 0);

	close_cache(f);
	open_cache(f, 0);
	assert_int_equal(get(f, 1, 0, buf), 0);
	assert_memory_equal(buf, f->data[1], k0.len);
	assert_int_equal(get(f, 1, NCH - 1, buf), 0);
	assert_memory_equal(buf, f->data[1] + (NCH - 1) * CS, kl.len);
	assert_int_equal(get(f, 1, 1, buf), -ENOENT);
	free(buf);
}

/* Writers of different chunks of one slab and readers of it at once:
 * every chunk written reads back right, none is torn. */
struct runner {
	struct fixture *f;
	uint64_t first;
	int failures;
};

static void *runner_main(void *arg)
{
	struct runner *w = arg;
	struct dcr_cache_key k[2];
	const void *data[2];
	uint8_t *buf = aligned_alloc(DCR_CACHE_ALIGN, CS);

	for (int n = 0; n < 50; n++) {
		for (uint64_t j = 0; j < 2; j++) {
			k[j] = key(w->f, 1 + (uint64_t)n % 3, w->first + j,
				   false);
			data[j] = w->f->data[k[j].v] + k[j].chunk * CS;
		}
		if (dcr_cache_put_run(w->f->cache, k, data, 2,
				      DCR_CACHE_PUT_MAP))
			w->failures++;
		for (uint64_t j = 0; j < 2; j++)
			if (dcr_cache_read(w->f->cache, &k[j], 0, buf,
					   k[j].len) ||
			    memcmp(buf, data[j], k[j].len))
				w->failures++;
	}
	free(buf);
	return NULL;
}

static void test_put_run_concurrent(void **state)
{
	struct fixture *f = *state;
	struct runner w[NCH / 2];
	pthread_t th[NCH / 2];

	open_cache(f, 0);
	for (int i = 0; i < NCH / 2; i++) {
		w[i] = (struct runner){ .f = f, .first = 2 * (uint64_t)i };
		assert_int_equal(pthread_create(&th[i], NULL, runner_main,
						&w[i]), 0);
	}
	for (int i = 0; i < NCH / 2; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(w[i].failures, 0);
	}
}

struct worker {
	struct fixture *f;
	int id;
	int failures;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint8_t *buf = aligned_alloc(DCR_CACHE_ALIGN, CS);
	uint64_t seed = (uint64_t)w->id + 1;

	for (int n = 0; n < 400; n++) {
		uint64_t v = 1 + tu_rand(&seed) % 3;
		uint64_t i = tu_rand(&seed) % NCH;
		struct dcr_cache_key k = key(w->f, v, i, false);
		int ret;

		if (tu_rand(&seed) % 3 == 0) {
			if (dcr_cache_put(w->f->cache, &k,
					  w->f->data[v] + i * CS,
					  DCR_CACHE_PUT_DIRECT) != 0)
				w->failures++;
			continue;
		}
		ret = dcr_cache_read(w->f->cache, &k, 0, buf, k.len);
		if (ret == 0 && memcmp(buf, w->f->data[v] + i * CS, k.len))
			w->failures++; /* a wrong byte: never */
		else if (ret != 0 && ret != -ENOENT)
			w->failures++;
	}
	free(buf);
	return NULL;
}

/* Readers and writers of the same slabs at once, under a budget that
 * keeps evicting: never a wrong byte, never an error. */
static void test_concurrent(void **state)
{
	struct fixture *f = *state;
	struct worker w[6];
	pthread_t th[6];
	struct dcr_cache_stats st;

	open_cache(f, 8 * CS);
	for (int i = 0; i < 6; i++) {
		w[i] = (struct worker){ .f = f, .id = i };
		assert_int_equal(pthread_create(&th[i], NULL, worker_main,
						&w[i]), 0);
	}
	for (int i = 0; i < 6; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(w[i].failures, 0);
	}
	dcr_cache_get_stats(f->cache, &st);
	assert_true(st.bytes <= 8 * CS);
	assert_int_equal(st.corrupt, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_put_read, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bit_rot_is_caught, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_partial_reads, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_sums_persist, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_other_content_refused,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_eviction, setup, teardown),
		cmocka_unit_test_setup_teardown(test_make_room, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pin, setup, teardown),
		cmocka_unit_test_setup_teardown(test_drop_version, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_local_error, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_slab_removed, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_concurrent, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_put_run, setup, teardown),
		cmocka_unit_test_setup_teardown(test_build_in_place, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_put_run_concurrent, setup,
						teardown),
	};

	dcr_log_set_prog("test_cache");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
