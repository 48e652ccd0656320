/* SPDX-License-Identifier: MIT */
/*
 * nonfinite.h - count NaN and Inf elements of float tensors, so a commit
 * can refuse weights no one should serve (commit.h, allow_nonfinite).
 *
 * Encodings (sign bit ignored; elements little-endian):
 *   BF16      exponent 8 bits all ones      (x & 0x7f80) == 0x7f80
 *   F16       exponent 5 bits all ones      (x & 0x7c00) == 0x7c00
 *   F32       exponent 8 bits all ones      (x & 0x7f800000) == 0x7f800000
 *   F64       exponent 11 bits all ones     (x & 0x7ff0...0) == 0x7ff0...0
 *   F8 E5M2   exponent 5 bits all ones      (x & 0x7c) == 0x7c
 *   F8 E4M3FN no Inf; NaN only S.1111.111   (x & 0x7f) == 0x7f
 *             (S.1111.000-110 are finite, up to 448)
 */
#ifndef DCR_NONFINITE_H
#define DCR_NONFINITE_H

#include <stddef.h>
#include <stdint.h>

/** Float element formats a non-finite check knows. */
enum dcr_float_fmt {
	DCR_FF_NONE = 0,   /* not a float this check knows */
	DCR_FF_BF16,
	DCR_FF_F16,
	DCR_FF_F32,
	DCR_FF_F64,
	DCR_FF_F8_E4M3,    /* e4m3fn, safetensors "F8_E4M3" */
	DCR_FF_F8_E5M2,
};

/** Element width in bytes of @fmt (0 for DCR_FF_NONE or unknown). */
unsigned dcr_float_width(enum dcr_float_fmt fmt);

/**
 * dcr_nonfinite_count - how many of the @nelem little-endian elements of
 * format @fmt at @p (any alignment) are NaN or Inf. 0 for DCR_FF_NONE.
 * Thread-safe.
 */
uint64_t dcr_nonfinite_count(const void *p, size_t nelem, enum dcr_float_fmt fmt);

#endif /* DCR_NONFINITE_H */
