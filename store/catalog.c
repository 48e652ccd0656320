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
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "catalog.h"
#include "chunk.h"
#include "common.h"

#define DCR_CATALOG_SCHEMA "3"
#define DCR_CATALOG_BUSY_MS 10000
/* A full file system is said at most this often (make_room). */
#define FULL_SAY_NS ((int64_t)600 * 1000000000)

enum dcr_stmt_id {
	ST_GET_CHUNK,
	ST_COUNT,
};

static const char *const stmt_sql[ST_COUNT] = {
	[ST_GET_CHUNK] =
		"SELECT c.idx, c.kind, c.off, c.len, c.hash, p.hash, c.fhash, "
		"c.xxh FROM chunks c "
		"LEFT JOIN packs p ON p.version = c.version AND p.idx = c.pack "
		"WHERE c.version = ?1 AND c.file = ?2 AND c.idx >= ?3 "
		"AND c.idx < ?4 ORDER BY c.idx",
};

struct dcr_catalog {
	pthread_mutex_t lock;
	sqlite3 *db;
	char *path;
	sqlite3_stmt *stmt[ST_COUNT];
	int last_rc;        /* SQLite code of the last failure (open only) */
	bool quiet_corrupt; /* while opening: CORRUPT/NOTADB are not logged */
	bool fresh;         /* created (or rebuilt) by this open */
	char why[160];      /* why open_db returned CAT_CORRUPT */
	atomic_int waiting; /* threads blocked in cat_lock */
	/* A full file system (see in_txn), under the lock: */
	int (*room)(void *arg, uint64_t want); /* the room hook, or NULL */
	void *room_arg;
	bool in_txn;        /* in_txn runs: it reports SQLITE_FULL */
	int64_t full_said;  /* when it was last said (monotonic ns), or 0 */
	bool lean_wal;      /* the WAL is kept small since one */
};

/* Take the catalog lock, announcing the wait (see cat_yield). */
static void cat_lock(struct dcr_catalog *c)
{
	atomic_fetch_add(&c->waiting, 1);
	pthread_mutex_lock(&c->lock);
	atomic_fetch_sub(&c->waiting, 1);
}

/*
 * Between two batches of a long write: let the threads that queued up
 * for the lock meanwhile (lookups of the read path) go first. A mutex is
 * not fair, so without this the writer would usually take it back at
 * once and the readers would wait for the whole write after all.
 * Bounded, so a steady stream of lookups cannot starve the writer.
 */
static void cat_yield(struct dcr_catalog *c)
{
	for (int i = 0; i < 1000 && atomic_load(&c->waiting) > 0; i++)
		sched_yield();
}

/* Why a catalog is set aside and rebuilt (see dcr_catalog_open). */
#define CAT_CORRUPT (-EUCLEAN)

static const char schema_sql[] =
	"CREATE TABLE IF NOT EXISTS meta("
	" key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;"
	"CREATE TABLE IF NOT EXISTS versions("
	" version INTEGER PRIMARY KEY, parent INTEGER NOT NULL,"
	" ctime_ns INTEGER NOT NULL, chunk_size INTEGER NOT NULL,"
	" nfiles INTEGER NOT NULL, npacks INTEGER NOT NULL,"
	" format INTEGER NOT NULL DEFAULT 1,"
	" mhash BLOB, obj_size INTEGER, obj_mtime INTEGER, ehash BLOB);"
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
	" len INTEGER NOT NULL, hash BLOB NOT NULL, fhash BLOB, xxh BLOB,"
	" PRIMARY KEY(version, file, idx)) WITHOUT ROWID;"
	"CREATE TABLE IF NOT EXISTS tags("
	" name TEXT PRIMARY KEY, version INTEGER NOT NULL) WITHOUT ROWID;";

static void mark_corrupt(struct dcr_catalog *c, const char *why);

/* Translate a SQLite result code to -errno, logging the message once. */
static int sql_err(struct dcr_catalog *c, int rc, const char *what)
{
	int e;

	c->last_rc = rc;
	if (c->quiet_corrupt && ((rc & 0xff) == SQLITE_CORRUPT ||
				 (rc & 0xff) == SQLITE_NOTADB))
		return CAT_CORRUPT; /* the caller sets the file aside */
	if (c->db && ((rc & 0xff) == SQLITE_CORRUPT ||
		      (rc & 0xff) == SQLITE_NOTADB))
		mark_corrupt(c, sqlite3_errstr(rc));
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
	if (e == -ENOSPC && c->in_txn)
		return e; /* in_txn makes room, and says so once */
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

/* Read meta @key into @buf (empty if absent). 1 if present, 0, -errno. */
static int meta_get(struct dcr_catalog *c, const char *key, char *buf,
		    size_t cap)
{
	sqlite3_stmt *st;
	int rc, ret;

	buf[0] = '\0';
	ret = prepare(c, "SELECT value FROM meta WHERE key = ?1", &st);
	if (ret)
		return ret;
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		const char *v = (const char *)sqlite3_column_text(st, 0);
		snprintf(buf, cap, "%s", v ? v : "");
		ret = 1;
	} else if (rc != SQLITE_DONE) {
		ret = sql_err(c, rc, "read meta");
	}
	sqlite3_finalize(st);
	return ret;
}

/*
 * Check or record the store URL and the schema number; refuse a newer
 * schema; CAT_CORRUPT for an unreadable schema row. Caller holds the lock and a transaction.
 */
static int check_meta(struct dcr_catalog *c, const char *url)
{
	char have[4096], schema[64], *end;
	sqlite3_stmt *st;
	unsigned long long n;
	int rc, ret;

	ret = meta_get(c, "url", have, sizeof(have));
	if (ret < 0)
		return ret;
	if (ret > 0) {
		ret = meta_get(c, "schema", schema, sizeof(schema));
		if (ret < 0)
			return ret;
		errno = 0;
		n = strtoull(schema, &end, 10);
		if (ret == 0 || !schema[0] || *end || errno) {
			snprintf(c->why, sizeof(c->why),
				 "bad schema number '%.32s'", schema);
			return CAT_CORRUPT;
		}
		if (n == 1) {
			/* Schema 1 knew format 1 manifests only: their rows
			 * are valid as they are, with no frame hashes and
			 * no check values. */
			ret = exec_locked(c,
				"ALTER TABLE versions ADD COLUMN format "
				"INTEGER NOT NULL DEFAULT 1;"
				"ALTER TABLE chunks ADD COLUMN fhash BLOB;"
				"ALTER TABLE chunks ADD COLUMN xxh BLOB;"
				"DROP TABLE IF EXISTS cache;"
				"UPDATE meta SET value = '2' "
				"WHERE key = 'schema';");
			if (ret)
				return ret;
			dcr_info("catalog %s: upgraded from schema 1 to 2",
				 c->path);
			n = 2;
		}
		if (n == 2) {
			/* Schema 2 did not record which manifest object a
			 * version was indexed from: NULL, "unknown", makes
			 * the reader fetch it once and compare. */
			ret = exec_locked(c,
				"ALTER TABLE versions ADD COLUMN mhash BLOB;"
				"ALTER TABLE versions ADD COLUMN obj_size "
				"INTEGER;"
				"ALTER TABLE versions ADD COLUMN obj_mtime "
				"INTEGER;"
				"ALTER TABLE versions ADD COLUMN ehash BLOB;"
				"UPDATE meta SET value = '3' "
				"WHERE key = 'schema';");
			if (ret)
				return ret;
			dcr_info("catalog %s: upgraded from schema 2 to 3",
				 c->path);
			n = 3;
		}
		if (n != strtoull(DCR_CATALOG_SCHEMA, NULL, 10)) {
			dcr_err("catalog %s has schema %s, this dcrfs only "
				"knows schema " DCR_CATALOG_SCHEMA
				"%s; use another cache directory%s", c->path,
				schema, n > 1 ? " (it was written by a newer "
						"dcrfs)" : "",
				n > 1 ? " or a newer dcrfs" : "");
			return DCR_ERR(-EPROTONOSUPPORT);
		}
		if (strcmp(have, url) != 0) {
			dcr_err("catalog %s belongs to store %s, not %s; "
				"use another cache directory",
				c->path, have[0] ? have : "?", url);
			return DCR_ERR(-EEXIST);
		}
		return 0;
	}
	ret = prepare(c, "INSERT OR REPLACE INTO meta(key, value) VALUES "
			 "('url', ?1), ('schema', '" DCR_CATALOG_SCHEMA "')",
		      &st);
	if (ret)
		return ret;
	sqlite3_bind_text(st, 1, url, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return sql_err(c, rc, "record store url");
	c->fresh = true;
	return 0;
}

/*
 * The checks dcr_manifest_validate applies to a version's header, for
 * rows read back from the database (which may have been damaged or
 * edited): valid chunk size, parent older, counts bounded.
 */
static bool header_ok(uint64_t v, uint64_t parent, int64_t cs, int64_t nfiles,
		      int64_t npacks)
{
	return v >= 1 && v <= INT64_MAX && parent < v &&
	       cs > 0 && dcr_chunk_size_valid((uint64_t)cs) &&
	       nfiles >= 0 && nfiles < UINT32_MAX - 1 &&
	       npacks >= 0 && npacks <= UINT32_MAX;
}

/* Check every version header row. Caller holds the lock. */
static int check_headers(struct dcr_catalog *c)
{
	sqlite3_stmt *st;
	int rc, ret;

	ret = prepare(c, "SELECT version, parent, chunk_size, nfiles, npacks "
			 "FROM versions", &st);
	if (ret)
		return ret;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		uint64_t v = (uint64_t)sqlite3_column_int64(st, 0);
		uint64_t p = (uint64_t)sqlite3_column_int64(st, 1);

		if (!header_ok(v, p, sqlite3_column_int64(st, 2),
			       sqlite3_column_int64(st, 3),
			       sqlite3_column_int64(st, 4))) {
			snprintf(c->why, sizeof(c->why),
				 "invalid row of version %llu: parent %llu, "
				 "chunk size %lld", (unsigned long long)v,
				 (unsigned long long)p,
				 (long long)sqlite3_column_int64(st, 2));
			sqlite3_finalize(st);
			return CAT_CORRUPT;
		}
	}
	ret = rc == SQLITE_DONE ? 0 : sql_err(c, rc, "check versions");
	sqlite3_finalize(st);
	return ret;
}

/* Open the database at @c->path and check it. CAT_CORRUPT if it must be
 * set aside. On failure c->db is closed. */
static int open_db(struct dcr_catalog *c, const char *url)
{
	char mark[PATH_MAX + 16];
	int fd, rc, ret;

	/* Create the file ourselves so that it is 0600 whatever the umask;
	 * SQLite gives the -wal and -shm files the same mode. */
	fd = open(c->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		ret = -errno;
		dcr_err("catalog %s: %s", c->path, dcr_strerror(ret));
		return ret;
	}
	close(fd);
	snprintf(mark, sizeof(mark), "%s.rebuild", c->path);
	c->why[0] = '\0';
	c->last_rc = 0;
	if (access(mark, F_OK) == 0) {
		snprintf(c->why, sizeof(c->why),
			 "damage found while it was in use");
		return CAT_CORRUPT;
	}

	c->fresh = false;
	c->quiet_corrupt = true;
	rc = sqlite3_open_v2(c->path, &c->db,
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
	if (!ret)
		ret = check_headers(c);
	if (ret) {
		exec_locked(c, "ROLLBACK");
		goto err_close_db;
	}
	ret = exec_locked(c, "COMMIT");
	if (ret)
		goto err_close_db;
	c->quiet_corrupt = false;
	atomic_init(&c->waiting, 0);
	return 0;

err_close_db:
	c->quiet_corrupt = false;
	sqlite3_close(c->db);
	c->db = NULL;
	return ret;
}

/* Rename @path and its -wal and -shm to <path>.corrupt-<unix time>. */
static int set_aside(const char *path, char *dst, size_t cap)
{
	static const char *const sfx[] = { "-wal", "-shm" };
	long long now = (long long)time(NULL);
	char from[PATH_MAX + 8], to[PATH_MAX + 64];

	for (int k = 0;; k++) {
		if (k == 0)
			snprintf(dst, cap, "%s.corrupt-%lld", path, now);
		else
			snprintf(dst, cap, "%s.corrupt-%lld.%d", path, now, k);
		if (access(dst, F_OK) != 0 || k >= 100)
			break;
	}
	if (rename(path, dst) < 0) {
		int ret = -errno;
		dcr_err("catalog %s is corrupt and cannot be moved aside: %s",
			path, dcr_strerror(ret));
		return ret;
	}
	for (size_t i = 0; i < DCR_ARRAY_SIZE(sfx); i++) {
		snprintf(from, sizeof(from), "%s%s", path, sfx[i]);
		snprintf(to, sizeof(to), "%s%s", dst, sfx[i]);
		if (rename(from, to) < 0 && errno != ENOENT)
			unlink(from);
	}
	snprintf(from, sizeof(from), "%s.rebuild", path);
	unlink(from);
	return 0;
}

int dcr_catalog_open(const char *path, const char *url,
		     struct dcr_catalog **out)
{
	char aside[PATH_MAX + 32];
	struct dcr_catalog *c;
	int ret;

	*out = NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return DCR_ERR(-ENOMEM);
	c->path = strdup(path);
	if (!c->path) {
		ret = DCR_ERR(-ENOMEM);
		goto err_free;
	}
	ret = open_db(c, url);
	if (ret == CAT_CORRUPT) {
		/*
		 * The store is the source of truth: set the damaged file
		 * aside (for a post-mortem) and start afresh. Versions are
		 * indexed again from the store; the cache's slabs (which
		 * keep their own bookkeeping) stay, and every chunk in them
		 * is checked on its first use.
		 */
		ret = set_aside(path, aside, sizeof(aside));
		if (ret)
			goto err_free;
		dcr_warn("catalog %s is corrupt (%s); moved it to %s and "
			 "started a new catalog: versions are indexed again "
			 "from the store, cached chunks are kept", path,
			 c->why[0] ? c->why : sqlite3_errstr(c->last_rc),
			 aside);
		c->last_rc = 0;
		ret = open_db(c, url);
		if (ret == CAT_CORRUPT) {
			dcr_err("catalog %s: a new catalog is corrupt too",
				path);
			ret = DCR_ERR(-EIO);
		}
	}
	if (ret)
		goto err_free;
	pthread_mutex_init(&c->lock, NULL);
	*out = c;
	return 0;

err_free:
	free(c->path);
	free(c);
	return ret;
}

bool dcr_catalog_is_new(const struct dcr_catalog *c)
{
	return c->fresh;
}

/*
 * Record that the database is damaged (invalid rows, or SQLite found a
 * corrupt page while serving): the next open sets it aside and starts
 * afresh. A marker file next to it, not a row, so it works whatever
 * state the database is in. Best effort.
 */
static void mark_corrupt(struct dcr_catalog *c, const char *why)
{
	char mark[PATH_MAX + 16];
	int fd;

	snprintf(mark, sizeof(mark), "%s.rebuild", c->path);
	fd = open(mark, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	if (write(fd, why, strlen(why)) < 0)
		(void)0; /* the file's existence is the mark */
	close(fd);
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

void dcr_catalog_set_room_hook(struct dcr_catalog *c,
			       int (*fn)(void *arg, uint64_t want), void *arg)
{
	cat_lock(c);
	c->room = fn;
	c->room_arg = arg;
	pthread_mutex_unlock(&c->lock);
}

/* One attempt of in_txn. Caller holds the lock. */
static int txn_once(struct dcr_catalog *c,
		    int (*fn)(struct dcr_catalog *c, void *arg), void *arg)
{
	int ret = exec_locked(c, "BEGIN IMMEDIATE");

	if (ret)
		return ret;
	ret = fn(c, arg);
	if (!ret)
		ret = exec_locked(c, "COMMIT");
	/* (SQLite rolls back itself after some errors, SQLITE_FULL one) */
	if (ret && !sqlite3_get_autocommit(c->db))
		exec_locked(c, "ROLLBACK");
	return ret;
}

/*
 * The file system is full (SQLITE_FULL): say so (once per incident: at
 * most every FULL_SAY_NS, the rest in the debug log), ask the room hook
 * for room (the cache evicts), give back the WAL's space (a checkpoint
 * that truncates it) and from now on keep the WAL small (truncated after
 * every checkpoint, one every 256 KiB rather than every 4 MiB). Caller
 * holds the lock, no transaction open.
 */
static void make_room(struct dcr_catalog *c)
{
	int64_t now = dcr_mono_ns();

	if (c->full_said && now - c->full_said < FULL_SAY_NS) {
		dcr_debug("catalog %s: its file system is full (again)",
			  c->path);
	} else {
		c->full_said = now;
		dcr_warn("catalog %s: its file system is full: %s; new "
			 "versions are indexed as soon as there is room",
			 c->path, c->room ? "cached chunks are evicted for it"
					  : "nothing to evict");
	}
	if (c->room)
		c->room(c->room_arg, 0);
	sqlite3_wal_checkpoint_v2(c->db, NULL, SQLITE_CHECKPOINT_TRUNCATE,
				  NULL, NULL);
	if (!c->lean_wal) {
		c->lean_wal = true;
		sqlite3_wal_autocheckpoint(c->db, 64);
		sqlite3_exec(c->db, "PRAGMA journal_size_limit=0", NULL, NULL,
			     NULL);
	}
}

/*
 * Run @fn in its own write transaction, with the lock held. A full file
 * system is not an error of the catalog to log at every write: room is
 * made (make_room) and @fn run once more, so @fn must do the same when
 * run again after a rollback. Still full: -ENOSPC (said by make_room).
 */
static int in_txn(struct dcr_catalog *c,
		  int (*fn)(struct dcr_catalog *c, void *arg), void *arg)
{
	int ret;

	cat_lock(c);
	c->in_txn = true;
	ret = txn_once(c, fn, arg);
	if (ret == -ENOSPC) {
		make_room(c);
		ret = txn_once(c, fn, arg);
	}
	c->in_txn = false;
	pthread_mutex_unlock(&c->lock);
	return ret;
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

/* Read the identity columns @first.. of the current row into @id. */
static void column_ident(sqlite3_stmt *st, int first,
			 struct dcr_catalog_ident *id)
{
	const void *h = sqlite3_column_blob(st, first);

	memset(id, 0, sizeof(*id));
	if (h && sqlite3_column_bytes(st, first) == DCR_HASH_LEN) {
		memcpy(id->mhash, h, DCR_HASH_LEN);
		id->has_mhash = true;
	}
	if (sqlite3_column_int64(st, first + 1) > 0)
		id->obj_size = (uint64_t)sqlite3_column_int64(st, first + 1);
	id->obj_mtime_ns = sqlite3_column_int64(st, first + 2);
	h = sqlite3_column_blob(st, first + 3);
	if (h && sqlite3_column_bytes(st, first + 3) == DCR_HASH_LEN) {
		memcpy(id->ehash, h, DCR_HASH_LEN);
		id->has_ehash = true;
	}
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

/* The versions row, last: it is what makes the version visible. */
static int add_finish(struct dcr_catalog *c, void *arg)
{
	const struct dcr_manifest *m = ((struct add_ctx *)arg)->m;
	sqlite3_stmt *st;
	int ret;

	ret = prepare(c, "INSERT INTO versions(version, parent, ctime_ns, "
			 "chunk_size, nfiles, npacks, format, mhash, "
			 "obj_size, obj_mtime, ehash) "
			 "VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11)", &st);
	if (ret)
		return ret;
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

int dcr_catalog_versions(struct dcr_catalog *c,
			 struct dcr_catalog_version **vs, size_t *n)
{
	struct dcr_catalog_version *arr = NULL, *tmp;
	size_t cnt = 0, cap = 0;
	sqlite3_stmt *st;
	int rc, ret;

	*vs = NULL;
	*n = 0;
	cat_lock(c);
	ret = prepare(c, "SELECT version, parent, ctime_ns, chunk_size, nfiles, "
			 "mhash, obj_size, obj_mtime, ehash "
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
		column_ident(st, 5, &arr[cnt].id);
		/* Checked at open; a row changed since is refused too. */
		if (!header_ok(arr[cnt].version, arr[cnt].parent,
			       sqlite3_column_int64(st, 3),
			       sqlite3_column_int64(st, 4), 0)) {
			dcr_err("catalog %s: version %llu: invalid row",
				c->path, (unsigned long long)arr[cnt].version);
			mark_corrupt(c, "invalid version row");
			ret = DCR_ERR(-EIO);
			goto out_finalize;
		}
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

/* Is there a directory @path[0..len) among files[0..n) (sorted)? */
static bool dir_listed(const struct dcr_manifest *m, uint32_t n,
		       const char *path, size_t len)
{
	int64_t i = dcr_manifest_find_n(m, n, path, len);

	return i >= 0 && m->files[i].type == DCR_FT_DIR;
}

/*
 * The file-level checks of dcr_manifest_validate, for rows read back
 * from the database (chunk references are checked where they are read):
 * valid, sorted, unique paths with their directories listed, valid types
 * and modes, sizes and chunk counts consistent. 0, or -EBADMSG with
 * the index of the first bad file in *@bad.
 */
static int check_files(const struct dcr_manifest *m, uint32_t *bad)
{
	for (uint32_t i = 0; i < m->nfiles; i++) {
		const struct dcr_file *f = &m->files[i];
		const char *slash;
		size_t len = strlen(f->path);

		if (!dcr_path_valid(f->path, len) ||
		    (i > 0 && strcmp(m->files[i - 1].path, f->path) >= 0) ||
		    (f->mode & ~07777u))
			goto bad;
		slash = strrchr(f->path, '/');
		if (slash && !dir_listed(m, i, f->path,
					 (size_t)(slash - f->path)))
			goto bad;
		if (f->type == DCR_FT_DIR) {
			if (f->size || f->nchunks || f->base != DCR_NO_BASE)
				goto bad;
		} else if (f->type != DCR_FT_REG || f->size > INT64_MAX ||
			   f->nchunks != dcr_chunk_count(f->size,
							 m->chunk_size) ||
			   (f->base != DCR_NO_BASE && !m->parent)) {
			goto bad;
		}
		continue;
bad:
		*bad = i;
		return -EBADMSG;
	}
	return 0;
}

/* Load the version row and file rows into @m. Caller holds the lock. */
static int load_files_locked(struct dcr_catalog *c, uint64_t v,
			     struct dcr_manifest *m)
{
	sqlite3_stmt *st;
	uint32_t i = 0, nfiles, bad = 0;
	bool invalid = false;
	int rc, ret;

	ret = prepare(c, "SELECT parent, ctime_ns, chunk_size, nfiles, format "
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
	m->format = (uint32_t)sqlite3_column_int64(st, 4);
	if (!header_ok(v, m->parent, sqlite3_column_int64(st, 2),
		       sqlite3_column_int64(st, 3), 0) ||
	    m->format < DCR_MANIFEST_FORMAT_MIN ||
	    m->format > DCR_MANIFEST_FORMAT) {
		sqlite3_finalize(st);
		dcr_err("catalog %s: version %llu: invalid row",
			c->path, (unsigned long long)v);
		mark_corrupt(c, "invalid version row");
		return DCR_ERR(-EIO);
	}
	sqlite3_finalize(st);

	/* Bound the allocation below by the rows that really exist. */
	ret = prepare(c, "SELECT COUNT(*) FROM files WHERE version = ?1", &st);
	if (ret)
		return ret;
	sqlite3_bind_int64(st, 1, (int64_t)v);
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		ret = sql_err(c, rc, "count files");
		sqlite3_finalize(st);
		return ret;
	}
	if ((uint64_t)sqlite3_column_int64(st, 0) != nfiles) {
		dcr_err("catalog %s: version %llu: %lld of %u file rows",
			c->path, (unsigned long long)v,
			(long long)sqlite3_column_int64(st, 0), nfiles);
		sqlite3_finalize(st);
		mark_corrupt(c, "missing file rows");
		return DCR_ERR(-EIO);
	}
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
			invalid = true;
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
	} else if (check_files(m, &bad) != 0) {
		dcr_err("catalog %s: version %llu: invalid file row %u (%s)",
			c->path, (unsigned long long)v, bad,
			m->files[bad].path);
		ret = DCR_ERR(-EIO);
	}
	invalid = ret == -EIO && rc == SQLITE_DONE;
out_finalize:
	if (invalid)
		mark_corrupt(c, "invalid file rows");
	sqlite3_finalize(st);
	return ret;
}

int dcr_catalog_load_files(struct dcr_catalog *c, uint64_t v,
			   struct dcr_manifest *m)
{
	int ret;

	memset(m, 0, sizeof(*m));
	cat_lock(c);
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
	ret = prepare(c, "SELECT file, idx, kind, pack, off, len, hash, fhash, "
			 "xxh FROM chunks WHERE version = ?1", &st);
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
		{
			const void *fh = sqlite3_column_blob(st, 7);
			const void *x = sqlite3_column_blob(st, 8);

			if (fh && sqlite3_column_bytes(st, 7) == DCR_HASH_LEN)
				memcpy(ref->fhash, fh, DCR_HASH_LEN);
			if (x && sqlite3_column_bytes(st, 8) == DCR_XXH_LEN)
				memcpy(ref->xxh, x, DCR_XXH_LEN);
		}
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
	cat_lock(c);
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

int dcr_catalog_get_chunks(struct dcr_catalog *c, uint64_t v, uint32_t file,
			   uint64_t first, size_t n,
			   struct dcr_catalog_chunk *out, size_t *got)
{
	sqlite3_stmt *st = NULL;
	size_t k = 0;
	int rc = SQLITE_DONE, ret;

	*got = 0;
	if (n == 0)
		return 0;
	if (first > (uint64_t)INT64_MAX - n)
		return -ENOENT;
	memset(out, 0, n * sizeof(*out));
	cat_lock(c);
	ret = cached(c, ST_GET_CHUNK, &st);
	if (ret)
		goto out_unlock;
	sqlite3_bind_int64(st, 1, (int64_t)v);
	sqlite3_bind_int64(st, 2, file);
	sqlite3_bind_int64(st, 3, (int64_t)first);
	sqlite3_bind_int64(st, 4, (int64_t)(first + n));
	while (k < n && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct dcr_catalog_chunk *o = &out[k];
		const void *h = sqlite3_column_blob(st, 4);
		const void *p = sqlite3_column_blob(st, 5);

		/* Stop at a hole: the caller gets the run from @first. */
		if ((uint64_t)sqlite3_column_int64(st, 0) != first + k)
			break;
		o->kind = (uint8_t)sqlite3_column_int(st, 1);
		o->off = (uint64_t)sqlite3_column_int64(st, 2);
		o->len = (uint32_t)sqlite3_column_int64(st, 3);
		if (!h || sqlite3_column_bytes(st, 4) != DCR_HASH_LEN ||
		    (o->kind != DCR_CK_SAME &&
		     (!p || sqlite3_column_bytes(st, 5) != DCR_HASH_LEN))) {
			dcr_err("catalog %s: version %llu file %u chunk %llu: "
				"bad row", c->path, (unsigned long long)v,
				file, (unsigned long long)(first + k));
			ret = DCR_ERR(-EIO);
			break;
		}
		memcpy(o->hash, h, DCR_HASH_LEN);
		if (o->kind != DCR_CK_SAME)
			memcpy(o->pack, p, DCR_HASH_LEN);
		/* Format 2 rows: the frame's SHA-256 and the chunk's check
		 * value; a row with only part of them is treated as format 1
		 * (proven by its SHA-256), never trusted more. */
		{
			const void *fh = sqlite3_column_blob(st, 6);
			const void *x = sqlite3_column_blob(st, 7);

			o->has_check =
				x && sqlite3_column_bytes(st, 7) == DCR_XXH_LEN &&
				(o->kind == DCR_CK_SAME ||
				 (fh && sqlite3_column_bytes(st, 6) ==
						DCR_HASH_LEN));
			if (o->has_check) {
				if (o->kind != DCR_CK_SAME)
					memcpy(o->fhash, fh, DCR_HASH_LEN);
				memcpy(o->xxh, x, DCR_XXH_LEN);
			}
		}
		k++;
	}
	if (!ret && k < n && rc != SQLITE_ROW && rc != SQLITE_DONE)
		ret = sql_err(c, rc, "read chunk");
	if (!ret && k == 0)
		ret = -ENOENT;
	if (!ret)
		*got = k;
	release(st);
out_unlock:
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int dcr_catalog_get_chunk(struct dcr_catalog *c, uint64_t v, uint32_t file,
			  uint64_t idx, struct dcr_catalog_chunk *out)
{
	size_t got;

	return dcr_catalog_get_chunks(c, v, file, idx, 1, out, &got);
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

int dcr_catalog_tags(struct dcr_catalog *c,
		     int (*fn)(const char *name, uint64_t version, void *arg),
		     void *arg)
{
	sqlite3_stmt *st;
	int rc, ret;

	cat_lock(c);
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
