/* SPDX-License-Identifier: MIT */
/*
 * catalog_int.h - private to the SQLite catalog (catalog.h is its
 * contract and the schema): struct dcr_catalog and what one file of the
 * catalog calls in another. Included only by these store/ files:
 *
 *   catalog.c        the connection: open (the schema created, upgraded
 *                    and checked; a damaged file set aside), close,
 *                    SQLite's codes as -errno, statements, the lock, the
 *                    write transactions and a full file system
 *   catalog_write.c  the rows written: a version indexed (in batches),
 *                    replaced, given its identity, removed; the tags
 *   catalog_read.c   the lookups: the versions, a version's files or
 *                    whole manifest (checked as read back), chunk rows,
 *                    the tags
 *
 * Locking: one connection behind the one mutex @lock (catalog.c says
 * why): every function of catalog.h takes it (cat_lock, or in_txn for a
 * write transaction); what is declared here runs under it unless it
 * says otherwise.
 */
#ifndef DCR_CATALOG_INT_H
#define DCR_CATALOG_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <sqlite3.h>

#include "catalog.h"

enum dcr_stmt_id {
	ST_GET_CHUNK,
	ST_COUNT,
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


/* ---- catalog.c */

/* Take the catalog lock, announcing the wait (see cat_yield). */
void cat_lock(struct dcr_catalog *c);
/* Between two batches of a long write, with the lock released: let the
 * threads waiting for it go first (bounded). */
void cat_yield(struct dcr_catalog *c);
/* Translate SQLite result code @rc of step @what to -errno, logging
 * sqlite3_errmsg once (not for SQLITE_CONSTRAINT, -EEXIST, nor for
 * SQLITE_FULL inside in_txn); a corrupt database is marked for rebuild.
 * Caller holds the lock. */
int sql_err(struct dcr_catalog *c, int rc, const char *what);
/* Execute @sql (statements without results): 0 or -errno (logged).
 * Caller holds the lock. */
int exec_locked(struct dcr_catalog *c, const char *sql);
/* Prepare the one-off statement @sql into *@st (the caller finalizes
 * it): 0 or -errno (logged). Caller holds the lock. */
int prepare(struct dcr_catalog *c, const char *sql, sqlite3_stmt **st);
/* The cached statement @id into *@st (prepared once, owned by @c; give
 * it back with release): 0 or -errno (logged). Caller holds the lock. */
int cached(struct dcr_catalog *c, enum dcr_stmt_id id,
		  sqlite3_stmt **st);
/* Reset a cached statement and clear its bindings. */
void release(sqlite3_stmt *st);
/* Whether a version header row read back (version @v, @parent, chunk
 * size @cs, @nfiles, @npacks) passes dcr_manifest_validate's checks. */
bool header_ok(uint64_t v, uint64_t parent, int64_t cs, int64_t nfiles,
		      int64_t npacks);
/* Mark the database damaged (a file next to it, naming @why): the next
 * open sets it aside and starts afresh. Best effort. */
void mark_corrupt(struct dcr_catalog *c, const char *why);
/* Run @fn(@c, @arg) in its own write transaction, taking the lock; on a
 * full file system room is made and @fn run once more (so it must do
 * the same when run again). 0, @fn's -errno, or -ENOSPC (said once). */
int in_txn(struct dcr_catalog *c,
		  int (*fn)(struct dcr_catalog *c, void *arg), void *arg);

#endif /* DCR_CATALOG_INT_H */
