/* SPDX-License-Identifier: MIT */
/*
 * cache_sums.c - the chunk cache's sub-block sums (see cache.h, "partial
 * reads", and struct sums in cache_int.h): kept when a chunk is read
 * whole and proven, dropped when it is punched or rewritten, LRU within
 * their budget; written through to the slab's sums file, so that a later
 * instance finds them; and the partial read of a chunk proven before,
 * which reads and checks only the sub-blocks it covers.
 *
 * The sums file of slab vV.fF is vV.fF.sums beside it: entry i (chunk
 * i) at i * entry_len, the chunk's check value (its manifest XXH3-128,
 * or the prefix of its SHA-256) and then the XXH3-128 of each SUB_SIZE
 * bytes. An entry is a pure function of the chunk's content, which its
 * first field names: it is used only for a chunk of that check value,
 * never needs invalidating, and one that rotted either names no chunk
 * (ignored) or fails a sub-block (the chunk is then read whole, proven
 * and its entry written again). Written without fsync: a lost write
 * only loses the shortcut.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "cache_int.h"
#include "common.h"
#include "hash.h"

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

/* ------------------------------------------------------- sums files */

void sums_path(const struct dcr_cache *c, const struct slab *s, char *buf,
	       size_t cap)
{
	size_t n;

	dcr_cache_slab_path(c, s->v, s->file, buf, cap);
	n = strlen(buf);
	snprintf(buf + n, cap - n, ".sums");
}

/* Bytes of one entry of @s's sums file: the check value and the sums of
 * a whole chunk (@s's chunk size). */
static uint64_t entry_len(const struct slab *s)
{
	return (uint64_t)DCR_XXH_LEN *
	       (1 + (((uint64_t)s->cs + SUB_SIZE - 1) >> SUB_SHIFT));
}

/* @s's sums file, opened (created) on first need, or -1. Takes @lock. */
static int sums_fd(struct dcr_cache *c, struct slab *s)
{
	char path[PATH_MAX];
	int fd;

	pthread_mutex_lock(&c->lock);
	if (s->sfd < 0 && s->fd >= 0 && !s->dead) {
		sums_path(c, s, path, sizeof(path));
		s->sfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	}
	fd = s->sfd;
	pthread_mutex_unlock(&c->lock);
	return fd;
}

/* Write @e (the sums of chunk e->chunk) to @s's sums file. Best effort. */
static void sums_store(struct dcr_cache *c, struct slab *s,
		       const struct sums *e)
{
	size_t n = (size_t)DCR_XXH_LEN * (1 + e->n);
	uint8_t *ent;
	int fd;

	if ((uint64_t)n > entry_len(s) || (fd = sums_fd(c, s)) < 0 ||
	    !(ent = malloc(n)))
		return;
	memcpy(ent, e->check, DCR_XXH_LEN);
	memcpy(ent + DCR_XXH_LEN, e->sum, (size_t)e->n * DCR_XXH_LEN);
	if (pwrite(fd, ent, n, (off_t)(e->chunk * entry_len(s))) != (ssize_t)n)
		dcr_debug("cache: sums of v%" PRIu64 ".f%" PRIu32 " chunk %"
			  PRIu64 " not written: %s", s->v, s->file, e->chunk,
			  dcr_strerror(-errno));
	free(ent);
}

/*
 * The sums of chunk @k of @s from its sums file, as a new entry for the
 * slab opening @epoch, or NULL (none, written for other content, or
 * unreadable).
 */
static struct sums *sums_load(struct dcr_cache *c, struct slab *s,
			      const struct dcr_cache_key *k, uint64_t epoch)
{
	uint32_t n = (uint32_t)(((uint64_t)k->len + SUB_SIZE - 1) >> SUB_SHIFT);
	size_t sz = sizeof(struct sums) + (size_t)n * DCR_XXH_LEN;
	uint8_t check[DCR_XXH_LEN];
	off_t at = (off_t)(k->chunk * entry_len(s));
	struct sums *e;
	int fd;

	if ((uint64_t)DCR_XXH_LEN * (1 + n) > entry_len(s) ||
	    (fd = sums_fd(c, s)) < 0 ||
	    pread(fd, check, DCR_XXH_LEN, at) != DCR_XXH_LEN ||
	    memcmp(check, key_check(k), DCR_XXH_LEN) != 0)
		return NULL;
	e = malloc(sz);
	if (!e)
		return NULL;
	if (pread(fd, e->sum, (size_t)n * DCR_XXH_LEN, at + DCR_XXH_LEN) !=
	    (ssize_t)n * DCR_XXH_LEN) {
		free(e);
		return NULL;
	}
	e->epoch = epoch;
	e->chunk = k->chunk;
	e->len = k->len;
	e->n = n;
	memcpy(e->check, check, DCR_XXH_LEN);
	return e;
}

/* ------------------------------------------------------------ in memory */

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
void sums_unlink(struct dcr_cache *c, struct sums *e)
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
void sums_drop(struct dcr_cache *c, const struct slab *s, uint64_t i)
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

/* Put @e in the table (replacing the entry it updates), within the
 * budget. Takes sums_lock. */
static void sums_insert(struct dcr_cache *c, struct sums *e)
{
	size_t sz = sizeof(*e) + (size_t)e->n * DCR_XXH_LEN;
	struct sums *old, *gone = NULL;

	pthread_mutex_lock(&c->sums_lock);
	old = sums_find(c, e->epoch, e->chunk);
	if (old)
		sums_unlink(c, old);
	while (c->sums_old && c->sums_bytes + sz > SUMS_BUDGET) {
		struct sums *lru = c->sums_old;

		sums_unlink(c, lru);
		lru->next = gone; /* freed outside the lock */
		gone = lru;
	}
	e->next = c->sums_tab[sums_bucket(e->epoch, e->chunk)];
	c->sums_tab[sums_bucket(e->epoch, e->chunk)] = e;
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
 * Keep the sums of chunk @k of @s (opening @epoch), computed from @buf:
 * its @k->len bytes just read whole and proven against @k's hash, in
 * memory and in @s's sums file. Best effort (nothing is kept without
 * memory).
 */
void sums_keep(struct dcr_cache *c, struct slab *s,
	       const struct dcr_cache_key *k, uint64_t epoch,
	       const uint8_t *buf)
{
	uint32_t n = (uint32_t)(((uint64_t)k->len + SUB_SIZE - 1) >> SUB_SHIFT);
	size_t sz = sizeof(struct sums) + (size_t)n * DCR_XXH_LEN;
	struct sums *e;

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
	sums_store(c, s, e);
	sums_insert(c, e);
}

int sums_check(struct dcr_cache *c, struct slab *s,
	       const struct dcr_cache_key *k, uint64_t epoch,
	       const uint8_t *buf, uint32_t *bad)
{
	uint32_t n = (uint32_t)(((uint64_t)k->len + SUB_SIZE - 1) >> SUB_SHIFT);
	uint8_t (*want)[DCR_XXH_LEN], got[DCR_XXH_LEN];
	struct sums *e;
	int ret = 0;

	if (!c->sums_tab)
		return -EAGAIN;
	want = malloc((size_t)n * DCR_XXH_LEN);
	if (!want)
		return DCR_ERR(-ENOMEM);
	pthread_mutex_lock(&c->sums_lock);
	e = sums_find(c, epoch, k->chunk);
	if (e && e->len == k->len && e->n == n &&
	    memcmp(e->check, key_check(k), DCR_XXH_LEN) == 0)
		memcpy(want, e->sum, (size_t)n * DCR_XXH_LEN);
	else
		e = NULL;
	pthread_mutex_unlock(&c->sums_lock);
	if (!e) {
		e = sums_load(c, s, k, epoch);
		if (!e) {
			free(want);
			return -EAGAIN;
		}
		memcpy(want, e->sum, (size_t)n * DCR_XXH_LEN);
		sums_insert(c, e);
	}
	for (uint32_t i = 0; i < n; i++) {
		uint64_t at = (uint64_t)i << SUB_SHIFT;

		dcr_xxh128(buf + at, DCR_MIN((uint64_t)SUB_SIZE, k->len - at),
			   got);
		if (memcmp(got, want[i], DCR_XXH_LEN) != 0) {
			*bad = i;
			ret = -EBADMSG;
			break;
		}
	}
	free(want);
	return ret;
}

/* Sub-blocks one sums_read checks at most (a longer read reads whole). */
#define SUMS_READ_MAX 64

/*
 * Copy [@off, @off+@n) (@n > 0) of chunk @k of @s (opening @epoch) into
 * @dst, reading only the sub-blocks the range covers and checking each
 * against the sums kept when the chunk was last proven whole, in this
 * instance or, from its sums file, an earlier one (see cache.h). 0,
 * -EAGAIN if none are kept for it (or the range is too long for them),
 * -EBADMSG if a sub-block fails, or -errno.
 */
int sums_read(struct dcr_cache *c, struct slab *s,
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
	if (!e) {
		e = sums_load(c, s, k, epoch);
		if (!e)
			return -EAGAIN;
		memcpy(want, e->sum[a], (size_t)(b - a + 1) * DCR_XXH_LEN);
		sums_insert(c, e);
	}

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
