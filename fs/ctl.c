/* SPDX-License-Identifier: MIT */
/*
 * ctl.c - the mount's control directory, MNT/.dcrfs: hidden from the
 * listing of the root, found by lookup. Its files:
 *
 *   status.json, metrics   read-only, rendered whole at each open
 *                          (status.c) and served from that snapshot
 *                          (direct_io, size 0 in stat, like /proc)
 *   latest                 the version /latest shows, pollable
 *                          (latestfile.c)
 *
 * Nothing here is cached by the kernel (attributes and entries live 0
 * s). Listing offsets: 1 ".", 2 "..", 3 status.json, 4 metrics,
 * 5 latest. No lock of its own: each open owns its snapshot.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "fs.h"
#include "node.h"

/* Attributes of /.dcrfs and its files. */
int fs_ctl_stat(struct dcrfs *fs, fuse_ino_t ino, struct stat *st)
{
	if (ino == DCRFS_INO_STATUS_DIR) {
		fs_stat_common(fs, st, ino, S_IFDIR | 0555, 2, dcr_now_ns());
		st->st_size = 4096;
		st->st_blocks = 8;
		return 0;
	}
	fs_stat_common(fs, st, ino, S_IFREG | 0444, 1, dcr_now_ns());
	/* Size 0, like /proc: the text is made at every open and may be
	 * longer than when stat looked (a counter gained a digit), and a
	 * size from stat made cp copy a cut-off file. Readers read to the
	 * end of the file (direct_io). */
	st->st_size = 0;
	return 0;
}

void fs_ctl_lookup(fuse_req_t req, struct dcrfs *fs, const char *name)
{
	fuse_ino_t ino = strcmp(name, "status.json") == 0 ? DCRFS_INO_STATUS_JSON :
			 strcmp(name, "metrics") == 0 ? DCRFS_INO_METRICS :
			 strcmp(name, "latest") == 0 ? DCRFS_INO_LATEST_FILE : 0;
	struct stat st;
	int ret = ino ? fs_ctl_stat(fs, ino, &st) : -ENOENT;

	if (ret < 0) {
		fuse_reply_err(req, -ret);
		return;
	}
	/* Never cached: the size changes with every rendering. */
	fs_reply_entry(req, &st, 0.0, 0);
}

/* /.dcrfs: offsets 1 ".", 2 "..", 3 status.json, 4 metrics, 5 latest. */
int fs_ctl_readdir(struct dirbuf *db, struct dcrfs *fs, off_t off)
{
	static const struct {
		const char *name;
		fuse_ino_t ino;
	} ents[] = {
		{ ".", DCRFS_INO_STATUS_DIR }, { "..", DCRFS_INO_ROOT },
		{ "status.json", DCRFS_INO_STATUS_JSON },
		{ "metrics", DCRFS_INO_METRICS },
		{ "latest", DCRFS_INO_LATEST_FILE },
	};
	struct stat st;
	int ret;

	for (size_t i = (size_t)off; i < DCR_ARRAY_SIZE(ents); i++) {
		ret = ents[i].ino == DCRFS_INO_ROOT ? fs_root_stat(fs, &st) :
		      fs_ctl_stat(fs, ents[i].ino, &st);
		if (ret < 0)
			return ret;
		if (fs_dirbuf_add(db, ents[i].name, &st, 0.0, (off_t)i + 1))
			break;
	}
	return 0;
}

/* A status file is rendered once at open; reads serve that snapshot. */
struct status_snap {
	char *text;
	size_t len;
};

void fs_ctl_open(fuse_req_t req, struct dcrfs *fs, enum dcrfs_kind kind,
		 struct fuse_file_info *fi)
{
	struct status_snap *sn = calloc(1, sizeof(*sn));
	int ret = sn ? dcrfs_status_render(fs, kind == DCRFS_K_CTL_STATUS ?
					   DCRFS_STATUS_JSON : DCRFS_STATUS_METRICS,
					   &sn->text, &sn->len) : -ENOMEM;

	if (ret < 0) {
		free(sn);
		fuse_reply_err(req, -ret);
		return;
	}
	fi->fh = dcrfs_fh_put(sn);
	if (!fi->fh) {
		free(sn->text);
		free(sn);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fi->direct_io = 1; /* the size is not known before the read */
	fi->keep_cache = 0;
	fi->noflush = 1; /* nothing to flush: a close costs no request */
	if (fuse_reply_open(req, fi) < 0) {
		dcrfs_fh_take(fi->fh);
		free(sn->text);
		free(sn);
	}
}

void fs_ctl_read(fuse_req_t req, size_t size, off_t off,
		 const struct fuse_file_info *fi)
{
	const struct status_snap *sn = dcrfs_fh_get(fi->fh);

	if (!sn) { /* opened before a restart: that snapshot is gone */
		dcrfs_fh_stranger("/.dcrfs status file");
		fuse_reply_err(req, EIO);
		return;
	}
	if (off < 0 || (uint64_t)off >= sn->len) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	fuse_reply_buf(req, sn->text + off, DCR_MIN(size, sn->len - (size_t)off));
}

void fs_ctl_release(struct fuse_file_info *fi)
{
	struct status_snap *sn = dcrfs_fh_take(fi->fh);

	if (!sn)
		return; /* opened before a restart */
	free(sn->text);
	free(sn);
}
