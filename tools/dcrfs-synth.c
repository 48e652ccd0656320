/* SPDX-License-Identifier: MIT */
/*
 * dcrfs-synth - generate realistic transformer checkpoints and the
 * optimizer steps between them, for tests, demos and benchmarks.
 *
 *   dcrfs-synth init --size S [--seed N] [--shards K] OUTDIR
 *   dcrfs-synth step --in DIR --out DIR [--mode adam|uniform] [--lr LR]
 *                    [--rate P] [--state FILE] [--seed N]
 *
 * init writes a Hugging Face style checkpoint directory: safetensors
 * weights of a Llama-like decoder (BF16 matrices, F32 norms) sized to
 * about S bytes, config.json and small tokenizer files. step reads one
 * such directory and writes the next optimizer step:
 *
 *   adam     fp32 master weights and Adam moments live in a state file
 *            outside the checkpoint (so dcrfs-commit never ships them);
 *            every element gets a N(0,1)-ish gradient, one Adam update,
 *            and is exported to BF16 with round-to-nearest-even. Only
 *            the elements whose master crossed a BF16 rounding boundary
 *            change, about 1-5 % at lr 1e-6..1e-5, as in RL post-training.
 *   uniform  exactly floor(P * n) elements of every tensor change, each
 *            by an XOR of 1..7 in the low mantissa bits.
 *
 * Everything is deterministic in (--seed, input, state) and independent
 * of the number of threads: random streams are seeded per block of
 * elements, never per thread.
 */
#include "config.h"

#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "fileio.h"
#include "hash.h"
#include "nonfinite.h"
#include "safetensors.h"
#include "stwriter.h"
#include "wq.h"

#define PROG "dcrfs-synth"
#define BLOCK_ELEMS ((uint64_t)1 << 16)   /* elements per random stream */
#define ST_HDR_LEN 64                     /* state file header bytes */
#define ST_MAGIC "DCRSYNST"
#define ST_FORMAT 1
#define MAX_JOBS 256

/* Adam hyper-parameters (the usual PyTorch defaults). */
#define ADAM_B1 0.9f
#define ADAM_B2 0.999f
#define ADAM_EPS 1e-8f

static int quiet;

static void msg(const char *fmt, ...) DCR_PRINTF(1, 2);
static void msg(const char *fmt, ...)
{
	va_list ap;

	if (quiet)
		return;
	va_start(ap, fmt);
	fputs(PROG ": ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static void die_msg(const char *fmt, ...) DCR_PRINTF(1, 2);
static void die_msg(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs(PROG ": error: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* ------------------------------------------------------------ random */

/* wyrand: one multiply per 64 random bits, passes BigCrush. */
static inline uint64_t rng_next(uint64_t *s)
{
	*s += 0xa0761d6478bd642fULL;
	__uint128_t t = (__uint128_t)*s * (*s ^ 0xe7037ed1a0b428dbULL);
	return (uint64_t)(t >> 64) ^ (uint64_t)t;
}

static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ULL;
	return h;
}

/* Seed of the random stream of block @blk of a tensor, for one purpose. */
static uint64_t stream_seed(uint64_t seed, uint64_t step, uint64_t tensor,
			    uint64_t blk, uint64_t purpose)
{
	return mix64(mix64(mix64(mix64(seed ^ 0x5eed) + step) + tensor) +
		     blk * 4 + purpose);
}

/*
 * N(0,1)-ish: Irwin-Hall sum of four 16-bit uniforms from one 64-bit
 * draw, scaled to unit variance (tails end at +-3.46 sigma).
 */
static inline float rng_normal(uint64_t *s)
{
	uint64_t r = rng_next(s);
	uint32_t sum = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) +
		       (uint32_t)((r >> 32) & 0xffff) + (uint32_t)(r >> 48);

	return ((float)sum - 131070.0f) * (1.0f / 37837.23f);
}

/* Uniform in [0, n). */
static inline uint64_t rng_below(uint64_t *s, uint64_t n)
{
	return (uint64_t)(((__uint128_t)rng_next(s) * n) >> 64);
}

/* ------------------------------------------------------------ floats */

static inline uint32_t f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static inline float bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

/* Round-to-nearest-even fp32 -> bf16, as torch does. */
static inline uint16_t f32_to_bf16(float f)
{
	uint32_t u = f32_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet NaN */
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

static inline float bf16_to_f32(uint16_t h)
{
	return bits_f32((uint32_t)h << 16);
}

/* ------------------------------------------------------------ strings */

struct sbuf {
	char *p;
	size_t len, cap;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) DCR_PRINTF(2, 3);
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(b->p ? b->p + b->len : NULL,
			      b->p ? b->cap - b->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0)
			abort();
		if (b->p && b->len + (size_t)n < b->cap) {
			b->len += (size_t)n;
			return;
		}
		size_t ncap = b->cap ? b->cap * 2 : 4096;
		while (ncap < b->len + (size_t)n + 1)
			ncap *= 2;
		char *np = realloc(b->p, ncap);
		if (!np) {
			die_msg("out of memory");
			exit(1);
		}
		b->p = np;
		b->cap = ncap;
	}
}

static char *xstrdup(const char *s)
{
	char *d = strdup(s);

	if (!d) {
		die_msg("out of memory");
		exit(1);
	}
	return d;
}

static void *xcalloc(size_t n, size_t sz)
{
	void *p = calloc(n ? n : 1, sz);

	if (!p) {
		die_msg("out of memory");
		exit(1);
	}
	return p;
}

static char *path_join(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *p = xcalloc(la + lb + 2, 1);

	memcpy(p, a, la);
	p[la] = '/';
	memcpy(p + la + 1, b, lb);
	return p;
}

/* ------------------------------------------------------------ tensors */

struct tensor {
	char *name;
	char dtype[16];
	enum dcr_float_fmt fmt; /* core/nonfinite.h; DCR_FF_NONE: not a float */
	int ndim;
	uint64_t shape[DCR_ST_NDIM_MAX];
	uint64_t nelem;
	uint64_t off, end;   /* data_offsets, relative to the data section */
	uint64_t id;         /* fnv1a(name): names the random streams */
	/* init only */
	float mean, std;
	/* step only: first element of this tensor in the state file */
	uint64_t st_index;
};

struct stfile {
	char *name;          /* file name inside the checkpoint directory */
	struct tensor *t;
	size_t n, cap;
	uint64_t hdr_len;    /* JSON bytes (the 8-byte length excluded) */
	uint64_t data_len;
};

/* Bytes per element of the formats simulated (BF16, F16, F32); 0 else. */
static unsigned sim_width(const struct tensor *t)
{
	bool sim = t->fmt == DCR_FF_BF16 || t->fmt == DCR_FF_F16 ||
		   t->fmt == DCR_FF_F32;

	return sim ? dcr_float_width(t->fmt) : 0;
}

static struct tensor *stfile_add(struct stfile *f)
{
	if (f->n == f->cap) {
		f->cap = f->cap ? f->cap * 2 : 64;
		f->t = realloc(f->t, f->cap * sizeof(*f->t));
		if (!f->t) {
			die_msg("out of memory");
			exit(1);
		}
	}
	memset(&f->t[f->n], 0, sizeof(f->t[0]));
	return &f->t[f->n++];
}

static void stfile_free(struct stfile *f)
{
	for (size_t i = 0; i < f->n; i++)
		free(f->t[i].name);
	free(f->t);
	free(f->name);
	memset(f, 0, sizeof(*f));
}

/* ------------------------------------------------------------ parse */

/*
 * The tensors of the safetensors file @p[0..len) into @f (sorted by
 * offset), through core's parser; what the simulation needs of them
 * must hold too: every shape known, BF16/F16/F32 lengths matching their
 * shapes, no two tensors overlapping.
 */
static int st_parse(const uint8_t *p, uint64_t len, struct stfile *f)
{
	struct dcr_tensors ts;
	int e = dcr_safetensors_tensors(p, len, len, &ts);

	if (e)
		return e;
	uint64_t data0 = 8 + dcr_get_le64(p); /* checked by the parser */
	for (size_t i = 0; i < ts.n && !e; i++) {
		const struct dcr_tensor *x = &ts.t[i];
		struct tensor *t = stfile_add(f);

		t->name = xstrdup(x->name);
		t->id = fnv1a(x->name);
		memcpy(t->dtype, x->dtype, sizeof(t->dtype));
		t->fmt = (enum dcr_float_fmt)x->fmt;
		t->off = x->off - data0;
		t->end = t->off + x->len;
		if (x->ndim == DCR_ST_NDIM_UNKNOWN) {
			e = -EBADMSG;
			break;
		}
		t->ndim = x->ndim;
		memcpy(t->shape, x->shape, sizeof(t->shape));
		t->nelem = 1;
		for (int d = 0; d < t->ndim; d++)
			if (__builtin_mul_overflow(t->nelem, t->shape[d], &t->nelem))
				e = -EBADMSG;
		if (sim_width(t) && t->nelem * sim_width(t) != x->len)
			e = -EBADMSG;
		if (i && t->off < f->t[i - 1].end)
			e = -EBADMSG; /* overlapping tensors */
	}
	dcr_tensors_free(&ts);
	f->hdr_len = data0 - 8;
	f->data_len = len - data0;
	return e;
}

/* ------------------------------------------------------------ files */

/* A file mapped for reading, or created at a fixed size for writing. */
struct map {
	int fd;
	uint8_t *p;
	uint64_t len;
};

static int map_read(const char *path, struct map *m)
{
	struct stat sb;

	m->p = NULL;
	m->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (m->fd < 0)
		return -errno;
	if (fstat(m->fd, &sb) < 0) {
		int e = -errno;
		close(m->fd);
		return e;
	}
	m->len = (uint64_t)sb.st_size;
	if (m->len) {
		m->p = mmap(NULL, m->len, PROT_READ, MAP_SHARED, m->fd, 0);
		if (m->p == MAP_FAILED) {
			int e = -errno;
			close(m->fd);
			return e;
		}
		madvise(m->p, m->len, MADV_SEQUENTIAL);
	}
	return 0;
}

/* Map an existing file read-write, shared (updated in place). */
static int map_rw(const char *path, struct map *m)
{
	struct stat sb;
	int e;

	m->p = NULL;
	m->fd = open(path, O_RDWR | O_CLOEXEC);
	if (m->fd < 0)
		return -errno;
	if (fstat(m->fd, &sb) < 0)
		goto err_close;
	m->len = (uint64_t)sb.st_size;
	if (m->len < ST_HDR_LEN) {
		errno = EBADMSG;
		goto err_close;
	}
	m->p = mmap(NULL, m->len, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
	if (m->p == MAP_FAILED)
		goto err_close;
	return 0;
err_close:
	e = -errno;
	close(m->fd);
	m->fd = -1;
	m->p = NULL;
	return e;
}

/* Create (truncate) @path at @len bytes, space reserved, mapped RW. */
static int map_create(const char *path, uint64_t len, struct map *m)
{
	int e;

	m->p = NULL;
	m->len = len;
	m->fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (m->fd < 0)
		return -errno;
	if (len) {
		/* reserve the blocks now: ENOSPC here, not SIGBUS later */
		e = posix_fallocate(m->fd, 0, (off_t)len);
		if (e == EOPNOTSUPP || e == EINVAL)
			e = ftruncate(m->fd, (off_t)len) ? errno : 0;
		if (e) {
			close(m->fd);
			return -e;
		}
		m->p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			    MAP_SHARED, m->fd, 0);
		if (m->p == MAP_FAILED) {
			e = -errno;
			close(m->fd);
			return e;
		}
	}
	return 0;
}

static int map_close(struct map *m)
{
	int e = 0;

	if (m->p && m->len)
		munmap(m->p, m->len);
	if (m->fd >= 0 && close(m->fd) < 0)
		e = -errno;
	m->fd = -1;
	m->p = NULL;
	return e;
}

static int write_file(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	const uint8_t *p = data;

	if (fd < 0)
		return -errno;
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			int e = -errno;
			close(fd);
			return e;
		}
		p += n;
		len -= (size_t)n;
	}
	if (close(fd) < 0)
		return -errno;
	return 0;
}

static int copy_file(const char *src, const char *dst, mode_t mode)
{
	int in = open(src, O_RDONLY | O_CLOEXEC), out, e = 0;
	static char buf[1 << 16];

	if (in < 0)
		return -errno;
	out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode & 07777);
	if (out < 0) {
		e = -errno;
		close(in);
		return e;
	}
	for (;;) {
		ssize_t n = read(in, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			e = -errno;
			break;
		}
		if (n == 0)
			break;
		for (ssize_t w = 0; w < n;) {
			ssize_t k = write(out, buf + w, (size_t)(n - w));
			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0) {
				e = -errno;
				goto done;
			}
			w += k;
		}
	}
done:
	close(in);
	if (close(out) < 0 && !e)
		e = -errno;
	return e;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int ncpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n < 1 ? 1 : n > MAX_JOBS ? MAX_JOBS : (int)n;
}

/* ------------------------------------------------------------ workers */

enum work_kind { W_INIT, W_ADAM, W_UNIFORM };

/*
 * One pass over the tensors of one file, split into blocks of
 * BLOCK_ELEMS elements that the workers claim in order.
 */
struct work {
	enum work_kind kind;
	const struct stfile *f;
	const uint8_t *in;      /* input data section (step) */
	uint8_t *out;           /* output data section */
	float *st;              /* adam: state, 3 floats per element, updated in place */
	bool st_valid;          /* adam: @st holds a previous step's state */
	int out_fd;             /* adam: output file, written with pwrite */
	uint64_t out_base;      /* adam: file offset of the data section */
	atomic_int err;         /* first write error (-errno) */
	uint64_t seed, step;
	float lr, rate;
	uint64_t *blk_first;    /* per tensor: index of its first block */
	uint64_t nblocks;
	atomic_uint_fast64_t next;
	/* statistics */
	atomic_uint_fast64_t n16, changed16, n32, changed32, resynced;
};

/* Per-thread scratch for one block of adam output. */
struct scratch {
	uint8_t out[4 * BLOCK_ELEMS];
};

static size_t find_tensor(const struct work *w, uint64_t blk)
{
	size_t lo = 0, hi = w->f->n;

	/* last tensor whose first block <= blk */
	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;
		if (w->blk_first[mid] <= blk)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

static void do_init_block(struct work *w, const struct tensor *t,
			  uint64_t b, uint64_t s, uint64_t e)
{
	uint64_t rs = stream_seed(w->seed, 0, t->id, b, 0);
	uint8_t *out = w->out + t->off;

	if (t->fmt == DCR_FF_BF16) {
		uint16_t *o = (uint16_t *)out;
		for (uint64_t i = s; i < e; i++)
			o[i] = f32_to_bf16(t->mean + t->std * rng_normal(&rs));
	} else {
		float *o = (float *)out;
		for (uint64_t i = s; i < e; i++)
			o[i] = t->mean + t->std * rng_normal(&rs);
	}
}

static void do_adam_block(struct work *w, struct scratch *sc,
			  const struct tensor *t, uint64_t b, uint64_t s,
			  uint64_t e)
{
	uint64_t gs = stream_seed(w->seed, w->step, t->id, b, 1);
	uint64_t ms = stream_seed(w->seed, w->step, t->id, b, 2);
	float *st = w->st + 3 * t->st_index;
	uint8_t *out = sc->out - (size_t)sim_width(t) * s;
	int err;
	const float lr = w->lr, b1 = ADAM_B1, b2 = ADAM_B2;
	/* stationary std of m for iid N(0,1) gradients: sqrt((1-b1)/(1+b1)) */
	const float m0 = 0.2294157f;
	uint64_t changed = 0, resynced = 0;

	for (uint64_t i = s; i < e; i++) {
		float x, m, v, in;
		uint32_t inbits, outbits;

		if (t->fmt == DCR_FF_BF16) {
			uint16_t h;
			memcpy(&h, w->in + t->off + 2 * i, 2);
			inbits = h;
			in = bf16_to_f32(h);
		} else {
			memcpy(&in, w->in + t->off + 4 * i, 4);
			inbits = f32_bits(in);
		}
		if (w->st_valid) {
			x = st[3 * i];
			m = st[3 * i + 1];
			v = st[3 * i + 2];
			uint32_t mb = t->fmt == DCR_FF_BF16 ? f32_to_bf16(x) : f32_bits(x);
			if (mb != inbits) {
				/* state and checkpoint disagree: trust the file */
				x = in;
				resynced++;
			}
		} else {
			/*
			 * Warm start at Adam's stationary point, the master
			 * somewhere inside the bf16 rounding cell of the value
			 * (as after training), not on the grid.
			 */
			x = in;
			m = m0 * rng_normal(&ms);
			v = 1.0f;
			if (t->fmt == DCR_FF_BF16 && (inbits & 0x7f80u) &&
			    (inbits & 0x7f80u) != 0x7f80u) {
				float ulp = bits_f32((inbits & 0x7f80u) << 16) *
					    (1.0f / 128.0f);
				float u = ((float)(rng_next(&ms) >> 40) + 0.5f) *
					  (1.0f / 16777216.0f) - 0.5f; /* (-.5,.5) */
				/* below a power of two the cell is half as wide */
				if ((inbits & 0x7fu) == 0 && (u < 0) == !(inbits & 0x8000u))
					u *= 0.5f;
				x = in + 0.999f * u * ulp;
			}
		}
		float g = rng_normal(&gs);
		m = b1 * m + (1.0f - b1) * g;
		v = b2 * v + (1.0f - b2) * g * g;
		x -= lr * m / (sqrtf(v) + ADAM_EPS);
		if (t->fmt == DCR_FF_BF16) {
			uint16_t h = f32_to_bf16(x);
			memcpy(out + 2 * i, &h, 2);
			outbits = h;
		} else {
			memcpy(out + 4 * i, &x, 4);
			outbits = f32_bits(x);
		}
		changed += outbits != inbits;
		st[3 * i] = x;
		st[3 * i + 1] = m;
		st[3 * i + 2] = v;
	}
	err = dcr_pwrite_full(w->out_fd, sc->out, (size_t)(e - s) * sim_width(t),
			 w->out_base + t->off + sim_width(t) * s);
	if (err) {
		int zero = 0;
		atomic_compare_exchange_strong(&w->err, &zero, err);
	}
	if (t->fmt == DCR_FF_BF16)
		atomic_fetch_add(&w->changed16, changed);
	else
		atomic_fetch_add(&w->changed32, changed);
	if (resynced)
		atomic_fetch_add(&w->resynced, resynced);
}

static void do_uniform_block(struct work *w, const struct tensor *t,
			     uint64_t b, uint64_t s, uint64_t e)
{
	uint64_t rs = stream_seed(w->seed, w->step, t->id, b, 3);
	unsigned width = sim_width(t);
	/* exactly floor(p*n) per tensor: block quotas telescope */
	uint64_t q = (uint64_t)floor((double)w->rate * (double)e) -
		     (uint64_t)floor((double)w->rate * (double)s);
	uint8_t *out = w->out + t->off;
	uint64_t changed = q;

	for (uint64_t i = s; i < e && q; i++) {
		if (rng_below(&rs, e - i) >= q)
			continue;
		q--;
		/* flip 1..7 in the low mantissa bits (little-endian) */
		out[(size_t)width * i] ^= (uint8_t)(1 + rng_below(&rs, 7));
	}
	if (t->fmt == DCR_FF_BF16)
		atomic_fetch_add(&w->changed16, changed);
	else
		atomic_fetch_add(&w->changed32, changed);
}

/* One worker's share of @w's blocks (a dcr_wq_par_for loop of one
 * iteration per worker; each takes blocks until none is left). */
static void worker(void *arg, size_t unused)
{
	struct work *w = arg;
	struct scratch *sc = NULL;

	(void)unused;

	if (w->kind == W_ADAM) {
		sc = malloc(sizeof(*sc));
		if (!sc) {
			int zero = 0;
			atomic_compare_exchange_strong(&w->err, &zero, -ENOMEM);
			return;
		}
	}
	for (;;) {
		uint64_t blk = atomic_fetch_add(&w->next, 1);
		if (blk >= w->nblocks)
			break;
		size_t ti = find_tensor(w, blk);
		const struct tensor *t = &w->f->t[ti];
		uint64_t b = blk - w->blk_first[ti];
		uint64_t s = b * BLOCK_ELEMS;
		uint64_t e = DCR_MIN(t->nelem, s + BLOCK_ELEMS);

		switch (w->kind) {
		case W_INIT:
			do_init_block(w, t, b, s, e);
			break;
		case W_ADAM:
			do_adam_block(w, sc, t, b, s, e);
			break;
		case W_UNIFORM:
			do_uniform_block(w, t, b, s, e);
			break;
		}
	}
	free(sc);
}

/* Is tensor @t processed by @kind? (others are copied unchanged) */
static bool handled(enum work_kind kind, const struct tensor *t)
{
	if (t->nelem == 0)
		return false;
	if (kind == W_UNIFORM)
		return sim_width(t) != 0;
	return t->fmt == DCR_FF_BF16 || t->fmt == DCR_FF_F32;
}

static int run_work(struct work *w, int jobs)
{
	w->blk_first = xcalloc(w->f->n + 1, sizeof(uint64_t));
	w->nblocks = 0;
	for (size_t i = 0; i < w->f->n; i++) {
		const struct tensor *t = &w->f->t[i];
		w->blk_first[i] = w->nblocks;
		if (handled(w->kind, t)) {
			w->nblocks += DCR_DIV_ROUND_UP(t->nelem, BLOCK_ELEMS);
			if (t->fmt == DCR_FF_BF16)
				atomic_fetch_add(&w->n16, t->nelem);
			else
				atomic_fetch_add(&w->n32, t->nelem);
		}
	}
	w->blk_first[w->f->n] = w->nblocks;
	atomic_store(&w->next, 0);
	/* the calling thread works too; with no queue (jobs == 1, or none
	 * could be made) it does all */
	struct dcr_wq *q = NULL;
	struct dcr_wq_opts o = { .name = "synth", .threads = jobs - 1, .max_items = 1 };
	if (jobs > 1 && w->nblocks > 1 && dcr_wq_create(&o, &q))
		q = NULL;
	dcr_wq_par_for(q, jobs, q ? (size_t)jobs : 1, worker, w);
	dcr_wq_free(q);
	free(w->blk_first);
	w->blk_first = NULL;
	return atomic_load(&w->err);
}

/* ------------------------------------------------------------ init */

struct arch {
	uint64_t h, inter, layers, vocab, heads, kv_heads, head_dim;
};

static uint64_t round_up(uint64_t x, uint64_t m)
{
	return (x + m - 1) / m * m;
}

static void arch_from_hidden(struct arch *a, uint64_t h)
{
	a->h = h;
	a->head_dim = h <= 64 ? h : h < 2048 ? 64 : 128;
	a->heads = h / a->head_dim;
	a->kv_heads = a->heads >= 8 ? a->heads / 4 : a->heads;
	a->inter = round_up(8 * h / 3, h >= 64 ? 64 : 16);
}

static uint64_t arch_layer_bytes(const struct arch *a)
{
	uint64_t kv = a->kv_heads * a->head_dim;

	return 2 * (2 * a->h * a->h + 2 * kv * a->h + 3 * a->inter * a->h) +
	       4 * 2 * a->h /* F32 norms */ + 10 * 170 /* header */;
}

static uint64_t arch_fixed_bytes(const struct arch *a)
{
	return 2 * 2 * a->vocab * a->h + 4 * a->h + 3 * 170 + 64;
}

static uint64_t arch_bytes(const struct arch *a)
{
	return arch_fixed_bytes(a) + a->layers * arch_layer_bytes(a);
}

/* Pick a Llama-like shape of about @target bytes. */
static void arch_for_size(uint64_t target, struct arch *a)
{
	static const uint64_t hs[] = {
		16, 32, 48, 64, 128, 192, 256, 384, 512, 768, 1024, 1536,
		2048, 3072, 4096, 5120, 6144, 8192, 12288, 16384,
	};
	uint64_t l0;

	arch_from_hidden(a, hs[0]);
	for (size_t i = 0; i < DCR_ARRAY_SIZE(hs); i++) {
		struct arch c;
		arch_from_hidden(&c, hs[i]);
		c.layers = DCR_MAX(hs[i] / 128, 1);
		c.vocab = DCR_MIN(DCR_MAX(hs[i] * 8, 64), 32000);
		if (i > 0 && arch_bytes(&c) > target)
			break;
		*a = c;
	}
	/* fill with layers (at most 4x the natural depth), then vocabulary */
	l0 = a->layers;
	if (arch_fixed_bytes(a) < target)
		a->layers = (target - arch_fixed_bytes(a)) / arch_layer_bytes(a);
	a->layers = DCR_MIN(DCR_MAX(a->layers, 1), 4 * l0);
	uint64_t rest = a->layers * arch_layer_bytes(a) + 4 * a->h + 3 * 170 + 64;
	uint64_t v = rest < target ? (target - rest) / (4 * a->h) : 0;
	uint64_t q = v >= 256 ? 64 : 8;
	a->vocab = DCR_MAX(v / q * q, 16);
}

static void add_tensor(struct stfile *f, const char *name,
		       enum dcr_float_fmt fmt, uint64_t d0, uint64_t d1,
		       float mean, float std)
{
	struct tensor *t = stfile_add(f);

	t->name = xstrdup(name);
	t->id = fnv1a(name);
	t->fmt = fmt;
	snprintf(t->dtype, sizeof(t->dtype), "%s",
		 fmt == DCR_FF_BF16 ? "BF16" : "F32");
	t->ndim = d1 ? 2 : 1;
	t->shape[0] = d0;
	t->shape[1] = d1;
	t->nelem = d1 ? d0 * d1 : d0;
	t->mean = mean;
	t->std = std;
}

/* All tensors of the model, in the order a Llama checkpoint holds them. */
static void model_tensors(const struct arch *a, struct stfile *all)
{
	char name[256];
	uint64_t h = a->h, kv = a->kv_heads * a->head_dim;
	float std = 0.02f, ostd = 0.02f / sqrtf(2.0f * (float)a->layers);

	add_tensor(all, "model.embed_tokens.weight", DCR_FF_BF16, a->vocab, h, 0, std);
	for (uint64_t l = 0; l < a->layers; l++) {
#define LAYER(n, dt, d0, d1, mu, sd)                                          \
	do {                                                                  \
		snprintf(name, sizeof(name), "model.layers.%" PRIu64 ".%s",   \
			 l, n);                                               \
		add_tensor(all, name, dt, d0, d1, mu, sd);                    \
	} while (0)
		LAYER("input_layernorm.weight", DCR_FF_F32, h, 0, 1.0f, 0.05f);
		LAYER("self_attn.q_proj.weight", DCR_FF_BF16, h, h, 0, std);
		LAYER("self_attn.k_proj.weight", DCR_FF_BF16, kv, h, 0, std);
		LAYER("self_attn.v_proj.weight", DCR_FF_BF16, kv, h, 0, std);
		LAYER("self_attn.o_proj.weight", DCR_FF_BF16, h, h, 0, ostd);
		LAYER("post_attention_layernorm.weight", DCR_FF_F32, h, 0, 1.0f, 0.05f);
		LAYER("mlp.gate_proj.weight", DCR_FF_BF16, a->inter, h, 0, std);
		LAYER("mlp.up_proj.weight", DCR_FF_BF16, a->inter, h, 0, std);
		LAYER("mlp.down_proj.weight", DCR_FF_BF16, h, a->inter, 0, ostd);
#undef LAYER
	}
	add_tensor(all, "model.norm.weight", DCR_FF_F32, h, 0, 1.0f, 0.05f);
	add_tensor(all, "lm_head.weight", DCR_FF_BF16, a->vocab, h, 0, std);
}

/*
 * The header of @f (8-byte length, JSON, padding) into *@hdr (malloc'ed),
 * laid out by core's writer with the tensors in @f's order; their data
 * offsets are assigned here. 0 or -errno (logged).
 */
static int st_header(struct stfile *f, char **hdr)
{
	struct dcr_st_tensor *ts = xcalloc(f->n ? f->n : 1, sizeof(*ts));
	size_t *order = xcalloc(f->n ? f->n : 1, sizeof(*order));
	const struct dcr_st_meta meta = { "format", "pt" };
	uint64_t off = 0;
	size_t len;

	for (size_t i = 0; i < f->n; i++) {
		struct tensor *t = &f->t[i];
		t->off = off;
		t->end = off + t->nelem * sim_width(t);
		off = t->end;
		ts[i] = (struct dcr_st_tensor){ t->name, t->dtype, t->shape,
						(size_t)t->ndim, NULL,
						t->end - t->off };
	}
	int e = dcr_safetensors_layout(ts, f->n, &meta, 1, DCR_ST_GIVEN_ORDER,
				       hdr, &len, order);
	free(order);
	free(ts);
	if (e)
		return e;
	f->hdr_len = len - 8;
	f->data_len = off;
	return 0;
}

static int write_safetensors(const char *path, struct stfile *f, uint64_t seed,
			     int jobs)
{
	char *hdr;
	struct map m;
	struct work w;
	int e;

	if ((e = st_header(f, &hdr))) {
		die_msg("%s: cannot lay out its header: %s", path, strerror(-e));
		return e;
	}
	e = map_create(path, 8 + f->hdr_len + f->data_len, &m);
	if (e) {
		free(hdr);
		die_msg("%s: %s", path, strerror(-e));
		return e;
	}
	memcpy(m.p, hdr, 8 + f->hdr_len);
	free(hdr);
	memset(&w, 0, sizeof(w));
	w.kind = W_INIT;
	w.f = f;
	w.out = m.p + 8 + f->hdr_len;
	w.seed = seed;
	run_work(&w, jobs);
	e = map_close(&m);
	if (e)
		die_msg("%s: %s", path, strerror(-e));
	return e;
}

static void json_config(struct sbuf *sb, const struct arch *a, uint64_t seed)
{
	sb_printf(sb,
		  "{\n"
		  "  \"architectures\": [\"LlamaForCausalLM\"],\n"
		  "  \"model_type\": \"llama\",\n"
		  "  \"hidden_size\": %" PRIu64 ",\n"
		  "  \"intermediate_size\": %" PRIu64 ",\n"
		  "  \"num_hidden_layers\": %" PRIu64 ",\n"
		  "  \"num_attention_heads\": %" PRIu64 ",\n"
		  "  \"num_key_value_heads\": %" PRIu64 ",\n"
		  "  \"head_dim\": %" PRIu64 ",\n"
		  "  \"vocab_size\": %" PRIu64 ",\n"
		  "  \"hidden_act\": \"silu\",\n"
		  "  \"max_position_embeddings\": 4096,\n"
		  "  \"rms_norm_eps\": 1e-05,\n"
		  "  \"rope_theta\": 10000.0,\n"
		  "  \"tie_word_embeddings\": false,\n"
		  "  \"bos_token_id\": 1,\n"
		  "  \"eos_token_id\": 2,\n"
		  "  \"torch_dtype\": \"bfloat16\",\n"
		  "  \"dcrfs_synth_seed\": %" PRIu64 "\n"
		  "}\n",
		  a->h, a->inter, a->layers, a->heads, a->kv_heads, a->head_dim,
		  a->vocab, seed);
}

/* A small BPE-looking tokenizer.json: specials, byte tokens, syllables. */
static void json_tokenizer(struct sbuf *sb, const struct arch *a)
{
	static const char cons[] = "bcdfghjklmnprstvwz";
	static const char vow[] = "aeiou";
	uint64_t n = DCR_MIN(a->vocab, 1024), id = 0;

	sb_printf(sb, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n"
		  "  \"padding\": null,\n  \"added_tokens\": [\n");
	static const char *sp[] = { "<unk>", "<s>", "</s>" };
	for (int i = 0; i < 3; i++)
		sb_printf(sb, "    {\"id\": %d, \"content\": \"%s\", \"special\": true}%s\n",
			  i, sp[i], i < 2 ? "," : "");
	sb_printf(sb, "  ],\n  \"model\": {\n    \"type\": \"BPE\",\n"
		  "    \"unk_token\": \"<unk>\",\n    \"byte_fallback\": true,\n"
		  "    \"vocab\": {");
	for (int i = 0; i < 3 && id < n; i++, id++)
		sb_printf(sb, "%s\n      \"%s\": %" PRIu64, id ? "," : "", sp[i], id);
	for (unsigned byte = 0; byte < 256 && id < n; byte++, id++)
		sb_printf(sb, ",\n      \"<0x%02X>\": %" PRIu64, byte, id);
	for (uint64_t k = 0; id < n; k++, id++) {
		/* bijective base-90 syllable strings: unique by construction */
		char s[32];
		int len = 0;
		uint64_t x = k;
		do {
			unsigned syl = (unsigned)(x % 90);
			s[len++] = cons[syl / 5];
			s[len++] = vow[syl % 5];
			x = x / 90;
		} while (x-- > 0 && len < 28);
		s[len] = 0;
		sb_printf(sb, ",\n      \"%s%s\": %" PRIu64, k % 3 ? "" : "_", s, id);
	}
	sb_printf(sb, "\n    },\n    \"merges\": []\n  }\n}\n");
}

static int write_text(const char *dir, const char *name, struct sbuf *sb)
{
	char *p = path_join(dir, name);
	int e = write_file(p, sb->p, sb->len);

	if (e)
		die_msg("%s: %s", p, strerror(-e));
	free(p);
	sb->len = 0;
	return e;
}

static int cmd_init(uint64_t size, uint64_t seed, unsigned shards, int jobs,
		    const char *outdir)
{
	struct arch a;
	struct stfile all = { 0 };
	struct sbuf sb = { 0 };
	uint64_t total = 0, written = 0;
	double t0 = now_s();
	int e;
	char hs[32];

	e = dcr_mkdir_p(outdir, 0755);
	if (e) {
		die_msg("%s: %s", outdir, strerror(-e));
		return 1;
	}
	arch_for_size(size, &a);
	model_tensors(&a, &all);
	for (size_t i = 0; i < all.n; i++)
		total += all.t[i].nelem * sim_width(&all.t[i]);
	if (shards > all.n)
		shards = (unsigned)all.n;

	/* split in model order, each shard closing at k/shards of the bytes */
	size_t next = 0;
	uint64_t acc = 0;
	struct sbuf idx = { 0 };
	if (shards > 1)
		sb_printf(&idx, "{\n  \"metadata\": {\"total_size\": %" PRIu64 "},\n"
			  "  \"weight_map\": {", total);
	for (unsigned k = 1; k <= shards; k++) {
		struct stfile f = { 0 };
		char name[64];
		uint64_t goal = total / shards * k;

		if (shards > 1)
			snprintf(name, sizeof(name), "model-%05u-of-%05u.safetensors",
				 k, shards);
		else
			snprintf(name, sizeof(name), "model.safetensors");
		/* leave at least one tensor for each remaining shard */
		while (next < all.n && (f.n == 0 || (acc < goal &&
		       all.n - next > shards - k))) {
			struct tensor *t = stfile_add(&f);
			*t = all.t[next];
			t->name = xstrdup(all.t[next].name);
			acc += t->nelem * sim_width(t);
			if (shards > 1)
				sb_printf(&idx, "%s\n    \"%s\": \"%s\"",
					  next ? "," : "", t->name, name);
			next++;
		}
		if (k == shards) {
			while (next < all.n) {
				struct tensor *t = stfile_add(&f);
				*t = all.t[next];
				t->name = xstrdup(all.t[next].name);
				if (shards > 1)
					sb_printf(&idx, ",\n    \"%s\": \"%s\"",
						  t->name, name);
				next++;
			}
		}
		char *p = path_join(outdir, name);
		e = write_safetensors(p, &f, seed, jobs);
		free(p);
		written += 8 + f.hdr_len + f.data_len;
		stfile_free(&f);
		if (e)
			goto err;
	}
	if (shards > 1) {
		sb_printf(&idx, "\n  }\n}\n");
		if ((e = write_text(outdir, "model.safetensors.index.json", &idx)))
			goto err;
	}
	json_config(&sb, &a, seed);
	if ((e = write_text(outdir, "config.json", &sb)))
		goto err;
	sb_printf(&sb, "{\n  \"bos_token_id\": 1,\n  \"eos_token_id\": 2,\n"
		  "  \"do_sample\": true,\n  \"temperature\": 1.0,\n"
		  "  \"top_p\": 1.0\n}\n");
	if ((e = write_text(outdir, "generation_config.json", &sb)))
		goto err;
	sb_printf(&sb, "{\n  \"tokenizer_class\": \"LlamaTokenizerFast\",\n"
		  "  \"bos_token\": \"<s>\",\n  \"eos_token\": \"</s>\",\n"
		  "  \"unk_token\": \"<unk>\",\n  \"model_max_length\": 4096,\n"
		  "  \"add_bos_token\": true\n}\n");
	if ((e = write_text(outdir, "tokenizer_config.json", &sb)))
		goto err;
	json_tokenizer(&sb, &a);
	if ((e = write_text(outdir, "tokenizer.json", &sb)))
		goto err;

	double dt = now_s() - t0;
	msg("init: hidden %" PRIu64 ", %" PRIu64 " layer%s, intermediate %" PRIu64
	    ", vocab %" PRIu64 ", %zu tensors in %u file%s: %s in %.2f s (%.0f MB/s)",
	    a.h, a.layers, a.layers == 1 ? "" : "s", a.inter, a.vocab, all.n, shards, shards > 1 ? "s" : "",
	    dcr_format_size(written, hs, sizeof(hs)), dt,
	    (double)written / 1e6 / (dt > 1e-9 ? dt : 1e-9));
	free(sb.p);
	free(idx.p);
	stfile_free(&all);
	return 0;
err:
	free(sb.p);
	free(idx.p);
	stfile_free(&all);
	return 1;
}

/* ------------------------------------------------------------ step */

struct ckpt_file {
	char *name;
	bool st;              /* a safetensors file */
	mode_t mode;
	struct stfile f;
	struct map in;
};

static int cmp_names(const void *a, const void *b)
{
	const struct ckpt_file *x = a, *y = b;

	return strcmp(x->name, y->name);
}

static bool has_suffix(const char *s, const char *suf)
{
	size_t ls = strlen(s), lf = strlen(suf);

	return ls >= lf && !strcmp(s + ls - lf, suf);
}

/* List and parse the checkpoint directory @dir (sorted by name). */
static int load_ckpt(const char *dir, struct ckpt_file **out, size_t *nout)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	struct ckpt_file *fs = NULL;
	size_t n = 0, cap = 0;

	if (!d) {
		die_msg("%s: %s", dir, strerror(errno));
		return -errno;
	}
	while ((de = readdir(d))) {
		struct stat sb;
		char *p;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		p = path_join(dir, de->d_name);
		if (stat(p, &sb) < 0 || !S_ISREG(sb.st_mode)) {
			msg("%s: not a regular file, not copied", p);
			free(p);
			continue;
		}
		free(p);
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			fs = realloc(fs, cap * sizeof(*fs));
			if (!fs) {
				die_msg("out of memory");
				exit(1);
			}
		}
		memset(&fs[n], 0, sizeof(fs[n]));
		fs[n].name = xstrdup(de->d_name);
		fs[n].mode = sb.st_mode;
		fs[n].st = has_suffix(de->d_name, ".safetensors");
		fs[n].in.fd = -1;
		n++;
	}
	closedir(d);
	if (n)
		qsort(fs, n, sizeof(*fs), cmp_names);
	*out = fs;
	*nout = n;

	for (size_t i = 0; i < n; i++) {
		struct ckpt_file *c = &fs[i];
		char *p;
		int e;

		if (!c->st)
			continue;
		p = path_join(dir, c->name);
		e = map_read(p, &c->in);
		if (e) {
			die_msg("%s: %s", p, strerror(-e));
			free(p);
			return e;
		}
		if (st_parse(c->in.p, c->in.len, &c->f)) {
			die_msg("%s: not a valid safetensors file", p);
			free(p);
			return -EBADMSG;
		}
		free(p);
	}
	return 0;
}

static void free_ckpt(struct ckpt_file *fs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (fs[i].in.fd >= 0)
			map_close(&fs[i].in);
		stfile_free(&fs[i].f);
		free(fs[i].name);
	}
	free(fs);
}

/*
 * State file: header then, for every element of every BF16/F32 tensor
 * (files by name, tensors by offset), {fp32 master, m, v}.
 *   0  8 magic  8 4 format  12 4 reserved  16 8 step  24 8 elements
 *   32 32 SHA-256 of the layout (file, tensor, dtype, shape list)
 */
static void layout_hash(struct ckpt_file *fs, size_t n, uint64_t *nelem,
			uint8_t out[DCR_HASH_LEN])
{
	struct sbuf sb = { 0 };
	uint64_t idx = 0;

	for (size_t i = 0; i < n; i++) {
		for (size_t k = 0; fs[i].st && k < fs[i].f.n; k++) {
			struct tensor *t = &fs[i].f.t[k];
			if (!handled(W_ADAM, t))
				continue;
			t->st_index = idx;
			idx += t->nelem;
			sb_printf(&sb, "%s|%s|%s|", fs[i].name, t->name, t->dtype);
			for (int d = 0; d < t->ndim; d++)
				sb_printf(&sb, "%" PRIu64 ",", t->shape[d]);
			sb_printf(&sb, "\n");
		}
	}
	dcr_sha256(sb.p ? sb.p : "", sb.len, out);
	free(sb.p);
	*nelem = idx;
}

static char *default_state_path(const char *out)
{
	char *dup = xstrdup(out), *slash;
	char *p;

	/* strip trailing slashes, then take the parent directory */
	for (size_t l = strlen(dup); l > 1 && dup[l - 1] == '/'; l--)
		dup[l - 1] = 0;
	slash = strrchr(dup, '/');
	if (!slash)
		p = xstrdup(".dcrfs-synth.state");
	else {
		*slash = 0;
		p = path_join(slash == dup ? "" : dup, ".dcrfs-synth.state");
	}
	free(dup);
	return p;
}

static int cmd_step(const char *indir, const char *outdir, bool adam,
		    float lr, double rate, const char *state_arg, uint64_t seed,
		    int jobs)
{
	struct ckpt_file *fs = NULL;
	size_t n = 0;
	char *state = NULL;
	struct map st = { .fd = -1 };
	bool st_valid = false;
	uint64_t nelem = 0, step = 1, bytes = 0;
	uint64_t n16 = 0, c16 = 0, n32 = 0, c32 = 0, resynced = 0;
	uint8_t lh[DCR_HASH_LEN];
	struct stat si, so;
	double t0 = now_s();
	int rc = 1, e;

	if (stat(indir, &si) < 0 || !S_ISDIR(si.st_mode)) {
		die_msg("%s: not a directory", indir);
		return 1;
	}
	if (load_ckpt(indir, &fs, &n))
		goto out;
	e = dcr_mkdir_p(outdir, 0755);
	if (e) {
		die_msg("%s: %s", outdir, strerror(-e));
		goto out;
	}
	if (stat(outdir, &so) == 0 && so.st_dev == si.st_dev &&
	    so.st_ino == si.st_ino) {
		die_msg("--in and --out are the same directory");
		goto out;
	}
	layout_hash(fs, n, &nelem, lh);

	if (adam) {
		state = state_arg ? xstrdup(state_arg) : default_state_path(outdir);
		e = map_rw(state, &st);
		if (e == -ENOENT) {
			msg("step: no state at %s: warm start from the checkpoint",
			    state);
		} else if (e) {
			die_msg("%s: %s", state, strerror(-e));
			goto out;
		} else if (st.len != ST_HDR_LEN + 12 * nelem ||
			   memcmp(st.p, ST_MAGIC, 8) ||
			   dcr_get_le32(st.p + 8) != ST_FORMAT ||
			   dcr_get_le64(st.p + 24) != nelem ||
			   memcmp(st.p + 32, lh, DCR_HASH_LEN)) {
			msg("step: state %s is for another model layout: "
			    "warm start from the checkpoint", state);
			map_close(&st);
		} else {
			st_valid = true;
			step = dcr_get_le64(st.p + 16) + 1;
			if (dcr_get_le32(st.p + 12))
				msg("step: the step that last used %s was "
				    "interrupted", state);
		}
		if (!st_valid) {
			e = map_create(state, ST_HDR_LEN + 12 * nelem, &st);
			if (e) {
				die_msg("%s: %s", state, strerror(-e));
				goto out;
			}
			memcpy(st.p, ST_MAGIC, 8);
			dcr_put_le32(st.p + 8, ST_FORMAT);
			dcr_put_le64(st.p + 16, step - 1);
			dcr_put_le64(st.p + 24, nelem);
			memcpy(st.p + 32, lh, DCR_HASH_LEN);
		}
		dcr_put_le32(st.p + 12, 1); /* in progress */
	}

	for (size_t i = 0; i < n; i++) {
		struct ckpt_file *c = &fs[i];
		char *src = path_join(indir, c->name);
		char *dst = path_join(outdir, c->name);

		if (!c->st) {
			e = copy_file(src, dst, c->mode);
			if (e)
				die_msg("%s: %s", dst, strerror(-e));
		} else {
			struct map out;
			struct work w;

			e = map_create(dst, c->in.len, &out);
			if (e) {
				die_msg("%s: %s", dst, strerror(-e));
			} else {
				/* header and unhandled tensors unchanged */
				memcpy(out.p, c->in.p, c->in.len);
				memset(&w, 0, sizeof(w));
				w.kind = adam ? W_ADAM : W_UNIFORM;
				w.f = &c->f;
				w.in = c->in.p + 8 + c->f.hdr_len;
				w.out = out.p + 8 + c->f.hdr_len;
				w.st = st.p ? (float *)(st.p + ST_HDR_LEN) : NULL;
				w.st_valid = st_valid;
				w.out_fd = out.fd;
				w.out_base = 8 + c->f.hdr_len;
				w.seed = seed;
				w.step = step;
				w.lr = lr;
				w.rate = (float)rate;
				e = run_work(&w, jobs);
				n16 += w.n16;
				c16 += w.changed16;
				n32 += w.n32;
				c32 += w.changed32;
				resynced += w.resynced;
				bytes += c->in.len;
				int e2 = map_close(&out);
				e = e ? e : e2;
				if (e)
					die_msg("%s: %s", dst, strerror(-e));
			}
		}
		free(src);
		free(dst);
		if (e)
			goto out;
	}

	if (adam) {
		dcr_put_le64(st.p + 16, step);
		dcr_put_le32(st.p + 12, 0);
		e = map_close(&st);
		if (e) {
			die_msg("%s: %s", state, strerror(-e));
			goto out;
		}
		if (resynced)
			msg("step: %" PRIu64 " master weights did not match the "
			    "checkpoint and were reset from it", resynced);
	}

	double dt = now_s() - t0;
	char hs[32];
	if (adam)
		msg("step %" PRIu64 ": adam lr %g, state %s", step, (double)lr, state);
	else
		msg("step: uniform rate %g", rate);
	msg("changed %" PRIu64 " of %" PRIu64 " bf16 elements (%.3f%%), "
	    "%" PRIu64 " of %" PRIu64 " f32 elements (%.3f%%)",
	    c16, n16, n16 ? 100.0 * (double)c16 / (double)n16 : 0.0,
	    c32, n32, n32 ? 100.0 * (double)c32 / (double)n32 : 0.0);
	msg("wrote %s in %.2f s (%.0f MB/s)", dcr_format_size(bytes, hs, sizeof(hs)),
	    dt, (double)bytes / 1e6 / (dt > 1e-9 ? dt : 1e-9));
	rc = 0;
out:
	if (st.fd >= 0)
		map_close(&st);
	free(state);
	free_ckpt(fs, n);
	return rc;
}

/* ------------------------------------------------------------ main */

static void usage(FILE *fp)
{
	fprintf(fp,
"Usage: " PROG " init --size SIZE [--seed N] [--shards K] [--jobs N] [--quiet] OUTDIR\n"
"       " PROG " step --in DIR --out DIR [--mode adam|uniform] [--lr LR]\n"
"                   [--rate P] [--state FILE] [--seed N] [--jobs N] [--quiet]\n");
	if (fp == stderr) {
		fprintf(fp, "Try '" PROG " --help' for more information.\n");
		return;
	}
	fprintf(fp,
"\n"
"Generate realistic Llama-like safetensors checkpoints (BF16 matrices, F32\n"
"norms, config.json, tokenizer files) and simulated optimizer steps.\n"
"\n"
"init options:\n"
"  --size SIZE     approximate total size: 256K, 64M, 2G ... (required)\n"
"  --shards K      split into model-0000k-of-0000K.safetensors (default 1)\n"
"step options:\n"
"  --in DIR        checkpoint to start from\n"
"  --out DIR       where to write the next step (created)\n"
"  --mode M        adam (default): fp32 master + Adam moments, bf16 export\n"
"                  uniform: exactly a fraction P of elements change\n"
"  --lr LR         Adam learning rate (default 2e-6: about 3 %% change)\n"
"  --rate P        uniform change rate in [0,1] (default 0.03)\n"
"  --state FILE    Adam state (default: .dcrfs-synth.state next to --out)\n"
"common options:\n"
"  --seed N        random seed (default 0); same seed, same bytes\n"
"  --jobs N        threads (default: number of CPUs)\n"
"  --quiet         no statistics on stderr\n"
"  --help          this text\n"
"  --version       the version\n");
}

int main(int argc, char **argv)
{
	enum { O_SIZE = 256, O_SEED, O_SHARDS, O_IN, O_OUT, O_MODE, O_LR,
	       O_RATE, O_STATE, O_JOBS, O_QUIET, O_HELP };
	static const struct option opts[] = {
		{ "size", required_argument, NULL, O_SIZE },
		{ "seed", required_argument, NULL, O_SEED },
		{ "shards", required_argument, NULL, O_SHARDS },
		{ "in", required_argument, NULL, O_IN },
		{ "out", required_argument, NULL, O_OUT },
		{ "mode", required_argument, NULL, O_MODE },
		{ "lr", required_argument, NULL, O_LR },
		{ "rate", required_argument, NULL, O_RATE },
		{ "state", required_argument, NULL, O_STATE },
		{ "jobs", required_argument, NULL, O_JOBS },
		{ "quiet", no_argument, NULL, O_QUIET },
		{ "help", no_argument, NULL, O_HELP },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t size = 0, seed = 0, shards = 1, jobs = 0;
	const char *in = NULL, *out = NULL, *state = NULL, *cmd;
	bool adam = true, have_size = false;
	double lr = 2e-6, rate = 0.03;
	char *end;
	int c;

	dcr_log_set_prog(PROG);
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		usage(stdout);
		return 0;
	}
	if (argc >= 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V"))) {
		printf(PROG " %s\n", PACKAGE_VERSION);
		return 0;
	}
	if (argc < 2 || (strcmp(argv[1], "init") && strcmp(argv[1], "step"))) {
		if (argc >= 2)
			die_msg("unknown command '%s'", argv[1]);
		usage(stderr);
		return 2;
	}
	cmd = argv[1];
	argv++;
	argc--;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case O_SIZE:
			if (dcr_parse_size(optarg, &size) || size == 0) {
				die_msg("bad --size '%s'", optarg);
				return 2;
			}
			have_size = true;
			break;
		case O_SEED:
			if (dcr_parse_u64(optarg, &seed)) {
				die_msg("bad --seed '%s'", optarg);
				return 2;
			}
			break;
		case O_SHARDS:
			if (dcr_parse_u64(optarg, &shards) || shards < 1 ||
			    shards > 99999) {
				die_msg("bad --shards '%s'", optarg);
				return 2;
			}
			break;
		case O_JOBS:
			if (dcr_parse_u64(optarg, &jobs) || jobs > MAX_JOBS) {
				die_msg("bad --jobs '%s' (1..%d)", optarg, MAX_JOBS);
				return 2;
			}
			break;
		case O_IN:
			in = optarg;
			break;
		case O_OUT:
			out = optarg;
			break;
		case O_STATE:
			state = optarg;
			break;
		case O_MODE:
			if (!strcmp(optarg, "adam"))
				adam = true;
			else if (!strcmp(optarg, "uniform"))
				adam = false;
			else {
				die_msg("bad --mode '%s' (adam or uniform)", optarg);
				return 2;
			}
			break;
		case O_LR:
			errno = 0;
			lr = strtod(optarg, &end);
			if (errno || *end || end == optarg || !(lr > 0) || lr > 1) {
				die_msg("bad --lr '%s'", optarg);
				return 2;
			}
			break;
		case O_RATE:
			errno = 0;
			rate = strtod(optarg, &end);
			if (errno || *end || end == optarg || !(rate >= 0) || rate > 1) {
				die_msg("bad --rate '%s' (0..1)", optarg);
				return 2;
			}
			break;
		case O_QUIET:
			quiet = 1;
			break;
		case O_HELP:
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (jobs == 0)
		jobs = (uint64_t)ncpus();

	if (!strcmp(cmd, "init")) {
		if (!have_size || optind != argc - 1 || in || out || state) {
			die_msg(!have_size ? "init needs --size" :
				"init takes --size, --seed, --shards and one OUTDIR");
			usage(stderr);
			return 2;
		}
		return cmd_init(size, seed, (unsigned)shards, (int)jobs, argv[optind]);
	}
	if (!in || !out || optind != argc || have_size) {
		die_msg("step needs --in DIR and --out DIR and no other argument");
		usage(stderr);
		return 2;
	}
	return cmd_step(in, out, adam, (float)lr, rate, state, seed, (int)jobs);
}
