/* SPDX-License-Identifier: MIT */
/*
 * wq.h - the one bounded work queue (a thread pool) every parallel job
 * uses (after zstd's lib/common/pool.h and erofs-utils' lib/workqueue.c).
 *
 * A queue holds up to max_items jobs (and, optionally, at most max_cost
 * of their cost, e.g. bytes) for its workers, which are started on first
 * use and live until dcr_wq_stop. A submitter that finds the queue full
 * either does the work itself (dcr_wq_try_submit: the slowest stage sets
 * the pace) or waits for room (dcr_wq_submit: a producer/consumer
 * pipeline). dcr_wq_par_for runs a loop on the caller and idle workers;
 * it creates no thread per call.
 *
 * Locks: each queue has one internal mutex, a leaf: no callback (job,
 * on_start, drop) runs while it is held, so callers may hold their own
 * locks while submitting.
 */
#ifndef DCR_WQ_H
#define DCR_WQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct dcr_wq;

/** A job: runs once on a worker (or, when not queued, wherever the
 * submitter runs it); @ctx is the queue's opts.ctx, @ws the state the
 * running worker's on_start returned (NULL without on_start, when it
 * failed, or when the submitter runs the job itself: a job that needs
 * state must cope with NULL). */
typedef void (*dcr_wq_fn)(void *ctx, void *ws, void *arg);

/** The body of dcr_wq_par_for, called once for each index @i. */
typedef void (*dcr_wq_par_fn)(void *arg, size_t i);

/** How a queue is made (see dcr_wq_create). */
struct dcr_wq_opts {
	/** For thread names and log lines (not copied; up to 15 chars
	 * are shown). */
	const char *name;
	/** Workers, at least 1. */
	int threads;
	/** Jobs queued and not yet started, at least 1. */
	size_t max_items;
	/** Total cost of the jobs queued and not yet started; 0: no
	 * budget. A job costing more than the budget alone is taken only
	 * when nothing is queued. */
	uint64_t max_cost;
	/** Run by each worker once, when it starts: returns that
	 * worker's own state (scratch buffers, a codec), handed to every
	 * job it runs as @ws (after erofs-utils' workqueue); NULL if it
	 * has none or could not make it. NULL: none. */
	void *(*on_start)(void *ctx);
	/** Run by each worker once, last, when it exits at dcr_wq_stop,
	 * with what on_start returned (to free it); NULL: none. */
	void (*on_stop)(void *ctx, void *ws);
	/** Called with the arg of each job dropped by dcr_wq_stop(q,
	 * true) (to free it), on the stopping thread; NULL: none. */
	void (*drop)(void *ctx, void *arg);
	/** Passed to on_start, on_stop, drop and every job. */
	void *ctx;
};

/**
 * dcr_wq_create - make a queue described by @o (the struct is copied).
 * No thread is started yet. Returns 0 and *@out, or -EINVAL / -ENOMEM.
 * Free with dcr_wq_free.
 */
int dcr_wq_create(const struct dcr_wq_opts *o, struct dcr_wq **out);

/**
 * dcr_wq_try_submit - queue @fn(ctx, @arg), which costs @cost, without
 * waiting. Starts the workers on first use. Returns true if queued
 * (@arg then belongs to the job until it runs, or is dropped); false if
 * the queue is full, over its cost budget, stopping, or no worker could
 * be started: the caller then runs the work itself. Thread-safe, and
 * safe from inside a job of @q.
 */
bool dcr_wq_try_submit(struct dcr_wq *q, dcr_wq_fn fn, void *arg,
		       uint64_t cost);

/**
 * dcr_wq_submit - as dcr_wq_try_submit, but waits for room when the
 * queue is full. Returns false only when @q is stopping or has no
 * workers, or when called from a job of @q itself with the queue full
 * (waiting there could deadlock). Stages of a pipeline that wait must
 * submit one way only (A's jobs to B, never B's to A). Thread-safe.
 */
bool dcr_wq_submit(struct dcr_wq *q, dcr_wq_fn fn, void *arg, uint64_t cost);

/**
 * dcr_wq_wait_idle - wait until nothing is queued and no job is
 * running. Jobs submitted meanwhile are waited for too. Thread-safe;
 * never call it from a job of @q.
 */
void dcr_wq_wait_idle(struct dcr_wq *q);

/** dcr_wq_idle - true if nothing is queued and no job is running now
 * (a snapshot; NULL is idle). Thread-safe. */
bool dcr_wq_idle(struct dcr_wq *q);

/**
 * dcr_wq_par_for - run @fn(@arg, i) for every i in [0, @n), each once,
 * on the caller and up to @max_threads - 1 idle workers of @q, and
 * return when all are done. Workers are shared: when all are busy the
 * caller does everything itself, so it never waits for a job that has
 * not started and may be called from anywhere, from inside a job of @q
 * or concurrently from several threads. With @q NULL, @max_threads <= 1
 * or @n <= 1 it is a plain loop. Starts the workers on first use.
 */
void dcr_wq_par_for(struct dcr_wq *q, int max_threads, size_t n,
		    dcr_wq_par_fn fn, void *arg);

/**
 * dcr_wq_stop - stop accepting jobs (submits return false, par_for runs
 * on the caller alone), finish the running ones and either run the
 * queued ones too (@drop false) or hand each to opts.drop without
 * running it (@drop true); then join the workers. Idempotent; NULL is
 * fine; not from a job of @q. Thread-safe against submitters.
 */
void dcr_wq_stop(struct dcr_wq *q, bool drop);

/**
 * dcr_wq_free - dcr_wq_stop(@q, false) unless stopped, then free @q.
 * NULL is fine. No other call on @q may be in progress or follow.
 */
void dcr_wq_free(struct dcr_wq *q);

/**
 * dcr_wq_threads_started - how many workers @q has created over its
 * life (it creates each once; for statistics and tests). Thread-safe.
 */
unsigned dcr_wq_threads_started(struct dcr_wq *q);

#endif /* DCR_WQ_H */
