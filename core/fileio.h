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

/** dcr_write_full - write all @len bytes of @buf at the file offset. 0 or -errno. */
int dcr_write_full(int fd, const void *buf, size_t len);

/** dcr_pwrite_full - write all @len bytes of @buf at @off. 0 or -errno. */
int dcr_pwrite_full(int fd, const void *buf, size_t len, uint64_t off);

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
 * dcr_mktempdir - create a private directory "$TMPDIR/<@name>.XXXXXX"
 * (/tmp without TMPDIR) for scratch files; its path into @out (@cap
 * bytes; "" on failure). 0 or -errno, logged naming the path.
 */
int dcr_mktempdir(const char *name, char *out, size_t cap);

#endif /* DCR_FILEIO_H */
