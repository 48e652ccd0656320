/* SPDX-License-Identifier: MIT */
/*
 * fuzz_manifest - libFuzzer target for the manifest decoder: untrusted
 * manifests must be rejected or decoded into a valid manifest, within
 * bounds, and re-encode.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>

#include "buf.h"
#include "manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dcr_manifest m;

	if (dcr_manifest_decode(data, size, &m))
		return 0;
	if (dcr_manifest_validate(&m))
		abort();
	struct dcr_buf b;
	dcr_buf_init(&b, SIZE_MAX);
	if (dcr_manifest_encode(&m, &b))
		abort();
	dcr_buf_free(&b);
	dcr_manifest_free(&m);
	return 0;
}
