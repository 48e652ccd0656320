/* SPDX-License-Identifier: MIT */
/*
 * stwriter.h - lay out a safetensors file from tensors in memory.
 *
 * The bytes are exactly those the safetensors reference implementation
 * (safetensors.serialize, Rust `prepare`) writes: an 8-byte little-endian
 * header length N, N bytes of compact JSON ("__metadata__" first, then
 * the tensors in data order, each {"dtype":..,"shape":[..],
 * "data_offsets":[b,e]}), padded with spaces to a multiple of 8, then
 * the tensors' bytes back to back. Data order: by dtype, the reference's
 * order of Dtype descending (U64, I64, F64, F32, U32, I32, BF16, F16, U16,
 * I16, F8_E4M3, F8_E5M2, I8, U8, BOOL), then by name (bytewise), or the
 * caller's (DCR_ST_GIVEN_ORDER: as PyTorch's own writers and
 * dcrfs-synth lay out a checkpoint). The reference keeps metadata in a
 * hash map; here its keys are sorted.
 * core/safetensors.h parses what this writes (tests/unit/test_libdcr.c).
 */
#ifndef DCR_STWRITER_H
#define DCR_STWRITER_H

#include <stddef.h>
#include <stdint.h>

/** One tensor: its bytes stay the caller's (never read here). */
struct dcr_st_tensor {
	const char *name;     /* UTF-8, not "__metadata__" */
	const char *dtype;    /* "BF16", "F32", ... as safetensors spells it */
	const uint64_t *shape;
	size_t ndim;          /* 0: a scalar */
	const void *data;     /* for the caller's use (the layout needs none) */
	uint64_t len;         /* bytes: must equal the shape's count x width */
};

/* Flags of dcr_safetensors_layout. */
#define DCR_ST_GIVEN_ORDER 1u /* the tensors' bytes in @t's order */

/** One "__metadata__" entry (string to string). */
struct dcr_st_meta {
	const char *key;      /* UTF-8 */
	const char *value;    /* UTF-8 */
};

/**
 * dcr_st_dtype_width - bytes per element of safetensors dtype @dtype
 * ("BF16": 2), 0 for a name the format does not define (or NULL).
 * Thread-safe.
 */
unsigned dcr_st_dtype_width(const char *dtype);

/**
 * dcr_safetensors_layout - the header of a safetensors file holding
 * @t[0..n) and @meta[0..nmeta) (nmeta 0: no "__metadata__"), laid out as
 * @flags say (DCR_ST_*; 0: the reference's order): the first
 * *hdr_len bytes of the file into *hdr (malloc'ed; the caller frees
 * it), and in @order[0..n) the indices of @t in the order their bytes
 * follow the header. Returns 0; -EINVAL (logged, naming the tensor) for
 * an unknown dtype, a length that does not match the shape, a repeated
 * or reserved name, a tensor name or metadata key or value that is NULL
 * or not valid UTF-8 (dcr_utf8_valid: the header would not be JSON);
 * -EFBIG if the header would exceed
 * DCR_SAFETENSORS_HDR_MAX; -ENOMEM. Thread-safe.
 */
int dcr_safetensors_layout(const struct dcr_st_tensor *t, size_t n,
			   const struct dcr_st_meta *meta, size_t nmeta,
			   unsigned flags, char **hdr, size_t *hdr_len,
			   size_t *order);

#endif /* DCR_STWRITER_H */
