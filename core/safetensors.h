/* SPDX-License-Identifier: MIT */
/*
 * safetensors.h - element regions of a safetensors file, for the codec.
 *
 * A safetensors file is an 8-byte little-endian header length N, N bytes
 * of JSON ({"name": {"dtype": "BF16", "shape": [...], "data_offsets":
 * [begin, end]}, ..., "__metadata__": {...}}), then the tensor data; the
 * offsets are relative to byte 8 + N. The parser turns the header into
 * dcr_region entries (file offsets, sorted) that dcr_frame_encode2 uses
 * as element hints. It reads untrusted bytes: every length is bounded,
 * nesting is limited, and anything it does not understand makes it
 * return -EBADMSG, after which the caller codes the file in byte mode.
 */
#ifndef DCR_SAFETENSORS_H
#define DCR_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "nonfinite.h"

/** Largest header accepted (as the safetensors reference does). */
#define DCR_SAFETENSORS_HDR_MAX ((uint64_t)100 << 20)

/** Regions of one file; free with dcr_regions_free. */
struct dcr_regions {
	struct dcr_region *r;
	size_t n;
};

/**
 * dcr_safetensors_prefix_len - how many leading bytes of the file the
 * parser needs (8 + N), from its first 8 bytes @p[0..n).
 * Returns 0, or -EBADMSG if this cannot be a safetensors file of
 * @file_size bytes (too short, header length out of bounds).
 */
int dcr_safetensors_prefix_len(const void *p, size_t n, uint64_t file_size,
			       size_t *need);

/**
 * dcr_safetensors_regions - parse the header in @file_prefix[0..n) of a
 * file of @file_size bytes into @out (allocated; the caller frees it).
 * Tensors of types the codec has no width for are left out (byte mode).
 * Returns 0; -EBADMSG if the bytes are not a valid safetensors header
 * (or tensors overlap or run past the file); -ENODATA if @n is shorter
 * than the header; -ENOMEM. On failure @out is empty.
 * Thread-safe (no global state).
 */
int dcr_safetensors_regions(const void *file_prefix, size_t n,
			    uint64_t file_size, struct dcr_regions *out);

/* Dimensions a struct dcr_tensor keeps of its shape. */
#define DCR_ST_NDIM_MAX 8
/* dcr_tensor.ndim when the shape is not kept: missing, of more than
 * DCR_ST_NDIM_MAX dimensions, or not a list of integers below 2^53 (none
 * of which makes the header invalid here). */
#define DCR_ST_NDIM_UNKNOWN 0xff

/** One tensor of a safetensors file, by name (for reports such as diffs). */
struct dcr_tensor {
	char *name;      /* unescaped UTF-8 (a \u0000 or surrogate shows as '?') */
	char dtype[16];  /* as the header spells it ("BF16"), truncated */
	uint64_t off;    /* file offset of the first byte */
	uint64_t len;    /* bytes */
	uint8_t fmt;     /* enum dcr_float_fmt; DCR_FF_NONE if not a float */
	uint8_t ndim;    /* 0: a scalar; DCR_ST_NDIM_UNKNOWN: see above */
	uint64_t shape[DCR_ST_NDIM_MAX]; /* shape[0..ndim) */
};

/** Tensors of one file; free with dcr_tensors_free. */
struct dcr_tensors {
	struct dcr_tensor *t;
	size_t n;
};

/**
 * dcr_safetensors_tensors - parse the header in @file_prefix[0..n) of a
 * file of @file_size bytes into every tensor it names, of any dtype,
 * sorted by offset (allocated; the caller frees it with
 * dcr_tensors_free). Same validation and returns as
 * dcr_safetensors_regions, except that overlapping tensors are not an
 * error here. Thread-safe.
 */
int dcr_safetensors_tensors(const void *file_prefix, size_t n,
			    uint64_t file_size, struct dcr_tensors *out);

/**
 * dcr_safetensors_parse - dcr_safetensors_regions that also fills
 * @floats (if non-NULL) with the file's non-empty float tensors (BF16,
 * F16, F32, F64, F8_E4M3, F8_E5M2; fmt set), for the commit's non-finite
 * check: one parse for both. On failure both are empty. Returns as
 * dcr_safetensors_regions; a float tensor whose length is not a multiple
 * of its element width is -EBADMSG.
 */
int dcr_safetensors_parse(const void *file_prefix, size_t n,
			  uint64_t file_size, struct dcr_regions *regions,
			  struct dcr_tensors *floats);

/** dcr_safetensors_parse of the open file @fd (pread, offset unmoved). */
int dcr_safetensors_parse_fd(int fd, uint64_t file_size,
			     struct dcr_regions *regions,
			     struct dcr_tensors *floats);

/** Free every name and the array of @ts and empty it; NULL accepted. */
void dcr_tensors_free(struct dcr_tensors *ts);

/** Free @r's array and empty it; NULL accepted. */
void dcr_regions_free(struct dcr_regions *r);

/**
 * dcr_regions_hint - the element hint of the chunk at file offset
 * @chunk_off for a file with regions @r (which may be empty).
 */
static inline struct dcr_elem_hint dcr_regions_hint(const struct dcr_regions *r,
						    uint64_t chunk_off)
{
	struct dcr_elem_hint h = { r ? r->r : NULL, r ? r->n : 0, chunk_off, 0 };
	return h;
}

#endif /* DCR_SAFETENSORS_H */
