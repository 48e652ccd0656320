/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for store/vfile.c: a local file of produced bytes is sealed
 * only if every piece reached the disk as produced; reads of any range
 * return the bytes, and a byte changed on disk after sealing is never
 * returned (-EBADMSG) while the other blocks still read.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "testutil.h"

#include "common.h"
#include "hash.h"
#include "vfile.h"

/* Not a multiple of the block: a short last block. */
#define SIZE ((size_t)5 * DCR_VFILE_BLOCK * 4 + 12345)

struct fx {
	char *dir;
	int fd;
	uint8_t *data;
	struct dcr_vfile_seg seg[3];
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	char path[PATH_MAX];

	if (!f || !(f->data = malloc(SIZE)))
		return -1;
	f->dir = tu_mkdtemp("vfile");
	snprintf(path, sizeof(path), "%s/v", f->dir);
	tu_fill(f->data, SIZE, 7);
	if (tu_write_file(path, f->data, SIZE))
		return -1;
	f->fd = open(path, O_RDWR);
	/* a header, a middle piece across several steps, the tail */
	uint64_t cut[4] = { 0, 123, SIZE - 40000, SIZE };
	for (int i = 0; i < 3; i++) {
		f->seg[i].off = cut[i];
		f->seg[i].len = cut[i + 1] - cut[i];
		dcr_xxh128(f->data + cut[i], f->seg[i].len, f->seg[i].xxh);
	}
	*state = f;
	return f->fd < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	close(f->fd);
	tu_rm_rf(f->dir);
	free(f->dir);
	free(f->data);
	free(f);
	return 0;
}

static void flip(struct fx *f, uint64_t at)
{
	uint8_t b;

	assert_int_equal(pread(f->fd, &b, 1, (off_t)at), 1);
	b ^= 0x10;
	assert_int_equal(pwrite(f->fd, &b, 1, (off_t)at), 1);
}

/* Every range reads back exactly, across blocks and steps, and to EOF. */
static void test_reads(void **state)
{
	struct fx *f = *state;
	const uint64_t offs[] = { 0, 1, DCR_VFILE_BLOCK - 1, DCR_VFILE_BLOCK,
				  3 * DCR_VFILE_BLOCK + 17, SIZE - 5, SIZE };
	const size_t lens[] = { 1, 100, DCR_VFILE_BLOCK, 2 * DCR_VFILE_BLOCK + 3,
				17 * DCR_VFILE_BLOCK + 9, SIZE };
	uint8_t *buf = malloc(SIZE);
	struct dcr_vfile *v;

	assert_int_equal(dcr_vfile_seal(f->fd, SIZE, f->seg, 3, &v), 0);
	assert_int_equal(dcr_vfile_size(v), SIZE);
	for (size_t i = 0; i < DCR_ARRAY_SIZE(offs); i++)
		for (size_t j = 0; j < DCR_ARRAY_SIZE(lens); j++) {
			size_t want = offs[i] >= SIZE ? 0 :
				      DCR_MIN(lens[j], SIZE - (size_t)offs[i]);
			ssize_t got = dcr_vfile_pread(v, f->fd, buf, lens[j], offs[i]);
			assert_int_equal(got, want);
			assert_memory_equal(buf, f->data + (offs[i] < SIZE ? offs[i] : 0),
					    want ? want : 0);
		}
	dcr_vfile_free(v);
	free(buf);
}

/* A byte that did not reach the disk as produced: not sealed. */
static void test_seal_refuses_other_bytes(void **state)
{
	struct fx *f = *state;
	struct dcr_vfile *v = (void *)1;

	flip(f, SIZE / 2);
	assert_int_equal(dcr_vfile_seal(f->fd, SIZE, f->seg, 3, &v), -EBADMSG);
	assert_null(v);
	/* shorter than said, and pieces out of order or past the end */
	flip(f, SIZE / 2);
	assert_int_equal(dcr_vfile_seal(f->fd, SIZE + 1, f->seg, 3, &v), -EIO);
	assert_int_equal(dcr_vfile_seal(f->fd, SIZE - 1, f->seg, 3, &v), -EINVAL);
	assert_int_equal(ftruncate(f->fd, SIZE - 1), 0);
	struct dcr_vfile_seg one = f->seg[0];
	assert_int_equal(dcr_vfile_seal(f->fd, SIZE, &one, 1, &v), -EIO);
	struct dcr_vfile_seg two[2] = { f->seg[1], f->seg[0] };
	assert_int_equal(dcr_vfile_seal(f->fd, SIZE - 1, two, 2, &v), -EINVAL);
}

/* Rot after sealing: the damaged block is never read, the others are. */
static void test_rot_after_seal(void **state)
{
	struct fx *f = *state;
	uint8_t *buf = malloc(SIZE);
	uint64_t bad = 7 * (uint64_t)DCR_VFILE_BLOCK + 99;
	struct dcr_vfile *v;

	assert_int_equal(dcr_vfile_seal(f->fd, SIZE, f->seg, 3, &v), 0);
	flip(f, bad);
	assert_int_equal(dcr_vfile_pread(v, f->fd, buf, 10, bad - 5), -EBADMSG);
	assert_int_equal(dcr_vfile_pread(v, f->fd, buf, SIZE, 0), -EBADMSG);
	/* the block before and the one after still read */
	assert_int_equal(dcr_vfile_pread(v, f->fd, buf, DCR_VFILE_BLOCK,
					 6 * (uint64_t)DCR_VFILE_BLOCK), DCR_VFILE_BLOCK);
	assert_memory_equal(buf, f->data + 6 * (uint64_t)DCR_VFILE_BLOCK, DCR_VFILE_BLOCK);
	assert_int_equal(dcr_vfile_pread(v, f->fd, buf, 100,
					 8 * (uint64_t)DCR_VFILE_BLOCK), 100);
	assert_memory_equal(buf, f->data + 8 * (uint64_t)DCR_VFILE_BLOCK, 100);
	dcr_vfile_free(v);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_reads, setup, teardown),
		cmocka_unit_test_setup_teardown(test_seal_refuses_other_bytes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rot_after_seal, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
