/* SPDX-License-Identifier: MIT */
/*
 * test_reader_util.c - the fixture of the read path's unit tests (see
 * test_reader_util.h).
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
#include "test_reader_util.h"

/* ------------------------------------------------------------ log capture */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
int log_errors, log_warnings;
char log_last_warn[1024];
char log_last[1024];

void log_sink(enum dcr_log_level lvl, const char *msg)
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

void log_reset(void)
{
	pthread_mutex_lock(&log_lock);
	log_errors = 0;
	log_warnings = 0;
	log_last[0] = 0;
	pthread_mutex_unlock(&log_lock);
}

/* ------------------------------------------------------------ counting shim */


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
	if (!ret && !strncmp(key, "versions/", 9))
		c->bytes_versions += out->len - had;
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
	if (!strncmp(prefix, "versions/", 9))
		to_c(st)->lists_versions++;
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

void counts_reset(struct cstore *c)
{
	c->gets_versions = 0;
	c->bytes_versions = 0;
	c->gets_packs = 0;
	c->gets_tags = 0;
	c->lists = 0;
	c->lists_versions = 0;
}

/* ------------------------------------------------------------ version builder */


void tver_free(struct tver *t)
{
	for (int i = 0; i < t->nfiles; i++)
		free(t->f[i].data);
	memset(t, 0, sizeof(*t));
}

/* Add a directory or (if !dir) a file of @size pseudo-random bytes. */
struct tfile *add_file(struct tver *t, const char *path, int dir,
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
void copy_tree(struct tver *cur, const struct tver *prev)
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
void nudge(struct tfile *f, uint64_t k, int n, uint64_t seed)
{
	uint32_t len = dcr_chunk_len(f->size, CS, k);
	uint64_t s = seed;

	for (int i = 0; i < n; i++)
		f->data[k * CS + tu_rand(&s) % len] ^= (uint8_t)(1 + (i & 3));
}

/* Replace chunk @k by new, compressible bytes: the encoder then picks a
 * full frame (a delta against random bytes would not compress). */
void rewrite(struct tfile *f, uint64_t k, uint64_t seed)
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
uint32_t g_format = DCR_MANIFEST_FORMAT;
uint64_t g_format_from;
uint64_t g_bad_xxh_v;
uint64_t g_bad_chunk; /* the chunk that got it */

void publish(struct dcr_store *st, struct tver *cur,
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

void open_reader(struct fx *f, uint64_t budget)
{
	struct dcr_reader_opts o = {
		.cache_dir = f->cache_dir,
		.cache_size = budget,
		.fetch_threads = f->fetch_threads,
		.threads = f->threads,
		.readahead = f->readahead ? f->readahead : -1,
		.coalesce_max = f->coalesce_max ? f->coalesce_max : 1,
		.retry_bad_ms = f->retry_bad_ms,
		.max_trees = f->max_trees,
		.relist_ms = f->relist_ms,
	};

	assert_int_equal(dcr_reader_open(f->st, &o, &f->r), 0);
}

int setup(void **state)
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

int teardown(void **state)
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
void build_chain(struct fx *f, int nv)
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
void check_file(struct fx *f, uint64_t v, uint32_t idx)
{
	const struct tfile *tf = &f->v[v].f[idx - 1];
	uint8_t *buf = malloc(tf->size + 16);
	ssize_t n = dcr_reader_read(f->r, v, idx, 0, buf, tf->size + 16);

	assert_int_equal(n, (ssize_t)tf->size);
	assert_memory_equal(buf, tf->data, tf->size);
	free(buf);
}

void check_version(struct fx *f, uint64_t v)
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
unsigned expect_chunk(struct fx *f, uint64_t v, int fi, uint64_t k)
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

unsigned expect_version(struct fx *f, uint64_t v)
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


/* Flip a byte in the payload of the frame of (version, file, chunk). */
void corrupt_frame(struct fx *f, uint64_t v, int fi, uint64_t k,
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

/*
 * The slab holding file @fi (tver index) of version @v in the reader's
 * private cache: <cache_dir>/<id>/slabs/v<version>.f<manifest index>.
 * Chunk k is at k * CS in it.
 */
void cache_file(struct fx *f, uint64_t v, int fi, char *path,
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
bool in_slab(struct fx *f, uint64_t v, int fi, uint64_t k)
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
