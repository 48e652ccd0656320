/* SPDX-License-Identifier: MIT */
/*
 * catalog_write.c - the catalog's writes (see catalog.h): a version
 * indexed in batches of rows with its versions row last, replaced in one
 * transaction, given its identity (the manifest object it was indexed
 * from) or removed; the tags replaced. Each runs in in_txn's write
 * transactions (catalog.c).
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <sqlite3.h>

#include "catalog_int.h"
#include "common.h"
#include "hash.h"
#include "manifest.h"

/* Step a write statement to completion and reset it. */
static int step_done(struct dcr_catalog *c, sqlite3_stmt *st, const char *what)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	if (rc != SQLITE_DONE)
		return sql_err(c, rc, what);
	return 0;
}

/* Rows written per transaction by dcr_catalog_add_version. */
#define ADD_BATCH 8192

/* Where dcr_catalog_add_version is in @m's rows. */
struct add_pos {
	uint32_t pack;    /* next pack row */
	uint32_t file;    /* next file row */
	uint32_t cfile;   /* file of the next chunk row */
	uint64_t chunk;   /* next chunk row of cfile */
};

/*
 * Insert up to ADD_BATCH of @m's pack, file and chunk rows from @pos on,
 * advancing it; *@done set when all are in. Caller holds the lock and a
 * transaction.
 */
static int add_batch(struct dcr_catalog *c, const struct dcr_manifest *m,
		     struct add_pos *pos, bool *done)
{
	sqlite3_stmt *st = NULL;
	int64_t v = (int64_t)m->version;
	size_t left = ADD_BATCH;
	int ret = 0;

	*done = false;
	if (pos->pack < m->npacks) {
		ret = prepare(c, "INSERT INTO packs(version, idx, hash) "
				 "VALUES (?1,?2,?3)", &st);
		if (ret)
			return ret;
		for (; pos->pack < m->npacks && left && !ret; left--) {
			uint32_t i = pos->pack++;
			sqlite3_bind_int64(st, 1, v);
			sqlite3_bind_int64(st, 2, i);
			sqlite3_bind_blob(st, 3, m->packs[i], DCR_HASH_LEN,
					  SQLITE_STATIC);
			ret = step_done(c, st, "insert pack");
		}
		sqlite3_finalize(st);
		if (ret)
			return ret;
	}
	if (left && pos->file < m->nfiles) {
		ret = prepare(c, "INSERT INTO files(version, idx, path, type, "
				 "mode, size, mtime_ns, sha256, base, nchunks) "
				 "VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)", &st);
		if (ret)
			return ret;
		for (; pos->file < m->nfiles && left && !ret; left--) {
			uint32_t i = pos->file++;
			const struct dcr_file *f = &m->files[i];
			sqlite3_bind_int64(st, 1, v);
			sqlite3_bind_int64(st, 2, i);
			sqlite3_bind_text(st, 3, f->path, -1, SQLITE_STATIC);
			sqlite3_bind_int(st, 4, f->type);
			sqlite3_bind_int64(st, 5, f->mode);
			sqlite3_bind_int64(st, 6, (int64_t)f->size);
			sqlite3_bind_int64(st, 7, f->mtime_ns);
			sqlite3_bind_blob(st, 8, f->sha256, DCR_HASH_LEN,
					  SQLITE_STATIC);
			sqlite3_bind_int64(st, 9, f->base);
			sqlite3_bind_int64(st, 10, (int64_t)f->nchunks);
			ret = step_done(c, st, "insert file");
		}
		sqlite3_finalize(st);
		if (ret)
			return ret;
	}
	if (left) {
		ret = prepare(c, "INSERT INTO chunks(version, file, idx, kind, "
				 "pack, off, len, hash, fhash, xxh) "
				 "VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)", &st);
		if (ret)
			return ret;
		while (pos->cfile < m->nfiles && left && !ret) {
			const struct dcr_file *f = &m->files[pos->cfile];
			const struct dcr_chunk_ref *ref;
			int same;

			if (f->type != DCR_FT_REG || pos->chunk >= f->nchunks) {
				pos->cfile++;
				pos->chunk = 0;
				continue;
			}
			ref = &f->chunks[pos->chunk];
			same = ref->kind == DCR_CK_SAME;
			sqlite3_bind_int64(st, 1, v);
			sqlite3_bind_int64(st, 2, pos->cfile);
			sqlite3_bind_int64(st, 3, (int64_t)pos->chunk);
			sqlite3_bind_int(st, 4, ref->kind);
			sqlite3_bind_int64(st, 5, same ? 0 : ref->pack);
			sqlite3_bind_int64(st, 6, same ? 0 : (int64_t)ref->off);
			sqlite3_bind_int64(st, 7, same ? 0 : ref->len);
			sqlite3_bind_blob(st, 8, ref->hash, DCR_HASH_LEN,
					  SQLITE_STATIC);
			if (m->format >= 2 && !same)
				sqlite3_bind_blob(st, 9, ref->fhash,
						  DCR_HASH_LEN, SQLITE_STATIC);
			else
				sqlite3_bind_null(st, 9);
			if (m->format >= 2)
				sqlite3_bind_blob(st, 10, ref->xxh, DCR_XXH_LEN,
						  SQLITE_STATIC);
			else
				sqlite3_bind_null(st, 10);
			ret = step_done(c, st, "insert chunk");
			pos->chunk++;
			left--;
		}
		sqlite3_finalize(st);
		if (ret)
			return ret;
	}
	*done = pos->pack >= m->npacks && pos->file >= m->nfiles &&
		pos->cfile >= m->nfiles;
	return 0;
}

struct add_ctx {
	const struct dcr_manifest *m;
	const struct dcr_catalog_ident *id; /* NULL: unknown */
	struct add_pos pos;  /* rows committed */
	struct add_pos next; /* after the batch in flight */
	bool done;
};

/* Bind @id to parameters @first.. @first+3 (mhash, obj_size, obj_mtime,
 * ehash). */
static void bind_ident(sqlite3_stmt *st, int first,
		       const struct dcr_catalog_ident *id)
{
	if (id && id->has_mhash)
		sqlite3_bind_blob(st, first, id->mhash, DCR_HASH_LEN,
				  SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(st, first);
	if (id && id->obj_size)
		sqlite3_bind_int64(st, first + 1, (int64_t)id->obj_size);
	else
		sqlite3_bind_null(st, first + 1);
	if (id && id->obj_mtime_ns)
		sqlite3_bind_int64(st, first + 2, id->obj_mtime_ns);
	else
		sqlite3_bind_null(st, first + 2);
	if (id && id->has_ehash)
		sqlite3_bind_blob(st, first + 3, id->ehash, DCR_HASH_LEN,
				  SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(st, first + 3);
}

/* -EEXIST if the version is indexed; else drop the rows of an earlier
 * attempt that did not finish (a crash, an error) and start afresh. */
static int add_begin(struct dcr_catalog *c, void *arg)
{
	struct add_ctx *a = arg;
	static const char *const del[] = {
		"DELETE FROM chunks WHERE version = ?1",
		"DELETE FROM files WHERE version = ?1",
		"DELETE FROM packs WHERE version = ?1",
		"DELETE FROM vmeta WHERE version = ?1",
	};
	sqlite3_stmt *st;
	int rc, ret;

	ret = prepare(c, "SELECT 1 FROM versions WHERE version = ?1", &st);
	if (ret)
		return ret;
	sqlite3_bind_int64(st, 1, (int64_t)a->m->version);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc == SQLITE_ROW)
		return -EEXIST;
	if (rc != SQLITE_DONE)
		return sql_err(c, rc, "look up version");
	for (size_t i = 0; i < DCR_ARRAY_SIZE(del) && !ret; i++) {
		ret = prepare(c, del[i], &st);
		if (ret)
			return ret;
		sqlite3_bind_int64(st, 1, (int64_t)a->m->version);
		ret = step_done(c, st, "drop partial version");
		sqlite3_finalize(st);
	}
	return ret;
}

/* The batch after @a->pos: from there again if it is run again. */
static int add_step(struct dcr_catalog *c, void *arg)
{
	struct add_ctx *a = arg;

	a->next = a->pos;
	return add_batch(c, a->m, &a->next, &a->done);
}

/* The metadata rows of @m (a few, small: in the versions row's
 * transaction). */
static int add_meta(struct dcr_catalog *c, const struct dcr_manifest *m)
{
	sqlite3_stmt *st;
	int ret = 0;

	for (uint32_t i = 0; i < m->nmeta && !ret; i++) {
		ret = prepare(c, "INSERT INTO vmeta(version, key, value) "
				 "VALUES (?1, ?2, ?3)", &st);
		if (ret)
			return ret;
		sqlite3_bind_int64(st, 1, (int64_t)m->version);
		sqlite3_bind_text(st, 2, m->meta[i].key, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 3, m->meta[i].value, -1, SQLITE_STATIC);
		ret = step_done(c, st, "insert metadata");
		sqlite3_finalize(st);
	}
	return ret;
}

/* The versions row, last: it is what makes the version visible. */
static int add_finish(struct dcr_catalog *c, void *arg)
{
	static const uint8_t zero[DCR_HASH_LEN];
	const struct dcr_manifest *m = ((struct add_ctx *)arg)->m;
	struct dcr_buf sb;
	sqlite3_stmt *st;
	int ret;

	if ((ret = add_meta(c, m)))
		return ret;
	dcr_buf_init(&sb, 4096);
	if (m->has_sig && (ret = dcr_manifest_put_sig(&m->sig, &sb))) {
		dcr_buf_free(&sb);
		return ret;
	}
	ret = prepare(c, "INSERT INTO versions(version, parent, ctime_ns, "
			 "chunk_size, nfiles, npacks, format, mhash, "
			 "obj_size, obj_mtime, ehash, mcheck, sig, cparent) "
			 "VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,"
			 "?14)",
		      &st);
	if (ret) {
		dcr_buf_free(&sb);
		return ret;
	}
	/* a check of zero is unknown (a manifest not decoded from bytes) */
	bool has_check = memcmp(m->check, zero, DCR_HASH_LEN) != 0;
	if (has_check)
		sqlite3_bind_blob(st, 12, m->check, DCR_HASH_LEN, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(st, 12);
	if (m->has_sig)
		sqlite3_bind_blob(st, 13, sb.data, (int)sb.len, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(st, 13);
	dcr_buf_free(&sb);
	/* unknown (a manifest not decoded from bytes): its own parent */
	sqlite3_bind_int64(st, 14, (int64_t)(has_check ? m->cparent : m->parent));
	sqlite3_bind_int64(st, 1, (int64_t)m->version);
	sqlite3_bind_int64(st, 2, (int64_t)m->parent);
	sqlite3_bind_int64(st, 3, m->ctime_ns);
	sqlite3_bind_int64(st, 4, m->chunk_size);
	sqlite3_bind_int64(st, 5, m->nfiles);
	sqlite3_bind_int64(st, 6, m->npacks);
	sqlite3_bind_int64(st, 7, m->format ? m->format : DCR_MANIFEST_FORMAT);
	bind_ident(st, 8, ((struct add_ctx *)arg)->id);
	ret = step_done(c, st, "insert version");
	sqlite3_finalize(st);
	return ret;
}

/* Best effort: remove the rows of a failed attempt. */
static int add_abort(struct dcr_catalog *c, void *arg)
{
	struct add_ctx *a = arg;
	sqlite3_stmt *st;
	int rc;

	/* Only if the version did not become visible meanwhile. */
	if (prepare(c, "SELECT 1 FROM versions WHERE version = ?1", &st))
		return -EIO;
	sqlite3_bind_int64(st, 1, (int64_t)a->m->version);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return 0;
	return add_begin(c, arg);
}

/*
 * Index @m in batches of ADD_BATCH rows, one transaction each, with the
 * mutex released between them, so that the point lookups of the read
 * path wait for one batch (milliseconds), not for the whole version
 * (seconds for millions of chunk rows). The version becomes visible
 * only with its versions row, written last in its own small transaction;
 * every reader looks a version up there first (dcr_catalog_versions,
 * load_files) and asks for chunks only of versions it found, so nobody
 * sees a half-indexed version. After a crash in the middle, the rows
 * without a versions row are dropped when the version is indexed again.
 */
int dcr_catalog_add_version(struct dcr_catalog *c,
			    const struct dcr_manifest *m)
{
	return dcr_catalog_add_version_ident(c, m, NULL);
}

int dcr_catalog_add_version_ident(struct dcr_catalog *c,
				  const struct dcr_manifest *m,
				  const struct dcr_catalog_ident *id)
{
	struct add_ctx a = { .m = m, .id = id };
	int ret;

	ret = in_txn(c, add_begin, &a);
	if (ret)
		return ret; /* -EEXIST: indexed already */
	while (!ret && !a.done) {
		cat_yield(c);
		ret = in_txn(c, add_step, &a);
		if (!ret)
			a.pos = a.next;
		if (ret == -EEXIST) {
			/* add_begin cleared the version's rows: a duplicate
			 * is a bug or a second writer, not "indexed". */
			dcr_err("catalog %s: version %llu: duplicate rows",
				c->path, (unsigned long long)m->version);
			ret = DCR_ERR(-EIO);
		}
	}
	if (!ret)
		ret = in_txn(c, add_finish, &a);
	if (ret && ret != -EEXIST)
		in_txn(c, add_abort, &a);
	return ret;
}

/* Delete every row of version @v, the versions row first. Caller holds
 * the lock and a transaction. */
static int drop_rows(struct dcr_catalog *c, int64_t v)
{
	static const char *const del[] = {
		"DELETE FROM versions WHERE version = ?1",
		"DELETE FROM chunks WHERE version = ?1",
		"DELETE FROM files WHERE version = ?1",
		"DELETE FROM packs WHERE version = ?1",
		"DELETE FROM vmeta WHERE version = ?1",
	};
	sqlite3_stmt *st;
	int ret = 0;

	for (size_t i = 0; i < DCR_ARRAY_SIZE(del) && !ret; i++) {
		ret = prepare(c, del[i], &st);
		if (ret)
			return ret;
		sqlite3_bind_int64(st, 1, v);
		ret = step_done(c, st, "drop version rows");
		sqlite3_finalize(st);
	}
	return ret;
}

/* The whole replacement in the caller's one transaction. */
static int replace_txn(struct dcr_catalog *c, void *arg)
{
	struct add_ctx *a = arg;
	int ret = drop_rows(c, (int64_t)a->m->version);

	memset(&a->pos, 0, sizeof(a->pos)); /* from the start if run again */
	a->done = false;
	while (!ret && !a->done)
		ret = add_batch(c, a->m, &a->pos, &a->done);
	if (!ret)
		ret = add_finish(c, a);
	if (ret == -EEXIST) {
		dcr_err("catalog %s: version %llu: duplicate rows", c->path,
			(unsigned long long)a->m->version);
		ret = DCR_ERR(-EIO);
	}
	return ret;
}

int dcr_catalog_replace_version(struct dcr_catalog *c,
				const struct dcr_manifest *m,
				const struct dcr_catalog_ident *id)
{
	struct add_ctx a = { .m = m, .id = id };

	return in_txn(c, replace_txn, &a);
}

struct ident_args {
	uint64_t v;
	const struct dcr_catalog_ident *id;
};

static int set_ident_txn(struct dcr_catalog *c, void *arg)
{
	const struct ident_args *a = arg;
	sqlite3_stmt *st;
	int ret;

	ret = prepare(c, "UPDATE versions SET mhash = ?1, obj_size = ?2, "
			 "obj_mtime = ?3, ehash = ?4 WHERE version = ?5", &st);
	if (ret)
		return ret;
	bind_ident(st, 1, a->id);
	sqlite3_bind_int64(st, 5, (int64_t)a->v);
	ret = step_done(c, st, "record version identity");
	sqlite3_finalize(st);
	if (!ret && sqlite3_changes(c->db) == 0)
		ret = -ENOENT;
	return ret;
}

int dcr_catalog_set_ident(struct dcr_catalog *c, uint64_t v,
			  const struct dcr_catalog_ident *id)
{
	struct ident_args a = { v, id };

	if (v > INT64_MAX)
		return -ENOENT;
	return in_txn(c, set_ident_txn, &a);
}

static int remove_txn(struct dcr_catalog *c, void *arg)
{
	const uint64_t *v = arg;
	sqlite3_stmt *st;
	int ret;

	ret = prepare(c, "DELETE FROM versions WHERE version = ?1", &st);
	if (ret)
		return ret;
	sqlite3_bind_int64(st, 1, (int64_t)*v);
	ret = step_done(c, st, "drop version");
	sqlite3_finalize(st);
	if (!ret && sqlite3_changes(c->db) == 0)
		ret = -ENOENT;
	return ret;
}

static int remove_rows_txn(struct dcr_catalog *c, void *arg)
{
	return drop_rows(c, (int64_t)*(const uint64_t *)arg);
}

int dcr_catalog_remove_version(struct dcr_catalog *c, uint64_t v)
{
	int ret;

	if (v > INT64_MAX)
		return -ENOENT;
	ret = in_txn(c, remove_txn, &v);
	if (ret)
		return ret;
	/* Invisible now; the rest may go in a second transaction (rows
	 * left by a crash here are dropped when @v is indexed again). */
	cat_yield(c);
	return in_txn(c, remove_rows_txn, &v);
}

struct set_tags_args {
	const char *const *names;
	const uint64_t *versions;
	size_t n;
};

static int set_tags_txn(struct dcr_catalog *c, void *arg)
{
	const struct set_tags_args *a = arg;
	sqlite3_stmt *st;
	int ret = exec_locked(c, "DELETE FROM tags");

	if (ret)
		return ret;
	ret = prepare(c, "INSERT OR REPLACE INTO tags(name, version) "
			 "VALUES (?1, ?2)", &st);
	if (ret)
		return ret;
	for (size_t i = 0; i < a->n && !ret; i++) {
		sqlite3_bind_text(st, 1, a->names[i], -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, (int64_t)a->versions[i]);
		ret = step_done(c, st, "insert tag");
	}
	sqlite3_finalize(st);
	return ret;
}

int dcr_catalog_set_tags(struct dcr_catalog *c, const char *const *names,
			 const uint64_t *versions, size_t n)
{
	struct set_tags_args a = { names, versions, n };

	return in_txn(c, set_tags_txn, &a);
}

struct check_args {
	uint64_t v;
	const uint8_t *check;
};

static int set_check_txn(struct dcr_catalog *c, void *arg)
{
	const struct check_args *a = arg;
	sqlite3_stmt *st;
	int ret;

	ret = prepare(c, "UPDATE versions SET mcheck = ?1 WHERE version = ?2",
		      &st);
	if (ret)
		return ret;
	sqlite3_bind_blob(st, 1, a->check, DCR_HASH_LEN, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 2, (int64_t)a->v);
	ret = step_done(c, st, "record a manifest check");
	sqlite3_finalize(st);
	if (!ret && sqlite3_changes(c->db) == 0)
		ret = -ENOENT;
	return ret;
}

int dcr_catalog_set_check(struct dcr_catalog *c, uint64_t v,
			  const uint8_t check[DCR_HASH_LEN])
{
	struct check_args a = { v, check };

	if (v > INT64_MAX)
		return -ENOENT;
	return in_txn(c, set_check_txn, &a);
}
