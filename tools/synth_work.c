/* SPDX-License-Identifier: MIT */
/*
 * synth_work.c - dcrfs-synth's random streams and float conversions,
 * and the workers that fill (init) or step (adam, uniform) the tensors
 * of one file, block by block, on a core/wq queue (synth.h: run_work).
 *
 * Everything is deterministic in (seed, input, state) and independent
 * of the number of threads: random streams are seeded per block of
 * elements, never per thread.
 */
#include "config.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "synth.h"
#include "wq.h"

#define BLOCK_ELEMS ((uint64_t)1 << 16)   /* elements per random stream */

/* Adam hyper-parameters (the usual PyTorch defaults). */
#define ADAM_B1 0.9f
#define ADAM_B2 0.999f
#define ADAM_EPS 1e-8f

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

uint64_t fnv1a(const char *s)
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

/* ------------------------------------------------------------ workers */

/* Per-thread scratch for one block of adam output. */
struct scratch {
	uint8_t out[4 * BLOCK_ELEMS];
};

static size_t find_tensor(const struct work *w, uint64_t blk)
{
	/* the last tensor whose first block is <= blk: the one before the
	 * first whose first block is past it (tensors of no blocks share
	 * their successor's first block) */
	size_t i = dcr_lower_bound_u64(w->blk_first, w->f->n, sizeof(uint64_t),
				       0, blk + 1);

	return i ? i - 1 : 0;
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
bool handled(enum work_kind kind, const struct tensor *t)
{
	if (t->nelem == 0)
		return false;
	if (kind == W_UNIFORM)
		return sim_width(t) != 0;
	return t->fmt == DCR_FF_BF16 || t->fmt == DCR_FF_F32;
}

int run_work(struct work *w, int jobs)
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
