/* SPDX-License-Identifier: MIT */
/*
 * bench_trust - what -o trust= costs a mount per new version (issue 20
 * target: <= 1 ms): a reader indexes the N versions of STORE with a
 * fresh cache directory (one refresh; a mount does that for every
 * version it sees), then is reopened on that catalog (a remount: every
 * row's signature is checked again with a trust set), once without a
 * trust set and once with TRUSTFILE, the order swapped every round.
 * Prints, per round, the wall and thread CPU seconds of each, and the
 * medians of (trust - plain) / N in milliseconds per version.
 *
 *   bench_trust STORE_DIR TRUSTFILE WORKDIR [ROUNDS]   (default 5)
 *
 * scripts/bench-trust makes the store (signed versions) and runs this.
 * Not a test.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "benchutil.h"
#include "common.h"
#include "fileio.h"
#include "reader.h"
#include "sign.h"
#include "store.h"

static const char *prog = "bench_trust";

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct cost {
	double wall, cpu;
};

/* Open a reader on @cache (with @trust or not) and refresh it once. */
static void run(struct dcr_store *st, const char *cache,
		const struct dcr_trust *trust, size_t want, struct cost *c)
{
	struct dcr_reader_opts o = { .cache_dir = cache, .trust = trust };
	struct dcr_reader *r;
	uint64_t *vs, latest;
	size_t n;
	double w0 = now_s(), c0 = bench_cpu_s();

	if (dcr_reader_open(st, &o, &r) || dcr_reader_refresh(r, &latest)) {
		fprintf(stderr, "%s: reader on %s failed\n", prog, cache);
		exit(1);
	}
	c->wall = now_s() - w0;
	c->cpu = bench_cpu_s() - c0;
	if (dcr_reader_versions(r, &vs, &n) || n != want) {
		fprintf(stderr, "%s: %zu versions shown, not %zu\n", prog, n, want);
		exit(1);
	}
	free(vs);
	dcr_reader_close(r);
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
	struct dcr_store *st;
	struct dcr_trust *trust;
	uint64_t *vs;
	size_t n;
	char url[4096], cache[4200];

	if (argc < 4) {
		fprintf(stderr, "usage: %s STORE_DIR TRUSTFILE WORKDIR [ROUNDS]\n", prog);
		return 2;
	}
	int rounds = argc > 4 ? atoi(argv[4]) : 5;
	if (rounds < 1 || rounds > 1000)
		rounds = 5;
	dcr_log_set_level(DCR_LOG_WARN);
	snprintf(url, sizeof(url), "file://%s", argv[1]);
	if (dcr_store_open(url, NULL, 0, &st) || dcr_trust_load(argv[2], &trust)) {
		fprintf(stderr, "%s: cannot open %s or %s\n", prog, url, argv[2]);
		return 1;
	}
	/* the number of versions: from a plain reader */
	snprintf(cache, sizeof(cache), "%s/count", argv[3]);
	{
		struct dcr_reader_opts o = { .cache_dir = cache };
		struct dcr_reader *r;
		if (dcr_reader_open(st, &o, &r) || dcr_reader_refresh(r, NULL) ||
		    dcr_reader_versions(r, &vs, &n)) {
			fprintf(stderr, "%s: cannot read %s\n", prog, url);
			return 1;
		}
		free(vs);
		dcr_reader_close(r);
		dcr_rm_rf(cache);
	}
	double *ix = bench_xmalloc(prog, sizeof(double) * (size_t)rounds);
	double *ro = bench_xmalloc(prog, sizeof(double) * (size_t)rounds);
	double *ixc = bench_xmalloc(prog, sizeof(double) * (size_t)rounds);
	double *roc = bench_xmalloc(prog, sizeof(double) * (size_t)rounds);
	printf("%zu versions; per round: index (fresh cache) and reopen, "
	       "wall/cpu s, plain then trust\n", n);
	for (int i = 0; i < rounds; i++) {
		struct cost c[2][2]; /* [trust][index, reopen] */
		for (int k = 0; k < 2; k++) {
			int tr = (i + k) % 2; /* the order swaps every round */
			snprintf(cache, sizeof(cache), "%s/c%d", argv[3], tr);
			dcr_rm_rf(cache);
			run(st, cache, tr ? trust : NULL, n, &c[tr][0]);
			run(st, cache, tr ? trust : NULL, n, &c[tr][1]);
			dcr_rm_rf(cache);
		}
		printf("round %d: index %.3f/%.3f %.3f/%.3f  reopen %.3f/%.3f "
		       "%.3f/%.3f\n", i + 1, c[0][0].wall, c[0][0].cpu,
		       c[1][0].wall, c[1][0].cpu, c[0][1].wall, c[0][1].cpu,
		       c[1][1].wall, c[1][1].cpu);
		ix[i] = (c[1][0].wall - c[0][0].wall) * 1e3 / (double)n;
		ro[i] = (c[1][1].wall - c[0][1].wall) * 1e3 / (double)n;
		ixc[i] = (c[1][0].cpu - c[0][0].cpu) * 1e3 / (double)n;
		roc[i] = (c[1][1].cpu - c[0][1].cpu) * 1e3 / (double)n;
	}
	printf("trust adds per version (median of %d rounds): index %.3f ms "
	       "wall, %.3f ms cpu; reopen %.3f ms wall, %.3f ms cpu "
	       "(target <= 1 ms)\n", rounds, median(ix, rounds),
	       median(ixc, rounds), median(ro, rounds), median(roc, rounds));
	free(ix);
	free(ro);
	free(ixc);
	free(roc);
	dcr_trust_free(trust);
	dcr_store_close(st);
	return 0;
}
