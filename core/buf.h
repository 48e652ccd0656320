/* SPDX-License-Identifier: MIT */
/*
 * buf.h - growable byte buffers with a hard maximum.
 *
 * Like curl's dynbuf, every buffer carries the largest size it may ever
 * reach, so a hostile length read from the network or a manifest can never
 * make it allocate without bound: growing past @max fails with -EFBIG.
 */
#ifndef DCR_BUF_H
#define DCR_BUF_H

#include <stddef.h>
#include <stdint.h>

struct dcr_buf {
	uint8_t *data;
	size_t len;  /* bytes in use */
	size_t cap;  /* bytes allocated */
	size_t max;  /* never grow beyond this */
};

/** Initialise an empty buffer that may grow to @max bytes. No allocation. */
void dcr_buf_init(struct dcr_buf *b, size_t max);
/** Release memory; the buffer may be re-used after dcr_buf_init. NULL ok. */
void dcr_buf_free(struct dcr_buf *b);
/** Make room for at least @need bytes in total. 0, -ENOMEM or -EFBIG. */
int dcr_buf_reserve(struct dcr_buf *b, size_t need);
/** Append @n bytes. 0, -ENOMEM or -EFBIG. */
int dcr_buf_append(struct dcr_buf *b, const void *p, size_t n);
/** Append one byte. */
int dcr_buf_putc(struct dcr_buf *b, uint8_t c);
/** Append an unsigned LEB128 varint. */
int dcr_buf_put_varint(struct dcr_buf *b, uint64_t v);
/** Empty the buffer without freeing it. */
static inline void dcr_buf_reset(struct dcr_buf *b) { b->len = 0; }

/**
 * dcr_array_grow - make room for one more element of @elem bytes in the
 * malloc'ed array *@arr holding @n elements, of capacity *@cap: when
 * full it doubles (64 at first) with realloc and updates *@arr and
 * *@cap. @arr is the address of the array pointer (e.g. &v->items).
 * 0, or -ENOMEM (overflow included) with the array left as it was.
 */
int dcr_array_grow(void *arr, size_t elem, size_t n, size_t *cap);

/* Per-thread buffers (dcr_thread_buf): one per use that may be live at
 * the same time in one thread. */
enum dcr_tbuf {
	DCR_TBUF_REPLY,   /* fs: the reply to a FUSE read */
	DCR_TBUF_SCRATCH, /* store/cache: a whole chunk to check */
	DCR_TBUF_COUNT,
};

/**
 * dcr_thread_buf - this thread's buffer @which, of at least @size bytes,
 * 4096-aligned, grown on demand and kept for the thread's life (freed
 * when it exits): a fresh 1 MiB buffer per request would cost 256 page
 * faults wherever freed memory goes back to the kernel. NULL when out of
 * memory. The contents are not kept when it grows.
 */
void *dcr_thread_buf(enum dcr_tbuf which, size_t size);

/**
 * struct dcr_rd - bounded reader over untrusted bytes.
 * Every getter fails with -EBADMSG instead of reading past @end.
 */
struct dcr_rd {
	const uint8_t *p;
	const uint8_t *end;
};

static inline void dcr_rd_init(struct dcr_rd *r, const void *p, size_t n)
{
	r->p = (const uint8_t *)p;
	r->end = r->p + n;
}
static inline size_t dcr_rd_left(const struct dcr_rd *r)
{
	return (size_t)(r->end - r->p);
}
/** Read a LEB128 varint of at most 10 bytes. 0 or -EBADMSG. */
int dcr_rd_varint(struct dcr_rd *r, uint64_t *v);
/** Read a varint that must be <= @max. 0 or -EBADMSG. */
int dcr_rd_varint_max(struct dcr_rd *r, uint64_t max, uint64_t *v);
/** Read one byte. */
int dcr_rd_u8(struct dcr_rd *r, uint8_t *v);
/** Point @out at the next @n bytes and skip them (no copy). */
int dcr_rd_bytes(struct dcr_rd *r, size_t n, const uint8_t **out);

#endif /* DCR_BUF_H */
