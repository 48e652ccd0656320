/* SPDX-License-Identifier: MIT */
/*
 * handover.c - the handover of a mounted dcrfs to a new daemon: the
 * protocol on the handover socket, the stop of the old daemon's readers
 * of /dev/fuse, and the replay of the INIT into the new daemon's libfuse.
 * What it does and in which order is in handover.h.
 *
 * The messages and the STATE they carry are ho_wire.h's (ho_wire.c);
 * the holder of a mount for a restart after a crash is hold.c.
 *
 * Locks: none of its own. The hooks use relaxed atomics and the
 * thread-local request of the session thread (passthrough.c's contract:
 * a reply is written by the thread that read its request). The state of
 * the handover is process-wide (one session per process).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "fdstore.h"
#include "fileio.h"
#include "fs.h"
#include "handover.h"
#include "ho_wire.h"

extern char **environ;

/* ------------------------------------------------------------ kernel ABI */

#define HO_OP_OPEN 14u
#define HO_OP_RELEASE 18u
#define HO_OP_INIT 26u

#define HO_INIT_EXT (1u << 30)
#define HO_INIT2_PASSTHROUGH (1u << 5)

struct ho_out_header {
	uint32_t len;
	int32_t error;
	uint64_t unique;
};

/*
 * FUSE_NOTIFY_RESEND (Linux 6.9, protocol 7.40): the kernel puts every
 * request a daemon read but did not answer back on its queue, their
 * unique marked with bit 63 (FUSE_UNIQUE_RESEND). Debian 12's
 * <linux/fuse.h> predates it, so it is spelled out here.
 */
#define HO_NOTIFY_RESEND 7
/* how long a takeover asks again a socket nobody listens on (a daemon
 * that took the mount over and does not listen yet) */
#define HO_CONNECT_WAIT_MS 5000
#define HO_UNIQUE_RESEND (UINT64_C(1) << 63)

/* ---------------------------------------------------- what a takeover got */

struct dcrfs_ho_state {
	int64_t t_hello, t_go, t_state, t_exit; /* mono ns, for the log */
	int sock;      /* to the old daemon, until it exits, or the holder */
	int fd;        /* /dev/fuse */
	int adopted;
	int from_holder; /* a restart: the daemon is dead, a keeper kept it */
	int from_store;  /* ... and the keeper was systemd's fd store */
	int state_fd;    /* the fd store's state file (-1: none) */
	char *state_name; /* its FDNAME */
	char stale[48];   /* another daemon's state passed with it */
	struct ho_wire w;
	struct ho_counts counts; /* zero from a build without them */
	struct dcrfs_backing_rec *backs;
	struct dcrfs_delta_key *keys;
	char **tags;
};

/* --------------------------------------------------------- process state */

static struct dcrfs *g_fs;
static const char *g_fixed;
static char g_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static int g_lsock = -1, g_quit = -1, g_conn = -1;
static int g_stop_efd = -1; /* readable: stop reading /dev/fuse */
static pthread_t g_thread;
static int g_thread_running;
static atomic_int g_stopping, g_requested, g_handed_over, g_io_seen;

/* INIT as the kernel sent it and the reply it got */
static uint8_t g_init_req[sizeof(struct ho_in_header) + HO_INIT_IN_MAX];
static uint32_t g_init_req_len;
static struct ho_init_out g_init_rep;
static atomic_uint_fast64_t g_init_unique;
static atomic_int g_have_req, g_have_rep;

/* the replay of a new daemon */
static atomic_int g_replaying;
static uint64_t g_replay_unique;
static struct ho_init_out g_replay_rep;

/* opens of files whose handles are pointers (not handed over) */
static atomic_long g_ptr_opens;
/* requests the kernel sent again after a restart (FUSE_UNIQUE_RESEND) */
static atomic_long g_resent;
/* the mount's counts before this daemon (the STATE it adopted) */
static struct ho_counts g_before;
/* what systemd's fd store held of the mount when this daemon adopted
 * it (dcrfs_ho_store_take) */
static struct {
	int fd;         /* the state file passed at a restart, or -1 */
	char *name;
	int stored;     /* the connection is in the store */
	char old[48];   /* the previous daemon's state file, to drop */
} g_store = { .fd = -1 };

static _Thread_local uint32_t tl_op;
static _Thread_local uint64_t tl_unique, tl_nodeid;
static _Thread_local int tl_nb_fd = -1;

/* ------------------------------------------------------------- the hooks */

/* Handles that are pointers into the daemon's memory: status files,
 * /.dcrfs/latest and /delta's files. */
static int ptr_kind(uint64_t nodeid)
{
	return nodeid == DCRFS_INO_STATUS_JSON || nodeid == DCRFS_INO_METRICS ||
	       nodeid == DCRFS_INO_LATEST_FILE ||
	       (nodeid >= DCRFS_INO_DVIEW_BASE && nodeid <= DCRFS_INO_DVIEW_MAX);
}

ssize_t dcrfs_ho_read(int fd, void *buf, size_t len)
{
	atomic_store_explicit(&g_io_seen, 1, memory_order_relaxed);
	/* Non-blocking, so that a reader that lost the race for a request
	 * goes back to poll, where the stop event reaches it. */
	if (tl_nb_fd != fd) {
		int fl = fcntl(fd, F_GETFL);

		if (fl >= 0 && !(fl & O_NONBLOCK))
			fcntl(fd, F_SETFL, fl | O_NONBLOCK);
		tl_nb_fd = fd;
	}
	for (;;) {
		struct pollfd p[2] = { { .fd = fd, .events = POLLIN },
				       { .fd = g_stop_efd, .events = POLLIN } };
		ssize_t n;

		if (atomic_load(&g_stopping)) {
			errno = EINTR; /* the session is exited: the loop ends */
			return -1;
		}
		if (poll(p, 2, -1) < 0)
			return -1; /* EINTR: a signal; libfuse looks at exited */
		if (p[1].revents) {
			errno = EINTR;
			return -1;
		}
		n = read(fd, buf, len);
		if (n < 0 && errno == EAGAIN)
			continue; /* another thread took it */
		return n;
	}
}

void dcrfs_ho_note_request(const void *buf, size_t n)
{
	const struct ho_in_header *in = buf;

	tl_op = in->opcode;
	tl_unique = in->unique;
	tl_nodeid = in->nodeid;
	if (in->opcode == HO_OP_INIT && !atomic_load(&g_have_req)) {
		g_init_req_len = (uint32_t)DCR_MIN(n, sizeof(g_init_req));
		memcpy(g_init_req, buf, g_init_req_len);
		atomic_store(&g_init_unique, in->unique);
		atomic_store(&g_have_req, 1);
	} else if (in->opcode == HO_OP_RELEASE && ptr_kind(in->nodeid) &&
		   n >= sizeof(*in) + sizeof(uint64_t)) {
		uint64_t fh; /* fuse_release_in starts with it */

		memcpy(&fh, (const char *)buf + sizeof(*in), sizeof(fh));
		if (dcrfs_fh_get(fh)) /* not an open from before a restart */
			atomic_fetch_sub(&g_ptr_opens, 1);
	}
	if ((in->unique & HO_UNIQUE_RESEND) &&
	    atomic_fetch_add(&g_resent, 1) == 0)
		dcr_info("restart: serving the requests the dead daemon had "
			 "read, sent again (the first: opcode %u, inode %#"
			 PRIx64 ")", in->opcode, in->nodeid);
}

static void copy_init_out(struct ho_init_out *dst, const struct iovec *iov,
			  int count)
{
	memset(dst, 0, sizeof(*dst));
	if (count >= 2)
		memcpy(dst, iov[1].iov_base, DCR_MIN(iov[1].iov_len,
						     sizeof(*dst)));
}

ssize_t dcrfs_ho_note_reply(const struct iovec *iov, int count)
{
	const struct ho_out_header *h;
	ssize_t total = 0;

	if (count < 1 || iov[0].iov_len != sizeof(*h))
		return 0;
	h = iov[0].iov_base;
	if (atomic_load(&g_replaying) && h->unique == g_replay_unique) {
		copy_init_out(&g_replay_rep, iov, count);
		atomic_store(&g_replaying, 0);
		for (int i = 0; i < count; i++)
			total += (ssize_t)iov[i].iov_len;
		return total; /* the kernel has had its INIT reply */
	}
	if (atomic_load(&g_have_req) && !atomic_load(&g_have_rep) &&
	    h->unique == atomic_load(&g_init_unique)) {
		if (h->error == 0) {
			copy_init_out(&g_init_rep, iov, count);
			atomic_store(&g_have_rep, 1);
			ho_hold_init_answered(); /* it can restart it now */
		}
	} else if (tl_op == HO_OP_OPEN && h->unique == tl_unique &&
		   h->error == 0 && ptr_kind(tl_nodeid)) {
		atomic_fetch_add(&g_ptr_opens, 1);
	}
	return 0;
}

/* ------------------------------------------------------------ the texts */

int dcrfs_ho_sock_path(const char *cache_dir, const char *mountpoint,
		       const char *kind, char *buf, size_t len)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a of the mount point */
	int n;

	for (const char *p = mountpoint; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	n = snprintf(buf, len, "%s/%s-%016" PRIx64 ".sock", cache_dir, kind, h);
	if (n < 0 || (size_t)n >= len || (size_t)n >= sizeof(g_path))
		return DCR_ERR(-ENAMETOOLONG);
	return 0;
}

char *dcrfs_ho_fixed(const struct dcrfs *fs, const char *store,
		     const char *mountpoint, int argc, char **argv)
{
	size_t cap = 256 + strlen(store) + strlen(mountpoint);
	char *s, *p;

	for (int i = 1; i < argc; i++)
		cap += strlen(argv[i]) + 1;
	s = malloc(cap);
	if (!s)
		return NULL;
	p = s + sprintf(s, "store=%s\nmount point=%s\nmount options=", store,
			mountpoint);
	for (int i = 1; i < argc; i++) {
		/* debugging and the foreground may change */
		if (!strcmp(argv[i], "-d") || !strcmp(argv[i], "-f") ||
		    !strcmp(argv[i], "--debug"))
			continue;
		p += sprintf(p, "%s%s", p[-1] == '=' ? "" : " ", argv[i]);
	}
	sprintf(p, "\nmax_read=%u\nreadahead=%u\npassthrough=%s\n",
		fs->cfg.max_read, fs->cfg.read_ahead_kb,
		fs->bk.pt.mode == DCRFS_PT_OFF ? "off" : "auto");
	return s;
}
/* ---------------------------------------------------- the serving side */

static char *refusal(const char *hello)
{
	char *r = NULL;
	long ptr = atomic_load(&g_ptr_opens);

	if (!atomic_load(&g_io_seen))
		return strdup("the session io is not installed (passthrough.c)");
	if (!atomic_load(&g_have_rep))
		return strdup("the mount has not answered the kernel's INIT yet");
	if (ptr > 0 && asprintf(&r, "%ld file(s) of /.dcrfs or /delta are "
				"open; their handles are not handed over (close "
				"them and try again)", ptr) >= 0)
		return r;
	return ho_fixed_diff(g_fixed, hello);
}

/* Talk to one new daemon. 1: it said go, 0: not (closed). */
static int serve_one(int c)
{
	uint32_t type;
	char *msg = NULL, *why = NULL;
	size_t len;
	int ret = ho_peer_ok(c, NULL);

	if (ret < 0) {
		dcr_warn("handover: refused a peer of another user");
		ho_msg_send(c, HO_NO, "not your mount", 14, NULL, 0, -1);
		close(c);
		return 0;
	}
	ret = ho_msg_recv(c, HO_HELLO_WAIT_MS, &type, &msg, &len, NULL);
	if (ret == -EPROTONOSUPPORT) {
		dcr_info("handover: refused a dcrfs that speaks another "
			 "handover protocol");
		ho_msg_send(c, HO_NO, "another protocol", 16, NULL, 0, -1);
	}
	if (ret < 0 || type != HO_HELLO) {
		free(msg);
		close(c);
		return 0;
	}
	why = refusal(msg);
	free(msg);
	if (why) {
		ho_refuse_peer(c, why, "handover: refused");
		return 0;
	}
	if (ho_msg_send(c, HO_YES, NULL, 0, NULL, 0, -1) < 0 ||
	    ho_msg_recv(c, HO_GO_WAIT_MS, &type, &msg, &len, NULL) < 0 ||
	    type != HO_GO) {
		free(msg);
		dcr_info("handover: the new daemon went away before it was "
			 "ready; serving on");
		close(c);
		return 0;
	}
	free(msg);
	dcr_info("handover: stopping; answering the requests read so far");
	g_conn = c;
	atomic_store(&g_requested, 1);
	atomic_store(&g_stopping, 1);
	fuse_session_exit(g_fs->se);
	uint64_t one = 1;
	if (write(g_stop_efd, &one, sizeof(one)) < 0)
		dcr_warn("handover: waking the readers: %s", strerror(errno));
	return 1;
}

static void *listen_main(void *arg)
{
	(void)arg;
	for (;;) {
		struct pollfd p[2] = { { .fd = g_lsock, .events = POLLIN },
				       { .fd = g_quit, .events = POLLIN } };
		int c;

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents)
			break;
		c = accept4(g_lsock, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		if (serve_one(c))
			break;
	}
	return NULL;
}

static int start_thread(void)
{
	int ret = pthread_create(&g_thread, NULL, listen_main, NULL);

	g_thread_running = !ret;
	return -ret;
}

int dcrfs_ho_listen(struct dcrfs *fs, const char *path, const char *fixed)
{
	int ret;

	if (strlen(path) >= sizeof(g_path))
		return DCR_ERR(-ENAMETOOLONG);
	strcpy(g_path, path);
	g_fs = fs;
	g_fixed = fixed;
	g_stop_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	g_quit = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (g_stop_efd < 0 || g_quit < 0) {
		ret = -errno;
		goto fail;
	}
	/* made afresh: the path names this mount point, ours */
	g_lsock = ho_listen(path, NULL);
	if (g_lsock < 0) {
		ret = g_lsock;
		goto fail;
	}
	ret = start_thread();
	if (ret < 0)
		goto fail;
	return 0;
fail:
	dcr_warn("handover: cannot listen on %s: %s (no takeover of this "
		 "mount)", path, dcr_strerror(ret));
	if (g_lsock >= 0)
		close(g_lsock);
	g_lsock = -1;
	return ret;
}

int dcrfs_ho_requested(void)
{
	return atomic_load(&g_requested);
}

/* What dcrfs_ho_send sends after the fixed part: the records and names. */
static int state_tail(struct dcrfs *fs, struct ho_wire *w, char **out,
		      size_t *len)
{
	struct dcrfs_backing_rec *recs = NULL;
	struct dcrfs_delta_key *keys = NULL;
	ssize_t nb = dcrfs_backing_export(fs, &recs);
	ssize_t nd = nb < 0 ? 0 : dcrfs_delta_export(fs, &keys);
	size_t cap, pos;
	char *p;

	if (nb < 0 || nd < 0) {
		free(recs);
		return nb < 0 ? (int)nb : (int)nd;
	}
	pthread_mutex_lock(&fs->tags.lock);
	cap = (size_t)nb * sizeof(*recs) + (size_t)nd * sizeof(*keys) +
	      sizeof(struct ho_counts);
	for (size_t i = 0; i < fs->tags.n; i++)
		cap += strlen(fs->tags.names[i]) + 1;
	p = malloc(cap);
	if (p) {
		memcpy(p, recs, (size_t)nb * sizeof(*recs));
		pos = (size_t)nb * sizeof(*recs);
		memcpy(p + pos, keys, (size_t)nd * sizeof(*keys));
		pos += (size_t)nd * sizeof(*keys);
		for (size_t i = 0; i < fs->tags.n; i++) {
			size_t l = strlen(fs->tags.names[i]) + 1;

			memcpy(p + pos, fs->tags.names[i], l);
			pos += l;
		}
		struct dcrfs_ho_counts c;
		struct ho_counts hc = { .magic = HO_COUNTS_MAGIC,
					.len = sizeof(hc) };

		dcrfs_ho_counts(&c);
		hc.handovers = c.handovers;
		hc.restarts = c.restarts;
		hc.resent = c.resent;
		if (ho_fdstate_name())
			snprintf(hc.fdstate, sizeof(hc.fdstate), "%s",
				 ho_fdstate_name());
		memcpy(p + pos, &hc, sizeof(hc));
		pos += sizeof(hc);
		w->ntags = (uint32_t)fs->tags.n;
		*len = pos;
	}
	pthread_mutex_unlock(&fs->tags.lock);
	free(recs);
	free(keys);
	if (!p)
		return DCR_ERR(-ENOMEM);
	w->nbacking = (uint32_t)nb;
	w->ndelta = (uint32_t)nd;
	*out = p;
	return 0;
}

int ho_state_build(struct dcrfs *fs, struct ho_wire *w, char **tail,
		   size_t *tlen)
{
	if (!atomic_load(&g_have_rep))
		return -EAGAIN; /* nothing to restart from yet */
	memset(w, 0, sizeof(*w));
	w->init_req_len = g_init_req_len;
	memcpy(w->init_req, g_init_req, sizeof(w->init_req));
	w->init_rep = g_init_rep;
	w->pt_offered = atomic_load(&fs->bk.pt.offered);
	w->pt_enabled = atomic_load(&fs->bk.pt.enabled);
	w->pt_disabled = atomic_load(&fs->bk.pt.disabled);
	*tail = NULL;
	*tlen = 0;
	return state_tail(fs, w, tail, tlen);
}

int dcrfs_ho_send(struct dcrfs *fs)
{
	struct ho_wire w;
	char *tail = NULL;
	size_t tlen = 0;
	int ret;

	ret = ho_state_build(fs, &w, &tail, &tlen);
	if (ret == 0)
		ret = ho_msg_send(g_conn, HO_STATE, &w, sizeof(w), tail, tlen,
			       fuse_session_fd(fs->se));
	free(tail);
	if (ret == 0) {
		atomic_store(&g_handed_over, 1);
		ho_hold_retire(0); /* the new daemon starts its own */
		dcr_info("handover: handed %s over (%u open file(s), %u "
			 "tag(s))", fs->mountpoint, w.nbacking, w.ntags);
		return 0; /* g_conn stays open until we exit */
	}
	dcr_err("handover: sending the connection failed (%s); serving on",
		dcr_strerror(ret));
	close(g_conn);
	g_conn = -1;
	uint64_t v;
	if (read(g_stop_efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		dcr_warn("handover: %s", strerror(errno));
	atomic_store(&g_requested, 0);
	atomic_store(&g_stopping, 0);
	pthread_join(g_thread, NULL); /* it ended at the go */
	if (start_thread() < 0)
		dcr_warn("handover: no more takeovers of this mount");
	return ret;
}

void dcrfs_ho_release(void)
{
	if (g_conn >= 0 && atomic_load(&g_handed_over)) {
		close(g_conn);
		g_conn = -1;
	}
}

void dcrfs_ho_stop(void)
{
	uint64_t one = 1;

	ho_hold_retire(!atomic_load(&g_handed_over)); /* unmounting, or
							 * handed over */

	if (g_thread_running) {
		if (write(g_quit, &one, sizeof(one)) < 0)
			dcr_warn("handover: %s", strerror(errno));
		pthread_join(g_thread, NULL);
		g_thread_running = 0;
	}
	if (g_lsock >= 0) {
		close(g_lsock);
		g_lsock = -1;
		if (!atomic_load(&g_handed_over))
			unlink(g_path);
	}
}

/* ------------------------------------------------------- the new daemon */

static int connect_to(const char *path, pid_t *pid)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int s, ret;

	if (strlen(path) >= sizeof(a.sun_path))
		return DCR_ERR(-ENAMETOOLONG);
	strcpy(a.sun_path, path);
	s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	if (connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
		ret = -errno;
		close(s);
		return ret;
	}
	ret = ho_peer_ok(s, pid);
	if (ret < 0) {
		close(s);
		return ret;
	}
	return s;
}

int dcrfs_ho_connect(const char *path, const char *hold_path,
		     const char *fixed, struct dcrfs_ho_state **out)
{
	struct dcrfs_ho_state *s;
	uint32_t type;
	char *msg = NULL;
	size_t len;
	int ret, sock, from_holder = 0, h = 0;
	int64_t until = dcr_mono_ns() + (int64_t)HO_CONNECT_WAIT_MS * 1000000;

	*out = NULL;
	for (;;) {
		sock = connect_to(path, NULL);
		if ((sock == -ECONNREFUSED || sock == -ENOENT) && hold_path) {
			/* no daemon listens: it died; a holder may keep it */
			h = connect_to(hold_path, NULL);
			if (h >= 0) {
				sock = h;
				from_holder = 1;
			}
		}
		/* The socket is there and nobody listens, nor a holder: a
		 * daemon that took the mount over a moment ago and does not
		 * listen yet (its predecessor's socket file), or a dead one.
		 * Ask again for a while before saying it is lost. */
		if (sock != -ECONNREFUSED || dcr_mono_ns() >= until)
			break;
		usleep(50 * 1000);
	}
	if (sock < 0) {
		fprintf(stderr, "dcrfs: takeover: no dcrfs to take over from "
			"and no holder of the mount (%s: %s; %s: %s); is the "
			"mount served by a dcrfs with this cache directory? A "
			"mount whose dcrfs died with no holder (-o "
			"restart_wait=0, or its wait ran out) is lost: unmount "
			"it (fusermount3 -u) and mount again\n", path,
			strerror(-sock), hold_path ? hold_path : "no holder",
			h < 0 ? strerror(-h) : "not asked");
		return h < 0 && h != -ENOENT && h != -ECONNREFUSED ? h : sock;
	}
	ret = ho_msg_send(sock, HO_HELLO, fixed, strlen(fixed), NULL, 0, -1);
	if (ret == 0)
		ret = ho_msg_recv(sock, HO_HELLO_WAIT_MS, &type, &msg, &len, NULL);
	if (ret == -EPROTONOSUPPORT) {
		fprintf(stderr, "dcrfs: takeover refused: the serving dcrfs "
			"speaks another handover protocol (another build); "
			"unmount and mount again to upgrade across it\n");
		close(sock);
		return ret;
	}
	if (ret < 0) {
		fprintf(stderr, "dcrfs: takeover: the serving daemon did not "
			"answer: %s\n", strerror(-ret));
		close(sock);
		return ret;
	}
	if (type != HO_YES) {
		fprintf(stderr, "dcrfs: takeover refused: %s\n",
			type == HO_NO ? msg : "unexpected answer");
		free(msg);
		close(sock);
		return DCR_ERR(-EPERM);
	}
	free(msg);
	s = calloc(1, sizeof(*s));
	if (!s) {
		close(sock);
		return DCR_ERR(-ENOMEM);
	}
	s->sock = sock;
	s->fd = -1;
	s->state_fd = -1;
	s->from_holder = from_holder;
	s->t_hello = dcr_mono_ns();
	*out = s;
	return 0;
}

static int parse_state(struct dcrfs_ho_state *s, const char *p, size_t len);

/* Is @fd /dev/fuse (char 10:229)? */
static int is_dev_fuse(int fd)
{
	struct stat sb;

	return fstat(fd, &sb) == 0 && S_ISCHR(sb.st_mode) &&
	       major(sb.st_rdev) == 10 && minor(sb.st_rdev) == 229;
}

int dcrfs_ho_from_store(int fuse_fd, int state_fd, char *state_name,
			char *stale_name, const char *fixed,
			struct dcrfs_ho_state **out)
{
	struct dcrfs_ho_state *s = calloc(1, sizeof(*s));
	char *rec = NULL, *why = NULL, *had;
	uint32_t flen = 0;
	size_t len = 0;
	int ret;

	*out = NULL;
	if (!s) {
		close(fuse_fd);
		close(state_fd);
		free(state_name);
		free(stale_name);
		return DCR_ERR(-ENOMEM);
	}
	if (stale_name) /* dropped once ours is kept (dcrfs_ho_store_take) */
		snprintf(s->stale, sizeof(s->stale), "%s", stale_name);
	free(stale_name);
	s->sock = -1;
	s->fd = fuse_fd;
	s->state_fd = state_fd;
	s->state_name = state_name;
	s->from_holder = s->from_store = 1;
	s->t_hello = dcr_mono_ns();
	ret = is_dev_fuse(fuse_fd) ? dcrfs_fdstate_read(state_fd, &rec, &len) :
	      DCR_ERR(-EPROTO);
	if (ret == 0 && len >= sizeof(flen))
		memcpy(&flen, rec, sizeof(flen));
	if (ret == 0 && (len < sizeof(flen) || flen > len - sizeof(flen)))
		ret = DCR_ERR(-EBADMSG);
	if (ret < 0) {
		fprintf(stderr, "dcrfs: restart from systemd's fd store: %s: %s "
			"(the mount cannot be restarted: stop the unit, unmount "
			"it with fusermount3 -u and start it again)\n",
			ret == -ENODATA ? "the daemon died before it answered "
			"the kernel's INIT" : "its state file is unreadable",
			strerror(-ret));
		free(rec);
		s->adopted = 1; /* nothing to say again at the free */
		close(s->fd);
		s->fd = -1;
		dcrfs_ho_state_free(s);
		return ret;
	}
	had = strndup(rec + sizeof(flen), flen);
	why = had ? ho_fixed_diff(had, fixed) : NULL;
	if (!had)
		ret = DCR_ERR(-ENOMEM);
	else if (why) {
		fprintf(stderr, "dcrfs: restart from systemd's fd store refused: "
			"%s (the unit's command line changed while the mount "
			"waited: restore it, or stop the unit to unmount)\n",
			why);
		ret = DCR_ERR(-EPERM);
	} else {
		ret = parse_state(s, rec + sizeof(flen) + flen,
				  len - sizeof(flen) - flen);
	}
	free(had);
	free(why);
	free(rec);
	if (ret < 0) {
		if (ret != -EPERM)
			fprintf(stderr, "dcrfs: restart from systemd's fd store: "
				"its state: %s\n", strerror(-ret));
		dcrfs_ho_state_free(s);
		return ret;
	}
	*out = s;
	return 0;
}

static int parse_state(struct dcrfs_ho_state *s, const char *p, size_t len)
{
	size_t need, pos;

	if (len < sizeof(s->w))
		return DCR_ERR(-EPROTO);
	memcpy(&s->w, p, sizeof(s->w));
	need = sizeof(s->w) + (size_t)s->w.nbacking * sizeof(*s->backs) +
	       (size_t)s->w.ndelta * sizeof(*s->keys);
	if (need > len || s->w.init_req_len < sizeof(struct ho_in_header) ||
	    s->w.init_req_len > sizeof(s->w.init_req))
		return DCR_ERR(-EPROTO);
	s->backs = malloc(((size_t)s->w.nbacking + 1) * sizeof(*s->backs));
	s->keys = malloc(((size_t)s->w.ndelta + 1) * sizeof(*s->keys));
	s->tags = calloc((size_t)s->w.ntags + 1, sizeof(*s->tags));
	if (!s->backs || !s->keys || !s->tags)
		return DCR_ERR(-ENOMEM);
	memcpy(s->backs, p + sizeof(s->w),
	       (size_t)s->w.nbacking * sizeof(*s->backs));
	memcpy(s->keys, p + sizeof(s->w) +
	       (size_t)s->w.nbacking * sizeof(*s->backs),
	       (size_t)s->w.ndelta * sizeof(*s->keys));
	pos = need;
	for (uint32_t i = 0; i < s->w.ntags; i++) {
		size_t l = strnlen(p + pos, len - pos);

		if (pos + l >= len)
			return DCR_ERR(-EPROTO);
		s->tags[i] = strdup(p + pos);
		if (!s->tags[i])
			return DCR_ERR(-ENOMEM);
		pos += l + 1;
	}
	/* the counts, from a build that sends them (ho_wire.h) */
	if (len - pos >= 2 * sizeof(uint32_t)) {
		struct ho_counts c = { 0 };

		memcpy(&c, p + pos, DCR_MIN(len - pos, sizeof(c)));
		if (c.magic == HO_COUNTS_MAGIC && c.len <= len - pos) {
			memset((char *)&c + DCR_MIN(c.len, sizeof(c)), 0,
			       sizeof(c) - DCR_MIN(c.len, sizeof(c)));
			s->counts = c;
		}
	}
	return 0;
}

int dcrfs_ho_go(struct dcrfs_ho_state *s)
{
	uint32_t type;
	char *msg = NULL;
	size_t len;
	int ret;

	s->t_go = dcr_mono_ns();
	if (s->from_store) { /* read already; the daemon is dead */
		s->t_state = s->t_exit = s->t_go;
		return 0;
	}
	ret = ho_msg_send(s->sock, HO_GO, NULL, 0, NULL, 0, -1);
	if (ret == 0)
		ret = ho_msg_recv(s->sock, HO_STATE_WAIT_MS, &type, &msg, &len,
			       &s->fd);
	s->t_state = dcr_mono_ns();
	if (ret == 0 && (type != (s->from_holder ? HO_HSTATE : HO_STATE) ||
			 s->fd < 0))
		ret = DCR_ERR(-EPROTO);
	if (ret == 0)
		ret = parse_state(s, msg, len);
	free(msg);
	if (ret == 0 && !is_dev_fuse(s->fd))
		ret = DCR_ERR(-EPROTO);
	if (ret < 0) {
		fprintf(stderr, "dcrfs: takeover: receiving the connection: "
			"%s\n", strerror(-ret));
		return ret;
	}
	if (s->from_holder) {
		/* the daemon is dead (its lock free); the socket stays: our
		 * link to the holder (dcrfs_ho_adopt) */
		s->t_exit = s->t_state;
		return 0;
	}
	/* its end of file: the old daemon closed its cache (its lock is
	 * free: dcrfs_ho_release) or exited */
	ret = ho_msg_recv(s->sock, DCRFS_HO_EXIT_WAIT_MS, &type, &msg, &len, NULL);
	free(msg);
	s->t_exit = dcr_mono_ns();
	if (ret != -ECONNRESET)
		dcr_warn("handover: the old daemon did not close its cache "
			 "within %d ms", DCRFS_HO_EXIT_WAIT_MS);
	close(s->sock);
	s->sock = -1;
	return 0;
}

int dcrfs_ho_fd(const struct dcrfs_ho_state *s)
{
	return s->fd;
}

void dcrfs_ho_state_free(struct dcrfs_ho_state *s)
{
	if (!s)
		return;
	if (s->sock >= 0)
		close(s->sock);
	if (s->state_fd >= 0)
		close(s->state_fd);
	free(s->state_name);
	if (s->fd >= 0 && !s->adopted && s->from_store) {
		/* systemd keeps it: it starts dcrfs again (Restart=) */
		dcr_err("restart: failed after systemd passed the mount; its fd "
			"store holds it still (the unit's Restart= starts "
			"dcrfs again)");
		close(s->fd);
	} else if (s->fd >= 0 && !s->adopted && s->from_holder) {
		/* the holder keeps it: our socket's end makes it wait again */
		dcr_err("restart: failed after the holder gave the mount; it "
			"holds it still: try again (dcrfs --takeover)");
		close(s->fd);
	} else if (s->fd >= 0 && !s->adopted) {
		/* the old daemon is gone: nobody serves the connection now */
		dcr_err("handover: failed after the old daemon handed the mount "
			"over: the mount is lost (it answers \"Transport endpoint "
			"is not connected\"); unmount it (fusermount3 -u) and "
			"mount again");
		close(s->fd);
	}
	for (uint32_t i = 0; s->tags && i < s->w.ntags; i++)
		free(s->tags[i]);
	free(s->tags);
	free(s->backs);
	free(s->keys);
	free(s);
}

/* Say what libfuse negotiated otherwise than the kernel keeps. */
static void compare_init(const struct ho_init_out *k,
			 const struct ho_init_out *n)
{
#define SAME(f, mask) \
	if ((k->f & (mask)) != (n->f & (mask))) \
		dcr_warn("handover: the kernel keeps the first daemon's INIT " \
			 #f " %#x; this daemon would have said %#x", \
			 (unsigned)(k->f & (mask)), (unsigned)(n->f & (mask)))
	SAME(minor, ~0u);
	SAME(max_readahead, ~0u);
	SAME(flags, ~HO_INIT_EXT);
	SAME(flags2, ~HO_INIT2_PASSTHROUGH);
	SAME(max_write, ~0u);
	SAME(time_gran, ~0u);
	SAME(max_pages, 0xffffu);
#undef SAME
}

/*
 * Ask the kernel to send again what was read and not answered: nothing
 * after a handover (the old daemon answered all it read, this one has
 * read nothing yet), so here it only tells whether the kernel can, which
 * a restart after a crash needs (HACKING). Said once.
 */
static void probe_resend(int fd, int restart)
{
	struct ho_out_header h = { sizeof(h), HO_NOTIFY_RESEND, 0 };

	if (restart) {
		/* The dead daemon's requests read and not answered come
		 * back with FUSE_UNIQUE_RESEND in unique, which libfuse
		 * echoes in the reply. */
		if (write(fd, &h, sizeof(h)) == (ssize_t)sizeof(h))
			dcr_info("restart: the kernel sends the requests the "
				 "dead daemon had read again "
				 "(FUSE_NOTIFY_RESEND)");
		else
			dcr_err("restart: the kernel cannot send the requests "
				"the dead daemon had read again "
				"(FUSE_NOTIFY_RESEND: %s; Linux >= 6.9): those "
				"wait for an answer that never comes (their "
				"readers hang until the unmount); every other "
				"request is served", strerror(errno));
		return;
	}
	if (write(fd, &h, sizeof(h)) == (ssize_t)sizeof(h))
		dcr_info("handover: the kernel can send requests in flight "
			 "again (FUSE_NOTIFY_RESEND): a restart after a crash "
			 "can lose none");
	else
		dcr_info("handover: the kernel cannot send requests in "
			 "flight again (FUSE_NOTIFY_RESEND: %s; Linux >= 6.9): "
			 "after a crash, requests in flight would fail",
			 strerror(errno));
}

int dcrfs_ho_adopt(struct dcrfs *fs, struct dcrfs_ho_state *s)
{
	uint8_t buf[sizeof(s->w.init_req)];
	struct ho_in_header *in = (struct ho_in_header *)buf;
	struct fuse_buf fb = { .mem = buf };
	int ret = 0;

	atomic_store(&fs->bk.pt.offered, s->w.pt_offered);
	atomic_store(&fs->bk.pt.enabled, s->w.pt_enabled);
	atomic_store(&fs->bk.pt.disabled, s->w.pt_disabled);

	/* libfuse serves nothing before an INIT: replay the kernel's */
	memcpy(buf, s->w.init_req, s->w.init_req_len);
	in->len = s->w.init_req_len;
	in->uid = in->gid = in->pid = 0;
	g_replay_unique = in->unique;
	fb.size = s->w.init_req_len;
	atomic_store(&g_replaying, 1);
	fuse_session_process_buf(fs->se, &fb);
	if (atomic_load(&g_replaying)) {
		atomic_store(&g_replaying, 0);
		dcr_err("handover: libfuse did not answer the replayed INIT");
		return DCR_ERR(-EPROTO);
	}
	compare_init(&s->w.init_rep, &g_replay_rep);
	probe_resend(fuse_session_fd(fs->se), s->from_holder);
	/* a later handover hands on what the kernel negotiated first */
	memcpy(g_init_req, s->w.init_req, sizeof(g_init_req));
	g_init_req_len = s->w.init_req_len;
	g_init_rep = s->w.init_rep;
	atomic_store(&g_have_req, 1);
	atomic_store(&g_have_rep, 1);

	pthread_mutex_lock(&fs->tags.lock);
	for (uint32_t i = 0; i < s->w.ntags && !ret; i++) {
		if (fs->tags.n == fs->tags.cap) {
			size_t cap = fs->tags.cap ?
				     2 * fs->tags.cap : 16;
			char **p = realloc(fs->tags.names, cap * sizeof(*p));

			if (!p) {
				ret = DCR_ERR(-ENOMEM);
				break;
			}
			fs->tags.names = p;
			fs->tags.cap = cap;
		}
		fs->tags.names[fs->tags.n++] = s->tags[i];
		s->tags[i] = NULL;
	}
	pthread_mutex_unlock(&fs->tags.lock);
	for (uint32_t i = 0; i < s->w.nbacking && !ret; i++)
		ret = dcrfs_backing_adopt(fs, &s->backs[i]);
	for (uint32_t i = 0; i < s->w.ndelta && !ret; i++)
		ret = dcrfs_delta_adopt(fs, &s->keys[i], i);
	s->adopted = 1; /* the session holds the descriptor now */
	g_before = s->counts; /* this daemon's adoption counts below */
	if (s->from_holder)
		g_before.restarts++;
	else
		g_before.handovers++;
	if (s->from_holder && s->sock >= 0) { /* the holder's link is ours now */
		g_fs = fs;
		ho_hold_relink(fs, s->sock, ret == 0);
		s->sock = -1;
	}
	/* what systemd's fd store holds of the mount already */
	g_store.fd = s->state_fd;
	g_store.name = s->state_name;
	s->state_fd = -1;
	s->state_name = NULL;
	g_store.stored = s->from_store || s->counts.fdstate[0];
	memcpy(g_store.old, s->from_store ? s->stale : s->counts.fdstate,
	       sizeof(g_store.old));
	g_store.old[sizeof(g_store.old) - 1] = '\0';
	if (ret < 0)
		dcr_err("handover: adopting the old daemon's state: %s",
			dcr_strerror(ret));
	else
		dcr_info("%s: took over (%u open file(s), %u /delta "
			 "node(s), %u tag(s)); from the go: connection after "
			 "%" PRId64 " ms, the old daemon's cache closed after %" PRId64
			 " ms, ready after %" PRId64 " ms (the store opened "
			 "in the %" PRId64 " ms before the go)",
			 s->from_holder ? "restart" : "handover", s->w.nbacking,
			 s->w.ndelta, s->w.ntags,
			 (s->t_state - s->t_go) / 1000000,
			 (s->t_exit - s->t_go) / 1000000,
			 (dcr_mono_ns() - s->t_go) / 1000000,
			 (s->t_go - s->t_hello) / 1000000);
	dcrfs_ho_state_free(s);
	return ret;
}

void dcrfs_ho_unmount(const char *mountpoint)
{
	char *argv[] = { "fusermount3", "-u", "-q", "-z",
			 (char *)mountpoint, NULL };
	pid_t pid;
	int st;

	if (geteuid() == 0) {
		if (umount2(mountpoint, MNT_DETACH) < 0 && errno != EINVAL &&
		    errno != ENOENT)
			dcr_warn("unmounting %s: %s", mountpoint,
				 strerror(errno));
		return;
	}
	if (posix_spawnp(&pid, "fusermount3", NULL, NULL, argv, environ) ||
	    waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
		dcr_warn("unmounting %s with fusermount3 failed", mountpoint);
}

int dcrfs_ho_restart(const struct dcrfs_ho_state *s)
{
	return s && s->from_holder;
}

long dcrfs_ho_resent(void)
{
	return atomic_load(&g_resent);
}

void dcrfs_ho_counts(struct dcrfs_ho_counts *c)
{
	c->handovers = g_before.handovers;
	c->restarts = g_before.restarts;
	c->resent = g_before.resent + (uint64_t)atomic_load(&g_resent);
	c->keeper = ho_keeper();
}

void dcrfs_ho_store_take(int *state_fd, char **state_name, int *stored,
			 char old[48])
{
	*state_fd = g_store.fd;
	*state_name = g_store.name;
	*stored = g_store.stored;
	memcpy(old, g_store.old, 48);
	g_store.fd = -1;
	g_store.name = NULL;
}
