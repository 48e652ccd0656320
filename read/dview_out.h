/* SPDX-License-Identifier: MIT */
/*
 * dview_out.h - the output side of a delta view's build (read/dview.c,
 * inside the read layer only): copying pieces between files, and the
 * read-back check that proves a built view and makes its check values
 * (struct dcr_dview_sums, dview.h, whose readers dcr_dview_pread and
 * dcr_dview_verify live here too).
 *
 * Contract:
 * - A view is written as pieces (its header; each unit's indices, each
 *   unit's values), each hashed (XXH3-128) in memory where it was
 *   produced. dcr_dview_check reads the finished output back once per
 *   piece and once per block, on the reader's threads: every piece must
 *   hash to what it was produced with, and the pieces must tile the
 *   output exactly, so every byte read back is checked against what
 *   was produced; only then are the check values (computed from the
 *   same page cache) handed out.
 * - Nothing here keeps state; all functions are thread-safe.
 */
#ifndef DCR_DVIEW_OUT_H
#define DCR_DVIEW_OUT_H

#include <stddef.h>
#include <stdint.h>

#include "dview.h"
#include "hash.h"
#include "reader.h"

/** A piece of a view's output and the hash it was produced with. */
struct dcr_dview_piece {
	uint64_t off, len;          /* its bytes in the output */
	const uint8_t *want;        /* DCR_XXH_LEN bytes: its production hash */
	const char *name;           /* what it is part of, for the log */
};

/**
 * dcr_dview_copy - copy [@off, @off+@len) of @in to @out at *@pos
 * (copy_file_range, or pread/pwrite where the files do not allow it);
 * *@pos moves past it. 0 or -errno.
 */
int dcr_dview_copy(int in, uint64_t off, uint64_t len, int out, uint64_t *pos);

/**
 * dcr_dview_check - read the view of @size bytes in @fd back: the
 * pieces @pc[0..n) must tile it in order from 0 and each must hash to
 * its production hash; the check values of its DCR_DVIEW_BLOCK blocks
 * go to *@sums. The pieces and runs of blocks are read on @r's threads
 * (dcr_reader_par_for). 0; -EIO when a piece differs or the pieces do
 * not tile the output (logged, naming the view v@from_v..v@to_v and
 * the piece), -ENOMEM, or pread's -errno (logged). On failure *@sums
 * is empty.
 */
int dcr_dview_check(struct dcr_reader *r, uint64_t from_v, uint64_t to_v,
		    int fd, const struct dcr_dview_piece *pc, size_t n,
		    uint64_t size, struct dcr_dview_sums *sums);

#endif /* DCR_DVIEW_OUT_H */
