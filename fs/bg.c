/* SPDX-License-Identifier: MIT */
/*
 * bg.c - the mount's background work: refreshing the versions from the
 * store (the watcher thread, and lookups of versions not seen yet),
 * telling the kernel when latest or the tags move, and prefetching new
 * versions (prefetch=latest|all). The request handlers are in ops.c;
 * the contract of both is in fs.h.
 */
#include "config.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include "buf.h"
#include "common.h"
#include "fileio.h"
#include "manifest.h"
#include "fs.h"
#include <pthread.h>

/* ------------------------------------------------------------- refresh */

static void watcher_kick(struct dcrfs *fs)
{
	pthread_mutex_lock(&fs->bg.lock);
	fs->bg.kick = 1;
	pthread_cond_broadcast(&fs->bg.cond);
	pthread_mutex_unlock(&fs->bg.lock);
}

/*
 * Look for new versions in the store. Forced (the watcher), always. From
 * a lookup that missed (@since_ns: when it started), unless a refresh
 * that started after it has finished meanwhile: concurrent misses share
 * one refresh, and a version published before the lookup began is always
 * found - a lookup never answers ENOENT from a look at the store older
 * than itself (rollout workers open vN the moment it is announced).
 * Returns 0 or the refresh's -errno.
 */
int fs_refresh(struct dcrfs *fs, int force, int64_t since_ns)
{
	static int failing;
	uint64_t latest = 0;
	int64_t start;
	int ret = 0;

	pthread_mutex_lock(&fs->ver.refresh_lock);
	if (!force && fs->ver.last_refresh_ns >= since_ns)
		goto out;
	start = dcr_mono_ns();
	ret = dcr_reader_refresh(fs->r, &latest);
	fs->ver.last_refresh_ns = start;
	if (ret < 0)
		atomic_fetch_add_explicit(&fs->stats.refresh_errors, 1, memory_order_relaxed);
	if (ret < 0 && !failing) {
		dcr_warn("refreshing versions from the store failed: %s "
			 "(will retry)", dcr_strerror(ret));
		failing = 1;
	} else if (ret == 0 && failing) {
		dcr_info("store reachable again");
		failing = 0;
	}
out:
	pthread_mutex_unlock(&fs->ver.refresh_lock);
	if (ret == 0 && !force)
		watcher_kick(fs);
	return ret;
}

/* ------------------------------------------------------- background work */

/* FNV-1a over the tag snapshot, to notice any change cheaply. */
static uint64_t tags_fingerprint(struct dcrfs *fs, int *ok)
{
	struct dcr_tag *tags = NULL;
	size_t n = 0;
	uint64_t h = 1469598103934665603ULL;

	*ok = dcr_reader_tags(fs->r, &tags, &n) == 0;
	if (!*ok)
		return 0;
	for (size_t i = 0; i < n; i++) {
		for (const char *p = tags[i].name; *p; p++)
			h = (h ^ (uint8_t)*p) * 1099511628211ULL;
		for (int b = 0; b < 8; b++)
			h = (h ^ (uint8_t)(tags[i].version >> (8 * b))) *
			    1099511628211ULL;
		h = (h ^ 0xff) * 1099511628211ULL;
	}
	dcr_reader_tags_free(tags, n);
	return h;
}

static void notify_result(int ret, const char *what)
{
	/* -ENOENT: the kernel has nothing cached for it, which is fine. */
	if (ret < 0 && ret != -ENOENT)
		dcr_debug("invalidating %s: %s", what, dcr_strerror(ret));
}

#ifdef DCR_TEST_HOOKS
/*
 * Test hook (HACKING): with DCRFS_TEST_HOLD_INVAL=PATH, the watcher
 * stops between the reader's re-index (or drop) of a version and the
 * kernel invalidation of its old tree: it creates PATH.held and waits
 * while PATH exists (at most 60 s), so a test can use the old inodes in
 * that window (tests/integration/identity.sh).
 */
static void test_hold_inval(void)
{
	const char *path = getenv("DCRFS_TEST_HOLD_INVAL");
	char held[PATH_MAX];
	int fd;

	if (!path || !*path ||
	    (size_t)snprintf(held, sizeof(held), "%s.held", path) >= sizeof(held))
		return;
	fd = open(held, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0)
		close(fd);
	for (int i = 0; i < 6000 && access(path, F_OK) == 0; i++)
		usleep(10000);
}
#endif

/*
 * Versions the reader re-indexed (their manifest changed in the store)
 * or dropped (gone from the store): make the kernel forget the /vN
 * dentry (and with it the dentries below it) and every inode of the
 * tree it was shown, with their attributes and page cache (keep_cache
 * and the long TTLs of version trees would otherwise keep the old
 * tree's pages until a remount). The new tree has other inode numbers
 * (fs.h), so until this runs the old inodes fail ESTALE where the
 * kernel asks, and never read the new tree. The root's listing changes
 * with a drop.
 */
static void announce_changes(struct dcrfs *fs)
{
	struct dcr_version_change *ch = NULL;
	size_t n = 0;
	char name[32];

	if (dcr_reader_take_changes(fs->r, &ch, &n) < 0 || !n)
		return;
#ifdef DCR_TEST_HOOKS
	test_hold_inval();
#endif
	for (size_t i = 0; i < n; i++) {
		uint64_t v = ch[i].version;
		int len = snprintf(name, sizeof(name), "v%" PRIu64, v);

		notify_result(fuse_lowlevel_notify_inval_entry(
				      fs->se, DCRFS_INO_ROOT, name, (size_t)len),
			      name);
		for (uint32_t k = 0; ch[i].old_tree <= DCRFS_TREE_MAX &&
				     k < ch[i].old_nentries && k <= DCRFS_IDX_MAX;
		     k++)
			notify_result(fuse_lowlevel_notify_inval_inode(
					      fs->se,
					      dcrfs_ino_make(v, ch[i].old_tree, k),
					      0, 0),
				      name);
		pthread_mutex_lock(&fs->bg.lock);
		if (fs->bg.prefetch_done == v) /* its bytes changed: again */
			fs->bg.prefetch_done = 0;
		pthread_cond_broadcast(&fs->bg.cond);
		pthread_mutex_unlock(&fs->bg.lock);
	}
	notify_result(fuse_lowlevel_notify_inval_inode(fs->se, DCRFS_INO_ROOT,
						       0, 0),
		      "/");
	free(ch);
}

/* Tell the kernel about a new latest and/or changed tags. */
/*
 * What /latest shows when the reader's newest version is @newest. With
 * prefetch and latest_wait, a newer version is held back until the
 * prefetcher has it whole (so that opening latest/FILE finds it in the
 * cache: a passthrough open, or a hit on every chunk) or until it has
 * waited latest_wait; a version that went away (gc) is never shown.
 * Caller holds bg.lock.
 */
static uint64_t hold_latest(struct dcrfs *fs, uint64_t newest)
{
	uint64_t shown = atomic_load(&fs->ver.latest);
	int64_t now = dcr_mono_ns();

	if (fs->bg.prefetch == DCRFS_PREFETCH_NONE || !fs->ver.latest_wait_ms ||
	    !shown || newest <= shown || fs->bg.prefetch_latest_done >= newest) {
		fs->bg.held_until_ns = 0;
		return newest;
	}
	if (!fs->bg.held_until_ns)
		fs->bg.held_until_ns = now + (int64_t)fs->ver.latest_wait_ms * 1000000;
	if (now >= fs->bg.held_until_ns) {
		dcr_info("v%" PRIu64 " not prefetched after %u s: latest moves "
			 "to it anyway", newest, fs->ver.latest_wait_ms / 1000);
		fs->bg.held_until_ns = 0;
		return newest;
	}
	return shown;
}

static void announce(struct dcrfs *fs, uint64_t *tags_fp, int *tags_known)
{
	uint64_t newest = dcr_reader_latest(fs->r), latest = newest;
	uint64_t fp;
	size_t ntags;
	int moved, ok;

	announce_changes(fs);

	pthread_mutex_lock(&fs->bg.lock);
	if (fs->bg.prefetch != DCRFS_PREFETCH_NONE && newest &&
	    fs->bg.prefetch_want != newest) {
		fs->bg.prefetch_want = newest;
		pthread_cond_broadcast(&fs->bg.cond);
	}
	latest = hold_latest(fs, newest);
	moved = latest != atomic_load(&fs->ver.latest);
	atomic_store(&fs->ver.latest, latest);
	pthread_mutex_unlock(&fs->bg.lock);

	if (moved) {
		dcr_info("latest is now v%" PRIu64, latest);
		notify_result(fuse_lowlevel_notify_inval_entry(
				      fs->se, DCRFS_INO_ROOT, "latest", 6),
			      "/latest");
		notify_result(fuse_lowlevel_notify_inval_inode(
				      fs->se, DCRFS_INO_LATEST, 0, 0),
			      "/latest");
		notify_result(fuse_lowlevel_notify_inval_inode(
				      fs->se, DCRFS_INO_ROOT, 0, 0),
			      "/");
	}
	/* After fs->ver.latest is stored: a poll never misses it. */
	dcrfs_latestfile_notify(fs);

	fp = tags_fingerprint(fs, &ok);
	if (!ok || (*tags_known && fp == *tags_fp))
		return;
	*tags_fp = fp;
	*tags_known = 1;
	notify_result(fuse_lowlevel_notify_inval_inode(fs->se, DCRFS_INO_TAGS,
						       0, 0),
		      "/tags");
	pthread_mutex_lock(&fs->tags.lock);
	ntags = fs->tags.n;
	pthread_mutex_unlock(&fs->tags.lock);
	for (size_t k = 0; k < ntags; k++)
		notify_result(fuse_lowlevel_notify_inval_inode(
				      fs->se, DCRFS_INO_TAG_BASE + k, 0, 0),
			      "a tag");
}

static void deadline_after(struct timespec *ts, unsigned int ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += (time_t)(ms / 1000);
	ts->tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

static int deadline_passed(const struct timespec *ts)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec > ts->tv_sec ||
	       (now.tv_sec == ts->tv_sec && now.tv_nsec >= ts->tv_nsec);
}

/*
 * The watcher: every poll_ms milliseconds refresh from the store; whenever
 * latest (or a tag) changed, by its own refresh or one a lookup did,
 * invalidate what the kernel cached about it and wake the prefetcher.
 * Notifications are sent from here, never from a request handler, so
 * they cannot deadlock against the directory lock of a pending lookup.
 */
static void *watcher_main(void *arg)
{
	struct dcrfs *fs = arg;
	struct timespec next;
	uint64_t tags_fp = 0;
	int tags_known = 0;

	deadline_after(&next, fs->ver.poll_ms);
	pthread_mutex_lock(&fs->bg.lock);
	while (!fs->bg.stop) {
		int poll_now;

		if (!fs->bg.kick) {
			struct timespec wake = next;
			int timed = fs->ver.poll_ms != 0;

			if (fs->bg.held_until_ns) { /* show a held latest then */
				struct timespec held = {
					.tv_sec = fs->bg.held_until_ns / 1000000000,
					.tv_nsec = fs->bg.held_until_ns % 1000000000,
				};
				if (!timed || held.tv_sec < wake.tv_sec ||
				    (held.tv_sec == wake.tv_sec &&
				     held.tv_nsec < wake.tv_nsec))
					wake = held;
				timed = 1;
			}
			if (timed)
				pthread_cond_timedwait(&fs->bg.cond,
						       &fs->bg.lock, &wake);
			else
				pthread_cond_wait(&fs->bg.cond, &fs->bg.lock);
		}
		if (fs->bg.stop)
			break;
		poll_now = fs->ver.poll_ms && deadline_passed(&next);
		if (fs->bg.held_until_ns && dcr_mono_ns() >= fs->bg.held_until_ns)
			fs->bg.kick = 1;
		if (!poll_now && !fs->bg.kick)
			continue;
		fs->bg.kick = 0;
		pthread_mutex_unlock(&fs->bg.lock);

		if (poll_now) {
			fs_refresh(fs, 1, 0);
			deadline_after(&next, fs->ver.poll_ms);
		}
		announce(fs, &tags_fp, &tags_known);

		pthread_mutex_lock(&fs->bg.lock);
	}
	pthread_mutex_unlock(&fs->bg.lock);
	return NULL;
}

/* Should a prefetch started for latest @want give up (shutdown or a
 * newer latest)? */
static int prefetch_abandon(struct dcrfs *fs, uint64_t want)
{
	int stop;

	pthread_mutex_lock(&fs->bg.lock);
	stop = fs->bg.stop || fs->bg.prefetch_want != want;
	pthread_mutex_unlock(&fs->bg.lock);
	return stop;
}

/*
 * With prefetch_pagecache, hand the bytes just read to the kernel's page
 * cache of the file as well, so the first read after a refit is a page
 * cache hit. The kernel takes them only for an inode it knows (someone
 * looked the file up); -ENOENT otherwise, which is fine.
 */
static void prefetch_store(struct dcrfs *fs, uint64_t v, uint32_t tree,
			   uint32_t idx, uint64_t off, void *buf, size_t n)
{
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(n);
	int ret;

	bv.buf[0].mem = buf;
	ret = fuse_lowlevel_notify_store(fs->se, dcrfs_ino_make(v, tree, idx),
					 (off_t)off, &bv, 0);
	if (ret < 0 && ret != -ENOENT)
		dcr_debug("prefetch of v%" PRIu64 ": storing in the page "
			  "cache: %s", v, dcr_strerror(ret));
}

/* A block of a prefetch: DCRFS_PREFETCH_BLOCK bytes of one file. */
struct pf_blk {
	uint32_t idx;
	uint64_t off;
};

/* One prefetch of a version, shared by the threads of its par_for. */
struct pf_run {
	struct dcrfs *fs;
	const struct dcr_version_info *vi;
	uint64_t v, want;
	size_t bs;                  /* bytes of one block */
	struct pf_blk *blk;
	atomic_uint_fast64_t bytes; /* done */
	atomic_uint failed;         /* files that failed (logged once) */
	atomic_bool stop;           /* abandoned */
	atomic_uint_fast32_t *bad;  /* per entry: failed already */
};

/* par_for body: prefetch block @i (DCRFS_PREFETCH_BLOCK of one file). */
static void prefetch_block(void *arg, size_t i)
{
	struct pf_run *p = arg;
	struct dcrfs *fs = p->fs;
	const uint32_t idx = p->blk[i].idx;
	const uint64_t off = p->blk[i].off;
	void *buf = NULL;
	ssize_t n;

	if (atomic_load(&p->stop) || atomic_load(&p->bad[idx]))
		return;
	if (prefetch_abandon(fs, p->want)) {
		atomic_store(&p->stop, true);
		return;
	}
#ifdef DCR_TEST_HOOKS
	/* HACKING: a slow prefetch, for latest_wait: N ms per block, one
	 * block after another whatever the threads */
	if (getenv("DCRFS_TEST_PREFETCH_DELAY_MS")) {
		static pthread_mutex_t slow = PTHREAD_MUTEX_INITIALIZER;

		pthread_mutex_lock(&slow);
		usleep((useconds_t)atoi(getenv(
			"DCRFS_TEST_PREFETCH_DELAY_MS")) * 1000);
		pthread_mutex_unlock(&slow);
	}
#endif
	/* Only prefetch_pagecache needs the bytes themselves. */
	if (fs->bg.prefetch_pagecache && !(buf = malloc(p->bs))) {
		n = -ENOMEM;
		goto fail;
	}
	/* Of this tree only: its bytes go to its inodes. */
	n = dcr_reader_prefetch(fs->r, p->v, p->vi->tree, idx, off, buf, p->bs);
	if (n < 0)
		goto fail;
	if (n > 0 && fs->bg.prefetch_pagecache)
		prefetch_store(fs, p->v, p->vi->tree, idx, off, buf, (size_t)n);
	free(buf);
	atomic_fetch_add(&p->bytes, (uint64_t)n);
	atomic_fetch_add_explicit(&fs->stats.pf_bytes, (uint64_t)n,
				  memory_order_relaxed);
	return;
fail:
	free(buf);
	if (atomic_exchange(&p->bad[idx], 1) == 0) {
		dcr_warn("prefetch of v%" PRIu64 "/%s: %s", p->v,
			 p->vi->entries[idx].path, dcr_strerror((int)n));
		atomic_fetch_add(&p->failed, 1);
	}
}

/*
 * Read every regular file of version @v through the reader so that its
 * chunks land in the cache: the blocks (DCRFS_PREFETCH_BLOCK) of all its
 * files are one pool of jobs on the reader's threads
 * (dcr_reader_par_for), so that a checkpoint in many shards goes as
 * fast per byte as one big file; each block's chunks are built on
 * whichever threads are idle. A failing file is logged and skipped. 0
 * when done, 1 when abandoned because latest moved past @want or the
 * mount is stopping.
 */
static int prefetch_version(struct dcrfs *fs, uint64_t v, uint64_t want)
{
	struct pf_run p = { .fs = fs, .v = v, .want = want,
			    .bs = DCRFS_PREFETCH_BLOCK };
	int64_t t0 = dcr_mono_ns();
	uint64_t total = 0, bytes;
	size_t nblk = 0, k = 0;
	char sz[32];
	int ret = version_get(fs, v, &p.vi);

	if (ret < 0) {
		if (ret != -ENOENT)
			dcr_warn("prefetch of v%" PRIu64 ": %s", v,
				 dcr_strerror(ret));
		return 0;
	}
	if (p.vi->chunk_size && p.bs % p.vi->chunk_size)
		p.bs = p.vi->chunk_size;
	for (uint32_t i = 0; i < p.vi->nentries; i++) {
		const struct dcr_entry *e = &p.vi->entries[i];

		if (e->type != DCR_FT_REG)
			continue;
		total += e->size;
		nblk += (size_t)((e->size + p.bs - 1) / p.bs);
	}
	p.blk = calloc(nblk ? nblk : 1, sizeof(*p.blk));
	p.bad = calloc(p.vi->nentries ? p.vi->nentries : 1, sizeof(*p.bad));
	if (!p.blk || !p.bad) {
		dcr_warn("prefetch of v%" PRIu64 ": %s", v,
			 dcr_strerror(-ENOMEM));
		free(p.blk);
		free(p.bad);
		version_put(fs, p.vi);
		return 0;
	}
	for (uint32_t i = 0; i < p.vi->nentries; i++) {
		const struct dcr_entry *e = &p.vi->entries[i];

		for (uint64_t off = 0; e->type == DCR_FT_REG && off < e->size;
		     off += p.bs)
			p.blk[k++] = (struct pf_blk){ i, off };
	}
	dcr_info("prefetching v%" PRIu64, v);
	atomic_store_explicit(&fs->stats.pf_version, v, memory_order_relaxed);
	atomic_store_explicit(&fs->stats.pf_bytes, 0, memory_order_relaxed);
	atomic_store_explicit(&fs->stats.pf_total, total, memory_order_relaxed);
	dcr_reader_par_for(fs->r, nblk, prefetch_block, &p);
	bytes = atomic_load(&p.bytes);
	free(p.blk);
	free(p.bad);
	version_put(fs, p.vi);
	if (atomic_load(&p.stop)) {
		dcr_info("prefetch of v%" PRIu64 " abandoned after %s", v,
			 dcr_format_size(bytes, sz, sizeof(sz)));
		return 1;
	}
	atomic_store_explicit(&fs->stats.pf_version, 0, memory_order_relaxed);
	atomic_fetch_add_explicit(&fs->stats.pf_versions, 1, memory_order_relaxed);
	dcr_info("prefetched v%" PRIu64 ": %s in %.2f s%s", v,
		 dcr_format_size(bytes, sz, sizeof(sz)),
		 (double)(dcr_mono_ns() - t0) / 1e9,
		 atomic_load(&p.failed) ? " (some files failed)" : "");
	return 0;
}

/*
 * prefetch=all, after latest @want is done: every older version, newest
 * first, down to the last one a previous sweep finished. 0 when done,
 * 1 when abandoned.
 */
static int prefetch_sweep(struct dcrfs *fs, uint64_t want)
{
	uint64_t *vs = NULL, floor;
	size_t n = 0;

	pthread_mutex_lock(&fs->bg.lock);
	floor = fs->bg.prefetch_swept;
	pthread_mutex_unlock(&fs->bg.lock);
	if (dcr_reader_versions(fs->r, &vs, &n) < 0)
		return 0;
	for (size_t k = n; k-- > 0;) {
		if (vs[k] >= want)
			continue;
		if (vs[k] <= floor)
			break;
		if (prefetch_version(fs, vs[k], want)) {
			free(vs);
			return 1;
		}
	}
	free(vs);
	pthread_mutex_lock(&fs->bg.lock);
	if (fs->bg.prefetch_swept < want)
		fs->bg.prefetch_swept = want;
	pthread_mutex_unlock(&fs->bg.lock);
	return 0;
}

static void *prefetcher_main(void *arg)
{
	struct dcrfs *fs = arg;

	pthread_mutex_lock(&fs->bg.lock);
	while (!fs->bg.stop) {
		uint64_t v = fs->bg.prefetch_want;
		int abandoned;

		if (v == 0 || v == fs->bg.prefetch_done) {
			pthread_cond_wait(&fs->bg.cond, &fs->bg.lock);
			continue;
		}
		pthread_mutex_unlock(&fs->bg.lock);
		abandoned = prefetch_version(fs, v, v);
		if (!abandoned) {
			/* Its delta views from the changes the prefetch saw,
			 * ready when latest moves (fs/delta.c). */
			dcrfs_delta_ready(fs, v);
			/* latest may move to it now (hold_latest) */
			pthread_mutex_lock(&fs->bg.lock);
			fs->bg.prefetch_latest_done = v;
			fs->bg.kick = 1;
			pthread_cond_broadcast(&fs->bg.cond);
			pthread_mutex_unlock(&fs->bg.lock);
		}
		if (!abandoned && fs->bg.prefetch == DCRFS_PREFETCH_ALL)
			abandoned = prefetch_sweep(fs, v);
		pthread_mutex_lock(&fs->bg.lock);
		if (!abandoned)
			fs->bg.prefetch_done = v;
	}
	pthread_mutex_unlock(&fs->bg.lock);
	return NULL;
}

int dcrfs_bg_start(struct dcrfs *fs)
{
	int ret;

	fs->bg.stop = 0;
	fs->bg.kick = 1; /* announce the initial latest at once */
	ret = pthread_create(&fs->bg.watcher, NULL, watcher_main, fs);
	if (ret)
		return -ret;
	fs->bg.watcher_running = 1;
	pthread_setname_np(fs->bg.watcher, "dcrfs-watcher");
	if (fs->bg.prefetch != DCRFS_PREFETCH_NONE) {
		ret = pthread_create(&fs->bg.prefetcher, NULL, prefetcher_main,
				     fs);
		if (ret) {
			dcrfs_bg_stop(fs);
			return -ret;
		}
		fs->bg.prefetcher_running = 1;
		pthread_setname_np(fs->bg.prefetcher, "dcrfs-prefetch");
	}
	return 0;
}

void dcrfs_bg_stop(struct dcrfs *fs)
{
	pthread_mutex_lock(&fs->bg.lock);
	fs->bg.stop = 1;
	pthread_cond_broadcast(&fs->bg.cond);
	pthread_mutex_unlock(&fs->bg.lock);
	if (fs->bg.watcher_running) {
		pthread_join(fs->bg.watcher, NULL);
		fs->bg.watcher_running = 0;
	}
	if (fs->bg.prefetcher_running) {
		pthread_join(fs->bg.prefetcher, NULL);
		fs->bg.prefetcher_running = 0;
	}
}
