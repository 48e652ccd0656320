/* SPDX-License-Identifier: MIT */
/*
 * cache.h - the local content-addressed chunk cache.
 *
 * Materialized chunks are files <dir>/chunks/xx/<64 hex>, named by the
 * SHA-256 of their bytes (the chunk hash from the manifest), so a chunk
 * shared by many versions is stored once. Their sizes and last use are
 * recorded in the catalog's cache table; after every insert the least
 * recently used chunks are evicted until the total is within the budget.
 * Eviction never breaks a read: an evicted chunk is simply materialized
 * again by the caller.
 *
 * Every cached file is verified the first time it is used by this cache
 * instance (that is, once per mount), whatever its inode or times say:
 * it is read whole and checked against the XXH3-128 of its bytes that
 * the cache recorded in an extended attribute when it wrote the file
 * (from bytes proven against their SHA-256), or, for a file without that
 * attribute, hashed with SHA-256 against its name and then given the
 * attribute. A byte flipped on disk, even under unchanged inode and
 * times, is therefore caught before it is served. The set of verified
 * hashes is bounded (forgotten hashes are simply verified again). A file
 * that fails verification is deleted with a warning and reported as a
 * miss.
 *
 * Thread-safety: all functions may be called concurrently.
 */
#ifndef DCR_CACHE_H
#define DCR_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "catalog.h"
#include "hash.h"

struct dcr_cache;

/** Counters, for tests and statistics. */
struct dcr_cache_stats {
	uint64_t hits;       /* reads served from a cached file */
	uint64_t misses;     /* reads that found no (valid) file */
	uint64_t corrupt;    /* files deleted because they failed verification */
	uint64_t inserts;    /* chunks stored */
	uint64_t evictions;  /* chunks evicted for the budget */
	uint64_t bytes;      /* bytes currently accounted */
};

/**
 * dcr_cache_open - open the cache under @dir (which must exist; the
 * "chunks" and "tmp" subdirectories are created with mode 0700), using
 * @cat for its bookkeeping (@cat must outlive the cache). @budget is the
 * byte budget (0 = DCR_CACHE_SIZE_DEFAULT). Leftover temporary files
 * are removed. If @cat is new (dcr_catalog_is_new: first use, or rebuilt
 * after corruption), the chunk files already present are recorded with
 * the oldest last use, so they count against the budget, and evicted
 * down to it. 0 and *@out, or -errno (logged).
 */
int dcr_cache_open(const char *dir, struct dcr_catalog *cat, uint64_t budget,
		   struct dcr_cache **out);

/** Close and free; NULL accepted. No other call may be running. */
void dcr_cache_close(struct dcr_cache *c);

/**
 * dcr_cache_read - copy bytes [@off, @off+@n) of the cached chunk @hash,
 * whose full length must be @chunk_len, into @dst. Returns 0 on a hit,
 * -ENOENT on a miss (including a file that failed verification, which
 * is deleted), or another -errno on a local I/O error. A whole chunk
 * read into a DCR_CACHE_ALIGN-aligned @dst is copied from the page cache
 * if it is there, and else read around it (O_DIRECT) where allowed.
 */
int dcr_cache_read(struct dcr_cache *c, const uint8_t hash[DCR_HASH_LEN],
		   uint32_t chunk_len, uint32_t off, void *dst, size_t n);

/**
 * dcr_cache_open_fd - open the cached chunk @hash, whose full length must
 * be @chunk_len, for reading, if this instance has already proven it
 * (written it, or read it through dcr_cache_read or dcr_cache_check), so
 * the file is good when it returns. For zero-copy replies (splice).
 * Returns the descriptor (the caller closes it; the chunk may be evicted
 * meanwhile, the open file stays readable), -EAGAIN if the file exists
 * but is not proven yet (read it with dcr_cache_read, which proves it in
 * the caller's buffer), -ENOENT on a miss, or another -errno on a local
 * I/O error.
 */
int dcr_cache_open_fd(struct dcr_cache *c, const uint8_t hash[DCR_HASH_LEN],
		      uint32_t chunk_len);

/**
 * dcr_cache_check - make sure the cached chunk @hash (full length
 * @chunk_len) is proven in this instance, reading and checking it now if
 * it is not, through the page cache (so that a reader that follows finds
 * it resident and can splice it: dcr_cache_open_fd). For read-ahead
 * over cached chunks, on a thread other than the reader's. 0 if it is
 * cached and was proven already, 1 if it is cached and was proven now,
 * -ENOENT on a miss (a bad file is deleted), or another -errno on a
 * local I/O error.
 */
int dcr_cache_check(struct dcr_cache *c, const uint8_t hash[DCR_HASH_LEN],
		    uint32_t chunk_len);

/* Alignment of buffers that may be written or read around the page
 * cache (O_DIRECT); see DCR_CACHE_PUT_DIRECT. */
#define DCR_CACHE_ALIGN 4096

/* dcr_cache_put flags */
enum {
	/*
	 * Write around the page cache (O_DIRECT) when the file system
	 * allows: for chunks the caller serves from memory anyway, so that
	 * a first read does not also fill the page cache with a second
	 * copy of every chunk. @data must then be DCR_CACHE_ALIGN-aligned
	 * and readable up to the next multiple of DCR_CACHE_ALIGN past
	 * @len; otherwise (or where O_DIRECT is refused) it is a normal
	 * write.
	 */
	DCR_CACHE_PUT_DIRECT = 1 << 0,
};

/**
 * dcr_cache_put - store the verified chunk @data of @len bytes, whose
 * SHA-256 is @hash (the caller has checked it), then evict to the budget.
 * Writes a temporary file and renames it into place, so readers never see
 * a partial file. @flags: DCR_CACHE_PUT_*. 0 or -errno (the chunk is then
 * simply not cached).
 */
int dcr_cache_put(struct dcr_cache *c, const uint8_t hash[DCR_HASH_LEN],
		  const void *data, size_t len, unsigned flags);

/** dcr_cache_path - the file name of chunk @hash into @buf of @cap bytes. */
void dcr_cache_path(const struct dcr_cache *c,
		    const uint8_t hash[DCR_HASH_LEN], char *buf, size_t cap);

/** dcr_cache_get_stats - a snapshot of the counters. */
void dcr_cache_get_stats(struct dcr_cache *c, struct dcr_cache_stats *s);

#endif /* DCR_CACHE_H */
