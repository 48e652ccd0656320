/* SPDX-License-Identifier: MIT */
/*
 * ctl.h - what the parts of dcrfs-ctl share: the command line and the
 * store's index (maint/index.h, loaded once per run). The work is in
 * store/ (index.h, diff.h, verify.h, gc.h, compact.h); these files parse
 * and print: tools/dcrfs-ctl.c parses and runs log, show, diff, tag,
 * untag, init and status; ctl_verify.c prints verify, ctl_wait.c
 * runs wait (on a mount, no store), ctl_keys.c
 * runs keygen, ctl_gc.c gc,
 * ctl_compact.c compact, ctl_warm.c runs warm and ctl_export.c export
 * and cat. Single-threaded, like the tool, but for warm's GETs and
 * export's pieces (on core/wq queues).
 */
#ifndef DCR_CTL_H
#define DCR_CTL_H

#include <stdint.h>
#include <sys/types.h>

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
	int jobs;            /* GETs at once; export: threads */
	int jobs_set;        /* --jobs was given */
	/* export, cat */
	const char *cache_dir; /* --cache-dir */
	int threads;         /* --threads: CPU-bound pools; 0 = the budget */
	/* signing */
	const char *sign_key; /* tag --sign-key */
	const char *trust;    /* verify --trust */
	/* wait */
	int have_newer;       /* --newer-than given */
	uint64_t newer_than;
	double timeout_s;     /* --timeout; < 0: none */
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

/* ctl_check_mount - whether @mnt is the directory a dcrfs is mounted
 * on (its device into *@dev): 0, or -1 with the reason logged.
 * (dcrfs-ctl.c) */
int ctl_check_mount(const char *mnt, dev_t *dev);
/* wait MNT [--newer-than N] [--timeout S] (ctl_wait.c): blocks on
 * MNT/.dcrfs/latest until /latest shows a version newer than @newer
 * (@have_newer 0: than the one it shows now) and prints it; 0, 1 on a
 * timeout (@timeout_s < 0: none) or an error (logged). */
int cmd_wait(const char *mnt, int have_newer, uint64_t newer,
	     double timeout_s, int json);
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

/* export V DIR [--jobs N] [--cache-dir DIR] (ctl_export.c) */
int cmd_export(struct ctl *c, const struct args *a);
/* cat V PATH [--cache-dir DIR] (ctl_export.c) */
int cmd_cat(struct ctl *c, const struct args *a);

#endif /* DCR_CTL_H */
