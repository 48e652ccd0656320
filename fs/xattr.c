/* SPDX-License-Identifier: MIT */
/*
 * xattr.c - provenance of the version trees as extended attributes
 * (getxattr, listxattr; issue 20). Setting and removing stay refused
 * with EROFS in ops.c, with every other modification.
 *
 * Every inode of a version tree - /vN itself and each file and
 * directory below it, which is also what latest/ and tags/NAME resolve
 * to (the same inode numbers, fs.h) - carries, read-only:
 *
 *   user.dcrfs.version   the version, decimal
 *   user.dcrfs.parent    its parent, decimal (0: none)
 *   user.dcrfs.time      its commit time, ISO 8601 UTC with nanoseconds
 *                        (2026-12-02T08:01:02.123456789Z)
 *   user.dcrfs.digest    a file: "<kind>:<64 hex>", its digest as the
 *                        manifest records it (kind: dcr_file_digest_kind
 *                        of the manifest's format); a directory: the
 *                        manifest's check, "manifest-sha256:<64 hex>"
 *   user.dcrfs.signer    the version's signer as the reader shows it
 *                        (dcr_version_info.signer: "unsigned", a key id,
 *                        "invalid")
 *   user.dcrfs.meta.KEY  one per entry of the trainer's metadata
 *
 * in that order (the metadata sorted by key, as the manifest keeps it).
 * Any other inode (/, the /latest symlink itself, /tags and its
 * symlinks, /.dcrfs, /delta and below) carries none: an empty list, and
 * ENODATA for every name.
 *
 * The values come from the tree the inode's number names, never the
 * version's current one: an inode of a tree the version no longer has
 * (re-indexed in the store) fails with ESTALE, as getattr does, so an
 * fd opened through latest/ keeps answering for the version (and tree)
 * it was opened on after latest moves. Nothing is cached here: a tree is
 * immutable and the reader holds it.
 *
 * Sizes follow getxattr(2)/listxattr(2), which the kernel forwards as
 * is: a query of size 0 returns the size needed, a buffer too small
 * fails with ERANGE.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "common.h"
#include "hash.h"
#include "manifest.h"
#include "fs.h"

#define XA_PREFIX "user.dcrfs."
#define XA_META_PREFIX XA_PREFIX "meta."
#define XA_DIR_DIGEST_KIND "manifest-sha256"

/* The fixed attributes, in listing order. */
enum xa_fixed {
	XA_VERSION,
	XA_PARENT,
	XA_TIME,
	XA_DIGEST,
	XA_SIGNER,
	XA_NFIXED,
};

static const char *const xa_fixed_names[XA_NFIXED] = {
	[XA_VERSION] = XA_PREFIX "version",
	[XA_PARENT] = XA_PREFIX "parent",
	[XA_TIME] = XA_PREFIX "time",
	[XA_DIGEST] = XA_PREFIX "digest",
	[XA_SIGNER] = XA_PREFIX "signer",
};

/* What the attributes of one version-tree inode are made of. */
struct xa_src {
	const struct dcr_version_info *vi; /* held until xa_src_put */
	uint32_t tree, idx;                /* the inode's */
	bool dir;
};

/* The longest value formatted into a buffer: a digest "<kind>:<hex>". */
#define XA_VALUE_MAX 96

/*
 * The source of inode @ino's attributes into @s: 1 (s->vi held: call
 * xa_src_put), 0 for an inode that has none, or -errno (-ESTALE: the
 * version has another tree now; -ENOENT: no such entry; the reader's).
 * A file's digest is looked up only when asked for (xa_value).
 */
static int xa_src_get(struct dcrfs *fs, fuse_ino_t ino, struct xa_src *s)
{
	const struct dcr_entry *e;
	struct dcrfs_node n;
	int ret;

	memset(s, 0, sizeof(*s));
	dcrfs_ino_resolve(ino, &n);
	if (n.kind != DCRFS_K_VERSION)
		return 0;
	s->tree = n.tree;
	s->idx = n.idx;
	ret = version_get_tree(fs, n.v, s->tree, &s->vi);
	if (ret < 0)
		return ret;
	if (s->idx >= s->vi->nentries) {
		version_put(fs, s->vi);
		s->vi = NULL;
		return -ENOENT;
	}
	e = &s->vi->entries[s->idx];
	s->dir = e->type == DCR_FT_DIR;
	return 1;
}

static void xa_src_put(struct dcrfs *fs, struct xa_src *s)
{
	version_put(fs, s->vi);
	s->vi = NULL;
}

/* @ns since the epoch as ISO 8601 UTC with nanoseconds into @buf. */
static void xa_time(int64_t ns, char *buf, size_t cap)
{
	int64_t s = ns / 1000000000LL, r = ns % 1000000000LL;
	time_t t;
	struct tm tm;
	size_t n;

	if (r < 0) {
		r += 1000000000LL;
		s--;
	}
	t = (time_t)s;
	if (!gmtime_r(&t, &tm) ||
	    (n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm)) == 0) {
		snprintf(buf, cap, "?");
		return;
	}
	snprintf(buf + n, cap - n, ".%09" PRId64 "Z", r);
}

/* "<kind>:<hex of @h>" into @buf. */
static void xa_digest(const char *kind, const uint8_t h[DCR_HASH_LEN],
		      char *buf, size_t cap)
{
	char hex[DCR_HASH_HEX_LEN + 1];

	dcr_hash_hex(h, hex);
	snprintf(buf, cap, "%s:%s", kind, hex);
}

/* The value of fixed attribute @k of @s into @buf (of XA_VALUE_MAX
 * bytes): 0, or for a file's digest the reader's -errno. */
static int xa_fixed_value(struct dcrfs *fs, const struct xa_src *s,
			  enum xa_fixed k, char *buf)
{
	const struct dcr_version_info *vi = s->vi;
	struct dcr_file_meta fm;
	int ret;

	switch (k) {
	case XA_VERSION:
		snprintf(buf, XA_VALUE_MAX, "%" PRIu64, vi->version);
		break;
	case XA_PARENT:
		snprintf(buf, XA_VALUE_MAX, "%" PRIu64, vi->parent);
		break;
	case XA_TIME:
		xa_time(vi->ctime_ns, buf, XA_VALUE_MAX);
		break;
	case XA_DIGEST:
		if (s->dir) {
			xa_digest(XA_DIR_DIGEST_KIND, vi->check, buf,
				  XA_VALUE_MAX);
			break;
		}
		ret = dcr_reader_file_meta(fs->r, vi->version, s->tree, s->idx,
					   &fm);
		if (ret < 0)
			return ret;
		xa_digest(dcr_file_digest_kind(fm.format), fm.digest, buf,
			  XA_VALUE_MAX);
		break;
	case XA_SIGNER:
		/* a fixed array: copied bounded, in case it is full */
		snprintf(buf, XA_VALUE_MAX, "%.*s", (int)sizeof(vi->signer),
			 vi->signer);
		break;
	case XA_NFIXED:
		return -ENODATA;
	}
	return 0;
}

/*
 * The value of attribute @name of @s into *@val (in @buf, of
 * XA_VALUE_MAX bytes, or owned by s->vi) and its length: 0, -ENODATA
 * for a name @s does not carry, or the reader's -errno.
 */
static int xa_value(struct dcrfs *fs, const struct xa_src *s,
		    const char *name, char *buf, const char **val,
		    size_t *len)
{
	const struct dcr_version_info *vi = s->vi;
	int ret;

	for (int k = 0; k < XA_NFIXED; k++) {
		if (strcmp(name, xa_fixed_names[k]) == 0) {
			ret = xa_fixed_value(fs, s, (enum xa_fixed)k, buf);
			if (ret < 0)
				return ret;
			*val = buf;
			*len = strlen(buf);
			return 0;
		}
	}
	if (strncmp(name, XA_META_PREFIX, strlen(XA_META_PREFIX)) != 0)
		return -ENODATA;
	name += strlen(XA_META_PREFIX);
	for (uint32_t i = 0; i < vi->nmeta; i++) {
		if (strcmp(vi->meta[i].key, name) == 0) {
			*val = vi->meta[i].value;
			*len = strlen(*val);
			return 0;
		}
	}
	return -ENODATA;
}

/* The names @s carries, each NUL-terminated, appended to @out (bounded
 * by its max). 0, -ENOMEM, or -E2BIG for a list over the bound. */
static int xa_names(const struct xa_src *s, struct dcr_buf *out)
{
	const struct dcr_version_info *vi = s->vi;
	int ret = 0;

	for (int k = 0; k < XA_NFIXED && ret == 0; k++)
		ret = dcr_buf_append(out, xa_fixed_names[k],
				     strlen(xa_fixed_names[k]) + 1);
	for (uint32_t i = 0; i < vi->nmeta && ret == 0; i++) {
		ret = dcr_buf_append(out, XA_META_PREFIX,
				     strlen(XA_META_PREFIX));
		if (ret == 0)
			ret = dcr_buf_append(out, vi->meta[i].key,
					     strlen(vi->meta[i].key) + 1);
	}
	return ret == -EFBIG ? -E2BIG : ret;
}

/* Reply @len bytes at @p to a getxattr/listxattr of buffer @size. */
static void xa_reply(fuse_req_t req, const void *p, size_t len, size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (size < len)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, p, len);
}

void dcrfs_ll_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
		       size_t size)
{
	struct dcrfs *fs = fuse_req_userdata(req);
	char buf[XA_VALUE_MAX];
	struct xa_src s;
	const char *val;
	size_t len;
	int ret = xa_src_get(fs, ino, &s);

	if (ret <= 0) {
		fuse_reply_err(req, ret < 0 ? -ret : ENODATA);
		return;
	}
	ret = xa_value(fs, &s, name, buf, &val, &len);
	if (ret < 0)
		fuse_reply_err(req, -ret);
	else
		xa_reply(req, val, len, size);
	xa_src_put(fs, &s);
}

void dcrfs_ll_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct dcrfs *fs = fuse_req_userdata(req);
	struct dcr_buf names;
	struct xa_src s;
	int ret = xa_src_get(fs, ino, &s);

	if (ret < 0) {
		fuse_reply_err(req, -ret);
		return;
	}
	if (ret == 0) {
		xa_reply(req, NULL, 0, size);
		return;
	}
	/* At most DCR_META_MAX keys of DCR_META_KEY_MAX bytes: about
	 * 21 KiB, under the kernel's 64 KiB for a list. */
	dcr_buf_init(&names, (size_t)1 << 16);
	ret = xa_names(&s, &names);
	xa_src_put(fs, &s);
	if (ret < 0)
		fuse_reply_err(req, -ret);
	else
		xa_reply(req, names.data, names.len, size);
	dcr_buf_free(&names);
}
