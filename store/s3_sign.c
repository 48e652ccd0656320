/* SPDX-License-Identifier: MIT */
/*
 * s3_sign.c - AWS Signature V4 for the S3 backend (see s3_int.h): the
 * canonical request, the string to sign and the signed headers of one
 * attempt, with the encodings they need (SHA-256 hex, the URI encoding
 * SigV4 wants; hex itself is core/hash.h's dcr_hex) and HMAC-SHA256.
 */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "buf.h"
#include "common.h"
#include "hash.h"

#include "s3_int.h"

void sha256_hex(const void *p, size_t n, char hex[DCR_HASH_HEX_LEN + 1])
{
	uint8_t h[DCR_HASH_LEN];
	dcr_sha256(p, n, h);
	dcr_hash_hex(h, hex);
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

/* Build the signed header list for one attempt. NULL on no memory. */
struct curl_slist *sign(struct dcr_s3_store *s, const struct s3_req *r,
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
		dcr_hex(sig, sizeof(sig), hex);
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
