/* SPDX-License-Identifier: MIT */
/*
 * synth_tensor.c - the tensor list of one safetensors file: grown,
 * parsed from a file through core's parser, freed (synth.h).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "synth.h"

/* Bytes per element of the formats simulated (BF16, F16, F32); 0 else. */
unsigned sim_width(const struct tensor *t)
{
	bool sim = t->fmt == DCR_FF_BF16 || t->fmt == DCR_FF_F16 ||
		   t->fmt == DCR_FF_F32;

	return sim ? dcr_float_width(t->fmt) : 0;
}

struct tensor *stfile_add(struct stfile *f)
{
	if (dcr_array_grow(&f->t, sizeof(*f->t), f->n, &f->cap)) {
		dcr_err("out of memory");
		exit(1);
	}
	memset(&f->t[f->n], 0, sizeof(f->t[0]));
	return &f->t[f->n++];
}

void stfile_free(struct stfile *f)
{
	for (size_t i = 0; i < f->n; i++)
		free(f->t[i].name);
	free(f->t);
	free(f->name);
	memset(f, 0, sizeof(*f));
}

/* ------------------------------------------------------------ parse */

int st_parse(const uint8_t *p, uint64_t len, struct stfile *f)
{
	struct dcr_tensors ts;
	int e = dcr_safetensors_tensors(p, len, len, &ts);

	if (e)
		return e;
	uint64_t data0 = 8 + dcr_get_le64(p); /* checked by the parser */
	for (size_t i = 0; i < ts.n && !e; i++) {
		const struct dcr_tensor *x = &ts.t[i];
		struct tensor *t = stfile_add(f);

		t->name = xstrdup(x->name);
		t->id = fnv1a(x->name);
		memcpy(t->dtype, x->dtype, sizeof(t->dtype));
		t->fmt = (enum dcr_float_fmt)x->fmt;
		t->off = x->off - data0;
		t->end = t->off + x->len;
		if (x->ndim == DCR_ST_NDIM_UNKNOWN) {
			e = -EBADMSG;
			break;
		}
		t->ndim = x->ndim;
		memcpy(t->shape, x->shape, sizeof(t->shape));
		t->nelem = 1;
		for (int d = 0; d < t->ndim; d++)
			if (__builtin_mul_overflow(t->nelem, t->shape[d], &t->nelem))
				e = -EBADMSG;
		if (sim_width(t) && t->nelem * sim_width(t) != x->len)
			e = -EBADMSG;
		if (i && t->off < f->t[i - 1].end)
			e = -EBADMSG; /* overlapping tensors */
	}
	dcr_tensors_free(&ts);
	f->hdr_len = data0 - 8;
	f->data_len = len - data0;
	return e;
}
