/* SPDX-License-Identifier: MIT */
/*
 * handles.c - the handles (fi->fh) of files whose open state lives in
 * the daemon's memory: /.dcrfs/status.json and metrics (a snapshot),
 * /.dcrfs/latest (its waiters), /delta's files (fs.h, dcrfs_fh_put).
 *
 * A handle is a slot of this table with the process's generation in its
 * high bits, never a pointer: the kernel keeps a file's handle across a
 * restart after a crash (fs/handover.h), and a restarted daemon must
 * know a dead one's handle for a stranger, not dereference it. The
 * generation is random per process (0x7fffffff values), so a handle of
 * a dead daemon whose slot number exists here is refused all the same
 * (but for a chance of 1 in 2^31).
 *
 * Layout: bits 0..31 the slot + 1, bit 32 clear (the version files'
 * DCRFS_FH_PASSTHROUGH), bits 33..63 the generation.
 *
 * Locking: one mutex, a leaf, held only within these functions.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "fs.h"

static pthread_mutex_t h_lock = PTHREAD_MUTEX_INITIALIZER;
static void **h_tab;       /* by slot; NULL: free */
static size_t h_n, h_cap;  /* slots used so far, allocated */
static size_t *h_free;     /* free slots, a stack */
static size_t h_nfree;
static uint64_t h_gen;     /* 1..2^31-1, once per process */

static uint64_t gen(void)
{
	uint32_t r = 0;

	if (!h_gen) {
		if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r))
			r = (uint32_t)getpid() ^ (uint32_t)time(NULL);
		r &= 0x7fffffffu;
		h_gen = r ? r : 1;
	}
	return h_gen;
}

uint64_t dcrfs_fh_put(void *p)
{
	size_t slot;
	uint64_t fh = 0;

	pthread_mutex_lock(&h_lock);
	if (h_nfree) {
		slot = h_free[--h_nfree];
	} else {
		if (h_n == h_cap) {
			size_t cap = h_cap ? 2 * h_cap : 64;
			void **t = realloc(h_tab, cap * sizeof(*t));
			size_t *f = t ? realloc(h_free, cap * sizeof(*f)) : NULL;

			if (t)
				h_tab = t;
			if (!t || !f || cap > UINT32_MAX - 1)
				goto out;
			h_free = f;
			h_cap = cap;
		}
		slot = h_n++;
	}
	h_tab[slot] = p;
	fh = (gen() << 33) | (uint64_t)(slot + 1);
out:
	pthread_mutex_unlock(&h_lock);
	return fh;
}

/* The slot of @fh, or -1 for a stranger. Caller holds h_lock. */
static ssize_t slot_of(uint64_t fh)
{
	uint64_t slot = (fh & 0xffffffffu);

	if ((fh >> 33) != gen() || (fh & (UINT64_C(1) << 32)) || !slot ||
	    slot > h_n || !h_tab[slot - 1])
		return -1;
	return (ssize_t)(slot - 1);
}

void *dcrfs_fh_get(uint64_t fh)
{
	void *p = NULL;
	ssize_t s;

	pthread_mutex_lock(&h_lock);
	s = slot_of(fh);
	if (s >= 0)
		p = h_tab[s];
	pthread_mutex_unlock(&h_lock);
	return p;
}

void *dcrfs_fh_take(uint64_t fh)
{
	void *p = NULL;
	ssize_t s;

	pthread_mutex_lock(&h_lock);
	s = slot_of(fh);
	if (s >= 0) {
		p = h_tab[s];
		h_tab[s] = NULL;
		h_free[h_nfree++] = (size_t)s;
	}
	pthread_mutex_unlock(&h_lock);
	return p;
}

void dcrfs_fh_stranger(const char *what)
{
	static int said;

	if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
		dcr_warn("%s: a handle this daemon did not give (the file was "
			 "opened before a restart after a crash): answered "
			 "EIO; open the file again", what);
}
