/* SPDX-License-Identifier: MIT */
/*
 * maint.c - libdcr's maintenance calls (dcr.h: log, show, diff, verify,
 * gc, tag) over the store's index (maint/index.h), maint/diff.h,
 * verify.h and gc.h, answering in the JSON of lib/maintjson.h, the same
 * writer dcrfs-ctl --json uses. Each call loads its own index.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DCR_BUILDING_LIB 1
#include "dcr.h"

#include "common.h"
#include "compact.h"
#include "diff.h"
#include "gc.h"
#include "index.h"
#include "sign.h"
#include "libdcr_int.h"
#include "maintjson.h"
#include "manifest.h"
#include "verify.h"

DCR_API void dcr_free(void *p)
{
	free(p);
}

/* One call: its index, and the stream its JSON goes to. */
struct call {
	struct dcr_index ix;
	FILE *f;
	char *buf;
	size_t len;
};

/* Start a call on @s that answers in *@json: 0 or -errno. */
static int call_begin(struct call *k, dcr_store_handle *s, char **json)
{
	int ret;

	*k = (struct call){ 0 };
	if (!s || !json)
		return -EINVAL;
	*json = NULL;
	if ((ret = dcr_index_load(&k->ix, s->st, &s->info)))
		return ret;
	if (!(k->f = open_memstream(&k->buf, &k->len))) {
		dcr_index_free(&k->ix);
		return DCR_ERR(-ENOMEM);
	}
	return 0;
}

/* End call @k: its JSON into *@json (when @ret is 0 or @keep_json is
 * set and @ret is not a failure to write); returns @ret, or -ENOMEM. */
static int call_end(struct call *k, int ret, bool keep_json, char **json)
{
	if (k->f && (fclose(k->f) || !k->buf)) {
		if (ret >= 0 || keep_json)
			ret = DCR_ERR(-ENOMEM);
		keep_json = false;
	}
	if (k->f && (!ret || keep_json))
		*json = k->buf;
	else
		free(k->buf);
	dcr_index_free(&k->ix);
	return ret;
}

DCR_API int dcr_store_log(dcr_store_handle *s, char **json)
{
	struct call k;
	int ret;

	dcr_api_enter();
	if ((ret = call_begin(&k, s, json)))
		return dcr_api_leave(ret, s ? s->st->url : "dcr_store_log");
	ret = dcr_log_json(k.f, &k.ix);
	return dcr_api_leave(call_end(&k, ret, false, json), s->st->url);
}

/* The version @arg names in @k's index, or NULL (logged; @ret -ENOENT). */
static struct dcr_sview_ver *resolve(struct call *k, const char *arg, int *ret)
{
	struct dcr_sview_ver *x = arg ? dcr_index_resolve(&k->ix, arg) : NULL;

	if (!x)
		*ret = -ENOENT;
	return x;
}

DCR_API int dcr_store_show(dcr_store_handle *s, const char *version, char **json)
{
	struct dcr_sview_ver *x;
	struct call k;
	int ret;

	dcr_api_enter();
	if ((ret = call_begin(&k, s, json)))
		return dcr_api_leave(ret, s ? s->st->url : "dcr_store_show");
	if ((x = resolve(&k, version, &ret)))
		ret = dcr_show_json(k.f, &k.ix, x);
	return dcr_api_leave(call_end(&k, ret, false, json), s->st->url);
}

DCR_API int dcr_store_diff(dcr_store_handle *s, const char *a, const char *b,
			   char **json)
{
	struct dcr_sview_ver *va, *vb;
	struct dcr_diff_result r;
	struct call k;
	int ret;

	dcr_api_enter();
	if ((ret = call_begin(&k, s, json)))
		return dcr_api_leave(ret, s ? s->st->url : "dcr_store_diff");
	if ((va = resolve(&k, a, &ret)) && (vb = resolve(&k, b, &ret))) {
		ret = dcr_diff(&k.ix, va, vb, &r);
		if (!ret)
			dcr_diff_json(k.f, &r);
		dcr_diff_result_free(&r);
	}
	return dcr_api_leave(call_end(&k, ret, false, json), s->st->url);
}

DCR_API int dcr_store_verify(dcr_store_handle *s, const char *const *versions,
			     size_t n, unsigned flags, char **json)
{
	struct dcr_verify_result r;
	uint64_t *vs = NULL;
	struct call k;
	int ret;

	dcr_api_enter();
	if ((flags & ~DCR_VERIFY_DEEP) || (n && !versions))
		return dcr_api_leave(-EINVAL, "dcr_store_verify");
	if ((ret = call_begin(&k, s, json)))
		return dcr_api_leave(ret, s ? s->st->url : "dcr_store_verify");
	if (!(vs = calloc(n ? n : 1, sizeof(*vs)))) {
		ret = DCR_ERR(-ENOMEM);
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct dcr_sview_ver *x = resolve(&k, versions[i], &ret);
		if (!x)
			goto out;
		vs[i] = x->v;
	}
	if ((ret = dcr_verify(&k.ix, vs, n, flags & DCR_VERIFY_DEEP, NULL, &r)))
		goto out;
	dcr_verify_json(k.f, &r);
	for (size_t i = 0; i < r.ndamage; i++)
		dcr_err("%s: damaged: %s: %s", s->st->url, r.damage[i].object,
			r.damage[i].reason);
	ret = r.ndamage ? -EBADMSG : 0;
	dcr_verify_result_free(&r);
out:
	free(vs);
	return dcr_api_leave(call_end(&k, ret, ret == -EBADMSG, json), s->st->url);
}

DCR_API int dcr_store_gc(dcr_store_handle *s, const struct dcr_gc_options *o,
			 char **json)
{
	struct dcr_gc_result r;
	struct call k;
	int ret;

	dcr_api_enter();
	if (!o || !o->keep_last || o->max_depth > 64 ||
	    (o->read_cost && (o->read_cost < DCR_COMPACT_READ_COST_MIN ||
			      o->read_cost > DCR_COMPACT_READ_COST_MAX))) {
		dcr_err("dcr_store_gc: keep_last must be at least 1, max_depth at "
			"most 64 and read_cost 0 or from %d to %d",
			DCR_COMPACT_READ_COST_MIN, DCR_COMPACT_READ_COST_MAX);
		return dcr_api_leave(-EINVAL, "dcr_store_gc");
	}
	if ((ret = call_begin(&k, s, json)))
		return dcr_api_leave(ret, s ? s->st->url : "dcr_store_gc");
	struct dcr_gc_opts go = {
		.keep_last = o->keep_last, .keep_tagged = o->keep_tagged,
		.keep_newer = o->keep_newer, .grace = o->grace, .dry_run = o->dry_run,
		.max_depth = o->max_depth, .read_cost = o->read_cost,
	};
	if (!(ret = dcr_gc(&k.ix, &go, &r))) {
		dcr_gc_json(k.f, &r);
		dcr_gc_result_free(&r);
	}
	return dcr_api_leave(call_end(&k, ret, false, json), s->st->url);
}

DCR_API int dcr_store_tag(dcr_store_handle *s, const char *name,
			  const char *version, uint64_t *out)
{
	return dcr_store_tag_signed(s, name, version, NULL, out);
}

DCR_API int dcr_store_tag_signed(dcr_store_handle *s, const char *name,
				 const char *version, const char *key_path,
				 uint64_t *out)
{
	struct dcr_sign_key *key = NULL;
	struct dcr_index ix;
	struct dcr_sview_ver *x;
	int ret;

	dcr_api_enter();
	if (!s || !name || !version)
		return dcr_api_leave(-EINVAL, "dcr_store_tag");
	if (!dcr_tag_name_valid(name)) {
		dcr_err("'%s' is not a valid tag name (letters, digits, '.', '_', '-'; "
			"at most 128; not starting with '.')", name);
		return dcr_api_leave(-EINVAL, "dcr_store_tag");
	}
	if (key_path && (ret = dcr_sign_key_load(key_path, &key)))
		return dcr_api_leave(ret, key_path);
	if ((ret = dcr_index_load(&ix, s->st, &s->info))) {
		dcr_sign_key_free(key);
		return dcr_api_leave(ret, s->st->url);
	}
	if (!(x = dcr_index_resolve(&ix, version)))
		ret = -ENOENT;
	else if (!(ret = dcr_index_put_tag(&ix, name, x, key)) && out)
		*out = x->v;
	dcr_index_free(&ix);
	dcr_sign_key_free(key);
	return dcr_api_leave(ret, s->st->url);
}
