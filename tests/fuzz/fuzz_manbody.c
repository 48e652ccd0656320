/* SPDX-License-Identifier: MIT */
/*
 * fuzz_manbody - libFuzzer target for the manifest *body* parser.
 *
 * fuzz_manifest feeds raw bytes to dcr_manifest_decode, which rejects
 * nearly all of them at the SHA-256 trailer or the zstd frame, so the
 * body parser (decode_body, decode_file) and dcr_manifest_validate are
 * barely reached. Here the input is the body: it is wrapped in a valid
 * envelope - the layout documented in core/manifest.h, rebuilt with the
 * public zstd and SHA-256 calls rather than a test-only hook - and
 * decoded.
 *
 * Input: [len: 2 bytes, little-endian][child body: len bytes][parent body]
 * (len is clamped to what is there). A child that decodes must validate,
 * be found by path and re-encode to bytes that decode and re-encode to
 * the same bytes. When the parent decodes as well, the child's base
 * references are checked against it with dcr_manifest_check_parent; the
 * parent's version is set to the child's parent number first, as the
 * reader only ever pairs a manifest with the version it names, so the
 * check gets past its first comparison.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "buf.h"
#include "common.h"
#include "hash.h"
#include "manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The envelope of core/manifest.h: header, zstd body, SHA-256 trailer. */
#define ENV_HDR_LEN 32

/*
 * Decode @body (@n bytes) as a manifest body. 0 and *@m on success, else
 * the decoder's -errno (or -ENOMEM / -EIO from building the envelope).
 */
static int decode_body_bytes(const uint8_t *body, size_t n,
			     struct dcr_manifest *m)
{
	size_t bound = ZSTD_compressBound(n);
	uint8_t *env = malloc(ENV_HDR_LEN + bound + DCR_HASH_LEN);
	size_t clen;
	int ret;

	memset(m, 0, sizeof(*m));
	if (!env)
		return -ENOMEM;
	clen = ZSTD_compress(env + ENV_HDR_LEN, bound, body, n, 1);
	if (ZSTD_isError(clen)) {
		free(env);
		return -EIO;
	}
	memcpy(env, "DCRMANIF", 8);
	dcr_put_le32(env + 8, DCR_MANIFEST_FORMAT);
	dcr_put_le32(env + 12, 0);             /* flags */
	dcr_put_le64(env + 16, n);             /* body length */
	dcr_put_le64(env + 24, clen);          /* compressed length */
	dcr_sha256(env, ENV_HDR_LEN + clen, env + ENV_HDR_LEN + clen);
	ret = dcr_manifest_decode(env, ENV_HDR_LEN + clen + DCR_HASH_LEN, m);
	free(env);
	return ret;
}

/* A decoded manifest is valid, indexed by path and re-encodes stably. */
static void check_decoded(const struct dcr_manifest *m)
{
	struct dcr_manifest again;
	struct dcr_buf a, b;

	if (dcr_manifest_validate(m))
		abort();
	if (m->version == 0 || m->version > DCR_VERSION_MAX ||
	    m->parent >= m->version)
		abort();
	for (uint32_t i = 0; i < m->nfiles; i++)
		if (dcr_manifest_find(m, m->files[i].path) != (int64_t)i)
			abort();
	dcr_buf_init(&a, SIZE_MAX);
	dcr_buf_init(&b, SIZE_MAX);
	if (dcr_manifest_encode(m, &a))
		abort();
	if (dcr_manifest_decode(a.data, a.len, &again))
		abort();
	if (dcr_manifest_encode(&again, &b))
		abort();
	if (a.len != b.len || memcmp(a.data, b.data, a.len))
		abort();
	dcr_manifest_free(&again);
	dcr_buf_free(&a);
	dcr_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dcr_manifest m, p;
	size_t n;

	if (size < 2)
		return 0;
	n = (size_t)data[0] | (size_t)data[1] << 8;
	data += 2;
	size -= 2;
	if (n > size)
		n = size;
	if (decode_body_bytes(data, n, &m))
		return 0;
	check_decoded(&m);
	if (decode_body_bytes(data + n, size - n, &p) == 0) {
		if (m.parent)
			p.version = m.parent;
		int ret = dcr_manifest_check_parent(&m, &p);
		if (ret != 0 && ret != -EBADMSG)
			abort();
		dcr_manifest_free(&p);
	}
	dcr_manifest_free(&m);
	return 0;
}
