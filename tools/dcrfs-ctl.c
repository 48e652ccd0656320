/* SPDX-License-Identifier: MIT */
/*
 * dcrfs-ctl - create, inspect and administer a dcrfs store: init, log,
 * show, diff, tag, untag, verify, gc; and a mount's status.
 *
 * Argument parsing and output. Manifests come from core/objstore.h;
 * bytes that must be materialized (diff, verify --deep, format 1 delta
 * chunks) go through the read path (store/reader.h) with a scratch
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
#include "fileio.h"
#include "frame.h"
#include "hash.h"
#include "json.h"
#include "toolopts.h"
#include "manifest.h"
#include "reader.h"
#include "safetensors.h"
#include "store.h"
#include "ctl.h"


/* Cache budget of the scratch reader (diff, verify --deep). */
#define SCRATCH_CACHE ((uint64_t)1 << 30)

static void usage(FILE *f)
{
	fprintf(f,
"Usage: dcrfs-ctl [OPTIONS] COMMAND [ARGS]\n"
"Inspect and administer a dcrfs store.\n"
"\n"
"Commands:\n"
"  init                   create a store (exits 1 if there is one already)\n"
"  log                    the versions, newest first\n"
"  show V                 the files of version V, their sizes and digests\n"
"                         (dcrfs's file digest, not sha256sum's: see\n"
"                         dcrfs-ctl(8))\n"
"  diff A B               what changed from version A to version B, per file\n"
"                         and per safetensors tensor\n"
"  tag NAME V             point tag NAME at version V\n"
"  untag NAME             remove tag NAME\n"
"  verify [V...]          check that every object the versions (default: all)\n"
"                         need exists and matches its hashes\n"
"  gc --keep-last N       remove the versions outside retention and the packs\n"
"                         no kept version needs (kept versions built on removed\n"
"                         ones are rebased first, as compact does)\n"
"  compact                re-encode versions as skip-deltas so that every\n"
"                         version materializes with at most K frames per chunk\n"
"  status MNT             what the dcrfs mounted on MNT is doing (no store\n"
"                         needed: read from MNT/.dcrfs/status.json)\n"
"  warm [V]               fill the cache tiers with the packs of version V\n"
"                         (default latest), each through the mirror the\n"
"                         mounts send it to\n"
"\n"
"A version V is a number, a tag name, or 'latest'.\n"
"\n"
"  -s, --store URL        store: a directory, file:///path or s3://bucket/prefix\n"
"                         (default: $DCRFS_STORE)\n"
"      --json             machine-readable output: one JSON value on stdout\n"
"                         (every command)\n"
"      --deep             verify: also materialize every chunk and check every\n"
"                         file's SHA-256\n"
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
"warm options:\n"
"      --mirror URL       a tier, http(s)://host[:port], as the mounts' -o\n"
"                         mirror= (repeat it; default: $DCRFS_MIRROR)\n"
"      --slice SIZE       bytes per GET: the tier's slice (default 1M)\n"
"      --jobs N           GETs at once (default 8, at most 64)\n"
"global options:\n"
"      --no-sign-request  S3: unsigned requests (a public bucket); without it,\n"
"                         finding no credentials is an error\n"
TOOL_USAGE
"      --progress         verify, gc, compact, warm: progress on stderr even when it\n"
"                         is not a terminal (a line every 5 s) or with --json\n"
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
		{ "no-sign-request", no_argument, NULL, 'S' },
		{ "progress", no_argument, NULL, 'P' },
		{ "mirror", required_argument, NULL, 'M' },
		{ "slice", required_argument, NULL, 'X' },
		{ "jobs", required_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		TOOL_LONGOPTS,
		{ 0 },
	};
	static const struct {
		const char *name;
		int min, max; /* positional arguments; max -1: any */
	} cmds[] = {
		{ "init", 0, 0 },
		{ "log", 0, 0 },    { "show", 1, 1 },
		{ "diff", 2, 2 },   { "tag", 2, 2 },
		{ "untag", 1, 1 },  { "verify", 0, -1 },
		{ "gc", 0, 0 },     { "status", 1, 1 },
		{ "compact", 0, 0 }, { "warm", 0, 1 },
	};
	int c, gc_opt = 0, dry = 0, depth = 0, warm_opt = 0;
	uint64_t k;

	a->store = getenv("DCRFS_STORE");
	a->keep_tagged = 1;
	a->grace = 86400;
	a->slice = (uint64_t)1 << 20;
	a->jobs = 8;
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
		warm_opt |= strchr("MXj", c) != NULL;
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
			if (a->nmirrors == DCR_MIRRORS_MAX) {
				fprintf(stderr, "dcrfs-ctl: more than %d --mirror\n", DCR_MIRRORS_MAX);
				return -1;
			}
			a->mirror[a->nmirrors++] = optarg;
			break;
		case 'X':
			if (dcr_parse_size(optarg, &a->slice) || a->slice < (64u << 10) ||
			    a->slice > (64u << 20)) {
				fprintf(stderr, "dcrfs-ctl: --slice: '%s' must be a size from 64K to 64M\n", optarg);
				return -1;
			}
			break;
		case 'j':
			if (dcr_parse_u64(optarg, &k) || k < 1 || k > 64) {
				fprintf(stderr, "dcrfs-ctl: --jobs: '%s' must be a number from 1 to 64\n", optarg);
				return -1;
			}
			a->jobs = (int)k;
			break;
		case 'K': {
			if (dcr_parse_u64(optarg, &k) || k < 1 || k > 64) {
				fprintf(stderr, "dcrfs-ctl: --max-depth: '%s' must be a number from 1 to 64\n", optarg);
				return -1;
			}
			a->max_depth = (unsigned)k;
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
		fprintf(stderr, "dcrfs-ctl: %s: wrong number of arguments\n", a->cmd);
		return -1;
	}
	if (a->deep && strcmp(a->cmd, "verify")) {
		fprintf(stderr, "dcrfs-ctl: only verify takes --deep\n");
		return -1;
	}
	if (a->progress && strcmp(a->cmd, "verify") && strcmp(a->cmd, "gc") &&
	    strcmp(a->cmd, "compact") && strcmp(a->cmd, "warm")) {
		fprintf(stderr, "dcrfs-ctl: only verify, gc, compact and warm take --progress\n");
		return -1;
	}
	if (warm_opt && strcmp(a->cmd, "warm")) {
		fprintf(stderr, "dcrfs-ctl: only warm takes --mirror, --slice and --jobs\n");
		return -1;
	}
	if (!strcmp(a->cmd, "warm") && !a->nmirrors &&
	    !(getenv("DCRFS_MIRROR") && *getenv("DCRFS_MIRROR"))) {
		fprintf(stderr, "dcrfs-ctl: warm needs --mirror URL (or DCRFS_MIRROR)\n");
		return -1;
	}
	if (gc_opt && strcmp(a->cmd, "gc")) {
		fprintf(stderr, "dcrfs-ctl: only gc takes --keep-* and --grace\n");
		return -1;
	}
	if ((dry || depth) && strcmp(a->cmd, "gc") && strcmp(a->cmd, "compact")) {
		fprintf(stderr, "dcrfs-ctl: only gc and compact take --%s\n",
			dry ? "dry-run" : "max-depth");
		return -1;
	}
	if (!strcmp(a->cmd, "gc") && !a->keep_last) {
		fprintf(stderr, "dcrfs-ctl: gc needs --keep-last N\n");
		return -1;
	}
	if (!a->store && strcmp(a->cmd, "status")) {
		fprintf(stderr, "dcrfs-ctl: no store given (use --store URL or set DCRFS_STORE)\n");
		return -1;
	}
	return 0;
}

/* ----------------------------------------------------- the store's index */





static int versions_cb(const char *key, const struct dcr_obj_info *info, void *arg)
{
	struct ctl *c = arg;
	uint64_t v;

	if (dcr_version_from_key(key, &v))
		return 0;
	if (dcr_array_grow(&c->vs, sizeof(*c->vs), c->nvs, &c->cap_vs))
		return -ENOMEM;
	c->vs[c->nvs++] = (struct ver){ .v = v, .obj_size = info->size };
	return 0;
}

/* The hash a "packs/<hex>" key names into @h: 0, or -1 for another key. */
int pack_key_hash(const char *key, uint8_t h[DCR_HASH_LEN])
{
	if (strncmp(key, "packs/", 6) || strlen(key + 6) != DCR_HASH_HEX_LEN ||
	    dcr_hash_unhex(key + 6, h))
		return -1;
	return 0;
}

static int packs_cb(const char *key, const struct dcr_obj_info *info, void *arg)
{
	struct ctl *c = arg;
	uint8_t h[DCR_HASH_LEN];

	if (pack_key_hash(key, h))
		return 0;
	if (dcr_array_grow(&c->packs, sizeof(*c->packs), c->npacks, &c->cap_packs))
		return -ENOMEM;
	memcpy(c->packs[c->npacks].h, h, DCR_HASH_LEN);
	c->packs[c->npacks].size = info->size;
	c->packs[c->npacks++].mtime_ns = info->mtime_ns;
	return 0;
}

static int tags_cb(const char *key, const struct dcr_obj_info *info, void *arg)
{
	struct ctl *c = arg;
	const char *name = key + 5;

	if (strncmp(key, "tags/", 5) || !dcr_tag_name_valid(name))
		return 0;
	if (dcr_array_grow(&c->tags, sizeof(*c->tags), c->ntags, &c->cap_tags))
		return -ENOMEM;
	if (!(c->tags[c->ntags].name = strdup(name)))
		return -ENOMEM;
	c->tags[c->ntags++].v = 0;
	return 0;
}

static int cmp_ver(const void *a, const void *b)
{
	const struct ver *x = a, *y = b;

	return x->v < y->v ? -1 : x->v > y->v;
}

static int cmp_pack(const void *a, const void *b)
{
	return memcmp(a, b, DCR_HASH_LEN);
}

static int cmp_tag(const void *a, const void *b)
{
	const struct tag *x = a, *y = b;

	return strcmp(x->name, y->name);
}

/* List the store's versions, packs and tags (each tag's target read). */
static int ctl_index(struct ctl *c)
{
	int ret;

	if ((ret = dcr_store_list(c->st, "versions/", versions_cb, c)) ||
	    (ret = dcr_store_list(c->st, "packs/", packs_cb, c)) ||
	    (ret = dcr_store_list(c->st, "tags/", tags_cb, c))) {
		dcr_err("%s: cannot list the store: %s", c->st->url, dcr_strerror(ret));
		return ret;
	}
	if ((ret = dcr_store_find_layout(c->st, 0, 0, &c->layout_bad, &c->layout))) {
		dcr_err("%s: cannot read the store's layout: %s", c->st->url,
			dcr_strerror(ret));
		return ret;
	}
	qsort(c->vs, c->nvs, sizeof(*c->vs), cmp_ver);
	qsort(c->packs, c->npacks, sizeof(*c->packs), cmp_pack);
	qsort(c->tags, c->ntags, sizeof(*c->tags), cmp_tag);
	for (size_t i = 0; i < c->ntags; i++) {
		ret = dcr_store_get_tag(c->st, c->tags[i].name, &c->tags[i].v);
		if (ret && ret != -ENOENT && ret != -EBADMSG)
			return ret;
		if (ret)
			c->tags[i].v = 0; /* vanished or malformed: shown nowhere */
	}
	return 0;
}

static void ctl_free(struct ctl *c)
{
	dcr_reader_close(c->r);
	if (c->scratch[0])
		dcr_rm_rf(c->scratch);
	for (size_t i = 0; i < c->nvs; i++)
		dcr_manifest_free(&c->vs[i].m);
	free(c->vs);
	free(c->packs);
	for (size_t i = 0; i < c->ntags; i++)
		free(c->tags[i].name);
	free(c->tags);
	dcr_layout_free(&c->layout);
	dcr_store_close(c->st);
}

struct ver *ver_find(struct ctl *c, uint64_t v)
{
	struct ver key = { .v = v };

	return bsearch(&key, c->vs, c->nvs, sizeof(*c->vs), cmp_ver);
}

const struct pack *pack_find(const struct ctl *c, const uint8_t h[DCR_HASH_LEN])
{
	return bsearch(h, c->packs, c->npacks, sizeof(*c->packs), cmp_pack);
}

/* Version @v's manifest as readers read it (layout.h), fetched once;
 * NULL (logged) if it cannot be had. */
const struct dcr_manifest *ver_manifest(struct ctl *c, struct ver *x)
{
	if (x->state == 0) {
		const struct dcr_layout_entry *e = dcr_layout_find(&c->layout, x->v);
		int ret = dcr_store_get_encoding(c->st, &c->layout, x->v, &x->m);
		x->state = ret ? ret : 1;
		x->compacted = e != NULL;
		x->lparent = e ? e->lparent : x->m.parent;
		if (ret == -ENOENT)
			dcr_err("%s: %s of version %" PRIu64 " vanished while reading",
				c->st->url, e ? "the compacted manifest" : "the manifest",
				x->v);
	}
	return x->state == 1 ? &x->m : NULL;
}

int ctl_reload_layout(struct ctl *c)
{
	int ret;

	for (size_t i = 0; i < c->nvs; i++) {
		if (c->vs[i].state == 1)
			dcr_manifest_free(&c->vs[i].m);
		memset(&c->vs[i].m, 0, sizeof(c->vs[i].m));
		c->vs[i].state = 0;
	}
	dcr_layout_free(&c->layout);
	if ((ret = dcr_store_find_layout(c->st, 0, 0, &c->layout_bad, &c->layout)))
		dcr_err("%s: cannot read the store's layout: %s", c->st->url,
			dcr_strerror(ret));
	return ret;
}

/* Resolve "latest", a number or a tag name into a listed version. */
struct ver *resolve(struct ctl *c, const char *arg)
{
	uint64_t v = 0;

	if (!strcmp(arg, "latest")) {
		if (c->nvs)
			return &c->vs[c->nvs - 1];
		dcr_err("%s: the store has no versions", c->st->url);
		return NULL;
	}
	if (dcr_parse_u64(arg, &v)) {
		for (size_t i = 0; i < c->ntags; i++)
			if (!strcmp(c->tags[i].name, arg))
				v = c->tags[i].v;
		if (!v) {
			dcr_err("%s: '%s' is neither a version number nor a tag", c->st->url, arg);
			return NULL;
		}
	}
	struct ver *x = ver_find(c, v);
	if (!x)
		dcr_err("%s: version %s does not exist", c->st->url, arg);
	return x;
}

/* ------------------------------------------------------ the scratch reader */

static int ctl_reader(struct ctl *c)
{
	int ret;

	if (c->r)
		return 0;
	if ((ret = dcr_mktempdir("dcrfs-ctl", c->scratch, sizeof(c->scratch))))
		return ret;
	struct dcr_reader_opts ro = { .cache_dir = c->scratch, .cache_size = SCRATCH_CACHE };
	if ((ret = dcr_reader_open(c->st, &ro, &c->r)))
		return ret;
	return dcr_reader_refresh(c->r, NULL);
}

/* Read exactly @len bytes at @off of file @fi of version @v. */
int read_bytes(struct ctl *c, uint64_t v, uint32_t fi, const char *path,
		      uint64_t off, void *buf, size_t len)
{
	const struct dcr_version_info *vi;
	int ret;

	if ((ret = ctl_reader(c)) || (ret = dcr_reader_version(c->r, v, &vi)))
		return ret;
	/* Entry 0 is the root; the manifest's files follow in order. */
	if (fi + 1 >= vi->nentries || strcmp(vi->entries[fi + 1].path, path))
		return DCR_ERR(-EIO);
	for (size_t done = 0; done < len;) {
		ssize_t n = dcr_reader_read(c->r, v, fi + 1, off + done,
					    (uint8_t *)buf + done, len - done);
		if (n <= 0)
			return n < 0 ? (int)n : DCR_ERR(-EIO);
		done += (size_t)n;
	}
	return 0;
}

/* ------------------------------------------------------------- summaries */

struct mstats {
	uint64_t files, dirs, bytes;
	uint64_t same, delta, full;
	uint64_t frame_bytes;
};

static void mstats(const struct dcr_manifest *m, struct mstats *s)
{
	memset(s, 0, sizeof(*s));
	for (uint32_t i = 0; i < m->nfiles; i++) {
		const struct dcr_file *f = &m->files[i];
		if (f->type == DCR_FT_DIR) {
			s->dirs++;
			continue;
		}
		s->files++;
		s->bytes += f->size;
		for (uint64_t k = 0; k < f->nchunks; k++) {
			const struct dcr_chunk_ref *r = &f->chunks[k];
			s->same += r->kind == DCR_CK_SAME;
			s->delta += r->kind == DCR_CK_DELTA;
			s->full += r->kind == DCR_CK_FULL;
			if (r->kind != DCR_CK_SAME)
				s->frame_bytes += r->len;
		}
	}
}

/* anchor (no chunk needs another version), compacted (encoded by the
 * layout's manifest: skip-deltas), delta. */
static const char *kind_name(const struct ver *x, const struct mstats *s)
{
	if (!x->m.parent || (!s->same && !s->delta))
		return "anchor";
	return x->compacted ? "compacted" : "delta";
}

/* Bytes the version's encoding holds in the store: its frames and its
 * manifest object (compacted versions share packs, so packs are not
 * counted whole). */
static uint64_t stored_bytes(const struct ver *x, const struct mstats *s)
{
	return x->obj_size + s->frame_bytes;
}

static char *fmt_time(int64_t ns, char *buf, size_t cap)
{
	time_t t = (time_t)(ns / 1000000000);
	struct tm tm;

	if (!gmtime_r(&t, &tm) || !strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(buf, cap, "?");
	return buf;
}

/* The tags of version @v, comma-separated (text) or as a JSON array. */
static void print_tags(const struct ctl *c, uint64_t v, int json)
{
	int n = 0;

	if (json)
		putchar('[');
	for (size_t i = 0; i < c->ntags; i++) {
		if (c->tags[i].v != v)
			continue;
		if (n++)
			fputs(json ? ", " : ",", stdout);
		if (json)
			dcr_json_str(stdout, c->tags[i].name);
		else
			fputs(c->tags[i].name, stdout);
	}
	if (json)
		putchar(']');
	else if (!n)
		putchar('-');
}

/* The members log and show share, for loaded version @x with stats @s. */
static void print_summary_json(const struct ctl *c, const struct ver *x,
			       const struct mstats *s)
{
	char tm[40];

	printf("\"version\": %" PRIu64 ", \"parent\": %" PRIu64 ", \"base\": %" PRIu64
	       ", \"time\": \"%s\", \"time_ns\": %" PRId64 ", \"bytes\": %" PRIu64
	       ", \"stored_bytes\": %" PRIu64 ", \"kind\": \"%s\", \"tags\": ",
	       x->v, x->lparent, dcr_manifest_needs_parent(&x->m) ? x->m.parent : 0,
	       fmt_time(x->m.ctime_ns, tm, sizeof(tm)), x->m.ctime_ns, s->bytes,
	       stored_bytes(x, s), kind_name(x, s));
	print_tags(c, x->v, 1);
}

/* ------------------------------------------------------------------- log */

static int cmd_log(struct ctl *c)
{
	int status = 0, n = 0;
	char tm[40], b1[32], b2[32];

	if (c->json)
		fputs("[", stdout);
	else
		printf("%10s %10s  %-20s %10s %10s  %-9s  %s\n", "VERSION", "PARENT",
		       "TIME", "BYTES", "STORED", "KIND", "TAGS");
	for (size_t i = c->nvs; i-- > 0;) {
		struct ver *x = &c->vs[i];
		const struct dcr_manifest *m = ver_manifest(c, x);
		struct mstats s;
		if (!m) {
			status = EXIT_FAIL;
			continue;
		}
		mstats(m, &s);
		uint64_t stored = stored_bytes(x, &s);
		if (c->json) {
			printf("%s\n  {", n++ ? "," : "");
			print_summary_json(c, x, &s);
			printf(", \"files\": %" PRIu64 ", \"chunks\": {\"same\": %" PRIu64
			       ", \"delta\": %" PRIu64 ", \"full\": %" PRIu64 "}}",
			       s.files, s.same, s.delta, s.full);
		} else {
			printf("%10" PRIu64 " %10" PRIu64 "  %-20s %10s %10s  %-9s  ",
			       x->v, x->lparent, fmt_time(m->ctime_ns, tm, sizeof(tm)),
			       dcr_format_size(s.bytes, b1, sizeof(b1)),
			       dcr_format_size(stored, b2, sizeof(b2)),
			       kind_name(x, &s));
			print_tags(c, x->v, 0);
			putchar('\n');
		}
	}
	if (c->json)
		fputs(n ? "\n]\n" : "]\n", stdout);
	return status;
}

/* ------------------------------------------------------------------ show */

static int cmd_show(struct ctl *c, const char *arg)
{
	struct ver *x = resolve(c, arg);
	const struct dcr_manifest *m = x ? ver_manifest(c, x) : NULL;
	char tm[40], hex[DCR_HASH_HEX_LEN + 1], b1[32], b2[32];
	struct mstats s;

	if (!m)
		return EXIT_FAIL;
	mstats(m, &s);
	uint64_t stored = stored_bytes(x, &s);
	fmt_time(m->ctime_ns, tm, sizeof(tm));
	if (c->json) {
		putchar('{');
		print_summary_json(c, x, &s);
		printf(", \"format\": %" PRIu32 ", \"chunk_size\": %" PRIu32 ", \"packs\": [",
		       m->format, m->chunk_size);
		for (uint32_t i = 0; i < m->npacks; i++) {
			dcr_hash_hex(m->packs[i], hex);
			printf("%s\"%s\"", i ? ", " : "", hex);
		}
		fputs("], \"files\": [", stdout);
	} else {
		printf("version %" PRIu64 ", parent %" PRIu64 ", %s, %s, format %" PRIu32
		       ", chunk size %s\n", x->v, x->lparent, tm, kind_name(x, &s),
		       m->format, dcr_format_size(m->chunk_size, b1, sizeof(b1)));
		printf("%" PRIu64 " files, %s; %s stored in %" PRIu32 " packs; tags: ",
		       s.files, dcr_format_size(s.bytes, b1, sizeof(b1)),
		       dcr_format_size(stored, b2, sizeof(b2)), m->npacks);
		print_tags(c, x->v, 0);
		putchar('\n');
		printf("file digests: %s\n", m->format >= 3 ?
		       "SHA-256 of each file's chunk SHA-256s (dcrfs-ctl verify "
		       "--deep checks them)" : "SHA-256 of each file's bytes");
	}
	for (uint32_t i = 0; i < m->nfiles; i++) {
		const struct dcr_file *f = &m->files[i];
		int dir = f->type == DCR_FT_DIR;
		uint64_t fb = 0;
		for (uint64_t k = 0; k < f->nchunks; k++)
			if (f->chunks[k].kind != DCR_CK_SAME)
				fb += f->chunks[k].len;
		dcr_hash_hex(f->sha256, hex);
		if (c->json) {
			printf("%s\n  {\"path\": ", i ? "," : "");
			dcr_json_str(stdout, f->path);
			printf(", \"type\": \"%s\", \"mode\": \"%04" PRIo32 "\", \"size\": %" PRIu64,
			       dir ? "dir" : "file", f->mode, f->size);
			if (!dir && m->format < 3)
				printf(", \"sha256\": \"%s\"", hex);
			if (!dir)
				printf(", \"digest\": \"%s\", \"digest_kind\": \"%s\", "
				       "\"chunks\": %" PRIu64 ", \"stored_bytes\": %" PRIu64,
				       hex, dcr_file_digest_kind(m->format), f->nchunks, fb);
			putchar('}');
		} else {
			printf("%c%04" PRIo32 " %14" PRIu64 "  %-64s  %s%s\n", dir ? 'd' : '-',
			       f->mode, f->size, dir ? "-" : hex, f->path, dir ? "/" : "");
		}
	}
	if (c->json)
		fputs(m->nfiles ? "\n]}\n" : "]}\n", stdout);
	return 0;
}

/* ------------------------------------------------------------------ diff */

struct dstat {
	uint64_t chunks, changed_chunks, changed_bytes, stored_bytes;
};

static uint64_t ndiff(const uint8_t *a, const uint8_t *b, size_t n)
{
	uint64_t d = 0;

	for (size_t i = 0; i < n; i++)
		d += a[i] != b[i];
	return d;
}

/*
 * Per chunk of file @fi of version @b, the bytes of the frames a node
 * holding version @a (or nothing, a = 0) downloads to build it: those of
 * the versions on @b's chain newer than @a, down to the first full frame.
 */
static int chain_stored(struct ctl *c, struct ver *b, uint32_t fi, uint64_t a,
			uint64_t *stored)
{
	const struct dcr_manifest *m = ver_manifest(c, b);
	uint64_t n = m->files[fi].nchunks;
	uint8_t *done = calloc(n ? n : 1, 1);

	if (!done)
		return -ENOMEM;
	memset(stored, 0, n * sizeof(*stored));
	for (;;) {
		const struct dcr_file *f = &m->files[fi];
		for (uint64_t k = 0; k < n && k < f->nchunks; k++) {
			if (done[k] || f->chunks[k].kind == DCR_CK_SAME)
				continue;
			stored[k] += f->chunks[k].len;
			done[k] = f->chunks[k].kind == DCR_CK_FULL;
		}
		if (!m->parent || m->parent <= a || f->base == DCR_NO_BASE)
			break;
		struct ver *p = ver_find(c, m->parent);
		if (!p || !(m = ver_manifest(c, p)) || f->base >= m->nfiles)
			break; /* the rest of the chain is gone: verify reports it */
		fi = f->base;
	}
	free(done);
	return 0;
}

struct tstat {
	const struct dcr_tensor *t;
	struct dstat d;
};

/* The tensors of file @fi of version @v, if it is a safetensors file. */
static void file_tensors(struct ctl *c, uint64_t v, const struct dcr_file *f,
			 uint32_t fi, struct dcr_tensors *ts)
{
	uint8_t h[8];
	size_t need, len = strlen(f->path);

	ts->t = NULL;
	ts->n = 0;
	if (len < 12 || strcmp(f->path + len - 12, ".safetensors") || f->size < 8 ||
	    read_bytes(c, v, fi, f->path, 0, h, 8) ||
	    dcr_safetensors_prefix_len(h, 8, f->size, &need))
		return;
	uint8_t *buf = malloc(need);
	if (buf && !read_bytes(c, v, fi, f->path, 0, buf, need) &&
	    dcr_safetensors_tensors(buf, need, f->size, ts))
		dcr_warn("version %" PRIu64 ": %s: safetensors header not understood; "
			 "no per-tensor diff", v, f->path);
	free(buf);
}

/*
 * Compare file @fa of version @va (NULL: absent) with file @fb of @vb
 * chunk by chunk (in @vb's chunks): a chunk whose SHA-256 is the same is
 * unchanged; the others are materialized and compared byte for byte.
 */
static int diff_file(struct ctl *c, struct ver *va, const struct dcr_file *fa,
		     uint32_t ia, struct ver *vb, const struct dcr_file *fb,
		     uint32_t ib, struct dstat *d, struct tstat *ts, size_t nts)
{
	const struct dcr_manifest *ma = &va->m, *mb = &vb->m;
	uint32_t cs = mb->chunk_size;
	uint64_t *stored = calloc(fb->nchunks ? fb->nchunks : 1, sizeof(*stored));
	uint8_t *ba = malloc(cs), *bb = malloc(cs);
	int ret = -ENOMEM;

	if (!stored || !ba || !bb ||
	    (ret = chain_stored(c, vb, ib, va->v, stored)))
		goto err_free;
	d->chunks = fb->nchunks;
	size_t t0 = 0;
	for (uint64_t k = 0; k < fb->nchunks; k++) {
		uint64_t off = k * cs;
		uint32_t len = dcr_chunk_len(fb->size, cs, k);
		d->stored_bytes += stored[k];
		if (fa && ma->chunk_size == cs && k < fa->nchunks &&
		    dcr_chunk_len(fa->size, cs, k) == len &&
		    dcr_hash_eq(fa->chunks[k].hash, fb->chunks[k].hash))
			continue;
		/* bytes of A that overlap the chunk; the rest of it is new */
		size_t na = !fa || fa->size <= off ? 0 : (size_t)DCR_MIN(fa->size - off, len);
		if ((ret = read_bytes(c, vb->v, ib, fb->path, off, bb, len)) ||
		    (na && (ret = read_bytes(c, va->v, ia, fa->path, off, ba, na))))
			goto err_free;
		uint64_t nd = ndiff(ba, bb, na) + (len - na);
		d->changed_bytes += nd;
		d->changed_chunks += nd != 0;
		while (t0 < nts && ts[t0].t->off + ts[t0].t->len <= off)
			t0++;
		for (size_t t = t0; t < nts && ts[t].t->off < off + len; t++) {
			uint64_t lo = DCR_MAX(ts[t].t->off, off);
			uint64_t hi = DCR_MIN(ts[t].t->off + ts[t].t->len, off + len);
			if (hi <= lo)
				continue;
			uint64_t tna = lo - off >= na ? 0 : DCR_MIN(hi, off + na) - lo;
			uint64_t tnd = ndiff(ba + (lo - off), bb + (lo - off), tna) +
				       (hi - lo - tna);
			ts[t].d.changed_bytes += tnd;
			ts[t].d.changed_chunks += tnd != 0;
			/* frames are per chunk: apportion by overlap */
			ts[t].d.stored_bytes += stored[k] * (hi - lo) / len;
		}
	}
	if (fa && fa->size > fb->size) {
		/* A's bytes past B's end are removed: changed */
		d->changed_bytes += fa->size - fb->size;
		d->changed_chunks += dcr_chunk_count(fa->size - fb->size, cs);
	}
	ret = 0;
err_free:
	free(stored);
	free(ba);
	free(bb);
	return ret;
}

static void print_dstat(const struct dstat *d, int json)
{
	char b1[32], b2[32];

	if (json)
		printf("\"chunks\": %" PRIu64 ", \"changed_chunks\": %" PRIu64
		       ", \"changed_bytes\": %" PRIu64 ", \"stored_bytes\": %" PRIu64,
		       d->chunks, d->changed_chunks, d->changed_bytes, d->stored_bytes);
	else
		printf("%" PRIu64 "/%" PRIu64 " chunks, %s changed, %s stored",
		       d->changed_chunks, d->chunks,
		       dcr_format_size(d->changed_bytes, b1, sizeof(b1)),
		       dcr_format_size(d->stored_bytes, b2, sizeof(b2)));
}

static void print_diff_file(const char *path, const char *status,
			    const struct dstat *d, const struct tstat *ts,
			    size_t nts, int json, int first)
{
	if (json) {
		printf("%s\n  {\"path\": ", first ? "" : ",");
		dcr_json_str(stdout, path);
		printf(", \"status\": \"%s\", ", status);
		print_dstat(d, 1);
		if (nts)
			fputs(", \"tensors\": [", stdout);
		for (size_t t = 0; t < nts; t++) {
			printf("%s\n    {\"name\": ", t ? "," : "");
			dcr_json_str(stdout, ts[t].t->name);
			printf(", \"dtype\": ");
			dcr_json_str(stdout, ts[t].t->dtype);
			printf(", \"offset\": %" PRIu64 ", \"bytes\": %" PRIu64
			       ", \"changed_chunks\": %" PRIu64 ", \"changed_bytes\": %" PRIu64
			       ", \"stored_bytes\": %" PRIu64 "}", ts[t].t->off,
			       ts[t].t->len, ts[t].d.changed_chunks,
			       ts[t].d.changed_bytes, ts[t].d.stored_bytes);
		}
		fputs(nts ? "]}" : "}", stdout);
		return;
	}
	if (!strcmp(status, "unchanged"))
		return;
	printf("%-9s %s: ", status, path);
	print_dstat(d, 0);
	putchar('\n');
	for (size_t t = 0; t < nts; t++) {
		if (!ts[t].d.changed_bytes)
			continue;
		printf("            %s [%s]: ", ts[t].t->name, ts[t].t->dtype);
		print_dstat(&ts[t].d, 0);
		putchar('\n');
	}
}

static int cmd_diff(struct ctl *c, const char *arg_a, const char *arg_b)
{
	struct ver *va = resolve(c, arg_a), *vb = resolve(c, arg_b);
	const struct dcr_manifest *ma = va ? ver_manifest(c, va) : NULL;
	const struct dcr_manifest *mb = vb ? ver_manifest(c, vb) : NULL;
	struct dstat total = { 0 };
	int ret = 0, n = 0;

	if (!ma || !mb)
		return EXIT_FAIL;
	if (c->json)
		printf("{\"from\": %" PRIu64 ", \"to\": %" PRIu64 ", \"files\": [",
		       va->v, vb->v);
	for (uint32_t i = 0, j = 0; (i < ma->nfiles || j < mb->nfiles) && !ret;) {
		int cmp = i == ma->nfiles ? 1 : j == mb->nfiles ? -1 :
			  strcmp(ma->files[i].path, mb->files[j].path);
		const struct dcr_file *fa = cmp <= 0 ? &ma->files[i] : NULL;
		const struct dcr_file *fb = cmp >= 0 ? &mb->files[j] : NULL;
		uint32_t ia = i, ib = j;
		i += cmp <= 0;
		j += cmp >= 0;
		if (fa && fb && fa->type != fb->type) {
			/* a directory became a file or back: removed and added */
			if (cmp == 0)
				j--;
			fb = NULL;
		}
		const char *path = fb ? fb->path : fa->path;
		const char *status = !fa ? "added" : !fb ? "removed" : "changed";
		struct dstat d = { 0 };
		struct dcr_tensors tens = { NULL, 0 };
		struct tstat *ts = NULL;
		if ((fb ? fb : fa)->type == DCR_FT_DIR) {
			if (!fa || !fb)
				print_diff_file(path, status, &d, NULL, 0, c->json, !n++);
			continue;
		}
		if (!fb) {
			d.chunks = d.changed_chunks = fa->nchunks;
			d.changed_bytes = fa->size;
		} else if (fa && fa->size == fb->size && dcr_hash_eq(fa->sha256, fb->sha256)) {
			d.chunks = fb->nchunks;
			status = "unchanged";
		} else {
			file_tensors(c, vb->v, fb, ib, &tens);
			ts = calloc(tens.n ? tens.n : 1, sizeof(*ts));
			if (!ts) {
				ret = -ENOMEM;
				break;
			}
			for (size_t t = 0; t < tens.n; t++) {
				const struct dcr_tensor *tn = &tens.t[t];
				uint32_t cs = mb->chunk_size;
				ts[t].t = tn;
				ts[t].d.chunks = !tn->len ? 0 :
					(tn->off + tn->len - 1) / cs - tn->off / cs + 1;
			}
			ret = diff_file(c, va, fa, ia, vb, fb, ib, &d, ts, tens.n);
			if (ret)
				dcr_err("diff of %s: %s", path, dcr_strerror(ret));
		}
		if (!ret) {
			total.chunks += d.chunks;
			total.changed_chunks += d.changed_chunks;
			total.changed_bytes += d.changed_bytes;
			total.stored_bytes += d.stored_bytes;
			print_diff_file(path, status, &d, ts, tens.n, c->json, !n++);
		}
		free(ts);
		dcr_tensors_free(&tens);
	}
	if (c->json) {
		fputs("\n], \"total\": {", stdout);
		print_dstat(&total, 1);
		fputs("}}\n", stdout);
	} else {
		printf("total: ");
		print_dstat(&total, 0);
		putchar('\n');
	}
	return ret ? EXIT_FAIL : 0;
}

/* ------------------------------------------------------------ tag, untag */

static int cmd_tag(struct ctl *c, const char *name, const char *arg)
{
	struct ver *x;
	int ret;

	if (!(x = resolve(c, arg)))
		return EXIT_FAIL;
	if ((ret = dcr_store_put_tag(c->st, name, x->v))) {
		dcr_err("%s: cannot write tags/%s: %s", c->st->url, name, dcr_strerror(ret));
		return EXIT_FAIL;
	}
	if (c->json) {
		fputs("{\"tag\": ", stdout);
		dcr_json_str(stdout, name);
		printf(", \"version\": %" PRIu64 "}\n", x->v);
	} else {
		dcr_info("tag %s -> version %" PRIu64, name, x->v);
	}
	return 0;
}

static int cmd_untag(struct ctl *c, const char *name)
{
	uint64_t was = 0;
	int ret;

	for (size_t i = 0; i < c->ntags; i++)
		if (!strcmp(c->tags[i].name, name))
			was = c->tags[i].v;
	if ((ret = dcr_store_del_tag(c->st, name)) == -ENOENT)
		dcr_err("%s: there is no tag '%s'", c->st->url, name);
	else if (ret)
		dcr_err("%s: cannot remove tags/%s: %s", c->st->url, name, dcr_strerror(ret));
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

/* Whether some chunk of @m is built on its parent's (SAME or DELTA). */
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
		dcr_err("%s: cannot create a store: %s", st->url, dcr_strerror(ret));
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
static int check_mount(const char *mnt, dev_t *dev)
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

	if (check_mount(mnt, &dev))
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
	if (strstr(t, "\"mode\": \"none\""))
		printf("prefetch:  off\n");
	else if (json_num(t, "prefetch", "current"))
		printf("prefetch:  v%.0f done; v%.0f: %s of %s\n",
		       json_num(t, "prefetch", "done"), json_num(t, "prefetch", "current"),
		       dcr_format_size((uint64_t)json_num(t, "prefetch", "bytes_done"), b[0], sizeof(b[0])),
		       dcr_format_size((uint64_t)json_num(t, "prefetch", "bytes_total"), b[4], sizeof(b[4])));
	else
		printf("prefetch:  v%.0f done\n", json_num(t, "prefetch", "done"));
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
	if (!strcmp(a.cmd, "status")) {
		status = cmd_status(a.pos[0], a.json);
		return fflush(stdout) ? EXIT_FAIL : status;
	}
	if (dcr_store_open(a.store, &cfg, 0, &c.st))
		return EXIT_FAIL;
	/* Never report on what is not a store as if it were an empty one. */
	if (dcr_store_check(c.st, false, &c.info)) {
		status = EXIT_FAIL;
		goto out;
	}
	if (ctl_index(&c)) {
		status = EXIT_FAIL;
		goto out;
	}
	if (!strcmp(a.cmd, "log"))
		status = cmd_log(&c);
	else if (!strcmp(a.cmd, "show"))
		status = cmd_show(&c, a.pos[0]);
	else if (!strcmp(a.cmd, "diff"))
		status = cmd_diff(&c, a.pos[0], a.pos[1]);
	else if (!strcmp(a.cmd, "tag"))
		status = cmd_tag(&c, a.pos[0], a.pos[1]);
	else if (!strcmp(a.cmd, "untag"))
		status = cmd_untag(&c, a.pos[0]);
	else if (!strcmp(a.cmd, "gc"))
		status = cmd_gc(&c, &a);
	else if (!strcmp(a.cmd, "compact"))
		status = cmd_compact(&c, &a);
	else if (!strcmp(a.cmd, "warm"))
		status = cmd_warm(&c, &a, &cfg);
	else
		status = cmd_verify(&c, a.pos, a.npos, a.deep, a.quiet);
	if (fflush(stdout) || ferror(stdout)) {
		dcr_err("writing the output: %s", strerror(errno));
		status = EXIT_FAIL;
	}
out:
	ctl_free(&c);
	return status;
}
