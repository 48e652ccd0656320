/* SPDX-License-Identifier: MIT */
/*
 * json.c - JSON string literals, the UTF-8 check, and the reader of
 * untrusted JSON: checking a text, and the cursor parsers walk a document
 * with (see json.h).
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "json.h"

void dcr_json_str(FILE *f, const char *s)
{
	putc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		switch (c) {
		case '"':
			fputs("\\\"", f);
			break;
		case '\\':
			fputs("\\\\", f);
			break;
		case '\n':
			fputs("\\n", f);
			break;
		case '\t':
			fputs("\\t", f);
			break;
		case '\r':
			fputs("\\r", f);
			break;
		case '\b':
			fputs("\\b", f);
			break;
		case '\f':
			fputs("\\f", f);
			break;
		default:
			if (c < 0x20)
				fprintf(f, "\\u%04x", c);
			else
				putc(c, f);
		}
	}
	putc('"', f);
}

bool dcr_utf8_valid(const char *s, size_t len, size_t *bad)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;

	while (i < len) {
		unsigned c = p[i], n;
		unsigned lo = 0x80, hi = 0xbf; /* bounds of the second byte */

		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf)
			n = 1;
		else if (c >= 0xe0 && c <= 0xef)
			n = 2, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
		else if (c >= 0xf0 && c <= 0xf4)
			n = 3, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
		else
			goto err_bad;
		if (len - i <= n || p[i + 1] < lo || p[i + 1] > hi)
			goto err_bad;
		for (unsigned k = 2; k <= n; k++)
			if ((p[i + k] & 0xc0) != 0x80)
				goto err_bad;
		i += n + 1;
	}
	return true;
err_bad:
	if (bad)
		*bad = i;
	return false;
}
/* ---------------------------------------------------------- reading */

/* The byte at the cursor, unsigned. */
#define AT(j) ((unsigned char)*(j)->p)

void dcr_json_ws(struct dcr_json *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' ||
				 *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

/* Whether the literal @lit is next; consumed if so. */
static bool literal(struct dcr_json *j, const char *lit)
{
	size_t l = strlen(lit);

	if ((size_t)(j->end - j->p) < l || memcmp(j->p, lit, l) != 0)
		return false;
	j->p += l;
	return true;
}

/* One UTF-8 sequence of two to four bytes at j->p (a lead byte >= 0x80),
 * as dcr_utf8_valid has them. */
static bool utf8_seq(struct dcr_json *j)
{
	unsigned char c = AT(j);
	size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;

	if ((size_t)(j->end - j->p) < len || !dcr_utf8_valid(j->p, len, NULL))
		return false;
	j->p += len;
	return true;
}

static bool hex4(const char *p)
{
	for (int k = 0; k < 4; k++)
		if (!((p[k] >= '0' && p[k] <= '9') || (p[k] >= 'a' && p[k] <= 'f') ||
		      (p[k] >= 'A' && p[k] <= 'F')))
			return false;
	return true;
}

/* A string, the opening quote next. */
static bool string(struct dcr_json *j)
{
	j->p++;
	while (j->p < j->end) {
		unsigned char c = AT(j);

		if (c == '"') {
			j->p++;
			return true;
		}
		if (c < 0x20)
			return false;
		if (c >= 0x80) {
			if (!utf8_seq(j))
				return false;
			continue;
		}
		if (c == '\\') {
			if (++j->p >= j->end)
				return false;
			if (*j->p == 'u') {
				if (j->end - j->p < 5 || !hex4(j->p + 1))
					return false;
				j->p += 4;
			} else if (!memchr("\"\\/bfnrt", *j->p, 8)) {
				return false;
			}
		}
		j->p++;
	}
	return false;
}

static bool digits(struct dcr_json *j)
{
	const char *b = j->p;

	while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
		j->p++;
	return j->p > b;
}

/* A number: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)? */
static bool number(struct dcr_json *j)
{
	if (j->p < j->end && *j->p == '-')
		j->p++;
	if (j->p < j->end && *j->p == '0')
		j->p++;
	else if (!digits(j))
		return false;
	if (j->p < j->end && *j->p == '.') {
		j->p++;
		if (!digits(j))
			return false;
	}
	if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
		j->p++;
		if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
			j->p++;
		if (!digits(j))
			return false;
	}
	return true;
}

static bool value(struct dcr_json *j, int depth);

/* The members of an object (@obj) or the elements of an array, the
 * opening bracket consumed. */
static bool container(struct dcr_json *j, int depth, bool obj)
{
	char close = obj ? '}' : ']';

	if (depth > DCR_JSON_DEPTH_MAX)
		return false;
	dcr_json_ws(j);
	if (j->p < j->end && *j->p == close) {
		j->p++;
		return true;
	}
	for (;;) {
		if (obj) {
			dcr_json_ws(j);
			if (j->p >= j->end || *j->p != '"' || !string(j))
				return false;
			dcr_json_ws(j);
			if (j->p >= j->end || *j->p++ != ':')
				return false;
		}
		if (!value(j, depth))
			return false;
		dcr_json_ws(j);
		if (j->p >= j->end)
			return false;
		if (*j->p == close) {
			j->p++;
			return true;
		}
		if (*j->p++ != ',')
			return false;
	}
}

static bool value(struct dcr_json *j, int depth)
{
	dcr_json_ws(j);
	if (j->p >= j->end)
		return false;
	switch (*j->p) {
	case '"':
		return string(j);
	case '{':
		j->p++;
		return container(j, depth + 1, true);
	case '[':
		j->p++;
		return container(j, depth + 1, false);
	case 't':
		return literal(j, "true");
	case 'f':
		return literal(j, "false");
	case 'n':
		return literal(j, "null");
	default:
		return number(j);
	}
}

int dcr_json_expect(struct dcr_json *j, char c)
{
	dcr_json_ws(j);
	if (j->p >= j->end || *j->p != c)
		return -EBADMSG;
	j->p++;
	return 0;
}

int dcr_json_string(struct dcr_json *j, const char **s, size_t *n)
{
	dcr_json_ws(j);
	if (j->p >= j->end || *j->p != '"')
		return -EBADMSG;
	const char *b = j->p + 1;
	if (!string(j))
		return -EBADMSG;
	*s = b;
	*n = (size_t)(j->p - 1 - b);
	return 0;
}

int dcr_json_skip(struct dcr_json *j, int depth)
{
	return value(j, depth) ? 0 : -EBADMSG;
}

int dcr_json_check(const void *text, size_t n)
{
	struct dcr_json j = { text, (const char *)text + n };

	if (!value(&j, 0))
		return -EBADMSG;
	dcr_json_ws(&j);
	return j.p == j.end ? 0 : -EBADMSG;
}
