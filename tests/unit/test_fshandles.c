/* SPDX-License-Identifier: MIT */
/*
 * test_fshandles.c - the handles of /.dcrfs and /delta files (fs/
 * handles.c): a handle gives back its state until its release, never
 * has the version files' passthrough bit, and a handle this process did
 * not give (another generation: a daemon before a restart; a released
 * slot; a slot never given; 0) gives nothing, so that a restarted daemon
 * never follows a dead one's handle.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fs.h"

static void test_put_get_take(void **state)
{
	int a, b;
	uint64_t ha = dcrfs_fh_put(&a), hb = dcrfs_fh_put(&b);

	(void)state;
	assert_true(ha != 0 && hb != 0 && ha != hb);
	assert_false(ha & DCRFS_FH_PASSTHROUGH);
	assert_false(hb & DCRFS_FH_PASSTHROUGH);
	assert_ptr_equal(dcrfs_fh_get(ha), &a);
	assert_ptr_equal(dcrfs_fh_get(hb), &b);
	assert_ptr_equal(dcrfs_fh_take(ha), &a);
	assert_null(dcrfs_fh_get(ha));  /* released */
	assert_null(dcrfs_fh_take(ha)); /* twice */
	assert_ptr_equal(dcrfs_fh_get(hb), &b);
	assert_ptr_equal(dcrfs_fh_take(hb), &b);
}

static void test_strangers(void **state)
{
	int a;
	uint64_t h = dcrfs_fh_put(&a);

	(void)state;
	assert_null(dcrfs_fh_get(0));
	/* the same slot, another generation: a dead daemon's */
	assert_null(dcrfs_fh_get(h ^ (UINT64_C(1) << 40)));
	assert_null(dcrfs_fh_get(h + (UINT64_C(1) << 33)));
	/* a slot never given */
	assert_null(dcrfs_fh_get((h & ~UINT64_C(0xffffffff)) | 0xfffffff0u));
	/* the passthrough bit: a version file's handle */
	assert_null(dcrfs_fh_get(h | DCRFS_FH_PASSTHROUGH));
	/* a pointer, as handles were before */
	assert_null(dcrfs_fh_get((uint64_t)(uintptr_t)&a));
	assert_ptr_equal(dcrfs_fh_take(h), &a);
}

static void test_reuse(void **state)
{
	int v[200];
	uint64_t h[200];

	(void)state;
	for (int i = 0; i < 200; i++) { /* the table grows */
		h[i] = dcrfs_fh_put(&v[i]);
		assert_true(h[i] != 0);
	}
	for (int i = 0; i < 200; i += 2)
		assert_ptr_equal(dcrfs_fh_take(h[i]), &v[i]);
	for (int i = 0; i < 200; i++)
		assert_ptr_equal(dcrfs_fh_get(h[i]), i % 2 ? &v[i] : NULL);
	for (int i = 0; i < 200; i += 2) /* freed slots serve again */
		h[i] = dcrfs_fh_put(&v[i]);
	for (int i = 0; i < 200; i++)
		assert_ptr_equal(dcrfs_fh_take(h[i]), &v[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_put_get_take),
		cmocka_unit_test(test_strangers),
		cmocka_unit_test(test_reuse),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
