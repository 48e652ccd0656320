/* SPDX-License-Identifier: MIT */
/*
 * frame.c - encode and decode one chunk (see frame.h for the layout).
 *
 * This is the first codec: a delta is the XOR of the chunk with its
 * parent, compressed with zstd; a full frame is the chunk compressed with
 * zstd; either is stored raw when compression does not help. The codec
 * byte in the header leaves room for better encodings without breaking
 * frames already in stores.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "chunk.h"
#include "common.h"
#include "frame.h"

static const uint8_t frame_magic[4] = { 'D', 'C', 'R', 'F' };

struct dcr_codec {
	ZSTD_CCtx *cctx;
	ZSTD_DCtx *dctx;
	int level;
	uint8_t *scratch; /* DCR_CHUNK_MAX bytes: XOR of chunk and base */
	struct dcr_buf tmp; /* compressed candidate */
};

struct dcr_codec *dcr_codec_new(int level)
{
	struct dcr_codec *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->level = level ? level : 3;
	c->cctx = ZSTD_createCCtx();
	c->dctx = ZSTD_createDCtx();
	dcr_buf_init(&c->tmp, ZSTD_COMPRESSBOUND(DCR_CHUNK_MAX) + DCR_FRAME_HDR_LEN);
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

/* Compress @src into c->tmp as a complete frame; stored if not smaller. */
static int encode_one(struct dcr_codec *c, const void *src, size_t len,
		      int kind)
{
	size_t bound = ZSTD_compressBound(len);
	int ret = dcr_buf_reserve(&c->tmp, DCR_FRAME_HDR_LEN + DCR_MAX(bound, len));

	if (ret)
		return ret;
	size_t n = ZSTD_compressCCtx(c->cctx, c->tmp.data + DCR_FRAME_HDR_LEN,
				     bound, src, len, c->level);
	if (ZSTD_isError(n)) {
		dcr_err("zstd compression failed: %s", ZSTD_getErrorName(n));
		return DCR_ERR(-EIO);
	}
	int codec = DCR_CODEC_ZSTD;
	if (n >= len) {
		memcpy(c->tmp.data + DCR_FRAME_HDR_LEN, src, len);
		n = len;
		codec = DCR_CODEC_STORED;
	}
	put_hdr(c->tmp.data, kind, codec, (uint32_t)len, (uint32_t)n);
	c->tmp.len = DCR_FRAME_HDR_LEN + n;
	return 0;
}

int dcr_frame_encode(struct dcr_codec *c, const void *chunk, const void *base,
		     size_t len, struct dcr_buf *out, int *kind_out)
{
	int ret;

	if (len == 0 || len > DCR_CHUNK_MAX)
		return DCR_ERR(-EINVAL);
	if (base) {
		if (!c->scratch && !(c->scratch = malloc(DCR_CHUNK_MAX)))
			return DCR_ERR(-ENOMEM);
		memcpy(c->scratch, chunk, len);
		dcr_xor(c->scratch, base, len);
		ret = encode_one(c, c->scratch, len, DCR_FRAME_DELTA);
		if (ret)
			return ret;
		/*
		 * A delta that compresses to near nothing is the common case;
		 * only when it is large is a full frame worth trying.
		 */
		if (c->tmp.len - DCR_FRAME_HDR_LEN < len / 2)
			goto emit;
		struct dcr_buf delta = c->tmp;
		dcr_buf_init(&c->tmp, delta.max);
		ret = encode_one(c, chunk, len, DCR_FRAME_FULL);
		if (ret) {
			dcr_buf_free(&c->tmp);
			c->tmp = delta;
			return ret;
		}
		if (c->tmp.len < delta.len) {
			dcr_buf_free(&delta);
		} else {
			dcr_buf_free(&c->tmp);
			c->tmp = delta;
		}
		goto emit;
	}
	ret = encode_one(c, chunk, len, DCR_FRAME_FULL);
	if (ret)
		return ret;
emit:
	*kind_out = c->tmp.data[5];
	return dcr_buf_append(out, c->tmp.data, c->tmp.len);
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
	    (h->codec != DCR_CODEC_STORED && h->codec != DCR_CODEC_ZSTD) ||
	    h->raw_len == 0 || h->raw_len > DCR_CHUNK_MAX ||
	    h->payload_len > n - DCR_FRAME_HDR_LEN)
		return DCR_ERR(-EBADMSG);
	if (h->codec == DCR_CODEC_STORED && h->payload_len != h->raw_len)
		return DCR_ERR(-EBADMSG);
	return 0;
}

int dcr_frame_apply(struct dcr_codec *c, const void *p, size_t n, void *dst,
		    size_t len)
{
	struct dcr_frame_hdr h;
	int ret = dcr_frame_parse_hdr(p, n, &h);

	if (ret)
		return ret;
	if (h.raw_len != len || DCR_FRAME_HDR_LEN + (size_t)h.payload_len != n)
		return DCR_ERR(-EBADMSG);
	const uint8_t *payload = (const uint8_t *)p + DCR_FRAME_HDR_LEN;
	uint8_t *out = dst;
	if (h.kind == DCR_FRAME_DELTA) {
		if (!c->scratch && !(c->scratch = malloc(DCR_CHUNK_MAX)))
			return DCR_ERR(-ENOMEM);
		out = c->scratch;
	}
	if (h.codec == DCR_CODEC_STORED) {
		if (h.kind == DCR_FRAME_DELTA) {
			dcr_xor(dst, payload, len);
			return 0;
		}
		memcpy(dst, payload, len);
		return 0;
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
