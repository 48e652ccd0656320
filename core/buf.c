/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "common.h"

void dcr_buf_init(struct dcr_buf *b, size_t max)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	b->max = max;
}

void dcr_buf_free(struct dcr_buf *b)
{
	if (!b)
		return;
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

int dcr_buf_reserve(struct dcr_buf *b, size_t need)
{
	if (need <= b->cap)
		return 0;
	if (need > b->max)
		return DCR_ERR(-EFBIG);
	size_t cap = b->cap ? b->cap : 256;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	if (cap > b->max)
		cap = b->max;
	uint8_t *p = realloc(b->data, cap);
	if (!p)
		return DCR_ERR(-ENOMEM);
	b->data = p;
	b->cap = cap;
	return 0;
}

int dcr_array_grow(void *arr, size_t elem, size_t n, size_t *cap)
{
	void **a = arr;

	if (n < *cap)
		return 0;
	size_t nc = *cap ? 2 * *cap : 64;
	if (nc < *cap || nc > SIZE_MAX / elem)
		return DCR_ERR(-ENOMEM);
	void *na = realloc(*a, nc * elem);
	if (!na)
		return DCR_ERR(-ENOMEM);
	*a = na;
	*cap = nc;
	return 0;
}

int dcr_buf_append(struct dcr_buf *b, const void *p, size_t n)
{
	if (n > SIZE_MAX - b->len)
		return DCR_ERR(-EFBIG);
	int ret = dcr_buf_reserve(b, b->len + n);
	if (ret)
		return ret;
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	return 0;
}

int dcr_buf_putc(struct dcr_buf *b, uint8_t c)
{
	return dcr_buf_append(b, &c, 1);
}

int dcr_buf_put_varint(struct dcr_buf *b, uint64_t v)
{
	uint8_t tmp[10];
	size_t n = 0;

	do {
		uint8_t byte = v & 0x7f;
		v >>= 7;
		tmp[n++] = byte | (v ? 0x80 : 0);
	} while (v);
	return dcr_buf_append(b, tmp, n);
}

int dcr_rd_varint(struct dcr_rd *r, uint64_t *v)
{
	uint64_t x = 0;

	for (unsigned i = 0; i < 10; i++) {
		if (r->p >= r->end)
			return DCR_ERR(-EBADMSG);
		uint8_t byte = *r->p++;
		if (i == 9 && byte > 1)
			return DCR_ERR(-EBADMSG); /* overflows 64 bits */
		x |= (uint64_t)(byte & 0x7f) << (7 * i);
		if (!(byte & 0x80)) {
			*v = x;
			return 0;
		}
	}
	return DCR_ERR(-EBADMSG);
}

int dcr_rd_varint_max(struct dcr_rd *r, uint64_t max, uint64_t *v)
{
	int ret = dcr_rd_varint(r, v);
	if (ret)
		return ret;
	return *v > max ? DCR_ERR(-EBADMSG) : 0;
}

int dcr_rd_u8(struct dcr_rd *r, uint8_t *v)
{
	if (r->p >= r->end)
		return DCR_ERR(-EBADMSG);
	*v = *r->p++;
	return 0;
}

int dcr_rd_bytes(struct dcr_rd *r, size_t n, const uint8_t **out)
{
	if (n > dcr_rd_left(r))
		return DCR_ERR(-EBADMSG);
	*out = r->p;
	r->p += n;
	return 0;
}

struct tbuf {
	void *p;
	size_t cap;
};

static pthread_key_t tbuf_key;
static pthread_once_t tbuf_once = PTHREAD_ONCE_INIT;
static bool tbuf_key_ok;

static void tbuf_free(void *arg)
{
	struct tbuf *t = arg;

	for (int i = 0; i < DCR_TBUF_COUNT; i++)
		free(t[i].p);
	free(t);
}

static void tbuf_key_init(void)
{
	tbuf_key_ok = pthread_key_create(&tbuf_key, tbuf_free) == 0;
}

void *dcr_thread_buf(enum dcr_tbuf which, size_t size)
{
	size_t cap = DCR_ROUND_UP(size ? size : 1, (size_t)4096);
	struct tbuf *t;

	pthread_once(&tbuf_once, tbuf_key_init);
	if (!tbuf_key_ok || which >= DCR_TBUF_COUNT)
		return NULL;
	t = pthread_getspecific(tbuf_key);
	if (!t) {
		t = calloc(DCR_TBUF_COUNT, sizeof(*t));
		if (!t)
			return NULL;
		if (pthread_setspecific(tbuf_key, t) != 0) {
			free(t);
			return NULL;
		}
	}
	if (t[which].cap < cap) {
		void *p = aligned_alloc(4096, cap);

		if (!p)
			return NULL;
		free(t[which].p);
		t[which].p = p;
		t[which].cap = cap;
	}
	return t[which].p;
}
