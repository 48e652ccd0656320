/* SPDX-License-Identifier: MIT */
/*
 * test_failmalloc.c - allocation failure injection (SQLite's discipline).
 *
 * Linked with -Wl,--wrap for malloc, calloc, realloc, strdup, strndup,
 * posix_memalign and aligned_alloc, so that every allocation made by
 * dcrfs's own code (core/, store/: not libc's, SQLite's or curl's inside)
 * goes through the wrappers below. Then, for n = 1, 2, ... the whole
 * scenario - create a store, commit an anchor and a delta version,
 * open a reader, index the versions and read every byte back - runs in a
 * child process whose n-th allocation fails. Each run must end cleanly:
 * an error returned (and the scenario stops there) or success with the
 * right bytes. A crash, an abort, a hang (caught by alarm) or a wrong byte
 * fails the test, naming n. n stops where the scenario no longer reaches
 * its n-th allocation.
 *
 *   DCR_FAILMALLOC_FROM  smallest n tried (default 1)
 *   DCR_FAILMALLOC_MAX   largest n tried (default 3000)
 *   DCR_FAILMALLOC_STEP  try every STEP-th n (default 1)
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "commit.h"
#include "common.h"
#include "dirstore.h"
#include "manifest.h"
#include "objstore.h"
#include "reader.h"

/* ------------------------------------------------------------ wrappers */

static atomic_long alloc_count;
static long fail_at; /* 0: never */

void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
int __wrap_posix_memalign(void **p, size_t a, size_t n);
void *__wrap_aligned_alloc(size_t a, size_t n);
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);

static bool fail_now(void)
{
	long k = atomic_fetch_add(&alloc_count, 1) + 1;

	return fail_at && k == fail_at;
}

void *__wrap_malloc(size_t n)
{
	return fail_now() ? NULL : __real_malloc(n);
}
void *__wrap_calloc(size_t n, size_t m)
{
	return fail_now() ? NULL : __real_calloc(n, m);
}
void *__wrap_realloc(void *p, size_t n)
{
	return fail_now() ? NULL : __real_realloc(p, n);
}
char *__wrap_strdup(const char *s)
{
	return fail_now() ? NULL : __real_strdup(s);
}
char *__wrap_strndup(const char *s, size_t n)
{
	return fail_now() ? NULL : __real_strndup(s, n);
}
int __wrap_posix_memalign(void **p, size_t a, size_t n)
{
	return fail_now() ? ENOMEM : __real_posix_memalign(p, a, n);
}
void *__wrap_aligned_alloc(size_t a, size_t n)
{
	return fail_now() ? NULL : __real_aligned_alloc(a, n);
}

/* ------------------------------------------------------------ scenario */

#define CS 65536u
#define NFILES 2
static const size_t fsize[NFILES] = { 3 * CS + 100, CS / 2 };
static char root[256];

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	uint32_t x = 2463534242u ^ seed;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (uint8_t)x;
	}
}

static int write_tree(const char *dir, int step)
{
	char path[512];
	uint8_t *buf;

	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return -1;
	for (int i = 0; i < NFILES; i++) {
		buf = __real_malloc(fsize[i]);
		fill(buf, fsize[i], (unsigned)i);
		for (size_t k = 0; step && k < fsize[i]; k += 997)
			buf[k] ^= (uint8_t)(step * 7 + 1); /* a sparse step */
		snprintf(path, sizeof(path), "%s/f%d.bin", dir, i);
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0 || write(fd, buf, fsize[i]) != (ssize_t)fsize[i])
			return -1;
		close(fd);
		free(buf);
	}
	return 0;
}

/* Exit codes of a child. */
enum { RUN_OK = 0, RUN_STOPPED = 1, RUN_WRONG = 3, RUN_SETUP = 4 };

/* The scenario; returns RUN_OK, RUN_STOPPED (an error came back cleanly)
 * or RUN_WRONG. */
static int scenario(const char *dir)
{
	char store[600], par[600], stage[600], cache[600], src[600];
	struct dcr_store *st = NULL;
	struct dcr_store_info info;
	struct dcr_manifest m1 = { 0 };
	struct dcr_commit_result res;
	struct dcr_reader *r = NULL;
	int ret, out = RUN_STOPPED;

	snprintf(store, sizeof(store), "%s/store", dir);
	snprintf(par, sizeof(par), "%s/par", dir);
	snprintf(stage, sizeof(stage), "%s/stage", dir);
	snprintf(cache, sizeof(cache), "%s/cache", dir);
	if (dcr_dir_open(store, 1, &st))
		return RUN_STOPPED;
	ret = dcr_store_init(st, &info);
	if (ret && ret != -EEXIST)
		goto out;
	mkdir(stage, 0755);
	snprintf(src, sizeof(src), "%s/src.1", root);
	struct dcr_commit_opts o = {
		.stage_dir = stage, .chunk_size = CS, .jobs = 2,
		.pack_target = 2 * CS, .full = 1,
	};
	if (dcr_commit(st, src, &o, &res))
		goto out;
	if (rename(stage, par) < 0 || mkdir(stage, 0755) < 0)
		goto out;
	if (dcr_store_get_manifest(st, 1, &m1))
		goto out;
	o.full = 0;
	o.parent = 1;
	o.parent_manifest = &m1;
	o.parent_dir = par;
	snprintf(src, sizeof(src), "%s/src.2", root);
	if (dcr_commit(st, src, &o, &res))
		goto out;

	struct dcr_reader_opts ro = { .cache_dir = cache, .fetch_threads = 2 };
	if (dcr_reader_open(st, &ro, &r) || dcr_reader_refresh(r, NULL))
		goto out;
	const struct dcr_version_info *vi;
	if (dcr_reader_version(r, 2, &vi))
		goto out;
	for (uint32_t e = 1; e < vi->nentries; e++) {
		const struct dcr_entry *en = &vi->entries[e];
		uint8_t *want = __real_malloc(en->size), *got = __real_malloc(en->size);
		char path[700];

		snprintf(path, sizeof(path), "%s/src.2/%s", root, en->path);
		int fd = open(path, O_RDONLY);
		if (fd < 0 || read(fd, want, en->size) != (ssize_t)en->size)
			_exit(RUN_SETUP);
		close(fd);
		ssize_t n = dcr_reader_read(r, 2, e, 0, got, en->size);
		bool bad = n >= 0 && (n != (ssize_t)en->size ||
				      memcmp(want, got, en->size) != 0);
		free(want);
		free(got);
		if (bad) {
			out = RUN_WRONG;
			goto out;
		}
		if (n < 0)
			goto out;
	}
	out = RUN_OK;
out:
	dcr_reader_close(r);
	dcr_manifest_free(&m1);
	dcr_store_close(st);
	return out;
}

/* ------------------------------------------------------------ driver */

/* Run the scenario with allocation @n failing; the child's wait status
 * into *@status. The number of allocations it made into *@count. */
static void run_one(long n, int *status, long *count)
{
	char dir[300], cnt[320];
	pid_t pid;

	snprintf(dir, sizeof(dir), "%s/run.%ld", root, n);
	snprintf(cnt, sizeof(cnt), "%s.count", dir);
	mkdir(dir, 0755);
	pid = fork();
	if (pid == 0) {
		alarm(10); /* a hang is a failure, not a stuck CI */
		atomic_store(&alloc_count, 0);
		fail_at = n;
		int rc = scenario(dir);
		long k = atomic_load(&alloc_count);
		FILE *f = fopen(cnt, "w");
		if (f) {
			fprintf(f, "%ld\n", k);
			fclose(f);
		}
		_exit(rc);
	}
	while (waitpid(pid, status, 0) < 0 && errno == EINTR)
		;
	*count = 0;
	FILE *f = fopen(cnt, "r");
	if (f) {
		if (fscanf(f, "%ld", count) != 1)
			*count = 0;
		fclose(f);
	}
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", dir, cnt);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
}

static void quiet_sink(enum dcr_log_level lvl, const char *msg)
{
	(void)lvl;
	(void)msg;
}

int main(void)
{
	long from = 1, max = 3000, step = 1, total, count;
	const char *e;
	int status, failures = 0, stopped = 0, ok = 0;
	char src[300];

	if ((e = getenv("DCR_FAILMALLOC_FROM")))
		from = atol(e) > 0 ? atol(e) : 1;
	if ((e = getenv("DCR_FAILMALLOC_MAX")))
		max = atol(e);
	if ((e = getenv("DCR_FAILMALLOC_STEP")))
		step = atol(e) > 0 ? atol(e) : 1;
	snprintf(root, sizeof(root), "%s/dcr-failmalloc-XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(root)) {
		perror("mkdtemp");
		return 99;
	}
	for (int v = 1; v <= 2; v++) {
		snprintf(src, sizeof(src), "%s/src.%d", root, v);
		if (write_tree(src, v - 1)) {
			perror(src);
			return 99;
		}
	}
	dcr_log_set_sink(quiet_sink); /* every run logs its ENOMEM */

	/* A run without failures: it must succeed; its count bounds n. */
	run_one(0, &status, &total);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != RUN_OK) {
		fprintf(stderr, "FAIL: the scenario fails without injected "
			"failures (status %d)\n", status);
		return 1;
	}
	printf("# the scenario makes %ld allocations\n", total);
	for (long n = from; n <= total && n <= max; n += step) {
		run_one(n, &status, &count);
		if (WIFSIGNALED(status)) {
			fprintf(stderr, "FAIL: allocation %ld failing: killed by "
				"signal %d (%s)\n", n, WTERMSIG(status),
				WTERMSIG(status) == SIGALRM ? "hung" :
				strsignal(WTERMSIG(status)));
			failures++;
		} else if (WEXITSTATUS(status) == RUN_WRONG) {
			fprintf(stderr, "FAIL: allocation %ld failing: WRONG "
				"BYTES read back\n", n);
			failures++;
		} else if (WEXITSTATUS(status) == RUN_OK) {
			ok++;
		} else if (WEXITSTATUS(status) == RUN_STOPPED) {
			stopped++;
		} else {
			fprintf(stderr, "FAIL: allocation %ld failing: exit %d\n",
				n, WEXITSTATUS(status));
			failures++;
		}
		if (failures > 20)
			break;
	}
	printf("# %d runs stopped cleanly at an error, %d recovered, %d "
	       "failed\n", stopped, ok, failures);
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", root);
	return failures ? 1 : 0;
}
