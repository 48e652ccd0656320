/* SPDX-License-Identifier: MIT */
/*
 * args.c - dcrfs's command line (args.h): the option spec libfuse's
 * parser reads, the usage, the long spellings, the table that checks
 * and converts each -o value (options.h), and the arguments libfuse gets.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "args.h"
#include "options.h"

#define PROG DCRFS_PROG
#define POLL_DEFAULT 5
/* -o latest_wait default, seconds: how long /latest waits for the
 * prefetch of a new version before it moves to it anyway */
#define LATEST_WAIT_DEFAULT 60
#define POLL_MAX 604800 /* 7 days; said in the option table's hints */
#define POLL_MIN_MS 50
#define RELIST_DEFAULT 60
/* -o scrub default, seconds, and the least interval (scrub.c) */
#define SCRUB_DEFAULT 60
#define SCRUB_MIN_MS 1000
#define SCRUB_RATE_DEFAULT ((uint64_t)128 << 20)
/* -o restart_wait default, seconds: how long the holder keeps a mount
 * whose daemon died for a restart (fs/handover.h) */
#define RESTART_WAIT_DEFAULT 60
#define READAHEAD_DEFAULT ((uint64_t)1 << 20)
#define READAHEAD_MAX ((uint64_t)1 << 30)
#define STR_(x) #x
#define STR(x) STR_(x) /* a macro's value as a string literal */
#define S3_TIMEOUT_DEFAULT 30 /* seconds, as store/s3.c's default */

enum {
	KEY_HELP,
	KEY_VERSION,
	KEY_FOREGROUND,
	KEY_SINGLE,
	KEY_DEBUG,
	KEY_FSNAME,
	KEY_SUBTYPE,
	KEY_MIRROR,
};

#define OPT(t, field, v) { t, offsetof(struct dcrfs_args, field), v }

static const struct fuse_opt opt_spec[] = {
	OPT("cache_dir=%s", cache_dir, 0),
	OPT("cache_size=%s", cache_size, 0),
	OPT("poll=%s", poll, 0),
	OPT("relist=%s", relist, 0),
	OPT("prefetch=%s", prefetch, 0),
	OPT("delta_ahead=%s", delta_ahead, 0),
	OPT("trust=%s", trust, 0),
	OPT("passthrough=%s", passthrough, 0),
	OPT("latest_wait=%s", latest_wait, 0),
	OPT("scrub=%s", scrub, 0),
	OPT("scrub_rate=%s", scrub_rate, 0),
	OPT("restart_wait=%s", restart_wait, 0),
	OPT("prefetch_pagecache", prefetch_pagecache, 1),
	OPT("nosplice", no_splice, 1),
	OPT("nonempty", nonempty, 1),
	OPT("log=%s", log, 0),
	OPT("log_level=%s", log_level, 0),
	OPT("metrics=%s", metrics, 0),
	OPT("readahead=%s", readahead, 0),
	OPT("endpoint=%s", endpoint, 0),
	OPT("region=%s", region, 0),
	OPT("profile=%s", profile, 0),
	OPT("credentials=%s", credentials, 0),
	OPT("ca_bundle=%s", ca_bundle, 0),
	OPT("s3_timeout=%s", s3_timeout, 0),
	OPT("fetch_threads=%s", fetch_threads, 0),
	OPT("threads=%s", threads, 0),
	OPT("fetch_ahead=%s", fetch_ahead, 0),
	OPT("path_style", path_style, 1),
	OPT("nopath_style", path_style, 0),
	OPT("no_sign_request", no_sign_request, 1),
	OPT("clone_fd", clone_fd, 1),
	OPT("max_threads=%u", max_threads, 0),
	OPT("max_idle_threads=%u", max_idle_threads, 0),
	/* libfuse insists that init() repeats max_read: note and keep it */
	OPT("max_read=%u", max_read, 0),
	FUSE_OPT_KEY("max_read=", FUSE_OPT_KEY_KEEP),
	OPT("--takeover", takeover, 1),

	FUSE_OPT_KEY("-h", KEY_HELP),
	FUSE_OPT_KEY("--help", KEY_HELP),
	FUSE_OPT_KEY("-V", KEY_VERSION),
	FUSE_OPT_KEY("--version", KEY_VERSION),
	FUSE_OPT_KEY("-f", KEY_FOREGROUND),
	FUSE_OPT_KEY("-s", KEY_SINGLE),
	FUSE_OPT_KEY("-d", KEY_DEBUG),
	FUSE_OPT_KEY("--debug", KEY_DEBUG),
	FUSE_OPT_KEY("debug", KEY_DEBUG),
	FUSE_OPT_KEY("fsname=", KEY_FSNAME),
	FUSE_OPT_KEY("subtype=", KEY_SUBTYPE),
	FUSE_OPT_KEY("mirror=", KEY_MIRROR),

	/*
	 * Options for mount(8), fstab and mount.fuse3 that mean nothing to
	 * the daemon. "rw" and "ro" are dropped too: the mount is always
	 * read-only. (x-* is matched by prefix in opt_proc.)
	 */
	FUSE_OPT_KEY("_netdev", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_KEY("auto", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_KEY("noauto", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_KEY("nofail", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_KEY("user", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_KEY("nouser", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_KEY("users", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_KEY("owner", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_KEY("group", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_KEY("defaults", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_KEY("rw", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_KEY("ro", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_KEY("user=", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_KEY("comment=", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_KEY("nobootwait", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_END
};

void dcrfs_usage(FILE *f)
{
	fprintf(f,
"usage: " PROG " STORE MOUNTPOINT [-f] [-d] [-s] [-o opt[,opt...]]\n"
"\n"
"Mount the versions in STORE (a directory, file:///path or s3://bucket/prefix)\n"
"read-only on MOUNTPOINT: /latest, /v1 ... /vN, /tags/NAME.\n"
"\n"
"Every dcrfs option below may also be spelled as the other tools spell\n"
"theirs: --cache-dir DIR or --cache-dir=DIR for -o cache_dir=DIR; and\n"
"--foreground (-f), --allow-other, --read-only, --endpoint-url URL.\n"
"Exit status: 0 mounted (or unmounted cleanly with -f), 1 failure, 2 usage.\n"
"\n"
"general options:\n"
"    -h, --help             print this help and exit\n"
"    -V, --version          print the version and exit\n"
"    -f                     stay in the foreground\n"
"    -d, -o debug           FUSE debug output (implies -f)\n"
"    -s                     single-threaded session loop\n"
"    --takeover             take MOUNTPOINT over from the dcrfs serving it,\n"
"                           without an unmount (an upgrade; see dcrfs(8)),\n"
"                           or from the holder of a mount whose dcrfs died\n"
"                           (a restart)\n"
"\n"
"dcrfs options:\n"
"    -o cache_dir=DIR       chunk cache and catalog (default /var/cache/dcrfs\n"
"                           for root, else ${XDG_CACHE_HOME:-~/.cache}/dcrfs)\n"
"    -o cache_size=SIZE     cache budget, e.g. 50G (default 10G)\n"
"    -o poll=SECONDS        look for new versions this often (default %d;\n"
"                           0.05 to a week, e.g. 0.25; 0 = only when a\n"
"                           missing vN is looked up)\n"
"    -o relist=SECONDS      list versions/ whole this often (default %d):\n"
"                           re-index versions whose manifest changed in\n"
"                           the store, drop those that are gone\n"
"    -o prefetch=none|latest|all  read each new version (all: and then\n"
"                           every older one) in the background so it is\n"
"                           cached before latest moves to it (default\n"
"                           latest)\n"
"    -o delta_ahead=auto|on|off  build a new version's delta views when\n"
"                           its prefetch ends, from the changes it saw\n"
"                           (auto, the default: once this mount served a\n"
"                           view; off: each at its first read)\n"
"    -o trust=FILE          show only versions signed by a public key in\n"
"                           FILE (dcrfs-ctl keygen's KEYFILE.pub; several\n"
"                           keys: rotation); latest never goes back\n"
"    -o passthrough=auto|off  let the kernel read files that are whole and\n"
"                           verified in the cache straight from it (FUSE\n"
"                           passthrough; needs CAP_SYS_ADMIN; default auto)\n"
"    -o scrub=SECONDS       re-check the files open through passthrough\n"
"                           from the cache this often, repairing what\n"
"                           rotted (default %d; 0 = off)\n"
"    -o scrub_rate=SIZE     bytes a second a scrub reads at most (default\n"
"                           128M)\n"
"    -o restart_wait=SECS   if dcrfs dies, a holder keeps the mount this\n"
"                           long for dcrfs --takeover to restart it,\n"
"                           readers waiting (default " STR(RESTART_WAIT_DEFAULT) "; 0: none,\n"
"                           the mount dies with dcrfs)\n"
"    -o latest_wait=SECS    with prefetch, /latest moves to a new version\n"
"                           once it is prefetched, or after SECS (default\n"
"                           %d; 0: at once)\n"
"    -o prefetch_pagecache  also push prefetched bytes into the kernel's\n"
"                           page cache of files already looked up\n"
"    -o log=FILE            append every message to FILE (with -f: and to\n"
"                           stderr); default: syslog once detached, or\n"
"                           CACHE_DIR/dcrfs.log where there is no syslog\n"
"    -o log_level=LEVEL     error, warn, info (default) or debug\n"
"    -o metrics=HOST:PORT   serve GET /metrics (Prometheus text, as\n"
"                           MNT/.dcrfs/metrics) on HOST:PORT, e.g.\n"
"                           127.0.0.1:9741 (off by default)\n"
"    -o nonempty            allow a mount point that is not empty (its\n"
"                           files are hidden while mounted)\n"
"    -o nosplice            accepted; replies are always copied (every\n"
"                           chunk read from the cache is checked)\n"
"    -o readahead=SIZE      kernel readahead of the mount (0 to 1G, default\n"
"                           1M, 0 = kernel default; raising it needs root)\n"
"    -o max_threads=N       session worker threads (default %d)\n"
"    -o max_idle_threads=N  idle worker threads kept\n"
"    -o clone_fd            one /dev/fuse descriptor per thread (needs\n"
"                           -o restart_wait=0)\n"
"\n"
"S3 options (no secrets: use credentials files or AWS_* variables):\n"
"    -o endpoint=URL  -o region=NAME  -o profile=NAME\n"
"    -o credentials=FILE  -o ca_bundle=FILE  -o path_style|nopath_style\n"
"    -o no_sign_request     unsigned requests (a public bucket); without it,\n"
"                           no credentials found is an error\n"
"    -o s3_timeout=SECONDS  bound on one read(2)'s S3 requests, retries\n"
"                           included (default 30)\n"
"    -o mirror=URL          send pack GETs through this cache tier\n"
"                           (repeatable; default $DCRFS_MIRROR)\n"
"\n"
"fetching (any store):\n"
"    -o threads=N           threads of every CPU-bound stage: decode, write,\n"
"                           checks, prefetch, delta views (default: the\n"
"                           CPUs this process may use, cgroup quota included)\n"
"    -o fetch_threads=N     parallel fetches per read and read-ahead threads\n"
"                           (default: threads, at least 8)\n"
"    -o fetch_ahead=SIZE    fetch this far ahead of sequential reads in the\n"
"                           background (default 32M, 0 = off)\n"
"\n"
"Ignored (for fstab and mount(8)): _netdev, auto, noauto, nofail, user,\n"
"nouser, users, owner, group, defaults, rw, ro, user=*, comment=*, x-*.\n"
"Mounts are always ro,nosuid,nodev,default_permissions.\n"
"\n"
"FUSE options (-o allow_other, allow_root, max_read=N, fsname=NAME, ...):\n",
		POLL_DEFAULT, RELIST_DEFAULT, SCRUB_DEFAULT,
		LATEST_WAIT_DEFAULT, DCRFS_MAX_THREADS_DEFAULT);
}

/* Names of options that would carry a secret; refused without echo. */
static int secretish(const char *arg)
{
	static const char *const words[] = {
		"secret", "password", "passwd", "token", "access_key",
		"session_key", "private_key",
	};
	char name[64];
	size_t n = strcspn(arg, "=");

	if (n >= sizeof(name))
		n = sizeof(name) - 1;
	for (size_t i = 0; i < n; i++)
		name[i] = (char)(arg[i] >= 'A' && arg[i] <= 'Z' ?
				 arg[i] - 'A' + 'a' : arg[i]);
	name[n] = '\0';
	for (size_t i = 0; i < DCR_ARRAY_SIZE(words); i++)
		if (strstr(name, words[i]))
			return 1;
	return 0;
}

static int opt_proc(void *data, const char *arg, int key,
		    struct fuse_args *outargs)
{
	struct dcrfs_args *o = data;

	switch (key) {
	case KEY_HELP:
		o->help = 1;
		return 0;
	case KEY_VERSION:
		o->version = 1;
		return 0;
	case KEY_FOREGROUND:
		o->foreground = 1;
		return 0;
	case KEY_SINGLE:
		o->singlethread = 1;
		return 0;
	case KEY_DEBUG:
		o->debug = 1;
		o->foreground = 1;
		return 1; /* libfuse wants it too */
	case KEY_FSNAME:
		o->has_fsname = 1;
		return 1;
	case KEY_SUBTYPE:
		o->has_subtype = 1;
		return 1;
	case KEY_MIRROR: { /* repeatable: keep them all */
		char *m = NULL;

		if (asprintf(&m, "%s%s%s", o->mirror ? o->mirror : "",
			     o->mirror ? "," : "", arg + strlen("mirror=")) < 0)
			return -1;
		free(o->mirror);
		o->mirror = m;
		return 0;
	}
	case FUSE_OPT_KEY_NONOPT:
		if (!o->store) {
			o->store = strdup(arg);
			return o->store ? 0 : -1;
		}
		if (!o->mountpoint) {
			o->mountpoint = strdup(arg);
			return o->mountpoint ? 0 : -1;
		}
		fprintf(stderr, PROG ": unexpected argument '%s'\n", arg);
		return -1;
	case FUSE_OPT_KEY_OPT:
		if (strncmp(arg, "x-", 2) == 0)
			return 0;
		if (secretish(arg)) {
			char name[64];
			size_t n = DCR_MIN(strcspn(arg, "="), sizeof(name) - 1);

			memcpy(name, arg, n);
			name[n] = '\0';
			fprintf(stderr, PROG ": option '%s' refused: secrets do "
				"not belong on the command line; use "
				"credentials=FILE, profile=NAME or the AWS_* "
				"environment variables\n", name);
			return -1;
		}
		if (arg[0] == '-') {
			fprintf(stderr, PROG ": unknown option '%s'\n", arg);
			return -1;
		}
		return 1; /* a FUSE or kernel mount option */
	default:
		return 1;
	}
}

void dcrfs_long_opts_free(char **made)
{
	for (size_t i = 0; made && made[i]; i++)
		free(made[i]);
	free(made);
}

/*
 * Long options other mounts (mountpoint-s3) and the other dcrfs tools
 * take, spelled as dcrfs spells them: --foreground is -f, --allow-other
 * -o allow_other, --read-only -o ro (the mount is read-only anyway),
 * --endpoint-url URL -o endpoint=URL.
 */
static const struct {
	const char *name; /* '-' as '_' */
	const char *as;   /* "-f", or the -o option */
	int value;        /* takes a value */
} long_aliases[] = {
	{ "foreground", "-f", 0 },
	{ "allow_other", "allow_other", 0 },
	{ "read_only", "ro", 0 },
	{ "endpoint_url", "endpoint", 1 },
};

/*
 * The tools' spelling, --cache-dir DIR or --cache-dir=DIR, for every
 * dcrfs option: rewritten to -o cache_dir=DIR before libfuse parses the
 * command line, so both spellings mean the same everywhere. Options are
 * those of opt_spec ('-' and '_' alike), and long_aliases. Returns a new
 * argv or NULL; its strings are @argv's or made here, and those are
 * listed in *@made (NULL-terminated; free each and the list with
 * dcrfs_long_opts_free).
 */
char **dcrfs_long_opts(int argc, char **argv, int *out_argc, char ***made)
{
	char **nv = calloc((size_t)argc * 2 + 1, sizeof(*nv));
	int n = 0, nmade = 0;

	*made = calloc((size_t)argc + 1, sizeof(**made));
	if (!nv || !*made) {
		free(nv);
		free(*made);
		*made = NULL;
		return NULL;
	}
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *eq;
		char name[64], *opt;
		size_t len;
		int found = -1;

		if (i == 0 || strncmp(a, "--", 2) != 0 || !a[2]) {
			nv[n++] = argv[i];
			continue;
		}
		eq = strchr(a, '=');
		len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
		if (len >= sizeof(name)) {
			nv[n++] = argv[i];
			continue;
		}
		for (size_t k = 0; k < len; k++)
			name[k] = a[2 + k] == '-' ? '_' : a[2 + k];
		name[len] = '\0';
		for (size_t k = 0; k < DCR_ARRAY_SIZE(long_aliases); k++) {
			if (strcmp(name, long_aliases[k].name))
				continue;
			if (!strcmp(long_aliases[k].as, "-f")) {
				if (!eq) { /* --foreground=x: left unknown */
					nv[n++] = (char *)"-f";
					found = 2;
				}
				break;
			}
			snprintf(name, sizeof(name), "%s", long_aliases[k].as);
			len = strlen(name);
			found = long_aliases[k].value;
			break;
		}
		if (found == 2)
			continue;
		for (size_t k = 0; found < 0 && opt_spec[k].templ; k++) {
			const char *t = opt_spec[k].templ;

			if (opt_spec[k].offset == -1U || strncmp(t, name, len))
				continue; /* keys (-f, --help, ...) stay */
			if (t[len] == '=' || (t[len] == '\0' && !eq))
				found = t[len] == '=';
			if (found >= 0)
				break;
		}
		if (found < 0) {
			nv[n++] = argv[i];
			continue;
		}
		const char *val = eq ? eq + 1 : NULL;
		if (found && !val) {
			if (i + 1 >= argc) {
				fprintf(stderr, PROG ": option '%s' needs a "
					"value\n", a);
				free(nv);
				dcrfs_long_opts_free(*made);
				*made = NULL;
				return NULL;
			}
			val = argv[++i];
		}
		size_t cap = len + (val ? strlen(val) + 2 : 1);
		opt = malloc(cap);
		if (!opt) {
			free(nv);
			dcrfs_long_opts_free(*made);
			*made = NULL;
			return NULL;
		}
		(*made)[nmade++] = opt;
		snprintf(opt, cap, val ? "%s=%s" : "%s", name, val ? val : "");
		nv[n++] = (char *)"-o";
		nv[n++] = opt;
	}
	*out_argc = n;
	return nv;
}

/* -o log_level: a level of core/common.h into @out. */
static int parse_log_level(const char *s, uint64_t *out)
{
	enum dcr_log_level lvl;
	int ret = dcr_log_parse_level(s, &lvl);

	*out = (uint64_t)lvl;
	return ret;
}

/* -o metrics: its form only (binding is tried once the store is open). */
static int parse_metrics(const char *s, uint64_t *out)
{
	char host[256], port[8];

	*out = 0;
	return dcrfs_metrics_parse(s, host, sizeof(host), port, sizeof(port));
}

/* The structs the option table sets, as dcrfs_args_check passes them. */
enum { TO_OPTS, TO_FS, TO_READER };

#define GIVEN(member) .given = offsetof(struct dcrfs_args, member)
#define TO_OPTS(member) DCRFS_OPT_FIELD(TO_OPTS, struct dcrfs_args, member)
#define TO_FS(member) DCRFS_OPT_FIELD(TO_FS, struct dcrfs, member)
#define TO_READER(member) \
	DCRFS_OPT_FIELD(TO_READER, struct dcr_reader_opts, member)

static const struct dcrfs_opt_word prefetch_words[] = {
	{ "latest", DCRFS_PREFETCH_LATEST }, { "all", DCRFS_PREFETCH_ALL },
	{ "none", DCRFS_PREFETCH_NONE }, { NULL, 0 },
};
static const struct dcrfs_opt_word delta_ahead_words[] = {
	{ "auto", DCRFS_DELTA_AHEAD_AUTO }, { "on", DCRFS_DELTA_AHEAD_ON },
	{ "off", DCRFS_DELTA_AHEAD_OFF }, { NULL, 0 },
};
static const struct dcrfs_opt_word passthrough_words[] = {
	{ "off", DCRFS_PT_OFF }, { "auto", DCRFS_PT_AUTO }, { NULL, 0 },
};

/*
 * dcrfs's -o options with a value to check, in the order they are
 * checked (the first bad one is reported): see options.h.
 */
static const struct dcrfs_opt opt_table[] = {
	{ "log_level", GIVEN(log_level), parse_log_level, TO_OPTS(log_lvl),
	  .hint = "error, warn, info or debug" },
	{ "metrics", GIVEN(metrics), parse_metrics,
	  .hint = "HOST:PORT, e.g. 127.0.0.1:9741" },
	{ "cache_size", GIVEN(cache_size), dcr_parse_size, .min = 1,
	  .flags = DCRFS_OPT_DEFAULT, .def = DCR_CACHE_SIZE_DEFAULT,
	  TO_READER(cache_size), .hint = "e.g. 512M, 50G" },
	{ "poll", GIVEN(poll), dcr_parse_ms, .min = POLL_MIN_MS,
	  .max = POLL_MAX * 1000ull, .flags = DCRFS_OPT_ZERO | DCRFS_OPT_DEFAULT,
	  .def = POLL_DEFAULT * 1000, TO_FS(ver.poll_ms),
	  .hint = "seconds, 0 or 0.05 to " STR(POLL_MAX) "; e.g. 5, 0.25" },
	{ "relist", GIVEN(relist), dcr_parse_ms, .min = POLL_MIN_MS,
	  .max = POLL_MAX * 1000ull, .flags = DCRFS_OPT_DEFAULT,
	  .def = RELIST_DEFAULT * 1000, TO_READER(relist_ms),
	  .hint = "seconds, 0.05 to " STR(POLL_MAX) "; e.g. 60" },
	{ "prefetch", GIVEN(prefetch), .words = prefetch_words,
	  .flags = DCRFS_OPT_DEFAULT, .def = DCRFS_PREFETCH_LATEST,
	  TO_FS(bg.prefetch), .hint = "none, latest or all" },
	{ "delta_ahead", GIVEN(delta_ahead), .words = delta_ahead_words,
	  .flags = DCRFS_OPT_DEFAULT, .def = DCRFS_DELTA_AHEAD_AUTO,
	  TO_FS(dv.ahead), .hint = "auto, on or off" },
	{ "latest_wait", GIVEN(latest_wait), dcr_parse_ms,
	  .max = POLL_MAX * 1000ull, .flags = DCRFS_OPT_DEFAULT,
	  .def = LATEST_WAIT_DEFAULT * 1000, TO_FS(ver.latest_wait_ms),
	  .hint = "seconds, 0 to " STR(POLL_MAX) },
	{ "passthrough", GIVEN(passthrough), .words = passthrough_words,
	  .flags = DCRFS_OPT_DEFAULT, .def = DCRFS_PT_AUTO, TO_FS(bk.pt.mode),
	  .hint = "auto or off" },
	{ "scrub", GIVEN(scrub), dcr_parse_ms, .min = SCRUB_MIN_MS,
	  .max = POLL_MAX * 1000ull, .flags = DCRFS_OPT_ZERO | DCRFS_OPT_DEFAULT,
	  .def = SCRUB_DEFAULT * 1000, TO_FS(scr.ms),
	  .hint = "seconds, 0 (off) or 1 to " STR(POLL_MAX) },
	{ "scrub_rate", GIVEN(scrub_rate), dcr_parse_size, .min = 1 << 20,
	  .flags = DCRFS_OPT_DEFAULT, .def = SCRUB_RATE_DEFAULT,
	  TO_FS(scr.rate), .hint = "bytes a second, 1M or more; e.g. 128M" },
	{ "restart_wait", GIVEN(restart_wait), dcr_parse_ms, .min = 1000,
	  .max = POLL_MAX * 1000ull, .flags = DCRFS_OPT_ZERO | DCRFS_OPT_DEFAULT,
	  .def = RESTART_WAIT_DEFAULT * 1000, TO_OPTS(restart_wait_ms),
	  .hint = "seconds, 0 (no holder) or 1 to " STR(POLL_MAX) },
	{ "readahead", GIVEN(readahead), dcr_parse_size, .max = READAHEAD_MAX,
	  .flags = DCRFS_OPT_DEFAULT, .def = READAHEAD_DEFAULT, .div = 1024,
	  TO_FS(cfg.read_ahead_kb), .hint = "0 to 1G" },
	/* A whole read's bound; the store's own (cfg) is set from it. */
	{ "s3_timeout", GIVEN(s3_timeout), dcr_parse_u64, .min = 1,
	  .max = 86400, .flags = DCRFS_OPT_DEFAULT, .def = S3_TIMEOUT_DEFAULT,
	  .mul = 1000, TO_READER(read_timeout_ms),
	  .hint = "seconds, 1 to 86400" },
	{ "fetch_threads", GIVEN(fetch_threads), dcr_parse_u64, .min = 1,
	  .max = 64, TO_READER(fetch_threads), .hint = "1 to 64" },
	{ "threads", GIVEN(threads), dcr_parse_u64, .min = 1,
	  .max = 1024, TO_READER(threads), .hint = "1 to 1024" },
	{ "fetch_ahead", GIVEN(fetch_ahead), dcr_parse_size,
	  .max = (uint64_t)16 << 30, .flags = DCRFS_OPT_ZERO_OFF,
	  TO_READER(readahead), .hint = "0 to 16G" },
};

/* Check and convert dcrfs's own options into @o, @fs, @cfg and @ropts
 * (log_level is set now). 0 or -1, said on stderr. */
int dcrfs_args_check(struct dcrfs_args *o, struct dcrfs *fs,
		     struct dcr_store_cfg *cfg, struct dcr_reader_opts *ropts)
{
	void *const to[] = { [TO_OPTS] = o, [TO_FS] = fs, [TO_READER] = ropts };

	if (dcrfs_opts_apply(opt_table, DCR_ARRAY_SIZE(opt_table), o, to,
			     PROG) < 0)
		return -1;
	if (o->log_level)
		dcr_log_set_level(o->log_lvl);
	/* A keeper resends what a dead daemon had read; a thread's cloned
	 * descriptor dies with it, and the kernel ends what was read on it
	 * (ECONNABORTED): readers would see errors a restart is there to
	 * spare them. */
	if (o->clone_fd && o->restart_wait_ms) {
		fprintf(stderr, PROG ": -o clone_fd is refused with a restart "
			"after a crash (-o restart_wait, default %d s): each "
			"thread's cloned /dev/fuse descriptor dies with the "
			"daemon, and the kernel fails the requests read on it "
			"(ECONNABORTED) instead of sending them again; drop "
			"clone_fd, or add -o restart_wait=0 (a crash then loses "
			"the mount)\n", RESTART_WAIT_DEFAULT);
		return -1;
	}
	if (o->s3_timeout)
		cfg->read_timeout_ms = ropts->read_timeout_ms;
	fs->cfg.max_read = o->max_read;
	fs->bg.prefetch_pagecache = o->prefetch_pagecache;
	cfg->endpoint = o->endpoint;
	cfg->region = o->region;
	cfg->profile = o->profile;
	cfg->credentials = o->credentials;
	cfg->ca_bundle = o->ca_bundle;
	cfg->path_style = o->path_style;
	cfg->no_sign_request = o->no_sign_request;
	return 0;
}

/* The arguments libfuse gets: ours first, the user's, the forced ones. */
int dcrfs_args_fuse(struct fuse_args *args, const struct dcrfs_args *o,
		     const char *store)
{
	char *head = NULL;
	int ret = 0;

	if (!o->has_fsname) {
		char *fsname = malloc(strlen(store) + 8);

		if (!fsname)
			return -1;
		sprintf(fsname, "fsname=%s", store);
		ret = fuse_opt_add_opt_escaped(&head, fsname);
		free(fsname);
	}
	if (ret == 0 && !o->has_subtype)
		ret = fuse_opt_add_opt(&head, "subtype=" PROG);
	if (ret == 0)
		ret = fuse_opt_add_opt(&head, "default_permissions");
	if (ret == 0)
		ret = fuse_opt_insert_arg(args, 1, "-o");
	if (ret == 0)
		ret = fuse_opt_insert_arg(args, 2, head);
	if (ret == 0)
		ret = fuse_opt_add_arg(args, "-o");
	/*
	 * Test hook (HACKING): DCRFS_TEST_KERNEL_RW=1 mounts without the
	 * kernel's ro flag, so that writes reach dcrfs's own handlers, which
	 * must refuse them (EROFS) by themselves; tests/integration/
	 * readonly.sh checks both layers.
	 */
#ifdef DCR_TEST_HOOKS
	const char *rw = getenv("DCRFS_TEST_KERNEL_RW");
#else
	const char *rw = NULL; /* a production build always mounts ro */
#endif
	if (ret == 0)
		ret = fuse_opt_add_arg(args, rw && !strcmp(rw, "1") ?
				       "nosuid,nodev" : "ro,nosuid,nodev");
	free(head);
	return ret;
}

void dcrfs_args_free(struct dcrfs_args *o)
{
	char **strs[] = { &o->cache_dir, &o->cache_size, &o->poll, &o->relist,
			  &o->prefetch, &o->delta_ahead, &o->trust, &o->passthrough,
			  &o->latest_wait,
			  &o->scrub, &o->scrub_rate, &o->restart_wait,
			  &o->readahead, &o->endpoint,
			  &o->region, &o->profile, &o->credentials,
			  &o->ca_bundle, &o->s3_timeout, &o->fetch_threads,
			  &o->threads, &o->fetch_ahead, &o->store, &o->mountpoint,
			  &o->log, &o->mirror, &o->log_level, &o->metrics };

	for (size_t i = 0; i < DCR_ARRAY_SIZE(strs); i++) {
		free(*strs[i]);
		*strs[i] = NULL;
	}
}

int dcrfs_args_parse(struct fuse_args *args, struct dcrfs_args *o)
{
	memset(o, 0, sizeof(*o));
	o->path_style = -1;
	return fuse_opt_parse(args, o, opt_spec, opt_proc) < 0 ? -1 : 0;
}
