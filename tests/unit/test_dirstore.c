/* SPDX-License-Identifier: MIT */
/* Unit tests for store/dirstore.c and the store helpers in core/objstore.c. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "common.h"
#include "dirstore.h"
#include "hash.h"
#include "manifest.h"
#include "sign.h"
#include "store.h"

struct fx {
	char root[64];
	struct dcr_store *st;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	snprintf(f->root, sizeof(f->root), "/tmp/dcr-dirstore-XXXXXX");
	if (!mkdtemp(f->root))
		return -1;
	char path[128];
	snprintf(path, sizeof(path), "%s/store/nested", f->root);
	if (dcr_dir_open(path, 1, &f->st))
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	char cmd[128];
	dcr_store_close(f->st);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->root);
	if (system(cmd) != 0)
		return -1;
	free(f);
	return 0;
}

static void test_put_get_head_del(void **state)
{
	struct fx *f = *state;
	struct dcr_buf b;
	uint64_t size;

	dcr_buf_init(&b, 1 << 20);
	assert_int_equal(dcr_store_get(f->st, "packs/x", 0, DCR_GET_ALL, &b), -ENOENT);
	assert_int_equal(dcr_store_head(f->st, "packs/x", &size), -ENOENT);
	assert_int_equal(dcr_store_put(f->st, "packs/x", "0123456789", 10, 0), 0);
	assert_int_equal(dcr_store_head(f->st, "packs/x", &size), 0);
	assert_true(size == 10);
	assert_int_equal(dcr_store_get(f->st, "packs/x", 0, DCR_GET_ALL, &b), 0);
	assert_int_equal(b.len, 10);
	dcr_buf_reset(&b);
	assert_int_equal(dcr_store_get(f->st, "packs/x", 3, 4, &b), 0);
	assert_int_equal(b.len, 4);
	assert_memory_equal(b.data, "3456", 4);
	/* A range past the end returns what exists; past the end, nothing. */
	dcr_buf_reset(&b);
	assert_int_equal(dcr_store_get(f->st, "packs/x", 8, 100, &b), 0);
	assert_int_equal(b.len, 2);
	dcr_buf_reset(&b);
	assert_int_equal(dcr_store_get(f->st, "packs/x", 50, 1, &b), 0);
	assert_int_equal(b.len, 0);
	/* The buffer's maximum bounds what a get may allocate. */
	struct dcr_buf small;
	dcr_buf_init(&small, 4);
	assert_int_equal(dcr_store_get(f->st, "packs/x", 0, DCR_GET_ALL, &small), -EFBIG);
	dcr_buf_free(&small);
	/* Plain put replaces. */
	assert_int_equal(dcr_store_put(f->st, "packs/x", "abc", 3, 0), 0);
	dcr_buf_reset(&b);
	assert_int_equal(dcr_store_get(f->st, "packs/x", 0, DCR_GET_ALL, &b), 0);
	assert_int_equal(b.len, 3);
	assert_int_equal(dcr_store_del(f->st, "packs/x"), 0);
	assert_int_equal(dcr_store_del(f->st, "packs/x"), -ENOENT);
	dcr_buf_free(&b);
}

/*
 * Large page-aligned puts go through O_DIRECT up to the last whole block
 * and the tail normally; unaligned ones normally. Both must store the
 * exact bytes, at sizes around the block and threshold edges.
 */
static void test_put_large(void **state)
{
	struct fx *f = *state;
	const size_t sizes[] = { (1u << 20) - 1, 1u << 20, (1u << 20) + 1,
				 (3u << 20) + 4095, (3u << 20) + 4096, (5u << 20) + 777 };
	uint8_t *a = NULL;
	struct dcr_buf b;

	assert_int_equal(posix_memalign((void **)&a, 4096, (6u << 20) + 4096), 0);
	for (size_t i = 0; i < (6u << 20) + 4096; i++)
		a[i] = (uint8_t)(i * 2654435761u >> 13);
	dcr_buf_init(&b, 8u << 20);
	for (size_t k = 0; k < DCR_ARRAY_SIZE(sizes); k++) {
		for (size_t shift = 0; shift <= 16; shift += 16) {
			const uint8_t *src = a + shift; /* shift 16: unaligned */
			uint64_t size;
			assert_int_equal(dcr_store_put(f->st, "packs/big", src, sizes[k], 0), 0);
			assert_int_equal(dcr_store_head(f->st, "packs/big", &size), 0);
			assert_int_equal(size, sizes[k]);
			dcr_buf_reset(&b);
			assert_int_equal(dcr_store_get(f->st, "packs/big", 0, DCR_GET_ALL, &b), 0);
			assert_int_equal(b.len, sizes[k]);
			assert_memory_equal(b.data, src, sizes[k]);
		}
	}
	dcr_buf_free(&b);
	free(a);
}

static void test_if_absent(void **state)
{
	struct fx *f = *state;
	struct dcr_buf b;

	dcr_buf_init(&b, 1 << 20);
	assert_int_equal(dcr_store_put(f->st, "versions/0000000001", "one", 3, DCR_PUT_IF_ABSENT), 0);
	assert_int_equal(dcr_store_put(f->st, "versions/0000000001", "two", 3, DCR_PUT_IF_ABSENT), -EEXIST);
	assert_int_equal(dcr_store_get(f->st, "versions/0000000001", 0, DCR_GET_ALL, &b), 0);
	assert_memory_equal(b.data, "one", 3);
	dcr_buf_free(&b);
}

struct racer {
	struct dcr_store *st;
	int id;
	int won;
};

static void *race(void *arg)
{
	struct racer *r = arg;
	char body[16];
	snprintf(body, sizeof(body), "racer %d", r->id);
	r->won = dcr_store_put(r->st, "versions/0000000009", body, strlen(body),
			       DCR_PUT_IF_ABSENT) == 0;
	return NULL;
}

static void test_if_absent_race(void **state)
{
	struct fx *f = *state;
	pthread_t t[8];
	struct racer r[8];
	int winners = 0;

	for (int i = 0; i < 8; i++) {
		r[i] = (struct racer){ .st = f->st, .id = i };
		pthread_create(&t[i], NULL, race, &r[i]);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		winners += r[i].won;
	}
	assert_int_equal(winners, 1);
}

static int collect(const char *key, const struct dcr_obj_info *info, void *arg)
{
	char *out = arg;
	strcat(out, key);
	strcat(out, ";");
	return 0;
}

static int stop_at_two(const char *key, const struct dcr_obj_info *info, void *arg)
{
	return ++*(int *)arg == 2 ? 42 : 0;
}

struct seen {
	char key[64], upload[64];
	int64_t mtime_ns;
	int n;
};

static int remember(const char *key, const struct dcr_obj_info *info, void *arg)
{
	struct seen *s = arg;

	snprintf(s->key, sizeof(s->key), "%s", key);
	snprintf(s->upload, sizeof(s->upload), "%s", info->upload ? info->upload : "");
	s->mtime_ns = info->mtime_ns;
	s->n++;
	return 0;
}

/* Listings carry each object's mtime; a put's leftover temporary is
 * listed as an incomplete upload and aborted. */
static void test_mtime_and_partial(void **state)
{
	struct fx *f = *state;
	struct seen s = { 0 };
	char path[256];
	int64_t before = dcr_now_ns() - 2000000000LL;

	assert_int_equal(dcr_store_put(f->st, "packs/a", "x", 1, 0), 0);
	assert_int_equal(dcr_store_list(f->st, "packs/", remember, &s), 0);
	assert_int_equal(s.n, 1);
	assert_true(s.mtime_ns > before && s.mtime_ns < dcr_now_ns() + 2000000000LL);
	assert_null(s.upload[0] ? s.upload : NULL);

	memset(&s, 0, sizeof(s));
	assert_int_equal(dcr_store_list_partial(f->st, remember, &s), 0);
	assert_int_equal(s.n, 0); /* a finished put leaves nothing */
	snprintf(path, sizeof(path), "%s/store/nested/.tmp/put.left", f->root);
	FILE *fp = fopen(path, "w");
	assert_non_null(fp);
	fputs("half", fp);
	fclose(fp);
	assert_int_equal(dcr_store_list_partial(f->st, remember, &s), 0);
	assert_int_equal(s.n, 1);
	assert_string_equal(s.key, ".tmp/put.left");
	assert_string_equal(s.upload, "put.left");
	assert_true(s.mtime_ns > before);
	assert_int_equal(dcr_store_abort_partial(f->st, s.key, "../packs/a"), -EINVAL);
	assert_int_equal(dcr_store_abort_partial(f->st, s.key, s.upload), 0);
	assert_int_equal(dcr_store_abort_partial(f->st, s.key, s.upload), -ENOENT);
	memset(&s, 0, sizeof(s));
	assert_int_equal(dcr_store_list_partial(f->st, remember, &s), 0);
	assert_int_equal(s.n, 0);
}

/*
 * An object written in parts: nothing is visible (or listed as done)
 * before put_finish, every mix of aligned parts (O_DIRECT) and unaligned
 * ones at any offset stores the exact bytes, finish with IF_ABSENT loses
 * to an existing key, and an aborted one leaves nothing behind.
 */
static void test_put_stream(void **state)
{
	struct fx *f = *state;
	const size_t parts[] = { 8192, 100, 4096, 1u << 20, 4095, 4096, 3 };
	struct seen s = { 0 };
	struct dcr_put *p;
	uint8_t *a = NULL;
	struct dcr_buf b;
	size_t at = 0;
	uint64_t size;

	assert_true(dcr_store_can_stream(f->st));
	assert_int_equal(posix_memalign((void **)&a, 4096, 2u << 20), 0);
	for (size_t i = 0; i < (2u << 20); i++)
		a[i] = (uint8_t)(i * 2654435761u >> 13);
	assert_int_equal(dcr_store_put_open(f->st, &p), 0);
	for (size_t k = 0; k < DCR_ARRAY_SIZE(parts); k++) {
		/* aligned in memory whenever the part is a whole block */
		const uint8_t *src = a + (parts[k] % 4096 ? 16 : 0);
		assert_int_equal(dcr_store_put_write(f->st, p, src, parts[k]), 0);
		at += parts[k];
	}
	assert_int_equal(dcr_store_head(f->st, "packs/s", &size), -ENOENT);
	assert_int_equal(dcr_store_list_partial(f->st, remember, &s), 0);
	assert_int_equal(s.n, 1); /* in .tmp/ until finished */
	assert_int_equal(dcr_store_put_finish(f->st, p, "packs/s", DCR_PUT_IF_ABSENT), 0);
	dcr_buf_init(&b, 4u << 20);
	assert_int_equal(dcr_store_get(f->st, "packs/s", 0, DCR_GET_ALL, &b), 0);
	assert_int_equal(b.len, at);
	at = 0;
	for (size_t k = 0; k < DCR_ARRAY_SIZE(parts); k++) {
		const uint8_t *src = a + (parts[k] % 4096 ? 16 : 0);
		assert_memory_equal(b.data + at, src, parts[k]);
		at += parts[k];
	}
	/* IF_ABSENT: the second loses, and leaves no temporary. */
	assert_int_equal(dcr_store_put_open(f->st, &p), 0);
	assert_int_equal(dcr_store_put_write(f->st, p, "x", 1), 0);
	assert_int_equal(dcr_store_put_finish(f->st, p, "packs/s", DCR_PUT_IF_ABSENT), -EEXIST);
	/* Aborted: nothing. A bad key: refused, nothing. */
	assert_int_equal(dcr_store_put_open(f->st, &p), 0);
	assert_int_equal(dcr_store_put_write(f->st, p, a, 4096), 0);
	dcr_store_put_abort(f->st, p);
	assert_int_equal(dcr_store_put_open(f->st, &p), 0);
	assert_int_equal(dcr_store_put_finish(f->st, p, "../x", 0), -EINVAL);
	memset(&s, 0, sizeof(s));
	assert_int_equal(dcr_store_list_partial(f->st, remember, &s), 0);
	assert_int_equal(s.n, 0);
	dcr_buf_free(&b);
	free(a);
}

static void test_list_and_latest(void **state)
{
	struct fx *f = *state;
	char out[512] = "";
	uint64_t latest;

	assert_int_equal(dcr_store_latest(f->st, &latest), 0);
	assert_true(latest == 0);
	assert_int_equal(dcr_store_put(f->st, "versions/0000000002", "b", 1, 0), 0);
	assert_int_equal(dcr_store_put(f->st, "versions/0000000010", "c", 1, 0), 0);
	assert_int_equal(dcr_store_put(f->st, "versions/0000000001", "a", 1, 0), 0);
	assert_int_equal(dcr_store_put(f->st, "packs/aa", "p", 1, 0), 0);
	assert_int_equal(dcr_store_list(f->st, "versions/", collect, out), 0);
	assert_string_equal(out, "versions/0000000001;versions/0000000002;versions/0000000010;");
	out[0] = 0;
	assert_int_equal(dcr_store_list(f->st, "versions/00000000", collect, out), 0);
	assert_string_equal(out, "versions/0000000001;versions/0000000002;versions/0000000010;");
	int n = 0;
	assert_int_equal(dcr_store_list(f->st, "", stop_at_two, &n), 42);
	out[0] = 0;
	assert_int_equal(dcr_store_list(f->st, "tags/", collect, out), 0);
	assert_string_equal(out, "");
	assert_int_equal(dcr_store_latest(f->st, &latest), 0);
	assert_true(latest == 10);
}

static void test_bad_keys_and_tags(void **state)
{
	struct fx *f = *state;
	uint64_t v;

	assert_int_equal(dcr_store_put(f->st, "../escape", "x", 1, 0), -EINVAL);
	assert_int_equal(dcr_store_put(f->st, "/abs", "x", 1, 0), -EINVAL);
	assert_int_equal(dcr_store_put(f->st, "a/../../b", "x", 1, 0), -EINVAL);
	assert_int_equal(dcr_store_get_tag(f->st, "stable", &v), -ENOENT);
	assert_int_equal(dcr_store_put_tag(f->st, "stable", 7), 0);
	assert_int_equal(dcr_store_get_tag(f->st, "stable", &v), 0);
	assert_true(v == 7);
	assert_int_equal(dcr_store_put_tag(f->st, "../x", 7), -EINVAL);
	assert_int_equal(dcr_store_put(f->st, "tags/junk", "not a number", 12, 0), 0);
	assert_int_equal(dcr_store_get_tag(f->st, "junk", &v), -EBADMSG);
}

/* Tags signed and not, as objects: both read; a bad second line, a third
 * line or an object too large is -EBADMSG, never a number. */
static void test_signed_tags(void **state)
{
	struct fx *f = *state;
	char key[128], id[DCR_KEYID_LEN + 1], line[DCR_TAG_SIG_TEXT_MAX];
	char obj[2 * DCR_TAG_OBJ_MAX];
	uint8_t check[DCR_HASH_LEN] = { 1, 2, 3 };
	struct dcr_sign_key *k;
	struct dcr_tag_sig ts, back;
	bool is_signed = true;
	uint64_t v = 0;

	snprintf(key, sizeof(key), "%s/key", f->root);
	assert_int_equal(dcr_sign_keygen(key, id), 0);
	assert_int_equal(dcr_sign_key_load(key, &k), 0);
	/* unsigned: not signed, the signature left alone */
	assert_int_equal(dcr_store_put_tag(f->st, "plain", 3), 0);
	memset(&back, 0x5a, sizeof(back));
	assert_int_equal(dcr_store_get_tag_sig(f->st, "plain", &v, &back, &is_signed), 0);
	assert_true(v == 3 && !is_signed && back.time_ns == 0x5a5a5a5a5a5a5a5a);
	/* signed: the line back as written; get_tag reads the number */
	assert_int_equal(dcr_tag_sign(k, "0123456789abcdef0123456789abcdef", "best", 12,
				      check, &ts), 0);
	assert_int_equal(dcr_store_put_tag_signed(f->st, "best", 12, &ts), 0);
	assert_int_equal(dcr_store_get_tag_sig(f->st, "best", &v, &back, &is_signed), 0);
	assert_true(v == 12 && is_signed);
	assert_memory_equal(&back, &ts, sizeof(ts));
	assert_memory_equal(back.pub, dcr_sign_key_pub(k), DCR_SIG_PUB_LEN);
	v = 0;
	assert_int_equal(dcr_store_get_tag(f->st, "best", &v), 0);
	assert_true(v == 12);
	assert_int_equal(dcr_store_get_tag_sig(f->st, "best", &v, NULL, NULL), 0);
	/* the object is "12\n<line>\n" exactly */
	dcr_tag_sig_format(&ts, line, sizeof(line));
	int n = snprintf(obj, sizeof(obj), "12\n%s\n", line);
	struct dcr_buf b;
	dcr_buf_init(&b, 1 << 20);
	assert_int_equal(dcr_store_get(f->st, "tags/best", 0, DCR_GET_ALL, &b), 0);
	assert_int_equal(b.len, (size_t)n);
	assert_memory_equal(b.data, obj, (size_t)n);
	dcr_buf_free(&b);
	/* without the last newline, written by hand: still read */
	assert_int_equal(dcr_store_put(f->st, "tags/hand", obj, (uint64_t)n - 1, 0), 0);
	assert_int_equal(dcr_store_get_tag_sig(f->st, "hand", &v, &back, &is_signed), 0);
	assert_true(v == 12 && is_signed);
	/* a damaged line, a third line, trailing bytes, too large: malformed */
	obj[5] ^= 0x20;
	assert_int_equal(dcr_store_put(f->st, "tags/bad", obj, (uint64_t)n, 0), 0);
	assert_int_equal(dcr_store_get_tag_sig(f->st, "bad", &v, &back, &is_signed), -EBADMSG);
	assert_int_equal(dcr_store_get_tag(f->st, "bad", &v), -EBADMSG);
	obj[5] ^= 0x20;
	int n3 = snprintf(obj + n, sizeof(obj) - (size_t)n, "7\n");
	assert_int_equal(dcr_store_put(f->st, "tags/three", obj, (uint64_t)(n + n3), 0), 0);
	assert_int_equal(dcr_store_get_tag(f->st, "three", &v), -EBADMSG);
	assert_int_equal(dcr_store_put(f->st, "tags/cut", obj, (uint64_t)n - 5, 0), 0);
	assert_int_equal(dcr_store_get_tag(f->st, "cut", &v), -EBADMSG);
	memset(obj, '1', sizeof(obj));
	assert_int_equal(dcr_store_put(f->st, "tags/huge", obj, DCR_TAG_OBJ_MAX + 1, 0), 0);
	assert_int_equal(dcr_store_get_tag(f->st, "huge", &v), -EBADMSG);
	assert_int_equal(dcr_store_put(f->st, "tags/zero", "0\n", 2, 0), 0);
	assert_int_equal(dcr_store_get_tag(f->st, "zero", &v), -EBADMSG);
	assert_int_equal(dcr_store_put(f->st, "tags/nul", "5\n\0", 3, 0), 0);
	assert_int_equal(dcr_store_get_tag(f->st, "nul", &v), -EBADMSG);
	assert_int_equal(dcr_store_put_tag_signed(f->st, "../x", 1, &ts), -EINVAL);
	dcr_sign_key_free(k);
}

/* The store's get, recording the largest length asked for. */
static const struct dcr_store_ops *real_ops;
static uint64_t max_get_len;

static int counting_get(struct dcr_store *st, const char *key, uint64_t off,
			uint64_t len, int64_t deadline, struct dcr_buf *out)
{
	if (len > max_get_len)
		max_get_len = len;
	return real_ops->get(st, key, off, len, deadline, out);
}

/* A 50 MB tag object is refused without being fetched whole (a ranged
 * GET of DCR_TAG_OBJ_MAX + 1 bytes); dcr_store_read_tag reports a
 * malformed one quietly, with what is wrong and a digest of its bytes. */
static void test_tag_bounded(void **state)
{
	struct fx *f = *state;
	static struct dcr_store_ops ops; /* outlives a failed assertion */
	struct dcr_tag_bad bad;
	char path[160];
	uint64_t v;

	snprintf(path, sizeof(path), "%s/store/nested/tags/big", f->root);
	assert_int_equal(dcr_store_put(f->st, "tags/big", "1\n", 2, 0), 0);
	assert_int_equal(truncate(path, 50 << 20), 0);
	real_ops = f->st->ops;
	ops = *real_ops;
	ops.get = counting_get;
	f->st->ops = &ops;
	max_get_len = 0;
	assert_int_equal(dcr_store_read_tag(f->st, "big", &v, NULL, NULL, &bad), -EBADMSG);
	assert_true(max_get_len > 0 && max_get_len <= DCR_TAG_OBJ_MAX + 1);
	assert_non_null(strstr(bad.why, "longer than 400 bytes"));
	uint8_t want[DCR_HASH_LEN], head[DCR_TAG_OBJ_MAX + 1] = { '1', '\n' };
	dcr_sha256(head, sizeof(head), want);
	assert_memory_equal(bad.digest, want, DCR_HASH_LEN);
	max_get_len = 0;
	assert_int_equal(dcr_store_get_tag(f->st, "big", &v), -EBADMSG);
	assert_true(max_get_len > 0 && max_get_len <= DCR_TAG_OBJ_MAX + 1);
	/* other kinds say what is wrong; a good one is read as before */
	assert_int_equal(dcr_store_put(f->st, "tags/minus", "-1\n", 3, 0), 0);
	assert_int_equal(dcr_store_read_tag(f->st, "minus", &v, NULL, NULL, &bad), -EBADMSG);
	assert_non_null(strstr(bad.why, "not a version number"));
	assert_int_equal(dcr_store_put(f->st, "tags/ok", "7\n", 2, 0), 0);
	assert_int_equal(dcr_store_read_tag(f->st, "ok", &v, NULL, NULL, &bad), 0);
	assert_int_equal(v, 7);
	f->st->ops = real_ops;
}

static void test_open_errors(void **state)
{
	struct fx *f = *state;
	struct dcr_store *st;
	char path[160];

	snprintf(path, sizeof(path), "%s/missing", f->root);
	assert_int_equal(dcr_store_open(path, NULL, 0, &st), -ENOENT);
	assert_int_equal(dcr_store_open("s3x://foo", NULL, 0, &st), -EPROTONOSUPPORT);
	assert_int_equal(dcr_store_open("file://relative", NULL, 0, &st), -EINVAL);
	/* Malformed URLs are errors, never local directories. */
	assert_int_equal(dcr_store_open("s3:/bucket/x", NULL, 1, &st), -EINVAL);
	assert_int_equal(dcr_store_open("s3:bucket", NULL, 1, &st), -EINVAL);
	assert_int_equal(dcr_store_open("file:/tmp/x", NULL, 1, &st), -EINVAL);
	assert_int_equal(access("s3:", F_OK), -1);
	snprintf(path, sizeof(path), "%s/afile", f->root);
	FILE *fp = fopen(path, "w");
	fclose(fp);
	assert_int_equal(dcr_store_open(path, NULL, 0, &st), -ENOTDIR);
	snprintf(path, sizeof(path), "file://%s/store/nested", f->root);
	assert_int_equal(dcr_store_open(path, NULL, 0, &st), 0);
	assert_non_null(strstr(st->url, "file:///"));
	dcr_store_close(st);
}

/* Write @text under the marker key, replacing what is there. */
static void put_marker(struct dcr_store *st, const char *text)
{
	assert_int_equal(dcr_store_put(st, DCR_STORE_MARKER, text,
				       strlen(text), 0), 0);
}

static void test_marker(void **state)
{
	struct fx *f = *state;
	struct dcr_store_info a, b;
	struct dcr_store *st;
	char path[160];

	/* A directory that is not a store: -ENOENT, and opening it wrote
	 * nothing into it. */
	snprintf(path, sizeof(path), "%s/plain", f->root);
	assert_int_equal(mkdir(path, 0755), 0);
	assert_int_equal(dcr_store_open(path, NULL, 0, &st), 0);
	assert_int_equal(dcr_store_identify(st, &a), -ENOENT);
	dcr_store_close(st);
	assert_int_equal(rmdir(path), 0); /* still empty */

	/* init creates once; a second init reports the same id. */
	assert_int_equal(dcr_store_identify(f->st, &a), -ENOENT);
	assert_int_equal(dcr_store_init(f->st, &a), 0);
	assert_int_equal(strlen(a.id), 32);
	assert_int_equal(a.format, DCR_STORE_FORMAT);
	assert_false(a.legacy);
	assert_int_equal(dcr_store_init(f->st, &b), -EEXIST);
	assert_string_equal(a.id, b.id);
	assert_int_equal(dcr_store_identify(f->st, &b), 0);
	assert_string_equal(a.id, b.id);

	/* Another incarnation gets another id. */
	assert_int_equal(dcr_store_del(f->st, DCR_STORE_MARKER), 0);
	assert_int_equal(dcr_store_init(f->st, &b), 0);
	assert_string_not_equal(a.id, b.id);

	/* Later lines are ignored; bad ones and newer formats refused. */
	put_marker(f->st, "dcrfs-store 1\nid 0123456789abcdef0123456789abcdef\n"
			  "created 1\nfuture thing\n");
	assert_int_equal(dcr_store_identify(f->st, &b), 0);
	assert_string_equal(b.id, "0123456789abcdef0123456789abcdef");
	put_marker(f->st, "dcrfs-store 1\nid 0123\n");
	assert_int_equal(dcr_store_identify(f->st, &b), -EBADMSG);
	put_marker(f->st, "dcrfs-store 1\nid 0123456789ABCDEF0123456789abcdef\n");
	assert_int_equal(dcr_store_identify(f->st, &b), -EBADMSG);
	put_marker(f->st, "dcrfs-stor 1\nid 0123456789abcdef0123456789abcdef\n");
	assert_int_equal(dcr_store_identify(f->st, &b), -EBADMSG);
	put_marker(f->st, "");
	assert_int_equal(dcr_store_identify(f->st, &b), -EBADMSG);
	assert_int_equal(dcr_store_put(f->st, DCR_STORE_MARKER,
				       "dcrfs-store 1\0id", 16, 0), 0);
	assert_int_equal(dcr_store_identify(f->st, &b), -EBADMSG);
	put_marker(f->st, "dcrfs-store 2\nid 0123456789abcdef0123456789abcdef\n");
	assert_int_equal(dcr_store_identify(f->st, &b), -EPROTONOSUPPORT);
	assert_int_equal(dcr_store_init(f->st, &b), -EPROTONOSUPPORT);

	/* A store from before markers: named by its lowest manifest. */
	assert_int_equal(dcr_store_del(f->st, DCR_STORE_MARKER), 0);
	assert_int_equal(dcr_store_put(f->st, "versions/0000000003", "m3", 2, 0), 0);
	assert_int_equal(dcr_store_put(f->st, "versions/0000000002", "m2", 2, 0), 0);
	assert_int_equal(dcr_store_identify(f->st, &a), 0);
	assert_true(a.legacy);
	assert_int_equal(strncmp(a.id, "legacy-", 7), 0);
	assert_int_equal(strlen(a.id), 7 + 24);
	assert_int_equal(dcr_store_init(f->st, &b), -EEXIST);
	assert_string_equal(a.id, b.id);
	assert_int_equal(dcr_store_put(f->st, "versions/0000000002", "M2", 2, 0), 0);
	assert_int_equal(dcr_store_identify(f->st, &b), 0);
	assert_string_not_equal(a.id, b.id);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_put_get_head_del, setup, teardown),
		cmocka_unit_test_setup_teardown(test_put_large, setup, teardown),
		cmocka_unit_test_setup_teardown(test_put_stream, setup, teardown),
		cmocka_unit_test_setup_teardown(test_if_absent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_if_absent_race, setup, teardown),
		cmocka_unit_test_setup_teardown(test_list_and_latest, setup, teardown),
		cmocka_unit_test_setup_teardown(test_mtime_and_partial, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_keys_and_tags, setup, teardown),
		cmocka_unit_test_setup_teardown(test_signed_tags, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tag_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_open_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_marker, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
