/* SPDX-License-Identifier: MIT */
/*
 * tree.c - the version trees of the mount, /vN/... (DESIGN.md section
 * 8): their nodes' attributes, lookups and listings, served from the
 * reader's index of each version (dcr_reader_version), held only while
 * a request uses it. The FUSE handlers that dispatch here are in ops.c;
 * the inode numbers (version, tree, entry) are fs.h's.
 *
 * A node names the tree it was made from: when a version has another
 * tree now (changed in the store), every operation on an old node fails
 * with ESTALE (version_get_tree) instead of mixing in the new tree.
 * Immutable: entries, misses and listings are cached by the kernel.
 *
 * No lock of its own: the reader's holds keep a tree alive.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "manifest.h"
#include "fs.h"
#include "node.h"

#define NO_ENTRY UINT32_MAX

/* Permission bits shown for a manifest mode: read-only, no set-id. */
static mode_t shown_perm(uint32_t mode)
{
	return (mode_t)(mode & 07777 & ~(mode_t)(0222 | S_ISUID | S_ISGID));
}

/* Log once per version that it cannot be shown (tree @tree, @n
 * entries); the next version that cannot is logged again. */
static void version_overflow(uint64_t v, uint32_t tree, uint32_t n)
{
	static _Atomic uint64_t logged;

	if (atomic_exchange(&logged, v) == v)
		return;
	if (tree > DCRFS_TREE_MAX)
		dcr_err("v%" PRIu64 " changed in the store more than %u times "
			"while mounted: it is not served until a remount "
			"(EOVERFLOW)", v, (unsigned)DCRFS_TREE_MAX);
	else
		dcr_err("v%" PRIu64 " has %" PRIu32 " entries, more than the "
			"%u a mount can show: it is not served (EOVERFLOW)",
			v, n, (unsigned)DCRFS_IDX_MAX + 1);
}

int version_get(struct dcrfs *fs, uint64_t v,
		const struct dcr_version_info **vi)
{
	int ret;

	if (v == 0 || v > DCR_VERSION_MAX)
		return -ENOENT;
	ret = dcr_reader_version(fs->r, v, vi);
	if (ret < 0)
		return ret;
	/* Inode numbers carry the tree and the entry index (fs.h): one
	 * that does not fit would name another tree's inode. */
	if ((*vi)->tree > DCRFS_TREE_MAX ||
	    (*vi)->nentries > DCRFS_IDX_MAX + 1) {
		version_overflow(v, (*vi)->tree, (*vi)->nentries);
		version_put(fs, *vi);
		*vi = NULL;
		return -EOVERFLOW;
	}
	return 0;
}

int version_get_tree(struct dcrfs *fs, uint64_t v, uint32_t tree,
		     const struct dcr_version_info **vi)
{
	int ret = version_get(fs, v, vi);

	if (ret == 0 && (*vi)->tree != tree) {
		/* An inode of a tree the version no longer has (changed in
		 * the store): never answered from the new one. */
		version_put(fs, *vi);
		*vi = NULL;
		return -ESTALE;
	}
	return ret;
}

void version_put(struct dcrfs *fs, const struct dcr_version_info *vi)
{
	dcr_reader_version_put(fs->r, vi);
}

/* Entry @idx of @vi, or NULL if out of range. */
static const struct dcr_entry *entry_get(const struct dcr_version_info *vi,
					 uint32_t idx)
{
	if (idx >= vi->nentries)
		return NULL;
	return &vi->entries[idx];
}

/* The type of entry @idx of tree @tree of version @v into @type: 0,
 * -ENOENT, -ESTALE (the version has another tree now), or the reader's
 * error. */
int fs_tree_entry_type(struct dcrfs *fs, uint64_t v, uint32_t tree,
		       uint32_t idx, uint8_t *type)
{
	const struct dcr_version_info *vi;
	const struct dcr_entry *e;
	int ret = version_get_tree(fs, v, tree, &vi);

	if (ret < 0)
		return ret;
	e = entry_get(vi, idx);
	if (e)
		*type = e->type;
	version_put(fs, vi);
	return e ? 0 : -ENOENT;
}

void fs_entry_stat(const struct dcrfs *fs,
		   const struct dcr_version_info *vi, uint32_t idx,
		   struct stat *st)
{
	const struct dcr_entry *e = &vi->entries[idx];
	fuse_ino_t ino = dcrfs_ino_make(vi->version, vi->tree, idx);

	if (e->type == DCR_FT_DIR) {
		nlink_t nlink = 2;
		mode_t perm = idx == 0 ? 0555 : shown_perm(e->mode);

		for (uint32_t c = e->first_child; c < vi->nentries;
		     c = vi->entries[c].next_sibling)
			if (vi->entries[c].type == DCR_FT_DIR)
				nlink++;
		fs_stat_common(fs, st, ino, S_IFDIR | perm, nlink,
			       idx == 0 ? vi->ctime_ns : e->mtime_ns);
		st->st_size = 4096;
		st->st_blocks = 8;
	} else {
		fs_stat_common(fs, st, ino, S_IFREG | shown_perm(e->mode), 1,
			       e->mtime_ns);
		st->st_size = (off_t)e->size;
		st->st_blocks = (blkcnt_t)DCR_DIV_ROUND_UP(e->size, 512);
		st->st_blksize = vi->chunk_size ? (blksize_t)vi->chunk_size
						: 4096;
	}
}

/*
 * Index of the child @name of directory @dir in @vi, or NO_ENTRY.
 * Entries after the root are sorted by path, so a binary search on the
 * joined path finds it; a linear walk of the children backs it up in
 * case a reader ever orders them differently (a miss is cached by the
 * kernel, so the walk runs once per name). Its own search, not
 * dcr_lower_bound_u64 (core/common.h): the keys are strings.
 */
static uint32_t find_child(const struct dcr_version_info *vi, uint32_t dir,
			   const char *name)
{
	const struct dcr_entry *d = &vi->entries[dir];
	char path[DCR_PATH_MAX + 2];
	size_t dl = strlen(d->path), nl = strlen(name);
	uint32_t lo = 1, hi = vi->nentries;

	if (dl + 1 + nl + 1 > sizeof(path))
		return NO_ENTRY;
	if (dl) {
		memcpy(path, d->path, dl);
		path[dl++] = '/';
	}
	memcpy(path + dl, name, nl + 1);

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		int c = strcmp(vi->entries[mid].path, path);

		if (c == 0) {
			if (vi->entries[mid].parent == dir)
				return mid;
			break;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (uint32_t c = d->first_child; c < vi->nentries;
	     c = vi->entries[c].next_sibling)
		if (strcmp(vi->entries[c].name, name) == 0)
			return c;
	return NO_ENTRY;
}

static void version_lookup_in(fuse_req_t req, struct dcrfs *fs,
			      const struct dcr_version_info *vi, uint32_t dir,
			      const char *name)
{
	const struct dcr_entry *d;
	struct fuse_entry_param e;
	struct stat st;
	uint32_t c;

	d = entry_get(vi, dir);
	if (!d) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (d->type != DCR_FT_DIR) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	c = find_child(vi, dir, name);
	if (c == NO_ENTRY) {
		/* Immutable: let the kernel cache the miss too. */
		memset(&e, 0, sizeof(e));
		e.ino = 0;
		e.entry_timeout = DCRFS_TTL_IMMUTABLE;
		fuse_reply_entry(req, &e);
		return;
	}
	fs_entry_stat(fs, vi, c, &st);
	fs_reply_entry(req, &st, DCRFS_TTL_IMMUTABLE, vi->tree);
}

void fs_version_lookup(fuse_req_t req, struct dcrfs *fs, uint64_t v,
		       uint32_t tree, uint32_t dir, const char *name)
{
	const struct dcr_version_info *vi;
	int ret = version_get_tree(fs, v, tree, &vi);

	if (ret < 0) {
		fuse_reply_err(req, -ret);
		return;
	}
	version_lookup_in(req, fs, vi, dir, name);
	version_put(fs, vi);
}

/*
 * Version directory offsets: 1 ".", 2 "..", c + 3 after child entry c;
 * the listing resumes at entries[c].next_sibling, in O(1).
 */
static int version_readdir_in(struct dirbuf *db, struct dcrfs *fs,
			      const struct dcr_version_info *vi, uint32_t dir,
			      off_t off)
{
	const struct dcr_entry *d;
	struct stat st;
	uint32_t c;

	d = entry_get(vi, dir);
	if (!d)
		return -ENOENT;
	if (d->type != DCR_FT_DIR)
		return -ENOTDIR;

	fs_entry_stat(fs, vi, dir, &st);
	if (off < 1 && fs_dirbuf_add_gen(db, ".", &st, DCRFS_TTL_IMMUTABLE, 1,
					 vi->tree))
		return 0;
	if (off < 2) {
		if (dir == 0) {
			if (fs_root_stat(fs, &st) < 0)
				fs_entry_stat(fs, vi, dir, &st);
		} else {
			fs_entry_stat(fs, vi, d->parent, &st);
		}
		if (fs_dirbuf_add_gen(db, "..", &st, DCRFS_TTL_IMMUTABLE, 2,
				      dir ? vi->tree : 0))
			return 0;
	}
	if (off <= 2) {
		c = d->first_child;
	} else {
		uint64_t prev = (uint64_t)off - 3;

		if (prev >= vi->nentries || vi->entries[prev].parent != dir)
			return -EINVAL;
		c = vi->entries[prev].next_sibling;
	}
	for (; c < vi->nentries; c = vi->entries[c].next_sibling) {
		fs_entry_stat(fs, vi, c, &st);
		if (fs_dirbuf_add_gen(db, vi->entries[c].name, &st,
				      DCRFS_TTL_IMMUTABLE, (off_t)c + 3,
				      vi->tree))
			break;
	}
	return 0;
}

int fs_version_readdir(struct dirbuf *db, struct dcrfs *fs, uint64_t v,
		       uint32_t tree, uint32_t dir, off_t off)
{
	const struct dcr_version_info *vi;
	int ret = version_get_tree(fs, v, tree, &vi);

	if (ret < 0)
		return ret;
	ret = version_readdir_in(db, fs, vi, dir, off);
	version_put(fs, vi);
	return ret;
}

int fs_version_stat(struct dcrfs *fs, const struct dcrfs_node *n,
		    struct stat *st)
{
	const struct dcr_version_info *vi;
	int ret = version_get_tree(fs, n->v, n->tree, &vi);

	if (ret < 0)
		return ret;
	ret = entry_get(vi, n->idx) ? 0 : -ENOENT;
	if (!ret)
		fs_entry_stat(fs, vi, n->idx, st);
	version_put(fs, vi);
	return ret;
}
