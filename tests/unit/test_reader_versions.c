/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the read path's versions (read/reader.h): tags, the
 * refresh's probes, corrupt, unreadable, damaged and transiently failing
 * manifests and missing parents (skipped, retried, found again), and a
 * version replaced or dropped in the store, seen by a running reader or
 * at the next mount. The fixture is test_reader_util.h's.
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

static void test_tags(void **state)
{
	struct fx *f = *state;
	struct dcr_tag *tags;
	size_t n;

	build_chain(f, 3);
	assert_int_equal(dcr_store_put_tag(f->st, "stable", 2), 0);
	assert_int_equal(dcr_store_put_tag(f->st, "best", 3), 0);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_tags(f->r, &tags, &n), 0);
	assert_int_equal(n, 0);
	dcr_reader_tags_free(tags, n);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	assert_int_equal(dcr_reader_tags(f->r, &tags, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(tags[0].name, "best");
	assert_int_equal(tags[0].version, 3);
	assert_string_equal(tags[1].name, "stable");
	assert_int_equal(tags[1].version, 2);
	dcr_reader_tags_free(tags, n);

	/* Moved and deleted tags show at the next refresh. */
	assert_int_equal(dcr_store_put_tag(f->st, "stable", 3), 0);
	assert_int_equal(dcr_store_del(f->st, "tags/best"), 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	assert_int_equal(dcr_reader_tags(f->r, &tags, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(tags[0].name, "stable");
	assert_int_equal(tags[0].version, 3);
	dcr_reader_tags_free(tags, n);

	/* They survive a restart, before any refresh. */
	dcr_reader_close(f->r);
	f->r = NULL;
	open_reader(f, 0);
	assert_int_equal(dcr_reader_tags(f->r, &tags, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(tags[0].version, 3);
	dcr_reader_tags_free(tags, n);
}

static void test_refresh_probes(void **state)
{
	struct fx *f = *state;
	uint64_t latest = 0;

	build_chain(f, 2);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 2);
	assert_int_equal(f->cs->lists, 3); /* versions/, tags/, layouts/ */

	/* Nothing new: one cheap probe of v3, no listing of versions/. */
	counts_reset(f->cs);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 2);
	assert_int_equal(f->cs->gets_versions, 1);
	assert_int_equal(f->cs->lists, 1); /* tags/ only */

	/* Two new versions at once, an anchor (all full) and a child. */
	f->v[3].v = 3;
	copy_tree(&f->v[3], &f->v[2]);
	nudge(&f->v[3].f[1], 2, 10, 303);
	publish(f->st, &f->v[3], &f->v[2], B_FULL, 0);
	f->v[4].v = 4;
	copy_tree(&f->v[4], &f->v[3]);
	nudge(&f->v[4].f[1], 2, 10, 404);
	publish(f->st, &f->v[4], &f->v[3], B_AUTO, 0);
	counts_reset(f->cs);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 4);
	assert_int_equal(dcr_reader_latest(f->r), 4);
	assert_int_equal(f->cs->gets_versions, 3);
	counts_reset(f->cs);
	f->nv = 4;
	check_version(f, 4);
	/* From cold, v4 needs at most two frames per chunk (anchor v3). */
	assert_true(f->cs->gets_packs <= 2 * 11);
	check_version(f, 2);
	assert_int_equal(log_errors, 0);
}

static void test_corrupt_manifest_and_missing_parent(void **state)
{
	struct fx *f = *state;
	uint64_t *vs, latest = 0;
	size_t n;
	uint8_t buf[CS];
	const struct dcr_version_info *vi;

	build_chain(f, 2);
	/* v3 is published corrupt; v4 (parent 2) and v5 (parent 3) fine. */
	f->v[3].v = 3;
	copy_tree(&f->v[3], &f->v[2]);
	nudge(&f->v[3].f[1], 0, 10, 3030);
	publish(f->st, &f->v[3], &f->v[2], B_AUTO, 1);
	f->v[4].v = 4;
	copy_tree(&f->v[4], &f->v[2]);
	nudge(&f->v[4].f[1], 0, 10, 4040);
	publish(f->st, &f->v[4], &f->v[2], B_AUTO, 0);
	f->v[5].v = 5;
	copy_tree(&f->v[5], &f->v[3]);
	rewrite(&f->v[5].f[1], 1, 5050); /* full frame: needs no parent */
	nudge(&f->v[5].f[1], 0, 10, 5051); /* delta: needs v3 */
	publish(f->st, &f->v[5], &f->v[3], B_AUTO, 0);

	open_reader(f, 0);
	log_reset();
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 5);
	assert_int_equal(log_errors, 1); /* v3, once */
	assert_non_null(strstr(log_last, "versions/0000000003"));
	assert_int_equal(dcr_reader_versions(f->r, &vs, &n), 0);
	assert_int_equal(n, 4);
	assert_int_equal(vs[0], 1);
	assert_int_equal(vs[1], 2);
	assert_int_equal(vs[2], 4);
	assert_int_equal(vs[3], 5);
	free(vs);
	assert_int_equal(dcr_reader_version(f->r, 3, &vi), -ENOENT);

	/* A later refresh neither refetches nor relogs v3. */
	counts_reset(f->cs);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	assert_int_equal(f->cs->gets_versions, 1); /* probe of v6 */
	assert_int_equal(log_errors, 1);

	check_version(f, 4);
	/* v5: the full frame reads; the delta against v3 fails with EIO. */
	assert_int_equal(f->v[5].f[1].kind[1], DCR_CK_FULL);
	assert_int_equal(dcr_reader_read(f->r, 5, 2, CS, buf, CS), CS);
	assert_memory_equal(buf, f->v[5].f[1].data + CS, CS);
	log_reset();
	assert_int_equal(dcr_reader_read(f->r, 5, 2, 0, buf, CS), -EIO);
	assert_int_equal(log_errors, 1);
	assert_non_null(strstr(log_last, "version 3"));
}

/* Publish version @v as a child of @p, with one chunk changed. */
static void publish_child(struct fx *f, int v, int p)
{
	f->v[v].v = (uint64_t)v;
	copy_tree(&f->v[v], &f->v[p]);
	nudge(&f->v[v].f[1], 0, 10, (uint64_t)v * 1000);
	publish(f->st, &f->v[v], &f->v[p], B_AUTO, 0);
}

/* How many versions the reader shows. */
static size_t nversions(struct fx *f)
{
	uint64_t *vs;
	size_t n;

	assert_int_equal(dcr_reader_versions(f->r, &vs, &n), 0);
	free(vs);
	return n;
}

/* The deadline of a wait for an event that a timer of the reader
 * (relist_ms, retry_bad_ms) brings: far past any of them. */
#define WAIT_NS (5 * 1000000000LL)

/*
 * Refresh until a refresh lists versions/ whole (relist_ms after the
 * last listing), WAIT_NS at most: the event itself, not a sleep that
 * guesses when it is due. The refreshes before it only probe.
 */
static void refresh_until_listed(struct fx *f, uint64_t *latest)
{
	const struct timespec ts = { 0, 2 * 1000 * 1000 };
	int64_t deadline = dcr_mono_ns() + WAIT_NS;

	for (;;) {
		unsigned before = f->cs->lists_versions;

		assert_int_equal(dcr_reader_refresh(f->r, latest), 0);
		if (f->cs->lists_versions != before)
			return;
		assert_true(dcr_mono_ns() < deadline);
		nanosleep(&ts, NULL);
	}
}

static void expect_versions(struct fx *f, const uint64_t *want, size_t nw)
{
	uint64_t *vs;
	size_t n;

	assert_int_equal(dcr_reader_versions(f->r, &vs, &n), 0);
	assert_int_equal(n, nw);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(vs[i], want[i]);
	free(vs);
}

/*
 * C2: a manifest key that can never be read (a directory, a manifest
 * over the size limit, access refused to that key) is skipped like a
 * corrupt manifest, logged once; the versions after it are found (the
 * probe falls back to a listing) and later polls probe past it.
 */
static void test_unreadable_version_skipped(void **state)
{
	static const int errs[] = { -EISDIR, -EFBIG, -EACCES };

	for (size_t k = 0; k < DCR_ARRAY_SIZE(errs); k++) {
		struct fx *f = *state;
		const uint64_t want[] = { 1, 3 };
		uint64_t latest = 0;

		if (k) { /* a fresh fixture for each error */
			teardown(state);
			setup(state);
			f = *state;
		}
		build_chain(f, 1);
		open_reader(f, 0);
		assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
		assert_int_equal(latest, 1);

		publish_child(f, 2, 1);
		dcr_version_key(2, f->cs->fail_key, sizeof(f->cs->fail_key));
		f->cs->fail_err = errs[k];
		log_reset();
		/* Not yet a later version: nothing to skip to, one line. */
		assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
		assert_int_equal(latest, 1);
		assert_int_equal(log_errors, 1);
		assert_non_null(strstr(log_last, "versions/0000000002"));

		publish_child(f, 3, 1);
		assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
		assert_int_equal(latest, 3);
		expect_versions(f, want, 2);
		check_version(f, 3);

		/* Later polls: one probe of v4, no listing, no new log. */
		for (int i = 0; i < 3; i++) {
			counts_reset(f->cs);
			assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
			assert_int_equal(latest, 3);
			assert_int_equal(f->cs->gets_versions, 1);
			assert_int_equal(f->cs->lists, 1); /* tags/ */
		}
		assert_int_equal(log_errors, 1);
	}
}

/*
 * A manifest body damaged on the way is fetched again before the version
 * is given up; one given up is looked for again later, and its children
 * (given up with it) come back with it.
 */
static void test_damaged_manifest_retried(void **state)
{
	struct fx *f = *state;
	const uint64_t some[] = { 1, 3 }, all[] = { 1, 2, 3 };
	uint64_t latest = 0;

	build_chain(f, 1);
	f->retry_bad_ms = 300;
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);

	/* Damaged twice, right the third time: indexed, nothing logged. */
	publish_child(f, 2, 1);
	dcr_version_key(2, f->cs->damage_key, sizeof(f->cs->damage_key));
	f->cs->damage_left = 2;
	log_reset();
	counts_reset(f->cs);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 2);
	assert_int_equal(log_errors, 0);
	assert_int_equal(f->cs->damage_left, 0);
	check_version(f, 2);

	/* Damaged every time: v2 is given up (logged), v3 is indexed but
	 * cannot be read ... */
	teardown(state);
	setup(state);
	f = *state;
	build_chain(f, 1);
	f->retry_bad_ms = 300;
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	publish_child(f, 2, 1);
	publish_child(f, 3, 2);
	dcr_version_key(2, f->cs->damage_key, sizeof(f->cs->damage_key));
	f->cs->damage_left = 1000;
	log_reset();
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	expect_versions(f, some, 2);
	assert_true(log_errors >= 1);
	uint8_t buf[64];
	assert_true(dcr_reader_read(f->r, 3, 2, 0, buf, sizeof(buf)) < 0);
	/* ... v2 is not fetched again before the retry time ... */
	f->cs->damage_left = 0;
	counts_reset(f->cs);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	expect_versions(f, some, 2);
	/* ... and found after it (refreshes until it is, WAIT_NS at most),
	 * and its child reads again. */
	const struct timespec ts = { 0, 2 * 1000 * 1000 };
	int64_t deadline = dcr_mono_ns() + WAIT_NS;
	do {
		assert_true(dcr_mono_ns() < deadline);
		nanosleep(&ts, NULL);
		assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	} while (nversions(f) < 3);
	expect_versions(f, all, 3);
	assert_int_equal(dcr_reader_read(f->r, 3, 2, 0, buf, sizeof(buf)),
			 sizeof(buf));
	check_version(f, 2);
	check_version(f, 3);
}

/*
 * C2: a transient failure (a dead server) is not a verdict: the version
 * after it is still found, the failing one is retried at every refresh
 * (logged once, not every poll) and indexed once the store recovers.
 */
static void test_transient_version_retried(void **state)
{
	struct fx *f = *state;
	const uint64_t some[] = { 1, 3 }, all[] = { 1, 2, 3 };
	uint64_t latest = 0;

	build_chain(f, 1);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	publish_child(f, 2, 1);
	publish_child(f, 3, 2);
	dcr_version_key(2, f->cs->fail_key, sizeof(f->cs->fail_key));
	f->cs->fail_err = -EIO;
	log_reset();
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 3);
	expect_versions(f, some, 2);
	for (int i = 0; i < 3; i++) {
		counts_reset(f->cs);
		assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
		assert_int_equal(f->cs->gets_versions, 1); /* v2 again */
	}
	assert_int_equal(log_errors, 1);
	assert_non_null(strstr(log_last, "versions/0000000002"));

	f->cs->fail_err = 0;
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	expect_versions(f, all, 3);
	f->nv = 3;
	check_version(f, 2);
	check_version(f, 3);
	/* and back to cheap probes */
	counts_reset(f->cs);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(f->cs->gets_versions, 1);
	assert_int_equal(f->cs->lists, 1);
}

/*
 * A version the poll's probe found (a GET: no listing, so its object's
 * time is unknown) is not fetched whole again by the next whole listing
 * only to learn that time: the listing checks the manifest object's last
 * 32 bytes (its SHA-256 of the rest) with one ranged GET; other bytes
 * there fail that check and are fetched whole, as before.
 */
static void test_probed_version_not_fetched_again(void **state)
{
	struct fx *f = *state;
	uint64_t latest;
	char key[64];
	struct dcr_buf b;

	f->relist_ms = 300;
	build_chain(f, 3);
	dcr_version_key(3, key, sizeof(key));
	dcr_buf_init(&b, 1 << 20);
	assert_int_equal(dcr_store_get(f->st, key, 0, DCR_GET_ALL, &b), 0);
	assert_int_equal(dcr_store_del(f->st, key), 0);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0); /* a listing */
	assert_int_equal(latest, 2);
	/* v3 published: the next refresh, within relist_ms, probes it */
	assert_int_equal(dcr_store_put(f->st, key, b.data, b.len, DCR_PUT_IF_ABSENT), 0);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 3);
	counts_reset(f->cs);
	log_reset();
	refresh_until_listed(f, &latest);
	assert_int_equal(latest, 3);
	assert_int_equal(f->cs->bytes_versions, DCR_HASH_LEN);
	assert_int_equal(log_errors, 0);
	check_version(f, 3);
	/* and once the time is known, a listing fetches nothing */
	counts_reset(f->cs);
	refresh_until_listed(f, &latest);
	assert_int_equal(f->cs->bytes_versions, 0);
	dcr_buf_free(&b);
}

/*
 * Version identity: v3 deleted from the store and published again with
 * other bytes is re-indexed by the next whole listing (relist_ms), its
 * cached chunks - proven by this very reader - are never served as the
 * new v3's, the change is logged and reported, a tree held from before
 * stays valid; a version gone from the store is dropped, in memory and
 * in the catalog (a reopen does not bring it back).
 */
static void test_version_replaced_and_dropped(void **state)
{
	struct fx *f = *state;
	const struct dcr_version_info *old_vi, *vi;
	struct dcr_version_change *ch;
	uint64_t latest, *vs;
	char key[64];
	size_t n;
	uint8_t b;

	f->relist_ms = 10;
	build_chain(f, 3);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 3);
	check_version(f, 3); /* cached and proven */
	dcr_reader_sync(f->r);
	assert_int_equal(dcr_reader_version(f->r, 3, &old_vi), 0);
	assert_int_equal(old_vi->tree, 0); /* first indexed: tree 0 */
	assert_int_equal(dcr_reader_take_changes(f->r, &ch, &n), 0);
	assert_int_equal(n, 0);
	free(ch);

	/* Nothing changed: a listing finds nothing to do. */
	log_reset();
	refresh_until_listed(f, &latest);
	assert_int_equal(dcr_reader_take_changes(f->r, &ch, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(log_errors, 0);

	/* An admin deletes v3; a trainer publishes another v3. */
	dcr_version_key(3, key, sizeof(key));
	assert_int_equal(dcr_store_del(f->st, key), 0);
	tver_free(&f->v[3]);
	f->v[3].v = 3;
	copy_tree(&f->v[3], &f->v[2]);
	for (uint64_t k = 0; k < 6; k++)
		nudge(&f->v[3].f[1], k, 40, 3000 + k);
	nudge(&f->v[3].f[2], 0, 40, 3100);
	publish(f->st, &f->v[3], &f->v[2], B_AUTO, 0);

	log_reset();
	refresh_until_listed(f, &latest);
	assert_int_equal(latest, 3);
	assert_non_null(strstr(log_last, "versions/0000000003 changed in the "
					 "store (manifest "));
	assert_non_null(strstr(log_last, "re-indexed; the old tree is no "
					 "longer served"));
	check_version(f, 3); /* the new bytes, never the cached old ones */
	assert_int_equal(dcr_reader_take_changes(f->r, &ch, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(ch[0].version, 3);
	assert_true(ch[0].content_changed);
	assert_false(ch[0].gone);
	assert_int_equal(ch[0].old_nentries, 6);
	assert_int_equal(ch[0].old_tree, 0);
	free(ch);
	/* The old tree's number reads nothing of the new one. */
	assert_int_equal(dcr_reader_read_tree(f->r, 3, 0, 2, 0, &b, 1), -ESTALE);
	/* The tree held from before is still readable memory. */
	assert_int_equal(old_vi->version, 3);
	assert_int_equal(old_vi->nentries, 6);
	assert_string_equal(old_vi->entries[2].path, "a/w.bin");
	dcr_reader_version_put(f->r, old_vi);
	assert_int_equal(dcr_reader_version(f->r, 3, &vi), 0);
	assert_ptr_not_equal(vi, old_vi);
	assert_int_equal(vi->tree, 1); /* the next tree, never a reused one */
	assert_int_equal(dcr_reader_read_tree(f->r, 3, 1, 2, 0, &b, 1), 1);
	dcr_reader_version_put(f->r, vi);

	/* v3 gone from the store: dropped; latest is v2 again. */
	assert_int_equal(dcr_store_del(f->st, key), 0);
	refresh_until_listed(f, &latest);
	assert_int_equal(latest, 2);
	assert_int_equal(dcr_reader_read(f->r, 3, 2, 0, &b, 1), -ENOENT);
	assert_int_equal(dcr_reader_take_changes(f->r, &ch, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(ch[0].version, 3);
	assert_true(ch[0].gone);
	assert_int_equal(ch[0].old_tree, 1);
	free(ch);
	check_version(f, 2);

	/* Published once more: it comes back under a tree of its own. */
	publish(f->st, &f->v[3], &f->v[2], B_AUTO, 0);
	refresh_until_listed(f, &latest);
	assert_int_equal(latest, 3);
	assert_int_equal(dcr_reader_version(f->r, 3, &vi), 0);
	assert_int_equal(vi->tree, 2);
	dcr_reader_version_put(f->r, vi);
	check_version(f, 3);
	assert_int_equal(dcr_store_del(f->st, key), 0);
	refresh_until_listed(f, &latest);
	assert_int_equal(latest, 2);

	/* A reopen with the same cache does not bring it back. */
	dcr_reader_close(f->r);
	f->r = NULL;
	open_reader(f, 0);
	assert_int_equal(dcr_reader_versions(f->r, &vs, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(vs[1], 2);
	free(vs);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 2);
	check_version(f, 2);
}

/*
 * A remount (a new reader on the same cache) of a store whose v3 was
 * replaced while no reader ran: the first listing re-indexes it, and
 * the chunks the old reader cached are not served for it.
 */
static void test_version_replaced_while_closed(void **state)
{
	struct fx *f = *state;
	uint64_t latest;
	char key[64];

	build_chain(f, 3);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	check_version(f, 3);
	dcr_reader_close(f->r);
	f->r = NULL;

	dcr_version_key(3, key, sizeof(key));
	assert_int_equal(dcr_store_del(f->st, key), 0);
	tver_free(&f->v[3]);
	f->v[3].v = 3;
	copy_tree(&f->v[3], &f->v[2]);
	for (uint64_t k = 0; k < 6; k++)
		nudge(&f->v[3].f[1], k, 40, 4000 + k);
	publish(f->st, &f->v[3], &f->v[2], B_AUTO, 0);

	log_reset();
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 3);
	assert_non_null(strstr(log_last, "versions/0000000003 changed in the "
					 "store"));
	check_version(f, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
		T(test_tags),
		T(test_refresh_probes),
		T(test_corrupt_manifest_and_missing_parent),
		T(test_damaged_manifest_retried),
		T(test_unreadable_version_skipped),
		T(test_transient_version_retried),
		T(test_probed_version_not_fetched_again),
		T(test_version_replaced_and_dropped),
		T(test_version_replaced_while_closed),
#undef T
	};

	dcr_log_set_prog("test_reader_versions");
	dcr_log_set_sink(log_sink);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
