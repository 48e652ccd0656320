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

static struct cent **bucket_of(struct ctab *t, const uint8_t *hash)
{
	uint64_t x;

	memcpy(&x, hash, sizeof(x));
	return &t->bucket[x % CTAB_BUCKETS];
}

static void unlist(struct ctab *t, struct cent *e)
{
	struct cent **pp = bucket_of(t, e->hash);

	while (*pp != e)
		pp = &(*pp)->next;
	*pp = e->next;
	e->listed = false;
}

/* Put idle @e at the newest end of the idle list (a hot or failed-until
 * entry) or at the oldest (a free one, reused first), and out again. */
static void idle_push(struct ctab *t, struct cent *e, bool newest)
{
	struct cent *x = newest ? t->newest : t->oldest;

	e->older = newest ? x : NULL;
	e->newer = newest ? NULL : x;
	if (!x)
		t->oldest = t->newest = e;
	else if (newest)
		t->newest = x->newer = e;
	else
		t->oldest = x->older = e;
	t->nidle++;
	t->idle_bytes += e->data ? e->cap : 0;
}

static void idle_unlink(struct ctab *t, struct cent *e)
{
	*(e->older ? &e->older->newer : &t->oldest) = e->newer;
	*(e->newer ? &e->newer->older : &t->newest) = e->older;
	t->nidle--;
	t->idle_bytes -= e->data ? e->cap : 0;
}

static void cent_destroy(struct cent *e)
{
	free(e->data);
	pthread_cond_destroy(&e->cv);
	free(e);
}

/*
 * An unlisted entry of one reference (NULL when out of memory): the
 * oldest idle one if it is free or the idle ones are at their budget (so
 * that buffers are recycled, never handed back to the system while
 * reads go on), else a new one. Its buffer, which may be missing or of
 * another size, is made by buf_alloc. Caller holds t->lock.
 */
static struct cent *entry_get(struct ctab *t, uint32_t len)
{
	struct cent *e = t->oldest;

	if (e && (!e->listed || t->nidle >= HOT_SLOTS ||
		  t->idle_bytes + len > t->budget)) {
		idle_unlink(t, e);
		if (e->listed)
			unlist(t, e);
	} else {
		e = calloc(1, sizeof(*e));
		if (!e)
			return NULL;
		pthread_cond_init(&e->cv, NULL);
	}
	e->refs = 1;
	e->len = len;
	e->state = CENT_LOADING;
	e->rc = 0;
	e->until = 0;
	e->persisted = e->quiet = e->cold = false;
	return e;
}

/* Give @e (from entry_get) a buffer for its e->len bytes, outside
 * t->lock: 0 or -ENOMEM. */
static int buf_alloc(struct cent *e)
{
	const size_t cap = DCR_ROUND_UP((size_t)DCR_MAX(e->len, 1u),
					DCR_CACHE_ALIGN);

	if (e->data && e->cap == cap)
		return 0;
	free(e->data);
	e->cap = cap;
	if (!posix_memalign((void **)&e->data, DCR_CACHE_ALIGN, cap))
		return 0;
	e->data = NULL;
	return DCR_ERR(-ENOMEM);
}

/* Drop a reference to @e with t->lock held: the last one keeps a ready
 * entry hot and a failed-until one listed, and frees the rest for
 * reuse; idle entries beyond the budget (the oldest) are freed. */
static void release_locked(struct ctab *t, struct cent *e)
{
	if (--e->refs)
		return;
	if (e->listed && e->cold)
		unlist(t, e);
	idle_push(t, e, e->listed);
	while (t->nidle > HOT_SLOTS || t->idle_bytes > t->budget) {
		struct cent *x = t->oldest;

		idle_unlink(t, x);
		if (x->listed)
			unlist(t, x);
		cent_destroy(x);
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
		unlist(t, e); /* if idle, it stays so, free */
		e = NULL;
	}
	return e;
}

/* List @e (referenced, not listed) as piece @p's content. Holds t->lock. */
static void list_locked(struct ctab *t, struct cent *e, const struct piece *p)
{
	struct cent **b = bucket_of(t, p->ref.hash);

	memcpy(e->hash, p->ref.hash, DCR_HASH_LEN);
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
	/* At close nothing is referenced: every entry is idle. */
	while (t->oldest) {
		struct cent *e = t->oldest;

		t->oldest = e->newer;
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
	e = entry_get(t, p->clen);
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
		cent_publish(r, e, -ENOMEM, false); /* joiners fail too */
		cent_release(r, e);
		return DCR_ERR(-ENOMEM);
	}
	*out = e;
	return 1;
}

void cent_publish(struct dcr_reader *r, struct cent *e, int rc,
		  bool persisted)
{
	pthread_mutex_lock(&r->ct.lock);
	e->state = rc ? CENT_FAILED : CENT_READY;
	e->rc = rc;
	if ((rc || persisted) && !e->persisted) {
		e->persisted = true;
		r->ct.nbusy--;
	}
	if (rc && e->listed)
		unlist(&r->ct, e); /* a new reader leads a new attempt */
	if (e->waiters) /* only this entry's */
		pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&r->ct.lock);
}

bool cent_unlist_alone(struct dcr_reader *r, struct cent *e)
{
	bool alone;

	pthread_mutex_lock(&r->ct.lock);
	alone = e->refs == 1;
	if (alone && e->listed)
		unlist(&r->ct, e);
	pthread_mutex_unlock(&r->ct.lock);
	return alone;
}

void cent_failed_until(struct dcr_reader *r, const struct piece *p,
		       int64_t until)
{
	struct ctab *t = &r->ct;
	struct cent *e;

	pthread_mutex_lock(&t->lock);
	e = find_locked(t, p->ref.hash, p->clen);
	if (!e && (e = entry_get(t, p->clen))) {
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
	e = entry_get(&r->ct, len);
	pthread_mutex_unlock(&r->ct.lock);
	if (e && buf_alloc(e)) {
		cent_release(r, e);
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
		return cache_answer(dcr_cache_read(r->cache, k, 0, out, k->len));
	memcpy(out, e->data, k->len);
	cent_release(r, e);
	return 0;
}
