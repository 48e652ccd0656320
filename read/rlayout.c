/* SPDX-License-Identifier: MIT */
/*
 * rlayout.c - the reader's side of layout generations (core/layout.h,
 * dcrfs-ctl compact): which manifest encodes each version, and
 * re-encoding known versions when a newer generation appears.
 *
 * A version's content always comes from versions/<n> (its identity,
 * rversions.c); a layout only changes how its chunks are encoded. A
 * manifest object a layout names is used only when it hashes to its
 * name, is version n, is consistent with its base, and holds exactly
 * versions/<n>'s content (dcr_manifest_same_content): a wrong or
 * hostile layout can make a version unreadable, never serve other bytes.
 * Re-encoding keeps the tree, so cached chunks stay valid and a read
 * racing the swap starts again (struct rver.reencoded).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"
#include "reader_int.h"
#include "sview.h"

static const char *url_of(const struct dcr_reader *r)
{
	return r->st->url ? r->st->url : "store";
}

/*
 * Fetch manifests/<@eh> (the encoding the layout names) for version
 * @m->version (or copy @given, that object as a store view fetched it)
 * and check it against @m (the content it must hold). 0 and *@out,
 * -ENOMEM, or another -errno: permanent ones logged (-EBADMSG, -ENOENT),
 * transient ones returned as -EAGAIN after a log line.
 */
static int fetch_encoding(struct dcr_reader *r, struct refresh_ctx *ctx,
			  const struct dcr_manifest *m, const uint8_t *eh,
			  const struct dcr_manifest *given,
			  struct dcr_manifest *out)
{
	char key[96];
	int ret;

	dcr_mobj_key(eh, key, sizeof(key));
	ret = given ? dcr_manifest_dup(out, given)
		    : dcr_store_get_mobj(r->st, eh, m->version, out);
	if (ret == -ENOENT) {
		dcr_err("%s: %s, which layout generation %" PRIu64 " names for "
			"version %" PRIu64 ", is missing", url_of(r), key,
			r->vs.layout.gen, m->version);
		return ret;
	}
	if (ret == -EBADMSG || ret == -ENOMEM)
		return ret; /* logged */
	if (ret)
		return DCR_ERR(-EAGAIN); /* logged; the next refresh retries */
	if (!dcr_manifest_same_content(m, out)) {
		dcr_err("%s: %s, which layout generation %" PRIu64 " names for "
			"version %" PRIu64 ", does not hold that version's files "
			"and chunks: refused", url_of(r), key, r->vs.layout.gen,
			m->version);
		ret = DCR_ERR(-EBADMSG);
	} else if (!(ret = reader_check_manifest(r, ctx, out, key))) {
		/* what was committed and signed, not the re-encoding's */
		ret = dcr_manifest_copy_provenance(out, m);
	}
	if (ret) {
		dcr_manifest_free(out);
		memset(out, 0, sizeof(*out));
	}
	return ret;
}

int layout_apply(struct dcr_reader *r, struct refresh_ctx *ctx,
		 struct dcr_manifest *m, struct dcr_catalog_ident *id,
		 const struct dcr_manifest *given)
{
	const uint8_t *eh = dcr_sview_encoding(&r->vs.layout, m->version);
	struct dcr_manifest em;
	int ret;

	id->has_ehash = false;
	if (!eh)
		return 0;
	ret = fetch_encoding(r, ctx, m, eh, given, &em);
	if (ret == -ENOMEM || ret == -EAGAIN)
		return ret == -EAGAIN ? DCR_ERR(-EIO) : ret;
	if (ret) {
		dcr_err("%s: version %" PRIu64 " is read as committed "
			"(versions/%010" PRIu64 "), whose frames gc may have "
			"collected", url_of(r), m->version, m->version);
		return 0;
	}
	dcr_manifest_free(m);
	*m = em;
	id->has_ehash = true;
	memcpy(id->ehash, eh, DCR_HASH_LEN);
	return 0;
}

/*
 * Read a newer layout generation into @l: 1 if there is one (at the
 * first refresh of a process and after a failure: the newest readable
 * one, whatever it is), 0 if not, -errno. layouts/ is listed then, at
 * every whole listing of versions/ (relist_ns: a mount that missed a
 * generation - stopped while gc removed it - catches up) and when @list
 * (a read failed); other refreshes GET the next generation, usually
 * absent. A damaged generation is logged once and passed over
 * (layout_bad): an older readable one is used, a newer one supersedes.
 */
static int newer_layout(struct dcr_reader *r, bool list, struct dcr_layout *l)
{
	int ret;

	memset(l, 0, sizeof(*l));
	if (!r->vs.layout_listed || !r->vs.listed || list) {
		bool first = !r->vs.layout_listed;
		ret = dcr_store_find_layout(r->st,
					    first ? 0 : r->vs.layout.gen, 0,
					    &r->vs.layout_bad, l);
		if (ret)
			return ret;
		r->vs.layout_listed = true;
		return first || l->gen != 0;
	}
	for (uint64_t g = r->vs.layout.gen + 1;; g++) {
		struct dcr_layout next;
		if (g == r->vs.layout_bad)
			continue; /* logged when found */
		ret = dcr_store_get_layout(r->st, g, &next);
		if (ret == -ENOENT)
			break;
		if (ret == -EBADMSG) {
			r->vs.layout_bad = g; /* logged */
			continue;
		}
		if (ret) {
			dcr_layout_free(l);
			return ret;
		}
		dcr_layout_free(l);
		*l = next;
	}
	return l->gen != 0;
}

/* Re-encode known version @v as the layout says (@eh, its encoding's
 * SHA-256; NULL: as committed). 0, -ENOMEM, or -EAGAIN for a transient
 * failure (logged). */
static int reencode(struct dcr_reader *r, struct refresh_ctx *ctx, uint64_t v,
		    const struct dcr_catalog_ident *old, const uint8_t *eh)
{
	struct dcr_catalog_ident id = *old;
	struct dcr_manifest cm, em;
	char why[96];
	int ret;

	/* the content it must keep: what is indexed now */
	ret = dcr_catalog_load_manifest(r->cat, v, &cm);
	if (ret)
		return ret == -ENOMEM ? ret : DCR_ERR(-EAGAIN);
	if (eh) {
		ret = fetch_encoding(r, ctx, &cm, eh, NULL, &em);
	} else {
		ret = dcr_store_get_manifest(r->st, v, &em);
		if (ret == -ENOENT) {
			/* gone with the generation that forgot it (gc) */
			dcr_manifest_free(&cm);
			reader_drop_version(r, v);
			return 0;
		}
		if (!ret && !dcr_manifest_same_content(&cm, &em)) {
			/* the identity check of the next listing handles it */
			dcr_manifest_free(&em);
			ret = DCR_ERR(-EBADMSG);
		}
		if (ret && ret != -EBADMSG && ret != -ENOENT && ret != -ENOMEM)
			ret = DCR_ERR(-EAGAIN);
	}
	dcr_manifest_free(&cm);
	if (ret)
		return ret == -ENOMEM || ret == -EAGAIN ? ret : 0; /* logged */
	id.has_ehash = eh != NULL;
	if (eh)
		memcpy(id.ehash, eh, DCR_HASH_LEN);
	snprintf(why, sizeof(why), "re-encoded by layout generation %" PRIu64,
		 r->vs.layout.gen);
	ret = reader_replace_version(r, &em, &id, why);
	dcr_manifest_free(&em);
	return ret < 0 && ret != -ENOENT ? DCR_ERR(-EAGAIN) : 0;
}

/* layout_refresh, listing layouts/ if @list. */
static int layout_update(struct dcr_reader *r, struct refresh_ctx *ctx, bool list)
{
	struct dcr_layout l;
	uint64_t *vs = NULL;
	struct dcr_catalog_ident *ids = NULL;
	size_t n = 0, done = 0;
	bool retry = false;
	int ret;

	ret = newer_layout(r, list, &l);
	if (ret <= 0) {
		if (ret < 0 && ret != -ENOENT)
			dcr_warn("%s: cannot read layouts/: %s; retrying at the "
				 "next refresh", url_of(r), dcr_strerror(ret));
		return ret == -ENOMEM ? ret : 0;
	}
	dcr_layout_free(&r->vs.layout);
	r->vs.layout = l;

	/* the known versions and what they were indexed from */
	pthread_mutex_lock(&r->vs.lock);
	if (r->vs.nvers) {
		vs = malloc(r->vs.nvers * sizeof(*vs));
		ids = malloc(r->vs.nvers * sizeof(*ids));
	}
	for (size_t i = 0; vs && ids && i < r->vs.nvers; i++) {
		vs[n] = r->vs.vers[i]->v;
		ids[n++] = r->vs.vers[i]->id;
	}
	pthread_mutex_unlock(&r->vs.lock);
	if (n && (!vs || !ids)) {
		free(vs);
		free(ids);
		r->vs.layout_listed = false;
		return DCR_ERR(-ENOMEM);
	}
	for (size_t i = 0; i < n; i++) {
		if (dcr_sview_same_encoding(&r->vs.layout, vs[i],
					    ids[i].has_ehash ? ids[i].ehash : NULL))
			continue;
		ret = reencode(r, ctx, vs[i], &ids[i],
			       dcr_sview_encoding(&r->vs.layout, vs[i]));
		if (ret == -ENOMEM) {
			retry = true;
			break;
		}
		retry |= ret == -EAGAIN;
		done += ret == 0;
	}
	free(vs);
	free(ids);
	/* what failed for a passing reason: the next refresh lists again */
	if (retry)
		r->vs.layout_listed = false;
	/* "0 versions re-encoded" at every mount and commit is routine */
	if (done || retry)
		dcr_info("%s: layout generation %" PRIu64 ": %zu versions "
			 "re-encoded%s", url_of(r), r->vs.layout.gen, done,
			 retry ? "; the others are tried again at the next "
				 "refresh" : "");
	else if (r->vs.layout.gen)
		dcr_debug("%s: layout generation %" PRIu64 ": no version "
			  "re-encoded", url_of(r), r->vs.layout.gen);
	return ret == -ENOMEM ? ret : 0;
}

int layout_refresh(struct dcr_reader *r, struct refresh_ctx *ctx)
{
	return layout_update(r, ctx, false);
}

bool layout_recheck(struct dcr_reader *r, const struct rver *rv)
{
	struct refresh_ctx ctx = { .have_last = false };
	int64_t now;

	pthread_mutex_lock(&r->vs.refresh_lock);
	now = dcr_mono_ns();
	if (!atomic_load(&rv->dead) && now >= r->vs.layout_recheck_at) {
		r->vs.layout_recheck_at = now + LAYOUT_RECHECK_NS;
		dcr_debug("%s: a read of version %" PRIu64 " failed: looking for "
			  "a newer layout generation", url_of(r), rv->v);
		layout_update(r, &ctx, true);
		if (ctx.have_last)
			dcr_manifest_free(&ctx.last);
	}
	pthread_mutex_unlock(&r->vs.refresh_lock);
	return atomic_load(&rv->dead) && atomic_load(&rv->reencoded);
}
