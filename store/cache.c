/* SPDX-License-Identifier: MIT */
/*
 * cache.c - the chunk cache of slab files (see cache.h).
 *
 * Locking: @lock guards the slab table, every slab's descriptors,
 * bitmaps, byte count, last use and reference count, the byte total and
 * the counters; it is held for bookkeeping and for opening a slab (one
 * open(2) and a SEEK_DATA scan, once per slab and mount), never across
 * the reads and writes of chunk data. A slab in use holds a reference:
 * eviction takes it off the table and unlinks it at once, and the last
 * user closes it. @evict_lock lets one thread at a time evict (others
 * skip: one evictor suffices).
 *
 * A chunk is "present" once its whole range is allocated in its slab
 * and "proven" once this instance wrote it or checked it. A reader uses
 * a present chunk only after proving it (or the proof it has), and a
 * writer marks a chunk present only after its write completed, so no
 * reader sees half a chunk; a chunk that a crash tore is allocated but
 * fails its check on first use and is punched out.
 *
 * A proven chunk is never rewritten with other bytes: the budget evicts
 * whole slabs (unlinked, their open descriptors still read), and a
 * chunk is punched only when it failed its check, under its slab's
 * @wlock, which every write of a chunk holds too, and only if it still
 * fails under it. Every copy out of a slab is checked, proven or not
 * (a byte may rot on disk after its first use), so a reader racing a
 * punch reads zeros that fail the check, a miss. A descriptor of
 * dcr_cache_open_fd reads what the disk holds: its user checks it.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "cache.h"
#include "chunk.h"
#include "common.h"
#include "fileio.h"
#include "reader.h" /* DCR_CACHE_SIZE_DEFAULT */

/* Slabs kept open (descriptors and bitmaps) when idle. */
#define SLAB_OPEN_MAX 64
/* Rewrite a slab's mtime (its last use) at most this often. */
#define STAMP_INTERVAL_MS (60 * 1000)
/* Free space slabs leave on their file system, for the catalog next to
 * them (see fs_room): an eighth of the file system, within these. */
#define HEADROOM_MIN ((uint64_t)256 << 10)
#define HEADROOM_MAX ((uint64_t)64 << 20)

struct slab {
	uint64_t v;
	uint32_t file;
	int fd;              /* read-write; -1 while closed */
	int dfd;             /* O_DIRECT, opened on first need; -1 */
	uint32_t cs;         /* slot stride: the version's chunk size */
	uint64_t size;       /* the file's size (slab length) */
	uint64_t nbits;      /* chunks the bitmaps cover */
	uint64_t *present;   /* allocated in the slab */
	uint64_t *proven;    /* written or checked by this instance */
	uint64_t bytes;      /* accounted against the budget */
	int64_t used_ms;     /* last use */
	int64_t stamped_ms;  /* last use written as the mtime */
	pthread_mutex_t wlock; /* writes and punches of its chunks */
	unsigned refs;       /* users; a dead slab is freed by the last */
	unsigned pins;       /* dcr_cache_pin holders (each holds a ref) */
	bool verified;       /* read and checked whole for a pin (this
				instance; cleared when a chunk goes) */
	uint64_t dead_bytes; /* what a pinned slab held when it died */
	bool dead;           /* evicted: off the table, unlinked */
	uint64_t epoch;      /* this opening's (slab_open), for its sums */
};

/*
 * Sub-block sums (see cache.h, "partial reads"): the XXH3-128 of each
 * SUB_SIZE bytes of a chunk, computed from the very buffer that was just
 * read whole and proven against the manifest. Keyed by the slab's epoch
 * (a new one at every slab_open: its proven bits start empty) and the
 * chunk; dropped when the chunk is punched or rewritten; LRU within
 * SUMS_BUDGET bytes.
 */
#define SUB_SHIFT 16
#define SUB_SIZE ((uint32_t)1 << SUB_SHIFT)
#define SUMS_BUDGET ((size_t)4 << 20)
#define SUMS_BUCKETS 4096

struct sums {
	struct sums *next;          /* bucket chain */
	struct sums *older, *newer; /* LRU list */
	uint64_t epoch, chunk;
	uint8_t check[DCR_XXH_LEN]; /* the key's xxh (or hash) prefix */
	uint32_t len;               /* the chunk's length */
	uint32_t n;                 /* sub-blocks */
	uint8_t sum[][DCR_XXH_LEN];
};

struct dcr_cache {
	char *dir;       /* <dir>/slabs */
	uint64_t budget;
	uint64_t headroom; /* free space slabs leave (see fs_room) */

	pthread_mutex_t lock;
	struct slab **tab; /* sorted by (v, file) */
	size_t n, cap;
	size_t nopen;
	uint64_t bytes;
	/* Bytes of pinned slabs that were unlinked: still on disk until
	 * their last unpin, so still within the budget. */
	uint64_t dead_pinned;
	/* The budget in effect: @budget, or less while the file system
	 * holds less (fs_room, dcr_cache_make_room). */
	uint64_t limit;
	struct dcr_cache_stats st;

	/* Fences of re-indexed versions (dcr_cache_drop_version), sorted by
	 * v: keys of fence[i].v with a gen below fence[i].gen are refused.
	 * Under @lock. */
	struct fence {
		uint64_t v;
		uint32_t gen;
	} *fences;
	size_t nfences;

	pthread_mutex_t evict_lock;
	atomic_bool no_direct; /* O_DIRECT refused here: stop trying */
	atomic_bool no_punch;  /* hole punching refused here */
	atomic_bool said_small; /* warned that one slab exceeds the budget */
	atomic_bool fs_short;   /* the file system is short of the budget:
				   said once per incident (fs_room) */

	/* Sub-block sums, under sums_lock (taken after @lock, never
	 * before). */
	pthread_mutex_t sums_lock;
	struct sums **sums_tab;        /* SUMS_BUCKETS chains */
	struct sums *sums_new, *sums_old; /* LRU ends */
	size_t sums_bytes;
	uint64_t epochs;               /* last epoch given (under @lock) */
};

static int64_t now_ms(void)
{
	return dcr_now_ns() / 1000000;
}

static bool bit(const uint64_t *m, uint64_t nbits, uint64_t i)
{
	return i < nbits && (m[i / 64] >> (i % 64)) & 1;
}

static void bit_set(uint64_t *m, uint64_t i, bool on)
{
	if (on)
		m[i / 64] |= UINT64_C(1) << (i % 64);
	else
		m[i / 64] &= ~(UINT64_C(1) << (i % 64));
}

/* Length of chunk @i of slab @s. */
static uint32_t slot_len(const struct slab *s, uint64_t i)
{
	return dcr_chunk_len(s->size, s->cs, i);
}

/* Whether @err says the file system is full (see fs_room). */
static bool is_full(int err)
{
	return err == -ENOSPC || err == -EDQUOT;
}

/* What a chunk of @len bytes occupies on disk, as the budget counts it. */
static uint64_t alloc_len(uint32_t len)
{
	return DCR_ROUND_UP((uint64_t)len, DCR_CACHE_ALIGN);
}

void dcr_cache_slab_path(const struct dcr_cache *c, uint64_t v, uint32_t file,
			 char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/v%010" PRIu64 ".f%" PRIu32, c->dir, v, file);
}

static int parse_slab_name(const char *name, uint64_t *v, uint32_t *file)
{
	unsigned long long vv;
	unsigned ff;
	int end = 0;

	if (sscanf(name, "v%10llu.f%u%n", &vv, &ff, &end) != 2 ||
	    name[end] != '\0' || strlen(name) < 14 || vv == 0)
		return -1;
	*v = vv;
	*file = ff;
	return 0;
}

/* ------------------------------------------------------------ table */

static int cmp_key(uint64_t v, uint32_t file, const struct slab *s)
{
	if (v != s->v)
		return v < s->v ? -1 : 1;
	return file < s->file ? -1 : file > s->file ? 1 : 0;
}

/* Index of the first slab >= (@v, @file). Caller holds @lock. */
static size_t tab_lower(const struct dcr_cache *c, uint64_t v, uint32_t file)
{
	size_t lo = 0, hi = c->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (cmp_key(v, file, c->tab[mid]) > 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int tab_insert(struct dcr_cache *c, size_t at, struct slab *s)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 64;
		struct slab **t = realloc(c->tab, cap * sizeof(*t));
		if (!t)
			return DCR_ERR(-ENOMEM);
		c->tab = t;
		c->cap = cap;
	}
	memmove(&c->tab[at + 1], &c->tab[at], (c->n - at) * sizeof(*c->tab));
	c->tab[at] = s;
	c->n++;
	return 0;
}

static void tab_remove(struct dcr_cache *c, struct slab *s)
{
	size_t i = tab_lower(c, s->v, s->file);

	if (i < c->n && c->tab[i] == s) {
		memmove(&c->tab[i], &c->tab[i + 1],
			(c->n - i - 1) * sizeof(*c->tab));
		c->n--;
	}
}

/* Write @ms (milliseconds) as @s's mtime: its last use. Best effort. */
static void stamp(struct slab *s, int64_t ms)
{
	struct timespec ts[2] = {
		{ .tv_nsec = UTIME_OMIT },
		{ .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000 },
	};

	futimens(s->fd, ts);
}

/* Close @s's descriptors and drop its bitmaps. Caller holds @lock. */
static void slab_shut(struct dcr_cache *c, struct slab *s)
{
	if (s->fd < 0)
		return;
	if (s->used_ms > s->stamped_ms)
		stamp(s, s->used_ms); /* its last use outlives this mount */
	close(s->fd);
	if (s->dfd >= 0)
		close(s->dfd);
	s->fd = s->dfd = -1;
	free(s->present);
	free(s->proven);
	s->present = s->proven = NULL;
	s->nbits = 0;
	c->nopen--;
}

/* Close the least recently used idle open slab but @keep. */
static void close_idle(struct dcr_cache *c, const struct slab *keep)
{
	struct slab *lru = NULL;

	for (size_t i = 0; i < c->n; i++) {
		struct slab *s = c->tab[i];
		if (s != keep && s->fd >= 0 && !s->refs &&
		    (!lru || s->used_ms < lru->used_ms))
			lru = s;
	}
	if (lru)
		slab_shut(c, lru);
}

/*
 * Mark the chunks of @s whose whole range is allocated: one
 * SEEK_DATA/SEEK_HOLE walk. Caller holds @lock; @s is open.
 */
static void scan_present(struct slab *s)
{
	off_t off = 0, d, h;

	while ((d = lseek(s->fd, off, SEEK_DATA)) >= 0) {
		uint64_t i;

		h = lseek(s->fd, d, SEEK_HOLE);
		if (h < 0)
			break;
		for (i = DCR_ROUND_UP((uint64_t)d, s->cs) / s->cs;
		     i < s->nbits && i * s->cs + slot_len(s, i) <= (uint64_t)h;
		     i++)
			bit_set(s->present, i, true);
		off = h;
	}
}

static uint64_t present_bytes(const struct slab *s)
{
	uint64_t b = 0;

	for (uint64_t i = 0; i < s->nbits; i++)
		if (bit(s->present, s->nbits, i))
			b += alloc_len(slot_len(s, i));
	return b;
}

/*
 * Open @s for key @k (created if @create). Caller holds @lock. 0,
 * -ENOENT (absent and not @create) or -errno.
 */
static int slab_open(struct dcr_cache *c, struct slab *s,
		     const struct dcr_cache_key *k, bool create)
{
	char path[PATH_MAX];
	uint64_t words;
	struct stat sb;
	int fd;

	dcr_cache_slab_path(c, s->v, s->file, path, sizeof(path));
	fd = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
	if (fd < 0)
		return errno == ENOENT ? -ENOENT : -errno;
	if (fstat(fd, &sb) < 0 ||
	    ((uint64_t)sb.st_size < k->file_size &&
	     ftruncate(fd, (off_t)k->file_size) < 0)) {
		int e = -errno;
		close(fd);
		return e;
	}
	s->cs = k->chunk_size;
	s->size = k->file_size;
	s->nbits = dcr_chunk_count(k->file_size, k->chunk_size);
	words = s->nbits / 64 + 1;
	s->present = calloc(words, sizeof(uint64_t));
	s->proven = calloc(words, sizeof(uint64_t));
	if (!s->present || !s->proven) {
		free(s->present);
		free(s->proven);
		s->present = s->proven = NULL;
		close(fd);
		return DCR_ERR(-ENOMEM);
	}
	s->fd = fd;
	s->dfd = -1;
	s->epoch = ++c->epochs;
	scan_present(s);
	/* The estimate from the allocated size becomes the exact count. */
	c->bytes -= DCR_MIN(c->bytes, s->bytes);
	s->bytes = present_bytes(s);
	c->bytes += s->bytes;
	if (++c->nopen > SLAB_OPEN_MAX)
		close_idle(c, s);
	return 0;
}

/* Free a slab off the table, descriptors closed. */
static void slab_free(struct slab *s)
{
	pthread_mutex_destroy(&s->wlock);
	free(s);
}

/* Drop a reference; the last one frees an evicted slab. Takes @lock. */
static void slab_put(struct dcr_cache *c, struct slab *s)
{
	pthread_mutex_lock(&c->lock);
	if (--s->refs == 0 && s->dead) {
		slab_shut(c, s);
		slab_free(s);
	}
	pthread_mutex_unlock(&c->lock);
}

/* Take @s off the table and unlink it. Caller holds @lock. */
static void slab_evict(struct dcr_cache *c, struct slab *s)
{
	char path[PATH_MAX];

	dcr_cache_slab_path(c, s->v, s->file, path, sizeof(path));
	tab_remove(c, s);
	s->dead = true;
	c->bytes -= DCR_MIN(c->bytes, s->bytes);
	if (s->pins) {
		s->dead_bytes = s->bytes;
		c->dead_pinned += s->bytes;
	}
	s->bytes = 0;
	unlink(path);
	if (s->refs == 0) {
		slab_shut(c, s);
		slab_free(s);
	}
}

/* Index of the first fence of a version >= @v (fences are sorted: a
 * lookup per chunk access, and a fence per version ever dropped or
 * re-indexed). Caller holds @lock. */
static size_t fence_lower(const struct dcr_cache *c, uint64_t v)
{
	return dcr_lower_bound_u64(c->fences, c->nfences, sizeof(*c->fences),
				   offsetof(struct fence, v), v);
}

/* Whether @k is of an index of its version older than the fence.
 * Caller holds @lock. */
static bool fenced(const struct dcr_cache *c, const struct dcr_cache_key *k)
{
	size_t i;

	if (!c->nfences)
		return false;
	i = fence_lower(c, k->v);
	return i < c->nfences && c->fences[i].v == k->v &&
	       k->gen < c->fences[i].gen;
}

size_t dcr_cache_drop_version(struct dcr_cache *c, uint64_t v, uint32_t gen)
{
	size_t i, dropped = 0;

	pthread_mutex_lock(&c->lock);
	i = fence_lower(c, v);
	if (i == c->nfences || c->fences[i].v != v) {
		struct fence *t = realloc(c->fences,
					  (c->nfences + 1) * sizeof(*t));
		if (t) {
			c->fences = t;
			memmove(&t[i + 1], &t[i],
				(c->nfences - i) * sizeof(*t));
			t[i].v = v;
			t[i].gen = 0;
			c->nfences++;
		} else {
			i = c->nfences; /* below: no fence */
			dcr_warn("cache: out of memory fencing version %" PRIu64
				 "; chunks built for its old index may be "
				 "stored", v);
		}
	}
	if (i < c->nfences && c->fences[i].gen < gen)
		c->fences[i].gen = gen;
	/* Every slab of @v: the table holds those on disk too (counted at
	 * open), opened or not. */
	while ((i = tab_lower(c, v, 0)) < c->n && c->tab[i]->v == v) {
		slab_evict(c, c->tab[i]);
		dropped++;
	}
	pthread_mutex_unlock(&c->lock);
	return dropped;
}

/*
 * The open slab of @k with a reference, created with @create; NULL with
 * *@err (-ENOENT: not cached). A slab laid out for another chunk size
 * or a shorter file (a store recreated under this cache) is replaced.
 */
static struct slab *slab_get(struct dcr_cache *c, const struct dcr_cache_key *k,
			     bool create, int *err)
{
	struct slab *s = NULL;
	size_t i;
	int ret;

	pthread_mutex_lock(&c->lock);
	if (fenced(c, k)) {
		*err = -ESTALE; /* an older index's key: never its slab */
		goto out_unlock;
	}
	i = tab_lower(c, k->v, k->file);
	if (i < c->n && cmp_key(k->v, k->file, c->tab[i]) == 0) {
		s = c->tab[i];
		if (s->fd >= 0 && (s->cs != k->chunk_size ||
				   s->size < k->file_size)) {
			slab_evict(c, s);
			s = NULL;
		}
	}
	if (!s) {
		if (!create) {
			*err = -ENOENT;
			goto out_unlock;
		}
		s = calloc(1, sizeof(*s));
		if (!s) {
			*err = DCR_ERR(-ENOMEM);
			goto out_unlock;
		}
		s->v = k->v;
		s->file = k->file;
		s->fd = s->dfd = -1;
		pthread_mutex_init(&s->wlock, NULL);
		i = tab_lower(c, k->v, k->file);
		ret = tab_insert(c, i, s);
		if (ret) {
			slab_free(s);
			s = NULL;
			*err = ret;
			goto out_unlock;
		}
	}
	if (s->fd < 0) {
		ret = slab_open(c, s, k, create);
		if (ret) {
			if (ret == -ENOENT) {
				/* Gone behind our back: forget it. */
				slab_evict(c, s);
			} else if (!is_full(ret)) { /* full: the caller says */
				dcr_warn("cache: slab v%" PRIu64 ".f%" PRIu32
					 ": %s", k->v, k->file,
					 dcr_strerror(ret));
			}
			s = NULL;
			*err = ret;
			goto out_unlock;
		}
	}
	s->refs++;
out_unlock:
	pthread_mutex_unlock(&c->lock);
	return s;
}

/* The O_DIRECT descriptor of @s, or -1. Takes @lock. */
static int slab_dfd(struct dcr_cache *c, struct slab *s)
{
	char path[PATH_MAX];
	int fd;

	if (atomic_load(&c->no_direct))
		return -1;
	pthread_mutex_lock(&c->lock);
	if (s->dfd < 0) {
		dcr_cache_slab_path(c, s->v, s->file, path, sizeof(path));
		s->dfd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
		if (s->dfd < 0 && errno == EINVAL)
			atomic_store(&c->no_direct, true);
		else if (s->dfd >= 0) {
			/* The slab checked through fd, not one renamed over it. */
			struct stat a, b;
			if (fstat(s->fd, &a) < 0 || fstat(s->dfd, &b) < 0 ||
			    a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
				close(s->dfd);
				s->dfd = -1;
			}
		}
	}
	fd = s->dfd;
	pthread_mutex_unlock(&c->lock);
	return fd;
}

/* ---------------------------------------------------- sub-block sums */

static size_t sums_bucket(uint64_t epoch, uint64_t chunk)
{
	uint64_t h = epoch * 0x9E3779B97F4A7C15ULL ^
		     chunk * 0xC2B2AE3D27D4EB4FULL;

	return (size_t)(h >> 40) % SUMS_BUCKETS;
}

/* What a chunk of @k must hash to, as the sums remember it. */
static const uint8_t *key_check(const struct dcr_cache_key *k)
{
	return k->xxh ? k->xxh : k->hash;
}

/* The sums of (@epoch, @chunk), or NULL. Caller holds sums_lock. */
static struct sums *sums_find(const struct dcr_cache *c, uint64_t epoch,
			      uint64_t chunk)
{
	struct sums *e = c->sums_tab[sums_bucket(epoch, chunk)];

	while (e && (e->epoch != epoch || e->chunk != chunk))
		e = e->next;
	return e;
}

/* Take @e off its chain and the LRU list. Caller holds sums_lock. */
static void sums_unlink(struct dcr_cache *c, struct sums *e)
{
	struct sums **pp = &c->sums_tab[sums_bucket(e->epoch, e->chunk)];

	while (*pp != e)
		pp = &(*pp)->next;
	*pp = e->next;
	if (e->older)
		e->older->newer = e->newer;
	else
		c->sums_old = e->newer;
	if (e->newer)
		e->newer->older = e->older;
	else
		c->sums_new = e->older;
	c->sums_bytes -= sizeof(*e) + (size_t)e->n * sizeof(e->sum[0]);
}

/* Put @e at the newest end of the LRU list. Caller holds sums_lock. */
static void sums_link_new(struct dcr_cache *c, struct sums *e)
{
	e->newer = NULL;
	e->older = c->sums_new;
	if (c->sums_new)
		c->sums_new->newer = e;
	else
		c->sums_old = e;
	c->sums_new = e;
}

/* Forget the sums of chunk @i of @s (punched or rewritten). */
static void sums_drop(struct dcr_cache *c, const struct slab *s, uint64_t i)
{
	struct sums *e;

	if (!c->sums_tab)
		return;
	pthread_mutex_lock(&c->sums_lock);
	e = sums_find(c, s->epoch, i);
	if (e)
		sums_unlink(c, e);
	pthread_mutex_unlock(&c->sums_lock);
	free(e);
}

/*
 * Keep the sums of chunk @k of the slab opening @epoch, computed from
 * @buf: its @k->len bytes just read whole and proven against @k's hash.
 * Best effort (nothing is kept without memory).
 */
static void sums_keep(struct dcr_cache *c, const struct dcr_cache_key *k,
		      uint64_t epoch, const uint8_t *buf)
{
	uint32_t n = (uint32_t)(((uint64_t)k->len + SUB_SIZE - 1) >> SUB_SHIFT);
	size_t sz = sizeof(struct sums) + (size_t)n * DCR_XXH_LEN;
	struct sums *e, *old, *gone = NULL;

	if (!c->sums_tab || sz > SUMS_BUDGET / 4)
		return;
	e = malloc(sz);
	if (!e)
		return;
	e->epoch = epoch;
	e->chunk = k->chunk;
	e->len = k->len;
	e->n = n;
	memcpy(e->check, key_check(k), DCR_XXH_LEN);
	for (uint32_t i = 0; i < n; i++) {
		uint64_t at = (uint64_t)i << SUB_SHIFT;

		dcr_xxh128(buf + at, DCR_MIN((uint64_t)SUB_SIZE, k->len - at),
			   e->sum[i]);
	}
	pthread_mutex_lock(&c->sums_lock);
	old = sums_find(c, epoch, k->chunk);
	if (old)
		sums_unlink(c, old);
	while (c->sums_old && c->sums_bytes + sz > SUMS_BUDGET) {
		struct sums *lru = c->sums_old;

		sums_unlink(c, lru);
		lru->next = gone; /* freed outside the lock */
		gone = lru;
	}
	e->next = c->sums_tab[sums_bucket(epoch, k->chunk)];
	c->sums_tab[sums_bucket(epoch, k->chunk)] = e;
	sums_link_new(c, e);
	c->sums_bytes += sz;
	pthread_mutex_unlock(&c->sums_lock);
	free(old);
	while (gone) {
		struct sums *next = gone->next;

		free(gone);
		gone = next;
	}
}

/*
 * Punch out chunk @i of @s after a failed check or write (it is no
 * longer proven). Caller holds @s->wlock (see the locking notes).
 */
static void punch(struct dcr_cache *c, struct slab *s, uint64_t i)
{
	uint64_t off = i * s->cs;
	uint64_t len = DCR_ROUND_UP((uint64_t)slot_len(s, i), DCR_CACHE_ALIGN);

	sums_drop(c, s, i);
	pthread_mutex_lock(&c->lock);
	s->verified = false;
	if (s->pins) {
		/* The kernel reads this file for a passthrough open: a hole
		 * would read as zeros there. Unlink it whole instead; its
		 * chunks are fetched again into a new slab. */
		bit_set(s->present, i, false);
		bit_set(s->proven, i, false);
		if (!s->dead)
			slab_evict(c, s);
		pthread_mutex_unlock(&c->lock);
		return;
	}
	if (bit(s->present, s->nbits, i)) {
		bit_set(s->present, i, false);
		if (!s->dead) {
			s->bytes -= DCR_MIN(s->bytes, alloc_len(slot_len(s, i)));
			c->bytes -= DCR_MIN(c->bytes, alloc_len(slot_len(s, i)));
		}
	}
	if (i < s->nbits)
		bit_set(s->proven, i, false);
	pthread_mutex_unlock(&c->lock);
	if (!atomic_load(&c->no_punch) &&
	    fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      (off_t)off, (off_t)len) < 0 &&
	    (errno == EOPNOTSUPP || errno == ENOSYS) &&
	    !atomic_exchange(&c->no_punch, true))
		dcr_warn("cache %s: the file system cannot punch holes; "
			 "chunks that fail their check stay allocated and "
			 "are checked again at every mount", c->dir);
}

/* ------------------------------------------------------- file system */

/*
 * The slabs share their file system with the catalog (and whatever else
 * is there), which may hold less than the budget: a small disk, a
 * tmpfs, space taken by others. Slabs never use its last @headroom
 * bytes: before a chunk is written, the free space it would leave is
 * checked (one statvfs, next to a write of a whole chunk), and if it
 * would leave less, the budget in effect (@limit) shrinks to what the
 * file system holds and slabs are evicted for the chunk, or it is not
 * cached. So the catalog keeps room to index new versions, and a full
 * file system (ENOSPC) is the budget reached, not an error per chunk:
 * it is said once per incident, which ends when the budget fits again.
 * Should the catalog find its file system full all the same, it asks
 * for room (dcr_cache_make_room).
 */

/* The bytes free for us on the cache's file system into *@free, and its
 * size into *@size (may be NULL). 0 or -errno. */
static int fs_space(const struct dcr_cache *c, uint64_t *free, uint64_t *size)
{
	struct statvfs sv;

	if (statvfs(c->dir, &sv) < 0)
		return -errno;
	*free = (uint64_t)sv.f_bavail * sv.f_frsize;
	if (size)
		*size = (uint64_t)sv.f_blocks * sv.f_frsize;
	return 0;
}

/* What the slabs may hold with @free bytes free: what they hold and the
 * free space, less the headroom. Caller holds @lock. */
static uint64_t fs_cap(const struct dcr_cache *c, uint64_t free)
{
	if (free >= c->headroom)
		return c->bytes + (free - c->headroom);
	return c->bytes - DCR_MIN(c->bytes, c->headroom - free);
}

/* Say once per incident that the file system holds less than the budget. */
static void say_short(struct dcr_cache *c)
{
	char a[32], b[32], h[32];
	uint64_t free = 0;

	if (atomic_exchange(&c->fs_short, true))
		return;
	if (fs_space(c, &free, NULL) < 0)
		free = 0;
	dcr_warn("cache %s: its file system is full (%s free): cached chunks "
		 "are evicted to keep %s free for the catalog, and the cache "
		 "stays below its budget (%s) while it is", c->dir,
		 dcr_format_size(free, a, sizeof(a)),
		 dcr_format_size(c->headroom, h, sizeof(h)),
		 dcr_format_size(c->budget, b, sizeof(b)));
}

static void evict(struct dcr_cache *c, struct slab *keep, uint64_t room);

/*
 * Before @need bytes are written into slab @keep: cap the budget in
 * effect to what the file system holds and, if the write would leave
 * less than the headroom free, evict for it (@keep last). 1 if the file
 * system holds the whole budget and the headroom more (no incident), 0
 * if the write may go ahead, -ENOSPC if it would eat into the headroom
 * all the same (the chunk is then not cached).
 */
static int fs_room(struct dcr_cache *c, struct slab *keep, uint64_t need)
{
	uint64_t free = 0, cap;
	bool fits, whole, dead;

	if (fs_space(c, &free, NULL) < 0)
		return 0; /* cannot tell: the write will say */
	pthread_mutex_lock(&c->lock);
	cap = fs_cap(c, free);
	/* (with a margin, so that an incident does not end and begin again
	 * at every chunk while the file system is about the budget) */
	whole = cap >= c->budget + c->headroom;
	c->limit = DCR_MIN(c->budget, cap);
	fits = free >= c->headroom + need;
	pthread_mutex_unlock(&c->lock);
	if (fits)
		return whole;
	say_short(c);
	evict(c, keep, need);
	pthread_mutex_lock(&c->lock);
	dead = keep && keep->dead; /* evicted itself: nothing to write to */
	pthread_mutex_unlock(&c->lock);
	if (dead || (fs_space(c, &free, NULL) == 0 &&
		     free < c->headroom + need))
		return -ENOSPC;
	return 0;
}

int dcr_cache_make_room(struct dcr_cache *c, uint64_t want)
{
	uint64_t before, after;

	if (!want)
		want = c->headroom;
	pthread_mutex_lock(&c->lock);
	before = c->bytes;
	c->limit = DCR_MIN(c->limit, c->bytes);
	c->limit -= DCR_MIN(c->limit, want);
	pthread_mutex_unlock(&c->lock);
	say_short(c);
	evict(c, NULL, 0);
	pthread_mutex_lock(&c->lock);
	after = c->bytes;
	pthread_mutex_unlock(&c->lock);
	return after < before ? 0 : -ENOSPC;
}

int dcr_cache_room_hook(void *cache, uint64_t want)
{
	return dcr_cache_make_room(cache, want);
}

/* ------------------------------------------------------------- open */

/* Count the slabs on disk: allocated bytes and last use of each. */
static int scan_slabs(struct dcr_cache *c)
{
	struct dirent *de;
	DIR *d = opendir(c->dir);
	int ret = 0;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		struct slab *s;
		struct stat sb;
		uint64_t v;
		uint32_t file;

		if (parse_slab_name(de->d_name, &v, &file) != 0 ||
		    fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(sb.st_mode))
			continue;
		s = calloc(1, sizeof(*s));
		if (!s) {
			ret = DCR_ERR(-ENOMEM);
			break;
		}
		s->v = v;
		s->file = file;
		s->fd = s->dfd = -1;
		pthread_mutex_init(&s->wlock, NULL);
		s->bytes = (uint64_t)sb.st_blocks * 512;
		s->used_ms = s->stamped_ms = (int64_t)sb.st_mtim.tv_sec * 1000 +
					    sb.st_mtim.tv_nsec / 1000000;
		ret = tab_insert(c, c->n, s);
		if (ret) {
			slab_free(s);
			break;
		}
		c->bytes += s->bytes;
	}
	closedir(d);
	return ret;
}

/*
 * The headroom for the cache's file system and, if it holds less than
 * the budget, the budget in effect, said once (at mount time).
 */
static void open_fit(struct dcr_cache *c)
{
	char a[32], b[32], f[32], l[32], h[32];
	uint64_t free = 0, size = 0;

	if (fs_space(c, &free, &size) < 0)
		return; /* as if it held the budget: writes will say */
	c->headroom = DCR_MIN(HEADROOM_MAX, DCR_MAX(HEADROOM_MIN, size / 8));
	c->limit = DCR_MIN(c->budget, fs_cap(c, free));
	if (c->limit >= c->budget)
		return;
	atomic_store(&c->fs_short, true); /* the incident is said here */
	dcr_warn("cache %s: cache_size %s is more than its file system holds "
		 "(%s, %s free): the cache keeps to %s, leaving %s free for "
		 "the catalog", c->dir, dcr_format_size(c->budget, b, sizeof(b)),
		 dcr_format_size(size, a, sizeof(a)),
		 dcr_format_size(free, f, sizeof(f)),
		 dcr_format_size(c->limit, l, sizeof(l)),
		 dcr_format_size(c->headroom, h, sizeof(h)));
}

static int cmp_slab(const void *a, const void *b)
{
	const struct slab *x = *(const struct slab *const *)a;
	const struct slab *y = *(const struct slab *const *)b;

	return cmp_key(x->v, x->file, y);
}

int dcr_cache_open(const char *dir, uint64_t budget, struct dcr_cache **out)
{
	struct dcr_cache *c;
	char old[PATH_MAX];
	struct stat sb;
	int ret;

	*out = NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return DCR_ERR(-ENOMEM);
	c->budget = budget ? budget : DCR_CACHE_SIZE_DEFAULT;
	c->limit = c->budget;
	c->dir = malloc(strlen(dir) + sizeof("/slabs"));
	if (!c->dir) {
		ret = DCR_ERR(-ENOMEM);
		goto err_free;
	}
	sprintf(c->dir, "%s/slabs", dir);
	if (mkdir(c->dir, 0700) < 0 && errno != EEXIST) {
		ret = -errno;
		dcr_err("cache %s: %s", c->dir, dcr_strerror(ret));
		goto err_free;
	}
	ret = scan_slabs(c);
	if (ret) {
		dcr_err("cache %s: %s", c->dir, dcr_strerror(ret));
		goto err_free;
	}
	if (c->n)
		qsort(c->tab, c->n, sizeof(*c->tab), cmp_slab);
	snprintf(old, sizeof(old), "%s/chunks", dir);
	if (stat(old, &sb) == 0)
		dcr_info("cache %s: %s holds chunk files of an older dcrfs, "
			 "which this one does not use; remove it to free its "
			 "space", dir, old);
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->evict_lock, NULL);
	pthread_mutex_init(&c->sums_lock, NULL);
	/* Without it partial reads read their chunk whole. */
	c->sums_tab = calloc(SUMS_BUCKETS, sizeof(*c->sums_tab));
	c->st.bytes = c->bytes;
	open_fit(c);
	evict(c, NULL, 0);
	*out = c;
	return 0;

err_free:
	for (size_t i = 0; i < c->n; i++)
		slab_free(c->tab[i]);
	free(c->tab);
	free(c->dir);
	free(c);
	return ret;
}

void dcr_cache_close(struct dcr_cache *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++) {
		slab_shut(c, c->tab[i]);
		slab_free(c->tab[i]);
	}
	while (c->sums_old) {
		struct sums *e = c->sums_old;

		sums_unlink(c, e);
		free(e);
	}
	free(c->sums_tab);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->evict_lock);
	pthread_mutex_destroy(&c->sums_lock);
	free(c->fences);
	free(c->tab);
	free(c->dir);
	free(c);
}

void dcr_cache_get_stats(struct dcr_cache *c, struct dcr_cache_stats *s)
{
	pthread_mutex_lock(&c->lock);
	*s = c->st;
	s->bytes = c->bytes + c->dead_pinned;
	pthread_mutex_unlock(&c->lock);
}

/* ------------------------------------------------------------- reads */

static bool aligned(const void *p, uint64_t a, uint64_t b)
{
	return ((uintptr_t)p | a | b) % DCR_CACHE_ALIGN == 0;
}

/*
 * Read @n bytes at @off of slab @s into @dst. A range the page cache
 * holds is copied from it; one that is not resident is read around the
 * page cache (O_DIRECT) when @dst, @off and @n are aligned, so that
 * reading a base chunk once neither allocates and fills page-cache pages
 * for it nor starts read-ahead (which a RWF_NOWAIT read would, and the
 * next chunks would then be read twice). Else (or with @pagecache) a
 * plain read.
 */
static int pread_lean(struct dcr_cache *c, struct slab *s, void *dst,
		      size_t n, uint64_t off, bool pagecache)
{
	int dfd, ret, res;

	if (pagecache || n == 0 || atomic_load(&c->no_direct) ||
	    !aligned(dst, n, off))
		return dcr_pread_full(s->fd, dst, n, off);
	res = dcr_resident(s->fd, off, n);
	if (res == 1)
		return dcr_pread_full(s->fd, dst, n, off);
	if (res < 0) {
		/* No cachestat(2) (before Linux 6.5): ask by reading. */
		struct iovec iov = { dst, n };
		ssize_t got = preadv2(s->fd, &iov, 1, (off_t)off, RWF_NOWAIT);

		if (got == (ssize_t)n)
			return 0;
		if (got < 0 && errno != EAGAIN)
			return dcr_pread_full(s->fd, dst, n, off);
	}
	dfd = slab_dfd(c, s);
	if (dfd < 0)
		return dcr_pread_full(s->fd, dst, n, off);
	ret = dcr_pread_full(dfd, dst, n, off);
	if (ret == -EINVAL) {
		atomic_store(&c->no_direct, true);
		ret = dcr_pread_full(s->fd, dst, n, off);
	}
	return ret;
}

/* Whether @len bytes at @p are the chunk @k says (see cache.h). */
static bool proves(const struct dcr_cache_key *k, const void *p, size_t len)
{
	uint8_t got[DCR_HASH_LEN];

	if (k->xxh) {
		dcr_xxh128(p, len, got);
		return memcmp(got, k->xxh, DCR_XXH_LEN) == 0;
	}
	dcr_sha256(p, len, got);
	return dcr_hash_eq(got, k->hash);
}

/*
 * Read chunk @k whole from @s and prove it; copy the slice [@off,
 * @off+@n) into @dst. The chunk is read into @whole if given (@k->len
 * bytes, aligned), else into @dst when the slice is the whole chunk,
 * else into a scratch buffer. With @keep, the sums of its sub-blocks are
 * kept (under the slab opening @epoch) for the partial reads that may
 * follow (sums_read). 0, -EBADMSG (it fails its check) or -errno.
 */
static int verify_read(struct dcr_cache *c, struct slab *s,
		       const struct dcr_cache_key *k, uint32_t off, void *dst,
		       size_t n, bool pagecache, uint8_t *whole, bool keep,
		       uint64_t epoch)
{
	uint8_t *buf;
	int ret;

	if (whole) {
		buf = whole;
	} else if (off == 0 && n == k->len) {
		buf = dst; /* read in place; dst is unspecified on a miss */
	} else {
		buf = dcr_thread_buf(DCR_TBUF_SCRATCH, k->len);
		if (!buf)
			return DCR_ERR(-ENOMEM);
	}
	ret = pread_lean(c, s, buf, k->len, k->chunk * s->cs, pagecache);
	if (ret == -EIO || ret == -ENODATA)
		ret = -EBADMSG;
	if (!ret && !proves(k, buf, k->len))
		ret = -EBADMSG;
	if (!ret && keep)
		sums_keep(c, k, epoch, buf);
	if (!ret && buf != dst && n)
		memcpy(dst, buf + off, n);
	return ret;
}

/* Sub-blocks one sums_read checks at most (a longer read reads whole). */
#define SUMS_READ_MAX 64

/*
 * Copy [@off, @off+@n) (@n > 0) of chunk @k of @s (opening @epoch) into
 * @dst, reading only the sub-blocks the range covers and checking each
 * against the sums kept when the chunk was last proven whole in this
 * instance (see cache.h). 0, -EAGAIN if no sums are kept for it (or the
 * range is too long for them), -EBADMSG if a sub-block fails, or -errno.
 */
static int sums_read(struct dcr_cache *c, struct slab *s,
		     const struct dcr_cache_key *k, uint64_t epoch,
		     uint32_t off, void *dst, size_t n)
{
	uint8_t want[SUMS_READ_MAX][DCR_XXH_LEN], got[DCR_XXH_LEN];
	uint32_t a = off >> SUB_SHIFT;
	uint32_t b = (uint32_t)((off + n - 1) >> SUB_SHIFT);
	uint64_t from = (uint64_t)a << SUB_SHIFT;
	uint64_t to = DCR_MIN((uint64_t)k->len, (uint64_t)(b + 1) << SUB_SHIFT);
	struct sums *e;
	uint8_t *buf;
	int ret;

	if (!c->sums_tab || b - a + 1 > SUMS_READ_MAX)
		return -EAGAIN;
	pthread_mutex_lock(&c->sums_lock);
	e = sums_find(c, epoch, k->chunk);
	if (e && (e->len != k->len ||
		  memcmp(e->check, key_check(k), DCR_XXH_LEN) != 0))
		e = NULL; /* kept for other content: read whole */
	if (e) {
		memcpy(want, e->sum[a], (size_t)(b - a + 1) * DCR_XXH_LEN);
		if (c->sums_new != e) {
			/* most recently used */
			if (e->older)
				e->older->newer = e->newer;
			else
				c->sums_old = e->newer;
			e->newer->older = e->older;
			sums_link_new(c, e);
		}
	}
	pthread_mutex_unlock(&c->sums_lock);
	if (!e)
		return -EAGAIN;

	if (from == off && to == off + n) {
		buf = dst; /* read in place; dst is unspecified on a failure */
	} else {
		buf = dcr_thread_buf(DCR_TBUF_SCRATCH, (size_t)(to - from));
		if (!buf)
			return DCR_ERR(-ENOMEM);
	}
	ret = pread_lean(c, s, buf, (size_t)(to - from),
			 k->chunk * s->cs + from, false);
	if (ret == -EIO || ret == -ENODATA)
		return -EBADMSG;
	if (ret)
		return ret;
	for (uint32_t i = a; i <= b; i++) {
		uint64_t at = ((uint64_t)i << SUB_SHIFT) - from;

		dcr_xxh128(buf + at, DCR_MIN((uint64_t)SUB_SIZE,
					     to - from - at), got);
		if (memcmp(got, want[i - a], DCR_XXH_LEN) != 0)
			return -EBADMSG;
	}
	if (buf != dst)
		memcpy(dst, buf + (off - from), n);
	return 0;
}

enum { GET_COPY, GET_CHECK, GET_VERIFY };

/*
 * Find chunk @k and make sure it is good: GET_COPY: read it whole and
 * check it (every time: a byte may rot after its first use), and copy
 * bytes [@off, @off+@n) into @dst; GET_CHECK: only prove it, through the
 * page cache, unless this instance proved it already; GET_VERIFY: the
 * same, proven or not. 0 on a hit, 1 on
 * a hit proven now, -ENOENT on a miss (a chunk that fails is punched
 * out, or its pinned slab unlinked), or another -errno on a local I/O
 * error.
 */
static int chunk_get(struct dcr_cache *c, const struct dcr_cache_key *k,
		     int how, uint32_t off, void *dst, size_t n,
		     uint8_t *whole, bool *filled)
{
	int64_t now = now_ms();
	bool present, proven, due;
	bool part = how == GET_COPY && n && n < k->len;
	uint64_t epoch;
	struct slab *s;
	int ret;

	if ((uint64_t)off + n > k->len || k->len == 0)
		return DCR_ERR(-EINVAL);
	s = slab_get(c, k, false, &ret);
	if (!s)
		goto out_miss;
	pthread_mutex_lock(&c->lock);
	present = bit(s->present, s->nbits, k->chunk);
	proven = bit(s->proven, s->nbits, k->chunk);
	epoch = s->epoch;
	if (present && now > s->used_ms)
		s->used_ms = now;
	due = present && now - s->stamped_ms >= STAMP_INTERVAL_MS;
	if (due)
		s->stamped_ms = now;
	pthread_mutex_unlock(&c->lock);
	if (!present) {
		slab_put(c, s);
		ret = -ENOENT;
		goto out_miss;
	}
	if (due)
		stamp(s, now);

	ret = 0;
	if (part && proven) {
		/* A part of a chunk proven whole before: check only the
		 * sub-blocks it covers, against its sums. */
		ret = sums_read(c, s, k, epoch, off, dst, n);
		if (ret == -EAGAIN)
			ret = 1; /* none kept: read it whole below */
	} else if (proven && how == GET_CHECK) {
		ret = 0;
	} else {
		ret = 1;
	}
	if (ret == 1) {
		/* Every copy out of a slab is checked, proven or not: a byte
		 * may rot on disk after the chunk's first use. */
		ret = verify_read(c, s, k, off, dst, n, how != GET_COPY,
				  whole, part, epoch);
		if (ret == 0 && filled)
			*filled = whole != NULL;
		if (ret == 0 && !proven) {
			pthread_mutex_lock(&c->lock);
			bit_set(s->proven, k->chunk, true);
			pthread_mutex_unlock(&c->lock);
			ret = 1;
		}
	}
	if (ret == -EBADMSG) {
		char path[PATH_MAX];
		bool rewritten;

		/* A write may have stored the chunk while we read (writes
		 * hold wlock): then what we read was that write in
		 * progress, not damage, and it reads right now. Another
		 * reader may have punched it already (no longer present). */
		pthread_mutex_lock(&s->wlock);
		sums_drop(c, s, k->chunk);
		pthread_mutex_lock(&c->lock);
		rewritten = !bit(s->present, s->nbits, k->chunk);
		pthread_mutex_unlock(&c->lock);
		if (!rewritten)
			rewritten = verify_read(c, s, k, 0, NULL, 0, false,
							 NULL, false, 0) == 0;
		if (!rewritten)
			punch(c, s, k->chunk);
		pthread_mutex_unlock(&s->wlock);
		if (!rewritten) {
			dcr_cache_slab_path(c, s->v, s->file, path,
					    sizeof(path));
			dcr_warn("cache: %s: chunk %" PRIu64 " failed its "
				 "check; punched out, it will be fetched "
				 "again", path, k->chunk);
		}
		slab_put(c, s);
		pthread_mutex_lock(&c->lock);
		c->st.corrupt += !rewritten;
		c->st.misses++;
		pthread_mutex_unlock(&c->lock);
		return -ENOENT;
	}
	slab_put(c, s);
	if (ret < 0) {
		dcr_warn("cache: slab v%" PRIu64 ".f%" PRIu32 " chunk %"
			 PRIu64 ": %s", k->v, k->file, k->chunk,
			 dcr_strerror(ret));
		return ret == -ENOMEM ? ret : -ENOENT;
	}
	pthread_mutex_lock(&c->lock);
	c->st.hits++;
	pthread_mutex_unlock(&c->lock);
	return ret;

out_miss:
	pthread_mutex_lock(&c->lock);
	c->st.misses++;
	pthread_mutex_unlock(&c->lock);
	return ret == -ENOENT || ret == -ENOMEM ? ret : -ENOENT;
}

int dcr_cache_read(struct dcr_cache *c, const struct dcr_cache_key *k,
		   uint32_t off, void *dst, size_t n)
{
	int ret = chunk_get(c, k, GET_COPY, off, dst, n, NULL, NULL);

	return ret > 0 ? 0 : ret;
}

int dcr_cache_read_part(struct dcr_cache *c, const struct dcr_cache_key *k,
			uint32_t off, void *dst, size_t n, void *whole)
{
	bool filled = false;
	int ret = chunk_get(c, k, GET_COPY, off, dst, n, whole, &filled);

	if (ret < 0)
		return ret;
	return filled ? 1 : 0;
}

int dcr_cache_check(struct dcr_cache *c, const struct dcr_cache_key *k)
{
	return chunk_get(c, k, GET_CHECK, 0, NULL, 0, NULL, NULL);
}

int dcr_cache_verify(struct dcr_cache *c, const struct dcr_cache_key *k)
{
	int ret = chunk_get(c, k, GET_VERIFY, 0, NULL, 0, NULL, NULL);

	return ret > 0 ? 0 : ret;
}

/* ------------------------------------------------------------- pins */

void dcr_cache_advise(struct dcr_cache *c, const struct dcr_cache_key *k,
		      uint64_t off, uint64_t len)
{
	int ret;
	struct slab *s = slab_get(c, k, false, &ret);

	if (!s)
		return;
	posix_fadvise(s->fd, (off_t)off, (off_t)len, POSIX_FADV_WILLNEED);
	slab_put(c, s);
}

/* A pin is its slab: a pinned slab holds a reference, on the table or
 * dead (unlinked) until the pin goes. */
struct dcr_cache_pin;

bool dcr_cache_pin_verified(struct dcr_cache *c,
			    const struct dcr_cache_key *k)
{
	struct slab *s;
	bool v;
	int ret;

	s = slab_get(c, k, false, &ret);
	if (!s)
		return false;
	pthread_mutex_lock(&c->lock);
	v = s->verified;
	pthread_mutex_unlock(&c->lock);
	slab_put(c, s);
	return v;
}

int dcr_cache_pin(struct dcr_cache *c, const struct dcr_cache_key *k,
		  unsigned flags, struct dcr_cache_pin **pin)
{
	char path[PATH_MAX];
	struct stat a, b;
	struct slab *s;
	bool whole = true, first;
	int ret, fd;

	*pin = NULL;
	s = slab_get(c, k, false, &ret);
	if (!s)
		return ret;
	pthread_mutex_lock(&c->lock);
	for (uint64_t i = 0; i < s->nbits && whole; i++)
		whole = bit(s->present, s->nbits, i) &&
			bit(s->proven, s->nbits, i);
	whole = whole && s->size == k->file_size && !s->dead;
	first = whole && s->pins == 0;
	if (whole) {
		s->pins++; /* from here no put, punch or budget touches it */
		c->st.pinned++;
		if (flags & DCR_CACHE_PIN_VERIFIED)
			s->verified = true;
	}
	pthread_mutex_unlock(&c->lock);
	if (!whole) {
		slab_put(c, s);
		return -EAGAIN;
	}
	*pin = (struct dcr_cache_pin *)s;
	/* The kernel reads the backing file to its own end: cut the padding
	 * a direct write of the last chunk left past the file's (no reader
	 * of ours looks there, and nothing else maps it before the first
	 * pin). */
	if (first && fstat(s->fd, &b) == 0 && (uint64_t)b.st_size > s->size) {
		pthread_mutex_lock(&s->wlock);
		if (ftruncate(s->fd, (off_t)s->size) < 0)
			dcr_warn("cache: slab v%" PRIu64 ".f%" PRIu32 ": %s",
				 s->v, s->file, strerror(errno));
		pthread_mutex_unlock(&s->wlock);
	}
	/* A read-only descriptor of the very inode that was proven. */
	dcr_cache_slab_path(c, s->v, s->file, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 || fstat(fd, &a) < 0 || fstat(s->fd, &b) < 0 ||
	    a.st_ino != b.st_ino || a.st_dev != b.st_dev ||
	    (uint64_t)a.st_size != s->size) {
		ret = fd < 0 ? -errno : -ESTALE;
		if (fd >= 0)
			close(fd);
		dcr_cache_unpin(c, *pin);
		*pin = NULL;
		return ret;
	}
	return fd;
}

void dcr_cache_unpin(struct dcr_cache *c, struct dcr_cache_pin *pin)
{
	struct slab *s = (struct slab *)pin;

	if (!s)
		return;
	pthread_mutex_lock(&c->lock);
	s->pins--;
	if (s->dead && !s->pins) {
		c->dead_pinned -= DCR_MIN(c->dead_pinned, s->dead_bytes);
		s->dead_bytes = 0;
	}
	c->st.pinned--;
	pthread_mutex_unlock(&c->lock);
	slab_put(c, s);
	evict(c, NULL, 0); /* what it held may have kept the budget full */
}

/* ------------------------------------------------------------ writes */

/*
 * Evict until within the budget in effect with @room bytes to spare:
 * whole slabs, least recently used first, @keep (the slab written) last.
 * A slab is unlinked, never cut into (see the locking notes): a budget
 * smaller than one file's slab keeps nothing of it, which is said once.
 */
static void evict(struct dcr_cache *c, struct slab *keep, uint64_t room)
{
	bool progress, over;

again:
	if (pthread_mutex_trylock(&c->evict_lock) != 0)
		return; /* someone else is evicting (and looks again below) */
	progress = false;
	pthread_mutex_lock(&c->lock);
	while (c->bytes + c->dead_pinned + room > c->limit) {
		struct slab *lru = NULL;

		/* A pinned slab is in use, and unlinking it frees nothing
		 * until its last unpin. */
		for (size_t k = 0; k < c->n; k++) {
			struct slab *s = c->tab[k];
			if (s != keep && !s->pins &&
			    (!lru || s->used_ms < lru->used_ms))
				lru = s;
		}
		if (!lru && keep && !keep->dead && !keep->pins) {
			lru = keep;
			/* (a file system that holds less said so itself) */
			if (c->limit == c->budget &&
			    !atomic_exchange(&c->said_small, true))
				dcr_warn("cache %s: the budget (%" PRIu64
					 " bytes) is smaller than one file of a "
					 "version; that file is not kept in "
					 "the cache: raise cache_size",
					 c->dir, c->budget);
		}
		if (!lru)
			break;
		slab_evict(c, lru);
		c->st.evictions++;
		progress = true;
	}
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_unlock(&c->evict_lock);
	/* A put whose evict found us busy relies on us: look once more now
	 * that the lock is free (every round evicts a slab, or finds none
	 * to evict and stops). */
	pthread_mutex_lock(&c->lock);
	/* (only after progress: what is left may all be pinned) */
	over = c->bytes + c->dead_pinned + room > c->limit && progress;
	pthread_mutex_unlock(&c->lock);
	if (over)
		goto again;
}

int dcr_cache_put(struct dcr_cache *c, const struct dcr_cache_key *k,
		  const void *data, unsigned flags)
{
	uint64_t off = k->chunk * (uint64_t)k->chunk_size;
	bool direct = (flags & DCR_CACHE_PUT_DIRECT) && aligned(data, 0, 0);
	uint64_t need = alloc_len(k->len);
	struct slab *s;
	bool was;
	int ret, dfd = -1, room;

	if (k->len == 0)
		return 0;
	s = slab_get(c, k, true, &ret);
	if (!s && ret == -ESTALE)
		return ret; /* built for an older index of the version */
	if (!s && is_full(ret))
		goto err_full;
	if (!s)
		goto err_log;
	if (k->chunk >= s->nbits) {
		slab_put(c, s);
		return DCR_ERR(-EINVAL);
	}
	room = fs_room(c, s, need);
	if (room < 0) {
		slab_put(c, s);
		return room; /* not cached: the file system holds no more */
	}
	pthread_mutex_lock(&s->wlock);
	pthread_mutex_lock(&c->lock);
	was = bit(s->proven, s->nbits, k->chunk);
	pthread_mutex_unlock(&c->lock);
	if (was) {
		/* There and proven: readers may be splicing it. */
		pthread_mutex_unlock(&s->wlock);
		slab_put(c, s);
		return 0;
	}
	sums_drop(c, s, k->chunk); /* none for an unproven chunk: hygiene */
	if (direct)
		dfd = slab_dfd(c, s);
	if (dfd >= 0) {
		/* Whole blocks: past the last chunk's end is padding. */
		ret = dcr_pwrite_full(dfd, data,
				      DCR_ROUND_UP((size_t)k->len,
						   DCR_CACHE_ALIGN), off);
		if (ret == -EINVAL) {
			atomic_store(&c->no_direct, true);
			dfd = -1;
		}
	}
	if (dfd < 0)
		ret = dcr_pwrite_full(s->fd, data, k->len, off);
	if (ret) {
		punch(c, s, k->chunk);
		pthread_mutex_unlock(&s->wlock);
		if (is_full(ret))
			fs_room(c, s, need); /* for the next chunk */
		slab_put(c, s);
		if (is_full(ret))
			goto err_full;
		goto err_log;
	}
	pthread_mutex_lock(&c->lock);
	was = bit(s->present, s->nbits, k->chunk);
	bit_set(s->present, k->chunk, true);
	bit_set(s->proven, k->chunk, true);
	if (!was && !s->dead) {
		s->bytes += alloc_len(k->len);
		c->bytes += alloc_len(k->len);
	}
	s->used_ms = DCR_MAX(s->used_ms, now_ms());
	c->st.inserts++;
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_unlock(&s->wlock);
	if (room == 1)
		atomic_store(&c->fs_short, false); /* the incident is over */
	evict(c, s, 0);
	slab_put(c, s);
	return 0;

err_full:
	say_short(c); /* the budget reached, not this chunk's error */
	return ret;

err_log:
	dcr_warn("cache: cannot store chunk %" PRIu64 " of slab v%" PRIu64
		 ".f%" PRIu32 ": %s", k->chunk, k->v, k->file,
		 dcr_strerror(ret));
	return ret;
}
