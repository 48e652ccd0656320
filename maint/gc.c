/* SPDX-License-Identifier: MIT */
/*
 * gc.c - retention, then every object no kept version needs, orphans and
 * incomplete uploads past the grace period (gc.h).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "compact.h"
#include "gc.h"
#include "hash.h"
#include "layout.h"
#include "manifest.h"
#include "objstore.h"

/* One run of dcr_gc. */
struct gc {
	struct dcr_index *ix;
	const struct dcr_gc_opts *o;
	/* Times before this are not believed (see gc_time_floor). */
	int64_t time_floor;
};

static void gc_event(const struct gc *g, struct dcr_gc_event e)
{
	e.dry_run = g->o->dry_run;
	if (g->o->event)
		g->o->event(g->o->arg, &e);
}

enum keep_why { KEEP_NOT = 0, KEEP_LAST, KEEP_TAGGED, KEEP_NEWER, KEEP_CHAIN };

/* Mark the packs of @m in @ps (parallel to ix->packs) with at least @mark. */
static void mark_packs(const struct dcr_index *ix, const struct dcr_manifest *m,
		       uint8_t *ps, uint8_t mark)
{
	for (uint32_t i = 0; i < m->npacks; i++) {
		const struct dcr_ix_pack *p = dcr_index_pack(ix, m->packs[i]);
		if (p && ps[p - ix->packs] < mark)
			ps[p - ix->packs] = mark;
	}
}

static int gc_del(const struct gc *g, const char *key)
{
	int ret = g->o->dry_run ? 0 : dcr_store_del(g->ix->st, key);

	if (ret && ret != -ENOENT) {
		dcr_err("%s: cannot delete %s: %s", g->ix->st->url, key, dcr_strerror(ret));
		return ret;
	}
	return 0;
}

/*
 * An object of the store cannot be older than the store: a time before
 * its creation (less an hour for clocks that disagree) is a server's
 * placeholder (moto reports every multipart upload as started in 2010),
 * and the object's age counts as unknown.
 */
static void gc_time_floor(struct gc *g)
{
	if (g->ix->info.created_ns)
		g->time_floor = g->ix->info.created_ns - (int64_t)3600 * 1000000000;
}

/* Is an object last written at @mtime_ns (0: unknown) past the grace? */
static bool past_grace(const struct gc *g, int64_t now, int64_t mtime_ns)
{
	if (!g->o->grace)
		return true;
	/* a time in the future (clocks that disagree) is young */
	return mtime_ns > 0 && mtime_ns >= g->time_floor && now > mtime_ns &&
	       (uint64_t)(now - mtime_ns) / 1000000000 >= g->o->grace;
}

/*
 * Is the newest layout younger than the grace (what it replaced stays)?
 * @would_publish: a dry run of a rebase, which would publish one now.
 */
static bool layout_young(const struct gc *g, int64_t now, bool would_publish)
{
	if (would_publish)
		return g->o->grace != 0;
	return g->ix->sv.layout.gen && !past_grace(g, now, g->ix->sv.layout.ctime_ns);
}

struct recheck {
	struct dcr_index *ix;
	uint64_t gen;      /* the newest layout generation listed now */
};

static int recheck_pack_cb(const char *key, const struct dcr_obj_info *info, void *arg)
{
	struct recheck *rc = arg;
	uint8_t h[DCR_HASH_LEN];

	if (dcr_pack_key_hash(key, h))
		return 0;
	struct dcr_ix_pack *p = (struct dcr_ix_pack *)dcr_index_pack(rc->ix, h);
	if (p && info->mtime_ns > p->mtime_ns)
		p->mtime_ns = info->mtime_ns; /* written again since */
	return 0;
}

static int recheck_layout_cb(const char *key, const struct dcr_obj_info *info, void *arg)
{
	struct recheck *rc = arg;
	uint64_t g;

	(void)info;
	if (!dcr_layout_gen_from_key(key, &g) && g > rc->gen)
		rc->gen = g;
	return 0;
}

/*
 * Just before orphans go: list packs/ again, so that a pack a commit has
 * uploaded again since the first listing counts as young, then keep
 * every pack of the versions published since (marked @kept in @ps).
 * Those are found without listing versions/ again: a commit publishes
 * one more than the newest version it listed (or its parent), creating
 * it only if absent (commit/commit_publish.c), so the versions
 * published since the view's listing are the numbers right after its
 * newest, each one there before the next: probed one GET each (the
 * manifest, which is needed anyway) until the first that is absent, as
 * the reader's refresh does (read/rversions.c, refresh_probe). A
 * version published after that miss began after gc listed the intents
 * (HACKING, the publish protocol). Any failure but "absent" is one, as
 * a failed listing was: no pack goes.
 */
static int gc_recheck(struct dcr_index *ix, uint8_t *ps, uint8_t kept)
{
	struct recheck rc = { .ix = ix };
	uint64_t v = ix->sv.nvs ? ix->sv.vs[ix->sv.nvs - 1].v : 0;
	int ret;

	if ((ret = dcr_store_list(ix->st, "packs/", recheck_pack_cb, &rc)) ||
	    ((ret = dcr_store_list(ix->st, "layouts/", recheck_layout_cb, &rc)) &&
	     ret != -ENOENT))
		goto err_log;
	if (rc.gen > DCR_MAX(ix->sv.layout.gen, ix->sv.layout.top)) {
		dcr_err("%s: layout generation %" PRIu64 " was published during gc (a "
			"compaction): no pack deleted; run gc again", ix->st->url, rc.gen);
		return DCR_ERR(-EAGAIN);
	}
#ifdef DCR_TEST_HOOKS
	/* HACKING: DCRFS_TEST_GC_BEFORE_PROBE (tests/integration/gc_probe.sh) */
	dcr_test_hook_cmd("DCRFS_TEST_GC_BEFORE_PROBE", NULL);
#endif
	for (;;) {
		struct dcr_manifest m;
		ret = dcr_store_get_manifest(ix->st, ++v, &m);
		if (ret == -ENOENT)
			return 0;
		if (ret)
			goto err_log;
		dcr_debug("version %" PRIu64 " was published during gc: its packs stay", v);
		mark_packs(ix, &m, ps, kept);
		dcr_manifest_free(&m);
	}
err_log:
	dcr_err("%s: cannot check the store again before collecting orphans: %s",
		ix->st->url, dcr_strerror(ret));
	return ret;
}

struct intents {
	const struct gc *g;
	int64_t now;
	int64_t oldest;  /* the oldest live intent's time; INT64_MAX: none */
	size_t live;
};

static int intent_cb(const char *key, const struct dcr_obj_info *info, void *arg)
{
	struct intents *it = arg;
	const struct gc *g = it->g;

	if (info->mtime_ns > 0 && it->now > info->mtime_ns &&
	    (it->now - info->mtime_ns) / 1000000000 >= DCR_INTENT_TTL_S) {
		/* a commit killed (SIGKILL, a crash) before it could say so */
		dcr_info("%s%s: the intent of a commit that began %" PRId64 " h ago "
			 "has expired: no longer honoured, deleted", g->o->dry_run ?
			 "(dry run) " : "", key, (it->now - info->mtime_ns) / 3600000000000);
		if (!g->o->dry_run)
			gc_del(g, key); /* logged; it is ignored anyway */
		return 0;
	}
	it->live++;
	/* an unknown time: every orphan may be the commit's */
	int64_t t = info->mtime_ns > 0 ? info->mtime_ns : 0;
	if (t < it->oldest)
		it->oldest = t;
	return 0;
}

/*
 * The running commits gc can know of (objstore.h, commit intents): into
 * *@floor, the time from which on an orphan pack may be one a running
 * commit will name (INT64_MAX: none runs), the count into @r. Expired
 * intents are deleted. Listed before the packs are listed again, so that
 * a commit gc does not see began after that listing: the packs it writes
 * are new to gc, or young again. 0 or -errno (logged).
 */
static int gc_intents(const struct gc *g, int64_t *floor, struct dcr_gc_result *r)
{
	struct intents it = { .g = g, .now = dcr_now_ns(), .oldest = INT64_MAX };
	int ret = dcr_store_list(g->ix->st, DCR_INTENT_PREFIX, intent_cb, &it);

	if (ret && ret != -ENOENT) {
		dcr_err("%s: cannot list the running commits (%s): %s", g->ix->st->url,
			DCR_INTENT_PREFIX, dcr_strerror(ret));
		return ret;
	}
	r->commits_running = it.live;
	*floor = it.oldest == INT64_MAX ? INT64_MAX :
		 it.oldest - (int64_t)DCR_INTENT_SKEW_S * 1000000000;
	return 0;
}

struct partials {
	const struct gc *g;
	int64_t now;
	size_t n, kept;
	uint64_t bytes;
	int err;
};

static int partial_cb(const char *key, const struct dcr_obj_info *info, void *arg)
{
	struct partials *pp = arg;
	const struct gc *g = pp->g;

	if (!past_grace(g, pp->now, info->mtime_ns)) {
		pp->kept++;
		return 0;
	}
	gc_event(g, (struct dcr_gc_event){ .what = DCR_GC_ABORT_UPLOAD, .key = key,
					   .size = info->size });
	int ret = g->o->dry_run ? 0 : dcr_store_abort_partial(g->ix->st, key, info->upload);
	if (ret && ret != -ENOENT) {
		dcr_err("%s: cannot abort the incomplete upload %s: %s", g->ix->st->url,
			key, dcr_strerror(ret));
		pp->err = ret;
		return 0; /* the others may still go */
	}
	pp->n++;
	pp->bytes += info->size;
	return 0;
}

struct rebase {
	const struct gc *g;
	uint64_t done, total; /* versions */
};

static void rebase_report(void *arg, uint64_t v, uint64_t old_base, uint64_t new_base,
			  unsigned depth, int rewritten)
{
	struct rebase *rb = arg;

	rb->done++;
	if (rewritten)
		gc_event(rb->g, (struct dcr_gc_event){ .what = DCR_GC_REWRITE, .v = v,
				.old_base = old_base, .new_base = new_base,
				.depth = depth });
	dcr_pg_report(&rb->g->o->pg, rb->done == rb->total ? DCR_PG_LAST : DCR_PG_STEP,
		      "rebase", rb->done, rb->total, "versions");
}

/*
 * If a version @keep names is built on one it does not (its chain
 * reaches into removed versions), compact the kept versions: the oldest
 * of each lineage becomes an anchor, the others skip-deltas on kept
 * versions. The new layout is published before anything is deleted, and
 * keeps the entries of the removed versions, which stay readable as
 * they are encoded now until their manifests go. 1 if it did (or, dry
 * run, would), 0 if nothing needed it, -errno on failure (logged:
 * nothing removed).
 */
static int gc_rebase(const struct gc *g, const uint8_t *keep)
{
	struct dcr_index *ix = g->ix;
	uint64_t *kv = calloc(ix->sv.nvs ? ix->sv.nvs : 1, sizeof(*kv));
	struct dcr_compact_stats s;
	size_t nk = 0;
	int need = 0, ret;

	if (!kv)
		return DCR_ERR(-ENOMEM);
	for (size_t i = 0; i < ix->sv.nvs; i++) {
		if (!keep[i])
			continue;
		kv[nk++] = ix->sv.vs[i].v;
		const struct dcr_manifest *m = dcr_index_manifest(ix, &ix->sv.vs[i]);
		if (!m) {
			dcr_err("%s: cannot read the manifest of version %" PRIu64
				", which is kept: nothing removed", ix->st->url, ix->sv.vs[i].v);
			ret = ix->sv.vs[i].state;
			goto err_free;
		}
		struct dcr_sview_ver *p = m->parent && dcr_manifest_needs_parent(m) ?
			dcr_index_find(ix, m->parent) : NULL;
		need |= p && !keep[p - ix->sv.vs];
	}
	ret = need;
	if (need) {
		struct rebase rb = { .g = g, .total = nk };
		struct dcr_compact_opts co = {
			.max_depth = g->o->max_depth, .read_cost = g->o->read_cost,
			.keep = kv, .nkeep = nk,
			.dry_run = g->o->dry_run, .report = rebase_report, .arg = &rb,
			.threads = ix->threads,
		};
		gc_event(g, (struct dcr_gc_event){ .what = DCR_GC_REBASE });
		dcr_pg_report(&g->o->pg, DCR_PG_START, "rebase", 0, nk, "versions");
		dcr_pg_report(&g->o->pg, DCR_PG_STEP, "rebase", 0, nk, "versions");
		ret = dcr_compact_view(&ix->sv, &co, &s);
		dcr_pg_report(&g->o->pg, DCR_PG_END, "rebase", rb.done, nk, "versions");
		if (!ret && s.gen)
			ret = dcr_index_reload_layout(ix);
		if (ret) {
			dcr_err("%s: rebasing the kept versions failed: nothing removed",
				ix->st->url);
			goto err_free;
		}
		ret = 1;
	}
err_free:
	free(kv);
	return ret;
}

/*
 * After the removed versions' manifests are gone: if the layout still
 * names versions that are not kept (the rebase kept their entries so
 * that they stayed readable until deleted; or a killed gc's), publish a
 * generation without them, and make it the index's layout. 0, or -errno
 * (logged).
 */
static int gc_forget(const struct gc *g, const uint8_t *keep)
{
	struct dcr_index *ix = g->ix;
	const struct dcr_layout *l = &ix->sv.layout;
	struct dcr_layout nl = { .gen = DCR_MAX(l->gen, l->top) + 1 };
	uint64_t bytes;
	int ret;

	if (!l->gen)
		return 0;
	if (!(nl.e = calloc(l->n ? l->n : 1, sizeof(*nl.e))))
		return DCR_ERR(-ENOMEM);
	for (size_t i = 0; i < l->n; i++) {
		struct dcr_sview_ver *x = dcr_index_find(ix, l->e[i].version);
		if (x && keep[x - ix->sv.vs])
			nl.e[nl.n++] = l->e[i];
	}
	if (nl.n == l->n) {
		free(nl.e);
		return 0;
	}
	gc_event(g, (struct dcr_gc_event){ .what = DCR_GC_FORGET, .gen = nl.gen });
	if (g->o->dry_run) {
		free(nl.e);
		return 0;
	}
	nl.ctime_ns = dcr_now_ns();
	if ((ret = dcr_store_put_layout(ix->st, &nl, &bytes))) {
		free(nl.e);
		return ret;
	}
	nl.top = nl.gen;
	dcr_layout_free(&ix->sv.layout);
	ix->sv.layout = nl;
	return 0;
}

struct stale {
	const struct gc *g;
	int64_t now;
	int err;
};

/* manifests/<h> the newest layout does not name, older layouts/<g>. */
static int stale_cb(const char *key, const struct dcr_obj_info *info, void *arg)
{
	struct stale *st = arg;
	const struct dcr_layout *l = &st->g->ix->sv.layout;
	uint8_t h[DCR_HASH_LEN];
	uint64_t g;
	int named = 0;

	if (!dcr_layout_gen_from_key(key, &g)) {
		if (g >= l->gen)
			return 0;
	} else if (!dcr_mobj_from_key(key, h)) {
		for (size_t i = 0; i < l->n && !named; i++)
			named = dcr_hash_eq(l->e[i].mhash, h);
		/* a compaction uploads its manifests before its layout */
		if (named || !past_grace(st->g, st->now, info->mtime_ns))
			return 0;
	} else {
		return 0;
	}
	gc_event(st->g, (struct dcr_gc_event){ .what = DCR_GC_DELETE_STALE, .key = key,
					       .gen = l->gen });
	if (gc_del(st->g, key))
		st->err = -EIO;
	return 0;
}

static int gc_layouts(const struct gc *g, int64_t now)
{
	struct stale st = { .g = g, .now = now };
	struct dcr_store *s = g->ix->st;
	int ret;

	/* older layouts first: no layout is left naming a deleted manifest */
	if (((ret = dcr_store_list(s, "layouts/", stale_cb, &st)) && ret != -ENOENT) ||
	    ((ret = dcr_store_list(s, "manifests/", stale_cb, &st)) && ret != -ENOENT)) {
		dcr_err("%s: cannot list the layouts: %s", s->url, dcr_strerror(ret));
		return ret;
	}
	return st.err;
}

/*
 * While the newest layout is younger than the grace, a mount may still
 * read the generation before it (until its next refresh): mark @mark in
 * @ps every pack that generation's encoding of a kept version builds on,
 * down its encoding chain, removed versions included (their frames stay
 * for the grace; a later gc collects them as orphans). The generation
 * before it is the newest readable one below @below. Runs before any
 * manifest is deleted. 0 or -errno (logged: nothing removed).
 */
static int gc_keep_previous(struct dcr_index *ix, const uint8_t *keep, uint8_t *ps,
			    uint8_t mark, uint64_t below)
{
	uint8_t *seen = calloc(ix->sv.nvs ? ix->sv.nvs : 1, 1);
	struct dcr_layout prev;
	int ret;

	if (!seen)
		return DCR_ERR(-ENOMEM);
	/* the newest readable one below (none: the versions as committed) */
	if ((ret = dcr_store_find_layout(ix->st, 0, below, NULL, &prev))) {
		dcr_err("%s: cannot read the layout before generation %" PRIu64
			": %s; nothing removed", ix->st->url, below, dcr_strerror(ret));
		free(seen);
		return ret;
	}
	for (size_t i = 0; i < ix->sv.nvs && !ret; i++) {
		struct dcr_sview_ver *x = keep[i] ? &ix->sv.vs[i] : NULL;
		while (x && !seen[x - ix->sv.vs]) {
			const struct dcr_manifest *m;
			seen[x - ix->sv.vs] = 1;
			/* what the view holds is not fetched again */
			m = dcr_sview_read_as(&ix->sv, &prev, x, &ret);
			if (ret == -ENOENT || ret == -EBADMSG) {
				ret = 0; /* logged; no mount reads it that way */
				break;
			}
			if (ret) {
				dcr_err("%s: cannot read version %" PRIu64 " as layout "
					"generation %" PRIu64 " encodes it: %s; nothing "
					"removed", ix->st->url, x->v, prev.gen,
					dcr_strerror(ret));
				break;
			}
			mark_packs(ix, m, ps, mark);
			x = m->parent && dcr_manifest_needs_parent(m) ?
				dcr_index_find(ix, m->parent) : NULL;
		}
	}
	dcr_layout_free(&prev);
	free(seen);
	return ret;
}

/* The versions and tags that go (by @keep) into @r. */
static int gc_removed(struct dcr_index *ix, const uint8_t *keep, struct dcr_gc_result *r)
{
	if (!(r->removed = calloc(ix->sv.nvs ? ix->sv.nvs : 1, sizeof(*r->removed))) ||
	    !(r->tags_removed = calloc(ix->sv.ntags ? ix->sv.ntags : 1, sizeof(*r->tags_removed))))
		return DCR_ERR(-ENOMEM);
	for (size_t i = 0; i < ix->sv.nvs; i++)
		if (!keep[i])
			r->removed[r->nremoved++] = ix->sv.vs[i].v;
	for (size_t t = 0; t < ix->sv.ntags; t++) {
		struct dcr_sview_ver *x = ix->sv.tags[t].v ? dcr_index_find(ix, ix->sv.tags[t].v) : NULL;
		if (!x || keep[x - ix->sv.vs])
			continue;
		if (!(r->tags_removed[r->ntags_removed] = strdup(ix->sv.tags[t].name)))
			return DCR_ERR(-ENOMEM);
		r->ntags_removed++;
	}
	return 0;
}

int dcr_gc(struct dcr_index *ix, const struct dcr_gc_opts *o, struct dcr_gc_result *r)
{
	enum { P_ORPHAN = 0, P_REMOVED = 1, P_PREV = 2, P_KEPT = 3,
	       P_GO = 8 /* flag: deleted below */ };
	struct gc g = { .ix = ix, .o = o };
	const struct dcr_pg *pg = &o->pg;
	uint8_t *keep = calloc(ix->sv.nvs ? ix->sv.nvs : 1, 1);
	uint64_t *by = calloc(ix->sv.nvs ? ix->sv.nvs : 1, sizeof(*by));
	uint8_t *ps = calloc(ix->npacks ? ix->npacks : 1, 1);
	int64_t now = dcr_now_ns();
	char key[160];
	int ret;

	*r = (struct dcr_gc_result){ .dry_run = o->dry_run, .grace = o->grace };
	if (!keep || !by || !ps) {
		ret = DCR_ERR(-ENOMEM);
		goto err_free;
	}
	if (!o->keep_last) {
		dcr_err("gc needs keep_last of at least 1");
		ret = DCR_ERR(-EINVAL);
		goto err_free;
	}
	gc_time_floor(&g);
	/* the rules */
	dcr_pg_report(pg, DCR_PG_START, "read manifests", 0, ix->sv.nvs, "versions");
	for (size_t i = 0; i < ix->sv.nvs; i++) {
		dcr_pg_report(pg, DCR_PG_STEP, "read manifests", i, ix->sv.nvs, "versions");
		const struct dcr_manifest *m = dcr_index_manifest(ix, &ix->sv.vs[i]);
		if (i + o->keep_last >= ix->sv.nvs)
			keep[i] = KEEP_LAST;
		else if (m && o->keep_newer &&
			 now - m->ctime_ns < (int64_t)DCR_MIN(o->keep_newer, INT64_MAX / 1000000000) * 1000000000)
			keep[i] = KEEP_NEWER;
	}
	for (size_t t = 0; t < ix->sv.ntags && o->keep_tagged; t++) {
		struct dcr_sview_ver *x = ix->sv.tags[t].v ? dcr_index_find(ix, ix->sv.tags[t].v) : NULL;
		if (x && !keep[x - ix->sv.vs])
			keep[x - ix->sv.vs] = KEEP_TAGGED;
	}
	dcr_pg_report(pg, DCR_PG_LAST, "read manifests", ix->sv.nvs, ix->sv.nvs, "versions");
	dcr_pg_report(pg, DCR_PG_END, "read manifests", ix->sv.nvs, ix->sv.nvs, "versions");
	/* kept versions built on removed ones are rebased (compaction of
	 * the kept versions), and the layout forgets the removed ones */
	if ((ret = gc_rebase(&g, keep)) < 0)
		goto err_free;
	r->rebased = ret;
	/* what the kept versions' chains need, newest first (after a
	 * rebase, nothing outside the kept versions; a dry run shows the
	 * store as the rebase would leave it) */
	for (size_t i = ix->sv.nvs; i-- > 0 && !(r->rebased && o->dry_run);) {
		const struct dcr_manifest *m = keep[i] ? dcr_index_manifest(ix, &ix->sv.vs[i]) : NULL;
		if (!keep[i])
			continue;
		if (!m) {
			dcr_err("%s: cannot read the manifest of version %" PRIu64
				", which is kept: nothing removed", ix->st->url, ix->sv.vs[i].v);
			ret = ix->sv.vs[i].state;
			goto err_free;
		}
		if (!m->parent || !dcr_manifest_needs_parent(m))
			continue;
		struct dcr_sview_ver *p = dcr_index_find(ix, m->parent);
		if (!p) {
			dcr_warn("version %" PRIu64 " is built on version %" PRIu64
				 ", which is already gone (dcrfs-ctl verify shows what it breaks)",
				 ix->sv.vs[i].v, m->parent);
			continue;
		}
		if (!keep[p - ix->sv.vs]) {
			keep[p - ix->sv.vs] = KEEP_CHAIN;
			by[p - ix->sv.vs] = by[i] ? by[i] : ix->sv.vs[i].v;
		}
	}
	/* packs: kept, only of removed versions, or named by no manifest */
	for (size_t i = 0; i < ix->sv.nvs; i++) {
		const struct dcr_manifest *m = dcr_index_manifest(ix, &ix->sv.vs[i]);
		if (m)
			mark_packs(ix, m, ps, keep[i] ? P_KEPT : P_REMOVED);
		r->kept += keep[i] != KEEP_NOT;
		r->chain += keep[i] == KEEP_CHAIN;
	}
	if ((ret = gc_removed(ix, keep, r)))
		goto err_free;
	/* a dry run of a rebase: the layout now is the one before */
	bool dry_rebase = r->rebased && o->dry_run;
	if (layout_young(&g, now, dry_rebase) &&
	    (ret = gc_keep_previous(ix, keep, ps, P_PREV, ix->sv.layout.gen + dry_rebase)))
		goto err_free;
	/* tags of versions that go, then manifests, then packs: a failure
	 * part way leaves no manifest naming a deleted pack */
	for (size_t t = 0; t < ix->sv.ntags; t++) {
		struct dcr_sview_ver *x = ix->sv.tags[t].v ? dcr_index_find(ix, ix->sv.tags[t].v) : NULL;
		if (!x || keep[x - ix->sv.vs])
			continue;
		gc_event(&g, (struct dcr_gc_event){ .what = DCR_GC_UNTAG,
						    .key = ix->sv.tags[t].name, .v = x->v });
		ret = o->dry_run ? 0 : dcr_store_del_tag(ix->st, ix->sv.tags[t].name);
		if (ret && ret != -ENOENT) {
			dcr_err("%s: cannot remove tag %s: %s", ix->st->url, ix->sv.tags[t].name,
				dcr_strerror(ret));
			goto err_free;
		}
	}
	/* newest first: a removed version goes only after every version
	 * built on it (newer) that goes too, so whatever prefix of this is
	 * done (gc killed), every version still listed reads; kept ones are
	 * built on kept ones only (rebased above) */
	size_t nrm = 0;
	dcr_pg_report(pg, DCR_PG_START, "remove versions", 0, r->nremoved, "versions");
	for (size_t i = ix->sv.nvs; i-- > 0;) {
		if (keep[i] == KEEP_CHAIN)
			gc_event(&g, (struct dcr_gc_event){ .what = DCR_GC_KEEP_CHAIN,
							    .v = ix->sv.vs[i].v, .by = by[i] });
		if (keep[i])
			continue;
		gc_event(&g, (struct dcr_gc_event){ .what = DCR_GC_REMOVE, .v = ix->sv.vs[i].v });
		dcr_version_key(ix->sv.vs[i].v, key, sizeof(key));
		if ((ret = gc_del(&g, key)))
			goto err_free;
		nrm++;
		dcr_pg_report(pg, nrm == r->nremoved ? DCR_PG_LAST : DCR_PG_STEP,
			      "remove versions", nrm, r->nremoved, "versions");
	}
	dcr_pg_report(pg, DCR_PG_END, "remove versions", nrm, r->nremoved, "versions");
	if (!dry_rebase && (ret = gc_forget(&g, keep)))
		goto err_free;
	/* --grace 0 says that nothing runs: no intent is honoured */
	int64_t floor = INT64_MAX;
	if (o->grace && (ret = gc_intents(&g, &floor, r)))
		goto err_free;
	if (!o->dry_run && (ret = gc_recheck(ix, ps, P_KEPT)))
		goto err_free;
	now = dcr_now_ns();
	/* what a layout replaced stays while mounts may still read it */
	bool young = layout_young(&g, now, dry_rebase);
	uint64_t to_free = 0;
	size_t npk_go = 0;
	for (size_t i = 0; i < ix->npacks; i++) {
		if (ps[i] == P_KEPT)
			continue;
		if (ps[i] == P_PREV) {
			r->prev++;
			r->prev_bytes += ix->packs[i].size;
			continue;
		}
		if (ps[i] == P_ORPHAN && (young || ix->packs[i].mtime_ns >= floor ||
					  !past_grace(&g, now, ix->packs[i].mtime_ns))) {
			r->orphans++;
			r->orphan_bytes += ix->packs[i].size;
			continue;
		}
		ps[i] |= P_GO;
		npk_go++;
		to_free += ix->packs[i].size;
	}
	/* then delete them, with their progress */
	dcr_pg_report(pg, DCR_PG_START, "delete packs", 0, to_free, NULL);
	for (size_t i = 0; i < ix->npacks; i++) {
		if (!(ps[i] & P_GO))
			continue;
		dcr_pack_key(ix->packs[i].h, key, sizeof(key));
		gc_event(&g, (struct dcr_gc_event){ .what = DCR_GC_DELETE_PACK, .key = key,
				.size = ix->packs[i].size,
				.orphan = ps[i] == (P_ORPHAN | P_GO) });
		if ((ret = gc_del(&g, key)))
			goto err_free;
		r->packs++;
		r->freed += ix->packs[i].size;
		dcr_pg_report(pg, r->packs == npk_go ? DCR_PG_LAST : DCR_PG_STEP,
			      "delete packs", r->freed, to_free, NULL);
	}
	dcr_pg_report(pg, DCR_PG_END, "delete packs", r->freed, to_free, NULL);
	if (!young && (ret = gc_layouts(&g, now)))
		goto err_free;
	struct partials pp = { .g = &g, .now = now };
	ret = dcr_store_list_partial(ix->st, partial_cb, &pp);
	if (ret || pp.err) {
		if (ret)
			dcr_err("%s: cannot list incomplete uploads: %s", ix->st->url,
				dcr_strerror(ret));
		ret = ret ? ret : pp.err;
		goto err_free;
	}
	r->aborted = pp.n;
	r->aborted_bytes = pp.bytes;
	r->uploads_kept = pp.kept;
	r->layout_gen = ix->sv.layout.gen + dry_rebase;
	ret = 0;
err_free:
	if (ret)
		dcr_gc_result_free(r);
	free(keep);
	free(by);
	free(ps);
	return ret;
}

void dcr_gc_result_free(struct dcr_gc_result *r)
{
	for (size_t t = 0; t < r->ntags_removed; t++)
		free(r->tags_removed[t]);
	free(r->tags_removed);
	free(r->removed);
	*r = (struct dcr_gc_result){ 0 };
}
