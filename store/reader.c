/* SPDX-License-Identifier: MIT */
/*
 * reader.c - the read path (DESIGN.md section 6; API in reader.h): its
 * facade.
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
 * Locks: reader_int.h lists every lock, what it guards and their order.
 * The catalog and the cache have their own internal locks.
 *
 * A read first serves every chunk the cache holds; its misses form one
 * batch (materialize_batch): all their chains are resolved, the frames
 * to fetch are sorted by pack and offset and neighbours merged into one
 * ranged GET ("runs", up to opts->coalesce_max bytes), the runs fetched
 * and the chunks decoded on up to opts->fetch_threads threads (the caller
 * plus idle threads of a pool). The FUSE layer already calls us from many
 * threads, and the chunk table (one entry per chunk content) keeps them
 * from fetching or decoding a chunk twice. Sequential reads also queue
 * read-ahead (ra_note), which background threads materialize into the
 * cache, so a cold sequential reader keeps several GETs in flight.
 *
 * This file is the facade: open/close, the reads (dcr_reader_read,
 * _read_tree, _prefetch) and sync. The work is in rversions.c (versions,
 * refresh, tags), rchunks.c (references, the chunk table), rmaterialize.c
 * (chains and batches) and rqueues.c (write-behind, read-ahead decode,
 * read-ahead); reader_int.h holds what they share.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
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
#include "reader.h"
#include "reader_int.h"

/* ------------------------------------------------------------ open/close */

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

/* Remove the files of directory @path, then the directory: 0 or -errno. */
static int remove_flat_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int ret = 0;

	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (unlinkat(dirfd(d), e->d_name, 0) < 0 && errno != ENOENT)
			ret = -errno;
	}
	closedir(d);
	if (!ret && rmdir(path) < 0 && errno != ENOENT)
		ret = -errno;
	return ret;
}

/* Drop what <dir> holds of a store: the catalog and every slab. */
static int drop_store_state(struct dcr_reader *r)
{
	static const char *const names[] = {
		"catalog.db", "catalog.db-wal", "catalog.db-shm",
		"catalog.db.rebuild", "store-id",
	};
	char path[PATH_MAX];

	for (size_t i = 0; i < DCR_ARRAY_SIZE(names); i++) {
		if (dcr_path_join_buf(path, sizeof(path), r->dir, names[i]))
			return DCR_ERR(-ENAMETOOLONG);
		if (unlink(path) < 0 && errno != ENOENT)
			return -errno;
	}
	snprintf(path, sizeof(path), "%s/slabs", r->dir);
	return remove_flat_dir(path);
}

/*
 * Bind the per-store directory to the store's incarnation. <dir>/store-id
 * holds the id of the store it was filled from (dcr_store_identify, or
 * @known when the caller has just read it: one GET less per mount). If
 * the store now has another id - it was deleted and created again at the
 * same URL - or the directory was filled before ids were recorded, the
 * catalog and every slab are dropped first: nothing of another store is
 * ever served. A store that cannot be asked (down, unreachable; or
 * @known_err, what the caller's asking got) keeps a directory already
 * bound, so a mount still starts from its cache.
 */
static int bind_store(struct dcr_reader *r, const struct dcr_store_info *known,
		      int known_err)
{
	struct dcr_store_info info;
	char path[PATH_MAX], tmp[PATH_MAX + 8], have[DCR_STORE_ID_MAX + 2];
	struct stat sb;
	bool filled;
	ssize_t n = -1;
	int fd, ret;

	snprintf(path, sizeof(path), "%s/store-id", r->dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, have, sizeof(have) - 1);
		close(fd);
	}
	have[n > 0 ? n : 0] = '\0';
	have[strcspn(have, "\n")] = '\0';

	if (known && known->id[0]) {
		info = *known;
		ret = 0;
	} else if (known_err) {
		ret = known_err; /* asked already, just now */
	} else {
		ret = dcr_store_identify(r->st, &info);
	}
	if (ret == -ENOENT) {
		info.id[0] = '\0'; /* no store (yet): nothing to bind to */
	} else if (ret) {
		if (!have[0])
			return ret;
		dcr_warn("%s: cannot identify the store (%s); using the cache "
			 "directory as it is, bound to store id %s",
			 r->st->url, dcr_strerror(ret), have);
		snprintf(r->vs.store_id, sizeof(r->vs.store_id), "%s", have);
		return 0;
	}
	snprintf(r->vs.store_id, sizeof(r->vs.store_id), "%s", info.id);
	if (!strcmp(have, info.id))
		return 0;
	snprintf(tmp, sizeof(tmp), "%s/catalog.db", r->dir);
	filled = stat(tmp, &sb) == 0;
	snprintf(tmp, sizeof(tmp), "%s/slabs", r->dir);
	filled = filled || stat(tmp, &sb) == 0;
	if (filled && (have[0] || info.id[0])) {
		if (have[0])
			dcr_warn("%s: the store was created anew (id %s, the "
				 "cache had %s): dropping its catalog and "
				 "cached chunks", r->st->url,
				 info.id[0] ? info.id : "none", have);
		else
			dcr_info("%s: the cache directory predates store ids: "
				 "starting it afresh", r->st->url);
		ret = drop_store_state(r);
		if (ret) {
			dcr_err("cache directory %s: cannot drop the old "
				"store's state: %s", r->dir, dcr_strerror(ret));
			return ret;
		}
	}
	if (!info.id[0])
		return 0;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ret = fd < 0 ? -errno : 0;
	if (!ret) {
		snprintf(have, sizeof(have), "%s\n", info.id);
		ret = dcr_write_full(fd, have, strlen(have));
		if (close(fd) < 0 && !ret)
			ret = -errno;
		if (!ret && rename(tmp, path) < 0)
			ret = -errno;
		if (ret)
			unlink(tmp);
	}
	if (ret) {
		dcr_err("cache directory %s: cannot record the store id: %s",
			r->dir, dcr_strerror(ret));
		return ret;
	}
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
	atomic_init(&r->cache_direct, true);
	r->lock_fd = -1;
	r->st = st;
	r->fetch_threads = opts->fetch_threads > 0 ? opts->fetch_threads :
						     FETCH_THREADS_DEFAULT;
	r->fetch_threads = DCR_MIN(r->fetch_threads, FETCH_THREADS_MAX);
	r->readahead = opts->readahead < 0 ? 0 :
		       opts->readahead ? (uint64_t)opts->readahead :
					 READAHEAD_DEFAULT;
	r->coalesce_max = opts->coalesce_max ? opts->coalesce_max :
					       COALESCE_MAX_DEFAULT;
	r->read_timeout_ns = (int64_t)opts->read_timeout_ms * 1000000;
	versions_init(r, opts);
	codecs_init(&r->codecs);
	ctab_init(&r->ct, DCR_MAX(HOT_BUDGET_MIN, 2 * r->readahead));
	ret = refs_init(&r->refs);
	if (!ret)
		ret = queues_open(r);
	r->dir = strdup(path);
	if (!ret && !r->dir)
		ret = DCR_ERR(-ENOMEM);
	if (ret)
		goto err_close;
	ret = lock_dir(r, opts->cache_dir);
	if (!ret)
		ret = bind_store(r, opts->store_info, opts->store_err);
	if (!ret)
		ret = trust_bind_dir(r, drop_store_state);
	if (ret)
		goto err_close;
	if (snprintf(path, sizeof(path), "%s/catalog.db", r->dir) >=
	    (int)sizeof(path)) {
		ret = DCR_ERR(-ENAMETOOLONG);
		goto err_close;
	}
	/* The cache first: it leaves the catalog room on a full disk. */
	r->cache_budget = opts->cache_size ? opts->cache_size : DCR_CACHE_SIZE_DEFAULT;
	ret = dcr_cache_open(r->dir, opts->cache_size, &r->cache);
	if (ret)
		goto err_close;
	ret = dcr_catalog_open(path, url, &r->cat);
	if (ret)
		goto err_close;
	dcr_catalog_set_room_hook(r->cat, dcr_cache_room_hook, r->cache);
	ret = load_catalog(r);
	if (!ret)
		ret = trust_open(r);
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
	queues_close(r);
	versions_close(r);
	codecs_close(&r->codecs);
	dcr_cache_close(r->cache);
	dcr_catalog_close(r->cat);
	refs_close(&r->refs);
	ctab_destroy(&r->ct);
	if (r->lock_fd >= 0)
		close(r->lock_fd); /* releases the flock */
	free(r->dir);
	free(r);
}

/* ------------------------------------------------------------ reads */

/*
 * The version and the bytes a read of [@off, @off+@len) of entry @idx of
 * version @v (of its tree @tree; -1: any) covers: *@rvp, the file's *@size and the end of the range
 * clamped to it in *@end; the read is noted for read-ahead (whose
 * chunks go through the page cache with @pagecache). 1 when there is
 * something to read, 0 at or past the end (or @len 0), or -errno.
 */
static int read_range(struct dcr_reader *r, uint64_t v, int64_t tree,
		      uint32_t idx, uint64_t off, size_t len, bool pagecache,
		      struct rver **rvp, uint64_t *size, uint64_t *end)
{
	const struct dcr_entry *e;
	int ret;

	ret = get_ver(r, v, rvp);
	if (ret)
		return ret;
	if (tree >= 0 && (*rvp)->tree != (uint32_t)tree)
		return -ESTALE; /* re-indexed with other content since */
	if (idx >= (*rvp)->info.nentries)
		return -ENOENT;
	e = &(*rvp)->entries[idx];
	if (e->type == DCR_FT_DIR)
		return -EISDIR;
	if (e->type != DCR_FT_REG)
		return DCR_ERR(-EIO);
	*size = e->size;
	if (off >= *size || len == 0)
		return 0;
	*end = off + DCR_MIN((uint64_t)len, *size - off);
	ra_note(r, *rvp, idx, off, *end, pagecache);
	return 1;
}

/* One attempt of read_impl; *@rvp: the version read (NULL if none). */
static ssize_t read_once(struct dcr_reader *r, uint64_t v, int64_t tree,
			 uint32_t idx, uint64_t off, void *dst, size_t len,
			 bool pagecache, struct rver **rvp)
{
	struct piece one, *miss = &one;
	size_t nmiss = 0, cap = 1;
	struct rver *rv = NULL;
	uint64_t size = 0, end = 0, pos;
	uint32_t cs;
	int ret;
	/* A foreground read, or a prefetch (@pagecache; with no @dst it
	 * only settles the chunks in the cache). */
	struct rreq q = { .pagecache = pagecache, .settle = !dst };

	if (len > SSIZE_MAX)
		len = SSIZE_MAX;
	ret = read_range(r, v, tree, idx, off, len, pagecache, &rv, &size, &end);
	*rvp = rv;
	if (ret <= 0)
		return ret;
	cs = rv->chunk_size;

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
		p.dst = dst ? (uint8_t *)dst + (pos - off) : NULL;
		pos += p.n;
		ret = piece_fast(r, &q, &p); /* without dst: 1 if proved now */
		STAT_ADD(r, hits, ret >= 0);
		STAT_ADD(r, misses, ret == -ENOENT);
		if (ret >= 0)
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
	ret = 0;
	if (nmiss) {
		/* A foreground read is bounded as a whole (read_timeout),
		 * however many GETs its misses take: the store gives up at
		 * the deadline, which the fetching threads are handed. */
		ra_hits(r, v, idx, false); /* read-ahead fell behind */
		if (!pagecache && r->read_timeout_ns)
			q.deadline = dcr_mono_ns() + r->read_timeout_ns;
		ret = materialize_batch(r, miss, nmiss, r->fetch_threads, &q);
		/* Timed out: the kernel's next request for these pages (it
		 * asks again at once) fails at once. */
		if (ret == -EIO && q.deadline &&
		    dcr_mono_ns() >= q.deadline - r->read_timeout_ns / 8)
			for (size_t i = 0; i < nmiss; i++)
				cent_failed_until(r, &miss[i],
						  dcr_mono_ns() + FAILED_MEMO_NS);
	}
out_free:
	if (miss != &one)
		free(miss);
	STAT_ADD(r, reads, 1);
	if (ret) {
		STAT_ADD(r, read_errors, 1);
		return ret;
	}
	STAT_ADD(r, bytes_read, end - off);
	return (ssize_t)(end - off);
}

/*
 * dcr_reader_read and dcr_reader_prefetch (@pagecache). A read that
 * meets a version re-indexed under it (-ESTALE: its tree, or a base on
 * its chain, was swapped by a refresh) starts again when the tree it
 * reads did not change (a layout generation re-encoded it, or only a
 * base was swapped); a version whose content changed fails. A read that
 * fails with EIO starts again once if a newer layout generation
 * re-encodes the version (layout_recheck: gc collected the frames of the
 * one it was indexed under).
 */
static ssize_t read_impl(struct dcr_reader *r, uint64_t v, int64_t tree,
			 uint32_t idx, uint64_t off, void *dst, size_t len,
			 bool pagecache)
{
	bool rechecked = false;

	for (int attempt = 1;; attempt++) {
		struct rver *rv;
		ssize_t n = read_once(r, v, tree, idx, off, dst, len, pagecache,
				      &rv);

		if (n == -EIO && rv && !rechecked && attempt < 4) {
			rechecked = true;
			if (layout_recheck(r, rv))
				continue;
		}
		if (n != -ESTALE || attempt == 4 ||
		    (rv && tree >= 0 && rv->tree != (uint32_t)tree) ||
		    (rv && atomic_load(&rv->dead) && !atomic_load(&rv->reencoded)))
			return n;
	}
}

/* A read begins: no tree is unloaded until it ends (trees_trim). */
static void read_enter(struct dcr_reader *r)
{
	atomic_fetch_add(&r->active, 1);
	atomic_fetch_add(&r->activity, 1);
}

static void read_leave(struct dcr_reader *r)
{
	atomic_fetch_sub(&r->active, 1);
}

ssize_t dcr_reader_read(struct dcr_reader *r, uint64_t v, uint32_t idx,
			uint64_t off, void *dst, size_t len)
{
	read_enter(r);
	ssize_t n = read_impl(r, v, -1, idx, off, dst, len, false);
	read_leave(r);
	return n;
}

ssize_t dcr_reader_read_tree(struct dcr_reader *r, uint64_t v, uint32_t tree,
			     uint32_t idx, uint64_t off, void *dst, size_t len)
{
	read_enter(r);
	ssize_t n = read_impl(r, v, tree, idx, off, dst, len, false);
	read_leave(r);
	return n;
}

int dcr_reader_chunk_hash(struct dcr_reader *r, uint64_t v, uint32_t tree,
			  uint32_t idx, uint64_t chunk, uint8_t hash[32],
			  uint32_t *chunk_size)
{
	struct dcr_catalog_chunk ref;
	const struct dcr_entry *e;
	struct rver *rv;
	int ret;

	read_enter(r);
	ret = get_ver(r, v, &rv);
	if (ret)
		goto out;
	if (rv->tree != tree) {
		ret = -ESTALE;
		goto out;
	}
	if (idx == 0 || idx >= rv->info.nentries) {
		ret = idx ? -ENOENT : -EISDIR;
		goto out;
	}
	e = &rv->entries[idx];
	if (e->type != DCR_FT_REG) {
		ret = -EISDIR;
		goto out;
	}
	if (chunk >= dcr_chunk_count(e->size, rv->chunk_size)) {
		ret = -ENOENT;
		goto out;
	}
	ret = ref_get(r, rv, idx - 1, chunk, &ref);
	if (ret == 0) {
		memcpy(hash, ref.hash, DCR_HASH_LEN);
		*chunk_size = rv->chunk_size;
	}
out:
	read_leave(r);
	return ret;
}

ssize_t dcr_reader_prefetch(struct dcr_reader *r, uint64_t v, uint32_t tree,
			    uint32_t idx, uint64_t off, void *dst, size_t len)
{
	read_enter(r);
	ssize_t n = read_impl(r, v, tree, idx, off, dst, len, true);
	read_leave(r);
	return n;
}

/* ------------------------------------------- backing files (passthrough) */

/* How far ahead of the check of a backing file its disk reads run. */
#define BACKING_AHEAD (UINT64_C(32) << 20)

/* One backing file's check, shared by the threads of par_for. */
struct backing_check {
	struct dcr_reader *r;
	const struct rver *rv;
	uint32_t file;       /* manifest index */
	uint64_t size;
	bool verify;         /* read every chunk, proven or not */
	atomic_int failed;   /* first failure (-errno), 0 */
	atomic_uint_fast64_t bytes; /* chunk bytes found good */
};

/* par_for body: check chunk @i of the file; the first chunk of each
 * BACKING_AHEAD window starts the disk on the window after it. */
static void backing_check_one(void *arg, size_t i)
{
	struct backing_check *b = arg;
	struct dcr_catalog_chunk ref;
	struct dcr_cache_key k;
	uint64_t cs = b->rv->chunk_size, pos = (uint64_t)i * cs;
	int ret;

	if (atomic_load_explicit(&b->failed, memory_order_relaxed))
		return;
	ret = ref_get(b->r, b->rv, b->file, i, &ref);
	if (ret == 0) {
		cache_key(&k, b->rv, b->file, i, &ref);
		if (i == 0 || pos / BACKING_AHEAD != (pos - cs) / BACKING_AHEAD)
			dcr_cache_advise(b->r->cache, &k,
					 (pos / BACKING_AHEAD + 1) * BACKING_AHEAD,
					 BACKING_AHEAD);
		ret = b->verify ? dcr_cache_verify(b->r->cache, &k) :
				  dcr_cache_check(b->r->cache, &k);
		if (ret >= 0) {
			atomic_fetch_add(&b->bytes, k.len);
			return;
		}
		ret = -EAGAIN; /* not cached (or failed): normal path */
	}
	int zero = 0;
	atomic_compare_exchange_strong(&b->failed, &zero, ret);
}

int dcr_reader_backing_open(struct dcr_reader *r, uint64_t v, uint32_t tree,
			    uint32_t idx, struct dcr_cache_pin **pin)
{
	struct backing_check b = { .r = r, .file = idx - 1 };
	struct dcr_catalog_chunk ref;
	struct dcr_cache_key k;
	struct rver *rv;
	uint64_t n;
	int ret;

	*pin = NULL;
	read_enter(r);
	ret = get_ver(r, v, &rv);
	if (ret)
		goto out_leave;
	ret = -ESTALE;
	if (rv->tree != tree)
		goto out_leave; /* re-indexed with other content since */
	ret = -ENOENT;
	if (idx >= rv->info.nentries)
		goto out_leave;
	ret = -EISDIR;
	if (rv->entries[idx].type != DCR_FT_REG)
		goto out_leave;
	b.rv = rv;
	b.size = rv->entries[idx].size;
	ret = -EAGAIN;
	if (b.size == 0)
		goto out_leave; /* nothing to back: the normal path is free */
	n = dcr_chunk_count(b.size, rv->chunk_size);
	ret = ref_get(r, rv, b.file, n - 1, &ref);
	if (ret)
		goto out_leave;
	cache_key(&k, rv, b.file, n - 1, &ref);
	/*
	 * The kernel will read the file without us: before its first
	 * passthrough open in this mount, every chunk is read and checked
	 * now (through the page cache, so the kernel then reads it from
	 * memory; on every thread, the disk read ahead of the hashing),
	 * even chunks this mount wrote itself (they may have rotted since);
	 * later opens find the slab verified whole.
	 */
	b.verify = !dcr_cache_pin_verified(r->cache, &k);
	dcr_cache_advise(r->cache, &k, 0, BACKING_AHEAD);
	par_for(r, r->fetch_threads, (size_t)n, backing_check_one, &b);
	ret = atomic_load(&b.failed);
	if (ret)
		goto out_leave;
	if (atomic_load(&b.bytes) != b.size) {
		ret = DCR_ERR(-EIO);
		goto out_leave;
	}
	ret = dcr_cache_pin(r->cache, &k, b.verify ? DCR_CACHE_PIN_VERIFIED : 0,
			    pin);
out_leave:
	read_leave(r);
	return ret;
}

void dcr_reader_set_cache_direct(struct dcr_reader *r, bool on)
{
	atomic_store(&r->cache_direct, on);
}

void dcr_reader_backing_close(struct dcr_reader *r, struct dcr_cache_pin *pin)
{
	dcr_cache_unpin(r->cache, pin);
}

/* -------------------------------------------------------- statistics */

void dcr_reader_get_stats(struct dcr_reader *r, struct dcr_reader_stats *s)
{
	struct dcr_cache_stats cs;

#define LOAD(f) atomic_load_explicit(&r->stats.f, memory_order_relaxed)
	memset(s, 0, sizeof(*s));
	s->reads = LOAD(reads);
	s->bytes_read = LOAD(bytes_read);
	s->chunk_hits = LOAD(hits);
	s->chunk_misses = LOAD(misses);
	s->fetches = LOAD(fetches);
	s->bytes_fetched = LOAD(fetched);
	s->fetch_errors = LOAD(fetch_errors);
	s->bytes_materialized = LOAD(materialized);
	s->bytes_verified = LOAD(verified);
	s->read_errors = LOAD(read_errors);
	s->rejected_unsigned = LOAD(rej_unsigned);
	s->rejected_bad = LOAD(rej_bad);
	s->rejected_store = LOAD(rej_store);
	s->rejected_untrusted = LOAD(rej_untrusted);
	s->rejected_tags = LOAD(rej_tags);
	s->tag_errors = LOAD(tag_errors);
	s->bytes_sha_proven = LOAD(sha_proven);
#undef LOAD
	dcr_cache_get_stats(r->cache, &cs);
	s->cache_bytes = cs.bytes;
	s->cache_errors = cs.io_errors;
	s->cache_budget = r->cache_budget;
	versions_stats(r, s);
}

/* -------------------------------------------------------------- sync */

bool reader_idle(struct dcr_reader *r)
{
	bool idle = atomic_load(&r->active) == 0;

	/* In pipeline order, as dcr_reader_sync. */
	idle = idle && dcr_wq_idle(r->qs.ra) && dcr_wq_idle(r->qs.dq) &&
	       dcr_wq_idle(r->qs.wq);
	return idle && !ctab_busy(r);
}

void dcr_reader_sync(struct dcr_reader *r)
{
	queues_sync(r);
}
