/* SPDX-License-Identifier: MIT */
/*
 * fuzz_sig - libFuzzer target for what signatures are parsed from
 * (core/sign.c, core/manifest.c): the first byte picks the parser, the
 * rest is its untrusted input.
 *   0: a manifest's signature block (dcr_sig_decode), then checked as
 *      the signature of a small manifest (never valid: no key signed it)
 *   1: a tag object's signature line (dcr_tag_sig_parse); what parses
 *      formats back to the same line and checks as not valid
 *   2: a trust file (dcr_trust_parse); every key it yields is listed
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "manifest.h"
#include "sign.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void sig_block(const uint8_t *p, size_t n)
{
	struct dcr_manifest m = { .version = 3, .cparent = 2, .ctime_ns = 1 };

	if (dcr_sig_decode(p, n, &m.sig))
		return;
	if (strlen(m.sig.store_id) == 0 ||
	    strlen(m.sig.store_id) > DCR_SIG_STORE_ID_MAX)
		abort();
	m.has_sig = true;
	if (dcr_manifest_sig_check(&m, m.sig.store_id, NULL) == DCR_SIG_VALID)
		abort(); /* a forgery of Ed25519 from fuzz input: no */
}

static void tag_line(const uint8_t *p, size_t n)
{
	struct dcr_tag_sig ts, back;
	char line[DCR_TAG_SIG_TEXT_MAX];
	uint8_t check[DCR_HASH_LEN] = { 0 };

	if (dcr_tag_sig_parse((const char *)p, n, &ts))
		return;
	dcr_tag_sig_format(&ts, line, sizeof(line));
	if (strlen(line) != n || memcmp(line, p, n) ||
	    dcr_tag_sig_parse(line, strlen(line), &back) ||
	    memcmp(&back, &ts, sizeof(ts)))
		abort();
	if (dcr_tag_sig_check(&ts, "store", "t", 1, check, NULL) == DCR_SIG_VALID)
		abort();
}

static void trust_file(const uint8_t *p, size_t n)
{
	struct dcr_trust *t = NULL;

	if (dcr_trust_parse(p, n, "fuzz", &t))
		return;
	if (!dcr_trust_count(t))
		abort();
	for (size_t i = 0; i < dcr_trust_count(t); i++)
		if (strlen(dcr_trust_key_id(t, i)) != DCR_KEYID_LEN)
			abort();
	dcr_trust_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	switch (data[0] % 3) {
	case 0:
		sig_block(data + 1, size - 1);
		break;
	case 1:
		tag_line(data + 1, size - 1);
		break;
	default:
		trust_file(data + 1, size - 1);
		break;
	}
	return 0;
}
