/* SPDX-License-Identifier: MIT */
/* options.c - dcrfs's -o values checked and converted by a table (options.h). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "options.h"

/* @s as @e reads it, into @x: 0 or -EINVAL. */
static int read_value(const struct dcrfs_opt *e, const char *s, uint64_t *x)
{
	if (e->words) {
		for (const struct dcrfs_opt_word *w = e->words; w->word; w++) {
			if (strcmp(s, w->word) == 0) {
				*x = (uint64_t)w->value;
				return 0;
			}
		}
		return -EINVAL;
	}
	if (e->parse(s, x) < 0)
		return -EINVAL;
	if (*x == 0 && (e->flags & DCRFS_OPT_ZERO))
		return 0;
	if (*x < e->min || (e->max && *x > e->max))
		return -EINVAL;
	return 0;
}

/* Value @x of @e into its field in @to[]. */
static void set_field(const struct dcrfs_opt *e, uint64_t x, void *const *to)
{
	char *p = (char *)to[e->to] + e->off;
	uint64_t mul = e->mul ? e->mul : 1, div = e->div ? e->div : 1;

	if (x == 0 && (e->flags & DCRFS_OPT_ZERO_OFF))
		x = (uint64_t)-1; /* two's complement: the field reads -1 */
	else
		x = (x * mul + div - 1) / div; /* in range: no overflow */
	if (e->size == 8) {
		memcpy(p, &x, 8);
	} else {
		uint32_t y = (uint32_t)x;

		memcpy(p, &y, 4);
	}
}

int dcrfs_opts_apply(const struct dcrfs_opt *tab, size_t n, const void *given,
		     void *const *to, const char *prog)
{
	for (size_t i = 0; i < n; i++) {
		const struct dcrfs_opt *e = &tab[i];
		const char *s;
		uint64_t x;

		memcpy(&s, (const char *)given + e->given, sizeof(s));
		if (!s && !(e->flags & DCRFS_OPT_DEFAULT))
			continue;
		if (!s) {
			x = e->def;
		} else if (read_value(e, s, &x) < 0) {
			fprintf(stderr, "%s: bad %s '%s' (%s)\n", prog, e->name,
				s, e->hint);
			return -EINVAL;
		}
		if (e->size)
			set_field(e, x, to);
	}
	return 0;
}
