/* SPDX-License-Identifier: MIT */
/*
 * latestfile.c - MNT/.dcrfs/latest, the version /latest points to as a
 * file an engine can wait on, and the FUSE poll operation.
 *
 * Contract:
 * - Reading the file gives the number of the version /latest points to
 *   (dcrfs_latest: "0" while the store holds none) and a newline. A read
 *   at offset 0 takes the number anew; reads past 0 serve what the last
 *   read at 0 (or the open) took, so `cat` never splices two numbers.
 * - Each open remembers the number it last gave (or the one current at
 *   open). poll(2)/select(2)/epoll on it report POLLIN|POLLRDNORM|POLLPRI
 *   once /latest points elsewhere, and nothing before: a read at offset
 *   0 (pread(fd, buf, n, 0)) takes the new number and re-arms it. The
 *   kernel is woken through fuse_lowlevel_notify_poll by the watcher
 *   (bg.c announce -> dcrfs_latestfile_notify) the moment it shows the
 *   new version: no polling and no timer in the waiter.
 * - Any other file's poll is answered as the kernel answers for a file
 *   system without poll (readable and writable: nothing blocks), its
 *   poll handle dropped.
 *
 * Locking: watch.lock (struct dcrfs) guards the list of opens, each
 * open's number, text and poll handle; it is taken after no other lock
 * and nothing is called under it but libfuse's notify (a write to
 * /dev/fuse that never waits for a request of this mount).
 *
 * A wakeup is never lost: the poll handler reads dcrfs_latest and keeps
 * the handle under watch.lock, and the watcher stores the new latest
 * before it takes watch.lock to notify, so either the handler sees the
 * new number (and answers readable) or the watcher sees the handle.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fs.h"

/* One open of .dcrfs/latest: fi->fh. */
struct dcrfs_latest_open {
	struct dcrfs_latest_open *prev, *next; /* fs->watch.opens */
	uint64_t seen;                  /* the number last given */
	struct fuse_pollhandle *ph;     /* a waiting poll, or NULL */
	char text[24];                  /* "N\n" */
	size_t len;
};

static void take_number(struct dcrfs *fs, struct dcrfs_latest_open *o)
{
	int n;

	o->seen = dcrfs_latest(fs);
	n = snprintf(o->text, sizeof(o->text), "%" PRIu64 "\n", o->seen);
	o->len = n > 0 ? (size_t)n : 0;
}

void dcrfs_latestfile_open(fuse_req_t req, struct dcrfs *fs,
			   struct fuse_file_info *fi)
{
	struct dcrfs_latest_open *o = calloc(1, sizeof(*o));

	if (!o) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pthread_mutex_lock(&fs->watch.lock);
	take_number(fs, o);
	o->next = fs->watch.opens;
	if (o->next)
		o->next->prev = o;
	fs->watch.opens = o;
	pthread_mutex_unlock(&fs->watch.lock);
	fi->fh = dcrfs_fh_put(o);
	if (!fi->fh) {
		dcrfs_latestfile_release(fs, fi, o);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fi->noflush = 1; /* nothing to flush: a close costs no request */
	fi->direct_io = 1; /* every read comes here: the number changes */
	fi->keep_cache = 0;
	fi->nonseekable = 0;
	if (fuse_reply_open(req, fi) != 0)
		dcrfs_latestfile_release(fs, fi, NULL); /* no RELEASE comes */
}

void dcrfs_latestfile_read(fuse_req_t req, struct dcrfs *fs, size_t size,
			   off_t off, struct fuse_file_info *fi)
{
	struct dcrfs_latest_open *o = dcrfs_fh_get(fi->fh), here;
	char text[sizeof(o->text)];
	size_t len = 0;

	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	pthread_mutex_lock(&fs->watch.lock);
	if (!o) { /* opened before a restart: the number now, as an open */
		o = &here;
		take_number(fs, o);
	} else if (off == 0) {
		take_number(fs, o);
	}
	if ((uint64_t)off < o->len) {
		len = DCR_MIN(size, o->len - (size_t)off);
		memcpy(text, o->text + off, len);
	}
	pthread_mutex_unlock(&fs->watch.lock);
	fuse_reply_buf(req, text, len);
}

void dcrfs_latestfile_release(struct dcrfs *fs, struct fuse_file_info *fi,
			      struct dcrfs_latest_open *o)
{
	if (!o)
		o = fi->fh ? dcrfs_fh_take(fi->fh) : NULL;
	if (!o)
		return; /* opened before a restart: nothing here */
	pthread_mutex_lock(&fs->watch.lock);
	if (o->prev)
		o->prev->next = o->next;
	else
		fs->watch.opens = o->next;
	if (o->next)
		o->next->prev = o->prev;
	pthread_mutex_unlock(&fs->watch.lock);
	if (o->ph)
		fuse_pollhandle_destroy(o->ph);
	free(o);
	fi->fh = 0;
}

void dcrfs_ll_poll(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi,
		   struct fuse_pollhandle *ph)
{
	struct dcrfs *fs = (struct dcrfs *)fuse_req_userdata(req);
	struct dcrfs_latest_open *o;
	struct fuse_pollhandle *old = NULL;
	unsigned int revents = 0;

	if (ino != DCRFS_INO_LATEST_FILE || !fi || !fi->fh) {
		if (ph)
			fuse_pollhandle_destroy(ph);
		/* what the kernel answers for a file system without poll */
		fuse_reply_poll(req, POLLIN | POLLOUT | POLLRDNORM | POLLWRNORM);
		return;
	}
	o = dcrfs_fh_get(fi->fh);
	if (!o) {
		/* opened before a restart: wake the waiter, which reads the
		 * number again (once more than needed at worst) */
		if (ph)
			fuse_pollhandle_destroy(ph);
		fuse_reply_poll(req, POLLIN | POLLRDNORM | POLLPRI);
		return;
	}
	pthread_mutex_lock(&fs->watch.lock);
	if (dcrfs_latest(fs) != o->seen) {
		revents = POLLIN | POLLRDNORM | POLLPRI;
	} else if (ph) {
		old = o->ph; /* the kernel's newer handle replaces it */
		o->ph = ph;
		ph = NULL;
	}
	pthread_mutex_unlock(&fs->watch.lock);
	if (old)
		fuse_pollhandle_destroy(old);
	if (ph)
		fuse_pollhandle_destroy(ph);
	fuse_reply_poll(req, revents);
}

void dcrfs_latestfile_notify(struct dcrfs *fs)
{
	uint64_t now;

	pthread_mutex_lock(&fs->watch.lock);
	now = dcrfs_latest(fs);
	for (struct dcrfs_latest_open *o = fs->watch.opens; o; o = o->next) {
		int ret;

		if (!o->ph || o->seen == now)
			continue;
		ret = fuse_lowlevel_notify_poll(o->ph);
		if (ret < 0 && ret != -ENOENT)
			dcr_debug("notifying a poll of .dcrfs/latest: %s",
				  strerror(-ret));
		fuse_pollhandle_destroy(o->ph);
		o->ph = NULL;
	}
	pthread_mutex_unlock(&fs->watch.lock);
}
