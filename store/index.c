/* SPDX-License-Identifier: MIT */
/* index.c - a store's index for maintenance and its records (index.h). */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "fileio.h"
#include "index.h"
#include "sign.h"
#include "store.h"

static int versions_cb(const char *key, const struct dcr_obj_info *info, void *arg)
{
	struct dcr_index *ix = arg;
	uint64_t v;

	if (dcr_version_from_key(key, &v))
		return 0;
	if (dcr_array_grow(&ix->vs, sizeof(*ix->vs), ix->nvs, &ix->cap_vs))
		return -ENOMEM;
	ix->vs[ix->nvs++] = (struct dcr_ix_ver){ .v = v, .obj_size = info->size };
	return 0;
}

int dcr_pack_key_hash(const char *key, uint8_t h[DCR_HASH_LEN])
{
	if (strncmp(key, "packs/", 6) || strlen(key + 6) != DCR_HASH_HEX_LEN ||
	    dcr_hash_unhex(key + 6, h))
		return -1;
	return 0;
}

static int packs_cb(const char *key, const struct dcr_obj_info *info, void *arg)
{
	struct dcr_index *ix = arg;
	uint8_t h[DCR_HASH_LEN];

	if (dcr_pack_key_hash(key, h))
		return 0;
	if (dcr_array_grow(&ix->packs, sizeof(*ix->packs), ix->npacks, &ix->cap_packs))
		return -ENOMEM;
	memcpy(ix->packs[ix->npacks].h, h, DCR_HASH_LEN);
	ix->packs[ix->npacks].size = info->size;
	ix->packs[ix->npacks++].mtime_ns = info->mtime_ns;
	return 0;
}

static int tags_cb(const char *key, const struct dcr_obj_info *info, void *arg)
{
	struct dcr_index *ix = arg;
	const char *name = key + 5;

	(void)info;
	if (strncmp(key, "tags/", 5) || !dcr_tag_name_valid(name))
		return 0;
	if (dcr_array_grow(&ix->tags, sizeof(*ix->tags), ix->ntags, &ix->cap_tags))
		return -ENOMEM;
	if (!(ix->tags[ix->ntags].name = strdup(name)))
		return -ENOMEM;
	ix->tags[ix->ntags++].v = 0;
	return 0;
}

static int cmp_ver(const void *a, const void *b)
{
	const struct dcr_ix_ver *x = a, *y = b;

	return x->v < y->v ? -1 : x->v > y->v;
}

static int cmp_pack(const void *a, const void *b)
{
	return memcmp(a, b, DCR_HASH_LEN);
}

static int cmp_tag(const void *a, const void *b)
{
	const struct dcr_ix_tag *x = a, *y = b;

	return strcmp(x->name, y->name);
}

int dcr_index_load(struct dcr_index *ix, struct dcr_store *st,
		   const struct dcr_store_info *info)
{
	int ret;

	*ix = (struct dcr_index){ .st = st, .info = *info };
	if ((ret = dcr_store_list(st, "versions/", versions_cb, ix)) ||
	    (ret = dcr_store_list(st, "packs/", packs_cb, ix)) ||
	    (ret = dcr_store_list(st, "tags/", tags_cb, ix))) {
		dcr_err("%s: cannot list the store: %s", st->url, dcr_strerror(ret));
		goto err_free;
	}
	if ((ret = dcr_store_find_layout(st, 0, 0, &ix->layout_bad, &ix->layout))) {
		dcr_err("%s: cannot read the store's layout: %s", st->url,
			dcr_strerror(ret));
		goto err_free;
	}
	/* qsort's pointer must not be NULL, even for no elements (UBSan) */
	if (ix->nvs)
		qsort(ix->vs, ix->nvs, sizeof(*ix->vs), cmp_ver);
	if (ix->npacks)
		qsort(ix->packs, ix->npacks, sizeof(*ix->packs), cmp_pack);
	if (ix->ntags)
		qsort(ix->tags, ix->ntags, sizeof(*ix->tags), cmp_tag);
	for (size_t i = 0; i < ix->ntags; i++) {
		ret = dcr_store_get_tag_sig(st, ix->tags[i].name, &ix->tags[i].v,
					    &ix->tags[i].ts, &ix->tags[i].is_signed);
		if (ret && ret != -ENOENT && ret != -EBADMSG)
			goto err_free;
		if (ret)
			ix->tags[i].v = 0; /* vanished or malformed: shown nowhere */
	}
	return 0;
err_free:
	dcr_index_free(ix);
	return ret;
}

void dcr_index_free(struct dcr_index *ix)
{
	dcr_reader_close(ix->r);
	if (ix->scratch[0])
		dcr_rm_rf(ix->scratch);
	for (size_t i = 0; i < ix->nvs; i++) {
		dcr_manifest_free(&ix->vs[i].m);
		dcr_manifest_free(&ix->vs[i].own);
	}
	free(ix->vs);
	free(ix->packs);
	for (size_t i = 0; i < ix->ntags; i++)
		free(ix->tags[i].name);
	free(ix->tags);
	dcr_layout_free(&ix->layout);
	*ix = (struct dcr_index){ 0 };
}

struct dcr_ix_ver *dcr_index_find(struct dcr_index *ix, uint64_t v)
{
	struct dcr_ix_ver key = { .v = v };

	return bsearch(&key, ix->vs, ix->nvs, sizeof(*ix->vs), cmp_ver);
}

const struct dcr_ix_pack *dcr_index_pack(const struct dcr_index *ix,
					 const uint8_t h[DCR_HASH_LEN])
{
	return bsearch(h, ix->packs, ix->npacks, sizeof(*ix->packs), cmp_pack);
}

const struct dcr_manifest *dcr_index_manifest(struct dcr_index *ix,
					      struct dcr_ix_ver *x)
{
	if (x->state == 0) {
		const struct dcr_layout_entry *e = dcr_layout_find(&ix->layout, x->v);
		int ret = dcr_store_get_encoding(ix->st, &ix->layout, x->v, &x->m);
		x->state = ret ? ret : 1;
		x->compacted = e != NULL;
		x->lparent = e ? e->lparent : x->m.parent;
		if (ret == -ENOENT)
			dcr_err("%s: %s of version %" PRIu64 " vanished while reading",
				ix->st->url, e ? "the compacted manifest" : "the manifest",
				x->v);
	}
	return x->state == 1 ? &x->m : NULL;
}

const struct dcr_manifest *dcr_index_own(struct dcr_index *ix,
					 struct dcr_ix_ver *x)
{
	const struct dcr_manifest *m = dcr_index_manifest(ix, x);
	struct dcr_manifest full;

	if (!m || !x->compacted)
		return m;
	if (x->own_state == 0) {
		int ret = dcr_store_get_manifest(ix->st, x->v, &full);
		x->own_state = ret ? ret : 1;
		if (ret == -ENOENT)
			dcr_err("%s: the manifest of version %" PRIu64 " vanished while "
				"reading", ix->st->url, x->v);
		if (!ret) {
			/* Keep what provenance needs, not the files. */
			x->own = (struct dcr_manifest){
				.format = full.format, .version = full.version,
				.parent = full.parent, .cparent = full.cparent,
				.ctime_ns = full.ctime_ns,
				.chunk_size = full.chunk_size, .nmeta = full.nmeta,
				.meta = full.meta, .has_sig = full.has_sig,
				.sig = full.sig,
			};
			memcpy(x->own.check, full.check, DCR_HASH_LEN);
			full.meta = NULL;
			full.nmeta = 0;
			dcr_manifest_free(&full);
		}
	}
	return x->own_state == 1 ? &x->own : NULL;
}

const char *dcr_index_tag_signer(struct dcr_index *ix,
				 const struct dcr_ix_tag *t, char *buf)
{
	struct dcr_ix_ver *x = t->v ? dcr_index_find(ix, t->v) : NULL;
	const struct dcr_manifest *own = x ? dcr_index_own(ix, x) : NULL;

	if (!t->is_signed)
		snprintf(buf, DCR_KEYID_LEN + 1, "unsigned");
	else if (own && dcr_tag_sig_check(&t->ts, ix->info.id, t->name, t->v,
					  own->check, NULL) == DCR_SIG_VALID)
		dcr_key_id(t->ts.pub, buf);
	else
		snprintf(buf, DCR_KEYID_LEN + 1, "invalid");
	return buf;
}

int dcr_index_put_tag(struct dcr_index *ix, const char *name,
		      struct dcr_ix_ver *x, const struct dcr_sign_key *key)
{
	const struct dcr_manifest *own;
	struct dcr_tag_sig ts;
	int ret;

	if (!key) {
		ret = dcr_store_put_tag(ix->st, name, x->v);
	} else if (ix->info.legacy) {
		dcr_err("%s: a store made before store markers (id %s) has no id a "
			"signature can bind: tag %s cannot be signed", ix->st->url,
			ix->info.id, name);
		return DCR_ERR(-EINVAL);
	} else if (!(own = dcr_index_own(ix, x))) {
		return x->state < 0 ? x->state : x->own_state;
	} else if (!(ret = dcr_tag_sign(key, ix->info.id, name, x->v, own->check,
					&ts))) {
		ret = dcr_store_put_tag_signed(ix->st, name, x->v, &ts);
	} else {
		return ret; /* logged */
	}
	if (ret)
		dcr_err("%s: cannot write tags/%s: %s", ix->st->url, name,
			dcr_strerror(ret));
	return ret;
}

int dcr_index_reload_layout(struct dcr_index *ix)
{
	int ret;

	for (size_t i = 0; i < ix->nvs; i++) {
		if (ix->vs[i].state == 1)
			dcr_manifest_free(&ix->vs[i].m);
		memset(&ix->vs[i].m, 0, sizeof(ix->vs[i].m));
		ix->vs[i].state = 0;
	}
	dcr_layout_free(&ix->layout);
	if ((ret = dcr_store_find_layout(ix->st, 0, 0, &ix->layout_bad, &ix->layout)))
		dcr_err("%s: cannot read the store's layout: %s", ix->st->url,
			dcr_strerror(ret));
	return ret;
}

struct dcr_ix_ver *dcr_index_resolve(struct dcr_index *ix, const char *arg)
{
	uint64_t v = 0;

	if (!strcmp(arg, "latest")) {
		if (ix->nvs)
			return &ix->vs[ix->nvs - 1];
		dcr_err("%s: the store has no versions", ix->st->url);
		return NULL;
	}
	if (dcr_parse_u64(arg, &v)) {
		for (size_t i = 0; i < ix->ntags; i++)
			if (!strcmp(ix->tags[i].name, arg))
				v = ix->tags[i].v;
		if (!v) {
			dcr_err("%s: '%s' is neither a version number nor a tag",
				ix->st->url, arg);
			return NULL;
		}
	}
	struct dcr_ix_ver *x = dcr_index_find(ix, v);
	if (!x)
		dcr_err("%s: version %s does not exist", ix->st->url, arg);
	return x;
}

/* ------------------------------------------------------ the scratch reader */

static int scratch_reader(struct dcr_index *ix)
{
	int ret;

	if (ix->r)
		return 0;
	if ((ret = dcr_mktempdir("dcrfs-ctl", ix->scratch, sizeof(ix->scratch))))
		return ret;
	struct dcr_reader_opts ro = { .cache_dir = ix->scratch,
				      .cache_size = DCR_INDEX_SCRATCH_CACHE,
				      .threads = ix->threads };
	if ((ret = dcr_reader_open(ix->st, &ro, &ix->r)))
		return ret;
	return dcr_reader_refresh(ix->r, NULL);
}

int dcr_index_read(struct dcr_index *ix, uint64_t v, uint32_t fi,
		   const char *path, uint64_t off, void *buf, size_t len)
{
	const struct dcr_version_info *vi;
	int ret;

	if ((ret = scratch_reader(ix)) || (ret = dcr_reader_version(ix->r, v, &vi)))
		return ret;
	/* Entry 0 is the root; the manifest's files follow in order. */
	if (fi + 1 >= vi->nentries || strcmp(vi->entries[fi + 1].path, path))
		return DCR_ERR(-EIO);
	for (size_t done = 0; done < len;) {
		ssize_t n = dcr_reader_read(ix->r, v, fi + 1, off + done,
					    (uint8_t *)buf + done, len - done);
		if (n <= 0)
			return n < 0 ? (int)n : DCR_ERR(-EIO);
		done += (size_t)n;
	}
	return 0;
}

int dcr_index_par_for(struct dcr_index *ix, size_t n,
		      void (*fn)(void *arg, size_t i), void *arg)
{
	int ret = scratch_reader(ix);

	if (ret)
		return ret;
	dcr_reader_par_for(ix->r, n, fn, arg);
	return 0;
}

/* ---------------------------------------------------------------- records */

uint64_t dcr_file_stored_bytes(const struct dcr_file *f)
{
	uint64_t n = 0;

	for (uint64_t k = 0; k < f->nchunks; k++)
		if (f->chunks[k].kind != DCR_CK_SAME)
			n += f->chunks[k].len;
	return n;
}

static void fmt_time(int64_t ns, char *buf, size_t cap)
{
	time_t t = (time_t)(ns / 1000000000);
	struct tm tm;

	if (!gmtime_r(&t, &tm) || !strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(buf, cap, "?");
}

int dcr_index_record(struct dcr_index *ix, struct dcr_ix_ver *x,
		     struct dcr_version_record *r)
{
	const struct dcr_manifest *m = dcr_index_manifest(ix, x);
	uint64_t frame_bytes = 0;

	if (!m)
		return x->state;
	*r = (struct dcr_version_record){
		.version = x->v, .parent = x->lparent,
		.base = dcr_manifest_needs_parent(m) ? m->parent : 0,
		.ctime_ns = m->ctime_ns, .format = m->format,
		.chunk_size = m->chunk_size, .npacks = m->npacks,
	};
	fmt_time(m->ctime_ns, r->time, sizeof(r->time));
	for (uint32_t i = 0; i < m->nfiles; i++) {
		const struct dcr_file *f = &m->files[i];
		if (f->type == DCR_FT_DIR) {
			r->dirs++;
			continue;
		}
		r->files++;
		r->bytes += f->size;
		for (uint64_t k = 0; k < f->nchunks; k++) {
			const struct dcr_chunk_ref *c = &f->chunks[k];
			r->same += c->kind == DCR_CK_SAME;
			r->delta += c->kind == DCR_CK_DELTA;
			r->full += c->kind == DCR_CK_FULL;
		}
		frame_bytes += dcr_file_stored_bytes(f);
	}
	r->stored_bytes = x->obj_size + frame_bytes;
	r->kind = !m->parent || (!r->same && !r->delta) ? "anchor" :
		  x->compacted ? "compacted" : "delta";
	const struct dcr_manifest *own = dcr_index_own(ix, x);
	if (!own)
		return x->own_state;
	dcr_manifest_signer(own, ix->info.id, r->signer);
	r->nmeta = own->nmeta;
	r->meta = own->meta;
	return 0;
}
