/* SPDX-License-Identifier: MIT */
/*
 * json.h - writing JSON for the tools' --json output and the mount's
 * status file (a string literal with the escapes RFC 8259 requires),
 * the one UTF-8 check (of text that goes into a JSON document others
 * parse, such as a safetensors header), and the one reader of untrusted
 * JSON: checking that bytes are one JSON text before they are read, and
 * a cursor for a parser that walks a document it knows (safetensors.c),
 * with the same checks on every value it reads or skips.
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

/**
 * struct dcr_json - a cursor over the untrusted JSON bytes [@p, @end) for
 * a parser that walks a document of a shape it knows: it reads the
 * members it wants with the functions below and skips the others with
 * dcr_json_skip. Nothing outside [@p, @end) is read; no NUL is needed.
 * On an error the cursor is left somewhere inside; the caller gives up.
 */
struct dcr_json {
	const char *p;
	const char *end;
};

/** dcr_json_ws - move @j past white space. */
void dcr_json_ws(struct dcr_json *j);

/** dcr_json_expect - white space then the byte @c, consumed: 0, or
 * -EBADMSG (something else, or the end). */
int dcr_json_expect(struct dcr_json *j, char c);

/**
 * dcr_json_string - white space then a string, checked as dcr_json_check
 * checks one: 0 with its raw contents (still escaped, every escape
 * valid, valid UTF-8) in *@s / *@n, pointing into @j's bytes; or
 * -EBADMSG.
 */
int dcr_json_string(struct dcr_json *j, const char **s, size_t *n);

/**
 * dcr_json_skip - white space then one value of any kind, checked as
 * dcr_json_check does, at nesting @depth (the containers @j is already
 * inside; deeper than DCR_JSON_DEPTH_MAX is refused): 0 or -EBADMSG.
 */
int dcr_json_skip(struct dcr_json *j, int depth);

#endif /* DCR_JSON_H */
