/* SPDX-License-Identifier: MIT */
/*
 * ctl_gc.c - dcrfs-ctl gc: maint/gc.h does it; this prints what it does
 * as it goes (stdout, none with --json) and what it did (see ctl.h,
 * dcrfs-ctl(8)).
 */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "common.h"
#include "ctl.h"
#include "gc.h"
#include "maintjson.h"

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

static void gc_event(void *arg, const struct dcr_gc_event *e)
{
	struct ctl *c = arg;
	const char *would = e->dry_run ? "would " : "";
	char b[32];

	switch (e->what) {
	case DCR_GC_REBASE:
		say(c, "%srebase the kept versions that are built on removed ones:\n", would);
		break;
	case DCR_GC_REWRITE:
		ctl_print_rewrite(c, e->dry_run, e->v, e->old_base, e->new_base, e->depth);
		break;
	case DCR_GC_UNTAG:
		say(c, "%sremove tag %s (version %" PRIu64 ")\n", would, e->key, e->v);
		break;
	case DCR_GC_KEEP_CHAIN:
		say(c, "keep version %" PRIu64 ": the chain of version %" PRIu64
		       " needs it\n", e->v, e->by);
		break;
	case DCR_GC_REMOVE:
		say(c, "%sremove version %" PRIu64 "\n", would, e->v);
		break;
	case DCR_GC_FORGET:
		say(c, "%spublish layout generation %" PRIu64 ", which no longer names the "
		       "removed versions\n", would, e->gen);
		break;
	case DCR_GC_DELETE_PACK:
		say(c, "%sdelete %s (%s%s)\n", would, e->key,
		    dcr_format_size(e->size, b, sizeof(b)),
		    e->orphan ? ", named by no manifest" : "");
		break;
	case DCR_GC_DELETE_STALE:
		say(c, "%sdelete %s (replaced by layout generation %" PRIu64 ")\n", would,
		    e->key, e->gen);
		break;
	case DCR_GC_ABORT_UPLOAD:
		say(c, "%sabort incomplete upload %s%s%s\n", would, e->key,
		    e->size ? ", " : "", e->size ? dcr_format_size(e->size, b, sizeof(b)) : "");
		break;
	}
}

int cmd_gc(struct ctl *c, const struct args *a)
{
	struct dcr_gc_opts o = {
		.keep_last = a->keep_last, .keep_tagged = a->keep_tagged,
		.keep_newer = a->keep_newer, .grace = a->grace, .dry_run = a->dry_run,
		.max_depth = a->max_depth, .read_cost = a->read_cost, .event = gc_event, .arg = c,
		.pg = { .fn = ctl_progress, .arg = c },
	};
	const char *dry = a->dry_run ? "dry run: " : "";
	struct dcr_gc_result r;
	char b1[32], b2[32];

	if (dcr_gc(&c->ix, &o, &r))
		return EXIT_FAIL;
	if (c->json)
		dcr_gc_json(stdout, &r);
	else if (!a->quiet) {
		dcr_info("%s%zu versions kept (%zu only for the chains of kept versions), "
			 "%zu removed; %zu packs deleted (%s)", dry, r.kept, r.chain,
			 r.nremoved, r.packs, dcr_format_size(r.freed, b1, sizeof(b1)));
		if (r.aborted)
			dcr_info("%s%zu incomplete uploads aborted (%s)", dry, r.aborted,
				 dcr_format_size(r.aborted_bytes, b2, sizeof(b2)));
	}
	if (r.prev && !a->quiet && !c->json)
		dcr_info("%s%zu packs (%s) that the previous layout builds kept versions on "
			 "were kept: layout generation %" PRIu64 " is younger than the grace "
			 "period (%" PRIu64 " s), and mounts may still read the one before it; "
			 "a later gc collects them", dry, r.prev,
			 dcr_format_size(r.prev_bytes, b2, sizeof(b2)), r.layout_gen, a->grace);
	if ((r.orphans || r.uploads_kept) && !a->quiet && !c->json)
		dcr_info("%zu packs (%s) named by no manifest and %zu incomplete uploads "
			 "were kept: younger than the grace period (%" PRIu64 " s), a commit "
			 "may still be publishing them", r.orphans,
			 dcr_format_size(r.orphan_bytes, b2, sizeof(b2)), r.uploads_kept,
			 a->grace);
	if (r.commits_running && !a->quiet && !c->json)
		dcr_info("%zu commits are running (%s in the store): packs named by no "
			 "manifest that were written since the oldest of them began "
			 "were kept, whatever their age", r.commits_running,
			 DCR_INTENT_PREFIX);
	dcr_gc_result_free(&r);
	return 0;
}
