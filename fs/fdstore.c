/* SPDX-License-Identifier: MIT */
/*
 * fdstore.c - systemd's notify protocol, its passed descriptors and the
 * state file of its fd store (fdstore.h).
 *
 * Written here rather than linked from libsystemd: the two halves used
 * are a sendmsg(2) to a Unix datagram socket and three environment
 * variables, both documented as stable interfaces (sd_notify(3),
 * sd_listen_fds(3)); without a new build dependency the code is built,
 * and tested, everywhere dcrfs is.
 *
 * Locks: none; the state file has one writer (hold.c's lock).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "fdstore.h"
#include "fileio.h"
#include "hash.h"

/* ------------------------------------------------------------ sd_notify */

int dcrfs_sd_managed(void)
{
	const char *e = getenv("NOTIFY_SOCKET");

	return e && e[0];
}

int dcrfs_sd_notify(const char *text, const int *fds, int nfds)
{
	const char *e = getenv("NOTIFY_SOCKET");
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct iovec iov = { (void *)text, strlen(text) };
	struct msghdr m = { .msg_name = &a, .msg_iov = &iov, .msg_iovlen = 1 };
	union {
		struct cmsghdr c;
		char buf[CMSG_SPACE(sizeof(int) * 4)];
	} u;
	size_t n;
	int s, ret = 1;

	if (!e || !e[0])
		return 0;
	n = strlen(e);
	if ((e[0] != '/' && e[0] != '@') || n >= sizeof(a.sun_path) ||
	    nfds < 0 || nfds > 4)
		return DCR_ERR(-EINVAL);
	memcpy(a.sun_path, e, n);
	if (e[0] == '@')
		a.sun_path[0] = '\0'; /* an abstract address */
	m.msg_namelen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
	if (nfds) {
		memset(&u, 0, sizeof(u));
		m.msg_control = u.buf;
		m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		u.c.cmsg_level = SOL_SOCKET;
		u.c.cmsg_type = SCM_RIGHTS;
		u.c.cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(&u.c), fds, sizeof(int) * (size_t)nfds);
	}
	s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	if (sendmsg(s, &m, MSG_NOSIGNAL) < 0)
		ret = -errno;
	close(s);
	return ret;
}

/* -------------------------------------------------------- sd_listen_fds */

#define SD_LISTEN_FDS_START 3

/* The sequence of the state in @fd (0: none or unreadable). */
static uint64_t fdstate_seq(int fd)
{
	char *rec = NULL;
	size_t len;
	uint64_t seq = 0;

	if (dcrfs_fdstate_read(fd, &rec, &len) == 0)
		seq = dcrfs_fdstate_seq_of(fd);
	free(rec);
	return seq;
}

int dcrfs_sd_listen(int *fuse_fd, int *state_fd, char **state_name,
		    char **stale_name)
{
	int sfd[2] = { -1, -1 };
	char *sname[2] = { NULL, NULL };
	const char *pid = getenv("LISTEN_PID"), *nfd = getenv("LISTEN_FDS");
	const char *names = getenv("LISTEN_FDNAMES");
	char *list = NULL, *save = NULL, *name;
	long n;
	int ret = 0, states = 0;

	*fuse_fd = *state_fd = -1;
	*state_name = *stale_name = NULL;
	if (!pid || !nfd || strtol(pid, NULL, 10) != (long)getpid())
		return 0;
	n = strtol(nfd, NULL, 10);
	list = strdup(names ? names : "");
	if (!list)
		return DCR_ERR(-ENOMEM);
	name = strtok_r(list, ":", &save);
	for (long i = 0; i < n && i < 64; i++) {
		int fd = SD_LISTEN_FDS_START + (int)i;

		if (name && !strcmp(name, DCRFS_FDNAME_FUSE) && *fuse_fd < 0) {
			*fuse_fd = fd;
			fcntl(fd, F_SETFD, FD_CLOEXEC);
		} else if (name && !strncmp(name, DCRFS_FDNAME_STATE,
					    strlen(DCRFS_FDNAME_STATE)) &&
			   states < 2) {
			sfd[states] = fd;
			sname[states++] = strdup(name);
			fcntl(fd, F_SETFD, FD_CLOEXEC);
		} else {
			close(fd); /* not ours: an fd store holds only these */
		}
		name = strtok_r(NULL, ":", &save);
	}
	free(list);
	/* Two states: a takeover's daemon died between storing its own and
	 * dropping its predecessor's; the newer whole one is the mount's. */
	if (states == 2 && fdstate_seq(sfd[1]) > fdstate_seq(sfd[0])) {
		int f = sfd[0];
		char *fname = sname[0];

		sfd[0] = sfd[1];
		sname[0] = sname[1];
		sfd[1] = f;
		sname[1] = fname;
	}
	*state_fd = sfd[0];
	*state_name = sname[0];
	if (states == 2) {
		close(sfd[1]);
		*stale_name = sname[1]; /* NULL (no memory): not dropped */
	}
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	if (*fuse_fd < 0 && *state_fd < 0)
		return 0;
	if (*fuse_fd < 0 || *state_fd < 0 || !*state_name) {
		fprintf(stderr, "dcrfs: systemd passed %s%s%s: not a mount to "
			"restart (the unit's fd store holds a connection and "
			"its state)\n", *fuse_fd < 0 ? "no connection" :
			"a connection", *state_fd < 0 ? " and no state" : "",
			*state_name || *state_fd < 0 ? "" : " (no memory)");
		ret = *fuse_fd < 0 || *state_fd < 0 ? DCR_ERR(-EBADF) :
		      DCR_ERR(-ENOMEM);
		if (*fuse_fd >= 0)
			close(*fuse_fd);
		if (*state_fd >= 0)
			close(*state_fd);
		free(*state_name);
		free(*stale_name);
		*fuse_fd = *state_fd = -1;
		*state_name = *stale_name = NULL;
		return ret;
	}
	return 1;
}

/* ---------------------------------------------------------- state file */

#define FDSTATE_MAGIC 0x44435346u /* "DCSF" */
#define FDSTATE_PAGE 4096u
#define FDSTATE_MAX (256u << 20)

/* The first page's header: 48 bytes, written by one pwrite at 0. */
struct fdstate_hdr {
	uint32_t magic, pad;
	uint64_t seq;         /* 0: nothing written yet */
	uint64_t off, len;    /* the live record */
	uint8_t check[DCR_XXH_LEN]; /* XXH3-128 of the record */
};
_Static_assert(sizeof(struct fdstate_hdr) == 48, "fdstate_hdr");

int dcrfs_fdstate_create(const char *name)
{
	struct fdstate_hdr h = { .magic = FDSTATE_MAGIC };
	int fd = memfd_create(name, MFD_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (pwrite(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
		int ret = errno ? -errno : DCR_ERR(-EIO);

		close(fd);
		return ret;
	}
	return fd;
}

static int read_hdr(int fd, struct fdstate_hdr *h)
{
	ssize_t n = pread(fd, h, sizeof(*h), 0);

	if (n < 0)
		return -errno;
	if (n != (ssize_t)sizeof(*h) || h->magic != FDSTATE_MAGIC)
		return DCR_ERR(-EBADMSG);
	return 0;
}

uint64_t dcrfs_fdstate_seq_of(int fd)
{
	struct fdstate_hdr h;

	return read_hdr(fd, &h) == 0 ? h.seq : 0;
}

int dcrfs_fdstate_write(int fd, const struct iovec *iov, int n)
{
	struct fdstate_hdr h;
	size_t len = 0;
	uint64_t off;
	char *buf, *p;
	ssize_t w;
	int ret = read_hdr(fd, &h);

	if (ret < 0)
		return ret;
	for (int i = 0; i < n; i++)
		len += iov[i].iov_len;
	if (len > FDSTATE_MAX)
		return DCR_ERR(-EMSGSIZE);
	buf = malloc(len ? len : 1);
	if (!buf)
		return DCR_ERR(-ENOMEM);
	p = buf;
	for (int i = 0; i < n; i++) {
		memcpy(p, iov[i].iov_base, iov[i].iov_len);
		p += iov[i].iov_len;
	}
	/* where it does not touch the live record: before it, else after */
	if (!h.seq || FDSTATE_PAGE + len <= h.off)
		off = FDSTATE_PAGE;
	else
		off = (h.off + h.len + FDSTATE_PAGE - 1) / FDSTATE_PAGE *
		      FDSTATE_PAGE;
	ret = dcr_pwrite_full(fd, buf, len, off);
	if (ret < 0) {
		free(buf);
		return ret;
	}
	dcr_xxh128(buf, len, h.check);
	free(buf);
	/* increasing across the files of one boot (two daemons' states:
	 * dcrfs_sd_listen keeps the newer) */
	{
		struct timespec ts;
		uint64_t now = 0;

		if (clock_gettime(CLOCK_BOOTTIME, &ts) == 0)
			now = (uint64_t)ts.tv_sec * 1000000000u +
			      (uint64_t)ts.tv_nsec;
		h.seq = now > h.seq ? now : h.seq + 1;
	}
	h.off = off;
	h.len = len;
	/* the switch: one write within the first page */
	w = pwrite(fd, &h, sizeof(h), 0);
	if (w != (ssize_t)sizeof(h))
		return w < 0 ? -errno : DCR_ERR(-EIO);
	return 0;
}

int dcrfs_fdstate_read(int fd, char **out, size_t *len)
{
	struct fdstate_hdr h;
	uint8_t check[DCR_XXH_LEN];
	char *buf;
	int ret = read_hdr(fd, &h);

	*out = NULL;
	*len = 0;
	if (ret < 0)
		return ret;
	if (!h.seq)
		return -ENODATA;
	if (h.len > FDSTATE_MAX || h.off < FDSTATE_PAGE)
		return DCR_ERR(-EBADMSG);
	buf = malloc(h.len + 1);
	if (!buf)
		return DCR_ERR(-ENOMEM);
	ret = dcr_pread_full(fd, buf, h.len, h.off);
	if (ret < 0) {
		free(buf);
		return ret == -ENODATA ? DCR_ERR(-EBADMSG) : ret;
	}
	dcr_xxh128(buf, h.len, check);
	if (memcmp(check, h.check, sizeof(check))) {
		free(buf);
		return DCR_ERR(-EBADMSG);
	}
	buf[h.len] = '\0';
	*out = buf;
	*len = h.len;
	return 0;
}
