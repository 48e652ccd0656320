/* SPDX-License-Identifier: MIT */
/*
 * mirror.c - pack GETs through mirrors in front of an S3 store (see
 * mirror.h). Locks: each mirror's lock guards its incident state (held
 * only to read or update it, never across a request); the counters are
 * atomics.
 */
#include "config.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "common.h"
#include "hash.h"
#include "mirror.h"
#include "s3.h"

#define BACKOFF_MIN_NS (1000LL * 1000000)
#define BACKOFF_MAX_NS (30000LL * 1000000)
#define MIRROR_SHARE_MIN_MS 1000u  /* a mirror's bound is at least this */
#define MIRROR_LEFT_MIN_NS (100LL * 1000000) /* less left: skip mirrors */
#define READ_TIMEOUT_DEFAULT_MS 30000u /* s3.h's default */
#define PACKS_PREFIX "packs/"
#define PACK_KEY_MAX 128 /* "packs/" + 64 hex digits, and room */

struct counters {
	atomic_uint_fast64_t requests, bytes, errors;
};

struct mirror {
	struct dcr_store *st;  /* an S3 store whose endpoint is the mirror */
	char *url;
	struct counters n;
	pthread_mutex_t lock;
	int64_t skip_until;    /* CLOCK_MONOTONIC ns; 0: healthy */
	int64_t backoff_ns;
	/* the incident is of bytes that failed their check: a GET that
	 * answers does not end it (its bytes are checked only later); it
	 * ends when no frame fails for BACKOFF_MAX_NS after a probe */
	bool corrupting;
};

struct dcr_mirror_store {
	struct dcr_store base; /* must be first */
	struct dcr_store *origin;
	struct counters on; /* the origin's GETs */
	atomic_uint_fast64_t refetches;
	int64_t share_ns;   /* one mirror request's bound */
	size_t n;
	struct mirror m[DCR_MIRRORS_MAX];
};

static const struct dcr_store_ops mirror_ops;

static struct dcr_mirror_store *to_mirror(struct dcr_store *st)
{
	return (struct dcr_mirror_store *)st;
}

static void count(struct counters *c, int ret, uint64_t bytes)
{
	atomic_fetch_add_explicit(ret ? &c->errors : &c->requests, 1,
				  memory_order_relaxed);
	if (!ret)
		atomic_fetch_add_explicit(&c->bytes, bytes,
					  memory_order_relaxed);
}

/* A GET from the store itself, counted. */
static int origin_get(struct dcr_mirror_store *ms, const char *key,
		      uint64_t off, uint64_t len, int64_t deadline,
		      struct dcr_buf *out)
{
	size_t start = out->len;
	int ret = dcr_store_get_within(ms->origin, key, off, len, deadline,
				       out);

	count(&ms->on, ret && ret != -ENOENT, out->len - start);
	return ret;
}

/* Rendezvous weight of mirror @url for @key (same on every mount). */
static uint64_t weight(const char *url, const char *key)
{
	char msg[DCR_MIRROR_URL_MAX + PACK_KEY_MAX + 2];
	uint8_t h[DCR_HASH_LEN];
	int n = snprintf(msg, sizeof(msg), "%s\n%s", url, key);

	dcr_sha256(msg, n < 0 ? 0 : DCR_MIN((size_t)n, sizeof(msg) - 1), h);
	return dcr_get_le64(h);
}

/* The mirrors in @key's rendezvous order into @order; their count. */
static size_t rank(const struct dcr_mirror_store *ms, const char *key,
		   size_t order[DCR_MIRRORS_MAX])
{
	uint64_t w[DCR_MIRRORS_MAX];

	for (size_t i = 0; i < ms->n; i++) {
		size_t j = i;

		w[i] = weight(ms->m[i].url, key);
		/* insertion sort, heaviest first; ties by list order */
		while (j > 0 && w[order[j - 1]] < w[i]) {
			order[j] = order[j - 1];
			j--;
		}
		order[j] = i;
	}
	return ms->n;
}

/* Whether @m may be asked now: healthy, or due for its next probe. */
static bool usable(struct mirror *m, int64_t now)
{
	bool ok;

	pthread_mutex_lock(&m->lock);
	ok = now >= m->skip_until;
	pthread_mutex_unlock(&m->lock);
	return ok;
}

static const char *failure(int ret)
{
	switch (ret) {
	case -ETIMEDOUT:
		return "no answer within its share of the time bound";
	case -EACCES:
		return "the request was refused (403: does the tier preserve "
		       "Host, and does the origin accept path-style requests?)";
	case -EIO:
		return "refused connection, 5xx or stalled transfer";
	case -EBADMSG:
		return "its bytes failed their check (the mirror serves damaged "
		       "bytes)";
	default:
		return dcr_strerror(ret);
	}
}

/* Request to @m for @key failed with @ret: start or extend its incident. */
static void mirror_failed(struct mirror *m, const char *key, int ret)
{
	int64_t now = dcr_mono_ns(), backoff;
	bool first;

	pthread_mutex_lock(&m->lock);
	/* a corrupting incident quiet for longer than the longest backoff
	 * since its last probe is over: this is a new one */
	first = m->skip_until == 0 ||
		(m->corrupting && now - m->skip_until > BACKOFF_MAX_NS);
	if (now < m->skip_until) {
		/* Another request of the same incident: already counted. */
		pthread_mutex_unlock(&m->lock);
		return;
	}
	backoff = first ? BACKOFF_MIN_NS :
		  DCR_MIN(m->backoff_ns * 2, BACKOFF_MAX_NS);
	m->backoff_ns = backoff;
	m->skip_until = now + backoff;
	m->corrupting = ret == -EBADMSG;
	pthread_mutex_unlock(&m->lock);
	if (first)
		dcr_warn("mirror %s: GET %s failed: %s; pack GETs go to the "
			 "store, the mirror is probed again with backoff",
			 m->url, key, failure(ret));
	else
		dcr_debug("mirror %s: GET %s failed again: %s; next probe in "
			  "%" PRId64 " ms", m->url, key, failure(ret),
			  backoff / 1000000);
}

static void mirror_ok(struct mirror *m)
{
	bool was;

	pthread_mutex_lock(&m->lock);
	if (m->corrupting) { /* whether these bytes are right is not known yet */
		pthread_mutex_unlock(&m->lock);
		return;
	}
	was = m->skip_until != 0;
	m->skip_until = 0;
	m->backoff_ns = 0;
	pthread_mutex_unlock(&m->lock);
	if (was)
		dcr_info("mirror %s answers again; pack GETs go to it", m->url);
}

/*
 * One GET of @key from mirror @m within its share of the time bound and
 * by @end (0: no more than the share): 0 with every byte asked for (or
 * to the end with DCR_GET_ALL), else -errno and @out as it was.
 */
static int mirror_try(struct dcr_mirror_store *ms, struct mirror *m,
		      const char *key, uint64_t off, uint64_t len,
		      int64_t end, struct dcr_buf *out)
{
	size_t start = out->len;
	int ret;

	end = end ? DCR_MIN(end, dcr_mono_ns() + ms->share_ns) :
		    dcr_mono_ns() + ms->share_ns;
	ret = dcr_store_get_within(m->st, key, off, len, end, out);
	if (!ret && len != DCR_GET_ALL && out->len - start != len) {
		dcr_debug("mirror %s: GET %s: %zu of %" PRIu64 " bytes at %"
			  PRIu64 "; asking the store", m->url, key,
			  out->len - start, len, off);
		ret = -ENODATA; /* short: maybe the end, the store knows */
	}
	if (ret)
		out->len = start;
	return ret;
}

static int mirror_get(struct dcr_store *st, const char *key, uint64_t off,
		      uint64_t len, int64_t deadline, struct dcr_buf *out)
{
	struct dcr_mirror_store *ms = to_mirror(st);
	size_t order[DCR_MIRRORS_MAX], n;
	int64_t now = dcr_mono_ns();

	if (len == 0 || strncmp(key, PACKS_PREFIX, strlen(PACKS_PREFIX)))
		return origin_get(ms, key, off, len, deadline, out);
	n = rank(ms, key, order);
	for (size_t i = 0; i < n; i++) {
		struct mirror *m = &ms->m[order[i]];
		size_t start = out->len;
		int ret;

		if (!usable(m, now))
			continue; /* the next in the key's order takes it */
		now = dcr_mono_ns();
		/* No time to spare: the store, and no fault of the mirror's
		 * (neither counted nor an incident). */
		if (deadline && deadline - now < MIRROR_LEFT_MIN_NS)
			break;
		/* at most half of what is left: the store may need it */
		ret = mirror_try(ms, m, key, off, len, deadline ?
				 now + (deadline - now) / 2 : 0, out);
		if (ret == -ENOMEM || ret == -EFBIG)
			return ret; /* ours, not the mirror's */
		if (!ret) {
			count(&m->n, 0, out->len - start);
			mirror_ok(m);
			return 0;
		}
		if (ret != -ENOENT && ret != -ENODATA) {
			count(&m->n, ret, 0);
			mirror_failed(m, key, ret);
		}
		break; /* a failed request goes to the store at once */
	}
	return origin_get(ms, key, off, len, deadline, out);
}

/* The mirror store of @st with its mirrors for @key, best first, in
 * @order; NULL if @st is not mirrored. */
static struct dcr_mirror_store *ranked(struct dcr_store *st, const char *key,
				       size_t order[DCR_MIRRORS_MAX])
{
	struct dcr_mirror_store *ms;

	if (!dcr_store_is_mirrored(st))
		return NULL;
	ms = to_mirror(st);
	rank(ms, key, order);
	return ms;
}

int dcr_mirror_refetch(struct dcr_store *st, const char *key, uint64_t off,
		       uint64_t len, int64_t deadline, struct dcr_buf *out)
{
	size_t order[DCR_MIRRORS_MAX];
	struct dcr_mirror_store *ms = ranked(st, key, order);
	struct mirror *m = NULL;
	int64_t now = dcr_mono_ns();

	if (!ms)
		return -EOPNOTSUPP;
	atomic_fetch_add_explicit(&ms->refetches, 1, memory_order_relaxed);
	/* the mirror mirror_get asked: the first of the key's order not
	 * skipped, or one already in an incident of damaged bytes (another
	 * frame of the same GET); none: the bytes came from the store */
	for (size_t i = 0; i < ms->n && !m; i++) {
		struct mirror *c = &ms->m[order[i]];
		bool bad;

		pthread_mutex_lock(&c->lock);
		bad = c->corrupting && now < c->skip_until;
		pthread_mutex_unlock(&c->lock);
		if (bad || usable(c, now))
			m = c;
	}
	/*
	 * A mirror serving damaged bytes is backed off like a failing one,
	 * and said once per incident (mirror_failed): otherwise every frame
	 * would be fetched twice, with one warning each.
	 */
	if (m) {
		count(&m->n, -EBADMSG, 0);
		mirror_failed(m, key, -EBADMSG);
	}
	dcr_debug("%s: bytes %" PRIu64 "+%" PRIu64 " failed their check after "
		  "a GET through mirror %s; fetching them again from the store",
		  key, off, len, m ? m->url : ms->m[order[0]].url);
	return origin_get(ms, key, off, len, deadline, out);
}

int dcr_mirror_pick(struct dcr_store *st, const char *key, const char **url)
{
	size_t order[DCR_MIRRORS_MAX];
	struct dcr_mirror_store *ms = ranked(st, key, order);

	if (!ms)
		return -EOPNOTSUPP;
	if (url)
		*url = ms->m[order[0]].url;
	return (int)order[0];
}

int dcr_mirror_warm(struct dcr_store *st, const char *key, uint64_t off,
		    uint64_t len, int64_t deadline, struct dcr_buf *out,
		    const char **url)
{
	struct dcr_mirror_store *ms;
	size_t order[DCR_MIRRORS_MAX], start = out->len;
	struct mirror *m;
	int ret;

	if (!dcr_store_is_mirrored(st))
		return -EOPNOTSUPP;
	if (strncmp(key, PACKS_PREFIX, strlen(PACKS_PREFIX)))
		return DCR_ERR(-EINVAL);
	ms = to_mirror(st);
	rank(ms, key, order);
	m = &ms->m[order[0]];
	if (url)
		*url = m->url;
	if (deadline && dcr_mono_ns() >= deadline)
		return -ETIMEDOUT;
	ret = mirror_try(ms, m, key, off, len, deadline, out);
	count(&m->n, ret, out->len - start);
	return ret;
}

/* ------------------------------------------------ everything else: origin */

static int mirror_put(struct dcr_store *st, const char *key, const void *data,
		      uint64_t len, int flags)
{
	return dcr_store_put(to_mirror(st)->origin, key, data, len, flags);
}

static int mirror_head(struct dcr_store *st, const char *key, uint64_t *size)
{
	return dcr_store_head(to_mirror(st)->origin, key, size);
}

static int mirror_list(struct dcr_store *st, const char *prefix,
		       dcr_list_fn fn, void *arg)
{
	return dcr_store_list(to_mirror(st)->origin, prefix, fn, arg);
}

static int mirror_del(struct dcr_store *st, const char *key)
{
	return dcr_store_del(to_mirror(st)->origin, key);
}

static int mirror_list_partial(struct dcr_store *st, dcr_list_fn fn,
			       void *arg)
{
	return dcr_store_list_partial(to_mirror(st)->origin, fn, arg);
}

static int mirror_abort_partial(struct dcr_store *st, const char *key,
				const char *upload)
{
	return dcr_store_abort_partial(to_mirror(st)->origin, key, upload);
}

/* Close the mirrors and the wrapper; the origin only with @origin_too. */
static void mirror_free(struct dcr_mirror_store *ms, bool origin_too)
{
	for (size_t i = 0; i < ms->n; i++) {
		dcr_store_close(ms->m[i].st);
		free(ms->m[i].url);
		pthread_mutex_destroy(&ms->m[i].lock);
	}
	if (origin_too)
		dcr_store_close(ms->origin);
	free(ms->base.url);
	free(ms);
}

static void mirror_close(struct dcr_store *st)
{
	mirror_free(to_mirror(st), true);
}

static const struct dcr_store_ops mirror_ops = {
	.name = "s3+mirror",
	.get = mirror_get,
	.put = mirror_put,
	.head = mirror_head,
	.list = mirror_list,
	.del = mirror_del,
	.list_partial = mirror_list_partial,
	.abort_partial = mirror_abort_partial,
	.close = mirror_close,
};

bool dcr_store_is_mirrored(const struct dcr_store *st)
{
	return st && st->ops == &mirror_ops;
}

int dcr_mirror_get_stats(struct dcr_store *st, struct dcr_mirror_stats *s)
{
	struct dcr_mirror_store *ms;
	int64_t now = dcr_mono_ns();

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)
	if (!dcr_store_is_mirrored(st))
		return -EOPNOTSUPP;
	ms = to_mirror(st);
	memset(s, 0, sizeof(*s));
	s->n = 1 + ms->n;
	snprintf(s->src[0].url, sizeof(s->src[0].url), "%s", st->url);
	s->src[0].requests = LOAD(ms->on.requests);
	s->src[0].bytes = LOAD(ms->on.bytes);
	s->src[0].errors = LOAD(ms->on.errors);
	for (size_t i = 0; i < ms->n; i++) {
		struct dcr_mirror_source *d = &s->src[1 + i];

		snprintf(d->url, sizeof(d->url), "%s", ms->m[i].url);
		d->requests = LOAD(ms->m[i].n.requests);
		d->bytes = LOAD(ms->m[i].n.bytes);
		d->errors = LOAD(ms->m[i].n.errors);
		d->skipping = !usable(&ms->m[i], now);
	}
	s->refetches = LOAD(ms->refetches);
#undef LOAD
	return 0;
}

/* ---------------------------------------------------------------- open */

/* http(s)://host[:port] with an optional trailing '/', as a new string
 * without it; NULL (logged) if @u is not one. */
static char *mirror_url(const char *u, size_t n)
{
	size_t skip = !strncmp(u, "http://", 7) ? 7 :
		      !strncmp(u, "https://", 8) ? 8 : 0;

	if (n && u[n - 1] == '/')
		n--;
	if (!skip || n <= skip || n >= DCR_MIRROR_URL_MAX ||
	    memchr(u + skip, '/', n - skip) || memchr(u + skip, '?', n - skip) ||
	    memchr(u + skip, '@', n - skip)) {
		dcr_err("mirror '%.*s': not an http(s)://host[:port] URL",
			(int)DCR_MIN(n, (size_t)DCR_MIRROR_URL_MAX), u);
		return NULL;
	}
	char *s = strndup(u, n);
	if (!s)
		dcr_err("mirror '%.*s': out of memory", (int)n, u);
	return s;
}

int dcr_mirror_open(struct dcr_store *origin, const char *list,
		    const struct dcr_store_cfg *cfg, struct dcr_store **out)
{
	static const char seps[] = ", \t\n";
	struct dcr_store_cfg mcfg = cfg ? *cfg : (struct dcr_store_cfg){ 0 };
	struct dcr_mirror_store *ms;
	unsigned int share_ms;
	int ret = 0;

	if (strcmp(origin->ops->name, "s3")) {
		dcr_err("%s: mirrors need an s3:// store", origin->url);
		return DCR_ERR(-EINVAL);
	}
	ms = calloc(1, sizeof(*ms));
	if (!ms)
		return DCR_ERR(-ENOMEM);
	ms->base.ops = &mirror_ops;
	ms->origin = origin;
	if (!(ms->base.url = strdup(origin->url))) {
		free(ms);
		return DCR_ERR(-ENOMEM);
	}
	share_ms = (mcfg.read_timeout_ms ? mcfg.read_timeout_ms :
		    READ_TIMEOUT_DEFAULT_MS) / 3;
	share_ms = DCR_MAX(share_ms, MIRROR_SHARE_MIN_MS);
	ms->share_ns = (int64_t)share_ms * 1000000;
	mcfg.read_timeout_ms = share_ms;
	mcfg.path_style = 1;
	mcfg.mirror = 1;
	for (const char *p = list + strspn(list, seps); *p;
	     p += strspn(p, seps)) {
		size_t len = strcspn(p, seps);
		struct mirror *m;
		char *u;

		if (ms->n == DCR_MIRRORS_MAX) {
			dcr_err("%s: more than %d mirrors", origin->url,
				DCR_MIRRORS_MAX);
			ret = DCR_ERR(-EINVAL);
			goto err_free;
		}
		if (!(u = mirror_url(p, len))) {
			ret = DCR_ERR(-EINVAL);
			goto err_free;
		}
		for (size_t i = 0; i < ms->n; i++)
			if (!strcmp(ms->m[i].url, u)) {
				dcr_err("mirror %s given twice", u);
				free(u);
				ret = DCR_ERR(-EINVAL);
				goto err_free;
			}
		m = &ms->m[ms->n];
		mcfg.endpoint = u;
		ret = dcr_s3_open(origin->url, &mcfg, 0, &m->st);
		if (ret) {
			free(u);
			goto err_free;
		}
		m->url = u;
		pthread_mutex_init(&m->lock, NULL);
		ms->n++;
		p += len;
	}
	if (!ms->n) {
		dcr_err("%s: an empty list of mirrors", origin->url);
		ret = DCR_ERR(-EINVAL);
		goto err_free;
	}
	dcr_info("%s: pack GETs through %zu mirror%s (each request within "
		 "%u ms)", origin->url, ms->n, ms->n > 1 ? "s" : "", share_ms);
	*out = &ms->base;
	return 0;

err_free:
	mirror_free(ms, false);
	return ret;
}
