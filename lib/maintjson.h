/* SPDX-License-Identifier: MIT */
/*
 * maintjson.h - the JSON form of the maintenance results (maint/index.h,
 * diff.h, verify.h, gc.h): what `dcrfs-ctl log|show|diff|verify|gc
 * --json` print and what libdcr's dcr_store_log, ... return, one writer
 * for both so that they never differ. Each writes one JSON value and a
 * newline to @f; documented in dcrfs-ctl(8) (JSON OUTPUT).
 */
#ifndef DCR_MAINTJSON_H
#define DCR_MAINTJSON_H

#include <stdio.h>

#include "diff.h"
#include "gc.h"
#include "index.h"
#include "verify.h"

/**
 * dcr_log_json - the versions of @ix, newest first, as an array of
 * records. 0, or the -errno of the first version whose manifest could
 * not be read (left out; the others are written).
 */
int dcr_log_json(FILE *f, struct dcr_index *ix);

/** dcr_show_json - version @x of @ix with its files. 0 or -errno (nothing written). */
int dcr_show_json(FILE *f, struct dcr_index *ix, struct dcr_sview_ver *x);

/** dcr_diff_json - the diff @r. */
void dcr_diff_json(FILE *f, const struct dcr_diff_result *r);

/** dcr_verify_json - what verify found, @r. */
void dcr_verify_json(FILE *f, const struct dcr_verify_result *r);

/** dcr_gc_json - what gc did (dry run: would do), @r. */
void dcr_gc_json(FILE *f, const struct dcr_gc_result *r);

#endif /* DCR_MAINTJSON_H */
