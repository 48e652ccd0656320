/* SPDX-License-Identifier: MIT */
/*
 * vfile.h - a local file of bytes derived from verified data (a delta
 * view, fs/delta.c), read back checked, so that a byte that rots on the
 * local disk is never served.
 *
 * Whoever produces the file hashes each piece of it in memory as it
 * produces it (struct dcr_vfile_seg: XXH3-128 of bytes [off, off+len)),
 * before they go to disk. dcr_vfile_seal then reads the finished file
 * once, checks every piece against its hash (so the bytes that reached
 * the disk, scratch files and copies between included, are the ones
 * produced), and keeps the XXH3-128 of each DCR_VFILE_BLOCK bytes in
 * memory: 16 bytes per 64 KiB. dcr_vfile_pread reads the blocks a read
 * covers whole, checks each, and copies out only bytes that match.
 * XXH3 detects accidents (bit rot, a bad copy), not an adversary: the
 * file is local and written by this process.
 *
 * A sealed vfile is immutable: dcr_vfile_pread is thread-safe.
 */
#ifndef DCR_VFILE_H
#define DCR_VFILE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "hash.h"

/** Bytes covered by one kept sum. */
#define DCR_VFILE_BLOCK ((uint32_t)64 << 10)

/** A piece of the file as produced: bytes [off, off+len) hash to xxh. */
struct dcr_vfile_seg {
	uint64_t off, len;
	uint8_t xxh[DCR_XXH_LEN];
};

struct dcr_vfile;

/**
 * dcr_vfile_seal - read the @size bytes of @fd (from offset 0; it must
 * not change afterwards) once, check that the pieces @segs[0..n) (sorted
 * by offset, not overlapping, within @size; bytes outside every piece
 * are not checked, so the producer should cover the whole file) hash as
 * given, and keep the block sums in *@out (free with dcr_vfile_free).
 * Returns 0; -EBADMSG if a piece does not match (the file is not what
 * was produced: *@out is NULL), -EINVAL for pieces out of order or past
 * @size, -EIO/-errno reading (a file shorter than @size is -EIO),
 * -ENOMEM. Logs nothing: the caller names the file.
 */
int dcr_vfile_seal(int fd, uint64_t size, const struct dcr_vfile_seg *segs,
		   size_t n, struct dcr_vfile **out);

/** dcr_vfile_size - the bytes of the sealed file. */
uint64_t dcr_vfile_size(const struct dcr_vfile *v);

/**
 * dcr_vfile_pread - up to @n bytes at @off of the sealed file @fd into
 * @buf, every block they fall in read whole and checked. Returns the
 * count (0 at or past the end); -EBADMSG if a block does not match its
 * sum (nothing of it is copied; the caller drops the file); -EIO/-errno
 * reading; -ENOMEM. Thread-safe.
 */
ssize_t dcr_vfile_pread(const struct dcr_vfile *v, int fd, void *buf, size_t n,
			uint64_t off);

/** dcr_vfile_free - free @v; NULL is accepted. */
void dcr_vfile_free(struct dcr_vfile *v);

#endif /* DCR_VFILE_H */
