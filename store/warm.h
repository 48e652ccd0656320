/* SPDX-License-Identifier: MIT */
/*
 * warm.h - filling the cache tiers with packs before the fleet reads
 * them (FAN-OUT in dcrfs(8)). One mechanism, two users:
 *
 * - dcr_warm_packs: GET each pack through the mirror its mounts send it
 *   to (dcr_mirror_warm, the same rendezvous order), in aligned pieces
 *   of the tier's slice size, a few at a time on a core/wq queue, so
 *   every slice is one miss at the tier and the fleet then finds it
 *   cached instead of waiting on nginx's cache lock (dcrfs-ctl warm).
 * - dcr_warm_publisher_open: a store wrapper for a committer that does
 *   the same with the packs a commit uploaded, right before it publishes
 *   the version (dcrfs-commit --warm-mirror), so mounts with
 *   prefetch=latest find the tiers warm the moment the version appears.
 */
#ifndef DCR_WARM_H
#define DCR_WARM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash.h"
#include "mirror.h"
#include "store.h"

/* "packs/" + the hex SHA-256 + NUL, and room */
/* Warm GETs in flight when not told (dcrfs-ctl warm --jobs, dcrfs-commit
 * --warm-mirror): requests to the tiers, bound by the network, not a
 * CPU pool. */
#define DCR_WARM_JOBS_DEFAULT 8

#define DCR_WARM_KEY_MAX (sizeof("packs/") + DCR_HASH_HEX_LEN + 8)

/** One pack to warm: its key (packs/<sha256>) and its size in bytes. */
struct dcr_warm_pack {
	char key[DCR_WARM_KEY_MAX];
	uint64_t size;
};

/**
 * struct dcr_warm_opts - how dcr_warm_packs goes.
 * @slice: bytes per GET, the tier's slice size (the pieces are aligned
 *	to it); 0: 1 MiB.
 * @jobs: GETs at once (at most 1 + the queue's workers); 0 or 1: one at
 *	a time on the calling thread.
 * @timeout_ns: the whole warm's bound (0: none): a piece not started by
 *	then is skipped, one in flight stops at it (each is also bounded by
 *	its mirror's share of s3_timeout, see mirror.h).
 * @give_up: a mirror whose GET failed is asked nothing more in this warm
 *	(its pieces left are skipped and counted failed), so a tier that is
 *	down or stalled costs about one request's bound, not one per piece.
 * @quiet: log nothing; the first failure is in the result (the caller
 *	logs it). Else the first failure of each pack is logged, naming the
 *	pack, the range and the mirror.
 * @progress: if not NULL, called after each piece with the bytes warmed
 *	and the total, one call at a time (under the warm's lock).
 */
struct dcr_warm_opts {
	uint64_t slice;
	int jobs;
	int64_t timeout_ns;
	bool give_up;
	bool quiet;
	void (*progress)(void *arg, uint64_t done, uint64_t total);
	void *progress_arg;
};

/**
 * struct dcr_warm_result - what a warm did: @bytes asked for (the packs'
 * sizes), @bytes_warmed, @pieces (GETs planned), @failed (pieces that
 * failed or were skipped); the first failure: @fail_err (0: none; its
 * -errno), @fail_key, @fail_off and @fail_url (the mirror's URL, valid
 * while the store is open; NULL when no mirror was asked: the bound had
 * passed).
 */
struct dcr_warm_result {
	uint64_t bytes, bytes_warmed;
	size_t pieces;
	uint64_t failed;
	int fail_err;
	char fail_key[DCR_WARM_KEY_MAX];
	uint64_t fail_off;
	const char *fail_url;
};

/**
 * dcr_warm_packs - GET the @n packs @packs through the mirrors of the
 * mirrored store @st (dcr_mirror_open), never from the store, as @o says
 * (NULL: the defaults), and fill *@res. Thread-safe as the store is.
 * Returns 0 when every byte was warmed; -EOPNOTSUPP (@st not mirrored),
 * -ENOMEM, or the first failure's -errno (-ETIMEDOUT: the bound passed)
 * with *@res saying how far it got.
 */
int dcr_warm_packs(struct dcr_store *st, const struct dcr_warm_pack *packs,
		   size_t n, const struct dcr_warm_opts *o,
		   struct dcr_warm_result *res);

/**
 * dcr_warm_publisher_open - wrap @origin (an s3:// store opened with
 * @cfg) for a committer: every operation goes to @origin, GETs too; the
 * packs/ objects put through it are remembered, and the put of a
 * versions/ key (a commit publishing) first warms the packs put since
 * the last such put through the mirrors in @list (as dcr_mirror_open
 * takes it), with dcr_warm_packs as @o says (give_up and quiet are
 * forced on). A warm that fails or passes its bound logs one line
 * (naming the mirror, the pack and the cause, and how much was warmed)
 * and the put goes on: it never fails nor holds the publish past
 * @o->timeout_ns plus one mirror request's bound. A warm that
 * succeeds logs one line at info level. On success *@out owns @origin
 * (closing *@out closes it); on failure @origin stays the caller's.
 * Returns 0, -EINVAL (as dcr_mirror_open; logged) or -ENOMEM.
 */
int dcr_warm_publisher_open(struct dcr_store *origin, const char *list,
			    const struct dcr_store_cfg *cfg,
			    const struct dcr_warm_opts *o,
			    struct dcr_store **out);

#endif /* DCR_WARM_H */
