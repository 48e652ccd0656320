/* SPDX-License-Identifier: MIT */
/*
 * rtrust.c - what a reader with a trust set shows, and how it proves
 * the chunks of what it shows (see reader_int.h, dcr_reader_opts.trust).
 *
 * Contract:
 * - Every struct rver gets its provenance when it is made (rver_prov):
 *   from the manifest as committed, or from its catalog row, which
 *   keeps the signature block, the check and the committed parent. With
 *   a trust set its signature is checked then (one Ed25519 verify,
 *   tens of microseconds), also for rows loaded at open: a catalog
 *   filled by a mount that trusted the store proves nothing.
 * - A version is shown iff it is DCR_SIG_VALID for this store and
 *   trust set (rver_shown). Nothing else hides it: a version is never
 *   shown on the strength of another's signature.
 * - Its chunks are proven the fast way (frames by SHA-256, the result by
 *   XXH3-128, manifest.h) only when every manifest on the chunk's chain
 *   is authentic (rver.fast): signed by a trusted key, or the committed
 *   parent whose check a shown child's signature binds; and committed
 *   as it is read (a layout's re-encoding is not signed). Otherwise
 *   the result is proven by the SHA-256 the signed manifest holds for
 *   it. So a bucket writer who forges an unsigned parent or a layout
 *   can at most make reads fail, never serve a wrong byte.
 * - latest is the highest version shown, and never lower than the
 *   highest one shown before (shown_max), kept in the catalog so that a
 *   remount of the same cache directory does not go back either. If
 *   that version disappears, latest names it still (and resolves to
 *   nothing): a rollout worker fails rather than load older weights.
 * - trust_judge runs at open and after every refresh: it logs each
 *   rejected version once with its reason, counts it, and recomputes
 *   rver.fast.
 * - A cache directory that a mount without a trust set filled is
 *   emptied before a mount with one uses it (trust_bind_dir): chunks it
 *   proved the fast way on unsigned frames are not kept.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog.h"
#include "common.h"
#include "manifest.h"
#include "reader_int.h"
#include "sign.h"

#define SHOWN_KEY "trust_latest"
#define TRUSTED_MARK "trusted"

/* A manifest holding what a signature check reads of @rv's version,
 * signed with @sig. */
static void prov_manifest(const struct rver *rv, const struct dcr_sig *sig,
			  struct dcr_manifest *m)
{
	memset(m, 0, sizeof(*m));
	m->version = rv->v;
	m->cparent = rv->cparent;
	m->ctime_ns = rv->ctime_ns;
	memcpy(m->check, rv->check, DCR_HASH_LEN);
	m->has_sig = true;
	m->sig = *sig;
}

void rver_prov(struct dcr_reader *r, struct rver *rv, bool has_check,
	       const uint8_t *check, uint64_t cparent, bool has_sig,
	       const struct dcr_sig *sig, bool encoded)
{
	struct dcr_manifest m;

	rv->has_check = has_check;
	if (has_check)
		memcpy(rv->check, check, DCR_HASH_LEN);
	rv->cparent = cparent;
	rv->encoded = encoded;
	rv->sig = has_sig ? DCR_SIG_BAD : DCR_SIG_NONE;
	if (has_sig) {
		memcpy(rv->pub, sig->pub, DCR_SIG_PUB_LEN);
		memcpy(rv->pcheck, sig->parent_check, DCR_HASH_LEN);
	}
	if (!r->vs.trust || !has_sig)
		return; /* without a trust set: checked when shown (signer) */
	if (!has_check)
		return; /* a pre-schema-4 row: it had no signature */
	prov_manifest(rv, sig, &m);
	rv->sig = (uint8_t)dcr_manifest_sig_check(&m, r->vs.store_id,
						  r->vs.trust);
}

bool rver_shown(const struct dcr_reader *r, const struct rver *rv)
{
	return !r->vs.trust || rv->sig == DCR_SIG_VALID;
}

const char *rver_signer(const struct dcr_reader *r, const struct dcr_manifest *m,
			char *buf)
{
	return dcr_manifest_signer(m, r->vs.store_id, buf);
}

/* Count and log, once, that @rv is not shown. Caller holds lock. */
static void reject(struct dcr_reader *r, struct rver *rv)
{
	const char *url = r->st->url ? r->st->url : "store";
	char id[DCR_KEYID_LEN + 1] = "";

	if (rv->logged)
		return;
	rv->logged = true;
	switch (rv->sig) {
	case DCR_SIG_NONE:
		STAT_ADD(r, rej_unsigned, 1);
		break;
	case DCR_SIG_OTHER_STORE:
		STAT_ADD(r, rej_store, 1);
		break;
	case DCR_SIG_UNTRUSTED:
		STAT_ADD(r, rej_untrusted, 1);
		dcr_key_id(rv->pub, id);
		break;
	default:
		STAT_ADD(r, rej_bad, 1);
		break;
	}
	dcr_err("%s: version %" PRIu64 " is not shown (trust=): %s%s%s",
		url, rv->v, dcr_sig_status_str((enum dcr_sig_status)rv->sig),
		*id ? " " : "", id);
}

uint64_t trust_latest(struct dcr_reader *r)
{
	uint64_t v = 0;

	for (size_t i = r->vs.nvers; i-- > 0;)
		if (rver_shown(r, r->vs.vers[i])) {
			v = r->vs.vers[i]->v;
			break;
		}
	if (!r->vs.trust)
		return v;
	if (v > r->vs.shown_max)
		r->vs.shown_max = v;
	return r->vs.shown_max;
}

/* Learn the check of @p's manifest (a row indexed before catalog schema
 * 4 does not hold it): fetched once, then kept in the catalog. Caller
 * holds refresh_lock, not lock. */
static void learn_check(struct dcr_reader *r, struct rver *p)
{
	struct dcr_catalog_ident id;
	struct dcr_manifest pm;
	char key[64];

	dcr_version_key(p->v, key, sizeof(key));
	if (fetch_manifest(r, p->v, key, &pm, &id, NULL))
		return; /* logged if it matters; tried again next time */
	pthread_mutex_lock(&r->vs.lock);
	memcpy(p->check, pm.check, DCR_HASH_LEN);
	p->has_check = true;
	pthread_mutex_unlock(&r->vs.lock);
	dcr_catalog_set_check(r->cat, p->v, pm.check);
	dcr_manifest_free(&pm);
}

void trust_judge(struct dcr_reader *r)
{
	uint64_t latest;

	if (!r->vs.trust)
		return;
	/* the checks signed children bind, of parents that lack them */
	for (size_t i = 0;; i++) {
		struct rver *p = NULL;

		pthread_mutex_lock(&r->vs.lock);
		if (i >= r->vs.nvers) {
			pthread_mutex_unlock(&r->vs.lock);
			break;
		}
		struct rver *rv = r->vs.vers[i];
		if (rv->sig == DCR_SIG_VALID && rv->cparent) {
			p = vers_find(r, rv->cparent);
			if (p && p->has_check)
				p = NULL;
		}
		pthread_mutex_unlock(&r->vs.lock);
		if (p)
			learn_check(r, p);
	}
	pthread_mutex_lock(&r->vs.lock);
	for (size_t i = 0; i < r->vs.nvers; i++) {
		struct rver *rv = r->vs.vers[i];

		if (!rver_shown(r, rv))
			reject(r, rv);
		atomic_store(&rv->fast, !rv->encoded && rv->has_check &&
					rv->sig == DCR_SIG_VALID);
	}
	/* a parent whose check a shown child's signature binds */
	for (size_t i = 0; i < r->vs.nvers; i++) {
		const struct rver *c = r->vs.vers[i];
		struct rver *p;

		if (c->sig != DCR_SIG_VALID || !c->cparent ||
		    !(p = vers_find(r, c->cparent)) || p->encoded ||
		    !p->has_check)
			continue;
		if (dcr_hash_eq(c->pcheck, p->check))
			atomic_store(&p->fast, true);
		else if (!p->logged_pin) {
			p->logged_pin = true;
			dcr_warn("%s: version %" PRIu64 "'s manifest is not the "
				 "one version %" PRIu64 " was signed over: "
				 "chunks built on it are proven by SHA-256",
				 r->st->url ? r->st->url : "store", p->v, c->v);
		}
	}
	latest = trust_latest(r);
	pthread_mutex_unlock(&r->vs.lock);
	if (latest != r->vs.shown_saved &&
	    dcr_catalog_set_u64(r->cat, SHOWN_KEY, latest) == 0)
		r->vs.shown_saved = latest;
}

int trust_open(struct dcr_reader *r)
{
	uint64_t v;
	int ret;

	if (!r->vs.trust)
		return 0;
	ret = dcr_catalog_get_u64(r->cat, SHOWN_KEY, &v);
	if (ret)
		return ret;
	r->vs.shown_max = r->vs.shown_saved = v;
	trust_judge(r);
	return 0;
}

int trust_bind_dir(struct dcr_reader *r, int (*drop)(struct dcr_reader *))
{
	char path[PATH_MAX], cat[PATH_MAX];
	struct stat sb;
	int fd, ret;

	if (snprintf(path, sizeof(path), "%s/" TRUSTED_MARK, r->dir) >=
	    (int)sizeof(path) ||
	    snprintf(cat, sizeof(cat), "%s/catalog.db", r->dir) >=
	    (int)sizeof(cat))
		return DCR_ERR(-ENAMETOOLONG);
	bool marked = stat(path, &sb) == 0;
	if (!r->vs.trust) {
		/* what this mount proves, it proves for itself only */
		if (marked && unlink(path) < 0 && errno != ENOENT) {
			ret = -errno;
			dcr_err("%s: %s", path, dcr_strerror(ret));
			return ret;
		}
		return 0;
	}
	if (marked)
		return 0;
	if (stat(cat, &sb) == 0) {
		dcr_info("%s: the cache directory was filled by a mount that "
			 "trusted the store: starting it afresh for trust=",
			 r->st->url ? r->st->url : "store");
		if ((ret = drop(r))) {
			dcr_err("cache directory %s: cannot empty it: %s",
				r->dir, dcr_strerror(ret));
			return ret;
		}
	}
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		ret = -errno;
		dcr_err("%s: %s", path, dcr_strerror(ret));
		return ret;
	}
	close(fd);
	return 0;
}
