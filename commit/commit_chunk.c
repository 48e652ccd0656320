/* SPDX-License-Identifier: MIT */
/*
 * commit_chunk.c - one chunk of a commit, on the worker that reads it:
 * read from its source, copied to the stage, hashed, checked for
 * non-finite values, compared with the parent's, encoded and decoded
 * again (commit_int.h).
 */
#include "config.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commit_int.h"
#include "common.h"
#include "fileio.h"
#include "frame.h"
#include "hash.h"
#include "manifest.h"
#include "nonfinite.h"
#include "safetensors.h"

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
int dcr_commit_parse_header(const struct dcr_commit_source *src, int fd,
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

/* An encoder's own state (core/wq's on_start makes it, per worker). */
struct worker {
	struct dcr_codec *codec;
	uint8_t *cbuf;          /* the chunk, read from its file */
	uint8_t *pbuf;          /* parent chunk, then the frame decoded again */
};

void dcr_commit_worker_free(void *ctx, void *ws)
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

void *dcr_commit_worker_new(void *ctx)
{
	struct pipe *p = ctx;
	struct worker *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	w->codec = dcr_codec_new(p->o->zstd_level);
	w->cbuf = malloc(p->cs);
	w->pbuf = malloc(p->cs);
	if (!w->codec || !w->cbuf || !w->pbuf) {
		dcr_commit_worker_free(ctx, w);
		return NULL;
	}
	return w;
}

/* Index of the first tensor of @ts that ends after file offset @off. */
static size_t first_tensor(const struct dcr_tensors *ts, uint64_t off)
{
	return dcr_first_ending_after(ts->t, ts->n, sizeof(*ts->t),
				      offsetof(struct dcr_tensor, off),
				      offsetof(struct dcr_tensor, len), off);
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
void dcr_commit_report_nonfinite(struct pipe *p, uint32_t fi)
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
		dcr_commit_stage_failed(p, p->m->files[j->fidx].path, ret);
	*out = buf;
	return 0;
}

int dcr_commit_encode_job(struct pipe *p, struct worker *w, struct job *j)
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
	/*
	 * Decoded before it is published (dcr_frame_encode_checked): an
	 * encoder bug must fail this commit, not every later read of the
	 * version. A delta is applied in place onto the parent's chunk,
	 * which pbuf holds; a full frame overwrites pbuf.
	 */
	ret = dcr_frame_encode_checked(w->codec, buf, base, j->len, &hint,
				       &j->frame, &kind, w->pbuf);
	if (ret == -ENOTRECOVERABLE) {
		dcr_err("internal error: the frame encoded for %s (chunk %" PRIu64
			") does not decode to the chunk; nothing is published",
			f->path, j->cidx);
		return DCR_ERR(-EIO);
	}
	if (ret)
		return ret;
	ref->kind = kind == DCR_FRAME_DELTA ? DCR_CK_DELTA : DCR_CK_FULL;
	dcr_sha256(j->frame.data, j->frame.len, ref->fhash);
	__atomic_add_fetch(kind == DCR_FRAME_DELTA ? &p->delta : &p->full, 1,
			   __ATOMIC_RELAXED);
	return 0;
}
