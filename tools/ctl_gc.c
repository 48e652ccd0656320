/* SPDX-License-Identifier: MIT */
/*
 * ctl_gc.c - dcrfs-ctl gc: retention, then every object no kept version
 * needs, orphans and incomplete uploads past the grace period (see
 * ctl.h, dcrfs-ctl(8)).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chunk.h"
#include "common.h"
#include "ctl.h"
#include "frame.h"
#include "hash.h"
#include "json.h"
#include "manifest.h"
#include "reader.h"

/* -------------------------------------------------------------------- gc */

/* A line of what gc does, on stdout; none with --json (one object at the
 * end says it all). */
static void DCR_PRINTF(2, 3) say(struct ctl *c, const char *fmt, ...)
{
	va_list ap;

	if (c->json)
		return;
	progress_clear(&c->pg);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
}

enum keep_why { KEEP_NOT = 0, KEEP_LAST, KEEP_TAGGED, KEEP_NEWER, KEEP_CHAIN };

/* Mark the packs of @m in @ps (parallel to c->packs) with at least @mark. */
static void mark_packs(const struct ctl *c, const struct dcr_manifest *m,
		       uint8_t *ps, uint8_t mark)
{
	for (uint32_t i = 0; i < m->npacks; i++) {
		const struct pack *p = pack_find(c, m->packs[i]);
		if (p && ps[p - c->packs] < mark)
			ps[p - c->packs] = mark;
	}
}

static int gc_del(struct ctl *c, const char *key, int dry_run)
{
	int ret = dry_run ? 0 : dcr_store_del(c->st, key);

	if (ret && ret != -ENOENT) {
		dcr_err("%s: cannot delete %s: %s", c->st->url, key, dcr_strerror(ret));
		return ret;
	}
	return 0;
}

/* Times before this are not believed (see gc_time_floor). */
static int64_t time_floor;

/*
 * An object of the store cannot be older than the store: a time before
 * its creation (less an hour for clocks that disagree) is a server's
 * placeholder (moto reports every multipart upload as started in 2010),
 * and the object's age counts as unknown.
 */
static void gc_time_floor(struct ctl *c)
{
	if (c->info.created_ns)
		time_floor = c->info.created_ns - (int64_t)3600 * 1000000000;
}

/* Is an object last written at @mtime_ns (0: unknown) past the grace? */
static bool past_grace(const struct args *a, int64_t now, int64_t mtime_ns)
{
	if (!a->grace)
		return true;
	/* a time in the future (clocks that disagree) is young */
	return mtime_ns > 0 && mtime_ns >= time_floor && now > mtime_ns &&
	       (uint64_t)(now - mtime_ns) / 1000000000 >= a->grace;
}

/*
 * Is the newest layout younger than the grace (what it replaced stays)?
 * @would_publish: a dry run of a rebase, which would publish one now.
 */
static bool layout_young(const struct ctl *c, const struct args *a, int64_t now,
			 bool would_publish)
{
	if (would_publish)
		return a->grace != 0;
	return c->layout.gen && !past_grace(a, now, c->layout.ctime_ns);
}

struct recheck {
	struct ctl *c;
	uint64_t vmax;     /* the newest version of the first listing */
	uint64_t gen;      /* the newest layout generation listed now */
	uint64_t *vs;      /* published since */
	size_t n, cap;
};

static int recheck_pack_cb(const char *key, const struct dcr_obj_info *info, void *arg)
{
	struct recheck *rc = arg;
	uint8_t h[DCR_HASH_LEN];

	if (pack_key_hash(key, h))
		return 0;
	struct pack *p = (struct pack *)pack_find(rc->c, h);
	if (p && info->mtime_ns > p->mtime_ns)
		p->mtime_ns = info->mtime_ns; /* written again since */
	return 0;
}

static int recheck_version_cb(const char *key, const struct dcr_obj_info *info, void *arg)
{
	struct recheck *rc = arg;
	uint64_t v;

	(void)info;
	if (dcr_version_from_key(key, &v) || v <= rc->vmax)
		return 0;
	if (dcr_array_grow(&rc->vs, sizeof(*rc->vs), rc->n, &rc->cap))
		return -ENOMEM;
	rc->vs[rc->n++] = v;
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
 */
static int gc_recheck(struct ctl *c, uint8_t *ps, uint8_t kept)
{
	struct recheck rc = { .c = c, .vmax = c->nvs ? c->vs[c->nvs - 1].v : 0 };
	int ret;

	if ((ret = dcr_store_list(c->st, "packs/", recheck_pack_cb, &rc)) ||
	    (ret = dcr_store_list(c->st, "versions/", recheck_version_cb, &rc)) ||
	    ((ret = dcr_store_list(c->st, "layouts/", recheck_layout_cb, &rc)) &&
	     ret != -ENOENT))
		goto err_log;
	if (rc.gen > DCR_MAX(c->layout.gen, c->layout.top)) {
		dcr_err("%s: layout generation %" PRIu64 " was published during gc (a "
			"compaction): no pack deleted; run gc again", c->st->url, rc.gen);
		free(rc.vs);
		return DCR_ERR(-EAGAIN);
	}
	for (size_t i = 0; i < rc.n; i++) {
		struct dcr_manifest m;
		ret = dcr_store_get_manifest(c->st, rc.vs[i], &m);
		if (ret == -ENOENT)
			continue;
		if (ret)
			goto err_log;
		dcr_debug("version %" PRIu64 " was published during gc: its packs stay", rc.vs[i]);
		mark_packs(c, &m, ps, kept);
		dcr_manifest_free(&m);
	}
	free(rc.vs);
	return 0;
err_log:
	dcr_err("%s: cannot check the store again before collecting orphans: %s",
		c->st->url, dcr_strerror(ret));
	free(rc.vs);
	return ret;
}

struct partials {
	struct ctl *c;
	const struct args *a;
	int64_t now;
	size_t n, kept;
	uint64_t bytes;
	int err;
};

static int partial_cb(const char *key, const struct dcr_obj_info *info, void *arg)
{
	struct partials *pp = arg;
	char b[32];

	if (!past_grace(pp->a, pp->now, info->mtime_ns)) {
		pp->kept++;
		return 0;
	}
	say(pp->c, "%sabort incomplete upload %s%s%s\n", pp->a->dry_run ? "would " : "", key,
	       info->size ? ", " : "", info->size ? dcr_format_size(info->size, b, sizeof(b)) : "");
	int ret = pp->a->dry_run ? 0 : dcr_store_abort_partial(pp->c->st, key, info->upload);
	if (ret && ret != -ENOENT) {
		dcr_err("%s: cannot abort the incomplete upload %s: %s", pp->c->st->url, key,
			dcr_strerror(ret));
		pp->err = ret;
		return 0; /* the others may still go */
	}
	pp->n++;
	pp->bytes += info->size;
	return 0;
}

/*
 * If a version @keep names is built on one it does not (its chain
 * reaches into removed versions), compact the kept versions: the oldest
 * of each lineage becomes an anchor, the others skip-deltas on kept
 * versions. The new layout is published before anything is deleted, and
 * keeps the entries of the removed versions, which stay readable as
 * they are encoded now until their manifests go. 1 if it did (or, dry
 * run, would), 0 if nothing needed it, -1 on failure (logged: nothing
 * removed).
 */
static int gc_rebase(struct ctl *c, const struct args *a, const uint8_t *keep)
{
	uint64_t *kv = calloc(c->nvs ? c->nvs : 1, sizeof(*kv));
	struct dcr_compact_stats s;
	size_t nk = 0;
	int need = 0;

	if (!kv)
		return -1;
	for (size_t i = 0; i < c->nvs; i++) {
		if (!keep[i])
			continue;
		kv[nk++] = c->vs[i].v;
		const struct dcr_manifest *m = ver_manifest(c, &c->vs[i]);
		if (!m) {
			dcr_err("%s: cannot read the manifest of version %" PRIu64
				", which is kept: nothing removed", c->st->url, c->vs[i].v);
			free(kv);
			return -1;
		}
		struct ver *p = m->parent && dcr_manifest_needs_parent(m) ?
			ver_find(c, m->parent) : NULL;
		need |= p && !keep[p - c->vs];
	}
	if (need) {
		say(c, "%srebase the kept versions that are built on removed ones:\n",
		       a->dry_run ? "would " : "");
		if (ctl_compact(c, a, kv, nk, &s)) {
			dcr_err("%s: rebasing the kept versions failed: nothing removed",
				c->st->url);
			free(kv);
			return -1;
		}
	}
	free(kv);
	return need;
}

/*
 * After the removed versions' manifests are gone: if the layout still
 * names versions that are not kept (the rebase kept their entries so
 * that they stayed readable until deleted; or a killed gc's), publish a
 * generation without them, and make it @c's layout. 0, or -errno
 * (logged).
 */
static int gc_forget(struct ctl *c, const struct args *a, const uint8_t *keep)
{
	const struct dcr_layout *l = &c->layout;
	struct dcr_layout nl = { .gen = DCR_MAX(l->gen, l->top) + 1 };
	uint64_t bytes;
	int ret;

	if (!l->gen)
		return 0;
	if (!(nl.e = calloc(l->n ? l->n : 1, sizeof(*nl.e))))
		return DCR_ERR(-ENOMEM);
	for (size_t i = 0; i < l->n; i++) {
		struct ver *x = ver_find(c, l->e[i].version);
		if (x && keep[x - c->vs])
			nl.e[nl.n++] = l->e[i];
	}
	if (nl.n == l->n) {
		free(nl.e);
		return 0;
	}
	say(c, "%spublish layout generation %" PRIu64 ", which no longer names the "
	       "removed versions\n", a->dry_run ? "would " : "", nl.gen);
	if (a->dry_run) {
		free(nl.e);
		return 0;
	}
	nl.ctime_ns = dcr_now_ns();
	if ((ret = dcr_store_put_layout(c->st, &nl, &bytes))) {
		free(nl.e);
		return ret;
	}
	nl.top = nl.gen;
	dcr_layout_free(&c->layout);
	c->layout = nl;
	return 0;
}

struct stale {
	struct ctl *c;
	const struct args *a;
	int64_t now;
	int err;
};

/* manifests/<h> the newest layout does not name, older layouts/<g>. */
static int stale_cb(const char *key, const struct dcr_obj_info *info, void *arg)
{
	struct stale *st = arg;
	const struct dcr_layout *l = &st->c->layout;
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
		if (named || !past_grace(st->a, st->now, info->mtime_ns))
			return 0;
	} else {
		return 0;
	}
	say(st->c, "%sdelete %s (replaced by layout generation %" PRIu64 ")\n",
	       st->a->dry_run ? "would " : "", key, l->gen);
	if (gc_del(st->c, key, st->a->dry_run))
		st->err = -EIO;
	return 0;
}

static int gc_layouts(struct ctl *c, const struct args *a, int64_t now)
{
	struct stale st = { .c = c, .a = a, .now = now };
	int ret;

	/* older layouts first: no layout is left naming a deleted manifest */
	if (((ret = dcr_store_list(c->st, "layouts/", stale_cb, &st)) && ret != -ENOENT) ||
	    ((ret = dcr_store_list(c->st, "manifests/", stale_cb, &st)) && ret != -ENOENT)) {
		dcr_err("%s: cannot list the layouts: %s", c->st->url, dcr_strerror(ret));
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
static int gc_keep_previous(struct ctl *c, const uint8_t *keep, uint8_t *ps,
			    uint8_t mark, uint64_t below)
{
	uint8_t *seen = calloc(c->nvs ? c->nvs : 1, 1);
	struct dcr_layout prev;
	int ret;

	if (!seen)
		return DCR_ERR(-ENOMEM);
	/* the newest readable one below (none: the versions as committed) */
	if ((ret = dcr_store_find_layout(c->st, 0, below, NULL, &prev))) {
		dcr_err("%s: cannot read the layout before generation %" PRIu64
			": %s; nothing removed", c->st->url, below, dcr_strerror(ret));
		free(seen);
		return ret;
	}
	for (size_t i = 0; i < c->nvs && !ret; i++) {
		struct ver *x = keep[i] ? &c->vs[i] : NULL;
		while (x && !seen[x - c->vs]) {
			struct dcr_manifest m;
			seen[x - c->vs] = 1;
			ret = dcr_store_get_encoding(c->st, &prev, x->v, &m);
			if (ret == -ENOENT || ret == -EBADMSG) {
				ret = 0; /* logged; no mount reads it that way */
				break;
			}
			if (ret) {
				dcr_err("%s: cannot read version %" PRIu64 " as layout "
					"generation %" PRIu64 " encodes it: %s; nothing "
					"removed", c->st->url, x->v, prev.gen,
					dcr_strerror(ret));
				break;
			}
			mark_packs(c, &m, ps, mark);
			x = m.parent && dcr_manifest_needs_parent(&m) ?
				ver_find(c, m.parent) : NULL;
			dcr_manifest_free(&m);
		}
	}
	dcr_layout_free(&prev);
	free(seen);
	return ret;
}

struct gc_counts {
	size_t kept, chain, packs, orphans, prev, aborted, uploads_kept;
	uint64_t freed, orphan_bytes, prev_bytes, aborted_bytes;
};

/* gc --json: one object, what was (dry run: would be) done. */
static void gc_json(const struct ctl *c, const struct args *a, const uint8_t *keep,
		    int rebased, const struct gc_counts *n)
{
	int first = 1;

	printf("{\"dry_run\": %s, \"rebased\": %s, \"versions_kept\": %zu"
	       ", \"versions_kept_for_chains\": %zu, \"versions_removed\": [",
	       a->dry_run ? "true" : "false", rebased ? "true" : "false", n->kept, n->chain);
	for (size_t i = 0; i < c->nvs; i++)
		if (!keep[i]) {
			printf("%s%" PRIu64, first ? "" : ", ", c->vs[i].v);
			first = 0;
		}
	fputs("], \"tags_removed\": [", stdout);
	first = 1;
	for (size_t t = 0; t < c->ntags; t++) {
		struct ver *x = c->tags[t].v ? ver_find((struct ctl *)c, c->tags[t].v) : NULL;
		if (!x || keep[x - c->vs])
			continue;
		fputs(first ? "" : ", ", stdout);
		dcr_json_str(stdout, c->tags[t].name);
		first = 0;
	}
	printf("], \"packs_deleted\": %zu, \"bytes_freed\": %" PRIu64
	       ", \"orphans_kept\": %zu, \"orphan_bytes_kept\": %" PRIu64
	       ", \"previous_layout_packs_kept\": %zu, \"previous_layout_bytes_kept\": %" PRIu64
	       ", \"uploads_aborted\": %zu, \"upload_bytes_aborted\": %" PRIu64
	       ", \"uploads_kept\": %zu, \"grace_seconds\": %" PRIu64 "}\n",
	       n->packs, n->freed, n->orphans, n->orphan_bytes, n->prev, n->prev_bytes,
	       n->aborted, n->aborted_bytes, n->uploads_kept, a->grace);
}

int cmd_gc(struct ctl *c, const struct args *a)
{
	enum { P_ORPHAN = 0, P_REMOVED = 1, P_PREV = 2, P_KEPT = 3,
	       P_GO = 8 /* flag: deleted below */ };
	uint8_t *keep = calloc(c->nvs ? c->nvs : 1, 1);
	uint64_t *by = calloc(c->nvs ? c->nvs : 1, sizeof(*by));
	uint8_t *ps = calloc(c->npacks ? c->npacks : 1, 1);
	const char *would = a->dry_run ? "would " : "";
	int64_t now = dcr_now_ns();
	int status = EXIT_FAIL;
	char key[160], b1[32], b2[32];


	if (!keep || !by || !ps)
		goto err_free;
	gc_time_floor(c);
	/* the rules */
	progress_start(&c->pg, 0);
	for (size_t i = 0; i < c->nvs; i++) {
		progress_show(&c->pg, "read manifests", i, c->nvs, "versions", NULL, false);
		const struct dcr_manifest *m = ver_manifest(c, &c->vs[i]);
		if (i + a->keep_last >= c->nvs)
			keep[i] = KEEP_LAST;
		else if (m && a->keep_newer &&
			 now - m->ctime_ns < (int64_t)DCR_MIN(a->keep_newer, INT64_MAX / 1000000000) * 1000000000)
			keep[i] = KEEP_NEWER;
	}
	for (size_t t = 0; t < c->ntags && a->keep_tagged; t++) {
		struct ver *x = c->tags[t].v ? ver_find(c, c->tags[t].v) : NULL;
		if (x && !keep[x - c->vs])
			keep[x - c->vs] = KEEP_TAGGED;
	}
	progress_show(&c->pg, "read manifests", c->nvs, c->nvs, "versions", NULL, true);
	progress_clear(&c->pg);
	/* kept versions built on removed ones are rebased (compaction of
	 * the kept versions), and the layout forgets the removed ones */
	int rebased = 0;
	if ((rebased = gc_rebase(c, a, keep)) < 0)
		goto err_free;
	/* what the kept versions' chains need, newest first (after a
	 * rebase, nothing outside the kept versions; a dry run shows the
	 * store as the rebase would leave it) */
	for (size_t i = c->nvs; i-- > 0 && !(rebased && a->dry_run);) {
		const struct dcr_manifest *m = keep[i] ? ver_manifest(c, &c->vs[i]) : NULL;
		if (!keep[i])
			continue;
		if (!m) {
			dcr_err("%s: cannot read the manifest of version %" PRIu64
				", which is kept: nothing removed", c->st->url, c->vs[i].v);
			goto err_free;
		}
		if (!m->parent || !dcr_manifest_needs_parent(m))
			continue;
		struct ver *p = ver_find(c, m->parent);
		if (!p) {
			dcr_warn("version %" PRIu64 " is built on version %" PRIu64
				 ", which is already gone (dcrfs-ctl verify shows what it breaks)",
				 c->vs[i].v, m->parent);
			continue;
		}
		if (!keep[p - c->vs]) {
			keep[p - c->vs] = KEEP_CHAIN;
			by[p - c->vs] = by[i] ? by[i] : c->vs[i].v;
		}
	}
	/* packs: kept, only of removed versions, or named by no manifest */
	size_t nkept = 0, nchain = 0, nrm = 0, npk = 0, norphan = 0, nprev = 0;
	uint64_t freed = 0, orphan_bytes = 0, prev_bytes = 0;
	for (size_t i = 0; i < c->nvs; i++) {
		const struct dcr_manifest *m = ver_manifest(c, &c->vs[i]);
		if (m)
			mark_packs(c, m, ps, keep[i] ? P_KEPT : P_REMOVED);
		nkept += keep[i] != KEEP_NOT;
		nchain += keep[i] == KEEP_CHAIN;
	}
	/* a dry run of a rebase: the layout now is the one before */
	bool dry_rebase = rebased && a->dry_run;
	if (layout_young(c, a, now, dry_rebase) &&
	    gc_keep_previous(c, keep, ps, P_PREV, c->layout.gen + dry_rebase))
		goto err_free;
	/* tags of versions that go, then manifests, then packs: a failure
	 * part way leaves no manifest naming a deleted pack */
	for (size_t t = 0; t < c->ntags; t++) {
		struct ver *x = c->tags[t].v ? ver_find(c, c->tags[t].v) : NULL;
		if (!x || keep[x - c->vs])
			continue;
		say(c, "%sremove tag %s (version %" PRIu64 ")\n", would, c->tags[t].name, x->v);
		int ret = a->dry_run ? 0 : dcr_store_del_tag(c->st, c->tags[t].name);
		if (ret && ret != -ENOENT) {
			dcr_err("%s: cannot remove tag %s: %s", c->st->url, c->tags[t].name,
				dcr_strerror(ret));
			goto err_free;
		}
	}
	/* newest first: a removed version goes only after every version
	 * built on it (newer) that goes too, so whatever prefix of this is
	 * done (gc killed), every version still listed reads; kept ones are
	 * built on kept ones only (rebased above) */
	size_t ngo = 0;
	for (size_t i = 0; i < c->nvs; i++)
		ngo += !keep[i];
	progress_start(&c->pg, 0);
	for (size_t i = c->nvs; i-- > 0;) {
		if (keep[i] == KEEP_CHAIN)
			say(c, "keep version %" PRIu64 ": the chain of version %" PRIu64
			       " needs it\n", c->vs[i].v, by[i]);
		if (keep[i])
			continue;
		say(c, "%sremove version %" PRIu64 "\n", would, c->vs[i].v);
		dcr_version_key(c->vs[i].v, key, sizeof(key));
		if (gc_del(c, key, a->dry_run))
			goto err_free;
		nrm++;
		progress_show(&c->pg, "remove versions", nrm, ngo, "versions", NULL, nrm == ngo);
	}
	progress_clear(&c->pg);
	if (!dry_rebase && gc_forget(c, a, keep))
		goto err_free;
	if (!a->dry_run && gc_recheck(c, ps, P_KEPT))
		goto err_free;
	now = dcr_now_ns();
	/* what a layout replaced stays while mounts may still read it */
	bool young = layout_young(c, a, now, dry_rebase);
	uint64_t to_free = 0;
	size_t npk_go = 0;
	for (size_t i = 0; i < c->npacks; i++) {
		if (ps[i] == P_KEPT)
			continue;
		if (ps[i] == P_PREV) {
			nprev++;
			prev_bytes += c->packs[i].size;
			continue;
		}
		if (ps[i] == P_ORPHAN && (young ||
					  !past_grace(a, now, c->packs[i].mtime_ns))) {
			norphan++;
			orphan_bytes += c->packs[i].size;
			continue;
		}
		ps[i] |= P_GO;
		npk_go++;
		to_free += c->packs[i].size;
	}
	/* then delete them, with their progress */
	progress_start(&c->pg, 0);
	for (size_t i = 0; i < c->npacks; i++) {
		if (!(ps[i] & P_GO))
			continue;
		dcr_pack_key(c->packs[i].h, key, sizeof(key));
		say(c, "%sdelete %s (%s%s)\n", would, key,
		       dcr_format_size(c->packs[i].size, b1, sizeof(b1)),
		       ps[i] == (P_ORPHAN | P_GO) ? ", named by no manifest" : "");
		if (gc_del(c, key, a->dry_run))
			goto err_free;
		npk++;
		freed += c->packs[i].size;
		progress_show(&c->pg, "delete packs", freed, to_free, NULL, NULL,
			      npk == npk_go);
	}
	progress_clear(&c->pg);
	if (!young && gc_layouts(c, a, now))
		goto err_free;
	struct partials pp = { .c = c, .a = a, .now = now };
	int ret = dcr_store_list_partial(c->st, partial_cb, &pp);
	if (ret || pp.err) {
		if (ret)
			dcr_err("%s: cannot list incomplete uploads: %s", c->st->url,
				dcr_strerror(ret));
		goto err_free;
	}
	if (c->json)
		gc_json(c, a, keep, rebased, &(struct gc_counts){
			.kept = nkept, .chain = nchain, .packs = npk, .freed = freed,
			.orphans = norphan, .orphan_bytes = orphan_bytes, .prev = nprev,
			.prev_bytes = prev_bytes, .aborted = pp.n, .aborted_bytes = pp.bytes,
			.uploads_kept = pp.kept });
	else if (!a->quiet) {
		dcr_info("%s%zu versions kept (%zu only for the chains of kept versions), "
			 "%zu removed; %zu packs deleted (%s)", a->dry_run ? "dry run: " : "",
			 nkept, nchain, nrm, npk, dcr_format_size(freed, b1, sizeof(b1)));
		if (pp.n)
			dcr_info("%s%zu incomplete uploads aborted (%s)",
				 a->dry_run ? "dry run: " : "", pp.n,
				 dcr_format_size(pp.bytes, b2, sizeof(b2)));
	}
	if (nprev && !a->quiet && !c->json)
		dcr_info("%s%zu packs (%s) that the previous layout builds kept versions on "
			 "were kept: layout generation %" PRIu64 " is younger than the grace "
			 "period (%" PRIu64 " s), and mounts may still read the one before it; "
			 "a later gc collects them", a->dry_run ? "dry run: " : "", nprev,
			 dcr_format_size(prev_bytes, b2, sizeof(b2)),
			 c->layout.gen + dry_rebase, a->grace);
	if ((norphan || pp.kept) && !a->quiet && !c->json)
		dcr_info("%zu packs (%s) named by no manifest and %zu incomplete uploads "
			 "were kept: younger than the grace period (%" PRIu64 " s), a commit "
			 "may still be publishing them", norphan,
			 dcr_format_size(orphan_bytes, b2, sizeof(b2)), pp.kept, a->grace);
	status = 0;
err_free:
	free(keep);
	free(by);
	free(ps);
	return status;
}
