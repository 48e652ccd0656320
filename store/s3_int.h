/* SPDX-License-Identifier: MIT */
/*
 * s3_int.h - the S3 backend's internals (s3.h is its contract): the
 * store and request structs and what one file of the backend calls in
 * another. Not for use outside these store/ files:
 *
 *   s3.c          the store ops (head, get, put, del, close) and open
 *   s3_request.c  one request: performed on a pooled handle, its outcome
 *                 classified, retried with backoff, logged once
 *   s3_sign.c     AWS Signature V4 and its URI encoding
 *   s3_xml.c      the XML of S3's answers
 *   s3_mpu.c      multipart uploads (large puts)
 *   s3_list.c     listings: ListObjectsV2 and ListMultipartUploads
 */
#ifndef DCR_S3_INT_H
#define DCR_S3_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <curl/curl.h>

#include "awscfg.h"
#include "buf.h"
#include "common.h"
#include "hash.h"
#include "objstore.h"
#include "s3_xml.h"
#include "wq.h"

#define S3_KEY_MAX 1024             /* S3's limit on object key bytes */
#define S3_POOL_MAX 64              /* idle easy handles kept */
#define S3_ATTEMPTS_MAX 10
/* A host name that does not resolve is asked again this often, not for
 * the whole retry budget: DNS answers "no such name" quickly and for
 * good, and the message that names the host is what the user needs. */
#define S3_RESOLVE_ATTEMPTS 2
#define S3_BACKOFF_BASE_MS 100
#define S3_BACKOFF_CAP_MS 4000
#define S3_CONNECT_TIMEOUT_MS 5000
#define S3_LOW_SPEED_TIME_S 15      /* abort a transfer stalled this long */
#define S3_READ_TIMEOUT_MS 30000
#define S3_WRITE_TIMEOUT_MS 600000
#define S3_ERRBODY_MAX 16384        /* error documents we keep */
#define S3_LIST_BODY_MAX (16u << 20) /* one ListObjectsV2 page */
#define S3_SINGLE_PUT_MAX ((uint64_t)5 << 30)
#define S3_MPU_THRESHOLD ((uint64_t)64 << 20)
#define S3_MPU_PART_MIN ((uint64_t)16 << 20)
#define S3_MPU_PARTS_MAX 10000
#define S3_ETAG_MAX 128
#define S3_EMPTY_SHA256 \
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* A pooled connection: an easy handle and the multi handle it runs on
 * (which keeps its live connections between requests). */
struct s3_conn {
	CURL *h;
	CURLM *m;
};

struct dcr_s3_store {
	struct dcr_store base; /* must be first */
	struct dcr_aws_cfg aws;
	char *bucket;
	char *prefix;     /* "" or "p/q" (no leading or trailing '/') */
	char *origin;     /* "scheme://host[:port]" requests go to */
	char *host;       /* Host header value, signed */
	char *path_base;  /* "/bucket" (path-style) or "" (virtual-hosted) */
	int64_t read_timeout_ns;
	int64_t write_timeout_ns;
	bool mirror;      /* dcr_store_cfg.mirror: one attempt, quiet */
	atomic_bool reached; /* some request got an HTTP reply (s3_request) */

	CURLSH *share;
	pthread_mutex_t share_lock[CURL_LOCK_DATA_LAST];
	pthread_mutex_t pool_lock;
	struct s3_conn pool[S3_POOL_MAX];
	int npool;

	pthread_mutex_t probe_lock;
	int condput; /* 0 unknown, 1 If-None-Match honoured, -1 ignored */

	struct dcr_wq *mpu_wq; /* multipart parts (dcr_wq_par_for), mpu_parts - 1 workers (at least 1) */
	int mpu_parts;         /* parts of one upload in flight (dcr_store_cfg) */
};

static inline struct dcr_s3_store *to_s3(struct dcr_store *st)
{
	return (struct dcr_s3_store *)st;
}

/* One request, for s3_request (s3.c). */
struct s3_req {
	const char *method;    /* GET HEAD PUT POST DELETE */
	const char *okey;      /* full object key, NULL for the bucket */
	const char *query;     /* canonical query string, or NULL */
	const char *what;      /* store key or prefix, for messages */
	const void *body;      /* PUT/POST payload */
	size_t body_len;
	const char *body_sha;  /* its hex SHA-256 (NULL: computed) */
	const char *content_type;
	bool if_none_match;    /* send If-None-Match: * */
	bool has_range;
	uint64_t range_off, range_len; /* range_len may be DCR_GET_ALL */
	struct dcr_buf *out;   /* the 2xx body is appended here, or NULL */
	int64_t timeout_ns;    /* bound for all attempts together */
	int64_t deadline;      /* the caller's bound on its whole operation
				  (CLOCK_MONOTONIC; 0: none) */
	bool quiet_enoent;     /* 404 NoSuchKey is expected: log at debug */

	/* results */
	bool maybe_applied;    /* an earlier send (a failed attempt, or curl's
				  own re-send: on_seek) may have taken effect */
	bool unresolved;       /* the last attempt could not resolve the host */
	bool unreachable;      /* ... or connect to it (nothing was sent) */
	long status;
	char etag[S3_ETAG_MAX];
	uint64_t clen;
	bool has_clen;
};

/* ---- s3.c */

/* The full object key of store key @key (with the prefix) into @buf. */
int object_key(const struct dcr_s3_store *s, const char *key,
		      bool check, char out[S3_KEY_MAX + 1]);

/* ---- s3_request.c */

/* Perform @r with retries: 0 or -errno; every failure but the expected
 * ones (-ENOENT when quiet, -EEXIST, -ECANCELED) is logged once, naming
 * the key. Once the process's stop is requested (dcr_stop_request) a
 * transfer in flight is aborted and a retry's wait ends: -ECANCELED, at
 * once (logged at debug level: the process is going away).
 * Until the store has answered once, a host it cannot resolve or connect
 * to is tried S3_RESOLVE_ATTEMPTS times, then -EHOSTUNREACH ("cannot
 * reach": a wrong endpoint or a server that is down fails a mount or a
 * tool at once); afterwards that is -EIO after the whole retry budget. */
int s3_request(struct dcr_s3_store *s, struct s3_req *r);
/* Free a pooled connection's handles (s3.c's close). */
void s3_conn_free(struct s3_conn *c);
/* Append the string @s to @b; terminate @b as a C string. */
int buf_str(struct dcr_buf *b, const char *s);
int buf_cstr(struct dcr_buf *b);
/* Append printf(@fmt, ...) (under 512 bytes) to @b: 0, -EOVERFLOW or
 * -ENOMEM (past @b's maximum). */
int buf_printf(struct dcr_buf *b, const char *fmt, ...) DCR_PRINTF(2, 3);
/* A pseudo-random number (xorshift, seeded per thread). */
uint64_t rand_u64(void);
/* The <Code> and <Message> of S3 error document @b, sanitized, into
 * @code (@cc bytes) and @msg (@mc); empty if absent. */
void error_doc(const struct dcr_buf *b, char *code, size_t cc, char *msg,
		      size_t mc);

/* ---- s3_sign.c */

/* The signed header list for one attempt of @r (path @canon_uri,
 * payload hash @payload_sha), for curl_slist_free_all; NULL on failure
 * (no memory, a value too long). */
struct curl_slist *sign(struct dcr_s3_store *s, const struct s3_req *r,
			       const char *canon_uri, const char *payload_sha);
/* The hex SHA-256 of @p[0..n) into @hex. */
void sha256_hex(const void *p, size_t n, char hex[DCR_HASH_HEX_LEN + 1]);
/* Append @s to @b percent-encoded as SigV4 wants it. */
int uri_encode(struct dcr_buf *b, const char *s, bool keep_slash);

/* ---- s3_xml.c: s3_xml.h */

/* ---- s3_mpu.c */

/* Put @data (@len bytes, above S3_MPU_THRESHOLD) as object @okey (store
 * key @key) in a multipart upload, its parts in parallel on the store's
 * mpu_wq; a failed upload is aborted (best effort). 0 or -errno,
 * logged. */
int put_multipart(struct dcr_s3_store *s, const char *key,
			 const char *okey, const void *data, uint64_t len);

/* ---- s3_list.c: the list, list_partial and abort_partial ops. */
int s3_list(struct dcr_store *st, const char *prefix, dcr_list_fn fn,
		   void *arg);
int s3_list_partial(struct dcr_store *st, dcr_list_fn fn, void *arg);
int s3_abort_partial(struct dcr_store *st, const char *key,
			    const char *upload);

#endif /* DCR_S3_INT_H */
