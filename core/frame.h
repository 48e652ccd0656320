/* SPDX-License-Identifier: MIT */
/*
 * frame.h - the encoded form of one chunk of one version.
 *
 * A frame is self-describing and decodable on its own:
 *
 *   offset size field
 *   0      4    magic "DCRF"
 *   4      1    format version (1)
 *   5      1    kind: 1 = full (the chunk), 2 = delta (XOR with the
 *                 same chunk of the parent version)
 *   6      1    codec: 0 = stored, 1 = zstd
 *   7      1    reserved, 0
 *   8      4    raw length (the chunk length), <= DCR_CHUNK_MAX
 *   12     4    payload length
 *   16     -    payload
 *
 * The materialized chunk is verified against the hash in the manifest,
 * so frames carry no checksum of their own; decoders still bound every
 * length they read and reject anything inconsistent with -EBADMSG.
 */
#ifndef DCR_FRAME_H
#define DCR_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define DCR_FRAME_HDR_LEN 16
#define DCR_FRAME_FORMAT 1

enum dcr_frame_kind {
	DCR_FRAME_FULL = 1,
	DCR_FRAME_DELTA = 2,
};

enum dcr_frame_codec {
	DCR_CODEC_STORED = 0,
	DCR_CODEC_ZSTD = 1,
};

/** Parsed frame header. */
struct dcr_frame_hdr {
	uint8_t kind;
	uint8_t codec;
	uint32_t raw_len;
	uint32_t payload_len;
};

/**
 * Per-thread codec state (compression contexts and scratch space).
 * Not thread-safe: use one per thread.
 */
struct dcr_codec;

/** Create codec state; @level is the zstd level (0 = default). */
struct dcr_codec *dcr_codec_new(int level);
/** Free; NULL accepted. */
void dcr_codec_free(struct dcr_codec *c);

/**
 * dcr_frame_encode - encode one chunk as a frame appended to @out.
 * @chunk: the new chunk, @len bytes (1 .. DCR_CHUNK_MAX).
 * @base:  the same chunk of the parent version, @len bytes, or NULL to
 *         force a full frame.
 * @kind_out: receives DCR_FRAME_FULL or DCR_FRAME_DELTA; the encoder
 *         emits a full frame whenever that is not larger than the delta.
 *
 * The caller decides separately that an identical chunk needs no frame.
 * Returns 0 or -errno (-ENOMEM, -EFBIG from @out's maximum, -EIO on a
 * codec failure).
 */
int dcr_frame_encode(struct dcr_codec *c, const void *chunk, const void *base,
		     size_t len, struct dcr_buf *out, int *kind_out);

/**
 * dcr_frame_parse_hdr - validate the header of the frame in @p[0..n).
 * Checks magic, version, kind, codec, raw_len <= DCR_CHUNK_MAX and that
 * the payload fits in @n. 0 or -EBADMSG.
 */
int dcr_frame_parse_hdr(const void *p, size_t n, struct dcr_frame_hdr *h);

/**
 * dcr_frame_apply - decode the frame @p[0..n) onto @dst of @len bytes.
 * A full frame overwrites @dst; a delta frame is XORed onto @dst, which
 * must hold the parent's chunk. The frame's raw length must equal @len.
 * Returns 0, or -EBADMSG for a malformed or corrupt frame (in which case
 * @dst holds unspecified bytes).
 */
int dcr_frame_apply(struct dcr_codec *c, const void *p, size_t n, void *dst,
		    size_t len);

/** XOR @n bytes of @src onto @dst. */
void dcr_xor(void *dst, const void *src, size_t n);

#endif /* DCR_FRAME_H */
