/* SPDX-License-Identifier: MIT */
/*
 * dvrec.h - the changes a reader saw while it built chunks (issue 32):
 * per chunk of a version's file that it made from the same chunk of the
 * parent's file by one delta frame, the elements that frame changed
 * (dcr_frame_apply_rec: each one's offset in the chunk and width) and
 * their new values. The delta view of consecutive versions
 * (read/dview.c) is assembled from them at a cost that follows the
 * change, not the model's size; a chunk without a record is compared
 * as before.
 *
 * Contract:
 * - A record is what the decoder did: dcr_frame_apply_rec's list of the
 *   frame that made the chunk, complete by construction, with the new
 *   values copied from the chunk after the reader proved it (the
 *   committed bytes), and the base it was applied to (version, file).
 * - Records live in memory (malloc'ed, one block per chunk), only for
 *   files named *.safetensors, within a byte budget, for the newest
 *   DCR_DVREC_VERSIONS versions that have any: the first record of a
 *   newer version drops the oldest's, a record of an older version than
 *   those kept, or one that would pass the budget, is not kept. Nothing
 *   is written to disk: a remount starts with none (its views are built
 *   by comparison), and no local byte needs checking.
 * - Records are immutable once kept; a reader holds one by reference
 *   (dcr_dvrec_get / dcr_dvrec_put_ref), so a drop never frees one in use.
 * - Keeping can be switched on and off (dcr_dvrec_set_active): a
 *   reader asks dcr_dvrec_active before it lists a chunk's changes, so a
 *   mount none of whose readers use delta views pays nothing for them
 *   (fs/delta.c, -o delta_ahead=auto). A new store keeps.
 * - Thread-safe. Lock: one mutex, a leaf (nothing is called while it is
 *   held); the switch is an atomic, read without it.
 */
#ifndef DCR_DVREC_H
#define DCR_DVREC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frame.h"

/** Versions whose records are kept at once (the one being built and
 * the one before it). */
#define DCR_DVREC_VERSIONS 2

/** Which chunk a record is of: chunk @chunk of manifest file @file of
 * version @v as indexed with tree @tree. */
struct dcr_dvrec_key {
	uint64_t v;
	uint32_t tree;
	uint32_t file;
	uint64_t chunk;
};

/** One chunk's record, as handed out (read-only). */
struct dcr_dvrec_chunk {
	uint64_t base_v;      /* the version the frame applied onto */
	uint32_t base_tree;   /* as indexed with this tree */
	uint32_t base_file;   /* its manifest file */
	uint32_t clen;        /* the chunk's bytes */
	uint32_t w;           /* every entry's width, when they all have the
				 same and every offset is a multiple of it;
				 else 0 (dview.c then looks entry by entry) */
	size_t n;             /* changed elements */
	const uint32_t *e;    /* their entries (frame.h, DCR_REC_*), increasing */
	const uint8_t *val;   /* their new values, each its width, in order */
};

struct dcr_dvrec;

/** Statistics (dcr_dvrec_stats). */
struct dcr_dvrec_stats {
	uint64_t chunks;   /* records kept now */
	uint64_t bytes;    /* their bytes */
	uint64_t kept;     /* records ever kept */
	uint64_t refused;  /* records not kept: budget, older version, memory */
};

/** A record store of at most @budget bytes; NULL on ENOMEM. */
struct dcr_dvrec *dcr_dvrec_new(uint64_t budget);

/** Free @d and its records (none may be held); NULL accepted. */
void dcr_dvrec_free(struct dcr_dvrec *d);

/** Whether @d keeps records now (a relaxed atomic: a chunk being built
 * when it changes may or may not get one). NULL: false. */
bool dcr_dvrec_active(const struct dcr_dvrec *d);

/** Keep records from now on (@on) or not; returns whether @d kept them
 * before. Records already kept stay. Thread-safe. */
bool dcr_dvrec_set_active(struct dcr_dvrec *d, bool on);

/** Whether a file at @path gets records (a *.safetensors name). */
bool dcr_dvrec_wants(const char *path);

/**
 * dcr_dvrec_keep - keep the record of chunk @k: the frame's list @fr
 * (complete) and the values read from @chunk (@clen bytes, proven), made
 * from chunk @k.chunk of file @base_file of version @base_v (indexed
 * with tree @base_tree). Replaces a
 * record of the same chunk. Returns 0, -ENOSPC (not kept: the budget, or
 * a version older than those kept), -EINVAL (an entry past @clen: never
 * from the decoder) or -ENOMEM. Thread-safe.
 */
int dcr_dvrec_keep(struct dcr_dvrec *d, const struct dcr_dvrec_key *k,
		   uint64_t base_v, uint32_t base_tree, uint32_t base_file,
		   const struct dcr_frame_rec *fr, const uint8_t *chunk,
		   uint32_t clen);

/**
 * dcr_dvrec_get - the record of chunk @k with a reference for the
 * caller (dcr_dvrec_put_ref), or -ENOENT. Thread-safe.
 */
int dcr_dvrec_get(struct dcr_dvrec *d, const struct dcr_dvrec_key *k,
		  const struct dcr_dvrec_chunk **out);

/** Drop the caller's reference to @c (from dcr_dvrec_get); NULL accepted. */
void dcr_dvrec_put_ref(struct dcr_dvrec *d, const struct dcr_dvrec_chunk *c);

/** How many chunks of file @file of version @v (tree @tree) have records
 * made from version @base_v. Thread-safe. */
uint64_t dcr_dvrec_count(struct dcr_dvrec *d, uint64_t v, uint32_t tree,
			 uint32_t file, uint64_t base_v);

/** Statistics of @d into @s. Thread-safe. */
void dcr_dvrec_stats(struct dcr_dvrec *d, struct dcr_dvrec_stats *s);

#endif /* DCR_DVREC_H */
