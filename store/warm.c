/* SPDX-License-Identifier: MIT */
/*
 * warm.c - filling the cache tiers with packs (see warm.h). Locks: a
 * warm's lock guards its counters, the first failure, the mirrors given
 * up and the progress callback; the publisher's lock guards its list of
 * packs put (packs are put from several upload threads at once).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "warm.h"
#include "wq.h"

#define SLICE_DEFAULT ((uint64_t)1 << 20)
#define PACKS_PREFIX "packs/"
#define VERSIONS_PREFIX "versions/"

struct piece {
	size_t pack;
	uint64_t off, len;
};

struct warm {
	struct dcr_store *st;
	const struct dcr_warm_pack *packs;
	const struct dcr_warm_opts *o;
	struct piece *pieces;
	int64_t deadline;
	pthread_mutex_t lock; /* everything below */
	struct dcr_warm_result *res;
	bool *pack_failed;    /* one line logged for it already */
	bool gave_up[DCR_MIRRORS_MAX];
};

/* Record piece @p's failure @ret (through @url, @mirror: -1 if none was
 * asked); the caller holds the lock. */
static void piece_failed(struct warm *w, const struct piece *p, int mirror,
			 const char *url, int ret)
{
	const struct dcr_warm_pack *pk = &w->packs[p->pack];
	struct dcr_warm_result *r = w->res;

	r->failed++;
	if (w->o->give_up && mirror >= 0)
		w->gave_up[mirror] = true;
	if (!r->fail_err) {
		r->fail_err = ret;
		snprintf(r->fail_key, sizeof(r->fail_key), "%s", pk->key);
		r->fail_off = p->off;
		r->fail_url = url;
	}
	if (!w->o->quiet && !w->pack_failed[p->pack] && mirror >= 0)
		dcr_err("%s: warming bytes %" PRIu64 "+%" PRIu64 " through mirror "
			"%s failed: %s", pk->key, p->off, p->len, url,
			dcr_strerror(ret));
	w->pack_failed[p->pack] = true;
}

/* One piece: GET it through its mirror (unless given up or past the
 * bound); count it. */
static void warm_piece(void *arg, size_t i)
{
	struct warm *w = arg;
	const struct piece *p = &w->pieces[i];
	const char *key = w->packs[p->pack].key, *url = NULL;
	struct dcr_buf b;
	bool skip;
	int mirror = dcr_mirror_pick(w->st, key, &url), ret;

	pthread_mutex_lock(&w->lock);
	skip = mirror >= 0 && w->gave_up[mirror];
	pthread_mutex_unlock(&w->lock);
	if (skip) {
		ret = -ECANCELED;
	} else if (w->deadline && dcr_mono_ns() >= w->deadline) {
		ret = -ETIMEDOUT;
		mirror = -1; /* no mirror was asked */
		url = NULL;
	} else {
		dcr_buf_init(&b, (size_t)p->len);
		ret = dcr_mirror_warm(w->st, key, p->off, p->len, w->deadline,
				      &b, &url);
		dcr_buf_free(&b);
	}
	pthread_mutex_lock(&w->lock);
	if (skip)
		w->res->failed++;
	else if (ret)
		piece_failed(w, p, mirror, url, ret);
	else
		w->res->bytes_warmed += p->len;
	if (w->o->progress)
		w->o->progress(w->o->progress_arg, w->res->bytes_warmed,
			       w->res->bytes);
	pthread_mutex_unlock(&w->lock);
}

/* The pieces of @w's packs, aligned to @slice: 0 or -ENOMEM. */
static int plan(struct warm *w, size_t n, uint64_t slice)
{
	size_t cap = 0;

	for (size_t i = 0; i < n; i++) {
		const struct dcr_warm_pack *pk = &w->packs[i];

		w->res->bytes += pk->size;
		for (uint64_t off = 0; off < pk->size; off += slice) {
			if (dcr_array_grow(&w->pieces, sizeof(*w->pieces),
					   w->res->pieces, &cap))
				return DCR_ERR(-ENOMEM);
			w->pieces[w->res->pieces++] = (struct piece){
				.pack = i, .off = off,
				.len = DCR_MIN(slice, pk->size - off) };
		}
	}
	return 0;
}

int dcr_warm_packs(struct dcr_store *st, const struct dcr_warm_pack *packs,
		   size_t n, const struct dcr_warm_opts *o,
		   struct dcr_warm_result *res)
{
	static const struct dcr_warm_opts defaults = { 0 };
	struct warm w = { .st = st, .packs = packs, .o = o ? o : &defaults,
			  .res = res };
	uint64_t slice = w.o->slice ? w.o->slice : SLICE_DEFAULT;
	int jobs = DCR_MAX(w.o->jobs, 1), ret;
	struct dcr_wq *q = NULL;

	memset(res, 0, sizeof(*res));
	if (!dcr_store_is_mirrored(st))
		return -EOPNOTSUPP;
	if (w.o->timeout_ns)
		w.deadline = dcr_mono_ns() + w.o->timeout_ns;
	if (n && !(w.pack_failed = calloc(n, sizeof(*w.pack_failed))))
		return DCR_ERR(-ENOMEM);
	pthread_mutex_init(&w.lock, NULL);
	if ((ret = plan(&w, n, slice)))
		goto out_free;
	struct dcr_wq_opts qo = { .name = "warm", .threads = jobs - 1,
				  .max_items = 1 };
	if (jobs > 1 && (ret = dcr_wq_create(&qo, &q))) {
		dcr_err("%s: cannot make the warm's work queue: %s", st->url,
			dcr_strerror(ret));
		goto out_free;
	}
	dcr_wq_par_for(q, jobs, res->pieces, warm_piece, &w);
	dcr_wq_free(q);
	ret = res->fail_err ? res->fail_err : res->failed ? DCR_ERR(-EIO) : 0;
out_free:
	pthread_mutex_destroy(&w.lock);
	free(w.pieces);
	free(w.pack_failed);
	return ret;
}

/* ------------------------------------------------ the committer's store */

struct publisher {
	struct dcr_store base; /* must be first */
	struct dcr_store *origin; /* owned by @ms */
	struct dcr_store *ms;     /* the mirrored store over @origin */
	struct dcr_warm_opts o;
	pthread_mutex_t lock;     /* the list below */
	struct dcr_warm_pack *packs;
	size_t n, cap;
};

static struct publisher *to_pub(struct dcr_store *st)
{
	return (struct publisher *)st;
}

/* Remember pack @key of @len bytes, just put. Out of memory: it is not
 * warmed (logged). */
static void remember(struct publisher *pb, const char *key, uint64_t len)
{
	pthread_mutex_lock(&pb->lock);
	if (dcr_array_grow(&pb->packs, sizeof(*pb->packs), pb->n, &pb->cap)) {
		dcr_warn("%s: out of memory: %s will not be warmed", pb->base.url,
			 key);
	} else {
		snprintf(pb->packs[pb->n].key, sizeof(pb->packs[pb->n].key),
			 "%s", key);
		pb->packs[pb->n++].size = len;
	}
	pthread_mutex_unlock(&pb->lock);
}

/* Warm the packs put since the last publish before @key is put: one
 * line either way; never an error. */
static void warm_before(struct publisher *pb, const char *key)
{
	struct dcr_warm_result r;
	struct dcr_warm_pack *packs;
	size_t n;
	char b[2][32];
	int64_t t0 = dcr_mono_ns();
	int ret;

	pthread_mutex_lock(&pb->lock);
	packs = pb->packs;
	n = pb->n;
	pb->packs = NULL;
	pb->n = pb->cap = 0;
	pthread_mutex_unlock(&pb->lock);
	if (!n)
		return;
	ret = dcr_warm_packs(pb->ms, packs, n, &pb->o, &r);
	double secs = (double)(dcr_mono_ns() - t0) / 1e9;
	if (!ret)
		dcr_info("%s: warmed the %zu new pack%s (%s) through the mirrors "
			 "in %.2f s before publishing %s", pb->base.url, n,
			 n == 1 ? "" : "s",
			 dcr_format_size(r.bytes, b[0], sizeof(b[0])), secs, key);
	else if (r.fail_url)
		dcr_warn("%s: warming the new packs before publishing %s failed "
			 "after %.2f s (%s of %s warmed): %s at byte %" PRIu64
			 " through mirror %s: %s; publishing anyway", pb->base.url,
			 key, secs, dcr_format_size(r.bytes_warmed, b[0], sizeof(b[0])),
			 dcr_format_size(r.bytes, b[1], sizeof(b[1])), r.fail_key,
			 r.fail_off, r.fail_url, dcr_strerror(r.fail_err));
	else
		dcr_warn("%s: warming the new packs before publishing %s stopped "
			 "after %.2f s (%s of %s warmed): %s; publishing anyway",
			 pb->base.url, key, secs,
			 dcr_format_size(r.bytes_warmed, b[0], sizeof(b[0])),
			 dcr_format_size(r.bytes, b[1], sizeof(b[1])),
			 r.fail_err == -ETIMEDOUT ? "its time bound passed" :
			 dcr_strerror(ret));
	free(packs);
}

static int pub_put(struct dcr_store *st, const char *key, const void *data,
		   uint64_t len, int flags)
{
	struct publisher *pb = to_pub(st);
	int ret;

	if (!strncmp(key, VERSIONS_PREFIX, strlen(VERSIONS_PREFIX)))
		warm_before(pb, key);
	ret = dcr_store_put(pb->origin, key, data, len, flags);
	if (!ret && !strncmp(key, PACKS_PREFIX, strlen(PACKS_PREFIX)) &&
	    strlen(key) < DCR_WARM_KEY_MAX)
		remember(pb, key, len);
	return ret;
}

static int pub_get(struct dcr_store *st, const char *key, uint64_t off,
		   uint64_t len, int64_t deadline, struct dcr_buf *out)
{
	return dcr_store_get_within(to_pub(st)->origin, key, off, len,
				    deadline, out);
}

static int pub_head(struct dcr_store *st, const char *key, uint64_t *size)
{
	return dcr_store_head(to_pub(st)->origin, key, size);
}

static int pub_list(struct dcr_store *st, const char *prefix, dcr_list_fn fn,
		    void *arg)
{
	return dcr_store_list(to_pub(st)->origin, prefix, fn, arg);
}

static int pub_del(struct dcr_store *st, const char *key)
{
	return dcr_store_del(to_pub(st)->origin, key);
}

static int pub_list_partial(struct dcr_store *st, dcr_list_fn fn, void *arg)
{
	return dcr_store_list_partial(to_pub(st)->origin, fn, arg);
}

static int pub_abort_partial(struct dcr_store *st, const char *key,
			     const char *upload)
{
	return dcr_store_abort_partial(to_pub(st)->origin, key, upload);
}

static void pub_close(struct dcr_store *st)
{
	struct publisher *pb = to_pub(st);

	dcr_store_close(pb->ms); /* and the origin */
	pthread_mutex_destroy(&pb->lock);
	free(pb->packs);
	free(pb->base.url);
	free(pb);
}

static const struct dcr_store_ops publisher_ops = {
	.name = "s3+warm",
	.get = pub_get,
	.put = pub_put,
	.head = pub_head,
	.list = pub_list,
	.del = pub_del,
	.list_partial = pub_list_partial,
	.abort_partial = pub_abort_partial,
	.close = pub_close,
};

int dcr_warm_publisher_open(struct dcr_store *origin, const char *list,
			    const struct dcr_store_cfg *cfg,
			    const struct dcr_warm_opts *o,
			    struct dcr_store **out)
{
	struct publisher *pb = calloc(1, sizeof(*pb));
	int ret;

	if (!pb || !(pb->base.url = strdup(origin->url))) {
		free(pb);
		return DCR_ERR(-ENOMEM);
	}
	if ((ret = dcr_mirror_open(origin, list, cfg, &pb->ms))) {
		free(pb->base.url);
		free(pb);
		return ret;
	}
	pb->base.ops = &publisher_ops;
	pb->origin = origin;
	if (o)
		pb->o = *o;
	pb->o.give_up = true;
	pb->o.quiet = true;
	pb->o.progress = NULL;
	pthread_mutex_init(&pb->lock, NULL);
	*out = &pb->base;
	return 0;
}
