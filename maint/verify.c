/* SPDX-License-Identifier: MIT */
/*
 * verify.c - every object the given versions (and the chains they build
 * on) need exists and checks out; damage is traced down the chains and
 * named (verify.h).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chunk.h"
#include "common.h"
#include "cpus.h"
#include "index.h"
#include "frame.h"
#include "hash.h"
#include "json.h"
#include "manifest.h"
#include "packw.h"
#include "reader.h"
#include "sign.h"
#include "verify.h"
#include "wq.h"

/*
 * Every damaged object is a "cause"; every chunk of every version checked
 * carries the cause that makes it unreadable (0: none), its own frame's
 * or one inherited down its chain.
 */
struct cause {
	char *key;
	char why[200];
};

struct vstate {
	int in_set, target;
	uint32_t vcause;  /* the manifest itself is damaged */
	uint32_t pcause;  /* the parent's manifest is missing */
	uint8_t **need;   /* [file][chunk] */
	uint32_t **cause; /* [file][chunk] */
};

struct fref {
	const uint8_t *pack;
	uint64_t off;
	uint32_t len;
	uint32_t vi, f;
	uint64_t k;
};

struct verify {
	struct dcr_index *ix;
	const struct dcr_pg *pg;
	struct vstate *vs; /* parallel to ix->sv.vs */
	struct cause *causes;
	size_t ncauses, cap_causes;
	struct fref *refs;
	size_t nrefs, cap_refs;
	struct fref *f1; /* format 1 delta chunks, proven by materializing */
	size_t nf1, cap_f1;
	uint64_t packs_checked, bytes_checked;
};

static uint32_t add_cause(struct verify *w, const char *key, const char *fmt, ...)
	DCR_PRINTF(3, 4);

/* A new cause (or the existing one of @key); its id, 0 on ENOMEM. */
static uint32_t add_cause(struct verify *w, const char *key, const char *fmt, ...)
{
	va_list ap;

	for (size_t i = 0; i < w->ncauses; i++)
		if (!strcmp(w->causes[i].key, key))
			return (uint32_t)i + 1;
	if (dcr_array_grow(&w->causes, sizeof(*w->causes), w->ncauses, &w->cap_causes))
		return 0;
	struct cause *k = &w->causes[w->ncauses];
	if (!(k->key = strdup(key)))
		return 0;
	va_start(ap, fmt);
	vsnprintf(k->why, sizeof(k->why), fmt, ap);
	va_end(ap);
	return (uint32_t)++w->ncauses;
}

static int vstate_alloc(struct vstate *s, const struct dcr_manifest *m)
{
	if (!(s->need = calloc(m->nfiles ? m->nfiles : 1, sizeof(*s->need))) ||
	    !(s->cause = calloc(m->nfiles ? m->nfiles : 1, sizeof(*s->cause))))
		return -ENOMEM;
	for (uint32_t f = 0; f < m->nfiles; f++) {
		uint64_t n = m->files[f].nchunks;
		if (!n)
			continue;
		if (!(s->need[f] = calloc(n, 1)) ||
		    !(s->cause[f] = calloc(n, sizeof(**s->cause))))
			return -ENOMEM;
	}
	return 0;
}

static void vstate_free(struct vstate *s, const struct dcr_manifest *m)
{
	for (uint32_t f = 0; s->need && f < m->nfiles; f++) {
		free(s->need[f]);
		free(s->cause[f]);
	}
	free(s->need);
	free(s->cause);
}

static int cmp_fref(const void *a, const void *b)
{
	const struct fref *x = a, *y = b;
	int r = memcmp(x->pack, y->pack, DCR_HASH_LEN);

	return r ? r : x->off < y->off ? -1 : x->off > y->off;
}

/* Load the targets and every version their chains reach; mark what they need. */
static int verify_load(struct verify *w)
{
	struct dcr_index *ix = w->ix;
	char key[64];

	for (size_t i = ix->sv.nvs; i-- > 0;) {
		struct vstate *s = &w->vs[i];
		struct dcr_sview_ver *x = &ix->sv.vs[i];
		if (!s->in_set)
			continue;
		const struct dcr_manifest *m = dcr_index_manifest(ix, x);
		dcr_version_key(x->v, key, sizeof(key));
		if (!m) {
			s->vcause = add_cause(w, key, "manifest %s", x->state == -ENOENT ?
					      "missing" : "unreadable or corrupt");
			continue;
		}
		if (!s->need && vstate_alloc(s, m))
			return -ENOMEM;
		if (s->target)
			for (uint32_t f = 0; f < m->nfiles; f++)
				if (m->files[f].nchunks) /* need[f] may be NULL */
					memset(s->need[f], 1, m->files[f].nchunks);
		if (!m->parent)
			continue;
		struct dcr_sview_ver *p = dcr_index_find(ix, m->parent);
		if (!p) {
			/* gone: only the chunks built on it suffer (an anchor is fine) */
			dcr_version_key(m->parent, key, sizeof(key));
			if (dcr_manifest_needs_parent(m))
				s->pcause = add_cause(w, key, "manifest missing (the parent of "
						      "version %" PRIu64 ")", x->v);
			continue;
		}
		struct vstate *ps = &w->vs[p - ix->sv.vs];
		ps->in_set = 1;
		const struct dcr_manifest *pm = dcr_index_manifest(ix, p);
		if (pm && dcr_manifest_check_parent(m, pm)) {
			s->vcause = add_cause(w, key, "manifest inconsistent with its parent, version %"
					      PRIu64, m->parent);
		}
		/* the parent's chunks our SAME and DELTA chunks build on */
		if (!pm)
			continue;
		if (!ps->need && vstate_alloc(ps, pm))
			return -ENOMEM;
		for (uint32_t f = 0; f < m->nfiles; f++) {
			const struct dcr_file *fl = &m->files[f];
			if (fl->base == DCR_NO_BASE || fl->base >= pm->nfiles)
				continue;
			for (uint64_t k = 0; k < fl->nchunks && k < pm->files[fl->base].nchunks; k++)
				if (s->need[f][k] && fl->chunks[k].kind != DCR_CK_FULL)
					ps->need[fl->base][k] = 1;
		}
	}
	return 0;
}

/* Collect the frames needed, sorted by pack and offset. */
static int verify_refs(struct verify *w)
{
	struct dcr_index *ix = w->ix;

	for (size_t i = 0; i < ix->sv.nvs; i++) {
		const struct dcr_manifest *m = &ix->sv.vs[i].m;
		if (!w->vs[i].need)
			continue;
		for (uint32_t f = 0; f < m->nfiles; f++)
			for (uint64_t k = 0; k < m->files[f].nchunks; k++) {
				const struct dcr_chunk_ref *r = &m->files[f].chunks[k];
				if (!w->vs[i].need[f][k] || r->kind == DCR_CK_SAME)
					continue;
				if (dcr_array_grow(&w->refs, sizeof(*w->refs), w->nrefs, &w->cap_refs))
					return -ENOMEM;
				w->refs[w->nrefs++] = (struct fref){ m->packs[r->pack], r->off,
					r->len, (uint32_t)i, f, k };
			}
	}
	if (w->nrefs) /* qsort's pointer must not be NULL (UBSan) */
		qsort(w->refs, w->nrefs, sizeof(*w->refs), cmp_fref);
	return 0;
}

/* The SHA-256 of the frame at [@off, @off+@len) of a pack, if the pack's
 * naming found one there (@fs[0..n), by offset); NULL if not. */
static const uint8_t *known_hash(const struct dcr_pack_frame *fs, size_t n,
				 uint64_t off, uint64_t len)
{
	size_t i = dcr_lower_bound_u64(fs, n, sizeof(*fs),
				       offsetof(struct dcr_pack_frame, off), off);

	return i < n && fs[i].off == off && fs[i].len == len ? fs[i].hash : NULL;
}

/* Check one frame of a pack already fetched, whose frames' hashes
 * dcr_pack_frames gave in @fs[0..nfs) (none for the older forms); 0 or
 * a reason. A format 1 delta frame sets *@f1: to be proven by
 * materializing (verify_format1). Thread-safe (reads @w only); @codec
 * and @chunk (DCR_CHUNK_MAX bytes, allocated here when first needed)
 * are the caller's own. */
static const char *check_frame(struct verify *w, struct dcr_codec **codec,
			       const struct dcr_buf *pk, const struct fref *r,
			       uint8_t **chunk, const struct dcr_pack_frame *fs,
			       size_t nfs, bool *f1)
{
	const struct dcr_manifest *m = &w->ix->sv.vs[r->vi].m;
	const struct dcr_file *f = &m->files[r->f];
	const struct dcr_chunk_ref *cr = &f->chunks[r->k];
	uint32_t len = dcr_chunk_len(f->size, m->chunk_size, r->k);
	struct dcr_frame_hdr h;
	uint8_t hash[DCR_HASH_LEN];

	if (r->off > pk->len || r->len > pk->len - r->off)
		return "frame runs past the end of the pack";
	const uint8_t *p = pk->data + r->off;
	if (dcr_frame_parse_hdr(p, r->len, &h) || h.raw_len != len)
		return "frame header is malformed";
	if (m->format >= 2) {
		/* Hashed from these bytes already, to check the pack's name. */
		const uint8_t *known = known_hash(fs, nfs, r->off, r->len);
		if (!known) {
			dcr_sha256(p, r->len, hash);
			known = hash;
		}
		return dcr_hash_eq(known, cr->fhash) ? NULL : "frame does not match its SHA-256";
	}
	/* format 1: no frame hash; a full frame must give the chunk's SHA-256 */
	if (!*codec)
		*codec = dcr_codec_new(0);
	if (!*chunk)
		*chunk = malloc(DCR_CHUNK_MAX);
	if (!*codec || !*chunk)
		return "cannot be checked: out of memory";
	memset(*chunk, 0, len);
	if (dcr_frame_apply(*codec, p, r->len, *chunk, len))
		return "frame does not decode";
	if (h.kind == DCR_FRAME_FULL) {
		dcr_sha256(*chunk, len, hash);
		return dcr_hash_eq(hash, cr->hash) ? NULL : "frame does not decode to its chunk's SHA-256";
	}
	*f1 = true;
	return NULL;
}

static void set_cause(struct verify *w, const struct fref *r, uint32_t k)
{
	uint32_t *cp = &w->vs[r->vi].cause[r->f][r->k];

	if (!*cp)
		*cp = k;
}

/* The listed size of pack @h (0: not listed), for progress. */
static uint64_t pack_size(const struct dcr_index *ix, const uint8_t h[DCR_HASH_LEN])
{
	const struct dcr_ix_pack *p = dcr_index_pack(ix, h);

	return p ? p->size : 0;
}

/* One pack of verify_packs: refs [i, j) of w->refs, and what was found. */
struct vpack {
	size_t i, j;
	int ret;              /* the GET's (-errno); 0: fetched */
	bool misnamed;        /* content does not match its name */
	uint64_t len;         /* bytes fetched */
	const char **why;     /* per ref: NULL or a reason (static) */
	bool *f1;             /* per ref: a format 1 delta frame */
};

struct vpacks {
	struct verify *w;
	struct vpack *p;
	pthread_mutex_t lock; /* progress reports */
	atomic_uint_fast64_t done;
	uint64_t total;
};

/* par_for body: fetch pack @k whole, check its name and its frames. */
static void vpack_run(void *arg, size_t k)
{
	struct vpacks *vp = arg;
	struct verify *w = vp->w;
	struct vpack *p = &vp->p[k];
	struct dcr_codec *codec = NULL;
	uint8_t *chunk = NULL, h[DCR_HASH_LEN];
	struct dcr_pack_frame *fs = NULL;
	size_t nfs = 0;
	struct dcr_buf pk;
	char key[80];

	dcr_pack_key(w->refs[p->i].pack, key, sizeof(key));
	dcr_buf_init(&pk, DCR_VERIFY_PACK_MAX);
	p->why = calloc(p->j - p->i, sizeof(*p->why));
	p->f1 = calloc(p->j - p->i, sizeof(*p->f1));
	p->ret = !p->why || !p->f1 ? -ENOMEM :
		 dcr_store_get(w->ix->st, key, 0, DCR_GET_ALL, &pk);
	if (!p->ret) {
		p->len = pk.len;
		p->ret = dcr_pack_frames(pk.data, pk.len, h, &fs, &nfs);
		if (p->ret != -ENOMEM) {
			p->misnamed = p->ret || !dcr_hash_eq(h, w->refs[p->i].pack);
			p->ret = 0;
			for (size_t x = p->i; x < p->j; x++)
				p->why[x - p->i] = check_frame(w, &codec, &pk,
							       &w->refs[x], &chunk,
							       fs, nfs,
							       &p->f1[x - p->i]);
		}
	}
	free(fs);
	dcr_buf_free(&pk);
	free(chunk);
	dcr_codec_free(codec);
	uint64_t done = atomic_fetch_add(&vp->done, pack_size(w->ix, w->refs[p->i].pack)) +
			pack_size(w->ix, w->refs[p->i].pack);
	if (w->pg && w->pg->fn) {
		pthread_mutex_lock(&vp->lock);
		dcr_pg_report(w->pg, DCR_PG_STEP, "check packs", done, vp->total, NULL);
		pthread_mutex_unlock(&vp->lock);
	}
}

/*
 * Every pack holding a needed frame, fetched whole and checked against
 * its name, and every needed frame in it: the packs on every thread of
 * the CPU budget (a core/wq pool; at most that many packs in memory at
 * once), then what they found recorded in pack order.
 */
static int verify_packs(struct verify *w)
{
	struct dcr_index *ix = w->ix;
	const int nt = dcr_cpu_threads(ix->threads);
	struct vpacks vp = { .w = w };
	struct dcr_wq *q = NULL;
	size_t np = 0;
	char key[80];
	int ret = 0;

	pthread_mutex_init(&vp.lock, NULL);
	vp.p = calloc(w->nrefs ? w->nrefs : 1, sizeof(*vp.p));
	if (!vp.p) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0, j; i < w->nrefs; i = j) {
		for (j = i + 1; j < w->nrefs && !memcmp(w->refs[j].pack, w->refs[i].pack, DCR_HASH_LEN); j++)
			;
		vp.p[np++] = (struct vpack){ .i = i, .j = j };
		vp.total += pack_size(ix, w->refs[i].pack);
	}
	if (nt > 1) {
		const struct dcr_wq_opts o = { .name = "dcr-verify",
					       .threads = nt - 1, .max_items = 1 };

		if ((ret = dcr_wq_create(&o, &q)))
			goto out;
	}
	dcr_pg_report(w->pg, DCR_PG_START, "check packs", 0, vp.total, NULL);
	dcr_wq_par_for(q, nt, np, vpack_run, &vp);
	for (size_t k = 0; k < np && !ret; k++) {
		const struct vpack *p = &vp.p[k];

		dcr_pack_key(w->refs[p->i].pack, key, sizeof(key));
		if (p->ret == -ENOMEM) {
			ret = -ENOMEM;
			break;
		}
		if (p->ret) {
			uint32_t c = add_cause(w, key, "%s", p->ret == -ENOENT ? "missing" :
					       p->ret == -EFBIG ? "too large to check" :
					       dcr_strerror(p->ret));
			for (size_t x = p->i; x < p->j; x++)
				set_cause(w, &w->refs[x], c);
			continue;
		}
		w->packs_checked++;
		w->bytes_checked += p->len;
		if (p->misnamed)
			add_cause(w, key, "content does not match its name");
		for (size_t x = p->i; x < p->j; x++) {
			const char *why = p->why[x - p->i];

			if (why)
				set_cause(w, &w->refs[x], add_cause(w, key, "%s (at offset %" PRIu64 ")",
								 why, w->refs[x].off));
			if (p->f1[x - p->i] &&
			    !dcr_array_grow(&w->f1, sizeof(*w->f1), w->nf1, &w->cap_f1))
				w->f1[w->nf1++] = w->refs[x];
		}
	}
	if (!ret)
		dcr_pg_report(w->pg, DCR_PG_LAST, "check packs", vp.total, vp.total, NULL);
	dcr_pg_report(w->pg, DCR_PG_END, "check packs", atomic_load(&vp.done),
		      vp.total, NULL);
out:
	dcr_wq_free(q);
	for (size_t k = 0; vp.p && k < np; k++) {
		free(vp.p[k].why);
		free(vp.p[k].f1);
	}
	free(vp.p);
	pthread_mutex_destroy(&vp.lock);
	return ret;
}

/* Pass every chunk's cause down the chains, oldest version first. */
static void verify_propagate(struct verify *w)
{
	struct dcr_index *ix = w->ix;

	for (size_t i = 0; i < ix->sv.nvs; i++) {
		struct vstate *s = &w->vs[i];
		const struct dcr_manifest *m = &ix->sv.vs[i].m;
		if (!s->need)
			continue;
		struct dcr_sview_ver *p = m->parent ? dcr_index_find(ix, m->parent) : NULL;
		struct vstate *ps = p ? &w->vs[p - ix->sv.vs] : NULL;
		for (uint32_t f = 0; f < m->nfiles; f++) {
			const struct dcr_file *fl = &m->files[f];
			for (uint64_t k = 0; k < fl->nchunks; k++) {
				uint32_t *cp = &s->cause[f][k];
				if (*cp || !s->need[f][k])
					continue;
				if (s->vcause)
					*cp = s->vcause;
				else if (fl->chunks[k].kind != DCR_CK_FULL && ps && ps->cause &&
					 fl->base < p->m.nfiles && k < p->m.files[fl->base].nchunks)
					*cp = ps->cause[fl->base][k];
				else if (fl->chunks[k].kind != DCR_CK_FULL && ps && ps->vcause)
					*cp = ps->vcause;
				else if (fl->chunks[k].kind != DCR_CK_FULL && !ps)
					*cp = s->pcause;
			}
		}
	}
}

/* Format 1 delta chunks: the read path proves them against their SHA-256. */
static int verify_format1(struct verify *w)
{
	struct dcr_index *ix = w->ix;
	uint8_t *buf = w->nf1 ? malloc(DCR_CHUNK_MAX) : NULL;
	char key[80];

	if (w->nf1 && !buf)
		return -ENOMEM;
	for (size_t i = 0; i < w->nf1; i++) {
		const struct fref *r = &w->f1[i];
		const struct dcr_manifest *m = &ix->sv.vs[r->vi].m;
		const struct dcr_file *f = &m->files[r->f];
		if (w->vs[r->vi].cause[r->f][r->k])
			continue;
		uint32_t len = dcr_chunk_len(f->size, m->chunk_size, r->k);
		if (dcr_index_read(ix, ix->sv.vs[r->vi].v, r->f, f->path, r->k * m->chunk_size, buf, len)) {
			dcr_pack_key(r->pack, key, sizeof(key));
			set_cause(w, r, add_cause(w, key, "delta frame at offset %" PRIu64
						  " does not give its chunk's SHA-256", r->off));
		}
	}
	free(buf);
	return 0;
}

/* A file of --deep: where its chunk hashes go, whether it failed. */
struct dfile {
	size_t vi;          /* ix->sv.vs */
	uint32_t f;
	uint8_t (*ch)[DCR_HASH_LEN]; /* format 3: each chunk's SHA-256 */
	uint8_t digest[DCR_HASH_LEN]; /* before format 3: of the bytes */
	bool bad;           /* did not materialize */
};

/* A unit of --deep: chunks [k, k+n) of file @df (format 3), or the
 * whole file (n 0: before format 3, one SHA-256 of its bytes). */
struct dunit {
	size_t df;
	uint64_t k, n;
};

struct deep {
	struct verify *w;
	struct dfile *df;
	struct dunit *u;
	pthread_mutex_t lock;  /* progress reports */
	atomic_uint_fast64_t done;
	uint64_t total;
};

/* Bytes read per step, and at least this many per unit of format 3. */
#define DEEP_BUF (4u << 20)

/* dcr_index_par_for body: unit @i. */
static void deep_unit(void *arg, size_t i)
{
	struct deep *d = arg;
	struct dunit *u = &d->u[i];
	struct dfile *df = &d->df[u->df];
	struct dcr_index *ix = d->w->ix;
	const struct dcr_manifest *m = &ix->sv.vs[df->vi].m;
	const struct dcr_file *fl = &m->files[df->f];
	const uint64_t cs = m->chunk_size;
	uint64_t off = u->n ? u->k * cs : 0;
	const uint64_t end = u->n ? DCR_MIN(fl->size, (u->k + u->n) * cs) :
			     fl->size;
	struct dcr_file_hasher *h = u->n ? NULL :
				    dcr_file_hasher_new(m->format, m->chunk_size);
	const size_t bufsz = u->n ? (size_t)DCR_MAX((uint64_t)DEEP_BUF, cs) :
			     DEEP_BUF;
	uint8_t *buf = malloc(bufsz);
	bool bad = !buf || (!u->n && !h);

	while (!bad && off < end) {
		/* whole chunks for format 3 (bufsz is a multiple of cs
		 * there: cs divides DEEP_BUF or is larger) */
		size_t n = (size_t)DCR_MIN((uint64_t)bufsz, end - off);

		bad = dcr_index_read(ix, ix->sv.vs[df->vi].v, df->f, fl->path, off,
				     buf, n) != 0;
		if (bad)
			break;
		if (h) {
			dcr_file_hasher_update(h, buf, n);
		} else {
			for (size_t p = 0; p < n; p += (size_t)cs)
				dcr_sha256(buf + p,
					   (size_t)DCR_MIN(cs, (uint64_t)(n - p)),
					   df->ch[(off + p) / cs]);
		}
		off += n;
		uint64_t done = atomic_fetch_add(&d->done, n) + n;

		if (d->w->pg) {
			pthread_mutex_lock(&d->lock);
			dcr_pg_report(d->w->pg, DCR_PG_STEP, "materialize", done,
				      d->total, NULL);
			pthread_mutex_unlock(&d->lock);
		}
	}
	if (h && !bad)
		dcr_file_hasher_final(h, df->digest);
	if (bad)
		df->bad = true; /* only ever set: a benign race */
	dcr_file_hasher_free(h);
	free(buf);
}

/*
 * --deep: read every file of every target through the read path and
 * check it against its digest. The files are cut into units of whole
 * chunks (format 3: the digest is the SHA-256 of the chunks' SHA-256s,
 * so every unit hashes its own chunks) or taken whole (before 3: one
 * SHA-256 of the bytes), and the units run on every thread of the CPU
 * budget (dcr_index_par_for); the causes are added afterwards, in file
 * order.
 */
static int verify_deep(struct verify *w)
{
	struct dcr_index *ix = w->ix;
	struct deep d = { .w = w };
	size_t ndf = 0, nu = 0;
	char key[64];
	int ret = 0;

	pthread_mutex_init(&d.lock, NULL);
	for (size_t pass = 0; pass < 2; pass++) {
		ndf = nu = 0;
		for (size_t i = 0; i < ix->sv.nvs; i++) {
			const struct dcr_manifest *m = &ix->sv.vs[i].m;
			struct vstate *s = &w->vs[i];
			/* chunks per unit: about DEEP_BUF bytes, at least one */
			const uint64_t per = DCR_MAX((uint64_t)1,
						     DEEP_BUF / DCR_MAX(m->chunk_size, 1u));

			if (!s->target || !s->need)
				continue;
			for (uint32_t f = 0; f < m->nfiles; f++) {
				const struct dcr_file *fl = &m->files[f];
				bool bad = false;

				if (fl->type != DCR_FT_REG)
					continue;
				for (uint64_t k = 0; k < fl->nchunks && !bad; k++)
					bad = s->cause[f][k] != 0;
				if (bad)
					continue; /* already reported */
				if (pass) {
					d.df[ndf] = (struct dfile){ .vi = i, .f = f };
					d.total += fl->size;
				}
				if (m->format >= 3 && fl->nchunks) {
					for (uint64_t k = 0; k < fl->nchunks; k += per) {
						if (pass)
							d.u[nu] = (struct dunit){
								ndf, k,
								DCR_MIN(per, fl->nchunks - k) };
						nu++;
					}
					if (pass && !(d.df[ndf].ch = calloc(fl->nchunks,
									    DCR_HASH_LEN))) {
						ret = -ENOMEM;
						goto err_free;
					}
				} else {
					if (pass)
						d.u[nu] = (struct dunit){ ndf, 0, 0 };
					nu++;
				}
				ndf++;
			}
		}
		if (!pass) {
			d.df = calloc(ndf ? ndf : 1, sizeof(*d.df));
			d.u = calloc(nu ? nu : 1, sizeof(*d.u));
			if (!d.df || !d.u) {
				ret = -ENOMEM;
				goto err_free;
			}
		}
	}
	dcr_pg_report(w->pg, DCR_PG_START, "materialize", 0, d.total, NULL);
	if (nu)
		ret = dcr_index_par_for(ix, nu, deep_unit, &d);
	if (ret)
		goto err_free;
	for (size_t j = 0; j < ndf; j++) {
		struct dfile *df = &d.df[j];
		const struct dcr_manifest *m = &ix->sv.vs[df->vi].m;
		const struct dcr_file *fl = &m->files[df->f];
		struct vstate *s = &w->vs[df->vi];
		uint8_t h[DCR_HASH_LEN];

		if (!df->bad && df->ch) {
			/* dcr_file_digest of the chunk hashes read */
			struct dcr_sha256_ctx *c = dcr_sha256_new();

			if (!c) {
				ret = -ENOMEM;
				goto err_free;
			}
			for (uint64_t k = 0; k < fl->nchunks; k++)
				dcr_sha256_update(c, df->ch[k], DCR_HASH_LEN);
			dcr_sha256_final(c, h);
			dcr_sha256_free(c);
		} else {
			memcpy(h, df->digest, sizeof(h));
		}
		if (df->bad || !dcr_hash_eq(h, fl->sha256)) {
			char why[64 + DCR_PATH_MAX];

			dcr_version_key(ix->sv.vs[df->vi].v, key, sizeof(key));
			snprintf(why, sizeof(why), "%s/%s", key, fl->path);
			uint32_t k = add_cause(w, why, "%s", df->bad ? "does not materialize" :
					       "materialized file does not match its digest");
			for (uint64_t x = 0; x < fl->nchunks; x++)
				s->cause[df->f][x] = k;
		}
	}
	dcr_pg_report(w->pg, DCR_PG_LAST, "materialize", d.total, d.total, NULL);
err_free:
	dcr_pg_report(w->pg, DCR_PG_END, "materialize", 0, 0, NULL);
	for (size_t j = 0; d.df && j < ndf; j++)
		free(d.df[j].ch);
	free(d.df);
	free(d.u);
	pthread_mutex_destroy(&d.lock);
	return ret;
}


/* The hits of cause @k (1-based) on the targets, into @d. */
static int verify_hits(struct verify *w, uint32_t k, struct dcr_verify_damage *d)
{
	struct dcr_index *ix = w->ix;
	size_t cap = 0;

	for (size_t i = 0; i < ix->sv.nvs; i++) {
		const struct vstate *s = &w->vs[i];
		const struct dcr_manifest *m = &ix->sv.vs[i].m;
		if (!s->target)
			continue;
		if (s->vcause == k && !s->need) {
			if (dcr_array_grow(&d->hits, sizeof(*d->hits), d->nhits, &cap))
				return -ENOMEM;
			d->hits[d->nhits++] = (struct dcr_verify_hit){ .version = ix->sv.vs[i].v };
			continue;
		}
		for (uint32_t f = 0; s->cause && f < m->nfiles; f++) {
			uint64_t n = 0;
			for (uint64_t x = 0; x < m->files[f].nchunks; x++)
				n += s->cause[f][x] == k;
			if (!n)
				continue;
			if (dcr_array_grow(&d->hits, sizeof(*d->hits), d->nhits, &cap))
				return -ENOMEM;
			d->hits[d->nhits++] = (struct dcr_verify_hit){
				.version = ix->sv.vs[i].v, .path = m->files[f].path,
				.chunks = n, .nchunks = m->files[f].nchunks };
		}
	}
	return 0;
}

/*
 * Check the signature of every target (dcr_verify_trust) into r->sigs;
 * the failures are damage, added by verify_result after the rest.
 */
static int verify_sigs(struct verify *w, const struct dcr_trust *trust,
		       struct dcr_verify_result *r)
{
	struct dcr_index *ix = w->ix;
	static const uint8_t zero[DCR_HASH_LEN];

	if (!(r->sigs = calloc(ix->sv.nvs ? ix->sv.nvs : 1, sizeof(*r->sigs))))
		return DCR_ERR(-ENOMEM);
	for (size_t i = 0; i < ix->sv.nvs; i++) {
		struct dcr_sview_ver *x = &ix->sv.vs[i];
		if (!w->vs[i].target)
			continue;
		const struct dcr_manifest *own = dcr_index_own(ix, x);
		if (!own)
			continue; /* damage already: its manifest */
		struct dcr_verify_sig *g = &r->sigs[r->nsigs++];
		g->version = x->v;
		snprintf(g->signer, sizeof(g->signer), "unsigned");
		if (own->has_sig)
			dcr_key_id(own->sig.pub, g->signer);
		enum dcr_sig_status st = own->has_sig ?
			dcr_manifest_sig_check(own, ix->info.id, trust) : DCR_SIG_NONE;
		if (st == DCR_SIG_VALID || st == DCR_SIG_UNTRUSTED) {
			/* The parent's exact manifest, when it is still here. */
			struct dcr_sview_ver *p = own->parent ?
				dcr_index_find(ix, own->parent) : NULL;
			const struct dcr_manifest *pown = p ? dcr_index_own(ix, p) : NULL;
			const uint8_t *want = !own->parent ? zero : pown ? pown->check : NULL;
			if (want && !dcr_hash_eq(want, own->sig.parent_check)) {
				g->status = "wrong-parent";
				continue;
			}
		}
		g->status = st == DCR_SIG_VALID ? "valid" : st == DCR_SIG_NONE ? "unsigned" :
			    st == DCR_SIG_OTHER_STORE ? "other-store" :
			    st == DCR_SIG_UNTRUSTED ? "untrusted" : "bad";
		g->ok = st == DCR_SIG_VALID || (st == DCR_SIG_NONE && !trust);
	}
	return 0;
}

/* Why signature @g is damage, for its entry. */
static void sig_reason(const struct dcr_verify_sig *g, char *buf, size_t cap)
{
	if (!strcmp(g->status, "unsigned"))
		snprintf(buf, cap, "unsigned, and a trust file was given");
	else if (!strcmp(g->status, "untrusted"))
		snprintf(buf, cap, "signed by key %s, which the trust file does not hold",
			 g->signer);
	else if (!strcmp(g->status, "other-store"))
		snprintf(buf, cap, "signed by key %s for another store (copied from it?)",
			 g->signer);
	else if (!strcmp(g->status, "wrong-parent"))
		snprintf(buf, cap, "signed by key %s over another manifest of its parent "
			 "than the store holds", g->signer);
	else
		snprintf(buf, cap, "its signature (key %s) does not verify: forged, "
			 "damaged, or moved to another number", g->signer);
}

/* What @w found into @r. */
static int verify_result(struct verify *w, struct dcr_verify_result *r)
{
	struct dcr_index *ix = w->ix;
	size_t nt = 0, nbad = 0;
	int ret;

	r->packs_checked = w->packs_checked;
	r->bytes_checked = w->bytes_checked;
	for (size_t i = 0; i < ix->sv.nvs; i++)
		nt += w->vs[i].target;
	for (size_t i = 0; i < r->nsigs; i++)
		nbad += !r->sigs[i].ok;
	if (!(r->versions = calloc(nt ? nt : 1, sizeof(*r->versions))) ||
	    !(r->damage = calloc(w->ncauses + nbad ? w->ncauses + nbad : 1,
				 sizeof(*r->damage))))
		return DCR_ERR(-ENOMEM);
	for (size_t i = 0; i < ix->sv.nvs; i++)
		if (w->vs[i].target)
			r->versions[r->nversions++] = ix->sv.vs[i].v;
	for (size_t k = 1; k <= w->ncauses; k++) {
		struct dcr_verify_damage *d = &r->damage[r->ndamage++];
		struct cause *ca = &w->causes[k - 1];
		d->object = ca->key;
		ca->key = NULL;
		if (!(d->reason = strdup(ca->why)) || (ret = verify_hits(w, (uint32_t)k, d)))
			return DCR_ERR(-ENOMEM);
	}
	for (size_t i = 0; i < r->nsigs; i++) {
		const struct dcr_verify_sig *g = &r->sigs[i];
		char key[64], why[200];
		if (g->ok)
			continue;
		struct dcr_verify_damage *d = &r->damage[r->ndamage++];
		dcr_version_key(g->version, key, sizeof(key));
		sig_reason(g, why, sizeof(why));
		if (!(d->object = strdup(key)) || !(d->reason = strdup(why)) ||
		    !(d->hits = calloc(1, sizeof(*d->hits))))
			return DCR_ERR(-ENOMEM);
		d->hits[0] = (struct dcr_verify_hit){ .version = g->version };
		d->nhits = 1;
		d->untrusted = !strcmp(g->status, "unsigned") ||
			       !strcmp(g->status, "untrusted");
	}
	return 0;
}

int dcr_verify(struct dcr_index *ix, const uint64_t *vs, size_t n, int deep,
	       const struct dcr_pg *pg, struct dcr_verify_result *r)
{
	return dcr_verify_trust(ix, vs, n, deep, NULL, pg, r);
}

int dcr_verify_trust(struct dcr_index *ix, const uint64_t *vs, size_t n,
		     int deep, const struct dcr_trust *trust,
		     const struct dcr_pg *pg, struct dcr_verify_result *r)
{
	struct verify w = { .ix = ix, .pg = pg };
	int ret;

	*r = (struct dcr_verify_result){ 0 };
	if (!(w.vs = calloc(ix->sv.nvs ? ix->sv.nvs : 1, sizeof(*w.vs))))
		return DCR_ERR(-ENOMEM);
	for (size_t i = 0; i < n; i++) {
		struct dcr_sview_ver *x = dcr_index_find(ix, vs[i]);
		if (!x) {
			dcr_err("%s: version %" PRIu64 " does not exist", ix->st->url, vs[i]);
			ret = DCR_ERR(-ENOENT);
			goto err_free;
		}
		w.vs[x - ix->sv.vs].target = w.vs[x - ix->sv.vs].in_set = 1;
	}
	for (size_t i = 0; i < ix->sv.nvs && !n; i++)
		w.vs[i].target = w.vs[i].in_set = 1;
	/* a damaged generation above the one read: mounts pass over it */
	if (ix->sv.layout_bad > ix->sv.layout.gen) {
		char key[64];
		dcr_layout_key(ix->sv.layout_bad, key, sizeof(key));
		if (!add_cause(&w, key, "layout generation damaged (it does not decode or "
			       "its checksum fails): readers pass over it and read generation "
			       "%" PRIu64 "; dcrfs-ctl compact publishes a newer one",
			       ix->sv.layout.gen)) {
			ret = DCR_ERR(-ENOMEM);
			goto err_fail;
		}
	}
	if ((ret = verify_load(&w)) || (ret = verify_refs(&w)) ||
	    (ret = verify_packs(&w)))
		goto err_fail;
	verify_propagate(&w);
	if ((ret = verify_format1(&w)))
		goto err_fail;
	verify_propagate(&w);
	if (deep && (ret = verify_deep(&w)))
		goto err_fail;
	if ((ret = verify_sigs(&w, trust, r)) || (ret = verify_result(&w, r)))
		goto err_fail;
	goto err_free;
err_fail:
	dcr_err("verify: %s", dcr_strerror(ret));
	dcr_verify_result_free(r);
err_free:
	for (size_t i = 0; i < ix->sv.nvs; i++)
		vstate_free(&w.vs[i], &ix->sv.vs[i].m);
	free(w.vs);
	for (size_t i = 0; i < w.ncauses; i++)
		free(w.causes[i].key);
	free(w.causes);
	free(w.refs);
	free(w.f1);
	return ret;
}

void dcr_verify_result_free(struct dcr_verify_result *r)
{
	for (size_t i = 0; i < r->ndamage; i++) {
		free(r->damage[i].object);
		free(r->damage[i].reason);
		free(r->damage[i].hits);
	}
	free(r->damage);
	free(r->versions);
	free(r->sigs);
	*r = (struct dcr_verify_result){ 0 };
}
