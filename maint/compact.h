/* SPDX-License-Identifier: MIT */
/*
 * compact.h - re-encode a store's versions so that every kept version
 * materializes from an anchor with at most K frames per chunk, without
 * the trainer uploading anything (DESIGN.md section 7a; layout.h says
 * what is published and how readers find it).
 *
 * The shape: skip-deltas over version numbers. A version v that is not
 * the root of its (kept) lineage is encoded against the ancestor whose
 * number is v with its lowest set bits cleared (SVN's skip-deltas), so
 * a chunk of v is the base chunk plus one frame and depths grow with the
 * number of set bits, not with history; the base is moved further down
 * the encoding chain when that would exceed K. The root of a lineage
 * (no kept ancestor: the first version, or the oldest one gc keeps) is
 * made an anchor: every chunk a full frame; a version that is an anchor
 * already (dcrfs-commit --full) stays one. A version already encoded
 * against its target base is left alone, so compacting again after more
 * commits costs only the new versions, and retention that keeps the
 * oldest kept version stable does not rewrite the rest.
 *
 * Per chunk, a delta on the skip-base or a full frame: skip-deltas over
 * many steps carry most of the elements and cost more to apply than a
 * full frame, so a chunk whose chain (its frames down to the first full
 * one) would cost more than read_cost % of that full frame to fetch and
 * apply, counting what every read costs anyway (frame.h's cost model,
 * computed from the frames' headers: deterministic), is stored as a full
 * frame instead. A version plan() leaves on its base is costed from its
 * frames as they are (fetched, headers read) and re-encoded when one of
 * its chunks reads beyond the bound, so the bound holds on every kept
 * version, or when it holds full frames chosen against a base re-encoded
 * in this run (gc's new anchor: deltas may do now); a dry run does not fetch frames and reports base changes
 * only.
 *
 * Every rewritten chunk is materialized through a reader (verified as
 * any read is), its base chunk too, encoded with the committer's codec
 * (element hints from the safetensors header), and decoded back onto the
 * base and compared before it is packed: nothing is published that does
 * not decode to the committed bytes. XOR frames could be folded without
 * materializing; ADD-mode frames cannot, and re-encoding both the same
 * way keeps one path (the cost is one materialization per rewritten
 * version, against the reader's cache).
 *
 * Publishing: packs (content-addressed), then manifests/<hash> objects,
 * then layouts/<top+1> created only-if-absent (top: the highest
 * generation listed, so a damaged newest one is superseded; the
 * readable one below it is the base). A racing compaction or
 * gc that published the same generation first makes this one fail with
 * -EEXIST (nothing it uploaded is named; gc collects it after the grace
 * period). Nothing is deleted here: gc removes what no layout needs.
 *
 * Chunks are read, encoded and decode-checked on one thread per CPU of
 * the budget (core/cpus.h, through a core/wq pool; 2 chunks each at a
 * time), then packed
 * in order, so the packs and manifests do not depend on the thread count.
 */
#ifndef DCR_COMPACT_H
#define DCR_COMPACT_H

#include <stddef.h>
#include <stdint.h>

#include "layout.h"
#include "objstore.h"
#include "reader.h"
#include "sview.h"

#define DCR_COMPACT_DEPTH_DEFAULT 8
#define DCR_COMPACT_READ_COST_DEFAULT 150
/* The read_cost a caller may ask for: below 100 % not even a full frame
 * would be within it (every version rewritten on every run); 10000 %
 * lets a chain cost 100 times its full frame. */
#define DCR_COMPACT_READ_COST_MIN 100
#define DCR_COMPACT_READ_COST_MAX 10000
/*
 * What every cold read of a chunk costs per raw byte whatever its
 * encoding (checking its XXH3, copying it out through FUSE, caching it),
 * in the units of frame.h's cost model. Counted on both sides of
 * the bound (with one request, DCR_COST_FRAME, per chunk), so the ratio
 * is the one a reader sees; a little under what
 * bench-compact measures (a cold read of an anchor less its frames'
 * fetching, hashing and decoding: ~0.7 ns a byte).
 */
#define DCR_COMPACT_READ_FIXED 6

struct dcr_compact_opts {
	unsigned max_depth;   /* K >= 1 frames per chunk; 0 = default (8) */
	/* Bound on every chunk's modelled cold read, in percent of its
	 * chain's full frame alone (see above); 0 = default (150). */
	unsigned read_cost;
	/* Versions to keep, ascending (gc): the others are left out of the
	 * lineages and of the new layout; NULL = every listed version. */
	const uint64_t *keep;
	size_t nkeep;
	int dry_run;          /* plan and report; upload nothing */
	uint64_t pack_target; /* 0 = 64 MiB; a pack never holds frames of
				 two versions (gc frees whole packs) */
	/* Called once per version considered (may be NULL). */
	void (*report)(void *arg, uint64_t v, uint64_t old_base,
		       uint64_t new_base, unsigned depth, int rewritten);
	void *arg;
	/* Threads encoding (and the scratch reader's, dcr_compact_scratch);
	 * 0 = the CPU budget (core/cpus.h). */
	int threads;
};

struct dcr_compact_stats {
	uint64_t gen;          /* generation published (0: none needed) */
	size_t versions;       /* considered */
	size_t rewritten;
	uint64_t same, delta, full; /* chunks of the rewritten versions */
	uint64_t bytes;        /* packs and manifests written */
	unsigned depth_before, depth_after; /* deepest version, in frames */
};

/**
 * dcr_compact - compact the store of view @sv (sview.h: its versions,
 * their manifests and its layout, fetched once there), materializing
 * through reader @r (a reader of that store, refreshed or seeded from
 * @sv, with a cache large enough for a version and its bases; NULL for
 * a dry run; the caller owns both). Returns 0 and fills @s; -EEXIST if
 * another generation was published meanwhile (run again); other -errno,
 * logged. The view's layout is not reloaded here
 * (dcr_sview_reload_layout).
 */
int dcr_compact(struct dcr_sview *sv, struct dcr_reader *r,
		const struct dcr_compact_opts *o, struct dcr_compact_stats *s);

/* Scratch cache budget of dcr_compact_view. */
#define DCR_COMPACT_SCRATCH_CACHE ((uint64_t)1 << 30)

/**
 * dcr_compact_view - dcr_compact with its reader made here, on a
 * scratch cache in $TMPDIR (or /tmp; DCR_COMPACT_SCRATCH_CACHE at most,
 * removed before it returns), and on @sv (no second listing). For gc,
 * dcrfs-ctl compact. Returns as dcr_compact.
 */
int dcr_compact_view(struct dcr_sview *sv, const struct dcr_compact_opts *o,
		     struct dcr_compact_stats *s);

/**
 * dcr_compact_scratch - dcr_compact_view on a view of @st loaded here.
 * For libdcr. Returns as dcr_compact.
 */
int dcr_compact_scratch(struct dcr_store *st, const struct dcr_compact_opts *o,
			struct dcr_compact_stats *s);

#endif /* DCR_COMPACT_H */
