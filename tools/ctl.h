/* SPDX-License-Identifier: MIT */
/*
 * ctl.h - what the parts of dcrfs-ctl share: the command line and the
 * store's index (store/index.h, loaded once per run). The work is in
 * store/ (index.h, diff.h, verify.h, gc.h, compact.h); these files parse
 * and print: tools/dcrfs-ctl.c parses and runs log, show, diff, tag,
 * untag, init and status; ctl_verify.c prints verify, ctl_keys.c
 * runs keygen, ctl_gc.c gc,
 * ctl_compact.c compact and ctl_warm.c runs warm. Single-threaded, like
 * the tool, but for warm's GETs (on a core/wq queue).
 */
#ifndef DCR_CTL_H
#define DCR_CTL_H

#include <stdint.h>

#include "index.h"
#include "progress.h"
#include "mirror.h"
#include "store.h"
#include "toolopts.h"

#define EXIT_FAIL 1
#define EXIT_USAGE 2

struct args {
	const char *store;
	const char *cmd;
	char **pos;  /* arguments after the command */
	int npos;
	int json;
	int deep;
	int quiet;
	int verbose;
	/* gc */
	uint64_t keep_last;
	int keep_tagged;
	uint64_t keep_newer; /* seconds; 0 = no such rule */
	uint64_t grace;      /* seconds */
	int dry_run;
	int no_sign;
	int progress;        /* --progress */
	/* compact (and gc's rebasing) */
	unsigned max_depth;  /* 0 = default */
	unsigned read_cost;  /* --read-cost, percent; 0 = default */
	/* warm */
	const char *mirror[DCR_MIRRORS_MAX]; /* each --mirror */
	int nmirrors;
	uint64_t slice;      /* bytes per GET */
	int jobs;            /* GETs at once */
	int threads;         /* --threads: CPU-bound pools; 0 = the budget */
	/* signing */
	const char *sign_key; /* tag --sign-key */
	const char *trust;    /* verify --trust */
	struct tool_opts t;  /* --profile, --region, ..., --log-level */
};

struct ctl {
	struct dcr_index ix;
	int json;
	struct progress pg;          /* verify, gc, compact */
};

/* The progress callback (index.h) that shows progress on @arg, the
 * struct ctl's line (progress.h). */
void ctl_progress(void *arg, enum dcr_pg_state s, const char *phase,
		  uint64_t done, uint64_t total, const char *unit);

/* verify [V...] [--deep] [--trust FILE] (ctl_verify.c) */
int cmd_verify(struct ctl *c, char **args, int nargs, int deep, int quiet,
	       const char *trust_file);
/* keygen KEYFILE (ctl_keys.c): no store */
int cmd_keygen(const char *path, int json);
/* gc (ctl_gc.c) */
int cmd_gc(struct ctl *c, const struct args *a);
/* compact [--max-depth K] [--read-cost PCT] [--dry-run] (ctl_compact.c) */
int cmd_compact(struct ctl *c, const struct args *a);
/* The line saying that compaction (dry run: would have) re-encoded
 * version @v, on stdout; none with --json. (ctl_compact.c) */
void ctl_print_rewrite(struct ctl *c, int dry_run, uint64_t v, uint64_t old_base,
		       uint64_t new_base, unsigned depth);
/* warm [V] --mirror URL... (ctl_warm.c); @cfg: how the store *@stp was
 * opened; *@stp becomes the mirrored store that owns it (close that). */
int cmd_warm(struct ctl *c, const struct args *a, const struct dcr_store_cfg *cfg,
	     struct dcr_store **stp);

#endif /* DCR_CTL_H */
