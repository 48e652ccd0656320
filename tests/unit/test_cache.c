/* SPDX-License-Identifier: MIT */
/* Unit tests for store/cache.c: hits, misses, slices, verification of
 * corrupt files, LRU eviction, adoption of stray files, concurrency. */
#include "config.h"

#include <dirent.h>
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
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "testutil.h"

#include "cache.h"
#include "catalog.h"
#include "common.h"
#include "hash.h"

#define CLEN 4096

struct fixture {
	char *dir;
	struct dcr_catalog *cat;
	struct dcr_cache *cache;
	uint8_t data[8][CLEN];
	uint8_t hash[8][DCR_HASH_LEN];
};

static void open_cache(struct fixture *f, uint64_t budget)
{
	char db[PATH_MAX];

	snprintf(db, sizeof(db), "%s/catalog.db", f->dir);
	assert_int_equal(dcr_catalog_open(db, "/store", &f->cat), 0);
	assert_int_equal(dcr_cache_open(f->dir, f->cat, budget, &f->cache), 0);
}

static void close_cache(struct fixture *f)
{
	dcr_cache_close(f->cache);
	dcr_catalog_close(f->cat);
	f->cache = NULL;
	f->cat = NULL;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	f->dir = tu_mkdtemp("cache");
	for (int i = 0; i < 8; i++) {
		tu_fill(f->data[i], CLEN, (uint64_t)i + 1);
		dcr_sha256(f->data[i], CLEN, f->hash[i]);
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
	free(f);
	return 0;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

static void test_put_read(void **state)
{
	struct fixture *f = *state;
	uint8_t buf[CLEN];
	char path[PATH_MAX], hex[DCR_HASH_HEX_LEN + 1], want[PATH_MAX];
	struct dcr_cache_stats st;
	struct stat sb;

	open_cache(f, 0);
	assert_int_equal(dcr_cache_read(f->cache, f->hash[0], CLEN, 0, buf,
					CLEN), -ENOENT);
	assert_int_equal(dcr_cache_put(f->cache, f->hash[0], f->data[0], CLEN, 0),
			 0);
	memset(buf, 0, sizeof(buf));
	assert_int_equal(dcr_cache_read(f->cache, f->hash[0], CLEN, 0, buf,
					CLEN), 0);
	assert_memory_equal(buf, f->data[0], CLEN);
	/* A slice in the middle, and the last byte. */
	assert_int_equal(dcr_cache_read(f->cache, f->hash[0], CLEN, 1000, buf,
					77), 0);
	assert_memory_equal(buf, f->data[0] + 1000, 77);
	assert_int_equal(dcr_cache_read(f->cache, f->hash[0], CLEN, CLEN - 1,
					buf, 1), 0);
	assert_int_equal(buf[0], f->data[0][CLEN - 1]);
	assert_int_equal(dcr_cache_read(f->cache, f->hash[0], CLEN, CLEN - 1,
					buf, 2), -EINVAL);

	/* Layout: chunks/xx/<64 hex>, private directories. */
	dcr_hash_hex(f->hash[0], hex);
	snprintf(want, sizeof(want), "%s/chunks/%.2s/%s", f->dir, hex, hex);
	dcr_cache_path(f->cache, f->hash[0], path, sizeof(path));
	assert_string_equal(path, want);
	assert_int_equal(tu_file_size(path), CLEN);
	snprintf(want, sizeof(want), "%s/chunks/%.2s", f->dir, hex);
	assert_int_equal(stat(want, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0700);

	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.inserts, 1);
	assert_int_equal(st.hits, 3);
	assert_int_equal(st.misses, 1);
	assert_int_equal(st.bytes, CLEN);

	/* Survives a reopen, and is verified on first use there. */
	close_cache(f);
	open_cache(f, 0);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.bytes, CLEN);
	assert_int_equal(dcr_cache_read(f->cache, f->hash[0], CLEN, 5, buf,
					10), 0);
	assert_memory_equal(buf, f->data[0] + 5, 10);
}

static void test_corrupt_file_is_dropped(void **state)
{
	struct fixture *f = *state;
	uint8_t buf[CLEN], *bytes = NULL;
	char path[PATH_MAX];
	struct dcr_cache_stats st;
	size_t len = 0;

	open_cache(f, 0);
	assert_int_equal(dcr_cache_put(f->cache, f->hash[1], f->data[1], CLEN, 0),
			 0);
	assert_int_equal(dcr_cache_put(f->cache, f->hash[2], f->data[2], CLEN, 0),
			 0);
	close_cache(f);

	/* Flip one byte of chunk 1 and truncate chunk 2 behind its back. */
	open_cache(f, 0);
	dcr_cache_path(f->cache, f->hash[1], path, sizeof(path));
	assert_int_equal(tu_read_file(path, &bytes, &len), 0);
	bytes[len / 2] ^= 1;
	assert_int_equal(tu_write_file(path, bytes, len), 0);
	free(bytes);
	dcr_cache_path(f->cache, f->hash[2], path, sizeof(path));
	assert_int_equal(truncate(path, CLEN / 2), 0);

	assert_int_equal(dcr_cache_read(f->cache, f->hash[1], CLEN, 0, buf, 16),
			 -ENOENT);
	dcr_cache_path(f->cache, f->hash[1], path, sizeof(path));
	assert_int_equal(tu_file_size(path), -1);
	assert_int_equal(dcr_cache_read(f->cache, f->hash[2], CLEN, 0, buf,
					CLEN), -ENOENT);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.corrupt, 2);
	assert_int_equal(st.bytes, 0);

	/* Storing it again makes it readable again. */
	assert_int_equal(dcr_cache_put(f->cache, f->hash[1], f->data[1], CLEN, 0),
			 0);
	assert_int_equal(dcr_cache_read(f->cache, f->hash[1], CLEN, 0, buf,
					CLEN), 0);
	assert_memory_equal(buf, f->data[1], CLEN);
}

/* Flip byte @at of @path in place and put its times back (bit rot). */
static void rot(const char *path, size_t at)
{
	struct timespec ts[2];
	struct stat a, b;
	uint8_t byte;
	int fd;

	assert_int_equal(stat(path, &a), 0);
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &byte, 1, (off_t)at), 1);
	byte ^= 0x01;
	assert_int_equal(pwrite(fd, &byte, 1, (off_t)at), 1);
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
 * is caught on the first use after a reopen, through both the copy and
 * the descriptor (splice) paths; so is a damaged check attribute. A
 * file without the attribute (written by an older dcrfs) is proven by
 * its SHA-256 and then gets one.
 */
static void test_bit_rot_is_caught(void **state)
{
	struct fixture *f = *state;
	uint8_t buf[CLEN], x[DCR_XXH_LEN];
	char path[PATH_MAX];
	struct dcr_cache_stats st;

	open_cache(f, 0);
	for (int k = 0; k < 4; k++)
		assert_int_equal(dcr_cache_put(f->cache, f->hash[k], f->data[k],
					       CLEN, k & 1 ? DCR_CACHE_PUT_DIRECT
							   : 0), 0);
	dcr_cache_path(f->cache, f->hash[0], path, sizeof(path));
	rot(path, CLEN / 3);
	dcr_cache_path(f->cache, f->hash[1], path, sizeof(path));
	rot(path, CLEN - 1);
	/* Chunk 2: its attribute damaged, its bytes intact. */
	dcr_cache_path(f->cache, f->hash[2], path, sizeof(path));
	assert_int_equal(getxattr(path, "user.dcrfs.xxh128", x, sizeof(x)),
			 (ssize_t)sizeof(x));
	x[0] ^= 0x80;
	assert_int_equal(setxattr(path, "user.dcrfs.xxh128", x, sizeof(x), 0),
			 0);
	/* Chunk 3: no attribute at all (an older cache's file). */
	dcr_cache_path(f->cache, f->hash[3], path, sizeof(path));
	assert_int_equal(removexattr(path, "user.dcrfs.xxh128"), 0);
	/* Within this instance every file was verified when written. */
	assert_int_equal(dcr_cache_read(f->cache, f->hash[3], CLEN, 0, buf,
					CLEN), 0);
	close_cache(f);

	open_cache(f, 0);
	assert_int_equal(dcr_cache_read(f->cache, f->hash[0], CLEN, 0, buf,
					16), -ENOENT);
	/* Not proven in this instance yet: no descriptor to splice; the
	 * check (read-ahead's) proves it, or finds the rot. */
	assert_int_equal(dcr_cache_open_fd(f->cache, f->hash[1], CLEN),
			 -EAGAIN);
	assert_int_equal(dcr_cache_check(f->cache, f->hash[1], CLEN), -ENOENT);
	assert_int_equal(dcr_cache_open_fd(f->cache, f->hash[1], CLEN),
			 -ENOENT);
	assert_int_equal(dcr_cache_read(f->cache, f->hash[2], CLEN, 0, buf,
					CLEN), -ENOENT);
	memset(buf, 0, sizeof(buf));
	assert_int_equal(dcr_cache_read(f->cache, f->hash[3], CLEN, 0, buf,
					CLEN), 0);
	assert_memory_equal(buf, f->data[3], CLEN);
	/* Proven now: it can be spliced, and a check has nothing to do. */
	{
		int fd = dcr_cache_open_fd(f->cache, f->hash[3], CLEN);
		assert_true(fd >= 0);
		close(fd);
	}
	assert_int_equal(dcr_cache_check(f->cache, f->hash[3], CLEN), 0);
	assert_memory_equal(buf, f->data[3], CLEN);
	assert_int_equal(getxattr(path, "user.dcrfs.xxh128", x, sizeof(x)),
			 (ssize_t)sizeof(x));
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.corrupt, 3);
	for (int k = 0; k < 3; k++) {
		dcr_cache_path(f->cache, f->hash[k], path, sizeof(path));
		assert_int_equal(tu_file_size(path), -1);
	}
}

static void test_eviction_lru(void **state)
{
	struct fixture *f = *state;
	uint8_t buf[CLEN];
	struct dcr_cache_stats st;
	char path[PATH_MAX];

	open_cache(f, 3 * CLEN);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(dcr_cache_put(f->cache, f->hash[i], f->data[i],
					       CLEN, 0), 0);
		sleep_ms(3);
	}
	/* Chunk 0 was stored first; a put refreshes nothing else. Adding
	 * two more evicts the two oldest: 0 and 1. */
	assert_int_equal(dcr_cache_put(f->cache, f->hash[3], f->data[3], CLEN, 0),
			 0);
	sleep_ms(3);
	assert_int_equal(dcr_cache_put(f->cache, f->hash[4], f->data[4], CLEN, 0),
			 0);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.evictions, 2);
	assert_true(st.bytes <= 3 * CLEN);
	for (int i = 0; i < 5; i++) {
		int want = i < 2 ? -ENOENT : 0;
		dcr_cache_path(f->cache, f->hash[i], path, sizeof(path));
		assert_int_equal(tu_file_size(path) < 0 ? -ENOENT : 0, want);
		assert_int_equal(dcr_cache_read(f->cache, f->hash[i], CLEN, 0,
						buf, CLEN), want);
		if (!want)
			assert_memory_equal(buf, f->data[i], CLEN);
	}
	close_cache(f);

	/* A budget smaller than one chunk: everything goes, nothing breaks. */
	open_cache(f, 100);
	assert_int_equal(dcr_cache_put(f->cache, f->hash[5], f->data[5], CLEN, 0),
			 0);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.bytes, 0);
	assert_int_equal(dcr_cache_read(f->cache, f->hash[5], CLEN, 0, buf,
					CLEN), -ENOENT);
}

static void test_adopts_stray_file(void **state)
{
	struct fixture *f = *state;
	char path[PATH_MAX], dir[PATH_MAX];
	struct dcr_cache_stats st;
	uint8_t buf[CLEN];

	open_cache(f, 0);
	/* A file without a catalog row (a crash between rename and insert). */
	dcr_cache_path(f->cache, f->hash[6], path, sizeof(path));
	snprintf(dir, sizeof(dir), "%s", path);
	*strrchr(dir, '/') = 0;
	assert_int_equal(tu_mkdir_p(dir), 0);
	assert_int_equal(tu_write_file(path, f->data[6], CLEN), 0);
	assert_int_equal(dcr_cache_read(f->cache, f->hash[6], CLEN, 0, buf,
					CLEN), 0);
	assert_memory_equal(buf, f->data[6], CLEN);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.bytes, CLEN);
	/* A wrong expected length is a verification failure. */
	assert_int_equal(dcr_cache_put(f->cache, f->hash[7], f->data[7], CLEN, 0),
			 0);
	close_cache(f);
	open_cache(f, 0);
	assert_int_equal(dcr_cache_read(f->cache, f->hash[7], CLEN - 1, 0, buf,
					10), -ENOENT);
}

static void test_tmp_cleaned(void **state)
{
	struct fixture *f = *state;
	char path[PATH_MAX];

	open_cache(f, 0);
	close_cache(f);
	snprintf(path, sizeof(path), "%s/tmp/leftover.1.2", f->dir);
	assert_int_equal(tu_write_file(path, "x", 1), 0);
	open_cache(f, 0);
	assert_int_equal(tu_file_size(path), -1);
}

struct worker {
	struct fixture *f;
	uint8_t (*hash)[DCR_HASH_LEN]; /* test_batched_rows */
	int id;
	int errors;
};

/* Run @fn on 8 workers over @f and assert that none counted an error. */
static void run_workers(struct fixture *f, void *(*fn)(void *),
			uint8_t (*hash)[DCR_HASH_LEN])
{
	struct worker w[8];
	pthread_t th[8];

	for (int i = 0; i < 8; i++) {
		w[i] = (struct worker){ .f = f, .hash = hash, .id = i };
		assert_int_equal(pthread_create(&th[i], NULL, fn, &w[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(w[i].errors, 0);
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint8_t buf[CLEN];

	for (int k = 0; k < 200; k++) {
		int i = (k + w->id) % 8;
		int rc = dcr_cache_read(w->f->cache, w->f->hash[i], CLEN, 0,
					buf, CLEN);
		if (rc == -ENOENT)
			rc = dcr_cache_put(w->f->cache, w->f->hash[i],
					   w->f->data[i], CLEN, 0);
		else if (rc == 0 && memcmp(buf, w->f->data[i], CLEN) != 0)
			rc = -EBADMSG;
		if (rc)
			w->errors++;
	}
	return NULL;
}

/* Readers, writers and the evictor race; every hit must be exact. */
static void test_concurrent(void **state)
{
	struct fixture *f = *state;
	struct dcr_cache_stats st;

	open_cache(f, 4 * CLEN);
	run_workers(f, worker_main, NULL);
	dcr_cache_get_stats(f->cache, &st);
	assert_true(st.hits > 0);
	assert_true(st.evictions > 0);
	assert_int_equal(st.corrupt, 0);
}

static int count_chunk_files(const char *dir)
{
	char sub[PATH_MAX];
	int n = 0;

	for (int i = 0; i < 256; i++) {
		snprintf(sub, sizeof(sub), "%s/chunks/%02x", dir, i);
		DIR *d = opendir(sub);
		struct dirent *de;
		if (!d)
			continue;
		while ((de = readdir(d)))
			n += de->d_name[0] != '.';
		closedir(d);
	}
	return n;
}

/* C4: after the catalog is rebuilt (here: deleted), the chunk files it
 * no longer knows count against the budget again: adopted at open and
 * evicted down to the budget, and still served (verified). */
static void test_orphans_after_rebuild(void **state)
{
	struct fixture *f = *state;
	struct dcr_cache_stats st;
	char db[PATH_MAX], junk[PATH_MAX];
	uint8_t buf[CLEN];
	int hits = 0;

	open_cache(f, 0);
	for (int i = 0; i < 6; i++)
		assert_int_equal(dcr_cache_put(f->cache, f->hash[i], f->data[i],
					       CLEN, 0), 0);
	close_cache(f);
	/* Not chunk names: left alone, not counted. */
	snprintf(junk, sizeof(junk), "%s/chunks/00/README", f->dir);
	assert_int_equal(tu_write_file(junk, "x", 1), 0);
	snprintf(db, sizeof(db), "%s/catalog.db", f->dir);
	assert_int_equal(unlink(db), 0);
	snprintf(db, sizeof(db), "%s/catalog.db-wal", f->dir);
	unlink(db);
	snprintf(db, sizeof(db), "%s/catalog.db-shm", f->dir);
	unlink(db);

	open_cache(f, 4 * CLEN);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.bytes, 4 * CLEN);
	assert_int_equal(count_chunk_files(f->dir), 4 + 1);
	assert_true(tu_file_size(junk) == 1);
	for (int i = 0; i < 6; i++) {
		int ret = dcr_cache_read(f->cache, f->hash[i], CLEN, 0, buf,
					 CLEN);
		if (ret == 0) {
			assert_memory_equal(buf, f->data[i], CLEN);
			hits++;
		} else {
			assert_int_equal(ret, -ENOENT);
		}
	}
	assert_int_equal(hits, 4);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.bytes, 4 * CLEN);
	close_cache(f);
	/* A normal reopen does not count them twice. */
	open_cache(f, 4 * CLEN);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.bytes, 4 * CLEN);
}

#define MANY 1000

static void *many_main(void *arg)
{
	struct worker *w = arg;
	uint8_t buf[64];

	for (int k = 0; k < MANY; k++) {
		int i = (k * 7 + w->id * 131) % MANY;

		if (dcr_cache_read(w->f->cache, w->hash[i], CLEN, 0, buf,
				   sizeof(buf)) != 0 ||
		    buf[0] != (uint8_t)i || buf[1] != (uint8_t)(i >> 8))
			w->errors++;
	}
	return NULL;
}

/*
 * Catalog rows are queued and written in batches: many threads using
 * many chunks for the first time after a remount (every use queues a
 * row) overflow the queue over and over, concurrently. Every read must
 * succeed, and the rows and the byte count must come out exact.
 */
static void test_batched_rows(void **state)
{
	struct fixture *f = *state;
	uint8_t (*hash)[DCR_HASH_LEN] = calloc(MANY, DCR_HASH_LEN);
	struct dcr_cache_stats st;
	uint8_t data[CLEN];
	uint64_t total;

	open_cache(f, 0);
	for (int i = 0; i < MANY; i++) {
		memset(data, 0x5a, sizeof(data));
		data[0] = (uint8_t)i;
		data[1] = (uint8_t)(i >> 8);
		dcr_sha256(data, CLEN, hash[i]);
		assert_int_equal(dcr_cache_put(f->cache, hash[i], data, CLEN,
					       0), 0);
	}
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.bytes, (uint64_t)MANY * CLEN);
	close_cache(f);

	open_cache(f, 0);
	run_workers(f, many_main, hash);
	dcr_cache_get_stats(f->cache, &st);
	assert_int_equal(st.bytes, (uint64_t)MANY * CLEN);
	assert_int_equal(dcr_catalog_cache_total(f->cat, &total), 0);
	assert_int_equal(total, (uint64_t)MANY * CLEN);
	close_cache(f);
	free(hash);
}

/*
 * Direct puts and lean reads: an aligned chunk whose length is not a
 * multiple of the block size is stored at its exact length and reads
 * back bit for bit (whether or not the file system takes O_DIRECT, the
 * bytes must be the same), including through an aligned destination
 * (RWF_NOWAIT, then O_DIRECT) and an unaligned one; a misaligned source
 * is written plainly.
 */
static void test_direct_put(void **state)
{
	struct fixture *f = *state;
	const size_t lens[] = { 3 * 4096, 3 * 4096 - 777, 1 };
	uint8_t *src = NULL, *dst = NULL, *plain;
	char path[PATH_MAX];
	struct stat sb;

	open_cache(f, 0);
	assert_int_equal(posix_memalign((void **)&src, DCR_CACHE_ALIGN,
					3 * 4096), 0);
	assert_int_equal(posix_memalign((void **)&dst, DCR_CACHE_ALIGN,
					3 * 4096), 0);
	plain = malloc(3 * 4096 + 1);
	for (size_t k = 0; k < DCR_ARRAY_SIZE(lens); k++) {
		uint8_t h[DCR_HASH_LEN];

		for (size_t i = 0; i < 3 * 4096; i++)
			src[i] = (uint8_t)(i * 31 + k * 7 + 1);
		dcr_sha256(src, lens[k], h);
		assert_int_equal(dcr_cache_put(f->cache, h, src, lens[k],
					       DCR_CACHE_PUT_DIRECT), 0);
		dcr_cache_path(f->cache, h, path, sizeof(path));
		assert_int_equal(stat(path, &sb), 0);
		assert_int_equal((size_t)sb.st_size, lens[k]);
		memset(dst, 0xee, 3 * 4096);
		assert_int_equal(dcr_cache_read(f->cache, h, (uint32_t)lens[k],
						0, dst, lens[k]), 0);
		assert_memory_equal(dst, src, lens[k]);
		/* Unaligned destination: the plain path. */
		assert_int_equal(dcr_cache_read(f->cache, h, (uint32_t)lens[k],
						0, plain + 1, lens[k]), 0);
		assert_memory_equal(plain + 1, src, lens[k]);
	}
	/* Misaligned source with the flag: written plainly, same bytes. */
	{
		uint8_t h[DCR_HASH_LEN];

		memcpy(plain + 1, src, 4096);
		dcr_sha256(plain + 1, 4096, h);
		assert_int_equal(dcr_cache_put(f->cache, h, plain + 1, 4096,
					       DCR_CACHE_PUT_DIRECT), 0);
		assert_int_equal(dcr_cache_read(f->cache, h, 4096, 0, dst,
						4096), 0);
		assert_memory_equal(dst, src, 4096);
	}
	/* After a remount (no verified set): verified, read around the page
	 * cache when it is not resident, still the same bytes. */
	close_cache(f);
	open_cache(f, 0);
	{
		uint8_t h[DCR_HASH_LEN];

		for (size_t i = 0; i < 3 * 4096; i++)
			src[i] = (uint8_t)(i * 31 + 1);
		dcr_sha256(src, 3 * 4096, h);
		memset(dst, 0, 3 * 4096);
		assert_int_equal(dcr_cache_read(f->cache, h, 3 * 4096, 0, dst,
						3 * 4096), 0);
		assert_memory_equal(dst, src, 3 * 4096);
	}
	free(plain);
	free(dst);
	free(src);
	close_cache(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_put_read, setup, teardown),
		cmocka_unit_test_setup_teardown(test_direct_put, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_batched_rows, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_file_is_dropped,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_bit_rot_is_caught, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_eviction_lru, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_adopts_stray_file, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_tmp_cleaned, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_concurrent, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_orphans_after_rebuild,
						setup, teardown),
	};

	dcr_log_set_prog("test_cache");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
