/* SPDX-License-Identifier: MIT */
/*
 * rqueues.c - the read path's background threads (see reader_int.h).
 *
 * Contract: three bounded queues, each with its own lock, condition
 * variable, threads (started on first use, stopped and joined at
 * close) and busy count that dcr_reader_sync waits on. Write-behind
 * (wq_*) writes built chunks to the cache and ends their flights;
 * read-ahead (ra_*) notes sequential reads and materializes the chunks
 * ahead of them, fetching on its threads and handing the decoding to
 * the decode queue (dq_*). A full queue makes the submitter do the work
 * itself. Work here runs with tl_quiet set: its errors are logged at
 * debug level only.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "chunk.h"
#include "common.h"
#include "reader_int.h"

/* ------------------------------------------------------- write-behind */

/*
 * A chunk verified for a read is written to the cache by one of
 * WQ_THREADS writer threads, so that the thread that built it goes on
 * building the next one instead of waiting for the disk. The queued
 * flight keeps its buffer alive and stays listed, so a reader of the
 * chunk meanwhile joins it rather than building it again; the writer
 * ends it (flight_done, flight_release) once the file is in place. A
 * full queue makes the builder write itself: the disk sets the pace.
 */
static void *wq_main(void *arg)
{
	struct dcr_reader *r = arg;

	pthread_mutex_lock(&r->wq_lock);
	for (;;) {
		struct flight *f;

		while (!r->wq_stop && !r->wq_len)
			pthread_cond_wait(&r->wq_cond, &r->wq_lock);
		if (!r->wq_len)
			break; /* stopping, and everything is written */
		f = r->wq[r->wq_head];
		r->wq_head = (r->wq_head + 1) % WQ_MAX;
		r->wq_len--;
		r->wq_bytes -= f->len;
		r->wq_busy++;
		pthread_mutex_unlock(&r->wq_lock);
		struct dcr_cache_key k;

		cache_key(&k, f->rv, f->file, f->chunk, &f->ref);
		dcr_cache_put(r->cache, &k, f->data, DCR_CACHE_PUT_DIRECT);
		flight_done(r, f, 0);
		flight_release(r, f);
		pthread_mutex_lock(&r->wq_lock);
		if (--r->wq_busy == 0 && !r->wq_len)
			pthread_cond_broadcast(&r->wq_cond); /* dcr_reader_sync */
	}
	pthread_mutex_unlock(&r->wq_lock);
	return NULL;
}

/* Queue the published flight @f for writing: true if queued. */
bool wq_submit(struct dcr_reader *r, struct flight *f)
{
	bool ok = false;

	pthread_mutex_lock(&r->wq_lock);
	if (!r->wq_started && !r->wq_stop) {
		r->wq_started = true;
		for (int i = 0; i < WQ_THREADS; i++) {
			if (pthread_create(&r->wq_th[r->nwq_th], NULL, wq_main,
					   r) != 0)
				break;
			r->nwq_th++;
		}
	}
	if (r->nwq_th && !r->wq_stop && r->wq_len < WQ_MAX &&
	    r->wq_bytes + f->len <= WQ_BYTES) {
		pthread_mutex_lock(&r->sf_lock);
		f->refs++; /* the writer's */
		pthread_mutex_unlock(&r->sf_lock);
		r->wq[(r->wq_head + r->wq_len) % WQ_MAX] = f;
		r->wq_len++;
		r->wq_bytes += f->len;
		/* Broadcast: dcr_reader_sync waits on the same condvar,
		 * and a signal could wake it instead of an idle writer. */
		pthread_cond_broadcast(&r->wq_cond);
		ok = true;
	}
	pthread_mutex_unlock(&r->wq_lock);
	return ok;
}

/*
 * Set *@stop under @lock, wake the waiters on @cond, join the threads,
 * then clear *@nth under @lock (dcr_reader_sync reads it there) and wake
 * the waiters again.
 */
static void threads_stop(pthread_mutex_t *lock, pthread_cond_t *cond,
			 bool *stop, pthread_t *th, int *nth)
{
	int n;

	pthread_mutex_lock(lock);
	*stop = true;
	n = *nth;
	pthread_cond_broadcast(cond);
	pthread_mutex_unlock(lock);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	pthread_mutex_lock(lock);
	*nth = 0;
	pthread_cond_broadcast(cond);
	pthread_mutex_unlock(lock);
}

/* Write what is queued, then stop and join the writers. */
void wq_stop(struct dcr_reader *r)
{
	threads_stop(&r->wq_lock, &r->wq_cond, &r->wq_stop, r->wq_th,
		     &r->nwq_th);
}

/* --------------------------------------------------- read-ahead decode */

/*
 * Read-ahead threads fetch; decoding is handed to DQ_THREADS decoder
 * threads through a short queue. A read-ahead thread that decoded its
 * own job would leave the link idle meanwhile, and since concurrent GETs
 * share the link and finish together, all of them would then decode at
 * once and fetch at once: fetching and decoding would take turns
 * instead of overlapping. A full queue makes the fetcher decode itself.
 */
struct dq_item {
	struct batch b;
	struct piece ps[RA_JOB_MAX];
};

static void *dq_main(void *arg)
{
	struct dcr_reader *r = arg;

	tl_quiet = true;
	pthread_mutex_lock(&r->dq_lock);
	for (;;) {
		struct dq_item *it;

		while (!r->dq_stop && !r->dq_len)
			pthread_cond_wait(&r->dq_cond, &r->dq_lock);
		if (!r->dq_len)
			break; /* stopping, and everything is decoded */
		it = r->dq[r->dq_head];
		r->dq_head = (r->dq_head + 1) % DQ_MAX;
		r->dq_len--;
		r->dq_busy++;
		pthread_mutex_unlock(&r->dq_lock);
		batch_finish(&it->b, 1);
		free(it);
		pthread_mutex_lock(&r->dq_lock);
		if (--r->dq_busy == 0 && !r->dq_len)
			pthread_cond_broadcast(&r->dq_cond); /* dcr_reader_sync */
	}
	pthread_mutex_unlock(&r->dq_lock);
	return NULL;
}

/* Queue @it for a decoder: true if queued (it is theirs then). */
static bool dq_submit(struct dcr_reader *r, struct dq_item *it)
{
	bool ok = false;

	pthread_mutex_lock(&r->dq_lock);
	if (!r->dq_started && !r->dq_stop) {
		r->dq_started = true;
		for (int i = 0; i < DQ_THREADS; i++) {
			if (pthread_create(&r->dq_th[r->ndq_th], NULL, dq_main,
					   r) != 0)
				break;
			r->ndq_th++;
		}
	}
	if (r->ndq_th && !r->dq_stop && r->dq_len < DQ_MAX) {
		r->dq[(r->dq_head + r->dq_len) % DQ_MAX] = it;
		r->dq_len++;
		pthread_cond_broadcast(&r->dq_cond); /* see wq_submit */
		ok = true;
	}
	pthread_mutex_unlock(&r->dq_lock);
	return ok;
}

/* Decode what is queued, then stop and join the decoders. */
void dq_stop(struct dcr_reader *r)
{
	threads_stop(&r->dq_lock, &r->dq_cond, &r->dq_stop, r->dq_th,
		     &r->ndq_th);
}

/* Read-ahead of the @n pieces of @it: fetch here, decode over there;
 * through the page cache with @pagecache (a prefetcher's). */
static void ra_materialize(struct dcr_reader *r, struct dq_item *it, size_t n,
			   bool pagecache)
{
	it->b = (struct batch){ .r = r, .nc = n, .pagecache = pagecache };
	it->b.c = calloc(n, sizeof(*it->b.c));
	if (!it->b.c) {
		free(it);
		return;
	}
	batch_prepare(&it->b, it->ps);
	if (it->b.nruns)
		par_for(1, it->b.nruns, fetch_run, &it->b);
	if (!dq_submit(r, it)) {
		batch_finish(&it->b, 1);
		free(it);
	}
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
 * join its flight. Errors of read-ahead are logged at debug level only.
 */
/* Note whether a job (or a read) on (@v, @idx) found all it needed. */
void ra_hits(struct dcr_reader *r, uint64_t v, uint32_t idx, bool hit)
{
	pthread_mutex_lock(&r->ra_lock);
	for (int i = 0; i < RA_STREAMS; i++) {
		struct ra_stream *x = &r->ra_streams[i];

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
	pthread_mutex_unlock(&r->ra_lock);
}

static void *ra_main(void *arg)
{
	struct dcr_reader *r = arg;

	tl_quiet = true;
	pthread_mutex_lock(&r->ra_lock);
	for (;;) {
		struct ra_job job;
		struct dq_item *it;
		struct piece *ps;
		size_t n = 0;

		while (!r->ra_stop && !r->ra_qlen)
			pthread_cond_wait(&r->ra_cond, &r->ra_lock);
		if (r->ra_stop)
			break;
		job = r->ra_q[r->ra_qhead];
		r->ra_qhead = (r->ra_qhead + 1) % RA_QUEUE;
		r->ra_qlen--;
		r->ra_busy++;
		pthread_mutex_unlock(&r->ra_lock);

		it = malloc(sizeof(*it));
		if (!it) {
			pthread_mutex_lock(&r->ra_lock);
			if (--r->ra_busy == 0 && !r->ra_qlen)
				pthread_cond_broadcast(&r->ra_cond);
			continue; /* read-ahead is an optimization */
		}
		ps = it->ps;
		bool proved = false;

		for (uint32_t k = 0; k < job.n; k++) {
			struct piece *p = &ps[n];
			uint64_t i = job.first + k;
			int ret;

			memset(p, 0, sizeof(*p));
			p->w.rv = job.rv;
			p->w.file = job.idx - 1;
			p->w.chunk = i;
			p->clen = dcr_chunk_len(job.rv->entries[job.idx].size,
						job.rv->chunk_size, i);
			ret = piece_fast(r, p);
			if (ret == -ENOENT)
				n++;
			else if (ret == 1)
				proved = true;
		}
		if (n) {
			ra_materialize(r, it, n, job.pagecache);
		} else {
			free(it);
		}
		/* Proving cached chunks ahead of the reader is work too:
		 * read-ahead stays on while it finds some to do. */
		ra_hits(r, job.rv->v, job.idx, n == 0 && !proved);

		pthread_mutex_lock(&r->ra_lock);
		if (--r->ra_busy == 0 && !r->ra_qlen)
			pthread_cond_broadcast(&r->ra_cond); /* dcr_reader_sync */
	}
	pthread_mutex_unlock(&r->ra_lock);
	return NULL;
}

/* Stop and join the read-ahead threads; queued jobs are dropped. */
void ra_stop(struct dcr_reader *r)
{
	threads_stop(&r->ra_lock, &r->ra_cond, &r->ra_stop, r->ra_th,
		     &r->nra_th);
}

/* Note a read of [off, end) of entry @idx; queue read-ahead if sequential. */
void ra_note(struct dcr_reader *r, struct rver *rv, uint32_t idx,
	     uint64_t off, uint64_t end, bool pagecache)
{
	const uint64_t size = rv->entries[idx].size, cs = rv->chunk_size;
	const uint64_t slack = DCR_MAX((uint64_t)4 << 20, 4 * cs);
	const uint64_t nchunks = dcr_chunk_count(size, (uint32_t)cs);
	struct ra_stream *s = NULL, *lru = &r->ra_streams[0];
	uint64_t from, to, group;
	bool seq;

	if (r->readahead == 0 || end >= size)
		return;
	pthread_mutex_lock(&r->ra_lock);
	for (int i = 0; i < RA_STREAMS; i++) {
		struct ra_stream *x = &r->ra_streams[i];

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
	s->stamp = ++r->ra_clock;
	s->next_off = DCR_MAX(s->next_off, end);
	if (!seq || r->ra_stop)
		goto out_unlock;

	/* Start the threads on the first sequential read. */
	if (!r->ra_started) {
		r->ra_started = true;
		for (int i = 0; i < r->fetch_threads && i < RA_THREADS_MAX; i++) {
			if (pthread_create(&r->ra_th[r->nra_th], NULL, ra_main,
					   r) != 0)
				break;
			r->nra_th++;
		}
	}
	from = DCR_MAX(s->queued, dcr_chunk_index(end - 1, (uint32_t)cs) + 1);
	to = DCR_MIN(nchunks, dcr_chunk_index(DCR_MIN(end + r->readahead,
						      size) - 1, (uint32_t)cs) + 1);
	group = DCR_MAX((uint64_t)1, DCR_MIN((uint64_t)RA_JOB_MAX,
					     (RA_JOB_BYTES + cs - 1) / cs));
	while (from < to && r->ra_qlen < RA_QUEUE && r->nra_th) {
		struct ra_job *j = &r->ra_q[(r->ra_qhead + r->ra_qlen) %
					    RA_QUEUE];

		if (s->hits >= RA_HITS_QUIET && ++s->skipped < RA_PROBE) {
			if (s->skip_from == UINT64_MAX)
				s->skip_from = from;
			from += DCR_MIN(group, to - from); /* all cached */
			continue;
		}
		s->skipped = 0;
		j->rv = rv;
		j->idx = idx;
		j->first = from;
		j->n = (uint32_t)DCR_MIN(group, to - from);
		j->pagecache = pagecache;
		from += j->n;
		r->ra_qlen++;
		pthread_cond_broadcast(&r->ra_cond); /* see wq_submit */
	}
	s->queued = DCR_MAX(s->queued, from);
out_unlock:
	pthread_mutex_unlock(&r->ra_lock);
}
