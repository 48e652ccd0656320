/* SPDX-License-Identifier: MIT */
/*
 * ccache.c - the committer's cache (see ccache.h). Rebuilding a missing
 * parent tree goes through the read path (read/reader.c).
 */
#include "config.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ccache.h"
#include "common.h"
#include "fileio.h"
#include "hash.h"
#include "manifest.h"
#include "reader.h"
#include "sview.h"

struct dcr_ccache {
	struct dcr_store *st;
	bool quiet;
	int lock_fd;
	char dir[PATH_MAX], tree[PATH_MAX], stage[PATH_MAX];
	char source[PATH_MAX]; /* a no-copy parent, when used */
	char from[PATH_MAX];   /* the directory the cached version came from */
};

/* "@a/@b" into @buf (dcr_path_join_buf): 0, or -ENAMETOOLONG, logged
 * (dcr_ccache_open bounds the cache directory's length, so with the
 * short names below it always fits). */
static int path_join(char *buf, size_t cap, const char *a, const char *b)
{
	if (dcr_path_join_buf(buf, cap, a, b)) {
		dcr_err("%s/%s: path too long", a, b);
		return DCR_ERR(-ENAMETOOLONG);
	}
	return 0;
}

/*
 * The state file: "version N", "manifest HEX" (the SHA-256 of the
 * manifest object version N was published or rebuilt from: a version's
 * identity, DESIGN.md 7a; absent in caches of older dcrfs) and, after a
 * no-copy commit, "source PATH" (the committed directory, to be used as
 * the next parent in place of tree/), or, after a commit copied into
 * tree/ from a directory, "from PATH" (only to tell whether the next
 * commit is of the same directory). Either path goes into @from (cap
 * PATH_MAX); "source" also into @source. Returns N, 0 if unknown;
 * *@has_mhash says whether @mhash was read.
 */
static uint64_t read_state(const char *cache, char *source, char *from,
			   uint8_t mhash[DCR_HASH_LEN], bool *has_mhash)
{
	char path[PATH_MAX], line[PATH_MAX + 16];
	uint64_t v = 0;

	source[0] = from[0] = 0;
	*has_mhash = false;
	if (path_join(path, sizeof(path), cache, "state"))
		return 0;
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		if (!strncmp(line, "version ", 8)) {
			dcr_parse_u64(line + 8, &v);
		} else if (!strncmp(line, "manifest ", 9)) {
			*has_mhash = dcr_hash_unhex(line + 9, mhash) == 0;
		} else if (!strncmp(line, "source /", 8) && strlen(line + 7) < PATH_MAX) {
			memcpy(source, line + 7, strlen(line + 7) + 1);
			memcpy(from, line + 7, strlen(line + 7) + 1);
		} else if (!strncmp(line, "from /", 6) && strlen(line + 5) < PATH_MAX) {
			memcpy(from, line + 5, strlen(line + 5) + 1);
		}
	}
	fclose(f);
	return v;
}

/* Write the state: version @v, manifest @mhash (unless NULL), and @dir
 * as "source" (@source: no-copy) or as "from" (tree/ holds the
 * version), unless NULL. */
static int write_state(const char *cache, uint64_t v, const uint8_t *mhash,
		       const char *dir, bool source)
{
	char path[PATH_MAX], tmp[PATH_MAX], hex[DCR_HASH_HEX_LEN + 1];

	int ret;

	if ((ret = path_join(path, sizeof(path), cache, "state")) ||
	    (ret = path_join(tmp, sizeof(tmp), cache, "state.tmp")))
		return ret;
	FILE *f = fopen(tmp, "w");
	if (!f)
		return -errno;
	fprintf(f, "version %" PRIu64 "\n", v);
	if (mhash) {
		dcr_hash_hex(mhash, hex);
		fprintf(f, "manifest %s\n", hex);
	}
	if (dir)
		fprintf(f, "%s %s\n", source ? "source" : "from", dir);
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

	if (!path_join(path, sizeof(path), cache, "state"))
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

/*
 * The default caches live side by side, one per store URL, under
 * .../dcrfs/commit/. Each use touches its lock file; a sibling whose lock
 * file is older than DCR_CCACHE_STALE_DAYS, and that nobody holds, is a
 * store no longer committed to (a finished run, a mistyped URL from
 * before stores were created explicitly): it is removed, with a line
 * saying so. Explicit --cache-dir directories are never swept.
 */
static void sweep_stale(const char *self)
{
	char root[PATH_MAX], path[PATH_MAX + 300], lockp[PATH_MAX + 310];
	const char *slash = strrchr(self, '/');
	time_t cutoff = time(NULL) - (time_t)DCR_CCACHE_STALE_DAYS * 86400;
	struct dirent *e;
	struct stat sb;
	DIR *d;

	if (!slash || (size_t)(slash - self) >= sizeof(root))
		return;
	memcpy(root, self, (size_t)(slash - self));
	root[slash - self] = '\0';
	if (!(d = opendir(root)))
		return;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.' || strcmp(e->d_name, slash + 1) == 0)
			continue;
		if (dcr_path_join_buf(path, sizeof(path), root, e->d_name) ||
		    dcr_path_join_buf(lockp, sizeof(lockp), path, "lock"))
			continue; /* too long to be one of ours */
		if (stat(lockp, &sb) < 0 || sb.st_mtime > cutoff)
			continue;
		int fd = open(lockp, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			int ret = dcr_rm_rf(path);
			if (ret)
				dcr_warn("%s: cannot remove a stale commit cache: %s",
					 path, dcr_strerror(ret));
			else
				dcr_info("removed %s, the commit cache of a store not "
					 "committed to for %d days or more", path,
					 DCR_CCACHE_STALE_DAYS);
		}
		close(fd);
	}
	closedir(d);
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
		size_t n = (size_t)DCR_MIN((uint64_t)bufsz, e->size - off);
		if ((ret = dcr_reader_read_exact(r, v, DCR_READER_ANY_TREE, idx, off,
						 buf, n)) ||
		    (ret = dcr_write_full(fd, buf, n)))
			break;
		off += n;
	}
	if (close(fd) < 0 && !ret)
		ret = -errno;
	return ret;
}

/* Materialize version @v of @st into @cache/tree through the read path. */
static int rebuild_tree(struct dcr_store *st, const char *cache, uint64_t v,
			const uint8_t *mhash, int quiet)
{
	char tree[PATH_MAX], scratch[PATH_MAX], path[PATH_MAX * 2];
	struct dcr_reader *r = NULL;
	const struct dcr_version_info *vi;
	int ret;

	if (!quiet)
		dcr_info("building the parent tree (version %" PRIu64 ") from the store into %s",
			 v, cache);
	clear_state(cache);
	if ((ret = path_join(tree, sizeof(tree), cache, "tree")) ||
	    (ret = path_join(scratch, sizeof(scratch), cache, "reader")))
		return ret;
	if ((ret = dcr_rm_rf(tree)) || (ret = dcr_rm_rf(scratch)) ||
	    (ret = dcr_mkdir_p(tree, 0755))) {
		dcr_err("%s: %s", cache, dcr_strerror(ret));
		return ret;
	}
	struct dcr_reader_opts ro = { .cache_dir = scratch, .cache_size = (uint64_t)1 << 30 };
	if ((ret = dcr_reader_open(st, &ro, &r)))
		goto err_rm_scratch;
	/* a throwaway reader on a view: v and what its encoding is built
	 * on are the manifests fetched, not every version's */
	struct dcr_sview sv;
	if ((ret = dcr_sview_load(&sv, st, 0)))
		goto err_close;
	ret = dcr_reader_seed(r, &sv, v);
	dcr_sview_free(&sv);
	if (ret)
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
		if ((ret = dcr_path_join_buf(path, sizeof(path), tree, e->path))) {
			dcr_err("%s/%s: path too long", tree, e->path);
			break;
		}
		if (e->type == DCR_FT_DIR)
			ret = mkdir(path, 0755) < 0 && errno != EEXIST ? -errno : 0;
		else
			ret = write_entry(r, v, i, e, path, buf, bufsz);
		if (ret)
			dcr_err("%s: %s", path, dcr_strerror(ret));
	}
	free(buf);
	if (!ret)
		ret = write_state(cache, v, mhash, NULL, false);
err_close:
	dcr_reader_close(r);
err_rm_scratch:
	dcr_rm_rf(scratch);
	return ret;
}


int dcr_ccache_open(struct dcr_store *st, const char *dir, bool quiet,
		    struct dcr_ccache **out)
{
	char lockp[PATH_MAX];
	int ret;
	struct dcr_ccache *cc = calloc(1, sizeof(*cc));

	if (!cc)
		return DCR_ERR(-ENOMEM);
	cc->st = st;
	cc->quiet = quiet;
	cc->lock_fd = -1;
	if (dir) {
		snprintf(cc->dir, sizeof(cc->dir), "%s", dir);
	} else if (default_cache_dir(st, cc->dir, sizeof(cc->dir))) {
		dcr_err("no cache directory: set HOME or XDG_CACHE_HOME, or pass --cache-dir");
		ret = DCR_ERR(-ENOENT);
		goto err_free;
	}
	if (strlen(cc->dir) > PATH_MAX - 64) {
		dcr_err("%s: cache directory path too long", cc->dir);
		ret = DCR_ERR(-ENAMETOOLONG);
		goto err_free;
	}
	if ((ret = dcr_mkdir_p(cc->dir, 0700))) {
		dcr_err("%s: %s", cc->dir, dcr_strerror(ret));
		goto err_free;
	}
	if ((ret = path_join(lockp, sizeof(lockp), cc->dir, "lock")) ||
	    (ret = path_join(cc->tree, sizeof(cc->tree), cc->dir, "tree")) ||
	    (ret = path_join(cc->stage, sizeof(cc->stage), cc->dir, "stage")))
		goto err_free;
	cc->lock_fd = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (cc->lock_fd >= 0 && flock(cc->lock_fd, LOCK_EX | LOCK_NB) < 0 &&
	    errno == EWOULDBLOCK) {
		dcr_info("waiting for another dcrfs-commit using %s", cc->dir);
		if (flock(cc->lock_fd, LOCK_EX) == 0)
			goto locked;
	} else if (cc->lock_fd >= 0) {
		goto locked;
	}
	ret = DCR_ERR(-errno);
	dcr_err("%s: %s", lockp, dcr_strerror(ret));
	goto err_free;
locked:
	futimens(cc->lock_fd, NULL); /* last use, for sweep_stale */
	if (!dir)
		sweep_stale(cc->dir);
	*out = cc;
	return 0;
err_free:
	if (cc->lock_fd >= 0)
		close(cc->lock_fd);
	free(cc);
	return ret;
}

void dcr_ccache_close(struct dcr_ccache *cc)
{
	if (!cc)
		return;
	if (cc->lock_fd >= 0)
		close(cc->lock_fd);
	free(cc);
}

bool dcr_ccache_copy_wanted(struct dcr_ccache *cc, const char *committing)
{
	uint8_t h[DCR_HASH_LEN];
	bool has_h;

	if (!committing)
		return true;
	read_state(cc->dir, cc->source, cc->from, h, &has_h);
	char *dir_real = realpath(committing, NULL);
	bool same = dir_real && cc->from[0] && !strcmp(dir_real, cc->from);
	free(dir_real);
	return same;
}

int dcr_ccache_parent(struct dcr_ccache *cc, uint64_t parent,
		      const uint8_t *mhash, const char *committing,
		      bool rebuild, const char **dir)
{
	struct stat ssb;
	char *source = cc->source;
	uint8_t had[DCR_HASH_LEN];
	bool has_had;
	uint64_t have = read_state(cc->dir, source, cc->from, had, &has_had);
	char *dir_real = committing ? realpath(committing, NULL) : NULL;
	int ret;

	if (have && have == parent && has_had && mhash &&
	    !dcr_hash_eq(had, mhash)) {
		/* The number was reused in the store (a version deleted and
		 * committed again, a store recreated): these are not the
		 * parent's bytes, whatever their number says. */
		char a[DCR_HASH_HEX_LEN + 1], b[DCR_HASH_HEX_LEN + 1];

		dcr_hash_hex(had, a);
		dcr_hash_hex(mhash, b);
		dcr_warn("%s: the commit cache holds version %" PRIu64 " built "
			 "from manifest %.12s.., but the store's version %"
			 PRIu64 " is manifest %.12s..: it changed in the store; "
			 "dropping the cached copy and rebuilding the parent",
			 cc->dir, have, a, parent, b);
		clear_state(cc->dir);
		dcr_rm_rf(cc->tree);
		source[0] = 0;
		have = 0;
	}

	if (!rebuild && source[0] && dir_real && !strcmp(source, dir_real)) {
		/* A directory cannot be its own parent: it may have been overwritten. */
		dcr_warn("%s is the directory version %" PRIu64 " was committed from without "
			 "a copy in the cache, so it cannot serve as the parent; rebuilding "
			 "the parent from the store (this happens once: later commits of the "
			 "same directory keep a copy, unless --no-copy is given)",
			 committing, have);
		source[0] = 0;
		have = 0;
	}
	free(dir_real);
	if (!rebuild && have == parent && source[0]) {
		if (stat(source, &ssb) == 0 && S_ISDIR(ssb.st_mode)) {
			/* A no-copy commit left its source as the parent. */
			*dir = source;
			return 0;
		}
		dcr_warn("%s, the directory version %" PRIu64 " was committed from, is gone; "
			 "rebuilding the parent from the store (keep each checkpoint "
			 "until the next one is committed, or pass --copy)", source, have);
	}
	if (rebuild || have != parent || source[0]) {
		if (rebuild)
			dcr_warn("the parent copy is stale; rebuilding it from the store");
		if ((ret = rebuild_tree(cc->st, cc->dir, parent, mhash,
					cc->quiet))) {
			dcr_err("cannot rebuild the parent, version %" PRIu64 ", in %s (%s); "
				"nothing was published. Free space there or choose another "
				"cache directory", parent, cc->dir, dcr_strerror(ret));
			return ret;
		}
	}
	*dir = cc->tree;
	return 0;
}

const char *dcr_ccache_stage(struct dcr_ccache *cc)
{
	int ret;

	if ((ret = dcr_rm_rf(cc->stage)) || (ret = dcr_mkdir_p(cc->stage, 0755))) {
		/* Only an optimisation for the next commit: go on without it. */
		dcr_warn("cannot keep a copy of the committed tree in %s: %s", cc->stage,
			 dcr_strerror(ret));
		return NULL;
	}
	return cc->stage;
}

void dcr_ccache_discard(struct dcr_ccache *cc)
{
	dcr_rm_rf(cc->stage);
}

void dcr_ccache_done(struct dcr_ccache *cc, uint64_t v,
		     const uint8_t *mhash, enum dcr_ccache_keep keep,
		     const char *source)
{
	char *src = source ? realpath(source, NULL) : NULL;

	if (keep == DCR_CCACHE_SOURCE) {
		clear_state(cc->dir);
		dcr_rm_rf(cc->tree);
		if (!src || write_state(cc->dir, v, mhash, src, true))
			dcr_warn("%s: could not record %s for the next commit; it will rebuild its parent",
				 cc->dir, source);
	} else if (keep == DCR_CCACHE_STAGED) {
		/* state first: a crash in between leaves "unknown", never a lie. */
		clear_state(cc->dir);
		if (dcr_rm_rf(cc->tree) || rename(cc->stage, cc->tree) < 0 ||
		    write_state(cc->dir, v, mhash, src, false))
			dcr_warn("%s: could not keep the committed tree (%s); the next commit will rebuild it",
				 cc->dir, strerror(errno));
	} else {
		clear_state(cc->dir);
		dcr_rm_rf(cc->tree);
		dcr_rm_rf(cc->stage);
	}
	free(src);
}
