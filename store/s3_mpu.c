/* SPDX-License-Identifier: MIT */
/*
 * s3_mpu.c - multipart uploads of the S3 backend (see s3_int.h): the
 * upload created, its parts put in parallel, completed (an error in a
 * 200 reply caught), or aborted after a failure.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "common.h"
#include "wq.h"

#include "s3_int.h"

struct mpu {
	struct dcr_s3_store *s;
	const char *key, *okey;
	const uint8_t *data;
	uint64_t len, psize;
	unsigned nparts;
	char *uid_q; /* "uploadId=<encoded>" */
	char (*etags)[S3_ETAG_MAX];
	pthread_mutex_t lock;
	int err;
};

static int mpu_part(struct mpu *m, unsigned i)
{
	char q[1024], what[S3_KEY_MAX + 32];
	uint64_t off = (uint64_t)i * m->psize;
	uint64_t n = DCR_MIN(m->psize, m->len - off);

	snprintf(q, sizeof(q), "partNumber=%u&%s", i + 1, m->uid_q);
	snprintf(what, sizeof(what), "%s (part %u/%u)", m->key, i + 1, m->nparts);
	struct s3_req r = {
		.method = "PUT", .okey = m->okey, .query = q, .what = what,
		.body = m->data + off, .body_len = (size_t)n,
		.timeout_ns = m->s->write_timeout_ns,
	};
	int ret = s3_request(m->s, &r);
	if (ret)
		return ret;
	if (!r.etag[0]) {
		dcr_err("%s: PUT %s: no ETag in the reply", m->s->base.url, what);
		return DCR_ERR(-EIO);
	}
	memcpy(m->etags[i], r.etag, S3_ETAG_MAX);
	return 0;
}

/* Part @i of the upload @arg (a dcr_wq_par_for loop); after a failure
 * the parts left are skipped. */
static void mpu_part_fn(void *arg, size_t i)
{
	struct mpu *m = arg;

	pthread_mutex_lock(&m->lock);
	bool failed = m->err != 0;
	pthread_mutex_unlock(&m->lock);
	if (failed)
		return;
	int ret = mpu_part(m, (unsigned)i);
	if (ret) {
		pthread_mutex_lock(&m->lock);
		if (!m->err)
			m->err = ret;
		pthread_mutex_unlock(&m->lock);
	}
}

int put_multipart(struct dcr_s3_store *s, const char *key,
			 const char *okey, const void *data, uint64_t len)
{
	struct mpu m = { .s = s, .key = key, .okey = okey, .data = data, .len = len };
	struct dcr_buf body, q;
	const char *v;
	size_t vn;
	int ret;

	m.psize = DCR_MAX(S3_MPU_PART_MIN, DCR_DIV_ROUND_UP(len, S3_MPU_PARTS_MAX));
	m.psize = DCR_DIV_ROUND_UP(m.psize, (uint64_t)1 << 20) << 20;
	m.nparts = (unsigned)DCR_DIV_ROUND_UP(len, m.psize);
	dcr_buf_init(&body, 1 << 20);
	dcr_buf_init(&q, 4096);

	struct s3_req init = {
		.method = "POST", .okey = okey, .query = "uploads=", .what = key,
		.out = &body, .timeout_ns = s->write_timeout_ns,
	};
	if ((ret = s3_request(s, &init)))
		goto err_free;
	char *uid = NULL;
	if (xml_find((const char *)body.data, body.len, "UploadId", &v, &vn))
		uid = xml_text(v, vn, 1024);
	if (!uid || !*uid) {
		free(uid);
		dcr_err("%s: POST %s?uploads: no UploadId in the reply [bucket %s, key %s]",
			s->base.url, key, s->bucket, okey);
		ret = DCR_ERR(-EIO);
		goto err_free;
	}
	ret = buf_str(&q, "uploadId=");
	ret = ret ? ret : uri_encode(&q, uid, false);
	ret = ret ? ret : buf_cstr(&q);
	free(uid);
	if (ret)
		goto err_free;
	m.uid_q = (char *)q.data;
	if (!(m.etags = calloc(m.nparts, sizeof(*m.etags)))) {
		ret = DCR_ERR(-ENOMEM);
		goto err_abort;
	}
	pthread_mutex_init(&m.lock, NULL);
	dcr_wq_par_for(s->mpu_wq, s->mpu_parts, m.nparts, mpu_part_fn, &m);
	pthread_mutex_destroy(&m.lock);
	if ((ret = m.err))
		goto err_abort;

	dcr_buf_reset(&body);
	body.max = (size_t)m.nparts * 256 + 1024;
	ret = buf_str(&body, "<CompleteMultipartUpload>");
	for (unsigned i = 0; i < m.nparts && !ret; i++) {
		ret = buf_printf(&body, "<Part><PartNumber>%u</PartNumber><ETag>", i + 1);
		for (const char *e = m.etags[i]; *e && !ret; e++)
			ret = *e == '&' ? buf_str(&body, "&amp;") :
			      *e == '<' ? buf_str(&body, "&lt;") :
			      dcr_buf_putc(&body, (uint8_t)*e);
		ret = ret ? ret : buf_str(&body, "</ETag></Part>");
	}
	ret = ret ? ret : buf_str(&body, "</CompleteMultipartUpload>");
	if (ret)
		goto err_abort;
	struct dcr_buf reply;
	dcr_buf_init(&reply, 1 << 20);
	struct s3_req done = {
		.method = "POST", .okey = okey, .query = m.uid_q, .what = key,
		.body = body.data, .body_len = body.len,
		.content_type = "application/xml", .out = &reply,
		.timeout_ns = s->write_timeout_ns,
	};
	ret = s3_request(s, &done);
	/* S3 may answer 200 and still report an error in the body. */
	if (!ret && xml_find((const char *)reply.data, reply.len, "Code", &v, &vn) &&
	    memmem(reply.data, reply.len, "<Error>", 7)) {
		char code[64], msg[256];
		error_doc(&reply, code, sizeof(code), msg, sizeof(msg));
		dcr_err("%s: completing the upload of %s failed: %s: %s [bucket %s, key %s]",
			s->base.url, key, code, msg, s->bucket, okey);
		ret = DCR_ERR(-EIO);
	}
	dcr_buf_free(&reply);
	if (ret)
		goto err_abort;
	goto err_free;

err_abort: {
		/* Best effort: free the parts already stored. */
		struct s3_req ab = {
			.method = "DELETE", .okey = okey, .query = m.uid_q, .what = key,
			.timeout_ns = 5 * 1000000000LL, .quiet_enoent = true,
		};
		if (m.uid_q)
			s3_request(s, &ab);
	}
err_free:
	free(m.etags);
	dcr_buf_free(&q);
	dcr_buf_free(&body);
	return ret;
}
