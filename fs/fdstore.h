/* SPDX-License-Identifier: MIT */
/*
 * fdstore.h - systemd as the keeper of a mount's connection: the notify
 * protocol (sd_notify(3), written here: a datagram of "KEY=value" lines
 * to $NOTIFY_SOCKET, descriptors passed with SCM_RIGHTS), the
 * descriptors systemd passes back at a start (sd_listen_fds(3):
 * LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES) and the state file it keeps.
 *
 * Under a service unit with FileDescriptorStoreMax= (examples/systemd/
 * dcrfs@.service), dcrfs stores two descriptors in the unit's fd store
 * (FDSTORE=1): the connection's /dev/fuse ("dcrfs-fuse") and a memfd
 * holding its state ("dcrfs-state-ID"): the text a restart must repeat
 * (dcrfs_ho_fixed) and the STATE a holder would get (ho_wire.h). systemd
 * keeps both while the daemon dies and restarts it (Restart=on-failure)
 * with them; that daemon adopts them as --takeover adopts a holder's.
 * No holder is started then: one keeper per mount.
 *
 * The state file is rewritten in place at every change, safe against a
 * kill at any point: one memfd, its first page a header (magic, a
 * sequence number, where the record is, its length, its check value),
 * records elsewhere (the sequence is CLOCK_BOOTTIME's, so that two
 * daemons' files compare). A new record is written where it does not overlap
 * the live one, then the header, with one pwrite(2) of 48 bytes within
 * the first page, which a kill cannot tear (tmpfs copies a page in one
 * step; a fatal signal is checked between pages). A daemon killed while
 * writing a record leaves the header naming the previous one, whole;
 * the check value (XXH3-128) catches anything else. The alternative,
 * FDSTOREREMOVE=1 of the old memfd and FDSTORE=1 of a new one, has a
 * window between the two in which the store holds no state (a crash
 * there loses the mount) and costs systemd two messages per open(2).
 *
 * Thread-safety: dcrfs_sd_notify and the readers may run on any thread;
 * the state file's writer is called under hold.c's lock (one writer).
 */
#ifndef DCRFS_FDSTORE_H
#define DCRFS_FDSTORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/** The name of the /dev/fuse descriptor in the fd store. */
#define DCRFS_FDNAME_FUSE "dcrfs-fuse"
/** The prefix of the state file's name ("dcrfs-state-" and an id). */
#define DCRFS_FDNAME_STATE "dcrfs-state-"

/**
 * dcrfs_sd_notify - send @text ("KEY=value" lines) to the service
 * manager on $NOTIFY_SOCKET, with @nfds descriptors @fds (SCM_RIGHTS).
 * 1 when sent, 0 when no manager listens (NOTIFY_SOCKET unset), or
 * -errno (not logged).
 */
int dcrfs_sd_notify(const char *text, const int *fds, int nfds);

/** dcrfs_sd_managed - whether a service manager asked for notifications
 * (NOTIFY_SOCKET is set): then the fd store keeps the mount. */
int dcrfs_sd_managed(void);

/**
 * dcrfs_sd_listen - the descriptors systemd passed to this process
 * (LISTEN_PID is ours) named DCRFS_FDNAME_FUSE and DCRFS_FDNAME_STATE*:
 * 1 with *@fuse_fd, *@state_fd and *@state_name (malloc'ed) set, 0 when
 * none was passed (a first start), or -errno when only one of the two
 * was (said on stderr). Two states (a daemon that took over died
 * between storing its state and dropping its predecessor's): the one
 * whose whole record is newer is taken, the other closed and its name
 * given in *@stale_name (malloc'ed; NULL: none) to drop from the store.
 * The LISTEN_* variables are removed (not for the children); other
 * descriptors passed are closed.
 */
int dcrfs_sd_listen(int *fuse_fd, int *state_fd, char **state_name,
		    char **stale_name);

/**
 * dcrfs_fdstate_create - a new, empty state file (a memfd named @name):
 * its descriptor, or -errno.
 */
int dcrfs_fdstate_create(const char *name);

/**
 * dcrfs_fdstate_write - make the @n pieces @iov, one after the other, the
 * state in the file @fd, replacing the last one as said above. 0 or
 * -errno (the previous state stays). One writer at a time.
 */
int dcrfs_fdstate_write(int fd, const struct iovec *iov, int n);

/** dcrfs_fdstate_seq_of - the sequence of the last record written to
 * @fd (increasing within a boot, across files), 0: none. */
uint64_t dcrfs_fdstate_seq_of(int fd);

/**
 * dcrfs_fdstate_read - the state last written to @fd, whole and checked:
 * *@out (malloc'ed, NUL-terminated, *@len bytes). 0, -ENODATA when none
 * was written, -EBADMSG when the header or the check value is wrong, or
 * -errno.
 */
int dcrfs_fdstate_read(int fd, char **out, size_t *len);

#endif /* DCRFS_FDSTORE_H */
