/* SPDX-License-Identifier: MIT */
/*
 * passthrough.c - FUSE passthrough over libfuse 3.14's custom io: see
 * passthrough.h for what it does and why it is built this way.
 *
 * The kernel ABI used here is stable (include/uapi/linux/fuse.h, 7.40):
 * it is spelled out below because Debian 12's <linux/fuse.h> predates
 * passthrough and libfuse 3.14 does not install its fuse_kernel.h.
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>
#include <fcntl.h>

#include "common.h"
#include "handover.h"
#include "passthrough.h"

/* ------------------------------------------------------------ kernel ABI */

#define PT_OP_OPEN 14u
#define PT_OP_INIT 26u

#define PT_INIT_WRITEBACK_CACHE (1u << 16)
#define PT_INIT_EXT (1u << 30)
#define PT_INIT2_PASSTHROUGH (1u << 5) /* FUSE_PASSTHROUGH >> 32 */

#define PT_FOPEN_DIRECT_IO (1u << 0)
#define PT_FOPEN_KEEP_CACHE (1u << 1)
#define PT_FOPEN_PASSTHROUGH (1u << 7)

struct pt_in_header {
	uint32_t len;
	uint32_t opcode;
	uint64_t unique;
	uint64_t nodeid;
	uint32_t uid, gid, pid;
	uint16_t total_extlen, padding;
};
_Static_assert(sizeof(struct pt_in_header) == 40, "fuse_in_header");

struct pt_out_header {
	uint32_t len;
	int32_t error;
	uint64_t unique;
};
_Static_assert(sizeof(struct pt_out_header) == 16, "fuse_out_header");

/* The leading fields of fuse_init_in (7.36 and later). */
struct pt_init_in {
	uint32_t major, minor, max_readahead, flags, flags2;
};

/* fuse_init_out as the kernel reads it; 3.14 fills it up to flags2 and
 * calls the rest unused. */
struct pt_init_out {
	uint32_t major, minor, max_readahead, flags;
	uint16_t max_background, congestion_threshold;
	uint32_t max_write, time_gran;
	uint16_t max_pages, map_alignment;
	uint32_t flags2;
	uint32_t max_stack_depth;
	uint32_t unused[6];
};
_Static_assert(sizeof(struct pt_init_out) == 64, "fuse_init_out");

struct pt_open_out {
	uint64_t fh;
	uint32_t open_flags;
	int32_t backing_id; /* 3.14: padding */
};
_Static_assert(sizeof(struct pt_open_out) == 16, "fuse_open_out");

struct pt_backing_map {
	int32_t fd;
	uint32_t flags;
	uint64_t padding;
};

#define PT_DEV_IOC_MAGIC 229
#define PT_DEV_IOC_BACKING_OPEN _IOW(PT_DEV_IOC_MAGIC, 1, struct pt_backing_map)
#define PT_DEV_IOC_BACKING_CLOSE _IOW(PT_DEV_IOC_MAGIC, 2, uint32_t)

/* --------------------------------------------------------------- the hooks */

/*
 * The request this thread received last, and the backing id its OPEN
 * reply must carry. Private to this file: the contract is that a reply
 * to an OPEN is written by the thread that read it (libfuse's loops run
 * each handler on the receiving thread, and dcrfs_ll_open replies
 * before it returns).
 */
static _Thread_local uint64_t tl_unique;
static _Thread_local uint32_t tl_opcode;
static _Thread_local int tl_open_id;

/* The one INIT request of the session, until its reply is patched. */
static atomic_uint_fast64_t init_unique;
static atomic_int init_pending;

/* The mount's state, for the hooks (one session per process). */
static struct dcrfs_pt *the_pt;
static atomic_int said_eloop;

static ssize_t pt_read(int fd, void *buf, size_t len, void *userdata)
{
	ssize_t n = dcrfs_ho_read(fd, buf, len); /* read(2), or stopped */
	const struct pt_in_header *in = buf;

	(void)userdata;
	if (n < (ssize_t)sizeof(*in))
		return n;
	dcrfs_ho_note_request(buf, (size_t)n);
	tl_unique = in->unique;
	tl_opcode = in->opcode;
	if (in->opcode == PT_OP_INIT &&
	    (size_t)n >= sizeof(*in) + sizeof(struct pt_init_in)) {
		struct pt_init_in ii;

		memcpy(&ii, (const char *)buf + sizeof(*in), sizeof(ii));
		atomic_store(&the_pt->offered,
			     (ii.flags & PT_INIT_EXT) &&
			     (ii.flags2 & PT_INIT2_PASSTHROUGH));
		atomic_store(&init_unique, in->unique);
		atomic_store(&init_pending, 1);
	}
	return n;
}

/* The reply's argument, when it is one iovec after the header. */
static void *reply_arg(struct iovec *iov, int count, size_t want,
		       struct pt_out_header **hdr)
{
	if (count < 2 || iov[0].iov_len != sizeof(struct pt_out_header) ||
	    iov[1].iov_len < want)
		return NULL;
	*hdr = iov[0].iov_base;
	return iov[1].iov_base;
}

static void patch_init(struct iovec *iov, int count)
{
	struct pt_out_header *h;
	struct pt_init_out *o = reply_arg(iov, count, sizeof(*o), &h);

	if (the_pt->mode == DCRFS_PT_OFF)
		return;
	if (!o || h->error != 0) {
		dcr_info("passthrough: off (INIT reply of %zu bytes)",
			 count > 1 ? iov[1].iov_len : (size_t)0);
		return;
	}
	if (!atomic_load(&the_pt->offered)) {
		dcr_info("passthrough: off (the kernel does not offer it)");
		return;
	}
	if (o->flags & PT_INIT_WRITEBACK_CACHE) {
		dcr_info("passthrough: off (writeback cache is on)");
		return;
	}
	o->flags |= PT_INIT_EXT;
	o->flags2 |= PT_INIT2_PASSTHROUGH;
	o->max_stack_depth = 1; /* backing files on a plain file system */
	atomic_store(&the_pt->enabled, 1);
	dcr_info("passthrough: on (files whole in the cache are read by the kernel)");
}

static void patch_open(struct iovec *iov, int count, int id)
{
	struct pt_out_header *h;
	struct pt_open_out *o = reply_arg(iov, count, sizeof(*o), &h);

	if (!o || h->error != 0 || h->unique != tl_unique)
		return;
	o->open_flags &= ~(PT_FOPEN_KEEP_CACHE | PT_FOPEN_DIRECT_IO);
	o->open_flags |= PT_FOPEN_PASSTHROUGH;
	o->backing_id = id;
}

static ssize_t pt_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	(void)userdata;
	if (count >= 1 && iov[0].iov_len == sizeof(struct pt_out_header)) {
		const struct pt_out_header *h = iov[0].iov_base;

		if (atomic_load(&init_pending) &&
		    h->unique == atomic_load(&init_unique)) {
			atomic_store(&init_pending, 0);
			patch_init(iov, count);
		} else if (tl_open_id > 0 && tl_opcode == PT_OP_OPEN) {
			patch_open(iov, count, tl_open_id);
		}
	}
	/* the replayed INIT's reply stays here (handover.h) */
	ssize_t kept = dcrfs_ho_note_reply(iov, count);
	if (kept)
		return kept;
	return writev(fd, iov, count);
}

static ssize_t pt_splice_send(int fdin, off_t *offin, int fdout,
			      off_t *offout, size_t len, unsigned int flags,
			      void *userdata)
{
	(void)userdata;
	return splice(fdin, offin, fdout, offout, len, flags);
}

static const struct fuse_custom_io pt_io = {
	.read = pt_read,
	.writev = pt_writev,
	.splice_send = pt_splice_send,
	/* no splice_receive: every request passes pt_read */
};

/* ------------------------------------------------------------------ the API */

int dcrfs_pt_install(struct fuse_session *se, struct dcrfs_pt *pt)
{
	int fd = fuse_session_fd(se);
	int ret;

	pt->devfd = -1;
	/* installed with passthrough off too: a handover needs the hooks */
	if (pt->mode == DCRFS_PT_OFF)
		dcr_info("passthrough: off (-o passthrough=off)");
	if (fd < 0)
		return DCR_ERR(-EBADF);
	the_pt = pt;
	ret = fuse_session_custom_io(se, &pt_io, fd);
	if (ret < 0) {
		the_pt = NULL;
		dcr_warn("passthrough: off (cannot install the session io: %s)",
			 dcr_strerror(ret));
		return ret;
	}
	if (pt->mode != DCRFS_PT_OFF)
		pt->devfd = fd;
	return 0;
}

int dcrfs_pt_usable(const struct dcrfs_pt *pt)
{
	return pt->devfd >= 0 && atomic_load(&pt->enabled) &&
	       !atomic_load(&pt->disabled);
}

int dcrfs_pt_register(struct dcrfs_pt *pt, int fd)
{
	struct pt_backing_map map = { .fd = fd };
	int id, err;

	if (!dcrfs_pt_usable(pt))
		return -EOPNOTSUPP;
	id = ioctl(pt->devfd, PT_DEV_IOC_BACKING_OPEN, &map);
	if (id > 0) {
		atomic_fetch_add_explicit(&pt->registered, 1,
					  memory_order_relaxed);
		return id;
	}
	err = id < 0 ? errno : EPROTO;
	if (err == ELOOP || err == EBADF) {
		/* that file only: a cache on a stacked file system (overlayfs,
		 * another FUSE mount) is too deep for the kernel */
		if (!atomic_exchange(&said_eloop, 1))
			dcr_info("passthrough: off for files of this cache "
				 "(registering a backing file: %s; is the cache "
				 "on a stacked file system?)", strerror(err));
		return -err;
	}
	/* EPERM (no CAP_SYS_ADMIN in the initial namespace), ENOTTY or
	 * EINVAL (a kernel without it after all): not worth asking again */
	if (!atomic_exchange(&pt->disabled, 1))
		dcr_info("passthrough: off for this mount (registering a "
			 "backing file: %s)%s", strerror(err),
			 err == EPERM ? "; it needs CAP_SYS_ADMIN" : "");
	return -err;
}

void dcrfs_pt_unregister(struct dcrfs_pt *pt, int id)
{
	uint32_t u = (uint32_t)id;

	if (ioctl(pt->devfd, PT_DEV_IOC_BACKING_CLOSE, &u) < 0)
		dcr_warn("passthrough: releasing backing id %d: %s", id,
			 strerror(errno));
	atomic_fetch_sub_explicit(&pt->registered, 1, memory_order_relaxed);
}

int dcrfs_pt_open_reply(struct dcrfs_pt *pt, fuse_req_t req,
			struct fuse_file_info *fi, int id)
{
	int ret;

	(void)pt;
	fi->keep_cache = 0;
	fi->direct_io = 0;
	tl_open_id = id;
	ret = fuse_reply_open(req, fi);
	tl_open_id = 0;
	return ret;
}
