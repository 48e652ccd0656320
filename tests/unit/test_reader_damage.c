/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the read path (read/reader.h) when what it reads is
 * damaged: a corrupt frame in a pack or in a delta chain, a missing
 * pack, a cached chunk damaged on disk, a wrong check value in a
 * manifest. The reader never serves a wrong byte: it fails the read
 * (EIO, logged once, naming the object) or proves the chunk otherwise.
 * The fixture is test_reader_util.h's.
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

static void test_corrupt_pack(void **state)
{
	struct fx *f = *state;
	uint8_t buf[CS];
	char key[128];

	build_chain(f, 1);
	/* Chunk 3 of a/w.bin: a stored full frame of random bytes. */
	corrupt_frame(f, 1, 1, 3, DCR_FRAME_HDR_LEN + 100, key, sizeof(key));
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	log_reset();
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 3 * CS + 5, buf, 10),
			 -EIO);
	assert_int_equal(log_errors, 1);
	assert_non_null(strstr(log_last, key));
	assert_non_null(strstr(log_last, "a/w.bin"));
	/* Still failing (never cached), still one line per failed read. */
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 3 * CS, buf, CS), -EIO);
	assert_int_equal(log_errors, 2);
	/* A read spanning it fails as a whole. */
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 2 * CS, buf, CS + 1),
			 -EIO);
	/* Everything else stays readable, frames in the same pack too. */
	log_reset();
	check_file(f, 1, 3);
	check_file(f, 1, 5);
	assert_int_equal(f->v[1].f[1].pack[1], f->v[1].f[1].pack[3]);
	assert_int_equal(f->v[1].f[1].pack[5], f->v[1].f[1].pack[3]);
	assert_int_equal(dcr_reader_read(f->r, 1, 2, CS, buf, CS), CS);
	assert_memory_equal(buf, f->v[1].f[1].data + CS, CS);
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 5 * CS, buf, CS), 100);
	assert_memory_equal(buf, f->v[1].f[1].data + 5 * CS, 100);
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 4 * CS, buf, CS), CS);
	assert_memory_equal(buf, f->v[1].f[1].data + 4 * CS, CS);
	assert_int_equal(log_errors, 0);

	/* A broken frame header is caught by the decoder. */
	corrupt_frame(f, 1, 2, 0, 1, key, sizeof(key));
	assert_int_equal(dcr_reader_read(f->r, 1, 3, 0, buf, 1), 0 + 1);
	/* (b.bin chunk 0 was cached by check_file above; a fresh reader
	 * has to fetch it and fails.) */
	dcr_reader_close(f->r);
	f->r = NULL;
	tu_rm_rf(f->cache_dir);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	log_reset();
	assert_int_equal(dcr_reader_read(f->r, 1, 3, 0, buf, 1), -EIO);
	assert_int_equal(log_errors, 1);
	assert_non_null(strstr(log_last, key));
}

static void test_corrupt_delta_in_chain(void **state)
{
	struct fx *f = *state;
	uint8_t buf[CS];
	char key[128];

	build_chain(f, 4);
	/* v4 is all deltas; break the one of b.bin chunk 0 in v2?
	 * b.bin is SAME in v2/v3, DELTA in v4: corrupt v4's delta. */
	assert_int_equal(f->v[4].f[2].kind[0], DCR_CK_DELTA);
	corrupt_frame(f, 4, 2, 0, f->v[4].f[2].flen[0] - 1, key, sizeof(key));
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	log_reset();
	assert_int_equal(dcr_reader_read(f->r, 4, 3, 0, buf, CS), -EIO);
	assert_int_equal(log_errors, 1);
	assert_non_null(strstr(log_last, key));
	/* The same chunk of v1..v3 is fine (and v4's other chunks). */
	check_file(f, 3, 3);
	assert_int_equal(dcr_reader_read(f->r, 4, 3, CS, buf, CS), CS);
	assert_memory_equal(buf, f->v[4].f[2].data + CS, CS);
}

static void test_missing_pack(void **state)
{
	struct fx *f = *state;
	uint8_t buf[CS];
	char key[128];

	build_chain(f, 2);
	/* v2's packs hold only deltas of w.bin; delete the first. */
	dcr_pack_key(f->v[2].packs[0], key, sizeof(key));
	assert_int_equal(dcr_store_del(f->st, key), 0);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	log_reset();
	/* The first frame of v2 (chunk 0 of w.bin) is in pack 0. */
	assert_int_equal(f->v[2].f[1].pack[0], 0);
	assert_int_equal(dcr_reader_read(f->r, 2, 2, 0, buf, CS), -EIO);
	assert_int_equal(log_errors, 1);
	assert_non_null(strstr(log_last, key));
	/* v1 and v2's unchanged files still read. */
	log_reset();
	check_version(f, 1);
	check_file(f, 2, 3);
	assert_int_equal(dcr_reader_read(f->r, 2, 2, 4 * CS, buf, CS), CS);
	assert_memory_equal(buf, f->v[2].f[1].data + 4 * CS, CS);
	assert_int_equal(log_errors, 0);
}

static void test_corrupt_cache_file(void **state)
{
	struct fx *f = *state;
	char path[PATH_MAX];
	struct stat sb;
	uint8_t byte;
	int fd;

	build_chain(f, 2);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	check_version(f, 2);
	dcr_reader_close(f->r);
	f->r = NULL;

	/* Private layout: <cache_dir>/<id>/{catalog.db,slabs/...}. Flip a
	 * byte of v2's chunk 0 of a/w.bin in its slab. */
	assert_true(in_slab(f, 2, 1, 0));
	cache_file(f, 2, 1, path, sizeof(path));
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &byte, 1, 17), 1);
	byte ^= 0xff;
	assert_int_equal(pwrite(fd, &byte, 1, 17), 1);
	close(fd);
	assert_false(in_slab(f, 2, 1, 0));
	snprintf(path, sizeof(path), "%s", f->cache_dir);
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0700);

	counts_reset(f->cs);
	open_reader(f, 0);
	log_reset();
	check_version(f, 2); /* detected, punched out, fetched again */
	assert_true(f->cs->gets_packs >= 1);
	assert_int_equal(log_errors, 0);
	/* And cached again (behind the read), correctly. */
	dcr_reader_sync(f->r);
	assert_true(in_slab(f, 2, 1, 0));
}

/*
 * A cache file that is there but cannot be read (a local I/O error: here
 * a directory where v2's slab of a/w.bin was) does not fail the read:
 * the version is built from the store again, and the error is counted
 * (dcr_reader_stats.cache_errors) and logged as a warning.
 */
static void test_cache_file_unreadable(void **state)
{
	struct fx *f = *state;
	struct dcr_reader_stats st;
	char path[PATH_MAX];

	build_chain(f, 2);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	check_version(f, 2);
	dcr_reader_close(f->r);
	f->r = NULL;

	assert_true(in_slab(f, 2, 1, 0));
	counts_reset(f->cs);
	open_reader(f, 0); /* the cache has counted the slab */
	cache_file(f, 2, 1, path, sizeof(path));
	assert_int_equal(unlink(path), 0);
	assert_int_equal(mkdir(path, 0700), 0);
	log_reset();
	check_version(f, 2);
	assert_true(f->cs->gets_packs >= 1);
	assert_int_equal(log_errors, 0);
	dcr_reader_get_stats(f->r, &st);
	assert_true(st.cache_errors >= 1);
	assert_int_equal(st.read_errors, 0);
	dcr_reader_close(f->r);
	f->r = NULL;
	assert_int_equal(rmdir(path), 0);
}

static void test_format1_corrupt_delta(void **state)
{
	g_format = 1;
	test_corrupt_delta_in_chain(state);
}

/*
 * A chunk whose frames are intact but whose check value in the manifest
 * is wrong (a committer bug) is proven by its SHA-256 instead, served,
 * and reported with a warning. (A decoder that disagrees with the
 * committer's fails both and is EIO: test_corrupt_delta_in_chain.)
 */
static void test_wrong_check_value(void **state)
{
	struct fx *f = *state;
	uint8_t buf[CS];

	g_bad_xxh_v = 2;
	build_chain(f, 2);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	assert_true(g_bad_chunk < 5);
	log_reset();
	assert_int_equal(dcr_reader_read(f->r, 2, 2, g_bad_chunk * CS, buf,
					 CS), CS);
	assert_memory_equal(buf, f->v[2].f[1].data + g_bad_chunk * CS, CS);
	assert_int_equal(log_errors, 0);
	assert_int_equal(log_warnings, 1);
	assert_non_null(strstr(log_last_warn, "check value"));
	/* Its neighbours and the parent's chunk are fine. */
	for (uint64_t k = 0; k < 5; k++) {
		assert_int_equal(dcr_reader_read(f->r, 2, 2, k * CS, buf, CS),
				 CS);
		assert_memory_equal(buf, f->v[2].f[1].data + k * CS, CS);
	}
	check_file(f, 1, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
		T(test_corrupt_pack),
		T(test_corrupt_delta_in_chain),
		T(test_missing_pack),
		T(test_corrupt_cache_file),
		T(test_cache_file_unreadable),
		T(test_format1_corrupt_delta),
		T(test_wrong_check_value),
#undef T
	};

	dcr_log_set_prog("test_reader_damage");
	dcr_log_set_sink(log_sink);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
