/* SPDX-License-Identifier: MIT */
/*
 * test_fsino.c - the mount's inode numbers (fs/fs.h): every number
 * resolves to one kind (dcrfs_ino_resolve), at the edges of each range
 * too, and a version-tree number encodes (version, tree, entry) by the
 * scheme fs.h documents, which a daemon taking over a mount relies on.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fs.h"

static void expect(fuse_ino_t ino, enum dcrfs_kind kind, uint64_t slot)
{
	struct dcrfs_node n;

	dcrfs_ino_resolve(ino, &n);
	assert_int_equal(n.kind, kind);
	assert_int_equal(n.ino, ino);
	if (kind == DCRFS_K_TAG || kind == DCRFS_K_DELTA_NODE)
		assert_int_equal(n.slot, slot);
}

static void test_fixed(void **state)
{
	(void)state;
	expect(0, DCRFS_K_NONE, 0);
	expect(1, DCRFS_K_ROOT, 0);
	expect(2, DCRFS_K_LATEST, 0);
	expect(3, DCRFS_K_TAGS, 0);
	expect(4, DCRFS_K_CTL_DIR, 0);
	expect(5, DCRFS_K_CTL_STATUS, 0);
	expect(6, DCRFS_K_CTL_METRICS, 0);
	expect(7, DCRFS_K_DELTA_DIR, 0);
	expect(8, DCRFS_K_CTL_LATEST, 0);
	expect(9, DCRFS_K_NONE, 0);
	expect(0xff, DCRFS_K_NONE, 0);
}

static void test_slots(void **state)
{
	(void)state;
	expect(0x100, DCRFS_K_TAG, 0);
	expect(0x101, DCRFS_K_TAG, 1);
	expect(0x7fffffff, DCRFS_K_TAG, 0x7fffffff - 0x100);
	expect(0x80000000, DCRFS_K_DELTA_NODE, 0);
	expect(0x80000001, DCRFS_K_DELTA_NODE, 1);
	expect(0xfffffffe, DCRFS_K_DELTA_NODE, 0x7ffffffe);
	expect(0xffffffff, DCRFS_K_NONE, 0);
}

static void test_versions(void **state)
{
	static const struct {
		uint64_t v;
		uint32_t tree, idx;
	} cases[] = {
		{ 1, 0, 0 }, { 1, 0, 1 }, { 7, 3, 12345 },
		{ DCR_VERSION_MAX, DCRFS_TREE_MAX, DCRFS_IDX_MAX },
		{ 2, DCRFS_TREE_MAX, 0 }, { 3, 0, DCRFS_IDX_MAX },
	};
	struct dcrfs_node n;

	(void)state;
	/* The scheme itself, pinned: (v << 32) | (tree << 24) | (idx + 2). */
	assert_int_equal(dcrfs_ino_make(5, 1, 3),
			 (UINT64_C(5) << 32) | (UINT64_C(1) << 24) | 5);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		fuse_ino_t ino = dcrfs_ino_make(cases[i].v, cases[i].tree,
						cases[i].idx);

		dcrfs_ino_resolve(ino, &n);
		assert_int_equal(n.kind, DCRFS_K_VERSION);
		assert_int_equal(n.v, cases[i].v);
		assert_int_equal(n.tree, cases[i].tree);
		assert_int_equal(n.idx, cases[i].idx);
	}
	/* Entry numbers start at 2 within each tree: 0 and 1 name nothing. */
	expect(UINT64_C(1) << 32, DCRFS_K_NONE, 0);
	expect((UINT64_C(1) << 32) | 1, DCRFS_K_NONE, 0);
	expect((UINT64_C(1) << 32) | (UINT64_C(2) << 24) | 1, DCRFS_K_NONE, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fixed),
		cmocka_unit_test(test_slots),
		cmocka_unit_test(test_versions),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
