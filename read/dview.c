/* SPDX-License-Identifier: MIT */
/*
 * dview.c - the delta view of one safetensors file (see dview.h).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "fileio.h"
#include "hash.h"
#include "json.h"
#include "manifest.h"
#include "safetensors.h"
#include "stwriter.h"
#include "dview.h"
#include "dview_out.h"
#include "dvrec.h"

/* Bytes of each tensor read from each version at once (a multiple of
 * every dtype's width). */
#define BLOCK (4u << 20)

/* A parsed, checked header: the tensors and, sorted by name, pointers. */
struct stfile {
	struct dcr_tensors ts;
	struct dcr_tensor **by_name;
	uint64_t size;
};

static void stfile_free(struct stfile *f)
{
	dcr_tensors_free(&f->ts);
	free(f->by_name);
	memset(f, 0, sizeof(*f));
}

/* Read exactly [off, off+len) of a version's file. 0 or -errno. */
static int read_exact(struct dcr_reader *r, struct dcr_dview_side s,
		      uint32_t idx, uint64_t off, void *dst, size_t len)
{
	return dcr_reader_read_exact(r, s.v, s.tree, idx, off, dst, len);
}

static int cmp_tensor_name(const void *a, const void *b)
{
	return strcmp((*(struct dcr_tensor *const *)a)->name,
		      (*(struct dcr_tensor *const *)b)->name);
}

/* Elements of @t (its shape's product), or false on overflow. */
static bool numel_of(const struct dcr_tensor *t, uint64_t *n)
{
	uint64_t c = 1;

	for (unsigned d = 0; d < t->ndim; d++)
		if (__builtin_mul_overflow(c, t->shape[d], &c))
			return false;
	*n = c;
	return true;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

/*
 * Parse and check the header of entry @idx of side @s, a file of @size
 * bytes, into @f. -EBADMSG if it is not a file of the view (a message
 * at debug level names why), or the reader's -errno.
 */
static int stfile_load(struct dcr_reader *r, struct dcr_dview_side s,
		       uint32_t idx, const char *path, uint64_t size,
		       struct stfile *f)
{
	uint8_t head[8];
	uint8_t *prefix = NULL;
	size_t need = 0;
	int ret;

	memset(f, 0, sizeof(*f));
	f->size = size;
	if (!ends_with(path, DCR_DVIEW_SUFFIX))
		return -EBADMSG;
	if (size < 8)
		goto bad;
	ret = read_exact(r, s, idx, 0, head, sizeof(head));
	if (ret)
		return ret;
	if (dcr_safetensors_prefix_len(head, sizeof(head), size, &need))
		goto bad;
	prefix = malloc(need);
	if (!prefix)
		return DCR_ERR(-ENOMEM);
	ret = read_exact(r, s, idx, 0, prefix, need);
	if (ret)
		goto err_free;
	ret = dcr_safetensors_tensors(prefix, need, size, &f->ts);
	free(prefix);
	prefix = NULL;
	if (ret == -ENOMEM)
		return ret;
	if (ret)
		goto bad;
	f->by_name = calloc(f->ts.n ? f->ts.n : 1, sizeof(*f->by_name));
	if (!f->by_name) {
		stfile_free(f);
		return DCR_ERR(-ENOMEM);
	}
	for (size_t i = 0; i < f->ts.n; i++) {
		struct dcr_tensor *t = &f->ts.t[i];
		unsigned w = dcr_st_dtype_width(t->dtype);
		uint64_t n, bytes;

		if (!w || t->ndim == DCR_ST_NDIM_UNKNOWN || !numel_of(t, &n) ||
		    __builtin_mul_overflow(n, w, &bytes) || bytes != t->len) {
			dcr_debug("v%" PRIu64 " %s: tensor %s: dtype %s, shape and "
				"%" PRIu64 " bytes do not agree: not in the delta view",
				s.v, path, t->name, t->dtype, t->len);
			goto bad;
		}
		f->by_name[i] = t;
	}
	qsort(f->by_name, f->ts.n, sizeof(*f->by_name), cmp_tensor_name);
	for (size_t i = 1; i < f->ts.n; i++)
		if (!strcmp(f->by_name[i]->name, f->by_name[i - 1]->name)) {
			dcr_debug("v%" PRIu64 " %s: tensor %s named twice: not in "
				"the delta view", s.v, path, f->by_name[i]->name);
			goto bad;
		}
	return 0;
bad:
	dcr_debug("v%" PRIu64 " %s: not a safetensors file: not in the delta view",
		s.v, path);
	stfile_free(f);
	return -EBADMSG;
err_free:
	free(prefix);
	stfile_free(f);
	return ret;
}

int dcr_dview_probe(struct dcr_reader *r, uint64_t v, uint32_t tree,
		    uint32_t idx)
{
	const struct dcr_version_info *vi;
	struct dcr_dview_side s = { v, tree };
	struct stfile f;
	char *path;
	uint64_t size;
	int ret = dcr_reader_version(r, v, &vi);

	if (ret)
		return ret;
	if (vi->tree != tree)
		ret = -ESTALE;
	else if (idx == 0 || idx >= vi->nentries)
		ret = idx ? -ENOENT : -EISDIR;
	else if (vi->entries[idx].type != DCR_FT_REG)
		ret = -EISDIR;
	if (ret) {
		dcr_reader_version_put(r, vi);
		return ret;
	}
	path = strdup(vi->entries[idx].path);
	size = vi->entries[idx].size;
	dcr_reader_version_put(r, vi);
	if (!path)
		return DCR_ERR(-ENOMEM);
	ret = stfile_load(r, s, idx, path, size, &f);
	free(path);
	stfile_free(&f);
	return ret;
}

/* ------------------------------------------------------------ output */

/* An unlinked scratch file in @tmpdir into *@fd. 0 or -errno (logged). */
static int scratch_open(const char *tmpdir, int *fd)
{
	*fd = open(tmpdir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (*fd < 0) {
		int e = -errno;

		dcr_err("delta view: cannot make a scratch file in %s: %s",
			tmpdir, strerror(-e));
		return DCR_ERR(e);
	}
	return 0;
}

/* Where a unit's pieces wait between the passes: nowhere (made again
 * from the records in pass 2), or the scratch file. */
#define NO_SCRATCH UINT64_MAX

/*
 * What pass 1 learnt of a unit, kept for every unit of the build (a few
 * dozen bytes per UNIT bytes of tensor): its element count, where its
 * elements start in its tensor's T.idx and T.val, and, for a unit whose
 * bytes were compared, where its pieces (its indices, then its values)
 * lie in the scratch file and their production hashes.
 */
struct place {
	size_t c;                    /* its tensor's struct change */
	uint64_t pos, end;           /* its bytes of the tensor */
	uint64_t n;                  /* changed elements */
	uint64_t first;              /* its tensor's elements before it */
	uint64_t soff;               /* in the scratch file, or NO_SCRATCH */
	uint8_t ih[DCR_XXH_LEN], vh[DCR_XXH_LEN]; /* its pieces' hashes */
};

/* A growable buffer of one unit's indices or values; or, @fixed, its
 * place in the output's mapping, which never grows. */
struct obuf {
	uint8_t *p;
	size_t n, cap;
	bool fixed;
};

/*
 * A unit of the build, bytes [pos, end) of a changed-candidate tensor,
 * being worked on by one thread into its own buffers (a window of them
 * at once; the buffers are reused by the next window's units).
 */
struct unit {
	const struct dcr_tensor *ta, *tb;
	struct place *pl;
	uint64_t pos, end;
	/* Count the elements only (pass 1): compare_unit returns 1 where
	 * the unit needs bytes read and compared. */
	bool count_only;
	struct obuf oi, ov;
	uint64_t n, skipped, compared, recorded;
	int rc;
};

struct build {
	struct dcr_reader *r;
	struct dcr_dview_side a, b;
	uint32_t ia, ib;             /* entries of the file in A and B */
	uint32_t cs;                 /* both versions' chunk size; 0 if not equal */
	struct dcr_dvrec *rec;       /* the reader's records of changes, or NULL */
	struct dcr_dview_info *info;
	struct dcr_dview_sums *sums;
	int out_fd;
	/* The output's shared mapping, from its layout on (dview_out.h). */
	uint8_t *map;
	/* Test hook: pass 2 finds no record (write_all). */
	bool recs_gone;
	/* The scratch file of compared units' pieces and its next free
	 * byte (taken atomically: any order, each unit knows its place). */
	int sfd;
	uint64_t spos;
	/* Every unit's place, in unit order (tensor, then offset). */
	struct place *pl;
	size_t npl;
	/* The window of units at work and their buffers. */
	struct unit *u;
	size_t win;
	/* Scratch blocks (BLOCK bytes each, A's and B's) for the units
	 * running at once, handed out under lock. */
	pthread_mutex_t lock;
	/* Held around each write to the scratch file (pass 1). Buffered
	 * writes to one file take its inode's lock in the kernel one at a
	 * time whatever the threads, and a writer that finds it taken
	 * spins while the holder copies (optimistic spinning): CPU spent
	 * on nothing. Here it sleeps. (Pass 2 stores into the output's
	 * mapping, which takes no such lock.) */
	pthread_mutex_t wlock;
	uint8_t **scratch;
	size_t nscratch;
};

/* Room for @more bytes in @o. 0 or -ENOMEM. */
static int obuf_room(struct obuf *o, size_t more)
{
	if (o->n + more > o->cap && o->fixed)
		return -EAGAIN; /* more than counted, or reserved with slack */
	if (o->n + more > o->cap) {
		size_t cap = DCR_MAX(o->cap * 2, DCR_MAX(o->n + more,
							 (size_t)64 << 10));
		uint8_t *p = realloc(o->p, cap);

		if (!p)
			return DCR_ERR(-ENOMEM);
		o->p = p;
		o->cap = cap;
	}
	return 0;
}

/* A changed-candidate tensor and its two segments in the output. */
struct change {
	const struct dcr_tensor *t; /* of B */
	const struct dcr_tensor *ta; /* of A */
	uint64_t n;                  /* changed elements */
	unsigned iw, vw;             /* index and value widths */
	size_t p0, np;               /* its units' places */
	uint64_t out_i, out_v;       /* its T.idx and T.val in the output */
	char *iname, *vname;
};

/* One window of units, for dcr_reader_par_for. */
struct window {
	struct build *b;
	struct change *cs;
};

/* Whether chunk @k has the same hash in A and B (then its bytes, at the
 * same offsets in both files, are equal). 0 or -errno. */
static int chunk_eq(struct build *b, uint64_t k, bool *eq)
{
	uint8_t ha[DCR_HASH_LEN], hb[DCR_HASH_LEN];
	uint32_t ca = 0, cb = 0;
	int ret = dcr_reader_chunk_hash(b->r, b->a.v, b->a.tree, b->ia, k, ha, &ca);

	if (!ret)
		ret = dcr_reader_chunk_hash(b->r, b->b.v, b->b.tree, b->ib, k, hb, &cb);
	*eq = false;
	if (ret == -ENOENT) /* past the end of one of the files */
		return 0;
	if (ret)
		return ret;
	*eq = ca == b->cs && cb == b->cs && !memcmp(ha, hb, DCR_HASH_LEN);
	return 0;
}

/*
 * The record of B's chunk @k made from A's same chunk (read/dvrec.h),
 * with a reference (dcr_dvrec_put_ref), or NULL.
 */
static const struct dcr_dvrec_chunk *chunk_rec(struct build *b, uint64_t k)
{
	const struct dcr_dvrec_key key = { b->b.v, b->b.tree, b->ib - 1, k };
	const struct dcr_dvrec_chunk *c;

	if (!b->rec || b->recs_gone || dcr_dvrec_get(b->rec, &key, &c))
		return NULL;
	if (c->base_v == b->a.v && c->base_tree == b->a.tree &&
	    c->base_file == b->ia - 1)
		return c;
	dcr_dvrec_put_ref(b->rec, c);
	return NULL;
}

/* Whether B's chunk @k has a record (chunk_rec). */
static bool chunk_has_rec(struct build *b, uint64_t k)
{
	const struct dcr_dvrec_chunk *c = chunk_rec(b, k);

	dcr_dvrec_put_ref(b->rec, c);
	return c != NULL;
}

/*
 * The run of chunks from file offset @s (< @end) that are all equal in
 * both versions, or all not: *@eq says which, *@e where it ends (<=
 * @end; a run of unequal chunks at most BLOCK bytes, ended before a
 * chunk with a record when @recs). 0 or -errno.
 */
static int chunk_run(struct build *b, uint64_t s, uint64_t end, bool recs,
		     bool *eq, uint64_t *e)
{
	const uint64_t cs = b->cs;
	uint64_t x = DCR_MIN(end, (s / cs + 1) * cs);
	int ret = chunk_eq(b, s / cs, eq);

	while (!ret && x < end && (*eq || x - s < BLOCK)) {
		bool q;

		ret = chunk_eq(b, x / cs, &q);
		if (ret || q != *eq || (!q && recs && chunk_has_rec(b, x / cs)))
			break;
		x = DCR_MIN(end, x + cs);
	}
	if (!*eq && x - s > BLOCK)
		x = s + BLOCK;
	*e = x;
	return ret;
}

/* Emit element @e (B's bytes at @p, @w wide) into @u's buffers, which
 * have room. */
static inline void emit(struct unit *u, unsigned iw, uint64_t e,
			const uint8_t *p, unsigned w)
{
	uint8_t le[8];

	dcr_put_le64(le, e);
	memcpy(u->oi.p + u->oi.n, le, iw);
	u->oi.n += iw;
	memcpy(u->ov.p + u->ov.n, p, w);
	u->ov.n += w;
	u->n++;
}

/*
 * Emit the changed elements of the 8-byte word at tensor byte @at whose
 * XOR of A and B is @d (non-zero), B's bytes at @pb, elements @w wide.
 * On little-endian machines the differing lanes are found from @d's low
 * set bits and written with fixed-size copies; elsewhere lane by lane.
 */
static inline int emit_word(struct unit *u, unsigned iw, uint64_t d,
			    uint64_t at, const uint8_t *pb, unsigned w)
{
	/* Room for the word's elements: 8 / w of them at most. */
	int ret = obuf_room(&u->oi, 64);

	if (!ret)
		ret = obuf_room(&u->ov, 8);
	if (ret)
		return ret;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	const uint64_t mask = w >= 8 ? UINT64_MAX : (UINT64_C(1) << (8 * w)) - 1;
	struct obuf *si = &u->oi, *sv = &u->ov;

	while (d) {
		const unsigned l = (unsigned)__builtin_ctzll(d) / 8 / w * w;
		const uint64_t e = (at + l) / w;

		if (iw == 4) {
			const uint32_t e32 = (uint32_t)e;

			memcpy(si->p + si->n, &e32, 4);
		} else {
			memcpy(si->p + si->n, &e, 8);
		}
		si->n += iw;
		switch (w) {
		case 1: sv->p[sv->n] = pb[l]; break;
		case 2: memcpy(sv->p + sv->n, pb + l, 2); break;
		case 4: memcpy(sv->p + sv->n, pb + l, 4); break;
		default: memcpy(sv->p + sv->n, pb + l, 8); break;
		}
		sv->n += w;
		u->n++;
		d = w >= 8 ? 0 : d & ~(mask << (8 * l));
	}
	return 0;
#else
	uint8_t x[8]; /* the XOR's bytes in memory order, any byte order */

	memcpy(x, &d, 8);
	for (unsigned l = 0; l < 8; l += w) {
		uint8_t m = 0;

		for (unsigned i = 0; i < w; i++)
			m |= x[l + i];
		if (m)
			emit(u, iw, (at + l) / w, pb + l, w);
	}
	return 0;
#endif
}

/* Take a pair of scratch blocks (A's, B's): NULL on ENOMEM. */
static uint8_t *scratch_get(struct build *b)
{
	uint8_t *p = NULL;

	pthread_mutex_lock(&b->lock);
	if (b->nscratch)
		p = b->scratch[--b->nscratch];
	pthread_mutex_unlock(&b->lock);
	return p ? p : malloc(2 * (size_t)BLOCK);
}

/* Give a pair back (there is room: one slot per unit of a window). */
static void scratch_put(struct build *b, uint8_t *p)
{
	pthread_mutex_lock(&b->lock);
	b->scratch[b->nscratch++] = p;
	pthread_mutex_unlock(&b->lock);
}

/* A record's entries before a chunk offset, for dcr_partition_point. */
struct entry_key {
	const struct dcr_dvrec_chunk *c;
	uint32_t off;
};

static bool entry_before(const void *arg, size_t i)
{
	const struct entry_key *k = arg;

	return (k->c->e[i] & DCR_REC_OFF_MASK) < k->off;
}

/*
 * Emit the changed elements of bytes [@pos, end of its chunk or u->end)
 * of tensor u->tb (at the same offset in A, element-aligned in the
 * file) from the record of the chunk @pos is in, if it has one that
 * lists them at the tensor's width (read/dvrec.h): 1 and *@n the bytes
 * covered; 0 when it has none (the caller compares them); -ENOMEM.
 * With u->count_only the elements are counted, not emitted.
 * The record lists exactly the elements whose bytes differ from A's
 * (the decoder's own changes, values from the proven chunk), so the
 * output is what compare_unit's comparison emits for the same bytes.
 */
static int rec_piece(struct build *b, struct unit *u, unsigned iw,
		     uint64_t pos, uint64_t *n)
{
	const struct dcr_tensor *tb = u->tb;
	const unsigned w = dcr_st_dtype_width(tb->dtype);
	const uint64_t k = (tb->off + pos) / b->cs, co = k * b->cs;
	const struct dcr_dvrec_chunk *c = chunk_rec(b, k);
	uint64_t f0 = tb->off + pos, f1, m = 0;
	size_t first = SIZE_MAX, vo = 0, vfirst = 0;
	int ret = 0;

	if (!c)
		return 0;
	f1 = DCR_MIN(tb->off + u->end, co + c->clen);
	if (c->w == w) {
		/* Every entry one element at the tensor's width on its grid
		 * (the tensor, its units and the chunk start on it): those in
		 * [f0, f1) are a run found by two binary searches. */
		const struct entry_key lo = { c, (uint32_t)(f0 - co) };
		const struct entry_key hi = { c, (uint32_t)(f1 - co) };

		first = dcr_partition_point(c->n, entry_before, &lo);
		m = dcr_partition_point(c->n, entry_before, &hi) - first;
		vfirst = first * w; /* the values before it, all w wide */
		goto found;
	}
	/* The entries in [f0, f1): each one element of the tensor. */
	for (size_t i = 0; i < c->n; i++) {
		const uint64_t f = co + (c->e[i] & DCR_REC_OFF_MASK);
		const unsigned cw = dcr_rec_width(c->e[i]);

		if (f + cw > f0 && f < f1) {
			if (cw != w || (f - tb->off) % w || f < f0 || f + w > f1)
				goto none; /* listed at another width */
			if (first == SIZE_MAX) {
				first = i;
				vfirst = vo;
			}
			m++;
		} else if (f >= f1) {
			break;
		}
		vo += cw;
	}
found:
	if (m && !u->count_only) {
		ret = obuf_room(&u->oi, (size_t)m * iw);
		if (!ret)
			ret = obuf_room(&u->ov, (size_t)m * w);
		if (ret)
			goto none;
	}
	if (m && !u->count_only) {
		/* The entries' element numbers (w is a power of two), then
		 * their values: contiguous in the record, one copy. */
		const uint64_t base = co - tb->off;
		const unsigned sh = (unsigned)__builtin_ctz(w);
		const uint32_t *e = c->e + first;
		uint8_t *pi = u->oi.p + u->oi.n;

		if (iw == 4)
			for (uint64_t j = 0; j < m; j++)
				dcr_put_le32(pi + 4 * j, (uint32_t)((base +
					(e[j] & DCR_REC_OFF_MASK)) >> sh));
		else
			for (uint64_t j = 0; j < m; j++)
				dcr_put_le64(pi + 8 * j,
					     (base + (e[j] & DCR_REC_OFF_MASK)) >> sh);
		u->oi.n += (size_t)m * iw;
		memcpy(u->ov.p + u->ov.n, c->val + vfirst, (size_t)m * w);
		u->ov.n += (size_t)m * w;
	}
	u->n += m;
	u->recorded += f1 - f0;
	*n = f1 - f0;
	dcr_dvrec_put_ref(b->rec, c);
	return 1;
none:
	dcr_dvrec_put_ref(b->rec, c);
	return ret;
}

/*
 * Compare bytes [u->pos, u->end) of tensor u->tb of B with u->ta of A
 * (same dtype and shape) into @u's buffers. Where the tensor lies at the
 * same offset in both files, runs of chunks whose hashes are equal in
 * both manifests are not read, and chunks with a record of their
 * changes (rec_piece) are not either. 0 or -errno; with u->count_only,
 * 1 as soon as bytes would have to be read (the caller starts the unit
 * again without it), else 0 with u->n counted and nothing emitted.
 */
static int compare_unit(struct build *b, struct unit *u, unsigned iw)
{
	const struct dcr_tensor *ta = u->ta, *tb = u->tb;
	const unsigned w = dcr_st_dtype_width(tb->dtype);
	const bool skip = b->cs && ta->off == tb->off;
	const bool recs = skip && b->rec && tb->off % w == 0;
	uint8_t *ba = NULL, *bb = NULL;
	int ret = 0;

	for (uint64_t pos = u->pos; pos < u->end && !ret;) {
		size_t n = (size_t)DCR_MIN((uint64_t)BLOCK, u->end - pos);
		size_t k = 0;
		bool eq = false;

		if (recs) {
			uint64_t got = 0;

			ret = rec_piece(b, u, iw, pos, &got);
			if (ret < 0)
				break;
			if (ret) {
				ret = 0;
				pos += got;
				continue;
			}
		}
		if (skip) {
			uint64_t e;

			ret = chunk_run(b, tb->off + pos, tb->off + u->end, recs,
					&eq, &e);
			if (ret)
				break;
			n = (size_t)(e - tb->off - pos);
			if (e < tb->off + u->end) {
				/* Keep pos a multiple of 8 (elements aligned);
				 * a few bytes past a chunk's end are read. */
				n &= ~(size_t)7;
				if (n == 0) {
					eq = false;
					n = (size_t)DCR_MIN((uint64_t)8,
							    u->end - pos);
				}
			}
		}
		if (eq) {
			u->skipped += n;
			pos += n;
			continue;
		}
		if (u->count_only) {
			ret = 1;
			break;
		}
		if (!ba) {
			ba = scratch_get(b);
			if (!ba) {
				ret = DCR_ERR(-ENOMEM);
				break;
			}
			bb = ba + BLOCK;
		}
		ret = read_exact(b->r, b->a, b->ia, ta->off + pos, ba, n);
		if (!ret)
			ret = read_exact(b->r, b->b, b->ib, tb->off + pos, bb, n);
		for (; !ret && k + 8 <= n; k += 8) {
			uint64_t x, y;

			memcpy(&x, ba + k, 8);
			memcpy(&y, bb + k, 8);
			if (x != y)
				ret = emit_word(u, iw, x ^ y, pos + k, bb + k, w);
		}
		for (; !ret && k < n; k += w) { /* a tail shorter than 8 bytes */
			if (!memcmp(ba + k, bb + k, w))
				continue;
			ret = obuf_room(&u->oi, 8);
			if (!ret)
				ret = obuf_room(&u->ov, 8);
			if (!ret)
				emit(u, iw, (pos + k) / w, bb + k, w);
		}
		u->compared += n;
		pos += n;
	}
	if (ba)
		scratch_put(b, ba);
	return ret;
}

/* Tensor bytes of a unit: a multiple of BLOCK, so of every dtype's
 * width. */
#define UNIT (2 * (uint64_t)BLOCK)

static uint64_t unit_bytes(void)
{
#ifdef DCR_TEST_HOOKS
	/* Test hook (HACKING): DCRFS_TEST_DVIEW_UNIT=N cuts units of N
	 * bytes (a multiple of 8), so that small files have many. */
	const char *e = getenv("DCRFS_TEST_DVIEW_UNIT");

	if (e) {
		unsigned long long n = strtoull(e, NULL, 10);

		if (n >= 8 && n % 8 == 0)
			return n;
	}
#endif
	return UNIT;
}

/* The window's units and the scratch blocks' slots. 0 or -ENOMEM. */
static int units_init(struct build *b)
{
	b->win = 2 * (size_t)dcr_reader_threads(b->r) + 2;
	b->u = calloc(b->win, sizeof(*b->u));
	b->scratch = calloc(b->win, sizeof(*b->scratch));
	return b->u && b->scratch ? 0 : DCR_ERR(-ENOMEM);
}

static void units_free(struct build *b)
{
	for (size_t i = 0; b->u && i < b->win; i++) {
		free(b->u[i].oi.p);
		free(b->u[i].ov.p);
	}
	free(b->u);
	b->u = NULL;
	while (b->nscratch)
		free(b->scratch[--b->nscratch]);
	free(b->scratch);
	b->scratch = NULL;
	free(b->pl);
	b->pl = NULL;
}

/* Set @x to work on place @p of change @ch, from the start; its
 * buffers stay (memory faulted in once, not per unit). */
static void unit_set(struct unit *x, const struct change *ch, struct place *p)
{
	struct obuf oi = { x->oi.p, 0, x->oi.cap, false };
	struct obuf ov = { x->ov.p, 0, x->ov.cap, false };

	memset(x, 0, sizeof(*x));
	x->oi = oi;
	x->ov = ov;
	x->ta = ch->ta;
	x->tb = ch->t;
	x->pl = p;
	x->pos = p->pos;
	x->end = p->end;
}

/*
 * Cut the changed-candidate tensors @cs[0..nc) into units (b->pl, in
 * order: tensor, then offset); a unit's bounds are multiples of
 * unit_bytes() into its tensor. 0 or -ENOMEM.
 */
static int places_cut(struct build *b, struct change *cs, size_t nc)
{
	const uint64_t ub = unit_bytes();
	size_t n = 0;

	for (size_t k = 0; k < nc; k++)
		n += (size_t)((cs[k].t->len + ub - 1) / ub);
	b->pl = calloc(n ? n : 1, sizeof(*b->pl));
	if (!b->pl)
		return DCR_ERR(-ENOMEM);
	for (size_t k = 0; k < nc; k++) {
		const unsigned w = dcr_st_dtype_width(cs[k].t->dtype);

		cs[k].n = 0;
		cs[k].vw = w;
		cs[k].iw = dcr_dview_idx_width(cs[k].t->len / w);
		cs[k].p0 = b->npl;
		for (uint64_t pos = 0; pos < cs[k].t->len; pos += ub) {
			struct place *p = &b->pl[b->npl++];

			p->c = k;
			p->pos = pos;
			p->end = DCR_MIN(cs[k].t->len, pos + ub);
			p->soff = NO_SCRATCH;
		}
		cs[k].np = b->npl - cs[k].p0;
	}
	return 0;
}

/* Hash unit @u's indices and values into its place's production hashes
 * and write them to the scratch file at @off (one writer of it at a
 * time: b->wlock). 0 or -errno. */
static int unit_put(struct build *b, struct unit *u, uint64_t off)
{
	int ret;

	dcr_xxh128(u->oi.p, u->oi.n, u->pl->ih);
	dcr_xxh128(u->ov.p, u->ov.n, u->pl->vh);
	pthread_mutex_lock(&b->wlock);
	ret = dcr_pwrite_full(b->sfd, u->oi.p, u->oi.n, (off_t)off);
	if (!ret)
		ret = dcr_pwrite_full(b->sfd, u->ov.p, u->ov.n,
				      (off_t)(off + u->oi.n));
	pthread_mutex_unlock(&b->wlock);
	return ret;
}

/* Keep @u's pieces (its indices, then its values) in the scratch file
 * at bytes taken for them, hashed as produced. 0 or -errno. */
static int unit_keep(struct build *b, struct unit *u)
{
	struct place *p = u->pl;
	const uint64_t off = __atomic_fetch_add(&b->spos,
						(uint64_t)(u->oi.n + u->ov.n),
						__ATOMIC_RELAXED);
	int ret = unit_put(b, u, off);

	if (!ret)
		p->soff = off;
	return ret;
}

/* Pass 1's dcr_reader_par_for body: count unit @i of the window's
 * elements from the records and equal chunks; where bytes must be
 * compared, compare them and keep the pieces (unit_keep). */
static void count_run(void *arg, size_t i)
{
	struct window *wn = arg;
	struct build *b = wn->b;
	struct unit *u = &b->u[i];
	const struct change *ch = &wn->cs[u->pl->c];
	int ret;

	u->count_only = true;
	ret = compare_unit(b, u, ch->iw);
	if (ret == 1) {
		unit_set(u, ch, u->pl);
		ret = compare_unit(b, u, ch->iw);
		if (!ret && u->n)
			ret = unit_keep(b, u);
	}
	u->rc = ret;
}

/*
 * Pass 1: every unit of the changed-candidate tensors @cs[0..nc) (B's
 * and A's, same dtype and shape), a window at a time on the reader's
 * threads (dcr_reader_par_for): its changed elements counted (into its
 * place and its tensor's count), and the pieces of a unit whose bytes
 * were compared kept in the scratch file. No byte of the view is
 * handled on one thread. 0 or -errno.
 */
static int compare_all(struct build *b, struct change *cs, size_t nc)
{
	struct window wn = { .b = b, .cs = cs };
	int ret = places_cut(b, cs, nc);

	for (size_t p0 = 0; !ret && p0 < b->npl; p0 += b->win) {
		const size_t nu = DCR_MIN(b->win, b->npl - p0);

		for (size_t i = 0; i < nu; i++)
			unit_set(&b->u[i], &cs[b->pl[p0 + i].c], &b->pl[p0 + i]);
		dcr_reader_par_for(b->r, nu, count_run, &wn);
		for (size_t i = 0; i < nu; i++) {
			struct unit *x = &b->u[i];
			struct change *ch = &cs[x->pl->c];

			if (!ret)
				ret = x->rc;
			x->pl->n = x->n;
			x->pl->first = ch->n;
			ch->n += x->n;
			b->info->skipped += x->skipped;
			b->info->compared += x->compared;
			b->info->recorded += x->recorded;
		}
	}
	return ret;
}

/* Pass 2's dcr_reader_par_for body: store unit @i of the window's
 * pieces at their offsets in the output's mapping: read from the
 * scratch file, or made again from the records (and equal chunks),
 * hashed and copied. */
static void write_run(void *arg, size_t i)
{
	struct window *wn = arg;
	struct build *b = wn->b;
	struct unit *u = &b->u[i];
	struct place *p = u->pl;
	const struct change *ch = &wn->cs[p->c];
	const uint64_t oi = ch->out_i + p->first * ch->iw;
	const uint64_t ov = ch->out_v + p->first * ch->vw;
	const uint64_t ni = p->n * ch->iw, nv = p->n * ch->vw;
	int ret = dcr_dview_out_ready(b->out_fd, b->map, oi, ni);

	if (!ret)
		ret = dcr_dview_out_ready(b->out_fd, b->map, ov, nv);
	if (!ret && p->soff != NO_SCRATCH) {
		ret = dcr_pread_full(b->sfd, b->map + oi, (size_t)ni,
				     (off_t)p->soff);
		if (!ret)
			ret = dcr_pread_full(b->sfd, b->map + ov, (size_t)nv,
					     (off_t)(p->soff + ni));
		u->rc = ret == -ENODATA ? DCR_ERR(-EIO) : ret;
		return;
	}
	if (!ret) {
		/* Made again from the records straight into its places in
		 * the output (the unit's own buffers stay for the next). */
		const struct obuf bi = u->oi, bv = u->ov;

		u->oi = (struct obuf){ b->map + oi, 0, (size_t)ni, true };
		u->ov = (struct obuf){ b->map + ov, 0, (size_t)nv, true };
		ret = compare_unit(b, u, ch->iw);
		if (!ret && (u->oi.n != ni || u->ov.n != nv))
			ret = -EAGAIN;
		u->oi = bi;
		u->ov = bv;
	}
	if (ret == -EAGAIN) {
		/* A record gone since pass 1 (a newer version's took its
		 * room): the unit compared in its own buffers, then copied. */
		unit_set(u, ch, p);
		ret = compare_unit(b, u, ch->iw);
		if (!ret && u->n == p->n) {
			memcpy(b->map + oi, u->oi.p, u->oi.n);
			memcpy(b->map + ov, u->ov.p, u->ov.n);
		}
	}
	if (!ret && u->n != p->n) {
		/* Never: records are immutable, and without one the same
		 * elements come from the comparison. */
		dcr_err("delta view v%" PRIu64 "..v%" PRIu64 ": %s: bytes %"
			PRIu64 "-%" PRIu64 " gave %" PRIu64 " changed elements, "
			"counted %" PRIu64 " (EIO)", b->a.v, b->b.v, ch->t->name,
			p->pos, p->end, u->n, p->n);
		ret = DCR_ERR(-EIO);
	}
	if (!ret) {
		/* hashed where they were made, in the output's pages */
		dcr_xxh128(b->map + oi, (size_t)ni, p->ih);
		dcr_xxh128(b->map + ov, (size_t)nv, p->vh);
	}
	u->rc = ret;
}

/* Pass 2: every unit with changes writes its pieces into the output at
 * the offsets the header gives (struct change's out_i, out_v), a
 * window at a time on the reader's threads. 0 or -errno. */
static int write_all(struct build *b, struct change *cs)
{
	struct window wn = { .b = b, .cs = cs };
	size_t i = 0;
	int ret = 0;

#ifdef DCR_TEST_HOOKS
	/* Test hook (HACKING): DCRFS_TEST_DVIEW_RECS_GONE=1 makes pass 2
	 * find no record, as when a newer version's records took their
	 * room after pass 1 counted from them. */
	b->recs_gone = getenv("DCRFS_TEST_DVIEW_RECS_GONE") != NULL;
#endif
	while (!ret && i < b->npl) {
		size_t nu = 0;

		for (; i < b->npl && nu < b->win; i++)
			if (b->pl[i].n)
				unit_set(&b->u[nu++], &cs[b->pl[i].c], &b->pl[i]);
		if (nu)
			dcr_reader_par_for(b->r, nu, write_run, &wn);
		for (size_t k = 0; k < nu && !ret; k++)
			ret = b->u[k].rc;
	}
	return ret;
}

/* A compact JSON array of the @n strings @s (sorted by the caller). */
static char *json_list(const char *const *s, size_t n)
{
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	if (!f)
		return NULL;
	putc('[', f);
	for (size_t i = 0; i < n; i++) {
		if (i)
			putc(',', f);
		dcr_json_str(f, s[i]);
	}
	putc(']', f);
	if (fclose(f) || !out) {
		free(out);
		return NULL;
	}
	return out;
}

/* Growable list of names (borrowed pointers). */
struct names {
	const char **s;
	size_t n, cap;
};

static int names_add(struct names *l, const char *s)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;
		const char **p = realloc(l->s, cap * sizeof(*p));

		if (!p)
			return DCR_ERR(-ENOMEM);
		l->s = p;
		l->cap = cap;
	}
	l->s[l->n++] = s;
	return 0;
}

static bool same_layout(const struct dcr_tensor *x, const struct dcr_tensor *y)
{
	if (strcmp(x->dtype, y->dtype) || x->ndim != y->ndim)
		return false;
	for (unsigned d = 0; d < x->ndim; d++)
		if (x->shape[d] != y->shape[d])
			return false;
	return true;
}

static char *suffixed(const char *name, const char *suffix)
{
	size_t n = strlen(name), k = strlen(suffix);
	char *s = malloc(n + k + 1);

	if (s) {
		memcpy(s, name, n);
		memcpy(s + n, suffix, k + 1);
	}
	return s;
}

/*
 * Write the view to b->out_fd: the header of the tensors of @cs[0..nc)
 * with changes (their counts known after pass 1: compare_all), which
 * places every tensor's segments and so every unit's pieces; then pass
 * 2 (write_all); then read it back (dcr_dview_check). Fills info->size,
 * ->changed and ->tensors.
 */
static int assemble(struct build *b, struct change *cs, size_t nc,
		    const struct dcr_st_meta *meta, size_t nmeta)
{
	size_t nk = 0, npc = 0, ns = 0;
	struct dcr_st_tensor *st = NULL;
	uint64_t *shapes = NULL;
	size_t *order = NULL, *kept = NULL;
	struct dcr_dview_piece *sg = NULL;
	uint8_t hdr_hash[DCR_XXH_LEN];
	char *hdr = NULL;
	size_t hdr_len = 0;
	uint64_t pos = 0;
	int ret = 0;

	for (size_t c = 0; c < nc; c++)
		nk += cs[c].n != 0;
	for (size_t p = 0; p < b->npl; p++)
		npc += b->pl[p].n != 0;
	st = calloc(2 * nk + 1, sizeof(*st));
	shapes = calloc(2 * nk + 1, sizeof(*shapes));
	order = calloc(2 * nk + 1, sizeof(*order));
	kept = calloc(nk + 1, sizeof(*kept));
	sg = calloc(2 * npc + 1, sizeof(*sg));
	if (!st || !shapes || !order || !kept || !sg) {
		ret = DCR_ERR(-ENOMEM);
		goto err_free;
	}
	nk = 0;
	for (size_t i = 0; i < nc; i++) {
		struct change *c = &cs[i];

		if (!c->n)
			continue;
		c->iname = suffixed(c->t->name, ".idx");
		c->vname = suffixed(c->t->name, ".val");
		if (!c->iname || !c->vname) {
			ret = DCR_ERR(-ENOMEM);
			goto err_free;
		}
		b->info->changed += c->n;
		shapes[2 * nk] = shapes[2 * nk + 1] = c->n;
		st[2 * nk] = (struct dcr_st_tensor){
			.name = c->iname, .dtype = c->iw == 4 ? "I32" : "I64",
			.shape = &shapes[2 * nk], .ndim = 1,
			.len = c->n * c->iw };
		st[2 * nk + 1] = (struct dcr_st_tensor){
			.name = c->vname, .dtype = c->t->dtype,
			.shape = &shapes[2 * nk + 1], .ndim = 1,
			.len = c->n * c->vw };
		kept[nk++] = i;
	}
	b->info->tensors = nk;
	ret = dcr_safetensors_layout(st, 2 * nk, meta, nmeta, 0, &hdr,
				     &hdr_len, order);
	if (ret)
		goto err_free;
	/* Every segment's offset, then every piece's. */
	pos = hdr_len;
	for (size_t k = 0; k < 2 * nk; k++) {
		struct change *c = &cs[kept[order[k] / 2]];

		*(order[k] % 2 ? &c->out_v : &c->out_i) = pos;
		pos += st[order[k]].len;
	}
	dcr_xxh128(hdr, hdr_len, hdr_hash);
	sg[ns++] = (struct dcr_dview_piece){ 0, hdr_len, hdr_hash, "its header" };
	for (size_t k = 0; k < 2 * nk; k++) {
		const struct change *c = &cs[kept[order[k] / 2]];
		const bool is_idx = order[k] % 2 == 0;
		const unsigned w = is_idx ? c->iw : c->vw;

		for (size_t p = c->p0; p < c->p0 + c->np; p++) {
			const struct place *pl = &b->pl[p];

			if (!pl->n)
				continue;
			sg[ns++] = (struct dcr_dview_piece){
				(is_idx ? c->out_i : c->out_v) + pl->first * w,
				pl->n * w, is_idx ? pl->ih : pl->vh,
				is_idx ? c->iname : c->vname };
		}
	}
	ret = dcr_dview_out_map(b->out_fd, pos, &b->map);
	if (!ret)
		ret = dcr_dview_out_ready(b->out_fd, b->map, 0, hdr_len);
	if (ret) {
		dcr_err("delta view v%" PRIu64 "..v%" PRIu64 ": cannot make its "
			"file of %" PRIu64 " bytes: %s", b->a.v, b->b.v, pos,
			strerror(-ret));
		goto err_free;
	}
	memcpy(b->map, hdr, hdr_len);
	ret = write_all(b, cs);
	if (ret)
		goto err_free;
#ifdef DCR_TEST_HOOKS
	/* Test hook (HACKING): DCRFS_TEST_DVIEW_FLIP=1 changes the first
	 * byte of the first values' piece in the output after it was
	 * written, as local damage would, for the read-back check to find. */
	if (getenv("DCRFS_TEST_DVIEW_FLIP") && nk) {
		const off_t at = (off_t)cs[kept[0]].out_v;
		uint8_t x;

		if (dcr_pread_full(b->out_fd, &x, 1, at) == 0) {
			x ^= 1;
			(void)!dcr_pwrite_full(b->out_fd, &x, 1, at);
		}
	}
#endif
	ret = dcr_dview_check(b->r, b->a.v, b->b.v, b->map, sg, ns, pos,
			      b->sums);
	if (!ret)
		b->info->size = pos;
err_free:
	dcr_dview_out_unmap(b->map, pos);
	b->map = NULL;
	free(sg);
	free(hdr);
	free(kept);
	free(order);
	free(shapes);
	free(st);
	return ret;
}

/* Path, size, digest and chunk size of entry @idx of side @s; the path
 * strdup'ed. */
static int side_file(struct dcr_reader *r, struct dcr_dview_side s,
		     uint32_t idx, char **path, uint64_t *size,
		     struct dcr_file_meta *fm, uint32_t *cs)
{
	const struct dcr_version_info *vi;
	int ret = dcr_reader_version(r, s.v, &vi);

	if (ret)
		return ret;
	if (vi->tree != s.tree)
		ret = -ESTALE;
	else if (idx == 0 || idx >= vi->nentries)
		ret = -ENOENT;
	else if (vi->entries[idx].type != DCR_FT_REG)
		ret = -EISDIR;
	if (!ret) {
		*cs = vi->chunk_size;
		*size = vi->entries[idx].size;
		*path = strdup(vi->entries[idx].path);
		if (!*path)
			ret = DCR_ERR(-ENOMEM);
	}
	dcr_reader_version_put(r, vi);
	if (!ret)
		ret = dcr_reader_file_meta(r, s.v, s.tree, idx, fm);
	return ret;
}

/* Entry of @path in side @s (0 if absent). */
static int side_find(struct dcr_reader *r, struct dcr_dview_side s,
		     const char *path, uint32_t *idx)
{
	const struct dcr_version_info *vi;
	int ret = dcr_reader_version(r, s.v, &vi);

	if (ret)
		return ret;
	if (vi->tree != s.tree) {
		ret = -ESTALE;
	} else {
		*idx = dcr_version_lookup(vi, path);
		if (*idx && vi->entries[*idx].type != DCR_FT_REG)
			*idx = 0;
	}
	dcr_reader_version_put(r, vi);
	return ret;
}

int dcr_dview_coverage(struct dcr_reader *r, struct dcr_dview_side from,
		       struct dcr_dview_side to, uint32_t idx,
		       uint64_t *changed, uint64_t *recorded)
{
	struct build b = { .r = r, .a = from, .b = to, .ib = idx,
			   .rec = dcr_reader_dvrec(r) };
	struct dcr_file_meta mb, ma;
	uint64_t size_b, size_a, nk;
	uint32_t cs_a = 0, cs_b = 0;
	char *path = NULL, *path_a = NULL;
	int ret = side_file(r, to, idx, &path, &size_b, &mb, &cs_b);

	*changed = *recorded = 0;
	if (ret)
		goto out;
	nk = cs_b ? (size_b + cs_b - 1) / cs_b : 0;
	ret = side_find(r, from, path, &b.ia);
	if (!ret && b.ia)
		ret = side_file(r, from, b.ia, &path_a, &size_a, &ma, &cs_a);
	if (ret || !b.ia || cs_a != cs_b) {
		*changed = nk; /* no chunk of it is comparable by hash */
		goto out;
	}
	b.cs = cs_b;
	for (uint64_t k = 0; k < nk && !ret; k++) {
		bool eq;

		ret = chunk_eq(&b, k, &eq);
		if (!ret && !eq) {
			++*changed;
			*recorded += chunk_has_rec(&b, k);
		}
	}
out:
	free(path);
	free(path_a);
	return ret;
}

int dcr_dview_build(struct dcr_reader *r, struct dcr_dview_side from,
		    struct dcr_dview_side to, uint32_t idx, const char *tmpdir,
		    int out_fd, struct dcr_dview_info *info,
		    struct dcr_dview_sums *sums)
{
	struct build b = { .r = r, .a = from, .b = to, .ib = idx,
			   .sfd = -1, .out_fd = out_fd, .info = info,
			   .sums = sums, .rec = dcr_reader_dvrec(r) };
	struct stfile fa = { 0 }, fb = { 0 };
	struct dcr_file_meta ma = { 0 }, mb;
	struct names added = { 0 }, removed = { 0 }, reshaped = { 0 };
	struct change *cs = NULL;
	size_t nc = 0;
	char *path = NULL, *path_a = NULL;
	char *j_added = NULL, *j_removed = NULL, *j_reshaped = NULL;
	char hex_a[DCR_HASH_HEX_LEN + 1] = "", hex_b[DCR_HASH_HEX_LEN + 1];
	char sv_a[24], sv_b[24];
	struct dcr_st_meta meta[10];
	uint64_t size_b, size_a = 0;
	uint32_t cs_a = 0, cs_b = 0;
	bool a_ok = false, same;
	size_t i = 0, k = 0, na;
	int ret;

	memset(info, 0, sizeof(*info));
	memset(sums, 0, sizeof(*sums));
	if (from.v == to.v)
		return DCR_ERR(-EINVAL);
	ret = side_file(r, to, idx, &path, &size_b, &mb, &cs_b);
	if (ret)
		return ret;
	pthread_mutex_init(&b.lock, NULL);
	pthread_mutex_init(&b.wlock, NULL);
	ret = stfile_load(r, to, idx, path, size_b, &fb);
	if (ret)
		goto err_free;
	ret = side_find(r, from, path, &b.ia);
	if (ret)
		goto err_free;
	if (b.ia) {
		ret = side_file(r, from, b.ia, &path_a, &size_a, &ma, &cs_a);
		if (ret)
			goto err_free;
		dcr_hash_hex(ma.digest, hex_a);
		ret = stfile_load(r, from, b.ia, path_a, size_a, &fa);
		if (ret && ret != -EBADMSG)
			goto err_free;
		a_ok = ret == 0;
		ret = 0;
	}
	dcr_hash_hex(mb.digest, hex_b);
	b.cs = cs_a == cs_b ? cs_b : 0;

	cs = calloc(fb.ts.n ? fb.ts.n : 1, sizeof(*cs));
	if (!cs) {
		ret = DCR_ERR(-ENOMEM);
		goto err_free;
	}
	/* The same digest under the same definition: the same bytes. */
	same = a_ok && !memcmp(ma.digest, mb.digest, sizeof(mb.digest)) &&
	       !strcmp(dcr_file_digest_kind(ma.format),
		       dcr_file_digest_kind(mb.format));
	if (!same) {
		ret = scratch_open(tmpdir, &b.sfd);
		if (!ret)
			ret = units_init(&b);
		if (ret)
			goto err_free;
	}
	/* Merge the two name orders. */
	na = a_ok ? fa.ts.n : 0;
	while (i < na || k < fb.ts.n) {
		struct dcr_tensor *ta = i < na ? fa.by_name[i] : NULL;
		struct dcr_tensor *tb = k < fb.ts.n ? fb.by_name[k] : NULL;
		int c = !ta ? 1 : !tb ? -1 : strcmp(ta->name, tb->name);

		if (c < 0) {
			ret = names_add(&removed, ta->name);
			i++;
		} else if (c > 0) {
			ret = names_add(&added, tb->name);
			k++;
		} else {
			i++;
			k++;
			if (!same_layout(ta, tb)) {
				ret = names_add(&reshaped, tb->name);
			} else if (!same && tb->len) {
				cs[nc].t = tb; /* compared below */
				cs[nc++].ta = ta;
			}
		}
		if (ret)
			goto err_free;
	}
	if (!same) {
		ret = compare_all(&b, cs, nc);
		if (ret)
			goto err_free;
	}
	j_added = json_list(added.s, added.n);
	j_removed = json_list(removed.s, removed.n);
	j_reshaped = json_list(reshaped.s, reshaped.n);
	if (!j_added || !j_removed || !j_reshaped) {
		ret = DCR_ERR(-ENOMEM);
		goto err_free;
	}
	snprintf(sv_a, sizeof(sv_a), "%" PRIu64, from.v);
	snprintf(sv_b, sizeof(sv_b), "%" PRIu64, to.v);
	/* Sorted by key here already (the writer sorts them anyway). */
	meta[0] = (struct dcr_st_meta){ "added", j_added };
	meta[1] = (struct dcr_st_meta){ "digest_kind",
					dcr_file_digest_kind(mb.format) };
	meta[2] = (struct dcr_st_meta){ "format", DCR_DVIEW_FORMAT };
	meta[3] = (struct dcr_st_meta){ "format_version", DCR_DVIEW_FORMAT_VERSION };
	meta[4] = (struct dcr_st_meta){ "from_digest", hex_a };
	meta[5] = (struct dcr_st_meta){ "from_version", sv_a };
	meta[6] = (struct dcr_st_meta){ "removed", j_removed };
	meta[7] = (struct dcr_st_meta){ "reshaped", j_reshaped };
	meta[8] = (struct dcr_st_meta){ "to_digest", hex_b };
	meta[9] = (struct dcr_st_meta){ "to_version", sv_b };
	ret = assemble(&b, cs, nc, meta, DCR_ARRAY_SIZE(meta));
err_free:
	for (size_t c = 0; cs && c < nc; c++) {
		free(cs[c].iname);
		free(cs[c].vname);
	}
	free(cs);
	free(j_added);
	free(j_removed);
	free(j_reshaped);
	free(added.s);
	free(removed.s);
	free(reshaped.s);
	units_free(&b);
	if (b.sfd >= 0)
		close(b.sfd);
	stfile_free(&fa);
	stfile_free(&fb);
	free(path);
	free(path_a);
	pthread_mutex_destroy(&b.lock);
	pthread_mutex_destroy(&b.wlock);
	return ret;
}
