/* SPDX-License-Identifier: MIT */
/*
 * hold.c - restart after a crash: the holder of a mount's connection
 * (dcrfs --hold-for-restart, handover.h), and the daemon's side of it
 * (starting it, telling it every change of the state, retiring it).
 * The messages are handover.c's (ho_wire.h): a restart is a takeover
 * from the holder instead of a live daemon.
 *
 * Locks: g_hold_lock guards the daemon's link to its holder, so that the
 * state goes whole and in the order the tables changed; taken with none
 * of fs's locks held (ho_state_build takes the tag lock inside it).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>

#include "common.h"
#include "fdstore.h"
#include "fs.h"
#include "handover.h"
#include "ho_wire.h"

extern char **environ;

/* The keepers of this mount's connection, one at a time: the link to
 * its holder (-1: none), or systemd's fd store, whose state file is
 * g_fdstate (-1: none). g_hold_lock guards their messages (they go
 * whole, in the order the tables changed). */
static atomic_int g_hold = -1;
static atomic_int g_fdstate = -1;
static char *g_fdstate_name;    /* its FDNAME */
static char *g_fdstate_fixed;   /* the text a restart must repeat */
static pthread_mutex_t g_hold_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_hold_said;
static struct dcrfs *g_hold_fs; /* whose state they keep */

/* The fd store's record: the fixed text's length, the text, the STATE
 * (fdstore.h). */
static int fdstate_put(int fd, const struct ho_wire *w, const char *tail,
		       size_t tlen)
{
	uint32_t flen = (uint32_t)strlen(g_fdstate_fixed);
	struct iovec iov[4] = {
		{ &flen, sizeof(flen) }, { g_fdstate_fixed, flen },
		{ (void *)w, sizeof(*w) }, { (void *)tail, tlen },
	};

	return dcrfs_fdstate_write(fd, iov, 4);
}

/* The daemon's side: the keeper gets the whole state at each change. */
static void hold_update_locked(struct dcrfs *fs)
{
	struct ho_wire w;
	char *tail = NULL;
	size_t tlen = 0;
	int ret;

	if (g_hold < 0 && g_fdstate < 0)
		return;
	ret = ho_state_build(fs, &w, &tail, &tlen);
	if (ret == -EAGAIN)
		return; /* sent once the kernel's INIT is answered */
	if (ret == 0 && g_hold >= 0)
		ret = ho_msg_send(g_hold, HO_STATE, &w, sizeof(w), tail, tlen, -1);
	else if (ret == 0)
		ret = fdstate_put(g_fdstate, &w, tail, tlen);
	free(tail);
	if (ret < 0 && !atomic_exchange(&g_hold_said, 1))
		dcr_err("restart: telling the %s failed (%s): a crash of "
			"this daemon now loses the mount", g_hold >= 0 ?
			"holder" : "fd store's state file", dcr_strerror(ret));
}

void dcrfs_ho_hold_update(struct dcrfs *fs)
{
	/* unlocked peek: set before the session loop */
	if (g_hold < 0 && g_fdstate < 0)
		return;
	pthread_mutex_lock(&g_hold_lock);
	hold_update_locked(fs);
	pthread_mutex_unlock(&g_hold_lock);
}

void ho_hold_relink(struct dcrfs *fs, int sock, int tell)
{
	pthread_mutex_lock(&g_hold_lock);
	g_hold_fs = fs;
	g_hold = sock;
	if (tell)
		hold_update_locked(fs);
	pthread_mutex_unlock(&g_hold_lock);
}

const char *ho_keeper(void)
{
	return atomic_load(&g_hold) >= 0 ? "holder" :
	       atomic_load(&g_fdstate) >= 0 ? "systemd" : "none";
}

const char *ho_fdstate_name(void)
{
	return g_fdstate_name;
}

void ho_hold_init_answered(void)
{
	if (g_hold_fs)
		dcrfs_ho_hold_update(g_hold_fs);
}

int dcrfs_ho_fdstore_start(struct dcrfs *fs, const char *fixed,
			   int state_fd, const char *state_name,
			   int fuse_stored, const char *old_name)
{
	char name[64], msg[128];
	int fds[1], ret = 0;

	if (state_fd < 0) {
		snprintf(name, sizeof(name), DCRFS_FDNAME_STATE "%ld",
			 (long)getpid());
		state_name = name;
		state_fd = dcrfs_fdstate_create(name);
		if (state_fd < 0) {
			dcr_err("restart: cannot make the fd store's state "
				"file (%s): if this daemon dies, the mount is "
				"lost", dcr_strerror(state_fd));
			return state_fd;
		}
	}
	pthread_mutex_lock(&g_hold_lock);
	g_fdstate_fixed = strdup(fixed);
	g_fdstate_name = strdup(state_name);
	if (!g_fdstate_fixed || !g_fdstate_name) {
		pthread_mutex_unlock(&g_hold_lock);
		close(state_fd);
		return DCR_ERR(-ENOMEM);
	}
	g_hold_fs = fs;
	g_fdstate = state_fd;
	hold_update_locked(fs); /* a takeover knows its INIT already */
	pthread_mutex_unlock(&g_hold_lock);
	/* systemd keeps what it has: a restart from the store stores
	 * nothing again; a takeover stores its state, then drops the old
	 * daemon's (a crash between the two leaves both: the restart takes
	 * the newer, fdstore.h) */
	if (state_name == name) {
		fds[0] = state_fd;
		snprintf(msg, sizeof(msg), "FDSTORE=1\nFDNAME=%s", name);
		ret = dcrfs_sd_notify(msg, fds, 1);
	}
	if (ret >= 0 && !fuse_stored) {
		fds[0] = fuse_session_fd(fs->se);
		ret = dcrfs_sd_notify("FDSTORE=1\nFDNAME=" DCRFS_FDNAME_FUSE,
				      fds, 1);
	}
#ifdef DCR_TEST_HOOKS
	/* Test hook (HACKING): a takeover's daemon killed between storing
	 * its state and dropping its predecessor's (tests/integration/
	 * fdstore.sh); one-shot: the file is removed. */
	{
		const char *die = getenv("DCRFS_TEST_FDSTORE_DIE_BEFORE_DROP");

		if (ret >= 0 && die && old_name && old_name[0] &&
		    unlink(die) == 0) {
			/* after systemd saw the reload end (a main process
			 * dying within it can be taken for a clean stop) */
			sleep(1);
			dcr_info("test hook: killed before dropping %s",
				 old_name);
			raise(SIGKILL);
		}
	}
#endif
	if (ret >= 0 && old_name && old_name[0] && strcmp(old_name,
							   state_name)) {
		snprintf(msg, sizeof(msg), "FDSTOREREMOVE=1\nFDNAME=%s",
			 old_name);
		ret = dcrfs_sd_notify(msg, NULL, 0);
	}
	if (ret < 0) {
		dcr_err("restart: cannot store the connection in systemd's fd "
			"store (%s): if this daemon dies, the mount is lost",
			dcr_strerror(ret));
		return ret;
	}
	dcr_info("restart: systemd's fd store keeps the mount for a restart "
		 "after a crash (%s, %s; FileDescriptorStoreMax= of the unit "
		 "must be 2 or more)%s%s", DCRFS_FDNAME_FUSE, state_name,
		 old_name && old_name[0] ? "; dropped " : "",
		 old_name && old_name[0] ? old_name : "");
	return 0;
}

void ho_hold_retire(int unmount)
{
	char msg[128];

	pthread_mutex_lock(&g_hold_lock);
	if (g_fdstate >= 0) {
		/* a handover: the new daemon replaces the state, which stays
		 * until then; an unmount: nothing to keep */
		if (unmount) {
			dcrfs_sd_notify("FDSTOREREMOVE=1\nFDNAME="
					DCRFS_FDNAME_FUSE, NULL, 0);
			snprintf(msg, sizeof(msg), "FDSTOREREMOVE=1\nFDNAME=%s",
				 g_fdstate_name);
			dcrfs_sd_notify(msg, NULL, 0);
		}
		close(g_fdstate);
		g_fdstate = -1;
	}
	if (g_hold >= 0) {
		ho_msg_send(g_hold, HO_RETIRE, NULL, 0, NULL, 0, -1);
		close(g_hold);
		g_hold = -1;
	}
	pthread_mutex_unlock(&g_hold_lock);
}

int dcrfs_ho_hold_start(struct dcrfs *fs, const char *path, const char *fixed,
			unsigned int wait_ms, const char *log)
{
	posix_spawn_file_actions_t fa;
	char ms[16], lvl[8], *argv[8];
	int sv[2], ret;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return DCR_ERR(-errno);
	snprintf(ms, sizeof(ms), "%u", wait_ms);
	snprintf(lvl, sizeof(lvl), "%d", (int)dcr_log_get_level());
	argv[0] = "dcrfs-hold";
	argv[1] = (char *)DCRFS_HOLD_ARG;
	argv[2] = (char *)path;
	argv[3] = ms;
	argv[4] = (char *)(log ? log : "");
	argv[5] = (char *)fs->mountpoint;
	argv[6] = lvl; /* the daemon's -o log_level */
	argv[7] = NULL;
	ret = posix_spawn_file_actions_init(&fa);
	if (ret == 0)
		ret = posix_spawn_file_actions_adddup2(&fa,
			fuse_session_fd(fs->se), DCRFS_HOLD_FUSE_FD);
	if (ret == 0)
		ret = posix_spawn_file_actions_adddup2(&fa, sv[1],
						       DCRFS_HOLD_LINK_FD);
	if (ret == 0)
		ret = posix_spawn_file_actions_addopen(&fa, STDIN_FILENO,
						       "/dev/null", O_RDWR, 0);
	if (ret == 0)
		ret = posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO,
						       "/dev/null", O_RDWR, 0);
	/* its own program: a holder keeps no memory of the daemon's */
	if (ret == 0)
		ret = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv,
				  environ);
	posix_spawn_file_actions_destroy(&fa);
	close(sv[1]);
	if (ret == 0)
		ret = ho_msg_send(sv[0], HO_HELLO, fixed, strlen(fixed), NULL, 0,
			       -1);
	if (ret != 0) {
		ret = ret > 0 ? -ret : ret;
		close(sv[0]);
		dcr_warn("restart: cannot start the holder of the mount (%s): "
			 "if this daemon dies, the mount is lost",
			 dcr_strerror(ret));
		return ret;
	}
	pthread_mutex_lock(&g_hold_lock);
	g_hold_fs = fs;
	g_hold = sv[0];
	hold_update_locked(fs); /* a takeover knows its INIT already */
	pthread_mutex_unlock(&g_hold_lock);
	dcr_info("restart: holder %d keeps the mount for a restart after a "
		 "crash (dcrfs --takeover), %u s at most", (int)pid,
		 wait_ms / 1000);
	return 0;
}

/* The holder's side. */

static void dcrfs_hold_syslog_sink(enum dcr_log_level lvl, const char *msg)
{
	static const int prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO,
				    LOG_DEBUG };

	syslog(prio[lvl <= DCR_LOG_DEBUG ? lvl : DCR_LOG_DEBUG], "%s", msg);
}

/* The socket file this holder made (its inode): unlinked at exit only
 * while it is still ours, not a newer holder's. */
static dev_t g_hold_dev;
static ino_t g_hold_ino;

static void hold_unlink(const char *path)
{
	struct stat sb;

	if (stat(path, &sb) == 0 && sb.st_dev == g_hold_dev &&
	    sb.st_ino == g_hold_ino)
		unlink(path);
}

/* Listen on @path (made afresh): the socket, or -errno. */
static int hold_listen(const char *path)
{
	struct stat sb;
	int l = ho_listen(path, &sb);

	if (l >= 0) {
		g_hold_dev = sb.st_dev;
		g_hold_ino = sb.st_ino;
	}
	return l;
}

/* Give the mount to the daemon on @c: 1 given (@c is the link now), 0
 * not (closed). */
static int hold_give(int c, const char *fixed, const char *st, size_t stlen)
{
	uint32_t type;
	char *msg = NULL, *why;
	size_t len;

	if (ho_peer_ok(c, NULL) < 0) {
		dcr_warn("refused a peer of another user");
		ho_msg_send(c, HO_NO, "not your mount", 14, NULL, 0, -1);
		close(c);
		return 0;
	}
	if (ho_msg_recv(c, HO_HELLO_WAIT_MS, &type, &msg, &len, NULL) < 0 ||
	    type != HO_HELLO) {
		free(msg);
		close(c);
		return 0;
	}
	why = ho_fixed_diff(fixed, msg);
	free(msg);
	msg = NULL;
	if (why) {
		ho_refuse_peer(c, why, "refused a restart");
		return 0;
	}
	if (ho_msg_send(c, HO_YES, NULL, 0, NULL, 0, -1) < 0 ||
	    ho_msg_recv(c, HO_GO_WAIT_MS, &type, &msg, &len, NULL) < 0 ||
	    type != HO_GO ||
	    ho_msg_send(c, HO_HSTATE, st, stlen, NULL, 0, DCRFS_HOLD_FUSE_FD) < 0) {
		free(msg);
		dcr_info("a restarting daemon went away; holding on");
		close(c);
		return 0;
	}
	free(msg);
	return 1;
}

int dcrfs_ho_hold_main(int argc, char **argv)
{
	const char *path, *mnt;
	char *fixed = NULL, *st = NULL;
	size_t stlen = 0;
	unsigned int wait_ms;
	int link = DCRFS_HOLD_LINK_FD, lsock, restarts = 0;
	int64_t deadline = 0;

	if (argc != 7)
		return 2;
	/* nothing of the daemon's but the two descriptors: not its cache
	 * directory's lock above all */
	for (int fd = DCRFS_HOLD_LINK_FD + 1; fd < 1024; fd++)
		close(fd);
	path = argv[2];
	wait_ms = (unsigned int)strtoul(argv[3], NULL, 10);
	mnt = argv[5];
	dcr_log_set_prog("dcrfs-hold");
	dcr_log_set_level((enum dcr_log_level)atoi(argv[6]));
	if (argv[4][0] == '/') {
		if (dcr_log_to_file(argv[4]) == 0)
			dcr_log_quiet_sink(true);
	} else if (!strcmp(argv[4], "syslog")) {
		openlog("dcrfs-hold", LOG_PID, LOG_DAEMON);
		dcr_log_set_sink(dcrfs_hold_syslog_sink);
	}
	signal(SIGPIPE, SIG_IGN);
	signal(SIGINT, SIG_IGN); /* the daemon's terminal's: not ours */
	signal(SIGHUP, SIG_IGN);
	setsid();
	/* Listening from the start, accepting only once the daemon is gone:
	 * a restart that comes before we saw its end waits in the backlog. */
	lsock = hold_listen(path);
	if (lsock < 0)
		dcr_err("cannot listen on %s (%s): if the dcrfs of %s dies, the "
			"mount is lost", path, strerror(-lsock), mnt);
	for (;;) {
		struct pollfd p[2] = {
			{ .fd = DCRFS_HOLD_FUSE_FD, .events = 0 },
			{ .fd = link >= 0 ? link : lsock, .events = POLLIN },
		};
		int64_t left = deadline ? (deadline - dcr_mono_ns()) / 1000000 : -1;
		int r;

		if (deadline && left <= 0) {
			dcr_err("no dcrfs came back to %s within %u s: giving "
				"the mount up (it answers \"Transport endpoint "
				"is not connected\"; unmount it: fusermount3 -u "
				"%s)", mnt, wait_ms / 1000, mnt);
			break;
		}
		r = poll(p, 2, deadline ? (int)DCR_MIN(left, INT32_MAX) : -1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			break;
		if (p[0].revents & (POLLERR | POLLHUP | POLLNVAL)) {
			dcr_info("the connection of %s is gone (unmounted): exiting", mnt);
			break; /* unmounted or aborted: nothing to hold */
		}
		if (link >= 0 && p[1].revents) {
			uint32_t type;
			char *msg = NULL;
			size_t len;
			int ret = ho_msg_recv(link, HO_STATE_WAIT_MS, &type, &msg,
					   &len, NULL);

			if (ret == 0 && type == HO_RETIRE) {
				free(msg);
				dcr_debug("retired: exiting");
				break;
			}
			if (ret == 0 && type == HO_HELLO && !fixed) {
				fixed = msg;
				continue;
			}
			if (ret == 0 && type == HO_STATE &&
			    len >= sizeof(struct ho_wire)) {
				free(st);
				st = msg;
				stlen = len;
				continue;
			}
			free(msg);
			/* the daemon died (or spoke nonsense): wait for the
			 * next one, with the last whole state it sent */
			close(link);
			link = -1;
			if (!fixed || !st) {
				dcr_err("the dcrfs of %s died before it had "
					"answered the kernel's INIT: nothing "
					"to restart; the mount is lost "
					"(fusermount3 -u %s)", mnt, mnt);
				break;
			}
			if (lsock < 0) {
				dcr_err("the dcrfs of %s died and the holder "
					"does not listen on %s: the mount is "
					"lost (fusermount3 -u %s)", mnt, path,
					mnt);
				break;
			}
			deadline = dcr_mono_ns() + (int64_t)wait_ms * 1000000;
			dcr_warn("the dcrfs of %s died; holding the mount for "
				 "a restart (dcrfs --takeover STORE %s) for %u "
				 "s; readers wait meanwhile", mnt, mnt,
				 wait_ms / 1000);
			continue;
		}
		if (link < 0 && lsock >= 0 && p[1].revents) {
			int c = accept4(lsock, NULL, NULL, SOCK_CLOEXEC);

			if (c < 0 || !hold_give(c, fixed, st, stlen))
				continue;
			link = c;
			deadline = 0;
			restarts++;
			dcr_info("gave %s to a restarted dcrfs (restart %d)",
				 mnt, restarts);
		}
	}
	if (lsock >= 0) {
		close(lsock);
		hold_unlink(path); /* a new holder's may have replaced it */
	}
	free(fixed);
	free(st);
	/* our descriptor closes with us: if nobody else holds it, the
	 * connection ends */
	return 0;
}
