/* SPDX-License-Identifier: MIT */
/*
 * awscfg.h - resolve S3 credentials, region, endpoint and addressing the
 * way AWS tools do, for the S3 backend.
 *
 * Sources, first match wins (each item is resolved on its own):
 *
 *   credentials  1. options->credentials: an AWS credentials file
 *                   (section [profile-or-default]); refused when it is
 *                   not a regular file owned by the caller or root, or
 *                   has any group/other permission bit (chmod 600).
 *                2. AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY
 *                   (+ AWS_SESSION_TOKEN), unless options->profile names
 *                   a profile explicitly (as with aws --profile).
 *                3. profile options->profile, AWS_PROFILE, or "default" in
 *                   AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials), then
 *                   in AWS_CONFIG_FILE (~/.aws/config, "[profile NAME]").
 *                4. none: an error (-EACCES, logged, naming where it
 *                   looked), as the aws CLI's "Unable to locate
 *                   credentials". Requests are sent unsigned (a public
 *                   bucket) only with options->no_sign_request, which
 *                   skips 1-3. A profile named explicitly but found
 *                   nowhere is an error.
 *   region       options->region, AWS_REGION, AWS_DEFAULT_REGION, the
 *                profile's "region" in the config file, "us-east-1".
 *   endpoint     options->endpoint, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL,
 *                the profile's "s3 = / endpoint_url" then "endpoint_url"
 *                (environment and config skipped when
 *                AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true), else AWS.
 *   addressing   options->path_style (0 virtual, 1 path), the profile's
 *                "s3 = / addressing_style" (path|virtual|auto), else auto.
 *   CA bundle    options->ca_bundle, AWS_CA_BUNDLE, the profile's
 *                "ca_bundle".
 *
 * Secrets are never logged; messages name files, profiles and variables.
 */
#ifndef DCR_AWSCFG_H
#define DCR_AWSCFG_H

#include "store.h"

/** Resolved settings; every string is malloc'ed or NULL. */
struct dcr_aws_cfg {
	char *access_key;    /* NULL: anonymous (unsigned requests) */
	char *secret_key;
	char *session_token; /* NULL unless temporary credentials */
	char *region;        /* never NULL after a successful load */
	char *endpoint;      /* "http(s)://host[:port]" without a trailing
			      * '/'; NULL = AWS's own endpoint for region */
	int path_style;      /* 1 path, 0 virtual-hosted, -1 auto */
	char *ca_bundle;     /* PEM file for certificate checks, or NULL */
	char *cred_source;   /* where the keys came from, for messages */
};

/**
 * dcr_aws_cfg_load - resolve @out from @opts (may be NULL), the
 * environment and the AWS files. Returns 0, or -errno with one message
 * logged: -EACCES for a credentials file with unsafe permissions, -ENOENT
 * for a missing explicit file or profile, -EINVAL for malformed values
 * (an endpoint that is not http(s)://host[:port], a key without its
 * secret), -ENOMEM. On failure @out holds nothing to free.
 * Thread-safe as long as nobody modifies the environment meanwhile.
 */
int dcr_aws_cfg_load(const struct dcr_store_cfg *opts, struct dcr_aws_cfg *out);

/** Free the strings of @c (wiping the secrets first); NULL accepted. */
void dcr_aws_cfg_free(struct dcr_aws_cfg *c);

/**
 * dcr_aws_ini_get - look up @key in section @section of an AWS-style INI
 * text (@text, @len bytes, need not be NUL-terminated). With @sub, look
 * in the nested block "sub =" of that section (e.g. "s3"). Returns 0 and
 * a malloc'ed value in *@val, -ENOENT if absent, -ENOMEM. Exposed for the
 * unit tests.
 */
int dcr_aws_ini_get(const char *text, size_t len, const char *section,
		    const char *sub, const char *key, char **val);

#endif /* DCR_AWSCFG_H */
