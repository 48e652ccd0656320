/* SPDX-License-Identifier: MIT */
/*
 * ctl_compact.c - dcrfs-ctl compact: re-encode the store's versions as
 * skip-deltas of bounded depth (maint/compact.h) and print what it did
 * (see ctl.h, dcrfs-ctl(8)).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"
#include "compact.h"
#include "ctl.h"

struct report {
	const struct args *a;
	struct ctl *c;
	const char *phase; /* of the progress line */
	uint64_t done, total; /* versions */
};

void ctl_print_rewrite(struct ctl *c, int dry_run, uint64_t v, uint64_t old_base,
		       uint64_t new_base, unsigned depth)
{
	char ob[32], nb[32];

	if (c->json)
		return;
	progress_clear(&c->pg);
	snprintf(ob, sizeof(ob), old_base ? "version %" PRIu64 : "nothing", old_base);
	snprintf(nb, sizeof(nb), new_base ? "version %" PRIu64 : "nothing (an anchor)",
		 new_base);
	printf("%s%s version %" PRIu64 ": built on %s, now on %s (at most %u frames per chunk)\n",
	       dry_run ? "would " : "", dry_run ? "rewrite" : "rewrote", v, ob, nb, depth);
	fflush(stdout);
}

static void report(void *arg, uint64_t v, uint64_t old_base, uint64_t new_base,
		   unsigned depth, int rewritten)
{
	struct report *rp = arg;

	rp->done++;
	if (rewritten)
		ctl_print_rewrite(rp->c, rp->a->dry_run, v, old_base, new_base, depth);
	progress_show(&rp->c->pg, rp->phase, rp->done, rp->total, "versions", NULL,
		      rp->done == rp->total);
}

int cmd_compact(struct ctl *c, const struct args *a)
{
	struct dcr_compact_stats s;
	struct report rp = { .a = a, .c = c, .phase = "compact", .total = c->ix.sv.nvs };
	struct dcr_compact_opts o = {
		.max_depth = a->max_depth, .read_cost = a->read_cost, .dry_run = a->dry_run,
		.report = report, .arg = &rp, .threads = a->threads,
	};
	char b[32];

	progress_start(&c->pg, 0);
	progress_show(&c->pg, rp.phase, 0, rp.total, "versions", NULL, false);
	int ret = dcr_compact_view(&c->ix.sv, &o, &s);
	progress_clear(&c->pg);
	if (ret)
		return EXIT_FAIL;
	if (c->json) {
		printf("{\"generation\": %" PRIu64 ", \"dry_run\": %s, \"versions\": %zu"
		       ", \"rewritten\": %zu, \"chunks\": {\"same\": %" PRIu64
		       ", \"delta\": %" PRIu64 ", \"full\": %" PRIu64 "}"
		       ", \"bytes_written\": %" PRIu64 ", \"depth_before\": %u"
		       ", \"depth_after\": %u}\n",
		       s.gen, a->dry_run ? "true" : "false", s.versions, s.rewritten,
		       s.same, s.delta, s.full, s.bytes, s.depth_before, s.depth_after);
	} else if (!a->quiet) {
		if (a->dry_run)
			dcr_info("dry run: %zu of %zu versions would be rewritten; deepest "
				 "version %u frames per chunk now, %u after", s.rewritten,
				 s.versions, s.depth_before, s.depth_after);
		else if (!s.gen)
			dcr_info("nothing to do: every version is at most %u frames per "
				 "chunk deep", s.depth_after);
		else
			dcr_info("layout generation %" PRIu64 " published: %zu of %zu versions "
				 "rewritten (%" PRIu64 " chunks same, %" PRIu64 " delta, %" PRIu64
				 " full; %s written); deepest version %u frames per chunk, "
				 "was %u. dcrfs-ctl gc collects what the old layout used.",
				 s.gen, s.rewritten, s.versions, s.same, s.delta, s.full,
				 dcr_format_size(s.bytes, b, sizeof(b)), s.depth_after,
				 s.depth_before);
	}
	return 0;
}
