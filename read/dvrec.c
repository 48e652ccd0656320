/* SPDX-License-Identifier: MIT */
/*
 * dvrec.c - the changes a reader saw while it built chunks (see
 * dvrec.h). Lock: d->lock, a leaf, over the version slots, their
 * tables and every record's reference count.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "dview.h"
#include "dvrec.h"

struct rec {
	struct dcr_dvrec_chunk c; /* first: handed out as it */
	unsigned refs;            /* the store's (while kept) + holders */
	size_t bytes;             /* counted against the budget */
	size_t cap;               /* allocated */
	struct rec *next_spare;   /* on the spare list */
	uint8_t data[];           /* entries, then values */
};

/* The records of one file of a version: by chunk. */
struct dvfile {
	struct rec **chunk;
	uint64_t n;
};

/* One version's records (used: v != 0). */
struct dvver {
	uint64_t v;
	uint32_t tree;
	struct dvfile *files; /* by manifest file */
	uint32_t nfiles;
};

struct dcr_dvrec {
	atomic_bool active;          /* dcr_dvrec_set_active */
	pthread_mutex_t lock;
	uint64_t budget, bytes, chunks, kept, refused;
	/* Records no longer used, whose memory the next ones reuse (pages
	 * faulted in already, not fresh ones per chunk): at most a
	 * quarter of the budget. */
	struct rec *spare;
	uint64_t spare_bytes;
	struct dvver ver[DCR_DVREC_VERSIONS];
};

struct dcr_dvrec *dcr_dvrec_new(uint64_t budget)
{
	struct dcr_dvrec *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	if (pthread_mutex_init(&d->lock, NULL)) {
		free(d);
		return NULL;
	}
	d->budget = budget;
	atomic_init(&d->active, true);
	return d;
}

bool dcr_dvrec_active(const struct dcr_dvrec *d)
{
	return d && atomic_load_explicit(&d->active, memory_order_relaxed);
}

bool dcr_dvrec_set_active(struct dcr_dvrec *d, bool on)
{
	return atomic_exchange(&d->active, on);
}

/* Keep unused @r for reuse, or free it (under lock). */
static void spare_put_locked(struct dcr_dvrec *d, struct rec *r)
{
	if (d->spare_bytes + r->cap > d->budget / 4) {
		free(r);
		return;
	}
	r->next_spare = d->spare;
	d->spare = r;
	d->spare_bytes += r->cap;
}

/* A spare record of room for @bytes, not much more, or NULL (under
 * lock). The first few are looked at: records of one version are of
 * about one size. */
static struct rec *spare_get_locked(struct dcr_dvrec *d, size_t bytes)
{
	struct rec **pp = &d->spare;

	for (int n = 0; *pp && n < 8; n++, pp = &(*pp)->next_spare) {
		struct rec *r = *pp;

		if (r->cap >= bytes && r->cap / 2 <= bytes) {
			*pp = r->next_spare;
			d->spare_bytes -= r->cap;
			return r;
		}
	}
	return NULL;
}

/* One reference less to @r (under lock); the last makes it spare. */
static void rec_unref_locked(struct dcr_dvrec *d, struct rec *r)
{
	if (--r->refs == 0)
		spare_put_locked(d, r);
}

/* Drop every record of slot @s (under lock). */
static void slot_drop_locked(struct dcr_dvrec *d, struct dvver *s)
{
	for (uint32_t f = 0; f < s->nfiles; f++) {
		for (uint64_t k = 0; k < s->files[f].n; k++) {
			struct rec *r = s->files[f].chunk[k];

			if (!r)
				continue;
			d->bytes -= r->bytes;
			d->chunks--;
			rec_unref_locked(d, r);
		}
		free(s->files[f].chunk);
	}
	free(s->files);
	memset(s, 0, sizeof(*s));
}

void dcr_dvrec_free(struct dcr_dvrec *d)
{
	if (!d)
		return;
	for (unsigned i = 0; i < DCR_DVREC_VERSIONS; i++)
		slot_drop_locked(d, &d->ver[i]);
	while (d->spare) {
		struct rec *r = d->spare;

		d->spare = r->next_spare;
		free(r);
	}
	pthread_mutex_destroy(&d->lock);
	free(d);
}

bool dcr_dvrec_wants(const char *path)
{
	size_t n = strlen(path), k = strlen(DCR_DVIEW_SUFFIX);

	return n >= k && !memcmp(path + n - k, DCR_DVIEW_SUFFIX, k);
}

/* The slot of (@v, @tree), or NULL. Under lock. */
static struct dvver *slot_find(struct dcr_dvrec *d, uint64_t v, uint32_t tree)
{
	for (unsigned i = 0; i < DCR_DVREC_VERSIONS; i++)
		if (d->ver[i].v == v && d->ver[i].tree == tree)
			return &d->ver[i];
	return NULL;
}

/*
 * The slot for a record of (@v, @tree), made if need be: a version seen
 * again with another tree (re-indexed) loses its old records; a new one
 * takes a free slot or the oldest version's, unless it is older than
 * every version kept. NULL then. Under lock.
 */
static struct dvver *slot_for(struct dcr_dvrec *d, uint64_t v, uint32_t tree)
{
	struct dvver *s = slot_find(d, v, tree), *old = NULL;

	if (s)
		return s;
	for (unsigned i = 0; i < DCR_DVREC_VERSIONS; i++) {
		struct dvver *x = &d->ver[i];

		if (x->v == v) { /* another tree of v: its records are stale */
			old = x;
			break;
		}
		if (!old || !x->v || (old->v && x->v < old->v))
			old = x;
	}
	if (old->v && old->v != v && old->v > v)
		return NULL;
	slot_drop_locked(d, old);
	old->v = v;
	old->tree = tree;
	return old;
}

/* Room in @s for chunk @chunk of file @file. 0 or -ENOMEM. Under lock. */
static int slot_room(struct dvver *s, uint32_t file, uint64_t chunk)
{
	if (file >= s->nfiles) {
		uint32_t n = DCR_MAX(file + 1, 2 * s->nfiles);
		struct dvfile *f = realloc(s->files, n * sizeof(*f));

		if (!f)
			return DCR_ERR(-ENOMEM);
		memset(f + s->nfiles, 0, (n - s->nfiles) * sizeof(*f));
		s->files = f;
		s->nfiles = n;
	}
	struct dvfile *f = &s->files[file];

	if (chunk >= f->n) {
		uint64_t n = DCR_MAX(chunk + 1, 2 * f->n);
		struct rec **c = realloc(f->chunk, n * sizeof(*c));

		if (!c)
			return DCR_ERR(-ENOMEM);
		memset(c + f->n, 0, (n - f->n) * sizeof(*c));
		f->chunk = c;
		f->n = n;
	}
	return 0;
}

int dcr_dvrec_keep(struct dcr_dvrec *d, const struct dcr_dvrec_key *k,
		   uint64_t base_v, uint32_t base_tree, uint32_t base_file,
		   const struct dcr_frame_rec *fr, const uint8_t *chunk,
		   uint32_t clen)
{
	size_t vbytes = 0, bytes;
	struct rec *r, *prev;
	struct dvver *s;
	uint8_t *val;
	unsigned w1 = fr->n ? dcr_rec_width(fr->e[0]) : 0;
	int ret;

	for (size_t i = 0; i < fr->n; i++) {
		const uint32_t o = fr->e[i] & DCR_REC_OFF_MASK;
		const unsigned w = dcr_rec_width(fr->e[i]);

		if ((uint64_t)o + w > clen)
			return DCR_ERR(-EINVAL);
		if (w != w1 || o % w1)
			w1 = 0;
		vbytes += w;
	}
	bytes = sizeof(*r) + fr->n * sizeof(uint32_t) + vbytes;
	pthread_mutex_lock(&d->lock);
	r = spare_get_locked(d, bytes);
	pthread_mutex_unlock(&d->lock);
	if (!r) {
		/* with room for a record a little larger (the next ones) */
		size_t cap = DCR_ROUND_UP(bytes + bytes / 8, 4096);

		r = malloc(cap);
		if (r)
			r->cap = cap;
	}
	if (!r) {
		pthread_mutex_lock(&d->lock);
		d->refused++;
		pthread_mutex_unlock(&d->lock);
		return DCR_ERR(-ENOMEM);
	}
	/* The values from the proven chunk, not from the decoder. */
	memcpy(r->data, fr->e, fr->n * sizeof(uint32_t));
	val = r->data + fr->n * sizeof(uint32_t);
	/* fixed-size copies (inlined), not a memcpy call per element; one
	 * loop per width where all entries have one (the common case) */
	if (w1 == 2)
		for (size_t i = 0; i < fr->n; i++)
			memcpy(val + 2 * i, chunk + (fr->e[i] & DCR_REC_OFF_MASK), 2);
	else if (w1 == 4)
		for (size_t i = 0; i < fr->n; i++)
			memcpy(val + 4 * i, chunk + (fr->e[i] & DCR_REC_OFF_MASK), 4);
	else
		for (size_t i = 0, p = 0; i < fr->n; i++) {
			const uint8_t *src = chunk + (fr->e[i] & DCR_REC_OFF_MASK);

			switch (dcr_rec_width(fr->e[i])) {
			case 1: val[p++] = *src; break;
			case 2: memcpy(val + p, src, 2); p += 2; break;
			default: memcpy(val + p, src, 4); p += 4; break;
			}
		}
	r->c = (struct dcr_dvrec_chunk){ .base_v = base_v,
					 .base_tree = base_tree,
					 .base_file = base_file, .clen = clen,
					 .n = fr->n,
					 .e = (const uint32_t *)(void *)r->data,
					 .val = val, .w = w1 };
	r->refs = 1;
	r->bytes = bytes;

	pthread_mutex_lock(&d->lock);
	s = slot_find(d, k->v, k->tree);
	prev = s && k->file < s->nfiles && k->chunk < s->files[k->file].n ?
		       s->files[k->file].chunk[k->chunk] : NULL;
	if (d->bytes - (prev ? prev->bytes : 0) + bytes > d->budget) {
		ret = -ENOSPC;
		goto refuse;
	}
	s = slot_for(d, k->v, k->tree);
	if (!s) {
		ret = -ENOSPC;
		goto refuse;
	}
	ret = slot_room(s, k->file, k->chunk);
	if (ret)
		goto refuse;
	prev = s->files[k->file].chunk[k->chunk];
	if (prev) {
		d->bytes -= prev->bytes;
		d->chunks--;
		rec_unref_locked(d, prev);
	}
	s->files[k->file].chunk[k->chunk] = r;
	d->bytes += bytes;
	d->chunks++;
	d->kept++;
	pthread_mutex_unlock(&d->lock);
	return 0;
refuse:
	d->refused++;
	spare_put_locked(d, r);
	pthread_mutex_unlock(&d->lock);
	return ret;
}

int dcr_dvrec_get(struct dcr_dvrec *d, const struct dcr_dvrec_key *k,
		  const struct dcr_dvrec_chunk **out)
{
	struct rec *r = NULL;
	struct dvver *s;

	pthread_mutex_lock(&d->lock);
	s = slot_find(d, k->v, k->tree);
	if (s && k->file < s->nfiles && k->chunk < s->files[k->file].n)
		r = s->files[k->file].chunk[k->chunk];
	if (r)
		r->refs++;
	pthread_mutex_unlock(&d->lock);
	*out = r ? &r->c : NULL;
	return r ? 0 : -ENOENT;
}

void dcr_dvrec_put_ref(struct dcr_dvrec *d, const struct dcr_dvrec_chunk *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&d->lock);
	rec_unref_locked(d, (struct rec *)(void *)c);
	pthread_mutex_unlock(&d->lock);
}

uint64_t dcr_dvrec_count(struct dcr_dvrec *d, uint64_t v, uint32_t tree,
			 uint32_t file, uint64_t base_v)
{
	uint64_t n = 0;
	struct dvver *s;

	pthread_mutex_lock(&d->lock);
	s = slot_find(d, v, tree);
	if (s && v && file < s->nfiles)
		for (uint64_t k = 0; k < s->files[file].n; k++)
			if (s->files[file].chunk[k] &&
			    s->files[file].chunk[k]->c.base_v == base_v)
				n++;
	pthread_mutex_unlock(&d->lock);
	return n;
}

void dcr_dvrec_stats(struct dcr_dvrec *d, struct dcr_dvrec_stats *s)
{
	pthread_mutex_lock(&d->lock);
	*s = (struct dcr_dvrec_stats){ .chunks = d->chunks, .bytes = d->bytes,
				       .kept = d->kept, .refused = d->refused };
	pthread_mutex_unlock(&d->lock);
}
