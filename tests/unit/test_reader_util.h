/* SPDX-License-Identifier: MIT */
/*
 * test_reader_util.h - the fixture of the read path's unit tests
 * (test_reader, test_reader_damage, test_reader_versions), defined in
 * test_reader_util.c, which each of them links: versions are built with
 * real frames and manifests into a real directory store (by hand, so
 * that every chunk's kind is known), wrapped in a counting shim so the
 * tests can assert exactly which objects the reader fetches; the log is
 * captured; the fetches a read must make are worked out. Include it
 * after <cmocka.h>.
 */
#ifndef DCR_TEST_READER_UTIL_H
#define DCR_TEST_READER_UTIL_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "hash.h"
#include "objstore.h"
#include "reader.h"

#define CS 4096u
#define MAXF 8
#define MAXV 8

/* ------------------------------------------------------------ log capture */

/* What log_sink saw since log_reset: errors and warnings counted, the
 * last of each. */
extern int log_errors, log_warnings;
extern char log_last_warn[1024];
extern char log_last[1024];

/* The log sink of the tests (dcr_log_set_sink); DCR_TEST_VERBOSE=1 also
 * prints every line. */
void log_sink(enum dcr_log_level lvl, const char *msg);
/* Forget what the sink saw. */
void log_reset(void);

/* ------------------------------------------------------------ counting shim */

struct cstore {
	struct dcr_store base;
	struct dcr_store *in;
	atomic_uint gets_versions, gets_packs, gets_tags, lists;
	atomic_uint lists_versions; /* of them, listings of versions/ */
	atomic_uint_fast64_t bytes_versions; /* what gets of versions/ returned */
	atomic_int delay_us; /* added to every pack get */
	/* Fault injection: a get of fail_key fails with fail_err. */
	char fail_key[64];
	int fail_err;
	/* ... and the next damage_left gets of damage_key come back with
	 * their last byte flipped (a body damaged on the way). */
	char damage_key[64];
	int damage_left;
};

/* Zero @c's counters of GETs and LISTs. */
void counts_reset(struct cstore *c);

/* ------------------------------------------------------------ version builder */

enum bmode {
	B_AUTO,      /* SAME if equal, else the encoder's choice */
	B_FULL,      /* an anchor: every chunk a full frame */
	B_DELTA_ALL, /* a delta for every chunk with a base, equal or not */
};

struct tfile {
	char path[64];
	int dir;
	uint8_t *data;
	size_t size;
	uint32_t base;        /* index in the parent, DCR_NO_BASE */
	uint8_t kind[64];     /* per chunk, as published */
	uint32_t pack[64];    /* pack index of the frame */
	uint64_t off[64];     /* frame offset in its pack */
	uint32_t flen[64];    /* frame length */
};

struct tver {
	uint64_t v, parent;
	int nfiles;
	struct tfile f[MAXF];
	uint8_t packs[2][DCR_HASH_LEN];
	uint32_t npacks;
};

/* Free @t's file data and clear it. */
void tver_free(struct tver *t);
/* Add a directory or (if !dir) a file of @size pseudo-random bytes. */
struct tfile *add_file(struct tver *t, const char *path, int dir,
			      size_t size, uint64_t seed);
/* @cur starts as a copy of @prev's tree (same paths, same bytes). */
void copy_tree(struct tver *cur, const struct tver *prev);
/* Flip the low bits of @n random bytes of chunk @k (bf16-like updates). */
void nudge(struct tfile *f, uint64_t k, int n, uint64_t seed);
/* Replace chunk @k by new, compressible bytes (a full frame). */
void rewrite(struct tfile *f, uint64_t k, uint64_t seed);

/*
 * The manifest format publish() writes: g_format (1: as an older
 * dcrfs-commit) up to version g_format_from - 1 (when set), the current
 * format from there on. g_bad_xxh_v: that version's first chunk gets a
 * wrong check value; g_bad_chunk: the chunk that got it. Reset by setup.
 */
extern uint32_t g_format;
extern uint64_t g_format_from;
extern uint64_t g_bad_xxh_v;
extern uint64_t g_bad_chunk;

/* Encode @cur (parent @prev, may be NULL) into frames, two packs and a
 * manifest, and publish it to @st. Files must be listed in path order.
 * With @garbage the manifest object is replaced by junk. */
void publish(struct dcr_store *st, struct tver *cur,
		    const struct tver *prev, enum bmode mode, int garbage);

/* ------------------------------------------------------------ fixture */

struct fx {
	char *root;
	char store_dir[PATH_MAX];
	char cache_dir[PATH_MAX];
	struct cstore *cs;
	struct dcr_store *st;
	struct dcr_reader *r;
	int fetch_threads; /* for open_reader; 0 = default */
	int threads;       /* for open_reader; 0 = the CPU budget */
	/* For open_reader: 0 = off, so that the other tests can count one
	 * GET per frame and no background fetch. */
	int64_t readahead;
	uint32_t coalesce_max;
	struct tver v[MAXV + 1]; /* v[1..] */
	int nv;
	uint32_t retry_bad_ms;
	uint32_t max_trees;
	uint32_t relist_ms;
	/* Chunk hashes known to be in the cache, for expected fetch counts. */
	uint8_t (*cached)[DCR_HASH_LEN];
	size_t ncached;
};

/* Open the reader of @f (its options from @f) with cache budget
 * @budget. */
void open_reader(struct fx *f, uint64_t budget);
/* cmocka setup and teardown: a fresh store in a temporary directory,
 * behind the counting shim; everything removed again. */
int setup(void **state);
int teardown(void **state);
/* Publish v1..@nv: v1 a/, a/w.bin (6 chunks, short tail), b.bin (3 full
 * chunks), empty, tiny; then a mix of SAME, DELTA and FULL chunks. */
void build_chain(struct fx *f, int nv);
/* Read entry @idx of version @v whole, in one call, and compare. */
void check_file(struct fx *f, uint64_t v, uint32_t idx);
/* check_file every regular file of @v. */
void check_version(struct fx *f, uint64_t v);

/* ------------------------------------------------- expected fetch counts */

/* Frames the reader must fetch for chunk @k of file @fi of @v, given
 * the chunks in f->cached; marks the result cached. */
unsigned expect_chunk(struct fx *f, uint64_t v, int fi, uint64_t k);
/* The same for every chunk of @v. */
unsigned expect_version(struct fx *f, uint64_t v);

/* ------------------------------------------------------------ damage */

/* Flip a byte (at @at of its payload) of the frame of (version, file,
 * chunk) in the store; the pack's key into @key_out. */
void corrupt_frame(struct fx *f, uint64_t v, int fi, uint64_t k,
			  uint32_t at, char *key_out, size_t cap);
/* The slab holding file @fi (tver index) of version @v in the reader's
 * cache into @path; chunk k is at k * CS in it. */
void cache_file(struct fx *f, uint64_t v, int fi, char *path,
		       size_t cap);
/* Whether chunk @k of file @fi of @v is in its slab with the right
 * bytes. */
bool in_slab(struct fx *f, uint64_t v, int fi, uint64_t k);

#endif /* DCR_TEST_READER_UTIL_H */
