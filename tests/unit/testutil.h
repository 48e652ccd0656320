/* SPDX-License-Identifier: MIT */
/*
 * testutil.h - small helpers shared by the cmocka unit tests: temporary
 * directories, recursive removal, file I/O and deterministic pseudo-random
 * bytes. Header-only (static inline), so every test stays one program.
 * Include it after <cmocka.h>.
 */
#ifndef DCR_TESTUTIL_H
#define DCR_TESTUTIL_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/**
 * tu_mkdtemp - create a fresh private directory under $TMPDIR (or /tmp)
 * whose name starts with @tag. Returns a malloc'ed path; aborts the test
 * on failure.
 */
static inline char *tu_mkdtemp(const char *tag)
{
	const char *base = getenv("TMPDIR");
	char tmpl[PATH_MAX];

	if (!base || !*base)
		base = "/tmp";
	snprintf(tmpl, sizeof(tmpl), "%s/dcr-%s-XXXXXX", base, tag);
	if (!mkdtemp(tmpl)) {
		fprintf(stderr, "mkdtemp %s: %s\n", tmpl, strerror(errno));
		abort();
	}
	return strdup(tmpl);
}

static inline int tu_rm_cb(const char *path, const struct stat *sb, int flag,
			   struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

/** tu_rm_rf - remove @path and everything below it. 0 or -1. NULL ok. */
static inline int tu_rm_rf(const char *path)
{
	if (!path)
		return 0;
	return nftw(path, tu_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/** tu_mkdir_p - create @path and its parents (mode 0755). 0 or -errno. */
static inline int tu_mkdir_p(const char *path)
{
	char buf[PATH_MAX];
	size_t len = strlen(path);

	if (len >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, len + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/** tu_write_file - create or replace @path with @len bytes. 0 or -errno. */
static inline int tu_write_file(const char *path, const void *data, size_t len)
{
	const uint8_t *p = data;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0)
		return -errno;
	while (len) {
		ssize_t k = write(fd, p, len);
		if (k < 0) {
			int e = -errno;
			close(fd);
			return e;
		}
		p += k;
		len -= (size_t)k;
	}
	return close(fd) < 0 ? -errno : 0;
}

/**
 * tu_read_file - read all of @path into a malloc'ed buffer (*@out, one
 * spare NUL byte appended) and its length into *@len. 0 or -errno.
 */
static inline int tu_read_file(const char *path, uint8_t **out, size_t *len)
{
	struct stat sb;
	uint8_t *buf;
	size_t got = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &sb) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	buf = malloc((size_t)sb.st_size + 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	while (got < (size_t)sb.st_size) {
		ssize_t k = read(fd, buf + got, (size_t)sb.st_size - got);
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	close(fd);
	buf[got] = 0;
	*out = buf;
	*len = got;
	return 0;
}

/** tu_file_size - size of @path in bytes, or -1 if it cannot be stat'ed. */
static inline long long tu_file_size(const char *path)
{
	struct stat sb;

	return stat(path, &sb) < 0 ? -1 : (long long)sb.st_size;
}

/**
 * tu_fill - fill @n bytes at @p with deterministic pseudo-random bytes
 * derived from @seed (xorshift64*): the same seed gives the same bytes.
 */
static inline void tu_fill(void *p, size_t n, uint64_t seed)
{
	uint8_t *b = p;
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;

	for (size_t i = 0; i < n; i++) {
		if (i % 8 == 0) {
			x ^= x >> 12;
			x ^= x << 25;
			x ^= x >> 27;
		}
		b[i] = (uint8_t)((x * 0x2545F4914F6CDD1Dull) >> (8 * (i % 8)));
	}
}

/** tu_rand - next value of a caller-held xorshift64 state (non-zero). */
/* Run the shell command made from @fmt as printf would; its system(3)
 * status (0 when it exited 0). */
static inline int tu_sh(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
static inline int tu_sh(const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd);
}

static inline uint64_t tu_rand(uint64_t *state)
{
	uint64_t x = *state ? *state : 88172645463325252ull;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*state = x;
	return x;
}

/*
 * What a test needs and this build or machine lacks (a test hook not
 * compiled in, a server that cannot do it): HACKING's rule for scripts,
 * in C. Under CI=true the test fails, since CI installs and builds
 * everything; elsewhere it is skipped with the reason printed, and
 * tu_exit makes the whole program report a skip (77) with that reason,
 * so neither a cmocka SKIPPED line nor a missing hook passes silently.
 */
static inline const char **tu_missing_slot(void)
{
	static const char *why; /* the first reason; the tests run in order */

	return &why;
}

/** tu_ci - whether this runs under CI (CI=true, as .ci/run exports). */
static inline int tu_ci(void)
{
	const char *ci = getenv("CI");

	return ci && !strcmp(ci, "true");
}

/**
 * tu_missing - inside a cmocka test: @why (what is missing, and how to
 * get it) stops this test: a failure under CI, else a skip remembered
 * for tu_exit. Does not return.
 */
#define tu_missing(why) do {						\
		if (tu_ci())						\
			fail_msg("%s, and CI=true: a missing dependency "	\
				 "fails the run (HACKING)", (why));	\
		if (!*tu_missing_slot())				\
			*tu_missing_slot() = (why);			\
		fprintf(stderr, "# skipped: %s\n", (why));		\
		skip();							\
	} while (0)

/**
 * tu_exit - what main returns after cmocka_run_group_tests gave @failed:
 * the failures if any, else 77 with a "SKIP: @prog: reason" line (what
 * scripts/check lists) when a test called tu_missing, else 0.
 */
static inline int tu_exit(const char *prog, int failed)
{
	if (failed)
		return failed;
	if (*tu_missing_slot()) {
		printf("SKIP: %s: %s\n", prog, *tu_missing_slot());
		return 77;
	}
	return 0;
}

#endif /* DCR_TESTUTIL_H */
