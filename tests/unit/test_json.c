/* SPDX-License-Identifier: MIT */
/* Unit tests for core/json.c: checking untrusted bytes are one JSON text. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "json.h"

static int check(const char *s)
{
	return dcr_json_check(s, strlen(s));
}

static void test_valid(void **state)
{
	static const char *const ok[] = {
		"{}", "[]", " {\"a\": 1}\n", "0", "-0.5e+3", "1E9", "\"\"",
		"true", "false", "null", "[1, \"x\", {\"y\": [null]}]",
		"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\uD83D\"",
		"\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"",
		"{\"store\": \"file:///s\", \"latest\": 2, \"cache\": "
		"{\"hit_rate\": 0.5}}",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		assert_int_equal(check(ok[i]), 0);
}

static void test_invalid(void **state)
{
	static const char *const bad[] = {
		"", " ", "{", "}", "{\"a\" 1}", "{\"a\": 1,}", "[1,]", "{1: 2}",
		"{} {}", "{}x", "01", "1.", ".5", "-", "1e", "+1", "tru", "nul",
		"\"open", "\"a\tb\"", "\"\\x\"", "\"\\u12g4\"", "\"\\u12\"",
		"\"\xc3\"", "\"\xc0\xaf\"", "\"\xe0\x80\xaf\"", "\"\xed\xa0\x80\"",
		"\"\xf4\x90\x80\x80\"", "\"\xff\"", "\"\x80\"", "NaN", "[1 2]",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (check(bad[i]) != -EBADMSG)
			fail_msg("accepted: %s", bad[i]);
	}
	/* a NUL byte, inside a string or after the value */
	assert_int_equal(dcr_json_check("\"a\0b\"", 5), -EBADMSG);
	assert_int_equal(dcr_json_check("{}\0", 3), -EBADMSG);
	/* only the @n bytes given are read */
	assert_int_equal(dcr_json_check("{}}", 2), 0);
	assert_int_equal(dcr_json_check("[1]", 2), -EBADMSG);
}

static void test_depth(void **state)
{
	char s[2 * (DCR_JSON_DEPTH_MAX + 1) + 1];
	int d;

	(void)state;
	for (d = DCR_JSON_DEPTH_MAX; d <= DCR_JSON_DEPTH_MAX + 1; d++) {
		memset(s, '[', (size_t)d);
		memset(s + d, ']', (size_t)d);
		s[2 * d] = '\0';
		assert_int_equal(check(s), d <= DCR_JSON_DEPTH_MAX ? 0 : -EBADMSG);
	}
	/* deep without end: refused without running off */
	memset(s, '{', sizeof(s) - 1);
	s[sizeof(s) - 1] = '\0';
	assert_int_equal(check(s), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid),
		cmocka_unit_test(test_invalid),
		cmocka_unit_test(test_depth),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
