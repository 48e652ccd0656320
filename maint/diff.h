/* SPDX-License-Identifier: MIT */
/*
 * diff.h - what changed from one version to another, per file and per
 * safetensors tensor (`dcrfs-ctl diff`, dcrfs-ctl(8)).
 *
 * Files are paired by path. A chunk whose SHA-256 is the same in both is
 * unchanged; the others are materialized through the index's scratch
 * reader and compared byte for byte. "Stored" counts the bytes of the
 * frames a node holding the first version downloads to build the
 * second: those of the versions on the second's chain newer than the
 * first, down to the first full frame. Works over an index (index.h);
 * single-threaded.
 */
#ifndef DCR_DIFF_H
#define DCR_DIFF_H

#include <stddef.h>
#include <stdint.h>

#include "index.h"
#include "safetensors.h"

/** Counts of a file, a tensor or the whole diff. */
struct dcr_diff_stat {
	uint64_t chunks;          /* of the second version's file */
	uint64_t changed_chunks;
	uint64_t changed_bytes;
	uint64_t stored_bytes;
};

/** One path of either version. */
struct dcr_diff_file {
	const char *path;         /* owned by the index */
	const char *status;       /* "added", "removed", "changed", "unchanged" */
	int dir;                  /* a directory (added or removed only) */
	struct dcr_diff_stat d;
	/* A changed safetensors file: its tensors (in the second version,
	 * by offset) and their counts, parallel; else empty. */
	struct dcr_tensors tensors;
	struct dcr_diff_stat *ts;
};

/** What dcr_diff found. */
struct dcr_diff_result {
	uint64_t from, to;
	struct dcr_diff_file *files;  /* by path; unchanged directories left out */
	size_t nfiles, cap;
	struct dcr_diff_stat total;   /* over the files */
};

/**
 * dcr_diff - compare version @a with version @b of @ix into @r (free
 * with dcr_diff_result_free). 0, or -errno (logged, naming the file):
 * @r then holds the files compared before the failure, or, if a
 * manifest could not be read (nothing compared), r->to is 0.
 */
int dcr_diff(struct dcr_index *ix, struct dcr_sview_ver *a, struct dcr_sview_ver *b,
	     struct dcr_diff_result *r);

/** dcr_diff_result_free - free what @r holds (it stays empty). */
void dcr_diff_result_free(struct dcr_diff_result *r);

#endif /* DCR_DIFF_H */
