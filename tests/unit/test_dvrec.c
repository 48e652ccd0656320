/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the records of changes behind the delta view
 * (read/dvrec.c): what is kept is the decoder's list with the values
 * read from the chunk; a record is found by its exact key (version,
 * tree, file, chunk); the newest DCR_DVREC_VERSIONS versions are kept
 * and an older one is refused; a version seen with another tree loses
 * its old records; the byte budget refuses what would pass it; a record
 * held by a reader outlives its drop.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "dvrec.h"

static uint8_t chunk[4096];

/* Keep a record of 3 changes (bf16 at 2 and 10, an f32 at 20) of
 * (v, tree, file, k) made from v - 1. */
static int keep(struct dcr_dvrec *d, uint64_t v, uint32_t tree, uint32_t file,
		uint64_t k)
{
	static const uint32_t e[] = {
		2 | 1u << DCR_REC_WSHIFT, 10 | 1u << DCR_REC_WSHIFT,
		20 | 2u << DCR_REC_WSHIFT };
	const struct dcr_frame_rec fr = { e, 3, 1 };
	const struct dcr_dvrec_key key = { v, tree, file, k };

	return dcr_dvrec_keep(d, &key, v - 1, 0, file, &fr, chunk, sizeof(chunk));
}

static bool has(struct dcr_dvrec *d, uint64_t v, uint32_t tree, uint32_t file,
		uint64_t k)
{
	const struct dcr_dvrec_key key = { v, tree, file, k };
	const struct dcr_dvrec_chunk *c;

	if (dcr_dvrec_get(d, &key, &c))
		return false;
	dcr_dvrec_put_ref(d, c);
	return true;
}

static void test_keep_get(void **state)
{
	struct dcr_dvrec *d = dcr_dvrec_new(1 << 20);
	const struct dcr_dvrec_key key = { 5, 0, 2, 7 };
	const struct dcr_dvrec_chunk *c;

	(void)state;
	for (size_t i = 0; i < sizeof(chunk); i++)
		chunk[i] = (uint8_t)(i * 7 + 1);
	assert_non_null(d);
	assert_int_equal(keep(d, 5, 0, 2, 7), 0);
	assert_int_equal(dcr_dvrec_get(d, &key, &c), 0);
	assert_int_equal(c->base_v, 4);
	assert_int_equal(c->base_file, 2);
	assert_int_equal(c->n, 3);
	assert_int_equal(c->clen, sizeof(chunk));
	/* values from the chunk at the entries' offsets and widths */
	assert_memory_equal(c->val, chunk + 2, 2);
	assert_memory_equal(c->val + 2, chunk + 10, 2);
	assert_memory_equal(c->val + 4, chunk + 20, 4);
	dcr_dvrec_put_ref(d, c);
	/* another tree, file or chunk is another record */
	assert_false(has(d, 5, 1, 2, 7));
	assert_false(has(d, 5, 0, 3, 7));
	assert_false(has(d, 5, 0, 2, 6));
	assert_int_equal(dcr_dvrec_count(d, 5, 0, 2, 4), 1);
	assert_int_equal(dcr_dvrec_count(d, 5, 0, 2, 3), 0);
	/* an entry past the chunk is refused */
	const uint32_t bad[] = { 4095 | 1u << DCR_REC_WSHIFT };
	const struct dcr_frame_rec fr = { bad, 1, 1 };
	assert_int_equal(dcr_dvrec_keep(d, &key, 4, 0, 2, &fr, chunk, sizeof(chunk)),
			 -EINVAL);
	dcr_dvrec_free(d);
}

static void test_versions_and_budget(void **state)
{
	struct dcr_dvrec *d = dcr_dvrec_new(1 << 20);
	const struct dcr_dvrec_key key = { 3, 0, 0, 0 };
	const struct dcr_dvrec_chunk *held;
	struct dcr_dvrec_stats st;

	(void)state;
	assert_int_equal(keep(d, 3, 0, 0, 0), 0);
	assert_int_equal(dcr_dvrec_get(d, &key, &held), 0);
	assert_int_equal(keep(d, 4, 0, 0, 0), 0);
	/* a third, newer version drops the oldest (3); one older is refused */
	assert_int_equal(keep(d, 5, 0, 0, 0), 0);
	assert_false(has(d, 3, 0, 0, 0));
	assert_true(has(d, 4, 0, 0, 0) && has(d, 5, 0, 0, 0));
	assert_int_equal(keep(d, 2, 0, 0, 0), -ENOSPC);
	/* the held record outlived its drop */
	assert_int_equal(held->n, 3);
	dcr_dvrec_put_ref(d, held);
	/* v5 seen with another tree: its old records go */
	assert_int_equal(keep(d, 5, 1, 0, 1), 0);
	assert_false(has(d, 5, 0, 0, 0));
	assert_true(has(d, 5, 1, 0, 1) && has(d, 4, 0, 0, 0));
	dcr_dvrec_stats(d, &st);
	assert_int_equal(st.chunks, 2);
	assert_int_equal(st.refused, 1);
	dcr_dvrec_free(d);

	/* a budget of one record: the second is refused, a replacement not */
	d = dcr_dvrec_new(1);
	assert_int_equal(keep(d, 3, 0, 0, 0), -ENOSPC);
	dcr_dvrec_free(d);
	d = dcr_dvrec_new(100); /* one record of 3 changes is ~80 bytes */
	assert_int_equal(keep(d, 3, 0, 0, 0), 0);
	assert_int_equal(keep(d, 3, 0, 0, 0), 0);
	assert_int_equal(keep(d, 3, 0, 0, 1), -ENOSPC);
	dcr_dvrec_stats(d, &st);
	assert_int_equal(st.chunks, 1);
	assert_true(st.bytes <= 100);
	dcr_dvrec_free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_keep_get),
		cmocka_unit_test(test_versions_and_budget),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
