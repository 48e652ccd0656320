/* SPDX-License-Identifier: MIT */
/*
 * args.h - dcrfs's command line: its options, as given and as checked.
 *
 *   dcrfs STORE MOUNTPOINT [-f] [-d] [-s] [-o opt[,opt...]]
 *
 * main.c calls, in this order:
 *
 *   1. dcrfs_long_opts: the tools' spelling (--cache-dir DIR) rewritten
 *      to -o cache_dir=DIR, so that both mean the same;
 *   2. dcrfs_args_parse: fuse_opt_parse takes dcrfs's own -o options out
 *      (as strings) and drops those of mount(8) that mean nothing to a
 *      FUSE daemon; the rest is left in the fuse_args for libfuse, which
 *      rejects what it does not know (fuse_session_new);
 *   3. dcrfs_args_check: each value checked and converted by options.h's
 *      table into struct dcrfs, the store's and the reader's options;
 *   4. dcrfs_args_fuse: the options dcrfs always gives libfuse added
 *      (fsname, subtype, default_permissions, ro,nosuid,nodev);
 *   5. dcrfs_args_free and dcrfs_long_opts_free, whatever happened.
 *
 * Every error is said on stderr, prefixed "dcrfs: ", before the daemon
 * forks: nothing here logs. Values are not opened or resolved here (a
 * path stays as given; the store, trust file and metrics address are
 * tried by main.c).
 */
#ifndef DCRFS_ARGS_H
#define DCRFS_ARGS_H

#include <stdio.h>

#include "fs.h"
#include "store.h"

/** The program's name, as messages and the usage say it. */
#define DCRFS_PROG "dcrfs"

/** Session worker threads without -o max_threads (libfuse's default). */
#define DCRFS_MAX_THREADS_DEFAULT 64

/**
 * struct dcrfs_args - the command line: the strings as given (malloc'ed;
 * NULL: not given), the flags, and the values dcrfs_args_check converted
 * into it (log_lvl).
 */
struct dcrfs_args {
	/* dcrfs's own -o options, as given */
	char *cache_dir;
	char *cache_size;
	char *poll;
	char *relist;
	char *prefetch;
	char *delta_ahead;
	char *trust;
	char *passthrough;
	char *latest_wait;
	char *scrub;
	char *scrub_rate;
	char *readahead;
	char *endpoint;
	char *region;
	char *profile;
	char *credentials;
	char *ca_bundle;
	char *s3_timeout;
	char *fetch_threads;
	char *threads;
	char *fetch_ahead;
	char *mirror;       /* every mirror=URL, comma-joined */
	int path_style;
	int no_sign_request;
	int no_splice; /* -o nosplice: accepted, no effect (always copied) */
	int prefetch_pagecache;
	int nonempty;
	char *log;
	char *log_level;
	char *metrics;
	int log_lvl;        /* -o log_level, converted (enum dcr_log_level) */
	/* session loop */
	int foreground;
	int debug;
	int singlethread;
	int clone_fd;
	unsigned int max_threads;
	unsigned int max_idle_threads;
	unsigned int max_read;     /* also passed on to libfuse */
	int takeover;              /* --takeover (fs/handover.h) */
	char *restart_wait;        /* -o restart_wait=SECONDS */
	unsigned int restart_wait_ms; /* converted; 0: no holder */
	/* the rest of the command line */
	int help;
	int version;
	char *store;
	char *mountpoint;
	int has_fsname;
	int has_subtype;
};

/**
 * dcrfs_usage - print the usage, every dcrfs option and its default, to
 * @f (libfuse's own options follow: fuse_lowlevel_help).
 */
void dcrfs_usage(FILE *f);

/**
 * dcrfs_long_opts - @argv with the tools' spelling of every dcrfs option,
 * --cache-dir DIR or --cache-dir=DIR ('-' and '_' alike), rewritten to
 * -o cache_dir=DIR, and the aliases --foreground (-f), --allow-other,
 * --read-only, --endpoint-url URL. Returns the new argv (*@out_argc
 * strings; free it) or NULL, said on stderr when a value is missing. Its
 * strings are @argv's or made here, and those are listed in *@made
 * (NULL-terminated; free with dcrfs_long_opts_free).
 */
char **dcrfs_long_opts(int argc, char **argv, int *out_argc, char ***made);

/** dcrfs_long_opts_free - free the strings dcrfs_long_opts made, and
 * their list; NULL accepted. */
void dcrfs_long_opts_free(char **made);

/**
 * dcrfs_args_parse - clear @o and fill it from @args, leaving in @args
 * what libfuse must see: argv[0], -d, and every -o option that is
 * neither dcrfs's own nor ignored. Refuses options that would carry a
 * secret (without echoing them), unknown -options and a third operand.
 * 0 or -1, said on stderr; dcrfs_args_free @o either way.
 */
int dcrfs_args_parse(struct fuse_args *args, struct dcrfs_args *o);

/**
 * dcrfs_args_check - check and convert dcrfs's own -o values in @o into
 * @o, @fs, @cfg and @ropts, setting the defaults of those not given; the
 * log level takes effect now. 0 or -1 at the first bad value, said on
 * stderr as "dcrfs: bad NAME 'VALUE' (what is valid)".
 */
int dcrfs_args_check(struct dcrfs_args *o, struct dcrfs *fs,
		     struct dcr_store_cfg *cfg, struct dcr_reader_opts *ropts);

/**
 * dcrfs_args_fuse - add to @args the options dcrfs gives libfuse: first
 * fsname=@store (unless given), subtype=dcrfs (unless given) and
 * default_permissions, then the user's, then ro,nosuid,nodev last, so
 * that nothing given mounts writable. 0 or -1 (out of memory).
 */
int dcrfs_args_fuse(struct fuse_args *args, const struct dcrfs_args *o,
		    const char *store);

/** dcrfs_args_free - free @o's strings, leaving them NULL. */
void dcrfs_args_free(struct dcrfs_args *o);

#endif /* DCRFS_ARGS_H */
