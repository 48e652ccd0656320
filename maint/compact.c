/* SPDX-License-Identifier: MIT */
/*
 * compact.c - skip-delta re-encoding of a store's versions (compact.h).
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chunk.h"
#include "common.h"
#include "cpus.h"
#include "fileio.h"
#include "compact.h"
#include "frame.h"
#include "hash.h"
#include "manifest.h"
#include "packw.h"
#include "safetensors.h"
#include "wq.h"


struct cver {
	uint64_t v;
	struct dcr_sview_ver *sx; /* the view's */
	const struct dcr_manifest *o; /* versions/<n>: content and lineage
					 (the view's) */
	bool kept;
	uint64_t eb;            /* current encoding base (0: none) */
	uint64_t tb;            /* target base (0: anchor) */
	unsigned dep_before, dep_after;
	bool rewrite;
	struct dcr_manifest nm; /* the new encoding; chunk packs are pack
				   sequence numbers until finish() */
	uint8_t mhash[DCR_HASH_LEN];
	/* per file (NULL: not a regular file), per chunk: the modelled
	 * cold-read cost of the chunk as encoded (chain) and of the full
	 * frame its chain starts from (root); see within() */
	struct ccost **cost;
};

struct ccost {
	uint64_t chain, root;
};

/* One chunk being encoded: a worker's scratch (chunks of a batch are
 * encoded in parallel, then packed in order). */
struct slot {
	struct dcr_codec *codec;
	struct dcr_buf frame;
	uint8_t fhash[DCR_HASH_LEN]; /* the frame's SHA-256 (its pack's name) */
	uint8_t *buf, *bbuf, *chk;
	int ret;
};

struct cctx {
	struct dcr_sview *sv;
	struct dcr_store *st;
	struct dcr_reader *r;
	const struct dcr_compact_opts *o;
	struct dcr_compact_stats *s;
	struct cver *vs;
	size_t n, cap;
	struct dcr_packw *pw;     /* packs: frames in order, by sequence number */
	unsigned read_pct;        /* see dcr_compact_opts.read_cost */
	/* encoding: nslots chunks at a time on the pool's threads */
	struct dcr_wq *wq;
	int threads;
	struct slot *slots;
	size_t nslots;
};

/* A batch of chunks of one file of one version (see encode_batch). */
struct batch {
	struct cctx *c;
	struct cver *x, *b;
	uint32_t fi;
	int64_t bfi;
	const struct dcr_regions *rg;
	uint64_t k0;
	struct dcr_chunk_ref *refs; /* the file's, from k0 */
	struct ccost *cost, *bcost; /* the file's and its base file's */
};

static int cmp_cver(const void *a, const void *b)
{
	const struct cver *x = a, *y = b;

	return x->v < y->v ? -1 : x->v > y->v;
}

static struct cver *find(struct cctx *c, uint64_t v)
{
	struct cver key = { .v = v };

	return v ? bsearch(&key, c->vs, c->n, sizeof(*c->vs), cmp_cver) : NULL;
}

static bool in_keep(const struct dcr_compact_opts *o, uint64_t v)
{
	size_t i;

	if (!o->keep)
		return true;
	i = dcr_lower_bound_u64(o->keep, o->nkeep, sizeof(*o->keep), 0, v);
	return i < o->nkeep && o->keep[i] == v;
}

/* The nearest kept logical ancestor of @x (NULL: @x is a root). */
static struct cver *kept_parent(struct cctx *c, const struct cver *x)
{
	struct cver *p = find(c, x->o->parent);

	while (p && !p->kept)
		p = find(c, p->o->parent);
	return p;
}

/* Every version's committed manifest and current encoding base, from
 * the view (fetched there once). */
static int load(struct cctx *c)
{
	struct dcr_sview *sv = c->sv;

	if (!(c->vs = calloc(sv->nvs ? sv->nvs : 1, sizeof(*c->vs))))
		return DCR_ERR(-ENOMEM);
	c->n = c->cap = sv->nvs;
	for (size_t i = 0; i < c->n; i++) { /* all numbered first: find() */
		c->vs[i].v = sv->vs[i].v;
		c->vs[i].sx = &sv->vs[i];
		c->vs[i].kept = in_keep(c->o, c->vs[i].v);
	}
	for (size_t i = 0; i < c->n; i++) {
		struct cver *x = &c->vs[i];
		const struct dcr_manifest *em;

		/* as read (the encoding) first: committed needs it */
		if (!(em = dcr_sview_manifest(sv, x->sx)) ||
		    !(x->o = dcr_sview_committed(sv, x->sx, NULL)))
			return dcr_sview_state(x->sx); /* logged */
		x->eb = dcr_manifest_needs_parent(em) ? em->parent : 0;
		struct cver *b = find(c, x->eb);
		x->dep_before = x->eb ? (b ? b->dep_before : 0) + 1 : 1;
		c->s->depth_before = DCR_MAX(c->s->depth_before, x->dep_before);
	}
	return 0;
}

/* Choose every kept version's target base (see compact.h). */
static void plan(struct cctx *c, unsigned k)
{
	for (size_t i = 0; i < c->n; i++) {
		struct cver *x = &c->vs[i], *a, *p;
		if (!x->kept)
			continue;
		c->s->versions++;
		p = kept_parent(c, x);
		/* a version encoded as an anchor (the committer's --full, an
		 * earlier compaction's) stays one: a root of its own */
		if (!p || k == 1 || !x->eb) {
			x->tb = 0;
			x->dep_after = 1;
		} else {
			uint64_t t = x->v;
			do
				t &= t - 1;
			while (t && (unsigned)__builtin_popcountll(t) + 2 > k);
			/* the nearest kept ancestor numbered <= t, or the
			 * nearest anchor on the way */
			for (a = p; a->v > t && a->dep_after > 1; a = p) {
				p = kept_parent(c, a);
				if (!p)
					break;
			}
			/* down the encoding chain until the depth fits */
			while (a->dep_after + 1 > k)
				a = find(c, a->tb);
			x->tb = a->v;
			x->dep_after = a->dep_after + 1;
		}
		x->rewrite = x->eb != x->tb;
		c->s->depth_after = DCR_MAX(c->s->depth_after, x->dep_after);
	}
}

/* Bytes [off, off + len) of file @fi of version @v, through the reader. */
static int read_chunk(struct cctx *c, uint64_t v, uint32_t fi, uint64_t off,
		      uint8_t *dst, size_t len)
{
	int ret = dcr_reader_read_exact(c->r, v, DCR_READER_ANY_TREE, fi + 1,
					off, dst, len);

	if (ret)
		dcr_err("%s: cannot materialize version %" PRIu64 " at %" PRIu64
			": %s", c->st->url, v, off, dcr_strerror(ret));
	return ret;
}

/*
 * Whether a chunk of @len bytes whose frames cost @chain to fetch and
 * apply reads within @pct % of the time of its chain's full frame alone
 * (@root): the bound compaction keeps on every chunk of every version.
 * Every read of a chunk costs at least one request (DCR_COST_FRAME), so
 * a short chunk is not made full for the request its delta adds.
 */
static bool within(uint64_t chain, uint64_t root, size_t len, unsigned pct)
{
	uint64_t fixed = (uint64_t)DCR_COMPACT_READ_FIXED * len + DCR_COST_FRAME;

	return (fixed + chain) * 100 <= (fixed + root) * pct;
}

static int cost_alloc(struct cver *x)
{
	if (!(x->cost = calloc(x->o->nfiles ? x->o->nfiles : 1, sizeof(*x->cost))))
		return DCR_ERR(-ENOMEM);
	for (uint32_t fi = 0; fi < x->o->nfiles; fi++) {
		const struct dcr_file *f = &x->o->files[fi];
		if (f->type == DCR_FT_REG &&
		    !(x->cost[fi] = calloc(f->nchunks ? f->nchunks : 1,
					   sizeof(*x->cost[fi]))))
			return DCR_ERR(-ENOMEM);
	}
	return 0;
}

static void cost_free(struct cver *x)
{
	for (uint32_t fi = 0; x->cost && fi < x->o->nfiles; fi++)
		free(x->cost[fi]);
	free(x->cost);
	x->cost = NULL;
}

/* The costs of chunk base file @bfi of @b, if @b's costs are known and
 * its file has the chunks of @f. */
static struct ccost *base_costs(const struct cver *b, uint32_t bfi,
				const struct dcr_file *f)
{
	if (!b || !b->cost || bfi >= b->o->nfiles ||
	    b->o->files[bfi].type != DCR_FT_REG ||
	    b->o->files[bfi].nchunks != f->nchunks)
		return NULL;
	return b->cost[bfi];
}

/*
 * The costs of the chunks of @x as encoded now (a version plan() leaves
 * on its base), from the headers of its frames; *@over: some chunk reads
 * beyond the bound (within()), or on a base of unknown cost, so @x is
 * to be re-encoded. 0 or -errno (logged).
 */
static int costs_of(struct cctx *c, struct cver *x, bool *over)
{
	/* as encoded now: the view's (load() fetched it) */
	const struct dcr_manifest *m = dcr_sview_manifest(c->sv, x->sx);
	const struct cver *b = find(c, x->eb);
	char key[DCR_HASH_HEX_LEN + 16];
	struct dcr_buf fr;
	int ret;

	*over = false;
	if (!m)
		return dcr_sview_state(x->sx);
	dcr_buf_init(&fr, DCR_CHUNK_MAX + 4096);
	if ((ret = cost_alloc(x)))
		goto out_buf;
	if (m->nfiles != x->o->nfiles) {
		*over = true;
		goto out_buf;
	}
	for (uint32_t fi = 0; fi < m->nfiles; fi++) {
		const struct dcr_file *f = &m->files[fi];
		const struct ccost *bc;

		if (f->type != DCR_FT_REG || !x->cost[fi])
			continue;
		bc = f->base == DCR_NO_BASE ? NULL : base_costs(b, f->base, f);
		for (uint64_t k = 0; k < f->nchunks; k++) {
			const struct dcr_chunk_ref *ref = &f->chunks[k];
			struct ccost *cc = &x->cost[fi][k];
			uint64_t fc;

			if (ref->kind != DCR_CK_FULL && !bc) {
				*over = true;
				continue;
			}
			if (ref->kind == DCR_CK_SAME) {
				*cc = bc[k];
				continue;
			}
			dcr_pack_key(m->packs[ref->pack], key, sizeof(key));
			fr.len = 0;
			ret = dcr_store_get(c->st, key, ref->off, ref->len, &fr);
			if (!ret && fr.len != ref->len)
				ret = DCR_ERR(-EIO);
			if (!ret)
				ret = dcr_frame_cost(fr.data, fr.len, &fc);
			if (ret) {
				dcr_err("%s: cannot read the frame of chunk %" PRIu64
					" of %s (version %" PRIu64 ") at %" PRIu64
					"+%" PRIu32 ": %s", key, k, f->path, x->v,
					ref->off, ref->len, dcr_strerror(ret));
				goto out_buf;
			}
			/* a full frame chosen against a base since re-encoded
			 * (gc made it an anchor): a delta may do now */
			if (ref->kind == DCR_CK_FULL && f->base != DCR_NO_BASE &&
			    b && b->rewrite)
				*over = true;
			if (ref->kind == DCR_CK_FULL)
				*cc = (struct ccost){ fc, fc };
			else
				*cc = (struct ccost){ bc[k].chain + fc, bc[k].root };
			*over |= !within(cc->chain, cc->root,
					 dcr_chunk_len(f->size, m->chunk_size, k),
					 c->read_pct);
		}
	}
out_buf:
	dcr_buf_free(&fr);
	return ret;
}

/* The element regions of file @fi of version @v, if it is safetensors. */
static void regions(struct cctx *c, uint64_t v, uint32_t fi, uint64_t size,
		    struct dcr_regions *out)
{
	uint8_t head[8];
	size_t need;
	uint8_t *p;

	memset(out, 0, sizeof(*out));
	if (size < 8 || read_chunk(c, v, fi, 0, head, 8) ||
	    dcr_safetensors_prefix_len(head, 8, size, &need) ||
	    !(p = malloc(need)))
		return;
	if (!read_chunk(c, v, fi, 0, p, need))
		dcr_safetensors_regions(p, need, size, out);
	free(p);
}

/*
 * Encode chunk k0 + @i of the batch @arg into slot @i: a SAME reference
 * when its hash is its base's, else a frame (full, or a delta on the
 * base chunk) that is decoded back onto the base and compared with the
 * chunk. Runs on the pool's threads; the slot's ret says how it went.
 */
static void encode_one(void *arg, size_t i)
{
	struct batch *bt = arg;
	struct cctx *c = bt->c;
	struct slot *sl = &c->slots[i];
	const struct dcr_file *f = &bt->x->o->files[bt->fi];
	uint32_t cs = bt->x->o->chunk_size;
	uint64_t k = bt->k0 + i, off = k * cs;
	size_t len = (size_t)dcr_chunk_len(f->size, cs, k);
	struct dcr_elem_hint hint = dcr_regions_hint(bt->rg, off);
	struct dcr_chunk_ref *ref = &bt->refs[i];
	struct ccost *cc = &bt->cost[k];
	uint64_t fc;
	int kind, ret;

	*ref = f->chunks[k]; /* hash and check value: the content's */
	sl->ret = 0;
	sl->frame.len = 0;
	if (bt->bfi >= 0 &&
	    dcr_hash_eq(f->chunks[k].hash, bt->b->o->files[bt->bfi].chunks[k].hash)) {
		*cc = bt->bcost[k];
		ref->kind = DCR_CK_SAME;
		ref->pack = 0;
		ref->off = 0;
		ref->len = 0;
		memset(ref->fhash, 0, DCR_HASH_LEN);
		return;
	}
	if ((ret = read_chunk(c, bt->x->v, bt->fi, off, sl->buf, len)) ||
	    (bt->bfi >= 0 && (ret = read_chunk(c, bt->b->v, (uint32_t)bt->bfi, off,
					       sl->bbuf, len)))) {
		sl->ret = ret;
		return;
	}
	/* encoded and decoded back onto the base (dcr_frame_encode_checked):
	 * nothing is published that does not give the chunk */
	ret = dcr_frame_encode_checked(sl->codec, sl->buf,
				       bt->bfi >= 0 ? sl->bbuf : NULL, len, &hint,
				       &sl->frame, &kind, sl->chk);
	if (!ret)
		ret = dcr_frame_cost(sl->frame.data, sl->frame.len, &fc);
	/* a delta that would make the chunk too dear to read: a full frame
	 * (the encoder already chose one where that is smaller) */
	if (!ret && kind == DCR_FRAME_DELTA &&
	    !within(bt->bcost[k].chain + fc, bt->bcost[k].root, len, c->read_pct)) {
		sl->frame.len = 0;
		ret = dcr_frame_encode_checked(sl->codec, sl->buf, NULL, len, &hint,
					       &sl->frame, &kind, sl->chk);
		if (!ret)
			ret = dcr_frame_cost(sl->frame.data, sl->frame.len, &fc);
	}
	if (ret == -ENOTRECOVERABLE) {
		dcr_err("chunk %" PRIu64 " of %s (version %" PRIu64 ") does not "
			"decode back to its bytes: nothing published", k, f->path,
			bt->x->v);
		sl->ret = DCR_ERR(-EIO);
		return;
	}
	if (ret) {
		dcr_err("cannot encode chunk %" PRIu64 " of %s (version %" PRIu64
			"): %s", k, f->path, bt->x->v, dcr_strerror(ret));
		sl->ret = ret;
		return;
	}
	ref->kind = kind == DCR_FRAME_DELTA ? DCR_CK_DELTA : DCR_CK_FULL;
	ref->len = (uint32_t)sl->frame.len;
	if (kind == DCR_FRAME_DELTA)
		*cc = (struct ccost){ bt->bcost[k].chain + fc, bt->bcost[k].root };
	else
		*cc = (struct ccost){ fc, fc };
	dcr_sha256(sl->frame.data, sl->frame.len, sl->fhash);
	if (bt->x->o->format >= 2)
		memcpy(ref->fhash, sl->fhash, DCR_HASH_LEN);
	else
		memset(ref->fhash, 0, DCR_HASH_LEN);
}

/* Encode chunks [k0, k0 + n) of a file in parallel, then pack them in
 * order. 0 or the first chunk's -errno (logged). */
static int encode_batch(struct batch *bt, size_t n)
{
	struct cctx *c = bt->c;
	int ret;

	dcr_wq_par_for(c->wq, c->threads, n, encode_one, bt);
	for (size_t i = 0; i < n; i++) {
		struct dcr_chunk_ref *ref = &bt->refs[i];
		struct slot *sl = &c->slots[i];

		if (sl->ret)
			return sl->ret;
		if (ref->kind == DCR_CK_SAME) {
			c->s->same++;
			continue;
		}
		if (ref->kind == DCR_CK_DELTA)
			c->s->delta++;
		else
			c->s->full++;
		/* ref->pack: a sequence number until finish() */
		if ((ret = dcr_packw_append(c->pw, sl->frame.data, sl->frame.len,
					    sl->fhash, &ref->pack, &ref->off)))
			return ret;
	}
	return 0;
}

/* Build @x's new encoding against its target base. */
static int rewrite(struct cctx *c, struct cver *x)
{
	struct cver *b = find(c, x->tb);
	struct dcr_manifest *m = &x->nm;
	int ret = 0;

	*m = *x->o;
	m->parent = x->tb;
	/* Format 3's bytes and meaning, and the frames this encoder writes
	 * (two-state sparse segments) need a reader of format 4. Formats 1
	 * and 2 keep theirs: their file digests mean something else. */
	if (m->format == 3)
		m->format = DCR_MANIFEST_FORMAT_PLAIN;
	m->npacks = 0;
	m->packs = NULL;
	/* a layout is never signed; it keeps the trainer's metadata */
	m->has_sig = false;
	m->nmeta = 0;
	m->meta = NULL;
	for (uint32_t i = 0; i < x->o->nmeta; i++)
		if ((ret = dcr_manifest_set_meta(m, x->o->meta[i].key,
						 x->o->meta[i].value)))
			return ret;
	if (!(m->files = calloc(x->o->nfiles ? x->o->nfiles : 1, sizeof(*m->files))))
		return -ENOMEM;
	cost_free(x); /* as encoded before, when costs_of() chose this */
	if ((ret = cost_alloc(x)))
		return ret;
	for (uint32_t fi = 0; fi < x->o->nfiles; fi++) {
		const struct dcr_file *f = &x->o->files[fi];
		struct dcr_file *g = &m->files[fi];
		*g = *f;
		g->chunks = NULL;
		g->base = DCR_NO_BASE;
		if (!(g->path = strdup(f->path)))
			return -ENOMEM;
		if (f->type != DCR_FT_REG)
			continue;
		if (f->nchunks && !(g->chunks = calloc(f->nchunks, sizeof(*g->chunks))))
			return -ENOMEM;
		int64_t bfi = -1;
		if (b && b->o->chunk_size == x->o->chunk_size) {
			bfi = dcr_manifest_find(b->o, f->path);
			if (bfi >= 0 && (b->o->files[bfi].type != DCR_FT_REG ||
					 b->o->files[bfi].size != f->size))
				bfi = -1;
		}
		/* a base whose costs are unknown cannot be bounded: none */
		struct ccost *bc = bfi >= 0 ? base_costs(b, (uint32_t)bfi, f) : NULL;
		if (!bc)
			bfi = -1;
		g->base = bfi >= 0 ? (uint32_t)bfi : DCR_NO_BASE;
		struct dcr_regions rg;
		regions(c, x->v, fi, f->size, &rg);
		struct batch bt = { .c = c, .x = x, .b = b, .fi = fi, .bfi = bfi,
				    .rg = &rg, .cost = x->cost[fi], .bcost = bc };
		for (uint64_t k = 0; k < f->nchunks && !ret; k += c->nslots) {
			bt.k0 = k;
			bt.refs = &g->chunks[k];
			ret = encode_batch(&bt, (size_t)DCR_MIN((uint64_t)c->nslots,
								f->nchunks - k));
		}
		dcr_regions_free(&rg);
		if (ret)
			return ret;
	}
	/* One version's frames per pack (or a few, past pack_target): gc
	 * deletes whole packs, and a pack shared by many versions would be
	 * kept whole for the one version that still needs it. */
	return dcr_packw_seal(c->pw);
}

/*
 * Map @m's pack sequence numbers to a pack table of its own, then
 * encode it and upload it as manifests/<hash>.
 */
static int finish(struct cctx *c, struct cver *x)
{
	struct dcr_manifest *m = &x->nm;
	uint32_t npacks = dcr_packw_count(c->pw);
	const uint8_t (*hashes)[DCR_HASH_LEN] = dcr_packw_hashes(c->pw);
	uint32_t *map = calloc(npacks ? npacks : 1, sizeof(*map));
	struct dcr_buf b;
	char key[128];
	int ret = -ENOMEM;

	dcr_buf_init(&b, SIZE_MAX);
	if (!map)
		goto out;
	for (uint32_t fi = 0; fi < m->nfiles; fi++)
		for (uint64_t k = 0; k < m->files[fi].nchunks; k++) {
			struct dcr_chunk_ref *ref = &m->files[fi].chunks[k];
			if (ref->kind != DCR_CK_SAME && !map[ref->pack])
				map[ref->pack] = ++m->npacks;
		}
	if (m->npacks && !(m->packs = calloc(m->npacks, DCR_HASH_LEN)))
		goto out;
	for (size_t i = 0; i < npacks; i++)
		if (map[i])
			memcpy(m->packs[map[i] - 1], hashes[i], DCR_HASH_LEN);
	for (uint32_t fi = 0; fi < m->nfiles; fi++)
		for (uint64_t k = 0; k < m->files[fi].nchunks; k++) {
			struct dcr_chunk_ref *ref = &m->files[fi].chunks[k];
			if (ref->kind != DCR_CK_SAME)
				ref->pack = map[ref->pack] - 1;
		}
	if ((ret = dcr_manifest_validate(m)) || (ret = dcr_manifest_encode(m, &b))) {
		dcr_err("version %" PRIu64 ": the compacted manifest is invalid: %s",
			x->v, dcr_strerror(ret));
		goto out;
	}
	dcr_sha256(b.data, b.len, x->mhash);
	dcr_mobj_key(x->mhash, key, sizeof(key));
	ret = dcr_store_put(c->st, key, b.data, b.len, 0);
	if (ret)
		dcr_err("%s: cannot upload %s: %s", c->st->url, key, dcr_strerror(ret));
	else
		c->s->bytes += b.len;
out:
	free(map);
	dcr_buf_free(&b);
	return ret;
}

/*
 * The new generation: rewritten versions, and the old entries of the
 * others. It goes above every generation listed (l->top: a damaged
 * newer one is passed over, not blocked on). The entries of versions
 * left out (gc removes them after this is published) stay: until their
 * manifests are deleted they remain listed, and must stay readable as
 * encoded now (their committed frames may be collected already); the
 * next compaction drops them with the versions.
 */
static int publish(struct cctx *c)
{
	const struct dcr_layout *l = &c->sv->layout;
	struct dcr_layout nl = { .gen = DCR_MAX(l->gen, l->top) + 1,
				 .ctime_ns = dcr_now_ns() };
	bool changed = false;
	uint64_t bytes;
	int ret;

	if (!(nl.e = calloc(c->n ? c->n : 1, sizeof(*nl.e))))
		return -ENOMEM;
	for (size_t i = 0; i < c->n; i++) {
		struct cver *x = &c->vs[i];
		const struct dcr_layout_entry *e = dcr_layout_find(l, x->v);
		if (x->rewrite && x->kept) {
			struct dcr_layout_entry *ne = &nl.e[nl.n++];
			ne->version = x->v;
			ne->lparent = x->o->parent;
			memcpy(ne->mhash, x->mhash, DCR_HASH_LEN);
			changed = true;
		} else if (e) {
			nl.e[nl.n++] = *e;
		}
	}
	/* entries of versions no longer listed are dropped too, and a
	 * damaged newer generation is superseded */
	for (size_t i = 0; i < l->n; i++)
		changed |= !find(c, l->e[i].version);
	changed |= l->top > l->gen;
	ret = 0;
	if (!changed)
		goto out;
	if (!(ret = dcr_store_put_layout(c->st, &nl, &bytes))) {
		c->s->gen = nl.gen;
		c->s->bytes += bytes;
	}
out:
	free(nl.e);
	return ret;
}

/* Scratch for 2 chunks per thread, and the threads (one per CPU of the
 * budget, the caller included). Chunk buffers are sized for the largest
 * chunk size any version uses. */
static int slots_new(struct cctx *c)
{
	uint32_t cs = DCR_CHUNK_MIN;
	int ret;

	/* kept, not only rewrite: costs_of() may add versions */
	for (size_t i = 0; i < c->n; i++)
		if (c->vs[i].kept)
			cs = DCR_MAX(cs, c->vs[i].o->chunk_size);
	c->threads = dcr_cpu_threads(c->o->threads);
	c->nslots = 2 * (size_t)c->threads;
	if (!(c->slots = calloc(c->nslots, sizeof(*c->slots))))
		return DCR_ERR(-ENOMEM);
	for (size_t i = 0; i < c->nslots; i++) {
		struct slot *sl = &c->slots[i];
		dcr_buf_init(&sl->frame, SIZE_MAX);
		sl->codec = dcr_codec_new(0);
		sl->buf = malloc(cs);
		sl->bbuf = malloc(cs);
		sl->chk = malloc(cs);
		if (!sl->codec || !sl->buf || !sl->bbuf || !sl->chk)
			return DCR_ERR(-ENOMEM);
	}
	/* a frame is never larger than its chunk stored (frame.h) */
	struct dcr_packw_opts po = {
		.st = c->st, .frame_max = (size_t)cs + 4096, .uploads = 0,
		.target = c->o->pack_target, /* 0: the writer's default */
	};
	if ((ret = dcr_packw_new(&po, &c->pw)))
		return ret;
	if (c->threads > 1) {
		struct dcr_wq_opts wo = { .name = "dcr-compact",
					  .threads = c->threads - 1,
					  .max_items = 1 };
		if ((ret = dcr_wq_create(&wo, &c->wq)))
			return ret;
	}
	return 0;
}

static void slots_free(struct cctx *c)
{
	dcr_wq_free(c->wq);
	for (size_t i = 0; c->slots && i < c->nslots; i++) {
		dcr_buf_free(&c->slots[i].frame);
		dcr_codec_free(c->slots[i].codec);
		free(c->slots[i].buf);
		free(c->slots[i].bbuf);
		free(c->slots[i].chk);
	}
	free(c->slots);
}

int dcr_compact(struct dcr_sview *sv, struct dcr_reader *r,
		const struct dcr_compact_opts *o, struct dcr_compact_stats *s)
{
	unsigned k = o->max_depth ? o->max_depth : DCR_COMPACT_DEPTH_DEFAULT;
	struct cctx c = { .sv = sv, .st = sv->st, .r = r, .o = o, .s = s,
			  .read_pct = o->read_cost ? o->read_cost
						   : DCR_COMPACT_READ_COST_DEFAULT };
	int ret;

	memset(s, 0, sizeof(*s));
	if ((ret = load(&c)))
		goto out;
	plan(&c, k);
	if (!o->dry_run && (ret = slots_new(&c)))
		goto out;
	for (size_t i = 0; i < c.n && !ret; i++) {
		struct cver *x = &c.vs[i];
		bool over = false;
		if (!x->kept)
			continue;
		/* on its base already, but maybe too dear to read there */
		if (!x->rewrite && !o->dry_run && !(ret = costs_of(&c, x, &over)))
			x->rewrite = over;
		if (x->rewrite && !o->dry_run && !ret)
			ret = rewrite(&c, x);
		s->rewritten += x->rewrite;
		if (!ret && o->report)
			o->report(o->arg, x->v, x->eb, x->tb, x->dep_after, x->rewrite);
	}
	if (ret || o->dry_run)
		goto out;
	if ((ret = dcr_packw_finish(c.pw)))
		goto out;
	s->bytes += dcr_packw_uploaded(c.pw);
	for (size_t i = 0; i < c.n && !ret; i++)
		if (c.vs[i].kept && c.vs[i].rewrite)
			ret = finish(&c, &c.vs[i]);
	if (!ret)
		ret = publish(&c);
out:
	for (size_t i = 0; i < c.n; i++) {
		cost_free(&c.vs[i]); /* it walks o's files: the view's */
		/* nm shares nothing with o: every path and array is its own */
		if (c.vs[i].nm.files)
			dcr_manifest_free(&c.vs[i].nm);
	}
	free(c.vs);
	dcr_packw_free(c.pw);
	slots_free(&c);
	return ret;
}

int dcr_compact_view(struct dcr_sview *sv, const struct dcr_compact_opts *o,
		     struct dcr_compact_stats *s)
{
	struct dcr_reader *r = NULL;
	char dir[PATH_MAX];
	int ret, lockfd = -1;

	memset(s, 0, sizeof(*s));
	if (o->dry_run)
		return dcr_compact(sv, NULL, o, s); /* plans only: no bytes read */
	/* named (the reader's cache is a catalog and slabs), so owned:
	 * one left by a process killed (kill -9) is collected by the next */
	if ((ret = dcr_mktempdir_owned("dcrfs-compact", dir, sizeof(dir),
				       &lockfd)))
		return ret;
	struct dcr_reader_opts ro = { .cache_dir = dir,
				      .cache_size = DCR_COMPACT_SCRATCH_CACHE,
				      .threads = o->threads };
	/* on the view: no second listing, no manifest fetched again */
	if (!(ret = dcr_reader_open(sv->st, &ro, &r)) &&
	    !(ret = dcr_reader_seed(r, sv, 0)))
		ret = dcr_compact(sv, r, o, s);
	dcr_reader_close(r);
	dcr_tempdir_release(dir, lockfd);
	return ret;
}

int dcr_compact_scratch(struct dcr_store *st, const struct dcr_compact_opts *o,
			struct dcr_compact_stats *s)
{
	struct dcr_sview sv;
	int ret;

	memset(s, 0, sizeof(*s));
	if ((ret = dcr_sview_load(&sv, st, 0)))
		return ret; /* logged */
	ret = dcr_compact_view(&sv, o, s);
	dcr_sview_free(&sv);
	return ret;
}
