/* SPDX-License-Identifier: MIT */
/*
 * gc.h - garbage collection of a store (`dcrfs-ctl gc`, dcrfs-ctl(8)):
 * retention, then every object no kept version needs, orphans and
 * incomplete uploads past the grace period.
 *
 * Retention keeps the newest keep_last versions, the tagged ones (unless
 * told otherwise) and those committed within keep_newer seconds. A kept
 * version built on one that goes is rebased first (compact.h over the
 * kept versions: the oldest of each lineage becomes an anchor), and the
 * new layout is published before anything is deleted; without a rebase,
 * a version a kept one's chain needs is kept too. Then, in this order
 * (a gc killed part way leaves every listed version readable): the tags
 * of removed versions, their manifests (newest first), a layout
 * generation that no longer names them, the packs no kept version needs
 * (orphans, named by no manifest, only past the grace period, after the
 * store is listed again so that a pack a commit uploaded again counts as
 * young; nor one written since the oldest running commit began, whose
 * intent gc honours unless the grace is 0: objstore.h), the manifests
 * and layouts older layouts used, and the
 * incomplete uploads past the grace period. While the newest layout is
 * younger than the grace period, the packs the one before it builds
 * kept versions on stay (mounts may still read it).
 *
 * Works over an index (index.h), which it updates when it publishes a
 * layout; single-threaded; no global state.
 */
#ifndef DCR_GC_H
#define DCR_GC_H

#include <stddef.h>
#include <stdint.h>

#include "index.h"

/** Something gc does (or, dry run, would do), as it does it. */
enum dcr_gc_what {
	DCR_GC_REBASE,     /* the kept versions built on removed ones are
			      rebased (DCR_GC_REWRITE follows per version) */
	DCR_GC_REWRITE,    /* version @v re-encoded: on @old_base, now on
			      @new_base (0: an anchor), @depth frames per
			      chunk at most */
	DCR_GC_UNTAG,      /* tag @key (of version @v) removed */
	DCR_GC_KEEP_CHAIN, /* version @v kept: the chain of version @by needs it */
	DCR_GC_REMOVE,     /* version @v removed */
	DCR_GC_FORGET,     /* layout generation @gen published: it no longer
			      names the removed versions */
	DCR_GC_DELETE_PACK, /* pack @key (@size bytes) deleted; @orphan: it
			       was named by no manifest */
	DCR_GC_DELETE_STALE, /* @key (a manifest or layout) deleted: replaced
				by layout generation @gen */
	DCR_GC_ABORT_UPLOAD, /* the incomplete upload @key (@size bytes, 0:
				unknown) aborted */
};

/** An event of dcr_gc; valid during the callback only. */
struct dcr_gc_event {
	enum dcr_gc_what what;
	int dry_run;
	uint64_t v, by, old_base, new_base, gen, size;
	unsigned depth;
	int orphan;
	const char *key;
};

struct dcr_gc_opts {
	uint64_t keep_last;   /* >= 1: the newest N versions stay */
	int keep_tagged;      /* tagged versions stay */
	uint64_t keep_newer;  /* seconds: versions committed within stay (0: no rule) */
	uint64_t grace;       /* seconds (0: none, collect orphans at once) */
	int dry_run;          /* say what would be done; change nothing */
	unsigned max_depth;   /* the rebase's bound (compact.h; 0: default) */
	unsigned read_cost;   /* the rebase's read-cost bound (compact.h; 0: default) */
	/* Called for each thing done (may be NULL). */
	void (*event)(void *arg, const struct dcr_gc_event *e);
	void *arg;
	/* Progress: phases "read manifests", "rebase", "remove versions"
	 * (versions) and "delete packs" (bytes). */
	struct dcr_pg pg;
};

/** What dcr_gc did (dry run: would do). */
struct dcr_gc_result {
	int dry_run, rebased;
	size_t kept;          /* versions kept */
	size_t chain;         /* of them, only for the chains of kept ones */
	uint64_t *removed;    /* versions removed, ascending */
	size_t nremoved;
	char **tags_removed;  /* by name */
	size_t ntags_removed;
	size_t packs;         /* deleted */
	uint64_t freed;       /* their bytes */
	size_t orphans;       /* kept: named by no manifest, younger than the grace
				 or than the oldest running commit */
	size_t commits_running; /* live commit intents honoured (objstore.h) */
	uint64_t orphan_bytes;
	size_t prev;          /* kept: the previous layout builds kept versions on them */
	uint64_t prev_bytes;
	uint64_t layout_gen;  /* the newest layout generation (of prev) */
	size_t aborted;       /* incomplete uploads aborted */
	uint64_t aborted_bytes;
	size_t uploads_kept;  /* incomplete uploads younger than the grace */
	uint64_t grace;       /* seconds, as given */
};

/**
 * dcr_gc - collect @ix's store by @o (see the top of this file) into @r
 * (free with dcr_gc_result_free). 0, or -errno (logged; -EAGAIN if a
 * compaction published a layout meanwhile: nothing was deleted, run it
 * again; -EINVAL for keep_last 0). On failure @r is empty and what was
 * done is what the events said.
 */
int dcr_gc(struct dcr_index *ix, const struct dcr_gc_opts *o,
	   struct dcr_gc_result *r);

/** dcr_gc_result_free - free what @r holds (it stays empty). */
void dcr_gc_result_free(struct dcr_gc_result *r);

#endif /* DCR_GC_H */
