/* SPDX-License-Identifier: MIT */
/*
 * synth_io.c - dcrfs-synth's file helpers: files mapped for reading,
 * created mapped at a fixed size, or mapped in place; whole-file write
 * and copy (synth.h), their writes through core's dcr_write_full.
 * They return 0 or -errno and log nothing: the caller names the file.
 */
#include "config.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <stdbool.h>
#include <sys/types.h>
#include <unistd.h>

#include "fileio.h"
#include "synth.h"

int map_open(const char *path, bool rw, struct map *m)
{
	struct stat sb;
	int e;

	m->p = NULL;
	m->fd = open(path, (rw ? O_RDWR : O_RDONLY) | O_CLOEXEC);
	if (m->fd < 0)
		return -errno;
	if (fstat(m->fd, &sb) < 0)
		goto err_close;
	m->len = (uint64_t)sb.st_size;
	if (m->len) {
		m->p = mmap(NULL, m->len, PROT_READ | (rw ? PROT_WRITE : 0),
			    MAP_SHARED, m->fd, 0);
		if (m->p == MAP_FAILED)
			goto err_close;
		if (!rw)
			madvise(m->p, m->len, MADV_SEQUENTIAL);
	}
	return 0;
err_close:
	e = -errno;
	close(m->fd);
	m->fd = -1;
	m->p = NULL;
	return e;
}

/* Create (truncate) @path at @len bytes, space reserved, mapped RW. */
int map_create(const char *path, uint64_t len, struct map *m)
{
	int e;

	m->p = NULL;
	m->len = len;
	m->fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (m->fd < 0)
		return -errno;
	if (len) {
		/* reserve the blocks now: ENOSPC here, not SIGBUS later */
		e = posix_fallocate(m->fd, 0, (off_t)len);
		if (e == EOPNOTSUPP || e == EINVAL)
			e = ftruncate(m->fd, (off_t)len) ? errno : 0;
		if (e) {
			errno = e;
			goto err_close;
		}
		m->p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			    MAP_SHARED, m->fd, 0);
		if (m->p == MAP_FAILED)
			goto err_close;
	}
	return 0;
err_close:
	e = -errno;
	close(m->fd);
	m->fd = -1;
	m->p = NULL;
	return e;
}

int map_close(struct map *m)
{
	int e = 0;

	if (m->p && m->len)
		munmap(m->p, m->len);
	if (m->fd >= 0 && close(m->fd) < 0)
		e = -errno;
	m->fd = -1;
	m->p = NULL;
	return e;
}

int write_file(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	int e;

	if (fd < 0)
		return -errno;
	e = dcr_write_full(fd, data, len);
	if (close(fd) < 0 && !e)
		e = -errno;
	return e;
}

int copy_file(const char *src, const char *dst, mode_t mode)
{
	int in = open(src, O_RDONLY | O_CLOEXEC), out, e = 0;
	static char buf[1 << 16];

	if (in < 0)
		return -errno;
	out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode & 07777);
	if (out < 0) {
		e = -errno;
		close(in);
		return e;
	}
	for (;;) {
		ssize_t n = read(in, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			e = -errno;
			break;
		}
		if (n == 0)
			break;
		if ((e = dcr_write_full(out, buf, (size_t)n)))
			break;
	}
	close(in);
	if (close(out) < 0 && !e)
		e = -errno;
	return e;
}
