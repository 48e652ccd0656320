/* SPDX-License-Identifier: MIT */
/*
 * tags.c - /tags and its symlinks, /tags/NAME -> ../vN, from the
 * reader's tag snapshot (dcr_reader_tags, refreshed with the versions).
 *
 * A tag's inode number is DCRFS_INO_TAG_BASE + its slot in the mount's
 * tag-name table (struct dcrfs_tags): assigned the first time a lookup
 * or a listing sees the name, never reused while mounted, so a tag that
 * moves keeps its number (the watcher invalidates it, bg.c) and one that
 * goes away fails ENOENT. The numbers depend on this mount's memory
 * (fs.h). Listing offsets: 1 ".", 2 "..", slot + 3 after a tag.
 *
 * Locking: fs->tags.lock guards the table, for short spells; nothing is
 * called under it.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "fs.h"
#include "handover.h"
#include "node.h"

void fs_tags_stat(struct dcrfs *fs, struct stat *st)
{
	fs_stat_common(fs, st, DCRFS_INO_TAGS, S_IFDIR | 0555, 2,
		       fs_latest_ctime(fs, dcr_reader_latest(fs->r)));
	st->st_size = 4096;
	st->st_blocks = 8;
}

/* Slot of tag @name in the tag-name table, added if new. 0 or -errno. */
static int tag_slot(struct dcrfs *fs, const char *name, size_t *slot)
{
	int ret = 0;

	pthread_mutex_lock(&fs->tags.lock);
	for (size_t i = 0; i < fs->tags.n; i++) {
		if (strcmp(fs->tags.names[i], name) == 0) {
			*slot = i;
			goto out;
		}
	}
	if (fs->tags.n >= DCRFS_INO_DVIEW_BASE - DCRFS_INO_TAG_BASE) {
		ret = -ENOSPC;
		goto out;
	}
	if (fs->tags.n == fs->tags.cap) {
		size_t cap = fs->tags.cap ? 2 * fs->tags.cap : 16;
		char **p = realloc(fs->tags.names, cap * sizeof(*p));

		if (!p) {
			ret = -ENOMEM;
			goto out;
		}
		fs->tags.names = p;
		fs->tags.cap = cap;
	}
	fs->tags.names[fs->tags.n] = strdup(name);
	if (!fs->tags.names[fs->tags.n]) {
		ret = -ENOMEM;
		goto out;
	}
	*slot = fs->tags.n++;
	pthread_mutex_unlock(&fs->tags.lock);
	dcrfs_ho_hold_update(fs); /* a restart must know the new slot */
	return 0;
out:
	pthread_mutex_unlock(&fs->tags.lock);
	return ret;
}

/* Name of the tag node @n (DCRFS_K_TAG) into @buf. 0 or -ENOENT. */
static int tag_name_of(struct dcrfs *fs, const struct dcrfs_node *n,
		       char *buf, size_t cap)
{
	int ret = -ENOENT;

	if (n->kind != DCRFS_K_TAG)
		return -ENOENT;
	pthread_mutex_lock(&fs->tags.lock);
	if (n->slot < fs->tags.n) {
		const char *name = fs->tags.names[n->slot];

		if (strlen(name) < cap) {
			strcpy(buf, name);
			ret = 0;
		}
	}
	pthread_mutex_unlock(&fs->tags.lock);
	return ret;
}

/* Version tag @name points at now. 0 or -errno (-ENOENT if no such tag). */
static int tag_version(struct dcrfs *fs, const char *name, uint64_t *v)
{
	struct dcr_tag *tags = NULL;
	size_t n = 0;
	int ret = dcr_reader_tags(fs->r, &tags, &n);

	if (ret < 0)
		return ret;
	ret = -ENOENT;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(tags[i].name, name) == 0) {
			*v = tags[i].version;
			ret = 0;
			break;
		}
	}
	dcr_reader_tags_free(tags, n);
	return ret;
}

static int tag_stat(struct dcrfs *fs, fuse_ino_t ino, const char *name,
		    struct stat *st)
{
	char target[40];
	uint64_t v;
	int ret = tag_version(fs, name, &v);

	if (ret < 0)
		return ret;
	snprintf(target, sizeof(target), "../v%" PRIu64, v);
	fs_symlink_stat(fs, st, ino, target, v);
	return 0;
}

void fs_tags_lookup(fuse_req_t req, struct dcrfs *fs, const char *name)
{
	struct stat st;
	size_t slot;
	uint64_t v;
	int ret = tag_version(fs, name, &v);

	if (ret == 0)
		ret = tag_slot(fs, name, &slot);
	if (ret == 0)
		ret = tag_stat(fs, DCRFS_INO_TAG_BASE + slot, name, &st);
	if (ret < 0) {
		fuse_reply_err(req, -ret);
		return;
	}
	fs_reply_entry(req, &st, DCRFS_TTL_MUTABLE, 0);
}

struct tag_ent {
	size_t slot;
	uint64_t version;
	const char *name;
};

static int tag_ent_cmp(const void *a, const void *b)
{
	const struct tag_ent *x = a, *y = b;

	return x->slot < y->slot ? -1 : x->slot > y->slot;
}

/* Tags offsets: 1 ".", 2 "..", slot + 3 after the tag in that slot. */
int fs_tags_readdir(struct dirbuf *db, struct dcrfs *fs, off_t off)
{
	struct dcr_tag *tags = NULL;
	struct tag_ent *ents = NULL;
	size_t n = 0;
	struct stat st;
	int ret = dcr_reader_tags(fs->r, &tags, &n);

	if (ret < 0)
		return ret;
	if (n) {
		ents = calloc(n, sizeof(*ents));
		if (!ents) {
			ret = -ENOMEM;
			goto out;
		}
	}
	for (size_t i = 0; i < n; i++) {
		ret = tag_slot(fs, tags[i].name, &ents[i].slot);
		if (ret < 0)
			goto out;
		ents[i].version = tags[i].version;
		ents[i].name = tags[i].name;
	}
	if (n)
		qsort(ents, n, sizeof(*ents), tag_ent_cmp);

	fs_tags_stat(fs, &st);
	if (off < 1 && fs_dirbuf_add(db, ".", &st, DCRFS_TTL_MUTABLE, 1))
		goto out;
	if (off < 2) {
		if (fs_root_stat(fs, &st) < 0)
			fs_tags_stat(fs, &st);
		if (fs_dirbuf_add(db, "..", &st, DCRFS_TTL_MUTABLE, 2))
			goto out;
	}
	for (size_t i = 0; i < n; i++) {
		char target[40];
		off_t next = (off_t)(ents[i].slot + 3);

		if (next <= off)
			continue;
		snprintf(target, sizeof(target), "../v%" PRIu64,
			 ents[i].version);
		fs_symlink_stat(fs, &st, DCRFS_INO_TAG_BASE + ents[i].slot,
				target, ents[i].version);
		if (fs_dirbuf_add(db, ents[i].name, &st, DCRFS_TTL_MUTABLE,
				  next))
			break;
	}
out:
	free(ents);
	dcr_reader_tags_free(tags, n);
	return ret;
}

int fs_tag_getattr(struct dcrfs *fs, const struct dcrfs_node *n,
		   struct stat *st)
{
	char name[256];
	int ret = tag_name_of(fs, n, name, sizeof(name));

	if (ret < 0)
		return ret;
	return tag_stat(fs, n->ino, name, st);
}

void fs_tag_readlink(fuse_req_t req, struct dcrfs *fs,
		     const struct dcrfs_node *n)
{
	char target[40];
	char name[256];
	uint64_t v;
	int ret = tag_name_of(fs, n, name, sizeof(name));

	if (ret == 0)
		ret = tag_version(fs, name, &v);
	if (ret < 0) {
		/* A tag that went away. */
		fuse_reply_err(req, -ret);
		return;
	}
	snprintf(target, sizeof(target), "../v%" PRIu64, v);
	fuse_reply_readlink(req, target);
}
