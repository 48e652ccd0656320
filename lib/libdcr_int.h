/* SPDX-License-Identifier: MIT */
/*
 * libdcr_int.h - what the files of libdcr share besides dcr.h: the store
 * handle and the entry and exit of a public call (libdcr.c). Included
 * by lib/ only.
 */
#ifndef DCR_LIBDCR_INT_H
#define DCR_LIBDCR_INT_H

#include "dcr.h"
#include "objstore.h"

/** A store handle: the store, checked to be one, and its identity. */
struct dcr_store_handle {
	struct dcr_store *st;
	struct dcr_store_info info;
};

/** dcr_api_enter - start of a public call: forget the previous call's errors. */
void dcr_api_enter(void);

/**
 * dcr_api_leave - end of a public call returning @ret: on a failure
 * (< 0), dcr_errmsg is set to the errors logged during the call (or, if
 * none, "@what: strerror"). Returns @ret.
 */
int dcr_api_leave(int ret, const char *what);

#endif /* DCR_LIBDCR_INT_H */
