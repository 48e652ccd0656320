/* SPDX-License-Identifier: MIT */
/*
 * verity.h - the fs-verity file digest, computed in user space: what the
 * kernel's FS_IOC_MEASURE_VERITY reports for a file sealed with
 * FS_IOC_ENABLE_VERITY (version 1, SHA-256, 4 KiB blocks, no salt), so
 * that a cache file the kernel seals can be checked against the bytes
 * the daemon proved (cache/cache_verity.c).
 *
 * The digest (the kernel's Documentation/filesystems/fsverity.rst): the
 * data is cut into 4 KiB blocks, the last padded with zeros; each level
 * of the Merkle tree is the SHA-256 of each block of the level below,
 * packed into 4 KiB blocks (128 hashes, the last block padded), until a
 * level is one block; the root hash is the SHA-256 of that block (of the
 * data block itself for a file of one block; all zeros for an empty
 * file). The digest is the SHA-256 of the 256-byte descriptor: version
 * 1, hash algorithm 1 (SHA-256), log2 of the block size 12, salt size
 * 0, 4 reserved bytes, the data size (64-bit little endian), the root
 * hash in 64 bytes, 32 bytes of salt and 144 reserved, zeros.
 *
 * Thread-safety: no shared state.
 */
#ifndef DCR_VERITY_H
#define DCR_VERITY_H

#include <stddef.h>
#include <stdint.h>

#include "hash.h"

/** Block size of the digest, and of what dcr_verity_update is fed. */
#define DCR_VERITY_BLOCK 4096

struct dcr_verity;

/** dcr_verity_new - a digest in progress, or NULL without memory. */
struct dcr_verity *dcr_verity_new(void);

/**
 * dcr_verity_update - add @len bytes of the file, in order. Every call
 * but the last must add a multiple of DCR_VERITY_BLOCK bytes.
 */
void dcr_verity_update(struct dcr_verity *v, const void *data, size_t len);

/** dcr_verity_final - the digest of all that was added into @out, and
 * free @v. */
void dcr_verity_final(struct dcr_verity *v, uint8_t out[DCR_HASH_LEN]);

/** dcr_verity_free - free @v unfinished; NULL accepted. */
void dcr_verity_free(struct dcr_verity *v);

/**
 * dcr_verity_digest_fd - the digest of the first @size bytes of @fd,
 * read with pread (through the page cache). 0 or -errno (-ENODATA: the
 * file is shorter).
 */
int dcr_verity_digest_fd(int fd, uint64_t size, uint8_t out[DCR_HASH_LEN]);

#endif /* DCR_VERITY_H */
