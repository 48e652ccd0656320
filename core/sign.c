/* SPDX-License-Identifier: MIT */
/*
 * sign.c - Ed25519 keys, trust sets, and the signed statements of
 * manifests and tags (sign.h).
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "common.h"
#include "fileio.h"
#include "objstore.h"
#include "sign.h"

_Static_assert(DCR_SIG_STORE_ID_MAX == DCR_STORE_ID_MAX,
	       "a signature block holds any store id");

#define SIG_CONTEXT "dcrfs-sig-1\n"
#define KIND_VERSION 1
#define KIND_TAG 2
/* context, kind, store id, and the largest of the two bodies */
#define STATEMENT_MAX (sizeof(SIG_CONTEXT) + 1 + 1 + DCR_SIG_STORE_ID_MAX + \
		       1 + 255 + 8 * 3 + 2 * DCR_HASH_LEN)
#define TRUST_FILE_MAX (1u << 20)
#define TRUST_KEYS_MAX 1024

struct dcr_sign_key {
	EVP_PKEY *pkey;
	uint8_t pub[DCR_SIG_PUB_LEN];
	char id[DCR_KEYID_LEN + 1];
};

struct trusted {
	uint8_t pub[DCR_SIG_PUB_LEN];
	char id[DCR_KEYID_LEN + 1];
};

struct dcr_trust {
	struct trusted *keys;
	size_t n;
};

/* Log OpenSSL's queued errors after @what, once, and clear them. */
static void log_ssl(const char *what)
{
	unsigned long e = ERR_get_error();
	char msg[256] = "";

	if (e)
		ERR_error_string_n(e, msg, sizeof(msg));
	ERR_clear_error();
	dcr_err("%s%s%s", what, *msg ? ": " : "", msg);
}

void dcr_key_id(const uint8_t pub[DCR_SIG_PUB_LEN], char id[DCR_KEYID_LEN + 1])
{
	uint8_t h[DCR_HASH_LEN];

	dcr_sha256(pub, DCR_SIG_PUB_LEN, h);
	dcr_hex(h, DCR_KEYID_LEN / 2, id);
}

/* The raw public key of Ed25519 key @pkey. 0 or -EBADMSG. */
static int raw_pub(EVP_PKEY *pkey, uint8_t pub[DCR_SIG_PUB_LEN])
{
	size_t len = DCR_SIG_PUB_LEN;

	if (EVP_PKEY_get_id(pkey) != EVP_PKEY_ED25519 ||
	    EVP_PKEY_get_raw_public_key(pkey, pub, &len) != 1 ||
	    len != DCR_SIG_PUB_LEN) {
		ERR_clear_error();
		return -EBADMSG;
	}
	return 0;
}

/* ------------------------------------------------------------ keys */

/* Write @pkey's PEM (private or public) to new file @path, mode @mode. */
static int write_pem(const char *path, EVP_PKEY *pkey, bool private,
		     mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
	BIO *bio;
	char *mem;
	long len;
	int ret;

	if (fd < 0) {
		ret = -errno;
		dcr_err("%s: %s%s", path, dcr_strerror(ret),
			ret == -EEXIST ? " (a key is never overwritten)" :
			ret == -ENOENT ? " (its directory does not exist: "
					 "create it first)" : "");
		return ret;
	}
	if (!(bio = BIO_new(BIO_s_mem()))) {
		ret = DCR_ERR(-ENOMEM);
		goto err_close;
	}
	if ((private ? PEM_write_bio_PrivateKey(bio, pkey, NULL, NULL, 0,
						NULL, NULL)
		     : PEM_write_bio_PUBKEY(bio, pkey)) != 1) {
		log_ssl(path);
		ret = DCR_ERR(-EIO);
		goto err_free_bio;
	}
	len = BIO_get_mem_data(bio, &mem);
	ret = dcr_write_full(fd, mem, (size_t)len);
	if (!ret && fsync(fd) < 0)
		ret = -errno;
	if (ret)
		dcr_err("%s: cannot write: %s", path, dcr_strerror(ret));
err_free_bio:
	BIO_free(bio);
err_close:
	close(fd);
	if (ret)
		unlink(path);
	return ret;
}

int dcr_sign_keygen(const char *path, char id[DCR_KEYID_LEN + 1])
{
	uint8_t pub[DCR_SIG_PUB_LEN];
	char pubpath[PATH_MAX];
	EVP_PKEY *pkey;
	int ret;

	if (!*path) {
		dcr_err("keygen: the key file's path is empty");
		return DCR_ERR(-EINVAL);
	}
	if (snprintf(pubpath, sizeof(pubpath), "%s.pub", path) >=
	    (int)sizeof(pubpath)) {
		dcr_err("%s: path too long", path);
		return DCR_ERR(-ENAMETOOLONG);
	}
	const char *there = access(path, F_OK) == 0 ? path
			    : access(pubpath, F_OK) == 0 ? pubpath : NULL;
	if (there) {
		dcr_err("%s: exists (a key is never overwritten)", there);
		return DCR_ERR(-EEXIST);
	}
	if (!(pkey = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519"))) {
		log_ssl("keygen: Ed25519");
		return DCR_ERR(-EIO);
	}
	if ((ret = raw_pub(pkey, pub))) {
		dcr_err("keygen: no public key");
		goto out;
	}
	if ((ret = write_pem(path, pkey, true, 0600)))
		goto out;
	if ((ret = write_pem(pubpath, pkey, false, 0644))) {
		unlink(path);
		goto out;
	}
	dcr_key_id(pub, id);
out:
	EVP_PKEY_free(pkey);
	return ret;
}

/* Read all of small file @path into *@out (NUL-terminated). */
static int slurp(const char *path, size_t max, char **out, size_t *len,
		 struct stat *st)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	char *buf = NULL;
	int ret;

	if (fd < 0) {
		ret = -errno;
		dcr_err("%s: %s", path, dcr_strerror(ret));
		return ret;
	}
	if (fstat(fd, st) < 0) {
		ret = -errno;
		dcr_err("%s: %s", path, dcr_strerror(ret));
		goto out;
	}
	if (!S_ISREG(st->st_mode) || (uint64_t)st->st_size > max) {
		dcr_err("%s: not a key file (%s)", path,
			S_ISREG(st->st_mode) ? "too large" : "not a regular file");
		ret = DCR_ERR(-EBADMSG);
		goto out;
	}
	if (!(buf = malloc((size_t)st->st_size + 1))) {
		ret = DCR_ERR(-ENOMEM);
		goto out;
	}
	ret = dcr_pread_full(fd, buf, (size_t)st->st_size, 0);
	if (ret) {
		dcr_err("%s: %s", path, dcr_strerror(ret));
		free(buf);
		goto out;
	}
	buf[st->st_size] = 0;
	*out = buf;
	*len = (size_t)st->st_size;
out:
	close(fd);
	return ret;
}

int dcr_sign_key_load(const char *path, struct dcr_sign_key **out)
{
	struct dcr_sign_key *k;
	struct stat st;
	char *text;
	size_t len;
	BIO *bio;
	int ret;

	if (!*path) {
		dcr_err("the signing key's path is empty");
		return DCR_ERR(-EINVAL);
	}
	if ((ret = slurp(path, 64 << 10, &text, &len, &st)))
		return ret;
	if (!(k = calloc(1, sizeof(*k))) ||
	    !(bio = BIO_new_mem_buf(text, (int)len))) {
		free(k);
		free(text);
		return DCR_ERR(-ENOMEM);
	}
	k->pkey = PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL);
	BIO_free(bio);
	explicit_bzero(text, len);
	free(text);
	if (!k->pkey || raw_pub(k->pkey, k->pub)) {
		ERR_clear_error();
		dcr_err("%s: holds no Ed25519 private key (PEM, as dcrfs-ctl "
			"keygen writes)", path);
		dcr_sign_key_free(k);
		return DCR_ERR(-EBADMSG);
	}
	/*
	 * Refused, as ssh refuses such an identity file and the mount a
	 * credentials file: whoever can read the key can sign versions
	 * every mount trusting it will show, and a warning scrolls past in
	 * a trainer's log (or is not printed at all below the warning
	 * level of a libdcr caller).
	 */
	if (st.st_mode & 077) {
		dcr_sign_key_free(k);
		dcr_err("%s: the private key is accessible by group or others "
			"(mode %04o), so others may sign versions with it; "
			"refused: chmod 600 it (and make a new key if others "
			"could read this one)", path,
			(unsigned)(st.st_mode & 07777));
		return DCR_ERR(-EACCES);
	}
	dcr_key_id(k->pub, k->id);
	*out = k;
	return 0;
}

void dcr_sign_key_free(struct dcr_sign_key *k)
{
	if (!k)
		return;
	EVP_PKEY_free(k->pkey);
	free(k);
}

const uint8_t *dcr_sign_key_pub(const struct dcr_sign_key *k)
{
	return k->pub;
}

const char *dcr_sign_key_id(const struct dcr_sign_key *k)
{
	return k->id;
}

/* ------------------------------------------------------------ trust */

int dcr_trust_parse(const void *data, size_t len, const char *what,
		    struct dcr_trust **out)
{
	struct dcr_trust *t;
	BIO *bio;
	int ret = 0;

	if (len > TRUST_FILE_MAX) {
		dcr_err("%s: too large for a trust file", what);
		return DCR_ERR(-EBADMSG);
	}
	if (!(t = calloc(1, sizeof(*t))))
		return DCR_ERR(-ENOMEM);
	if (!(bio = BIO_new_mem_buf(data, (int)len))) {
		free(t);
		return DCR_ERR(-ENOMEM);
	}
	for (;;) {
		char *name = NULL, *header = NULL;
		unsigned char *der = NULL;
		long dlen = 0;
		uint8_t pub[DCR_SIG_PUB_LEN];

		if (PEM_read_bio(bio, &name, &header, &der, &dlen) != 1) {
			unsigned long e = ERR_peek_last_error();
			ERR_clear_error();
			/* no further block is the end; anything else is a
			 * block that does not parse */
			if (ERR_GET_REASON(e) != PEM_R_NO_START_LINE) {
				dcr_err("%s: key %zu is not a PEM block",
					what, t->n + 1);
				ret = DCR_ERR(-EBADMSG);
			}
			break;
		}
		const unsigned char *q = der;
		EVP_PKEY *pkey = strcmp(name, "PUBLIC KEY") ? NULL
				 : d2i_PUBKEY(NULL, &q, dlen);
		bool whole = pkey && q == der + dlen;
		bool private = strstr(name, "PRIVATE KEY") != NULL;
		OPENSSL_free(name);
		OPENSSL_free(header);
		OPENSSL_free(der);
		ret = pkey && whole ? raw_pub(pkey, pub) : -EBADMSG;
		EVP_PKEY_free(pkey);
		if (ret && private) {
			dcr_err("%s: key %zu is a private key: trust takes the "
				"public one (KEYFILE.pub, which dcrfs-ctl keygen "
				"wrote beside it); keep the private key with the "
				"trainer", what, t->n + 1);
			ret = DCR_ERR(-EBADMSG);
			break;
		}
		if (ret) {
			dcr_err("%s: key %zu is not an Ed25519 public key",
				what, t->n + 1);
			break;
		}
		if (dcr_trust_has(t, pub))
			continue;
		if (t->n == TRUST_KEYS_MAX) {
			dcr_err("%s: more than %u keys", what, TRUST_KEYS_MAX);
			ret = DCR_ERR(-EBADMSG);
			break;
		}
		struct trusted *nk = realloc(t->keys, (t->n + 1) * sizeof(*nk));
		if (!nk) {
			ret = DCR_ERR(-ENOMEM);
			break;
		}
		t->keys = nk;
		memcpy(nk[t->n].pub, pub, DCR_SIG_PUB_LEN);
		dcr_key_id(pub, nk[t->n].id);
		t->n++;
	}
	BIO_free(bio);
	if (!ret && t->n == 0) {
		dcr_err("%s: holds no public key (PEM, as dcrfs-ctl keygen "
			"writes to KEYFILE.pub)", what);
		ret = DCR_ERR(-EBADMSG);
	}
	if (ret) {
		dcr_trust_free(t);
		return ret;
	}
	*out = t;
	return 0;
}

int dcr_trust_load(const char *path, struct dcr_trust **out)
{
	struct stat st;
	char *text;
	size_t len;
	int ret;

	if (!*path) {
		dcr_err("the trust file's path is empty");
		return DCR_ERR(-EINVAL);
	}
	if ((ret = slurp(path, TRUST_FILE_MAX, &text, &len, &st)))
		return ret;
	ret = dcr_trust_parse(text, len, path, out);
	free(text);
	return ret;
}

void dcr_trust_free(struct dcr_trust *t)
{
	if (!t)
		return;
	free(t->keys);
	free(t);
}

size_t dcr_trust_count(const struct dcr_trust *t)
{
	return t ? t->n : 0;
}

const char *dcr_trust_key_id(const struct dcr_trust *t, size_t i)
{
	return t->keys[i].id;
}

bool dcr_trust_has(const struct dcr_trust *t, const uint8_t pub[DCR_SIG_PUB_LEN])
{
	for (size_t i = 0; t && i < t->n; i++)
		if (!memcmp(t->keys[i].pub, pub, DCR_SIG_PUB_LEN))
			return true;
	return false;
}

/* ------------------------------------------------------- statements */

struct stmt {
	uint8_t b[STATEMENT_MAX];
	size_t n;
};

static void st_put(struct stmt *s, const void *p, size_t n)
{
	memcpy(s->b + s->n, p, n);
	s->n += n;
}

static void st_u64(struct stmt *s, uint64_t v)
{
	dcr_put_le64(s->b + s->n, v);
	s->n += 8;
}

/* The head every statement starts with: context, kind, store id. */
static int st_head(struct stmt *s, uint8_t kind, const char *store_id)
{
	size_t il = strlen(store_id);

	if (il == 0 || il > DCR_SIG_STORE_ID_MAX)
		return -EINVAL;
	s->n = 0;
	st_put(s, SIG_CONTEXT, strlen(SIG_CONTEXT));
	st_put(s, &kind, 1);
	uint8_t l = (uint8_t)il;
	st_put(s, &l, 1);
	st_put(s, store_id, il);
	return 0;
}

static int version_statement(struct stmt *s, const char *store_id,
			     uint64_t v, uint64_t parent, int64_t ctime_ns,
			     const uint8_t check[DCR_HASH_LEN],
			     const uint8_t pcheck[DCR_HASH_LEN])
{
	int ret = st_head(s, KIND_VERSION, store_id);

	if (ret)
		return ret;
	st_u64(s, v);
	st_u64(s, parent);
	st_u64(s, (uint64_t)ctime_ns);
	st_put(s, check, DCR_HASH_LEN);
	st_put(s, pcheck, DCR_HASH_LEN);
	return 0;
}

static int tag_statement(struct stmt *s, const char *store_id,
			 const char *name, uint64_t v,
			 const uint8_t check[DCR_HASH_LEN], int64_t time_ns)
{
	size_t nl = strlen(name);
	int ret = st_head(s, KIND_TAG, store_id);

	if (ret)
		return ret;
	if (nl == 0 || nl > 255)
		return -EINVAL;
	uint8_t l = (uint8_t)nl;
	st_put(s, &l, 1);
	st_put(s, name, nl);
	st_u64(s, v);
	st_put(s, check, DCR_HASH_LEN);
	st_u64(s, (uint64_t)time_ns);
	return 0;
}

static int sign_stmt(const struct dcr_sign_key *k, const struct stmt *s,
		     uint8_t sig[DCR_SIG_LEN])
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	size_t len = DCR_SIG_LEN;
	int ret = 0;

	if (!ctx)
		return DCR_ERR(-ENOMEM);
	if (EVP_DigestSignInit(ctx, NULL, NULL, NULL, k->pkey) != 1 ||
	    EVP_DigestSign(ctx, sig, &len, s->b, s->n) != 1 ||
	    len != DCR_SIG_LEN) {
		log_ssl("signing");
		ret = DCR_ERR(-EIO);
	}
	EVP_MD_CTX_free(ctx);
	return ret;
}

/* Whether @sig over @s verifies with raw public key @pub. */
static bool verify_stmt(const uint8_t pub[DCR_SIG_PUB_LEN],
			const uint8_t sig[DCR_SIG_LEN], const struct stmt *s)
{
	EVP_PKEY *pkey = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL,
						     pub, DCR_SIG_PUB_LEN);
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	bool ok = pkey && ctx &&
		  EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, pkey) == 1 &&
		  EVP_DigestVerify(ctx, sig, DCR_SIG_LEN, s->b, s->n) == 1;

	ERR_clear_error();
	EVP_MD_CTX_free(ctx);
	EVP_PKEY_free(pkey);
	return ok;
}

/* ------------------------------------------------------ manifests */

int dcr_manifest_encode_signed(const struct dcr_manifest *m,
			       const struct dcr_sign_key *k,
			       const char *store_id,
			       const uint8_t *parent_check,
			       struct dcr_buf *out)
{
	static const uint8_t zero[DCR_HASH_LEN];
	uint8_t check[DCR_HASH_LEN];
	struct dcr_sig sig = { .alg = DCR_SIG_ALG_ED25519 };
	struct stmt s;
	size_t start = out->len;
	int ret;

	if (!parent_check)
		parent_check = zero;
	if (strlen(store_id) == 0 || strlen(store_id) > DCR_SIG_STORE_ID_MAX) {
		dcr_err("signing: store id \"%s\" cannot be signed for", store_id);
		return DCR_ERR(-EINVAL);
	}
	if ((ret = dcr_manifest_encode_flags(m, DCR_MAN_SIGNED, out, check)))
		return ret;
	version_statement(&s, store_id, m->version, m->parent, m->ctime_ns,
			  check, parent_check);
	memcpy(sig.pub, k->pub, DCR_SIG_PUB_LEN);
	memcpy(sig.parent_check, parent_check, DCR_HASH_LEN);
	snprintf(sig.store_id, sizeof(sig.store_id), "%s", store_id);
	if ((ret = sign_stmt(k, &s, sig.sig)) ||
	    (ret = dcr_manifest_put_sig(&sig, out)))
		out->len = start;
	return ret;
}

const char *dcr_sig_status_str(enum dcr_sig_status s)
{
	switch (s) {
	case DCR_SIG_NONE:
		return "unsigned";
	case DCR_SIG_VALID:
		return "signed";
	case DCR_SIG_BAD:
		return "its signature does not verify";
	case DCR_SIG_OTHER_STORE:
		return "signed for another store";
	case DCR_SIG_UNTRUSTED:
		return "signed by a key not in the trust file";
	}
	return "?";
}

enum dcr_sig_status dcr_manifest_sig_check(const struct dcr_manifest *m,
					   const char *store_id,
					   const struct dcr_trust *trust)
{
	struct stmt s;

	if (!m->has_sig)
		return DCR_SIG_NONE;
	if (m->sig.alg != DCR_SIG_ALG_ED25519)
		return DCR_SIG_BAD;
	if (version_statement(&s, m->sig.store_id, m->version, m->cparent,
			      m->ctime_ns, m->check, m->sig.parent_check) ||
	    !verify_stmt(m->sig.pub, m->sig.sig, &s))
		return DCR_SIG_BAD;
	/* valid as its block says: now for whom */
	if (strcmp(m->sig.store_id, store_id) != 0)
		return DCR_SIG_OTHER_STORE;
	if (trust && !dcr_trust_has(trust, m->sig.pub))
		return DCR_SIG_UNTRUSTED;
	return DCR_SIG_VALID;
}

const char *dcr_manifest_signer(const struct dcr_manifest *m,
				const char *store_id, char *buf)
{
	switch (dcr_manifest_sig_check(m, store_id, NULL)) {
	case DCR_SIG_NONE:
		strcpy(buf, "unsigned");
		break;
	case DCR_SIG_VALID:
		dcr_key_id(m->sig.pub, buf);
		break;
	default:
		strcpy(buf, "invalid");
		break;
	}
	return buf;
}

/* ------------------------------------------------------------ tags */

int dcr_tag_sign(const struct dcr_sign_key *k, const char *store_id,
		 const char *name, uint64_t v,
		 const uint8_t check[DCR_HASH_LEN], struct dcr_tag_sig *out)
{
	struct stmt s;

	memset(out, 0, sizeof(*out));
	out->time_ns = dcr_now_ns();
	if (tag_statement(&s, store_id, name, v, check, out->time_ns)) {
		dcr_err("signing tag %s: bad store id or name", name);
		return DCR_ERR(-EINVAL);
	}
	memcpy(out->pub, k->pub, DCR_SIG_PUB_LEN);
	memcpy(out->check, check, DCR_HASH_LEN);
	return sign_stmt(k, &s, out->sig);
}

enum dcr_sig_status dcr_tag_sig_check(const struct dcr_tag_sig *ts,
				      const char *store_id, const char *name,
				      uint64_t v,
				      const uint8_t check[DCR_HASH_LEN],
				      const struct dcr_trust *trust)
{
	struct stmt s;

	if (!dcr_hash_eq(ts->check, check) ||
	    tag_statement(&s, store_id, name, v, check, ts->time_ns) ||
	    !verify_stmt(ts->pub, ts->sig, &s))
		return DCR_SIG_BAD;
	if (trust && !dcr_trust_has(trust, ts->pub))
		return DCR_SIG_UNTRUSTED;
	return DCR_SIG_VALID;
}

/* Lower-case hex only (unlike dcr_hash_unhex): a tag line has one way
 * to be written, so that what parses formats back to the same bytes. */
static int unhex(const char *s, size_t n, uint8_t *out)
{
	for (size_t i = 0; i < n; i++) {
		int v = 0;
		for (int j = 0; j < 2; j++) {
			char c = s[2 * i + j];
			int d = c >= '0' && c <= '9' ? c - '0'
				: c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
			if (d < 0)
				return -EBADMSG;
			v = v * 16 + d;
		}
		out[i] = (uint8_t)v;
	}
	return 0;
}

/*
 * The line: "ed25519 <public key, 64 hex> <time, decimal ns> <check, 64
 * hex> <signature, 128 hex>".
 */
void dcr_tag_sig_format(const struct dcr_tag_sig *ts, char *buf, size_t cap)
{
	char pub[2 * DCR_SIG_PUB_LEN + 1], chk[2 * DCR_HASH_LEN + 1];
	char sig[2 * DCR_SIG_LEN + 1];

	dcr_hex(ts->pub, DCR_SIG_PUB_LEN, pub);
	dcr_hex(ts->check, DCR_HASH_LEN, chk);
	dcr_hex(ts->sig, DCR_SIG_LEN, sig);
	snprintf(buf, cap, "ed25519 %s %" PRId64 " %s %s", pub, ts->time_ns,
		 chk, sig);
}

int dcr_tag_sig_parse(const char *line, size_t len, struct dcr_tag_sig *out)
{
	const char *p = line, *end = line + len;
	uint64_t t = 0;
	size_t digits = 0;

	memset(out, 0, sizeof(*out));
	if (len < 8 || memcmp(p, "ed25519 ", 8) != 0)
		return -EBADMSG;
	p += 8;
	if ((size_t)(end - p) < 2 * DCR_SIG_PUB_LEN + 1 ||
	    unhex(p, DCR_SIG_PUB_LEN, out->pub) || p[2 * DCR_SIG_PUB_LEN] != ' ')
		return -EBADMSG;
	p += 2 * DCR_SIG_PUB_LEN + 1;
	while (p < end && *p >= '0' && *p <= '9') {
		uint64_t d = (uint64_t)(*p++ - '0');
		if (++digits > 19 || t > ((uint64_t)INT64_MAX - d) / 10)
			return -EBADMSG;
		t = t * 10 + d;
	}
	/* one way to write a time: no leading zero */
	if (!digits || p >= end || *p++ != ' ' ||
	    (digits > 1 && p[-1 - (ptrdiff_t)digits] == '0'))
		return -EBADMSG;
	out->time_ns = (int64_t)t;
	if ((size_t)(end - p) != 2 * DCR_HASH_LEN + 1 + 2 * DCR_SIG_LEN ||
	    unhex(p, DCR_HASH_LEN, out->check) || p[2 * DCR_HASH_LEN] != ' ' ||
	    unhex(p + 2 * DCR_HASH_LEN + 1, DCR_SIG_LEN, out->sig))
		return -EBADMSG;
	return 0;
}
