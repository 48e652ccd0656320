/* SPDX-License-Identifier: MIT */
/*
 * commit_scan.c - the tree a commit reads: listed without following a
 * symlink, and each listed file opened again as the scan saw it
 * (commit_int.h).
 */
#include "config.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "commit.h"
#include "commit_int.h"
#include "common.h"
#include "fileio.h"
#include "manifest.h"

/* ------------------------------------------------------------- scan */

struct scan {
	const char *root;
	size_t root_len;
	struct dcr_commit_source *src;
	size_t n, cap;
};

static int scan_add(struct scan *s, const char *rel, const struct stat *sb)
{
	if (s->n == UINT32_MAX - 1)
		return DCR_ERR(-EFBIG);
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		struct dcr_commit_source *n = realloc(s->src, cap * sizeof(*n));
		if (!n)
			return DCR_ERR(-ENOMEM);
		s->src = n;
		s->cap = cap;
	}
	struct dcr_commit_source *c = &s->src[s->n];
	memset(c, 0, sizeof(*c));
	c->dir = S_ISDIR(sb->st_mode);
	c->mode = sb->st_mode & 07777;
	c->size = c->dir ? 0 : (uint64_t)sb->st_size;
	c->mtime_ns = (int64_t)sb->st_mtim.tv_sec * 1000000000 + sb->st_mtim.tv_nsec;
	c->dev = (uint64_t)sb->st_dev;
	c->ino = (uint64_t)sb->st_ino;
	if (!(c->path = strdup(rel)))
		return DCR_ERR(-ENOMEM);
	if (!c->dir && !(c->file = dcr_path_join(s->root, rel))) {
		free((char *)c->path);
		return DCR_ERR(-ENOMEM);
	}
	c->root_len = c->dir ? 0 : s->root_len;
	s->n++;
	return 0;
}

void dcr_commit_sources_free(struct dcr_commit_source *src, size_t n)
{
	for (size_t i = 0; src && i < n; i++) {
		free((char *)src[i].path);
		free((char *)src[i].file);
	}
	free(src);
}

static const char *ftype_name(mode_t m)
{
	if (S_ISLNK(m))
		return "a symbolic link";
	if (S_ISCHR(m) || S_ISBLK(m))
		return "a device";
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISSOCK(m))
		return "a socket";
	return "not a regular file or directory";
}

/* Whether @sb is the object @dev/@ino (what the scan saw). */
static bool same_object(const struct stat *sb, uint64_t dev, uint64_t ino)
{
	return (uint64_t)sb->st_dev == dev && (uint64_t)sb->st_ino == ino;
}

/*
 * List the directory @dfd (owned: closed here), @rel below the root,
 * and everything below it. Subdirectories are opened from their parent's
 * fd without following a symlink and must be what fstatat saw, so that
 * a directory swapped for a symlink while the tree is scanned lists
 * nothing outside the tree.
 */
static int scan_dir(struct scan *s, int dfd, const char *rel)
{
	char path[PATH_MAX];
	int ret = 0;

	snprintf(path, sizeof(path), "%s%s%s", s->root, *rel ? "/" : "", rel);
	DIR *d = fdopendir(dfd);
	if (!d) {
		ret = DCR_ERR(-errno);
		dcr_err("%s: %s", path, dcr_strerror(ret));
		close(dfd);
		return ret;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char child[PATH_MAX];
		int n = snprintf(child, sizeof(child), "%s%s%s", rel,
				 *rel ? "/" : "", de->d_name);
		if (n < 0 || (size_t)n >= sizeof(child) ||
		    !dcr_path_valid(child, (size_t)n)) {
			dcr_err("%s/%s: path too long or not representable",
				path, de->d_name);
			ret = DCR_ERR(-ENAMETOOLONG);
			break;
		}
		struct stat sb;
		if (fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
			ret = DCR_ERR(-errno);
			dcr_err("%s/%s: %s", path, de->d_name, dcr_strerror(ret));
			break;
		}
		if (!S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode)) {
			dcr_err("%s/%s is %s; only regular files and directories can be committed",
				path, de->d_name, ftype_name(sb.st_mode));
			ret = DCR_ERR(-EINVAL);
			break;
		}
		if ((ret = scan_add(s, child, &sb)))
			break;
		if (!S_ISDIR(sb.st_mode))
			continue;
		int cfd = dcr_openat_beneath(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY, 0);
		struct stat csb;
		if (cfd >= 0 && (fstat(cfd, &csb) < 0 || !same_object(&csb, sb.st_dev, sb.st_ino))) {
			close(cfd);
			cfd = DCR_ERR(-EAGAIN);
		}
		if (cfd < 0) {
			ret = cfd == -ELOOP || cfd == -ENOTDIR ? DCR_ERR(-EAGAIN) : cfd;
			dcr_err("%s/%s changed while it was being committed (%s)", path,
				de->d_name, ret == -EAGAIN ? "no longer the directory listed" :
				dcr_strerror(ret));
			break;
		}
		if ((ret = scan_dir(s, cfd, child)))
			break;
	}
	closedir(d);
	return ret;
}

#ifdef DCR_TEST_HOOKS
/*
 * Test hook (HACKING): DCRFS_TEST_COMMIT_BEFORE_OPEN=CMD runs
 * `sh -c CMD sh FILE` before each listed file is opened, between the
 * scan and the read, so that a test can replace FILE exactly in that
 * window (tests/integration/commit_race.sh).
 */
static void hook_before_open(const char *file)
{
	const char *cmd = getenv("DCRFS_TEST_COMMIT_BEFORE_OPEN");

	if (!cmd || !*cmd)
		return;
	pid_t pid = fork();
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", cmd, "sh", file, (char *)NULL);
		_exit(127);
	}
	while (pid > 0 && waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}
#endif

/*
 * Open the file of source @src for reading, *@sb its fstat: a file
 * listed in a tree is opened below it without following a symlink and
 * must still be the regular file the scan saw (else -EAGAIN: it changed
 * during the commit). -errno, logged naming the file.
 */
int dcr_commit_open_source(const struct dcr_commit_source *src,
			   struct stat *sb)
{
	char root[PATH_MAX];
	int fd;

#ifdef DCR_TEST_HOOKS
	hook_before_open(src->file);
#endif
	if (!src->root_len) {
		fd = open(src->file, O_RDONLY | O_CLOEXEC);
		fd = fd < 0 ? DCR_ERR(-errno) : fd;
	} else if (src->root_len >= sizeof(root) || src->file[src->root_len] != '/') {
		fd = DCR_ERR(-ENAMETOOLONG);
	} else {
		memcpy(root, src->file, src->root_len);
		root[src->root_len] = 0;
		fd = dcr_open_beneath(root, src->file + src->root_len + 1, O_RDONLY, 0);
	}
	if (fd >= 0 && fstat(fd, sb) < 0) {
		int err = DCR_ERR(-errno);
		close(fd);
		fd = err;
	} else if (fd >= 0 && src->root_len &&
		   (!S_ISREG(sb->st_mode) || !same_object(sb, src->dev, src->ino))) {
		close(fd);
		fd = DCR_ERR(-EAGAIN);
	} else if (fd == -ELOOP || (fd == -ENOTDIR && src->root_len)) {
		fd = DCR_ERR(-EAGAIN); /* a symlink (or one above it) now */
	}
	if (fd == -EAGAIN)
		dcr_err("%s changed while it was being committed: it is no longer the "
			"regular file that was listed (replaced, or a symbolic link now); "
			"nothing was read from it", src->file);
	else if (fd < 0)
		dcr_err("%s: %s", src->file, dcr_strerror(fd));
	return fd;
}

int dcr_commit_scan(const char *dir, struct dcr_commit_source **out, size_t *n)
{
	struct scan s = { .root = dir, .root_len = strlen(dir) };
	int ret, fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0) {
		ret = DCR_ERR(-errno);
		if (ret == -ENOTDIR)
			dcr_err("%s: not a directory", dir);
		else
			dcr_err("%s: %s", dir, dcr_strerror(ret));
		return ret;
	}
	if ((ret = scan_dir(&s, fd, ""))) {
		dcr_commit_sources_free(s.src, s.n);
		return ret;
	}
	*out = s.src;
	*n = s.n;
	return 0;
}
