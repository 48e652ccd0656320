/* SPDX-License-Identifier: MIT */
/*
 * bench_readfile - read files front to back and print how long it took:
 * the reader side of scripts/bench.
 *
 *   bench_readfile [--mmap | --mmap-populate | --touch | --folios]
 *                  [--bs BYTES] FILE...
 *
 * read mode: read(2) into one buffer of --bs bytes (default 1 MiB).
 * mmap mode: mmap each file read-only with MADV_SEQUENTIAL and copy it
 * out in --bs pieces (so every byte is touched, as read(2) would copy
 * it): what a loader that mmaps safetensors does. --mmap-populate: the
 * same, but each 64 MiB window is first mapped in one call with
 * madvise(MADV_POPULATE_READ) (Linux 5.14+) instead of a page fault per
 * few pages: the loader advice of dcrfs(8). --touch: mmap each file
 * with no advice and read one byte of every 4 KiB page (the page faults
 * of a loader that maps the file, and nothing else). Prints one line
 * "BYTES SECONDS" (total over all files) on stdout.
 *
 * --folios (root: the page frames in /proc/self/pagemap): how the page
 * cache holds each file, which must be resident (mapping it populates
 * it): prints "BYTES KIB_PER_PAGE PMD_SHARE", the mean size in KiB of
 * the folio holding each 4 KiB page, and the share of the bytes in
 * folios of 2 MiB or more (scripts/bench-pages).
 *
 * Exit status 0, or 1 with a message on the first error.
 *
 * A benchmark helper, not installed, not part of the test suite.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#define POPULATE_WINDOW ((size_t)64 << 20)

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* What --folios adds up over the files, in 4 KiB pages. */
struct folio_sums {
	uint64_t pages;      /* pages seen */
	uint64_t folio_sum;  /* the size of the folio of each, summed */
	uint64_t pmd_pages;  /* pages in folios of 2 MiB or more */
};

static void folio_end(struct folio_sums *f, uint64_t run)
{
	f->folio_sum += run * run;
	if (run >= 512)
		f->pmd_pages += run;
}

/* Add the folios of the pages mapped at @p (@len bytes, populated) to
 * @f: a page flagged as a compound tail belongs to the folio before it. */
static int folios_of(const char *path, const char *p, size_t len,
		     struct folio_sums *f)
{
	int pm = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	int kf = open("/proc/kpageflags", O_RDONLY | O_CLOEXEC);
	uint64_t run = 0, n = (len + 4095) / 4096;
	int ret = -1;

	if (pm < 0 || kf < 0) {
		fprintf(stderr, "bench_readfile: --folios: /proc/self/pagemap, "
			"/proc/kpageflags: %s\n", strerror(errno));
		goto out;
	}
	for (uint64_t i = 0; i < n; i++) {
		uint64_t e, pfn, fl;

		if (pread(pm, &e, 8, (off_t)(((uintptr_t)p / 4096 + i) * 8)) != 8)
			goto io;
		pfn = e & ((UINT64_C(1) << 55) - 1);
		if (!(e >> 63)) {
			fprintf(stderr, "bench_readfile: --folios: %s: page %llu "
				"is not resident\n", path, (unsigned long long)i);
			goto out;
		}
		if (pfn == 0) {
			fprintf(stderr, "bench_readfile: --folios needs "
				"CAP_SYS_ADMIN (page frame numbers)\n");
			goto out;
		}
		if (pread(kf, &fl, 8, (off_t)(pfn * 8)) != 8)
			goto io;
		if (run && !(fl >> 16 & 1)) { /* not KPF_COMPOUND_TAIL */
			folio_end(f, run);
			run = 0;
		}
		run++;
	}
	if (run)
		folio_end(f, run);
	f->pages += n;
	ret = 0;
	goto out;
io:
	fprintf(stderr, "bench_readfile: --folios: %s: %s\n", path,
		strerror(errno ? errno : EIO));
out:
	if (pm >= 0)
		close(pm);
	if (kf >= 0)
		close(kf);
	return ret;
}

/* --touch: one byte of every page. */
static uint64_t touch(const volatile char *p, size_t len)
{
	uint64_t sum = 0;

	for (size_t off = 0; off < len; off += 4096)
		sum += (unsigned char)p[off];
	return sum;
}

static volatile uint64_t sink;

static int read_one(const char *path, char *buf, size_t bs, int use_mmap,
		    uint64_t *total, struct folio_sums *fs)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || fstat(fd, &st) < 0) {
		fprintf(stderr, "bench_readfile: %s: %s\n", path,
			strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (use_mmap) {
		size_t len = (size_t)st.st_size;
		char *p;

		if (len == 0) {
			close(fd);
			return 0;
		}
		p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED) {
			fprintf(stderr, "bench_readfile: mmap %s: %s\n", path,
				strerror(errno));
			close(fd);
			return -1;
		}
		if (use_mmap == 3 || use_mmap == 4) {
			int ret = 0;

			if (use_mmap == 3)
				sink += touch(p, len);
			else if (madvise(p, len, MADV_POPULATE_READ) ||
				 folios_of(path, p, len, fs))
				ret = -1;
			if (use_mmap == 4 && ret && errno)
				fprintf(stderr, "bench_readfile: populate %s: "
					"%s\n", path, strerror(errno));
			*total += len;
			munmap(p, len);
			close(fd);
			return ret;
		}
		madvise(p, len, MADV_SEQUENTIAL);
		for (size_t off = 0; off < len; off += bs) {
			size_t n = len - off < bs ? len - off : bs;

			if (use_mmap == 2 && off % POPULATE_WINDOW < bs) {
				size_t w = off - off % POPULATE_WINDOW;
				size_t wl = len - w < POPULATE_WINDOW ?
					    len - w : POPULATE_WINDOW;

				if (madvise(p + w, wl, MADV_POPULATE_READ) &&
				    errno != EINVAL) {
					fprintf(stderr, "bench_readfile: "
						"populate %s: %s\n", path,
						strerror(errno));
					munmap(p, len);
					close(fd);
					return -1;
				}
			}
			memcpy(buf, p + off, n);
		}
		*total += len;
		munmap(p, len);
	} else {
		for (;;) {
			ssize_t n = read(fd, buf, bs);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				fprintf(stderr, "bench_readfile: read %s: %s\n",
					path, strerror(errno));
				close(fd);
				return -1;
			}
			if (n == 0)
				break;
			*total += (uint64_t)n;
		}
	}
	close(fd);
	return 0;
}

int main(int argc, char *argv[])
{
	struct folio_sums fs = { 0 };
	size_t bs = 1 << 20;
	int use_mmap = 0, i = 1;
	uint64_t total = 0;
	double t0, t1;
	char *buf;

	for (; i < argc && argv[i][0] == '-'; i++) {
		if (strcmp(argv[i], "--mmap") == 0) {
			use_mmap = 1;
		} else if (strcmp(argv[i], "--mmap-populate") == 0) {
			use_mmap = 2;
		} else if (strcmp(argv[i], "--touch") == 0) {
			use_mmap = 3;
		} else if (strcmp(argv[i], "--folios") == 0) {
			use_mmap = 4;
		} else if (strcmp(argv[i], "--bs") == 0 && i + 1 < argc) {
			bs = strtoull(argv[++i], NULL, 0);
		} else {
			fprintf(stderr, "usage: %s [--mmap | --mmap-populate | --touch "
				"| --folios] [--bs BYTES] FILE...\n", argv[0]);
			return 2;
		}
	}
	if (bs == 0 || i >= argc) {
		fprintf(stderr, "usage: %s [--mmap | --mmap-populate | --touch "
			"| --folios] [--bs BYTES] FILE...\n", argv[0]);
		return 2;
	}
	buf = aligned_alloc(4096, (bs + 4095) / 4096 * 4096);
	if (!buf)
		return 1;
	t0 = now_s();
	for (; i < argc; i++)
		if (read_one(argv[i], buf, bs, use_mmap, &total, &fs) < 0)
			return 1;
	t1 = now_s();
	if (use_mmap == 4)
		printf("%llu %.1f %.4f\n", (unsigned long long)total,
		       fs.pages ? 4.0 * (double)fs.folio_sum / (double)fs.pages : 0,
		       fs.pages ? (double)fs.pmd_pages / (double)fs.pages : 0);
	else
		printf("%llu %.6f\n", (unsigned long long)total, t1 - t0);
	free(buf);
	return 0;
}
