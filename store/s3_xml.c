/* SPDX-License-Identifier: MIT */
/*
 * s3_xml.c - the XML of S3's answers (s3_xml.h, which says what it
 * assumes of them): an element's text found in a bounded body, the next
 * element of a list, whether a listing is truncated, entities unescaped.
 * Not a general XML parser: enough for the documents S3 sends, and
 * nothing read outside the bounds given, whatever the bytes
 * (tests/unit/test_s3_xml.c, tests/fuzz/fuzz_s3xml.c).
 */
#include "config.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "common.h"

#include "s3_xml.h"

/* "<tag>" and "</tag>" into @open and @close with their lengths; false
 * for a tag too long for them. */
static bool tags(const char *tag, char open[XML_TAG_MAX + 4],
		 char close[XML_TAG_MAX + 4], size_t *ol, size_t *cl)
{
	size_t tl = strlen(tag);

	if (!tl || tl > XML_TAG_MAX)
		return false;
	open[0] = '<';
	memcpy(open + 1, tag, tl);
	open[tl + 1] = '>';
	close[0] = '<';
	close[1] = '/';
	memcpy(close + 2, tag, tl);
	close[tl + 2] = '>';
	*ol = tl + 2;
	*cl = tl + 3;
	return true;
}

bool xml_find(const char *s, size_t n, const char *tag,
	      const char **vs, size_t *vn)
{
	char open[XML_TAG_MAX + 4], close[XML_TAG_MAX + 4];
	size_t ol, cl;

	if (!n || !tags(tag, open, close, &ol, &cl))
		return false;
	const char *a = memmem(s, n, open, ol);
	if (!a)
		return false;
	a += ol;
	const char *b = memmem(a, (size_t)(s + n - a), close, cl);
	if (!b)
		return false;
	*vs = a;
	*vn = (size_t)(b - a);
	return true;
}

int xml_next(const char **p, const char *end, const char *tag,
	     const char **c, size_t *cn)
{
	char open[XML_TAG_MAX + 4], close[XML_TAG_MAX + 4];
	size_t ol, cl;

	if (*p >= end || !tags(tag, open, close, &ol, &cl))
		return 0;
	const char *a = memmem(*p, (size_t)(end - *p), open, ol);
	if (!a)
		return 0;
	a += ol;
	const char *b = memmem(a, (size_t)(end - a), close, cl);
	if (!b)
		return -1;
	*c = a;
	*cn = (size_t)(b - a);
	*p = b + cl;
	return 1;
}

bool xml_truncated(const struct dcr_buf *b)
{
	const char *v;
	size_t vn;

	return xml_find((const char *)b->data, b->len, "IsTruncated", &v, &vn) &&
	       vn == 4 && !memcmp(v, "true", 4);
}

/* The value of the digits @s[0..n) in base 10 or 16, or -1 if there are
 * none, one is not a digit of the base, or there are too many. */
static long char_ref(const char *s, size_t n, bool hex)
{
	long v = 0;

	if (!n || n > 7)
		return -1;
	for (size_t i = 0; i < n; i++) {
		int d;
		char ch = s[i];
		if (ch >= '0' && ch <= '9')
			d = ch - '0';
		else if (hex && ch >= 'a' && ch <= 'f')
			d = ch - 'a' + 10;
		else if (hex && ch >= 'A' && ch <= 'F')
			d = ch - 'A' + 10;
		else
			return -1;
		v = v * (hex ? 16 : 10) + d;
	}
	return v;
}

char *xml_text(const char *s, size_t n, size_t max)
{
	static const struct { const char *e; char c; } ents[] = {
		{ "&amp;", '&' }, { "&lt;", '<' }, { "&gt;", '>' },
		{ "&quot;", '"' }, { "&apos;", '\'' },
	};

	if (n > max)
		return NULL;
	char *out = malloc(n + 1), *o = out;
	if (!out)
		return NULL;
	for (size_t i = 0; i < n;) {
		if (!s[i])
			goto err; /* no NUL in XML; it would cut the string */
		if (s[i] != '&') {
			*o++ = s[i++];
			continue;
		}
		const char *semi = memchr(s + i, ';', DCR_MIN(n - i, (size_t)12));
		if (!semi)
			goto err;
		size_t el = (size_t)(semi - (s + i)) + 1;
		bool done = false;
		for (size_t k = 0; k < DCR_ARRAY_SIZE(ents) && !done; k++) {
			if (strlen(ents[k].e) == el && !memcmp(s + i, ents[k].e, el)) {
				*o++ = ents[k].c;
				done = true;
			}
		}
		if (!done && el >= 4 && s[i + 1] == '#') {
			bool hex = s[i + 2] == 'x' || s[i + 2] == 'X';
			size_t d0 = 2 + (hex ? 1 : 0);
			long v = char_ref(s + i + d0, el - 1 - d0, hex);
			if (v <= 0 || v > 0x7f)
				goto err; /* keys here are ASCII; refuse the rest */
			*o++ = (char)v;
			done = true;
		}
		if (!done)
			goto err;
		i += el;
	}
	*o = 0;
	return out;
err:
	free(out);
	return NULL;
}

char *xml_child(const char *c, size_t cn, const char *tag, size_t max)
{
	const char *v;
	size_t vn;

	return xml_find(c, cn, tag, &v, &vn) ? xml_text(v, vn, max) : NULL;
}
