/* SPDX-License-Identifier: MIT */
/*
 * ops.c - the FUSE low-level operations of dcrfs. Each handler
 * resolves its inode once (dcrfs_ino_resolve, fs.h) and switches on
 * the kind; the cases live with their nodes: the root and /latest here,
 * the version trees in tree.c, /tags in tags.c, /.dcrfs in ctl.c (and
 * latestfile.c), /delta in delta.c. The background threads (store
 * polling, kernel cache invalidation, prefetch) are in bg.c; the
 * state's locks are made in state.c.
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
#include "handover.h"
#include "node.h"

/* The longest name statfs reports. */
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

void fs_stat_common(const struct dcrfs *fs, struct stat *st,
		    fuse_ino_t ino, mode_t mode, nlink_t nlink,
		    int64_t mtime_ns)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_mode = mode;
	st->st_nlink = nlink;
	st->st_uid = fs->cfg.uid;
	st->st_gid = fs->cfg.gid;
	st->st_blksize = 4096;
	ns_to_ts(mtime_ns, &st->st_mtim);
	st->st_atim = st->st_mtim;
	st->st_ctim = st->st_mtim;
}

/* Commit time of the newest version, or the mount time if none. */
int64_t fs_latest_ctime(struct dcrfs *fs, uint64_t latest)
{
	const struct dcr_version_info *vi;
	int64_t ns;

	if (latest && version_get(fs, latest, &vi) == 0) {
		ns = vi->ctime_ns;
		version_put(fs, vi);
		return ns;
	}
	return fs->cfg.mount_ns;
}

int fs_root_stat(struct dcrfs *fs, struct stat *st)
{
	uint64_t *vs = NULL;
	size_t n = 0;
	int ret = dcr_reader_versions(fs->r, &vs, &n);

	if (ret < 0)
		return ret;
	fs_stat_common(fs, st, DCRFS_INO_ROOT, S_IFDIR | 0555,
		       (nlink_t)(4 + n),
		       fs_latest_ctime(fs, n ? vs[n - 1] : 0));
	st->st_size = 4096;
	st->st_blocks = 8;
	free(vs);
	return 0;
}

void fs_symlink_stat(struct dcrfs *fs, struct stat *st, fuse_ino_t ino,
		     const char *target, uint64_t v)
{
	fs_stat_common(fs, st, ino, S_IFLNK | 0777, 1, fs_latest_ctime(fs, v));
	st->st_size = (off_t)strlen(target);
}

static int latest_stat(struct dcrfs *fs, struct stat *st)
{
	uint64_t latest = dcrfs_latest(fs);
	char target[32];

	if (latest == 0)
		return -ENOENT;
	snprintf(target, sizeof(target), "v%" PRIu64, latest);
	fs_symlink_stat(fs, st, DCRFS_INO_LATEST, target, latest);
	return 0;
}

/* ---------------------------------------------------------------- lookup */

/*
 * @gen: the tree of a version's entry (dcr_version_info.tree), else 0.
 * The inode number carries the tree already (fs.h); the generation says
 * it again for whoever looks at it (file handles).
 */
void fs_reply_entry(fuse_req_t req, const struct stat *st, double ttl,
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
		fs_reply_entry(req, &st, DCRFS_TTL_MUTABLE, 0);
		return;
	}
	if (strcmp(name, "tags") == 0) {
		fs_tags_stat(fs, &st);
		fs_reply_entry(req, &st, DCRFS_TTL_MUTABLE, 0);
		return;
	}
	if (strcmp(name, DCRFS_DELTA_DIR) == 0) {
		double ttl;

		ret = dcrfs_delta_stat(fs, DCRFS_INO_DELTA, &st, &ttl);
		if (ret < 0)
			goto err;
		fs_reply_entry(req, &st, ttl, 0);
		return;
	}
	if (strcmp(name, DCRFS_STATUS_DIR) == 0) {
		ret = fs_ctl_stat(fs, DCRFS_INO_STATUS_DIR, &st);
		if (ret < 0)
			goto err;
		fs_reply_entry(req, &st, DCRFS_TTL_MUTABLE, 0);
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
	fs_entry_stat(fs, vi, 0, &st);
	uint32_t tree = vi->tree;
	version_put(fs, vi);
	fs_reply_entry(req, &st, DCRFS_TTL_IMMUTABLE, tree);
	return;
err:
	fuse_reply_err(req, -ret);
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
	fs_reply_entry(req, &st, ttl, 0);
}

/*
 * Test hook (HACKING): DCRFS_TEST_REQ_DELAY_MS=N, each LOOKUP and each
 * READ of a version file waits N ms first, so that a kill -9 finds
 * requests in flight (tests/integration/restart.sh).
 */
static void test_req_delay(void)
{
#ifdef DCR_TEST_HOOKS
	const char *d = getenv("DCRFS_TEST_REQ_DELAY_MS");

	if (d)
		usleep((useconds_t)atoi(d) * 1000);
#endif
}

static void dcrfs_ll_lookup(fuse_req_t req, fuse_ino_t parent,
			    const char *name)
{
	struct dcrfs *fs = fs_of(req);
	struct dcrfs_node n;

	test_req_delay();

	dcrfs_ino_resolve(parent, &n);
	switch (n.kind) {
	case DCRFS_K_ROOT:
		root_lookup(req, fs, name);
		break;
	case DCRFS_K_TAGS:
		fs_tags_lookup(req, fs, name);
		break;
	case DCRFS_K_CTL_DIR:
		fs_ctl_lookup(req, fs, name);
		break;
	case DCRFS_K_DELTA_DIR:
	case DCRFS_K_DELTA_NODE:
		delta_lookup(req, fs, parent, name);
		break;
	case DCRFS_K_VERSION:
		fs_version_lookup(req, fs, n.v, n.tree, n.idx, name);
		break;
	default:
		fuse_reply_err(req, ENOTDIR);
		break;
	}
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
	struct dcrfs_node n;

	*ttl = DCRFS_TTL_MUTABLE;
	dcrfs_ino_resolve(ino, &n);
	switch (n.kind) {
	case DCRFS_K_ROOT:
		return fs_root_stat(fs, st);
	case DCRFS_K_LATEST:
		return latest_stat(fs, st);
	case DCRFS_K_TAGS:
		fs_tags_stat(fs, st);
		return 0;
	case DCRFS_K_CTL_DIR:
	case DCRFS_K_CTL_STATUS:
	case DCRFS_K_CTL_METRICS:
	case DCRFS_K_CTL_LATEST:
		*ttl = 0.0;
		return fs_ctl_stat(fs, ino, st);
	case DCRFS_K_DELTA_DIR:
	case DCRFS_K_DELTA_NODE:
		return dcrfs_delta_stat(fs, ino, st, ttl);
	case DCRFS_K_VERSION:
		*ttl = DCRFS_TTL_IMMUTABLE;
		return fs_version_stat(fs, &n, st);
	case DCRFS_K_TAG:
		return fs_tag_getattr(fs, &n, st);
	case DCRFS_K_NONE:
		break;
	}
	return -ENOENT;
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
	struct dcrfs_node n;
	char target[40];
	uint64_t v;

	dcrfs_ino_resolve(ino, &n);
	switch (n.kind) {
	case DCRFS_K_LATEST:
		v = dcrfs_latest(fs);
		if (v == 0) {
			fuse_reply_err(req, ENOENT);
			return;
		}
		snprintf(target, sizeof(target), "v%" PRIu64, v);
		fuse_reply_readlink(req, target);
		return;
	case DCRFS_K_TAG:
		fs_tag_readlink(req, fs, &n);
		return;
	default:
		fuse_reply_err(req, EINVAL); /* not a symlink */
		return;
	}
}

/* ------------------------------------------------------------ directories */

/* Append one entry; 1 if it did not fit (the listing stops there). In a
 * READDIRPLUS reply an entry given no @ttl (< 0) goes without
 * attributes: node id 0, which the kernel caches nothing of and looks
 * up on use. */
int fs_dirbuf_add_gen(struct dirbuf *db, const char *name,
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
		e.generation = gen; /* see fs_reply_entry */
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
int fs_dirbuf_add(struct dirbuf *db, const char *name,
		  const struct stat *st, double ttl, off_t next)
{
	return fs_dirbuf_add_gen(db, name, st, ttl, next, 0);
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
	ret = fs_root_stat(fs, &st);
	if (ret < 0)
		goto out;
	if (off < 1 && fs_dirbuf_add(db, ".", &st, DCRFS_TTL_MUTABLE, 1))
		goto out;
	if (off < 2 && fs_dirbuf_add(db, "..", &st, DCRFS_TTL_MUTABLE, 2))
		goto out;
	if (off < 3 && latest_stat(fs, &st) == 0 &&
	    fs_dirbuf_add(db, "latest", &st, DCRFS_TTL_MUTABLE, 3))
		goto out;
	if (off < 4) {
		fs_tags_stat(fs, &st);
		if (fs_dirbuf_add(db, "tags", &st, DCRFS_TTL_MUTABLE, 4))
			goto out;
	}
	if (off < 5) {
		double ttl;

		if (dcrfs_delta_stat(fs, DCRFS_INO_DELTA, &st, &ttl) == 0 &&
		    fs_dirbuf_add(db, DCRFS_DELTA_DIR, &st, ttl, 5))
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
		fs_entry_stat(fs, vi, 0, &st);
		uint32_t tree = vi->tree;
		version_put(fs, vi);
		if (fs_dirbuf_add_gen(db, name, &st, DCRFS_TTL_IMMUTABLE,
				      (off_t)(v + 5), tree))
			break;
	}
out:
	free(vs);
	return ret;
}

/* dcrfs_delta_emit_fn into a dirbuf; entries without @attrs go without
 * attributes (fs_dirbuf_add_gen). */
static int delta_emit(void *ctx, const char *name, const struct stat *st,
		      off_t next, bool attrs)
{
	return fs_dirbuf_add(ctx, name, st, attrs ? DCRFS_TTL_MUTABLE : -1.0,
			     next);
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
		       off_t off, int plus)
{
	struct dcrfs *fs = fs_of(req);
	struct dcrfs_node n;
	struct dirbuf db;
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
	dcrfs_ino_resolve(ino, &n);
	switch (n.kind) {
	case DCRFS_K_ROOT:
		ret = root_readdir(&db, fs, off);
		break;
	case DCRFS_K_TAGS:
		ret = fs_tags_readdir(&db, fs, off);
		break;
	case DCRFS_K_CTL_DIR:
		ret = fs_ctl_readdir(&db, fs, off);
		break;
	case DCRFS_K_DELTA_DIR:
	case DCRFS_K_DELTA_NODE:
		ret = dcrfs_delta_list(fs, ino, off, delta_emit, &db);
		break;
	case DCRFS_K_VERSION:
		ret = fs_version_readdir(&db, fs, n.v, n.tree, n.idx, off);
		break;
	default:
		ret = -ENOTDIR;
		break;
	}
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
	struct dcrfs_node n;
	struct stat st;
	uint8_t type;
	double ttl;
	int ret;

	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	dcrfs_ino_resolve(ino, &n);
	switch (n.kind) {
	case DCRFS_K_ROOT:
	case DCRFS_K_TAGS:
	case DCRFS_K_CTL_DIR:
	case DCRFS_K_DELTA_DIR:
		fuse_reply_open(req, fi);
		return;
	case DCRFS_K_DELTA_NODE:
		ret = dcrfs_delta_stat(fs, ino, &st, &ttl);
		if (ret == 0 && !S_ISDIR(st.st_mode))
			ret = -ENOTDIR;
		if (ret < 0)
			fuse_reply_err(req, -ret);
		else
			fuse_reply_open(req, fi);
		return;
	case DCRFS_K_VERSION:
		break;
	default:
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	ret = fs_tree_entry_type(fs, n.v, n.tree, n.idx, &type);
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

static void dcrfs_ll_open(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	struct dcrfs *fs = fs_of(req);
	struct dcrfs_node n;
	uint8_t type;
	uint64_t fh;
	int ret;

	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	dcrfs_ino_resolve(ino, &n);
	switch (n.kind) {
	case DCRFS_K_CTL_STATUS:
	case DCRFS_K_CTL_METRICS:
		fs_ctl_open(req, fs, n.kind, fi);
		return;
	case DCRFS_K_CTL_LATEST:
		dcrfs_latestfile_open(req, fs, fi);
		return;
	case DCRFS_K_DELTA_DIR:
	case DCRFS_K_DELTA_NODE:
		ret = dcrfs_delta_open(fs, ino, &fh);
		if (ret < 0) {
			fuse_reply_err(req, -ret);
			return;
		}
		fi->fh = fh;
		fi->noflush = 1;
		fi->direct_io = 0;
		fi->keep_cache = 1; /* a node's bytes never change */
		if ((ret > 0 ? dcrfs_pt_open_reply(&fs->bk.pt, req, fi, ret) :
			       fuse_reply_open(req, fi)) != 0)
			dcrfs_delta_release(fs, fh);
		return;
	case DCRFS_K_ROOT:
	case DCRFS_K_TAGS:
	case DCRFS_K_CTL_DIR:
		fuse_reply_err(req, EISDIR);
		return;
	case DCRFS_K_VERSION:
		break;
	default:
		fuse_reply_err(req, ELOOP);
		return;
	}
	/* The tree of the inode opened (its number carries it, fs.h), not
	 * the version's current one: an inode the kernel kept from a tree
	 * that changed in the store (its pages too, keep_cache) fails
	 * ESTALE here, and its reads below, instead of mixing in the new
	 * tree's bytes. */
	ret = fs_tree_entry_type(fs, n.v, n.tree, n.idx, &type);
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
	ret = dcrfs_backing_open(fs, ino, n.v, n.tree, n.idx);
	if (ret < 0) {
		fuse_reply_err(req, -ret);
		return;
	}
	if (ret > 0) {
		fi->fh |= DCRFS_FH_PASSTHROUGH;
		if (dcrfs_pt_open_reply(&fs->bk.pt, req, fi, ret) != 0) {
			dcrfs_backing_release(fs, ino); /* no RELEASE comes */
			dcrfs_ho_hold_update(fs);
		} else {
			atomic_fetch_add_explicit(&fs->bk.pt.opens, 1,
						  memory_order_relaxed);
		}
		return;
	}
	/* Immutable: pages survive close and reopen; never direct_io. */
	fi->keep_cache = 1;
	if (fuse_reply_open(req, fi) != 0) {
		dcrfs_backing_release(fs, ino);
		dcrfs_ho_hold_update(fs);
	} else {
		atomic_fetch_add_explicit(&fs->bk.pt.normal_opens, 1,
					  memory_order_relaxed);
	}
}

static void dcrfs_ll_read(fuse_req_t req, fuse_ino_t ino, size_t size,
			  off_t off, struct fuse_file_info *fi)
{
	struct dcrfs *fs = fs_of(req);
	struct dcrfs_node node;
	ssize_t n;
	void *buf;

	dcrfs_ino_resolve(ino, &node);
	switch (node.kind) {
	case DCRFS_K_CTL_STATUS:
	case DCRFS_K_CTL_METRICS:
		fs_ctl_read(req, size, off, fi);
		return;
	case DCRFS_K_CTL_LATEST:
		dcrfs_latestfile_read(req, fs, size, off, fi);
		return;
	case DCRFS_K_DELTA_DIR:
	case DCRFS_K_DELTA_NODE:
		buf = dcr_thread_buf(DCR_TBUF_REPLY,
				     DCR_MAX(size, (size_t)DCRFS_READ_MAX));
		n = buf ? dcrfs_delta_read(fs, fi->fh, buf, size, off) : -ENOMEM;
		if (n < 0)
			fuse_reply_err(req, (int)-n);
		else
			fuse_reply_buf(req, buf, (size_t)n);
		return;
	case DCRFS_K_VERSION:
		break;
	default:
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
	test_req_delay();
	if (fi->fh & DCRFS_FH_PASSTHROUGH) /* the kernel should serve these */
		atomic_fetch_add_explicit(&fs->bk.pt.reads_seen, 1,
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
	n = dcr_reader_read_tree(fs->r, node.v, node.tree, node.idx,
				 (uint64_t)off, buf, size);
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
	struct dcrfs_node n;

	dcrfs_ino_resolve(ino, &n);
	switch (n.kind) {
	case DCRFS_K_CTL_STATUS:
	case DCRFS_K_CTL_METRICS:
		fs_ctl_release(fi);
		break;
	case DCRFS_K_CTL_LATEST:
		dcrfs_latestfile_release(fs_of(req), fi, NULL);
		break;
	case DCRFS_K_DELTA_DIR:
	case DCRFS_K_DELTA_NODE:
		dcrfs_delta_release(fs_of(req), fi->fh);
		break;
	default: {
		struct dcrfs *fs = fs_of(req); /* @req is gone after its reply */

		dcrfs_backing_release(fs, ino);
		fuse_reply_err(req, 0);
		/* after the reply: a crash before it gets the RELEASE sent
		 * again, to a count the holder has not lowered yet */
		dcrfs_ho_hold_update(fs);
		return;
	}
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
	if (fs->cfg.max_read)
		conn->max_read = fs->cfg.max_read;
	/*
	 * The kernel lowers the bdi's read_ahead_kb to this, and main.c
	 * sets read_ahead_kb to -o readahead right after mounting (before
	 * this reply): both say what was asked, or that stays capped here.
	 * 0 (-o readahead=0): the kernel's default stays.
	 */
	if (fs->cfg.read_ahead_kb)
		conn->max_readahead = fs->cfg.read_ahead_kb * 1024;
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
	if (fs->bk.pt.devfd >= 0 && atomic_load(&fs->bk.pt.offered) &&
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
