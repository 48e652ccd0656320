/* SPDX-License-Identifier: MIT */
/*
 * reader.c - the read path (DESIGN.md section 6; API in reader.h).
 *
 * State and where it lives:
 *  - the catalog (SQLite, catalog.c): every indexed version as rows,
 *    chunk references included; survives a restart;
 *  - the chunk cache (cache.c): materialized, verified chunks by hash;
 *  - in memory: one struct rver per known version with, once somebody
 *    asks for it, the version's files without chunk tables (a chunk-less
 *    struct dcr_manifest) and the dcr_entry tree built from them. These
 *    are immutable once built and live until dcr_reader_close, because
 *    the filesystem keeps pointers to them. Chunk references are always
 *    looked up in SQLite, so memory does not grow with the chunk count.
 *
 * Locks (never nested in the other order):
 *  - refresh_lock serialises dcr_reader_refresh;
 *  - lock guards the version array, the bad-manifest list, the tags and
 *    the lazy building of a version's tree;
 *  - sf_lock/sf_cond guard the in-flight table (single-flight: concurrent
 *    readers of one chunk hash share one fetch and decode);
 *  - codec_lock guards the pool of per-thread codec states;
 *  - ra_lock/ra_cond guard the read-ahead streams and job queue (taken
 *    alone, never with another of these).
 * The catalog and the cache have their own internal locks.
 *
 * A read first serves every chunk the cache holds; its misses form one
 * batch (materialize_batch): all their chains are resolved, the frames
 * to fetch are sorted by pack and offset and neighbours merged into one
 * ranged GET ("runs", up to opts->coalesce_max bytes), the runs fetched
 * and the chunks decoded on up to opts->fetch_threads threads (the caller
 * plus short-lived helpers). The FUSE layer already calls us from many
 * threads, and single-flight keeps them from fetching or decoding a
 * chunk twice. Sequential reads also queue read-ahead (ra_note), which
 * long-lived threads materialize into the cache in the background, so a
 * cold sequential reader keeps several GETs in flight.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "catalog.h"
#include "chunk.h"
#include "common.h"
#include "fileio.h"
#include "frame.h"
#include "hash.h"
#include "manifest.h"
#include "reader.h"

/* Fetches and builds in flight: S3 waits on the network, a directory
 * store on direct reads of base chunks (cache.c); both overlap waits. */
#define FETCH_THREADS_DEFAULT 8
#define READAHEAD_DEFAULT ((uint64_t)32 << 20)
#define COALESCE_MAX_DEFAULT (8u << 20)
#define COALESCE_GAP (64u << 10) /* bytes between frames worth reading */
#define RA_STREAMS 32            /* files whose last read is remembered */
#define RA_QUEUE 256             /* queued read-ahead jobs */
#define RA_JOB_BYTES (4u << 20)  /* about one coalesced GET per job */
#define RA_JOB_MAX 64            /* chunks per job */
#define RA_THREADS_MAX 64
#define CODEC_POOL_MAX 16
/* Hex digits of the store-URL hash naming the per-store directory. */
#define STORE_ID_LEN 16
/* A manifest object larger than this is refused (as core/objstore.c). */
#define MANIFEST_OBJ_MAX ((size_t)2 << 30)
/* A failure to read the same manifest is logged at most this often. */
#define FETCH_LOG_INTERVAL_NS ((int64_t)600 * 1000000000)
#define FETCH_LOG_SLOTS 8

/* One known version. The tree (m, entries, info) is built lazily. */
struct rver {
	uint64_t v;
	uint64_t parent;
	int64_t ctime_ns;
	uint32_t chunk_size;
	uint32_t nfiles;
	bool loaded;
	struct dcr_manifest m;    /* files only: no chunks, no packs */
	struct dcr_entry *entries;
	struct dcr_version_info info;
};

/* A chunk being materialized by one thread while others wait for it. */
struct flight {
	struct flight *next;
	uint8_t hash[DCR_HASH_LEN];
	uint32_t len;
	/* Where the leader's chunk goes in the cache (dcr_cache_put). */
	const struct rver *rv;
	uint32_t file;
	uint64_t chunk;
	struct dcr_catalog_chunk ref;
	uint8_t *data;  /* the materialized chunk once done && rc == 0 */
	int rc;
	bool done;
	unsigned refs;  /* leader + waiters; the last one frees */
	bool quiet;     /* led by read-ahead: a failure was not logged */
};

/* A file being read sequentially (see ra_note). */
struct ra_stream {
	bool used;
	uint64_t v;
	uint32_t idx;
	uint64_t next_off; /* where the furthest read so far ended */
	uint64_t queued;   /* chunks below this were queued for read-ahead */
	uint64_t stamp;    /* LRU */
	uint32_t hits;     /* read-ahead jobs in a row that found all cached */
	uint32_t skipped;  /* groups not queued since the last probe */
	uint64_t skip_from; /* first chunk skipped; UINT64_MAX: none */
};

/*
 * Reading a version that is already cached, read-ahead has nothing to
 * do but costs a thread wake-up per job. After RA_HITS_QUIET jobs in a
 * row found every chunk cached, only one group in RA_PROBE is queued (a
 * probe); a job or a read that has to build a chunk resumes it fully.
 */
#define RA_HITS_QUIET 4
#define RA_PROBE 8

/*
 * Chunk references are looked up a block at a time: one catalog query
 * for REF_BLOCK neighbours, kept in REF_SLOTS blocks (LRU, ~0.6 MiB), so
 * a sequential reader costs one query per REF_BLOCK chunks instead of
 * one per chunk, and readers do not queue on the catalog lock.
 */
#define REF_BLOCK 256
#define REF_SLOTS 32

struct refblk {
	uint64_t v, first, stamp;
	uint32_t file;
	uint32_t n; /* references held; 0 = unused slot */
	struct dcr_catalog_chunk refs[REF_BLOCK];
};

/* Read-ahead job: chunks [first, first+n) of entry idx of version rv. */
struct ra_job {
	struct rver *rv;
	uint32_t idx;
	uint64_t first;
	uint32_t n;
	bool pagecache; /* queued by a thread that keeps the page cache */
};

/*
 * Chunks just materialized stay in memory ("hot"), up to hot_budget
 * bytes (LRU), and reads take them from there: read-ahead builds chunks
 * a little before the reader asks for them, and the cache files are
 * written around the page cache (DCR_CACHE_PUT_DIRECT), so a first read
 * fills neither the page cache with a second copy of the model nor
 * fresh pages to copy it into. The buffers (DCR_CACHE_ALIGN-aligned)
 * are recycled through a small pool, never handed back to the system
 * while reads go on.
 */
#define HOT_SLOTS 256
/* Chunks waiting to be written to the cache, and the threads that write
 * them (see wq_submit). */
#define WQ_MAX 32
#define WQ_BYTES ((uint64_t)32 << 20) /* and at most this many bytes */
#define WQ_THREADS 2
/* Read-ahead jobs fetched and waiting for a decoder (see dq_submit). */
#define DQ_MAX 8
#define DQ_THREADS 2

struct dq_item;
#define HOT_BUDGET_MIN ((uint64_t)64 << 20)
#define POOL_MAX 32
#define POOL_BYTES ((size_t)32 << 20)  /* idle buffers kept, in bytes */

struct hot {
	uint8_t hash[DCR_HASH_LEN];
	uint32_t len;
	uint8_t *data;  /* NULL: free slot */
	unsigned refs;  /* readers copying out of it */
	uint64_t stamp; /* LRU */
};

struct pooled {
	void *p;
	size_t cap;
};

struct dcr_reader {
	struct dcr_store *st;
	char *dir; /* <cache_dir>/<id> */
	struct dcr_catalog *cat;
	struct dcr_cache *cache;
	int fetch_threads;

	int lock_fd;           /* flock on <dir>/lock for our lifetime */

	pthread_mutex_t refresh_lock;
	bool listed;           /* "versions/" listed once in this process */
	/* Last logged store failures, by version (0 = the listing), for
	 * rate-limiting; under refresh_lock. */
	struct {
		uint64_t v;
		int err;
		int64_t at_ns;
	} flog[FETCH_LOG_SLOTS];
	unsigned flog_next;

	pthread_mutex_t lock;
	struct rver **vers;    /* ascending by v */
	size_t nvers, capvers;
	uint64_t *bad;         /* corrupt manifests, logged once, skipped */
	size_t nbad, capbad;
	uint64_t max_bad;
	struct dcr_tag *tags;
	size_t ntags;

	pthread_mutex_t sf_lock;
	pthread_cond_t sf_cond;
	struct flight *flights;

	pthread_mutex_t codec_lock;
	struct dcr_codec *codecs[CODEC_POOL_MAX];
	int ncodecs;

	pthread_mutex_t ref_lock;
	struct refblk *refs;    /* REF_SLOTS */
	uint64_t ref_clock;

	pthread_mutex_t hot_lock;
	struct hot *hot;        /* HOT_SLOTS */
	uint64_t hot_bytes, hot_budget, hot_clock;
	struct pooled pool[POOL_MAX];
	size_t npool, pool_bytes;

	uint64_t readahead;     /* bytes; 0 = off */
	uint32_t coalesce_max;  /* bytes of one merged GET; <= 1 = no merging */
	pthread_mutex_t ra_lock;
	pthread_cond_t ra_cond;
	struct ra_stream ra_streams[RA_STREAMS];
	uint64_t ra_clock;
	struct ra_job ra_q[RA_QUEUE];
	size_t ra_qhead, ra_qlen;
	pthread_t ra_th[RA_THREADS_MAX];
	int nra_th;
	bool ra_started, ra_stop;
	int ra_busy;            /* jobs being worked on */

	/* Read-ahead decoding (see dq_submit); under dq_lock. */
	pthread_mutex_t dq_lock;
	pthread_cond_t dq_cond;
	struct dq_item *dq[DQ_MAX];
	size_t dq_head, dq_len;
	pthread_t dq_th[DQ_THREADS];
	int ndq_th;
	bool dq_started, dq_stop;
	int dq_busy;

	/* Cache writes behind the reads (see wq_submit); under wq_lock. */
	pthread_mutex_t wq_lock;
	pthread_cond_t wq_cond;
	struct flight *wq[WQ_MAX];
	size_t wq_head, wq_len;
	uint64_t wq_bytes;
	pthread_t wq_th[WQ_THREADS];
	int nwq_th;
	bool wq_started, wq_stop;
	int wq_busy;
};

/*
 * Set in read-ahead threads: errors of speculative work go to the debug
 * log only; the read that really needs the chunk redoes it and logs.
 */
static __thread bool tl_quiet;
/* Set by dcr_reader_keep_pagecache: chunks built for this thread are
 * written to the cache through the page cache (prefetch wants them
 * resident for the reads to come). */
static __thread bool tl_pagecache;
#define RERR(...) dcr_log(tl_quiet ? DCR_LOG_DEBUG : DCR_LOG_ERR, __VA_ARGS__)

static void ra_stop(struct dcr_reader *r);
static void wq_stop(struct dcr_reader *r);
static void dq_stop(struct dcr_reader *r);

/* ------------------------------------------------------------ helpers */

static struct dcr_codec *codec_get(struct dcr_reader *r)
{
	struct dcr_codec *c = NULL;

	pthread_mutex_lock(&r->codec_lock);
	if (r->ncodecs > 0)
		c = r->codecs[--r->ncodecs];
	pthread_mutex_unlock(&r->codec_lock);
	return c ? c : dcr_codec_new(0);
}

static void codec_put(struct dcr_reader *r, struct dcr_codec *c)
{
	pthread_mutex_lock(&r->codec_lock);
	if (r->ncodecs < CODEC_POOL_MAX) {
		r->codecs[r->ncodecs++] = c;
		c = NULL;
	}
	pthread_mutex_unlock(&r->codec_lock);
	dcr_codec_free(c);
}

/* ------------------------------------------------------------ versions */

/* Index of the first version >= @v. Caller holds the lock. */
/*
 * The reference of chunk @idx of file @file (manifest index) of version
 * @v: from the block cache, else one catalog query for its whole block.
 * Versions are immutable, so a cached block never goes stale.
 */
static int ref_get(struct dcr_reader *r, uint64_t v, uint32_t file,
		   uint64_t idx, struct dcr_catalog_chunk *out)
{
	const uint64_t first = idx - idx % REF_BLOCK;
	struct refblk *b = NULL, *tmp;
	size_t got = 0;
	int ret;

	pthread_mutex_lock(&r->ref_lock);
	for (int i = 0; i < REF_SLOTS; i++) {
		struct refblk *x = &r->refs[i];

		if (x->n && x->v == v && x->file == file &&
		    x->first == first && idx - first < x->n) {
			*out = x->refs[idx - first];
			x->stamp = ++r->ref_clock;
			pthread_mutex_unlock(&r->ref_lock);
			return 0;
		}
	}
	pthread_mutex_unlock(&r->ref_lock);

	tmp = malloc(sizeof(*tmp));
	if (!tmp)
		return dcr_catalog_get_chunk(r->cat, v, file, idx, out);
	ret = dcr_catalog_get_chunks(r->cat, v, file, first, REF_BLOCK,
				     tmp->refs, &got);
	if (ret == 0 && idx - first < got) {
		*out = tmp->refs[idx - first];
		pthread_mutex_lock(&r->ref_lock);
		for (int i = 0; i < REF_SLOTS; i++) {
			struct refblk *x = &r->refs[i];

			if (!b || !x->n || (b->n && x->stamp < b->stamp))
				b = x;
		}
		memcpy(b->refs, tmp->refs, got * sizeof(tmp->refs[0]));
		b->v = v;
		b->file = file;
		b->first = first;
		b->n = (uint32_t)got;
		b->stamp = ++r->ref_clock;
		pthread_mutex_unlock(&r->ref_lock);
	} else if (ret == 0 || ret == -ENOENT || ret == -EIO) {
		/* A hole or a bad row in the block (not in a well-formed
		 * catalog): ask for the one reference, which is served if it
		 * is good and gives the right error if not. */
		ret = dcr_catalog_get_chunk(r->cat, v, file, idx, out);
	}
	free(tmp);
	return ret;
}

/* ------------------------------------------- chunk buffers, hot chunks */

static size_t buf_cap(uint32_t len)
{
	return DCR_ROUND_UP((size_t)DCR_MAX(len, 1u), DCR_CACHE_ALIGN);
}

/* An aligned buffer for a chunk of @len bytes (readable to buf_cap). */
static uint8_t *buf_get(struct dcr_reader *r, uint32_t len)
{
	const size_t cap = buf_cap(len);
	void *p = NULL;

	pthread_mutex_lock(&r->hot_lock);
	for (size_t i = r->npool; i-- > 0;) {
		if (r->pool[i].cap == cap) {
			p = r->pool[i].p;
			r->pool_bytes -= cap;
			r->pool[i] = r->pool[--r->npool];
			break;
		}
	}
	pthread_mutex_unlock(&r->hot_lock);
	if (!p && posix_memalign(&p, DCR_CACHE_ALIGN, cap) != 0)
		p = NULL;
	return p;
}

/* Give back a buffer of buf_get(@len). Caller holds hot_lock. */
static void buf_put_locked(struct dcr_reader *r, uint8_t *p, uint32_t len)
{
	const size_t cap = buf_cap(len);

	if (!p)
		return;
	/* Full: make room by dropping one of another size (a file's odd
	 * last chunk), so the common size stays recyclable. */
	for (size_t i = 0; (r->npool == POOL_MAX ||
			    r->pool_bytes + cap > POOL_BYTES) && i < r->npool;) {
		if (r->pool[i].cap == cap) {
			i++;
			continue;
		}
		r->pool_bytes -= r->pool[i].cap;
		free(r->pool[i].p);
		r->pool[i] = r->pool[--r->npool];
	}
	if (r->npool < POOL_MAX && r->pool_bytes + cap <= POOL_BYTES) {
		r->pool[r->npool].p = p;
		r->pool[r->npool].cap = cap;
		r->npool++;
		r->pool_bytes += cap;
	} else {
		free(p);
	}
}

static void buf_put(struct dcr_reader *r, uint8_t *p, uint32_t len)
{
	pthread_mutex_lock(&r->hot_lock);
	buf_put_locked(r, p, len);
	pthread_mutex_unlock(&r->hot_lock);
}

/* The slot of chunk @hash of @len bytes, or NULL. Holds hot_lock. */
static struct hot *hot_find(struct dcr_reader *r,
			    const uint8_t hash[DCR_HASH_LEN], uint32_t len)
{
	for (size_t i = 0; i < HOT_SLOTS; i++) {
		struct hot *h = &r->hot[i];

		if (h->data && h->len == len &&
		    memcmp(h->hash, hash, DCR_HASH_LEN) == 0)
			return h;
	}
	return NULL;
}

/*
 * Keep the verified chunk @data (a buf_get buffer; ownership passes
 * here) in memory, evicting the least recently used unreferenced ones
 * to stay within the budget.
 */
static void hot_put(struct dcr_reader *r, const uint8_t hash[DCR_HASH_LEN],
		    uint32_t len, uint8_t *data)
{
	struct hot *slot = NULL;

	pthread_mutex_lock(&r->hot_lock);
	if (hot_find(r, hash, len) || len > r->hot_budget) {
		buf_put_locked(r, data, len);
		pthread_mutex_unlock(&r->hot_lock);
		return;
	}
	for (;;) {
		struct hot *lru = NULL;

		slot = NULL;
		for (size_t i = 0; i < HOT_SLOTS; i++) {
			struct hot *h = &r->hot[i];

			if (!h->data) {
				slot = slot ? slot : h;
				continue;
			}
			if (!h->refs && (!lru || h->stamp < lru->stamp))
				lru = h;
		}
		if (slot && r->hot_bytes + len <= r->hot_budget)
			break;
		if (!lru) {
			/* Everything is being read: do not keep this one. */
			buf_put_locked(r, data, len);
			pthread_mutex_unlock(&r->hot_lock);
			return;
		}
		r->hot_bytes -= lru->len;
		buf_put_locked(r, lru->data, lru->len);
		lru->data = NULL;
	}
	memcpy(slot->hash, hash, DCR_HASH_LEN);
	slot->len = len;
	slot->data = data;
	slot->refs = 0;
	slot->stamp = ++r->hot_clock;
	r->hot_bytes += len;
	pthread_mutex_unlock(&r->hot_lock);
}

/* Copy [@off, @off+@n) of hot chunk @hash into @dst: 0, or -ENOENT. */
static int hot_read(struct dcr_reader *r, const uint8_t hash[DCR_HASH_LEN],
		    uint32_t len, uint32_t off, void *dst, size_t n)
{
	struct hot *h;

	pthread_mutex_lock(&r->hot_lock);
	h = hot_find(r, hash, len);
	if (!h) {
		pthread_mutex_unlock(&r->hot_lock);
		return -ENOENT;
	}
	h->refs++;
	h->stamp = ++r->hot_clock;
	pthread_mutex_unlock(&r->hot_lock);
	memcpy(dst, h->data + off, n); /* referenced: not evicted meanwhile */
	pthread_mutex_lock(&r->hot_lock);
	h->refs--;
	pthread_mutex_unlock(&r->hot_lock);
	return 0;
}

static bool hot_has(struct dcr_reader *r, const uint8_t hash[DCR_HASH_LEN],
		    uint32_t len)
{
	bool ret;

	pthread_mutex_lock(&r->hot_lock);
	ret = hot_find(r, hash, len) != NULL;
	pthread_mutex_unlock(&r->hot_lock);
	return ret;
}

static void flight_release(struct dcr_reader *r, struct flight *f);

/*
 * The cache key of chunk @chunk of file @file (manifest index) of @rv,
 * whose reference is @ref (which must outlive the key).
 */
static void cache_key(struct dcr_cache_key *k, const struct rver *rv,
		      uint32_t file, uint64_t chunk,
		      const struct dcr_catalog_chunk *ref)
{
	k->v = rv->v;
	k->file = file;
	k->chunk = chunk;
	k->file_size = rv->m.files[file].size;
	k->chunk_size = rv->chunk_size;
	k->len = dcr_chunk_len(k->file_size, k->chunk_size, chunk);
	k->hash = ref->hash;
	k->xxh = ref->has_check ? ref->xxh : NULL;
}

/*
 * Copy the whole verified chunk @k into @out from wherever this
 * instance has it: hot or built and waiting to be written (a published
 * flight), by content, or in its place in the cache. 0, -ENOENT, or
 * -errno.
 */
static int base_get(struct dcr_reader *r, const struct dcr_cache_key *k,
		    uint8_t *out)
{
	struct flight *f;

	if (hot_read(r, k->hash, k->len, 0, out, k->len) == 0)
		return 0;
	pthread_mutex_lock(&r->sf_lock);
	for (f = r->flights; f; f = f->next)
		if (f->done && f->rc == 0 && f->len == k->len &&
		    memcmp(f->hash, k->hash, DCR_HASH_LEN) == 0)
			break;
	if (f)
		f->refs++;
	pthread_mutex_unlock(&r->sf_lock);
	if (f) {
		memcpy(out, f->data, k->len);
		flight_release(r, f);
		return 0;
	}
	return dcr_cache_read(r->cache, k, 0, out, k->len);
}

void dcr_reader_keep_pagecache(bool on)
{
	tl_pagecache = on;
}

static size_t vers_lower(const struct dcr_reader *r, uint64_t v)
{
	size_t lo = 0, hi = r->nvers;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (r->vers[mid]->v < v)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static struct rver *vers_find(const struct dcr_reader *r, uint64_t v)
{
	size_t i = vers_lower(r, v);

	return i < r->nvers && r->vers[i]->v == v ? r->vers[i] : NULL;
}

/* Insert @rv in order. Caller holds the lock. */
static int vers_insert(struct dcr_reader *r, struct rver *rv)
{
	size_t i = vers_lower(r, rv->v);

	if (i < r->nvers && r->vers[i]->v == rv->v)
		return -EEXIST;
	if (r->nvers == r->capvers) {
		size_t cap = r->capvers ? r->capvers * 2 : 16;
		struct rver **tmp = realloc(r->vers, cap * sizeof(*tmp));
		if (!tmp)
			return DCR_ERR(-ENOMEM);
		r->vers = tmp;
		r->capvers = cap;
	}
	memmove(&r->vers[i + 1], &r->vers[i],
		(r->nvers - i) * sizeof(*r->vers));
	r->vers[i] = rv;
	r->nvers++;
	return 0;
}

static bool is_bad(const struct dcr_reader *r, uint64_t v)
{
	for (size_t i = 0; i < r->nbad; i++)
		if (r->bad[i] == v)
			return true;
	return false;
}

/* Remember a corrupt manifest so it is neither fetched nor logged again. */
static void mark_bad(struct dcr_reader *r, uint64_t v)
{
	pthread_mutex_lock(&r->lock);
	if (!is_bad(r, v)) {
		if (r->nbad == r->capbad) {
			size_t cap = r->capbad ? r->capbad * 2 : 8;
			uint64_t *tmp = realloc(r->bad, cap * sizeof(*tmp));
			if (tmp) {
				r->bad = tmp;
				r->capbad = cap;
			}
		}
		if (r->nbad < r->capbad)
			r->bad[r->nbad++] = v;
	}
	r->max_bad = DCR_MAX(r->max_bad, v);
	pthread_mutex_unlock(&r->lock);
}

static void rver_free(struct rver *rv)
{
	if (!rv)
		return;
	dcr_manifest_free(&rv->m);
	free(rv->entries);
	free(rv);
}

/* Build rv->entries from the chunk-less manifest rv->m. */
static int build_tree(struct rver *rv)
{
	const struct dcr_manifest *m = &rv->m;
	uint32_t n = m->nfiles + 1, *last;
	struct dcr_entry *e;

	if (m->nfiles >= UINT32_MAX - 1)
		return DCR_ERR(-EIO);
	e = calloc(n, sizeof(*e));
	last = malloc(n * sizeof(*last));
	if (!e || !last) {
		free(e);
		free(last);
		return DCR_ERR(-ENOMEM);
	}
	for (uint32_t i = 0; i < n; i++) {
		last[i] = UINT32_MAX;
		e[i].first_child = UINT32_MAX;
		e[i].next_sibling = UINT32_MAX;
	}
	e[0].path = "";
	e[0].name = "";
	e[0].type = DCR_FT_DIR;
	e[0].mode = 0755;
	e[0].mtime_ns = m->ctime_ns;
	for (uint32_t i = 0; i < m->nfiles; i++) {
		const struct dcr_file *f = &m->files[i];
		const char *slash = strrchr(f->path, '/');
		uint32_t parent = 0, me = i + 1;

		if (slash) {
			int64_t k = dcr_manifest_find_n(m, i, f->path,
						(size_t)(slash - f->path));
			if (k < 0 || m->files[k].type != DCR_FT_DIR) {
				dcr_err("version %llu: %s has no parent directory",
					(unsigned long long)m->version, f->path);
				free(e);
				free(last);
				return DCR_ERR(-EIO);
			}
			parent = (uint32_t)k + 1;
		}
		e[me].path = f->path;
		e[me].name = slash ? slash + 1 : f->path;
		e[me].parent = parent;
		e[me].type = f->type;
		e[me].mode = f->mode;
		e[me].size = f->type == DCR_FT_REG ? f->size : 0;
		e[me].mtime_ns = f->mtime_ns;
		if (last[parent] == UINT32_MAX)
			e[parent].first_child = me;
		else
			e[last[parent]].next_sibling = me;
		last[parent] = me;
	}
	free(last);
	rv->entries = e;
	rv->info.version = rv->v;
	rv->info.parent = rv->parent;
	rv->info.ctime_ns = rv->ctime_ns;
	rv->info.chunk_size = rv->chunk_size;
	rv->info.nentries = n;
	rv->info.entries = e;
	return 0;
}

/*
 * Make sure @rv's tree is loaded. Called without the lock: the catalog
 * read and the tree build run unlocked (the catalog may be busy indexing
 * a new version), and the result is installed under the lock; two
 * threads racing to load the same version both build it and the loser
 * frees its copy. Once loaded, m, entries and info never change.
 */
static int rver_load(struct dcr_reader *r, struct rver *rv)
{
	struct rver tmp;
	bool loaded;
	int ret;

	pthread_mutex_lock(&r->lock);
	loaded = rv->loaded;
	pthread_mutex_unlock(&r->lock);
	if (loaded)
		return 0;
	memset(&tmp, 0, sizeof(tmp));
	tmp.v = rv->v;
	tmp.parent = rv->parent;
	tmp.ctime_ns = rv->ctime_ns;
	tmp.chunk_size = rv->chunk_size;
	tmp.nfiles = rv->nfiles;
	ret = dcr_catalog_load_files(r->cat, rv->v, &tmp.m);
	if (ret)
		return ret == -ENOENT ? DCR_ERR(-EIO) : ret;
	ret = build_tree(&tmp);
	if (ret) {
		dcr_manifest_free(&tmp.m);
		return ret;
	}
	pthread_mutex_lock(&r->lock);
	if (!rv->loaded) {
		rv->m = tmp.m;
		rv->entries = tmp.entries;
		rv->info = tmp.info;
		rv->info.entries = rv->entries;
		rv->loaded = true;
		tmp.entries = NULL;
		memset(&tmp.m, 0, sizeof(tmp.m));
	}
	pthread_mutex_unlock(&r->lock);
	dcr_manifest_free(&tmp.m);
	free(tmp.entries);
	return 0;
}

/* The loaded version @v, or -ENOENT. The pointer stays valid until close. */
static int get_ver(struct dcr_reader *r, uint64_t v, struct rver **out)
{
	struct rver *rv;
	int ret;

	pthread_mutex_lock(&r->lock);
	rv = vers_find(r, v);
	pthread_mutex_unlock(&r->lock);
	ret = rv ? rver_load(r, rv) : -ENOENT;
	*out = ret ? NULL : rv;
	return ret;
}

static struct rver *rver_new(uint64_t v, uint64_t parent, int64_t ctime_ns,
			     uint32_t chunk_size, uint32_t nfiles)
{
	struct rver *rv = calloc(1, sizeof(*rv));

	if (!rv)
		return NULL;
	rv->v = v;
	rv->parent = parent;
	rv->ctime_ns = ctime_ns;
	rv->chunk_size = chunk_size;
	rv->nfiles = nfiles;
	return rv;
}

/* ------------------------------------------------------------ open/close */

static int load_tag(const char *name, uint64_t version, void *arg)
{
	struct dcr_reader *r = arg;
	struct dcr_tag *tmp = realloc(r->tags, (r->ntags + 1) * sizeof(*tmp));

	if (!tmp)
		return DCR_ERR(-ENOMEM);
	r->tags = tmp;
	tmp[r->ntags].name = strdup(name);
	if (!tmp[r->ntags].name)
		return DCR_ERR(-ENOMEM);
	tmp[r->ntags].version = version;
	r->ntags++;
	return 0;
}

/* Load the versions and tags recorded in the catalog. */
static int load_catalog(struct dcr_reader *r)
{
	struct dcr_catalog_version *vs;
	size_t n;
	int ret;

	ret = dcr_catalog_versions(r->cat, &vs, &n);
	if (ret)
		return ret;
	for (size_t i = 0; i < n && !ret; i++) {
		struct rver *rv = rver_new(vs[i].version, vs[i].parent,
					   vs[i].ctime_ns, vs[i].chunk_size,
					   vs[i].nfiles);
		if (!rv) {
			ret = DCR_ERR(-ENOMEM);
			break;
		}
		ret = vers_insert(r, rv);
		if (ret)
			rver_free(rv);
	}
	free(vs);
	if (ret)
		return ret;
	return dcr_catalog_tags(r->cat, load_tag, r);
}

/*
 * Take the per-store cache directory for this reader's lifetime: two
 * processes sharing it would delete each other's temporary files and
 * account the same bytes twice. flock(2) on <dir>/lock, which holds the
 * owner's pid for the message; the lock dies with the process, so a
 * crash leaves nothing to clean up. -EBUSY (logged) if it is taken.
 */
static int lock_dir(struct dcr_reader *r, const char *shown)
{
	char path[PATH_MAX], pid[32];
	ssize_t n;
	int fd, ret;

	if (snprintf(path, sizeof(path), "%s/lock", r->dir) >=
	    (int)sizeof(path))
		return DCR_ERR(-ENAMETOOLONG);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		ret = -errno;
		dcr_err("cache directory %s: %s: %s", shown, path,
			dcr_strerror(ret));
		return ret;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		ret = -errno;
		if (ret == -EWOULDBLOCK) {
			n = pread(fd, pid, sizeof(pid) - 1, 0);
			pid[n > 0 ? n : 0] = '\0';
			pid[strcspn(pid, "\n")] = '\0';
			dcr_err("cache directory %s is in use by another dcrfs "
				"(pid %s)", shown, pid[0] ? pid : "unknown");
			ret = DCR_ERR(-EBUSY);
		} else {
			dcr_err("cache directory %s: cannot lock %s: %s",
				shown, path, dcr_strerror(ret));
		}
		close(fd);
		return ret;
	}
	n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
	if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n)
		dcr_warn("cache directory %s: cannot write %s", shown, path);
	r->lock_fd = fd;
	return 0;
}

int dcr_reader_open(struct dcr_store *st, const struct dcr_reader_opts *opts,
		    struct dcr_reader **out)
{
	uint8_t h[DCR_HASH_LEN];
	char hex[DCR_HASH_HEX_LEN + 1];
	char path[PATH_MAX];
	struct dcr_reader *r;
	const char *url;
	int ret;

	*out = NULL;
	if (!st || !opts || !opts->cache_dir || !opts->cache_dir[0])
		return DCR_ERR(-EINVAL);
	url = st->url ? st->url : "";
	ret = dcr_mkdir_p(opts->cache_dir, 0700);
	if (ret) {
		dcr_err("cache directory %s: %s", opts->cache_dir,
			dcr_strerror(ret));
		return ret;
	}
	dcr_sha256(url, strlen(url), h);
	dcr_hash_hex(h, hex);
	if (snprintf(path, sizeof(path), "%s/%.*s", opts->cache_dir,
		     STORE_ID_LEN, hex) >= (int)sizeof(path))
		return DCR_ERR(-ENAMETOOLONG);
	if (mkdir(path, 0700) < 0 && errno != EEXIST) {
		ret = -errno;
		dcr_err("cache directory %s: %s", path, dcr_strerror(ret));
		return ret;
	}

	r = calloc(1, sizeof(*r));
	if (!r)
		return DCR_ERR(-ENOMEM);
	r->lock_fd = -1;
	r->st = st;
	r->fetch_threads = opts->fetch_threads > 0 ? opts->fetch_threads :
						     FETCH_THREADS_DEFAULT;
	r->fetch_threads = DCR_MIN(r->fetch_threads, RA_THREADS_MAX);
	r->readahead = opts->readahead < 0 ? 0 :
		       opts->readahead ? (uint64_t)opts->readahead :
					 READAHEAD_DEFAULT;
	r->coalesce_max = opts->coalesce_max ? opts->coalesce_max :
					       COALESCE_MAX_DEFAULT;
	pthread_mutex_init(&r->ra_lock, NULL);
	pthread_cond_init(&r->ra_cond, NULL);
	pthread_mutex_init(&r->refresh_lock, NULL);
	pthread_mutex_init(&r->lock, NULL);
	pthread_mutex_init(&r->sf_lock, NULL);
	pthread_cond_init(&r->sf_cond, NULL);
	pthread_mutex_init(&r->codec_lock, NULL);
	pthread_mutex_init(&r->ref_lock, NULL);
	pthread_mutex_init(&r->hot_lock, NULL);
	pthread_mutex_init(&r->wq_lock, NULL);
	pthread_cond_init(&r->wq_cond, NULL);
	pthread_mutex_init(&r->dq_lock, NULL);
	pthread_cond_init(&r->dq_cond, NULL);
	r->refs = calloc(REF_SLOTS, sizeof(*r->refs));
	r->hot = calloc(HOT_SLOTS, sizeof(*r->hot));
	r->hot_budget = DCR_MAX(HOT_BUDGET_MIN, 2 * r->readahead);
	r->dir = strdup(path);
	if (!r->dir || !r->refs || !r->hot) {
		ret = DCR_ERR(-ENOMEM);
		goto err_close;
	}
	ret = lock_dir(r, opts->cache_dir);
	if (ret)
		goto err_close;
	if (snprintf(path, sizeof(path), "%s/catalog.db", r->dir) >=
	    (int)sizeof(path)) {
		ret = DCR_ERR(-ENAMETOOLONG);
		goto err_close;
	}
	ret = dcr_catalog_open(path, url, &r->cat);
	if (ret)
		goto err_close;
	ret = dcr_cache_open(r->dir, opts->cache_size, &r->cache);
	if (ret)
		goto err_close;
	ret = load_catalog(r);
	if (ret)
		goto err_close;
	*out = r;
	return 0;

err_close:
	dcr_reader_close(r);
	return ret;
}

void dcr_reader_close(struct dcr_reader *r)
{
	if (!r)
		return;
	ra_stop(r);
	dq_stop(r);
	wq_stop(r);
	for (size_t i = 0; i < r->nvers; i++)
		rver_free(r->vers[i]);
	free(r->vers);
	free(r->bad);
	dcr_reader_tags_free(r->tags, r->ntags);
	for (int i = 0; i < r->ncodecs; i++)
		dcr_codec_free(r->codecs[i]);
	dcr_cache_close(r->cache);
	dcr_catalog_close(r->cat);
	pthread_mutex_destroy(&r->codec_lock);
	pthread_mutex_destroy(&r->ref_lock);
	free(r->refs);
	for (size_t i = 0; r->hot && i < HOT_SLOTS; i++)
		free(r->hot[i].data);
	free(r->hot);
	for (size_t i = 0; i < r->npool; i++)
		free(r->pool[i].p);
	pthread_mutex_destroy(&r->hot_lock);
	pthread_cond_destroy(&r->wq_cond);
	pthread_mutex_destroy(&r->wq_lock);
	pthread_cond_destroy(&r->dq_cond);
	pthread_mutex_destroy(&r->dq_lock);
	pthread_cond_destroy(&r->ra_cond);
	pthread_mutex_destroy(&r->ra_lock);
	pthread_cond_destroy(&r->sf_cond);
	pthread_mutex_destroy(&r->sf_lock);
	pthread_mutex_destroy(&r->lock);
	pthread_mutex_destroy(&r->refresh_lock);
	if (r->lock_fd >= 0)
		close(r->lock_fd); /* releases the flock */
	free(r->dir);
	free(r);
}

/* ------------------------------------------------------------ refresh */

/* State of one refresh: the last manifest indexed, kept whole so that
 * the next version can be checked against it without reloading it. */
struct refresh_ctx {
	struct dcr_manifest last;
	bool have_last;
};

static void refresh_ctx_free(struct refresh_ctx *ctx)
{
	if (ctx->have_last)
		dcr_manifest_free(&ctx->last);
	ctx->have_last = false;
}

/* Check @m against its parent, if the parent is known. 0 or -EBADMSG. */
static int check_parent(struct dcr_reader *r, struct refresh_ctx *ctx,
			const struct dcr_manifest *m, const char *key)
{
	struct dcr_manifest pm;
	struct rver *parent;
	int ret;

	if (ctx->have_last && ctx->last.version == m->parent) {
		ret = dcr_manifest_check_parent(m, &ctx->last);
	} else if (get_ver(r, m->parent, &parent) == 0) {
		/* A transient full load of the parent from the catalog. */
		ret = dcr_catalog_load_manifest(r->cat, m->parent, &pm);
		if (ret) {
			dcr_warn("%s: cannot load parent version %llu to check "
				 "it: %s", key, (unsigned long long)m->parent,
				 dcr_strerror(ret));
			return ret == -ENOMEM ? ret : 0;
		}
		ret = dcr_manifest_check_parent(m, &pm);
		dcr_manifest_free(&pm);
	} else {
		dcr_warn("%s: parent version %llu is missing or corrupt; reads "
			 "that need it will fail", key,
			 (unsigned long long)m->parent);
		return 0;
	}
	if (ret)
		dcr_err("%s: corrupt manifest: inconsistent with its parent "
			"version %llu", key, (unsigned long long)m->parent);
	return ret;
}

/*
 * Fetch and decode version @v's manifest. -ENOENT if absent, -EBADMSG if
 * corrupt (logged, naming the key), other -errno for a store failure,
 * which is not logged here (see fetch_failed).
 */
static int fetch_manifest(struct dcr_reader *r, uint64_t v, const char *key,
			  struct dcr_manifest *m)
{
	const char *url = r->st->url ? r->st->url : "store";
	struct dcr_buf b;
	int ret;

	dcr_buf_init(&b, MANIFEST_OBJ_MAX);
	ret = dcr_store_get(r->st, key, 0, DCR_GET_ALL, &b);
	if (ret)
		goto out_free;
	ret = dcr_manifest_decode(b.data, b.len, m);
	if (ret) {
		dcr_err("%s: manifest %s is corrupt or invalid (%s)", url, key,
			dcr_strerror(ret));
	} else if (m->version != v) {
		dcr_err("%s: manifest %s claims to be version %llu", url, key,
			(unsigned long long)m->version);
		dcr_manifest_free(m);
		memset(m, 0, sizeof(*m));
		ret = DCR_ERR(-EBADMSG);
	}
out_free:
	dcr_buf_free(&b);
	return ret;
}

/*
 * Errors of one object that the next poll would meet again: such a
 * version is skipped like a corrupt one (a directory where the manifest
 * should be, a manifest over the size limit, access refused to this one
 * key). Anything else (EIO, ETIMEDOUT, ... from a sick server) is
 * retried at the next refresh.
 */
static bool permanent_err(int e)
{
	return e == -EBADMSG || e == -EISDIR || e == -ENOTDIR ||
	       e == -EFBIG || e == -E2BIG || e == -EACCES || e == -EPERM ||
	       e == -ELOOP || e == -ENAMETOOLONG || e == -EINVAL;
}

/*
 * Log a failure to read version @v's manifest (@v 0: to list versions/),
 * at most once per FETCH_LOG_INTERVAL_NS for the same version and
 * error; repeats go to the debug log. Caller holds refresh_lock.
 */
static void fetch_failed(struct dcr_reader *r, uint64_t v, int err,
			 const char *what)
{
	const char *url = r->st->url ? r->st->url : "store";
	int64_t now = dcr_now_ns();
	unsigned slot = FETCH_LOG_SLOTS;
	char key[64] = "versions/";

	if (v)
		dcr_version_key(v, key, sizeof(key));
	for (unsigned i = 0; i < FETCH_LOG_SLOTS; i++)
		if (r->flog[i].at_ns && r->flog[i].v == v)
			slot = i;
	if (slot < FETCH_LOG_SLOTS && r->flog[slot].err == err &&
	    now - r->flog[slot].at_ns < FETCH_LOG_INTERVAL_NS) {
		dcr_debug("%s: cannot read %s: %s (again)", url, key,
			  dcr_strerror(err));
		return;
	}
	if (slot == FETCH_LOG_SLOTS)
		slot = r->flog_next++ % FETCH_LOG_SLOTS;
	r->flog[slot].v = v;
	r->flog[slot].err = err;
	r->flog[slot].at_ns = now;
	dcr_err("%s: cannot read %s: %s%s", url, key, dcr_strerror(err), what);
}

/*
 * Fetch, verify and index version @v. 0 if indexed or skipped as
 * corrupt (logged once), -ENOENT if it does not exist, other -errno for
 * a store failure (not logged: the caller marks or retries and logs).
 */
static int index_version(struct dcr_reader *r, struct refresh_ctx *ctx,
			 uint64_t v)
{
	char key[64];
	struct dcr_manifest m;
	struct rver *rv;
	int ret;

	dcr_version_key(v, key, sizeof(key));
	memset(&m, 0, sizeof(m));
	ret = fetch_manifest(r, v, key, &m);
	if (ret == -EBADMSG) {
		/* fetch_manifest logged it, naming the key. */
		mark_bad(r, v);
		return 0;
	}
	if (ret)
		return ret; /* not logged: the caller decides */
	ret = dcr_manifest_validate(&m);
	if (ret) {
		dcr_err("%s: corrupt manifest: %s", key, dcr_strerror(ret));
	} else if (m.parent >= v) {
		dcr_err("%s: corrupt manifest: parent %llu is not older",
			key, (unsigned long long)m.parent);
		ret = -EBADMSG;
	} else if (m.parent) {
		ret = check_parent(r, ctx, &m, key);
		if (ret == -ENOMEM) {
			dcr_manifest_free(&m);
			return ret;
		}
	}
	if (ret) {
		mark_bad(r, v);
		dcr_manifest_free(&m);
		return 0;
	}

	ret = dcr_catalog_add_version(r->cat, &m);
	if (ret && ret != -EEXIST) {
		/* Our catalog failed (and logged), not the manifest: never
		 * a reason to skip the version, retry it. */
		dcr_manifest_free(&m);
		return ret == -ENOMEM ? ret : DCR_ERR(-EIO);
	}
	rv = rver_new(v, m.parent, m.ctime_ns, m.chunk_size, m.nfiles);
	refresh_ctx_free(ctx);
	ctx->last = m; /* moved: the next version is likely its child */
	ctx->have_last = true;
	if (!rv)
		return DCR_ERR(-ENOMEM);
	pthread_mutex_lock(&r->lock);
	ret = vers_insert(r, rv);
	pthread_mutex_unlock(&r->lock);
	if (ret)
		rver_free(rv);
	return ret == -EEXIST ? 0 : ret;
}

struct vlist {
	uint64_t *v;
	size_t n, cap;
};

static int collect_version(const char *key, uint64_t size, void *arg)
{
	struct vlist *l = arg;
	uint64_t v;

	if (dcr_version_from_key(key, &v) != 0 || v == 0)
		return 0; /* not a manifest name: ignore */
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		uint64_t *tmp = realloc(l->v, cap * sizeof(*tmp));
		if (!tmp)
			return DCR_ERR(-ENOMEM);
		l->v = tmp;
		l->cap = cap;
	}
	l->v[l->n++] = v;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * List versions/ and index every version not known yet. The first
 * refresh of a process does this, and so does a probe that met an error
 * other than "absent" (@fail_v, @fail_err: not fetched again here), so
 * that one unreadable version does not hide the ones after it. A
 * version that fails with a permanent error (permanent_err) is marked
 * bad and logged once; after a transient one the next refresh lists
 * again, so that it is retried and not skipped by probing past it.
 */
static int refresh_list(struct dcr_reader *r, struct refresh_ctx *ctx,
			uint64_t fail_v, int fail_err)
{
	struct vlist l = { 0 };
	bool transient = false, seen_fail = false;
	char key[64];
	int ret;

	ret = dcr_store_list(r->st, "versions/", collect_version, &l);
	if (ret && ret != -ENOENT) {
		if (fail_v)
			fetch_failed(r, fail_v, fail_err, "");
		fetch_failed(r, 0, ret, "");
		free(l.v);
		return ret;
	}
	ret = 0;
	qsort(l.v, l.n, sizeof(*l.v), cmp_u64);
	for (size_t i = 0; i < l.n; i++) {
		bool known;
		int rc;

		if (i > 0 && l.v[i] == l.v[i - 1])
			continue;
		pthread_mutex_lock(&r->lock);
		known = vers_find(r, l.v[i]) || is_bad(r, l.v[i]);
		pthread_mutex_unlock(&r->lock);
		if (known)
			continue;
		if (l.v[i] == fail_v) {
			rc = fail_err;
			seen_fail = true;
		} else {
			rc = index_version(r, ctx, l.v[i]);
		}
		if (rc == -ENOMEM) {
			ret = rc;
			break;
		}
		if (!rc)
			continue;
		if (permanent_err(rc)) {
			/* Would fail the same way forever: skip it, once. */
			dcr_version_key(l.v[i], key, sizeof(key));
			dcr_err("%s: cannot read %s: %s; version %llu is "
				"skipped", r->st->url ? r->st->url : "store",
				key, dcr_strerror(rc),
				(unsigned long long)l.v[i]);
			mark_bad(r, l.v[i]);
			continue;
		}
		if (rc != -ENOENT) /* deleted since listed: nothing to say */
			fetch_failed(r, l.v[i], rc, "; retrying at the next "
						    "refresh");
		transient = true;
	}
	if (fail_v && !seen_fail)
		fetch_failed(r, fail_v, fail_err, ""); /* not even listed */
	free(l.v);
	if (!ret)
		r->listed = !transient;
	return ret;
}

/*
 * Later refreshes: probe n+1, n+2, ... until one does not exist (one
 * cheap GET when nothing is new). Any other failure falls back to a
 * listing (refresh_list), which finds the versions after it.
 */
static int refresh_probe(struct dcr_reader *r, struct refresh_ctx *ctx)
{
	uint64_t next;
	int ret;

	pthread_mutex_lock(&r->lock);
	next = DCR_MAX(r->nvers ? r->vers[r->nvers - 1]->v : 0, r->max_bad);
	pthread_mutex_unlock(&r->lock);
	for (;;) {
		ret = index_version(r, ctx, ++next);
		if (ret == -ENOENT)
			return 0;
		if (ret == -ENOMEM)
			return ret;
		if (ret)
			return refresh_list(r, ctx, next, ret);
	}
}

struct tlist {
	char **names;
	size_t n, cap;
};

static int collect_tag(const char *key, uint64_t size, void *arg)
{
	struct tlist *l = arg;
	const char *name = key;

	if (strncmp(name, "tags/", 5) == 0)
		name += 5;
	if (!dcr_tag_name_valid(name))
		return 0;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		char **tmp = realloc(l->names, cap * sizeof(*tmp));
		if (!tmp)
			return DCR_ERR(-ENOMEM);
		l->names = tmp;
		l->cap = cap;
	}
	l->names[l->n] = strdup(name);
	if (!l->names[l->n])
		return DCR_ERR(-ENOMEM);
	l->n++;
	return 0;
}

static int cmp_tag(const void *a, const void *b)
{
	return strcmp(((const struct dcr_tag *)a)->name,
		      ((const struct dcr_tag *)b)->name);
}

/* Re-list tags/ and replace the tag set. */
static int refresh_tags(struct dcr_reader *r)
{
	struct tlist l = { 0 };
	struct dcr_tag *tags = NULL, *old;
	const char **names = NULL;
	uint64_t *vs = NULL;
	size_t nt = 0, nold;
	int ret;

	ret = dcr_store_list(r->st, "tags/", collect_tag, &l);
	if (ret == -ENOENT)
		ret = 0;
	if (ret) {
		dcr_err("%s: cannot list tags/: %s",
			r->st->url ? r->st->url : "store", dcr_strerror(ret));
		goto out_free;
	}
	tags = calloc(l.n ? l.n : 1, sizeof(*tags));
	names = calloc(l.n ? l.n : 1, sizeof(*names));
	vs = calloc(l.n ? l.n : 1, sizeof(*vs));
	if (!tags || !names || !vs) {
		ret = DCR_ERR(-ENOMEM);
		goto out_free;
	}
	for (size_t i = 0; i < l.n; i++) {
		uint64_t v;
		int rc = dcr_store_get_tag(r->st, l.names[i], &v);

		if (rc) {
			if (rc != -ENOENT)
				dcr_warn("tags/%s: %s", l.names[i],
					 dcr_strerror(rc));
			continue;
		}
		tags[nt].name = l.names[i];
		tags[nt].version = v;
		l.names[i] = NULL;
		nt++;
	}
	qsort(tags, nt, sizeof(*tags), cmp_tag);
	for (size_t i = 0; i < nt; i++) {
		names[i] = tags[i].name;
		vs[i] = tags[i].version;
	}
	ret = dcr_catalog_set_tags(r->cat, names, vs, nt);
	if (ret)
		goto out_free;
	pthread_mutex_lock(&r->lock);
	old = r->tags;
	nold = r->ntags;
	r->tags = tags;
	r->ntags = nt;
	pthread_mutex_unlock(&r->lock);
	tags = old;
	nt = nold;

out_free:
	dcr_reader_tags_free(tags, nt);
	for (size_t i = 0; i < l.n; i++)
		free(l.names[i]);
	free(l.names);
	free(names);
	free(vs);
	return ret;
}

int dcr_reader_refresh(struct dcr_reader *r, uint64_t *latest)
{
	struct refresh_ctx ctx = { .have_last = false };
	int ret;

	pthread_mutex_lock(&r->refresh_lock);
	ret = r->listed ? refresh_probe(r, &ctx) : refresh_list(r, &ctx, 0, 0);
	refresh_ctx_free(&ctx);
	if (!ret)
		ret = refresh_tags(r);
	pthread_mutex_unlock(&r->refresh_lock);
	if (latest)
		*latest = dcr_reader_latest(r);
	return ret;
}

uint64_t dcr_reader_latest(struct dcr_reader *r)
{
	uint64_t v;

	pthread_mutex_lock(&r->lock);
	v = r->nvers ? r->vers[r->nvers - 1]->v : 0;
	pthread_mutex_unlock(&r->lock);
	return v;
}

int dcr_reader_versions(struct dcr_reader *r, uint64_t **vs, size_t *n)
{
	uint64_t *arr;

	pthread_mutex_lock(&r->lock);
	arr = malloc((r->nvers ? r->nvers : 1) * sizeof(*arr));
	if (!arr) {
		pthread_mutex_unlock(&r->lock);
		return DCR_ERR(-ENOMEM);
	}
	for (size_t i = 0; i < r->nvers; i++)
		arr[i] = r->vers[i]->v;
	*n = r->nvers;
	pthread_mutex_unlock(&r->lock);
	*vs = arr;
	return 0;
}

int dcr_reader_version(struct dcr_reader *r, uint64_t v,
		       const struct dcr_version_info **out)
{
	struct rver *rv;
	int ret = get_ver(r, v, &rv);

	*out = ret ? NULL : &rv->info;
	return ret;
}

int dcr_reader_tags(struct dcr_reader *r, struct dcr_tag **tags, size_t *n)
{
	struct dcr_tag *t;
	size_t i;

	*tags = NULL;
	*n = 0;
	pthread_mutex_lock(&r->lock);
	t = calloc(r->ntags ? r->ntags : 1, sizeof(*t));
	if (!t)
		goto err_unlock;
	for (i = 0; i < r->ntags; i++) {
		t[i].name = strdup(r->tags[i].name);
		if (!t[i].name)
			goto err_free;
		t[i].version = r->tags[i].version;
	}
	*n = r->ntags;
	pthread_mutex_unlock(&r->lock);
	*tags = t;
	return 0;

err_free:
	dcr_reader_tags_free(t, i);
err_unlock:
	pthread_mutex_unlock(&r->lock);
	return DCR_ERR(-ENOMEM);
}

void dcr_reader_tags_free(struct dcr_tag *tags, size_t n)
{
	if (!tags)
		return;
	for (size_t i = 0; i < n; i++)
		free(tags[i].name);
	free(tags);
}

/* ------------------------------------------------------------ read path */

/* One frame on a chunk's chain, newest first. */
struct step {
	struct rver *rv;
	uint32_t file;
	struct dcr_catalog_chunk ref;
	const uint8_t *data; /* the fetched frame (ref.len bytes), in a run */
	int rc;              /* the fetch's outcome */
};

struct chain {
	struct step *s;
	size_t n, cap;
	bool base_cached; /* out[] holds a cached ancestor chunk: */
	const struct rver *base_rv;
	uint32_t base_file;
	struct dcr_catalog_chunk base_ref;
};

static void chain_free(struct chain *ch)
{
	free(ch->s);
	ch->s = NULL;
	ch->n = ch->cap = 0;
}

static int chain_push(struct chain *ch, struct rver *rv, uint32_t file,
		      const struct dcr_catalog_chunk *ref)
{
	if (ch->n == ch->cap) {
		size_t cap = ch->cap ? ch->cap * 2 : 4;
		struct step *tmp = realloc(ch->s, cap * sizeof(*tmp));
		if (!tmp)
			return DCR_ERR(-ENOMEM);
		ch->s = tmp;
		ch->cap = cap;
	}
	memset(&ch->s[ch->n], 0, sizeof(ch->s[ch->n]));
	ch->s[ch->n].rv = rv;
	ch->s[ch->n].file = file;
	ch->s[ch->n].ref = *ref;
	ch->n++;
	return 0;
}

/* Where the chunk being materialized is, for log lines. */
struct where {
	const struct rver *rv;
	uint32_t file;
	uint64_t chunk;
};

#define WHERE_FMT "version %llu %s chunk %llu"
#define WHERE_ARGS(w)                                                    \
	(unsigned long long)(w)->rv->v, (w)->rv->m.files[(w)->file].path, \
		(unsigned long long)(w)->chunk

/*
 * Walk from @rv's chunk towards the anchor, stopping at the first
 * ancestor whose chunk is cached (read into @out) or that is a full
 * frame. Fills @ch with the frames to apply, newest first.
 */
static int resolve_chain(struct dcr_reader *r, const struct where *w,
			 const struct dcr_catalog_chunk *ref0, uint32_t clen,
			 uint8_t *out, struct chain *ch)
{
	struct dcr_catalog_chunk ref = *ref0;
	struct rver *cur = (struct rver *)w->rv, *pv;
	uint32_t cf = w->file, pf;
	uint64_t steps = 0;
	bool first = true;
	int ret;

	for (;;) {
		/* Parents strictly decrease, so a chain has at most v links;
		 * anything else is a damaged catalog, not a reason to spin. */
		if (++steps > w->rv->v) {
			RERR(WHERE_FMT ": the parent chain is longer than the "
			     "version number", WHERE_ARGS(w));
			return DCR_ERR(-EIO);
		}
		if (!first) {
			struct dcr_cache_key k;

			cache_key(&k, cur, cf, w->chunk, &ref);
			ret = base_get(r, &k, out);
			if (ret == 0) {
				ch->base_cached = true;
				ch->base_rv = cur;
				ch->base_file = cf;
				ch->base_ref = ref;
				return 0;
			}
			if (ret == -ENOMEM)
				return ret;
		}
		first = false;
		switch (ref.kind) {
		case DCR_CK_FULL:
			return chain_push(ch, cur, cf, &ref);
		case DCR_CK_DELTA:
			ret = chain_push(ch, cur, cf, &ref);
			if (ret)
				return ret;
			break;
		case DCR_CK_SAME:
			break;
		default:
			RERR(WHERE_FMT ": version %llu has an invalid "
				"chunk kind %u", WHERE_ARGS(w),
				(unsigned long long)cur->v, ref.kind);
			return DCR_ERR(-EIO);
		}

		pf = cur->m.files[cf].base;
		if (cur->parent >= cur->v) {
			RERR(WHERE_FMT ": version %llu has parent %llu, which "
			     "is not older", WHERE_ARGS(w),
			     (unsigned long long)cur->v,
			     (unsigned long long)cur->parent);
			return DCR_ERR(-EIO);
		}
		if (!cur->parent || pf == DCR_NO_BASE) {
			RERR(WHERE_FMT ": version %llu refers to a parent "
				"chunk but has no parent", WHERE_ARGS(w),
				(unsigned long long)cur->v);
			return DCR_ERR(-EIO);
		}
		ret = get_ver(r, cur->parent, &pv);
		if (ret) {
			RERR(WHERE_FMT ": needs version %llu (%s), which is "
				"missing or corrupt", WHERE_ARGS(w),
				(unsigned long long)cur->parent,
				ret == -ENOENT ? "not indexed"
					       : dcr_strerror(ret));
			return DCR_ERR(-EIO);
		}
		if (pf >= pv->m.nfiles || pv->m.files[pf].type != DCR_FT_REG ||
		    pv->chunk_size != cur->chunk_size ||
		    dcr_chunk_len(pv->m.files[pf].size, pv->chunk_size,
				  w->chunk) != clen) {
			RERR(WHERE_FMT ": base file %u of version %llu does "
				"not match", WHERE_ARGS(w), pf,
				(unsigned long long)pv->v);
			return DCR_ERR(-EIO);
		}
		ret = ref_get(r, pv->v, pf, w->chunk, &ref);
		if (ret) {
			RERR(WHERE_FMT ": no chunk reference in version "
				"%llu: %s", WHERE_ARGS(w),
				(unsigned long long)pv->v, dcr_strerror(ret));
			return DCR_ERR(-EIO);
		}
		cur = pv;
		cf = pf;
	}
}

/*
 * Apply the frames oldest-first onto @out. With @check, verify every
 * intermediate chunk against its own hash and set *@bad to the index of
 * the first step that fails (used only to name the culprit).
 */
static int apply_chain(struct dcr_codec *codec, struct chain *ch,
		       uint8_t *out, uint32_t clen, bool check, size_t *bad)
{
	uint8_t got[DCR_HASH_LEN];

	for (size_t k = ch->n; k-- > 0;) {
		struct step *s = &ch->s[k];
		int ret = dcr_frame_apply(codec, s->data, s->ref.len,
					  out, clen);
		if (ret) {
			*bad = k;
			return ret;
		}
		if (check) {
			dcr_sha256(out, clen, got);
			if (!dcr_hash_eq(got, s->ref.hash)) {
				*bad = k;
				return -EILSEQ; /* decodes, but wrong bytes */
			}
		}
	}
	return 0;
}

/* Name the frame that made the chain fail verification; one log line. */
static void blame(struct dcr_reader *r, const struct where *w,
		  struct dcr_codec *codec, struct chain *ch, uint8_t *out,
		  uint32_t clen, int first_err, size_t first_bad)
{
	char key[DCR_HASH_HEX_LEN + 16];
	size_t bad = first_bad;
	int ret = first_err;

	if (ret == 0) {
		/* Final hash mismatch: replay, checking every step. */
		struct dcr_cache_key k;
		bool base_ok = true;

		if (ch->base_cached) {
			cache_key(&k, ch->base_rv, ch->base_file, w->chunk,
				  &ch->base_ref);
			base_ok = base_get(r, &k, out) == 0;
		}
		bad = 0;
		if (base_ok)
			ret = apply_chain(codec, ch, out, clen, true, &bad);
		if (ret == 0)
			bad = 0;
	}
	dcr_pack_key(ch->s[bad].ref.pack, key, sizeof(key));
	RERR("%s: %s in the frame of version %llu at %llu+%u (needed for "
		WHERE_FMT ")", key,
		ret == -EBADMSG ? "corrupt frame (does not decode)"
		: ret == -EILSEQ || ret == 0 ? "corrupt data (chunk hash mismatch)"
					     : dcr_strerror(ret),
		(unsigned long long)ch->s[bad].rv->v,
		(unsigned long long)ch->s[bad].ref.off, ch->s[bad].ref.len,
		WHERE_ARGS(w));
}

/*
 * Whether @ch can be proven the fast way (manifest.h, format 2): the
 * chunk and every frame on its chain carry check values.
 */
static bool chain_has_check(const struct dcr_catalog_chunk *ref0,
			    const struct chain *ch)
{
	if (!ref0->has_check)
		return false;
	for (size_t k = 0; k < ch->n; k++)
		if (!ch->s[k].ref.has_check)
			return false;
	return true;
}

/*
 * Check the fetched frames of @ch, apply them onto @out (which holds the
 * cached base, if any) and prove the result equal to the committed
 * chunk: for format 2 chains, every frame against its SHA-256 and the
 * result against its XXH3-128 (see manifest.h for why that proves it);
 * else the result against its SHA-256. Errors are logged once (a failed
 * fetch was logged by fetch_run).
 */
static int finish_chain(struct dcr_reader *r, const struct where *w,
			const struct dcr_catalog_chunk *ref0, uint32_t clen,
			uint8_t *out, struct chain *ch)
{
	struct dcr_codec *codec = NULL;
	uint8_t got[DCR_HASH_LEN];
	bool fast = chain_has_check(ref0, ch);
	size_t bad = 0;
	int ret = 0;

	for (size_t k = 0; k < ch->n; k++)
		if (ch->s[k].rc)
			return ch->s[k].rc == -ENOMEM ? -ENOMEM : DCR_ERR(-EIO);
	for (size_t k = 0; fast && k < ch->n; k++) {
		dcr_sha256(ch->s[k].data, ch->s[k].ref.len, got);
		if (!dcr_hash_eq(got, ch->s[k].ref.fhash)) {
			char key[DCR_HASH_HEX_LEN + 16];

			dcr_pack_key(ch->s[k].ref.pack, key, sizeof(key));
			RERR("%s: corrupt frame (frame hash mismatch) of "
			     "version %llu at %llu+%u (needed for "
			     WHERE_FMT ")", key,
			     (unsigned long long)ch->s[k].rv->v,
			     (unsigned long long)ch->s[k].ref.off,
			     ch->s[k].ref.len, WHERE_ARGS(w));
			return DCR_ERR(-EIO);
		}
	}
	if (ch->n) {
		codec = codec_get(r);
		if (!codec)
			return DCR_ERR(-ENOMEM);
		ret = apply_chain(codec, ch, out, clen, false, &bad);
		if (ret == -ENOMEM)
			goto out_codec;
	}
	if (!ret && fast) {
		dcr_xxh128(out, clen, got);
		if (memcmp(got, ref0->xxh, DCR_XXH_LEN) == 0)
			goto out_codec;
	}
	if (!ret) {
		/* Format 1, or a check value that disagrees: the chunk's
		 * SHA-256 decides (it alone proves the bytes). */
		dcr_sha256(out, clen, got);
		if (dcr_hash_eq(got, ref0->hash)) {
			if (fast)
				dcr_warn(WHERE_FMT ": the check value in the "
					 "manifest does not match the chunk, "
					 "which matches its SHA-256 (a "
					 "committer bug?); served",
					 WHERE_ARGS(w));
			goto out_codec;
		}
	}
	if (ch->n) {
		blame(r, w, codec, ch, out, clen, ret, bad);
	} else {
		RERR(WHERE_FMT ": cached base does not match (hash "
		     "mismatch)", WHERE_ARGS(w));
	}
	ret = DCR_ERR(-EIO);
out_codec:
	if (codec)
		codec_put(r, codec);
	return ret;
}

static void flight_release(struct dcr_reader *r, struct flight *f)
{
	bool last;

	pthread_mutex_lock(&r->sf_lock);
	last = --f->refs == 0;
	pthread_mutex_unlock(&r->sf_lock);
	if (last) {
		if (f->done && f->rc == 0 && f->data)
			hot_put(r, f->hash, f->len, f->data);
		else
			buf_put(r, f->data, f->len);
		free(f);
	}
}

/* One chunk of a read: where it is and where its bytes go. */
struct piece {
	struct where w;
	struct dcr_catalog_chunk ref;
	uint32_t clen, coff;
	size_t n;
	uint8_t *dst; /* NULL: read-ahead, only cache the chunk */
};

/*
 * Fast path: look up the chunk's reference and try the cache. 0 on a
 * hit, -ENOENT on a miss (p->ref is then filled), else -errno (logged).
 * Without p->dst (read-ahead), a cached chunk is proven now if this
 * mount has not yet (on the read-ahead thread, through the page cache,
 * so the reader that follows splices it): 1 if that work was done.
 */
static int piece_fast(struct dcr_reader *r, struct piece *p)
{
	struct dcr_cache_key k;
	int ret;

	ret = ref_get(r, p->w.rv->v, p->w.file, p->w.chunk, &p->ref);
	if (ret) {
		RERR(WHERE_FMT ": no chunk reference in the catalog: %s",
		     WHERE_ARGS(&p->w), dcr_strerror(ret));
		return DCR_ERR(-EIO);
	}
	if (!p->dst) {
		if (hot_has(r, p->ref.hash, p->clen))
			return 0;
		cache_key(&k, p->w.rv, p->w.file, p->w.chunk, &p->ref);
		ret = dcr_cache_check(r->cache, &k);
		return ret < 0 && ret != -ENOMEM ? -ENOENT : ret;
	}
	if (hot_read(r, p->ref.hash, p->clen, p->coff, p->dst, p->n) == 0)
		return 0;
	cache_key(&k, p->w.rv, p->w.file, p->w.chunk, &p->ref);
	return dcr_cache_read(r->cache, &k, p->coff, p->dst, p->n);
}

/* ---------------------------------------------- parallel for, batches */

typedef void (*par_fn)(void *arg, size_t i);

struct par {
	par_fn fn;
	void *arg;
	size_t n;
	atomic_size_t next;
	bool quiet;
};

static void *par_worker(void *arg)
{
	struct par *pp = arg;
	size_t i;

	tl_quiet = pp->quiet;
	while ((i = atomic_fetch_add(&pp->next, 1)) < pp->n)
		pp->fn(pp->arg, i);
	return NULL;
}

/*
 * Run @fn(@arg, 0..@n-1) on up to @nthreads threads: the caller plus
 * short-lived helpers (a network wait blocks only its own thread).
 */
static void par_for(int nthreads, size_t n, par_fn fn, void *arg)
{
	struct par pp = { .fn = fn, .arg = arg, .n = n, .quiet = tl_quiet };
	pthread_t th[63];
	size_t nth = 0, want;

	atomic_init(&pp.next, 0);
	want = DCR_MIN((size_t)DCR_MAX(nthreads, 1), n);
	want = DCR_MIN(want, DCR_ARRAY_SIZE(th) + 1);
	for (; nth + 1 < want; nth++)
		if (pthread_create(&th[nth], NULL, par_worker, &pp) != 0)
			break;
	par_worker(&pp);
	for (size_t i = 0; i < nth; i++)
		pthread_join(th[i], NULL);
}

/* A chunk of a batch. */
struct bchunk {
	struct piece *p;
	struct flight *f;
	bool leader;  /* we build it; else we wait for f (or skip it) */
	bool ready;   /* f->data holds the verified chunk */
	bool handed;  /* a writer thread caches it and ends the flight */
	struct chain ch;
	int rc;
};

/* A frame to fetch: step @s of chunk @c. */
struct fitem {
	struct step *s;
	size_t c;
};

/* One ranged GET covering items [first, first+n) of one pack. */
struct run {
	size_t first, n;
	uint64_t off, len;
	struct dcr_buf buf;
};

struct batch {
	struct dcr_reader *r;
	bool pagecache; /* write the cache through the page cache */
	struct bchunk *c;
	size_t nc;
	struct fitem *it;
	size_t nit;
	struct run *runs;
	size_t nruns;
};

static int cmp_fitem(const void *a, const void *b)
{
	const struct step *x = ((const struct fitem *)a)->s;
	const struct step *y = ((const struct fitem *)b)->s;
	int c = memcmp(x->ref.pack, y->ref.pack, DCR_HASH_LEN);

	if (c)
		return c;
	return x->ref.off < y->ref.off ? -1 : x->ref.off > y->ref.off;
}

/* Fetch run @i and point its steps at their frames. */
static void fetch_run(void *arg, size_t i)
{
	struct batch *b = arg;
	struct run *ru = &b->runs[i];
	const struct fitem *first = &b->it[ru->first];
	const struct where *w = &b->c[first->c].p->w;
	char key[DCR_HASH_HEX_LEN + 16];
	bool logged = false;
	int ret;

	dcr_pack_key(first->s->ref.pack, key, sizeof(key));
	dcr_buf_init(&ru->buf, (size_t)ru->len);
	ret = dcr_store_get(b->r->st, key, ru->off, ru->len, &ru->buf);
	if (ret && ret != -ENOMEM) {
		RERR("%s: %s (needed for " WHERE_FMT ")", key,
		     ret == -ENOENT ? "missing object" : dcr_strerror(ret),
		     WHERE_ARGS(w));
		ret = DCR_ERR(-EIO);
	}
	for (size_t k = 0; k < ru->n; k++) {
		struct step *s = b->it[ru->first + k].s;
		uint64_t rel = s->ref.off - ru->off;

		s->rc = ret;
		if (ret)
			continue;
		if (rel + s->ref.len > ru->buf.len) {
			/* The pack ends early: frames before the cut are fine. */
			if (!logged)
				RERR("%s: truncated: %llu of %u bytes at %llu "
				     "(needed for " WHERE_FMT ")", key,
				     (unsigned long long)(ru->buf.len > rel ?
							  ru->buf.len - rel : 0),
				     s->ref.len,
				     (unsigned long long)s->ref.off,
				     WHERE_ARGS(&b->c[b->it[ru->first + k].c].p->w));
			logged = true;
			s->rc = DCR_ERR(-EIO);
			continue;
		}
		s->data = ru->buf.data + rel;
	}
}

static void flight_publish(struct dcr_reader *r, struct flight *f, int rc);
static void flight_done(struct dcr_reader *r, struct flight *f, int rc);

/* ------------------------------------------------------- write-behind */

/*
 * A chunk verified for a read is written to the cache by one of
 * WQ_THREADS writer threads, so that the thread that built it goes on
 * building the next one instead of waiting for the disk. The queued
 * flight keeps its buffer alive and stays listed, so a reader of the
 * chunk meanwhile joins it rather than building it again; the writer
 * ends it (flight_done, flight_release) once the file is in place. A
 * full queue makes the builder write itself: the disk sets the pace.
 */
static void *wq_main(void *arg)
{
	struct dcr_reader *r = arg;

	pthread_mutex_lock(&r->wq_lock);
	for (;;) {
		struct flight *f;

		while (!r->wq_stop && !r->wq_len)
			pthread_cond_wait(&r->wq_cond, &r->wq_lock);
		if (!r->wq_len)
			break; /* stopping, and everything is written */
		f = r->wq[r->wq_head];
		r->wq_head = (r->wq_head + 1) % WQ_MAX;
		r->wq_len--;
		r->wq_bytes -= f->len;
		r->wq_busy++;
		pthread_mutex_unlock(&r->wq_lock);
		struct dcr_cache_key k;

		cache_key(&k, f->rv, f->file, f->chunk, &f->ref);
		dcr_cache_put(r->cache, &k, f->data, DCR_CACHE_PUT_DIRECT);
		flight_done(r, f, 0);
		flight_release(r, f);
		pthread_mutex_lock(&r->wq_lock);
		if (--r->wq_busy == 0 && !r->wq_len)
			pthread_cond_broadcast(&r->wq_cond); /* dcr_reader_sync */
	}
	pthread_mutex_unlock(&r->wq_lock);
	return NULL;
}

/* Queue the published flight @f for writing: true if queued. */
static bool wq_submit(struct dcr_reader *r, struct flight *f)
{
	bool ok = false;

	pthread_mutex_lock(&r->wq_lock);
	if (!r->wq_started && !r->wq_stop) {
		r->wq_started = true;
		for (int i = 0; i < WQ_THREADS; i++) {
			if (pthread_create(&r->wq_th[r->nwq_th], NULL, wq_main,
					   r) != 0)
				break;
			r->nwq_th++;
		}
	}
	if (r->nwq_th && !r->wq_stop && r->wq_len < WQ_MAX &&
	    r->wq_bytes + f->len <= WQ_BYTES) {
		pthread_mutex_lock(&r->sf_lock);
		f->refs++; /* the writer's */
		pthread_mutex_unlock(&r->sf_lock);
		r->wq[(r->wq_head + r->wq_len) % WQ_MAX] = f;
		r->wq_len++;
		r->wq_bytes += f->len;
		pthread_cond_signal(&r->wq_cond);
		ok = true;
	}
	pthread_mutex_unlock(&r->wq_lock);
	return ok;
}

/* Set *@stop under @lock, wake the waiters on @cond, join the threads. */
static void threads_stop(pthread_mutex_t *lock, pthread_cond_t *cond,
			 bool *stop, pthread_t *th, int *nth)
{
	pthread_mutex_lock(lock);
	*stop = true;
	pthread_cond_broadcast(cond);
	pthread_mutex_unlock(lock);
	for (int i = 0; i < *nth; i++)
		pthread_join(th[i], NULL);
	*nth = 0;
}

/* Write what is queued, then stop and join the writers. */
static void wq_stop(struct dcr_reader *r)
{
	threads_stop(&r->wq_lock, &r->wq_cond, &r->wq_stop, r->wq_th,
		     &r->nwq_th);
}

/*
 * Leader chunk @c is built and proven: release its waiters (they need
 * not wait for the write too) and store it in its place in the cache,
 * behind the read (write-behind) or now. Every version's chunks go into
 * its own slab, those equal to an older version's too, so that evicting
 * old versions never costs a newer one its chunks.
 */
static void chunk_built(struct batch *b, struct bchunk *c)
{
	struct piece *p = c->p;

	c->ready = true;
	flight_publish(b->r, c->f, 0);
	if (!b->pagecache && wq_submit(b->r, c->f)) {
		c->handed = true;
	} else {
		struct dcr_cache_key k;

		cache_key(&k, p->w.rv, p->w.file, p->w.chunk, &p->ref);
		dcr_cache_put(b->r->cache, &k, c->f->data,
			      b->pagecache ? 0 : DCR_CACHE_PUT_DIRECT);
	}
}

/* Apply and verify leader chunk @i, then cache it. */
static void finish_one(void *arg, size_t i)
{
	struct batch *b = arg;
	struct bchunk *c = &b->c[i];
	struct piece *p = c->p;

	if (!c->leader || c->ready || c->rc)
		return;
	c->rc = finish_chain(b->r, &p->w, &p->ref, p->clen, c->f->data, &c->ch);
	if (!c->rc)
		chunk_built(b, c);
}

/* Register chunk @c: lead a new flight or join the one in progress. */
static int batch_join(struct dcr_reader *r, struct bchunk *c)
{
	const uint8_t *hash = c->p->ref.hash;
	struct flight *f;

	pthread_mutex_lock(&r->sf_lock);
	for (f = r->flights; f; f = f->next)
		if (f->len == c->p->clen &&
		    memcmp(f->hash, hash, DCR_HASH_LEN) == 0)
			break;
	if (f) {
		f->refs++;
		c->f = f;
		pthread_mutex_unlock(&r->sf_lock);
		return 0;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		pthread_mutex_unlock(&r->sf_lock);
		return DCR_ERR(-ENOMEM);
	}
	memcpy(f->hash, hash, DCR_HASH_LEN);
	f->len = c->p->clen;
	f->rv = c->p->w.rv;
	f->file = c->p->w.file;
	f->chunk = c->p->w.chunk;
	f->ref = c->p->ref;
	f->refs = 1;
	f->quiet = tl_quiet;
	f->next = r->flights;
	r->flights = f;
	pthread_mutex_unlock(&r->sf_lock);
	c->f = f;
	c->leader = true;
	return 0;
}

/*
 * Publish the outcome of a flight we lead: its waiters go on, and new
 * readers of the chunk still find it (and its data) until flight_done,
 * while it is being written to the cache.
 */
static void flight_publish(struct dcr_reader *r, struct flight *f, int rc)
{
	pthread_mutex_lock(&r->sf_lock);
	if (!f->done) {
		f->rc = rc;
		f->done = true;
		pthread_cond_broadcast(&r->sf_cond);
	}
	pthread_mutex_unlock(&r->sf_lock);
}

/*
 * End a flight we lead: publish @rc unless published, and unlist it, in
 * one step (a failed flight must not be joined after it ended: a new
 * reader leads a new attempt instead).
 */
static void flight_done(struct dcr_reader *r, struct flight *f, int rc)
{
	pthread_mutex_lock(&r->sf_lock);
	if (!f->done) {
		f->rc = rc;
		f->done = true;
		pthread_cond_broadcast(&r->sf_cond);
	}
	for (struct flight **pp = &r->flights; *pp; pp = &(*pp)->next) {
		if (*pp == f) {
			*pp = f->next;
			break;
		}
	}
	pthread_mutex_unlock(&r->sf_lock);
}

/* Collect the frames to fetch and merge adjacent ones into runs. */
static int plan_runs(struct batch *b)
{
	struct dcr_reader *r = b->r;
	size_t nit = 0;

	for (size_t i = 0; i < b->nc; i++)
		if (b->c[i].leader && !b->c[i].ready && !b->c[i].rc)
			nit += b->c[i].ch.n;
	if (!nit)
		return 0;
	b->it = calloc(nit, sizeof(*b->it));
	b->runs = calloc(nit, sizeof(*b->runs));
	if (!b->it || !b->runs)
		return DCR_ERR(-ENOMEM);
	for (size_t i = 0; i < b->nc; i++) {
		struct bchunk *c = &b->c[i];

		if (!c->leader || c->ready || c->rc)
			continue;
		for (size_t k = 0; k < c->ch.n; k++) {
			struct step *s = &c->ch.s[k];

			if (s->ref.len < DCR_FRAME_HDR_LEN) {
				char key[DCR_HASH_HEX_LEN + 16];

				dcr_pack_key(s->ref.pack, key, sizeof(key));
				RERR("%s: frame of version %llu at %llu has a "
				     "bad length %u (" WHERE_FMT ")", key,
				     (unsigned long long)s->rv->v,
				     (unsigned long long)s->ref.off,
				     s->ref.len, WHERE_ARGS(&c->p->w));
				c->rc = DCR_ERR(-EIO);
				break;
			}
		}
		if (c->rc)
			continue;
		for (size_t k = 0; k < c->ch.n; k++)
			b->it[b->nit++] = (struct fitem){ &c->ch.s[k], i };
	}
	qsort(b->it, b->nit, sizeof(*b->it), cmp_fitem);
	for (size_t k = 0; k < b->nit; k++) {
		const struct step *s = b->it[k].s;
		struct run *ru = b->nruns ? &b->runs[b->nruns - 1] : NULL;
		uint64_t end = s->ref.off + s->ref.len;

		if (ru && r->coalesce_max > 1 &&
		    !memcmp(b->it[ru->first].s->ref.pack, s->ref.pack,
			    DCR_HASH_LEN) &&
		    s->ref.off <= ru->off + ru->len + COALESCE_GAP &&
		    DCR_MAX(end, ru->off + ru->len) - ru->off <=
			    r->coalesce_max) {
			ru->len = DCR_MAX(end, ru->off + ru->len) - ru->off;
			ru->n++;
			continue;
		}
		ru = &b->runs[b->nruns++];
		ru->first = k;
		ru->n = 1;
		ru->off = s->ref.off;
		ru->len = s->ref.len;
	}
	return 0;
}

/*
 * Materialize the @n missed chunks @ps: join the flights of chunks that
 * others are building, lead the rest - resolve every chain, fetch all
 * their frames with as few ranged GETs as adjacency allows (one per run
 * of neighbouring frames in a pack), runs in parallel, then decode,
 * verify and cache - and copy each slice to its destination. With
 * @nthreads > 1 fetches and decodes run in parallel. Read-ahead callers
 * (tl_quiet) pass pieces without a destination and skip chunks already
 * in flight. Returns 0 or the first -errno.
 */
static int materialize_batch(struct dcr_reader *r, struct piece *ps, size_t n,
			     int nthreads);

/* Join or lead every chunk of @b, resolve the chains, plan the GETs. */
static void batch_prepare(struct batch *b, struct piece *ps)
{
	struct dcr_reader *r = b->r;
	int ret;

	for (size_t i = 0; i < b->nc; i++) {
		struct bchunk *c = &b->c[i];

		c->p = &ps[i];
		c->rc = batch_join(r, c);
		if (c->rc || !c->leader)
			continue;
		c->f->data = buf_get(r, c->p->clen);
		if (!c->f->data) {
			c->rc = DCR_ERR(-ENOMEM);
			continue;
		}
		/* A leader that just finished may have cached it after our
		 * miss: look once more before fetching. */
		{
			struct dcr_cache_key k;

			cache_key(&k, c->p->w.rv, c->p->w.file, c->p->w.chunk,
				  &c->p->ref);
			c->rc = dcr_cache_read(r->cache, &k, 0, c->f->data,
					       c->p->clen);
		}
		if (c->rc == 0) {
			c->ready = true;
		} else if (c->rc == -ENOENT) {
			c->rc = resolve_chain(r, &c->p->w, &c->p->ref,
					      c->p->clen, c->f->data, &c->ch);
			if (!c->rc && !c->ch.n) {
				/* An older version's cached chunk that is this
				 * one (SAME): proven, and stored as ours. */
				c->rc = finish_chain(r, &c->p->w, &c->p->ref,
						     c->p->clen, c->f->data,
						     &c->ch);
				if (!c->rc)
					chunk_built(b, c);
			}
		}
	}
	ret = plan_runs(b);
	if (ret) {
		for (size_t i = 0; i < b->nc; i++)
			if (b->c[i].leader && !b->c[i].ready && !b->c[i].rc)
				b->c[i].rc = ret;
		b->nruns = 0;
	}
}

/*
 * Decode, verify and cache what batch_prepare planned and the GETs
 * brought, hand the slices to their destinations, and free @b's parts.
 * Returns 0 or the first -errno (see materialize_batch).
 */
static int batch_finish(struct batch *b, int nthreads)
{
	struct dcr_reader *r = b->r;
	const size_t n = b->nc;
	int ret = 0;

	if (b->nruns)
		par_for(nthreads, n, finish_one, b);

	/* Leaders first: a waiter below may wait on a flight of ours. */
	for (size_t i = 0; i < n; i++) {
		struct bchunk *c = &b->c[i];

		if (!c->f || !c->leader)
			continue;
		if (!c->handed) /* else the writer ends it */
			flight_done(r, c->f, c->rc);
		if (!c->rc && c->p->dst)
			memcpy(c->p->dst, c->f->data + c->p->coff, c->p->n);
	}
	for (size_t i = 0; i < n; i++) {
		struct bchunk *c = &b->c[i];
		struct flight *f = c->f;

		if (!f || c->leader || !c->p->dst)
			continue;
		pthread_mutex_lock(&r->sf_lock);
		while (!f->done)
			pthread_cond_wait(&r->sf_cond, &r->sf_lock);
		pthread_mutex_unlock(&r->sf_lock);
		c->rc = f->rc;
		if (!c->rc) {
			memcpy(c->p->dst, f->data + c->p->coff, c->p->n);
		} else if (f->quiet && !tl_quiet) {
			/* Read-ahead failed quietly: do it ourselves, so the
			 * failure is logged by the read that needs it. */
			flight_release(r, f);
			c->f = NULL;
			c->rc = materialize_batch(r, c->p, 1, 1);
		}
	}

	for (size_t i = 0; i < n; i++) {
		if (b->c[i].f)
			flight_release(r, b->c[i].f);
		chain_free(&b->c[i].ch);
		if (!ret && b->c[i].rc && (!tl_quiet || b->c[i].leader))
			ret = b->c[i].rc;
	}
	for (size_t i = 0; i < b->nruns; i++)
		dcr_buf_free(&b->runs[i].buf);
	free(b->runs);
	free(b->it);
	free(b->c);
	return ret;
}

/*
 * Materialize the @n missed chunks @ps: join the flights of chunks that
 * others are building, lead the rest - resolve every chain, fetch all
 * their frames with as few ranged GETs as adjacency allows (one per run
 * of neighbouring frames in a pack), runs in parallel, then decode,
 * verify and cache - and copy each slice to its destination. With
 * @nthreads > 1 fetches and decodes run in parallel. Read-ahead callers
 * (tl_quiet) pass pieces without a destination and skip chunks already
 * in flight. Returns 0 or the first -errno.
 */
static int materialize_batch(struct dcr_reader *r, struct piece *ps, size_t n,
			     int nthreads)
{
	struct batch b = { .r = r, .nc = n, .pagecache = tl_pagecache };

	b.c = calloc(n, sizeof(*b.c));
	if (!b.c)
		return DCR_ERR(-ENOMEM);
	batch_prepare(&b, ps);
	if (b.nruns)
		par_for(nthreads, b.nruns, fetch_run, &b);
	return batch_finish(&b, nthreads);
}

/* --------------------------------------------------- read-ahead decode */

/*
 * Read-ahead threads fetch; decoding is handed to DQ_THREADS decoder
 * threads through a short queue. A read-ahead thread that decoded its
 * own job would leave the link idle meanwhile, and since concurrent GETs
 * share the link and finish together, all of them would then decode at
 * once and fetch at once: fetching and decoding would take turns
 * instead of overlapping. A full queue makes the fetcher decode itself.
 */
struct dq_item {
	struct batch b;
	struct piece ps[RA_JOB_MAX];
};

static void *dq_main(void *arg)
{
	struct dcr_reader *r = arg;

	tl_quiet = true;
	pthread_mutex_lock(&r->dq_lock);
	for (;;) {
		struct dq_item *it;

		while (!r->dq_stop && !r->dq_len)
			pthread_cond_wait(&r->dq_cond, &r->dq_lock);
		if (!r->dq_len)
			break; /* stopping, and everything is decoded */
		it = r->dq[r->dq_head];
		r->dq_head = (r->dq_head + 1) % DQ_MAX;
		r->dq_len--;
		r->dq_busy++;
		pthread_mutex_unlock(&r->dq_lock);
		batch_finish(&it->b, 1);
		free(it);
		pthread_mutex_lock(&r->dq_lock);
		if (--r->dq_busy == 0 && !r->dq_len)
			pthread_cond_broadcast(&r->dq_cond); /* dcr_reader_sync */
	}
	pthread_mutex_unlock(&r->dq_lock);
	return NULL;
}

/* Queue @it for a decoder: true if queued (it is theirs then). */
static bool dq_submit(struct dcr_reader *r, struct dq_item *it)
{
	bool ok = false;

	pthread_mutex_lock(&r->dq_lock);
	if (!r->dq_started && !r->dq_stop) {
		r->dq_started = true;
		for (int i = 0; i < DQ_THREADS; i++) {
			if (pthread_create(&r->dq_th[r->ndq_th], NULL, dq_main,
					   r) != 0)
				break;
			r->ndq_th++;
		}
	}
	if (r->ndq_th && !r->dq_stop && r->dq_len < DQ_MAX) {
		r->dq[(r->dq_head + r->dq_len) % DQ_MAX] = it;
		r->dq_len++;
		pthread_cond_signal(&r->dq_cond);
		ok = true;
	}
	pthread_mutex_unlock(&r->dq_lock);
	return ok;
}

/* Decode what is queued, then stop and join the decoders. */
static void dq_stop(struct dcr_reader *r)
{
	threads_stop(&r->dq_lock, &r->dq_cond, &r->dq_stop, r->dq_th,
		     &r->ndq_th);
}

/* Read-ahead of the @n pieces of @it: fetch here, decode over there. */
static void ra_materialize(struct dcr_reader *r, struct dq_item *it, size_t n)
{
	it->b = (struct batch){ .r = r, .nc = n, .pagecache = tl_pagecache };
	it->b.c = calloc(n, sizeof(*it->b.c));
	if (!it->b.c) {
		free(it);
		return;
	}
	batch_prepare(&it->b, it->ps);
	if (it->b.nruns)
		par_for(1, it->b.nruns, fetch_run, &it->b);
	if (!dq_submit(r, it)) {
		batch_finish(&it->b, 1);
		free(it);
	}
}

/* ------------------------------------------------------------ read-ahead */

/*
 * Read-ahead: the reader remembers the last RA_STREAMS files read and
 * where each read ended. A read that starts at offset 0 or near where
 * the previous one of the same file ended is sequential: the chunks up
 * to r->readahead bytes past it are queued, a few chunks per job (one
 * coalesced GET when their frames are neighbours), and materialized into
 * the cache by the read-ahead threads, so a cold sequential reader keeps
 * several GETs in flight. Foreground reads of a chunk being read ahead
 * join its flight. Errors of read-ahead are logged at debug level only.
 */
/* Note whether a job (or a read) on (@v, @idx) found all it needed. */
static void ra_hits(struct dcr_reader *r, uint64_t v, uint32_t idx, bool hit)
{
	pthread_mutex_lock(&r->ra_lock);
	for (int i = 0; i < RA_STREAMS; i++) {
		struct ra_stream *x = &r->ra_streams[i];

		if (x->used && x->v == v && x->idx == idx) {
			x->hits = hit ? x->hits + 1 : 0;
			if (!hit && x->skip_from != UINT64_MAX) {
				/* Queue what was skipped, from its start. */
				x->queued = DCR_MIN(x->queued, x->skip_from);
				x->skip_from = UINT64_MAX;
			}
			break;
		}
	}
	pthread_mutex_unlock(&r->ra_lock);
}

static void *ra_main(void *arg)
{
	struct dcr_reader *r = arg;

	tl_quiet = true;
	pthread_mutex_lock(&r->ra_lock);
	for (;;) {
		struct ra_job job;
		struct dq_item *it;
		struct piece *ps;
		size_t n = 0;

		while (!r->ra_stop && !r->ra_qlen)
			pthread_cond_wait(&r->ra_cond, &r->ra_lock);
		if (r->ra_stop)
			break;
		job = r->ra_q[r->ra_qhead];
		r->ra_qhead = (r->ra_qhead + 1) % RA_QUEUE;
		r->ra_qlen--;
		r->ra_busy++;
		pthread_mutex_unlock(&r->ra_lock);

		it = malloc(sizeof(*it));
		if (!it) {
			pthread_mutex_lock(&r->ra_lock);
			r->ra_busy--;
			continue; /* read-ahead is an optimization */
		}
		ps = it->ps;
		bool proved = false;

		for (uint32_t k = 0; k < job.n; k++) {
			struct piece *p = &ps[n];
			uint64_t i = job.first + k;
			int ret;

			memset(p, 0, sizeof(*p));
			p->w.rv = job.rv;
			p->w.file = job.idx - 1;
			p->w.chunk = i;
			p->clen = dcr_chunk_len(job.rv->entries[job.idx].size,
						job.rv->chunk_size, i);
			ret = piece_fast(r, p);
			if (ret == -ENOENT)
				n++;
			else if (ret == 1)
				proved = true;
		}
		if (n) {
			tl_pagecache = job.pagecache;
			ra_materialize(r, it, n);
		} else {
			free(it);
		}
		/* Proving cached chunks ahead of the reader is work too:
		 * read-ahead stays on while it finds some to do. */
		ra_hits(r, job.rv->v, job.idx, n == 0 && !proved);

		pthread_mutex_lock(&r->ra_lock);
		if (--r->ra_busy == 0 && !r->ra_qlen)
			pthread_cond_broadcast(&r->ra_cond); /* dcr_reader_sync */
	}
	pthread_mutex_unlock(&r->ra_lock);
	return NULL;
}

/* Stop and join the read-ahead threads; queued jobs are dropped. */
static void ra_stop(struct dcr_reader *r)
{
	threads_stop(&r->ra_lock, &r->ra_cond, &r->ra_stop, r->ra_th,
		     &r->nra_th);
}

/* Note a read of [off, end) of entry @idx; queue read-ahead if sequential. */
static void ra_note(struct dcr_reader *r, struct rver *rv, uint32_t idx,
		    uint64_t off, uint64_t end)
{
	const uint64_t size = rv->entries[idx].size, cs = rv->chunk_size;
	const uint64_t slack = DCR_MAX((uint64_t)4 << 20, 4 * cs);
	const uint64_t nchunks = dcr_chunk_count(size, (uint32_t)cs);
	struct ra_stream *s = NULL, *lru = &r->ra_streams[0];
	uint64_t from, to, group;
	bool seq;

	if (r->readahead == 0 || end >= size)
		return;
	pthread_mutex_lock(&r->ra_lock);
	for (int i = 0; i < RA_STREAMS; i++) {
		struct ra_stream *x = &r->ra_streams[i];

		if (x->used && x->v == rv->v && x->idx == idx) {
			s = x;
			break;
		}
		if (!x->used || (lru->used && x->stamp < lru->stamp))
			lru = x;
	}
	seq = off == 0 || (s && off + slack >= s->next_off &&
			   off <= s->next_off + slack);
	if (!s || !seq) {
		s = s ? s : lru;
		s->used = true;
		s->v = rv->v;
		s->idx = idx;
		s->next_off = end;
		s->queued = 0;
		s->hits = 0;
		s->skipped = 0;
		s->skip_from = UINT64_MAX;
	}
	s->stamp = ++r->ra_clock;
	s->next_off = DCR_MAX(s->next_off, end);
	if (!seq || r->ra_stop)
		goto out_unlock;

	/* Start the threads on the first sequential read. */
	if (!r->ra_started) {
		r->ra_started = true;
		for (int i = 0; i < r->fetch_threads && i < RA_THREADS_MAX; i++) {
			if (pthread_create(&r->ra_th[r->nra_th], NULL, ra_main,
					   r) != 0)
				break;
			r->nra_th++;
		}
	}
	from = DCR_MAX(s->queued, dcr_chunk_index(end - 1, (uint32_t)cs) + 1);
	to = DCR_MIN(nchunks, dcr_chunk_index(DCR_MIN(end + r->readahead,
						      size) - 1, (uint32_t)cs) + 1);
	group = DCR_MAX((uint64_t)1, DCR_MIN((uint64_t)RA_JOB_MAX,
					     (RA_JOB_BYTES + cs - 1) / cs));
	while (from < to && r->ra_qlen < RA_QUEUE && r->nra_th) {
		struct ra_job *j = &r->ra_q[(r->ra_qhead + r->ra_qlen) %
					    RA_QUEUE];

		if (s->hits >= RA_HITS_QUIET && ++s->skipped < RA_PROBE) {
			if (s->skip_from == UINT64_MAX)
				s->skip_from = from;
			from += DCR_MIN(group, to - from); /* all cached */
			continue;
		}
		s->skipped = 0;
		j->rv = rv;
		j->idx = idx;
		j->first = from;
		j->n = (uint32_t)DCR_MIN(group, to - from);
		j->pagecache = tl_pagecache;
		from += j->n;
		r->ra_qlen++;
		pthread_cond_signal(&r->ra_cond);
	}
	s->queued = DCR_MAX(s->queued, from);
out_unlock:
	pthread_mutex_unlock(&r->ra_lock);
}

ssize_t dcr_reader_read(struct dcr_reader *r, uint64_t v, uint32_t idx,
			uint64_t off, void *dst, size_t len)
{
	const struct dcr_entry *e;
	struct piece one, *miss = &one;
	size_t nmiss = 0, cap = 1;
	struct rver *rv;
	uint64_t size, end, pos;
	uint32_t cs;
	int ret;

	ret = get_ver(r, v, &rv);
	if (ret)
		return ret;
	if (idx >= rv->info.nentries)
		return -ENOENT;
	e = &rv->entries[idx];
	if (e->type == DCR_FT_DIR)
		return -EISDIR;
	if (e->type != DCR_FT_REG)
		return DCR_ERR(-EIO);
	size = e->size;
	if (off >= size || len == 0)
		return 0;
	if (len > SSIZE_MAX)
		len = SSIZE_MAX;
	end = off + DCR_MIN((uint64_t)len, size - off);
	cs = rv->chunk_size;
	ra_note(r, rv, idx, off, end);

	/* Serve what the cache holds; collect the misses. */
	for (pos = off; pos < end;) {
		uint64_t i = dcr_chunk_index(pos, cs);
		struct piece p;

		p.w.rv = rv;
		p.w.file = idx - 1;
		p.w.chunk = i;
		p.clen = dcr_chunk_len(size, cs, i);
		p.coff = (uint32_t)(pos - i * cs);
		p.n = (size_t)DCR_MIN(end - pos, (uint64_t)p.clen - p.coff);
		p.dst = (uint8_t *)dst + (pos - off);
		pos += p.n;
		ret = piece_fast(r, &p);
		if (ret == 0)
			continue;
		if (ret != -ENOENT)
			goto out_free;
		if (nmiss == cap) {
			size_t ncap = cap * 4;
			struct piece *tmp = miss == &one ? NULL : miss;
			tmp = realloc(tmp, ncap * sizeof(*tmp));
			if (!tmp) {
				ret = DCR_ERR(-ENOMEM);
				goto out_free;
			}
			if (miss == &one)
				tmp[0] = one;
			miss = tmp;
			cap = ncap;
		}
		miss[nmiss++] = p;
	}

	/* Materialize the misses: one batch, coalesced, in parallel. */
	if (nmiss)
		ra_hits(r, v, idx, false); /* read-ahead fell behind */
	ret = nmiss ? materialize_batch(r, miss, nmiss, r->fetch_threads) : 0;
out_free:
	if (miss != &one)
		free(miss);
	return ret ? ret : (ssize_t)(end - off);
}

/* ------------------------------------------------ zero-copy reads (fs/)
 * dcr_reader_read_fd: owned by the read-path performance work (issue 5),
 * kept in this separate block so it stays out of the way of the fetch
 * path above. It only ever serves chunks the cache already holds; any
 * miss sends the caller back to dcr_reader_read, which materializes.
 */
ssize_t dcr_reader_read_fd(struct dcr_reader *r, uint64_t v, uint32_t idx,
			   uint64_t off, size_t len, struct dcr_read_seg *segs,
			   size_t max, size_t *nbytes)
{
	const struct dcr_entry *e;
	struct rver *rv;
	uint64_t size, end, pos;
	size_t nseg = 0;
	uint32_t cs;
	int ret;

	*nbytes = 0;
	ret = get_ver(r, v, &rv);
	if (ret)
		return ret;
	if (idx >= rv->info.nentries)
		return -ENOENT;
	e = &rv->entries[idx];
	if (e->type == DCR_FT_DIR)
		return -EISDIR;
	if (e->type != DCR_FT_REG)
		return DCR_ERR(-EIO);
	size = e->size;
	if (off >= size || len == 0)
		return 0;
	end = off + DCR_MIN((uint64_t)len, size - off);
	cs = rv->chunk_size;
	ra_note(r, rv, idx, off, end);

	for (pos = off; pos < end;) {
		uint64_t i = dcr_chunk_index(pos, cs);
		struct dcr_catalog_chunk ref;
		struct dcr_cache_key k;
		uint32_t clen = dcr_chunk_len(size, cs, i);
		uint32_t coff = (uint32_t)(pos - i * cs);
		size_t n = (size_t)DCR_MIN(end - pos, (uint64_t)clen - coff);
		uint64_t slab_off;
		int fd;

		if (nseg == max) {
			ret = -ENOENT; /* too fragmented: take the copy path */
			goto err_close;
		}
		/* Any trouble: -ENOENT, and dcr_reader_read does it right
		 * (materializes, or fails with its one log line). */
		ret = -ENOENT;
		/* A chunk that is hot but not written yet misses here; one
		 * written around the page cache is not resident, and the
		 * caller copies it (from memory) instead of splicing. */
		if (ref_get(r, v, idx - 1, i, &ref) != 0)
			goto err_close;
		cache_key(&k, rv, idx - 1, i, &ref);
		fd = dcr_cache_open_fd(r->cache, &k, &slab_off);
		if (fd < 0)
			goto err_close;
		segs[nseg].fd = fd;
		segs[nseg].off = slab_off + coff;
		segs[nseg].len = n;
		nseg++;
		pos += n;
	}
	*nbytes = (size_t)(end - off);
	return (ssize_t)nseg;

err_close:
	while (nseg)
		close(segs[--nseg].fd);
	return ret;
}

/* -------------------------------------------------------------- sync */

/* Wait until nothing is queued in @q's queue and no worker is busy. */
#define WAIT_IDLE(r, lock, cond, len, busy)                                  \
	do {                                                                 \
		pthread_mutex_lock(&(r)->lock);                              \
		while ((r)->len || (r)->busy)                                \
			pthread_cond_wait(&(r)->cond, &(r)->lock);           \
		pthread_mutex_unlock(&(r)->lock);                            \
	} while (0)

void dcr_reader_sync(struct dcr_reader *r)
{
	/* In pipeline order: read-ahead feeds the decoders, which (like
	 * every read) feed the writers. */
	if (r->nra_th)
		WAIT_IDLE(r, ra_lock, ra_cond, ra_qlen, ra_busy);
	if (r->ndq_th)
		WAIT_IDLE(r, dq_lock, dq_cond, dq_len, dq_busy);
	if (r->nwq_th)
		WAIT_IDLE(r, wq_lock, wq_cond, wq_len, wq_busy);
}
