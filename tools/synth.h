/* SPDX-License-Identifier: MIT */
/*
 * synth.h - what the parts of dcrfs-synth share (the program is
 * described in synth_main.c).
 *
 *   synth_main.c    usage, option parsing, main
 *   synth_util.c    notices, allocation that exits on failure, text
 *                   built in memory, path joining
 *   synth_io.c      files mapped for reading, writing or in place;
 *                   whole-file write and copy
 *   synth_tensor.c  the tensor list of one safetensors file (built,
 *                   parsed from a file, freed)
 *   synth_work.c    random streams, float conversions, and the workers
 *                   that fill (init) or step (adam, uniform) a file's
 *                   tensors block by block on a core/wq queue
 *   synth_init.c    dcrfs-synth init: the model's shape and tensors, the
 *                   safetensors, config and tokenizer files
 *   synth_step.c    dcrfs-synth step: the checkpoint read, the Adam
 *                   state file, the next step written
 *
 * The program is single-threaded but for run_work, whose workers touch
 * only the struct work they are given: every function here is called
 * from the main thread unless it says otherwise.
 */
#ifndef DCR_SYNTH_H
#define DCR_SYNTH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "common.h"
#include "nonfinite.h"
#include "safetensors.h"

#define PROG "dcrfs-synth"
#define ST_HDR_LEN 64                     /* state file header bytes */

/* ------------------------------------------------------------ util */

/* --quiet: msg prints nothing. Set by main before any work. */
extern int quiet;

/**
 * msg - print "dcrfs-synth: " and the formatted statistics or notice
 * line to stderr, unless --quiet. Errors go through core's dcr_err
 * ("dcrfs-synth: error: ...", even with --quiet; main names the program
 * with dcr_log_set_prog).
 */
void msg(const char *fmt, ...) DCR_PRINTF(1, 2);

/*
 * Text built in memory the way the rest of the tree builds it (core's
 * safetensors header, the mount's status.json): fprintf to @f, an
 * open_memstream stream, and dcr_json_str (core/json.h) for a JSON
 * string; text_done then leaves it in @p[0..@len). Zero-initialise.
 */
struct text {
	FILE *f;
	char *p;
	size_t len;
};

/**
 * text_start - free what @t held and open its stream, empty. Exits the
 * program (status 1, message printed) when out of memory.
 */
void text_start(struct text *t);

/**
 * text_done - close @t's stream: its text in @t->p (NUL-terminated,
 * @t->len bytes; text_free frees it). Exits the program (status 1,
 * message printed) if a write to the stream failed (out of memory).
 */
void text_done(struct text *t);

/** text_free - close @t's stream if open, free its text; @t is zeroed. */
void text_free(struct text *t);

/** xstrdup - strdup(@s), or exit(1) with a message when out of memory. */
char *xstrdup(const char *s);

/**
 * xcalloc - calloc(@n, @sz) (at least one element), or exit(1) with a
 * message when out of memory. The caller frees the result.
 */
void *xcalloc(size_t n, size_t sz);

/** path_join - "@a/@b", malloc'ed (the caller frees it); exits on OOM. */
char *path_join(const char *a, const char *b);

/* ------------------------------------------------------------ tensors */

struct tensor {
	char *name;
	char dtype[16];
	enum dcr_float_fmt fmt; /* core/nonfinite.h; DCR_FF_NONE: not a float */
	int ndim;
	uint64_t shape[DCR_ST_NDIM_MAX];
	uint64_t nelem;
	uint64_t off, end;   /* data_offsets, relative to the data section */
	uint64_t id;         /* fnv1a(name): names the random streams */
	/* init only */
	float mean, std;
	/* step only: first element of this tensor in the state file */
	uint64_t st_index;
};

/* The tensors of one safetensors file; zero-initialise, stfile_free. */
struct stfile {
	char *name;          /* file name inside the checkpoint directory */
	struct tensor *t;
	size_t n, cap;
	uint64_t hdr_len;    /* JSON bytes (the 8-byte length excluded) */
	uint64_t data_len;
};

/**
 * sim_width - bytes per element of @t if its format is one simulated
 * (BF16, F16, F32), else 0.
 */
unsigned sim_width(const struct tensor *t);

/**
 * stfile_add - a new zeroed tensor at the end of @f (owned by @f; the
 * pointer is valid until the next stfile_add). Exits on OOM.
 */
struct tensor *stfile_add(struct stfile *f);

/** stfile_free - free @f's tensors, their names and @f->name; @f is zeroed. */
void stfile_free(struct stfile *f);

/**
 * st_parse - the tensors of the safetensors file @p[0..len) appended to
 * @f (sorted by offset), through core's parser; what the simulation
 * needs of them must hold too: every shape known, BF16/F16/F32 lengths
 * matching their shapes, no two tensors overlapping. 0 or -errno
 * (-EBADMSG for a file that is not one), not logged; @f is filled as
 * far as it got either way (stfile_free it).
 */
int st_parse(const uint8_t *p, uint64_t len, struct stfile *f);

/* ------------------------------------------------------------ random */

/**
 * fnv1a - the 64-bit FNV-1a hash of the string @s: a tensor's id, which
 * names its random streams.
 */
uint64_t fnv1a(const char *s);

/* ------------------------------------------------------------ files */

/* A file mapped for reading, or created at a fixed size for writing:
 * @fd (-1 when closed), @p the mapping (NULL when @len is 0). */
struct map {
	int fd;
	uint8_t *p;
	uint64_t len;
};

/**
 * map_open - open @path and map it shared into @m: read-only (a read
 * ahead advised) or, with @rw, read-write (updated in place). An empty
 * file maps nothing (@m->p NULL). 0 or -errno, not logged; on error
 * nothing is left open and @m->fd is -1. map_close it.
 */
int map_open(const char *path, bool rw, struct map *m);

/**
 * map_create - create (truncate) @path at @len bytes, its blocks
 * reserved (ENOSPC now, not SIGBUS later), mapped read-write, shared,
 * into @m. 0 or -errno, not logged; on error @m->fd is -1. map_close it.
 */
int map_create(const char *path, uint64_t len, struct map *m);

/**
 * map_close - unmap and close @m (@m->fd becomes -1). 0, or the -errno
 * of close(2) (a write error a file system reports late).
 */
int map_close(struct map *m);

/**
 * write_file - create (truncate) @path, mode 0644, holding the @len
 * bytes at @data. 0 or -errno, not logged.
 */
int write_file(const char *path, const void *data, size_t len);

/**
 * copy_file - copy the file @src to @dst (created or truncated, with the
 * permission bits of @mode). 0 or -errno, not logged. Not thread-safe
 * (one static buffer).
 */
int copy_file(const char *src, const char *dst, mode_t mode);

/* ------------------------------------------------------------ workers */

enum work_kind { W_INIT, W_ADAM, W_UNIFORM };

/*
 * One pass over the tensors of one file, split into blocks of
 * BLOCK_ELEMS elements that the workers claim in order.
 */
struct work {
	enum work_kind kind;
	const struct stfile *f;
	const uint8_t *in;      /* input data section (step) */
	uint8_t *out;           /* output data section */
	float *st;              /* adam: state, 3 floats per element, updated in place */
	bool st_valid;          /* adam: @st holds a previous step's state */
	int out_fd;             /* adam: output file, written with pwrite */
	uint64_t out_base;      /* adam: file offset of the data section */
	atomic_int err;         /* first write error (-errno) */
	uint64_t seed, step;
	float lr, rate;
	uint64_t *blk_first;    /* per tensor: index of its first block */
	uint64_t nblocks;
	atomic_uint_fast64_t next;
	/* statistics */
	atomic_uint_fast64_t n16, changed16, n32, changed32, resynced;
};

/**
 * handled - whether tensor @t is processed by @kind (others are copied
 * unchanged): an empty tensor never; uniform: every simulated format;
 * init and adam: BF16 and F32.
 */
bool handled(enum work_kind kind, const struct tensor *t);

/**
 * run_work - do the pass @w describes (the caller zeroes it and sets
 * @kind, @f, the buffers and parameters) on @jobs threads, the caller's
 * among them, adding to @w's statistics. The result does not depend on
 * @jobs. Returns 0 or the first -errno of a write (adam) or allocation,
 * not logged.
 */
int run_work(struct work *w, int jobs);

/* ------------------------------------------------------------ commands */

/**
 * cmd_init - dcrfs-synth init: write a checkpoint of about @size bytes
 * in @shards files (fewer if the model has fewer tensors), random
 * stream @seed, into @outdir (created) on @jobs threads. Returns the
 * exit status (0, or 1 after printing the error).
 */
int cmd_init(uint64_t size, uint64_t seed, unsigned shards, int jobs,
	     const char *outdir);

/**
 * cmd_step - dcrfs-synth step: write the step after the checkpoint
 * @indir to @outdir (created; not @indir): Adam (@adam, learning rate
 * @lr, state in @state_arg or by default .dcrfs-synth.state beside
 * @outdir) or uniform changes at @rate; random stream @seed; @jobs
 * threads. Returns the exit status (0, or 1 after printing the error).
 */
int cmd_step(const char *indir, const char *outdir, bool adam,
	     float lr, double rate, const char *state_arg, uint64_t seed,
	     int jobs);

#endif /* DCR_SYNTH_H */
