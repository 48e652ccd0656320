/*
 * metrics_http.c - the mount's scrape endpoint: -o metrics=HOST:PORT
 * serves GET /metrics, the Prometheus text of MNT/.dcrfs/metrics
 * (rendered by status.c at every request), through libmicrohttpd's
 * own polling thread. Nothing else is served: other paths are 404,
 * other methods 405. Only here: <microhttpd.h>.
 *
 * Slow clients (slowloris: a header line every few seconds, each
 * resetting libmicrohttpd's inactivity timeout) must not keep the
 * endpoint unreachable. As nginx's client_header_timeout and Apache's
 * mod_reqtimeout do, a connection has HEAD_DEADLINE_S from its accept
 * (or from its last response, on keep-alive) to send a whole request
 * head; and at most CONN_KEEP connections are kept waiting for one: when
 * a new connection comes, the expired ones are dropped and then, while
 * too many wait, the oldest. libmicrohttpd accepts up to CONN_ACCEPT so
 * that a new connection is seen at all. Every callback below runs on
 * libmicrohttpd's one polling thread (or, at stop, after it ended), so
 * the connection list needs no lock; a connection is dropped by
 * shutdown(2) of its socket, which libmicrohttpd then closes as a peer
 * that hung up.
 */
#include "config.h"

#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "common.h"
#include "fs.h"

#define HOST_MAX 256
#define HEAD_DEADLINE_S 5   /* to send a whole request head */
#define CONN_KEEP 16        /* connections kept waiting for a head */
#define CONN_ACCEPT 64      /* libmicrohttpd's own limit, above CONN_KEEP */
#define IDLE_TIMEOUT_S 10   /* libmicrohttpd's inactivity timeout */

/* One connection, from its accept to its close. */
struct mconn {
	struct mconn *prev, *next; /* oldest first */
	int fd;
	int64_t head_since;        /* when it began to owe a request head */
	bool in_request;           /* its head is in: being answered */
	bool dropped;              /* shut down here, not closed yet */
};

struct dcrfs_metrics {
	struct MHD_Daemon *d;
	struct mconn *head, *tail; /* the polling thread's only */
};

static void drop(struct dcrfs_metrics *m, struct mconn *mc)
{
	(void)m;
	mc->dropped = true;
	shutdown(mc->fd, SHUT_RDWR);
}

/*
 * At each new connection @fresh: drop those that owe a head past the
 * deadline, then, while more than CONN_KEEP owe one, the oldest.
 */
static void reap(struct dcrfs_metrics *m, const struct mconn *fresh)
{
	const int64_t now = dcr_mono_ns();
	unsigned waiting = 0;

	for (struct mconn *mc = m->head; mc; mc = mc->next) {
		if (mc->dropped || mc->in_request)
			continue;
		if (mc != fresh &&
		    now - mc->head_since > (int64_t)HEAD_DEADLINE_S * 1000000000)
			drop(m, mc);
		else
			waiting++;
	}
	for (struct mconn *mc = m->head; mc && waiting > CONN_KEEP; mc = mc->next)
		if (mc != fresh && !mc->dropped && !mc->in_request) {
			drop(m, mc);
			waiting--;
		}
}

static void notify_conn(void *cls, struct MHD_Connection *c,
			void **socket_context,
			enum MHD_ConnectionNotificationCode code)
{
	struct dcrfs_metrics *m = cls;
	struct mconn *mc = *socket_context;

	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);

		if (!ci || !(mc = calloc(1, sizeof(*mc))))
			return; /* not tracked: the inactivity timeout still applies */
		mc->fd = ci->connect_fd;
		mc->head_since = dcr_mono_ns();
		mc->prev = m->tail;
		if (m->tail)
			m->tail->next = mc;
		else
			m->head = mc;
		m->tail = mc;
		*socket_context = mc;
		reap(m, mc);
		return;
	}
	if (!mc) /* MHD_CONNECTION_NOTIFY_CLOSED of one not tracked */
		return;
	if (mc->prev)
		mc->prev->next = mc->next;
	else
		m->head = mc->next;
	if (mc->next)
		mc->next->prev = mc->prev;
	else
		m->tail = mc->prev;
	free(mc);
	*socket_context = NULL;
}

/* The connection of @c, if tracked. */
static struct mconn *conn_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return ci ? ci->socket_context : NULL;
}

/* A request answered: on keep-alive the connection owes a new head. */
static void request_done(void *cls, struct MHD_Connection *c, void **req_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct mconn *mc = conn_of(c);

	(void)cls;
	(void)req_cls;
	(void)toe;
	if (mc) {
		mc->in_request = false;
		mc->head_since = dcr_mono_ns();
	}
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned int status,
			     const char *type, void *body, size_t len,
			     enum MHD_ResponseMemoryMode mode)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	resp = MHD_create_response_from_buffer(len, body, mode);
	if (!resp) {
		if (mode == MHD_RESPMEM_MUST_FREE)
			free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
	ret = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c,
			      const char *url, const char *method,
			      const char *version, const char *upload,
			      size_t *upload_len, void **req_cls)
{
	static const char text[] = "text/plain; charset=utf-8";
	struct dcrfs *fs = cls;
	struct mconn *mc = conn_of(c);
	char *body;
	size_t len;

	if (mc)
		mc->in_request = true;

	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
	    strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
		return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, text,
			     (void *)"only GET /metrics\n", 18,
			     MHD_RESPMEM_PERSISTENT);
	if (strcmp(url, "/metrics") != 0)
		return reply(c, MHD_HTTP_NOT_FOUND, text,
			     (void *)"only /metrics\n", 14,
			     MHD_RESPMEM_PERSISTENT);
	if (dcrfs_status_render(fs, DCRFS_STATUS_METRICS, &body, &len) < 0)
		return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, text,
			     (void *)"out of memory\n", 14,
			     MHD_RESPMEM_PERSISTENT);
	return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8",
		     body, len, MHD_RESPMEM_MUST_FREE);
}

int dcrfs_metrics_parse(const char *spec, char *host, size_t host_len,
			char *port, size_t port_len)
{
	const char *colon, *h = spec;
	size_t hn;

	if (spec[0] == '[') { /* [v6]:port */
		const char *end = strchr(spec, ']');

		if (!end || end[1] != ':')
			return -EINVAL;
		h = spec + 1;
		hn = (size_t)(end - h);
		colon = end + 1;
	} else {
		colon = strrchr(spec, ':');
		if (!colon || memchr(spec, ':', (size_t)(colon - spec)))
			return -EINVAL;
		hn = (size_t)(colon - spec);
	}
	if (hn == 0 || hn >= host_len || !colon[1] ||
	    strlen(colon + 1) >= port_len ||
	    strspn(colon + 1, "0123456789") != strlen(colon + 1) ||
	    strtoul(colon + 1, NULL, 10) > 65535)
		return -EINVAL;
	memcpy(host, h, hn);
	host[hn] = '\0';
	strcpy(port, colon + 1);
	return 0;
}

int dcrfs_metrics_start(struct dcrfs *fs, const char *spec,
			struct dcrfs_metrics **out)
{
	struct addrinfo hints, *ai = NULL;
	struct dcrfs_metrics *m;
	char host[HOST_MAX], port[8];
	unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD;
	int ret;

	*out = NULL;
	if (dcrfs_metrics_parse(spec, host, sizeof(host), port,
				sizeof(port)) < 0) {
		dcr_err("metrics=%s: not HOST:PORT (e.g. 127.0.0.1:9741)",
			spec);
		return DCR_ERR(-EINVAL);
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	ret = getaddrinfo(host, port, &hints, &ai);
	if (ret) {
		dcr_err("metrics=%s: cannot resolve %s: %s", spec, host,
			gai_strerror(ret));
		return DCR_ERR(-EADDRNOTAVAIL);
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		freeaddrinfo(ai);
		return DCR_ERR(-ENOMEM);
	}
	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	errno = 0;
	m->d = MHD_start_daemon(flags, 0, NULL, NULL, handle, fs,
				MHD_OPTION_SOCK_ADDR, ai->ai_addr,
				MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONN_ACCEPT,
				MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S,
				MHD_OPTION_NOTIFY_CONNECTION, notify_conn, m,
				MHD_OPTION_NOTIFY_COMPLETED, request_done, m,
				MHD_OPTION_END);
	ret = errno ? -errno : -EADDRNOTAVAIL;
	freeaddrinfo(ai);
	if (!m->d) {
		dcr_err("cannot serve metrics on %s: %s", spec,
			dcr_strerror(ret));
		free(m);
		return DCR_ERR(ret);
	}
	dcr_info("metrics on http://%s/metrics", spec);
	*out = m;
	return 0;
}

void dcrfs_metrics_stop(struct dcrfs_metrics *m)
{
	if (!m)
		return;
	MHD_stop_daemon(m->d);
	free(m);
}
