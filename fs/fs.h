/* SPDX-License-Identifier: MIT */
/*
 * fs.h - internal declarations shared by the dcrfs FUSE daemon
 * (fs/main.c: options, mounting, daemonizing; fs/ops.c: the low-level
 * operations and the background poll and prefetch threads).
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
 *   0x100 + k                 /tags/<name>, k = slot of the name in the
 *                             tag-name table (assigned on first sight,
 *                             never reused while mounted)
 *   (v << 32) | (idx + 2)     entry idx of version v's tree (idx 0 is
 *                             the version directory /vN itself);
 *                             1 <= v <= DCR_VERSION_MAX (2^32 - 1,
 *                             core/manifest.h: the one cap every layer
 *                             enforces)
 *
 * The version-tree numbers depend only on the manifest, so they are the
 * same after a remount.
 */
#ifndef DCRFS_FS_H
#define DCRFS_FS_H

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 312
#endif

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include <fuse_lowlevel.h>

#include "manifest.h"
#include "objstore.h"
#include "reader.h"

#define DCRFS_INO_ROOT ((fuse_ino_t)1)
#define DCRFS_INO_LATEST ((fuse_ino_t)2)
#define DCRFS_INO_TAGS ((fuse_ino_t)3)
#define DCRFS_INO_STATUS_DIR ((fuse_ino_t)4)
#define DCRFS_INO_STATUS_JSON ((fuse_ino_t)5)
#define DCRFS_INO_METRICS ((fuse_ino_t)6)
#define DCRFS_STATUS_DIR ".dcrfs"
#define DCRFS_INO_TAG_BASE ((fuse_ino_t)0x100)
/* The version must fit the high 32 bits of an inode number. */
_Static_assert(DCR_VERSION_MAX <= UINT64_C(0xffffffff),
	       "DCR_VERSION_MAX does not fit the dcrfs inode scheme");
_Static_assert(sizeof(fuse_ino_t) >= 8, "fuse_ino_t narrower than 64 bits");
#define DCRFS_IDX_MAX UINT32_C(0xfffffffd)

/** Cache lifetimes, in seconds. Version trees are immutable. */
#define DCRFS_TTL_IMMUTABLE 86400.0
#define DCRFS_TTL_MUTABLE 1.0

/** Trees of versions the reader keeps in memory while nobody uses them
 * (dcr_reader_opts.max_trees): the others are loaded from the catalog
 * again on use, so memory does not grow with the number of versions. */
#define DCRFS_TREES_KEPT 16

/** Largest read request served (the kernel sends at most 1 MiB). */
#define DCRFS_READ_MAX (1u << 20)

/** Inode number of entry @idx of version @v. */
static inline fuse_ino_t dcrfs_ino_make(uint64_t v, uint32_t idx)
{
	return (fuse_ino_t)((v << 32) | ((uint64_t)idx + 2));
}

/**
 * dcrfs_ino_split - decode a version-tree inode into its version and
 * entry index. Returns 1 for a version-tree inode, 0 for any other.
 */
static inline int dcrfs_ino_split(fuse_ino_t ino, uint64_t *v, uint32_t *idx)
{
	uint64_t hi = (uint64_t)ino >> 32;
	uint32_t lo = (uint32_t)ino;

	if (hi == 0 || lo < 2)
		return 0;
	*v = hi;
	*idx = lo - 2;
	return 1;
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

/**
 * Most cache files one spliced read reply is assembled from: a 1 MiB
 * read of 64 KiB chunks; reads spanning more are copied. libfuse 3.14
 * sends a vector of fd buffers whole, provided the vector really has
 * room for them (reply_spliced allocates it): a bufvec embedded in a
 * larger struct and written past its declared buf[1] is undefined
 * behaviour, which optimised builds turned into replies holding only
 * the first buffer (a short read, taken for end of file).
 */
#define DCRFS_SPLICE_SEGS 16

/**
 * struct dcrfs - the state of one mount, the session's userdata.
 * Filled by main.c before the session loop starts; the option fields
 * are read-only afterwards. Locks protect the rest as noted.
 */
struct dcrfs {
	struct dcr_store *st;
	struct dcr_reader *r;
	struct fuse_session *se;
	const char *mountpoint;

	/* options */
	unsigned int poll_ms;          /* 0: no periodic refresh */
	enum dcrfs_prefetch prefetch;
	unsigned int read_ahead_kb;    /* 0: leave the kernel default */
	unsigned int max_read;         /* -o max_read=N, 0 if not given */
	int no_splice;                 /* -o nosplice: always copy replies */
	int prefetch_pagecache;        /* -o prefetch_pagecache */

	/* set once in init: replies are spliced from cache files */
	int splice;

	uid_t uid;                     /* owner shown for every inode */
	gid_t gid;
	int64_t mount_ns;              /* mtime of the root of an empty store */

	/* refresh_lock: serialises refreshes; lookup misses share one */
	pthread_mutex_t refresh_lock;
	int64_t last_refresh_ns; /* when the last refresh started */

	/* tag_lock: tag-name table, slot k <-> inode DCRFS_INO_TAG_BASE + k */
	pthread_mutex_t tag_lock;
	char **tag_names;
	size_t ntag_names;
	size_t tag_names_cap;

	/* bg_lock/bg_cond: background threads */
	pthread_mutex_t bg_lock;
	pthread_cond_t bg_cond;        /* CLOCK_MONOTONIC */
	int bg_stop;
	int bg_kick;                   /* watcher: look at latest now */
	uint64_t shown_latest;         /* latest the kernel was told about */
	uint64_t prefetch_want;        /* newest version to prefetch */
	uint64_t prefetch_done;        /* last version fully prefetched */
	uint64_t prefetch_swept;       /* prefetch=all: every version up to
					  this one was prefetched */
	pthread_t watcher;
	pthread_t prefetcher;
	int watcher_running;
	int prefetcher_running;

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

/** Version @v's tree, held until version_put (the reader may unload the
 * trees nobody holds). 0, -ENOENT or the reader's -errno. */
int version_get(struct dcrfs *fs, uint64_t v,
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
