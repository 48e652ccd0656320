/* SPDX-License-Identifier: MIT */
/*
 * s3_list.c - listings of the S3 backend: the objects under a prefix
 * (ListObjectsV2, paged, with each object's size and LastModified), and
 * the incomplete multipart uploads under the store's prefix
 * (ListMultipartUploads) and their abort, for gc. See s3_int.h.
 *
 * A listing is a loop over the server's answers, so it is bounded by
 * them (struct pager): a page that is not the reply asked for (garbage,
 * an empty 200, another document) is an error, not an empty page; a
 * continuation marker the server already gave is a loop and an error;
 * so are more than S3_LIST_EMPTY_RUN_MAX truncated pages in a row that
 * hold nothing, and more than S3_LIST_PAGES_MAX pages. Each error names
 * the server. Every page is one bounded request (s3_timeout), so a
 * server that hands back the same token fails the listing at its
 * second page.
 */
#include "config.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "hash.h"
#include "s3_int.h"

/* 10^8 keys at S3's 1000 a page: past any store of ours. */
#define S3_LIST_PAGES_MAX 100000
#define S3_LIST_EMPTY_RUN_MAX 100

/* The bounds of one listing (see the top of the file). */
struct pager {
	const char *op;     /* "ListObjectsV2", for messages */
	const char *what;   /* the prefix listed */
	uint8_t (*seen)[DCR_XXH_LEN]; /* the markers given so far */
	size_t n, cap;
	unsigned pages, empty_run;
};

/* Whether @b is a reply of kind @root (e.g. "ListBucketResult"). */
static bool is_reply(const struct dcr_buf *b, const char *root)
{
	char open[64];
	int n = snprintf(open, sizeof(open), "<%s", root);

	return b->len && memmem(b->data, b->len, open, (size_t)n);
}

/* Log that the server's reply @what breaks listing @pg; -EIO. */
static int pager_fail(struct dcr_s3_store *s, const struct pager *pg,
		      const char *why)
{
	dcr_err("%s: %s of %s: %s after %u pages: the server at %s is broken "
		"or something between us rewrites its answers; giving up "
		"[bucket %s]", s->base.url, pg->op, pg->what, why, pg->pages,
		s->origin, s->bucket);
	return DCR_ERR(-EIO);
}

/* One more page (@keys entries on it, @marker[0..@len) the next page's
 * marker): 0, or -EIO (logged) if the listing is looping or endless. */
static int pager_next(struct dcr_s3_store *s, struct pager *pg, size_t keys,
		      const void *marker, size_t len)
{
	uint8_t h[DCR_XXH_LEN];

	pg->pages++;
	pg->empty_run = keys ? 0 : pg->empty_run + 1;
	if (pg->pages >= S3_LIST_PAGES_MAX)
		return pager_fail(s, pg, "more pages than any store holds");
	if (pg->empty_run > S3_LIST_EMPTY_RUN_MAX)
		return pager_fail(s, pg, "truncated pages with nothing on them, "
				  "again and again");
	dcr_xxh128(marker, len, h);
	for (size_t i = 0; i < pg->n; i++)
		if (!memcmp(pg->seen[i], h, sizeof(h)))
			return pager_fail(s, pg, "a continuation marker it had "
					  "already given (the listing loops)");
	if (pg->n == pg->cap) {
		size_t cap = pg->cap ? 2 * pg->cap : 64;
		void *p = realloc(pg->seen, cap * sizeof(*pg->seen));
		if (!p)
			return DCR_ERR(-ENOMEM);
		pg->seen = p;
		pg->cap = cap;
	}
	memcpy(pg->seen[pg->n++], h, sizeof(h));
	return 0;
}

/* "2026-12-01T13:02:24.000Z" (S3's LastModified, Initiated) in ns since
 * the epoch; 0 if it is not one. */
static int64_t iso8601_ns(const char *v, size_t vn)
{
	char t[40] = { 0 }, *end;
	struct tm tm = { 0 };
	long ms = 0;

	if (vn >= sizeof(t))
		return 0;
	memcpy(t, v, vn);
	end = strptime(t, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!end)
		return 0;
	if (*end == '.') {
		char *p = end + 1;
		for (int d = 0; d < 3; d++)
			ms = ms * 10 + (isdigit((unsigned char)*p) ? *p++ - '0' : 0);
		while (isdigit((unsigned char)*p))
			p++;
		end = p;
	}
	if (strcmp(end, "Z") && strcmp(end, "+00:00") && *end)
		return 0;
	time_t sec = timegm(&tm);
	return sec <= 0 ? 0 : (int64_t)sec * 1000000000 + (int64_t)ms * 1000000;
}

/* Parse one ListObjectsV2 page; call @fn per key. */
static int list_page(struct dcr_s3_store *s, const struct dcr_buf *b,
		     size_t strip, dcr_list_fn fn, void *arg, char **token,
		     size_t *keys)
{
	const char *p = (const char *)b->data, *end = p + b->len, *v, *c;
	size_t vn, cn;
	int found, ret = 0;

	*token = NULL;
	*keys = 0;
	if (!is_reply(b, "ListBucketResult"))
		goto bad;
	while ((found = xml_next(&p, end, "Contents", &c, &cn)) > 0) {
		++*keys;
		char *key = xml_child(c, cn, "Key", S3_KEY_MAX);
		if (!key)
			goto bad;
		uint64_t size = 0;
		if (xml_find(c, cn, "Size", &v, &vn) && vn < 21) {
			char num[24] = { 0 };
			memcpy(num, v, vn);
			if (dcr_parse_u64(num, &size)) {
				free(key);
				goto bad;
			}
		}
		struct dcr_obj_info info = { .size = size };
		if (xml_find(c, cn, "LastModified", &v, &vn))
			info.mtime_ns = iso8601_ns(v, vn);
		if (strlen(key) > strip)
			ret = fn(key + strip, &info, arg);
		free(key);
		if (ret)
			return ret;
	}
	if (found < 0)
		goto bad;
	if (xml_truncated(b)) {
		if (!xml_find((const char *)b->data, b->len, "NextContinuationToken", &v, &vn) ||
		    !(*token = xml_text(v, vn, 4096)) || !**token) {
			free(*token);
			*token = NULL;
			goto bad;
		}
	}
	return 0;
bad:
	dcr_err("%s: malformed ListObjectsV2 reply from %s (%zu bytes, not a "
		"ListBucketResult as asked) [bucket %s]", s->base.url, s->origin,
		b->len, s->bucket);
	return DCR_ERR(-EIO);
}

int s3_list(struct dcr_store *st, const char *prefix, dcr_list_fn fn,
		   void *arg)
{
	struct dcr_s3_store *s = to_s3(st);
	char full[S3_KEY_MAX + 1];
	struct dcr_buf q, body;
	struct pager pg = { .op = "ListObjectsV2", .what = prefix[0] ? prefix : "(all keys)" };
	char *token = NULL;
	size_t keys;
	int ret;

	int n = snprintf(full, sizeof(full), "%s%s%s", s->prefix,
			 *s->prefix ? "/" : "", prefix);
	if (n < 0 || n > S3_KEY_MAX)
		return DCR_ERR(-ENAMETOOLONG);
	size_t strip = strlen(s->prefix) + (*s->prefix ? 1 : 0);
	dcr_buf_init(&q, 4 * S3_KEY_MAX + 8192);
	dcr_buf_init(&body, S3_LIST_BODY_MAX);
	do {
		/* Parameters in canonical (sorted) order. */
		dcr_buf_reset(&q);
		ret = 0;
		if (token) {
			ret = buf_str(&q, "continuation-token=");
			ret = ret ? ret : uri_encode(&q, token, false);
			ret = ret ? ret : dcr_buf_putc(&q, '&');
			free(token);
			token = NULL;
		}
		ret = ret ? ret : buf_str(&q, "list-type=2&prefix=");
		ret = ret ? ret : uri_encode(&q, full, false);
		ret = ret ? ret : buf_cstr(&q);
		if (ret)
			break;
		dcr_buf_reset(&body);
		struct s3_req r = {
			.method = "GET", .query = (const char *)q.data,
			.what = prefix[0] ? prefix : "(all keys)", .out = &body,
			.timeout_ns = s->read_timeout_ns,
		};
		if ((ret = s3_request(s, &r)))
			break;
		ret = list_page(s, &body, strip, fn, arg, &token, &keys);
		if (!ret && token)
			ret = pager_next(s, &pg, keys, token, strlen(token));
	} while (!ret && token);
	free(token);
	free(pg.seen);
	dcr_buf_free(&q);
	dcr_buf_free(&body);
	return ret;
}

/* --- incomplete multipart uploads (ListMultipartUploads, Abort) */

/* Parse one ListMultipartUploads page; call @fn per upload; the next
 * page's markers (query-encoded, "" at the end) into @next. */
static int uploads_page(struct dcr_s3_store *s, const struct dcr_buf *b,
			size_t strip, dcr_list_fn fn, void *arg,
			struct dcr_buf *next, size_t *keys)
{
	const char *p = (const char *)b->data, *end = p + b->len, *v, *c;
	size_t vn, cn;
	int found, ret = 0;

	*keys = 0;
	if (!is_reply(b, "ListMultipartUploadsResult"))
		goto bad;
	while ((found = xml_next(&p, end, "Upload", &c, &cn)) > 0) {
		++*keys;
		char *key = xml_child(c, cn, "Key", S3_KEY_MAX);
		char *uid = xml_child(c, cn, "UploadId", 1024);
		if (!key || !uid || !*uid) {
			free(key);
			free(uid);
			goto bad;
		}
		struct dcr_obj_info info = { .upload = uid };
		if (xml_find(c, cn, "Initiated", &v, &vn))
			info.mtime_ns = iso8601_ns(v, vn);
		if (strlen(key) > strip)
			ret = fn(key + strip, &info, arg);
		free(key);
		free(uid);
		if (ret)
			return ret;
	}
	if (found < 0)
		goto bad;
	dcr_buf_reset(next);
	if (!xml_truncated(b))
		return 0;
	char *km = xml_child((const char *)b->data, b->len, "NextKeyMarker", S3_KEY_MAX);
	char *um = xml_child((const char *)b->data, b->len, "NextUploadIdMarker", 1024);
	ret = km && um && *km ? 0 : DCR_ERR(-EIO);
	ret = ret ? ret : buf_str(next, "key-marker=");
	ret = ret ? ret : uri_encode(next, km, false);
	ret = ret ? ret : buf_str(next, "&");
	if (!ret && *um) {
		ret = buf_str(next, "upload-id-marker=");
		ret = ret ? ret : uri_encode(next, um, false);
		ret = ret ? ret : buf_str(next, "&");
	}
	free(km);
	free(um);
	if (ret != -EIO)
		return ret;
bad:
	dcr_err("%s: malformed ListMultipartUploads reply from %s [bucket %s]",
		s->base.url, s->origin, s->bucket);
	return DCR_ERR(-EIO);
}

int s3_list_partial(struct dcr_store *st, dcr_list_fn fn, void *arg)
{
	struct dcr_s3_store *s = to_s3(st);
	char full[S3_KEY_MAX + 1];
	struct dcr_buf q, body, next;
	struct pager pg = { .op = "ListMultipartUploads", .what = "(incomplete uploads)" };
	size_t keys;
	int ret;

	snprintf(full, sizeof(full), "%s%s", s->prefix, *s->prefix ? "/" : "");
	size_t strip = strlen(full);
	dcr_buf_init(&q, 4 * S3_KEY_MAX + 8192);
	dcr_buf_init(&next, 4 * S3_KEY_MAX + 8192);
	dcr_buf_init(&body, S3_LIST_BODY_MAX);
	do {
		/* Parameters in canonical (sorted) order: the markers first. */
		dcr_buf_reset(&q);
		ret = next.len ? dcr_buf_append(&q, next.data, next.len) : 0;
		ret = ret ? ret : buf_str(&q, "prefix=");
		ret = ret ? ret : uri_encode(&q, full, false);
		ret = ret ? ret : buf_str(&q, "&uploads=");
		ret = ret ? ret : buf_cstr(&q);
		if (ret)
			break;
		dcr_buf_reset(&body);
		struct s3_req r = {
			.method = "GET", .query = (const char *)q.data,
			.what = "(incomplete uploads)", .out = &body,
			.timeout_ns = s->read_timeout_ns,
		};
		if ((ret = s3_request(s, &r)))
			break;
		ret = uploads_page(s, &body, strip, fn, arg, &next, &keys);
		if (!ret && next.len)
			ret = pager_next(s, &pg, keys, next.data, next.len);
	} while (!ret && next.len);
	free(pg.seen);
	dcr_buf_free(&q);
	dcr_buf_free(&next);
	dcr_buf_free(&body);
	return ret;
}

int s3_abort_partial(struct dcr_store *st, const char *key,
			    const char *upload)
{
	struct dcr_s3_store *s = to_s3(st);
	char okey[S3_KEY_MAX + 1];
	struct dcr_buf q;
	int ret = object_key(s, key, true, okey);

	if (ret)
		return ret;
	dcr_buf_init(&q, 4096);
	ret = buf_str(&q, "uploadId=");
	ret = ret ? ret : uri_encode(&q, upload, false);
	ret = ret ? ret : buf_cstr(&q);
	if (!ret) {
		struct s3_req r = {
			.method = "DELETE", .okey = okey, .query = (const char *)q.data,
			.what = key, .timeout_ns = s->write_timeout_ns,
			.quiet_enoent = true,
		};
		ret = s3_request(s, &r);
	}
	dcr_buf_free(&q);
	return ret;
}
