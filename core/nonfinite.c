/* SPDX-License-Identifier: MIT */
/*
 * nonfinite.c - NaN/Inf counting (see nonfinite.h). The check runs over
 * every encoded byte of a commit, so it must stay a small fraction of
 * encoding it: eight bytes per step, no branch but a rare one.
 */
#include "config.h"

#include <string.h>

#include "nonfinite.h"

unsigned dcr_float_width(enum dcr_float_fmt fmt)
{
	switch (fmt) {
	case DCR_FF_BF16:
	case DCR_FF_F16:
		return 2;
	case DCR_FF_F32:
		return 4;
	case DCR_FF_F64:
		return 8;
	case DCR_FF_F8_E4M3:
	case DCR_FF_F8_E5M2:
		return 1;
	default:
		return 0;
	}
}

/* The format's exponent (or, for e4m3fn, exponent and mantissa) mask. */
static uint64_t fmt_mask(enum dcr_float_fmt fmt)
{
	switch (fmt) {
	case DCR_FF_BF16:
		return 0x7f80;
	case DCR_FF_F16:
		return 0x7c00;
	case DCR_FF_F32:
		return 0x7f800000u;
	case DCR_FF_F64:
		return UINT64_C(0x7ff0000000000000);
	case DCR_FF_F8_E4M3:
		return 0x7f;
	case DCR_FF_F8_E5M2:
		return 0x7c;
	default:
		return 0;
	}
}

/*
 * Eight bytes at a time (little-endian host): with M the mask repeated
 * in every element lane and H each lane's top (sign) bit, a lane is
 * non-finite iff z = (x & M) ^ M is zero in it, and ((z + L) | z) has
 * its top bit clear exactly in the zero lanes (L = ~H; z has no top
 * bits, so no carry crosses lanes). Hits are rare, so the popcount of
 * a hit word costs nothing on the way.
 */
uint64_t dcr_nonfinite_count(const void *p, size_t nelem, enum dcr_float_fmt fmt)
{
	const unsigned char *b = p;
	unsigned w = dcr_float_width(fmt);
	uint64_t m = fmt_mask(fmt), c = 0;

	if (!w)
		return 0;
	uint64_t rep = w == 8 ? 1 : w == 4 ? UINT64_C(0x0000000100000001) :
		       w == 2 ? UINT64_C(0x0001000100010001) : UINT64_C(0x0101010101010101);
	uint64_t M = m * rep, H = (UINT64_C(1) << (8 * w - 1)) * rep, L = ~H;
	size_t n = nelem * w, i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t x;
		memcpy(&x, b + i, 8);
		uint64_t z = (x & M) ^ M;
		uint64_t hit = ~(((z & L) + L) | z) & H;
		if (hit)
			c += (uint64_t)__builtin_popcountll(hit);
	}
	for (; i < n; i += w) {
		uint64_t x = 0;
		memcpy(&x, b + i, w);
		c += (x & m) == m;
	}
	return c;
}
