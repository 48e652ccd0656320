/* SPDX-License-Identifier: MIT */
/*
 * s3.c - the S3 object-store backend (see s3.h): object keys, the store
 * ops (head, get, put with the check that the server honours
 * conditional puts, del, close) and opening a store (URL, settings,
 * addressing, time bounds, curl's shared DNS and TLS sessions). The
 * requests are s3_request.c's (see s3_int.h for the other files).
 */
#include "config.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <curl/curl.h>

#include "awscfg.h"
#include "buf.h"
#include "common.h"
#include "cpus.h"
#include "hash.h"
#include "s3.h"

#include "s3_int.h"

/* ------------------------------------------------------ curl plumbing */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init_once(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void share_lock(CURL *h, curl_lock_data d, curl_lock_access a, void *arg)
{
	struct dcr_s3_store *s = arg;
	(void)h;
	(void)a;
	if ((unsigned)d < CURL_LOCK_DATA_LAST)
		pthread_mutex_lock(&s->share_lock[d]);
}

static void share_unlock(CURL *h, curl_lock_data d, void *arg)
{
	struct dcr_s3_store *s = arg;
	(void)h;
	if ((unsigned)d < CURL_LOCK_DATA_LAST)
		pthread_mutex_unlock(&s->share_lock[d]);
}

/* ---------------------------------------------------------- keys */

static bool key_valid(const char *key)
{
	if (!*key || key[0] == '/')
		return false;
	for (const char *p = key; *p;) {
		const char *e = strchrnul(p, '/');
		size_t n = (size_t)(e - p);
		if (n == 0 || (p[0] == '.' && (n == 1 || (n == 2 && p[1] == '.'))))
			return false;
		for (const char *q = p; q < e; q++)
			if ((unsigned char)*q < 0x20 || *q == 0x7f)
				return false;
		p = *e ? e + 1 : e;
	}
	return true;
}

/* "prefix/key" into @out. -EINVAL for a bad key, -ENAMETOOLONG. */
int object_key(const struct dcr_s3_store *s, const char *key,
		      bool check, char out[S3_KEY_MAX + 1])
{
	if (check && !key_valid(key))
		return DCR_ERR(-EINVAL);
	int n = snprintf(out, S3_KEY_MAX + 1, "%s%s%s", s->prefix,
			 *s->prefix ? "/" : "", key);
	if (n < 0 || n > S3_KEY_MAX)
		return DCR_ERR(-ENAMETOOLONG);
	return 0;
}

/* ---------------------------------------------------------- ops */

static int s3_head(struct dcr_store *st, const char *key, uint64_t *size)
{
	struct dcr_s3_store *s = to_s3(st);
	char okey[S3_KEY_MAX + 1];
	int ret = object_key(s, key, true, okey);

	if (ret)
		return ret;
	struct s3_req r = {
		.method = "HEAD", .okey = okey, .what = key,
		.timeout_ns = s->read_timeout_ns, .quiet_enoent = true,
	};
	ret = s3_request(s, &r);
	if (ret)
		return ret;
	if (!r.has_clen) {
		dcr_err("%s: HEAD %s: no Content-Length in the reply", st->url, key);
		return DCR_ERR(-EIO);
	}
	*size = r.clen;
	return 0;
}

static int s3_get(struct dcr_store *st, const char *key, uint64_t off,
		  uint64_t len, int64_t deadline, struct dcr_buf *out)
{
	struct dcr_s3_store *s = to_s3(st);
	char okey[S3_KEY_MAX + 1];
	uint64_t size;
	int ret = object_key(s, key, true, okey);

	if (ret)
		return ret;
	if (len == 0)
		return s3_head(st, key, &size); /* existence only */
	struct s3_req r = {
		.method = "GET", .okey = okey, .what = key, .out = out,
		.has_range = off > 0 || len != DCR_GET_ALL,
		.range_off = off, .range_len = len,
		.timeout_ns = s->read_timeout_ns, .quiet_enoent = true,
		.deadline = deadline,
	};
	return s3_request(s, &r);
}

/*
 * A conditional PUT of @key was refused (412) on a retry after an
 * attempt that may have taken effect unseen (a timeout or connection
 * reset after sending, a 5xx): that attempt may have stored the
 * object and lost its reply, so the 412 may be about our own write.
 * Publishing a version relies on "-EEXIST: someone else took the key"
 * (the committer moves on to the next number and would publish the same
 * manifest twice), so read the object back: if it holds exactly @data,
 * the put is ours and succeeded. Another writer does not produce the
 * same bytes in practice (a manifest carries its commit time); if one
 * did, the object holds what we wanted anyway. Retries after refusals
 * (409, 429, never connected) do not get here, so writers racing with
 * identical bytes still see exactly one winner in that case.
 * 0 (ours), -EEXIST (someone else's) or -EIO (cannot tell: failing is
 * safe, guessing either way is not).
 */
static int put_was_ours(struct dcr_s3_store *s, const char *key,
			const char *okey, const void *data, uint64_t len)
{
	struct dcr_buf b;
	/* One byte more than ours: a longer object is not ours either. */
	struct s3_req r = {
		.method = "GET", .okey = okey, .what = key, .out = &b,
		.has_range = true, .range_off = 0, .range_len = len + 1,
		.timeout_ns = s->read_timeout_ns,
	};
	int ret;

	dcr_buf_init(&b, (size_t)len + 1);
	ret = s3_request(s, &r);
	if (ret == 0) {
		ret = b.len == len && (!len || !memcmp(b.data, data, (size_t)len)) ?
		      0 : DCR_ERR(-EEXIST);
		dcr_debug("%s: PUT %s: refused on retry (412); the object %s",
			  s->base.url, key, ret ? "is someone else's" :
			  "holds our bytes: an earlier attempt stored it");
	} else {
		dcr_err("%s: PUT %s: refused on retry (412) and the object "
			"cannot be read back (%s), so whether this writer "
			"stored it is unknown [bucket %s, key %s]", s->base.url,
			key, dcr_strerror(ret), s->bucket, okey);
		ret = DCR_ERR(-EIO);
	}
	dcr_buf_free(&b);
	return ret;
}

static int put_single(struct dcr_s3_store *s, const char *key, const char *okey,
		      const void *data, uint64_t len, bool if_absent)
{
	struct s3_req r = {
		.method = "PUT", .okey = okey, .what = key, .body = data,
		.body_len = (size_t)len, .if_none_match = if_absent,
		.content_type = "application/octet-stream",
		.timeout_ns = s->write_timeout_ns,
	};
	int ret = s3_request(s, &r);

	/* Without an earlier attempt that may have stored it, a 412 is
	 * someone else's object, for sure. */
	if (ret == -EEXIST && r.maybe_applied)
		ret = put_was_ours(s, key, okey, data, len);
	return ret;
}

/*
 * Does the server honour If-None-Match: * on PUT? Asked once per store
 * handle with a scratch object, so that a server which ignores the header
 * can never make a conditional put silently overwrite a version.
 */
static int condput_check(struct dcr_s3_store *s)
{
	char key[64], okey[S3_KEY_MAX + 1];
	uint8_t rnd[8];
	int ret;

	pthread_mutex_lock(&s->probe_lock);
	if (s->condput) {
		ret = s->condput > 0 ? 0 : DCR_ERR(-EOPNOTSUPP);
		goto out;
	}
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
		uint64_t x = rand_u64();
		memcpy(rnd, &x, sizeof(rnd));
	}
	char hex[2 * sizeof(rnd) + 1];
	dcr_hex(rnd, sizeof(rnd), hex);
	snprintf(key, sizeof(key), ".dcr-probe/%s", hex);
	if ((ret = object_key(s, key, false, okey)))
		goto out;
	ret = put_single(s, key, okey, "1", 1, true);
	if (ret)
		goto out;
	ret = put_single(s, key, okey, "2", 1, true);
	if (ret == -EEXIST) {
		s->condput = 1;
		ret = 0;
	} else if (ret == 0) {
		s->condput = -1;
		dcr_err("%s: the server ignores If-None-Match: * on PUT, so two "
			"concurrent commits could overwrite each other; refusing "
			"to publish", s->base.url);
		ret = DCR_ERR(-EOPNOTSUPP);
	}
	struct s3_req del = {
		.method = "DELETE", .okey = okey, .what = key,
		.timeout_ns = s->read_timeout_ns, .quiet_enoent = true,
	};
	s3_request(s, &del);
out:
	pthread_mutex_unlock(&s->probe_lock);
	return ret;
}

static int s3_put(struct dcr_store *st, const char *key, const void *data,
		  uint64_t len, int flags)
{
	struct dcr_s3_store *s = to_s3(st);
	char okey[S3_KEY_MAX + 1];
	int ret = object_key(s, key, true, okey);

	if (ret)
		return ret;
	if (len > SIZE_MAX)
		return DCR_ERR(-EFBIG);
	if (flags & DCR_PUT_IF_ABSENT) {
		if (len > S3_SINGLE_PUT_MAX) {
			dcr_err("%s: %s: a conditional put is limited to 5 GiB", st->url, key);
			return DCR_ERR(-EFBIG);
		}
		if ((ret = condput_check(s)))
			return ret;
		return put_single(s, key, okey, data, len, true);
	}
	if (len <= S3_MPU_THRESHOLD)
		return put_single(s, key, okey, data, len, false);
	return put_multipart(s, key, okey, data, len);
}

static int s3_del(struct dcr_store *st, const char *key)
{
	struct dcr_s3_store *s = to_s3(st);
	char okey[S3_KEY_MAX + 1];
	uint64_t size;
	int ret = object_key(s, key, true, okey);

	if (ret)
		return ret;
	/* DELETE answers 204 for a missing key too; the contract wants ENOENT. */
	if ((ret = s3_head(st, key, &size)))
		return ret;
	struct s3_req r = {
		.method = "DELETE", .okey = okey, .what = key,
		.timeout_ns = s->read_timeout_ns, .quiet_enoent = true,
	};
	return s3_request(s, &r);
}

static void s3_close(struct dcr_store *st)
{
	struct dcr_s3_store *s = to_s3(st);

	dcr_wq_free(s->mpu_wq);
	for (int i = 0; i < s->npool; i++)
		s3_conn_free(&s->pool[i]);
	if (s->share)
		curl_share_cleanup(s->share);
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_destroy(&s->share_lock[i]);
	pthread_mutex_destroy(&s->pool_lock);
	pthread_mutex_destroy(&s->probe_lock);
	dcr_aws_cfg_free(&s->aws);
	free(s->bucket);
	free(s->prefix);
	free(s->origin);
	free(s->host);
	free(s->path_base);
	free(s->base.url);
	free(s);
}

static const struct dcr_store_ops s3_ops = {
	.name = "s3",
	.get = s3_get,
	.put = s3_put,
	.head = s3_head,
	.list = s3_list,
	.del = s3_del,
	.list_partial = s3_list_partial,
	.abort_partial = s3_abort_partial,
	.close = s3_close,
};

/* ---------------------------------------------------------- open */

static bool bucket_valid(const char *b)
{
	size_t n = strlen(b);
	if (n < 3 || n > 63)
		return false;
	for (const char *p = b; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '.' || *p == '-' || *p == '_'))
			return false;
	return true;
}

/* Usable as the first label of a virtual-hosted name under TLS. */
static bool bucket_dns_label(const char *b)
{
	for (const char *p = b; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-'))
			return false;
	return b[0] != '-' && b[strlen(b) - 1] != '-';
}

static char *strf(const char *fmt, ...) DCR_PRINTF(1, 2);
static char *strf(const char *fmt, ...)
{
	va_list ap;
	char *p;

	va_start(ap, fmt);
	int n = vasprintf(&p, fmt, ap);
	va_end(ap);
	return n < 0 ? NULL : p;
}

static int parse_url(struct dcr_s3_store *s, const char *url)
{
	const char *b = url + 5, *slash = strchr(b, '/');
	size_t bl = slash ? (size_t)(slash - b) : strlen(b);

	if (!(s->bucket = strndup(b, bl)))
		return DCR_ERR(-ENOMEM);
	if (!bucket_valid(s->bucket)) {
		dcr_err("%s: invalid bucket name '%s'", url, s->bucket);
		return DCR_ERR(-EINVAL);
	}
	const char *p = slash ? slash : "";
	while (*p == '/')
		p++;
	size_t pl = strlen(p);
	while (pl && p[pl - 1] == '/')
		pl--;
	if (!(s->prefix = strndup(p, pl)))
		return DCR_ERR(-ENOMEM);
	if (*s->prefix && (!key_valid(s->prefix) || pl > S3_KEY_MAX / 2)) {
		dcr_err("%s: invalid prefix '%s'", url, s->prefix);
		return DCR_ERR(-EINVAL);
	}
	s->base.url = *s->prefix ? strf("s3://%s/%s", s->bucket, s->prefix) :
				   strf("s3://%s", s->bucket);
	return s->base.url ? 0 : DCR_ERR(-ENOMEM);
}

/* Work out origin, Host and the path base from endpoint and addressing. */
static int setup_addressing(struct dcr_s3_store *s)
{
	const char *ep = s->aws.endpoint;
	char *aws_ep = NULL;

	if (!ep) {
		if (!(aws_ep = strf("https://s3.%s.amazonaws.com", s->aws.region)))
			return DCR_ERR(-ENOMEM);
		ep = aws_ep;
	}
	bool https = !strncmp(ep, "https://", 8);
	const char *hostport = ep + (https ? 8 : 7);
	bool path = s->aws.path_style == 1 ||
		    (s->aws.path_style == -1 && (s->aws.endpoint || !bucket_dns_label(s->bucket)));
	if (!path && !bucket_dns_label(s->bucket)) {
		dcr_warn("%s: bucket '%s' is not a DNS label; using path-style addressing",
			 s->base.url, s->bucket);
		path = true;
	}
	/* Host header: curl sends the port only when it is not the default. */
	const char *colon = strrchr(hostport, ':');
	const char *bracket = strrchr(hostport, ']');
	char *hp = NULL;
	if (colon && (!bracket || colon > bracket) &&
	    !strcmp(colon + 1, https ? "443" : "80"))
		hp = strndup(hostport, (size_t)(colon - hostport));
	else
		hp = strdup(hostport);
	int ret = 0;
	if (!hp) {
		ret = DCR_ERR(-ENOMEM);
		goto out;
	}
	if (path) {
		s->host = hp;
		hp = NULL;
		s->origin = strf("%s://%s", https ? "https" : "http", s->host);
		s->path_base = strf("/%s", s->bucket);
	} else {
		s->host = strf("%s.%s", s->bucket, hp);
		s->origin = strf("%s://%s", https ? "https" : "http", s->host ? s->host : "");
		s->path_base = strdup("");
	}
	if (!s->host || !s->origin || !s->path_base)
		ret = DCR_ERR(-ENOMEM);
	dcr_debug("%s: %s-style requests to %s (region %s, credentials from %s)",
		  s->base.url, path ? "path" : "virtual-hosted",
		  s->origin ? s->origin : "?", s->aws.region,
		  s->aws.cred_source ? s->aws.cred_source : "nowhere");
out:
	free(hp);
	free(aws_ep);
	return ret;
}

/* An operation's time bound: the setting, else $@var, else @def (ms). */
static int64_t timeout_ns(unsigned int opt_ms, const char *var, unsigned int def)
{
	uint64_t ms = opt_ms;
	const char *v = getenv(var);

	if (!ms && v && (dcr_parse_u64(v, &ms) || ms == 0 || ms > 86400000)) {
		dcr_warn("ignoring %s=%s (milliseconds, 1 to 86400000)", var, v);
		ms = 0;
	}
	return (int64_t)(ms ? ms : def) * 1000000;
}

int dcr_s3_open(const char *url, const struct dcr_store_cfg *cfg, int flags,
		struct dcr_store **out)
{
	int ret;

	(void)flags;
	if (strncmp(url, "s3://", 5)) {
		dcr_err("%s: not an s3:// URL", url);
		return DCR_ERR(-EINVAL);
	}
	pthread_once(&curl_once, curl_init_once);
	if (curl_init_rc != CURLE_OK) {
		dcr_err("libcurl initialisation failed: %s", curl_easy_strerror(curl_init_rc));
		return DCR_ERR(-EIO);
	}
	struct dcr_s3_store *s = calloc(1, sizeof(*s));
	if (!s)
		return DCR_ERR(-ENOMEM);
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&s->share_lock[i], NULL);
	pthread_mutex_init(&s->pool_lock, NULL);
	pthread_mutex_init(&s->probe_lock, NULL);
	s->aws.path_style = -1;
	s->base.ops = &s3_ops;

	if ((ret = parse_url(s, url)))
		goto err_close;
	if ((ret = dcr_aws_cfg_load(cfg, &s->aws))) {
		/* its reason was logged, naming the file or variable */
		dcr_debug("%s: cannot resolve the S3 settings: %s", s->base.url,
			  dcr_strerror(ret));
		goto err_close;
	}
	if ((ret = setup_addressing(s)))
		goto err_close;
	s->read_timeout_ns = timeout_ns(cfg ? cfg->read_timeout_ms : 0,
					"DCR_S3_READ_TIMEOUT_MS", S3_READ_TIMEOUT_MS);
	s->write_timeout_ns = timeout_ns(cfg ? cfg->write_timeout_ms : 0,
					 "DCR_S3_WRITE_TIMEOUT_MS", S3_WRITE_TIMEOUT_MS);
	s->mirror = cfg && cfg->mirror;
	/* the parts in flight default as the reader's fetches do */
	s->mpu_parts = cfg && cfg->mpu_parts ? (int)DCR_MIN(cfg->mpu_parts, DCR_S3_MPU_PARTS_MAX) :
		       DCR_MIN(DCR_MAX(DCR_S3_MPU_PARTS_DEFAULT, dcr_cpu_budget()),
			       DCR_S3_MPU_PARTS_MAX);
	struct dcr_wq_opts wo = {
		.name = "dcr-s3-mpu", .threads = DCR_MAX(s->mpu_parts - 1, 1), .max_items = 1,
	};
	if ((ret = dcr_wq_create(&wo, &s->mpu_wq)))
		goto err_close;

	if (!(s->share = curl_share_init())) {
		ret = DCR_ERR(-ENOMEM);
		goto err_close;
	}
	curl_share_setopt(s->share, CURLSHOPT_LOCKFUNC, share_lock);
	curl_share_setopt(s->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
	curl_share_setopt(s->share, CURLSHOPT_USERDATA, s);
	curl_share_setopt(s->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
	curl_share_setopt(s->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
	*out = &s->base;
	return 0;

err_close:
	s3_close(&s->base);
	return ret;
}
