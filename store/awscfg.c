/* SPDX-License-Identifier: MIT */
/*
 * awscfg.c - AWS-style credential and configuration resolution (see
 * awscfg.h).
 */
#include "config.h"

#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "awscfg.h"
#include "buf.h"
#include "common.h"

/* AWS files are a few KiB; anything this big is not one. */
#define AWS_FILE_MAX (1u << 20)
#define AWS_NAME_MAX 256

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

/* [s, e) trimmed of blanks on both sides. */
static void trim(const char **s, const char **e)
{
	while (*s < *e && is_space(**s))
		(*s)++;
	while (*e > *s && is_space((*e)[-1]))
		(*e)--;
}

/* Does the header text [s, e) (between the brackets) name @want?
 * Runs of blanks compare equal to one space ("profile  x" == "profile x"). */
static bool section_is(const char *s, const char *e, const char *want)
{
	trim(&s, &e);
	while (s < e && *want) {
		if (is_space(*s)) {
			if (*want != ' ')
				return false;
			while (s < e && is_space(*s))
				s++;
			want++;
			continue;
		}
		if (*s++ != *want++)
			return false;
	}
	return s == e && !*want;
}

static bool span_is(const char *s, const char *e, const char *want)
{
	size_t n = strlen(want);
	return (size_t)(e - s) == n && !memcmp(s, want, n);
}

int dcr_aws_ini_get(const char *text, size_t len, const char *section,
		    const char *sub, const char *key, char **val)
{
	const char *p = text, *end = text + len;
	bool in_section = false;
	const char *sub_s = NULL, *sub_e = NULL; /* open nested block */

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		const char *s = p, *e = le;
		p = nl ? nl + 1 : end;

		bool indented = s < e && is_space(*s);
		trim(&s, &e);
		if (s == e || *s == '#' || *s == ';')
			continue;
		if (*s == '[') {
			sub_s = sub_e = NULL;
			const char *close = e - 1;
			in_section = *close == ']' && section_is(s + 1, close, section);
			continue;
		}
		if (!in_section)
			continue;
		const char *eq = memchr(s, '=', (size_t)(e - s));
		if (!eq)
			continue;
		const char *ks = s, *ke = eq, *vs = eq + 1, *ve = e;
		trim(&ks, &ke);
		trim(&vs, &ve);
		if (!indented)
			sub_s = sub_e = NULL;
		if (!indented && vs == ve) {
			sub_s = ks; /* "s3 =" opens a nested block */
			sub_e = ke;
			continue;
		}
		bool want_sub = sub != NULL;
		bool have_sub = indented && sub_s;
		if (want_sub != have_sub)
			continue;
		if (want_sub && !span_is(sub_s, sub_e, sub))
			continue;
		if (!span_is(ks, ke, key))
			continue;
		char *v = strndup(vs, (size_t)(ve - vs));
		if (!v)
			return DCR_ERR(-ENOMEM);
		free(*val);
		*val = v; /* the last assignment wins, as in configparser */
	}
	return *val ? 0 : -ENOENT;
}

/*
 * Read a whole AWS file into @b. With @strict (an explicitly named
 * credentials file), refuse one that other users could read or change.
 * Returns 0, -ENOENT, or another -errno (logged).
 */
static int read_aws_file(const char *path, bool strict, struct dcr_buf *b)
{
	struct stat sb;
	int ret = 0;

	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		ret = DCR_ERR(-errno);
		if (ret != -ENOENT || strict)
			dcr_err("%s: cannot open: %s", path, dcr_strerror(ret));
		return ret;
	}
	if (fstat(fd, &sb) < 0) {
		ret = DCR_ERR(-errno);
		dcr_err("%s: %s", path, dcr_strerror(ret));
		goto err_close;
	}
	if (!S_ISREG(sb.st_mode)) {
		dcr_err("%s: not a regular file", path);
		ret = DCR_ERR(-EINVAL);
		goto err_close;
	}
	if (strict && (sb.st_mode & (S_IRWXG | S_IRWXO))) {
		dcr_err("%s: credentials file is accessible by group or others "
			"(mode %04o); refusing it: chmod 600 %s",
			path, (unsigned)(sb.st_mode & 07777), path);
		ret = DCR_ERR(-EACCES);
		goto err_close;
	}
	if (strict && sb.st_uid != geteuid() && sb.st_uid != 0) {
		dcr_err("%s: credentials file is owned by uid %u, not by us or root; refusing it",
			path, (unsigned)sb.st_uid);
		ret = DCR_ERR(-EACCES);
		goto err_close;
	}
	if ((uint64_t)sb.st_size > AWS_FILE_MAX) {
		dcr_err("%s: too large for an AWS config file", path);
		ret = DCR_ERR(-EFBIG);
		goto err_close;
	}
	dcr_buf_init(b, AWS_FILE_MAX);
	for (;;) {
		if ((ret = dcr_buf_reserve(b, b->len + 4096)))
			goto err_close;
		ssize_t r = read(fd, b->data + b->len, b->cap - b->len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			ret = DCR_ERR(-errno);
			dcr_err("%s: read: %s", path, dcr_strerror(ret));
			goto err_close;
		}
		if (r == 0)
			break;
		b->len += (size_t)r;
		if (b->len >= AWS_FILE_MAX) {
			dcr_err("%s: too large for an AWS config file", path);
			ret = DCR_ERR(-EFBIG);
			goto err_close;
		}
	}
err_close:
	close(fd);
	if (ret) {
		if (b->data)
			memset(b->data, 0, b->cap);
		dcr_buf_free(b);
	}
	return ret;
}

static void wipe_buf(struct dcr_buf *b)
{
	if (b->data)
		memset(b->data, 0, b->cap);
	dcr_buf_free(b);
}

static const char *env(const char *name)
{
	const char *v = getenv(name);
	return v && *v ? v : NULL;
}

/* Path of an AWS file: $VAR, else ~/.aws/@name. malloc'ed, or NULL. */
static char *aws_path(const char *var, const char *name)
{
	const char *v = env(var);
	if (v)
		return strdup(v);
	const char *home = env("HOME");
	if (!home)
		return NULL;
	size_t n = strlen(home) + strlen(name) + 8;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%s/.aws/%s", home, name);
	return p;
}

static int dup_opt(char **dst, const char *src)
{
	if (!src)
		return 0;
	*dst = strdup(src);
	return *dst ? 0 : DCR_ERR(-ENOMEM);
}

/* The profile's section name in the config file. */
static void config_section(const char *profile, char *sec, size_t cap)
{
	if (!strcmp(profile, "default"))
		snprintf(sec, cap, "default");
	else
		snprintf(sec, cap, "profile %s", profile);
}

/* Look @key up in the config file text (NULL text: not found). */
static int conf_get(const struct dcr_buf *conf, const char *profile,
		    const char *sub, const char *key, char **val)
{
	char sec[AWS_NAME_MAX + 16];

	if (!conf->data)
		return -ENOENT;
	config_section(profile, sec, sizeof(sec));
	int ret = dcr_aws_ini_get((const char *)conf->data, conf->len, sec, sub,
				  key, val);
	if (ret == -ENOENT && !strcmp(profile, "default"))
		ret = dcr_aws_ini_get((const char *)conf->data, conf->len,
				      "profile default", sub, key, val);
	return ret;
}

/* Take the three credential keys from a section of an INI text. */
static int creds_from_ini(const struct dcr_buf *b, const char *section,
			  struct dcr_aws_cfg *c)
{
	const char *t = (const char *)b->data;
	int ret = dcr_aws_ini_get(t, b->len, section, NULL, "aws_access_key_id",
				  &c->access_key);
	if (ret)
		return ret;
	ret = dcr_aws_ini_get(t, b->len, section, NULL, "aws_secret_access_key",
			      &c->secret_key);
	if (ret)
		return ret == -ENOENT ? DCR_ERR(-EINVAL) : ret;
	ret = dcr_aws_ini_get(t, b->len, section, NULL, "aws_session_token",
			      &c->session_token);
	return ret == -ENOENT ? 0 : ret;
}

static int set_source(struct dcr_aws_cfg *c, const char *what,
		      const char *profile)
{
	size_t n = strlen(what) + (profile ? strlen(profile) : 0) + 16;
	if (!(c->cred_source = malloc(n)))
		return DCR_ERR(-ENOMEM);
	if (profile)
		snprintf(c->cred_source, n, "%s [%s]", what, profile);
	else
		snprintf(c->cred_source, n, "%s", what);
	return 0;
}

static bool name_ok(const char *s)
{
	size_t n = strlen(s);
	if (!n || n > AWS_NAME_MAX)
		return false;
	for (; *s; s++)
		if (*s == '[' || *s == ']' || *s == '\n' || (unsigned char)*s < 0x20)
			return false;
	return true;
}

/* Resolve the keys (see awscfg.h for the order). */
static int load_credentials(const struct dcr_store_cfg *o, const char *profile,
			    const struct dcr_buf *conf, struct dcr_aws_cfg *c)
{
	struct dcr_buf b = { 0 };
	int ret;

	if (o && o->credentials) {
		ret = read_aws_file(o->credentials, true, &b);
		if (ret)
			return ret;
		ret = creds_from_ini(&b, profile, c);
		wipe_buf(&b);
		if (ret == -ENOENT) {
			dcr_err("%s: no aws_access_key_id in profile [%s]",
				o->credentials, profile);
			return ret;
		}
		if (ret == -EINVAL)
			dcr_err("%s: profile [%s] has aws_access_key_id but no aws_secret_access_key",
				o->credentials, profile);
		return ret ? ret : set_source(c, o->credentials, profile);
	}

	const char *ak = env("AWS_ACCESS_KEY_ID"), *sk = env("AWS_SECRET_ACCESS_KEY");
	if (!(o && o->profile) && (ak || sk)) {
		if (!ak || !sk) {
			dcr_err("%s is set but %s is not", ak ? "AWS_ACCESS_KEY_ID" :
				"AWS_SECRET_ACCESS_KEY", ak ? "AWS_SECRET_ACCESS_KEY" :
				"AWS_ACCESS_KEY_ID");
			return DCR_ERR(-EINVAL);
		}
		if ((ret = dup_opt(&c->access_key, ak)) ||
		    (ret = dup_opt(&c->secret_key, sk)) ||
		    (ret = dup_opt(&c->session_token, env("AWS_SESSION_TOKEN"))))
			return ret;
		return set_source(c, "environment", NULL);
	}

	char *path = aws_path("AWS_SHARED_CREDENTIALS_FILE", "credentials");
	if (path) {
		ret = read_aws_file(path, false, &b);
		if (!ret) {
			ret = creds_from_ini(&b, profile, c);
			wipe_buf(&b);
			if (!ret)
				ret = set_source(c, path, profile);
			else if (ret == -EINVAL)
				dcr_err("%s: profile [%s] has aws_access_key_id but no aws_secret_access_key",
					path, profile);
		}
		if (ret != -ENOENT) {
			free(path);
			return ret;
		}
		free(path);
	}
	if (conf->data) {
		char sec[AWS_NAME_MAX + 16];
		config_section(profile, sec, sizeof(sec));
		ret = creds_from_ini(conf, sec, c);
		if (ret == -EINVAL)
			dcr_err("config profile [%s] has aws_access_key_id but no aws_secret_access_key",
				sec);
		if (!ret)
			ret = set_source(c, "config file", profile);
		if (ret != -ENOENT)
			return ret;
	}
	return -ENOENT;
}

/*
 * @e made fit for a log line: any userinfo ("user:password@", which an
 * endpoint must not have but a user may well write) is replaced by
 * "***@" so that no secret is echoed - everything between the scheme (or
 * the start) and the last '@' goes, since a password may itself hold
 * '/', '?' or '@' - and bytes outside printable ASCII become '?'.
 */
static void endpoint_for_log(const char *e, char *out, size_t cap)
{
	const char *at = strrchr(e, '@'), *sep = strstr(e, "://");
	const char *auth = sep && (!at || sep < at) ? sep + 3 : e;
	size_t o = 0;

	if (!cap)
		return;
	if (!at)
		auth = e + strlen(e);
	for (const char *p = e; p < auth && o + 1 < cap; p++)
		out[o++] = *p;
	if (at) {
		for (const char *p = "***"; *p && o + 1 < cap; p++)
			out[o++] = *p;
		for (const char *p = at; *p && o + 1 < cap; p++)
			out[o++] = *p;
	}
	out[o] = 0;
	for (char *p = out; *p; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
			*p = '?';
}

static int normalize_endpoint(char **ep)
{
	char *e = *ep;
	size_t n = strlen(e);

	while (n && e[n - 1] == '/')
		e[--n] = 0;
	const char *host = NULL;
	if (!strncmp(e, "http://", 7))
		host = e + 7;
	else if (!strncmp(e, "https://", 8))
		host = e + 8;
	if (!host || !*host || strchr(host, '/') || strchr(host, '?') ||
	    strchr(host, '@') || strpbrk(host, " \t\r\n")) {
		char shown[256];

		endpoint_for_log(e, shown, sizeof(shown));
		dcr_err("endpoint '%s' is not http(s)://host[:port]%s", shown,
			strchr(e, '@') ? " (no user:password@ in it: "
			"credentials come from the AWS settings)" : "");
		return DCR_ERR(-EINVAL);
	}
	return 0;
}

int dcr_aws_cfg_load(const struct dcr_store_cfg *o, struct dcr_aws_cfg *c)
{
	struct dcr_buf conf = { 0 };
	char *val = NULL;
	int ret;

	memset(c, 0, sizeof(*c));
	c->path_style = -1;

	const char *profile = o && o->profile ? o->profile : env("AWS_PROFILE");
	if (!profile)
		profile = env("AWS_DEFAULT_PROFILE");
	if (!profile)
		profile = "default";
	if (!name_ok(profile)) {
		dcr_err("invalid AWS profile name");
		return DCR_ERR(-EINVAL);
	}
	bool explicit_profile = (o && o->profile) || env("AWS_PROFILE");

	char *cpath = aws_path("AWS_CONFIG_FILE", "config");
	if (cpath) {
		ret = read_aws_file(cpath, false, &conf);
		free(cpath);
		if (ret && ret != -ENOENT)
			return ret;
	}

	if (o && o->no_sign_request) {
		/* Unsigned on purpose (a public bucket), as the aws CLI's
		 * --no-sign-request: credentials are not even looked for. */
		ret = 0;
	} else {
		ret = load_credentials(o, profile, &conf, c);
	}
	if (ret == -ENOENT) {
		if (o && o->credentials)
			goto err_free;
		if (explicit_profile) {
			dcr_err("AWS profile '%s' not found in the credentials or config file",
				profile);
			goto err_free;
		}
		char *cp = aws_path("AWS_SHARED_CREDENTIALS_FILE", "credentials");
		char *fp = aws_path("AWS_CONFIG_FILE", "config");
		dcr_err("no AWS credentials found: looked in AWS_ACCESS_KEY_ID and "
			"AWS_SECRET_ACCESS_KEY, then profile [%s] of %s and %s; "
			"set them, or pass --no-sign-request (dcrfs: -o "
			"no_sign_request) for a bucket that allows anonymous "
			"access", profile, cp ? cp : "~/.aws/credentials",
			fp ? fp : "~/.aws/config");
		free(cp);
		free(fp);
		ret = DCR_ERR(-EACCES);
	}
	if (ret)
		goto err_free;

	/* region */
	const char *r = o && o->region ? o->region : env("AWS_REGION");
	if (!r)
		r = env("AWS_DEFAULT_REGION");
	if (r) {
		ret = dup_opt(&c->region, r);
	} else {
		ret = conf_get(&conf, profile, NULL, "region", &c->region);
		if (ret == -ENOENT)
			ret = dup_opt(&c->region, "us-east-1");
	}
	if (ret)
		goto err_free;
	for (const char *p = c->region; *p; p++) {
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-' || *p == '_')) {
			dcr_err("invalid region '%s'", c->region);
			ret = DCR_ERR(-EINVAL);
			goto err_free;
		}
	}

	/* endpoint */
	const char *ign = env("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS");
	bool use_cfg_ep = !(ign && !strcasecmp(ign, "true"));
	const char *ep = o && o->endpoint ? o->endpoint : NULL;
	if (!ep && use_cfg_ep)
		ep = env("AWS_ENDPOINT_URL_S3");
	if (!ep && use_cfg_ep)
		ep = env("AWS_ENDPOINT_URL");
	if (ep) {
		ret = dup_opt(&c->endpoint, ep);
	} else if (use_cfg_ep) {
		ret = conf_get(&conf, profile, "s3", "endpoint_url", &c->endpoint);
		if (ret == -ENOENT)
			ret = conf_get(&conf, profile, NULL, "endpoint_url", &c->endpoint);
		if (ret == -ENOENT)
			ret = 0;
	}
	if (ret)
		goto err_free;
	if (c->endpoint && (ret = normalize_endpoint(&c->endpoint)))
		goto err_free;

	/* addressing */
	if (o && o->path_style >= 0) {
		c->path_style = o->path_style ? 1 : 0;
	} else {
		ret = conf_get(&conf, profile, "s3", "addressing_style", &val);
		if (!ret) {
			if (!strcmp(val, "path"))
				c->path_style = 1;
			else if (!strcmp(val, "virtual"))
				c->path_style = 0;
			else if (strcmp(val, "auto"))
				dcr_warn("unknown addressing_style '%s' ignored", val);
		} else if (ret != -ENOENT) {
			goto err_free;
		}
		free(val);
		val = NULL;
	}

	/* CA bundle */
	const char *ca = o && o->ca_bundle ? o->ca_bundle : env("AWS_CA_BUNDLE");
	ret = 0;
	if (ca)
		ret = dup_opt(&c->ca_bundle, ca);
	else if ((ret = conf_get(&conf, profile, NULL, "ca_bundle", &c->ca_bundle)) == -ENOENT)
		ret = 0;
	if (ret)
		goto err_free;

	wipe_buf(&conf);
	return 0;

err_free:
	free(val);
	wipe_buf(&conf);
	dcr_aws_cfg_free(c);
	return ret;
}

static void free_secret(char *s)
{
	if (!s)
		return;
	volatile char *v = s;
	while (*v)
		*v++ = 0;
	free(s);
}

void dcr_aws_cfg_free(struct dcr_aws_cfg *c)
{
	if (!c)
		return;
	free(c->access_key);
	free_secret(c->secret_key);
	free_secret(c->session_token);
	free(c->region);
	free(c->endpoint);
	free(c->ca_bundle);
	free(c->cred_source);
	memset(c, 0, sizeof(*c));
	c->path_style = -1;
}
