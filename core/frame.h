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
 *   6      1    codec: 0 = stored, 1 = zstd, 2 = element codec (below)
 *   7      1    reserved, 0
 *   8      4    raw length (the chunk length), <= DCR_CHUNK_MAX
 *   12     4    payload length
 *   16     -    payload
 *
 * Codec 0 and 1 payloads are the chunk (full) or its XOR with the parent
 * (delta), stored or as one zstd frame. Codec 2 ("element codec", the
 * default since it exists) splits the chunk into segments of one element
 * type each and codes every segment with its own method:
 *
 *   payload := u8 layout (1), varint nseg (1..DCR_FRAME_SEG_MAX), nseg x
 *     segment := u8 dtype (enum dcr_dtype), u8 method, varint len
 *                (bytes, a multiple of the dtype's width), varint plen,
 *                plen bytes of method data
 *   The segment lengths sum to the raw length.
 *
 *   methods (D: delta frames only; the others in both kinds):
 *   0 zero    plen 0. Delta: unchanged. Full: zero bytes.
 *   1 raw     the bytes (full) or their XOR with the parent (delta).
 *   2 sparse  D. The changed elements: u8 value mode (0 = XOR,
 *             1 = ADD: new - old modulo 2^(8 width), zigzag-signed),
 *             u8 position model, varint count (>= 1), gap table, value
 *             table (entropy.h tables, <= 128 symbols), then
 *               model 0 (gaps, one state; still decoded, no longer
 *                 written): varint coded length, one rANS stream;
 *               model 1 (gaps, two states; written since it exists):
 *                 varint length of stream 0, of stream 1, stream 0,
 *                 stream 1; change j (from 0) is coded by state j % 2
 *                 in stream j % 2, so the decoder runs two independent
 *                 dependency chains.
 *             Each stream starts with its state (u32 LE) and holds, per
 *             change it codes, in order: gap symbol and extra bits,
 *             value symbol and extra bits. A gap is the number of
 *             unchanged elements before the change; a value is the XOR
 *             (or the zigzag difference) minus 1. Integers v are coded
 *             as symbol v for v < 16, else 16 + 4 (b - 5) + the two bits
 *             below the top bit, b = bit length of v, followed by the
 *             b - 3 low bits raw (in rANS, high part first when > 15).
 *   3 planes  the (XOR or full) elements split into width byte planes,
 *             each coded as an entropy.h plane. bf16 and f32 elements
 *             are first rearranged so plane 0 is the 8-bit exponent and
 *             plane 1 the sign and top 7 mantissa bits; other types use
 *             the little-endian bytes in order.
 *   4 zstd    one zstd frame of the (XOR or full) bytes.
 *
 * ADD-mode sparse segments depend on the parent's values, not only on
 * its XOR: such a frame applies only onto the exact parent chunk (which
 * dcr_frame_apply already requires). Folding deltas (skip-deltas) must
 * therefore materialize chunks and re-encode, or encode with
 * DCR_ENC_XOR_ONLY.
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
	DCR_CODEC_ELEM = 2,
};

/** Most segments in one codec-2 frame. */
#define DCR_FRAME_SEG_MAX 1024

/**
 * Element types of a byte range, as far as the codec cares: the element
 * width, and whether the element is a float with an 8-bit exponent below
 * the sign bit (bf16, f32), whose exponent is coded apart. The values are
 * part of the frame format.
 */
enum dcr_dtype {
	DCR_DT_BYTES = 0, /* no structure known: byte mode */
	DCR_DT_BF16 = 1,
	DCR_DT_F16 = 2,
	DCR_DT_F32 = 3,
	DCR_DT_F8 = 4,    /* any 1-byte float */
	DCR_DT_U16 = 5,   /* other 2-byte elements */
	DCR_DT_U32 = 6,   /* other 4- and 8-byte elements */
	DCR_DT_COUNT
};

/** Width in bytes of an element of @dt (1 for unknown values). */
static inline unsigned dcr_dtype_width(unsigned dt)
{
	static const uint8_t w[DCR_DT_COUNT] = { 1, 2, 2, 4, 1, 2, 4 };
	return dt < DCR_DT_COUNT ? w[dt] : 1;
}

/** A byte range of a file holding elements of one type. */
struct dcr_region {
	uint64_t off;   /* file offset of the first element */
	uint64_t len;   /* bytes */
	uint8_t dtype;  /* enum dcr_dtype */
};

/**
 * Element hint for one chunk: the element regions of the whole file
 * (sorted by offset, not overlapping; see dcr_safetensors_regions) and
 * the file offset of the chunk. Bytes no region covers, and elements cut
 * by the chunk's edges, are coded in byte mode. Purely an encoder aid:
 * the frame records what the decoder needs.
 */
struct dcr_elem_hint {
	const struct dcr_region *r;
	size_t n;
	uint64_t chunk_off;
	unsigned flags; /* DCR_ENC_* */
};

/** Encoder flag: code every delta as a pure XOR mask (no ADD values),
 *  so frames can be folded by XOR without their parents. */
#define DCR_ENC_XOR_ONLY 1u

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
 * dcr_frame_encode - encode one chunk as a frame appended to @out,
 * in byte mode (dcr_frame_encode2 with no hint).
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
 * dcr_frame_encode2 - dcr_frame_encode with element hints.
 * @hint: element regions (may be NULL: the whole chunk is bytes).
 *
 * Per segment it picks the smallest of sparse (delta only), planes, zstd,
 * raw and zero; a full frame when that is smaller than the delta; and a
 * stored frame (codec 0) when nothing beats the raw chunk. Same returns
 * as dcr_frame_encode. Not thread-safe per @c.
 */
int dcr_frame_encode2(struct dcr_codec *c, const void *chunk, const void *base,
		      size_t len, const struct dcr_elem_hint *hint,
		      struct dcr_buf *out, int *kind_out);

/**
 * dcr_frame_encode_checked - dcr_frame_encode2, then the frame decoded
 * back and compared with @chunk before anyone publishes it (the one
 * encode of a chunk for the store: a commit's, a compaction's): an
 * encoder bug fails the writer, never a later read. The decode runs on
 * @work (@len bytes), which may be @base itself (the encoder only reads
 * the base; the decode then overwrites it), else the base is copied
 * there first. Returns as dcr_frame_encode2, or -ENOTRECOVERABLE when
 * the frame does not decode to @chunk (not logged: the caller names the
 * chunk). Not thread-safe per @c.
 */
int dcr_frame_encode_checked(struct dcr_codec *c, const void *chunk,
			     const void *base, size_t len,
			     const struct dcr_elem_hint *hint,
			     struct dcr_buf *out, int *kind_out, void *work);

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

/*
 * Cold-read cost model, for encoders that trade size against read time
 * (compaction): units of about 0.1 ns of one core, i.e. one byte copied.
 * Measured with tests/bench/bench_apply on dcrfs-synth bf16 steps: a
 * planes segment decodes at ~0.6 ns per raw byte, a sparse one at ~12 ns
 * per coded byte (per changed element, whatever the density), zstd at
 * ~1 ns per raw byte. A frame is fetched (a local or LAN store: ~0.3 ns
 * a byte, ~10 us a request) and proven by its SHA-256 (~2 ns a byte)
 * before it is applied.
 */
#define DCR_COST_COPY 1     /* per raw byte: stored, raw, full zero */
#define DCR_COST_PLANES 6   /* per raw byte */
#define DCR_COST_ZSTD 10    /* per raw byte */
#define DCR_COST_SPARSE 124 /* per coded byte */
#define DCR_COST_FETCH 24   /* per frame byte: read and hashed */
#define DCR_COST_FRAME 100000 /* per frame: a request */

/**
 * dcr_frame_cost - the modelled cost of fetching the frame @p[0..n) and
 * applying it (the DCR_COST_* units above), from its headers alone; it
 * does not depend on the machine, so encoders that use it stay
 * deterministic. 0 and *@cost, or -EBADMSG for a malformed frame.
 */
int dcr_frame_cost(const void *p, size_t n, uint64_t *cost);

/** Packing of one entry of struct dcr_frame_rec: the byte offset in the
 *  chunk of a changed element (below 2^26: DCR_CHUNK_MAX) and, in bits
 *  28..29, log2 of its width (1, 2 or 4 bytes, the segment's dtype). */
#define DCR_REC_OFF_MASK ((UINT32_C(1) << 26) - 1)
#define DCR_REC_WSHIFT 28

/** Width in bytes of the element of record entry @e. */
static inline unsigned dcr_rec_width(uint32_t e)
{
	return 1u << ((e >> DCR_REC_WSHIFT) & 3);
}

/**
 * What a delta frame changed, as dcr_frame_apply_rec saw it decode: the
 * elements whose bytes it changed, in increasing order of offset, each
 * at the width of the segment that holds it (entries packed as
 * DCR_REC_*). Valid until the next call on the same codec.
 * @complete is false when the frame changed bytes the decoder does not
 * list (a full frame, or a delta of codec 0 or 1): then @e means
 * nothing.
 */
struct dcr_frame_rec {
	const uint32_t *e;
	size_t n;
	int complete;
};

/**
 * dcr_frame_apply_rec - dcr_frame_apply that also lists, in *@rec, the
 * elements a delta frame changed: those of its sparse segments (each a
 * change, XOR or ADD, that is never zero: the element's bytes differ)
 * and the elements of its raw, planes and zstd segments whose XOR is not
 * zero;
 * zero segments change nothing. The list comes from the same decode that
 * writes @dst, so it holds exactly the elements whose bytes differ from
 * the parent's. Same returns as dcr_frame_apply (-ENOMEM also when the
 * list cannot grow). Not thread-safe per @c.
 */
int dcr_frame_apply_rec(struct dcr_codec *c, const void *p, size_t n,
			void *dst, size_t len, struct dcr_frame_rec *rec);

/** XOR @n bytes of @src onto @dst. */
void dcr_xor(void *dst, const void *src, size_t n);

#endif /* DCR_FRAME_H */
