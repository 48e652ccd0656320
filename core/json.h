/* SPDX-License-Identifier: MIT */
/*
 * json.h - writing JSON for the tools' --json output (and, later, the
 * mount's status file). Only what the writers need: a string literal
 * with the escapes RFC 8259 requires.
 */
#ifndef DCR_JSON_H
#define DCR_JSON_H

#include <stdio.h>

/**
 * dcr_json_str - write @s as a JSON string literal to @f: quoted, with
 * '"', '\\' and control characters escaped (as serde_json does: \n,
 * \t, \r, \b, \f, else \u00xx). Bytes >= 0x80 are written
 * as they are (paths are UTF-8 by convention; invalid UTF-8 stays
 * invalid). Errors are left in @f's error flag. Not thread-safe per @f
 * beyond what stdio gives.
 */
void dcr_json_str(FILE *f, const char *s);

#endif /* DCR_JSON_H */
