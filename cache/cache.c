/* SPDX-License-Identifier: MIT */
/*
 * cache.c - the chunk cache of slab files (see cache.h): the table of
 * slabs, a slab opened (its presence scanned) and evicted, the fences of
 * re-indexed versions, the cache opened (the slabs on disk counted) and
 * closed, eviction to the budget, and the stats. The locking notes and
 * the structs are in cache_int.h.
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
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache_int.h"
#include "common.h"

/* Slabs kept open (descriptors and bitmaps) when idle. */
#define SLAB_OPEN_MAX 64

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

struct tab_key {
	const struct dcr_cache *c;
	uint64_t v;
	uint32_t file;
};

static bool tab_before(const void *arg, size_t i)
{
	const struct tab_key *k = arg;

	return cmp_key(k->v, k->file, k->c->tab[i]) > 0;
}

/* Index of the first slab >= (@v, @file). Caller holds @lock. */
static size_t tab_lower(const struct dcr_cache *c, uint64_t v, uint32_t file)
{
	const struct tab_key k = { .c = c, .v = v, .file = file };

	return dcr_partition_point(c->n, tab_before, &k);
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
void stamp(struct slab *s, int64_t ms)
{
	struct timespec ts[2] = {
		{ .tv_nsec = UTIME_OMIT },
		{ .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000 },
	};

	futimens(s->fd, ts);
}

uint8_t *slab_map(struct dcr_cache *c, struct slab *s)
{
	const size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uint8_t *m;

	if (atomic_load(&c->no_map))
		return NULL;
	pthread_mutex_lock(&c->lock);
	if (!s->map && s->fd >= 0 && s->size) {
		m = mmap(NULL, DCR_ROUND_UP((size_t)s->size, page),
			 PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
		if (m == MAP_FAILED) {
			atomic_store(&c->no_map, true);
		} else {
			/* Faults then fill 2 MiB folios, as a write of a
			 * run does (best effort). */
			madvise(m, DCR_ROUND_UP((size_t)s->size, page),
				MADV_HUGEPAGE);
			s->map = m;
			s->map_len = DCR_ROUND_UP((size_t)s->size, page);
		}
	}
	m = s->map;
	pthread_mutex_unlock(&c->lock);
	return m;
}

void slab_unmap(struct slab *s)
{
	if (s->map)
		munmap(s->map, s->map_len);
	s->map = NULL;
	s->map_len = 0;
}

/* Close @s's descriptors and drop its bitmaps. Caller holds @lock. */
static void slab_shut(struct dcr_cache *c, struct slab *s)
{
	if (s->fd < 0)
		return;
	slab_unmap(s); /* no writer: it would hold a reference */
	if (s->used_ms > s->stamped_ms)
		stamp(s, s->used_ms); /* its last use outlives this mount */
	close(s->fd);
	if (s->dfd >= 0)
		close(s->dfd);
	if (s->sfd >= 0)
		close(s->sfd);
	s->fd = s->dfd = s->sfd = -1;
	free(s->present);
	free(s->proven);
	free(s->busy); /* none held: a holder holds a reference */
	s->present = s->proven = s->busy = NULL;
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
	s->busy = calloc(words, sizeof(uint64_t));
	if (!s->present || !s->proven || !s->busy) {
		free(s->present);
		free(s->proven);
		free(s->busy);
		s->present = s->proven = s->busy = NULL;
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
	pthread_rwlock_destroy(&s->wlock);
	pthread_cond_destroy(&s->idle);
	free(s);
}

/* Drop a reference; the last one frees an evicted slab. Takes @lock. */
void slab_put(struct dcr_cache *c, struct slab *s)
{
	pthread_mutex_lock(&c->lock);
	if (--s->refs == 0 && s->dead) {
		slab_shut(c, s);
		slab_free(s);
	}
	pthread_mutex_unlock(&c->lock);
}

/* Take @s off the table and unlink it. Caller holds @lock. */
void slab_evict(struct dcr_cache *c, struct slab *s)
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
	sums_path(c, s, path, sizeof(path));
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
struct slab *slab_get(struct dcr_cache *c, const struct dcr_cache_key *k,
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
		s->fd = s->dfd = s->sfd = -1;
		pthread_rwlock_init(&s->wlock, NULL);
		pthread_cond_init(&s->idle, NULL);
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
int slab_dfd(struct dcr_cache *c, struct slab *s)
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

		size_t len = strlen(de->d_name);

		if (len > 5 && !strcmp(de->d_name + len - 5, ".sums")) {
			char slab[64];

			/* A sums file (cache_sums.c) outlives its slab only
			 * after a crash. */
			snprintf(slab, sizeof(slab), "%.*s", (int)(len - 5),
				 de->d_name);
			if (parse_slab_name(slab, &v, &file) == 0 &&
			    fstatat(dirfd(d), slab, &sb, AT_SYMLINK_NOFOLLOW) < 0 &&
			    errno == ENOENT)
				unlinkat(dirfd(d), de->d_name, 0);
			continue;
		}
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
		s->fd = s->dfd = s->sfd = -1;
		pthread_rwlock_init(&s->wlock, NULL);
		pthread_cond_init(&s->idle, NULL);
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
	s->verity = atomic_load(&c->verity);
}

/* --------------------------------------------------------- eviction */

/*
 * Evict until within the budget in effect with @room bytes to spare:
 * whole slabs, least recently used first, @keep (the slab written) last.
 * A slab is unlinked, never cut into (see the locking notes): a budget
 * smaller than one file's slab keeps nothing of it, which is said once.
 */
void evict(struct dcr_cache *c, struct slab *keep, uint64_t room)
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
