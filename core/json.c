/* SPDX-License-Identifier: MIT */
/*
 * json.c - JSON string literals and the UTF-8 check (see json.h).
 */
#include "config.h"

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
