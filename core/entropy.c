/* SPDX-License-Identifier: MIT */
/*
 * entropy.c - static rANS models, table serialisation and plane coding
 * (see entropy.h for the formats).
 */
#include "config.h"

#include <stddef.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define DCR_X32_AVX2 1
#endif

#include "common.h"
#include "entropy.h"

/* floor(log2(v) * 65536) for v >= 1, by repeated squaring. */
static uint32_t log2_q16(uint32_t v)
{
	unsigned e = 31u - (unsigned)__builtin_clz(v);
	uint64_t m = (uint64_t)v << (31 - e); /* mantissa in [2^31, 2^32) */
	uint32_t r = e << 16;

	for (int bit = 15; bit >= 0; bit--) {
		m = (m * m) >> 31;
		if (m >= (1ull << 32)) {
			m >>= 1;
			r |= 1u << bit;
		}
	}
	return r;
}

uint64_t dcr_ent_cost(const uint32_t *cnt, unsigned nsym)
{
	uint64_t total = 0, bits_q16 = 0;

	for (unsigned s = 0; s < nsym; s++)
		total += cnt[s];
	if (!total)
		return 0;
	/* Counts beyond 32 bits never occur (chunks are <= 64 MiB). */
	uint32_t lt = log2_q16((uint32_t)DCR_MIN(total, UINT32_MAX));
	for (unsigned s = 0; s < nsym; s++)
		if (cnt[s])
			bits_q16 += (uint64_t)cnt[s] * (lt - log2_q16(cnt[s]));
	return (bits_q16 + 65535) >> 16;
}

int dcr_ent_normalize(const uint32_t *cnt, unsigned nsym, uint16_t *freq)
{
	uint64_t total = 0;
	int32_t sum = 0;

	if (nsym == 0 || nsym > 256)
		return DCR_ERR(-EINVAL);
	for (unsigned s = 0; s < nsym; s++)
		total += cnt[s];
	if (!total)
		return DCR_ERR(-EINVAL);
	for (unsigned s = 0; s < nsym; s++) {
		uint32_t f = 0;
		if (cnt[s]) {
			f = (uint32_t)(((uint64_t)cnt[s] * DCR_ENT_TOTAL + total / 2) / total);
			if (f == 0)
				f = 1;
		}
		freq[s] = (uint16_t)f;
		sum += (int32_t)f;
	}
	int32_t diff = (int32_t)DCR_ENT_TOTAL - sum;
	/*
	 * Move the rounding error one unit at a time to (or from) the symbol
	 * where it costs least: the largest count per frequency unit gains
	 * most from +1, the smallest loses least from -1.
	 */
	while (diff > 0) {
		unsigned best = 0;
		uint64_t bn = 0, bd = 1;
		for (unsigned s = 0; s < nsym; s++)
			if (cnt[s] && (uint64_t)cnt[s] * bd > bn * freq[s]) {
				best = s;
				bn = cnt[s];
				bd = freq[s];
			}
		freq[best]++;
		diff--;
	}
	while (diff < 0) {
		unsigned best = nsym;
		uint64_t bn = 0, bd = 0;
		for (unsigned s = 0; s < nsym; s++)
			if (freq[s] > 1 &&
			    (best == nsym || (uint64_t)cnt[s] * bd < bn * freq[s])) {
				best = s;
				bn = cnt[s];
				bd = freq[s];
			}
		if (best == nsym)
			return DCR_ERR(-EINVAL); /* > TOTAL symbols present */
		freq[best]--;
		diff++;
	}
	return 0;
}

int dcr_ent_write_table(struct dcr_buf *out, const uint16_t *freq, unsigned nsym)
{
	int ret = dcr_buf_put_varint(out, nsym);

	for (unsigned s = 0; !ret && s < nsym; s++) {
		if (freq[s]) {
			ret = dcr_buf_put_varint(out, freq[s]);
			continue;
		}
		unsigned run = 1;
		while (s + run < nsym && !freq[s + run])
			run++;
		ret = dcr_buf_putc(out, 0);
		if (!ret)
			ret = dcr_buf_put_varint(out, run - 1);
		s += run - 1;
	}
	return ret;
}

int dcr_ent_read_table(struct dcr_rd *r, uint16_t *freq, unsigned maxsym,
		       unsigned *nsym)
{
	uint64_t n, v, sum = 0;

	memset(freq, 0, 256 * sizeof(*freq));
	if (dcr_rd_varint_max(r, DCR_MIN(maxsym, 256u), &n) || n == 0)
		return DCR_ERR(-EBADMSG);
	for (unsigned s = 0; s < n; s++) {
		if (dcr_rd_varint_max(r, DCR_ENT_TOTAL, &v))
			return DCR_ERR(-EBADMSG);
		if (v) {
			freq[s] = (uint16_t)v;
			sum += v;
			continue;
		}
		if (dcr_rd_varint_max(r, n - s - 1, &v))
			return DCR_ERR(-EBADMSG);
		s += (unsigned)v;
	}
	if (sum != DCR_ENT_TOTAL)
		return DCR_ERR(-EBADMSG);
	*nsym = (unsigned)n;
	return 0;
}

void dcr_ent_enc_init(struct dcr_ent_enc *m, const uint16_t *freq, unsigned nsym)
{
	uint32_t start = 0;

	memset(m, 0, sizeof(*m));
	for (unsigned s = 0; s < nsym; s++) {
		struct dcr_rans_esym *e = &m->s[s];
		uint32_t f = freq[s];
		if (!f)
			continue;
		e->x_max = ((DCR_RANS_L >> DCR_ENT_SCALE) << 16) * f;
		e->cmpl_freq = (uint16_t)(DCR_ENT_TOTAL - f);
		if (f < 2) {
			e->rcp_freq = ~0u;
			e->rcp_shift = 0;
			e->bias = start + DCR_ENT_TOTAL - 1;
		} else {
			uint32_t shift = 0;
			while (f > (1u << shift))
				shift++;
			e->rcp_freq = (uint32_t)(((1ull << (shift + 31)) + f - 1) / f);
			e->rcp_shift = (uint16_t)(shift - 1);
			e->bias = start;
		}
		start += f;
	}
}

void dcr_ent_dec_init(struct dcr_ent_dec *m, const uint16_t *freq, unsigned nsym)
{
	uint32_t start = 0;

	for (unsigned s = 0; s < nsym; s++) {
		for (uint32_t k = 0; k < freq[s]; k++) {
			m->slot[start + k].freq = freq[s];
			m->slot[start + k].bias = (uint16_t)k;
			m->sym[start + k] = (uint8_t)s;
		}
		start += freq[s];
	}
}

/* ------------------------------------------------------------ planes */

enum { PLANE_CONST = 0, PLANE_RAW = 1, PLANE_RANS = 2, PLANE_X32 = 3 };

#define X32 32 /* states of plane mode 3 */

/*
 * Plane mode 3 encoder: 32 states over one shared stream, built backwards
 * from @end (the two bytes below every write position are scratch).
 * Returns the start of the stream, which runs to @end.
 */
static int simd_allowed = 1;

#ifdef DCR_X32_AVX2
_Static_assert(sizeof(struct dcr_rans_esym) == 16 &&
	       offsetof(struct dcr_rans_esym, rcp_freq) == 4 &&
	       offsetof(struct dcr_rans_esym, bias) == 8 &&
	       offsetof(struct dcr_rans_esym, cmpl_freq) == 12 &&
	       offsetof(struct dcr_rans_esym, rcp_shift) == 14, "x32_put16");

/*
 * dcr_rans_put on 16 states at once (lanes 0..15 of *@xv, symbols
 * @s[0..16)): the same arithmetic, the symbols' fields gathered from
 * @m's 16-byte entries (x_max is (TOTAL - cmpl_freq) << 19, as
 * dcr_ent_enc_init makes it). The renormalising lanes' words go below
 * *@pp in lane order, which is where the scalar loop, going from the
 * highest state down, puts them.
 */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi2,popcnt")))
static inline void x32_put16(__m512i *xv, uint8_t **pp, const uint8_t *s,
			     const struct dcr_ent_enc *m)
{
	const int *t = (const int *)(const void *)m->s;
	__m512i x = *xv;
	__m512i idx = _mm512_slli_epi32(_mm512_cvtepu8_epi32(
		_mm_loadu_si128((const __m128i *)(const void *)s)), 2);
	__m512i rcp = _mm512_i32gather_epi32(idx, t + 1, 4);
	__m512i bias = _mm512_i32gather_epi32(idx, t + 2, 4);
	__m512i cs = _mm512_i32gather_epi32(idx, t + 3, 4);
	__m512i cmpl = _mm512_and_si512(cs, _mm512_set1_epi32(0xffff));
	__m512i xmax = _mm512_slli_epi32(_mm512_sub_epi32(
		_mm512_set1_epi32((int)DCR_ENT_TOTAL), cmpl), 19);
	__mmask16 n = _mm512_cmpge_epu32_mask(x, xmax);
	unsigned cnt = (unsigned)__builtin_popcount(n);
	__m256i w = _mm256_maskz_compress_epi16(n, _mm512_cvtepi32_epi16(x));

	*pp -= 2 * cnt;
	_mm256_mask_storeu_epi16(*pp, (__mmask16)((1u << cnt) - 1), w);
	x = _mm512_mask_srli_epi32(x, n, x, 16);
	__m512i pe = _mm512_srli_epi64(_mm512_mul_epu32(x, rcp), 32);
	__m512i po = _mm512_mul_epu32(_mm512_srli_epi64(x, 32), _mm512_srli_epi64(rcp, 32));
	__m512i q = _mm512_srlv_epi32(_mm512_mask_blend_epi32(0xaaaa, pe, po),
				      _mm512_srli_epi32(cs, 16));
	*xv = _mm512_add_epi32(_mm512_add_epi32(x, bias), _mm512_mullo_epi32(q, cmpl));
}

/* x32_encode's whole rounds: @src[0..n), n a multiple of X32, onto the
 * states @x, words below *@pp. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi2,popcnt")))
static void x32_encode_avx512(const uint8_t *src, size_t n,
			      const struct dcr_ent_enc *m, uint32_t *x, uint8_t **pp)
{
	__m512i x0 = _mm512_loadu_si512((const void *)x);
	__m512i x1 = _mm512_loadu_si512((const void *)(x + 16));

	while (n) {
		n -= X32;
		x32_put16(&x1, pp, src + n + 16, m);
		x32_put16(&x0, pp, src + n, m);
	}
	_mm512_storeu_si512((void *)x, x0);
	_mm512_storeu_si512((void *)(x + 16), x1);
}

static int x32_avx512(void)
{
	return simd_allowed && __builtin_cpu_supports("avx512f") &&
	       __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
	       __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("popcnt");
}
#endif

static uint8_t *x32_encode(const uint8_t *src, size_t n,
			   const struct dcr_ent_enc *m, uint8_t *end)
{
	uint32_t x[X32];
	uint8_t *p = end;
	size_t i = n;

	for (int k = 0; k < X32; k++)
		x[k] = DCR_RANS_L;
	while (i & (X32 - 1)) {
		i--;
		dcr_rans_put(&x[i & (X32 - 1)], &p, &m->s[src[i]]);
	}
#ifdef DCR_X32_AVX2
	if (i && x32_avx512()) {
		x32_encode_avx512(src, i, m, x, &p);
		i = 0;
	}
#endif
	while (i) {
		i -= X32;
		for (int k = X32 - 1; k >= 0; k--)
			dcr_rans_put(&x[k], &p, &m->s[src[i + (size_t)k]]);
	}
	for (int k = X32 - 1; k >= 0; k--)
		dcr_rans_flush(x[k], &p);
	return p;
}

int dcr_ent_plane_encode(const uint8_t *src, size_t n, struct dcr_buf *out)
{
	uint32_t cnt[4][256];
	uint32_t all[256];
	uint16_t freq[256];
	int ret;

	memset(cnt, 0, sizeof(cnt));
	size_t i = 0;
	for (; i + 4 <= n; i += 4) {
		cnt[0][src[i]]++;
		cnt[1][src[i + 1]]++;
		cnt[2][src[i + 2]]++;
		cnt[3][src[i + 3]]++;
	}
	for (; i < n; i++)
		cnt[0][src[i]]++;
	unsigned nsym = 0, distinct = 0;
	for (unsigned s = 0; s < 256; s++) {
		all[s] = cnt[0][s] + cnt[1][s] + cnt[2][s] + cnt[3][s];
		if (all[s]) {
			nsym = s + 1;
			distinct++;
		}
	}
	if (distinct <= 1) {
		if ((ret = dcr_buf_putc(out, PLANE_CONST)))
			return ret;
		return dcr_buf_putc(out, n ? src[0] : 0);
	}
	int x32 = n >= DCR_ENT_X32_MIN;
	uint64_t est = dcr_ent_cost(all, nsym) / 8 + (x32 ? 136 : 32) + 2 * nsym / 3;
	if (est >= n - n / DCR_ENT_RAW_DIV) {
		if ((ret = dcr_buf_putc(out, PLANE_RAW)))
			return ret;
		return dcr_buf_append(out, src, n);
	}
	if ((ret = dcr_ent_normalize(all, nsym, freq)))
		return ret;
	size_t mark = out->len;
	if ((ret = dcr_buf_putc(out, x32 ? PLANE_X32 : PLANE_RANS)) ||
	    (ret = dcr_ent_write_table(out, freq, nsym)))
		return ret;
	if (x32) {
		/* every symbol costs at most SCALE bits; states; scratch */
		size_t rb = n * DCR_ENT_SCALE / 8 + 4 * X32 + 64;
		size_t hdr = out->len;
		if ((ret = dcr_buf_reserve(out, hdr + 10 + rb)))
			return ret;
		struct dcr_ent_enc *m = (struct dcr_ent_enc *)(void *)cnt;
		_Static_assert(sizeof(cnt) >= sizeof(struct dcr_ent_enc), "scratch");
		dcr_ent_enc_init(m, freq, nsym);
		uint8_t *end = out->data + hdr + 10 + rb;
		uint8_t *p = x32_encode(src, n, m, end);
		size_t clen = (size_t)(end - p);
		if (hdr - mark + 10 + clen >= n - n / DCR_ENT_RAW_DIV) {
			out->len = mark;
			if ((ret = dcr_buf_putc(out, PLANE_RAW)))
				return ret;
			return dcr_buf_append(out, src, n);
		}
		if ((ret = dcr_buf_put_varint(out, clen)))
			return ret;
		memmove(out->data + out->len, p, clen);
		out->len += clen;
		return 0;
	}
	/*
	 * Four states, each with its own stream (so decoding them overlaps),
	 * built backwards at the ends of four regions after the header. Every
	 * symbol costs at most SCALE bits, plus the flushed state and the
	 * scratch word dcr_rans_put may write below its position.
	 */
	size_t rb = (n / 4 + 1) * DCR_ENT_SCALE / 8 + 64;
	size_t hdr = out->len;
	if ((ret = dcr_buf_reserve(out, hdr + 4 * 10 + 4 * rb)))
		return ret;
	struct dcr_ent_enc *m = (struct dcr_ent_enc *)(void *)cnt; /* reuse */
	_Static_assert(sizeof(cnt) >= sizeof(struct dcr_ent_enc), "scratch");
	dcr_ent_enc_init(m, freq, nsym);
	uint8_t *base = out->data + hdr + 40;
	uint8_t *p0 = base + rb, *p1 = base + 2 * rb, *p2 = base + 3 * rb;
	uint8_t *p3 = base + 4 * rb;
	uint32_t x0 = DCR_RANS_L, x1 = DCR_RANS_L, x2 = DCR_RANS_L, x3 = DCR_RANS_L;
	i = n;
	while (i & 3) {
		i--;
		switch (i & 3) {
		case 2:
			dcr_rans_put(&x2, &p2, &m->s[src[i]]);
			break;
		case 1:
			dcr_rans_put(&x1, &p1, &m->s[src[i]]);
			break;
		default:
			dcr_rans_put(&x0, &p0, &m->s[src[i]]);
			break;
		}
	}
	while (i) {
		i -= 4;
		dcr_rans_put(&x3, &p3, &m->s[src[i + 3]]);
		dcr_rans_put(&x2, &p2, &m->s[src[i + 2]]);
		dcr_rans_put(&x1, &p1, &m->s[src[i + 1]]);
		dcr_rans_put(&x0, &p0, &m->s[src[i]]);
	}
	dcr_rans_flush(x0, &p0);
	dcr_rans_flush(x1, &p1);
	dcr_rans_flush(x2, &p2);
	dcr_rans_flush(x3, &p3);
	uint8_t *ps[4] = { p0, p1, p2, p3 };
	size_t len[4], total = 0;
	for (int k = 0; k < 4; k++) {
		len[k] = (size_t)(base + (size_t)(k + 1) * rb - ps[k]);
		total += len[k];
	}
	if (hdr - mark + 20 + total >= n + 1) {
		/* The estimate was wrong (tiny planes): store raw instead. */
		out->len = mark;
		if ((ret = dcr_buf_putc(out, PLANE_RAW)))
			return ret;
		return dcr_buf_append(out, src, n);
	}
	out->len = hdr;
	for (int k = 0; k < 4; k++)
		if ((ret = dcr_buf_put_varint(out, len[k])))
			return ret;
	for (int k = 0; k < 4; k++) {
		memmove(out->data + out->len, ps[k], len[k]);
		out->len += len[k];
	}
	return 0;
}

/* Decode one symbol with no bound check: the caller made sure the
 * stream has the 2 bytes a renormalisation may take. */
static inline uint8_t get_fast(uint32_t *x, const uint8_t **p,
			       const struct dcr_ent_dec *m)
{
	uint32_t v = *x, slot = v & (DCR_ENT_TOTAL - 1);
	const struct dcr_ent_slot e = m->slot[slot];

	v = e.freq * (v >> DCR_ENT_SCALE) + e.bias;
	uint32_t nr = v < DCR_RANS_L;
	uint32_t w = (uint32_t)(*p)[0] | (uint32_t)(*p)[1] << 8;
	/* arithmetic, not ?:, so no unpredictable branch is generated */
	*x = (v << (nr << 4)) | (w & (0u - nr));
	*p += 2 * nr;
	return m->sym[slot];
}

/* ------------------------------------------------ plane mode 3 decoder */

static inline uint32_t ld16(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

/*
 * Decode symbols [i, n) with bound checks (the tail, or everything when
 * no SIMD path applies). Returns 0, or -1 when the stream ran out.
 */
static int x32_decode_tail(uint32_t *x, const uint8_t **pp, const uint8_t *end,
			   const uint32_t *tab, uint8_t *dst, size_t i, size_t n)
{
	const uint8_t *p = *pp;

	/* whole rounds while the stream surely holds their words */
	for (; i + X32 <= n && end - p >= 2 * X32; i += X32) {
		for (int k = 0; k < X32; k++) {
			uint32_t v = x[k], e = tab[v & (DCR_ENT_TOTAL - 1)];
			v = (e & 0xfff) * (v >> DCR_ENT_SCALE) + ((e >> 12) & 0xfff);
			uint32_t nr = v < DCR_RANS_L;
			/* arithmetic, not ?:, so no unpredictable branch */
			x[k] = (v << (nr << 4)) | (ld16(p) & (0u - nr));
			p += 2 * nr;
			dst[i + (size_t)k] = (uint8_t)(e >> 24);
		}
	}
	for (; i < n; i++) {
		uint32_t *xs = &x[i & (X32 - 1)];
		uint32_t v = *xs, e = tab[v & (DCR_ENT_TOTAL - 1)];
		v = (e & 0xfff) * (v >> DCR_ENT_SCALE) + ((e >> 12) & 0xfff);
		if (v < DCR_RANS_L) {
			if (end - p < 2)
				return -1;
			v = (v << 16) | ld16(p);
			p += 2;
		}
		*xs = v;
		dst[i] = (uint8_t)(e >> 24);
	}
	*pp = p;
	return 0;
}

#ifdef DCR_X32_AVX2
/* For a renormalisation mask m of 8 lanes: the word each lane takes. */
#define PC_(m, j) ((uint8_t)__builtin_popcount((unsigned)(m) & ((1u << (j)) - 1)))
#define ROW_(m) { PC_(m, 0), PC_(m, 1), PC_(m, 2), PC_(m, 3), \
		  PC_(m, 4), PC_(m, 5), PC_(m, 6), PC_(m, 7) }
#define R4_(m) ROW_(m), ROW_((m) + 1), ROW_((m) + 2), ROW_((m) + 3)
#define R16_(m) R4_(m), R4_((m) + 4), R4_((m) + 8), R4_((m) + 12)
#define R64_(m) R16_(m), R16_((m) + 16), R16_((m) + 32), R16_((m) + 48)
static const uint8_t x32_lut[256][8] = {
	R64_(0), R64_(64), R64_(128), R64_(192)
};

#define X32_STEP(X, S)                                                        \
	do {                                                                  \
		__m256i e_ = _mm256_i32gather_epi32((const int *)tab,         \
						    _mm256_and_si256(X, m12), 4); \
		__m256i f_ = _mm256_and_si256(e_, m12);                       \
		__m256i b_ = _mm256_and_si256(_mm256_srli_epi32(e_, 12), m12); \
		X = _mm256_add_epi32(_mm256_mullo_epi32(f_, _mm256_srli_epi32(X, 12)), \
				     b_);                                     \
		__m256i nr_ = _mm256_cmpgt_epi32(lo, X);                      \
		unsigned mk_ = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(nr_)); \
		__m256i w_ = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)); \
		__m256i ix_ = _mm256_cvtepu8_epi32(_mm_loadl_epi64(           \
			(const __m128i *)(const void *)x32_lut[mk_]));        \
		w_ = _mm256_permutevar8x32_epi32(w_, ix_);                    \
		X = _mm256_blendv_epi8(X, _mm256_or_si256(_mm256_slli_epi32(X, 16), w_), \
				       nr_);                                  \
		p += 2 * (unsigned)__builtin_popcount(mk_);                   \
		S = _mm256_srli_epi32(e_, 24);                                \
	} while (0)

/* Whole rounds of 32 symbols while the stream holds a round's words;
 * returns the symbols decoded. */
__attribute__((target("avx2,popcnt")))
static size_t x32_decode_avx2(uint32_t *x, const uint8_t **pp, const uint8_t *end,
			      const uint32_t *tab, uint8_t *dst, size_t n)
{
	const __m256i m12 = _mm256_set1_epi32(0xfff);
	const __m256i lo = _mm256_set1_epi32((int)DCR_RANS_L);
	const __m256i ord = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	__m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(x + 0));
	__m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(x + 8));
	__m256i x2 = _mm256_loadu_si256((const __m256i *)(const void *)(x + 16));
	__m256i x3 = _mm256_loadu_si256((const __m256i *)(const void *)(x + 24));
	const uint8_t *p = *pp;
	size_t i = 0;

	for (; i + X32 <= n && end - p >= 2 * X32; i += X32) {
		__m256i s0, s1, s2, s3;
		X32_STEP(x0, s0);
		X32_STEP(x1, s1);
		X32_STEP(x2, s2);
		X32_STEP(x3, s3);
		__m256i a = _mm256_packus_epi32(s0, s1), b = _mm256_packus_epi32(s2, s3);
		__m256i o = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(a, b), ord);
		_mm256_storeu_si256((__m256i *)(void *)(dst + i), o);
	}
	_mm256_storeu_si256((__m256i *)(void *)(x + 0), x0);
	_mm256_storeu_si256((__m256i *)(void *)(x + 8), x1);
	_mm256_storeu_si256((__m256i *)(void *)(x + 16), x2);
	_mm256_storeu_si256((__m256i *)(void *)(x + 24), x3);
	*pp = p;
	return i;
}

/*
 * One step of 16 states (x32_decode_avx2's X32_STEP on a 512-bit
 * vector): the renormalising lanes take the next words in lane order
 * (an expand of the words at p); returns the 16 symbols.
 */
#define X32_STEP16(X)                                                         \
	__extension__({                                                       \
		__m512i e_ = _mm512_i32gather_epi32(_mm512_and_si512(X, m12), \
						    (const void *)tab, 4);    \
		__m512i f_ = _mm512_and_si512(e_, m12);                       \
		__m512i b_ = _mm512_and_si512(_mm512_srli_epi32(e_, 12), m12); \
		X = _mm512_add_epi32(_mm512_mullo_epi32(f_, _mm512_srli_epi32(X, 12)), \
				     b_);                                     \
		__mmask16 n_ = _mm512_cmplt_epu32_mask(X, lo);                \
		__m512i w_ = _mm512_cvtepu16_epi32(_mm256_maskz_expand_epi16( \
			n_, _mm256_loadu_si256((const __m256i *)(const void *)p))); \
		X = _mm512_mask_or_epi32(X, n_, _mm512_slli_epi32(X, 16), w_); \
		p += 2 * (unsigned)__builtin_popcount(n_);                    \
		_mm512_cvtepi32_epi8(_mm512_srli_epi32(e_, 24));              \
	})

/* x32_decode_avx2 with two vectors of 16 states (AVX-512). */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi2,popcnt")))
static size_t x32_decode_avx512(uint32_t *x, const uint8_t **pp, const uint8_t *end,
				const uint32_t *tab, uint8_t *dst, size_t n)
{
	const __m512i m12 = _mm512_set1_epi32(0xfff);
	const __m512i lo = _mm512_set1_epi32((int)DCR_RANS_L);
	__m512i x0 = _mm512_loadu_si512((const void *)x);
	__m512i x1 = _mm512_loadu_si512((const void *)(x + 16));
	const uint8_t *p = *pp;
	size_t i = 0;

	/* a round reads at most 64 bytes: each step loads 32 at p */
	for (; i + X32 <= n && end - p >= 2 * X32; i += X32) {
		__m128i s0 = X32_STEP16(x0);
		__m128i s1 = X32_STEP16(x1);
		_mm_storeu_si128((__m128i *)(void *)(dst + i), s0);
		_mm_storeu_si128((__m128i *)(void *)(dst + i + 16), s1);
	}
	_mm512_storeu_si512((void *)x, x0);
	_mm512_storeu_si512((void *)(x + 16), x1);
	*pp = p;
	return i;
}

#endif

void dcr_ent_set_simd(int on)
{
	simd_allowed = on;
}

int dcr_ent_simd(void)
{
	return simd_allowed;
}

static int x32_decode(struct dcr_rd *r, uint8_t *dst, size_t n,
		      struct dcr_ent_dec *dec)
{
	uint16_t freq[256];
	unsigned nsym;
	uint64_t clen;
	const uint8_t *src;
	uint32_t x[X32];

	if (dcr_ent_read_table(r, freq, 256, &nsym) ||
	    dcr_rd_varint_max(r, dcr_rd_left(r), &clen) ||
	    dcr_rd_bytes(r, clen, &src) || clen < 4 * X32)
		return DCR_ERR(-EBADMSG);
	/* packed entries hold frequencies below TOTAL: 2+ symbols */
	for (unsigned s = 0; s < nsym; s++)
		if (freq[s] == DCR_ENT_TOTAL)
			return DCR_ERR(-EBADMSG);
	uint32_t start = 0;
	for (unsigned s = 0; s < nsym; s++) {
		for (uint32_t k = 0; k < freq[s]; k++)
			dec->packed[start + k] = freq[s] | k << 12 | s << 24;
		start += freq[s];
	}
	const uint8_t *p = src, *end = src + clen;
	for (int k = 0; k < X32; k++, p += 4) {
		x[k] = dcr_get_le32(p);
		if (x[k] < DCR_RANS_L || x[k] >= (1u << 31))
			return DCR_ERR(-EBADMSG);
	}
	size_t i = 0;
#ifdef DCR_X32_AVX2
	if (x32_avx512())
		i = x32_decode_avx512(x, &p, end, dec->packed, dst, n);
	else if (simd_allowed && __builtin_cpu_supports("avx2") &&
		 __builtin_cpu_supports("popcnt"))
		i = x32_decode_avx2(x, &p, end, dec->packed, dst, n);
#endif
	if (x32_decode_tail(x, &p, end, dec->packed, dst, i, n) || p != end)
		return DCR_ERR(-EBADMSG);
	for (int k = 0; k < X32; k++)
		if (x[k] != DCR_RANS_L)
			return DCR_ERR(-EBADMSG);
	return 0;
}

int dcr_ent_plane_decode(struct dcr_rd *r, uint8_t *dst, size_t n,
			 struct dcr_ent_dec *dec)
{
	const uint8_t *o;
	int ret = dcr_ent_plane_decode_ref(r, dst, n, dec, &o);

	if (!ret && o != dst)
		memcpy(dst, o, n);
	return ret;
}

int dcr_ent_plane_decode_ref(struct dcr_rd *r, uint8_t *dst, size_t n,
			     struct dcr_ent_dec *dec, const uint8_t **out)
{
	uint8_t mode;
	const uint8_t *src;
	uint16_t freq[256];
	unsigned nsym;
	uint64_t len[4];

	*out = dst;
	if (dcr_rd_u8(r, &mode))
		return DCR_ERR(-EBADMSG);
	switch (mode) {
	case PLANE_CONST:
		if (dcr_rd_u8(r, &mode))
			return DCR_ERR(-EBADMSG);
		memset(dst, mode, n);
		return 0;
	case PLANE_RAW:
		if (dcr_rd_bytes(r, n, &src))
			return DCR_ERR(-EBADMSG);
		*out = src;
		return 0;
	case PLANE_RANS:
		break;
	case PLANE_X32:
		return x32_decode(r, dst, n, dec);
	default:
		return DCR_ERR(-EBADMSG);
	}
	if (dcr_ent_read_table(r, freq, 256, &nsym))
		return DCR_ERR(-EBADMSG);
	for (int k = 0; k < 4; k++)
		if (dcr_rd_varint_max(r, dcr_rd_left(r), &len[k]))
			return DCR_ERR(-EBADMSG);
	struct dcr_rans_in in[4];
	for (int k = 0; k < 4; k++) {
		if (dcr_rd_bytes(r, len[k], &src))
			return DCR_ERR(-EBADMSG);
		in[k].p = src;
		in[k].end = src + len[k];
		in[k].bad = 0;
	}
	dcr_ent_dec_init(dec, freq, nsym);
	uint32_t x0 = dcr_rans_init(&in[0]), x1 = dcr_rans_init(&in[1]);
	uint32_t x2 = dcr_rans_init(&in[2]), x3 = dcr_rans_init(&in[3]);
	const uint8_t *p0 = in[0].p, *p1 = in[1].p, *p2 = in[2].p, *p3 = in[3].p;
	const uint8_t *e0 = in[0].end, *e1 = in[1].end, *e2 = in[2].end;
	const uint8_t *e3 = in[3].end;
	size_t i = 0;
	/* Fast path while every stream holds a word for this round. */
	for (; i + 4 <= n; i += 4) {
		if (DCR_UNLIKELY((e0 - p0 < 2) | (e1 - p1 < 2) | (e2 - p2 < 2) |
				 (e3 - p3 < 2)))
			break;
		uint8_t s0 = get_fast(&x0, &p0, dec);
		uint8_t s1 = get_fast(&x1, &p1, dec);
		uint8_t s2 = get_fast(&x2, &p2, dec);
		uint8_t s3 = get_fast(&x3, &p3, dec);
		dst[i] = s0;
		dst[i + 1] = s1;
		dst[i + 2] = s2;
		dst[i + 3] = s3;
	}
	in[0].p = p0;
	in[1].p = p1;
	in[2].p = p2;
	in[3].p = p3;
	uint32_t xs[4] = { x0, x1, x2, x3 };
	for (; i < n; i++)
		dst[i] = (uint8_t)dcr_rans_get(&xs[i & 3], dec, &in[i & 3]);
	for (int k = 0; k < 4; k++)
		if (in[k].bad || in[k].p != in[k].end || xs[k] != DCR_RANS_L)
			return DCR_ERR(-EBADMSG);
	return 0;
}
