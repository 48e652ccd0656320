/* SPDX-License-Identifier: MIT */
/*
 * dview.h - the delta view of one safetensors file between two versions
 * (issue 21, MNT/delta/): a safetensors file holding, per tensor whose
 * bytes changed, T.idx (the flat indices of the changed elements) and
 * T.val (their new values), and in "__metadata__" the format, both
 * versions and digests, and the tensors added, removed or reshaped.
 * The byte format is "dcrfs-delta" version 1, documented in dcrfs(8)
 * and HACKING.
 *
 * Contract:
 * - Every input byte comes from the reader's verified reads
 *   (dcr_reader_read_tree): a damaged chunk fails the build with the
 *   reader's -EIO, never a wrong byte.
 * - Both headers are parsed by core's parser (dcr_safetensors_tensors)
 *   and the output header is laid out by core's writer
 *   (dcr_safetensors_layout, the reference's order), so the bytes are a
 *   pure function of the two files: a rebuild gives the same bytes and
 *   the same size.
 * - Building is two passes over units, each on the reader's threads
 *   (dcr_reader_par_for: the CPU budget or threads=N), a window of
 *   units at a time, with no pass over the view's bytes on one thread.
 *   Each tensor present in both files with equal dtype and shape is cut
 *   into units of a few MiB. Pass 1 counts each unit's changed
 *   elements: from the reader's records (read/dvrec.h) and chunks with
 *   equal hashes, keeping nothing, or by comparing the tensor element
 *   by element at its dtype's width (8 bytes at a time, lanes looked at
 *   only where the word differs), keeping the unit's indices and values
 *   in an unlinked scratch file. With every count known, the header is
 *   laid out and every unit's place in the output follows; pass 2
 *   stores each unit's indices and values there, through a shared
 *   mapping of the output (read/dview_out.h: no inode lock taken per
 *   write, so the units' stores run at once), made again from the
 *   records or read from the scratch file, so a view from records is
 *   written once, straight into the output. The
 *   bytes do not depend on the threads, the unit size or whether
 *   records were used. Memory is O(tensors + units + window), not
 *   O(view): a 5 GB shard's 500 MB view never sits in memory.
 *   Files whose digests are equal are not read beyond their headers;
 *   where a tensor lies at the same offset in both files, blocks whose
 *   chunks have equal hashes in both manifests are not read either
 *   (dcr_reader_chunk_hash), so a step that leaves layers untouched
 *   costs only the chunks it changed.
 * - Local bytes are checked like the chunk cache's: each piece of the
 *   output (the header; each unit's indices, each unit's values) is
 *   hashed (XXH3-128) in memory as it is produced; the finished output
 *   is read back once and every piece checked against its production
 *   hash (a byte changed in the scratch file or the output's pages
 *   fails the build, EIO), and from those proven bytes come the view's
 *   check values, one per DCR_DVIEW_BLOCK bytes (struct
 *   dcr_dview_sums); dcr_dview_pread serves a read only from whole
 *   blocks that match them.
 * - The build is not cached here: the caller keeps the output file
 *   (fs/delta.c keeps views within a budget and rebuilds evicted ones).
 *
 * All functions are thread-safe (the reader is).
 */
#ifndef DCR_DVIEW_H
#define DCR_DVIEW_H

#include <stdint.h>
#include <sys/types.h>

#include "hash.h"
#include "reader.h"

/** Format name and version written in every view's "__metadata__". */
#define DCR_DVIEW_FORMAT "dcrfs-delta"
#define DCR_DVIEW_FORMAT_VERSION "1"

/** Suffix a file's name must have to be in the view. */
#define DCR_DVIEW_SUFFIX ".safetensors"

/** Bytes of T.idx's elements for a tensor of @numel elements: 4 (I32)
 * below 2^31 elements, else 8 (I64). */
static inline unsigned dcr_dview_idx_width(uint64_t numel)
{
	return numel < (UINT64_C(1) << 31) ? 4 : 8;
}

/** One side of a view: entry @idx of tree @tree of version @v. */
struct dcr_dview_side {
	uint64_t v;
	uint32_t tree;
};

/** What a build made. */
struct dcr_dview_info {
	uint64_t size;      /* bytes written to the output, exactly */
	uint64_t changed;   /* changed elements (idx/val pairs) */
	uint64_t tensors;   /* tensors with changes */
	uint64_t compared;  /* tensor bytes of B read and compared */
	uint64_t recorded;  /* tensor bytes whose changes came from the
			       reader's records (read/dvrec.h), not read */
	uint64_t skipped;   /* tensor bytes not read: their chunks' hashes
			       are equal in both versions */
};

/** Bytes of a view covered by one check value. */
#define DCR_DVIEW_BLOCK 65536u

/** The check values of a built view: the XXH3-128 of each
 * DCR_DVIEW_BLOCK bytes (the last block short), 16 B per 64 KiB. */
struct dcr_dview_sums {
	uint64_t size;                /* the view's bytes */
	uint64_t n;                   /* blocks */
	uint8_t (*blk)[DCR_XXH_LEN];  /* malloc'ed; dcr_dview_sums_free */
};

/** Free @s's values and empty it; NULL accepted. */
void dcr_dview_sums_free(struct dcr_dview_sums *s);

/**
 * dcr_dview_pread - read [@off, @off+@len) of the view in @fd whose check
 * values are @s into @dst: the blocks the range covers are read whole
 * and each checked first. Returns the bytes read (short only at the
 * end, 0 past it), or -EIO when a block does not match its check value
 * or the file is short (*@bad_off: the block's offset; nothing is
 * logged here: the caller names the view), -ENOMEM, or pread's -errno.
 * Never copies out a byte of a block that failed (on failure @dst may
 * hold the checked blocks before it). Thread-safe.
 */
ssize_t dcr_dview_pread(int fd, const struct dcr_dview_sums *s, void *dst,
			size_t len, uint64_t off, uint64_t *bad_off);

/**
 * dcr_dview_verify - check the whole view in @fd against @s: its size,
 * then every block, as dcr_dview_pread would before serving it (for a
 * file handed to the kernel to read: FUSE passthrough), runs of blocks
 * on @r's threads (dcr_reader_par_for). 0, or -EIO (*@bad_off: the
 * first block that differs, or @s->size when the size does), -ENOMEM,
 * or pread's -errno. Nothing is logged. Thread-safe.
 */
int dcr_dview_verify(struct dcr_reader *r, int fd,
		     const struct dcr_dview_sums *s, uint64_t *bad_off);

/**
 * dcr_dview_probe - whether entry @idx of tree @tree of version @v is a
 * file of the view: a regular file named *.safetensors whose header
 * core's parser accepts and whose every tensor has a known dtype, a
 * shape and a length equal to shape x width, with unique names.
 * Returns 0 if it is; -EBADMSG if not (named in one log line at debug
 * level: a file that is not safetensors is simply not in the view);
 * -ESTALE, -ENOENT, -EISDIR, or the reader's -errno (-EIO).
 */
int dcr_dview_probe(struct dcr_reader *r, uint64_t v, uint32_t tree,
		    uint32_t idx);

/**
 * dcr_dview_coverage - how much of the build of entry @idx of @to's
 * tree from @from the reader's records would give (read/dvrec.h): into
 * *@changed the chunks of the file whose hashes differ between the two
 * versions (all of them when the file is absent from @from or the chunk
 * sizes differ), into *@recorded those of them with a record made from
 * @from's same chunk. Chunk hashes only: no byte is read. 0, or -ESTALE,
 * -ENOENT, -EISDIR, or the reader's -errno. Thread-safe.
 */
int dcr_dview_coverage(struct dcr_reader *r, struct dcr_dview_side from,
		       struct dcr_dview_side to, uint32_t idx,
		       uint64_t *changed, uint64_t *recorded);

/**
 * dcr_dview_build - write the view of the change of entry @idx of @to's
 * tree (a regular file, path P) from version @from (P in @from's tree,
 * or absent) to @to into @out_fd from offset 0 (the caller's file,
 * empty, opened read-write; nothing else is written to it). @from.v
 * and @to.v differ, either way round (a rollback span has @from.v >
 * @to.v: the same view with from and to swapped; the caller checks
 * lineage). A scratch file is made
 * unlinked (O_TMPFILE) in @tmpdir and closed before return.
 * Returns 0 with *@info filled; -EBADMSG if P in @to is not a file of
 * the view (dcr_dview_probe), -ESTALE if either version has another
 * tree now, -EINVAL for @from.v == @to.v, -EFBIG if the header would be
 * larger than safetensors allows, -ENOSPC/-EIO writing, -ENOMEM, or the
 * reader's -errno (-EIO for damage, logged there). On failure the
 * output's content is undefined. If P in @from is absent or not a valid
 * safetensors file, every tensor of @to is "added" (and from_digest is
 * "" when absent). On success *@sums holds the output's check values
 * (the caller frees them with dcr_dview_sums_free); on failure it is
 * empty. A piece that reads back other than it was built is -EIO,
 * logged.
 */
int dcr_dview_build(struct dcr_reader *r, struct dcr_dview_side from,
		    struct dcr_dview_side to, uint32_t idx, const char *tmpdir,
		    int out_fd, struct dcr_dview_info *info,
		    struct dcr_dview_sums *sums);

#endif /* DCR_DVIEW_H */
