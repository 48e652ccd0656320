/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for core/verity.c: the fs-verity digests (SHA-256, 4 KiB
 * blocks, no salt) of files of N bytes 'A', as the kernel's
 * FS_IOC_MEASURE_VERITY and fsverity-utils report them (published
 * vectors; the sizes cross every boundary of the Merkle tree: no tree,
 * one block of level 0, two, 128 and 129 blocks of level 0), computed
 * in one call, in blocks, and from a file.
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

#include "verity.h"

static const struct {
	size_t size;
	const char *hex;
} vec[] = {
	{ 0, "3d248ca542a24fc62d1c43b916eae5016878e2533c88238480b26128a1f1af95" },
	{ 1, "9845e616f7d2f7a1cd6742f0546a36d2e74d4eb8ae7d9bdc0b0df982c27861b7" },
	{ 4095, "aab040052277ce2baa6de148f1b3c8798de72f760d019427f44ce7caac6a69ef" },
	{ 4096, "3fd7a78101899a79cd337b1b4e5414be8bcb376b133370156ef6e65026d930ed" },
	{ 4097, "7319937c445f61df1a8f310eb4d6da157618d80713972a78d70a7528fc1a6f32" },
	{ 8192, "8bddf40a09fef722e6f2b141d69ab2cc23010aa824a78186d38abb05cb8b47f5" },
	{ 524287, "5c00a54bd1d8341d7bbad060ff1b8e88ed2646d7bb38db6e752cd1cff66c0a78" },
	{ 524288, "f5c2b9ded1595acfe8a996795264d488dd6140531f6a01f8f8086a83fd835935" },
	{ 524289, "a7abb76568871169a79104d00679fae6521dfdb2a2648e380c02b10e96e217ff" },
	{ 1234567, "04b74498f0fafcd91622f0b218f3f1a024221e7ccb1732ea180cd4833808edd6" },
	{ 67108864, "2dbb93b12267f696804876449e4874e543ad7fbf5715dbf6ff5a277553d9edfe" },
	{ 67108865, "d0d2d7311c25c6d121011a569274bec0929afe1ca56543cb1235d5056efc4f7b" },
};

static uint8_t *as;

static int setup(void **state)
{
	(void)state;
	as = malloc(67108865);
	if (!as)
		return -1;
	memset(as, 'A', 67108865);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	free(as);
	return 0;
}

static void hex(const uint8_t h[DCR_HASH_LEN], char out[DCR_HASH_HEX_LEN + 1])
{
	dcr_hash_hex(h, out);
}

static void test_oneshot(void **state)
{
	char got[DCR_HASH_HEX_LEN + 1];
	uint8_t h[DCR_HASH_LEN];

	(void)state;
	for (size_t i = 0; i < sizeof(vec) / sizeof(vec[0]); i++) {
		struct dcr_verity *v = dcr_verity_new();

		assert_non_null(v);
		dcr_verity_update(v, as, vec[i].size);
		dcr_verity_final(v, h);
		hex(h, got);
		assert_string_equal(got, vec[i].hex);
	}
}

/* In pieces of whole blocks (the last one short), as a reader feeds it. */
static void test_blocks(void **state)
{
	char got[DCR_HASH_HEX_LEN + 1];
	uint8_t h[DCR_HASH_LEN];

	(void)state;
	for (size_t i = 0; i < sizeof(vec) / sizeof(vec[0]); i++) {
		struct dcr_verity *v = dcr_verity_new();
		size_t step = 3 * DCR_VERITY_BLOCK;

		assert_non_null(v);
		for (size_t off = 0; off < vec[i].size; off += step)
			dcr_verity_update(v, as + off, vec[i].size - off < step ?
						      vec[i].size - off : step);
		dcr_verity_final(v, h);
		hex(h, got);
		assert_string_equal(got, vec[i].hex);
	}
}

static void test_fd(void **state)
{
	char path[] = "/tmp/dcr-test-verity.XXXXXX", got[DCR_HASH_HEX_LEN + 1];
	uint8_t h[DCR_HASH_LEN];
	int fd = mkstemp(path);

	(void)state;
	assert_true(fd >= 0);
	unlink(path);
	assert_int_equal(write(fd, as, 1234567), 1234567);
	assert_int_equal(dcr_verity_digest_fd(fd, 1234567, h), 0);
	hex(h, got);
	assert_string_equal(got, vec[9].hex);
	assert_int_equal(dcr_verity_digest_fd(fd, 1234568, h), -ENODATA);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_oneshot),
		cmocka_unit_test(test_blocks),
		cmocka_unit_test(test_fd),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
