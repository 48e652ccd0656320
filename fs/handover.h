/* SPDX-License-Identifier: MIT */
/*
 * handover.h - hand a mounted dcrfs over to a new daemon without an
 * unmount (dcrfs --takeover STORE MNT: an upgrade under running readers).
 *
 * The FUSE connection lives as long as some process holds its /dev/fuse
 * descriptor, so a new daemon can take it over from a running one:
 *
 *  1. The serving daemon listens on a Unix socket in the cache directory
 *     (dcrfs_ho_sock_path). A new daemon started with --takeover
 *     connects (both sides check the other's credentials: the same user,
 *     or root) and says what it would serve (the store, the mount point,
 *     the options fixed at mount: libfuse's and the kernel's mount
 *     options, max_read, readahead, passthrough). The old daemon refuses,
 *     saying which differs or what cannot be handed over, or agrees.
 *  2. The new daemon, having opened its store, says go. The old one
 *     stops reading /dev/fuse (its readers poll an event that wakes them
 *     all; none reads after it), finishes and answers every request it
 *     had read (its session loop returns only then), and sends the
 *     descriptor (SCM_RIGHTS) with its state: the kernel's INIT request
 *     and the reply it got (the negotiated parameters), the passthrough
 *     state, the open version files with their backing ids, and the tag
 *     table (tags' inode numbers are slots). It then exits without
 *     unmounting; the socket's end of file tells the new daemon that its
 *     cache directory's lock is free.
 *  3. The new daemon opens its cache, replays the INIT request into
 *     libfuse (fuse_session_process_buf: libfuse 3.14 serves nothing
 *     before an INIT), swallows libfuse's reply (the kernel has had one)
 *     and compares it to the one the kernel kept, adopts the open files
 *     and their backing ids, and serves the queued requests.
 *
 * Requests the kernel queued meanwhile wait in its queue: readers stall
 * for the handover, and see no error. Passthrough reads and mmaps of
 * files whose pages are cached do not stall at all.
 *
 * What cannot be handed over is refused, the old daemon serving on:
 * open files of /.dcrfs and /delta (their open state lives in the old
 * daemon's memory; fs/handles.c), another store, mount point or fixed
 * option, a session io that was not installed. A restart after the
 * daemon died builds on this (the holder, below; HACKING).
 *
 * One session per process. The hooks (dcrfs_ho_read, _note_*) are called
 * by passthrough.c's session io from any session thread.
 */
#ifndef DCRFS_HANDOVER_H
#define DCRFS_HANDOVER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct dcrfs;

/**
 * dcrfs_ho_sock_path - the socket @kind ("handover": the serving
 * daemon's; "hold": its holder's, listening only while no daemon serves)
 * of the mount on @mountpoint whose cache directory is @cache_dir, into
 * @buf of @len bytes. 0, or -ENAMETOOLONG when it does not fit a Unix
 * socket address.
 */
int dcrfs_ho_sock_path(const char *cache_dir, const char *mountpoint,
		       const char *kind, char *buf, size_t len);

/**
 * dcrfs_ho_fixed - the text of what a mount fixes at mount time and a
 * takeover must repeat ("key=value\n" lines, compared line by line), into
 * a malloc'ed string (NULL: no memory). @argv is libfuse's command
 * line (@argv[1..@argc-1], the kernel's mount options among them).
 */
char *dcrfs_ho_fixed(const struct dcrfs *fs, const char *store,
		     const char *mountpoint, int argc, char **argv);

/* ------------------------------------------------ the serving daemon */

/**
 * dcrfs_ho_listen - serve takeovers of @fs on the socket @path (made
 * afresh; its directory exists), from a thread of its own. @fixed (kept
 * by the caller until dcrfs_ho_stop) is this mount's dcrfs_ho_fixed. 0
 * or -errno (logged once; the mount works without handovers).
 */
int dcrfs_ho_listen(struct dcrfs *fs, const char *path, const char *fixed);

/**
 * dcrfs_ho_requested - after the session loop returned: whether it
 * returned for a handover (a new daemon said go). Then the caller calls
 * dcrfs_ho_send().
 */
int dcrfs_ho_requested(void);

/**
 * dcrfs_ho_send - send the /dev/fuse descriptor and @fs's state to the
 * new daemon. 0: handed over (the caller exits without unmounting,
 * keeps the socket open until its exit); -errno: not handed over
 * (logged): the caller serves on (fuse_session_reset, the loop again).
 */
int dcrfs_ho_send(struct dcrfs *fs);

/**
 * dcrfs_ho_release - after a handover, once this daemon no longer touches
 * its cache directory (its reader closed, which frees the directory's
 * lock): tell the new daemon, which waits for it before it opens the
 * cache (the end of file of its socket); the rest of this daemon's exit
 * runs meanwhile. Nothing without a handover.
 */
void dcrfs_ho_release(void);

/** dcrfs_ho_stop - stop listening; unlink the socket unless the mount
 * was handed over (the new daemon's is there). */
void dcrfs_ho_stop(void);

/* -------------------------------------------------- the new daemon */

/** What a takeover received, until dcrfs_ho_adopt. */
struct dcrfs_ho_state;

/**
 * dcrfs_ho_connect - ask the daemon listening on @path to hand its mount
 * over, or, when none listens there (it died), the holder listening on
 * @hold_path (a restart; NULL: none asked): say @fixed (this daemon's
 * dcrfs_ho_fixed) and wait for its yes. 0 with *@out set (the old
 * daemon serves on until dcrfs_ho_go); -EPERM with the reason said on
 * stderr; another -errno (said on stderr: with no daemon and no holder,
 * that the mount is lost). A socket nobody listens on is asked again for
 * a few seconds first: a daemon that has just taken the mount over
 * listens only once it serves.
 */
int dcrfs_ho_connect(const char *path, const char *hold_path,
		     const char *fixed, struct dcrfs_ho_state **out);

/**
 * dcrfs_ho_from_store - a restart from systemd's fd store (fdstore.h):
 * the connection @fuse_fd and the state file @state_fd named @state_name
 * (malloc'ed), all three taken (closed and freed on failure), passed by
 * systemd (dcrfs_sd_listen), with @stale_name (malloc'ed, taken; NULL:
 * none), another state the store holds, to drop once this daemon's state
 * is kept there. The state's fixed text must be @fixed (this
 * daemon's dcrfs_ho_fixed). 0 with *@out set (dcrfs_ho_go returns at
 * once, dcrfs_ho_adopt adopts as a holder's restart), or -errno, said on
 * stderr: -EPERM when the fixed text differs.
 */
int dcrfs_ho_from_store(int fuse_fd, int state_fd, char *state_name,
			char *stale_name, const char *fixed,
			struct dcrfs_ho_state **out);

/**
 * dcrfs_ho_store_take - after dcrfs_ho_adopt, what systemd's fd store
 * holds of the mount already: the state file passed at a restart from
 * it (*@state_fd and *@state_name, the caller's now; -1 and NULL when
 * none), whether the connection is there (*@stored: a restart from it,
 * or a handover from a daemon it kept), and that daemon's state file to
 * drop once ours is stored (@old, "" when none). Nothing (-1, NULL, 0,
 * "") for a first mount.
 */
void dcrfs_ho_store_take(int *state_fd, char **state_name, int *stored,
			 char old[48]);

/**
 * dcrfs_ho_fdstore_start - make systemd's fd store the keeper of @fs's
 * connection (fdstore.h; instead of a holder): write the state (with
 * @fixed) into @state_fd (-1: a new state file, stored with FDSTORE=1),
 * store the connection unless @fuse_stored, then drop @old (a previous
 * daemon's state file; NULL or "": none). 0 or -errno (logged: a crash
 * then loses the mount).
 */
int dcrfs_ho_fdstore_start(struct dcrfs *fs, const char *fixed,
			   int state_fd, const char *state_name,
			   int fuse_stored, const char *old);

/** dcrfs_ho_resent - how many requests the kernel sent again (a dead
 * daemon had read them) since this daemon started. */
long dcrfs_ho_resent(void);

/** The mount's handovers and restarts, over all its daemons. */
struct dcrfs_ho_counts {
	uint64_t handovers; /* daemons that took the mount over by a handover */
	uint64_t restarts;  /* daemons that restarted it from a keeper */
	uint64_t resent;    /* requests the kernel sent again after a crash */
	const char *keeper; /* who keeps a copy of the connection now for a
			     * restart: "holder", "systemd" (its fd store)
			     * or "none" (a crash loses the mount) */
};

/**
 * dcrfs_ho_counts - the counts into @c (status.json and metrics). A
 * daemon adds its own to those of the STATE it adopted; a daemon killed
 * loses the requests sent again after its keeper's last copy of its
 * state. Thread-safe.
 */
void dcrfs_ho_counts(struct dcrfs_ho_counts *c);

/** dcrfs_ho_restart - whether @s comes from a holder (the daemon died). */
int dcrfs_ho_restart(const struct dcrfs_ho_state *s);

/**
 * dcrfs_ho_go - once this daemon can serve (its store open): say go,
 * receive the descriptor and the state into @s, and wait until the old
 * daemon exited (DCRFS_HO_EXIT_WAIT_MS at most, else logged), which
 * frees the cache directory's lock. 0 or -errno (said on stderr).
 */
int dcrfs_ho_go(struct dcrfs_ho_state *s);

/** How long a new daemon waits for the old one to exit. */
#define DCRFS_HO_EXIT_WAIT_MS 10000

/** dcrfs_ho_fd - the /dev/fuse descriptor received. */
int dcrfs_ho_fd(const struct dcrfs_ho_state *s);

/**
 * dcrfs_ho_adopt - with @fs's reader open and its session mounted on
 * /dev/fd/N (N = dcrfs_ho_fd) and its io installed
 * (dcrfs_pt_install): set the passthrough state, replay the INIT into
 * libfuse (its reply swallowed, compared with the kernel's: a
 * difference is logged), say whether the kernel can resend requests in
 * flight (FUSE_NOTIFY_RESEND, probed: none are in flight then), adopt
 * the tag table, /delta's nodes and the open files with their backing
 * ids. Frees @s. 0 or -errno (logged).
 */
int dcrfs_ho_adopt(struct dcrfs *fs, struct dcrfs_ho_state *s);

/** dcrfs_ho_state_free - free what dcrfs_ho_connect and dcrfs_ho_go
 * received. A descriptor received and not adopted is closed, which ends
 * the connection (the mount is lost: said). NULL accepted. */
void dcrfs_ho_state_free(struct dcrfs_ho_state *s);

/**
 * dcrfs_ho_unmount - unmount @mountpoint, taken over (libfuse did not
 * mount it, so fuse_session_unmount does nothing). Logged on failure.
 */
void dcrfs_ho_unmount(const char *mountpoint);

/* ----------------------------------- the session io's hooks (passthrough.c) */

/**
 * dcrfs_ho_read - read one request from @fd into @buf (@len bytes), as
 * read(2), unless a handover stopped reading: then -1 with errno EINTR
 * and the session is exited, which ends the caller's loop.
 */
ssize_t dcrfs_ho_read(int fd, void *buf, size_t len);

/** dcrfs_ho_note_request - the request of @n bytes at @buf was read
 * (the INIT is kept for a handover; opens of files not handed over are
 * counted). Called on the reading thread. */
void dcrfs_ho_note_request(const void *buf, size_t n);

/**
 * dcrfs_ho_note_reply - the reply @iov is about to be written (after
 * passthrough's patches), on the thread that read its request. Returns
 * its length when it must not reach the kernel (the replayed INIT's
 * reply), else 0.
 */
ssize_t dcrfs_ho_note_reply(const struct iovec *iov, int count);

/* ------------------------------------------ restart after a crash: the holder */

/*
 * The holder (dcrfs-hold: this program, started again with
 * DCRFS_HOLD_ARG) keeps a copy of the /dev/fuse descriptor, which it
 * never reads, so that the connection outlives the daemon, and the
 * daemon's state as a takeover's STATE carries it: the INIT request and
 * reply, passthrough's state, the open-files table with its backing ids,
 * the tag and /delta slot tables. The daemon sends it the whole state
 * again at each change of those (an open or release of a version file, a
 * new slot): an open and a slot before it answers the kernel, a release
 * after (so that a crash leaves the count of opens too high, never too
 * low); a whole message replaces the last. While the daemon lives, the holder only listens to it. At the
 * end of file of its link (the daemon died) it listens on the "hold"
 * socket for @wait_ms: a daemon started with --takeover that finds no
 * daemon there gets the descriptor and the state (dcrfs_ho_go,
 * dcrfs_ho_adopt, which also asks the kernel to send again what the dead
 * daemon had read), and its socket becomes the holder's new link. The
 * holder exits when told (HO_RETIRE: a handover, an unmount), when the
 * connection is gone (POLLERR on the descriptor: unmounted or aborted),
 * or when no daemon came back in time; its copy closes with it, so a
 * connection nobody serves ends as it would have without it.
 */
#define DCRFS_HOLD_ARG "--hold-for-restart"
#define DCRFS_HOLD_FUSE_FD 3
#define DCRFS_HOLD_LINK_FD 4

/**
 * dcrfs_ho_hold_start - start the holder of @fs's connection, listening
 * on @path when the daemon is gone, @wait_ms at most; its messages go to
 * @log (a file's absolute path, "syslog", or "": stderr). @fixed is
 * this mount's dcrfs_ho_fixed, which a restart must repeat. 0 or -errno
 * (logged: a crash then loses the mount, as before).
 */
int dcrfs_ho_hold_start(struct dcrfs *fs, const char *path, const char *fixed,
			unsigned int wait_ms, const char *log);

/** dcrfs_ho_hold_update - send the holder @fs's state again (a table
 * changed); nothing without a holder. Thread-safe; call it with none of
 * @fs's locks held: before the reply for an open or a new slot, after
 * it for a release. */
void dcrfs_ho_hold_update(struct dcrfs *fs);

/** dcrfs_ho_hold_main - the holder's program: main(@argc, @argv) of
 * "dcrfs DCRFS_HOLD_ARG PATH WAIT_MS LOG MOUNTPOINT LOG_LEVEL". */
int dcrfs_ho_hold_main(int argc, char **argv);

#endif /* DCRFS_HANDOVER_H */
