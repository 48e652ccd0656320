/* SPDX-License-Identifier: MIT */
/*
 * dirstore.c - the local-directory object store (see dirstore.h).
 */
#include "config.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "dirstore.h"
#include "fileio.h"

#define TMP_DIR ".tmp"
/* A whole buffer put (dir_put) bypasses the page cache for its aligned
 * bulk only when that is at least this large (see put_bytes). */
#define DIO_MIN ((size_t)1 << 20)

struct dcr_dir_store {
	struct dcr_store base; /* must be first */
	char *root;
	int root_fd;
};

static struct dcr_dir_store *to_dir(struct dcr_store *st)
{
	return (struct dcr_dir_store *)st;
}

/* Keys are relative paths without empty, "." or ".." components. */
static int key_valid(const char *key)
{
	if (!*key || key[0] == '/' || key[0] == '.')
		return 0;
	for (const char *p = key; *p;) {
		const char *e = strchrnul(p, '/');
		size_t n = (size_t)(e - p);
		if (n == 0 || (p[0] == '.' && (n == 1 || (n == 2 && p[1] == '.'))))
			return 0;
		p = *e ? e + 1 : e;
	}
	return 1;
}

#ifdef DCR_TEST_HOOKS
/*
 * DCRFS_TEST_STORE_LOG=PATH: every GET and LIST of a directory store is
 * appended to PATH as a line ("GET key", "LIST prefix"), so that a test
 * counts the requests a command makes (tests/integration/gc_requests.sh).
 * One write(2) per line, O_APPEND: lines of threads do not interleave.
 */
static void trace(const char *op, const char *key)
{
	const char *path = getenv("DCRFS_TEST_STORE_LOG");
	char line[PATH_MAX + 16];
	int fd, n;

	if (!path || !*path)
		return;
	n = snprintf(line, sizeof(line), "%s %s\n", op, key);
	if (n <= 0 || (size_t)n >= sizeof(line) ||
	    (fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644)) < 0)
		return;
	if (write(fd, line, (size_t)n) != n)
		dcr_warn("DCRFS_TEST_STORE_LOG: cannot write %s", path);
	close(fd);
}
#else
static inline void trace(const char *op, const char *key)
{
	(void)op;
	(void)key;
}
#endif

static int dir_get(struct dcr_store *st, const char *key, uint64_t off,
		   uint64_t len, int64_t deadline, struct dcr_buf *out)
{
	(void)deadline; /* local reads are not bounded */
	struct dcr_dir_store *d = to_dir(st);
	struct stat sb;
	int ret = 0;

	trace("GET", key);

	if (!key_valid(key))
		return DCR_ERR(-EINVAL);
	int fd = openat(d->root_fd, key, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return DCR_ERR(-errno);
	if (fstat(fd, &sb) < 0) {
		ret = DCR_ERR(-errno);
		goto err_close;
	}
	if (!S_ISREG(sb.st_mode)) {
		ret = DCR_ERR(-EISDIR);
		goto err_close;
	}
	uint64_t size = (uint64_t)sb.st_size;
	if (off >= size)
		goto err_close;
	uint64_t n = DCR_MIN(len, size - off);
	if (n > SIZE_MAX - out->len) {
		ret = DCR_ERR(-EFBIG);
		goto err_close;
	}
	ret = dcr_buf_reserve(out, out->len + n);
	if (ret)
		goto err_close;
	uint64_t done = 0;
	while (done < n) {
		ssize_t r = pread(fd, out->data + out->len + done, n - done,
				  (off_t)(off + done));
		if (r < 0) {
			if (errno == EINTR)
				continue;
			ret = DCR_ERR(-errno);
			dcr_err("%s: read %s: %s", st->url, key, dcr_strerror(ret));
			goto err_close;
		}
		if (r == 0)
			break; /* shrank under us: return what exists */
		done += (uint64_t)r;
	}
	out->len += done;
err_close:
	close(fd);
	return ret;
}

/* mkdir -p for the directories of @key below the root. */
static int make_parents(int root_fd, const char *key)
{
	char path[PATH_MAX];
	size_t n = strlen(key);

	if (n >= sizeof(path))
		return DCR_ERR(-ENAMETOOLONG);
	memcpy(path, key, n + 1);
	for (char *p = path; (p = strchr(p, '/')); p++) {
		*p = 0;
		if (mkdirat(root_fd, path, 0755) < 0 && errno != EEXIST)
			return DCR_ERR(-errno);
		*p = '/';
	}
	return 0;
}

static int fsync_dir_of(int root_fd, const char *key)
{
	char path[PATH_MAX];
	const char *slash = strrchr(key, '/');
	int fd;

	if (slash) {
		size_t n = (size_t)(slash - key);
		memcpy(path, key, n);
		path[n] = 0;
		fd = openat(root_fd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	} else {
		fd = openat(root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
	if (fd < 0)
		return DCR_ERR(-errno);
	int ret = fsync(fd) < 0 ? DCR_ERR(-errno) : 0;
	close(fd);
	return ret;
}

/*
 * Create a temporary file in .tmp, its path into @tmp. .tmp is made on
 * the first put, not at open, so that opening a directory that is not a
 * store writes nothing into it.
 */
static int open_tmp(struct dcr_dir_store *d, char *tmp, size_t cap)
{
	for (int tries = 0;; tries++) {
		snprintf(tmp, cap, "%s/%s/put.XXXXXX", d->root, TMP_DIR);
		int fd = mkostemp(tmp, O_CLOEXEC);
		if (fd >= 0 || errno != ENOENT || tries)
			return fd;
		if (mkdirat(d->root_fd, TMP_DIR, 0755) < 0 && errno != EEXIST)
			return -1;
	}
}


/*
 * Make the written temporary @tmp (open as @fd, which this closes) the
 * object @key, as put says (@flags). Logs its failures; on failure
 * @tmp is gone.
 */
static int finish_object(struct dcr_dir_store *d, int fd, const char *tmp,
			 const char *key, int flags)
{
	struct dcr_store *st = &d->base;
	int ret = make_parents(d->root_fd, key);

	if (!ret && fchmod(fd, 0644) < 0)
		ret = DCR_ERR(-errno);
	if (!ret && fsync(fd) < 0)
		ret = DCR_ERR(-errno);
	if (close(fd) < 0 && !ret)
		ret = DCR_ERR(-errno);
	if (ret)
		goto err_unlink;
	if (flags & DCR_PUT_IF_ABSENT) {
		/* link() never replaces: of two racing puts exactly one wins. */
		if (linkat(AT_FDCWD, tmp, d->root_fd, key, 0) < 0) {
			ret = DCR_ERR(-errno);
			unlink(tmp);
			if (ret == -EEXIST)
				return ret;
			goto err_log;
		}
		unlink(tmp);
	} else if (renameat(AT_FDCWD, tmp, d->root_fd, key) < 0) {
		ret = DCR_ERR(-errno);
		goto err_unlink;
	}
	ret = fsync_dir_of(d->root_fd, key);
	if (ret && (flags & DCR_PUT_IF_ABSENT)) {
		/*
		 * The object is in place and readers can see it: reporting a
		 * failure now would make a committer say "nothing was
		 * published" about a version that was.
		 */
		dcr_warn("%s: %s is written but its directory could not be synced: %s",
			 st->url, key, dcr_strerror(ret));
		return 0;
	}
	if (ret)
		goto err_log;
	return 0;

err_unlink:
	unlink(tmp);
err_log:
	dcr_err("%s: cannot write %s: %s", st->url, key, dcr_strerror(ret));
	return ret;
}

/* An object being written: its temporary, and how it is written. */
struct dcr_put {
	struct dcr_dir_store *d;
	int fd;
	int direct;        /* O_DIRECT on fd: 1 set, 0 not, -1 refused */
	uint64_t len;      /* bytes written */
	char tmp[PATH_MAX];
};

/* Turn O_DIRECT on @p's descriptor on or off, as far as the file system
 * lets it; whether it is on after the call. */
static bool set_direct(struct dcr_put *p, bool on)
{
	int want = on ? 1 : 0, fl;

	if (p->direct == want || p->direct < 0)
		return p->direct == 1; /* as asked, or refused: never on */
	if ((fl = fcntl(p->fd, F_GETFL)) < 0 ||
	    fcntl(p->fd, F_SETFL, on ? fl | O_DIRECT : fl & ~O_DIRECT) < 0) {
		if (on)
			p->direct = -1; /* refused (tmpfs ...): never again */
		return p->direct == 1;
	}
	p->direct = want;
	return on;
}

/*
 * Append @data[0..len) to @p's temporary. Whole aligned blocks at an
 * aligned offset (the commit's packs) are written with O_DIRECT: copying
 * them into the page cache costs far more CPU than the device transfer,
 * and the fsync that follows has nothing left to flush. Where direct I/O
 * is refused (tmpfs, some FUSE file systems) or stops short, the rest is
 * written normally from the last whole block written; the bytes are the
 * same either way. 0 or -errno, not logged.
 */
static int put_bytes(struct dcr_put *p, const uint8_t *data, size_t len)
{
	size_t done = 0;
	int ret;

	if (len >= DCR_PUT_ALIGN && len % DCR_PUT_ALIGN == 0 &&
	    p->len % DCR_PUT_ALIGN == 0 && (uintptr_t)data % DCR_PUT_ALIGN == 0 &&
	    set_direct(p, true)) {
		while (done < len) {
			ssize_t w = write(p->fd, data + done, len - done);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0 || (size_t)w % DCR_PUT_ALIGN)
				break;
			done += (size_t)w;
		}
		if (done < len && lseek(p->fd, (off_t)(p->len + done), SEEK_SET) < 0)
			return DCR_ERR(-errno);
	}
	if (done < len) {
		if (set_direct(p, false))
			return DCR_ERR(-EIO); /* cannot leave direct I/O */
		if ((ret = dcr_write_full(p->fd, data + done, len - done)))
			return ret;
	}
	p->len += len;
	return 0;
}

static int dir_put(struct dcr_store *st, const char *key, const void *data,
		   uint64_t len, int flags)
{
	struct dcr_put p = { .d = to_dir(st) };
	/* direct I/O only for a large buffer: its bulk, the tail normally */
	size_t bulk = (size_t)len / DCR_PUT_ALIGN * DCR_PUT_ALIGN;
	int ret;

	if (!key_valid(key))
		return DCR_ERR(-EINVAL);
	p.fd = open_tmp(p.d, p.tmp, sizeof(p.tmp));
	if (p.fd < 0) {
		ret = DCR_ERR(-errno);
		dcr_err("%s: cannot write %s: %s", st->url, key, dcr_strerror(ret));
		return ret;
	}
	if (bulk < DIO_MIN)
		bulk = 0;
	ret = put_bytes(&p, data, bulk);
	if (!ret)
		ret = put_bytes(&p, (const uint8_t *)data + bulk, (size_t)len - bulk);
	if (ret) {
		close(p.fd);
		unlink(p.tmp);
		dcr_err("%s: cannot write %s: %s", st->url, key, dcr_strerror(ret));
		return ret;
	}
	return finish_object(p.d, p.fd, p.tmp, key, flags);
}

/* ---------------------------------------------- objects written in parts */


static int dir_put_open(struct dcr_store *st, struct dcr_put **out)
{
	struct dcr_put *p = calloc(1, sizeof(*p));
	int ret;

	*out = NULL;
	if (!p)
		return DCR_ERR(-ENOMEM);
	p->d = to_dir(st);
	p->fd = open_tmp(p->d, p->tmp, sizeof(p->tmp));
	if (p->fd < 0) {
		ret = DCR_ERR(-errno);
		dcr_err("%s: cannot start an object in %s/%s: %s", st->url,
			p->d->root, TMP_DIR, dcr_strerror(ret));
		free(p);
		return ret;
	}
	*out = p;
	return 0;
}


/* Parts written as put_bytes says; after a failure the object is
 * unusable: the caller aborts it. */
static int dir_put_write(struct dcr_put *p, const void *data, size_t len)
{
	int ret = put_bytes(p, data, len);

	if (ret)
		dcr_err("%s: cannot write %s: %s", p->d->base.url, p->tmp,
			dcr_strerror(ret));
	return ret;
}

static void dir_put_abort(struct dcr_put *p)
{
	if (!p)
		return;
	close(p->fd);
	unlink(p->tmp);
	free(p);
}

static int dir_put_finish(struct dcr_put *p, const char *key, int flags)
{
	int ret;

	if (!key_valid(key)) {
		dir_put_abort(p);
		return DCR_ERR(-EINVAL);
	}
	ret = finish_object(p->d, p->fd, p->tmp, key, flags);
	free(p);
	return ret;
}

static int dir_head(struct dcr_store *st, const char *key, uint64_t *size)
{
	struct stat sb;

	if (!key_valid(key))
		return DCR_ERR(-EINVAL);
	if (fstatat(to_dir(st)->root_fd, key, &sb, 0) < 0)
		return DCR_ERR(-errno);
	if (!S_ISREG(sb.st_mode))
		return DCR_ERR(-ENOENT);
	*size = (uint64_t)sb.st_size;
	return 0;
}

struct key_list {
	char **keys;
	struct dcr_obj_info *infos;
	size_t n, cap;
};

static int64_t mtime_ns(const struct stat *sb)
{
	return (int64_t)sb->st_mtim.tv_sec * 1000000000 + sb->st_mtim.tv_nsec;
}

static int key_list_add(struct key_list *l, const char *key,
			const struct stat *sb)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		char **k = realloc(l->keys, cap * sizeof(*k));
		if (!k)
			return DCR_ERR(-ENOMEM);
		l->keys = k;
		struct dcr_obj_info *s = realloc(l->infos, cap * sizeof(*s));
		if (!s)
			return DCR_ERR(-ENOMEM);
		l->infos = s;
		l->cap = cap;
	}
	if (!(l->keys[l->n] = strdup(key)))
		return DCR_ERR(-ENOMEM);
	l->infos[l->n++] = (struct dcr_obj_info){
		.size = (uint64_t)sb->st_size, .mtime_ns = mtime_ns(sb),
	};
	return 0;
}

static void key_list_free(struct key_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->keys[i]);
	free(l->keys);
	free(l->infos);
}

/* Collect every object below directory @rel (relative to root). */
static int walk(int root_fd, const char *rel, const char *prefix,
		struct key_list *l)
{
	int fd = openat(root_fd, *rel ? rel : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == ENOTDIR ? 0 : DCR_ERR(-errno);
	DIR *dir = fdopendir(fd);
	if (!dir) {
		close(fd);
		return DCR_ERR(-errno);
	}
	int ret = 0;
	struct dirent *de;
	while ((de = readdir(dir))) {
		if (de->d_name[0] == '.')
			continue; /* ., .., .tmp and temporaries */
		char key[PATH_MAX];
		int n = snprintf(key, sizeof(key), "%s%s%s", rel, *rel ? "/" : "",
				 de->d_name);
		if (n < 0 || (size_t)n >= sizeof(key))
			continue;
		struct stat sb;
		if (fstatat(dirfd(dir), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		size_t kl = (size_t)n, pl = strlen(prefix);
		if (S_ISDIR(sb.st_mode)) {
			/* Descend only where keys could still match the prefix. */
			if (strncmp(key, prefix, DCR_MIN(kl, pl)) == 0 &&
			    (ret = walk(root_fd, key, prefix, l)))
				break;
		} else if (S_ISREG(sb.st_mode) && !strncmp(key, prefix, pl)) {
			if ((ret = key_list_add(l, key, &sb)))
				break;
		}
	}
	closedir(dir);
	return ret;
}

static int cmp_idx_keys(const void *a, const void *b, void *arg)
{
	char **keys = arg;
	return strcmp(keys[*(const size_t *)a], keys[*(const size_t *)b]);
}

static int dir_list(struct dcr_store *st, const char *prefix, dcr_list_fn fn,
		    void *arg)
{
	struct dcr_dir_store *d = to_dir(st);
	struct key_list l = { 0 };
	char rel[PATH_MAX];
	int ret;

	trace("LIST", prefix);

	/* Start the walk at the deepest directory named by the prefix. */
	const char *slash = strrchr(prefix, '/');
	size_t rl = slash ? (size_t)(slash - prefix) : 0;
	if (rl >= sizeof(rel))
		return DCR_ERR(-ENAMETOOLONG);
	memcpy(rel, prefix, rl);
	rel[rl] = 0;
	if (rl && !key_valid(rel))
		return DCR_ERR(-EINVAL);
	ret = walk(d->root_fd, rel, prefix, &l);
	if (ret) {
		dcr_err("%s: cannot list %s: %s", st->url, prefix, dcr_strerror(ret));
		goto err_free;
	}
	size_t *idx = malloc((l.n ? l.n : 1) * sizeof(*idx));
	if (!idx) {
		ret = DCR_ERR(-ENOMEM);
		goto err_free;
	}
	for (size_t i = 0; i < l.n; i++)
		idx[i] = i;
	qsort_r(idx, l.n, sizeof(*idx), cmp_idx_keys, l.keys);
	for (size_t i = 0; i < l.n && !ret; i++)
		ret = fn(l.keys[idx[i]], &l.infos[idx[i]], arg);
	free(idx);
err_free:
	key_list_free(&l);
	return ret;
}

/* The temporaries of puts in .tmp/ (a live put's too: callers judge by age). */
static int dir_list_partial(struct dcr_store *st, dcr_list_fn fn, void *arg)
{
	struct dcr_dir_store *d = to_dir(st);
	char key[PATH_MAX];
	struct stat sb;
	struct dirent *de;
	int ret = 0;

	int fd = openat(d->root_fd, TMP_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : DCR_ERR(-errno);
	DIR *dir = fdopendir(fd);
	if (!dir) {
		close(fd);
		return DCR_ERR(-errno);
	}
	while (!ret && (de = readdir(dir))) {
		if (de->d_name[0] == '.' ||
		    fstatat(dirfd(dir), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(sb.st_mode))
			continue;
		snprintf(key, sizeof(key), TMP_DIR "/%s", de->d_name);
		struct dcr_obj_info info = {
			.size = (uint64_t)sb.st_size, .mtime_ns = mtime_ns(&sb),
			.upload = de->d_name,
		};
		ret = fn(key, &info, arg);
	}
	closedir(dir);
	return ret;
}

static int dir_abort_partial(struct dcr_store *st, const char *key,
			     const char *upload)
{
	char path[PATH_MAX];

	(void)key;
	if (!*upload || strchr(upload, '/') || upload[0] == '.')
		return DCR_ERR(-EINVAL);
	snprintf(path, sizeof(path), TMP_DIR "/%s", upload);
	if (unlinkat(to_dir(st)->root_fd, path, 0) < 0)
		return DCR_ERR(-errno);
	return 0;
}

static int dir_del(struct dcr_store *st, const char *key)
{
	if (!key_valid(key))
		return DCR_ERR(-EINVAL);
	if (unlinkat(to_dir(st)->root_fd, key, 0) < 0)
		return DCR_ERR(-errno);
	return 0;
}

static void dir_close(struct dcr_store *st)
{
	struct dcr_dir_store *d = to_dir(st);

	close(d->root_fd);
	free(d->root);
	free(d->base.url);
	free(d);
}

static const struct dcr_store_ops dir_ops = {
	.name = "dir",
	.get = dir_get,
	.put = dir_put,
	.put_open = dir_put_open,
	.put_write = dir_put_write,
	.put_finish = dir_put_finish,
	.put_abort = dir_put_abort,
	.head = dir_head,
	.list = dir_list,
	.del = dir_del,
	.list_partial = dir_list_partial,
	.abort_partial = dir_abort_partial,
	.close = dir_close,
};

int dcr_dir_open(const char *path, int create, struct dcr_store **out)
{
	struct stat sb;
	int ret;

	if (create && (ret = dcr_mkdir_p(path, 0755))) {
		dcr_err("%s: cannot create store directory: %s", path, dcr_strerror(ret));
		return ret;
	}
	if (stat(path, &sb) < 0) {
		ret = DCR_ERR(-errno);
		dcr_err("%s: cannot open store: %s", path, dcr_strerror(ret));
		return ret;
	}
	if (!S_ISDIR(sb.st_mode)) {
		dcr_err("%s: store is not a directory", path);
		return DCR_ERR(-ENOTDIR);
	}
	struct dcr_dir_store *d = calloc(1, sizeof(*d));
	if (!d)
		return DCR_ERR(-ENOMEM);
	d->root = realpath(path, NULL);
	if (!d->root) {
		ret = DCR_ERR(-errno);
		goto err_free;
	}
	d->root_fd = open(d->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (d->root_fd < 0) {
		ret = DCR_ERR(-errno);
		dcr_err("%s: cannot open store: %s", path, dcr_strerror(ret));
		goto err_free_root;
	}
	size_t ul = strlen(d->root) + 8;
	if (!(d->base.url = malloc(ul))) {
		ret = DCR_ERR(-ENOMEM);
		goto err_close;
	}
	snprintf(d->base.url, ul, "file://%s", d->root);
	d->base.ops = &dir_ops;
	*out = &d->base;
	return 0;

err_close:
	close(d->root_fd);
err_free_root:
	free(d->root);
err_free:
	free(d);
	return ret;
}
