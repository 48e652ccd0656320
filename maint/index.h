/* SPDX-License-Identifier: MIT */
/*
 * index.h - a store's index for maintenance: its store view (sview.h:
 * versions, tags, layout and each version's manifests, fetched on first
 * use), its packs (listed once), and the per-version record that
 * `dcrfs-ctl log` and `show` print. gc.h, verify.h and diff.h work over
 * it; dcrfs-ctl and libdcr print what they return.
 *
 * Bytes that must be materialized (diff, verify --deep, format 1 delta
 * chunks) go through a scratch reader (read/reader.h) opened on first
 * use, with its catalog and cache in a temporary directory that
 * dcr_index_free removes.
 *
 * An index is used by one thread at a time; it holds no global state, so
 * distinct indexes (even of one store) are independent.
 */
#ifndef DCR_INDEX_H
#define DCR_INDEX_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash.h"
#include "layout.h"
#include "manifest.h"
#include "objstore.h"
#include "reader.h"
#include "sign.h"
#include "sview.h"

/** A listed pack. */
struct dcr_ix_pack {
	uint8_t h[DCR_HASH_LEN];
	uint64_t size;
	int64_t mtime_ns; /* 0: unknown */
};

/** The index of one store (see the top of this file). */
struct dcr_index {
	struct dcr_sview sv;         /* its versions, tags and layout */
	struct dcr_store *st;        /* not owned */
	struct dcr_store_info info;  /* its identity (dcr_store_check) */
	struct dcr_ix_pack *packs;   /* sorted by name */
	size_t npacks, cap_packs;
	struct dcr_reader *r;        /* scratch reader, opened on demand */
	int threads;                 /* its CPU-bound pools (dcr_reader_opts;
				      * 0: the CPU budget); set after load */
	char scratch[PATH_MAX];      /* its directory ("" = none) */
};

/** Cache budget of the scratch reader. */
#define DCR_INDEX_SCRATCH_CACHE ((uint64_t)1 << 30)

/**
 * dcr_index_load - list @st's versions, packs and tags (each tag's
 * target read) and read its layout into @ix (overwritten). @st, already
 * checked to hold a store whose identity is @info (dcr_store_check),
 * stays the caller's and must outlive @ix. 0, or -errno (logged; @ix
 * is then empty, nothing to free).
 */
int dcr_index_load(struct dcr_index *ix, struct dcr_store *st,
		   const struct dcr_store_info *info);

/** dcr_index_free - free what @ix holds and remove its scratch directory. */
void dcr_index_free(struct dcr_index *ix);

/**
 * dcr_index_reload_layout - read the store's layout again after a
 * compaction changed it (dcr_sview_reload_layout). 0 or -errno (logged).
 */
static inline int dcr_index_reload_layout(struct dcr_index *ix)
{
	return dcr_sview_reload_layout(&ix->sv);
}

/** dcr_index_find - the listed version @v, or NULL (dcr_sview_find). */
static inline struct dcr_sview_ver *dcr_index_find(struct dcr_index *ix,
						   uint64_t v)
{
	return dcr_sview_find(&ix->sv, v);
}

/**
 * dcr_index_manifest - @x's manifest as readers read it (layout.h,
 * dcr_sview_manifest), owned by @ix; NULL if it cannot be had (x->state
 * holds the -errno; logged).
 */
static inline const struct dcr_manifest *
dcr_index_manifest(struct dcr_index *ix, struct dcr_sview_ver *x)
{
	return dcr_sview_manifest(&ix->sv, x);
}

/**
 * dcr_index_own - @x's own manifest, versions/<n> as its committer
 * published it (dcr_sview_committed): what its provenance is read from
 * (its check, signature and metadata; signatures bind it, never a
 * compacted encoding). Owned by @ix; NULL if it cannot be had (logged;
 * its -errno is dcr_sview_state(x)).
 */
static inline const struct dcr_manifest *
dcr_index_own(struct dcr_index *ix, struct dcr_sview_ver *x)
{
	return dcr_sview_committed(&ix->sv, x, NULL);
}

/**
 * dcr_index_resolve - the listed version @arg names: a number, a tag
 * name or "latest". NULL if none (logged, naming @arg).
 */
struct dcr_sview_ver *dcr_index_resolve(struct dcr_index *ix, const char *arg);

struct dcr_sign_key;

/**
 * dcr_index_tag_signer - what to show as tag @t's signer: the key id of
 * its signature when it verifies for this store, its name, its version
 * and that version's own manifest (dcr_index_own), "unsigned", or
 * "invalid", into @buf (at least DCR_KEYID_LEN + 1 bytes). Trust is not
 * judged here. Returns @buf.
 */
const char *dcr_index_tag_signer(struct dcr_index *ix,
				 const struct dcr_sview_tag *t, char *buf);

/**
 * dcr_index_put_tag - point tag @name at version @x, signed with @key
 * unless NULL (sign.h: the signature binds the store's id, @name, the
 * number and the check of @x's own manifest, dcr_index_own). 0; -EINVAL
 * for a bad name or, with @key, a store made before store markers (no
 * id to sign for); other -errno. Logged, naming the tag.
 */
int dcr_index_put_tag(struct dcr_index *ix, const char *name,
		      struct dcr_sview_ver *x, const struct dcr_sign_key *key);

/** dcr_index_pack - the listed pack named @h, or NULL. */
const struct dcr_ix_pack *dcr_index_pack(const struct dcr_index *ix,
					 const uint8_t h[DCR_HASH_LEN]);

/** dcr_pack_key_hash - the pack name in the key "packs/<hex>" into @h: 0, or -1. */
int dcr_pack_key_hash(const char *key, uint8_t h[DCR_HASH_LEN]);

/**
 * dcr_index_read - exactly bytes [@off, @off+@len) of file @fi (@path)
 * of version @v into @buf through the scratch reader (verified as every
 * read is). 0 or -errno (-EIO if @fi is not @path there).
 */
int dcr_index_read(struct dcr_index *ix, uint64_t v, uint32_t fi,
		   const char *path, uint64_t off, void *buf, size_t len);

/**
 * dcr_index_par_for - run @fn(@arg, i) for every i in [0, @n) on the
 * caller and the scratch reader's threads (dcr_reader_par_for: the CPU
 * budget, core/cpus.h), the scratch reader opened first, so that @fn
 * may call dcr_index_read. 0, or -errno if the reader cannot be opened
 * (nothing ran).
 */
int dcr_index_par_for(struct dcr_index *ix, size_t n,
		      void (*fn)(void *arg, size_t i), void *arg);

/** What `dcrfs-ctl log` and `show` print about one version. */
struct dcr_version_record {
	uint64_t version;
	uint64_t parent;      /* the version it was committed against */
	uint64_t base;        /* the one its chunks are built on (0: none) */
	int64_t ctime_ns;
	char time[32];        /* ctime_ns in UTC, "2026-01-31T12:00:00Z" */
	const char *kind;     /* "anchor" (no chunk needs another version),
				 "compacted" (encoded by the layout's
				 manifest), "delta" */
	uint64_t files, dirs;
	uint64_t bytes;       /* of its files */
	uint64_t stored_bytes; /* its frames and its manifest object
				  (compacted versions share packs, so
				  packs are not counted whole) */
	uint64_t same, delta, full; /* chunks */
	uint32_t format, chunk_size, npacks;
	/* Its provenance, from its own manifest (dcr_index_own): the
	 * signer as dcr_manifest_signer shows it for this store (a key id,
	 * "unsigned" or "invalid": a signature that does not verify for
	 * this store and number; trust is verify's), and the trainer's
	 * metadata (sorted by key; owned by the index). */
	char signer[24];
	uint32_t nmeta;
	const struct dcr_meta *meta;
};

/**
 * dcr_index_record - the record of version @x into @r. 0, or the -errno
 * of its unreadable manifest (logged by dcr_index_manifest if it
 * vanished; by the store otherwise).
 */
int dcr_index_record(struct dcr_index *ix, struct dcr_sview_ver *x,
		     struct dcr_version_record *r);

/** dcr_file_stored_bytes - bytes of the frames file @f holds itself. */
uint64_t dcr_file_stored_bytes(const struct dcr_file *f);

/**
 * Progress of a long maintenance job, reported from the thread that
 * runs it. A phase begins with DCR_PG_START (@done: where the rate
 * counts from; nothing to show), goes on with DCR_PG_STEP, is shown
 * complete with DCR_PG_LAST, and DCR_PG_END says that its line, if
 * shown, may be erased. @unit: NULL for bytes, else what is counted
 * ("versions").
 */
enum dcr_pg_state { DCR_PG_START, DCR_PG_STEP, DCR_PG_LAST, DCR_PG_END };

/** A progress callback and its argument (fn NULL: none). */
struct dcr_pg {
	void (*fn)(void *arg, enum dcr_pg_state s, const char *phase,
		   uint64_t done, uint64_t total, const char *unit);
	void *arg;
};

/** dcr_pg_report - call @pg's callback (if any). */
static inline void dcr_pg_report(const struct dcr_pg *pg, enum dcr_pg_state s,
				 const char *phase, uint64_t done,
				 uint64_t total, const char *unit)
{
	if (pg && pg->fn)
		pg->fn(pg->arg, s, phase, done, total, unit);
}

#endif /* DCR_INDEX_H */
