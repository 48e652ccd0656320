/* SPDX-License-Identifier: MIT */
/*
 * reader.c - the read path (DESIGN.md section 6; API in reader.h).
 *
 * State and where it lives:
 *  - the catalog (SQLite, catalog.c): every indexed version as rows,
 *    chunk references included; survives a restart;
 *  - the chunk cache (cache.c): materialized, verified chunks by hash;
 *  - in memory: one struct rver per known version with, once somebody
 *    asks for it, the version's files without chunk tables (a chunk-less
 *    struct dcr_manifest) and the dcr_entry tree built from them. These
 *    are immutable once built and live until dcr_reader_close, because
 *    the filesystem keeps pointers to them. Chunk references are always
 *    looked up in SQLite, so memory does not grow with the chunk count.
 *
 * Locks (never nested in the other order):
 *  - refresh_lock serialises dcr_reader_refresh;
 *  - lock guards the version array, the bad-manifest list, the tags and
 *    the lazy building of a version's tree;
 *  - sf_lock/sf_cond guard the in-flight table (single-flight: concurrent
 *    readers of one chunk hash share one fetch and decode);
 *  - codec_lock guards the pool of per-thread codec states.
 * The catalog and the cache have their own internal locks.
 *
 * A read first serves every chunk the cache holds; when two or more of
 * its chunks miss, they are materialized on up to opts->fetch_threads
 * threads (the caller plus short-lived helpers), otherwise in the calling
 * thread. The FUSE layer already calls us from many threads, and
 * single-flight keeps them from fetching or decoding a chunk twice.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cache.h"
#include "catalog.h"
#include "chunk.h"
#include "common.h"
#include "frame.h"
#include "hash.h"
#include "manifest.h"
#include "reader.h"

#define FETCH_THREADS_DEFAULT 4
#define CODEC_POOL_MAX 16
/* Hex digits of the store-URL hash naming the per-store directory. */
#define STORE_ID_LEN 16

/* One known version. The tree (m, entries, info) is built lazily. */
struct rver {
	uint64_t v;
	uint64_t parent;
	int64_t ctime_ns;
	uint32_t chunk_size;
	uint32_t nfiles;
	bool loaded;
	struct dcr_manifest m;    /* files only: no chunks, no packs */
	struct dcr_entry *entries;
	struct dcr_version_info info;
};

/* A chunk being materialized by one thread while others wait for it. */
struct flight {
	struct flight *next;
	uint8_t hash[DCR_HASH_LEN];
	uint32_t len;
	uint8_t *data;  /* the materialized chunk once done && rc == 0 */
	int rc;
	bool done;
	unsigned refs;  /* leader + waiters; the last one frees */
};

struct dcr_reader {
	struct dcr_store *st;
	char *dir; /* <cache_dir>/<id> */
	struct dcr_catalog *cat;
	struct dcr_cache *cache;
	int fetch_threads;

	pthread_mutex_t refresh_lock;
	bool listed;           /* "versions/" listed once in this process */

	pthread_mutex_t lock;
	struct rver **vers;    /* ascending by v */
	size_t nvers, capvers;
	uint64_t *bad;         /* corrupt manifests, logged once, skipped */
	size_t nbad, capbad;
	uint64_t max_bad;
	struct dcr_tag *tags;
	size_t ntags;

	pthread_mutex_t sf_lock;
	pthread_cond_t sf_cond;
	struct flight *flights;

	pthread_mutex_t codec_lock;
	struct dcr_codec *codecs[CODEC_POOL_MAX];
	int ncodecs;
};

/* ------------------------------------------------------------ helpers */

/* mkdir -p with mode 0700 for every component created. */
static int mkdir_p(const char *path)
{
	char buf[PATH_MAX];
	size_t len = strlen(path);

	if (len == 0 || len >= sizeof(buf))
		return DCR_ERR(-ENAMETOOLONG);
	memcpy(buf, path, len + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0700) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0700) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static struct dcr_codec *codec_get(struct dcr_reader *r)
{
	struct dcr_codec *c = NULL;

	pthread_mutex_lock(&r->codec_lock);
	if (r->ncodecs > 0)
		c = r->codecs[--r->ncodecs];
	pthread_mutex_unlock(&r->codec_lock);
	return c ? c : dcr_codec_new(0);
}

static void codec_put(struct dcr_reader *r, struct dcr_codec *c)
{
	pthread_mutex_lock(&r->codec_lock);
	if (r->ncodecs < CODEC_POOL_MAX) {
		r->codecs[r->ncodecs++] = c;
		c = NULL;
	}
	pthread_mutex_unlock(&r->codec_lock);
	dcr_codec_free(c);
}

/* ------------------------------------------------------------ versions */

/* Index of the first version >= @v. Caller holds the lock. */
static size_t vers_lower(const struct dcr_reader *r, uint64_t v)
{
	size_t lo = 0, hi = r->nvers;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (r->vers[mid]->v < v)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static struct rver *vers_find(const struct dcr_reader *r, uint64_t v)
{
	size_t i = vers_lower(r, v);

	return i < r->nvers && r->vers[i]->v == v ? r->vers[i] : NULL;
}

/* Insert @rv in order. Caller holds the lock. */
static int vers_insert(struct dcr_reader *r, struct rver *rv)
{
	size_t i = vers_lower(r, rv->v);

	if (i < r->nvers && r->vers[i]->v == rv->v)
		return -EEXIST;
	if (r->nvers == r->capvers) {
		size_t cap = r->capvers ? r->capvers * 2 : 16;
		struct rver **tmp = realloc(r->vers, cap * sizeof(*tmp));
		if (!tmp)
			return DCR_ERR(-ENOMEM);
		r->vers = tmp;
		r->capvers = cap;
	}
	memmove(&r->vers[i + 1], &r->vers[i],
		(r->nvers - i) * sizeof(*r->vers));
	r->vers[i] = rv;
	r->nvers++;
	return 0;
}

static bool is_bad(const struct dcr_reader *r, uint64_t v)
{
	for (size_t i = 0; i < r->nbad; i++)
		if (r->bad[i] == v)
			return true;
	return false;
}

/* Remember a corrupt manifest so it is neither fetched nor logged again. */
static void mark_bad(struct dcr_reader *r, uint64_t v)
{
	pthread_mutex_lock(&r->lock);
	if (!is_bad(r, v)) {
		if (r->nbad == r->capbad) {
			size_t cap = r->capbad ? r->capbad * 2 : 8;
			uint64_t *tmp = realloc(r->bad, cap * sizeof(*tmp));
			if (tmp) {
				r->bad = tmp;
				r->capbad = cap;
			}
		}
		if (r->nbad < r->capbad)
			r->bad[r->nbad++] = v;
	}
	r->max_bad = DCR_MAX(r->max_bad, v);
	pthread_mutex_unlock(&r->lock);
}

static void rver_free(struct rver *rv)
{
	if (!rv)
		return;
	dcr_manifest_free(&rv->m);
	free(rv->entries);
	free(rv);
}

/* Find the index of directory @path[0..len) among files[0..n). */
static int64_t find_prefix(const struct dcr_manifest *m, uint32_t n,
			   const char *path, size_t len)
{
	uint32_t lo = 0, hi = n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		const char *p = m->files[mid].path;
		size_t plen = strlen(p);
		int c = memcmp(p, path, DCR_MIN(plen, len));

		if (c == 0)
			c = plen < len ? -1 : plen > len ? 1 : 0;
		if (c == 0)
			return mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

/* Build rv->entries from the chunk-less manifest rv->m. */
static int build_tree(struct rver *rv)
{
	const struct dcr_manifest *m = &rv->m;
	uint32_t n = m->nfiles + 1, *last;
	struct dcr_entry *e;

	if (m->nfiles >= UINT32_MAX - 1)
		return DCR_ERR(-EIO);
	e = calloc(n, sizeof(*e));
	last = malloc(n * sizeof(*last));
	if (!e || !last) {
		free(e);
		free(last);
		return DCR_ERR(-ENOMEM);
	}
	for (uint32_t i = 0; i < n; i++) {
		last[i] = UINT32_MAX;
		e[i].first_child = UINT32_MAX;
		e[i].next_sibling = UINT32_MAX;
	}
	e[0].path = "";
	e[0].name = "";
	e[0].type = DCR_FT_DIR;
	e[0].mode = 0755;
	e[0].mtime_ns = m->ctime_ns;
	for (uint32_t i = 0; i < m->nfiles; i++) {
		const struct dcr_file *f = &m->files[i];
		const char *slash = strrchr(f->path, '/');
		uint32_t parent = 0, me = i + 1;

		if (slash) {
			int64_t k = find_prefix(m, i, f->path,
						(size_t)(slash - f->path));
			if (k < 0 || m->files[k].type != DCR_FT_DIR) {
				dcr_err("version %llu: %s has no parent directory",
					(unsigned long long)m->version, f->path);
				free(e);
				free(last);
				return DCR_ERR(-EIO);
			}
			parent = (uint32_t)k + 1;
		}
		e[me].path = f->path;
		e[me].name = slash ? slash + 1 : f->path;
		e[me].parent = parent;
		e[me].type = f->type;
		e[me].mode = f->mode;
		e[me].size = f->type == DCR_FT_REG ? f->size : 0;
		e[me].mtime_ns = f->mtime_ns;
		if (last[parent] == UINT32_MAX)
			e[parent].first_child = me;
		else
			e[last[parent]].next_sibling = me;
		last[parent] = me;
	}
	free(last);
	rv->entries = e;
	rv->info.version = rv->v;
	rv->info.parent = rv->parent;
	rv->info.ctime_ns = rv->ctime_ns;
	rv->info.chunk_size = rv->chunk_size;
	rv->info.nentries = n;
	rv->info.entries = e;
	return 0;
}

/* Make sure @rv's tree is loaded. Caller holds the lock. */
static int rver_load(struct dcr_reader *r, struct rver *rv)
{
	int ret;

	if (rv->loaded)
		return 0;
	ret = dcr_catalog_load_files(r->cat, rv->v, &rv->m);
	if (ret)
		return ret == -ENOENT ? DCR_ERR(-EIO) : ret;
	ret = build_tree(rv);
	if (ret) {
		dcr_manifest_free(&rv->m);
		memset(&rv->m, 0, sizeof(rv->m));
		return ret;
	}
	rv->loaded = true;
	return 0;
}

/* The loaded version @v, or -ENOENT. The pointer stays valid until close. */
static int get_ver(struct dcr_reader *r, uint64_t v, struct rver **out)
{
	struct rver *rv;
	int ret;

	pthread_mutex_lock(&r->lock);
	rv = vers_find(r, v);
	ret = rv ? rver_load(r, rv) : -ENOENT;
	pthread_mutex_unlock(&r->lock);
	*out = ret ? NULL : rv;
	return ret;
}

static struct rver *rver_new(uint64_t v, uint64_t parent, int64_t ctime_ns,
			     uint32_t chunk_size, uint32_t nfiles)
{
	struct rver *rv = calloc(1, sizeof(*rv));

	if (!rv)
		return NULL;
	rv->v = v;
	rv->parent = parent;
	rv->ctime_ns = ctime_ns;
	rv->chunk_size = chunk_size;
	rv->nfiles = nfiles;
	return rv;
}

/* ------------------------------------------------------------ open/close */

static int load_tag(const char *name, uint64_t version, void *arg)
{
	struct dcr_reader *r = arg;
	struct dcr_tag *tmp = realloc(r->tags, (r->ntags + 1) * sizeof(*tmp));

	if (!tmp)
		return DCR_ERR(-ENOMEM);
	r->tags = tmp;
	tmp[r->ntags].name = strdup(name);
	if (!tmp[r->ntags].name)
		return DCR_ERR(-ENOMEM);
	tmp[r->ntags].version = version;
	r->ntags++;
	return 0;
}

/* Load the versions and tags recorded in the catalog. */
static int load_catalog(struct dcr_reader *r)
{
	struct dcr_catalog_version *vs;
	size_t n;
	int ret;

	ret = dcr_catalog_versions(r->cat, &vs, &n);
	if (ret)
		return ret;
	for (size_t i = 0; i < n && !ret; i++) {
		struct rver *rv = rver_new(vs[i].version, vs[i].parent,
					   vs[i].ctime_ns, vs[i].chunk_size,
					   vs[i].nfiles);
		if (!rv) {
			ret = DCR_ERR(-ENOMEM);
			break;
		}
		ret = vers_insert(r, rv);
		if (ret)
			rver_free(rv);
	}
	free(vs);
	if (ret)
		return ret;
	return dcr_catalog_tags(r->cat, load_tag, r);
}

int dcr_reader_open(struct dcr_store *st, const struct dcr_reader_opts *opts,
		    struct dcr_reader **out)
{
	uint8_t h[DCR_HASH_LEN];
	char hex[DCR_HASH_HEX_LEN + 1];
	char path[PATH_MAX];
	struct dcr_reader *r;
	const char *url;
	int ret;

	*out = NULL;
	if (!st || !opts || !opts->cache_dir || !opts->cache_dir[0])
		return DCR_ERR(-EINVAL);
	url = st->url ? st->url : "";
	ret = mkdir_p(opts->cache_dir);
	if (ret) {
		dcr_err("cache directory %s: %s", opts->cache_dir,
			dcr_strerror(ret));
		return ret;
	}
	dcr_sha256(url, strlen(url), h);
	dcr_hash_hex(h, hex);
	if (snprintf(path, sizeof(path), "%s/%.*s", opts->cache_dir,
		     STORE_ID_LEN, hex) >= (int)sizeof(path))
		return DCR_ERR(-ENAMETOOLONG);
	if (mkdir(path, 0700) < 0 && errno != EEXIST) {
		ret = -errno;
		dcr_err("cache directory %s: %s", path, dcr_strerror(ret));
		return ret;
	}

	r = calloc(1, sizeof(*r));
	if (!r)
		return DCR_ERR(-ENOMEM);
	r->st = st;
	r->fetch_threads = opts->fetch_threads > 0 ? opts->fetch_threads
						   : FETCH_THREADS_DEFAULT;
	pthread_mutex_init(&r->refresh_lock, NULL);
	pthread_mutex_init(&r->lock, NULL);
	pthread_mutex_init(&r->sf_lock, NULL);
	pthread_cond_init(&r->sf_cond, NULL);
	pthread_mutex_init(&r->codec_lock, NULL);
	r->dir = strdup(path);
	if (!r->dir) {
		ret = DCR_ERR(-ENOMEM);
		goto err_close;
	}
	if (snprintf(path, sizeof(path), "%s/catalog.db", r->dir) >=
	    (int)sizeof(path)) {
		ret = DCR_ERR(-ENAMETOOLONG);
		goto err_close;
	}
	ret = dcr_catalog_open(path, url, &r->cat);
	if (ret)
		goto err_close;
	ret = dcr_cache_open(r->dir, r->cat, opts->cache_size, &r->cache);
	if (ret)
		goto err_close;
	ret = load_catalog(r);
	if (ret)
		goto err_close;
	*out = r;
	return 0;

err_close:
	dcr_reader_close(r);
	return ret;
}

void dcr_reader_close(struct dcr_reader *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->nvers; i++)
		rver_free(r->vers[i]);
	free(r->vers);
	free(r->bad);
	dcr_reader_tags_free(r->tags, r->ntags);
	for (int i = 0; i < r->ncodecs; i++)
		dcr_codec_free(r->codecs[i]);
	dcr_cache_close(r->cache);
	dcr_catalog_close(r->cat);
	pthread_mutex_destroy(&r->codec_lock);
	pthread_cond_destroy(&r->sf_cond);
	pthread_mutex_destroy(&r->sf_lock);
	pthread_mutex_destroy(&r->lock);
	pthread_mutex_destroy(&r->refresh_lock);
	free(r->dir);
	free(r);
}

/* ------------------------------------------------------------ refresh */

/* State of one refresh: the last manifest indexed, kept whole so that
 * the next version can be checked against it without reloading it. */
struct refresh_ctx {
	struct dcr_manifest last;
	bool have_last;
};

static void refresh_ctx_free(struct refresh_ctx *ctx)
{
	if (ctx->have_last)
		dcr_manifest_free(&ctx->last);
	ctx->have_last = false;
}

/* Check @m against its parent, if the parent is known. 0 or -EBADMSG. */
static int check_parent(struct dcr_reader *r, struct refresh_ctx *ctx,
			const struct dcr_manifest *m, const char *key)
{
	struct dcr_manifest pm;
	struct rver *parent;
	int ret;

	if (ctx->have_last && ctx->last.version == m->parent) {
		ret = dcr_manifest_check_parent(m, &ctx->last);
	} else if (get_ver(r, m->parent, &parent) == 0) {
		/* A transient full load of the parent from the catalog. */
		ret = dcr_catalog_load_manifest(r->cat, m->parent, &pm);
		if (ret) {
			dcr_warn("%s: cannot load parent version %llu to check "
				 "it: %s", key, (unsigned long long)m->parent,
				 dcr_strerror(ret));
			return ret == -ENOMEM ? ret : 0;
		}
		ret = dcr_manifest_check_parent(m, &pm);
		dcr_manifest_free(&pm);
	} else {
		dcr_warn("%s: parent version %llu is missing or corrupt; reads "
			 "that need it will fail", key,
			 (unsigned long long)m->parent);
		return 0;
	}
	if (ret)
		dcr_err("%s: corrupt manifest: inconsistent with its parent "
			"version %llu", key, (unsigned long long)m->parent);
	return ret;
}

/*
 * Fetch, verify and index version @v. 0 if indexed or skipped as
 * corrupt (logged once), -ENOENT if it does not exist, other -errno for
 * a store failure worth retrying at the next refresh (logged by the
 * store).
 */
static int index_version(struct dcr_reader *r, struct refresh_ctx *ctx,
			 uint64_t v)
{
	char key[64];
	struct dcr_manifest m;
	struct rver *rv;
	int ret;

	dcr_version_key(v, key, sizeof(key));
	memset(&m, 0, sizeof(m));
	ret = dcr_store_get_manifest(r->st, v, &m);
	if (ret == -EBADMSG) {
		/* dcr_store_get_manifest logged it, naming the key. */
		mark_bad(r, v);
		return 0;
	}
	if (ret)
		return ret;
	ret = dcr_manifest_validate(&m);
	if (ret) {
		dcr_err("%s: corrupt manifest: %s", key, dcr_strerror(ret));
	} else if (m.parent >= v) {
		dcr_err("%s: corrupt manifest: parent %llu is not older",
			key, (unsigned long long)m.parent);
		ret = -EBADMSG;
	} else if (m.parent) {
		ret = check_parent(r, ctx, &m, key);
		if (ret == -ENOMEM) {
			dcr_manifest_free(&m);
			return ret;
		}
	}
	if (ret) {
		mark_bad(r, v);
		dcr_manifest_free(&m);
		return 0;
	}

	ret = dcr_catalog_add_version(r->cat, &m);
	if (ret && ret != -EEXIST) {
		dcr_manifest_free(&m);
		return ret;
	}
	rv = rver_new(v, m.parent, m.ctime_ns, m.chunk_size, m.nfiles);
	refresh_ctx_free(ctx);
	ctx->last = m; /* moved: the next version is likely its child */
	ctx->have_last = true;
	if (!rv)
		return DCR_ERR(-ENOMEM);
	pthread_mutex_lock(&r->lock);
	ret = vers_insert(r, rv);
	pthread_mutex_unlock(&r->lock);
	if (ret)
		rver_free(rv);
	return ret == -EEXIST ? 0 : ret;
}

struct vlist {
	uint64_t *v;
	size_t n, cap;
};

static int collect_version(const char *key, uint64_t size, void *arg)
{
	struct vlist *l = arg;
	uint64_t v;

	if (dcr_version_from_key(key, &v) != 0 || v == 0)
		return 0; /* not a manifest name: ignore */
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		uint64_t *tmp = realloc(l->v, cap * sizeof(*tmp));
		if (!tmp)
			return DCR_ERR(-ENOMEM);
		l->v = tmp;
		l->cap = cap;
	}
	l->v[l->n++] = v;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* First refresh in this process: list everything, index what is new. */
static int refresh_list(struct dcr_reader *r, struct refresh_ctx *ctx)
{
	struct vlist l = { 0 };
	bool transient = false;
	int ret;

	ret = dcr_store_list(r->st, "versions/", collect_version, &l);
	if (ret && ret != -ENOENT) {
		dcr_err("%s: cannot list versions/: %s",
			r->st->url ? r->st->url : "store", dcr_strerror(ret));
		free(l.v);
		return ret;
	}
	qsort(l.v, l.n, sizeof(*l.v), cmp_u64);
	for (size_t i = 0; i < l.n; i++) {
		bool known;

		pthread_mutex_lock(&r->lock);
		known = vers_find(r, l.v[i]) || is_bad(r, l.v[i]);
		pthread_mutex_unlock(&r->lock);
		if (known)
			continue;
		ret = index_version(r, ctx, l.v[i]);
		if (ret == -ENOMEM)
			break;
		if (ret)
			transient = true;
		ret = 0;
	}
	free(l.v);
	/* After a transient failure, list again next time so that the
	 * version that failed is not skipped by probing past it. */
	if (!ret && !transient)
		r->listed = true;
	return ret;
}

/* Later refreshes: probe n+1, n+2, ... until one does not exist. */
static int refresh_probe(struct dcr_reader *r, struct refresh_ctx *ctx)
{
	uint64_t next;
	int ret;

	pthread_mutex_lock(&r->lock);
	next = DCR_MAX(r->nvers ? r->vers[r->nvers - 1]->v : 0, r->max_bad);
	pthread_mutex_unlock(&r->lock);
	for (;;) {
		ret = index_version(r, ctx, ++next);
		if (ret == -ENOENT)
			return 0;
		if (ret)
			return ret;
	}
}

struct tlist {
	char **names;
	size_t n, cap;
};

static int collect_tag(const char *key, uint64_t size, void *arg)
{
	struct tlist *l = arg;
	const char *name = key;

	if (strncmp(name, "tags/", 5) == 0)
		name += 5;
	if (!dcr_tag_name_valid(name))
		return 0;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		char **tmp = realloc(l->names, cap * sizeof(*tmp));
		if (!tmp)
			return DCR_ERR(-ENOMEM);
		l->names = tmp;
		l->cap = cap;
	}
	l->names[l->n] = strdup(name);
	if (!l->names[l->n])
		return DCR_ERR(-ENOMEM);
	l->n++;
	return 0;
}

static int cmp_tag(const void *a, const void *b)
{
	return strcmp(((const struct dcr_tag *)a)->name,
		      ((const struct dcr_tag *)b)->name);
}

/* Re-list tags/ and replace the tag set. */
static int refresh_tags(struct dcr_reader *r)
{
	struct tlist l = { 0 };
	struct dcr_tag *tags = NULL, *old;
	const char **names = NULL;
	uint64_t *vs = NULL;
	size_t nt = 0, nold;
	int ret;

	ret = dcr_store_list(r->st, "tags/", collect_tag, &l);
	if (ret == -ENOENT)
		ret = 0;
	if (ret) {
		dcr_err("%s: cannot list tags/: %s",
			r->st->url ? r->st->url : "store", dcr_strerror(ret));
		goto out_free;
	}
	tags = calloc(l.n ? l.n : 1, sizeof(*tags));
	names = calloc(l.n ? l.n : 1, sizeof(*names));
	vs = calloc(l.n ? l.n : 1, sizeof(*vs));
	if (!tags || !names || !vs) {
		ret = DCR_ERR(-ENOMEM);
		goto out_free;
	}
	for (size_t i = 0; i < l.n; i++) {
		uint64_t v;
		int rc = dcr_store_get_tag(r->st, l.names[i], &v);

		if (rc) {
			if (rc != -ENOENT)
				dcr_warn("tags/%s: %s", l.names[i],
					 dcr_strerror(rc));
			continue;
		}
		tags[nt].name = l.names[i];
		tags[nt].version = v;
		l.names[i] = NULL;
		nt++;
	}
	qsort(tags, nt, sizeof(*tags), cmp_tag);
	for (size_t i = 0; i < nt; i++) {
		names[i] = tags[i].name;
		vs[i] = tags[i].version;
	}
	ret = dcr_catalog_set_tags(r->cat, names, vs, nt);
	if (ret)
		goto out_free;
	pthread_mutex_lock(&r->lock);
	old = r->tags;
	nold = r->ntags;
	r->tags = tags;
	r->ntags = nt;
	pthread_mutex_unlock(&r->lock);
	tags = old;
	nt = nold;

out_free:
	dcr_reader_tags_free(tags, nt);
	for (size_t i = 0; i < l.n; i++)
		free(l.names[i]);
	free(l.names);
	free(names);
	free(vs);
	return ret;
}

int dcr_reader_refresh(struct dcr_reader *r, uint64_t *latest)
{
	struct refresh_ctx ctx = { .have_last = false };
	int ret;

	pthread_mutex_lock(&r->refresh_lock);
	ret = r->listed ? refresh_probe(r, &ctx) : refresh_list(r, &ctx);
	refresh_ctx_free(&ctx);
	if (!ret)
		ret = refresh_tags(r);
	pthread_mutex_unlock(&r->refresh_lock);
	if (latest)
		*latest = dcr_reader_latest(r);
	return ret;
}

uint64_t dcr_reader_latest(struct dcr_reader *r)
{
	uint64_t v;

	pthread_mutex_lock(&r->lock);
	v = r->nvers ? r->vers[r->nvers - 1]->v : 0;
	pthread_mutex_unlock(&r->lock);
	return v;
}

int dcr_reader_versions(struct dcr_reader *r, uint64_t **vs, size_t *n)
{
	uint64_t *arr;

	pthread_mutex_lock(&r->lock);
	arr = malloc((r->nvers ? r->nvers : 1) * sizeof(*arr));
	if (!arr) {
		pthread_mutex_unlock(&r->lock);
		return DCR_ERR(-ENOMEM);
	}
	for (size_t i = 0; i < r->nvers; i++)
		arr[i] = r->vers[i]->v;
	*n = r->nvers;
	pthread_mutex_unlock(&r->lock);
	*vs = arr;
	return 0;
}

int dcr_reader_version(struct dcr_reader *r, uint64_t v,
		       const struct dcr_version_info **out)
{
	struct rver *rv;
	int ret = get_ver(r, v, &rv);

	*out = ret ? NULL : &rv->info;
	return ret;
}

int dcr_reader_tags(struct dcr_reader *r, struct dcr_tag **tags, size_t *n)
{
	struct dcr_tag *t;
	size_t i;

	*tags = NULL;
	*n = 0;
	pthread_mutex_lock(&r->lock);
	t = calloc(r->ntags ? r->ntags : 1, sizeof(*t));
	if (!t)
		goto err_unlock;
	for (i = 0; i < r->ntags; i++) {
		t[i].name = strdup(r->tags[i].name);
		if (!t[i].name)
			goto err_free;
		t[i].version = r->tags[i].version;
	}
	*n = r->ntags;
	pthread_mutex_unlock(&r->lock);
	*tags = t;
	return 0;

err_free:
	dcr_reader_tags_free(t, i);
err_unlock:
	pthread_mutex_unlock(&r->lock);
	return DCR_ERR(-ENOMEM);
}

void dcr_reader_tags_free(struct dcr_tag *tags, size_t n)
{
	if (!tags)
		return;
	for (size_t i = 0; i < n; i++)
		free(tags[i].name);
	free(tags);
}

/* ------------------------------------------------------------ read path */

/* One frame on a chunk's chain, newest first. */
struct step {
	struct rver *rv;
	uint32_t file;
	struct dcr_catalog_chunk ref;
	struct dcr_buf frame;
};

struct chain {
	struct step *s;
	size_t n, cap;
	bool base_cached; /* out[] holds a cached ancestor chunk */
	uint8_t base_hash[DCR_HASH_LEN];
};

static void chain_free(struct chain *ch)
{
	for (size_t i = 0; i < ch->n; i++)
		dcr_buf_free(&ch->s[i].frame);
	free(ch->s);
}

static int chain_push(struct chain *ch, struct rver *rv, uint32_t file,
		      const struct dcr_catalog_chunk *ref)
{
	if (ch->n == ch->cap) {
		size_t cap = ch->cap ? ch->cap * 2 : 4;
		struct step *tmp = realloc(ch->s, cap * sizeof(*tmp));
		if (!tmp)
			return DCR_ERR(-ENOMEM);
		ch->s = tmp;
		ch->cap = cap;
	}
	memset(&ch->s[ch->n], 0, sizeof(ch->s[ch->n]));
	ch->s[ch->n].rv = rv;
	ch->s[ch->n].file = file;
	ch->s[ch->n].ref = *ref;
	ch->n++;
	return 0;
}

/* Where the chunk being materialized is, for log lines. */
struct where {
	const struct rver *rv;
	uint32_t file;
	uint64_t chunk;
};

#define WHERE_FMT "version %llu %s chunk %llu"
#define WHERE_ARGS(w)                                                    \
	(unsigned long long)(w)->rv->v, (w)->rv->m.files[(w)->file].path, \
		(unsigned long long)(w)->chunk

/*
 * Walk from @rv's chunk towards the anchor, stopping at the first
 * ancestor whose chunk is cached (read into @out) or that is a full
 * frame. Fills @ch with the frames to apply, newest first.
 */
static int resolve_chain(struct dcr_reader *r, const struct where *w,
			 const struct dcr_catalog_chunk *ref0, uint32_t clen,
			 uint8_t *out, struct chain *ch)
{
	struct dcr_catalog_chunk ref = *ref0;
	struct rver *cur = (struct rver *)w->rv, *pv;
	uint32_t cf = w->file, pf;
	bool first = true;
	int ret;

	for (;;) {
		if (!first) {
			ret = dcr_cache_read(r->cache, ref.hash, clen, 0, out,
					     clen);
			if (ret == 0) {
				ch->base_cached = true;
				memcpy(ch->base_hash, ref.hash, DCR_HASH_LEN);
				return 0;
			}
			if (ret == -ENOMEM)
				return ret;
		}
		first = false;
		switch (ref.kind) {
		case DCR_CK_FULL:
			return chain_push(ch, cur, cf, &ref);
		case DCR_CK_DELTA:
			ret = chain_push(ch, cur, cf, &ref);
			if (ret)
				return ret;
			break;
		case DCR_CK_SAME:
			break;
		default:
			dcr_err(WHERE_FMT ": version %llu has an invalid "
				"chunk kind %u", WHERE_ARGS(w),
				(unsigned long long)cur->v, ref.kind);
			return DCR_ERR(-EIO);
		}

		pf = cur->m.files[cf].base;
		if (!cur->parent || pf == DCR_NO_BASE) {
			dcr_err(WHERE_FMT ": version %llu refers to a parent "
				"chunk but has no parent", WHERE_ARGS(w),
				(unsigned long long)cur->v);
			return DCR_ERR(-EIO);
		}
		ret = get_ver(r, cur->parent, &pv);
		if (ret) {
			dcr_err(WHERE_FMT ": needs version %llu (%s), which is "
				"missing or corrupt", WHERE_ARGS(w),
				(unsigned long long)cur->parent,
				ret == -ENOENT ? "not indexed"
					       : dcr_strerror(ret));
			return DCR_ERR(-EIO);
		}
		if (pf >= pv->m.nfiles || pv->m.files[pf].type != DCR_FT_REG ||
		    pv->chunk_size != cur->chunk_size ||
		    dcr_chunk_len(pv->m.files[pf].size, pv->chunk_size,
				  w->chunk) != clen) {
			dcr_err(WHERE_FMT ": base file %u of version %llu does "
				"not match", WHERE_ARGS(w), pf,
				(unsigned long long)pv->v);
			return DCR_ERR(-EIO);
		}
		ret = dcr_catalog_get_chunk(r->cat, pv->v, pf, w->chunk, &ref);
		if (ret) {
			dcr_err(WHERE_FMT ": no chunk reference in version "
				"%llu: %s", WHERE_ARGS(w),
				(unsigned long long)pv->v, dcr_strerror(ret));
			return DCR_ERR(-EIO);
		}
		cur = pv;
		cf = pf;
	}
}

/* Fetch the frame of step @s from its pack. */
static int fetch_frame(struct dcr_reader *r, const struct where *w,
		       struct step *s)
{
	char key[DCR_HASH_HEX_LEN + 16];
	int ret;

	dcr_pack_key(s->ref.pack, key, sizeof(key));
	if (s->ref.len < DCR_FRAME_HDR_LEN) {
		dcr_err("%s: frame of version %llu at %llu has a bad length "
			"%u (" WHERE_FMT ")", key,
			(unsigned long long)s->rv->v,
			(unsigned long long)s->ref.off, s->ref.len,
			WHERE_ARGS(w));
		return DCR_ERR(-EIO);
	}
	dcr_buf_init(&s->frame, s->ref.len);
	ret = dcr_store_get(r->st, key, s->ref.off, s->ref.len, &s->frame);
	if (ret == -ENOMEM)
		return ret;
	if (ret) {
		dcr_err("%s: %s (needed for " WHERE_FMT ")", key,
			ret == -ENOENT ? "missing object" : dcr_strerror(ret),
			WHERE_ARGS(w));
		return DCR_ERR(-EIO);
	}
	if (s->frame.len != s->ref.len) {
		dcr_err("%s: truncated: %zu of %u bytes at %llu (needed for "
			WHERE_FMT ")", key, s->frame.len, s->ref.len,
			(unsigned long long)s->ref.off, WHERE_ARGS(w));
		return DCR_ERR(-EIO);
	}
	return 0;
}

/*
 * Apply the frames oldest-first onto @out. With @check, verify every
 * intermediate chunk against its own hash and set *@bad to the index of
 * the first step that fails (used only to name the culprit).
 */
static int apply_chain(struct dcr_codec *codec, struct chain *ch,
		       uint8_t *out, uint32_t clen, bool check, size_t *bad)
{
	uint8_t got[DCR_HASH_LEN];

	for (size_t k = ch->n; k-- > 0;) {
		struct step *s = &ch->s[k];
		int ret = dcr_frame_apply(codec, s->frame.data, s->frame.len,
					  out, clen);
		if (ret) {
			*bad = k;
			return ret;
		}
		if (check) {
			dcr_sha256(out, clen, got);
			if (!dcr_hash_eq(got, s->ref.hash)) {
				*bad = k;
				return -EILSEQ; /* decodes, but wrong bytes */
			}
		}
	}
	return 0;
}

/* Name the frame that made the chain fail verification; one log line. */
static void blame(struct dcr_reader *r, const struct where *w,
		  struct dcr_codec *codec, struct chain *ch, uint8_t *out,
		  uint32_t clen, int first_err, size_t first_bad)
{
	char key[DCR_HASH_HEX_LEN + 16];
	size_t bad = first_bad;
	int ret = first_err;

	if (ret == 0) {
		/* Final hash mismatch: replay, checking every step. */
		bool base_ok = !ch->base_cached ||
			       dcr_cache_read(r->cache, ch->base_hash, clen, 0,
					      out, clen) == 0;
		bad = 0;
		if (base_ok)
			ret = apply_chain(codec, ch, out, clen, true, &bad);
		if (ret == 0)
			bad = 0;
	}
	dcr_pack_key(ch->s[bad].ref.pack, key, sizeof(key));
	dcr_err("%s: %s in the frame of version %llu at %llu+%u (needed for "
		WHERE_FMT ")", key,
		ret == -EBADMSG ? "corrupt frame (does not decode)"
		: ret == -EILSEQ || ret == 0 ? "corrupt data (chunk hash mismatch)"
					     : dcr_strerror(ret),
		(unsigned long long)ch->s[bad].rv->v,
		(unsigned long long)ch->s[bad].ref.off, ch->s[bad].ref.len,
		WHERE_ARGS(w));
}

/*
 * Materialize the chunk described by @ref0 into @out (@clen bytes),
 * verified against ref0->hash. The caller has already looked in the
 * cache for ref0->hash itself.
 */
static int materialize(struct dcr_reader *r, const struct where *w,
		       const struct dcr_catalog_chunk *ref0, uint32_t clen,
		       uint8_t *out)
{
	struct chain ch = { 0 };
	struct dcr_codec *codec = NULL;
	uint8_t got[DCR_HASH_LEN];
	size_t bad = 0;
	int ret;

	ret = resolve_chain(r, w, ref0, clen, out, &ch);
	if (ret)
		goto out_free;
	for (size_t k = 0; k < ch.n; k++) {
		ret = fetch_frame(r, w, &ch.s[k]);
		if (ret)
			goto out_free;
	}
	if (ch.n) {
		codec = codec_get(r);
		if (!codec) {
			ret = DCR_ERR(-ENOMEM);
			goto out_free;
		}
		ret = apply_chain(codec, &ch, out, clen, false, &bad);
		if (ret == -ENOMEM)
			goto out_codec;
	}
	if (!ret) {
		dcr_sha256(out, clen, got);
		if (dcr_hash_eq(got, ref0->hash))
			goto out_codec;
	}
	if (ch.n) {
		blame(r, w, codec, &ch, out, clen, ret, bad);
	} else {
		dcr_err(WHERE_FMT ": cached base does not match (hash "
			"mismatch)", WHERE_ARGS(w));
	}
	ret = DCR_ERR(-EIO);
out_codec:
	if (codec)
		codec_put(r, codec);
out_free:
	chain_free(&ch);
	return ret;
}

static void flight_release(struct dcr_reader *r, struct flight *f)
{
	bool last;

	pthread_mutex_lock(&r->sf_lock);
	last = --f->refs == 0;
	pthread_mutex_unlock(&r->sf_lock);
	if (last) {
		free(f->data);
		free(f);
	}
}

/* One chunk of a read: where it is and where its bytes go. */
struct piece {
	struct where w;
	struct dcr_catalog_chunk ref;
	uint32_t clen, coff;
	size_t n;
	uint8_t *dst;
};

/*
 * Fast path: look up the chunk's reference and try the cache. 0 on a
 * hit, -ENOENT on a miss (p->ref is then filled), else -errno (logged).
 */
static int piece_fast(struct dcr_reader *r, struct piece *p)
{
	int ret;

	ret = dcr_catalog_get_chunk(r->cat, p->w.rv->v, p->w.file, p->w.chunk,
				    &p->ref);
	if (ret) {
		dcr_err(WHERE_FMT ": no chunk reference in the catalog: %s",
			WHERE_ARGS(&p->w), dcr_strerror(ret));
		return DCR_ERR(-EIO);
	}
	return dcr_cache_read(r->cache, p->ref.hash, p->clen, p->coff, p->dst,
			      p->n);
}

/*
 * Slow path after a cache miss: join the in-flight materialization of
 * the same hash, or lead one (fetch, decode, verify, cache), then copy
 * the slice.
 */
static int piece_slow(struct dcr_reader *r, struct piece *p)
{
	const uint8_t *hash = p->ref.hash;
	struct flight *f;
	int ret;

	pthread_mutex_lock(&r->sf_lock);
	for (f = r->flights; f; f = f->next)
		if (f->len == p->clen && memcmp(f->hash, hash, DCR_HASH_LEN) == 0)
			break;
	if (f) {
		/* Somebody is building it: wait and copy. */
		f->refs++;
		while (!f->done)
			pthread_cond_wait(&r->sf_cond, &r->sf_lock);
		pthread_mutex_unlock(&r->sf_lock);
		ret = f->rc;
		if (!ret)
			memcpy(p->dst, f->data + p->coff, p->n);
		flight_release(r, f);
		return ret;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		pthread_mutex_unlock(&r->sf_lock);
		return DCR_ERR(-ENOMEM);
	}
	memcpy(f->hash, hash, DCR_HASH_LEN);
	f->len = p->clen;
	f->refs = 1;
	f->next = r->flights;
	r->flights = f;
	pthread_mutex_unlock(&r->sf_lock);

	f->data = malloc(p->clen);
	if (!f->data) {
		ret = DCR_ERR(-ENOMEM);
	} else {
		/* A leader that just finished may have cached it after our
		 * miss: look once more before fetching. */
		ret = dcr_cache_read(r->cache, hash, p->clen, 0, f->data,
				     p->clen);
		if (ret == -ENOENT) {
			ret = materialize(r, &p->w, &p->ref, p->clen, f->data);
			if (!ret)
				dcr_cache_put(r->cache, hash, f->data, p->clen);
		}
	}

	pthread_mutex_lock(&r->sf_lock);
	for (struct flight **pp = &r->flights; *pp; pp = &(*pp)->next) {
		if (*pp == f) {
			*pp = f->next;
			break;
		}
	}
	f->rc = ret;
	f->done = true;
	pthread_cond_broadcast(&r->sf_cond);
	pthread_mutex_unlock(&r->sf_lock);
	if (!ret)
		memcpy(p->dst, f->data + p->coff, p->n);
	flight_release(r, f);
	return ret;
}

/* Shared state of the threads materializing the misses of one read. */
struct par {
	struct dcr_reader *r;
	struct piece *miss;
	size_t nmiss;
	atomic_size_t next;
	atomic_int err; /* first error, 0 if none */
};

static void *par_worker(void *arg)
{
	struct par *pp = arg;
	size_t i;

	while ((i = atomic_fetch_add(&pp->next, 1)) < pp->nmiss) {
		int ret;

		if (atomic_load(&pp->err))
			break;
		ret = piece_slow(pp->r, &pp->miss[i]);
		if (ret) {
			int zero = 0;
			atomic_compare_exchange_strong(&pp->err, &zero, ret);
			break;
		}
	}
	return NULL;
}

/* Materialize @nmiss missed chunks on up to fetch_threads threads. */
static int read_misses(struct dcr_reader *r, struct piece *miss, size_t nmiss)
{
	struct par pp = { .r = r, .miss = miss, .nmiss = nmiss };
	pthread_t th[64];
	size_t nth = 0, want;

	atomic_init(&pp.next, 0);
	atomic_init(&pp.err, 0);
	want = DCR_MIN((size_t)r->fetch_threads, nmiss);
	want = DCR_MIN(want, DCR_ARRAY_SIZE(th) + 1);
	/* The calling thread is one of the workers. */
	for (; nth + 1 < want; nth++)
		if (pthread_create(&th[nth], NULL, par_worker, &pp) != 0)
			break;
	par_worker(&pp);
	for (size_t i = 0; i < nth; i++)
		pthread_join(th[i], NULL);
	return atomic_load(&pp.err);
}

ssize_t dcr_reader_read(struct dcr_reader *r, uint64_t v, uint32_t idx,
			uint64_t off, void *dst, size_t len)
{
	const struct dcr_entry *e;
	struct piece one, *miss = &one;
	size_t nmiss = 0, cap = 1;
	struct rver *rv;
	uint64_t size, end, pos;
	uint32_t cs;
	int ret;

	ret = get_ver(r, v, &rv);
	if (ret)
		return ret;
	if (idx >= rv->info.nentries)
		return -ENOENT;
	e = &rv->entries[idx];
	if (e->type == DCR_FT_DIR)
		return -EISDIR;
	if (e->type != DCR_FT_REG)
		return DCR_ERR(-EIO);
	size = e->size;
	if (off >= size || len == 0)
		return 0;
	if (len > SSIZE_MAX)
		len = SSIZE_MAX;
	end = off + DCR_MIN((uint64_t)len, size - off);
	cs = rv->chunk_size;

	/* Serve what the cache holds; collect the misses. */
	for (pos = off; pos < end;) {
		uint64_t i = dcr_chunk_index(pos, cs);
		struct piece p;

		p.w.rv = rv;
		p.w.file = idx - 1;
		p.w.chunk = i;
		p.clen = dcr_chunk_len(size, cs, i);
		p.coff = (uint32_t)(pos - i * cs);
		p.n = (size_t)DCR_MIN(end - pos, (uint64_t)p.clen - p.coff);
		p.dst = (uint8_t *)dst + (pos - off);
		pos += p.n;
		ret = piece_fast(r, &p);
		if (ret == 0)
			continue;
		if (ret != -ENOENT)
			goto out_free;
		if (nmiss == cap) {
			size_t ncap = cap * 4;
			struct piece *tmp = miss == &one ? NULL : miss;
			tmp = realloc(tmp, ncap * sizeof(*tmp));
			if (!tmp) {
				ret = DCR_ERR(-ENOMEM);
				goto out_free;
			}
			if (miss == &one)
				tmp[0] = one;
			miss = tmp;
			cap = ncap;
		}
		miss[nmiss++] = p;
	}

	/* Materialize the misses, in parallel when there are several. */
	if (nmiss == 1 || (nmiss > 1 && r->fetch_threads <= 1)) {
		ret = 0;
		for (size_t k = 0; k < nmiss && !ret; k++)
			ret = piece_slow(r, &miss[k]);
	} else if (nmiss > 1) {
		ret = read_misses(r, miss, nmiss);
	} else {
		ret = 0;
	}
out_free:
	if (miss != &one)
		free(miss);
	return ret ? ret : (ssize_t)(end - off);
}
