/* SPDX-License-Identifier: MIT */
/*
 * test_cpus.c - the CPU budget (core/cpus.h): cgroup v2 cpu.max lines,
 * the affinity mask (a process pinned to one CPU gets 1, to two gets 2
 * where the machine has them), and threads=N overriding it.
 */
#include "config.h"

#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>
#include <cmocka.h>

#include "cpus.h"

static void test_quota_lines(void **state)
{
	(void)state;
	assert_int_equal(dcr_cpu_quota_parse("max 100000\n"), 0);
	assert_int_equal(dcr_cpu_quota_parse("800000 100000\n"), 8);
	assert_int_equal(dcr_cpu_quota_parse("150000 100000"), 2); /* 1.5 rounds up */
	assert_int_equal(dcr_cpu_quota_parse("50000 100000"), 1);
	assert_int_equal(dcr_cpu_quota_parse("1 100000"), 1);
	assert_int_equal(dcr_cpu_quota_parse("99999999999999 1"), 1024);
	assert_int_equal(dcr_cpu_quota_parse(""), 0);
	assert_int_equal(dcr_cpu_quota_parse("junk"), 0);
	assert_int_equal(dcr_cpu_quota_parse("12x 100000"), 0);
	assert_int_equal(dcr_cpu_quota_parse("100000 0"), 0);
	assert_int_equal(dcr_cpu_quota_parse(NULL), 0);
}

static void test_affinity(void **state)
{
	cpu_set_t all, one;

	(void)state;
	assert_int_equal(sched_getaffinity(0, sizeof(all), &all), 0);
	int n = CPU_COUNT(&all);
	int b = dcr_cpu_budget();
	assert_true(b >= 1 && b <= n);

	int first = -1, second = -1;
	for (int c = 0; c < CPU_SETSIZE && second < 0; c++)
		if (CPU_ISSET(c, &all)) {
			if (first < 0)
				first = c;
			else
				second = c;
		}
	CPU_ZERO(&one);
	CPU_SET(first, &one);
	assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
	assert_int_equal(dcr_cpu_budget(), 1);
	if (second >= 0 && b >= 2) {
		CPU_SET(second, &one);
		assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
		assert_int_equal(dcr_cpu_budget(), 2);
	}
	assert_int_equal(sched_setaffinity(0, sizeof(all), &all), 0);
	assert_int_equal(dcr_cpu_budget(), b);
}

static void test_override(void **state)
{
	(void)state;
	assert_int_equal(dcr_cpu_threads(16), 16);
	assert_int_equal(dcr_cpu_threads(5000), 1024);
	assert_int_equal(dcr_cpu_threads(0), dcr_cpu_budget());
	assert_int_equal(dcr_cpu_threads(-3), dcr_cpu_budget());
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_quota_lines),
		cmocka_unit_test(test_affinity),
		cmocka_unit_test(test_override),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
