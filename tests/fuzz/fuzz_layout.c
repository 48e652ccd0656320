/* SPDX-License-Identifier: MIT */
/*
 * fuzz_layout - libFuzzer target for the layout decoder (core/layout.h):
 * untrusted layout generations must be rejected or decoded into sorted,
 * unique, in-range entries that re-encode to the same bytes, and every
 * lookup must find exactly its entry. The trailing SHA-256 is made right
 * before decoding, so that mutations reach the fields behind it.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "hash.h"
#include "layout.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dcr_layout l;
	struct dcr_buf b;
	uint8_t *p;

	if (size < DCR_HASH_LEN || !(p = malloc(size)))
		return 0;
	memcpy(p, data, size);
	dcr_sha256(p, size - DCR_HASH_LEN, p + size - DCR_HASH_LEN);
	data = p;
	if (dcr_layout_decode(data, size, &l)) {
		free(p);
		return 0;
	}
	for (size_t i = 0; i < l.n; i++) {
		if (!l.e[i].version || l.e[i].version > DCR_VERSION_MAX ||
		    l.e[i].lparent >= l.e[i].version ||
		    (i && l.e[i].version <= l.e[i - 1].version) ||
		    dcr_layout_find(&l, l.e[i].version) != &l.e[i])
			abort();
	}
	dcr_buf_init(&b, SIZE_MAX);
	if (dcr_layout_encode(&l, &b) || b.len != size || memcmp(b.data, data, size))
		abort();
	dcr_buf_free(&b);
	dcr_layout_free(&l);
	free(p);
	return 0;
}
