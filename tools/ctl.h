/* SPDX-License-Identifier: MIT */
/*
 * ctl.h - what the parts of dcrfs-ctl share: the command line, the
 * store's index (versions, packs, tags; loaded once per run) and the
 * helpers over it. tools/dcrfs-ctl.c parses, indexes and runs log, show,
 * diff, tag, untag, init and status; ctl_verify.c runs verify and
 * ctl_gc.c runs gc. Single-threaded, like the tool.
 */
#ifndef DCR_CTL_H
#define DCR_CTL_H

#include <limits.h>
#include <stdint.h>

#include "hash.h"
#include "manifest.h"
#include "objstore.h"
#include "reader.h"

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
};

struct ver {
	uint64_t v;
	uint64_t obj_size;  /* bytes of the manifest object */
	int state;          /* 0 not loaded, 1 loaded, -errno unreadable */
	struct dcr_manifest m;
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
	struct dcr_reader *r;        /* scratch reader, opened on demand */
	char scratch[PATH_MAX];      /* its directory ("" = none) */
	int json;
};

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
/* True if some chunk of @m is built on its parent's. */
int needs_parent(const struct dcr_manifest *m);
/* The pack name in the key "packs/<hex>" into @h: 0 or -1. */
int pack_key_hash(const char *key, uint8_t h[DCR_HASH_LEN]);
/* The listed pack named @h, or NULL. */
const struct pack *pack_find(const struct ctl *c, const uint8_t h[DCR_HASH_LEN]);

/* verify [V...] [--deep] (ctl_verify.c) */
int cmd_verify(struct ctl *c, char **args, int nargs, int deep, int quiet);
/* gc (ctl_gc.c) */
int cmd_gc(struct ctl *c, const struct args *a);

#endif /* DCR_CTL_H */
