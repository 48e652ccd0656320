/* SPDX-License-Identifier: MIT */
/*
 * delta.c - the /delta tree of a mount (issue 21): per version N with a
 * parent, /delta/vN holds each safetensors file of vN as its delta view
 * from the parent it was committed against (read/dview.h); /delta/vM..vN
 * (looked up, never listed) the view from any earlier vM of N's lineage,
 * or, with M > N, a rollback span: the view that takes tensors of vM
 * back to vN (N in M's lineage; the same format with from and to
 * swapped). Lineage is the committed one (dcr_version_brief.cparent):
 * a compaction that rebases vN's encoding on an older version changes
 * neither what delta/vN means nor which spans exist; a span no record
 * of the decoder covers is built by comparison.
 *
 * Inodes (fs.h): /delta is DCRFS_INO_DELTA; every other node is
 * DCRFS_INO_DVIEW_BASE + slot, a slot of the node table assigned on
 * first sight to (from version, its tree, to version, its tree, entry of
 * the to-tree) and never reused while mounted. A node of a tree its
 * version no longer has answers ESTALE.
 *
 * Views: a file's view is built at its lookup (so stat gives the exact
 * size before any read), or when a prefetch of its version ended
 * (dcrfs_delta_ready: from the reader's records of the changes, issue
 * 32), into an unlinked file in the cache directory,
 * and kept while its total stays within the budget (an eighth of the
 * chunk cache's), least recently used first out; open files keep
 * theirs. An evicted view is rebuilt on its next open: the bytes are a
 * pure function of the two manifests, so the size recorded at the first
 * build is checked against every rebuild.
 *
 * Opens: a built view is a local file whose bytes were checked against
 * what the build produced (read/dview.h) and are never written again,
 * so, like a version file whole and proven in the cache (backing.c), it
 * is served by FUSE passthrough where the mount has it: the kernel
 * reads the view's file itself, and no READ reaches the daemon (four
 * ready shards read at ~250 MB/s through READs of 128 KiB here, bound by
 * the round trips, not the daemon's CPU). The kernel's rules
 * (notes/fuse-passthrough.md): one backing file per inode, never mixed
 * with normal opens; so the first open of a node picks the file and the
 * mode, and later opens follow them while any stays open (even when the
 * cache evicted that file: its opens hold it). The backing id lives as
 * long as the file. Without passthrough, reads are served here, each
 * 64 KiB block checked (dcr_dview_pread).
 *
 * Locks: delta_lock (the table, the view LRU, the counters, the opens)
 * is taken for short spells only; a node's build_lock serialises its
 * builds and opens and is taken before delta_lock, never while holding
 * it.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "dview.h"
#include "fs.h"
#include "handover.h"

/* A built view: its bytes in an unlinked file. */
struct dview_file {
	int fd;
	uint64_t size;
	struct dcr_dview_sums sums; /* check values of its blocks */
	bool bad;             /* a read failed its check: dropped; under lock */
	int pt_id;            /* > 0: its passthrough backing id, held until
			       * it is freed (set under build_lock) */
	unsigned refs;        /* opens + the cache's own (1 while cached) */
	struct dview_node *node;
	struct dview_file *older, *newer; /* LRU, while cached */
};

struct dview_node {
	uint64_t from, to;
	uint32_t ftree, ttree;
	uint32_t idx;         /* entry of to's tree; 0: the directory */
	uint32_t slot;
	bool sized;           /* size known (a view was built once) */
	uint64_t size;
	pthread_mutex_t build_lock;
	struct dview_file *file; /* cached view, under delta_lock */
	/* Open handles of the node, the file they read and whether through
	 * passthrough (see the top of this file); under delta_lock, changed
	 * under build_lock too. */
	unsigned opens;
	struct dview_file *open_file;
	bool open_pt;
};

struct dcrfs_delta {
	pthread_mutex_t lock;
	struct dview_node **slots; /* by slot */
	struct dview_node **sorted; /* by key */
	size_t n, cap;
	struct dview_file *lru_old, *lru_new;
	uint64_t cached_bytes, budget;
	uint64_t built, built_bytes, evicted, ready;
	uint64_t compared, recorded, skipped;
	uint64_t pt_opens, normal_opens, reads;
	const char *tmpdir;
	struct dcrfs_pt *pt;
};

static int key_cmp(const struct dview_node *a, uint64_t from, uint32_t ftree,
		   uint64_t to, uint32_t ttree, uint32_t idx)
{
#define C(x, y) if ((x) != (y)) return (x) < (y) ? -1 : 1
	C(a->to, to);
	C(a->ttree, ttree);
	C(a->from, from);
	C(a->ftree, ftree);
	C(a->idx, idx);
#undef C
	return 0;
}

int dcrfs_delta_init(struct dcrfs *fs, const char *tmpdir, uint64_t budget)
{
	struct dcrfs_delta *d = calloc(1, sizeof(*d));
	int ret;

	if (!d)
		return -ENOMEM;
	ret = pthread_mutex_init(&d->lock, NULL);
	if (ret) {
		free(d);
		return -ret;
	}
	d->tmpdir = tmpdir;
	d->budget = budget;
	d->pt = &fs->bk.pt;
	fs->dv.tab = d;
	return 0;
}

void dcrfs_delta_free(struct dcrfs *fs)
{
	struct dcrfs_delta *d = fs->dv.tab;

	if (!d)
		return;
	for (size_t i = 0; i < d->n; i++) {
		struct dview_node *nd = d->slots[i];

		if (nd->file) {
			/* backing ids went with the session's connection */
			close(nd->file->fd);
			dcr_dview_sums_free(&nd->file->sums);
			free(nd->file);
		}
		pthread_mutex_destroy(&nd->build_lock);
		free(nd);
	}
	free(d->slots);
	free(d->sorted);
	pthread_mutex_destroy(&d->lock);
	free(d);
	fs->dv.tab = NULL;
}

void dcrfs_delta_counts(struct dcrfs *fs, struct dcrfs_delta_counts *c)
{
	struct dcrfs_delta *d = fs->dv.tab;
	struct dcr_dvrec *rec = dcr_reader_dvrec(fs->r);

	memset(c, 0, sizeof(*c));
	pthread_mutex_lock(&d->lock);
	c->built = d->built;
	c->built_bytes = d->built_bytes;
	c->cached_bytes = d->cached_bytes;
	c->ready = d->ready;
	c->compared = d->compared;
	c->recorded = d->recorded;
	c->skipped = d->skipped;
	c->pt_opens = d->pt_opens;
	c->normal_opens = d->normal_opens;
	c->reads = d->reads;
	pthread_mutex_unlock(&d->lock);
	if (rec)
		dcr_dvrec_stats(rec, &c->rec);
	c->ahead = dcr_dvrec_active(rec);
}

/* The node of the key, made (a new slot) if new. 0 or -errno. */
static int node_get(struct dcrfs *fs, uint64_t from, uint32_t ftree,
		    uint64_t to, uint32_t ttree, uint32_t idx,
		    struct dview_node **out)
{
	struct dcrfs_delta *d = fs->dv.tab;
	size_t lo = 0, hi;
	int ret = 0;

	pthread_mutex_lock(&d->lock);
	hi = d->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = key_cmp(d->sorted[mid], from, ftree, to, ttree, idx);

		if (c == 0) {
			*out = d->sorted[mid];
			goto out;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (d->n >= DCRFS_DVIEW_SLOTS) {
		dcr_err("delta view: more than %u nodes looked up while "
			"mounted: no more are served (ENOSPC)",
			(unsigned)DCRFS_DVIEW_SLOTS);
		ret = -ENOSPC;
		goto out;
	}
	if (d->n == d->cap) {
		size_t cap = d->cap ? 2 * d->cap : 64;
		struct dview_node **a = realloc(d->slots, cap * sizeof(*a));

		if (!a) {
			ret = -ENOMEM;
			goto out;
		}
		d->slots = a;
		a = realloc(d->sorted, cap * sizeof(*a));
		if (!a) {
			ret = -ENOMEM;
			goto out;
		}
		d->sorted = a;
		d->cap = cap;
	}
	struct dview_node *nd = calloc(1, sizeof(*nd));
	if (!nd || pthread_mutex_init(&nd->build_lock, NULL)) {
		free(nd);
		ret = -ENOMEM;
		goto out;
	}
	nd->from = from;
	nd->ftree = ftree;
	nd->to = to;
	nd->ttree = ttree;
	nd->idx = idx;
	nd->slot = (uint32_t)d->n;
	d->slots[d->n] = nd;
	memmove(&d->sorted[lo + 1], &d->sorted[lo],
		(d->n - lo) * sizeof(*d->sorted));
	d->sorted[lo] = nd;
	d->n++;
	*out = nd;
	pthread_mutex_unlock(&d->lock);
	dcrfs_ho_hold_update(fs); /* a restart must know the new slot */
	return 0;
out:
	pthread_mutex_unlock(&d->lock);
	return ret;
}

static fuse_ino_t node_ino(const struct dview_node *nd)
{
	return DCRFS_INO_DVIEW_BASE + nd->slot;
}

/* The node of inode @ino, or NULL. */
static struct dview_node *node_of(struct dcrfs *fs, fuse_ino_t ino)
{
	struct dcrfs_delta *d = fs->dv.tab;
	struct dview_node *nd = NULL;

	if (ino < DCRFS_INO_DVIEW_BASE || ino > DCRFS_INO_DVIEW_MAX)
		return NULL;
	pthread_mutex_lock(&d->lock);
	if (ino - DCRFS_INO_DVIEW_BASE < d->n)
		nd = d->slots[ino - DCRFS_INO_DVIEW_BASE];
	pthread_mutex_unlock(&d->lock);
	return nd;
}

/* ---------------------------------------------------------- the views */

/* Drop @vf from the LRU (under the lock); the cache's reference goes. */
static void lru_unlink(struct dcrfs_delta *d, struct dview_file *vf)
{
	if (vf->older)
		vf->older->newer = vf->newer;
	else
		d->lru_old = vf->newer;
	if (vf->newer)
		vf->newer->older = vf->older;
	else
		d->lru_new = vf->older;
	vf->older = vf->newer = NULL;
	d->cached_bytes -= vf->size;
	vf->node->file = NULL;
}

static void lru_push(struct dcrfs_delta *d, struct dview_file *vf)
{
	vf->older = d->lru_new;
	vf->newer = NULL;
	if (d->lru_new)
		d->lru_new->newer = vf;
	else
		d->lru_old = vf;
	d->lru_new = vf;
	d->cached_bytes += vf->size;
	vf->node->file = vf;
}

/* One reference less (under the lock); the last closes the file and
 * gives its backing id back (no open holds it then). */
static void file_unref_locked(struct dcrfs_delta *d, struct dview_file *vf)
{
	if (--vf->refs == 0) {
		if (vf->pt_id > 0)
			dcrfs_pt_unregister(d->pt, vf->pt_id);
		close(vf->fd);
		dcr_dview_sums_free(&vf->sums);
		free(vf);
	}
}

/* Evict the least recently used views past the budget (under lock). */
static void trim_locked(struct dcrfs_delta *d)
{
	struct dview_file *vf = d->lru_old;

	while (vf && d->cached_bytes > d->budget) {
		struct dview_file *next = vf->newer;

		lru_unlink(d, vf);
		d->evicted++;
		file_unref_locked(d, vf);
		vf = next;
	}
}

/* Whether @nd's size is known, and it. */
static bool node_size(struct dcrfs *fs, struct dview_node *nd, uint64_t *size)
{
	bool sized;

	pthread_mutex_lock(&fs->dv.tab->lock);
	sized = nd->sized;
	*size = nd->size;
	pthread_mutex_unlock(&fs->dv.tab->lock);
	return sized;
}

/* Whether the versions still have the trees @nd names. */
static int node_check(struct dcrfs *fs, const struct dview_node *nd)
{
	const struct dcr_version_info *vi;
	int ret = version_get_tree(fs, nd->to, nd->ttree, &vi);

	if (ret < 0)
		return ret;
	version_put(fs, vi);
	ret = version_get_tree(fs, nd->from, nd->ftree, &vi);
	if (ret < 0)
		return ret == -ENOENT ? -ESTALE : ret;
	version_put(fs, vi);
	return 0;
}

/* The view of file node @nd, built if not cached (then *@built, if
 * given, is set), with a reference for the caller (file_put); the
 * caller holds @nd's build_lock. 0 or -errno. */
static int view_get_locked(struct dcrfs *fs, struct dview_node *nd,
			   struct dview_file **out, bool *built)
{
	struct dcrfs_delta *d = fs->dv.tab;
	struct dcr_dview_side a = { nd->from, nd->ftree }, b = { nd->to, nd->ttree };
	struct dcr_dview_info info;
	struct dcr_dview_sums sums;
	struct dview_file *vf;
	uint64_t size;
	int fd, ret;

	pthread_mutex_lock(&d->lock);
	vf = nd->file;
	if (vf) {
		vf->refs++;
		/* The most recently used. */
		lru_unlink(d, vf);
		lru_push(d, vf);
	}
	pthread_mutex_unlock(&d->lock);
	if (vf) {
		*out = vf;
		return 0;
	}
	fd = open(d->tmpdir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0) {
		ret = -errno;
		dcr_err("delta view v%" PRIu64 "..v%" PRIu64 ": cannot make a "
			"file in %s: %s", nd->from, nd->to, d->tmpdir,
			strerror(-ret));
		return ret;
	}
	ret = dcr_dview_build(fs->r, a, b, nd->idx, d->tmpdir, fd, &info, &sums);
	if (ret < 0) {
		if (ret != -EBADMSG && ret != -ESTALE)
			dcr_err("delta view v%" PRIu64 "..v%" PRIu64 " entry %"
				PRIu32 ": %s", nd->from, nd->to, nd->idx,
				strerror(-ret));
		goto err_close;
	}
	if (node_size(fs, nd, &size) && size != info.size) {
		/* Never happens: the bytes are a function of the manifests. */
		dcr_err("delta view v%" PRIu64 "..v%" PRIu64 " entry %" PRIu32
			": rebuilt with %" PRIu64 " bytes, not %" PRIu64 " (EIO)",
			nd->from, nd->to, nd->idx, info.size, size);
		ret = -EIO;
		goto err_sums;
	}
	vf = calloc(1, sizeof(*vf));
	if (!vf) {
		ret = -ENOMEM;
		goto err_sums;
	}
	vf->fd = fd;
	vf->sums = sums;
	vf->size = info.size;
	vf->node = nd;
	vf->refs = 2; /* the caller's and the cache's */
	pthread_mutex_lock(&d->lock);
	nd->size = info.size;
	nd->sized = true;
	d->built++;
	d->built_bytes += info.size;
	d->compared += info.compared;
	d->recorded += info.recorded;
	d->skipped += info.skipped;
	if (built)
		*built = true;
	lru_push(d, vf);
	trim_locked(d);
	pthread_mutex_unlock(&d->lock);
	*out = vf;
	return 0;

err_sums:
	dcr_dview_sums_free(&sums);
err_close:
	close(fd);
	return ret;
}

/* view_get_locked, taking @nd's build_lock. */
static int view_get(struct dcrfs *fs, struct dview_node *nd,
		    struct dview_file **out, bool *built)
{
	int ret;

	pthread_mutex_lock(&nd->build_lock);
	ret = view_get_locked(fs, nd, out, built);
	pthread_mutex_unlock(&nd->build_lock);
	return ret;
}

/* @vf's local file does not hold what was built (at @bad_off, error
 * @err): never served again; dropped from the cache (the next open
 * builds the view again) and logged once. */
static void file_drop(struct dcrfs *fs, struct dview_file *vf,
		      uint64_t bad_off, int err)
{
	struct dcrfs_delta *d = fs->dv.tab;
	struct dview_node *nd = vf->node;
	bool first;

	pthread_mutex_lock(&d->lock);
	first = !vf->bad;
	vf->bad = true;
	if (nd->file == vf) {
		lru_unlink(d, vf);
		file_unref_locked(d, vf); /* the cache's; the caller's stays */
	}
	pthread_mutex_unlock(&d->lock);
	if (first)
		dcr_err("delta view v%" PRIu64 "..v%" PRIu64 " entry %" PRIu32
			": bytes at %" PRIu64 " of its local file differ from what "
			"was built (%s): dropped, rebuilt at the next open",
			nd->from, nd->to, nd->idx, bad_off, strerror(-err));
}

static void file_put(struct dcrfs *fs, struct dview_file *vf)
{
	pthread_mutex_lock(&fs->dv.tab->lock);
	file_unref_locked(fs->dv.tab, vf);
	pthread_mutex_unlock(&fs->dv.tab->lock);
}

/* ---------------------------------------------------------- attributes */

static void dir_stat(struct dcrfs *fs, struct stat *st, fuse_ino_t ino,
		     int64_t mtime_ns)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_mode = S_IFDIR | 0555;
	st->st_nlink = 2;
	st->st_uid = fs->cfg.uid;
	st->st_gid = fs->cfg.gid;
	st->st_size = 4096;
	st->st_blocks = 8;
	st->st_blksize = 4096;
	st->st_mtim.tv_sec = mtime_ns / 1000000000LL;
	st->st_mtim.tv_nsec = mtime_ns % 1000000000LL;
	st->st_ctim = st->st_atim = st->st_mtim;
}

/* Attributes of @nd (a file's view built if its size is not known). */
static int node_stat(struct dcrfs *fs, struct dview_node *nd, struct stat *st)
{
	const struct dcr_version_info *vi;
	struct dview_file *vf;
	uint64_t size;
	int64_t mtime;
	bool dir;
	int ret;

	if (nd->idx == 0) {
		/* a /delta/vN or vM..vN directory: no tree needed */
		struct dcr_version_brief b;

		ret = dcr_reader_version_brief(fs->r, nd->to, &b);
		if (ret < 0)
			return ret;
		if (b.tree != nd->ttree)
			return -ESTALE;
		dir_stat(fs, st, node_ino(nd), b.ctime_ns);
		return 0;
	}
	ret = version_get_tree(fs, nd->to, nd->ttree, &vi);
	if (ret < 0)
		return ret;
	if (nd->idx >= vi->nentries) {
		version_put(fs, vi);
		return -ENOENT;
	}
	dir = vi->entries[nd->idx].type == DCR_FT_DIR;
	mtime = nd->idx ? vi->entries[nd->idx].mtime_ns : vi->ctime_ns;
	version_put(fs, vi);
	if (dir) {
		dir_stat(fs, st, node_ino(nd), mtime);
		return 0;
	}
	ret = node_check(fs, nd);
	if (ret < 0)
		return ret;
	if (!node_size(fs, nd, &size)) {
		ret = view_get(fs, nd, &vf, NULL);
		if (ret < 0)
			return ret;
		size = vf->size;
		file_put(fs, vf);
	}
	dir_stat(fs, st, node_ino(nd), mtime);
	st->st_mode = S_IFREG | 0444;
	st->st_nlink = 1;
	st->st_size = (off_t)size;
	st->st_blocks = (blkcnt_t)((size + 511) / 512);
	return 0;
}

int dcrfs_delta_stat(struct dcrfs *fs, fuse_ino_t ino, struct stat *st,
		     double *ttl)
{
	struct dview_node *nd;

	*ttl = DCRFS_TTL_MUTABLE;
	if (ino == DCRFS_INO_DELTA) {
		dir_stat(fs, st, ino, fs->cfg.mount_ns);
		return 0;
	}
	nd = node_of(fs, ino);
	if (!nd)
		return -ENOENT;
	*ttl = DCRFS_TTL_IMMUTABLE;
	return node_stat(fs, nd, st);
}

/* ---------------------------------------------------------- lookup */

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/* Whether directory @dir of @vi holds a *.safetensors file below it. */
static bool dir_has_st(const struct dcr_version_info *vi, uint32_t dir,
		       unsigned depth)
{
	if (depth > 256)
		return false;
	for (uint32_t c = vi->entries[dir].first_child; c < vi->nentries;
	     c = vi->entries[c].next_sibling) {
		const struct dcr_entry *e = &vi->entries[c];

		if (e->type == DCR_FT_REG && ends_with(e->name, DCR_DVIEW_SUFFIX))
			return true;
		if (e->type == DCR_FT_DIR && dir_has_st(vi, c, depth + 1))
			return true;
	}
	return false;
}

/* Parse "vN" into @v. */
static bool parse_v(const char *s, size_t n, uint64_t *v)
{
	uint64_t x = 0;

	if (n < 2 || s[0] != 'v' || s[1] < '1' || s[1] > '9')
		return false;
	for (size_t i = 1; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		x = x * 10 + (uint64_t)(s[i] - '0');
		if (x > DCR_VERSION_MAX)
			return false;
	}
	*v = x;
	return true;
}

/* Whether @m is in @n's lineage (an ancestor by the parents each was
 * committed against, whatever compaction rebased its encoding on; past
 * a committed parent gc dropped, by the encoding's parent, which is an
 * ancestor the store keeps). 0, -ENOENT. */
static int in_lineage(struct dcrfs *fs, uint64_t m, uint64_t n)
{
	struct dcr_version_brief b;
	uint64_t v = n;

	while (v > m) {
		if (dcr_reader_version_brief(fs->r, v, &b) < 0)
			return -ENOENT;
		uint64_t p = b.cparent;
		struct dcr_version_brief bp;

		if (p && p != b.parent && p > m &&
		    dcr_reader_version_brief(fs->r, p, &bp) < 0)
			p = b.parent; /* dropped: its lineage goes on below */
		if (p == 0 || p >= v)
			return -ENOENT;
		v = p;
	}
	return v == m ? 0 : -ENOENT;
}

/* The top node of /delta/@name: "vN" (from the parent N was committed
 * against) or "vM..vN"
 * (from M to N: forward when M < N, a rollback span when M > N). */
static int top_node(struct dcrfs *fs, const char *name, struct dview_node **out)
{
	struct dcr_version_brief bn, bm;
	const int64_t since = dcr_mono_ns();
	const char *dots = strstr(name, "..");
	uint64_t m = 0, n;
	int ret;

	if (dots) {
		if (!parse_v(name, (size_t)(dots - name), &m) ||
		    !parse_v(dots + 2, strlen(dots + 2), &n) || m == n)
			return -ENOENT;
	} else if (!parse_v(name, strlen(name), &n)) {
		return -ENOENT;
	}
	/* Parents and tree numbers only: no tree is loaded to name a
	 * node (a listing of /delta names one per version). */
	if (n > DCR_VERSION_MAX)
		return -ENOENT;
	ret = dcr_reader_version_brief(fs->r, n, &bn);
	if (ret == -ENOENT && n > dcr_reader_latest(fs->r) &&
	    fs_refresh(fs, 0, since) == 0)
		ret = dcr_reader_version_brief(fs->r, n, &bn);
	if (ret < 0)
		return ret;
	if (!dots)
		m = bn.cparent; /* as committed, not as encoded */
	if (m == 0)
		return -ENOENT; /* no parent: no /delta/vN */
	/* A forward span needs M among N's ancestors; a rollback span
	 * (M > N: the view that takes tensors of vM back to vN) needs N
	 * among M's. */
	ret = m < n ? in_lineage(fs, m, n) : in_lineage(fs, n, m);
	if (ret < 0)
		return ret;
	ret = dcr_reader_version_brief(fs->r, m, &bm);
	if (ret == -ENOENT && m > dcr_reader_latest(fs->r) &&
	    fs_refresh(fs, 0, since) == 0)
		ret = dcr_reader_version_brief(fs->r, m, &bm);
	if (ret < 0)
		return ret;
	if (bn.tree > DCRFS_TREE_MAX || bm.tree > DCRFS_TREE_MAX)
		return -EOVERFLOW; /* as version_get says, when a tree loads */
	return node_get(fs, m, bm.tree, n, bn.tree, 0, out);
}

/* The child @name of directory node @nd: a directory with safetensors
 * files below it, or a file of the view. -ENOENT if none. */
static int child_node(struct dcrfs *fs, struct dview_node *nd,
		      const char *name, struct dview_node **out)
{
	const struct dcr_version_info *vi;
	uint32_t c, found = UINT32_MAX;
	bool file = false;
	int ret = version_get_tree(fs, nd->to, nd->ttree, &vi);

	if (ret < 0)
		return ret;
	if (nd->idx >= vi->nentries || vi->entries[nd->idx].type != DCR_FT_DIR) {
		version_put(fs, vi);
		return -ENOTDIR;
	}
	for (c = vi->entries[nd->idx].first_child; c < vi->nentries;
	     c = vi->entries[c].next_sibling) {
		const struct dcr_entry *e = &vi->entries[c];

		if (strcmp(e->name, name))
			continue;
		if (e->type == DCR_FT_DIR && dir_has_st(vi, c, 0))
			found = c;
		else if (e->type == DCR_FT_REG && ends_with(e->name, DCR_DVIEW_SUFFIX)) {
			found = c;
			file = true;
		}
		break;
	}
	version_put(fs, vi);
	if (found == UINT32_MAX)
		return -ENOENT;
	if (file) {
		ret = dcr_dview_probe(fs->r, nd->to, nd->ttree, found);
		if (ret == -EBADMSG)
			return -ENOENT;
		if (ret < 0)
			return ret;
	}
	return node_get(fs, nd->from, nd->ftree, nd->to, nd->ttree, found, out);
}

int dcrfs_delta_lookup(struct dcrfs *fs, fuse_ino_t parent, const char *name,
		       struct stat *st, double *ttl)
{
	struct dview_node *nd, *child;
	int ret;

	if (parent == DCRFS_INO_DELTA) {
		ret = top_node(fs, name, &child);
		/* Short: the version may change in the store (another
		 * tree, another node). */
		*ttl = DCRFS_TTL_MUTABLE;
	} else {
		nd = node_of(fs, parent);
		if (!nd)
			return -ENOENT;
		ret = node_check(fs, nd);
		if (ret == 0)
			ret = child_node(fs, nd, name, &child);
		*ttl = DCRFS_TTL_IMMUTABLE;
	}
	if (ret < 0)
		return ret;
	return node_stat(fs, child, st);
}

/* ---------------------------------------------------------- listing */

int dcrfs_delta_list(struct dcrfs *fs, fuse_ino_t ino, off_t off,
		     dcrfs_delta_emit_fn emit, void *ctx)
{
	const struct dcr_version_info *vi;
	struct dview_node *nd;
	struct stat st;
	int ret;

	if (ino == DCRFS_INO_DELTA) {
		/* Offsets: 1 ".", 2 "..", v + 2 after "vN". */
		uint64_t *vs = NULL;
		size_t n = 0;

		dir_stat(fs, &st, ino, fs->cfg.mount_ns);
		if (off < 1 && emit(ctx, ".", &st, 1, true))
			return 0;
		if (off < 2 && emit(ctx, "..", &st, 2, false))
			return 0;
		ret = dcr_reader_versions(fs->r, &vs, &n);
		if (ret < 0)
			return ret;
		for (size_t i = 0; i < n; i++) {
			char name[32];

			struct dcr_version_brief b;

			if ((off_t)(vs[i] + 2) <= off ||
			    dcr_reader_version_brief(fs->r, vs[i], &b) < 0 || !b.cparent)
				continue;
			snprintf(name, sizeof(name), "v%" PRIu64, vs[i]);
			if (top_node(fs, name, &nd) < 0)
				continue;
			if (node_stat(fs, nd, &st) < 0)
				continue;
			if (emit(ctx, name, &st, (off_t)(vs[i] + 2), true))
				break;
		}
		free(vs);
		return 0;
	}
	nd = node_of(fs, ino);
	if (!nd)
		return -ENOENT;
	ret = node_check(fs, nd);
	if (ret < 0)
		return ret;
	ret = node_stat(fs, nd, &st);
	if (ret < 0)
		return ret;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	/* Offsets: 1 ".", 2 "..", c + 3 after child entry c. */
	if (off < 1 && emit(ctx, ".", &st, 1, true))
		return 0;
	if (off < 2 && emit(ctx, "..", &st, 2, false))
		return 0;
	ret = version_get_tree(fs, nd->to, nd->ttree, &vi);
	if (ret < 0)
		return ret;
	uint32_t first = vi->entries[nd->idx].first_child;
	uint32_t nent = vi->nentries;
	version_put(fs, vi);
	for (uint32_t c = first; c < nent;) {
		struct dview_node *ch;
		char name[NAME_MAX + 1];
		uint32_t next;
		bool keep;

		ret = version_get_tree(fs, nd->to, nd->ttree, &vi);
		if (ret < 0)
			return ret;
		next = vi->entries[c].next_sibling;
		keep = (off_t)c + 3 > off &&
		       strlen(vi->entries[c].name) < sizeof(name);
		if (keep)
			strcpy(name, vi->entries[c].name);
		version_put(fs, vi);
		if (keep && child_node(fs, nd, name, &ch) == 0) {
			/* Files without attributes: a listing builds no view
			 * (stat looks each up, and builds it, then). */
			bool isdir = false;

			ret = version_get_tree(fs, nd->to, nd->ttree, &vi);
			if (ret < 0)
				return ret;
			isdir = vi->entries[c].type == DCR_FT_DIR;
			int64_t mt = vi->entries[c].mtime_ns;
			version_put(fs, vi);
			dir_stat(fs, &st, node_ino(ch), mt);
			if (!isdir) {
				st.st_mode = S_IFREG | 0444;
				st.st_nlink = 1;
			}
			if (emit(ctx, name, &st, (off_t)c + 3, isdir))
				break;
		}
		c = next;
	}
	return 0;
}

/* ---------------------------------------------------------- files */

/*
 * -o delta_ahead=auto: a view is used on this mount, so the views of the
 * versions that come next are built when their prefetch ends, from the
 * changes it keeps from now on (read/dvrec.h). Said once.
 */
static void delta_in_use(struct dcrfs *fs)
{
	struct dcr_dvrec *rec = dcr_reader_dvrec(fs->r);

	if (fs->dv.ahead == DCRFS_DELTA_AHEAD_AUTO && rec &&
	    !dcr_dvrec_active(rec) && !dcr_dvrec_set_active(rec, true))
		dcr_info("delta views are in use on this mount: each new "
			 "version's views are built when its prefetch ends, "
			 "from the next version on (delta_ahead=auto)");
}

static void dcrfs_delta_release_file(struct dcrfs *fs, struct dview_file *vf);

int dcrfs_delta_open(struct dcrfs *fs, fuse_ino_t ino, uint64_t *fh)
{
	struct dcrfs_delta *d = fs->dv.tab;
	struct dview_node *nd = node_of(fs, ino);
	struct dview_file *vf = NULL;
	struct stat st;
	bool pt, first, built = false;
	int ret;

	if (!nd)
		return ino == DCRFS_INO_DELTA ? -EISDIR : -ENOENT;
	ret = node_stat(fs, nd, &st);
	if (ret < 0)
		return ret;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	delta_in_use(fs);
	pthread_mutex_lock(&nd->build_lock);
	/* While the node is open, a new open follows the file and mode of
	 * the first (the kernel's rule; a file a failed check dropped is
	 * read on the normal path only, and then any file will do). */
	pthread_mutex_lock(&d->lock);
	first = nd->opens == 0;
	if (!first && (nd->open_pt || !nd->open_file->bad)) {
		vf = nd->open_file;
		vf->refs++;
	}
	pt = first || nd->open_pt;
	pthread_mutex_unlock(&d->lock);
	if (!vf) {
		ret = view_get_locked(fs, nd, &vf, &built);
		if (ret < 0) {
			pthread_mutex_unlock(&nd->build_lock);
			return ret;
		}
	}
	if (first && !built && vf->pt_id >= 0 && dcrfs_pt_usable(d->pt)) {
		/* The kernel will read the file unchecked: the whole of it is
		 * checked first, at each first open of the node, as a read
		 * checks its blocks (a version file's passthrough open checks
		 * its file too: backing.c). A view this open built was read
		 * back whole a moment ago, its check values made from those
		 * pages (dview_out.h): checked already. */
		uint64_t bad_off = 0;

		ret = dcr_dview_verify(fs->r, vf->fd, &vf->sums, &bad_off);
		if (ret < 0) {
			if (ret != -ENOMEM)
				file_drop(fs, vf, bad_off, ret);
			file_put(fs, vf);
			pthread_mutex_unlock(&nd->build_lock);
			return ret == -ENOMEM ? ret : -EIO;
		}
	}
	if (first && vf->pt_id == 0 && dcrfs_pt_usable(d->pt)) {
		/* Registered once per file, released when it is freed. A
		 * failure (logged there) leaves this file on the normal path. */
		int id = dcrfs_pt_register(d->pt, vf->fd);

		vf->pt_id = id > 0 ? id : -1;
		if (id > 0) /* pages of earlier normal opens: a second copy */
			fuse_lowlevel_notify_inval_inode(fs->se, ino, 0, 0);
	}
	pt = pt && vf->pt_id > 0;
	pthread_mutex_lock(&d->lock);
	nd->opens++;
	nd->open_file = vf;
	nd->open_pt = pt;
	if (pt)
		d->pt_opens++;
	else
		d->normal_opens++;
	pthread_mutex_unlock(&d->lock);
	pthread_mutex_unlock(&nd->build_lock);
	*fh = dcrfs_fh_put(vf);
	if (!*fh) {
		dcrfs_delta_release_file(fs, vf);
		return DCR_ERR(-ENOMEM);
	}
	return pt ? vf->pt_id : 0;
}

ssize_t dcrfs_delta_read(struct dcrfs *fs, uint64_t fh, void *buf,
			 size_t size, off_t off)
{
	struct dview_file *vf = dcrfs_fh_get(fh);
	struct dcrfs_delta *d = fs->dv.tab;
	uint64_t bad_off = 0;
	bool first = false;
	ssize_t n;

	if (!vf) { /* opened before a restart: its view was that daemon's */
		dcrfs_fh_stranger("/delta file");
		return -EIO;
	}
	if (off < 0)
		return -EINVAL;
	pthread_mutex_lock(&d->lock);
	first = vf->bad;
	d->reads++;
	pthread_mutex_unlock(&d->lock);
	if (first)
		return -EIO; /* dropped: the next open builds it again */
	n = dcr_dview_pread(vf->fd, &vf->sums, buf, size, (uint64_t)off, &bad_off);
	if (n >= 0 || n == -ENOMEM)
		return n;
	/* Its local file does not hold what was built: never served. */
	file_drop(fs, vf, bad_off, (int)n);
	return -EIO;
}

void dcrfs_delta_release(struct dcrfs *fs, uint64_t fh)
{
	struct dview_file *vf = dcrfs_fh_take(fh);

	if (vf) /* else opened before a restart: nothing of it here */
		dcrfs_delta_release_file(fs, vf);
}

static void dcrfs_delta_release_file(struct dcrfs *fs, struct dview_file *vf)
{
	struct dview_node *nd = vf->node;

	pthread_mutex_lock(&fs->dv.tab->lock);
	if (--nd->opens == 0) {
		nd->open_file = NULL;
		nd->open_pt = false;
	}
	file_unref_locked(fs->dv.tab, vf);
	pthread_mutex_unlock(&fs->dv.tab->lock);
}

/* ---------------------------------------------------------- readiness */

/* dcrfs_delta_ready's files, built on the reader's threads. */
struct ready_all {
	struct dcrfs *fs;
	const struct dview_node *top;
	uint64_t v;
	const uint32_t *idx;
	size_t made;     /* views built; atomic */
	uint64_t bytes;  /* their bytes; atomic */
};

/* dcr_reader_par_for body: the view of file @i of @arg's, built if it
 * is not ready yet. */
static void ready_one(void *arg, size_t i)
{
	struct ready_all *ra = arg;
	struct dcrfs *fs = ra->fs;
	struct dview_node *nd;
	struct dview_file *vf;
	bool built = false;

	if (dcr_dview_probe(fs->r, ra->v, ra->top->ttree, ra->idx[i]) < 0 ||
	    node_get(fs, ra->top->from, ra->top->ftree, ra->v, ra->top->ttree,
		     ra->idx[i], &nd) < 0 ||
	    view_get(fs, nd, &vf, &built) < 0)
		return;
	if (built) {
		pthread_mutex_lock(&fs->dv.tab->lock);
		fs->dv.tab->ready++;
		pthread_mutex_unlock(&fs->dv.tab->lock);
		__atomic_add_fetch(&ra->made, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&ra->bytes, vf->size, __ATOMIC_RELAXED);
	}
	file_put(fs, vf);
}

void dcrfs_delta_ready(struct dcrfs *fs, uint64_t v)
{
	struct ready_all ra;
	struct dcr_dvrec *rec = dcr_reader_dvrec(fs->r);
	const struct dcr_version_info *vi;
	struct dview_node *top;
	uint32_t *idx = NULL;
	size_t n = 0, made = 0;
	uint64_t bytes = 0, changed, recorded;
	int64_t t0 = dcr_mono_ns();
	char name[32];
	size_t few = 0;

	snprintf(name, sizeof(name), "v%" PRIu64, v);
	if (!rec || top_node(fs, name, &top) < 0 ||
	    version_get_tree(fs, v, top->ttree, &vi) < 0)
		return;
	idx = calloc(vi->nentries ? vi->nentries : 1, sizeof(*idx));
	for (uint32_t k = 1; idx && k < vi->nentries; k++)
		if (vi->entries[k].type == DCR_FT_REG &&
		    ends_with(vi->entries[k].name, DCR_DVIEW_SUFFIX) &&
		    dcr_dvrec_count(rec, v, top->ttree, k - 1, top->from))
			idx[n++] = k;
	version_put(fs, vi);
	/* Only files whose records give most of their view: a file most of
	 * whose changed chunks have none (made by full frames, or read
	 * before the prefetch) would be compared whole before latest moves;
	 * its first read builds it instead. */
	for (size_t i = 0; i < n; i++) {
		struct dcr_dview_side a = { top->from, top->ftree },
				      b = { v, top->ttree };

		if (dcr_dview_coverage(fs->r, a, b, idx[i], &changed,
				       &recorded) == 0 &&
		    2 * recorded > changed)
			idx[i - few] = idx[i];
		else
			few++;
	}
	n -= few;
	if (few)
		dcr_debug("v%" PRIu64 ": %zu file(s) with records for less than "
			  "half of their changed chunks: their delta views wait "
			  "for a first read", v, few);
	/* A build ahead of its first read is an offer, not a duty: it
	 * writes a scratch file and the view beside the cache, so it waits
	 * for a first read where they might take the room the catalog
	 * needs to index the next version (twice the records' bytes: the
	 * scratch and the view) */
	if (n) {
		struct dcr_dvrec_stats rs;

		dcr_dvrec_stats(rec, &rs);
		if (!dcr_reader_room_for(fs->r, 2 * rs.bytes)) {
			dcr_debug("v%" PRIu64 ": delta views not built ahead: "
				  "the cache's file system is short of room", v);
			n = 0;
		}
	}
	/* The files' builds at once, each on the threads the others leave
	 * idle (a build's own work is a dcr_reader_par_for too): a
	 * sharded version's views are not built one after another. */
	ra = (struct ready_all){ .fs = fs, .top = top, .v = v, .idx = idx };
	if (n)
		dcr_reader_par_for(fs->r, n, ready_one, &ra);
	made = ra.made;
	bytes = ra.bytes;
	free(idx);
	if (made)
		dcr_info("v%" PRIu64 ": %zu delta view(s) from v%" PRIu64 " ready, "
			 "%" PRIu64 " bytes, in %.2f s", v, made, top->from, bytes,
			 (double)(dcr_mono_ns() - t0) / 1e9);
}

ssize_t dcrfs_delta_export(struct dcrfs *fs, struct dcrfs_delta_key **out)
{
	struct dcrfs_delta *d = fs->dv.tab;
	struct dcrfs_delta_key *a;
	size_t n;

	pthread_mutex_lock(&d->lock);
	n = d->n;
	a = malloc((n ? n : 1) * sizeof(*a));
	for (size_t i = 0; a && i < n; i++) {
		const struct dview_node *nd = d->slots[i];

		a[i] = (struct dcrfs_delta_key){ nd->from, nd->to, nd->ftree,
						 nd->ttree, nd->idx, 0 };
	}
	pthread_mutex_unlock(&d->lock);
	*out = a;
	return a ? (ssize_t)n : DCR_ERR(-ENOMEM);
}

int dcrfs_delta_adopt(struct dcrfs *fs, const struct dcrfs_delta_key *k,
		      uint32_t slot)
{
	struct dview_node *nd;
	int ret = node_get(fs, k->from, k->ftree, k->to, k->ttree, k->idx, &nd);

	if (ret == 0 && nd->slot != slot)
		ret = DCR_ERR(-EPROTO);
	return ret;
}
