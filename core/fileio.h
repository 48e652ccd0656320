/* SPDX-License-Identifier: MIT */
/*
 * fileio.h - whole-buffer file I/O and directory helpers that every layer
 * needs: they retry on EINTR and short transfers, and return 0 or -errno.
 */
#ifndef DCR_FILEIO_H
#define DCR_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/**
 * dcr_pread_full - read exactly @len bytes at @off into @buf.
 * Returns 0, -ENODATA if the file ends first, or -errno.
 */
int dcr_pread_full(int fd, void *buf, size_t len, uint64_t off);

/**
 * dcr_resident - whether bytes [@off, @off+@len) of @fd are all in the
 * page cache, asked without reading (cachestat(2), Linux 6.5): 1 yes,
 * 0 no, -1 cannot tell (an older kernel). Unlike a RWF_NOWAIT read, it
 * starts no read-ahead I/O.
 */
int dcr_resident(int fd, uint64_t off, uint64_t len);

/**
 * dcr_path_join_buf - the path "@a/@b" into @buf (@cap bytes), with no
 * second '/' when @a ends in one ("" and "x" give "/x"). The one path
 * join of the tree. Returns 0, or -ENAMETOOLONG (not logged; @buf then
 * holds a truncated string).
 */
int dcr_path_join_buf(char *buf, size_t cap, const char *a, const char *b);

/** dcr_path_join - dcr_path_join_buf into a new string (the caller frees
 * it); NULL when out of memory. */
char *dcr_path_join(const char *a, const char *b);

/** dcr_write_full - write all @len bytes of @buf at the file offset. 0 or -errno. */
int dcr_write_full(int fd, const void *buf, size_t len);

/** dcr_pwrite_full - write all @len bytes of @buf at @off. 0 or -errno. */
int dcr_pwrite_full(int fd, const void *buf, size_t len, uint64_t off);

/**
 * dcr_pwritev_full - write all the bytes of the @n buffers @iov (@n at
 * most IOV_MAX) at @off, in order, in as few pwritev(2) calls as the
 * kernel takes: one call for the whole range lets the page cache give
 * it folios as large as the range allows. @iov is not changed. 0 or
 * -errno.
 */
struct iovec;
int dcr_pwritev_full(int fd, const struct iovec *iov, int n, uint64_t off);

/**
 * dcr_mkdir_p - create @path and its missing parents with @mode; an
 * existing directory is fine. 0 or -errno.
 */
int dcr_mkdir_p(const char *path, mode_t mode);

/**
 * dcr_rm_rf - remove @path and, if it is a directory, everything below
 * it, never following symlinks; an absent @path is fine. 0 or -errno.
 */
int dcr_rm_rf(const char *path);

/**
 * dcr_openat_beneath - open @rel (relative, '/'-separated) below the
 * directory @dirfd without following any symlink: one openat per
 * component, directories with O_DIRECTORY | O_NOFOLLOW, the last one
 * with @flags | O_NOFOLLOW | O_CLOEXEC (and @mode for O_CREAT), so that
 * nothing outside the tree below @dirfd is ever opened, whatever is
 * renamed or replaced meanwhile. The one path walk for files a commit
 * reads or writes below a tree. Returns the fd, or -errno: -ELOOP (or
 * -ENOTDIR) when a component is a symlink, -EINVAL for an absolute @rel
 * or one with an empty, "." or ".." component. Not logged.
 */
int dcr_openat_beneath(int dirfd, const char *rel, int flags, mode_t mode);

/**
 * dcr_open_beneath - dcr_openat_beneath below the directory @root,
 * which is opened as given (symlinks in @root itself are followed: the
 * caller named it). Returns the fd or -errno; not logged.
 */
int dcr_open_beneath(const char *root, const char *rel, int flags, mode_t mode);

/**
 * dcr_mktempdir - create a private directory "$TMPDIR/<@name>.XXXXXX"
 * (/tmp without TMPDIR) for scratch files; its path into @out (@cap
 * bytes; "" on failure). 0 or -errno, logged naming the path.
 */
int dcr_mktempdir(const char *name, char *out, size_t cap);

/**
 * dcr_mktempdir_owned - dcr_mktempdir for a scratch directory a process
 * may leave behind when it is killed (compaction's cache): it holds an
 * flock on "<dir>/owner" for as long as *@lockfd is open, and before it
 * makes its own it removes every "$TMPDIR/<@name>.*" directory of this
 * user whose owner lock nobody holds (its process is gone; logged), or
 * that has no owner file and was not changed for 10 minutes (one left by
 * an older build). Release with dcr_tempdir_release. 0 or -errno
 * (logged). Thread-safe.
 */
int dcr_mktempdir_owned(const char *name, char *out, size_t cap, int *lockfd);

/** dcr_tempdir_release - remove @dir (dcr_mktempdir_owned) and drop its
 * lock @lockfd. */
void dcr_tempdir_release(const char *dir, int lockfd);

#endif /* DCR_FILEIO_H */
