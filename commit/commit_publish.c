/* SPDX-License-Identifier: MIT */
/*
 * commit_publish.c - the end of a commit: its packs confirmed in the
 * store, then its manifest created as the next free version number and
 * read back (commit_int.h).
 */
#include "config.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "commit_int.h"
#include "common.h"
#include "hash.h"
#include "manifest.h"
#include "objstore.h"
#include "sign.h"

#define PUBLISH_TRIES 1000

/* What versions/N holds, read back after a conditional create of it. */
enum held { HELD_OURS, HELD_ABSENT, HELD_THEIRS, HELD_UNKNOWN };

#define READBACK_TRIES 3
#define LOST_PUT_TRIES 3
#define MANIFEST_READ_MAX ((size_t)2 << 30)

/*
 * Read version @v's manifest object @key back and compare it with @enc,
 * the bytes this commit put: exactly them (ours), nothing, an intact
 * manifest of version @v that is not ours (another commit's: it
 * decodes; or, in a local store, a directory in its place), or
 * unknown (the store did not answer, or keeps returning
 * bytes that are neither: damaged on the way or at rest). A read that
 * is neither ours nor an intact manifest is tried again, so that a byte
 * flipped on the way is not taken for another commit's version (the
 * commit would then publish its tree a second time).
 */
static enum held version_holds(struct dcr_store *st, const char *key,
			       uint64_t v, const struct dcr_buf *enc, int *err)
{
	struct dcr_buf b;
	enum held h = HELD_UNKNOWN;

	*err = 0;
	dcr_buf_init(&b, MANIFEST_READ_MAX);
	for (int i = 0; i < READBACK_TRIES && h == HELD_UNKNOWN; i++) {
		struct dcr_manifest m;

		dcr_buf_reset(&b);
		int ret = dcr_store_get(st, key, 0, DCR_GET_ALL, &b);
		if (ret == -ENOENT) {
			h = HELD_ABSENT;
		} else if (ret == -EISDIR) {
			/* a local store's entry that is no file: no commit
			 * wrote it, and the number is not free */
			h = HELD_THEIRS;
		} else if (ret) {
			*err = ret;
			break; /* the store retried already */
		} else if (b.len == enc->len && !memcmp(b.data, enc->data, b.len)) {
			h = HELD_OURS;
		} else if (dcr_manifest_decode(b.data, b.len, &m) == 0) {
			h = m.version == v ? HELD_THEIRS : HELD_UNKNOWN;
			dcr_manifest_free(&m);
			if (h == HELD_UNKNOWN)
				break; /* intact, but not a version-@v manifest */
		} else {
			*err = DCR_ERR(-EBADMSG);
		}
	}
	dcr_buf_free(&b);
	return h;
}

/*
 * The check of manifest object @enc, as this commit encoded it: the
 * SHA-256 of its header and body, stored right after the body
 * (manifest.h: the compressed body's length at offset 24, the check at
 * 32 + that length).
 */
static int encoded_check(const struct dcr_buf *enc, uint8_t check[DCR_HASH_LEN])
{
	uint64_t n = 0;

	if (enc->len >= 32)
		for (int i = 7; i >= 0; i--)
			n = n << 8 | enc->data[24 + i];
	if (enc->len < 32 + DCR_HASH_LEN || n > enc->len - 32 - DCR_HASH_LEN) {
		dcr_err("internal: an encoded manifest of %zu bytes has no check",
			enc->len);
		return DCR_ERR(-EIO);
	}
	memcpy(check, enc->data + 32 + n, DCR_HASH_LEN);
	return 0;
}

/* Whether a failed put of a manifest may still have stored it: anything
 * but a refusal the server gives before acting (or that we give). */
static bool put_may_have_stored(int err)
{
	return err != -EACCES && err != -EINVAL && err != -ENAMETOOLONG &&
	       err != -ENOMEM;
}

#ifdef DCR_TEST_HOOKS
/*
 * Test hook (HACKING): DCRFS_TEST_COMMIT_BEFORE_PUBLISH=CMD runs
 * `sh -c CMD` after the packs were confirmed and before the manifest is
 * put, so that a test can run gc exactly in that window
 * (tests/integration/gc_commit_race.sh).
 */
static void hook_before_publish(void)
{
	const char *cmd = getenv("DCRFS_TEST_COMMIT_BEFORE_PUBLISH");

	if (!cmd || !*cmd)
		return;
	pid_t pid = fork();
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	while (pid > 0 && waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}
#endif

/*
 * Publish the manifest as the next free version number N (signed for
 * that number when the commit signs: a new number is a new signature): a conditional
 * create of versions/N, then the object read back, because a store's
 * answer can be wrong both ways. A 200 without the object stored (a
 * lying proxy or store) would print a number that holds nothing, which
 * the next commit takes too; a create that was applied but answered 503
 * or reset (and retried until the store gave up, or refused with 412
 * because of our own first attempt) would say "nothing was published"
 * about a version that was, or publish the same tree again as N+1. So:
 * versions/N holding exactly these bytes is success, whatever the put
 * answered (an "exists" too: a store below may have sent the put twice
 * and lost the reply to the first); another commit's manifest there is
 * the next number (and after a failed put, nothing of ours was
 * published); nothing there
 * after a 200 is the put tried again (a few times); nothing there after
 * a failure is nothing published. When the read-back cannot tell, the
 * commit fails with -EINPROGRESS naming N (it may hold this tree), never
 * claiming either.
 */
int dcr_commit_publish_version(struct pipe *p, struct dcr_commit_result *res)
{
	struct dcr_buf enc;
	char key[64];
	uint8_t check[DCR_HASH_LEN];
	uint64_t latest;
	int ret = dcr_store_latest(p->st, &latest), err;
	int lost = 0;

	if (ret)
		return ret;
#ifdef DCR_TEST_HOOKS
	hook_before_publish();
#endif
	dcr_buf_init(&enc, SIZE_MAX);
	uint64_t v = DCR_MAX(latest, p->m->parent) + 1, encoded = 0;
	for (int tries = 0; tries < PUBLISH_TRIES; tries++) {
		if (v > DCR_VERSION_MAX) {
			dcr_err("%s: no version number left (the largest is %" PRIu64 ")",
				p->st->url, (uint64_t)DCR_VERSION_MAX);
			ret = DCR_ERR(-EOVERFLOW);
			goto done;
		}
		if (encoded != v) {
			p->m->version = v;
			dcr_buf_reset(&enc);
			ret = p->o->sign_key ?
				dcr_manifest_encode_signed(p->m, p->o->sign_key,
							   p->store_id,
							   p->pm ? p->pm->check : NULL,
							   &enc) :
				dcr_manifest_encode(p->m, &enc);
			if (ret || (ret = encoded_check(&enc, check)))
				goto done;
			encoded = v;
		}
		dcr_version_key(v, key, sizeof(key));
		int put = dcr_store_put(p->st, key, enc.data, enc.len, DCR_PUT_IF_ABSENT);
		/* -EEXIST too is read back: a store below may have sent our
		 * put twice and lost the first reply (a libcurl re-send, an
		 * NFS retransmit of the link), so "exists" may be ours. */
		if (put && put != -EEXIST && !put_may_have_stored(put)) {
			ret = put;
			goto done;
		}
		switch (version_holds(p->st, key, v, &enc, &err)) {
		case HELD_OURS:
			if (put)
				dcr_info("%s/%s: the put answered %s, but the object holds this "
					 "commit's manifest: version %" PRIu64 " is published",
					 p->st->url, key, dcr_strerror(put), v);
			ret = 0;
			goto done;
		case HELD_THEIRS:
			if (put && put != -EEXIST) {
				/* Conditional: ours was not stored under N. */
				ret = put;
				goto done;
			}
			if (!put)
				dcr_warn("%s/%s: the store acknowledged this commit's manifest "
					 "but holds another one; trying %" PRIu64,
					 p->st->url, key, v + 1);
			else
				dcr_info("version %" PRIu64 " was taken by another commit; "
					 "trying %" PRIu64, v, v + 1);
			lost = 0;
			v++;
			continue;
		case HELD_ABSENT:
			if (put && put != -EEXIST) {
				ret = put; /* nothing is there: nothing was published */
				goto done;
			}
			/* -EEXIST, then nothing (deleted since, or a store
			 * that disagrees with itself): put again, counted */
			if (++lost >= LOST_PUT_TRIES) {
				dcr_err("%s/%s: the store acknowledged the manifest %d times "
					"without keeping it; nothing was published",
					p->st->url, key, lost);
				ret = DCR_ERR(-EIO);
				goto done;
			}
			dcr_warn("%s/%s: the store %s the manifest but does not hold "
				 "it; putting it again", p->st->url, key,
				 put ? "said it holds" : "acknowledged");
			continue;
		case HELD_UNKNOWN:
			dcr_err("%s/%s: %s, and reading it back %s, so whether version %"
				PRIu64 " holds this commit is unknown: check it (dcrfs-ctl "
				"show %" PRIu64 ") before committing again",
				p->st->url, key,
				put ? dcr_strerror(put) : "the put was acknowledged",
				err ? dcr_strerror(err) : "returned another object",
				v, v);
			ret = DCR_ERR(-EINPROGRESS);
			goto done;
		}
	}
	dcr_err("%s: no free version number after %d tries; nothing was published",
		p->st->url, PUBLISH_TRIES);
	ret = DCR_ERR(-EEXIST);
done:
	if (!ret) {
		res->version = v;
		res->manifest_len = enc.len;
		dcr_sha256(enc.data, enc.len, res->manifest_hash);
		memcpy(res->check, check, DCR_HASH_LEN);
	}
	dcr_buf_free(&enc);
	return ret;
}

/*
 * Confirm that every pack the manifest names is in the store: a store
 * that acknowledged a put it did not keep must not get a version that
 * names missing bytes. Asked again after the publish (@published: the
 * version), so that a pack deleted in between (a gc that could not know
 * of this commit) makes the commit fail naming the damaged version,
 * never report it as published.
 */
int dcr_commit_check_packs(struct dcr_store *st,
			   const struct dcr_manifest *m, uint64_t published)
{
	char key[80];
	uint64_t size;
	uint32_t missing = 0;
	int err = 0;

	for (uint32_t i = 0; i < m->npacks; i++) {
		dcr_pack_key(m->packs[i], key, sizeof(key));
		int ret = dcr_store_head(st, key, &size);
		if (!ret)
			continue;
		if (!published) {
			dcr_err("%s/%s: %s after its upload was acknowledged; not publishing",
				st->url, key, ret == -ENOENT ? "missing" : dcr_strerror(ret));
			return ret == -ENOENT ? DCR_ERR(-EIO) : ret;
		}
		dcr_err("%s/%s: %s after version %" PRIu64 " was published",
			st->url, key, ret == -ENOENT ? "missing" : dcr_strerror(ret),
			published);
		missing += ret == -ENOENT;
		err = err ? err : ret == -ENOENT ? DCR_ERR(-EIO) : ret;
	}
	if (missing)
		dcr_err("%s: version %" PRIu64 " is published but %" PRIu32 " of its %"
			PRIu32 " packs are gone (deleted by a gc that did not know of "
			"this commit?): the version is damaged (dcrfs-ctl verify %"
			PRIu64 "); commit again", st->url, published, missing,
			m->npacks, published);
	else if (err)
		dcr_err("%s: version %" PRIu64 " is published, but whether all its "
			"packs are still there is unknown (dcrfs-ctl verify %" PRIu64
			")", st->url, published, published);
	return err;
}
