/* SPDX-License-Identifier: MIT */
/*
 * test_libdcr.c - the public C API (lib/dcr.h) and the safetensors
 * layout it writes (core/stwriter.h): byte ranges and tensors committed
 * from memory read back bit for bit, the layout matches the format's
 * reference bytes and parses with the project's one parser, abort
 * publishes nothing, errors come with a message; the maintenance calls
 * (log, show, diff, tag, verify, gc) answer in dcrfs-ctl's JSON; the
 * read API (dcr_read_*) returns the committed bytes, from many threads,
 * and fails with -EIO, never wrong bytes, on a damaged pack.
 */
#include "config.h"

#include <errno.h>
#include <dirent.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "testutil.h"

#include "common.h"
#include "dcr.h"
#include "fileio.h"
#include "json.h"
#include "manifest.h"
#include "reader.h"
#include "safetensors.h"
#include "sign.h"
#include "store.h"
#include "stwriter.h"

struct fx {
	char *root;
	char store[PATH_MAX], cache[PATH_MAX];
	dcr_store_handle *s;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	f->root = tu_mkdtemp("libdcr");
	snprintf(f->store, sizeof(f->store), "%s/store", f->root);
	snprintf(f->cache, sizeof(f->cache), "%s/cc", f->root);
	if (dcr_store_handle_open(f->store, DCR_STORE_INIT, &f->s))
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	dcr_store_handle_close(f->s);
	tu_rm_rf(f->root);
	free(f->root);
	free(f);
	return 0;
}

/* Read file @path of version @v of the store through the read path. */
static uint8_t *read_back(struct fx *f, uint64_t v, const char *path, uint64_t *len)
{
	struct dcr_store *st;
	struct dcr_reader *r;
	const struct dcr_version_info *vi;
	char scratch[PATH_MAX];

	snprintf(scratch, sizeof(scratch), "%s/reader", f->root);
	assert_int_equal(dcr_store_open(f->store, NULL, 0, &st), 0);
	struct dcr_reader_opts ro = { .cache_dir = scratch, .cache_size = 1 << 26 };
	assert_int_equal(dcr_reader_open(st, &ro, &r), 0);
	assert_int_equal(dcr_reader_refresh(r, NULL), 0);
	assert_int_equal(dcr_reader_version(r, v, &vi), 0);
	uint8_t *buf = NULL;
	for (uint32_t i = 1; i < vi->nentries; i++) {
		if (strcmp(vi->entries[i].path, path))
			continue;
		*len = vi->entries[i].size;
		buf = malloc(*len + 1);
		for (uint64_t off = 0; off < *len;) {
			ssize_t n = dcr_reader_read(r, v, i, off, buf + off, *len - off);
			assert_true(n > 0);
			off += (uint64_t)n;
		}
	}
	assert_non_null(buf);
	dcr_reader_close(r);
	dcr_store_close(st);
	tu_rm_rf(scratch);
	return buf;
}

/* Byte ranges committed twice (a step between) read back exactly. */
static void test_bytes_chain(void **state)
{
	struct fx *f = *state;
	size_t n = 300000;
	uint8_t *a = malloc(n);
	struct dcr_commit_options o = { .cache_dir = f->cache, .chunk_size = 65536, .jobs = 2 };
	struct dcr_commit_info info;
	dcr_commit_handle *c;
	uint64_t len;

	tu_fill(a, n, 1);
	for (int step = 0; step < 2; step++) {
		if (step)
			for (size_t i = 0; i < n; i += 997)
				a[i] ^= 1;
		struct dcr_range r[] = { { a, 1000 }, { a + 1000, n - 1000 } };
		assert_int_equal(dcr_commit_begin(f->s, &o, &c), 0);
		assert_int_equal(dcr_commit_add_bytes(c, "d/x.bin", 0600, r, 2), 0);
		assert_int_equal(dcr_commit_add_bytes(c, "d/x.bin", 0600, r, 2), -EEXIST);
		assert_non_null(strstr(dcr_errmsg(), "added twice"));
		assert_int_equal(dcr_commit_publish(c, step ? "t2" : NULL, &info), 0);
		assert_true(info.version == (uint64_t)step + 1 && info.files == 1 && info.dirs == 1);
		if (step)
			assert_true(info.chunks_delta > 0 && info.chunks_full == 0);
		assert_int_equal(dcr_commit_publish(c, NULL, &info), -EINVAL);
		dcr_commit_free(c);
		uint8_t *b = read_back(f, info.version, "d/x.bin", &len);
		assert_true(len == n);
		assert_memory_equal(a, b, n);
		free(b);
	}
	free(a);
}

/* Abort publishes nothing; a bad store URL fails with a message. */
static void test_abort_and_errors(void **state)
{
	struct fx *f = *state;
	dcr_commit_handle *c;
	dcr_store_handle *s;
	uint64_t latest;
	uint8_t a[100] = { 1 };
	struct dcr_range r = { a, sizeof(a) };
	struct dcr_commit_options o = { .cache_dir = f->cache };

	assert_int_equal(dcr_commit_begin(f->s, &o, &c), 0);
	assert_int_equal(dcr_commit_add_bytes(c, "x", 0644, &r, 1), 0);
	assert_int_equal(dcr_commit_add_bytes(c, "../x", 0644, &r, 1), -EINVAL);
	dcr_commit_abort(c);
	assert_int_equal(dcr_store_handle_latest(f->s, &latest), 0);
	assert_true(latest == 0);
	char url[PATH_MAX];
	snprintf(url, sizeof(url), "%s/nothing", f->root);
	assert_true(dcr_store_handle_open(url, 0, &s) < 0);
	assert_non_null(strstr(dcr_errmsg(), "no store"));
	/* An empty commit is refused without the flag. */
	assert_int_equal(dcr_commit_begin(f->s, &o, &c), 0);
	assert_int_equal(dcr_commit_publish(c, NULL, NULL), -ENODATA);
	assert_non_null(strstr(dcr_errmsg(), "no files"));
	dcr_commit_free(c);
}

/*
 * Signing through the API: the key is read by dcr_commit_set_sign_key
 * (a missing or junk file fails there, naming it), dcr_commit_signer
 * names it, the published version and its tag are signed; metadata is
 * checked when set (a bad key, a value not UTF-8) and published.
 */
static void test_sign_and_meta(void **state)
{
	struct fx *f = *state;
	char key[PATH_MAX + 8], junk[PATH_MAX + 8], id[DCR_KEYID_LEN + 1];
	uint8_t a[5000];
	struct dcr_range r = { a, sizeof(a) };
	struct dcr_commit_options o = { .cache_dir = f->cache };
	struct dcr_commit_info info;
	dcr_commit_handle *c;
	char *json;

	tu_fill(a, sizeof(a), 3);
	snprintf(key, sizeof(key), "%s/k", f->root);
	snprintf(junk, sizeof(junk), "%s/junk", f->root);
	assert_int_equal(dcr_sign_keygen(key, id), 0);
	assert_int_equal(tu_sh("echo junk > '%s'", junk), 0);
	assert_int_equal(dcr_commit_begin(f->s, &o, &c), 0);
	assert_null(dcr_commit_signer(c));
	assert_int_equal(dcr_commit_set_sign_key(c, junk), -EBADMSG);
	assert_non_null(strstr(dcr_errmsg(), "junk"));
	assert_int_equal(dcr_commit_set_sign_key(c, "/nonexistent/k"), -ENOENT);
	assert_non_null(strstr(dcr_errmsg(), "/nonexistent/k"));
	assert_null(dcr_commit_signer(c));
	assert_int_equal(dcr_commit_set_sign_key(c, key), 0);
	assert_string_equal(dcr_commit_signer(c), id);
	assert_int_equal(dcr_commit_set_meta(c, "bad key", "x"), -EINVAL);
	assert_int_equal(dcr_commit_set_meta(c, "step", "\xff"), -EINVAL);
	assert_non_null(strstr(dcr_errmsg(), "UTF-8"));
	assert_int_equal(dcr_commit_set_meta(c, "step", "1"), 0);
	assert_int_equal(dcr_commit_set_meta(c, "step", "7"), 0); /* replaced */
	assert_int_equal(dcr_commit_add_bytes(c, "x", 0644, &r, 1), 0);
	assert_int_equal(dcr_commit_publish(c, "best", &info), 0);
	assert_int_equal(dcr_commit_set_meta(c, "late", "x"), -EINVAL);
	assert_int_equal(dcr_commit_set_sign_key(c, key), -EINVAL);
	dcr_commit_free(c);
	assert_int_equal(dcr_store_show(f->s, "best", &json), 0);
	char want[128];
	snprintf(want, sizeof(want), "\"signer\": \"%s\", \"meta\": {\"step\": \"7\"}", id);
	assert_non_null(strstr(json, want));
	dcr_free(json);
	assert_int_equal(tu_sh("test $(wc -l < '%s/tags/best') = 2", f->store), 0);
	/* dcr_store_tag_signed signs; a junk key is refused before the tag */
	uint64_t v = 0;
	assert_int_equal(dcr_store_tag_signed(f->s, "t2", "1", key, &v), 0);
	assert_true(v == 1);
	assert_int_equal(tu_sh("test $(wc -l < '%s/tags/t2') = 2", f->store), 0);
	assert_int_equal(dcr_store_tag_signed(f->s, "t3", "1", junk, &v), -EBADMSG);
	assert_int_equal(tu_sh("test ! -e '%s/tags/t3'", f->store), 0);
}

/*
 * The layout's bytes equal the safetensors format's, written here from
 * the specification: tensors by dtype (F32 before BF16 before U8), then
 * name; "__metadata__" first; spaces to 8 bytes. With DCR_ST_GIVEN_ORDER
 * the tensors keep the caller's order. The parser gives back each shape,
 * and a shape it cannot keep is not an error.
 */
static void test_layout_reference_bytes(void **state)
{
	(void)state;
	float w[4] = { 1, 2, 3, 4 };
	uint16_t h[3] = { 0x3f80, 0x4000, 0xbf80 };
	uint8_t u = 7;
	uint64_t s22[] = { 2, 2 }, s3[] = { 3 };
	struct dcr_st_tensor t[] = {
		{ "u", "U8", NULL, 0, &u, 1 },
		{ "b\"q", "BF16", s3, 1, h, 6 },
		{ "a", "F32", s22, 2, w, 16 },
		{ "a2", "F32", s3, 1, w, 12 },
	};
	struct dcr_st_meta m[] = { { "z", "1" }, { "format", "pt" } };
	const char *want_json =
		"{\"__metadata__\":{\"format\":\"pt\",\"z\":\"1\"},"
		"\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
		"\"a2\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[16,28]},"
		"\"b\\\"q\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[28,34]},"
		"\"u\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[34,35]}}";
	char *hdr;
	size_t hlen, order[4];

	assert_int_equal(dcr_safetensors_layout(t, 4, m, 2, 0, &hdr, &hlen, order), 0);
	size_t jl = strlen(want_json), padded = (jl + 7) / 8 * 8;
	assert_true(hlen == 8 + padded);
	assert_true(dcr_get_le64((const uint8_t *)hdr) == padded);
	assert_memory_equal(hdr + 8, want_json, jl);
	for (size_t i = jl; i < padded; i++)
		assert_int_equal(hdr[8 + i], ' ');
	assert_true(order[0] == 2 && order[1] == 3 && order[2] == 1 && order[3] == 0);

	/* Round trip through the project's parser. */
	size_t flen = hlen + 35;
	uint8_t *file = malloc(flen);
	memcpy(file, hdr, hlen);
	size_t off = hlen;
	for (int i = 0; i < 4; i++) {
		memcpy(file + off, t[order[i]].data, t[order[i]].len);
		off += t[order[i]].len;
	}
	struct dcr_tensors ts;
	assert_int_equal(dcr_safetensors_tensors(file, flen, flen, &ts), 0);
	assert_int_equal(ts.n, 4);
	assert_string_equal(ts.t[0].name, "a");
	assert_string_equal(ts.t[2].name, "b\"q");
	assert_string_equal(ts.t[2].dtype, "BF16");
	assert_true(ts.t[2].off == hlen + 28 && ts.t[2].len == 6);
	assert_memory_equal(file + ts.t[2].off, h, 6);
	/* the parser keeps each shape */
	assert_true(ts.t[0].ndim == 2 && ts.t[0].shape[0] == 2 && ts.t[0].shape[1] == 2);
	assert_true(ts.t[2].ndim == 1 && ts.t[2].shape[0] == 3);
	assert_true(ts.t[3].ndim == 0);
	dcr_tensors_free(&ts);
	free(file);
	free(hdr);

	/* DCR_ST_GIVEN_ORDER: the caller's order, data offsets in it */
	const char *given_json =
		"{\"u\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]},"
		"\"b\\\"q\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[1,7]},"
		"\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[7,23]},"
		"\"a2\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[23,35]}}";
	assert_int_equal(dcr_safetensors_layout(t, 4, NULL, 0, DCR_ST_GIVEN_ORDER, &hdr,
						&hlen, order), 0);
	jl = strlen(given_json);
	assert_true(hlen == 8 + (jl + 7) / 8 * 8);
	assert_memory_equal(hdr + 8, given_json, jl);
	assert_true(order[0] == 0 && order[1] == 1 && order[2] == 2 && order[3] == 3);
	free(hdr);

	/* A shape the parser does not keep (9 dimensions, a float) is no error. */
	const char *odd = "{\"x\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],"
			  "\"data_offsets\":[0,1]},\"y\":{\"dtype\":\"U8\",\"shape\":[1.0],"
			  "\"data_offsets\":[1,2]},\"z\":{\"dtype\":\"U8\",\"data_offsets\":[2,3]}}";
	size_t ol = strlen(odd);
	uint8_t ofile[256];
	dcr_put_le64(ofile, ol);
	memcpy(ofile + 8, odd, ol);
	memset(ofile + 8 + ol, 0, 3);
	assert_int_equal(dcr_safetensors_tensors(ofile, 8 + ol + 3, 8 + ol + 3, &ts), 0);
	assert_int_equal(ts.n, 3);
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(ts.t[i].ndim, DCR_ST_NDIM_UNKNOWN);
	dcr_tensors_free(&ts);

	/* Refusals: unknown dtype, a length that does not fit, a repeat. */
	t[0].dtype = "Q4";
	assert_int_equal(dcr_safetensors_layout(t, 4, NULL, 0, 0, &hdr, &hlen, order), -EINVAL);
	t[0].dtype = "U8";
	t[0].len = 2;
	assert_int_equal(dcr_safetensors_layout(t, 4, NULL, 0, 0, &hdr, &hlen, order), -EINVAL);
	t[0].len = 1;
	t[3].name = "a";
	assert_int_equal(dcr_safetensors_layout(t, 4, NULL, 0, 0, &hdr, &hlen, order), -EINVAL);
}

/* Tensors committed from memory; a NaN is refused naming the tensor. */
static void test_safetensors_commit(void **state)
{
	struct fx *f = *state;
	size_t nw = 100000;
	uint16_t *w = malloc(nw * 2);
	float b[10] = { 0 };
	uint64_t sw[] = { 1000, 100 }, sb[] = { 10 };
	struct dcr_tensor_desc t[] = {
		{ "layer.w", "BF16", sw, 2, w, nw * 2 },
		{ "layer.b", "F32", sb, 1, b, sizeof(b) },
	};
	const char *meta[] = { "format", "pt" };
	struct dcr_commit_options o = { .cache_dir = f->cache, .chunk_size = 65536 };
	struct dcr_commit_info info;
	dcr_commit_handle *c;
	uint64_t len;

	for (size_t i = 0; i < nw; i++)
		w[i] = (uint16_t)(0x3c00 + i % 512);
	assert_int_equal(dcr_commit_begin(f->s, &o, &c), 0);
	assert_int_equal(dcr_commit_add_safetensors(c, "m.safetensors", t, 2, meta, 1), 0);
	assert_int_equal(dcr_commit_publish(c, NULL, &info), 0);
	dcr_commit_free(c);
	uint8_t *got = read_back(f, 1, "m.safetensors", &len);
	struct dcr_tensors ts;
	assert_int_equal(dcr_safetensors_tensors(got, len, len, &ts), 0);
	assert_int_equal(ts.n, 2);
	assert_string_equal(ts.t[0].name, "layer.b"); /* F32 first */
	assert_memory_equal(got + ts.t[0].off, b, sizeof(b));
	assert_memory_equal(got + ts.t[1].off, w, nw * 2);
	dcr_tensors_free(&ts);
	free(got);

	w[777] = 0x7fc0; /* NaN */
	assert_int_equal(dcr_commit_begin(f->s, &o, &c), 0);
	assert_int_equal(dcr_commit_add_safetensors(c, "m.safetensors", t, 2, NULL, 0), 0);
	assert_int_equal(dcr_commit_publish(c, NULL, &info), -EDOM);
	assert_non_null(strstr(dcr_errmsg(), "tensor layer.w has 1 non-finite value"));
	dcr_commit_free(c);
	assert_int_equal(dcr_store_handle_latest(f->s, &len), 0);
	assert_true(len == 1);
	o.flags = DCR_COMMIT_ALLOW_NONFINITE;
	assert_int_equal(dcr_commit_begin(f->s, &o, &c), 0);
	assert_int_equal(dcr_commit_add_safetensors(c, "m.safetensors", t, 2, NULL, 0), 0);
	assert_int_equal(dcr_commit_publish(c, NULL, &info), 0);
	assert_true(info.version == 2 && info.parent == 1);
	dcr_commit_free(c);
	/* bytes promised and no data: refused naming the tensor */
	t[1].data = NULL;
	assert_int_equal(dcr_commit_begin(f->s, &o, &c), 0);
	assert_int_equal(dcr_commit_add_safetensors(c, "m.safetensors", t, 2, NULL, 0), -EINVAL);
	assert_non_null(strstr(dcr_errmsg(), "tensor layer.b: 40 bytes and no data"));
	dcr_commit_free(c);
	free(w);
}

/* The one UTF-8 check: well-formed sequences only (RFC 3629). */
static void test_utf8_valid(void **state)
{
	static const char *const good[] = {
		"", "abc", "\xc3\xa9", "\xe2\x82\xac", "\xef\xbf\xbf",
		"\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf", "\xed\x9f\xbf",
	};
	static const struct { const char *s; size_t bad; } bad[] = {
		{ "\xff", 0 }, { "a\x80", 1 }, { "\xc0\xaf", 0 }, { "\xc1\xbf", 0 },
		{ "ab\xc3", 2 }, { "\xe2\x82", 0 }, { "\xe0\x80\xaf", 0 },
		{ "\xed\xa0\x80", 0 }, { "x\xed\xbf\xbf", 1 }, { "\xf0\x80\x80\xaf", 0 },
		{ "\xf4\x90\x80\x80", 0 }, { "\xf5\x80\x80\x80", 0 }, { "a\xc3\x28", 1 },
		{ "\xe2\x82\x28", 0 }, { "\xc3\xa9\xfe", 2 },
	};
	size_t at;

	(void)state;
	for (size_t i = 0; i < DCR_ARRAY_SIZE(good); i++)
		assert_true(dcr_utf8_valid(good[i], strlen(good[i]), &at));
	for (size_t i = 0; i < DCR_ARRAY_SIZE(bad); i++) {
		at = 99;
		assert_false(dcr_utf8_valid(bad[i].s, strlen(bad[i].s), &at));
		assert_int_equal(at, bad[i].bad);
	}
}

/*
 * A tensor name, metadata key or value or path that is not UTF-8 is
 * refused, naming it (it used to make a header that is not JSON); UTF-8
 * beyond ASCII is committed and parses back.
 */
static void test_refuses_non_utf8(void **state)
{
	struct fx *f = *state;
	float x[4] = { 1, 2, 3, 4 };
	uint64_t sh[] = { 4 };
	struct dcr_tensor_desc bad_name = { "a\xff", "F32", sh, 1, x, sizeof(x) };
	struct dcr_tensor_desc good = { "\xc3\xa9t\xc3\xa9", "F32", sh, 1, x, sizeof(x) };
	const char *bad_key[] = { "k\xc3", "v" }, *bad_value[] = { "k", "\xed\xa0\x80" };
	const char *meta[] = { "\xe2\x82\xac", "\xf0\x9f\x98\x80" };
	struct dcr_range r = { x, sizeof(x) };
	struct dcr_commit_options o = { .cache_dir = f->cache };
	struct dcr_commit_info info;
	dcr_commit_handle *c;
	uint64_t len;

	assert_int_equal(dcr_commit_begin(f->s, &o, &c), 0);
	assert_int_equal(dcr_commit_add_safetensors(c, "m.safetensors", &bad_name, 1, NULL, 0),
			 -EINVAL);
	assert_non_null(strstr(dcr_errmsg(), "tensor name 'a...' is not valid UTF-8 (at byte 1)"));
	assert_int_equal(dcr_commit_add_safetensors(c, "m.safetensors", &good, 1, bad_key, 1),
			 -EINVAL);
	assert_non_null(strstr(dcr_errmsg(), "metadata key"));
	assert_int_equal(dcr_commit_add_safetensors(c, "m.safetensors", &good, 1, bad_value, 1),
			 -EINVAL);
	assert_non_null(strstr(dcr_errmsg(), "metadata value"));
	assert_int_equal(dcr_commit_add_safetensors(c, "m\xff.safetensors", &good, 1, NULL, 0),
			 -EINVAL);
	assert_non_null(strstr(dcr_errmsg(), "path 'm...' is not valid UTF-8"));
	assert_int_equal(dcr_commit_add_bytes(c, "d/\xe2\x82", 0644, &r, 1), -EINVAL);
	assert_non_null(strstr(dcr_errmsg(), "not valid UTF-8"));
	/* Nothing of the refused calls was added. */
	assert_int_equal(dcr_commit_publish(c, NULL, &info), -ENODATA);
	dcr_commit_free(c);

	assert_int_equal(dcr_commit_begin(f->s, &o, &c), 0);
	assert_int_equal(dcr_commit_add_safetensors(c, "\xd0\xbc.safetensors", &good, 1, meta, 1),
			 0);
	assert_int_equal(dcr_commit_publish(c, NULL, &info), 0);
	assert_true(info.version == 1 && info.files == 1);
	dcr_commit_free(c);
	uint8_t *got = read_back(f, 1, "\xd0\xbc.safetensors", &len);
	struct dcr_tensors ts;
	assert_int_equal(dcr_safetensors_tensors(got, len, len, &ts), 0);
	assert_int_equal(ts.n, 1);
	assert_string_equal(ts.t[0].name, good.name);
	const char *want = "{\"__metadata__\":{\"\xe2\x82\xac\":\"\xf0\x9f\x98\x80\"}";
	assert_non_null(memmem(got, len, want, strlen(want)));
	dcr_tensors_free(&ts);
	free(got);
}

/* Commit @a[0..n) as x.bin, tagged @tag (or not); its version. */
static uint64_t commit_bytes(struct fx *f, const uint8_t *a, size_t n, const char *tag)
{
	struct dcr_commit_options o = { .cache_dir = f->cache, .chunk_size = 65536, .jobs = 2 };
	struct dcr_range r = { a, n };
	struct dcr_commit_info info;
	dcr_commit_handle *c;

	assert_int_equal(dcr_commit_begin(f->s, &o, &c), 0);
	assert_int_equal(dcr_commit_add_bytes(c, "x.bin", 0644, &r, 1), 0);
	assert_int_equal(dcr_commit_publish(c, tag, &info), 0);
	dcr_commit_free(c);
	return info.version;
}

/* @json is one JSON value holding @needle; freed. */
static void expect_json(char *json, const char *needle)
{
	assert_non_null(json);
	assert_int_equal(dcr_json_check(json, strlen(json)), 0);
	if (!strstr(json, needle))
		fail_msg("no '%s' in %s", needle, json);
	dcr_free(json);
}

/* log, show, diff, tag, verify (damage named), gc over libdcr. */
static void test_maintenance(void **state)
{
	struct fx *f = *state;
	size_t n = 200000;
	uint8_t *a = malloc(n);
	char *json = NULL;

	tu_fill(a, n, 3);
	assert_int_equal(commit_bytes(f, a, n, "one"), 1);
	for (size_t i = 0; i < n; i += 1001)
		a[i] ^= 1;
	assert_int_equal(commit_bytes(f, a, n, NULL), 2);

	assert_int_equal(dcr_store_log(f->s, &json), 0);
	assert_int_equal(json[0], '[');
	assert_non_null(strstr(json, "\"version\": 1, \"parent\": 0"));
	expect_json(json, "\"version\": 2, \"parent\": 1, \"base\": 1");
	assert_int_equal(dcr_store_show(f->s, "one", &json), 0);
	expect_json(json, "\"path\": \"x.bin\"");
	assert_int_equal(dcr_store_show(f->s, "9", &json), -ENOENT);
	assert_null(json);
	assert_non_null(strstr(dcr_errmsg(), "version 9 does not exist"));
	assert_int_equal(dcr_store_diff(f->s, "1", "latest", &json), 0);
	char changed[64];
	snprintf(changed, sizeof(changed), "\"changed_bytes\": %zu", (n + 1000) / 1001);
	expect_json(json, changed);

	uint64_t v = 0;
	assert_int_equal(dcr_store_tag(f->s, "best", "latest", &v), 0);
	assert_int_equal(v, 2);
	assert_int_equal(dcr_store_tag(f->s, ".bad", "1", &v), -EINVAL);
	assert_int_equal(dcr_store_tag(f->s, "x", "nope", &v), -ENOENT);
	assert_int_equal(dcr_store_show(f->s, "best", &json), 0);
	expect_json(json, "\"tags\": [\"best\"]");

	const char *only2[] = { "2" };
	assert_int_equal(dcr_store_verify(f->s, NULL, 0, DCR_VERIFY_DEEP, &json), 0);
	expect_json(json, "\"ok\": true");
	assert_int_equal(dcr_store_verify(f->s, only2, 1, 0, &json), 0);
	expect_json(json, "\"versions\": [2]");

	/* damage: a pack gone; named by the error and the JSON */
	struct dcr_store *st;
	struct dcr_manifest m;
	char key[128], path[PATH_MAX + 128];
	assert_int_equal(dcr_store_open(f->store, NULL, 0, &st), 0);
	assert_int_equal(dcr_store_get_manifest(st, 2, &m), 0);
	dcr_pack_key(m.packs[0], key, sizeof(key));
	dcr_manifest_free(&m);
	dcr_store_close(st);
	snprintf(path, sizeof(path), "%s/%s", f->store, key);
	assert_int_equal(unlink(path), 0);
	dcr_set_log_errors(0);
	assert_int_equal(dcr_store_verify(f->s, NULL, 0, 0, &json), -EBADMSG);
	char named[160];
	snprintf(named, sizeof(named), "damaged: %s: missing", key);
	if (!strstr(dcr_errmsg(), named))
		fail_msg("'%s' does not name %s", dcr_errmsg(), key);
	snprintf(named, sizeof(named), "\"object\": \"%s\"", key);
	assert_non_null(strstr(json, "\"ok\": false"));
	expect_json(json, named);
	dcr_set_log_errors(1);

	/* gc: keep the newest; its tag stays, version 1's goes */
	struct dcr_gc_options go = { .keep_last = 1, .keep_tagged = 0, .grace = 0 };
	assert_int_equal(dcr_store_gc(f->s, NULL, &json), -EINVAL);
	go.keep_last = 0;
	assert_int_equal(dcr_store_gc(f->s, &go, &json), -EINVAL);
	go.keep_last = 1;
	/* read_cost as dcrfs-ctl gc --read-cost takes it: 0 or 100..10000 */
	go.read_cost = 99;
	assert_int_equal(dcr_store_gc(f->s, &go, &json), -EINVAL);
	assert_non_null(strstr(dcr_errmsg(), "read_cost"));
	go.read_cost = 10001;
	assert_int_equal(dcr_store_gc(f->s, &go, &json), -EINVAL);
	go.read_cost = 100;
	go.dry_run = 1;
	assert_int_equal(dcr_store_gc(f->s, &go, &json), 0);
	expect_json(json, "\"dry_run\": true");
	free(a);
	/* the missing pack was version 2's: a real gc would fail to rebase */
}

/* gc over libdcr on a whole store: version 1 and its tag go. */
static void test_maintenance_gc(void **state)
{
	struct fx *f = *state;
	size_t n = 200000;
	uint8_t *a = malloc(n);
	char *json = NULL;

	tu_fill(a, n, 4);
	commit_bytes(f, a, n, "one");
	a[5] ^= 1;
	commit_bytes(f, a, n, "two");
	struct dcr_gc_options go = { .keep_last = 1, .keep_tagged = 0, .grace = 0 };
	assert_int_equal(dcr_store_gc(f->s, &go, &json), 0);
	assert_non_null(strstr(json, "\"versions_removed\": [1]"));
	expect_json(json, "\"tags_removed\": [\"one\"]");
	assert_int_equal(dcr_store_log(f->s, &json), 0);
	assert_null(strstr(json, "\"version\": 1,"));
	expect_json(json, "\"version\": 2,");
	assert_int_equal(dcr_store_verify(f->s, NULL, 0, DCR_VERIFY_DEEP, &json), 0);
	expect_json(json, "\"ok\": true");
	free(a);
}

/*
 * An error logged on a worker thread of a call (a pack's put failing on
 * the encoder thread that sealed it) is the call's: dcr_errmsg names it
 * on the calling thread (it said "the commit: Not a directory", and the
 * line went to stderr only). The store: its packs/ is a file, so every
 * pack's put fails.
 */
static void test_worker_error_reaches_caller(void **state)
{
	struct fx *f = *state;
	struct dcr_commit_options o = { .cache_dir = f->cache, .chunk_size = 65536,
					.jobs = 4 };
	/* past one pack (64 MiB), so that a pack is sealed, and its put
	 * fails, on an encoder's thread while the caller waits */
	size_t n = 72u << 20;
	uint8_t *a = malloc(n);
	struct dcr_range r = { a, n };
	struct dcr_commit_info info;
	dcr_commit_handle *c;
	char packs[PATH_MAX + 8];

	tu_fill(a, n, 6);
	snprintf(packs, sizeof(packs), "%s/packs", f->store);
	tu_rm_rf(packs); /* made by the first commit, if any */
	assert_int_equal(tu_write_file(packs, "x", 1), 0);
	assert_int_equal(dcr_commit_begin(f->s, &o, &c), 0);
	assert_int_equal(dcr_commit_add_bytes(c, "x.bin", 0644, &r, 1), 0);
	dcr_set_log_errors(0);
	assert_true(dcr_commit_publish(c, NULL, &info) < 0);
	dcr_set_log_errors(1);
	if (!strstr(dcr_errmsg(), "cannot upload packs/"))
		fail_msg("dcr_errmsg does not name the failed upload: '%s'",
			 dcr_errmsg());
	dcr_commit_free(c);
	free(a);
}

/* Threads reading one file of the read API at random places. */
struct rd_thread {
	dcr_read_file *f;
	const uint8_t *want;
	size_t n;
	uint64_t seed;
	int bad;
};

static void *rd_thread(void *arg)
{
	struct rd_thread *t = arg;
	uint8_t *buf = malloc(t->n);

	for (int i = 0; i < 40; i++) {
		uint64_t off = tu_rand(&t->seed) % t->n;
		size_t len = (size_t)(tu_rand(&t->seed) % 150000) + 1;
		int64_t got = dcr_read_pread(t->f, buf, len, off);
		size_t want = DCR_MIN(len, t->n - off);

		if (got != (int64_t)want || memcmp(buf, t->want + off, want))
			t->bad++;
	}
	free(buf);
	return NULL;
}

/* Flip one byte in the middle of every pack of the store at @store. */
static void damage_packs(const char *store)
{
	char dir[PATH_MAX + 8], p[PATH_MAX * 2];
	struct dirent *d;
	DIR *dh;

	snprintf(dir, sizeof(dir), "%s/packs", store);
	assert_non_null(dh = opendir(dir));
	while ((d = readdir(dh))) {
		uint8_t *b = NULL;
		size_t len = 0;

		if (d->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, d->d_name);
		assert_int_equal(tu_read_file(p, &b, &len), 0);
		b[len / 2] ^= 0x40;
		assert_int_equal(tu_write_file(p, b, len), 0);
		free(b);
	}
	closedir(dh);
}

/* The read API: a file of each version, by number, tag and "latest",
 * read whole, in pieces and from four threads at once; its listing; its
 * errors; a cache directory in use; a damaged pack fails the read. */
static void test_read_api(void **state)
{
	struct fx *f = *state;
	size_t n = 300000;
	uint8_t *a[2], *buf = malloc(n + 10);
	struct dcr_commit_options o = { .cache_dir = f->cache, .chunk_size = 65536 };
	struct dcr_read_options ro = { 0 };
	char rcache[PATH_MAX], *json;
	dcr_read_handle *h, *h2;
	dcr_read_file *rf;
	dcr_commit_handle *c;
	uint64_t v;

	for (int step = 0; step < 2; step++) {
		a[step] = malloc(n);
		tu_fill(a[step], n, 7);
		if (step)
			for (size_t i = 0; i < n; i += 331)
				a[step][i] ^= 4;
		struct dcr_range r = { a[step], n };
		assert_int_equal(dcr_commit_begin(f->s, &o, &c), 0);
		assert_int_equal(dcr_commit_add_bytes(c, "d/x.bin", 0640, &r, 1), 0);
		assert_int_equal(dcr_commit_publish(c, step ? "t2" : "t1", NULL), 0);
		dcr_commit_free(c);
	}
	snprintf(rcache, sizeof(rcache), "%s/rcache", f->root);
	ro.cache_dir = rcache;
	assert_int_equal(dcr_read_handle_open(f->s, &ro, &h), 0);
	/* One user of a cache directory at a time, with a message. */
	assert_int_equal(dcr_read_handle_open(f->s, &ro, &h2), -EBUSY);
	assert_non_null(strstr(dcr_errmsg(), "in use"));
	assert_int_equal(dcr_read_resolve(h, "latest", &v), 0);
	assert_true(v == 2);
	assert_int_equal(dcr_read_resolve(h, "t1", &v), 0);
	assert_true(v == 1);
	assert_int_equal(dcr_read_resolve(h, "nope", &v), -ENOENT);
	assert_non_null(strstr(dcr_errmsg(), "nope"));
	assert_int_equal(dcr_read_resolve(h, "9", &v), -ENOENT);
	assert_int_equal(dcr_read_list(h, "t2", &json), 0);
	assert_int_equal(dcr_json_check(json, strlen(json)), 0);
	assert_non_null(strstr(json, "{\"path\": \"d\", \"type\": \"dir\""));
	assert_non_null(strstr(json, "{\"path\": \"d/x.bin\", \"type\": \"file\", "
			       "\"mode\": 416, \"size\": 300000"));
	dcr_free(json);
	assert_int_equal(dcr_read_open(h, "t2", "d/nope", &rf), -ENOENT);
	assert_non_null(strstr(dcr_errmsg(), "d/nope"));
	assert_int_equal(dcr_read_open(h, "t2", "d", &rf), -EISDIR);
	for (int step = 0; step < 2; step++) {
		assert_int_equal(dcr_read_open(h, step ? "latest" : "1", "/d/x.bin", &rf), 0);
		assert_true(dcr_read_size(rf) == n && dcr_read_version(rf) == (uint64_t)step + 1);
		/* Whole, with room to spare: short at the end only. */
		assert_int_equal(dcr_read_pread(rf, buf, n + 10, 0), (int64_t)n);
		assert_memory_equal(buf, a[step], n);
		assert_int_equal(dcr_read_pread(rf, buf, 10, n), 0);
		assert_int_equal(dcr_read_pread(rf, buf, 5000, n - 100), 100);
		assert_memory_equal(buf, a[step] + n - 100, 100);
		assert_int_equal(dcr_read_pread(rf, buf, 70000, 65000), 70000);
		assert_memory_equal(buf, a[step] + 65000, 70000);
		struct rd_thread t[4];
		pthread_t th[4];
		for (int i = 0; i < 4; i++) {
			t[i] = (struct rd_thread){ rf, a[step], n, (uint64_t)i * 77 + 1, 0 };
			assert_int_equal(pthread_create(&th[i], NULL, rd_thread, &t[i]), 0);
		}
		for (int i = 0; i < 4; i++) {
			pthread_join(th[i], NULL);
			assert_int_equal(t[i].bad, 0);
		}
		dcr_read_close(rf);
	}
	dcr_read_handle_close(h);
	/* A damaged pack: a fresh private cache must fetch, and fails. */
	damage_packs(f->store);
	assert_int_equal(dcr_read_handle_open(f->s, NULL, &h), 0);
	assert_int_equal(dcr_read_open(h, "2", "d/x.bin", &rf), 0);
	assert_int_equal(dcr_read_pread(rf, buf, n, 0), -EIO);
	assert_true(strlen(dcr_errmsg()) > 0);
	dcr_read_close(rf);
	dcr_read_handle_close(h);
	/* The cache kept in rcache still proves its chunks: served. */
	assert_int_equal(dcr_read_handle_open(f->s, &ro, &h), 0);
	assert_int_equal(dcr_read_open(h, "2", "d/x.bin", &rf), 0);
	assert_int_equal(dcr_read_pread(rf, buf, n, 0), (int64_t)n);
	assert_memory_equal(buf, a[1], n);
	dcr_read_close(rf);
	dcr_read_handle_close(h);
	free(a[0]);
	free(a[1]);
	free(buf);
}

int main(void)
{
	dcr_set_log_level(DCR_LEVEL_ERROR);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_bytes_chain, setup, teardown),
		cmocka_unit_test_setup_teardown(test_abort_and_errors, setup, teardown),
		cmocka_unit_test(test_layout_reference_bytes),
		cmocka_unit_test_setup_teardown(test_safetensors_commit, setup, teardown),
		cmocka_unit_test(test_utf8_valid),
		cmocka_unit_test_setup_teardown(test_refuses_non_utf8, setup, teardown),
		cmocka_unit_test_setup_teardown(test_maintenance, setup, teardown),
		cmocka_unit_test_setup_teardown(test_maintenance_gc, setup, teardown),
		cmocka_unit_test_setup_teardown(test_worker_error_reaches_caller,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_sign_and_meta, setup, teardown),
		cmocka_unit_test_setup_teardown(test_read_api, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
