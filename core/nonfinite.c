/* SPDX-License-Identifier: MIT */
/*
 * nonfinite.c - NaN/Inf counting (see nonfinite.h). Branch-free loops
 * the compiler vectorizes: the check runs over every encoded byte of a
 * commit, so it must stay a small fraction of encoding it.
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

/* One loop per width: elements whose bits under @m are all ones. */
#define COUNT_MASKED(type, p, n, m)                                      \
	do {                                                             \
		const unsigned char *b_ = (p);                           \
		uint64_t c_ = 0;                                         \
		for (size_t i_ = 0; i_ < (n); i_++) {                    \
			type x_;                                         \
			memcpy(&x_, b_ + i_ * sizeof(type), sizeof(type)); \
			c_ += (x_ & (type)(m)) == (type)(m);             \
		}                                                        \
		return c_;                                               \
	} while (0)

uint64_t dcr_nonfinite_count(const void *p, size_t nelem, enum dcr_float_fmt fmt)
{
	switch (fmt) {
	case DCR_FF_BF16:
		COUNT_MASKED(uint16_t, p, nelem, 0x7f80);
	case DCR_FF_F16:
		COUNT_MASKED(uint16_t, p, nelem, 0x7c00);
	case DCR_FF_F32:
		COUNT_MASKED(uint32_t, p, nelem, 0x7f800000u);
	case DCR_FF_F64:
		COUNT_MASKED(uint64_t, p, nelem, UINT64_C(0x7ff0000000000000));
	case DCR_FF_F8_E4M3:
		COUNT_MASKED(uint8_t, p, nelem, 0x7f);
	case DCR_FF_F8_E5M2:
		COUNT_MASKED(uint8_t, p, nelem, 0x7c);
	default:
		return 0;
	}
}
