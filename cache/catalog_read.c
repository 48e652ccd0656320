/* SPDX-License-Identifier: MIT */
/*
 * catalog_read.c - the catalog's lookups (see catalog.h): the versions,
 * a version's files or its whole manifest, each row read back checked
 * as dcr_manifest_validate checks a manifest (a damaged one marks the
 * database for rebuild), the chunk rows of the read path, the tags.
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "catalog_int.h"
#include "chunk.h"
#include "common.h"
#include "hash.h"
#include "manifest.h"

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

/*
 * Read the provenance columns @first (mcheck) and @first + 1 (sig) of
 * the current row: the check (zero and *@has_check false if unknown)
 * and the signature block. -1 for a value no writer stores.
 */
static int column_provenance(sqlite3_stmt *st, int first, bool *has_check,
			     uint8_t check[DCR_HASH_LEN], bool *has_sig,
			     struct dcr_sig *sig)
{
	const void *h = sqlite3_column_blob(st, first);
	int n = sqlite3_column_bytes(st, first);

	memset(check, 0, DCR_HASH_LEN);
	memset(sig, 0, sizeof(*sig));
	*has_check = h && n == DCR_HASH_LEN;
	if (h && n != DCR_HASH_LEN)
		return -1;
	if (*has_check)
		memcpy(check, h, DCR_HASH_LEN);
	h = sqlite3_column_blob(st, first + 1);
	n = sqlite3_column_bytes(st, first + 1);
	*has_sig = h != NULL;
	if (!h)
		return 0;
	return dcr_sig_decode(h, (size_t)n, sig) ? -1 : 0;
}

/* Load version @m->version's metadata rows into @m. Caller holds the
 * lock. */
static int load_meta_locked(struct dcr_catalog *c, struct dcr_manifest *m)
{
	sqlite3_stmt *st;
	int rc, ret;

	ret = prepare(c, "SELECT key, value FROM vmeta WHERE version = ?1 "
			 "ORDER BY key", &st);
	if (ret)
		return ret;
	sqlite3_bind_int64(st, 1, (int64_t)m->version);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *k = (const char *)sqlite3_column_text(st, 0);
		const char *v = (const char *)sqlite3_column_text(st, 1);
		if (!k || !v || (ret = dcr_manifest_set_meta(m, k, v))) {
			sqlite3_finalize(st);
			if (ret == -ENOMEM)
				return ret;
			mark_corrupt(c, "invalid metadata row");
			return DCR_ERR(-EIO);
		}
	}
	ret = rc == SQLITE_DONE ? 0 : sql_err(c, rc, "read metadata");
	sqlite3_finalize(st);
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
	cat_lock(c);
	ret = prepare(c, "SELECT version, parent, ctime_ns, chunk_size, nfiles, "
			 "mhash, obj_size, obj_mtime, ehash, mcheck, sig, "
			 "cparent FROM versions ORDER BY version", &st);
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
		arr[cnt].cparent = sqlite3_column_type(st, 11) == SQLITE_NULL
				   ? arr[cnt].parent
				   : (uint64_t)sqlite3_column_int64(st, 11);
		/* Checked at open; a row changed since is refused too. */
		if (!header_ok(arr[cnt].version, arr[cnt].parent,
			       sqlite3_column_int64(st, 3),
			       sqlite3_column_int64(st, 4), 0) ||
		    column_provenance(st, 9, &arr[cnt].has_check,
				      arr[cnt].check, &arr[cnt].has_sig,
				      &arr[cnt].sig)) {
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
	bool invalid = false, has_check;
	int rc, ret;

	ret = prepare(c, "SELECT parent, ctime_ns, chunk_size, nfiles, format, "
			 "mcheck, sig, cparent FROM versions WHERE version = ?1",
		      &st);
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
	m->cparent = sqlite3_column_type(st, 7) == SQLITE_NULL ? m->parent
		     : (uint64_t)sqlite3_column_int64(st, 7);
	if (!header_ok(v, m->parent, sqlite3_column_int64(st, 2),
		       sqlite3_column_int64(st, 3), 0) ||
	    m->format < DCR_MANIFEST_FORMAT_MIN ||
	    m->format > DCR_MANIFEST_FORMAT ||
	    column_provenance(st, 5, &has_check, m->check,
			      &m->has_sig, &m->sig)) {
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
	if (!ret && m->format >= 5)
		ret = load_meta_locked(c, m);
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
