/* SPDX-License-Identifier: MIT */
/*
 * packw.h - the one pack writer: commit (commit/commit.c) and compaction
 * (maint/compact.c) both put their frames in packs through it.
 *
 * The caller encodes and decode-checks each frame, then appends it here
 * in the order the packs are to hold them (one appender at a time; the
 * order must not depend on thread timing, so that the same input gives
 * the same pack bytes). A pack is "DCRPACK2" (HACKING's on-store format)
 * followed by the frames; it is sealed once it reaches the target size
 * (or when the caller says), named by dcr_pack_name's rule (the SHA-256
 * of its header and of each frame's SHA-256, which the caller computed
 * for the manifest already, so no pass over the bytes is added) and put
 * as packs/<name> by one of @uploads workers of a core/wq queue while
 * the caller goes on appending. At most uploads + 1 sealed packs wait or
 * upload at once (a seal waits for room), so memory stays about
 * (uploads + 2) x (target + frame_max). With uploads 0 the seal puts the
 * pack itself, on the appender's thread (compaction: every store
 * mutation on one thread, in order, as tests/integration/killgc.sh's
 * per-thread syscall counts need).
 *
 * A store that takes objects in parts (dcr_store_can_stream: the
 * directory store) gets the open pack streamed instead, on the
 * appender's thread, in page-aligned parts of about 4 MiB from one
 * buffer of 4 MiB + frame_max re-used for every pack (it goes around the
 * page cache), and the seal names and stores it there; uploads is then
 * ignored. The bytes, names and offsets are the same either way
 * (test_packw). Filling fresh pack buffers was a sixth of an anchor
 * commit's CPU on a VM whose first touch of memory is slow.
 */
#ifndef DCR_PACKW_H
#define DCR_PACKW_H

#include <stddef.h>
#include <stdint.h>

#include "hash.h"
#include "objstore.h"

/** The bytes every pack written now starts with. */
#define DCR_PACK_MAGIC "DCRPACK2"
/** The header of the packs written before: named by the SHA-256 of all
 *  their bytes (as packs without a header, written by older compaction). */
#define DCR_PACK_MAGIC1 "DCRPACK1"
/** Their length. */
#define DCR_PACK_HDR_LEN 8
/* The size at which a pack is sealed unless told otherwise (commits and
 * compaction alike: dcr_packw_opts.target 0). */
#define DCR_PACK_TARGET_DEFAULT ((uint64_t)64 << 20)

/**
 * dcr_pack_name - the name a pack's bytes @data[0..len) must have. A
 * "DCRPACK2" pack is named by the SHA-256 of its 8 header bytes followed
 * by the SHA-256 of each of its frames in order (each frame as its own
 * header says long, the last one ending at the pack's end); any other
 * (a "DCRPACK1" pack, or one without a header) by the SHA-256 of all its
 * bytes. Returns 0 and @out, -EBADMSG for a "DCRPACK2" pack whose bytes
 * are not whole frames (its name can match nothing), or -ENOMEM.
 * Thread-safe.
 */
int dcr_pack_name(const void *data, size_t len, uint8_t out[DCR_HASH_LEN]);

/** One frame of a "DCRPACK2" pack, as dcr_pack_frames finds it. */
struct dcr_pack_frame {
	uint64_t off, len;             /* in the pack's bytes */
	uint8_t hash[DCR_HASH_LEN];    /* SHA-256 of those bytes */
};

/**
 * dcr_pack_frames - dcr_pack_name of @data[0..len) that also hands back,
 * for a "DCRPACK2" pack, each frame's place and SHA-256 (the hashes the
 * name is made of), in increasing offset order, in *@frames (malloc'ed;
 * the caller frees it) and their count in *@n: a check of a frame
 * against its manifest hash then needs no second pass over its bytes
 * (maint/verify.c). For the other forms *@frames is NULL and *@n 0.
 * Returns as dcr_pack_name. Thread-safe.
 */
int dcr_pack_frames(const void *data, size_t len, uint8_t out[DCR_HASH_LEN],
		    struct dcr_pack_frame **frames, size_t *n);

struct dcr_packw;

/** How a pack writer is made (see dcr_packw_new). */
struct dcr_packw_opts {
	struct dcr_store *st;  /* where packs are put (not owned) */
	uint64_t target;       /* seal a pack once it holds this much;
				* 0: DCR_PACK_TARGET_DEFAULT */
	size_t frame_max;      /* the largest frame that will be appended */
	unsigned uploads;      /* packs uploaded at once; 0: by the sealer */
};

/**
 * dcr_packw_new - make a pack writer for @o. Returns 0 and *@out (free
 * with dcr_packw_free), or -EINVAL / -ENOMEM. No thread starts before
 * the first seal.
 */
int dcr_packw_new(const struct dcr_packw_opts *o, struct dcr_packw **out);

/**
 * dcr_packw_append - append the frame @data[0..len), whose SHA-256 is
 * @fhash (the caller's, as the manifest records it: not computed again),
 * to the open pack (opening one first), sealing the pack when it reaches
 * the target. Sets *@pack to the pack's sequence number (0, 1, ... in
 * the order packs are opened: an index into dcr_packw_hashes once
 * finished) and *@off to the frame's offset in it. Returns 0, -EFBIG for
 * a frame over frame_max, -EINVAL for bytes that are not one whole frame
 * (its header's length), -ENOMEM, or the first upload's error (logged
 * where it happened; nothing more is uploaded after one). One caller at
 * a time.
 */
int dcr_packw_append(struct dcr_packw *w, const void *data, size_t len,
		     const uint8_t fhash[DCR_HASH_LEN], uint32_t *pack,
		     uint64_t *off);

/**
 * dcr_packw_seal - seal the open pack now, if it holds a frame (a
 * caller's boundary: compaction keeps one version per pack). Returns 0
 * or as dcr_packw_append. One caller at a time, as append.
 */
int dcr_packw_seal(struct dcr_packw *w);

/**
 * dcr_packw_finish - seal the open pack and wait until every sealed
 * pack is uploaded. Returns 0 or the first error (logged). Nothing may
 * be appended after it.
 */
int dcr_packw_finish(struct dcr_packw *w);

/**
 * dcr_packw_error - the first error of an upload so far (0: none), for
 * a pipeline that stops early. Thread-safe.
 */
int dcr_packw_error(struct dcr_packw *w);

/** dcr_packw_count - packs opened so far. After finish: how many
 * dcr_packw_hashes holds. */
uint32_t dcr_packw_count(const struct dcr_packw *w);

/**
 * dcr_packw_hashes - the names (dcr_pack_name) of the packs by sequence number,
 * valid after a successful dcr_packw_finish, until dcr_packw_free.
 */
const uint8_t (*dcr_packw_hashes(const struct dcr_packw *w))[DCR_HASH_LEN];

/** dcr_packw_uploaded - bytes of packs put so far (for progress and
 * statistics). Thread-safe. */
uint64_t dcr_packw_uploaded(struct dcr_packw *w);

/**
 * dcr_packw_free - stop (packs not yet uploaded are dropped) and free.
 * NULL is fine.
 */
void dcr_packw_free(struct dcr_packw *w);

#endif /* DCR_PACKW_H */
