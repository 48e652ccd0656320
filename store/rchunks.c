/* SPDX-License-Identifier: MIT */
/*
 * rchunks.c - where a chunk's bytes and reference are kept in memory
 * (see reader_int.h).
 *
 * Contract: chunk references are looked up a block at a time and kept
 * (ref_lock); chunk buffers are aligned to DCR_CACHE_ALIGN and recycled
 * through a small pool, and chunks just built stay "hot" within
 * hot_budget bytes (hot_lock); the in-flight table lets one thread
 * build a chunk while readers of the same hash wait for it (sf_lock,
 * sf_cond). A flight holds its buffer until the last reference goes,
 * which hands it to the hot set. Nothing here fetches or decodes.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "catalog.h"
#include "chunk.h"
#include "common.h"
#include "hash.h"
#include "reader_int.h"

/* ------------------------------------------------- chunk references */

/*
 * The reference of chunk @idx of file @file (manifest index) of version
 * @rv: from the block cache, else one catalog query for its whole
 * block. Blocks are keyed by the version's number and gen, so a block
 * of a version re-indexed since (rversions.c, reader_replace_version)
 * is never taken for the new index. A lookup for @rv after it was
 * replaced or dropped (rv->dead, set before the catalog changes) fails
 * with -ESTALE: the rows it read may be the new index's already.
 */
static int ref_checked(const struct rver *rv, int ret)
{
	if (ret == 0 && atomic_load(&rv->dead))
		return -ESTALE;
	return ret;
}

int ref_get(struct dcr_reader *r, const struct rver *rv, uint32_t file,
	    uint64_t idx, struct dcr_catalog_chunk *out)
{
	const uint64_t first = idx - idx % REF_BLOCK, v = rv->v;
	const uint32_t gen = rv->gen;
	struct refblk *b = NULL, *tmp;
	size_t got = 0;
	int ret;

	pthread_mutex_lock(&r->ref_lock);
	for (int i = 0; i < REF_SLOTS; i++) {
		struct refblk *x = &r->refs[i];

		if (x->n && x->v == v && x->gen == gen && x->file == file &&
		    x->first == first && idx - first < x->n) {
			*out = x->refs[idx - first];
			x->stamp = ++r->ref_clock;
			pthread_mutex_unlock(&r->ref_lock);
			return ref_checked(rv, 0);
		}
	}
	pthread_mutex_unlock(&r->ref_lock);

	tmp = malloc(sizeof(*tmp));
	if (!tmp)
		return ref_checked(rv, dcr_catalog_get_chunk(r->cat, v, file,
							     idx, out));
	ret = dcr_catalog_get_chunks(r->cat, v, file, first, REF_BLOCK,
				     tmp->refs, &got);
	if (ret == 0 && atomic_load(&rv->dead)) {
		ret = -ESTALE; /* maybe the new index's rows: not cached */
	} else if (ret == 0 && idx - first < got) {
		*out = tmp->refs[idx - first];
		pthread_mutex_lock(&r->ref_lock);
		for (int i = 0; i < REF_SLOTS; i++) {
			struct refblk *x = &r->refs[i];

			if (!b || !x->n || (b->n && x->stamp < b->stamp))
				b = x;
		}
		memcpy(b->refs, tmp->refs, got * sizeof(tmp->refs[0]));
		b->v = v;
		b->gen = gen;
		b->file = file;
		b->first = first;
		b->n = (uint32_t)got;
		b->stamp = ++r->ref_clock;
		pthread_mutex_unlock(&r->ref_lock);
	} else if (ret == 0 || ret == -ENOENT || ret == -EIO) {
		/* A hole or a bad row in the block (not in a well-formed
		 * catalog): ask for the one reference, which is served if it
		 * is good and gives the right error if not. */
		ret = ref_checked(rv, dcr_catalog_get_chunk(r->cat, v, file,
							    idx, out));
	}
	free(tmp);
	return ret;
}

/* ------------------------------------------- chunk buffers, hot chunks */

static size_t buf_cap(uint32_t len)
{
	return DCR_ROUND_UP((size_t)DCR_MAX(len, 1u), DCR_CACHE_ALIGN);
}

/* An aligned buffer for a chunk of @len bytes (readable to buf_cap). */
uint8_t *buf_get(struct dcr_reader *r, uint32_t len)
{
	const size_t cap = buf_cap(len);
	void *p = NULL;

	pthread_mutex_lock(&r->hot_lock);
	for (size_t i = r->npool; i-- > 0;) {
		if (r->pool[i].cap == cap) {
			p = r->pool[i].p;
			r->pool_bytes -= cap;
			r->pool[i] = r->pool[--r->npool];
			break;
		}
	}
	pthread_mutex_unlock(&r->hot_lock);
	if (!p && posix_memalign(&p, DCR_CACHE_ALIGN, cap) != 0)
		p = NULL;
	return p;
}

/* Give back a buffer of buf_get(@len). Caller holds hot_lock. */
static void buf_put_locked(struct dcr_reader *r, uint8_t *p, uint32_t len)
{
	const size_t cap = buf_cap(len);

	if (!p)
		return;
	/* Full: make room by dropping one of another size (a file's odd
	 * last chunk), so the common size stays recyclable. */
	for (size_t i = 0; (r->npool == POOL_MAX ||
			    r->pool_bytes + cap > POOL_BYTES) && i < r->npool;) {
		if (r->pool[i].cap == cap) {
			i++;
			continue;
		}
		r->pool_bytes -= r->pool[i].cap;
		free(r->pool[i].p);
		r->pool[i] = r->pool[--r->npool];
	}
	if (r->npool < POOL_MAX && r->pool_bytes + cap <= POOL_BYTES) {
		r->pool[r->npool].p = p;
		r->pool[r->npool].cap = cap;
		r->npool++;
		r->pool_bytes += cap;
	} else {
		free(p);
	}
}

void buf_put(struct dcr_reader *r, uint8_t *p, uint32_t len)
{
	pthread_mutex_lock(&r->hot_lock);
	buf_put_locked(r, p, len);
	pthread_mutex_unlock(&r->hot_lock);
}

/* The slot of chunk @hash of @len bytes, or NULL. Holds hot_lock. */
static struct hot *hot_find(struct dcr_reader *r,
			    const uint8_t hash[DCR_HASH_LEN], uint32_t len)
{
	for (size_t i = 0; i < HOT_SLOTS; i++) {
		struct hot *h = &r->hot[i];

		if (h->data && h->len == len &&
		    memcmp(h->hash, hash, DCR_HASH_LEN) == 0)
			return h;
	}
	return NULL;
}

/*
 * Keep the verified chunk @data (a buf_get buffer; ownership passes
 * here) in memory, evicting the least recently used unreferenced ones
 * to stay within the budget.
 */
void hot_put(struct dcr_reader *r, const struct where *w,
	     const uint8_t hash[DCR_HASH_LEN], uint32_t len, uint8_t *data)
{
	struct hot *slot = NULL;

	pthread_mutex_lock(&r->hot_lock);
	if (hot_find(r, hash, len) || len > r->hot_budget) {
		buf_put_locked(r, data, len);
		pthread_mutex_unlock(&r->hot_lock);
		return;
	}
	for (;;) {
		struct hot *lru = NULL;

		slot = NULL;
		for (size_t i = 0; i < HOT_SLOTS; i++) {
			struct hot *h = &r->hot[i];

			if (!h->data) {
				slot = slot ? slot : h;
				continue;
			}
			if (!h->refs && (!lru || h->stamp < lru->stamp))
				lru = h;
		}
		if (slot && r->hot_bytes + len <= r->hot_budget)
			break;
		if (!lru) {
			/* Everything is being read: do not keep this one. */
			buf_put_locked(r, data, len);
			pthread_mutex_unlock(&r->hot_lock);
			return;
		}
		r->hot_bytes -= lru->len;
		buf_put_locked(r, lru->data, lru->len);
		lru->data = NULL;
	}
	memcpy(slot->hash, hash, DCR_HASH_LEN);
	slot->len = len;
	slot->w = *w;
	slot->data = data;
	slot->refs = 0;
	slot->stamp = ++r->hot_clock;
	r->hot_bytes += len;
	pthread_mutex_unlock(&r->hot_lock);
}

/* Copy [@off, @off+@n) of hot chunk @hash into @dst: 0, or -ENOENT. */
/* The hot chunk @hash of @len bytes, referenced (not evicted until
 * hot_drop), or NULL. Takes hot_lock. */
static struct hot *hot_take(struct dcr_reader *r,
			    const uint8_t hash[DCR_HASH_LEN], uint32_t len)
{
	struct hot *h;

	pthread_mutex_lock(&r->hot_lock);
	h = hot_find(r, hash, len);
	if (h) {
		h->refs++;
		h->stamp = ++r->hot_clock;
	}
	pthread_mutex_unlock(&r->hot_lock);
	return h;
}

static void hot_drop(struct dcr_reader *r, struct hot *h)
{
	pthread_mutex_lock(&r->hot_lock);
	h->refs--;
	pthread_mutex_unlock(&r->hot_lock);
}

int hot_read(struct dcr_reader *r, const uint8_t hash[DCR_HASH_LEN],
	     uint32_t len, uint32_t off, void *dst, size_t n)
{
	struct hot *h = hot_take(r, hash, len);

	if (!h)
		return -ENOENT;
	memcpy(dst, h->data + off, n);
	hot_drop(r, h);
	return 0;
}

int hot_serve(struct dcr_reader *r, const struct rreq *q, const struct piece *p)
{
	struct hot *h = hot_take(r, p->ref.hash, p->clen);

	if (!h)
		return -ENOENT;
	if (p->dst)
		memcpy(p->dst, h->data + p->coff, p->n);
	if (!where_eq(&h->w, &p->w))
		piece_put(r, q, p, h->data);
	hot_drop(r, h);
	return 0;
}

void piece_put(struct dcr_reader *r, const struct rreq *q,
	       const struct piece *p, const uint8_t *data)
{
	struct dcr_cache_key k;

	cache_key(&k, p->w.rv, p->w.file, p->w.chunk, &p->ref);
	dcr_cache_put(r->cache, &k, data,
		      q->pagecache ? 0 : cache_put_flags(r));
}

/*
 * The cache key of chunk @chunk of file @file (manifest index) of @rv,
 * whose reference is @ref (which must outlive the key).
 */
void cache_key(struct dcr_cache_key *k, const struct rver *rv,
	       uint32_t file, uint64_t chunk,
	       const struct dcr_catalog_chunk *ref)
{
	k->v = rv->v;
	k->gen = rv->gen;
	k->file = file;
	k->chunk = chunk;
	k->file_size = rv->m.files[file].size;
	k->chunk_size = rv->chunk_size;
	k->len = dcr_chunk_len(k->file_size, k->chunk_size, chunk);
	k->hash = ref->hash;
	k->xxh = ref->has_check ? ref->xxh : NULL;
}

/*
 * Copy the whole verified chunk @k into @out from wherever this
 * instance has it: hot or built and waiting to be written (a published
 * flight), by content, or in its place in the cache. 0, -ENOENT, or
 * -errno.
 */
int base_get(struct dcr_reader *r, const struct dcr_cache_key *k,
	     uint8_t *out)
{
	struct flight *f;

	if (hot_read(r, k->hash, k->len, 0, out, k->len) == 0)
		return 0;
	pthread_mutex_lock(&r->sf_lock);
	for (f = r->flights; f; f = f->next)
		if (f->done && f->rc == 0 && f->len == k->len &&
		    memcmp(f->hash, k->hash, DCR_HASH_LEN) == 0)
			break;
	if (f)
		f->refs++;
	pthread_mutex_unlock(&r->sf_lock);
	if (f) {
		memcpy(out, f->data, k->len);
		flight_release(r, f);
		return 0;
	}
	return dcr_cache_read(r->cache, k, 0, out, k->len);
}

/* ------------------------------------------------------ single-flight */

void flight_release(struct dcr_reader *r, struct flight *f)
{
	bool last;

	pthread_mutex_lock(&r->sf_lock);
	last = --f->refs == 0;
	pthread_mutex_unlock(&r->sf_lock);
	if (last) {
		if (f->done && f->rc == 0 && f->data && !f->cold)
			hot_put(r, &(struct where){ f->rv, f->file, f->chunk },
				f->hash, f->len, f->data);
		else
			buf_put(r, f->data, f->len);
		free(f);
	}
}

/* Register chunk @c: lead a new flight or join the one in progress. */
int batch_join(struct dcr_reader *r, struct bchunk *c, const struct rreq *q)
{
	const uint8_t *hash = c->p->ref.hash;
	struct flight *f;

	pthread_mutex_lock(&r->sf_lock);
	for (f = r->flights; f; f = f->next)
		if (f->len == c->p->clen &&
		    memcmp(f->hash, hash, DCR_HASH_LEN) == 0)
			break;
	if (f) {
		f->refs++;
		c->f = f;
		pthread_mutex_unlock(&r->sf_lock);
		return 0;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		pthread_mutex_unlock(&r->sf_lock);
		return DCR_ERR(-ENOMEM);
	}
	memcpy(f->hash, hash, DCR_HASH_LEN);
	f->len = c->p->clen;
	f->rv = c->p->w.rv;
	f->file = c->p->w.file;
	f->chunk = c->p->w.chunk;
	f->ref = c->p->ref;
	f->refs = 1;
	f->quiet = q->quiet;
	f->cold = q->pagecache;
	f->next = r->flights;
	r->flights = f;
	pthread_mutex_unlock(&r->sf_lock);
	c->f = f;
	c->leader = true;
	return 0;
}

/*
 * Publish the outcome of a flight we lead: its waiters go on, and new
 * readers of the chunk still find it (and its data) until flight_done,
 * while it is being written to the cache.
 */
/* flight_publish with sf_lock held. */
static void publish_locked(struct dcr_reader *r, struct flight *f, int rc)
{
	if (!f->done) {
		f->rc = rc;
		f->done = true;
		pthread_cond_broadcast(&r->sf_cond);
	}
}

void flight_publish(struct dcr_reader *r, struct flight *f, int rc)
{
	pthread_mutex_lock(&r->sf_lock);
	publish_locked(r, f, rc);
	pthread_mutex_unlock(&r->sf_lock);
}

/*
 * End a flight we lead: publish @rc unless published, and unlist it, in
 * one step (a failed flight must not be joined after it ended: a new
 * reader leads a new attempt instead).
 */
void flight_done(struct dcr_reader *r, struct flight *f, int rc)
{
	pthread_mutex_lock(&r->sf_lock);
	publish_locked(r, f, rc);
	for (struct flight **pp = &r->flights; *pp; pp = &(*pp)->next) {
		if (*pp == f) {
			*pp = f->next;
			break;
		}
	}
	f->ended = true; /* for a settling prefetch (struct batch) */
	pthread_cond_broadcast(&r->sf_cond);
	pthread_mutex_unlock(&r->sf_lock);
}
