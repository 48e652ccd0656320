/* SPDX-License-Identifier: MIT */
/*
 * toolopts.h - the options dcrfs-commit and dcrfs-ctl share with the aws
 * CLI (--profile, --region, --endpoint-url, --ca-bundle; each beats its
 * AWS_* variable and the config files, as there) and --log-level.
 */
#ifndef DCR_TOOLOPTS_H
#define DCR_TOOLOPTS_H

#include <getopt.h>

#include "common.h"

/* getopt_long codes, above every short option. */
enum {
	TOOL_OPT_PROFILE = 0x100,
	TOOL_OPT_REGION,
	TOOL_OPT_ENDPOINT,
	TOOL_OPT_CA_BUNDLE,
	TOOL_OPT_LOG_LEVEL,
};

/* Entries for a struct option table. */
#define TOOL_LONGOPTS                                                      \
	{ "profile", required_argument, NULL, TOOL_OPT_PROFILE },          \
	{ "region", required_argument, NULL, TOOL_OPT_REGION },            \
	{ "endpoint-url", required_argument, NULL, TOOL_OPT_ENDPOINT },    \
	{ "ca-bundle", required_argument, NULL, TOOL_OPT_CA_BUNDLE },      \
	{ "log-level", required_argument, NULL, TOOL_OPT_LOG_LEVEL }

/* Help lines for them. */
#define TOOL_USAGE                                                                   \
"      --profile NAME     S3: the AWS profile (beats AWS_PROFILE and the\n"       \
"                         AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY variables)\n"   \
"      --region NAME      S3: the region (beats AWS_REGION, AWS_DEFAULT_REGION\n" \
"                         and the profile's region)\n"                             \
"      --endpoint-url URL S3: http(s)://host[:port] (beats AWS_ENDPOINT_URL_S3,\n" \
"                         AWS_ENDPOINT_URL and the profile's endpoint_url)\n"      \
"      --ca-bundle FILE   S3: CA certificates to trust (beats AWS_CA_BUNDLE)\n"   \
"      --log-level LEVEL  error, warn, info (default) or debug; beats -q, -v\n"

/** What the shared options said (NULL / -1: not given). */
struct tool_opts {
	const char *profile;
	const char *region;
	const char *endpoint;
	const char *ca_bundle;
	int log_level; /* enum dcr_log_level, -1 if not given */
};

/**
 * tool_opt - take getopt_long's @c with @arg if it is a shared option,
 * into @t. 1 if it was one, 0 if not, -1 for a bad value (printed,
 * prefixed with @prog).
 */
int tool_opt(struct tool_opts *t, int c, const char *arg, const char *prog);

/**
 * tool_mirror_opt - add a mirror URL @arg (the value of option @opt, as
 * --mirror or --warm-mirror) to @urls, which holds *@n of at most
 * DCR_MIRRORS_MAX. 0, or -1 when full (printed, prefixed with @prog).
 */
int tool_mirror_opt(const char **urls, int *n, const char *arg,
		    const char *opt, const char *prog);

/**
 * tool_slice_opt - parse @arg, the value of option @opt, as a warm's
 * slice size (64K to 64M) into *@out. 0, or -1 (printed, prefixed with
 * @prog).
 */
int tool_slice_opt(uint64_t *out, const char *arg, const char *opt,
		   const char *prog);

#endif
