/* SPDX-License-Identifier: MIT */
/*
 * json.h - writing JSON for the tools' --json output and the mount's
 * status file (a string literal with the escapes RFC 8259 requires),
 * the one UTF-8 check (of text that goes into a JSON document others
 * parse, such as a safetensors header), and checking that untrusted
 * bytes are one JSON text before they are read.
 */
#ifndef DCR_JSON_H
#define DCR_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Deepest nesting of arrays and objects dcr_json_check accepts. */
#define DCR_JSON_DEPTH_MAX 32

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

/**
 * dcr_json_check - whether the @n bytes at @text are exactly one JSON
 * text (RFC 8259: one value between optional whitespace): strings of
 * valid UTF-8 without raw control characters, with valid escapes;
 * numbers as the grammar has them; nesting at most DCR_JSON_DEPTH_MAX
 * deep. Bounded: reads @text[0..@n) only (no NUL needed; a NUL byte is
 * refused), recursion bounded by the depth. 0, or -EBADMSG.
 */
int dcr_json_check(const void *text, size_t n);

#endif /* DCR_JSON_H */
