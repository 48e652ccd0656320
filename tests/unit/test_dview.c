/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the delta view builder (read/dview.h): small
 * safetensors files committed with real frames and manifests into a
 * directory store (the fixture of test_reader_util.h), views built
 * through a real reader and checked against changes worked out here
 * element by element: bf16/f16/f32/i64 tensors, -0.0 vs +0.0, no change,
 * added/removed/reshaped tensors, a file new in B, a span, the index
 * width boundary, hostile files and a damaged chunk.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "testutil.h"

#include "common.h"
#include "dview.h"
#include "hash.h"
#include "manifest.h"
#include "reader.h"
#include "safetensors.h"
#include "stwriter.h"
#include "test_reader_util.h"

/* ------------------------------------------------------------ helpers */

struct tt {
	const char *name;
	const char *dtype;
	uint64_t shape[2];
	size_t ndim;
	uint8_t *data;
	uint64_t len;
};

static unsigned width_of(const char *dtype)
{
	return dcr_st_dtype_width(dtype);
}

/* A tensor of random bytes. */
static struct tt mk(const char *name, const char *dtype, uint64_t d0,
		    uint64_t d1, uint64_t seed)
{
	struct tt t = { name, dtype, { d0, d1 }, d1 ? 2 : 1, NULL, 0 };

	t.len = d0 * (d1 ? d1 : 1) * width_of(dtype);
	t.data = malloc(t.len ? t.len : 1);
	tu_fill(t.data, t.len, seed);
	return t;
}

static struct tt dup_t(const struct tt *x)
{
	struct tt t = *x;

	t.data = malloc(t.len ? t.len : 1);
	memcpy(t.data, x->data, t.len);
	return t;
}

/* Lay @ts out as a safetensors file into @tf (replacing its data). */
static void set_st(struct tfile *tf, const struct tt *ts, size_t n)
{
	struct dcr_st_tensor st[16];
	size_t order[16];
	char *hdr;
	size_t hlen, pos;

	assert_true(n <= 16);
	for (size_t i = 0; i < n; i++)
		st[i] = (struct dcr_st_tensor){ ts[i].name, ts[i].dtype,
						ts[i].shape, ts[i].ndim,
						ts[i].data, ts[i].len };
	assert_int_equal(dcr_safetensors_layout(st, n, NULL, 0, 0, &hdr,
						&hlen, order), 0);
	free(tf->data);
	tf->size = hlen;
	for (size_t i = 0; i < n; i++)
		tf->size += ts[i].len;
	assert_true(tf->size <= 64 * CS);
	tf->data = malloc(tf->size);
	memcpy(tf->data, hdr, hlen);
	pos = hlen;
	for (size_t i = 0; i < n; i++) {
		memcpy(tf->data + pos, ts[order[i]].data, ts[order[i]].len);
		pos += ts[order[i]].len;
	}
	free(hdr);
}

static void set_raw(struct tfile *tf, const void *p, size_t n)
{
	free(tf->data);
	tf->data = malloc(n ? n : 1);
	memcpy(tf->data, p, n);
	tf->size = n;
}

static void free_tts(struct tt *ts, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(ts[i].data);
}

/* Refresh so that the reader knows every version published. */
static void reader_up(struct fx *f)
{
	if (!f->r)
		open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
}

static uint32_t tree_of(struct fx *f, uint64_t v)
{
	const struct dcr_version_info *vi;
	uint32_t t;

	assert_int_equal(dcr_reader_version(f->r, v, &vi), 0);
	t = vi->tree;
	dcr_reader_version_put(f->r, vi);
	return t;
}

/* Entry index of @path in version @v's tree. */
static uint32_t entry_of(struct fx *f, uint64_t v, const char *path)
{
	const struct dcr_version_info *vi;
	uint32_t idx = 0;

	assert_int_equal(dcr_reader_version(f->r, v, &vi), 0);
	for (uint32_t i = 1; i < vi->nentries; i++)
		if (!strcmp(vi->entries[i].path, path))
			idx = i;
	dcr_reader_version_put(f->r, vi);
	assert_true(idx > 0);
	return idx;
}

/* A built view, read back. */
struct view {
	int ret;
	uint8_t *p;
	size_t n;
	struct dcr_dview_info info;
	struct dcr_dview_sums sums;
	struct dcr_tensors ts;
	char *hdr; /* the JSON, NUL-terminated */
};

static void view_free(struct view *w)
{
	free(w->p);
	free(w->hdr);
	dcr_tensors_free(&w->ts);
	dcr_dview_sums_free(&w->sums);
	memset(w, 0, sizeof(*w));
}

static struct view build(struct fx *f, uint64_t a, uint64_t b,
			 const char *path)
{
	struct dcr_dview_side sa = { a, tree_of(f, a) }, sb = { b, tree_of(f, b) };
	struct view w = { 0 };
	struct stat st;
	int fd = open(f->root, O_TMPFILE | O_RDWR, 0600);

	assert_true(fd >= 0);
	w.ret = dcr_dview_build(f->r, sa, sb, entry_of(f, b, path), f->root,
				fd, &w.info, &w.sums);
	if (w.ret == 0) {
		assert_int_equal(fstat(fd, &st), 0);
		/* The size it reports is the size it wrote. */
		assert_int_equal((uint64_t)st.st_size, w.info.size);
		w.n = (size_t)st.st_size;
		w.p = malloc(w.n);
		assert_int_equal(pread(fd, w.p, w.n, 0), (ssize_t)w.n);
		/* A stock reader's view: core's parser accepts it. */
		assert_int_equal(dcr_safetensors_tensors(w.p, w.n, w.n, &w.ts), 0);
		uint64_t hl = 0;
		for (int i = 0; i < 8; i++)
			hl |= (uint64_t)w.p[i] << (8 * i);
		w.hdr = strndup((const char *)w.p + 8, (size_t)hl);
		/* Checked reads give the same bytes, from any offset. */
		uint8_t *q = malloc(w.n + 1);
		uint64_t bad = 0;
		assert_int_equal(dcr_dview_pread(fd, &w.sums, q, w.n + 1, 0, &bad),
				 (ssize_t)w.n);
		assert_memory_equal(q, w.p, w.n);
		assert_int_equal(dcr_dview_pread(fd, &w.sums, q, 5, w.n - 3, &bad), 3);
		assert_memory_equal(q, w.p + w.n - 3, 3);
		assert_int_equal(dcr_dview_pread(fd, &w.sums, q, 5, w.n, &bad), 0);
		free(q);
	}
	close(fd);
	return w;
}

/* The metadata value of @key (a JSON string, unescaped), malloc'ed. */
static char *meta(const struct view *w, const char *key)
{
	char pat[64];
	const char *p, *q;
	char *out, *o;

	snprintf(pat, sizeof(pat), "\"%s\":\"", key);
	p = strstr(w->hdr, pat);
	assert_non_null(p);
	p += strlen(pat);
	out = o = malloc(strlen(p) + 1);
	for (q = p; *q && *q != '"'; q++) {
		if (*q == '\\')
			q++;
		*o++ = *q;
	}
	*o = 0;
	return out;
}

static void assert_meta(const struct view *w, const char *key,
			const char *want)
{
	char *v = meta(w, key);

	if (strcmp(v, want))
		fail_msg("%s: got '%s', want '%s'", key, v, want);
	free(v);
}

static const struct dcr_tensor *view_tensor(const struct view *w,
					    const char *name)
{
	for (size_t i = 0; i < w->ts.n; i++)
		if (!strcmp(w->ts.t[i].name, name))
			return &w->ts.t[i];
	return NULL;
}

/* The view holds exactly the element changes from @a to @b of tensor
 * @name (same dtype and shape), worked out here; none if equal. */
static uint64_t check_tensor(const struct view *w, const struct tt *a,
			     const struct tt *b, const char *name)
{
	const unsigned wd = width_of(b->dtype);
	const uint64_t numel = b->len / wd;
	char in[128], vn[128];
	const struct dcr_tensor *ti, *tv;
	uint64_t n = 0, k = 0;

	snprintf(in, sizeof(in), "%s.idx", name);
	snprintf(vn, sizeof(vn), "%s.val", name);
	for (uint64_t e = 0; e < numel; e++)
		n += memcmp(a->data + e * wd, b->data + e * wd, wd) != 0;
	ti = view_tensor(w, in);
	tv = view_tensor(w, vn);
	if (n == 0) {
		assert_null(ti);
		assert_null(tv);
		return 0;
	}
	assert_non_null(ti);
	assert_non_null(tv);
	assert_string_equal(ti->dtype, "I32");
	assert_string_equal(tv->dtype, b->dtype);
	assert_int_equal(ti->ndim, 1);
	assert_int_equal(ti->shape[0], n);
	assert_int_equal(tv->shape[0], n);
	assert_int_equal(ti->len, 4 * n);
	assert_int_equal(tv->len, wd * n);
	for (uint64_t e = 0; e < numel; e++) {
		if (!memcmp(a->data + e * wd, b->data + e * wd, wd))
			continue;
		const uint8_t *ip = w->p + ti->off + 4 * k;
		uint32_t idx = (uint32_t)ip[0] | (uint32_t)ip[1] << 8 |
			       (uint32_t)ip[2] << 16 | (uint32_t)ip[3] << 24;
		assert_int_equal(idx, e);
		assert_memory_equal(w->p + tv->off + wd * k, b->data + e * wd, wd);
		k++;
	}
	return n;
}

static void hex_of(struct fx *f, uint64_t v, const char *path, char *hex)
{
	struct dcr_file_meta fm;

	assert_int_equal(dcr_reader_file_meta(f->r, v, tree_of(f, v),
					      entry_of(f, v, path), &fm), 0);
	dcr_hash_hex(fm.digest, hex);
}

/* Change @n elements of @t (distinct, spread), each by flipping bit @bit
 * of its first byte. */
static void change(struct tt *t, unsigned n, unsigned step, unsigned bit)
{
	unsigned wd = width_of(t->dtype);
	uint64_t numel = t->len / wd;

	for (unsigned i = 0; i < n; i++)
		t->data[((i * (uint64_t)step + 1) % numel) * wd] ^= (uint8_t)(1u << bit);
}

/* ------------------------------------------------------------ tests */

static void test_dtypes(void **state)
{
	struct fx *f = *state;
	struct tt a[6], b[6];
	char ha[DCR_HASH_HEX_LEN + 1], hb[DCR_HASH_HEX_LEN + 1];
	uint64_t total = 0;

	a[0] = mk("emb.weight", "BF16", 64, 33, 1);
	a[1] = mk("norm", "F16", 100, 0, 2);
	a[2] = mk("proj", "F32", 10, 10, 3);
	a[3] = mk("step", "I64", 50, 0, 4);
	a[4] = mk("frozen", "U8", 300, 0, 5);
	a[5] = mk("tail", "BF16", 7, 0, 6); /* 14 bytes: a tail past the words */
	for (int i = 0; i < 6; i++)
		b[i] = dup_t(&a[i]);
	change(&b[0], 70, 29, 0);     /* low mantissa bit */
	change(&b[1], 3, 31, 7);
	change(&b[3], 1, 1, 3);
	/* -0.0 and +0.0 differ bitwise: a change. */
	memset(a[2].data + 4 * 17, 0, 4);
	memcpy(b[2].data + 4 * 17, "\0\0\0\x80", 4);
	/* The last element of the bf16 tensor (the 8-byte word's last lane). */
	b[0].data[b[0].len - 1] ^= 0x40;
	b[5].data[13] ^= 0x01; /* the last element, in the tail */
	b[5].data[1] ^= 0x80;  /* the first, a sign */

	f->v[1].v = 1;
	add_file(&f->v[1], "model.safetensors", 0, 0, 0);
	set_st(&f->v[1].f[0], a, 6);
	publish(f->st, &f->v[1], NULL, B_AUTO, 0);
	f->v[2].v = 2;
	add_file(&f->v[2], "model.safetensors", 0, 0, 0);
	set_st(&f->v[2].f[0], b, 6);
	publish(f->st, &f->v[2], &f->v[1], B_AUTO, 0);
	reader_up(f);

	struct view w = build(f, 1, 2, "model.safetensors");
	assert_int_equal(w.ret, 0);
	total += check_tensor(&w, &a[0], &b[0], "emb.weight");
	total += check_tensor(&w, &a[1], &b[1], "norm");
	total += check_tensor(&w, &a[2], &b[2], "proj");
	total += check_tensor(&w, &a[3], &b[3], "step");
	assert_int_equal(check_tensor(&w, &a[4], &b[4], "frozen"), 0);
	assert_int_equal(check_tensor(&w, &a[5], &b[5], "tail"), 2);
	total += 2;
	assert_int_equal(w.ts.n, 10); /* 5 changed tensors, nothing else */
	assert_int_equal(w.info.changed, total);
	assert_int_equal(w.info.tensors, 5);
	assert_true(total >= 70 + 1 + 3 + 1);
	assert_meta(&w, "format", "dcrfs-delta");
	assert_meta(&w, "format_version", "1");
	assert_meta(&w, "from_version", "1");
	assert_meta(&w, "to_version", "2");
	assert_meta(&w, "digest_kind", "sha256-of-chunks");
	assert_meta(&w, "added", "[]");
	assert_meta(&w, "removed", "[]");
	assert_meta(&w, "reshaped", "[]");
	hex_of(f, 1, "model.safetensors", ha);
	hex_of(f, 2, "model.safetensors", hb);
	assert_meta(&w, "from_digest", ha);
	assert_meta(&w, "to_digest", hb);
	/* Data order of the reference: I64 values first, then F32, I32
	 * indices (by name), BF16 and F16 values last. */
	assert_string_equal(w.ts.t[0].name, "step.val");
	assert_string_equal(w.ts.t[1].name, "proj.val");
	assert_string_equal(w.ts.t[2].name, "emb.weight.idx");
	assert_string_equal(w.ts.t[6].name, "tail.idx");
	assert_string_equal(w.ts.t[7].name, "emb.weight.val");
	assert_string_equal(w.ts.t[8].name, "tail.val");
	assert_string_equal(w.ts.t[9].name, "norm.val");
	/* Size: 4 + 2 bytes per changed bf16 element, plus the header. */
	const struct dcr_tensor *ev = view_tensor(&w, "emb.weight.val");
	const struct dcr_tensor *ei = view_tensor(&w, "emb.weight.idx");
	assert_int_equal(ev->len + ei->len, 6 * ev->shape[0]);

	/* A rebuild (a cold reader too) gives the same bytes. */
	dcr_reader_close(f->r);
	f->r = NULL;
	reader_up(f);
	struct view w2 = build(f, 1, 2, "model.safetensors");
	assert_int_equal(w2.ret, 0);
	assert_int_equal(w2.n, w.n);
	assert_memory_equal(w2.p, w.p, w.n);
	view_free(&w2);
	view_free(&w);
	free_tts(a, 6);
	free_tts(b, 6);
}

static void test_no_change(void **state)
{
	struct fx *f = *state;
	struct tt a[2];

	a[0] = mk("w", "BF16", 100, 0, 7);
	a[1] = mk("b", "F32", 10, 0, 8);
	f->v[1].v = 1;
	add_file(&f->v[1], "m.safetensors", 0, 0, 0);
	set_st(&f->v[1].f[0], a, 2);
	publish(f->st, &f->v[1], NULL, B_AUTO, 0);
	f->v[2].v = 2;
	copy_tree(&f->v[2], &f->v[1]);
	publish(f->st, &f->v[2], &f->v[1], B_AUTO, 0);
	reader_up(f);

	struct view w = build(f, 1, 2, "m.safetensors");
	assert_int_equal(w.ret, 0);
	assert_int_equal(w.ts.n, 0);
	assert_int_equal(w.info.changed, 0);
	/* Equal digests: nothing beyond the headers was compared. */
	assert_int_equal(w.info.compared, 0);
	assert_meta(&w, "added", "[]");
	view_free(&w);
	free_tts(a, 2);
}

static void test_added_removed_reshaped(void **state)
{
	struct fx *f = *state;
	struct tt a[4], b[4];

	a[0] = mk("keep", "BF16", 40, 0, 1);
	a[1] = mk("gone", "F32", 8, 0, 2);
	a[2] = mk("grow", "BF16", 4, 4, 3);
	a[3] = mk("recast", "F32", 16, 0, 4);
	b[0] = dup_t(&a[0]);
	change(&b[0], 2, 7, 1);
	b[1] = mk("grow", "BF16", 4, 5, 5);        /* reshaped */
	b[2] = mk("new\"one", "F16", 3, 0, 6);     /* added; a quote */
	b[3] = mk("recast", "BF16", 16, 0, 4);     /* dtype changed */

	f->v[1].v = 1;
	add_file(&f->v[1], "m.safetensors", 0, 0, 0);
	set_st(&f->v[1].f[0], a, 4);
	publish(f->st, &f->v[1], NULL, B_AUTO, 0);
	f->v[2].v = 2;
	add_file(&f->v[2], "m.safetensors", 0, 0, 0);
	set_st(&f->v[2].f[0], b, 4);
	publish(f->st, &f->v[2], &f->v[1], B_AUTO, 0);
	reader_up(f);

	struct view w = build(f, 1, 2, "m.safetensors");
	assert_int_equal(w.ret, 0);
	check_tensor(&w, &a[0], &b[0], "keep");
	assert_int_equal(w.ts.n, 2);
	assert_meta(&w, "added", "[\"new\\\"one\"]");
	assert_true(strstr(w.hdr, "\"added\":\"[\\\"new\\\\\\\"one\\\"]\"") != NULL);
	assert_meta(&w, "removed", "[\"gone\"]");
	assert_meta(&w, "reshaped", "[\"grow\",\"recast\"]");
	view_free(&w);
	free_tts(a, 4);
	free_tts(b, 4);
}

static void test_new_file_and_span(void **state)
{
	struct fx *f = *state;
	struct tt a[1], b[1], c[1];

	a[0] = mk("w", "BF16", 500, 0, 1);
	b[0] = dup_t(&a[0]);
	change(&b[0], 20, 13, 0);
	c[0] = dup_t(&b[0]);
	change(&c[0], 20, 17, 1); /* some elements back to a's bits */

	f->v[1].v = 1;
	add_file(&f->v[1], "m.safetensors", 0, 0, 0);
	set_st(&f->v[1].f[0], a, 1);
	publish(f->st, &f->v[1], NULL, B_AUTO, 0);
	f->v[2].v = 2;
	add_file(&f->v[2], "m.safetensors", 0, 0, 0);
	set_st(&f->v[2].f[0], b, 1);
	add_file(&f->v[2], "n.safetensors", 0, 0, 0);
	set_st(&f->v[2].f[1], a, 1);
	publish(f->st, &f->v[2], &f->v[1], B_AUTO, 0);
	f->v[3].v = 3;
	add_file(&f->v[3], "m.safetensors", 0, 0, 0);
	set_st(&f->v[3].f[0], c, 1);
	publish(f->st, &f->v[3], &f->v[2], B_AUTO, 0);
	reader_up(f);

	/* New in B: every tensor added, no from digest. */
	struct view w = build(f, 1, 2, "n.safetensors");
	assert_int_equal(w.ret, 0);
	assert_int_equal(w.ts.n, 0);
	assert_meta(&w, "added", "[\"w\"]");
	assert_meta(&w, "from_digest", "");
	view_free(&w);

	/* A span v1..v3 is the change from v1's bytes to v3's. */
	w = build(f, 1, 3, "m.safetensors");
	assert_int_equal(w.ret, 0);
	assert_true(check_tensor(&w, &a[0], &c[0], "w") > 0);
	assert_meta(&w, "from_version", "1");
	assert_meta(&w, "to_version", "3");
	view_free(&w);
	free_tts(a, 1);
	free_tts(b, 1);
	free_tts(c, 1);
}

/* Chunks equal in both manifests are not read; the rest still are. */
static void test_equal_chunks_skipped(void **state)
{
	struct fx *f = *state;
	struct tt a[2], b[2];

	/* 20 chunks of bf16 with changes in one place only, and a small
	 * tensor that changes. */
	a[0] = mk("big", "BF16", 20 * CS / 2, 0, 1);
	a[1] = mk("small", "F32", 64, 0, 2);
	b[0] = dup_t(&a[0]);
	b[1] = dup_t(&a[1]);
	b[0].data[7 * CS + 100] ^= 1;
	b[0].data[7 * CS + 2002] ^= 4;
	b[1].data[8] ^= 2;
	f->v[1].v = 1;
	add_file(&f->v[1], "m.safetensors", 0, 0, 0);
	set_st(&f->v[1].f[0], a, 2);
	publish(f->st, &f->v[1], NULL, B_AUTO, 0);
	f->v[2].v = 2;
	add_file(&f->v[2], "m.safetensors", 0, 0, 0);
	set_st(&f->v[2].f[0], b, 2);
	publish(f->st, &f->v[2], &f->v[1], B_AUTO, 0);
	reader_up(f);

	struct view w = build(f, 1, 2, "m.safetensors");
	assert_int_equal(w.ret, 0);
	assert_int_equal(check_tensor(&w, &a[0], &b[0], "big"), 2);
	assert_int_equal(check_tensor(&w, &a[1], &b[1], "small"), 1);
	assert_int_equal(w.info.compared + w.info.skipped, a[0].len + a[1].len);
	/* At most the two chunks around each change were read. */
	assert_true(w.info.compared <= 4 * CS);
	assert_true(w.info.skipped >= 17 * CS);
	view_free(&w);
	free_tts(a, 2);
	free_tts(b, 2);
}

/*
 * A tensor that moved: B's bytes are A's but for one letter of the
 * header (A: t then u; B: s then t, with s = A's t and t = A's u), so
 * every chunk after the first is equal in both manifests, yet B's t
 * differs from A's t: chunks are skipped only at equal offsets.
 */
static void test_moved_tensor(void **state)
{
	struct fx *f = *state;
	struct tt a[2], b[2];

	a[0] = mk("t", "BF16", 2 * CS, 0, 1);
	a[1] = mk("u", "BF16", 2 * CS, 0, 2);
	b[0] = dup_t(&a[0]);
	b[0].name = "s";
	b[1] = dup_t(&a[1]);
	b[1].name = "t";
	f->v[1].v = 1;
	add_file(&f->v[1], "m.safetensors", 0, 0, 0);
	set_st(&f->v[1].f[0], a, 2);
	publish(f->st, &f->v[1], NULL, B_AUTO, 0);
	f->v[2].v = 2;
	add_file(&f->v[2], "m.safetensors", 0, 0, 0);
	set_st(&f->v[2].f[0], b, 2);
	assert_int_equal(f->v[2].f[0].size, f->v[1].f[0].size);
	assert_memory_equal(f->v[2].f[0].data + CS, f->v[1].f[0].data + CS,
			    f->v[1].f[0].size - CS);
	publish(f->st, &f->v[2], &f->v[1], B_AUTO, 0);
	reader_up(f);

	struct view w = build(f, 1, 2, "m.safetensors");
	assert_int_equal(w.ret, 0);
	assert_true(check_tensor(&w, &a[0], &b[1], "t") > CS);
	assert_meta(&w, "added", "[\"s\"]");
	assert_meta(&w, "removed", "[\"u\"]");
	view_free(&w);
	free_tts(a, 2);
	free_tts(b, 2);
}

/* A byte of the view's file that changes after the build (local bit
 * rot) fails every read of its block with EIO; other blocks still read. */
static void test_read_checked(void **state)
{
	struct fx *f = *state;
	struct tt a[1], b[1];
	struct dcr_dview_info info;
	struct dcr_dview_sums sums;
	uint8_t *q, x;
	uint64_t bad = 0;
	int fd = open(f->root, O_TMPFILE | O_RDWR, 0600);

	a[0] = mk("w", "BF16", 60 * CS / 2, 0, 1);
	b[0] = dup_t(&a[0]);
	change(&b[0], 30000, 3, 0); /* a view of over 2 blocks */
	f->v[1].v = 1;
	add_file(&f->v[1], "m.safetensors", 0, 0, 0);
	set_st(&f->v[1].f[0], a, 1);
	publish(f->st, &f->v[1], NULL, B_AUTO, 0);
	f->v[2].v = 2;
	add_file(&f->v[2], "m.safetensors", 0, 0, 0);
	set_st(&f->v[2].f[0], b, 1);
	publish(f->st, &f->v[2], &f->v[1], B_AUTO, 0);
	reader_up(f);
	struct dcr_dview_side s1 = { 1, tree_of(f, 1) }, s2 = { 2, tree_of(f, 2) };
	assert_true(fd >= 0);
	assert_int_equal(dcr_dview_build(f->r, s1, s2, entry_of(f, 2, "m.safetensors"),
					 f->root, fd, &info, &sums), 0);
	assert_true(info.size > 2 * DCR_DVIEW_BLOCK);
	assert_int_equal(sums.n, (info.size + DCR_DVIEW_BLOCK - 1) / DCR_DVIEW_BLOCK);
	q = malloc(info.size);
	assert_int_equal(pread(fd, &x, 1, DCR_DVIEW_BLOCK + 7), 1);
	x ^= 0x10;
	assert_int_equal(pwrite(fd, &x, 1, DCR_DVIEW_BLOCK + 7), 1);
	assert_int_equal(dcr_dview_pread(fd, &sums, q, 1, DCR_DVIEW_BLOCK + 7, &bad), -EIO);
	assert_int_equal(bad, DCR_DVIEW_BLOCK);
	assert_int_equal(dcr_dview_pread(fd, &sums, q, info.size, 0, &bad), -EIO);
	assert_int_equal(dcr_dview_pread(fd, &sums, q, 10, 2 * DCR_DVIEW_BLOCK, &bad), 10);
	assert_int_equal(dcr_dview_pread(fd, &sums, q, 10, 0, &bad), 10);
	/* The file cut short: EIO too, never a short read. */
	assert_int_equal(ftruncate(fd, (off_t)info.size - 1), 0);
	assert_int_equal(dcr_dview_pread(fd, &sums, q, 10, info.size - 5, &bad), -EIO);
	free(q);
	close(fd);
	dcr_dview_sums_free(&sums);
	free_tts(a, 1);
	free_tts(b, 1);
}

/* A scratch byte changed between its write and the assembly: the
 * read-back check fails the build (EIO, logged), no view. */
static void test_scratch_damage(void **state)
{
#ifdef DCR_TEST_HOOKS
	struct fx *f = *state;
	struct tt a[1], b[1];

	a[0] = mk("w", "BF16", 500, 0, 1);
	b[0] = dup_t(&a[0]);
	change(&b[0], 20, 13, 0);
	f->v[1].v = 1;
	add_file(&f->v[1], "m.safetensors", 0, 0, 0);
	set_st(&f->v[1].f[0], a, 1);
	publish(f->st, &f->v[1], NULL, B_AUTO, 0);
	f->v[2].v = 2;
	add_file(&f->v[2], "m.safetensors", 0, 0, 0);
	set_st(&f->v[2].f[0], b, 1);
	publish(f->st, &f->v[2], &f->v[1], B_AUTO, 0);
	reader_up(f);
	setenv("DCRFS_TEST_DVIEW_FLIP", "1", 1);
	log_reset();
	struct view w = build(f, 1, 2, "m.safetensors");
	unsetenv("DCRFS_TEST_DVIEW_FLIP");
	assert_int_equal(w.ret, -EIO);
	assert_non_null(strstr(log_last, "w.val read back differs"));
	view_free(&w);
	w = build(f, 1, 2, "m.safetensors");
	assert_int_equal(w.ret, 0);
	view_free(&w);
	free_tts(a, 1);
	free_tts(b, 1);
#else
	(void)state;
	tu_missing("needs the hook DCRFS_TEST_DVIEW_FLIP "
		   "(configure --enable-test-hooks)");
#endif
}

/* The reader of @f again, on a cache of its own (chunks decoded, not
 * found cached), with @threads threads, keeping records of the changes
 * it sees (read/dvrec.h) or not; with them, v@v read whole so that its
 * chunks' records are made. */
static void reader_again(struct fx *f, int threads, bool recs, uint64_t v)
{
	static int n;

	dcr_reader_close(f->r);
	f->r = NULL;
	f->threads = threads;
	snprintf(f->cache_dir, sizeof(f->cache_dir), "%s/cache%d/sub",
		 f->root, ++n);
	reader_up(f);
	if (recs) {
		assert_int_equal(dcr_reader_dvrec_enable(f->r, 64u << 20), 0);
		check_version(f, v);
	}
}

/* A build with @unit bytes per unit (0: the default). */
static struct view build_unit(struct fx *f, uint64_t a, uint64_t b,
			      const char *path, unsigned unit)
{
#ifdef DCR_TEST_HOOKS
	char s[32];

	snprintf(s, sizeof(s), "%u", unit);
	if (unit)
		setenv("DCRFS_TEST_DVIEW_UNIT", s, 1);
#else
	(void)unit;
#endif
	struct view w = build(f, a, b, path);
	unsetenv("DCRFS_TEST_DVIEW_UNIT");
	return w;
}

/*
 * The same view, byte for byte, however it is built: from the records
 * or by comparison, on 1 thread or 8, in units of 8 bytes, of a chunk
 * and a bit, of three chunks, or of the default size (one per tensor
 * here); a tensor changed in a few places (delta frames: records),
 * one changed whole (full frames: compared) and one of 8-byte elements
 * changed in a few (compared: its records are 1 byte wide). A byte of the output
 * changed after a build from the records is caught by the read-back.
 */
static void test_same_bytes_all_ways(void **state)
{
	struct fx *f = *state;
	struct tt a[3], b[3];
	static const unsigned units[] = { 0, 8, CS + 8, 3 * CS };
	struct view ref;

	/* 1-byte elements: the fixture's frames are in byte mode, so
	 * their records list changes 1 byte wide (read/dvrec.h). */
	a[0] = mk("a", "U8", 30 * CS, 0, 1);
	a[1] = mk("full", "F32", 12 * CS / 4, 0, 2);
	a[2] = mk("small", "I64", 100, 0, 3);
	b[0] = dup_t(&a[0]);
	b[1] = mk("full", "F32", 12 * CS / 4, 0, 9);
	b[2] = dup_t(&a[2]);
	change(&b[0], 3000, 7, 2);
	change(&b[2], 5, 11, 0);
	f->v[1].v = 1;
	add_file(&f->v[1], "m.safetensors", 0, 0, 0);
	set_st(&f->v[1].f[0], a, 3);
	publish(f->st, &f->v[1], NULL, B_AUTO, 0);
	f->v[2].v = 2;
	add_file(&f->v[2], "m.safetensors", 0, 0, 0);
	set_st(&f->v[2].f[0], b, 3);
	publish(f->st, &f->v[2], &f->v[1], B_AUTO, 0);

	reader_again(f, 1, false, 0);
	ref = build(f, 1, 2, "m.safetensors");
	assert_int_equal(ref.ret, 0);
	assert_int_equal(ref.info.recorded, 0);
	assert_int_equal(check_tensor(&ref, &a[0], &b[0], "a"), ref.info.changed -
			 check_tensor(&ref, &a[1], &b[1], "full") -
			 check_tensor(&ref, &a[2], &b[2], "small"));
	assert_int_equal(ref.info.tensors, 3);
	for (int recs = 0; recs < 2; recs++) {
		for (int threads = 1; threads <= 8; threads += 7) {
			reader_again(f, threads, recs, 2);
			for (size_t k = 0; k < DCR_ARRAY_SIZE(units); k++) {
				struct view w = build_unit(f, 1, 2, "m.safetensors",
							   units[k]);

				assert_int_equal(w.ret, 0);
				if (recs)
					assert_true(w.info.recorded > 0);
				else
					assert_int_equal(w.info.recorded, 0);
				assert_int_equal(w.info.changed, ref.info.changed);
				assert_int_equal(w.n, ref.n);
				assert_memory_equal(w.p, ref.p, ref.n);
				view_free(&w);
#ifdef DCR_TEST_HOOKS
				if (!recs)
					continue;
				/* Records gone between the passes: the units
				 * counted from them are compared instead. */
				setenv("DCRFS_TEST_DVIEW_RECS_GONE", "1", 1);
				w = build_unit(f, 1, 2, "m.safetensors", units[k]);
				unsetenv("DCRFS_TEST_DVIEW_RECS_GONE");
				assert_int_equal(w.ret, 0);
				assert_int_equal(w.n, ref.n);
				assert_memory_equal(w.p, ref.p, ref.n);
				view_free(&w);
#endif
			}
		}
	}
#ifdef DCR_TEST_HOOKS
	/* Pieces made again from the records, one byte changed. */
	setenv("DCRFS_TEST_DVIEW_FLIP", "1", 1);
	log_reset();
	struct view w = build_unit(f, 1, 2, "m.safetensors", CS + 8);
	unsetenv("DCRFS_TEST_DVIEW_FLIP");
	assert_int_equal(w.ret, -EIO);
	assert_non_null(strstr(log_last, ".val read back differs"));
	view_free(&w);
#endif
	view_free(&ref);
	free_tts(a, 3);
	free_tts(b, 3);
}

static void test_idx_width(void **state)
{
	(void)state;
	assert_int_equal(dcr_dview_idx_width(0), 4);
	assert_int_equal(dcr_dview_idx_width((UINT64_C(1) << 31) - 1), 4);
	assert_int_equal(dcr_dview_idx_width(UINT64_C(1) << 31), 8);
	assert_int_equal(dcr_dview_idx_width(UINT64_MAX), 8);
}

/* A safetensors file with the header @json (padded) and @data bytes. */
static void set_hdr(struct tfile *tf, const char *json, size_t data)
{
	size_t jl = strlen(json), pad = (8 - jl % 8) % 8, n = 8 + jl + pad + data;
	uint8_t *p = calloc(1, n);

	dcr_put_le64(p, jl + pad);
	memcpy(p + 8, json, jl);
	memset(p + 8 + jl, ' ', pad);
	set_raw(tf, p, n);
	free(p);
}

static void test_hostile(void **state)
{
	struct fx *f = *state;
	struct tt a[1];
	uint8_t junk[300];
	struct view w;
	const char *names[] = { "bad_dtype.safetensors", "bad_len.safetensors",
				"dup.safetensors", "huge.safetensors",
				"junk.safetensors", "m.safetensors",
				"noshape.safetensors", "plain.bin" };

	a[0] = mk("w", "BF16", 64, 0, 1);
	tu_fill(junk, sizeof(junk), 3);
	for (int v = 1; v <= 2; v++) {
		struct tver *t = &f->v[v];

		t->v = (uint64_t)v;
		for (size_t i = 0; i < DCR_ARRAY_SIZE(names); i++)
			add_file(t, names[i], 0, 0, 0);
		set_hdr(&t->f[0], "{\"w\":{\"dtype\":\"Q7\",\"shape\":[4],\"data_offsets\":[0,8]}}", 8);
		/* The shape says 4 bf16 elements (8 bytes); 6 bytes given. */
		set_hdr(&t->f[1], "{\"w\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,6]}}", 8);
		set_hdr(&t->f[2], "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 8);
		/* A header length past the file. */
		uint8_t huge[16] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, '{', '}' };
		set_raw(&t->f[3], huge, sizeof(huge));
		set_raw(&t->f[4], junk, sizeof(junk));
		/* v1's m.safetensors is junk; v2's is valid. */
		if (v == 1)
			set_raw(&t->f[5], junk, sizeof(junk));
		else
			set_st(&t->f[5], a, 1);
		set_hdr(&t->f[6], "{\"w\":{\"dtype\":\"BF16\",\"shape\":\"x\",\"data_offsets\":[0,8]}}", 8);
		set_st(&t->f[7], a, 1); /* valid bytes, wrong name */
		publish(f->st, t, v == 1 ? NULL : &f->v[1], B_AUTO, 0);
	}
	reader_up(f);
	for (size_t i = 0; i < DCR_ARRAY_SIZE(names); i++) {
		const uint32_t idx = entry_of(f, 2, names[i]);
		int want = i == 5 ? 0 : -EBADMSG;

		w = build(f, 1, 2, names[i]);
		if (w.ret != want)
			fail_msg("%s: %d, want %d", names[i], w.ret, want);
		assert_int_equal(dcr_dview_probe(f->r, 2, tree_of(f, 2), idx), want);
		if (i == 5) {
			/* From junk: every tensor of B is added. */
			assert_meta(&w, "added", "[\"w\"]");
			assert_int_equal(w.ts.n, 0);
			char *d = meta(&w, "from_digest");
			assert_int_equal(strlen(d), 64);
			free(d);
		}
		view_free(&w);
	}
	/* Bad arguments. */
	struct dcr_dview_side s1 = { 1, tree_of(f, 1) }, s2 = { 2, tree_of(f, 2) };
	struct dcr_dview_info info;
	struct dcr_dview_sums sums;
	assert_int_equal(dcr_dview_build(f->r, s2, s2, 1, f->root, -1, &info, &sums), -EINVAL);
	s2.tree++;
	assert_int_equal(dcr_dview_build(f->r, s1, s2, 1, f->root, -1, &info, &sums), -ESTALE);
	s2.tree--;
	assert_int_equal(dcr_dview_build(f->r, s1, s2, 999, f->root, -1, &info, &sums), -ENOENT);
	free_tts(a, 1);
}

static void test_damaged_chunk(void **state)
{
	struct fx *f = *state;
	struct tt a[1], b[1];
	char key[128];

	a[0] = mk("w", "BF16", 6 * CS / 2, 0, 1);
	b[0] = dup_t(&a[0]);
	change(&b[0], 300, 41, 0);
	f->v[1].v = 1;
	add_file(&f->v[1], "m.safetensors", 0, 0, 0);
	set_st(&f->v[1].f[0], a, 1);
	publish(f->st, &f->v[1], NULL, B_AUTO, 0);
	f->v[2].v = 2;
	add_file(&f->v[2], "m.safetensors", 0, 0, 0);
	set_st(&f->v[2].f[0], b, 1);
	publish(f->st, &f->v[2], &f->v[1], B_AUTO, 0);
	corrupt_frame(f, 2, 0, 3, 5, key, sizeof(key));
	reader_up(f);
	log_reset();
	struct view w = build(f, 1, 2, "m.safetensors");
	assert_int_equal(w.ret, -EIO);
	assert_true(log_errors >= 1);
	view_free(&w);
	free_tts(a, 1);
	free_tts(b, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
		T(test_dtypes),
		T(test_no_change),
		T(test_added_removed_reshaped),
		T(test_new_file_and_span),
		T(test_equal_chunks_skipped),
		T(test_moved_tensor),
		T(test_read_checked),
		T(test_scratch_damage),
		T(test_same_bytes_all_ways),
		cmocka_unit_test(test_idx_width),
		T(test_hostile),
		T(test_damaged_chunk),
#undef T
	};

	dcr_log_set_prog("test_dview");
	dcr_log_set_sink(log_sink);
	return tu_exit("test_dview", cmocka_run_group_tests(tests, NULL, NULL));
}
