/* SPDX-License-Identifier: MIT */
/*
 * chunk.h - the fixed affine chunk map (DESIGN.md section 2).
 *
 * Chunk i of a file of @size bytes covers [i*C, min((i+1)*C, size)).
 * No search is ever needed to find the chunk of a byte.
 */
#ifndef DCR_CHUNK_H
#define DCR_CHUNK_H

#include <stdint.h>

#define DCR_CHUNK_MIN (4u << 10)     /* 4 KiB */
#define DCR_CHUNK_MAX (64u << 20)    /* 64 MiB */
#define DCR_CHUNK_DEFAULT (1u << 20) /* 1 MiB */

/** Number of chunks in a file of @size bytes (0 for an empty file). */
static inline uint64_t dcr_chunk_count(uint64_t size, uint32_t cs)
{
	return size / cs + (size % cs != 0);
}
/** Index of the chunk holding byte @off. */
static inline uint64_t dcr_chunk_index(uint64_t off, uint32_t cs)
{
	return off / cs;
}
/** Length of chunk @i of a file of @size bytes (0 if past the end). */
static inline uint32_t dcr_chunk_len(uint64_t size, uint32_t cs, uint64_t i)
{
	uint64_t start = i * (uint64_t)cs;
	if (start >= size)
		return 0;
	return (uint32_t)(size - start < cs ? size - start : cs);
}
/** True if @cs is a valid chunk size: a power of two in [MIN, MAX]. */
static inline int dcr_chunk_size_valid(uint64_t cs)
{
	return cs >= DCR_CHUNK_MIN && cs <= DCR_CHUNK_MAX && (cs & (cs - 1)) == 0;
}

#endif /* DCR_CHUNK_H */
