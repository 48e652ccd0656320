/* SPDX-License-Identifier: MIT */
/*
 * s3_request.c - one request of the S3 backend (see s3_int.h).
 *
 * One request = one call of s3_request(): sign (SigV4), perform on a
 * pooled easy handle, classify the outcome, retry transient failures with
 * backoff, and translate the result to 0/-errno exactly once, logging the
 * final failure once with the bucket and key.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "buf.h"
#include "common.h"
#include "hash.h"
#include "objstore.h"
#include "s3.h"

#include "s3_int.h"

int buf_str(struct dcr_buf *b, const char *s)
{
	return dcr_buf_append(b, s, strlen(s));
}

int buf_printf(struct dcr_buf *b, const char *fmt, ...)
{
	char tmp[512];
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(tmp))
		return DCR_ERR(-EOVERFLOW);
	return dcr_buf_append(b, tmp, (size_t)n);
}

/* NUL-terminate @b's contents (not counted in len). */
int buf_cstr(struct dcr_buf *b)
{
	int ret = dcr_buf_putc(b, 0);
	if (!ret)
		b->len--;
	return ret;
}

uint64_t rand_u64(void)
{
	static __thread uint64_t x;
	if (!x) {
		if (getrandom(&x, sizeof(x), 0) != sizeof(x))
			x = (uint64_t)dcr_mono_ns() ^ (uint64_t)pthread_self();
		x |= 1;
	}
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return x;
}

/* Only printable ASCII from a server reaches our logs. */
static void sanitize(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			*s = '?';
}

void s3_conn_free(struct s3_conn *c)
{
	if (c->m && c->h)
		curl_multi_remove_handle(c->m, c->h); /* if still in it */
	if (c->h)
		curl_easy_cleanup(c->h);
	if (c->m)
		curl_multi_cleanup(c->m);
	c->h = NULL;
	c->m = NULL;
}

/* Borrow a connection (its live connections come with it): 0 or
 * -ENOMEM. */
static int conn_get(struct dcr_s3_store *s, struct s3_conn *c)
{
	bool got = false;

	pthread_mutex_lock(&s->pool_lock);
	if (s->npool) {
		*c = s->pool[--s->npool];
		got = true;
	}
	pthread_mutex_unlock(&s->pool_lock);
	if (got)
		return 0;
	c->h = curl_easy_init();
	c->m = curl_multi_init();
	if (!c->h || !c->m) {
		s3_conn_free(c);
		return DCR_ERR(-ENOMEM);
	}
	return 0;
}

static void conn_put(struct dcr_s3_store *s, struct s3_conn *c)
{
	pthread_mutex_lock(&s->pool_lock);
	if (s->npool < S3_POOL_MAX) {
		s->pool[s->npool++] = *c;
		c->h = NULL;
		c->m = NULL;
	}
	pthread_mutex_unlock(&s->pool_lock);
	s3_conn_free(c);
}

/*
 * curl_easy_perform's loop, on @c's multi handle so that its wait also
 * watches the process's stop (dcr_stop_fd): a stop aborts the transfer
 * at once, between two events of its sockets or in the middle of a wait
 * for them (a stalled server, a connect that is not answered).
 * CURLE_ABORTED_BY_CALLBACK with *@stopped set when stopped.
 */
static CURLcode perform(struct s3_conn *c, bool *stopped)
{
	int sfd = dcr_stop_fd(), running = 1;
	CURLcode cc = CURLE_OK;
	CURLMsg *msg;
	int left;

	*stopped = false;
	if (curl_multi_add_handle(c->m, c->h) != CURLM_OK)
		return CURLE_OUT_OF_MEMORY;
	while (running) {
		if (dcr_stop_requested()) {
			*stopped = true;
			cc = CURLE_ABORTED_BY_CALLBACK;
			goto out;
		}
		CURLMcode mc = curl_multi_perform(c->m, &running);
		if (mc == CURLM_OK && running) {
			struct curl_waitfd w = { .fd = sfd, .events = CURL_WAIT_POLLIN };
			/* Without the stop's descriptor, look at the flag often. */
			mc = curl_multi_poll(c->m, sfd >= 0 ? &w : NULL,
					     sfd >= 0 ? 1 : 0, sfd >= 0 ? 1000 : 50,
					     NULL);
		}
		if (mc != CURLM_OK) {
			cc = mc == CURLM_OUT_OF_MEMORY ? CURLE_OUT_OF_MEMORY :
			     CURLE_RECV_ERROR;
			goto out;
		}
	}
	cc = CURLE_GOT_NOTHING; /* unless curl says how it ended */
	while ((msg = curl_multi_info_read(c->m, &left)))
		if (msg->msg == CURLMSG_DONE && msg->easy_handle == c->h)
			cc = msg->data.result;
out:
	curl_multi_remove_handle(c->m, c->h);
	return cc;
}

/* ---------------------------------------------------------- requests */


struct xfer {
	struct s3_req *r;
	long status;      /* of the response being received */
	bool ok;          /* 2xx */
	bool skip;        /* 200 to a ranged GET: cut the range out ourselves */
	uint64_t pos;     /* body bytes seen */
	size_t out_start; /* r->out->len before this attempt */
	size_t up_off;    /* upload position */
	bool resent;      /* curl rewound a body it had begun to send */
	int werr;         /* -errno that aborted the transfer from a callback */
	struct dcr_buf err; /* error document */
};

static size_t on_header(char *p, size_t sz, size_t nm, void *arg)
{
	struct xfer *x = arg;
	struct s3_req *r = x->r;
	size_t n = sz * nm;

	if (n >= 5 && !memcmp(p, "HTTP/", 5)) {
		const char *sp = memchr(p, ' ', n);
		x->status = sp ? strtol(sp + 1, NULL, 10) : 0;
		x->ok = x->status >= 200 && x->status < 300;
		x->skip = x->status == 200 && r->has_range;
		r->etag[0] = 0;
		r->has_clen = false;
		return n;
	}
	const char *colon = memchr(p, ':', n);
	if (!colon)
		return n;
	size_t kl = (size_t)(colon - p);
	const char *v = colon + 1, *ve = p + n;
	while (v < ve && (*v == ' ' || *v == '\t'))
		v++;
	while (ve > v && (ve[-1] == '\r' || ve[-1] == '\n' || ve[-1] == ' '))
		ve--;
	size_t vl = (size_t)(ve - v);
	if (kl == 4 && !strncasecmp(p, "etag", 4) && vl < S3_ETAG_MAX) {
		memcpy(r->etag, v, vl);
		r->etag[vl] = 0;
		sanitize(r->etag);
	} else if (kl == 14 && !strncasecmp(p, "content-length", 14)) {
		char num[24] = { 0 };
		memcpy(num, v, DCR_MIN(vl, sizeof(num) - 1));
		r->clen = strtoull(num, NULL, 10);
		r->has_clen = true;
		if (x->ok && r->out && strcmp(r->method, "HEAD")) {
			/* Room for what will arrive, so the body lands in one go. */
			uint64_t want = r->clen;
			if (x->skip)
				want = r->range_off >= r->clen ? 0 :
				       DCR_MIN(r->range_len, r->clen - r->range_off);
			if (want > SIZE_MAX - r->out->len) {
				x->werr = DCR_ERR(-EFBIG);
				return 0;
			}
			int ret = dcr_buf_reserve(r->out, r->out->len + (size_t)want);
			if (ret) {
				x->werr = ret;
				return 0;
			}
		}
	}
	return n;
}

static size_t on_write(char *p, size_t sz, size_t nm, void *arg)
{
	struct xfer *x = arg;
	struct s3_req *r = x->r;
	size_t n = sz * nm;

	if (!x->ok) {
		size_t room = S3_ERRBODY_MAX - DCR_MIN(x->err.len, (size_t)S3_ERRBODY_MAX);
		if (room)
			dcr_buf_append(&x->err, p, DCR_MIN(n, room));
		return n;
	}
	if (!r->out)
		return n;
	/* The wanted bytes of this response are [start, end) of its body. */
	uint64_t start = x->skip ? r->range_off : 0, end = UINT64_MAX;
	if (r->has_range && r->range_len != DCR_GET_ALL)
		end = r->range_len > UINT64_MAX - start ? UINT64_MAX : start + r->range_len;
	uint64_t a = DCR_MAX(x->pos, start), b = DCR_MIN(x->pos + n, end);
	x->pos += n;
	if (a >= b)
		return n;
	int ret = dcr_buf_append(r->out, p + (a - (x->pos - n)), (size_t)(b - a));
	if (ret) {
		x->werr = ret;
		return 0;
	}
	return n;
}

static size_t on_read(char *p, size_t sz, size_t nm, void *arg)
{
	struct xfer *x = arg;
	size_t n = DCR_MIN(sz * nm, x->r->body_len - x->up_off);
	memcpy(p, (const char *)x->r->body + x->up_off, n);
	x->up_off += n;
	return n;
}

/*
 * Let curl rewind an upload body (it does on a connection that was
 * reset while a PUT body was being sent, and on some redirects): without
 * this it fails with "rewinding of the data stream failed" instead of
 * sending the body again.
 * A rewind after curl took bytes of the body means that curl is sending
 * the request a second time within this one attempt: libcurl re-sends,
 * unasked and unreported, a request whose reused connection died before
 * any reply, and the first send may have been acted on (the server
 * stored the object, then the reply was lost). So the attempt is marked
 * (xfer.resent): a 412 to a conditional PUT so re-sent may be about our
 * own object, and is read back like one after a retry of ours.
 */
static int on_seek(void *arg, curl_off_t off, int origin)
{
	struct xfer *x = arg;

	if (origin != SEEK_SET || off < 0 || (uint64_t)off > x->r->body_len)
		return CURL_SEEKFUNC_CANTSEEK;
	if (x->up_off > 0)
		x->resent = true;
	x->up_off = (size_t)off;
	return CURL_SEEKFUNC_OK;
}

enum outcome { OUT_DONE, OUT_RETRY };

#ifdef DCR_TEST_HOOKS
/* dcr_s3_test_lose_replies: replies to conditional PUTs still to drop. */
static atomic_int lose_replies;

void dcr_s3_test_lose_replies(int n)
{
	atomic_store(&lose_replies, n > 0 ? n : 0);
}

static bool lose_reply_armed(void)
{
	int n = atomic_load_explicit(&lose_replies, memory_order_relaxed);

	while (n > 0)
		if (atomic_compare_exchange_weak(&lose_replies, &n, n - 1))
			return true;
	return false;
}
#endif

static bool curl_transient(CURLcode c)
{
	switch (c) {
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_CONNECT:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_SEND_ERROR:
	case CURLE_SEND_FAIL_REWIND:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
	case CURLE_HTTP3:
	case CURLE_WEIRD_SERVER_REPLY:
		return true;
	default:
		return false;
	}
}

/* The server's <Code> and <Message>, sanitized, into @code/@msg. */
void error_doc(const struct dcr_buf *b, char *code, size_t cc, char *msg,
		      size_t mc)
{
	const char *v;
	size_t n;

	code[0] = msg[0] = 0;
	if (!b->len)
		return;
	if (xml_find((const char *)b->data, b->len, "Code", &v, &n)) {
		snprintf(code, cc, "%.*s", (int)DCR_MIN(n, cc - 1), v);
		sanitize(code);
	}
	if (xml_find((const char *)b->data, b->len, "Message", &v, &n)) {
		snprintf(msg, mc, "%.*s", (int)DCR_MIN(n, mc - 1), v);
		sanitize(msg);
	}
}

static const char *hint_for(const char *code)
{
	if (!strcmp(code, "SignatureDoesNotMatch"))
		return " (wrong secret key?)";
	if (!strcmp(code, "InvalidAccessKeyId"))
		return " (unknown access key id)";
	if (!strcmp(code, "RequestTimeTooSkewed"))
		return " (is the clock right?)";
	if (!strcmp(code, "PermanentRedirect") || !strcmp(code, "AuthorizationHeaderMalformed"))
		return " (wrong region or endpoint?)";
	return "";
}

/*
 * One attempt on @h. Sets *@ret to the final result or returns OUT_RETRY
 * with *@ret the error it would be, and @why describing it.
 */
static enum outcome attempt(struct dcr_s3_store *s, struct s3_conn *c,
			    struct s3_req *r,
			    const char *url, const char *canon_uri,
			    const char *payload_sha, int64_t deadline, int *ret,
			    char *why, size_t wc)
{
	struct xfer x = { .r = r };
	char code[64], msg[256];
	enum outcome oc = OUT_DONE;
	CURL *h = c->h;
	bool stopped;

	dcr_buf_init(&x.err, S3_ERRBODY_MAX);
	if (r->out)
		x.out_start = r->out->len;
	curl_easy_reset(h);
	struct curl_slist *hdrs = sign(s, r, canon_uri, payload_sha);
	if (!hdrs) {
		*ret = DCR_ERR(-ENOMEM);
		snprintf(why, wc, "out of memory");
		return OUT_DONE;
	}
	int64_t left_ms = (deadline - dcr_mono_ns()) / 1000000;
	if (left_ms < 1)
		left_ms = 1;
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_SHARE, s->share);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
			 (long)DCR_MIN(left_ms, (int64_t)S3_CONNECT_TIMEOUT_MS));
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)left_ms);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)S3_LOW_SPEED_TIME_S);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 256L * 1024);
	curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, 1024L * 1024);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
	if (s->aws.ca_bundle)
		curl_easy_setopt(h, CURLOPT_CAINFO, s->aws.ca_bundle);

	char range[64];
	if (r->has_range) {
		if (r->range_len == DCR_GET_ALL ||
		    r->range_len - 1 > UINT64_MAX - r->range_off)
			snprintf(range, sizeof(range), "%" PRIu64 "-", r->range_off);
		else
			snprintf(range, sizeof(range), "%" PRIu64 "-%" PRIu64,
				 r->range_off, r->range_off + r->range_len - 1);
		curl_easy_setopt(h, CURLOPT_RANGE, range);
	}
	if (!strcmp(r->method, "HEAD")) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	} else if (!strcmp(r->method, "PUT")) {
		curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->body_len);
		curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(h, CURLOPT_READDATA, &x);
		curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
		curl_easy_setopt(h, CURLOPT_SEEKDATA, &x);
	} else if (!strcmp(r->method, "POST")) {
		curl_easy_setopt(h, CURLOPT_POST, 1L);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body ? r->body : "");
	} else if (!strcmp(r->method, "DELETE")) {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
	}

	CURLcode cc = perform(c, &stopped);
	curl_slist_free_all(hdrs);
	r->status = x.status;
	if (x.resent) {
		/* curl sent it twice: the first may have taken effect */
		dcr_debug("%s: %s %s: the connection died and curl sent the "
			  "request again", s->base.url, r->method, r->what);
		r->maybe_applied = true;
	}
	if (stopped) {
		if (r->out)
			r->out->len = x.out_start;
		*ret = -ECANCELED;
		snprintf(why, wc, "stopped (the process is ending)");
		r->maybe_applied = true; /* it may have been sent */
		goto out;
	}
#ifdef DCR_TEST_HOOKS
	if (cc == CURLE_OK && !x.werr && r->if_none_match &&
	    lose_reply_armed()) {
		/* Test hook: the server acted on the request; say it did not. */
		*ret = DCR_ERR(-EIO);
		snprintf(why, wc, "HTTP %ld reply lost (test hook)", x.status);
		r->maybe_applied = true;
		oc = OUT_RETRY;
		goto out;
	}
#endif
	if (cc != CURLE_OK && r->out)
		r->out->len = x.out_start; /* no partial bodies */

	if (x.werr) {
		*ret = x.werr;
		snprintf(why, wc, "%s", dcr_strerror(x.werr));
		goto out;
	}
	r->unresolved = cc == CURLE_COULDNT_RESOLVE_HOST;
	r->unreachable = r->unresolved || cc == CURLE_COULDNT_CONNECT;
	if (cc != CURLE_OK) {
		long oserr = 0;
		*ret = DCR_ERR(-EIO);
		if (r->unresolved)
			snprintf(why, wc, "cannot resolve the host of %s "
				 "(check the endpoint and DNS)", s->origin);
		else if (cc == CURLE_COULDNT_CONNECT &&
			 curl_easy_getinfo(h, CURLINFO_OS_ERRNO, &oserr) == CURLE_OK &&
			 oserr > 0) {
			snprintf(why, wc, "cannot reach the store at %s: %s "
				 "(check the endpoint; is the server up?)", s->origin,
				 strerror((int)oserr));
			/* A mirror's failures are said by its callers (mirror.c,
			 * warm.c) from the errno alone: keep the reason
			 * ("Connection refused"), not a bare EIO. */
			if (s->mirror)
				*ret = DCR_ERR(-(int)oserr);
		} else
			snprintf(why, wc, "%s", curl_easy_strerror(cc));
		oc = curl_transient(cc) ? OUT_RETRY : OUT_DONE;
		/* Sent, perhaps acted on, reply lost (not: never connected). */
		if (cc != CURLE_COULDNT_RESOLVE_HOST &&
		    cc != CURLE_COULDNT_CONNECT && cc != CURLE_SSL_CONNECT_ERROR)
			r->maybe_applied = true;
		goto out;
	}
	long st = x.status;
	atomic_store_explicit(&s->reached, true, memory_order_relaxed);
	if (st >= 200 && st < 300) {
		*ret = 0;
		goto out;
	}
	if (r->out)
		r->out->len = x.out_start;
	error_doc(&x.err, code, sizeof(code), msg, sizeof(msg));
	snprintf(why, wc, "HTTP %ld%s%s%s%s%s", st, code[0] ? " " : "", code,
		 msg[0] ? ": " : "", msg, hint_for(code));
	if (st == 416 && (r->has_range || s->mirror)) {
		/* offset at or past the end: no bytes; from a slicing cache
		 * also the answer for a whole empty object */
		*ret = 0;
	} else if (st == 404) {
		*ret = DCR_ERR(-ENOENT);
		if (!strcmp(code, "NoSuchBucket"))
			r->quiet_enoent = false;
	} else if (st == 403 || st == 401) {
		*ret = DCR_ERR(-EACCES);
	} else if (st == 412 && r->if_none_match) {
		*ret = DCR_ERR(-EEXIST);
	} else if (st >= 500 || st == 429 || st == 408 ||
		   (st == 409 && r->if_none_match) ||
		   (st == 400 && !strcmp(code, "RequestTimeout"))) {
		*ret = DCR_ERR(-EIO);
		oc = OUT_RETRY;
		/*
		 * Any 5xx may come after the write took effect: a 503 too,
		 * from a proxy or load balancer in front of a store that
		 * applied it. 429, 408, RequestTimeout and 409 (a concurrent
		 * conditional write in progress) refuse the request.
		 */
		if (st >= 500)
			r->maybe_applied = true;
	} else {
		*ret = DCR_ERR(-EIO);
	}
out:
	dcr_buf_free(&x.err);
	return oc;
}

/*
 * Perform @r with retries. Returns 0 or -errno; every failure except the
 * expected ones (-ENOENT when quiet, -EEXIST) is logged once here.
 */
int s3_request(struct dcr_s3_store *s, struct s3_req *r)
{
	struct dcr_buf path, url;
	char sha[DCR_HASH_HEX_LEN + 1], why[512] = "";
	int ret;

	dcr_buf_init(&path, 4 * S3_KEY_MAX + 256);
	dcr_buf_init(&url, 8 * S3_KEY_MAX + 1024);
	ret = buf_str(&path, s->path_base);
	if (!ret && r->okey) {
		ret = dcr_buf_putc(&path, '/');
		ret = ret ? ret : uri_encode(&path, r->okey, true);
	}
	if (!ret && !path.len)
		ret = dcr_buf_putc(&path, '/');
	ret = ret ? ret : buf_cstr(&path);
	ret = ret ? ret : buf_str(&url, s->origin);
	ret = ret ? ret : buf_str(&url, (const char *)path.data);
	if (!ret && r->query && *r->query) {
		ret = dcr_buf_putc(&url, '?');
		ret = ret ? ret : buf_str(&url, r->query);
	}
	ret = ret ? ret : buf_cstr(&url);
	if (ret)
		goto err_free;

	const char *payload_sha = r->body_sha;
	if (!payload_sha) {
		if (r->body_len)
			sha256_hex(r->body, r->body_len, sha);
		else
			snprintf(sha, sizeof(sha), "%s", S3_EMPTY_SHA256);
		payload_sha = sha;
	}

	struct s3_conn c;
	if ((ret = conn_get(s, &c)))
		goto err_free;
	int64_t t0 = dcr_mono_ns(), deadline = t0 + r->timeout_ns;
	int64_t bound = r->deadline;
	int n = 0;

	if (bound && bound < deadline)
		deadline = bound; /* the caller's whole operation ends first */
	if (dcr_stop_requested()) {
		conn_put(s, &c);
		ret = -ECANCELED;
		snprintf(why, sizeof(why), "stopped (the process is ending)");
		goto log;
	}
	if (deadline - t0 < 1000000LL) {
		conn_put(s, &c);
		ret = DCR_ERR(-ETIMEDOUT);
		snprintf(why, sizeof(why), "the time bound of the read it "
			 "serves has passed");
		goto log;
	}
	for (n = 1;; n++) {
		enum outcome oc = attempt(s, &c, r, (const char *)url.data,
					  (const char *)path.data, payload_sha,
					  deadline, &ret, why, sizeof(why));
		if (oc == OUT_DONE || s->mirror)
			break;
		int64_t left = deadline - dcr_mono_ns();
		if (r->unreachable && n >= S3_RESOLVE_ATTEMPTS &&
		    !atomic_load_explicit(&s->reached, memory_order_relaxed)) {
			ret = DCR_ERR(-EHOSTUNREACH); /* it never answered */
			break;
		}
		if (n >= S3_ATTEMPTS_MAX || left < 20 * 1000000LL ||
		    (r->unresolved && n >= S3_RESOLVE_ATTEMPTS))
			break;
		/* Full jitter: uniform in [0, min(cap, base * 2^n)). */
		int64_t cap_ms = DCR_MIN((int64_t)S3_BACKOFF_CAP_MS,
					 (int64_t)S3_BACKOFF_BASE_MS << DCR_MIN(n, 16));
		int64_t sleep_ns = (int64_t)(rand_u64() % (uint64_t)(cap_ms * 1000000));
		sleep_ns = DCR_MIN(sleep_ns, left - 10 * 1000000LL);
#ifdef DCR_TEST_HOOKS
		/* Test hook (HACKING): every wait before a retry this long. */
		if (getenv("DCRFS_TEST_S3_BACKOFF_MS"))
			sleep_ns = DCR_MIN(left - 10 * 1000000LL, 1000000LL *
					   atoi(getenv("DCRFS_TEST_S3_BACKOFF_MS")));
#endif
		dcr_debug("%s: %s %s: %s; retry %d in %" PRId64 " ms", s->base.url,
			  r->method, r->what, why, n, sleep_ns / 1000000);
		if (sleep_ns > 0 && dcr_stop_sleep_ns(sleep_ns) == -ECANCELED) {
			ret = -ECANCELED;
			snprintf(why, sizeof(why), "stopped (the process is ending)");
			break;
		}
	}
	conn_put(s, &c);
log:
	if (ret == -ECANCELED) {
		dcr_debug("%s: %s %s: %s", s->base.url, r->method, r->what, why);
	} else if (ret && s->mirror) {
		dcr_debug("mirror %s: %s %s failed: %s", s->origin, r->method,
			  r->what, why); /* store/mirror.c says it once */
	} else if (ret == -ENOENT && r->quiet_enoent) {
		dcr_debug("%s: %s %s: not found", s->base.url, r->method, r->what);
	} else if (ret && ret != -EEXIST) {
		char tries[96] = "";
		if (n > 1)
			snprintf(tries, sizeof(tries), " (gave up after %d attempts in %.1f s)",
				 n, (double)(dcr_mono_ns() - t0) / 1e9);
		char creds[300] = "";
		if (ret == -EACCES)
			snprintf(creds, sizeof(creds), "; credentials from %s",
				 s->aws.cred_source ? s->aws.cred_source :
				 "nowhere (unsigned request)");
		dcr_err("%s: %s %s failed: %s%s [bucket %s, key %s%s]", s->base.url,
			r->method, r->what, why, tries, s->bucket,
			r->okey ? r->okey : "(none)", creds);
	}
err_free:
	dcr_buf_free(&path);
	dcr_buf_free(&url);
	return ret;
}
