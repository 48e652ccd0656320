/* SPDX-License-Identifier: MIT */
/*
 * fuzz_frame - libFuzzer target for the frame decoder (all codecs):
 * untrusted bytes from a pack must be rejected or decoded within bounds.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

#define FUZZ_RAW_MAX (1u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct dcr_codec *c;
	static uint8_t *dst;
	struct dcr_frame_hdr h;

	if (!c) {
		c = dcr_codec_new(0);
		dst = malloc(FUZZ_RAW_MAX);
		if (!c || !dst)
			abort();
	}
	if (dcr_frame_parse_hdr(data, size, &h) || h.raw_len > FUZZ_RAW_MAX)
		return 0;
	/* A deterministic "parent" so delta frames have something to apply to. */
	for (uint32_t i = 0; i < h.raw_len; i++)
		dst[i] = (uint8_t)(i * 131u + (i >> 9));
	(void)dcr_frame_apply(c, data, size, dst, h.raw_len);
	return 0;
}
