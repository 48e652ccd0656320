/* SPDX-License-Identifier: MIT */
/*
 * store.c - pick the backend for a store URL.
 */
#include "config.h"

#include <string.h>

#include "common.h"
#include "dirstore.h"
#include "s3.h"
#include "store.h"

int dcr_store_open(const char *url, const struct dcr_store_cfg *cfg,
		   int flags, struct dcr_store **out)
{
	if (!url || !*url) {
		dcr_err("no store given");
		return DCR_ERR(-EINVAL);
	}
	if (!strncmp(url, "file://", 7)) {
		const char *path = url + 7;
		if (path[0] != '/') {
			dcr_err("%s: a file:// URL needs an absolute path (file:///path)", url);
			return DCR_ERR(-EINVAL);
		}
		return dcr_dir_open(path, flags & DCR_OPEN_CREATE, out);
	}
	if (!strncmp(url, "s3://", 5))
		return dcr_s3_open(url, cfg, flags, out);
	/* Anything that starts like a URL ("s3:/bucket", "file:x") is
	 * one, malformed: never a local directory named so. */
	size_t sl = strspn(url, "abcdefghijklmnopqrstuvwxyz"
				"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-");
	if (sl > 0 && url[sl] == ':' && strncmp(url + sl, "://", 3) != 0) {
		dcr_err("%s: malformed store URL (use s3://bucket/prefix, "
			"file:///path, or ./%s for a local directory of that "
			"name)", url, url);
		return DCR_ERR(-EINVAL);
	}
	const char *colon = strstr(url, "://");
	if (colon) {
		dcr_err("%s: unknown store scheme (use a path, file:///path or s3://bucket/prefix)", url);
		return DCR_ERR(-EPROTONOSUPPORT);
	}
	return dcr_dir_open(url, flags & DCR_OPEN_CREATE, out);
}

void dcr_store_init_failed(const struct dcr_store *st, int ret)
{
	if (ret == -ENOENT)
		/* the marker's put found no place to go: an S3 bucket that
		 * does not exist (its NoSuchBucket is logged by the backend) */
		dcr_err("%s: cannot create a store there: the bucket does not "
			"exist (dcrfs creates no buckets: create it first, e.g. "
			"'aws s3 mb s3://BUCKET')", st->url);
	else
		dcr_err("%s: cannot create a store: %s", st->url, dcr_strerror(ret));
}

int dcr_store_check(struct dcr_store *st, bool init,
		    struct dcr_store_info *info)
{
	int ret = init ? dcr_store_init(st, info) : dcr_store_identify(st, info);

	if (ret == 0 && init) {
		dcr_info("%s: created a new store (id %s)", st->url, info->id);
	} else if (ret == -EEXIST && init) {
		ret = 0;
	} else if (ret == -ENOENT && init) {
		dcr_store_init_failed(st, ret);
	} else if (ret == -ENOENT) {
		dcr_err("%s is not a dcrfs store (it has no %s marker and no "
			"versions); create one with 'dcrfs-commit --init' or "
			"'dcrfs-ctl init'", st->url, DCR_STORE_MARKER);
	} else if (ret && ret != -EBADMSG && ret != -EPROTONOSUPPORT &&
		   ret != -EHOSTUNREACH) { /* "cannot reach": logged */
		dcr_err("%s: cannot tell whether this is a dcrfs store: %s",
			st->url, dcr_strerror(ret)); /* the others: logged */
	}
	return ret;
}
