/* SPDX-License-Identifier: MIT */
/*
 * dcrfs-commit - publish a checkpoint directory as a new dcrfs version.
 *
 * Argument parsing, the committer's own parent cache, and output. The
 * pipeline itself is dcr_commit (core/commit.c); rebuilding a missing
 * parent cache goes through the read path (store/reader.c).
 *
 * Commit cache layout (default ~/.cache/dcrfs/commit/<store id>/):
 *   lock      flock()ed for the whole run: one commit per cache at a time
 *   state     "version N" - the version that tree/ holds; absent = unknown
 *   tree/     the parent version, materialized
 *   stage/    the version being committed (becomes tree/ on success)
 *   reader/   scratch catalog/cache used only while rebuilding tree/
 */
#include "config.h"

#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chunk.h"
#include "commit.h"
#include "common.h"
#include "fileio.h"
#include "hash.h"
#include "manifest.h"
#include "reader.h"
#include "store.h"

#define EXIT_USAGE 2

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
"      --allow-empty      publish a tree without regular files (refused\n"
"                         otherwise: it would empty every mount's latest)\n"
"  -p, --parent N         diff against version N (default: the latest)\n"
"  -t, --tag NAME         also point tag NAME at the new version\n"
"  -f, --full             store every chunk in full (an anchor version)\n"
"  -c, --chunk-size SIZE  chunk size, power of two, 4K..64M (default: the\n"
"                         parent's, else 1M)\n"
"  -j, --jobs N           encoder threads (default: number of CPUs)\n"
"  -C, --cache-dir DIR    the committer's cache of the last committed tree\n"
"                         (default: ${XDG_CACHE_HOME:-~/.cache}/dcrfs/commit/ID)\n"

"      --no-copy          do not copy DIR into the cache: the next commit diffs\n"
"                         against DIR itself, which must then stay unchanged\n"
"                         (checked chunk by chunk; if it changed or is gone,\n"
"                         the parent is rebuilt from the store)\n"
"      --no-cache         keep no copy of the committed tree (the next commit\n"
"                         rebuilds its parent from the store)\n"
"      --allow-nonfinite  commit NaN and Inf values in float tensors of\n"
"                         safetensors files (default: refuse, publish nothing)\n"
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
	int init;
	int allow_empty;
	int allow_nonfinite;
	uint32_t chunk_size;
	int jobs;
	int quiet;
	int verbose;
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
		{ "init", no_argument, NULL, 'I' },
		{ "allow-empty", no_argument, NULL, 'E' },
		{ "allow-nonfinite", no_argument, NULL, 'F' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	uint64_t v;
	int c;

	a->store = getenv("DCRFS_STORE");
	while ((c = getopt_long(argc, argv, "s:p:t:fc:j:C:qvhV", longopts, NULL)) != -1) {
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
			a->tag = optarg;
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
		case 'I':
			a->init = 1;
			break;
		case 'E':
			a->allow_empty = 1;
			break;
		case 'F':
			a->allow_nonfinite = 1;
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
	a->dir = argv[optind];
	if (!a->store) {
		fprintf(stderr, "dcrfs-commit: no store given (use --store URL or set DCRFS_STORE)\n");
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------ helpers */

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

static int rm_rf(const char *path)
{
	struct stat sb;

	if (lstat(path, &sb) < 0)
		return errno == ENOENT ? 0 : -errno;
	return nftw(path, rm_cb, 32, FTW_DEPTH | FTW_PHYS) ? -errno : 0;
}

/* The cache directory's length is checked in main, so this cannot truncate. */
static void path_join(char *buf, size_t cap, const char *a, const char *b)
{
	if ((size_t)snprintf(buf, cap, "%s/%s", a, b) >= cap)
		abort();
}

/*
 * The state file: "version N" and, after a --no-copy commit, "source PATH"
 * (the committed directory, to be used as the next parent in place of
 * tree/). Returns N, 0 if unknown.
 */
static uint64_t read_state(const char *cache, char *source, size_t cap)
{
	char path[PATH_MAX], line[PATH_MAX + 16];
	uint64_t v = 0;

	source[0] = 0;
	path_join(path, sizeof(path), cache, "state");
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		if (!strncmp(line, "version ", 8))
			dcr_parse_u64(line + 8, &v);
		else if (!strncmp(line, "source /", 8) && strlen(line + 7) < cap)
			memcpy(source, line + 7, strlen(line + 7) + 1);
	}
	fclose(f);
	return v;
}

static int write_state(const char *cache, uint64_t v, const char *source)
{
	char path[PATH_MAX], tmp[PATH_MAX];

	path_join(path, sizeof(path), cache, "state");
	path_join(tmp, sizeof(tmp), cache, "state.tmp");
	FILE *f = fopen(tmp, "w");
	if (!f)
		return -errno;
	fprintf(f, "version %" PRIu64 "\n", v);
	if (source)
		fprintf(f, "source %s\n", source);
	if (fflush(f) || fsync(fileno(f))) {
		int e = -errno;
		fclose(f);
		return e;
	}
	if (fclose(f))
		return -errno;
	return rename(tmp, path) < 0 ? -errno : 0;
}

static void clear_state(const char *cache)
{
	char path[PATH_MAX];

	path_join(path, sizeof(path), cache, "state");
	unlink(path);
}

static int default_cache_dir(const struct dcr_store *st, char *buf, size_t cap)
{
	uint8_t h[DCR_HASH_LEN];
	char hex[DCR_HASH_HEX_LEN + 1];
	const char *xdg = getenv("XDG_CACHE_HOME");
	const char *home = getenv("HOME");

	dcr_sha256(st->url, strlen(st->url), h);
	dcr_hash_hex(h, hex);
	hex[16] = 0;
	if (xdg && *xdg)
		snprintf(buf, cap, "%s/dcrfs/commit/%s", xdg, hex);
	else if (home && *home)
		snprintf(buf, cap, "%s/.cache/dcrfs/commit/%s", home, hex);
	else
		return -ENOENT;
	return 0;
}

/* ------------------------------------------------- rebuilding a parent */

static int write_entry(struct dcr_reader *r, uint64_t v, uint32_t idx,
		       const struct dcr_entry *e, const char *path, uint8_t *buf,
		       size_t bufsz)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	int ret = 0;

	if (fd < 0)
		return -errno;
	for (uint64_t off = 0; off < e->size;) {
		ssize_t n = dcr_reader_read(r, v, idx, off, buf, bufsz);
		if (n <= 0) {
			ret = n < 0 ? (int)n : -EIO;
			break;
		}
		if ((ret = dcr_write_full(fd, buf, (size_t)n)))
			break;
		off += (uint64_t)n;
	}
	if (close(fd) < 0 && !ret)
		ret = -errno;
	return ret;
}

/* Materialize version @v of @st into @cache/tree through the read path. */
static int rebuild_tree(struct dcr_store *st, const char *cache, uint64_t v,
			int quiet)
{
	char tree[PATH_MAX], scratch[PATH_MAX], path[PATH_MAX * 2];
	struct dcr_reader *r = NULL;
	const struct dcr_version_info *vi;
	int ret;

	if (!quiet)
		dcr_info("building the parent tree (version %" PRIu64 ") from the store into %s",
			 v, cache);
	clear_state(cache);
	path_join(tree, sizeof(tree), cache, "tree");
	path_join(scratch, sizeof(scratch), cache, "reader");
	if ((ret = rm_rf(tree)) || (ret = rm_rf(scratch)) ||
	    (ret = dcr_mkdir_p(tree, 0755))) {
		dcr_err("%s: %s", cache, dcr_strerror(ret));
		return ret;
	}
	struct dcr_reader_opts ro = { .cache_dir = scratch, .cache_size = (uint64_t)1 << 30 };
	if ((ret = dcr_reader_open(st, &ro, &r)))
		goto err_rm_scratch;
	if ((ret = dcr_reader_refresh(r, NULL)))
		goto err_close;
	if ((ret = dcr_reader_version(r, v, &vi))) {
		dcr_err("%s: version %" PRIu64 " is missing or unreadable", st->url, v);
		goto err_close;
	}
	size_t bufsz = 4u << 20;
	uint8_t *buf = malloc(bufsz);
	if (!buf) {
		ret = -ENOMEM;
		goto err_close;
	}
	for (uint32_t i = 1; i < vi->nentries && !ret; i++) {
		const struct dcr_entry *e = &vi->entries[i];
		snprintf(path, sizeof(path), "%s/%s", tree, e->path);
		if (e->type == DCR_FT_DIR)
			ret = mkdir(path, 0755) < 0 && errno != EEXIST ? -errno : 0;
		else
			ret = write_entry(r, v, i, e, path, buf, bufsz);
		if (ret)
			dcr_err("%s: %s", path, dcr_strerror(ret));
	}
	free(buf);
	if (!ret)
		ret = write_state(cache, v, NULL);
err_close:
	dcr_reader_close(r);
err_rm_scratch:
	rm_rf(scratch);
	return ret;
}

/* ------------------------------------------------------------ progress */

struct progress {
	int tty;
	int64_t start;
};

static void on_progress(void *arg, const struct dcr_commit_progress *p)
{
	struct progress *pg = arg;
	char done[32], total[32], rate_s[32], up[32], eta[32] = "";

	if (!pg->tty)
		return;
	double secs = (double)(dcr_mono_ns() - pg->start) / 1e9;
	double rate = secs > 0 ? (double)p->bytes_done / secs : 0;
	if (rate > 0 && p->bytes_done < p->bytes_total) {
		double left = (double)(p->bytes_total - p->bytes_done) / rate;
		snprintf(eta, sizeof(eta), ", ETA %d:%02d", (int)left / 60,
			 (int)left % 60);
	}
	fprintf(stderr, "\r\033[K%s: %s / %s (%3.0f%%), %s/s, %s uploaded%s",
		p->phase, dcr_format_size(p->bytes_done, done, sizeof(done)),
		dcr_format_size(p->bytes_total, total, sizeof(total)),
		p->bytes_total ? 100.0 * (double)p->bytes_done / (double)p->bytes_total : 100.0,
		dcr_format_size((uint64_t)rate, rate_s, sizeof(rate_s)),
		dcr_format_size(p->bytes_uploaded, up, sizeof(up)), eta);
}

/* ------------------------------------------------------------- store */

/*
 * Open the store and make sure it is one: with --init, create it if
 * there is none; without, a path or prefix that holds no store is an
 * error, so a mistyped --store never starts a new store silently.
 */
static int open_store(const struct args *a, struct dcr_store **out)
{
	struct dcr_store_info info;
	struct dcr_store *st;
	int ret;

	ret = dcr_store_open(a->store, NULL, a->init ? DCR_OPEN_CREATE : 0, &st);
	if (ret) {
		if (ret == -ENOENT && !a->init)
			dcr_err("%s: no store there; create one with 'dcrfs-commit "
				"--init' or 'dcrfs-ctl init'", a->store);
		return ret;
	}
	ret = a->init ? dcr_store_init(st, &info) : dcr_store_identify(st, &info);
	if (ret == 0 && a->init) {
		dcr_info("%s: created a new store (id %s)", st->url, info.id);
	} else if (ret == -ENOENT) {
		dcr_err("%s is not a dcrfs store (it has no %s marker and no "
			"versions); create one with 'dcrfs-commit --init' or "
			"'dcrfs-ctl init'", st->url, DCR_STORE_MARKER);
	} else if (ret && ret != -EEXIST) {
		dcr_err("%s: cannot tell whether this is a dcrfs store: %s",
			st->url, dcr_strerror(ret));
	} else {
		ret = 0;
	}
	if (ret) {
		dcr_store_close(st);
		return ret;
	}
	*out = st;
	return 0;
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
	struct args a = { 0 };
	struct dcr_store *st = NULL;
	struct dcr_manifest pm = { 0 };
	struct dcr_commit_result res;
	char cache[PATH_MAX], tree[PATH_MAX], stage[PATH_MAX], lockp[PATH_MAX];
	int ret, lock_fd = -1, exit_code = 1;

	dcr_log_set_prog("dcrfs-commit");
	if (parse_args(argc, argv, &a)) {
		fprintf(stderr, "Try 'dcrfs-commit --help' for more information.\n");
		return EXIT_USAGE;
	}
	dcr_log_set_level(a.verbose ? DCR_LOG_DEBUG : a.quiet ? DCR_LOG_WARN : DCR_LOG_INFO);

	struct stat sb;
	if (stat(a.dir, &sb) < 0 || !S_ISDIR(sb.st_mode)) {
		dcr_err("%s: %s", a.dir, stat(a.dir, &sb) < 0 ? strerror(errno) : "not a directory");
		return 1;
	}
	if ((ret = open_store(&a, &st)))
		return 1;

	uint64_t latest;
	if ((ret = dcr_store_latest(st, &latest))) {
		dcr_err("%s: cannot list versions: %s", st->url, dcr_strerror(ret));
		goto out_close;
	}
	uint64_t parent = a.has_parent ? a.parent : latest;
	if (parent && (ret = dcr_store_get_manifest(st, parent, &pm))) {
		if (ret == -ENOENT)
			dcr_err("%s: version %" PRIu64 " does not exist (latest is %" PRIu64 ")",
				st->url, parent, latest);
		goto out_close;
	}

	/* The committer's cache: parent tree in, new tree out. */
	if (a.cache_dir)
		snprintf(cache, sizeof(cache), "%s", a.cache_dir);
	else if (default_cache_dir(st, cache, sizeof(cache))) {
		dcr_err("no cache directory: set HOME or XDG_CACHE_HOME, or pass --cache-dir");
		goto out_free;
	}
	if (strlen(cache) > PATH_MAX - 64) {
		dcr_err("%s: cache directory path too long", cache);
		goto out_free;
	}
	if ((ret = dcr_mkdir_p(cache, 0700))) {
		dcr_err("%s: %s", cache, dcr_strerror(ret));
		goto out_free;
	}
	path_join(lockp, sizeof(lockp), cache, "lock");
	lock_fd = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) < 0) {
		if (lock_fd >= 0 && errno == EWOULDBLOCK) {
			dcr_info("waiting for another dcrfs-commit using %s", cache);
			if (flock(lock_fd, LOCK_EX) == 0)
				goto locked;
		}
		dcr_err("%s: %s", lockp, strerror(errno));
		goto out_free;
	}
locked:
	path_join(tree, sizeof(tree), cache, "tree");
	path_join(stage, sizeof(stage), cache, "stage");

	struct progress pg = { .tty = !a.quiet && isatty(STDERR_FILENO), .start = dcr_mono_ns() };
	struct dcr_commit_opts o = {
		.parent = parent,
		.parent_manifest = parent ? &pm : NULL,
		.parent_dir = tree,
		.stage_dir = a.no_cache || a.no_copy ? NULL : stage,
		.full = a.full,
		.allow_empty = a.allow_empty,
		.allow_nonfinite = a.allow_nonfinite,
		.chunk_size = a.chunk_size,
		.jobs = a.jobs,
		.progress = on_progress,
		.progress_arg = &pg,
	};
	char source[PATH_MAX];
	struct stat ssb;
	uint64_t have = read_state(cache, source, sizeof(source));
	char *dir_real = realpath(a.dir, NULL);
	if (source[0] && dir_real && !strcmp(source, dir_real)) {
		/* A directory cannot be its own parent: it may have been overwritten. */
		dcr_warn("%s is the directory version %" PRIu64 " was committed from with "
			 "--no-copy, so it cannot serve as the parent; rebuilding the parent "
			 "from the store (use a new directory per checkpoint with --no-copy)",
			 a.dir, have);
		source[0] = 0;
		have = 0;
	}
	free(dir_real);
	if (parent && have == parent && source[0] &&
	    stat(source, &ssb) == 0 && S_ISDIR(ssb.st_mode)) {
		/* A --no-copy commit left its source as the parent. */
		o.parent_dir = source;
	} else if (parent && (have != parent || source[0]) &&
		   (ret = rebuild_tree(st, cache, parent, a.quiet))) {
		goto err_rebuild;
	}
	for (int attempt = 0;; attempt++) {
		if (o.stage_dir && ((ret = rm_rf(stage)) || (ret = dcr_mkdir_p(stage, 0755)))) {
			/* Only an optimisation for the next commit: go on without it. */
			dcr_warn("cannot keep a copy of the committed tree in %s: %s", stage,
				 dcr_strerror(ret));
			o.stage_dir = NULL;
		}
		ret = dcr_commit(st, a.dir, &o, &res);
		if (pg.tty)
			fputs("\r\033[K", stderr);
		if (ret != -ESTALE || attempt > 0 || !parent)
			break;
		dcr_warn("the parent copy in %s is stale; rebuilding it from the store",
			 o.parent_dir);
		if ((ret = rebuild_tree(st, cache, parent, a.quiet)))
			goto err_rebuild;
		o.parent_dir = tree;
	}
	if (ret) {
		dcr_err("commit of %s failed: %s; nothing was published", a.dir, dcr_strerror(ret));
		rm_rf(stage);
		goto out_free;
	}

	/* The new version is published: print it before anything else can fail. */
	printf("%" PRIu64 "\n", res.version);
	fflush(stdout);
	exit_code = 0;

	if (a.no_copy) {
		char *src = realpath(a.dir, NULL);
		clear_state(cache);
		rm_rf(tree);
		if (!src || write_state(cache, res.version, src))
			dcr_warn("%s: could not record %s for the next commit; it will rebuild its parent",
				 cache, a.dir);
		free(src);
	} else if (!a.no_cache && res.staged) {
		/* state first: a crash in between leaves "unknown", never a lie. */
		clear_state(cache);
		if (rm_rf(tree) || rename(stage, tree) < 0 || write_state(cache, res.version, NULL))
			dcr_warn("%s: could not keep the committed tree (%s); the next commit will rebuild it",
				 cache, strerror(errno));
	} else {
		clear_state(cache);
		rm_rf(tree);
		rm_rf(stage);
	}
	if (a.tag && (ret = dcr_store_put_tag(st, a.tag, res.version))) {
		dcr_err("version %" PRIu64 " was published but tag '%s' could not be set: %s",
			res.version, a.tag, dcr_strerror(ret));
		exit_code = 1;
	}
	if (!a.quiet) {
		char in[32], up[32];
		double secs = (double)(dcr_mono_ns() - pg.start) / 1e9;
		dcr_info("version %" PRIu64 " (parent %" PRIu64 "): %" PRIu64 " files, %s read, "
			 "%s uploaded in %" PRIu32 " packs + %" PRIu64 " B manifest; chunks: "
			 "%" PRIu64 " unchanged, %" PRIu64 " delta, %" PRIu64 " full; %.2f s",
			 res.version, parent, res.files,
			 dcr_format_size(res.bytes_in, in, sizeof(in)),
			 dcr_format_size(res.bytes_packed, up, sizeof(up)), res.packs,
			 res.manifest_len, res.chunks_same, res.chunks_delta,
			 res.chunks_full, secs);
	}
	goto out_free;

err_rebuild:
	dcr_err("commit of %s failed: cannot rebuild its parent, version %" PRIu64
		", in %s (%s); nothing was published. Free space there or pass "
		"--cache-dir", a.dir, parent, cache, dcr_strerror(ret));
out_free:
	if (lock_fd >= 0)
		close(lock_fd);
	dcr_manifest_free(&pm);
out_close:
	dcr_store_close(st);
	return exit_code;
}
