/* SPDX-License-Identifier: MIT */
/*
 * commit.h - the commit pipeline (DESIGN.md section 7).
 *
 * dcr_commit reads a directory tree once, splits every regular file into
 * fixed chunks, encodes each chunk that differs from the parent's as a
 * delta (or full) frame on @jobs threads, packs frames into immutable
 * content-addressed packs, uploads them, and publishes the manifest with
 * a conditional put. A crash at any point leaves the store with the old
 * latest intact or the complete new version; orphan packs are garbage.
 */
#ifndef DCR_COMMIT_H
#define DCR_COMMIT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "manifest.h"
#include "objstore.h"
#include "sign.h"

struct dcr_commit_progress {
	uint64_t bytes_done;   /* source bytes read and encoded */
	uint64_t bytes_total;  /* source bytes to read */
	uint64_t bytes_uploaded; /* pack bytes uploaded so far */
	const char *phase;     /* "scan", "encode", "publish" */
};

struct dcr_commit_opts {
	/*
	 * The parent version and its manifest; 0/NULL for a first version.
	 * Chunks equal to the parent's cost only a manifest entry.
	 */
	uint64_t parent;
	const struct dcr_manifest *parent_manifest;
	/*
	 * A directory holding the parent version's tree, materialized (the
	 * committer's own cache). Every parent chunk used as a delta base is
	 * verified against parent_manifest; a mismatch fails with -ESTALE so
	 * the caller can rebuild the directory from the store and retry.
	 * Required when parent != 0.
	 */
	const char *parent_dir;
	/*
	 * If non-NULL, the committed tree is also written below this
	 * (existing, empty) directory, so it can serve as the next commit's
	 * parent_dir. Failing to write it (ENOSPC, ...) does not fail the
	 * commit: a warning is logged and dcr_commit_result.staged is false.
	 */
	const char *stage_dir;
	int full;            /* encode every chunk as a full frame (anchor) */
	/*
	 * A tree without a regular file fails with -ENODATA (logged)
	 * unless this is set: an empty latest empties every mount. A tree
	 * with less than half the parent's bytes is committed with a
	 * warning.
	 */
	bool allow_empty;
	/*
	 * A tree equal to the parent's (the same paths, types, modes and
	 * file digests) fails with -ENODATA (logged) before anything is
	 * published, unless this is set or @full (a new anchor).
	 */
	bool allow_unchanged;
	/*
	 * false (the default): a NaN or Inf in a float tensor (BF16, F16,
	 * F32, F64, F8_E4M3, F8_E5M2) of a safetensors file fails the commit
	 * with -EDOM before anything is published, after logging, per
	 * tensor, the file, the tensor and how many. Only chunks that are
	 * encoded are checked (an unchanged chunk equals the parent's, which
	 * was checked when committed), plus every element that straddles two
	 * chunks. true: commit such values as they are.
	 */
	bool allow_nonfinite;
	uint32_t chunk_size; /* 0: the parent's, else DCR_CHUNK_DEFAULT */
	int jobs;            /* encoder threads; 0 = number of CPUs */
	int zstd_level;      /* 0 = default */
	uint64_t pack_target;/* pack size to aim for; 0 = 64 MiB */
	int uploads;         /* packs uploaded at once; 0 = 4 (bounds memory
				to about (uploads + 2) x pack_target) */
	/* Called from the calling thread now and then, and once after the
	 * last chunk of each file is read; may be NULL. */
	void (*progress)(void *arg, const struct dcr_commit_progress *p);
	void *progress_arg;
	/* If non-NULL and it becomes nonzero (set from any thread or a
	 * signal handler), the commit stops with -ECANCELED (logged) as
	 * soon as it sees it: after the chunk being read, or at the latest
	 * right before the manifest is published; nothing is published. */
	const atomic_int *cancel;
	/*
	 * Sign the version with this key (sign.h; NULL: unsigned): the
	 * manifest is published with dcr_manifest_encode_signed, binding the
	 * store's id, the number it is published as (re-signed if another
	 * commit took the first one), the parent, the commit time and the
	 * parent manifest's check, which is parent_manifest->check: the
	 * parent manifest must be decoded from the store's versions/<parent>
	 * (dcr_store_fetch_manifest), never built in memory. The store must
	 * have a marker: a legacy store (objstore.h) has no id to sign for,
	 * which fails with -EINVAL (logged) before anything is read or
	 * uploaded. The key stays the caller's.
	 */
	const struct dcr_sign_key *sign_key;
	/*
	 * Trainer metadata for the manifest (struct dcr_meta, any order;
	 * set with dcr_manifest_set_meta, so an invalid key or value, or too
	 * many, fails with -EINVAL, logged, before anything is read). A
	 * manifest with metadata or a signature is written in format 5.
	 */
	const struct dcr_meta *meta;
	uint32_t nmeta;
};

struct dcr_commit_result {
	uint64_t version;      /* the published version number */
	uint64_t files;        /* regular files */
	uint64_t dirs;
	uint64_t bytes_in;     /* bytes of regular files read */
	uint64_t bytes_packed; /* bytes of packs uploaded */
	uint64_t manifest_len; /* bytes of the encoded manifest */
	uint8_t manifest_hash[DCR_HASH_LEN]; /* SHA-256 of those bytes */
	uint8_t check[DCR_HASH_LEN]; /* the manifest's check (manifest.h):
					what a signed tag of it binds */
	uint64_t chunks_same, chunks_delta, chunks_full;
	uint32_t packs;
	/* stage_dir holds the complete committed tree (false if it could not
	 * be written: the commit went on without it) */
	bool staged;
	/* The key id of the signature (sign_key's), "" when unsigned. */
	char signer[DCR_KEYID_LEN + 1];
};

/** One byte range of a file held in the caller's memory. */
struct dcr_commit_range {
	const void *data;
	uint64_t len;
};

/**
 * One entry of a version to commit: a directory, or a regular file whose
 * bytes come from a file on disk (@file, read once with pread; it must
 * not change while it is committed: a change of its size, mtime or ctime
 * between the start and the end of reading it fails the commit with
 * -EAGAIN, naming it) or from the caller's memory (the concatenation of
 * @ranges[0..nranges), which must stay valid and unchanged until
 * dcr_commit_sources returns; they are read, never written). A file
 * listed in a tree (@root_len > 0: @file is "<tree>/<rel>") is opened
 * below the tree without following a symlink (dcr_open_beneath) and
 * must still be the regular file @dev/@ino the scan saw: anything else
 * (replaced, or a symlink now) fails the commit with -EAGAIN, naming it,
 * before a byte of it is read.
 */
struct dcr_commit_source {
	const char *path;      /* in the version: relative, '/'-separated */
	bool dir;              /* a directory: no bytes */
	uint32_t mode;         /* permission bits */
	int64_t mtime_ns;
	const char *file;      /* the bytes' file, or NULL for @ranges */
	size_t root_len;       /* @file's first root_len bytes: its tree; 0: none */
	uint64_t dev, ino;     /* @file's identity when it was listed */
	uint64_t size;         /* @file's size when it was listed */
	const struct dcr_commit_range *ranges;
	size_t nranges;
};

/**
 * dcr_commit_sources - commit the entries @src[0..n) to @st as a new
 * version, with everything dcr_commit says about the pipeline, the
 * version number and failures. Entries may come in any order; a path
 * given twice fails with -EEXIST, an invalid one with -EINVAL. A file's
 * parent directories should be entries too (readers show the tree the
 * manifest lists). @what names the whole (a directory, "the commit") in
 * messages. Before the manifest is published every pack it names is
 * confirmed to be in the store (a HEAD each): a missing one fails the
 * commit with -EIO. Returns 0 and fills @res, or -errno with a message
 * logged by the calling thread (non-finite values are reported there,
 * per tensor); on failure nothing is published, except for -EINPROGRESS:
 * the manifest's put and its read-back (every publish reads versions/N
 * back: see publish in commit.c) left unknown whether version N holds
 * it, and the message names N. Not thread-safe on the
 * same @res; distinct calls are independent.
 */
int dcr_commit_sources(struct dcr_store *st,
		       const struct dcr_commit_source *src, size_t n,
		       const char *what, const struct dcr_commit_opts *o,
		       struct dcr_commit_result *res);

/**
 * dcr_commit_scan - list the tree under @dir as sources (every file's
 * bytes read from the file, at publish): the scan dcr_commit does,
 * failing the same way (logged) on an entry that cannot be committed.
 * Returns 0 with *@out (free with dcr_commit_sources_free) and *@n set.
 */
int dcr_commit_scan(const char *dir, struct dcr_commit_source **out, size_t *n);

/** Free what dcr_commit_scan returned: each path and file, the array. */
void dcr_commit_sources_free(struct dcr_commit_source *src, size_t n);

/**
 * dcr_commit - commit the tree under @dir to @st as a new version whose
 * parent is opts->parent. Regular files and directories are committed;
 * a symlink, device, FIFO or socket fails the commit (-EINVAL, with a
 * message naming it) before anything is uploaded. The version number is
 * the store's latest + 1; if another committer wins that number the
 * manifest is re-encoded with the next one (the parent stays). A thin
 * wrapper of dcr_commit_sources over a scan of @dir (a file changed
 * while it is read fails with -EAGAIN).
 * Returns 0 and fills @res, or -errno with a message logged; on failure
 * nothing is published.
 */
int dcr_commit(struct dcr_store *st, const char *dir,
	       const struct dcr_commit_opts *opts,
	       struct dcr_commit_result *res);

#endif /* DCR_COMMIT_H */
