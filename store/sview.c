/* SPDX-License-Identifier: MIT */
/*
 * sview.c - one store view: listing, the manifests of each version and
 * the layout rule (sview.h).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "sview.h"

static int versions_cb(const char *key, const struct dcr_obj_info *info, void *arg)
{
	struct dcr_sview *sv = arg;
	uint64_t v;

	if (dcr_version_from_key(key, &v) || v == 0)
		return 0;
	if (dcr_array_grow(&sv->vs, sizeof(*sv->vs), sv->nvs, &sv->cap_vs))
		return DCR_ERR(-ENOMEM);
	sv->vs[sv->nvs++] = (struct dcr_sview_ver){
		.v = v, .obj_size = info ? info->size : 0,
		.obj_mtime_ns = info ? info->mtime_ns : 0 };
	return 0;
}

static int tags_cb(const char *key, const struct dcr_obj_info *info, void *arg)
{
	struct dcr_sview *sv = arg;
	const char *name = key + 5;

	(void)info;
	if (strncmp(key, "tags/", 5) || !dcr_tag_name_valid(name))
		return 0;
	if (dcr_array_grow(&sv->tags, sizeof(*sv->tags), sv->ntags, &sv->cap_tags))
		return DCR_ERR(-ENOMEM);
	if (!(sv->tags[sv->ntags].name = strdup(name)))
		return DCR_ERR(-ENOMEM);
	sv->tags[sv->ntags++].v = 0;
	return 0;
}

static int cmp_ver(const void *a, const void *b)
{
	const struct dcr_sview_ver *x = a, *y = b;

	return x->v < y->v ? -1 : x->v > y->v;
}

static int cmp_tag(const void *a, const void *b)
{
	const struct dcr_sview_tag *x = a, *y = b;

	return strcmp(x->name, y->name);
}

int dcr_sview_load(struct dcr_sview *sv, struct dcr_store *st, unsigned what)
{
	size_t k = 0;
	int ret;

	*sv = (struct dcr_sview){ .st = st };
	if (((ret = dcr_store_list(st, "versions/", versions_cb, sv)) && ret != -ENOENT) ||
	    ((what & DCR_SVIEW_TAGS) && (ret = dcr_sview_list_tags(sv)))) {
		if (!(what & DCR_SVIEW_LIST_ONLY))
			dcr_err("%s: cannot list the store: %s", st->url,
				dcr_strerror(ret));
		goto err_free;
	}
	ret = 0;
	if (!(what & DCR_SVIEW_LIST_ONLY) &&
	    (ret = dcr_store_find_layout(st, 0, 0, &sv->layout_bad, &sv->layout))) {
		dcr_err("%s: cannot read the store's layout: %s", st->url,
			dcr_strerror(ret));
		goto err_free;
	}
	/* qsort's pointer must not be NULL, even for no elements (UBSan) */
	if (sv->nvs)
		qsort(sv->vs, sv->nvs, sizeof(*sv->vs), cmp_ver);
	for (size_t i = 0; i < sv->nvs; i++) /* unique */
		if (k == 0 || sv->vs[i].v != sv->vs[k - 1].v)
			sv->vs[k++] = sv->vs[i];
	sv->nvs = k;
	for (size_t i = 0; i < sv->ntags; i++) {
		struct dcr_sview_tag *t = &sv->tags[i];
		ret = dcr_store_get_tag_sig(st, t->name, &t->v, &t->ts, &t->is_signed);
		if (ret && ret != -ENOENT && ret != -EBADMSG)
			goto err_free;
		if (ret)
			t->v = 0; /* vanished or malformed: shown nowhere */
	}
	return 0;
err_free:
	dcr_sview_free(sv);
	return ret;
}

int dcr_sview_list_tags(struct dcr_sview *sv)
{
	int ret = dcr_store_list(sv->st, "tags/", tags_cb, sv);

	if (ret && ret != -ENOENT)
		return ret;
	/* qsort's pointer must not be NULL, even for no elements (UBSan) */
	if (sv->ntags)
		qsort(sv->tags, sv->ntags, sizeof(*sv->tags), cmp_tag);
	return 0;
}

void dcr_sview_free(struct dcr_sview *sv)
{
	for (size_t i = 0; i < sv->nvs; i++) {
		dcr_manifest_free(&sv->vs[i].m);
		dcr_manifest_free(&sv->vs[i].own);
		dcr_manifest_free(&sv->vs[i].old);
	}
	free(sv->vs);
	for (size_t i = 0; i < sv->ntags; i++)
		free(sv->tags[i].name);
	free(sv->tags);
	dcr_layout_free(&sv->layout);
	*sv = (struct dcr_sview){ 0 };
}

struct dcr_sview_ver *dcr_sview_find(struct dcr_sview *sv, uint64_t v)
{
	size_t i = dcr_lower_bound_u64(sv->vs, sv->nvs, sizeof(*sv->vs),
				       offsetof(struct dcr_sview_ver, v), v);

	return i < sv->nvs && sv->vs[i].v == v ? &sv->vs[i] : NULL;
}

/*
 * Fetch version @x's manifest object: manifests/<@h>, or versions/<n>
 * (@h NULL), into @m and its hash into @hash. 0 or -errno (logged,
 * the store's errors by dcr_manifest_fetch).
 */
static int fetch(struct dcr_sview *sv, const struct dcr_sview_ver *x,
		 const uint8_t *h, struct dcr_manifest *m, uint8_t *hash)
{
	char key[96];
	struct dcr_mfetch f = { .key = key, .v = x->v, .want = h };
	int ret;

	if (h)
		dcr_mobj_key(h, key, sizeof(key));
	else
		dcr_version_key(x->v, key, sizeof(key));
	ret = dcr_manifest_fetch(sv->st, &f, m);
	if (ret == -ENOENT)
		dcr_err("%s: %s of version %" PRIu64 " vanished while reading",
			sv->st->url, h ? "the compacted manifest" : "the manifest",
			x->v);
	if (!ret)
		memcpy(hash, f.mhash, DCR_HASH_LEN);
	return ret;
}

/* Move manifest @from (and its hash) into the empty @to. */
static void move(struct dcr_manifest *to, uint8_t *to_hash,
		 struct dcr_manifest *from, const uint8_t *from_hash)
{
	*to = *from;
	memcpy(to_hash, from_hash, DCR_HASH_LEN);
	memset(from, 0, sizeof(*from));
}

const uint8_t *dcr_sview_encoding(const struct dcr_layout *l, uint64_t v)
{
	const struct dcr_layout_entry *e = dcr_layout_find(l, v);

	return e ? e->mhash : NULL;
}

bool dcr_sview_same_encoding(const struct dcr_layout *l, uint64_t v,
			     const uint8_t *now)
{
	const uint8_t *h = dcr_sview_encoding(l, v);

	return h ? now && dcr_hash_eq(now, h) : !now;
}

const struct dcr_manifest *dcr_sview_manifest(struct dcr_sview *sv,
					      struct dcr_sview_ver *x)
{
	if (x->state == 0) {
		const uint8_t *h = dcr_sview_encoding(&sv->layout, x->v);
		int ret = 0;

		/* what an earlier layout left here is not fetched again */
		if (h && x->old_state == 1 && dcr_hash_eq(x->old_hash, h)) {
			move(&x->m, x->mhash, &x->old, x->old_hash);
			x->old_state = 0;
		} else if (!h && x->own_state == 1) {
			move(&x->m, x->mhash, &x->own, x->own_hash);
			x->own_state = 0;
		} else {
			ret = fetch(sv, x, h, &x->m, x->mhash);
		}
		x->state = ret ? ret : 1;
		x->compacted = h != NULL;
		/* the lineage: the layout records the parent it was committed against */
		x->lparent = h ? dcr_layout_find(&sv->layout, x->v)->lparent : x->m.parent;
	}
	return x->state == 1 ? &x->m : NULL;
}

const struct dcr_manifest *dcr_sview_committed(struct dcr_sview *sv,
					       struct dcr_sview_ver *x,
					       const uint8_t **hash)
{
	const struct dcr_manifest *m = dcr_sview_manifest(sv, x);

	if (!m)
		return NULL;
	if (!x->compacted) {
		if (hash)
			*hash = x->mhash;
		return m;
	}
	if (x->own_state == 0) {
		int ret = fetch(sv, x, NULL, &x->own, x->own_hash);
		x->own_state = ret ? ret : 1;
	}
	if (x->own_state != 1)
		return NULL;
	if (hash)
		*hash = x->own_hash;
	return &x->own;
}

const struct dcr_manifest *dcr_sview_read_as(struct dcr_sview *sv,
					     const struct dcr_layout *l,
					     struct dcr_sview_ver *x, int *err)
{
	const uint8_t *h = dcr_sview_encoding(l, x->v);
	const struct dcr_manifest *m;

	if (!h || dcr_sview_same_encoding(&sv->layout, x->v, h)) {
		/* as committed, or as the view's layout encodes it */
		m = h ? dcr_sview_manifest(sv, x) : dcr_sview_committed(sv, x, NULL);
		*err = m ? 0 : dcr_sview_state(x);
		return m;
	}
	if (x->old_state == 0 ||
	    (x->old_state == 1 && !dcr_hash_eq(x->old_hash, h))) {
		dcr_manifest_free(&x->old);
		int ret = fetch(sv, x, h, &x->old, x->old_hash);
		x->old_state = ret ? ret : 1;
	}
	*err = x->old_state == 1 ? 0 : x->old_state;
	return x->old_state == 1 ? &x->old : NULL;
}

int dcr_sview_reload_layout(struct dcr_sview *sv)
{
	struct dcr_layout nl;
	int ret;

	if ((ret = dcr_store_find_layout(sv->st, 0, 0, &sv->layout_bad, &nl))) {
		dcr_err("%s: cannot read the store's layout: %s", sv->st->url,
			dcr_strerror(ret));
		return ret;
	}
	for (size_t i = 0; i < sv->nvs; i++) {
		struct dcr_sview_ver *x = &sv->vs[i];

		if (x->state < 0) {
			x->state = 0; /* met under the old layout */
			continue;
		}
		if (x->state == 0 ||
		    dcr_sview_same_encoding(&nl, x->v, x->compacted ? x->mhash : NULL))
			continue; /* read the same way */
		if (x->compacted) {
			/* an older encoding: aside, for dcr_sview_read_as */
			dcr_manifest_free(&x->old);
			move(&x->old, x->old_hash, &x->m, x->mhash);
			x->old_state = 1;
		} else {
			/* versions/<n>, now its committed manifest only */
			move(&x->own, x->own_hash, &x->m, x->mhash);
			x->own_state = 1;
		}
		x->state = 0; /* dcr_sview_manifest takes what is here */
	}
	dcr_layout_free(&sv->layout);
	sv->layout = nl;
	return 0;
}
