/* SPDX-License-Identifier: MIT */
/*
 * cache_room.c - the room the chunk cache leaves on its file system.
 *
 * The slabs share their file system with the catalog (and whatever else
 * is there), which may hold less than the budget: a small disk, a
 * tmpfs, space taken by others. Slabs never use its last @headroom
 * bytes: before a chunk is written, the free space it would leave is
 * checked (one statvfs, next to a write of a whole chunk), and if it
 * would leave less, the budget in effect (@limit) shrinks to what the
 * file system holds and slabs are evicted for the chunk, or it is not
 * cached. So the catalog keeps room to index new versions, and a full
 * file system (ENOSPC) is the budget reached, not an error per chunk:
 * it is said once per incident, which ends when the budget fits again.
 * Should the catalog find its file system full all the same, it asks
 * for room (dcr_cache_make_room).
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/statvfs.h>

#include "cache_int.h"
#include "common.h"

/* Free space slabs leave on their file system, for the catalog next to
 * them (see fs_room): an eighth of the file system, within these. */
#define HEADROOM_MIN ((uint64_t)256 << 10)
#define HEADROOM_MAX ((uint64_t)64 << 20)

/* The bytes free for us on the cache's file system into *@free, and its
 * size into *@size (may be NULL). 0 or -errno. */
static int fs_space(const struct dcr_cache *c, uint64_t *free, uint64_t *size)
{
	struct statvfs sv;

	if (statvfs(c->dir, &sv) < 0)
		return -errno;
	*free = (uint64_t)sv.f_bavail * sv.f_frsize;
	if (size)
		*size = (uint64_t)sv.f_blocks * sv.f_frsize;
	return 0;
}

/* What the slabs may hold with @free bytes free: what they hold and the
 * free space, less the headroom. Caller holds @lock. */
static uint64_t fs_cap(const struct dcr_cache *c, uint64_t free)
{
	if (free >= c->headroom)
		return c->bytes + (free - c->headroom);
	return c->bytes - DCR_MIN(c->bytes, c->headroom - free);
}

/* Say once per incident that the file system holds less than the budget. */
void say_short(struct dcr_cache *c)
{
	char a[32], b[32], h[32];
	uint64_t free = 0;

	if (atomic_exchange(&c->fs_short, true))
		return;
	if (fs_space(c, &free, NULL) < 0)
		free = 0;
	dcr_warn("cache %s: its file system is full (%s free): cached chunks "
		 "are evicted to keep %s free for the catalog, and the cache "
		 "stays below its budget (%s) while it is", c->dir,
		 dcr_format_size(free, a, sizeof(a)),
		 dcr_format_size(c->headroom, h, sizeof(h)),
		 dcr_format_size(c->budget, b, sizeof(b)));
}

/*
 * Before @need bytes are written into slab @keep: cap the budget in
 * effect to what the file system holds and, if the write would leave
 * less than the headroom free, evict for it (@keep last). 1 if the file
 * system holds the whole budget and the headroom more (no incident), 0
 * if the write may go ahead, -ENOSPC if it would eat into the headroom
 * all the same (the chunk is then not cached).
 */
int fs_room(struct dcr_cache *c, struct slab *keep, uint64_t need)
{
	uint64_t free = 0, cap;
	bool fits, whole, dead;

	if (fs_space(c, &free, NULL) < 0)
		return 0; /* cannot tell: the write will say */
	pthread_mutex_lock(&c->lock);
	cap = fs_cap(c, free);
	/* (with a margin, so that an incident does not end and begin again
	 * at every chunk while the file system is about the budget) */
	whole = cap >= c->budget + c->headroom;
	c->limit = DCR_MIN(c->budget, cap);
	fits = free >= c->headroom + need;
	pthread_mutex_unlock(&c->lock);
	if (fits)
		return whole;
	say_short(c);
	evict(c, keep, need);
	pthread_mutex_lock(&c->lock);
	dead = keep && keep->dead; /* evicted itself: nothing to write to */
	pthread_mutex_unlock(&c->lock);
	if (dead || (fs_space(c, &free, NULL) == 0 &&
		     free < c->headroom + need))
		return -ENOSPC;
	return 0;
}

bool dcr_cache_room_for(struct dcr_cache *c, uint64_t bytes)
{
	uint64_t free = 0;

	if (atomic_load(&c->fs_short) || fs_space(c, &free, NULL) < 0)
		return false;
	return free >= c->headroom + bytes;
}

int dcr_cache_make_room(struct dcr_cache *c, uint64_t want)
{
	uint64_t before, after;

	if (!want)
		want = c->headroom;
	pthread_mutex_lock(&c->lock);
	before = c->bytes;
	c->limit = DCR_MIN(c->limit, c->bytes);
	c->limit -= DCR_MIN(c->limit, want);
	pthread_mutex_unlock(&c->lock);
	say_short(c);
	evict(c, NULL, 0);
	pthread_mutex_lock(&c->lock);
	after = c->bytes;
	pthread_mutex_unlock(&c->lock);
	return after < before ? 0 : -ENOSPC;
}

int dcr_cache_room_hook(void *cache, uint64_t want)
{
	return dcr_cache_make_room(cache, want);
}

/*
 * The headroom for the cache's file system and, if it holds less than
 * the budget, the budget in effect, said once (at mount time).
 */
void open_fit(struct dcr_cache *c)
{
	char a[32], b[32], f[32], l[32], h[32];
	uint64_t free = 0, size = 0;

	if (fs_space(c, &free, &size) < 0)
		return; /* as if it held the budget: writes will say */
	c->headroom = DCR_MIN(HEADROOM_MAX, DCR_MAX(HEADROOM_MIN, size / 8));
	c->limit = DCR_MIN(c->budget, fs_cap(c, free));
	if (c->limit >= c->budget)
		return;
	atomic_store(&c->fs_short, true); /* the incident is said here */
	dcr_warn("cache %s: cache_size %s is more than its file system holds "
		 "(%s, %s free): the cache keeps to %s, leaving %s free for "
		 "the catalog", c->dir, dcr_format_size(c->budget, b, sizeof(b)),
		 dcr_format_size(size, a, sizeof(a)),
		 dcr_format_size(free, f, sizeof(f)),
		 dcr_format_size(c->limit, l, sizeof(l)),
		 dcr_format_size(c->headroom, h, sizeof(h)));
}
