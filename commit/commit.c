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
 * frames' hashes (commit/packw.h), and queued for the uploader threads,
 * which upload it while encoding goes on; a bounded number of packs is
 * in flight, so memory stays bounded.
 * When every pack is stored, the manifest is published with a conditional
 * put; nothing a reader can see exists before that put.
 *
 * This file is the pipeline itself; the scan, the work on one chunk and
 * the publish are commit_scan.c, commit_chunk.c and commit_publish.c
 * (commit_int.h).
 */
#include "config.h"

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
#include <unistd.h>

#include "chunk.h"
#include "commit.h"
#include "commit_int.h"
#include "common.h"
#include "cpus.h"
#include "fileio.h"
#include "hash.h"
#include "manifest.h"
#include "packw.h"
#include "wq.h"

#define MAX_JOBS 256
#define UPLOADS_DEFAULT 4


/* ----------------------------------------------------------- pipeline */

/* Close @fs's descriptors but the stage copy's (stage_close). */

/* Whether @path names a safetensors file (its header is expected). */
static bool named_safetensors(const char *path)
{
	static const char sfx[] = ".safetensors";
	size_t n = strlen(path);

	return n >= sizeof(sfx) - 1 && !strcmp(path + n - (sizeof(sfx) - 1), sfx);
}

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

void dcr_commit_stage_failed(struct pipe *p, const char *path, int err)
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
		ret = w ? dcr_commit_encode_job(p, w, j) : DCR_ERR(-ENOMEM);
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
		if ((fs->fd = dcr_commit_open_source(src, &fs->sb0)) < 0) {
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
			dcr_commit_stage_failed(p, f->path, sfd);
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
	ret = dcr_commit_parse_header(src, fs->fd, f->size, &fs->regions,
			       p->o->allow_nonfinite ? NULL : &fs->floats);
	if (ret == -ENOMEM)
		goto err_done;
	if (ret && named_safetensors(f->path))
		dcr_warn("%s: its safetensors header is refused (malformed, or a "
			 "shape that does not fit its data_offsets); committed "
			 "as bytes, without element hints or the non-finite check",
			 f->path);
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

static int make_stage_dirs(const struct dcr_manifest *m, const char *stage)
{
	char path[PATH_MAX];

	for (uint32_t i = 0; i < m->nfiles; i++) {
		if (m->files[i].type != DCR_FT_DIR)
			continue;
		int ret = dcr_path_join_buf(path, sizeof(path), stage,
					    m->files[i].path);
		if (ret || (mkdir(path, 0755) < 0 && errno != EEXIST)) {
			ret = ret ? DCR_ERR(ret) : DCR_ERR(-errno);
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
 * The id of store @st into @id, for a commit that signs: a signature
 * binds it (sign.h), so a store without one, made before store markers,
 * cannot be signed for.
 */
static int signed_store_id(struct dcr_store *st, char id[DCR_STORE_ID_MAX + 1])
{
	struct dcr_store_info info;
	int ret = dcr_store_identify(st, &info);

	if (ret == -ENOENT) {
		dcr_err("%s: not a dcrfs store (no store marker): nothing to sign for",
			st->url);
		return DCR_ERR(-ENOENT);
	}
	if (ret) {
		dcr_err("%s: cannot read the store's id to sign for it: %s", st->url,
			dcr_strerror(ret));
		return ret;
	}
	if (info.legacy) {
		dcr_err("%s: a store made before store markers (id %s) has no id a "
			"signature can bind: its versions cannot be signed; nothing "
			"was published (commit unsigned, or to a store made with "
			"dcrfs-ctl init)", st->url, info.id);
		return DCR_ERR(-EINVAL);
	}
	memcpy(id, info.id, sizeof(info.id));
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
	char intent[DCR_INTENT_KEY_MAX] = "";
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

	/* Metadata and the store signed for: before any work. */
	char store_id[DCR_STORE_ID_MAX + 1] = "";
	for (uint32_t i = 0; i < o->nmeta; i++)
		if ((ret = dcr_manifest_set_meta(&m, o->meta[i].key, o->meta[i].value)))
			goto err_free_manifest;
	if (o->sign_key && (ret = signed_store_id(st, store_id)))
		goto err_free_manifest;
	if (!(order = calloc(nsrc ? nsrc : 1, sizeof(*order)))) {
		ret = DCR_ERR(-ENOMEM);
		goto err_free_manifest;
	}
	if ((ret = sources_to_files(src, nsrc, &m, order)))
		goto err_free_manifest;
	/* Format 5 only for what format 4 cannot hold (manifest.h). */
	m.format = m.nmeta || o->sign_key ? DCR_MANIFEST_FORMAT :
					     DCR_MANIFEST_FORMAT_PLAIN;
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

	int jobs = dcr_cpu_threads(o->jobs);
	jobs = DCR_MAX(1, DCR_MIN(jobs, MAX_JOBS));
	struct pipe p = {
		.st = st, .o = o, .m = &m, .pm = pm, .cs = cs,
		.nslots = (size_t)jobs * 2 + 2,
		.staging = staging,
	};
	memcpy(p.store_id, store_id, sizeof(store_id));
	if (o->stage_dir && !staging)
		dcr_warn("cannot keep a copy of the committed tree in %s; the next "
			 "commit will rebuild its parent from the store", o->stage_dir);
	pthread_mutex_init(&p.lock, NULL);
	pthread_cond_init(&p.cond_free, NULL);
	struct worker *self = dcr_commit_worker_new(&p);
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
		.st = st, .target = o->pack_target, /* 0: the writer's default */
		.frame_max = (size_t)cs + 4096,
		.uploads = (unsigned)(o->uploads > 0 ? o->uploads : UPLOADS_DEFAULT),
	};
	struct dcr_wq_opts wo = {
		.name = "dcr-encode", .threads = jobs, .max_items = p.nslots,
		.on_start = dcr_commit_worker_new,
		.on_stop = dcr_commit_worker_free, .ctx = &p,
	};
	/* gc keeps the packs of a commit it knows of (objstore.h) */
	if ((ret = dcr_intent_begin(st, intent)) ||
	    (ret = dcr_packw_new(&po, &p.pw)) || (ret = dcr_wq_create(&wo, &p.wq)))
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
		dcr_commit_report_nonfinite(&p, i);
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
	    dcr_manifest_same_meaning(m.format, pm->format) &&
	    dcr_manifest_same_files(&m, pm, 0)) {
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
			ret = dcr_commit_check_packs(st, &m, 0);
	}
	if (ret == -ECANCELED)
		dcr_err("%s: cancelled after reading %" PRIu64 " of %" PRIu64 " bytes: "
			"nothing was published; the packs it uploaded are named by no "
			"manifest, and dcrfs-ctl gc deletes them once older than its "
			"grace period", what, pr.bytes_done, pr.bytes_total);
	if (!ret)
		ret = dcr_commit_publish_version(&p, res);
	/* Published: every pack is checked again, so that no commit says
	 * "published" about a version whose packs went meanwhile (a gc
	 * that did not see this commit's intent, or an expired one). */
	if (!ret && (ret = dcr_commit_check_packs(st, &m, res->version)))
		res->version = 0;
	if (!ret) {
		res->bytes_packed = dcr_packw_uploaded(p.pw);
		res->packs = m.npacks;
		res->chunks_same = p.same;
		res->chunks_delta = p.delta;
		res->chunks_full = p.full;
		res->staged = p.staging;
		if (o->sign_key)
			snprintf(res->signer, sizeof(res->signer), "%s",
				 dcr_sign_key_id(o->sign_key));
	}
err_free_pipe:
	dcr_wq_free(p.wq);
	dcr_packw_free(p.pw);
	dcr_intent_end(st, intent); /* no upload of ours is running now */
	dcr_commit_worker_free(&p, self);
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
