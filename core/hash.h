/* SPDX-License-Identifier: MIT */
/*
 * hash.h - SHA-256 (OpenSSL EVP) for files, chunks, packs and manifests,
 * and XXH3-128 (libxxhash) as the fast check of bytes already proven
 * once: cached chunk files against local bit rot, and materialized
 * chunks against the manifest (see manifest.h).
 */
#ifndef DCR_HASH_H
#define DCR_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DCR_HASH_LEN 32
#define DCR_HASH_HEX_LEN 64

/** One-shot SHA-256 of @len bytes into @out. Thread-safe. */
void dcr_sha256(const void *data, size_t len, uint8_t out[DCR_HASH_LEN]);

/** Streaming SHA-256; opaque, allocate with dcr_sha256_new. */
struct dcr_sha256_ctx;

/** Create a context, initialised. NULL on allocation failure. */
struct dcr_sha256_ctx *dcr_sha256_new(void);
/** Restart the context for a new message. */
void dcr_sha256_reset(struct dcr_sha256_ctx *c);
void dcr_sha256_update(struct dcr_sha256_ctx *c, const void *data, size_t len);
/** Finish into @out; call dcr_sha256_reset before re-use. */
void dcr_sha256_final(struct dcr_sha256_ctx *c, uint8_t out[DCR_HASH_LEN]);
/** Free; NULL is accepted. */
void dcr_sha256_free(struct dcr_sha256_ctx *c);

#define DCR_XXH_LEN 16

/**
 * dcr_xxh128 - XXH3-128 of @len bytes into @out, in canonical (big-endian)
 * byte order, with the widest vector code the CPU has (dispatched at run
 * time on x86-64). Not cryptographic: it detects accidents (bit rot, a
 * decoder that disagrees with the committer's), never an adversary.
 * Thread-safe.
 */
void dcr_xxh128(const void *data, size_t len, uint8_t out[DCR_XXH_LEN]);

/** Streaming XXH3-128 (the same digest as dcr_xxh128 of the bytes fed
 * in order); opaque, allocate with dcr_xxh_new. One context per thread. */
struct dcr_xxh_ctx;

/** Create a context, initialised. NULL on allocation failure. */
struct dcr_xxh_ctx *dcr_xxh_new(void);
/** Restart the context for a new message. */
void dcr_xxh_reset(struct dcr_xxh_ctx *c);
void dcr_xxh_update(struct dcr_xxh_ctx *c, const void *data, size_t len);
/** The digest of what was fed since the last reset, canonical byte
 * order, into @out (the context may be fed on). */
void dcr_xxh_final(struct dcr_xxh_ctx *c, uint8_t out[DCR_XXH_LEN]);
/** Free; NULL is accepted. */
void dcr_xxh_free(struct dcr_xxh_ctx *c);

/** Lower-case hex of the @n bytes at @p into @hex (2 * @n + 1 bytes,
 * NUL-terminated). */
void dcr_hex(const uint8_t *p, size_t n, char *hex);
/** Lower-case hex of a hash into @hex (DCR_HASH_HEX_LEN + 1 bytes, NUL-terminated). */
void dcr_hash_hex(const uint8_t h[DCR_HASH_LEN], char hex[DCR_HASH_HEX_LEN + 1]);
/** Parse 64 hex digits; 0 or -EINVAL. */
int dcr_hash_unhex(const char *hex, uint8_t h[DCR_HASH_LEN]);
/** Constant-time-enough comparison; true if equal. */
bool dcr_hash_eq(const uint8_t a[DCR_HASH_LEN], const uint8_t b[DCR_HASH_LEN]);

#endif /* DCR_HASH_H */
