/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for commit/commit.c over a real directory store. Versions are
 * checked by an independent, deliberately naive materializer written here
 * (walk the manifest chain, apply frames, compare with the source tree).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "testutil.h"

#include "chunk.h"
#include "commit.h"
#include "common.h"
#include "dirstore.h"
#include "entropy.h"
#include "frame.h"
#include "hash.h"
#include "manifest.h"
#include "nonfinite.h"
#include "sign.h"

#define CS 4096u

struct fx {
	char root[64];
	char src[96], par[96], stage[96];
	struct dcr_store *st;
	struct dcr_manifest man[16]; /* decoded versions, by number */
	uint64_t nver;
};

/* A shell command that must succeed. */
#define sh(...) assert_int_equal(tu_sh(__VA_ARGS__), 0)

static void write_file(const char *dir, const char *rel, const uint8_t *p, size_t n)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(p, 1, n, f), n);
	fclose(f);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	snprintf(f->root, sizeof(f->root), "/tmp/dcr-commit-XXXXXX");
	if (!mkdtemp(f->root))
		return -1;
	snprintf(f->src, sizeof(f->src), "%s/src", f->root);
	snprintf(f->par, sizeof(f->par), "%s/parent", f->root);
	snprintf(f->stage, sizeof(f->stage), "%s/stage", f->root);
	char store[128];
	snprintf(store, sizeof(store), "%s/store", f->root);
	mkdir(f->src, 0755);
	if (dcr_dir_open(store, 1, &f->st))
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	for (int i = 0; i < 16; i++)
		dcr_manifest_free(&f->man[i]);
	dcr_store_close(f->st);
	sh("rm -rf '%s'", f->root);
	free(f);
	return 0;
}

/* Materialize chunk @c of file @fi of version @v the slow, obvious way. */
static void oracle_chunk(struct fx *f, uint64_t v, uint32_t fi, uint64_t c,
			 uint8_t *dst, struct dcr_codec *codec)
{
	const struct dcr_manifest *m = &f->man[v];
	const struct dcr_file *file = &m->files[fi];
	const struct dcr_chunk_ref *r = &file->chunks[c];
	uint32_t len = dcr_chunk_len(file->size, m->chunk_size, c);

	if (r->kind != DCR_CK_FULL)
		oracle_chunk(f, m->parent, file->base, c, dst, codec);
	if (r->kind != DCR_CK_SAME) {
		char key[80];
		struct dcr_buf b;
		dcr_pack_key(m->packs[r->pack], key, sizeof(key));
		dcr_buf_init(&b, 1 << 26);
		assert_int_equal(dcr_store_get(f->st, key, r->off, r->len, &b), 0);
		assert_int_equal(b.len, r->len);
		assert_int_equal(dcr_frame_apply(codec, b.data, b.len, dst, len), 0);
		dcr_buf_free(&b);
	}
	uint8_t h[DCR_HASH_LEN];
	dcr_sha256(dst, len, h);
	assert_memory_equal(h, r->hash, DCR_HASH_LEN);
}

/* Every file of version @v must equal the file in @dir byte for byte. */
static void verify(struct fx *f, uint64_t v, const char *dir)
{
	struct dcr_codec *codec = dcr_codec_new(0);
	const struct dcr_manifest *m = &f->man[v];
	uint8_t *buf = malloc(DCR_CHUNK_MAX);

	for (uint32_t i = 0; i < m->nfiles; i++) {
		const struct dcr_file *file = &m->files[i];
		char path[256];
		struct stat sb;
		snprintf(path, sizeof(path), "%s/%s", dir, file->path);
		assert_int_equal(lstat(path, &sb), 0);
		if (file->type == DCR_FT_DIR) {
			assert_true(S_ISDIR(sb.st_mode));
			continue;
		}
		assert_true((uint64_t)sb.st_size == file->size);
		int fd = open(path, O_RDONLY);
		uint8_t *want = malloc(file->size + 1);
		assert_int_equal(pread(fd, want, file->size, 0), (ssize_t)file->size);
		close(fd);
		/* Format 3 on: the file digest is the SHA-256 of its chunks'
		 * SHA-256s, recomputed here from the bytes. */
		/* 5 only for what 4 cannot hold (manifest.h) */
		assert_int_equal(m->format, m->nmeta || m->has_sig ?
				 DCR_MANIFEST_FORMAT : DCR_MANIFEST_FORMAT_PLAIN);
		uint8_t h[DCR_HASH_LEN];
		uint8_t *list = malloc(file->nchunks * DCR_HASH_LEN + 1);
		for (uint64_t c = 0; c < file->nchunks; c++)
			dcr_sha256(want + c * m->chunk_size,
				   dcr_chunk_len(file->size, m->chunk_size, c),
				   list + c * DCR_HASH_LEN);
		dcr_sha256(list, file->nchunks * DCR_HASH_LEN, h);
		free(list);
		assert_memory_equal(h, file->sha256, DCR_HASH_LEN);
		for (uint64_t c = 0; c < file->nchunks; c++) {
			uint32_t len = dcr_chunk_len(file->size, m->chunk_size, c);
			oracle_chunk(f, v, i, c, buf, codec);
			assert_memory_equal(buf, want + c * m->chunk_size, len);
		}
		free(want);
	}
	free(buf);
	dcr_codec_free(codec);
}

static uint64_t commit(struct fx *f, int full, struct dcr_commit_result *res)
{
	struct dcr_commit_result r;
	uint64_t parent = f->nver;
	struct dcr_commit_opts o = {
		.parent = parent,
		.parent_manifest = parent ? &f->man[parent] : NULL,
		.parent_dir = f->par,
		.stage_dir = f->stage,
		.full = full,
		.chunk_size = CS,
		.jobs = 3,
		.pack_target = 3 * CS, /* many packs, to exercise sealing */
		.allow_unchanged = true, /* some steps commit the same tree */
	};
	sh("rm -rf '%s' && mkdir -p '%s'", f->stage, f->stage);
	assert_int_equal(dcr_commit(f->st, f->src, &o, res ? res : &r), 0);
	uint64_t v = (res ? res : &r)->version;
	assert_true(v == parent + 1);
	assert_int_equal(dcr_store_get_manifest(f->st, v, &f->man[v]), 0);
	if (parent)
		assert_int_equal(dcr_manifest_check_parent(&f->man[v], &f->man[parent]), 0);
	/* The stage becomes the next parent tree, as dcrfs-commit does. */
	sh("rm -rf '%s' && mv '%s' '%s'", f->par, f->stage, f->par);
	f->nver = v;
	verify(f, v, f->src);
	return v;
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		p[i] = (uint8_t)(x >> 24);
	}
}

static void test_chain(void **state)
{
	struct fx *f = *state;
	struct dcr_commit_result res;
	size_t big = 10 * CS + 123;
	uint8_t *a = malloc(big), *b = malloc(3 * CS);

	/* v1: nested dirs, an empty file, a file of exactly one chunk. */
	sh("mkdir -p '%s/sub/deeper' '%s/emptydir'", f->src, f->src);
	fill(a, big, 1);
	write_file(f->src, "model.bin", a, big);
	fill(b, CS, 2);
	write_file(f->src, "sub/one_chunk", b, CS);
	write_file(f->src, "sub/deeper/empty", b, 0);
	write_file(f->src, "small", (const uint8_t *)"tiny", 4);
	commit(f, 0, &res);
	assert_true(res.chunks_full == 10 + 1 + 1 + 1);
	assert_true(res.chunks_same == 0 && res.chunks_delta == 0);
	assert_true(res.files == 4 && res.dirs == 3);

	/* v2: identical tree: no frames at all. */
	commit(f, 0, &res);
	assert_true(res.chunks_same == 13 && res.chunks_delta == 0 && res.chunks_full == 0);
	assert_true(res.packs == 0 && res.bytes_packed == 0);

	/* v3: sparse changes in two chunks, including the short last one. */
	a[5 * CS + 7] ^= 1;
	a[big - 1] ^= 0x80;
	write_file(f->src, "model.bin", a, big);
	commit(f, 0, &res);
	assert_true(res.chunks_delta == 2 && res.chunks_same == 11);

	/* v4: resized file (full), removed file, added file. */
	fill(b, 3 * CS, 3);
	write_file(f->src, "sub/one_chunk", b, 3 * CS);
	sh("rm '%s/small'", f->src);
	write_file(f->src, "added", b, 100);
	commit(f, 0, &res);
	assert_true(res.chunks_full == 3 + 1);

	/* v5: every byte of the big file changed (full frames win or deltas; both verify). */
	fill(a, big, 9);
	write_file(f->src, "model.bin", a, big);
	commit(f, 0, &res);
	assert_true(res.chunks_same == 4 && res.chunks_delta + res.chunks_full == 11);

	/* v6: --full makes an anchor: every chunk full even if unchanged. */
	commit(f, 1, &res);
	assert_true(res.chunks_same == 0 && res.chunks_delta == 0 && res.chunks_full == 15);

	/* Old versions still materialize, every chunk verified by its hash. */
	assert_int_equal(dcr_manifest_find(&f->man[1], "small"), 2);
	struct dcr_codec *codec = dcr_codec_new(0);
	uint8_t *buf = malloc(CS);
	for (uint64_t v = 1; v <= f->nver; v++)
		for (uint32_t i = 0; i < f->man[v].nfiles; i++)
			for (uint64_t c = 0; c < f->man[v].files[i].nchunks; c++)
				oracle_chunk(f, v, i, c, buf, codec);
	free(buf);
	dcr_codec_free(codec);
	free(a);
	free(b);
}

static void test_rejects_special_files(void **state)
{
	struct fx *f = *state;
	struct dcr_commit_result res;
	struct dcr_commit_opts o = { .chunk_size = CS };
	uint64_t latest;

	write_file(f->src, "ok", (const uint8_t *)"x", 1);
	sh("ln -s ok '%s/link'", f->src);
	assert_int_equal(dcr_commit(f->st, f->src, &o, &res), -EINVAL);
	sh("rm '%s/link' && mkfifo '%s/fifo'", f->src, f->src);
	assert_int_equal(dcr_commit(f->st, f->src, &o, &res), -EINVAL);
	/* Nothing was published. */
	assert_int_equal(dcr_store_latest(f->st, &latest), 0);
	assert_true(latest == 0);
	char missing[128];
	snprintf(missing, sizeof(missing), "%s/nope", f->root);
	assert_int_equal(dcr_commit(f->st, missing, &o, &res), -ENOENT);
}

static void test_empty_tree(void **state)
{
	struct fx *f = *state;
	struct dcr_commit_result res;
	struct dcr_commit_opts o = { .chunk_size = CS };
	uint64_t latest;

	/* Directories only: refused, nothing published. */
	sh("mkdir -p '%s/a/b'", f->src);
	assert_int_equal(dcr_commit(f->st, f->src, &o, &res), -ENODATA);
	assert_int_equal(dcr_store_latest(f->st, &latest), 0);
	assert_true(latest == 0);
	o.allow_empty = true;
	assert_int_equal(dcr_commit(f->st, f->src, &o, &res), 0);
	assert_true(res.version == 1 && res.files == 0 && res.dirs == 2);
}

static void test_stale_parent_tree(void **state)
{
	struct fx *f = *state;
	uint8_t *a = malloc(4 * CS);

	fill(a, 4 * CS, 5);
	write_file(f->src, "w", a, 4 * CS);
	commit(f, 0, NULL);
	/* Corrupt the committer's copy of the parent, then change the source. */
	a[0] ^= 1;
	write_file(f->par, "w", a, 4 * CS);
	a[1] ^= 1;
	write_file(f->src, "w", a, 4 * CS);
	struct dcr_commit_result res;
	struct dcr_commit_opts o = {
		.parent = 1, .parent_manifest = &f->man[1], .parent_dir = f->par,
		.chunk_size = CS,
	};
	assert_int_equal(dcr_commit(f->st, f->src, &o, &res), -ESTALE);
	uint64_t latest;
	assert_int_equal(dcr_store_latest(f->st, &latest), 0);
	assert_true(latest == 1);
	free(a);
}

static void test_lost_race_takes_next_number(void **state)
{
	struct fx *f = *state;
	struct dcr_commit_result res;

	write_file(f->src, "w", (const uint8_t *)"abc", 3);
	commit(f, 0, NULL);
	/* Another committer publishes 2 with the same parent meanwhile. */
	assert_int_equal(dcr_store_put(f->st, "versions/0000000002", "x", 1, DCR_PUT_IF_ABSENT), 0);
	write_file(f->src, "w", (const uint8_t *)"abd", 3);
	struct dcr_commit_opts o = {
		.parent = 1, .parent_manifest = &f->man[1], .parent_dir = f->par,
		.chunk_size = CS,
	};
	assert_int_equal(dcr_commit(f->st, f->src, &o, &res), 0);
	assert_true(res.version == 3);
	struct dcr_manifest m;
	assert_int_equal(dcr_store_get_manifest(f->st, 3, &m), 0);
	assert_true(m.parent == 1);
	dcr_manifest_free(&m);
}

/* The encodings of every float format the guard knows, edge values included. */
static void test_nonfinite_encodings(void **state)
{
	static const uint16_t bf16[] = { 0x7f80, 0xff80, 0x7fc0, 0xffff, 0x7f81, /* non-finite */
					 0x7f7f, 0xff7f, 0x0000, 0x8000, 0x3f80, 0x0001 };
	static const uint16_t f16[] = { 0x7c00, 0xfc00, 0x7e00, 0x7c01, /* non-finite */
					0x7bff, 0xfbff, 0x0000, 0x3c00, 0x03ff };
	static const uint32_t f32[] = { 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001,
					0x7f7fffff, 0x00000000, 0x3f800000, 0x807fffff };
	static const uint64_t f64[] = { UINT64_C(0x7ff0000000000000), UINT64_C(0xfff8000000000000),
					UINT64_C(0x7fefffffffffffff), UINT64_C(0x3ff0000000000000), 0 };
	/* e4m3fn: only S.1111.111 is NaN; S.1111.110 is 448, no Inf exists */
	static const uint8_t e4m3[] = { 0x7f, 0xff, 0x7e, 0xfe, 0x78, 0x00, 0x80, 0x01 };
	/* e5m2: exponent 11111 is Inf (mantissa 0) or NaN */
	static const uint8_t e5m2[] = { 0x7c, 0xfc, 0x7d, 0x7f, 0xff, 0x7b, 0xfb, 0x00, 0x3c };
	uint8_t odd[1 + sizeof(f32)];

	assert_int_equal(dcr_nonfinite_count(bf16, 11, DCR_FF_BF16), 5);
	assert_int_equal(dcr_nonfinite_count(f16, 9, DCR_FF_F16), 4);
	assert_int_equal(dcr_nonfinite_count(f32, 8, DCR_FF_F32), 4);
	assert_int_equal(dcr_nonfinite_count(f64, 5, DCR_FF_F64), 2);
	assert_int_equal(dcr_nonfinite_count(e4m3, 8, DCR_FF_F8_E4M3), 2);
	assert_int_equal(dcr_nonfinite_count(e5m2, 9, DCR_FF_F8_E5M2), 5);
	assert_int_equal(dcr_nonfinite_count(bf16, 11, DCR_FF_NONE), 0);
	/* Any alignment. */
	memcpy(odd + 1, f32, sizeof(f32));
	assert_int_equal(dcr_nonfinite_count(odd + 1, 8, DCR_FF_F32), 4);
	assert_int_equal(dcr_float_width(DCR_FF_F64), 8);
	/* Against the obvious per-element test, at every offset and length,
	 * with the SIMD count (64 bytes a step) and without. */
	uint8_t rnd[203];
	fill(rnd, sizeof(rnd), 9);
	/* Many exponents all ones: the byte pair (0xf8|r, 0x7f|r) makes a
	 * non-finite element of every format ending on it. */
	for (size_t i = 0; i + 1 < sizeof(rnd); i += 7)
		rnd[i] |= 0xf8, rnd[i + 1] |= 0x7f;
	for (int ff = DCR_FF_BF16; ff <= DCR_FF_F8_E5M2; ff++) {
		unsigned wd = dcr_float_width((enum dcr_float_fmt)ff);
		for (size_t off = 0; off < 9; off++) {
			size_t ne = (sizeof(rnd) - off) / wd;
			uint64_t want = 0;
			for (size_t e = 0; e < ne; e++)
				want += dcr_nonfinite_count(rnd + off + e * wd, 1,
							    (enum dcr_float_fmt)ff);
			assert_true(want > 0);
			for (int simd = 1; simd >= 0; simd--) {
				dcr_ent_set_simd(simd);
				assert_int_equal(dcr_nonfinite_count(rnd + off, ne,
								     (enum dcr_float_fmt)ff), want);
			}
			dcr_ent_set_simd(1);
		}
	}
	assert_int_equal(dcr_float_width(DCR_FF_F8_E4M3), 1);
}

/*
 * A safetensors file whose BF16 tensor "w" starts at an odd file offset
 * (after a 3-byte U8 tensor), so its elements straddle chunk boundaries,
 * followed by an F8_E4M3 tensor "e" holding 448 (finite) and an F64 "d".
 * Returns its length; @w_off gets the file offset of "w".
 */
static size_t st_build(uint8_t *buf, size_t cap, size_t nw, uint64_t *w_off)
{
	char hdr[512];
	int n = snprintf(hdr, sizeof(hdr),
			 "{\"pad\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
			 "\"w\":{\"dtype\":\"BF16\",\"shape\":[%zu],\"data_offsets\":[3,%zu]},"
			 "\"e\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[%zu,%zu]},"
			 "\"d\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[%zu,%zu]}}",
			 nw, 3 + 2 * nw, 3 + 2 * nw, 7 + 2 * nw, 7 + 2 * nw, 23 + 2 * nw);
	while (n % 8)
		hdr[n++] = ' ';
	size_t data0 = 8 + (size_t)n, len = data0 + 23 + 2 * nw;
	assert_true(len <= cap);
	dcr_put_le64(buf, (uint64_t)n);
	memcpy(buf + 8, hdr, (size_t)n);
	buf[data0] = 1, buf[data0 + 1] = 2, buf[data0 + 2] = 0xff;
	for (size_t i = 0; i < nw; i++) /* finite values, some large */
		dcr_put_le16(buf + data0 + 3 + 2 * i, (uint16_t)(0x3f00 + (i * 37 % 0x4080)));
	memcpy(buf + data0 + 3 + 2 * nw, "\x7e\xfe\x00\x01", 4);
	double d[2] = { 1.5, -1e300 };
	memcpy(buf + data0 + 7 + 2 * nw, d, sizeof(d));
	*w_off = data0 + 3;
	return len;
}

static int commit_opts(struct fx *f, bool allow, struct dcr_commit_result *res)
{
	struct dcr_commit_opts o = {
		.parent = f->nver, .parent_manifest = f->nver ? &f->man[f->nver] : NULL,
		.parent_dir = f->par, .chunk_size = CS, .jobs = 2,
		.allow_nonfinite = allow,
	};
	return dcr_commit(f->st, f->src, &o, res);
}

/*
 * NaN and Inf stop a commit before anything is published (in a first
 * version and in a step, in an element inside a chunk and in one that
 * straddles two chunks, in every format), allow_nonfinite commits them,
 * and finite extremes (bf16 max, e4m3fn 448) are not refused.
 */
static void test_refuses_nonfinite(void **state)
{
	struct fx *f = *state;
	size_t nw = 3 * CS / 2 + 100, cap = 4 * CS;
	uint8_t *a = calloc(1, cap);
	uint64_t w, latest;
	struct dcr_commit_result res;
	size_t len = st_build(a, cap, nw, &w);

	/* e4m3fn 448 and bf16 max are finite: version 1 commits. */
	dcr_put_le16(a + w + 2 * 10, 0x7f7f);
	write_file(f->src, "m.safetensors", a, len);
	commit(f, 0, NULL);

	/* An Inf inside chunk 1 and a NaN straddling the chunk 0/1 edge. */
	uint64_t edge = w + ((CS - 1 - w) / 2) * 2;
	assert_true(edge == CS - 1); /* the element is cut by the edge */
	dcr_put_le16(a + edge, 0xffc1);
	dcr_put_le16(a + CS + 501, 0x7f80);
	write_file(f->src, "m.safetensors", a, len);
	assert_int_equal(commit_opts(f, false, &res), -EDOM);
	assert_int_equal(dcr_store_latest(f->st, &latest), 0);
	assert_true(latest == 1);
	/* Only the element cut by the edge: no chunk holds all of it. */
	dcr_put_le16(a + CS + 501, 0x3f80);
	write_file(f->src, "m.safetensors", a, len);
	assert_int_equal(commit_opts(f, false, &res), -EDOM);

	/* Each format, in a step: e4m3fn NaN, f64 Inf. */
	dcr_put_le16(a + edge, 0x3f80);
	a[w + 2 * nw + 2] = 0x7f;
	write_file(f->src, "m.safetensors", a, len);
	assert_int_equal(commit_opts(f, false, &res), -EDOM);
	a[w + 2 * nw + 2] = 0x00;
	dcr_put_le64(a + w + 2 * nw + 4 + 8, UINT64_C(0xfff0000000000000));
	write_file(f->src, "m.safetensors", a, len);
	assert_int_equal(commit_opts(f, false, &res), -EDOM);
	assert_int_equal(dcr_store_latest(f->st, &latest), 0);
	assert_true(latest == 1);

	/* The override publishes it, bit for bit. */
	assert_int_equal(commit_opts(f, true, &res), 0);
	assert_true(res.version == 2);
	assert_int_equal(dcr_store_get_manifest(f->st, 2, &f->man[2]), 0);
	f->nver = 2;
	verify(f, 2, f->src);
	/* A file that is not safetensors is not checked. */
	memset(a, 0xff, cap);
	write_file(f->src, "raw.bin", a, cap);
	sh("rm -rf '%s/m.safetensors'", f->src);
	sh("rm -rf '%s' && mkdir -p '%s'", f->par, f->par);
	assert_int_equal(commit_opts(f, false, &res), 0);
	free(a);
}


/* Rewrites file "big" in place, same size, once all of it has been read. */
struct rewrite {
	const char *path;
	uint64_t size;
	bool done;
};

static void rewrite_on_progress(void *arg, const struct dcr_commit_progress *p)
{
	struct rewrite *rw = arg;

	if (rw->done || p->bytes_done < rw->size)
		return;
	rw->done = true;
	usleep(30000); /* past the filesystem's timestamp granularity */
	int fd = open(rw->path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "changed", 7, 100), 7);
	close(fd);
}

/*
 * issue 11 (a): a file overwritten in place at the same size while it is
 * committed fails the commit, naming it; nothing is published.
 */
static void test_file_changed_during_commit(void **state)
{
	struct fx *f = *state;
	size_t n = 8 * CS;
	uint8_t *a = malloc(n);
	char path[256];
	struct dcr_commit_result res;
	uint64_t latest;

	fill(a, n, 11);
	write_file(f->src, "big", a, n);
	snprintf(path, sizeof(path), "%s/big", f->src);
	struct rewrite rw = { .path = path, .size = n };
	struct dcr_commit_opts o = {
		.chunk_size = CS, .jobs = 2,
		.progress = rewrite_on_progress, .progress_arg = &rw,
	};
	assert_int_equal(dcr_commit(f->st, f->src, &o, &res), -EAGAIN);
	assert_true(rw.done);
	assert_int_equal(dcr_store_latest(f->st, &latest), 0);
	assert_true(latest == 0);
	free(a);
}

/*
 * A store that acknowledges puts of packs without keeping them (mode
 * LIE_PACKS), or answers the next @count puts of manifests wrongly:
 * 0 without storing (LIE_MANIFEST) or -EIO after storing
 * (APPLIED_FAIL); reads of manifests fail with -EIO if @get_fails.
 */
enum lie { LIE_PACKS, LIE_MANIFEST, APPLIED_FAIL };
struct lying {
	struct dcr_store base;
	struct dcr_store *real;
	enum lie mode;
	int count;
	bool get_fails;
};

static int lying_get(struct dcr_store *st, const char *key, uint64_t off,
		     uint64_t len, int64_t deadline, struct dcr_buf *out)
{
	struct lying *l = (struct lying *)st;

	if (l->get_fails && !strncmp(key, "versions/", 9))
		return -EIO;
	return dcr_store_get_within(l->real, key, off, len, deadline, out);
}

static int lying_put(struct dcr_store *st, const char *key, const void *data,
		     uint64_t len, int flags)
{
	struct lying *l = (struct lying *)st;

	if (l->mode == LIE_PACKS && !strncmp(key, "packs/", 6))
		return 0;
	if (l->mode != LIE_PACKS && !strncmp(key, "versions/", 9) && l->count) {
		l->count--;
		if (l->mode == LIE_MANIFEST)
			return 0;
		int ret = dcr_store_put(l->real, key, data, len, flags);
		return ret ? ret : -EIO;
	}
	return dcr_store_put(l->real, key, data, len, flags);
}

static int lying_head(struct dcr_store *st, const char *key, uint64_t *size)
{
	return dcr_store_head(((struct lying *)st)->real, key, size);
}

static int lying_list(struct dcr_store *st, const char *prefix, dcr_list_fn fn,
		      void *arg)
{
	return dcr_store_list(((struct lying *)st)->real, prefix, fn, arg);
}

static int lying_del(struct dcr_store *st, const char *key)
{
	return dcr_store_del(((struct lying *)st)->real, key);
}

static void lying_close(struct dcr_store *st)
{
	(void)st;
}

static const struct dcr_store_ops lying_ops = {
	.name = "lying",
	.get = lying_get,
	.put = lying_put,
	.head = lying_head,
	.list = lying_list,
	.del = lying_del,
	.close = lying_close,
};

/*
 * issue 11 (b): before the manifest's conditional create every pack it
 * names is confirmed to exist; a store that lost a pack gets no version.
 */
static void test_lost_pack_not_published(void **state)
{
	struct fx *f = *state;
	struct lying ls = { .base = { .ops = &lying_ops, .url = f->st->url },
			    .real = f->st };
	uint8_t *a = malloc(4 * CS);
	struct dcr_commit_result res;
	uint64_t latest;

	fill(a, 4 * CS, 12);
	write_file(f->src, "w", a, 4 * CS);
	struct dcr_commit_opts o = { .chunk_size = CS, .jobs = 2 };
	assert_int_equal(dcr_commit(&ls.base, f->src, &o, &res), -EIO);
	assert_int_equal(dcr_store_latest(f->st, &latest), 0);
	assert_true(latest == 0);
	/* The honest store publishes the same tree. */
	assert_int_equal(dcr_commit(f->st, f->src, &o, &res), 0);
	assert_true(res.version == 1);
	free(a);
}

/* Version @v of @f's store holds exactly the manifest @res describes. */
static void holds_manifest(struct fx *f, uint64_t v, const struct dcr_commit_result *res)
{
	struct dcr_manifest m;
	uint8_t h[DCR_HASH_LEN];
	char key[64];

	dcr_version_key(v, key, sizeof(key));
	assert_int_equal(dcr_store_fetch_manifest(f->st, key, v, &m, h), 0);
	assert_memory_equal(h, res->manifest_hash, DCR_HASH_LEN);
	dcr_manifest_free(&m);
}

/*
 * issue 23 (2): the manifest is read back after its conditional create,
 * so what a commit reports is true whatever the store answered: a 200
 * without the object kept is a put again (always: a failure, nothing
 * published); a put applied but answered with an error is success, not
 * a reason to publish the tree again as the next number; when the read
 * back fails too, -EINPROGRESS (it may be published), never "nothing".
 */
static void test_manifest_put_answers(void **state)
{
	struct fx *f = *state;
	struct lying ls = { .base = { .ops = &lying_ops, .url = f->st->url },
			    .real = f->st };
	uint8_t *a = malloc(2 * CS);
	struct dcr_commit_result res;
	struct dcr_commit_opts o = { .chunk_size = CS, .jobs = 2 };
	uint64_t latest;

	fill(a, 2 * CS, 21);
	/* A 200 without storing, once: put again; version 1 holds it. */
	write_file(f->src, "w", a, 2 * CS);
	ls.mode = LIE_MANIFEST, ls.count = 1;
	assert_int_equal(dcr_commit(&ls.base, f->src, &o, &res), 0);
	assert_true(res.version == 1 && ls.count == 0);
	holds_manifest(f, 1, &res);
	/* ... every time: a failure, and nothing is published. */
	a[7] ^= 1;
	write_file(f->src, "w", a, 2 * CS);
	ls.count = 1000;
	assert_int_equal(dcr_commit(&ls.base, f->src, &o, &res), -EIO);
	assert_int_equal(dcr_store_latest(f->st, &latest), 0);
	assert_true(latest == 1);
	/* Stored, then answered -EIO: version 2 is this commit's. */
	ls.mode = APPLIED_FAIL, ls.count = 1;
	assert_int_equal(dcr_commit(&ls.base, f->src, &o, &res), 0);
	assert_true(res.version == 2 && ls.count == 0);
	holds_manifest(f, 2, &res);
	assert_int_equal(dcr_store_latest(f->st, &latest), 0);
	assert_true(latest == 2);
	/* ... and the read-back fails: unknown, and said so. */
	a[8] ^= 1;
	write_file(f->src, "w", a, 2 * CS);
	ls.count = 1, ls.get_fails = true;
	assert_int_equal(dcr_commit(&ls.base, f->src, &o, &res), -EINPROGRESS);
	assert_int_equal(dcr_store_latest(f->st, &latest), 0);
	assert_true(latest == 3); /* it was published: "nothing" would be a lie */
	free(a);
}

/*
 * Memory sources: a file given as byte ranges (cut anywhere, empty ones
 * included) commits the same bytes as the file on disk, and the stage
 * copy holds them.
 */
static void test_memory_sources(void **state)
{
	struct fx *f = *state;
	size_t n = 5 * CS + 123;
	uint8_t *a = malloc(n);
	struct dcr_commit_result res;

	fill(a, n, 13);
	write_file(f->src, "m.bin", a, n);
	struct dcr_commit_range r[] = {
		{ a, 10 }, { a + 10, 0 }, { a + 10, CS + 7 }, { a + CS + 17, n - CS - 17 },
	};
	struct dcr_commit_source src[] = {
		{ .path = "sub/m.bin", .mode = 0644, .ranges = r, .nranges = 4 },
		{ .path = "sub", .dir = true, .mode = 0755 },
	};
	struct dcr_commit_opts o = { .chunk_size = CS, .jobs = 2, .stage_dir = f->stage };
	sh("rm -rf '%s' && mkdir -p '%s'", f->stage, f->stage);
	assert_int_equal(dcr_commit_sources(f->st, src, 2, "memory", &o, &res), 0);
	assert_true(res.version == 1 && res.files == 1 && res.dirs == 1 && res.staged);
	assert_int_equal(dcr_store_get_manifest(f->st, 1, &f->man[1]), 0);
	f->nver = 1;
	sh("mkdir -p '%s/sub' && cp '%s/m.bin' '%s/sub/m.bin' && rm '%s/m.bin'",
	   f->src, f->src, f->src, f->src);
	verify(f, 1, f->src);
	sh("cmp '%s/sub/m.bin' '%s/sub/m.bin'", f->src, f->stage);
	/* A path given twice is refused. */
	src[1] = src[0];
	assert_int_equal(dcr_commit_sources(f->st, src, 2, "memory", &o, &res), -EEXIST);
	free(a);
}

static int count_packs_cb(const char *key, const struct dcr_obj_info *info,
			  void *arg)
{
	(void)key;
	(void)info;
	++*(int *)arg;
	return 0;
}

static int count_packs(struct dcr_store *st)
{
	int n = 0;

	assert_int_equal(dcr_store_list(st, "packs/", count_packs_cb, &n), 0);
	return n;
}

/* One commit of f->src with the key @k and metadata @meta[0..nmeta);
 * the version's manifest into f->man. */
static int commit_signed(struct fx *f, const struct dcr_sign_key *k,
			 const struct dcr_meta *meta, uint32_t nmeta,
			 struct dcr_commit_result *res)
{
	uint64_t parent = f->nver;
	struct dcr_commit_opts o = {
		.parent = parent, .parent_manifest = parent ? &f->man[parent] : NULL,
		.parent_dir = f->par, .stage_dir = f->stage, .chunk_size = CS,
		.jobs = 2, .sign_key = k, .meta = meta, .nmeta = nmeta,
	};
	sh("rm -rf '%s' && mkdir -p '%s'", f->stage, f->stage);
	int ret = dcr_commit(f->st, f->src, &o, res);
	if (ret)
		return ret;
	assert_int_equal(dcr_store_get_manifest(f->st, res->version, &f->man[res->version]), 0);
	sh("rm -rf '%s' && mv '%s' '%s'", f->par, f->stage, f->par);
	f->nver = res->version;
	verify(f, res->version, f->src);
	return 0;
}

/*
 * Signed commits: the signature verifies for this store and number by
 * the key, binds the parent manifest's exact check, is made again for
 * the next number after a lost race; metadata goes in; a bad key or
 * metadata entry, or a store without an id, fails before any upload.
 */
static void test_signed_commit(void **state)
{
	struct fx *f = *state;
	char key[128], pub[136], id[DCR_KEYID_LEN + 1];
	struct dcr_sign_key *k;
	struct dcr_trust *t;
	struct dcr_store_info info;
	struct dcr_commit_result res;
	const struct dcr_meta meta[] = { { "step", "100" }, { "run", "a b" } };
	uint8_t zero[DCR_HASH_LEN] = { 0 };

	snprintf(key, sizeof(key), "%s/key", f->root);
	snprintf(pub, sizeof(pub), "%s.pub", key);
	assert_int_equal(dcr_sign_keygen(key, id), 0);
	assert_int_equal(dcr_sign_key_load(key, &k), 0);
	assert_int_equal(dcr_trust_load(pub, &t), 0);
	assert_int_equal(dcr_store_init(f->st, &info), 0);

	uint8_t *a = malloc(4 * CS);
	fill(a, 4 * CS, 3);
	write_file(f->src, "w", a, 4 * CS);
	assert_int_equal(commit_signed(f, k, meta, 2, &res), 0);
	const struct dcr_manifest *m = &f->man[1];
	assert_string_equal(res.signer, id);
	assert_true(m->format == DCR_MANIFEST_FORMAT && m->has_sig);
	assert_memory_equal(res.check, m->check, DCR_HASH_LEN);
	assert_memory_equal(m->sig.pub, dcr_sign_key_pub(k), DCR_SIG_PUB_LEN);
	assert_memory_equal(m->sig.parent_check, zero, DCR_HASH_LEN);
	assert_int_equal(dcr_manifest_sig_check(m, info.id, t), DCR_SIG_VALID);
	assert_int_equal(dcr_manifest_sig_check(m, "0123456789abcdef0123456789abcdef", t),
			 DCR_SIG_OTHER_STORE);
	assert_true(m->nmeta == 2);
	assert_string_equal(dcr_manifest_get_meta(m, "step"), "100");
	assert_string_equal(dcr_manifest_get_meta(m, "run"), "a b");

	/* a child binds its parent's exact manifest */
	a[5] ^= 1;
	write_file(f->src, "w", a, 4 * CS);
	assert_int_equal(commit_signed(f, k, NULL, 0, &res), 0);
	m = &f->man[2];
	assert_true(m->has_sig && m->nmeta == 0);
	assert_memory_equal(m->sig.parent_check, f->man[1].check, DCR_HASH_LEN);
	assert_int_equal(dcr_manifest_sig_check(m, info.id, t), DCR_SIG_VALID);

	/* another committer took 3: published and signed as 4 */
	assert_int_equal(dcr_store_put(f->st, "versions/0000000003", "x", 1,
				       DCR_PUT_IF_ABSENT), 0);
	a[6] ^= 1;
	write_file(f->src, "w", a, 4 * CS);
	assert_int_equal(commit_signed(f, k, NULL, 0, &res), 0);
	assert_true(res.version == 4 && f->man[4].version == 4 && f->man[4].parent == 2);
	assert_int_equal(dcr_manifest_sig_check(&f->man[4], info.id, t), DCR_SIG_VALID);
	assert_memory_equal(f->man[4].sig.parent_check, f->man[2].check, DCR_HASH_LEN);
	f->man[4].version = 3; /* bound to its number */
	assert_int_not_equal(dcr_manifest_sig_check(&f->man[4], info.id, t), DCR_SIG_VALID);
	f->man[4].version = 4;

	/* a bad metadata entry: nothing uploaded */
	int packs = count_packs(f->st);
	const struct dcr_meta bad[] = { { "no spaces", "x" } };
	a[7] ^= 1;
	write_file(f->src, "w", a, 4 * CS);
	assert_int_equal(commit_signed(f, k, bad, 1, &res), -EINVAL);
	assert_int_equal(count_packs(f->st), packs);

	/* a store without a marker has no id to sign for: nothing uploaded */
	assert_int_equal(dcr_store_del(f->st, DCR_STORE_MARKER), 0);
	assert_int_equal(dcr_store_identify(f->st, &info), 0);
	assert_true(info.legacy);
	assert_int_equal(commit_signed(f, k, NULL, 0, &res), -EINVAL);
	assert_int_equal(count_packs(f->st), packs);
	uint64_t latest;
	assert_int_equal(dcr_store_latest(f->st, &latest), 0);
	assert_true(latest == 4);
	/* unsigned, it goes on as before (format 4) */
	assert_int_equal(commit_signed(f, NULL, NULL, 0, &res), 0);
	assert_true(res.signer[0] == 0 && !f->man[5].has_sig);
	assert_int_equal(f->man[5].format, DCR_MANIFEST_FORMAT_PLAIN);
	free(a);
	dcr_trust_free(t);
	dcr_sign_key_free(k);
}

int main(void)
{
	dcr_log_set_level(DCR_LOG_ERR);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_chain, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rejects_special_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_empty_tree, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stale_parent_tree, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lost_race_takes_next_number, setup, teardown),
		cmocka_unit_test(test_nonfinite_encodings),
		cmocka_unit_test_setup_teardown(test_refuses_nonfinite, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_changed_during_commit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lost_pack_not_published, setup, teardown),
		cmocka_unit_test_setup_teardown(test_memory_sources, setup, teardown),
		cmocka_unit_test_setup_teardown(test_manifest_put_answers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_signed_commit, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
