/* SPDX-License-Identifier: MIT */
/* toolopts.c - the options dcrfs-commit and dcrfs-ctl share (toolopts.h). */
#include "config.h"

#include <stdio.h>

#include "common.h"
#include "mirror.h"
#include "toolopts.h"

int tool_opt(struct tool_opts *t, int c, const char *arg, const char *prog)
{
	enum dcr_log_level lvl;

	switch (c) {
	case TOOL_OPT_PROFILE:
		t->profile = arg;
		return 1;
	case TOOL_OPT_REGION:
		t->region = arg;
		return 1;
	case TOOL_OPT_ENDPOINT:
		t->endpoint = arg;
		return 1;
	case TOOL_OPT_CA_BUNDLE:
		t->ca_bundle = arg;
		return 1;
	case TOOL_OPT_LOG_LEVEL:
		if (dcr_log_parse_level(arg, &lvl) < 0) {
			fprintf(stderr, "%s: --log-level: '%s' is not error, "
				"warn, info or debug\n", prog, arg);
			return -1;
		}
		t->log_level = (int)lvl;
		return 1;
	default:
		return 0;
	}
}

int tool_mirror_opt(const char **urls, int *n, const char *arg,
		    const char *opt, const char *prog)
{
	if (*n == DCR_MIRRORS_MAX) {
		fprintf(stderr, "%s: more than %d %s\n", prog, DCR_MIRRORS_MAX, opt);
		return -1;
	}
	urls[(*n)++] = arg;
	return 0;
}

int tool_slice_opt(uint64_t *out, const char *arg, const char *opt,
		   const char *prog)
{
	if (dcr_parse_size(arg, out) || *out < (64u << 10) || *out > (64u << 20)) {
		fprintf(stderr, "%s: %s: '%s' must be a size from 64K to 64M\n",
			prog, opt, arg);
		return -1;
	}
	return 0;
}
