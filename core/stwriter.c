/* SPDX-License-Identifier: MIT */
/*
 * stwriter.c - safetensors layout (see stwriter.h).
 */
#include "config.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "json.h"
#include "safetensors.h"
#include "stwriter.h"

/* The reference's Dtype enum, in declaration order (its Ord), with widths. */
static const struct {
	const char *name;
	unsigned width;
} dtypes[] = {
	{ "BOOL", 1 }, { "U8", 1 }, { "I8", 1 }, { "F8_E5M2", 1 },
	{ "F8_E4M3", 1 }, { "I16", 2 }, { "U16", 2 }, { "F16", 2 },
	{ "BF16", 2 }, { "I32", 4 }, { "U32", 4 }, { "F32", 4 },
	{ "F64", 8 }, { "I64", 8 }, { "U64", 8 },
};

static int dtype_rank(const char *dtype)
{
	for (size_t i = 0; dtype && i < DCR_ARRAY_SIZE(dtypes); i++)
		if (!strcmp(dtype, dtypes[i].name))
			return (int)i;
	return -1;
}

unsigned dcr_st_dtype_width(const char *dtype)
{
	int rank = dtype_rank(dtype);

	return rank < 0 ? 0 : dtypes[rank].width;
}

struct sortkey {
	int rank;
	const char *name;
	size_t idx;
};

static int cmp_key(const void *a, const void *b)
{
	const struct sortkey *x = a, *y = b;

	if (x->rank != y->rank)
		return x->rank > y->rank ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int cmp_meta(const void *a, const void *b)
{
	return strcmp(((const struct dcr_st_meta *)a)->key,
		      ((const struct dcr_st_meta *)b)->key);
}

/* The tensor's element count x width equals its length, without overflow. */
static bool len_matches(const struct dcr_st_tensor *t, unsigned width)
{
	uint64_t count = 1;

	for (size_t d = 0; d < t->ndim; d++)
		if (__builtin_mul_overflow(count, t->shape[d], &count))
			return false;
	return !__builtin_mul_overflow(count, width, &count) && count == t->len;
}

static int write_json(FILE *f, const struct dcr_st_tensor *t,
		      const struct sortkey *keys, size_t n,
		      const struct dcr_st_meta *meta, size_t nmeta)
{
	uint64_t off = 0;

	putc('{', f);
	if (nmeta) {
		dcr_json_str(f, "__metadata__");
		fputs(":{", f);
		for (size_t i = 0; i < nmeta; i++) {
			if (i)
				putc(',', f);
			dcr_json_str(f, meta[i].key);
			putc(':', f);
			dcr_json_str(f, meta[i].value);
		}
		putc('}', f);
	}
	for (size_t i = 0; i < n; i++) {
		const struct dcr_st_tensor *x = &t[keys[i].idx];
		if (i || nmeta)
			putc(',', f);
		dcr_json_str(f, x->name);
		fprintf(f, ":{\"dtype\":\"%s\",\"shape\":[", x->dtype);
		for (size_t d = 0; d < x->ndim; d++)
			fprintf(f, "%s%" PRIu64, d ? "," : "", x->shape[d]);
		fprintf(f, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off,
			off + x->len);
		off += x->len;
	}
	putc('}', f);
	return ferror(f) ? DCR_ERR(-ENOMEM) : 0;
}

/*
 * Whether @s, the @what of a safetensors header, is text the header can
 * hold (UTF-8: else the header is not JSON); logged naming it if not.
 */
static bool text_ok(const char *what, const char *s)
{
	size_t bad;

	if (!s) {
		dcr_err("safetensors: a %s is missing (NULL)", what);
		return false;
	}
	if (dcr_utf8_valid(s, strlen(s), &bad))
		return true;
	dcr_err("safetensors: the %s '%.*s...' is not valid UTF-8 (at byte %zu)",
		what, (int)DCR_MIN(bad, (size_t)200), s, bad);
	return false;
}

int dcr_safetensors_layout(const struct dcr_st_tensor *t, size_t n,
			   const struct dcr_st_meta *meta, size_t nmeta,
			   unsigned flags, char **hdr, size_t *hdr_len,
			   size_t *order)
{
	struct sortkey *keys = calloc(n ? n : 1, sizeof(*keys));
	struct dcr_st_meta *ms = calloc(nmeta ? nmeta : 1, sizeof(*ms));
	char *json = NULL;
	size_t jlen = 0;
	int ret = 0;

	*hdr = NULL;
	*hdr_len = 0;
	if (!keys || !ms) {
		ret = DCR_ERR(-ENOMEM);
		goto err_free;
	}
	for (size_t i = 0; i < n; i++) {
		keys[i] = (struct sortkey){ dtype_rank(t[i].dtype), t[i].name, i };
		if (!t[i].name || !strcmp(t[i].name, "__metadata__")) {
			dcr_err("safetensors: '%s' cannot name a tensor",
				t[i].name ? t[i].name : "(null)");
			ret = DCR_ERR(-EINVAL);
		} else if (!text_ok("tensor name", t[i].name)) {
			ret = DCR_ERR(-EINVAL);
		} else if (keys[i].rank < 0) {
			dcr_err("safetensors: tensor %s: unknown dtype '%s'", t[i].name,
				t[i].dtype ? t[i].dtype : "(null)");
			ret = DCR_ERR(-EINVAL);
		} else if (!len_matches(&t[i], dtypes[keys[i].rank].width)) {
			dcr_err("safetensors: tensor %s: %" PRIu64 " bytes do not hold a %s tensor of its shape",
				t[i].name, t[i].len, t[i].dtype);
			ret = DCR_ERR(-EINVAL);
		}
		if (ret)
			goto err_free;
	}
	for (size_t i = 0; i < nmeta; i++)
		if (!text_ok("metadata key", meta[i].key) ||
		    !text_ok("metadata value", meta[i].value)) {
			ret = DCR_ERR(-EINVAL);
			goto err_free;
		}
	/* By name alone first, to find a name given twice (any dtypes). */
	for (size_t i = 0; i < n; i++)
		keys[i].rank = 0;
	qsort(keys, n, sizeof(*keys), cmp_key);
	for (size_t i = 1; i < n; i++)
		if (!strcmp(keys[i].name, keys[i - 1].name)) {
			dcr_err("safetensors: tensor %s given twice", keys[i].name);
			ret = DCR_ERR(-EINVAL);
			goto err_free;
		}
	for (size_t i = 0; i < n; i++)
		keys[i].rank = dtype_rank(t[keys[i].idx].dtype);
	if (flags & DCR_ST_GIVEN_ORDER)
		for (size_t i = 0; i < n; i++)
			keys[i] = (struct sortkey){ 0, t[i].name, i };
	else
		qsort(keys, n, sizeof(*keys), cmp_key);
	for (size_t i = 0; i < n; i++)
		order[i] = keys[i].idx;
	memcpy(ms, meta, nmeta * sizeof(*ms));
	qsort(ms, nmeta, sizeof(*ms), cmp_meta);

	FILE *f = open_memstream(&json, &jlen);
	if (!f) {
		ret = DCR_ERR(-ENOMEM);
		goto err_free;
	}
	fwrite("\0\0\0\0\0\0\0\0", 1, 8, f);
	ret = write_json(f, t, keys, n, ms, nmeta);
	if (fclose(f) && !ret)
		ret = DCR_ERR(-ENOMEM);
	if (ret)
		goto err_free;
	json = realloc(json, jlen + 8); /* room for the padding */
	if (!json) {
		ret = DCR_ERR(-ENOMEM);
		goto err_free;
	}
	while ((jlen - 8) % 8)
		json[jlen++] = ' ';
	if (jlen - 8 > DCR_SAFETENSORS_HDR_MAX) {
		dcr_err("safetensors: a header of %zu bytes is larger than the format allows", jlen - 8);
		ret = DCR_ERR(-EFBIG);
		goto err_free;
	}
	dcr_put_le64((uint8_t *)json, (uint64_t)(jlen - 8));
	*hdr = json;
	*hdr_len = jlen;
	json = NULL;
err_free:
	free(json);
	free(ms);
	free(keys);
	return ret;
}
