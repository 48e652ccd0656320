/* SPDX-License-Identifier: MIT */
/*
 * objstore.h - the object-store interface every backend fills.
 *
 * Like sqlite3_io_methods or erofs_vfops: a backend defines a static const
 * struct dcr_store_ops with designated initializers, embeds struct
 * dcr_store as the first member of its own state, and callers go through
 * the dcr_store_* wrappers below. core/ only sees this interface; the
 * backends (local directory, S3) live in store/.
 *
 * Keys are '/'-separated names relative to the store's root or prefix
 * ("versions/0000000001", "packs/<sha256>", "tags/<name>").
 *
 * Every op may be called from several threads at once on the same store.
 * Every op returns 0 (or a count) on success and -errno on failure:
 * -ENOENT for a missing object, -EEXIST for a conditional put that lost,
 * -EACCES for refused credentials, -EIO for anything else the backend
 * could not do after its own retries (it logs the reason once, naming
 * the object).
 */
#ifndef DCR_OBJSTORE_H
#define DCR_OBJSTORE_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "buf.h"

/** Read to the end of the object. */
#define DCR_GET_ALL UINT64_MAX

enum dcr_put_flags {
	DCR_PUT_IF_ABSENT = 1 << 0, /* fail with -EEXIST if the key exists */
};

struct dcr_store;
/** An object being written by put_open/put_write (a backend's own). */
struct dcr_put;

/** put_write: bytes given page-aligned, in multiples of this, may be
 *  written around the page cache (O_DIRECT). */
#define DCR_PUT_ALIGN 4096

/**
 * struct dcr_obj_info - what a listing tells about one object.
 * @size:     bytes of the object (of an incomplete upload: 0 if unknown)
 * @mtime_ns: last modification (S3: LastModified; of an incomplete
 *            upload: when it started), Unix time in ns; 0 if unknown
 * @upload:   list_partial only: the backend's handle of the incomplete
 *            upload, to pass to abort_partial; NULL otherwise
 */
struct dcr_obj_info {
	uint64_t size;
	int64_t mtime_ns;
	const char *upload;
};

/**
 * dcr_list_fn - called once per key by list, in ascending key order for
 * the directory backend (unordered backends must say so). @info is valid
 * during the call only. Return 0 to go on, non-zero to stop the listing
 * (list then returns that value).
 */
typedef int (*dcr_list_fn)(const char *key, const struct dcr_obj_info *info,
			   void *arg);

struct dcr_store_ops {
	const char *name; /* "dir", "s3" */
	/**
	 * get - append bytes [off, off+len) of @key to @out (len may be
	 * DCR_GET_ALL). A range that runs past the end returns what exists;
	 * an offset past the end returns no bytes. -ENOENT if absent;
	 * -EFBIG if @out's maximum would be exceeded. @deadline (a
	 * CLOCK_MONOTONIC time, 0: none) bounds the whole operation: a
	 * backend that retries gives up at it, whatever its own timeout,
	 * and one called after it fails at once with -ETIMEDOUT.
	 */
	int (*get)(struct dcr_store *st, const char *key, uint64_t off,
		   uint64_t len, int64_t deadline, struct dcr_buf *out);
	/**
	 * put - store @len bytes under @key atomically: readers see the old
	 * object (or none) or the whole new one, never a part. With
	 * DCR_PUT_IF_ABSENT, fails with -EEXIST if @key exists, and of two
	 * racing puts exactly one wins.
	 */
	int (*put)(struct dcr_store *st, const char *key, const void *data,
		   uint64_t len, int flags);
	/**
	 * put_open - start an object whose key is known only once all its
	 * bytes are written (a pack, named by its content), so that they
	 * need not be held in memory: put_write appends bytes, put_finish
	 * stores them under @key as put does (atomically, with @flags) and
	 * frees the handle whatever it returns, put_abort discards them.
	 * Nothing is visible under any key before put_finish. A handle is
	 * used by one thread at a time; handles are independent. NULL
	 * (all four) where the backend can only put a whole buffer: the
	 * caller then buffers (dcr_store_can_stream).
	 */
	int (*put_open)(struct dcr_store *st, struct dcr_put **out);
	int (*put_write)(struct dcr_put *p, const void *data, size_t len);
	int (*put_finish)(struct dcr_put *p, const char *key, int flags);
	void (*put_abort)(struct dcr_put *p);
	/** head - size of @key into @size. -ENOENT if absent. */
	int (*head)(struct dcr_store *st, const char *key, uint64_t *size);
	/** list - every key starting with @prefix. */
	int (*list)(struct dcr_store *st, const char *prefix, dcr_list_fn fn,
		    void *arg);
	/** del - remove @key; -ENOENT if absent. */
	int (*del)(struct dcr_store *st, const char *key);
	/**
	 * list_partial - every upload that was started and never finished
	 * (a directory store's temporaries in .tmp/, S3 multipart uploads),
	 * unordered: @fn gets the key it was meant for (or the temporary's
	 * name), when it started and its handle. NULL if the backend
	 * leaves nothing behind. A live upload is listed too: callers judge
	 * by age.
	 */
	int (*list_partial)(struct dcr_store *st, dcr_list_fn fn, void *arg);
	/**
	 * abort_partial - discard the incomplete upload @upload of @key (as
	 * listed); -ENOENT if it is gone. NULL with list_partial.
	 */
	int (*abort_partial)(struct dcr_store *st, const char *key,
			     const char *upload);
	/** close - free the store; no op may run concurrently. */
	void (*close)(struct dcr_store *st);
};

struct dcr_store {
	const struct dcr_store_ops *ops;
	char *url; /* canonical URL, for messages (no secrets) */
};

static inline int dcr_store_get(struct dcr_store *st, const char *key,
				uint64_t off, uint64_t len, struct dcr_buf *out)
{
	return st->ops->get(st, key, off, len, 0, out);
}
/** dcr_store_get bounded by @deadline (see the get op): for callers
 * that bound a whole operation made of several requests (a read(2) that
 * fetches a chain), and the threads that fetch for them. */
static inline int dcr_store_get_within(struct dcr_store *st, const char *key,
				       uint64_t off, uint64_t len,
				       int64_t deadline, struct dcr_buf *out)
{
	return st->ops->get(st, key, off, len, deadline, out);
}
static inline int dcr_store_put(struct dcr_store *st, const char *key,
				const void *data, uint64_t len, int flags)
{
	return st->ops->put(st, key, data, len, flags);
}
/** Whether @st takes objects written in parts (put_open). */
static inline bool dcr_store_can_stream(const struct dcr_store *st)
{
	return st->ops->put_open != NULL;
}
static inline int dcr_store_put_open(struct dcr_store *st, struct dcr_put **out)
{
	return st->ops->put_open(st, out);
}
static inline int dcr_store_put_write(struct dcr_store *st, struct dcr_put *p,
				      const void *data, size_t len)
{
	return st->ops->put_write(p, data, len);
}
static inline int dcr_store_put_finish(struct dcr_store *st, struct dcr_put *p,
				       const char *key, int flags)
{
	return st->ops->put_finish(p, key, flags);
}
static inline void dcr_store_put_abort(struct dcr_store *st, struct dcr_put *p)
{
	st->ops->put_abort(p);
}
static inline int dcr_store_head(struct dcr_store *st, const char *key,
				 uint64_t *size)
{
	return st->ops->head(st, key, size);
}
static inline int dcr_store_list(struct dcr_store *st, const char *prefix,
				 dcr_list_fn fn, void *arg)
{
	return st->ops->list(st, prefix, fn, arg);
}
static inline int dcr_store_del(struct dcr_store *st, const char *key)
{
	return st->ops->del(st, key);
}
/** list_partial, or nothing for a backend that leaves nothing behind. */
static inline int dcr_store_list_partial(struct dcr_store *st, dcr_list_fn fn,
					 void *arg)
{
	return st->ops->list_partial ? st->ops->list_partial(st, fn, arg) : 0;
}
static inline int dcr_store_abort_partial(struct dcr_store *st,
					  const char *key, const char *upload)
{
	return st->ops->abort_partial ?
		st->ops->abort_partial(st, key, upload) : -ENOENT;
}
/** Close and free @st; NULL accepted. */
static inline void dcr_store_close(struct dcr_store *st)
{
	if (st)
		st->ops->close(st);
}

/**
 * dcr_store_latest - the highest version number whose manifest exists
 * (0 if none) into @v. Lists "versions/".
 */
int dcr_store_latest(struct dcr_store *st, uint64_t *v);

/**
 * dcr_store_log_newer_manifest - log that the manifest object @key of
 * the store @url is of a format newer than this dcrfs reads
 * (dcr_manifest_decode's -EPROTONOSUPPORT): not damage, an upgrade.
 */
void dcr_store_log_newer_manifest(const char *url, const char *key);

/** The largest manifest object fetched: a larger one is refused
 * (-EFBIG) before it is read whole. */
#define DCR_MANIFEST_OBJ_MAX ((size_t)2 << 30)
/** A manifest that does not decode is fetched this many times in all. */
#define DCR_MANIFEST_TRIES 3

/**
 * struct dcr_mfetch - one fetch of a manifest object (dcr_manifest_fetch).
 * In: @key (versions/<n> or manifests/<hash>), @v (the number it must
 * hold), @deadline (CLOCK_MONOTONIC ns bounding the whole fetch, its
 * retries included; 0: none), @want (the SHA-256 its bytes must have, a
 * manifests/<hash>'s name; NULL: any) and @quiet (a store error is not
 * logged: the caller logs it, or retries it quietly). Out, when it
 * returns 0: @mhash (the SHA-256 of the object's bytes: its identity),
 * @size (its bytes) and @tail (its last 32 bytes, when it has that many).
 */
struct dcr_mfetch {
	const char *key;
	uint64_t v;
	int64_t deadline;
	const uint8_t *want;
	bool quiet;
	uint8_t mhash[32];
	uint64_t size;
	uint8_t tail[32];
};

/**
 * dcr_manifest_fetch - the one way a manifest object is fetched (the
 * reader, the committer's parent, maintenance and the store view all
 * come here): at most DCR_MANIFEST_OBJ_MAX bytes (else -EFBIG), within
 * @f->deadline; decoded into @m (zeroed first; the caller frees it),
 * checked to be version @f->v and, with @f->want, to hash to it. Bytes
 * that fail a check are fetched again, DCR_MANIFEST_TRIES times in all
 * (a body damaged on the way is transient, not the store's), before
 * the object is called corrupt: -EBADMSG, logged once naming the key
 * and what is wrong. A manifest of a newer format is not damage and is
 * not fetched again: -EPROTONOSUPPORT, logged as such
 * (dcr_store_log_newer_manifest). -ENOENT (not logged) if absent,
 * -ECANCELED if the process stops meanwhile, other -errno from the
 * store (logged unless @f->quiet). Thread-safe as the store's ops are.
 */
struct dcr_manifest;
int dcr_manifest_fetch(struct dcr_store *st, struct dcr_mfetch *f,
		       struct dcr_manifest *m);

/**
 * dcr_store_get_manifest - fetch and decode version @v's manifest
 * versions/<n> (dcr_manifest_fetch). -ENOENT if it does not exist,
 * -EBADMSG if corrupt or not version @v (logged, naming the key).
 */
int dcr_store_get_manifest(struct dcr_store *st, uint64_t v,
			   struct dcr_manifest *m);

/**
 * dcr_store_fetch_manifest - fetch the manifest object @key, decode it
 * and check it is version @v (dcr_manifest_fetch); the SHA-256 of the
 * object's bytes (its identity) into @mhash unless NULL. Returns as
 * dcr_manifest_fetch.
 */
int dcr_store_fetch_manifest(struct dcr_store *st, const char *key,
			     uint64_t v, struct dcr_manifest *m,
			     uint8_t mhash[32]);

/**
 * dcr_store_get_tag / dcr_store_put_tag - tags/<name> holds a version
 * number in decimal and a newline ("N\n"); a signed tag (sign.h) adds a
 * second line, its signature (dcr_tag_sig_format), and a newline. Names:
 * [A-Za-z0-9._-], 1..128 bytes, not starting with '.'. -EINVAL for a
 * bad name. dcr_store_get_tag reads both forms and returns the number
 * only; a tag object that is malformed (not a number >= 1, a second
 * line that is not a signature, anything after it, longer than
 * DCR_TAG_OBJ_MAX, which is never fetched whole) is -EBADMSG, logged
 * naming it and what is wrong; -ENOENT (not logged)
 * if there is no such tag; other -errno from the store. Thread-safe as
 * the store's ops are.
 */
int dcr_store_get_tag(struct dcr_store *st, const char *name, uint64_t *v);
int dcr_store_put_tag(struct dcr_store *st, const char *name, uint64_t v);
int dcr_tag_name_valid(const char *name);

/** The largest tag object read: a number, a signature line, newlines. */
#define DCR_TAG_OBJ_MAX 400

struct dcr_tag_sig;

/**
 * dcr_store_get_tag_sig - read tag @name as dcr_store_get_tag does: its
 * version into *@v and, when the object has a signature line, that line
 * parsed (dcr_tag_sig_parse) into *@ts with *@is_signed true; an
 * unsigned tag ("N\n") sets *@is_signed false and leaves *@ts alone.
 * Nothing is verified here: the caller checks *@ts with
 * dcr_tag_sig_check against version *@v's manifest check and its trust
 * set. @ts and @is_signed may be NULL (the line is still parsed, so a
 * malformed one is -EBADMSG either way). Returns 0, -ENOENT (no such
 * tag, not logged), -EINVAL (bad name), -EBADMSG (malformed, logged
 * naming the object) or -errno from the store.
 */
int dcr_store_get_tag_sig(struct dcr_store *st, const char *name, uint64_t *v,
			  struct dcr_tag_sig *ts, bool *is_signed);

/** What dcr_store_read_tag says of a malformed tag object. */
struct dcr_tag_bad {
	const char *why;                /* static text: what is wrong */
	uint8_t digest[32];             /* SHA-256 of the bytes read (at most
					 * DCR_TAG_OBJ_MAX + 1 of them) */
};

/**
 * dcr_store_read_tag - dcr_store_get_tag_sig for a caller that reads
 * tags again and again (a mount's poll) and logs a malformed object
 * once per content: with @bad non-NULL a malformed object is -EBADMSG
 * with *@bad filled and nothing logged; with @bad NULL it is
 * dcr_store_get_tag_sig. Either way at most DCR_TAG_OBJ_MAX + 1 bytes
 * are fetched (a ranged GET), so a huge object is never read whole.
 * Thread-safe as the store's ops are.
 */
int dcr_store_read_tag(struct dcr_store *st, const char *name, uint64_t *v,
		       struct dcr_tag_sig *ts, bool *is_signed,
		       struct dcr_tag_bad *bad);

/**
 * dcr_store_put_tag_signed - point tag @name at version @v with
 * signature @ts (made by dcr_tag_sign for @name and @v): writes
 * "N\n<signature line>\n", replacing the tag. Readers that predate
 * signed tags cannot read it (they see a malformed tag). 0, -EINVAL for
 * a bad name, or -errno from the store (not logged: the caller names
 * what it was doing).
 */
int dcr_store_put_tag_signed(struct dcr_store *st, const char *name,
			     uint64_t v, const struct dcr_tag_sig *ts);
/** dcr_store_del_tag - remove tag @name; -ENOENT if it does not exist. */
int dcr_store_del_tag(struct dcr_store *st, const char *name);

/*
 * The store marker. A store is created explicitly (dcrfs-commit --init,
 * dcrfs-ctl init), which writes the object DCR_STORE_MARKER:
 *
 *     dcrfs-store 1
 *     id <32 lowercase hex digits, random>
 *     created <unix time>
 *
 * Lines after the first two that this code does not know are ignored, so
 * later formats may add some. The id names this incarnation of the store:
 * a store deleted and created again at the same URL gets a new id, and
 * every local state keyed by it (a mount's catalog and cache) is dropped.
 *
 * Stores written before the marker existed have versions/ but no marker.
 * They stay valid; their id is "legacy-" and the first 24 hex digits of
 * the SHA-256 of their lowest version's manifest object, which changes
 * too when such a store is recreated.
 */
#define DCR_STORE_MARKER "dcrfs-store"
#define DCR_STORE_FORMAT 1
#define DCR_STORE_ID_MAX 40 /* longest id, without the NUL */

struct dcr_store_info {
	char id[DCR_STORE_ID_MAX + 1];
	unsigned int format; /* the marker's; 0 for a legacy store */
	bool legacy;         /* no marker, but versions/ */
	int64_t created_ns;  /* the marker's creation time; 0 if unknown */
};

/**
 * dcr_store_identify - read the store's marker, or recognize a legacy
 * store. Returns 0 and fills @info; -ENOENT if @st holds neither a
 * marker nor any version (not a dcrfs store: nothing is logged, the
 * caller says what it was doing); -EBADMSG for a malformed marker and
 * -EPROTONOSUPPORT for a newer store format (both logged); other -errno
 * from the backend.
 */
int dcr_store_identify(struct dcr_store *st, struct dcr_store_info *info);

/**
 * dcr_store_init - create a store: write a new marker if @st holds no
 * store. Returns 0 (created) or -EEXIST (a store, marked or legacy, is
 * there already: left alone), filling @info either way; other -errno on
 * failure (logged). Safe against a racing init: one marker wins and both
 * callers report the winner's id.
 */
int dcr_store_init(struct dcr_store *st, struct dcr_store_info *info);

/*
 * Commit intents: what gc honours so that it never deletes a pack a
 * running commit will name (HACKING, "The publish protocol").
 *
 *     intents/<32 lowercase hex digits, random>
 *
 * A commit writes one before it uploads its first pack and deletes it
 * when it is done, published or not; its body is one line for people
 * ("commit pid N on HOST"), never parsed. What counts is the object's
 * time as the store lists it (LastModified, a file's mtime): the time
 * the commit began, on the same clock as its packs' times. gc keeps
 * every pack named by no manifest that was written at or after the
 * oldest live intent's time less DCR_INTENT_SKEW_S, whatever its grace;
 * an intent older than DCR_INTENT_TTL_S (a commit killed by SIGKILL or
 * a crash) is no longer honoured, and gc deletes it.
 */
#define DCR_INTENT_PREFIX "intents/"
#define DCR_INTENT_KEY_MAX 48              /* with the NUL */
#define DCR_INTENT_TTL_S (24 * 3600)       /* a commit lasts less */
#define DCR_INTENT_SKEW_S 600              /* servers' clocks that disagree */

/**
 * dcr_intent_begin - write a new intent object into @st, its key into
 * @key (DCR_INTENT_KEY_MAX bytes). 0, or -errno (logged: the caller must
 * not upload packs gc could take for orphans). Thread-safe.
 */
int dcr_intent_begin(struct dcr_store *st, char key[DCR_INTENT_KEY_MAX]);

/**
 * dcr_intent_end - delete the intent @key (an empty @key: nothing to
 * do). A failure is logged as a warning and otherwise ignored: the
 * intent only keeps orphans a while longer, until it expires.
 */
void dcr_intent_end(struct dcr_store *st, const char *key);

#endif /* DCR_OBJSTORE_H */
