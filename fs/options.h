/* SPDX-License-Identifier: MIT */
/*
 * options.h - dcrfs's -o values, checked and converted by one table
 * (args.c has it): per option, how its value is read (a parser and
 * bounds, or a list of words), the field it sets, its default and what
 * the error message says is valid. fuse_opt_parse collects the values
 * as strings first; dcrfs_opts_apply does the rest in one loop.
 */
#ifndef DCRFS_OPTIONS_H
#define DCRFS_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

/** A word an option's value may be, and the number it sets. */
struct dcrfs_opt_word {
	const char *word;
	int value;
};

/* struct dcrfs_opt's flags */
#define DCRFS_OPT_DEFAULT  1u /* not given, the field gets @def */
#define DCRFS_OPT_ZERO     2u /* 0 is valid, though below @min */
#define DCRFS_OPT_ZERO_OFF 4u /* 0 sets the field to -1 ("off") */

/**
 * struct dcrfs_opt - one -o option with a value. The value is read by
 * @parse (0 or -errno, as dcr_parse_size, dcr_parse_ms, dcr_parse_u64)
 * and must lie in [@min, @max], or it is one of @words; the field at
 * @off in struct number @to of dcrfs_opts_apply's @to (@size bytes, 4 or
 * 8; 0: the value is only checked) gets it times @mul, divided by @div
 * rounded up. The field of an option not given is left alone, or set to
 * @def (the value as given, before @mul and @div) with DCRFS_OPT_DEFAULT.
 */
struct dcrfs_opt {
	const char *name;  /* as after -o; the message names it */
	size_t given;      /* offset of its value (char *; NULL: not given) */
	int (*parse)(const char *s, uint64_t *out); /* NULL with @words */
	uint64_t min, max; /* inclusive; max 0: no upper bound */
	const struct dcrfs_opt_word *words; /* ends with { NULL, 0 } */
	unsigned int flags; /* DCRFS_OPT_* */
	uint64_t def;
	uint32_t mul, div;  /* 0: 1; other values need a @max that the
			       product does not overflow from */
	unsigned int to;
	size_t off, size;
	const char *hint;   /* "bad NAME 'VALUE' (HINT)" */
};

/* @to, @off and @size for the field @member of a @type, which must be 4
 * or 8 bytes wide (else the build fails). */
#define DCRFS_OPT_FIELD(idx, type, member)                                     \
	.to = (idx), .off = offsetof(type, member),                           \
	.size = sizeof(((type *)0)->member) +                                 \
		0 * sizeof(struct {                                           \
			int ok : (sizeof(((type *)0)->member) == 4 ||         \
				  sizeof(((type *)0)->member) == 8) ? 1 : -1; \
		})

/**
 * dcrfs_opts_apply - check and convert, in the table's order, each of
 * the @n options of @tab whose value is in @given (the struct the
 * options were collected into), setting their fields in the structs
 * @to[]. 0; -EINVAL at the first bad value, after saying on stderr
 * "@prog: bad NAME 'VALUE' (HINT)" (the fields before it may be set).
 */
int dcrfs_opts_apply(const struct dcrfs_opt *tab, size_t n, const void *given,
		     void *const *to, const char *prog);

#endif /* DCRFS_OPTIONS_H */
