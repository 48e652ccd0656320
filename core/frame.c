/* SPDX-License-Identifier: MIT */
/*
 * frame.c - encode and decode one chunk (see frame.h for the layout).
 *
 * Codecs 0 (stored) and 1 (zstd of the chunk or of its XOR) were the
 * first format and stay decodable. The encoder now writes codec 2, the
 * element codec of codec_elem.c, and falls back to a stored frame when
 * nothing beats the raw chunk.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "chunk.h"
#include "codec_elem.h"
#include "common.h"
#include "frame.h"

static const uint8_t frame_magic[4] = { 'D', 'C', 'R', 'F' };

struct dcr_codec {
	ZSTD_CCtx *cctx;
	ZSTD_DCtx *dctx;
	int level;
	uint8_t *scratch;    /* codec 1 deltas: the decoded XOR */
	struct dcr_buf tmp;  /* candidate frame */
	struct dcr_buf alt;  /* second candidate */
	struct dcr_elem_ctx ec;
};

struct dcr_codec *dcr_codec_new(int level)
{
	struct dcr_codec *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->level = level ? level : 3;
	c->cctx = ZSTD_createCCtx();
	c->dctx = ZSTD_createDCtx();
	dcr_buf_init(&c->tmp, 2 * (size_t)DCR_CHUNK_MAX + DCR_FRAME_HDR_LEN);
	dcr_buf_init(&c->alt, 2 * (size_t)DCR_CHUNK_MAX + DCR_FRAME_HDR_LEN);
	dcr_buf_init(&c->ec.cand, 2 * (size_t)DCR_CHUNK_MAX);
	c->ec.cctx = c->cctx;
	c->ec.dctx = c->dctx;
	c->ec.level = c->level;
	if (!c->cctx || !c->dctx) {
		dcr_codec_free(c);
		return NULL;
	}
	return c;
}

void dcr_codec_free(struct dcr_codec *c)
{
	if (!c)
		return;
	ZSTD_freeCCtx(c->cctx);
	ZSTD_freeDCtx(c->dctx);
	free(c->scratch);
	dcr_buf_free(&c->tmp);
	dcr_buf_free(&c->alt);
	dcr_elem_ctx_free(&c->ec);
	free(c);
}

void dcr_xor(void *dst, const void *src, size_t n)
{
	uint8_t *d = dst;
	const uint8_t *s = src;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		uint64_t a, b;
		memcpy(&a, d + i, 8);
		memcpy(&b, s + i, 8);
		a ^= b;
		memcpy(d + i, &a, 8);
	}
	for (; i < n; i++)
		d[i] ^= s[i];
}

static void put_hdr(uint8_t *p, int kind, int codec, uint32_t raw_len,
		    uint32_t payload_len)
{
	memcpy(p, frame_magic, 4);
	p[4] = DCR_FRAME_FORMAT;
	p[5] = (uint8_t)kind;
	p[6] = (uint8_t)codec;
	p[7] = 0;
	dcr_put_le32(p + 8, raw_len);
	dcr_put_le32(p + 12, payload_len);
}

/* Build a complete codec-2 frame of @kind in @b. */
static int encode_elem(struct dcr_codec *c, struct dcr_buf *b, const void *chunk,
		       const void *base, size_t len, size_t nseg, int xor_only)
{
	int ret;

	dcr_buf_reset(b);
	if ((ret = dcr_buf_reserve(b, DCR_FRAME_HDR_LEN + len / 4)))
		return ret;
	b->len = DCR_FRAME_HDR_LEN;
	ret = dcr_elem_encode(&c->ec, chunk, base, len, c->ec.segs, nseg,
			      xor_only, b);
	if (ret)
		return ret;
	if (b->len - DCR_FRAME_HDR_LEN > UINT32_MAX)
		return DCR_ERR(-EFBIG);
	put_hdr(b->data, base ? DCR_FRAME_DELTA : DCR_FRAME_FULL, DCR_CODEC_ELEM,
		(uint32_t)len, (uint32_t)(b->len - DCR_FRAME_HDR_LEN));
	return 0;
}

int dcr_frame_encode2(struct dcr_codec *c, const void *chunk, const void *base,
		      size_t len, const struct dcr_elem_hint *hint,
		      struct dcr_buf *out, int *kind_out)
{
	struct dcr_buf *best;
	int ret;

	if (len == 0 || len > DCR_CHUNK_MAX)
		return DCR_ERR(-EINVAL);
	size_t nseg = dcr_elem_segments(hint, len, c->ec.segs, DCR_FRAME_SEG_MAX);
	int xor_only = hint && (hint->flags & DCR_ENC_XOR_ONLY);

	if ((ret = encode_elem(c, &c->tmp, chunk, base, len, nseg, xor_only)))
		return ret;
	best = &c->tmp;
	/*
	 * A delta that codes to less than half the chunk is the common case;
	 * only a large one makes a full frame worth trying.
	 */
	if (base && c->tmp.len - DCR_FRAME_HDR_LEN >= len / 2) {
		if ((ret = encode_elem(c, &c->alt, chunk, NULL, len, nseg, xor_only)))
			return ret;
		if (c->alt.len < c->tmp.len)
			best = &c->alt;
	}
	if (best->len - DCR_FRAME_HDR_LEN >= len) {
		/* Nothing beats the chunk itself: a stored full frame. */
		dcr_buf_reset(best);
		if ((ret = dcr_buf_reserve(best, DCR_FRAME_HDR_LEN + len)))
			return ret;
		put_hdr(best->data, DCR_FRAME_FULL, DCR_CODEC_STORED, (uint32_t)len,
			(uint32_t)len);
		memcpy(best->data + DCR_FRAME_HDR_LEN, chunk, len);
		best->len = DCR_FRAME_HDR_LEN + len;
	}
	*kind_out = best->data[5];
	return dcr_buf_append(out, best->data, best->len);
}

int dcr_frame_encode_checked(struct dcr_codec *c, const void *chunk,
			     const void *base, size_t len,
			     const struct dcr_elem_hint *hint,
			     struct dcr_buf *out, int *kind_out, void *work)
{
	int ret = dcr_frame_encode2(c, chunk, base, len, hint, out, kind_out);

	if (ret)
		return ret;
	/* a delta applies onto the base chunk; a full frame overwrites */
	if (*kind_out == DCR_FRAME_DELTA && work != base)
		memcpy(work, base, len);
	if (dcr_frame_apply(c, out->data, out->len, work, len) ||
	    memcmp(work, chunk, len) != 0)
		return DCR_ERR(-ENOTRECOVERABLE);
	return 0;
}

int dcr_frame_encode(struct dcr_codec *c, const void *chunk, const void *base,
		     size_t len, struct dcr_buf *out, int *kind_out)
{
	return dcr_frame_encode2(c, chunk, base, len, NULL, out, kind_out);
}

int dcr_frame_parse_hdr(const void *p, size_t n, struct dcr_frame_hdr *h)
{
	const uint8_t *b = p;

	if (n < DCR_FRAME_HDR_LEN || memcmp(b, frame_magic, 4) != 0 ||
	    b[4] != DCR_FRAME_FORMAT || b[7] != 0)
		return DCR_ERR(-EBADMSG);
	h->kind = b[5];
	h->codec = b[6];
	h->raw_len = dcr_get_le32(b + 8);
	h->payload_len = dcr_get_le32(b + 12);
	if ((h->kind != DCR_FRAME_FULL && h->kind != DCR_FRAME_DELTA) ||
	    h->codec > DCR_CODEC_ELEM ||
	    h->raw_len == 0 || h->raw_len > DCR_CHUNK_MAX ||
	    h->payload_len > n - DCR_FRAME_HDR_LEN)
		return DCR_ERR(-EBADMSG);
	if (h->codec == DCR_CODEC_STORED && h->payload_len != h->raw_len)
		return DCR_ERR(-EBADMSG);
	return 0;
}

int dcr_frame_cost(const void *p, size_t n, uint64_t *cost)
{
	struct dcr_frame_hdr h;
	uint64_t dec;
	int ret = dcr_frame_parse_hdr(p, n, &h);

	if (ret)
		return ret;
	if (DCR_FRAME_HDR_LEN + (size_t)h.payload_len != n)
		return DCR_ERR(-EBADMSG);
	if (h.codec == DCR_CODEC_ELEM) {
		if ((ret = dcr_elem_cost((const uint8_t *)p + DCR_FRAME_HDR_LEN,
					 h.payload_len, h.kind == DCR_FRAME_DELTA,
					 h.raw_len, &dec)))
			return ret;
	} else {
		dec = (uint64_t)(h.codec == DCR_CODEC_ZSTD ? DCR_COST_ZSTD
							   : DCR_COST_COPY) * h.raw_len;
	}
	*cost = DCR_COST_FRAME + (uint64_t)DCR_COST_FETCH * n + dec;
	return 0;
}

int dcr_frame_apply(struct dcr_codec *c, const void *p, size_t n, void *dst,
		    size_t len)
{
	return dcr_frame_apply_rec(c, p, n, dst, len, NULL);
}

int dcr_frame_apply_rec(struct dcr_codec *c, const void *p, size_t n,
			void *dst, size_t len, struct dcr_frame_rec *rec)
{
	struct dcr_frame_hdr h;
	int ret = dcr_frame_parse_hdr(p, n, &h);

	if (rec)
		*rec = (struct dcr_frame_rec){ 0 };
	if (ret)
		return ret;
	if (h.raw_len != len || DCR_FRAME_HDR_LEN + (size_t)h.payload_len != n)
		return DCR_ERR(-EBADMSG);
	const uint8_t *payload = (const uint8_t *)p + DCR_FRAME_HDR_LEN;
	if (h.codec == DCR_CODEC_ELEM) {
		int complete = 0;

		ret = dcr_elem_apply(&c->ec, payload, h.payload_len,
				     h.kind == DCR_FRAME_DELTA, dst, len,
				     rec ? &complete : NULL);
		if (rec && !ret)
			*rec = (struct dcr_frame_rec){ c->ec.rec, c->ec.rec_n,
						       complete };
		return ret;
	}
	if (h.codec == DCR_CODEC_STORED) {
		if (h.kind == DCR_FRAME_DELTA)
			dcr_xor(dst, payload, len);
		else
			memcpy(dst, payload, len);
		return 0;
	}
	uint8_t *out = dst;
	if (h.kind == DCR_FRAME_DELTA) {
		if (!c->scratch && !(c->scratch = malloc(DCR_CHUNK_MAX)))
			return DCR_ERR(-ENOMEM);
		out = c->scratch;
	}
	/* The zstd frame must declare exactly len bytes of content. */
	unsigned long long csize = ZSTD_getFrameContentSize(payload, h.payload_len);
	if (csize != len)
		return DCR_ERR(-EBADMSG);
	size_t got = ZSTD_decompressDCtx(c->dctx, out, len, payload, h.payload_len);
	if (ZSTD_isError(got) || got != len)
		return DCR_ERR(-EBADMSG);
	if (h.kind == DCR_FRAME_DELTA)
		dcr_xor(dst, out, len);
	return 0;
}
