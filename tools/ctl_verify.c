/* SPDX-License-Identifier: MIT */
/*
 * ctl_verify.c - dcrfs-ctl verify: maint/verify.h checks; this prints
 * each damaged object and what it affects, the unsigned versions, and
 * the summary (see ctl.h,
 * dcrfs-ctl(8)).
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "ctl.h"
#include "maintjson.h"
#include "sign.h"
#include "verify.h"

static void verify_text(const struct dcr_verify_result *r)
{
	for (size_t k = 0; k < r->ndamage; k++) {
		const struct dcr_verify_damage *d = &r->damage[k];
		printf("%s: %s: %s\n", d->untrusted ? "untrusted" : "damaged",
		       d->object, d->reason);
		for (size_t h = 0; h < d->nhits; h++) {
			const struct dcr_verify_hit *x = &d->hits[h];
			if (!x->path)
				printf("  affects version %" PRIu64 " (all of it)\n", x->version);
			else
				printf("  affects version %" PRIu64 ": %s (%" PRIu64 " of %" PRIu64
				       " chunks)\n", x->version, x->path, x->chunks, x->nchunks);
		}
		if (!d->nhits)
			printf("  affects no frame a checked version needs\n");
	}
	/* Unsigned versions among signed ones are named; a store that signs
	 * nothing is only counted (the summary's "0 signed"). */
	size_t nsigned = 0;
	for (size_t i = 0; i < r->nsigs; i++)
		nsigned += strcmp(r->sigs[i].status, "unsigned") != 0;
	for (size_t i = 0; nsigned && i < r->nsigs; i++)
		if (r->sigs[i].ok && !strcmp(r->sigs[i].status, "unsigned"))
			printf("unsigned: version %" PRIu64 "\n", r->sigs[i].version);
}

int cmd_verify(struct ctl *c, char **args, int nargs, int deep, int quiet,
	       const char *trust_file)
{
	struct dcr_trust *trust = NULL;
	uint64_t *vs = calloc(nargs ? (size_t)nargs : 1, sizeof(*vs));
	struct dcr_pg pg = { .fn = ctl_progress, .arg = c };
	struct dcr_verify_result r;
	int status = EXIT_FAIL;
	char b[32];

	if (!vs)
		return EXIT_FAIL;
	if (trust_file && dcr_trust_load(trust_file, &trust))
		goto err_free;
	for (int i = 0; i < nargs; i++) {
		struct dcr_sview_ver *x = dcr_index_resolve(&c->ix, args[i]);
		if (!x)
			goto err_free;
		vs[i] = x->v;
	}
	if (dcr_verify_trust(&c->ix, vs, (size_t)nargs, deep, trust, &pg, &r))
		goto err_free;
	if (c->json)
		dcr_verify_json(stdout, &r);
	else
		verify_text(&r);
	size_t nsigned = 0;
	for (size_t i = 0; i < r.nsigs; i++)
		nsigned += strcmp(r.sigs[i].status, "unsigned") != 0;
	size_t ndamaged = 0;
	for (size_t k = 0; k < r.ndamage; k++)
		ndamaged += !r.damage[k].untrusted;
	/* Intact versions a trust file does not cover are untrusted, not
	 * damaged: the store is fine, the keys are not the ones given. */
	if (!quiet)
		dcr_info("%zu versions (%zu signed%s), %" PRIu64 " packs (%s) checked%s: %s",
			 r.nversions, nsigned, trust ? ", against the trust file" : "",
			 r.packs_checked, dcr_format_size(r.bytes_checked, b, sizeof(b)),
			 deep ? ", every file materialized" : "",
			 ndamaged ? "DAMAGED" : r.ndamage ?
			 "UNTRUSTED (intact, but not signed by a key of the trust file)" :
			 "ok");
	status = r.ndamage ? EXIT_FAIL : 0;
	dcr_verify_result_free(&r);
err_free:
	dcr_trust_free(trust);
	free(vs);
	return status;
}
