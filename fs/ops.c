/* SPDX-License-Identifier: MIT */
/*
 * ops.c - the FUSE low-level operations of dcrfs. Its background
 * threads (store polling, kernel cache invalidation, prefetch) are in
 * bg.c.
 *
 * The tree (DESIGN.md section 8):
 *
 *   /latest         symlink -> "vN", the newest version; absent while
 *                   the store holds no version
 *   /vN/...         version N's committed tree, immutable
 *   /tags/NAME      symlink -> "../vN"
 *   /.dcrfs/        the mount's status (status.c): status.json and
 *                   metrics, read-only, generated at open; and latest,
 *                   the version /latest shows, pollable (latestfile.c);
 *                   hidden from the listing of the root, found by lookup
 *
 * Version trees never change, so their entries and attributes are cached
 * by the kernel for a day and their pages are kept across opens
 * (keep_cache); the root, /latest and /tags are cached for a second and
 * invalidated explicitly when the watcher sees latest move.
 *
 * Every operation that would modify the tree fails with EROFS (setxattr
 * and removexattr too); getxattr and listxattr, the provenance of the
 * version trees, are xattr.c's.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "common.h"
#include "fileio.h"
#include "manifest.h"
#include "fs.h"

#define NO_ENTRY UINT32_MAX
/* A lookup miss of a future "vN" refreshes at most this often. */
#define NAME_MAX_SHOWN 255

static struct dcrfs *fs_of(fuse_req_t req)
{
	return (struct dcrfs *)fuse_req_userdata(req);
}

/* ------------------------------------------------------------ attributes */

static void ns_to_ts(int64_t ns, struct timespec *ts)
{
	int64_t s = ns / 1000000000LL;
	int64_t r = ns % 1000000000LL;

	if (r < 0) {
		r += 1000000000LL;
		s--;
	}
	ts->tv_sec = (time_t)s;
	ts->tv_nsec = (long)r;
}

static void stat_common(const struct dcrfs *fs, struct stat *st,
			fuse_ino_t ino, mode_t mode, nlink_t nlink,
			int64_t mtime_ns)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_mode = mode;
	st->st_nlink = nlink;
	st->st_uid = fs->uid;
	st->st_gid = fs->gid;
	st->st_blksize = 4096;
	ns_to_ts(mtime_ns, &st->st_mtim);
	st->st_atim = st->st_mtim;
	st->st_ctim = st->st_mtim;
}

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
static int tree_entry_type(struct dcrfs *fs, uint64_t v, uint32_t tree,
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

static void entry_stat(const struct dcrfs *fs,
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
		stat_common(fs, st, ino, S_IFDIR | perm, nlink,
			    idx == 0 ? vi->ctime_ns : e->mtime_ns);
		st->st_size = 4096;
		st->st_blocks = 8;
	} else {
		stat_common(fs, st, ino, S_IFREG | shown_perm(e->mode), 1,
			    e->mtime_ns);
		st->st_size = (off_t)e->size;
		st->st_blocks = (blkcnt_t)DCR_DIV_ROUND_UP(e->size, 512);
		st->st_blksize = vi->chunk_size ? (blksize_t)vi->chunk_size
						: 4096;
	}
}

/* Commit time of the newest version, or the mount time if none. */
static int64_t latest_ctime(struct dcrfs *fs, uint64_t latest)
{
	const struct dcr_version_info *vi;
	int64_t ns;

	if (latest && version_get(fs, latest, &vi) == 0) {
		ns = vi->ctime_ns;
		version_put(fs, vi);
		return ns;
	}
	return fs->mount_ns;
}

static int root_stat(struct dcrfs *fs, struct stat *st)
{
	uint64_t *vs = NULL;
	size_t n = 0;
	int ret = dcr_reader_versions(fs->r, &vs, &n);

	if (ret < 0)
		return ret;
	stat_common(fs, st, DCRFS_INO_ROOT, S_IFDIR | 0555,
		    (nlink_t)(4 + n),
		    latest_ctime(fs, n ? vs[n - 1] : 0));
	st->st_size = 4096;
	st->st_blocks = 8;
	free(vs);
	return 0;
}

static void tags_stat(struct dcrfs *fs, struct stat *st)
{
	stat_common(fs, st, DCRFS_INO_TAGS, S_IFDIR | 0555, 2,
		    latest_ctime(fs, dcr_reader_latest(fs->r)));
	st->st_size = 4096;
	st->st_blocks = 8;
}

/* Attributes of /.dcrfs and its files. */
static int status_stat(struct dcrfs *fs, fuse_ino_t ino, struct stat *st)
{
	if (ino == DCRFS_INO_STATUS_DIR) {
		stat_common(fs, st, ino, S_IFDIR | 0555, 2, dcr_now_ns());
		st->st_size = 4096;
		st->st_blocks = 8;
		return 0;
	}
	stat_common(fs, st, ino, S_IFREG | 0444, 1, dcr_now_ns());
	/* Size 0, like /proc: the text is made at every open and may be
	 * longer than when stat looked (a counter gained a digit), and a
	 * size from stat made cp copy a cut-off file. Readers read to the
	 * end of the file (direct_io). */
	st->st_size = 0;
	return 0;
}

static bool is_status_ino(fuse_ino_t ino)
{
	return ino == DCRFS_INO_STATUS_DIR || ino == DCRFS_INO_STATUS_JSON ||
	       ino == DCRFS_INO_METRICS || ino == DCRFS_INO_LATEST_FILE;
}

static void symlink_stat(struct dcrfs *fs, struct stat *st, fuse_ino_t ino,
			 const char *target, uint64_t v)
{
	stat_common(fs, st, ino, S_IFLNK | 0777, 1, latest_ctime(fs, v));
	st->st_size = (off_t)strlen(target);
}

static int latest_stat(struct dcrfs *fs, struct stat *st)
{
	uint64_t latest = dcrfs_latest(fs);
	char target[32];

	if (latest == 0)
		return -ENOENT;
	snprintf(target, sizeof(target), "v%" PRIu64, latest);
	symlink_stat(fs, st, DCRFS_INO_LATEST, target, latest);
	return 0;
}

/* ------------------------------------------------------------------ tags */

/* Slot of tag @name in the tag-name table, added if new. 0 or -errno. */
static int tag_slot(struct dcrfs *fs, const char *name, size_t *slot)
{
	int ret = 0;

	pthread_mutex_lock(&fs->tag_lock);
	for (size_t i = 0; i < fs->ntag_names; i++) {
		if (strcmp(fs->tag_names[i], name) == 0) {
			*slot = i;
			goto out;
		}
	}
	if (fs->ntag_names >= DCRFS_INO_DVIEW_BASE - DCRFS_INO_TAG_BASE) {
		ret = -ENOSPC;
		goto out;
	}
	if (fs->ntag_names == fs->tag_names_cap) {
		size_t cap = fs->tag_names_cap ? 2 * fs->tag_names_cap : 16;
		char **p = realloc(fs->tag_names, cap * sizeof(*p));

		if (!p) {
			ret = -ENOMEM;
			goto out;
		}
		fs->tag_names = p;
		fs->tag_names_cap = cap;
	}
	fs->tag_names[fs->ntag_names] = strdup(name);
	if (!fs->tag_names[fs->ntag_names]) {
		ret = -ENOMEM;
		goto out;
	}
	*slot = fs->ntag_names++;
out:
	pthread_mutex_unlock(&fs->tag_lock);
	return ret;
}

/* Name of the tag inode @ino into @buf. 0 or -ENOENT. */
static int tag_name_of(struct dcrfs *fs, fuse_ino_t ino, char *buf,
		       size_t cap)
{
	int ret = -ENOENT;

	if (ino < DCRFS_INO_TAG_BASE || ino >= DCRFS_INO_DVIEW_BASE)
		return -ENOENT;
	pthread_mutex_lock(&fs->tag_lock);
	if (ino - DCRFS_INO_TAG_BASE < fs->ntag_names) {
		const char *name = fs->tag_names[ino - DCRFS_INO_TAG_BASE];

		if (strlen(name) < cap) {
			strcpy(buf, name);
			ret = 0;
		}
	}
	pthread_mutex_unlock(&fs->tag_lock);
	return ret;
}

/* Version tag @name points at now. 0 or -errno (-ENOENT if no such tag). */
static int tag_version(struct dcrfs *fs, const char *name, uint64_t *v)
{
	struct dcr_tag *tags = NULL;
	size_t n = 0;
	int ret = dcr_reader_tags(fs->r, &tags, &n);

	if (ret < 0)
		return ret;
	ret = -ENOENT;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(tags[i].name, name) == 0) {
			*v = tags[i].version;
			ret = 0;
			break;
		}
	}
	dcr_reader_tags_free(tags, n);
	return ret;
}

static int tag_stat(struct dcrfs *fs, fuse_ino_t ino, const char *name,
		    struct stat *st)
{
	char target[40];
	uint64_t v;
	int ret = tag_version(fs, name, &v);

	if (ret < 0)
		return ret;
	snprintf(target, sizeof(target), "../v%" PRIu64, v);
	symlink_stat(fs, st, ino, target, v);
	return 0;
}

/* ---------------------------------------------------------------- lookup */

/*
 * @gen: the tree of a version's entry (dcr_version_info.tree), else 0.
 * The inode number carries the tree already (fs.h); the generation says
 * it again for whoever looks at it (file handles).
 */
static void reply_entry(fuse_req_t req, const struct stat *st, double ttl,
			uint64_t gen)
{
	struct fuse_entry_param e;

	memset(&e, 0, sizeof(e));
	e.ino = st->st_ino;
	e.generation = gen;
	e.attr = *st;
	e.attr_timeout = ttl;
	e.entry_timeout = ttl;
	fuse_reply_entry(req, &e);
}

/* Parse "vN" (N decimal, no leading zero, 1..DCR_VERSION_MAX). */
static int parse_version_name(const char *name, uint64_t *v)
{
	uint64_t x = 0;
	const char *p = name + 1;

	if (name[0] != 'v' || *p < '1' || *p > '9')
		return 0;
	for (; *p; p++) {
		if (*p < '0' || *p > '9')
			return 0;
		x = x * 10 + (uint64_t)(*p - '0');
		if (x > DCR_VERSION_MAX)
			return 0;
	}
	*v = x;
	return 1;
}

static void root_lookup(fuse_req_t req, struct dcrfs *fs, const char *name)
{
	const int64_t since = dcr_mono_ns();
	const struct dcr_version_info *vi;
	struct stat st;
	uint64_t v;
	int ret;

	if (strcmp(name, "latest") == 0) {
		ret = latest_stat(fs, &st);
		if (ret < 0)
			goto err;
		reply_entry(req, &st, DCRFS_TTL_MUTABLE, 0);
		return;
	}
	if (strcmp(name, "tags") == 0) {
		tags_stat(fs, &st);
		reply_entry(req, &st, DCRFS_TTL_MUTABLE, 0);
		return;
	}
	if (strcmp(name, DCRFS_DELTA_DIR) == 0) {
		double ttl;

		ret = dcrfs_delta_stat(fs, DCRFS_INO_DELTA, &st, &ttl);
		if (ret < 0)
			goto err;
		reply_entry(req, &st, ttl, 0);
		return;
	}
	if (strcmp(name, DCRFS_STATUS_DIR) == 0) {
		ret = status_stat(fs, DCRFS_INO_STATUS_DIR, &st);
		if (ret < 0)
			goto err;
		reply_entry(req, &st, DCRFS_TTL_MUTABLE, 0);
		return;
	}
	if (!parse_version_name(name, &v)) {
		ret = -ENOENT;
		goto err;
	}
	ret = version_get(fs, v, &vi);
	if (ret == -ENOENT && v > dcr_reader_latest(fs->r) &&
	    fs_refresh(fs, 0, since) == 0)
		ret = version_get(fs, v, &vi);
	if (ret < 0)
		goto err;
	entry_stat(fs, vi, 0, &st);
	uint32_t tree = vi->tree;
	version_put(fs, vi);
	reply_entry(req, &st, DCRFS_TTL_IMMUTABLE, tree);
	return;
err:
	fuse_reply_err(req, -ret);
}

static void status_lookup(fuse_req_t req, struct dcrfs *fs, const char *name)
{
	fuse_ino_t ino = strcmp(name, "status.json") == 0 ? DCRFS_INO_STATUS_JSON :
			 strcmp(name, "metrics") == 0 ? DCRFS_INO_METRICS :
			 strcmp(name, "latest") == 0 ? DCRFS_INO_LATEST_FILE : 0;
	struct stat st;
	int ret = ino ? status_stat(fs, ino, &st) : -ENOENT;

	if (ret < 0) {
		fuse_reply_err(req, -ret);
		return;
	}
	/* Never cached: the size changes with every rendering. */
	reply_entry(req, &st, 0.0, 0);
}

static void tags_lookup(fuse_req_t req, struct dcrfs *fs, const char *name)
{
	struct stat st;
	size_t slot;
	uint64_t v;
	int ret = tag_version(fs, name, &v);

	if (ret == 0)
		ret = tag_slot(fs, name, &slot);
	if (ret == 0)
		ret = tag_stat(fs, DCRFS_INO_TAG_BASE + slot, name, &st);
	if (ret < 0) {
		fuse_reply_err(req, -ret);
		return;
	}
	reply_entry(req, &st, DCRFS_TTL_MUTABLE, 0);
}

/*
 * Index of the child @name of directory @dir in @vi, or NO_ENTRY.
 * Entries after the root are sorted by path, so a binary search on the
 * joined path finds it; a linear walk of the children backs it up in
 * case a reader ever orders them differently (a miss is cached by the
 * kernel, so the walk runs once per name).
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
	entry_stat(fs, vi, c, &st);
	reply_entry(req, &st, DCRFS_TTL_IMMUTABLE, vi->tree);
}

static void version_lookup(fuse_req_t req, struct dcrfs *fs, uint64_t v,
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

static void delta_lookup(fuse_req_t req, struct dcrfs *fs, fuse_ino_t parent,
			 const char *name)
{
	struct fuse_entry_param e;
	struct stat st;
	double ttl;
	int ret = dcrfs_delta_lookup(fs, parent, name, &st, &ttl);

	if (ret == -ENOENT && parent != DCRFS_INO_DELTA) {
		/* Below a node, immutable: let the kernel cache the miss. */
		memset(&e, 0, sizeof(e));
		e.entry_timeout = DCRFS_TTL_IMMUTABLE;
		fuse_reply_entry(req, &e);
		return;
	}
	if (ret < 0) {
		fuse_reply_err(req, -ret);
		return;
	}
	reply_entry(req, &st, ttl, 0);
}

static void dcrfs_ll_lookup(fuse_req_t req, fuse_ino_t parent,
			    const char *name)
{
	struct dcrfs *fs = fs_of(req);
	uint64_t v;
	uint32_t tree, idx;

	if (parent == DCRFS_INO_ROOT)
		root_lookup(req, fs, name);
	else if (parent == DCRFS_INO_TAGS)
		tags_lookup(req, fs, name);
	else if (parent == DCRFS_INO_STATUS_DIR)
		status_lookup(req, fs, name);
	else if (dcrfs_delta_is_ino(parent))
		delta_lookup(req, fs, parent, name);
	else if (dcrfs_ino_split(parent, &v, &tree, &idx))
		version_lookup(req, fs, v, tree, idx, name);
	else
		fuse_reply_err(req, ENOTDIR);
}

/* Inode numbers are computed: there is nothing to forget. */
static void dcrfs_ll_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	fuse_reply_none(req);
}

static void dcrfs_ll_forget_multi(fuse_req_t req, size_t count,
				  struct fuse_forget_data *forgets)
{
	fuse_reply_none(req);
}

/* --------------------------------------------------------------- getattr */

/* Attributes of any inode and how long the kernel may cache them. */
static int ino_stat(struct dcrfs *fs, fuse_ino_t ino, struct stat *st,
		    double *ttl)
{
	const struct dcr_version_info *vi;
	char name[256];
	uint64_t v;
	uint32_t tree, idx;
	int ret;

	*ttl = DCRFS_TTL_MUTABLE;
	if (ino == DCRFS_INO_ROOT)
		return root_stat(fs, st);
	if (ino == DCRFS_INO_LATEST)
		return latest_stat(fs, st);
	if (ino == DCRFS_INO_TAGS) {
		tags_stat(fs, st);
		return 0;
	}
	if (is_status_ino(ino)) {
		*ttl = 0.0;
		return status_stat(fs, ino, st);
	}
	if (dcrfs_delta_is_ino(ino))
		return dcrfs_delta_stat(fs, ino, st, ttl);
	if (dcrfs_ino_split(ino, &v, &tree, &idx)) {
		ret = version_get_tree(fs, v, tree, &vi);
		if (ret < 0)
			return ret;
		ret = entry_get(vi, idx) ? 0 : -ENOENT;
		if (!ret)
			entry_stat(fs, vi, idx, st);
		version_put(fs, vi);
		*ttl = DCRFS_TTL_IMMUTABLE;
		return ret;
	}
	ret = tag_name_of(fs, ino, name, sizeof(name));
	if (ret < 0)
		return ret;
	return tag_stat(fs, ino, name, st);
}

static void dcrfs_ll_getattr(fuse_req_t req, fuse_ino_t ino,
			     struct fuse_file_info *fi)
{
	struct stat st;
	double ttl;
	int ret = ino_stat(fs_of(req), ino, &st, &ttl);

	if (ret < 0)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_attr(req, &st, ttl);
}

static void dcrfs_ll_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct dcrfs *fs = fs_of(req);
	char target[40];
	char name[256];
	uint64_t v;
	int ret;

	if (ino == DCRFS_INO_LATEST) {
		v = dcrfs_latest(fs);
		if (v == 0) {
			fuse_reply_err(req, ENOENT);
			return;
		}
		snprintf(target, sizeof(target), "v%" PRIu64, v);
		fuse_reply_readlink(req, target);
		return;
	}
	ret = tag_name_of(fs, ino, name, sizeof(name));
	if (ret == 0)
		ret = tag_version(fs, name, &v);
	if (ret < 0) {
		/* Not a symlink at all, or a tag that went away. */
		fuse_reply_err(req, ino < DCRFS_INO_TAG_BASE ||
				    ino >= DCRFS_INO_DVIEW_BASE ? EINVAL : -ret);
		return;
	}
	snprintf(target, sizeof(target), "../v%" PRIu64, v);
	fuse_reply_readlink(req, target);
}

/* ------------------------------------------------------------ directories */

struct dirbuf {
	fuse_req_t req;
	char *p;
	size_t size;
	size_t pos;
	int plus;
};

/* Append one entry; 1 if it did not fit (the listing stops there). In a
 * READDIRPLUS reply an entry given no @ttl (< 0) goes without
 * attributes: node id 0, which the kernel caches nothing of and looks
 * up on use. */
static int dirbuf_add_gen(struct dirbuf *db, const char *name,
			  const struct stat *st, double ttl, off_t next,
			  uint64_t gen)
{
	size_t left = db->size - db->pos;
	size_t n;

	if (db->plus) {
		struct fuse_entry_param e;

		memset(&e, 0, sizeof(e));
		if (ttl < 0)
			ttl = 0.0;
		else
			e.ino = st->st_ino;
		e.generation = gen; /* see reply_entry */
		e.attr = *st;
		e.attr_timeout = ttl;
		e.entry_timeout = ttl;
		n = fuse_add_direntry_plus(db->req, db->p + db->pos, left,
					   name, &e, next);
	} else {
		n = fuse_add_direntry(db->req, db->p + db->pos, left, name,
				      st, next);
	}
	if (n > left)
		return 1;
	db->pos += n;
	return 0;
}

/* An entry that is not a version's (generation 0). */
static int dirbuf_add(struct dirbuf *db, const char *name,
		      const struct stat *st, double ttl, off_t next)
{
	return dirbuf_add_gen(db, name, st, ttl, next, 0);
}

/*
 * Root offsets: 1 after ".", 2 after "..", 3 after "latest", 4 after
 * "tags", 5 after "delta", v + 5 after "vN". They stay valid while
 * versions are added.
 */
static int root_readdir(struct dirbuf *db, struct dcrfs *fs, off_t off)
{
	const struct dcr_version_info *vi;
	uint64_t *vs = NULL;
	size_t n = 0;
	struct stat st;
	int ret = dcr_reader_versions(fs->r, &vs, &n);

	if (ret < 0)
		return ret;
	ret = root_stat(fs, &st);
	if (ret < 0)
		goto out;
	if (off < 1 && dirbuf_add(db, ".", &st, DCRFS_TTL_MUTABLE, 1))
		goto out;
	if (off < 2 && dirbuf_add(db, "..", &st, DCRFS_TTL_MUTABLE, 2))
		goto out;
	if (off < 3 && latest_stat(fs, &st) == 0 &&
	    dirbuf_add(db, "latest", &st, DCRFS_TTL_MUTABLE, 3))
		goto out;
	if (off < 4) {
		tags_stat(fs, &st);
		if (dirbuf_add(db, "tags", &st, DCRFS_TTL_MUTABLE, 4))
			goto out;
	}
	if (off < 5) {
		double ttl;

		if (dcrfs_delta_stat(fs, DCRFS_INO_DELTA, &st, &ttl) == 0 &&
		    dirbuf_add(db, DCRFS_DELTA_DIR, &st, ttl, 5))
			goto out;
	}
	for (size_t i = 0; i < n; i++) {
		char name[32];
		uint64_t v = vs[i];

		if (v > DCR_VERSION_MAX)
			break;
		if ((off_t)(v + 5) <= off)
			continue;
		if (version_get(fs, v, &vi) < 0)
			continue;
		snprintf(name, sizeof(name), "v%" PRIu64, v);
		entry_stat(fs, vi, 0, &st);
		uint32_t tree = vi->tree;
		version_put(fs, vi);
		if (dirbuf_add_gen(db, name, &st, DCRFS_TTL_IMMUTABLE,
				   (off_t)(v + 5), tree))
			break;
	}
out:
	free(vs);
	return ret;
}

/* /.dcrfs: offsets 1 ".", 2 "..", 3 status.json, 4 metrics, 5 latest. */
static int status_readdir(struct dirbuf *db, struct dcrfs *fs, off_t off)
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
		ret = ents[i].ino == DCRFS_INO_ROOT ? root_stat(fs, &st) :
		      status_stat(fs, ents[i].ino, &st);
		if (ret < 0)
			return ret;
		if (dirbuf_add(db, ents[i].name, &st, 0.0, (off_t)i + 1))
			break;
	}
	return 0;
}

struct tag_ent {
	size_t slot;
	uint64_t version;
	const char *name;
};

static int tag_ent_cmp(const void *a, const void *b)
{
	const struct tag_ent *x = a, *y = b;

	return x->slot < y->slot ? -1 : x->slot > y->slot;
}

/* Tags offsets: 1 ".", 2 "..", slot + 3 after the tag in that slot. */
static int tags_readdir(struct dirbuf *db, struct dcrfs *fs, off_t off)
{
	struct dcr_tag *tags = NULL;
	struct tag_ent *ents = NULL;
	size_t n = 0;
	struct stat st;
	int ret = dcr_reader_tags(fs->r, &tags, &n);

	if (ret < 0)
		return ret;
	if (n) {
		ents = calloc(n, sizeof(*ents));
		if (!ents) {
			ret = -ENOMEM;
			goto out;
		}
	}
	for (size_t i = 0; i < n; i++) {
		ret = tag_slot(fs, tags[i].name, &ents[i].slot);
		if (ret < 0)
			goto out;
		ents[i].version = tags[i].version;
		ents[i].name = tags[i].name;
	}
	if (n)
		qsort(ents, n, sizeof(*ents), tag_ent_cmp);

	tags_stat(fs, &st);
	if (off < 1 && dirbuf_add(db, ".", &st, DCRFS_TTL_MUTABLE, 1))
		goto out;
	if (off < 2) {
		if (root_stat(fs, &st) < 0)
			tags_stat(fs, &st);
		if (dirbuf_add(db, "..", &st, DCRFS_TTL_MUTABLE, 2))
			goto out;
	}
	for (size_t i = 0; i < n; i++) {
		char target[40];
		off_t next = (off_t)(ents[i].slot + 3);

		if (next <= off)
			continue;
		snprintf(target, sizeof(target), "../v%" PRIu64,
			 ents[i].version);
		symlink_stat(fs, &st, DCRFS_INO_TAG_BASE + ents[i].slot,
			     target, ents[i].version);
		if (dirbuf_add(db, ents[i].name, &st, DCRFS_TTL_MUTABLE, next))
			break;
	}
out:
	free(ents);
	dcr_reader_tags_free(tags, n);
	return ret;
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

	entry_stat(fs, vi, dir, &st);
	if (off < 1 && dirbuf_add_gen(db, ".", &st, DCRFS_TTL_IMMUTABLE, 1, vi->tree))
		return 0;
	if (off < 2) {
		if (dir == 0) {
			if (root_stat(fs, &st) < 0)
				entry_stat(fs, vi, dir, &st);
		} else {
			entry_stat(fs, vi, d->parent, &st);
		}
		if (dirbuf_add_gen(db, "..", &st, DCRFS_TTL_IMMUTABLE, 2,
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
		entry_stat(fs, vi, c, &st);
		if (dirbuf_add_gen(db, vi->entries[c].name, &st,
				   DCRFS_TTL_IMMUTABLE, (off_t)c + 3, vi->tree))
			break;
	}
	return 0;
}

static int version_readdir(struct dirbuf *db, struct dcrfs *fs, uint64_t v,
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

/* dcrfs_delta_emit_fn into a dirbuf; entries without @attrs go without
 * attributes (dirbuf_add_gen). */
static int delta_emit(void *ctx, const char *name, const struct stat *st,
		      off_t next, bool attrs)
{
	return dirbuf_add(ctx, name, st, attrs ? DCRFS_TTL_MUTABLE : -1.0, next);
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
		       off_t off, int plus)
{
	struct dcrfs *fs = fs_of(req);
	struct dirbuf db;
	uint64_t v;
	uint32_t tree, idx;
	int ret;

	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	memset(&db, 0, sizeof(db));
	db.req = req;
	db.size = DCR_MIN(size, (size_t)1 << 20);
	db.plus = plus;
	db.p = malloc(db.size ? db.size : 1);
	if (!db.p) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (ino == DCRFS_INO_ROOT)
		ret = root_readdir(&db, fs, off);
	else if (ino == DCRFS_INO_TAGS)
		ret = tags_readdir(&db, fs, off);
	else if (ino == DCRFS_INO_STATUS_DIR)
		ret = status_readdir(&db, fs, off);
	else if (dcrfs_delta_is_ino(ino))
		ret = dcrfs_delta_list(fs, ino, off, delta_emit, &db);
	else if (dcrfs_ino_split(ino, &v, &tree, &idx))
		ret = version_readdir(&db, fs, v, tree, idx, off);
	else
		ret = -ENOTDIR;
	if (ret < 0)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_buf(req, db.p, db.pos);
	free(db.p);
}

static void dcrfs_ll_opendir(fuse_req_t req, fuse_ino_t ino,
			     struct fuse_file_info *fi)
{
	struct dcrfs *fs = fs_of(req);
	uint8_t type;
	uint64_t v;
	uint32_t tree, idx;
	int ret;

	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if (ino == DCRFS_INO_ROOT || ino == DCRFS_INO_TAGS ||
	    ino == DCRFS_INO_STATUS_DIR || ino == DCRFS_INO_DELTA) {
		fuse_reply_open(req, fi);
		return;
	}
	if (dcrfs_delta_is_ino(ino)) {
		struct stat st;
		double ttl;

		ret = dcrfs_delta_stat(fs, ino, &st, &ttl);
		if (ret == 0 && !S_ISDIR(st.st_mode))
			ret = -ENOTDIR;
		if (ret < 0)
			fuse_reply_err(req, -ret);
		else
			fuse_reply_open(req, fi);
		return;
	}
	if (!dcrfs_ino_split(ino, &v, &tree, &idx)) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	ret = tree_entry_type(fs, v, tree, idx, &type);
	if (ret < 0) {
		fuse_reply_err(req, -ret);
		return;
	}
	if (type != DCR_FT_DIR) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	/* Immutable: the kernel may keep the listing. */
	fi->cache_readdir = 1;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static void dcrfs_ll_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
			     off_t off, struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, 0);
}

static void dcrfs_ll_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
				 off_t off, struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, 1);
}

static void dcrfs_ll_releasedir(fuse_req_t req, fuse_ino_t ino,
				struct fuse_file_info *fi)
{
	fuse_reply_err(req, 0);
}

/* ------------------------------------------------------------------ files */

/* A status file is rendered once at open; reads serve that snapshot. */
struct status_snap {
	char *text;
	size_t len;
};

static void status_open(fuse_req_t req, struct dcrfs *fs, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	struct status_snap *sn = calloc(1, sizeof(*sn));
	int ret = sn ? dcrfs_status_render(fs, ino == DCRFS_INO_STATUS_JSON ?
					   DCRFS_STATUS_JSON : DCRFS_STATUS_METRICS,
					   &sn->text, &sn->len) : -ENOMEM;

	if (ret < 0) {
		free(sn);
		fuse_reply_err(req, -ret);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)sn;
	fi->direct_io = 1; /* the size is not known before the read */
	fi->keep_cache = 0;
	if (fuse_reply_open(req, fi) < 0) {
		free(sn->text);
		free(sn);
	}
}

static void status_read(fuse_req_t req, size_t size, off_t off,
			const struct fuse_file_info *fi)
{
	const struct status_snap *sn = (const struct status_snap *)(uintptr_t)fi->fh;

	if (off < 0 || (uint64_t)off >= sn->len) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	fuse_reply_buf(req, sn->text + off, DCR_MIN(size, sn->len - (size_t)off));
}

static void dcrfs_ll_open(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	struct dcrfs *fs = fs_of(req);
	uint8_t type;
	uint64_t v;
	uint32_t tree, idx;
	int ret;

	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if (ino == DCRFS_INO_STATUS_JSON || ino == DCRFS_INO_METRICS) {
		status_open(req, fs, ino, fi);
		return;
	}
	if (ino == DCRFS_INO_LATEST_FILE) {
		dcrfs_latestfile_open(req, fs, fi);
		return;
	}
	if (dcrfs_delta_is_ino(ino)) {
		uint64_t fh;

		ret = dcrfs_delta_open(fs, ino, &fh);
		if (ret < 0) {
			fuse_reply_err(req, -ret);
			return;
		}
		fi->fh = fh;
		fi->noflush = 1;
		fi->direct_io = 0;
		fi->keep_cache = 1; /* a node's bytes never change */
		if ((ret > 0 ? dcrfs_pt_open_reply(&fs->pt, req, fi, ret) :
			       fuse_reply_open(req, fi)) != 0)
			dcrfs_delta_release(fs, fh);
		return;
	}
	if (!dcrfs_ino_split(ino, &v, &tree, &idx)) {
		fuse_reply_err(req, ino == DCRFS_INO_ROOT || ino == DCRFS_INO_TAGS ||
				    ino == DCRFS_INO_STATUS_DIR ? EISDIR : ELOOP);
		return;
	}
	/* The tree of the inode opened (its number carries it, fs.h), not
	 * the version's current one: an inode the kernel kept from a tree
	 * that changed in the store (its pages too, keep_cache) fails
	 * ESTALE here, and its reads below, instead of mixing in the new
	 * tree's bytes. */
	ret = tree_entry_type(fs, v, tree, idx, &type);
	if (ret < 0) {
		fuse_reply_err(req, -ret);
		return;
	}
	if (type != DCR_FT_REG) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	fi->fh = 0; /* reads take the tree from the inode number */
	fi->noflush = 1;
	fi->direct_io = 0;
	/* Whole and proven in the cache: the kernel reads the cache file
	 * itself (passthrough). Otherwise the normal path below. */
	ret = dcrfs_backing_open(fs, ino, v, tree, idx);
	if (ret < 0) {
		fuse_reply_err(req, -ret);
		return;
	}
	if (ret > 0) {
		fi->fh |= DCRFS_FH_PASSTHROUGH;
		if (dcrfs_pt_open_reply(&fs->pt, req, fi, ret) != 0)
			dcrfs_backing_release(fs, ino); /* no RELEASE comes */
		else
			atomic_fetch_add_explicit(&fs->pt.opens, 1,
						  memory_order_relaxed);
		return;
	}
	/* Immutable: pages survive close and reopen; never direct_io. */
	fi->keep_cache = 1;
	if (fuse_reply_open(req, fi) != 0)
		dcrfs_backing_release(fs, ino);
	else
		atomic_fetch_add_explicit(&fs->pt.normal_opens, 1,
					  memory_order_relaxed);
}

static void dcrfs_ll_read(fuse_req_t req, fuse_ino_t ino, size_t size,
			  off_t off, struct fuse_file_info *fi)
{
	struct dcrfs *fs = fs_of(req);
	uint64_t v;
	uint32_t tree, idx;
	ssize_t n;
	void *buf;

	if (ino == DCRFS_INO_STATUS_JSON || ino == DCRFS_INO_METRICS) {
		status_read(req, size, off, fi);
		return;
	}
	if (ino == DCRFS_INO_LATEST_FILE) {
		dcrfs_latestfile_read(req, fs, size, off, fi);
		return;
	}
	if (dcrfs_delta_is_ino(ino)) {
		buf = dcr_thread_buf(DCR_TBUF_REPLY,
				     DCR_MAX(size, (size_t)DCRFS_READ_MAX));
		n = buf ? dcrfs_delta_read(fs, fi->fh, buf, size, off) : -ENOMEM;
		if (n < 0)
			fuse_reply_err(req, (int)-n);
		else
			fuse_reply_buf(req, buf, (size_t)n);
		return;
	}
	if (!dcrfs_ino_split(ino, &v, &tree, &idx)) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (size == 0) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	atomic_fetch_add_explicit(&fs->stats.reads, 1, memory_order_relaxed);
	if (fi->fh & DCRFS_FH_PASSTHROUGH) /* the kernel should serve these */
		atomic_fetch_add_explicit(&fs->pt.reads_seen, 1,
					  memory_order_relaxed);
	/* Copied, never spliced from a cache file: the reader checks every
	 * chunk it reads from one against the manifest (a byte may rot on
	 * disk after the chunk's first use), which a splice would skip. */
	buf = dcr_thread_buf(DCR_TBUF_REPLY,
			     DCR_MAX(size, (size_t)DCRFS_READ_MAX));
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	/* Of the inode's tree: -ESTALE once the version has another. */
	n = dcr_reader_read_tree(fs->r, v, tree, idx, (uint64_t)off,
				 buf, size);
	if (n < 0) {
		atomic_fetch_add_explicit(&fs->stats.read_errors, 1, memory_order_relaxed);
		fuse_reply_err(req, (int)-n);
	} else {
		fuse_reply_buf(req, buf, (size_t)n);
	}
}

static void dcrfs_ll_release(fuse_req_t req, fuse_ino_t ino,
			     struct fuse_file_info *fi)
{
	if (ino == DCRFS_INO_STATUS_JSON || ino == DCRFS_INO_METRICS) {
		struct status_snap *sn = (struct status_snap *)(uintptr_t)fi->fh;

		free(sn->text);
		free(sn);
	} else if (ino == DCRFS_INO_LATEST_FILE) {
		dcrfs_latestfile_release(fs_of(req), fi);
	} else if (dcrfs_delta_is_ino(ino)) {
		dcrfs_delta_release(fs_of(req), fi->fh);
	} else {
		dcrfs_backing_release(fs_of(req), ino);
	}
	fuse_reply_err(req, 0);
}

static void dcrfs_ll_flush(fuse_req_t req, fuse_ino_t ino,
			   struct fuse_file_info *fi)
{
	fuse_reply_err(req, 0);
}

static void dcrfs_ll_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
			   struct fuse_file_info *fi)
{
	fuse_reply_err(req, 0);
}

/* ------------------------------------------------------------ filesystem */

static void dcrfs_ll_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct dcrfs *fs = fs_of(req);
	const struct dcr_version_info *vi;
	uint64_t latest = dcr_reader_latest(fs->r);
	uint64_t bytes = 0, files = 0;
	struct statvfs sv;

	if (latest && version_get(fs, latest, &vi) == 0) {
		for (uint32_t i = 0; i < vi->nentries; i++)
			if (vi->entries[i].type == DCR_FT_REG)
				bytes += vi->entries[i].size;
		files = vi->nentries;
		version_put(fs, vi);
	}
	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	sv.f_blocks = (fsblkcnt_t)DCR_DIV_ROUND_UP(bytes, 4096);
	sv.f_files = (fsfilcnt_t)files;
	sv.f_namemax = NAME_MAX_SHOWN;
	sv.f_flag = ST_RDONLY | ST_NOSUID | ST_NODEV;
	fuse_reply_statfs(req, &sv);
}

static void dcrfs_ll_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	fuse_reply_err(req, (mask & W_OK) ? EROFS : 0);
}

/* ------------------------------------------------------ read-only refusals */

static void dcrfs_ll_setattr(fuse_req_t req, fuse_ino_t ino,
			     struct stat *attr, int to_set,
			     struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}

static void dcrfs_ll_mknod(fuse_req_t req, fuse_ino_t parent,
			   const char *name, mode_t mode, dev_t rdev)
{
	fuse_reply_err(req, EROFS);
}

static void dcrfs_ll_mkdir(fuse_req_t req, fuse_ino_t parent,
			   const char *name, mode_t mode)
{
	fuse_reply_err(req, EROFS);
}

static void dcrfs_ll_unlink(fuse_req_t req, fuse_ino_t parent,
			    const char *name)
{
	fuse_reply_err(req, EROFS);
}

static void dcrfs_ll_rmdir(fuse_req_t req, fuse_ino_t parent,
			   const char *name)
{
	fuse_reply_err(req, EROFS);
}

static void dcrfs_ll_symlink(fuse_req_t req, const char *link,
			     fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, EROFS);
}

static void dcrfs_ll_rename(fuse_req_t req, fuse_ino_t parent,
			    const char *name, fuse_ino_t newparent,
			    const char *newname, unsigned int flags)
{
	fuse_reply_err(req, EROFS);
}

static void dcrfs_ll_link(fuse_req_t req, fuse_ino_t ino,
			  fuse_ino_t newparent, const char *newname)
{
	fuse_reply_err(req, EROFS);
}

static void dcrfs_ll_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
			   size_t size, off_t off, struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}

static void dcrfs_ll_create(fuse_req_t req, fuse_ino_t parent,
			    const char *name, mode_t mode,
			    struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}

static void dcrfs_ll_setxattr(fuse_req_t req, fuse_ino_t ino,
			      const char *name, const char *value,
			      size_t size, int flags)
{
	fuse_reply_err(req, EROFS);
}

static void dcrfs_ll_removexattr(fuse_req_t req, fuse_ino_t ino,
				 const char *name)
{
	fuse_reply_err(req, EROFS);
}

static void dcrfs_ll_fallocate(fuse_req_t req, fuse_ino_t ino, int mode,
			       off_t offset, off_t length,
			       struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}

/* ------------------------------------------------------------ session */

static void dcrfs_ll_init(void *userdata, struct fuse_conn_info *conn)
{
	struct dcrfs *fs = userdata;

	/* libfuse fails the session unless this repeats -o max_read. */
	if (fs->max_read)
		conn->max_read = fs->max_read;
	/*
	 * The kernel lowers the bdi's read_ahead_kb to this, and main.c
	 * sets read_ahead_kb to -o readahead right after mounting (before
	 * this reply): both say what was asked, or that stays capped here.
	 * 0 (-o readahead=0): the kernel's default stays.
	 */
	if (fs->read_ahead_kb)
		conn->max_readahead = fs->read_ahead_kb * 1024;
	else
		conn->max_readahead = DCR_MAX(conn->max_readahead, DCRFS_READ_MAX);
	conn->max_background = 64;
	conn->congestion_threshold = 48;
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	/* Version files never change; keep_cache says so per open. */
	conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
	/* /latest moves: its target must not be cached. */
	conn->want &= ~FUSE_CAP_CACHE_SYMLINKS;
	/*
	 * With passthrough (asked for in the INIT reply, passthrough.c), a
	 * file read cold is opened through passthrough next time: its
	 * chunks go to the cache through the page cache, so that the kernel
	 * then reads them from memory, and the inode's own pages are
	 * dropped at that open (backing.c).
	 */
	if (fs->pt.devfd >= 0 && atomic_load(&fs->pt.offered) &&
	    !(conn->want & FUSE_CAP_WRITEBACK_CACHE))
		dcr_reader_set_cache_direct(fs->r, false);
}

const struct fuse_lowlevel_ops dcrfs_ll_ops = {
	.init = dcrfs_ll_init,
	.lookup = dcrfs_ll_lookup,
	.forget = dcrfs_ll_forget,
	.forget_multi = dcrfs_ll_forget_multi,
	.getattr = dcrfs_ll_getattr,
	.setattr = dcrfs_ll_setattr,
	.readlink = dcrfs_ll_readlink,
	.mknod = dcrfs_ll_mknod,
	.mkdir = dcrfs_ll_mkdir,
	.unlink = dcrfs_ll_unlink,
	.rmdir = dcrfs_ll_rmdir,
	.symlink = dcrfs_ll_symlink,
	.rename = dcrfs_ll_rename,
	.link = dcrfs_ll_link,
	.open = dcrfs_ll_open,
	.read = dcrfs_ll_read,
	.write = dcrfs_ll_write,
	.flush = dcrfs_ll_flush,
	.release = dcrfs_ll_release,
	.fsync = dcrfs_ll_fsync,
	.opendir = dcrfs_ll_opendir,
	.readdir = dcrfs_ll_readdir,
	.readdirplus = dcrfs_ll_readdirplus,
	.releasedir = dcrfs_ll_releasedir,
	.statfs = dcrfs_ll_statfs,
	.setxattr = dcrfs_ll_setxattr,
	.getxattr = dcrfs_ll_getxattr,
	.listxattr = dcrfs_ll_listxattr,
	.removexattr = dcrfs_ll_removexattr,
	.access = dcrfs_ll_access,
	.create = dcrfs_ll_create,
	.fallocate = dcrfs_ll_fallocate,
	.poll = dcrfs_ll_poll,
};

int dcrfs_init_state(struct dcrfs *fs)
{
	pthread_condattr_t ca;
	int ret;

	ret = pthread_mutex_init(&fs->refresh_lock, NULL);
	if (ret)
		return -ret;
	ret = pthread_mutex_init(&fs->tag_lock, NULL);
	if (ret)
		goto err_refresh;
	ret = pthread_mutex_init(&fs->bg_lock, NULL);
	if (ret)
		goto err_tag;
	ret = pthread_mutex_init(&fs->backing_lock, NULL);
	if (ret)
		goto err_bg_lock;
	ret = pthread_cond_init(&fs->backing_cv, NULL);
	if (ret)
		goto err_backing;
	ret = pthread_mutex_init(&fs->watch_lock, NULL);
	if (ret)
		goto err_backing_cv;
	ret = pthread_condattr_init(&ca);
	if (ret)
		goto err_watch;
	ret = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (ret == 0)
		ret = pthread_cond_init(&fs->bg_cond, &ca);
	pthread_condattr_destroy(&ca);
	if (ret)
		goto err_watch;
	ret = -dcrfs_delta_init(fs, fs->delta_tmpdir, fs->delta_budget);
	if (ret)
		goto err_cond;
	return 0;

err_cond:
	pthread_cond_destroy(&fs->bg_cond);
err_watch:
	pthread_mutex_destroy(&fs->watch_lock);
err_backing_cv:
	pthread_cond_destroy(&fs->backing_cv);
err_backing:
	pthread_mutex_destroy(&fs->backing_lock);
err_bg_lock:
	pthread_mutex_destroy(&fs->bg_lock);
err_tag:
	pthread_mutex_destroy(&fs->tag_lock);
err_refresh:
	pthread_mutex_destroy(&fs->refresh_lock);
	return -ret;
}

void dcrfs_free_state(struct dcrfs *fs)
{
	dcrfs_delta_free(fs);
	for (size_t i = 0; i < fs->ntag_names; i++)
		free(fs->tag_names[i]);
	free(fs->tag_names);
	fs->tag_names = NULL;
	fs->ntag_names = fs->tag_names_cap = 0;
	pthread_cond_destroy(&fs->bg_cond);
	pthread_mutex_destroy(&fs->watch_lock);
	pthread_cond_destroy(&fs->backing_cv);
	pthread_mutex_destroy(&fs->backing_lock);
	pthread_mutex_destroy(&fs->bg_lock);
	pthread_mutex_destroy(&fs->tag_lock);
	pthread_mutex_destroy(&fs->refresh_lock);
}
