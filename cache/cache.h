/* SPDX-License-Identifier: MIT */
/*
 * cache.h - the local chunk cache: one sparse slab file per version and
 * file.
 *
 * Materialized chunks live in <dir>/slabs/v<version>.f<file>, one file
 * per (version, file of that version's manifest), as long as the file
 * and sparse: chunk i occupies bytes [i * chunk_size, i * chunk_size +
 * len) of its slab, so finding a chunk is arithmetic, a sequential
 * reader reads one descriptor, and storing a chunk creates no file (a
 * file per chunk cost an inode, a rename and an open per MiB: most of a
 * first read's system time). Which chunks a slab holds is what is
 * allocated in it (SEEK_DATA/SEEK_HOLE, read once per slab and mount);
 * what was cut short by a crash is caught by the check below.
 *
 * Every chunk copied out of a slab (dcr_cache_read) is read whole and
 * checked, every time, whatever the file's inode or times say, against
 * the value the caller's manifest gives (its XXH3-128 for format 2, its
 * SHA-256 for format 1): a byte may rot on disk after the chunk's first
 * use.
 *
 * Partial reads: when a part of a chunk is read (a random 256 KiB read
 * of a 1 MiB chunk), the chunk is read whole and checked as above, and
 * the XXH3-128 of each 64 KiB of the buffer just proven is kept
 * ("sums": 256 bytes per MiB of chunk), in memory (at most 4 MiB in
 * all, the least recently used dropped first, so about 16 GiB of 1 MiB
 * chunks) and in the slab's sums file beside it (vV.fF.sums: about
 * 0.03 % of the slab, outside the budget, removed with the slab). So do
 * the proofs of dcr_cache_check (a prefetch). A later partial read of
 * that chunk, in this instance or a later one, reads only the 64 KiB
 * sub-blocks it covers and checks each against its sum, and serves
 * nothing unless all match (a mismatch sends it to the whole read and
 * check above, which punches the chunk out if its bytes are bad, and
 * keeps new sums if a sum was). A sums entry begins with the check
 * value of the content it describes and is used only for a chunk of
 * that value, so it never needs invalidating. The trust
 * argument: a sum is computed from bytes that were, a moment before,
 * proven equal to the manifest's hash of the chunk, in this process's
 * memory; so a sub-block that matches its sum now is the manifest's
 * bytes with the strength of XXH3-128 against accidental change (bit
 * rot, a torn or stray write), the threat the check of a cache file is
 * for - as for format 2's own per-chunk check; for format 1 the
 * cryptographic SHA-256 of the chunk is then replaced, for that read,
 * by this non-cryptographic check, the cache directory being the
 * daemon's own (mode 0700); a sums file read back in a later instance
 * is of the same trust as the slab beside it, written by this daemon
 * from bytes it had proven, and damage to either is caught as above. In
 * memory, sums are kept per opening of a slab (its proven bits start
 * empty at each) and dropped when the chunk is punched. A chunk that
 * fails (bit rot, a torn write, a store recreated
 * under the same cache directory) has its range punched out, is
 * reported as a miss (one warning naming the slab and the chunk) and is
 * fetched again: a rotten byte is never served. Chunks this instance
 * wrote or proved are remembered (one bit per chunk of every slab in
 * use) for dcr_cache_check and dcr_cache_open_fd.
 *
 * Budget: the bytes of all slabs (their allocated size, counted at open
 * and kept up to date) stay within the budget; whole slabs are evicted,
 * least recently used first (a slab's last use is its mtime, updated at
 * most once a minute), the slab being filled last. Eviction never breaks
 * a read: an evicted chunk is simply materialized again by the caller,
 * and an open descriptor keeps reading its (unlinked) slab.
 *
 * The file system: slabs never use its last free bytes (the headroom:
 * an eighth of its size, 256 KiB to 64 MiB), which are the catalog's,
 * next to them. A file system that holds less than the budget (said once
 * at open), or that fills up (ENOSPC: said once per incident), is the
 * budget reached: slabs are evicted to keep the headroom free, and a
 * chunk that does not fit is simply not cached.
 *
 * Needs a file system with sparse files and SEEK_HOLE (ext4, xfs,
 * btrfs, tmpfs); O_DIRECT is used where it is allowed.
 *
 * Thread-safety: all functions may be called concurrently.
 */
#ifndef DCR_CACHE_H
#define DCR_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash.h"

struct dcr_cache;

/** Counters, for tests and statistics. */
struct dcr_cache_stats {
	uint64_t hits;       /* reads served from the cache */
	uint64_t misses;     /* reads that found no (valid) chunk */
	uint64_t corrupt;    /* chunks punched out because they failed */
	uint64_t io_errors;  /* reads that failed on a local error (logged) */
	uint64_t inserts;    /* chunks stored */
	uint64_t evictions;  /* slabs evicted for the budget */
	uint64_t bytes;      /* bytes currently accounted */
	uint64_t pinned;     /* slabs pinned (dcr_cache_pin) now */
	uint64_t sealed;     /* slabs sealed with fs-verity (cache_verity.c) */
	int verity;          /* fs-verity: 1 works, -1 missing, 0 not tried */
};

/** Where a chunk lives in the cache and what it must hash to. */
struct dcr_cache_key {
	uint64_t v;           /* version */
	uint32_t file;        /* index of the file in the version's manifest */
	uint64_t chunk;       /* chunk index in the file */
	uint64_t file_size;   /* the file's size in bytes */
	uint32_t chunk_size;  /* the version's chunk size */
	uint32_t len;         /* this chunk's length */
	const uint8_t *hash;  /* SHA-256 of the chunk */
	const uint8_t *xxh;   /* XXH3-128 of the chunk (format 2), or NULL */
	/* Which index of version @v this key comes from, in this instance:
	 * 0 at first, raised by dcr_cache_drop_version when the version is
	 * re-indexed. A key older than the version's fence is refused. */
	uint32_t gen;
};

/* The cache budget when none is given: -o cache_size, dcr_cache_open. */
#define DCR_CACHE_SIZE_DEFAULT ((uint64_t)10 << 30)

/**
 * dcr_cache_open - open the cache under @dir (which must exist; its
 * "slabs" subdirectory is created with mode 0700). @budget is the byte
 * budget (0 = DCR_CACHE_SIZE_DEFAULT). The slabs present are counted
 * (one fstatat each) and evicted down to the budget. 0 and *@out, or
 * -errno (logged).
 */
int dcr_cache_open(const char *dir, uint64_t budget, struct dcr_cache **out);

/** Close and free; NULL accepted. No other call may be running. */
void dcr_cache_close(struct dcr_cache *c);

/**
 * dcr_cache_read - copy bytes [@off, @off+@n) of the cached chunk @k
 * into @dst, after reading the whole chunk and checking it (at every
 * call). Returns 0 on a hit, -ENOENT on a miss (including a chunk that
 * failed its check, which is punched out), or another -errno on a local
 * I/O error. A whole chunk read into a DCR_CACHE_ALIGN-aligned @dst is
 * copied from the page cache if it is there, and else read around it
 * (O_DIRECT) where allowed.
 */
int dcr_cache_read(struct dcr_cache *c, const struct dcr_cache_key *k,
		   uint32_t off, void *dst, size_t n);

/**
 * dcr_cache_read_part - dcr_cache_read of the part [@off, @off+@n) of
 * chunk @k (@n < @k->len) that may hand the whole chunk back: if this
 * instance kept the sums of @k (see "Partial reads" above), only the
 * sub-blocks the part covers are read and checked against them, and 0
 * is returned; else the chunk is read whole into @whole (@k->len bytes,
 * DCR_CACHE_ALIGN-aligned), checked, its sums kept and the part copied
 * out, and 1 is returned: @whole then holds the proven chunk. -ENOENT
 * and -errno as dcr_cache_read.
 */
int dcr_cache_read_part(struct dcr_cache *c, const struct dcr_cache_key *k,
			uint32_t off, void *dst, size_t n, void *whole);

/**
 * dcr_cache_check - make sure the cached chunk @k is proven in this
 * instance, reading and checking it now if it is not, through the page
 * cache (so that a reader that follows finds it resident, and so that
 * the kernel can read it from memory: dcr_cache_pin). For read-ahead over cached chunks, on a
 * thread other than the reader's. 0 if it is cached and was proven
 * already, 1 if it is cached and was proven now, -ENOENT on a miss, or
 * another -errno on a local I/O error.
 */
int dcr_cache_check(struct dcr_cache *c, const struct dcr_cache_key *k);

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
	 * @k->len; otherwise (or where O_DIRECT is refused) it is a normal
	 * write.
	 */
	DCR_CACHE_PUT_DIRECT = 1 << 0,
	/*
	 * Write through a shared mapping of the slab instead of write(2):
	 * the range's blocks allocated first (fallocate) and its pages
	 * faulted in by the kernel (MADV_POPULATE_WRITE), then copied
	 * into. A write(2) of a file holds its inode's lock (ext4, xfs,
	 * tmpfs), so the writes of one file go one at a time whatever the
	 * threads; stores into a mapping do not. For a prefetch, which
	 * writes many chunks of one file on many threads. Only while the
	 * file system holds the whole budget and the headroom (a cache on
	 * a file system near full writes with write(2), chunk run by
	 * chunk run, as before: on a 3 MiB tmpfs the mapping's
	 * allocations left the catalog without room, cause not found);
	 * where a step is refused (the fallocate fails; a kernel without
	 * MADV_POPULATE_WRITE) it is a normal write.
	 */
	DCR_CACHE_PUT_MAP = 1 << 1,
};

/**
 * dcr_cache_put - store the chunk @data of @k->len bytes, which the
 * caller has proven equal to @k's hashes, then evict to the budget. A
 * reader never sees the chunk before the write completed. @flags:
 * DCR_CACHE_PUT_*. 0 or -errno (the chunk is then simply not cached; a
 * partial write is punched out). -ENOSPC: the file system holds no more
 * (not logged per chunk: see above).
 */
int dcr_cache_put(struct dcr_cache *c, const struct dcr_cache_key *k,
		  const void *data, unsigned flags);

/* Chunks a dcr_cache_put_run may write at once. */
#define DCR_CACHE_RUN_MAX 64

/**
 * dcr_cache_put_run - dcr_cache_put of the @n (1 to DCR_CACHE_RUN_MAX)
 * consecutive chunks @k[0..@n) of one slab (same version, index and
 * file; chunk numbers that follow one another), @data[i] holding
 * @k[i]'s bytes: written with one call, so that the page cache gives
 * the range folios as large as it allows (up to 2 MiB, where a chunk
 * written alone gets folios of at most its size: an mmap of the file
 * then faults in PMD-sized pieces). Chunks there and proven already are
 * left as they are. Writes of other chunks of the same slab run at the
 * same time. 0 or -errno as dcr_cache_put (-EINVAL for keys that do not
 * follow one another).
 */
int dcr_cache_put_run(struct dcr_cache *c, const struct dcr_cache_key *k,
		      const void *const *data, size_t n, unsigned flags);

/* A chunk's place held by dcr_cache_build until dcr_cache_build_end. */
struct dcr_cache_slot;

/**
 * dcr_cache_build - hold the place of chunk @k (not proven yet) in its
 * slab for building the chunk there: its blocks allocated and its pages
 * resident in the slab's shared mapping, *@out pointing at its @k->len
 * bytes (unspecified until the caller writes them). No reader sees them
 * (the chunk is not present) and no write or punch of the chunk runs
 * until dcr_cache_build_end, which any thread may call. One copy per
 * byte where dcr_cache_put would make two (build, then write). 0;
 * -EEXIST: the chunk is there and proven; -EAGAIN: not this way (no
 * room to spare on the file system, a mapping refused: use
 * dcr_cache_put, which says why if it fails too); -ESTALE (as
 * dcr_cache_put); -ENOSPC, -ENOMEM.
 */
int dcr_cache_build(struct dcr_cache *c, const struct dcr_cache_key *k,
		    uint8_t **out, struct dcr_cache_slot **slot);

/**
 * dcr_cache_build_end - end the build of @slot (NULL: nothing): with
 * @ok, the caller proved the bytes at its place equal to the key's
 * hashes, and the chunk is present and proven from now on (then evict
 * to the budget); else it is punched out, so that unproven bytes are
 * never served. Frees @slot; the place's pointer is invalid after.
 */
void dcr_cache_build_end(struct dcr_cache *c, struct dcr_cache_slot *slot,
			 bool ok);

/**
 * dcr_cache_make_room - the file system is full for someone else (the
 * catalog): evict slabs, least recently used first, until @want bytes
 * (0: the headroom) more are free, or none are left. 0 if a slab was
 * evicted, -ENOSPC if there was nothing to evict.
 */
int dcr_cache_make_room(struct dcr_cache *c, uint64_t want);

/**
 * dcr_cache_room_for - whether @bytes more may be written next to the
 * cache (by another user of its file system: the delta view's scratch)
 * and leave the headroom free: false while the file system is short of
 * the budget, or when it cannot be told. Thread-safe.
 */
bool dcr_cache_room_for(struct dcr_cache *c, uint64_t bytes);

/**
 * dcr_cache_room_hook - dcr_cache_make_room of the cache @cache, in the
 * shape of a catalog's room hook (dcr_catalog_set_room_hook).
 */
int dcr_cache_room_hook(void *cache, uint64_t want);

/**
 * dcr_cache_drop_version - version @v's slabs no longer hold its chunks
 * (it was re-indexed with other content, or is gone from the store):
 * unlink them all (open descriptors and readers in progress keep
 * reading what they have) and, from now on, refuse keys of @v with a
 * gen below @gen - their reads miss and their puts store nothing - so
 * that a chunk built for the old index in flight meanwhile is never
 * stored, nor proven, as the new one's. Returns the slabs dropped.
 */
size_t dcr_cache_drop_version(struct dcr_cache *c, uint64_t v, uint32_t gen);

/**
 * dcr_cache_verify - read the cached chunk @k whole (through the page
 * cache) and check it against @k's hashes now, whether or not this
 * instance proved it before (a chunk written by this mount may have
 * rotted on disk since). 0 if it is good, -ENOENT on a miss or when it
 * fails (it is then punched out, or its pinned slab unlinked), or
 * another -errno on a local I/O error.
 */
int dcr_cache_verify(struct dcr_cache *c, const struct dcr_cache_key *k);

/**
 * dcr_cache_pin - a read-only descriptor of the slab of file @k->file of
 * version @k->v, for the kernel to serve reads from directly (FUSE
 * passthrough), if every chunk of it is present and proven in this
 * instance (prove them first with dcr_cache_check; @k's chunk, len and
 * hashes are not used). While pinned the slab is never written, punched
 * or truncated: it is whole and proven, so no put or punch touches it,
 * the budget does not evict it, and when it must go (dcr_cache_drop_
 * version) it is unlinked, its bytes counted against the budget until
 * the last unpin; the one exception is the scrub's repair of a chunk
 * found rotten, which writes the very bytes the chunk was proven to
 * hold over it (dcr_cache_repair_chunk). Pinned with
 * DCR_CACHE_PIN_VERIFIED for the first time, a slab is sealed with
 * fs-verity where the kernel and the file system support it, and the
 * kernel's digest checked against that of the bytes just proven
 * (cache/cache_verity.c; a mismatch unlinks it and fails the pin with
 * -EAGAIN). Returns the descriptor (the caller may close it at any
 * time) and the pin in *@pin, or -EAGAIN if some chunk is not present
 * and proven, -ESTALE for a fenced key, -ENOENT, or another -errno.
 */
struct dcr_cache_pin;
int dcr_cache_pin(struct dcr_cache *c, const struct dcr_cache_key *k,
		  unsigned flags, struct dcr_cache_pin **pin);

/* dcr_cache_pin flags */
enum {
	/* The caller just read and checked every chunk of the slab
	 * (dcr_cache_verify): remembered for dcr_cache_pin_verified. */
	DCR_CACHE_PIN_VERIFIED = 1 << 0,
};

/**
 * dcr_cache_pin_verified - whether the slab of @k was pinned with
 * DCR_CACHE_PIN_VERIFIED by this instance (and not rewritten since):
 * its bytes were read and checked whole once in this mount.
 */
bool dcr_cache_pin_verified(struct dcr_cache *c,
			    const struct dcr_cache_key *k);

/** dcr_cache_unpin - release @pin (from dcr_cache_pin); NULL accepted. */
void dcr_cache_unpin(struct dcr_cache *c, struct dcr_cache_pin *pin);

/**
 * dcr_cache_pin_hold - another hold of the pin @pin (the slab stays
 * pinned until each hold is released with dcr_cache_unpin), for a user
 * of the slab that may outlive the pin's holder (the scrub). Returns
 * @pin. Thread-safe; @pin must be held by the caller's side meanwhile.
 */
struct dcr_cache_pin *dcr_cache_pin_hold(struct dcr_cache *c,
					 struct dcr_cache_pin *pin);

/**
 * dcr_cache_scrub_chunk - re-check chunk @k of the pinned slab @pin (a
 * file the kernel reads through FUSE passthrough; cache/cache_scrub.c):
 * read it as the kernel would serve it (resident pages from memory, the
 * rest from the disk around the page cache) into @buf (@k->len bytes,
 * DCR_CACHE_ALIGN-aligned) and check it against its sub-block sums, or
 * without them against @k's check value (keeping its sums). 0 if good,
 * -EBADMSG if it is not (*@sub: the first 64 KiB sub-block that failed,
 * UINT32_MAX when the whole chunk's check did), -EINVAL if @k is not a
 * chunk of @pin's slab, or another -errno. Nothing is punched or
 * unlinked. Thread-safe.
 */
int dcr_cache_scrub_chunk(struct dcr_cache *c, struct dcr_cache_pin *pin,
			  const struct dcr_cache_key *k, uint8_t *buf,
			  uint32_t *sub);

/**
 * dcr_cache_repair_chunk - write @data, chunk @k as the caller proved it
 * (checked again here against @k's check value), over its range of the
 * pinned slab @pin, in place and through the page cache, then to disk;
 * read it back into @buf (@k->len bytes) and check it. The slab's size
 * and allocation do not change (no hole, no truncation), so the opens
 * and mappings the kernel serves from it read these bytes from then on.
 * 0, -EBADMSG (still wrong once read back), or -errno. Thread-safe.
 */
int dcr_cache_repair_chunk(struct dcr_cache *c, struct dcr_cache_pin *pin,
			   const struct dcr_cache_key *k, const uint8_t *data,
			   uint8_t *buf);

/**
 * dcr_cache_pin_sealed - whether the pinned slab @pin was sealed with
 * fs-verity at its first pin (see dcr_cache_pin): the kernel checks
 * every page of it, and a scrub has nothing to do. Thread-safe.
 */
bool dcr_cache_pin_sealed(struct dcr_cache *c, struct dcr_cache_pin *pin);

/**
 * dcr_cache_pin_drop - the pinned slab @pin holds a chunk that could not
 * be repaired: take it out of the cache (unlinked; the pins keep the
 * inode for those who hold it), so that the next pin of its file finds
 * none and the file is materialized again. Thread-safe.
 */
void dcr_cache_pin_drop(struct dcr_cache *c, struct dcr_cache_pin *pin);

/**
 * dcr_cache_slab_path - the file name of the slab of file @file of
 * version @v into @buf of @cap bytes (for tests and tools).
 */
void dcr_cache_slab_path(const struct dcr_cache *c, uint64_t v, uint32_t file,
			 char *buf, size_t cap);

/** dcr_cache_get_stats - a snapshot of the counters. */
void dcr_cache_get_stats(struct dcr_cache *c, struct dcr_cache_stats *s);

#endif /* DCR_CACHE_H */
