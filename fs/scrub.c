/* SPDX-License-Identifier: MIT */
/*
 * scrub.c - the mount's scrub (-o scrub=SECONDS, fs.h dcrfs_scrub_*): a
 * thread of its own that, every interval, re-checks each version file
 * open through FUSE passthrough against its sub-block sums, from its
 * cache file as the kernel serves it (read/rscrub.c), and repairs in
 * place a chunk found rotten, so that every read through an open or a
 * mapping the kernel holds, and every open after it, gets right bytes.
 *
 * Why: with passthrough the kernel reads the cache file itself; the
 * daemon checks the file whole before its first passthrough open in
 * the mount (dcr_reader_backing_open) and then never sees its reads. A
 * byte that rots afterwards would be served until the last open closes.
 *
 * Why repair in place rather than drop the file from the cache: the
 * kernel keeps one backing file per inode while any open (or mapping)
 * of it lasts, and later opens must use the same one
 * (notes/fuse-passthrough.md), so a dropped file would still be served
 * rotten to every open until the last one closed; the repair writes,
 * over the chunk's range, the bytes the chunk was proven to hold (never
 * a hole, never a truncation), and the kernel's readers see them at
 * once. A chunk that cannot be rebuilt (the store unreachable) takes
 * the file out of the cache instead, and says so.
 *
 * Budget: the pass reads at most scrub_rate bytes per second (a token
 * bucket over the pass; disk reads go around the page cache, so a pass
 * neither evicts the readers' pages nor fills memory), one chunk at a
 * time on this one thread. A pass longer than the interval is followed
 * by the next at once.
 *
 * Locking: @lock guards @stop and the pass's wake-ups (@cond, on
 * CLOCK_MONOTONIC); the counters are relaxed atomics. Nothing else is
 * held across a chunk's check: the files of a pass are a snapshot of
 * fs->bk.tab (backing.c), each held pinned meanwhile.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "common.h"
#include "fs.h"

struct dcrfs_scrub {
	struct dcrfs *fs;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* CLOCK_MONOTONIC */
	bool stop;
	/* the pass in progress: when it began, what it read (this thread) */
	int64_t pass_start_ns;
	uint64_t pass_bytes;
	/* for status.c */
	atomic_uint_fast64_t passes, files, bytes, rotten, repaired, dropped;
	atomic_int_fast64_t last_end_ns;  /* wall clock, 0: none yet */
	atomic_int_fast64_t last_took_ns;
};

/* Wait until CLOCK_MONOTONIC @at_ns or a stop; true on a stop. */
static bool wait_until(struct dcrfs_scrub *sc, int64_t at_ns)
{
	struct timespec ts = { .tv_sec = (time_t)(at_ns / 1000000000),
			       .tv_nsec = (long)(at_ns % 1000000000) };
	bool stop;

	pthread_mutex_lock(&sc->lock);
	while (!sc->stop && dcr_mono_ns() < at_ns)
		pthread_cond_timedwait(&sc->cond, &sc->lock, &ts);
	stop = sc->stop;
	pthread_mutex_unlock(&sc->lock);
	return stop;
}

/* dcr_scrub_pace_fn: keep the pass within scrub_rate bytes a second. */
static int pace(void *arg, uint64_t bytes)
{
	struct dcrfs_scrub *sc = arg;
	uint64_t rate = sc->fs->scr.rate;

	sc->pass_bytes += bytes;
	return wait_until(sc, sc->pass_start_ns +
				      (int64_t)((double)sc->pass_bytes /
						(double)rate * 1e9));
}

/* One pass over the files open through passthrough now. */
static void pass(struct dcrfs_scrub *sc)
{
	struct dcrfs *fs = sc->fs;
	struct dcrfs_backed *files = NULL;
	struct dcr_scrub_counts cnt = { 0 };
	ssize_t n = dcrfs_backing_snapshot(fs, &files);
	size_t i = 0;

	sc->pass_start_ns = dcr_mono_ns();
	sc->pass_bytes = 0;
	if (n < 0)
		dcr_warn("scrub: pass skipped: %s", dcr_strerror((int)n));
	for (; n > 0 && i < (size_t)n; i++) {
		uint64_t v;
		uint32_t tree, idx;
		int ret = 1;

		if (dcrfs_ino_split(files[i].ino, &v, &tree, &idx))
			ret = dcr_reader_scrub_backing(fs->r, v, tree, idx,
						       files[i].pin, pace, sc,
						       &cnt);
		dcr_reader_backing_close(fs->r, files[i].pin);
		if (ret == 1)
			break; /* stopped (pace) */
	}
	for (i++; n > 0 && i < (size_t)n; i++)
		dcr_reader_backing_close(fs->r, files[i].pin);
	free(files);
	atomic_fetch_add(&sc->files, cnt.files);
	atomic_fetch_add(&sc->bytes, cnt.bytes);
	atomic_fetch_add(&sc->rotten, cnt.rotten);
	atomic_fetch_add(&sc->repaired, cnt.repaired);
	atomic_fetch_add(&sc->dropped, cnt.dropped);
	atomic_fetch_add(&sc->passes, 1);
	atomic_store(&sc->last_took_ns, dcr_mono_ns() - sc->pass_start_ns);
	atomic_store(&sc->last_end_ns, dcr_now_ns());
	if (cnt.rotten)
		dcr_warn("scrub: pass over %" PRIu64 " files (%" PRIu64
			 " bytes): %" PRIu64 " rotten chunks, %" PRIu64
			 " repaired, %" PRIu64 " files dropped from the cache",
			 cnt.files, cnt.bytes, cnt.rotten, cnt.repaired,
			 cnt.dropped);
}

static void *scrub_main(void *arg)
{
	struct dcrfs_scrub *sc = arg;
	int64_t every = (int64_t)sc->fs->scr.ms * 1000000;
	int64_t next = dcr_mono_ns() + every;

	while (!wait_until(sc, next)) {
		pass(sc);
		next = DCR_MAX(sc->pass_start_ns + every, dcr_mono_ns());
	}
	return NULL;
}

int dcrfs_scrub_start(struct dcrfs *fs)
{
	struct dcrfs_scrub *sc;
	pthread_condattr_t ca;
	int ret;

	fs->scr.run = NULL;
	if (!fs->scr.ms) {
		dcr_info("scrub: off (-o scrub=0): files open through "
			 "passthrough are checked only at their first open");
		return 0;
	}
	sc = calloc(1, sizeof(*sc));
	if (!sc)
		return DCR_ERR(-ENOMEM);
	sc->fs = fs;
	pthread_mutex_init(&sc->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&sc->cond, &ca);
	pthread_condattr_destroy(&ca);
	ret = pthread_create(&sc->thread, NULL, scrub_main, sc);
	if (ret) {
		pthread_cond_destroy(&sc->cond);
		pthread_mutex_destroy(&sc->lock);
		free(sc);
		return -ret;
	}
	pthread_setname_np(sc->thread, "dcrfs-scrub");
	fs->scr.run = sc;
	return 0;
}

void dcrfs_scrub_stop(struct dcrfs *fs)
{
	struct dcrfs_scrub *sc = fs->scr.run;

	if (!sc)
		return;
	pthread_mutex_lock(&sc->lock);
	sc->stop = true;
	pthread_cond_broadcast(&sc->cond);
	pthread_mutex_unlock(&sc->lock);
	pthread_join(sc->thread, NULL);
	pthread_cond_destroy(&sc->cond);
	pthread_mutex_destroy(&sc->lock);
	free(sc);
	fs->scr.run = NULL;
}

void dcrfs_scrub_stats(struct dcrfs *fs, struct dcrfs_scrub_stats *out)
{
	struct dcrfs_scrub *sc = fs->scr.run;

	*out = (struct dcrfs_scrub_stats){ .interval_ms = fs->scr.ms,
					   .rate = fs->scr.rate };
	if (!sc)
		return;
	out->passes = atomic_load(&sc->passes);
	out->files = atomic_load(&sc->files);
	out->bytes = atomic_load(&sc->bytes);
	out->rotten = atomic_load(&sc->rotten);
	out->repaired = atomic_load(&sc->repaired);
	out->dropped = atomic_load(&sc->dropped);
	out->last_end_ns = atomic_load(&sc->last_end_ns);
	out->last_took_ns = atomic_load(&sc->last_took_ns);
}
