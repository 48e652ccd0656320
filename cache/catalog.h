/* SPDX-License-Identifier: MIT */
/*
 * catalog.h - the SQLite catalog of one store on one node.
 *
 * The catalog records every version the node has indexed (the decoded
 * manifest as rows: files, packs and one row per chunk) and the store's
 * tags; the chunk cache keeps its own bookkeeping in its slab files
 * (cache.h). It lives in <cache_dir>/<id>/catalog.db and survives a
 * restart, so a remount never fetches a manifest twice.
 *
 * Schema (version 3; a version 1 or 2 catalog is upgraded in place when
 * opened, its rows kept; versions indexed before schema 3 have a NULL
 * mhash: "unknown", see struct dcr_catalog_ident):
 *
 *   meta(key TEXT PRIMARY KEY, value TEXT)            'schema', 'url'
 *   versions(version INTEGER PRIMARY KEY, parent, ctime_ns, chunk_size,
 *            nfiles, npacks, format,       format: the manifest's
 *            mhash BLOB, obj_size, obj_mtime,  versions/<n> as indexed
 *            ehash BLOB)                    the layout's manifest, if any
 *   packs(version, idx, hash BLOB)          PRIMARY KEY (version, idx)
 *   files(version, idx, path, type, mode, size, mtime_ns, sha256, base,
 *         nchunks)                          PRIMARY KEY (version, idx)
 *   chunks(version, file, idx, kind, pack, off, len, hash BLOB,
 *          fhash BLOB, xxh BLOB)          both NULL for format 1
 *                                           PRIMARY KEY (version, file, idx)
 *   tags(name TEXT PRIMARY KEY, version)
 *
 * All keyed tables are WITHOUT ROWID, so a chunk lookup is one O(log n)
 * B-tree descent. A version's rows are written in batches, its versions
 * row last: a version is visible only once fully indexed, and after a
 * crash it is absent (its partial rows are replaced when it is indexed
 * again).
 *
 * Rows read back are not trusted more than the store: version and file
 * rows get the checks of dcr_manifest_validate when loaded, and a
 * damaged database is set aside and rebuilt (dcr_catalog_open).
 *
 * Thread-safety: every function may be called from any thread; the
 * catalog serialises them on one connection behind a mutex (see
 * catalog.c for why).
 */
#ifndef DCR_CATALOG_H
#define DCR_CATALOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash.h"
#include "manifest.h"

struct dcr_catalog;

/**
 * Which store object a version was indexed from: a version's identity
 * is its manifest object's hash (DESIGN.md 7a), so that a number reused
 * in the store (a manifest deleted by hand and committed again, a
 * compaction that rewrote it) is noticed. The size and mtime of the
 * object as the store listed it let a periodic listing notice a change
 * without fetching every manifest.
 */
struct dcr_catalog_ident {
	bool has_mhash;              /* false: unknown (indexed by a dcrfs
					before schema 3) */
	uint8_t mhash[DCR_HASH_LEN]; /* SHA-256 of the manifest object */
	uint64_t obj_size;           /* its size; 0 = unknown */
	int64_t obj_mtime_ns;        /* its mtime as listed; 0 = unknown */
	/* The encoding indexed: the compacted manifest object a layout
	 * named (manifests/<ehash>, core/layout.h), or, has_ehash false,
	 * the manifest above itself. */
	bool has_ehash;
	uint8_t ehash[DCR_HASH_LEN];
};

/** The header of one indexed version. */
struct dcr_catalog_version {
	uint64_t version;
	uint64_t parent;   /* 0 = none */
	int64_t ctime_ns;
	uint32_t chunk_size;
	uint32_t nfiles;
	struct dcr_catalog_ident id;
	/* Provenance (sign.h): the manifest's check (has_check false:
	 * unknown, indexed before schema 4) and its signature block. */
	bool has_check;
	uint8_t check[DCR_HASH_LEN];
	bool has_sig;
	struct dcr_sig sig;
	uint64_t cparent;  /* the parent as committed (dcr_manifest.cparent) */
};

/** One chunk reference, with its pack resolved to the pack's hash. */
struct dcr_catalog_chunk {
	uint8_t kind;      /* enum dcr_chunk_kind */
	uint32_t len;      /* frame length (not for SAME) */
	uint64_t off;      /* frame offset in the pack (not for SAME) */
	uint8_t pack[DCR_HASH_LEN]; /* pack hash (zero for SAME) */
	uint8_t hash[DCR_HASH_LEN]; /* SHA-256 of the materialized chunk */
	/*
	 * Format 2 manifests (see manifest.h): the frame's SHA-256 (not for
	 * SAME) and the chunk's XXH3-128; has_check false for format 1.
	 */
	bool has_check;
	uint8_t fhash[DCR_HASH_LEN];
	uint8_t xxh[DCR_XXH_LEN];
};

/**
 * dcr_catalog_open - open or create the catalog database at @path
 * (created with mode 0600, WAL journal, busy timeout) for the store
 * whose canonical URL is @url. A database that records another URL is
 * refused with -EEXIST, one with a schema number other than this
 * code's with -EPROTONOSUPPORT (message logged).
 *
 * A damaged database - SQLite reports it corrupt or not a database, a
 * version row fails the checks of dcr_manifest_validate, or an earlier
 * run found invalid rows or corrupt pages while serving (it leaves a
 * marker, <path>.rebuild) - is renamed with its -wal and -shm files to
 * <path>.corrupt-<unix time>, one warning is logged, and a new empty
 * catalog is created: the store is the source of truth.
 *
 * Returns 0 and *@out, or -errno with the SQLite message logged once.
 */
int dcr_catalog_open(const char *path, const char *url,
		     struct dcr_catalog **out);

/**
 * dcr_catalog_set_room_hook - when a write finds the file system full
 * (SQLITE_FULL), call @fn(@arg, 0) for room - the cache next to the
 * catalog evicts (dcr_cache_room_hook) - give back the WAL's space and
 * retry the write once, saying so once per incident rather than at
 * every write; @fn NULL: no hook (the default). @fn runs with the
 * catalog locked and must not call back into it.
 */
void dcr_catalog_set_room_hook(struct dcr_catalog *c,
			       int (*fn)(void *arg, uint64_t want), void *arg);

/** True if dcr_catalog_open created the database (new or rebuilt). */
bool dcr_catalog_is_new(const struct dcr_catalog *c);

/** Close and free; NULL accepted. No other call may be running. */
void dcr_catalog_close(struct dcr_catalog *c);

/**
 * dcr_catalog_add_version - index the decoded, validated manifest @m
 * (all its files, packs and chunk references), in transactions of a few
 * thousand rows with the lock released between them so that lookups are
 * not stalled; the version becomes visible (dcr_catalog_versions,
 * dcr_catalog_load_files) only when complete. Calls for the same
 * version must not overlap. -EEXIST if the version is already indexed,
 * else 0 or -errno.
 */
int dcr_catalog_add_version(struct dcr_catalog *c,
			    const struct dcr_manifest *m);

/**
 * dcr_catalog_add_version_ident - dcr_catalog_add_version, recording
 * @id (may be NULL: unknown) in the versions row that makes it visible.
 */
int dcr_catalog_add_version_ident(struct dcr_catalog *c,
				  const struct dcr_manifest *m,
				  const struct dcr_catalog_ident *id);

/**
 * dcr_catalog_replace_version - make the decoded, validated manifest @m
 * version m->version's index, whatever was indexed under that number
 * before (it is dropped; if none was, this is an add), with identity
 * @id (may be NULL). Atomic: one transaction, so a reader sees the old
 * version or the new one, never a mix - and lookups of every version
 * wait for it (about a microsecond per chunk row). 0 or -errno (the old
 * index is then unchanged).
 */
int dcr_catalog_replace_version(struct dcr_catalog *c,
				const struct dcr_manifest *m,
				const struct dcr_catalog_ident *id);

/**
 * dcr_catalog_set_ident - record @id for the indexed version @v (a
 * lazily filled hash, a new listing mtime). -ENOENT if @v is not
 * indexed, else 0 or -errno.
 */
int dcr_catalog_set_ident(struct dcr_catalog *c, uint64_t v,
			  const struct dcr_catalog_ident *id);

/**
 * dcr_catalog_set_check - record version @v's manifest check (learnt
 * again for a row indexed before schema 4). 0, -ENOENT if @v is not
 * indexed, or -errno.
 */
int dcr_catalog_set_check(struct dcr_catalog *c, uint64_t v,
			  const uint8_t check[DCR_HASH_LEN]);

/**
 * dcr_catalog_get_u64 / dcr_catalog_set_u64 - a number the reader keeps
 * across mounts (e.g. the highest version a mount with trust= showed),
 * in the meta table under @key (not "url" or "schema"). get: 0 and *@v
 * (0 if never set), or -errno.
 */
int dcr_catalog_get_u64(struct dcr_catalog *c, const char *key, uint64_t *v);
int dcr_catalog_set_u64(struct dcr_catalog *c, const char *key, uint64_t v);

/**
 * dcr_catalog_remove_version - forget version @v (gone from the store):
 * its versions row first, in one transaction (it is invisible from
 * then on), then its other rows. -ENOENT if @v is not indexed, else 0
 * or -errno.
 */
int dcr_catalog_remove_version(struct dcr_catalog *c, uint64_t v);

/**
 * dcr_catalog_versions - every indexed version's header, ascending by
 * number, into a malloc'ed array the caller frees. 0 or -errno.
 */
int dcr_catalog_versions(struct dcr_catalog *c,
			 struct dcr_catalog_version **vs, size_t *n);

/**
 * dcr_catalog_load_files - fill @m with version @v's header and files
 * (path, type, mode, size, mtime, sha256, base, nchunks) but no chunk
 * references (files[i].chunks == NULL) and no packs. Free with
 * dcr_manifest_free. -ENOENT if @v is not indexed; -EIO (logged) if the
 * rows fail the checks of dcr_manifest_validate (the catalog is then
 * rebuilt at the next open); else 0 or -errno.
 */
int dcr_catalog_load_files(struct dcr_catalog *c, uint64_t v,
			   struct dcr_manifest *m);

/**
 * dcr_catalog_load_manifest - rebuild version @v's whole manifest (files,
 * packs and every chunk reference) into @m, e.g. to check a child
 * against it. Costs memory proportional to the chunk count: use it
 * transiently. Free with dcr_manifest_free. -ENOENT if @v is not
 * indexed, else 0 or -errno.
 */
int dcr_catalog_load_manifest(struct dcr_catalog *c, uint64_t v,
			      struct dcr_manifest *m);

/**
 * dcr_catalog_get_chunk - the reference of chunk @idx of file @file
 * (manifest index) of version @v into @out. -ENOENT if there is no such
 * chunk, else 0 or -errno.
 */
int dcr_catalog_get_chunk(struct dcr_catalog *c, uint64_t v, uint32_t file,
			  uint64_t idx, struct dcr_catalog_chunk *out);

/**
 * dcr_catalog_get_chunks - the references of chunks @first ..
 * @first+@n-1 of file @file of version @v into @out[0..@n), in one
 * query: *@got is how many consecutive ones from @first exist (the rest
 * of @out is zeroed). -ENOENT if chunk @first does not exist, else 0 or
 * -errno.
 */
int dcr_catalog_get_chunks(struct dcr_catalog *c, uint64_t v, uint32_t file,
			   uint64_t first, size_t n,
			   struct dcr_catalog_chunk *out, size_t *got);

/**
 * dcr_catalog_set_tags - replace all tags by the @n pairs
 * (@names[i], @versions[i]) in one transaction. 0 or -errno.
 */
int dcr_catalog_set_tags(struct dcr_catalog *c, const char *const *names,
			 const uint64_t *versions, size_t n);

/**
 * dcr_catalog_tags - call @fn for every tag in name order; a non-zero
 * return from @fn stops and is returned. @fn runs with the catalog
 * locked and must not call back into it. 0 or -errno.
 */
int dcr_catalog_tags(struct dcr_catalog *c,
		     int (*fn)(const char *name, uint64_t version, void *arg),
		     void *arg);

#endif /* DCR_CATALOG_H */
