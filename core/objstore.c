/* SPDX-License-Identifier: MIT */
/*
 * objstore.c - store-level helpers built only on the ops table:
 * finding the latest version, fetching manifests, tags.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "manifest.h"
#include "objstore.h"

/* A manifest or tag object larger than this is refused outright. */
#define MANIFEST_OBJ_MAX ((size_t)2 << 30)
#define TAG_OBJ_MAX 64

static int latest_cb(const char *key, uint64_t size, void *arg)
{
	uint64_t *best = arg, v;

	if (dcr_version_from_key(key, &v) == 0 && v > *best)
		*best = v;
	return 0;
}

int dcr_store_latest(struct dcr_store *st, uint64_t *v)
{
	*v = 0;
	return dcr_store_list(st, "versions/", latest_cb, v);
}

int dcr_store_get_manifest(struct dcr_store *st, uint64_t v,
			   struct dcr_manifest *m)
{
	char key[64];
	struct dcr_buf b;

	dcr_version_key(v, key, sizeof(key));
	dcr_buf_init(&b, MANIFEST_OBJ_MAX);
	int ret = dcr_store_get(st, key, 0, DCR_GET_ALL, &b);
	if (ret) {
		if (ret != -ENOENT)
			dcr_err("%s: cannot read %s: %s", st->url, key,
				dcr_strerror(ret));
		goto err_free_buf;
	}
	ret = dcr_manifest_decode(b.data, b.len, m);
	if (ret) {
		dcr_err("%s: manifest %s is corrupt or invalid (%s)", st->url,
			key, dcr_strerror(ret));
		goto err_free_buf;
	}
	if (m->version != v) {
		dcr_err("%s: manifest %s claims to be version %" PRIu64,
			st->url, key, m->version);
		dcr_manifest_free(m);
		ret = DCR_ERR(-EBADMSG);
	}
err_free_buf:
	dcr_buf_free(&b);
	return ret;
}

int dcr_tag_name_valid(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > 128 || name[0] == '.')
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
			return 0;
	}
	return 1;
}

int dcr_store_get_tag(struct dcr_store *st, const char *name, uint64_t *v)
{
	char key[160], text[TAG_OBJ_MAX + 1];
	struct dcr_buf b;

	if (!dcr_tag_name_valid(name))
		return DCR_ERR(-EINVAL);
	snprintf(key, sizeof(key), "tags/%s", name);
	dcr_buf_init(&b, TAG_OBJ_MAX);
	int ret = dcr_store_get(st, key, 0, DCR_GET_ALL, &b);
	if (ret)
		goto err_free_buf;
	memcpy(text, b.data, b.len);
	text[b.len] = 0;
	if (b.len && text[b.len - 1] == '\n')
		text[b.len - 1] = 0;
	ret = dcr_parse_u64(text, v);
	if (ret || *v == 0) {
		dcr_err("%s: tag object %s is malformed", st->url, key);
		ret = DCR_ERR(-EBADMSG);
	}
err_free_buf:
	dcr_buf_free(&b);
	return ret;
}

int dcr_store_put_tag(struct dcr_store *st, const char *name, uint64_t v)
{
	char key[160], text[32];

	if (!dcr_tag_name_valid(name))
		return DCR_ERR(-EINVAL);
	snprintf(key, sizeof(key), "tags/%s", name);
	int n = snprintf(text, sizeof(text), "%" PRIu64 "\n", v);
	return dcr_store_put(st, key, text, (uint64_t)n, 0);
}
