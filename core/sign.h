/* SPDX-License-Identifier: MIT */
/*
 * sign.h - who wrote a version: Ed25519 keys, signatures over manifests
 * and tags, and the set of keys a mount trusts (DESIGN.md 7c).
 *
 * Every byte of a version is proven by its manifest (manifest.h); a
 * signature proves who wrote the manifest. A trainer signs one small
 * statement per version, never a stream:
 *
 *   "dcrfs-sig-1\n", kind (u8: 1 version, 2 tag),
 *   store id length (u8) and bytes (the store marker's id, objstore.h),
 *   version: le64 number, le64 parent, le64 commit time (ns),
 *            the manifest's check (32: SHA-256 of its header and body),
 *            the parent manifest's check (32; zero without a parent)
 *   tag:     name length (u8) and bytes, le64 version, the tagged
 *            version's manifest check (32), le64 tagging time (ns)
 *
 * so a signed manifest copied to another number or into another store,
 * or set on another parent, does not verify, and a signed child pins its
 * parent's exact manifest (hence its frames, by their SHA-256): an
 * unsigned parent of a signed version is vouched for by its child.
 * Layouts (compaction) are never signed; the reader proves that a
 * re-encoding has exactly the signed content (read/rlayout.c).
 *
 * Keys are OpenSSL's PEM files (PKCS#8 private, SubjectPublicKeyInfo
 * public), so `openssl genpkey -algorithm ed25519` makes one too. A key
 * id is the first 8 bytes of the SHA-256 of the raw 32-byte public key,
 * in hex. A trust file holds one or more PEM public keys (text between
 * them is ignored): listing two is how keys rotate.
 *
 * Signing and verifying use OpenSSL's EVP one-shot API
 * (EVP_DigestSign/EVP_DigestVerify with no digest). All functions are
 * thread-safe on distinct objects; a loaded key or trust set may be used
 * from many threads at once.
 */
#ifndef DCR_SIGN_H
#define DCR_SIGN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash.h"
#include "manifest.h"

#define DCR_KEYID_LEN 16 /* hex digits of a key id, without the NUL */

/** A private signing key (opaque). */
struct dcr_sign_key;
/** A set of trusted public keys (opaque). */
struct dcr_trust;

/** The key id of raw public key @pub into @id (NUL-terminated). */
void dcr_key_id(const uint8_t pub[DCR_SIG_PUB_LEN], char id[DCR_KEYID_LEN + 1]);

/**
 * dcr_sign_keygen - make a new Ed25519 key: the private key into @path
 * (created with mode 0600, never over an existing file: -EEXIST) and
 * the public key into @path.pub (also never overwritten). On success
 * fills @id with the key id. -errno on failure, logged, and neither
 * file is left behind.
 */
int dcr_sign_keygen(const char *path, char id[DCR_KEYID_LEN + 1]);

/**
 * dcr_sign_key_load - read the PEM private key in @path (Ed25519 only).
 * 0 and *@out (free with dcr_sign_key_free); -ENOENT/-EACCES/... for the
 * file, -EBADMSG if it holds no Ed25519 private key (logged, naming the
 * file); -EACCES, logged, if the file is accessible by group or others
 * (mode & 077), as ssh refuses such identity files.
 */
int dcr_sign_key_load(const char *path, struct dcr_sign_key **out);
void dcr_sign_key_free(struct dcr_sign_key *k);
/** The raw public key of @k. */
const uint8_t *dcr_sign_key_pub(const struct dcr_sign_key *k);
/** The key id of @k (a string owned by @k). */
const char *dcr_sign_key_id(const struct dcr_sign_key *k);

/**
 * dcr_trust_load - read the public keys in trust file @path. 0 and
 * *@out; -EBADMSG (logged) for a file with no key, a key that is not
 * Ed25519 or a damaged PEM block; file errors as -errno (logged).
 */
int dcr_trust_load(const char *path, struct dcr_trust **out);
/** dcr_trust_parse - the same from @len bytes in memory (@what names
 * them in messages). */
int dcr_trust_parse(const void *data, size_t len, const char *what,
		    struct dcr_trust **out);
void dcr_trust_free(struct dcr_trust *t);
/** Number of keys in @t, and the id of key @i (owned by @t). */
size_t dcr_trust_count(const struct dcr_trust *t);
const char *dcr_trust_key_id(const struct dcr_trust *t, size_t i);
/** Whether raw public key @pub is in @t (NULL @t: false). */
bool dcr_trust_has(const struct dcr_trust *t, const uint8_t pub[DCR_SIG_PUB_LEN]);

/**
 * dcr_manifest_encode_signed - encode @m as dcr_manifest_encode does,
 * signed with @k for store @store_id, whose parent manifest has check
 * @parent_check (NULL when @m has no parent). Appended to @out. 0 or
 * -errno (logged).
 */
int dcr_manifest_encode_signed(const struct dcr_manifest *m,
			       const struct dcr_sign_key *k,
			       const char *store_id,
			       const uint8_t *parent_check,
			       struct dcr_buf *out);

/** What a signature check found. */
enum dcr_sig_status {
	DCR_SIG_NONE = 0,    /* no signature */
	DCR_SIG_VALID,       /* valid for this store and number (and, with
				a trust set, by a trusted key) */
	DCR_SIG_BAD,         /* does not verify: forged or damaged */
	DCR_SIG_OTHER_STORE, /* valid, but made for another store */
	DCR_SIG_UNTRUSTED,   /* valid, but by a key not in the trust set */
};

/** A short phrase for @s ("unsigned", "signature does not verify", ...). */
const char *dcr_sig_status_str(enum dcr_sig_status s);

/**
 * dcr_manifest_sig_check - check decoded manifest @m's signature for
 * store @store_id (the version number, committed parent - cparent -
 * and time are @m's own;
 * the caller has checked that @m is the manifest of the number it was
 * fetched as). With @trust, a valid signature by a key not in it is
 * DCR_SIG_UNTRUSTED. The parent check it binds is m->sig.parent_check:
 * the caller compares it with the parent's manifest. Never fails
 * otherwise (an allocation failure reads as DCR_SIG_BAD).
 */
enum dcr_sig_status dcr_manifest_sig_check(const struct dcr_manifest *m,
					   const char *store_id,
					   const struct dcr_trust *trust);

/**
 * dcr_manifest_signer - what to show as @m's signer: the key id of its
 * signature when that verifies for @store_id, "unsigned", or "invalid",
 * into @buf (at least DCR_KEYID_LEN + 1 bytes). Returns @buf.
 */
const char *dcr_manifest_signer(const struct dcr_manifest *m,
				const char *store_id, char *buf);

/* ------------------------------------------------------------ tags */

/** A tag's signature, as a tag object carries it (objstore.h). */
struct dcr_tag_sig {
	uint8_t pub[DCR_SIG_PUB_LEN];
	uint8_t sig[DCR_SIG_LEN];
	uint8_t check[DCR_HASH_LEN]; /* the tagged version's manifest check */
	int64_t time_ns;             /* when it was tagged */
};

/**
 * dcr_tag_sign - sign tag @name -> version @v (whose manifest check is
 * @check) for store @store_id now, into @out. 0 or -errno (logged).
 */
int dcr_tag_sign(const struct dcr_sign_key *k, const char *store_id,
		 const char *name, uint64_t v,
		 const uint8_t check[DCR_HASH_LEN], struct dcr_tag_sig *out);

/**
 * dcr_tag_sig_check - check @ts for tag @name -> @v in store @store_id,
 * where version @v's manifest has check @check, and (with @trust) that
 * its key is trusted. DCR_SIG_VALID, _UNTRUSTED, or _BAD (also for a
 * check that is not @check - the tag was signed for another manifest of
 * @v - and for another store: a tag line does not name its store).
 */
enum dcr_sig_status dcr_tag_sig_check(const struct dcr_tag_sig *ts,
				      const char *store_id, const char *name,
				      uint64_t v,
				      const uint8_t check[DCR_HASH_LEN],
				      const struct dcr_trust *trust);

/** dcr_tag_sig_format - the signature line of a tag object (no newline)
 * into @buf of @cap bytes (DCR_TAG_SIG_TEXT_MAX is enough). */
#define DCR_TAG_SIG_TEXT_MAX 320
void dcr_tag_sig_format(const struct dcr_tag_sig *ts, char *buf, size_t cap);
/** dcr_tag_sig_parse - parse such a line (@len bytes, no newline):
 * 0 or -EBADMSG. Bounded: reads nothing past @len. */
int dcr_tag_sig_parse(const char *line, size_t len, struct dcr_tag_sig *out);

#endif /* DCR_SIGN_H */
