/* SPDX-License-Identifier: MIT */
/*
 * bench_readfile - read files front to back and print how long it took:
 * the reader side of scripts/bench.
 *
 *   bench_readfile [--mmap | --mmap-populate] [--bs BYTES] FILE...
 *
 * read mode: read(2) into one buffer of --bs bytes (default 1 MiB).
 * mmap mode: mmap each file read-only with MADV_SEQUENTIAL and copy it
 * out in --bs pieces (so every byte is touched, as read(2) would copy
 * it): what a loader that mmaps safetensors does. --mmap-populate: the
 * same, but each 64 MiB window is first mapped in one call with
 * madvise(MADV_POPULATE_READ) (Linux 5.14+) instead of a page fault per
 * few pages: the loader advice of dcrfs(8). Prints one line "BYTES SECONDS" (total over all files) on
 * stdout. Exit status 0, or 1 with a message on the first error.
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

static int read_one(const char *path, char *buf, size_t bs, int use_mmap,
		    uint64_t *total)
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
		} else if (strcmp(argv[i], "--bs") == 0 && i + 1 < argc) {
			bs = strtoull(argv[++i], NULL, 0);
		} else {
			fprintf(stderr, "usage: %s [--mmap | --mmap-populate] "
				"[--bs BYTES] FILE...\n", argv[0]);
			return 2;
		}
	}
	if (bs == 0 || i >= argc) {
		fprintf(stderr, "usage: %s [--mmap | --mmap-populate] "
			"[--bs BYTES] FILE...\n", argv[0]);
		return 2;
	}
	buf = aligned_alloc(4096, (bs + 4095) / 4096 * 4096);
	if (!buf)
		return 1;
	t0 = now_s();
	for (; i < argc; i++)
		if (read_one(argv[i], buf, bs, use_mmap, &total) < 0)
			return 1;
	t1 = now_s();
	printf("%llu %.6f\n", (unsigned long long)total, t1 - t0);
	free(buf);
	return 0;
}
