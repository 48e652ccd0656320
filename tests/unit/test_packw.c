/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for core/packw.c: the pack writer over a real directory
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_writer_names_by_frame_hashes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_append_refuses_non_frames, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pack_name_forms, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
