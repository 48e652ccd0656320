/* SPDX-License-Identifier: MIT */
/*
 * fuzz_safetensors - libFuzzer target for the safetensors header parser
 * (it reads the first bytes of every committed file).
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dcr_regions rs;

	if (dcr_safetensors_regions(data, size, size + (size & 0xff), &rs))
		return 0;
	for (size_t i = 0; i < rs.n; i++) {
		if (rs.r[i].len == 0 || rs.r[i].dtype >= DCR_DT_COUNT ||
		    rs.r[i].off + rs.r[i].len > size + (size & 0xff) ||
		    (i && rs.r[i].off < rs.r[i - 1].off + rs.r[i - 1].len))
			abort();
	}
	dcr_regions_free(&rs);
	return 0;
}
