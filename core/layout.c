/* SPDX-License-Identifier: MIT */
/*
 * layout.c - layout generations: encoding, decoding, and reading them
 * and the manifest objects they name from a store (see layout.h).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "layout.h"

static const uint8_t lay_magic[8] = { 'D', 'C', 'R', 'L', 'A', 'Y', 'O', 'U' };
#define LAY_HDR_LEN 40
#define LAY_ENT_LEN (16 + DCR_HASH_LEN)
/* A layout names at most every version once; bound what is fetched. */
#define LAYOUT_OBJ_MAX ((size_t)256 << 20)

void dcr_layout_free(struct dcr_layout *l)
{
	if (!l)
		return;
	free(l->e);
	memset(l, 0, sizeof(*l));
}

int dcr_layout_encode(const struct dcr_layout *l, struct dcr_buf *out)
{
	size_t start = out->len, n = LAY_HDR_LEN + l->n * LAY_ENT_LEN;
	uint8_t *p;
	int ret;

	for (size_t i = 0; i < l->n; i++)
		if ((i && l->e[i].version <= l->e[i - 1].version) ||
		    !l->e[i].version || l->e[i].version > DCR_VERSION_MAX ||
		    l->e[i].lparent >= l->e[i].version)
			return DCR_ERR(-EINVAL);
	if ((ret = dcr_buf_reserve(out, start + n + DCR_HASH_LEN)))
		return ret;
	p = out->data + start;
	memcpy(p, lay_magic, 8);
	dcr_put_le32(p + 8, DCR_LAYOUT_FORMAT);
	dcr_put_le32(p + 12, 0);
	dcr_put_le64(p + 16, l->gen);
	dcr_put_le64(p + 24, (uint64_t)l->ctime_ns);
	dcr_put_le64(p + 32, l->n);
	for (size_t i = 0; i < l->n; i++) {
		uint8_t *q = p + LAY_HDR_LEN + i * LAY_ENT_LEN;
		dcr_put_le64(q, l->e[i].version);
		dcr_put_le64(q + 8, l->e[i].lparent);
		memcpy(q + 16, l->e[i].mhash, DCR_HASH_LEN);
	}
	dcr_sha256(p, n, p + n);
	out->len = start + n + DCR_HASH_LEN;
	return 0;
}

int dcr_layout_decode(const void *data, size_t len, struct dcr_layout *l)
{
	const uint8_t *p = data;
	uint8_t h[DCR_HASH_LEN];
	uint64_t n;

	memset(l, 0, sizeof(*l));
	if (len < LAY_HDR_LEN + DCR_HASH_LEN || memcmp(p, lay_magic, 8) ||
	    dcr_get_le32(p + 8) != DCR_LAYOUT_FORMAT || dcr_get_le32(p + 12))
		return DCR_ERR(-EBADMSG);
	n = dcr_get_le64(p + 32);
	if (n > (len - LAY_HDR_LEN - DCR_HASH_LEN) / LAY_ENT_LEN ||
	    len != LAY_HDR_LEN + n * LAY_ENT_LEN + DCR_HASH_LEN)
		return DCR_ERR(-EBADMSG);
	dcr_sha256(p, len - DCR_HASH_LEN, h);
	if (!dcr_hash_eq(h, p + len - DCR_HASH_LEN))
		return DCR_ERR(-EBADMSG);
	l->gen = dcr_get_le64(p + 16);
	l->ctime_ns = (int64_t)dcr_get_le64(p + 24);
	if (!l->gen || l->gen > DCR_VERSION_MAX)
		return DCR_ERR(-EBADMSG);
	if (n && !(l->e = calloc(n, sizeof(*l->e))))
		return -ENOMEM;
	l->n = n;
	for (size_t i = 0; i < n; i++) {
		const uint8_t *q = p + LAY_HDR_LEN + i * LAY_ENT_LEN;
		struct dcr_layout_entry *e = &l->e[i];
		e->version = dcr_get_le64(q);
		e->lparent = dcr_get_le64(q + 8);
		memcpy(e->mhash, q + 16, DCR_HASH_LEN);
		if (!e->version || e->version > DCR_VERSION_MAX ||
		    e->lparent >= e->version ||
		    (i && e->version <= l->e[i - 1].version)) {
			dcr_layout_free(l);
			return DCR_ERR(-EBADMSG);
		}
	}
	return 0;
}

const struct dcr_layout_entry *dcr_layout_find(const struct dcr_layout *l,
					       uint64_t v)
{
	size_t i = dcr_lower_bound_u64(l->e, l->n, sizeof(*l->e),
				       offsetof(struct dcr_layout_entry, version), v);

	return i < l->n && l->e[i].version == v ? &l->e[i] : NULL;
}

void dcr_layout_key(uint64_t gen, char *buf, size_t cap)
{
	snprintf(buf, cap, "layouts/%010" PRIu64, gen);
}

int dcr_layout_gen_from_key(const char *key, uint64_t *gen)
{
	return dcr_key_number(key, "layouts/", gen);
}

void dcr_mobj_key(const uint8_t h[DCR_HASH_LEN], char *buf, size_t cap)
{
	char hex[DCR_HASH_HEX_LEN + 1];

	dcr_hash_hex(h, hex);
	snprintf(buf, cap, "manifests/%s", hex);
}

int dcr_mobj_from_key(const char *key, uint8_t h[DCR_HASH_LEN])
{
	if (!strncmp(key, "manifests/", 10))
		key += 10;
	if (strlen(key) != DCR_HASH_HEX_LEN || dcr_hash_unhex(key, h))
		return -EINVAL;
	return 0;
}

struct gens {
	uint64_t *g;
	size_t n, cap;
};

static int gens_cb(const char *key, const struct dcr_obj_info *info, void *arg)
{
	struct gens *gs = arg;
	uint64_t g;

	(void)info;
	if (dcr_layout_gen_from_key(key, &g))
		return 0;
	if (dcr_array_grow(&gs->g, sizeof(*gs->g), gs->n, &gs->cap))
		return DCR_ERR(-ENOMEM);
	gs->g[gs->n++] = g;
	return 0;
}

static int cmp_gen_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x > y ? -1 : x < y;
}

int dcr_store_get_layout(struct dcr_store *st, uint64_t gen,
			 struct dcr_layout *l)
{
	char key[64];
	struct dcr_buf b;
	int ret;

	memset(l, 0, sizeof(*l));
	dcr_layout_key(gen, key, sizeof(key));
	dcr_buf_init(&b, LAYOUT_OBJ_MAX);
	ret = dcr_store_get(st, key, 0, DCR_GET_ALL, &b);
	if (!ret) {
		ret = dcr_layout_decode(b.data, b.len, l);
		if (!ret && l->gen != gen) {
			dcr_layout_free(l);
			ret = DCR_ERR(-EBADMSG);
		}
		l->top = l->gen;
		if (ret == -EBADMSG)
			dcr_err("%s: layout %s is corrupt or invalid", st->url, key);
	}
	dcr_buf_free(&b);
	return ret;
}

int dcr_store_find_layout(struct dcr_store *st, uint64_t above, uint64_t below,
			  uint64_t *bad, struct dcr_layout *l)
{
	struct gens gs = { 0 };
	uint64_t top = 0;
	int ret;

	memset(l, 0, sizeof(*l));
	ret = dcr_store_list(st, "layouts/", gens_cb, &gs);
	if (ret == -ENOENT)
		ret = 0;
	if (ret)
		goto out_free;
	if (gs.n) /* (gs.g is NULL then: qsort's pointer must not be) */
		qsort(gs.g, gs.n, sizeof(*gs.g), cmp_gen_desc);
	top = gs.n ? gs.g[0] : 0;
	/* newest first; a newer generation may land meanwhile, and the
	 * one read stays valid */
	for (size_t i = 0; i < gs.n; i++) {
		uint64_t g = gs.g[i];
		if (g <= above)
			break;
		if ((below && g >= below) || (bad && g == *bad))
			continue;
		ret = dcr_store_get_layout(st, g, l);
		if (!ret)
			break;
		if (ret != -EBADMSG && ret != -ENOENT)
			goto out_free;
		/* damaged (logged, naming it) or deleted since listed */
		if (ret == -EBADMSG && bad && g > *bad)
			*bad = g;
		ret = 0;
	}
	l->top = DCR_MAX(top, l->gen);
out_free:
	free(gs.g);
	return ret;
}

int dcr_store_layout(struct dcr_store *st, struct dcr_layout *l)
{
	return dcr_store_find_layout(st, 0, 0, NULL, l);
}

int dcr_store_put_layout(struct dcr_store *st, const struct dcr_layout *l,
			 uint64_t *bytes)
{
	struct dcr_buf b;
	char key[64];
	int ret;

	*bytes = 0;
	dcr_buf_init(&b, LAYOUT_OBJ_MAX);
	dcr_layout_key(l->gen, key, sizeof(key));
	ret = dcr_layout_encode(l, &b);
	if (!ret)
		ret = dcr_store_put(st, key, b.data, b.len, DCR_PUT_IF_ABSENT);
	if (ret == -EEXIST)
		dcr_err("%s: %s was published by another compaction or gc meanwhile: "
			"nothing of this one is used; run it again", st->url, key);
	else if (ret)
		dcr_err("%s: cannot publish %s: %s", st->url, key, dcr_strerror(ret));
	else
		*bytes = b.len;
	dcr_buf_free(&b);
	return ret;
}

int dcr_store_get_mobj(struct dcr_store *st, const uint8_t h[DCR_HASH_LEN],
		       uint64_t v, struct dcr_manifest *m)
{
	char key[96];
	struct dcr_mfetch f = { .key = key, .v = v, .want = h };

	dcr_mobj_key(h, key, sizeof(key));
	return dcr_manifest_fetch(st, &f, m);
}
