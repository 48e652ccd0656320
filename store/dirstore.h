/* SPDX-License-Identifier: MIT */
/*
 * dirstore.h - the local-directory object store.
 *
 * Objects are files under the root directory, keys map to relative paths.
 * put writes a temporary file in <root>/.tmp, fsyncs it and renames it
 * into place (plain put) or link()s it (DCR_PUT_IF_ABSENT: link fails with
 * EEXIST if the key exists, so exactly one of two racing puts wins), then
 * fsyncs the directory. A crash leaves at most stray files in .tmp.
 */
#ifndef DCR_DIRSTORE_H
#define DCR_DIRSTORE_H

#include "objstore.h"

/**
 * dcr_dir_open - open the directory store at @path (created with its
 * parents if @create). 0 and *@out, or -errno (message logged).
 */
int dcr_dir_open(const char *path, int create, struct dcr_store **out);

#endif /* DCR_DIRSTORE_H */
