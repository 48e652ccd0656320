/* SPDX-License-Identifier: MIT */
/*
 * vfile.c - local files of derived bytes, read back checked (vfile.h).
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "common.h"
#include "fileio.h"
#include "hash.h"
#include "vfile.h"

/* Bytes read at once while sealing: whole blocks. */
#define SEAL_STEP ((size_t)16 * DCR_VFILE_BLOCK)
/* Most bytes one read checks at once (larger reads go in steps). */
#define READ_STEP ((size_t)16 * DCR_VFILE_BLOCK)

struct dcr_vfile {
	uint64_t size;
	uint64_t nblocks;
	uint8_t (*sums)[DCR_XXH_LEN];
};

/* The pieces are in order, apart and inside the file. */
static bool segs_ok(const struct dcr_vfile_seg *segs, size_t n, uint64_t size)
{
	uint64_t end = 0;

	for (size_t i = 0; i < n; i++) {
		if (segs[i].off < end || segs[i].len > size ||
		    segs[i].off > size - segs[i].len)
			return false;
		end = segs[i].off + segs[i].len;
	}
	return true;
}

int dcr_vfile_seal(int fd, uint64_t size, const struct dcr_vfile_seg *segs,
		   size_t n, struct dcr_vfile **out)
{
	struct dcr_xxh128_ctx *x = NULL;
	struct dcr_vfile *v = NULL;
	uint8_t *buf = NULL;
	size_t si = 0;
	int ret = 0;

	*out = NULL;
	if (!segs_ok(segs, n, size))
		return DCR_ERR(-EINVAL);
	if (!(v = calloc(1, sizeof(*v))) || !(x = dcr_xxh128_new()) ||
	    !(buf = malloc(SEAL_STEP))) {
		ret = DCR_ERR(-ENOMEM);
		goto out;
	}
	v->size = size;
	v->nblocks = (size + DCR_VFILE_BLOCK - 1) / DCR_VFILE_BLOCK;
	if (v->nblocks > SIZE_MAX / DCR_XXH_LEN ||
	    !(v->sums = malloc(v->nblocks ? (size_t)v->nblocks * DCR_XXH_LEN : 1))) {
		ret = DCR_ERR(-ENOMEM);
		goto out;
	}
	for (uint64_t pos = 0; pos < size;) {
		size_t len = (size_t)DCR_MIN((uint64_t)SEAL_STEP, size - pos);

		if ((ret = dcr_pread_full(fd, buf, len, pos)))
			goto out;
		for (size_t b = 0; b < len; b += DCR_VFILE_BLOCK)
			dcr_xxh128(buf + b, DCR_MIN((size_t)DCR_VFILE_BLOCK, len - b),
				   v->sums[(pos + b) / DCR_VFILE_BLOCK]);
		/* Every piece that overlaps [pos, pos+len), in order. */
		while (si < n && segs[si].off < pos + len) {
			const struct dcr_vfile_seg *s = &segs[si];
			uint64_t a = DCR_MAX(s->off, pos);
			uint64_t e = DCR_MIN(s->off + s->len, pos + len);
			uint8_t h[DCR_XXH_LEN];

			if (a == s->off)
				dcr_xxh128_reset(x);
			dcr_xxh128_update(x, buf + (a - pos), (size_t)(e - a));
			if (e < s->off + s->len)
				break; /* goes on in the next step */
			dcr_xxh128_digest(x, h);
			if (memcmp(h, s->xxh, DCR_XXH_LEN)) {
				ret = -EBADMSG;
				goto out;
			}
			si++;
		}
		pos += len;
	}
	/* empty pieces at the very end */
	for (; si < n; si++) {
		uint8_t h[DCR_XXH_LEN];

		if (segs[si].len) {
			ret = DCR_ERR(-EIO);
			goto out;
		}
		dcr_xxh128(NULL, 0, h);
		if (memcmp(h, segs[si].xxh, DCR_XXH_LEN)) {
			ret = -EBADMSG;
			goto out;
		}
	}
	*out = v;
	v = NULL;
out:
	if (ret == -ENODATA)
		ret = DCR_ERR(-EIO); /* shorter than said */
	dcr_vfile_free(v);
	dcr_xxh128_free(x);
	free(buf);
	return ret;
}

uint64_t dcr_vfile_size(const struct dcr_vfile *v)
{
	return v->size;
}

ssize_t dcr_vfile_pread(const struct dcr_vfile *v, int fd, void *buf, size_t n,
			uint64_t off)
{
	uint8_t *dst = buf;
	size_t done = 0;

	if (off >= v->size)
		return 0;
	n = (size_t)DCR_MIN((uint64_t)n, v->size - off);
	while (done < n) {
		uint64_t at = off + done;
		uint64_t b0 = at / DCR_VFILE_BLOCK;
		uint64_t start = b0 * DCR_VFILE_BLOCK;
		size_t want = (size_t)DCR_MIN((uint64_t)(n - done) + (at - start),
					      (uint64_t)READ_STEP);
		size_t len = (size_t)DCR_MIN((uint64_t)(want + DCR_VFILE_BLOCK - 1) /
					     DCR_VFILE_BLOCK * DCR_VFILE_BLOCK,
					     v->size - start);
		uint8_t *tmp = dcr_thread_buf(DCR_TBUF_VFILE, READ_STEP);
		int ret;

		if (!tmp)
			return DCR_ERR(-ENOMEM);
		if ((ret = dcr_pread_full(fd, tmp, len, start)))
			return ret == -ENODATA ? DCR_ERR(-EIO) : ret;
		for (size_t b = 0; b < len; b += DCR_VFILE_BLOCK) {
			uint8_t h[DCR_XXH_LEN];

			dcr_xxh128(tmp + b, DCR_MIN((size_t)DCR_VFILE_BLOCK, len - b), h);
			if (memcmp(h, v->sums[b0 + b / DCR_VFILE_BLOCK], DCR_XXH_LEN))
				return -EBADMSG;
		}
		size_t take = (size_t)DCR_MIN((uint64_t)(n - done),
					      start + len - at);
		memcpy(dst + done, tmp + (at - start), take);
		done += take;
	}
	return (ssize_t)done;
}

void dcr_vfile_free(struct dcr_vfile *v)
{
	if (!v)
		return;
	free(v->sums);
	free(v);
}
