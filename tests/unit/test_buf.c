/* SPDX-License-Identifier: MIT */
/* Unit tests for core/buf.c: bounded growth and the untrusted-byte reader. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "buf.h"
#include "fileio.h"
#include "common.h"

static void test_append_and_max(void **state)
{
	struct dcr_buf b;

	dcr_buf_init(&b, 10);
	assert_int_equal(dcr_buf_append(&b, "hello", 5), 0);
	assert_int_equal(dcr_buf_append(&b, "world", 5), 0);
	assert_int_equal(b.len, 10);
	assert_memory_equal(b.data, "helloworld", 10);
	/* Growing past the maximum fails and leaves the buffer intact. */
	assert_int_equal(dcr_buf_append(&b, "!", 1), -EFBIG);
	assert_int_equal(b.len, 10);
	assert_int_equal(dcr_buf_reserve(&b, (size_t)1 << 40), -EFBIG);
	dcr_buf_free(&b);
	dcr_buf_free(NULL);
}

static void test_varint_roundtrip(void **state)
{
	static const uint64_t vals[] = { 0, 1, 127, 128, 300, 16383, 16384,
					 UINT32_MAX, (uint64_t)1 << 56, UINT64_MAX };
	struct dcr_buf b;
	struct dcr_rd r;

	dcr_buf_init(&b, 1024);
	for (size_t i = 0; i < DCR_ARRAY_SIZE(vals); i++)
		assert_int_equal(dcr_buf_put_varint(&b, vals[i]), 0);
	dcr_rd_init(&r, b.data, b.len);
	for (size_t i = 0; i < DCR_ARRAY_SIZE(vals); i++) {
		uint64_t v;
		assert_int_equal(dcr_rd_varint(&r, &v), 0);
		assert_true(v == vals[i]);
	}
	assert_int_equal(dcr_rd_left(&r), 0);
	uint64_t v;
	assert_int_equal(dcr_rd_varint(&r, &v), -EBADMSG);
	dcr_buf_free(&b);
}

static void test_varint_hostile(void **state)
{
	/* Truncated: continuation bit set on the last byte. */
	static const uint8_t trunc[] = { 0x80, 0x80 };
	/* Eleven bytes, and a tenth byte that overflows 64 bits. */
	static const uint8_t too_long[11] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
					      0xff, 0xff, 0xff, 0xff, 0x01 };
	static const uint8_t overflow[10] = { 0xff, 0xff, 0xff, 0xff, 0xff,
					      0xff, 0xff, 0xff, 0xff, 0x02 };
	struct dcr_rd r;
	uint64_t v;

	dcr_rd_init(&r, trunc, sizeof(trunc));
	assert_int_equal(dcr_rd_varint(&r, &v), -EBADMSG);
	dcr_rd_init(&r, too_long, sizeof(too_long));
	assert_int_equal(dcr_rd_varint(&r, &v), -EBADMSG);
	dcr_rd_init(&r, overflow, sizeof(overflow));
	assert_int_equal(dcr_rd_varint(&r, &v), -EBADMSG);

	static const uint8_t big[] = { 0xac, 0x02 }; /* 300 */
	dcr_rd_init(&r, big, sizeof(big));
	assert_int_equal(dcr_rd_varint_max(&r, 299, &v), -EBADMSG);

	const uint8_t *p;
	dcr_rd_init(&r, big, sizeof(big));
	assert_int_equal(dcr_rd_bytes(&r, 3, &p), -EBADMSG);
	assert_int_equal(dcr_rd_bytes(&r, 2, &p), 0);
	uint8_t c;
	assert_int_equal(dcr_rd_u8(&r, &c), -EBADMSG);
}

static void test_parse_size(void **state)
{
	uint64_t v;

	assert_int_equal(dcr_parse_size("0", &v), 0);
	assert_true(v == 0);
	assert_int_equal(dcr_parse_size("4096", &v), 0);
	assert_true(v == 4096);
	assert_int_equal(dcr_parse_size("64K", &v), 0);
	assert_true(v == 65536);
	assert_int_equal(dcr_parse_size("1MiB", &v), 0);
	assert_true(v == 1048576);
	assert_int_equal(dcr_parse_size("10G", &v), 0);
	assert_true(v == (uint64_t)10 << 30);
	assert_int_equal(dcr_parse_size("2t", &v), 0);
	assert_true(v == (uint64_t)2 << 40);
	assert_int_equal(dcr_parse_size("", &v), -EINVAL);
	assert_int_equal(dcr_parse_size("-1", &v), -EINVAL);
	assert_int_equal(dcr_parse_size("1X", &v), -EINVAL);
	assert_int_equal(dcr_parse_size("1MM", &v), -EINVAL);
	assert_int_equal(dcr_parse_size("99999999999T", &v), -ERANGE);
	assert_int_equal(dcr_parse_u64("12a", &v), -EINVAL);
	assert_int_equal(dcr_parse_u64("18446744073709551616", &v), -ERANGE);
}

static void test_parse_duration(void **state)
{
	uint64_t v;

	assert_int_equal(dcr_parse_duration("0", &v), 0);
	assert_true(v == 0);
	assert_int_equal(dcr_parse_duration("90", &v), 0);
	assert_true(v == 90);
	assert_int_equal(dcr_parse_duration("15m", &v), 0);
	assert_true(v == 900);
	assert_int_equal(dcr_parse_duration("24h", &v), 0);
	assert_true(v == 86400);
	assert_int_equal(dcr_parse_duration("7d", &v), 0);
	assert_true(v == 7 * 86400);
	assert_int_equal(dcr_parse_duration("2w", &v), 0);
	assert_true(v == 14 * 86400);
	assert_int_equal(dcr_parse_duration("", &v), -EINVAL);
	assert_int_equal(dcr_parse_duration("h", &v), -EINVAL);
	assert_int_equal(dcr_parse_duration("1x", &v), -EINVAL);
	assert_int_equal(dcr_parse_duration("1hh", &v), -EINVAL);
	assert_int_equal(dcr_parse_duration("-1s", &v), -EINVAL);
	assert_int_equal(dcr_parse_duration("99999999999999999w", &v), -ERANGE);
}

static void test_parse_ms(void **state)
{
	uint64_t v;

	assert_int_equal(dcr_parse_ms("5", &v), 0);
	assert_true(v == 5000);
	assert_int_equal(dcr_parse_ms("0", &v), 0);
	assert_true(v == 0);
	assert_int_equal(dcr_parse_ms("0.25", &v), 0);
	assert_true(v == 250);
	assert_int_equal(dcr_parse_ms("1.5", &v), 0);
	assert_true(v == 1500);
	assert_int_equal(dcr_parse_ms("0.001", &v), 0);
	assert_true(v == 1);
	assert_int_equal(dcr_parse_ms("0.0001", &v), -EINVAL);
	assert_int_equal(dcr_parse_ms(".5", &v), -EINVAL);
	assert_int_equal(dcr_parse_ms("1.", &v), -EINVAL);
	assert_int_equal(dcr_parse_ms("1s", &v), -EINVAL);
	assert_int_equal(dcr_parse_ms("often", &v), -EINVAL);
	assert_int_equal(dcr_parse_ms("-1", &v), -EINVAL);
	assert_int_equal(dcr_parse_ms("99999999999999999999", &v), -ERANGE);
}

/* The one path join: one '/' between, none doubled, too long refused. */
static void test_path_join(void **state)
{
	char buf[8], *p;

	(void)state;
	p = dcr_path_join("/a/b", "c.bin");
	assert_string_equal(p, "/a/b/c.bin");
	free(p);
	p = dcr_path_join("/a/", "c");
	assert_string_equal(p, "/a/c");
	free(p);
	p = dcr_path_join("", "c");
	assert_string_equal(p, "/c");
	free(p);
	assert_int_equal(dcr_path_join_buf(buf, sizeof(buf), "ab", "cdef"), 0);
	assert_string_equal(buf, "ab/cdef");
	assert_int_equal(dcr_path_join_buf(buf, sizeof(buf), "ab", "cdefg"), -ENAMETOOLONG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_append_and_max),
		cmocka_unit_test(test_varint_roundtrip),
		cmocka_unit_test(test_varint_hostile),
		cmocka_unit_test(test_parse_size),
		cmocka_unit_test(test_parse_duration),
		cmocka_unit_test(test_path_join),
		cmocka_unit_test(test_parse_ms),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
