/* SPDX-License-Identifier: MIT */
/*
 * bench_fill - what filling a new file's page cache costs, per way of
 * writing it (issue 31: the one-copy path). Each of THREADS threads takes
 * the next CHUNK of SRC (which should be in the page cache, as a base
 * slab is), and puts it at the same offset of a new file DST:
 *
 *   write     pread into a buffer, pwrite from it (two copies; the
 *             kernel holds DST's inode lock across each pwrite)
 *   map       mmap the chunk's range of DST, pread into it, munmap
 *             (one copy; a mapping made and torn down per chunk)
 *   populate  one shared mapping of all of DST (fallocated), made
 *             once; per chunk MADV_POPULATE_WRITE, then pread into it
 *             (one copy, plus the kernel's zeroing of each new page)
 *
 * It prints the process's CPU seconds (user + system) and the wall
 * time for each; compare CPU against `openssl dgst -sha256 SRC` on the
 * same machine, and the modes against each other in the same run.
 *
 *   bench_fill SRC DST write|map|populate [THREADS] [CHUNK_KIB]
 *
 * THREADS defaults to the CPUs this process may use, CHUNK_KIB to 1024.
 * DST is created (truncated) and removed at the end.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum mode { M_WRITE, M_MAP, M_POPULATE };

static struct {
	int src, dst;
	enum mode mode;
	size_t chunk;
	uint64_t nchunks;
	uint8_t *whole; /* populate: the mapping of DST */
	atomic_uint_fast64_t next;
	atomic_int failed;
} g;

static void *run(void *arg)
{
	uint8_t *buf = NULL;

	(void)arg;
	if (g.mode == M_WRITE &&
	    posix_memalign((void **)&buf, 4096, g.chunk)) {
		atomic_store(&g.failed, ENOMEM);
		return NULL;
	}
	for (;;) {
		uint64_t i = atomic_fetch_add(&g.next, 1);
		off_t off = (off_t)(i * g.chunk);
		uint8_t *m;

		if (i >= g.nchunks)
			break;
		switch (g.mode) {
		case M_WRITE:
			if (pread(g.src, buf, g.chunk, off) != (ssize_t)g.chunk ||
			    pwrite(g.dst, buf, g.chunk, off) != (ssize_t)g.chunk)
				atomic_store(&g.failed, errno);
			break;
		case M_MAP:
			m = mmap(NULL, g.chunk, PROT_READ | PROT_WRITE,
				 MAP_SHARED, g.dst, off);
			if (m == MAP_FAILED) {
				atomic_store(&g.failed, errno);
				break;
			}
			if (pread(g.src, m, g.chunk, off) != (ssize_t)g.chunk)
				atomic_store(&g.failed, errno);
			munmap(m, g.chunk);
			break;
		case M_POPULATE:
			m = g.whole + off;
			if (madvise(m, g.chunk, MADV_POPULATE_WRITE) < 0 ||
			    pread(g.src, m, g.chunk, off) != (ssize_t)g.chunk)
				atomic_store(&g.failed, errno);
			break;
		}
	}
	free(buf);
	return NULL;
}

static double tv(struct timeval t)
{
	return (double)t.tv_sec + (double)t.tv_usec / 1e6;
}

int main(int argc, char **argv)
{
	static const char *const names[] = { "write", "map", "populate" };
	struct timespec t0, t1;
	struct rusage a, b;
	cpu_set_t cpus;
	pthread_t *th;
	struct stat sb;
	int nthreads;

	if (argc < 4) {
		fprintf(stderr, "usage: bench_fill SRC DST write|map|populate "
				"[THREADS] [CHUNK_KIB]\n");
		return 2;
	}
	for (g.mode = M_WRITE; g.mode <= M_POPULATE; g.mode++)
		if (!strcmp(argv[3], names[g.mode]))
			break;
	if (g.mode > M_POPULATE) {
		fprintf(stderr, "bench_fill: unknown mode %s\n", argv[3]);
		return 2;
	}
	CPU_ZERO(&cpus);
	nthreads = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ?
		   CPU_COUNT(&cpus) : 1;
	if (argc > 4)
		nthreads = atoi(argv[4]);
	g.chunk = (argc > 5 ? (size_t)atoi(argv[5]) : 1024) << 10;
	g.src = open(argv[1], O_RDONLY | O_CLOEXEC);
	if (g.src < 0 || fstat(g.src, &sb) < 0 || nthreads < 1 ||
	    g.chunk == 0 || g.chunk % 4096) {
		perror("bench_fill: SRC");
		return 1;
	}
	g.nchunks = (uint64_t)sb.st_size / g.chunk;
	g.dst = open(argv[2], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (g.dst < 0 || ftruncate(g.dst, (off_t)(g.nchunks * g.chunk)) < 0) {
		perror("bench_fill: DST");
		return 1;
	}
	if (g.mode == M_POPULATE) {
		if (fallocate(g.dst, 0, 0, (off_t)(g.nchunks * g.chunk)) < 0) {
			perror("bench_fill: fallocate");
			return 1;
		}
		g.whole = mmap(NULL, g.nchunks * g.chunk,
			       PROT_READ | PROT_WRITE, MAP_SHARED, g.dst, 0);
		if (g.whole == MAP_FAILED) {
			perror("bench_fill: mmap");
			return 1;
		}
		madvise(g.whole, g.nchunks * g.chunk, MADV_HUGEPAGE);
	}
	th = calloc((size_t)nthreads, sizeof(*th));
	if (!th)
		return 1;
	getrusage(RUSAGE_SELF, &a);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < nthreads; i++)
		pthread_create(&th[i], NULL, run, NULL);
	for (int i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	getrusage(RUSAGE_SELF, &b);
	if (g.whole)
		munmap(g.whole, g.nchunks * g.chunk);
	unlink(argv[2]);
	if (atomic_load(&g.failed)) {
		fprintf(stderr, "bench_fill: %s\n",
			strerror(atomic_load(&g.failed)));
		return 1;
	}
	printf("%s: %d threads, %zu KiB chunks, %.0f MiB: cpu %.3f s "
	       "(user %.3f, sys %.3f), wall %.3f s\n", names[g.mode], nthreads,
	       g.chunk >> 10, (double)(g.nchunks * g.chunk) / (1 << 20),
	       tv(b.ru_utime) - tv(a.ru_utime) + tv(b.ru_stime) - tv(a.ru_stime),
	       tv(b.ru_utime) - tv(a.ru_utime), tv(b.ru_stime) - tv(a.ru_stime),
	       (double)(t1.tv_sec - t0.tv_sec) +
		       (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	free(th);
	return 0;
}
