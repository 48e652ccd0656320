/* SPDX-License-Identifier: MIT */
/*
 * benchutil.h - helpers shared by the benchmark programs in tests/bench
 * (not part of the build of dcrfs itself): a CPU clock of the calling
 * thread and an allocation that exits with a message on failure.
 */
#ifndef DCR_BENCHUTIL_H
#define DCR_BENCHUTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Seconds of CPU this thread has used. */
static inline double bench_cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* malloc(@n) (at least one byte), or exit with a message naming @prog. */
static inline void *bench_xmalloc(const char *prog, size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p) {
		fprintf(stderr, "%s: out of memory (%zu bytes)\n", prog, n);
		exit(1);
	}
	return p;
}

#endif /* DCR_BENCHUTIL_H */
