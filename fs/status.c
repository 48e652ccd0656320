/* SPDX-License-Identifier: MIT */
/*
 * status.c - what a mount reports about itself: the contents of the
 * hidden files MNT/.dcrfs/status.json (one JSON object, read by
 * dcrfs-ctl status) and MNT/.dcrfs/metrics (Prometheus text format,
 * version 0.0.4). ops.c serves them; this file only renders them from
 * the reader's statistics and the mount's own counters.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "json.h"
#include "fs.h"
#include "handover.h"
#include "sign.h"
#include "mirror.h"

/* Resident set size of this process in bytes; 0 if unknown. */
static uint64_t rss_bytes(void)
{
	unsigned long long pages = 0, rss = 0;
	FILE *f = fopen("/proc/self/statm", "re");

	if (!f)
		return 0;
	if (fscanf(f, "%llu %llu", &pages, &rss) != 2)
		rss = 0;
	fclose(f);
	return (uint64_t)rss * (uint64_t)sysconf(_SC_PAGESIZE);
}

static const char *prefetch_name(enum dcrfs_prefetch p)
{
	return p == DCRFS_PREFETCH_ALL ? "all" :
	       p == DCRFS_PREFETCH_LATEST ? "latest" : "none";
}

static const char *delta_ahead_name(enum dcrfs_delta_ahead a)
{
	return a == DCRFS_DELTA_AHEAD_ON ? "on" :
	       a == DCRFS_DELTA_AHEAD_OFF ? "off" : "auto";
}

/* Everything reported, gathered once per rendering. */
struct snap {
	struct dcr_reader_stats rs;
	struct dcr_mirror_stats mirrors; /* n == 0: no mirrors */
	uint64_t want, done, cur, pf_bytes, pf_total, pf_versions;
	uint64_t fuse_reads, fuse_read_errors, refresh_errors, rss;
	struct dcrfs_delta_counts dv; /* /delta views */
	/* passthrough: opens by mode, fallbacks by reason, READs that
	 * reached the daemon on passthrough opens (0 when it works) */
	uint64_t pt_opens, pt_normal, pt_reads, pt_backing;
	uint64_t pt_fb[DCRFS_PT_FB_COUNT];
	int pt_on, pt_offered;
	struct dcrfs_scrub_stats scrub;
	struct dcrfs_ho_counts ho; /* handovers and restarts of the mount */
	double uptime, hit_rate;
};

static const char *const fallback_names[DCRFS_PT_FB_COUNT] = {
	[DCRFS_PT_FB_OFF] = "off",
	[DCRFS_PT_FB_NOT_READY] = "not_cached",
	[DCRFS_PT_FB_MIXED] = "open_normally",
	[DCRFS_PT_FB_REGISTER] = "refused",
};

static void snap_take(struct dcrfs *fs, struct snap *s)
{
#define LOAD(f) atomic_load_explicit(&fs->stats.f, memory_order_relaxed)
	memset(s, 0, sizeof(*s));
	dcr_reader_get_stats(fs->r, &s->rs);
	pthread_mutex_lock(&fs->bg.lock);
	s->want = fs->bg.prefetch_want;
	s->done = fs->bg.prefetch_done;
	pthread_mutex_unlock(&fs->bg.lock);
	s->cur = LOAD(pf_version);
	s->pf_bytes = LOAD(pf_bytes);
	s->pf_total = LOAD(pf_total);
	s->pf_versions = LOAD(pf_versions);
	s->fuse_reads = LOAD(reads);
	s->fuse_read_errors = LOAD(read_errors);
	s->refresh_errors = LOAD(refresh_errors);
#undef LOAD
#define PT(f) atomic_load_explicit(&fs->bk.pt.f, memory_order_relaxed)
	s->pt_opens = PT(opens);
	s->pt_normal = PT(normal_opens);
	s->pt_reads = PT(reads_seen);
	s->pt_backing = PT(registered);
	for (int i = 0; i < DCRFS_PT_FB_COUNT; i++)
		s->pt_fb[i] = PT(fallbacks[i]);
#undef PT
	dcrfs_scrub_stats(fs, &s->scrub);
	s->pt_on = dcrfs_pt_usable(&fs->bk.pt);
	s->pt_offered = atomic_load(&fs->bk.pt.offered);
	if (dcr_mirror_get_stats(fs->st, &s->mirrors))
		s->mirrors.n = 0;
	dcrfs_delta_counts(fs, &s->dv);
	dcrfs_ho_counts(&s->ho);
	s->rss = rss_bytes();
	s->uptime = (double)(dcr_now_ns() - fs->cfg.mount_ns) / 1e9;
	uint64_t lookups = s->rs.chunk_hits + s->rs.chunk_misses;
	s->hit_rate = lookups ? (double)s->rs.chunk_hits / (double)lookups : 0.0;
}

static void render_json(struct dcrfs *fs, const struct snap *s, FILE *f)
{
	const struct dcr_reader_stats *r = &s->rs;

	fputs("{\"store\": ", f);
	dcr_json_str(f, fs->st->url);
	fputs(", \"mountpoint\": ", f);
	dcr_json_str(f, fs->mountpoint ? fs->mountpoint : "");
	fprintf(f, ", \"pid\": %ld, \"uptime_s\": %.3f, \"rss_bytes\": %" PRIu64 ",\n",
		(long)getpid(), s->uptime, s->rss);
	fprintf(f, " \"latest\": %" PRIu64 ", \"versions\": %" PRIu64
		", \"trees_loaded\": %" PRIu64 ",\n", r->latest, r->versions,
		r->trees_loaded);
	fprintf(f, " \"cache\": {\"bytes\": %" PRIu64 ", \"budget\": %" PRIu64
		", \"hits\": %" PRIu64 ", \"misses\": %" PRIu64 ", \"hit_rate\": %.4f},\n",
		r->cache_bytes, r->cache_budget, r->chunk_hits, r->chunk_misses,
		s->hit_rate);
	fprintf(f, " \"reads\": %" PRIu64 ", \"bytes\": {\"read\": %" PRIu64
		", \"fetched\": %" PRIu64 ", \"materialized\": %" PRIu64
		", \"verified\": %" PRIu64 ", \"sha_proven\": %" PRIu64
		"}, \"fetches\": %" PRIu64 ",\n",
		s->fuse_reads, r->bytes_read, r->bytes_fetched, r->bytes_materialized,
		r->bytes_verified, r->bytes_sha_proven, r->fetches);
	fprintf(f, " \"threads\": %" PRIu64 ", \"busy_s\": {\"fetch\": %.3f"
		", \"decode\": %.3f, \"write\": %.3f, \"check\": %.3f},\n",
		r->threads, (double)r->busy_fetch_ns / 1e9,
		(double)r->busy_decode_ns / 1e9, (double)r->busy_write_ns / 1e9,
		(double)r->busy_check_ns / 1e9);
	fprintf(f, " \"errors\": {\"reads\": %" PRIu64 ", \"fetches\": %" PRIu64
		", \"refreshes\": %" PRIu64 ", \"cache\": %" PRIu64
		", \"tags\": %" PRIu64 "},\n",
		s->fuse_read_errors, r->fetch_errors, s->refresh_errors,
		r->cache_errors, r->tag_errors);
	fprintf(f, " \"trust\": {\"keys\": %zu, \"rejected\": {\"unsigned\": %"
		PRIu64 ", \"bad\": %" PRIu64 ", \"other_store\": %" PRIu64
		", \"untrusted\": %" PRIu64 ", \"tags\": %" PRIu64 "}},\n",
		dcr_trust_count(fs->trust), r->rejected_unsigned,
		r->rejected_bad, r->rejected_store, r->rejected_untrusted,
		r->rejected_tags);
	fprintf(f, " \"opens\": {\"passthrough\": %" PRIu64 ", \"normal\": %"
		PRIu64 ", \"fallbacks\": {", s->pt_opens, s->pt_normal);
	for (int i = 0; i < DCRFS_PT_FB_COUNT; i++)
		fprintf(f, "%s\"%s\": %" PRIu64, i ? ", " : "",
			fallback_names[i], s->pt_fb[i]);
	fprintf(f, "}},\n \"passthrough\": {\"offered\": %s, \"active\": %s, "
		"\"backing_files\": %" PRIu64 ", \"reads_seen\": %" PRIu64 "},\n",
		s->pt_offered ? "true" : "false", s->pt_on ? "true" : "false",
		s->pt_backing, s->pt_reads);
	fprintf(f, " \"scrub\": {\"interval\": %g, \"rate\": %" PRIu64
		", \"passes\": %" PRIu64 ", \"files_checked\": %" PRIu64
		", \"bytes_checked\": %" PRIu64 ", \"rotten\": %" PRIu64
		", \"repaired\": %" PRIu64 ", \"dropped\": %" PRIu64
		", \"last_pass\": %.3f, \"last_pass_s\": %.3f, \"verity\": \"%s\""
		", \"sealed\": %" PRIu64 "},\n",
		s->scrub.interval_ms / 1000.0, s->scrub.rate, s->scrub.passes,
		s->scrub.files, s->scrub.bytes, s->scrub.rotten,
		s->scrub.repaired, s->scrub.dropped,
		(double)s->scrub.last_end_ns / 1e9,
		(double)s->scrub.last_took_ns / 1e9,
		r->cache_verity > 0 ? "on" : r->cache_verity < 0 ? "off" : "unknown",
		r->cache_sealed);
	fprintf(f, " \"prefetch\": {\"mode\": \"%s\", \"want\": %" PRIu64
		", \"done\": %" PRIu64 ", \"current\": %" PRIu64 ", \"bytes_done\": %"
		PRIu64 ", \"bytes_total\": %" PRIu64 ", \"versions_done\": %" PRIu64
		"}", prefetch_name(fs->bg.prefetch), s->want, s->done, s->cur,
		s->pf_bytes, s->pf_total, s->pf_versions);
	fprintf(f, ",\n \"delta\": {\"views_built\": %" PRIu64 ", \"bytes_built\": %"
		PRIu64 ", \"bytes_kept\": %" PRIu64 ", \"views_ready\": %" PRIu64
		", \"tensor_bytes_compared\": %" PRIu64 ", \"tensor_bytes_recorded\": %"
		PRIu64 ", \"tensor_bytes_skipped\": %" PRIu64 ", \"records\": "
		"{\"chunks\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"kept\": %"
		PRIu64 ", \"refused\": %" PRIu64 "}, \"opens\": {\"passthrough\": %"
		PRIu64 ", \"normal\": %" PRIu64 "}, \"reads\": %" PRIu64
		", \"ahead\": \"%s\", \"ahead_now\": %s}",
		s->dv.built, s->dv.built_bytes,
		s->dv.cached_bytes, s->dv.ready, s->dv.compared, s->dv.recorded,
		s->dv.skipped, s->dv.rec.chunks, s->dv.rec.bytes, s->dv.rec.kept,
		s->dv.rec.refused, s->dv.pt_opens, s->dv.normal_opens, s->dv.reads,
		delta_ahead_name(fs->dv.ahead), s->dv.ahead ? "true" : "false");
	fprintf(f, ",\n \"handover\": {\"handovers\": %" PRIu64 ", \"restarts\": %"
		PRIu64 ", \"resent\": %" PRIu64 ", \"keeper\": \"%s\"}",
		s->ho.handovers, s->ho.restarts, s->ho.resent, s->ho.keeper);
	if (s->mirrors.n) {
		fputs(",\n \"sources\": [", f);
		for (size_t i = 0; i < s->mirrors.n; i++) {
			const struct dcr_mirror_source *m = &s->mirrors.src[i];

			fprintf(f, "%s{\"kind\": \"%s\", \"url\": ", i ? ", " : "",
				i ? "mirror" : "store");
			dcr_json_str(f, m->url);
			fprintf(f, ", \"requests\": %" PRIu64 ", \"bytes\": %" PRIu64
				", \"errors\": %" PRIu64 ", \"skipping\": %s}",
				m->requests, m->bytes, m->errors,
				m->skipping ? "true" : "false");
		}
		fprintf(f, "], \"refetches\": %" PRIu64, s->mirrors.refetches);
	}
	fputs("}\n", f);
}

/* A Prometheus label value: '\\', '"' and newlines escaped. */
static void label_value(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			fputc('\\', f);
		if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

/* Pack GETs by source (store/mirror.h), when the mount has mirrors. */
static void render_sources(const struct dcr_mirror_stats *ms, FILE *f)
{
	static const struct {
		const char *name, *help;
		size_t field;
	} fam[] = {
		{ "source_requests_total", "GETs answered, by source.",
		  offsetof(struct dcr_mirror_source, requests) },
		{ "source_bytes_total", "Bytes received, by source.",
		  offsetof(struct dcr_mirror_source, bytes) },
		{ "source_errors_total", "Failed GETs, by source (a mirror's "
		  "went to the store).", offsetof(struct dcr_mirror_source, errors) },
	};

	for (size_t k = 0; k < DCR_ARRAY_SIZE(fam); k++) {
		fprintf(f, "# HELP dcrfs_%s %s\n# TYPE dcrfs_%s counter\n",
			fam[k].name, fam[k].help, fam[k].name);
		for (size_t i = 0; i < ms->n; i++) {
			const struct dcr_mirror_source *m = &ms->src[i];

			fprintf(f, "dcrfs_%s{kind=\"%s\",source=", fam[k].name,
				i ? "mirror" : "store");
			label_value(f, m->url);
			fprintf(f, "} %" PRIu64 "\n", *(const uint64_t *)
				((const char *)m + fam[k].field));
		}
	}
	fprintf(f, "# HELP dcrfs_mirror_refetches_total Frames fetched again "
		"from the store after failing their check.\n"
		"# TYPE dcrfs_mirror_refetches_total counter\n"
		"dcrfs_mirror_refetches_total %" PRIu64 "\n", ms->refetches);
}

static void render_metrics(struct dcrfs *fs, const struct snap *s, FILE *f)
{
	const struct dcr_reader_stats *r = &s->rs;
	const struct {
		const char *name;
		bool counter;
		const char *help;
		double value;
	} ms[] = {
		{ "uptime_seconds", false, "Seconds since the mount.", s->uptime },
		{ "resident_memory_bytes", false, "Resident set size of the daemon.",
		  (double)s->rss },
		{ "latest_version", false, "Newest version seen.", (double)r->latest },
		{ "versions", false, "Versions known.", (double)r->versions },
		{ "trees_loaded", false, "Versions whose tree is in memory.",
		  (double)r->trees_loaded },
		{ "cache_bytes", false, "Bytes of the chunk cache.", (double)r->cache_bytes },
		{ "cache_budget_bytes", false, "Budget of the chunk cache.",
		  (double)r->cache_budget },
		{ "chunk_hits_total", true, "Chunk pieces read from memory or the cache.",
		  (double)r->chunk_hits },
		{ "chunk_misses_total", true, "Chunk pieces that had to be materialized.",
		  (double)r->chunk_misses },
		{ "reads_total", true, "Read requests served.", (double)s->fuse_reads },
		{ "read_bytes_total", true, "Bytes returned by reads.", (double)r->bytes_read },
		{ "fetches_total", true, "Ranged GETs of frames.", (double)r->fetches },
		{ "fetched_bytes_total", true, "Bytes fetched from the store.",
		  (double)r->bytes_fetched },
		{ "materialized_bytes_total", true, "Chunk bytes built from frames.",
		  (double)r->bytes_materialized },
		{ "verified_bytes_total", true, "Chunk bytes proven against their hash.",
		  (double)r->bytes_verified },
		{ "threads", false, "Threads of each CPU-bound stage (threads=N).",
		  (double)r->threads },
		{ "busy_fetch_seconds_total", true,
		  "Seconds spent in store GETs, summed over threads.",
		  (double)r->busy_fetch_ns / 1e9 },
		{ "busy_decode_seconds_total", true,
		  "Seconds spent applying frames and proving chunks.",
		  (double)r->busy_decode_ns / 1e9 },
		{ "busy_write_seconds_total", true,
		  "Seconds spent writing built chunks to the cache.",
		  (double)r->busy_write_ns / 1e9 },
		{ "busy_check_seconds_total", true,
		  "Seconds spent checking cached chunks.",
		  (double)r->busy_check_ns / 1e9 },
		{ "prefetch_want_version", false, "Version the prefetcher works towards.",
		  (double)s->want },
		{ "prefetch_done_version", false, "Last version fully prefetched.",
		  (double)s->done },
		{ "prefetch_bytes", false, "Bytes of the current prefetch done.",
		  (double)s->pf_bytes },
		{ "prefetch_total_bytes", false, "Bytes of the current prefetch.",
		  (double)s->pf_total },
		{ "prefetched_versions_total", true, "Versions prefetched whole.",
		  (double)s->pf_versions },
		{ "passthrough_active", false,
		  "1 when the kernel serves reads of whole cached files.",
		  (double)s->pt_on },
		{ "passthrough_backing_files", false,
		  "Cache files the kernel reads from now.", (double)s->pt_backing },
		{ "passthrough_reads_seen_total", true,
		  "Reads that reached the daemon on passthrough opens.",
		  (double)s->pt_reads },
		{ "scrub_passes_total", true,
		  "Scrub passes over the files open through passthrough.",
		  (double)s->scrub.passes },
		{ "scrub_files_total", true, "Files the scrub checked whole.",
		  (double)s->scrub.files },
		{ "scrub_bytes_total", true, "Bytes the scrub read and checked.",
		  (double)s->scrub.bytes },
		{ "scrub_rotten_chunks_total", true,
		  "Chunks the scrub found rotten in the cache.",
		  (double)s->scrub.rotten },
		{ "scrub_repaired_chunks_total", true,
		  "Rotten chunks the scrub rewrote in place with proven bytes.",
		  (double)s->scrub.repaired },
		{ "scrub_dropped_files_total", true,
		  "Files the scrub took out of the cache (not repairable).",
		  (double)s->scrub.dropped },
		{ "delta_views_built_total", true,
		  "Delta views (MNT/delta) built.", (double)s->dv.built },
		{ "delta_view_bytes_built_total", true,
		  "Bytes of the delta views built.", (double)s->dv.built_bytes },
		{ "delta_view_bytes", false,
		  "Bytes of the delta views kept now.", (double)s->dv.cached_bytes },
		{ "delta_views_ready_total", true,
		  "Delta views built when a prefetch ended.", (double)s->dv.ready },
		{ "delta_view_tensor_bytes_recorded_total", true,
		  "Tensor bytes of delta views whose changes came from records.",
		  (double)s->dv.recorded },
		{ "delta_view_tensor_bytes_compared_total", true,
		  "Tensor bytes of delta views read and compared.",
		  (double)s->dv.compared },
		{ "delta_record_bytes", false,
		  "Bytes of the records of changes kept now.", (double)s->dv.rec.bytes },
		{ "handovers_total", true,
		  "Daemons that took the mount over from a running one "
		  "(dcrfs --takeover).", (double)s->ho.handovers },
		{ "restarts_total", true,
		  "Daemons that restarted the mount after its daemon died, from "
		  "the holder or systemd's fd store.", (double)s->ho.restarts },
		{ "requests_resent_total", true,
		  "Requests a dead daemon had read that the kernel sent again.",
		  (double)s->ho.resent },
		{ "connection_kept", false,
		  "1 when a holder or systemd's fd store keeps the connection "
		  "for a restart after a crash.", strcmp(s->ho.keeper, "none") ? 1.0 : 0.0 },
	};

	fputs("# HELP dcrfs_info The mounted store.\n# TYPE dcrfs_info gauge\n"
	      "dcrfs_info{store=", f);
	label_value(f, fs->st->url);
	fputs(",prefetch=", f);
	label_value(f, prefetch_name(fs->bg.prefetch));
	fputs("} 1\n", f);
	for (size_t i = 0; i < DCR_ARRAY_SIZE(ms); i++)
		fprintf(f, "# HELP dcrfs_%s %s\n# TYPE dcrfs_%s %s\ndcrfs_%s %.17g\n",
			ms[i].name, ms[i].help, ms[i].name,
			ms[i].counter ? "counter" : "gauge", ms[i].name, ms[i].value);
	fputs("# HELP dcrfs_errors_total Failures, by kind.\n"
	      "# TYPE dcrfs_errors_total counter\n", f);
	fprintf(f, "dcrfs_errors_total{kind=\"read\"} %" PRIu64 "\n"
		"dcrfs_errors_total{kind=\"fetch\"} %" PRIu64 "\n"
		"dcrfs_errors_total{kind=\"refresh\"} %" PRIu64 "\n"
		"dcrfs_errors_total{kind=\"cache\"} %" PRIu64 "\n"
		"dcrfs_errors_total{kind=\"tags\"} %" PRIu64 "\n",
		s->fuse_read_errors, r->fetch_errors, s->refresh_errors,
		r->cache_errors, r->tag_errors);
	fputs("# HELP dcrfs_rejected_total Versions and tags not shown "
	      "(trust=), by why.\n# TYPE dcrfs_rejected_total counter\n", f);
	fprintf(f, "dcrfs_rejected_total{reason=\"unsigned\"} %" PRIu64 "\n"
		"dcrfs_rejected_total{reason=\"bad_signature\"} %" PRIu64 "\n"
		"dcrfs_rejected_total{reason=\"other_store\"} %" PRIu64 "\n"
		"dcrfs_rejected_total{reason=\"untrusted_key\"} %" PRIu64 "\n"
		"dcrfs_rejected_total{reason=\"tag\"} %" PRIu64 "\n",
		r->rejected_unsigned, r->rejected_bad, r->rejected_store,
		r->rejected_untrusted, r->rejected_tags);
	fputs("# HELP dcrfs_opens_total Opens of version files, by mode.\n"
	      "# TYPE dcrfs_opens_total counter\n", f);
	fprintf(f, "dcrfs_opens_total{mode=\"passthrough\"} %" PRIu64 "\n"
		"dcrfs_opens_total{mode=\"normal\"} %" PRIu64 "\n",
		s->pt_opens, s->pt_normal);
	fputs("# HELP dcrfs_passthrough_fallbacks_total Normal opens, by why "
	      "passthrough was not used.\n"
	      "# TYPE dcrfs_passthrough_fallbacks_total counter\n", f);
	for (int i = 0; i < DCRFS_PT_FB_COUNT; i++)
		fprintf(f, "dcrfs_passthrough_fallbacks_total{reason=\"%s\"} %"
			PRIu64 "\n", fallback_names[i], s->pt_fb[i]);
	if (s->mirrors.n)
		render_sources(&s->mirrors, f);
}

int dcrfs_status_render(struct dcrfs *fs, enum dcrfs_status_file which,
			char **out, size_t *len)
{
	struct snap s;
	FILE *f;

	*out = NULL;
	*len = 0;
	f = open_memstream(out, len);
	if (!f)
		return DCR_ERR(-ENOMEM);
	snap_take(fs, &s);
	if (which == DCRFS_STATUS_JSON)
		render_json(fs, &s, f);
	else
		render_metrics(fs, &s, f);
	if (fclose(f) || !*out) {
		free(*out);
		*out = NULL;
		return DCR_ERR(-ENOMEM);
	}
	return 0;
}
