/* SPDX-License-Identifier: MIT */
/*
 * ho_wire.c - the messages of a handover and a restart (ho_wire.h): a
 * header and a payload on a Unix stream socket, a descriptor passed with
 * the first bytes, the peer's credentials, and the comparison of what a
 * mount fixes (dcrfs_ho_fixed) that says why a peer is refused.
 *
 * Locks: none; one caller per socket at a time.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "common.h"
#include "ho_wire.h"

/* Wait for @fd to be readable, @ms at most: 0, -ETIMEDOUT or -errno. */
static int wait_in(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int r;

	do
		r = poll(&p, 1, ms);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	return r ? 0 : -ETIMEDOUT;
}

int ho_msg_send(int sock, uint32_t type, const void *a, size_t alen,
		    const void *b, size_t blen, int pass_fd)
{
	struct ho_hdr h = { HO_MAGIC, type, (uint32_t)(alen + blen), 0 };
	struct iovec iov[3] = { { &h, sizeof(h) }, { (void *)a, alen },
				{ (void *)b, blen } };
	union {
		struct cmsghdr c;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = 3 };
	size_t left = sizeof(h) + alen + blen;

	if (alen + blen > HO_MSG_MAX)
		return DCR_ERR(-EMSGSIZE);
	if (pass_fd >= 0) {
		memset(&u, 0, sizeof(u));
		m.msg_control = u.buf;
		m.msg_controllen = sizeof(u.buf);
		u.c.cmsg_level = SOL_SOCKET;
		u.c.cmsg_type = SCM_RIGHTS;
		u.c.cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(&u.c), &pass_fd, sizeof(int));
	}
	while (left) {
		ssize_t n = sendmsg(sock, &m, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : DCR_ERR(-EPIPE);
		left -= (size_t)n;
		m.msg_control = NULL; /* the descriptor went with the first */
		m.msg_controllen = 0;
		while (n > 0 && m.msg_iovlen) {
			size_t k = DCR_MIN((size_t)n, m.msg_iov->iov_len);

			m.msg_iov->iov_base = (char *)m.msg_iov->iov_base + k;
			m.msg_iov->iov_len -= k;
			n -= (ssize_t)k;
			if (!m.msg_iov->iov_len) {
				m.msg_iov++;
				m.msg_iovlen--;
			}
		}
	}
	return 0;
}

/* Receive one message within @ms: its type, its payload (malloc'ed,
 * NUL-terminated, *@len bytes) and a descriptor passed with it (*@fd,
 * -1: none; NULL: one is refused). 0, -ECONNRESET at end of file, or
 * -errno. */
int ho_msg_recv(int sock, int ms, uint32_t *type, char **payload,
		    size_t *len, int *fd)
{
	struct ho_hdr h;
	union {
		struct cmsghdr c;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct iovec iov = { &h, sizeof(h) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = u.buf,
			    .msg_controllen = sizeof(u.buf) };
	size_t got = 0;
	char *p;
	int ret, rfd = -1;

	*payload = NULL;
	if (fd)
		*fd = -1;
	while (got < sizeof(h)) {
		ssize_t n;

		ret = wait_in(sock, ms);
		if (ret < 0)
			return ret;
		iov.iov_base = (char *)&h + got;
		iov.iov_len = sizeof(h) - got;
		n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -ECONNRESET;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c;
		     c = CMSG_NXTHDR(&m, c))
			if (c->cmsg_level == SOL_SOCKET &&
			    c->cmsg_type == SCM_RIGHTS && rfd < 0)
				memcpy(&rfd, CMSG_DATA(c), sizeof(int));
		m.msg_control = NULL;
		m.msg_controllen = 0;
		got += (size_t)n;
	}
	if (h.magic != HO_MAGIC) {
		ret = DCR_ERR(-EPROTONOSUPPORT); /* another build's protocol */
		goto fail;
	}
	if (h.len > HO_MSG_MAX) {
		ret = DCR_ERR(-EPROTO);
		goto fail;
	}
	p = malloc((size_t)h.len + 1);
	if (!p) {
		ret = DCR_ERR(-ENOMEM);
		goto fail;
	}
	for (got = 0; got < h.len;) {
		ssize_t n;

		ret = wait_in(sock, ms);
		if (ret < 0) {
			free(p);
			goto fail;
		}
		n = read(sock, p + got, h.len - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			ret = n < 0 ? -errno : -ECONNRESET;
			free(p);
			goto fail;
		}
		got += (size_t)n;
	}
	p[h.len] = '\0';
	*type = h.type;
	*payload = p;
	*len = h.len;
	if (fd)
		*fd = rfd;
	else if (rfd >= 0)
		close(rfd);
	return 0;
fail:
	if (rfd >= 0)
		close(rfd);
	return ret;
}

int ho_listen(const char *path, struct stat *sb)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct stat st;
	int l;

	if (strlen(path) >= sizeof(a.sun_path))
		return DCR_ERR(-ENAMETOOLONG);
	strcpy(a.sun_path, path);
	l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l < 0)
		return -errno;
	unlink(path);
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    chmod(path, 0600) < 0 || stat(path, sb ? sb : &st) < 0 ||
	    listen(l, 4) < 0) {
		int ret = -errno;

		close(l);
		return ret;
	}
	return l;
}

/* The peer is us or root. */
int ho_peer_ok(int sock, pid_t *pid)
{
	struct ucred cr;
	socklen_t l = sizeof(cr);

	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &l) < 0)
		return -errno;
	if (pid)
		*pid = cr.pid;
	return cr.uid == geteuid() || cr.uid == 0 ? 0 : -EACCES;
}


/* The first line of @want that @got does not have, as a reason. */
char *ho_fixed_diff(const char *have, const char *got)
{
	const char *l = have;

	while (*l) {
		const char *e = strchr(l, '\n'), *eq = strchr(l, '=');
		size_t n = e ? (size_t)(e - l) + 1 : strlen(l);
		const char *g = got;
		int found = 0;

		for (; *g; g += strcspn(g, "\n") + (g[strcspn(g, "\n")] != 0)) {
			if (!strncmp(g, l, n)) {
				found = 1;
				break;
			}
		}
		if (!found && eq) {
			char *r = NULL, *theirs = NULL;
			size_t kl = (size_t)(eq - l) + 1;

			for (g = got; *g; g += strcspn(g, "\n") +
					  (g[strcspn(g, "\n")] != 0))
				if (!strncmp(g, l, kl)) {
					theirs = strndup(g + kl,
							 strcspn(g + kl, "\n"));
					break;
				}
			if (asprintf(&r, "%.*s differs (this mount: '%.*s', "
				     "the new daemon: '%s'); it is fixed while "
				     "mounted", (int)(kl - 1), l,
				     (int)(n - kl - (e ? 1 : 0)), eq + 1,
				     theirs ? theirs : "") < 0)
				r = NULL;
			free(theirs);
			return r ? r : strdup("the options differ");
		}
		l += n;
	}
	return NULL;
}

/* Refuse the peer on @c: NO with @why (freed), logged after @who; @c is
 * closed. */
void ho_refuse_peer(int c, char *why, const char *who)
{
	dcr_info("%s: %s", who, why);
	ho_msg_send(c, HO_NO, why, strlen(why), NULL, 0, -1);
	free(why);
	close(c);
}

