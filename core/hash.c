/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/sha.h>
#include <xxhash.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xxh_x86dispatch.h>
#define DCR_XXH3_128 XXH3_128bits_dispatch
#define DCR_XXH3_128_UPDATE XXH3_128bits_update_dispatch
#else
#define DCR_XXH3_128 XXH3_128bits
#define DCR_XXH3_128_UPDATE XXH3_128bits_update
#endif

#include "common.h"
#include "hash.h"

struct dcr_sha256_ctx {
	EVP_MD_CTX *md;
};

void dcr_sha256(const void *data, size_t len, uint8_t out[DCR_HASH_LEN])
{
	/* The one-shot SHA256() allocates nothing, so it cannot fail
	 * (EVP_Digest could, on allocation failure, and a library must
	 * not abort), and it picks the SHA-NI/AVX code as EVP does. */
	SHA256(data, len, out);
}

void dcr_xxh128(const void *data, size_t len, uint8_t out[DCR_XXH_LEN])
{
	XXH128_hash_t h = DCR_XXH3_128(data, len);

	XXH128_canonicalFromHash((XXH128_canonical_t *)out, h);
}

struct dcr_xxh_ctx {
	XXH3_state_t *st;
};

struct dcr_xxh_ctx *dcr_xxh_new(void)
{
	struct dcr_xxh_ctx *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->st = XXH3_createState();
	if (!c->st) {
		free(c);
		return NULL;
	}
	XXH3_128bits_reset(c->st);
	return c;
}

void dcr_xxh_reset(struct dcr_xxh_ctx *c)
{
	XXH3_128bits_reset(c->st);
}

void dcr_xxh_update(struct dcr_xxh_ctx *c, const void *data, size_t len)
{
	if (len)
		DCR_XXH3_128_UPDATE(c->st, data, len);
}

void dcr_xxh_final(struct dcr_xxh_ctx *c, uint8_t out[DCR_XXH_LEN])
{
	XXH128_canonicalFromHash((XXH128_canonical_t *)out,
				 XXH3_128bits_digest(c->st));
}

void dcr_xxh_free(struct dcr_xxh_ctx *c)
{
	if (!c)
		return;
	XXH3_freeState(c->st);
	free(c);
}

struct dcr_sha256_ctx *dcr_sha256_new(void)
{
	struct dcr_sha256_ctx *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->md = EVP_MD_CTX_new();
	if (!c->md || !EVP_DigestInit_ex(c->md, EVP_sha256(), NULL)) {
		EVP_MD_CTX_free(c->md);
		free(c);
		return NULL;
	}
	return c;
}

void dcr_sha256_reset(struct dcr_sha256_ctx *c)
{
	EVP_DigestInit_ex(c->md, EVP_sha256(), NULL);
}

void dcr_sha256_update(struct dcr_sha256_ctx *c, const void *data, size_t len)
{
	EVP_DigestUpdate(c->md, data, len);
}

void dcr_sha256_final(struct dcr_sha256_ctx *c, uint8_t out[DCR_HASH_LEN])
{
	unsigned int n = DCR_HASH_LEN;

	EVP_DigestFinal_ex(c->md, out, &n);
}

void dcr_sha256_free(struct dcr_sha256_ctx *c)
{
	if (!c)
		return;
	EVP_MD_CTX_free(c->md);
	free(c);
}

void dcr_hex(const uint8_t *p, size_t n, char *hex)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		hex[2 * i] = digits[p[i] >> 4];
		hex[2 * i + 1] = digits[p[i] & 15];
	}
	hex[2 * n] = 0;
}

void dcr_hash_hex(const uint8_t h[DCR_HASH_LEN], char hex[DCR_HASH_HEX_LEN + 1])
{
	dcr_hex(h, DCR_HASH_LEN, hex);
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int dcr_hash_unhex(const char *hex, uint8_t h[DCR_HASH_LEN])
{
	for (int i = 0; i < DCR_HASH_LEN; i++) {
		int hi = hexval(hex[2 * i]);
		int lo = hi < 0 ? -1 : hexval(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -EINVAL;
		h[i] = (uint8_t)(hi << 4 | lo);
	}
	return hex[DCR_HASH_HEX_LEN] ? -EINVAL : 0;
}

bool dcr_hash_eq(const uint8_t a[DCR_HASH_LEN], const uint8_t b[DCR_HASH_LEN])
{
	return memcmp(a, b, DCR_HASH_LEN) == 0;
}
