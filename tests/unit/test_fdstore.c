/* SPDX-License-Identifier: MIT */
/*
 * test_fdstore.c - systemd's fd store as a mount's keeper (fs/fdstore.c),
 * on real memfds and sockets:
 *  - the state file: empty says so; each write is read back whole; a
 *    daemon killed after writing a record and before switching the
 *    header (the header put back as it was) leaves the previous state
 *    whole, for records that grow and shrink (a new record never
 *    overlaps the live one); a flipped byte or another magic is refused;
 *    the sequence grows across two files (which state is newer);
 *  - the notify protocol: nothing without NOTIFY_SOCKET; the text and a
 *    descriptor reach a datagram socket bound where it points;
 *  - LISTEN_FDS: nothing passed, the connection and a state taken by
 *    name, two states: the newer taken and the other named to drop.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "fdstore.h"

#define HDR_LEN 48 /* fdstore.c's struct fdstate_hdr */

static int put(int fd, const char *s, size_t len)
{
	struct iovec iov[2] = { { (void *)s, len / 2 },
				{ (void *)(s + len / 2), len - len / 2 } };

	return dcrfs_fdstate_write(fd, iov, 2);
}

static void expect(int fd, const char *s, size_t len)
{
	char *got = NULL;
	size_t n = 0;

	assert_int_equal(dcrfs_fdstate_read(fd, &got, &n), 0);
	assert_int_equal(n, len);
	assert_memory_equal(got, s, len);
	assert_int_equal(got[n], '\0');
	free(got);
}

static char *pattern(size_t len, int seed)
{
	char *p = malloc(len);

	assert_non_null(p);
	for (size_t i = 0; i < len; i++)
		p[i] = (char)(i * 31 + (size_t)seed * 7 + i / 4093);
	return p;
}

static void test_state_file(void **state)
{
	int fd = dcrfs_fdstate_create("dcrfs-state-test");
	char *got = NULL, hdr[HDR_LEN];
	size_t n, sizes[] = { 10, 5000, 100, 20000, 20000, 7, 70000, 3 };
	char *prev = NULL;
	size_t prev_len = 0;

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(dcrfs_fdstate_read(fd, &got, &n), -ENODATA);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char *p = pattern(sizes[i], (int)i);

		if (prev) {
			/* killed before the switch: the header as it was */
			assert_int_equal(pread(fd, hdr, sizeof(hdr), 0),
					 sizeof(hdr));
			assert_int_equal(put(fd, p, sizes[i]), 0);
			assert_int_equal(pwrite(fd, hdr, sizeof(hdr), 0),
					 sizeof(hdr));
			expect(fd, prev, prev_len);
		}
		assert_int_equal(put(fd, p, sizes[i]), 0);
		expect(fd, p, sizes[i]);
		free(prev);
		prev = p;
		prev_len = sizes[i];
	}
	free(prev);
	close(fd);
}

static void test_state_refused(void **state)
{
	int fd = dcrfs_fdstate_create("dcrfs-state-test");
	char *got = NULL, c;
	size_t n;
	uint64_t off;

	(void)state;
	assert_int_equal(put(fd, "the state", 9), 0);
	/* a byte of the record flipped */
	assert_int_equal(pread(fd, &off, sizeof(off), 16), sizeof(off));
	assert_int_equal(pread(fd, &c, 1, (off_t)off + 3), 1);
	c ^= 1;
	assert_int_equal(pwrite(fd, &c, 1, (off_t)off + 3), 1);
	assert_int_equal(dcrfs_fdstate_read(fd, &got, &n), -EBADMSG);
	assert_null(got);
	c ^= 1;
	assert_int_equal(pwrite(fd, &c, 1, (off_t)off + 3), 1);
	expect(fd, "the state", 9);
	/* not a state file */
	assert_int_equal(pwrite(fd, "XXXX", 4, 0), 4);
	assert_int_equal(dcrfs_fdstate_read(fd, &got, &n), -EBADMSG);
	assert_int_equal(put(fd, "x", 1), -EBADMSG);
	close(fd);
}

static void test_state_seq(void **state)
{
	int a = dcrfs_fdstate_create("dcrfs-state-a");
	int b = dcrfs_fdstate_create("dcrfs-state-b");
	uint64_t sa;

	(void)state;
	assert_int_equal(dcrfs_fdstate_seq_of(a), 0);
	assert_int_equal(put(a, "older", 5), 0);
	sa = dcrfs_fdstate_seq_of(a);
	assert_true(sa > 0);
	assert_int_equal(put(b, "newer", 5), 0);
	assert_true(dcrfs_fdstate_seq_of(b) > sa);
	assert_int_equal(put(a, "newest", 6), 0);
	assert_true(dcrfs_fdstate_seq_of(a) > dcrfs_fdstate_seq_of(b));
	close(a);
	close(b);
}

static void test_notify(void **state)
{
	char dir[] = "/tmp/dcrfs-test-fdstore.XXXXXX", path[128], buf[256];
	union {
		struct cmsghdr c;
		char b[CMSG_SPACE(sizeof(int))];
	} u;
	struct iovec iov = { buf, sizeof(buf) - 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = u.b, .msg_controllen = sizeof(u.b) };
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct stat s1, s2;
	int s, memfd, got = -1;
	ssize_t n;

	(void)state;
	unsetenv("NOTIFY_SOCKET");
	assert_false(dcrfs_sd_managed());
	assert_int_equal(dcrfs_sd_notify("READY=1", NULL, 0), 0);

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/notify", dir);
	strcpy(a.sun_path, path);
	s = socket(AF_UNIX, SOCK_DGRAM, 0);
	assert_true(s >= 0);
	assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
	setenv("NOTIFY_SOCKET", path, 1);
	assert_true(dcrfs_sd_managed());
	memfd = dcrfs_fdstate_create("dcrfs-state-test");
	assert_int_equal(dcrfs_sd_notify("FDSTORE=1\nFDNAME=dcrfs-state-test",
					 &memfd, 1), 1);
	n = recvmsg(s, &m, 0);
	assert_true(n > 0);
	buf[n] = '\0';
	assert_string_equal(buf, "FDSTORE=1\nFDNAME=dcrfs-state-test");
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
		if (c->cmsg_type == SCM_RIGHTS)
			memcpy(&got, CMSG_DATA(c), sizeof(int));
	assert_true(got >= 0);
	assert_int_equal(fstat(got, &s1), 0);
	assert_int_equal(fstat(memfd, &s2), 0);
	assert_true(s1.st_ino == s2.st_ino && s1.st_dev == s2.st_dev);
	/* nobody listens: said, not hidden */
	close(s);
	unlink(path);
	assert_true(dcrfs_sd_notify("READY=1", NULL, 0) < 0);
	unsetenv("NOTIFY_SOCKET");
	rmdir(dir);
	close(got);
	close(memfd);
}

static void set_listen(int n, const char *names)
{
	char pid[32], nb[8];

	snprintf(pid, sizeof(pid), "%ld", (long)getpid());
	snprintf(nb, sizeof(nb), "%d", n);
	setenv("LISTEN_PID", pid, 1);
	setenv("LISTEN_FDS", nb, 1);
	setenv("LISTEN_FDNAMES", names, 1);
}

static void test_listen(void **state)
{
	int fuse_fd, state_fd, older, newer;
	char *name, *stale;

	(void)state;
	unsetenv("LISTEN_PID");
	assert_int_equal(dcrfs_sd_listen(&fuse_fd, &state_fd, &name, &stale), 0);

	/* another process's: not ours */
	setenv("LISTEN_PID", "1", 1);
	setenv("LISTEN_FDS", "2", 1);
	assert_int_equal(dcrfs_sd_listen(&fuse_fd, &state_fd, &name, &stale), 0);

	/* the connection (any descriptor here) and a state */
	/* above the descriptors systemd passes (3 on) */
	older = fcntl(dcrfs_fdstate_create("older"), F_DUPFD_CLOEXEC, 20);
	newer = fcntl(dcrfs_fdstate_create("newer"), F_DUPFD_CLOEXEC, 20);
	assert_true(older >= 20 && newer >= 20);
	assert_int_equal(put(older, "older", 5), 0);
	assert_int_equal(put(newer, "newer", 5), 0);
	assert_int_equal(dup2(newer, 3), 3);
	assert_int_equal(dup2(older, 4), 4);
	set_listen(2, "dcrfs-fuse:dcrfs-state-7");
	assert_int_equal(dcrfs_sd_listen(&fuse_fd, &state_fd, &name, &stale), 1);
	assert_int_equal(fuse_fd, 3);
	assert_int_equal(state_fd, 4);
	assert_string_equal(name, "dcrfs-state-7");
	assert_null(stale);
	assert_null(getenv("LISTEN_FDS"));
	free(name);

	/* two states, the older first: the newer is taken */
	assert_int_equal(dup2(older, 3), 3);
	assert_int_equal(dup2(newer, 4), 4);
	assert_int_equal(dup2(newer, 5), 5);
	set_listen(3, "dcrfs-state-old:dcrfs-fuse:dcrfs-state-new");
	assert_int_equal(dcrfs_sd_listen(&fuse_fd, &state_fd, &name, &stale), 1);
	assert_int_equal(fuse_fd, 4);
	assert_int_equal(state_fd, 5);
	assert_string_equal(name, "dcrfs-state-new");
	assert_string_equal(stale, "dcrfs-state-old");
	assert_int_equal(fcntl(3, F_GETFD), -1); /* the other closed */
	expect(state_fd, "newer", 5);
	free(name);
	free(stale);

	/* a state without its connection: not a mount to restart */
	assert_int_equal(dup2(older, 3), 3);
	set_listen(1, "dcrfs-state-1");
	assert_int_equal(dcrfs_sd_listen(&fuse_fd, &state_fd, &name, &stale),
			 -EBADF);
	assert_int_equal(fcntl(3, F_GETFD), -1);
	close(4);
	close(5);
	close(older);
	close(newer);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_state_file),
		cmocka_unit_test(test_state_refused),
		cmocka_unit_test(test_state_seq),
		cmocka_unit_test(test_notify),
		cmocka_unit_test(test_listen),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
