/* SPDX-License-Identifier: MIT */
/*
 * commit.c - turn a directory tree into a new version (see commit.h).
 *
 * Pipeline: the calling thread walks the tree, then opens every regular
 * file and queues its chunks in order. Worker threads read each chunk
 * into their own buffer (so every pass below runs from the cache of the
 * core that read it), copy it to the optional stage, hash it (the
 * only SHA-256 pass over the source bytes: a file's digest is the hash of
 * its chunk hashes, manifest.h format 3), compare the hash with the
 * parent's (equal: no frame at all), otherwise read the parent's chunk
 * from parent_dir, verify it (XXH3-128 against a format 2+ parent, else
 * SHA-256), encode a delta or full frame, decode it again onto the parent
 * copy and compare, hash the frame, and append it to the open pack. A
 * pack that reaches its target size is sealed, named by the hash of its
 * frames' hashes (core/packw.h), and queued for the uploader threads,
 * which upload it while encoding goes on; a bounded number of packs is in flight, so memory stays bounded.
 * When every pack is stored, the manifest is published with a conditional
 * put; nothing a reader can see exists before that put.
 */
#include "config.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chunk.h"
#include "commit.h"
#include "common.h"
#include "fileio.h"
#include "frame.h"
#include "hash.h"
#include "manifest.h"
#include "nonfinite.h"
#include "packw.h"
#include "safetensors.h"
#include "wq.h"

#define PACK_TARGET_DEFAULT ((uint64_t)64 << 20)
#define PUBLISH_TRIES 1000
#define MAX_JOBS 256
#define UPLOADS_DEFAULT 4

/* ------------------------------------------------------------- scan */

struct scan {
	const char *root;
	size_t root_len;
	struct dcr_commit_source *src;
	size_t n, cap;
};

static int scan_add(struct scan *s, const char *rel, const struct stat *sb)
{
	if (s->n == UINT32_MAX - 1)
		return DCR_ERR(-EFBIG);
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		struct dcr_commit_source *n = realloc(s->src, cap * sizeof(*n));
		if (!n)
			return DCR_ERR(-ENOMEM);
		s->src = n;
		s->cap = cap;
	}
	struct dcr_commit_source *c = &s->src[s->n];
	memset(c, 0, sizeof(*c));
	c->dir = S_ISDIR(sb->st_mode);
	c->mode = sb->st_mode & 07777;
	c->size = c->dir ? 0 : (uint64_t)sb->st_size;
	c->mtime_ns = (int64_t)sb->st_mtim.tv_sec * 1000000000 + sb->st_mtim.tv_nsec;
	c->dev = (uint64_t)sb->st_dev;
	c->ino = (uint64_t)sb->st_ino;
	if (!(c->path = strdup(rel)))
		return DCR_ERR(-ENOMEM);
	if (!c->dir && asprintf((char **)&c->file, "%s/%s", s->root, rel) < 0) {
		free((char *)c->path);
		return DCR_ERR(-ENOMEM);
	}
	c->root_len = c->dir ? 0 : s->root_len;
	s->n++;
	return 0;
}

void dcr_commit_sources_free(struct dcr_commit_source *src, size_t n)
{
	for (size_t i = 0; src && i < n; i++) {
		free((char *)src[i].path);
		free((char *)src[i].file);
	}
	free(src);
}

static const char *ftype_name(mode_t m)
{
	if (S_ISLNK(m))
		return "a symbolic link";
	if (S_ISCHR(m) || S_ISBLK(m))
		return "a device";
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISSOCK(m))
		return "a socket";
	return "not a regular file or directory";
}

/* Whether @sb is the object @dev/@ino (what the scan saw). */
static bool same_object(const struct stat *sb, uint64_t dev, uint64_t ino)
{
	return (uint64_t)sb->st_dev == dev && (uint64_t)sb->st_ino == ino;
}

/*
 * List the directory @dfd (owned: closed here), @rel below the root,
 * and everything below it. Subdirectories are opened from their parent's
 * fd without following a symlink and must be what fstatat saw, so that
 * a directory swapped for a symlink while the tree is scanned lists
 * nothing outside the tree.
 */
static int scan_dir(struct scan *s, int dfd, const char *rel)
{
	char path[PATH_MAX];
	int ret = 0;

	snprintf(path, sizeof(path), "%s%s%s", s->root, *rel ? "/" : "", rel);
	DIR *d = fdopendir(dfd);
	if (!d) {
		ret = DCR_ERR(-errno);
		dcr_err("%s: %s", path, dcr_strerror(ret));
		close(dfd);
		return ret;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char child[PATH_MAX];
		int n = snprintf(child, sizeof(child), "%s%s%s", rel,
				 *rel ? "/" : "", de->d_name);
		if (n < 0 || (size_t)n >= sizeof(child) ||
		    !dcr_path_valid(child, (size_t)n)) {
			dcr_err("%s/%s: path too long or not representable",
				path, de->d_name);
			ret = DCR_ERR(-ENAMETOOLONG);
			break;
		}
		struct stat sb;
		if (fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
			ret = DCR_ERR(-errno);
			dcr_err("%s/%s: %s", path, de->d_name, dcr_strerror(ret));
			break;
		}
		if (!S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode)) {
			dcr_err("%s/%s is %s; only regular files and directories can be committed",
				path, de->d_name, ftype_name(sb.st_mode));
			ret = DCR_ERR(-EINVAL);
			break;
		}
		if ((ret = scan_add(s, child, &sb)))
			break;
		if (!S_ISDIR(sb.st_mode))
			continue;
		int cfd = dcr_openat_beneath(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY, 0);
		struct stat csb;
		if (cfd >= 0 && (fstat(cfd, &csb) < 0 || !same_object(&csb, sb.st_dev, sb.st_ino))) {
			close(cfd);
			cfd = DCR_ERR(-EAGAIN);
		}
		if (cfd < 0) {
			ret = cfd == -ELOOP || cfd == -ENOTDIR ? DCR_ERR(-EAGAIN) : cfd;
			dcr_err("%s/%s changed while it was being committed (%s)", path,
				de->d_name, ret == -EAGAIN ? "no longer the directory listed" :
				dcr_strerror(ret));
			break;
		}
		if ((ret = scan_dir(s, cfd, child)))
			break;
	}
	closedir(d);
	return ret;
}

/* ----------------------------------------------------------- pipeline */

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

/* Close @fs's descriptors but the stage copy's (stage_close). */
static void fstate_close(struct fstate *fs)
{
	if (fs->fd >= 0)
		close(fs->fd);
	if (fs->parent_fd >= 0)
		close(fs->parent_fd);
	fs->fd = fs->parent_fd = -1;
}

/* Called with p->lock held once a file is read and all its chunks
 * encoded (after stage_close), or when the pipeline is freed. */
static void fstate_release(struct fstate *fs)
{
	fstate_close(fs);
	if (fs->sfd >= 0)
		close(fs->sfd);
	fs->sfd = -1;
	dcr_regions_free(&fs->regions);
	dcr_tensors_free(&fs->floats);
	free(fs->nonfinite);
	fs->nonfinite = NULL;
}

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
};

static void set_err_locked(struct pipe *p, int err)
{
	if (!p->err)
		p->err = err;
	pthread_cond_broadcast(&p->cond_free);
}

static void set_err(struct pipe *p, int err)
{
	pthread_mutex_lock(&p->lock);
	set_err_locked(p, err);
	pthread_mutex_unlock(&p->lock);
}

static int get_err(struct pipe *p)
{
	pthread_mutex_lock(&p->lock);
	int e = p->err;
	pthread_mutex_unlock(&p->lock);
	return e;
}

/*
 * The copy of the committed tree is only an optimisation for the next
 * commit: when it cannot be written (a full or read-only cache disk), say
 * so once and go on without it; the caller then forgets the stage.
 */
static void stage_failed_locked(struct pipe *p, const char *path, int err)
{
	if (!p->staging)
		return;
	__atomic_store_n(&p->staging, false, __ATOMIC_RELAXED);
	dcr_warn("cannot keep a copy of the committed tree in %s (%s/%s: %s); "
		 "going on without it, the next commit will rebuild its parent from the store",
		 p->o->stage_dir, p->o->stage_dir, path, dcr_strerror(err));
}

static void stage_failed(struct pipe *p, const char *path, int err)
{
	pthread_mutex_lock(&p->lock);
	stage_failed_locked(p, path, err);
	pthread_mutex_unlock(&p->lock);
}

/* Close file @fi's stage copy; under p->lock. */
static void stage_close(struct pipe *p, uint32_t fi)
{
	struct fstate *fs = &p->fs[fi];

	if (fs->sfd >= 0 && close(fs->sfd) < 0)
		stage_failed_locked(p, p->m->files[fi].path, DCR_ERR(-errno));
	fs->sfd = -1;
}

/* Where a source's bytes come from, for messages. */
static const char *src_name(const struct dcr_commit_source *src)
{
	return src->file ? src->file : src->path;
}

/*
 * Bytes [off, off+len) of a file to commit: pread from @fd (its source
 * is a file) or gathered from the caller's ranges.
 */
static int src_read(const struct dcr_commit_source *src, int fd, void *buf,
		    size_t len, uint64_t off)
{
	if (src->file)
		return dcr_pread_full(fd, buf, len, off);
	uint8_t *dst = buf;
	for (size_t i = 0; i < src->nranges && len; i++) {
		const struct dcr_commit_range *r = &src->ranges[i];
		if (off >= r->len) {
			off -= r->len;
			continue;
		}
		size_t n = (size_t)DCR_MIN((uint64_t)len, r->len - off);
		memcpy(dst, (const uint8_t *)r->data + off, n);
		dst += n;
		len -= n;
		off = 0;
	}
	return len ? DCR_ERR(-ENODATA) : 0;
}

/*
 * Bytes [off, off+len) of a source given as ranges, where one range
 * holds them all: the caller's memory, read in place. NULL: they must be
 * gathered (src_read).
 */
static const uint8_t *src_direct(const struct dcr_commit_source *src,
				 uint64_t off, size_t len)
{
	for (size_t i = 0; !src->file && i < src->nranges; i++) {
		const struct dcr_commit_range *r = &src->ranges[i];
		if (off >= r->len) {
			off -= r->len;
			continue;
		}
		return len <= r->len - off ? (const uint8_t *)r->data + off : NULL;
	}
	return NULL;
}

/*
 * The safetensors header of a source of @size bytes, parsed into element
 * regions (and @floats); as dcr_safetensors_parse_fd for either kind of
 * source.
 */
static int src_parse_header(const struct dcr_commit_source *src, int fd,
			    uint64_t size, struct dcr_regions *regions,
			    struct dcr_tensors *floats)
{
	uint8_t h[8];
	size_t need;
	int ret;

	if (size < 8)
		return DCR_ERR(-EBADMSG);
	if ((ret = src_read(src, fd, h, 8, 0)) ||
	    (ret = dcr_safetensors_prefix_len(h, 8, size, &need)))
		return ret;
	uint8_t *buf = malloc(need);
	if (!buf)
		return DCR_ERR(-ENOMEM);
	ret = src_read(src, fd, buf, need, 0);
	if (!ret)
		ret = dcr_safetensors_parse(buf, need, size, regions, floats);
	free(buf);
	return ret;
}

/*
 * Copy chunk @buf[0..len), just read from offset @off of the source @fd
 * (-1: from memory), to the stage file @sfd. Where the kernel can, it
 * copies between the two files itself (copy_file_range): much cheaper
 * than writing from @buf, the source's pages being in the page cache. It
 * copies what the file holds now, which is what was just read unless the
 * file changed, and then the commit fails (file_changed) or the next
 * commit's check of its parent chunks catches it, as for a reflink.
 * *@kcopy is cleared when the kernel cannot, for the rest of the file.
 * Positioned I/O only: the workers copy a file's chunks concurrently.
 */
static int stage_chunk(int sfd, int fd, const uint8_t *buf, size_t len,
		       uint64_t off, bool *kcopy)
{
	size_t done = 0;

	while (__atomic_load_n(kcopy, __ATOMIC_RELAXED) && fd >= 0 && done < len) {
		loff_t in = (loff_t)(off + done), out = in;
		ssize_t n = copy_file_range(fd, &in, sfd, &out, len - done, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			/* EXDEV, EOPNOTSUPP, ... or the source shrank: write
			 * the rest of this chunk from buf. */
			__atomic_store_n(kcopy, false, __ATOMIC_RELAXED);
			break;
		}
		done += (size_t)n;
	}
	if (done == len)
		return 0;
	return dcr_pwrite_full(sfd, buf + done, len - done, off + done);
}

/* Whether the file behind @fd changed since @before (size, mtime, ctime). */
static bool file_changed(int fd, const struct stat *before)
{
	struct stat sb;

	return fstat(fd, &sb) < 0 || sb.st_size != before->st_size ||
	       sb.st_mtim.tv_sec != before->st_mtim.tv_sec ||
	       sb.st_mtim.tv_nsec != before->st_mtim.tv_nsec ||
	       sb.st_ctim.tv_sec != before->st_ctim.tv_sec ||
	       sb.st_ctim.tv_nsec != before->st_ctim.tv_nsec;
}

/* An encoder's own state (core/wq's on_start makes it, per worker). */
struct worker {
	struct dcr_codec *codec;
	uint8_t *cbuf;          /* the chunk, read from its file */
	uint8_t *pbuf;          /* parent chunk, then the frame decoded again */
};

static void worker_free(void *ctx, void *ws)
{
	struct worker *w = ws;

	(void)ctx;
	if (!w)
		return;
	dcr_codec_free(w->codec);
	free(w->cbuf);
	free(w->pbuf);
	free(w);
}

static void *worker_new(void *ctx)
{
	struct pipe *p = ctx;
	struct worker *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	w->codec = dcr_codec_new(p->o->zstd_level);
	w->cbuf = malloc(p->cs);
	w->pbuf = malloc(p->cs);
	if (!w->codec || !w->cbuf || !w->pbuf) {
		worker_free(ctx, w);
		return NULL;
	}
	return w;
}

/* Index of the first tensor of @ts that ends after file offset @off. */
static size_t first_tensor(const struct dcr_tensors *ts, uint64_t off)
{
	size_t lo = 0, hi = ts->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (ts->t[mid].off + ts->t[mid].len <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * Count the NaN/Inf elements of the float tensors that lie wholly in the
 * chunk @buf[0..len) at file offset @off into fs->nonfinite; an element
 * cut by the chunk's edges is check_edge's. Called by the workers, only
 * for chunks they encode. True if any was found.
 */
static bool check_chunk(struct fstate *fs, const uint8_t *buf, uint64_t off,
			uint32_t len)
{
	const struct dcr_tensors *ts = &fs->floats;
	uint64_t end = off + len;
	bool found = false;

	if (!fs->nonfinite)
		return false;
	for (size_t i = first_tensor(ts, off); i < ts->n && ts->t[i].off < end; i++) {
		const struct dcr_tensor *t = &ts->t[i];
		unsigned w = dcr_float_width(t->fmt);
		uint64_t a = DCR_MAX(off, t->off), b = DCR_MIN(end, t->off + t->len);
		uint64_t e0 = t->off + (a - t->off + w - 1) / w * w;
		uint64_t e1 = t->off + (b - t->off) / w * w;
		if (e1 <= e0)
			continue;
		uint64_t c = dcr_nonfinite_count(buf + (e0 - off), (e1 - e0) / w, t->fmt);
		if (c) {
			__atomic_add_fetch(&fs->nonfinite[i], c, __ATOMIC_RELAXED);
			found = true;
		}
	}
	return found;
}

/*
 * The element of a float tensor that straddles file offset @off (a chunk
 * boundary), if any: its bytes before @off read from the source again
 * (a few bytes, rarely: most tensors start on a chunk-aligned offset
 * multiple of their width), the rest from the chunk at @off (@head, at
 * least 8 bytes). Called by the worker of the chunk at @off, whether or
 * not it is encoded. 1 if it is NaN or Inf, 0 if not (or there is none),
 * or the read's -errno.
 */
static int check_edge(struct fstate *fs, const uint8_t *head, uint64_t off)
{
	const struct dcr_tensors *ts = &fs->floats;
	size_t i = first_tensor(ts, off);

	if (!fs->nonfinite || i >= ts->n || ts->t[i].off >= off)
		return 0;
	const struct dcr_tensor *t = &ts->t[i];
	unsigned w = dcr_float_width(t->fmt);
	unsigned before = (unsigned)((off - t->off) % w);
	if (!before)
		return 0;
	uint8_t e[8];
	int ret = src_read(fs->src, fs->fd, e, before, off - before);
	if (ret)
		return ret;
	memcpy(e + before, head, w - before);
	if (!dcr_nonfinite_count(e, 1, t->fmt))
		return 0;
	__atomic_add_fetch(&fs->nonfinite[i], 1, __ATOMIC_RELAXED);
	return 1;
}

/*
 * Log what check_chunk and check_edge found in file @fi, once all its
 * chunks are done. Called by the calling thread after the workers have
 * stopped, so that the caller's thread sees every message.
 */
static void report_nonfinite(struct pipe *p, uint32_t fi)
{
	const struct fstate *fs = &p->fs[fi];
	unsigned shown = 0, more = 0;

	for (size_t i = 0; fs->nonfinite && i < fs->floats.n; i++) {
		uint64_t c = __atomic_load_n(&fs->nonfinite[i], __ATOMIC_RELAXED);
		if (!c)
			continue;
		if (shown++ < 10)
			dcr_err("%s: tensor %s has %" PRIu64 " non-finite value%s (NaN or Inf)",
				p->m->files[fi].path, fs->floats.t[i].name, c,
				c == 1 ? "" : "s");
		else
			more++;
	}
	if (more)
		dcr_err("%s: and %u more tensors with non-finite values",
			p->m->files[fi].path, more);
}

/*
 * Whether @buf[0..len) is the parent's chunk @pref. The parent's bytes in
 * parent_dir were proven when they were committed or materialized; this
 * only catches a copy that changed since (a --no-copy source rewritten,
 * bit rot, a stale cache), an accident, so XXH3-128 is enough where the
 * parent manifest has it (format 2+). Format 1 parents carry only the
 * SHA-256.
 */
static bool parent_chunk_ok(const struct dcr_manifest *pm,
			    const struct dcr_chunk_ref *pref, const void *buf,
			    size_t len)
{
	uint8_t h[DCR_HASH_LEN];

	if (pm->format >= 2) {
		dcr_xxh128(buf, len, h);
		return memcmp(h, pref->xxh, DCR_XXH_LEN) == 0;
	}
	dcr_sha256(buf, len, h);
	return dcr_hash_eq(h, pref->hash);
}

/*
 * Read chunk @j of its file into @w->cbuf (in place for a source in
 * memory: *@out), check the element across its start, and copy it to the
 * stage. -errno, logged naming the file.
 */
static int read_chunk(struct pipe *p, struct worker *w, const struct job *j,
		      const uint8_t **out)
{
	struct fstate *fs = &p->fs[j->fidx];
	const struct dcr_commit_source *src = fs->src;
	uint64_t off = j->cidx * (uint64_t)p->cs;
	const uint8_t *buf = src_direct(src, off, j->len);
	int ret = 0;

	if (!buf) {
		ret = src_read(src, fs->fd, w->cbuf, j->len, off);
		buf = w->cbuf;
	}
	if (!ret && j->cidx && j->len >= 8 && (ret = check_edge(fs, buf, off)) > 0) {
		__atomic_store_n(&p->refused, true, __ATOMIC_RELAXED);
		ret = 0;
	}
	if (ret) {
		if (ret == -ENODATA)
			dcr_err("%s changed while it was being committed", src_name(src));
		else
			dcr_err("%s: %s", src_name(src), dcr_strerror(ret));
		return ret;
	}
	if (fs->sfd >= 0 && __atomic_load_n(&p->staging, __ATOMIC_RELAXED) &&
	    (ret = stage_chunk(fs->sfd, fs->fd, buf, j->len, off, &fs->kcopy)))
		stage_failed(p, p->m->files[j->fidx].path, ret);
	*out = buf;
	return 0;
}

static int encode_job(struct pipe *p, struct worker *w, struct job *j)
{
	struct dcr_file *f = &p->m->files[j->fidx];
	struct dcr_chunk_ref *ref = &f->chunks[j->cidx];
	const uint8_t *buf;
	int ret, kind;

	if ((ret = read_chunk(p, w, j, &buf)))
		return ret;
	dcr_sha256(buf, j->len, ref->hash);
	dcr_xxh128(buf, j->len, ref->xxh);
	const void *base = NULL;
	const struct dcr_chunk_ref *pref = f->base == DCR_NO_BASE ? NULL :
		&p->pm->files[f->base].chunks[j->cidx];
	if (pref && dcr_hash_eq(pref->hash, ref->hash)) {
		ref->kind = DCR_CK_SAME;
		__atomic_add_fetch(&p->same, 1, __ATOMIC_RELAXED);
		return 0;
	}
	if (check_chunk(&p->fs[j->fidx], buf, j->cidx * (uint64_t)p->cs, j->len))
		__atomic_store_n(&p->refused, true, __ATOMIC_RELAXED);
	/* A refused commit only goes on counting, for the message. */
	if (__atomic_load_n(&p->refused, __ATOMIC_RELAXED))
		return 0;
	if (pref) {
		ret = dcr_pread_full(p->fs[j->fidx].parent_fd, w->pbuf, j->len,
				     j->cidx * (uint64_t)p->cs);
		if (ret || !parent_chunk_ok(p->pm, pref, w->pbuf, j->len)) {
			dcr_warn("parent copy of %s (chunk %" PRIu64 ") in %s does not match version %" PRIu64,
				 f->path, j->cidx, p->o->parent_dir, p->m->parent);
			return DCR_ERR(-ESTALE);
		}
		base = w->pbuf;
	}
	/* Regions are written before the file's first job is queued. */
	struct dcr_elem_hint hint = dcr_regions_hint(&p->fs[j->fidx].regions,
						     j->cidx * (uint64_t)p->cs);
	ret = dcr_frame_encode2(w->codec, buf, base, j->len, &hint,
				&j->frame, &kind);
	if (ret)
		return ret;
	/*
	 * Decode what we are about to publish: an encoder bug must fail this
	 * commit, not every later read of the version (a reader that sees a
	 * manifest must be able to read every byte it names). A delta is
	 * applied in place onto the parent's chunk, which pbuf still holds
	 * (the encoder only reads it); a full frame overwrites pbuf.
	 */
	if (dcr_frame_apply(w->codec, j->frame.data, j->frame.len, w->pbuf, j->len) ||
	    memcmp(w->pbuf, buf, j->len) != 0) {
		dcr_err("internal error: the frame encoded for %s (chunk %" PRIu64
			") does not decode to the chunk; nothing is published",
			f->path, j->cidx);
		return DCR_ERR(-EIO);
	}
	ref->kind = kind == DCR_FRAME_DELTA ? DCR_CK_DELTA : DCR_CK_FULL;
	dcr_sha256(j->frame.data, j->frame.len, ref->fhash);
	__atomic_add_fetch(kind == DCR_FRAME_DELTA ? &p->delta : &p->full, 1,
			   __ATOMIC_RELAXED);
	return 0;
}

/*
 * A file is read and all its chunks are done: free what encoding needed,
 * keeping the per-tensor counts only if a value was refused (reported by
 * the calling thread at the end, in file order). Called with p->lock held.
 */
static void file_done(struct pipe *p, uint32_t fi)
{
	struct fstate *fs = &p->fs[fi];
	bool found = false;

	/*
	 * A file written while it was read (in place, at the same size, or
	 * grown) would be committed as bytes it never held at any one time.
	 */
	if (fs->queued_all && fs->fd >= 0 && !p->err && file_changed(fs->fd, &fs->sb0)) {
		dcr_err("%s changed while it was being committed", fs->src->file);
		set_err_locked(p, DCR_ERR(-EAGAIN));
	}
	stage_close(p, fi);
	for (size_t i = 0; fs->nonfinite && i < fs->floats.n && !found; i++)
		found = __atomic_load_n(&fs->nonfinite[i], __ATOMIC_RELAXED) != 0;
	if (found) {
		struct dcr_tensors keep = fs->floats;
		uint64_t *counts = fs->nonfinite;
		fs->floats = (struct dcr_tensors){ 0 };
		fs->nonfinite = NULL;
		fstate_release(fs);
		fs->floats = keep;
		fs->nonfinite = counts;
	} else {
		fstate_release(fs);
	}
}

/*
 * Pack the slots that are done, oldest first, up to the first that is
 * not (see struct job): the packs' order is the chunks'. Under p->lock;
 * appending may wait for an upload slot (the packer never takes
 * p->lock).
 */
static void drain_locked(struct pipe *p)
{
	while (p->packed_seq < p->next_seq) {
		struct job *j = &p->slots[p->packed_seq % p->nslots];
		if (!j->done)
			break;
		if (!p->err && j->frame.len) {
			struct dcr_chunk_ref *ref = &p->m->files[j->fidx].chunks[j->cidx];
			int ret = dcr_packw_append(p->pw, j->frame.data, j->frame.len,
						   ref->fhash, &ref->pack, &ref->off);
			ref->len = (uint32_t)j->frame.len;
			if (ret)
				set_err_locked(p, ret);
		}
		j->done = false;
		p->packed_seq++;
		pthread_cond_broadcast(&p->cond_free);
	}
}

/* Encode slot @j with @w (NULL: no state, -ENOMEM), then pack what is
 * ready. */
static void run_job(struct pipe *p, struct worker *w, struct job *j)
{
	int ret = 0;

	dcr_buf_reset(&j->frame);
	if (!get_err(p))
		ret = w ? encode_job(p, w, j) : DCR_ERR(-ENOMEM);
	if (ret)
		dcr_buf_reset(&j->frame);
	pthread_mutex_lock(&p->lock);
	if (ret)
		set_err_locked(p, ret);
	struct fstate *fs = &p->fs[j->fidx];
	if (--fs->pending == 0 && fs->read_done)
		file_done(p, j->fidx);
	j->done = true;
	drain_locked(p);
	pthread_mutex_unlock(&p->lock);
}

static void encode_fn(void *ctx, void *ws, void *arg)
{
	run_job(ctx, ws, arg);
}

/* Wait for the next free slot; NULL if the pipeline failed. */
static struct job *take_slot(struct pipe *p)
{
	struct job *j = NULL;

	pthread_mutex_lock(&p->lock);
	while (p->next_seq - p->packed_seq >= p->nslots && !p->err)
		pthread_cond_wait(&p->cond_free, &p->lock);
	if (!p->err)
		j = &p->slots[p->next_seq % p->nslots];
	pthread_mutex_unlock(&p->lock);
	return j;
}

/* Hand the slot taken last, filled, to the encoders; @self is the
 * feeder's own state, for when no worker runs it. */
static void queue_job(struct pipe *p, struct job *j, struct worker *self)
{
	pthread_mutex_lock(&p->lock);
	j->done = false;
	p->next_seq++;
	p->fs[j->fidx].pending++;
	pthread_mutex_unlock(&p->lock);
	if (!dcr_wq_submit(p->wq, encode_fn, j, 0))
		run_job(p, self, j);
}

static void report(struct pipe *p, struct dcr_commit_progress *pr,
		   int64_t *last, bool force)
{
	if (!p->o->progress)
		return;
	int64_t now = dcr_mono_ns();
	if (!force && now - *last < 200000000)
		return;
	*last = now;
	pr->bytes_uploaded = dcr_packw_uploaded(p->pw);
	p->o->progress(p->o->progress_arg, pr);
}


#ifdef DCR_TEST_HOOKS
/*
 * Test hook (HACKING): DCRFS_TEST_COMMIT_BEFORE_OPEN=CMD runs
 * `sh -c CMD sh FILE` before each listed file is opened, between the
 * scan and the read, so that a test can replace FILE exactly in that
 * window (tests/integration/commit_race.sh).
 */
static void hook_before_open(const char *file)
{
	const char *cmd = getenv("DCRFS_TEST_COMMIT_BEFORE_OPEN");

	if (!cmd || !*cmd)
		return;
	pid_t pid = fork();
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", cmd, "sh", file, (char *)NULL);
		_exit(127);
	}
	while (pid > 0 && waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}
#endif

/*
 * Open the file of source @src for reading, *@sb its fstat: a file
 * listed in a tree is opened below it without following a symlink and
 * must still be the regular file the scan saw (else -EAGAIN: it changed
 * during the commit). -errno, logged naming the file.
 */
static int open_source(const struct dcr_commit_source *src, struct stat *sb)
{
	char root[PATH_MAX];
	int fd;

#ifdef DCR_TEST_HOOKS
	hook_before_open(src->file);
#endif
	if (!src->root_len) {
		fd = open(src->file, O_RDONLY | O_CLOEXEC);
		fd = fd < 0 ? DCR_ERR(-errno) : fd;
	} else if (src->root_len >= sizeof(root) || src->file[src->root_len] != '/') {
		fd = DCR_ERR(-ENAMETOOLONG);
	} else {
		memcpy(root, src->file, src->root_len);
		root[src->root_len] = 0;
		fd = dcr_open_beneath(root, src->file + src->root_len + 1, O_RDONLY, 0);
	}
	if (fd >= 0 && fstat(fd, sb) < 0) {
		int err = DCR_ERR(-errno);
		close(fd);
		fd = err;
	} else if (fd >= 0 && src->root_len &&
		   (!S_ISREG(sb->st_mode) || !same_object(sb, src->dev, src->ino))) {
		close(fd);
		fd = DCR_ERR(-EAGAIN);
	} else if (fd == -ELOOP || (fd == -ENOTDIR && src->root_len)) {
		fd = DCR_ERR(-EAGAIN); /* a symlink (or one above it) now */
	}
	if (fd == -EAGAIN)
		dcr_err("%s changed while it was being committed: it is no longer the "
			"regular file that was listed (replaced, or a symbolic link now); "
			"nothing was read from it", src->file);
	else if (fd < 0)
		dcr_err("%s: %s", src->file, dcr_strerror(fd));
	return fd;
}

/*
 * Open one file (its source, stage copy and parent copy) and queue its
 * chunks, in order; the workers read them (read_chunk).
 */
static int feed_file(struct pipe *p, struct worker *self, uint32_t fi,
		     struct dcr_commit_progress *pr, int64_t *last)
{
	struct dcr_file *f = &p->m->files[fi];
	struct fstate *fs = &p->fs[fi];
	const struct dcr_commit_source *src = fs->src;
	int ret = 0;

	if (src->file) {
		if ((fs->fd = open_source(src, &fs->sb0)) < 0) {
			ret = fs->fd;
			fs->fd = -1;
			goto err_done;
		}
		if ((uint64_t)fs->sb0.st_size != f->size) {
			dcr_err("%s changed while it was being committed", src->file);
			ret = DCR_ERR(-EAGAIN);
			goto err_done;
		}
		f->mtime_ns = (int64_t)fs->sb0.st_mtim.tv_sec * 1000000000 +
			      fs->sb0.st_mtim.tv_nsec;
	}
	if (__atomic_load_n(&p->staging, __ATOMIC_RELAXED)) {
		int sfd = dcr_open_beneath(p->o->stage_dir, f->path,
					   O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (sfd < 0)
			stage_failed(p, f->path, sfd);
		/*
		 * On XFS or btrfs a reflink makes the copy free. Should the
		 * source change after the clone, the next commit's check of
		 * every parent chunk against its hash catches it (-ESTALE).
		 */
		if (sfd >= 0 && fs->fd >= 0 && ioctl(sfd, FICLONE, fs->fd) == 0) {
			close(sfd);
			sfd = -1;
		}
		fs->sfd = sfd < 0 ? -1 : sfd;
		fs->kcopy = true;
	}
	if (f->base != DCR_NO_BASE) {
		int pfd = dcr_open_beneath(p->o->parent_dir, f->path, O_RDONLY, 0);
		if (pfd < 0) {
			dcr_warn("%s/%s: %s", p->o->parent_dir, f->path, dcr_strerror(pfd));
			ret = DCR_ERR(-ESTALE);
			goto err_done;
		}
		fs->parent_fd = pfd;
	}
	/* Element hints for the codec; a file that is not safetensors (or
	 * whose header does not parse) is simply coded as bytes. */
	ret = src_parse_header(src, fs->fd, f->size, &fs->regions,
			       p->o->allow_nonfinite ? NULL : &fs->floats);
	if (ret == -ENOMEM)
		goto err_done;
	ret = 0;
	if (fs->floats.n && !(fs->nonfinite = calloc(fs->floats.n, sizeof(*fs->nonfinite)))) {
		ret = DCR_ERR(-ENOMEM);
		goto err_done;
	}
	if (fs->fd >= 0)
		posix_fadvise(fs->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	for (uint64_t c = 0; c < f->nchunks; c++) {
		struct job *j = take_slot(p);
		if (!j) {
			ret = get_err(p);
			goto err_done;
		}
		j->fidx = fi;
		j->cidx = c;
		j->len = dcr_chunk_len(f->size, p->cs, c);
		pr->bytes_done += j->len;
		queue_job(p, j, self);
		report(p, pr, last, c + 1 == f->nchunks);
		if (p->o->cancel && atomic_load(p->o->cancel)) {
			ret = DCR_ERR(-ECANCELED);
			goto err_done;
		}
	}
	pthread_mutex_lock(&p->lock);
	fs->queued_all = true;
	pthread_mutex_unlock(&p->lock);
err_done:
	pthread_mutex_lock(&p->lock);
	fs->read_done = true;
	if (fs->pending == 0)
		file_done(p, fi);
	pthread_mutex_unlock(&p->lock);
	return ret;
}

/* What versions/N holds, read back after a conditional create of it. */
enum held { HELD_OURS, HELD_ABSENT, HELD_THEIRS, HELD_UNKNOWN };

#define READBACK_TRIES 3
#define LOST_PUT_TRIES 3
#define MANIFEST_READ_MAX ((size_t)2 << 30)

/*
 * Read version @v's manifest object @key back and compare it with @enc,
 * the bytes this commit put: exactly them (ours), nothing, an intact
 * manifest of version @v that is not ours (another commit's: it
 * decodes), or unknown (the store did not answer, or keeps returning
 * bytes that are neither: damaged on the way or at rest). A read that
 * is neither ours nor an intact manifest is tried again, so that a byte
 * flipped on the way is not taken for another commit's version (the
 * commit would then publish its tree a second time).
 */
static enum held version_holds(struct dcr_store *st, const char *key,
			       uint64_t v, const struct dcr_buf *enc, int *err)
{
	struct dcr_buf b;
	enum held h = HELD_UNKNOWN;

	*err = 0;
	dcr_buf_init(&b, MANIFEST_READ_MAX);
	for (int i = 0; i < READBACK_TRIES && h == HELD_UNKNOWN; i++) {
		struct dcr_manifest m;

		dcr_buf_reset(&b);
		int ret = dcr_store_get(st, key, 0, DCR_GET_ALL, &b);
		if (ret == -ENOENT) {
			h = HELD_ABSENT;
		} else if (ret) {
			*err = ret;
			break; /* the store retried already */
		} else if (b.len == enc->len && !memcmp(b.data, enc->data, b.len)) {
			h = HELD_OURS;
		} else if (dcr_manifest_decode(b.data, b.len, &m) == 0) {
			h = m.version == v ? HELD_THEIRS : HELD_UNKNOWN;
			dcr_manifest_free(&m);
			if (h == HELD_UNKNOWN)
				break; /* intact, but not a version-@v manifest */
		} else {
			*err = DCR_ERR(-EBADMSG);
		}
	}
	dcr_buf_free(&b);
	return h;
}

/* Whether a failed put of a manifest may still have stored it: anything
 * but a refusal the server gives before acting (or that we give). */
static bool put_may_have_stored(int err)
{
	return err != -EACCES && err != -EINVAL && err != -ENAMETOOLONG &&
	       err != -ENOMEM;
}

/*
 * Publish the manifest as the next free version number N: a conditional
 * create of versions/N, then the object read back, because a store's
 * answer can be wrong both ways. A 200 without the object stored (a
 * lying proxy or store) would print a number that holds nothing, which
 * the next commit takes too; a create that was applied but answered 503
 * or reset (and retried until the store gave up, or refused with 412
 * because of our own first attempt) would say "nothing was published"
 * about a version that was, or publish the same tree again as N+1. So:
 * versions/N holding exactly these bytes is success, whatever the put
 * answered; another commit's manifest there is the next number (and
 * after a failed put, nothing of ours was published); nothing there
 * after a 200 is the put tried again (a few times); nothing there after
 * a failure is nothing published. When the read-back cannot tell, the
 * commit fails with -EINPROGRESS naming N (it may hold this tree), never
 * claiming either.
 */
static int publish(struct pipe *p, uint64_t *version, uint64_t *mlen,
		   uint8_t mhash[DCR_HASH_LEN])
{
	struct dcr_buf enc;
	char key[64];
	uint64_t latest;
	int ret = dcr_store_latest(p->st, &latest), err;
	/* an earlier put of this number may have stored our bytes */
	bool ours_maybe = false;
	int lost = 0;

	if (ret)
		return ret;
	dcr_buf_init(&enc, SIZE_MAX);
	uint64_t v = DCR_MAX(latest, p->m->parent) + 1, encoded = 0;
	for (int tries = 0; tries < PUBLISH_TRIES; tries++) {
		if (v > DCR_VERSION_MAX) {
			dcr_err("%s: no version number left (the largest is %" PRIu64 ")",
				p->st->url, (uint64_t)DCR_VERSION_MAX);
			ret = DCR_ERR(-EOVERFLOW);
			goto done;
		}
		if (encoded != v) {
			p->m->version = v;
			dcr_buf_reset(&enc);
			if ((ret = dcr_manifest_encode(p->m, &enc)))
				goto done;
			encoded = v;
		}
		dcr_version_key(v, key, sizeof(key));
		int put = dcr_store_put(p->st, key, enc.data, enc.len, DCR_PUT_IF_ABSENT);
		if (put == -EEXIST && !ours_maybe) {
			dcr_info("version %" PRIu64 " was taken by another commit; trying %" PRIu64,
				 v, v + 1);
			v++;
			continue;
		}
		if (put && put != -EEXIST && !put_may_have_stored(put)) {
			ret = put;
			goto done;
		}
		switch (version_holds(p->st, key, v, &enc, &err)) {
		case HELD_OURS:
			if (put)
				dcr_info("%s/%s: the put answered %s, but the object holds this "
					 "commit's manifest: version %" PRIu64 " is published",
					 p->st->url, key, dcr_strerror(put), v);
			ret = 0;
			goto done;
		case HELD_THEIRS:
			if (put && put != -EEXIST) {
				/* Conditional: ours was not stored under N. */
				ret = put;
				goto done;
			}
			if (!put)
				dcr_warn("%s/%s: the store acknowledged this commit's manifest "
					 "but holds another one; trying %" PRIu64,
					 p->st->url, key, v + 1);
			else
				dcr_info("version %" PRIu64 " was taken by another commit; "
					 "trying %" PRIu64, v, v + 1);
			ours_maybe = false;
			lost = 0;
			v++;
			continue;
		case HELD_ABSENT:
			if (put && put != -EEXIST) {
				ret = put; /* nothing is there: nothing was published */
				goto done;
			}
			if (++lost >= LOST_PUT_TRIES) {
				dcr_err("%s/%s: the store acknowledged the manifest %d times "
					"without keeping it; nothing was published",
					p->st->url, key, lost);
				ret = DCR_ERR(-EIO);
				goto done;
			}
			dcr_warn("%s/%s: the store acknowledged the manifest but does "
				 "not hold it; putting it again", p->st->url, key);
			ours_maybe = true;
			continue;
		case HELD_UNKNOWN:
			dcr_err("%s/%s: %s, and reading it back %s, so whether version %"
				PRIu64 " holds this commit is unknown: check it (dcrfs-ctl "
				"show %" PRIu64 ") before committing again",
				p->st->url, key,
				put ? dcr_strerror(put) : "the put was acknowledged",
				err ? dcr_strerror(err) : "returned another object",
				v, v);
			ret = DCR_ERR(-EINPROGRESS);
			goto done;
		}
	}
	dcr_err("%s: no free version number after %d tries; nothing was published",
		p->st->url, PUBLISH_TRIES);
	ret = DCR_ERR(-EEXIST);
done:
	if (!ret) {
		*version = v;
		*mlen = enc.len;
		dcr_sha256(enc.data, enc.len, mhash);
	}
	dcr_buf_free(&enc);
	return ret;
}

static int make_stage_dirs(const struct dcr_manifest *m, const char *stage)
{
	char path[PATH_MAX];

	for (uint32_t i = 0; i < m->nfiles; i++) {
		if (m->files[i].type != DCR_FT_DIR)
			continue;
		snprintf(path, sizeof(path), "%s/%s", stage, m->files[i].path);
		if (mkdir(path, 0755) < 0 && errno != EEXIST) {
			int ret = DCR_ERR(-errno);
			dcr_err("%s: %s", path, dcr_strerror(ret));
			return ret;
		}
	}
	return 0;
}

/* Sort key for dcr_commit_sources: the sources by path. */
static int cmp_src(const void *a, const void *b)
{
	return strcmp((*(const struct dcr_commit_source *const *)a)->path,
		      (*(const struct dcr_commit_source *const *)b)->path);
}

/*
 * The manifest's entries from @src[0..n), sorted by path, with
 * @order[i] the source of entry i. Fails on an invalid or repeated path
 * or a source that is both a file and ranges.
 */
static int sources_to_files(const struct dcr_commit_source *src, size_t n,
			    struct dcr_manifest *m,
			    const struct dcr_commit_source **order)
{
	if (n >= UINT32_MAX)
		return DCR_ERR(-EFBIG);
	for (size_t i = 0; i < n; i++)
		order[i] = &src[i];
	qsort(order, n, sizeof(*order), cmp_src);
	if (n && !(m->files = calloc(n, sizeof(*m->files))))
		return DCR_ERR(-ENOMEM);
	for (size_t i = 0; i < n; i++) {
		const struct dcr_commit_source *c = order[i];
		struct dcr_file *f = &m->files[i];
		if (!dcr_path_valid(c->path, strlen(c->path)) ||
		    (c->file && c->nranges)) {
			dcr_err("%s: not a valid path in a version", c->path);
			return DCR_ERR(-EINVAL);
		}
		if (i && !strcmp(order[i - 1]->path, c->path)) {
			dcr_err("%s: added twice", c->path);
			return DCR_ERR(-EEXIST);
		}
		if (!(f->path = strdup(c->path)))
			return DCR_ERR(-ENOMEM);
		m->nfiles++;
		f->type = c->dir ? DCR_FT_DIR : DCR_FT_REG;
		f->mode = c->mode & 07777;
		f->mtime_ns = c->mtime_ns;
		f->base = DCR_NO_BASE;
		f->size = c->size;
		if (!c->dir && !c->file) {
			f->size = 0;
			for (size_t r = 0; r < c->nranges; r++)
				f->size += c->ranges[r].len;
		}
	}
	return 0;
}

/*
 * Confirm that every pack the manifest names is in the store: a store
 * that acknowledged a put it did not keep must not get a version that
 * names missing bytes.
 */
static int check_packs(struct dcr_store *st, const struct dcr_manifest *m)
{
	char key[80];
	uint64_t size;

	for (uint32_t i = 0; i < m->npacks; i++) {
		dcr_pack_key(m->packs[i], key, sizeof(key));
		int ret = dcr_store_head(st, key, &size);
		if (ret) {
			dcr_err("%s/%s: %s after its upload was acknowledged; not publishing",
				st->url, key, ret == -ENOENT ? "missing" : dcr_strerror(ret));
			return ret == -ENOENT ? DCR_ERR(-EIO) : ret;
		}
	}
	return 0;
}

int dcr_commit_scan(const char *dir, struct dcr_commit_source **out, size_t *n)
{
	struct scan s = { .root = dir, .root_len = strlen(dir) };
	int ret, fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0) {
		ret = DCR_ERR(-errno);
		if (ret == -ENOTDIR)
			dcr_err("%s: not a directory", dir);
		else
			dcr_err("%s: %s", dir, dcr_strerror(ret));
		return ret;
	}
	if ((ret = scan_dir(&s, fd, ""))) {
		dcr_commit_sources_free(s.src, s.n);
		return ret;
	}
	*out = s.src;
	*n = s.n;
	return 0;
}

int dcr_commit(struct dcr_store *st, const char *dir,
	       const struct dcr_commit_opts *o, struct dcr_commit_result *res)
{
	struct dcr_commit_source *src;
	size_t n;

	memset(res, 0, sizeof(*res));
	/* Scan first, so a bad entry fails before anything is uploaded. */
	int ret = dcr_commit_scan(dir, &src, &n);
	if (ret)
		return ret;
	ret = dcr_commit_sources(st, src, n, dir, o, res);
	dcr_commit_sources_free(src, n);
	return ret;
}

int dcr_commit_sources(struct dcr_store *st,
		       const struct dcr_commit_source *src, size_t nsrc,
		       const char *what, const struct dcr_commit_opts *o,
		       struct dcr_commit_result *res)
{
	struct dcr_manifest m = { 0 };
	const struct dcr_commit_source **order = NULL;
	int ret;

	memset(res, 0, sizeof(*res));
	const struct dcr_manifest *pm = o->parent ? o->parent_manifest : NULL;
	if (o->parent && (!pm || pm->version != o->parent || !o->parent_dir)) {
		dcr_err("internal: parent %" PRIu64 " given without its manifest or tree", o->parent);
		return DCR_ERR(-EINVAL);
	}
	uint32_t cs = o->chunk_size ? o->chunk_size : pm ? pm->chunk_size : DCR_CHUNK_DEFAULT;
	if (!dcr_chunk_size_valid(cs)) {
		dcr_err("invalid chunk size %" PRIu32 " (a power of two from 4 KiB to 64 MiB)", cs);
		return DCR_ERR(-EINVAL);
	}
	bool can_delta = pm && !o->full && cs == pm->chunk_size;
	if (pm && !o->full && cs != pm->chunk_size)
		dcr_warn("chunk size differs from version %" PRIu64 "'s; committing full frames",
			 o->parent);

	if (!(order = calloc(nsrc ? nsrc : 1, sizeof(*order))))
		return DCR_ERR(-ENOMEM);
	if ((ret = sources_to_files(src, nsrc, &m, order)))
		goto err_free_manifest;
	m.format = DCR_MANIFEST_FORMAT;
	m.parent = o->parent;
	m.chunk_size = cs;
	m.ctime_ns = dcr_now_ns();
	m.version = o->parent + 1; /* provisional, set at publish */

	struct dcr_commit_progress pr = { .phase = "encode" };
	for (uint32_t i = 0; i < m.nfiles; i++) {
		struct dcr_file *f = &m.files[i];
		if (f->type == DCR_FT_DIR) {
			res->dirs++;
			continue;
		}
		res->files++;
		pr.bytes_total += f->size;
		f->nchunks = dcr_chunk_count(f->size, cs);
		if (f->nchunks && !(f->chunks = calloc(f->nchunks, sizeof(*f->chunks)))) {
			ret = DCR_ERR(-ENOMEM);
			goto err_free_manifest;
		}
		if (can_delta) {
			int64_t b = dcr_manifest_find(pm, f->path);
			if (b >= 0 && pm->files[b].type == DCR_FT_REG &&
			    pm->files[b].size == f->size)
				f->base = (uint32_t)b;
		}
	}
	if (!res->files && !o->allow_empty) {
		dcr_err("%s holds no files: an empty version would empty every "
			"mount's latest; nothing was published (pass "
			"--allow-empty to publish one)", what);
		ret = DCR_ERR(-ENODATA);
		goto err_free_manifest;
	}
	if (pm) {
		uint64_t had = 0;
		char a[32], b[32];

		for (uint32_t i = 0; i < pm->nfiles; i++)
			had += pm->files[i].type == DCR_FT_REG ?
				       pm->files[i].size : 0;
		if (pr.bytes_total < had / 2)
			dcr_warn("%s holds %s, less than half of version %" PRIu64
				 "'s %s: is it the right directory?", what,
				 dcr_format_size(pr.bytes_total, a, sizeof(a)),
				 o->parent, dcr_format_size(had, b, sizeof(b)));
	}
	bool staging = o->stage_dir && make_stage_dirs(&m, o->stage_dir) == 0;

	int jobs = o->jobs > 0 ? o->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
	jobs = DCR_MAX(1, DCR_MIN(jobs, MAX_JOBS));
	struct pipe p = {
		.st = st, .o = o, .m = &m, .pm = pm, .cs = cs,
		.nslots = (size_t)jobs * 2 + 2,
		.staging = staging,
	};
	if (o->stage_dir && !staging)
		dcr_warn("cannot keep a copy of the committed tree in %s; the next "
			 "commit will rebuild its parent from the store", o->stage_dir);
	pthread_mutex_init(&p.lock, NULL);
	pthread_cond_init(&p.cond_free, NULL);
	struct worker *self = worker_new(&p);
	p.slots = calloc(p.nslots, sizeof(*p.slots));
	p.fs = calloc(m.nfiles ? m.nfiles : 1, sizeof(*p.fs));
	if (!self || !p.slots || !p.fs) {
		ret = DCR_ERR(-ENOMEM);
		goto err_free_pipe;
	}
	for (uint32_t i = 0; i < m.nfiles; i++) {
		p.fs[i].fd = p.fs[i].sfd = p.fs[i].parent_fd = -1;
		p.fs[i].src = order[i];
	}
	for (size_t i = 0; i < p.nslots; i++)
		dcr_buf_init(&p.slots[i].frame, SIZE_MAX);
	/* A pack is sealed once it reaches the target, so it never holds
	 * more than the target plus one frame (a chunk and its header). */
	struct dcr_packw_opts po = {
		.st = st, .target = o->pack_target ? o->pack_target : PACK_TARGET_DEFAULT,
		.frame_max = (size_t)cs + 4096,
		.uploads = (unsigned)(o->uploads > 0 ? o->uploads : UPLOADS_DEFAULT),
	};
	struct dcr_wq_opts wo = {
		.name = "dcr-encode", .threads = jobs, .max_items = p.nslots,
		.on_start = worker_new, .on_stop = worker_free, .ctx = &p,
	};
	if ((ret = dcr_packw_new(&po, &p.pw)) || (ret = dcr_wq_create(&wo, &p.wq)))
		goto err_free_pipe;

	int64_t last = 0;
	report(&p, &pr, &last, true);
	for (uint32_t i = 0; i < m.nfiles && !ret; i++) {
		if (m.files[i].type != DCR_FT_REG)
			continue;
		ret = feed_file(&p, self, i, &pr, &last);
		res->bytes_in += m.files[i].size;
	}
	if (ret)
		set_err(&p, ret);
	/* Every queued chunk is encoded and packed (or skipped, after an
	 * error) before the workers stop. */
	dcr_wq_wait_idle(p.wq);
	dcr_wq_free(p.wq);
	p.wq = NULL;
	if (!ret)
		ret = get_err(&p);
	for (uint32_t i = 0; p.refused && i < m.nfiles; i++)
		report_nonfinite(&p, i);
	if (!ret && p.refused) {
		dcr_err("%s: refusing to commit non-finite weights (named above); nothing "
			"is published (--allow-nonfinite commits them anyway)", what);
		ret = DCR_ERR(-EDOM);
	}
	/* Seal the last pack and wait for the uploads. */
	if (!ret)
		ret = dcr_packw_finish(p.pw);
	if (!ret && (m.npacks = dcr_packw_count(p.pw)) &&
	    !(m.packs = malloc((size_t)m.npacks * DCR_HASH_LEN)))
		ret = DCR_ERR(-ENOMEM);
	if (!ret && m.npacks)
		memcpy(m.packs, dcr_packw_hashes(p.pw), (size_t)m.npacks * DCR_HASH_LEN);
	/* Every chunk is hashed now: the files' digests (format 3). */
	for (uint32_t i = 0; i < m.nfiles && !ret; i++)
		if (m.files[i].type == DCR_FT_REG)
			ret = dcr_file_digest(&m.files[i], m.files[i].sha256);
	/* (a full commit of the same tree is a new anchor: wanted) */
	if (!ret && pm && !o->allow_unchanged && !o->full &&
	    m.format == pm->format && dcr_manifest_same_files(&m, pm, 0)) {
		dcr_err("%s is unchanged since version %" PRIu64 " (the same files, "
			"modes and bytes): nothing was published (pass "
			"--allow-unchanged to publish it as a new version)", what,
			o->parent);
		ret = DCR_ERR(-ENODATA);
	}
	if (!ret) {
		pr.phase = "publish";
		report(&p, &pr, &last, true);
		if (o->cancel && atomic_load(o->cancel))
			ret = DCR_ERR(-ECANCELED);
		else
			ret = check_packs(st, &m);
	}
	if (ret == -ECANCELED)
		dcr_err("%s: cancelled after reading %" PRIu64 " of %" PRIu64 " bytes: "
			"nothing was published; the packs it uploaded are named by no "
			"manifest, and dcrfs-ctl gc deletes them once older than its "
			"grace period", what, pr.bytes_done, pr.bytes_total);
	if (!ret)
		ret = publish(&p, &res->version, &res->manifest_len,
			      res->manifest_hash);
	if (!ret) {
		res->bytes_packed = dcr_packw_uploaded(p.pw);
		res->packs = m.npacks;
		res->chunks_same = p.same;
		res->chunks_delta = p.delta;
		res->chunks_full = p.full;
		res->staged = p.staging;
	}
err_free_pipe:
	dcr_wq_free(p.wq);
	dcr_packw_free(p.pw);
	worker_free(&p, self);
	for (size_t i = 0; p.slots && i < p.nslots; i++)
		dcr_buf_free(&p.slots[i].frame);
	for (uint32_t i = 0; p.fs && i < m.nfiles; i++)
		fstate_release(&p.fs[i]);
	free(p.fs);
	free(p.slots);
	pthread_mutex_destroy(&p.lock);
	pthread_cond_destroy(&p.cond_free);
err_free_manifest:
	dcr_manifest_free(&m);
	free(order);
	return ret;
}
