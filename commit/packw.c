/* SPDX-License-Identifier: MIT */
/*
 * packw.c - the pack writer (packw.h).
 *
 * w->lock guards what the upload jobs share with the appender: the
 * hashes, the first error, the byte count and the spare buffers. The
 * open pack is the appender's alone.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "buf.h"
#include "common.h"
#include "frame.h"
#include "manifest.h"
#include "packw.h"
#include "wq.h"

#define MAX_UPLOADS 32
/* A store that takes objects in parts (put_open) gets the open pack in
 * aligned parts of about this size, from one buffer re-used for every
 * pack, instead of whole packs from buffers of target + frame_max. */
#define STREAM_PART ((size_t)4 << 20)

/*
 * A pack's bytes: page-aligned (mmap), so that a store can write them
 * without a copy (the directory store uses O_DIRECT), backed by huge
 * pages where the kernel allows (MADV_HUGEPAGE) and faulted in ahead of
 * the appends in large steps (MADV_POPULATE_WRITE): on some hypervisors
 * first-touching 4 KiB pages costs more than encoding into them (filling
 * 384 MiB of fresh memory on the 2-core dev VM: 3.2 s with 4 KiB
 * faults, 2.1 s populated, 0.1-0.2 s with huge pages). Buffers are
 * re-used by the writer.
 */
struct pbuf {
	uint8_t *data;
	size_t len, cap;
	size_t ready;  /* bytes known to be faulted in */
};

#define PBUF_POPULATE_STEP ((size_t)8 << 20)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

static int pbuf_init(struct pbuf *b, size_t cap)
{
	long pg = sysconf(_SC_PAGESIZE);
	size_t psz = pg > 0 ? (size_t)pg : 4096;

	cap = (cap + psz - 1) / psz * psz;
	void *m = mmap(NULL, cap, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return DCR_ERR(-ENOMEM);
	madvise(m, cap, MADV_HUGEPAGE); /* a hint, as below */
	*b = (struct pbuf){ .data = m, .cap = cap };
	return 0;
}

static void pbuf_free(struct pbuf *b)
{
	if (b->data)
		munmap(b->data, b->cap);
	b->data = NULL;
}

static void pbuf_append(struct pbuf *b, const void *src, size_t n)
{
	if (b->len + n > b->ready) {
		size_t grow = DCR_MIN(DCR_MAX(b->len + n - b->ready, PBUF_POPULATE_STEP),
				      b->cap - b->ready);
		/* Only a hint: a kernel without it faults page by page. */
		madvise(b->data + b->ready, grow, MADV_POPULATE_WRITE);
		b->ready += grow;
	}
	memcpy(b->data + b->len, src, n);
	b->len += n;
}

/* A sealed pack on its way to the store. */
struct spack {
	struct dcr_packw *w;
	struct pbuf data;
	uint32_t idx;
	uint8_t name[DCR_HASH_LEN];
};

struct dcr_packw {
	struct dcr_packw_opts o;
	struct dcr_wq *up;
	/* The open pack (cur.data NULL: none). Streaming (the store takes
	 * parts): the bytes not yet written to @put, after @flushed
	 * written ones; its buffer is a spare again once it is sealed. */
	struct pbuf cur;
	bool stream;
	struct dcr_put *put;
	uint64_t flushed;
	uint32_t cur_idx;
	struct dcr_sha256_ctx *name; /* the open pack's name so far */
	pthread_mutex_t lock;
	uint8_t (*hashes)[DCR_HASH_LEN];
	uint32_t npacks, cap;
	int err;
	uint64_t uploaded;
	struct pbuf spare[MAX_UPLOADS + 2];
	unsigned nspare;
};

/* Keep @b for the next pack (faulting in fresh pages costs more than
 * encoding into them), or free it. */
static void give_back(struct dcr_packw *w, struct pbuf *b)
{
	pthread_mutex_lock(&w->lock);
	if (w->nspare < DCR_ARRAY_SIZE(w->spare)) {
		b->len = 0;
		w->spare[w->nspare++] = *b;
		b->data = NULL;
	}
	pthread_mutex_unlock(&w->lock);
	pbuf_free(b);
}

/* Keep @ret as the writer's error unless it has one already. */
static void set_error(struct dcr_packw *w, int ret)
{
	pthread_mutex_lock(&w->lock);
	if (!w->err)
		w->err = ret;
	pthread_mutex_unlock(&w->lock);
}

/* Record pack @idx, named @name, of @len bytes as stored, or the first
 * error @ret. */
static void stored(struct dcr_packw *w, uint32_t idx,
		   const uint8_t name[DCR_HASH_LEN], uint64_t len, int ret)
{
	if (ret) {
		set_error(w, ret);
		return;
	}
	pthread_mutex_lock(&w->lock);
	memcpy(w->hashes[idx], name, DCR_HASH_LEN);
	w->uploaded += len;
	pthread_mutex_unlock(&w->lock);
}

static void upload_job(void *ctx, void *ws, void *arg)
{
	struct spack *sp = arg;
	struct dcr_packw *w = sp->w;
	char key[80];
	int ret = dcr_packw_error(w) ? -ECANCELED : 0;

	(void)ctx;
	(void)ws;
	if (!ret) {
		dcr_pack_key(sp->name, key, sizeof(key));
		ret = dcr_store_put(w->o.st, key, sp->data.data, sp->data.len, 0);
		if (ret)
			dcr_err("%s: cannot upload %s: %s", w->o.st->url, key,
				dcr_strerror(ret));
	}
	stored(w, sp->idx, sp->name, sp->data.len, ret);
	give_back(w, &sp->data);
	free(sp);
}

static void drop_job(void *ctx, void *arg)
{
	struct spack *sp = arg;

	(void)ctx;
	pbuf_free(&sp->data);
	free(sp);
}

int dcr_pack_frames(const void *data, size_t len, uint8_t out[DCR_HASH_LEN],
		    struct dcr_pack_frame **frames, size_t *n)
{
	const uint8_t *p = data;
	struct dcr_pack_frame *fs = NULL;
	size_t nf = 0, cap = 0;

	if (frames)
		*frames = NULL;
	if (n)
		*n = 0;
	if (len < DCR_PACK_HDR_LEN || memcmp(p, DCR_PACK_MAGIC, DCR_PACK_HDR_LEN)) {
		dcr_sha256(data, len, out);
		return 0;
	}
	struct dcr_sha256_ctx *c = dcr_sha256_new();
	struct dcr_frame_hdr h;
	uint8_t fh[DCR_HASH_LEN];
	size_t off = DCR_PACK_HDR_LEN;

	if (!c)
		return DCR_ERR(-ENOMEM);
	dcr_sha256_update(c, p, DCR_PACK_HDR_LEN);
	while (off < len) {
		if (dcr_frame_parse_hdr(p + off, len - off, &h)) {
			dcr_sha256_free(c);
			free(fs);
			return DCR_ERR(-EBADMSG);
		}
		size_t fl = DCR_FRAME_HDR_LEN + (size_t)h.payload_len;
		dcr_sha256(p + off, fl, fh);
		dcr_sha256_update(c, fh, DCR_HASH_LEN);
		if (frames) {
			if (dcr_array_grow(&fs, sizeof(*fs), nf, &cap)) {
				dcr_sha256_free(c);
				free(fs);
				return DCR_ERR(-ENOMEM);
			}
			fs[nf].off = off;
			fs[nf].len = fl;
			memcpy(fs[nf++].hash, fh, DCR_HASH_LEN);
		}
		off += fl;
	}
	dcr_sha256_final(c, out);
	dcr_sha256_free(c);
	if (frames)
		*frames = fs;
	if (n)
		*n = nf;
	return 0;
}

int dcr_pack_name(const void *data, size_t len, uint8_t out[DCR_HASH_LEN])
{
	return dcr_pack_frames(data, len, out, NULL, NULL);
}

int dcr_packw_new(const struct dcr_packw_opts *o, struct dcr_packw **out)
{
	struct dcr_packw *w;

	*out = NULL;
	if (!o->st || !o->frame_max || o->frame_max > SIZE_MAX / 4)
		return DCR_ERR(-EINVAL);
	if (!(w = calloc(1, sizeof(*w))))
		return DCR_ERR(-ENOMEM);
	if (!(w->name = dcr_sha256_new())) {
		free(w);
		return DCR_ERR(-ENOMEM);
	}
	w->o = *o;
	if (!w->o.target)
		w->o.target = DCR_PACK_TARGET_DEFAULT;
	w->o.uploads = DCR_MIN(w->o.uploads, MAX_UPLOADS);
	/* Streamed packs are written by the appender: no upload threads. */
	w->stream = dcr_store_can_stream(w->o.st);
	if (w->stream)
		w->o.uploads = 0;
	struct dcr_wq_opts wo = { .name = "dcr-upload", .threads = (int)w->o.uploads,
				  .max_items = 1, .drop = drop_job, .ctx = w };
	int ret = w->o.uploads ? dcr_wq_create(&wo, &w->up) : 0;
	if (ret) {
		dcr_sha256_free(w->name);
		free(w);
		return ret;
	}
	pthread_mutex_init(&w->lock, NULL);
	*out = w;
	return 0;
}

int dcr_packw_error(struct dcr_packw *w)
{
	pthread_mutex_lock(&w->lock);
	int e = w->err;
	pthread_mutex_unlock(&w->lock);
	return e;
}

/* Open a pack: a spare buffer or a new one, the header, a slot for its
 * hash. */
static int open_pack(struct dcr_packw *w)
{
	int ret = 0;

	pthread_mutex_lock(&w->lock);
	if (w->npacks == w->cap) {
		uint32_t cap = w->cap ? w->cap * 2 : 16;
		void *nh = cap > w->cap ? realloc(w->hashes, (size_t)cap * DCR_HASH_LEN) : NULL;
		if (!nh) {
			pthread_mutex_unlock(&w->lock);
			return DCR_ERR(-ENOMEM);
		}
		w->hashes = nh;
		w->cap = cap;
	}
	if (w->nspare)
		w->cur = w->spare[--w->nspare];
	pthread_mutex_unlock(&w->lock);
	/* A pack is sealed once it reaches the target, or before a frame
	 * that would not fit: it never holds more than target + frame_max. */
	if (!w->cur.data &&
	    (ret = pbuf_init(&w->cur, (w->stream ? STREAM_PART : w->o.target) +
				      w->o.frame_max + DCR_PACK_HDR_LEN)))
		return ret;
	if (w->stream && (ret = dcr_store_put_open(w->o.st, &w->put)))
		return ret; /* logged by the store */
	w->cur.len = 0;
	w->flushed = 0;
	pbuf_append(&w->cur, DCR_PACK_MAGIC, DCR_PACK_HDR_LEN);
	dcr_sha256_reset(w->name);
	dcr_sha256_update(w->name, DCR_PACK_MAGIC, DCR_PACK_HDR_LEN);
	pthread_mutex_lock(&w->lock);
	w->cur_idx = w->npacks++;
	pthread_mutex_unlock(&w->lock);
	return 0;
}

/* Write the open pack's staged bytes to the store: all of them (@all), or
 * the whole DCR_PUT_ALIGN blocks, the rest moved to the buffer's start. */
static int flush_stream(struct dcr_packw *w, bool all)
{
	size_t n = all ? w->cur.len : w->cur.len / DCR_PUT_ALIGN * DCR_PUT_ALIGN;
	int ret = n ? dcr_store_put_write(w->o.st, w->put, w->cur.data, n) : 0;

	if (ret)
		return ret;
	memmove(w->cur.data, w->cur.data + n, w->cur.len - n);
	w->cur.len -= n;
	w->flushed += n;
	return 0;
}

/* dcr_packw_seal of a streamed pack: its last bytes written, named and
 * stored here, on the sealer's thread; the buffer kept for the next. */
static int seal_stream(struct dcr_packw *w)
{
	uint8_t name[DCR_HASH_LEN];
	char key[80];
	int ret = flush_stream(w, true);
	uint64_t len = w->flushed;

	dcr_sha256_final(w->name, name);
	dcr_pack_key(name, key, sizeof(key));
	if (ret)
		dcr_store_put_abort(w->o.st, w->put);
	else
		ret = dcr_store_put_finish(w->o.st, w->put, key, 0);
	w->put = NULL;
	if (ret)
		dcr_err("%s: cannot upload %s: %s", w->o.st->url, key,
			dcr_strerror(ret));
	stored(w, w->cur_idx, name, len, ret);
	give_back(w, &w->cur);
	return ret;
}

int dcr_packw_seal(struct dcr_packw *w)
{
	struct spack *sp;
	int ret;

	if (!w->cur.data)
		return dcr_packw_error(w);
	if (w->flushed + w->cur.len <= DCR_PACK_HDR_LEN)
		return dcr_packw_error(w); /* empty: stays open */
	if (w->stream) {
		ret = dcr_packw_error(w);
		return ret ? ret : seal_stream(w);
	}
	if (!(sp = malloc(sizeof(*sp))))
		return DCR_ERR(-ENOMEM);
	*sp = (struct spack){ .w = w, .data = w->cur, .idx = w->cur_idx };
	dcr_sha256_final(w->name, sp->name);
	w->cur.data = NULL;
	if (!w->up || !dcr_wq_submit(w->up, upload_job, sp, 0))
		upload_job(w, NULL, sp); /* uploads 0, or no worker could start */
	ret = dcr_packw_error(w);
	return ret;
}

int dcr_packw_append(struct dcr_packw *w, const void *data, size_t len,
		     const uint8_t fhash[DCR_HASH_LEN], uint32_t *pack,
		     uint64_t *off)
{
	struct dcr_frame_hdr h;
	int ret;

	if (len > w->o.frame_max)
		return DCR_ERR(-EFBIG);
	/* the pack's name takes its frames from their headers (dcr_pack_name) */
	if (dcr_frame_parse_hdr(data, len, &h) ||
	    DCR_FRAME_HDR_LEN + (size_t)h.payload_len != len)
		return DCR_ERR(-EINVAL);
	if ((ret = dcr_packw_error(w)))
		return ret;
	if (w->cur.data && w->flushed + w->cur.len + len >
			   w->o.target + w->o.frame_max + DCR_PACK_HDR_LEN &&
	    (ret = dcr_packw_seal(w)))
		return ret;
	if (!w->cur.data && (ret = open_pack(w)))
		return ret;
	*pack = w->cur_idx;
	*off = w->flushed + w->cur.len;
	pbuf_append(&w->cur, data, len);
	dcr_sha256_update(w->name, fhash, DCR_HASH_LEN);
	if (w->flushed + w->cur.len >= w->o.target)
		return dcr_packw_seal(w);
	if (w->stream && w->cur.len >= STREAM_PART && (ret = flush_stream(w, false))) {
		set_error(w, ret); /* logged by the store; the pack is dropped */
		return ret;
	}
	return 0;
}

int dcr_packw_finish(struct dcr_packw *w)
{
	int ret = dcr_packw_seal(w);

	if (w->up)
		dcr_wq_wait_idle(w->up);
	if (!ret)
		ret = dcr_packw_error(w);
	/* an open pack left empty (opened, nothing appended) is no pack */
	if (!ret && w->cur.data && w->flushed + w->cur.len <= DCR_PACK_HDR_LEN) {
		pthread_mutex_lock(&w->lock);
		w->npacks--;
		pthread_mutex_unlock(&w->lock);
		pbuf_free(&w->cur);
		if (w->put)
			dcr_store_put_abort(w->o.st, w->put);
		w->put = NULL;
	}
	return ret;
}

uint32_t dcr_packw_count(const struct dcr_packw *w)
{
	return w->npacks;
}

const uint8_t (*dcr_packw_hashes(const struct dcr_packw *w))[DCR_HASH_LEN]
{
	return (const uint8_t (*)[DCR_HASH_LEN])w->hashes;
}

uint64_t dcr_packw_uploaded(struct dcr_packw *w)
{
	pthread_mutex_lock(&w->lock);
	uint64_t n = w->uploaded;
	pthread_mutex_unlock(&w->lock);
	return n;
}

void dcr_packw_free(struct dcr_packw *w)
{
	if (!w)
		return;
	dcr_wq_stop(w->up, true);
	dcr_wq_free(w->up);
	if (w->put)
		dcr_store_put_abort(w->o.st, w->put);
	pbuf_free(&w->cur);
	while (w->nspare)
		pbuf_free(&w->spare[--w->nspare]);
	pthread_mutex_destroy(&w->lock);
	dcr_sha256_free(w->name);
	free(w->hashes);
	free(w);
}
