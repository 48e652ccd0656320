/* SPDX-License-Identifier: MIT */
/*
 * test_wq.c - the bounded work queue (core/wq.h): full queues, waiting
 * for idle, stop draining or dropping, par_for's coverage, concurrency
 * and thread reuse, and jobs that submit to their own queue. Every test
 * that could hang arms alarm(2), so a deadlock fails instead of hanging.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "wq.h"

#define DEADLOCK_S 20

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* Poll @v until it reaches @want or ~5 s pass: whether it did. */
static bool wait_for(atomic_int *v, int want)
{
	for (int i = 0; i < 5000; i++) {
		if (atomic_load(v) >= want)
			return true;
		sleep_ms(1);
	}
	return false;
}

/* A gate jobs can block on until the test opens it. */
struct gate {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool open;
	atomic_int waiting; /* jobs blocked on it */
	atomic_int ran;     /* jobs that passed it */
};

static void gate_init(struct gate *g)
{
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->cond, NULL);
	g->open = false;
	atomic_init(&g->waiting, 0);
	atomic_init(&g->ran, 0);
}

static void gate_open(struct gate *g)
{
	pthread_mutex_lock(&g->lock);
	g->open = true;
	pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->lock);
}

static void gate_job(void *ctx, void *ws, void *arg)
{
	(void)ctx;
	struct gate *g = arg;

	atomic_fetch_add(&g->waiting, 1);
	pthread_mutex_lock(&g->lock);
	while (!g->open)
		pthread_cond_wait(&g->cond, &g->lock);
	pthread_mutex_unlock(&g->lock);
	atomic_fetch_add(&g->ran, 1);
}

static void count_job(void *ctx, void *ws, void *arg)
{
	(void)ctx;
	atomic_fetch_add((atomic_int *)arg, 1);
}

static void slow_count_job(void *ctx, void *ws, void *arg)
{
	(void)ctx;
	sleep_ms(2);
	atomic_fetch_add((atomic_int *)arg, 1);
}

static struct dcr_wq *mkq(int threads, size_t items, uint64_t cost)
{
	struct dcr_wq_opts o = { .name = "test", .threads = threads,
				 .max_items = items, .max_cost = cost };
	struct dcr_wq *q;

	assert_int_equal(dcr_wq_create(&o, &q), 0);
	return q;
}

static void test_create_invalid(void **state)
{
	struct dcr_wq_opts o = { .threads = 0, .max_items = 1 };
	struct dcr_wq *q = (struct dcr_wq *)1;

	(void)state;
	assert_int_equal(dcr_wq_create(&o, &q), -EINVAL);
	assert_null(q);
	o.threads = 1;
	o.max_items = 0;
	assert_int_equal(dcr_wq_create(&o, &q), -EINVAL);
	dcr_wq_free(NULL);
}

/* A full queue refuses (the caller does the work); by count and cost. */
static void test_full_refuses(void **state)
{
	struct dcr_wq *q = mkq(1, 2, 10);
	struct gate g;
	atomic_int n;

	(void)state;
	alarm(DEADLOCK_S);
	gate_init(&g);
	atomic_init(&n, 0);
	assert_int_equal(dcr_wq_threads_started(q), 0); /* lazily */
	assert_true(dcr_wq_try_submit(q, gate_job, &g, 0));
	assert_true(wait_for(&g.waiting, 1)); /* the one worker is busy */
	assert_int_equal(dcr_wq_threads_started(q), 1);
	assert_true(dcr_wq_try_submit(q, count_job, &n, 6));
	assert_false(dcr_wq_try_submit(q, count_job, &n, 6)); /* cost */
	assert_true(dcr_wq_try_submit(q, count_job, &n, 4));
	assert_false(dcr_wq_try_submit(q, count_job, &n, 0)); /* items */
	sleep_ms(20);
	assert_int_equal(atomic_load(&n), 0); /* nothing ran past the gate */
	gate_open(&g);
	dcr_wq_wait_idle(q);
	assert_int_equal(atomic_load(&n), 2);
	/* A job costing more than the budget alone goes in an empty queue. */
	assert_true(dcr_wq_try_submit(q, count_job, &n, 100));
	dcr_wq_wait_idle(q);
	assert_int_equal(atomic_load(&n), 3);
	dcr_wq_free(q);
	alarm(0);
}

static void test_wait_idle(void **state)
{
	struct dcr_wq *q = mkq(3, 64, 0);
	atomic_int n;
	int queued = 0;

	(void)state;
	alarm(DEADLOCK_S);
	atomic_init(&n, 0);
	dcr_wq_wait_idle(q); /* never started: idle */
	for (int i = 0; i < 200; i++) {
		if (dcr_wq_try_submit(q, slow_count_job, &n, 0))
			queued++;
		else
			slow_count_job(NULL, NULL, &n);
	}
	assert_true(queued > 0);
	dcr_wq_wait_idle(q);
	assert_int_equal(atomic_load(&n), 200);
	dcr_wq_free(q);
	alarm(0);
}

/* dcr_wq_submit waits for room instead of refusing. */
struct sub_arg {
	struct dcr_wq *q;
	atomic_int *n;
	atomic_int returned;
	bool ok;
};

static void *submitter_main(void *arg)
{
	struct sub_arg *a = arg;

	a->ok = dcr_wq_submit(a->q, count_job, a->n, 0);
	atomic_store(&a->returned, 1);
	return NULL;
}

static void test_submit_waits(void **state)
{
	struct dcr_wq *q = mkq(1, 1, 0);
	struct sub_arg a = { .q = q };
	struct gate g;
	atomic_int n;
	pthread_t th;

	(void)state;
	alarm(DEADLOCK_S);
	gate_init(&g);
	atomic_init(&n, 0);
	atomic_init(&a.returned, 0);
	a.n = &n;
	assert_true(dcr_wq_submit(q, gate_job, &g, 0));
	assert_true(wait_for(&g.waiting, 1));
	assert_true(dcr_wq_submit(q, count_job, &n, 0)); /* fills it */
	assert_int_equal(pthread_create(&th, NULL, submitter_main, &a), 0);
	sleep_ms(50);
	assert_int_equal(atomic_load(&a.returned), 0); /* still waiting */
	gate_open(&g);
	pthread_join(th, NULL);
	assert_true(a.ok);
	dcr_wq_wait_idle(q);
	assert_int_equal(atomic_load(&n), 2);
	dcr_wq_free(q);
	alarm(0);
}

/* stop(false) runs what is queued; submits then refuse. */
static void test_stop_drains(void **state)
{
	struct dcr_wq *q = mkq(2, 100, 0);
	atomic_int n;

	(void)state;
	alarm(DEADLOCK_S);
	atomic_init(&n, 0);
	for (int i = 0; i < 100; i++)
		assert_true(dcr_wq_try_submit(q, slow_count_job, &n, 0));
	dcr_wq_stop(q, false);
	assert_int_equal(atomic_load(&n), 100);
	assert_false(dcr_wq_try_submit(q, count_job, &n, 0));
	assert_false(dcr_wq_submit(q, count_job, &n, 0));
	dcr_wq_stop(q, true); /* idempotent */
	dcr_wq_wait_idle(q);
	dcr_wq_free(q);
	alarm(0);
}

/* stop(true) hands queued jobs to the drop hook without running them. */
static atomic_int dropped;

static void drop_hook(void *ctx, void *arg)
{
	(void)ctx;
	(void)arg;
	atomic_fetch_add(&dropped, 1);
}

static void *stopper_main(void *arg)
{
	dcr_wq_stop(arg, true);
	return NULL;
}

static void test_stop_drops(void **state)
{
	struct dcr_wq_opts o = { .name = "drop", .threads = 1,
				 .max_items = 8, .drop = drop_hook };
	struct dcr_wq *q;
	struct gate g;
	atomic_int n;
	pthread_t th;

	(void)state;
	alarm(DEADLOCK_S);
	atomic_init(&dropped, 0);
	atomic_init(&n, 0);
	gate_init(&g);
	assert_int_equal(dcr_wq_create(&o, &q), 0);
	assert_true(dcr_wq_try_submit(q, gate_job, &g, 0));
	assert_true(wait_for(&g.waiting, 1));
	for (int i = 0; i < 5; i++)
		assert_true(dcr_wq_try_submit(q, count_job, &n, 0));
	assert_int_equal(pthread_create(&th, NULL, stopper_main, q), 0);
	/* The running job finishes; the queued ones are dropped while it
	 * still runs, so none of them can have run. */
	assert_true(wait_for(&dropped, 5));
	gate_open(&g);
	pthread_join(th, NULL);
	assert_int_equal(atomic_load(&g.ran), 1);
	assert_int_equal(atomic_load(&n), 0);
	assert_int_equal(atomic_load(&dropped), 5);
	assert_false(dcr_wq_try_submit(q, count_job, &n, 0));
	dcr_wq_free(q);
	alarm(0);
}

/* on_start runs once in each worker, before its jobs, and hands it its
 * own state; every job that worker runs gets that state; on_stop gets
 * it back once when the worker exits. */
struct wstate {
	int magic;
	pthread_t self;
};
static atomic_int starts, stops;

static void *on_start(void *ctx)
{
	struct wstate *w = malloc(sizeof(*w));

	if (w && ctx == &starts) {
		w->magic = 0x5eed;
		w->self = pthread_self();
	}
	atomic_fetch_add(&starts, 1);
	return w;
}

static void on_stop(void *ctx, void *ws)
{
	struct wstate *w = ws;

	if (w && w->magic == 0x5eed && ctx == &starts &&
	    pthread_equal(w->self, pthread_self()))
		atomic_fetch_add(&stops, 1);
	free(w);
}

static void setup_job(void *ctx, void *ws, void *arg)
{
	struct wstate *w = ws;

	(void)ctx;
	if (!w || w->magic != 0x5eed || !pthread_equal(w->self, pthread_self()))
		atomic_fetch_add((atomic_int *)arg, 1);
}

static void test_on_start_stop(void **state)
{
	struct dcr_wq_opts o = { .name = "init", .threads = 3,
				 .max_items = 64, .on_start = on_start,
				 .on_stop = on_stop, .ctx = &starts };
	struct dcr_wq *q;
	atomic_int bad;

	(void)state;
	alarm(DEADLOCK_S);
	atomic_init(&starts, 0);
	atomic_init(&stops, 0);
	atomic_init(&bad, 0);
	assert_int_equal(dcr_wq_create(&o, &q), 0);
	for (int i = 0; i < 50; i++)
		assert_true(dcr_wq_submit(q, setup_job, &bad, 0));
	dcr_wq_wait_idle(q);
	assert_int_equal(atomic_load(&bad), 0);
	assert_int_equal(atomic_load(&stops), 0);
	dcr_wq_free(q);
	assert_int_equal(atomic_load(&starts), 3);
	assert_int_equal(atomic_load(&stops), 3);
	alarm(0);
}

/* ------------------------------------------------------------ par_for */

struct cover {
	atomic_int *hits;
	size_t n;
};

static void cover_fn(void *arg, size_t i)
{
	struct cover *c = arg;

	if (i < c->n) /* else check_cover sees an index missing */
		atomic_fetch_add(&c->hits[i], 1);
}

/* Whether par_for ran every index of [0, @n) once (no cmocka asserts:
 * this also runs outside the test's thread). */
static bool cover(struct dcr_wq *q, int max_threads, size_t n)
{
	struct cover c = { calloc(n ? n : 1, sizeof(atomic_int)), n };
	bool ok = c.hits != NULL;

	dcr_wq_par_for(q, max_threads, ok ? n : 0, cover_fn, &c);
	for (size_t i = 0; ok && i < n; i++)
		ok = atomic_load(&c.hits[i]) == 1;
	free(c.hits);
	return ok;
}

static void check_cover(struct dcr_wq *q, int max_threads, size_t n)
{
	assert_true(cover(q, max_threads, n));
}

/* Every index exactly once, more indexes than threads; no thread per
 * call. */
static void test_par_for_cover(void **state)
{
	struct dcr_wq *q = mkq(3, 4, 0);

	(void)state;
	alarm(DEADLOCK_S);
	check_cover(q, 4, 0);
	check_cover(q, 4, 1);
	check_cover(q, 4, 10007);
	check_cover(q, 2, 333);
	check_cover(q, 64, 1000); /* more than the pool has */
	check_cover(q, 1, 50);    /* the caller alone */
	check_cover(NULL, 4, 50);
	for (int i = 0; i < 1000; i++)
		check_cover(q, 4, 17);
	/* The pool's three workers, created once, served all of them. */
	assert_int_equal(dcr_wq_threads_started(q), 3);
	dcr_wq_stop(q, false);
	check_cover(q, 4, 100); /* stopped: the caller alone */
	assert_int_equal(dcr_wq_threads_started(q), 3);
	dcr_wq_free(q);
	alarm(0);
}

/* With idle workers, par_for runs max_threads bodies at once (a fetch
 * blocked on the network does not serialise the others): each body
 * waits until all four have arrived. */
struct rendezvous {
	atomic_int arrived;
	atomic_int met;
	int want;
};

static void meet_fn(void *arg, size_t i)
{
	struct rendezvous *rz = arg;

	(void)i;
	atomic_fetch_add(&rz->arrived, 1);
	if (wait_for(&rz->arrived, rz->want))
		atomic_fetch_add(&rz->met, 1);
}

static void test_par_for_concurrency(void **state)
{
	struct dcr_wq *q = mkq(3, 4, 0);
	struct rendezvous rz = { .want = 4 };

	(void)state;
	alarm(DEADLOCK_S);
	atomic_init(&rz.arrived, 0);
	atomic_init(&rz.met, 0);
	dcr_wq_par_for(q, 4, 4, meet_fn, &rz);
	assert_int_equal(atomic_load(&rz.met), 4);
	dcr_wq_free(q);
	alarm(0);
}

/* Several threads call par_for on one pool at once. */
static void *par_caller_main(void *arg)
{
	for (int k = 0; k < 100; k++)
		if (!cover(arg, 3, 257))
			return arg;
	return NULL;
}

static void test_par_for_concurrent_callers(void **state)
{
	struct dcr_wq *q = mkq(2, 4, 0);
	pthread_t th[4];

	(void)state;
	alarm(DEADLOCK_S);
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&th[i], NULL, par_caller_main,
						q), 0);
	for (int i = 0; i < 4; i++) {
		void *bad;

		pthread_join(th[i], &bad);
		assert_null(bad);
	}
	assert_int_equal(dcr_wq_threads_started(q), 2);
	dcr_wq_free(q);
	alarm(0);
}

/* --------------------------------------------- jobs using their queue */

struct self_arg {
	struct dcr_wq *q;
	atomic_int n;
	atomic_int inline_runs;
	bool first_ok;
};

static void self_leaf(void *ctx, void *ws, void *arg)
{
	(void)ctx;
	struct self_arg *a = arg;

	atomic_fetch_add(&a->n, 1);
}

static void self_par(void *arg, size_t i)
{
	(void)i;
	self_leaf(NULL, NULL, arg);
}

/* On the only worker of a queue of one item: queue one job (room), then
 * a second with the blocking submit (full, and only we could make
 * room): it must refuse instead of deadlocking, and we run it here. A
 * par_for on the same queue must not wait for its busy worker. */
static void self_job(void *ctx, void *ws, void *arg)
{
	(void)ctx;
	struct self_arg *a = arg;

	a->first_ok = dcr_wq_submit(a->q, self_leaf, a, 0);
	if (!dcr_wq_submit(a->q, self_leaf, a, 0)) {
		atomic_fetch_add(&a->inline_runs, 1);
		self_leaf(NULL, NULL, a);
	}
	dcr_wq_par_for(a->q, 4, 10, self_par, a);
}

static void test_job_submits_to_own_queue(void **state)
{
	struct self_arg a;

	(void)state;
	alarm(DEADLOCK_S);
	a.q = mkq(1, 1, 0);
	atomic_init(&a.n, 0);
	atomic_init(&a.inline_runs, 0);
	assert_true(dcr_wq_try_submit(a.q, self_job, &a, 0));
	dcr_wq_wait_idle(a.q);
	assert_true(a.first_ok);
	assert_int_equal(atomic_load(&a.inline_runs), 1);
	assert_int_equal(atomic_load(&a.n), 12);
	dcr_wq_free(a.q);
	alarm(0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_invalid),
		cmocka_unit_test(test_full_refuses),
		cmocka_unit_test(test_wait_idle),
		cmocka_unit_test(test_submit_waits),
		cmocka_unit_test(test_stop_drains),
		cmocka_unit_test(test_stop_drops),
		cmocka_unit_test(test_on_start_stop),
		cmocka_unit_test(test_par_for_cover),
		cmocka_unit_test(test_par_for_concurrency),
		cmocka_unit_test(test_par_for_concurrent_callers),
		cmocka_unit_test(test_job_submits_to_own_queue),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
