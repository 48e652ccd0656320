/* SPDX-License-Identifier: MIT */
/*
 * rversions.c - the versions a reader knows (see reader_int.h).
 *
 * Contract: one struct rver per indexed version, in r->vs.vers ascending,
 * created from the catalog at open (load_catalog) or by a refresh that
 * fetched, verified and indexed a new manifest; corrupt manifests are
 * remembered (bad list) and skipped. A version's tree is built on first
 * use (get_ver) and then never changes while loaded. With max_trees,
 * trees_trim unloads the least recently used trees nobody holds (pins
 * from dcr_reader_version; reads in progress and queued work keep every
 * tree, see reader_idle), and the next use loads them again from the
 * catalog. refresh_lock serialises refreshes; lock guards the
 * version array, the bad list, the tags and the tree install.
 *
 * Identity (DESIGN.md 7a): each version records the store object it was
 * indexed from (struct dcr_catalog_ident). A whole listing - the first
 * refresh, then every relist_ns - checks them: a changed manifest is
 * re-indexed (reader_replace_version), a version gone is dropped
 * (reader_drop_version); those live in ridentity.c. The struct rver
 * replaced or dropped is marked dead and kept on the graveyard until
 * close, so every pointer handed out stays valid; its tree is unloaded
 * like any other (trees_trim). Layout generations: rlayout.c.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache.h"
#include "catalog.h"
#include "common.h"
#include "hash.h"
#include "manifest.h"
#include "reader.h"
#include "reader_int.h"
#include "sign.h"
#include "sview.h"

/* ------------------------------------------------------------ versions */

struct vers_key {
	const struct dcr_reader *r;
	uint64_t v;
};

static bool vers_before(const void *arg, size_t i)
{
	const struct vers_key *k = arg;

	return k->r->vs.vers[i]->v < k->v;
}

/* Index of the first version >= @v. Caller holds the lock. */
size_t vers_lower(const struct dcr_reader *r, uint64_t v)
{
	const struct vers_key k = { .r = r, .v = v };

	return dcr_partition_point(r->vs.nvers, vers_before, &k);
}

struct rver *vers_find(const struct dcr_reader *r, uint64_t v)
{
	size_t i = vers_lower(r, v);

	return i < r->vs.nvers && r->vs.vers[i]->v == v ? r->vs.vers[i] : NULL;
}

/* Insert @rv in order. Caller holds the lock. */
static int vers_insert(struct dcr_reader *r, struct rver *rv)
{
	size_t i = vers_lower(r, rv->v);

	if (i < r->vs.nvers && r->vs.vers[i]->v == rv->v)
		return -EEXIST;
	if (r->vs.nvers == r->vs.capvers) {
		size_t cap = r->vs.capvers ? r->vs.capvers * 2 : 16;
		struct rver **tmp = realloc(r->vs.vers, cap * sizeof(*tmp));
		if (!tmp)
			return DCR_ERR(-ENOMEM);
		r->vs.vers = tmp;
		r->vs.capvers = cap;
	}
	memmove(&r->vs.vers[i + 1], &r->vs.vers[i],
		(r->vs.nvers - i) * sizeof(*r->vs.vers));
	r->vs.vers[i] = rv;
	r->vs.nvers++;
	return 0;
}

static bool is_bad(const struct dcr_reader *r, uint64_t v)
{
	for (size_t i = 0; i < r->vs.nbad; i++)
		if (r->vs.bad[i] == v)
			return true;
	return false;
}

/* Remember a corrupt manifest so that it is neither fetched nor logged
 * again until r->vs.bad_retry_after has passed (see forget_bad). */
void mark_bad(struct dcr_reader *r, uint64_t v)
{
	pthread_mutex_lock(&r->vs.lock);
	if (!is_bad(r, v)) {
		if (r->vs.nbad == r->vs.capbad) {
			size_t cap = r->vs.capbad ? r->vs.capbad * 2 : 8;
			uint64_t *tmp = realloc(r->vs.bad, cap * sizeof(*tmp));
			if (tmp) {
				r->vs.bad = tmp;
				r->vs.capbad = cap;
			}
		}
		if (r->vs.nbad < r->vs.capbad)
			r->vs.bad[r->vs.nbad++] = v;
	}
	if (r->vs.nbad == 1 || !r->vs.bad_retry_ns)
		r->vs.bad_retry_ns = dcr_mono_ns() + r->vs.bad_retry_after;
	r->vs.max_bad = DCR_MAX(r->vs.max_bad, v);
	pthread_mutex_unlock(&r->vs.lock);
}

void rver_free(struct rver *rv)
{
	if (!rv)
		return;
	dcr_manifest_free(&rv->m);
	free(rv->entries);
	free(rv);
}

void versions_init(struct dcr_reader *r, const struct dcr_reader_opts *opts)
{
	pthread_mutex_init(&r->vs.refresh_lock, NULL);
	pthread_mutex_init(&r->vs.lock, NULL);
	r->vs.bad_retry_after = opts->retry_bad_ms ?
				(int64_t)opts->retry_bad_ms * 1000000 :
				BAD_RETRY_NS_DEFAULT;
	r->vs.relist_ns = opts->relist_ms ? (int64_t)opts->relist_ms * 1000000 :
					    RELIST_NS_DEFAULT;
	r->vs.max_trees = opts->max_trees;
	r->vs.trust = opts->trust;
}

void versions_close(struct dcr_reader *r)
{
	for (size_t i = 0; i < r->vs.nvers; i++)
		rver_free(r->vs.vers[i]);
	while (r->vs.graveyard) {
		struct rver *rv = r->vs.graveyard;
		r->vs.graveyard = rv->next_dead;
		rver_free(rv);
	}
	free(r->vs.vers);
	free(r->vs.changes);
	dcr_layout_free(&r->vs.layout);
	for (size_t i = 0; i < r->vs.ntag_rejected; i++)
		free(r->vs.tag_rejected[i]);
	free(r->vs.tag_rejected);
	for (size_t i = 0; i < r->vs.ntag_bad; i++)
		free(r->vs.tag_bad[i].name);
	free(r->vs.tag_bad);
	free(r->vs.bad);
	dcr_reader_tags_free(r->vs.tags, r->vs.ntags);
	pthread_mutex_destroy(&r->vs.lock);
	pthread_mutex_destroy(&r->vs.refresh_lock);
}

struct path_key {
	const struct dcr_version_info *vi;
	const char *path;
};

/* Entry 1 + @i (entry 0, the root, is not in the sorted run). */
static bool path_before(const void *arg, size_t i)
{
	const struct path_key *k = arg;

	return strcmp(k->vi->entries[1 + i].path, k->path) < 0;
}

uint32_t dcr_version_lookup(const struct dcr_version_info *vi, const char *path)
{
	const struct path_key k = { .vi = vi, .path = path };
	size_t i;

	if (vi->nentries < 2)
		return 0;
	i = 1 + dcr_partition_point(vi->nentries - 1, path_before, &k);
	return i < vi->nentries && !strcmp(vi->entries[i].path, path) ? (uint32_t)i : 0;
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
			int64_t k = dcr_manifest_find_n(m, i, f->path,
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
	rv->info.tree = rv->tree;
	rv->info.parent = rv->parent;
	rv->info.ctime_ns = rv->ctime_ns;
	rv->info.chunk_size = rv->chunk_size;
	rv->info.nentries = n;
	rv->info.entries = e;
	return 0;
}

/*
 * Make sure @rv's tree is loaded. Called without the lock: the catalog
 * read and the tree build run unlocked (the catalog may be busy indexing
 * a new version), and the result is installed under the lock; two
 * threads racing to load the same version both build it and the loser
 * frees its copy. Once loaded, m, entries and info never change.
 */
static int rver_load(struct dcr_reader *r, struct rver *rv)
{
	struct rver tmp;
	bool loaded;
	int ret;

	pthread_mutex_lock(&r->vs.lock);
	loaded = rv->loaded;
	pthread_mutex_unlock(&r->vs.lock);
	if (loaded)
		return 0;
	memset(&tmp, 0, sizeof(tmp));
	tmp.v = rv->v;
	tmp.tree = rv->tree;
	tmp.parent = rv->parent;
	tmp.ctime_ns = rv->ctime_ns;
	tmp.chunk_size = rv->chunk_size;
	tmp.nfiles = rv->nfiles;
	ret = dcr_catalog_load_files(r->cat, rv->v, &tmp.m);
	if (ret == 0 && atomic_load(&rv->dead)) {
		/* Replaced meanwhile: what we read may be the new index. */
		dcr_manifest_free(&tmp.m);
		return -ESTALE;
	}
	if (ret)
		return ret == -ENOENT ? DCR_ERR(-EIO) : ret;
	ret = build_tree(&tmp);
	if (ret) {
		dcr_manifest_free(&tmp.m);
		return ret;
	}
	tmp.info.format = tmp.m.format;
	memcpy(tmp.info.check, tmp.m.check, DCR_HASH_LEN);
	rver_signer(r, &tmp.m, tmp.info.signer);
	pthread_mutex_lock(&r->vs.lock);
	if (!rv->loaded) {
		rv->m = tmp.m;
		rv->entries = tmp.entries;
		rv->info = tmp.info;
		rv->info.entries = rv->entries;
		rv->info.nmeta = rv->m.nmeta;
		rv->info.meta = rv->m.meta;
		rv->loaded = true;
		tmp.entries = NULL;
		memset(&tmp.m, 0, sizeof(tmp.m));
	}
	pthread_mutex_unlock(&r->vs.lock);
	dcr_manifest_free(&tmp.m);
	free(tmp.entries);
	return 0;
}

/* The loaded version @v, or -ENOENT. The pointer stays valid until close;
 * the tree while a read is in progress (see trees_trim). */
int get_ver(struct dcr_reader *r, uint64_t v, struct rver **out)
{
	struct rver *rv;
	int ret;

	pthread_mutex_lock(&r->vs.lock);
	rv = vers_find(r, v);
	if (rv)
		rv->used = ++r->vs.use_clock;
	pthread_mutex_unlock(&r->vs.lock);
	ret = rv ? rver_load(r, rv) : -ENOENT;
	*out = ret ? NULL : rv;
	return ret;
}

struct rver *rver_new(uint64_t v, uint64_t parent, int64_t ctime_ns,
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

static int load_tag(const char *name, uint64_t version, void *arg)
{
	struct dcr_reader *r = arg;
	struct dcr_tag *tmp = realloc(r->vs.tags,
				      (r->vs.ntags + 1) * sizeof(*tmp));

	if (!tmp)
		return DCR_ERR(-ENOMEM);
	r->vs.tags = tmp;
	tmp[r->vs.ntags].name = strdup(name);
	if (!tmp[r->vs.ntags].name)
		return DCR_ERR(-ENOMEM);
	tmp[r->vs.ntags].version = version;
	r->vs.ntags++;
	return 0;
}

/* Load the versions and tags recorded in the catalog. */
int load_catalog(struct dcr_reader *r)
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
		rv->id = vs[i].id;
		rver_prov(r, rv, vs[i].has_check, vs[i].check, vs[i].cparent,
			  vs[i].has_sig, &vs[i].sig, vs[i].id.has_ehash);
		ret = vers_insert(r, rv);
		if (ret)
			rver_free(rv);
	}
	free(vs);
	if (ret)
		return ret;
	/* with a trust set, tags come from the store, each signature
	 * checked, at the first refresh */
	return r->vs.trust ? 0 : dcr_catalog_tags(r->cat, load_tag, r);
}

/* ------------------------------------------------------------ refresh */


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
		if (!ctx->partial)
			dcr_warn("%s: parent version %llu is missing or corrupt; "
				 "reads that need it will fail", key,
				 (unsigned long long)m->parent);
		return 0;
	}
	if (ret)
		dcr_err("%s: corrupt manifest: inconsistent with its parent "
			"version %llu", key, (unsigned long long)m->parent);
	return ret;
}

/*
 * Fetch and decode version @v's manifest (dcr_manifest_fetch: the one
 * policy). -ENOENT if absent, -EBADMSG if corrupt or of a newer format
 * (logged, naming the key), other -errno for a store failure, which is
 * not logged here (see fetch_failed).
 */
int fetch_manifest(struct dcr_reader *r, uint64_t v, const char *key,
			  struct dcr_manifest *m, struct dcr_catalog_ident *id,
			  uint8_t *tail)
{
	struct dcr_mfetch f = { .key = key, .v = v, .quiet = true };
	int ret = dcr_manifest_fetch(r->st, &f, m);

	if (ret == -EPROTONOSUPPORT)
		ret = DCR_ERR(-EBADMSG); /* logged as an upgrade to make */
	if (ret)
		return ret;
	memset(id, 0, sizeof(*id));
	memcpy(id->mhash, f.mhash, DCR_HASH_LEN);
	id->has_mhash = true;
	id->obj_size = f.size;
	if (tail && f.size >= DCR_HASH_LEN)
		memcpy(tail, f.tail, DCR_HASH_LEN);
	return 0;
}

/*
 * Errors of one object that the next poll would meet again: such a
 * version is skipped like a corrupt one (a directory where the manifest
 * should be, a manifest over the size limit, access refused to this one
 * key). Anything else (EIO, ETIMEDOUT, ... from a sick server) is
 * retried at the next refresh.
 */
static bool permanent_err(int e)
{
	return e == -EBADMSG || e == -EISDIR || e == -ENOTDIR ||
	       e == -EFBIG || e == -E2BIG || e == -EACCES || e == -EPERM ||
	       e == -ELOOP || e == -ENAMETOOLONG || e == -EINVAL;
}

/*
 * Log a failure to read version @v's manifest (@v 0: to list versions/),
 * at most once per FETCH_LOG_INTERVAL_NS for the same version and
 * error; repeats go to the debug log. Caller holds refresh_lock.
 */
static void fetch_failed(struct dcr_reader *r, uint64_t v, int err,
			 const char *what)
{
	const char *url = r->st->url ? r->st->url : "store";
	int64_t now = dcr_now_ns();
	unsigned slot = FETCH_LOG_SLOTS;
	char key[64] = "versions/";

	if (v)
		dcr_version_key(v, key, sizeof(key));
	for (unsigned i = 0; i < FETCH_LOG_SLOTS; i++)
		if (r->vs.flog[i].at_ns && r->vs.flog[i].v == v)
			slot = i;
	if (slot < FETCH_LOG_SLOTS && r->vs.flog[slot].err == err &&
	    now - r->vs.flog[slot].at_ns < FETCH_LOG_INTERVAL_NS) {
		dcr_debug("%s: cannot read %s: %s (again)", url, key,
			  dcr_strerror(err));
		return;
	}
	if (slot == FETCH_LOG_SLOTS)
		slot = r->vs.flog_next++ % FETCH_LOG_SLOTS;
	r->vs.flog[slot].v = v;
	r->vs.flog[slot].err = err;
	r->vs.flog[slot].at_ns = now;
	dcr_err("%s: cannot read %s: %s%s", url, key, dcr_strerror(err), what);
}

/* See reader_int.h. */
int reader_check_manifest(struct dcr_reader *r, struct refresh_ctx *ctx,
			  const struct dcr_manifest *m, const char *key)
{
	uint64_t v = m->version;
	int ret = dcr_manifest_validate(m);

	if (ret) {
		dcr_err("%s: corrupt manifest: %s", key, dcr_strerror(ret));
	} else if (m->parent >= v) {
		dcr_err("%s: corrupt manifest: parent %llu is not older",
			key, (unsigned long long)m->parent);
		ret = -EBADMSG;
	} else if (m->parent) {
		ret = check_parent(r, ctx, m, key);
	}
	return ret;
}

/* Keep @m (moved) as the last manifest of this refresh. */
static void ctx_keep(struct refresh_ctx *ctx, struct dcr_manifest *m)
{
	refresh_ctx_free(ctx);
	ctx->last = *m; /* moved: the next version is likely its child */
	ctx->have_last = true;
	memset(m, 0, sizeof(*m));
}

/*
 * Fetch, verify and index version @v (@obj: what a listing said of its
 * object, or NULL). 0 if indexed or skipped as corrupt (logged once),
 * -ENOENT if it does not exist, other -errno for a store failure (not
 * logged: the caller marks or retries and logs).
 */
static int index_manifest(struct dcr_reader *r, struct refresh_ctx *ctx,
			  struct dcr_manifest *mp, struct dcr_catalog_ident *idp,
			  const uint8_t *tail, const struct dcr_manifest *enc);

static int index_version(struct dcr_reader *r, struct refresh_ctx *ctx,
			 uint64_t v, const struct dcr_obj_info *obj)
{
	struct dcr_catalog_ident id;
	uint8_t tail[DCR_HASH_LEN];
	char key[64];
	struct dcr_manifest m;
	int ret;

	dcr_version_key(v, key, sizeof(key));
	memset(&m, 0, sizeof(m));
	ret = fetch_manifest(r, v, key, &m, &id, tail);
	if (ret == -EBADMSG) {
		/* fetch_manifest logged it, naming the key. */
		mark_bad(r, v);
		return 0;
	}
	if (ret)
		return ret; /* not logged: the caller decides */
	if (obj && obj->size == id.obj_size)
		id.obj_mtime_ns = obj->mtime_ns;
	return index_manifest(r, ctx, &m, &id, tail, NULL);
}

/*
 * Verify and index version @mp->version, fetched from versions/<n>
 * (@mp, freed or kept here; @idp: its object; @tail its last 32 bytes,
 * used when the listing gave no time) and encoded as @enc says (the
 * layout's manifest object as a store view fetched it; NULL: fetched
 * here if the layout names one). As index_version.
 */
static int index_manifest(struct dcr_reader *r, struct refresh_ctx *ctx,
			  struct dcr_manifest *mp, struct dcr_catalog_ident *idp,
			  const uint8_t *tail, const struct dcr_manifest *enc)
{
	struct dcr_catalog_ident id = *idp;
	struct dcr_manifest m = *mp;
	const uint64_t v = m.version;
	char key[64];
	struct rver *rv;
	int ret;

	memset(mp, 0, sizeof(*mp));
	dcr_version_key(v, key, sizeof(key));
	/* the encoding the store's layout names for it, if any (checked
	 * there, against its base); else the manifest as committed */
	if ((ret = layout_apply(r, ctx, &m, &id, enc))) {
		dcr_manifest_free(&m);
		return ret;
	}
	ret = id.has_ehash ? 0 : reader_check_manifest(r, ctx, &m, key);
	if (ret == -ENOMEM) {
		dcr_manifest_free(&m);
		return ret;
	}
	if (ret) {
		mark_bad(r, v);
		dcr_manifest_free(&m);
		return 0;
	}

	ret = dcr_catalog_add_version_ident(r->cat, &m, &id);
	if (ret == -EEXIST) {
		/* Indexed, but not known in memory (a drop whose catalog
		 * removal failed): what we just fetched is the truth. */
		ret = dcr_catalog_replace_version(r->cat, &m, &id);
	}
	if (ret) {
		/* Our catalog failed (and logged), not the manifest: never
		 * a reason to skip the version, retry it. */
		dcr_manifest_free(&m);
		return ret == -ENOMEM ? ret : DCR_ERR(-EIO);
	}
	rv = rver_new(v, m.parent, m.ctime_ns, m.chunk_size, m.nfiles);
	ctx_keep(ctx, &m);
	if (!rv)
		return DCR_ERR(-ENOMEM);
	rv->gen = r->vs.gen_clock;
	rv->id = id;
	rver_prov(r, rv, true, ctx->last.check, ctx->last.cparent,
		  ctx->last.has_sig, &ctx->last.sig, id.has_ehash);
	if (!id.obj_mtime_ns && tail) { /* a probe's: see rver.mtail */
		rv->has_mtail = true;
		memcpy(rv->mtail, tail, DCR_HASH_LEN);
	}
	pthread_mutex_lock(&r->vs.lock);
	/* A number this process dropped (gone from a listing) that comes
	 * back with another manifest was replaced in the store: say so as
	 * loudly as when the listing catches the change in one go. Its
	 * tree is a new one either way (inodes of the old one stay stale).
	 * The graveyard is newest first. */
	struct dcr_catalog_ident was = { .has_mhash = false };
	bool seen = false;
	for (const struct rver *d = r->vs.graveyard; d; d = d->next_dead) {
		if (d->v != v)
			continue;
		if (!seen)
			rv->tree = d->tree + 1;
		seen = true;
		if (d->id.has_mhash) {
			was = d->id;
			break;
		}
	}
	ret = vers_insert(r, rv);
	pthread_mutex_unlock(&r->vs.lock);
	if (!ret && was.has_mhash && id.has_mhash && !dcr_hash_eq(was.mhash, id.mhash)) {
		char oh[16], nh[16];
		dcr_err("%s: %s changed in the store (manifest %s -> %s): "
			"re-indexed; the old tree is no longer served",
			r->st->url ? r->st->url : "store", key,
			hash_prefix(&was, oh), hash_prefix(&id, nh));
	}
	if (ret)
		rver_free(rv);
	return ret == -EEXIST ? 0 : ret;
}

/*
 * Drop the known versions that the complete listing @l does not hold
 * (collected by gc, deleted by an admin). A listing that holds none of
 * them is not believed (a store emptied whole is a recreated store,
 * which the store id catches at the next mount): warned, nothing
 * dropped.
 */
static void drop_gone(struct dcr_reader *r, struct dcr_sview *l)
{
	uint64_t *gone = NULL;
	size_t ngone = 0, nknown;

	pthread_mutex_lock(&r->vs.lock);
	nknown = r->vs.nvers;
	if (nknown)
		gone = malloc(nknown * sizeof(*gone));
	for (size_t i = 0; gone && i < r->vs.nvers; i++)
		if (!dcr_sview_find(l, r->vs.vers[i]->v))
			gone[ngone++] = r->vs.vers[i]->v;
	pthread_mutex_unlock(&r->vs.lock);
	if (ngone && ngone == nknown) {
		dcr_warn("%s: versions/ lists none of the %zu versions this "
			 "mount knows; not believed, they stay served",
			 r->st->url ? r->st->url : "store", nknown);
		ngone = 0;
	}
	for (size_t i = 0; i < ngone; i++)
		reader_drop_version(r, gone[i]);
	free(gone);
}

/*
 * List versions/: index every version not known yet, check the identity
 * of every known one (verify_version) and drop those gone from the
 * store. The first refresh of a process does this, every relist_ns
 * one does, and so does a probe that met an error other than "absent"
 * (@fail_v, @fail_err: not fetched again here), so that one unreadable
 * version does not hide the ones after it. A version that fails with a
 * permanent error (permanent_err) is marked bad and logged once; after
 * a transient one the next refresh lists again, so that it is retried
 * and not skipped by probing past it.
 */
static int refresh_list(struct dcr_reader *r, struct refresh_ctx *ctx,
			uint64_t fail_v, int fail_err)
{
	bool transient = false, seen_fail = false;
	struct dcr_sview l;
	char key[64];
	int ret;

	/* the store view's listing (sview.h): sorted, unique */
	ret = dcr_sview_load(&l, r->st, DCR_SVIEW_LIST_ONLY);
	if (ret) {
		if (fail_v)
			fetch_failed(r, fail_v, fail_err, "");
		fetch_failed(r, 0, ret, "");
		return ret;
	}
	for (size_t i = 0; i < l.nvs; i++) {
		const uint64_t v = l.vs[i].v;
		const struct dcr_obj_info info = { .size = l.vs[i].obj_size,
						   .mtime_ns = l.vs[i].obj_mtime_ns };
		struct rver *rv;
		bool bad;
		int rc;

		pthread_mutex_lock(&r->vs.lock);
		rv = vers_find(r, v);
		bad = is_bad(r, v);
		pthread_mutex_unlock(&r->vs.lock);
		if (bad)
			continue;
		if (v == fail_v) {
			rc = fail_err;
			seen_fail = true;
		} else if (rv) {
			rc = verify_version(r, ctx, rv, &info);
		} else {
			rc = index_version(r, ctx, v, &info);
		}
		if (rc == -ENOMEM) {
			ret = rc;
			break;
		}
		if (!rc)
			continue;
		if (permanent_err(rc)) {
			/* Would fail the same way forever: skip it, once. */
			dcr_version_key(v, key, sizeof(key));
			dcr_err("%s: cannot read %s: %s; version %llu is "
				"skipped", r->st->url ? r->st->url : "store",
				key, dcr_strerror(rc), (unsigned long long)v);
			if (rv)
				reader_drop_version(r, v);
			mark_bad(r, v);
			continue;
		}
		if (rc != -ENOENT) /* deleted since listed: nothing to say */
			fetch_failed(r, v, rc, "; retrying at the next "
					       "refresh");
		transient = true;
	}
	if (fail_v && !seen_fail)
		fetch_failed(r, fail_v, fail_err, ""); /* not even listed */
	if (!ret)
		drop_gone(r, &l);
	dcr_sview_free(&l);
	if (!ret) {
		r->vs.listed = !transient;
		r->vs.relist_at = dcr_mono_ns() + r->vs.relist_ns;
	}
	return ret;
}

/* Corrupt versions in a row after which a probe stops and lists. */
#define PROBE_BAD_RUN_MAX 8

/*
 * Later refreshes: probe n+1, n+2, ... until one does not exist (one
 * cheap GET when nothing is new). Any other failure falls back to a
 * listing (refresh_list), which finds the versions after it.
 */
static int refresh_probe(struct dcr_reader *r, struct refresh_ctx *ctx)
{
	uint64_t next;
	int ret;

	pthread_mutex_lock(&r->vs.lock);
	next = DCR_MAX(r->vs.nvers ? r->vs.vers[r->vs.nvers - 1]->v : 0,
		       r->vs.max_bad);
	pthread_mutex_unlock(&r->vs.lock);
	for (unsigned bad_run = 0;;) {
		if (dcr_stop_requested())
			return -ECANCELED; /* the process is ending */
		ret = index_version(r, ctx, ++next, NULL);
		if (ret == -ENOENT)
			return 0;
		if (ret == -ENOMEM)
			return ret;
		if (ret)
			return refresh_list(r, ctx, next, ret);
		/* A server that answers every number with bad bytes is not
		 * probed for ever: after a run of them, the listing says
		 * which versions exist. */
		pthread_mutex_lock(&r->vs.lock);
		bad_run = is_bad(r, next) ? bad_run + 1 : 0;
		pthread_mutex_unlock(&r->vs.lock);
		if (bad_run >= PROBE_BAD_RUN_MAX)
			return refresh_list(r, ctx, 0, 0);
	}
}

static int cmp_tag(const void *a, const void *b)
{
	return strcmp(((const struct dcr_tag *)a)->name,
		      ((const struct dcr_tag *)b)->name);
}

/*
 * With a trust set: whether tag @name -> @v, signed @ts (NULL: not
 * signed), is to be followed: signed by a trusted key for this store
 * over the manifest of @v that is shown. A tag refused is logged and
 * counted once per name and version.
 */
static bool tag_trusted(struct dcr_reader *r, const char *name, uint64_t v,
			const struct dcr_tag_sig *ts)
{
	enum dcr_sig_status st = DCR_SIG_NONE;
	uint8_t check[DCR_HASH_LEN];
	const char *why = NULL;
	char seen[300];
	struct rver *rv;
	bool known;

	pthread_mutex_lock(&r->vs.lock);
	rv = vers_find(r, v);
	known = rv && rver_shown(r, rv) && rv->has_check;
	if (known)
		memcpy(check, rv->check, DCR_HASH_LEN);
	pthread_mutex_unlock(&r->vs.lock);
	if (!known)
		why = "it names a version not shown";
	else if (ts && (st = dcr_tag_sig_check(ts, r->vs.store_id, name, v,
					       check, r->vs.trust)) == DCR_SIG_VALID)
		return true;
	else
		why = dcr_sig_status_str(st);
	snprintf(seen, sizeof(seen), "%s %" PRIu64, name, v);
	for (size_t i = 0; i < r->vs.ntag_rejected; i++)
		if (!strcmp(r->vs.tag_rejected[i], seen))
			return false;
	char **tmp = realloc(r->vs.tag_rejected,
			     (r->vs.ntag_rejected + 1) * sizeof(*tmp));
	if (tmp) {
		r->vs.tag_rejected = tmp;
		if ((tmp[r->vs.ntag_rejected] = strdup(seen)))
			r->vs.ntag_rejected++;
	}
	STAT_ADD(r, rej_tags, 1);
	dcr_err("%s: tag %s (version %" PRIu64 ") is ignored (trust=): %s",
		r->st->url ? r->st->url : "store", name, v, why);
	return false;
}

/*
 * A malformed tag object @name (found so at this poll, @b) is counted at
 * every poll and logged at error level only when it was not malformed
 * with the same content at the last poll: a poll every second must not
 * log the same line every second. It is noted in @next (the set of the
 * next poll, of @nnext entries, room for all). Caller holds refresh_lock.
 */
static void tag_malformed(struct dcr_reader *r, const char *name,
			  const struct dcr_tag_bad *b, struct rbad_tag *next,
			  size_t *nnext)
{
	bool seen = false;

	STAT_ADD(r, tag_errors, 1);
	for (size_t i = 0; i < r->vs.ntag_bad && !seen; i++)
		seen = !strcmp(r->vs.tag_bad[i].name, name) &&
		       !memcmp(r->vs.tag_bad[i].digest, b->digest,
			       sizeof(b->digest));
	if (!seen)
		dcr_err("%s: tag object tags/%s is malformed (%s); it is "
			"ignored (logged again only when it changes)",
			r->st->url ? r->st->url : "store", name, b->why);
	if ((next[*nnext].name = strdup(name))) {
		memcpy(next[*nnext].digest, b->digest, sizeof(b->digest));
		(*nnext)++;
	}
}

/* Re-list tags/ and replace the tag set. */
static int refresh_tags(struct dcr_reader *r)
{
	struct rbad_tag *bad_next = NULL;
	size_t nbad_next = 0;
	struct dcr_sview l = { .st = r->st };
	struct dcr_tag *tags = NULL, *old;
	const char **names = NULL;
	uint64_t *vs = NULL;
	size_t nt = 0, nold;
	int ret;

	/* the store view's listing (sview.h); each tag read here, its
	 * damage logged once per content */
	ret = dcr_sview_list_tags(&l);
	if (ret) {
		dcr_err("%s: cannot list tags/: %s",
			r->st->url ? r->st->url : "store", dcr_strerror(ret));
		goto out_free;
	}
	tags = calloc(l.ntags ? l.ntags : 1, sizeof(*tags));
	names = calloc(l.ntags ? l.ntags : 1, sizeof(*names));
	vs = calloc(l.ntags ? l.ntags : 1, sizeof(*vs));
	bad_next = calloc(l.ntags ? l.ntags : 1, sizeof(*bad_next));
	if (!tags || !names || !vs || !bad_next) {
		ret = DCR_ERR(-ENOMEM);
		goto out_free;
	}
	for (size_t i = 0; i < l.ntags; i++) {
		const char *name = l.tags[i].name;
		struct dcr_tag_sig ts;
		struct dcr_tag_bad bad;
		bool is_signed = false;
		uint64_t v;
		int rc = dcr_store_read_tag(r->st, name, &v, &ts,
					    &is_signed, &bad);

		if (rc == -EBADMSG) {
			tag_malformed(r, name, &bad, bad_next, &nbad_next);
			continue;
		}
		if (rc) {
			if (rc != -ENOENT)
				dcr_warn("tags/%s: %s", name,
					 dcr_strerror(rc));
			continue;
		}
		if (r->vs.trust && !tag_trusted(r, name, v,
						 is_signed ? &ts : NULL))
			continue;
		tags[nt].name = l.tags[i].name; /* moved */
		tags[nt].version = v;
		l.tags[i].name = NULL;
		nt++;
	}
	if (nt)
		qsort(tags, nt, sizeof(*tags), cmp_tag);
	for (size_t i = 0; i < nt; i++) {
		names[i] = tags[i].name;
		vs[i] = tags[i].version;
	}
	ret = dcr_catalog_set_tags(r->cat, names, vs, nt);
	if (ret)
		goto out_free;
	pthread_mutex_lock(&r->vs.lock);
	old = r->vs.tags;
	nold = r->vs.ntags;
	r->vs.tags = tags;
	r->vs.ntags = nt;
	pthread_mutex_unlock(&r->vs.lock);
	tags = old;
	nt = nold;
	/* the set seen malformed at this poll replaces the last one: a tag
	 * fixed, removed or changed is logged again if it turns bad */
	for (size_t i = 0; i < r->vs.ntag_bad; i++)
		free(r->vs.tag_bad[i].name);
	free(r->vs.tag_bad);
	r->vs.tag_bad = bad_next;
	r->vs.ntag_bad = nbad_next;
	bad_next = NULL;
	nbad_next = 0;

out_free:
	for (size_t i = 0; i < nbad_next; i++)
		free(bad_next[i].name);
	free(bad_next);
	dcr_reader_tags_free(tags, nt);
	dcr_sview_free(&l);
	free(names);
	free(vs);
	return ret;
}

/*
 * A version given up as corrupt is looked for again bad_retry_after later:
 * the store may have healed (a repaired object, a proxy that stopped
 * damaging bodies), and its children, given up with it, come back too.
 * Forgetting the bad list makes the next refresh list versions/ again.
 * Caller holds refresh_lock.
 */
static void forget_bad(struct dcr_reader *r)
{
	pthread_mutex_lock(&r->vs.lock);
	if (r->vs.nbad && dcr_mono_ns() >= r->vs.bad_retry_ns) {
		r->vs.nbad = 0;
		r->vs.max_bad = 0;
		r->vs.bad_retry_ns = 0;
		r->vs.listed = false;
	}
	pthread_mutex_unlock(&r->vs.lock);
}

int dcr_reader_refresh(struct dcr_reader *r, uint64_t *latest)
{
	struct refresh_ctx ctx = { .have_last = false };
	int ret;

	pthread_mutex_lock(&r->vs.refresh_lock);
	forget_bad(r);
	if (r->vs.listed && dcr_mono_ns() >= r->vs.relist_at)
		r->vs.listed = false; /* time for a whole listing */
	/* the layout first: versions indexed below use the newest one */
	ret = layout_refresh(r, &ctx);
	refresh_ctx_free(&ctx);
	if (ret != -ENOMEM)
		ret = r->vs.listed ? refresh_probe(r, &ctx) : refresh_list(r, &ctx, 0, 0);
	refresh_ctx_free(&ctx);
	if (!ret)
		ret = refresh_tags(r);
	trust_judge(r);
	trees_trim(r); /* no refresh is using a tree meanwhile */
	pthread_mutex_unlock(&r->vs.refresh_lock);
	if (latest)
		*latest = dcr_reader_latest(r);
	return ret;
}

/* Mark in @want (of @sv's versions) version @v and those its encoding
 * is built on. */
static void seed_chain(struct dcr_sview *sv, uint64_t v, uint8_t *want)
{
	struct dcr_sview_ver *x = dcr_sview_find(sv, v);

	while (x && !want[x - sv->vs]) {
		const struct dcr_manifest *m = dcr_sview_manifest(sv, x);

		want[x - sv->vs] = 1;
		x = m && m->parent && dcr_manifest_needs_parent(m) ?
			dcr_sview_find(sv, m->parent) : NULL;
	}
}

int dcr_reader_seed(struct dcr_reader *r, struct dcr_sview *sv, uint64_t v)
{
	struct refresh_ctx ctx = { .have_last = false, .partial = v != 0 };
	struct dcr_layout l = sv->layout;
	uint8_t *want = NULL;
	int ret = 0;

	l.e = NULL;
	if ((sv->layout.n && !(l.e = malloc(sv->layout.n * sizeof(*l.e)))) ||
	    (v && !(want = calloc(sv->nvs ? sv->nvs : 1, 1)))) {
		free(l.e);
		return DCR_ERR(-ENOMEM);
	}
	if (sv->layout.n)
		memcpy(l.e, sv->layout.e, sv->layout.n * sizeof(*l.e));
	if (v)
		seed_chain(sv, v, want);
	pthread_mutex_lock(&r->vs.refresh_lock);
	/* the view's layout: what its encodings are read under */
	dcr_layout_free(&r->vs.layout);
	r->vs.layout = l;
	r->vs.layout_bad = sv->layout_bad;
	r->vs.layout_listed = true;
	for (size_t i = 0; i < sv->nvs && !ret; i++) {
		struct dcr_sview_ver *x = &sv->vs[i];
		const struct dcr_manifest *cm;
		struct dcr_manifest m;
		const uint8_t *h;
		bool known;

		if (want && !want[i])
			continue;
		pthread_mutex_lock(&r->vs.lock);
		known = vers_find(r, x->v) != NULL;
		pthread_mutex_unlock(&r->vs.lock);
		if (known)
			continue;
		if (!(cm = dcr_sview_committed(sv, x, &h))) {
			mark_bad(r, x->v); /* logged by the view */
			continue;
		}
		if ((ret = dcr_manifest_dup(&m, cm)))
			break;
		struct dcr_catalog_ident id = {
			.has_mhash = true, .obj_size = x->obj_size,
			.obj_mtime_ns = x->obj_mtime_ns,
		};
		memcpy(id.mhash, h, DCR_HASH_LEN);
		ret = index_manifest(r, &ctx, &m, &id, NULL,
				     x->compacted ? &x->m : NULL);
	}
	refresh_ctx_free(&ctx);
	if (!ret) {
		/* what the view listed is this reader's listing */
		r->vs.listed = true;
		r->vs.relist_at = dcr_mono_ns() + r->vs.relist_ns;
	}
	trust_judge(r);
	pthread_mutex_unlock(&r->vs.refresh_lock);
	free(want);
	return ret;
}

int dcr_reader_resolve(struct dcr_reader *r, const char *name, uint64_t *v)
{
	const char *url = r->st->url ? r->st->url : "store";
	const char *why = r->vs.trust ? " (or is not signed by a trusted key: "
					"trust= shows only those)" : "";
	struct dcr_version_brief b;
	struct dcr_tag *tags;
	size_t nt;
	int ret;

	if (!name || !*name)
		return DCR_ERR(-EINVAL);
	if (dcr_parse_u64(name, v) == 0 && *v) {
		if (dcr_reader_version_brief(r, *v, &b) == 0)
			return 0;
		/* Perhaps published since the last look. */
		if ((ret = dcr_reader_refresh(r, NULL)))
			return ret;
		if (dcr_reader_version_brief(r, *v, &b) == 0)
			return 0;
		dcr_err("%s: version %s does not exist%s", url, name, why);
		return -ENOENT;
	}
	if ((ret = dcr_reader_refresh(r, NULL)))
		return ret;
	if (!strcmp(name, "latest")) {
		if ((*v = dcr_reader_latest(r)))
			return 0;
		dcr_err("%s: the store has no version%s", url,
			r->vs.trust ? " signed by a trusted key" : " yet");
		return -ENOENT;
	}
	if ((ret = dcr_reader_tags(r, &tags, &nt)))
		return ret;
	*v = 0;
	for (size_t i = 0; i < nt; i++)
		if (!strcmp(tags[i].name, name))
			*v = tags[i].version;
	dcr_reader_tags_free(tags, nt);
	if (*v)
		return 0;
	dcr_err("%s: '%s' is neither a version number nor a tag%s", url, name,
		r->vs.trust ? " signed by a trusted key" : "");
	return -ENOENT;
}

uint64_t dcr_reader_latest(struct dcr_reader *r)
{
	uint64_t v;

	pthread_mutex_lock(&r->vs.lock);
	v = trust_latest(r);
	pthread_mutex_unlock(&r->vs.lock);
	return v;
}

/* Drop @rv's tree. Caller holds lock; @rv is loaded and not pinned. */
static void rver_unload(struct rver *rv)
{
	dcr_manifest_free(&rv->m);
	memset(&rv->m, 0, sizeof(rv->m));
	free(rv->entries);
	rv->entries = NULL;
	memset(&rv->info, 0, sizeof(rv->info));
	rv->loaded = false;
}

void trees_trim(struct dcr_reader *r)
{
	uint64_t gen = atomic_load(&r->activity);
	size_t loaded = 0;

	if (!r->vs.max_trees || !reader_idle(r))
		return;
	pthread_mutex_lock(&r->vs.lock);
	/* A read that began since reader_idle may hold any tree. */
	if (atomic_load(&r->activity) != gen || atomic_load(&r->active))
		goto out;
	for (size_t i = 0; i < r->vs.nvers; i++)
		loaded += r->vs.vers[i]->loaded;
	while (loaded > r->vs.max_trees) {
		struct rver *lru = NULL;

		/* not the newest */
		for (size_t i = 0; i + 1 < r->vs.nvers; i++) {
			struct rver *rv = r->vs.vers[i];

			if (rv->loaded && !rv->pins && (!lru || rv->used < lru->used))
				lru = rv;
		}
		if (!lru)
			break;
		rver_unload(lru);
		loaded--;
	}
	/* Replaced and dropped versions: nobody uses them but pins. */
	for (struct rver *rv = r->vs.graveyard; rv; rv = rv->next_dead)
		if (rv->loaded && !rv->pins)
			rver_unload(rv);
out:
	pthread_mutex_unlock(&r->vs.lock);
}

void versions_stats(struct dcr_reader *r, struct dcr_reader_stats *s)
{
	pthread_mutex_lock(&r->vs.lock);
	s->latest = trust_latest(r);
	s->versions = 0;
	s->trees_loaded = 0;
	for (size_t i = 0; i < r->vs.nvers; i++) {
		s->versions += rver_shown(r, r->vs.vers[i]);
		s->trees_loaded += r->vs.vers[i]->loaded;
	}
	pthread_mutex_unlock(&r->vs.lock);
}

int dcr_reader_versions(struct dcr_reader *r, uint64_t **vs, size_t *n)
{
	uint64_t *arr;

	pthread_mutex_lock(&r->vs.lock);
	arr = malloc((r->vs.nvers ? r->vs.nvers : 1) * sizeof(*arr));
	if (!arr) {
		pthread_mutex_unlock(&r->vs.lock);
		return DCR_ERR(-ENOMEM);
	}
	*n = 0;
	for (size_t i = 0; i < r->vs.nvers; i++)
		if (rver_shown(r, r->vs.vers[i]))
			arr[(*n)++] = r->vs.vers[i]->v;
	pthread_mutex_unlock(&r->vs.lock);
	*vs = arr;
	return 0;
}

int dcr_reader_version(struct dcr_reader *r, uint64_t v,
		       const struct dcr_version_info **out)
{
	struct rver *rv;
	int ret;

	*out = NULL;
	/* Pinned before it is loaded: trees_trim never unloads it then. */
	pthread_mutex_lock(&r->vs.lock);
	rv = vers_find(r, v);
	if (rv && !rver_shown(r, rv))
		rv = NULL;
	if (rv) {
		rv->pins++;
		rv->used = ++r->vs.use_clock;
	}
	pthread_mutex_unlock(&r->vs.lock);
	if (!rv)
		return -ENOENT;
	ret = rver_load(r, rv);
	if (ret) {
		pthread_mutex_lock(&r->vs.lock);
		rv->pins--;
		pthread_mutex_unlock(&r->vs.lock);
		return ret;
	}
	*out = &rv->info;
	return 0;
}

int dcr_reader_version_brief(struct dcr_reader *r, uint64_t v,
			     struct dcr_version_brief *out)
{
	struct rver *rv;

	pthread_mutex_lock(&r->vs.lock);
	rv = vers_find(r, v);
	if (rv && !rver_shown(r, rv))
		rv = NULL;
	if (rv)
		/* a catalog row from before schema 4 knows no committed
		 * parent: it was indexed before compaction re-encoded any */
		*out = (struct dcr_version_brief){
			.parent = rv->parent, .tree = rv->tree,
			.ctime_ns = rv->ctime_ns,
			.cparent = rv->has_check ? rv->cparent : rv->parent };
	pthread_mutex_unlock(&r->vs.lock);
	return rv ? 0 : -ENOENT;
}

void dcr_reader_version_put(struct dcr_reader *r,
			    const struct dcr_version_info *vi)
{
	struct rver *rv;

	if (!vi)
		return;
	rv = (struct rver *)((char *)vi - offsetof(struct rver, info));
	pthread_mutex_lock(&r->vs.lock);
	if (rv->pins)
		rv->pins--;
	pthread_mutex_unlock(&r->vs.lock);
}

int dcr_reader_tags(struct dcr_reader *r, struct dcr_tag **tags, size_t *n)
{
	struct dcr_tag *t;
	size_t i;

	*tags = NULL;
	*n = 0;
	pthread_mutex_lock(&r->vs.lock);
	t = calloc(r->vs.ntags ? r->vs.ntags : 1, sizeof(*t));
	if (!t)
		goto err_unlock;
	for (i = 0; i < r->vs.ntags; i++) {
		t[i].name = strdup(r->vs.tags[i].name);
		if (!t[i].name)
			goto err_free;
		t[i].version = r->vs.tags[i].version;
	}
	*n = r->vs.ntags;
	pthread_mutex_unlock(&r->vs.lock);
	*tags = t;
	return 0;

err_free:
	dcr_reader_tags_free(t, i);
err_unlock:
	pthread_mutex_unlock(&r->vs.lock);
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

int dcr_reader_file_meta(struct dcr_reader *r, uint64_t v, uint32_t tree,
			 uint32_t idx, struct dcr_file_meta *out)
{
	const struct dcr_version_info *vi;
	const struct dcr_file *f;
	const struct rver *rv;
	int ret = dcr_reader_version(r, v, &vi);

	if (ret)
		return ret;
	/* Pinned: its files stay loaded until the put. */
	rv = (const struct rver *)((const char *)vi -
				   offsetof(struct rver, info));
	if (rv->tree != tree)
		ret = -ESTALE;
	else if (idx == 0)
		ret = -EISDIR;
	else if (idx > rv->m.nfiles)
		ret = -ENOENT;
	else if ((f = &rv->m.files[idx - 1])->type != DCR_FT_REG)
		ret = -EISDIR;
	else {
		_Static_assert(sizeof(out->digest) == DCR_HASH_LEN,
			       "digest size");
		memcpy(out->digest, f->sha256, DCR_HASH_LEN);
		out->format = rv->m.format;
	}
	dcr_reader_version_put(r, vi);
	return ret;
}
