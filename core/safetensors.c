/* SPDX-License-Identifier: MIT */
/*
 * safetensors.c - parse a safetensors header into element regions
 * (see safetensors.h). A small bounded JSON reader: it validates the
 * structure it walks and skips values it does not need.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "fileio.h"
#include "safetensors.h"

#define JSON_DEPTH_MAX 32

struct js {
	const char *p;
	const char *end;
};

static void ws(struct js *j)
{
	while (j->p < j->end &&
	       (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

static int expect(struct js *j, char c)
{
	ws(j);
	if (j->p >= j->end || *j->p != c)
		return -1;
	j->p++;
	return 0;
}

/* A string; @s and @n get its raw (still escaped) contents. */
static int str(struct js *j, const char **s, size_t *n)
{
	if (expect(j, '"'))
		return -1;
	const char *b = j->p;
	while (j->p < j->end && *j->p != '"') {
		unsigned char ch = (unsigned char)*j->p;
		if (ch < 0x20)
			return -1;
		if (ch == '\\') {
			if (++j->p >= j->end)
				return -1;
			if (*j->p == 'u') {
				if (j->end - j->p < 5)
					return -1;
				for (int k = 1; k <= 4; k++) {
					char h = j->p[k];
					if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') ||
					      (h >= 'A' && h <= 'F')))
						return -1;
				}
				j->p += 4;
			} else if (!strchr("\"\\/bfnrt", *j->p) || !*j->p) {
				return -1;
			}
		}
		j->p++;
	}
	if (j->p >= j->end)
		return -1;
	*s = b;
	*n = (size_t)(j->p - b);
	j->p++;
	return 0;
}

static int str_is(const char *s, size_t n, const char *lit)
{
	return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

/* A non-negative integer below 2^53 (offsets and shapes). */
static int json_uint(struct js *j, uint64_t *v)
{
	ws(j);
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

static int skip_value(struct js *j, int depth);

static int skip_container(struct js *j, int depth, char close, int obj)
{
	const char *s;
	size_t n;

	if (depth > JSON_DEPTH_MAX)
		return -1;
	ws(j);
	if (j->p < j->end && *j->p == close) {
		j->p++;
		return 0;
	}
	for (;;) {
		if (obj && (str(j, &s, &n) || expect(j, ':')))
			return -1;
		if (skip_value(j, depth + 1))
			return -1;
		ws(j);
		if (j->p >= j->end)
			return -1;
		if (*j->p == close) {
			j->p++;
			return 0;
		}
		if (*j->p++ != ',')
			return -1;
	}
}

static int skip_value(struct js *j, int depth)
{
	const char *s;
	size_t n;

	ws(j);
	if (j->p >= j->end)
		return -1;
	switch (*j->p) {
	case '"':
		return str(j, &s, &n);
	case '{':
		j->p++;
		return skip_container(j, depth, '}', 1);
	case '[':
		j->p++;
		return skip_container(j, depth, ']', 0);
	case 't':
	case 'f':
	case 'n': {
		static const char *const lits[] = { "true", "false", "null" };
		for (size_t k = 0; k < 3; k++) {
			size_t l = strlen(lits[k]);
			if ((size_t)(j->end - j->p) >= l && !memcmp(j->p, lits[k], l)) {
				j->p += l;
				return 0;
			}
		}
		return -1;
	}
	default:
		if (*j->p == '-')
			j->p++;
		if (j->p >= j->end || *j->p < '0' || *j->p > '9')
			return -1;
		while (j->p < j->end && strchr("0123456789.eE+-", *j->p) && *j->p)
			j->p++;
		return 0;
	}
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

/* One tensor entry {"dtype":..., "shape":[...], "data_offsets":[b,e]}. */
static int tensor(struct js *j, int *dt, enum dcr_float_fmt *ff, uint64_t *b,
		  uint64_t *e)
{
	const char *s;
	size_t n;
	int have = 0;

	if (expect(j, '{'))
		return -1;
	for (;;) {
		if (str(j, &s, &n) || expect(j, ':'))
			return -1;
		if (str_is(s, n, "dtype")) {
			const char *v;
			size_t vn;
			if (str(j, &v, &vn))
				return -1;
			*dt = map_dtype(v, vn);
			*ff = map_float(v, vn);
			have |= 1;
		} else if (str_is(s, n, "data_offsets")) {
			if (expect(j, '[') || json_uint(j, b) || expect(j, ',') ||
			    json_uint(j, e) || expect(j, ']') || *e < *b)
				return -1;
			have |= 2;
		} else if (skip_value(j, 2)) {
			return -1;
		}
		ws(j);
		if (j->p >= j->end)
			return -1;
		if (*j->p == '}') {
			j->p++;
			break;
		}
		if (*j->p++ != ',')
			return -1;
	}
	return have == 3 ? 0 : -1;
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

void dcr_tensors_free(struct dcr_tensors *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n; i++)
		free(t->t[i].name);
	free(t->t);
	t->t = NULL;
	t->n = 0;
}

static int cmp_tensor(const void *a, const void *b)
{
	const struct dcr_tensor *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

/* Append a float tensor named by the raw string @s[0..sn). */
static int add_float(struct dcr_tensors *ts, size_t *cap, const char *s,
		     size_t sn, enum dcr_float_fmt ff, uint64_t off, uint64_t len)
{
	if (ts->n == *cap) {
		*cap = *cap ? 2 * *cap : 64;
		void *nt = realloc(ts->t, *cap * sizeof(*ts->t));
		if (!nt)
			return DCR_ERR(-ENOMEM);
		ts->t = nt;
	}
	struct dcr_tensor *t = &ts->t[ts->n];
	if (!(t->name = strndup(s, sn)))
		return DCR_ERR(-ENOMEM);
	t->off = off;
	t->len = len;
	t->fmt = (uint8_t)ff;
	ts->n++;
	return 0;
}

int dcr_safetensors_regions(const void *file_prefix, size_t n,
			    uint64_t file_size, struct dcr_regions *out)
{
	return dcr_safetensors_parse(file_prefix, n, file_size, out, NULL);
}

int dcr_safetensors_parse(const void *file_prefix, size_t n,
			  uint64_t file_size, struct dcr_regions *out,
			  struct dcr_tensors *floats)
{
	struct dcr_regions rs = { NULL, 0 };
	struct dcr_tensors ts = { NULL, 0 };
	size_t need, cap = 0, tcap = 0;
	int ret = dcr_safetensors_prefix_len(file_prefix, n, file_size, &need);

	out->r = NULL;
	out->n = 0;
	if (floats) {
		floats->t = NULL;
		floats->n = 0;
	}
	if (ret)
		return ret;
	if (n < need)
		return DCR_ERR(-ENODATA);
	uint64_t data0 = need;
	struct js j = { (const char *)file_prefix + 8, (const char *)file_prefix + need };
	if (expect(&j, '{'))
		goto err_bad;
	ws(&j);
	if (j.p < j.end && *j.p == '}') {
		j.p++;
		goto done;
	}
	for (;;) {
		const char *s;
		size_t sn;
		if (str(&j, &s, &sn) || expect(&j, ':'))
			goto err_bad;
		if (str_is(s, sn, "__metadata__")) {
			if (skip_value(&j, 1))
				goto err_bad;
		} else {
			int dt = -1;
			enum dcr_float_fmt ff = DCR_FF_NONE;
			uint64_t b = 0, e = 0;
			if (tensor(&j, &dt, &ff, &b, &e) || e > file_size - data0)
				goto err_bad;
			if (floats && ff != DCR_FF_NONE && e > b) {
				if ((e - b) % dcr_float_width(ff))
					goto err_bad;
				if ((ret = add_float(&ts, &tcap, s, sn, ff, data0 + b, e - b)))
					goto err_free;
			}
			if (dt > 0 && e > b) {
				if (rs.n == cap) {
					cap = cap ? 2 * cap : 64;
					void *nr = realloc(rs.r, cap * sizeof(*rs.r));
					if (!nr) {
						ret = DCR_ERR(-ENOMEM);
						goto err_free;
					}
					rs.r = nr;
				}
				rs.r[rs.n].off = data0 + b;
				rs.r[rs.n].len = e - b;
				rs.r[rs.n].dtype = (uint8_t)dt;
				rs.n++;
			}
		}
		ws(&j);
		if (j.p >= j.end)
			goto err_bad;
		if (*j.p == '}') {
			j.p++;
			break;
		}
		if (*j.p++ != ',')
			goto err_bad;
	}
done:
	/* Only padding may follow the object. */
	ws(&j);
	while (j.p < j.end && *j.p == '\0')
		j.p++;
	if (j.p != j.end)
		goto err_bad;
	if (rs.n)
		qsort(rs.r, rs.n, sizeof(*rs.r), cmp_region);
	for (size_t i = 1; i < rs.n; i++)
		if (rs.r[i].off < rs.r[i - 1].off + rs.r[i - 1].len)
			goto err_bad;
	if (ts.n)
		qsort(ts.t, ts.n, sizeof(*ts.t), cmp_tensor);
	for (size_t i = 1; i < ts.n; i++)
		if (ts.t[i].off < ts.t[i - 1].off + ts.t[i - 1].len)
			goto err_bad;
	*out = rs;
	if (floats)
		*floats = ts;
	return 0;
err_bad:
	ret = DCR_ERR(-EBADMSG);
err_free:
	free(rs.r);
	dcr_tensors_free(&ts);
	return ret;
}

int dcr_safetensors_regions_fd(int fd, uint64_t file_size,
			       struct dcr_regions *out)
{
	return dcr_safetensors_parse_fd(fd, file_size, out, NULL);
}

int dcr_safetensors_parse_fd(int fd, uint64_t file_size,
			     struct dcr_regions *out, struct dcr_tensors *floats)
{
	uint8_t h[8];
	size_t need;
	int ret;

	out->r = NULL;
	out->n = 0;
	if (floats) {
		floats->t = NULL;
		floats->n = 0;
	}
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
		ret = dcr_safetensors_parse(buf, need, file_size, out, floats);
	free(buf);
	return ret;
}
