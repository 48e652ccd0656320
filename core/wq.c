/* SPDX-License-Identifier: MIT */
/*
 * wq.c - the bounded work queue (see wq.h).
 *
 * One mutex per queue guards everything below; two condition variables:
 * `work` wakes workers (a job queued, a loop to help with, stopping) and
 * `done` wakes whoever waits for the queue (room for dcr_wq_submit, idle
 * for dcr_wq_wait_idle, a loop's helpers finished for dcr_wq_par_for).
 * A loop (struct par) lives on its caller's stack and is listed in the
 * queue while workers may join it; the caller unlists it and waits for
 * the workers that joined, so none touches it after that.
 *
 * A job runs under its submitter's error scope (common.h), so that what
 * it logs belongs to the call that made it; a loop's helpers likewise.
 *
 * Workers take no process signals (they start with every signal
 * blocked): a signal sent to the process goes to a thread of its
 * owner's, e.g. the daemon's main thread, whose handler and waits expect
 * it (fs/main.c), or a Python interpreter's.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"
#include "wq.h"

struct job {
	dcr_wq_fn fn;
	void *arg;
	uint64_t cost;
	struct dcr_errscope *scope; /* the submitter's (common.h), or NULL */
};

/* A dcr_wq_par_for in progress. */
struct par {
	struct par *next_par;
	dcr_wq_par_fn fn;
	void *arg;
	size_t n;
	struct dcr_errscope *scope; /* the caller's, for its helpers */
	atomic_size_t next; /* the next index to claim */
	int seats;          /* workers that may still join */
	int helpers;        /* workers in it now */
};

struct dcr_wq {
	struct dcr_wq_opts o;
	pthread_mutex_t lock;
	pthread_cond_t work, done;
	struct job *ring; /* o.max_items */
	size_t head, len;
	uint64_t cost;    /* of the queued jobs */
	int busy;         /* jobs running */
	struct par *pars;
	pthread_t *th;    /* o.threads */
	int nth;
	unsigned started; /* threads created */
	bool starting;    /* the workers were started (or tried) */
	bool stopping, dropping;
};

/* The queue whose worker this thread is (dcr_wq_submit must not wait
 * for room in it). */
static __thread struct dcr_wq *tl_self;

/* Take the oldest queued job. Under q->lock, with q->len > 0. */
static struct job pop_locked(struct dcr_wq *q)
{
	struct job j = q->ring[q->head];

	q->head = (q->head + 1) % q->o.max_items;
	q->len--;
	q->cost -= j.cost;
	return j;
}

/* Claim and run indices of @p until none is left. */
static void par_run(struct par *p)
{
	size_t i;

	while ((i = atomic_fetch_add(&p->next, 1)) < p->n)
		p->fn(p->arg, i);
}

/* A listed loop a worker can help with, or NULL. Under q->lock. */
static struct par *par_pick(struct dcr_wq *q)
{
	for (struct par *p = q->pars; p; p = p->next_par)
		if (p->seats > 0 && atomic_load(&p->next) < p->n)
			return p;
	return NULL;
}

static void *worker_main(void *arg)
{
	struct dcr_wq *q = arg;
	void *ws = NULL;

	tl_self = q;
	if (q->o.on_start)
		ws = q->o.on_start(q->o.ctx);
	pthread_mutex_lock(&q->lock);
	for (;;) {
		struct par *p = par_pick(q);
		struct job j;

		if (p) {
			p->seats--;
			p->helpers++;
			pthread_mutex_unlock(&q->lock);
			struct dcr_errscope *was = dcr_errscope_adopt(p->scope);
			par_run(p);
			dcr_errscope_adopt(was);
			pthread_mutex_lock(&q->lock);
			if (--p->helpers == 0)
				pthread_cond_broadcast(&q->done);
			continue;
		}
		if (q->len && !q->dropping) {
			j = pop_locked(q);
			q->busy++;
			pthread_cond_broadcast(&q->done); /* room: submit */
			pthread_mutex_unlock(&q->lock);
			struct dcr_errscope *was = dcr_errscope_adopt(j.scope);
			j.fn(q->o.ctx, ws, j.arg);
			dcr_errscope_adopt(was);
			dcr_errscope_put(j.scope);
			pthread_mutex_lock(&q->lock);
			if (--q->busy == 0 && !q->len)
				pthread_cond_broadcast(&q->done); /* wait_idle */
			continue;
		}
		if (q->stopping)
			break;
		pthread_cond_wait(&q->work, &q->lock);
	}
	pthread_mutex_unlock(&q->lock);
	if (q->o.on_stop)
		q->o.on_stop(q->o.ctx, ws);
	return NULL;
}

int dcr_wq_create(const struct dcr_wq_opts *o, struct dcr_wq **out)
{
	struct dcr_wq *q;

	*out = NULL;
	if (!o || o->threads < 1 || o->max_items < 1)
		return DCR_ERR(-EINVAL);
	q = calloc(1, sizeof(*q));
	if (!q)
		return DCR_ERR(-ENOMEM);
	q->o = *o;
	if (!q->o.name)
		q->o.name = "wq";
	q->ring = calloc(o->max_items, sizeof(*q->ring));
	q->th = calloc((size_t)o->threads, sizeof(*q->th));
	if (!q->ring || !q->th) {
		free(q->ring);
		free(q->th);
		free(q);
		return DCR_ERR(-ENOMEM);
	}
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->work, NULL);
	pthread_cond_init(&q->done, NULL);
	*out = q;
	return 0;
}

/* Start the workers on first use: whether there are any. Under lock. */
static bool start_locked(struct dcr_wq *q)
{
	if (!q->starting && !q->stopping) {
		sigset_t all, old;

		q->starting = true;
		sigfillset(&all);
		pthread_sigmask(SIG_BLOCK, &all, &old); /* the workers inherit it */
		while (q->nth < q->o.threads) {
			int ret = pthread_create(&q->th[q->nth], NULL,
						 worker_main, q);

			if (ret) {
				dcr_warn("%s: cannot start a thread: %s",
					 q->o.name, dcr_strerror(-ret));
				break;
			}
#ifdef __GLIBC__
			{
				char name[16];

				snprintf(name, sizeof(name), "%s", q->o.name);
				pthread_setname_np(q->th[q->nth], name);
			}
#endif
			q->nth++;
			q->started++;
		}
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	return q->nth > 0 && !q->stopping;
}

/* Whether a job of @cost fits now. Under lock. */
static bool fits(const struct dcr_wq *q, uint64_t cost)
{
	if (q->len == q->o.max_items)
		return false;
	return !q->o.max_cost || !q->len || q->cost + cost <= q->o.max_cost;
}

static bool submit(struct dcr_wq *q, dcr_wq_fn fn, void *arg, uint64_t cost,
		   bool wait)
{
	struct dcr_errscope *scope = dcr_errscope_get(); /* not under the lock */
	bool ok;

	pthread_mutex_lock(&q->lock);
	while ((ok = start_locked(q)) && !fits(q, cost) && wait &&
	       tl_self != q)
		pthread_cond_wait(&q->done, &q->lock);
	ok = ok && fits(q, cost);
	if (ok) {
		q->ring[(q->head + q->len) % q->o.max_items] =
			(struct job){ fn, arg, cost, scope };
		q->len++;
		q->cost += cost;
		pthread_cond_signal(&q->work);
	}
	pthread_mutex_unlock(&q->lock);
	if (!ok)
		dcr_errscope_put(scope);
	return ok;
}

bool dcr_wq_try_submit(struct dcr_wq *q, dcr_wq_fn fn, void *arg,
		       uint64_t cost)
{
	return submit(q, fn, arg, cost, false);
}

bool dcr_wq_submit(struct dcr_wq *q, dcr_wq_fn fn, void *arg, uint64_t cost)
{
	return submit(q, fn, arg, cost, true);
}

void dcr_wq_wait_idle(struct dcr_wq *q)
{
	pthread_mutex_lock(&q->lock);
	while (q->len || q->busy)
		pthread_cond_wait(&q->done, &q->lock);
	pthread_mutex_unlock(&q->lock);
}

bool dcr_wq_idle(struct dcr_wq *q)
{
	bool idle;

	if (!q)
		return true;
	pthread_mutex_lock(&q->lock);
	idle = !q->len && !q->busy;
	pthread_mutex_unlock(&q->lock);
	return idle;
}

void dcr_wq_par_for(struct dcr_wq *q, int max_threads, size_t n,
		    dcr_wq_par_fn fn, void *arg)
{
	struct par p = { .fn = fn, .arg = arg, .n = n };
	bool listed = false;

	atomic_init(&p.next, 0);
	if (q && max_threads > 1 && n > 1) {
		p.scope = dcr_errscope_get();
		pthread_mutex_lock(&q->lock);
		if (start_locked(q)) {
			p.seats = (int)DCR_MIN((size_t)max_threads - 1, n - 1);
			p.next_par = q->pars;
			q->pars = &p;
			listed = true;
			for (int i = 0; i < p.seats; i++)
				pthread_cond_signal(&q->work);
		}
		pthread_mutex_unlock(&q->lock);
	}
	par_run(&p);
	if (!listed) {
		dcr_errscope_put(p.scope);
		return;
	}
	pthread_mutex_lock(&q->lock);
	for (struct par **pp = &q->pars; *pp; pp = &(*pp)->next_par) {
		if (*pp == &p) {
			*pp = p.next_par;
			break;
		}
	}
	while (p.helpers)
		pthread_cond_wait(&q->done, &q->lock);
	pthread_mutex_unlock(&q->lock);
	dcr_errscope_put(p.scope);
}

void dcr_wq_stop(struct dcr_wq *q, bool drop)
{
	int nth;

	if (!q)
		return;
	pthread_mutex_lock(&q->lock);
	q->stopping = true;
	q->dropping = q->dropping || drop;
	nth = q->nth; /* 0 when stopped already */
	q->nth = 0;
	pthread_cond_broadcast(&q->work);
	pthread_cond_broadcast(&q->done); /* dcr_wq_submit waiting for room */
	/* Dropped jobs are handed to o.drop outside the lock. */
	while (q->dropping && q->len) {
		struct job j = pop_locked(q);

		pthread_mutex_unlock(&q->lock);
		if (q->o.drop)
			q->o.drop(q->o.ctx, j.arg);
		dcr_errscope_put(j.scope);
		pthread_mutex_lock(&q->lock);
	}
	pthread_mutex_unlock(&q->lock);
	for (int i = 0; i < nth; i++)
		pthread_join(q->th[i], NULL);
	pthread_mutex_lock(&q->lock);
	pthread_cond_broadcast(&q->done); /* dcr_wq_wait_idle */
	pthread_mutex_unlock(&q->lock);
}

void dcr_wq_free(struct dcr_wq *q)
{
	if (!q)
		return;
	dcr_wq_stop(q, false);
	pthread_cond_destroy(&q->done);
	pthread_cond_destroy(&q->work);
	pthread_mutex_destroy(&q->lock);
	free(q->th);
	free(q->ring);
	free(q);
}

unsigned dcr_wq_threads_started(struct dcr_wq *q)
{
	unsigned n;

	pthread_mutex_lock(&q->lock);
	n = q->started;
	pthread_mutex_unlock(&q->lock);
	return n;
}
