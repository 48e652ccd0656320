/* SPDX-License-Identifier: MIT */
/* Unit tests for core/hash.c against published SHA-256 test vectors. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "hash.h"

static void check(const void *data, size_t len, const char *hex)
{
	uint8_t h[DCR_HASH_LEN];
	char out[DCR_HASH_HEX_LEN + 1];

	dcr_sha256(data, len, h);
	dcr_hash_hex(h, out);
	assert_string_equal(out, hex);
}

static void test_vectors(void **state)
{
	check("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	check("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	check("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
	      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_streaming_matches_oneshot(void **state)
{
	static uint8_t data[100000];
	uint8_t a[DCR_HASH_LEN], b[DCR_HASH_LEN];

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 31 + (i >> 8));
	dcr_sha256(data, sizeof(data), a);
	struct dcr_sha256_ctx *c = dcr_sha256_new();
	assert_non_null(c);
	for (size_t off = 0; off < sizeof(data); off += 777)
		dcr_sha256_update(c, data + off,
				  sizeof(data) - off < 777 ? sizeof(data) - off : 777);
	dcr_sha256_final(c, b);
	assert_memory_equal(a, b, DCR_HASH_LEN);
	/* Reset gives a fresh message. */
	dcr_sha256_reset(c);
	dcr_sha256_update(c, "abc", 3);
	dcr_sha256_final(c, b);
	dcr_sha256("abc", 3, a);
	assert_memory_equal(a, b, DCR_HASH_LEN);
	dcr_sha256_free(c);
	dcr_sha256_free(NULL);
}

static void test_xxh_streaming_matches_oneshot(void **state)
{
	uint8_t buf[70000], a[DCR_XXH_LEN], b[DCR_XXH_LEN];
	struct dcr_xxh_ctx *c = dcr_xxh_new();

	(void)state;
	assert_non_null(c);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 7 + (i >> 9));
	dcr_xxh128(buf, sizeof(buf), a);
	/* Uneven pieces, an empty one among them. */
	dcr_xxh_update(c, buf, 1);
	dcr_xxh_update(c, buf + 1, 0);
	dcr_xxh_update(c, buf + 1, 300);
	dcr_xxh_update(c, buf + 301, sizeof(buf) - 301);
	dcr_xxh_final(c, b);
	assert_memory_equal(a, b, DCR_XXH_LEN);
	dcr_xxh_reset(c);
	dcr_xxh_final(c, b);
	dcr_xxh128(buf, 0, a);
	assert_memory_equal(a, b, DCR_XXH_LEN);
	dcr_xxh_free(c);
	dcr_xxh_free(NULL);
}

static void test_hex_roundtrip(void **state)
{
	uint8_t h[DCR_HASH_LEN], back[DCR_HASH_LEN];
	char hex[DCR_HASH_HEX_LEN + 1];

	dcr_sha256("x", 1, h);
	dcr_hash_hex(h, hex);
	assert_int_equal(dcr_hash_unhex(hex, back), 0);
	assert_true(dcr_hash_eq(h, back));
	hex[5] = 'g';
	assert_int_equal(dcr_hash_unhex(hex, back), -EINVAL);
	assert_int_equal(dcr_hash_unhex("abcd", back), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_vectors),
		cmocka_unit_test(test_streaming_matches_oneshot),
		cmocka_unit_test(test_xxh_streaming_matches_oneshot),
		cmocka_unit_test(test_hex_roundtrip),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
