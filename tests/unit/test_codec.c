/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the element codec (core/codec_elem.c, core/entropy.c,
 * core/safetensors.c): round trips of every method and dtype, element
 * hints, golden frames that pin the format, old codecs still decoding,
 * and hostile frames and headers.
 *
 * Golden files: tests/golden/NAME.dcrf are frames of deterministic inputs.
 * The test decodes each and checks the bytes, and re-encodes the input
 * and checks that the encoder still writes exactly the golden frame. An
 * intended format or encoder change regenerates them with
 *   DCR_GOLDEN_WRITE=1 tests/unit/test_codec
 * (and says so in the commit message); anything else failing here is an
 * accidental change of the on-store format.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <zstd.h>

#include "buf.h"
#include "chunk.h"
#include "codec_elem.h"
#include "entropy.h"
#include "frame.h"
#include "safetensors.h"

#ifndef DCR_GOLDEN_DIR
#define DCR_GOLDEN_DIR "tests/golden"
#endif

static uint64_t rng;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* bf16 weights ~ N(0, 0.02) (sum of four uniforms). */
static uint16_t rand_bf16(void)
{
	uint64_t r = next_rand();
	float f = ((float)((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) +
			   (r >> 48)) - 131070.0f) * (0.02f / 37837.23f);
	uint32_t u;
	memcpy(&u, &f, 4);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

static void fill_bf16(uint8_t *p, size_t n)
{
	for (size_t i = 0; i + 1 < n; i += 2) {
		uint16_t h = rand_bf16();
		memcpy(p + i, &h, 2);
	}
	if (n & 1)
		p[n - 1] = 0x3c;
}

static void fill_f32(uint8_t *p, size_t n)
{
	for (size_t i = 0; i + 3 < n; i += 4) {
		float f = (float)rand_bf16() / 65536.0f + 0.5f;
		memcpy(p + i, &f, 4);
	}
}

/* Change about @permille of the @w-byte elements: XOR in the low bits
 * (@add = 0) or +-1 in the integer pattern (@add = 1). */
static void perturb(uint8_t *p, size_t n, unsigned w, unsigned permille, int add)
{
	for (size_t i = 0; i + w <= n; i += w) {
		if (next_rand() % 1000 >= permille)
			continue;
		if (!add) {
			p[i] ^= (uint8_t)(1 + next_rand() % 7);
			continue;
		}
		uint32_t v = 0;
		memcpy(&v, p + i, w);
		v += (next_rand() & 1) ? 1 : (uint32_t)-1;
		memcpy(p + i, &v, w);
	}
}

struct fx {
	struct dcr_codec *c;
	struct dcr_buf out;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	f->c = dcr_codec_new(0);
	dcr_buf_init(&f->out, 2 * (size_t)DCR_CHUNK_MAX);
	rng = 88172645463325252ull;
	*state = f;
	return f->c ? 0 : -1;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	dcr_codec_free(f->c);
	dcr_buf_free(&f->out);
	free(f);
	return 0;
}

/* Encode, check header and codec, decode onto base (or garbage), compare. */
static void roundtrip(struct fx *f, const uint8_t *chunk, const uint8_t *base,
		      size_t len, const struct dcr_elem_hint *h, int want_kind,
		      int want_codec)
{
	int kind;
	uint8_t *dst = malloc(len);

	dcr_buf_reset(&f->out);
	assert_int_equal(dcr_frame_encode2(f->c, chunk, base, len, h, &f->out, &kind), 0);
	struct dcr_frame_hdr hd;
	assert_int_equal(dcr_frame_parse_hdr(f->out.data, f->out.len, &hd), 0);
	assert_int_equal(hd.kind, kind);
	if (want_kind)
		assert_int_equal(kind, want_kind);
	if (want_codec >= 0)
		assert_int_equal(hd.codec, want_codec);
	if (kind == DCR_FRAME_DELTA)
		memcpy(dst, base, len);
	else
		memset(dst, 0xa5, len);
	assert_int_equal(dcr_frame_apply(f->c, f->out.data, f->out.len, dst, len), 0);
	assert_memory_equal(dst, chunk, len);
	free(dst);
}

static struct dcr_elem_hint one_region(struct dcr_region *r, uint8_t dt, size_t len)
{
	r->off = 0;
	r->len = len;
	r->dtype = dt;
	struct dcr_elem_hint h = { r, 1, 0, 0 };
	return h;
}

/* The first method byte of a single-segment codec-2 frame. */
static int seg0_method(const struct fx *f)
{
	return f->out.data[DCR_FRAME_HDR_LEN + 3];
}

static void test_sparse_bf16(void **state)
{
	struct fx *f = *state;
	size_t len = 1 << 20;
	uint8_t *base = malloc(len), *chunk = malloc(len);
	struct dcr_region r;
	struct dcr_elem_hint h = one_region(&r, DCR_DT_BF16, len);

	fill_bf16(base, len);
	for (int add = 0; add <= 1; add++) {
		memcpy(chunk, base, len);
		perturb(chunk, len, 2, 30, add);
		roundtrip(f, chunk, base, len, &h, DCR_FRAME_DELTA, DCR_CODEC_ELEM);
		assert_int_equal(seg0_method(f), DCR_SM_SPARSE);
		/* near the order-0 bound: about 0.3 bits per element or less */
		assert_true(f->out.len < len / 40);
		/* +-1 steps cost less than XOR flips of 1..7 */
		if (add)
			assert_true(f->out.len < len / 60);
	}
	/* XOR-only encoding of the same data still round-trips */
	h.flags = DCR_ENC_XOR_ONLY;
	roundtrip(f, chunk, base, len, &h, DCR_FRAME_DELTA, DCR_CODEC_ELEM);
	/* the value mode (first payload byte of the segment) is XOR */
	size_t o = DCR_FRAME_HDR_LEN + 4;
	for (int v = 0; v < 2; v++)
		while (f->out.data[o++] & 0x80)
			;
	assert_int_equal(f->out.data[o], 0);
	free(base);
	free(chunk);
}

/* The position model (second payload byte) of a single-segment sparse frame. */
static int seg0_pmodel(const struct fx *f)
{
	size_t o = DCR_FRAME_HDR_LEN + 4;

	for (int v = 0; v < 2; v++) /* the segment's len and plen */
		while (f->out.data[o++] & 0x80)
			;
	return f->out.data[o + 1];
}

/*
 * Sparse frames are written with two interleaved states (position
 * model 1): one to five changes (state 1's stream holding no change or
 * one), and integers above 2^18, which take the checked decoder, on
 * either state: values (high f32 bits) and a gap (bf16).
 */
static void test_sparse_states(void **state)
{
	struct fx *f = *state;
	size_t len = 1 << 20;
	uint8_t *base = malloc(len), *chunk = malloc(len);
	static const uint32_t pos[5] = { 7, 1000, 1001, 90000, 262000 };

	for (int dt = 0; dt < 2; dt++) {
		unsigned w = dt ? 4 : 2;
		struct dcr_region r;
		struct dcr_elem_hint h = one_region(&r, dt ? DCR_DT_F32 : DCR_DT_BF16, len);
		if (dt)
			fill_f32(base, len);
		else
			fill_bf16(base, len);
		for (unsigned n = 1; n <= 5; n++) {
			for (unsigned big = 0; big < 4; big++) {
				memcpy(chunk, base, len);
				for (unsigned k = 0; k < n; k++) {
					uint32_t e = pos[k];
					/* bf16: one change far out, a gap above 2^18 */
					if (!dt && big && k == n - 1)
						e = 300000 + 7 * big + k;
					uint8_t *p = chunk + (size_t)e * w;
					if (dt && (big >> (k & 1)) & 1)
						p[3] ^= 0x40; /* XOR 2^30: 27 extra bits */
					else
						p[0] ^= (uint8_t)(1 + k);
				}
				roundtrip(f, chunk, base, len, &h, DCR_FRAME_DELTA, DCR_CODEC_ELEM);
				assert_int_equal(seg0_method(f), DCR_SM_SPARSE);
				assert_int_equal(seg0_pmodel(f), 1);
			}
		}
	}
	free(base);
	free(chunk);
}

static void test_widths_and_dense(void **state)
{
	struct fx *f = *state;
	size_t len = 256 << 10;
	uint8_t *base = malloc(len), *chunk = malloc(len);
	static const uint8_t dts[] = { DCR_DT_BYTES, DCR_DT_BF16, DCR_DT_F16,
				       DCR_DT_F32, DCR_DT_F8, DCR_DT_U16, DCR_DT_U32 };
	static const unsigned rates[] = { 1, 50, 600, 1000 };

	for (size_t d = 0; d < sizeof(dts); d++) {
		struct dcr_region r;
		struct dcr_elem_hint h = one_region(&r, dts[d], len);
		unsigned w = dcr_dtype_width(dts[d]);
		if (w == 4)
			fill_f32(base, len);
		else
			fill_bf16(base, len);
		roundtrip(f, base, NULL, len, &h, DCR_FRAME_FULL, -1);
		for (size_t k = 0; k < sizeof(rates) / sizeof(rates[0]); k++) {
			memcpy(chunk, base, len);
			perturb(chunk, len, w, rates[k], (int)(k & 1));
			roundtrip(f, chunk, base, len, &h, 0, -1);
		}
	}
	free(base);
	free(chunk);
}

static void test_full_bf16_planes(void **state)
{
	struct fx *f = *state;
	size_t len = 1 << 20;
	uint8_t *chunk = malloc(len);
	struct dcr_region r;
	struct dcr_elem_hint h = one_region(&r, DCR_DT_BF16, len);

	fill_bf16(chunk, len);
	roundtrip(f, chunk, NULL, len, &h, DCR_FRAME_FULL, DCR_CODEC_ELEM);
	assert_int_equal(seg0_method(f), DCR_SM_PLANES);
	/* exponents apart: well under the 72 % target */
	assert_true(f->out.len < len * 70 / 100);
	/* a delta of a fully rewritten chunk falls back to the full frame */
	uint8_t *other = malloc(len);
	fill_bf16(other, len);
	roundtrip(f, chunk, other, len, &h, DCR_FRAME_FULL, DCR_CODEC_ELEM);
	free(other);
	free(chunk);
}

/* A chunk holding a JSON header, a bf16 tensor cut at both chunk edges at
 * odd offsets, an f32 tensor, a tiny tensor and uncovered bytes. */
static void test_hint_segments(void **state)
{
	struct fx *f = *state;
	size_t len = 64 << 10;
	uint64_t coff = 3 * (uint64_t)len;
	struct dcr_region rs[] = {
		{ 100, coff + 20001 - 100, DCR_DT_BF16 },   /* ends mid-chunk, odd */
		{ coff + 20001, 300, DCR_DT_BF16 },         /* too small: bytes */
		{ coff + 20301, 8000, DCR_DT_F32 },
		{ coff + 40000, 100000, DCR_DT_BF16 },      /* runs past the chunk */
	};
	struct dcr_elem_hint h = { rs, 4, coff, 0 };
	struct dcr_seg segs[16];
	size_t n = dcr_elem_segments(&h, len, segs, 16);

	/* bf16 [0,20000) aligned to the region start at 100 (even: 100 + 2k) */
	assert_true(n >= 4);
	assert_int_equal(segs[0].dtype, DCR_DT_BF16);
	assert_int_equal(segs[0].off, 0);
	assert_int_equal(segs[0].len % 2, 0);
	uint32_t pos = 0;
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(segs[i].off, pos);
		assert_int_equal(segs[i].len % dcr_dtype_width(segs[i].dtype), 0);
		if (i)
			assert_int_not_equal(segs[i].dtype, segs[i - 1].dtype);
		pos += segs[i].len;
	}
	assert_int_equal(pos, len);
	assert_int_equal(segs[n - 1].dtype, DCR_DT_BF16);

	uint8_t *base = malloc(len), *chunk = malloc(len);
	fill_bf16(base, len);
	memcpy(base + 20301, "{\"a\": \"json-ish text\"}", 22);
	memcpy(chunk, base, len);
	perturb(chunk, len, 2, 40, 1);
	roundtrip(f, chunk, base, len, &h, DCR_FRAME_DELTA, DCR_CODEC_ELEM);
	roundtrip(f, chunk, NULL, len, &h, DCR_FRAME_FULL, -1);
	/* no hint, and a hint whose regions miss the chunk, mean byte mode */
	assert_int_equal(dcr_elem_segments(NULL, len, segs, 16), 1);
	struct dcr_elem_hint far = { rs, 4, coff * 100, 0 };
	assert_int_equal(dcr_elem_segments(&far, len, segs, 16), 1);
	assert_int_equal(segs[0].dtype, DCR_DT_BYTES);
	free(base);
	free(chunk);
}

/*
 * dcr_frame_apply_rec lists exactly the elements a delta frame changed
 * (the delta view's by-product, read/dvrec.h): every listed element
 * differs from the base, every differing byte is in a listed element,
 * in increasing order, at its segment's width; for sparse (XOR and ADD),
 * planes, zstd and raw segments, across a chunk of several segments (a
 * bf16 tensor cut at odd offsets, bytes, f32).
 */
static void check_rec(struct fx *f, const uint8_t *chunk, const uint8_t *base,
		      size_t len, const struct dcr_elem_hint *h, int *complete)
{
	struct dcr_frame_rec rec;
	uint8_t *dst = malloc(len), *seen = calloc(len, 1);
	int kind;

	dcr_buf_reset(&f->out);
	assert_int_equal(dcr_frame_encode2(f->c, chunk, base, len, h, &f->out, &kind), 0);
	assert_int_equal(kind, DCR_FRAME_DELTA);
	memcpy(dst, base, len);
	assert_int_equal(dcr_frame_apply_rec(f->c, f->out.data, f->out.len, dst,
					     len, &rec), 0);
	assert_memory_equal(dst, chunk, len);
	*complete = rec.complete;
	if (!rec.complete)
		goto out;
	for (size_t i = 0; i < rec.n; i++) {
		uint32_t o = rec.e[i] & DCR_REC_OFF_MASK;
		unsigned w = dcr_rec_width(rec.e[i]);

		assert_true(o + w <= len);
		if (i)
			assert_true(o >= (rec.e[i - 1] & DCR_REC_OFF_MASK) +
					 dcr_rec_width(rec.e[i - 1]));
		assert_memory_not_equal(chunk + o, base + o, w);
		memset(seen + o, 1, w);
	}
	for (size_t k = 0; k < len; k++)
		if (chunk[k] != base[k])
			assert_int_equal(seen[k], 1);
out:
	free(seen);
	free(dst);
}

static void test_apply_rec(void **state)
{
	struct fx *f = *state;
	size_t len = 64 << 10;
	uint64_t coff = 3 * (uint64_t)len;
	struct dcr_region rs[] = {
		{ 100, coff + 20001 - 100, DCR_DT_BF16 },
		{ coff + 20001, 300, DCR_DT_BF16 },
		{ coff + 20301, 8000, DCR_DT_F32 },
		{ coff + 40000, 100000, DCR_DT_BF16 },
	};
	struct dcr_elem_hint h = { rs, 4, coff, 0 };
	uint8_t *base = malloc(len), *chunk = malloc(len);
	int complete;

	fill_bf16(base, len);
	fill_f32(base + 20304, 8000);
	/* sparse, XOR and ADD values: listed */
	for (int add = 0; add <= 1; add++) {
		memcpy(chunk, base, len);
		perturb(chunk, len, 2, 30, add);
		check_rec(f, chunk, base, len, &h, &complete);
		assert_true(complete);
	}
	/* dense changes of random bytes (zstd or raw segments): listed */
	memcpy(chunk, base, len);
	for (size_t k = 0; k < len; k++)
		if (next_rand() % 3 == 0)
			chunk[k] = (uint8_t)next_rand();
	check_rec(f, chunk, base, len, &h, &complete);
	assert_true(complete);
	/* a change in every element: planes */
	memcpy(chunk, base, len);
	perturb(chunk, len, 2, 1000, 0);
	check_rec(f, chunk, base, len, &h, &complete);
	assert_true(complete);
	/* a change in every tenth: planes or sparse */
	memcpy(chunk, base, len);
	perturb(chunk, len, 2, 100, 0);
	check_rec(f, chunk, base, len, &h, &complete);
	assert_true(complete);
	/* an unchanged chunk coded as a delta of zero segments: nothing */
	memcpy(chunk, base, len);
	chunk[len - 1] ^= 1;
	check_rec(f, chunk, base, len, &h, &complete);
	assert_true(complete);
	free(base);
	free(chunk);
}

static void test_text_and_small(void **state)
{
	struct fx *f = *state;
	char text[8192];
	size_t n = 0;

	while (n + 64 < sizeof(text))
		n += (size_t)snprintf(text + n, sizeof(text) - n,
				      "{\"layer\": %zu, \"dtype\": \"BF16\"},\n", n);
	roundtrip(f, (uint8_t *)text, NULL, n, NULL, DCR_FRAME_FULL, DCR_CODEC_ELEM);
	assert_int_equal(seg0_method(f), DCR_SM_ZSTD);
	for (size_t len = 1; len < 40; len++) {
		uint8_t a[40], b[40];
		for (size_t i = 0; i < len; i++)
			a[i] = b[i] = (uint8_t)next_rand();
		b[len / 2] ^= 1;
		roundtrip(f, b, a, len, NULL, 0, -1);
		roundtrip(f, a, NULL, len, NULL, DCR_FRAME_FULL, -1);
	}
	/* identical chunk: a tiny zero delta */
	roundtrip(f, (uint8_t *)text, (uint8_t *)text, n, NULL, DCR_FRAME_DELTA,
		  DCR_CODEC_ELEM);
	assert_true(f->out.len < 32);
}

/* Frames of codec 1 (the first format) still decode. */
static void test_codec1_still_decodes(void **state)
{
	struct fx *f = *state;
	size_t len = 65536;
	uint8_t *base = malloc(len), *chunk = malloc(len), *x = malloc(len);
	uint8_t *frame = malloc(DCR_FRAME_HDR_LEN + ZSTD_compressBound(len));

	fill_bf16(base, len);
	memcpy(chunk, base, len);
	perturb(chunk, len, 2, 30, 0);
	for (size_t i = 0; i < len; i++)
		x[i] = chunk[i] ^ base[i];
	size_t zn = ZSTD_compress(frame + DCR_FRAME_HDR_LEN, ZSTD_compressBound(len),
				  x, len, 3);
	assert_false(ZSTD_isError(zn));
	memcpy(frame, "DCRF", 4);
	frame[4] = 1;
	frame[5] = DCR_FRAME_DELTA;
	frame[6] = DCR_CODEC_ZSTD;
	frame[7] = 0;
	dcr_put_le32(frame + 8, (uint32_t)len);
	dcr_put_le32(frame + 12, (uint32_t)zn);
	memcpy(x, base, len);
	assert_int_equal(dcr_frame_apply(f->c, frame, DCR_FRAME_HDR_LEN + zn, x, len), 0);
	assert_memory_equal(x, chunk, len);
	free(base);
	free(chunk);
	free(x);
	free(frame);
}

/* ------------------------------------------------------------ golden */

struct golden {
	const char *name;
	uint8_t dtype;       /* of the single region covering the chunk */
	size_t len;
	int delta;
	unsigned permille;   /* changed elements */
	int add;
	int old;             /* a frame of an earlier encoder: decoded only */
};

static const struct golden goldens[] = {
	/* sparse segments of one rANS state (position model 0) */
	{ "sparse-xor-bf16", DCR_DT_BF16, 16384, 1, 30, 0, 1 },
	{ "sparse-add-bf16", DCR_DT_BF16, 16384, 1, 30, 1, 1 },
	{ "sparse-add-f32", DCR_DT_F32, 16384, 1, 50, 1, 1 },
	{ "sparse-bytes", DCR_DT_BYTES, 16384, 1, 20, 0, 1 },
	/* two interleaved states (position model 1) */
	{ "sparse2-xor-bf16", DCR_DT_BF16, 16384, 1, 30, 0, 0 },
	{ "sparse2-add-bf16", DCR_DT_BF16, 16384, 1, 30, 1, 0 },
	{ "sparse2-add-f32", DCR_DT_F32, 16384, 1, 50, 1, 0 },
	{ "sparse2-bytes", DCR_DT_BYTES, 16384, 1, 20, 0, 0 },
	{ "dense-bf16", DCR_DT_BF16, 16384, 1, 700, 0, 0 },
	{ "full-bf16", DCR_DT_BF16, 16384, 0, 0, 0, 0 },
	{ "full-f32", DCR_DT_F32, 16384, 0, 0, 0, 0 },
	{ "full-bytes", DCR_DT_BYTES, 4000, 0, 0, 0, 0 },
	/* planes of >= DCR_ENT_X32_MIN symbols: plane mode 3, raw mantissas */
	{ "full-bf16-x32", DCR_DT_BF16, 65536, 0, 0, 0, 0 },
	{ "full-f32-x32", DCR_DT_F32, 131072, 0, 0, 0, 0 },
};

/* Deterministic input of golden @g: base and chunk. */
static void golden_input(const struct golden *g, uint8_t *base, uint8_t *chunk)
{
	rng = 0x9e3779b97f4a7c15ull;
	if (g->dtype == DCR_DT_F32)
		fill_f32(base, g->len);
	else if (g->dtype == DCR_DT_BYTES && !g->delta)
		for (size_t i = 0; i < g->len; i++)
			base[i] = (uint8_t)"dcrfs golden text, "[i % 19];
	else
		fill_bf16(base, g->len);
	memcpy(chunk, base, g->len);
	if (g->delta)
		perturb(chunk, g->len, dcr_dtype_width(g->dtype), g->permille, g->add);
}

static void test_golden(void **state)
{
	struct fx *f = *state;
	const char *write = getenv("DCR_GOLDEN_WRITE");

	for (size_t k = 0; k < sizeof(goldens) / sizeof(goldens[0]); k++) {
		const struct golden *g = &goldens[k];
		uint8_t *base = malloc(g->len), *chunk = malloc(g->len), *dst = malloc(g->len);
		char path[512];
		struct dcr_region r;
		struct dcr_elem_hint h = one_region(&r, g->dtype, g->len);
		int kind;

		golden_input(g, base, chunk);
		dcr_buf_reset(&f->out);
		assert_int_equal(dcr_frame_encode2(f->c, chunk, g->delta ? base : NULL,
						   g->len, &h, &f->out, &kind), 0);
		snprintf(path, sizeof(path), "%s/%s.dcrf", DCR_GOLDEN_DIR, g->name);
		if (write && *write == '1' && !g->old) {
			FILE *fp = fopen(path, "wb");
			assert_non_null(fp);
			assert_int_equal(fwrite(f->out.data, 1, f->out.len, fp), f->out.len);
			fclose(fp);
		}
		FILE *fp = fopen(path, "rb");
		if (!fp)
			fail_msg("golden file %s missing", path);
		uint8_t *gold = malloc(2 * g->len + 256);
		size_t gn = fread(gold, 1, 2 * g->len + 256, fp);
		fclose(fp);
		/* the pinned bytes decode to the input... */
		struct dcr_frame_hdr hd;
		assert_int_equal(dcr_frame_parse_hdr(gold, gn, &hd), 0);
		if (hd.kind == DCR_FRAME_DELTA)
			memcpy(dst, base, g->len);
		assert_int_equal(dcr_frame_apply(f->c, gold, gn, dst, g->len), 0);
		assert_memory_equal(dst, chunk, g->len);
		/* an old frame: its position model, and no prefix decodes */
		if (g->old) {
			assert_int_equal(gold[DCR_FRAME_HDR_LEN + 3], 2); /* sparse */
			const uint8_t *q = gold + DCR_FRAME_HDR_LEN + 4;
			for (int v = 0; v < 2; v++) /* the segment's len and plen */
				while (*q++ & 0x80)
					;
			assert_int_equal(q[1], 0); /* position model: one state */
			for (size_t cut = DCR_FRAME_HDR_LEN; cut < gn; cut++) {
				dcr_put_le32(gold + 12, (uint32_t)(cut - DCR_FRAME_HDR_LEN));
				memcpy(dst, base, g->len);
				assert_int_equal(dcr_frame_apply(f->c, gold, cut, dst, g->len),
						 -EBADMSG);
			}
		}
		/* ...and the encoder still writes exactly them */
		if (!g->old && (gn != f->out.len || memcmp(gold, f->out.data, gn)))
			fail_msg("%s: encoder output differs from the golden frame "
				 "(%zu vs %zu bytes): format or encoder changed", g->name,
				 f->out.len, gn);
		free(gold);
		free(base);
		free(chunk);
		free(dst);
	}
}

/* ----------------------------------------------------------- hostile */

static void test_hostile_elem_frames(void **state)
{
	struct fx *f = *state;
	size_t len = 32768;
	uint8_t *base = malloc(len), *chunk = malloc(len), *dst = malloc(len), *bad;
	struct dcr_region r;
	struct dcr_elem_hint h = one_region(&r, DCR_DT_BF16, len);
	int kind;

	for (int variant = 0; variant < 3; variant++) {
		fill_bf16(base, len);
		memcpy(chunk, base, len);
		perturb(chunk, len, 2, variant == 2 ? 600 : 30, variant);
		dcr_buf_reset(&f->out);
		assert_int_equal(dcr_frame_encode2(f->c, chunk, variant == 1 ? NULL : base,
						   len, &h, &f->out, &kind), 0);
		size_t n = f->out.len;
		bad = malloc(n);
		for (size_t cut = DCR_FRAME_HDR_LEN; cut < n; cut++) {
			memcpy(bad, f->out.data, cut);
			dcr_put_le32(bad + 12, (uint32_t)(cut - DCR_FRAME_HDR_LEN));
			memcpy(dst, base, len);
			assert_int_equal(dcr_frame_apply(f->c, bad, cut, dst, len), -EBADMSG);
		}
		/* every single-bit flip: an error or other bytes, never a crash */
		for (size_t i = DCR_FRAME_HDR_LEN; i < n; i += (n > 4096 ? 7 : 1)) {
			for (int bit = 0; bit < 8; bit += 3) {
				memcpy(bad, f->out.data, n);
				bad[i] ^= (uint8_t)(1 << bit);
				memcpy(dst, base, len);
				(void)dcr_frame_apply(f->c, bad, n, dst, len);
			}
		}
		free(bad);
	}
	free(base);
	free(chunk);
	free(dst);
}

static void test_entropy_tables(void **state)
{
	(void)state;
	uint32_t cnt[256] = { 0 };
	uint16_t freq[256], back[256];
	unsigned nsym;
	struct dcr_buf b;
	struct dcr_rd r;

	cnt[0] = 1000000;
	cnt[3] = 1;
	cnt[200] = 7;
	for (unsigned s = 10; s < 40; s++)
		cnt[s] = s * 13;
	assert_int_equal(dcr_ent_normalize(cnt, 201, freq), 0);
	uint32_t sum = 0;
	for (unsigned s = 0; s < 201; s++) {
		sum += freq[s];
		assert_true(!cnt[s] == !freq[s]);
	}
	assert_int_equal(sum, DCR_ENT_TOTAL);
	dcr_buf_init(&b, 4096);
	assert_int_equal(dcr_ent_write_table(&b, freq, 201), 0);
	dcr_rd_init(&r, b.data, b.len);
	assert_int_equal(dcr_ent_read_table(&r, back, 256, &nsym), 0);
	assert_int_equal(nsym, 201);
	assert_memory_equal(back, freq, 201 * sizeof(*freq));
	/* a table that does not sum to TOTAL, or is cut, is rejected */
	b.data[1] ^= 1;
	dcr_rd_init(&r, b.data, b.len);
	assert_int_equal(dcr_ent_read_table(&r, back, 256, &nsym), -EBADMSG);
	dcr_rd_init(&r, b.data, b.len / 2);
	assert_int_equal(dcr_ent_read_table(&r, back, 256, &nsym), -EBADMSG);
	uint32_t none[4] = { 0 };
	assert_int_equal(dcr_ent_normalize(none, 4, freq), -EINVAL);
	dcr_buf_free(&b);
}

/* Plane @src[0..n): encode, check the mode, decode with the SIMD and the
 * scalar decoder, and check that every truncation is rejected. */
static void plane_roundtrip(const uint8_t *src, size_t n, int want_mode,
			    struct dcr_ent_dec *dec)
{
	struct dcr_buf b;
	struct dcr_rd r;
	uint8_t *dst = malloc(n + 1);
	const uint8_t *o;

	dcr_buf_init(&b, SIZE_MAX);
	assert_int_equal(dcr_ent_plane_encode(src, n, &b), 0);
	if (want_mode >= 0)
		assert_int_equal(b.data[0], want_mode);
	for (int simd = 1; simd >= 0; simd--) {
		dcr_ent_set_simd(simd);
		memset(dst, 0xa5, n);
		dcr_rd_init(&r, b.data, b.len);
		assert_int_equal(dcr_ent_plane_decode(&r, dst, n, dec), 0);
		assert_int_equal(dcr_rd_left(&r), 0);
		assert_memory_equal(dst, src, n);
		dcr_rd_init(&r, b.data, b.len);
		assert_int_equal(dcr_ent_plane_decode_ref(&r, dst, n, dec, &o), 0);
		assert_memory_equal(o, src, n);
		/* cut anywhere (the trailing bytes, and a sample of the rest) */
		for (size_t cut = 0; cut < b.len; cut += cut + 300 < b.len ? 97 : 1) {
			dcr_rd_init(&r, b.data, cut);
			assert_int_equal(dcr_ent_plane_decode(&r, dst, n, dec), -EBADMSG);
		}
		/* bit flips in the stream: an error or other bytes, no crash */
		for (size_t i = 1; i < b.len; i += 1 + b.len / 64) {
			b.data[i] ^= 0x10;
			dcr_rd_init(&r, b.data, b.len);
			(void)dcr_ent_plane_decode(&r, dst, n, dec);
			b.data[i] ^= 0x10;
		}
	}
	dcr_ent_set_simd(1);
	dcr_buf_free(&b);
	free(dst);
}

static void test_plane_x32(void **state)
{
	(void)state;
	static const size_t sizes[] = { DCR_ENT_X32_MIN, DCR_ENT_X32_MIN + 1,
					DCR_ENT_X32_MIN + 31, 100003, 1 << 19 };
	struct dcr_ent_dec *dec = malloc(sizeof(*dec));
	size_t nmax = 1 << 19;
	uint8_t *pl = malloc(2 * nmax), *ex = pl, *mant = pl + nmax;
	uint8_t *src = malloc(2 * nmax);

	rng = 12345;
	fill_bf16(src, 2 * nmax);
	for (size_t i = 0; i < nmax; i++) {
		uint32_t x = dcr_get_le16(src + 2 * i);
		ex[i] = (uint8_t)(x >> 7);
		mant[i] = (uint8_t)(((x >> 8) & 0x80) | (x & 0x7f));
	}
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		/* bf16 exponents: x32; sign + mantissa: not worth coding */
		plane_roundtrip(ex, sizes[k], 3, dec);
		plane_roundtrip(mant, sizes[k], 1, dec);
	}
	/* smaller planes keep the 4-state coder */
	plane_roundtrip(ex, DCR_ENT_X32_MIN - 1, 2, dec);
	plane_roundtrip(ex, 1000, 2, dec);
	/* very skewed (renormalisations rare) and wide alphabets */
	for (size_t i = 0; i < nmax; i++)
		src[i] = next_rand() % 1000 ? 7 : (uint8_t)next_rand();
	plane_roundtrip(src, nmax, 3, dec);
	plane_roundtrip(src, 50001, 3, dec);
	for (size_t i = 0; i < nmax; i++)
		src[i] = (uint8_t)(next_rand() % 97 + next_rand() % 97);
	plane_roundtrip(src, nmax, 3, dec);
	/* two symbols, one of them once */
	memset(src, 200, nmax);
	src[nmax / 2] = 0;
	plane_roundtrip(src, nmax, 3, dec);
	free(pl);
	free(src);
	free(dec);
}

/*
 * roundtrip() of @chunk through the SIMD paths and then the scalar ones
 * (dcr_ent_set_simd): both must give the same frame, of at most @max
 * bytes (@first, @max bytes, keeps the SIMD one). SIMD is on again after.
 */
static void roundtrip_simd_scalar(struct fx *f, const uint8_t *chunk,
				  const uint8_t *base, size_t len,
				  const struct dcr_elem_hint *h, int want_kind,
				  int want_codec, uint8_t *first, size_t max)
{
	size_t flen = 0;

	for (int simd = 1; simd >= 0; simd--) {
		dcr_ent_set_simd(simd);
		roundtrip(f, chunk, base, len, h, want_kind, want_codec);
		if (simd) {
			assert_true(f->out.len <= max);
			memcpy(first, f->out.data, f->out.len);
			flen = f->out.len;
		} else {
			assert_int_equal(f->out.len, flen);
			assert_memory_equal(f->out.data, first, flen);
		}
	}
	dcr_ent_set_simd(1);
}

/*
 * Full frames through the SIMD paths (the x32 plane encoder and decoder)
 * and the scalar ones: the same frame, which decodes; planes that are a
 * whole number of x32 rounds and planes with a tail.
 */
static void test_full_simd_scalar(void **state)
{
	struct fx *f = *state;
	size_t cap = 1 << 20;
	uint8_t *chunk = malloc(cap), *first = malloc(2 * cap);
	struct dcr_region r;
	static const uint8_t dts[] = { DCR_DT_BF16, DCR_DT_F32, DCR_DT_U16, DCR_DT_BYTES };
	static const size_t lens[] = { 1 << 20, (1 << 20) - 296 };

	for (size_t d = 0; d < sizeof(dts); d++) {
		for (size_t l = 0; l < 2; l++) {
			size_t len = lens[l];
			struct dcr_elem_hint h = one_region(&r, dts[d], len);
			if (dts[d] == DCR_DT_F32)
				fill_f32(chunk, len);
			else
				fill_bf16(chunk, len);
			roundtrip_simd_scalar(f, chunk, NULL, len, &h, DCR_FRAME_FULL,
					      DCR_CODEC_ELEM, first, 2 * cap);
			if (dts[d] == DCR_DT_BF16) {
				/* exponents coded, mantissas raw: 8 + ~2.5 of 16 bits */
				assert_true(f->out.len < len * 67 / 100);
				assert_true(f->out.len > len * 60 / 100);
			}
		}
	}
	free(chunk);
	free(first);
}

/*
 * The delta scan's SIMD path and the scalar one give the same frames:
 * changes at the edges, in a tail shorter than a SIMD step, and exactly
 * at the sparse limit (a quarter of the elements) and one past it.
 */
static void test_sparse_simd_scalar(void **state)
{
	struct fx *f = *state;
	size_t len = (64 << 10) + 40;
	uint8_t *base = malloc(len), *chunk = malloc(len), *first = malloc(2 * len);
	static const uint8_t dts[] = { DCR_DT_BF16, DCR_DT_F32, DCR_DT_U16, DCR_DT_F8 };
	static const unsigned rates[] = { 1, 30, 200 };

	for (size_t d = 0; d < sizeof(dts); d++) {
		struct dcr_region r;
		struct dcr_elem_hint h = one_region(&r, dts[d], len);
		unsigned w = dcr_dtype_width(dts[d]);
		size_t nel = len / w;
		if (w == 4)
			fill_f32(base, len);
		else
			fill_bf16(base, len);
		for (size_t k = 0; k < 5; k++) {
			memcpy(chunk, base, len);
			if (k < 3) {
				perturb(chunk, len, w, rates[k], (int)(k & 1));
			} else {
				/* every 4th element: the limit; k == 4 one more */
				for (size_t e = 0; e < nel; e += 4)
					chunk[e * w] ^= 1;
				if (k == 4)
					chunk[(nel - 2) * w] ^= 1;
			}
			chunk[0] ^= 2;
			chunk[len - w] ^= 2;
			roundtrip_simd_scalar(f, chunk, base, len, &h, 0, -1, first,
					      2 * len);
		}
	}
	free(base);
	free(chunk);
	free(first);
}

/* -------------------------------------------------------- safetensors */

static size_t make_st(uint8_t *buf, const char *json, uint64_t data_len)
{
	size_t n = strlen(json);
	dcr_put_le64(buf, n);
	memcpy(buf + 8, json, n);
	memset(buf + 8 + n, 0, data_len);
	return 8 + n + data_len;
}

static void test_safetensors(void **state)
{
	(void)state;
	static uint8_t buf[65536];
	struct dcr_regions rs;
	const char *ok =
		"{\"__metadata__\":{\"format\":\"pt\",\"x\":\"a\\\"b\\u00e9\"},"
		" \"b.weight\": {\"dtype\":\"BF16\",\"shape\":[4,8],\"data_offsets\":[64,128]},"
		" \"a.weight\": {\"shape\":[16],\"dtype\":\"F32\",\"data_offsets\":[0,64]},"
		" \"ids\": {\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[128,144]},"
		" \"mask\": {\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[144,147]},"
		" \"e\": {\"dtype\":\"F8_E4M3\",\"shape\":[0],\"data_offsets\":[147,147]}}  ";
	size_t n = make_st(buf, ok, 147);
	size_t hl = strlen(ok) + 8;

	assert_int_equal(dcr_safetensors_regions(buf, n, n, &rs), 0);
	assert_int_equal(rs.n, 3);
	assert_int_equal(rs.r[0].off, hl);
	assert_int_equal(rs.r[0].dtype, DCR_DT_F32);
	assert_int_equal(rs.r[1].off, hl + 64);
	assert_int_equal(rs.r[1].dtype, DCR_DT_BF16);
	assert_int_equal(rs.r[2].dtype, DCR_DT_U32);
	dcr_regions_free(&rs);
	dcr_regions_free(NULL);
	/* a prefix shorter than the header */
	assert_int_equal(dcr_safetensors_regions(buf, hl - 1, n, &rs), -ENODATA);
	/* data past the end of the file */
	assert_int_equal(dcr_safetensors_regions(buf, n, n - 1, &rs), -EBADMSG);
	/* every truncation of the JSON is rejected without overrun */
	for (size_t cut = 0; cut < strlen(ok) - 2; cut++) {
		uint8_t *t = malloc(8 + cut);
		dcr_put_le64(t, cut);
		memcpy(t + 8, ok, cut);
		assert_int_equal(dcr_safetensors_regions(t, 8 + cut, 8 + cut + 147, &rs),
				 -EBADMSG);
		free(t);
	}
	static const char *const bad[] = {
		"[]",
		"{\"a\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[4,2]}}",
		"{\"a\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[0,99999]}}",
		"{\"a\":{\"dtype\":\"BF16\",\"data_offsets\":[0,4]},"
		"\"b\":{\"dtype\":\"BF16\",\"data_offsets\":[2,6]}}",
		"{\"a\":{\"dtype\":\"BF16\"}}",
		"{\"a\":{\"dtype\":\"BF16\",\"data_offsets\":[-1,2]}}",
		"{\"a\":{\"dtype\":\"BF16\",\"data_offsets\":[0,2]}} x",
		"{\"a\\q\":{}}",
		"{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
		/* a shape whose element count wraps 64 bits (2^68 = 0 mod
		 * 2^64) is not an empty tensor */
		"{\"a\":{\"dtype\":\"BF16\",\"shape\":[4294967296,4294967296,16],"
		"\"data_offsets\":[0,0]}}",
		/* ... nor one whose bytes wrap (2^63 elements of 2 bytes) */
		"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2147483648,4294967296],"
		"\"data_offsets\":[0,0]}}",
		/* a shape that does not span its data_offsets */
		"{\"a\":{\"dtype\":\"BF16\",\"shape\":[4,8],\"data_offsets\":[0,62]}}",
		"{\"a\":{\"dtype\":\"I64\",\"shape\":[3],\"data_offsets\":[0,16]}}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		n = make_st(buf, bad[i], 64);
		assert_int_equal(dcr_safetensors_regions(buf, n, n, &rs), -EBADMSG);
		assert_null(rs.r);
	}
	/* a header length beyond the file or the bound */
	dcr_put_le64(buf, (uint64_t)1 << 40);
	assert_int_equal(dcr_safetensors_regions(buf, 64, 64, &rs), -EBADMSG);
	assert_int_equal(dcr_safetensors_regions(buf, 4, 64, &rs), -EBADMSG);
	/* an empty header is a file without tensors */
	n = make_st(buf, "{}", 0);
	assert_int_equal(dcr_safetensors_regions(buf, n, n, &rs), 0);
	assert_int_equal(rs.n, 0);
}

/* Named tensors (dcrfs-ctl diff): every dtype, unescaped names, sorted. */
static void test_safetensors_tensors(void **state)
{
	(void)state;
	static uint8_t buf[4096];
	struct dcr_tensors ts;
	const char *json =
		"{\"__metadata__\":{\"format\":\"pt\"},"
		"\"w\\\"q\\u00e9\\n\": {\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[8,16]},"
		"\"mask\": {\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[16,19]},"
		"\"a\": {\"dtype\":\"SOMETHING_VERY_LONG_TYPE\",\"shape\":[8],\"data_offsets\":[0,8]}}";
	size_t n = make_st(buf, json, 19);
	uint64_t d0 = 8 + strlen(json);

	assert_int_equal(dcr_safetensors_tensors(buf, n, n, &ts), 0);
	assert_int_equal(ts.n, 3);
	assert_string_equal(ts.t[0].name, "a");
	assert_int_equal(ts.t[0].off, d0);
	assert_int_equal(ts.t[0].len, 8);
	assert_int_equal(strlen(ts.t[0].dtype), sizeof(ts.t[0].dtype) - 1);
	assert_string_equal(ts.t[1].name, "w\"q\xc3\xa9\n");
	assert_string_equal(ts.t[1].dtype, "BF16");
	assert_int_equal(ts.t[1].off, d0 + 8);
	assert_string_equal(ts.t[2].name, "mask");
	assert_int_equal(ts.t[2].len, 3);
	dcr_tensors_free(&ts);
	dcr_tensors_free(NULL);
	/* the same validation as the regions */
	n = make_st(buf, "{\"a\":{\"dtype\":\"BF16\"}}", 8);
	assert_int_equal(dcr_safetensors_tensors(buf, n, n, &ts), -EBADMSG);
	assert_null(ts.t);
	assert_int_equal(dcr_safetensors_tensors(buf, 9, n, &ts), -ENODATA);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_sparse_bf16, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sparse_states, setup, teardown),
		cmocka_unit_test_setup_teardown(test_widths_and_dense, setup, teardown),
		cmocka_unit_test_setup_teardown(test_full_bf16_planes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hint_segments, setup, teardown),
		cmocka_unit_test_setup_teardown(test_apply_rec, setup, teardown),
		cmocka_unit_test_setup_teardown(test_text_and_small, setup, teardown),
		cmocka_unit_test_setup_teardown(test_codec1_still_decodes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_golden, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_elem_frames, setup, teardown),
		cmocka_unit_test(test_entropy_tables),
		cmocka_unit_test(test_safetensors_tensors),
		cmocka_unit_test(test_plane_x32),
		cmocka_unit_test_setup_teardown(test_full_simd_scalar, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sparse_simd_scalar, setup, teardown),
		cmocka_unit_test(test_safetensors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
