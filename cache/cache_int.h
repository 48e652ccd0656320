/* SPDX-License-Identifier: MIT */
/*
 * cache_int.h - private to the chunk cache (cache.h is its contract):
 * struct dcr_cache, its slabs and sub-block sums, and what one file of
 * the cache calls in another. Included only by these store/ files:
 *
 *   cache.c       the slab table, slabs opened and evicted, the fences
 *                 of re-indexed versions, open/close, eviction, stats
 *   cache_sums.c  the sub-block sums of proven chunks, and the partial
 *                 reads checked against them
 *   cache_room.c  the room slabs leave on their file system for the
 *                 catalog (the budget in effect)
 *   cache_io.c    the reads and checks of chunks, the pins, the writes
 *   cache_scrub.c the re-checks of pinned slabs from disk and their
 *                 repairs in place (the mount's scrub)
 *   cache_verity.c pinned slabs sealed with fs-verity where it exists
 *
 * Locking: @lock guards the slab table, every slab's descriptors,
 * bitmaps, byte count, last use and reference count, the byte total and
 * the counters; it is held for bookkeeping and for opening a slab (one
 * open(2) and a SEEK_DATA scan, once per slab and mount), never across
 * the reads and writes of chunk data. A slab in use holds a reference:
 * eviction takes it off the table and unlinks it at once, and the last
 * user closes it. @evict_lock lets one thread at a time evict (others
 * skip: one evictor suffices).
 *
 * A chunk is "present" once its whole range is allocated in its slab
 * and "proven" once this instance wrote it or checked it. A reader uses
 * a present chunk only after proving it (or the proof it has), and a
 * writer marks a chunk present only after its write completed, so no
 * reader sees half a chunk; a chunk that a crash tore is allocated but
 * fails its check on first use and is punched out.
 *
 * A proven chunk is never rewritten with other bytes: the budget evicts
 * whole slabs (unlinked, their open descriptors still read), and a
 * chunk is punched only when it failed its check, holding the chunk
 * (chunks_take), as every write of it does, and only if it still fails
 * then. Every copy out of a slab is checked, proven or not (a byte may
 * rot on disk after its first use), so a reader racing a punch reads
 * zeros that fail the check, a miss. A descriptor of dcr_cache_open_fd
 * reads what the disk holds: its user checks it.
 *
 * Holding chunks: a slab's @wlock is taken shared by whoever writes or
 * punches some of its chunks, together with their bits in @busy (set
 * and cleared under @lock; a taker waits on @idle for busy ones), so
 * that writes of different chunks of one file run at once while a
 * write and a punch (or two writes) of the same chunk never overlap;
 * it is taken exclusive by what concerns the whole file (its seal with
 * fs-verity, the cut of a direct write's padding at the first pin).
 * Order: @wlock, then @lock (never the reverse: a taker waits on @idle
 * with @lock only).
 * A chunk built in place (dcr_cache_build) is held by its @busy bit
 * alone, not @wlock, from its start to its end, which may be on
 * another thread: what takes @wlock exclusive concerns a slab whole and
 * proven, which a slab with a chunk being built is not; its punch after
 * a failed build takes @wlock shared as every punch does.
 */
#ifndef DCR_CACHE_INT_H
#define DCR_CACHE_INT_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "chunk.h"
#include "common.h"
#include "hash.h"

struct slab {
	uint64_t v;
	uint32_t file;
	int fd;              /* read-write; -1 while closed */
	int dfd;             /* O_DIRECT, opened on first need; -1 */
	int sfd;             /* its sums file (cache_sums.c), opened on
				first need; -1 */
	uint32_t cs;         /* slot stride: the version's chunk size */
	uint64_t size;       /* the file's size (slab length) */
	uint64_t nbits;      /* chunks the bitmaps cover */
	uint64_t *present;   /* allocated in the slab */
	uint64_t *proven;    /* written or checked by this instance */
	uint64_t bytes;      /* accounted against the budget */
	int64_t used_ms;     /* last use */
	int64_t stamped_ms;  /* last use written as the mtime */
	pthread_rwlock_t wlock; /* shared: chunks written or punched;
				   exclusive: the whole file (see above) */
	uint64_t *busy;      /* chunks held (chunks_take); under @lock */
	uint8_t *map;        /* a shared writable mapping of the whole
				slab for DCR_CACHE_PUT_MAP (slab_map), or
				NULL; made under @lock, unmapped when the
				slab is shut or made read-only */
	size_t map_len;
	pthread_cond_t idle; /* a busy bit cleared (with @lock) */
	unsigned refs;       /* users; a dead slab is freed by the last */
	unsigned pins;       /* dcr_cache_pin holders (each holds a ref) */
	bool sealed;         /* fs-verity enabled and checked (this
				instance: cache_verity.c) */
	bool verified;       /* read and checked whole for a pin (this
				instance; cleared when a chunk goes) */
	uint64_t dead_bytes; /* what a pinned slab held when it died */
	bool dead;           /* evicted: off the table, unlinked */
	uint64_t epoch;      /* this opening's (slab_open), for its sums */
};

/*
 * Sub-block sums (see cache.h, "partial reads"): the XXH3-128 of each
 * SUB_SIZE bytes of a chunk, computed from the very buffer that was just
 * read whole and proven against the manifest. Keyed by the slab's epoch
 * (a new one at every slab_open: its proven bits start empty) and the
 * chunk; dropped when the chunk is punched or rewritten; LRU within
 * SUMS_BUDGET bytes.
 */
#define SUB_SHIFT 16
#define SUB_SIZE ((uint32_t)1 << SUB_SHIFT)
#define SUMS_BUDGET ((size_t)4 << 20)
#define SUMS_BUCKETS 4096

struct sums {
	struct sums *next;          /* bucket chain */
	struct sums *older, *newer; /* LRU list */
	uint64_t epoch, chunk;
	uint8_t check[DCR_XXH_LEN]; /* the key's xxh (or hash) prefix */
	uint32_t len;               /* the chunk's length */
	uint32_t n;                 /* sub-blocks */
	uint8_t sum[][DCR_XXH_LEN];
};

struct dcr_cache {
	char *dir;       /* <dir>/slabs */
	uint64_t budget;
	uint64_t headroom; /* free space slabs leave (see fs_room) */

	pthread_mutex_t lock;
	struct slab **tab; /* sorted by (v, file) */
	size_t n, cap;
	size_t nopen;
	uint64_t bytes;
	/* Bytes of pinned slabs that were unlinked: still on disk until
	 * their last unpin, so still within the budget. */
	uint64_t dead_pinned;
	/* The budget in effect: @budget, or less while the file system
	 * holds less (fs_room, dcr_cache_make_room). */
	uint64_t limit;
	struct dcr_cache_stats st;

	/* Fences of re-indexed versions (dcr_cache_drop_version), sorted by
	 * v: keys of fence[i].v with a gen below fence[i].gen are refused.
	 * Under @lock. */
	struct fence {
		uint64_t v;
		uint32_t gen;
	} *fences;
	size_t nfences;

	pthread_mutex_t evict_lock;
	atomic_bool no_direct; /* O_DIRECT refused here: stop trying */
	atomic_bool no_punch;  /* hole punching refused here */
	atomic_bool no_map;    /* mapping or populating refused here */
	atomic_bool said_small; /* warned that one slab exceeds the budget */
	atomic_int verity;      /* fs-verity: 1 works, -1 missing (said
				   once), 0 not tried yet (cache_verity.c) */
	atomic_bool fs_short;   /* the file system is short of the budget:
				   said once per incident (fs_room) */

	/* Sub-block sums, under sums_lock (taken after @lock, never
	 * before). */
	pthread_mutex_t sums_lock;
	struct sums **sums_tab;        /* SUMS_BUCKETS chains */
	struct sums *sums_new, *sums_old; /* LRU ends */
	size_t sums_bytes;
	uint64_t epochs;               /* last epoch given (under @lock) */
};

static inline bool bit(const uint64_t *m, uint64_t nbits, uint64_t i)
{
	return i < nbits && (m[i / 64] >> (i % 64)) & 1;
}

static inline void bit_set(uint64_t *m, uint64_t i, bool on)
{
	if (on)
		m[i / 64] |= UINT64_C(1) << (i % 64);
	else
		m[i / 64] &= ~(UINT64_C(1) << (i % 64));
}

/* Length of chunk @i of slab @s. */
static inline uint32_t slot_len(const struct slab *s, uint64_t i)
{
	return dcr_chunk_len(s->size, s->cs, i);
}

/* Whether @err says the file system is full (see fs_room). */
static inline bool is_full(int err)
{
	return err == -ENOSPC || err == -EDQUOT;
}

/* What a chunk of @len bytes occupies on disk, as the budget counts it. */
static inline uint64_t alloc_len(uint32_t len)
{
	return DCR_ROUND_UP((uint64_t)len, DCR_CACHE_ALIGN);
}


/* ---- cache.c */

/* Write @ms (milliseconds) as @s's mtime: its last use. Best effort. */
void stamp(struct slab *s, int64_t ms);
/* Drop a reference to @s; the last one frees an evicted slab. Takes
 * @lock. */
void slab_put(struct dcr_cache *c, struct slab *s);
/* Take @s off the table and unlink it (freed now if unused, else by its
 * last slab_put). Caller holds @lock. */
void slab_evict(struct dcr_cache *c, struct slab *s);
/* The open slab of @k with a reference (slab_put), created with
 * @create; NULL with *@err: -ENOENT (not cached), -ESTALE (a key of an
 * index older than its version's fence) or -errno. Takes @lock. */
struct slab *slab_get(struct dcr_cache *c, const struct dcr_cache_key *k,
			     bool create, int *err);
/* The O_DIRECT descriptor of @s (opened on first need), or -1 where the
 * file system refuses O_DIRECT. Takes @lock. */
int slab_dfd(struct dcr_cache *c, struct slab *s);
/* The shared writable mapping of the whole of @s (open), made on first
 * need, or NULL where that is refused (said nowhere: the writes then go
 * through write(2)). Takes @lock. */
uint8_t *slab_map(struct dcr_cache *c, struct slab *s);
/* Unmap @s's mapping, if any: no write may be using it. */
void slab_unmap(struct slab *s);
/* Evict whole slabs, least recently used first and @keep last, until
 * within the budget in effect with @room bytes to spare. Takes
 * @evict_lock (or returns at once if another thread holds it) and
 * @lock. */
void evict(struct dcr_cache *c, struct slab *keep, uint64_t room);

/* ---- cache_sums.c */

/* The path of @s's sums file into @buf. */
void sums_path(const struct dcr_cache *c, const struct slab *s, char *buf,
	       size_t cap);

/* Forget the sums of chunk @i of @s (punched or rewritten). Takes
 * sums_lock. */
void sums_drop(struct dcr_cache *c, const struct slab *s, uint64_t i);
/* Keep the sums of chunk @k of @s (opening @epoch), computed from @buf,
 * its @k->len bytes just read whole and proven, in memory and in @s's
 * sums file. Best effort. Takes sums_lock, and @lock to open the file. */
void sums_keep(struct dcr_cache *c, struct slab *s,
	       const struct dcr_cache_key *k, uint64_t epoch,
	       const uint8_t *buf);
/* Copy [@off, @off+@n) (@n > 0) of chunk @k of @s (opening @epoch) into
 * @dst, checking the sub-blocks read against the sums kept in memory or,
 * failing that, in @s's sums file: 0, -EAGAIN (none for it, or the range
 * too long), -EBADMSG or -errno. Takes sums_lock (not across the read),
 * and @lock to open the file. */
int sums_read(struct dcr_cache *c, struct slab *s,
		     const struct dcr_cache_key *k, uint64_t epoch,
		     uint32_t off, void *dst, size_t n);
/* Check @buf, the @k->len bytes of chunk @k of @s (opening @epoch) just
 * read whole, against the sums kept for that content (in memory, else
 * from @s's sums file): 0 if every sub-block matches, -EBADMSG with the
 * first that does not in *@bad, -EAGAIN if none are kept, -ENOMEM.
 * Takes sums_lock (not across the hashing), and @lock to open the
 * file. */
int sums_check(struct dcr_cache *c, struct slab *s,
	       const struct dcr_cache_key *k, uint64_t epoch,
	       const uint8_t *buf, uint32_t *bad);
/* Take @e off its chain and the LRU list (the caller frees it). Caller
 * holds sums_lock, or is dcr_cache_close. */
void sums_unlink(struct dcr_cache *c, struct sums *e);

/* ---- cache_room.c */

/* Say once per incident that the file system holds less than the
 * budget. */
void say_short(struct dcr_cache *c);
/* Before @need bytes are written into slab @keep (may be NULL): cap the
 * budget in effect to what the file system holds, evict if the write
 * would eat into the headroom. 1 (the file system holds the budget and
 * the headroom: no incident), 0 (go ahead) or -ENOSPC (do not cache the
 * chunk). Takes @lock. */
int fs_room(struct dcr_cache *c, struct slab *keep, uint64_t need);
/* At open: set @headroom for the cache's file system and, if it holds
 * less than the budget, the budget in effect, said once. */
void open_fit(struct dcr_cache *c);

/* ---- cache_verity.c */

/* Seal @s (just pinned whole and proven; @fd a read-only descriptor of
 * it) with fs-verity and check the kernel's digest against that of the
 * bytes read now: 0 sealed, 1 not (fs-verity missing: said once; or
 * refused: logged), -EBADMSG (the digests differ: logged), or -errno.
 * Takes @s->wlock and @lock. */
int verity_seal(struct dcr_cache *c, struct slab *s, int fd);

/* ---- cache_io.c */

/* Hold chunks [@first, @first+@n) of @s (< nbits) for writing or
 * punching them: @s->wlock shared, then their @busy bits, waiting while
 * another holds any of them. Takes @lock. chunks_give lets them go. */
void chunks_take(struct dcr_cache *c, struct slab *s, uint64_t first,
		 uint64_t n);
void chunks_give(struct dcr_cache *c, struct slab *s, uint64_t first,
		 uint64_t n);

/* Read @n bytes at @off of slab @s into @dst, around the page cache
 * (O_DIRECT) where the range is not resident and aligned, unless
 * @pagecache. 0 or -errno. */
int pread_lean(struct dcr_cache *c, struct slab *s, void *dst,
		      size_t n, uint64_t off, bool pagecache);

#endif /* DCR_CACHE_INT_H */
