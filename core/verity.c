/* SPDX-License-Identifier: MIT */
/*
 * verity.c - the fs-verity file digest (verity.h): the Merkle tree is
 * built streaming, one pending 4 KiB block per level, so memory does not
 * grow with the file. A level's block is hashed into the level above
 * only when a hash arrives that no longer fits it, or at the end: then a
 * level that ever received one hash alone is the top, and that hash is
 * the root.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fileio.h"
#include "verity.h"

#define PER_BLOCK (DCR_VERITY_BLOCK / DCR_HASH_LEN) /* hashes a block holds */
#define LEVELS 16 /* 4 KiB * 128^15 bytes: more than any file */

struct dcr_verity {
	uint64_t size;              /* data bytes added */
	uint64_t count[LEVELS];     /* hashes ever added to each level */
	uint32_t fill[LEVELS];      /* hashes in its pending block */
	uint8_t blk[LEVELS][DCR_VERITY_BLOCK];
};

struct dcr_verity *dcr_verity_new(void)
{
	return calloc(1, sizeof(struct dcr_verity));
}

void dcr_verity_free(struct dcr_verity *v)
{
	free(v);
}

/* The SHA-256 of a block of @len bytes (< DCR_VERITY_BLOCK: zero-padded). */
static void block_hash(const uint8_t *p, size_t len, uint8_t out[DCR_HASH_LEN])
{
	uint8_t pad[DCR_VERITY_BLOCK];

	if (len < DCR_VERITY_BLOCK) {
		memcpy(pad, p, len);
		memset(pad + len, 0, DCR_VERITY_BLOCK - len);
		p = pad;
	}
	dcr_sha256(p, DCR_VERITY_BLOCK, out);
}

/* Add the hash @h to level @i, pushing its full block up first. */
static void push(struct dcr_verity *v, int i, const uint8_t h[DCR_HASH_LEN])
{
	if (v->fill[i] == PER_BLOCK) {
		uint8_t up[DCR_HASH_LEN];

		block_hash(v->blk[i], DCR_VERITY_BLOCK, up);
		v->fill[i] = 0;
		if (i + 1 < LEVELS)
			push(v, i + 1, up);
	}
	memcpy(v->blk[i] + (size_t)v->fill[i] * DCR_HASH_LEN, h, DCR_HASH_LEN);
	v->fill[i]++;
	v->count[i]++;
}

void dcr_verity_update(struct dcr_verity *v, const void *data, size_t len)
{
	const uint8_t *p = data;
	uint8_t h[DCR_HASH_LEN];

	v->size += len;
	while (len) {
		size_t n = DCR_MIN(len, (size_t)DCR_VERITY_BLOCK);

		block_hash(p, n, h);
		push(v, 0, h);
		p += n;
		len -= n;
	}
}

void dcr_verity_final(struct dcr_verity *v, uint8_t out[DCR_HASH_LEN])
{
	uint8_t root[DCR_HASH_LEN] = { 0 }, desc[256] = { 0 };

	for (int i = 0; v->size && i < LEVELS; i++) {
		uint8_t up[DCR_HASH_LEN];

		if (v->count[i] == 1) { /* the top: its one hash is the root */
			memcpy(root, v->blk[i], DCR_HASH_LEN);
			break;
		}
		block_hash(v->blk[i], (size_t)v->fill[i] * DCR_HASH_LEN, up);
		v->fill[i] = 0;
		if (i + 1 < LEVELS)
			push(v, i + 1, up);
	}
	desc[0] = 1;  /* version */
	desc[1] = 1;  /* FS_VERITY_HASH_ALG_SHA256 */
	desc[2] = 12; /* log2(DCR_VERITY_BLOCK) */
	for (int b = 0; b < 8; b++)
		desc[8 + b] = (uint8_t)(v->size >> (8 * b));
	memcpy(desc + 16, root, DCR_HASH_LEN);
	dcr_sha256(desc, sizeof(desc), out);
	free(v);
}

int dcr_verity_digest_fd(int fd, uint64_t size, uint8_t out[DCR_HASH_LEN])
{
	const size_t step = (size_t)256 * DCR_VERITY_BLOCK;
	struct dcr_verity *v = dcr_verity_new();
	uint8_t *buf = malloc(step);
	int ret = 0;

	if (!v || !buf) {
		ret = DCR_ERR(-ENOMEM);
		goto out;
	}
	for (uint64_t off = 0; off < size && !ret; off += step) {
		size_t n = (size_t)DCR_MIN((uint64_t)step, size - off);

		ret = dcr_pread_full(fd, buf, n, off);
		if (!ret)
			dcr_verity_update(v, buf, n);
	}
	if (!ret) {
		dcr_verity_final(v, out);
		v = NULL;
	}
out:
	dcr_verity_free(v);
	free(buf);
	return ret;
}
