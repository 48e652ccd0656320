/* SPDX-License-Identifier: MIT */
/*
 * fs.h - internal declarations shared by the dcrfs FUSE daemon
 * (fs/main.c: mounting, daemonizing; fs/args.c: options; fs/ops.c:
 * the low-level operations, dispatching on the inode's kind to tree.c,
 * tags.c, ctl.c and delta.c (node.h); fs/bg.c: the background poll and prefetch
 * threads; fs/state.c: the state's locks; fs/xattr.c: the provenance
 * extended attributes of the version trees).
 *
 * Only fs/ includes <fuse_lowlevel.h> (DESIGN.md section 3).
 *
 * Inode numbers are computed, never allocated, so lookups need no table
 * and forget has nothing to free:
 *
 *   1                         the root directory
 *   2                         /latest (symlink to "vN")
 *   3                         /tags
 *   4                         /.dcrfs (hidden: looked up, never listed)
 *   5, 6                      /.dcrfs/status.json, /.dcrfs/metrics
 *   7                         /delta (delta.c)
 *   8                         /.dcrfs/latest (latestfile.c)
 *   0x100 + k                 /tags/<name>, k = slot of the name in the
 *                             tag-name table (assigned on first sight,
 *                             never reused while mounted), k below
 *                             0x80000000 - 0x100
 *   0x80000000 + k            a node below /delta: k = slot of (from
 *                             version, its tree, to version, its tree,
 *                             entry of the to-tree) in delta.c's node
 *                             table (assigned on first sight, never
 *                             reused while mounted)
 *   (v << 32) | (t << 24) | (idx + 2)
 *                             entry idx of tree t of version v (idx 0
 *                             is the version directory /vN itself);
 *                             1 <= v <= DCR_VERSION_MAX (2^32 - 1,
 *                             core/manifest.h: the one cap every layer
 *                             enforces), t = dcr_version_info.tree
 *                             (0 .. DCRFS_TREE_MAX), idx <= DCRFS_IDX_MAX
 *
 * The tree is part of the number: a version re-indexed with other
 * content (changed in the store) gets other inode numbers, so an inode
 * the kernel still holds from the old tree (a cached dentry, an open
 * directory, a file handle) names the old tree, and every operation on
 * it fails with ESTALE instead of mixing the new tree's bytes into the
 * old pages the kernel keeps (keep_cache). The kernel does not give the
 * generation of an entry back on open, so the number must carry it.
 * A version with more entries than DCRFS_IDX_MAX + 1, or re-indexed more
 * than DCRFS_TREE_MAX times in one mount, is not served (EOVERFLOW,
 * logged): numbers are never reused for another tree.
 *
 * The version-tree numbers depend only on the manifest and on how often
 * this mount saw the version change (0 at mount), so they are the same
 * after a remount: they encode (version, tree, entry). So do the fixed
 * numbers 1-8. The others depend on this mount's memory: a tag's number
 * is its slot in the tag-name table (struct dcrfs_tags) and a /delta
 * node's its slot in delta.c's node table (struct dcrfs_dv), both in
 * the order this mount first saw them; a new daemon that takes over a
 * mount must carry those tables or fail those inodes.
 *
 * dcrfs_ino_resolve turns a number into its kind (enum dcrfs_kind) in
 * one place; the handlers (ops.c) switch on the kind.
 */
#ifndef DCRFS_FS_H
#define DCRFS_FS_H

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 312
#endif

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <fuse_lowlevel.h>

#include "manifest.h"
#include "objstore.h"
#include "passthrough.h"
#include "dvrec.h"
#include "reader.h"

#define DCRFS_INO_ROOT ((fuse_ino_t)1)
#define DCRFS_INO_LATEST ((fuse_ino_t)2)
#define DCRFS_INO_TAGS ((fuse_ino_t)3)
#define DCRFS_INO_STATUS_DIR ((fuse_ino_t)4)
#define DCRFS_INO_STATUS_JSON ((fuse_ino_t)5)
#define DCRFS_INO_METRICS ((fuse_ino_t)6)
#define DCRFS_STATUS_DIR ".dcrfs"
#define DCRFS_INO_DELTA ((fuse_ino_t)7)
#define DCRFS_INO_LATEST_FILE ((fuse_ino_t)8)
#define DCRFS_DELTA_DIR "delta"
#define DCRFS_INO_TAG_BASE ((fuse_ino_t)0x100)
/** Nodes below /delta: inodes DCRFS_INO_DVIEW_BASE .. _MAX (one slot
 * each); tags stay below DCRFS_INO_DVIEW_BASE. */
#define DCRFS_INO_DVIEW_BASE ((fuse_ino_t)0x80000000u)
#define DCRFS_DVIEW_SLOTS 0x7fffffffu
#define DCRFS_INO_DVIEW_MAX (DCRFS_INO_DVIEW_BASE + DCRFS_DVIEW_SLOTS - 1)
/* The version must fit the high 32 bits of an inode number. */
_Static_assert(DCR_VERSION_MAX <= UINT64_C(0xffffffff),
	       "DCR_VERSION_MAX does not fit the dcrfs inode scheme");
_Static_assert(sizeof(fuse_ino_t) >= 8, "fuse_ino_t narrower than 64 bits");
#define DCRFS_TREE_SHIFT 24
/** Largest entry index and tree of a version that inode numbers hold. */
#define DCRFS_IDX_MAX ((UINT32_C(1) << DCRFS_TREE_SHIFT) - 3)
#define DCRFS_TREE_MAX (UINT32_MAX >> DCRFS_TREE_SHIFT)

/** Cache lifetimes, in seconds. Version trees are immutable. */
#define DCRFS_TTL_IMMUTABLE 86400.0
#define DCRFS_TTL_MUTABLE 1.0

/** Trees of versions the reader keeps in memory while nobody uses them
 * (dcr_reader_opts.max_trees): the others are loaded from the catalog
 * again on use, so memory does not grow with the number of versions. */
#define DCRFS_TREES_KEPT 16

/** Largest read request served (the kernel sends at most 1 MiB). */
#define DCRFS_READ_MAX (1u << 20)

/** Inode number of entry @idx (<= DCRFS_IDX_MAX) of tree @tree
 * (<= DCRFS_TREE_MAX) of version @v. */
static inline fuse_ino_t dcrfs_ino_make(uint64_t v, uint32_t tree,
					uint32_t idx)
{
	return (fuse_ino_t)((v << 32) | ((uint64_t)tree << DCRFS_TREE_SHIFT) |
			    ((uint64_t)idx + 2));
}

/**
 * dcrfs_ino_split - decode a version-tree inode into its version, tree
 * and entry index. Returns 1 for a version-tree inode, 0 for any other.
 */
static inline int dcrfs_ino_split(fuse_ino_t ino, uint64_t *v,
				  uint32_t *tree, uint32_t *idx)
{
	uint64_t hi = (uint64_t)ino >> 32;
	uint32_t lo = (uint32_t)ino;
	uint32_t low = lo & ((UINT32_C(1) << DCRFS_TREE_SHIFT) - 1);

	if (hi == 0 || low < 2)
		return 0;
	*v = hi;
	*tree = lo >> DCRFS_TREE_SHIFT;
	*idx = low - 2;
	return 1;
}

/**
 * enum dcrfs_kind - what an inode number names, resolved once
 * (dcrfs_ino_resolve) so that each FUSE handler switches on it
 * (fs/ops.c) instead of testing the number's ranges itself.
 */
enum dcrfs_kind {
	DCRFS_K_NONE = 0,     /* no node of this mount has this number */
	DCRFS_K_ROOT,         /* / */
	DCRFS_K_LATEST,       /* /latest, the symlink */
	DCRFS_K_TAGS,         /* /tags */
	DCRFS_K_TAG,          /* /tags/NAME: slot in node.slot */
	DCRFS_K_CTL_DIR,      /* /.dcrfs */
	DCRFS_K_CTL_STATUS,   /* /.dcrfs/status.json */
	DCRFS_K_CTL_METRICS,  /* /.dcrfs/metrics */
	DCRFS_K_CTL_LATEST,   /* /.dcrfs/latest (latestfile.c) */
	DCRFS_K_DELTA_DIR,    /* /delta (delta.c) */
	DCRFS_K_DELTA_NODE,   /* a node below /delta: slot in node.slot */
	DCRFS_K_VERSION,      /* entry node.idx of tree node.tree of
				 version node.v (idx 0: /vN itself) */
};

/** An inode number and what it names (dcrfs_ino_resolve). */
struct dcrfs_node {
	enum dcrfs_kind kind;
	fuse_ino_t ino;
	uint64_t v;           /* DCRFS_K_VERSION */
	uint32_t tree, idx;   /* DCRFS_K_VERSION */
	uint64_t slot;        /* DCRFS_K_TAG, DCRFS_K_DELTA_NODE */
};

/**
 * dcrfs_ino_resolve - what inode @ino names, into @n, from the number
 * alone (the scheme above): no lookup, no lock. A tag or /delta slot
 * is not checked against its table here (the handlers do: -ENOENT for
 * a slot never assigned).
 */
static inline void dcrfs_ino_resolve(fuse_ino_t ino, struct dcrfs_node *n)
{
	n->kind = DCRFS_K_NONE;
	n->ino = ino;
	n->v = 0;
	n->tree = n->idx = 0;
	n->slot = 0;
	switch (ino) {
	case DCRFS_INO_ROOT: n->kind = DCRFS_K_ROOT; return;
	case DCRFS_INO_LATEST: n->kind = DCRFS_K_LATEST; return;
	case DCRFS_INO_TAGS: n->kind = DCRFS_K_TAGS; return;
	case DCRFS_INO_STATUS_DIR: n->kind = DCRFS_K_CTL_DIR; return;
	case DCRFS_INO_STATUS_JSON: n->kind = DCRFS_K_CTL_STATUS; return;
	case DCRFS_INO_METRICS: n->kind = DCRFS_K_CTL_METRICS; return;
	case DCRFS_INO_LATEST_FILE: n->kind = DCRFS_K_CTL_LATEST; return;
	case DCRFS_INO_DELTA: n->kind = DCRFS_K_DELTA_DIR; return;
	default: break;
	}
	if (ino >= DCRFS_INO_TAG_BASE && ino < DCRFS_INO_DVIEW_BASE) {
		n->kind = DCRFS_K_TAG;
		n->slot = ino - DCRFS_INO_TAG_BASE;
	} else if (ino >= DCRFS_INO_DVIEW_BASE && ino <= DCRFS_INO_DVIEW_MAX) {
		n->kind = DCRFS_K_DELTA_NODE;
		n->slot = ino - DCRFS_INO_DVIEW_BASE;
	} else if (dcrfs_ino_split(ino, &n->v, &n->tree, &n->idx)) {
		n->kind = DCRFS_K_VERSION;
	}
}

/** What a mount does when a new version appears. */
enum dcrfs_prefetch {
	DCRFS_PREFETCH_NONE = 0,
	DCRFS_PREFETCH_LATEST = 1, /* read all of the newest version */
	DCRFS_PREFETCH_ALL = 2,    /* the newest, then every older one */
};

/** Bytes the prefetcher asks the reader for at once (chunks of one
 * request are materialized in parallel by the reader). */
#define DCRFS_PREFETCH_BLOCK (8u << 20)

/*
 * The state of one mount is split by concern, one sub-struct per part of
 * fs/, each with the lock that guards it and what that lock protects
 * (the reader does the same, read/reader_int.h).
 *
 * Locks of struct dcrfs: ver.refresh_lock (bg.c), bg.lock (bg.c),
 * tags.lock (ops.c), bk.lock (backing.c), watch.lock (latestfile.c) and
 * the /delta table's own locks (delta.c). Each file's top comment gives
 * the order of its own with the reader's and the cache's locks (e.g.
 * bk.lock before them); no two of ours are held together (fs_refresh
 * drops ver.refresh_lock before it kicks the watcher under bg.lock),
 * and watch.lock is taken under no other lock.
 */

/** Set by main.c before the session loop and read-only afterwards: what
 * the kernel is told at INIT and the attributes every inode shows. */
struct dcrfs_cfg {
	unsigned int read_ahead_kb;    /* 0: leave the kernel default */
	unsigned int max_read;         /* -o max_read=N, 0 if not given */
	uid_t uid;                     /* owner shown for every inode */
	gid_t gid;
	int64_t mount_ns;              /* mtime of the root of an empty store */
};

/** The versions the mount shows: refreshes from the store (bg.c
 * fs_refresh) and the target of /latest. */
struct dcrfs_ver {
	unsigned int poll_ms;          /* -o poll; 0: no periodic refresh */
	/* -o latest_wait: with prefetch, /latest moves to a new version
	 * once it is prefetched, or after this long (0: at once) */
	unsigned int latest_wait_ms;
	/* The target of /latest (dcrfs_latest): the reader's newest
	 * version, or with prefetch the newest one prefetched (or waited
	 * for latest_wait_ms): what the kernel was told about. Written by
	 * the watcher under bg.lock, read anywhere. */
	atomic_uint_fast64_t latest;
	/* refresh_lock serialises refreshes; lookup misses share one
	 * (last_refresh_ns: when the last refresh started, under it) */
	pthread_mutex_t refresh_lock;
	int64_t last_refresh_ns;
};

/** The background threads (bg.c): the watcher and the prefetcher. The
 * options (prefetch, prefetch_pagecache) are read-only once mounted;
 * bg.lock guards every other field, bg.cond (CLOCK_MONOTONIC) wakes
 * both threads. */
struct dcrfs_bg {
	enum dcrfs_prefetch prefetch;  /* -o prefetch */
	int prefetch_pagecache;        /* -o prefetch_pagecache */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int stop;
	int kick;                      /* watcher: look at latest now */
	/* With prefetch: when the watcher must show the reader's newest
	 * version, held back from /latest, whatever the prefetch (mono ns;
	 * 0: nothing held back) */
	int64_t held_until_ns;
	uint64_t prefetch_latest_done; /* newest version prefetched whole */
	uint64_t prefetch_want;        /* newest version to prefetch */
	uint64_t prefetch_done;        /* last version fully prefetched */
	uint64_t prefetch_swept;       /* prefetch=all: every version up to
					  this one was prefetched */
	pthread_t watcher;
	pthread_t prefetcher;
	int watcher_running;           /* set and read by start/stop only */
	int prefetcher_running;
};

/** The tag-name table (ops.c): slot k <-> inode DCRFS_INO_TAG_BASE + k,
 * assigned on first sight and never reused while mounted, so the
 * numbers of /tags/NAME depend on this mount's memory (not on the
 * store). tags.lock guards names, n and cap. */
struct dcrfs_tags {
	pthread_mutex_t lock;
	char **names;
	size_t n;
	size_t cap;
};

/** The open version files (backing.c) and FUSE passthrough
 * (passthrough.h): bk.lock guards tab, n and cap (the entries' modes);
 * bk.cv wakes the opens waiting for an inode's first open to decide.
 * pt has its own atomics and is set up before the session loop. */
struct dcrfs_bk {
	struct dcrfs_pt pt;
	pthread_mutex_t lock;
	pthread_cond_t cv;
	struct dcrfs_backing *tab;     /* sorted by inode */
	size_t n, cap;
};

/** The scrub (scrub.c): -o scrub=SECONDS, scrub_rate=SIZE, read-only
 * once mounted; run is set by dcrfs_scrub_start and cleared by
 * dcrfs_scrub_stop, both from main.c's thread. */
struct dcrfs_scr {
	unsigned int ms;               /* 0: off */
	uint64_t rate;                 /* bytes a second */
	struct dcrfs_scrub *run;       /* NULL when off or not started */
};

/** /delta (delta.c): its node table and built views (tab, with its own
 * lock; its slots make the inode numbers below /delta, which depend on
 * this mount's memory), the cache directory for their files and their
 * budget, set before dcrfs_init_state and read-only afterwards. */
/** -o delta_ahead: when the views of a new version are built ahead of
 * their first read, from the changes its prefetch saw (read/dvrec.h). */
enum dcrfs_delta_ahead {
	DCRFS_DELTA_AHEAD_AUTO, /* once this mount served a view (default) */
	DCRFS_DELTA_AHEAD_ON,   /* always */
	DCRFS_DELTA_AHEAD_OFF,  /* never: each view is built at its first read */
};

struct dcrfs_dv {
	struct dcrfs_delta *tab;
	const char *tmpdir;
	uint64_t budget;
	enum dcrfs_delta_ahead ahead;
};

/** The opens of /.dcrfs/latest and their poll handles (latestfile.c):
 * watch.lock guards the list and each open's state; taken under no
 * other lock. */
struct dcrfs_watch {
	pthread_mutex_t lock;
	struct dcrfs_latest_open *opens;
};

/**
 * struct dcrfs - the state of one mount, the session's userdata.
 * Filled by main.c before the session loop starts; the handles and the
 * option fields are read-only afterwards. Each sub-struct says what
 * guards the rest.
 */
struct dcrfs {
	struct dcr_store *st;
	struct dcr_reader *r;
	struct dcr_trust *trust;       /* -o trust=FILE; NULL: none */
	struct fuse_session *se;
	const char *mountpoint;

	struct dcrfs_cfg cfg;          /* INIT options, shown attributes */
	struct dcrfs_ver ver;          /* refreshes and /latest */
	struct dcrfs_bg bg;            /* watcher and prefetcher */
	struct dcrfs_tags tags;        /* /tags inode slots */
	struct dcrfs_bk bk;            /* open version files, passthrough */
	struct dcrfs_scr scr;          /* the scrub */
	struct dcrfs_dv dv;            /* /delta */
	struct dcrfs_watch watch;      /* /.dcrfs/latest opens */

	/* statistics for status.c: relaxed atomics, no lock */
	struct {
		atomic_uint_fast64_t reads, read_errors, refresh_errors;
		atomic_uint_fast64_t pf_version; /* being prefetched (0: none) */
		atomic_uint_fast64_t pf_bytes;   /* of it, done */
		atomic_uint_fast64_t pf_total;   /* of it, in all */
		atomic_uint_fast64_t pf_versions; /* prefetched whole */
	} stats;
};

/** The hidden files of MNT/.dcrfs. */
enum dcrfs_status_file {
	DCRFS_STATUS_JSON,    /* status.json */
	DCRFS_STATUS_METRICS, /* metrics, Prometheus text format */
};

/**
 * dcrfs_status_render - the current contents of a status file into a
 * malloc'ed buffer *@out of *@len bytes (the caller frees it). 0 or
 * -ENOMEM. Thread-safe (status.c).
 */
int dcrfs_status_render(struct dcrfs *fs, enum dcrfs_status_file which,
			char **out, size_t *len);

/**
 * dcrfs_latest - the version /latest points to (0: none). Without
 * prefetch the newest version the reader knows; with prefetch, the
 * newest that the prefetcher finished (or that waited latest_wait),
 * so that opening latest/FILE finds it whole in the cache. Never newer
 * than the reader's newest. Thread-safe.
 */
static inline uint64_t dcrfs_latest(struct dcrfs *fs)
{
	uint64_t newest = dcr_reader_latest(fs->r);
	uint64_t shown;

	if (fs->bg.prefetch == DCRFS_PREFETCH_NONE || !fs->ver.latest_wait_ms)
		return newest;
	shown = atomic_load_explicit(&fs->ver.latest, memory_order_relaxed);
	return shown && shown <= newest ? shown : newest;
}

/** fi->fh of a version file: its tree (low 32 bits), and this bit for
 * an open answered with passthrough. */
#define DCRFS_FH_PASSTHROUGH (UINT64_C(1) << 32)

/**
 * dcrfs_backing_open - the mode of a new open of version file @ino
 * (entry @idx of version @v, tree @tree): a backing id (> 0) to answer
 * it with passthrough, 0 for the normal read path, or -errno to fail
 * it (-ESTALE: the version was re-indexed). Every call that does not
 * fail must be paired with dcrfs_backing_release() on the open's
 * release, or at once if its reply did not reach the kernel. Counts
 * the fallbacks. Thread-safe (backing.c).
 */
int dcrfs_backing_open(struct dcrfs *fs, fuse_ino_t ino, uint64_t v,
		       uint32_t tree, uint32_t idx);

/** dcrfs_backing_release - one open of @ino ended. Thread-safe. The
 * caller tells the holder (dcrfs_ho_hold_update) after its reply. */
void dcrfs_backing_release(struct dcrfs *fs, fuse_ino_t ino);

/** dcrfs_backing_free - forget every entry (unmounted: the kernel has
 * released everything, and closing /dev/fuse drops the backing ids). */
void dcrfs_backing_free(struct dcrfs *fs);

/** A version file open through passthrough, with a hold of its pin. */
struct dcrfs_backed {
	fuse_ino_t ino;
	struct dcr_cache_pin *pin;
};

/**
 * dcrfs_backing_snapshot - the version files open through passthrough
 * now, into a malloc'ed *@out (the caller frees it), each with a hold of
 * its cache file's pin (dcr_reader_backing_hold) that the caller
 * releases with dcr_reader_backing_close. The count, or -ENOMEM.
 * Thread-safe (backing.c).
 */
ssize_t dcrfs_backing_snapshot(struct dcrfs *fs, struct dcrfs_backed **out);

/** One entry of the open-files table, as a handover carries it. */
struct dcrfs_backing_rec {
	uint64_t ino;
	uint32_t opens;  /* open handles of the inode */
	int32_t id;      /* > 0: its backing id (passthrough), 0: none */
};

/**
 * dcrfs_backing_export - every entry of the open-files table into a
 * malloc'ed *@out (the caller frees it): the count, or -ENOMEM. A
 * handover calls it once the session loop ended (no open is deciding);
 * the holder's copy (fs/handover.h) at each change, while the session
 * runs: an entry being decided is exported as it stands (its open
 * counted, no backing id yet). Thread-safe.
 */
ssize_t dcrfs_backing_export(struct dcrfs *fs, struct dcrfs_backing_rec **out);

/**
 * dcrfs_backing_adopt - take over entry @rec of a daemon that handed the
 * mount over: its opens, and its backing id, which the kernel holds for
 * the connection (released at the inode's last release, as our own),
 * with a pin of its cache file when the reader still has it (else
 * logged). 0 or -errno. Before the session loop starts.
 */
int dcrfs_backing_adopt(struct dcrfs *fs, const struct dcrfs_backing_rec *rec);

/* -------------------------- handles of open state in memory (handles.c) */

/**
 * dcrfs_fh_put - a handle (fi->fh) for @p, the state of one open of a
 * file of /.dcrfs or /delta: a slot with this process's generation,
 * never a pointer, so that a daemon restarted after a crash knows the
 * dead one's handles for strangers (handles.c). 0: out of memory.
 */
uint64_t dcrfs_fh_put(void *p);

/** dcrfs_fh_get - the state of handle @fh, or NULL: not this process's
 * (an open from before a restart). Thread-safe. */
void *dcrfs_fh_get(uint64_t fh);

/** dcrfs_fh_take - as dcrfs_fh_get, and @fh is free again (its
 * release). Thread-safe. */
void *dcrfs_fh_take(uint64_t fh);

/** dcrfs_fh_stranger - say, once per process, that a handle of @what
 * was a stranger's (answered EIO). */
void dcrfs_fh_stranger(const char *what);

/* ------------------------------------------------- the scrub (scrub.c) */

/** The scrub's settings and what it found since the mount. */
struct dcrfs_scrub_stats {
	unsigned int interval_ms; /* 0: off */
	uint64_t rate;            /* bytes a second */
	uint64_t passes, files, bytes, rotten, repaired, dropped;
	int64_t last_end_ns;      /* wall clock of the last pass's end; 0 */
	int64_t last_took_ns;     /* how long it took */
};

/**
 * dcrfs_scrub_start - with fs->scr.ms, start the scrub's thread: every
 * scrub_ms it re-checks the files open through passthrough from their
 * cache files, at most scrub_rate bytes a second, and repairs in place
 * what rotted (scrub.c). Without, says once that it is off. 0 or -errno.
 */
int dcrfs_scrub_start(struct dcrfs *fs);

/** dcrfs_scrub_stop - stop and join it (within a chunk's check); safe
 * when never started. Before dcrfs_backing_free. */
void dcrfs_scrub_stop(struct dcrfs *fs);

/** dcrfs_scrub_stats - its settings and counters into *@out.
 * Thread-safe. */
void dcrfs_scrub_stats(struct dcrfs *fs, struct dcrfs_scrub_stats *out);

/** A running scrape endpoint (metrics_http.c). */
struct dcrfs_metrics;

/**
 * dcrfs_metrics_parse - split -o metrics=@spec, "HOST:PORT" or
 * "[V6ADDR]:PORT", into @host and @port (NUL-terminated, bounded by
 * their lengths). 0 or -EINVAL.
 */
int dcrfs_metrics_parse(const char *spec, char *host, size_t host_len,
			char *port, size_t port_len);

/**
 * dcrfs_metrics_start - serve GET /metrics (dcrfs_status_render's
 * Prometheus text of @fs) on @spec, HOST:PORT, from a thread of its own.
 * 0 with *@out set, or -errno with the reason logged once (the address
 * is bad, in use, or not ours).
 */
int dcrfs_metrics_start(struct dcrfs *fs, const char *spec,
			struct dcrfs_metrics **out);

/** Stop serving and free @m (NULL is ignored). */
void dcrfs_metrics_stop(struct dcrfs_metrics *m);

/* ----------------------------------------------- /delta (delta.c) */

/** dcrfs_delta_init - the empty node table of @fs: views are built in
 * @tmpdir (kept by the caller) and kept within @budget bytes. 0 or
 * -errno. Called by dcrfs_init_state. */
int dcrfs_delta_init(struct dcrfs *fs, const char *tmpdir, uint64_t budget);

/** dcrfs_delta_free - free every node and close every view (unmounted:
 * nothing is open). NULL table accepted. */
void dcrfs_delta_free(struct dcrfs *fs);

/**
 * dcrfs_delta_stat - attributes of /delta or of a node below it, and how
 * long the kernel may keep them. A file's view is built if its size is
 * not known yet (the exact size, never changing). 0 or -errno (-ENOENT,
 * -ESTALE: a version has another tree now, the build's -EIO ...).
 * Thread-safe.
 */
int dcrfs_delta_stat(struct dcrfs *fs, fuse_ino_t ino, struct stat *st,
		     double *ttl);

/**
 * dcrfs_delta_lookup - the child @name of /delta ("vN" for a version
 * with a parent, "vM..vN" for M an ancestor of N) or of a directory
 * node below it (a directory with safetensors files below it, or a
 * safetensors file, whose view is built now). Fills @st and the entry's
 * lifetime @ttl. 0 or -errno (-ENOENT when there is no such entry).
 * Thread-safe.
 */
int dcrfs_delta_lookup(struct dcrfs *fs, fuse_ino_t parent, const char *name,
		       struct stat *st, double *ttl);

/** One listed entry: @attrs false means @st holds only the inode and
 * type (the kernel must look it up for the rest). Returns 1 if the
 * reply is full (stop), else 0. */
typedef int (*dcrfs_delta_emit_fn)(void *ctx, const char *name,
				   const struct stat *st, off_t next,
				   bool attrs);

/**
 * dcrfs_delta_list - list directory @ino (/delta or a node) from offset
 * @off through @emit. /delta lists vN for each version with a parent
 * (spans are not listed); a node lists its subdirectories holding
 * safetensors files and its safetensors files (no view is built: files
 * are emitted without attributes). 0 or -errno. Thread-safe.
 */
int dcrfs_delta_list(struct dcrfs *fs, fuse_ino_t ino, off_t off,
		     dcrfs_delta_emit_fn emit, void *ctx);

/** dcrfs_delta_open - open the view file @ino: its view built or found
 * cached and held in *@fh until dcrfs_delta_release. 0 (reads come to
 * dcrfs_delta_read), a backing id > 0 (answer with dcrfs_pt_open_reply:
 * the kernel reads the view's checked local file itself), or -errno
 * (-EISDIR for a directory). Thread-safe. */
int dcrfs_delta_open(struct dcrfs *fs, fuse_ino_t ino, uint64_t *fh);

/** dcrfs_delta_read - read [@off, @off+@size) of the open view @fh into
 * @buf, every block checked (dcr_dview_pread): bytes read (short only at
 * its end) or -errno. A block that fails its check makes this and every
 * later read of the open view -EIO (logged once, naming the view), and
 * drops the view, so that the next open builds it again. Thread-safe. */
ssize_t dcrfs_delta_read(struct dcrfs *fs, uint64_t fh, void *buf,
			 size_t size, off_t off);

/** dcrfs_delta_release - close what dcrfs_delta_open opened. */
void dcrfs_delta_release(struct dcrfs *fs, uint64_t fh);

/** A node below /delta by its key, as a handover carries it. */
struct dcrfs_delta_key {
	uint64_t from, to;
	uint32_t ftree, ttree, idx, pad;
};

/** dcrfs_delta_export - the key of every node below /delta, in slot
 * order (slot k is inode DCRFS_INO_DVIEW_BASE + k), into a malloc'ed
 * *@out (the caller frees it). The count or -ENOMEM. Thread-safe. */
ssize_t dcrfs_delta_export(struct dcrfs *fs, struct dcrfs_delta_key **out);

/** dcrfs_delta_adopt - give node @k slot @slot, the next one (a
 * handover, before the session loop starts): its views are built again
 * on use. 0, -EPROTO if it gets another slot, or -errno. */
int dcrfs_delta_adopt(struct dcrfs *fs, const struct dcrfs_delta_key *k,
		      uint32_t slot);

/** What /delta did since the mount (dcrfs_delta_counts). */
struct dcrfs_delta_counts {
	uint64_t built, built_bytes;  /* views built, their bytes */
	uint64_t cached_bytes;        /* bytes of the views kept now */
	uint64_t ready;               /* views built when a prefetch ended */
	/* tensor bytes of the builds: compared (read from both versions),
	 * taken from the reader's records of changes (read/dvrec.h),
	 * skipped (equal chunk hashes) */
	uint64_t compared, recorded, skipped;
	/* opens of view files through passthrough and not; READs served */
	uint64_t pt_opens, normal_opens, reads;
	struct dcr_dvrec_stats rec;   /* the records (zero when not kept) */
	bool ahead;                   /* views built ahead now (delta_ahead) */
};

/** dcrfs_delta_counts - what /delta did since the mount, into @c.
 * Thread-safe. */
void dcrfs_delta_counts(struct dcrfs *fs, struct dcrfs_delta_counts *c);

/**
 * dcrfs_delta_ready - after a prefetch of version @v: build the views
 * /delta/vN/FILE (from v's parent) of v's files whose chunks the reader
 * kept changes of (read/dvrec.h), so that they are ready when /latest
 * moves to v, at a cost that follows the change. Files without records
 * are left to their first lookup (a build by comparison). Errors are
 * logged by the builds; nothing is returned. Thread-safe.
 */
void dcrfs_delta_ready(struct dcrfs *fs, uint64_t v);

/* ------------------------------- /.dcrfs/latest (latestfile.c) */

/** dcrfs_latestfile_open - open /.dcrfs/latest: remembers the number
 * /latest shows now (what a poll compares with) and replies to @req
 * (direct_io). Thread-safe. */
void dcrfs_latestfile_open(fuse_req_t req, struct dcrfs *fs,
			   struct fuse_file_info *fi);

/** dcrfs_latestfile_read - read of the open @fi: "N\n", N the version
 * /latest shows; a read at offset 0 takes it anew (and re-arms poll),
 * one past 0 serves the text the last read at 0 took. Replies to @req.
 * Thread-safe. */
void dcrfs_latestfile_read(fuse_req_t req, struct dcrfs *fs, size_t size,
			   off_t off, struct fuse_file_info *fi);

/** dcrfs_latestfile_release - free what dcrfs_latestfile_open made (a
 * pending poll handle too): @o, or (NULL) the state of @fi's handle; a
 * handle of a daemon before a restart has none here. Does not reply.
 * Thread-safe. Reads and polls of such a handle are served as a new
 * open's: the number now; a poll says readable at once. */
struct dcrfs_latest_open;
void dcrfs_latestfile_release(struct dcrfs *fs, struct fuse_file_info *fi,
			      struct dcrfs_latest_open *o);

/**
 * dcrfs_ll_poll - FUSE poll. An open of /.dcrfs/latest is readable
 * (POLLIN|POLLRDNORM|POLLPRI) once /latest shows another version than
 * the one it last read (or opened with); until then @ph is kept and
 * notified by dcrfs_latestfile_notify. Any other file answers what the
 * kernel answers without a poll operation (POLLIN|POLLOUT, never
 * blocking). Replies to @req. Thread-safe.
 */
void dcrfs_ll_poll(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi,
		   struct fuse_pollhandle *ph);

/** dcrfs_latestfile_notify - wake every poll of /.dcrfs/latest whose
 * open last saw another version than /latest shows now. Called by the
 * watcher (bg.c) after it moved /latest; never from a request handler.
 * Thread-safe. */
void dcrfs_latestfile_notify(struct dcrfs *fs);

/* ------------------------------------- provenance xattrs (xattr.c) */

/**
 * dcrfs_ll_getxattr - FUSE getxattr of attribute @name of @ino, into a
 * buffer of @size bytes (0: the size needed is replied). A version-tree
 * inode (fs.h) answers user.dcrfs.version, .parent, .time, .digest,
 * .signer and user.dcrfs.meta.KEY from the tree its number names
 * (xattr.c); any other name, or any other inode: ENODATA. ERANGE when
 * @size is short, ESTALE for a tree the version no longer has, ENOENT
 * for an entry it never had. Replies to @req itself. Thread-safe.
 */
void dcrfs_ll_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
		       size_t size);

/**
 * dcrfs_ll_listxattr - FUSE listxattr of @ino into a buffer of @size
 * bytes: exactly the names dcrfs_ll_getxattr answers, each
 * NUL-terminated (none for an inode outside the version trees); 0
 * @size replies the size needed, a short one ERANGE. Same errors as
 * dcrfs_ll_getxattr. Replies to @req itself. Thread-safe.
 */
void dcrfs_ll_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);

/** The low-level operations table (fs/ops.c). */
extern const struct fuse_lowlevel_ops dcrfs_ll_ops;

/**
 * dcrfs_init_state - initialise the locks and counters of @fs (zeroed
 * by the caller, options already set). 0 or -errno.
 */
int dcrfs_init_state(struct dcrfs *fs);

/** Destroy what dcrfs_init_state created and free the tag table. */
void dcrfs_free_state(struct dcrfs *fs);

/* Shared by ops.c and bg.c. */

/** Version @v's current tree, held until version_put (the reader may
 * unload the trees nobody holds). 0, -ENOENT, -EOVERFLOW (the tree does
 * not fit inode numbers, logged) or the reader's -errno. */
int version_get(struct dcrfs *fs, uint64_t v,
		const struct dcr_version_info **vi);
/** version_get of tree @tree of version @v, the one an inode names:
 * -ESTALE if the version has another tree now. */
int version_get_tree(struct dcrfs *fs, uint64_t v, uint32_t tree,
		     const struct dcr_version_info **vi);
void version_put(struct dcrfs *fs, const struct dcr_version_info *vi);

/**
 * fs_refresh - look for new versions (bg.c). Forced (the watcher),
 * always; from a lookup that missed (@since_ns: when it started), unless
 * a refresh that started after it has finished meanwhile. 0 or -errno.
 */
int fs_refresh(struct dcrfs *fs, int force, int64_t since_ns);

/**
 * dcrfs_bg_start - start the watcher thread (polls the store every
 * poll_ms milliseconds, tells the kernel when latest moves, raises the bdi
 * readahead once the mount answers) and, with prefetch=latest or all,
 * the prefetch thread. Call after the session is mounted, with SIGINT,
 * SIGTERM and SIGHUP blocked so the threads inherit the mask.
 * 0 or -errno (nothing left running on failure).
 */
int dcrfs_bg_start(struct dcrfs *fs);

/**
 * dcrfs_bg_stop - stop and join the background threads. Safe to call
 * when they were never started. Must run before the session is
 * destroyed (the watcher sends notifications through it).
 */
void dcrfs_bg_stop(struct dcrfs *fs);

#endif /* DCRFS_FS_H */
