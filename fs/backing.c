/* SPDX-License-Identifier: MIT */
/*
 * backing.c - which version files are open through FUSE passthrough
 * (fs.h, dcrfs_backing_open/_release).
 *
 * The kernel's rules (notes/fuse-passthrough.md): one backing file per
 * inode at a time, and never a passthrough open of an inode that is
 * also open on the normal path (either way the open fails with EIO). So
 * every open version file has an entry here, in one mode: the inode's
 * first open picks it (passthrough when the file is whole and proven in
 * the cache, see dcr_reader_backing_open), later opens follow it while
 * any stays open, and the last release ends it; a file being read cold
 * thus stays on the normal path until its last release, and the next
 * open after that can go through passthrough. The backing id and the
 * cache pin live as long as the entry: the kernel looks the id up while
 * it handles each open, and reads the pinned file until the last
 * release (which comes after the last munmap).
 *
 * Locking: @fs->bk.lock guards the table, and is never held across
 * the check of a file (it reads the whole file) or its registration:
 * the first open of an inode lists its entry as deciding, checks and
 * registers without the lock, then records the outcome and wakes
 * @fs->bk.cv; other opens of that inode wait for it there (so two
 * first opens of one inode never register two files), while first
 * opens of other inodes (the shards of a checkpoint) are checked at
 * the same time. Lock order: bk.lock, then the reader's and the
 * cache's locks.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "fs.h"
#include "handover.h"

struct dcrfs_backing {
	fuse_ino_t ino;
	unsigned opens;          /* open handles of the inode */
	int id;                  /* > 0: passthrough on this backing id */
	bool deciding;           /* its first open checks it: wait */
	struct dcr_cache_pin *pin;
};

/* Index of the first entry >= @ino. Caller holds bk.lock. */
static size_t lower(const struct dcrfs *fs, fuse_ino_t ino)
{
	return dcr_lower_bound_u64(fs->bk.tab, fs->bk.n,
				   sizeof(*fs->bk.tab),
				   offsetof(struct dcrfs_backing, ino), ino);
}

static struct dcrfs_backing *find(struct dcrfs *fs, fuse_ino_t ino)
{
	size_t i = lower(fs, ino);

	return i < fs->bk.n && fs->bk.tab[i].ino == ino ?
	       &fs->bk.tab[i] : NULL;
}

static struct dcrfs_backing *insert(struct dcrfs *fs, fuse_ino_t ino)
{
	size_t i = lower(fs, ino);

	if (fs->bk.n == fs->bk.cap) {
		size_t cap = fs->bk.cap ? fs->bk.cap * 2 : 16;
		struct dcrfs_backing *t = realloc(fs->bk.tab,
						  cap * sizeof(*t));
		if (!t)
			return NULL;
		fs->bk.tab = t;
		fs->bk.cap = cap;
	}
	memmove(&fs->bk.tab[i + 1], &fs->bk.tab[i],
		(fs->bk.n - i) * sizeof(*fs->bk.tab));
	fs->bk.n++;
	fs->bk.tab[i] = (struct dcrfs_backing){ .ino = ino };
	return &fs->bk.tab[i];
}

static void drop(struct dcrfs *fs, struct dcrfs_backing *b, bool release_id)
{
	size_t i = (size_t)(b - fs->bk.tab);

	if (b->id > 0 && release_id)
		dcrfs_pt_unregister(&fs->bk.pt, b->id);
	dcr_reader_backing_close(fs->r, b->pin);
	memmove(&fs->bk.tab[i], &fs->bk.tab[i + 1],
		(fs->bk.n - i - 1) * sizeof(*fs->bk.tab));
	fs->bk.n--;
}

static void count_fallback(struct dcrfs *fs, enum dcrfs_pt_fallback why)
{
	atomic_fetch_add_explicit(&fs->bk.pt.fallbacks[why], 1,
				  memory_order_relaxed);
}

int dcrfs_backing_open(struct dcrfs *fs, fuse_ino_t ino, uint64_t v,
		       uint32_t tree, uint32_t idx)
{
	struct dcr_cache_pin *pin = NULL;
	struct dcrfs_backing *b;
	int fd, id = 0;

	pthread_mutex_lock(&fs->bk.lock);
	while ((b = find(fs, ino)) && b->deciding)
		pthread_cond_wait(&fs->bk.cv, &fs->bk.lock);
	if (b) {
		b->opens++;
		id = b->id;
		pthread_mutex_unlock(&fs->bk.lock);
		if (!id)
			count_fallback(fs, DCRFS_PT_FB_MIXED);
		dcrfs_ho_hold_update(fs);
		return id;
	}
	b = insert(fs, ino);
	if (!b) { /* without an entry its mode could not be kept: fail it */
		pthread_mutex_unlock(&fs->bk.lock);
		return DCR_ERR(-ENOMEM);
	}
	b->opens = 1;
	if (!dcrfs_pt_usable(&fs->bk.pt)) {
		pthread_mutex_unlock(&fs->bk.lock);
		count_fallback(fs, DCRFS_PT_FB_OFF);
		dcrfs_ho_hold_update(fs);
		return 0;
	}
	b->deciding = true; /* nothing drops or joins it meanwhile */
	pthread_mutex_unlock(&fs->bk.lock);

	fd = dcr_reader_backing_open(fs->r, v, tree, idx, &pin);
	if (fd >= 0) {
		id = dcrfs_pt_register(&fs->bk.pt, fd);
		close(fd); /* the kernel holds its own reference */
		if (id < 0) {
			dcr_reader_backing_close(fs->r, pin);
			pin = NULL;
			id = 0;
			count_fallback(fs, DCRFS_PT_FB_REGISTER);
			if (!dcrfs_pt_usable(&fs->bk.pt)) /* back to one copy */
				dcr_reader_set_cache_direct(fs->r, true);
		} else {
			/* The kernel now reads the cache file: pages the
			 * normal path left in the inode's own cache would be
			 * a second copy. */
			fuse_lowlevel_notify_inval_inode(fs->se, ino, 0, 0);
		}
	} else if (fd != -ESTALE && fd != -ENOENT) {
		count_fallback(fs, DCRFS_PT_FB_NOT_READY);
	}

	pthread_mutex_lock(&fs->bk.lock);
	b = find(fs, ino); /* ours still: the table may have moved */
	b->deciding = false;
	pthread_cond_broadcast(&fs->bk.cv);
	if (fd == -ESTALE || fd == -ENOENT) {
		drop(fs, b, false); /* the open fails as a read would */
		pthread_mutex_unlock(&fs->bk.lock);
		return fd;
	}
	b->pin = pin;
	b->id = id;
	pthread_mutex_unlock(&fs->bk.lock);
	dcrfs_ho_hold_update(fs);
	return id;
}

void dcrfs_backing_release(struct dcrfs *fs, fuse_ino_t ino)
{
	struct dcrfs_backing *b;

	pthread_mutex_lock(&fs->bk.lock);
	b = find(fs, ino);
	if (!b)
		dcr_warn("release of inode %#" PRIx64 ", which is not open",
			 (uint64_t)ino);
	else if (--b->opens == 0)
		drop(fs, b, true);
	pthread_mutex_unlock(&fs->bk.lock);
	/* the holder hears of it after the reply (the caller's
	 * dcrfs_ho_hold_update): a crash in between leaves its count one
	 * too high, never too low (fs/handover.h) */
}

ssize_t dcrfs_backing_snapshot(struct dcrfs *fs, struct dcrfs_backed **out)
{
	struct dcrfs_backed *a;
	size_t n = 0;

	pthread_mutex_lock(&fs->bk.lock);
	a = malloc((fs->bk.n ? fs->bk.n : 1) * sizeof(*a));
	for (size_t i = 0; a && i < fs->bk.n; i++) {
		const struct dcrfs_backing *b = &fs->bk.tab[i];

		if (b->id > 0 && b->pin)
			a[n++] = (struct dcrfs_backed){
				b->ino, dcr_reader_backing_hold(fs->r, b->pin)
			};
	}
	pthread_mutex_unlock(&fs->bk.lock);
	*out = a;
	return a ? (ssize_t)n : DCR_ERR(-ENOMEM);
}

void dcrfs_backing_free(struct dcrfs *fs)
{
	pthread_mutex_lock(&fs->bk.lock);
	while (fs->bk.n)
		drop(fs, &fs->bk.tab[fs->bk.n - 1], false);
	free(fs->bk.tab);
	fs->bk.tab = NULL;
	fs->bk.cap = 0;
	pthread_mutex_unlock(&fs->bk.lock);
}

ssize_t dcrfs_backing_export(struct dcrfs *fs, struct dcrfs_backing_rec **out)
{
	struct dcrfs_backing_rec *a;
	size_t n;

	pthread_mutex_lock(&fs->bk.lock);
	n = fs->bk.n;
	a = malloc((n ? n : 1) * sizeof(*a));
	for (size_t i = 0; a && i < n; i++)
		a[i] = (struct dcrfs_backing_rec){ fs->bk.tab[i].ino,
						   fs->bk.tab[i].opens,
						   fs->bk.tab[i].id };
	pthread_mutex_unlock(&fs->bk.lock);
	*out = a;
	return a ? (ssize_t)n : DCR_ERR(-ENOMEM);
}

int dcrfs_backing_adopt(struct dcrfs *fs, const struct dcrfs_backing_rec *rec)
{
	struct dcr_cache_pin *pin = NULL;
	struct dcrfs_backing *b;
	uint64_t v;
	uint32_t tree, idx;

	if (!rec->opens || !dcrfs_ino_split(rec->ino, &v, &tree, &idx))
		return DCR_ERR(-EINVAL);
	if (rec->id > 0) {
		/* the kernel reads the cache file: keep it from being
		 * changed in place, as the open that registered it did */
		int fd = dcr_reader_backing_open(fs->r, v, tree, idx, &pin);

		if (fd >= 0)
			close(fd);
		else
			dcr_warn("handover: inode %#" PRIx64 " is open through "
				 "passthrough but its cache file is not whole "
				 "here (%s): the kernel keeps reading the one "
				 "it holds", rec->ino, dcr_strerror(fd));
	}
	pthread_mutex_lock(&fs->bk.lock);
	b = find(fs, rec->ino) ? NULL : insert(fs, rec->ino);
	if (b) {
		b->opens = rec->opens;
		b->id = rec->id > 0 ? rec->id : 0;
		b->pin = pin;
		if (b->id)
			atomic_fetch_add_explicit(&fs->bk.pt.registered, 1,
						  memory_order_relaxed);
	}
	pthread_mutex_unlock(&fs->bk.lock);
	if (!b) {
		dcr_reader_backing_close(fs->r, pin);
		return DCR_ERR(-ENOMEM);
	}
	return 0;
}
