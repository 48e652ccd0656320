/* SPDX-License-Identifier: MIT */
/*
 * main.c - the dcrfs daemon: opening the store and the reader, mounting,
 * detaching, the session loop, shutdown. The command line and the mount
 * options are read and checked by args.c.
 *
 *   dcrfs STORE MOUNTPOINT [-f] [-d] [-s] [-o opt[,opt...]]
 *
 * Order of events, so that every error a user can cause is reported on
 * stderr with a non-zero exit status before the daemon detaches:
 *
 *   1. parse the arguments; dcrfs's own -o options are taken out, the
 *      options of mount(8) that mean nothing to a FUSE daemon are
 *      dropped, the rest is left to libfuse, which rejects what it does
 *      not know (fuse_session_new);
 *   2. fork (unless -f): the parent waits on a pipe and exits with 0 only
 *      once the child reports the mount is in place;
 *   3. the child opens the store, the reader and the catalog, lists the
 *      versions and mounts; then it redirects stdio to /dev/null, logs to
 *      syslog, reports success and starts the background threads;
 *   4. multithreaded session loop until umount or SIGINT/SIGTERM/SIGHUP;
 *   5. stop the background threads, unmount if still mounted, close the
 *      reader and the store.
 *
 * Forking before anything starts a thread keeps the reader's threads
 * (and SQLite's, libcurl's) out of fork's way.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <syslog.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "common.h"
#include "fileio.h"
#include "mirror.h"
#include "store.h"
#include "fs.h"
#include "fdstore.h"
#include "handover.h"
#include "sign.h"
#include "args.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "unknown"
#endif

#define PROG DCRFS_PROG
#define EXIT_USAGE 2

/* ------------------------------------------------------------- helpers */


/* The default cache directory (see dcrfs_usage), malloc'ed, or NULL. */
static char *default_cache_dir(void)
{
	const char *xdg, *home;

	if (geteuid() == 0)
		return strdup("/var/cache/dcrfs");
	xdg = getenv("XDG_CACHE_HOME");
	if (xdg && xdg[0] == '/')
		return dcr_path_join(xdg, "dcrfs");
	home = getenv("HOME");
	if (home && home[0] == '/')
		return dcr_path_join(home, ".cache/dcrfs");
	fprintf(stderr, PROG ": cannot tell where the cache goes (HOME is "
		"not set); use -o cache_dir=DIR\n");
	return NULL;
}

/* @path made absolute against the current directory, malloc'ed. */
static char *absolute(const char *path)
{
	char cwd[PATH_MAX];

	if (path[0] == '/')
		return strdup(path);
	if (!getcwd(cwd, sizeof(cwd)))
		return NULL;
	return dcr_path_join(cwd, path);
}

/* @mnt answered ENOTCONN: a FUSE mount whose daemon is gone (killed).
 * Say so with the command that clears it. */
static void say_dead_mount(const char *mnt)
{
	fprintf(stderr, PROG ": mount point %s: %s: a dead FUSE mount (its "
		"daemon is gone); unmount it first (fusermount3 -u %s)\n", mnt,
		strerror(ENOTCONN), mnt);
}

/*
 * Refuse a mount point that is already a mount (two dcrfs stacked on one
 * path) or, unless -o nonempty, holds files the mount would hide; rclone
 * and s3fs refuse both too. 0 or -1 with the reason printed.
 */
static int check_mountpoint(const char *mnt, int nonempty)
{
	char parent[PATH_MAX];
	struct stat sb, psb;
	struct dirent *e;
	DIR *d;

	if (snprintf(parent, sizeof(parent), "%s/..", mnt) >=
	    (int)sizeof(parent) || stat(mnt, &sb) < 0 ||
	    stat(parent, &psb) < 0) {
		/* realpath(3) may resolve a dead mount without asking it
		 * (readlink needs no daemon); stat does */
		if (errno == ENOTCONN) {
			say_dead_mount(mnt);
			return -1;
		}
		fprintf(stderr, PROG ": mount point %s: %s\n", mnt,
			strerror(errno ? errno : ENAMETOOLONG));
		return -1;
	}
	if (sb.st_dev != psb.st_dev && strcmp(mnt, "/") != 0) {
		struct statfs sf; /* never answered from the kernel's cache */
		if (statfs(mnt, &sf) < 0 && errno == ENOTCONN) {
			say_dead_mount(mnt);
			return -1;
		}
		fprintf(stderr, PROG ": %s is already a mount point; unmount it "
			"first (fusermount3 -u %s)\n", mnt, mnt);
		return -1;
	}
	if (nonempty)
		return 0;
	d = opendir(mnt);
	if (!d) {
		fprintf(stderr, PROG ": mount point %s: %s\n", mnt,
			strerror(errno));
		return -1;
	}
	bool empty = true;
	while (empty && (e = readdir(d)))
		empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
	closedir(d);
	if (!empty) {
		fprintf(stderr, PROG ": mount point %s is not empty; its files "
			"would be hidden while mounted (pass -o nonempty to "
			"mount there anyway)\n", mnt);
		return -1;
	}
	return 0;
}

/* "name:" at the start, as in s3://b, file:///p and malformed s3:/b:
 * a URL for dcr_store_open to accept or refuse, not a local path. */
static int has_scheme(const char *s)
{
	size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyz"
			     "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-");

	return n > 0 && s[n] == ':';
}

/* Undo the octal escapes of /proc/self/mountinfo (\040 etc.) in place. */
static void unescape_mountinfo(char *s)
{
	char *w = s;

	for (char *r = s; *r; ) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' &&
		    r[2] >= '0' && r[2] <= '7' && r[3] >= '0' && r[3] <= '7') {
			*w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 +
				      (r[3] - '0'));
			r += 4;
		} else {
			*w++ = *r++;
		}
	}
	*w = '\0';
}

/*
 * Raise the readahead of the mount's bdi to @kb KiB. The kernel caps
 * FUSE readahead (and mmap fault-around reads) at the bdi's
 * read_ahead_kb, 128 KiB by default, whatever max_readahead says.
 * Needs root; a failure is a warning when -o readahead was given
 * (@asked), else logged at debug level.
 */
static void set_readahead(const char *mountpoint, unsigned int kb, bool asked)
{
	unsigned int maj = 0, min = 0;
	int found = 0;
	char *line = NULL;
	size_t cap = 0;
	char path[64];
	FILE *f;

	if (kb == 0)
		return;
	f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return;
	while (getline(&line, &cap, f) > 0) {
		unsigned int a, b;
		char mnt[PATH_MAX + 1];
		char *sep = strstr(line, " - ");

		if (!sep || strncmp(sep + 3, "fuse", 4) != 0)
			continue;
		if (sscanf(line, "%*u %*u %u:%u %*s %4096s", &a, &b, mnt) != 3)
			continue;
		unescape_mountinfo(mnt);
		if (strcmp(mnt, mountpoint) == 0) {
			maj = a;
			min = b;
			found = 1; /* keep going: the last one is on top */
		}
	}
	free(line);
	fclose(f);
	if (!found)
		return;
	snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb",
		 maj, min);
	f = fopen(path, "we");
	if (f) {
		fprintf(f, "%u\n", kb);
		if (fclose(f) == 0)
			return;
	}
	if (asked)
		dcr_warn("-o readahead: cannot set %s to %u KiB (%s; only root "
			 "may): the kernel's default stays, if lower", path, kb,
			 strerror(errno));
	else
		dcr_debug("cannot set %s: %s", path, strerror(errno));
}

static void syslog_sink(enum dcr_log_level lvl, const char *msg)
{
	static const int prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO,
				    LOG_DEBUG };

	syslog(prio[lvl <= DCR_LOG_DEBUG ? lvl : DCR_LOG_DEBUG], "%s", msg);
}

/* libfuse's own messages, once detached, go where dcrfs's go. */
__attribute__((format(printf, 2, 0)))
static void fuse_log_forward(enum fuse_log_level level, const char *fmt,
			     va_list ap)
{
	char buf[1024];
	size_t n;
	enum dcr_log_level lvl;

	vsnprintf(buf, sizeof(buf), fmt, ap);
	n = strlen(buf);
	while (n && buf[n - 1] == '\n')
		buf[--n] = '\0';
	if (level <= FUSE_LOG_ERR)
		lvl = DCR_LOG_ERR;
	else if (level == FUSE_LOG_WARNING)
		lvl = DCR_LOG_WARN;
	else if (level <= FUSE_LOG_INFO)
		lvl = DCR_LOG_INFO;
	else
		lvl = DCR_LOG_DEBUG;
	dcr_log(lvl, "%s", buf);
}

/*
 * Fork; the parent waits until the child reports through the pipe and
 * exits 0 once it did, or with the child's status if it died first.
 * Returns the write end of the pipe in the child, -1 on failure.
 */
static pid_t detached_child;

/* In the parent of detach_begin: pass signal @sig on to the daemon. */
static void forward_signal(int sig)
{
	if (detached_child > 0)
		kill(detached_child, sig);
}

static int detach_begin(void)
{
	int fds[2];
	pid_t pid;
	char c;
	ssize_t n;
	int status;

	/* Close-on-exec: fusermount3, if libfuse runs it, must not keep it. */
	if (pipe2(fds, O_CLOEXEC) < 0) {
		fprintf(stderr, PROG ": pipe: %s\n", strerror(errno));
		return -1;
	}
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, PROG ": fork: %s\n", strerror(errno));
		close(fds[0]);
		close(fds[1]);
		return -1;
	}
	if (pid > 0) {
		/* The exit signals sent to the command that was run reach
		 * the daemon it started, which ends mounting at once. */
		struct sigaction sa = { .sa_handler = forward_signal };

		detached_child = pid;
		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
		sigaction(SIGHUP, &sa, NULL);
		close(fds[1]);
		do
			n = read(fds[0], &c, 1);
		while (n < 0 && errno == EINTR);
		if (n == 1 && c == 0)
			_exit(0);
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		if (WIFSIGNALED(status))
			fprintf(stderr, PROG ": stopped by signal %d (%s) before "
				"the mount was in place\n", WTERMSIG(status),
				strsignal(WTERMSIG(status)));
		_exit(WIFEXITED(status) && WEXITSTATUS(status) ?
		      WEXITSTATUS(status) : 1);
	}
	close(fds[0]);
	if (setsid() < 0)
		dcr_debug("setsid: %s", strerror(errno));
	return fds[1];
}

/* In the child, once mounted: leave the terminal and release the parent.
 * Messages go to the log file if @to_file, else to syslog. */
static void detach_finish(int fd, bool to_file)
{
	int null = open("/dev/null", O_RDWR);
	char c = 0;

	if (chdir("/") < 0)
		dcr_debug("chdir /: %s", strerror(errno));
	if (to_file) {
		dcr_log_quiet_sink(true);
	} else {
		openlog(PROG, LOG_PID, LOG_DAEMON);
		dcr_log_set_sink(syslog_sink);
	}
	fuse_set_log_func(fuse_log_forward);
	if (null >= 0) {
		dup2(null, STDIN_FILENO);
		dup2(null, STDOUT_FILENO);
		dup2(null, STDERR_FILENO);
		if (null > STDERR_FILENO)
			close(null);
	}
	if (write(fd, &c, 1) != 1)
		dcr_warn("could not report readiness to the parent process");
	close(fd);
}

/*
 * Where messages go once detached: -o log=FILE, else syslog, else (no
 * syslog socket, as in many containers) CACHE_DIR/dcrfs.log - never
 * nowhere: the line that explains an EIO must survive. Says so on stderr
 * before detaching. In the foreground messages go to stderr, and to
 * -o log=FILE too. *@path: the file in use (malloc'd) or NULL. 0 or -1.
 */
static int open_log(const struct dcrfs_args *o, const char *cache_dir, char **path)
{
	struct stat sb;
	int ret;

	*path = NULL;
	if (o->log) {
		*path = absolute(o->log);
	} else if (!o->foreground &&
		   (stat("/dev/log", &sb) < 0 || !S_ISSOCK(sb.st_mode))) {
		if (dcr_mkdir_p(cache_dir, 0700) == 0)
			*path = dcr_path_join(cache_dir, "dcrfs.log");
		/* Said once, when the file is new: not on every mount. */
		if (*path && access(*path, F_OK) < 0)
			fprintf(stderr, PROG ": no syslog here (/dev/log): "
				"messages go to %s\n", *path);
	} else {
		return 0;
	}
	if (!*path) {
		fprintf(stderr, PROG ": log: %s\n", strerror(ENOMEM));
		return -1;
	}
	ret = dcr_log_to_file(*path);
	if (ret < 0) {
		fprintf(stderr, PROG ": cannot open log file %s: %s\n", *path,
			strerror(-ret));
		free(*path);
		*path = NULL;
		return -1;
	}
	return 0;
}


/* Put the mirrors in @list (NULL or empty: none) in front of *@st. */
static int mirrors_wrap(const char *list, const struct dcr_store_cfg *cfg,
			struct dcr_store **st)
{
	struct dcr_store *w;
	int ret;

	if (!list || !list[strspn(list, ", \t\n")])
		return 0;
	ret = dcr_mirror_open(*st, list, cfg, &w);
	if (ret == 0)
		*st = w;
	return ret;
}


/*
 * glibc raises its mmap threshold each time a large block (a prefetch
 * buffer, a coalesced GET) is freed, after which the chunk-sized blocks
 * come from per-thread arenas that fragment: a mount with prefetch grew
 * by ~0.5 MB per version of a 32 MiB model and never shrank. A fixed
 * threshold (the default value) keeps large blocks in mmap, returned
 * to the system when freed (scripts/bench-memory measures it).
 */
static void malloc_setup(void)
{
#ifdef __GLIBC__
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
#endif
}

/* The session loop, single- or multi-threaded: its result. */
static int run_loop(struct dcrfs *fs, const struct dcrfs_args *o)
{
	struct fuse_loop_config *lcfg;
	int ret;

	if (o->singlethread)
		return fuse_session_loop(fs->se);
	lcfg = fuse_loop_cfg_create();
	if (!lcfg) {
		dcr_err("%s", dcr_strerror(-ENOMEM));
		return -ENOMEM;
	}
	fuse_loop_cfg_set_clone_fd(lcfg, (unsigned)o->clone_fd);
	fuse_loop_cfg_set_max_threads(lcfg, o->max_threads ? o->max_threads :
				      DCRFS_MAX_THREADS_DEFAULT);
	if (o->max_idle_threads)
		fuse_loop_cfg_set_idle_threads(lcfg, o->max_idle_threads);
	ret = fuse_session_loop_mt(fs->se, lcfg);
	fuse_loop_cfg_destroy(lcfg);
	return ret;
}

/* @path made absolute through its parent's realpath, without a stat of
 * @path itself (malloc'ed; NULL with errno). */
static char *resolve_under_parent(const char *path)
{
	char *dup = strdup(path), *slash, *parent, *out = NULL;
	const char *base;

	if (!dup)
		return NULL;
	while (strlen(dup) > 1 && dup[strlen(dup) - 1] == '/')
		dup[strlen(dup) - 1] = '\0';
	slash = strrchr(dup, '/');
	if (!slash) {
		parent = realpath(".", NULL);
		base = dup;
	} else {
		*slash = '\0';
		parent = realpath(slash == dup ? "/" : dup, NULL);
		base = slash + 1;
	}
	if (parent && (!*base || !strcmp(base, ".") || !strcmp(base, ".."))) {
		errno = EINVAL; /* name the mount point itself */
	} else if (parent) {
		out = dcr_path_join(parent, base);
		if (!out)
			errno = ENOMEM;
	}
	free(parent);
	free(dup);
	return out;
}

int main(int argc, char *argv[])
{
	int nargc = 0;
	char **made = NULL;
	char **nargv = dcrfs_long_opts(argc, argv, &nargc, &made);
	struct fuse_args args = FUSE_ARGS_INIT(nargc, nargv);
	struct dcrfs_args o;
	struct dcrfs fs;
	struct dcr_store_cfg cfg;
	struct dcr_reader_opts ropts;
	struct dcr_store_info sinfo;
	struct dcrfs_metrics *metrics = NULL;
	char *store = NULL, *mountpoint = NULL, *cache_dir = NULL;
	char *log_path = NULL;
	/* --takeover, and the handover of this mount (fs/handover.h) */
	struct dcrfs_ho_state *ho = NULL;
	char ho_path[108] = "", hold_path[108] = "", devfd_path[32];
	char *fixed = NULL;
	bool restarted = false;
	bool taken_over = false, handed_over = false;
	/* the exit's phases after a handover, for the log */
	int64_t t_stop = 0, t_threads = 0, t_close = 0;
	/* a restart from systemd's fd store (fs/fdstore.h) */
	int sd_fuse = -1, sd_state = -1;
	char *sd_name = NULL, *sd_stale = NULL;
	bool from_store = false;

	/* the holder of a mount for a restart (handover.h): nothing else */
	if (argc > 1 && !strcmp(argv[1], DCRFS_HOLD_ARG))
		return dcrfs_ho_hold_main(argc, argv);
	malloc_setup();
	sigset_t sigs, oldsigs;
	uint64_t latest = 0;
	int ready_fd = -1;
	int exit_code = 1;
	int ret;

	dcr_log_set_prog(PROG);
	if (!nargv) {
		fprintf(stderr, "Try '" PROG " --help' for more information.\n");
		return EXIT_USAGE;
	}
	memset(&fs, 0, sizeof(fs));
	memset(&cfg, 0, sizeof(cfg));
	memset(&ropts, 0, sizeof(ropts));

	exit_code = EXIT_USAGE; /* until the command line is checked */
	if (dcrfs_args_parse(&args, &o) < 0) {
		fprintf(stderr, "Try '" PROG " --help' for more "
			"information.\n");
		goto out_args;
	}
	if (o.help) {
		dcrfs_usage(stdout);
		fuse_lowlevel_help();
		exit_code = 0;
		goto out_args;
	}
	if (o.version) {
		printf(PROG " %s\nFUSE library version %s\n", PACKAGE_VERSION,
		       fuse_pkgversion());
		fflush(stdout);
		fuse_lowlevel_version();
		exit_code = 0;
		goto out_args;
	}
	if (!o.store || !o.mountpoint || !o.store[0] || !o.mountpoint[0]) {
		fprintf(stderr, PROG ": %s\nusage: " PROG " STORE MOUNTPOINT "
			"[-f] [-d] [-o opt[,opt...]]\nTry '" PROG " --help' "
			"for more information.\n", !o.store || !o.store[0] ?
			"missing STORE" : "missing MOUNTPOINT");
		goto out_args;
	}
	if (dcrfs_args_check(&o, &fs, &cfg, &ropts) < 0)
		goto out_args;
	if (o.debug)
		dcr_log_set_level(DCR_LOG_DEBUG);
	exit_code = 1;
	/* systemd passed the connection and the state of a mount whose
	 * daemon died: restart it as --takeover restarts from a holder */
	ret = dcrfs_sd_listen(&sd_fuse, &sd_state, &sd_name, &sd_stale);
	if (ret < 0)
		goto out_args; /* said */
	from_store = ret > 0;

	/* Paths are resolved now: the daemon runs in "/". */
	if (strncmp(o.mountpoint, "/dev/fd/", 8) == 0) {
		mountpoint = strdup(o.mountpoint);
	} else if (o.takeover || from_store) {
		/* Its parent only: a mount whose daemon died waits for us,
		 * and so would a stat of it. */
		mountpoint = resolve_under_parent(o.mountpoint);
		if (!mountpoint) {
			fprintf(stderr, PROG ": bad mount point '%s': %s\n",
				o.mountpoint, strerror(errno));
			goto out_args;
		}
	} else {
		struct stat sb;

		mountpoint = realpath(o.mountpoint, NULL);
		if (mountpoint && stat(mountpoint, &sb) == 0 &&
		    !S_ISDIR(sb.st_mode))
			errno = ENOTDIR;
		else if (mountpoint)
			errno = 0;
		if (!mountpoint && errno == ENOTCONN) {
			say_dead_mount(o.mountpoint);
			goto out_args;
		}
		if (!mountpoint || errno) {
			fprintf(stderr, PROG ": bad mount point '%s': %s\n",
				o.mountpoint, strerror(errno));
			goto out_args;
		}
	}
	if (strncmp(mountpoint, "/dev/fd/", 8) != 0 && !o.takeover &&
	    !from_store && check_mountpoint(mountpoint, o.nonempty) < 0)
		goto out_args;
	if (has_scheme(o.store)) {
		store = strdup(o.store);
	} else {
		store = realpath(o.store, NULL);
		if (!store) {
			fprintf(stderr, PROG ": store '%s': %s\n", o.store,
				strerror(errno));
			goto out_args;
		}
	}
	cache_dir = o.cache_dir ? absolute(o.cache_dir) : default_cache_dir();
	if (!mountpoint || !store || !cache_dir) {
		if (o.cache_dir && !cache_dir)
			fprintf(stderr, PROG ": cache_dir '%s': %s\n",
				o.cache_dir, strerror(errno));
		goto out_args;
	}
	ropts.cache_dir = cache_dir;
	ropts.max_trees = DCRFS_TREES_KEPT; /* ops.c holds trees only while used */
	/* before the daemon detaches: a bad trust file is said here */
	if (o.trust && dcr_trust_load(o.trust, &fs.trust) < 0) {
		fprintf(stderr, PROG ": trust=%s: no mount without the keys "
			"it trusts\n", o.trust);
		goto out_args;
	}
	ropts.trust = fs.trust;

	/*
	 * fuse_opt_parse left in @args what libfuse must see: argv[0], -d,
	 * and every -o option that is not dcrfs's own or ignored.
	 */
	if (dcrfs_args_fuse(&args, &o, store) < 0)
		goto out_args;
	if ((o.takeover || from_store) && !strncmp(mountpoint, "/dev/fd/", 8)) {
		fprintf(stderr, PROG ": --takeover needs the mount point, not "
			"%s\n", mountpoint);
		goto out_args;
	}

	fs.mountpoint = mountpoint;
	/* in the cache directory's lock: a remount waits for us (reader.h) */
	if (strncmp(mountpoint, "/dev/fd/", 8) != 0)
		ropts.mountpoint = mountpoint;
	fs.cfg.uid = getuid();
	fs.cfg.gid = getgid();
	fs.cfg.mount_ns = dcr_now_ns();
	/* /delta's views: files in the cache directory, kept within an
	 * eighth of cache_size (fs/delta.c); the chunk cache gets the rest,
	 * so that cache_size bounds everything the mount keeps. */
	fs.dv.tmpdir = cache_dir;
	uint64_t budget = ropts.cache_size ? ropts.cache_size :
			  DCR_CACHE_SIZE_DEFAULT;
	fs.dv.budget = budget / 8;
	ropts.cache_size = budget - fs.dv.budget;
	ret = dcrfs_init_state(&fs);
	if (ret < 0) {
		fprintf(stderr, PROG ": %s\n", dcr_strerror(ret));
		goto out_args;
	}

	/* Rejects unknown options, with libfuse's message. */
	fs.se = fuse_session_new(&args, &dcrfs_ll_ops, sizeof(dcrfs_ll_ops),
				 &fs);
	if (!fs.se) {
		fprintf(stderr, PROG ": invalid mount options; see "
			PROG " --help\n");
		exit_code = EXIT_USAGE;
		goto out_state;
	}

	if (open_log(&o, cache_dir, &log_path) < 0)
		goto out_session;
	if (!o.foreground) {
		ready_fd = detach_begin();
		if (ready_fd < 0)
			goto out_session;
	}
	/* What a takeover must repeat, and where this mount is asked. */
	fixed = dcrfs_ho_fixed(&fs, store, mountpoint, args.argc, args.argv);
	if (!fixed || dcrfs_ho_sock_path(cache_dir, mountpoint, "handover",
					 ho_path, sizeof(ho_path)) < 0 ||
	    dcrfs_ho_sock_path(cache_dir, mountpoint, "hold", hold_path,
			       sizeof(hold_path)) < 0)
		ho_path[0] = hold_path[0] = '\0';
	if (from_store) {
		if (!fixed)
			goto out_session;
		ret = dcrfs_ho_from_store(sd_fuse, sd_state, sd_name, sd_stale,
					  fixed, &ho); /* takes them */
		sd_fuse = sd_state = -1;
		sd_name = sd_stale = NULL;
		if (ret < 0)
			goto out_session; /* said */
	} else if (o.takeover && (!ho_path[0] ||
			   dcrfs_ho_connect(ho_path, hold_path, fixed, &ho) < 0)) {
		goto out_session; /* said */
	}
	restarted = dcrfs_ho_restart(ho);

	/*
	 * Until the mount is in place, SIGINT, SIGTERM and SIGHUP end the
	 * daemon as they would without a handler, whatever the store does
	 * (a listing that never ends, a server that does not answer):
	 * nothing is mounted yet, and the cache directory's lock and catalog
	 * survive a kill. The work queues' threads never take them
	 * (core/wq.c), so they reach this thread. SIGPIPE is ignored, as
	 * fuse_set_signal_handlers will.
	 */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP);
	sigaddset(&sigs, SIGQUIT);

	ret = dcr_store_open(store, &cfg, 0, &fs.st);
	if (ret < 0) {
		dcr_err("cannot open store %s: %s", store, dcr_strerror(ret));
		goto out_session;
	}
	ret = mirrors_wrap(o.mirror ? o.mirror : getenv("DCRFS_MIRROR"),
			   &cfg, &fs.st);
	if (ret < 0)
		goto out_store; /* logged */
	ret = dcr_store_check(fs.st, false, &sinfo);
	if (ret == -ENOENT || ret == -EBADMSG || ret == -EPROTONOSUPPORT)
		goto out_store; /* nothing to mount; logged */
	/* Other errors (a store that is down): the reader starts from its
	 * cache if it has one, and says so. Known, the store's identity
	 * need not be asked for again. */
	ropts.store_info = ret ? NULL : &sinfo;
	ropts.store_err = ret;
	/* The store answers: the old daemon stops, hands over, exits. */
	if (ho && dcrfs_ho_go(ho) < 0)
		goto out_store;
	ret = dcr_mkdir_p(cache_dir, 0700);
	if (ret < 0) {
		dcr_err("cannot create cache directory %s: %s", cache_dir,
			dcr_strerror(ret));
		goto out_store;
	}
	ret = dcr_reader_open(fs.st, &ropts, &fs.r);
	if (ret == -EHOSTUNREACH) {
		dcr_err("not mounted: %s cannot be reached (above) and the "
			"cache in %s holds nothing of it to start from", store,
			cache_dir);
		goto out_store;
	}
	if (ret < 0) {
		dcr_err("cannot open the cache in %s: %s", cache_dir,
			dcr_strerror(ret));
		goto out_store;
	}
	/* The changes of the chunks the mount builds, from which /delta's
	 * views of consecutive versions are assembled (read/dvrec.h): in
	 * memory, within the views' budget and a sixteenth of the
	 * machine's memory; none with -o delta_ahead=off, and with auto
	 * (the default) only once a view is used: keeping them costs a
	 * prefetch about as much CPU as building the chunks. */
	{
		long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
		uint64_t rb = fs.dv.budget;

		if (pages > 0 && psz > 0)
			rb = DCR_MIN(rb, (uint64_t)pages * (uint64_t)psz / 16);
		ret = 0;
		if (fs.dv.ahead == DCRFS_DELTA_AHEAD_OFF)
			rb = 0;
		if (rb)
			ret = dcr_reader_dvrec_enable(fs.r, rb);
		/* auto: kept from the first open of a view (fs/delta.c) */
		if (rb && ret == 0 && fs.dv.ahead == DCRFS_DELTA_AHEAD_AUTO)
			dcr_dvrec_set_active(dcr_reader_dvrec(fs.r), false);
		if (ret < 0) {
			dcr_err("cannot keep the delta view's records: %s",
				dcr_strerror(ret));
			goto out_reader;
		}
	}
	ret = dcr_reader_refresh(fs.r, &latest);
	if (ret < 0) {
		dcr_err("cannot list the versions in %s: %s", store,
			dcr_strerror(ret));
		goto out_reader;
	}
	if (o.metrics && dcrfs_metrics_start(&fs, o.metrics, &metrics) < 0)
		goto out_reader; /* logged */
	/* From the mount on, the exit signals end the session loop (a signal
	 * that comes meanwhile waits, blocked, until the loop runs); threads
	 * started from here on must not take them. */
	pthread_sigmask(SIG_BLOCK, &sigs, &oldsigs);
	if (fuse_set_signal_handlers(fs.se) < 0) {
		dcr_err("cannot install signal handlers");
		goto out_metrics;
	}
	if (ho) /* libfuse takes a descriptor as /dev/fd/N */
		snprintf(devfd_path, sizeof(devfd_path), "/dev/fd/%d",
			 dcrfs_ho_fd(ho));
	if (fuse_session_mount(fs.se, ho ? devfd_path : mountpoint) != 0) {
		dcr_err("cannot mount on %s", mountpoint);
		goto out_signals;
	}
	set_readahead(mountpoint, fs.cfg.read_ahead_kb, o.readahead != NULL);
	dcrfs_pt_install(fs.se, &fs.bk.pt); /* failing, reads take the normal path */
	if (ho) {
		taken_over = true;
		ret = dcrfs_ho_adopt(&fs, ho); /* frees it */
		ho = NULL;
		if (ret < 0)
			goto out_unmount; /* logged */
	}

	/* A service manager follows this daemon from here on: before the
	 * parent of a detached takeover (a unit's ExecReload) exits, so that
	 * systemd, whose main process (the old daemon) is gone, knows it. */
	if (dcrfs_sd_managed()) {
		char msg[32];

		snprintf(msg, sizeof(msg), "MAINPID=%ld", (long)getpid());
		if (dcrfs_sd_notify(msg, NULL, 0) < 0)
			dcr_warn("cannot tell the service manager this "
				 "daemon's pid (NOTIFY_SOCKET)");
	}
	/* From here on, messages go to syslog unless -f. */
	if (ready_fd >= 0) {
		detach_finish(ready_fd, log_path != NULL);
		ready_fd = -1;
	}
	ret = dcrfs_bg_start(&fs);
	if (ret < 0) {
		dcr_err("cannot start background threads: %s",
			dcr_strerror(ret));
		goto out_unmount;
	}
	ret = dcrfs_scrub_start(&fs);
	if (ret < 0) {
		dcr_err("cannot start the scrub: %s", dcr_strerror(ret));
		dcrfs_bg_stop(&fs);
		goto out_unmount;
	}
	if (ho_path[0])
		dcrfs_ho_listen(&fs, ho_path, fixed); /* failing: logged */
	/* One keeper of the connection for a restart after a crash: under
	 * a service manager its fd store, else a holder. A restart keeps the
	 * holder that gave it the mount; a mount on /dev/fd/N cannot be
	 * restarted (--takeover needs its path). */
	if (!hold_path[0] || !o.restart_wait_ms ||
	    !strncmp(mountpoint, "/dev/fd/", 8)) {
		/* no keeper */
	} else if (dcrfs_sd_managed() && !(restarted && !from_store)) {
		int sfd, stored;
		char *sname, old[48];

		dcrfs_ho_store_take(&sfd, &sname, &stored, old);
		dcrfs_ho_fdstore_start(&fs, fixed, sfd, sname ? sname : "",
				       stored, old); /* failing: logged */
		free(sname);
	} else if (!restarted) {
		dcrfs_ho_hold_start(&fs, hold_path, fixed, o.restart_wait_ms,
				    log_path ? log_path :
				    o.foreground ? "" : "syslog");
	}
	if (latest)
		dcr_info("mounted %s on %s, latest v%" PRIu64, store,
			 mountpoint, latest);
	else
		dcr_info("mounted %s on %s, no versions yet", store,
			 mountpoint);

	if (dcrfs_sd_notify("READY=1\nSTATUS=serving", NULL, 0) < 0)
		dcr_warn("cannot tell the service manager that the mount is "
			 "ready (NOTIFY_SOCKET)");
	pthread_sigmask(SIG_SETMASK, &oldsigs, NULL);
	for (;;) {
		ret = run_loop(&fs, &o);
		/* a handover stopped it: send, or serve on if that failed */
		if (!dcrfs_ho_requested())
			break;
		if (dcrfs_ho_send(&fs) == 0) {
			handed_over = true;
			break;
		}
		fuse_session_reset(fs.se);
	}
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	t_stop = dcr_mono_ns();
	if (!handed_over)
		dcrfs_sd_notify("STOPPING=1", NULL, 0);
	dcrfs_ho_stop();
	if (ret < 0)
		dcr_err("session loop failed: %s", dcr_strerror(ret));
	else if (!handed_over)
		dcr_info("unmounting %s", mountpoint);
	exit_code = ret < 0 ? 1 : 0;

	/*
	 * The mount is gone (or going): work still in flight has nobody to
	 * serve. The stop aborts the store's transfers and ends its retries'
	 * waits at once, so the daemon exits, and releases the cache
	 * directory, within a second of the unmount whatever the store does
	 * (a store that is down would otherwise keep it retrying for
	 * s3_timeout per request still queued). Requested before the scrub
	 * stops, so a repair waiting on the store ends at once too.
	 */
	dcr_stop_request();
	dcrfs_scrub_stop(&fs);
	dcrfs_bg_stop(&fs);
	dcrfs_backing_free(&fs);
	t_threads = dcr_mono_ns();
#ifdef DCR_TEST_HOOKS
	/* Test hook (HACKING): a daemon slow to exit after its unmount,
	 * still holding its cache directory (tests/integration/remount.sh). */
	if (getenv("DCRFS_TEST_EXIT_DELAY_MS"))
		usleep((useconds_t)atoi(getenv("DCRFS_TEST_EXIT_DELAY_MS")) * 1000);
#endif
out_unmount:
	if (taken_over && !handed_over) /* libfuse did not mount it */
		dcrfs_ho_unmount(mountpoint);
	else if (!handed_over)
		fuse_session_unmount(fs.se);
out_signals:
	fuse_remove_signal_handlers(fs.se);
out_metrics:
	dcrfs_metrics_stop(metrics);
out_reader:
	t_close = dcr_mono_ns();
	dcr_reader_close(fs.r);
	if (handed_over) {
		/* the new daemon may open the cache now: the rest of the exit
		 * runs while it does */
		dcrfs_ho_release();
		dcr_info("handover: the cache closed %" PRId64 " ms after the "
			 "session loop (threads stopped after %" PRId64 " ms, "
			 "the reader's close began after %" PRId64 " ms)",
			 (dcr_mono_ns() - t_stop) / 1000000,
			 (t_threads - t_stop) / 1000000,
			 (t_close - t_stop) / 1000000);
	}
out_store:
	dcr_store_close(fs.st);
out_session:
	fuse_session_destroy(fs.se);
out_state:
	dcrfs_free_state(&fs);
out_args:
	dcrfs_ho_state_free(ho);
	if (sd_fuse >= 0)
		close(sd_fuse);
	if (sd_state >= 0)
		close(sd_state);
	free(sd_name);
	free(sd_stale);
	free(fixed);
	if (ready_fd >= 0)
		close(ready_fd); /* the parent sees EOF and our exit status */
	fuse_opt_free_args(&args);
	dcrfs_args_free(&o);
	free(store);
	free(mountpoint);
	free(cache_dir);
	free(log_path);
	free(nargv);
	dcrfs_long_opts_free(made);
	dcr_trust_free(fs.trust);
	return exit_code;
}
