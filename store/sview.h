/* SPDX-License-Identifier: MIT */
/*
 * sview.h - one store view: a store's objects as a version graph, the
 * one place that lists versions/, layouts/ and tags/, fetches manifests
 * (core/objstore.h dcr_manifest_fetch: one policy) and resolves each
 * version's committed and encoding manifests under the store's layout
 * (core/layout.h). The index (log, show, verify, diff), compaction, gc
 * and the throwaway readers they open (dcr_reader_seed) all sit on it,
 * so that a maintenance run lists versions/ once and fetches each
 * manifest object once.
 *
 * Contract:
 * - dcr_sview_load lists versions/ (and, if asked, tags/, reading each
 *   tag's target) once, and reads the newest readable layout; no
 *   manifest is fetched then.
 * - Each version's manifests are fetched on first use and kept until
 *   dcr_sview_free: versions/<n> (its committed manifest: identity,
 *   lineage, provenance) and, when the layout names one, the
 *   manifests/<hash> that encodes it (what readers read). A version the
 *   layout does not name has one manifest, both at once.
 * - dcr_sview_reload_layout reads the layout again (after a compaction
 *   published one): encodings the new layout still names are kept, the
 *   others are kept aside (dcr_sview_read_as finds them for the layout
 *   before) and the new ones fetched on first use.
 * - A failure to fetch is remembered per version (its -errno in the
 *   state field), logged once where it was met, never retried.
 *
 * A view is used by one thread at a time and holds no global state.
 * A manifest it hands out stays valid until dcr_sview_free, the next
 * dcr_sview_reload_layout, or (one dcr_sview_read_as gave for an older
 * layout) the next dcr_sview_read_as of the same version.
 */
#ifndef DCR_SVIEW_H
#define DCR_SVIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash.h"
#include "layout.h"
#include "manifest.h"
#include "objstore.h"
#include "sign.h"

/** A listed version. States: 0 not fetched, 1 fetched, -errno. */
struct dcr_sview_ver {
	uint64_t v;
	uint64_t obj_size;    /* bytes of versions/<n>, as listed */
	int64_t obj_mtime_ns; /* its time, as listed (0: unknown) */
	/* The manifest readers use under the layout: versions/<n>, or the
	 * manifests/<hash> the layout names (then its parent is the
	 * encoding base, not the lineage). @mhash: its object's SHA-256. */
	int state;
	struct dcr_manifest m;
	uint8_t mhash[DCR_HASH_LEN];
	uint64_t lparent;     /* the parent it was committed against */
	int compacted;        /* the layout names another manifest */
	/* A compacted version's versions/<n> (dcr_sview_committed). */
	int own_state;
	struct dcr_manifest own;
	uint8_t own_hash[DCR_HASH_LEN];
	/* The encoding a layout before the current one named, kept by
	 * dcr_sview_reload_layout (state 1) or fetched by dcr_sview_read_as. */
	int old_state;
	struct dcr_manifest old;
	uint8_t old_hash[DCR_HASH_LEN];
};

/** A listed tag. */
struct dcr_sview_tag {
	char *name;
	uint64_t v;   /* 0: vanished or unreadable (names no version) */
	bool is_signed;         /* the object has a signature line: */
	struct dcr_tag_sig ts;  /* it, unverified */
};

/** A store's version graph (see the top of this file). */
struct dcr_sview {
	struct dcr_store *st;        /* not owned */
	struct dcr_sview_ver *vs;    /* ascending */
	size_t nvs, cap_vs;
	struct dcr_sview_tag *tags;  /* sorted by name (DCR_SVIEW_TAGS) */
	size_t ntags, cap_tags;
	struct dcr_layout layout;    /* the newest readable (gen 0: none) */
	uint64_t layout_bad;         /* the newest damaged generation (0: none) */
};

/** dcr_sview_load's @what: list tags/ too, and read each tag. */
#define DCR_SVIEW_TAGS 1
/** dcr_sview_load's @what: list versions/ only (no layout read), and log
 *  nothing (a reader's refresh says what failed, once: rversions.c). */
#define DCR_SVIEW_LIST_ONLY 2

/**
 * dcr_sview_load - list @st's versions (and with DCR_SVIEW_TAGS its
 * tags) and read its layout into @sv (overwritten). @st stays the
 * caller's and must outlive @sv. 0, or -errno (logged; @sv is then
 * empty, nothing to free).
 */
int dcr_sview_load(struct dcr_sview *sv, struct dcr_store *st, unsigned what);

/**
 * dcr_sview_list_tags - list tags/ into @sv->tags (sorted by name, the
 * names that are valid tag names; targets not read): for a caller that
 * reads each tag its own way (a reader's refresh). @sv holds no tags
 * yet ({ .st = st } will do). 0, or -errno (not logged; @sv keeps what
 * it holds, for dcr_sview_free).
 */
int dcr_sview_list_tags(struct dcr_sview *sv);

/** dcr_sview_free - free what @sv holds; it stays empty (freeing it again is harmless). */
void dcr_sview_free(struct dcr_sview *sv);

/**
 * dcr_sview_reload_layout - read the store's layout again (see the top
 * of this file). 0 or -errno (logged; the view keeps its layout).
 */
int dcr_sview_reload_layout(struct dcr_sview *sv);

/** dcr_sview_find - the listed version @v, or NULL. */
struct dcr_sview_ver *dcr_sview_find(struct dcr_sview *sv, uint64_t v);

/**
 * dcr_sview_manifest - @x's manifest as readers read it under the
 * view's layout, fetched on first use; NULL if it cannot be had
 * (x->state holds the -errno; logged).
 */
const struct dcr_manifest *dcr_sview_manifest(struct dcr_sview *sv,
					      struct dcr_sview_ver *x);

/**
 * dcr_sview_committed - @x's versions/<n>, whole, as its committer
 * published it: its content, lineage and provenance (signatures bind
 * it, never an encoding). dcr_sview_manifest unless the layout names
 * another one; then versions/<n> is fetched once. NULL if it cannot be
 * had (logged; its -errno in x->state or x->own_state). *@hash, unless
 * NULL, points at its object's SHA-256.
 */
const struct dcr_manifest *dcr_sview_committed(struct dcr_sview *sv,
					       struct dcr_sview_ver *x,
					       const uint8_t **hash);

/**
 * dcr_sview_encoding - the layout rule, the one place it is coded: the
 * SHA-256 of the manifests/<hash> that layout @l says version @v is read
 * from (its encoding), or NULL: versions/<n>, as committed (no entry, or
 * no layout). Whoever uses the encoding checks that it holds versions/<n>'s
 * content (the reader does: read/rlayout.c). The store view, the reader
 * and whatever maintenance reads through them resolve it here.
 */
const uint8_t *dcr_sview_encoding(const struct dcr_layout *l, uint64_t v);

/**
 * dcr_sview_same_encoding - whether version @v, read now from encoding
 * @now (a manifests/<hash>'s SHA-256; NULL: versions/<n>), is read the
 * same way under layout @l (dcr_sview_encoding): false means it is to be
 * read again, re-encoded.
 */
bool dcr_sview_same_encoding(const struct dcr_layout *l, uint64_t v,
			     const uint8_t *now);

/**
 * dcr_sview_read_as - @x's manifest as layout @l (the view's or an
 * older one) encodes it (dcr_sview_encoding).
 * What the view holds already is not fetched again. NULL with *@err
 * set (logged) if it cannot be had.
 */
const struct dcr_manifest *dcr_sview_read_as(struct dcr_sview *sv,
					     const struct dcr_layout *l,
					     struct dcr_sview_ver *x, int *err);

/** dcr_sview_state - x->state, else x->own_state: the -errno to return
 *  when dcr_sview_committed gave NULL. */
static inline int dcr_sview_state(const struct dcr_sview_ver *x)
{
	return x->state < 0 ? x->state : x->own_state;
}

#endif /* DCR_SVIEW_H */
