/* SPDX-License-Identifier: MIT */
/*
 * bench_splicefs - the "ceiling" of scripts/bench: the most trivial
 * read-only FUSE server there is, serving a few existing files as
 * /NAME (their basenames) by splicing each read reply straight from the
 * backing file (fuse_reply_data with a FUSE_BUF_IS_FD buffer). No
 * lookups in a catalog, no hashing, no cache: what FUSE itself costs.
 *
 *   bench_splicefs [--copy] MOUNTPOINT FILE... [-- FUSE-ARGS...]
 *
 * It runs in the foreground with the same connection tuning as dcrfs
 * (multithreaded loop, 1 MiB requests, max_readahead 1 MiB,
 * max_background 64, async reads, keep_cache, long timeouts) so the
 * comparison is like for like. --copy replies with pread + writev
 * instead of splice, to see which one wins on this machine.
 *
 * Note: libfuse splices a reply only when its pipe holds the whole
 * reply (a 1 MiB read needs a 2 MiB pipe: root, or
 * /proc/sys/fs/pipe-max-size >= 2 MiB) and when the backing pages are
 * in the page cache (it splices with SPLICE_F_NONBLOCK); otherwise it
 * falls back to a copy through a freshly allocated buffer. scripts/bench
 * runs it as root on a backing file it has just read.
 *
 * A benchmark helper, not installed, not part of the test suite.
 */
#define FUSE_USE_VERSION 312

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_FILES 64
#define TTL 86400.0
#define INO_BASE 2 /* inode of file k is INO_BASE + k */

struct bfile {
	const char *name;
	int fd;
	struct stat st;
};

static struct bfile files[MAX_FILES];
static size_t nfiles;
static int copy_mode;

static int file_of(fuse_ino_t ino, struct bfile **f)
{
	if (ino < INO_BASE || ino - INO_BASE >= nfiles)
		return 0;
	*f = &files[ino - INO_BASE];
	return 1;
}

static void file_stat(fuse_ino_t ino, const struct bfile *f, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_mode = S_IFREG | 0444;
	st->st_nlink = 1;
	st->st_size = f->st.st_size;
	st->st_blocks = f->st.st_blocks;
	st->st_blksize = 1 << 20;
	st->st_mtim = f->st.st_mtim;
}

static void root_stat(struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = FUSE_ROOT_ID;
	st->st_mode = S_IFDIR | 0555;
	st->st_nlink = 2;
}

static void sp_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	conn->max_readahead = conn->max_readahead > (1u << 20) ?
			      conn->max_readahead : (1u << 20);
	conn->max_background = 64;
	conn->congestion_threshold = 48;
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
	if (!copy_mode && (conn->capable & FUSE_CAP_SPLICE_WRITE))
		conn->want |= FUSE_CAP_SPLICE_WRITE;
	/*
	 * Not FUSE_CAP_SPLICE_MOVE: with SPLICE_F_MOVE the kernel steals
	 * the backing file's page-cache pages, so the next read of the
	 * backing file misses, libfuse's non-blocking splice gets EAGAIN
	 * and it falls back to its slow copy.
	 */
	conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
}

static void sp_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;

	if (parent != FUSE_ROOT_ID) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	for (size_t k = 0; k < nfiles; k++) {
		if (strcmp(files[k].name, name) != 0)
			continue;
		memset(&e, 0, sizeof(e));
		e.ino = INO_BASE + k;
		e.attr_timeout = TTL;
		e.entry_timeout = TTL;
		file_stat(e.ino, &files[k], &e.attr);
		fuse_reply_entry(req, &e);
		return;
	}
	fuse_reply_err(req, ENOENT);
}

static void sp_getattr(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct bfile *f;
	struct stat st;

	(void)fi;
	if (ino == FUSE_ROOT_ID)
		root_stat(&st);
	else if (file_of(ino, &f))
		file_stat(ino, f, &st);
	else {
		fuse_reply_err(req, ENOENT);
		return;
	}
	fuse_reply_attr(req, &st, TTL);
}

static void sp_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct bfile *f;

	if (!file_of(ino, &f)) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EROFS);
		return;
	}
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static void sp_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(size);
	struct bfile *f;

	(void)fi;
	if (!file_of(ino, &f)) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if (off >= f->st.st_size) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if ((off_t)size > f->st.st_size - off)
		size = (size_t)(f->st.st_size - off);
	bv.buf[0].size = size;
	bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	bv.buf[0].fd = f->fd;
	bv.buf[0].pos = off;
	fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
}

static void sp_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	char *buf;
	size_t pos = 0;
	struct stat st;

	(void)fi;
	if (ino != FUSE_ROOT_ID) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	buf = calloc(1, size ? size : 1);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	for (size_t k = (size_t)off; k < nfiles; k++) {
		size_t n;

		file_stat(INO_BASE + k, &files[k], &st);
		n = fuse_add_direntry(req, buf + pos, size - pos,
				      files[k].name, &st, (off_t)(k + 1));
		if (n > size - pos)
			break;
		pos += n;
	}
	fuse_reply_buf(req, buf, pos);
	free(buf);
}

static const struct fuse_lowlevel_ops sp_ops = {
	.init = sp_init,
	.lookup = sp_lookup,
	.getattr = sp_getattr,
	.open = sp_open,
	.read = sp_read,
	.readdir = sp_readdir,
};

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_loop_config *lcfg;
	struct fuse_session *se;
	const char *mnt;
	int i = 1, ret = 1;

	if (i < argc && strcmp(argv[i], "--copy") == 0) {
		copy_mode = 1;
		i++;
	}
	if (argc - i < 2) {
		fprintf(stderr, "usage: %s [--copy] MOUNTPOINT FILE... "
			"[-- FUSE-ARGS...]\n", argv[0]);
		return 2;
	}
	mnt = argv[i++];
	for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
		struct bfile *f = &files[nfiles];
		const char *slash = strrchr(argv[i], '/');

		if (nfiles == MAX_FILES) {
			fprintf(stderr, "bench_splicefs: too many files\n");
			return 2;
		}
		f->name = slash ? slash + 1 : argv[i];
		f->fd = open(argv[i], O_RDONLY | O_CLOEXEC);
		if (f->fd < 0 || fstat(f->fd, &f->st) < 0) {
			perror(argv[i]);
			return 1;
		}
		nfiles++;
	}
	if (fuse_opt_add_arg(&args, argv[0]) != 0 ||
	    fuse_opt_add_arg(&args, "-o") != 0 ||
	    fuse_opt_add_arg(&args, "ro,fsname=bench_splicefs,"
			     "subtype=bench_splicefs") != 0)
		return 1;
	if (i < argc)
		for (i++; i < argc; i++)
			if (fuse_opt_add_arg(&args, argv[i]) != 0)
				return 1;

	se = fuse_session_new(&args, &sp_ops, sizeof(sp_ops), NULL);
	if (!se)
		goto out_args;
	if (fuse_set_signal_handlers(se) != 0)
		goto out_session;
	if (fuse_session_mount(se, mnt) != 0)
		goto out_signals;
	lcfg = fuse_loop_cfg_create();
	if (lcfg) {
		fuse_loop_cfg_set_max_threads(lcfg, 64);
		ret = fuse_session_loop_mt(se, lcfg) < 0;
		fuse_loop_cfg_destroy(lcfg);
	}
	fuse_session_unmount(se);
out_signals:
	fuse_remove_signal_handlers(se);
out_session:
	fuse_session_destroy(se);
out_args:
	fuse_opt_free_args(&args);
	return ret;
}
