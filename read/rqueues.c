/* SPDX-License-Identifier: MIT */
/*
 * rqueues.c - the read path's background work (see reader_int.h), on
 * four queues of core/wq.h made at open (r->qs): write-behind (wq)
 * writes built chunks to the cache (their entries then persisted);
 * read-ahead (ra) notes sequential reads (the streams, r->ras) and
 * materializes the chunks ahead of them, fetching on its threads and
 * handing the decoding to the decode queue (dq); par lends idle threads
 * to par_for (rmaterialize.c). A full queue makes the submitter do the
 * work itself. Read-ahead is
 * speculative (struct rreq quiet): its errors are logged at debug level
 * only.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "chunk.h"
#include "common.h"
#include "reader_int.h"

/* Chunks waiting to be written to the cache, and the threads that write
 * them (see wq_submit). */
#define WQ_MAX 32
#define WQ_BYTES ((uint64_t)32 << 20) /* and at most this many bytes */
/* Read-ahead jobs fetched and waiting for a decoder (see ra_decode). */
#define DQ_MAX 8
/* The decoders and writers are r->threads each (the CPU budget, or
 * threads=N); their queues hold at least this much per thread. */
#define WQ_BYTES_PER_THREAD ((uint64_t)4 << 20)

/* Read-ahead job: chunks [first, first+n) of entry idx of version rv;
 * the same allocation carries their batch to the decoder. */
struct ra_job {
	struct rver *rv;
	uint32_t idx;
	uint64_t first;
	uint32_t n;
	bool pagecache; /* queued by dcr_reader_prefetch: through the page cache */
	struct batch b;
	struct piece ps[]; /* n */
};

/* What read-ahead asks of the read path: speculative, no deadline. */
static const struct rreq ra_req = { .quiet = true };

/* ------------------------------------------------------- write-behind */

/*
 * A chunk verified for a read is written to the cache by one of
 * r->threads writer threads, so that the thread that built it goes on
 * building the next one instead of waiting for the disk. The queued
 * entry is ready meanwhile (readers of the chunk are served from it) and
 * its reference keeps it; the writer marks it persisted once the file is
 * in place. A full queue makes the builder write itself: the disk sets
 * the pace.
 */
static void wq_run(void *ctx, void *ws, void *arg)
{
	struct dcr_reader *r = ctx;
	struct cent *e = arg;
	struct dcr_cache_key k;

#ifdef DCR_TEST_HOOKS
	/* Test hook (HACKING): DCRFS_TEST_WRITE_DELAY_MS=N holds each
	 * write-behind write back N ms, so that a test finds the chunk
	 * ready in memory and not yet in the cache. */
	const char *delay = getenv("DCRFS_TEST_WRITE_DELAY_MS");

	if (delay)
		usleep((useconds_t)atoi(delay) * 1000);
#endif
	int64_t t0 = dcr_mono_ns();

	cache_key(&k, e->w.rv, e->w.file, e->w.chunk, &e->ref);
	dcr_cache_put(r->cache, &k, e->data, cache_put_flags(r));
	BUSY_ADD(r, busy_write, t0);
	cent_publish(r, e, 0, true);
	cent_release(r, e);
}

bool wq_submit(struct dcr_reader *r, struct cent *e)
{
	cent_hold(r, e); /* the writer's */
	if (dcr_wq_try_submit(r->qs.wq, wq_run, e, e->len))
		return true;
	cent_release(r, e); /* ours keeps it alive */
	return false;
}

/* --------------------------------------------------- read-ahead decode */

/*
 * Read-ahead threads fetch; decoding is handed to r->threads decoder
 * threads through a short queue. A read-ahead thread that decoded its
 * own job would leave the link idle meanwhile, and since concurrent GETs
 * share the link and finish together, all of them would then decode at
 * once and fetch at once: fetching and decoding would take turns
 * instead of overlapping. A full queue makes the fetcher decode itself.
 */
static void ra_decode(void *ctx, void *ws, void *arg)
{
	struct ra_job *j = arg;

	(void)ctx;
	batch_finish(&j->b, 1);
	free(j);
}

/* Read-ahead of the @n pieces of @j (which it frees): fetch here,
 * decode over there. */
static void ra_materialize(struct dcr_reader *r, struct ra_job *j, size_t n)
{
	j->b = (struct batch){ .r = r, .nc = n, .q = ra_req };
	j->b.q.pagecache = j->pagecache;
	j->b.c = calloc(n, sizeof(*j->b.c));
	if (!j->b.c) {
		free(j);
		return;
	}
	batch_prepare(&j->b, j->ps);
	for (size_t i = 0; i < j->b.nruns; i++)
		fetch_run(&j->b, i);
	if (!dcr_wq_try_submit(r->qs.dq, ra_decode, j, 0))
		ra_decode(r, NULL, j);
}

/* ------------------------------------------------------------ read-ahead */

/*
 * Read-ahead: the reader remembers the last RA_STREAMS files read and
 * where each read ended. A read that starts at offset 0 or near where
 * the previous one of the same file ended is sequential: the chunks up
 * to r->readahead bytes past it are queued, a few chunks per job (one
 * coalesced GET when their frames are neighbours), and materialized into
 * the cache by the read-ahead threads, so a cold sequential reader keeps
 * several GETs in flight. Foreground reads of a chunk being read ahead
 * join its entry. Errors of read-ahead are logged at debug level only.
 */
void ra_hits(struct dcr_reader *r, uint64_t v, uint32_t idx, bool hit)
{
	pthread_mutex_lock(&r->ras.lock);
	for (int i = 0; i < RA_STREAMS; i++) {
		struct ra_stream *x = &r->ras.s[i];

		if (x->used && x->v == v && x->idx == idx) {
			x->hits = hit ? x->hits + 1 : 0;
			if (!hit && x->skip_from != UINT64_MAX) {
				/* Queue what was skipped, from its start. */
				x->queued = DCR_MIN(x->queued, x->skip_from);
				x->skip_from = UINT64_MAX;
			}
			break;
		}
	}
	pthread_mutex_unlock(&r->ras.lock);
}

/* A read-ahead job, on a read-ahead thread. */
static void ra_run(void *ctx, void *ws, void *arg)
{
	struct dcr_reader *r = ctx;
	struct ra_job *j = arg;
	const uint64_t v = j->rv->v;
	const uint32_t idx = j->idx;
	bool proved = false;
	size_t n = 0;

	for (uint32_t k = 0; k < j->n; k++) {
		struct piece *p = &j->ps[n];
		uint64_t i = j->first + k;
		int ret;

		memset(p, 0, sizeof(*p));
		p->w.rv = j->rv;
		p->w.file = idx - 1;
		p->w.chunk = i;
		p->clen = dcr_chunk_len(j->rv->entries[idx].size,
					j->rv->chunk_size, i);
		ret = piece_fast(r, &ra_req, p);
		if (ret == -ENOENT)
			n++;
		else if (ret == 1)
			proved = true;
	}
	if (n)
		ra_materialize(r, j, n);
	else
		free(j);
	/* Proving cached chunks ahead of the reader is work too:
	 * read-ahead stays on while it finds some to do. */
	ra_hits(r, v, idx, n == 0 && !proved);
}

/* Read-ahead jobs still queued at close are dropped. */
static void ra_drop(void *ctx, void *arg)
{
	(void)ctx;
	free(arg);
}

void ra_note(struct dcr_reader *r, struct rver *rv, uint32_t idx,
	     uint64_t off, uint64_t end, bool pagecache)
{
	const uint64_t size = rv->entries[idx].size, cs = rv->chunk_size;
	const uint64_t slack = DCR_MAX((uint64_t)4 << 20, 4 * cs);
	const uint64_t nchunks = dcr_chunk_count(size, (uint32_t)cs);
	struct ra_stream *s = NULL, *lru = &r->ras.s[0];
	uint64_t from, to, group;
	bool seq;

	if (r->readahead == 0 || end >= size)
		return;
	pthread_mutex_lock(&r->ras.lock);
	for (int i = 0; i < RA_STREAMS; i++) {
		struct ra_stream *x = &r->ras.s[i];

		if (x->used && x->v == rv->v && x->idx == idx) {
			s = x;
			break;
		}
		if (!x->used || (lru->used && x->stamp < lru->stamp))
			lru = x;
	}
	seq = off == 0 || (s && off + slack >= s->next_off &&
			   off <= s->next_off + slack);
	if (!s || !seq) {
		s = s ? s : lru;
		s->used = true;
		s->v = rv->v;
		s->idx = idx;
		s->next_off = end;
		s->queued = 0;
		s->hits = 0;
		s->skipped = 0;
		s->skip_from = UINT64_MAX;
	}
	s->stamp = ++r->ras.clock;
	s->next_off = DCR_MAX(s->next_off, end);
	if (!seq)
		goto out_unlock;

	from = DCR_MAX(s->queued, dcr_chunk_index(end - 1, (uint32_t)cs) + 1);
	to = DCR_MIN(nchunks, dcr_chunk_index(DCR_MIN(end + r->readahead,
						      size) - 1, (uint32_t)cs) + 1);
	group = DCR_MAX((uint64_t)1, DCR_MIN((uint64_t)RA_JOB_MAX,
					     (RA_JOB_BYTES + cs - 1) / cs));
	while (from < to) {
		const uint32_t n = (uint32_t)DCR_MIN(group, to - from);
		struct ra_job *j;

		/* Whole groups only, but at the end of the file: the window
		 * moves on by one chunk a read, and a job of the one chunk it
		 * uncovers would be a GET of its own, never coalesced. */
		if (n < group && to < nchunks)
			break;

		if (s->hits >= RA_HITS_QUIET && ++s->skipped < RA_PROBE) {
			if (s->skip_from == UINT64_MAX)
				s->skip_from = from;
			from += n; /* all cached */
			continue;
		}
		j = malloc(sizeof(*j) + n * sizeof(j->ps[0]));
		if (!j)
			break;
		j->rv = rv;
		j->idx = idx;
		j->first = from;
		j->n = n;
		j->pagecache = pagecache;
		if (!dcr_wq_try_submit(r->qs.ra, ra_run, j, 0)) {
			free(j); /* full (or closing): the reader comes back */
			break;
		}
		s->skipped = 0;
		from += n;
	}
	s->queued = DCR_MAX(s->queued, from);
out_unlock:
	pthread_mutex_unlock(&r->ras.lock);
}

/* -------------------------------------------------- open, sync, close */

int queues_open(struct dcr_reader *r)
{
	const size_t nt = (size_t)r->threads;
	const struct dcr_wq_opts o[] = {
		{ .name = "dcr-readahead", .threads = r->fetch_threads,
		  .max_items = RA_QUEUE, .drop = ra_drop },
		{ .name = "dcr-decode", .threads = r->threads,
		  .max_items = DCR_MAX((size_t)DQ_MAX, nt) },
		{ .name = "dcr-write", .threads = r->threads,
		  .max_items = DCR_MAX((size_t)WQ_MAX, 2 * nt),
		  .max_cost = DCR_MAX(WQ_BYTES, nt * WQ_BYTES_PER_THREAD) },
	};
	struct dcr_wq **q[] = { &r->qs.ra, &r->qs.dq, &r->qs.wq };
	/* par_for's pool: the fetches of a read (fetch_threads) and the
	 * CPU work (threads), whichever wants more. */
	const struct dcr_wq_opts pool = {
		.name = "dcr-fetch",
		.threads = DCR_MAX(r->fetch_threads, r->threads),
		.max_items = 1 };
	int ret;

	pthread_mutex_init(&r->ras.lock, NULL);
	for (size_t i = 0; i < DCR_ARRAY_SIZE(q); i++) {
		struct dcr_wq_opts x = o[i];

		x.ctx = r;
		ret = dcr_wq_create(&x, q[i]);
		if (ret)
			return ret;
	}
	return dcr_wq_create(&pool, &r->qs.par);
}

void queues_sync(struct dcr_reader *r)
{
	/* In pipeline order: read-ahead feeds the decoders, which (like
	 * every read) feed the writers. */
	dcr_wq_wait_idle(r->qs.ra);
	dcr_wq_wait_idle(r->qs.dq);
	dcr_wq_wait_idle(r->qs.wq);
}

void queues_close(struct dcr_reader *r)
{
	/* Pipeline order again: the stages still running feed the next. */
	dcr_wq_stop(r->qs.ra, true);
	dcr_wq_free(r->qs.ra);
	dcr_wq_free(r->qs.dq);
	dcr_wq_free(r->qs.wq);
	dcr_wq_free(r->qs.par);
	r->qs.ra = r->qs.dq = r->qs.wq = r->qs.par = NULL;
	pthread_mutex_destroy(&r->ras.lock);
}
