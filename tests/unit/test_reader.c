/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for store/reader.c: versions are built with real frames and
 * manifests into a real directory store (by hand, so that every chunk's
 * kind is known, and once through dcr_commit), wrapped in a counting shim
 * so the tests can assert exactly which objects the reader fetches.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "testutil.h"

#include "chunk.h"
#include "commit.h"
#include "common.h"
#include "dirstore.h"
#include "frame.h"
#include "hash.h"
#include "manifest.h"
#include "reader.h"

#define CS 4096u
#define MAXF 8
#define MAXV 8

/* ------------------------------------------------------------ log capture */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_errors, log_warnings;
static char log_last_warn[1024];
static char log_last[1024];

static void log_sink(enum dcr_log_level lvl, const char *msg)
{
	pthread_mutex_lock(&log_lock);
	if (lvl == DCR_LOG_ERR) {
		log_errors++;
		snprintf(log_last, sizeof(log_last), "%s", msg);
	} else if (lvl == DCR_LOG_WARN) {
		log_warnings++;
		snprintf(log_last_warn, sizeof(log_last_warn), "%s", msg);
	}
	pthread_mutex_unlock(&log_lock);
	if (getenv("DCR_TEST_VERBOSE"))
		fprintf(stderr, "log[%d]: %s\n", (int)lvl, msg);
}

static void log_reset(void)
{
	pthread_mutex_lock(&log_lock);
	log_errors = 0;
	log_warnings = 0;
	log_last[0] = 0;
	pthread_mutex_unlock(&log_lock);
}

/* ------------------------------------------------------------ counting shim */

struct cstore {
	struct dcr_store base;
	struct dcr_store *in;
	atomic_uint gets_versions, gets_packs, gets_tags, lists;
	atomic_int delay_us; /* added to every pack get */
	/* Fault injection: a get of fail_key fails with fail_err. */
	char fail_key[64];
	int fail_err;
	/* ... and the next damage_left gets of damage_key come back with
	 * their last byte flipped (a body damaged on the way). */
	char damage_key[64];
	int damage_left;
};

static struct cstore *to_c(struct dcr_store *st)
{
	return (struct cstore *)st;
}

static int c_get(struct dcr_store *st, const char *key, uint64_t off,
		 uint64_t len, int64_t deadline, struct dcr_buf *out)
{
	struct cstore *c = to_c(st);

	if (!strncmp(key, "versions/", 9))
		c->gets_versions++;
	else if (!strncmp(key, "packs/", 6)) {
		c->gets_packs++;

		if (c->delay_us) {
			struct timespec ts = { 0, (long)c->delay_us * 1000 };
			nanosleep(&ts, NULL);
		}
	} else if (!strncmp(key, "tags/", 5))
		c->gets_tags++;
	if (c->fail_err && !strcmp(key, c->fail_key))
		return c->fail_err;
	size_t had = out->len;
	int ret = dcr_store_get_within(c->in, key, off, len, deadline, out);
	if (!ret && c->damage_left > 0 && !strcmp(key, c->damage_key) &&
	    out->len > had) {
		c->damage_left--;
		out->data[out->len - 1] ^= 0x40;
	}
	return ret;
}

static int c_put(struct dcr_store *st, const char *key, const void *data,
		 uint64_t len, int flags)
{
	return dcr_store_put(to_c(st)->in, key, data, len, flags);
}

static int c_head(struct dcr_store *st, const char *key, uint64_t *size)
{
	return dcr_store_head(to_c(st)->in, key, size);
}

static int c_list(struct dcr_store *st, const char *prefix, dcr_list_fn fn,
		  void *arg)
{
	to_c(st)->lists++;
	return dcr_store_list(to_c(st)->in, prefix, fn, arg);
}

static int c_del(struct dcr_store *st, const char *key)
{
	return dcr_store_del(to_c(st)->in, key);
}

static void c_close(struct dcr_store *st)
{
	struct cstore *c = to_c(st);

	dcr_store_close(c->in);
	free(c);
}

static const struct dcr_store_ops cstore_ops = {
	.name = "counting",
	.get = c_get,
	.put = c_put,
	.head = c_head,
	.list = c_list,
	.del = c_del,
	.close = c_close,
};

static void counts_reset(struct cstore *c)
{
	c->gets_versions = 0;
	c->gets_packs = 0;
	c->gets_tags = 0;
	c->lists = 0;
}

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

static void tver_free(struct tver *t)
{
	for (int i = 0; i < t->nfiles; i++)
		free(t->f[i].data);
	memset(t, 0, sizeof(*t));
}

/* Add a directory or (if !dir) a file of @size pseudo-random bytes. */
static struct tfile *add_file(struct tver *t, const char *path, int dir,
			      size_t size, uint64_t seed)
{
	struct tfile *f = &t->f[t->nfiles++];

	snprintf(f->path, sizeof(f->path), "%s", path);
	f->dir = dir;
	f->size = size;
	f->data = malloc(size ? size : 1);
	tu_fill(f->data, size, seed);
	return f;
}

/* @cur starts as a copy of @prev's tree (same paths, same bytes). */
static void copy_tree(struct tver *cur, const struct tver *prev)
{
	cur->nfiles = prev->nfiles;
	for (int i = 0; i < prev->nfiles; i++) {
		struct tfile *f = &cur->f[i];
		memset(f, 0, sizeof(*f));
		snprintf(f->path, sizeof(f->path), "%s", prev->f[i].path);
		f->dir = prev->f[i].dir;
		f->size = prev->f[i].size;
		f->data = malloc(f->size ? f->size : 1);
		memcpy(f->data, prev->f[i].data, f->size);
	}
}

/* Flip the low bits of @n random bytes of chunk @k (bf16-like updates). */
static void nudge(struct tfile *f, uint64_t k, int n, uint64_t seed)
{
	uint32_t len = dcr_chunk_len(f->size, CS, k);
	uint64_t s = seed;

	for (int i = 0; i < n; i++)
		f->data[k * CS + tu_rand(&s) % len] ^= (uint8_t)(1 + (i & 3));
}

/* Replace chunk @k by new, compressible bytes: the encoder then picks a
 * full frame (a delta against random bytes would not compress). */
static void rewrite(struct tfile *f, uint64_t k, uint64_t seed)
{
	uint32_t len = dcr_chunk_len(f->size, CS, k);

	for (uint32_t i = 0; i < len; i++)
		f->data[k * CS + i] = (uint8_t)((seed + i / 64) & 0xff);
}

static int find_path(const struct tver *t, const char *path)
{
	for (int i = 0; i < t->nfiles; i++)
		if (!strcmp(t->f[i].path, path))
			return i;
	return -1;
}

/*
 * Encode @cur (parent @prev, may be NULL) into frames, two packs and a
 * manifest, and publish it to @st. Files must be listed in path order.
 * With @garbage the manifest object is replaced by junk.
 */
/*
 * The manifest format publish() writes: g_format (1: as an older
 * dcrfs-commit) up to version g_format_from - 1 (when set), the current
 * format from there on. g_bad_xxh_v: that version's first chunk gets a
 * wrong check value (a committer or decoder that disagrees).
 */
static uint32_t g_format = DCR_MANIFEST_FORMAT;
static uint64_t g_format_from;
static uint64_t g_bad_xxh_v;
static uint64_t g_bad_chunk; /* the chunk that got it */

static void publish(struct dcr_store *st, struct tver *cur,
		    const struct tver *prev, enum bmode mode, int garbage)
{
	struct dcr_codec *codec = dcr_codec_new(0);
	struct dcr_buf pk[2], mb;
	struct dcr_manifest m;
	char key[128];
	int nframes = 0;

	assert_non_null(codec);
	dcr_buf_init(&pk[0], 1 << 26);
	dcr_buf_init(&pk[1], 1 << 26);
	memset(&m, 0, sizeof(m));
	m.format = g_format_from && cur->v >= g_format_from
			   ? DCR_MANIFEST_FORMAT : g_format;
	m.version = cur->v;
	m.parent = prev ? prev->v : 0;
	cur->parent = m.parent;
	m.ctime_ns = 1700000000000000000 + (int64_t)cur->v;
	m.chunk_size = CS;
	m.nfiles = (uint32_t)cur->nfiles;
	m.files = calloc((size_t)cur->nfiles, sizeof(*m.files));
	for (int i = 0; i < cur->nfiles; i++) {
		struct tfile *tf = &cur->f[i];
		struct dcr_file *f = &m.files[i];
		int pi = prev ? find_path(prev, tf->path) : -1;
		const struct tfile *pf = pi >= 0 ? &prev->f[pi] : NULL;

		f->path = strdup(tf->path);
		f->type = tf->dir ? DCR_FT_DIR : DCR_FT_REG;
		f->mode = tf->dir ? 0755 : 0644;
		f->mtime_ns = 1000 + i;
		f->base = DCR_NO_BASE;
		tf->base = DCR_NO_BASE;
		if (tf->dir)
			continue;
		if (pf && !pf->dir && pf->size == tf->size)
			f->base = tf->base = (uint32_t)pi;
		f->size = tf->size;
		dcr_sha256(tf->data, tf->size, f->sha256);
		f->nchunks = dcr_chunk_count(tf->size, CS);
		assert_true(f->nchunks <= 64);
		f->chunks = calloc(f->nchunks ? f->nchunks : 1,
				   sizeof(*f->chunks));
		for (uint64_t k = 0; k < f->nchunks; k++) {
			struct dcr_chunk_ref *r = &f->chunks[k];
			uint32_t len = dcr_chunk_len(tf->size, CS, k);
			const uint8_t *c = tf->data + k * CS;
			const uint8_t *b = f->base != DCR_NO_BASE ?
						   pf->data + k * CS : NULL;
			int kind;
			struct dcr_buf *p;

			dcr_sha256(c, len, r->hash);
			dcr_xxh128(c, len, r->xxh);
			if (b && mode == B_AUTO && !memcmp(b, c, len)) {
				r->kind = tf->kind[k] = DCR_CK_SAME;
				continue;
			}
			p = &pk[nframes % 2];
			r->pack = tf->pack[k] = (uint32_t)(nframes % 2);
			r->off = tf->off[k] = p->len;
			assert_int_equal(dcr_frame_encode(codec, c,
							  mode == B_FULL ? NULL : b,
							  len, p, &kind), 0);
			r->len = tf->flen[k] = (uint32_t)(p->len - r->off);
			dcr_sha256(p->data + r->off, r->len, r->fhash);
			if (cur->v == g_bad_xxh_v && i == 1 &&
			    g_bad_chunk == UINT64_MAX) {
				r->xxh[3] ^= 0x10;
				g_bad_chunk = k;
			}
			r->kind = tf->kind[k] = (uint8_t)kind;
			nframes++;
		}
	}
	cur->npacks = nframes == 0 ? 0 : nframes == 1 ? 1 : 2;
	m.npacks = cur->npacks;
	m.packs = calloc(2, DCR_HASH_LEN);
	for (uint32_t i = 0; i < cur->npacks; i++) {
		dcr_sha256(pk[i].data, pk[i].len, cur->packs[i]);
		memcpy(m.packs[i], cur->packs[i], DCR_HASH_LEN);
		dcr_pack_key(cur->packs[i], key, sizeof(key));
		assert_int_equal(dcr_store_put(st, key, pk[i].data, pk[i].len,
					       0), 0);
	}
	assert_int_equal(dcr_manifest_validate(&m), 0);
	dcr_buf_init(&mb, 1 << 26);
	assert_int_equal(dcr_manifest_encode(&m, &mb), 0);
	if (garbage)
		memset(mb.data + mb.len / 2, 0x5a, 8);
	dcr_version_key(cur->v, key, sizeof(key));
	assert_int_equal(dcr_store_put(st, key, mb.data, mb.len,
				       DCR_PUT_IF_ABSENT), 0);
	dcr_buf_free(&mb);
	dcr_buf_free(&pk[0]);
	dcr_buf_free(&pk[1]);
	dcr_manifest_free(&m);
	dcr_codec_free(codec);
}

/* ------------------------------------------------------------ fixture */

struct fx {
	char *root;
	char store_dir[PATH_MAX];
	char cache_dir[PATH_MAX];
	struct cstore *cs;
	struct dcr_store *st;
	struct dcr_reader *r;
	int fetch_threads; /* for open_reader; 0 = default */
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

static void open_store(struct fx *f)
{
	struct dcr_store *in;

	struct dcr_store_info info;
	int ret;

	assert_int_equal(dcr_dir_open(f->store_dir, 1, &in), 0);
	ret = dcr_store_init(in, &info); /* as dcrfs-commit --init does */
	assert_true(ret == 0 || ret == -EEXIST);
	f->cs = calloc(1, sizeof(*f->cs));
	f->cs->base.ops = &cstore_ops;
	f->cs->base.url = in->url;
	f->cs->in = in;
	f->st = &f->cs->base;
}

static void open_reader(struct fx *f, uint64_t budget)
{
	struct dcr_reader_opts o = {
		.cache_dir = f->cache_dir,
		.cache_size = budget,
		.fetch_threads = f->fetch_threads,
		.readahead = f->readahead ? f->readahead : -1,
		.coalesce_max = f->coalesce_max ? f->coalesce_max : 1,
		.retry_bad_ms = f->retry_bad_ms,
		.max_trees = f->max_trees,
		.relist_ms = f->relist_ms,
	};

	assert_int_equal(dcr_reader_open(f->st, &o, &f->r), 0);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	f->root = tu_mkdtemp("reader");
	snprintf(f->store_dir, sizeof(f->store_dir), "%s/store", f->root);
	snprintf(f->cache_dir, sizeof(f->cache_dir), "%s/cache/sub", f->root);
	open_store(f);
	f->cached = calloc(4096, DCR_HASH_LEN);
	log_reset();
	g_format = DCR_MANIFEST_FORMAT;
	g_format_from = 0;
	g_bad_xxh_v = 0;
	g_bad_chunk = UINT64_MAX;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	dcr_reader_close(f->r);
	dcr_store_close(f->st);
	for (int i = 0; i <= MAXV; i++)
		tver_free(&f->v[i]);
	free(f->cached);
	tu_rm_rf(f->root);
	free(f->root);
	free(f);
	return 0;
}

/* v1: a/, a/w.bin (6 chunks, short tail), b.bin (3 full chunks), empty,
 * tiny; then v2..v5 as a mix of SAME, DELTA and FULL chunks. */
static void build_chain(struct fx *f, int nv)
{
	struct tfile *w, *b;

	f->v[1].v = 1;
	add_file(&f->v[1], "a", 1, 0, 0);
	add_file(&f->v[1], "a/w.bin", 0, 5 * CS + 100, 11);
	add_file(&f->v[1], "b.bin", 0, 3 * CS, 12);
	add_file(&f->v[1], "empty", 0, 0, 13);
	add_file(&f->v[1], "tiny", 0, 10, 14);
	publish(f->st, &f->v[1], NULL, B_AUTO, 0);
	f->nv = 1;
	for (int v = 2; v <= nv; v++) {
		struct tver *t = &f->v[v];
		enum bmode mode = v == 4 ? B_DELTA_ALL : B_AUTO;

		t->v = (uint64_t)v;
		copy_tree(t, &f->v[v - 1]);
		w = &t->f[1];
		b = &t->f[2];
		if (mode == B_DELTA_ALL) {
			/* Every chunk changes: a delta frame of nothing would
			 * rebuild bytes an older version has at the same
			 * place, which only a cache addressed by content
			 * finds without fetching it. */
			for (int i = 0; i < t->nfiles; i++)
				for (uint64_t k = 0; !t->f[i].dir &&
				     k < dcr_chunk_count(t->f[i].size, CS); k++)
					nudge(&t->f[i], k, 1,
					      (uint64_t)v * 1000 + k + 7);
		}
		nudge(w, 0, 20, (uint64_t)v * 100);
		if (v % 2 == 0)
			nudge(w, 3, 5, (uint64_t)v * 100 + 3);
		if (v == 3)
			rewrite(w, 2, 777); /* becomes a full frame */
		nudge(w, 5, 3, (uint64_t)v * 100 + 5);
		if (v == 5)
			nudge(b, 1, 7, 555);
		/* Chunk 4 of w.bin and most of b.bin never change: SAME. */
		publish(f->st, t, &f->v[v - 1], mode, 0);
		f->nv = v;
	}
}

/* Read entry @idx of version @v whole, in one call, and compare. */
static void check_file(struct fx *f, uint64_t v, uint32_t idx)
{
	const struct tfile *tf = &f->v[v].f[idx - 1];
	uint8_t *buf = malloc(tf->size + 16);
	ssize_t n = dcr_reader_read(f->r, v, idx, 0, buf, tf->size + 16);

	assert_int_equal(n, (ssize_t)tf->size);
	assert_memory_equal(buf, tf->data, tf->size);
	free(buf);
}

static void check_version(struct fx *f, uint64_t v)
{
	for (int i = 0; i < f->v[v].nfiles; i++)
		if (!f->v[v].f[i].dir)
			check_file(f, v, (uint32_t)i + 1);
}

/* ------------------------------------------------- expected fetch counts */

static int is_cached(const struct fx *f, const uint8_t h[DCR_HASH_LEN])
{
	for (size_t i = 0; i < f->ncached; i++)
		if (!memcmp(f->cached[i], h, DCR_HASH_LEN))
			return 1;
	return 0;
}

static void chunk_hash(const struct tver *t, int fi, uint64_t k,
		       uint8_t h[DCR_HASH_LEN])
{
	const struct tfile *tf = &t->f[fi];

	dcr_sha256(tf->data + k * CS, dcr_chunk_len(tf->size, CS, k), h);
}

/* Frames the reader must fetch for chunk @k of file @fi of @v, given
 * the chunks in f->cached; marks the result cached. */
static unsigned expect_chunk(struct fx *f, uint64_t v, int fi, uint64_t k)
{
	uint8_t h[DCR_HASH_LEN];
	unsigned n = 0;

	chunk_hash(&f->v[v], fi, k, h);
	if (is_cached(f, h))
		return 0;
	for (uint64_t cur = v;;) {
		const struct tfile *tf = &f->v[cur].f[fi];
		uint8_t ch[DCR_HASH_LEN];

		chunk_hash(&f->v[cur], fi, k, ch);
		if (cur != v && is_cached(f, ch))
			break;
		if (tf->kind[k] == DCR_CK_FULL) {
			n++;
			break;
		}
		if (tf->kind[k] == DCR_CK_DELTA)
			n++;
		fi = (int)tf->base;
		cur = f->v[cur].parent;
	}
	memcpy(f->cached[f->ncached++], h, DCR_HASH_LEN);
	return n;
}

static unsigned expect_version(struct fx *f, uint64_t v)
{
	unsigned n = 0;

	for (int i = 0; i < f->v[v].nfiles; i++) {
		const struct tfile *tf = &f->v[v].f[i];
		if (tf->dir)
			continue;
		for (uint64_t k = 0; k < dcr_chunk_count(tf->size, CS); k++)
			n += expect_chunk(f, v, i, k);
	}
	return n;
}

/* ------------------------------------------------------------ tests */

static void test_tree_and_boundaries(void **state)
{
	struct fx *f = *state;
	const struct dcr_version_info *vi;
	const struct tfile *w;
	uint8_t buf[3 * CS];
	uint64_t latest = 99, *vs;
	size_t nvs;

	build_chain(f, 1);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_latest(f->r), 0);
	assert_int_equal(dcr_reader_version(f->r, 1, &vi), -ENOENT);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 1);
	assert_int_equal(dcr_reader_versions(f->r, &vs, &nvs), 0);
	assert_int_equal(nvs, 1);
	assert_int_equal(vs[0], 1);
	free(vs);

	/* The tree: root, a/, a/w.bin, b.bin, empty, tiny. */
	assert_int_equal(dcr_reader_version(f->r, 1, &vi), 0);
	assert_int_equal(vi->version, 1);
	assert_int_equal(vi->parent, 0);
	assert_int_equal(vi->chunk_size, CS);
	assert_int_equal(vi->nentries, 6);
	assert_string_equal(vi->entries[0].path, "");
	assert_int_equal(vi->entries[0].type, DCR_FT_DIR);
	assert_int_equal(vi->entries[0].first_child, 1);
	assert_string_equal(vi->entries[1].name, "a");
	assert_int_equal(vi->entries[1].first_child, 2);
	assert_int_equal(vi->entries[1].next_sibling, 3);
	assert_string_equal(vi->entries[2].path, "a/w.bin");
	assert_string_equal(vi->entries[2].name, "w.bin");
	assert_int_equal(vi->entries[2].parent, 1);
	assert_int_equal(vi->entries[2].next_sibling, UINT32_MAX);
	assert_int_equal(vi->entries[2].size, 5 * CS + 100);
	assert_int_equal(vi->entries[2].mode, 0644);
	assert_int_equal(vi->entries[3].next_sibling, 4);
	assert_int_equal(vi->entries[5].parent, 0);
	assert_int_equal(vi->entries[5].next_sibling, UINT32_MAX);
	{
		const struct dcr_version_info *again;
		assert_int_equal(dcr_reader_version(f->r, 1, &again), 0);
		assert_ptr_equal(again, vi); /* stable pointers */
	}

	w = &f->v[1].f[1];
	/* First byte, last byte of chunk 0, first of chunk 1. */
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 0, buf, 1), 1);
	assert_int_equal(buf[0], w->data[0]);
	assert_int_equal(dcr_reader_read(f->r, 1, 2, CS - 1, buf, 1), 1);
	assert_int_equal(buf[0], w->data[CS - 1]);
	assert_int_equal(dcr_reader_read(f->r, 1, 2, CS, buf, 1), 1);
	assert_int_equal(buf[0], w->data[CS]);
	/* A range spanning three chunks. */
	assert_int_equal(dcr_reader_read(f->r, 1, 2, CS - 10, buf, 2 * CS + 20),
			 2 * CS + 20);
	assert_memory_equal(buf, w->data + CS - 10, 2 * CS + 20);
	/* The short last chunk, its last byte, a read running past EOF. */
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 5 * CS + 99, buf, 1), 1);
	assert_int_equal(buf[0], w->data[5 * CS + 99]);
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 5 * CS, buf, 3 * CS), 100);
	assert_memory_equal(buf, w->data + 5 * CS, 100);
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 5 * CS + 100, buf, 10), 0);
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 1ull << 40, buf, 10), 0);
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 0, buf, 0), 0);
	/* A file that is an exact multiple of the chunk size. */
	assert_int_equal(dcr_reader_read(f->r, 1, 3, 2 * CS, buf, CS + 5), CS);
	assert_memory_equal(buf, f->v[1].f[2].data + 2 * CS, CS);
	/* Empty and tiny files. */
	assert_int_equal(dcr_reader_read(f->r, 1, 4, 0, buf, 10), 0);
	assert_int_equal(dcr_reader_read(f->r, 1, 5, 0, buf, 100), 10);
	assert_memory_equal(buf, f->v[1].f[4].data, 10);
	assert_int_equal(dcr_reader_read(f->r, 1, 5, 3, buf, 2), 2);
	assert_memory_equal(buf, f->v[1].f[4].data + 3, 2);
	/* Errors. */
	assert_int_equal(dcr_reader_read(f->r, 1, 0, 0, buf, 1), -EISDIR);
	assert_int_equal(dcr_reader_read(f->r, 1, 1, 0, buf, 1), -EISDIR);
	assert_int_equal(dcr_reader_read(f->r, 1, 6, 0, buf, 1), -ENOENT);
	assert_int_equal(dcr_reader_read(f->r, 2, 1, 0, buf, 1), -ENOENT);
	assert_int_equal(log_errors, 0);
}

static void test_chain_cold_and_cached_base(void **state)
{
	struct fx *f = *state;
	unsigned kinds[3] = { 0, 0, 0 }, want;

	build_chain(f, 5);
	for (int v = 2; v <= 5; v++)
		for (int i = 0; i < f->v[v].nfiles; i++)
			for (int k = 0; k < 6; k++)
				if (!f->v[v].f[i].dir &&
				    (uint64_t)k < dcr_chunk_count(f->v[v].f[i].size, CS))
					kinds[f->v[v].f[i].kind[k]]++;
	/* The chain really mixes all three kinds. */
	assert_true(kinds[DCR_CK_SAME] > 0);
	assert_true(kinds[DCR_CK_DELTA] > 0);
	assert_true(kinds[DCR_CK_FULL] > 0);
	assert_int_equal(f->v[3].f[1].kind[2], DCR_CK_FULL);
	assert_int_equal(f->v[4].f[2].kind[0], DCR_CK_DELTA);

	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	assert_int_equal(dcr_reader_latest(f->r), 5);
	assert_int_equal(f->cs->gets_versions, 5);

	/* Cold: v3 first, then v5 from v3's cached chunks (fewer frames
	 * than a cold walk), then everything else. */
	counts_reset(f->cs);
	want = expect_version(f, 3);
	check_version(f, 3);
	assert_int_equal(f->cs->gets_packs, want);

	counts_reset(f->cs);
	want = expect_version(f, 5);
	check_version(f, 5);
	assert_int_equal(f->cs->gets_packs, want);

	for (uint64_t v = 1; v <= 5; v++) {
		dcr_reader_sync(f->r);
		counts_reset(f->cs);
		want = expect_version(f, v);
		check_version(f, v);
		dcr_reader_sync(f->r);
		assert_int_equal(f->cs->gets_packs, want);
	}
	/* Everything is cached now: no more fetches. */
	counts_reset(f->cs);
	for (uint64_t v = 1; v <= 5; v++)
		check_version(f, v);
	assert_int_equal(f->cs->gets_packs, 0);
	assert_int_equal(log_errors, 0);
}

static void test_chain_fully_cold(void **state)
{
	struct fx *f = *state;
	unsigned want;

	build_chain(f, 5);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	counts_reset(f->cs);
	want = expect_version(f, 5);
	check_version(f, 5);
	assert_int_equal(f->cs->gets_packs, want);
	/* Random ranges across all versions. */
	for (int i = 0; i < 200; i++) {
		uint64_t s = (uint64_t)i + 1;
		uint64_t v = 1 + tu_rand(&s) % 5;
		const struct tfile *tf = &f->v[v].f[1];
		uint64_t off = tu_rand(&s) % (tf->size + 10);
		size_t len = (size_t)(tu_rand(&s) % (3 * CS));
		uint8_t buf[3 * CS];
		size_t exp = off >= tf->size ? 0 : DCR_MIN(len, tf->size - off);

		assert_int_equal(dcr_reader_read(f->r, v, 2, off, buf, len),
				 (ssize_t)exp);
		assert_memory_equal(buf, tf->data + (off < tf->size ? off : 0),
				    exp);
	}
}

static uint64_t trees_loaded(struct fx *f)
{
	struct dcr_reader_stats s;

	dcr_reader_sync(f->r);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0); /* trims */
	dcr_reader_get_stats(f->r, &s);
	assert_int_equal(s.versions, 5);
	return s.trees_loaded;
}

/* With max_trees, the trees nobody holds are unloaded once the reader
 * is idle, a pinned one never, and an unloaded one reads as before. */
static void test_trees_unloaded(void **state)
{
	struct fx *f = *state;
	const struct dcr_version_info *vi;
	struct dcr_reader_stats s;

	build_chain(f, 5);
	f->max_trees = 2;
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	for (uint64_t v = 1; v <= 5; v++)
		check_version(f, v);
	assert_int_equal(trees_loaded(f), 2);

	/* v1 pinned: kept however old; its tree stays usable */
	assert_int_equal(dcr_reader_version(f->r, 1, &vi), 0);
	for (uint64_t v = 2; v <= 5; v++)
		check_version(f, v);
	assert_int_equal(trees_loaded(f), 2);
	assert_int_equal(vi->version, 1);
	assert_int_equal(vi->nentries, (uint32_t)f->v[1].nfiles + 1);
	assert_string_equal(vi->entries[1].path, f->v[1].f[0].path);
	dcr_reader_version_put(f->r, vi);
	check_version(f, 4);
	check_version(f, 5);
	assert_int_equal(trees_loaded(f), 2);

	/* unloaded ones load again from the catalog, bit-exact */
	counts_reset(f->cs);
	for (uint64_t v = 1; v <= 5; v++)
		check_version(f, v);
	assert_int_equal(f->cs->gets_versions, 0);
	dcr_reader_get_stats(f->r, &s);
	assert_true(s.chunk_hits > 0 && s.bytes_verified > 0 && s.bytes_read > 0);
	assert_int_equal(s.read_errors, 0);
	assert_int_equal(log_errors, 0);
}

static void test_reopen_no_refetch(void **state)
{
	struct fx *f = *state;
	uint64_t latest = 0;

	/* Three versions of SAME, delta and full chunks (v4 of build_chain
	 * is all-delta, whose unchanged chunks only a cache addressed by
	 * content would share). */
	build_chain(f, 3);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	for (uint64_t v = 1; v <= 3; v++)
		check_version(f, v);
	dcr_reader_close(f->r);
	f->r = NULL;

	/* Reopen: the catalog and cache survive; no manifest and no pack
	 * is fetched again. */
	counts_reset(f->cs);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_latest(f->r), 3);
	for (uint64_t v = 1; v <= 3; v++)
		check_version(f, v);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 3);
	assert_int_equal(f->cs->gets_versions, 0);
	assert_int_equal(f->cs->gets_packs, 0);

	/* A new version after the restart: only its manifest is fetched,
	 * and reading it needs only its own frames (v3 is cached). */
	f->v[4].v = 4;
	copy_tree(&f->v[4], &f->v[3]);
	nudge(&f->v[4].f[1], 1, 4, 4242);
	publish(f->st, &f->v[4], &f->v[3], B_AUTO, 0);
	counts_reset(f->cs);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 4);
	assert_int_equal(f->cs->gets_versions, 2); /* v4, probe of v5 */
	check_version(f, 4);
	assert_int_equal(f->cs->gets_packs, 1);
	assert_int_equal(log_errors, 0);
}

/* Flip a byte in the payload of the frame of (version, file, chunk). */
static void corrupt_frame(struct fx *f, uint64_t v, int fi, uint64_t k,
			  uint32_t at, char *key_out, size_t cap)
{
	const struct tfile *tf = &f->v[v].f[fi];
	struct dcr_buf b;

	dcr_pack_key(f->v[v].packs[tf->pack[k]], key_out, cap);
	dcr_buf_init(&b, 1 << 26);
	assert_int_equal(dcr_store_get(f->st, key_out, 0, DCR_GET_ALL, &b), 0);
	assert_true(at < tf->flen[k]);
	b.data[tf->off[k] + at] ^= 0x40;
	assert_int_equal(dcr_store_put(f->st, key_out, b.data, b.len, 0), 0);
	dcr_buf_free(&b);
}

static void test_corrupt_pack(void **state)
{
	struct fx *f = *state;
	uint8_t buf[CS];
	char key[128];

	build_chain(f, 1);
	/* Chunk 3 of a/w.bin: a stored full frame of random bytes. */
	corrupt_frame(f, 1, 1, 3, DCR_FRAME_HDR_LEN + 100, key, sizeof(key));
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	log_reset();
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 3 * CS + 5, buf, 10),
			 -EIO);
	assert_int_equal(log_errors, 1);
	assert_non_null(strstr(log_last, key));
	assert_non_null(strstr(log_last, "a/w.bin"));
	/* Still failing (never cached), still one line per failed read. */
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 3 * CS, buf, CS), -EIO);
	assert_int_equal(log_errors, 2);
	/* A read spanning it fails as a whole. */
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 2 * CS, buf, CS + 1),
			 -EIO);
	/* Everything else stays readable, frames in the same pack too. */
	log_reset();
	check_file(f, 1, 3);
	check_file(f, 1, 5);
	assert_int_equal(f->v[1].f[1].pack[1], f->v[1].f[1].pack[3]);
	assert_int_equal(f->v[1].f[1].pack[5], f->v[1].f[1].pack[3]);
	assert_int_equal(dcr_reader_read(f->r, 1, 2, CS, buf, CS), CS);
	assert_memory_equal(buf, f->v[1].f[1].data + CS, CS);
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 5 * CS, buf, CS), 100);
	assert_memory_equal(buf, f->v[1].f[1].data + 5 * CS, 100);
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 4 * CS, buf, CS), CS);
	assert_memory_equal(buf, f->v[1].f[1].data + 4 * CS, CS);
	assert_int_equal(log_errors, 0);

	/* A broken frame header is caught by the decoder. */
	corrupt_frame(f, 1, 2, 0, 1, key, sizeof(key));
	assert_int_equal(dcr_reader_read(f->r, 1, 3, 0, buf, 1), 0 + 1);
	/* (b.bin chunk 0 was cached by check_file above; a fresh reader
	 * has to fetch it and fails.) */
	dcr_reader_close(f->r);
	f->r = NULL;
	tu_rm_rf(f->cache_dir);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	log_reset();
	assert_int_equal(dcr_reader_read(f->r, 1, 3, 0, buf, 1), -EIO);
	assert_int_equal(log_errors, 1);
	assert_non_null(strstr(log_last, key));
}

static void test_corrupt_delta_in_chain(void **state)
{
	struct fx *f = *state;
	uint8_t buf[CS];
	char key[128];

	build_chain(f, 4);
	/* v4 is all deltas; break the one of b.bin chunk 0 in v2?
	 * b.bin is SAME in v2/v3, DELTA in v4: corrupt v4's delta. */
	assert_int_equal(f->v[4].f[2].kind[0], DCR_CK_DELTA);
	corrupt_frame(f, 4, 2, 0, f->v[4].f[2].flen[0] - 1, key, sizeof(key));
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	log_reset();
	assert_int_equal(dcr_reader_read(f->r, 4, 3, 0, buf, CS), -EIO);
	assert_int_equal(log_errors, 1);
	assert_non_null(strstr(log_last, key));
	/* The same chunk of v1..v3 is fine (and v4's other chunks). */
	check_file(f, 3, 3);
	assert_int_equal(dcr_reader_read(f->r, 4, 3, CS, buf, CS), CS);
	assert_memory_equal(buf, f->v[4].f[2].data + CS, CS);
}

static void test_missing_pack(void **state)
{
	struct fx *f = *state;
	uint8_t buf[CS];
	char key[128];

	build_chain(f, 2);
	/* v2's packs hold only deltas of w.bin; delete the first. */
	dcr_pack_key(f->v[2].packs[0], key, sizeof(key));
	assert_int_equal(dcr_store_del(f->st, key), 0);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	log_reset();
	/* The first frame of v2 (chunk 0 of w.bin) is in pack 0. */
	assert_int_equal(f->v[2].f[1].pack[0], 0);
	assert_int_equal(dcr_reader_read(f->r, 2, 2, 0, buf, CS), -EIO);
	assert_int_equal(log_errors, 1);
	assert_non_null(strstr(log_last, key));
	/* v1 and v2's unchanged files still read. */
	log_reset();
	check_version(f, 1);
	check_file(f, 2, 3);
	assert_int_equal(dcr_reader_read(f->r, 2, 2, 4 * CS, buf, CS), CS);
	assert_memory_equal(buf, f->v[2].f[1].data + 4 * CS, CS);
	assert_int_equal(log_errors, 0);
}

/*
 * The slab holding file @fi (tver index) of version @v in the reader's
 * private cache: <cache_dir>/<id>/slabs/v<version>.f<manifest index>.
 * Chunk k is at k * CS in it.
 */
static void cache_file(struct fx *f, uint64_t v, int fi, char *path,
		       size_t cap)
{
	uint8_t id[DCR_HASH_LEN];
	char idhex[DCR_HASH_HEX_LEN + 1];

	dcr_sha256(f->st->url, strlen(f->st->url), id);
	dcr_hash_hex(id, idhex);
	idhex[16] = 0;
	/* Manifest index = tver index: files are added in path order. */
	snprintf(path, cap, "%.3000s/%s/slabs/v%010llu.f%d", f->cache_dir,
		 idhex, (unsigned long long)v, fi);
}

/* Whether chunk @k of file @fi of @v is in its slab with the right
 * bytes. */
static bool in_slab(struct fx *f, uint64_t v, int fi, uint64_t k)
{
	const struct tfile *tf = &f->v[v].f[fi];
	uint32_t n = dcr_chunk_len(tf->size, CS, k);
	char path[PATH_MAX];
	uint8_t buf[CS];
	int fd;
	bool ok;

	cache_file(f, v, fi, path, sizeof(path));
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return false;
	ok = pread(fd, buf, n, (off_t)(k * CS)) == (ssize_t)n &&
	     memcmp(buf, tf->data + k * CS, n) == 0;
	close(fd);
	return ok;
}

static void test_corrupt_cache_file(void **state)
{
	struct fx *f = *state;
	char path[PATH_MAX];
	struct stat sb;
	uint8_t byte;
	int fd;

	build_chain(f, 2);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	check_version(f, 2);
	dcr_reader_close(f->r);
	f->r = NULL;

	/* Private layout: <cache_dir>/<id>/{catalog.db,slabs/...}. Flip a
	 * byte of v2's chunk 0 of a/w.bin in its slab. */
	assert_true(in_slab(f, 2, 1, 0));
	cache_file(f, 2, 1, path, sizeof(path));
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &byte, 1, 17), 1);
	byte ^= 0xff;
	assert_int_equal(pwrite(fd, &byte, 1, 17), 1);
	close(fd);
	assert_false(in_slab(f, 2, 1, 0));
	snprintf(path, sizeof(path), "%s", f->cache_dir);
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0700);

	counts_reset(f->cs);
	open_reader(f, 0);
	log_reset();
	check_version(f, 2); /* detected, punched out, fetched again */
	assert_true(f->cs->gets_packs >= 1);
	assert_int_equal(log_errors, 0);
	/* And cached again (behind the read), correctly. */
	dcr_reader_sync(f->r);
	assert_true(in_slab(f, 2, 1, 0));
}

/* Bytes allocated to the files below @dir (slabs are sparse). */
static long long dir_bytes(const char *dir)
{
	char cmd[PATH_MAX + 128];
	long long n = -1;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "find '%s' -type f -printf '%%b\\n' | "
		 "awk '{s+=$1 * 512} END {print s+0}'", dir);
	p = popen(cmd, "r");
	if (p) {
		if (fscanf(p, "%lld", &n) != 1)
			n = -1;
		pclose(p);
	}
	return n;
}

static void test_tiny_budget(void **state)
{
	struct fx *f = *state;
	char chunks[PATH_MAX];
	uint8_t id[DCR_HASH_LEN];
	char idhex[DCR_HASH_HEX_LEN + 1];

	build_chain(f, 5);
	f->fetch_threads = 1; /* the sequential path */
	open_reader(f, 2 * CS);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	for (int round = 0; round < 2; round++)
		for (uint64_t v = 5; v >= 1; v--)
			check_version(f, v);
	dcr_reader_sync(f->r); /* the cache is written behind the reads */
	dcr_sha256(f->st->url, strlen(f->st->url), id);
	dcr_hash_hex(id, idhex);
	idhex[16] = 0;
	snprintf(chunks, sizeof(chunks), "%.3000s/%s/slabs", f->cache_dir,
		 idhex);
	assert_int_equal(access(chunks, F_OK), 0);
	assert_true(dir_bytes(chunks) <= 2 * CS);
	assert_int_equal(log_errors, 0);
}

struct rd {
	struct fx *f;
	pthread_barrier_t *bar;
	uint64_t v;
	uint32_t idx;
	uint64_t off;
	size_t len;
	uint8_t *buf;
	ssize_t ret;
	int random;
	int errors;
};

static void *reader_main(void *arg)
{
	struct rd *a = arg;

	pthread_barrier_wait(a->bar);
	if (!a->random) {
		a->ret = dcr_reader_read(a->f->r, a->v, a->idx, a->off, a->buf,
					 a->len);
		return NULL;
	}
	for (int i = 0; i < 100; i++) {
		uint64_t s = (uint64_t)i * 31 + a->v;
		uint64_t v = 1 + tu_rand(&s) % 5;
		int fi = 1 + (int)(tu_rand(&s) % 2);
		const struct tfile *tf = &a->f->v[v].f[fi];
		uint64_t off = tu_rand(&s) % tf->size;
		size_t len = (size_t)(tu_rand(&s) % (2 * CS));
		size_t exp = DCR_MIN(len, tf->size - off);
		ssize_t n = dcr_reader_read(a->f->r, v, (uint32_t)fi + 1, off,
					    a->buf, len);

		if (n != (ssize_t)exp || memcmp(a->buf, tf->data + off, exp))
			a->errors++;
	}
	return NULL;
}

static void test_concurrent_same_chunk(void **state)
{
	struct fx *f = *state;
	pthread_barrier_t bar;
	pthread_t th[8];
	struct rd a[8];
	unsigned want;

	build_chain(f, 5);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	/* Slow pack gets so that all eight readers overlap. */
	f->cs->delay_us = 20000;
	counts_reset(f->cs);
	want = expect_chunk(f, 5, 1, 0);
	assert_true(want >= 2);
	pthread_barrier_init(&bar, NULL, 8);
	for (int i = 0; i < 8; i++) {
		a[i] = (struct rd){ .f = f, .bar = &bar, .v = 5, .idx = 2,
				    .off = (uint64_t)i * 100, .len = 1000 };
		a[i].buf = malloc(a[i].len);
		assert_int_equal(pthread_create(&th[i], NULL, reader_main,
						&a[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(a[i].ret, 1000);
		assert_memory_equal(a[i].buf, f->v[5].f[1].data + i * 100, 1000);
		free(a[i].buf);
	}
	pthread_barrier_destroy(&bar);
	/* One fetch of each frame on the chain, shared by all eight. */
	assert_int_equal(f->cs->gets_packs, want);
	assert_int_equal(log_errors, 0);
}

static void test_concurrent_random(void **state)
{
	struct fx *f = *state;
	pthread_barrier_t bar;
	pthread_t th[8];
	struct rd a[8];

	build_chain(f, 5);
	open_reader(f, 3 * CS); /* tiny: evictions race with reads */
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	pthread_barrier_init(&bar, NULL, 8);
	for (int i = 0; i < 8; i++) {
		a[i] = (struct rd){ .f = f, .bar = &bar, .v = (uint64_t)i,
				    .random = 1 };
		a[i].buf = malloc(2 * CS);
		assert_int_equal(pthread_create(&th[i], NULL, reader_main,
						&a[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(a[i].errors, 0);
		free(a[i].buf);
	}
	pthread_barrier_destroy(&bar);
	assert_int_equal(log_errors, 0);
}

static void test_tags(void **state)
{
	struct fx *f = *state;
	struct dcr_tag *tags;
	size_t n;

	build_chain(f, 3);
	assert_int_equal(dcr_store_put_tag(f->st, "stable", 2), 0);
	assert_int_equal(dcr_store_put_tag(f->st, "best", 3), 0);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_tags(f->r, &tags, &n), 0);
	assert_int_equal(n, 0);
	dcr_reader_tags_free(tags, n);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	assert_int_equal(dcr_reader_tags(f->r, &tags, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(tags[0].name, "best");
	assert_int_equal(tags[0].version, 3);
	assert_string_equal(tags[1].name, "stable");
	assert_int_equal(tags[1].version, 2);
	dcr_reader_tags_free(tags, n);

	/* Moved and deleted tags show at the next refresh. */
	assert_int_equal(dcr_store_put_tag(f->st, "stable", 3), 0);
	assert_int_equal(dcr_store_del(f->st, "tags/best"), 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	assert_int_equal(dcr_reader_tags(f->r, &tags, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(tags[0].name, "stable");
	assert_int_equal(tags[0].version, 3);
	dcr_reader_tags_free(tags, n);

	/* They survive a restart, before any refresh. */
	dcr_reader_close(f->r);
	f->r = NULL;
	open_reader(f, 0);
	assert_int_equal(dcr_reader_tags(f->r, &tags, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(tags[0].version, 3);
	dcr_reader_tags_free(tags, n);
}

static void test_refresh_probes(void **state)
{
	struct fx *f = *state;
	uint64_t latest = 0;

	build_chain(f, 2);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 2);
	assert_int_equal(f->cs->lists, 3); /* versions/, tags/, layouts/ */

	/* Nothing new: one cheap probe of v3, no listing of versions/. */
	counts_reset(f->cs);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 2);
	assert_int_equal(f->cs->gets_versions, 1);
	assert_int_equal(f->cs->lists, 1); /* tags/ only */

	/* Two new versions at once, an anchor (all full) and a child. */
	f->v[3].v = 3;
	copy_tree(&f->v[3], &f->v[2]);
	nudge(&f->v[3].f[1], 2, 10, 303);
	publish(f->st, &f->v[3], &f->v[2], B_FULL, 0);
	f->v[4].v = 4;
	copy_tree(&f->v[4], &f->v[3]);
	nudge(&f->v[4].f[1], 2, 10, 404);
	publish(f->st, &f->v[4], &f->v[3], B_AUTO, 0);
	counts_reset(f->cs);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 4);
	assert_int_equal(dcr_reader_latest(f->r), 4);
	assert_int_equal(f->cs->gets_versions, 3);
	counts_reset(f->cs);
	f->nv = 4;
	check_version(f, 4);
	/* From cold, v4 needs at most two frames per chunk (anchor v3). */
	assert_true(f->cs->gets_packs <= 2 * 11);
	check_version(f, 2);
	assert_int_equal(log_errors, 0);
}

static void test_corrupt_manifest_and_missing_parent(void **state)
{
	struct fx *f = *state;
	uint64_t *vs, latest = 0;
	size_t n;
	uint8_t buf[CS];
	const struct dcr_version_info *vi;

	build_chain(f, 2);
	/* v3 is published corrupt; v4 (parent 2) and v5 (parent 3) fine. */
	f->v[3].v = 3;
	copy_tree(&f->v[3], &f->v[2]);
	nudge(&f->v[3].f[1], 0, 10, 3030);
	publish(f->st, &f->v[3], &f->v[2], B_AUTO, 1);
	f->v[4].v = 4;
	copy_tree(&f->v[4], &f->v[2]);
	nudge(&f->v[4].f[1], 0, 10, 4040);
	publish(f->st, &f->v[4], &f->v[2], B_AUTO, 0);
	f->v[5].v = 5;
	copy_tree(&f->v[5], &f->v[3]);
	rewrite(&f->v[5].f[1], 1, 5050); /* full frame: needs no parent */
	nudge(&f->v[5].f[1], 0, 10, 5051); /* delta: needs v3 */
	publish(f->st, &f->v[5], &f->v[3], B_AUTO, 0);

	open_reader(f, 0);
	log_reset();
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 5);
	assert_int_equal(log_errors, 1); /* v3, once */
	assert_non_null(strstr(log_last, "versions/0000000003"));
	assert_int_equal(dcr_reader_versions(f->r, &vs, &n), 0);
	assert_int_equal(n, 4);
	assert_int_equal(vs[0], 1);
	assert_int_equal(vs[1], 2);
	assert_int_equal(vs[2], 4);
	assert_int_equal(vs[3], 5);
	free(vs);
	assert_int_equal(dcr_reader_version(f->r, 3, &vi), -ENOENT);

	/* A later refresh neither refetches nor relogs v3. */
	counts_reset(f->cs);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	assert_int_equal(f->cs->gets_versions, 1); /* probe of v6 */
	assert_int_equal(log_errors, 1);

	check_version(f, 4);
	/* v5: the full frame reads; the delta against v3 fails with EIO. */
	assert_int_equal(f->v[5].f[1].kind[1], DCR_CK_FULL);
	assert_int_equal(dcr_reader_read(f->r, 5, 2, CS, buf, CS), CS);
	assert_memory_equal(buf, f->v[5].f[1].data + CS, CS);
	log_reset();
	assert_int_equal(dcr_reader_read(f->r, 5, 2, 0, buf, CS), -EIO);
	assert_int_equal(log_errors, 1);
	assert_non_null(strstr(log_last, "version 3"));
}

/* Publish version @v as a child of @p, with one chunk changed. */
static void publish_child(struct fx *f, int v, int p)
{
	f->v[v].v = (uint64_t)v;
	copy_tree(&f->v[v], &f->v[p]);
	nudge(&f->v[v].f[1], 0, 10, (uint64_t)v * 1000);
	publish(f->st, &f->v[v], &f->v[p], B_AUTO, 0);
}

static void expect_versions(struct fx *f, const uint64_t *want, size_t nw)
{
	uint64_t *vs;
	size_t n;

	assert_int_equal(dcr_reader_versions(f->r, &vs, &n), 0);
	assert_int_equal(n, nw);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(vs[i], want[i]);
	free(vs);
}

/*
 * C2: a manifest key that can never be read (a directory, a manifest
 * over the size limit, access refused to that key) is skipped like a
 * corrupt manifest, logged once; the versions after it are found (the
 * probe falls back to a listing) and later polls probe past it.
 */
static void test_unreadable_version_skipped(void **state)
{
	static const int errs[] = { -EISDIR, -EFBIG, -EACCES };

	for (size_t k = 0; k < DCR_ARRAY_SIZE(errs); k++) {
		struct fx *f = *state;
		const uint64_t want[] = { 1, 3 };
		uint64_t latest = 0;

		if (k) { /* a fresh fixture for each error */
			teardown(state);
			setup(state);
			f = *state;
		}
		build_chain(f, 1);
		open_reader(f, 0);
		assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
		assert_int_equal(latest, 1);

		publish_child(f, 2, 1);
		dcr_version_key(2, f->cs->fail_key, sizeof(f->cs->fail_key));
		f->cs->fail_err = errs[k];
		log_reset();
		/* Not yet a later version: nothing to skip to, one line. */
		assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
		assert_int_equal(latest, 1);
		assert_int_equal(log_errors, 1);
		assert_non_null(strstr(log_last, "versions/0000000002"));

		publish_child(f, 3, 1);
		assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
		assert_int_equal(latest, 3);
		expect_versions(f, want, 2);
		check_version(f, 3);

		/* Later polls: one probe of v4, no listing, no new log. */
		for (int i = 0; i < 3; i++) {
			counts_reset(f->cs);
			assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
			assert_int_equal(latest, 3);
			assert_int_equal(f->cs->gets_versions, 1);
			assert_int_equal(f->cs->lists, 1); /* tags/ */
		}
		assert_int_equal(log_errors, 1);
	}
}

/*
 * A manifest body damaged on the way is fetched again before the version
 * is given up; one given up is looked for again later, and its children
 * (given up with it) come back with it.
 */
static void test_damaged_manifest_retried(void **state)
{
	struct fx *f = *state;
	const uint64_t some[] = { 1, 3 }, all[] = { 1, 2, 3 };
	uint64_t latest = 0;

	build_chain(f, 1);
	f->retry_bad_ms = 300;
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);

	/* Damaged twice, right the third time: indexed, nothing logged. */
	publish_child(f, 2, 1);
	dcr_version_key(2, f->cs->damage_key, sizeof(f->cs->damage_key));
	f->cs->damage_left = 2;
	log_reset();
	counts_reset(f->cs);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 2);
	assert_int_equal(log_errors, 0);
	assert_int_equal(f->cs->damage_left, 0);
	check_version(f, 2);

	/* Damaged every time: v2 is given up (logged), v3 is indexed but
	 * cannot be read ... */
	teardown(state);
	setup(state);
	f = *state;
	build_chain(f, 1);
	f->retry_bad_ms = 300;
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	publish_child(f, 2, 1);
	publish_child(f, 3, 2);
	dcr_version_key(2, f->cs->damage_key, sizeof(f->cs->damage_key));
	f->cs->damage_left = 1000;
	log_reset();
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	expect_versions(f, some, 2);
	assert_true(log_errors >= 1);
	uint8_t buf[64];
	assert_true(dcr_reader_read(f->r, 3, 2, 0, buf, sizeof(buf)) < 0);
	/* ... v2 is not fetched again before the retry time ... */
	f->cs->damage_left = 0;
	counts_reset(f->cs);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	expect_versions(f, some, 2);
	/* ... and found after it, and its child reads again. */
	struct timespec ts = { 0, 350L * 1000 * 1000 };
	nanosleep(&ts, NULL);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	expect_versions(f, all, 3);
	assert_int_equal(dcr_reader_read(f->r, 3, 2, 0, buf, sizeof(buf)),
			 sizeof(buf));
	check_version(f, 2);
	check_version(f, 3);
}

/*
 * C2: a transient failure (a dead server) is not a verdict: the version
 * after it is still found, the failing one is retried at every refresh
 * (logged once, not every poll) and indexed once the store recovers.
 */
static void test_transient_version_retried(void **state)
{
	struct fx *f = *state;
	const uint64_t some[] = { 1, 3 }, all[] = { 1, 2, 3 };
	uint64_t latest = 0;

	build_chain(f, 1);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	publish_child(f, 2, 1);
	publish_child(f, 3, 2);
	dcr_version_key(2, f->cs->fail_key, sizeof(f->cs->fail_key));
	f->cs->fail_err = -EIO;
	log_reset();
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 3);
	expect_versions(f, some, 2);
	for (int i = 0; i < 3; i++) {
		counts_reset(f->cs);
		assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
		assert_int_equal(f->cs->gets_versions, 1); /* v2 again */
	}
	assert_int_equal(log_errors, 1);
	assert_non_null(strstr(log_last, "versions/0000000002"));

	f->cs->fail_err = 0;
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	expect_versions(f, all, 3);
	f->nv = 3;
	check_version(f, 2);
	check_version(f, 3);
	/* and back to cheap probes */
	counts_reset(f->cs);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(f->cs->gets_versions, 1);
	assert_int_equal(f->cs->lists, 1);
}

/* S6: one reader per cache directory; the second is told who has it. */
static void test_cache_dir_locked(void **state)
{
	struct fx *f = *state;
	struct dcr_reader_opts o = { .cache_dir = f->cache_dir };
	struct dcr_reader *r2 = NULL;
	char want[64];

	build_chain(f, 1);
	open_reader(f, 0);
	log_reset();
	assert_int_equal(dcr_reader_open(f->st, &o, &r2), -EBUSY);
	assert_null(r2);
	assert_int_equal(log_errors, 1);
	assert_non_null(strstr(log_last, f->cache_dir));
	assert_non_null(strstr(log_last, "in use by another dcrfs"));
	snprintf(want, sizeof(want), "(pid %ld)", (long)getpid());
	assert_non_null(strstr(log_last, want));
	/* Released on close. */
	dcr_reader_close(f->r);
	f->r = NULL;
	assert_int_equal(dcr_reader_open(f->st, &o, &r2), 0);
	assert_int_equal(dcr_reader_refresh(r2, NULL), 0);
	dcr_reader_close(r2);
}

/* Write @t's tree below @dir (for dcr_commit). */
static void write_tree(const struct tver *t, const char *dir)
{
	char path[PATH_MAX];

	assert_int_equal(tu_mkdir_p(dir), 0);
	for (int i = 0; i < t->nfiles; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, t->f[i].path);
		if (t->f[i].dir)
			assert_int_equal(tu_mkdir_p(path), 0);
		else
			assert_int_equal(tu_write_file(path, t->f[i].data,
						       t->f[i].size), 0);
	}
}

static void test_commit_roundtrip(void **state)
{
	struct fx *f = *state;
	char dirs[4][PATH_MAX];
	struct dcr_manifest pm;
	struct dcr_commit_result res;

	/* Three versions of a tree, committed with the real pipeline. */
	f->v[1].v = 1;
	add_file(&f->v[1], "a", 1, 0, 0);
	add_file(&f->v[1], "a/w.bin", 0, 7 * CS + 3, 21);
	add_file(&f->v[1], "z.bin", 0, 2 * CS, 22);
	for (int v = 2; v <= 3; v++) {
		f->v[v].v = (uint64_t)v;
		copy_tree(&f->v[v], &f->v[v - 1]);
		nudge(&f->v[v].f[1], (uint64_t)v, 12, (uint64_t)v * 7);
		nudge(&f->v[v].f[1], 0, 3, (uint64_t)v * 9);
	}
	memset(&pm, 0, sizeof(pm));
	for (int v = 1; v <= 3; v++) {
		struct dcr_commit_opts o = { 0 };

		snprintf(dirs[v], sizeof(dirs[v]), "%s/tree%d", f->root, v);
		write_tree(&f->v[v], dirs[v]);
		o.chunk_size = CS;
		o.jobs = 2;
		if (v > 1) {
			o.parent = (uint64_t)v - 1;
			o.parent_manifest = &pm;
			o.parent_dir = dirs[v - 1];
		}
		assert_int_equal(dcr_commit(f->st, dirs[v], &o, &res), 0);
		assert_int_equal(res.version, (uint64_t)v);
		if (v > 1)
			assert_true(res.chunks_delta + res.chunks_same > 0);
		dcr_manifest_free(&pm);
		assert_int_equal(dcr_store_get_manifest(f->st, (uint64_t)v, &pm),
				 0);
	}
	dcr_manifest_free(&pm);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	assert_int_equal(dcr_reader_latest(f->r), 3);
	for (uint64_t v = 3; v >= 1; v--)
		check_version(f, v);
	assert_int_equal(log_errors, 0);
}


/* Distinct packs holding the frames of chunks [0, n) of file @fi of v1. */
static unsigned v1_packs(struct fx *f, int fi, uint64_t n)
{
	unsigned seen = 0, count = 0;

	for (uint64_t k = 0; k < n; k++) {
		unsigned bit = 1u << f->v[1].f[fi].pack[k];

		if (!(seen & bit))
			count++;
		seen |= bit;
	}
	return count;
}

static void test_coalesce(void **state)
{
	struct fx *f = *state;
	unsigned frames, packs;

	build_chain(f, 1);
	f->coalesce_max = 1 << 20;
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	/* a/w.bin: 6 full frames, written one after the other. */
	frames = expect_version(f, 1);
	packs = v1_packs(f, 1, 6);
	counts_reset(f->cs);
	check_file(f, 1, 2);
	/* One ranged GET per pack instead of one per frame. */
	assert_int_equal(f->cs->gets_packs, packs);
	assert_true(packs < 6);
	check_version(f, 1);
	assert_true(f->cs->gets_packs < frames);
	assert_int_equal(log_errors, 0);

	/* A chain (v5 cold) coalesces too, and stays correct. */
	dcr_reader_close(f->r);
	f->r = NULL;
	tu_rm_rf(f->cache_dir);
	for (int v = 2; v <= 5; v++) {
		struct tver *t = &f->v[v];

		t->v = (uint64_t)v;
		copy_tree(t, &f->v[v - 1]);
		nudge(&t->f[1], 0, 20, (uint64_t)v * 100);
		nudge(&t->f[1], 5, 3, (uint64_t)v * 100 + 5);
		publish(f->st, t, &f->v[v - 1], B_AUTO, 0);
		f->nv = v;
	}
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	f->ncached = 0;
	frames = expect_version(f, 5);
	counts_reset(f->cs);
	check_version(f, 5);
	assert_true(f->cs->gets_packs < frames);
	assert_int_equal(log_errors, 0);
}

static void test_readahead(void **state)
{
	struct fx *f = *state;
	const struct tfile *tf;
	uint8_t buf[CS];
	char key[128];
	int all = 0;

	build_chain(f, 1);
	tf = &f->v[1].f[1];
	f->readahead = 64 * CS;
	f->coalesce_max = 2 * CS; /* several jobs, several GETs */
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	/* A read at offset 0 starts read-ahead of the rest of a/w.bin. */
	assert_int_equal(dcr_reader_read(f->r, 1, 2, 0, buf, 10), 10);
	for (int i = 0; i < 500 && !all; i++) {
		all = 1;
		for (uint64_t k = 0; k < 6; k++)
			if (!in_slab(f, 1, 1, k))
				all = 0;
		if (!all)
			usleep(10000);
	}
	assert_true(all);
	counts_reset(f->cs);
	check_file(f, 1, 2);
	assert_int_equal(f->cs->gets_packs, 0);
	assert_int_equal(log_errors, 0);

	/* Read-ahead of a corrupt frame fails quietly; the read that needs
	 * it fails with one line, and the rest of the file reads. */
	dcr_reader_close(f->r);
	f->r = NULL;
	tu_rm_rf(f->cache_dir);
	corrupt_frame(f, 1, 1, 3, DCR_FRAME_HDR_LEN + 100, key, sizeof(key));
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	log_reset();
	for (uint64_t k = 0; k < 6; k++) {
		uint32_t n = (uint32_t)dcr_chunk_len(tf->size, CS, k);
		ssize_t got = dcr_reader_read(f->r, 1, 2, k * CS, buf, CS);

		if (k == 3) {
			assert_int_equal(got, -EIO);
			continue;
		}
		assert_int_equal(got, n);
		assert_memory_equal(buf, tf->data + k * CS, n);
	}
	assert_int_equal(log_errors, 1);
	assert_non_null(strstr(log_last, key));
}

/* Format 1 manifests (older stores): proven by SHA-256, same bytes. */
static void test_format1_store(void **state)
{
	g_format = 1;
	test_chain_fully_cold(state);
}

static void test_format1_corrupt_delta(void **state)
{
	g_format = 1;
	test_corrupt_delta_in_chain(state);
}

/*
 * tests/golden/store-format1: two versions committed by dcrfs-commit
 * before format 2 (4 KiB chunks; v2 changes two chunks of sub/w.bin).
 * The new reader reads them, proven by SHA-256, and each file's bytes
 * hash to what its manifest says.
 */
static void test_golden_format1_store(void **state)
{
	static const char *const want_hex[] = {
		/* v2 a.txt, sub/w.bin */
		"5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03",
		"b8ab1902ed1a029ebd0fc71ed7e1053106de8876493d057a35b69b33b8919630",
	};
	struct fx *f = *state;
	char cmd[2 * PATH_MAX];
	uint8_t want[DCR_HASH_LEN], got[DCR_HASH_LEN], buf[4 * 4096];
	uint64_t latest = 0;

	snprintf(cmd, sizeof(cmd), "cp -r '%s/store-format1/versions' "
		 "'%s/store-format1/packs' '%s/'", DCR_GOLDEN_DIR,
		 DCR_GOLDEN_DIR, f->store_dir);
	assert_int_equal(system(cmd), 0);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 2);
	for (uint32_t idx = 1, k = 0; idx <= 3; idx++) {
		ssize_t n;

		if (idx == 2)
			continue; /* "sub", the directory */
		n = dcr_reader_read(f->r, 2, idx, 0, buf, sizeof(buf));
		assert_true(n > 0);
		dcr_sha256(buf, (size_t)n, got);
		assert_int_equal(dcr_hash_unhex(want_hex[k++], want), 0);
		assert_memory_equal(got, want, DCR_HASH_LEN);
	}
	/* v1's w.bin differs from v2's in exactly two bytes. */
	{
		uint8_t v1[4 * 4096];
		ssize_t n1 = dcr_reader_read(f->r, 1, 3, 0, v1, sizeof(v1));
		ssize_t n2 = dcr_reader_read(f->r, 2, 3, 0, buf, sizeof(buf));
		int diff = 0;

		assert_int_equal(n1, 3 * 4096 + 100);
		assert_int_equal(n2, n1);
		for (ssize_t i = 0; i < n1; i++)
			diff += v1[i] != buf[i];
		assert_int_equal(diff, 2);
	}
	assert_int_equal(log_errors, 0);
}

/* A store that switched format mid-chain: v1-v2 format 1, v3- format 2;
 * chains that mix them are proven by the chunk's SHA-256. */
static void test_mixed_format_chain(void **state)
{
	struct fx *f = *state;

	g_format = 1;
	g_format_from = 3;
	build_chain(f, 5);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	for (uint64_t v = 5; v >= 1; v--)
		check_version(f, v);
}

/*
 * A chunk whose frames are intact but whose check value in the manifest
 * is wrong (a committer bug) is proven by its SHA-256 instead, served,
 * and reported with a warning. (A decoder that disagrees with the
 * committer's fails both and is EIO: test_corrupt_delta_in_chain.)
 */
static void test_wrong_check_value(void **state)
{
	struct fx *f = *state;
	uint8_t buf[CS];

	g_bad_xxh_v = 2;
	build_chain(f, 2);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, NULL), 0);
	assert_true(g_bad_chunk < 5);
	log_reset();
	assert_int_equal(dcr_reader_read(f->r, 2, 2, g_bad_chunk * CS, buf,
					 CS), CS);
	assert_memory_equal(buf, f->v[2].f[1].data + g_bad_chunk * CS, CS);
	assert_int_equal(log_errors, 0);
	assert_int_equal(log_warnings, 1);
	assert_non_null(strstr(log_last_warn, "check value"));
	/* Its neighbours and the parent's chunk are fine. */
	for (uint64_t k = 0; k < 5; k++) {
		assert_int_equal(dcr_reader_read(f->r, 2, 2, k * CS, buf, CS),
				 CS);
		assert_memory_equal(buf, f->v[2].f[1].data + k * CS, CS);
	}
	check_file(f, 1, 2);
}

/*
 * Version identity: v3 deleted from the store and published again with
 * other bytes is re-indexed by the next whole listing (relist_ms), its
 * cached chunks - proven by this very reader - are never served as the
 * new v3's, the change is logged and reported, a tree held from before
 * stays valid; a version gone from the store is dropped, in memory and
 * in the catalog (a reopen does not bring it back).
 */
static void test_version_replaced_and_dropped(void **state)
{
	struct fx *f = *state;
	const struct dcr_version_info *old_vi, *vi;
	struct dcr_version_change *ch;
	struct timespec ts = { 0, 20 * 1000 * 1000 };
	uint64_t latest, *vs;
	char key[64];
	size_t n;
	uint8_t b;

	f->relist_ms = 10;
	build_chain(f, 3);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 3);
	check_version(f, 3); /* cached and proven */
	dcr_reader_sync(f->r);
	assert_int_equal(dcr_reader_version(f->r, 3, &old_vi), 0);
	assert_int_equal(old_vi->tree, 0); /* first indexed: tree 0 */
	assert_int_equal(dcr_reader_take_changes(f->r, &ch, &n), 0);
	assert_int_equal(n, 0);
	free(ch);

	/* Nothing changed: a listing finds nothing to do. */
	nanosleep(&ts, NULL);
	log_reset();
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(dcr_reader_take_changes(f->r, &ch, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(log_errors, 0);

	/* An admin deletes v3; a trainer publishes another v3. */
	dcr_version_key(3, key, sizeof(key));
	assert_int_equal(dcr_store_del(f->st, key), 0);
	tver_free(&f->v[3]);
	f->v[3].v = 3;
	copy_tree(&f->v[3], &f->v[2]);
	for (uint64_t k = 0; k < 6; k++)
		nudge(&f->v[3].f[1], k, 40, 3000 + k);
	nudge(&f->v[3].f[2], 0, 40, 3100);
	publish(f->st, &f->v[3], &f->v[2], B_AUTO, 0);

	nanosleep(&ts, NULL);
	log_reset();
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 3);
	assert_non_null(strstr(log_last, "versions/0000000003 changed in the "
					 "store (manifest "));
	assert_non_null(strstr(log_last, "re-indexed; the old tree is no "
					 "longer served"));
	check_version(f, 3); /* the new bytes, never the cached old ones */
	assert_int_equal(dcr_reader_take_changes(f->r, &ch, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(ch[0].version, 3);
	assert_true(ch[0].content_changed);
	assert_false(ch[0].gone);
	assert_int_equal(ch[0].old_nentries, 6);
	assert_int_equal(ch[0].old_tree, 0);
	free(ch);
	/* The old tree's number reads nothing of the new one. */
	assert_int_equal(dcr_reader_read_tree(f->r, 3, 0, 2, 0, &b, 1), -ESTALE);
	/* The tree held from before is still readable memory. */
	assert_int_equal(old_vi->version, 3);
	assert_int_equal(old_vi->nentries, 6);
	assert_string_equal(old_vi->entries[2].path, "a/w.bin");
	dcr_reader_version_put(f->r, old_vi);
	assert_int_equal(dcr_reader_version(f->r, 3, &vi), 0);
	assert_ptr_not_equal(vi, old_vi);
	assert_int_equal(vi->tree, 1); /* the next tree, never a reused one */
	assert_int_equal(dcr_reader_read_tree(f->r, 3, 1, 2, 0, &b, 1), 1);
	dcr_reader_version_put(f->r, vi);

	/* v3 gone from the store: dropped; latest is v2 again. */
	assert_int_equal(dcr_store_del(f->st, key), 0);
	nanosleep(&ts, NULL);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 2);
	assert_int_equal(dcr_reader_read(f->r, 3, 2, 0, &b, 1), -ENOENT);
	assert_int_equal(dcr_reader_take_changes(f->r, &ch, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(ch[0].version, 3);
	assert_true(ch[0].gone);
	assert_int_equal(ch[0].old_tree, 1);
	free(ch);
	check_version(f, 2);

	/* Published once more: it comes back under a tree of its own. */
	publish(f->st, &f->v[3], &f->v[2], B_AUTO, 0);
	nanosleep(&ts, NULL);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 3);
	assert_int_equal(dcr_reader_version(f->r, 3, &vi), 0);
	assert_int_equal(vi->tree, 2);
	dcr_reader_version_put(f->r, vi);
	check_version(f, 3);
	assert_int_equal(dcr_store_del(f->st, key), 0);
	nanosleep(&ts, NULL);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 2);

	/* A reopen with the same cache does not bring it back. */
	dcr_reader_close(f->r);
	f->r = NULL;
	open_reader(f, 0);
	assert_int_equal(dcr_reader_versions(f->r, &vs, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(vs[1], 2);
	free(vs);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 2);
	check_version(f, 2);
}

/*
 * A remount (a new reader on the same cache) of a store whose v3 was
 * replaced while no reader ran: the first listing re-indexes it, and
 * the chunks the old reader cached are not served for it.
 */
static void test_version_replaced_while_closed(void **state)
{
	struct fx *f = *state;
	uint64_t latest;
	char key[64];

	build_chain(f, 3);
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	check_version(f, 3);
	dcr_reader_close(f->r);
	f->r = NULL;

	dcr_version_key(3, key, sizeof(key));
	assert_int_equal(dcr_store_del(f->st, key), 0);
	tver_free(&f->v[3]);
	f->v[3].v = 3;
	copy_tree(&f->v[3], &f->v[2]);
	for (uint64_t k = 0; k < 6; k++)
		nudge(&f->v[3].f[1], k, 40, 4000 + k);
	publish(f->st, &f->v[3], &f->v[2], B_AUTO, 0);

	log_reset();
	open_reader(f, 0);
	assert_int_equal(dcr_reader_refresh(f->r, &latest), 0);
	assert_int_equal(latest, 3);
	assert_non_null(strstr(log_last, "versions/0000000003 changed in the "
					 "store"));
	check_version(f, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
		T(test_tree_and_boundaries),
		T(test_chain_cold_and_cached_base),
		T(test_chain_fully_cold),
		T(test_trees_unloaded),
		T(test_reopen_no_refetch),
		T(test_corrupt_pack),
		T(test_corrupt_delta_in_chain),
		T(test_missing_pack),
		T(test_corrupt_cache_file),
		T(test_tiny_budget),
		T(test_concurrent_same_chunk),
		T(test_concurrent_random),
		T(test_tags),
		T(test_refresh_probes),
		T(test_corrupt_manifest_and_missing_parent),
		T(test_commit_roundtrip),
		T(test_coalesce),
		T(test_readahead),
		T(test_damaged_manifest_retried),
		T(test_unreadable_version_skipped),
		T(test_transient_version_retried),
		T(test_cache_dir_locked),
		T(test_format1_store),
		T(test_format1_corrupt_delta),
		T(test_mixed_format_chain),
		T(test_golden_format1_store),
		T(test_wrong_check_value),
		T(test_version_replaced_and_dropped),
		T(test_version_replaced_while_closed),
#undef T
	};

	dcr_log_set_prog("test_reader");
	dcr_log_set_sink(log_sink);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
