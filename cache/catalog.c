/* SPDX-License-Identifier: MIT */
/*
 * catalog.c - the SQLite catalog's connection (see catalog.h for the
 * schema, catalog_int.h for the other files): opened (the schema
 * created, upgraded and checked; a damaged file set aside and rebuilt)
 * and closed, SQLite's result codes, the statements, the lock, and the
 * write transactions with what a full file system asks of them.
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

#include "catalog_int.h"
#include "chunk.h"
#include "common.h"

#define DCR_CATALOG_SCHEMA "4"
#define DCR_CATALOG_BUSY_MS 10000
/* A full file system is said at most this often (make_room). */
#define FULL_SAY_NS ((int64_t)600 * 1000000000)

static const char *const stmt_sql[ST_COUNT] = {
	[ST_GET_CHUNK] =
		"SELECT c.idx, c.kind, c.off, c.len, c.hash, p.hash, c.fhash, "
		"c.xxh FROM chunks c "
		"LEFT JOIN packs p ON p.version = c.version AND p.idx = c.pack "
		"WHERE c.version = ?1 AND c.file = ?2 AND c.idx >= ?3 "
		"AND c.idx < ?4 ORDER BY c.idx",
};

/* Take the catalog lock, announcing the wait (see cat_yield). */
void cat_lock(struct dcr_catalog *c)
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
void cat_yield(struct dcr_catalog *c)
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
	" mhash BLOB, obj_size INTEGER, obj_mtime INTEGER, ehash BLOB,"
	" mcheck BLOB, sig BLOB, cparent INTEGER);"
	"CREATE TABLE IF NOT EXISTS vmeta("
	" version INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,"
	" PRIMARY KEY(version, key)) WITHOUT ROWID;"
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

/* Translate a SQLite result code to -errno, logging the message once. */
int sql_err(struct dcr_catalog *c, int rc, const char *what)
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
int exec_locked(struct dcr_catalog *c, const char *sql)
{
	int rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);

	if (rc != SQLITE_OK)
		return sql_err(c, rc, sql);
	return 0;
}

/* Prepare a one-off statement. Caller holds the lock. */
int prepare(struct dcr_catalog *c, const char *sql, sqlite3_stmt **st)
{
	int rc = sqlite3_prepare_v2(c->db, sql, -1, st, NULL);

	if (rc != SQLITE_OK)
		return sql_err(c, rc, "prepare");
	return 0;
}

/* A cached statement, reset and with bindings cleared. Caller holds lock. */
int cached(struct dcr_catalog *c, enum dcr_stmt_id id,
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

void release(sqlite3_stmt *st)
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

int dcr_catalog_get_u64(struct dcr_catalog *c, const char *key, uint64_t *v)
{
	char buf[32];
	int ret;

	*v = 0;
	cat_lock(c);
	ret = meta_get(c, key, buf, sizeof(buf));
	pthread_mutex_unlock(&c->lock);
	if (ret <= 0)
		return ret;
	return dcr_parse_u64(buf, v) ? DCR_ERR(-EIO) : 0;
}

struct kv_args {
	const char *key;
	uint64_t v;
};

static int set_u64_txn(struct dcr_catalog *c, void *arg)
{
	const struct kv_args *a = arg;
	sqlite3_stmt *st;
	char buf[32];
	int rc, ret;

	ret = prepare(c, "INSERT OR REPLACE INTO meta(key, value) "
			 "VALUES (?1, ?2)", &st);
	if (ret)
		return ret;
	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)a->v);
	sqlite3_bind_text(st, 1, a->key, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, buf, -1, SQLITE_TRANSIENT);
	rc = sqlite3_step(st);
	ret = rc == SQLITE_DONE ? 0 : sql_err(c, rc, "write meta");
	sqlite3_finalize(st);
	return ret;
}

int dcr_catalog_set_u64(struct dcr_catalog *c, const char *key, uint64_t v)
{
	struct kv_args a = { key, v };

	return in_txn(c, set_u64_txn, &a);
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
		if (n == 3) {
			/* Schema 3 knew formats up to 4: no metadata, no
			 * signatures; each manifest's check (NULL) is
			 * learnt again when a signed child needs it. */
			ret = exec_locked(c,
				"ALTER TABLE versions ADD COLUMN mcheck BLOB;"
				"ALTER TABLE versions ADD COLUMN sig BLOB;"
				"ALTER TABLE versions ADD COLUMN cparent "
				"INTEGER;"
				"UPDATE meta SET value = '4' "
				"WHERE key = 'schema';");
			if (ret)
				return ret;
			dcr_info("catalog %s: upgraded from schema 3 to 4",
				 c->path);
			n = 4;
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
bool header_ok(uint64_t v, uint64_t parent, int64_t cs, int64_t nfiles,
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
void mark_corrupt(struct dcr_catalog *c, const char *why)
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
int in_txn(struct dcr_catalog *c,
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
