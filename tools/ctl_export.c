/* SPDX-License-Identifier: MIT */
/*
 * ctl_export.c - dcrfs-ctl export V DIR and cat V PATH: a version's files
 * without a mount (issue 33; dcrfs-ctl(8)), through the read path
 * (read/reader.h): the same chunk cache, fetches and bit-exact checks as
 * a mount, so a byte is written only once its chunk is proven.
 *
 * export materializes the version into DIR on the CPU budget's threads
 * (core/cpus.h; --jobs N): each file in pieces of whole chunks read in
 * parallel (dcr_wq_par_for), written to FILE.dcrfs-part, given its
 * committed mode and mtime, then renamed to FILE, so that a name in DIR
 * is either absent, a part file, or the complete file. A re-run (after a
 * failure, kill -9, a power loss) proves each file already there against
 * the manifest, chunk by chunk (SHA-256, what every read is proven
 * against), and skips it when it matches; anything else is exported
 * again. A file that cannot be proven (a damaged or missing pack) fails:
 * its part file is removed, the others are finished, and the exit
 * status is 1.
 *
 * The cache is --cache-dir (a mount's layout: a mount's cache directory
 * when no mount holds it, or one kept for later exports), else
 * DIR/.dcrfs-export, removed when the export ends, kept after a kill so
 * that a re-run reuses the chunks already built.
 *
 * Versions are named as the other commands take them, resolved through
 * the reader (dcr_reader_resolve), so that with --trust only versions and
 * tags signed by a trusted key are seen, as through a mount's trust=.
 *
 * Threads: par_for's workers run piece_export and piece_check; they share
 * the struct export, whose counters are atomics. Locks, each a leaf
 * (none is taken while another is held): buf_lock (the buffer pool),
 * open_lock (a file's first piece opens its part file), pg_lock (the
 * progress line, drawn by whichever thread gets it; tried, never waited
 * for).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chunk.h"
#include "common.h"
#include "cpus.h"
#include "fileio.h"
#include "hash.h"
#include "json.h"
#include "reader.h"
#include "sign.h"
#include "wq.h"
#include "ctl.h"

#define PART_SUFFIX ".dcrfs-part"
#define EXPORT_CACHE_NAME ".dcrfs-export"
/* Bytes one thread reads at a time (whole chunks): as a mount's prefetch. */
#define PIECE_BYTES (8u << 20)
/* The budget of the cache made in DIR. */
#define EXPORT_CACHE_SIZE ((uint64_t)1 << 30)
/* The progress line is redrawn at most this often. */
#define PG_EVERY_NS (100 * 1000000LL)

/* One regular file of the version. */
struct xfile {
	uint32_t idx;            /* entry in the tree */
	uint64_t npieces;
	atomic_uint_fast64_t left; /* pieces not done */
	atomic_int err;          /* first failure (-errno) */
	bool todo;               /* in this pass */
	/* The part file (export pass), its directory and name there:
	 * opened by the first piece (under open_lock), closed by the last. */
	int fd, pfd;
	const char *base;
	int open_err;            /* why it could not be opened */
	bool present;            /* DIR/path is a regular file of its size */
	atomic_bool bad;         /* ... that does not prove equal */
};

/* A piece: [off, off + len) of file f. */
struct piece {
	struct xfile *f;
	uint64_t off;
	uint32_t len;
};

struct export {
	struct ctl *c;
	struct dcr_reader *r;
	const struct dcr_version_info *vi;
	uint64_t v;
	int dirfd;
	const char *dir;
	struct xfile *files;
	size_t nfiles;
	struct piece *pieces;
	size_t npieces;
	uint32_t piece;          /* bytes per piece */
	/* Buffers of piece bytes, one per thread at most. */
	pthread_mutex_t buf_lock;
	pthread_mutex_t open_lock;   /* file_start */
	void **bufs;
	size_t nbufs;
	/* Progress. */
	const char *phase;
	uint64_t total;
	atomic_uint_fast64_t done;
	pthread_mutex_t pg_lock;
	int64_t pg_last;
	/* Counts for the summary. */
	atomic_uint_fast64_t exported, skipped, failed, bytes_exported;
};

/* A buffer of e->piece bytes (from the pool or new), or NULL. */
static void *buf_get(struct export *e)
{
	void *b = NULL;

	pthread_mutex_lock(&e->buf_lock);
	if (e->nbufs)
		b = e->bufs[--e->nbufs];
	pthread_mutex_unlock(&e->buf_lock);
	return b ? b : malloc(e->piece);
}

/* Give @b back to the pool (which has room for one per thread). */
static void buf_put(struct export *e, void *b)
{
	pthread_mutex_lock(&e->buf_lock);
	e->bufs[e->nbufs++] = b;
	pthread_mutex_unlock(&e->buf_lock);
}

/* Add @n bytes done and redraw the progress line when it is time. */
static void pg_add(struct export *e, uint64_t n)
{
	uint64_t done = atomic_fetch_add(&e->done, n) + n;

	if (!progress_on(&e->c->pg) || pthread_mutex_trylock(&e->pg_lock))
		return;
	int64_t now = dcr_mono_ns();
	if (now - e->pg_last >= PG_EVERY_NS) {
		e->pg_last = now;
		progress_show(&e->c->pg, e->phase, done, e->total, NULL, NULL, false);
	}
	pthread_mutex_unlock(&e->pg_lock);
}

static const char *fpath(const struct export *e, const struct xfile *f)
{
	return e->vi->entries[f->idx].path;
}

/*
 * The directory of @path in DIR, opened without following a symlink
 * (core/fileio.h), and @path's last component into *@base. The fd, or
 * -errno (logged).
 */
static int parent_fd(const struct export *e, const char *path, const char **base)
{
	const char *slash = strrchr(path, '/');
	char dir[PATH_MAX];
	int fd;

	*base = slash ? slash + 1 : path;
	if (!slash) {
		if ((fd = fcntl(e->dirfd, F_DUPFD_CLOEXEC, 0)) < 0)
			fd = -errno;
	} else if ((size_t)(slash - path) >= sizeof(dir))
		fd = -ENAMETOOLONG;
	else {
		memcpy(dir, path, (size_t)(slash - path));
		dir[slash - path] = 0;
		fd = dcr_openat_beneath(e->dirfd, dir, O_RDONLY | O_DIRECTORY, 0);
	}
	if (fd < 0)
		dcr_err("export: %s/%s: %s", e->dir, path, dcr_strerror(fd));
	return fd;
}

/* Record failure @ret of file @f (the first one counts). */
static void file_fail(struct xfile *f, int ret)
{
	int zero = 0;

	atomic_compare_exchange_strong(&f->err, &zero, ret);
}

/* --------------------------------------------------------- the check */

/*
 * par_for body of the check: whether piece @i of a file already in DIR
 * holds the bytes the manifest proves, chunk by chunk (SHA-256). A file
 * with a piece that does not is marked bad (and exported again).
 */
static void piece_check(void *arg, size_t i)
{
	struct export *e = arg;
	const struct piece *p = &e->pieces[i];
	struct xfile *f = p->f;
	uint32_t cs = e->vi->chunk_size, got_cs;
	uint8_t want[DCR_HASH_LEN], h[DCR_HASH_LEN];
	void *buf;
	int fd;

	if (atomic_load(&f->bad) || !f->present)
		goto out;
	if (!(buf = buf_get(e))) {
		atomic_store(&f->bad, true);
		goto out;
	}
	fd = dcr_openat_beneath(e->dirfd, fpath(e, f), O_RDONLY, 0);
	if (fd < 0 || dcr_pread_full(fd, buf, p->len, p->off)) {
		atomic_store(&f->bad, true);
	} else {
		for (uint32_t o = 0; o < p->len; o += cs) {
			uint64_t k = (p->off + o) / cs;
			uint32_t n = DCR_MIN(cs, p->len - o);

			if (dcr_reader_chunk_hash(e->r, e->v, e->vi->tree, f->idx, k,
						  want, &got_cs) || got_cs != cs) {
				atomic_store(&f->bad, true);
				break;
			}
			dcr_sha256((uint8_t *)buf + o, n, h);
			if (memcmp(h, want, sizeof(h))) {
				atomic_store(&f->bad, true);
				break;
			}
		}
	}
	if (fd >= 0)
		close(fd);
	buf_put(e, buf);
out:
	pg_add(e, p->len);
}

/* ---------------------------------------------------------- the export */

/* The mtime of entry @en as futimens takes it (atime left alone). */
static void entry_times(const struct dcr_entry *en, struct timespec ts[2])
{
	ts[0] = (struct timespec){ 0, UTIME_OMIT };
	ts[1].tv_sec = en->mtime_ns / 1000000000;
	ts[1].tv_nsec = en->mtime_ns % 1000000000;
	if (ts[1].tv_nsec < 0) {
		ts[1].tv_sec--;
		ts[1].tv_nsec += 1000000000;
	}
}

/*
 * The end of file @f's export, once its last piece is done (by that
 * piece's thread): with every piece good, its committed mode and mtime,
 * then the rename that makes it complete; else the part file goes.
 */
static void file_finish(struct export *e, struct xfile *f)
{
	const struct dcr_entry *en = &e->vi->entries[f->idx];
	struct timespec ts[2];
	char part[NAME_MAX + 1];
	int ret = atomic_load(&f->err);

	entry_times(en, ts);
	snprintf(part, sizeof(part), "%s" PART_SUFFIX, f->base);
	if (f->fd >= 0) {
		if (!ret && (fchmod(f->fd, en->mode & 07777) || futimens(f->fd, ts))) {
			ret = -errno;
			dcr_err("export: %s/%s" PART_SUFFIX ": %s", e->dir, en->path,
				strerror(errno));
		}
		if (close(f->fd) && !ret) {
			ret = -errno;
			dcr_err("export: %s/%s" PART_SUFFIX ": %s", e->dir, en->path,
				strerror(errno));
		}
		f->fd = -1;
		if (!ret && renameat(f->pfd, part, f->pfd, f->base)) {
			ret = -errno;
			dcr_err("export: %s/%s: %s", e->dir, en->path, strerror(errno));
		}
		if (ret)
			unlinkat(f->pfd, part, 0);
	}
	if (f->pfd >= 0)
		close(f->pfd);
	f->pfd = -1;
	if (ret) {
		dcr_err("export: %s: not exported (%s)%s", en->path, dcr_strerror(ret),
			f->present ? "; the file there is not this version's" : "");
		atomic_fetch_add(&e->failed, 1);
		return;
	}
	atomic_fetch_add(&e->exported, 1);
	atomic_fetch_add(&e->bytes_exported, en->size);
}

/*
 * Open @f's part file, its size reserved, once (the first of its pieces
 * does, under open_lock): 0 or -errno (logged; for every piece of it).
 */
static int file_start(struct export *e, struct xfile *f)
{
	const struct dcr_entry *en = &e->vi->entries[f->idx];
	char part[NAME_MAX + 1];
	int ret = 0;

	pthread_mutex_lock(&e->open_lock);
	if (f->fd >= 0 || (ret = f->open_err))
		goto out;
	if ((f->pfd = parent_fd(e, en->path, &f->base)) < 0) {
		ret = f->pfd;
		goto out_fail;
	}
	if ((size_t)snprintf(part, sizeof(part), "%s" PART_SUFFIX, f->base) >=
	    sizeof(part)) {
		ret = -ENAMETOOLONG;
		dcr_err("export: %s/%s" PART_SUFFIX ": %s", e->dir, en->path,
			dcr_strerror(ret));
		goto out_fail;
	}
	f->fd = openat(f->pfd, part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC |
		       O_NOFOLLOW, 0600);
	if (f->fd < 0) {
		ret = -errno;
		dcr_err("export: %s/%s: %s", e->dir, part, strerror(errno));
		goto out_fail;
	}
	/* Room for it now: a full disk fails here, before any fetch. */
	if (en->size && fallocate(f->fd, 0, 0, (off_t)en->size) &&
	    errno != EOPNOTSUPP) {
		ret = -errno;
		dcr_err("export: %s/%s" PART_SUFFIX ": %s", e->dir, en->path,
			strerror(errno));
		close(f->fd);
		f->fd = -1;
		unlinkat(f->pfd, part, 0);
		goto out_fail;
	}
	goto out;
out_fail:
	f->open_err = ret;
out:
	pthread_mutex_unlock(&e->open_lock);
	return ret;
}

/* par_for body of the export: read piece @i (verified) and write it. */
static void piece_export(void *arg, size_t i)
{
	struct export *e = arg;
	const struct piece *p = &e->pieces[i];
	struct xfile *f = p->f;
	void *buf = NULL;
	ssize_t n;
	int ret;

	if (atomic_load(&f->err))
		goto out;
#ifdef DCR_TEST_HOOKS
	/* HACKING: a slow export, for a kill in the middle of it */
	if (getenv("DCRFS_TEST_EXPORT_DELAY_MS"))
		usleep((useconds_t)atoi(getenv("DCRFS_TEST_EXPORT_DELAY_MS")) * 1000);
#endif
	if ((ret = file_start(e, f))) {
		file_fail(f, ret);
		goto out;
	}
	if (!(buf = buf_get(e))) {
		file_fail(f, -ENOMEM);
		goto out;
	}
	for (uint32_t done = 0; done < p->len; done += (uint32_t)n) {
		n = dcr_reader_read_tree(e->r, e->v, e->vi->tree, f->idx, p->off + done,
					 (uint8_t *)buf + done, p->len - done);
		if (n <= 0) {
			file_fail(f, n < 0 ? (int)n : -EIO);
			goto out;
		}
	}
	if ((ret = dcr_pwrite_full(f->fd, buf, p->len, p->off))) {
		if (!atomic_load(&f->err))
			dcr_err("export: %s/%s" PART_SUFFIX ": %s", e->dir, fpath(e, f),
				dcr_strerror(ret));
		file_fail(f, ret);
	}
out:
	if (buf)
		buf_put(e, buf);
	pg_add(e, p->len);
	if (atomic_fetch_sub(&f->left, 1) == 1)
		file_finish(e, f);
}

/* ------------------------------------------------------------ planning */

/*
 * Make the directories of the version in DIR (mode 0700 until the end,
 * so that their files can be made whatever their committed mode), and
 * note which files are there already with their size. 0 or -errno
 * (logged: something in the way).
 */
static int make_tree(struct export *e)
{
	for (uint32_t i = 1; i < e->vi->nentries; i++) {
		const struct dcr_entry *en = &e->vi->entries[i];
		const char *base;
		struct stat st;
		int pfd = parent_fd(e, en->path, &base), ret = 0;

		if (pfd < 0)
			return pfd;
		bool there = fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0;

		if (!there) {
			if (errno != ENOENT)
				ret = -errno;
			else if (en->type == DCR_FT_DIR && mkdirat(pfd, base, 0700))
				ret = -errno;
			if (ret)
				dcr_err("export: %s/%s: %s", e->dir, en->path,
					dcr_strerror(ret));
		} else if (en->type == DCR_FT_DIR && !S_ISDIR(st.st_mode)) {
			dcr_err("export: %s/%s is in the way: version %" PRIu64
				" has a directory there", e->dir, en->path, e->v);
			ret = -ENOTDIR;
		} else if (en->type == DCR_FT_DIR) {
			if (fchmodat(pfd, base, 0700 | (st.st_mode & 07777), 0)) {
				ret = -errno;
				dcr_err("export: %s/%s: %s", e->dir, en->path,
					strerror(errno));
			}
		} else if (S_ISDIR(st.st_mode)) {
			dcr_err("export: %s/%s is in the way: a directory where "
				"version %" PRIu64 " has a file", e->dir, en->path, e->v);
			ret = -EISDIR;
		}
		if (en->type == DCR_FT_REG) {
			struct xfile *f = &e->files[e->nfiles++];

			f->idx = i;
			f->fd = f->pfd = -1;
			f->present = there && S_ISREG(st.st_mode) &&
				     (uint64_t)st.st_size == en->size;
		}
		close(pfd);
		if (ret)
			return ret;
	}
	return 0;
}

/*
 * The pieces into e->pieces: of the files already there (@check), or
 * of the files to export (not there, or there and not proven).
 */
static int plan_pieces(struct export *e, bool check)
{
	uint64_t n = 0;

	free(e->pieces);
	e->pieces = NULL;
	e->npieces = 0;
	e->total = 0;
	for (size_t i = 0; i < e->nfiles; i++) {
		struct xfile *f = &e->files[i];
		uint64_t size = e->vi->entries[f->idx].size;

		f->todo = check ? f->present : (!f->present || atomic_load(&f->bad));
		f->npieces = f->todo ? (size + e->piece - 1) / e->piece : 0;
		n += f->npieces;
	}
	if (n && !(e->pieces = calloc(n, sizeof(*e->pieces)))) {
		dcr_err("export: out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < e->nfiles; i++) {
		struct xfile *f = &e->files[i];
		uint64_t size = e->vi->entries[f->idx].size;

		atomic_store(&f->left, f->npieces);
		for (uint64_t k = 0; k < f->npieces; k++)
			e->pieces[e->npieces++] = (struct piece){
				.f = f, .off = k * e->piece,
				.len = (uint32_t)DCR_MIN((uint64_t)e->piece,
							 size - k * e->piece) };
		if (f->todo)
			e->total += size;
	}
	return 0;
}

/* Give the directories their committed modes and mtimes, deepest first.
 * 0 or -errno (logged). */
static int finish_dirs(struct export *e)
{
	int ret = 0;

	for (uint32_t i = e->vi->nentries; i-- > 1;) {
		const struct dcr_entry *en = &e->vi->entries[i];
		struct timespec ts[2];
		const char *base;
		int pfd;

		if (en->type != DCR_FT_DIR)
			continue;
		entry_times(en, ts);
		if ((pfd = parent_fd(e, en->path, &base)) < 0) {
			ret = pfd;
			continue;
		}
		if (fchmodat(pfd, base, en->mode & 07777, 0) ||
		    utimensat(pfd, base, ts, AT_SYMLINK_NOFOLLOW)) {
			ret = -errno;
			dcr_err("export: %s/%s: %s", e->dir, en->path, strerror(errno));
		}
		close(pfd);
	}
	return ret;
}

/* ------------------------------------------------------------ the reader */

/*
 * A reader of the store on @cache_dir (NULL: a scratch directory made
 * into @tmp, for the caller to remove; @tmp_is_own: @cache_dir is the
 * command's own, not the user's), its versions listed; logged on failure
 * (a cache directory someone holds: its pid). 0 or -errno.
 */
static int open_reader(struct ctl *c, const char *cache_dir, bool tmp_is_own,
		       char *tmp, size_t cap, uint64_t cache_size, int fetch_threads,
		       int64_t readahead, const struct dcr_trust *trust,
		       struct dcr_reader **out)
{
	struct dcr_reader_opts ro = { .cache_dir = cache_dir,
				      .cache_size = cache_size,
				      .fetch_threads = fetch_threads,
				      .readahead = readahead,
				      .trust = trust,
				      .store_info = &c->ix.info };
	int ret;

	tmp[0] = 0;
	if (!cache_dir) {
		if ((ret = dcr_mktempdir("dcrfs-ctl", tmp, cap)))
			return ret;
		ro.cache_dir = tmp;
	}
	if ((ret = dcr_reader_open(c->ix.st, &ro, out))) {
		if (ret == -EBUSY && cache_dir && tmp_is_own)
			dcr_err("(another export into this directory is running)");
		else if (ret == -EBUSY)
			dcr_err("(leave out --cache-dir to read through a cache of "
				"its own, or read the files from that mount)");
		return ret;
	}
	if ((ret = dcr_reader_refresh(*out, NULL))) {
		dcr_reader_close(*out);
		*out = NULL;
	}
	return ret;
}

/* -------------------------------------------------------------- export */

static void report(struct export *e, double secs, int jobs)
{
	uint64_t exported = atomic_load(&e->exported), skipped = atomic_load(&e->skipped);
	uint64_t failed = atomic_load(&e->failed), bytes = atomic_load(&e->bytes_exported);
	char b[2][32];

	if (!e->c->json) {
		dcr_info("version %" PRIu64 " %s %s: %" PRIu64 " file%s, %s in %.1f s "
			 "(%s/s)%s%" PRIu64 " already there and proven%s", e->v,
			 failed ? "partly exported to" : "exported to", e->dir,
			 exported, exported == 1 ? "" : "s",
			 dcr_format_size(bytes, b[0], sizeof(b[0])), secs,
			 dcr_format_size(secs > 0 ? (uint64_t)((double)bytes / secs) :
					 bytes, b[1], sizeof(b[1])),
			 "; ", skipped, failed ? "; FAILED: see above" : "");
		return;
	}
	printf("{\"version\": %" PRIu64 ", \"dir\": ", e->v);
	dcr_json_str(stdout, e->dir);
	printf(", \"files\": %zu, \"exported\": %" PRIu64 ", \"skipped\": %" PRIu64
	       ", \"failed\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"seconds\": %.3f"
	       ", \"jobs\": %d}\n", e->nfiles, exported, skipped, failed, bytes,
	       secs, jobs);
}

int cmd_export(struct ctl *c, const struct args *a)
{
	struct export e = { .c = c, .dirfd = -1, .dir = a->pos[1] };
	struct dcr_wq *q = NULL;
	struct dcr_trust *trust = NULL;
	char cache[PATH_MAX], tmp[PATH_MAX];
	int jobs = dcr_cpu_threads(a->threads ? a->threads : a->jobs_set ? a->jobs : 0);
	int status = EXIT_FAIL, ret;
	int64_t t0 = dcr_mono_ns();

	pthread_mutex_init(&e.buf_lock, NULL);
	pthread_mutex_init(&e.pg_lock, NULL);
	pthread_mutex_init(&e.open_lock, NULL);
	if (a->trust && dcr_trust_load(a->trust, &trust))
		goto out;
	if (mkdir(e.dir, 0755) && errno != EEXIST) {
		dcr_err("export: %s: %s", e.dir, strerror(errno));
		goto out;
	}
	if ((e.dirfd = open(e.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		dcr_err("export: %s: %s", e.dir, strerror(errno));
		goto out;
	}
	if (!a->cache_dir &&
	    (size_t)snprintf(cache, sizeof(cache), "%s/" EXPORT_CACHE_NAME, e.dir) >=
	    sizeof(cache)) {
		dcr_err("export: %s: name too long", e.dir);
		goto out;
	}
	/* The cache in DIR is made here (open_reader's tmp is for cat);
	 * one held by another export into DIR (-EBUSY) is left to it. */
	if ((ret = open_reader(c, a->cache_dir ? a->cache_dir : cache,
			       !a->cache_dir, tmp, sizeof(tmp),
			       a->cache_dir ? 0 : EXPORT_CACHE_SIZE, jobs, -1, trust,
			       &e.r))) {
		if (ret != -EBUSY && !a->cache_dir)
			dcr_rm_rf(cache);
		goto out;
	}
	if (dcr_reader_resolve(e.r, a->pos[0], &e.v))
		goto out_reader;
	if ((ret = dcr_reader_version(e.r, e.v, &e.vi))) {
		dcr_err("export: version %" PRIu64 ": %s", e.v, dcr_strerror(ret));
		goto out_reader;
	}
	e.piece = e.vi->chunk_size && e.vi->chunk_size < PIECE_BYTES ?
		  PIECE_BYTES / e.vi->chunk_size * e.vi->chunk_size :
		  (e.vi->chunk_size ? e.vi->chunk_size : PIECE_BYTES);
	if (!(e.files = calloc(e.vi->nentries, sizeof(*e.files))) ||
	    !(e.bufs = calloc((size_t)jobs + 1, sizeof(*e.bufs)))) {
		dcr_err("export: out of memory");
		goto out_version;
	}
	if (make_tree(&e))
		goto out_version;
	struct dcr_wq_opts qo = { .name = "dcr-export", .threads = jobs,
				  .max_items = (size_t)jobs };
	if (jobs > 1 && dcr_wq_create(&qo, &q)) {
		dcr_err("export: out of memory");
		goto out_version;
	}
	/* The files already there: proven, or exported again. */
	if (plan_pieces(&e, true))
		goto out_version;
	if (e.npieces) {
		e.phase = "check";
		progress_start(&c->pg, 0);
		dcr_wq_par_for(q, jobs, e.npieces, piece_check, &e);
		progress_show(&c->pg, e.phase, e.total, e.total, NULL, NULL, true);
		progress_clear(&c->pg);
	}
	for (size_t i = 0; i < e.nfiles; i++) {
		struct xfile *f = &e.files[i];
		const char *base;
		char part[NAME_MAX + 1];
		int pfd;

		if (!f->present || atomic_load(&f->bad))
			continue;
		atomic_fetch_add(&e.skipped, 1);
		/* A part file a killed run left beside it is of no use. */
		if ((pfd = parent_fd(&e, fpath(&e, f), &base)) >= 0) {
			snprintf(part, sizeof(part), "%s" PART_SUFFIX, base);
			unlinkat(pfd, part, 0);
			close(pfd);
		}
	}
	if (plan_pieces(&e, false))
		goto out_version;
	/* Empty files have no piece to finish them. */
	for (size_t i = 0; i < e.nfiles; i++) {
		struct xfile *f = &e.files[i];

		if (f->todo && !f->npieces) {
			file_fail(f, file_start(&e, f));
			file_finish(&e, f);
		}
	}
	e.phase = "export";
	atomic_store(&e.done, 0);
	if (e.npieces) {
		progress_start(&c->pg, 0);
		dcr_wq_par_for(q, jobs, e.npieces, piece_export, &e);
		progress_show(&c->pg, e.phase, atomic_load(&e.done), e.total, NULL,
			      NULL, true);
		progress_clear(&c->pg);
	}
	if (finish_dirs(&e))
		atomic_fetch_add(&e.failed, 1);
	report(&e, (double)(dcr_mono_ns() - t0) / 1e9, jobs);
	status = atomic_load(&e.failed) ? EXIT_FAIL : 0;
out_version:
	dcr_wq_free(q);
	dcr_reader_version_put(e.r, e.vi);
out_reader:
	dcr_reader_close(e.r);
	if (!a->cache_dir)
		dcr_rm_rf(cache);
out:
	for (size_t i = 0; i < e.nbufs; i++)
		free(e.bufs[i]);
	free(e.bufs);
	free(e.files);
	free(e.pieces);
	if (e.dirfd >= 0)
		close(e.dirfd);
	dcr_trust_free(trust);
	pthread_mutex_destroy(&e.buf_lock);
	pthread_mutex_destroy(&e.pg_lock);
	pthread_mutex_destroy(&e.open_lock);
	return status;
}

/* ----------------------------------------------------------------- cat */

int cmd_cat(struct ctl *c, const struct args *a)
{
	const struct dcr_version_info *vi = NULL;
	struct dcr_reader *r = NULL;
	struct dcr_trust *trust = NULL;
	const char *path = a->pos[1];
	char tmp[PATH_MAX] = "";
	int status = EXIT_FAIL, ret;
	void *buf = NULL;
	uint32_t idx;
	uint64_t v;

	while (*path == '/')
		path++;
	if (a->trust && dcr_trust_load(a->trust, &trust))
		return EXIT_FAIL;
	if (open_reader(c, a->cache_dir, false, tmp, sizeof(tmp), a->cache_dir ? 0 :
			DCR_INDEX_SCRATCH_CACHE, 0, 0, trust, &r) ||
	    dcr_reader_resolve(r, a->pos[0], &v))
		goto out;
	if ((ret = dcr_reader_version(r, v, &vi))) {
		dcr_err("cat: version %" PRIu64 ": %s", v, dcr_strerror(ret));
		goto out;
	}
	idx = dcr_version_lookup(vi, path);
	if (!idx || vi->entries[idx].type != DCR_FT_REG) {
		dcr_err("cat: %s: %s in version %" PRIu64, *path ? path : "/",
			idx || !*path ? "a directory" : "no such file", v);
		goto out;
	}
	if (!(buf = malloc(PIECE_BYTES))) {
		dcr_err("cat: out of memory");
		goto out;
	}
	for (uint64_t off = 0;;) {
		ssize_t n = dcr_reader_read_tree(r, v, vi->tree, idx, off, buf,
						 PIECE_BYTES);
		if (n < 0) {
			dcr_err("cat: %s of version %" PRIu64 ": %s (the output "
				"is incomplete)", path, v, dcr_strerror((int)n));
			goto out;
		}
		if (n == 0)
			break;
		if (dcr_write_full(STDOUT_FILENO, buf, (size_t)n)) {
			dcr_err("cat: writing the output: %s", strerror(errno));
			goto out;
		}
		off += (uint64_t)n;
	}
	status = 0;
out:
	free(buf);
	if (vi)
		dcr_reader_version_put(r, vi);
	dcr_reader_close(r);
	if (tmp[0])
		dcr_rm_rf(tmp);
	dcr_trust_free(trust);
	return status;
}
