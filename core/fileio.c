/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "fileio.h"

int dcr_pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t r = pread(fd, (uint8_t *)buf + done, len - done,
				  (off_t)(off + done));
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return DCR_ERR(-errno);
		}
		if (r == 0)
			return DCR_ERR(-ENODATA);
		done += (size_t)r;
	}
	return 0;
}

int dcr_path_join_buf(char *buf, size_t cap, const char *a, const char *b)
{
	size_t la = strlen(a);
	const char *sep = la && a[la - 1] == '/' ? "" : "/";

	if ((size_t)snprintf(buf, cap, "%s%s%s", a, sep, b) >= cap)
		return -ENAMETOOLONG;
	return 0;
}

char *dcr_path_join(const char *a, const char *b)
{
	size_t cap = strlen(a) + 1 + strlen(b) + 1;
	char *p = malloc(cap);

	if (p && dcr_path_join_buf(p, cap, a, b)) {
		free(p); /* cannot happen: cap fits both and a '/' */
		p = NULL;
	}
	return p;
}

int dcr_write_full(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t w = write(fd, p, len > (1u << 30) ? (1u << 30) : len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return DCR_ERR(-errno);
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

int dcr_pwrite_full(int fd, const void *buf, size_t len, uint64_t off)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t w = pwrite(fd, p, len > (1u << 30) ? (1u << 30) : len,
				   (off_t)off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return DCR_ERR(-errno);
		}
		p += w;
		off += (uint64_t)w;
		len -= (size_t)w;
	}
	return 0;
}

int dcr_pwritev_full(int fd, const struct iovec *iov, int n, uint64_t off)
{
	int i = 0;
	size_t done = 0; /* of iov[i] */

	while (i < n) {
		struct iovec v[64];
		int k = 0;
		ssize_t w;

		/* The rest, the first buffer from where it was cut. */
		for (int j = i; j < n && k < (int)DCR_ARRAY_SIZE(v); j++, k++)
			v[k] = iov[j];
		v[0].iov_base = (uint8_t *)v[0].iov_base + done;
		v[0].iov_len -= done;
		w = pwritev(fd, v, k, (off_t)off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return DCR_ERR(-errno);
		}
		if (w == 0)
			return DCR_ERR(-EIO);
		off += (uint64_t)w;
		while (i < n && (size_t)w >= iov[i].iov_len - done) {
			w -= (ssize_t)(iov[i].iov_len - done);
			done = 0;
			i++;
		}
		if (i < n)
			done += (size_t)w;
	}
	return 0;
}

int dcr_openat_beneath(int dirfd, const char *rel, int flags, mode_t mode)
{
	int fd = dirfd;

	if (!*rel || rel[0] == '/')
		return DCR_ERR(-EINVAL);
	for (const char *p = rel;;) {
		const char *e = strchrnul(p, '/');
		size_t n = (size_t)(e - p);
		char name[NAME_MAX + 1];

		if (n == 0 || n > NAME_MAX || (p[0] == '.' && (n == 1 || (n == 2 && p[1] == '.')))) {
			if (fd != dirfd)
				close(fd);
			return DCR_ERR(n > NAME_MAX ? -ENAMETOOLONG : -EINVAL);
		}
		memcpy(name, p, n);
		name[n] = 0;
		int next = *e ? openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
			      : openat(fd, name, flags | O_NOFOLLOW | O_CLOEXEC, mode);
		int err = next < 0 ? -errno : 0;
		if (fd != dirfd)
			close(fd);
		if (next < 0)
			return DCR_ERR(err);
		if (!*e)
			return next;
		fd = next;
		p = e + 1;
	}
}

int dcr_open_beneath(const char *root, const char *rel, int flags, mode_t mode)
{
	int dfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (dfd < 0)
		return DCR_ERR(-errno);
	int fd = dcr_openat_beneath(dfd, rel, flags, mode);
	close(dfd);
	return fd;
}

int dcr_mkdir_p(const char *path, mode_t mode)
{
	char tmp[PATH_MAX];
	size_t n = strlen(path);

	if (n == 0)
		return DCR_ERR(-EINVAL);
	if (n >= sizeof(tmp))
		return DCR_ERR(-ENAMETOOLONG);
	memcpy(tmp, path, n + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(tmp, mode) < 0 && errno != EEXIST)
			return DCR_ERR(-errno);
		*p = '/';
	}
	if (mkdir(tmp, mode) < 0 && errno != EEXIST)
		return DCR_ERR(-errno);
	struct stat sb;
	if (stat(tmp, &sb) < 0)
		return DCR_ERR(-errno);
	return S_ISDIR(sb.st_mode) ? 0 : DCR_ERR(-ENOTDIR);
}

static int rm_cb(const char *path, const struct stat *sb, int flag,
		 struct FTW *ftw)
{
	return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

int dcr_rm_rf(const char *path)
{
	struct stat sb;

	if (lstat(path, &sb) < 0)
		return errno == ENOENT ? 0 : DCR_ERR(-errno);
	return nftw(path, rm_cb, 32, FTW_DEPTH | FTW_PHYS) ? DCR_ERR(-errno) : 0;
}

#ifndef __NR_cachestat
#if defined(__x86_64__) || defined(__aarch64__) || defined(__i386__)
#define __NR_cachestat 451
#endif
#endif

int dcr_resident(int fd, uint64_t off, uint64_t len)
{
#ifdef __NR_cachestat
	struct { uint64_t off, len; } range = { off, len };
	struct { uint64_t cache, dirty, writeback, evicted,
		 recently_evicted; } cs;
	uint64_t pages = (off + len + 4095) / 4096 - off / 4096;

	if (syscall(__NR_cachestat, fd, &range, &cs, 0) != 0)
		return -1;
	return cs.cache >= pages;
#else
	return -1;
#endif
}

int dcr_mktempdir(const char *name, char *out, size_t cap)
{
	const char *tmp = getenv("TMPDIR");
	int ret;

	if ((size_t)snprintf(out, cap, "%s/%s.XXXXXX", tmp && *tmp ? tmp : "/tmp",
			     name) >= cap) {
		dcr_err("%s: the temporary directory's path is too long", tmp);
		out[0] = 0;
		return -ENAMETOOLONG;
	}
	if (!mkdtemp(out)) {
		ret = -errno;
		dcr_err("cannot make a scratch directory %s: %s", out, strerror(errno));
		out[0] = 0;
		return ret;
	}
	return 0;
}

#define STALE_UNOWNED_S 600 /* a scratch without an owner file: this old */

/* Remove "@tmp/<@name>.*" directories of ours whose owner is gone. */
static void collect_stale(const char *tmp, const char *name)
{
	size_t nl = strlen(name);
	DIR *d = opendir(tmp);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		char dir[PATH_MAX], owner[PATH_MAX + 8];
		struct stat st;
		bool stale = false;

		if (strncmp(e->d_name, name, nl) || e->d_name[nl] != '.' ||
		    (size_t)snprintf(dir, sizeof(dir), "%s/%s", tmp,
				     e->d_name) >= sizeof(dir) ||
		    lstat(dir, &st) || !S_ISDIR(st.st_mode) ||
		    st.st_uid != geteuid())
			continue;
		snprintf(owner, sizeof(owner), "%s/owner", dir);
		int fd = open(owner, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd >= 0)
			stale = flock(fd, LOCK_EX | LOCK_NB) == 0;
		else
			stale = errno == ENOENT &&
				time(NULL) - st.st_mtime > STALE_UNOWNED_S;
		if (stale) {
			dcr_info("removing %s, a scratch directory left by a "
				 "process that is gone", dir);
			dcr_rm_rf(dir);
		}
		if (fd >= 0)
			close(fd); /* drops the lock, after the removal */
	}
	closedir(d);
}

int dcr_mktempdir_owned(const char *name, char *out, size_t cap, int *lockfd)
{
	const char *tmp = getenv("TMPDIR");
	char owner[PATH_MAX + 8];
	int fd, ret;

	*lockfd = -1;
	collect_stale(tmp && *tmp ? tmp : "/tmp", name);
	if ((ret = dcr_mktempdir(name, out, cap)))
		return ret;
	snprintf(owner, sizeof(owner), "%s/owner", out);
	fd = open(owner, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || flock(fd, LOCK_EX) < 0) {
		ret = -errno;
		dcr_err("%s: %s", owner, strerror(errno));
		if (fd >= 0)
			close(fd);
		dcr_rm_rf(out);
		out[0] = 0;
		return ret;
	}
	*lockfd = fd;
	return 0;
}

void dcr_tempdir_release(const char *dir, int lockfd)
{
	if (dir && *dir)
		dcr_rm_rf(dir);
	if (lockfd >= 0)
		close(lockfd);
}
