/* SPDX-License-Identifier: MIT */
/*
 * s3.h - the S3 object-store backend (libcurl, AWS Signature V4).
 *
 * URL: s3://bucket[/prefix]. Store key K lives in object "prefix/K" (or
 * "K" without a prefix), so stores under different prefixes of one bucket
 * never see each other's objects.
 *
 * Settings come from struct dcr_store_cfg, the environment and the AWS
 * files, resolved by awscfg.h. Addressing "auto" means virtual-hosted
 * (https://bucket.s3.REGION.amazonaws.com/key) on AWS for buckets that
 * are valid DNS labels, path-style (https://endpoint/bucket/key)
 * everywhere else - custom endpoints such as radosgw, MinIO or moto rarely
 * have wildcard DNS. HTTPS peers are always verified (ca_bundle adds a
 * CA file).
 *
 * Requests are signed with SigV4 here (not CURLOPT_AWS_SIGV4), with the
 * real SHA-256 of every body in x-amz-content-sha256, so servers that
 * check payload hashes (radosgw, AWS) accept them and detect corruption
 * in transit.
 *
 * Every op is thread-safe; concurrency comes from the callers' threads
 * plus the parallel parts of a multipart put (dcr_store_cfg mpu_parts in
 * flight, by default from the CPU budget). Each thread borrows a CURL
 * easy handle from a pool, so connections (and TLS sessions, DNS) are
 * reused across requests.
 *
 * Faults: 5xx, 429, 408, RequestTimeout, 409 on a conditional put,
 * timeouts and connection errors are retried with exponential backoff and
 * full jitter, within the operation's time bound (dcr_store_cfg
 * read_timeout_ms / write_timeout_ms, else the environment variables
 * DCR_S3_READ_TIMEOUT_MS / DCR_S3_WRITE_TIMEOUT_MS, else 30 s / 600 s)
 * and at most 10 attempts; then -EIO
 * with one error logged. 403 (-EACCES) and 404 (-ENOENT) are final at
 * once; 403 is logged naming bucket and key with the server's error code.
 * A missing object is not logged above debug level (callers poll for
 * versions that do not exist yet); a missing bucket is.
 *
 * DCR_PUT_IF_ABSENT sends "If-None-Match: *" on a single PUT (never
 * multipart; up to 5 GiB) and maps 412 to -EEXIST. Because a server that
 * ignores the header would silently overwrite, the first conditional put
 * of a store handle first probes the server (two conditional PUTs of a
 * scratch object under "<prefix>/.dcr-probe/", then a DELETE) and refuses
 * conditional puts with -EOPNOTSUPP if the second one is not refused.
 * Checked: Ceph radosgw 16.2 (Pacific) and moto 5 honour the header, also
 * with 16 racing writers of one key (exactly one 200, fifteen 412).
 * A conditional PUT is retried like any other, and an attempt whose
 * reply was lost (timeout or reset after sending, 500/502/504) may have
 * stored the object: a 412 after such an attempt is therefore checked by
 * reading the object back, and is success when it holds exactly the
 * bytes put (-EIO if it cannot be read).
 */
#ifndef DCR_S3_H
#define DCR_S3_H

#include "store.h"

/**
 * dcr_s3_open - open the S3 store named by @url ("s3://bucket[/prefix]").
 * @cfg may be NULL (environment and AWS files only); @flags: no flag
 * matters (a bucket is never created). Opening sends no request; a
 * missing bucket or wrong credentials show up at the first operation.
 * Returns 0 and *@out, or -errno with one message logged (-EINVAL for a
 * malformed URL or setting, -EACCES for an unsafe credentials file,
 * -ENOENT for a missing explicit credentials file or profile, -ENOMEM).
 */
int dcr_s3_open(const char *url, const struct dcr_store_cfg *cfg, int flags,
		struct dcr_store **out);

#ifdef DCR_TEST_HOOKS
/**
 * dcr_s3_test_lose_replies - for tests only: treat the replies to the
 * next @n conditional PUT attempts (of any store in the process) as
 * lost after the server acted on them - a transient error, so they are
 * retried, as after a connection reset between the server storing the
 * object and the client reading the reply. 0 disarms. Thread-safe.
 * Built only with configure --enable-test-hooks (DCR_TEST_HOOKS).
 */
void dcr_s3_test_lose_replies(int n);
#endif

#endif /* DCR_S3_H */
