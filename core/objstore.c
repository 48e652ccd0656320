/* SPDX-License-Identifier: MIT */
/*
 * objstore.c - store-level helpers built only on the ops table:
 * finding the latest version, fetching manifests, tags, the store
 * marker.
 */
#include "config.h"

#include <inttypes.h>
#include <stdlib.h>
#include <sys/random.h>
#include <unistd.h>
#include <time.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "hash.h"
#include "manifest.h"
#include "objstore.h"
#include "sign.h"

#define MARKER_OBJ_MAX 4096

static int latest_cb(const char *key, const struct dcr_obj_info *info, void *arg)
{
	uint64_t *best = arg, v;

	if (dcr_version_from_key(key, &v) == 0 && v > *best)
		*best = v;
	return 0;
}

int dcr_store_latest(struct dcr_store *st, uint64_t *v)
{
	*v = 0;
	return dcr_store_list(st, "versions/", latest_cb, v);
}

void dcr_store_log_newer_manifest(const char *url, const char *key)
{
	dcr_err("%s: manifest %s was written by a newer dcrfs (a manifest "
		"format above %d): upgrade this one to read it", url, key,
		DCR_MANIFEST_FORMAT);
}

/* Wait before fetching a damaged manifest again: 100 ms, then 200 ms...
 * within @deadline. -ECANCELED if the process stops, -ETIMEDOUT past it. */
static int refetch_wait(int attempt, int64_t deadline)
{
	int64_t ns = 100LL * 1000 * 1000 * attempt;

	if (deadline && dcr_mono_ns() + ns >= deadline)
		return DCR_ERR(-ETIMEDOUT);
	return dcr_stop_sleep_ns(ns) ? -ECANCELED : 0;
}

int dcr_manifest_fetch(struct dcr_store *st, struct dcr_mfetch *f,
		       struct dcr_manifest *m)
{
	_Static_assert(sizeof(f->mhash) == DCR_HASH_LEN, "a SHA-256");
	const char *url = st->url ? st->url : "store";
	char why[96];
	struct dcr_buf b;
	int ret;

	memset(m, 0, sizeof(*m));
	dcr_buf_init(&b, DCR_MANIFEST_OBJ_MAX);
	for (int attempt = 1;; attempt++) {
		b.len = 0;
		ret = dcr_store_get_within(st, f->key, 0, DCR_GET_ALL,
					   f->deadline, &b);
		if (ret) {
			if (ret != -ENOENT && !f->quiet)
				dcr_err("%s: cannot read %s: %s", url, f->key,
					dcr_strerror(ret));
			break;
		}
		dcr_sha256(b.data, b.len, f->mhash);
		f->size = b.len;
		if (f->want && !dcr_hash_eq(f->mhash, f->want)) {
			snprintf(why, sizeof(why), "does not hash to its name");
			ret = DCR_ERR(-EBADMSG);
		} else if ((ret = dcr_manifest_decode(b.data, b.len, m)) ==
			   -EPROTONOSUPPORT) {
			/* Not damage: fetching it again will not help. */
			dcr_store_log_newer_manifest(url, f->key);
			break;
		} else if (ret) {
			snprintf(why, sizeof(why), "is corrupt or invalid (%s)",
				 dcr_strerror(ret));
		} else if (m->version != f->v) {
			snprintf(why, sizeof(why), "claims to be version %" PRIu64
				 ", not %" PRIu64, m->version, f->v);
			dcr_manifest_free(m);
			memset(m, 0, sizeof(*m));
			ret = DCR_ERR(-EBADMSG);
		}
		if (!ret)
			break;
		if (ret == -ENOMEM)
			break;
		ret = DCR_ERR(-EBADMSG);
		if (attempt == DCR_MANIFEST_TRIES) {
			dcr_err("%s: manifest %s %s, %d times in a row", url,
				f->key, why, attempt);
			break;
		}
		dcr_debug("%s: manifest %s %s; fetching it again", url, f->key,
			  why);
		if ((ret = refetch_wait(attempt, f->deadline))) {
			dcr_err("%s: manifest %s %s, and fetching it again: %s",
				url, f->key, why, dcr_strerror(ret));
			break;
		}
	}
	if (!ret && b.len >= DCR_HASH_LEN)
		memcpy(f->tail, b.data + b.len - DCR_HASH_LEN, DCR_HASH_LEN);
	dcr_buf_free(&b);
	return ret;
}

int dcr_store_fetch_manifest(struct dcr_store *st, const char *key,
			     uint64_t v, struct dcr_manifest *m,
			     uint8_t mhash[DCR_HASH_LEN])
{
	struct dcr_mfetch f = { .key = key, .v = v };
	int ret = dcr_manifest_fetch(st, &f, m);

	if (!ret && mhash)
		memcpy(mhash, f.mhash, DCR_HASH_LEN);
	return ret;
}

int dcr_store_get_manifest(struct dcr_store *st, uint64_t v,
			   struct dcr_manifest *m)
{
	char key[64];

	dcr_version_key(v, key, sizeof(key));
	return dcr_store_fetch_manifest(st, key, v, m, NULL);
}

int dcr_tag_name_valid(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > 128 || name[0] == '.')
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
			return 0;
	}
	return 1;
}

#define STR_(x) #x
#define STR(x) STR_(x)
#define TOO_LONG "longer than " STR(DCR_TAG_OBJ_MAX) " bytes"

/*
 * Parse tag object @t (@n bytes): "N\n", or "N\n" and a signature line
 * and "\n" (the last newline may be missing, as in tags written by
 * hand). 0, or -EBADMSG with *@why saying what is wrong (not logged).
 */
static int parse_tag(const char *t, size_t n, uint64_t *v,
		     struct dcr_tag_sig *ts, bool *is_signed, const char **why)
{
	char num[32];
	const char *nl = n ? memchr(t, '\n', n) : NULL; /* t may be NULL */
	size_t l1 = nl ? (size_t)(nl - t) : n;
	struct dcr_tag_sig tmp;

	if (n > DCR_TAG_OBJ_MAX) {
		*why = TOO_LONG;
		return DCR_ERR(-EBADMSG);
	}
	if (l1 == 0 || memchr(t, 0, n) || l1 >= sizeof(num))
		goto bad;
	memcpy(num, t, l1);
	num[l1] = 0;
	if (dcr_parse_u64(num, v) || *v == 0)
		goto bad;
	const char *rest = nl ? nl + 1 : t + n;
	size_t nrest = (size_t)(t + n - rest);
	if (nrest && rest[nrest - 1] == '\n')
		nrest--;
	if (is_signed)
		*is_signed = nrest > 0;
	if (!nrest)
		return 0;
	/* One line: a newline inside is a third line. */
	if (memchr(rest, '\n', nrest) ||
	    dcr_tag_sig_parse(rest, nrest, ts ? ts : &tmp)) {
		*why = "a malformed signature line";
		return DCR_ERR(-EBADMSG);
	}
	return 0;
bad:
	*why = "not a version number >= 1";
	return DCR_ERR(-EBADMSG);
}

int dcr_store_read_tag(struct dcr_store *st, const char *name, uint64_t *v,
		       struct dcr_tag_sig *ts, bool *is_signed,
		       struct dcr_tag_bad *bad)
{
	char key[160];
	struct dcr_buf b;
	const char *why = NULL;

	if (!dcr_tag_name_valid(name))
		return DCR_ERR(-EINVAL);
	snprintf(key, sizeof(key), "tags/%s", name);
	/* One byte more than any tag object: a longer one (50 MB of
	 * anything) is known malformed without being read whole. */
	dcr_buf_init(&b, DCR_TAG_OBJ_MAX + 1);
	int ret = dcr_store_get(st, key, 0, DCR_TAG_OBJ_MAX + 1, &b);
	if (ret == -EFBIG) { /* a backend that ignored the range */
		why = TOO_LONG;
		ret = DCR_ERR(-EBADMSG);
	} else if (!ret) {
		ret = parse_tag((const char *)b.data, b.len, v, ts, is_signed,
				&why);
	}
	if (ret == -EBADMSG) {
		if (bad) {
			bad->why = why;
			dcr_sha256(b.data, b.len, bad->digest);
		} else {
			dcr_err("%s: tag object %s is malformed (%s)", st->url,
				key, why);
		}
	}
	dcr_buf_free(&b);
	return ret;
}

int dcr_store_get_tag_sig(struct dcr_store *st, const char *name, uint64_t *v,
			  struct dcr_tag_sig *ts, bool *is_signed)
{
	return dcr_store_read_tag(st, name, v, ts, is_signed, NULL);
}

int dcr_store_get_tag(struct dcr_store *st, const char *name, uint64_t *v)
{
	return dcr_store_get_tag_sig(st, name, v, NULL, NULL);
}

int dcr_store_del_tag(struct dcr_store *st, const char *name)
{
	char key[160];

	if (!dcr_tag_name_valid(name))
		return DCR_ERR(-EINVAL);
	snprintf(key, sizeof(key), "tags/%s", name);
	return dcr_store_del(st, key);
}

_Static_assert(20 + 2 + DCR_TAG_SIG_TEXT_MAX <= DCR_TAG_OBJ_MAX,
	       "a signed tag object fits DCR_TAG_OBJ_MAX");

/* Write tag @name -> @v, with signature @ts unless NULL. */
static int put_tag(struct dcr_store *st, const char *name, uint64_t v,
		   const struct dcr_tag_sig *ts)
{
	char key[160], text[DCR_TAG_OBJ_MAX + 1];

	if (!dcr_tag_name_valid(name))
		return DCR_ERR(-EINVAL);
	snprintf(key, sizeof(key), "tags/%s", name);
	int n = snprintf(text, sizeof(text), "%" PRIu64 "\n", v);
	if (ts) {
		char line[DCR_TAG_SIG_TEXT_MAX];
		dcr_tag_sig_format(ts, line, sizeof(line));
		n += snprintf(text + n, sizeof(text) - (size_t)n, "%s\n", line);
		if ((size_t)n >= sizeof(text))
			return DCR_ERR(-EOVERFLOW); /* a format that outgrew the bound */
	}
	return dcr_store_put(st, key, text, (uint64_t)n, 0);
}

int dcr_store_put_tag(struct dcr_store *st, const char *name, uint64_t v)
{
	return put_tag(st, name, v, NULL);
}

int dcr_store_put_tag_signed(struct dcr_store *st, const char *name,
			     uint64_t v, const struct dcr_tag_sig *ts)
{
	return put_tag(st, name, v, ts);
}

/* ------------------------------------------------------------ marker */

/* Parse marker text @t (NUL-terminated) into @info. */
static int parse_marker(struct dcr_store *st, char *t,
			struct dcr_store_info *info)
{
	char *save = NULL, *line = strtok_r(t, "\n", &save);
	unsigned long fmt;
	char *end;

	if (!line || strncmp(line, DCR_STORE_MARKER " ", 12) != 0)
		goto bad;
	errno = 0;
	fmt = strtoul(line + 12, &end, 10);
	if (errno || *end || end == line + 12 || fmt == 0)
		goto bad;
	if (fmt > DCR_STORE_FORMAT) {
		dcr_err("%s: the store has format %lu; this dcrfs knows format "
			"%d only: use a newer dcrfs", st->url, fmt,
			DCR_STORE_FORMAT);
		return DCR_ERR(-EPROTONOSUPPORT);
	}
	line = strtok_r(NULL, "\n", &save);
	if (!line || strncmp(line, "id ", 3) != 0 || strlen(line + 3) != 32 ||
	    strspn(line + 3, "0123456789abcdef") != 32)
		goto bad;
	memset(info, 0, sizeof(*info));
	memcpy(info->id, line + 3, 32);
	info->format = (unsigned int)fmt;
	while ((line = strtok_r(NULL, "\n", &save))) {
		long long secs;
		if (sscanf(line, "created %lld", &secs) == 1 && secs > 0 &&
		    secs < INT64_MAX / 1000000000)
			info->created_ns = (int64_t)secs * 1000000000;
	}
	return 0;
bad:
	dcr_err("%s: the store marker %s is malformed", st->url,
		DCR_STORE_MARKER);
	return DCR_ERR(-EBADMSG);
}

struct lowest {
	uint64_t v;
};

static int lowest_cb(const char *key, const struct dcr_obj_info *info, void *arg)
{
	struct lowest *lo = arg;
	uint64_t v;

	(void)info;
	if (dcr_version_from_key(key, &v) == 0 && (!lo->v || v < lo->v))
		lo->v = v;
	return 0;
}

/* A store without a marker: named by its lowest manifest, if any. */
static int identify_legacy(struct dcr_store *st, struct dcr_store_info *info)
{
	uint8_t h[DCR_HASH_LEN];
	char hex[DCR_HASH_HEX_LEN + 1], key[64];
	struct lowest lo = { 0 };
	struct dcr_buf b;
	int ret;

	ret = dcr_store_list(st, "versions/", lowest_cb, &lo);
	if (ret)
		return ret;
	if (!lo.v)
		return -ENOENT;
	dcr_version_key(lo.v, key, sizeof(key));
	dcr_buf_init(&b, DCR_MANIFEST_OBJ_MAX);
	ret = dcr_store_get(st, key, 0, DCR_GET_ALL, &b);
	if (!ret) {
		dcr_sha256(b.data, b.len, h);
		dcr_hash_hex(h, hex);
		memset(info, 0, sizeof(*info));
		snprintf(info->id, sizeof(info->id), "legacy-%.24s", hex);
		info->legacy = true;
	}
	dcr_buf_free(&b);
	return ret;
}

int dcr_store_identify(struct dcr_store *st, struct dcr_store_info *info)
{
	char text[MARKER_OBJ_MAX + 1];
	struct dcr_buf b;
	int ret;

	dcr_buf_init(&b, MARKER_OBJ_MAX);
	ret = dcr_store_get(st, DCR_STORE_MARKER, 0, DCR_GET_ALL, &b);
	if (!ret || ret == -EFBIG) {
		/* Too long or holding a NUL: malformed all the same. */
		text[0] = 0;
		if (!ret && b.len && !memchr(b.data, 0, b.len)) {
			memcpy(text, b.data, b.len);
			text[b.len] = 0;
		}
		ret = parse_marker(st, text, info);
	} else if (ret == -ENOENT) {
		ret = identify_legacy(st, info);
	}
	dcr_buf_free(&b);
	return ret;
}

int dcr_store_init(struct dcr_store *st, struct dcr_store_info *info)
{
	uint8_t rnd[16];
	char text[128];
	int n, ret;

	ret = dcr_store_identify(st, info);
	if (ret != -ENOENT)
		return ret ? ret : -EEXIST;
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
		dcr_err("cannot draw a store id: %s", dcr_strerror(-errno));
		return DCR_ERR(-EIO);
	}
	n = snprintf(text, sizeof(text), DCR_STORE_MARKER " %d\nid ",
		     DCR_STORE_FORMAT);
	for (size_t i = 0; i < sizeof(rnd); i++)
		n += snprintf(text + n, sizeof(text) - (size_t)n, "%02x",
			      rnd[i]);
	n += snprintf(text + n, sizeof(text) - (size_t)n, "\ncreated %lld\n",
		      (long long)time(NULL));
	ret = dcr_store_put(st, DCR_STORE_MARKER, text, (uint64_t)n,
			    DCR_PUT_IF_ABSENT);
	if (ret == -EEXIST) { /* a racing init won: report its id */
		ret = dcr_store_identify(st, info);
		return ret ? ret : -EEXIST;
	}
	if (ret) {
		dcr_err("%s: cannot create the store marker: %s", st->url,
			dcr_strerror(ret));
		return ret;
	}
	return dcr_store_identify(st, info);
}

int dcr_intent_begin(struct dcr_store *st, char key[DCR_INTENT_KEY_MAX])
{
	uint8_t rnd[16];
	char host[256] = "", text[320];
	int n, ret;

	key[0] = 0;
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
		dcr_err("cannot draw an intent id: %s", dcr_strerror(-errno));
		return DCR_ERR(-EIO);
	}
	n = snprintf(key, DCR_INTENT_KEY_MAX, DCR_INTENT_PREFIX);
	dcr_hex(rnd, sizeof(rnd), key + n);
	if (gethostname(host, sizeof(host) - 1) < 0)
		snprintf(host, sizeof(host), "?");
	n = snprintf(text, sizeof(text), "commit pid %ld on %s\n",
		     (long)getpid(), host);
	ret = dcr_store_put(st, key, text, (uint64_t)DCR_MIN(n, (int)sizeof(text) - 1), 0);
	if (ret) {
		dcr_err("%s: cannot write %s (which keeps gc off this commit's "
			"packs): %s", st->url, key, dcr_strerror(ret));
		key[0] = 0;
	}
	return ret;
}

void dcr_intent_end(struct dcr_store *st, const char *key)
{
	int ret = key && *key ? dcr_store_del(st, key) : 0;

	if (ret && ret != -ENOENT)
		dcr_warn("%s: cannot delete %s: %s; gc keeps packs newer than it "
			 "until it expires", st->url, key, dcr_strerror(ret));
}
