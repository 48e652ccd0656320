/* SPDX-License-Identifier: MIT */
/*
 * catalog.c - the SQLite catalog (see catalog.h for the schema).
 *
 * One connection guarded by one mutex. The read path issues only short
 * point lookups (one B-tree descent each, microseconds) next to work that
 * costs milliseconds (fetching and decoding frames, hashing a chunk), so
 * the mutex is not a bottleneck; a single connection keeps the prepared
 * statements, the WAL and its checkpoints in one place, and avoids
 * SQLITE_BUSY between our own threads. The connection is opened with
 * SQLITE_OPEN_NOMUTEX because our mutex already serialises it.
 *
 * SQLite result codes are translated to -errno here, once, with
 * sqlite3_errmsg logged once.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "catalog.h"
#include "common.h"

#define DCR_CATALOG_SCHEMA "1"
#define DCR_CATALOG_BUSY_MS 10000

enum dcr_stmt_id {
	ST_GET_CHUNK,
	ST_CACHE_ADD,
	ST_CACHE_TOUCH,
	ST_CACHE_GET_SIZE,
	ST_CACHE_DEL,
	ST_CACHE_OLDEST,
	ST_COUNT,
};

static const char *const stmt_sql[ST_COUNT] = {
	[ST_GET_CHUNK] =
		"SELECT c.kind, c.off, c.len, c.hash, p.hash FROM chunks c "
		"LEFT JOIN packs p ON p.version = c.version AND p.idx = c.pack "
		"WHERE c.version = ?1 AND c.file = ?2 AND c.idx = ?3",
	[ST_CACHE_ADD] =
		"INSERT INTO cache(hash, size, atime) VALUES (?1, ?2, ?3) "
		"ON CONFLICT(hash) DO UPDATE SET atime = excluded.atime",
	[ST_CACHE_TOUCH] = "UPDATE cache SET atime = ?2 WHERE hash = ?1",
	[ST_CACHE_GET_SIZE] = "SELECT size FROM cache WHERE hash = ?1",
	[ST_CACHE_DEL] = "DELETE FROM cache WHERE hash = ?1",
	[ST_CACHE_OLDEST] =
		"SELECT hash, size FROM cache ORDER BY atime, hash LIMIT ?1",
};

struct dcr_catalog {
	pthread_mutex_t lock;
	sqlite3 *db;
	char *path;
	sqlite3_stmt *stmt[ST_COUNT];
};

static const char schema_sql[] =
	"CREATE TABLE IF NOT EXISTS meta("
	" key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;"
	"CREATE TABLE IF NOT EXISTS versions("
	" version INTEGER PRIMARY KEY, parent INTEGER NOT NULL,"
	" ctime_ns INTEGER NOT NULL, chunk_size INTEGER NOT NULL,"
	" nfiles INTEGER NOT NULL, npacks INTEGER NOT NULL);"
	"CREATE TABLE IF NOT EXISTS packs("
	" version INTEGER NOT NULL, idx INTEGER NOT NULL, hash BLOB NOT NULL,"
	" PRIMARY KEY(version, idx)) WITHOUT ROWID;"
	"CREATE TABLE IF NOT EXISTS files("
	" version INTEGER NOT NULL, idx INTEGER NOT NULL, path TEXT NOT NULL,"
	" type INTEGER NOT NULL, mode INTEGER NOT NULL, size INTEGER NOT NULL,"
	" mtime_ns INTEGER NOT NULL, sha256 BLOB NOT NULL,"
	" base INTEGER NOT NULL, nchunks INTEGER NOT NULL,"
	" PRIMARY KEY(version, idx)) WITHOUT ROWID;"
	"CREATE TABLE IF NOT EXISTS chunks("
	" version INTEGER NOT NULL, file INTEGER NOT NULL, idx INTEGER NOT NULL,"
	" kind INTEGER NOT NULL, pack INTEGER NOT NULL, off INTEGER NOT NULL,"
	" len INTEGER NOT NULL, hash BLOB NOT NULL,"
	" PRIMARY KEY(version, file, idx)) WITHOUT ROWID;"
	"CREATE TABLE IF NOT EXISTS tags("
	" name TEXT PRIMARY KEY, version INTEGER NOT NULL) WITHOUT ROWID;"
	"CREATE TABLE IF NOT EXISTS cache("
	" hash BLOB PRIMARY KEY, size INTEGER NOT NULL,"
	" atime INTEGER NOT NULL) WITHOUT ROWID;"
	"CREATE INDEX IF NOT EXISTS cache_atime ON cache(atime);";

/* Translate a SQLite result code to -errno, logging the message once. */
static int sql_err(struct dcr_catalog *c, int rc, const char *what)
{
	int e;

	switch (rc & 0xff) {
	case SQLITE_NOMEM:
		e = -ENOMEM;
		break;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		e = -EBUSY;
		break;
	case SQLITE_FULL:
		e = -ENOSPC;
		break;
	case SQLITE_READONLY:
		e = -EROFS;
		break;
	case SQLITE_PERM:
	case SQLITE_AUTH:
		e = -EACCES;
		break;
	case SQLITE_CONSTRAINT:
		e = -EEXIST;
		break;
	default:
		e = -EIO;
		break;
	}
	if (e != -EEXIST)
		dcr_err("catalog %s: %s: %s", c->path, what,
			c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
	return DCR_ERR(e);
}

/* Execute one or more statements without results. Caller holds the lock. */
static int exec_locked(struct dcr_catalog *c, const char *sql)
{
	int rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);

	if (rc != SQLITE_OK)
		return sql_err(c, rc, sql);
	return 0;
}

/* Prepare a one-off statement. Caller holds the lock. */
static int prepare(struct dcr_catalog *c, const char *sql, sqlite3_stmt **st)
{
	int rc = sqlite3_prepare_v2(c->db, sql, -1, st, NULL);

	if (rc != SQLITE_OK)
		return sql_err(c, rc, "prepare");
	return 0;
}

/* A cached statement, reset and with bindings cleared. Caller holds lock. */
static int cached(struct dcr_catalog *c, enum dcr_stmt_id id,
		  sqlite3_stmt **st)
{
	if (!c->stmt[id]) {
		int rc = sqlite3_prepare_v3(c->db, stmt_sql[id], -1,
					    SQLITE_PREPARE_PERSISTENT,
					    &c->stmt[id], NULL);
		if (rc != SQLITE_OK)
			return sql_err(c, rc, "prepare");
	}
	*st = c->stmt[id];
	return 0;
}

static void release(sqlite3_stmt *st)
{
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
}

/* Check or record the store URL. Caller holds the lock. */
static int check_meta(struct dcr_catalog *c, const char *url)
{
	sqlite3_stmt *st;
	int rc, ret;

	ret = prepare(c, "SELECT value FROM meta WHERE key = 'url'", &st);
	if (ret)
		return ret;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		const char *have = (const char *)sqlite3_column_text(st, 0);
		if (!have || strcmp(have, url) != 0) {
			dcr_err("catalog %s belongs to store %s, not %s; "
				"use another cache directory",
				c->path, have ? have : "?", url);
			sqlite3_finalize(st);
			return DCR_ERR(-EEXIST);
		}
		sqlite3_finalize(st);
	} else if (rc == SQLITE_DONE) {
		sqlite3_finalize(st);
		ret = prepare(c, "INSERT INTO meta(key, value) VALUES "
				 "('url', ?1), ('schema', '" DCR_CATALOG_SCHEMA
				 "')", &st);
		if (ret)
			return ret;
		sqlite3_bind_text(st, 1, url, -1, SQLITE_STATIC);
		rc = sqlite3_step(st);
		sqlite3_finalize(st);
		if (rc != SQLITE_DONE)
			return sql_err(c, rc, "record store url");
	} else {
		ret = sql_err(c, rc, "read meta");
		sqlite3_finalize(st);
		return ret;
	}
	return 0;
}

int dcr_catalog_open(const char *path, const char *url,
		     struct dcr_catalog **out)
{
	struct dcr_catalog *c;
	int fd, rc, ret;

	*out = NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return DCR_ERR(-ENOMEM);
	c->path = strdup(path);
	if (!c->path) {
		ret = DCR_ERR(-ENOMEM);
		goto err_free;
	}
	/* Create the file ourselves so that it is 0600 whatever the umask;
	 * SQLite gives the -wal and -shm files the same mode. */
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		ret = -errno;
		dcr_err("catalog %s: %s", path, dcr_strerror(ret));
		goto err_free;
	}
	close(fd);

	rc = sqlite3_open_v2(path, &c->db,
			     SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		ret = sql_err(c, rc, "open");
		goto err_close_db;
	}
	sqlite3_extended_result_codes(c->db, 0);
	sqlite3_busy_timeout(c->db, DCR_CATALOG_BUSY_MS);
	ret = exec_locked(c, "PRAGMA journal_mode=WAL;"
			     "PRAGMA synchronous=NORMAL;"
			     "PRAGMA foreign_keys=OFF;");
	if (ret)
		goto err_close_db;
	ret = exec_locked(c, "BEGIN IMMEDIATE");
	if (ret)
		goto err_close_db;
	ret = exec_locked(c, schema_sql);
	if (!ret)
		ret = check_meta(c, url);
	if (ret) {
		exec_locked(c, "ROLLBACK");
		goto err_close_db;
	}
	ret = exec_locked(c, "COMMIT");
	if (ret)
		goto err_close_db;
	pthread_mutex_init(&c->lock, NULL);
	*out = c;
	return 0;

err_close_db:
	sqlite3_close(c->db);
err_free:
	free(c->path);
	free(c);
	return ret;
}

void dcr_catalog_close(struct dcr_catalog *c)
{
	if (!c)
		return;
	for (int i = 0; i < ST_COUNT; i++)
		sqlite3_finalize(c->stmt[i]);
	sqlite3_close(c->db);
	pthread_mutex_destroy(&c->lock);
	free(c->path);
	free(c);
}

/* Step a write statement to completion and reset it. */
static int step_done(struct dcr_catalog *c, sqlite3_stmt *st, const char *what)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	if (rc != SQLITE_DONE)
		return sql_err(c, rc, what);
	return 0;
}

/* Insert all rows of @m. Caller holds the lock and a transaction. */
static int add_version_rows(struct dcr_catalog *c, const struct dcr_manifest *m)
{
	sqlite3_stmt *st = NULL;
	int64_t v = (int64_t)m->version;
	int ret;

	ret = prepare(c, "INSERT INTO versions(version, parent, ctime_ns, "
			 "chunk_size, nfiles, npacks) VALUES (?1,?2,?3,?4,?5,?6)",
		      &st);
	if (ret)
		return ret;
	sqlite3_bind_int64(st, 1, v);
	sqlite3_bind_int64(st, 2, (int64_t)m->parent);
	sqlite3_bind_int64(st, 3, m->ctime_ns);
	sqlite3_bind_int64(st, 4, m->chunk_size);
	sqlite3_bind_int64(st, 5, m->nfiles);
	sqlite3_bind_int64(st, 6, m->npacks);
	ret = step_done(c, st, "insert version");
	sqlite3_finalize(st);
	if (ret)
		return ret;

	ret = prepare(c, "INSERT INTO packs(version, idx, hash) "
			 "VALUES (?1,?2,?3)", &st);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < m->npacks && !ret; i++) {
		sqlite3_bind_int64(st, 1, v);
		sqlite3_bind_int64(st, 2, i);
		sqlite3_bind_blob(st, 3, m->packs[i], DCR_HASH_LEN,
				  SQLITE_STATIC);
		ret = step_done(c, st, "insert pack");
	}
	sqlite3_finalize(st);
	if (ret)
		return ret;

	ret = prepare(c, "INSERT INTO files(version, idx, path, type, mode, "
			 "size, mtime_ns, sha256, base, nchunks) "
			 "VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)", &st);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < m->nfiles && !ret; i++) {
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

	ret = prepare(c, "INSERT INTO chunks(version, file, idx, kind, pack, "
			 "off, len, hash) VALUES (?1,?2,?3,?4,?5,?6,?7,?8)",
		      &st);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < m->nfiles && !ret; i++) {
		const struct dcr_file *f = &m->files[i];
		if (f->type != DCR_FT_REG)
			continue;
		for (uint64_t k = 0; k < f->nchunks && !ret; k++) {
			const struct dcr_chunk_ref *ref = &f->chunks[k];
			int same = ref->kind == DCR_CK_SAME;
			sqlite3_bind_int64(st, 1, v);
			sqlite3_bind_int64(st, 2, i);
			sqlite3_bind_int64(st, 3, (int64_t)k);
			sqlite3_bind_int(st, 4, ref->kind);
			sqlite3_bind_int64(st, 5, same ? 0 : ref->pack);
			sqlite3_bind_int64(st, 6, same ? 0 : (int64_t)ref->off);
			sqlite3_bind_int64(st, 7, same ? 0 : ref->len);
			sqlite3_bind_blob(st, 8, ref->hash, DCR_HASH_LEN,
					  SQLITE_STATIC);
			ret = step_done(c, st, "insert chunk");
		}
	}
	sqlite3_finalize(st);
	return ret;
}

int dcr_catalog_add_version(struct dcr_catalog *c,
			    const struct dcr_manifest *m)
{
	int ret;

	pthread_mutex_lock(&c->lock);
	ret = exec_locked(c, "BEGIN IMMEDIATE");
	if (ret)
		goto out_unlock;
	ret = add_version_rows(c, m);
	if (ret) {
		exec_locked(c, "ROLLBACK");
		goto out_unlock;
	}
	ret = exec_locked(c, "COMMIT");
	if (ret)
		exec_locked(c, "ROLLBACK");
out_unlock:
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int dcr_catalog_versions(struct dcr_catalog *c,
			 struct dcr_catalog_version **vs, size_t *n)
{
	struct dcr_catalog_version *arr = NULL, *tmp;
	size_t cnt = 0, cap = 0;
	sqlite3_stmt *st;
	int rc, ret;

	*vs = NULL;
	*n = 0;
	pthread_mutex_lock(&c->lock);
	ret = prepare(c, "SELECT version, parent, ctime_ns, chunk_size, nfiles "
			 "FROM versions ORDER BY version", &st);
	if (ret)
		goto out_unlock;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (cnt == cap) {
			cap = cap ? cap * 2 : 16;
			tmp = realloc(arr, cap * sizeof(*arr));
			if (!tmp) {
				ret = DCR_ERR(-ENOMEM);
				goto out_finalize;
			}
			arr = tmp;
		}
		arr[cnt].version = (uint64_t)sqlite3_column_int64(st, 0);
		arr[cnt].parent = (uint64_t)sqlite3_column_int64(st, 1);
		arr[cnt].ctime_ns = sqlite3_column_int64(st, 2);
		arr[cnt].chunk_size = (uint32_t)sqlite3_column_int64(st, 3);
		arr[cnt].nfiles = (uint32_t)sqlite3_column_int64(st, 4);
		cnt++;
	}
	if (rc != SQLITE_DONE)
		ret = sql_err(c, rc, "list versions");
out_finalize:
	sqlite3_finalize(st);
out_unlock:
	pthread_mutex_unlock(&c->lock);
	if (ret) {
		free(arr);
		return ret;
	}
	*vs = arr;
	*n = cnt;
	return 0;
}

/* Load the version row and file rows into @m. Caller holds the lock. */
static int load_files_locked(struct dcr_catalog *c, uint64_t v,
			     struct dcr_manifest *m)
{
	sqlite3_stmt *st;
	uint32_t i = 0, nfiles;
	int rc, ret;

	ret = prepare(c, "SELECT parent, ctime_ns, chunk_size, nfiles "
			 "FROM versions WHERE version = ?1", &st);
	if (ret)
		return ret;
	sqlite3_bind_int64(st, 1, (int64_t)v);
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		ret = rc == SQLITE_DONE ? -ENOENT : sql_err(c, rc, "read version");
		sqlite3_finalize(st);
		return ret;
	}
	m->version = v;
	m->parent = (uint64_t)sqlite3_column_int64(st, 0);
	m->ctime_ns = sqlite3_column_int64(st, 1);
	m->chunk_size = (uint32_t)sqlite3_column_int64(st, 2);
	nfiles = (uint32_t)sqlite3_column_int64(st, 3);
	sqlite3_finalize(st);

	/* nfiles only once files exists: dcr_manifest_free walks it. */
	m->files = calloc(nfiles ? nfiles : 1, sizeof(*m->files));
	if (!m->files)
		return DCR_ERR(-ENOMEM);
	m->nfiles = nfiles;
	ret = prepare(c, "SELECT idx, path, type, mode, size, mtime_ns, sha256, "
			 "base, nchunks FROM files WHERE version = ?1 "
			 "ORDER BY idx", &st);
	if (ret)
		return ret;
	sqlite3_bind_int64(st, 1, (int64_t)v);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct dcr_file *f;
		const void *sha;
		const char *path;

		if (i >= m->nfiles ||
		    (uint64_t)sqlite3_column_int64(st, 0) != i) {
			dcr_err("catalog %s: version %llu: inconsistent file rows",
				c->path, (unsigned long long)v);
			ret = DCR_ERR(-EIO);
			goto out_finalize;
		}
		f = &m->files[i];
		path = (const char *)sqlite3_column_text(st, 1);
		f->path = strdup(path ? path : "");
		if (!f->path) {
			ret = DCR_ERR(-ENOMEM);
			goto out_finalize;
		}
		f->type = (uint8_t)sqlite3_column_int(st, 2);
		f->mode = (uint32_t)sqlite3_column_int64(st, 3);
		f->size = (uint64_t)sqlite3_column_int64(st, 4);
		f->mtime_ns = sqlite3_column_int64(st, 5);
		sha = sqlite3_column_blob(st, 6);
		if (sha && sqlite3_column_bytes(st, 6) == DCR_HASH_LEN)
			memcpy(f->sha256, sha, DCR_HASH_LEN);
		f->base = (uint32_t)sqlite3_column_int64(st, 7);
		f->nchunks = (uint64_t)sqlite3_column_int64(st, 8);
		i++;
	}
	if (rc != SQLITE_DONE)
		ret = sql_err(c, rc, "read files");
	else if (i != m->nfiles) {
		dcr_err("catalog %s: version %llu: %u of %u file rows",
			c->path, (unsigned long long)v, i, m->nfiles);
		ret = DCR_ERR(-EIO);
	}
out_finalize:
	sqlite3_finalize(st);
	return ret;
}

int dcr_catalog_load_files(struct dcr_catalog *c, uint64_t v,
			   struct dcr_manifest *m)
{
	int ret;

	memset(m, 0, sizeof(*m));
	pthread_mutex_lock(&c->lock);
	ret = load_files_locked(c, v, m);
	pthread_mutex_unlock(&c->lock);
	if (ret) {
		dcr_manifest_free(m);
		memset(m, 0, sizeof(*m));
	}
	return ret;
}

/* Load packs and chunk rows into @m (files loaded). Caller holds lock. */
static int load_chunks_locked(struct dcr_catalog *c, struct dcr_manifest *m)
{
	sqlite3_stmt *st;
	uint32_t np = 0;
	int rc, ret;

	m->packs = calloc(m->npacks ? m->npacks : 1, sizeof(*m->packs));
	if (!m->packs)
		return DCR_ERR(-ENOMEM);
	ret = prepare(c, "SELECT hash FROM packs WHERE version = ?1 "
			 "ORDER BY idx", &st);
	if (ret)
		return ret;
	sqlite3_bind_int64(st, 1, (int64_t)m->version);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW && np < m->npacks) {
		const void *h = sqlite3_column_blob(st, 0);
		if (h && sqlite3_column_bytes(st, 0) == DCR_HASH_LEN)
			memcpy(m->packs[np], h, DCR_HASH_LEN);
		np++;
	}
	sqlite3_finalize(st);
	if ((rc != SQLITE_DONE && rc != SQLITE_ROW) || np != m->npacks) {
		dcr_err("catalog %s: version %llu: inconsistent pack rows",
			c->path, (unsigned long long)m->version);
		return DCR_ERR(-EIO);
	}

	for (uint32_t i = 0; i < m->nfiles; i++) {
		struct dcr_file *f = &m->files[i];
		if (f->type != DCR_FT_REG || !f->nchunks)
			continue;
		if (f->nchunks > SIZE_MAX / sizeof(*f->chunks))
			return DCR_ERR(-EIO);
		f->chunks = calloc(f->nchunks, sizeof(*f->chunks));
		if (!f->chunks)
			return DCR_ERR(-ENOMEM);
	}
	ret = prepare(c, "SELECT file, idx, kind, pack, off, len, hash "
			 "FROM chunks WHERE version = ?1", &st);
	if (ret)
		return ret;
	sqlite3_bind_int64(st, 1, (int64_t)m->version);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		uint64_t fi = (uint64_t)sqlite3_column_int64(st, 0);
		uint64_t k = (uint64_t)sqlite3_column_int64(st, 1);
		const void *h = sqlite3_column_blob(st, 6);
		struct dcr_chunk_ref *ref;

		if (fi >= m->nfiles || !m->files[fi].chunks ||
		    k >= m->files[fi].nchunks || !h ||
		    sqlite3_column_bytes(st, 6) != DCR_HASH_LEN) {
			dcr_err("catalog %s: version %llu: bad chunk row",
				c->path, (unsigned long long)m->version);
			sqlite3_finalize(st);
			return DCR_ERR(-EIO);
		}
		ref = &m->files[fi].chunks[k];
		ref->kind = (uint8_t)sqlite3_column_int(st, 2);
		ref->pack = (uint32_t)sqlite3_column_int64(st, 3);
		ref->off = (uint64_t)sqlite3_column_int64(st, 4);
		ref->len = (uint32_t)sqlite3_column_int64(st, 5);
		memcpy(ref->hash, h, DCR_HASH_LEN);
	}
	ret = rc == SQLITE_DONE ? 0 : sql_err(c, rc, "read chunks");
	sqlite3_finalize(st);
	return ret;
}

int dcr_catalog_load_manifest(struct dcr_catalog *c, uint64_t v,
			      struct dcr_manifest *m)
{
	int ret;

	memset(m, 0, sizeof(*m));
	pthread_mutex_lock(&c->lock);
	ret = load_files_locked(c, v, m);
	if (!ret) {
		sqlite3_stmt *st;
		/* npacks is not part of the chunk-less load. */
		ret = prepare(c, "SELECT npacks FROM versions WHERE version = ?1",
			      &st);
		if (!ret) {
			sqlite3_bind_int64(st, 1, (int64_t)v);
			if (sqlite3_step(st) == SQLITE_ROW)
				m->npacks = (uint32_t)sqlite3_column_int64(st, 0);
			sqlite3_finalize(st);
			ret = load_chunks_locked(c, m);
		}
	}
	pthread_mutex_unlock(&c->lock);
	if (ret) {
		dcr_manifest_free(m);
		memset(m, 0, sizeof(*m));
	}
	return ret;
}

int dcr_catalog_get_chunk(struct dcr_catalog *c, uint64_t v, uint32_t file,
			  uint64_t idx, struct dcr_catalog_chunk *out)
{
	sqlite3_stmt *st;
	int rc, ret;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&c->lock);
	ret = cached(c, ST_GET_CHUNK, &st);
	if (ret)
		goto out_unlock;
	sqlite3_bind_int64(st, 1, (int64_t)v);
	sqlite3_bind_int64(st, 2, file);
	sqlite3_bind_int64(st, 3, (int64_t)idx);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		const void *h = sqlite3_column_blob(st, 3);
		const void *p = sqlite3_column_blob(st, 4);

		out->kind = (uint8_t)sqlite3_column_int(st, 0);
		out->off = (uint64_t)sqlite3_column_int64(st, 1);
		out->len = (uint32_t)sqlite3_column_int64(st, 2);
		if (!h || sqlite3_column_bytes(st, 3) != DCR_HASH_LEN ||
		    (out->kind != DCR_CK_SAME &&
		     (!p || sqlite3_column_bytes(st, 4) != DCR_HASH_LEN))) {
			dcr_err("catalog %s: version %llu file %u chunk %llu: "
				"bad row", c->path, (unsigned long long)v,
				file, (unsigned long long)idx);
			ret = DCR_ERR(-EIO);
		} else {
			memcpy(out->hash, h, DCR_HASH_LEN);
			if (out->kind != DCR_CK_SAME)
				memcpy(out->pack, p, DCR_HASH_LEN);
		}
	} else if (rc == SQLITE_DONE) {
		ret = -ENOENT;
	} else {
		ret = sql_err(c, rc, "read chunk");
	}
	release(st);
out_unlock:
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int dcr_catalog_set_tags(struct dcr_catalog *c, const char *const *names,
			 const uint64_t *versions, size_t n)
{
	sqlite3_stmt *st;
	int ret;

	pthread_mutex_lock(&c->lock);
	ret = exec_locked(c, "BEGIN IMMEDIATE");
	if (ret)
		goto out_unlock;
	ret = exec_locked(c, "DELETE FROM tags");
	if (ret)
		goto err_rollback;
	ret = prepare(c, "INSERT OR REPLACE INTO tags(name, version) "
			 "VALUES (?1, ?2)", &st);
	if (ret)
		goto err_rollback;
	for (size_t i = 0; i < n && !ret; i++) {
		sqlite3_bind_text(st, 1, names[i], -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, (int64_t)versions[i]);
		ret = step_done(c, st, "insert tag");
	}
	sqlite3_finalize(st);
	if (ret)
		goto err_rollback;
	ret = exec_locked(c, "COMMIT");
	if (ret)
		goto err_rollback;
	pthread_mutex_unlock(&c->lock);
	return 0;

err_rollback:
	exec_locked(c, "ROLLBACK");
out_unlock:
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int dcr_catalog_tags(struct dcr_catalog *c,
		     int (*fn)(const char *name, uint64_t version, void *arg),
		     void *arg)
{
	sqlite3_stmt *st;
	int rc, ret;

	pthread_mutex_lock(&c->lock);
	ret = prepare(c, "SELECT name, version FROM tags ORDER BY name", &st);
	if (ret)
		goto out_unlock;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *name = (const char *)sqlite3_column_text(st, 0);
		ret = fn(name ? name : "",
			 (uint64_t)sqlite3_column_int64(st, 1), arg);
		if (ret)
			break;
	}
	if (!ret && rc != SQLITE_DONE)
		ret = sql_err(c, rc, "read tags");
	sqlite3_finalize(st);
out_unlock:
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int dcr_catalog_cache_add(struct dcr_catalog *c,
			  const uint8_t hash[DCR_HASH_LEN], uint64_t size,
			  int64_t atime, int *added)
{
	sqlite3_stmt *st;
	int rc, ret, existed = 0;

	pthread_mutex_lock(&c->lock);
	ret = cached(c, ST_CACHE_GET_SIZE, &st);
	if (ret)
		goto out_unlock;
	sqlite3_bind_blob(st, 1, hash, DCR_HASH_LEN, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW)
		existed = 1;
	else if (rc != SQLITE_DONE)
		ret = sql_err(c, rc, "read cache");
	release(st);
	if (ret)
		goto out_unlock;
	ret = cached(c, ST_CACHE_ADD, &st);
	if (ret)
		goto out_unlock;
	sqlite3_bind_blob(st, 1, hash, DCR_HASH_LEN, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, (int64_t)size);
	sqlite3_bind_int64(st, 3, atime);
	ret = step_done(c, st, "record cached chunk");
	sqlite3_clear_bindings(st);
	if (!ret && added)
		*added = !existed;
out_unlock:
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int dcr_catalog_cache_touch(struct dcr_catalog *c,
			    const uint8_t hash[DCR_HASH_LEN], int64_t atime)
{
	sqlite3_stmt *st;
	int ret;

	pthread_mutex_lock(&c->lock);
	ret = cached(c, ST_CACHE_TOUCH, &st);
	if (!ret) {
		sqlite3_bind_blob(st, 1, hash, DCR_HASH_LEN, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, atime);
		ret = step_done(c, st, "touch cached chunk");
		sqlite3_clear_bindings(st);
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int dcr_catalog_cache_del(struct dcr_catalog *c,
			  const uint8_t hash[DCR_HASH_LEN], uint64_t *size)
{
	sqlite3_stmt *st;
	uint64_t sz = 0;
	int rc, ret;

	pthread_mutex_lock(&c->lock);
	ret = cached(c, ST_CACHE_GET_SIZE, &st);
	if (ret)
		goto out_unlock;
	sqlite3_bind_blob(st, 1, hash, DCR_HASH_LEN, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW)
		sz = (uint64_t)sqlite3_column_int64(st, 0);
	else if (rc != SQLITE_DONE)
		ret = sql_err(c, rc, "read cache");
	release(st);
	if (ret)
		goto out_unlock;
	ret = cached(c, ST_CACHE_DEL, &st);
	if (ret)
		goto out_unlock;
	sqlite3_bind_blob(st, 1, hash, DCR_HASH_LEN, SQLITE_STATIC);
	ret = step_done(c, st, "forget cached chunk");
	sqlite3_clear_bindings(st);
	if (!ret && size)
		*size = sz;
out_unlock:
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int dcr_catalog_cache_total(struct dcr_catalog *c, uint64_t *bytes)
{
	sqlite3_stmt *st;
	int rc, ret;

	*bytes = 0;
	pthread_mutex_lock(&c->lock);
	ret = prepare(c, "SELECT COALESCE(SUM(size), 0) FROM cache", &st);
	if (ret)
		goto out_unlock;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW)
		*bytes = (uint64_t)sqlite3_column_int64(st, 0);
	else
		ret = sql_err(c, rc, "sum cache");
	sqlite3_finalize(st);
out_unlock:
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int dcr_catalog_cache_oldest(struct dcr_catalog *c, size_t max,
			     uint8_t (*hashes)[DCR_HASH_LEN], uint64_t *sizes,
			     size_t *n)
{
	sqlite3_stmt *st;
	size_t cnt = 0;
	int rc = SQLITE_DONE, ret;

	*n = 0;
	pthread_mutex_lock(&c->lock);
	ret = cached(c, ST_CACHE_OLDEST, &st);
	if (ret)
		goto out_unlock;
	sqlite3_bind_int64(st, 1, (int64_t)max);
	while (cnt < max && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		const void *h = sqlite3_column_blob(st, 0);
		if (!h || sqlite3_column_bytes(st, 0) != DCR_HASH_LEN)
			continue;
		memcpy(hashes[cnt], h, DCR_HASH_LEN);
		sizes[cnt] = (uint64_t)sqlite3_column_int64(st, 1);
		cnt++;
	}
	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		ret = sql_err(c, rc, "list cache");
	release(st);
	*n = cnt;
out_unlock:
	pthread_mutex_unlock(&c->lock);
	return ret;
}
