/* SPDX-License-Identifier: MIT */
/*
 * bench_apply - decode throughput of the delta frames of one step: what
 * a cold read of a delta version costs in CPU, without the encoder.
 *
 *   bench_apply [--runs N] [--chunk KIB] [--frames FILE] OLD NEW
 *
 * OLD and NEW are the same file at two steps (e.g. model.safetensors of
 * two dcrfs-synth directories). Every chunk of NEW is encoded once
 * against OLD with dcr_frame_encode2 and safetensors hints (untimed), then
 * all the frames are applied onto a copy of OLD, N times (default 5); the
 * output is checked against NEW. Prints the best and median CPU time of
 * the apply pass as MiB/s of raw file. --frames FILE keeps the encoded
 * frames in FILE (written when missing, read when present), so a run
 * under valgrind skips the encoder:
 *
 *   valgrind --tool=callgrind --toggle-collect=dcr_frame_apply \
 *       bench_apply --runs 1 --frames F OLD NEW
 *
 * counts exactly the instructions of decoding (divide by the MiB printed).
 * --rec decodes with dcr_frame_apply_rec and copies each listed element's
 * new value out, as a mount does to keep the delta view's records
 * (read/dvrec.c): run with and without it to see what that costs.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "buf.h"
#include "chunk.h"
#include "common.h"
#include "frame.h"
#include "safetensors.h"

#include "benchutil.h"

#define RUNS_MAX 64

static double now_s(void)
{
	return bench_cpu_s();
}

static void *xmalloc(size_t n)
{
	return bench_xmalloc("bench_apply", n);
}

static uint8_t *load(const char *path, size_t *n)
{
	FILE *fp = fopen(path, "rb");
	struct stat sb;
	uint8_t *p;

	if (!fp || fstat(fileno(fp), &sb)) {
		perror(path);
		exit(1);
	}
	*n = (size_t)sb.st_size;
	p = xmalloc(*n);
	if (fread(p, 1, *n, fp) != *n) {
		fprintf(stderr, "bench_apply: %s: short read\n", path);
		exit(1);
	}
	fclose(fp);
	return p;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void usage(void)
{
	fprintf(stderr, "usage: bench_apply [--runs N] [--chunk KIB] [--frames FILE] "
		"[--rec] OLD NEW\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "runs", required_argument, NULL, 'r' },
		{ "chunk", required_argument, NULL, 'c' },
		{ "frames", required_argument, NULL, 'f' },
		{ "rec", no_argument, NULL, 'R' },
		{ NULL, 0, NULL, 0 },
	};
	int rec = 0;
	uint32_t cs = DCR_CHUNK_DEFAULT;
	const char *ffile = NULL;
	int o, runs = 5;

	dcr_log_set_prog("bench_apply");
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'r':
			runs = atoi(optarg);
			break;
		case 'c':
			cs = (uint32_t)strtoul(optarg, NULL, 10) << 10;
			break;
		case 'f':
			ffile = optarg;
			break;
		case 'R':
			rec = 1;
			break;
		default:
			usage();
		}
	}
	if (argc - optind != 2 || runs < 1 || runs > RUNS_MAX ||
	    !dcr_chunk_size_valid(cs))
		usage();

	size_t n_old, n_new;
	uint8_t *old = load(argv[optind], &n_old), *cur = load(argv[optind + 1], &n_new);
	if (n_old != n_new) {
		fprintf(stderr, "bench_apply: OLD and NEW differ in size\n");
		return 1;
	}
	uint64_t nch = dcr_chunk_count(n_new, cs);
	uint64_t *off = xmalloc(nch * sizeof(*off)), *len = xmalloc(nch * sizeof(*len));
	struct dcr_codec *c = dcr_codec_new(0);
	struct dcr_buf out;
	FILE *fp;
	uint64_t ndelta = 0;

	dcr_buf_init(&out, SIZE_MAX);
	if (ffile && (fp = fopen(ffile, "rb"))) {
		/* u64 chunk count, then per chunk u64 length and the frame */
		uint64_t cnt = 0;
		if (fread(&cnt, 8, 1, fp) != 1 || cnt != nch) {
			fprintf(stderr, "bench_apply: %s: not frames of this file\n", ffile);
			return 1;
		}
		for (uint64_t i = 0; i < nch; i++) {
			if (fread(&len[i], 8, 1, fp) != 1 || len[i] > SIZE_MAX / 2 ||
			    dcr_buf_reserve(&out, out.len + len[i]) ||
			    fread(out.data + out.len, 1, len[i], fp) != len[i]) {
				fprintf(stderr, "bench_apply: %s: truncated\n", ffile);
				return 1;
			}
			off[i] = out.len;
			out.len += len[i];
		}
		fclose(fp);
	} else {
		struct dcr_regions regs;
		int kind;
		if (dcr_safetensors_regions(old, n_old, n_old, &regs))
			memset(&regs, 0, sizeof(regs));
		for (uint64_t i = 0; i < nch; i++) {
			uint32_t l = dcr_chunk_len(n_new, cs, i);
			struct dcr_elem_hint h = dcr_regions_hint(&regs, i * (uint64_t)cs);
			off[i] = out.len;
			int ret = dcr_frame_encode2(c, cur + i * (uint64_t)cs,
						    old + i * (uint64_t)cs, l, &h, &out,
						    &kind);
			if (ret) {
				fprintf(stderr, "bench_apply: encode: %s\n", dcr_strerror(ret));
				return 1;
			}
			len[i] = out.len - off[i];
		}
		dcr_regions_free(&regs);
		if (ffile) {
			if (!(fp = fopen(ffile, "wb"))) {
				perror(ffile);
				return 1;
			}
			fwrite(&nch, 8, 1, fp);
			for (uint64_t i = 0; i < nch; i++) {
				fwrite(&len[i], 8, 1, fp);
				fwrite(out.data + off[i], 1, len[i], fp);
			}
			if (fclose(fp)) {
				perror(ffile);
				return 1;
			}
		}
	}
	for (uint64_t i = 0; i < nch; i++)
		ndelta += out.data[off[i] + 5] == DCR_FRAME_DELTA;

	uint8_t *dst = xmalloc(n_new), *vals = xmalloc(4 * (size_t)cs);
	uint64_t listed = 0;
	double t[RUNS_MAX];
	for (int run = 0; run < runs; run++) {
		memcpy(dst, old, n_old);
		double t0 = now_s();
		listed = 0;
		for (uint64_t i = 0; i < nch; i++) {
			struct dcr_frame_rec fr;
			uint8_t *d = dst + i * (uint64_t)cs;
			int ret = dcr_frame_apply_rec(c, out.data + off[i], len[i], d,
						      dcr_chunk_len(n_new, cs, i),
						      rec ? &fr : NULL);
			if (rec && !ret && fr.complete) {
				size_t p = 0;

				for (size_t k = 0; k < fr.n; k++) {
					const uint8_t *s = d + (fr.e[k] & DCR_REC_OFF_MASK);

					switch (dcr_rec_width(fr.e[k])) {
					case 1: vals[p++] = *s; break;
					case 2: memcpy(vals + p, s, 2); p += 2; break;
					default: memcpy(vals + p, s, 4); p += 4; break;
					}
				}
				listed += fr.n;
			}
			if (ret) {
				fprintf(stderr, "bench_apply: apply chunk %" PRIu64 ": %s\n",
					i, dcr_strerror(ret));
				return 1;
			}
		}
		t[run] = now_s() - t0;
		if (memcmp(dst, cur, n_new)) {
			fprintf(stderr, "bench_apply: decoded bytes differ\n");
			return 1;
		}
	}
	qsort(t, (size_t)runs, sizeof(t[0]), cmp_double);
	double mib = (double)n_new / 1048576.0;
	printf("bench_apply: %.1f MiB in %" PRIu64 " chunks (%" PRIu64 " delta), "
	       "frames %.2f MiB (%.1fx)\n", mib, nch, ndelta,
	       (double)out.len / 1048576.0, (double)n_new / (double)out.len);
	printf("bench_apply: apply%s best %.1f ms = %.0f MiB/s, median %.1f ms = "
	       "%.0f MiB/s (%d runs)\n", rec ? " --rec" : "", t[0] * 1e3, mib / t[0],
	       t[runs / 2] * 1e3, mib / t[runs / 2], runs);
	if (rec)
		printf("bench_apply: %" PRIu64 " changed elements listed\n", listed);
	free(vals);
	free(dst);
	free(off);
	free(len);
	free(old);
	free(cur);
	dcr_buf_free(&out);
	dcr_codec_free(c);
	return 0;
}
