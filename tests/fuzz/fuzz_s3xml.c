/* SPDX-License-Identifier: MIT */
/*
 * fuzz_s3xml - libFuzzer target for the XML of S3's answers
 * (store/s3_xml.h): the input is a reply body, read the ways the S3
 * backend reads one (store/s3_list.c: a ListObjectsV2 page's Contents,
 * Key, Size and LastModified, the truncation and its continuation token;
 * a ListMultipartUploads page's Upload, Key and UploadId; an error
 * document's Code and Message). Every element found must lie inside the
 * body, a walk must end, and every decoded text must be a string of its
 * own length that, escaped again, decodes to itself.
 */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "s3_xml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Abort unless [v, v+vn) lies inside [s, s+n). */
static void inside(const char *s, size_t n, const char *v, size_t vn)
{
	if (v < s || vn > n || v - s > (ptrdiff_t)(n - vn))
		abort();
}

/* Decode the raw text @v[0..vn) as xml_text does and check the result. */
static void check_text(const char *v, size_t vn, size_t max)
{
	char *t = xml_text(v, vn, max);

	if (!t)
		return;
	size_t tl = strlen(t);
	if (tl > vn || tl > max)
		abort();
	/* Escape it again (at most 6 bytes a byte: &quot;) and decode. */
	char *e = malloc(6 * tl + 1), *o = e;
	if (!e)
		abort();
	for (size_t i = 0; i < tl; i++) {
		const char *r = NULL;
		switch (t[i]) {
		case '&': r = "&amp;"; break;
		case '<': r = "&lt;"; break;
		case '>': r = "&gt;"; break;
		case '"': r = "&quot;"; break;
		}
		if (r) {
			memcpy(o, r, strlen(r));
			o += strlen(r);
		} else {
			*o++ = t[i];
		}
	}
	char *back = xml_text(e, (size_t)(o - e), 6 * tl);
	if (!back || strcmp(back, t))
		abort();
	free(back);
	free(e);
	free(t);
}

/* Walk the elements @outer of s[0..n) and read each child of @children,
 * as the listings do. */
static void walk(const char *s, size_t n, const char *outer,
		 const char *const *children)
{
	const char *p = s, *end = s + n, *c, *v;
	size_t cn, vn, steps = 0;
	int found;

	while ((found = xml_next(&p, end, outer, &c, &cn)) > 0) {
		inside(s, n, c, cn);
		if (p < c + cn || p > end || ++steps > n)
			abort(); /* no progress, or past the end */
		for (const char *const *t = children; *t; t++) {
			if (xml_find(c, cn, *t, &v, &vn)) {
				inside(c, cn, v, vn);
				check_text(v, vn, 1024);
			}
			free(xml_child(c, cn, *t, 1024));
		}
	}
	if (found < -1 || found > 1)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const contents[] = { "Key", "Size", "LastModified", NULL };
	static const char *const uploads[] = { "Key", "UploadId", "Initiated", NULL };
	static const char *const top[] = { "NextContinuationToken", "Code",
		"Message", "UploadId", "NextKeyMarker", "NextUploadIdMarker", NULL };
	/* An exact-size copy, so that a read past the body is seen by ASan. */
	char *s = malloc(size ? size : 1);
	struct dcr_buf b;
	const char *v;
	size_t vn;

	if (!s)
		return 0;
	memcpy(s, data, size);
	walk(s, size, "Contents", contents);
	walk(s, size, "Upload", uploads);
	for (const char *const *t = top; *t; t++) {
		if (xml_find(s, size, *t, &v, &vn)) {
			inside(s, size, v, vn);
			check_text(v, vn, 4096);
		}
	}
	check_text(s, size, size);
	dcr_buf_init(&b, size);
	if (!dcr_buf_append(&b, s, size))
		(void)xml_truncated(&b);
	dcr_buf_free(&b);
	free(s);
	return 0;
}
