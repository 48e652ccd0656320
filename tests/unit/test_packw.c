/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for commit/packw.c: the pack writer over a real directory
 * store, and the naming rule of both pack forms (dcr_pack_name). A pack
 * written now is "DCRPACK2" + its frames and is named by the SHA-256 of
 * the header and of each frame's SHA-256, computed here by hand; packs
 * written before ("DCRPACK1", or no header) keep the SHA-256 of their
 * bytes; a "DCRPACK2" pack whose bytes are not whole frames has no name.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "testutil.h"

#include "chunk.h"
#include "dirstore.h"
#include "frame.h"
#include "hash.h"
#include "manifest.h"
#include "packw.h"

#define NFRAMES 3
#define CS 8192u

struct fx {
	char *root;
	struct dcr_store *st;
	struct dcr_buf frame[NFRAMES];
	uint8_t fhash[NFRAMES][DCR_HASH_LEN];
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct dcr_codec *c = dcr_codec_new(0);
	uint8_t chunk[CS];
	char store[PATH_MAX];
	int kind;

	if (!f || !c)
		return -1;
	f->root = tu_mkdtemp("packw");
	snprintf(store, sizeof(store), "%s/store", f->root);
	if (dcr_dir_open(store, 1, &f->st))
		return -1;
	for (int i = 0; i < NFRAMES; i++) {
		tu_fill(chunk, sizeof(chunk), (uint64_t)i + 1);
		memset(chunk, 0, (size_t)i * 1000); /* frames of different lengths */
		dcr_buf_init(&f->frame[i], DCR_CHUNK_MAX + 4096);
		if (dcr_frame_encode(c, chunk, NULL, sizeof(chunk), &f->frame[i], &kind))
			return -1;
		dcr_sha256(f->frame[i].data, f->frame[i].len, f->fhash[i]);
	}
	dcr_codec_free(c);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	for (int i = 0; i < NFRAMES; i++)
		dcr_buf_free(&f->frame[i]);
	dcr_store_close(f->st);
	tu_rm_rf(f->root);
	free(f->root);
	free(f);
	return 0;
}

/* The name of a DCRPACK2 pack of @f's frames, the obvious way. */
static void name_by_hand(struct fx *f, uint8_t out[DCR_HASH_LEN])
{
	uint8_t in[DCR_PACK_HDR_LEN + NFRAMES * DCR_HASH_LEN];

	memcpy(in, "DCRPACK2", DCR_PACK_HDR_LEN);
	for (int i = 0; i < NFRAMES; i++)
		memcpy(in + DCR_PACK_HDR_LEN + i * DCR_HASH_LEN, f->fhash[i], DCR_HASH_LEN);
	dcr_sha256(in, sizeof(in), out);
}

/* Write @f's frames as one pack with @uploads upload workers; the pack's
 * bytes in *@b (the caller frees), its name in @name. */
static void write_pack(struct fx *f, unsigned uploads, struct dcr_buf *b,
		       uint8_t name[DCR_HASH_LEN])
{
	struct dcr_packw_opts o = { .st = f->st, .frame_max = DCR_CHUNK_MAX + 4096,
				    .uploads = uploads };
	struct dcr_packw *w;
	uint64_t off, want = DCR_PACK_HDR_LEN;
	uint32_t pack;
	char key[80];

	assert_int_equal(dcr_packw_new(&o, &w), 0);
	for (int i = 0; i < NFRAMES; i++) {
		assert_int_equal(dcr_packw_append(w, f->frame[i].data, f->frame[i].len,
						  f->fhash[i], &pack, &off), 0);
		assert_int_equal(pack, 0);
		assert_int_equal(off, want);
		want += f->frame[i].len;
	}
	assert_int_equal(dcr_packw_finish(w), 0);
	assert_int_equal(dcr_packw_count(w), 1);
	memcpy(name, dcr_packw_hashes(w)[0], DCR_HASH_LEN);
	dcr_packw_free(w);
	dcr_pack_key(name, key, sizeof(key));
	dcr_buf_init(b, 1 << 20);
	assert_int_equal(dcr_store_get(f->st, key, 0, DCR_GET_ALL, b), 0);
	assert_int_equal(b->len, want);
}

/* A pack written now: "DCRPACK2", its frames in order, named by the hash
 * of its header and its frames' hashes, and dcr_pack_name agrees. */
static void test_writer_names_by_frame_hashes(void **state)
{
	struct fx *f = *state;
	uint8_t name[DCR_HASH_LEN], want[DCR_HASH_LEN], got[DCR_HASH_LEN];
	struct dcr_buf b;

	name_by_hand(f, want);
	for (unsigned uploads = 0; uploads <= 2; uploads += 2) {
		write_pack(f, uploads, &b, name);
		assert_memory_equal(b.data, "DCRPACK2", DCR_PACK_HDR_LEN);
		size_t off = DCR_PACK_HDR_LEN;
		for (int i = 0; i < NFRAMES; i++) {
			assert_memory_equal(b.data + off, f->frame[i].data, f->frame[i].len);
			off += f->frame[i].len;
		}
		assert_memory_equal(name, want, DCR_HASH_LEN);
		assert_int_equal(dcr_pack_name(b.data, b.len, got), 0);
		assert_memory_equal(got, want, DCR_HASH_LEN);
		/* and the frames it was named from, by place */
		struct dcr_pack_frame *fs;
		size_t nfs;
		assert_int_equal(dcr_pack_frames(b.data, b.len, got, &fs, &nfs), 0);
		assert_memory_equal(got, want, DCR_HASH_LEN);
		assert_int_equal(nfs, NFRAMES);
		off = DCR_PACK_HDR_LEN;
		for (int i = 0; i < NFRAMES; i++) {
			assert_int_equal(fs[i].off, off);
			assert_int_equal(fs[i].len, f->frame[i].len);
			assert_memory_equal(fs[i].hash, f->fhash[i], DCR_HASH_LEN);
			off += f->frame[i].len;
		}
		free(fs);
		dcr_buf_free(&b);
	}
}

/* Bytes that are not one whole frame are refused: the name would not
 * describe the pack's bytes. */
static void test_append_refuses_non_frames(void **state)
{
	struct fx *f = *state;
	struct dcr_packw_opts o = { .st = f->st, .frame_max = DCR_CHUNK_MAX + 4096 };
	struct dcr_packw *w;
	uint8_t junk[64] = { 0 };
	uint64_t off;
	uint32_t pack;

	assert_int_equal(dcr_packw_new(&o, &w), 0);
	assert_int_equal(dcr_buf_append(&f->frame[0], "x", 1), 0);
	assert_int_equal(dcr_packw_append(w, f->frame[0].data, f->frame[0].len,
					  f->fhash[0], &pack, &off), -EINVAL);
	assert_int_equal(dcr_packw_append(w, f->frame[0].data, f->frame[0].len - 2,
					  f->fhash[0], &pack, &off), -EINVAL);
	assert_int_equal(dcr_packw_append(w, junk, sizeof(junk), f->fhash[0],
					  &pack, &off), -EINVAL);
	f->frame[0].len--;
	assert_int_equal(dcr_packw_finish(w), 0);
	assert_int_equal(dcr_packw_count(w), 0);
	dcr_packw_free(w);
}

/* The name of a pack written before, and of a DCRPACK2 pack whose bytes
 * were changed without changing a frame. */
static void test_pack_name_forms(void **state)
{
	struct fx *f = *state;
	uint8_t name[DCR_HASH_LEN], got[DCR_HASH_LEN], want[DCR_HASH_LEN];
	struct dcr_buf b;

	write_pack(f, 0, &b, name);
	/* the same frames under the old header: the SHA-256 of the bytes */
	memcpy(b.data, "DCRPACK1", DCR_PACK_HDR_LEN);
	dcr_sha256(b.data, b.len, want);
	assert_int_equal(dcr_pack_name(b.data, b.len, got), 0);
	assert_memory_equal(got, want, DCR_HASH_LEN);
	assert_memory_not_equal(got, name, DCR_HASH_LEN);
	struct dcr_pack_frame *fs = (void *)1;
	size_t nfs = 1;
	assert_int_equal(dcr_pack_frames(b.data, b.len, got, &fs, &nfs), 0);
	assert_null(fs); /* the old form has no frame list */
	assert_int_equal(nfs, 0);
	/* no header (older compaction): the same */
	dcr_sha256(b.data + DCR_PACK_HDR_LEN, b.len - DCR_PACK_HDR_LEN, want);
	assert_int_equal(dcr_pack_name(b.data + DCR_PACK_HDR_LEN,
				       b.len - DCR_PACK_HDR_LEN, got), 0);
	assert_memory_equal(got, want, DCR_HASH_LEN);
	/* DCRPACK2 with a byte more, or less, than its frames: no name */
	memcpy(b.data, "DCRPACK2", DCR_PACK_HDR_LEN);
	assert_int_equal(dcr_buf_append(&b, "", 1), 0);
	assert_int_equal(dcr_pack_name(b.data, b.len, got), -EBADMSG);
	assert_int_equal(dcr_pack_name(b.data, b.len - 2, got), -EBADMSG);
	/* a frame's byte changed: another name */
	assert_int_equal(dcr_pack_name(b.data, b.len - 1, got), 0);
	assert_memory_equal(got, name, DCR_HASH_LEN);
	b.data[b.len - 2] ^= 1;
	assert_int_equal(dcr_pack_name(b.data, b.len - 1, got), 0);
	assert_memory_not_equal(got, name, DCR_HASH_LEN);
	/* the header alone */
	assert_int_equal(dcr_pack_name(b.data, DCR_PACK_HDR_LEN, got), 0);
	dcr_sha256("DCRPACK2", DCR_PACK_HDR_LEN, want);
	assert_memory_equal(got, want, DCR_HASH_LEN);
	dcr_buf_free(&b);
}

/* A store that puts whole buffers only: @in's ops without put_open. */
struct bstore {
	struct dcr_store base;
	struct dcr_store *in;
};

static struct dcr_store *inner(struct dcr_store *st)
{
	return ((struct bstore *)st)->in;
}

static int b_get(struct dcr_store *st, const char *key, uint64_t off,
		 uint64_t len, int64_t deadline, struct dcr_buf *out)
{
	return dcr_store_get_within(inner(st), key, off, len, deadline, out);
}

static int b_put(struct dcr_store *st, const char *key, const void *data,
		 uint64_t len, int flags)
{
	return dcr_store_put(inner(st), key, data, len, flags);
}

static int b_head(struct dcr_store *st, const char *key, uint64_t *size)
{
	return dcr_store_head(inner(st), key, size);
}

static int b_list(struct dcr_store *st, const char *prefix, dcr_list_fn fn,
		  void *arg)
{
	return dcr_store_list(inner(st), prefix, fn, arg);
}

static int b_del(struct dcr_store *st, const char *key)
{
	return dcr_store_del(inner(st), key);
}

static void b_close(struct dcr_store *st)
{
	(void)st;
}

static const struct dcr_store_ops buffered_ops = {
	.name = "buffered", .get = b_get, .put = b_put, .head = b_head,
	.list = b_list, .del = b_del, .close = b_close,
};

#define BIG_FRAMES 20

static int count_partial(const char *key, const struct dcr_obj_info *info,
			 void *arg)
{
	(void)key;
	(void)info;
	++*(int *)arg;
	return 0;
}

/* Append @n frames to a writer on @st with a 6 MiB target: their packs,
 * offsets in @pack/@off, names in @names (packs in *@npacks). */
static void write_big(struct dcr_store *st, struct dcr_buf *frames,
		      uint8_t (*fh)[DCR_HASH_LEN], int n, uint32_t *pack,
		      uint64_t *off, uint8_t (*names)[DCR_HASH_LEN],
		      uint32_t *npacks)
{
	struct dcr_packw_opts o = { .st = st, .frame_max = DCR_CHUNK_MAX + 4096,
				    .target = 6u << 20, .uploads = 2 };
	struct dcr_packw *w;

	assert_int_equal(dcr_packw_new(&o, &w), 0);
	for (int i = 0; i < n; i++)
		assert_int_equal(dcr_packw_append(w, frames[i].data, frames[i].len,
						  fh[i], &pack[i], &off[i]), 0);
	assert_int_equal(dcr_packw_finish(w), 0);
	*npacks = dcr_packw_count(w);
	memcpy(names, dcr_packw_hashes(w), (size_t)*npacks * DCR_HASH_LEN);
	dcr_packw_free(w);
}

/*
 * A store that takes objects in parts gets the packs streamed (a few MiB
 * at a time from one buffer, not whole packs): the same packs, names,
 * offsets and bytes as a store that takes whole buffers, over several
 * packs and many parts, and no temporary is left.
 */
static void test_streamed_equals_buffered(void **state)
{
	struct fx *f = *state;
	struct bstore bs = { { &buffered_ops, f->st->url }, NULL };
	struct dcr_codec *c = dcr_codec_new(0);
	struct dcr_buf frames[BIG_FRAMES], b1, b2;
	uint8_t fh[BIG_FRAMES][DCR_HASH_LEN], n1[BIG_FRAMES][DCR_HASH_LEN],
		n2[BIG_FRAMES][DCR_HASH_LEN];
	uint32_t p1[BIG_FRAMES], p2[BIG_FRAMES], np1, np2;
	uint64_t o1[BIG_FRAMES], o2[BIG_FRAMES];
	uint8_t *chunk = malloc(DCR_CHUNK_MAX);
	char path[PATH_MAX], key[80];
	int kind;

	assert_non_null(c);
	assert_non_null(chunk);
	snprintf(path, sizeof(path), "%s/store2", f->root);
	assert_int_equal(dcr_dir_open(path, 1, &bs.in), 0);
	assert_true(dcr_store_can_stream(f->st));
	assert_false(dcr_store_can_stream(&bs.base));
	for (int i = 0; i < BIG_FRAMES; i++) {
		size_t len = (1u << 20) - (size_t)i * 777; /* odd lengths */
		tu_fill(chunk, len, (uint64_t)i + 100);
		dcr_buf_init(&frames[i], DCR_CHUNK_MAX + 4096);
		assert_int_equal(dcr_frame_encode(c, chunk, NULL, len, &frames[i], &kind), 0);
		dcr_sha256(frames[i].data, frames[i].len, fh[i]);
	}
	write_big(f->st, frames, fh, BIG_FRAMES, p1, o1, n1, &np1);
	write_big(&bs.base, frames, fh, BIG_FRAMES, p2, o2, n2, &np2);
	assert_true(np1 >= 3);
	assert_int_equal(np1, np2);
	assert_memory_equal(n1, n2, (size_t)np1 * DCR_HASH_LEN);
	assert_memory_equal(p1, p2, sizeof(p1));
	assert_memory_equal(o1, o2, sizeof(o1));
	dcr_buf_init(&b1, 16u << 20);
	dcr_buf_init(&b2, 16u << 20);
	for (uint32_t k = 0; k < np1; k++) {
		dcr_pack_key(n1[k], key, sizeof(key));
		dcr_buf_reset(&b1);
		dcr_buf_reset(&b2);
		assert_int_equal(dcr_store_get(f->st, key, 0, DCR_GET_ALL, &b1), 0);
		assert_int_equal(dcr_store_get(bs.in, key, 0, DCR_GET_ALL, &b2), 0);
		assert_int_equal(b1.len, b2.len);
		assert_memory_equal(b1.data, b2.data, b1.len);
	}
	for (int i = 0; i < BIG_FRAMES; i++) {
		dcr_pack_key(n1[p1[i]], key, sizeof(key));
		dcr_buf_reset(&b1);
		assert_int_equal(dcr_store_get(f->st, key, o1[i], frames[i].len, &b1), 0);
		assert_memory_equal(b1.data, frames[i].data, frames[i].len);
		dcr_buf_free(&frames[i]);
	}
	int left = 0;
	assert_int_equal(dcr_store_list_partial(f->st, count_partial, &left), 0);
	assert_int_equal(left, 0);
	dcr_buf_free(&b1);
	dcr_buf_free(&b2);
	dcr_store_close(bs.in);
	dcr_codec_free(c);
	free(chunk);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_writer_names_by_frame_hashes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_append_refuses_non_frames, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pack_name_forms, setup, teardown),
		cmocka_unit_test_setup_teardown(test_streamed_equals_buffered, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
