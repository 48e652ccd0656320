/* SPDX-License-Identifier: MIT */
/*
 * store.h - open an object store by URL.
 *
 *   /abs/or/relative/path     local directory (the embedded default)
 *   file:///abs/path          local directory
 *   s3://bucket/prefix        S3 API (see s3.h for settings and guarantees)
 */
#ifndef DCR_STORE_H
#define DCR_STORE_H

#include <stdbool.h>

#include "objstore.h"

/** Settings a backend may need beyond the URL (S3 endpoint, creds, ...). */
struct dcr_store_cfg {
	const char *endpoint;    /* S3: http(s)://host:port */
	const char *region;
	const char *profile;
	const char *credentials; /* path of an AWS credentials file */
	int path_style;          /* S3: -1 = default, 0 = virtual, 1 = path */
	/* S3: send unsigned requests (a public bucket); without it, finding
	 * no credentials is an error (-EACCES, logged, naming the places
	 * looked in), never a silent fallback to unsigned requests. */
	int no_sign_request;
	const char *ca_bundle;
	/* S3: bound on one operation including its retries, in ms; 0 picks
	 * the default (30 s for get/head/list/del, 600 s per put or part). */
	unsigned int read_timeout_ms;
	unsigned int write_timeout_ms;
	/* S3: the endpoint is a mirror (store/mirror.h): one attempt per
	 * request, failures logged at debug level only (the caller falls
	 * back to the store and logs once per incident). */
	int mirror;
	/* S3: parts of one multipart upload (objects over 64 MiB) in flight:
	 * requests waiting on the network, not CPU work; 0 picks the
	 * default, as the reader's fetch_threads does: the CPU budget
	 * (core/cpus.h), at least DCR_S3_MPU_PARTS_DEFAULT, at most
	 * DCR_S3_MPU_PARTS_MAX (larger values are capped). */
	unsigned int mpu_parts;
};

/** The least default of dcr_store_cfg.mpu_parts: requests in flight
 *  overlap the network's waits even on one CPU. */
#define DCR_S3_MPU_PARTS_DEFAULT 8
/** The most parts of one upload in flight. */
#define DCR_S3_MPU_PARTS_MAX 64

enum dcr_open_flags {
	DCR_OPEN_CREATE = 1 << 0, /* create a local store directory if absent */
};

/**
 * dcr_store_open - open the store named by @url. @cfg may be NULL.
 * Returns 0 and *@out, or -errno with one clear message logged
 * (-EINVAL bad URL, -ENOENT missing store without DCR_OPEN_CREATE,
 * -ENOTDIR, -EACCES, -EPROTONOSUPPORT for an unknown scheme).
 */
int dcr_store_open(const char *url, const struct dcr_store_cfg *cfg,
		   int flags, struct dcr_store **out);

/**
 * dcr_store_check - make sure the opened @st holds a dcrfs store, for
 * every tool and the mount alike: with @init, create one if it holds
 * none (dcr_store_init; "created" logged), else a store that holds none
 * is -ENOENT with a message naming it and how to create one. Fills
 * @info. Returns 0, -ENOENT, -EBADMSG or -EPROTONOSUPPORT (a bad or
 * newer marker), or another -errno when the store could not be asked
 * (a message says so; the mount goes on from its cache then):
 * -EHOSTUNREACH when it could not be reached at all.
 */
int dcr_store_check(struct dcr_store *st, bool init,
		    struct dcr_store_info *info);

/**
 * dcr_store_init_failed - say why dcr_store_init(@st) failed with @ret
 * (not -EEXIST): -ENOENT is a bucket that does not exist (dcrfs creates
 * none), anything else is named as it is. One error line; for
 * `dcrfs-ctl init` and dcr_store_check alike.
 */
void dcr_store_init_failed(const struct dcr_store *st, int ret);

#endif /* DCR_STORE_H */
