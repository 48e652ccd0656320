/* SPDX-License-Identifier: MIT */
/*
 * s3.c - the S3 object-store backend (see s3.h).
 *
 * One request = one call of s3_request(): sign (SigV4), perform on a
 * pooled easy handle, classify the outcome, retry transient failures with
 * backoff, and translate the result to 0/-errno exactly once, logging the
 * final failure once with the bucket and key.
 */
#include "config.h"

#include <ctype.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "awscfg.h"
#include "buf.h"
#include "common.h"
#include "hash.h"
#include "s3.h"

#include "s3_int.h"


/* ------------------------------------------------------------ helpers */

static void hex_encode(const uint8_t *p, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 15];
	}
	out[2 * n] = 0;
}

static void sha256_hex(const void *p, size_t n, char hex[DCR_HASH_HEX_LEN + 1])
{
	uint8_t h[DCR_HASH_LEN];
	dcr_sha256(p, n, h);
	hex_encode(h, sizeof(h), hex);
}

static bool unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
	       c == '~';
}

/* Append the AWS URI encoding of @s to @b; '/' is kept when @keep_slash. */
int uri_encode(struct dcr_buf *b, const char *s, bool keep_slash)
{
	static const char digits[] = "0123456789ABCDEF";
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		int ret;
		if (unreserved(c) || (keep_slash && c == '/')) {
			ret = dcr_buf_putc(b, c);
		} else {
			char e[3] = { '%', digits[c >> 4], digits[c & 15] };
			ret = dcr_buf_append(b, e, 3);
		}
		if (ret)
			return ret;
	}
	return 0;
}

int buf_str(struct dcr_buf *b, const char *s)
{
	return dcr_buf_append(b, s, strlen(s));
}

static int buf_printf(struct dcr_buf *b, const char *fmt, ...) DCR_PRINTF(2, 3);
static int buf_printf(struct dcr_buf *b, const char *fmt, ...)
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

/* HMAC-SHA256 (RFC 2104) on top of core's SHA-256. */
static void hmac_sha256(const uint8_t *key, size_t klen, const void *msg,
			size_t mlen, uint8_t out[DCR_HASH_LEN])
{
	uint8_t k[64] = { 0 }, pad[64], inner[DCR_HASH_LEN];
	struct dcr_sha256_ctx *c = dcr_sha256_new();

	if (klen > sizeof(k))
		dcr_sha256(key, klen, k);
	else
		memcpy(k, key, klen);
	if (!c) {
		memset(out, 0, DCR_HASH_LEN); /* signature fails; logged by server reply */
		return;
	}
	for (int i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x36;
	dcr_sha256_update(c, pad, sizeof(pad));
	dcr_sha256_update(c, msg, mlen);
	dcr_sha256_final(c, inner);
	dcr_sha256_reset(c);
	for (int i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x5c;
	dcr_sha256_update(c, pad, sizeof(pad));
	dcr_sha256_update(c, inner, sizeof(inner));
	dcr_sha256_final(c, out);
	dcr_sha256_free(c);
	memset(k, 0, sizeof(k));
	memset(pad, 0, sizeof(pad));
}

static uint64_t rand_u64(void)
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

/* ------------------------------------------------------------- XML */

/*
 * Find the text of the first <tag>...</tag> in [s, s+n). Bodies are
 * bounded buffers, not strings; no nesting of the same tag is assumed
 * (true of every S3 response used here).
 */
bool xml_find(const char *s, size_t n, const char *tag,
		     const char **vs, size_t *vn)
{
	char open[64], close[64];
	int ol = snprintf(open, sizeof(open), "<%s>", tag);
	int cl = snprintf(close, sizeof(close), "</%s>", tag);
	const char *a = memmem(s, n, open, (size_t)ol);
	if (!a)
		return false;
	a += ol;
	const char *b = memmem(a, (size_t)(s + n - a), close, (size_t)cl);
	if (!b)
		return false;
	*vs = a;
	*vn = (size_t)(b - a);
	return true;
}

/*
 * The next <tag>...</tag> at or after *@p (before @end): its body into
 * @c/@cn and *@p moved past it. 1 found, 0 none left, -1 unclosed.
 */
int xml_next(const char **p, const char *end, const char *tag,
		    const char **c, size_t *cn)
{
	char open[64], close[64];
	int ol = snprintf(open, sizeof(open), "<%s>", tag);
	int cl = snprintf(close, sizeof(close), "</%s>", tag);
	const char *a = memmem(*p, (size_t)(end - *p), open, (size_t)ol);

	if (!a)
		return 0;
	const char *b = memmem(a, (size_t)(end - a), close, (size_t)cl);
	if (!b)
		return -1;
	*c = a + ol;
	*cn = (size_t)(b - *c);
	*p = b + cl;
	return 1;
}

/* Whether the listing @b says <IsTruncated>true</IsTruncated>. */
bool xml_truncated(const struct dcr_buf *b)
{
	const char *v;
	size_t vn;

	return xml_find((const char *)b->data, b->len, "IsTruncated", &v, &vn) &&
	       vn == 4 && !memcmp(v, "true", 4);
}

/* Decode XML text (the five entities and &#N;/&#xN;) into a new string of
 * at most @max bytes. NULL on malformed input, overflow or no memory. */
char *xml_text(const char *s, size_t n, size_t max)
{
	if (n > max)
		return NULL;
	char *out = malloc(n + 1), *o = out;
	if (!out)
		return NULL;
	for (size_t i = 0; i < n;) {
		if (s[i] != '&') {
			*o++ = s[i++];
			continue;
		}
		const char *semi = memchr(s + i, ';', DCR_MIN(n - i, (size_t)12));
		if (!semi)
			goto err;
		size_t el = (size_t)(semi - (s + i)) + 1;
		static const struct { const char *e; char c; } ents[] = {
			{ "&amp;", '&' }, { "&lt;", '<' }, { "&gt;", '>' },
			{ "&quot;", '"' }, { "&apos;", '\'' },
		};
		bool done = false;
		for (size_t k = 0; k < DCR_ARRAY_SIZE(ents) && !done; k++) {
			if (strlen(ents[k].e) == el && !memcmp(s + i, ents[k].e, el)) {
				*o++ = ents[k].c;
				done = true;
			}
		}
		if (!done && el >= 4 && s[i + 1] == '#') {
			char num[12] = { 0 };
			memcpy(num, s + i + 2, el - 3);
			char *end;
			unsigned long v = (num[0] == 'x' || num[0] == 'X') ?
				strtoul(num + 1, &end, 16) : strtoul(num, &end, 10);
			if (*end || v == 0 || v > 0x7f)
				goto err; /* keys here are ASCII; refuse the rest */
			*o++ = (char)v;
			done = true;
		}
		if (!done)
			goto err;
		i += el;
	}
	*o = 0;
	return out;
err:
	free(out);
	return NULL;
}

/* The text of <@tag> in [c, c+cn) decoded, at most @max bytes; NULL if
 * absent, malformed or no memory. */
char *xml_child(const char *c, size_t cn, const char *tag, size_t max)
{
	const char *v;
	size_t vn;

	return xml_find(c, cn, tag, &v, &vn) ? xml_text(v, vn, max) : NULL;
}

/* ------------------------------------------------------ curl plumbing */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init_once(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void share_lock(CURL *h, curl_lock_data d, curl_lock_access a, void *arg)
{
	struct dcr_s3_store *s = arg;
	(void)h;
	(void)a;
	if ((unsigned)d < CURL_LOCK_DATA_LAST)
		pthread_mutex_lock(&s->share_lock[d]);
}

static void share_unlock(CURL *h, curl_lock_data d, void *arg)
{
	struct dcr_s3_store *s = arg;
	(void)h;
	if ((unsigned)d < CURL_LOCK_DATA_LAST)
		pthread_mutex_unlock(&s->share_lock[d]);
}

/* Borrow an easy handle; its live connections come with it. */
static CURL *handle_get(struct dcr_s3_store *s)
{
	CURL *h = NULL;

	pthread_mutex_lock(&s->pool_lock);
	if (s->npool)
		h = s->pool[--s->npool];
	pthread_mutex_unlock(&s->pool_lock);
	return h ? h : curl_easy_init();
}

static void handle_put(struct dcr_s3_store *s, CURL *h)
{
	pthread_mutex_lock(&s->pool_lock);
	if (s->npool < S3_POOL_MAX) {
		s->pool[s->npool++] = h;
		h = NULL;
	}
	pthread_mutex_unlock(&s->pool_lock);
	if (h)
		curl_easy_cleanup(h);
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
 */
static int on_seek(void *arg, curl_off_t off, int origin)
{
	struct xfer *x = arg;

	if (origin != SEEK_SET || off < 0 || (uint64_t)off > x->r->body_len)
		return CURL_SEEKFUNC_CANTSEEK;
	x->up_off = (size_t)off;
	return CURL_SEEKFUNC_OK;
}

/* Build the signed header list for one attempt. NULL on no memory. */
static struct curl_slist *sign(struct dcr_s3_store *s, const struct s3_req *r,
			       const char *canon_uri, const char *payload_sha)
{
	struct curl_slist *h = NULL, *t;
	struct dcr_buf cr, line;
	char amzdate[32], day[16], hex[DCR_HASH_HEX_LEN + 1];
	time_t now = time(NULL);
	struct tm tm;

	gmtime_r(&now, &tm);
	strftime(amzdate, sizeof(amzdate), "%Y%m%dT%H%M%SZ", &tm);
	strftime(day, sizeof(day), "%Y%m%d", &tm);
	dcr_buf_init(&cr, 1 << 16);
	dcr_buf_init(&line, 1 << 14);

	const char *token = s->aws.session_token;
	char signed_hdrs[128];
	snprintf(signed_hdrs, sizeof(signed_hdrs), "host;%sx-amz-content-sha256;x-amz-date%s",
		 r->if_none_match ? "if-none-match;" : "",
		 token ? ";x-amz-security-token" : "");

	int ret = buf_printf(&cr, "%s\n", r->method);
	ret = ret ? ret : buf_str(&cr, canon_uri);
	ret = ret ? ret : buf_printf(&cr, "\n%s\nhost:%s\n", r->query ? r->query : "", s->host);
	if (r->if_none_match)
		ret = ret ? ret : buf_str(&cr, "if-none-match:*\n");
	ret = ret ? ret : buf_printf(&cr, "x-amz-content-sha256:%s\nx-amz-date:%s\n",
				     payload_sha, amzdate);
	if (token) {
		ret = ret ? ret : buf_str(&cr, "x-amz-security-token:");
		ret = ret ? ret : buf_str(&cr, token);
		ret = ret ? ret : buf_str(&cr, "\n");
	}
	ret = ret ? ret : buf_printf(&cr, "\n%s\n%s", signed_hdrs, payload_sha);
	if (ret)
		goto err;

	/* Headers sent; the values must equal what was signed above. */
#define ADD(...)                                                        \
	do {                                                            \
		dcr_buf_reset(&line);                                   \
		if (buf_printf(&line, __VA_ARGS__) || buf_cstr(&line))  \
			goto err;                                       \
		if (!(t = curl_slist_append(h, (char *)line.data)))     \
			goto err;                                       \
		h = t;                                                  \
	} while (0)

	ADD("Host: %s", s->host);
	ADD("x-amz-date: %s", amzdate);
	ADD("x-amz-content-sha256: %s", payload_sha);
	if (r->if_none_match)
		ADD("If-None-Match: *");
	if (r->content_type)
		ADD("Content-Type: %s", r->content_type);
	ADD("Expect:"); /* no 100-continue round trip */
	ADD("Accept:");

	if (s->aws.access_key) {
		uint8_t k[DCR_HASH_LEN], k2[DCR_HASH_LEN], sig[DCR_HASH_LEN];
		char sts[512], scope[128];
		snprintf(scope, sizeof(scope), "%s/%s/s3/aws4_request", day, s->aws.region);
		sha256_hex(cr.data, cr.len, hex);
		int n = snprintf(sts, sizeof(sts), "AWS4-HMAC-SHA256\n%s\n%s\n%s",
				 amzdate, scope, hex);
		if (n < 0 || (size_t)n >= sizeof(sts))
			goto err;
		dcr_buf_reset(&line);
		if (buf_str(&line, "AWS4") || buf_str(&line, s->aws.secret_key))
			goto err_wipe;
		hmac_sha256(line.data, line.len, day, strlen(day), k);
		hmac_sha256(k, sizeof(k), s->aws.region, strlen(s->aws.region), k2);
		hmac_sha256(k2, sizeof(k2), "s3", 2, k);
		hmac_sha256(k, sizeof(k), "aws4_request", 12, k2);
		hmac_sha256(k2, sizeof(k2), sts, (size_t)n, sig);
		memset(k, 0, sizeof(k));
		memset(k2, 0, sizeof(k2));
		memset(line.data, 0, line.cap);
		hex_encode(sig, sizeof(sig), hex);
		ADD("Authorization: AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s",
		    s->aws.access_key, scope, signed_hdrs, hex);
		if (token) {
			dcr_buf_reset(&line);
			if (buf_str(&line, "x-amz-security-token: ") ||
			    buf_str(&line, token) || buf_cstr(&line))
				goto err_wipe;
			if (!(t = curl_slist_append(h, (char *)line.data)))
				goto err_wipe;
			h = t;
		}
	}
#undef ADD
	if (line.data)
		memset(line.data, 0, line.cap);
	dcr_buf_free(&line);
	dcr_buf_free(&cr);
	return h;

err_wipe:
	if (line.data)
		memset(line.data, 0, line.cap);
err:
	dcr_buf_free(&line);
	dcr_buf_free(&cr);
	curl_slist_free_all(h);
	return NULL;
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
static void error_doc(const struct dcr_buf *b, char *code, size_t cc, char *msg,
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
static enum outcome attempt(struct dcr_s3_store *s, CURL *h, struct s3_req *r,
			    const char *url, const char *canon_uri,
			    const char *payload_sha, int64_t deadline, int *ret,
			    char *why, size_t wc)
{
	struct xfer x = { .r = r };
	char code[64], msg[256];
	enum outcome oc = OUT_DONE;

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

	CURLcode cc = curl_easy_perform(h);
	curl_slist_free_all(hdrs);
	r->status = x.status;
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
			 oserr > 0)
			snprintf(why, wc, "cannot reach the store at %s: %s "
				 "(check the endpoint; is the server up?)", s->origin,
				 strerror((int)oserr));
		else
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

	CURL *h = handle_get(s);
	if (!h) {
		ret = DCR_ERR(-ENOMEM);
		goto err_free;
	}
	int64_t t0 = dcr_mono_ns(), deadline = t0 + r->timeout_ns;
	int64_t bound = r->deadline;
	int n = 0;

	if (bound && bound < deadline)
		deadline = bound; /* the caller's whole operation ends first */
	if (deadline - t0 < 1000000LL) {
		handle_put(s, h);
		ret = DCR_ERR(-ETIMEDOUT);
		snprintf(why, sizeof(why), "the time bound of the read it "
			 "serves has passed");
		goto log;
	}
	for (n = 1;; n++) {
		enum outcome oc = attempt(s, h, r, (const char *)url.data,
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
		dcr_debug("%s: %s %s: %s; retry %d in %" PRId64 " ms", s->base.url,
			  r->method, r->what, why, n, sleep_ns / 1000000);
		if (sleep_ns > 0) {
			struct timespec ts = { sleep_ns / 1000000000, sleep_ns % 1000000000 };
			while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
				;
		}
	}
	handle_put(s, h);
log:
	if (ret && s->mirror) {
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

/* ---------------------------------------------------------- keys */

static bool key_valid(const char *key)
{
	if (!*key || key[0] == '/')
		return false;
	for (const char *p = key; *p;) {
		const char *e = strchrnul(p, '/');
		size_t n = (size_t)(e - p);
		if (n == 0 || (p[0] == '.' && (n == 1 || (n == 2 && p[1] == '.'))))
			return false;
		for (const char *q = p; q < e; q++)
			if ((unsigned char)*q < 0x20 || *q == 0x7f)
				return false;
		p = *e ? e + 1 : e;
	}
	return true;
}

/* "prefix/key" into @out. -EINVAL for a bad key, -ENAMETOOLONG. */
int object_key(const struct dcr_s3_store *s, const char *key,
		      bool check, char out[S3_KEY_MAX + 1])
{
	if (check && !key_valid(key))
		return DCR_ERR(-EINVAL);
	int n = snprintf(out, S3_KEY_MAX + 1, "%s%s%s", s->prefix,
			 *s->prefix ? "/" : "", key);
	if (n < 0 || n > S3_KEY_MAX)
		return DCR_ERR(-ENAMETOOLONG);
	return 0;
}

/* ---------------------------------------------------------- ops */

static int s3_head(struct dcr_store *st, const char *key, uint64_t *size)
{
	struct dcr_s3_store *s = to_s3(st);
	char okey[S3_KEY_MAX + 1];
	int ret = object_key(s, key, true, okey);

	if (ret)
		return ret;
	struct s3_req r = {
		.method = "HEAD", .okey = okey, .what = key,
		.timeout_ns = s->read_timeout_ns, .quiet_enoent = true,
	};
	ret = s3_request(s, &r);
	if (ret)
		return ret;
	if (!r.has_clen) {
		dcr_err("%s: HEAD %s: no Content-Length in the reply", st->url, key);
		return DCR_ERR(-EIO);
	}
	*size = r.clen;
	return 0;
}

static int s3_get(struct dcr_store *st, const char *key, uint64_t off,
		  uint64_t len, int64_t deadline, struct dcr_buf *out)
{
	struct dcr_s3_store *s = to_s3(st);
	char okey[S3_KEY_MAX + 1];
	uint64_t size;
	int ret = object_key(s, key, true, okey);

	if (ret)
		return ret;
	if (len == 0)
		return s3_head(st, key, &size); /* existence only */
	struct s3_req r = {
		.method = "GET", .okey = okey, .what = key, .out = out,
		.has_range = off > 0 || len != DCR_GET_ALL,
		.range_off = off, .range_len = len,
		.timeout_ns = s->read_timeout_ns, .quiet_enoent = true,
		.deadline = deadline,
	};
	return s3_request(s, &r);
}

/*
 * A conditional PUT of @key was refused (412) on a retry after an
 * attempt that may have taken effect unseen (a timeout or connection
 * reset after sending, a 5xx): that attempt may have stored the
 * object and lost its reply, so the 412 may be about our own write.
 * Publishing a version relies on "-EEXIST: someone else took the key"
 * (the committer moves on to the next number and would publish the same
 * manifest twice), so read the object back: if it holds exactly @data,
 * the put is ours and succeeded. Another writer does not produce the
 * same bytes in practice (a manifest carries its commit time); if one
 * did, the object holds what we wanted anyway. Retries after refusals
 * (409, 429, never connected) do not get here, so writers racing with
 * identical bytes still see exactly one winner in that case.
 * 0 (ours), -EEXIST (someone else's) or -EIO (cannot tell: failing is
 * safe, guessing either way is not).
 */
static int put_was_ours(struct dcr_s3_store *s, const char *key,
			const char *okey, const void *data, uint64_t len)
{
	struct dcr_buf b;
	/* One byte more than ours: a longer object is not ours either. */
	struct s3_req r = {
		.method = "GET", .okey = okey, .what = key, .out = &b,
		.has_range = true, .range_off = 0, .range_len = len + 1,
		.timeout_ns = s->read_timeout_ns,
	};
	int ret;

	dcr_buf_init(&b, (size_t)len + 1);
	ret = s3_request(s, &r);
	if (ret == 0) {
		ret = b.len == len && (!len || !memcmp(b.data, data, (size_t)len)) ?
		      0 : DCR_ERR(-EEXIST);
		dcr_debug("%s: PUT %s: refused on retry (412); the object %s",
			  s->base.url, key, ret ? "is someone else's" :
			  "holds our bytes: an earlier attempt stored it");
	} else {
		dcr_err("%s: PUT %s: refused on retry (412) and the object "
			"cannot be read back (%s), so whether this writer "
			"stored it is unknown [bucket %s, key %s]", s->base.url,
			key, dcr_strerror(ret), s->bucket, okey);
		ret = DCR_ERR(-EIO);
	}
	dcr_buf_free(&b);
	return ret;
}

static int put_single(struct dcr_s3_store *s, const char *key, const char *okey,
		      const void *data, uint64_t len, bool if_absent)
{
	struct s3_req r = {
		.method = "PUT", .okey = okey, .what = key, .body = data,
		.body_len = (size_t)len, .if_none_match = if_absent,
		.content_type = "application/octet-stream",
		.timeout_ns = s->write_timeout_ns,
	};
	int ret = s3_request(s, &r);

	/* Without an earlier attempt that may have stored it, a 412 is
	 * someone else's object, for sure. */
	if (ret == -EEXIST && r.maybe_applied)
		ret = put_was_ours(s, key, okey, data, len);
	return ret;
}

/* --- multipart upload */

struct mpu {
	struct dcr_s3_store *s;
	const char *key, *okey;
	const uint8_t *data;
	uint64_t len, psize;
	unsigned nparts;
	char *uid_q; /* "uploadId=<encoded>" */
	char (*etags)[S3_ETAG_MAX];
	pthread_mutex_t lock;
	int err;
};

static int mpu_part(struct mpu *m, unsigned i)
{
	char q[1024], what[S3_KEY_MAX + 32];
	uint64_t off = (uint64_t)i * m->psize;
	uint64_t n = DCR_MIN(m->psize, m->len - off);

	snprintf(q, sizeof(q), "partNumber=%u&%s", i + 1, m->uid_q);
	snprintf(what, sizeof(what), "%s (part %u/%u)", m->key, i + 1, m->nparts);
	struct s3_req r = {
		.method = "PUT", .okey = m->okey, .query = q, .what = what,
		.body = m->data + off, .body_len = (size_t)n,
		.timeout_ns = m->s->write_timeout_ns,
	};
	int ret = s3_request(m->s, &r);
	if (ret)
		return ret;
	if (!r.etag[0]) {
		dcr_err("%s: PUT %s: no ETag in the reply", m->s->base.url, what);
		return DCR_ERR(-EIO);
	}
	memcpy(m->etags[i], r.etag, S3_ETAG_MAX);
	return 0;
}

/* Part @i of the upload @arg (a dcr_wq_par_for loop); after a failure
 * the parts left are skipped. */
static void mpu_part_fn(void *arg, size_t i)
{
	struct mpu *m = arg;

	pthread_mutex_lock(&m->lock);
	bool failed = m->err != 0;
	pthread_mutex_unlock(&m->lock);
	if (failed)
		return;
	int ret = mpu_part(m, (unsigned)i);
	if (ret) {
		pthread_mutex_lock(&m->lock);
		if (!m->err)
			m->err = ret;
		pthread_mutex_unlock(&m->lock);
	}
}

static int put_multipart(struct dcr_s3_store *s, const char *key,
			 const char *okey, const void *data, uint64_t len)
{
	struct mpu m = { .s = s, .key = key, .okey = okey, .data = data, .len = len };
	struct dcr_buf body, q;
	const char *v;
	size_t vn;
	int ret;

	m.psize = DCR_MAX(S3_MPU_PART_MIN, DCR_DIV_ROUND_UP(len, S3_MPU_PARTS_MAX));
	m.psize = DCR_DIV_ROUND_UP(m.psize, (uint64_t)1 << 20) << 20;
	m.nparts = (unsigned)DCR_DIV_ROUND_UP(len, m.psize);
	dcr_buf_init(&body, 1 << 20);
	dcr_buf_init(&q, 4096);

	struct s3_req init = {
		.method = "POST", .okey = okey, .query = "uploads=", .what = key,
		.out = &body, .timeout_ns = s->write_timeout_ns,
	};
	if ((ret = s3_request(s, &init)))
		goto err_free;
	char *uid = NULL;
	if (xml_find((const char *)body.data, body.len, "UploadId", &v, &vn))
		uid = xml_text(v, vn, 1024);
	if (!uid || !*uid) {
		free(uid);
		dcr_err("%s: POST %s?uploads: no UploadId in the reply [bucket %s, key %s]",
			s->base.url, key, s->bucket, okey);
		ret = DCR_ERR(-EIO);
		goto err_free;
	}
	ret = buf_str(&q, "uploadId=");
	ret = ret ? ret : uri_encode(&q, uid, false);
	ret = ret ? ret : buf_cstr(&q);
	free(uid);
	if (ret)
		goto err_free;
	m.uid_q = (char *)q.data;
	if (!(m.etags = calloc(m.nparts, sizeof(*m.etags)))) {
		ret = DCR_ERR(-ENOMEM);
		goto err_abort;
	}
	pthread_mutex_init(&m.lock, NULL);
	dcr_wq_par_for(s->mpu_wq, S3_MPU_THREADS, m.nparts, mpu_part_fn, &m);
	pthread_mutex_destroy(&m.lock);
	if ((ret = m.err))
		goto err_abort;

	dcr_buf_reset(&body);
	body.max = (size_t)m.nparts * 256 + 1024;
	ret = buf_str(&body, "<CompleteMultipartUpload>");
	for (unsigned i = 0; i < m.nparts && !ret; i++) {
		ret = buf_printf(&body, "<Part><PartNumber>%u</PartNumber><ETag>", i + 1);
		for (const char *e = m.etags[i]; *e && !ret; e++)
			ret = *e == '&' ? buf_str(&body, "&amp;") :
			      *e == '<' ? buf_str(&body, "&lt;") :
			      dcr_buf_putc(&body, (uint8_t)*e);
		ret = ret ? ret : buf_str(&body, "</ETag></Part>");
	}
	ret = ret ? ret : buf_str(&body, "</CompleteMultipartUpload>");
	if (ret)
		goto err_abort;
	struct dcr_buf reply;
	dcr_buf_init(&reply, 1 << 20);
	struct s3_req done = {
		.method = "POST", .okey = okey, .query = m.uid_q, .what = key,
		.body = body.data, .body_len = body.len,
		.content_type = "application/xml", .out = &reply,
		.timeout_ns = s->write_timeout_ns,
	};
	ret = s3_request(s, &done);
	/* S3 may answer 200 and still report an error in the body. */
	if (!ret && xml_find((const char *)reply.data, reply.len, "Code", &v, &vn) &&
	    memmem(reply.data, reply.len, "<Error>", 7)) {
		char code[64], msg[256];
		error_doc(&reply, code, sizeof(code), msg, sizeof(msg));
		dcr_err("%s: completing the upload of %s failed: %s: %s [bucket %s, key %s]",
			s->base.url, key, code, msg, s->bucket, okey);
		ret = DCR_ERR(-EIO);
	}
	dcr_buf_free(&reply);
	if (ret)
		goto err_abort;
	goto err_free;

err_abort: {
		/* Best effort: free the parts already stored. */
		struct s3_req ab = {
			.method = "DELETE", .okey = okey, .query = m.uid_q, .what = key,
			.timeout_ns = 5 * 1000000000LL, .quiet_enoent = true,
		};
		if (m.uid_q)
			s3_request(s, &ab);
	}
err_free:
	free(m.etags);
	dcr_buf_free(&q);
	dcr_buf_free(&body);
	return ret;
}

/*
 * Does the server honour If-None-Match: * on PUT? Asked once per store
 * handle with a scratch object, so that a server which ignores the header
 * can never make a conditional put silently overwrite a version.
 */
static int condput_check(struct dcr_s3_store *s)
{
	char key[64], okey[S3_KEY_MAX + 1];
	uint8_t rnd[8];
	int ret;

	pthread_mutex_lock(&s->probe_lock);
	if (s->condput) {
		ret = s->condput > 0 ? 0 : DCR_ERR(-EOPNOTSUPP);
		goto out;
	}
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
		uint64_t x = rand_u64();
		memcpy(rnd, &x, sizeof(rnd));
	}
	char hex[2 * sizeof(rnd) + 1];
	hex_encode(rnd, sizeof(rnd), hex);
	snprintf(key, sizeof(key), ".dcr-probe/%s", hex);
	if ((ret = object_key(s, key, false, okey)))
		goto out;
	ret = put_single(s, key, okey, "1", 1, true);
	if (ret)
		goto out;
	ret = put_single(s, key, okey, "2", 1, true);
	if (ret == -EEXIST) {
		s->condput = 1;
		ret = 0;
	} else if (ret == 0) {
		s->condput = -1;
		dcr_err("%s: the server ignores If-None-Match: * on PUT, so two "
			"concurrent commits could overwrite each other; refusing "
			"to publish", s->base.url);
		ret = DCR_ERR(-EOPNOTSUPP);
	}
	struct s3_req del = {
		.method = "DELETE", .okey = okey, .what = key,
		.timeout_ns = s->read_timeout_ns, .quiet_enoent = true,
	};
	s3_request(s, &del);
out:
	pthread_mutex_unlock(&s->probe_lock);
	return ret;
}

static int s3_put(struct dcr_store *st, const char *key, const void *data,
		  uint64_t len, int flags)
{
	struct dcr_s3_store *s = to_s3(st);
	char okey[S3_KEY_MAX + 1];
	int ret = object_key(s, key, true, okey);

	if (ret)
		return ret;
	if (len > SIZE_MAX)
		return DCR_ERR(-EFBIG);
	if (flags & DCR_PUT_IF_ABSENT) {
		if (len > S3_SINGLE_PUT_MAX) {
			dcr_err("%s: %s: a conditional put is limited to 5 GiB", st->url, key);
			return DCR_ERR(-EFBIG);
		}
		if ((ret = condput_check(s)))
			return ret;
		return put_single(s, key, okey, data, len, true);
	}
	if (len <= S3_MPU_THRESHOLD)
		return put_single(s, key, okey, data, len, false);
	return put_multipart(s, key, okey, data, len);
}

static int s3_del(struct dcr_store *st, const char *key)
{
	struct dcr_s3_store *s = to_s3(st);
	char okey[S3_KEY_MAX + 1];
	uint64_t size;
	int ret = object_key(s, key, true, okey);

	if (ret)
		return ret;
	/* DELETE answers 204 for a missing key too; the contract wants ENOENT. */
	if ((ret = s3_head(st, key, &size)))
		return ret;
	struct s3_req r = {
		.method = "DELETE", .okey = okey, .what = key,
		.timeout_ns = s->read_timeout_ns, .quiet_enoent = true,
	};
	return s3_request(s, &r);
}

static void s3_close(struct dcr_store *st)
{
	struct dcr_s3_store *s = to_s3(st);

	dcr_wq_free(s->mpu_wq);
	for (int i = 0; i < s->npool; i++)
		curl_easy_cleanup(s->pool[i]);
	if (s->share)
		curl_share_cleanup(s->share);
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_destroy(&s->share_lock[i]);
	pthread_mutex_destroy(&s->pool_lock);
	pthread_mutex_destroy(&s->probe_lock);
	dcr_aws_cfg_free(&s->aws);
	free(s->bucket);
	free(s->prefix);
	free(s->origin);
	free(s->host);
	free(s->path_base);
	free(s->base.url);
	free(s);
}

static const struct dcr_store_ops s3_ops = {
	.name = "s3",
	.get = s3_get,
	.put = s3_put,
	.head = s3_head,
	.list = s3_list,
	.del = s3_del,
	.list_partial = s3_list_partial,
	.abort_partial = s3_abort_partial,
	.close = s3_close,
};

/* ---------------------------------------------------------- open */

static bool bucket_valid(const char *b)
{
	size_t n = strlen(b);
	if (n < 3 || n > 63)
		return false;
	for (const char *p = b; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '.' || *p == '-' || *p == '_'))
			return false;
	return true;
}

/* Usable as the first label of a virtual-hosted name under TLS. */
static bool bucket_dns_label(const char *b)
{
	for (const char *p = b; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-'))
			return false;
	return b[0] != '-' && b[strlen(b) - 1] != '-';
}

static char *strf(const char *fmt, ...) DCR_PRINTF(1, 2);
static char *strf(const char *fmt, ...)
{
	va_list ap;
	char *p;

	va_start(ap, fmt);
	int n = vasprintf(&p, fmt, ap);
	va_end(ap);
	return n < 0 ? NULL : p;
}

static int parse_url(struct dcr_s3_store *s, const char *url)
{
	const char *b = url + 5, *slash = strchr(b, '/');
	size_t bl = slash ? (size_t)(slash - b) : strlen(b);

	if (!(s->bucket = strndup(b, bl)))
		return DCR_ERR(-ENOMEM);
	if (!bucket_valid(s->bucket)) {
		dcr_err("%s: invalid bucket name '%s'", url, s->bucket);
		return DCR_ERR(-EINVAL);
	}
	const char *p = slash ? slash : "";
	while (*p == '/')
		p++;
	size_t pl = strlen(p);
	while (pl && p[pl - 1] == '/')
		pl--;
	if (!(s->prefix = strndup(p, pl)))
		return DCR_ERR(-ENOMEM);
	if (*s->prefix && (!key_valid(s->prefix) || pl > S3_KEY_MAX / 2)) {
		dcr_err("%s: invalid prefix '%s'", url, s->prefix);
		return DCR_ERR(-EINVAL);
	}
	s->base.url = *s->prefix ? strf("s3://%s/%s", s->bucket, s->prefix) :
				   strf("s3://%s", s->bucket);
	return s->base.url ? 0 : DCR_ERR(-ENOMEM);
}

/* Work out origin, Host and the path base from endpoint and addressing. */
static int setup_addressing(struct dcr_s3_store *s)
{
	const char *ep = s->aws.endpoint;
	char *aws_ep = NULL;

	if (!ep) {
		if (!(aws_ep = strf("https://s3.%s.amazonaws.com", s->aws.region)))
			return DCR_ERR(-ENOMEM);
		ep = aws_ep;
	}
	bool https = !strncmp(ep, "https://", 8);
	const char *hostport = ep + (https ? 8 : 7);
	bool path = s->aws.path_style == 1 ||
		    (s->aws.path_style == -1 && (s->aws.endpoint || !bucket_dns_label(s->bucket)));
	if (!path && !bucket_dns_label(s->bucket)) {
		dcr_warn("%s: bucket '%s' is not a DNS label; using path-style addressing",
			 s->base.url, s->bucket);
		path = true;
	}
	/* Host header: curl sends the port only when it is not the default. */
	const char *colon = strrchr(hostport, ':');
	const char *bracket = strrchr(hostport, ']');
	char *hp = NULL;
	if (colon && (!bracket || colon > bracket) &&
	    !strcmp(colon + 1, https ? "443" : "80"))
		hp = strndup(hostport, (size_t)(colon - hostport));
	else
		hp = strdup(hostport);
	int ret = 0;
	if (!hp) {
		ret = DCR_ERR(-ENOMEM);
		goto out;
	}
	if (path) {
		s->host = hp;
		hp = NULL;
		s->origin = strf("%s://%s", https ? "https" : "http", s->host);
		s->path_base = strf("/%s", s->bucket);
	} else {
		s->host = strf("%s.%s", s->bucket, hp);
		s->origin = strf("%s://%s", https ? "https" : "http", s->host ? s->host : "");
		s->path_base = strdup("");
	}
	if (!s->host || !s->origin || !s->path_base)
		ret = DCR_ERR(-ENOMEM);
	dcr_debug("%s: %s-style requests to %s (region %s, credentials from %s)",
		  s->base.url, path ? "path" : "virtual-hosted",
		  s->origin ? s->origin : "?", s->aws.region,
		  s->aws.cred_source ? s->aws.cred_source : "nowhere");
out:
	free(hp);
	free(aws_ep);
	return ret;
}

/* An operation's time bound: the setting, else $@var, else @def (ms). */
static int64_t timeout_ns(unsigned int opt_ms, const char *var, unsigned int def)
{
	uint64_t ms = opt_ms;
	const char *v = getenv(var);

	if (!ms && v && (dcr_parse_u64(v, &ms) || ms == 0 || ms > 86400000)) {
		dcr_warn("ignoring %s=%s (milliseconds, 1 to 86400000)", var, v);
		ms = 0;
	}
	return (int64_t)(ms ? ms : def) * 1000000;
}

int dcr_s3_open(const char *url, const struct dcr_store_cfg *cfg, int flags,
		struct dcr_store **out)
{
	int ret;

	(void)flags;
	if (strncmp(url, "s3://", 5)) {
		dcr_err("%s: not an s3:// URL", url);
		return DCR_ERR(-EINVAL);
	}
	pthread_once(&curl_once, curl_init_once);
	if (curl_init_rc != CURLE_OK) {
		dcr_err("libcurl initialisation failed: %s", curl_easy_strerror(curl_init_rc));
		return DCR_ERR(-EIO);
	}
	struct dcr_s3_store *s = calloc(1, sizeof(*s));
	if (!s)
		return DCR_ERR(-ENOMEM);
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&s->share_lock[i], NULL);
	pthread_mutex_init(&s->pool_lock, NULL);
	pthread_mutex_init(&s->probe_lock, NULL);
	s->aws.path_style = -1;
	s->base.ops = &s3_ops;

	if ((ret = parse_url(s, url)))
		goto err_close;
	if ((ret = dcr_aws_cfg_load(cfg, &s->aws))) {
		/* its reason was logged, naming the file or variable */
		dcr_debug("%s: cannot resolve the S3 settings: %s", s->base.url,
			  dcr_strerror(ret));
		goto err_close;
	}
	if ((ret = setup_addressing(s)))
		goto err_close;
	s->read_timeout_ns = timeout_ns(cfg ? cfg->read_timeout_ms : 0,
					"DCR_S3_READ_TIMEOUT_MS", S3_READ_TIMEOUT_MS);
	s->write_timeout_ns = timeout_ns(cfg ? cfg->write_timeout_ms : 0,
					 "DCR_S3_WRITE_TIMEOUT_MS", S3_WRITE_TIMEOUT_MS);
	s->mirror = cfg && cfg->mirror;
	struct dcr_wq_opts wo = {
		.name = "dcr-s3-mpu", .threads = S3_MPU_THREADS - 1, .max_items = 1,
	};
	if ((ret = dcr_wq_create(&wo, &s->mpu_wq)))
		goto err_close;

	if (!(s->share = curl_share_init())) {
		ret = DCR_ERR(-ENOMEM);
		goto err_close;
	}
	curl_share_setopt(s->share, CURLSHOPT_LOCKFUNC, share_lock);
	curl_share_setopt(s->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
	curl_share_setopt(s->share, CURLSHOPT_USERDATA, s);
	curl_share_setopt(s->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
	curl_share_setopt(s->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
	*out = &s->base;
	return 0;

err_close:
	s3_close(&s->base);
	return ret;
}
