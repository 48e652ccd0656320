/* SPDX-License-Identifier: MIT */
/*
 * dcrfs-commit - publish a checkpoint directory as a new dcrfs version.
 *
 * Argument parsing and output over libdcr (lib/dcr.h), which does the
 * work: the pipeline (commit/commit.c) and the committer's cache of the
 * parent tree (commit/ccache.c, layout there).
 */
#include "config.h"

#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chunk.h"
#include "common.h"
#include "dcr.h"
#include "json.h"
#include "objstore.h"
#include "progress.h"
#include "toolopts.h"
#include "warm.h"

#define EXIT_USAGE 2
#define DCR_META_ARGS_MAX 256 /* --meta given at most (DCR_META_MAX) */

static void usage(FILE *f)
{
	fprintf(f,
"Usage: dcrfs-commit [OPTIONS] DIR\n"
"Commit the directory tree DIR as a new version of a dcrfs store and print\n"
"the new version number on stdout.\n"
"\n"
"  -s, --store URL        store: a directory, file:///path or s3://bucket/prefix\n"
"                         (default: $DCRFS_STORE)\n"
"      --init             create the store if there is none (else a store\n"
"                         that does not exist is an error); harmless on an\n"
"                         existing store\n"
"      --no-sign-request  S3: send unsigned requests (a public bucket); without\n"
"                         it, finding no credentials is an error\n"
"      --allow-empty      publish a tree without regular files (refused\n"
"                         otherwise: it would empty every mount's latest)\n"
"      --allow-unchanged  publish a tree equal to the parent's as a new\n"
"                         version (refused otherwise)\n"
"  -p, --parent N         diff against version N (default: the latest)\n"
"  -t, --tag NAME         also point tag NAME at the new version (once;\n"
"                         signed too with --sign-key)\n"
"      --sign-key KEYFILE sign the version with this Ed25519 private key\n"
"                         (dcrfs-ctl keygen makes one; default:\n"
"                         $DCRFS_SIGN_KEY); read before anything else, so a\n"
"                         bad key fails at once and nothing is uploaded\n"
"      --meta KEY=VALUE   trainer metadata for the version (repeatable): in\n"
"                         its manifest, shown by dcrfs-ctl log/show --json\n"
"                         and by mounts as the attribute user.dcrfs.meta.KEY\n"
"      --json             print one JSON object on stdout instead of the\n"
"                         version: version, parent, tags, bytes (read),\n"
"                         stored_bytes (uploaded), seconds, signer (the\n"
"                         key id, or \"unsigned\")\n"
"  -f, --full             store every chunk in full (an anchor version)\n"
"  -c, --chunk-size SIZE  chunk size, power of two, 4K..64M (default: the\n"
"                         parent's, else 1M)\n"
"  -j, --jobs N           encoder threads (default: number of CPUs)\n"
"  -C, --cache-dir DIR    the committer's cache of the last committed tree\n"
"                         (default: ${XDG_CACHE_HOME:-~/.cache}/dcrfs/commit/ID)\n"

"      --no-copy          never copy DIR into the cache: the next commit diffs\n"
"                         against DIR itself (checked chunk by chunk; if it\n"
"                         changed or is gone, the parent is rebuilt from the\n"
"                         store). Default: copy only when DIR is the directory\n"
"                         the previous commit came from (saved in place)\n"
"      --copy             always copy DIR into the cache\n"
"      --no-cache         keep no copy of the committed tree (the next commit\n"
"                         rebuilds its parent from the store)\n"
"      --compact-every N  after publishing a version whose number is a\n"
"                         multiple of N, compact the store (dcrfs-ctl compact:\n"
"                         at most 8 frames per chunk); default 0, never\n"
"                         (also DCRFS_COMPACT_EVERY)\n"
"      --allow-nonfinite  commit NaN and Inf values in float tensors of\n"
"                         safetensors files (default: refuse, publish nothing)\n"
"      --warm-mirror URL  S3: after uploading the packs and before publishing,\n"
"                         GET them through this cache tier, http(s)://host[:port],\n"
"                         as dcrfs-ctl warm does (repeat it for several tiers;\n"
"                         default: $DCRFS_MIRROR); a failed warm is logged and\n"
"                         the version published anyway\n"
"      --warm-slice SIZE  bytes per warm GET: the tiers' slice (default 1M)\n"
"      --warm-timeout SECS  bound on the warm (default 0: none; each GET is\n"
"                         bounded anyway, and a tier that fails is given up)\n"
TOOL_USAGE
"      --progress         progress on stderr even when it is not a terminal\n"
"                         (a line every 5 s)\n"
"  -q, --quiet            no progress or summary on stderr\n"
"  -v, --verbose          more messages on stderr\n"
"  -h, --help             show this help\n"
"  -V, --version          show the version\n"
"\n"
"An s3:// store takes its settings as the AWS tools do: AWS_ACCESS_KEY_ID,\n"
"AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE, AWS_REGION or\n"
"AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, AWS_CA_BUNDLE,\n"
"then ~/.aws/credentials and ~/.aws/config. Secrets never go on the command\n"
"line. DCR_S3_WRITE_TIMEOUT_MS bounds one upload (default 600000).\n"
"\n"
"Exit status: 0 on success, 1 on failure, 2 on a usage error.\n");
}

struct args {
	const char *store;
	const char *dir;
	const char *tag;
	const char *cache_dir;
	uint64_t parent;
	int has_parent;
	int full;
	int no_cache;
	int no_copy;
	int copy;
	int init;
	int no_sign;
	int allow_empty;
	int allow_unchanged;
	int progress; /* --progress */
	int allow_nonfinite;
	uint64_t compact_every;
	uint32_t chunk_size;
	int jobs;
	int quiet;
	int verbose;
	int json;
	const char *warm[DCR_MIRRORS_MAX]; /* each --warm-mirror */
	int nwarm;
	uint64_t warm_slice;
	uint64_t warm_timeout_s;
	const char *sign_key;  /* --sign-key, else $DCRFS_SIGN_KEY; NULL: none */
	char *meta[DCR_META_ARGS_MAX]; /* each --meta KEY=VALUE */
	int nmeta;
	struct tool_opts t;
};

static int parse_args(int argc, char **argv, struct args *a)
{
	static const struct option longopts[] = {
		{ "store", required_argument, NULL, 's' },
		{ "parent", required_argument, NULL, 'p' },
		{ "tag", required_argument, NULL, 't' },
		{ "full", no_argument, NULL, 'f' },
		{ "chunk-size", required_argument, NULL, 'c' },
		{ "jobs", required_argument, NULL, 'j' },
		{ "cache-dir", required_argument, NULL, 'C' },
		{ "no-cache", no_argument, NULL, 'N' },
		{ "no-copy", no_argument, NULL, 'R' },
		{ "copy", no_argument, NULL, 'Y' },
		{ "init", no_argument, NULL, 'I' },
		{ "no-sign-request", no_argument, NULL, 'S' },
		{ "allow-empty", no_argument, NULL, 'E' },
		{ "allow-unchanged", no_argument, NULL, 'W' },
		{ "progress", no_argument, NULL, 'P' },
		{ "allow-nonfinite", no_argument, NULL, 'F' },
		{ "compact-every", required_argument, NULL, 'K' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ "json", no_argument, NULL, 'J' },
		{ "warm-mirror", required_argument, NULL, 'M' },
		{ "warm-slice", required_argument, NULL, 'X' },
		{ "warm-timeout", required_argument, NULL, 'T' },
		{ "sign-key", required_argument, NULL, 'k' },
		{ "meta", required_argument, NULL, 'm' },
		TOOL_LONGOPTS,
		{ 0 },
	};
	uint64_t v;
	int c;

	a->store = getenv("DCRFS_STORE");
	const char *ce = getenv("DCRFS_COMPACT_EVERY");
	if (ce && *ce && dcr_parse_u64(ce, &a->compact_every)) {
		fprintf(stderr, "dcrfs-commit: DCRFS_COMPACT_EVERY: '%s' is not a number\n", ce);
		return -1;
	}
	a->t.log_level = -1;
	a->warm_slice = (uint64_t)1 << 20;
	a->sign_key = getenv("DCRFS_SIGN_KEY");
	if (a->sign_key && !*a->sign_key)
		a->sign_key = NULL;
	while ((c = getopt_long(argc, argv, "s:p:t:fc:j:C:qvhV", longopts, NULL)) != -1) {
		int r = tool_opt(&a->t, c, optarg, "dcrfs-commit");
		if (r < 0)
			return -1;
		if (r)
			continue;
		switch (c) {
		case 's':
			a->store = optarg;
			break;
		case 'p':
			if (dcr_parse_u64(optarg, &a->parent) || a->parent == 0) {
				fprintf(stderr, "dcrfs-commit: --parent: '%s' is not a version number\n", optarg);
				return -1;
			}
			a->has_parent = 1;
			break;
		case 't':
			if (!dcr_tag_name_valid(optarg)) {
				fprintf(stderr, "dcrfs-commit: --tag: '%s' is not a valid tag name (letters, digits, '.', '_', '-'; at most 128; not starting with '.')\n", optarg);
				return -1;
			}
			if (a->tag) {
				fprintf(stderr, "dcrfs-commit: --tag: given twice ('%s', '%s'); a commit sets one tag (add more with dcrfs-ctl tag NAME VERSION)\n", a->tag, optarg);
				return -1;
			}
			a->tag = optarg;
			break;
		case 'J':
			a->json = 1;
			break;
		case 'f':
			a->full = 1;
			break;
		case 'c':
			if (dcr_parse_size(optarg, &v) || !dcr_chunk_size_valid(v)) {
				fprintf(stderr, "dcrfs-commit: --chunk-size: '%s' must be a power of two from 4K to 64M\n", optarg);
				return -1;
			}
			a->chunk_size = (uint32_t)v;
			break;
		case 'j':
			if (dcr_parse_u64(optarg, &v) || v == 0 || v > 256) {
				fprintf(stderr, "dcrfs-commit: --jobs: '%s' must be a number from 1 to 256\n", optarg);
				return -1;
			}
			a->jobs = (int)v;
			break;
		case 'C':
			a->cache_dir = optarg;
			break;
		case 'N':
			a->no_cache = 1;
			break;
		case 'R':
			a->no_copy = 1;
			break;
		case 'Y':
			a->copy = 1;
			break;
		case 'I':
			a->init = 1;
			break;
		case 'S':
			a->no_sign = 1;
			break;
		case 'E':
			a->allow_empty = 1;
			break;
		case 'W':
			a->allow_unchanged = 1;
			break;
		case 'P':
			a->progress = 1;
			break;
		case 'F':
			a->allow_nonfinite = 1;
			break;
		case 'K':
			if (dcr_parse_u64(optarg, &a->compact_every)) {
				fprintf(stderr, "dcrfs-commit: --compact-every: '%s' is not a number\n", optarg);
				return -1;
			}
			break;
		case 'M':
			if (tool_mirror_opt(a->warm, &a->nwarm, optarg,
					    "--warm-mirror", "dcrfs-commit"))
				return -1;
			break;
		case 'X':
			if (tool_slice_opt(&a->warm_slice, optarg, "--warm-slice",
					   "dcrfs-commit"))
				return -1;
			break;
		case 'T':
			if (dcr_parse_u64(optarg, &a->warm_timeout_s) || a->warm_timeout_s > 86400) {
				fprintf(stderr, "dcrfs-commit: --warm-timeout: '%s' must be a number of seconds from 0 to 86400\n", optarg);
				return -1;
			}
			break;
		case 'k':
			a->sign_key = optarg;
			break;
		case 'm':
			if (!strchr(optarg, '=') || optarg[0] == '=') {
				fprintf(stderr, "dcrfs-commit: --meta: '%s' is not KEY=VALUE\n", optarg);
				return -1;
			}
			if (a->nmeta == DCR_META_ARGS_MAX) {
				fprintf(stderr, "dcrfs-commit: --meta: at most %d entries\n",
					DCR_META_ARGS_MAX);
				return -1;
			}
			a->meta[a->nmeta++] = optarg;
			break;
		case 'q':
			a->quiet = 1;
			break;
		case 'v':
			a->verbose = 1;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case 'V':
			printf("dcrfs-commit %s\n", PACKAGE_VERSION);
			exit(0);
		default:
			return -1;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "dcrfs-commit: %s\n", optind >= argc ? "no directory to commit given" : "only one directory can be committed at a time");
		return -1;
	}
	if (a->copy && (a->no_copy || a->no_cache)) {
		fprintf(stderr, "dcrfs-commit: --copy cannot be combined with --no-copy or --no-cache\n");
		return -1;
	}
	a->dir = argv[optind];
	if (!a->store) {
		fprintf(stderr, "dcrfs-commit: no store given (use --store URL or set DCRFS_STORE)\n");
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------ progress */

/* Where the commit is, for a signal that ends it (on_interrupt): the
 * last progress, in MiB, and 1 once it publishes. Lock-free atomics:
 * read in a signal handler. */
static _Atomic uint64_t at_done, at_total;
static atomic_int at_publishing;

/* Append decimal @v at @p (async-signal-safe); returns the end. */
static char *put_u64(char *p, uint64_t v)
{
	char d[24];
	int n = 0;

	do
		d[n++] = (char)('0' + v % 10);
	while ((v /= 10));
	while (n)
		*p++ = d[--n];
	return p;
}

static char *put_str(char *p, const char *s)
{
	while (*s)
		*p++ = *s++;
	return p;
}

/*
 * SIGINT, SIGTERM or SIGHUP during the commit: say what was left behind
 * and what collects it, then die of the signal as without this handler.
 * Async-signal-safe: one write(2) of a line built here.
 */
static void on_interrupt(int sig)
{
	char b[768], *p = b;

	p = put_str(p, "\ndcrfs-commit: interrupted");
	if (atomic_load(&at_publishing)) {
		p = put_str(p, " while publishing: the version may or may not be "
			    "published (dcrfs-ctl log shows it); if not,");
	} else {
		p = put_str(p, " after reading ");
		p = put_u64(p, atomic_load(&at_done));
		p = put_str(p, " of ");
		p = put_u64(p, atomic_load(&at_total));
		p = put_str(p, " MiB: nothing was published;");
	}
	p = put_str(p, " the packs it uploaded and its incomplete uploads are named "
		    "by no manifest, and 'dcrfs-ctl gc' deletes them once they are "
		    "older than its grace period (--grace, default 24h)\n");
	if (write(STDERR_FILENO, b, (size_t)(p - b)) < 0) {
		/* nothing more to do */
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Catch the signals that end a commit (@on), or stop catching them. */
static void catch_interrupts(bool on)
{
	struct sigaction sa = { .sa_handler = on ? on_interrupt : SIG_DFL };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

static void on_progress(void *arg, const struct dcr_progress *p)
{
	struct progress *pg = arg;
	char up[32], extra[48];

	atomic_store(&at_done, p->bytes_done >> 20);
	atomic_store(&at_total, p->bytes_total >> 20);
	atomic_store(&at_publishing, !strcmp(p->phase, "publish"));
	if (!progress_on(pg))
		return;
	if (!pg->t0 && !strcmp(p->phase, "encode"))
		progress_start(pg, p->bytes_done); /* not the parent's build */
	snprintf(extra, sizeof(extra), "%s uploaded",
		 dcr_format_size(p->bytes_uploaded, up, sizeof(up)));
	progress_show(pg, p->phase, p->bytes_done, p->bytes_total, NULL, extra,
		      !strcmp(p->phase, "publish"));
}

/* ------------------------------------------------------------- warming */

/*
 * With --warm-mirror (or $DCRFS_MIRROR), put the store @s opened with
 * @a's settings behind the tiers (dcr_store_handle_warm_publish): the
 * packs the commit uploads go through them right before the version is
 * published. 0, or -errno (logged).
 */
static int warm_setup(const struct args *a, dcr_store_handle *s)
{
	const char *env = getenv("DCRFS_MIRROR");
	struct dcr_store_options so = { a->t.profile, a->t.region, a->t.endpoint,
					a->t.ca_bundle };
	struct dcr_warm_publish_options o = { .s3 = &so, .no_sign_request = a->no_sign,
					      .slice = a->warm_slice,
					      .timeout_s = a->warm_timeout_s };
	char list[DCR_MIRRORS_MAX * (DCR_MIRROR_URL_MAX + 1) + 1] = "";

	if (!a->nwarm && (!env || !*env))
		return 0;
	for (int i = 0; i < a->nwarm; i++) {
		if (strlen(a->warm[i]) >= DCR_MIRROR_URL_MAX) {
			dcr_err("--warm-mirror '%.64s...': too long", a->warm[i]);
			return -EINVAL;
		}
		strcat(list, i ? "," : "");
		strcat(list, a->warm[i]);
	}
	o.mirrors = a->nwarm ? list : env;
	return dcr_store_handle_warm_publish(s, &o); /* (its errors logged) */
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
	struct args a = { 0 };
	dcr_store_handle *s = NULL;
	dcr_commit_handle *c = NULL;
	struct dcr_commit_info res = { 0 };
	int ret, exit_code = 1;

	dcr_log_set_prog("dcrfs-commit");
	if (parse_args(argc, argv, &a)) {
		fprintf(stderr, "Try 'dcrfs-commit --help' for more information.\n");
		return EXIT_USAGE;
	}
	dcr_set_log_level(a.t.log_level >= 0 ? a.t.log_level : a.verbose ? DCR_LEVEL_DEBUG :
			  a.quiet ? DCR_LEVEL_WARN : DCR_LEVEL_INFO);

	struct stat sb;
	if (stat(a.dir, &sb) < 0 || !S_ISDIR(sb.st_mode)) {
		dcr_err("%s: %s", a.dir, stat(a.dir, &sb) < 0 ? strerror(errno) : "not a directory");
		return 1;
	}
	struct dcr_store_options so = { a.t.profile, a.t.region, a.t.endpoint, a.t.ca_bundle };
	if (dcr_store_handle_open_opts(a.store, (a.init ? DCR_STORE_INIT : 0) |
				       (a.no_sign ? DCR_STORE_NO_SIGN : 0), &so, &s))
		return 1;
	if (warm_setup(&a, s)) {
		dcr_store_handle_close(s);
		return 1;
	}

	int64_t start = dcr_mono_ns();
	struct progress pg;
	progress_init(&pg, a.progress, a.quiet, a.json);
	struct dcr_commit_options o = {
		.parent = a.has_parent ? a.parent : 0,
		.cache_dir = a.cache_dir,
		.flags = (a.full ? DCR_COMMIT_FULL : 0) |
			 (a.allow_empty ? DCR_COMMIT_ALLOW_EMPTY : 0) |
			 (a.allow_unchanged ? DCR_COMMIT_ALLOW_UNCHANGED : 0) |
			 (a.allow_nonfinite ? DCR_COMMIT_ALLOW_NONFINITE : 0) |
			 (a.no_cache ? DCR_COMMIT_NO_CACHE : 0) |
			 (a.no_copy ? DCR_COMMIT_NO_COPY : 0) |
			 (a.copy ? DCR_COMMIT_COPY : 0),
		.chunk_size = a.chunk_size,
		.jobs = a.jobs,
		.progress = on_progress,
		.progress_arg = &pg,
	};
	if ((ret = dcr_commit_begin(s, &o, &c)))
		goto err_failed;
	/* The key and the metadata first: a bad one fails before any work. */
	if (a.sign_key && (ret = dcr_commit_set_sign_key(c, a.sign_key)))
		goto err_failed;
	for (int i = 0; i < a.nmeta; i++) {
		char *eq = strchr(a.meta[i], '=');
		*eq = 0;
		ret = dcr_commit_set_meta(c, a.meta[i], eq + 1);
		*eq = '=';
		if (ret)
			goto err_failed;
	}
	if ((ret = dcr_commit_add_tree(c, a.dir)))
		goto err_failed;
	catch_interrupts(true);
	ret = dcr_commit_publish(c, a.tag, &res);
	catch_interrupts(false);
	progress_clear(&pg);
	if (ret && !res.version)
		goto err_failed;
	/* The new version is published: print it before anything else. */
	if (a.json) {
		printf("{\"version\": %" PRIu64 ", \"parent\": %" PRIu64 ", \"tags\": [",
		       res.version, res.parent);
		if (a.tag && !ret)
			dcr_json_str(stdout, a.tag);
		printf("], \"bytes\": %" PRIu64 ", \"stored_bytes\": %" PRIu64
		       ", \"seconds\": %.3f, \"signer\": \"%s\"}\n", res.bytes_in,
		       res.bytes_packed + res.manifest_len,
		       (double)(dcr_mono_ns() - start) / 1e9,
		       dcr_commit_signer(c) ? dcr_commit_signer(c) : "unsigned");
	} else {
		printf("%" PRIu64 "\n", res.version);
	}
	fflush(stdout);
	exit_code = ret ? 1 : 0;
	if (!a.quiet) {
		char in[32], up[32];
		double secs = (double)(dcr_mono_ns() - start) / 1e9;
		dcr_info("version %" PRIu64 " (parent %" PRIu64 "%s%s): %" PRIu64 " files, %s read, "
			 "%s uploaded in %" PRIu32 " packs + %" PRIu64 " B manifest; chunks: "
			 "%" PRIu64 " unchanged, %" PRIu64 " delta, %" PRIu64 " full; %.2f s",
			 res.version, res.parent,
			 dcr_commit_signer(c) ? ", signed by " : "",
			 dcr_commit_signer(c) ? dcr_commit_signer(c) : "", res.files,
			 dcr_format_size(res.bytes_in, in, sizeof(in)),
			 dcr_format_size(res.bytes_packed, up, sizeof(up)), res.packs,
			 res.manifest_len, res.chunks_same, res.chunks_delta,
			 res.chunks_full, secs);
	}
	/* The automatic compaction policy: the version is published
	 * whatever happens here; a failure is reported, not fatal. */
	if (!ret && a.compact_every && res.version % a.compact_every == 0) {
		struct dcr_compact_info ci;
		if (dcr_store_compact(s, 0, &ci))
			dcr_warn("version %" PRIu64 " is published, but compacting the "
				 "store failed (dcrfs-ctl compact retries it): %s",
				 res.version, dcr_errmsg());
		else if (!a.quiet)
			dcr_info("compacted: %" PRIu64 " versions re-encoded (layout "
				 "generation %" PRIu64 "); the deepest version is %u "
				 "frames per chunk", ci.rewritten, ci.generation, ci.depth);
	}
	goto out_free;

err_failed:
	if (ret == -EINPROGRESS) /* the version named above may hold it */
		dcr_err("commit of %s failed: whether it was published is unknown (see above)",
			a.dir);
	else if (!strstr(dcr_log_errors(), " published")) /* else said once,
							   with its cause */
		dcr_err("commit of %s failed: %s; nothing was published", a.dir,
			dcr_strerror(ret));
out_free:
	dcr_commit_free(c);
	dcr_store_handle_close(s);
	return exit_code;
}
