/* SPDX-License-Identifier: MIT */
/*
 * json.h - writing JSON for the tools' --json output (and, later, the
 * mount's status file). Only what the writers need: a string literal
 * with the escapes RFC 8259 requires, and the UTF-8 check of text that
 * goes into a JSON document which others parse (a safetensors header).
 */
#ifndef DCR_JSON_H
#define DCR_JSON_H

#include <stdbool.h>
#include <stddef.h>
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

/**
 * dcr_utf8_valid - whether @s[0..len) is well-formed UTF-8 (RFC 3629:
 * no overlong form, no surrogate, nothing above U+10FFFF, no truncated
 * sequence), the text a JSON document may carry. On false, *@bad (if
 * not NULL) is the offset of the first byte that is not. The one UTF-8
 * check: of tensor names and metadata a safetensors header is written
 * with, and of paths given to libdcr.
 */
bool dcr_utf8_valid(const char *s, size_t len, size_t *bad);

#endif /* DCR_JSON_H */
