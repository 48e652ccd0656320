/* SPDX-License-Identifier: MIT */
/*
 * reader_int.h - private to the read path (reader.h is its API): struct
 * dcr_reader, the internal structs, and what one part of the read path
 * calls in another. Included only by these store/ files:
 *
 *   reader.c        the facade: open/close, dcr_reader_read,
 *                   dcr_reader_sync
 *   rversions.c     the versions, their trees, refresh, tags
 *   rchunks.c       chunk references; the chunk table (chunks being
 *                   built, hot, failed a moment ago; their buffers)
 *   rmaterialize.c  the codec pool; chains resolved, applied and
 *                   verified; batches of misses and their ranged GETs
 *   rqueues.c       the background queues (core/wq.h): write-behind,
 *                   read-ahead decode, read-ahead, the par_for pool
 *   rscrub.c        the re-check of files open through passthrough
 *                   (the mount's scrub), and the repair of a rotten
 *                   chunk from its chain
 *
 * Each file owns its part of struct dcr_reader, a sub-struct that it
 * initialises and tears down: vs (rversions.c; ridentity.c and rlayout.c
 * work on it too), refs and ct (rchunks.c), codecs (rmaterialize.c), ras
 * and qs (rqueues.c). reader.c holds them, and the settings.
 *
 * Locks. struct dcr_reader has six mutexes; the chunk table has a
 * condition variable per entry. Only these nestings exist (outer first):
 *
 *     vs.refresh_lock -> vs.lock
 *     vs.refresh_lock -> ct.lock (trees_trim, through reader_idle)
 *
 * Every other acquisition is of one lock alone, so the order is: never
 * take vs.refresh_lock while holding any other of these, and take
 * nothing while holding vs.lock, ct.lock, codecs.lock, refs.lock or
 * ras.lock. The queues (qs: ra, dq, wq, par) have their own internal
 * locks, leaves below all of ours: ra_note submits under ras.lock, and
 * no job or hook runs under a queue's lock.
 *
 *  - vs.refresh_lock (rversions.c) serialises dcr_reader_refresh and
 *    guards listed, relist_at, flog[], flog_next and every rver.id;
 *    reader_replace_version and reader_drop_version run under it. Held
 *    across store GETs and LISTs and catalog calls; takes vs.lock inside
 *    (vers_insert, mark_bad, get_ver, the tag swap).
 *  - vs.lock (rversions.c) guards the version array (vers, nvers,
 *    capvers), the graveyard of replaced and dropped versions
 *    (graveyard, rver.next_dead), the queued changes (changes,
 *    nchanges, capchanges), the bad-manifest list (bad, nbad, capbad,
 *    max_bad), the tags (tags, ntags), the use stamps and pins of the
 *    versions (use_clock, rver.used, rver.pins) and the install and
 *    unload of a version's tree (rver.loaded, m, entries, info:
 *    immutable while loaded). The catalog read and tree build of
 *    rver_load run outside it. trees_trim takes the queues' locks and
 *    ct.lock one at a time (reader_idle) before it takes vs.lock, never
 *    inside it.
 *  - ct.lock (rchunks.c) guards the chunk table (struct ctab: buckets,
 *    idle list, counts) and each entry's state, rc, until,
 *    persisted, listed, refs and waiters; an entry's condition variable
 *    is broadcast (with ct.lock held) when that entry changes, if it has
 *    waiters. Concurrent readers of one chunk content share one fetch
 *    and decode. An entry's data is written by its leader before it is
 *    ready, then only read, from outside the lock, by holders of a
 *    reference; its key, w, ref, quiet and cold are set before it is
 *    listed.
 *  - codecs.lock (rmaterialize.c) guards the pool of per-thread codec
 *    states.
 *  - refs.lock (rchunks.c) guards the chunk-reference blocks; the
 *    catalog query that fills a block runs outside it.
 *  - ras.lock (rqueues.c) guards the read-ahead streams.
 *
 * The statistics (stats) are relaxed atomics, read and written without
 * a lock; so is rver.dead (set once, under vs.lock, read anywhere).
 *
 * Set at open and read without a lock: st, dir, cat, cache,
 * cache_budget, fetch_threads, threads, readahead, coalesce_max, read_timeout_ns,
 * ct.budget, vs.bad_retry_after, vs.relist_ns, vs.max_trees and the
 * queue pointers (qs; thread-safe themselves). lock_fd holds an
 * flock(2) on <dir>/lock against other processes, not threads. The
 * catalog and the cache have their own internal locks; vs.refresh_lock
 * is the only one of ours held while calling into them.
 */
#ifndef DCR_READER_INT_H
#define DCR_READER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "cache.h"
#include "catalog.h"
#include "common.h"
#include "hash.h"
#include "layout.h"
#include "manifest.h"
#include "reader.h"
#include "sign.h"
#include "wq.h"

/* Fetches and builds in flight: S3 waits on the network, a directory
 * store on direct reads of base chunks (cache.c); both overlap waits. */
#define FETCH_THREADS_DEFAULT 8
#define READAHEAD_DEFAULT ((uint64_t)32 << 20)
#define COALESCE_MAX_DEFAULT (8u << 20)
#define COALESCE_GAP (64u << 10) /* bytes between frames worth reading */
#define RA_STREAMS 32            /* files whose last read is remembered */
#define RA_QUEUE 256             /* queued read-ahead jobs */
#define RA_JOB_BYTES (4u << 20)  /* about one coalesced GET per job */
#define RA_JOB_MAX 64            /* chunks per job */
#define FETCH_THREADS_MAX 64
#define CODEC_POOL_MAX 16
/* Frame fetch buffers kept for reuse (struct rcodecs), and the largest
 * kept. */
#define RUNBUF_POOL_MAX 64
#define RUNBUF_KEEP_MAX ((size_t)16 << 20)
/* Hex digits of the store-URL hash naming the per-store directory. */
#define STORE_ID_LEN 16
/* A failure to read the same manifest is logged at most this often. */
#define FETCH_LOG_INTERVAL_NS ((int64_t)600 * 1000000000)
#define FETCH_LOG_SLOTS 8
/* A version given up as corrupt is looked for again after this long. */
#define BAD_RETRY_NS_DEFAULT ((int64_t)60 * 1000000000)
/* versions/ is listed whole (identity checks) this often by default. */
#define RELIST_NS_DEFAULT ((int64_t)60 * 1000000000)
/* A chunk whose read timed out fails again at once for this long. */
#define FAILED_MEMO_NS ((int64_t)1000 * 1000000)

/*
 * One known version. The tree (m, entries, info) is built lazily, and
 * with max_trees unloaded again (trees_trim) when nobody holds it: not
 * pinned through dcr_reader_version, and the reader idle.
 */
struct rver {
	uint64_t v;
	/* Which index of v this is in this reader: 0, raised by one each
	 * time v is re-indexed (reader_replace_version). Keys the chunk
	 * reference blocks and the cache (dcr_cache_key.gen). Immutable. */
	uint32_t gen;
	/* dcr_version_info.tree: 0 when v is first indexed, one more than
	 * the tree it replaces (or than the newest tree of v on the
	 * graveyard) when indexed with other content, kept by a re-encoding
	 * replace. Immutable. */
	uint32_t tree;
	/* Replaced or dropped: no longer in vers but on the graveyard
	 * (kept until close, so pointers stay valid); its reference
	 * lookups fail with -ESTALE. Set once, before the catalog
	 * changes. */
	atomic_bool dead;
	/* Replaced by the same tree encoded anew (a layout generation):
	 * a read that met -ESTALE on it may simply start again. Set
	 * before dead. */
	atomic_bool reencoded;
	struct rver *next_dead; /* graveyard link; under lock */
	/* The store object it was indexed from; under refresh_lock
	 * (written and read by refreshes only). */
	struct dcr_catalog_ident id;
	/* Indexed from a probe (no listing, so id.obj_mtime_ns unknown):
	 * the manifest object's last DCR_HASH_LEN bytes, its SHA-256 of
	 * everything before them. The first listing that shows the same
	 * size then checks those bytes alone (a ranged GET) instead of
	 * fetching the manifest again only to learn its time. In memory
	 * only; under refresh_lock as id. */
	bool has_mtail;
	uint8_t mtail[DCR_HASH_LEN];
	uint64_t parent;
	int64_t ctime_ns;
	uint32_t chunk_size;
	uint32_t nfiles;
	/* Provenance (rtrust.c), set when the rver is made, from the
	 * manifest as committed (versions/<v>): its check (has_check
	 * false: unknown, a row indexed before catalog schema 4), the
	 * committed parent, what its signature check found for this store
	 * and trust set (enum dcr_sig_status), the signer's key, the
	 * parent check it binds. Immutable. */
	bool has_check;
	uint8_t check[DCR_HASH_LEN];
	uint64_t cparent;
	uint8_t sig;
	uint8_t pub[DCR_SIG_PUB_LEN];
	uint8_t pcheck[DCR_HASH_LEN];
	/* Indexed from a layout's re-encoding (id.has_ehash). Immutable. */
	bool encoded;
	/* With a trust set: whether this encoding is authentic (rtrust.c),
	 * so that chunks whose chains hold only such versions are proven
	 * the fast way; without one: unused (always fast). Atomic: read
	 * by the read path, written by trust_judge. */
	atomic_bool fast;
	bool logged;     /* its rejection was logged; under lock */
	bool logged_pin; /* a child's binding it fails was logged; lock */
	bool loaded;
	unsigned pins;  /* dcr_reader_version holders; under lock */
	uint64_t used;  /* use_clock at the last use (LRU); under lock */
	struct dcr_manifest m;    /* files only: no chunks, no packs */
	struct dcr_entry *entries;
	struct dcr_version_info info;
};

/* A file being read sequentially (see ra_note). */
struct ra_stream {
	bool used;
	uint64_t v;
	uint32_t idx;
	uint64_t next_off; /* where the furthest read so far ended */
	uint64_t queued;   /* chunks below this were queued for read-ahead */
	uint64_t stamp;    /* LRU */
	uint32_t hits;     /* read-ahead jobs in a row that found all cached */
	uint32_t skipped;  /* groups not queued since the last probe */
	uint64_t skip_from; /* first chunk skipped; UINT64_MAX: none */
};

/*
 * Reading a version that is already cached, read-ahead has nothing to
 * do but costs a thread wake-up per job. After RA_HITS_QUIET jobs in a
 * row found every chunk cached, only one group in RA_PROBE is queued (a
 * probe); a job or a read that has to build a chunk resumes it fully.
 */
#define RA_HITS_QUIET 4
#define RA_PROBE 8

/*
 * Chunk references are looked up a block at a time: one catalog query
 * for REF_BLOCK neighbours, kept in REF_SLOTS blocks (LRU, ~0.6 MiB), so
 * a sequential reader costs one query per REF_BLOCK chunks instead of
 * one per chunk, and readers do not queue on the catalog lock.
 */
#define REF_BLOCK 256
#define REF_SLOTS 32

struct refblk {
	uint64_t v, first, stamp;
	uint32_t gen; /* rver.gen of the version the block was read for */
	uint32_t file;
	uint32_t n; /* references held; 0 = unused slot */
	struct dcr_catalog_chunk refs[REF_BLOCK];
};

/* A chunk of a file of a version: where one is materialized (and named
 * in log lines), and which one a chunk in memory was built as. */
struct where {
	const struct rver *rv;
	uint32_t file;
	uint64_t chunk;
};

/*
 * The chunk table (rchunks.c): one refcounted entry per chunk content
 * (SHA-256 and length) in memory, after squashfuse's cache entry. Its
 * lifecycle:
 *
 *   loading    one reader (the leader) builds it; readers of the same
 *              content join it and wait on its condition variable;
 *   ready      data holds the verified chunk; kept after its last
 *              reference ("hot", LRU, up to the budget in bytes and
 *              HOT_SLOTS entries) unless built for a prefetch (cold);
 *   failed     the build failed: unlisted at once (the next reader leads
 *              a new attempt); or a foreground read of it ran out of
 *              read_timeout (cent_failed_until): listed until @until, as the kernel asks again at once
 *              (its read-ahead request failed, then the read's own), and
 *              joins then fail at once instead of costing a second
 *              read_timeout;
 *   persisted  (a flag) written to the cache as @w, by the leader or a
 *              write-behind thread; a settling prefetch waits for it.
 *
 * Chunks just materialized stay hot because read-ahead builds chunks a
 * little before the reader asks for them, and the cache files are
 * written around the page cache (DCR_CACHE_PUT_DIRECT), so a first read
 * fills neither the page cache with a second copy of the model nor
 * fresh pages to copy it into. Chunks a prefetch builds are not kept:
 * they are written through the page cache, where the reads that follow
 * find them, and would only fill the hot set with a second copy of each
 * new version. An entry that is neither (unlisted) stays idle as a free
 * one, at the old end of the LRU, and a new entry takes the oldest idle
 * one when it is free or the budget is reached: the buffers (aligned to
 * DCR_CACHE_ALIGN) are recycled, never handed back to the system while
 * reads go on, and the idle ones, hot or free, hold at most the budget.
 */
#define HOT_SLOTS 256
#define HOT_BUDGET_MIN ((uint64_t)64 << 20)
#define CTAB_BUCKETS 1024

enum cent_state { CENT_LOADING, CENT_READY, CENT_FAILED };

struct cent {
	struct cent *next;          /* bucket chain */
	struct cent *older, *newer; /* idle (refs == 0): hot, failed, free */
	uint8_t hash[DCR_HASH_LEN];
	uint32_t len;
	struct where w;             /* built (and cached) as; immutable */
	struct dcr_catalog_chunk ref; /* w's reference */
	uint8_t *data;              /* cap bytes; the chunk once ready */
	size_t cap;
	enum cent_state state;
	int rc;                     /* failed: the build's -errno */
	int64_t until;              /* failed: listed until (mono ns) */
	bool persisted;             /* in the cache as w, or failed */
	bool listed;                /* found by content (else referenced only) */
	bool quiet;                 /* led by read-ahead: a failure not logged */
	bool cold;                  /* built for a prefetch: not kept hot */
	unsigned refs;
	unsigned waiters;           /* on cv */
	pthread_cond_t cv;          /* broadcast when this entry changes */
};

struct ctab {
	pthread_mutex_t lock;
	struct cent *bucket[CTAB_BUCKETS];
	struct cent *oldest, *newest; /* idle entries: refs == 0, LRU */
	unsigned nidle;
	uint64_t idle_bytes, budget;  /* buffer bytes of the idle ones */
	unsigned nbusy;               /* loading, or not yet persisted */
};

/*
 * The versions (rversions.c; ridentity.c and rlayout.c work on them
 * too): what was listed and indexed, under refresh_lock, and the
 * version array with what hangs off it, under lock (see the top).
 */
struct rversions {
	pthread_mutex_t refresh_lock;
	bool listed;           /* "versions/" listed once in this process */
	int64_t relist_ns;     /* dcr_reader_opts.relist_ms; set at open */
	int64_t relist_at;     /* mono ns of the next whole listing */
	/* Raised at every replace or drop: the gen of the struct rvers
	 * created after it, and the cache fence of the version concerned
	 * (so keys of an older index are refused, never those of a newer
	 * one). Under refresh_lock. */
	uint32_t gen_clock;
	/* The store's layout generation as last read (core/layout.h) and
	 * whether layouts/ was listed in this process; under refresh_lock
	 * (rlayout.c). */
	struct dcr_layout layout;
	bool layout_listed;
	uint64_t layout_bad;        /* a damaged generation, passed over */
	int64_t layout_recheck_at;  /* mono ns: layout_recheck's next look */
	/* Last logged store failures, by version (0 = the listing), for
	 * rate-limiting; under refresh_lock. */
	struct {
		uint64_t v;
		int err;
		int64_t at_ns;
	} flog[FETCH_LOG_SLOTS];
	unsigned flog_next;

	pthread_mutex_t lock;
	struct rver **vers;    /* ascending by v */
	size_t nvers, capvers;
	/* Versions replaced or dropped (struct rver.dead), kept until
	 * close; their trees are unloaded by trees_trim like any other. */
	struct rver *graveyard;
	/* Changes not taken yet (dcr_reader_take_changes). */
	struct dcr_version_change *changes;
	size_t nchanges, capchanges;
	uint64_t *bad;         /* corrupt manifests, logged once, skipped */
	size_t nbad, capbad;
	uint64_t max_bad;
	int64_t bad_retry_ns;  /* when the bad list is forgotten (mono) */
	int64_t bad_retry_after; /* ns, from dcr_reader_opts.retry_bad_ms */
	struct dcr_tag *tags;
	size_t ntags;
	uint64_t use_clock;    /* stamps rver.used */
	uint32_t max_trees;    /* set at open; 0 = never unload */
	/* dcr_reader_opts.trust (NULL: every version shown) and the store
	 * id signatures must name (bind_store); set at open. */
	const struct dcr_trust *trust;
	char store_id[DCR_STORE_ID_MAX + 2];
	/* With a trust set: the highest version shown as latest, kept in
	 * the catalog too (rtrust.c); under lock. */
	uint64_t shown_max;
	uint64_t shown_saved;  /* what the catalog holds; under refresh_lock */
	/* "name version" of tags refused, logged once; under refresh_lock */
	char **tag_rejected;
	size_t ntag_rejected;
	/* tag objects found malformed at the last poll, each logged once
	 * per content (the SHA-256 of what was read); under refresh_lock */
	struct rbad_tag {
		char *name;
		uint8_t digest[32];
	} *tag_bad;
	size_t ntag_bad;
};



/* The chunk reference blocks (rchunks.c), under lock. */
struct rrefs {
	pthread_mutex_t lock;
	struct refblk *blk;    /* REF_SLOTS */
	uint64_t clock;
};

/* The pool of per-thread codec states (rmaterialize.c), under lock. */
struct rcodecs {
	pthread_mutex_t lock;
	struct dcr_codec *c[CODEC_POOL_MAX];
	int n;
	/* The frame fetches' buffers, kept for the next runs (reused
	 * pages, not fresh ones per batch): at most RUNBUF_POOL_MAX of
	 * at most RUNBUF_KEEP_MAX bytes each. */
	struct dcr_buf bufs[RUNBUF_POOL_MAX];
	int nbufs;
};

/* The read-ahead streams (rqueues.c), under lock. */
struct rstreams {
	pthread_mutex_t lock;
	struct ra_stream s[RA_STREAMS];
	uint64_t clock;
};

/* The background queues (rqueues.c), threads started on first use:
 * read-ahead jobs, their decoding, write-behind, par_for's pool. */
struct rqueues {
	struct dcr_wq *ra, *dq, *wq, *par;
};

/* A reader: its settings, and each part of the read path as its file
 * owns, initialises and tears it down. */
struct dcr_reader {
	struct dcr_store *st;
	char *dir; /* <cache_dir>/<id> */
	struct dcr_catalog *cat;
	struct dcr_cache *cache;
	uint64_t cache_budget;
	int fetch_threads;
	int threads;           /* the CPU-bound pools (dcr_reader_opts) */
	/* Chunks built for a reader go to the cache around the page cache
	 * (O_DIRECT) unless this is off: dcr_reader_set_cache_direct. */
	atomic_bool cache_direct;
	int64_t read_timeout_ns; /* dcr_reader_opts.read_timeout_ms */
	uint64_t readahead;     /* bytes; 0 = off */
	uint32_t coalesce_max;  /* bytes of one merged GET; <= 1 = no merging */

	int lock_fd;           /* flock on <dir>/lock for our lifetime */

	/* Reads in progress, and reads ever begun: trees_trim unloads
	 * nothing unless it saw none in progress, every queue idle and no
	 * read begun meanwhile (reader_idle). Atomics, no lock. */
	atomic_uint active;
	atomic_uint_fast64_t activity;

	struct rversions vs;   /* rversions.c */
	struct rrefs refs;     /* rchunks.c */
	struct ctab ct;        /* rchunks.c: the chunks in memory */
	struct rcodecs codecs; /* rmaterialize.c */
	struct rstreams ras;   /* rqueues.c */
	struct rqueues qs;     /* rqueues.c */
	/* The changes chunks were built with (read/dvrec.h), for the
	 * delta view; NULL unless dcr_reader_dvrec_enable. Set before
	 * reads; its own lock. */
	struct dcr_dvrec *dvrec;

	/* Statistics (dcr_reader_get_stats): relaxed atomics, no lock. */
	struct {
		atomic_uint_fast64_t reads, bytes_read, hits, misses;
		atomic_uint_fast64_t fetches, fetched, fetch_errors;
		atomic_uint_fast64_t materialized, verified, read_errors;
		atomic_uint_fast64_t rej_unsigned, rej_bad, rej_store;
		atomic_uint_fast64_t rej_untrusted, rej_tags, sha_proven;
		/* busy ns per stage (dcr_reader_stats) */
		atomic_uint_fast64_t busy_fetch, busy_decode, busy_write;
		atomic_uint_fast64_t busy_check;
		atomic_uint_fast64_t tag_errors;
	} stats;
};

/* Add @n to statistic @field of reader @r. */
#define STAT_ADD(r, field, n) \
	atomic_fetch_add_explicit(&(r)->stats.field, (n), memory_order_relaxed)

/* Add the time since @t0 (dcr_mono_ns) to busy statistic @field. */
#define BUSY_ADD(r, field, t0) \
	STAT_ADD(r, field, (uint64_t)(dcr_mono_ns() - (t0)))

/*
 * What one read asks of the read path, handed down explicitly (to the
 * batch, the threads that fetch and decode for it, and the store's get
 * op) rather than through thread-locals.
 */
struct rreq {
	/* CLOCK_MONOTONIC bound on the store GETs of the whole read (the
	 * foreground read's read_timeout); 0: none. */
	int64_t deadline;
	/* Speculative (read-ahead): its errors go to the debug log only;
	 * the read that really needs the chunk redoes it and logs. */
	bool quiet;
	/* Write the cache through the page cache (a prefetch). */
	bool pagecache;
	/* No destinations (dcr_reader_prefetch with no buffer): done once
	 * every chunk is in the cache, so the flights it joins must have
	 * ended, not only built their chunk. */
	bool settle;
	/* Rebuild from the chunk's chain (the scrub's repair of a chunk
	 * found rotten in a pinned slab, rscrub.c): its own place in the
	 * cache is neither read (the rotten copy: a failed check there
	 * would unlink the slab the kernel serves) nor written. */
	bool rebuild;
};

/* Log a read path error of request @q: at debug level if speculative. */
#define RERR(q, ...) \
	dcr_log((q)->quiet ? DCR_LOG_DEBUG : DCR_LOG_ERR, __VA_ARGS__)

/* ------------------------------------------------------------ chains */

/* One frame on a chunk's chain, newest first. */
struct step {
	struct rver *rv;
	uint32_t file;
	struct dcr_catalog_chunk ref;
	const uint8_t *data; /* the fetched frame (ref.len bytes), in a run */
	int rc;              /* the fetch's outcome */
};

struct chain {
	struct step *s;
	size_t n, cap;
	bool base_cached; /* out[] holds a cached ancestor chunk: */
	const struct rver *base_rv;
	uint32_t base_file;
	struct dcr_catalog_chunk base_ref;
};

#define WHERE_FMT "version %llu %s chunk %llu"
#define WHERE_ARGS(w)                                                    \
	(unsigned long long)(w)->rv->v, (w)->rv->m.files[(w)->file].path, \
		(unsigned long long)(w)->chunk

/* One chunk of a read: where it is and where its bytes go. */
struct piece {
	struct where w;
	struct dcr_catalog_chunk ref;
	uint32_t clen, coff;
	size_t n;
	uint8_t *dst; /* NULL: read-ahead, only cache the chunk */
};

/* ----------------------------------------------------------- batches */

/* A chunk of a batch. */
struct bchunk {
	struct piece *p;
	struct cent *e;
	bool leader;  /* we build it; else we wait for e (or skip it) */
	bool ready;   /* @out holds the verified chunk */
	bool due;     /* built for a prefetch: written by batch_finish,
			 with its neighbours (put_due) */
	uint8_t *out; /* where a leader builds it: e->data, or its place
			 in the cache (@slot) */
	struct dcr_cache_slot *slot; /* built in place (a prefetch): ended
					by put_due or batch_finish */
	struct chain ch;
	int rc;
};

/* A frame to fetch: step @s of chunk @c. */
struct fitem {
	struct step *s;
	size_t c;
};

/* One ranged GET covering items [first, first+n) of one pack. */
struct run {
	size_t first, n;
	uint64_t off, len;
	struct dcr_buf buf;
};

struct batch {
	struct dcr_reader *r;
	struct rreq q; /* the read it serves */
	struct bchunk *c;
	size_t nc;
	struct fitem *it;
	size_t nit;
	struct run *runs;
	size_t nruns;
};

/* ------------------------------------------------- reader.c: reads */

/* A read (or a scrub's step) begins and ends: while any is in progress
 * no tree is unloaded (trees_trim). */
void read_enter(struct dcr_reader *r);
void read_leave(struct dcr_reader *r);

/* ------------------------------------------- rversions.c: versions */

/* Free @rv (NULL is fine). Not thread-safe: only at close. */
void rver_free(struct rver *rv);

/* Set up r->vs from @opts (no version yet; load_catalog loads them), and
 * free it with every version, change, tag and bad mark. At open / at
 * close. */
void versions_init(struct dcr_reader *r, const struct dcr_reader_opts *opts);
void versions_close(struct dcr_reader *r);

/* The loaded version @v (tree built on first use), or -ENOENT; other
 * -errno if its tree cannot be loaded. The pointer stays valid until
 * close. Thread-safe (takes lock). */
int get_ver(struct dcr_reader *r, uint64_t v, struct rver **out);

/* Fill the version fields of @s (latest, versions, trees_loaded).
 * Thread-safe (lock). */
void versions_stats(struct dcr_reader *r, struct dcr_reader_stats *s);

/* Unload the least recently used trees beyond max_trees, if the reader
 * is idle (see struct rver). Called at the end of a refresh. */
void trees_trim(struct dcr_reader *r);

/* State of one refresh: the last manifest indexed, kept whole so that
 * the next version can be checked against it without reloading it. */
struct refresh_ctx {
	struct dcr_manifest last;
	bool have_last;
	/* a seed of some versions only (dcr_reader_seed): a lineage
	 * parent not indexed is expected, not worth a warning */
	bool partial;
};

/*
 * reader_check_manifest - the checks of a manifest fetched for @key
 * beyond decoding: valid, parent older, consistent with its parent.
 * 0, -ENOMEM, or another -errno (logged, naming @key). rversions.c.
 */
int reader_check_manifest(struct dcr_reader *r, struct refresh_ctx *ctx,
			  const struct dcr_manifest *m, const char *key);

/*
 * Layouts (rlayout.c; core/layout.h). Both under refresh_lock.
 * layout_apply - version @m (just fetched from versions/<n>, checked)
 * as the layout encodes it: if the layout names a manifest object for
 * it that is valid, consistent with its base and holds exactly @m's
 * content, @m is replaced by it and @id records it (ehash); else @m
 * stays (logged). @given: that manifest object as a store view fetched
 * it (sview.h), or NULL (fetched here). 0, or -errno of a transient
 * store failure or -ENOMEM (the version is retried at the next refresh).
 * layout_refresh - read a newer layout generation if there is one and
 * re-encode every known version whose indexed encoding is not the one
 * it names (reader_replace_version: same tree, cached chunks kept).
 * 0 or -errno (a listing or fetch that failed; retried next time).
 */
int layout_apply(struct dcr_reader *r, struct refresh_ctx *ctx,
		 struct dcr_manifest *m, struct dcr_catalog_ident *id,
		 const struct dcr_manifest *given);
int layout_refresh(struct dcr_reader *r, struct refresh_ctx *ctx);

/*
 * layout_recheck - a read of @rv failed (EIO): the frames of the layout
 * it was indexed under may be gone (gc collects what a newer generation
 * replaced; a generation may have been missed). Lists layouts/ (at most
 * once per LAYOUT_RECHECK_NS) and re-encodes what a newer generation
 * changes, as a refresh would. True if @rv has been re-encoded (now or
 * meanwhile): the read may start again. Takes refresh_lock; the caller
 * holds no lock.
 */
#define LAYOUT_RECHECK_NS ((int64_t)1000 * 1000000)
bool layout_recheck(struct dcr_reader *r, const struct rver *rv);

/*
 * reader_replace_version - make the decoded, validated manifest @m the
 * index of the known version m->version, indexed from the store object
 * @id: for a manifest that changed in the store, and for a later change
 * that re-encodes a version (same tree and bytes, other frames or
 * parent: compaction). Caller holds refresh_lock (and nothing else).
 *
 * What it does, in this order: compares @m's tree (chunk size, and
 * every file's path, type, mode, size, mtime and SHA-256) with the
 * indexed one; marks the old struct rver dead (its reference lookups
 * fail with -ESTALE from then on, so a read in flight finishes on the
 * old tree or fails, never mixes the two); if the tree differs, drops
 * the version's cache slabs and fences its old keys
 * (dcr_cache_drop_version), else keeps them (same chunks); replaces
 * the catalog's index in one transaction (dcr_catalog_replace_version);
 * installs a new struct rver (gen + 1) and moves the old one to the
 * graveyard (valid until close); queues a dcr_version_change. Logs at
 * error level when the tree changed (naming @why and both hashes), at
 * info level otherwise.
 *
 * Returns 1 (tree changed), 0 (same tree, re-encoded), -ENOENT if the
 * version is not known, or -errno (the catalog failed: the version is
 * then dropped from memory and the catalog, and indexed again by the
 * next listing).
 */
int reader_replace_version(struct dcr_reader *r, const struct dcr_manifest *m,
			   const struct dcr_catalog_ident *id,
			   const char *why);

/* Drop the known version @v (gone from the store): out of vers onto the
 * graveyard (dead), its cache slabs dropped and fenced, its catalog
 * rows removed, a dcr_version_change queued, logged at info level.
 * Caller holds refresh_lock. 0 or -ENOENT. */
int reader_drop_version(struct dcr_reader *r, uint64_t v);

/*
 * Trust (rtrust.c; its contract heads the file).
 * rver_prov - give new @rv its provenance: the manifest's check
 *   (@has_check false: unknown), the committed parent, the signature
 *   block (@has_sig), and whether it is a layout's encoding; with a
 *   trust set the signature is checked here. Before @rv is shared.
 * rver_shown - whether @rv is shown (always, without a trust set).
 *   Caller holds lock (or owns @rv).
 * rver_signer - the signer to show for loaded manifest @m (sign.h).
 * trust_latest - the latest version to show. Caller holds lock.
 * trust_judge - log and count rejections, recompute rver.fast, keep
 *   the latest shown in the catalog. Caller holds refresh_lock (or is
 *   opening), not lock.
 * trust_open - at open, after load_catalog: the latest shown before,
 *   then trust_judge. 0 or -errno.
 * trust_bind_dir - at open, before the catalog: empty (with @drop) a
 *   cache directory a mount without a trust set used, or mark it as
 *   such. 0 or -errno (logged).
 */
void rver_prov(struct dcr_reader *r, struct rver *rv, bool has_check,
	       const uint8_t *check, uint64_t cparent, bool has_sig,
	       const struct dcr_sig *sig, bool encoded);
bool rver_shown(const struct dcr_reader *r, const struct rver *rv);
const char *rver_signer(const struct dcr_reader *r,
			const struct dcr_manifest *m, char *buf);
uint64_t trust_latest(struct dcr_reader *r);
void trust_judge(struct dcr_reader *r);
int trust_open(struct dcr_reader *r);
int trust_bind_dir(struct dcr_reader *r, int (*drop)(struct dcr_reader *));

/* Load the versions and tags recorded in the catalog: 0 or -errno.
 * Only at open, before the reader is shared. */
int load_catalog(struct dcr_reader *r);

/*
 * Shared by rversions.c (refreshes) and ridentity.c (identity checks,
 * re-index, drop):
 * vers_lower / vers_find - the index of the first known version >= @v /
 *   the known version @v or NULL; caller holds lock.
 * mark_bad - remember @v as corrupt: neither fetched nor logged again
 *   until bad_retry_after has passed; takes lock itself.
 * rver_new - a struct rver for a version indexed as given (NULL: ENOMEM).
 * fetch_manifest - fetch and decode versions/<n> (@key) with retries,
 *   its identity into @id and, if @tail, its last DCR_HASH_LEN bytes
 *   (the manifest's own SHA-256 of the rest: see rver.mtail) into
 *   @tail: 0, -ENOENT, -EBADMSG (logged), -errno.
 * hash_prefix - "0123456789ab.." of @id's manifest hash, or "unknown".
 * verify_version - check known version @rv against its listing @obj
 *   (re-index or drop it when the store's manifest changed): 0 or -errno.
 */
size_t vers_lower(const struct dcr_reader *r, uint64_t v);
struct rver *vers_find(const struct dcr_reader *r, uint64_t v);
void mark_bad(struct dcr_reader *r, uint64_t v);
struct rver *rver_new(uint64_t v, uint64_t parent, int64_t ctime_ns,
		      uint32_t chunk_size, uint32_t nfiles);
int fetch_manifest(struct dcr_reader *r, uint64_t v, const char *key,
		   struct dcr_manifest *m, struct dcr_catalog_ident *id,
		   uint8_t *tail);
const char *hash_prefix(const struct dcr_catalog_ident *id, char out[16]);
int verify_version(struct dcr_reader *r, struct refresh_ctx *ctx,
		   struct rver *rv, const struct dcr_obj_info *obj);

/* The dcr_cache_put flags of a chunk built for a reader (not for
 * prefetch, which goes through the page cache). */
static inline unsigned cache_put_flags(struct dcr_reader *r)
{
	return atomic_load_explicit(&r->cache_direct, memory_order_relaxed) ?
	       DCR_CACHE_PUT_DIRECT : 0;
}

/* A chunk cache answer as the read path takes it: a local I/O error of
 * the cache (logged and counted there, dcr_cache_stats.io_errors) is a
 * miss, so that the chunk is built from the store again instead of the
 * read failing; -ENOMEM and the other answers stay themselves. */
static inline int cache_answer(int ret)
{
	return ret < 0 && ret != -ENOMEM ? -ENOENT : ret;
}

/* ------------------------------- rchunks.c: references, buffers, hot */

/* Set up the reference blocks @f: 0 or -ENOMEM (refs_close frees what
 * was made). At open / at close. */
int refs_init(struct rrefs *f);
void refs_close(struct rrefs *f);

/* The reference of chunk @idx of file @file (manifest index) of
 * version @rv into @out, through the block cache: 0, -ESTALE if @rv was
 * replaced or dropped meanwhile, or -errno. Thread-safe (refs.lock). */
int ref_get(struct dcr_reader *r, const struct rver *rv, uint32_t file,
	    uint64_t idx, struct dcr_catalog_chunk *out);

/* Serve piece @p (its reference looked up) of request @q from a ready
 * entry: copy its slice to p->dst (none without one); with q->settle,
 * once the entry is in the cache. A chunk of the same content built as
 * another version's or file's is also stored in the cache as @p's
 * (piece_put), so that every chunk a read served is in its own file's
 * slab. 0, or -ENOENT if no entry is ready. Thread-safe. */
int cent_serve(struct dcr_reader *r, const struct rreq *q, const struct piece *p);

/* Store @data, the verified content of piece @p, in the cache as @p's
 * chunk, as request @q writes (through the page cache for a prefetch). */
void piece_put(struct dcr_reader *r, const struct rreq *q,
	       const struct piece *p, const uint8_t *data);

/* Whether @a and @b are the same chunk of the same file of the same
 * version. */
static inline bool where_eq(const struct where *a, const struct where *b)
{
	return a->rv == b->rv && a->file == b->file && a->chunk == b->chunk;
}

/* Fill @k, the cache key of chunk @chunk of file @file of @rv whose
 * reference is @ref (which must outlive the key). No locks. */
void cache_key(struct dcr_cache_key *k, const struct rver *rv,
	       uint32_t file, uint64_t chunk,
	       const struct dcr_catalog_chunk *ref);

/* Copy the whole verified chunk @k into @out from wherever this
 * instance has it (a ready entry, the cache): 0, -ENOENT, or -errno.
 * Thread-safe. */
int base_get(struct dcr_reader *r, const struct dcr_cache_key *k,
	     uint8_t *out);

/* ---------------------------------------- rchunks.c: the chunk table */

/* Make the empty table @t, keeping up to @budget bytes hot; ctab_destroy
 * frees it and every entry (at close, nothing referenced). */
void ctab_init(struct ctab *t, uint64_t budget);
void ctab_destroy(struct ctab *t);

/* Whether some entry is loading or not yet in the cache (its struct rver
 * is then in use). Thread-safe. */
bool ctab_busy(struct dcr_reader *r);

/*
 * cent_join - the entry of piece @p's content for request @q, into *@out
 * with a reference: 1 if new and ours to build (loading, with a buffer
 * of p->clen bytes; cent_publish it), 0 if joined (cent_wait
 * for it), -EIO if it failed a moment ago (logged as @q says; *@out
 * NULL), -ENOMEM. Thread-safe.
 */
int cent_join(struct dcr_reader *r, const struct rreq *q,
	      const struct piece *p, struct cent **out);

/* Before the leader publishes @e (loading) without its bytes in
 * e->data (built in the cache's place, rmaterialize.c): true if it holds
 * the only reference, and then @e is unlisted, so that no one joins it
 * or reads its buffer; false if others hold it: the leader fills e->data
 * for them first. Thread-safe. */
bool cent_unlist_alone(struct dcr_reader *r, struct cent *e);

/* The leader's outcomes for @e, each waking only @e's waiters: ready
 * (@rc 0), with @persisted once in the cache (again, when a writer put
 * it there); or failed with -errno @rc (unlisted: the next reader leads
 * a new attempt). Thread-safe. */
void cent_publish(struct dcr_reader *r, struct cent *e, int rc,
		  bool persisted);

/* A foreground read of piece @p (its reference looked up) ran out of
 * read_timeout: joins of its content fail at once until @until (mono
 * ns), unless an entry of it is being built or ready. Thread-safe. */
void cent_failed_until(struct dcr_reader *r, const struct piece *p,
		       int64_t until);

/* Wait until @e is built (with @settle: and in the cache): 0 if ready,
 * else the leader's -errno. Thread-safe. */
int cent_wait(struct dcr_reader *r, struct cent *e, bool settle);

/* Take another reference to referenced @e / drop one (NULL accepted):
 * the last keeps it hot, failed-until, or recycles it. Thread-safe. */
void cent_hold(struct dcr_reader *r, struct cent *e);
void cent_release(struct dcr_reader *r, struct cent *e);

/* An unlisted entry with a buffer for @len bytes, one reference (NULL
 * when out of memory), and what becomes of it: cent_keep lists it
 * (unless the content is listed already) as the verified, cached chunk
 * of piece @p and drops the reference; cent_release recycles it.
 * Thread-safe. */
struct cent *cent_new(struct dcr_reader *r, uint32_t len);
void cent_keep(struct dcr_reader *r, struct cent *e, const struct piece *p);

/* ------------------------------------- rmaterialize.c: chains, batches */

/* Set up the empty codec pool @cp / free it and its codecs. At open /
 * at close. */
void codecs_init(struct rcodecs *cp);
void codecs_close(struct rcodecs *cp);

/* Look up piece @p's reference and serve it from the hot set or the
 * cache: 0 on a hit, -ENOENT on a miss (p->ref filled), else -errno
 * (logged as @q says); without p->dst, 1 if a cached chunk was proven
 * now. Thread-safe. */
int piece_fast(struct dcr_reader *r, const struct rreq *q, struct piece *p);

/* Run @fn(@arg, 0..@n-1) on up to @nthreads threads: the caller plus
 * idle threads of r->par. Thread-safe. */
void par_for(struct dcr_reader *r, int nthreads, size_t n,
	     dcr_wq_par_fn fn, void *arg);

/* par_for body: fetch run @i of batch @arg and point its steps at
 * their frames (or set their rc). */
void fetch_run(void *arg, size_t i);

/* Join or lead every chunk of @b (b->r, b->nc, b->c allocated by the
 * caller) for pieces @ps, resolve the chains and plan the GETs. */
void batch_prepare(struct batch *b, struct piece *ps);

/* Decode, verify and cache what @b planned and fetched, copy the
 * slices out, and free @b's parts (b->c included): 0 or the first
 * -errno. */
int batch_finish(struct batch *b, int nthreads);

/* Materialize the @n missed chunks @ps (one batch, coalesced, on up to
 * @nthreads threads) for request @q and copy each slice to its
 * destination: 0 or the first -errno. With q->settle (pieces without
 * destinations, for a prefetch) it returns once every chunk is in the
 * cache. Thread-safe. */
int materialize_batch(struct dcr_reader *r, struct piece *ps, size_t n,
		      int nthreads, const struct rreq *q);

/* ----------------------------------------------- reader.c: the facade */

/* Whether no read is in progress and every queue is idle, with no chunk
 * in flight: then no tree is in use but those pinned. Thread-safe (each
 * queue's lock, one at a time). */
bool reader_idle(struct dcr_reader *r);

/* ---------------------------------- rqueues.c: the background queues */

/* Make the queues (no thread starts yet) and the read-ahead streams:
 * 0 or -errno. At open; on failure queues_close frees what was made. */
int queues_open(struct dcr_reader *r);

/* Wait until the queues are idle (dcr_reader_sync). Thread-safe. */
void queues_sync(struct dcr_reader *r);

/* Stop the queues and free them: queued read-ahead jobs are dropped,
 * queued decodes and writes done first. At close. */
void queues_close(struct dcr_reader *r);

/* Queue the ready entry @e for a writer thread (which takes a reference
 * and marks it persisted): true if queued, false if the caller must
 * write it. Thread-safe. */
bool wq_submit(struct dcr_reader *r, struct cent *e);

/* Note whether a job (or a read) on (@v, @idx) found all it needed.
 * Thread-safe (ras.lock). */
void ra_hits(struct dcr_reader *r, uint64_t v, uint32_t idx, bool hit);

/* Note a read of [@off, @end) of entry @idx of @rv; queue read-ahead if
 * it is sequential (what a full queue refuses, a later read queues), its
 * chunks to be written through the page cache with @pagecache.
 * Thread-safe (ras.lock). */
void ra_note(struct dcr_reader *r, struct rver *rv, uint32_t idx,
	     uint64_t off, uint64_t end, bool pagecache);

#endif /* DCR_READER_INT_H */
