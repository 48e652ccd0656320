/* SPDX-License-Identifier: MIT */
/*
 * node.h - what the FUSE handlers (ops.c) share with the files that
 * serve one kind of node (enum dcrfs_kind, fs.h): the version trees
 * (tree.c), /tags (tags.c) and /.dcrfs (ctl.c). ops.c resolves each
 * inode once and switches on its kind; these are the cases. The
 * helpers for attributes, entry replies and directory listings are
 * ops.c's. Private to fs/.
 */
#ifndef DCRFS_NODE_H
#define DCRFS_NODE_H

#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "fs.h"

/* ------------------------------------------------- shared (ops.c) */

/** fs_stat_common - zero @st and fill what every node shows: @ino,
 * @mode, @nlink, the mount's owner, @mtime_ns as all three times. */
void fs_stat_common(const struct dcrfs *fs, struct stat *st,
		    fuse_ino_t ino, mode_t mode, nlink_t nlink,
		    int64_t mtime_ns);

/** fs_latest_ctime - commit time of version @latest, or the mount time
 * if it is 0 or cannot be had. */
int64_t fs_latest_ctime(struct dcrfs *fs, uint64_t latest);

/** fs_root_stat - attributes of the root. 0 or the reader's -errno. */
int fs_root_stat(struct dcrfs *fs, struct stat *st);

/** fs_symlink_stat - attributes of symlink @ino to @target, dated by
 * version @v's commit. */
void fs_symlink_stat(struct dcrfs *fs, struct stat *st, fuse_ino_t ino,
		     const char *target, uint64_t v);

/**
 * fs_reply_entry - reply @req with entry @st, cached @ttl seconds.
 * @gen: the tree of a version's entry (dcr_version_info.tree), else 0.
 */
void fs_reply_entry(fuse_req_t req, const struct stat *st, double ttl,
		    uint64_t gen);

/** A READDIR or READDIRPLUS reply being filled (ops.c do_readdir). */
struct dirbuf {
	fuse_req_t req;
	char *p;
	size_t size;
	size_t pos;
	int plus;
};

/**
 * fs_dirbuf_add_gen - append one entry, with generation @gen, resuming
 * at @next; 1 if it did not fit (the listing stops there), else 0. In a
 * READDIRPLUS reply an entry given no @ttl (< 0) goes without
 * attributes: node id 0, which the kernel caches nothing of and looks
 * up on use.
 */
int fs_dirbuf_add_gen(struct dirbuf *db, const char *name,
		      const struct stat *st, double ttl, off_t next,
		      uint64_t gen);

/** fs_dirbuf_add - fs_dirbuf_add_gen of an entry that is not a
 * version's (generation 0). */
int fs_dirbuf_add(struct dirbuf *db, const char *name,
		  const struct stat *st, double ttl, off_t next);

/* ------------------------------------------ version trees (tree.c) */

/** fs_entry_stat - attributes of entry @idx (< vi->nentries) of @vi. */
void fs_entry_stat(const struct dcrfs *fs,
		   const struct dcr_version_info *vi, uint32_t idx,
		   struct stat *st);

/** fs_version_stat - attributes of version node @n (DCRFS_K_VERSION).
 * 0, -ENOENT, -ESTALE (the version has another tree now) or the
 * reader's -errno. */
int fs_version_stat(struct dcrfs *fs, const struct dcrfs_node *n,
		    struct stat *st);

/** fs_tree_entry_type - the type of entry @idx of tree @tree of version
 * @v into @type: 0, -ENOENT, -ESTALE, or the reader's error. */
int fs_tree_entry_type(struct dcrfs *fs, uint64_t v, uint32_t tree,
		       uint32_t idx, uint8_t *type);

/** fs_version_lookup - LOOKUP of @name in directory entry @dir of tree
 * @tree of version @v; replies to @req (a miss as a negative entry the
 * kernel caches). */
void fs_version_lookup(fuse_req_t req, struct dcrfs *fs, uint64_t v,
		       uint32_t tree, uint32_t dir, const char *name);

/** fs_version_readdir - list directory entry @dir of tree @tree of
 * version @v from offset @off into @db. 0 or -errno. */
int fs_version_readdir(struct dirbuf *db, struct dcrfs *fs, uint64_t v,
		       uint32_t tree, uint32_t dir, off_t off);

/* --------------------------------------------------- /tags (tags.c) */

/** fs_tags_stat - attributes of /tags. */
void fs_tags_stat(struct dcrfs *fs, struct stat *st);

/** fs_tag_getattr - attributes of tag node @n (DCRFS_K_TAG). 0 or
 * -errno (-ENOENT: a slot never assigned, or a tag gone). */
int fs_tag_getattr(struct dcrfs *fs, const struct dcrfs_node *n,
		   struct stat *st);

/** fs_tag_readlink - READLINK of tag node @n: "../vN". Replies to
 * @req. */
void fs_tag_readlink(fuse_req_t req, struct dcrfs *fs,
		     const struct dcrfs_node *n);

/** fs_tags_lookup - LOOKUP of @name in /tags (assigns its slot).
 * Replies to @req. */
void fs_tags_lookup(fuse_req_t req, struct dcrfs *fs, const char *name);

/** fs_tags_readdir - list /tags from offset @off into @db. 0 or
 * -errno. */
int fs_tags_readdir(struct dirbuf *db, struct dcrfs *fs, off_t off);

/* ------------------------------------------------- /.dcrfs (ctl.c) */

/** fs_ctl_stat - attributes of /.dcrfs or one of its files @ino. 0. */
int fs_ctl_stat(struct dcrfs *fs, fuse_ino_t ino, struct stat *st);

/** fs_ctl_lookup - LOOKUP of @name in /.dcrfs (never cached). Replies
 * to @req. */
void fs_ctl_lookup(fuse_req_t req, struct dcrfs *fs, const char *name);

/** fs_ctl_readdir - list /.dcrfs from offset @off into @db. 0 or
 * -errno. */
int fs_ctl_readdir(struct dirbuf *db, struct dcrfs *fs, off_t off);

/** fs_ctl_open - OPEN of status.json (@kind DCRFS_K_CTL_STATUS) or
 * metrics (DCRFS_K_CTL_METRICS): renders it into a snapshot held in
 * fi->fh. Replies to @req. */
void fs_ctl_open(fuse_req_t req, struct dcrfs *fs, enum dcrfs_kind kind,
		 struct fuse_file_info *fi);

/** fs_ctl_read - READ of an open fs_ctl_open made, from its snapshot.
 * Replies to @req. */
void fs_ctl_read(fuse_req_t req, size_t size, off_t off,
		 const struct fuse_file_info *fi);

/** fs_ctl_release - free the snapshot of an open fs_ctl_open made. Does
 * not reply. */
void fs_ctl_release(struct fuse_file_info *fi);

#endif /* DCRFS_NODE_H */
