/* SPDX-License-Identifier: MIT */
/* Unit tests for core/frame.c: round trips, kinds, and hostile frames. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "buf.h"
#include "chunk.h"
#include "frame.h"

static uint64_t rng = 88172645463325252ull;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* bf16-like data: smooth exponents, noisy mantissas. */
static void fill_weights(uint8_t *p, size_t n)
{
	for (size_t i = 0; i + 1 < n; i += 2) {
		uint64_t r = next_rand();
		p[i] = (uint8_t)r;                      /* low mantissa */
		p[i + 1] = (uint8_t)(0x3c + (r >> 60)); /* sign/exponent */
	}
	if (n & 1)
		p[n - 1] = 0x3c;
}

/* Flip low mantissa bits of about @permille of the elements. */
static void perturb(uint8_t *p, size_t n, unsigned permille)
{
	for (size_t i = 0; i + 1 < n; i += 2)
		if (next_rand() % 1000 < permille)
			p[i] ^= (uint8_t)(1 + next_rand() % 3);
}

struct fx {
	struct dcr_codec *c;
	struct dcr_buf out;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	f->c = dcr_codec_new(0);
	dcr_buf_init(&f->out, 2 * DCR_CHUNK_MAX);
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

static void roundtrip(struct fx *f, const uint8_t *chunk, const uint8_t *base,
		      size_t len, int want_kind)
{
	int kind;
	uint8_t *dst = malloc(len);

	dcr_buf_reset(&f->out);
	assert_int_equal(dcr_frame_encode(f->c, chunk, base, len, &f->out, &kind), 0);
	if (want_kind)
		assert_int_equal(kind, want_kind);
	struct dcr_frame_hdr h;
	assert_int_equal(dcr_frame_parse_hdr(f->out.data, f->out.len, &h), 0);
	assert_int_equal(h.kind, kind);
	assert_int_equal(h.raw_len, len);
	if (kind == DCR_FRAME_DELTA)
		memcpy(dst, base, len);
	else
		memset(dst, 0xaa, len);
	assert_int_equal(dcr_frame_apply(f->c, f->out.data, f->out.len, dst, len), 0);
	assert_memory_equal(dst, chunk, len);
	free(dst);
}

static void test_full_roundtrip_sizes(void **state)
{
	static const size_t sizes[] = { 1, 2, 3, 4095, 4096, 4097, 65536, 1 << 20 };
	uint8_t *buf = malloc(1 << 20);

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		fill_weights(buf, sizes[i]);
		roundtrip(*state, buf, NULL, sizes[i], DCR_FRAME_FULL);
	}
	free(buf);
}

static void test_delta_sparse_change(void **state)
{
	struct fx *f = *state;
	size_t len = 1 << 20;
	uint8_t *base = malloc(len), *chunk = malloc(len);

	fill_weights(base, len);
	memcpy(chunk, base, len);
	perturb(chunk, len, 30); /* ~3 % of elements */
	roundtrip(f, chunk, base, len, DCR_FRAME_DELTA);
	/* A sparse delta must be far smaller than the chunk. */
	assert_true(f->out.len < len / 4);
	free(base);
	free(chunk);
}

/* dcr_frame_encode_checked: the frames of dcr_frame_encode2, decoded
 * back on a scratch buffer (the base copied there) or in place on the
 * base, which then holds the chunk. */
static void test_encode_checked(void **state)
{
	struct fx *f = *state;
	size_t len = 1 << 16;
	uint8_t *base = malloc(len), *chunk = malloc(len), *work = malloc(len);
	uint8_t *keep = malloc(len);
	struct dcr_buf plain;
	int kind, kind2;

	dcr_buf_init(&plain, 2 * DCR_CHUNK_MAX);
	fill_weights(base, len);
	memcpy(keep, base, len);
	memcpy(chunk, base, len);
	perturb(chunk, len, 30);
	assert_int_equal(dcr_frame_encode2(f->c, chunk, base, len, NULL, &plain,
					   &kind), 0);
	assert_int_equal(kind, DCR_FRAME_DELTA);
	memset(work, 0x55, len);
	dcr_buf_reset(&f->out);
	assert_int_equal(dcr_frame_encode_checked(f->c, chunk, base, len, NULL,
						  &f->out, &kind2, work), 0);
	assert_int_equal(kind2, kind);
	assert_int_equal(f->out.len, plain.len);
	assert_memory_equal(f->out.data, plain.data, plain.len);
	assert_memory_equal(work, chunk, len);
	assert_memory_equal(base, keep, len); /* only read */
	/* in place on the base: it ends as the chunk */
	dcr_buf_reset(&f->out);
	assert_int_equal(dcr_frame_encode_checked(f->c, chunk, base, len, NULL,
						  &f->out, &kind2, base), 0);
	assert_memory_equal(base, chunk, len);
	/* a full frame: no base */
	dcr_buf_reset(&f->out);
	assert_int_equal(dcr_frame_encode_checked(f->c, chunk, NULL, len, NULL,
						  &f->out, &kind2, work), 0);
	assert_int_equal(kind2, DCR_FRAME_FULL);
	dcr_buf_free(&plain);
	free(base);
	free(chunk);
	free(work);
	free(keep);
}

static void test_delta_identical_and_boundary(void **state)
{
	struct fx *f = *state;
	size_t len = 4097; /* odd tail at a chunk boundary */
	uint8_t *base = malloc(len);

	fill_weights(base, len);
	roundtrip(f, base, base, len, DCR_FRAME_DELTA);
	assert_true(f->out.len < 100);
	free(base);
}

static void test_fully_changed_prefers_full(void **state)
{
	size_t len = 65536;
	uint8_t *base = malloc(len), *chunk = malloc(len);

	for (size_t i = 0; i < len; i++) {
		base[i] = (uint8_t)next_rand();
		chunk[i] = 0;
	}
	/* XOR of zeros with random is random; the zero chunk is tiny in full. */
	roundtrip(*state, chunk, base, len, DCR_FRAME_FULL);
	/* Random data with no base is stored, not expanded. */
	roundtrip(*state, base, NULL, len, DCR_FRAME_FULL);
	struct fx *f = *state;
	assert_true(f->out.len == len + DCR_FRAME_HDR_LEN);
	free(base);
	free(chunk);
}

/* A stored full frame of "dcrfs!" pinned byte for byte: the format must not drift. */
static const uint8_t golden_stored[] = {
	'D', 'C', 'R', 'F', 1, 1, 0, 0, 6, 0, 0, 0, 6, 0, 0, 0,
	'd', 'c', 'r', 'f', 's', '!',
};

static void test_golden_stored_frame(void **state)
{
	struct fx *f = *state;
	uint8_t dst[6];

	assert_int_equal(dcr_frame_apply(f->c, golden_stored, sizeof(golden_stored), dst, 6), 0);
	assert_memory_equal(dst, "dcrfs!", 6);
	/* Encoding incompressible bytes yields exactly the golden frame. */
	uint8_t rnd[6] = { 'd', 'c', 'r', 'f', 's', '!' };
	int kind;
	dcr_buf_reset(&f->out);
	assert_int_equal(dcr_frame_encode(f->c, rnd, NULL, 6, &f->out, &kind), 0);
	assert_int_equal(f->out.len, sizeof(golden_stored));
	assert_memory_equal(f->out.data, golden_stored, sizeof(golden_stored));
}

static void test_hostile_frames(void **state)
{
	struct fx *f = *state;
	size_t len = 65536;
	uint8_t *chunk = malloc(len), *dst = malloc(len), *bad;
	int kind;

	fill_weights(chunk, len);
	dcr_buf_reset(&f->out);
	assert_int_equal(dcr_frame_encode(f->c, chunk, NULL, len, &f->out, &kind), 0);
	size_t n = f->out.len;
	bad = malloc(n);

	/* Every truncation is rejected. */
	for (size_t cut = 0; cut < n; cut += (cut < 64 ? 1 : 997))
		assert_int_equal(dcr_frame_apply(f->c, f->out.data, cut, dst, len), -EBADMSG);
	/* Wrong expected length. */
	assert_int_equal(dcr_frame_apply(f->c, f->out.data, n, dst, len - 1), -EBADMSG);
	/* Trailing garbage after the payload. */
	assert_int_equal(dcr_buf_putc(&f->out, 0), 0);
	assert_int_equal(dcr_frame_apply(f->c, f->out.data, n + 1, dst, len), -EBADMSG);
	assert_int_equal(dcr_frame_apply(f->c, f->out.data, n, dst, len), 0);
	assert_memory_equal(dst, chunk, len);
	/* Header fields. */
	static const size_t fields[] = { 0, 4, 5, 6, 7, 8, 11, 12, 15 };
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		memcpy(bad, f->out.data, n);
		bad[fields[i]] ^= 0x40;
		assert_int_equal(dcr_frame_apply(f->c, bad, n, dst, len), -EBADMSG);
	}
	/* A hostile raw length beyond the chunk maximum. */
	memcpy(bad, f->out.data, n);
	bad[11] = 0x7f;
	struct dcr_frame_hdr h;
	assert_int_equal(dcr_frame_parse_hdr(bad, n, &h), -EBADMSG);
	/* Payload corruption either fails to decode or is caught by the chunk
	 * hash later; it must never crash or overrun. */
	for (size_t i = DCR_FRAME_HDR_LEN; i < n; i += 101) {
		memcpy(bad, f->out.data, n);
		bad[i] ^= 0xff;
		(void)dcr_frame_apply(f->c, bad, n, dst, len);
	}
	free(bad);
	free(chunk);
	free(dst);
}

static void test_xor(void **state)
{
	uint8_t a[37], b[37], c[37];

	for (int i = 0; i < 37; i++) {
		a[i] = (uint8_t)next_rand();
		b[i] = (uint8_t)next_rand();
	}
	memcpy(c, a, 37);
	dcr_xor(c, b, 37);
	for (int i = 0; i < 37; i++)
		assert_int_equal(c[i], a[i] ^ b[i]);
	dcr_xor(c, b, 37);
	assert_memory_equal(c, a, 37);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_full_roundtrip_sizes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_delta_sparse_change, setup, teardown),
		cmocka_unit_test_setup_teardown(test_encode_checked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_delta_identical_and_boundary, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fully_changed_prefers_full, setup, teardown),
		cmocka_unit_test_setup_teardown(test_golden_stored_frame, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_frames, setup, teardown),
		cmocka_unit_test(test_xor),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
