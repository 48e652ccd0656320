/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the XML of S3's answers (store/s3_xml.h): elements found
 * only whole and only inside the bounds given, lists walked and an
 * unclosed element told apart from the end, truncation read only from
 * "true", and text unescaped or refused (unknown entities, character
 * references that are not plain digits or not ASCII, NUL bytes, text
 * over its maximum). No server: the bytes are the documents S3 sends,
 * and the ones a broken or hostile server could.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "testutil.h"

#include "buf.h"
#include "s3_xml.h"

/* A ListObjectsV2 page as S3 sends it (two keys, the second escaped). */
static const char LISTING[] =
	"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	"<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
	"<Name>b</Name><Prefix>p/</Prefix><KeyCount>2</KeyCount>"
	"<MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>"
	"<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
	"<Contents><Key>p/versions/0000000001</Key>"
	"<LastModified>2026-12-01T10:00:00.000Z</LastModified>"
	"<Size>1234</Size><StorageClass>STANDARD</StorageClass></Contents>"
	"<Contents><Key>p/tags/a&amp;b&lt;/Key&gt;&#33;&#x3f;</Key>"
	"<Size>2</Size></Contents>"
	"</ListBucketResult>";

/* xml_find over a C string (its NUL not included). */
static bool find(const char *s, const char *tag, const char **v, size_t *vn)
{
	return xml_find(s, strlen(s), tag, v, vn);
}

static void test_find(void **state)
{
	const char *v;
	size_t vn;

	(void)state;
	assert_true(find(LISTING, "Name", &v, &vn));
	assert_int_equal(vn, 1);
	assert_memory_equal(v, "b", 1);
	/* The first of several, raw (still escaped). */
	assert_true(find(LISTING, "Key", &v, &vn));
	assert_int_equal(vn, strlen("p/versions/0000000001"));
	assert_memory_equal(v, "p/versions/0000000001", vn);
	/* A tag is matched whole: <Key> is not <KeyCount>, nor the reverse. */
	assert_true(find("<KeyCount>2</KeyCount><Key>k</Key>", "Key", &v, &vn));
	assert_memory_equal(v, "k", vn);
	assert_false(find("<KeyCount>2</KeyCount>", "Key", &v, &vn));
	assert_false(find("<Key>2</Key>", "KeyCount", &v, &vn));
	/* Empty text, absent, unclosed, closed before it opens. */
	assert_true(find("<Prefix></Prefix>", "Prefix", &v, &vn));
	assert_int_equal(vn, 0);
	assert_false(find(LISTING, "Marker", &v, &vn));
	assert_false(find("<Code>NoSuchKey", "Code", &v, &vn));
	assert_false(find("</Code>x<Code>", "Code", &v, &vn));
	/* An element with attributes or self-closed is not the plain one. */
	assert_false(find("<Code a=\"1\">x</Code>", "Code", &v, &vn));
	assert_false(find("<Code/>", "Code", &v, &vn));
	/* Tags the finder cannot take are never found. */
	char big[XML_TAG_MAX + 2];
	memset(big, 'A', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	assert_false(find("<A>x</A>", big, &v, &vn));
	assert_false(find("<>x</>", "", &v, &vn));
}

/* Nothing past the bounds is read: an element cut by them is not there. */
static void test_find_bounded(void **state)
{
	const char doc[] = "<Code>SlowDown</Code>";
	const char *v;
	size_t vn;

	(void)state;
	for (size_t n = 0; n < sizeof(doc) - 1; n++) {
		/* a copy of exactly n bytes, so ASan sees any read past it */
		char *cut = malloc(n ? n : 1);
		assert_non_null(cut);
		memcpy(cut, doc, n);
		assert_false(xml_find(cut, n, "Code", &v, &vn));
		free(cut);
	}
	assert_true(xml_find(doc, sizeof(doc) - 1, "Code", &v, &vn));
	assert_int_equal(vn, 8);
	assert_false(xml_find(NULL, 0, "Code", &v, &vn));
}

static void test_next(void **state)
{
	const char *p = LISTING, *end = LISTING + strlen(LISTING), *c;
	size_t cn, n = 0;
	int found;

	(void)state;
	while ((found = xml_next(&p, end, "Contents", &c, &cn)) > 0) {
		char *key = xml_child(c, cn, "Key", 1024);
		assert_non_null(key);
		assert_string_equal(key, n ? "p/tags/a&b</Key>!?" : "p/versions/0000000001");
		free(key);
		n++;
	}
	assert_int_equal(found, 0);
	assert_int_equal(n, 2);
	assert_true(p <= end);
	/* An element opened and never closed is -1, not the end of the list. */
	const char cut[] = "<Contents><Key>a</Key></Contents><Contents><Key>b</Key>";
	p = cut;
	end = cut + strlen(cut);
	assert_int_equal(xml_next(&p, end, "Contents", &c, &cn), 1);
	assert_int_equal(xml_next(&p, end, "Contents", &c, &cn), -1);
	/* Nothing at all, or an empty range. */
	p = end;
	assert_int_equal(xml_next(&p, end, "Contents", &c, &cn), 0);
	p = NULL;
	assert_int_equal(xml_next(&p, NULL, "Contents", &c, &cn), 0);
	/* An empty element, then the walk goes on after it. */
	const char two[] = "<Upload></Upload><Upload>x</Upload>";
	p = two;
	end = two + strlen(two);
	assert_int_equal(xml_next(&p, end, "Upload", &c, &cn), 1);
	assert_int_equal(cn, 0);
	assert_int_equal(xml_next(&p, end, "Upload", &c, &cn), 1);
	assert_int_equal(cn, 1);
	assert_int_equal(xml_next(&p, end, "Upload", &c, &cn), 0);
}

/* xml_truncated over a copy of @s in a dcr_buf. */
static bool truncated(const char *s)
{
	struct dcr_buf b;
	bool t;

	dcr_buf_init(&b, 1 << 20);
	assert_int_equal(dcr_buf_append(&b, s, strlen(s)), 0);
	t = xml_truncated(&b);
	dcr_buf_free(&b);
	return t;
}

static void test_truncated(void **state)
{
	(void)state;
	assert_true(truncated(LISTING));
	assert_false(truncated("<IsTruncated>false</IsTruncated>"));
	assert_false(truncated("<IsTruncated>True</IsTruncated>"));
	assert_false(truncated("<IsTruncated>true </IsTruncated>"));
	assert_false(truncated("<IsTruncated>true"));
	assert_false(truncated(""));
}

/* xml_text of a C string; NULL when refused. */
static char *text(const char *s, size_t max)
{
	return xml_text(s, strlen(s), max);
}

/* @s decodes to @want. */
static void decodes(const char *s, const char *want)
{
	char *t = text(s, 1024);

	assert_non_null(t);
	assert_string_equal(t, want);
	free(t);
}

static void refused(const char *s)
{
	char *t = text(s, 1024);

	if (t)
		fail_msg("\"%s\" decoded to \"%s\", expected a refusal", s, t);
}

static void test_text(void **state)
{
	(void)state;
	decodes("", "");
	decodes("plain/key-0001", "plain/key-0001");
	decodes("&amp;&lt;&gt;&quot;&apos;", "&<>\"'");
	decodes("a&#65;b&#x41;c&#X41;d&#x7f;", "aAbAcAd\x7f");
	decodes("&#0000065;", "A");
	/* Named entities are exact; the rest is not guessed at. */
	refused("&amp");
	refused("&AMP;");
	refused("&nbsp;");
	refused("a & b");
	refused("&");
	refused("&;");
	refused("&#;");
	refused("&#x;");
	/* A character reference is digits of its base and ASCII 1-127. */
	refused("&#0;");
	refused("&#128;");
	refused("&#x80;");
	refused("&#xffffffffffffffff41;");
	refused("&# 65;");
	refused("&#-65;");
	refused("&#+65;");
	refused("&#6 5;");
	refused("&#x4g;");
	refused("&#65a;");
	/* Too long a reference for the 12 bytes looked at. */
	refused("&#00000000065;");
	/* A NUL byte would cut the string: refused, not truncated. */
	char *t = xml_text("ab\0cd", 5, 1024);
	assert_null(t);
	/* The maximum is of the raw text. */
	t = text("abcd", 4);
	assert_non_null(t);
	free(t);
	assert_null(text("abcde", 4));
	assert_null(xml_child("<Key>abcde</Key>", 16, "Key", 4));
	assert_null(xml_child("<Key>abcde</Key>", 16, "UploadId", 64));
}

/* An S3 error document: what s3_request.c and s3_mpu.c read of it. */
static void test_error_document(void **state)
{
	const char doc[] = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
		"<Error><Code>PreconditionFailed</Code><Message>At least one of "
		"the pre-conditions you specified did not hold</Message>"
		"<Condition>If-None-Match</Condition><RequestId>tx1</RequestId>"
		"</Error>";
	char *code = xml_child(doc, sizeof(doc) - 1, "Code", 64);
	char *msg = xml_child(doc, sizeof(doc) - 1, "Message", 1024);

	(void)state;
	assert_non_null(code);
	assert_string_equal(code, "PreconditionFailed");
	assert_non_null(msg);
	assert_string_equal(msg, "At least one of the pre-conditions you "
			    "specified did not hold");
	free(code);
	free(msg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_find),
		cmocka_unit_test(test_find_bounded),
		cmocka_unit_test(test_next),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_text),
		cmocka_unit_test(test_error_document),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
