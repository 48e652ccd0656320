/* SPDX-License-Identifier: MIT */
/*
 * s3_xml.c - the XML of S3's answers (see s3_int.h): an element's text
 * found in a bounded body, the next element of a list, whether a listing
 * is truncated, entities unescaped. Not a general XML parser: enough for
 * the documents S3 sends.
 */
#include "config.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "common.h"

#include "s3_int.h"

/*
 * Find the text of the first <tag>...</tag> in [s, s+n). Bodies are
 * bounded buffers, not strings; no nesting of the same tag is assumed
 * (true of every S3 response used here).
 */
bool xml_find(const char *s, size_t n, const char *tag,
		     const char **vs, size_t *vn)
{
	char open[64], close[64];
	int ol = snprintf(open, sizeof(open), "<%s>", tag);
	int cl = snprintf(close, sizeof(close), "</%s>", tag);
	const char *a = memmem(s, n, open, (size_t)ol);
	if (!a)
		return false;
	a += ol;
	const char *b = memmem(a, (size_t)(s + n - a), close, (size_t)cl);
	if (!b)
		return false;
	*vs = a;
	*vn = (size_t)(b - a);
	return true;
}

/*
 * The next <tag>...</tag> at or after *@p (before @end): its body into
 * @c/@cn and *@p moved past it. 1 found, 0 none left, -1 unclosed.
 */
int xml_next(const char **p, const char *end, const char *tag,
		    const char **c, size_t *cn)
{
	char open[64], close[64];
	int ol = snprintf(open, sizeof(open), "<%s>", tag);
	int cl = snprintf(close, sizeof(close), "</%s>", tag);
	const char *a = memmem(*p, (size_t)(end - *p), open, (size_t)ol);

	if (!a)
		return 0;
	const char *b = memmem(a, (size_t)(end - a), close, (size_t)cl);
	if (!b)
		return -1;
	*c = a + ol;
	*cn = (size_t)(b - *c);
	*p = b + cl;
	return 1;
}

/* Whether the listing @b says <IsTruncated>true</IsTruncated>. */
bool xml_truncated(const struct dcr_buf *b)
{
	const char *v;
	size_t vn;

	return xml_find((const char *)b->data, b->len, "IsTruncated", &v, &vn) &&
	       vn == 4 && !memcmp(v, "true", 4);
}

/* Decode XML text (the five entities and &#N;/&#xN;) into a new string of
 * at most @max bytes. NULL on malformed input, overflow or no memory. */
char *xml_text(const char *s, size_t n, size_t max)
{
	if (n > max)
		return NULL;
	char *out = malloc(n + 1), *o = out;
	if (!out)
		return NULL;
	for (size_t i = 0; i < n;) {
		if (s[i] != '&') {
			*o++ = s[i++];
			continue;
		}
		const char *semi = memchr(s + i, ';', DCR_MIN(n - i, (size_t)12));
		if (!semi)
			goto err;
		size_t el = (size_t)(semi - (s + i)) + 1;
		static const struct { const char *e; char c; } ents[] = {
			{ "&amp;", '&' }, { "&lt;", '<' }, { "&gt;", '>' },
			{ "&quot;", '"' }, { "&apos;", '\'' },
		};
		bool done = false;
		for (size_t k = 0; k < DCR_ARRAY_SIZE(ents) && !done; k++) {
			if (strlen(ents[k].e) == el && !memcmp(s + i, ents[k].e, el)) {
				*o++ = ents[k].c;
				done = true;
			}
		}
		if (!done && el >= 4 && s[i + 1] == '#') {
			char num[12] = { 0 };
			memcpy(num, s + i + 2, el - 3);
			char *end;
			unsigned long v = (num[0] == 'x' || num[0] == 'X') ?
				strtoul(num + 1, &end, 16) : strtoul(num, &end, 10);
			if (*end || v == 0 || v > 0x7f)
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

/* The text of <@tag> in [c, c+cn) decoded, at most @max bytes; NULL if
 * absent, malformed or no memory. */
char *xml_child(const char *c, size_t cn, const char *tag, size_t max)
{
	const char *v;
	size_t vn;

	return xml_find(c, cn, tag, &v, &vn) ? xml_text(v, vn, max) : NULL;
}
