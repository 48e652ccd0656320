/* SPDX-License-Identifier: MIT */
/*
 * codec_elem.h - the element codec (frame codec 2) behind frame.c.
 *
 * Internal to core/: frame.c owns the frame header and calls these for
 * the payload. The payload layout is documented in frame.h.
 */
#ifndef DCR_CODEC_ELEM_H
#define DCR_CODEC_ELEM_H

#include <stddef.h>
#include <stdint.h>

#include <zstd.h>

#include "buf.h"
#include "entropy.h"
#include "frame.h"

enum dcr_seg_method {
	DCR_SM_ZERO = 0,
	DCR_SM_RAW = 1,
	DCR_SM_SPARSE = 2,
	DCR_SM_PLANES = 3,
	DCR_SM_ZSTD = 4,
	DCR_SM_COUNT
};

/** One segment of a chunk: [off, off+len) holding elements of @dtype. */
struct dcr_seg {
	uint32_t off;
	uint32_t len;
	uint8_t dtype;
};

/** Scratch state of the element codec; one per dcr_codec (per thread). */
struct dcr_elem_ctx {
	ZSTD_CCtx *cctx;       /* borrowed from the dcr_codec */
	ZSTD_DCtx *dctx;       /* borrowed */
	int level;             /* zstd level */
	uint8_t *xbuf;         /* XOR / transformed elements */
	uint8_t *pbuf;         /* byte planes */
	size_t bcap;           /* bytes in each of xbuf and pbuf */
	uint32_t *idx;         /* sparse: changed element indices */
	uint32_t *val;         /* sparse: XOR values */
	uint32_t *add;         /* sparse: zigzag differences (ADD values + 1) */
	size_t ncap;
	struct dcr_ent_dec *dec[2];
	struct dcr_ent_enc *enc[2];
	struct dcr_buf cand;   /* candidate segment payload */
	struct dcr_seg segs[DCR_FRAME_SEG_MAX];
	/* dcr_elem_apply's list of changed elements (frame.h, struct
	 * dcr_frame_rec), when asked for */
	uint32_t *rec;
	size_t rec_n, rec_cap;
	/* statistics of the last encode, for benchmarks */
	uint64_t st_method[DCR_SM_COUNT];
};

/** Release what @c allocated (not @c itself, nor the zstd contexts). */
void dcr_elem_ctx_free(struct dcr_elem_ctx *c);

/**
 * dcr_elem_segments - cut a chunk of @len bytes into at most @cap
 * segments following @hint (NULL: one byte-mode segment). Elements cut by
 * the chunk edges, uncovered bytes and segments too small to be worth
 * their overhead become byte mode; neighbours of one dtype are merged.
 * Returns the number of segments (>= 1).
 */
size_t dcr_elem_segments(const struct dcr_elem_hint *hint, size_t len,
			 struct dcr_seg *segs, size_t cap);

/**
 * dcr_elem_encode - append the codec-2 payload of @chunk to @out: a delta
 * against @base when @base is not NULL, else full. @xor_only forbids
 * ADD-mode values. 0 or -errno.
 */
int dcr_elem_encode(struct dcr_elem_ctx *c, const uint8_t *chunk,
		    const uint8_t *base, size_t len, const struct dcr_seg *segs,
		    size_t nseg, int xor_only, struct dcr_buf *out);

/**
 * dcr_elem_apply - decode the codec-2 payload @p[0..n) onto @dst[0..len):
 * overwrite (@delta false) or apply onto the parent's chunk (@delta true).
 * With @rec (delta only), also list the changed elements in c->rec
 * (c->rec_n of them; frame.h, struct dcr_frame_rec) and set *@rec to
 * whether the list is complete (every segment's method lists its
 * changes: true for a delta). 0, -ENOMEM or -EBADMSG.
 */
int dcr_elem_apply(struct dcr_elem_ctx *c, const uint8_t *p, size_t n,
		   int delta, uint8_t *dst, size_t len, int *rec);

/**
 * dcr_elem_cost - the modelled decode cost (frame.h, DCR_COST_*) of the
 * codec-2 payload @p[0..n) of a chunk of @len bytes, from its segment
 * table alone (nothing is decoded). 0 and *@cost, or -EBADMSG.
 */
int dcr_elem_cost(const uint8_t *p, size_t n, int delta, size_t len,
		  uint64_t *cost);

#endif /* DCR_CODEC_ELEM_H */
