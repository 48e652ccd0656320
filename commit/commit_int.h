/* SPDX-License-Identifier: MIT */
/*
 * commit_int.h - private to the commit (commit.h is its contract): the
 * pipeline's state and what one file of it calls in another. Included
 * only by these core/ files:
 *
 *   commit.c          the pipeline: the slots, the feeder, packing in
 *                     order, the stage copy, dcr_commit_sources
 *   commit_scan.c     listing a tree, and opening a listed file as the
 *                     scan saw it
 *   commit_chunk.c    one chunk: read, hash, check, encode, decode-check
 *                     (the encoders' per-worker state)
 *   commit_publish.c  the packs confirmed, the manifest published
 */
#ifndef DCR_COMMIT_INT_H
#define DCR_COMMIT_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "buf.h"
#include "commit.h"
#include "hash.h"
#include "manifest.h"
#include "objstore.h"
#include "packw.h"
#include "safetensors.h"
#include "wq.h"

/*
 * A chunk on its way through the pipeline: queued by the feeder in a
 * slot (struct job), then read, hashed, encoded and decode-checked by a
 * worker of the encode queue (core/wq) into its own buffers, so that
 * every pass over the chunk and its parent's runs on the core that read
 * them, from its cache; then packed by whichever thread finishes the
 * oldest unpacked slot, in the order the chunks were queued: file order,
 * chunk order. So the packs hold the same frames in the same order
 * whatever the number of workers and their timing, and the same commit
 * gives the same pack bytes (tests/integration/commit_packs_same.sh).
 * Slot seq lives at slots[seq % nslots]; the feeder waits while nslots
 * slots are unpacked (the bound on memory).
 */
struct job {
	uint32_t fidx;
	uint64_t cidx;
	uint32_t len;
	struct dcr_buf frame; /* the encoded frame; empty: nothing to pack */
	bool done;            /* encoded (or failed): ready to pack */
};

/*
 * A file being committed. The feeder opens it and sets everything before
 * it queues the file's first chunk (the queue's lock orders that before
 * the workers' reads); the descriptors are closed by file_done, after
 * the last chunk is done.
 */
struct fstate {
	const struct dcr_commit_source *src;
	int fd;          /* the source file; -1: @src's ranges (or closed) */
	struct stat sb0; /* @fd's fstat when opened (file_changed) */
	int sfd;         /* its stage copy; -1: none */
	bool kcopy;      /* copy_file_range to @sfd works (atomic) */
	int parent_fd;   /* -1 if no base */
	uint32_t pending;/* queued chunks not yet finished */
	bool read_done;  /* the feeder is done with it */
	bool queued_all; /* ... having queued every chunk */
	/* dtype regions from a safetensors header; empty = byte mode */
	struct dcr_regions regions;
	/* Its float tensors and, per tensor, the NaN/Inf found so far
	 * (atomic adds); nonfinite is NULL when nothing is checked. */
	struct dcr_tensors floats;
	uint64_t *nonfinite;
};

struct pipe {
	struct dcr_store *st;
	const struct dcr_commit_opts *o;
	struct dcr_manifest *m;
	const struct dcr_manifest *pm;
	uint32_t cs;

	pthread_mutex_t lock;
	pthread_cond_t cond_free; /* a slot was packed, or an error */
	struct job *slots;
	size_t nslots;
	uint64_t next_seq;        /* the feeder's next slot */
	uint64_t packed_seq;      /* the oldest slot not packed yet */
	int err;                  /* first error; stops everything */
	struct fstate *fs;

	struct dcr_wq *wq;        /* the encoders */
	struct dcr_packw *pw;     /* the packs (appended under lock) */

	uint64_t same, delta, full;
	/* A non-finite value was found (atomic): encode no more, fail. */
	bool refused;
	/* false once the stage copy failed: the commit goes on without it
	 * (atomic loads; set under lock) */
	bool staging;
	/* With o->sign_key: the id of the store signed for (objstore.h). */
	char store_id[DCR_STORE_ID_MAX + 1];
};

/* An encoder's own state (commit_chunk.c). */
struct worker;

/** dcr_commit_stage_failed - the stage copy of @path failed with @err:
 *  say so once and go on without a stage (commit.c). Takes p->lock. */
void dcr_commit_stage_failed(struct pipe *p, const char *path, int err);

/** dcr_commit_open_source - open the file of source @src as the scan
 *  listed it, *@sb its fstat; -errno, logged (commit_scan.c). */
int dcr_commit_open_source(const struct dcr_commit_source *src,
			   struct stat *sb);

/** dcr_commit_parse_header - the safetensors header of a source of @size
 *  bytes (read through @fd or from its ranges) as element regions and
 *  float tensors (commit_chunk.c). 0 or -errno. */
int dcr_commit_parse_header(const struct dcr_commit_source *src, int fd,
			    uint64_t size, struct dcr_regions *regions,
			    struct dcr_tensors *floats);

/** dcr_commit_worker_new - an encoder's state for the pipeline @ctx
 *  (core/wq's on_start); NULL without memory (commit_chunk.c). */
void *dcr_commit_worker_new(void *ctx);

/** dcr_commit_worker_free - free a dcr_commit_worker_new state @ws; NULL
 *  is fine (core/wq's on_stop) (commit_chunk.c). */
void dcr_commit_worker_free(void *ctx, void *ws);

/** dcr_commit_report_nonfinite - log the NaN/Inf found in file @fi, on
 *  the calling thread once the workers have stopped (commit_chunk.c). */
void dcr_commit_report_nonfinite(struct pipe *p, uint32_t fi);

/** dcr_commit_encode_job - read, hash and (unless the parent's chunk is
 *  the same) encode and decode-check slot @j's chunk with @w's state,
 *  filling its chunk ref and j->frame. 0 or -errno, logged
 *  (commit_chunk.c). */
int dcr_commit_encode_job(struct pipe *p, struct worker *w, struct job *j);

/** dcr_commit_publish_version - publish p->m as the next free version
 *  into @res: its number, the manifest's length, SHA-256 and check. 0 or
 *  -errno, logged (commit_publish.c; dcr_commit_publish is libdcr's,
 *  lib/dcr.h). */
int dcr_commit_publish_version(struct pipe *p, struct dcr_commit_result *res);

/** dcr_commit_check_packs - every pack @m names is in @st, before @m is
 *  published (@published 0) or after it was published as version
 *  @published (a missing one: that version is damaged, and the message
 *  says so); 0, -EIO (one is missing) or -errno, logged
 *  (commit_publish.c). */
int dcr_commit_check_packs(struct dcr_store *st,
			   const struct dcr_manifest *m, uint64_t published);

#endif /* DCR_COMMIT_INT_H */
