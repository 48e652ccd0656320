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
#include <inttypes.h>
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
#include "cpus.h"
#include "dvrec.h"
#include "fileio.h"
#include "frame.h"
#include "hash.h"
#include "reader.h"
#include "reader_int.h"

/* ------------------------------------------------------------ open/close */

/*
 * Whether @path is the mount point of a FUSE mount in this process's
 * mount namespace (/proc/self/mountinfo: field 5, octal-escaped, and the
 * type after " - "). Unknown (no /proc): true, so nobody waits on it.
 */
static bool fuse_mounted_at(const char *path)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t cap = 0;
	bool found = false;

	if (!f)
		return true;
	while (!found && getline(&line, &cap, f) > 0) {
		char mp[PATH_MAX], *p = line, *sep;
		size_t n = 0;

		for (int field = 1; field < 5 && p; field++)
			if ((p = strchr(p, ' ')))
				p++;
		if (!p || !(sep = strstr(p, " - ")))
			continue;
		for (; *p && *p != ' ' && n + 1 < sizeof(mp); n++) {
			if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' &&
			    p[2] >= '0' && p[2] <= '7' && p[3] >= '0' && p[3] <= '7') {
				mp[n] = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 +
					       (p[3] - '0'));
				p += 4;
			} else {
				mp[n] = *p++;
			}
		}
		mp[n] = '\0';
		found = !strcmp(mp, path) && !strncmp(sep + 3, "fuse", 4);
	}
	free(line);
	fclose(f);
	return found;
}

/*
 * Take the per-store cache directory for this reader's lifetime: two
 * processes sharing it would delete each other's temporary files and
 * account the same bytes twice. flock(2) on <dir>/lock, which holds the
 * owner's pid (for the message) and, for a daemon, its mount point on a
 * second line; the lock dies with the process, so a crash leaves nothing
 * to clean up. Taken by a daemon whose mount is gone (unmounted a moment
 * ago, still exiting), it is waited for, DCR_LOCK_WAIT_MS at most: a
 * remount right after an unmount works. -EBUSY (logged) if it is taken.
 */
static int lock_dir(struct dcr_reader *r, const char *shown,
		    const char *mountpoint)
{
	char path[PATH_MAX], owner[PATH_MAX + 32], *mp;
	int64_t t0 = dcr_mono_ns(), until = 0;
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
	while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		ret = -errno;
		if (ret != -EWOULDBLOCK) {
			dcr_err("cache directory %s: cannot lock %s: %s",
				shown, path, dcr_strerror(ret));
			close(fd);
			return ret;
		}
		n = pread(fd, owner, sizeof(owner) - 1, 0);
		owner[n > 0 ? n : 0] = '\0';
		mp = owner + strcspn(owner, "\n");
		if (*mp)
			*mp++ = '\0';
		mp[strcspn(mp, "\n")] = '\0';
		/* Its mount gone, the daemon is on its way out: wait. */
		if (!until && *mp == '/' && !fuse_mounted_at(mp))
			until = t0 + (int64_t)DCR_LOCK_WAIT_MS * 1000000;
		if (dcr_mono_ns() >= until) {
			if (until)
				dcr_err("cache directory %s is in use by another "
					"dcrfs (pid %s), whose mount on %s is gone "
					"but which did not exit within %d ms",
					shown, owner[0] ? owner : "unknown", mp,
					DCR_LOCK_WAIT_MS);
			else
				dcr_err("cache directory %s is in use by another "
					"dcrfs (pid %s%s%s)", shown,
					owner[0] ? owner : "unknown",
					*mp ? ", mounted on " : "", mp);
			close(fd);
			return DCR_ERR(-EBUSY);
		}
		dcr_stop_sleep_ns(10 * 1000000);
	}
	if (until)
		dcr_info("cache directory %s: waited %" PRId64 " ms for the "
			 "dcrfs unmounted from it to exit", shown,
			 (dcr_mono_ns() - t0) / 1000000);
	n = snprintf(owner, sizeof(owner), "%ld\n%s%s", (long)getpid(),
		     mountpoint ? mountpoint : "", mountpoint ? "\n" : "");
	if (n < 0 || n >= (ssize_t)sizeof(owner) || ftruncate(fd, 0) < 0 ||
	    pwrite(fd, owner, (size_t)n, 0) != n)
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
	/* One CPU budget for every CPU-bound pool (core/cpus.h); the
	 * requests in flight default to at least one per thread, so that
	 * no thread waits for a frame to decode. */
	r->threads = dcr_cpu_threads(opts->threads);
	r->fetch_threads = opts->fetch_threads > 0 ?
			   opts->fetch_threads :
			   DCR_MAX(FETCH_THREADS_DEFAULT, r->threads);
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
	ret = lock_dir(r, opts->cache_dir, opts->mountpoint);
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
	dcr_dvrec_free(r->dvrec);
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
 * clamped to it in *@end; a read (not a prefetch, @pagecache) is noted
 * for read-ahead. 1 when there is
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
	/* A prefetch reads every block itself, on every thread at once
	 * (fs/bg.c): read-ahead would only race it. */
	if (!pagecache)
		ra_note(r, *rvp, idx, off, *end, false);
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
void read_enter(struct dcr_reader *r)
{
	atomic_fetch_add(&r->active, 1);
	atomic_fetch_add(&r->activity, 1);
}

void read_leave(struct dcr_reader *r)
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

int dcr_reader_read_exact(struct dcr_reader *r, uint64_t v, int64_t tree,
			  uint32_t idx, uint64_t off, void *dst, size_t len)
{
	uint8_t *p = dst;
	int ret = 0;

	read_enter(r);
	while (len) {
		ssize_t n = read_impl(r, v, tree, idx, off, p, len, false);

		if (n <= 0) {
			ret = n < 0 ? (int)n : DCR_ERR(-EIO); /* ended first */
			break;
		}
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	read_leave(r);
	return ret;
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

/* par_for body: check chunk @i of the file. */
static void backing_check_one(void *arg, size_t i)
{
	struct backing_check *b = arg;
	struct dcr_catalog_chunk ref;
	struct dcr_cache_key k;
	int64_t t0 = dcr_mono_ns();
	int ret;

	if (atomic_load_explicit(&b->failed, memory_order_relaxed))
		return;
	ret = ref_get(b->r, b->rv, b->file, i, &ref);
	if (ret == 0) {
		cache_key(&k, b->rv, b->file, i, &ref);
		ret = b->verify ? dcr_cache_verify(b->r->cache, &k) :
				  dcr_cache_check(b->r->cache, &k);
		BUSY_ADD(b->r, busy_check, t0);
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
	 * memory; on every thread), even chunks this mount wrote itself
	 * (they may have rotted since); later opens find the slab verified
	 * whole.
	 *
	 * The pages this check fills are the ones the kernel then serves
	 * and maps to the loader, so they are filled as a local file's:
	 * by plain reads and the kernel's own readahead, with no advice,
	 * which reads ahead of the hashing in folios of up to 2 MiB (where
	 * the file system has large folios), as for a local file read
	 * once. Never POSIX_FADV_WILLNEED (nor readahead(2)): the kernel
	 * fills an advised range in 4 KiB pages, and a file left so is
	 * re-read at about half a local file's speed and mmap-touched at a
	 * tenth (issue 31, scripts/bench-pages, tests/integration/pages.sh).
	 */
	b.verify = !dcr_cache_pin_verified(r->cache, &k);
	par_for(r, r->threads, (size_t)n, backing_check_one, &b);
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

struct dcr_cache_pin *dcr_reader_backing_hold(struct dcr_reader *r,
					      struct dcr_cache_pin *pin)
{
	return dcr_cache_pin_hold(r->cache, pin);
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
	s->busy_fetch_ns = LOAD(busy_fetch);
	s->busy_decode_ns = LOAD(busy_decode);
	s->busy_write_ns = LOAD(busy_write);
	s->busy_check_ns = LOAD(busy_check);
#undef LOAD
	s->threads = (uint64_t)r->threads;
	dcr_cache_get_stats(r->cache, &cs);
	s->cache_bytes = cs.bytes;
	s->cache_errors = cs.io_errors;
	s->cache_sealed = cs.sealed;
	s->cache_verity = cs.verity;
	s->cache_budget = r->cache_budget;
	versions_stats(r, s);
}

/* ------------------------------------------------------------ threads */

int dcr_reader_dvrec_enable(struct dcr_reader *r, uint64_t budget)
{
	if (!r->dvrec)
		r->dvrec = dcr_dvrec_new(budget);
	return r->dvrec ? 0 : DCR_ERR(-ENOMEM);
}

bool dcr_reader_room_for(struct dcr_reader *r, uint64_t bytes)
{
	return dcr_cache_room_for(r->cache, bytes);
}

struct dcr_dvrec *dcr_reader_dvrec(struct dcr_reader *r)
{
	return r->dvrec;
}

int dcr_reader_threads(struct dcr_reader *r)
{
	return r->threads;
}

void dcr_reader_par_for(struct dcr_reader *r, size_t n,
			void (*fn)(void *arg, size_t i), void *arg)
{
	par_for(r, r->threads, n, fn, arg);
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
