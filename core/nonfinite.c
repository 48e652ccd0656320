/* SPDX-License-Identifier: MIT */
/*
 * nonfinite.c - NaN/Inf counting (see nonfinite.h). The check runs over
 * every encoded byte of a commit, so it must stay a small fraction of
 * encoding it: eight bytes per step, no branch but a rare one.
 */
#include "config.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define DCR_NONFINITE_AVX512 1
#endif

#include "entropy.h"
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
#ifdef DCR_NONFINITE_AVX512
/*
 * The same count 64 bytes a step: a lane is non-finite iff its bits
 * under the mask are all set (one masked compare), and the hits are
 * counted by a popcount of the compare's lane mask. Returns the bytes
 * done (a multiple of 64) and adds their count to *@c.
 */
__attribute__((target("avx512f,avx512bw,popcnt")))
static size_t count_avx512(const unsigned char *b, size_t n, unsigned w,
			   uint64_t m, uint64_t *c)
{
	const __m512i Mw = w == 1 ? _mm512_set1_epi8((char)m) :
			   w == 2 ? _mm512_set1_epi16((short)m) :
			   w == 4 ? _mm512_set1_epi32((int)m) :
			   _mm512_set1_epi64((long long)m);
	uint64_t k = 0;
	size_t i = 0;

	for (; i + 64 <= n; i += 64) {
		__m512i x = _mm512_and_si512(_mm512_loadu_si512((const void *)(b + i)), Mw);
		switch (w) {
		case 1:
			k += (uint64_t)__builtin_popcountll(_mm512_cmpeq_epi8_mask(x, Mw));
			break;
		case 2:
			k += (uint64_t)__builtin_popcount(_mm512_cmpeq_epi16_mask(x, Mw));
			break;
		case 4:
			k += (uint64_t)__builtin_popcount(_mm512_cmpeq_epi32_mask(x, Mw));
			break;
		default:
			k += (uint64_t)__builtin_popcount(_mm512_cmpeq_epi64_mask(x, Mw));
			break;
		}
	}
	*c += k;
	return i;
}
#endif

uint64_t dcr_nonfinite_count(const void *p, size_t nelem, enum dcr_float_fmt fmt)
{
	const unsigned char *b = p;
	unsigned w = dcr_float_width(fmt);
	uint64_t m = fmt_mask(fmt), c = 0;

	if (!w)
		return 0;
	size_t n = nelem * w, i = 0;
#ifdef DCR_NONFINITE_AVX512
	if (dcr_ent_simd() && __builtin_cpu_supports("avx512f") &&
	    __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("popcnt"))
		i = count_avx512(b, n, w, m, &c);
#endif
	uint64_t rep = w == 8 ? 1 : w == 4 ? UINT64_C(0x0000000100000001) :
		       w == 2 ? UINT64_C(0x0001000100010001) : UINT64_C(0x0101010101010101);
	uint64_t M = m * rep, H = (UINT64_C(1) << (8 * w - 1)) * rep, L = ~H;
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
