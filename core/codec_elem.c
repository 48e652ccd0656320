/* SPDX-License-Identifier: MIT */
/*
 * codec_elem.c - the element codec (frame codec 2; layout in frame.h).
 *
 * What a bf16 RL step changes is a few percent of the elements, at random
 * places, each usually by one or two units in the last place. So a
 * segment's delta is coded as the positions of the changed elements (gaps
 * between them, entropy-coded: about H(p)/p bits per change) plus their
 * values, either the XOR or, since the decoder knows the parent element,
 * the integer difference of the bit patterns (+-1 ulp costs about one
 * bit where its XOR costs two or more). Dense deltas and full chunks are
 * split into byte planes, bf16/f32 exponents apart, each plane coded
 * order-0.
 */
#include "config.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define DCR_SCAN_AVX512 1
#endif

#include "chunk.h"
#include "codec_elem.h"
#include "common.h"

#define LAYOUT_VERSION 1
#define SEG_MIN 512       /* typed segments below this become byte mode */
#define SPARSE_DIV 4      /* give up sparse beyond 1/SPARSE_DIV changed */
#define INT_NSYM 128      /* alphabet of the integer symbolisation */
#define VMODE_XOR 0
#define VMODE_ADD 1
#define PMODEL_GAPS 0      /* one rANS state (still decoded) */
#define PMODEL_GAPS2 1     /* two interleaved states, two streams */
#define SP_NS 2            /* states of PMODEL_GAPS2 */
/* entries of the scan's arrays beyond its limit: scan_w goes up to 8
 * past it, scan_avx512 stores 16 lanes at up to 16 past it */
#define SCAN_SLACK 32

/* ------------------------------------------------------------ helpers */

static inline uint64_t ld64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

/* Little-endian u64 in one load (dcr_get_le64 is a byte loop). */
static inline uint64_t ld64le(const uint8_t *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return ld64(p);
#else
	return dcr_get_le64(p);
#endif
}

/* Little-endian element of width w (1, 2 or 4), in one load. */
static inline uint32_t ldw(const uint8_t *p, unsigned w)
{
	if (w == 1)
		return p[0];
	if (w == 2)
		return dcr_get_le16(p);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
#else
	return dcr_get_le32(p);
#endif
}

static inline void stw(uint8_t *p, unsigned w, uint32_t v)
{
	if (w == 1)
		p[0] = (uint8_t)v;
	else if (w == 2)
		dcr_put_le16(p, (uint16_t)v);
	else
		dcr_put_le32(p, v);
}

static inline uint32_t wmask(unsigned w)
{
	return w == 4 ? 0xffffffffu : (1u << (8 * w)) - 1;
}

/*
 * Integer symbolisation (frame.h): symbol | extra bits << 8 of the
 * integers below INT_TAB (gaps and small values, nearly all of them).
 * The encoder takes 5 symbols a change: computed, its branch on v < 16
 * was mispredicted about every other gap, and without the branch the
 * formula cost about as much (some 20 instructions).
 */
#define INT_TAB 1024
#define IT_NB(v) ((v) >= 512 ? 10 : (v) >= 256 ? 9 : (v) >= 128 ? 8 : \
		  (v) >= 64 ? 7 : (v) >= 32 ? 6 : 5)
#define IT_E(v) ((v) < 16 ? (v) : (16 + (IT_NB(v) - 5) * 4 + \
		 (((v) >> (IT_NB(v) - 3)) & 3)) | (IT_NB(v) - 3) << 8)
#define IT_4(v) IT_E(v), IT_E((v) + 1), IT_E((v) + 2), IT_E((v) + 3)
#define IT_16(v) IT_4(v), IT_4((v) + 4), IT_4((v) + 8), IT_4((v) + 12)
#define IT_64(v) IT_16(v), IT_16((v) + 16), IT_16((v) + 32), IT_16((v) + 48)
#define IT_256(v) IT_64(v), IT_64((v) + 64), IT_64((v) + 128), IT_64((v) + 192)
static const uint16_t int_tab[INT_TAB] = {
	IT_256(0u), IT_256(256u), IT_256(512u), IT_256(768u)
};

/* Integer symbolisation (frame.h): symbol, and @k extra low bits. */
static inline unsigned int_sym(uint32_t v, unsigned *k)
{
	if (DCR_LIKELY(v < INT_TAB)) {
		unsigned e = int_tab[v];
		*k = e >> 8;
		return e & 0xff;
	}
	unsigned nb = 32u - (unsigned)__builtin_clz(v);
	*k = nb - 3;
	return 16 + (nb - 5) * 4 + ((v >> (nb - 3)) & 3);
}

/* Always inlined: a call would keep the state in memory, on its
 * dependency chain. Integers below 16 go through dcr_rans_put_bits with
 * no bits (which changes nothing), so no branch depends on the data. */
static inline __attribute__((always_inline)) void
put_int(uint32_t *x, uint8_t **pp, const struct dcr_ent_enc *m, uint32_t v)
{
	unsigned k;
	unsigned s = int_sym(v, &k);

	if (DCR_UNLIKELY(k > 15)) {
		dcr_rans_put_bits(x, pp, v & 0x7fff, 15);
		dcr_rans_put_bits(x, pp, (v >> 15) & ((1u << (k - 15)) - 1), k - 15);
	} else {
		dcr_rans_put_bits(x, pp, v & ((1u << k) - 1), k);
	}
	dcr_rans_put(x, pp, &m->s[s]);
}

static inline uint32_t zigzag(uint32_t d, unsigned w)
{
	uint32_t m = wmask(w), sign = (d >> (8 * w - 1)) & 1;

	return ((d << 1) & m) ^ (sign ? m : 0);
}

static inline uint32_t unzigzag(uint32_t z, unsigned w)
{
	return (z >> 1) ^ ((z & 1) ? wmask(w) : 0);
}

/* ------------------------------------------------------------ context */

void dcr_elem_ctx_free(struct dcr_elem_ctx *c)
{
	free(c->xbuf);
	free(c->pbuf);
	free(c->idx);
	free(c->val);
	free(c->add);
	free(c->rec);
	c->rec = NULL;
	c->rec_n = c->rec_cap = 0;
	for (int i = 0; i < 2; i++) {
		free(c->dec[i]);
		free(c->enc[i]);
		c->dec[i] = NULL;
		c->enc[i] = NULL;
	}
	dcr_buf_free(&c->cand);
	c->xbuf = c->pbuf = NULL;
	c->idx = c->val = c->add = NULL;
	c->bcap = c->ncap = 0;
}

static int reserve_bufs(struct dcr_elem_ctx *c, size_t len)
{
	if (len <= c->bcap)
		return 0;
	uint8_t *x = realloc(c->xbuf, len), *p;
	if (!x)
		return DCR_ERR(-ENOMEM);
	c->xbuf = x;
	if (!(p = realloc(c->pbuf, len)))
		return DCR_ERR(-ENOMEM);
	c->pbuf = p;
	c->bcap = len;
	return 0;
}

static int reserve_sparse(struct dcr_elem_ctx *c, size_t n)
{
	if (n <= c->ncap)
		return 0;
	uint32_t *i = realloc(c->idx, n * sizeof(*i)), *v;
	if (!i)
		return DCR_ERR(-ENOMEM);
	c->idx = i;
	if (!(v = realloc(c->val, n * sizeof(*v))))
		return DCR_ERR(-ENOMEM);
	c->val = v;
	if (!(v = realloc(c->add, n * sizeof(*v))))
		return DCR_ERR(-ENOMEM);
	c->add = v;
	c->ncap = n;
	return 0;
}

static int reserve_models(struct dcr_elem_ctx *c, int enc)
{
	for (int i = 0; i < 2; i++) {
		if (enc && !c->enc[i] && !(c->enc[i] = malloc(sizeof(*c->enc[i]))))
			return DCR_ERR(-ENOMEM);
		if (!enc && !c->dec[i] && !(c->dec[i] = malloc(sizeof(*c->dec[i]))))
			return DCR_ERR(-ENOMEM);
	}
	return 0;
}

/* ----------------------------------------------------------- segments */

static size_t seg_push(struct dcr_seg *segs, size_t n, uint32_t off,
		       uint32_t len, uint8_t dt)
{
	if (n && segs[n - 1].dtype == dt) {
		segs[n - 1].len += len;
		return n;
	}
	segs[n].off = off;
	segs[n].len = len;
	segs[n].dtype = dt;
	return n + 1;
}

size_t dcr_elem_segments(const struct dcr_elem_hint *h, size_t len,
			 struct dcr_seg *segs, size_t cap)
{
	struct dcr_seg tmp;
	size_t n = 0;
	uint64_t c0, c1, pos = 0;

	if (!h || !h->n || cap < 2 || len == 0)
		goto all_bytes;
	c0 = h->chunk_off;
	c1 = c0 + len;
	/* first region ending after the chunk start */
	size_t lo = dcr_first_ending_after(h->r, h->n, sizeof(*h->r),
					   offsetof(struct dcr_region, off),
					   offsetof(struct dcr_region, len), c0);
	for (size_t i = lo; i < h->n && h->r[i].off < c1; i++) {
		const struct dcr_region *r = &h->r[i];
		unsigned w = dcr_dtype_width(r->dtype);
		if (r->dtype == DCR_DT_BYTES || r->dtype >= DCR_DT_COUNT)
			continue;
		uint64_t s = DCR_MAX(r->off, c0), e = DCR_MIN(r->off + r->len, c1);
		s = r->off + DCR_DIV_ROUND_UP(s - r->off, w) * w;
		e = r->off + (e - r->off) / w * w;
		if (s < c0 + pos)  /* overlapping regions: keep the first */
			continue;
		if (e <= s || e - s < SEG_MIN)
			continue;
		if (n + 2 >= cap)
			break;
		if (s > c0 + pos)
			n = seg_push(segs, n, (uint32_t)pos, (uint32_t)(s - c0 - pos),
				     DCR_DT_BYTES);
		n = seg_push(segs, n, (uint32_t)(s - c0), (uint32_t)(e - s), r->dtype);
		pos = e - c0;
	}
	if (pos < len)
		n = seg_push(segs, n, (uint32_t)pos, (uint32_t)(len - pos), DCR_DT_BYTES);
	return n;
all_bytes:
	tmp.off = 0;
	tmp.len = (uint32_t)len;
	tmp.dtype = DCR_DT_BYTES;
	segs[0] = tmp;
	return 1;
}

/* ------------------------------------------------------------- planes */

/* Split the @len bytes of @src (elements of @dt) into planes at @dst. */
static void to_planes(const uint8_t *src, size_t len, unsigned dt, uint8_t *dst)
{
	unsigned w = dcr_dtype_width(dt);
	size_t n = len / w;

	if (dt == DCR_DT_BF16) {
		uint8_t *p0 = dst, *p1 = dst + n;
		size_t i = 0;
#ifdef __SSE2__
		const __m128i m7 = _mm_set1_epi16(0x7f), m80 = _mm_set1_epi16(0x80);
		const __m128i mff = _mm_set1_epi16(0xff);
		for (; i + 16 <= n; i += 16) {
			const __m128i *s = (const __m128i *)(const void *)(src + 2 * i);
			__m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1);
			__m128i ea = _mm_and_si128(_mm_srli_epi16(a, 7), mff);
			__m128i eb = _mm_and_si128(_mm_srli_epi16(b, 7), mff);
			__m128i sa = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(a, 8), m80),
						  _mm_and_si128(a, m7));
			__m128i sb = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(b, 8), m80),
						  _mm_and_si128(b, m7));
			_mm_storeu_si128((__m128i *)(void *)(p0 + i), _mm_packus_epi16(ea, eb));
			_mm_storeu_si128((__m128i *)(void *)(p1 + i), _mm_packus_epi16(sa, sb));
		}
#endif
		for (; i < n; i++) {
			uint32_t x = dcr_get_le16(src + 2 * i);
			p0[i] = (uint8_t)(x >> 7);
			p1[i] = (uint8_t)(((x >> 8) & 0x80) | (x & 0x7f));
		}
	} else if (dt == DCR_DT_F32) {
		uint8_t *p0 = dst, *p1 = dst + n, *p2 = dst + 2 * n, *p3 = dst + 3 * n;
		size_t i = 0;
#ifdef __SSE2__
		const __m128i m7 = _mm_set1_epi16(0x7f), m80 = _mm_set1_epi16(0x80);
		const __m128i mff = _mm_set1_epi16(0xff);
		for (; i + 16 <= n; i += 16) {
			const __m128i *sp = (const __m128i *)(const void *)(src + 4 * i);
			__m128i h[2], l[2];
			for (int k = 0; k < 2; k++) {
				__m128i a = _mm_loadu_si128(sp + 2 * k);
				__m128i b = _mm_loadu_si128(sp + 2 * k + 1);
				/* exact 16-bit halves: sign-extended, so packs keeps them */
				h[k] = _mm_packs_epi32(_mm_srai_epi32(a, 16), _mm_srai_epi32(b, 16));
				l[k] = _mm_packs_epi32(_mm_srai_epi32(_mm_slli_epi32(a, 16), 16),
						       _mm_srai_epi32(_mm_slli_epi32(b, 16), 16));
			}
			__m128i e[2], s[2];
			for (int k = 0; k < 2; k++) {
				e[k] = _mm_and_si128(_mm_srli_epi16(h[k], 7), mff);
				s[k] = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(h[k], 8), m80),
						    _mm_and_si128(h[k], m7));
			}
			_mm_storeu_si128((__m128i *)(void *)(p0 + i), _mm_packus_epi16(e[0], e[1]));
			_mm_storeu_si128((__m128i *)(void *)(p1 + i), _mm_packus_epi16(s[0], s[1]));
			_mm_storeu_si128((__m128i *)(void *)(p2 + i),
					 _mm_packus_epi16(_mm_srli_epi16(l[0], 8), _mm_srli_epi16(l[1], 8)));
			_mm_storeu_si128((__m128i *)(void *)(p3 + i),
					 _mm_packus_epi16(_mm_and_si128(l[0], mff),
							  _mm_and_si128(l[1], mff)));
		}
#endif
		for (; i < n; i++) {
			uint32_t x = dcr_get_le32(src + 4 * i);
			p0[i] = (uint8_t)(x >> 23);
			p1[i] = (uint8_t)(((x >> 24) & 0x80) | ((x >> 16) & 0x7f));
			p2[i] = (uint8_t)(x >> 8);
			p3[i] = (uint8_t)x;
		}
	} else if (w == 1) {
		memcpy(dst, src, len);
	} else {
		for (unsigned k = 0; k < w; k++)
			for (size_t i = 0; i < n; i++)
				dst[k * n + i] = src[w * i + k];
	}
}

/* Inverse of to_planes from the planes @pp[0..w), storing into or XORing
 * onto @dst. */
static void from_planes(const uint8_t *const *pp, size_t len, unsigned dt,
			uint8_t *dst, int xor_onto)
{
	unsigned w = dcr_dtype_width(dt);
	size_t n = len / w;

	if (dt == DCR_DT_BF16) {
		const uint8_t *p0 = pp[0], *p1 = pp[1];
		size_t i = 0;
#ifdef __SSE2__
		const __m128i z = _mm_setzero_si128(), m7 = _mm_set1_epi16(0x7f);
		const __m128i m80 = _mm_set1_epi16(0x80);
		for (; i + 16 <= n; i += 16) {
			__m128i e = _mm_loadu_si128((const __m128i *)(const void *)(p0 + i));
			__m128i s = _mm_loadu_si128((const __m128i *)(const void *)(p1 + i));
			__m128i el = _mm_unpacklo_epi8(e, z), eh = _mm_unpackhi_epi8(e, z);
			__m128i sl = _mm_unpacklo_epi8(s, z), sh = _mm_unpackhi_epi8(s, z);
			__m128i lo = _mm_or_si128(_mm_or_si128(_mm_slli_epi16(_mm_and_si128(sl, m80), 8),
							       _mm_slli_epi16(el, 7)),
						  _mm_and_si128(sl, m7));
			__m128i hi = _mm_or_si128(_mm_or_si128(_mm_slli_epi16(_mm_and_si128(sh, m80), 8),
							       _mm_slli_epi16(eh, 7)),
						  _mm_and_si128(sh, m7));
			__m128i *d = (__m128i *)(void *)(dst + 2 * i);
			if (xor_onto) {
				lo = _mm_xor_si128(lo, _mm_loadu_si128(d));
				hi = _mm_xor_si128(hi, _mm_loadu_si128(d + 1));
			}
			_mm_storeu_si128(d, lo);
			_mm_storeu_si128(d + 1, hi);
		}
#endif
		for (; i < n; i++) {
			uint32_t s = p1[i];
			uint16_t x = (uint16_t)(((s & 0x80) << 8) | ((uint32_t)p0[i] << 7) |
						(s & 0x7f));
			if (xor_onto)
				x ^= dcr_get_le16(dst + 2 * i);
			dcr_put_le16(dst + 2 * i, x);
		}
	} else if (dt == DCR_DT_F32) {
		const uint8_t *p0 = pp[0], *p1 = pp[1], *p2 = pp[2], *p3 = pp[3];
		size_t i = 0;
#ifdef __SSE2__
		const __m128i z = _mm_setzero_si128(), m7 = _mm_set1_epi16(0x7f);
		const __m128i m80 = _mm_set1_epi16(0x80);
		for (; i + 16 <= n; i += 16) {
			__m128i e = _mm_loadu_si128((const __m128i *)(const void *)(p0 + i));
			__m128i s = _mm_loadu_si128((const __m128i *)(const void *)(p1 + i));
			__m128i b2 = _mm_loadu_si128((const __m128i *)(const void *)(p2 + i));
			__m128i b3 = _mm_loadu_si128((const __m128i *)(const void *)(p3 + i));
			/* the high halves are bf16 patterns, the low halves bytes 2, 3 */
			__m128i el = _mm_unpacklo_epi8(e, z), eh = _mm_unpackhi_epi8(e, z);
			__m128i sl = _mm_unpacklo_epi8(s, z), sh = _mm_unpackhi_epi8(s, z);
			__m128i hl = _mm_or_si128(_mm_or_si128(_mm_slli_epi16(_mm_and_si128(sl, m80), 8),
							       _mm_slli_epi16(el, 7)),
						  _mm_and_si128(sl, m7));
			__m128i hh = _mm_or_si128(_mm_or_si128(_mm_slli_epi16(_mm_and_si128(sh, m80), 8),
							       _mm_slli_epi16(eh, 7)),
						  _mm_and_si128(sh, m7));
			__m128i ll = _mm_unpacklo_epi8(b3, b2), lh = _mm_unpackhi_epi8(b3, b2);
			__m128i o[4] = { _mm_unpacklo_epi16(ll, hl), _mm_unpackhi_epi16(ll, hl),
					 _mm_unpacklo_epi16(lh, hh), _mm_unpackhi_epi16(lh, hh) };
			__m128i *d = (__m128i *)(void *)(dst + 4 * i);
			for (int k = 0; k < 4; k++) {
				if (xor_onto)
					o[k] = _mm_xor_si128(o[k], _mm_loadu_si128(d + k));
				_mm_storeu_si128(d + k, o[k]);
			}
		}
#endif
		for (; i < n; i++) {
			uint32_t s = p1[i];
			uint32_t x = ((s & 0x80) << 24) | ((uint32_t)p0[i] << 23) |
				     ((s & 0x7f) << 16) | ((uint32_t)p2[i] << 8) | p3[i];
			if (xor_onto)
				x ^= dcr_get_le32(dst + 4 * i);
			dcr_put_le32(dst + 4 * i, x);
		}
	} else if (w == 1) {
		if (xor_onto)
			dcr_xor(dst, pp[0], len);
		else
			memcpy(dst, pp[0], len);
	} else {
		for (unsigned k = 0; k < w; k++)
			for (size_t i = 0; i < n; i++) {
				if (xor_onto)
					dst[w * i + k] ^= pp[k][i];
				else
					dst[w * i + k] = pp[k][i];
			}
	}
}

static int planes_encode(struct dcr_elem_ctx *c, const uint8_t *src, size_t len,
			 unsigned dt, struct dcr_buf *out)
{
	unsigned w = dcr_dtype_width(dt);
	size_t n = len / w;
	int ret;

	to_planes(src, len, dt, c->pbuf);
	for (unsigned k = 0; k < w; k++)
		if ((ret = dcr_ent_plane_encode(c->pbuf + k * n, n, out)))
			return ret;
	return 0;
}

static int rec_scan_planes(struct dcr_elem_ctx *c, const uint8_t *const *pp,
			   size_t n, unsigned w, uint32_t base);

/* With @rw (delta only), the changed elements are listed in c->rec (at
 * chunk offset @base). */
static int planes_apply(struct dcr_elem_ctx *c, struct dcr_rd *r, uint8_t *dst,
			size_t len, unsigned dt, int delta, unsigned rw,
			uint32_t base)
{
	unsigned w = dcr_dtype_width(dt);
	size_t n = len / w;
	int ret;

	const uint8_t *pp[4];

	for (unsigned k = 0; k < w; k++)
		if ((ret = dcr_ent_plane_decode_ref(r, c->pbuf + k * n, n, c->dec[0],
						    &pp[k])))
			return ret;
	from_planes(pp, len, dt, dst, delta);
	return delta && rw ? rec_scan_planes(c, pp, n, w, base) : 0;
}

/* ------------------------------------------------------------- sparse */

/*
 * Collect the changed elements of width @w of a (new) vs b (old): their
 * indices, XOR values and zigzag differences zigzag(a - b) (the ADD
 * values, so the encoder never reads the elements again). Returns the
 * count, or limit + 1 once it exceeds @limit.
 */
static inline size_t scan_w(const uint8_t *a, const uint8_t *b, size_t len,
			    unsigned w, uint32_t *idx, uint32_t *val, uint32_t *add,
			    size_t limit)
{
	const unsigned lanes = 8 / w;
	const uint32_t m = wmask(w);
	size_t n = 0, i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t na = ld64le(a + i), ob = ld64le(b + i), x = na ^ ob;
		if (DCR_LIKELY(!x))
			continue;
		uint32_t e0 = (uint32_t)(i / w);
		for (unsigned k = 0; k < lanes; k++) {
			unsigned sh = k * 8 * w;
			uint32_t v = (uint32_t)(x >> sh) & m;
			if (v) {
				uint32_t d = (uint32_t)(na >> sh) - (uint32_t)(ob >> sh);
				idx[n] = e0 + k;
				val[n] = v;
				add[n] = zigzag(d & m, w);
				n++;
			}
		}
		if (n > limit)
			return limit + 1;
	}
	for (; i + w <= len; i += w) {
		uint32_t na = ldw(a + i, w), ob = ldw(b + i, w);
		if (na != ob) {
			idx[n] = (uint32_t)(i / w);
			val[n] = na ^ ob;
			add[n] = zigzag((na - ob) & wmask(w), w);
			n++;
		}
	}
	return n > limit ? limit + 1 : n;
}

#ifdef DCR_SCAN_AVX512
/*
 * scan_w for 2- and 4-byte elements, 64 bytes a step and no branch on
 * the data but the all-equal test: the changed lanes' values (widened
 * to 32 bits), zigzag differences and indices are compressed into place
 * (vpcompressd), 16 lanes stored a time past the count, so @idx, @val
 * and @add need SCAN_SLACK entries beyond @limit. The tail goes to
 * scan_w.
 */
__attribute__((target("avx512f,avx512bw,popcnt")))
static size_t scan_avx512(const uint8_t *a, const uint8_t *b, size_t len,
			  unsigned w, uint32_t *idx, uint32_t *val, uint32_t *add,
			  size_t limit)
{
	const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9,
					       10, 11, 12, 13, 14, 15);
	const __m512i sixteen = _mm512_set1_epi32(16);
	size_t n = 0, i = 0;

	for (; i + 64 <= len; i += 64) {
		__m512i na = _mm512_loadu_si512((const void *)(a + i));
		__m512i ob = _mm512_loadu_si512((const void *)(b + i));
		__m512i x = _mm512_xor_si512(na, ob);
		__m512i e = _mm512_add_epi32(_mm512_set1_epi32((int)(i / w)), iota);
		if (w == 4) {
			__mmask16 m = _mm512_test_epi32_mask(x, x);
			if (!m)
				continue;
			__m512i d = _mm512_sub_epi32(na, ob);
			__m512i z = _mm512_xor_si512(_mm512_add_epi32(d, d),
						     _mm512_srai_epi32(d, 31));
			_mm512_storeu_si512((void *)(val + n), _mm512_maskz_compress_epi32(m, x));
			_mm512_storeu_si512((void *)(add + n), _mm512_maskz_compress_epi32(m, z));
			_mm512_storeu_si512((void *)(idx + n), _mm512_maskz_compress_epi32(m, e));
			n += (unsigned)__builtin_popcount(m);
		} else {
			__mmask32 m = _mm512_test_epi16_mask(x, x);
			if (!m)
				continue;
			__m512i d = _mm512_sub_epi16(na, ob);
			__m512i z = _mm512_xor_si512(_mm512_add_epi16(d, d),
						     _mm512_srai_epi16(d, 15));
			__mmask16 lo = (__mmask16)m, hi = (__mmask16)(m >> 16);
			__m512i vl = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(x));
			__m512i vh = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(x, 1));
			__m512i zl = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(z));
			__m512i zh = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(z, 1));
			_mm512_storeu_si512((void *)(val + n), _mm512_maskz_compress_epi32(lo, vl));
			_mm512_storeu_si512((void *)(add + n), _mm512_maskz_compress_epi32(lo, zl));
			_mm512_storeu_si512((void *)(idx + n), _mm512_maskz_compress_epi32(lo, e));
			n += (unsigned)__builtin_popcount(lo);
			e = _mm512_add_epi32(e, sixteen);
			_mm512_storeu_si512((void *)(val + n), _mm512_maskz_compress_epi32(hi, vh));
			_mm512_storeu_si512((void *)(add + n), _mm512_maskz_compress_epi32(hi, zh));
			_mm512_storeu_si512((void *)(idx + n), _mm512_maskz_compress_epi32(hi, e));
			n += (unsigned)__builtin_popcount(hi);
		}
		if (n > limit)
			return limit + 1;
	}
	size_t t = w == 4 ? scan_w(a + i, b + i, len - i, 4, idx + n, val + n, add + n,
				   limit - n)
			  : scan_w(a + i, b + i, len - i, 2, idx + n, val + n, add + n,
				   limit - n);
	if (t > limit - n)
		return limit + 1;
	for (size_t k = n; k < n + t; k++)
		idx[k] += (uint32_t)(i / w);
	return n + t;
}
#endif

static size_t scan(const uint8_t *a, const uint8_t *b, size_t len, unsigned w,
		   uint32_t *idx, uint32_t *val, uint32_t *add, size_t limit)
{
#ifdef DCR_SCAN_AVX512
	if (w != 1 && dcr_ent_simd() && __builtin_cpu_supports("avx512f") &&
	    __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("popcnt"))
		return scan_avx512(a, b, len, w, idx, val, add, limit);
#endif
	switch (w) {
	case 1:
		return scan_w(a, b, len, 1, idx, val, add, limit);
	case 2:
		return scan_w(a, b, len, 2, idx, val, add, limit);
	default:
		return scan_w(a, b, len, 4, idx, val, add, limit);
	}
}

/*
 * Encode the @nchg changes found by scan() as a sparse segment payload
 * appended to @out.
 */
static int sparse_encode(struct dcr_elem_ctx *c, size_t nchg, int xor_only,
			 struct dcr_buf *out)
{
	/* two copies of each histogram, for changes j even and odd, so
	 * counting a run of one symbol does not wait on its own stores */
	uint32_t hg[2][INT_NSYM], hx[2][INT_NSYM], ha[2][INT_NSYM];
	uint64_t ex = 0, ea = 0;
	uint16_t fg[INT_NSYM], fv[INT_NSYM];
	const uint32_t *idx = c->idx, *val = c->val, *add = c->add;
	unsigned k, ng = 0, nv = 0;
	int ret;

	memset(hg, 0, sizeof(hg));
	memset(hx, 0, sizeof(hx));
	memset(ha, 0, sizeof(ha));
	uint32_t prev = UINT32_MAX; /* the first gap is idx[0] */
	for (size_t j = 0; j < nchg; j++) {
		unsigned h = (unsigned)j & 1;
		hg[h][int_sym(idx[j] - prev - 1, &k)]++;
		prev = idx[j];
		hx[h][int_sym(val[j] - 1, &k)]++;
		ex += k;
		if (!xor_only) {
			ha[h][int_sym(add[j] - 1, &k)]++;
			ea += k;
		}
	}
	for (unsigned s = 0; s < INT_NSYM; s++) {
		hg[0][s] += hg[1][s];
		hx[0][s] += hx[1][s];
		ha[0][s] += ha[1][s];
	}
	int vm = VMODE_XOR;
	if (!xor_only &&
	    dcr_ent_cost(ha[0], INT_NSYM) + ea < dcr_ent_cost(hx[0], INT_NSYM) + ex)
		vm = VMODE_ADD;
	const uint32_t *hv = vm == VMODE_ADD ? ha[0] : hx[0];
	const uint32_t *vals = vm == VMODE_ADD ? add : val;
	for (unsigned s = 0; s < INT_NSYM; s++) {
		if (hg[0][s])
			ng = s + 1;
		if (hv[s])
			nv = s + 1;
	}
	if ((ret = dcr_ent_normalize(hg[0], ng, fg)) ||
	    (ret = dcr_ent_normalize(hv, nv, fv)) ||
	    (ret = reserve_models(c, 1)))
		return ret;
	if ((ret = dcr_buf_putc(out, (uint8_t)vm)) ||
	    (ret = dcr_buf_putc(out, PMODEL_GAPS2)) ||
	    (ret = dcr_buf_put_varint(out, nchg)) ||
	    (ret = dcr_ent_write_table(out, fg, ng)) ||
	    (ret = dcr_ent_write_table(out, fv, nv)))
		return ret;
	/*
	 * Change j is coded by state j % SP_NS into stream j % SP_NS, so the
	 * decoder follows SP_NS independent dependency chains. Each stream
	 * is built backwards at the end of its own region: a change costs at
	 * most 12 bytes (two symbols of SCALE bits and up to 29 extra bits
	 * each), plus the flushed state and the scratch word below.
	 */
	size_t hdr = out->len, rb = 12 * DCR_DIV_ROUND_UP(nchg, SP_NS) + 64;
	if ((ret = dcr_buf_reserve(out, hdr + SP_NS * 10 + SP_NS * rb)))
		return ret;
	struct dcr_ent_enc *mg = c->enc[0], *mv = c->enc[1];
	dcr_ent_enc_init(mg, fg, ng);
	dcr_ent_enc_init(mv, fv, nv);
	_Static_assert(SP_NS == 2, "the loop below codes two states");
	uint8_t *base0 = out->data + hdr + SP_NS * 10;
	uint8_t *end0 = base0 + rb, *end1 = base0 + 2 * rb, *p0 = end0, *p1 = end1;
	uint32_t x0 = DCR_RANS_L, x1 = DCR_RANS_L;
	size_t j = nchg;
	if (j & 1) {
		j--;
		put_int(&x0, &p0, mv, vals[j] - 1);
		put_int(&x0, &p0, mg, j ? idx[j] - idx[j - 1] - 1 : idx[j]);
	}
	while (j) {
		j -= 2;
		put_int(&x1, &p1, mv, vals[j + 1] - 1);
		put_int(&x1, &p1, mg, idx[j + 1] - idx[j] - 1);
		put_int(&x0, &p0, mv, vals[j] - 1);
		put_int(&x0, &p0, mg, j ? idx[j] - idx[j - 1] - 1 : idx[j]);
	}
	dcr_rans_flush(x0, &p0);
	dcr_rans_flush(x1, &p1);
	size_t len0 = (size_t)(end0 - p0), len1 = (size_t)(end1 - p1);
	if ((ret = dcr_buf_put_varint(out, len0)) ||
	    (ret = dcr_buf_put_varint(out, len1)))
		return ret;
	memmove(out->data + out->len, p0, len0);
	out->len += len0;
	memmove(out->data + out->len, p1, len1);
	out->len += len1;
	return 0;
}

/*
 * Sparse decoding. Each slot of a model is one 32-bit entry, so a symbol
 * costs one table load: frequency (13 bits, a lone symbol has
 * DCR_ENT_TOTAL), bias in the symbol (12 bits) and the symbol (7 bits).
 * The two tables of a segment take 32 KiB (the slot and symbol arrays of
 * struct dcr_ent_dec took 40), so they mostly stay in L1.
 */
#define SP_BIAS_SHIFT 13
#define SP_SYM_SHIFT 25
_Static_assert(INT_NSYM <= 1u << (32 - SP_SYM_SHIFT), "symbol field");
_Static_assert(DCR_ENT_TOTAL < 1u << SP_BIAS_SHIFT, "frequency field");

/* Fill @t[0..TOTAL) from @freq[0..nsym), which sums to DCR_ENT_TOTAL. */
static void sparse_table(uint32_t *t, const uint16_t *freq, unsigned nsym)
{
	uint32_t start = 0;

	for (unsigned s = 0; s < nsym; s++) {
		uint32_t e = freq[s] | (uint32_t)s << SP_SYM_SHIFT;
		for (uint32_t k = 0; k < freq[s]; k++)
			t[start + k] = e + (k << SP_BIAS_SHIFT);
		start += freq[s];
	}
}

/*
 * Per symbol of the integer symbolisation (frame.h): the value of its
 * top bits, shifted into place, | k << 24, k its extra bits; symbols with
 * more than 15 extra bits (integers from 2^18) have k = 0xff instead.
 */
#define SP_K(s) ((s) < 16 ? 0u : ((s) >> 2) - 2u)
#define SP_E(s) (SP_K(s) > 15 ? 0xff000000u : \
		 ((s) < 16 ? (s) : (4u | ((s) & 3)) << SP_K(s)) | SP_K(s) << 24)
#define SP_E4(s) SP_E(s), SP_E((s) + 1), SP_E((s) + 2), SP_E((s) + 3)
#define SP_E16(s) SP_E4(s), SP_E4((s) + 4), SP_E4((s) + 8), SP_E4((s) + 12)
static const uint32_t sp_top[INT_NSYM] = {
	SP_E16(0u), SP_E16(16u), SP_E16(32u), SP_E16(48u),
	SP_E16(64u), SP_E16(80u), SP_E16(96u), SP_E16(112u)
};
_Static_assert(INT_NSYM == 128, "sp_top");

/*
 * Decode one integer of the integer symbolisation with at most 15 extra
 * bits, unchecked: the stream words come from *@wb (low word first; it
 * must hold the two a decode may take) and *@used counts those taken.
 * Returns the integer, or UINT32_MAX with *@x untouched where the symbol
 * has more extra bits (the caller takes the checked path). UINT32_MAX
 * itself needs 29 extra bits, so it is never a fast-path result.
 */
static inline __attribute__((always_inline)) uint32_t
sp_int_fast(uint32_t *x, uint64_t *wb, unsigned *used, const uint32_t *t)
{
	uint32_t v = *x, e = t[v & (DCR_ENT_TOTAL - 1)];
	/* a lookup, not a branch on s < 16: gaps fall on both sides at random */
	uint32_t top = sp_top[e >> SP_SYM_SHIFT], k = top >> 24;

	if (DCR_UNLIKELY(k > 15))
		return UINT32_MAX;
	v = (e & ((1u << SP_BIAS_SHIFT) - 1)) * (v >> DCR_ENT_SCALE) +
	    ((e >> SP_BIAS_SHIFT) & (DCR_ENT_TOTAL - 1));
	/*
	 * Renormalise (at most one word), then take the k extra bits and
	 * renormalise again; k == 0 changes nothing. Unlike the rest of the
	 * coder these ?: may become branches: a renormalisation is taken
	 * with probability about bits/16, so it is mostly predicted, and a
	 * predicted branch takes it off the state's dependency chain, where
	 * a conditional move or the arithmetic select of dcr_rans_renorm
	 * adds 2 to 5 cycles per step (measured with bench_apply: cmov 5 to
	 * 10 %, arithmetic 25 % slower overall).
	 */
	uint64_t b = *wb;
	uint32_t n = v < DCR_RANS_L;
	v = n ? v << 16 | (uint32_t)(b & 0xffff) : v;
	b = n ? b >> 16 : b;
	uint32_t bits = v & ((1u << k) - 1);
	v >>= k;
	uint32_t n2 = v < DCR_RANS_L;
	v = n2 ? v << 16 | (uint32_t)(b & 0xffff) : v;
	b = n2 ? b >> 16 : b;
	*x = v;
	*wb = b;
	*used += n + n2;
	return (top & 0xffffff) | bits;
}

/* The same with bound checks, and for any number of extra bits. */
static uint32_t sp_int_checked(uint32_t *x, const uint32_t *t,
			       struct dcr_rans_in *in)
{
	uint32_t v = *x, e = t[v & (DCR_ENT_TOTAL - 1)];
	uint32_t s = e >> SP_SYM_SHIFT;

	v = (e & ((1u << SP_BIAS_SHIFT) - 1)) * (v >> DCR_ENT_SCALE) +
	    ((e >> SP_BIAS_SHIFT) & (DCR_ENT_TOTAL - 1));
	*x = dcr_rans_renorm(v, in);
	if (s < 16)
		return s;
	uint32_t k = (s >> 2) - 2, top = 4 | (s & 3), low;
	_Static_assert((INT_NSYM - 1) / 4 - 2 <= 29, "integers fit 32 bits");
	if (k > 15) {
		low = dcr_rans_get_bits(x, k - 15, in) << 15;
		low |= dcr_rans_get_bits(x, 15, in);
	} else {
		low = dcr_rans_get_bits(x, k, in);
	}
	return (top << k) | low;
}

/* Apply change value @v (XOR, or zigzag difference) onto element @e. */
static inline __attribute__((always_inline)) void
sparse_put(uint8_t *e, uint32_t v, unsigned w, int vm)
{
	uint32_t o = ldw(e, w);

	if (vm == VMODE_XOR)
		stw(e, w, o ^ v);
	else
		stw(e, w, (o + unzigzag(v, w)) & wmask(w));
}

/*
 * Decode one change from state *@x and its stream at *@pp with no bound
 * check (the stream holds the 8 bytes a change may take) and apply it
 * onto the element *@pos gaps on. Returns 0; 1 when the change has an
 * integer above 2^18 (nothing consumed: the caller takes the checked
 * path); -1 when it lies past the @nel elements or its value does not
 * fit the width.
 */
static inline __attribute__((always_inline)) int
sp_change_fast(uint32_t *x, const uint8_t **pp, const uint32_t *tg,
	       const uint32_t *tv, uint8_t *dst, uint64_t *pos, size_t nel,
	       unsigned w, int vm)
{
	uint64_t b = ld64le(*pp);
	unsigned used = 0;
	uint32_t x0 = *x;
	uint32_t g = sp_int_fast(x, &b, &used, tg);

	if (DCR_UNLIKELY(g == UINT32_MAX))
		return 1;
	uint32_t v = sp_int_fast(x, &b, &used, tv);
	if (DCR_UNLIKELY(v == UINT32_MAX)) {
		*x = x0;
		return 1;
	}
	uint64_t e = *pos + g;
	if (DCR_UNLIKELY((e >= nel) | (v >= wmask(w))))
		return -1;
	sparse_put(dst + e * w, v + 1, w, vm);
	*pos = e + 1;
	*pp += 2 * used;
	return 0;
}

/*
 * Decode the @nchg changes coded by the @ns (1 or 2) states @x in the
 * streams @in onto the @nel elements of width @w at @dst; change j is
 * state j % ns's. While each stream holds 8 more bytes per round of @ns
 * changes, a round is decoded with no bound check on the streams (a
 * change is 4 renormalisations of at most a word each), the states kept
 * apart so their dependency chains overlap; the rest, and changes with
 * integers above 2^18, take the checked decoder. Both read the same
 * words.
 */
static inline __attribute__((always_inline)) int
sparse_apply_w(const struct dcr_elem_ctx *c, struct dcr_rans_in *in,
	       uint32_t *x, unsigned ns, uint8_t *dst, size_t nel,
	       uint64_t nchg, unsigned w, int vm, uint32_t *rp, uint32_t rbase)
{
	const uint32_t *tg = c->dec[0]->packed, *tv = c->dec[1]->packed;
	uint64_t pos = 0, j = 0;

	while (j < nchg) {
		if (j % ns == 0) {
			/* rounds that surely have their 8 bytes a stream */
			uint64_t rounds = (nchg - j) / ns;
			for (unsigned k = 0; k < ns; k++)
				rounds = DCR_MIN(rounds, (uint64_t)(in[k].end - in[k].p) / 8);
			const uint8_t *p0 = in[0].p, *p1 = in[ns - 1].p;
			uint32_t x0 = x[0], x1 = x[ns - 1];
			int r = 0;
			for (; rounds; rounds--) {
				if ((r = sp_change_fast(&x0, &p0, tg, tv, dst, &pos, nel, w, vm)))
					break;
				if (rp)
					rp[j] = rbase + (uint32_t)((pos - 1) * w);
				j++;
				if (ns == 1)
					continue;
				if ((r = sp_change_fast(&x1, &p1, tg, tv, dst, &pos, nel, w, vm)))
					break;
				if (rp)
					rp[j] = rbase + (uint32_t)((pos - 1) * w);
				j++;
			}
			if (r < 0)
				return DCR_ERR(-EBADMSG);
			in[0].p = p0;
			x[0] = x0;
			if (ns > 1) {
				in[1].p = p1;
				x[1] = x1;
			}
			if (j == nchg)
				break;
		}
		/* one change with bound checks */
		unsigned k = (unsigned)(j % ns);
		pos += sp_int_checked(&x[k], tg, &in[k]);
		uint32_t v = sp_int_checked(&x[k], tv, &in[k]) + 1;
		if (DCR_UNLIKELY(pos >= nel || v > wmask(w) || v == 0 || in[k].bad))
			return DCR_ERR(-EBADMSG);
		sparse_put(dst + pos * w, v, w, vm);
		if (rp)
			rp[j] = rbase + (uint32_t)(pos * w);
		pos++;
		j++;
	}
	return 0;
}

/* sparse_apply_w for @ns states, dispatched on the width and mode. */
static inline __attribute__((always_inline)) int
sparse_apply_ns(const struct dcr_elem_ctx *c, struct dcr_rans_in *in,
		uint32_t *x, unsigned ns, uint8_t *dst, size_t nel,
		uint64_t nchg, unsigned w, int vm, uint32_t *rp, uint32_t rbase)
{
	switch (w << 1 | (unsigned)vm) {
	case 1 << 1 | VMODE_XOR:
		return sparse_apply_w(c, in, x, ns, dst, nel, nchg, 1, VMODE_XOR, rp, rbase);
	case 1 << 1 | VMODE_ADD:
		return sparse_apply_w(c, in, x, ns, dst, nel, nchg, 1, VMODE_ADD, rp, rbase);
	case 2 << 1 | VMODE_XOR:
		return sparse_apply_w(c, in, x, ns, dst, nel, nchg, 2, VMODE_XOR, rp, rbase);
	case 2 << 1 | VMODE_ADD:
		return sparse_apply_w(c, in, x, ns, dst, nel, nchg, 2, VMODE_ADD, rp, rbase);
	case 4 << 1 | VMODE_XOR:
		return sparse_apply_w(c, in, x, ns, dst, nel, nchg, 4, VMODE_XOR, rp, rbase);
	default:
		return sparse_apply_w(c, in, x, ns, dst, nel, nchg, 4, VMODE_ADD, rp, rbase);
	}
}

/* Room for @more entries in c->rec. 0 or -ENOMEM. */
static int rec_room(struct dcr_elem_ctx *c, size_t more)
{
	if (c->rec_n + more <= c->rec_cap)
		return 0;
	size_t cap = DCR_MAX(2 * c->rec_cap, DCR_MAX(c->rec_n + more, (size_t)4096));
	uint32_t *p = realloc(c->rec, cap * sizeof(*p));
	if (!p)
		return DCR_ERR(-ENOMEM);
	c->rec = p;
	c->rec_cap = cap;
	return 0;
}

/* The entry code (frame.h, DCR_REC_WSHIFT) of width @w. */
static inline uint32_t rec_wcode(unsigned w)
{
	return (uint32_t)(w == 4 ? 2 : w == 2 ? 1 : 0) << DCR_REC_WSHIFT;
}

/* List the elements of the @w byte planes @pp of @n elements each (the
 * XOR's bytes of element i, rearranged or not, are pp[k][i]: a bit
 * permutation within the element, so it is zero exactly when the XOR
 * is) that are not zero, at chunk offset @base on. 0 or -ENOMEM. */
static int rec_scan_planes(struct dcr_elem_ctx *c, const uint8_t *const *pp,
			   size_t n, unsigned w, uint32_t base)
{
	const uint32_t wc = rec_wcode(w);

	for (size_t i = 0; i < n; i += 8) {
		const size_t m = DCR_MIN((size_t)8, n - i);
		uint64_t any = 0;

		for (unsigned k = 0; k < w; k++)
			if (m == 8)
				any |= ld64(pp[k] + i);
			else
				for (size_t j = 0; j < m; j++)
					any |= pp[k][i + j];
		if (!any)
			continue;
		if (rec_room(c, 8))
			return DCR_ERR(-ENOMEM);
		for (size_t j = i; j < i + m; j++) {
			uint8_t b = 0;

			for (unsigned k = 0; k < w; k++)
				b |= pp[k][j];
			if (b)
				c->rec[c->rec_n++] = (base + (uint32_t)(j * w)) | wc;
		}
	}
	return 0;
}

/* List the elements of width @w of the XOR @x[0..len) that are not zero,
 * at chunk offset @base on. 0 or -ENOMEM. */
static int rec_scan(struct dcr_elem_ctx *c, const uint8_t *x, size_t len,
		    unsigned w, uint32_t base)
{
	const uint32_t wc = rec_wcode(w);
	size_t k = 0;

	for (; k + 8 <= len; k += 8) {
		if (!ld64(x + k))
			continue;
		if (rec_room(c, 8))
			return DCR_ERR(-ENOMEM);
		for (size_t l = k; l < k + 8; l += w)
			if (ldw(x + l, w))
				c->rec[c->rec_n++] = (base + (uint32_t)l) | wc;
	}
	for (; k < len; k += w)
		if (ldw(x + k, w)) {
			if (rec_room(c, 1))
				return DCR_ERR(-ENOMEM);
			c->rec[c->rec_n++] = (base + (uint32_t)k) | wc;
		}
	return 0;
}

/* With @rec, the changes are listed in c->rec (at chunk offset @base). */
static int sparse_apply(struct dcr_elem_ctx *c, struct dcr_rd *r, uint8_t *dst,
			size_t len, unsigned w, int rec, uint32_t base)
{
	uint8_t vm, pm;
	uint64_t nchg, clen[SP_NS];
	uint16_t fg[256], fv[256];
	unsigned ng, nv, ns;
	const uint8_t *src;
	size_t nel = len / w;
	struct dcr_rans_in in[SP_NS];
	uint32_t x[SP_NS];
	int ret;

	if (dcr_rd_u8(r, &vm) || dcr_rd_u8(r, &pm) || vm > VMODE_ADD ||
	    pm > PMODEL_GAPS2 || dcr_rd_varint_max(r, nel, &nchg) || nchg == 0 ||
	    dcr_ent_read_table(r, fg, INT_NSYM, &ng) ||
	    dcr_ent_read_table(r, fv, INT_NSYM, &nv))
		return DCR_ERR(-EBADMSG);
	ns = pm == PMODEL_GAPS2 ? SP_NS : 1;
	for (unsigned k = 0; k < ns; k++)
		if (dcr_rd_varint_max(r, dcr_rd_left(r), &clen[k]))
			return DCR_ERR(-EBADMSG);
	for (unsigned k = 0; k < ns; k++) {
		if (dcr_rd_bytes(r, clen[k], &src))
			return DCR_ERR(-EBADMSG);
		in[k] = (struct dcr_rans_in){ src, src + clen[k], 0 };
		x[k] = dcr_rans_init(&in[k]);
		if (in[k].bad)
			return DCR_ERR(-EBADMSG);
	}
	if ((ret = reserve_models(c, 0)))
		return ret;
	sparse_table(c->dec[0]->packed, fg, ng);
	sparse_table(c->dec[1]->packed, fv, nv);
	if (rec) {
		/* The same decoder with each change's place listed as it is
		 * written: the list is what the decode did. */
		if ((ret = rec_room(c, (size_t)nchg)))
			return ret;
		uint32_t *rp = c->rec + c->rec_n;
		base |= rec_wcode(w);
		if (ns == 1)
			ret = sparse_apply_ns(c, in, x, 1, dst, nel, nchg, w, vm, rp, base);
		else
			ret = sparse_apply_ns(c, in, x, SP_NS, dst, nel, nchg, w, vm, rp, base);
		if (!ret)
			c->rec_n += (size_t)nchg;
	} else if (ns == 1) {
		ret = sparse_apply_ns(c, in, x, 1, dst, nel, nchg, w, vm, NULL, 0);
	} else {
		ret = sparse_apply_ns(c, in, x, SP_NS, dst, nel, nchg, w, vm, NULL, 0);
	}
	if (ret)
		return ret;
	for (unsigned k = 0; k < ns; k++)
		if (in[k].bad || in[k].p != in[k].end || x[k] != DCR_RANS_L)
			return DCR_ERR(-EBADMSG);
	return 0;
}

/* --------------------------------------------------------------- zstd */

static int zstd_encode(struct dcr_elem_ctx *c, const uint8_t *src, size_t len,
		       struct dcr_buf *out)
{
	size_t bound = ZSTD_compressBound(len);
	int ret = dcr_buf_reserve(out, out->len + bound);

	if (ret)
		return ret;
	size_t n = ZSTD_compressCCtx(c->cctx, out->data + out->len, bound, src,
				     len, c->level);
	if (ZSTD_isError(n)) {
		dcr_err("zstd compression failed: %s", ZSTD_getErrorName(n));
		return DCR_ERR(-EIO);
	}
	out->len += n;
	return 0;
}

static int zstd_apply(struct dcr_elem_ctx *c, const uint8_t *p, size_t n,
		      uint8_t *dst, size_t len, int delta, unsigned rw, uint32_t base)
{
	if (ZSTD_getFrameContentSize(p, n) != len)
		return DCR_ERR(-EBADMSG);
	uint8_t *o = delta ? c->xbuf : dst;
	size_t got = ZSTD_decompressDCtx(c->dctx, o, len, p, n);
	if (ZSTD_isError(got) || got != len)
		return DCR_ERR(-EBADMSG);
	if (delta)
		dcr_xor(dst, o, len);
	return delta && rw ? rec_scan(c, o, len, rw, base) : 0;
}

/* ------------------------------------------------------------ encoder */

static int all_zero(const uint8_t *p, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		if (ld64(p + i))
			return 0;
	for (; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

/*
 * Encode one segment: try the candidate methods into c->cand and leave
 * the smallest's payload there. Returns the method or -errno.
 */
static int encode_seg(struct dcr_elem_ctx *c, const uint8_t *a, const uint8_t *b,
		      const struct dcr_seg *s, int xor_only)
{
	unsigned w = dcr_dtype_width(s->dtype);
	size_t len = s->len, nel = len / w;
	int ret, best = DCR_SM_RAW;
	size_t best_len = len;
	struct dcr_buf *o = &c->cand;

	dcr_buf_reset(o);
	if (b) {
		size_t limit = nel / SPARSE_DIV;
		if ((ret = reserve_sparse(c, limit + SCAN_SLACK)))
			return ret;
		size_t nchg = scan(a, b, len, w, c->idx, c->val, c->add, limit);
		if (nchg == 0)
			return DCR_SM_ZERO;
		if (nchg <= limit) {
			if ((ret = sparse_encode(c, nchg, xor_only, o)))
				return ret;
			if (o->len < best_len) {
				best = DCR_SM_SPARSE;
				best_len = o->len;
			}
			if (best_len <= len / 8)
				return best;
		}
		memcpy(c->xbuf, a, len);
		dcr_xor(c->xbuf, b, len);
		a = c->xbuf;
	} else if (all_zero(a, len)) {
		return DCR_SM_ZERO;
	}
	/*
	 * Dense: planes, and for byte mode zstd. The current best stays at
	 * the start of @o; a new candidate is appended after it and moved
	 * down when smaller.
	 */
	size_t keep = best == DCR_SM_RAW ? 0 : best_len;
	o->len = keep;
	if ((ret = planes_encode(c, a, len, s->dtype, o)))
		return ret;
	if (o->len - keep < best_len) {
		memmove(o->data, o->data + keep, o->len - keep);
		best_len = o->len - keep;
		best = DCR_SM_PLANES;
	}
	o->len = best == DCR_SM_RAW ? 0 : best_len;
	if (s->dtype == DCR_DT_BYTES) {
		keep = o->len;
		if ((ret = zstd_encode(c, a, len, o)))
			return ret;
		if (o->len - keep < best_len) {
			memmove(o->data, o->data + keep, o->len - keep);
			best_len = o->len - keep;
			best = DCR_SM_ZSTD;
		}
	}
	o->len = best == DCR_SM_RAW ? 0 : best_len;
	if (best == DCR_SM_RAW && (ret = dcr_buf_append(o, a, len)))
		return ret;
	return best;
}

int dcr_elem_encode(struct dcr_elem_ctx *c, const uint8_t *chunk,
		    const uint8_t *base, size_t len, const struct dcr_seg *segs,
		    size_t nseg, int xor_only, struct dcr_buf *out)
{
	int ret;

	if ((ret = reserve_bufs(c, len)))
		return ret;
	if ((ret = dcr_buf_putc(out, LAYOUT_VERSION)) ||
	    (ret = dcr_buf_put_varint(out, nseg)))
		return ret;
	for (size_t i = 0; i < nseg; i++) {
		const struct dcr_seg *s = &segs[i];
		int m = encode_seg(c, chunk + s->off, base ? base + s->off : NULL,
				   s, xor_only);
		if (m < 0)
			return m;
		c->st_method[m]++;
		size_t plen = m == DCR_SM_ZERO ? 0 : c->cand.len;
		if ((ret = dcr_buf_putc(out, s->dtype)) ||
		    (ret = dcr_buf_putc(out, (uint8_t)m)) ||
		    (ret = dcr_buf_put_varint(out, s->len)) ||
		    (ret = dcr_buf_put_varint(out, plen)) ||
		    (ret = dcr_buf_append(out, c->cand.data, plen)))
			return ret;
	}
	return 0;
}

/* ------------------------------------------------------------ decoder */

int dcr_elem_apply(struct dcr_elem_ctx *c, const uint8_t *p, size_t n,
		   int delta, uint8_t *dst, size_t len, int *rec)
{
	struct dcr_rd r;
	uint8_t ver, dt, m;
	uint64_t nseg, slen, plen;
	size_t pos = 0;
	int ret;

	dcr_rd_init(&r, p, n);
	if (dcr_rd_u8(&r, &ver) || ver != LAYOUT_VERSION ||
	    dcr_rd_varint_max(&r, DCR_FRAME_SEG_MAX, &nseg) || nseg == 0)
		return DCR_ERR(-EBADMSG);
	if ((ret = reserve_bufs(c, len)) || (ret = reserve_models(c, 0)))
		return ret;
	c->rec_n = 0;
	if (rec)
		*rec = delta;
	for (uint64_t i = 0; i < nseg; i++) {
		const uint8_t *sp;
		if (dcr_rd_u8(&r, &dt) || dcr_rd_u8(&r, &m) ||
		    dt >= DCR_DT_COUNT || m >= DCR_SM_COUNT ||
		    dcr_rd_varint_max(&r, len - pos, &slen) || slen == 0 ||
		    slen % dcr_dtype_width(dt) ||
		    dcr_rd_varint_max(&r, dcr_rd_left(&r), &plen) ||
		    dcr_rd_bytes(&r, plen, &sp))
			return DCR_ERR(-EBADMSG);
		struct dcr_rd sr;
		uint8_t *d = dst + pos;
		/* the width changes are listed at: 0 for none */
		const unsigned rw = rec && delta ? dcr_dtype_width(dt) : 0;
		dcr_rd_init(&sr, sp, plen);
		switch (m) {
		case DCR_SM_ZERO:
			if (plen)
				return DCR_ERR(-EBADMSG);
			if (!delta)
				memset(d, 0, slen);
			break;
		case DCR_SM_RAW:
			if (plen != slen)
				return DCR_ERR(-EBADMSG);
			if (delta)
				dcr_xor(d, sp, slen);
			else
				memcpy(d, sp, slen);
			if (rw)
				ret = rec_scan(c, sp, slen, rw, (uint32_t)pos);
			sr.p = sr.end;
			break;
		case DCR_SM_SPARSE:
			if (!delta)
				return DCR_ERR(-EBADMSG);
			ret = sparse_apply(c, &sr, d, slen, dcr_dtype_width(dt),
					   rw != 0, (uint32_t)pos);
			break;
		case DCR_SM_PLANES:
			ret = planes_apply(c, &sr, d, slen, dt, delta, rw,
					   (uint32_t)pos);
			break;
		default: /* DCR_SM_ZSTD */
			ret = zstd_apply(c, sp, plen, d, slen, delta, rw, (uint32_t)pos);
			sr.p = sr.end;
			break;
		}
		if (ret)
			return ret;
		if (dcr_rd_left(&sr))
			return DCR_ERR(-EBADMSG);
		pos += slen;
	}
	if (pos != len || dcr_rd_left(&r))
		return DCR_ERR(-EBADMSG);
	return 0;
}

int dcr_elem_cost(const uint8_t *p, size_t n, int delta, size_t len,
		  uint64_t *cost)
{
	static const uint8_t per_byte[DCR_SM_COUNT] = {
		[DCR_SM_ZERO] = 0, [DCR_SM_RAW] = DCR_COST_COPY,
		[DCR_SM_SPARSE] = DCR_COST_SPARSE, [DCR_SM_PLANES] = DCR_COST_PLANES,
		[DCR_SM_ZSTD] = DCR_COST_ZSTD,
	};
	struct dcr_rd r;
	uint8_t ver, dt, m;
	uint64_t nseg, slen, plen, sum = 0;
	const uint8_t *sp;
	size_t pos = 0;

	dcr_rd_init(&r, p, n);
	if (dcr_rd_u8(&r, &ver) || ver != LAYOUT_VERSION ||
	    dcr_rd_varint_max(&r, DCR_FRAME_SEG_MAX, &nseg) || nseg == 0)
		return DCR_ERR(-EBADMSG);
	for (uint64_t i = 0; i < nseg; i++) {
		if (dcr_rd_u8(&r, &dt) || dcr_rd_u8(&r, &m) ||
		    dt >= DCR_DT_COUNT || m >= DCR_SM_COUNT ||
		    dcr_rd_varint_max(&r, len - pos, &slen) || slen == 0 ||
		    dcr_rd_varint_max(&r, dcr_rd_left(&r), &plen) ||
		    dcr_rd_bytes(&r, plen, &sp))
			return DCR_ERR(-EBADMSG);
		if (m == DCR_SM_SPARSE)
			sum += per_byte[m] * plen; /* per changed element */
		else if (m != DCR_SM_ZERO || !delta)
			sum += (uint64_t)DCR_MAX(per_byte[m], DCR_COST_COPY) * slen;
		pos += slen;
	}
	if (pos != len || dcr_rd_left(&r))
		return DCR_ERR(-EBADMSG);
	*cost = sum;
	return 0;
}
