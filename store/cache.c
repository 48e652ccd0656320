/* SPDX-License-Identifier: MIT */
/*
 * cache.c - the content-addressed chunk cache (see cache.h).
 *
 * Locking: @lock guards the byte count, the verified set and the
 * counters and is never held across I/O or catalog calls; @evict_lock
 * lets one thread at a time evict (others skip: one evictor suffices).
 * Files are only ever created by rename(2) of a complete temporary file,
 * so a reader sees the whole chunk or nothing, and a reader that opened a
 * file keeps reading it even if it is evicted meanwhile.
 *
 * The catalog rows are the accounting, the files are the data. They can
 * disagree after a crash or a race between an evictor and an insert of
 * the same hash; every such case degrades to a miss (row without file)
 * or is repaired when the file is next used (file without row: the row
 * is added when the file is verified). When the catalog is new (first
 * mount, or rebuilt after corruption) every chunk file is adopted at
 * open (adopt_orphans), so the budget covers what is on disk.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "cache.h"
#include "chunk.h"
#include "common.h"
#include "fileio.h"
#include "reader.h" /* DCR_CACHE_SIZE_DEFAULT */

/* Verified-hash set: open addressing, cleared when it fills up. */
#define VSET_CAP (1u << 15)
#define VSET_MAX_FILL (VSET_CAP / 4 * 3)
/* Rewrite a chunk's atime at most this often (milliseconds). */
#define TOUCH_INTERVAL_MS (60 * 1000)
#define EVICT_BATCH 64
/* Catalog rows written per batch (see pend_flush). */
#define PEND_MAX 128

enum { VS_EMPTY = 0, VS_USED = 1, VS_DEAD = 2 };

struct vset_entry {
	uint8_t hash[DCR_HASH_LEN];
	int64_t atime_ms; /* last atime written to the catalog */
	uint8_t state;
};

/* A catalog row waiting for pend_flush. */
struct pend {
	uint8_t hash[DCR_HASH_LEN];
	uint64_t size;
	int64_t atime;
};

struct dcr_cache {
	char *chunks_dir;
	char *tmp_dir;
	struct dcr_catalog *cat;
	uint64_t budget;

	pthread_mutex_t lock;
	uint64_t bytes;
	struct vset_entry *vset;
	uint32_t vset_fill; /* used + dead */
	struct dcr_cache_stats st;
	uint64_t tmp_seq;
	struct pend pend[PEND_MAX];
	size_t npend;

	pthread_mutex_t evict_lock;
	pthread_mutex_t flush_lock; /* one pend_flush at a time */
	atomic_bool no_direct;      /* O_DIRECT refused here: stop trying */
	atomic_bool no_xattr;       /* user xattrs refused here */
};

static int64_t now_ms(void)
{
	return dcr_now_ns() / 1000000;
}

static uint32_t vset_slot(const uint8_t hash[DCR_HASH_LEN])
{
	return dcr_get_le32(hash) & (VSET_CAP - 1);
}

/* Find @hash; NULL if absent. Caller holds the lock. */
static struct vset_entry *vset_find(struct dcr_cache *c,
				    const uint8_t hash[DCR_HASH_LEN])
{
	uint32_t i = vset_slot(hash);

	for (uint32_t n = 0; n < VSET_CAP; n++, i = (i + 1) & (VSET_CAP - 1)) {
		struct vset_entry *e = &c->vset[i];
		if (e->state == VS_EMPTY)
			return NULL;
		if (e->state == VS_USED &&
		    memcmp(e->hash, hash, DCR_HASH_LEN) == 0)
			return e;
	}
	return NULL;
}

/* Insert @hash (or refresh its atime). Caller holds the lock. */
static void vset_add(struct dcr_cache *c, const uint8_t hash[DCR_HASH_LEN],
		     int64_t atime_ms)
{
	struct vset_entry *e = vset_find(c, hash);
	uint32_t i;

	if (e) {
		e->atime_ms = atime_ms;
		return;
	}
	if (c->vset_fill >= VSET_MAX_FILL) {
		/* Bounded: forget everything; files get verified again. */
		memset(c->vset, 0, VSET_CAP * sizeof(*c->vset));
		c->vset_fill = 0;
	}
	i = vset_slot(hash);
	while (c->vset[i].state == VS_USED)
		i = (i + 1) & (VSET_CAP - 1);
	if (c->vset[i].state == VS_EMPTY)
		c->vset_fill++;
	e = &c->vset[i];
	memcpy(e->hash, hash, DCR_HASH_LEN);
	e->atime_ms = atime_ms;
	e->state = VS_USED;
}

static void vset_del(struct dcr_cache *c, const uint8_t hash[DCR_HASH_LEN])
{
	struct vset_entry *e = vset_find(c, hash);

	if (e)
		e->state = VS_DEAD;
}

/*
 * The first use of a cached chunk in this instance writes its row (the
 * atime, or the row itself for a file a crash left without one): a
 * write transaction per chunk read would cost more than the chunk's
 * bytes do on a fast read, so up to PEND_MAX rows wait in @pend (under
 * @lock) and pend_flush writes them in one transaction. A row lost in a
 * crash costs an atime, or, for a file without a row, nothing until its
 * next use queues it again. Stored chunks (dcr_cache_put) get their row
 * at once: a file the catalog does not know would escape the budget.
 */

static void pend_flush(struct dcr_cache *c);

/*
 * Queue a row; true when the queue is full (the caller then flushes it).
 * Caller holds @lock, which is dropped and retaken to flush first if
 * other threads filled the queue meanwhile.
 */
static bool pend_add(struct dcr_cache *c, const uint8_t hash[DCR_HASH_LEN],
		     uint64_t size, int64_t atime)
{
	struct pend *p;

	while (c->npend == PEND_MAX) {
		pthread_mutex_unlock(&c->lock);
		pend_flush(c);
		pthread_mutex_lock(&c->lock);
	}
	p = &c->pend[c->npend++];
	memcpy(p->hash, hash, DCR_HASH_LEN);
	p->size = size;
	p->atime = atime;
	return c->npend == PEND_MAX;
}

/* Forget queued rows of @hash (its file is gone). Caller holds @lock. */
static void pend_del(struct dcr_cache *c, const uint8_t hash[DCR_HASH_LEN])
{
	for (size_t i = 0; i < c->npend;) {
		struct pend *p = &c->pend[i];

		if (memcmp(p->hash, hash, DCR_HASH_LEN) != 0) {
			i++;
			continue;
		}
		*p = c->pend[--c->npend];
	}
}

/* Write the queued rows in one transaction and count the new ones. */
static void pend_flush(struct dcr_cache *c)
{
	uint8_t hashes[PEND_MAX][DCR_HASH_LEN];
	uint64_t sizes[PEND_MAX];
	int64_t atimes[PEND_MAX];
	uint8_t added[PEND_MAX];
	size_t n;
	int ret;

	pthread_mutex_lock(&c->flush_lock);
	pthread_mutex_lock(&c->lock);
	n = c->npend;
	for (size_t i = 0; i < n; i++) {
		memcpy(hashes[i], c->pend[i].hash, DCR_HASH_LEN);
		sizes[i] = c->pend[i].size;
		atimes[i] = c->pend[i].atime;
	}
	c->npend = 0;
	pthread_mutex_unlock(&c->lock);
	if (n == 0) {
		pthread_mutex_unlock(&c->flush_lock);
		return;
	}
	ret = dcr_catalog_cache_add_many(c->cat, hashes, sizes, atimes, n,
					 true, added);
	if (ret)
		dcr_warn("cache: cannot record %zu chunks in the catalog (%s); "
			 "they are recorded when next used", n,
			 dcr_strerror(ret));
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < n; i++) {
		if (ret)
			vset_del(c, hashes[i]); /* next use queues it again */
		else if (added[i])
			c->bytes += sizes[i]; /* a file a crash left unrowed */
	}
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_unlock(&c->flush_lock);
}

void dcr_cache_path(const struct dcr_cache *c,
		    const uint8_t hash[DCR_HASH_LEN], char *buf, size_t cap)
{
	char hex[DCR_HASH_HEX_LEN + 1];

	dcr_hash_hex(hash, hex);
	snprintf(buf, cap, "%s/%.2s/%s", c->chunks_dir, hex, hex);
}

/* mkdir that accepts an existing directory. */
static int mkdir_0700(const char *path)
{
	if (mkdir(path, 0700) == 0 || errno == EEXIST)
		return 0;
	return -errno;
}

/* Remove leftover temporary files of a previous run. */
static void clean_tmp(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char path[PATH_MAX];

	if (!d)
		return;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		unlink(path);
	}
	closedir(d);
}

static char *path_join(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *p = malloc(la + lb + 2);

	if (!p)
		return NULL;
	memcpy(p, a, la);
	p[la] = '/';
	memcpy(p + la + 1, b, lb + 1);
	return p;
}

static void evict(struct dcr_cache *c);

/* Parse a 64-digit lowercase hex chunk name. */
static int parse_hex_name(const char *name, uint8_t h[DCR_HASH_LEN])
{
	for (int i = 0; i < DCR_HASH_LEN; i++) {
		int v = 0;
		for (int k = 0; k < 2; k++) {
			char ch = name[2 * i + k];
			v <<= 4;
			if (ch >= '0' && ch <= '9')
				v |= ch - '0';
			else if (ch >= 'a' && ch <= 'f')
				v |= ch - 'a' + 10;
			else
				return -1;
		}
		h[i] = (uint8_t)v;
	}
	return name[2 * DCR_HASH_LEN] == '\0' ? 0 : -1;
}

#define ADOPT_BATCH 4096

/* Add rows (atime 0) for the @n files found; the bytes of the new ones. */
static uint64_t adopt_batch(struct dcr_cache *c,
			    const uint8_t (*hashes)[DCR_HASH_LEN],
			    const uint64_t *sizes, size_t n, uint8_t *added)
{
	uint64_t total = 0;

	if (n == 0 || dcr_catalog_cache_add_many(c->cat, hashes, sizes, NULL,
						 n, false, added) != 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		total += added[i] ? sizes[i] : 0;
	return total;
}

/*
 * Account for chunk files that have no row (the catalog was just created
 * or rebuilt after corruption, see dcr_catalog_open): one readdir and
 * fstatat per file, rows added in batches.
 *
 * Adopt rather than delete: the files are the expensive part (a 2 TB
 * cache is hours of downloads), they are content-addressed, and every
 * one is still verified before its first use (see cache.h), so
 * keeping them costs nothing in safety. They get atime 0, the oldest, so
 * that eviction takes them first if the budget is exceeded (which
 * happens here, before the first read). Names that are not chunk names
 * are left alone. Runs only when the catalog is new, so a normal mount
 * does not pay for the scan.
 */
static void adopt_orphans(struct dcr_cache *c)
{
	uint8_t (*hashes)[DCR_HASH_LEN] = malloc(ADOPT_BATCH * DCR_HASH_LEN);
	uint64_t *sizes = malloc(ADOPT_BATCH * sizeof(*sizes));
	uint8_t *added = malloc(ADOPT_BATCH);
	uint64_t total = 0, nfiles = 0;
	char sub[PATH_MAX];
	size_t n = 0;

	if (!hashes || !sizes || !added)
		goto out_free;
	for (unsigned i = 0; i < 256; i++) {
		struct dirent *de;
		struct stat sb;
		DIR *d;

		snprintf(sub, sizeof(sub), "%s/%02x", c->chunks_dir, i);
		d = opendir(sub);
		if (!d)
			continue;
		while ((de = readdir(d))) {
			uint8_t *h = hashes[n];

			if (parse_hex_name(de->d_name, h) != 0 || h[0] != i)
				continue;
			if (fstatat(dirfd(d), de->d_name, &sb,
				    AT_SYMLINK_NOFOLLOW) < 0 ||
			    !S_ISREG(sb.st_mode))
				continue;
			sizes[n++] = (uint64_t)sb.st_size;
			nfiles++;
			if (n == ADOPT_BATCH) {
				total += adopt_batch(c, hashes, sizes, n, added);
				n = 0;
			}
		}
		closedir(d);
	}
	total += adopt_batch(c, hashes, sizes, n, added);
	if (total)
		dcr_info("cache %s: adopted %llu chunk files (%llu bytes) "
			 "left by an earlier catalog", c->chunks_dir,
			 (unsigned long long)nfiles, (unsigned long long)total);
out_free:
	free(added);
	free(hashes);
	free(sizes);
}

int dcr_cache_open(const char *dir, struct dcr_catalog *cat, uint64_t budget,
		   struct dcr_cache **out)
{
	struct dcr_cache *c;
	bool fresh;
	int ret;

	*out = NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return DCR_ERR(-ENOMEM);
	c->cat = cat;
	c->budget = budget ? budget : DCR_CACHE_SIZE_DEFAULT;
	c->chunks_dir = path_join(dir, "chunks");
	c->tmp_dir = path_join(dir, "tmp");
	c->vset = calloc(VSET_CAP, sizeof(*c->vset));
	if (!c->chunks_dir || !c->tmp_dir || !c->vset) {
		ret = DCR_ERR(-ENOMEM);
		goto err_free;
	}
	ret = mkdir_0700(c->chunks_dir);
	if (!ret)
		ret = mkdir_0700(c->tmp_dir);
	/* All 256 fan-out directories up front: no mkdir on the read path. */
	for (unsigned i = 0; i < 256 && !ret; i++) {
		char sub[PATH_MAX];
		snprintf(sub, sizeof(sub), "%s/%02x", c->chunks_dir, i);
		ret = mkdir_0700(sub);
	}
	if (ret) {
		dcr_err("cache %s: %s", dir, dcr_strerror(ret));
		goto err_free;
	}
	clean_tmp(c->tmp_dir);
	fresh = dcr_catalog_is_new(cat);
	if (fresh)
		adopt_orphans(c);
	ret = dcr_catalog_cache_total(cat, &c->bytes);
	if (ret)
		goto err_free;
	c->st.bytes = c->bytes;
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->evict_lock, NULL);
	pthread_mutex_init(&c->flush_lock, NULL);
	if (fresh)
		evict(c); /* the adopted files count against the budget */
	*out = c;
	return 0;

err_free:
	free(c->vset);
	free(c->tmp_dir);
	free(c->chunks_dir);
	free(c);
	return ret;
}

void dcr_cache_close(struct dcr_cache *c)
{
	if (!c)
		return;
	pend_flush(c);
	pthread_mutex_destroy(&c->flush_lock);
	pthread_mutex_destroy(&c->evict_lock);
	pthread_mutex_destroy(&c->lock);
	free(c->vset);
	free(c->tmp_dir);
	free(c->chunks_dir);
	free(c);
}

void dcr_cache_get_stats(struct dcr_cache *c, struct dcr_cache_stats *s)
{
	pend_flush(c);
	pthread_mutex_lock(&c->lock);
	*s = c->st;
	s->bytes = c->bytes;
	pthread_mutex_unlock(&c->lock);
}

/* Forget @hash: file, row, accounting. */
static void drop(struct dcr_cache *c, const uint8_t hash[DCR_HASH_LEN],
		 const char *path)
{
	uint64_t size = 0;

	unlink(path);
	dcr_catalog_cache_del(c->cat, hash, &size);
	pthread_mutex_lock(&c->lock);
	pend_del(c, hash);
	vset_del(c, hash);
	c->bytes -= DCR_MIN(size, c->bytes);
	pthread_mutex_unlock(&c->lock);
}

static bool aligned(const void *p, uint64_t a, uint64_t b)
{
	return ((uintptr_t)p | a | b) % DCR_CACHE_ALIGN == 0;
}

/*
 * Read @n bytes at @off of the chunk file @path, open as @fd, into @dst.
 * What the page cache holds is copied from it (RWF_NOWAIT); a file that
 * is not resident is read around the page cache (O_DIRECT) when @dst,
 * @off and @n are aligned, so that reading a base chunk once does not
 * allocate and fill page-cache pages for it. Else a plain read.
 */
static int pread_lean(struct dcr_cache *c, int fd, const char *path,
		      void *dst, size_t n, uint64_t off)
{
	struct iovec iov = { dst, n };
	ssize_t got;
	int dfd, ret;

	if (n == 0 || atomic_load(&c->no_direct) || !aligned(dst, n, off))
		return dcr_pread_full(fd, dst, n, off);
	got = preadv2(fd, &iov, 1, (off_t)off, RWF_NOWAIT);
	if (got == (ssize_t)n)
		return 0;
	if (got < 0 && errno != EAGAIN)
		return dcr_pread_full(fd, dst, n, off); /* no RWF_NOWAIT */
	dfd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (dfd < 0) {
		if (errno == EINVAL)
			atomic_store(&c->no_direct, true);
		return dcr_pread_full(fd, dst, n, off);
	}
	{
		/* The file checked through @fd, not one renamed over it. */
		struct stat a, b;

		if (fstat(fd, &a) < 0 || fstat(dfd, &b) < 0 ||
		    a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
			close(dfd);
			return dcr_pread_full(fd, dst, n, off);
		}
	}
	ret = dcr_pread_full(dfd, dst, n, off);
	close(dfd);
	if (ret == -EINVAL) {
		atomic_store(&c->no_direct, true);
		ret = dcr_pread_full(fd, dst, n, off);
	}
	return ret;
}

/*
 * The check value: every file this cache writes, or verifies against its
 * name, carries the XXH3-128 of its bytes in the extended attribute
 * XATTR_XXH. The bytes were proven once (by their SHA-256, when they were
 * built from the store or when a file without the attribute was first
 * used); the attribute lets the first use in a later mount re-prove them
 * against bit rot at ~20 GB/s instead of re-hashing them with SHA-256.
 * A damaged attribute fails the check like damaged bytes do. Where the
 * file system has no user xattrs, every first use hashes with SHA-256.
 */
#define XATTR_XXH "user.dcrfs.xxh128"

static void xxh_set(struct dcr_cache *c, int fd, const void *data, size_t len)
{
	uint8_t x[DCR_XXH_LEN];

	if (atomic_load(&c->no_xattr))
		return;
	dcr_xxh128(data, len, x);
	if (fsetxattr(fd, XATTR_XXH, x, sizeof(x), 0) < 0 &&
	    (errno == ENOTSUP || errno == EOPNOTSUPP) &&
	    !atomic_exchange(&c->no_xattr, true))
		dcr_info("cache %s: no user extended attributes here: every "
			 "cached chunk is re-hashed with SHA-256 on its first "
			 "use in a mount", c->chunks_dir);
}

/*
 * A per-thread scratch buffer for whole-chunk reads of which the caller
 * wants a slice (or nothing: dcr_cache_open_fd), kept for the thread's
 * life: a fresh 1 MiB buffer per read costs 256 page faults where freed
 * memory goes back to the kernel, more than the read and the check.
 */
struct scratch {
	uint8_t *p;
	size_t cap;
};

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static bool scratch_key_ok;

static void scratch_free(void *arg)
{
	struct scratch *sc = arg;

	free(sc->p);
	free(sc);
}

static void scratch_key_init(void)
{
	scratch_key_ok = pthread_key_create(&scratch_key, scratch_free) == 0;
}

/* An aligned buffer of at least @len bytes owned by this thread, or NULL. */
static uint8_t *scratch_get(size_t len)
{
	struct scratch *sc;
	size_t cap = DCR_ROUND_UP(len ? len : 1, DCR_CACHE_ALIGN);

	pthread_once(&scratch_once, scratch_key_init);
	if (!scratch_key_ok)
		return NULL;
	sc = pthread_getspecific(scratch_key);
	if (!sc) {
		sc = calloc(1, sizeof(*sc));
		if (!sc)
			return NULL;
		if (pthread_setspecific(scratch_key, sc) != 0) {
			free(sc);
			return NULL;
		}
	}
	if (sc->cap < cap) {
		uint8_t *p = aligned_alloc(DCR_CACHE_ALIGN, cap);

		if (!p)
			return NULL;
		free(sc->p);
		sc->p = p;
		sc->cap = cap;
	}
	return sc->p;
}

/*
 * Read the whole file, prove it (its XXH3-128 attribute, else its
 * SHA-256 against its name, then record the attribute), copy the slice
 * [@off, @off+@n) into @dst if given. 0, -EBADMSG or -errno.
 */
static int verify_read(struct dcr_cache *c, int fd, const char *path,
		       const uint8_t hash[DCR_HASH_LEN], uint32_t chunk_len,
		       uint32_t off, void *dst, size_t n, bool pagecache)
{
	uint8_t want[DCR_XXH_LEN], got[DCR_HASH_LEN];
	uint8_t *buf;
	ssize_t xl;
	int ret;

	if (dst && off == 0 && n == chunk_len) {
		buf = dst; /* read in place; dst is unspecified on a miss */
	} else {
		buf = scratch_get(chunk_len);
		if (!buf)
			return DCR_ERR(-ENOMEM);
	}
	ret = pagecache ? dcr_pread_full(fd, buf, chunk_len, 0)
			: pread_lean(c, fd, path, buf, chunk_len, 0);
	if (ret == -EIO || ret == -ENODATA)
		ret = -EBADMSG;
	if (ret)
		goto out;
	xl = atomic_load(&c->no_xattr) ? -1
		: fgetxattr(fd, XATTR_XXH, want, sizeof(want));
	if (xl == (ssize_t)sizeof(want)) {
		dcr_xxh128(buf, chunk_len, got);
		if (memcmp(got, want, DCR_XXH_LEN) != 0)
			ret = -EBADMSG;
	} else {
		dcr_sha256(buf, chunk_len, got);
		if (!dcr_hash_eq(got, hash))
			ret = -EBADMSG;
		else
			xxh_set(c, fd, buf, chunk_len);
	}
	if (!ret && buf != dst && n)
		memcpy(dst, buf + off, n);
out:
	return ret;
}

/*
 * Open the cached chunk @hash and make sure it is good: known good to
 * this instance, or read whole and checked now (verify_read, through
 * the page cache with @pagecache). With @dst, copy bytes [@off, @off+@n)
 * into it and close; else return the open file in *@fdp if it was known
 * good (-EAGAIN if not). 0 on a hit, 1 on a hit proven now, -ENOENT on
 * a miss (a bad file is deleted), or another -errno on a local I/O
 * error.
 */
static int chunk_get(struct dcr_cache *c, const uint8_t hash[DCR_HASH_LEN],
		     uint32_t chunk_len, uint32_t off, void *dst, size_t n,
		     int *fdp, bool pagecache)
{
	char path[PATH_MAX];
	struct vset_entry *e;
	struct stat sb;
	int64_t now = now_ms();
	int verified, touch = 0, fd, ret;

	if ((uint64_t)off + n > chunk_len)
		return DCR_ERR(-EINVAL);
	dcr_cache_path(c, hash, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		pthread_mutex_lock(&c->lock);
		c->st.misses++;
		pthread_mutex_unlock(&c->lock);
		if (ret == -ENOENT)
			return -ENOENT;
		dcr_warn("cache: %s: %s", path, dcr_strerror(ret));
		return ret == -ENOMEM ? ret : -ENOENT;
	}

	pthread_mutex_lock(&c->lock);
	e = vset_find(c, hash);
	verified = e != NULL;
	if (e && now - e->atime_ms >= TOUCH_INTERVAL_MS) {
		e->atime_ms = now;
		touch = 1;
	}
	pthread_mutex_unlock(&c->lock);

	ret = 0;
	if (!verified && !dst) {
		/* A descriptor is for splicing a chunk already proven here;
		 * the first use reads and proves it in the caller's buffer
		 * (dcr_cache_read), which costs no extra copy. */
		close(fd);
		return -EAGAIN;
	}
	if (!verified) {
		if (fstat(fd, &sb) < 0)
			ret = -errno;
		else if ((uint64_t)sb.st_size != chunk_len)
			ret = -EBADMSG;
		else
			ret = verify_read(c, fd, path, hash, chunk_len, off,
					  dst, n, pagecache);
	} else if (dst) {
		ret = pread_lean(c, fd, path, dst, n, (uint64_t)off);
		if (ret == -EIO || ret == -ENODATA)
			ret = -EBADMSG; /* truncated behind our back */
	}
	if (ret || dst || !fdp)
		close(fd);
	else
		*fdp = fd;

	if (ret == -EBADMSG) {
		dcr_warn("cache: %s failed verification; deleted, the chunk "
			 "will be fetched again", path);
		drop(c, hash, path);
		pthread_mutex_lock(&c->lock);
		c->st.corrupt++;
		c->st.misses++;
		pthread_mutex_unlock(&c->lock);
		return -ENOENT;
	}
	if (ret) {
		dcr_warn("cache: %s: %s", path, dcr_strerror(ret));
		return ret == -ENOMEM ? ret : -ENOENT;
	}

	if (!verified) {
		bool full;
		/* First use here: remember that it is good and queue its
		 * row (which adopts a file left without one by a crash). */
		pthread_mutex_lock(&c->lock);
		vset_add(c, hash, now);
		full = pend_add(c, hash, chunk_len, now);
		pthread_mutex_unlock(&c->lock);
		if (full)
			pend_flush(c);
	} else if (touch) {
		dcr_catalog_cache_touch(c->cat, hash, now);
	}
	pthread_mutex_lock(&c->lock);
	c->st.hits++;
	pthread_mutex_unlock(&c->lock);
	return verified ? 0 : 1;
}

int dcr_cache_read(struct dcr_cache *c, const uint8_t hash[DCR_HASH_LEN],
		   uint32_t chunk_len, uint32_t off, void *dst, size_t n)
{
	static uint8_t none[1];

	/* @dst must be non-NULL to mean "copy" even when @n is 0. */
	int ret = chunk_get(c, hash, chunk_len, off, dst ? dst : none, n,
			    NULL, false);

	return ret > 0 ? 0 : ret;
}

int dcr_cache_check(struct dcr_cache *c, const uint8_t hash[DCR_HASH_LEN],
		    uint32_t chunk_len)
{
	static uint8_t none[1];

	return chunk_get(c, hash, chunk_len, 0, none, 0, NULL, true);
}

int dcr_cache_open_fd(struct dcr_cache *c, const uint8_t hash[DCR_HASH_LEN],
		      uint32_t chunk_len)
{
	int fd = -1;
	int ret = chunk_get(c, hash, chunk_len, 0, NULL, 0, &fd, false);

	return ret < 0 ? ret : fd;
}

/* Evict least recently used chunks until within the budget. */
static void evict(struct dcr_cache *c)
{
	uint8_t hashes[EVICT_BATCH][DCR_HASH_LEN];
	uint64_t sizes[EVICT_BATCH];
	char path[PATH_MAX];
	size_t n;

	bool resynced = false;

again:
	if (pthread_mutex_trylock(&c->evict_lock) != 0)
		return; /* someone else is evicting (and re-checks, below) */
	for (;;) {
		int over;

		pthread_mutex_lock(&c->lock);
		over = c->bytes > c->budget;
		pthread_mutex_unlock(&c->lock);
		if (!over)
			break;
		if (dcr_catalog_cache_oldest(c->cat, EVICT_BATCH, hashes, sizes,
					     &n) || n == 0) {
			/* Accounting drifted from the rows: resync. */
			uint64_t total;
			if (dcr_catalog_cache_total(c->cat, &total) == 0) {
				pthread_mutex_lock(&c->lock);
				c->bytes = total;
				pthread_mutex_unlock(&c->lock);
			}
			resynced = true;
			break;
		}
		for (size_t i = 0; i < n; i++) {
			dcr_cache_path(c, hashes[i], path, sizeof(path));
			drop(c, hashes[i], path);
			pthread_mutex_lock(&c->lock);
			c->st.evictions++;
			over = c->bytes > c->budget;
			pthread_mutex_unlock(&c->lock);
			if (!over)
				break;
		}
	}
	pthread_mutex_unlock(&c->evict_lock);
	/* A put whose evict found us busy after our last check relies on
	 * us: look once more now that the lock is free. */
	if (!resynced) {
		int over;

		pthread_mutex_lock(&c->lock);
		over = c->bytes > c->budget;
		pthread_mutex_unlock(&c->lock);
		if (over)
			goto again;
	}
}

int dcr_cache_put(struct dcr_cache *c, const uint8_t hash[DCR_HASH_LEN],
		  const void *data, size_t len, unsigned flags)
{
	char path[PATH_MAX], tmp[PATH_MAX];
	char hex[DCR_HASH_HEX_LEN + 1];
	int64_t now = now_ms();
	bool direct = (flags & DCR_CACHE_PUT_DIRECT) && len &&
		      !atomic_load(&c->no_direct) && aligned(data, 0, 0);
	uint64_t seq;
	int fd, ret, added = 0;

	dcr_hash_hex(hash, hex);
	dcr_cache_path(c, hash, path, sizeof(path));
	pthread_mutex_lock(&c->lock);
	seq = ++c->tmp_seq;
	pthread_mutex_unlock(&c->lock);
	snprintf(tmp, sizeof(tmp), "%s/%s.%ld.%llu", c->tmp_dir, hex,
		 (long)getpid(), (unsigned long long)seq);

	/* No fsync: a file torn by a crash fails verification on its first
	 * use after the restart and is fetched again. */
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC |
		       (direct ? O_DIRECT : 0), 0600);
	if (fd < 0 && direct && errno == EINVAL) {
		atomic_store(&c->no_direct, true);
		direct = false;
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	}
	if (fd < 0) {
		ret = -errno;
		goto err_log;
	}
	if (direct) {
		/* Whole blocks, then cut to size. */
		size_t wlen = DCR_ROUND_UP(len, DCR_CACHE_ALIGN);

		ret = dcr_write_full(fd, data, wlen);
		if (ret == -EINVAL) {
			/* Alignment refused after all: write it plainly. */
			atomic_store(&c->no_direct, true);
			ret = fcntl(fd, F_SETFL, 0) < 0 ? -errno : 0;
			if (!ret && ftruncate(fd, 0) < 0)
				ret = -errno;
			if (!ret)
				ret = dcr_pwrite_full(fd, data, len, 0);
		} else if (!ret && wlen != len && ftruncate(fd, (off_t)len) < 0) {
			ret = -errno;
		}
	} else {
		ret = dcr_write_full(fd, data, len);
	}
	if (!ret)
		xxh_set(c, fd, data, len);
	if (close(fd) < 0 && !ret)
		ret = -errno;
	if (ret)
		goto err_unlink;
	if (rename(tmp, path) < 0) {
		ret = -errno;
		goto err_unlink;
	}
	ret = dcr_catalog_cache_add(c->cat, hash, len, now, &added);
	if (ret) {
		unlink(path); /* a file without a row escapes the budget */
		goto err_log;
	}
	pthread_mutex_lock(&c->lock);
	if (added)
		c->bytes += len;
	c->st.inserts++;
	vset_add(c, hash, now);
	pthread_mutex_unlock(&c->lock);
	evict(c);
	return 0;

err_unlink:
	unlink(tmp);
err_log:
	dcr_warn("cache: cannot store chunk %s: %s", hex, dcr_strerror(ret));
	return ret;
}
