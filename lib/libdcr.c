/* SPDX-License-Identifier: MIT */
/*
 * libdcr.c - the public API (dcr.h) over the commit pipeline
 * (commit/commit.c), the safetensors layout (core/stwriter.c) and the
 * committer's cache (commit/ccache.c). Every public function resets the
 * calling thread's error lines on entry, opens an error scope (common.h)
 * so that the lines its jobs log on worker threads are the call's too,
 * and, when it fails, turns them (or strerror) into dcr_errmsg's
 * message.
 */
#include "config.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DCR_BUILDING_LIB 1
#include "dcr.h"

#include "ccache.h"
#include "libdcr_int.h"
#include "chunk.h"
#include "commit.h"
#include "common.h"
#include "compact.h"
#include "json.h"
#include "manifest.h"
#include "sign.h"
#include "store.h"
#include "stwriter.h"
#include "warm.h"

struct dcr_commit_handle {
	dcr_store_handle *s;
	struct dcr_commit_options o;
	char *cache_dir;
	/* The version's entries; hdrs[i] is the safetensors header src[i]
	 * starts with (owned), or NULL. */
	struct dcr_commit_source *src;
	char **hdrs;
	size_t n, cap;
	char *tree;      /* the directory added with add_tree, if one */
	struct dcr_sign_key *key; /* dcr_commit_set_sign_key, or NULL */
	/* Only the metadata of this manifest is used: set by
	 * dcr_commit_set_meta, with the one check of entries there is. */
	struct dcr_manifest meta;
	bool published;
	atomic_int cancel; /* dcr_commit_cancel */
};

static __thread char errmsg[4096];
static atomic_bool errors_not_printed; /* dcr_set_log_errors(0) */

DCR_API const char *dcr_errmsg(void)
{
	return errmsg;
}

/* Start of a public call: forget the previous call's errors. */
static void api_enter(void)
{
	errmsg[0] = 0;
	dcr_log_errors_reset();
	dcr_log_errors_capture(atomic_load(&errors_not_printed));
	dcr_log_scope_begin(); /* the call's jobs on other threads log into it */
}

/* End of a public call: @ret, with dcr_errmsg set if it is a failure. */
static int api_leave(int ret, const char *what)
{
	dcr_log_scope_end();
	dcr_log_errors_capture(false);
	if (ret >= 0)
		return ret;
	const char *lines = dcr_log_errors();
	if (*lines)
		snprintf(errmsg, sizeof(errmsg), "%s", lines);
	else
		snprintf(errmsg, sizeof(errmsg), "%s: %s", what, dcr_strerror(ret));
	return ret;
}

void dcr_api_enter(void)
{
	api_enter();
}

int dcr_api_leave(int ret, const char *what)
{
	return api_leave(ret, what);
}

DCR_API void dcr_set_log_errors(int print)
{
	atomic_store(&errors_not_printed, !print);
}

DCR_API void dcr_set_log_level(int level)
{
	dcr_log_set_level(level <= 0 ? DCR_LOG_ERR : level == 1 ? DCR_LOG_WARN :
			  level == 2 ? DCR_LOG_INFO : DCR_LOG_DEBUG);
}

/*
 * Open the store and make sure it is one: with DCR_STORE_INIT, create it
 * if there is none; without, a path or prefix that holds no store is an
 * error, so a mistyped URL never starts a new store silently.
 */
static int open_store(const char *url, bool init, bool no_sign,
		      const struct dcr_store_options *o,
		      struct dcr_store **out, struct dcr_store_info *info)
{
	struct dcr_store_cfg cfg = { .path_style = -1,
				     .no_sign_request = no_sign };

	if (o) {
		cfg.profile = o->profile;
		cfg.region = o->region;
		cfg.endpoint = o->endpoint_url;
		cfg.ca_bundle = o->ca_bundle;
	}
	struct dcr_store *st;
	int ret;

	/* A directory that is not there is one error, with the hint: the
	 * store's own "cannot open" line is held back for it. */
	bool captured = dcr_log_errors_capture(true);
	ret = dcr_store_open(url, &cfg, init ? DCR_OPEN_CREATE : 0, &st);
	dcr_log_errors_capture(captured);
	if (ret) {
		char held[4096];

		snprintf(held, sizeof(held), "%s", dcr_log_errors());
		dcr_log_errors_reset();
		/* (an s3:// open fails with -ENOENT only for its settings, a
		 * profile not found: that error stands) */
		if (ret == -ENOENT && !init && strncmp(url, "s3://", 5) != 0)
			dcr_err("%s: no store there; create one with 'dcrfs-commit "
				"--init' or 'dcrfs-ctl init'", url);
		else
			for (char *l = held, *nl; *l; l = nl) {
				nl = l + strcspn(l, "\n");
				if (*nl)
					*nl++ = '\0';
				dcr_err("%s", l);
			}
		return ret;
	}
	ret = dcr_store_check(st, init, info);
	if (ret) {
		dcr_store_close(st);
		return ret;
	}
	*out = st;
	return 0;
}

DCR_API int dcr_store_handle_warm_publish(dcr_store_handle *s,
					  const struct dcr_warm_publish_options *o)
{
	const struct dcr_store_options *so = o ? o->s3 : NULL;
	struct dcr_store_cfg cfg = { .path_style = -1 };
	struct dcr_warm_opts wo = { .jobs = DCR_WARM_JOBS_DEFAULT };
	struct dcr_store *w;
	int ret;

	dcr_api_enter();
	if (!s || !o || !o->mirrors || !*o->mirrors)
		return dcr_api_leave(-EINVAL, "dcr_store_handle_warm_publish");
	cfg.no_sign_request = o->no_sign_request;
	if (so) {
		cfg.profile = so->profile;
		cfg.region = so->region;
		cfg.endpoint = so->endpoint_url;
		cfg.ca_bundle = so->ca_bundle;
	}
	wo.slice = o->slice;
	wo.timeout_ns = (int64_t)o->timeout_s * 1000000000;
	ret = dcr_warm_publisher_open(s->st, o->mirrors, &cfg, &wo, &w);
	if (!ret) {
		s->st = w;
		dcr_info("%s: the new packs of the version are warmed through %s "
			 "before it is published", w->url, o->mirrors);
	}
	return dcr_api_leave(ret, "warming before a publish");
}

DCR_API int dcr_store_handle_open(const char *url, unsigned flags,
				  dcr_store_handle **out)
{
	return dcr_store_handle_open_opts(url, flags, NULL, out);
}

DCR_API int dcr_store_handle_open_opts(const char *url, unsigned flags,
				       const struct dcr_store_options *o,
				       dcr_store_handle **out)
{
	dcr_store_handle *s;
	int ret;

	api_enter();
	if (!url || !out)
		return api_leave(-EINVAL, "dcr_store_handle_open");
	if (!(s = calloc(1, sizeof(*s))))
		return api_leave(-ENOMEM, url);
	if ((ret = open_store(url, flags & DCR_STORE_INIT,
			      flags & DCR_STORE_NO_SIGN, o, &s->st, &s->info))) {
		free(s);
		return api_leave(ret, url);
	}
	*out = s;
	return 0;
}

DCR_API void dcr_store_handle_close(dcr_store_handle *s)
{
	if (!s)
		return;
	dcr_store_close(s->st);
	free(s);
}

DCR_API int dcr_store_handle_latest(dcr_store_handle *s, uint64_t *version)
{
	api_enter();
	return api_leave(dcr_store_latest(s->st, version), s->st->url);
}

DCR_API int dcr_store_compact(dcr_store_handle *s, unsigned max_depth,
			      struct dcr_compact_info *info)
{
	const struct dcr_compact_options o = { .max_depth = max_depth };

	return dcr_store_compact_opts(s, &o, info);
}

DCR_API int dcr_store_compact_opts(dcr_store_handle *s,
				   const struct dcr_compact_options *co,
				   struct dcr_compact_info *info)
{
	struct dcr_compact_opts o = { 0 };
	struct dcr_compact_stats st;
	int ret;

	api_enter();
	if (co)
		o = (struct dcr_compact_opts){ .max_depth = co->max_depth,
					       .read_cost = co->read_cost };
	if (!s)
		return api_leave(-EINVAL, "dcr_store_compact");
	if (o.max_depth > 64 || (o.read_cost &&
	    (o.read_cost < DCR_COMPACT_READ_COST_MIN ||
	     o.read_cost > DCR_COMPACT_READ_COST_MAX))) {
		dcr_err("dcr_store_compact: max_depth must be at most 64 and read_cost "
			"0 or %d to %d", DCR_COMPACT_READ_COST_MIN,
			DCR_COMPACT_READ_COST_MAX);
		return api_leave(-EINVAL, "dcr_store_compact");
	}
	ret = dcr_compact_scratch(s->st, &o, &st);
	if (!ret && info) {
		info->generation = st.gen;
		info->rewritten = st.rewritten;
		info->depth = st.depth_after;
	}
	return api_leave(ret, s->st->url);
}

DCR_API int dcr_commit_begin(dcr_store_handle *s,
			     const struct dcr_commit_options *o,
			     dcr_commit_handle **out)
{
	dcr_commit_handle *c;

	api_enter();
	if (!s || !out)
		return api_leave(-EINVAL, "dcr_commit_begin");
	if (o && o->chunk_size && !dcr_chunk_size_valid(o->chunk_size)) {
		dcr_err("invalid chunk size %" PRIu32 " (a power of two from 4 KiB to 64 MiB)",
			o->chunk_size);
		return api_leave(-EINVAL, "dcr_commit_begin");
	}
	if (o && (o->flags & DCR_COMMIT_COPY) &&
	    (o->flags & (DCR_COMMIT_NO_COPY | DCR_COMMIT_NO_CACHE))) {
		dcr_err("DCR_COMMIT_COPY contradicts DCR_COMMIT_NO_COPY and DCR_COMMIT_NO_CACHE");
		return api_leave(-EINVAL, "dcr_commit_begin");
	}
	if (!(c = calloc(1, sizeof(*c))))
		return api_leave(-ENOMEM, "dcr_commit_begin");
	c->s = s;
	if (o)
		c->o = *o;
	if (o && o->cache_dir && !(c->cache_dir = strdup(o->cache_dir))) {
		free(c);
		return api_leave(-ENOMEM, "dcr_commit_begin");
	}
	c->o.cache_dir = c->cache_dir;
	*out = c;
	return 0;
}

/* A new zeroed entry at the end of @c's list; NULL on -ENOMEM. */
static struct dcr_commit_source *new_entry(dcr_commit_handle *c)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 16;
		struct dcr_commit_source *s = realloc(c->src, cap * sizeof(*s));
		if (!s)
			return NULL;
		c->src = s;
		char **h = realloc(c->hdrs, cap * sizeof(*h));
		if (!h)
			return NULL;
		c->hdrs = h;
		c->cap = cap;
	}
	memset(&c->src[c->n], 0, sizeof(c->src[c->n]));
	c->hdrs[c->n] = NULL;
	return &c->src[c->n++];
}

static bool has_path(const dcr_commit_handle *c, const char *path, size_t len)
{
	for (size_t i = 0; i < c->n; i++)
		if (!strncmp(c->src[i].path, path, len) && !c->src[i].path[len])
			return true;
	return false;
}

/*
 * Add @path as a file entry with @ranges (copied) after its missing
 * parent directories; @hdr (owned from here on) is freed with it.
 */
static int add_file(dcr_commit_handle *c, const char *path, unsigned mode,
		    const struct dcr_commit_range *ranges, size_t n, char *hdr)
{
	struct dcr_commit_source *e;
	int ret = -ENOMEM;

	size_t bad;
	if (!path || !dcr_path_valid(path, strlen(path))) {
		dcr_err("'%s' is not a valid path in a version (relative, no '..')",
			path ? path : "(null)");
		ret = -EINVAL;
		goto err_free_hdr;
	}
	if (!dcr_utf8_valid(path, strlen(path), &bad)) {
		dcr_err("the path '%.*s...' is not valid UTF-8 (at byte %zu)",
			(int)DCR_MIN(bad, (size_t)200), path, bad);
		ret = -EINVAL;
		goto err_free_hdr;
	}
	if (has_path(c, path, strlen(path))) {
		dcr_err("%s: added twice", path);
		ret = -EEXIST;
		goto err_free_hdr;
	}
	for (const char *sl = strchr(path, '/'); sl; sl = strchr(sl + 1, '/')) {
		size_t len = (size_t)(sl - path);
		if (has_path(c, path, len))
			continue;
		if (!(e = new_entry(c)))
			goto err_free_hdr;
		if (!(e->path = strndup(path, len))) {
			c->n--;
			goto err_free_hdr;
		}
		e->dir = true;
		e->mode = 0755;
		e->mtime_ns = dcr_now_ns();
	}
	struct dcr_commit_range *r = malloc((n ? n : 1) * sizeof(*r));
	if (!r || !(e = new_entry(c))) {
		free(r);
		goto err_free_hdr;
	}
	if (!(e->path = strdup(path))) {
		free(r);
		c->n--;
		goto err_free_hdr;
	}
	memcpy(r, ranges, n * sizeof(*r));
	e->ranges = r;
	e->nranges = n;
	e->mode = mode & 07777;
	e->mtime_ns = dcr_now_ns();
	c->hdrs[c->n - 1] = hdr;
	return 0;
err_free_hdr:
	free(hdr);
	return ret;
}

static int check_open(const dcr_commit_handle *c)
{
	if (c->published) {
		dcr_err("this commit was published already: begin a new one");
		return -EINVAL;
	}
	return 0;
}

DCR_API int dcr_commit_add_bytes(dcr_commit_handle *c, const char *path,
				 unsigned mode, const struct dcr_range *r,
				 size_t n)
{
	api_enter();
	int ret = check_open(c);
	if (ret)
		return api_leave(ret, path);
	struct dcr_commit_range *cr = malloc((n ? n : 1) * sizeof(*cr));
	if (!cr)
		return api_leave(-ENOMEM, path);
	for (size_t i = 0; i < n; i++)
		cr[i] = (struct dcr_commit_range){ r[i].data, r[i].len };
	ret = add_file(c, path, mode, cr, n, NULL);
	free(cr);
	return api_leave(ret, path);
}

DCR_API int dcr_commit_add_safetensors(dcr_commit_handle *c, const char *path,
				       const struct dcr_tensor_desc *t, size_t n,
				       const char *const *meta_kv, size_t nmeta)
{
	struct dcr_st_tensor *ts = calloc(n ? n : 1, sizeof(*ts));
	struct dcr_st_meta *ms = calloc(nmeta ? nmeta : 1, sizeof(*ms));
	struct dcr_commit_range *r = calloc(n + 1, sizeof(*r));
	size_t *order = calloc(n ? n : 1, sizeof(*order));
	char *hdr = NULL;
	size_t hlen;

	api_enter();
	int ret = check_open(c);
	if (ret)
		goto err_free;
	if (!ts || !ms || !r || !order) {
		ret = -ENOMEM;
		goto err_free;
	}
	for (size_t i = 0; i < n; i++) {
		ts[i] = (struct dcr_st_tensor){ t[i].name, t[i].dtype, t[i].shape,
						t[i].ndim, t[i].data, t[i].len };
		if (t[i].len && !t[i].data) {
			dcr_err("%s: tensor %s: %" PRIu64 " bytes and no data", path,
				t[i].name ? t[i].name : "(null)", t[i].len);
			ret = -EINVAL;
			goto err_free;
		}
	}
	for (size_t i = 0; i < nmeta; i++)
		ms[i] = (struct dcr_st_meta){ meta_kv[2 * i], meta_kv[2 * i + 1] };
	if ((ret = dcr_safetensors_layout(ts, n, ms, nmeta, 0, &hdr, &hlen, order))) {
		dcr_err("%s: cannot lay out a safetensors file", path);
		goto err_free;
	}
	r[0] = (struct dcr_commit_range){ hdr, hlen };
	for (size_t i = 0; i < n; i++)
		r[i + 1] = (struct dcr_commit_range){ t[order[i]].data, t[order[i]].len };
	ret = add_file(c, path, 0644, r, n + 1, hdr);
err_free:
	free(order);
	free(r);
	free(ms);
	free(ts);
	return api_leave(ret, path);
}

DCR_API int dcr_commit_add_tree(dcr_commit_handle *c, const char *dir)
{
	struct dcr_commit_source *src;
	size_t n;

	api_enter();
	int ret = check_open(c);
	if (!ret && c->tree) {
		dcr_err("%s: one tree per commit (%s was added)", dir, c->tree);
		ret = -EINVAL;
	}
	if (!ret)
		ret = dcr_commit_scan(dir, &src, &n);
	if (ret)
		return api_leave(ret, dir);
	for (size_t i = 0; i < n && !ret; i++) {
		struct dcr_commit_source *e = new_entry(c);
		if (!e) {
			ret = -ENOMEM;
			break;
		}
		*e = src[i];
		src[i].path = src[i].file = NULL; /* moved */
	}
	dcr_commit_sources_free(src, n);
	if (!ret && !(c->tree = strdup(dir)))
		ret = -ENOMEM;
	return api_leave(ret, dir);
}

DCR_API int dcr_commit_set_sign_key(dcr_commit_handle *c, const char *path)
{
	struct dcr_sign_key *k;

	api_enter();
	int ret = c && path ? check_open(c) : -EINVAL;
	if (ret)
		return api_leave(ret, "dcr_commit_set_sign_key");
	if (c->s->info.legacy) {
		dcr_err("%s: a store made before store markers (id %s) has no id a "
			"signature can bind: its versions cannot be signed", c->s->st->url,
			c->s->info.id);
		return api_leave(-EINVAL, c->s->st->url);
	}
	if ((ret = dcr_sign_key_load(path, &k)))
		return api_leave(ret, path);
	dcr_sign_key_free(c->key);
	c->key = k;
	return 0;
}

DCR_API const char *dcr_commit_signer(const dcr_commit_handle *c)
{
	return c && c->key ? dcr_sign_key_id(c->key) : NULL;
}

DCR_API int dcr_commit_set_meta(dcr_commit_handle *c, const char *key,
				const char *value)
{
	size_t bad;

	api_enter();
	int ret = c && key && value ? check_open(c) : -EINVAL;
	if (ret)
		return api_leave(ret, "dcr_commit_set_meta");
	if (!dcr_utf8_valid(value, strlen(value), &bad)) {
		dcr_err("metadata %s: the value is not valid UTF-8 (at byte %zu)",
			dcr_meta_key_valid(key) ? key : "(an invalid key)", bad);
		return api_leave(-EINVAL, "dcr_commit_set_meta");
	}
	return api_leave(dcr_manifest_set_meta(&c->meta, key, value),
			 "dcr_commit_set_meta");
}

/* The pipeline's progress, translated for the caller. */
static void on_progress(void *arg, const struct dcr_commit_progress *p)
{
	const dcr_commit_handle *c = arg;
	struct dcr_progress pub = { p->bytes_done, p->bytes_total,
				    p->bytes_uploaded, p->phase };

	c->o.progress(c->o.progress_arg, &pub);
}

/* The parent's number, manifest and its object's SHA-256:
 * opts->parent, else the latest. */
static int get_parent(struct dcr_store *st, uint64_t want, uint64_t *parent,
		      struct dcr_manifest *pm, uint8_t mhash[DCR_HASH_LEN])
{
	uint64_t latest;
	int ret = dcr_store_latest(st, &latest);

	if (ret) {
		dcr_err("%s: cannot list versions: %s", st->url, dcr_strerror(ret));
		return ret;
	}
	*parent = want ? want : latest;
	char key[64];
	dcr_version_key(*parent, key, sizeof(key));
	if (*parent &&
	    (ret = dcr_store_fetch_manifest(st, key, *parent, pm, mhash)) == -ENOENT)
		dcr_err("%s: version %" PRIu64 " does not exist (latest is %" PRIu64 ")",
			st->url, *parent, latest);
	return ret;
}

/* Point @tag at the version @res published, signed as the version is. */
static int put_tag(dcr_commit_handle *c, const char *tag,
		   const struct dcr_commit_result *res)
{
	struct dcr_store *st = c->s->st;
	struct dcr_tag_sig ts;
	int ret;

	if (!c->key)
		return dcr_store_put_tag(st, tag, res->version);
	if ((ret = dcr_tag_sign(c->key, c->s->info.id, tag, res->version,
				res->check, &ts)))
		return ret;
	return dcr_store_put_tag_signed(st, tag, res->version, &ts);
}

DCR_API int dcr_commit_publish(dcr_commit_handle *c, const char *tag,
			       struct dcr_commit_info *info)
{
	struct dcr_store *st = c->s->st;
	const unsigned fl = c->o.flags;
	struct dcr_manifest pm = { 0 };
	struct dcr_ccache *cc = NULL;
	struct dcr_commit_result res;
	const char *what = c->tree ? c->tree : "the commit";
	uint64_t parent;
	uint8_t pmhash[DCR_HASH_LEN];

	api_enter();
	int ret = check_open(c);
	if (!ret && tag && !dcr_tag_name_valid(tag)) {
		dcr_err("'%s' is not a valid tag name", tag);
		ret = -EINVAL;
	}
	if (ret || (ret = get_parent(st, c->o.parent, &parent, &pm, pmhash)))
		return api_leave(ret, what);
	/* A signed store going unsigned is never silent: mounts with
	 * trust= will not show this version and stay on the parent. */
	if (parent && pm.has_sig && !c->key) {
		char id[DCR_KEYID_LEN + 1];

		dcr_key_id(pm.sig.pub, id);
		dcr_warn("%s: version %" PRIu64 " is signed (key %s) and this "
			 "commit is not: mounts with trust= will not show it "
			 "and stay on version %" PRIu64 " (sign it: --sign-key "
			 "KEYFILE, Python sign_key=)", st->url, parent, id,
			 parent);
	}
	if ((ret = dcr_ccache_open(st, c->o.cache_dir,
				   dcr_log_get_level() < DCR_LOG_INFO, &cc)))
		goto err_free;
	struct dcr_commit_opts o = {
		.parent = parent,
		.parent_manifest = parent ? &pm : NULL,
		.full = !!(fl & DCR_COMMIT_FULL),
		.allow_empty = !!(fl & DCR_COMMIT_ALLOW_EMPTY),
		.allow_unchanged = !!(fl & DCR_COMMIT_ALLOW_UNCHANGED),
		.allow_nonfinite = !!(fl & DCR_COMMIT_ALLOW_NONFINITE),
		.chunk_size = c->o.chunk_size,
		.jobs = c->o.jobs,
		.progress = c->o.progress ? on_progress : NULL,
		.progress_arg = c,
		.cancel = &c->cancel,
		.sign_key = c->key,
		.meta = c->meta.meta,
		.nmeta = c->meta.nmeta,
	};
	/* See DCR_COMMIT_COPY in dcr.h; decided before dcr_ccache_parent,
	 * which may rebuild the tree the decision looks at. */
	bool no_copy = c->tree && !(fl & DCR_COMMIT_COPY) &&
		       ((fl & DCR_COMMIT_NO_COPY) ||
			(!(fl & DCR_COMMIT_NO_CACHE) &&
			 !dcr_ccache_copy_wanted(cc, c->tree)));
	bool keep = !(fl & DCR_COMMIT_NO_CACHE) && !no_copy;
	if (parent && (ret = dcr_ccache_parent(cc, parent, pmhash, c->tree, false,
				       &o.parent_dir)))
		goto err_free;
	for (int attempt = 0;; attempt++) {
		o.stage_dir = keep ? dcr_ccache_stage(cc) : NULL;
		ret = dcr_commit_sources(st, c->src, c->n, what, &o, &res);
		if (ret != -ESTALE || attempt > 0 || !parent)
			break;
		if ((ret = dcr_ccache_parent(cc, parent, pmhash, c->tree, true,
					     &o.parent_dir)))
			goto err_free;
	}
	if (ret) {
		dcr_ccache_discard(cc);
		goto err_free;
	}
	c->published = true;
	if (res.version > parent + 1) { /* a racing committer took parent + 1 */
		char others[64];
		if (res.version == parent + 2)
			snprintf(others, sizeof(others), "version %" PRIu64 " is", parent + 1);
		else
			snprintf(others, sizeof(others), "versions %" PRIu64 " to %" PRIu64
				 " are", parent + 1, res.version - 1);
		dcr_warn("%s: published as version %" PRIu64 ", built on version %" PRIu64
			 ", which stopped being the latest while this commit ran: %s "
			 "another committer's and not in it", st->url, res.version,
			 parent, others);
	}
	dcr_ccache_done(cc, res.version, res.manifest_hash,
			no_copy ? DCR_CCACHE_SOURCE :
			keep && res.staged ? DCR_CCACHE_STAGED : DCR_CCACHE_NOTHING,
			c->tree);
	if (info)
		*info = (struct dcr_commit_info){
			.version = res.version, .parent = parent,
			.files = res.files, .dirs = res.dirs,
			.bytes_in = res.bytes_in, .bytes_packed = res.bytes_packed,
			.manifest_len = res.manifest_len,
			.chunks_same = res.chunks_same, .chunks_delta = res.chunks_delta,
			.chunks_full = res.chunks_full, .packs = res.packs,
		};
	if (tag && (ret = put_tag(c, tag, &res))) {
		dcr_err("version %" PRIu64 " was published but tag '%s' could not be set: %s",
			res.version, tag, dcr_strerror(ret));
		ret = -EIO;
	}
err_free:
	dcr_ccache_close(cc);
	dcr_manifest_free(&pm);
	return api_leave(ret, what);
}

DCR_API void dcr_commit_cancel(dcr_commit_handle *c)
{
	if (c)
		atomic_store(&c->cancel, 1);
}

DCR_API void dcr_commit_free(dcr_commit_handle *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++) {
		free((void *)c->src[i].ranges);
		free(c->hdrs[i]);
	}
	dcr_commit_sources_free(c->src, c->n);
	free(c->hdrs);
	free(c->tree);
	free(c->cache_dir);
	dcr_sign_key_free(c->key);
	dcr_manifest_free(&c->meta);
	free(c);
}

DCR_API void dcr_commit_abort(dcr_commit_handle *c)
{
	dcr_commit_free(c);
}
