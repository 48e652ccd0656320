/* SPDX-License-Identifier: MIT */
/*
 * ctl_warm.c - dcrfs-ctl warm: fill the cache tiers with the packs of a
 * version before the fleet reads it (see dcrfs-ctl(8), FAN-OUT in
 * dcrfs(8)). Each pack the version's manifest names is asked of the
 * mirror its mounts send it to (dcr_mirror_warm: the same rendezvous
 * order), in aligned pieces of the tier's slice size, a few at a time on
 * a core/wq queue, so every slice is one miss at the tier and the fleet
 * then finds it cached instead of waiting on nginx's cache lock.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "json.h"
#include "mirror.h"
#include "wq.h"
#include "ctl.h"

#define WARM_KEY_MAX (sizeof("packs/") + DCR_HASH_HEX_LEN)

struct wpack {
	char key[WARM_KEY_MAX];
	uint64_t size;
	bool failed;       /* one line logged for it already */
};

struct piece {
	uint32_t pack;
	uint64_t off, len;
};

struct warm {
	struct ctl *c;
	struct wpack *packs;
	struct piece *pieces;
	size_t npieces;
	uint64_t total;
	pthread_mutex_t lock; /* the counters below, the progress line */
	uint64_t done;
	uint64_t failed;   /* pieces */
};

/* One piece: GET it through its mirror; count it; log a pack's first
 * failure. */
static void warm_piece(void *arg, size_t i)
{
	struct warm *w = arg;
	const struct piece *p = &w->pieces[i];
	struct wpack *pk = &w->packs[p->pack];
	struct dcr_buf b;
	const char *url = "?";
	int ret;

	dcr_buf_init(&b, (size_t)p->len);
	ret = dcr_mirror_warm(w->c->ix.st, pk->key, p->off, p->len, &b, &url);
	dcr_buf_free(&b);
	pthread_mutex_lock(&w->lock);
	if (ret) {
		w->failed++;
		if (!pk->failed)
			dcr_err("%s: warming bytes %" PRIu64 "+%" PRIu64
				" through mirror %s failed: %s", pk->key, p->off,
				p->len, url, dcr_strerror(ret));
		pk->failed = true;
	} else {
		w->done += p->len;
	}
	progress_show(&w->c->pg, "warm", w->done, w->total, NULL, NULL, false);
	pthread_mutex_unlock(&w->lock);
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

/* The packs of @m (sizes from the store's listing) and their pieces
 * into @w: 0, -ENOENT (a pack is not listed; logged) or -ENOMEM. */
static int plan(struct warm *w, const struct dcr_manifest *m, uint64_t v,
		uint64_t slice)
{
	size_t cap = 0;

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
		for (uint64_t off = 0; off < p->size; off += slice) {
			if (dcr_array_grow(&w->pieces, sizeof(*w->pieces), w->npieces, &cap))
				return DCR_ERR(-ENOMEM);
			w->pieces[w->npieces++] = (struct piece){
				.pack = i, .off = off, .len = DCR_MIN(slice, p->size - off) };
		}
	}
	return 0;
}

static void report(const struct warm *w, const struct dcr_manifest *m,
		   uint64_t v, double secs)
{
	struct dcr_mirror_stats s;
	char b[2][32];

	if (dcr_mirror_get_stats(w->c->ix.st, &s))
		s.n = 0;
	if (!w->c->json) {
		dcr_info("version %" PRIu64 ": %s of %s in %" PRIu32 " packs through %zu "
			 "mirror%s in %.1f s (%s/s)%s", v,
			 dcr_format_size(w->done, b[0], sizeof(b[0])),
			 dcr_format_size(w->total, b[1], sizeof(b[1])), m->npacks,
			 s.n ? s.n - 1 : 0, s.n == 2 ? "" : "s", secs,
			 dcr_format_size(secs > 0 ? (uint64_t)(w->done / secs) : w->done,
					 b[0], sizeof(b[0])),
			 w->failed ? "; some pieces failed (above)" : "");
		return;
	}
	printf("{\"version\": %" PRIu64 ", \"packs\": %" PRIu32 ", \"bytes\": %" PRIu64
	       ", \"bytes_warmed\": %" PRIu64 ", \"pieces\": %zu, \"failed\": %" PRIu64
	       ", \"seconds\": %.3f, \"mirrors\": [", v, m->npacks, w->total, w->done,
	       w->npieces, w->failed, secs);
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
	struct dcr_store *ms;
	struct dcr_wq *q = NULL;
	struct dcr_ix_ver *x;
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
	pthread_mutex_init(&w.lock, NULL);
	if (plan(&w, m, x->v, a->slice))
		goto out_plan;
	struct dcr_wq_opts qo = { .name = "warm", .threads = DCR_MAX(a->jobs - 1, 1),
				  .max_items = 1 };
	if (a->jobs > 1 && (ret = dcr_wq_create(&qo, &q))) {
		dcr_err("warm: cannot make its work queue: %s", dcr_strerror(ret));
		goto out_plan;
	}
	t0 = dcr_mono_ns();
	progress_start(&c->pg, 0);
	dcr_wq_par_for(q, a->jobs, w.npieces, warm_piece, &w);
	dcr_wq_free(q);
	progress_show(&c->pg, "warm", w.done, w.total, NULL, NULL, true);
	progress_clear(&c->pg);
	report(&w, m, x->v, (double)(dcr_mono_ns() - t0) / 1e9);
	status = w.failed ? EXIT_FAIL : 0;
out_plan:
	pthread_mutex_destroy(&w.lock);
	free(w.pieces);
	free(w.packs);
out_list:
	free(list);
	return status;
}
