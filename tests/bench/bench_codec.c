/* SPDX-License-Identifier: MIT */
/*
 * bench_codec - the delta codec against the published encodings of one
 * RL step, on the same data in the same run (scripts/bench-codec).
 *
 *   bench_codec [--size MIB] [--chunk KIB] [--seed N] [--md FILE]
 *               [--dat FILE] [--dirs OLD NEW] [--full-only] [--no-simd]
 *
 * --full-only skips the delta steps (only the full-frame line; generated
 * data only); --no-simd
 * measures the scalar plane decoder (what CPUs without AVX2 run).
 *
 * Data: by default a safetensors file of bf16 tensors generated in
 * process (deterministic by seed), and its next step under uniform
 * change at 1, 3, 5, 10 % (exactly that fraction of elements, each an XOR
 * of 1..7 in the low mantissa bits, as dcrfs-synth) and under simulated
 * Adam (fp32 master inside the bf16 rounding cell, one Adam update,
 * round-to-nearest-even export; lr calibrated to ~3 % and ~5 %). With
 * --dirs, the pairs of same-named files of two dcrfs-synth directories.
 *
 * Encodings, all single-threaded over the whole file:
 *   dcrfs       dcr_frame_encode2 per chunk with safetensors hints
 *               (sum of frame sizes, headers included)
 *   gaps+XOR    NeMo-RL sparse refit: position gaps in the smallest
 *               sufficient unsigned type, then XOR values, zstd -1
 *   idx+val     PULSE/TRL: u32 indices then new values, zstd -3
 *   zstd(XOR)   zstd -3 of the dense XOR
 *   order-0     bound: N H(p) + changes x H(XOR values), in bytes
 * Ratios are raw file bytes / encoded bytes. Speeds are MB/s of raw file
 * (10^6 bytes per second), best of three runs; decode includes applying
 * onto the parent (the output is checked against the new file).
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <zstd.h>

#include "buf.h"
#include "chunk.h"
#include "common.h"
#include "entropy.h"
#include "frame.h"
#include "hash.h"
#include "manifest.h"
#include "safetensors.h"

#include "benchutil.h"

#define RUNS 3

static double now_s(void)
{
	return bench_cpu_s();
}

static void *xmalloc(size_t n)
{
	return bench_xmalloc("bench_codec", n);
}

/* ------------------------------------------------------------ random */

static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static inline uint64_t rng_next(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ull;
	return mix64(*s);
}

static inline float rng_normal(uint64_t *s)
{
	uint64_t r = rng_next(s);
	uint32_t sum = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) +
		       (uint32_t)((r >> 32) & 0xffff) + (uint32_t)(r >> 48);

	return ((float)sum - 131070.0f) * (1.0f / 37837.23f);
}

static inline uint64_t rng_below(uint64_t *s, uint64_t n)
{
	return (uint64_t)(((__uint128_t)rng_next(s) * n) >> 64);
}

static inline uint16_t f32_to_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

static inline float bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

/* --------------------------------------------------------------- data */

struct file {
	char name[256];
	uint8_t *old, *cur;
	size_t size;
	struct dcr_regions regs;
};

#define NT 8
static const float tensor_std[NT] = { 0.02f, 0.015f, 0.03f, 0.008f,
				       0.02f, 0.012f, 0.04f, 0.02f };

/* A safetensors file of NT bf16 tensors, about @bytes in total. */
static void gen_base(struct file *f, size_t bytes, uint64_t seed)
{
	size_t per = (bytes / NT) & ~(size_t)4095;
	char hdr[4096];
	int hl = 0;

	hl += snprintf(hdr + hl, sizeof(hdr) - (size_t)hl, "{\"__metadata__\":{\"format\":\"pt\"}");
	for (int t = 0; t < NT; t++)
		hl += snprintf(hdr + hl, sizeof(hdr) - (size_t)hl,
			       ",\"layers.%d.weight\":{\"dtype\":\"BF16\",\"shape\":[%zu],"
			       "\"data_offsets\":[%zu,%zu]}",
			       t, per / 2, (size_t)t * per, (size_t)(t + 1) * per);
	hl += snprintf(hdr + hl, sizeof(hdr) - (size_t)hl, "}");
	while ((hl + 8) % 8)
		hdr[hl++] = ' ';
	f->size = 8 + (size_t)hl + NT * per;
	f->old = xmalloc(f->size);
	f->cur = xmalloc(f->size);
	dcr_put_le64(f->old, (uint64_t)hl);
	memcpy(f->old + 8, hdr, (size_t)hl);
	uint16_t h;
	for (int t = 0; t < NT; t++) {
		uint64_t rs = mix64(seed * 131 + (uint64_t)t);
		uint8_t *o = f->old + 8 + hl + (size_t)t * per;
		for (size_t i = 0; i < per / 2; i++) {
			h = f32_to_bf16(tensor_std[t] * rng_normal(&rs));
			memcpy(o + 2 * i, &h, 2);
		}
	}
	snprintf(f->name, sizeof(f->name), "generated");
	if (dcr_safetensors_regions(f->old, f->size, f->size, &f->regs)) {
		fprintf(stderr, "bench_codec: generated header does not parse\n");
		exit(1);
	}
}

/* Exactly floor(p n) changed elements per region, XOR 1..7 in the low byte. */
static uint64_t step_uniform(struct file *f, double p, uint64_t seed)
{
	uint64_t changed = 0;

	memcpy(f->cur, f->old, f->size);
	for (size_t r = 0; r < f->regs.n; r++) {
		uint64_t rs = mix64(seed * 7919 + r);
		uint64_t n = f->regs.r[r].len / 2, q = (uint64_t)floor(p * (double)n);
		uint8_t *o = f->cur + f->regs.r[r].off;
		changed += q;
		for (uint64_t i = 0; i < n && q; i++) {
			if (rng_below(&rs, n - i) >= q)
				continue;
			q--;
			o[2 * i] ^= (uint8_t)(1 + rng_below(&rs, 7));
		}
	}
	return changed;
}

/* One Adam step from the warm start of dcrfs-synth, on @n elements. */
static uint64_t adam_elems(const uint8_t *in, uint8_t *out, size_t n, float lr,
			   uint64_t seed)
{
	const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, m0 = 0.2294157f;
	uint64_t gs = mix64(seed ^ 0x1234), ms = mix64(seed ^ 0x5678), changed = 0;

	for (size_t i = 0; i < n; i++) {
		uint16_t h;
		memcpy(&h, in + 2 * i, 2);
		float x = bf16_to_f32(h), m = m0 * rng_normal(&ms), v = 1.0f;
		if ((h & 0x7f80u) && (h & 0x7f80u) != 0x7f80u) {
			float ulp = bf16_to_f32((uint16_t)(h & 0x7f80u)) * (1.0f / 128.0f);
			float u = ((float)(rng_next(&ms) >> 40) + 0.5f) *
				  (1.0f / 16777216.0f) - 0.5f;
			if ((h & 0x7fu) == 0 && (u < 0) == !(h & 0x8000u))
				u *= 0.5f;
			x += 0.999f * u * ulp;
		}
		float g = rng_normal(&gs);
		m = b1 * m + (1.0f - b1) * g;
		v = b2 * v + (1.0f - b2) * g * g;
		x -= lr * m / (sqrtf(v) + eps);
		uint16_t o = f32_to_bf16(x);
		memcpy(out + 2 * i, &o, 2);
		changed += o != h;
	}
	return changed;
}

static uint64_t step_adam(struct file *f, float lr, uint64_t seed)
{
	uint64_t changed = 0;

	memcpy(f->cur, f->old, f->size);
	for (size_t r = 0; r < f->regs.n; r++)
		changed += adam_elems(f->old + f->regs.r[r].off,
				      f->cur + f->regs.r[r].off,
				      f->regs.r[r].len / 2, lr, seed * 31 + r);
	return changed;
}

/* lr that changes about @target of the elements (on a sample). */
static float calibrate_lr(const struct file *f, double target, uint64_t seed)
{
	size_t n = DCR_MIN((size_t)(1 << 20), f->regs.r[0].len / 2);
	uint8_t *tmp = xmalloc(2 * n);
	float lr = 2e-6f;

	for (int it = 0; it < 6; it++) {
		double rate = (double)adam_elems(f->old + f->regs.r[0].off, tmp, n,
						 lr, seed) / (double)n;
		if (rate <= 0)
			lr *= 4;
		else
			lr = (float)(lr * target / rate);
	}
	free(tmp);
	return lr;
}

/* ---------------------------------------------------------- baselines */

struct result {
	double bytes;   /* encoded size */
	double enc_s;   /* best encode time */
	double dec_s;   /* best decode+apply time */
};

struct stream {
	uint8_t *p;
	size_t n;
};

/* Elements of width 2 over the tensor regions (bytes elsewhere ignored:
 * the generated header never changes). */
static size_t collect(const struct file *f, uint32_t *idx, uint16_t *xv,
		      uint16_t *nv)
{
	size_t n = 0;
	uint64_t base_e = 0;

	for (size_t r = 0; r < f->regs.n; r++) {
		const uint8_t *a = f->old + f->regs.r[r].off, *b = f->cur + f->regs.r[r].off;
		size_t ne = f->regs.r[r].len / 2;
		for (size_t i = 0; i < ne; i++) {
			uint16_t x, y;
			memcpy(&x, a + 2 * i, 2);
			memcpy(&y, b + 2 * i, 2);
			if (x != y) {
				idx[n] = (uint32_t)(base_e + i);
				xv[n] = x ^ y;
				if (nv)
					nv[n] = y;
				n++;
			}
		}
		base_e += ne;
	}
	return n;
}

/* Element index -> byte offset in the file. */
static size_t elem_off(const struct file *f, uint64_t e)
{
	for (size_t r = 0; r < f->regs.n; r++) {
		uint64_t ne = f->regs.r[r].len / 2;
		if (e < ne)
			return f->regs.r[r].off + 2 * e;
		e -= ne;
	}
	return f->size;
}

static void zcompress(struct stream *out, const void *src, size_t n, int level)
{
	size_t bound = ZSTD_compressBound(n);
	out->p = xmalloc(bound);
	out->n = ZSTD_compress(out->p, bound, src, n, level);
	if (ZSTD_isError(out->n)) {
		fprintf(stderr, "bench_codec: zstd: %s\n", ZSTD_getErrorName(out->n));
		exit(1);
	}
}

static uint64_t nelems(const struct file *f)
{
	uint64_t n = 0;

	for (size_t r = 0; r < f->regs.n; r++)
		n += f->regs.r[r].len / 2;
	return n;
}

static void check_equal(const uint8_t *a, const uint8_t *b, size_t n, const char *what)
{
	if (memcmp(a, b, n)) {
		fprintf(stderr, "bench_codec: %s: decoded bytes differ\n", what);
		exit(1);
	}
}

/* gaps (smallest sufficient type) + XOR values, zstd -1. */
static void bench_gaps_xor(const struct file *f, uint8_t *dst, struct result *res)
{
	size_t ne = nelems(f);
	uint32_t *idx = xmalloc(ne * 4 + 4);
	uint16_t *xv = xmalloc(ne * 2 + 2);
	struct stream z = { 0 };

	res->enc_s = res->dec_s = 1e9;
	for (int run = 0; run < RUNS; run++) {
		double t0 = now_s();
		size_t n = collect(f, idx, xv, NULL);
		uint32_t maxg = 0, prev = 0;
		for (size_t i = 0; i < n; i++) {
			uint32_t g = idx[i] - (i ? prev : 0);
			prev = idx[i];
			maxg = DCR_MAX(maxg, g);
		}
		unsigned w = maxg < 256 ? 1 : maxg < 65536 ? 2 : 4;
		uint8_t *buf = xmalloc(n * (w + 2) + 16);
		size_t o = 0;
		prev = 0;
		dcr_put_le32(buf, (uint32_t)n);
		buf[4] = (uint8_t)w;
		o = 5;
		for (size_t i = 0; i < n; i++) {
			uint32_t g = idx[i] - (i ? prev : 0);
			prev = idx[i];
			memcpy(buf + o, &g, w); /* little-endian host */
			o += w;
		}
		memcpy(buf + o, xv, 2 * n);
		o += 2 * n;
		free(z.p);
		zcompress(&z, buf, o, 1);
		double t1 = now_s();
		res->enc_s = DCR_MIN(res->enc_s, t1 - t0);
		free(buf);

		memcpy(dst, f->old, f->size);
		t0 = now_s();
		unsigned long long cs = ZSTD_getFrameContentSize(z.p, z.n);
		buf = xmalloc(cs);
		ZSTD_decompress(buf, cs, z.p, z.n);
		size_t cnt = dcr_get_le32(buf);
		w = buf[4];
		const uint8_t *gp = buf + 5, *vp = gp + cnt * w;
		uint64_t e = 0;
		for (size_t i = 0; i < cnt; i++) {
			uint32_t g = 0;
			memcpy(&g, gp + i * w, w);
			e += g;
			uint16_t v, d;
			memcpy(&v, vp + 2 * i, 2);
			size_t off = elem_off(f, e);
			memcpy(&d, dst + off, 2);
			d ^= v;
			memcpy(dst + off, &d, 2);
		}
		t1 = now_s();
		res->dec_s = DCR_MIN(res->dec_s, t1 - t0);
		free(buf);
		check_equal(dst, f->cur, f->size, "gaps+XOR");
	}
	res->bytes = (double)z.n;
	free(z.p);
	free(idx);
	free(xv);
}

/* u32 indices + new values, zstd -3. */
static void bench_idx_val(const struct file *f, uint8_t *dst, struct result *res)
{
	size_t ne = nelems(f);
	uint32_t *idx = xmalloc(ne * 4 + 4);
	uint16_t *xv = xmalloc(ne * 2 + 2), *nv = xmalloc(ne * 2 + 2);
	struct stream z = { 0 };

	res->enc_s = res->dec_s = 1e9;
	for (int run = 0; run < RUNS; run++) {
		double t0 = now_s();
		size_t n = collect(f, idx, xv, nv);
		uint8_t *buf = xmalloc(n * 6 + 8);
		dcr_put_le32(buf, (uint32_t)n);
		memcpy(buf + 4, idx, 4 * n);
		memcpy(buf + 4 + 4 * n, nv, 2 * n);
		free(z.p);
		zcompress(&z, buf, 4 + 6 * n, 3);
		double t1 = now_s();
		res->enc_s = DCR_MIN(res->enc_s, t1 - t0);
		free(buf);

		memcpy(dst, f->old, f->size);
		t0 = now_s();
		unsigned long long cs = ZSTD_getFrameContentSize(z.p, z.n);
		buf = xmalloc(cs);
		ZSTD_decompress(buf, cs, z.p, z.n);
		size_t cnt = dcr_get_le32(buf);
		const uint8_t *ip = buf + 4, *vp = ip + 4 * cnt;
		for (size_t i = 0; i < cnt; i++) {
			uint32_t e;
			memcpy(&e, ip + 4 * i, 4);
			memcpy(dst + elem_off(f, e), vp + 2 * i, 2);
		}
		t1 = now_s();
		res->dec_s = DCR_MIN(res->dec_s, t1 - t0);
		free(buf);
		check_equal(dst, f->cur, f->size, "idx+val");
	}
	res->bytes = (double)z.n;
	free(z.p);
	free(idx);
	free(xv);
	free(nv);
}

/* zstd -3 of the dense XOR of the whole file. */
static void bench_zstd_xor(const struct file *f, uint8_t *dst, struct result *res)
{
	uint8_t *x = xmalloc(f->size);
	struct stream z = { 0 };

	res->enc_s = res->dec_s = 1e9;
	for (int run = 0; run < RUNS; run++) {
		double t0 = now_s();
		memcpy(x, f->cur, f->size);
		dcr_xor(x, f->old, f->size);
		free(z.p);
		zcompress(&z, x, f->size, 3);
		double t1 = now_s();
		res->enc_s = DCR_MIN(res->enc_s, t1 - t0);
		memcpy(dst, f->old, f->size);
		t0 = now_s();
		ZSTD_decompress(x, f->size, z.p, z.n);
		dcr_xor(dst, x, f->size);
		t1 = now_s();
		res->dec_s = DCR_MIN(res->dec_s, t1 - t0);
		check_equal(dst, f->cur, f->size, "zstd(XOR)");
	}
	res->bytes = (double)z.n;
	free(z.p);
	free(x);
}

/* Order-0 bound of positions (N H(p)) plus XOR values (H of their law). */
static double order0_bound(const struct file *f, double *rate)
{
	size_t ne = nelems(f);
	uint32_t *idx = xmalloc(ne * 4 + 4);
	uint16_t *xv = xmalloc(ne * 2 + 2);
	uint32_t *h = calloc(65536, sizeof(*h));
	size_t n = collect(f, idx, xv, NULL);
	double bits = 0, p = (double)n / (double)ne;

	for (size_t i = 0; i < n; i++)
		h[xv[i]]++;
	if (p > 0 && p < 1)
		bits = (double)ne * (-p * log2(p) - (1 - p) * log2(1 - p));
	for (unsigned v = 0; v < 65536; v++)
		if (h[v])
			bits += h[v] * log2((double)n / h[v]);
	*rate = p;
	free(idx);
	free(xv);
	free(h);
	return bits / 8;
}

/* ------------------------------------------------------------- dcrfs */

struct dcrfs_res {
	struct result r;
	uint64_t frames;
	uint64_t manifest; /* bytes of a manifest describing these chunks */
};

static void bench_dcrfs(const struct file *f, uint8_t *dst, uint32_t cs,
			int full, int hints, struct dcrfs_res *res)
{
	struct dcr_codec *c = dcr_codec_new(0);
	struct dcr_buf out;
	uint64_t nch = dcr_chunk_count(f->size, cs);
	uint64_t *off = xmalloc(nch * sizeof(*off)), *len = xmalloc(nch * sizeof(*len));
	int kind;

	dcr_buf_init(&out, SIZE_MAX);
	res->r.enc_s = res->r.dec_s = 1e9;
	for (int run = 0; run < RUNS; run++) {
		dcr_buf_reset(&out);
		double t0 = now_s();
		for (uint64_t i = 0; i < nch; i++) {
			uint32_t l = dcr_chunk_len(f->size, cs, i);
			struct dcr_elem_hint h = dcr_regions_hint(&f->regs, i * (uint64_t)cs);
			off[i] = out.len;
			int ret = dcr_frame_encode2(c, f->cur + i * (uint64_t)cs,
						    full ? NULL : f->old + i * (uint64_t)cs,
						    l, hints ? &h : NULL, &out, &kind);
			if (ret) {
				fprintf(stderr, "bench_codec: encode: %s\n", dcr_strerror(ret));
				exit(1);
			}
			len[i] = out.len - off[i];
		}
		double t1 = now_s();
		res->r.enc_s = DCR_MIN(res->r.enc_s, t1 - t0);
		if (full)
			memset(dst, 0, f->size);
		else
			memcpy(dst, f->old, f->size);
		t0 = now_s();
		for (uint64_t i = 0; i < nch; i++) {
			uint32_t l = dcr_chunk_len(f->size, cs, i);
			int ret = dcr_frame_apply(c, out.data + off[i], len[i],
						  dst + i * (uint64_t)cs, l);
			if (ret) {
				fprintf(stderr, "bench_codec: apply chunk %" PRIu64 ": %s\n",
					i, dcr_strerror(ret));
				exit(1);
			}
		}
		t1 = now_s();
		res->r.dec_s = DCR_MIN(res->r.dec_s, t1 - t0);
		check_equal(dst, f->cur, f->size, "dcrfs");
	}
	res->r.bytes = (double)out.len;
	res->frames = nch;

	/* The manifest of a version whose chunks are these frames. */
	struct dcr_manifest m = { 0 };
	struct dcr_file mf = { 0 };
	uint8_t pk[1][DCR_HASH_LEN] = { { 1 } };
	m.version = 2;
	m.parent = full ? 0 : 1;
	m.chunk_size = cs;
	m.npacks = 1;
	m.packs = pk;
	m.nfiles = 1;
	m.files = &mf;
	mf.path = (char *)"model.safetensors";
	mf.type = DCR_FT_REG;
	mf.mode = 0644;
	mf.size = f->size;
	mf.base = full ? DCR_NO_BASE : 0;
	mf.nchunks = nch;
	mf.chunks = calloc(nch, sizeof(*mf.chunks));
	for (uint64_t i = 0; i < nch; i++) {
		struct dcr_chunk_ref *r = &mf.chunks[i];
		r->kind = out.data[off[i] + 5] == DCR_FRAME_DELTA ? DCR_CK_DELTA : DCR_CK_FULL;
		r->pack = 0;
		r->off = 8 + off[i];
		r->len = (uint32_t)len[i];
		dcr_sha256(f->cur + i * (uint64_t)cs, dcr_chunk_len(f->size, cs, i), r->hash);
	}
	dcr_sha256(f->cur, f->size, mf.sha256);
	struct dcr_buf mb;
	dcr_buf_init(&mb, SIZE_MAX);
	res->manifest = dcr_manifest_encode(&m, &mb) ? 0 : mb.len;
	dcr_buf_free(&mb);
	free(mf.chunks);
	free(off);
	free(len);
	dcr_buf_free(&out);
	dcr_codec_free(c);
}

/* -------------------------------------------------------------- main */

struct row {
	char label[64];
	double rate;
	double raw;
	struct dcrfs_res d, dnh;
	struct result gx, iv, zx;
	double bound;
};

static double mbps(double bytes, double s)
{
	return s > 0 ? bytes / s / 1e6 : 0;
}

static void run_row(struct row *w, const struct file *f, uint8_t *dst, uint32_t cs)
{
	w->raw = (double)f->size;
	w->bound = order0_bound(f, &w->rate);
	bench_dcrfs(f, dst, cs, 0, 1, &w->d);
	bench_dcrfs(f, dst, cs, 0, 0, &w->dnh);
	bench_gaps_xor(f, dst, &w->gx);
	bench_idx_val(f, dst, &w->iv);
	bench_zstd_xor(f, dst, &w->zx);
	fprintf(stderr, "bench_codec: %s done\n", w->label);
}

static int load(const char *path, uint8_t **p, size_t *n)
{
	FILE *fp = fopen(path, "rb");
	struct stat sb;

	if (!fp || fstat(fileno(fp), &sb)) {
		if (fp)
			fclose(fp);
		return -errno;
	}
	*n = (size_t)sb.st_size;
	*p = xmalloc(*n);
	size_t got = fread(*p, 1, *n, fp);
	fclose(fp);
	return got == *n ? 0 : -EIO;
}

static void usage(void)
{
	fprintf(stderr, "usage: bench_codec [--size MIB] [--chunk KIB] [--seed N] "
		"[--md FILE] [--dat FILE] [--dirs OLD NEW] [--full-only] [--no-simd]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	size_t size_mib = 64;
	uint32_t cs = DCR_CHUNK_DEFAULT;
	uint64_t seed = 1;
	const char *md = NULL, *dat = NULL, *dold = NULL, *dnew = NULL;
	static const struct option opts[] = {
		{ "size", required_argument, NULL, 's' },
		{ "chunk", required_argument, NULL, 'c' },
		{ "seed", required_argument, NULL, 'S' },
		{ "md", required_argument, NULL, 'm' },
		{ "dat", required_argument, NULL, 'd' },
		{ "dirs", no_argument, NULL, 'D' },
		{ "full-only", no_argument, NULL, 'F' },
		{ "no-simd", no_argument, NULL, 'N' },
		{ NULL, 0, NULL, 0 },
	};
	int o, dirs = 0, full_only = 0;

	dcr_log_set_prog("bench_codec");
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 's':
			size_mib = strtoul(optarg, NULL, 10);
			break;
		case 'c':
			cs = (uint32_t)strtoul(optarg, NULL, 10) << 10;
			break;
		case 'S':
			seed = strtoull(optarg, NULL, 10);
			break;
		case 'm':
			md = optarg;
			break;
		case 'd':
			dat = optarg;
			break;
		case 'D':
			dirs = 1;
			break;
		case 'F':
			full_only = 1;
			break;
		case 'N':
			dcr_ent_set_simd(0);
			break;
		default:
			usage();
		}
	}
	if (dirs) {
		if (argc - optind != 2)
			usage();
		dold = argv[optind];
		dnew = argv[optind + 1];
	} else if (optind != argc) {
		usage();
	}
	if (!dcr_chunk_size_valid(cs) || size_mib < 1) {
		fprintf(stderr, "bench_codec: bad --chunk or --size\n");
		return 2;
	}

	struct row rows[16];
	size_t nrows = 0;
	double full_ratio = 0, full_enc = 0, full_dec = 0, manifest_pct = 0;
	struct file f = { 0 };
	uint8_t *dst = NULL;

	if (!dirs) {
		gen_base(&f, size_mib << 20, seed);
		dst = xmalloc(f.size);
		static const double rates[] = { 0.01, 0.03, 0.05, 0.10 };
		for (size_t i = 0; i < 4 && !full_only; i++) {
			struct row *w = &rows[nrows++];
			memset(w, 0, sizeof(*w));
			snprintf(w->label, sizeof(w->label), "uniform %g %%", rates[i] * 100);
			step_uniform(&f, rates[i], seed + i + 1);
			run_row(w, &f, dst, cs);
			if (i == 1 && w->d.r.bytes > 0)
				manifest_pct = 100.0 * (double)w->d.manifest / w->d.r.bytes;
		}
		static const double targets[] = { 0.03, 0.05 };
		for (size_t i = 0; i < 2; i++) {
			float lr = calibrate_lr(&f, targets[i], seed + 100);
			step_adam(&f, lr, seed + 100);
			if (full_only)
				continue; /* the full frames below are of this step */
			struct row *w = &rows[nrows++];
			memset(w, 0, sizeof(*w));
			snprintf(w->label, sizeof(w->label), "Adam lr %.2g", (double)lr);
			run_row(w, &f, dst, cs);
		}
		/* Full frames of the new checkpoint (anchors, new files). */
		struct dcrfs_res fr;
		bench_dcrfs(&f, dst, cs, 1, 1, &fr);
		full_ratio = 100.0 * fr.r.bytes / (double)f.size;
		full_enc = mbps((double)f.size, fr.r.enc_s);
		full_dec = mbps((double)f.size, fr.r.dec_s);
	} else {
		DIR *d = opendir(dnew);
		struct dirent *de;
		if (!d) {
			perror(dnew);
			return 1;
		}
		while ((de = readdir(d)) && nrows < 16) {
			char po[4096], pn[4096];
			if (!strstr(de->d_name, ".safetensors"))
				continue;
			snprintf(po, sizeof(po), "%s/%s", dold, de->d_name);
			snprintf(pn, sizeof(pn), "%s/%s", dnew, de->d_name);
			struct file g = { 0 };
			size_t n1, n2;
			if (load(po, &g.old, &n1) || load(pn, &g.cur, &n2) || n1 != n2) {
				fprintf(stderr, "bench_codec: skipping %s\n", de->d_name);
				free(g.old);
				free(g.cur);
				continue;
			}
			g.size = n1;
			if (dcr_safetensors_regions(g.old, g.size, g.size, &g.regs)) {
				fprintf(stderr, "bench_codec: %s: not safetensors\n", de->d_name);
				free(g.old);
				free(g.cur);
				continue;
			}
			/* Baselines treat every region as 2-byte elements; keep bf16. */
			size_t k = 0;
			for (size_t i = 0; i < g.regs.n; i++)
				if (g.regs.r[i].dtype == DCR_DT_BF16)
					g.regs.r[k++] = g.regs.r[i];
			g.regs.n = k;
			struct dcr_regions all;
			dcr_safetensors_regions(g.old, g.size, g.size, &all);
			dst = xmalloc(g.size);
			struct row *w = &rows[nrows++];
			memset(w, 0, sizeof(*w));
			snprintf(w->label, sizeof(w->label), "%.60s", de->d_name);
			struct dcr_regions bf = g.regs;
			g.regs = all;  /* dcrfs gets every region as hints */
			w->raw = (double)g.size;
			bench_dcrfs(&g, dst, cs, 0, 1, &w->d);
			bench_dcrfs(&g, dst, cs, 0, 0, &w->dnh);
			g.regs = bf;
			w->bound = order0_bound(&g, &w->rate);
			bench_gaps_xor(&g, dst, &w->gx);
			bench_idx_val(&g, dst, &w->iv);
			bench_zstd_xor(&g, dst, &w->zx);
			if (!full_ratio) {
				struct dcrfs_res fr;
				g.regs = all;
				bench_dcrfs(&g, dst, cs, 1, 1, &fr);
				full_ratio = 100.0 * fr.r.bytes / (double)g.size;
				full_enc = mbps((double)g.size, fr.r.enc_s);
				full_dec = mbps((double)g.size, fr.r.dec_s);
			}
			dcr_regions_free(&all);
			dcr_regions_free(&bf);
			free(dst);
			free(g.old);
			free(g.cur);
		}
		closedir(d);
	}

	FILE *out = md ? fopen(md, "w") : stdout;
	if (!out) {
		perror(md);
		return 1;
	}
	fprintf(out, "Delta codec benchmark: %s, chunk %u KiB, seed %" PRIu64
		", one core.\n\n", dirs ? dnew : "generated bf16 safetensors",
		cs >> 10, seed);
	if (!dirs)
		fprintf(out, "File: %.1f MiB of bf16 (%d tensors, std 0.008-0.04).\n\n",
			(double)f.size / 1048576.0, NT);
	fprintf(out, "Size ratio (raw file / encoded; higher is better):\n\n");
	fprintf(out, "| step | changed | dcrfs | dcrfs no hints | gaps+XOR+zstd-1 | "
		"idx+val+zstd-3 | zstd-3(XOR) | order-0 bound | dcrfs / gaps+XOR | "
		"dcrfs vs bound |\n");
	fprintf(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
	for (size_t i = 0; i < nrows; i++) {
		struct row *w = &rows[i];
		fprintf(out, "| %s | %.2f %% | %.1fx | %.1fx | %.1fx | %.1fx | %.1fx | %.1fx | "
			"%.2fx | %+.1f %% |\n",
			w->label, 100 * w->rate, w->raw / w->d.r.bytes,
			w->raw / w->dnh.r.bytes, w->raw / w->gx.bytes,
			w->raw / w->iv.bytes, w->raw / w->zx.bytes, w->raw / w->bound,
			w->gx.bytes / w->d.r.bytes,
			100.0 * (w->d.r.bytes / w->bound - 1));
	}
	fprintf(out, "\nSpeed, MB/s of raw file per core (encode / decode+apply):\n\n");
	fprintf(out, "| step | dcrfs | gaps+XOR+zstd-1 | idx+val+zstd-3 | zstd-3(XOR) |\n");
	fprintf(out, "|---|---:|---:|---:|---:|\n");
	for (size_t i = 0; i < nrows; i++) {
		struct row *w = &rows[i];
		fprintf(out, "| %s | %.0f / %.0f | %.0f / %.0f | %.0f / %.0f | %.0f / %.0f |\n",
			w->label, mbps(w->raw, w->d.r.enc_s), mbps(w->raw, w->d.r.dec_s),
			mbps(w->raw, w->gx.enc_s), mbps(w->raw, w->gx.dec_s),
			mbps(w->raw, w->iv.enc_s), mbps(w->raw, w->iv.dec_s),
			mbps(w->raw, w->zx.enc_s), mbps(w->raw, w->zx.dec_s));
	}
	fprintf(out, "\nFull frames (anchor of the new checkpoint): %.1f %% of raw, "
		"encode %.0f MB/s, decode %.0f MB/s.\n", full_ratio, full_enc, full_dec);
	if (!dirs && nrows > 1)
		fprintf(out, "Manifest of the 3 %% step: %" PRIu64 " bytes = %.2f %% of its "
			"delta frames.\n", rows[1].d.manifest, manifest_pct);
	if (md)
		fclose(out);

	if (dat) {
		FILE *fd = fopen(dat, "w");
		if (!fd) {
			perror(dat);
			return 1;
		}
		fprintf(fd, "# step dcrfs gaps_xor_zstd1 idx_val_zstd3 zstd3_xor order0\n");
		for (size_t i = 0; i < nrows; i++) {
			struct row *w = &rows[i];
			fprintf(fd, "\"%s\\n(%.1f%%)\" %.3f %.3f %.3f %.3f %.3f\n", w->label,
				100 * w->rate, w->raw / w->d.r.bytes, w->raw / w->gx.bytes,
				w->raw / w->iv.bytes, w->raw / w->zx.bytes, w->raw / w->bound);
		}
		fclose(fd);
	}
	if (!dirs) {
		dcr_regions_free(&f.regs);
		free(f.old);
		free(f.cur);
		free(dst);
	}
	return 0;
}
