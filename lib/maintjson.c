/* SPDX-License-Identifier: MIT */
/* maintjson.c - the JSON form of the maintenance results (maintjson.h). */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>

#include "common.h"
#include "hash.h"
#include "json.h"
#include "maintjson.h"
#include "manifest.h"
#include "sign.h"

/* The tags of version @v as a JSON array. */
static void tags_json(FILE *f, const struct dcr_index *ix, uint64_t v)
{
	int n = 0;

	fputc('[', f);
	for (size_t i = 0; i < ix->sv.ntags; i++) {
		if (ix->sv.tags[i].v != v)
			continue;
		if (n++)
			fputs(", ", f);
		dcr_json_str(f, ix->sv.tags[i].name);
	}
	fputc(']', f);
}

/* The signers of the tags of version @v as a JSON object. */
static void tag_signers_json(FILE *f, struct dcr_index *ix, uint64_t v)
{
	char buf[DCR_KEYID_LEN + 1];
	int n = 0;

	fputc('{', f);
	for (size_t i = 0; i < ix->sv.ntags; i++) {
		if (ix->sv.tags[i].v != v)
			continue;
		fputs(n++ ? ", " : "", f);
		dcr_json_str(f, ix->sv.tags[i].name);
		fputs(": ", f);
		dcr_json_str(f, dcr_index_tag_signer(ix, &ix->sv.tags[i], buf));
	}
	fputc('}', f);
}

/* The members log and show share. */
static void record_json(FILE *f, struct dcr_index *ix,
			const struct dcr_version_record *r)
{
	fprintf(f, "\"version\": %" PRIu64 ", \"parent\": %" PRIu64 ", \"base\": %" PRIu64
		", \"time\": \"%s\", \"time_ns\": %" PRId64 ", \"bytes\": %" PRIu64
		", \"stored_bytes\": %" PRIu64 ", \"kind\": \"%s\", \"tags\": ",
		r->version, r->parent, r->base, r->time, r->ctime_ns, r->bytes,
		r->stored_bytes, r->kind);
	tags_json(f, ix, r->version);
	fputs(", \"tag_signers\": ", f);
	tag_signers_json(f, ix, r->version);
	fputs(", \"signer\": ", f);
	dcr_json_str(f, r->signer);
	fputs(", \"meta\": {", f);
	for (uint32_t i = 0; i < r->nmeta; i++) {
		fputs(i ? ", " : "", f);
		dcr_json_str(f, r->meta[i].key);
		fputs(": ", f);
		dcr_json_str(f, r->meta[i].value);
	}
	fputc('}', f);
}

int dcr_log_json(FILE *f, struct dcr_index *ix)
{
	int status = 0, n = 0;

	fputs("[", f);
	for (size_t i = ix->sv.nvs; i-- > 0;) {
		struct dcr_version_record r;
		int ret = dcr_index_record(ix, &ix->sv.vs[i], &r);
		if (ret) {
			status = status ? status : ret;
			continue;
		}
		fprintf(f, "%s\n  {", n++ ? "," : "");
		record_json(f, ix, &r);
		fprintf(f, ", \"files\": %" PRIu64 ", \"chunks\": {\"same\": %" PRIu64
			", \"delta\": %" PRIu64 ", \"full\": %" PRIu64 "}}",
			r.files, r.same, r.delta, r.full);
	}
	fputs(n ? "\n]\n" : "]\n", f);
	return status;
}

int dcr_show_json(FILE *f, struct dcr_index *ix, struct dcr_sview_ver *x)
{
	char hex[DCR_HASH_HEX_LEN + 1];
	struct dcr_version_record r;
	int ret = dcr_index_record(ix, x, &r);

	if (ret)
		return ret;
	const struct dcr_manifest *m = &x->m;
	fputc('{', f);
	record_json(f, ix, &r);
	fprintf(f, ", \"format\": %" PRIu32 ", \"chunk_size\": %" PRIu32 ", \"packs\": [",
		m->format, m->chunk_size);
	for (uint32_t i = 0; i < m->npacks; i++) {
		dcr_hash_hex(m->packs[i], hex);
		fprintf(f, "%s\"%s\"", i ? ", " : "", hex);
	}
	fputs("], \"files\": [", f);
	for (uint32_t i = 0; i < m->nfiles; i++) {
		const struct dcr_file *fl = &m->files[i];
		int dir = fl->type == DCR_FT_DIR;
		dcr_hash_hex(fl->sha256, hex);
		fprintf(f, "%s\n  {\"path\": ", i ? "," : "");
		dcr_json_str(f, fl->path);
		fprintf(f, ", \"type\": \"%s\", \"mode\": \"%04" PRIo32 "\", \"size\": %" PRIu64,
			dir ? "dir" : "file", fl->mode, fl->size);
		if (!dir && m->format < 3)
			fprintf(f, ", \"sha256\": \"%s\"", hex);
		if (!dir)
			fprintf(f, ", \"digest\": \"%s\", \"digest_kind\": \"%s\", "
				"\"chunks\": %" PRIu64 ", \"stored_bytes\": %" PRIu64,
				hex, dcr_file_digest_kind(m->format), fl->nchunks,
				dcr_file_stored_bytes(fl));
		fputc('}', f);
	}
	fputs(m->nfiles ? "\n]}\n" : "]}\n", f);
	return 0;
}

static void dstat_json(FILE *f, const struct dcr_diff_stat *d)
{
	fprintf(f, "\"chunks\": %" PRIu64 ", \"changed_chunks\": %" PRIu64
		", \"changed_bytes\": %" PRIu64 ", \"stored_bytes\": %" PRIu64,
		d->chunks, d->changed_chunks, d->changed_bytes, d->stored_bytes);
}

void dcr_diff_json(FILE *f, const struct dcr_diff_result *r)
{
	fprintf(f, "{\"from\": %" PRIu64 ", \"to\": %" PRIu64 ", \"files\": [",
		r->from, r->to);
	for (size_t i = 0; i < r->nfiles; i++) {
		const struct dcr_diff_file *df = &r->files[i];
		size_t nts = df->tensors.n;
		fprintf(f, "%s\n  {\"path\": ", i ? "," : "");
		dcr_json_str(f, df->path);
		fprintf(f, ", \"status\": \"%s\", ", df->status);
		dstat_json(f, &df->d);
		if (nts)
			fputs(", \"tensors\": [", f);
		for (size_t t = 0; t < nts; t++) {
			const struct dcr_tensor *tn = &df->tensors.t[t];
			fprintf(f, "%s\n    {\"name\": ", t ? "," : "");
			dcr_json_str(f, tn->name);
			fprintf(f, ", \"dtype\": ");
			dcr_json_str(f, tn->dtype);
			fprintf(f, ", \"offset\": %" PRIu64 ", \"bytes\": %" PRIu64
				", \"changed_chunks\": %" PRIu64 ", \"changed_bytes\": %" PRIu64
				", \"stored_bytes\": %" PRIu64 "}", tn->off, tn->len,
				df->ts[t].changed_chunks, df->ts[t].changed_bytes,
				df->ts[t].stored_bytes);
		}
		fputs(nts ? "]}" : "}", f);
	}
	fputs("\n], \"total\": {", f);
	dstat_json(f, &r->total);
	fputs("}}\n", f);
}

void dcr_verify_json(FILE *f, const struct dcr_verify_result *r)
{
	fprintf(f, "{\"ok\": %s, \"packs_checked\": %" PRIu64 ", \"bytes_checked\": %" PRIu64
		", \"versions\": [", r->ndamage ? "false" : "true", r->packs_checked,
		r->bytes_checked);
	for (size_t i = 0; i < r->nversions; i++)
		fprintf(f, "%s%" PRIu64, i ? ", " : "", r->versions[i]);
	fputs("], \"damage\": [", f);
	for (size_t k = 0; k < r->ndamage; k++) {
		const struct dcr_verify_damage *d = &r->damage[k];
		fprintf(f, "%s\n  {\"object\": ", k ? "," : "");
		dcr_json_str(f, d->object);
		fputs(", \"reason\": ", f);
		dcr_json_str(f, d->reason);
		fputs(", \"affects\": [", f);
		for (size_t h = 0; h < d->nhits; h++) {
			const struct dcr_verify_hit *x = &d->hits[h];
			if (!x->path) {
				fprintf(f, "%s{\"version\": %" PRIu64 ", \"path\": null, \"chunks\": null}",
					h ? ", " : "", x->version);
				continue;
			}
			fprintf(f, "%s{\"version\": %" PRIu64 ", \"path\": ", h ? ", " : "",
				x->version);
			dcr_json_str(f, x->path);
			fprintf(f, ", \"chunks\": %" PRIu64 "}", x->chunks);
		}
		fputs("]}", f);
	}
	fputs(r->ndamage ? "\n], \"signatures\": [" : "], \"signatures\": [", f);
	for (size_t i = 0; i < r->nsigs; i++) {
		const struct dcr_verify_sig *g = &r->sigs[i];
		fprintf(f, "%s{\"version\": %" PRIu64 ", \"signer\": ", i ? ", " : "",
			g->version);
		dcr_json_str(f, g->signer);
		fprintf(f, ", \"status\": \"%s\"}", g->status);
	}
	fputs("]}\n", f);
}

void dcr_gc_json(FILE *f, const struct dcr_gc_result *r)
{
	fprintf(f, "{\"dry_run\": %s, \"rebased\": %s, \"versions_kept\": %zu"
		", \"versions_kept_for_chains\": %zu, \"versions_removed\": [",
		r->dry_run ? "true" : "false", r->rebased ? "true" : "false", r->kept,
		r->chain);
	for (size_t i = 0; i < r->nremoved; i++)
		fprintf(f, "%s%" PRIu64, i ? ", " : "", r->removed[i]);
	fputs("], \"tags_removed\": [", f);
	for (size_t t = 0; t < r->ntags_removed; t++) {
		fputs(t ? ", " : "", f);
		dcr_json_str(f, r->tags_removed[t]);
	}
	fprintf(f, "], \"packs_deleted\": %zu, \"bytes_freed\": %" PRIu64
		", \"orphans_kept\": %zu, \"orphan_bytes_kept\": %" PRIu64
		", \"previous_layout_packs_kept\": %zu, \"previous_layout_bytes_kept\": %" PRIu64
		", \"uploads_aborted\": %zu, \"upload_bytes_aborted\": %" PRIu64
		", \"uploads_kept\": %zu, \"commits_running\": %zu"
		", \"grace_seconds\": %" PRIu64 "}\n",
		r->packs, r->freed, r->orphans, r->orphan_bytes, r->prev, r->prev_bytes,
		r->aborted, r->aborted_bytes, r->uploads_kept, r->commits_running,
		r->grace);
}
