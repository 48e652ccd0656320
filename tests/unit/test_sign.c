/* SPDX-License-Identifier: MIT */
/* Unit tests for core/sign.c and the signature block of manifest format
 * 5: keys, trust sets, signed manifests and their forgeries, tags. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include <openssl/evp.h>
#include <openssl/pem.h>

#include "chunk.h"
#include "common.h"
#include "fileio.h"
#include "manifest.h"
#include "sign.h"

#define STORE "0123456789abcdef0123456789abcdef"
#define OTHER "fedcba9876543210fedcba9876543210"

struct fx {
	char dir[256];
	char key[PATH_MAX], key2[PATH_MAX];
	struct dcr_sign_key *k, *k2;
	struct dcr_trust *t1; /* k only */
};

static char *readall(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = calloc(1, 1 << 16);

	assert_non_null(f);
	*len = fread(buf, 1, (1 << 16) - 1, f);
	fclose(f);
	return buf;
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	char id[DCR_KEYID_LEN + 1], pub[PATH_MAX + 8];

	if (dcr_mktempdir("dcr-sign", f->dir, sizeof(f->dir)))
		return -1;
	snprintf(f->key, sizeof(f->key), "%s/k", f->dir);
	snprintf(f->key2, sizeof(f->key2), "%s/k2", f->dir);
	if (dcr_sign_keygen(f->key, id) || dcr_sign_keygen(f->key2, id) ||
	    dcr_sign_key_load(f->key, &f->k) ||
	    dcr_sign_key_load(f->key2, &f->k2))
		return -1;
	snprintf(pub, sizeof(pub), "%s.pub", f->key);
	if (dcr_trust_load(pub, &f->t1))
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	dcr_sign_key_free(f->k);
	dcr_sign_key_free(f->k2);
	dcr_trust_free(f->t1);
	dcr_rm_rf(f->dir);
	free(f);
	return 0;
}

/* keygen: 0600, a .pub beside it, never over an existing file; the key
 * id is the same from the private and the public side. */
static void test_keygen(void **state)
{
	struct fx *f = *state;
	char id[DCR_KEYID_LEN + 1], path[PATH_MAX], pub[PATH_MAX + 8];
	struct stat st;

	assert_int_equal(stat(f->key, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(dcr_sign_keygen(f->key, id), -EEXIST);
	/* a stray .pub is not overwritten either, and no key is left */
	snprintf(path, sizeof(path), "%s/k3", f->dir);
	snprintf(pub, sizeof(pub), "%s.pub", path);
	int fd = open(pub, O_CREAT | O_WRONLY, 0644);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(dcr_sign_keygen(path, id), -EEXIST);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(strlen(dcr_sign_key_id(f->k)), DCR_KEYID_LEN);
	assert_string_equal(dcr_trust_key_id(f->t1, 0), dcr_sign_key_id(f->k));
	assert_string_not_equal(dcr_sign_key_id(f->k), dcr_sign_key_id(f->k2));
	assert_int_equal(dcr_sign_keygen("", id), -EINVAL);
}

/* What is not an Ed25519 private key is refused with -EBADMSG. */
static void test_key_load_refuses(void **state)
{
	struct fx *f = *state;
	struct dcr_sign_key *k = NULL;
	char path[PATH_MAX], pub[PATH_MAX + 8];

	snprintf(pub, sizeof(pub), "%s.pub", f->key);
	assert_int_equal(dcr_sign_key_load(pub, &k), -EBADMSG);
	snprintf(path, sizeof(path), "%s/junk", f->dir);
	FILE *fp = fopen(path, "w");
	fputs("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", fp);
	fclose(fp);
	assert_int_equal(dcr_sign_key_load(path, &k), -EBADMSG);
	/* an EC key is a key, but not ours */
	EVP_PKEY *ec = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	assert_non_null(ec);
	fp = fopen(path, "w");
	PEM_write_PrivateKey(fp, ec, NULL, NULL, 0, NULL, NULL);
	fclose(fp);
	assert_int_equal(dcr_sign_key_load(path, &k), -EBADMSG);
	fp = fopen(path, "w");
	PEM_write_PUBKEY(fp, ec);
	fclose(fp);
	struct dcr_trust *t = NULL;
	assert_int_equal(dcr_trust_load(path, &t), -EBADMSG);
	EVP_PKEY_free(ec);
	assert_int_equal(dcr_sign_key_load("/nonexistent/key", &k), -ENOENT);
	assert_int_equal(dcr_sign_key_load("", &k), -EINVAL);
	assert_null(k);
	/* a private key others may read is refused, as ssh refuses one;
	 * 0600 and 0400 are taken */
	static const mode_t modes[] = { 0644, 0640, 0604, 0660, 0601 };
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		assert_int_equal(chmod(f->key, modes[i]), 0);
		assert_int_equal(dcr_sign_key_load(f->key, &k), -EACCES);
		assert_null(k);
	}
	assert_int_equal(chmod(f->key, 0400), 0);
	assert_int_equal(dcr_sign_key_load(f->key, &k), 0);
	dcr_sign_key_free(k);
	assert_int_equal(chmod(f->key, 0600), 0);
}

/* A trust file: keys with text between them, duplicates once; empty
 * and damaged files refused. */
static void test_trust_parse(void **state)
{
	struct fx *f = *state;
	char p1[PATH_MAX + 8], p2[PATH_MAX + 8];
	size_t l1, l2;

	snprintf(p1, sizeof(p1), "%s.pub", f->key);
	snprintf(p2, sizeof(p2), "%s.pub", f->key2);
	char *a = readall(p1, &l1), *b = readall(p2, &l2);
	char *both = calloc(1, 2 * l1 + l2 + 64);
	int n = sprintf(both, "# old key\n%s\nnew key:\n%s%s", a, b, a);
	struct dcr_trust *t = NULL;

	assert_int_equal(dcr_trust_parse(both, (size_t)n, "both", &t), 0);
	assert_int_equal(dcr_trust_count(t), 2);
	assert_true(dcr_trust_has(t, dcr_sign_key_pub(f->k)));
	assert_true(dcr_trust_has(t, dcr_sign_key_pub(f->k2)));
	assert_false(dcr_trust_has(f->t1, dcr_sign_key_pub(f->k2)));
	dcr_trust_free(t);
	t = NULL;
	assert_int_equal(dcr_trust_parse("", 0, "empty", &t), -EBADMSG);
	assert_int_equal(dcr_trust_parse("# nothing\n", 10, "c", &t), -EBADMSG);
	/* the second block damaged: refused whole, not the first kept */
	char *bad = strdup(both);
	char *second = strstr(bad + 20, "-----BEGIN PUBLIC KEY-----\n");
	assert_non_null(second);
	second[30] ^= 0x15;
	assert_int_equal(dcr_trust_parse(bad, (size_t)n, "bad", &t), -EBADMSG);
	assert_null(t);
	free(bad);
	free(both);
	free(a);
	free(b);
}

static void set_file(struct dcr_file *fl, const char *path, uint64_t size)
{
	memset(fl, 0, sizeof(*fl));
	fl->path = strdup(path);
	fl->type = DCR_FT_REG;
	fl->mode = 0644;
	fl->size = size;
	fl->base = DCR_NO_BASE;
	fl->nchunks = dcr_chunk_count(size, 4096);
	fl->chunks = calloc(fl->nchunks ? fl->nchunks : 1, sizeof(*fl->chunks));
	for (uint64_t i = 0; i < fl->nchunks; i++) {
		fl->chunks[i].kind = DCR_CK_FULL;
		fl->chunks[i].len = 100;
		memset(fl->chunks[i].hash, (int)i + 1, DCR_HASH_LEN);
	}
}

static void build(struct dcr_manifest *m, uint64_t v, uint64_t parent)
{
	memset(m, 0, sizeof(*m));
	m->version = v;
	m->parent = parent;
	m->ctime_ns = 1764662400000000000 + (int64_t)v;
	m->chunk_size = 4096;
	m->npacks = 1;
	m->packs = calloc(1, DCR_HASH_LEN);
	m->nfiles = 1;
	m->files = calloc(1, sizeof(*m->files));
	set_file(&m->files[0], "model.safetensors", 10000);
}

static const uint8_t pcheck[DCR_HASH_LEN] = { 1, 2, 3 };

/* Encode @m signed with @k for @store, decode into @d. */
static void sign_decode(struct dcr_manifest *m, struct dcr_sign_key *k,
			const char *store, struct dcr_buf *b,
			struct dcr_manifest *d)
{
	dcr_buf_init(b, 1 << 20);
	assert_int_equal(dcr_manifest_encode_signed(m, k, store,
						    m->parent ? pcheck : NULL, b), 0);
	assert_int_equal(dcr_manifest_decode(b->data, b->len, d), 0);
}

/* A signed manifest: format 5, valid for its store and trusted key; the
 * check is the SHA-256 of header and body; plain stays format 4. */
static void test_signed_manifest(void **state)
{
	struct fx *f = *state;
	struct dcr_manifest m, d;
	struct dcr_buf b, plain;
	char who[32];

	build(&m, 7, 6);
	sign_decode(&m, f->k, STORE, &b, &d);
	assert_int_equal(d.format, 5);
	assert_true(d.has_sig);
	assert_string_equal(d.sig.store_id, STORE);
	assert_memory_equal(d.sig.parent_check, pcheck, DCR_HASH_LEN);
	uint8_t h[DCR_HASH_LEN];
	size_t body = 32 + dcr_get_le64(b.data + 24);
	dcr_sha256(b.data, body, h);
	assert_memory_equal(d.check, h, DCR_HASH_LEN);
	assert_int_equal(dcr_manifest_sig_check(&d, STORE, NULL), DCR_SIG_VALID);
	assert_int_equal(dcr_manifest_sig_check(&d, STORE, f->t1), DCR_SIG_VALID);
	assert_string_equal(dcr_manifest_signer(&d, STORE, who),
			    dcr_sign_key_id(f->k));
	/* another store: valid as made, but not for us */
	assert_int_equal(dcr_manifest_sig_check(&d, OTHER, f->t1),
			 DCR_SIG_OTHER_STORE);
	assert_string_equal(dcr_manifest_signer(&d, OTHER, who), "invalid");
	dcr_manifest_free(&d);
	dcr_buf_free(&b);
	/* an untrusted key */
	sign_decode(&m, f->k2, STORE, &b, &d);
	assert_int_equal(dcr_manifest_sig_check(&d, STORE, f->t1),
			 DCR_SIG_UNTRUSTED);
	assert_int_equal(dcr_manifest_sig_check(&d, STORE, NULL), DCR_SIG_VALID);
	dcr_manifest_free(&d);
	dcr_buf_free(&b);
	/* plain: format 4, unsigned */
	dcr_buf_init(&plain, 1 << 20);
	assert_int_equal(dcr_manifest_encode(&m, &plain), 0);
	assert_int_equal(dcr_get_le32(plain.data + 8), DCR_MANIFEST_FORMAT_PLAIN);
	assert_int_equal(dcr_manifest_decode(plain.data, plain.len, &d), 0);
	assert_false(d.has_sig);
	assert_int_equal(dcr_manifest_sig_check(&d, STORE, NULL), DCR_SIG_NONE);
	assert_string_equal(dcr_manifest_signer(&d, STORE, who), "unsigned");
	dcr_manifest_free(&d);
	dcr_buf_free(&plain);
	dcr_manifest_free(&m);
}

/*
 * Forgeries: a flipped signature byte, a block moved onto a manifest of
 * another number (replay), onto other content, or given another parent
 * check or store id; each decodes (the checksum is not a MAC) and none
 * verifies.
 */
static void test_forgeries(void **state)
{
	struct fx *f = *state;
	struct dcr_manifest m, d, d2;
	struct dcr_buf b, b2;

	build(&m, 7, 6);
	sign_decode(&m, f->k, STORE, &b, &d);
	size_t blk = b.len - (32 + dcr_get_le64(b.data + 24) + 32);

	/* a flipped byte of the signature */
	struct dcr_manifest x = d;
	x.sig.sig[5] ^= 1;
	assert_int_equal(dcr_manifest_sig_check(&x, STORE, f->t1), DCR_SIG_BAD);
	/* the parent check or store id in the block changed */
	x = d;
	x.sig.parent_check[0] ^= 1;
	assert_int_equal(dcr_manifest_sig_check(&x, STORE, f->t1), DCR_SIG_BAD);
	x = d;
	memcpy(x.sig.store_id, OTHER, sizeof(OTHER));
	assert_int_equal(dcr_manifest_sig_check(&x, OTHER, f->t1), DCR_SIG_BAD);
	/* another key's public key put in the block */
	x = d;
	memcpy(x.sig.pub, dcr_sign_key_pub(f->k2), DCR_SIG_PUB_LEN);
	assert_int_equal(dcr_manifest_sig_check(&x, STORE, NULL), DCR_SIG_BAD);

	/* replay: the same block on the manifest re-encoded as version 9 */
	m.version = 9;
	dcr_buf_init(&b2, 1 << 20);
	assert_int_equal(dcr_manifest_encode_flags(&m, DCR_MAN_SIGNED, &b2, NULL), 0);
	assert_int_equal(dcr_buf_append(&b2, b.data + b.len - blk, blk), 0);
	assert_int_equal(dcr_manifest_decode(b2.data, b2.len, &d2), 0);
	assert_int_equal(dcr_manifest_sig_check(&d2, STORE, f->t1), DCR_SIG_BAD);
	dcr_manifest_free(&d2);
	/* other content under the same number */
	m.version = 7;
	m.files[0].chunks[1].hash[0] ^= 1;
	b2.len = 0;
	assert_int_equal(dcr_manifest_encode_flags(&m, DCR_MAN_SIGNED, &b2, NULL), 0);
	assert_int_equal(dcr_buf_append(&b2, b.data + b.len - blk, blk), 0);
	assert_int_equal(dcr_manifest_decode(b2.data, b2.len, &d2), 0);
	assert_int_equal(dcr_manifest_sig_check(&d2, STORE, f->t1), DCR_SIG_BAD);
	dcr_manifest_free(&d2);
	/* another parent number */
	m.files[0].chunks[1].hash[0] ^= 1;
	m.parent = 5;
	b2.len = 0;
	assert_int_equal(dcr_manifest_encode_flags(&m, DCR_MAN_SIGNED, &b2, NULL), 0);
	assert_int_equal(dcr_buf_append(&b2, b.data + b.len - blk, blk), 0);
	assert_int_equal(dcr_manifest_decode(b2.data, b2.len, &d2), 0);
	assert_int_equal(dcr_manifest_sig_check(&d2, STORE, f->t1), DCR_SIG_BAD);
	dcr_manifest_free(&d2);
	/* the block stripped: the flag says signed, so it does not decode;
	 * with the flag cleared too it is an unsigned manifest */
	assert_int_equal(dcr_manifest_decode(b.data, b.len - blk, &d2), -EBADMSG);
	dcr_buf_free(&b2);
	dcr_manifest_free(&d);
	dcr_buf_free(&b);
	dcr_manifest_free(&m);
}

/* Hostile signature blocks: every truncation and a bad id length. */
static void test_hostile_blocks(void **state)
{
	struct fx *f = *state;
	struct dcr_manifest m, d;
	struct dcr_buf b;

	build(&m, 3, 0);
	sign_decode(&m, f->k, STORE, &b, &d);
	dcr_manifest_free(&d);
	size_t end = 32 + dcr_get_le64(b.data + 24) + 32;
	for (size_t n = end; n < b.len; n++)
		assert_int_equal(dcr_manifest_decode(b.data, n, &d), -EBADMSG);
	assert_int_equal(dcr_buf_putc(&b, 0), 0); /* one byte too many */
	assert_int_equal(dcr_manifest_decode(b.data, b.len, &d), -EBADMSG);
	b.len--;
	b.data[b.len - sizeof(STORE)] = 41; /* id length past the maximum */
	assert_int_equal(dcr_manifest_decode(b.data, b.len, &d), -EBADMSG);
	b.data[b.len - sizeof(STORE)] = 0;
	assert_int_equal(dcr_manifest_decode(b.data, b.len, &d), -EBADMSG);
	struct dcr_sig s = { 0 };
	assert_int_equal(dcr_sig_decode("", 0, &s), -EBADMSG);
	dcr_buf_free(&b);
	dcr_manifest_free(&m);
}

/* Metadata: format 5, round trip, sorted, bounds. */
static void test_meta(void **state)
{
	struct dcr_manifest m, d;
	struct dcr_buf b;
	char big[DCR_META_VALUE_MAX + 2];

	(void)state;
	build(&m, 2, 1);
	assert_int_equal(dcr_manifest_set_meta(&m, "step", "12"), 0);
	assert_int_equal(dcr_manifest_set_meta(&m, "lr", "1e-6"), 0);
	assert_int_equal(dcr_manifest_set_meta(&m, "step", "13"), 0);
	assert_int_equal(dcr_manifest_set_meta(&m, "bad key", "x"), -EINVAL);
	assert_int_equal(dcr_manifest_set_meta(&m, "", "x"), -EINVAL);
	memset(big, 'v', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	assert_int_equal(dcr_manifest_set_meta(&m, "big", big), -EINVAL);
	big[DCR_META_VALUE_MAX] = 0;
	assert_int_equal(dcr_manifest_set_meta(&m, "big", big), 0);
	dcr_buf_init(&b, 1 << 20);
	assert_int_equal(dcr_manifest_encode(&m, &b), 0);
	assert_int_equal(dcr_get_le32(b.data + 8), 5);
	assert_int_equal(dcr_manifest_decode(b.data, b.len, &d), 0);
	assert_false(d.has_sig);
	assert_int_equal(d.nmeta, 3);
	assert_string_equal(d.meta[0].key, "big");
	assert_string_equal(d.meta[1].key, "lr");
	assert_string_equal(dcr_manifest_get_meta(&d, "step"), "13");
	assert_null(dcr_manifest_get_meta(&d, "nope"));
	assert_true(dcr_manifest_same_meaning(d.format, 4));
	dcr_manifest_free(&d);
	dcr_buf_free(&b);
	dcr_manifest_free(&m);
}

/* Tags: signed, formatted, parsed, checked; forged ones refused. */
static void test_tags(void **state)
{
	struct fx *f = *state;
	uint8_t check[DCR_HASH_LEN] = { 9, 9, 9 };
	struct dcr_tag_sig ts, back;
	char line[DCR_TAG_SIG_TEXT_MAX];

	assert_int_equal(dcr_tag_sign(f->k, STORE, "best", 12, check, &ts), 0);
	dcr_tag_sig_format(&ts, line, sizeof(line));
	assert_int_equal(dcr_tag_sig_parse(line, strlen(line), &back), 0);
	assert_memory_equal(&back, &ts, sizeof(ts));
	assert_int_equal(dcr_tag_sig_check(&back, STORE, "best", 12, check, f->t1),
			 DCR_SIG_VALID);
	assert_int_equal(dcr_tag_sig_check(&back, STORE, "best", 11, check, f->t1),
			 DCR_SIG_BAD);
	assert_int_equal(dcr_tag_sig_check(&back, STORE, "other", 12, check, f->t1),
			 DCR_SIG_BAD);
	assert_int_equal(dcr_tag_sig_check(&back, OTHER, "best", 12, check, f->t1),
			 DCR_SIG_BAD);
	check[0] ^= 1; /* the version's manifest replaced since */
	assert_int_equal(dcr_tag_sig_check(&back, STORE, "best", 12, check, f->t1),
			 DCR_SIG_BAD);
	check[0] ^= 1;
	assert_int_equal(dcr_tag_sign(f->k2, STORE, "best", 12, check, &ts), 0);
	assert_int_equal(dcr_tag_sig_check(&ts, STORE, "best", 12, check, f->t1),
			 DCR_SIG_UNTRUSTED);
	/* every truncation and a few damaged lines fail to parse */
	for (size_t n = 0; n < strlen(line); n++)
		assert_int_equal(dcr_tag_sig_parse(line, n, &back), -EBADMSG);
	char bad[DCR_TAG_SIG_TEXT_MAX];
	strcpy(bad, line);
	bad[0] = 'E';
	assert_int_equal(dcr_tag_sig_parse(bad, strlen(bad), &back), -EBADMSG);
	strcpy(bad, line);
	bad[10] = 'G';
	assert_int_equal(dcr_tag_sig_parse(bad, strlen(bad), &back), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_keygen),
		cmocka_unit_test(test_key_load_refuses),
		cmocka_unit_test(test_trust_parse),
		cmocka_unit_test(test_signed_manifest),
		cmocka_unit_test(test_forgeries),
		cmocka_unit_test(test_hostile_blocks),
		cmocka_unit_test(test_meta),
		cmocka_unit_test(test_tags),
	};

	dcr_log_set_prog("test_sign");
	return cmocka_run_group_tests(tests, setup, teardown);
}
