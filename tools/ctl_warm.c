/* SPDX-License-Identifier: MIT */
/*
 * ctl_warm.c - dcrfs-ctl warm: fill the cache tiers with the packs of a
 * version before the fleet reads it (see dcrfs-ctl(8), FAN-OUT in
 * dcrfs(8)): the packs the version's manifest names, with their sizes
 * from the store's listing, to dcr_warm_packs (store/warm.h), which asks
 * each of the mirror its mounts send it to in aligned slices, the
 * mechanism dcrfs-commit --warm-mirror uses too.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "json.h"
#include "warm.h"
#include "ctl.h"

struct warm {
	struct ctl *c;
	struct dcr_warm_pack *packs;
	uint64_t total;
};

/* The warm's progress (called one at a time). */
static void on_progress(void *arg, uint64_t done, uint64_t total)
{
	struct warm *w = arg;

	progress_show(&w->c->pg, "warm", done, total, NULL, NULL, false);
}

/* The mirrors of the command line, or $DCRFS_MIRROR (parse_args saw
 * one or the other), as one list (a new string) into *@out: 0 or
 * -ENOMEM. */
static int mirror_list(const struct args *a, char **out)
{
	size_t n = 1;
	char *s;

	if (!a->nmirrors)
		return (*out = strdup(getenv("DCRFS_MIRROR"))) ? 0 : DCR_ERR(-ENOMEM);
	for (int i = 0; i < a->nmirrors; i++)
		n += strlen(a->mirror[i]) + 1;
	if (!(s = malloc(n)))
		return DCR_ERR(-ENOMEM);
	s[0] = 0;
	for (int i = 0; i < a->nmirrors; i++) {
		if (i)
			strcat(s, ",");
		strcat(s, a->mirror[i]);
	}
	*out = s;
	return 0;
}

/* The packs of @m (sizes from the store's listing) into @w: 0, -ENOENT
 * (a pack is not listed; logged) or -ENOMEM. */
static int plan(struct warm *w, const struct dcr_manifest *m, uint64_t v)
{
	if (m->npacks && !(w->packs = calloc(m->npacks, sizeof(*w->packs))))
		return DCR_ERR(-ENOMEM);
	for (uint32_t i = 0; i < m->npacks; i++) {
		const struct dcr_ix_pack *p = dcr_index_pack(&w->c->ix, m->packs[i]);

		dcr_pack_key(m->packs[i], w->packs[i].key, sizeof(w->packs[i].key));
		if (!p) {
			dcr_err("%s: %s of version %" PRIu64 " is not in the store",
				w->c->ix.st->url, w->packs[i].key, v);
			return -ENOENT;
		}
		w->packs[i].size = p->size;
		w->total += p->size;
	}
	return 0;
}

static void report(const struct warm *w, const struct dcr_warm_result *r,
		   const struct dcr_manifest *m, uint64_t v, double secs)
{
	struct dcr_mirror_stats s;
	char b[2][32];

	if (dcr_mirror_get_stats(w->c->ix.st, &s))
		s.n = 0;
	if (!w->c->json) {
		dcr_info("version %" PRIu64 ": %s of %s in %" PRIu32 " packs through %zu "
			 "mirror%s in %.1f s (%s/s)%s", v,
			 dcr_format_size(r->bytes_warmed, b[0], sizeof(b[0])),
			 dcr_format_size(w->total, b[1], sizeof(b[1])), m->npacks,
			 s.n ? s.n - 1 : 0, s.n == 2 ? "" : "s", secs,
			 dcr_format_size(secs > 0 ? (uint64_t)(r->bytes_warmed / secs) :
					 r->bytes_warmed, b[0], sizeof(b[0])),
			 r->failed ? "; some pieces failed (above)" : "");
		return;
	}
	printf("{\"version\": %" PRIu64 ", \"packs\": %" PRIu32 ", \"bytes\": %" PRIu64
	       ", \"bytes_warmed\": %" PRIu64 ", \"pieces\": %zu, \"failed\": %" PRIu64
	       ", \"seconds\": %.3f, \"mirrors\": [", v, m->npacks, w->total,
	       r->bytes_warmed, r->pieces, r->failed, secs);
	for (size_t i = 1; i < s.n; i++) {
		printf("%s{\"url\": ", i > 1 ? ", " : "");
		dcr_json_str(stdout, s.src[i].url);
		printf(", \"requests\": %" PRIu64 ", \"bytes\": %" PRIu64
		       ", \"errors\": %" PRIu64 "}", s.src[i].requests, s.src[i].bytes,
		       s.src[i].errors);
	}
	printf("]}\n");
}

int cmd_warm(struct ctl *c, const struct args *a, const struct dcr_store_cfg *cfg,
	     struct dcr_store **stp)
{
	struct warm w = { .c = c };
	struct dcr_warm_opts o = { .slice = a->slice, .jobs = a->jobs,
				   .progress = on_progress, .progress_arg = &w };
	struct dcr_warm_result r;
	struct dcr_store *ms;
	struct dcr_sview_ver *x;
	const struct dcr_manifest *m;
	char *list = NULL;
	int64_t t0;
	int status = EXIT_FAIL, ret;

	if (mirror_list(a, &list)) {
		dcr_err("warm: out of memory");
		return EXIT_FAIL;
	}
	if (!(x = dcr_index_resolve(&c->ix, a->npos ? a->pos[0] : "latest")) ||
	    !(m = dcr_index_manifest(&c->ix, x)))
		goto out_list;
	if (dcr_mirror_open(*stp, list, cfg, &ms))
		goto out_list;
	/* It owns the store now: the caller closes it instead. */
	*stp = ms;
	c->ix.st = ms;
	if (plan(&w, m, x->v))
		goto out_plan;
	t0 = dcr_mono_ns();
	progress_start(&c->pg, 0);
	ret = dcr_warm_packs(ms, w.packs, m->npacks, &o, &r);
	progress_show(&c->pg, "warm", r.bytes_warmed, w.total, NULL, NULL, true);
	progress_clear(&c->pg);
	if (ret == -ENOMEM || (ret && !r.pieces))
		goto out_plan; /* logged */
	report(&w, &r, m, x->v, (double)(dcr_mono_ns() - t0) / 1e9);
	status = r.failed ? EXIT_FAIL : 0;
out_plan:
	free(w.packs);
out_list:
	free(list);
	return status;
}
