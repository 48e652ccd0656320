/* SPDX-License-Identifier: MIT */
/*
 * safetensors.c - parse a safetensors header into element regions
 * (see safetensors.h). It walks the header with json.h's reader, which
 * checks every value it reads or skips as dcr_json_check does (strings
 * of valid UTF-8 with valid escapes, numbers as the grammar has them,
 * nesting bounded): one JSON grammar for the whole tree.
 */
#include "config.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "fileio.h"
#include "json.h"
#include "safetensors.h"

static int str_is(const char *s, size_t n, const char *lit)
{
	return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

/* A non-negative integer below 2^53 (offsets and shapes). */
static int json_uint(struct dcr_json *j, uint64_t *v)
{
	dcr_json_ws(j);
	if (j->p >= j->end || *j->p < '0' || *j->p > '9')
		return -1;
	uint64_t x = 0;
	int digits = 0;
	while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
		if (++digits > 16)
			return -1;
		x = x * 10 + (uint64_t)(*j->p - '0');
		j->p++;
	}
	if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
		return -1;
	*v = x;
	return 0;
}

static enum dcr_float_fmt map_float(const char *s, size_t n)
{
	static const struct {
		const char *name;
		enum dcr_float_fmt ff;
	} map[] = {
		{ "BF16", DCR_FF_BF16 }, { "F16", DCR_FF_F16 },
		{ "F32", DCR_FF_F32 }, { "F64", DCR_FF_F64 },
		{ "F8_E4M3", DCR_FF_F8_E4M3 }, { "F8_E5M2", DCR_FF_F8_E5M2 },
	};
	for (size_t i = 0; i < DCR_ARRAY_SIZE(map); i++)
		if (str_is(s, n, map[i].name))
			return map[i].ff;
	return DCR_FF_NONE;
}

/* Bytes per element of a safetensors dtype; 0 if unknown here. */
static unsigned dtype_width(const char *s, size_t n)
{
	static const struct {
		const char *name;
		unsigned w;
	} map[] = {
		{ "BOOL", 1 }, { "U8", 1 }, { "I8", 1 }, { "F8_E4M3", 1 },
		{ "F8_E5M2", 1 }, { "U16", 2 }, { "I16", 2 }, { "F16", 2 },
		{ "BF16", 2 }, { "U32", 4 }, { "I32", 4 }, { "F32", 4 },
		{ "U64", 8 }, { "I64", 8 }, { "F64", 8 },
	};
	for (size_t i = 0; i < DCR_ARRAY_SIZE(map); i++)
		if (str_is(s, n, map[i].name))
			return map[i].w;
	return 0;
}

static int map_dtype(const char *s, size_t n)
{
	static const struct {
		const char *name;
		uint8_t dt;
	} map[] = {
		{ "BF16", DCR_DT_BF16 }, { "F16", DCR_DT_F16 },
		{ "F32", DCR_DT_F32 }, { "F8_E4M3", DCR_DT_F8 },
		{ "F8_E5M2", DCR_DT_F8 }, { "I16", DCR_DT_U16 },
		{ "U16", DCR_DT_U16 }, { "I32", DCR_DT_U32 },
		{ "U32", DCR_DT_U32 }, { "F64", DCR_DT_U32 },
		{ "I64", DCR_DT_U32 }, { "U64", DCR_DT_U32 },
		{ "I8", DCR_DT_BYTES }, { "U8", DCR_DT_BYTES },
		{ "BOOL", DCR_DT_BYTES },
	};
	for (size_t i = 0; i < DCR_ARRAY_SIZE(map); i++)
		if (str_is(s, n, map[i].name))
			return map[i].dt;
	return -1;
}

/* A tensor's shape as the header gives it, if it can be kept. */
struct shape {
	uint8_t ndim; /* DCR_ST_NDIM_UNKNOWN: not kept */
	uint64_t d[DCR_ST_NDIM_MAX];
};

/* A shape [d, ...] into @sh; -1 (@j unmoved) if it is not one to keep. */
static int shape(struct dcr_json *j, struct shape *sh)
{
	struct dcr_json at = *j;

	sh->ndim = 0;
	if (dcr_json_expect(j, '['))
		goto not_kept;
	dcr_json_ws(j);
	if (j->p < j->end && *j->p == ']') {
		j->p++;
		return 0;
	}
	for (;;) {
		if (sh->ndim == DCR_ST_NDIM_MAX || json_uint(j, &sh->d[sh->ndim++]))
			goto not_kept;
		dcr_json_ws(j);
		if (j->p < j->end && *j->p == ']') {
			j->p++;
			return 0;
		}
		if (j->p >= j->end || *j->p++ != ',')
			goto not_kept;
	}
not_kept:
	*j = at;
	sh->ndim = DCR_ST_NDIM_UNKNOWN;
	return -1;
}

/*
 * Whether a kept shape @sh fits data_offsets [@b, @e) of dtype @dts:
 * its element count (times the width, where the dtype is known) must
 * not overflow 64 bits, and must be exactly the bytes the offsets span,
 * as the safetensors reference requires. A product that wraps (e.g.
 * [2^32, 2^32, 16] is 2^68, 0 modulo 2^64) would otherwise match an
 * empty tensor.
 */
static bool shape_fits(const struct shape *sh, const char *dts, size_t dtn,
		       uint64_t b, uint64_t e)
{
	uint64_t count = 1;
	unsigned w = dtype_width(dts, dtn);

	if (sh->ndim == DCR_ST_NDIM_UNKNOWN)
		return true;
	for (unsigned d = 0; d < sh->ndim; d++)
		if (__builtin_mul_overflow(count, sh->d[d], &count))
			return false;
	if (!w)
		return true;
	if (__builtin_mul_overflow(count, (uint64_t)w, &count))
		return false;
	return count == e - b;
}

/* One tensor entry {"dtype":..., "shape":[...], "data_offsets":[b,e]}. */
static int tensor(struct dcr_json *j, int *dt, const char **dts, size_t *dtn,
		  uint64_t *b, uint64_t *e, struct shape *sh)
{
	const char *s;
	size_t n;
	int have = 0;

	sh->ndim = DCR_ST_NDIM_UNKNOWN;
	if (dcr_json_expect(j, '{'))
		return -1;
	for (;;) {
		if (dcr_json_string(j, &s, &n) || dcr_json_expect(j, ':'))
			return -1;
		if (str_is(s, n, "dtype")) {
			if (dcr_json_string(j, dts, dtn))
				return -1;
			*dt = map_dtype(*dts, *dtn);
			have |= 1;
		} else if (str_is(s, n, "data_offsets")) {
			if (dcr_json_expect(j, '[') || json_uint(j, b) ||
			    dcr_json_expect(j, ',') || json_uint(j, e) ||
			    dcr_json_expect(j, ']') || *e < *b)
				return -1;
			have |= 2;
		} else if (str_is(s, n, "shape") && !shape(j, sh)) {
			/* kept; any other shape is skipped as before */
		} else if (dcr_json_skip(j, 2)) {
			return -1;
		}
		dcr_json_ws(j);
		if (j->p >= j->end)
			return -1;
		if (*j->p == '}') {
			j->p++;
			break;
		}
		if (*j->p++ != ',')
			return -1;
	}
	if (have != 3 || !shape_fits(sh, *dts, *dtn, *b, *e))
		return -1;
	return 0;
}

static int cmp_region(const void *a, const void *b)
{
	const struct dcr_region *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

void dcr_regions_free(struct dcr_regions *r)
{
	if (!r)
		return;
	free(r->r);
	r->r = NULL;
	r->n = 0;
}

int dcr_safetensors_prefix_len(const void *p, size_t n, uint64_t file_size,
			       size_t *need)
{
	if (n < 8 || file_size < 8)
		return DCR_ERR(-EBADMSG);
	uint64_t h = dcr_get_le64(p);
	if (h < 2 || h > DCR_SAFETENSORS_HDR_MAX || h > file_size - 8)
		return DCR_ERR(-EBADMSG);
	*need = (size_t)(8 + h);
	return 0;
}

/*
 * One tensor of the header: its raw (still escaped) name and dtype
 * strings, the codec's dtype (-1 unknown), its data offsets relative
 * to the end of the header and its shape. Return non-zero to stop the
 * walk.
 */
typedef int (*tensor_fn)(const char *name, size_t name_len, const char *dtype,
			 size_t dtype_len, int dt, uint64_t b, uint64_t e,
			 const struct shape *sh, void *arg);

/*
 * Walk the header in @file_prefix[0..n) of a file of @file_size bytes,
 * calling @fn per tensor; *@data0 gets the file offset of the data
 * before the first call.
 * 0, -EBADMSG, -ENODATA, or what @fn returned.
 */
static int walk(const void *file_prefix, size_t n, uint64_t file_size,
		uint64_t *data0, tensor_fn fn, void *arg)
{
	size_t need;
	int ret = dcr_safetensors_prefix_len(file_prefix, n, file_size, &need);

	if (ret)
		return ret;
	if (n < need)
		return DCR_ERR(-ENODATA);
	*data0 = need;
	struct dcr_json j = { (const char *)file_prefix + 8,
			      (const char *)file_prefix + need };
	if (dcr_json_expect(&j, '{'))
		return DCR_ERR(-EBADMSG);
	dcr_json_ws(&j);
	if (j.p < j.end && *j.p == '}') {
		j.p++;
		goto done;
	}
	for (;;) {
		const char *s, *dts = "";
		size_t sn, dtn = 0;
		if (dcr_json_string(&j, &s, &sn) || dcr_json_expect(&j, ':'))
			return DCR_ERR(-EBADMSG);
		if (str_is(s, sn, "__metadata__")) {
			if (dcr_json_skip(&j, 1))
				return DCR_ERR(-EBADMSG);
		} else {
			int dt = -1;
			uint64_t b = 0, e = 0;
			struct shape sh;
			if (tensor(&j, &dt, &dts, &dtn, &b, &e, &sh) || e > file_size - need)
				return DCR_ERR(-EBADMSG);
			if ((ret = fn(s, sn, dts, dtn, dt, b, e, &sh, arg)))
				return ret;
		}
		dcr_json_ws(&j);
		if (j.p >= j.end)
			return DCR_ERR(-EBADMSG);
		if (*j.p == '}') {
			j.p++;
			break;
		}
		if (*j.p++ != ',')
			return DCR_ERR(-EBADMSG);
	}
done:
	/* Only padding may follow the object. */
	dcr_json_ws(&j);
	while (j.p < j.end && *j.p == '\0')
		j.p++;
	return j.p == j.end ? 0 : DCR_ERR(-EBADMSG);
}

struct regions_walk {
	struct dcr_regions rs;
	size_t cap;
	uint64_t data0;
};

static int region_cb(const char *name, size_t name_len, const char *dtype,
		     size_t dtype_len, int dt, uint64_t b, uint64_t e,
		     const struct shape *sh, void *arg)
{
	struct regions_walk *w = arg;

	if (dt <= 0 || e == b)
		return 0;
	if (dcr_array_grow(&w->rs.r, sizeof(*w->rs.r), w->rs.n, &w->cap))
		return DCR_ERR(-ENOMEM);
	w->rs.r[w->rs.n].off = w->data0 + b;
	w->rs.r[w->rs.n].len = e - b;
	w->rs.r[w->rs.n].dtype = (uint8_t)dt;
	w->rs.n++;
	return 0;
}

int dcr_safetensors_regions(const void *file_prefix, size_t n,
			    uint64_t file_size, struct dcr_regions *out)
{
	return dcr_safetensors_parse(file_prefix, n, file_size, out, NULL);
}

/* Append the JSON string body @s[0..n) unescaped to @dst (NUL-terminated). */
static void unescape(const char *s, size_t n, char *dst)
{
	for (size_t i = 0; i < n; i++) {
		if (s[i] != '\\') {
			*dst++ = s[i];
			continue;
		}
		char c = s[++i]; /* dcr_json_string() checked every escape */
		if (c != 'u') {
			static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
			*dst++ = to[strchr(from, c) - from];
			continue;
		}
		unsigned cp = 0;
		for (int k = 0; k < 4; k++) {
			char h = s[++i];
			cp = cp << 4 | (unsigned)(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
		}
		/* Surrogates and NUL are kept as '?': names are for display. */
		if (cp == 0 || (cp >= 0xd800 && cp < 0xe000)) {
			*dst++ = '?';
		} else if (cp < 0x80) {
			*dst++ = (char)cp;
		} else if (cp < 0x800) {
			*dst++ = (char)(0xc0 | cp >> 6);
			*dst++ = (char)(0x80 | (cp & 0x3f));
		} else {
			*dst++ = (char)(0xe0 | cp >> 12);
			*dst++ = (char)(0x80 | ((cp >> 6) & 0x3f));
			*dst++ = (char)(0x80 | (cp & 0x3f));
		}
	}
	*dst = 0;
}

struct tensors_walk {
	struct dcr_tensors ts;
	size_t cap;
	uint64_t data0;
};

/* dcr_safetensors_parse's walk: regions, and float tensors if wanted. */
struct parse_walk {
	struct regions_walk rw;
	struct tensors_walk tw;
	bool floats;
};

static int tensor_cb(const char *name, size_t name_len, const char *dtype,
		     size_t dtype_len, int dt, uint64_t b, uint64_t e,
		     const struct shape *sh, void *arg)
{
	struct tensors_walk *w = arg;

	if (dcr_array_grow(&w->ts.t, sizeof(*w->ts.t), w->ts.n, &w->cap))
		return DCR_ERR(-ENOMEM);
	struct dcr_tensor *t = &w->ts.t[w->ts.n];
	/* an escape never takes fewer bytes than its UTF-8 */
	if (!(t->name = malloc(name_len + 1)))
		return DCR_ERR(-ENOMEM);
	w->ts.n++;
	unescape(name, name_len, t->name);
	if (dtype_len >= sizeof(t->dtype))
		dtype_len = sizeof(t->dtype) - 1;
	memcpy(t->dtype, dtype, dtype_len);
	t->dtype[dtype_len] = 0;
	t->off = w->data0 + b;
	t->len = e - b;
	t->fmt = (uint8_t)map_float(dtype, dtype_len);
	t->ndim = sh->ndim;
	memcpy(t->shape, sh->d, sizeof(t->shape));
	return 0;
}

static int cmp_tensor(const void *a, const void *b)
{
	const struct dcr_tensor *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

int dcr_safetensors_tensors(const void *file_prefix, size_t n,
			    uint64_t file_size, struct dcr_tensors *out)
{
	struct tensors_walk w = { { NULL, 0 }, 0, 0 };

	out->t = NULL;
	out->n = 0;
	int ret = walk(file_prefix, n, file_size, &w.data0, tensor_cb, &w);
	if (ret) {
		dcr_tensors_free(&w.ts);
		return ret;
	}
	if (w.ts.n)
		qsort(w.ts.t, w.ts.n, sizeof(*w.ts.t), cmp_tensor);
	*out = w.ts;
	return 0;
}

static int parse_cb(const char *name, size_t name_len, const char *dtype,
		    size_t dtype_len, int dt, uint64_t b, uint64_t e,
		    const struct shape *sh, void *arg)
{
	struct parse_walk *w = arg;
	enum dcr_float_fmt ff = map_float(dtype, dtype_len);
	int ret = region_cb(name, name_len, dtype, dtype_len, dt, b, e, sh, &w->rw);

	if (ret || !w->floats || ff == DCR_FF_NONE || e == b)
		return ret;
	if ((e - b) % dcr_float_width(ff))
		return DCR_ERR(-EBADMSG);
	w->tw.data0 = w->rw.data0;
	return tensor_cb(name, name_len, dtype, dtype_len, dt, b, e, sh, &w->tw);
}

/* Empty the outputs of dcr_safetensors_parse (@floats may be NULL). */
static void parse_clear(struct dcr_regions *regions, struct dcr_tensors *floats)
{
	regions->r = NULL;
	regions->n = 0;
	if (floats) {
		floats->t = NULL;
		floats->n = 0;
	}
}

int dcr_safetensors_parse(const void *file_prefix, size_t n,
			  uint64_t file_size, struct dcr_regions *regions,
			  struct dcr_tensors *floats)
{
	struct parse_walk w = { .floats = floats != NULL };
	int ret;

	parse_clear(regions, floats);
	ret = walk(file_prefix, n, file_size, &w.rw.data0, parse_cb, &w);
	if (ret)
		goto err_free;
	if (w.rw.rs.n)
		qsort(w.rw.rs.r, w.rw.rs.n, sizeof(*w.rw.rs.r), cmp_region);
	for (size_t i = 1; i < w.rw.rs.n; i++)
		if (w.rw.rs.r[i].off < w.rw.rs.r[i - 1].off + w.rw.rs.r[i - 1].len) {
			ret = DCR_ERR(-EBADMSG);
			goto err_free;
		}
	if (w.tw.ts.n)
		qsort(w.tw.ts.t, w.tw.ts.n, sizeof(*w.tw.ts.t), cmp_tensor);
	*regions = w.rw.rs;
	if (floats)
		*floats = w.tw.ts;
	return 0;
err_free:
	free(w.rw.rs.r);
	dcr_tensors_free(&w.tw.ts);
	return ret;
}

void dcr_tensors_free(struct dcr_tensors *ts)
{
	if (!ts)
		return;
	for (size_t i = 0; i < ts->n; i++)
		free(ts->t[i].name);
	free(ts->t);
	ts->t = NULL;
	ts->n = 0;
}

int dcr_safetensors_parse_fd(int fd, uint64_t file_size,
			     struct dcr_regions *regions,
			     struct dcr_tensors *floats)
{
	uint8_t h[8];
	size_t need;
	int ret;

	parse_clear(regions, floats);
	if (file_size < 8)
		return DCR_ERR(-EBADMSG);
	if ((ret = dcr_pread_full(fd, h, 8, 0)))
		return ret;
	if ((ret = dcr_safetensors_prefix_len(h, 8, file_size, &need)))
		return ret;
	uint8_t *buf = malloc(need);
	if (!buf)
		return DCR_ERR(-ENOMEM);
	ret = dcr_pread_full(fd, buf, need, 0);
	if (!ret)
		ret = dcr_safetensors_parse(buf, need, file_size, regions,
					    floats);
	free(buf);
	return ret;
}
