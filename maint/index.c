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

static int cmp_pack(const void *a, const void *b)
{
	return memcmp(a, b, DCR_HASH_LEN);
}

int dcr_index_load(struct dcr_index *ix, struct dcr_store *st,
		   const struct dcr_store_info *info)
{
	int ret;

	*ix = (struct dcr_index){ .st = st, .info = *info };
	if ((ret = dcr_sview_load(&ix->sv, st, DCR_SVIEW_TAGS)))
		return ret; /* logged */
	/* packs after versions: a version published meanwhile has its
	 * packs listed, as orphans that are young (gc.h) */
	if ((ret = dcr_store_list(st, "packs/", packs_cb, ix)) && ret != -ENOENT) {
		dcr_err("%s: cannot list the store: %s", st->url, dcr_strerror(ret));
		goto err_free;
	}
	/* qsort's pointer must not be NULL, even for no elements (UBSan) */
	if (ix->npacks)
		qsort(ix->packs, ix->npacks, sizeof(*ix->packs), cmp_pack);
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
	dcr_sview_free(&ix->sv);
	free(ix->packs);
	*ix = (struct dcr_index){ 0 };
}

const struct dcr_ix_pack *dcr_index_pack(const struct dcr_index *ix,
					 const uint8_t h[DCR_HASH_LEN])
{
	return bsearch(h, ix->packs, ix->npacks, sizeof(*ix->packs), cmp_pack);
}

const char *dcr_index_tag_signer(struct dcr_index *ix,
				 const struct dcr_sview_tag *t, char *buf)
{
	struct dcr_sview_ver *x = t->v ? dcr_index_find(ix, t->v) : NULL;
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
		      struct dcr_sview_ver *x, const struct dcr_sign_key *key)
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
		return dcr_sview_state(x);
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

struct dcr_sview_ver *dcr_index_resolve(struct dcr_index *ix, const char *arg)
{
	uint64_t v = 0;

	if (!strcmp(arg, "latest")) {
		if (ix->sv.nvs)
			return &ix->sv.vs[ix->sv.nvs - 1];
		dcr_err("%s: the store has no versions", ix->st->url);
		return NULL;
	}
	if (dcr_parse_u64(arg, &v)) {
		for (size_t i = 0; i < ix->sv.ntags; i++)
			if (!strcmp(ix->sv.tags[i].name, arg))
				v = ix->sv.tags[i].v;
		if (!v) {
			dcr_err("%s: '%s' is neither a version number nor a tag",
				ix->st->url, arg);
			return NULL;
		}
	}
	struct dcr_sview_ver *x = dcr_index_find(ix, v);
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
	/* on the index's view: no second listing or fetch */
	return dcr_reader_seed(ix->r, &ix->sv, 0);
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
	return dcr_reader_read_exact(ix->r, v, DCR_READER_ANY_TREE, fi + 1, off,
				     buf, len);
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

int dcr_index_record(struct dcr_index *ix, struct dcr_sview_ver *x,
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
		return dcr_sview_state(x);
	dcr_manifest_signer(own, ix->info.id, r->signer);
	r->nmeta = own->nmeta;
	r->meta = own->meta;
	return 0;
}
