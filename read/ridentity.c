/* SPDX-License-Identifier: MIT */
/*
 * ridentity.c - version identity (DESIGN.md 7a; see reader_int.h): a
 * known version's manifest checked against the store's at every whole
 * listing (verify_version), re-indexed when it changed or was re-encoded
 * (reader_replace_version: catalog rows swapped in one transaction, a
 * new struct rver, the old one dead on the graveyard, its cached slabs
 * dropped behind a fence when the tree changed), dropped when gone
 * (reader_drop_version), and the changes queued for the mount
 * (dcr_reader_take_changes). All under refresh_lock; rversions.c calls
 * these from its refreshes, rlayout.c for layout generations.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "catalog.h"
#include "common.h"
#include "hash.h"
#include "manifest.h"
#include "reader.h"
#include "reader_int.h"
#include "sign.h"

/* The first 12 hex digits of @id's hash and "..", or "unknown". */
const char *hash_prefix(const struct dcr_catalog_ident *id,
			       char out[16])
{
	char hex[DCR_HASH_HEX_LEN + 1];

	if (!id || !id->has_mhash)
		return strcpy(out, "unknown");
	dcr_hash_hex(id->mhash, hex);
	snprintf(out, 16, "%.12s..", hex);
	return out;
}

/* Whether the whole manifests @a (from the catalog) and @b (from the
 * store) index the same frames: same tree, parent, packs, and every
 * chunk reference. */
static bool same_index(const struct dcr_manifest *a,
		       const struct dcr_manifest *b)
{
	if (!dcr_manifest_same_files(a, b, DCR_SAME_TIMES) ||
	    a->parent != b->parent ||
	    a->format != b->format || a->npacks != b->npacks)
		return false;
	for (uint32_t i = 0; i < a->npacks; i++)
		if (memcmp(a->packs[i], b->packs[i], DCR_HASH_LEN) != 0)
			return false;
	for (uint32_t i = 0; i < a->nfiles; i++) {
		const struct dcr_file *x = &a->files[i], *y = &b->files[i];

		if (x->base != y->base || x->nchunks != y->nchunks)
			return false;
		for (uint64_t k = 0; x->type == DCR_FT_REG && k < x->nchunks;
		     k++) {
			const struct dcr_chunk_ref *p = &x->chunks[k];
			const struct dcr_chunk_ref *q = &y->chunks[k];
			bool same = p->kind == DCR_CK_SAME;

			if (p->kind != q->kind ||
			    memcmp(p->hash, q->hash, DCR_HASH_LEN) != 0 ||
			    (!same && (p->pack != q->pack || p->off != q->off ||
				       p->len != q->len)) ||
			    (a->format >= 2 &&
			     (memcmp(p->xxh, q->xxh, DCR_XXH_LEN) != 0 ||
			      (!same && memcmp(p->fhash, q->fhash,
					       DCR_HASH_LEN) != 0))))
				return false;
		}
	}
	return true;
}

/* Queue a change for dcr_reader_take_changes. Caller holds lock. */
static void change_push(struct dcr_reader *r, const struct rver *old,
			bool gone, bool changed)
{
	if (r->vs.nchanges == r->vs.capchanges) {
		size_t cap = r->vs.capchanges ? r->vs.capchanges * 2 : 8;
		struct dcr_version_change *t =
			realloc(r->vs.changes, cap * sizeof(*t));
		if (!t)
			return; /* the kernel keeps its entries a while */
		r->vs.changes = t;
		r->vs.capchanges = cap;
	}
	r->vs.changes[r->vs.nchanges++] = (struct dcr_version_change){
		.version = old->v, .old_nentries = old->nfiles + 1,
		.old_tree = old->tree, .gone = gone, .content_changed = changed,
	};
}

int dcr_reader_take_changes(struct dcr_reader *r,
			    struct dcr_version_change **changes, size_t *n)
{
	pthread_mutex_lock(&r->vs.lock);
	*changes = r->vs.changes;
	*n = r->vs.nchanges;
	r->vs.changes = NULL;
	r->vs.nchanges = r->vs.capchanges = 0;
	pthread_mutex_unlock(&r->vs.lock);
	return 0;
}

/* Take @old (at index @i of vers) out: dead, onto the graveyard; with
 * @nrv, put it in its place. Caller holds lock. */
static void vers_bury(struct dcr_reader *r, size_t i, struct rver *old,
		      struct rver *nrv)
{
	atomic_store(&old->dead, true);
	if (nrv) {
		r->vs.vers[i] = nrv;
	} else {
		memmove(&r->vs.vers[i], &r->vs.vers[i + 1],
			(r->vs.nvers - i - 1) * sizeof(*r->vs.vers));
		r->vs.nvers--;
	}
	old->next_dead = r->vs.graveyard;
	r->vs.graveyard = old;
}

int reader_drop_version(struct dcr_reader *r, uint64_t v)
{
	char key[64];
	struct rver *old;
	size_t i;
	int ret;

	pthread_mutex_lock(&r->vs.lock);
	i = vers_lower(r, v);
	old = i < r->vs.nvers && r->vs.vers[i]->v == v ? r->vs.vers[i] : NULL;
	if (old) {
		change_push(r, old, true, true);
		vers_bury(r, i, old, NULL);
	}
	pthread_mutex_unlock(&r->vs.lock);
	if (!old)
		return -ENOENT;
	dcr_cache_drop_version(r->cache, v, ++r->vs.gen_clock);
	ret = dcr_catalog_remove_version(r->cat, v);
	if (ret && ret != -ENOENT)
		dcr_warn("version %llu: cannot remove it from the catalog: %s",
			 (unsigned long long)v, dcr_strerror(ret));
	dcr_version_key(v, key, sizeof(key));
	dcr_info("%s: %s is gone from the store: version %llu is no longer "
		 "served", r->st->url ? r->st->url : "store", key,
		 (unsigned long long)v);
	return 0;
}

int reader_replace_version(struct dcr_reader *r, const struct dcr_manifest *m,
			   const struct dcr_catalog_ident *id,
			   const char *why)
{
	const uint64_t v = m->version;
	const char *url = r->st->url ? r->st->url : "store";
	struct dcr_catalog_ident old_id;
	struct dcr_manifest om;
	struct rver *old, *nrv;
	char key[64], oh[16], nh[16];
	bool changed = true;
	size_t i;
	int ret;

	pthread_mutex_lock(&r->vs.lock);
	old = vers_find(r, v);
	pthread_mutex_unlock(&r->vs.lock);
	if (!old)
		return -ENOENT;
	old_id = old->id;
	if (dcr_catalog_load_files(r->cat, v, &om) == 0) {
		changed = !dcr_manifest_same_files(&om, m, DCR_SAME_TIMES);
		dcr_manifest_free(&om);
	}
	nrv = rver_new(v, m->parent, m->ctime_ns, m->chunk_size, m->nfiles);
	if (!nrv)
		return DCR_ERR(-ENOMEM);
	nrv->id = *id;
	static const uint8_t zero[DCR_HASH_LEN];
	rver_prov(r, nrv, memcmp(m->check, zero, DCR_HASH_LEN) != 0, m->check,
		  m->cparent, m->has_sig, &m->sig, id->has_ehash);
	if (rver_shown(r, old) && !rver_shown(r, nrv)) {
		/* trust=: what was proven stays; the forgery is not shown */
		dcr_version_key(v, key, sizeof(key));
		dcr_err("%s: %s %s (manifest %s -> %s), but the new manifest "
			"is %s: ignored, version %llu stays as it was (trust=)",
			url, key, why, hash_prefix(&old_id, oh),
			hash_prefix(id, nh),
			dcr_sig_status_str((enum dcr_sig_status)nrv->sig),
			(unsigned long long)v);
		rver_free(nrv);
		return 0;
	}

	/* Dead first: from here the old rver's lookups fail, whatever the
	 * catalog holds; then no key of it can reach the cache. A read
	 * that fails so on a tree that did not change starts again. */
	atomic_store(&old->reencoded, !changed);
	atomic_store(&old->dead, true);
	nrv->gen = ++r->vs.gen_clock;
	nrv->tree = changed ? old->tree + 1 : old->tree;
	if (changed)
		dcr_cache_drop_version(r->cache, v, nrv->gen);
	ret = dcr_catalog_replace_version(r->cat, m, id);

	pthread_mutex_lock(&r->vs.lock);
	i = vers_lower(r, v);
	change_push(r, old, ret != 0, changed);
	vers_bury(r, i, old, ret ? NULL : nrv);
	pthread_mutex_unlock(&r->vs.lock);

	dcr_version_key(v, key, sizeof(key));
	hash_prefix(&old_id, oh);
	hash_prefix(id, nh);
	if (ret) {
		rver_free(nrv);
		dcr_catalog_remove_version(r->cat, v);
		r->vs.listed = false; /* index it again at the next refresh */
		dcr_err("%s: %s %s (manifest %s -> %s) but cannot be "
			"re-indexed: %s; version %llu is not served until it "
			"is", url, key, why, oh, nh, dcr_strerror(ret),
			(unsigned long long)v);
		return ret;
	}
	if (changed)
		dcr_err("%s: %s %s (manifest %s -> %s): re-indexed; the old "
			"tree is no longer served", url, key, why, oh, nh);
	else
		dcr_debug("%s: %s re-indexed (%s): the same tree and bytes, "
			  "encoded anew; cached chunks kept", url, key, why);
	return changed;
}

/* Whether the last DCR_HASH_LEN bytes of @key (of @rv->id.obj_size
 * bytes) are still @rv->mtail: one ranged GET. */
static bool tail_same(struct dcr_reader *r, const struct rver *rv,
		      const char *key)
{
	struct dcr_buf b;
	bool same;

	if (rv->id.obj_size < DCR_HASH_LEN)
		return false;
	dcr_buf_init(&b, DCR_HASH_LEN);
	same = dcr_store_get(r->st, key, rv->id.obj_size - DCR_HASH_LEN,
			     DCR_HASH_LEN, &b) == 0 &&
	       b.len == DCR_HASH_LEN &&
	       memcmp(b.data, rv->mtail, DCR_HASH_LEN) == 0;
	dcr_buf_free(&b);
	return same;
}

/*
 * Check the known version @rv against its object as the store lists it
 * (@obj). Unchanged size and mtime: nothing to do. Otherwise (or when
 * the hash indexed is unknown) fetch the manifest: the same hash only
 * refreshes the recorded listing; another one re-indexes the version
 * (reader_replace_version), or drops it if the new manifest is corrupt.
 * An index without a hash (an older catalog) that turns out to be the
 * store's manifest just gets the hash. 0, or -errno of the fetch (the
 * next listing tries again).
 */
int verify_version(struct dcr_reader *r, struct refresh_ctx *ctx,
			  struct rver *rv, const struct dcr_obj_info *obj)
{
	struct dcr_catalog_ident id;
	struct dcr_manifest m, cm;
	char key[64];
	bool known;
	int ret;

	bool same_size = rv->id.has_mhash && rv->id.obj_size == obj->size;

	if (same_size &&
	    (!obj->mtime_ns || rv->id.obj_mtime_ns == obj->mtime_ns))
		return 0;
	dcr_version_key(rv->v, key, sizeof(key));
	if (same_size && !rv->id.obj_mtime_ns && rv->has_mtail &&
	    tail_same(r, rv, key)) {
		/* Indexed from a probe, without a time: the same bytes
		 * (the same size and the same SHA-256 of all but the last
		 * DCR_HASH_LEN, which those are), so only the time is new. */
		id = rv->id;
		id.obj_mtime_ns = obj->mtime_ns;
		rv->has_mtail = false;
		if (dcr_catalog_set_ident(r->cat, rv->v, &id) == 0)
			rv->id = id;
		return 0;
	}
	memset(&m, 0, sizeof(m));
	ret = fetch_manifest(r, rv->v, key, &m, &id, NULL);
	if (ret == -EBADMSG) {
		dcr_err("%s: %s changed in the store and is now corrupt: "
			"version %llu is no longer served",
			r->st->url ? r->st->url : "store", key,
			(unsigned long long)rv->v);
		reader_drop_version(r, rv->v);
		mark_bad(r, rv->v);
		return 0;
	}
	if (ret)
		return ret == -ENOENT ? 0 : ret; /* gone: the next listing */
	if (obj->size == id.obj_size)
		id.obj_mtime_ns = obj->mtime_ns;
	known = rv->id.has_mhash;
	if (known && dcr_hash_eq(rv->id.mhash, id.mhash)) {
		/* Same object, listed differently (touched, copied). */
		dcr_manifest_free(&m);
		if (dcr_catalog_set_ident(r->cat, rv->v, &id) == 0)
			rv->id = id;
		return 0;
	}
	if (!known && dcr_catalog_load_manifest(r->cat, rv->v, &cm) == 0) {
		bool same = same_index(&cm, &m);

		dcr_manifest_free(&cm);
		if (same) {
			/* Filled lazily: indexed before hashes were kept. */
			dcr_manifest_free(&m);
			if (dcr_catalog_set_ident(r->cat, rv->v, &id) == 0)
				rv->id = id;
			return 0;
		}
	}
	ret = reader_check_manifest(r, ctx, &m, key);
	if (ret == -ENOMEM) {
		dcr_manifest_free(&m);
		return ret;
	}
	if (ret) {
		dcr_err("%s: %s changed in the store and is now corrupt: "
			"version %llu is no longer served",
			r->st->url ? r->st->url : "store", key,
			(unsigned long long)rv->v);
		dcr_manifest_free(&m);
		reader_drop_version(r, rv->v);
		mark_bad(r, rv->v);
		return 0;
	}
	ret = reader_replace_version(r, &m, &id, "changed in the store");
	dcr_manifest_free(&m);
	return ret < 0 ? ret : 0;
}

