/* SPDX-License-Identifier: MIT */
/*
 * manifest.h - the immutable description of one version.
 *
 * A manifest names every directory and regular file of the version, and
 * for every chunk of every file how to materialize it: no frame (the
 * chunk equals the same chunk of the parent), a full frame, or a delta
 * frame against the parent's chunk, each with the SHA-256 of the
 * materialized chunk so every chunk is verified when it is built.
 *
 * Format 2 adds, per chunk, the SHA-256 of its frame's bytes (unless
 * SAME) and the XXH3-128 of the materialized chunk. A reader then proves
 * a chunk it builds by hashing with SHA-256 only the frames it fetched
 * (a few percent of the bytes for a delta) and checking the result's
 * XXH3-128: the frames are exactly what the committer published, the
 * base was proven the same way (or from its SHA-256), and the committer
 * checked that these frames on that base decode to the chunk, so the
 * only way left to a wrong byte is a decoder or memory that disagrees
 * with the committer's, which XXH3-128 catches (it is not a defence
 * against an adversary, who would have to change the frames, which the
 * SHA-256 of every frame rules out). The chunk's SHA-256 stays for full
 * verification (dcr_manifest_check_parent, format 1 readers' path).
 * Format 1 manifests (no frame hashes, no check values) stay readable;
 * their chunks are proven by their SHA-256.
 *
 * Format 3 has format 2's bytes; only the meaning of a file's digest
 * (dcr_file.sha256) changes: in format 3 it is dcr_file_digest, the
 * SHA-256 of the file's chunk SHA-256s in order (a hash list), not the
 * SHA-256 of the file's bytes. It binds the same bytes (a second
 * preimage of it is one of SHA-256 over the list or of a chunk's
 * SHA-256), and it lets the committer hash every byte once instead of
 * twice. No reader verifies files by it; a verifier that does must
 * follow the format (dcr_file_digest for 3, a SHA-256 of the bytes
 * before).
 *
 * Format 4 has format 3's bytes and meaning. It marks a version whose
 * frames and packs may use what format-3 readers cannot read: sparse
 * segments of position model 1 (two interleaved rANS states, frame.h)
 * and packs named DCRPACK2-style (commit/packw.h). Such a reader then
 * refuses the version as it refuses any manifest newer than it reads,
 * instead of fetching frames it would call damaged.
 * dcr_manifest_decode tells a newer format apart (-EPROTONOSUPPORT), so
 * that this reader says "upgrade" for the formats that come after it.
 *
 * Format 5 has format 4's meaning and adds two things older readers do
 * not know, so it is written only for a manifest that has one of them
 * (a plain one stays format 4, readable by format-4 readers):
 * - trainer metadata (dcr_manifest.meta), after the files in the body;
 * - a signature block (flag DCR_MAN_SIGNED), after the checksum; its
 *   contents are struct dcr_sig and its meaning is sign.h's.
 *
 * On-store encoding (little-endian, see manifest.c for the body):
 *
 *   0   8  magic "DCRMANIF"
 *   8   4  format version (1 to 5)
 *   12  4  flags (0; from format 5 DCR_MAN_SIGNED may be set)
 *   16  8  body length after decompression (bounded)
 *   24  8  compressed body length
 *   32  n  zstd-compressed body
 *   32+n 32 SHA-256 of bytes [0, 32+n): the manifest's check
 *   64+n    signed only: u8 algorithm (1, Ed25519), 32 public key,
 *           64 signature, 32 the parent manifest's check (zero without
 *           a parent), u8 store id length (1..40), the store id; then
 *           the object ends
 *
 * Decoding bounds every length and count against the bytes present and
 * validates every path (relative, no "." or ".." components, no empty
 * components, no NUL, sorted and unique, parents listed before
 * children).
 */
#ifndef DCR_MANIFEST_H
#define DCR_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "hash.h"

/* The newest format read; the oldest still read. New manifests are
 * written in DCR_MANIFEST_FORMAT_PLAIN unless they need format 5. */
#define DCR_MANIFEST_FORMAT 5
#define DCR_MANIFEST_FORMAT_PLAIN 4
#define DCR_MANIFEST_FORMAT_MIN 1
#define DCR_NO_BASE UINT32_MAX
#define DCR_PATH_MAX 4096
/**
 * Largest version number (and parent) a manifest may carry, 2^32 - 1.
 * The FUSE daemon packs the version into the high 32 bits of an inode
 * number (fs/fs.h), and "versions/%010u" holds it in ten digits. Keys
 * naming a larger number are not versions (dcr_version_from_key), and a
 * committer must not publish past it.
 */
#define DCR_VERSION_MAX UINT64_C(0xffffffff)
/** Largest decoded manifest body accepted (hostile-length guard). */
#define DCR_MANIFEST_BODY_MAX ((uint64_t)4 << 30)

/** Header flag: a signature block follows the checksum (format 5). */
#define DCR_MAN_SIGNED 1u

#define DCR_SIG_PUB_LEN 32
#define DCR_SIG_LEN 64
#define DCR_SIG_ALG_ED25519 1
#define DCR_SIG_STORE_ID_MAX 40 /* = DCR_STORE_ID_MAX (objstore.h) */

/** A manifest's signature block, as decoded (checked by sign.h). */
struct dcr_sig {
	uint8_t alg;                       /* DCR_SIG_ALG_ED25519 */
	uint8_t pub[DCR_SIG_PUB_LEN];      /* the signer's public key */
	uint8_t sig[DCR_SIG_LEN];
	uint8_t parent_check[DCR_HASH_LEN];/* zero without a parent */
	char store_id[DCR_SIG_STORE_ID_MAX + 1];
};

/**
 * Trainer metadata (format 5): key of 1..DCR_META_KEY_MAX bytes of
 * [A-Za-z0-9._-], value of at most DCR_META_VALUE_MAX bytes, no NUL;
 * at most DCR_META_MAX entries, sorted by key, unique.
 */
#define DCR_META_KEY_MAX 64
#define DCR_META_VALUE_MAX 4096
#define DCR_META_MAX 256
struct dcr_meta {
	char *key;
	char *value;
};

enum dcr_ftype {
	DCR_FT_REG = 1,
	DCR_FT_DIR = 2,
};

enum dcr_chunk_kind {
	DCR_CK_SAME = 0,  /* equal to the parent's chunk; no frame */
	DCR_CK_FULL = 1,  /* full frame */
	DCR_CK_DELTA = 2, /* XOR delta frame against the parent's chunk */
};

/** Where one chunk's frame lives and what it must hash to. */
struct dcr_chunk_ref {
	uint8_t kind;       /* enum dcr_chunk_kind */
	uint32_t pack;      /* index into dcr_manifest.packs (not for SAME) */
	uint32_t len;       /* frame length in bytes (not for SAME) */
	uint64_t off;       /* frame offset in the pack (not for SAME) */
	uint8_t hash[DCR_HASH_LEN]; /* SHA-256 of the materialized chunk */
	/* Format 2 only (zero in format 1 manifests): */
	uint8_t fhash[DCR_HASH_LEN]; /* SHA-256 of the frame (not for SAME) */
	uint8_t xxh[DCR_XXH_LEN];    /* XXH3-128 of the materialized chunk */
};

struct dcr_file {
	char *path;        /* relative, '/'-separated, NUL-terminated */
	uint8_t type;      /* enum dcr_ftype */
	uint32_t mode;     /* permission bits only (07777) */
	uint64_t size;     /* bytes; 0 for directories */
	int64_t mtime_ns;  /* of the source file when committed */
	/* Zero for dirs. Format 1 and 2: SHA-256 of the file's bytes;
	 * format 3: dcr_file_digest (SHA-256 of the chunk SHA-256s). */
	uint8_t sha256[DCR_HASH_LEN];
	/*
	 * Index of the same path in the parent manifest, DCR_NO_BASE if none.
	 * SAME and DELTA chunks refer to chunk i of that file, which must have
	 * the same length.
	 */
	uint32_t base;
	uint64_t nchunks;  /* dcr_chunk_count(size, chunk_size) */
	struct dcr_chunk_ref *chunks;
};

struct dcr_manifest {
	uint32_t format;    /* 1..5; 0 when building: the plain format */
	uint64_t version;   /* 1..DCR_VERSION_MAX */
	uint64_t parent;    /* 0 = no parent; < version */
	int64_t ctime_ns;   /* commit time */
	uint32_t chunk_size;
	uint32_t npacks;
	uint8_t (*packs)[DCR_HASH_LEN]; /* pack names (SHA-256 of the pack) */
	uint32_t nfiles;
	struct dcr_file *files; /* sorted by path (bytewise), unique */
	uint32_t nmeta;
	struct dcr_meta *meta;  /* sorted by key, unique (format 5) */
	/*
	 * Provenance, from decoding: the manifest's check (SHA-256 of its
	 * header and body), its signature block if it has one, and the
	 * parent as committed (= parent). A re-encoding of the version (a
	 * layout's, whose parent may differ) carries the committed
	 * manifest's (dcr_manifest_copy_provenance), so what was signed
	 * can still be checked and shown. Never encoded.
	 */
	uint8_t check[DCR_HASH_LEN];
	bool has_sig;
	struct dcr_sig sig;
	uint64_t cparent;
};

/**
 * dcr_manifest_copy_provenance - give @dst (a re-encoding of @src's
 * version) @src's check, signature block, committed parent and
 * metadata (copied; @dst's own metadata is replaced). 0 or -ENOMEM.
 */
int dcr_manifest_copy_provenance(struct dcr_manifest *dst,
				 const struct dcr_manifest *src);

/**
 * dcr_manifest_dup - a deep copy of @src into @dst (its own files, paths,
 * chunks, packs and metadata; free with dcr_manifest_free). 0 or -ENOMEM
 * (@dst then empty).
 */
int dcr_manifest_dup(struct dcr_manifest *dst, const struct dcr_manifest *src);

/** Whether @key is a valid metadata key (struct dcr_meta). */
bool dcr_meta_key_valid(const char *key);

/**
 * dcr_manifest_set_meta - set metadata @key to @value in @m (kept
 * sorted; an existing key is replaced). 0, -EINVAL (logged) for a key
 * or value out of bounds or too many entries, -ENOMEM.
 */
int dcr_manifest_set_meta(struct dcr_manifest *m, const char *key,
			  const char *value);

/** The value of metadata @key in @m, or NULL. */
const char *dcr_manifest_get_meta(const struct dcr_manifest *m,
				  const char *key);

/**
 * dcr_file_digest - the format 3 digest of regular file @f: SHA-256 of
 * the concatenation of @f's f->nchunks chunk hashes (the SHA-256 of no
 * bytes for an empty file, as the SHA-256 of its bytes would be).
 * Returns 0, or -ENOMEM. Thread-safe.
 */
int dcr_file_digest(const struct dcr_file *f, uint8_t out[DCR_HASH_LEN]);

/**
 * dcr_file_hasher - a file's digest (dcr_file.sha256) from its bytes, as
 * manifest format @format defines it: the SHA-256 of the bytes before 3,
 * dcr_file_digest of the chunk SHA-256s (chunks of @chunk_size) from 3
 * on. For verifiers that read a file back (dcrfs-ctl verify --deep).
 * Feed the bytes in order, in pieces of any size. NULL on ENOMEM.
 */
struct dcr_file_hasher;
struct dcr_file_hasher *dcr_file_hasher_new(uint32_t format,
					    uint32_t chunk_size);
void dcr_file_hasher_update(struct dcr_file_hasher *h, const void *data,
			    size_t len);
/** The digest into @out; the hasher is reset for the next file. */
void dcr_file_hasher_final(struct dcr_file_hasher *h,
			   uint8_t out[DCR_HASH_LEN]);
void dcr_file_hasher_free(struct dcr_file_hasher *h);
/** "sha256" (of the bytes) or "sha256-of-chunks" for @format. */
const char *dcr_file_digest_kind(uint32_t format);

/** Free everything a decoded or built manifest owns (not @m itself). NULL ok. */
void dcr_manifest_free(struct dcr_manifest *m);

/**
 * dcr_manifest_encode - serialise @m into @out (appended), in format
 * @m->format (0: DCR_MANIFEST_FORMAT; 1 writes what older readers read,
 * for tests). The manifest must be valid (see dcr_manifest_validate).
 * 0 or -errno.
 */
int dcr_manifest_encode(const struct dcr_manifest *m, struct dcr_buf *out);

/**
 * dcr_manifest_encode_flags - dcr_manifest_encode with header @flags
 * (DCR_MAN_SIGNED: format 5, and the caller appends the signature block
 * with dcr_manifest_put_sig). The check goes to @check too (may be
 * NULL). 0 or -errno.
 */
int dcr_manifest_encode_flags(const struct dcr_manifest *m, uint32_t flags,
			      struct dcr_buf *out, uint8_t *check);

/** dcr_manifest_put_sig - append signature block @s to @out. 0 or -errno. */
int dcr_manifest_put_sig(const struct dcr_sig *s, struct dcr_buf *out);

/** dcr_sig_decode - parse exactly @n bytes as a signature block into
 * @s (no cryptography: sign.h checks it). 0 or -EBADMSG. */
int dcr_sig_decode(const void *data, size_t n, struct dcr_sig *s);

/**
 * dcr_manifest_decode - parse untrusted bytes into @m.
 * On failure returns -EBADMSG (malformed, bad checksum, invalid paths or
 * references), -EPROTONOSUPPORT (a manifest of a format newer than
 * DCR_MANIFEST_FORMAT: written by a newer dcrfs) or -ENOMEM, and @m is
 * left zeroed.
 */
int dcr_manifest_decode(const void *p, size_t n, struct dcr_manifest *m);

/**
 * dcr_manifest_validate - check internal consistency: version in
 * 1..DCR_VERSION_MAX and parent below it, chunk size,
 * sorted unique valid paths, parent directories present, chunk counts,
 * pack indices in range, kinds valid, SAME/DELTA only with a base.
 * 0 or -EBADMSG.
 */
int dcr_manifest_validate(const struct dcr_manifest *m);

/**
 * dcr_manifest_check_parent - check that @m's base references are
 * consistent with its parent @p: every base file exists in @p, is a
 * regular file of the same size, the chunk sizes match, and SAME chunks
 * carry the parent chunk's hash (and check value, when both are format
 * 2). A version with a different chunk size
 * is valid if it has no base references (all full frames). 0 or -EBADMSG.
 */
int dcr_manifest_check_parent(const struct dcr_manifest *m,
			      const struct dcr_manifest *p);

/** True if some chunk of @m is built on its parent's (SAME or DELTA). */
int dcr_manifest_needs_parent(const struct dcr_manifest *m);

/* dcr_manifest_same_files flags */
enum {
	DCR_SAME_TIMES = 1 << 0, /* the version's and every file's time too */
};

/**
 * dcr_manifest_same_files - true if @a and @b hold the same tree with
 * the same bytes: chunk size, and every file's path, type, mode, size
 * and digest (then every chunk's hash is the same too); with
 * DCR_SAME_TIMES also the version's ctime and every file's mtime. The
 * one comparison of trees: a commit of an unchanged tree, a version
 * re-indexed in the store, a layout's manifest.
 */
int dcr_manifest_same_files(const struct dcr_manifest *a,
			    const struct dcr_manifest *b, unsigned flags);

/**
 * dcr_manifest_same_meaning - whether manifests of formats @a and @b
 * record the same things the same way (file digests, check values): 1
 * for equal formats and for 3 and 4, else 0.
 */
int dcr_manifest_same_meaning(uint32_t a, uint32_t b);

/**
 * dcr_manifest_same_content - true if @a and @b describe the same
 * version with the same bytes: number, format (dcr_manifest_same_meaning),
 * time, chunk size, and
 * every file's path, type, mode, size, time, digest and every chunk's
 * hash and check value. The parent and the chunk references (how the
 * bytes are encoded) may differ: a compacted manifest (layout.h) must
 * pass this against the version's own manifest before it is served.
 */
int dcr_manifest_same_content(const struct dcr_manifest *a,
			      const struct dcr_manifest *b);

/** Binary search for @path; returns the index or -1. */
int64_t dcr_manifest_find(const struct dcr_manifest *m, const char *path);

/**
 * dcr_manifest_find_n - binary search for the @len bytes at @path (not
 * NUL-terminated, e.g. a directory prefix of a longer path) among the
 * first @n files (sorted by path); the index or -1.
 */
int64_t dcr_manifest_find_n(const struct dcr_manifest *m, uint32_t n,
			    const char *path, size_t len);

/**
 * dcr_path_valid - true if @path (length @len) is a valid relative path:
 * non-empty, no leading or trailing '/', no empty, "." or ".."
 * components, no NUL, at most DCR_PATH_MAX bytes.
 */
int dcr_path_valid(const char *path, size_t len);

/** Object key of version @v's manifest: "versions/%010llu". */
void dcr_version_key(uint64_t v, char *buf, size_t cap);
/** Object key of a pack: "packs/<64 hex>". */
void dcr_pack_key(const uint8_t h[DCR_HASH_LEN], char *buf, size_t cap);
/**
 * dcr_version_from_key - parse "versions/NNNNNNNNNN" (ten digits; the
 * prefix-stripped name also accepted) into *@v. 0, or -EINVAL when the
 * key is not a version key or names 0 or a number above DCR_VERSION_MAX
 * (such keys are ignored when listing versions).
 */
int dcr_version_from_key(const char *key, uint64_t *v);
/**
 * dcr_key_number - parse "<@prefix>NNNNNNNNNN" (ten digits; the name
 * without @prefix also accepted) into *@v, 1..DCR_VERSION_MAX: 0 or
 * -EINVAL. The one parser of numbered keys (versions/, layouts/).
 */
int dcr_key_number(const char *key, const char *prefix, uint64_t *v);

#endif /* DCR_MANIFEST_H */
