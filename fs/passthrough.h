/* SPDX-License-Identifier: MIT */
/*
 * passthrough.h - FUSE passthrough on libfuse 3.14, through its custom
 * io (fs/passthrough.c).
 *
 * The kernel (CONFIG_FUSE_PASSTHROUGH, Linux >= 6.9) can serve read(2)
 * and mmap(2) of a FUSE file straight from a *backing file* the daemon
 * registered, with no READ request reaching the daemon and one copy of
 * the bytes in the page cache. libfuse gained an API for it in 3.16
 * (fuse_passthrough_open); Debian 12 has 3.14, whose
 * fuse_session_custom_io() lets this shim see every request it reads
 * and every reply it writes:
 *
 *  - INIT: the request says whether the kernel offers passthrough
 *    (FUSE_INIT_EXT, bit 5 of flags2); the reply asks for it (the same
 *    bit, max_stack_depth 1) unless writeback caching was negotiated,
 *    with which the kernel drops passthrough.
 *  - OPEN: dcrfs_pt_open_reply() replies to an open with
 *    FOPEN_PASSTHROUGH and a backing id, patched into libfuse's 16-byte
 *    fuse_open_out (3.14's "padding" field is the kernel's backing_id).
 *  - Backing files are registered and released with the /dev/fuse
 *    ioctls FUSE_DEV_IOC_BACKING_OPEN/_CLOSE, which need CAP_SYS_ADMIN
 *    in the initial user namespace.
 *
 * The rules the kernel enforces, and how dcrfs keeps them, are in
 * fs/ops.c (one backing id per inode, no mixed opens) and cache/cache.h
 * (a backing file is complete, verified and never modified while
 * registered). With libfuse >= 3.16 this file goes away: the INIT bit is
 * FUSE_CAP_PASSTHROUGH, register/release are
 * fuse_passthrough_open/_close, and the reply is fi->backing_id.
 *
 * Thread-safety: every function may be called from any session thread.
 * dcrfs_pt_open_reply() must be called on the thread that received the
 * OPEN request (libfuse's session loops call handlers on that thread).
 */
#ifndef DCRFS_PASSTHROUGH_H
#define DCRFS_PASSTHROUGH_H

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 312
#endif

#include <stdatomic.h>
#include <stdint.h>

#include <fuse_lowlevel.h>

/** -o passthrough=auto|off */
enum dcrfs_pt_mode {
	DCRFS_PT_AUTO = 0, /* use it where the kernel and privileges allow */
	DCRFS_PT_OFF = 1,  /* never */
};

/** Why a file was opened without passthrough (counted in status). */
enum dcrfs_pt_fallback {
	DCRFS_PT_FB_OFF,        /* -o passthrough=off, or not negotiated */
	DCRFS_PT_FB_NOT_READY,  /* some chunk not cached and verified yet */
	DCRFS_PT_FB_MIXED,      /* the inode is open on the normal path */
	DCRFS_PT_FB_REGISTER,   /* the kernel refused the backing file */
	DCRFS_PT_FB_COUNT
};

/**
 * struct dcrfs_pt - the passthrough state of one session. Zeroed, then
 * @mode set, before dcrfs_pt_install(). The counters are relaxed atomics
 * read by status.c.
 */
struct dcrfs_pt {
	enum dcrfs_pt_mode mode;
	int devfd;                 /* the session's /dev/fuse descriptor */
	atomic_int offered;        /* the kernel's INIT offered it */
	atomic_int enabled;        /* our INIT reply asked for it */
	atomic_int disabled;       /* given up for the mount (EPERM, ...) */
	atomic_uint_fast64_t opens;           /* answered with passthrough */
	atomic_uint_fast64_t normal_opens;    /* answered without */
	atomic_uint_fast64_t fallbacks[DCRFS_PT_FB_COUNT];
	atomic_uint_fast64_t reads_seen;      /* READs on passthrough opens */
	atomic_uint_fast64_t registered;      /* backing ids held now */
};

/**
 * dcrfs_pt_install - put the shim between libfuse and the mounted
 * session @se (after fuse_session_mount, before the loop starts). With
 * @pt->mode DCRFS_PT_OFF it is installed too (its hooks serve a
 * handover, fs/handover.h) but asks for no passthrough. 0 or -errno
 * (logged); the mount then works without passthrough or handovers.
 */
int dcrfs_pt_install(struct fuse_session *se, struct dcrfs_pt *pt);

/** dcrfs_pt_usable - passthrough was negotiated and not given up. */
int dcrfs_pt_usable(const struct dcrfs_pt *pt);

/**
 * dcrfs_pt_register - register the open, read-only descriptor @fd as a
 * backing file. Returns its backing id (> 0; the kernel holds its own
 * reference to the file, @fd may be closed) or -errno: -EPERM without
 * CAP_SYS_ADMIN and -EOPNOTSUPP when not negotiated, both of which give
 * passthrough up for the mount (logged once); -ELOOP for a file on a
 * stacked file system (that file only).
 */
int dcrfs_pt_register(struct dcrfs_pt *pt, int fd);

/** dcrfs_pt_unregister - release backing id @id (its inode's last
 * release: the kernel looks the id up while it handles the open). */
void dcrfs_pt_unregister(struct dcrfs_pt *pt, int id);

/**
 * dcrfs_pt_open_reply - reply to the OPEN request @req with
 * FOPEN_PASSTHROUGH on backing id @id (@fi->fh is kept; keep_cache and
 * direct_io are cleared: the kernel refuses them with passthrough).
 * Returns fuse_reply_open()'s result: non-zero when the reply did not
 * reach the kernel, which then sends no RELEASE for it.
 */
int dcrfs_pt_open_reply(struct dcrfs_pt *pt, fuse_req_t req,
			struct fuse_file_info *fi, int id);

#endif /* DCRFS_PASSTHROUGH_H */
