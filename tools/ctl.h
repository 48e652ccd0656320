/* SPDX-License-Identifier: MIT */
/*
 * ctl.h - what the parts of dcrfs-ctl share: the command line, the
 * store's index (versions, packs, tags; loaded once per run) and the
 * helpers over it. tools/dcrfs-ctl.c parses, indexes and runs log, show,
 * diff, tag, untag, init and status; ctl_verify.c runs verify,
 * ctl_gc.c gc, ctl_compact.c compact and ctl_warm.c warm. Single-threaded,
 * like the tool, but for warm's GETs (on a core/wq queue).
 */
#ifndef DCR_CTL_H
#define DCR_CTL_H

#include <limits.h>
#include <stdint.h>

#include "hash.h"
#include "layout.h"
#include "manifest.h"
#include "objstore.h"
#include "compact.h"
#include "reader.h"
#include "progress.h"
#include "mirror.h"
#include "store.h"
#include "toolopts.h"

#define EXIT_FAIL 1
#define EXIT_USAGE 2

/* A pack larger than this is not read into memory by verify. */
#define PACK_OBJ_MAX ((size_t)1 << 30)

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
	/* warm */
	const char *mirror[DCR_MIRRORS_MAX]; /* each --mirror */
	int nmirrors;
	uint64_t slice;      /* bytes per GET */
	int jobs;            /* GETs at once */
	struct tool_opts t;  /* --profile, --region, ..., --log-level */
};

struct ver {
	uint64_t v;
	uint64_t obj_size;  /* bytes of versions/<n> */
	int state;          /* 0 not loaded, 1 loaded, -errno unreadable */
	/* The manifest readers use under the store's layout: versions/<n>,
	 * or the compacted manifests/<hash> the layout names (then its
	 * parent is the encoding base, not the lineage). */
	struct dcr_manifest m;
	uint64_t lparent;   /* the parent it was committed against */
	int compacted;      /* the layout names another manifest */
};

struct pack {
	uint8_t h[DCR_HASH_LEN];
	uint64_t size;
	int64_t mtime_ns; /* 0: unknown */
};

struct tag {
	char *name;
	uint64_t v;
};

struct ctl {
	struct dcr_store *st;
	struct dcr_store_info info; /* its identity (dcr_store_check) */
	struct ver *vs;   /* ascending */
	size_t nvs, cap_vs;
	struct pack *packs; /* sorted by name */
	size_t npacks, cap_packs;
	struct tag *tags;
	size_t ntags, cap_tags;
	struct dcr_layout layout;    /* the store's newest readable (gen 0: none) */
	uint64_t layout_bad;         /* the newest damaged generation (0: none) */
	struct dcr_reader *r;        /* scratch reader, opened on demand */
	char scratch[PATH_MAX];      /* its directory ("" = none) */
	int json;
	struct progress pg;          /* verify, gc, compact */
};

/* Forget every loaded manifest and read the store's layout again
 * (after a compaction changed it). 0 or -errno (logged). */
int ctl_reload_layout(struct ctl *c);

/* The version (loaded) named @v, or NULL. */
struct ver *ver_find(struct ctl *c, uint64_t v);
/* @x's manifest, loaded on first use (NULL if unreadable, logged). */
const struct dcr_manifest *ver_manifest(struct ctl *c, struct ver *x);
/* The version a command-line argument names (number, tag, latest). */
struct ver *resolve(struct ctl *c, const char *arg);
/* Bytes [off, off+n) of file @fi of version @v through the scratch
 * reader: 0 or -errno (logged naming @path). */
int read_bytes(struct ctl *c, uint64_t v, uint32_t fi, const char *path,
		      uint64_t off, void *buf, size_t len);
/* The pack name in the key "packs/<hex>" into @h: 0 or -1. */
int pack_key_hash(const char *key, uint8_t h[DCR_HASH_LEN]);
/* The listed pack named @h, or NULL. */
const struct pack *pack_find(const struct ctl *c, const uint8_t h[DCR_HASH_LEN]);

/* verify [V...] [--deep] (ctl_verify.c) */
int cmd_verify(struct ctl *c, char **args, int nargs, int deep, int quiet);
/* gc (ctl_gc.c) */
int cmd_gc(struct ctl *c, const struct args *a);
/* compact [--max-depth K] [--dry-run] (ctl_compact.c) */
int cmd_compact(struct ctl *c, const struct args *a);
/* warm [V] --mirror URL... (ctl_warm.c); @cfg: how the store was opened */
int cmd_warm(struct ctl *c, const struct args *a, const struct dcr_store_cfg *cfg);
/* Compaction keeping only @keep (ascending; NULL: all): 0 or -errno
 * (logged); prints what it does unless @quiet. (ctl_compact.c) */
int ctl_compact(struct ctl *c, const struct args *a, const uint64_t *keep,
		size_t nkeep, struct dcr_compact_stats *s);

#endif /* DCR_CTL_H */
