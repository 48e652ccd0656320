/* SPDX-License-Identifier: MIT */
/*
 * dview_out.h - the output side of a delta view's build (read/dview.c,
 * inside the read layer only): the output's shared mapping, and the
 * read-back check that proves a built view and makes its check values
 * (struct dcr_dview_sums, dview.h, whose readers dcr_dview_pread and
 * dcr_dview_verify live here too).
 *
 * Contract:
 * - The output is written through one shared mapping of its file, its
 *   final size known before the first byte (the header's layout), so
 *   every unit stores its pieces on its own thread: buffered write(2)s
 *   to one file take its inode's lock one at a time, stores into a
 *   mapping do not. A range is made resident before its stores
 *   (dcr_dview_out_ready), so no store can fault into SIGBUS: a full
 *   file system is -ENOSPC there.
 * - A view is written as pieces (its header; each unit's indices, each
 *   unit's values), each hashed (XXH3-128) in memory where it was
 *   produced. dcr_dview_check reads the finished output back through
 *   the mapping (the file's page cache) once per piece and once per
 *   block, on the reader's threads: every piece must hash to what it
 *   was produced with, and the pieces must tile the output exactly, so
 *   every byte read back is checked against what was produced; only
 *   then are the check values (computed from the same page cache)
 *   handed out.
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
 * dcr_dview_out_map - size the empty file @fd to @size bytes and map it
 * shared, read-write, into *@map (NULL for @size 0). 0 or -errno
 * (ftruncate's, mmap's). Undo with dcr_dview_out_unmap.
 */
int dcr_dview_out_map(int fd, uint64_t size, uint8_t **map);

/** Unmap what dcr_dview_out_map mapped (NULL accepted). */
void dcr_dview_out_unmap(uint8_t *map, uint64_t size);

/**
 * dcr_dview_out_ready - make bytes [@off, @off+@len) of @fd's mapping
 * @map ready for stores: their pages faulted in writable by the kernel
 * (MADV_POPULATE_WRITE), or, where the kernel cannot populate, their
 * blocks allocated (fallocate). 0; -ENOSPC (or fallocate's -errno)
 * where the file system has no room; -EIO where the kernel could not
 * fill a page. Ranges may share pages; any thread, any order.
 */
int dcr_dview_out_ready(int fd, uint8_t *map, uint64_t off, uint64_t len);

/**
 * dcr_dview_check - read the view of @size bytes mapped at @map back: the
 * pieces @pc[0..n) must tile it in order from 0 and each must hash to
 * its production hash; the check values of its DCR_DVIEW_BLOCK blocks
 * go to *@sums. The pieces and runs of blocks are read on @r's threads
 * (dcr_reader_par_for). 0; -EIO when a piece differs or the pieces do
 * not tile the output (logged, naming the view v@from_v..v@to_v and
 * the piece) or when the kernel cannot give a page back (an I/O error
 * of the file: -EIO, logged, never SIGBUS), or -ENOMEM. On failure
 * *@sums is empty.
 */
int dcr_dview_check(struct dcr_reader *r, uint64_t from_v, uint64_t to_v,
		    const uint8_t *map, const struct dcr_dview_piece *pc,
		    size_t n, uint64_t size, struct dcr_dview_sums *sums);

#endif /* DCR_DVIEW_OUT_H */
