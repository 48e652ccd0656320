/* SPDX-License-Identifier: MIT */
/*
 * mirror.h - pack GETs through mirrors in front of an S3 store (DESIGN
 * §7b): a store wrapper.
 *
 * A mirror is an HTTP cache in front of the S3 origin that answers the
 * S3 GET of an object (scripts/cache-tier: Debian's nginx with the slice
 * module). The wrapper sends the ranged GETs of packs/ objects - and
 * nothing else - to one mirror, chosen by rendezvous hashing of the key
 * over the mirrors' URLs (so every mount with the same list sends a pack
 * to the same tier node, and the nodes cache disjoint sets); a mirror
 * that is being skipped hands its packs to the next one in the key's
 * order. Everything else (versions/, manifests/, layouts/, tags/, the
 * store marker, every listing, every HEAD and every write) goes to the
 * store, so a mirror can never hide or delay a version.
 *
 * A mirror request is signed as for the store, but for the mirror's
 * host (path-style); the tier forwards it with Host preserved, and the
 * origin checks the signature against that Host (radosgw, MinIO). It is
 * made once, without retries, within its share of the time bound (a
 * third of s3_timeout, and at most half of what is left of the calling
 * read's deadline). When it fails - refused connection, 5xx, 403, a
 * stall, a short reply - the request goes to the store at once, and the
 * mirror is skipped for 1 s, then 2, 4 ... up to 30 s between probes;
 * one line is logged when the incident starts and one when the mirror
 * answers again. A 404 from a mirror is asked of the store too, without
 * counting as a failure.
 *
 * The wrapper cannot check what a mirror sends (it does not know the
 * frames' hashes): the reader does, and calls dcr_mirror_refetch for the
 * frames of a chunk that fails its proof.
 *
 * Thread-safe, like every store.
 */
#ifndef DCR_MIRROR_H
#define DCR_MIRROR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define DCR_MIRRORS_MAX 16
#define DCR_MIRROR_URL_MAX 256

/**
 * struct dcr_mirror_source - what one source served: the store or one
 * mirror. @requests and @bytes count the GETs it answered and their
 * bytes; @errors the failed requests (a mirror's, each sent to the store
 * then; the store's, returned to the caller); @skipping: a mirror in an
 * incident, being skipped until its next probe.
 */
struct dcr_mirror_source {
	char url[DCR_MIRROR_URL_MAX];
	uint64_t requests, bytes, errors;
	bool skipping;
};

/**
 * struct dcr_mirror_stats - @src[0] is the store, @src[1..n-1] the
 * mirrors in the order given; @refetches counts the frames fetched again
 * from the store after failing their check (dcr_mirror_refetch).
 */
struct dcr_mirror_stats {
	size_t n;
	struct dcr_mirror_source src[1 + DCR_MIRRORS_MAX];
	uint64_t refetches;
};

/**
 * dcr_mirror_open - wrap @origin (an s3:// store opened with @cfg) so its
 * pack GETs go through the mirrors in @list: http(s)://host[:port] URLs
 * separated by commas or white space, at most DCR_MIRRORS_MAX. On
 * success *@out owns @origin (closing *@out closes it) and has the same
 * URL; on failure @origin is untouched and stays the caller's. Returns
 * 0, -EINVAL (a bad or duplicate URL, too many, an empty list, or a
 * store that is not S3; logged) or -ENOMEM. Sends no request.
 */
int dcr_mirror_open(struct dcr_store *origin, const char *list,
		    const struct dcr_store_cfg *cfg, struct dcr_store **out);

/** dcr_store_is_mirrored - whether @st was made by dcr_mirror_open. */
bool dcr_store_is_mirrored(const struct dcr_store *st);

/**
 * dcr_mirror_refetch - bytes [@off, @off+@len) of pack @key failed their
 * check after a GET of the mirrored store @st: count it, back the mirror
 * that served it off as a failing one (logged once per incident, naming
 * the mirror; a probe's answer does not end such an incident, only a
 * quiet 30 s after it), and append the range as
 * the store itself holds it to @out, within @deadline (as the store's
 * get op). Returns as the store's get; -EOPNOTSUPP if @st is not
 * mirrored.
 */
int dcr_mirror_refetch(struct dcr_store *st, const char *key, uint64_t off,
		       uint64_t len, int64_t deadline, struct dcr_buf *out);

/**
 * dcr_mirror_pick - the mirror a mount sends pack @key to (the first of
 * the key's rendezvous order, whatever its incident state): its index in
 * the list given to dcr_mirror_open, its URL into *@url unless NULL (as
 * long as @st is open). -EOPNOTSUPP if @st is not mirrored.
 */
int dcr_mirror_pick(struct dcr_store *st, const char *key, const char **url);

/**
 * dcr_mirror_warm - GET bytes [@off, @off+@len) of pack @key once from
 * the mirror dcr_mirror_pick names, never from the store, appending
 * them to @out: for filling a tier before the fleet reads (store/warm.h).
 * Bounded by the mirror's share of the time bound and by @deadline
 * (CLOCK_MONOTONIC ns; 0: none; one past it fails at once with
 * -ETIMEDOUT). The mirror's URL into *@url unless NULL. Counted in that
 * mirror's stats; starts no incident. Returns 0 with every byte asked
 * for, -EINVAL for a key outside packs/, -EOPNOTSUPP if @st is not
 * mirrored, else the mirror's -errno (-ENODATA for a short answer) with
 * @out as it was.
 */
int dcr_mirror_warm(struct dcr_store *st, const char *key, uint64_t off,
		    uint64_t len, int64_t deadline, struct dcr_buf *out,
		    const char **url);

/**
 * dcr_mirror_get_stats - the per-source counters of the mirrored store
 * @st into @s. -EOPNOTSUPP if @st is not mirrored.
 */
int dcr_mirror_get_stats(struct dcr_store *st, struct dcr_mirror_stats *s);

#endif /* DCR_MIRROR_H */
