/* SPDX-License-Identifier: MIT */
/*
 * fuzz_roundtrip - libFuzzer target for the frame encoder: any chunk,
 * parent and element hint must encode, and decode back bit-exactly.
 *
 * Input: u8 flags, u8 dtype, u16 region offset, u16 region length, then
 * the chunk; the parent is the chunk with every 7th byte (or, with flag
 * bit 1, almost every byte) changed, so sparse and dense paths both run.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "chunk.h"
#include "frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct dcr_codec *c;
	static struct dcr_buf out;
	int kind;

	if (!c) {
		c = dcr_codec_new(0);
		if (!c)
			abort();
		dcr_buf_init(&out, 2 * (size_t)DCR_CHUNK_MAX);
	}
	if (size < 7)
		return 0;
	uint8_t flags = data[0];
	struct dcr_region r = {
		.off = (uint64_t)(data[2] | data[3] << 8),
		.len = (uint64_t)(data[4] | data[5] << 8) * 4,
		.dtype = (uint8_t)(data[1] % DCR_DT_COUNT),
	};
	const uint8_t *chunk = data + 6;
	size_t len = size - 6;
	uint8_t *base = malloc(len), *dst = malloc(len);
	if (!base || !dst)
		abort();
	for (size_t i = 0; i < len; i++)
		base[i] = (flags & 2) ? (uint8_t)(chunk[i] + (i % 5 != 0))
				      : (uint8_t)(chunk[i] ^ (i % 7 == 3));
	struct dcr_elem_hint h = { &r, 1, 0, (flags & 4) ? DCR_ENC_XOR_ONLY : 0 };
	dcr_buf_reset(&out);
	int ret = dcr_frame_encode2(c, chunk, (flags & 1) ? NULL : base, len, &h,
				    &out, &kind);
	if (ret)
		abort();
	if (kind == DCR_FRAME_DELTA)
		memcpy(dst, base, len);
	if (dcr_frame_apply(c, out.data, out.len, dst, len) ||
	    memcmp(dst, chunk, len))
		abort();
	free(base);
	free(dst);
	return 0;
}
