/* SPDX-License-Identifier: MIT */
/* Unit tests for core/manifest.c: round trip, validation, hostile input. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "chunk.h"
#include "frame.h"
#include "common.h"
#include "layout.h"
#include "manifest.h"

static void set_file(struct dcr_file *f, const char *path, int type,
		     uint64_t size, uint32_t cs, uint32_t base)
{
	memset(f, 0, sizeof(*f));
	f->path = strdup(path);
	f->type = (uint8_t)type;
	f->mode = type == DCR_FT_DIR ? 0755 : 0644;
	f->size = size;
	f->mtime_ns = -5 + (int64_t)size; /* negative mtimes must survive */
	f->base = base;
	if (type == DCR_FT_DIR)
		return;
	f->nchunks = dcr_chunk_count(size, cs);
	f->chunks = calloc(f->nchunks ? f->nchunks : 1, sizeof(*f->chunks));
	for (uint64_t i = 0; i < f->nchunks; i++) {
		struct dcr_chunk_ref *r = &f->chunks[i];
		r->kind = base == DCR_NO_BASE ? DCR_CK_FULL : (uint8_t)(i % 3);
		if (r->kind != DCR_CK_SAME) {
			r->pack = (uint32_t)(i % 2);
			r->off = 8 + i * 1000;
			r->len = 100 + (uint32_t)i;
		}
		memset(r->hash, (int)(i + 1), DCR_HASH_LEN);
		memset(r->xxh, (int)(i + 0x41), DCR_XXH_LEN);
		if (r->kind != DCR_CK_SAME)
			memset(r->fhash, (int)(i + 0x81), DCR_HASH_LEN);
		f->sha256[i % DCR_HASH_LEN] = (uint8_t)i;
	}
}

/* A version 3 with parent 2: dirs, a nested file, an empty file. */
static void build(struct dcr_manifest *m)
{
	uint32_t cs = 4096;

	memset(m, 0, sizeof(*m));
	m->format = DCR_MANIFEST_FORMAT;
	m->version = 3;
	m->parent = 2;
	m->ctime_ns = 1700000000123456789;
	m->chunk_size = cs;
	m->npacks = 2;
	m->packs = calloc(2, DCR_HASH_LEN);
	m->packs[1][0] = 0xee;
	m->nfiles = 5;
	m->files = calloc(5, sizeof(*m->files));
	set_file(&m->files[0], "a", DCR_FT_DIR, 0, cs, DCR_NO_BASE);
	set_file(&m->files[1], "a/b", DCR_FT_DIR, 0, cs, DCR_NO_BASE);
	set_file(&m->files[2], "a/b/model.safetensors", DCR_FT_REG, 3 * 4096 + 17, cs, 2);
	set_file(&m->files[3], "empty", DCR_FT_REG, 0, cs, DCR_NO_BASE);
	set_file(&m->files[4], "z", DCR_FT_REG, 4096, cs, DCR_NO_BASE);
}

static void assert_same(const struct dcr_manifest *a, const struct dcr_manifest *b)
{
	assert_int_equal(a->format, b->format);
	assert_true(a->version == b->version);
	assert_true(a->parent == b->parent);
	assert_true(a->ctime_ns == b->ctime_ns);
	assert_int_equal(a->chunk_size, b->chunk_size);
	assert_int_equal(a->npacks, b->npacks);
	assert_memory_equal(a->packs, b->packs, (size_t)a->npacks * DCR_HASH_LEN);
	assert_int_equal(a->nfiles, b->nfiles);
	for (uint32_t i = 0; i < a->nfiles; i++) {
		const struct dcr_file *x = &a->files[i], *y = &b->files[i];
		assert_string_equal(x->path, y->path);
		assert_int_equal(x->type, y->type);
		assert_int_equal(x->mode, y->mode);
		assert_true(x->size == y->size);
		assert_true(x->mtime_ns == y->mtime_ns);
		assert_int_equal(x->base, y->base);
		assert_true(x->nchunks == y->nchunks);
		if (x->type == DCR_FT_REG)
			assert_memory_equal(x->sha256, y->sha256, DCR_HASH_LEN);
		for (uint64_t c = 0; c < x->nchunks; c++) {
			assert_int_equal(x->chunks[c].kind, y->chunks[c].kind);
			assert_memory_equal(x->chunks[c].hash, y->chunks[c].hash, DCR_HASH_LEN);
			assert_memory_equal(x->chunks[c].xxh, y->chunks[c].xxh, DCR_XXH_LEN);
			assert_memory_equal(x->chunks[c].fhash, y->chunks[c].fhash, DCR_HASH_LEN);
			if (x->chunks[c].kind != DCR_CK_SAME) {
				assert_int_equal(x->chunks[c].pack, y->chunks[c].pack);
				assert_true(x->chunks[c].off == y->chunks[c].off);
				assert_int_equal(x->chunks[c].len, y->chunks[c].len);
			}
		}
	}
}

static void test_roundtrip(void **state)
{
	struct dcr_manifest m, d;
	struct dcr_buf b;

	build(&m);
	assert_int_equal(dcr_manifest_validate(&m), 0);
	dcr_buf_init(&b, 1 << 20);
	assert_int_equal(dcr_manifest_encode(&m, &b), 0);
	assert_int_equal(dcr_manifest_decode(b.data, b.len, &d), 0);
	assert_same(&m, &d);
	assert_int_equal(dcr_manifest_find(&d, "a/b/model.safetensors"), 2);
	assert_int_equal(dcr_manifest_find(&d, "empty"), 3);
	assert_int_equal(dcr_manifest_find(&d, "nope"), -1);
	dcr_manifest_free(&d);
	dcr_manifest_free(&m);
	dcr_buf_free(&b);
}

/*
 * Every path is found where it is, by its first @len bytes with find_n,
 * within the first n files only; absent paths (before the first, between
 * two, after the last, a prefix of one) are -1. The search is core/common.h
 * dcr_partition_point, which the version arrays' helpers share.
 */
static void test_find(void **state)
{
	static const char *absent[] = { "", "0", "a/", "a/b/", "b", "empty0", "zz", "~" };
	struct dcr_manifest m;

	build(&m);
	for (uint32_t i = 0; i < m.nfiles; i++) {
		const char *p = m.files[i].path;
		assert_int_equal(dcr_manifest_find(&m, p), i);
		assert_int_equal(dcr_manifest_find_n(&m, m.nfiles, p, strlen(p)), i);
		assert_int_equal(dcr_manifest_find_n(&m, i, p, strlen(p)), -1);
		assert_int_equal(dcr_manifest_find_n(&m, i + 1, p, strlen(p)), i);
	}
	/* the first bytes of a longer string */
	assert_int_equal(dcr_manifest_find_n(&m, m.nfiles, "a/bX", 3), 1);
	assert_int_equal(dcr_manifest_find_n(&m, m.nfiles, "emptyz", 5), 3);
	for (size_t i = 0; i < sizeof(absent) / sizeof(*absent); i++)
		assert_int_equal(dcr_manifest_find(&m, absent[i]), -1);
	/* the helpers over it: keys 10, 20, 20, 30; extents [0,4) [4,6) [9,10) */
	const uint64_t k[] = { 10, 20, 20, 30 };
	const uint64_t ext[][2] = { { 0, 4 }, { 4, 2 }, { 9, 1 } };
	assert_int_equal(dcr_lower_bound_u64(k, 4, sizeof(*k), 0, 5), 0);
	assert_int_equal(dcr_lower_bound_u64(k, 4, sizeof(*k), 0, 10), 0);
	assert_int_equal(dcr_lower_bound_u64(k, 4, sizeof(*k), 0, 20), 1);
	assert_int_equal(dcr_lower_bound_u64(k, 4, sizeof(*k), 0, 21), 3);
	assert_int_equal(dcr_lower_bound_u64(k, 4, sizeof(*k), 0, 31), 4);
	assert_int_equal(dcr_lower_bound_u64(k, 0, sizeof(*k), 0, 1), 0);
	assert_int_equal(dcr_first_ending_after(ext, 3, sizeof(*ext), 0, 8, 0), 0);
	assert_int_equal(dcr_first_ending_after(ext, 3, sizeof(*ext), 0, 8, 4), 1);
	assert_int_equal(dcr_first_ending_after(ext, 3, sizeof(*ext), 0, 8, 6), 2);
	assert_int_equal(dcr_first_ending_after(ext, 3, sizeof(*ext), 0, 8, 9), 2);
	assert_int_equal(dcr_first_ending_after(ext, 3, sizeof(*ext), 0, 8, 10), 3);
	dcr_manifest_free(&m);
	(void)state;
}

/*
 * Format 1 (what dcrfs-commit wrote before check values): still encoded
 * on request and decoded, without frame hashes or check values; a reader
 * of format 2 does not accept a format it does not know.
 */
/* Encode @m in format @fmt into @b (initialised here), check the header
 * says so, and decode it into @d, which must say so too. */
static void roundtrip_format(struct dcr_manifest *m, uint32_t fmt,
			     struct dcr_buf *b, struct dcr_manifest *d)
{
	m->format = fmt;
	dcr_buf_init(b, 1 << 20);
	assert_int_equal(dcr_manifest_encode(m, b), 0);
	assert_int_equal(dcr_get_le32(b->data + 8), fmt);
	assert_int_equal(dcr_manifest_decode(b->data, b->len, d), 0);
	assert_int_equal(d->format, fmt);
}

static void test_format1(void **state)
{
	struct dcr_manifest m, d;
	struct dcr_buf b;

	build(&m);
	roundtrip_format(&m, 1, &b, &d);
	for (uint64_t c = 0; c < d.files[2].nchunks; c++) {
		static const uint8_t zero[DCR_HASH_LEN];
		assert_memory_equal(d.files[2].chunks[c].xxh, zero, DCR_XXH_LEN);
		assert_memory_equal(d.files[2].chunks[c].fhash, zero, DCR_HASH_LEN);
		assert_memory_equal(d.files[2].chunks[c].hash,
				    m.files[2].chunks[c].hash, DCR_HASH_LEN);
	}
	/* A format-2 manifest is larger by its check values. */
	{
		struct dcr_buf b2;
		dcr_buf_init(&b2, 1 << 20);
		m.format = 0; /* the default: the plain format */
		assert_int_equal(dcr_manifest_encode(&m, &b2), 0);
		assert_int_equal(dcr_get_le32(b2.data + 8),
				 DCR_MANIFEST_FORMAT_PLAIN);
		dcr_buf_free(&b2);
	}
	/* A newer format than this reader's: told apart from damage. */
	{
		struct dcr_buf b3;
		uint8_t *h;

		dcr_buf_init(&b3, 1 << 20);
		m.format = 0;
		assert_int_equal(dcr_manifest_encode(&m, &b3), 0);
		h = b3.data;
		dcr_put_le32(h + 8, DCR_MANIFEST_FORMAT + 1);
		dcr_sha256(h, b3.len - DCR_HASH_LEN, h + b3.len - DCR_HASH_LEN);
		dcr_manifest_free(&d);
		assert_int_equal(dcr_manifest_decode(b3.data, b3.len, &d),
				 -EPROTONOSUPPORT);
		assert_true(dcr_manifest_same_meaning(3, 4));
		assert_true(dcr_manifest_same_meaning(4, 3));
		assert_false(dcr_manifest_same_meaning(2, 3));
		assert_false(dcr_manifest_same_meaning(1, 4));
		h[20] ^= 1; /* and damage is still damage */
		assert_int_equal(dcr_manifest_decode(b3.data, b3.len, &d), -EBADMSG);
		dcr_buf_free(&b3);
	}
	m.format = DCR_MANIFEST_FORMAT + 1;
	assert_int_equal(dcr_manifest_validate(&m), -EBADMSG);
	dcr_manifest_free(&d);
	dcr_manifest_free(&m);
	dcr_buf_free(&b);
}

/*
 * Format 3's file digest is the SHA-256 of the chunk hashes in order; an
 * empty file's is the SHA-256 of no bytes; and format 2, with the same
 * bytes, still encodes and decodes.
 */
static void test_file_digest(void **state)
{
	struct dcr_manifest m, d;
	struct dcr_buf b;
	uint8_t h[DCR_HASH_LEN], want[DCR_HASH_LEN], list[4 * DCR_HASH_LEN];

	build(&m);
	const struct dcr_file *f = &m.files[2];
	assert_int_equal(f->nchunks, 4);
	for (uint64_t c = 0; c < f->nchunks; c++)
		memcpy(list + c * DCR_HASH_LEN, f->chunks[c].hash, DCR_HASH_LEN);
	dcr_sha256(list, sizeof(list), want);
	assert_int_equal(dcr_file_digest(f, h), 0);
	assert_memory_equal(h, want, DCR_HASH_LEN);
	/* Order matters: swapping two chunks changes the digest. */
	m.files[2].chunks[0].hash[0] ^= 1;
	assert_int_equal(dcr_file_digest(f, h), 0);
	assert_memory_not_equal(h, want, DCR_HASH_LEN);
	dcr_sha256("", 0, want);
	assert_int_equal(dcr_file_digest(&m.files[3], h), 0);
	assert_memory_equal(h, want, DCR_HASH_LEN);

	roundtrip_format(&m, 2, &b, &d);
	assert_memory_equal(d.files[2].chunks[1].xxh, m.files[2].chunks[1].xxh, DCR_XXH_LEN);
	dcr_manifest_free(&d);
	dcr_manifest_free(&m);
	dcr_buf_free(&b);
}

/* dcr_file_hasher: from the bytes, fed in odd pieces, per format. */
static void test_file_hasher(void **state)
{
	const uint32_t cs = 4096;
	const size_t len = 2 * cs + 1234;
	uint8_t *data = malloc(len), h[DCR_HASH_LEN], want[DCR_HASH_LEN];
	uint8_t list[3 * DCR_HASH_LEN];
	struct dcr_file_hasher *fh;

	(void)state;
	for (size_t i = 0; i < len; i++)
		data[i] = (uint8_t)(i * 131 + (i >> 9));
	for (uint32_t fmt = 1; fmt <= DCR_MANIFEST_FORMAT; fmt++) {
		if (fmt < 3) {
			dcr_sha256(data, len, want);
		} else {
			for (size_t c = 0; c < 3; c++)
				dcr_sha256(data + c * cs,
					   DCR_MIN((size_t)cs, len - c * cs),
					   list + c * DCR_HASH_LEN);
			dcr_sha256(list, sizeof(list), want);
		}
		fh = dcr_file_hasher_new(fmt, cs);
		assert_non_null(fh);
		for (int round = 0; round < 2; round++) { /* reset by final */
			for (size_t off = 0, step = 1; off < len; step = step * 3 + 7) {
				size_t n = DCR_MIN(step, len - off);
				dcr_file_hasher_update(fh, data + off, n);
				off += n;
			}
			dcr_file_hasher_final(fh, h);
			assert_memory_equal(h, want, DCR_HASH_LEN);
		}
		/* an empty file: the SHA-256 of no bytes in every format */
		dcr_file_hasher_final(fh, h);
		dcr_sha256("", 0, want);
		assert_memory_equal(h, want, DCR_HASH_LEN);
		dcr_file_hasher_free(fh);
	}
	assert_string_equal(dcr_file_digest_kind(2), "sha256");
	assert_string_equal(dcr_file_digest_kind(3), "sha256-of-chunks");
	free(data);
}

static void test_empty_version(void **state)
{
	struct dcr_manifest m = { .version = 1, .chunk_size = DCR_CHUNK_DEFAULT }, d;
	struct dcr_buf b;

	dcr_buf_init(&b, 1 << 20);
	assert_int_equal(dcr_manifest_encode(&m, &b), 0);
	assert_int_equal(dcr_manifest_decode(b.data, b.len, &d), 0);
	assert_int_equal(d.nfiles, 0);
	dcr_manifest_free(&d);
	dcr_buf_free(&b);
}

static void test_validate_rejects(void **state)
{
	struct dcr_manifest m;

	build(&m);
	/* Unsorted paths. */
	char *tmp = m.files[3].path;
	m.files[3].path = m.files[4].path;
	m.files[4].path = tmp;
	assert_int_equal(dcr_manifest_validate(&m), -EBADMSG);
	m.files[4].path = m.files[3].path;
	m.files[3].path = tmp;
	/* Missing parent directory. */
	m.files[1].type = DCR_FT_REG;
	assert_int_equal(dcr_manifest_validate(&m), -EBADMSG);
	m.files[1].type = DCR_FT_DIR;
	/* Pack index out of range. */
	m.files[2].chunks[1].pack = 7;
	assert_int_equal(dcr_manifest_validate(&m), -EBADMSG);
	m.files[2].chunks[1].pack = 1;
	/* SAME without a base. */
	m.files[2].base = DCR_NO_BASE;
	assert_int_equal(dcr_manifest_validate(&m), -EBADMSG);
	m.files[2].base = 2;
	/* Chunk size not a power of two. */
	m.chunk_size = 5000;
	assert_int_equal(dcr_manifest_validate(&m), -EBADMSG);
	m.chunk_size = 4096;
	/* Parent not older than the version. */
	m.parent = 3;
	assert_int_equal(dcr_manifest_validate(&m), -EBADMSG);
	m.parent = 2;
	assert_int_equal(dcr_manifest_validate(&m), 0);
	dcr_manifest_free(&m);
}

static void test_paths(void **state)
{
	static const char *const bad[] = { "", "/abs", "a/", "a//b", ".", "..",
					   "a/../b", "a/./b", "./a", "a/.." };
	static const char *const good[] = { "a", "a/b", ".hidden", "a/..b", "x.y/z" };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_false(dcr_path_valid(bad[i], strlen(bad[i])));
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		assert_true(dcr_path_valid(good[i], strlen(good[i])));
	assert_false(dcr_path_valid("a\0b", 3));
}

static void test_hostile_bytes(void **state)
{
	struct dcr_manifest m, d;
	struct dcr_buf b;

	build(&m);
	dcr_buf_init(&b, 1 << 20);
	assert_int_equal(dcr_manifest_encode(&m, &b), 0);
	uint8_t *bad = malloc(b.len);
	/* Any single flipped byte is caught (checksum over header and body). */
	for (size_t i = 0; i < b.len; i++) {
		memcpy(bad, b.data, b.len);
		bad[i] ^= 0x01;
		assert_int_equal(dcr_manifest_decode(bad, b.len, &d), -EBADMSG);
	}
	/* Every truncation is rejected. */
	for (size_t n = 0; n < b.len; n++)
		assert_int_equal(dcr_manifest_decode(b.data, n, &d), -EBADMSG);
	free(bad);
	dcr_manifest_free(&m);
	dcr_buf_free(&b);
}

static void test_check_parent(void **state)
{
	struct dcr_manifest m, p;

	build(&m);
	build(&p);
	p.version = 2;
	p.parent = 1;
	/* The parent's file 2 has the same size and SAME chunks' hashes. */
	assert_int_equal(dcr_manifest_check_parent(&m, &p), 0);
	p.files[2].chunks[0].hash[0] ^= 1; /* chunk 0 is SAME in m */
	assert_int_equal(dcr_manifest_check_parent(&m, &p), -EBADMSG);
	p.files[2].chunks[0].hash[0] ^= 1;
	/* ... and carries the parent's check value, in format 2. */
	p.files[2].chunks[0].xxh[5] ^= 1;
	assert_int_equal(dcr_manifest_check_parent(&m, &p), -EBADMSG);
	p.format = 1; /* a format 1 parent has none to compare */
	assert_int_equal(dcr_manifest_check_parent(&m, &p), 0);
	p.format = DCR_MANIFEST_FORMAT;
	p.files[2].chunks[0].xxh[5] ^= 1;
	p.files[2].size++;
	assert_int_equal(dcr_manifest_check_parent(&m, &p), -EBADMSG);
	p.files[2].size--;
	m.files[2].base = 40;
	assert_int_equal(dcr_manifest_check_parent(&m, &p), -EBADMSG);
	dcr_manifest_free(&m);
	dcr_manifest_free(&p);
}

static void test_keys(void **state)
{
	char k[64];
	uint64_t v;

	dcr_version_key(42, k, sizeof(k));
	assert_string_equal(k, "versions/0000000042");
	assert_int_equal(dcr_version_from_key(k, &v), 0);
	assert_true(v == 42);
	assert_int_equal(dcr_version_from_key("versions/42", &v), -EINVAL);
	assert_int_equal(dcr_version_from_key("versions/0000000000", &v), -EINVAL);
	assert_int_equal(dcr_version_from_key("versions/00000000x1", &v), -EINVAL);
}

/* One cap for every layer: manifests, version keys (and the fs inodes). */
static void test_version_cap(void **state)
{
	struct dcr_manifest m = { .chunk_size = DCR_CHUNK_DEFAULT }, d;
	struct dcr_buf b;
	char k[64];
	uint64_t v;

	assert_true(DCR_VERSION_MAX == UINT64_C(4294967295));
	/* The newest version there can be, and its parent, round-trip. */
	m.version = DCR_VERSION_MAX;
	m.parent = DCR_VERSION_MAX - 1;
	assert_int_equal(dcr_manifest_validate(&m), 0);
	dcr_buf_init(&b, 1 << 20);
	assert_int_equal(dcr_manifest_encode(&m, &b), 0);
	assert_int_equal(dcr_manifest_decode(b.data, b.len, &d), 0);
	assert_true(d.version == DCR_VERSION_MAX);
	assert_true(d.parent == DCR_VERSION_MAX - 1);
	dcr_manifest_free(&d);
	/* One past it is refused, whatever the parent. */
	m.version = DCR_VERSION_MAX + 1;
	assert_int_equal(dcr_manifest_validate(&m), -EBADMSG);
	m.parent = DCR_VERSION_MAX;
	assert_int_equal(dcr_manifest_validate(&m), -EBADMSG);
	m.parent = 0;
	assert_int_equal(dcr_manifest_validate(&m), -EBADMSG);
	m.version = UINT64_MAX;
	assert_int_equal(dcr_manifest_validate(&m), -EBADMSG);
	b.len = 0;
	assert_int_equal(dcr_manifest_encode(&m, &b), -EINVAL);
	dcr_buf_free(&b);

	/* Keys: the cap is a version, a stray larger number is not. */
	dcr_version_key(DCR_VERSION_MAX, k, sizeof(k));
	assert_string_equal(k, "versions/4294967295");
	assert_int_equal(dcr_version_from_key(k, &v), 0);
	assert_true(v == DCR_VERSION_MAX);
	assert_int_equal(dcr_version_from_key("versions/4294967296", &v),
			 -EINVAL);
	assert_int_equal(dcr_version_from_key("versions/5000000000", &v),
			 -EINVAL);
	assert_int_equal(dcr_version_from_key("9999999999", &v), -EINVAL);
}

/* A compacted manifest: same content, other encoding; anything else differs. */
static void test_same_content(void **state)
{
	struct dcr_manifest a, b;

	build(&a);
	build(&b);
	assert_true(dcr_manifest_same_content(&a, &b));
	/* the encoding may change: parent, kinds, packs, frame hashes */
	b.parent = 1;
	b.files[2].chunks[1].kind = DCR_CK_FULL;
	b.files[2].chunks[1].pack = 0;
	b.files[2].chunks[1].off = 99;
	b.files[2].chunks[1].fhash[3] ^= 1;
	b.files[2].base = DCR_NO_BASE;
	assert_true(dcr_manifest_same_content(&a, &b));
	/* the content may not */
	b.files[2].chunks[1].hash[0] ^= 1;
	assert_false(dcr_manifest_same_content(&a, &b));
	b.files[2].chunks[1].hash[0] ^= 1;
	b.files[2].chunks[1].xxh[0] ^= 1;
	assert_false(dcr_manifest_same_content(&a, &b));
	b.files[2].chunks[1].xxh[0] ^= 1;
	b.files[2].sha256[7] ^= 1;
	assert_false(dcr_manifest_same_content(&a, &b));
	b.files[2].sha256[7] ^= 1;
	b.files[1].mode ^= 1;
	assert_false(dcr_manifest_same_content(&a, &b));
	b.files[1].mode ^= 1;
	b.version++;
	assert_false(dcr_manifest_same_content(&a, &b));
	b.version--;
	b.ctime_ns++;
	assert_false(dcr_manifest_same_content(&a, &b));
	b.ctime_ns--;
	assert_true(dcr_manifest_same_content(&a, &b));
	dcr_manifest_free(&a);
	dcr_manifest_free(&b);
}

/* Layout generations: round trip, lookup, and hostile bytes. */
static void test_layout(void **state)
{
	struct dcr_layout_entry e[3] = {
		{ .version = 4, .lparent = 3 },
		{ .version = 8, .lparent = 7 },
		{ .version = 40, .lparent = 39 },
	};
	struct dcr_layout l = { .gen = 2, .ctime_ns = 1234, .n = 3, .e = e }, d;
	struct dcr_buf b;
	uint64_t g;
	uint8_t h[DCR_HASH_LEN];
	char k[128];

	for (int i = 0; i < 3; i++)
		memset(e[i].mhash, 0x10 + i, DCR_HASH_LEN);
	dcr_buf_init(&b, 1 << 20);
	assert_int_equal(dcr_layout_encode(&l, &b), 0);
	assert_int_equal(b.len, 40 + 3 * 48 + 32);
	assert_int_equal(dcr_layout_decode(b.data, b.len, &d), 0);
	assert_true(d.gen == 2 && d.ctime_ns == 1234 && d.n == 3);
	assert_memory_equal(d.e, e, sizeof(e));
	assert_non_null(dcr_layout_find(&d, 8));
	assert_true(dcr_layout_find(&d, 40)->lparent == 39);
	assert_null(dcr_layout_find(&d, 5));
	assert_null(dcr_layout_find(&d, 41));
	dcr_layout_free(&d);
	/* every flipped byte is caught (checksum, or a field check) */
	for (size_t i = 0; i < b.len; i++) {
		b.data[i] ^= 0x20;
		assert_int_equal(dcr_layout_decode(b.data, b.len, &d), -EBADMSG);
		b.data[i] ^= 0x20;
	}
	/* truncated, or a count that does not match the bytes */
	for (size_t n = 0; n < b.len; n += 7)
		assert_int_equal(dcr_layout_decode(b.data, n, &d), -EBADMSG);
	dcr_put_le64(b.data + 32, UINT64_MAX / 8);
	assert_int_equal(dcr_layout_decode(b.data, b.len, &d), -EBADMSG);
	/* entries must be sorted, unique, and name an older parent */
	b.len = 0;
	e[1].version = 4;
	assert_int_equal(dcr_layout_encode(&l, &b), -EINVAL);
	e[1].version = 8;
	e[1].lparent = 8;
	assert_int_equal(dcr_layout_encode(&l, &b), -EINVAL);
	e[1].lparent = 7;
	/* an empty generation is valid: every version as committed */
	l.n = 0;
	assert_int_equal(dcr_layout_encode(&l, &b), 0);
	assert_int_equal(dcr_layout_decode(b.data, b.len, &d), 0);
	assert_true(d.n == 0 && d.gen == 2);
	dcr_layout_free(&d);
	dcr_buf_free(&b);
	/* keys */
	dcr_layout_key(7, k, sizeof(k));
	assert_string_equal(k, "layouts/0000000007");
	assert_int_equal(dcr_layout_gen_from_key(k, &g), 0);
	assert_true(g == 7);
	assert_int_equal(dcr_layout_gen_from_key("layouts/7", &g), -EINVAL);
	assert_int_equal(dcr_layout_gen_from_key("versions/0000000007x", &g), -EINVAL);
	dcr_mobj_key(e[0].mhash, k, sizeof(k));
	assert_int_equal(strncmp(k, "manifests/1010", 14), 0);
	assert_int_equal(dcr_mobj_from_key(k, h), 0);
	assert_memory_equal(h, e[0].mhash, DCR_HASH_LEN);
	assert_int_equal(dcr_mobj_from_key("manifests/xyz", h), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_find),
		cmocka_unit_test(test_format1),
		cmocka_unit_test(test_file_digest),
		cmocka_unit_test(test_file_hasher),
		cmocka_unit_test(test_empty_version),
		cmocka_unit_test(test_validate_rejects),
		cmocka_unit_test(test_paths),
		cmocka_unit_test(test_hostile_bytes),
		cmocka_unit_test(test_check_parent),
		cmocka_unit_test(test_keys),
		cmocka_unit_test(test_version_cap),
		cmocka_unit_test(test_same_content),
		cmocka_unit_test(test_layout),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
