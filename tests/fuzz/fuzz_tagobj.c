/* SPDX-License-Identifier: MIT */
/*
 * fuzz_tagobj - libFuzzer target for tag objects (core/objstore.h): the
 * input is the object tags/t of a one-object store, read with
 * dcr_store_get_tag_sig, which parses the number and a signature line
 * (dcr_tag_sig_parse, core/sign.h). It must be refused, or give a
 * version >= 1 that dcr_store_get_tag agrees with; a signed one must be
 * written back (dcr_store_put_tag_signed) as a tag that reads to the very
 * same version and signature, and an unsigned one as "N\n".
 */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "common.h"
#include "objstore.h"
#include "sign.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A store of one object, tags/t. */
struct one {
	struct dcr_store st;
	uint8_t *obj;
	size_t len;
};

static int one_get(struct dcr_store *st, const char *key, uint64_t off,
		   uint64_t len, int64_t deadline, struct dcr_buf *out)
{
	struct one *o = (struct one *)st;

	(void)deadline;
	if (strcmp(key, "tags/t"))
		return -ENOENT;
	if (off >= o->len)
		return 0;
	if (len > o->len - off)
		len = o->len - off;
	return dcr_buf_append(out, o->obj + off, (size_t)len);
}

static int one_put(struct dcr_store *st, const char *key, const void *data,
		   uint64_t len, int flags)
{
	struct one *o = (struct one *)st;
	uint8_t *p = malloc(len ? len : 1);

	(void)flags;
	if (strcmp(key, "tags/t") || !p) {
		free(p);
		return -EINVAL;
	}
	memcpy(p, data, len);
	free(o->obj);
	o->obj = p;
	o->len = len;
	return 0;
}

static const struct dcr_store_ops one_ops = {
	.name = "one", .get = one_get, .put = one_put,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool quiet;
	struct one o = { .st = { .ops = &one_ops, .url = "fuzz://" } };
	struct dcr_tag_sig ts, back;
	bool is_signed, again;
	uint64_t v, v2;

	if (!quiet) { /* a malformed tag is logged: keep that off stderr */
		dcr_log_errors_capture(true);
		quiet = true;
	}
	dcr_log_errors_reset();
	if (one_put(&o.st, "tags/t", data, size, 0))
		return 0;
	memset(&ts, 0, sizeof(ts));
	int ret = dcr_store_get_tag_sig(&o.st, "t", &v, &ts, &is_signed);
	if (ret) {
		if (ret != -EBADMSG || dcr_store_get_tag(&o.st, "t", &v2) != -EBADMSG)
			abort();
		goto out;
	}
	if (v == 0 || dcr_store_get_tag(&o.st, "t", &v2) || v2 != v)
		abort();
	if (is_signed)
		ret = dcr_store_put_tag_signed(&o.st, "t", v, &ts);
	else
		ret = dcr_store_put_tag(&o.st, "t", v);
	if (ret)
		abort();
	if (!is_signed) {
		char want[32];
		int n = snprintf(want, sizeof(want), "%llu\n", (unsigned long long)v);
		if (o.len != (size_t)n || memcmp(o.obj, want, o.len))
			abort();
		goto out;
	}
	memset(&back, 0, sizeof(back));
	if (dcr_store_get_tag_sig(&o.st, "t", &v2, &back, &again) || !again ||
	    v2 != v || memcmp(&back, &ts, sizeof(ts)))
		abort();
out:
	free(o.obj);
	return 0;
}
