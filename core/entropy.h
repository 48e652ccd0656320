/* SPDX-License-Identifier: MIT */
/*
 * entropy.h - static rANS entropy coding for the element codec.
 *
 * A 32-bit rANS coder renormalised by 16-bit words (after Fabian
 * Giesen's public domain rans_byte.h, with state in [2^15, 2^31) so his
 * division-free encoder stays exact) with static models: the encoder counts symbols,
 * normalises the counts to DCR_ENT_SCALE bits and writes the table ahead
 * of the coded bytes; the decoder reads the table back. Alphabets have at
 * most 256 symbols.
 *
 * The encoder writes backwards into a caller buffer, so a coded stream is
 * produced from its last symbol to its first and read forward. Decoders
 * check every byte they read against the end of the stream and, at the
 * end, that the state returned to its initial value and every byte was
 * consumed, so truncated or corrupted streams are rejected rather than
 * read past.
 *
 * Table serialisation (tables are part of the frame format, frame.h):
 *   varint nsym (1..256), then nsym entries, each a varint v:
 *   v == 0 is followed by varint r: r+1 symbols of frequency 0;
 *   otherwise the symbol has frequency v (1..DCR_ENT_TOTAL).
 *   The frequencies must sum to DCR_ENT_TOTAL.
 *
 * Plane coding (dcr_ent_plane_*), one byte per symbol:
 *   u8 mode: 0 = constant (u8 value follows),
 *            1 = raw (n bytes follow),
 *            2 = rANS: table, 4 varint stream lengths, the 4 streams
 *                (symbol i is coded by state i % 4 in stream i % 4).
 *                Still decoded; the encoder now writes it only for
 *                small planes (below DCR_ENT_X32_MIN symbols).
 *            3 = rANS x32: table (at least 2 symbols present), varint
 *                stream length, then one stream: the 32 initial states
 *                (u32 LE, state 0 first), then 16-bit LE words. Symbol
 *                i is coded by state i % 32; all states share the
 *                stream, and decoding symbol i (in order) reads at most
 *                one word, right after the symbol. Made for SIMD
 *                decoding (8 states per AVX2 vector).
 *   The encoder stores a plane raw unless coding it saves at least
 *   1/DCR_ENT_RAW_DIV of its bytes: a nearly incompressible plane (the
 *   low mantissa bits of weights) is not worth its decoding time.
 */
#ifndef DCR_ENTROPY_H
#define DCR_ENTROPY_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "common.h"

#define DCR_ENT_SCALE 12
#define DCR_ENT_TOTAL (1u << DCR_ENT_SCALE)
#define DCR_RANS_L (1u << 15)

/** Encoder-side symbol: precomputed reciprocal so encoding never divides. */
struct dcr_rans_esym {
	uint32_t x_max;
	uint32_t rcp_freq;
	uint32_t bias;
	uint16_t cmpl_freq;
	uint16_t rcp_shift;
};

/** Encoder model: one entry per symbol of the alphabet. */
struct dcr_ent_enc {
	struct dcr_rans_esym s[256];
};

/** Decoder slot: the symbol owning a slot, its frequency and slot bias. */
struct dcr_ent_slot {
	uint16_t freq;
	uint16_t bias; /* slot - start of the symbol */
};

/** Decoder model: one entry per slot of DCR_ENT_TOTAL. */
struct dcr_ent_dec {
	union {
		struct dcr_ent_slot slot[DCR_ENT_TOTAL];
		/* plane mode 3: freq | bias << 12 | symbol << 24;
		 * sparse segments pack theirs as in codec_elem.c */
		uint32_t packed[DCR_ENT_TOTAL];
	};
	uint8_t sym[DCR_ENT_TOTAL];
};

/** Planes of fewer symbols use the 4-state coder (mode 2). */
#define DCR_ENT_X32_MIN 16384
/** A plane is coded only when that saves 1/DIV of its bytes. */
#define DCR_ENT_RAW_DIV 32

/**
 * dcr_ent_normalize - scale @cnt[0..nsym) to frequencies summing to
 * DCR_ENT_TOTAL, every present symbol getting at least 1.
 * Returns 0, or -EINVAL if no symbol is present or nsym > 256.
 */
int dcr_ent_normalize(const uint32_t *cnt, unsigned nsym, uint16_t *freq);

/**
 * dcr_ent_cost - estimated coded size in bits of the symbols counted in
 * @cnt[0..nsym) under their own order-0 model (table excluded).
 */
uint64_t dcr_ent_cost(const uint32_t *cnt, unsigned nsym);

/** Serialise @freq[0..nsym) (see the header comment). 0 or -errno. */
int dcr_ent_write_table(struct dcr_buf *out, const uint16_t *freq, unsigned nsym);

/**
 * dcr_ent_read_table - parse a table of at most @maxsym symbols into
 * @freq[0..256) (entries past the table are zero); *@nsym gets its size.
 * Returns 0 or -EBADMSG.
 */
int dcr_ent_read_table(struct dcr_rd *r, uint16_t *freq, unsigned maxsym,
		       unsigned *nsym);

/** Build the encoder model of @freq[0..nsym). */
void dcr_ent_enc_init(struct dcr_ent_enc *m, const uint16_t *freq, unsigned nsym);

/** Build the decoder model of @freq[0..nsym) (which must sum to TOTAL). */
void dcr_ent_dec_init(struct dcr_ent_dec *m, const uint16_t *freq, unsigned nsym);

/* ------------------------------------------------------ rANS primitives */

/*
 * The state lives in [L, 2^31) and is renormalised by whole 16-bit
 * little-endian words, at most one per symbol, so both directions update
 * it without data-dependent branches (conditional moves instead).
 */

/* Encode symbol @s into state *@x, writing words backwards at *@pp.
 * The two bytes below *@pp must be writable (scratch when unused). */
static inline void dcr_rans_put(uint32_t *x, uint8_t **pp,
				const struct dcr_rans_esym *s)
{
	uint32_t v = *x;
	uint8_t *p = *pp;
	uint32_t n = v >= s->x_max;

	p[-2] = (uint8_t)v;
	p[-1] = (uint8_t)(v >> 8);
	p -= 2 * n;
	v >>= n << 4;
	uint32_t q = (uint32_t)(((uint64_t)v * s->rcp_freq) >> 32) >> s->rcp_shift;
	*x = v + s->bias + q * s->cmpl_freq;
	*pp = p;
}

/* Encode @k (0..15) raw bits @bits into state *@x (k == 0: no change). */
static inline void dcr_rans_put_bits(uint32_t *x, uint8_t **pp, uint32_t bits,
				     unsigned k)
{
	uint32_t v = *x, n = v >= ((DCR_RANS_L >> k) << 16);
	uint8_t *p = *pp;

	p[-2] = (uint8_t)v;
	p[-1] = (uint8_t)(v >> 8);
	p -= 2 * n;
	v >>= n << 4;
	*x = (v << k) | bits;
	*pp = p;
}

/* Flush state @x (4 bytes, written backwards). */
static inline void dcr_rans_flush(uint32_t x, uint8_t **pp)
{
	uint8_t *p = *pp - 4;

	p[0] = (uint8_t)x;
	p[1] = (uint8_t)(x >> 8);
	p[2] = (uint8_t)(x >> 16);
	p[3] = (uint8_t)(x >> 24);
	*pp = p;
}

/** Bounded forward reader of a coded stream. */
struct dcr_rans_in {
	const uint8_t *p;
	const uint8_t *end;
	uint32_t bad; /* set when a read ran past the end or a value was invalid */
};

/* Initialise a decoder state from 4 bytes. */
static inline uint32_t dcr_rans_init(struct dcr_rans_in *in)
{
	if (in->end - in->p < 4) {
		in->bad = 1;
		in->p = in->end;
		return DCR_RANS_L;
	}
	uint32_t x = (uint32_t)in->p[0] | (uint32_t)in->p[1] << 8 |
		     (uint32_t)in->p[2] << 16 | (uint32_t)in->p[3] << 24;
	in->p += 4;
	if (x < DCR_RANS_L || x >= (1u << 31))
		in->bad = 1;
	return x;
}

static inline uint32_t dcr_rans_renorm(uint32_t x, struct dcr_rans_in *in)
{
	static const uint8_t zero2[2];
	const uint8_t *p = in->p;
	uint32_t avail = in->end - p >= 2;
	const uint8_t *q = avail ? p : zero2;
	uint32_t n = x < DCR_RANS_L;
	uint32_t w = (uint32_t)q[0] | (uint32_t)q[1] << 8;

	in->bad |= n & !avail;
	in->p = p + 2 * (n & avail);
	/* arithmetic, not ?:, so no unpredictable branch is generated */
	return (x << (n << 4)) | (w & (0u - n));
}

/* Decode one symbol from state *@x under model @m. */
static inline unsigned dcr_rans_get(uint32_t *x, const struct dcr_ent_dec *m,
				    struct dcr_rans_in *in)
{
	uint32_t v = *x, slot = v & (DCR_ENT_TOTAL - 1);
	const struct dcr_ent_slot e = m->slot[slot];

	v = e.freq * (v >> DCR_ENT_SCALE) + e.bias;
	*x = dcr_rans_renorm(v, in);
	return m->sym[slot];
}

/* Decode @k (1..15) raw bits. */
static inline uint32_t dcr_rans_get_bits(uint32_t *x, unsigned k,
					 struct dcr_rans_in *in)
{
	uint32_t v = *x, bits = v & ((1u << k) - 1);

	*x = dcr_rans_renorm(v >> k, in);
	return bits;
}

/* ------------------------------------------------------------ planes */

/**
 * dcr_ent_plane_encode - append the plane coding of @src[0..n) to @out,
 * choosing constant, raw or rANS, whichever is smallest. 0 or -errno.
 */
int dcr_ent_plane_encode(const uint8_t *src, size_t n, struct dcr_buf *out);

/**
 * dcr_ent_plane_decode - decode a plane of exactly @n bytes from @r into
 * @dst, using @dec as model storage. 0 or -EBADMSG.
 */
int dcr_ent_plane_decode(struct dcr_rd *r, uint8_t *dst, size_t n,
			 struct dcr_ent_dec *dec);

/**
 * dcr_ent_plane_decode_ref - dcr_ent_plane_decode that does not copy a
 * raw plane: *@out points at the plane's bytes, either inside @r's data
 * (raw) or @dst (decoded there). 0 or -EBADMSG.
 */
int dcr_ent_plane_decode_ref(struct dcr_rd *r, uint8_t *dst, size_t n,
			     struct dcr_ent_dec *dec, const uint8_t **out);

/**
 * dcr_ent_set_simd - allow (1, the default) or forbid (0) the codec's
 * SIMD paths where the CPU has them: the plane decoder, the element
 * codec's delta scan and the NaN/Inf count (nonfinite.h). For tests and
 * benchmarks only (the scalar paths must give the same results); not
 * thread-safe.
 */
void dcr_ent_set_simd(int on);

/** dcr_ent_simd - whether dcr_ent_set_simd allows the SIMD paths. */
int dcr_ent_simd(void);

#endif /* DCR_ENTROPY_H */
