/* SPDX-License-Identifier: MIT */
/*
 * dcrfs-ctl - create, inspect and administer a dcrfs store: init, log,
 * show, diff, tag, untag, verify, gc; read a version without a mount:
 * export, cat; and a mount's status.
 *
 * Argument parsing and output. Manifests come from core/objstore.h;
 * bytes that must be materialized (diff, verify --deep, format 1 delta
 * chunks) go through the read path (read/reader.h) with a scratch
 * catalog and cache in a temporary directory removed on exit.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "chunk.h"
#include "common.h"
#include "compact.h"
#include "fileio.h"
#include "frame.h"
#include "hash.h"
#include "json.h"
#include "toolopts.h"
#include "manifest.h"
#include "reader.h"
#include "safetensors.h"
#include "sign.h"
#include "store.h"
#include "warm.h"
#include "ctl.h"
#include "diff.h"
#include "maintjson.h"


static void usage(FILE *f)
{
	fprintf(f,
"Usage: dcrfs-ctl [OPTIONS] COMMAND [ARGS]\n"
"Inspect and administer a dcrfs store.\n"
"\n"
"Commands:\n"
"  init                   create a store (exits 1 if there is one already)\n"
"  keygen KEYFILE         make an Ed25519 signing key: KEYFILE (private, mode\n"
"                         0600) and KEYFILE.pub; never overwrites (no store)\n"
"  log                    the versions, newest first\n"
"  show V                 the files of version V, their sizes and digests\n"
"                         (dcrfs's file digest, not sha256sum's: see\n"
"                         dcrfs-ctl(8))\n"
"  diff A B               what changed from version A to version B, per file\n"
"                         and per safetensors tensor\n"
"  tag NAME V             point tag NAME at version V (signed with\n"
"                         --sign-key KEYFILE)\n"
"  untag NAME             remove tag NAME\n"
"  verify [V...]          check that every object the versions (default: all)\n"
"                         need exists and matches its hashes, and their\n"
"                         signatures (with --trust FILE: signed by its keys)\n"
"  gc --keep-last N       remove the versions outside retention and the packs\n"
"                         no kept version needs (kept versions built on removed\n"
"                         ones are rebased first, as compact does)\n"
"  compact                re-encode versions as skip-deltas so that every\n"
"                         version materializes with at most K frames per chunk\n"
"  status MNT             what the dcrfs mounted on MNT is doing (no store\n"
"                         needed: read from MNT/.dcrfs/status.json)\n"
"  wait MNT               wait until the dcrfs mounted on MNT shows a newer\n"
"                         latest, then print its number (no store needed)\n"
"  warm [V]               fill the cache tiers with the packs of version V\n"
"                         (default latest), each through the mirror the\n"
"                         mounts send it to\n"
"  export V DIR           write version V's files into DIR, every chunk\n"
"                         verified, on all CPUs; a re-run skips the files\n"
"                         already there and proven (no mount, no root)\n"
"  cat V PATH             write file PATH of version V to stdout, verified\n"
"\n"
"A version V is a number, a tag name, or 'latest'.\n"
"\n"
"  -s, --store URL        store: a directory, file:///path or s3://bucket/prefix\n"
"                         (default: $DCRFS_STORE)\n"
"      --json             machine-readable output: one JSON value on stdout\n"
"                         (every command but cat)\n"
"      --deep             verify: also materialize every chunk and check every\n"
"                         file's SHA-256\n"
"      --trust FILE       verify: every version must be signed by one of the\n"
"                         public keys in FILE (as a mount's -o trust=);\n"
"                         export, cat: only versions and tags signed by one\n"
"                         of them are seen (latest: the newest such)\n"
"      --sign-key KEYFILE tag: sign the tag with this private key\n"
"gc options:\n"
"      --keep-last N      keep the newest N versions (N >= 1, required)\n"
"      --keep-tagged      keep tagged versions (the default)\n"
"      --no-keep-tagged   tagged versions may go too (their tags with them)\n"
"      --keep-newer-than DURATION  keep versions committed within DURATION\n"
"                         (90, 90s, 15m, 24h, 7d, 2w)\n"
"      --grace DURATION   packs no manifest names and incomplete uploads are\n"
"                         deleted once older than this (default 24h)\n"
"  -n, --dry-run          gc, compact: say what would be done, do nothing\n"
"compact options (gc's rebasing too):\n"
"      --max-depth K      at most K frames per chunk, anchor included\n"
"                         (default 8; 1 makes every version an anchor)\n"
"      --read-cost PCT    a chunk whose frames would cost more than PCT %% of\n"
"                         its full frame to read is stored full (100 to\n"
"                         10000, default 150; 100: every changed chunk full)\n"
"warm options:\n"
"      --mirror URL       a tier, http(s)://host[:port], as the mounts' -o\n"
"                         mirror= (repeat it; default: $DCRFS_MIRROR)\n"
"      --slice SIZE       bytes per GET: the tier's slice (default 1M)\n"
"      --jobs N           GETs at once (default 8, at most 64)\n"
"export and cat options:\n"
"      --cache-dir DIR    the chunk cache to use and keep, in a mount's layout\n"
"                         (a mount's -o cache_dir while it is not mounted);\n"
"                         default: export: DIR/.dcrfs-export, removed at the\n"
"                         end; cat: a temporary one\n"
"      --jobs N           export: threads (default: the CPUs this process may\n"
"                         use)\n"
"wait options:\n"
"      --newer-than N     wait for a version newer than N (default: the one\n"
"                         latest shows now; 0: any version)\n"
"      --timeout SECONDS  give up after this long (0.5, 90, 15m): exit 1\n"
"global options:\n"
"      --threads N        verify --deep, gc, compact, export: threads of the CPU-bound\n"
"                         work (default: the CPUs this process may use,\n"
"                         cgroup quota included)\n"
"      --no-sign-request  S3: unsigned requests (a public bucket); without it,\n"
"                         finding no credentials is an error\n"
TOOL_USAGE
"      --progress         verify, gc, compact, warm, export: progress on stderr\n"
"                         even when it is not a terminal (a line every 5 s)\n"
"                         or with --json\n"
"  -q, --quiet            no summary or progress on stderr\n"
"  -v, --verbose          more messages on stderr\n"
"  -h, --help             show this help\n"
"  -V, --version          show the version\n"
"\n"
"An s3:// store takes its settings as dcrfs-commit does (AWS_* variables,\n"
"~/.aws/credentials and ~/.aws/config).\n"
"\n"
"Exit status: 0 on success, 1 on failure or damage found, 2 on a usage error.\n");
}


static int parse_args(int argc, char **argv, struct args *a)
{
	static const struct option longopts[] = {
		{ "store", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'J' },
		{ "deep", no_argument, NULL, 'D' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "keep-last", required_argument, NULL, 'L' },
		{ "keep-tagged", no_argument, NULL, 'T' },
		{ "no-keep-tagged", no_argument, NULL, 'U' },
		{ "keep-newer-than", required_argument, NULL, 'N' },
		{ "grace", required_argument, NULL, 'G' },
		{ "dry-run", no_argument, NULL, 'n' },
		{ "max-depth", required_argument, NULL, 'K' },
		{ "read-cost", required_argument, NULL, 'R' },
		{ "no-sign-request", no_argument, NULL, 'S' },
		{ "progress", no_argument, NULL, 'P' },
		{ "mirror", required_argument, NULL, 'M' },
		{ "slice", required_argument, NULL, 'X' },
		{ "jobs", required_argument, NULL, 'j' },
		{ "threads", required_argument, NULL, 'H' },
		{ "sign-key", required_argument, NULL, 'k' },
		{ "trust", required_argument, NULL, 'r' },
		{ "cache-dir", required_argument, NULL, 'C' },
		{ "newer-than", required_argument, NULL, 'W' },
		{ "timeout", required_argument, NULL, 'O' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		TOOL_LONGOPTS,
		{ 0 },
	};
	static const struct {
		const char *name;
		int min, max; /* positional arguments; max -1: any */
		const char *args; /* as the help names them */
	} cmds[] = {
		{ "init", 0, 0, "" },       { "keygen", 1, 1, " KEYFILE" },
		{ "log", 0, 0, "" },        { "show", 1, 1, " V" },
		{ "diff", 2, 2, " A B" },   { "tag", 2, 2, " NAME V" },
		{ "untag", 1, 1, " NAME" }, { "verify", 0, -1, " [V...]" },
		{ "gc", 0, 0, "" },         { "status", 1, 1, " MNT" },
		{ "compact", 0, 0, "" },    { "warm", 0, 1, " [V]" },
		{ "export", 2, 2, " V DIR" }, { "cat", 2, 2, " V PATH" },
		{ "wait", 1, 1, " MNT" },
	};
	int c, gc_opt = 0, dry = 0, depth = 0, cost = 0, warm_opt = 0;
	int wait_opt = 0;
	uint64_t k;

	a->store = getenv("DCRFS_STORE");
	a->keep_tagged = 1;
	a->grace = 86400;
	a->slice = (uint64_t)1 << 20;
	a->jobs = DCR_WARM_JOBS_DEFAULT;
	a->timeout_s = -1;
	a->t.log_level = -1;
	while ((c = getopt_long(argc, argv, "s:nqvhV", longopts, NULL)) != -1) {
		int r = tool_opt(&a->t, c, optarg, "dcrfs-ctl");
		if (r < 0)
			return -1;
		if (r)
			continue;
		gc_opt |= strchr("LTUNG", c) != NULL;
		dry |= c == 'n';
		depth |= c == 'K';
		cost |= c == 'R';
		warm_opt |= strchr("MX", c) != NULL;
		wait_opt |= c == 'W' || c == 'O';
		switch (c) {
		case 's':
			a->store = optarg;
			break;
		case 'J':
			a->json = 1;
			break;
		case 'D':
			a->deep = 1;
			break;
		case 'C':
			a->cache_dir = optarg;
			break;
		case 'k':
			a->sign_key = optarg;
			break;
		case 'r':
			a->trust = optarg;
			break;
		case 'W':
			if (dcr_parse_u64(optarg, &a->newer_than)) {
				fprintf(stderr, "dcrfs-ctl: --newer-than: '%s' is not a version number\n", optarg);
				return -1;
			}
			a->have_newer = 1;
			break;
		case 'O': {
			char *end;
			uint64_t secs;

			errno = 0;
			a->timeout_s = strtod(optarg, &end);
			if (optarg[strspn(optarg, "0123456789.")] && !dcr_parse_duration(optarg, &secs))
				a->timeout_s = (double)secs; /* 15m, 2h */
			else if (errno || end == optarg || *end || !(a->timeout_s >= 0) ||
				 a->timeout_s > 1e9) {
				fprintf(stderr, "dcrfs-ctl: --timeout: '%s' is not a number of seconds (0.5, 90) or a duration (15m, 2h)\n", optarg);
				return -1;
			}
			break;
		}
		case 'q':
			a->quiet = 1;
			break;
		case 'L':
			if (dcr_parse_u64(optarg, &a->keep_last) || !a->keep_last) {
				fprintf(stderr, "dcrfs-ctl: --keep-last: '%s' must be a number of at least 1\n", optarg);
				return -1;
			}
			break;
		case 'T':
		case 'U':
			a->keep_tagged = c == 'T';
			break;
		case 'N':
		case 'G':
			if (dcr_parse_duration(optarg, c == 'N' ? &a->keep_newer : &a->grace)) {
				fprintf(stderr, "dcrfs-ctl: --%s: '%s' is not a duration (90, 90s, 15m, 24h, 7d, 2w)\n",
					c == 'N' ? "keep-newer-than" : "grace", optarg);
				return -1;
			}
			break;
		case 'S':
			a->no_sign = 1;
			break;
		case 'P':
			a->progress = 1;
			break;
		case 'n':
			a->dry_run = 1;
			break;
		case 'M':
			if (tool_mirror_opt(a->mirror, &a->nmirrors, optarg,
					    "--mirror", "dcrfs-ctl"))
				return -1;
			break;
		case 'X':
			if (tool_slice_opt(&a->slice, optarg, "--slice", "dcrfs-ctl"))
				return -1;
			break;
		case 'H':
			if (dcr_parse_u64(optarg, &k) || k < 1 || k > 1024) {
				fprintf(stderr, "dcrfs-ctl: --threads: '%s' must be a number from 1 to 1024\n", optarg);
				return -1;
			}
			a->threads = (int)k;
			break;
		case 'j':
			if (dcr_parse_u64(optarg, &k) || k < 1 || k > 1024) {
				fprintf(stderr, "dcrfs-ctl: --jobs: '%s' must be a number from 1 to 64 (warm) or 1024 (export)\n", optarg);
				return -1;
			}
			a->jobs = (int)k;
			a->jobs_set = 1;
			break;
		case 'K': {
			if (dcr_parse_u64(optarg, &k) || k < 1 || k > 64) {
				fprintf(stderr, "dcrfs-ctl: --max-depth: '%s' must be a number from 1 to 64\n", optarg);
				return -1;
			}
			a->max_depth = (unsigned)k;
			break;
		}
		case 'R': {
			uint64_t pct;
			if (dcr_parse_u64(optarg, &pct) || pct < DCR_COMPACT_READ_COST_MIN ||
			    pct > DCR_COMPACT_READ_COST_MAX) {
				fprintf(stderr, "dcrfs-ctl: --read-cost: '%s' must be a percentage from %d to %d\n",
					optarg, DCR_COMPACT_READ_COST_MIN, DCR_COMPACT_READ_COST_MAX);
				return -1;
			}
			a->read_cost = (unsigned)pct;
			break;
		}
		case 'v':
			a->verbose = 1;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case 'V':
			printf("dcrfs-ctl %s\n", PACKAGE_VERSION);
			exit(0);
		default:
			return -1;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "dcrfs-ctl: no command given\n");
		return -1;
	}
	a->cmd = argv[optind];
	a->pos = argv + optind + 1;
	a->npos = argc - optind - 1;
	size_t i;
	for (i = 0; i < DCR_ARRAY_SIZE(cmds); i++)
		if (!strcmp(a->cmd, cmds[i].name))
			break;
	if (i == DCR_ARRAY_SIZE(cmds)) {
		fprintf(stderr, "dcrfs-ctl: unknown command '%s'\n", a->cmd);
		return -1;
	}
	if (a->npos < cmds[i].min || (cmds[i].max >= 0 && a->npos > cmds[i].max)) {
		fprintf(stderr, "dcrfs-ctl: %s: wrong number of arguments (%d): "
			"usage: dcrfs-ctl [OPTIONS] %s%s\n", a->cmd, a->npos,
			a->cmd, cmds[i].args);
		/* `dcrfs-ctl log /path/to/store`: say where a store goes. */
		for (int j = 0; j < a->npos; j++)
			if (strchr(a->pos[j], '/')) {
				fprintf(stderr, "dcrfs-ctl: the store is an option: "
					"dcrfs-ctl --store %s %s ...\n",
					a->pos[j], a->cmd);
				break;
			}
		return -1;
	}
	if (a->deep && strcmp(a->cmd, "verify")) {
		fprintf(stderr, "dcrfs-ctl: only verify takes --deep\n");
		return -1;
	}
	if (a->trust && strcmp(a->cmd, "verify") && strcmp(a->cmd, "export") &&
	    strcmp(a->cmd, "cat")) {
		fprintf(stderr, "dcrfs-ctl: only verify, export and cat take --trust (a mount takes -o trust=)\n");
		return -1;
	}
	if (a->sign_key && strcmp(a->cmd, "tag")) {
		fprintf(stderr, "dcrfs-ctl: only tag takes --sign-key (dcrfs-commit signs versions)\n");
		return -1;
	}
	if (a->progress && strcmp(a->cmd, "verify") && strcmp(a->cmd, "gc") &&
	    strcmp(a->cmd, "compact") && strcmp(a->cmd, "warm") &&
	    strcmp(a->cmd, "export")) {
		fprintf(stderr, "dcrfs-ctl: only verify, gc, compact, warm and export take --progress\n");
		return -1;
	}
	if (warm_opt && strcmp(a->cmd, "warm")) {
		fprintf(stderr, "dcrfs-ctl: only warm takes --mirror and --slice\n");
		return -1;
	}
	if (a->jobs_set && strcmp(a->cmd, "warm") && strcmp(a->cmd, "export")) {
		fprintf(stderr, "dcrfs-ctl: only warm and export take --jobs\n");
		return -1;
	}
	if (a->jobs_set && !strcmp(a->cmd, "warm") && a->jobs > 64) {
		fprintf(stderr, "dcrfs-ctl: --jobs: '%d' must be a number from 1 to 64\n", a->jobs);
		return -1;
	}
	if (a->json && !strcmp(a->cmd, "cat")) {
		fprintf(stderr, "dcrfs-ctl: cat writes the file's bytes: it takes no --json\n");
		return -1;
	}
	if (a->cache_dir && strcmp(a->cmd, "export") && strcmp(a->cmd, "cat")) {
		fprintf(stderr, "dcrfs-ctl: only export and cat take --cache-dir\n");
		return -1;
	}
	if (!strcmp(a->cmd, "warm") && !a->nmirrors &&
	    !(getenv("DCRFS_MIRROR") && *getenv("DCRFS_MIRROR"))) {
		fprintf(stderr, "dcrfs-ctl: warm needs --mirror URL (or DCRFS_MIRROR)\n");
		return -1;
	}
	if (wait_opt && strcmp(a->cmd, "wait")) {
		fprintf(stderr, "dcrfs-ctl: only wait takes --newer-than and --timeout\n");
		return -1;
	}
	if (gc_opt && strcmp(a->cmd, "gc")) {
		fprintf(stderr, "dcrfs-ctl: only gc takes --keep-* and --grace\n");
		return -1;
	}
	if ((dry || depth || cost) && strcmp(a->cmd, "gc") && strcmp(a->cmd, "compact")) {
		fprintf(stderr, "dcrfs-ctl: only gc and compact take --%s\n",
			dry ? "dry-run" : depth ? "max-depth" : "read-cost");
		return -1;
	}
	if (!strcmp(a->cmd, "gc") && !a->keep_last) {
		fprintf(stderr, "dcrfs-ctl: gc needs --keep-last N\n");
		return -1;
	}
	if (!a->store && strcmp(a->cmd, "status") && strcmp(a->cmd, "keygen") &&
	    strcmp(a->cmd, "wait")) {
		fprintf(stderr, "dcrfs-ctl: no store given (use --store URL or set DCRFS_STORE)\n");
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------- progress */

void ctl_progress(void *arg, enum dcr_pg_state s, const char *phase,
		  uint64_t done, uint64_t total, const char *unit)
{
	struct ctl *c = arg;

	switch (s) {
	case DCR_PG_START:
		progress_start(&c->pg, done);
		break;
	case DCR_PG_STEP:
	case DCR_PG_LAST:
		progress_show(&c->pg, phase, done, total, unit, NULL, s == DCR_PG_LAST);
		break;
	case DCR_PG_END:
		progress_clear(&c->pg);
		break;
	}
}

/* The tags of version @v, comma-separated, or "-". */
static void print_tags(const struct ctl *c, uint64_t v)
{
	int n = 0;

	for (size_t i = 0; i < c->ix.sv.ntags; i++) {
		if (c->ix.sv.tags[i].v != v)
			continue;
		if (n++)
			putchar(',');
		fputs(c->ix.sv.tags[i].name, stdout);
	}
	if (!n)
		putchar('-');
}

/* ------------------------------------------------------------------- log */

static int cmd_log(struct ctl *c)
{
	char b1[32], b2[32];
	int status = 0;

	if (c->json)
		return dcr_log_json(stdout, &c->ix) ? EXIT_FAIL : 0;
	printf("%10s %10s  %-20s %10s %10s  %-9s  %-16s  %s\n", "VERSION", "PARENT",
	       "TIME", "BYTES", "STORED", "KIND", "SIGNER", "TAGS");
	for (size_t i = c->ix.sv.nvs; i-- > 0;) {
		struct dcr_version_record r;
		if (dcr_index_record(&c->ix, &c->ix.sv.vs[i], &r)) {
			status = EXIT_FAIL;
			continue;
		}
		printf("%10" PRIu64 " %10" PRIu64 "  %-20s %10s %10s  %-9s  %-16s  ",
		       r.version, r.parent, r.time,
		       dcr_format_size(r.bytes, b1, sizeof(b1)),
		       dcr_format_size(r.stored_bytes, b2, sizeof(b2)), r.kind,
		       r.signer);
		print_tags(c, r.version);
		putchar('\n');
	}
	return status;
}

/* ------------------------------------------------------------------ show */

static int cmd_show(struct ctl *c, const char *arg)
{
	struct dcr_sview_ver *x = dcr_index_resolve(&c->ix, arg);
	char hex[DCR_HASH_HEX_LEN + 1], b1[32], b2[32];
	struct dcr_version_record r;

	if (!x)
		return EXIT_FAIL;
	if (c->json)
		return dcr_show_json(stdout, &c->ix, x) ? EXIT_FAIL : 0;
	if (dcr_index_record(&c->ix, x, &r))
		return EXIT_FAIL;
	const struct dcr_manifest *m = &x->m;
	printf("version %" PRIu64 ", parent %" PRIu64 ", %s, %s, format %" PRIu32
	       ", chunk size %s\n", r.version, r.parent, r.time, r.kind,
	       r.format, dcr_format_size(r.chunk_size, b1, sizeof(b1)));
	printf("%" PRIu64 " files, %s; %s stored in %" PRIu32 " packs; tags: ",
	       r.files, dcr_format_size(r.bytes, b1, sizeof(b1)),
	       dcr_format_size(r.stored_bytes, b2, sizeof(b2)), r.npacks);
	print_tags(c, r.version);
	putchar('\n');
	printf("signer: %s\n", r.signer);
	for (size_t i = 0; i < c->ix.sv.ntags; i++) {
		char buf[DCR_KEYID_LEN + 1];
		if (c->ix.sv.tags[i].v == r.version)
			printf("tag %s: %s\n", c->ix.sv.tags[i].name,
			       dcr_index_tag_signer(&c->ix, &c->ix.sv.tags[i], buf));
	}
	for (uint32_t i = 0; i < r.nmeta; i++)
		printf("meta: %s=%s\n", r.meta[i].key, r.meta[i].value);
	printf("file digests: %s\n", m->format >= 3 ?
	       "SHA-256 of each file's chunk SHA-256s (dcrfs-ctl verify "
	       "--deep checks them)" : "SHA-256 of each file's bytes");
	for (uint32_t i = 0; i < m->nfiles; i++) {
		const struct dcr_file *f = &m->files[i];
		int dir = f->type == DCR_FT_DIR;
		dcr_hash_hex(f->sha256, hex);
		printf("%c%04" PRIo32 " %14" PRIu64 "  %-64s  %s%s\n", dir ? 'd' : '-',
		       f->mode, f->size, dir ? "-" : hex, f->path, dir ? "/" : "");
	}
	return 0;
}

/* ------------------------------------------------------------------ diff */

static void print_dstat(const struct dcr_diff_stat *d)
{
	char b1[32], b2[32];

	printf("%" PRIu64 "/%" PRIu64 " chunks, %s changed, %s stored",
	       d->changed_chunks, d->chunks,
	       dcr_format_size(d->changed_bytes, b1, sizeof(b1)),
	       dcr_format_size(d->stored_bytes, b2, sizeof(b2)));
}

static int cmd_diff(struct ctl *c, const char *arg_a, const char *arg_b)
{
	struct dcr_sview_ver *va = dcr_index_resolve(&c->ix, arg_a);
	struct dcr_sview_ver *vb = dcr_index_resolve(&c->ix, arg_b);
	struct dcr_diff_result r;
	int ret;

	if (!va || !vb)
		return EXIT_FAIL;
	ret = dcr_diff(&c->ix, va, vb, &r);
	if (!r.to)
		return EXIT_FAIL; /* nothing compared */
	if (c->json) {
		dcr_diff_json(stdout, &r);
		goto out;
	}
	for (size_t i = 0; i < r.nfiles; i++) {
		const struct dcr_diff_file *df = &r.files[i];
		if (!strcmp(df->status, "unchanged"))
			continue;
		printf("%-9s %s: ", df->status, df->path);
		print_dstat(&df->d);
		putchar('\n');
		for (size_t t = 0; t < df->tensors.n; t++) {
			if (!df->ts[t].changed_bytes)
				continue;
			printf("            %s [%s]: ", df->tensors.t[t].name,
			       df->tensors.t[t].dtype);
			print_dstat(&df->ts[t]);
			putchar('\n');
		}
	}
	printf("total: ");
	print_dstat(&r.total);
	putchar('\n');
out:
	dcr_diff_result_free(&r);
	return ret ? EXIT_FAIL : 0;
}

/* ------------------------------------------------------------ tag, untag */

static int cmd_tag(struct ctl *c, const char *name, const char *arg,
		   const struct dcr_sign_key *key)
{
	struct dcr_sview_ver *x;

	if (!(x = dcr_index_resolve(&c->ix, arg)))
		return EXIT_FAIL;
	if (dcr_index_put_tag(&c->ix, name, x, key))
		return EXIT_FAIL;
	const char *signer = key ? dcr_sign_key_id(key) : "unsigned";
	if (c->json) {
		fputs("{\"tag\": ", stdout);
		dcr_json_str(stdout, name);
		printf(", \"version\": %" PRIu64 ", \"signer\": \"%s\"}\n", x->v,
		       signer);
	} else {
		dcr_info("tag %s -> version %" PRIu64 "%s%s", name, x->v,
			 key ? ", signed by " : "", key ? signer : "");
	}
	return 0;
}

static int cmd_untag(struct ctl *c, const char *name)
{
	uint64_t was = 0;
	int ret;

	for (size_t i = 0; i < c->ix.sv.ntags; i++)
		if (!strcmp(c->ix.sv.tags[i].name, name))
			was = c->ix.sv.tags[i].v;
	if ((ret = dcr_store_del_tag(c->ix.st, name)) == -ENOENT)
		dcr_err("%s: there is no tag '%s'", c->ix.st->url, name);
	else if (ret)
		dcr_err("%s: cannot remove tags/%s: %s", c->ix.st->url, name, dcr_strerror(ret));
	if (ret)
		return EXIT_FAIL;
	if (c->json) {
		/* the version it pointed at (null: unreadable) */
		fputs("{\"tag\": ", stdout);
		dcr_json_str(stdout, name);
		if (was)
			printf(", \"removed\": true, \"version\": %" PRIu64 "}\n", was);
		else
			fputs(", \"removed\": true, \"version\": null}\n", stdout);
	}
	return 0;
}

/* ------------------------------------------------------------------ init */

/* Create the store at @url; an existing one (marked or legacy) is left
 * alone and reported as a failure. */
static int cmd_init(const char *url, const struct dcr_store_cfg *cfg, int json)
{
	struct dcr_store_info info;
	struct dcr_store *st;
	int ret, status = EXIT_FAIL;

	if (dcr_store_open(url, cfg, DCR_OPEN_CREATE, &st))
		return EXIT_FAIL;
	ret = dcr_store_init(st, &info);
	if (ret == -EEXIST) {
		dcr_err("%s: there is a store already (id %s%s); left alone", st->url,
			info.id, info.legacy ? ", made before store markers" : "");
	} else if (ret) {
		dcr_store_init_failed(st, ret);
	} else {
		if (json) {
			fputs("{\"store\": ", stdout);
			dcr_json_str(stdout, st->url);
			fputs(", \"id\": ", stdout);
			dcr_json_str(stdout, info.id);
			printf(", \"format\": %u}\n", info.format);
		} else {
			dcr_info("%s: created a new store (id %s)", st->url, info.id);
		}
		status = 0;
	}
	dcr_store_close(st);
	return status;
}

/* ---------------------------------------------------------------- status */

/* Where the members of object @section (NULL: the top level) of @json,
 * our own status.json, begin; "" if it has none. */
static const char *json_section(const char *json, const char *section)
{
	char pat[64];
	const char *p;

	if (!section)
		return json;
	snprintf(pat, sizeof(pat), "\"%s\": {", section);
	p = strstr(json, pat);
	return p ? p + strlen(pat) : "";
}

/* The number after "@key": in @section of @json, or 0. */
static double json_num(const char *json, const char *section, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	p = strstr(json_section(json, section), pat);
	return p ? strtod(p + strlen(pat), NULL) : 0;
}

/* The string after "@key": at the top level of @json into @out. */
static void json_str(const char *json, const char *key, char *out, size_t cap)
{
	char pat[64];
	const char *p;
	size_t n = 0;

	snprintf(pat, sizeof(pat), "\"%s\": \"", key);
	p = strstr(json, pat);
	for (p = p ? p + strlen(pat) : ""; *p && *p != '"' && n + 1 < cap; p++) {
		if (*p == '\\' && p[1])
			p++;
		out[n++] = *p;
	}
	out[n] = 0;
}

#define STATUS_MAX (64u << 10)
#define FUSE_SUPER_MAGIC 0x65735546
#define DCRFS_FSTYPE "fuse.dcrfs"

/* Undo the octal escapes (\040 for a space...) of a mountinfo field in
 * place. */
static void mountinfo_unescape(char *s)
{
	char *d = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' &&
		    s[2] >= '0' && s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*d++ = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 |
				      (s[3] - '0'));
			s += 3;
		} else {
			*d++ = *s;
		}
	}
	*d = 0;
}

/*
 * The file system type of the mount at mount point @dir, device @dev, in
 * /proc/self/mountinfo (the last such line: the mount on top) into
 * @type. 0, -ENOENT if @dir is no mount point, or -errno.
 */
static int mount_type(const char *dir, dev_t dev, char *type, size_t cap)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t lcap = 0;
	int ret = -ENOENT;

	if (!f)
		return -errno;
	while (getline(&line, &lcap, f) > 0) {
		/* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [TAGS...] - TYPE ... */
		char *sep = strstr(line, " - "), *save = NULL, *fld[5], *ft;
		unsigned maj, min;
		int k;

		if (!sep)
			continue;
		*sep = 0;
		for (k = 0; k < 5; k++)
			if (!(fld[k] = strtok_r(k ? NULL : line, " ", &save)))
				break;
		ft = strtok_r(sep + 3, " \n", &save);
		if (k < 5 || !ft || sscanf(fld[2], "%u:%u", &maj, &min) != 2)
			continue;
		mountinfo_unescape(fld[4]);
		if (strcmp(fld[4], dir) || makedev(maj, min) != dev)
			continue;
		snprintf(type, cap, "%s", ft);
		ret = 0;
	}
	free(line);
	fclose(f);
	return ret;
}

/*
 * Whether @mnt is where a dcrfs is mounted: a FUSE file system (statfs)
 * whose mount at @mnt's real path is of type fuse.dcrfs (mountinfo), so
 * that no plain directory or other file system is taken for one. Its
 * device into *@dev. 0, or -1 with the reason logged.
 */
int ctl_check_mount(const char *mnt, dev_t *dev)
{
	char real[PATH_MAX], type[64];
	struct statfs sf;
	struct stat sb;
	int ret;

	if (!realpath(mnt, real) || statfs(real, &sf) < 0 ||
	    stat(real, &sb) < 0) {
		if (errno == ENOTCONN) /* its daemon is gone (killed) */
			dcr_err("%s: %s: a dead dcrfs mount; unmount it "
				"(fusermount3 -u %s) and mount it again", mnt,
				strerror(errno), mnt);
		else
			dcr_err("%s: %s (is a dcrfs mounted on it?)", mnt,
				strerror(errno));
		return -1;
	}
	if ((unsigned long)sf.f_type != FUSE_SUPER_MAGIC) {
		dcr_err("%s is not a dcrfs mount: its file system is not FUSE "
			"(is a dcrfs mounted on it?)", mnt);
		return -1;
	}
	ret = mount_type(real, sb.st_dev, type, sizeof(type));
	if (ret == -ENOENT) {
		dcr_err("%s is not a dcrfs mount point but in one: give the "
			"directory it is mounted on", mnt);
		return -1;
	}
	if (ret) {
		dcr_err("/proc/self/mountinfo: %s: cannot tell whether %s is a "
			"dcrfs mount", dcr_strerror(ret), mnt);
		return -1;
	}
	if (strcmp(type, DCRFS_FSTYPE)) {
		dcr_err("%s is not a dcrfs mount: its file system is %s, not "
			DCRFS_FSTYPE " (is a dcrfs mounted on it?)", mnt, type);
		return -1;
	}
	*dev = sb.st_dev;
	return 0;
}

/*
 * The status file of the dcrfs mounted on @mnt into @t (STATUS_MAX + 1
 * bytes), NUL-terminated, its length into *@n: a regular file of that
 * mount (opened without following a symlink or waiting on a FIFO), at
 * most STATUS_MAX bytes, one JSON object. 0, or -1 with the reason
 * logged.
 */
static int read_status(const char *mnt, char *t, size_t *n)
{
	char path[PATH_MAX];
	struct stat sb;
	dev_t dev;
	ssize_t got;
	int fd;

	if (ctl_check_mount(mnt, &dev))
		return -1;
	if (snprintf(path, sizeof(path), "%s/.dcrfs/status.json", mnt) >=
	    (int)sizeof(path)) {
		dcr_err("%s: name too long", mnt);
		return -1;
	}
	fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		dcr_err("%s: %s (is a dcrfs mounted on %s?)", path,
			strerror(errno), mnt);
		return -1;
	}
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_dev != dev) {
		dcr_err("%s: not the status file of the dcrfs mounted on %s",
			path, mnt);
		goto err_close;
	}
	fcntl(fd, F_SETFL, 0); /* a regular file: reads need not be told */
	*n = 0;
	while (*n <= STATUS_MAX &&
	       (got = read(fd, t + *n, STATUS_MAX + 1 - *n)) != 0) {
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			dcr_err("%s: %s", path, strerror(errno));
			goto err_close;
		}
		*n += (size_t)got;
	}
	close(fd);
	if (*n > STATUS_MAX) {
		dcr_err("%s: longer than %u bytes: not a status file", path,
			STATUS_MAX);
		return -1;
	}
	t[*n] = 0;
	if (dcr_json_check(t, *n) || t[strspn(t, " \t\r\n")] != '{') {
		dcr_err("%s: not a JSON object: not a status file", path);
		return -1;
	}
	return 0;

err_close:
	close(fd);
	return -1;
}

/* Read MNT/.dcrfs/status.json and print it, as it is (--json) or as a
 * summary. */
static int cmd_status(const char *mnt, int json)
{
	char store[1024], b[5][32];
	char *t = malloc(STATUS_MAX + 1);
	size_t n;

	if (!t)
		return EXIT_FAIL;
	if (read_status(mnt, t, &n)) {
		free(t);
		return EXIT_FAIL;
	}
	if (json) {
		fputs(t, stdout);
		free(t);
		return 0;
	}
	json_str(t, "store", store, sizeof(store));
	printf("store:     %s\n", store);
	printf("latest:    v%.0f (%.0f versions known, %.0f trees in memory)\n",
	       json_num(t, NULL, "latest"), json_num(t, NULL, "versions"),
	       json_num(t, NULL, "trees_loaded"));
	printf("cache:     %s of %s, hit rate %.1f %%\n",
	       dcr_format_size((uint64_t)json_num(t, "cache", "bytes"), b[0], sizeof(b[0])),
	       dcr_format_size((uint64_t)json_num(t, "cache", "budget"), b[1], sizeof(b[1])),
	       100 * json_num(t, "cache", "hit_rate"));
	printf("bytes:     %s read, %s fetched, %s materialized, %s verified\n",
	       dcr_format_size((uint64_t)json_num(t, "bytes", "read"), b[0], sizeof(b[0])),
	       dcr_format_size((uint64_t)json_num(t, "bytes", "fetched"), b[1], sizeof(b[1])),
	       dcr_format_size((uint64_t)json_num(t, "bytes", "materialized"), b[2], sizeof(b[2])),
	       dcr_format_size((uint64_t)json_num(t, "bytes", "verified"), b[3], sizeof(b[3])));
	printf("errors:    %.0f reads, %.0f fetches, %.0f refreshes\n",
	       json_num(t, "errors", "reads"), json_num(t, "errors", "fetches"),
	       json_num(t, "errors", "refreshes"));
	/* Versions a trust= mount refuses are not errors of the mount, but
	 * a store that goes unsigned shows here, not only under --json. */
	double rej[5] = {
		json_num(t, "rejected", "unsigned"), json_num(t, "rejected", "bad"),
		json_num(t, "rejected", "other_store"),
		json_num(t, "rejected", "untrusted"), json_num(t, "rejected", "tags"),
	};
	if (json_num(t, "trust", "keys") || rej[0] + rej[1] + rej[2] + rej[3] + rej[4])
		printf("trust:     %.0f keys; rejected %.0f unsigned, %.0f with a bad "
		       "signature, %.0f for another store, %.0f by another key, "
		       "%.0f tags%s\n", json_num(t, "trust", "keys"), rej[0], rej[1],
		       rej[2], rej[3], rej[4],
		       rej[0] + rej[1] + rej[2] + rej[3] ?
		       " (not shown: see the mount's log)" : "");
	if (strstr(t, "\"mode\": \"none\""))
		printf("prefetch:  off\n");
	else if (json_num(t, "prefetch", "current"))
		printf("prefetch:  v%.0f done; v%.0f: %s of %s\n",
		       json_num(t, "prefetch", "done"), json_num(t, "prefetch", "current"),
		       dcr_format_size((uint64_t)json_num(t, "prefetch", "bytes_done"), b[0], sizeof(b[0])),
		       dcr_format_size((uint64_t)json_num(t, "prefetch", "bytes_total"), b[4], sizeof(b[4])));
	else
		printf("prefetch:  v%.0f done\n", json_num(t, "prefetch", "done"));
	if (json_num(t, "scrub", "interval") > 0)
		printf("scrub:     every %g s, %s checked; %.0f rotten chunks, "
		       "%.0f repaired, %.0f files dropped\n",
		       json_num(t, "scrub", "interval"),
		       dcr_format_size((uint64_t)json_num(t, "scrub", "bytes_checked"),
				       b[0], sizeof(b[0])),
		       json_num(t, "scrub", "rotten"),
		       json_num(t, "scrub", "repaired"),
		       json_num(t, "scrub", "dropped"));
	else
		printf("scrub:     off\n");
	printf("memory:    %s resident\n",
	       dcr_format_size((uint64_t)json_num(t, NULL, "rss_bytes"), b[0], sizeof(b[0])));
	free(t);
	return 0;
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
	struct args a = { 0 };
	struct ctl c = { 0 };
	struct dcr_store_info info;
	struct dcr_store *st;
	int status;

	dcr_log_set_prog("dcrfs-ctl");
	if (parse_args(argc, argv, &a)) {
		fprintf(stderr, "Try 'dcrfs-ctl --help' for more information.\n");
		return EXIT_USAGE;
	}
	if ((!strcmp(a.cmd, "tag") || !strcmp(a.cmd, "untag")) &&
	    !dcr_tag_name_valid(a.pos[0])) {
		fprintf(stderr, "dcrfs-ctl: %s: '%s' is not a valid tag name (letters, digits, "
			"'.', '_', '-'; at most 128; not starting with '.')\n", a.cmd, a.pos[0]);
		return EXIT_USAGE;
	}
	dcr_log_set_level(a.t.log_level >= 0 ? (enum dcr_log_level)a.t.log_level :
			  a.verbose ? DCR_LOG_DEBUG : a.quiet ? DCR_LOG_WARN : DCR_LOG_INFO);
	c.json = a.json;
	progress_init(&c.pg, a.progress, a.quiet, a.json);
	struct dcr_store_cfg cfg = { .path_style = -1,
				     .no_sign_request = a.no_sign,
				     .profile = a.t.profile, .region = a.t.region,
				     .endpoint = a.t.endpoint, .ca_bundle = a.t.ca_bundle };
	if (!strcmp(a.cmd, "init"))
		return cmd_init(a.store, &cfg, a.json);
	if (!strcmp(a.cmd, "keygen")) {
		status = cmd_keygen(a.pos[0], a.json);
		return fflush(stdout) ? EXIT_FAIL : status;
	}
	/* A key is read before the store is looked at: a bad one fails first. */
	struct dcr_sign_key *key = NULL;
	if (a.sign_key && dcr_sign_key_load(a.sign_key, &key))
		return EXIT_FAIL;
	if (!strcmp(a.cmd, "wait")) {
		status = cmd_wait(a.pos[0], a.have_newer, a.newer_than,
				  a.timeout_s, a.json);
		return fflush(stdout) ? EXIT_FAIL : status;
	}
	if (!strcmp(a.cmd, "status")) {
		status = cmd_status(a.pos[0], a.json);
		return fflush(stdout) ? EXIT_FAIL : status;
	}
	if (dcr_store_open(a.store, &cfg, 0, &st)) {
		dcr_sign_key_free(key);
		return EXIT_FAIL;
	}
	/* Never report on what is not a store as if it were an empty one. */
	if (dcr_store_check(st, false, &info) || dcr_index_load(&c.ix, st, &info)) {
		dcr_store_close(st);
		dcr_sign_key_free(key);
		return EXIT_FAIL;
	}
	c.ix.threads = a.threads;
	if (!strcmp(a.cmd, "log"))
		status = cmd_log(&c);
	else if (!strcmp(a.cmd, "show"))
		status = cmd_show(&c, a.pos[0]);
	else if (!strcmp(a.cmd, "diff"))
		status = cmd_diff(&c, a.pos[0], a.pos[1]);
	else if (!strcmp(a.cmd, "tag"))
		status = cmd_tag(&c, a.pos[0], a.pos[1], key);
	else if (!strcmp(a.cmd, "untag"))
		status = cmd_untag(&c, a.pos[0]);
	else if (!strcmp(a.cmd, "gc"))
		status = cmd_gc(&c, &a);
	else if (!strcmp(a.cmd, "compact"))
		status = cmd_compact(&c, &a);
	else if (!strcmp(a.cmd, "warm"))
		status = cmd_warm(&c, &a, &cfg, &st);
	else if (!strcmp(a.cmd, "export"))
		status = cmd_export(&c, &a);
	else if (!strcmp(a.cmd, "cat"))
		status = cmd_cat(&c, &a);
	else
		status = cmd_verify(&c, a.pos, a.npos, a.deep, a.quiet, a.trust);
	if (fflush(stdout) || ferror(stdout)) {
		dcr_err("writing the output: %s", strerror(errno));
		status = EXIT_FAIL;
	}
	dcr_index_free(&c.ix);
	dcr_store_close(st);
	dcr_sign_key_free(key);
	return status;
}
