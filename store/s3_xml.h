/* SPDX-License-Identifier: MIT */
/*
 * s3_xml.h - the XML of S3's answers (s3_xml.c), apart from s3_int.h so
 * that its unit test (tests/unit/test_s3_xml.c) and its fuzz target
 * (tests/fuzz/fuzz_s3xml.c) need no libcurl. For the S3 backend's files
 * and those two only.
 *
 * The bodies are untrusted network bytes in bounded buffers (not
 * strings). Not a general XML parser: an element is found by its exact
 * "<tag>" and the first "</tag>" after it, which is enough for the flat
 * documents S3 sends (ListBucketResult, ListMultipartUploadsResult,
 * InitiateMultipartUploadResult, Error): no element there nests in one
 * of its own name, none carries attributes but the document's root, and
 * text is escaped (a key holding "</Key>" arrives as "&lt;/Key>").
 * Comments, CDATA and processing instructions in an element's text are
 * not understood; S3 sends none there. Every function reads only inside
 * the bounds it is given and is thread-safe (no state).
 */
#ifndef DCR_S3_XML_H
#define DCR_S3_XML_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"

/* Longest tag name the finders take (a longer one is never found). */
#define XML_TAG_MAX 60

/**
 * xml_find - the text of the first <@tag>...</@tag> in @s[0..@n): its
 * start into *@vs and length into *@vn (raw, still escaped). false when
 * absent or unclosed within @n.
 */
bool xml_find(const char *s, size_t n, const char *tag,
	      const char **vs, size_t *vn);

/**
 * xml_next - the next <@tag>...</@tag> at or after *@p, before @end: its
 * body into *@c / *@cn and *@p moved past it. 1 found, 0 none left, -1 an
 * opening tag without its closing one (a truncated or hostile body).
 */
int xml_next(const char **p, const char *end, const char *tag,
	     const char **c, size_t *cn);

/** xml_truncated - whether the listing @b says <IsTruncated>true</IsTruncated>. */
bool xml_truncated(const struct dcr_buf *b);

/**
 * xml_text - @s[0..@n) unescaped (the five named entities, &#N; and
 * &#xN; of ASCII 1-127) into a new NUL-terminated string of at most @max
 * bytes; the caller frees it. NULL on malformed text (an unknown entity,
 * a character reference that is not digits or not ASCII, a NUL byte),
 * on @n over @max, or without memory.
 */
char *xml_text(const char *s, size_t n, size_t max);

/**
 * xml_child - the text of the first <@tag> in @c[0..@cn), unescaped as
 * xml_text does (at most @max bytes; the caller frees it). NULL if
 * absent, malformed or no memory.
 */
char *xml_child(const char *c, size_t cn, const char *tag, size_t max);

#endif /* DCR_S3_XML_H */
