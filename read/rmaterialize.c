/* SPDX-License-Identifier: MIT */
/*
 * rmaterialize.c - building chunks that the cache does not hold (see
 * reader_int.h).
 *
 * Contract: a batch of missed chunks (materialize_batch, or
 * batch_prepare + fetch_run + batch_finish for read-ahead) joins the
 * chunk entries others build and leads the rest: it resolves each
 * chain back to a cached ancestor or a full frame, fetches the frames
 * sorted by pack and offset with neighbours merged into one ranged GET
 * (a run), applies them oldest first, proves the result against the
 * committed chunk (a corrupt frame is named once in the log), stores
 * it in the cache (now or through the write-behind queue) and copies
 * the slices out. Errors are logged once, at debug level for a
 * speculative request (struct rreq). Locks: codecs.lock (the codec pool);
 * waits on chunk entries (cent_wait).
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
#include "dvrec.h"
#include "frame.h"
#include "hash.h"
#include "manifest.h"
#include "mirror.h"
#include "reader_int.h"

/* --------------------------------------------------------- codec pool */

void codecs_init(struct rcodecs *cp)
{
	pthread_mutex_init(&cp->lock, NULL);
}

void codecs_close(struct rcodecs *cp)
{
	for (int i = 0; i < cp->n; i++)
		dcr_codec_free(cp->c[i]);
	for (int i = 0; i < cp->nbufs; i++)
		dcr_buf_free(&cp->bufs[i]);
	pthread_mutex_destroy(&cp->lock);
}

static struct dcr_codec *codec_get(struct dcr_reader *r)
{
	struct dcr_codec *c = NULL;

	pthread_mutex_lock(&r->codecs.lock);
	if (r->codecs.n > 0)
		c = r->codecs.c[--r->codecs.n];
	pthread_mutex_unlock(&r->codecs.lock);
	return c ? c : dcr_codec_new(0);
}

static void codec_put(struct dcr_reader *r, struct dcr_codec *c)
{
	pthread_mutex_lock(&r->codecs.lock);
	if (r->codecs.n < CODEC_POOL_MAX) {
		r->codecs.c[r->codecs.n++] = c;
		c = NULL;
	}
	pthread_mutex_unlock(&r->codecs.lock);
	dcr_codec_free(c);
}

/* A fetch buffer for at most @max bytes into @b: a kept one, or empty. */
static void runbuf_get(struct dcr_reader *r, struct dcr_buf *b, size_t max)
{
	pthread_mutex_lock(&r->codecs.lock);
	if (r->codecs.nbufs > 0)
		*b = r->codecs.bufs[--r->codecs.nbufs];
	else
		dcr_buf_init(b, max);
	pthread_mutex_unlock(&r->codecs.lock);
	b->len = 0;
	b->max = max; /* a kept buffer's room is used, never more */
}

/* Keep @b for the next runs, or free it. */
static void runbuf_put(struct dcr_reader *r, struct dcr_buf *b)
{
	pthread_mutex_lock(&r->codecs.lock);
	if (b->data && b->cap <= RUNBUF_KEEP_MAX &&
	    r->codecs.nbufs < RUNBUF_POOL_MAX) {
		r->codecs.bufs[r->codecs.nbufs++] = *b;
		dcr_buf_init(b, 0);
	}
	pthread_mutex_unlock(&r->codecs.lock);
	dcr_buf_free(b);
}

/* ------------------------------------------------------------ read path */

static void chain_free(struct chain *ch)
{
	free(ch->s);
	ch->s = NULL;
	ch->n = ch->cap = 0;
}

static int chain_push(struct chain *ch, struct rver *rv, uint32_t file,
		      const struct dcr_catalog_chunk *ref)
{
	if (ch->n == ch->cap) {
		size_t cap = ch->cap ? ch->cap * 2 : 4;
		struct step *tmp = realloc(ch->s, cap * sizeof(*tmp));
		if (!tmp)
			return DCR_ERR(-ENOMEM);
		ch->s = tmp;
		ch->cap = cap;
	}
	memset(&ch->s[ch->n], 0, sizeof(ch->s[ch->n]));
	ch->s[ch->n].rv = rv;
	ch->s[ch->n].file = file;
	ch->s[ch->n].ref = *ref;
	ch->n++;
	return 0;
}

/*
 * Walk from @rv's chunk towards the anchor, stopping at the first
 * ancestor whose chunk is cached (read into @out) or that is a full
 * frame. Fills @ch with the frames to apply, newest first.
 */
static int resolve_chain(struct dcr_reader *r, const struct rreq *q,
			 const struct where *w,
			 const struct dcr_catalog_chunk *ref0, uint32_t clen,
			 uint8_t *out, struct chain *ch)
{
	struct dcr_catalog_chunk ref = *ref0;
	struct rver *cur = (struct rver *)w->rv, *pv;
	uint32_t cf = w->file, pf;
	uint64_t steps = 0;
	bool first = true;
	int ret;

	for (;;) {
		/* Parents strictly decrease, so a chain has at most v links;
		 * anything else is a damaged catalog, not a reason to spin. */
		if (++steps > w->rv->v) {
			RERR(q, WHERE_FMT ": the parent chain is longer than the "
			     "version number", WHERE_ARGS(w));
			return DCR_ERR(-EIO);
		}
		if (!first) {
			struct dcr_cache_key k;

			cache_key(&k, cur, cf, w->chunk, &ref);
			ret = base_get(r, &k, out);
			if (ret == 0) {
				ch->base_cached = true;
				ch->base_rv = cur;
				ch->base_file = cf;
				ch->base_ref = ref;
				return 0;
			}
			if (ret == -ENOMEM)
				return ret;
		}
		first = false;
		switch (ref.kind) {
		case DCR_CK_FULL:
			return chain_push(ch, cur, cf, &ref);
		case DCR_CK_DELTA:
			ret = chain_push(ch, cur, cf, &ref);
			if (ret)
				return ret;
			break;
		case DCR_CK_SAME:
			break;
		default:
			RERR(q, WHERE_FMT ": version %llu has an invalid "
				"chunk kind %u", WHERE_ARGS(w),
				(unsigned long long)cur->v, ref.kind);
			return DCR_ERR(-EIO);
		}

		pf = cur->m.files[cf].base;
		if (cur->parent >= cur->v) {
			RERR(q, WHERE_FMT ": version %llu has parent %llu, which "
			     "is not older", WHERE_ARGS(w),
			     (unsigned long long)cur->v,
			     (unsigned long long)cur->parent);
			return DCR_ERR(-EIO);
		}
		if (!cur->parent || pf == DCR_NO_BASE) {
			RERR(q, WHERE_FMT ": version %llu refers to a parent "
				"chunk but has no parent", WHERE_ARGS(w),
				(unsigned long long)cur->v);
			return DCR_ERR(-EIO);
		}
		ret = get_ver(r, cur->parent, &pv);
		if (ret) {
			RERR(q, WHERE_FMT ": needs version %llu (%s), which is "
				"missing or corrupt", WHERE_ARGS(w),
				(unsigned long long)cur->parent,
				ret == -ENOENT ? "not indexed"
					       : dcr_strerror(ret));
			return DCR_ERR(-EIO);
		}
		if (pf >= pv->m.nfiles || pv->m.files[pf].type != DCR_FT_REG ||
		    pv->chunk_size != cur->chunk_size ||
		    dcr_chunk_len(pv->m.files[pf].size, pv->chunk_size,
				  w->chunk) != clen) {
			RERR(q, WHERE_FMT ": base file %u of version %llu does "
				"not match", WHERE_ARGS(w), pf,
				(unsigned long long)pv->v);
			return DCR_ERR(-EIO);
		}
		ret = ref_get(r, pv, pf, w->chunk, &ref);
		if (ret == -ESTALE)
			return ret; /* re-indexed meanwhile: read_impl retries */
		if (ret) {
			RERR(q, WHERE_FMT ": no chunk reference in version "
				"%llu: %s", WHERE_ARGS(w),
				(unsigned long long)pv->v, dcr_strerror(ret));
			return DCR_ERR(-EIO);
		}
		cur = pv;
		cf = pf;
	}
}

/*
 * Apply the frames oldest-first onto @out. With @check, verify every
 * intermediate chunk against its own hash and set *@bad to the index of
 * the first step that fails (used only to name the culprit). With @rec,
 * the newest frame's changes are listed there (dcr_frame_apply_rec).
 */
static int apply_chain(struct dcr_codec *codec, struct chain *ch,
		       uint8_t *out, uint32_t clen, bool check, size_t *bad,
		       struct dcr_frame_rec *rec)
{
	uint8_t got[DCR_HASH_LEN];

	for (size_t k = ch->n; k-- > 0;) {
		struct step *s = &ch->s[k];
		int ret = dcr_frame_apply_rec(codec, s->data, s->ref.len,
					      out, clen, k ? NULL : rec);
		if (ret) {
			*bad = k;
			return ret;
		}
		if (check) {
			dcr_sha256(out, clen, got);
			if (!dcr_hash_eq(got, s->ref.hash)) {
				*bad = k;
				return -EILSEQ; /* decodes, but wrong bytes */
			}
		}
	}
	return 0;
}

/* Name the frame that made the chain fail verification; one log line. */
static void blame(struct dcr_reader *r, const struct rreq *q,
		  const struct where *w,
		  struct dcr_codec *codec, struct chain *ch, uint8_t *out,
		  uint32_t clen, int first_err, size_t first_bad)
{
	char key[DCR_HASH_HEX_LEN + 16];
	size_t bad = first_bad;
	int ret = first_err;

	if (ret == 0) {
		/* Final hash mismatch: replay, checking every step. */
		struct dcr_cache_key k;
		bool base_ok = true;

		if (ch->base_cached) {
			cache_key(&k, ch->base_rv, ch->base_file, w->chunk,
				  &ch->base_ref);
			base_ok = base_get(r, &k, out) == 0;
		}
		bad = 0;
		if (base_ok)
			ret = apply_chain(codec, ch, out, clen, true, &bad,
					  NULL);
		if (ret == 0)
			bad = 0;
	}
	dcr_pack_key(ch->s[bad].ref.pack, key, sizeof(key));
	RERR(q, "%s: %s in the frame of version %llu at %llu+%u (needed for "
		WHERE_FMT ")", key,
		ret == -EBADMSG ? "corrupt frame (does not decode)"
		: ret == -EILSEQ || ret == 0 ? "corrupt data (chunk hash mismatch)"
					     : dcr_strerror(ret),
		(unsigned long long)ch->s[bad].rv->v,
		(unsigned long long)ch->s[bad].ref.off, ch->s[bad].ref.len,
		WHERE_ARGS(w));
}

/*
 * Whether @ch can be proven the fast way (manifest.h, format 2): the
 * chunk and every frame on its chain carry check values.
 */
static bool chain_has_check(const struct dcr_reader *r,
			    const struct where *w,
			    const struct dcr_catalog_chunk *ref0,
			    const struct chain *ch)
{
	/* with a trust set, only on authentic encodings (rtrust.c) */
	bool trust = r->vs.trust != NULL;

	if (!ref0->has_check || (trust && !atomic_load(&w->rv->fast)) ||
	    (trust && ch->base_cached && !atomic_load(&ch->base_rv->fast)))
		return false;
	for (size_t k = 0; k < ch->n; k++)
		if (!ch->s[k].ref.has_check ||
		    (trust && !atomic_load(&ch->s[k].rv->fast)))
			return false;
	return true;
}

/*
 * The delta view's by-product (read/dvrec.h): whether the chunk at @w,
 * built by @ch, is made by its own version's delta frame from the same
 * chunk of its parent, in a file the view covers; then its changes are
 * worth listing (while records are kept at all: dcr_dvrec_active).
 */
static bool want_rec(const struct dcr_reader *r, const struct where *w,
		     const struct chain *ch)
{
	return dcr_dvrec_active(r->dvrec) && ch->n && ch->s[0].rv == w->rv &&
	       ch->s[0].ref.kind == DCR_CK_DELTA &&
	       dcr_dvrec_wants(w->rv->m.files[w->file].path);
}

/* Keep the changes @fr of the proven chunk @out at @w (want_rec). */
static void keep_rec(struct dcr_reader *r, const struct where *w,
		     const struct dcr_frame_rec *fr, const uint8_t *out,
		     uint32_t clen)
{
	const struct dcr_dvrec_key k = { w->rv->v, w->rv->tree, w->file,
					 w->chunk };
	struct rver *pv;

	/* the parent's tree: its chain went through it (resolve_chain) */
	if (fr->complete && get_ver(r, w->rv->parent, &pv) == 0)
		(void)dcr_dvrec_keep(r->dvrec, &k, w->rv->parent, pv->tree,
				     w->rv->m.files[w->file].base, fr, out,
				     clen);
}

/*
 * Check the fetched frames of @ch, apply them onto @out (which holds the
 * cached base, if any) and prove the result equal to the committed
 * chunk: for format 2 chains, every frame against its SHA-256 and the
 * result against its XXH3-128 (see manifest.h for why that proves it);
 * else the result against its SHA-256. Errors are logged once (a failed
 * fetch was logged by fetch_run).
 */
static int finish_chain(struct dcr_reader *r, const struct rreq *q,
			const struct where *w,
			const struct dcr_catalog_chunk *ref0, uint32_t clen,
			uint8_t *out, struct chain *ch)
{
	struct dcr_codec *codec = NULL;
	uint8_t got[DCR_HASH_LEN];
	bool fast = chain_has_check(r, w, ref0, ch);
	struct dcr_frame_rec rec = { 0 };
	bool want = want_rec(r, w, ch);
	size_t bad = 0;
	int ret = 0;

	for (size_t k = 0; k < ch->n; k++)
		if (ch->s[k].rc)
			return ch->s[k].rc == -ENOMEM ? -ENOMEM : DCR_ERR(-EIO);
	for (size_t k = 0; fast && k < ch->n; k++) {
		dcr_sha256(ch->s[k].data, ch->s[k].ref.len, got);
		if (!dcr_hash_eq(got, ch->s[k].ref.fhash)) {
			char key[DCR_HASH_HEX_LEN + 16];

			dcr_pack_key(ch->s[k].ref.pack, key, sizeof(key));
			RERR(q, "%s: corrupt frame (frame hash mismatch) of "
			     "version %llu at %llu+%u (needed for "
			     WHERE_FMT ")", key,
			     (unsigned long long)ch->s[k].rv->v,
			     (unsigned long long)ch->s[k].ref.off,
			     ch->s[k].ref.len, WHERE_ARGS(w));
			return DCR_ERR(-EIO);
		}
	}
	if (ch->n) {
		codec = codec_get(r);
		if (!codec)
			return DCR_ERR(-ENOMEM);
		ret = apply_chain(codec, ch, out, clen, false, &bad,
				  want ? &rec : NULL);
		if (ret == -ENOMEM)
			goto out_codec;
	}
	if (!ret && fast) {
		dcr_xxh128(out, clen, got);
		if (memcmp(got, ref0->xxh, DCR_XXH_LEN) == 0)
			goto out_codec;
	}
	if (!ret) {
		/* Format 1, or a check value that disagrees: the chunk's
		 * SHA-256 decides (it alone proves the bytes). */
		dcr_sha256(out, clen, got);
		if (!fast)
			STAT_ADD(r, sha_proven, clen);
		if (dcr_hash_eq(got, ref0->hash)) {
			if (fast)
				dcr_warn(WHERE_FMT ": the check value in the "
					 "manifest does not match the chunk, "
					 "which matches its SHA-256 (a "
					 "committer bug?); served",
					 WHERE_ARGS(w));
			goto out_codec;
		}
	}
	if (ch->n) {
		blame(r, q, w, codec, ch, out, clen, ret, bad);
	} else {
		RERR(q, WHERE_FMT ": cached base does not match (hash "
		     "mismatch)", WHERE_ARGS(w));
	}
	ret = DCR_ERR(-EIO);
out_codec:
	if (!ret && want) /* proven: the record's values are the chunk's */
		keep_rec(r, w, &rec, out, clen);
	if (codec)
		codec_put(r, codec);
	return ret;
}

/*
 * Fast path: look up the chunk's reference and try memory, then the
 * cache, which checks every chunk it reads whole against the manifest.
 * A piece of a chunk read from the cache checks only its own sub-blocks
 * if the cache kept the chunk's sums (dcr_cache_read_part); else it
 * reads and checks the chunk whole and keeps it in memory (hot), so that
 * the other pieces of it do not read and check it again. 0 on a hit, -ENOENT on a miss (p->ref is
 * then filled; a chunk that failed its check is a miss), else -errno
 * (logged). Without p->dst (read-ahead), a cached chunk is proven now
 * if this mount has not yet (on the read-ahead thread, through the page
 * cache, so the reader that follows finds it resident): 1 if that work
 * was done.
 */
int piece_fast(struct dcr_reader *r, const struct rreq *q, struct piece *p)
{
	struct dcr_cache_key k;
	int ret;

	ret = ref_get(r, p->w.rv, p->w.file, p->w.chunk, &p->ref);
	if (ret == -ESTALE)
		return ret; /* re-indexed meanwhile: read_impl retries */
	if (ret) {
		RERR(q, WHERE_FMT ": no chunk reference in the catalog: %s",
		     WHERE_ARGS(&p->w), dcr_strerror(ret));
		return DCR_ERR(-EIO);
	}
	if (!p->dst) {
		if (cent_serve(r, q, p) == 0)
			return 0;
		cache_key(&k, p->w.rv, p->w.file, p->w.chunk, &p->ref);
		int64_t t0 = dcr_mono_ns();

		ret = dcr_cache_check(r->cache, &k);
		BUSY_ADD(r, busy_check, t0);
		if (ret == 1)
			STAT_ADD(r, verified, p->clen);
		return cache_answer(ret);
	}
	if (cent_serve(r, q, p) == 0)
		return 0;
	cache_key(&k, p->w.rv, p->w.file, p->w.chunk, &p->ref);
	if (p->n < p->clen) {
		struct cent *whole = cent_new(r, p->clen);

		if (whole) {
			/* Checks only the part when the cache kept the
			 * chunk's sums; else reads it whole: kept hot. */
			ret = dcr_cache_read_part(r->cache, &k, p->coff,
						  p->dst, p->n, whole->data);
			if (ret == 1)
				cent_keep(r, whole, p);
			else
				cent_release(r, whole);
			return ret == 1 ? 0 : cache_answer(ret);
		}
	}
	return cache_answer(dcr_cache_read(r->cache, &k, p->coff, p->dst,
					   p->n));
}

/* ---------------------------------------------- parallel for, batches */

/* The caller plus idle threads of r->qs.par: a network wait blocks only its
 * own thread. */
void par_for(struct dcr_reader *r, int nthreads, size_t n,
	     dcr_wq_par_fn fn, void *arg)
{
	dcr_wq_par_for(r->qs.par, nthreads, n, fn, arg);
}

static int cmp_fitem(const void *a, const void *b)
{
	const struct step *x = ((const struct fitem *)a)->s;
	const struct step *y = ((const struct fitem *)b)->s;
	int c = memcmp(x->ref.pack, y->ref.pack, DCR_HASH_LEN);

	if (c)
		return c;
	return x->ref.off < y->ref.off ? -1 : x->ref.off > y->ref.off;
}

/* Fetch run @i and point its steps at their frames. */
void fetch_run(void *arg, size_t i)
{
	struct batch *b = arg;
	struct run *ru = &b->runs[i];
	const struct fitem *first = &b->it[ru->first];
	const struct where *w = &b->c[first->c].p->w;
	char key[DCR_HASH_HEX_LEN + 16];
	bool logged = false;
	int64_t t0 = dcr_mono_ns();
	int ret;

	dcr_pack_key(first->s->ref.pack, key, sizeof(key));
	runbuf_get(b->r, &ru->buf, (size_t)ru->len);
	ret = dcr_store_get_within(b->r->st, key, ru->off, ru->len,
				   b->q.deadline, &ru->buf);
	BUSY_ADD(b->r, busy_fetch, t0);
	STAT_ADD(b->r, fetches, 1);
	STAT_ADD(b->r, fetched, ru->buf.len);
	if (ret)
		STAT_ADD(b->r, fetch_errors, 1);
	if (ret && ret != -ENOMEM) {
		RERR(&b->q, "%s: %s (needed for " WHERE_FMT ")", key,
		     ret == -ENOENT ? "missing object" : dcr_strerror(ret),
		     WHERE_ARGS(w));
		ret = DCR_ERR(-EIO);
	}
	for (size_t k = 0; k < ru->n; k++) {
		struct step *s = b->it[ru->first + k].s;
		uint64_t rel = s->ref.off - ru->off;

		s->rc = ret;
		if (ret)
			continue;
		if (rel + s->ref.len > ru->buf.len) {
			/* The pack ends early: frames before the cut are fine. */
			if (!logged)
				RERR(&b->q, "%s: truncated: %llu of %u bytes at %llu "
				     "(needed for " WHERE_FMT ")", key,
				     (unsigned long long)(ru->buf.len > rel ?
							  ru->buf.len - rel : 0),
				     s->ref.len,
				     (unsigned long long)s->ref.off,
				     WHERE_ARGS(&b->c[b->it[ru->first + k].c].p->w));
			logged = true;
			s->rc = DCR_ERR(-EIO);
			continue;
		}
		s->data = ru->buf.data + rel;
	}
}

/*
 * Leader chunk @c is built and proven: release its waiters (they need
 * not wait for the write too) and store it in its place in the cache,
 * behind the read (write-behind) or now. Every version's chunks go into
 * its own slab, those equal to an older version's too, so that evicting
 * old versions never costs a newer one its chunks.
 */
static void chunk_built(struct batch *b, struct bchunk *c)
{
	struct piece *p = c->p;

	c->ready = true;
	STAT_ADD(b->r, materialized, p->clen);
	STAT_ADD(b->r, verified, p->clen);
	if (b->q.rebuild) { /* its place in the cache is the scrub's */
		cent_publish(b->r, c->e, 0, true);
		return;
	}
	if (c->slot) {
		/* In its place already: the entry gets its bytes (or is
		 * unlisted) once the place is the cache's (put_due). */
		c->due = true;
		return;
	}
	cent_publish(b->r, c->e, 0, false);
	if (b->q.pagecache) {
		c->due = true; /* with its neighbours: put_due */
		return;
	}
	if (b->q.settle || !wq_submit(b->r, c->e)) {
		int64_t t0 = dcr_mono_ns();

		piece_put(b->r, &b->q, p, c->e->data);
		BUSY_ADD(b->r, busy_write, t0);
		cent_publish(b->r, c->e, 0, true);
	}
}

/*
 * Leader chunk @c failed its proof although every frame was fetched, and
 * the store sends pack GETs through mirrors (store/mirror.h): resolve
 * its chain again and prove it from frames fetched from the store
 * itself. 0, or -errno (logged).
 */
static int refetch_from_store(struct batch *b, struct bchunk *c)
{
	struct piece *p = c->p;
	struct dcr_buf *bufs;
	int ret;

	for (size_t k = 0; k < c->ch.n; k++)
		if (c->ch.s[k].rc)
			return c->rc; /* a fetch failed: nothing to prove */
	chain_free(&c->ch);
	ret = resolve_chain(b->r, &b->q, &p->w, &p->ref, p->clen, c->out,
			    &c->ch);
	if (ret) /* logged; -ESTALE: read_impl retries */
		return ret == -ENOMEM || ret == -ESTALE ? ret : DCR_ERR(-EIO);
	bufs = calloc(c->ch.n + 1, sizeof(*bufs));
	if (!bufs)
		return DCR_ERR(-ENOMEM);
	for (size_t k = 0; k < c->ch.n; k++) {
		struct step *s = &c->ch.s[k];
		char key[DCR_HASH_HEX_LEN + 16];

		dcr_pack_key(s->ref.pack, key, sizeof(key));
		dcr_buf_init(&bufs[k], s->ref.len);
		s->rc = dcr_mirror_refetch(b->r->st, key, s->ref.off,
					   s->ref.len, b->q.deadline, &bufs[k]);
		STAT_ADD(b->r, fetches, 1);
		STAT_ADD(b->r, fetched, bufs[k].len);
		if (!s->rc && bufs[k].len < s->ref.len)
			s->rc = -EIO; /* the store's pack ends early */
		if (s->rc) {
			STAT_ADD(b->r, fetch_errors, 1);
			RERR(&b->q, "%s: %s (refetch for " WHERE_FMT ")", key,
			     dcr_strerror(s->rc), WHERE_ARGS(&p->w));
			s->rc = s->rc == -ENOMEM ? s->rc : DCR_ERR(-EIO);
		}
		s->data = bufs[k].data;
	}
	ret = finish_chain(b->r, &b->q, &p->w, &p->ref, p->clen, c->out,
			   &c->ch);
	for (size_t k = 0; k < c->ch.n; k++)
		dcr_buf_free(&bufs[k]);
	free(bufs);
	return ret;
}

/* Apply and verify leader chunk @i, then cache it. */
static void finish_one(void *arg, size_t i)
{
	struct batch *b = arg;
	struct bchunk *c = &b->c[i];
	struct piece *p = c->p;
	int64_t t0 = dcr_mono_ns();

	if (!c->leader || c->ready || c->rc)
		return;
	c->rc = finish_chain(b->r, &b->q, &p->w, &p->ref, p->clen, c->out,
			     &c->ch);
	BUSY_ADD(b->r, busy_decode, t0);
	if (c->rc == -EIO && dcr_store_is_mirrored(b->r->st))
		c->rc = refetch_from_store(b, c);
	if (!c->rc)
		chunk_built(b, c);
}

/* Collect the frames to fetch and merge adjacent ones into runs. */
static int plan_runs(struct batch *b)
{
	struct dcr_reader *r = b->r;
	size_t nit = 0;

	for (size_t i = 0; i < b->nc; i++)
		if (b->c[i].leader && !b->c[i].ready && !b->c[i].rc)
			nit += b->c[i].ch.n;
	if (!nit)
		return 0;
	b->it = calloc(nit, sizeof(*b->it));
	b->runs = calloc(nit, sizeof(*b->runs));
	if (!b->it || !b->runs)
		return DCR_ERR(-ENOMEM);
	for (size_t i = 0; i < b->nc; i++) {
		struct bchunk *c = &b->c[i];

		if (!c->leader || c->ready || c->rc)
			continue;
		for (size_t k = 0; k < c->ch.n; k++) {
			struct step *s = &c->ch.s[k];

			if (s->ref.len < DCR_FRAME_HDR_LEN) {
				char key[DCR_HASH_HEX_LEN + 16];

				dcr_pack_key(s->ref.pack, key, sizeof(key));
				RERR(&b->q, "%s: frame of version %llu at %llu has a "
				     "bad length %u (" WHERE_FMT ")", key,
				     (unsigned long long)s->rv->v,
				     (unsigned long long)s->ref.off,
				     s->ref.len, WHERE_ARGS(&c->p->w));
				c->rc = DCR_ERR(-EIO);
				break;
			}
		}
		if (c->rc)
			continue;
		for (size_t k = 0; k < c->ch.n; k++)
			b->it[b->nit++] = (struct fitem){ &c->ch.s[k], i };
	}
	if (b->nit) /* qsort's pointer must not be NULL (UBSan) */
		qsort(b->it, b->nit, sizeof(*b->it), cmp_fitem);
	for (size_t k = 0; k < b->nit; k++) {
		const struct step *s = b->it[k].s;
		struct run *ru = b->nruns ? &b->runs[b->nruns - 1] : NULL;
		uint64_t end = s->ref.off + s->ref.len;

		if (ru && r->coalesce_max > 1 &&
		    !memcmp(b->it[ru->first].s->ref.pack, s->ref.pack,
			    DCR_HASH_LEN) &&
		    s->ref.off <= ru->off + ru->len + COALESCE_GAP &&
		    DCR_MAX(end, ru->off + ru->len) - ru->off <=
			    r->coalesce_max) {
			ru->len = DCR_MAX(end, ru->off + ru->len) - ru->off;
			ru->n++;
			continue;
		}
		ru = &b->runs[b->nruns++];
		ru->first = k;
		ru->n = 1;
		ru->off = s->ref.off;
		ru->len = s->ref.len;
	}
	return 0;
}

/*
 * Where leader chunk @c of @b is built: for a prefetch (through the page
 * cache, no destination), in its place in the cache, so that each byte
 * is made once where the loader will map it (the base read into it, the
 * frames applied and the result proven there); else, or where the cache
 * refuses, in its entry's buffer, then written.
 */
static void build_place(struct batch *b, struct bchunk *c)
{
	struct dcr_cache_key k;
	uint8_t *out;
	int64_t t0;

	if (!b->q.pagecache || b->q.rebuild || c->p->dst)
		return;
	cache_key(&k, c->p->w.rv, c->p->w.file, c->p->w.chunk, &c->p->ref);
	t0 = dcr_mono_ns(); /* the place's pages: the write stage's work */
	if (dcr_cache_build(b->r->cache, &k, &out, &c->slot) == 0)
		c->out = out;
	BUSY_ADD(b->r, busy_write, t0);
}

/*
 * Leader chunk @c was built and proven in its place in the cache
 * (build_place): the place becomes the cache's, and the entry is
 * published. Only a reader already holding the entry gets the bytes
 * copied into it; else the entry is unlisted first, so that no one
 * looks for them there (they read the cache).
 */
static void place_done(struct batch *b, struct bchunk *c)
{
	int64_t t0 = dcr_mono_ns();

	if (!cent_unlist_alone(b->r, c->e))
		memcpy(c->e->data, c->out, c->p->clen);
	dcr_cache_build_end(b->r->cache, c->slot, true);
	BUSY_ADD(b->r, busy_write, t0);
	c->slot = NULL;
	c->out = c->e->data;
	cent_publish(b->r, c->e, 0, true);
}

/* Join or lead every chunk of @b, resolve the chains, plan the GETs. */
void batch_prepare(struct batch *b, struct piece *ps)
{
	struct dcr_reader *r = b->r;
	int ret;

	for (size_t i = 0; i < b->nc; i++) {
		struct bchunk *c = &b->c[i];

		c->p = &ps[i];
		c->rc = cent_join(r, &b->q, c->p, &c->e);
		c->out = c->e ? c->e->data : NULL;
		c->leader = c->rc == 1;
		if (c->rc == 1)
			c->rc = 0;
		if (c->rc || !c->leader)
			continue;
		/* A leader that just finished may have cached it after our
		 * miss: look once more before fetching (not for a rebuild:
		 * the cache's copy is what failed). */
		c->rc = -ENOENT;
		if (!b->q.rebuild) {
			struct dcr_cache_key k;

			cache_key(&k, c->p->w.rv, c->p->w.file, c->p->w.chunk,
				  &c->p->ref);
			c->rc = cache_answer(dcr_cache_read(r->cache, &k, 0,
							    c->e->data,
							    c->p->clen));
		}
		if (c->rc == 0) {
			c->ready = true;
			cent_publish(r, c->e, 0, true);
		} else if (c->rc == -ENOENT) {
			build_place(b, c);
			c->rc = resolve_chain(r, &b->q, &c->p->w, &c->p->ref,
					      c->p->clen, c->out, &c->ch);
			if (!c->rc && !c->ch.n) {
				/* An older version's cached chunk that is this
				 * one (SAME): proven, and stored as ours. */
				c->rc = finish_chain(r, &b->q, &c->p->w,
						     &c->p->ref,
						     c->p->clen, c->out,
						     &c->ch);
				if (!c->rc)
					chunk_built(b, c);
			}
		}
	}
	ret = plan_runs(b);
	if (ret) {
		for (size_t i = 0; i < b->nc; i++)
			if (b->c[i].leader && !b->c[i].ready && !b->c[i].rc)
				b->c[i].rc = ret;
		b->nruns = 0;
	}
}

/*
 * Write the chunks of @b built for a prefetch (due) to the cache, each
 * run of neighbours of one file with one call (dcr_cache_put_run: large
 * folios in the page cache, which the loader maps), and mark them
 * persisted.
 */
static void put_due(struct batch *b)
{
	struct dcr_cache_key k[DCR_CACHE_RUN_MAX];
	const void *data[DCR_CACHE_RUN_MAX];
	struct bchunk *run[DCR_CACHE_RUN_MAX];
	size_t n = 0;

	for (size_t i = 0; i <= b->nc; i++) {
		struct bchunk *c = i < b->nc ? &b->c[i] : NULL;
		const struct where *w = c && c->due ? &c->p->w : NULL;

		if (c && c->due && c->slot) {
			c->due = false;
			place_done(b, c);
			w = NULL; /* not written: ends the run */
		}

		if (n && (!w || n == DCR_CACHE_RUN_MAX ||
			  w->rv != run[0]->p->w.rv ||
			  w->file != run[0]->p->w.file ||
			  w->chunk != run[n - 1]->p->w.chunk + 1)) {
			int64_t t0 = dcr_mono_ns();

			dcr_cache_put_run(b->r->cache, k, data, n,
					  DCR_CACHE_PUT_MAP);
			BUSY_ADD(b->r, busy_write, t0);
			for (size_t j = 0; j < n; j++)
				cent_publish(b->r, run[j]->e, 0, true);
			n = 0;
		}
		if (!w)
			continue;
		c->due = false;
		cache_key(&k[n], w->rv, w->file, w->chunk, &c->p->ref);
		data[n] = c->e->data;
		run[n++] = c;
	}
}

/*
 * Decode, verify and cache what batch_prepare planned and the GETs
 * brought, hand the slices to their destinations, and free @b's parts.
 * Returns 0 or the first -errno (see materialize_batch).
 */
int batch_finish(struct batch *b, int nthreads)
{
	struct dcr_reader *r = b->r;
	const size_t n = b->nc;
	int ret = 0;

	/* Decoding is CPU work: on the CPU budget's threads, whatever
	 * the requests in flight (@nthreads) that fetched it. */
	if (b->nruns)
		par_for(r, DCR_MAX(nthreads, r->threads), n, finish_one, b);
	put_due(b); /* before waiting on others' chunks, as they on ours */

	/* Leaders first: a waiter below may wait on an entry of ours. */
	for (size_t i = 0; i < n; i++) {
		struct bchunk *c = &b->c[i];

		if (!c->e || !c->leader)
			continue;
		if (!c->rc && !c->ready)
			c->rc = DCR_ERR(-EIO); /* never built: never served */
		if (c->slot) { /* never proven: punched, never served */
			dcr_cache_build_end(r->cache, c->slot, false);
			c->slot = NULL;
		}
		if (c->rc)
			cent_publish(r, c->e, c->rc, false);
		else if (c->p->dst)
			memcpy(c->p->dst, c->e->data + c->p->coff, c->p->n);
	}
	for (size_t i = 0; i < n; i++) {
		struct bchunk *c = &b->c[i];
		struct cent *e = c->e;

		if (!e || c->leader || (!c->p->dst && !b->q.settle))
			continue;
		c->rc = cent_wait(r, e, b->q.settle);
		if (!c->rc) {
			if (c->p->dst)
				memcpy(c->p->dst, e->data + c->p->coff,
				       c->p->n);
			/* Built as another version's or file's chunk of the
			 * same content: ours goes to the cache too, so that
			 * every chunk a read served is in its own slab. */
			if (!where_eq(&e->w, &c->p->w) && !b->q.rebuild)
				piece_put(r, &b->q, c->p, e->data);
		} else if (e->quiet && !b->q.quiet) {
			/* Read-ahead failed quietly: do it ourselves, so the
			 * failure is logged by the read that needs it. */
			cent_release(r, e);
			c->e = NULL;
			c->rc = materialize_batch(r, c->p, 1, 1, &b->q);
		}
	}

	for (size_t i = 0; i < n; i++) {
		if (b->c[i].e)
			cent_release(r, b->c[i].e);
		chain_free(&b->c[i].ch);
		if (!ret && b->c[i].rc && (!b->q.quiet || b->c[i].leader))
			ret = b->c[i].rc;
	}
	for (size_t i = 0; i < b->nruns; i++)
		runbuf_put(r, &b->runs[i].buf);
	free(b->runs);
	free(b->it);
	free(b->c);
	return ret;
}

/*
 * Materialize the @n missed chunks @ps: join the entries of chunks that
 * others are building, lead the rest - resolve every chain, fetch all
 * their frames with as few ranged GETs as adjacency allows (one per run
 * of neighbouring frames in a pack), runs in parallel, then decode,
 * verify and cache - and copy each slice to its destination. With
 * @nthreads > 1 fetches and decodes run in parallel. Pieces without a
 * destination skip chunks others build (read-ahead), unless
 * q->settle (a prefetch), which waits for them to be in the cache.
 * Returns 0 or the first -errno.
 */
int materialize_batch(struct dcr_reader *r, struct piece *ps, size_t n,
		      int nthreads, const struct rreq *q)
{
	struct batch b = { .r = r, .nc = n, .q = *q };

	b.c = calloc(n, sizeof(*b.c));
	if (!b.c)
		return DCR_ERR(-ENOMEM);
	batch_prepare(&b, ps);
	if (b.nruns)
		par_for(r, nthreads, b.nruns, fetch_run, &b);
	return batch_finish(&b, nthreads);
}
