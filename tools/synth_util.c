/* SPDX-License-Identifier: MIT */
/*
 * synth_util.c - dcrfs-synth's messages, allocation that exits on
 * failure, the growing string and path joining (synth.h).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "synth.h"

int quiet;

void msg(const char *fmt, ...)
{
	va_list ap;

	if (quiet)
		return;
	va_start(ap, fmt);
	fputs(PROG ": ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

void die_msg(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs(PROG ": error: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* ------------------------------------------------------------ strings */

void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(b->p ? b->p + b->len : NULL,
			      b->p ? b->cap - b->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0)
			abort();
		if (b->p && b->len + (size_t)n < b->cap) {
			b->len += (size_t)n;
			return;
		}
		size_t ncap = b->cap ? b->cap * 2 : 4096;
		while (ncap < b->len + (size_t)n + 1)
			ncap *= 2;
		char *np = realloc(b->p, ncap);
		if (!np) {
			die_msg("out of memory");
			exit(1);
		}
		b->p = np;
		b->cap = ncap;
	}
}

char *xstrdup(const char *s)
{
	char *d = strdup(s);

	if (!d) {
		die_msg("out of memory");
		exit(1);
	}
	return d;
}

void *xcalloc(size_t n, size_t sz)
{
	void *p = calloc(n ? n : 1, sz);

	if (!p) {
		die_msg("out of memory");
		exit(1);
	}
	return p;
}

char *path_join(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *p = xcalloc(la + lb + 2, 1);

	memcpy(p, a, la);
	p[la] = '/';
	memcpy(p + la + 1, b, lb);
	return p;
}
