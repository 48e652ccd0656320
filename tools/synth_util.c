/* SPDX-License-Identifier: MIT */
/*
 * synth_util.c - dcrfs-synth's notices (msg), allocation that exits on
 * failure, text built in memory and path joining (synth.h).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
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

/* ------------------------------------------------------------ text */

void text_start(struct text *t)
{
	text_free(t);
	t->f = open_memstream(&t->p, &t->len);
	if (!t->f) {
		dcr_err("out of memory");
		exit(1);
	}
}

void text_done(struct text *t)
{
	int e = fclose(t->f);

	t->f = NULL;
	if (e || !t->p) {
		dcr_err("out of memory");
		exit(1);
	}
}

void text_free(struct text *t)
{
	if (t->f)
		fclose(t->f);
	free(t->p);
	*t = (struct text){ 0 };
}

char *xstrdup(const char *s)
{
	char *d = strdup(s);

	if (!d) {
		dcr_err("out of memory");
		exit(1);
	}
	return d;
}

void *xcalloc(size_t n, size_t sz)
{
	void *p = calloc(n ? n : 1, sz);

	if (!p) {
		dcr_err("out of memory");
		exit(1);
	}
	return p;
}

char *path_join(const char *a, const char *b)
{
	char *p = dcr_path_join(a, b);

	if (!p) {
		dcr_err("out of memory");
		exit(1);
	}
	return p;
}
