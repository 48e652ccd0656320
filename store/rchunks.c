/* SPDX-License-Identifier: MIT */
/*
 * rchunks.c - where a chunk's bytes and reference are kept in memory
 * (see reader_int.h).
 *
 * Contract: chunk references are looked up a block at a time and kept
 * (refs.lock); chunks in memory are entries of one table (struct ctab,
 * its lock): one refcounted entry per chunk content, which one thread
 * builds while readers of the same content wait for it, which stays
 * "hot" within the budget after its last reference, and which a failed
 * build leaves behind for a moment (failed-until). Their buffers are
 * aligned to DCR_CACHE_ALIGN and recycled with the entries. Nothing here
 * fetches or decodes.
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

int refs_init(struct rrefs *f)
{
	pthread_mutex_init(&f->lock, NULL);
	f->blk = calloc(REF_SLOTS, sizeof(*f->blk));
	return f->blk ? 0 : DCR_ERR(-ENOMEM);
}

void refs_close(struct rrefs *f)
{
	free(f->blk);
	pthread_mutex_destroy(&f->lock);
}

int ref_get(struct dcr_reader *r, const struct rver *rv, uint32_t file,
	    uint64_t idx, struct dcr_catalog_chunk *out)
{
	const uint64_t first = idx - idx % REF_BLOCK, v = rv->v;
	const uint32_t gen = rv->gen;
	struct refblk *b = NULL, *tmp;
	size_t got = 0;
	int ret;

	pthread_mutex_lock(&r->refs.lock);
	for (int i = 0; i < REF_SLOTS; i++) {
		struct refblk *x = &r->refs.blk[i];

		if (x->n && x->v == v && x->gen == gen && x->file == file &&
		    x->first == first && idx - first < x->n) {
			*out = x->refs[idx - first];
			x->stamp = ++r->refs.clock;
			pthread_mutex_unlock(&r->refs.lock);
			return ref_checked(rv, 0);
		}
	}
	pthread_mutex_unlock(&r->refs.lock);

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
		pthread_mutex_lock(&r->refs.lock);
		for (int i = 0; i < REF_SLOTS; i++) {
			struct refblk *x = &r->refs.blk[i];

			if (!b || !x->n || (b->n && x->stamp < b->stamp))
				b = x;
		}
		memcpy(b->refs, tmp->refs, got * sizeof(tmp->refs[0]));
		b->v = v;
		b->gen = gen;
		b->file = file;
		b->first = first;
		b->n = (uint32_t)got;
		b->stamp = ++r->refs.clock;
		pthread_mutex_unlock(&r->refs.lock);
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

/* ------------------------------------------------------ the chunk table */

static size_t buf_cap(uint32_t len)
{
	return DCR_ROUND_UP((size_t)DCR_MAX(len, 1u), DCR_CACHE_ALIGN);
}

static struct cent **bucket_of(struct ctab *t, const uint8_t *hash)
{
	uint64_t x;

	memcpy(&x, hash, sizeof(x));
	return &t->bucket[x % CTAB_BUCKETS];
}

static void idle_unlink(struct ctab *t, struct cent *e)
{
	*(e->older ? &e->older->newer : &t->oldest) = e->newer;
	*(e->newer ? &e->newer->older : &t->newest) = e->older;
	e->older = e->newer = NULL;
	t->nidle--;
	if (e->state == CENT_READY)
		t->idle_bytes -= e->len;
}

static void unlist(struct ctab *t, struct cent *e)
{
	for (struct cent **pp = bucket_of(t, e->hash); *pp; pp = &(*pp)->next) {
		if (*pp == e) {
			*pp = e->next;
			break;
		}
	}
	e->listed = false;
}

static void cent_destroy(struct cent *e)
{
	free(e->data);
	pthread_cond_destroy(&e->cv);
	free(e);
}

/*
 * Keep unreferenced, unlisted @e (and its buffer) for reuse; the spares
 * are bounded by POOL_MAX and POOL_BYTES. Full: make room by dropping
 * one of another size (a file's odd last chunk), so that the common
 * size stays recyclable.
 */
static void spare_put(struct ctab *t, struct cent *e)
{
#define SPARE_FULL(t, e) \
	((t)->nspare == POOL_MAX || (t)->spare_bytes + (e)->cap > POOL_BYTES)
	for (struct cent **pp = &t->spare, *x; (x = *pp) && SPARE_FULL(t, e);) {
		if (x->cap == e->cap) {
			pp = &x->next;
		} else {
			*pp = x->next;
			t->nspare--;
			t->spare_bytes -= x->cap;
			cent_destroy(x);
		}
	}
	if (!e->data || SPARE_FULL(t, e)) {
		cent_destroy(e); /* (no buffer: none could be had) */
		return;
	}
	e->next = t->spare;
	t->spare = e;
	t->nspare++;
	t->spare_bytes += e->cap;
}

/* An unlisted entry of one reference for a chunk of @len bytes (NULL
 * when out of memory), with a buffer unless e->data is NULL (see
 * buf_alloc). Caller holds t->lock. */
static struct cent *spare_get(struct ctab *t, uint32_t len)
{
	const size_t cap = buf_cap(len);
	struct cent *e = NULL;

	for (struct cent **pp = &t->spare; *pp; pp = &(*pp)->next) {
		if ((*pp)->cap == cap) {
			e = *pp;
			*pp = e->next;
			t->nspare--;
			t->spare_bytes -= cap;
			break;
		}
	}
	if (!e) {
		e = calloc(1, sizeof(*e));
		if (!e)
			return NULL;
		pthread_cond_init(&e->cv, NULL);
		e->cap = cap;
	}
	e->next = NULL;
	e->refs = 1;
	e->state = CENT_LOADING;
	e->rc = 0;
	e->until = 0;
	e->listed = e->persisted = e->quiet = e->cold = false;
	return e;
}

/* Give @e a buffer if it has none, outside t->lock: 0 or -ENOMEM. */
static int buf_alloc(struct cent *e)
{
	if (e->data || !posix_memalign((void **)&e->data, DCR_CACHE_ALIGN,
				       e->cap))
		return 0;
	e->data = NULL;
	return DCR_ERR(-ENOMEM);
}

/* Drop a reference to @e with t->lock held: the last one keeps a ready
 * entry hot (LRU, within the budget) and a failed one until its
 * deadline, and recycles anything else. */
static void release_locked(struct ctab *t, struct cent *e)
{
	if (--e->refs)
		return;
	if (!e->listed || e->cold) {
		if (e->listed)
			unlist(t, e);
		spare_put(t, e);
		return;
	}
	e->older = t->newest;
	e->newer = NULL;
	*(t->newest ? &t->newest->newer : &t->oldest) = e;
	t->newest = e;
	t->nidle++;
	if (e->state == CENT_READY)
		t->idle_bytes += e->len;
	while (t->idle_bytes > t->budget || t->nidle > HOT_SLOTS) {
		struct cent *x = t->oldest;

		idle_unlink(t, x);
		unlist(t, x);
		spare_put(t, x);
	}
}

/* Take a reference to @e (listed). Caller holds t->lock. */
static void take_locked(struct ctab *t, struct cent *e)
{
	if (e->refs++ == 0)
		idle_unlink(t, e);
}

/* The listed entry of content @hash of @len bytes, or NULL; a failed one
 * whose deadline has passed is unlisted first. Caller holds t->lock. */
static struct cent *find_locked(struct ctab *t, const uint8_t *hash,
				uint32_t len)
{
	struct cent *e;

	for (e = *bucket_of(t, hash); e; e = e->next)
		if (e->len == len && memcmp(e->hash, hash, DCR_HASH_LEN) == 0)
			break;
	if (e && e->state == CENT_FAILED && e->until <= dcr_mono_ns()) {
		unlist(t, e);
		if (!e->refs) {
			idle_unlink(t, e);
			spare_put(t, e);
		}
		e = NULL;
	}
	return e;
}

/* List @e (referenced, not listed) as piece @p's content. Holds t->lock. */
static void list_locked(struct ctab *t, struct cent *e, const struct piece *p)
{
	struct cent **b = bucket_of(t, p->ref.hash);

	memcpy(e->hash, p->ref.hash, DCR_HASH_LEN);
	e->len = p->clen;
	e->w = p->w;
	e->ref = p->ref;
	e->listed = true;
	e->next = *b;
	*b = e;
}

void ctab_init(struct ctab *t, uint64_t budget)
{
	memset(t, 0, sizeof(*t));
	t->budget = budget;
	pthread_mutex_init(&t->lock, NULL);
}

void ctab_destroy(struct ctab *t)
{
	for (size_t i = 0; i < CTAB_BUCKETS; i++) {
		while (t->bucket[i]) {
			struct cent *e = t->bucket[i];

			t->bucket[i] = e->next;
			cent_destroy(e);
		}
	}
	while (t->spare) {
		struct cent *e = t->spare;

		t->spare = e->next;
		cent_destroy(e);
	}
	pthread_mutex_destroy(&t->lock);
}

bool ctab_busy(struct dcr_reader *r)
{
	bool busy;

	pthread_mutex_lock(&r->ct.lock);
	busy = r->ct.nbusy != 0;
	pthread_mutex_unlock(&r->ct.lock);
	return busy;
}

int cent_join(struct dcr_reader *r, const struct rreq *q,
	      const struct piece *p, struct cent **out)
{
	struct ctab *t = &r->ct;
	struct cent *e;

	*out = NULL;
	pthread_mutex_lock(&t->lock);
	e = find_locked(t, p->ref.hash, p->clen);
	if (e && e->state == CENT_FAILED) {
		pthread_mutex_unlock(&t->lock);
		RERR(q, WHERE_FMT ": the store did not answer in time for a "
		     "read of it a moment ago; failing at once",
		     WHERE_ARGS(&p->w));
		return DCR_ERR(-EIO);
	}
	if (e) {
		take_locked(t, e);
		pthread_mutex_unlock(&t->lock);
		*out = e;
		return 0;
	}
	e = spare_get(t, p->clen);
	if (!e) {
		pthread_mutex_unlock(&t->lock);
		return DCR_ERR(-ENOMEM);
	}
	list_locked(t, e, p);
	e->quiet = q->quiet;
	e->cold = q->pagecache;
	t->nbusy++;
	pthread_mutex_unlock(&t->lock);
	if (buf_alloc(e)) {
		cent_fail(r, e, -ENOMEM); /* joiners of it fail too */
		cent_release(r, e);
		return DCR_ERR(-ENOMEM);
	}
	*out = e;
	return 1;
}

/* Wake the waiters of @e, which changed. Caller holds t->lock. */
static void wake_locked(struct cent *e)
{
	if (e->waiters)
		pthread_cond_broadcast(&e->cv);
}

void cent_ready(struct dcr_reader *r, struct cent *e, bool persisted)
{
	pthread_mutex_lock(&r->ct.lock);
	e->state = CENT_READY;
	if (persisted && !e->persisted) {
		e->persisted = true;
		r->ct.nbusy--;
	}
	wake_locked(e);
	pthread_mutex_unlock(&r->ct.lock);
}

void cent_fail(struct dcr_reader *r, struct cent *e, int rc)
{
	pthread_mutex_lock(&r->ct.lock);
	e->state = CENT_FAILED;
	e->rc = rc;
	if (!e->persisted) {
		e->persisted = true;
		r->ct.nbusy--;
	}
	if (e->listed)
		unlist(&r->ct, e); /* a new reader leads a new attempt */
	wake_locked(e);
	pthread_mutex_unlock(&r->ct.lock);
}

void cent_failed_until(struct dcr_reader *r, const struct piece *p,
		       int64_t until)
{
	struct ctab *t = &r->ct;
	struct cent *e;

	pthread_mutex_lock(&t->lock);
	e = find_locked(t, p->ref.hash, p->clen);
	if (!e && (e = calloc(1, sizeof(*e)))) { /* no buffer: none kept */
		pthread_cond_init(&e->cv, NULL);
		e->refs = 1;
		list_locked(t, e, p);
		e->state = CENT_FAILED;
		e->rc = -EIO;
		e->persisted = true;
		e->until = until;
		release_locked(t, e);
	}
	if (e && e->state == CENT_FAILED)
		e->until = DCR_MAX(e->until, until);
	pthread_mutex_unlock(&t->lock);
}

int cent_wait(struct dcr_reader *r, struct cent *e, bool settle)
{
	int rc;

	pthread_mutex_lock(&r->ct.lock);
	while (e->state == CENT_LOADING || (settle && !e->persisted)) {
		e->waiters++;
		pthread_cond_wait(&e->cv, &r->ct.lock);
		e->waiters--;
	}
	rc = e->state == CENT_READY ? 0 : e->rc;
	pthread_mutex_unlock(&r->ct.lock);
	return rc;
}

void cent_hold(struct dcr_reader *r, struct cent *e)
{
	pthread_mutex_lock(&r->ct.lock);
	take_locked(&r->ct, e);
	pthread_mutex_unlock(&r->ct.lock);
}

void cent_release(struct dcr_reader *r, struct cent *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&r->ct.lock);
	release_locked(&r->ct, e);
	pthread_mutex_unlock(&r->ct.lock);
}

struct cent *cent_new(struct dcr_reader *r, uint32_t len)
{
	struct cent *e;

	pthread_mutex_lock(&r->ct.lock);
	e = spare_get(&r->ct, len);
	pthread_mutex_unlock(&r->ct.lock);
	if (e && buf_alloc(e)) {
		cent_destroy(e);
		return NULL;
	}
	return e;
}

void cent_keep(struct dcr_reader *r, struct cent *e, const struct piece *p)
{
	struct ctab *t = &r->ct;

	pthread_mutex_lock(&t->lock);
	if (!find_locked(t, p->ref.hash, p->clen)) {
		list_locked(t, e, p);
		e->state = CENT_READY;
		e->persisted = true;
		e->cold = false;
	}
	release_locked(t, e);
	pthread_mutex_unlock(&t->lock);
}

/* The ready entry of content @hash of @len bytes, referenced, or NULL. */
static struct cent *take_ready(struct dcr_reader *r, const uint8_t *hash,
			       uint32_t len)
{
	struct cent *e;

	pthread_mutex_lock(&r->ct.lock);
	e = find_locked(&r->ct, hash, len);
	if (e && e->state == CENT_READY)
		take_locked(&r->ct, e);
	else
		e = NULL;
	pthread_mutex_unlock(&r->ct.lock);
	return e;
}

int cent_serve(struct dcr_reader *r, const struct rreq *q, const struct piece *p)
{
	struct cent *e = take_ready(r, p->ref.hash, p->clen);

	if (!e)
		return -ENOENT;
	if (!where_eq(&e->w, &p->w))
		piece_put(r, q, p, e->data);
	else if (q->settle)
		cent_wait(r, e, true); /* its write to the cache may be due */
	if (p->dst)
		memcpy(p->dst, e->data + p->coff, p->n);
	cent_release(r, e);
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
 * instance has it: a ready entry of its content (hot, or built and
 * waiting to be written), or its place in the cache. 0, -ENOENT, or
 * -errno.
 */
int base_get(struct dcr_reader *r, const struct dcr_cache_key *k,
	     uint8_t *out)
{
	struct cent *e = take_ready(r, k->hash, k->len);

	if (!e)
		return dcr_cache_read(r->cache, k, 0, out, k->len);
	memcpy(out, e->data, k->len);
	cent_release(r, e);
	return 0;
}
