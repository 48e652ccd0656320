/* SPDX-License-Identifier: MIT */
/*
 * reader.h - the read path (DESIGN.md section 6): versions, their trees,
 * and bytes materialized lazily from a local chunk cache plus frames
 * fetched from the store, verified bit-exactly.
 *
 * A reader owns a SQLite catalog and a chunk cache in @cache_dir; both
 * survive a restart. All functions are thread-safe unless noted.
 */
#ifndef DCR_READER_H
#define DCR_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache.h" /* DCR_CACHE_SIZE_DEFAULT */
#include "manifest.h"
#include "objstore.h"

struct dcr_reader;

struct dcr_reader_opts {
	const char *cache_dir;  /* required; created (mode 0700) if absent */
	uint64_t cache_size;    /* byte budget for cached chunks; 0 = default */
	/* Threads of every CPU-bound pool of the reader: decoding and
	 * proving chunks, writing them to the cache, checking cache files,
	 * dcr_reader_par_for; 0 = the CPU budget (core/cpus.h). */
	int threads;
	/* Requests to the store in flight for one read, and read-ahead
	 * threads; 0 = default: the larger of 8 and @threads (capped at
	 * 64), so that every CPU has a fetched frame to decode. */
	int fetch_threads;
	/* Bytes materialized in the background ahead of a sequential reader
	 * (reads starting at 0 or where the last read of the file ended);
	 * 0 = default (32 MiB), < 0 = no read-ahead. */
	int64_t readahead;
	/* Largest ranged GET that merges frames lying next to each other in
	 * one pack; 0 = default (8 MiB), 1 = one GET per frame. */
	uint32_t coalesce_max;
	/* A version given up as corrupt (its manifest failed to decode
	 * DCR_MANIFEST_TRIES times) is looked for again this long after;
	 * 0 = default (60 s). */
	uint32_t retry_bad_ms;
	/* Bound on one read's fetches from the store, all of them together
	 * (a read may need several GETs: a chain, a retry after read-ahead
	 * failed); past it the read fails with -EIO. 0 = none (each store
	 * operation is bounded by the store's own timeout only). */
	uint32_t read_timeout_ms;
	/* The store's identity if the caller has just read it
	 * (dcr_store_check); NULL: the reader asks the store itself. */
	const struct dcr_store_info *store_info;
	/* Without @store_info: what the caller's dcr_store_check returned
	 * when the store could not be asked (-errno; 0: the reader asks it
	 * itself). The reader does not ask again: it starts from a cache
	 * directory already bound to the store, or fails with this. */
	int store_err;
	/* Trees of versions kept in memory while nobody holds them (the
	 * newest version's is always kept; the least recently used others
	 * are unloaded when the reader is idle and loaded again from the
	 * catalog on use). 0 = keep every tree until close, so that the
	 * pointers of dcr_reader_version stay valid without
	 * dcr_reader_version_put. */
	uint32_t max_trees;
	/*
	 * How often a refresh lists versions/ whole (between listings it
	 * only probes for n+1): a listing also checks the identity of
	 * every known version - a manifest whose object changed in the
	 * store (size or mtime differ from what was indexed, then its
	 * SHA-256) is re-indexed, a version gone from the store (gc, an
	 * admin) is dropped; see dcr_reader_take_changes. The first
	 * refresh always lists. 0 = default (60 s).
	 */
	uint32_t relist_ms;
	/*
	 * Trust only versions signed by these keys (sign.h, -o trust=):
	 * a version unsigned, badly signed, signed by another key or for
	 * another store or number, or whose signature binds another
	 * parent manifest than the one indexed, is not shown (versions,
	 * version, brief, latest); a tag not signed by one of them is
	 * ignored; the latest version shown never goes back to a lower
	 * number (not even across mounts of this cache directory); chunks
	 * of versions re-encoded by a layout (unsigned) are proven by
	 * their SHA-256, which the signed manifest holds. The reader does
	 * not own it; it must outlive the reader. NULL: trust the store.
	 */
	const struct dcr_trust *trust;
	/*
	 * The mount point this reader serves (the daemon's), or NULL. It is
	 * written in the cache directory's lock file beside the pid, so that
	 * a reader that finds the directory taken by a daemon whose mount is
	 * gone (an unmount a moment ago; the daemon is exiting) waits for
	 * it, DCR_LOCK_WAIT_MS at most, instead of failing at once.
	 */
	const char *mountpoint;
};

/* How long a reader waits for the cache directory's lock held by a
 * daemon whose mount is gone (it exits within a second of its unmount). */
#define DCR_LOCK_WAIT_MS 5000

/** One directory or regular file of a version, as the filesystem shows it. */
struct dcr_entry {
	const char *path;   /* relative path ("a/b/c"); "" for the root */
	const char *name;   /* last component; "" for the root */
	uint32_t parent;    /* index of the parent directory entry (root: 0) */
	uint8_t type;       /* DCR_FT_REG or DCR_FT_DIR (manifest.h) */
	uint32_t mode;      /* permission bits */
	uint64_t size;
	int64_t mtime_ns;
	uint32_t first_child; /* dirs: index of first child or UINT32_MAX */
	uint32_t next_sibling;/* next entry in the same dir or UINT32_MAX */
};

/**
 * A version's tree. Entry 0 is the root directory; the others follow in
 * path order. Immutable and valid until dcr_reader_close.
 */
struct dcr_version_info {
	uint64_t version;
	/* Names this tree of the version in this reader: 0 when the
	 * version is first indexed, one more each time it is re-indexed
	 * with other content (changed in the store; also when a version
	 * dropped comes back), the same after a re-encoding (a layout
	 * generation). Small and never reused for another tree of the
	 * version, so a filesystem may carry it in inode numbers. For
	 * dcr_reader_read_tree. */
	uint32_t tree;
	uint64_t parent;
	int64_t ctime_ns;
	uint32_t chunk_size;
	uint32_t nentries;
	const struct dcr_entry *entries;
	/* Provenance (sign.h): the manifest's format and check, its
	 * signer as shown ("unsigned", a key id, or "invalid" for a
	 * signature that does not verify for this store and number) and
	 * the trainer's metadata (sorted by key). */
	uint32_t format;
	uint8_t check[DCR_HASH_LEN];
	char signer[24];
	uint32_t nmeta;
	const struct dcr_meta *meta;
};

struct dcr_tag {
	char *name;
	uint64_t version;
};

/**
 * dcr_reader_open - open (or create) the catalog and cache in
 * opts->cache_dir for @st. The reader does not own @st; it must outlive
 * the reader. Does not contact the store: call dcr_reader_refresh.
 * The per-store directory is locked (flock on its "lock" file, which
 * holds the pid) until dcr_reader_close: a second reader of the same
 * store and cache_dir, in any process, fails with -EBUSY and the message
 * "cache directory X is in use by another dcrfs (pid N)". A corrupt
 * catalog is set aside and rebuilt (see dcr_catalog_open).
 */
int dcr_reader_open(struct dcr_store *st, const struct dcr_reader_opts *opts,
		    struct dcr_reader **out);

/** Close and free; NULL accepted. No other call may be running. */
void dcr_reader_close(struct dcr_reader *r);

/**
 * dcr_reader_refresh - look for versions published since the last call
 * (and on the first call, all of them) and for tag changes; fetch, verify
 * and index new manifests. *@latest (may be NULL) receives the newest
 * version (0 if the store is empty). A corrupt manifest, or one that can
 * never be read (a directory, over the size limit, access refused to
 * that key), is logged once, naming its key, and that version is left
 * out; the versions after it are still found. Every relist_ms (and at
 * the first call) the refresh lists versions/ whole and checks the
 * versions it knows: one whose manifest changed in the store is
 * re-indexed (logged at error level, naming both manifest hashes; its
 * cached chunks are dropped and the old tree is never served again),
 * one gone from the store is dropped (logged at info level). A transient failure (EIO,
 * a timeout) of one manifest is retried at every later refresh, logged
 * at most every few minutes. Returns 0 or -errno if the store could not
 * be listed.
 */
int dcr_reader_refresh(struct dcr_reader *r, uint64_t *latest);

struct dcr_sview;

/**
 * dcr_reader_seed - instead of a first refresh, for a throwaway reader
 * (compaction's, the index's, the committer's cache rebuilding a
 * parent): index the versions of the store view @sv (sview.h; of the
 * store @r reads) from the manifests the view fetched, so that the store
 * is not listed or fetched again; its layout is the view's. @v 0: every
 * version of the view; else version @v and the versions its encoding is
 * built on (only those manifests are fetched, by the view). Each is
 * checked as a refresh checks it (dcr_reader_refresh: one that cannot be
 * had or is corrupt is logged and left out). Tags are not read. Call it
 * once, right after dcr_reader_open, before any refresh. 0 or -errno
 * (-ENOMEM, or the reader's catalog failed).
 */
int dcr_reader_seed(struct dcr_reader *r, struct dcr_sview *sv, uint64_t v);

/** A known version that a refresh re-indexed or dropped. */
struct dcr_version_change {
	uint64_t version;
	/* Entries of the tree served until then (inode numbers 0 ..
	 * old_nentries-1 of the version may be cached by a kernel). */
	uint32_t old_nentries;
	uint32_t old_tree;    /* its dcr_version_info.tree */
	bool gone;            /* dropped: no longer in the store */
	bool content_changed; /* re-indexed with another tree or bytes
				 (false: the same tree, encoded anew) */
};

/**
 * dcr_reader_take_changes - the versions re-indexed or dropped since
 * the last call, oldest first, into a malloc'ed array the caller frees
 * (*@changes NULL when there are none). For a filesystem that must
 * tell its kernel to forget what it cached of them. 0 or -ENOMEM.
 */
int dcr_reader_take_changes(struct dcr_reader *r,
			    struct dcr_version_change **changes, size_t *n);

/** Newest version known after the last refresh (0 = none). */
uint64_t dcr_reader_latest(struct dcr_reader *r);

/**
 * dcr_reader_versions - snapshot of the known version numbers, ascending,
 * into a malloc'ed array the caller frees. 0 or -ENOMEM.
 */
int dcr_reader_versions(struct dcr_reader *r, uint64_t **vs, size_t *n);

/**
 * dcr_reader_version - version @v's tree; -ENOENT if unknown. The tree
 * is held until dcr_reader_version_put (with max_trees 0: until close,
 * and the put may be left out).
 */
int dcr_reader_version(struct dcr_reader *r, uint64_t v,
		       const struct dcr_version_info **out);

/**
 * dcr_version_lookup - the index of the entry of tree @vi at relative
 * path @path ("a/b", no leading or trailing '/'), or 0 when there is
 * none ("" is the root, 0 too). A binary search: the entries after the
 * root follow in strictly increasing path order (the manifest's files
 * are validated so). Pure; thread-safe while @vi is held.
 */
uint32_t dcr_version_lookup(const struct dcr_version_info *vi, const char *path);

/**
 * dcr_reader_resolve - the version @name names, as the tools take it (a
 * number, a tag or "latest"), into *@v, among the versions this reader
 * shows (with a trust set: the trusted ones, and trusted tags). A name
 * that is not a known number is looked for after a refresh, so "latest"
 * and tags are what the store says now. 0; -ENOENT (logged, naming
 * @name, and with a trust set saying that untrusted versions are not
 * shown); -EINVAL for an empty name; or the refresh's -errno.
 */
int dcr_reader_resolve(struct dcr_reader *r, const char *name, uint64_t *v);

/** What is known of a version without its tree (dcr_reader_version_brief). */
struct dcr_version_brief {
	uint64_t parent;   /* the encoding's parent (what its frames are
			    * against; compaction may rebase it); 0: none */
	uint64_t cparent;  /* the parent it was committed against (its
			    * lineage, whatever compaction did); 0: none */
	uint32_t tree;     /* as dcr_version_info.tree */
	int64_t ctime_ns;
};

/**
 * dcr_reader_version_brief - version @v's parent, tree number and time
 * into @out without loading its tree (for listings over many versions:
 * /delta). 0, or -ENOENT if unknown. Thread-safe; cheap (one lock).
 */
int dcr_reader_version_brief(struct dcr_reader *r, uint64_t v,
			     struct dcr_version_brief *out);

/** What a version's manifest records of one of its files beyond its
 * tree entry (struct dcr_entry). */
struct dcr_file_meta {
	uint8_t digest[32];   /* dcr_file.sha256 as the manifest records it */
	uint32_t format;      /* the manifest's format (dcr_file_digest_kind) */
};

/**
 * dcr_reader_file_meta - the manifest's record of entry @idx of tree
 * @tree of version @v into @out: 0; -ESTALE if the version has another
 * tree now, -ENOENT for an unknown version or entry, -EISDIR for a
 * directory, or the reader's -errno loading the tree. Thread-safe.
 */
int dcr_reader_file_meta(struct dcr_reader *r, uint64_t v, uint32_t tree,
			 uint32_t idx, struct dcr_file_meta *out);

/** dcr_reader_version_put - release a tree of dcr_reader_version; NULL
 * accepted. Thread-safe. */
void dcr_reader_version_put(struct dcr_reader *r,
			    const struct dcr_version_info *vi);

/** dcr_reader_tags - snapshot of the tags; free with dcr_reader_tags_free. */
int dcr_reader_tags(struct dcr_reader *r, struct dcr_tag **tags, size_t *n);
void dcr_reader_tags_free(struct dcr_tag *tags, size_t n);

/**
 * dcr_reader_read - read [off, off+len) of entry @idx of version @v into
 * @dst. The missing chunks are fetched together: frames adjacent in a
 * pack share one ranged GET, independent GETs and decodes run on up to
 * fetch_threads threads, and a sequential read queues read-ahead.
 * Returns the number of bytes read (short only at end of file, 0 at or
 * past it) or -errno: -ENOENT unknown version/entry, -EISDIR for a
 * directory, -EIO when a needed object is missing or corrupt or a chunk
 * fails verification (logged once, naming the object). Never returns
 * unverified bytes.
 */
ssize_t dcr_reader_read(struct dcr_reader *r, uint64_t v, uint32_t idx,
			uint64_t off, void *dst, size_t len);

/**
 * dcr_reader_read_tree - dcr_reader_read of the tree @tree (the value
 * dcr_version_info.tree had when the caller looked the file up, e.g. at
 * open): -ESTALE if version @v has been re-indexed with other content
 * since, so that an entry index of the old tree never reads a file of
 * the new one.
 */
ssize_t dcr_reader_read_tree(struct dcr_reader *r, uint64_t v, uint32_t tree,
			     uint32_t idx, uint64_t off, void *dst, size_t len);

/** dcr_reader_read_exact's @tree: whatever tree @v has now. */
#define DCR_READER_ANY_TREE (-1)

/**
 * dcr_reader_read_exact - exactly [off, off+len) of entry @idx of
 * version @v (of tree @tree, as dcr_reader_read_tree, or
 * DCR_READER_ANY_TREE) into @dst: the one read-exact loop, for callers
 * that need whole ranges (compaction, the index, delta views, the
 * committer's cache). 0, -EIO if the file ends first (its size, or a
 * header read from it, said otherwise), or the -errno of
 * dcr_reader_read. Thread-safe as dcr_reader_read.
 */
int dcr_reader_read_exact(struct dcr_reader *r, uint64_t v, int64_t tree,
			  uint32_t idx, uint64_t off, void *dst, size_t len);

/**
 * dcr_reader_chunk_hash - the SHA-256 the manifest records for chunk
 * @chunk of entry @idx of tree @tree of version @v (the materialized
 * chunk's, what every read of it is proven against) into @hash, and the
 * version's chunk size into *@chunk_size. No chunk is read. For callers
 * that skip chunks equal in two versions (read/dview.c). 0, -ESTALE,
 * -ENOENT (no such version, entry or chunk), -EISDIR, or -errno from
 * the catalog. Thread-safe.
 */
int dcr_reader_chunk_hash(struct dcr_reader *r, uint64_t v, uint32_t tree,
			  uint32_t idx, uint64_t chunk, uint8_t hash[32],
			  uint32_t *chunk_size);

/**
 * dcr_reader_prefetch - dcr_reader_read_tree for a prefetcher: the chunks
 * this read (and the read-ahead it queues) materializes are written to
 * the cache through the page cache, so that the reads that follow find them
 * resident. dcr_reader_read writes them around it and serves them from
 * memory instead, so that a first read does not also fill the page cache
 * with a second copy of every chunk. With @dst NULL nothing is copied
 * out: it returns once every chunk of the range is in the cache (built
 * here or by read-ahead, or found there and proven), which is all a
 * prefetcher that does not also feed the kernel's page cache needs.
 * Same returns and thread-safety as dcr_reader_read.
 */
ssize_t dcr_reader_prefetch(struct dcr_reader *r, uint64_t v, uint32_t tree,
			    uint32_t idx, uint64_t off, void *dst, size_t len);

/**
 * struct dcr_reader_stats - what a reader has done since it was opened,
 * and its state now. Counters only grow.
 */
/**
 * dcr_reader_set_cache_direct - whether chunks built for reads are
 * written to the cache around the page cache (O_DIRECT, the default:
 * the reader's own page cache holds their bytes already) or through it
 * (@on false: for a mount whose later opens read the cache files
 * themselves, FUSE passthrough, so that they read memory, not the
 * disk). Thread-safe.
 */
void dcr_reader_set_cache_direct(struct dcr_reader *r, bool on);

struct dcr_cache_pin;

/**
 * dcr_reader_backing_open - a read-only descriptor of a cache file that
 * holds entry @idx of version @v (of tree @tree, see
 * dcr_reader_read_tree) whole, every chunk proven against the manifest
 * in this mount, for the kernel to serve reads of it directly (FUSE
 * passthrough, fs/passthrough.h). Chunks not proven yet in this mount
 * are read and checked now. The file stays pinned until
 * dcr_reader_backing_close(*@pin): never written, punched or truncated
 * (cache/cache.h, dcr_cache_pin). Returns the descriptor (the caller
 * closes it), -EAGAIN when a chunk is not cached (or fails its check:
 * the normal read path fetches it), -ESTALE, -ENOENT, -EISDIR, or
 * another -errno. Thread-safe.
 */
int dcr_reader_backing_open(struct dcr_reader *r, uint64_t v, uint32_t tree,
			    uint32_t idx, struct dcr_cache_pin **pin);

/** dcr_reader_backing_close - unpin what dcr_reader_backing_open
 * pinned; NULL accepted. Thread-safe. */
void dcr_reader_backing_close(struct dcr_reader *r, struct dcr_cache_pin *pin);

/** What dcr_reader_scrub_backing found; it adds to these counters. */
struct dcr_scrub_counts {
	uint64_t files;    /* files checked to their end */
	uint64_t bytes;    /* chunk bytes read and checked */
	uint64_t rotten;   /* chunks that failed their check */
	uint64_t repaired; /* of those, rewritten in place with proven bytes */
	uint64_t dropped;  /* files taken out of the cache (not repairable) */
};

/** Called by dcr_reader_scrub_backing after each chunk of @bytes: pace
 * the scrub (sleep), and return non-zero to stop it. */
typedef int (*dcr_scrub_pace_fn)(void *arg, uint64_t bytes);

/**
 * dcr_reader_scrub_backing - re-check entry @idx of version @v (tree
 * @tree) in its pinned cache file @pin (from dcr_reader_backing_open,
 * held with dcr_reader_backing_hold), chunk by chunk, from what the
 * kernel would serve (read/rscrub.c). A chunk that fails its check is
 * built again from the store and written over the rotten one in place,
 * so that the passthrough opens and mappings of the file read right
 * bytes from then on; one that cannot be takes the file out of the
 * cache. Each failure is logged. Adds to *@cnt; calls @pace (may be
 * NULL) after each chunk. 0 when the file was checked to its end, 1 if
 * @pace stopped it, -ESTALE or -ENOENT if its version or tree is gone,
 * or another -errno. Thread-safe.
 */
int dcr_reader_scrub_backing(struct dcr_reader *r, uint64_t v, uint32_t tree,
			     uint32_t idx, struct dcr_cache_pin *pin,
			     dcr_scrub_pace_fn pace, void *arg,
			     struct dcr_scrub_counts *cnt);

/**
 * dcr_reader_backing_hold - another hold of @pin (dcr_reader_backing_
 * open's), released with dcr_reader_backing_close: the file stays
 * pinned while a scrub of it runs, whatever its opens do. Returns @pin.
 * The caller must know @pin held meanwhile. Thread-safe.
 */
struct dcr_cache_pin *dcr_reader_backing_hold(struct dcr_reader *r,
					      struct dcr_cache_pin *pin);

struct dcr_reader_stats {
	uint64_t latest;        /* newest version known */
	uint64_t versions;      /* versions known */
	uint64_t trees_loaded;  /* versions whose tree is in memory now */
	uint64_t cache_bytes;   /* bytes of the chunk cache */
	uint64_t cache_budget;  /* its budget */
	uint64_t reads;         /* read calls (dcr_reader_read, _prefetch) */
	uint64_t bytes_read;    /* bytes they returned */
	uint64_t chunk_hits;    /* chunk pieces served from memory or cache */
	uint64_t chunk_misses;  /* chunk pieces that had to be materialized */
	uint64_t fetches;       /* ranged GETs of frames from the store */
	uint64_t bytes_fetched; /* bytes those GETs returned */
	uint64_t bytes_materialized; /* chunk bytes built from frames */
	uint64_t bytes_verified;     /* chunk bytes proven against their hash */
	/* of which built chunks proven by their whole SHA-256 (format 1,
	 * or with a trust set a chain not all authentic, rtrust.c), not
	 * the fast way (their frames' SHA-256 and their XXH3-128) */
	uint64_t bytes_sha_proven;
	uint64_t fetch_errors;  /* GETs that failed */
	uint64_t read_errors;   /* reads that failed (EIO, ENOMEM ...) */
	uint64_t cache_errors;  /* local I/O errors of the chunk cache (each
				 * logged; the chunk was built again) */
	uint64_t cache_sealed;  /* cache files sealed with fs-verity */
	int cache_verity;       /* fs-verity: 1 works, -1 missing, 0 not
				 * tried yet (cache/cache_verity.c) */
	uint64_t tag_errors;    /* reads of malformed tag objects, one per
				 * tag per poll (each logged once per tag
				 * and content) */
	/* With a trust set: versions not shown, by why (each logged once;
	 * a version counts once per reason it is judged for). */
	uint64_t rejected_unsigned;   /* no signature */
	uint64_t rejected_bad;        /* a signature that does not verify:
					 forged, replayed, damaged */
	uint64_t rejected_store;      /* signed for another store */
	uint64_t rejected_untrusted;  /* signed by a key not trusted */
	uint64_t rejected_tags;       /* tags ignored, not trusted */
	/* The threads of the CPU-bound pools (dcr_reader_opts.threads),
	 * and the busy time of each stage, summed over its threads, in
	 * ns: an admin sees which stage bounds a refit. */
	uint64_t threads;
	uint64_t busy_fetch_ns;   /* store GETs (their waits included) */
	uint64_t busy_decode_ns;  /* applying frames, proving chunks */
	uint64_t busy_write_ns;   /* writing built chunks to the cache */
	uint64_t busy_check_ns;   /* checking cached chunks (reads, opens) */
};

/**
 * dcr_reader_get_stats - a snapshot of @r's statistics into @s. Cheap
 * (relaxed atomic loads, one short lock); thread-safe.
 */
void dcr_reader_get_stats(struct dcr_reader *r, struct dcr_reader_stats *s);

/**
 * dcr_reader_threads - the threads of @r's CPU-bound pools
 * (dcr_reader_opts.threads, or the CPU budget). Thread-safe.
 */
int dcr_reader_threads(struct dcr_reader *r);

/**
 * dcr_reader_dvrec_enable - keep, from now on, the changes of the chunks
 * @r builds from their parent's by one delta frame (read/dvrec.h), in
 * at most @budget bytes of memory, for the delta view (read/dview.h).
 * Call before reads begin (a mount, before it serves). 0 or -ENOMEM.
 */
int dcr_reader_dvrec_enable(struct dcr_reader *r, uint64_t budget);

/**
 * dcr_reader_room_for - dcr_cache_room_for of @r's cache: whether @bytes
 * more fit on its file system beside it, the headroom kept. Thread-safe.
 */
bool dcr_reader_room_for(struct dcr_reader *r, uint64_t bytes);

/**
 * dcr_reader_dvrec - @r's records of changes, or NULL when they are not
 * kept (dcr_reader_dvrec_enable). Thread-safe.
 */
struct dcr_dvrec *dcr_reader_dvrec(struct dcr_reader *r);

/**
 * dcr_reader_par_for - run @fn(@arg, i) for every i in [0, @n) on the
 * caller and idle threads of @r's pool, up to dcr_reader_threads(@r)
 * at once (core/wq.h, dcr_wq_par_for): for CPU-bound work over a
 * reader's files (a prefetch, a delta view's build, verify --deep).
 * @fn may read through @r; a read's own parallel work then runs on the
 * threads left idle. Thread-safe.
 */
void dcr_reader_par_for(struct dcr_reader *r, size_t n,
			void (*fn)(void *arg, size_t i), void *arg);

/**
 * dcr_reader_sync - wait until the background work queued so far is
 * done: read-ahead, its decoding, and the writes of materialized chunks
 * to the cache (which a reader otherwise does behind the reads). For
 * tests and tools that look at the cache directory.
 */
void dcr_reader_sync(struct dcr_reader *r);

#endif /* DCR_READER_H */
