/* SPDX-License-Identifier: MIT */
/*
 * dcr.h - libdcr, the public C API of dcrfs: commit a version from memory,
 * look after a store, and read a version's files without a mount.
 *
 * libdcr runs the same pipeline, codec and checks as dcrfs-commit (which
 * is built on it): each chunk is XORed against the parent version and
 * encoded on all cores, packs are uploaded, every pack is confirmed in
 * the store, and the version's manifest is published with a conditional
 * create; nothing a reader can see exists before that. A failed or
 * aborted commit publishes nothing.
 *
 *     dcr_store_handle *s;
 *     dcr_commit_handle *c;
 *     struct dcr_commit_info info;
 *     if (dcr_store_handle_open("s3://bucket/run1", DCR_STORE_INIT, &s) ||
 *         dcr_commit_begin(s, NULL, &c))
 *             die(dcr_errmsg());
 *     dcr_commit_add_safetensors(c, "model.safetensors", tensors, n, NULL, 0);
 *     if (dcr_commit_publish(c, "step-100", &info))
 *             die(dcr_errmsg());
 *     dcr_commit_free(c);
 *     dcr_store_handle_close(s);
 *
 * Errors: every function that can fail returns 0 or a negative errno
 * value (-EDOM: non-finite weights refused; -ENOENT: no store or no such
 * parent; -EINVAL: a bad argument; -EEXIST: a path added twice; -EIO: the
 * store failed). dcr_errmsg() then returns a message for the calling
 * thread's last failed call (several lines when several things were
 * wrong, e.g. one per tensor holding NaN or Inf). Messages also go to
 * stderr at the level set by dcr_set_log_level.
 *
 * Strings: every string is NUL-terminated, so none can hold a NUL byte:
 * a binding whose strings are counted (Python, Rust, ...) must refuse
 * one with a NUL itself rather than pass it on cut short (the Python
 * module raises DcrError). Paths in a version, tensor names and metadata
 * keys and values must be valid UTF-8 (they go into JSON headers and
 * listings); anything else fails with -EINVAL, naming it. Paths found
 * by dcr_commit_add_tree are taken as the filesystem has them.
 *
 * Ownership: the library copies every string, shape and metadata entry
 * it is given when the call returns. Tensor data and byte ranges are NOT
 * copied (zero-copy): that memory must stay valid and unchanged from the
 * add call until dcr_commit_publish returns or the handle is freed. It is
 * only read.
 *
 * Threads: a commit handle is used by one thread at a time; distinct
 * handles, even on one store handle, are independent and may run in
 * parallel (commits sharing a cache directory take turns: the cache is
 * locked while one publishes). A store handle may be shared by threads
 * and must outlive its commit handles. The library starts its own
 * encoder and upload threads inside dcr_commit_publish and stops them
 * before it returns.
 *
 * Link with `pkg-config --libs dcr`.
 */
#ifndef DCR_H
#define DCR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DCR_BUILDING_LIB) && defined(__GNUC__)
#define DCR_API __attribute__((visibility("default")))
#else
#define DCR_API
#endif

typedef struct dcr_store_handle dcr_store_handle;
typedef struct dcr_commit_handle dcr_commit_handle;

/**
 * dcr_errmsg - the message of the calling thread's last failed libdcr
 * call ("" if none): the error lines the call logged, on this thread or
 * on the worker threads its work ran on, in order (at most 4 KiB: the
 * first are kept). Valid until the thread's next libdcr call.
 */
DCR_API const char *dcr_errmsg(void);

/** Log levels for dcr_set_log_level. */
enum dcr_level { DCR_LEVEL_ERROR, DCR_LEVEL_WARN, DCR_LEVEL_INFO, DCR_LEVEL_DEBUG };

/** dcr_set_log_level - what goes to stderr (default DCR_LEVEL_INFO); global. */
DCR_API void dcr_set_log_level(int level);

/**
 * dcr_set_log_errors - with @print 0, the errors of a failing call made
 * by this process's threads are not written to stderr, only returned by
 * dcr_errmsg (default 1: written too). The errors a call's work logs on
 * libdcr's own worker threads (a pack's upload, a chunk's encoding) are
 * the call's: in its dcr_errmsg, first one first, and held back alike;
 * those of work still running after the call returned (a read handle's
 * read-ahead) are always written. Global.
 */
DCR_API void dcr_set_log_errors(int print);

/** Flags of dcr_store_handle_open. */
#define DCR_STORE_INIT 1u /* create the store if there is none */
#define DCR_STORE_NO_SIGN 2u /* S3: unsigned requests (a public bucket);
				without it no credentials is an error */

/**
 * dcr_store_handle_open - open the store at @url (a directory,
 * file:///path or s3://bucket/prefix; S3 settings as the AWS tools take
 * them). Without DCR_STORE_INIT, a URL that holds no dcrfs store fails
 * with -ENOENT. Returns 0 and sets *@out, or -errno.
 */
DCR_API int dcr_store_handle_open(const char *url, unsigned flags,
				  dcr_store_handle **out);

/**
 * struct dcr_store_options - S3 settings given by the caller, as the aws
 * CLI's --profile, --region, --endpoint-url and --ca-bundle: each beats
 * its AWS_* variable and the config files (an explicit profile also
 * beats AWS_ACCESS_KEY_ID); NULL leaves it to them.
 */
struct dcr_store_options {
	const char *profile;
	const char *region;
	const char *endpoint_url;
	const char *ca_bundle;
};

/**
 * dcr_store_handle_open_opts - dcr_store_handle_open with the S3
 * settings @o (NULL: none given).
 */
DCR_API int dcr_store_handle_open_opts(const char *url, unsigned flags,
				       const struct dcr_store_options *o,
				       dcr_store_handle **out);

/**
 * struct dcr_warm_publish_options - how a commit through a store handle
 * fills the cache tiers before it publishes (dcrfs-commit --warm-mirror).
 * @mirrors: the tiers, comma-separated URLs (as -o mirror takes them).
 * @s3: the S3 settings for reaching them (NULL: none given).
 * @no_sign_request: reach them with unsigned requests.
 * @slice: bytes per warm GET, the tiers' slice size (0: 1 MiB).
 * @timeout_s: bound on one version's warm (0: none).
 */
struct dcr_warm_publish_options {
	const char *mirrors;
	const struct dcr_store_options *s3;
	int no_sign_request;
	uint64_t slice;
	uint64_t timeout_s;
};

/**
 * dcr_store_handle_warm_publish - put the s3:// store of @s behind the
 * tiers of @o: the packs a commit through @s uploads are then fetched
 * through the tiers right before the version is published, so the fleet
 * finds them cached (FAN-OUT in dcrfs(8)); a failed warm is logged and
 * the version is published all the same. Before the handle's first
 * commit. 0, or -errno (-EINVAL: not an s3:// store, or bad mirrors),
 * with dcr_errmsg set.
 */
DCR_API int dcr_store_handle_warm_publish(dcr_store_handle *s,
					  const struct dcr_warm_publish_options *o);

/** dcr_store_handle_close - close @s (NULL accepted); no commit may use it. */
DCR_API void dcr_store_handle_close(dcr_store_handle *s);

/** dcr_store_handle_latest - the newest version (0: none) into *@version. */
DCR_API int dcr_store_handle_latest(dcr_store_handle *s, uint64_t *version);

/** What dcr_store_compact did. */
struct dcr_compact_info {
	uint64_t generation; /* the layout generation published; 0: none needed */
	uint64_t rewritten;  /* versions re-encoded */
	unsigned depth;      /* the deepest version now, in frames per chunk */
};

/**
 * dcr_store_compact - what `dcrfs-ctl compact --max-depth K` does (see
 * dcrfs-ctl(8)): re-encode the store's versions as skip-deltas so that
 * every version materializes with at most @max_depth frames per chunk
 * (0: 8), from the store's own bytes, published atomically as a new
 * layout generation. Only versions not yet in that shape are rewritten,
 * so calling it every N commits costs about N/2 versions' materializing
 * and encoding. Safe while commits and mounts run. Uses a scratch cache
 * in $TMPDIR (at most 1 GiB, removed before it returns). @info may be
 * NULL. 0; -EEXIST if another compaction published first (call again);
 * another -errno (dcr_errmsg).
 */
DCR_API int dcr_store_compact(dcr_store_handle *s, unsigned max_depth,
			      struct dcr_compact_info *info);

/** The options of dcr_store_compact_opts (`dcrfs-ctl compact`'s). */
struct dcr_compact_options {
	unsigned max_depth; /* frames per chunk, anchor included (0: 8; at most 64) */
	/* A chunk whose frames down to its first full one would cost more
	 * than read_cost % of that full frame to read (as modelled from
	 * their headers) is stored as a full frame: 100 to 10000, 0: 150
	 * (`dcrfs-ctl compact --read-cost`). */
	unsigned read_cost;
};

/**
 * dcr_store_compact_opts - dcr_store_compact with the options @o (NULL:
 * the defaults). -EINVAL for an option out of its range; otherwise as
 * dcr_store_compact.
 */
DCR_API int dcr_store_compact_opts(dcr_store_handle *s,
				   const struct dcr_compact_options *o,
				   struct dcr_compact_info *info);

/*
 * Maintenance: what dcrfs-ctl log, show, diff, verify, gc and tag do
 * (see dcrfs-ctl(8)), from the store's own listing, each call on a fresh
 * look at it. Results are the JSON text `dcrfs-ctl CMD --json` prints,
 * byte for byte (one value and a newline; its members are documented in
 * dcrfs-ctl(8)), returned in *@json, NUL-terminated and malloc'ed: free
 * it with dcr_free. A version is named as on dcrfs-ctl's command line:
 * a number, a tag name or "latest". Materializing (diff, a deep verify)
 * uses a scratch cache in $TMPDIR (at most 1 GiB, removed before the
 * call returns). Safe on a store handle other threads use; safe while
 * commits and mounts run (gc as dcrfs-ctl gc is: see its grace period).
 */

/** dcr_free - free what a libdcr call returned (NULL accepted). */
DCR_API void dcr_free(void *p);

/**
 * dcr_store_log - the store's versions, newest first (`log --json`: an
 * array of objects). 0, or -errno (a version whose manifest cannot be
 * read fails the call).
 */
DCR_API int dcr_store_log(dcr_store_handle *s, char **json);

/**
 * dcr_store_show - version @version with its files (`show V --json`).
 * 0, -ENOENT if there is no such version, or -errno.
 */
DCR_API int dcr_store_show(dcr_store_handle *s, const char *version,
			   char **json);

/**
 * dcr_store_diff - what changed from version @a to version @b, per file
 * and per safetensors tensor (`diff A B --json`). 0, -ENOENT if either
 * version does not exist, or -errno (nothing returned).
 */
DCR_API int dcr_store_diff(dcr_store_handle *s, const char *a, const char *b,
			   char **json);

/** Flags of dcr_store_verify. */
#define DCR_VERIFY_DEEP 1u /* also materialize every file and check its digest */

/**
 * dcr_store_verify - check that every object versions @versions[0..n)
 * (n 0: every version) need exists and matches its hashes (`verify
 * [V...] [--deep] --json`). 0 if everything checks out; -EBADMSG if
 * damage was found: *@json is set then too (its "damage" array), and
 * dcr_errmsg has one line per damaged object, naming it and why
 * ("<url>: damaged: packs/<hex>: missing"); -ENOENT for a version that
 * does not exist; other -errno if the check could not be made.
 */
DCR_API int dcr_store_verify(dcr_store_handle *s, const char *const *versions,
			     size_t n, unsigned flags, char **json);

/** What dcr_store_gc keeps (the options of `dcrfs-ctl gc`). */
struct dcr_gc_options {
	uint64_t keep_last;    /* the newest N versions stay; >= 1 */
	int keep_tagged;       /* tagged versions stay (their tags go otherwise) */
	uint64_t keep_newer;   /* seconds: versions committed within stay (0: no rule) */
	uint64_t grace;        /* seconds: packs no manifest names and incomplete
				  uploads go once older (dcrfs-ctl's default: 86400) */
	int dry_run;           /* report what would be done; change nothing */
	unsigned max_depth;    /* the rebase's frames per chunk (0: 8) */
	/* The rebase's read-cost bound, as dcr_compact_options.read_cost:
	 * 100 to 10000, 0: 150 (`dcrfs-ctl gc --read-cost`). */
	unsigned read_cost;
};

/**
 * dcr_store_gc - remove the versions outside retention @o and the
 * objects no kept version needs, as `dcrfs-ctl gc --json` does (kept
 * versions built on removed ones are rebased first). 0; -EINVAL for
 * keep_last 0 or an option out of its range; -EAGAIN if a compaction
 * published meanwhile (nothing deleted; call again); other -errno.
 */
DCR_API int dcr_store_gc(dcr_store_handle *s, const struct dcr_gc_options *o,
			 char **json);

/**
 * dcr_store_tag - point tag @name at version @version (a number, a tag
 * or "latest"), as `dcrfs-ctl tag` does; the version's number into
 * *@out (may be NULL). 0; -EINVAL for an invalid tag name; -ENOENT for
 * no such version; other -errno.
 */
DCR_API int dcr_store_tag(dcr_store_handle *s, const char *name,
			  const char *version, uint64_t *out);

/**
 * dcr_store_tag_signed - dcr_store_tag, the tag signed with the Ed25519
 * private key in the PEM file @key_path (NULL: unsigned), as `dcrfs-ctl
 * tag --sign-key` does: mounts with -o trust= follow only tags signed by
 * a key they trust. The key is read first. As dcr_store_tag, and
 * -EBADMSG for a file holding no Ed25519 private key, -EINVAL for a
 * store made before store markers (nothing to sign for).
 */
DCR_API int dcr_store_tag_signed(dcr_store_handle *s, const char *name,
				 const char *version, const char *key_path,
				 uint64_t *out);

/** Flags of struct dcr_commit_options. */
#define DCR_COMMIT_FULL            (1u << 0) /* every chunk a full frame */
#define DCR_COMMIT_ALLOW_EMPTY     (1u << 1) /* publish a version without files */
#define DCR_COMMIT_ALLOW_NONFINITE (1u << 2) /* commit NaN/Inf weights */
#define DCR_COMMIT_NO_CACHE        (1u << 3) /* keep no copy of the new version */
#define DCR_COMMIT_NO_COPY         (1u << 4) /* a tree's next parent is the tree itself */
#define DCR_COMMIT_COPY            (1u << 5) /* always copy a tree into the cache */
#define DCR_COMMIT_ALLOW_UNCHANGED (1u << 6) /* publish a tree equal to the parent's
						(refused otherwise: -ENODATA) */
/*
 * A tree (dcr_commit_add_tree) with neither NO_COPY nor COPY is copied
 * into the cache only when it is the directory the previous commit came
 * from (a trainer saving in place); a new directory (step-N/) is itself
 * recorded as the next parent, saving a second write of the checkpoint.
 * Either way every parent chunk is verified against the parent's
 * manifest before a delta is built on it, and rebuilt from the store if
 * it does not match. Commits from memory are always copied.
 */

/** Progress, reported from the thread that called dcr_commit_publish. */
struct dcr_progress {
	uint64_t bytes_done;     /* source bytes read and encoded */
	uint64_t bytes_total;
	uint64_t bytes_uploaded; /* pack bytes stored so far */
	const char *phase;       /* "encode", "publish" */
};

struct dcr_commit_options {
	/* The version to diff against; 0: the latest (none: a first version). */
	uint64_t parent;
	/*
	 * The committer's cache: the parent version's tree, materialized,
	 * kept between commits (rebuilt from the store when missing or
	 * stale). NULL: ${XDG_CACHE_HOME:-~/.cache}/dcrfs/commit/<id>, as
	 * dcrfs-commit uses, so the tool and the library share it.
	 */
	const char *cache_dir;
	unsigned flags;        /* DCR_COMMIT_* */
	uint32_t chunk_size;   /* 0: the parent's, else 1 MiB */
	int jobs;              /* encoder threads; 0: number of CPUs */
	void (*progress)(void *arg, const struct dcr_progress *p); /* or NULL */
	void *progress_arg;
};

/**
 * dcr_commit_begin - start a commit on @s with options @o (NULL: all
 * defaults; copied). Nothing is read or uploaded until publish.
 * Returns 0 and sets *@out, or -errno.
 */
DCR_API int dcr_commit_begin(dcr_store_handle *s,
			     const struct dcr_commit_options *o,
			     dcr_commit_handle **out);

/** A byte range of the caller's memory. */
struct dcr_range {
	const void *data;
	uint64_t len;
};

/**
 * dcr_commit_add_bytes - add the file @path (relative, '/'-separated;
 * missing parent directories are added) of mode @mode (permission bits)
 * whose bytes are @r[0..n) back to back. Zero-copy: see Ownership.
 * Returns 0, -EEXIST if @path was added already, -EINVAL for a bad path
 * (absolute, with an empty, "." or ".." component, or not UTF-8).
 */
DCR_API int dcr_commit_add_bytes(dcr_commit_handle *c, const char *path,
				 unsigned mode, const struct dcr_range *r,
				 size_t n);

/** One tensor of a safetensors file. */
struct dcr_tensor_desc {
	const char *name;
	const char *dtype;       /* "BF16", "F16", "F32", "F64", "I8".."U64", "BOOL", "F8_E4M3", "F8_E5M2" */
	const uint64_t *shape;
	size_t ndim;             /* 0: a scalar */
	const void *data;        /* row-major, little-endian; zero-copy */
	uint64_t len;            /* bytes: element count x dtype width */
};

/**
 * dcr_commit_add_safetensors - add the file @path holding tensors
 * @t[0..n) in the safetensors format, byte for byte what the reference
 * implementation (safetensors.serialize) writes for them (tensors
 * ordered by dtype then name, header padded with spaces to 8 bytes),
 * with "__metadata__" from @meta_kv (key, value, key, value, ...;
 * @nmeta pairs; 0 for none). Only the header is built here; the tensors'
 * bytes are read in place at publish. Returns 0; -EINVAL for an unknown
 * dtype, a length that does not match the shape, a repeated name, a bad
 * path, or a name, key or value that is not valid UTF-8; -EEXIST if
 * @path was added already.
 */
DCR_API int dcr_commit_add_safetensors(dcr_commit_handle *c, const char *path,
				       const struct dcr_tensor_desc *t, size_t n,
				       const char *const *meta_kv, size_t nmeta);

/**
 * dcr_commit_add_tree - add every file and directory below the directory
 * @dir, as dcrfs-commit does (read at publish; a file that changes while
 * it is read fails the commit). Paths in the version are relative to
 * @dir. Returns 0 or -errno (a symlink, device, FIFO or socket: -EINVAL).
 */
DCR_API int dcr_commit_add_tree(dcr_commit_handle *c, const char *dir);

/*
 * Signing and metadata (issue 20; DESIGN.md 7c). These are calls on the
 * handle rather than members of struct dcr_commit_options, which keeps
 * its size (callers built against an older dcr.h pass the old one).
 */

/**
 * dcr_commit_set_sign_key - sign the version @c publishes (and the tag
 * dcr_commit_publish sets) with the Ed25519 private key in the PEM file
 * @path (`dcrfs-ctl keygen` makes one; `dcrfs-commit --sign-key`). The
 * key is read now, so that a missing or bad key fails here, before
 * anything is read or uploaded; so does a store made before store
 * markers, which has no id a signature can bind. A second call replaces
 * the key. Mounts with -o trust= show only versions signed by a key
 * they trust (dcrfs(8)). Returns 0; -ENOENT, -EACCES, ... for the file
 * (-EACCES also for a key file group or others may access, mode & 077,
 * refused as ssh refuses one); -EBADMSG if it holds no Ed25519 private
 * key; -EINVAL for a legacy
 * store or a handle published already.
 */
DCR_API int dcr_commit_set_sign_key(dcr_commit_handle *c, const char *path);

/**
 * dcr_commit_signer - the key id of @c's signing key (16 hex digits, as
 * dcrfs-ctl log shows signers), or NULL when @c does not sign. Owned by
 * @c.
 */
DCR_API const char *dcr_commit_signer(const dcr_commit_handle *c);

/**
 * dcr_commit_set_meta - record trainer metadata @key = @value in the
 * version's manifest (`dcrfs-commit --meta KEY=VALUE`): shown by
 * `dcrfs-ctl log --json` and `show --json` ("meta") and by mounts as the
 * attribute user.dcrfs.meta.KEY of the version's files. Keys are 1 to 64
 * bytes of [A-Za-z0-9._-], values at most 4096 bytes of UTF-8, at most
 * 256 entries; setting a key again replaces its value. Returns 0,
 * -EINVAL (naming what is wrong) or -ENOMEM.
 */
DCR_API int dcr_commit_set_meta(dcr_commit_handle *c, const char *key,
				const char *value);

/** What a publish did. */
struct dcr_commit_info {
	uint64_t version;       /* the new version's number */
	uint64_t parent;        /* what it was diffed against (0: none) */
	uint64_t files, dirs;
	uint64_t bytes_in;      /* source bytes read */
	uint64_t bytes_packed;  /* pack bytes uploaded */
	uint64_t manifest_len;
	uint64_t chunks_same, chunks_delta, chunks_full;
	uint32_t packs;
};

/**
 * dcr_commit_publish - encode, upload and publish everything added as
 * a new version, then point tag @tag (NULL: none) at it. Only once per
 * handle. Returns 0 and fills @info (may be NULL): the version
 * info->version holds exactly this commit (its manifest is read back
 * after the conditional create). Or -errno: nothing was published then,
 * except for -EINPROGRESS: the store's answers did not tell whether the
 * manifest was stored (dcr_errmsg names the version that may hold it;
 * check it before committing again). A failure to set the tag after the
 * version was published returns -EIO with info->version set. A tree
 * without files, or equal to the parent's, is -ENODATA unless
 * DCR_COMMIT_ALLOW_EMPTY / DCR_COMMIT_ALLOW_UNCHANGED. Published on top
 * of versions another committer published meanwhile (a number above
 * parent + 1), it warns that their changes are not in it.
 */
DCR_API int dcr_commit_publish(dcr_commit_handle *c, const char *tag,
			       struct dcr_commit_info *info);

/**
 * dcr_commit_cancel - make a dcr_commit_publish of @c running in another
 * thread (or interrupted by the signal whose handler calls this) stop
 * with -ECANCELED as soon as it sees it: after the chunk it is reading,
 * at the latest before the manifest is published. Nothing is published
 * then; the packs uploaded so far are named by no manifest and left to
 * dcrfs-ctl gc (dcr_errmsg says so). Too late (publishing begun) it has
 * no effect. Async-signal-safe; the handle stays @c's owner's to free.
 */
DCR_API void dcr_commit_cancel(dcr_commit_handle *c);

/**
 * dcr_commit_free - free @c (NULL accepted). A commit not published is
 * aborted: nothing was uploaded and nothing is published.
 */
DCR_API void dcr_commit_free(dcr_commit_handle *c);

/** dcr_commit_abort - dcr_commit_free, by the name that says what it does. */
DCR_API void dcr_commit_abort(dcr_commit_handle *c);

/*
 * Reading (issue 33): a version's files without a mount, FUSE or root,
 * with the mount's guarantees: every byte goes through the read path
 * (the chunk cache, ranged GETs of the frames it lacks, each chunk
 * verified bit-exactly against the version's manifest before it is
 * returned); a byte that cannot be proven fails the call with -EIO and
 * is never returned.
 *
 *     dcr_read_handle *r;
 *     dcr_read_file *f;
 *     if (dcr_read_handle_open(s, NULL, &r) ||
 *         dcr_read_open(r, "latest", "model.safetensors", &f))
 *             die(dcr_errmsg());
 *     int64_t n = dcr_read_pread(f, buf, sizeof(buf), 0);
 *     dcr_read_close(f);
 *     dcr_read_handle_close(r);
 *
 * A version is named as on dcrfs-ctl's command line: a number, a tag or
 * "latest" (resolved when the call is made, after a fresh look at the
 * store). Threads: a read handle and its files may be used by any
 * number of threads at once (preads of one file run in parallel); a
 * file must be closed before its read handle, and a read handle before
 * its store handle.
 */

typedef struct dcr_read_handle dcr_read_handle;
typedef struct dcr_read_file dcr_read_file;

/** The options of dcr_read_handle_open. */
struct dcr_read_options {
	/*
	 * The chunk cache: a directory laid out as a mount's -o cache_dir
	 * (per store: its catalog and slabs), kept after close, so that a
	 * later handle, `dcrfs-ctl export --cache-dir` or a mount reuses
	 * what was fetched and built. Only one user at a time: while a
	 * mount (or another handle) uses it, the open fails with -EBUSY
	 * and the message "cache directory X is in use by another dcrfs
	 * (pid N)". NULL: a private directory in $TMPDIR, removed at close.
	 */
	const char *cache_dir;
	/* Byte budget of the cache (least recently used chunks are
	 * evicted past it); 0: 10 GiB for @cache_dir, 1 GiB private. */
	uint64_t cache_size;
	/* A trust file (PEM public keys, as a mount's -o trust=): only
	 * versions signed by one of its keys are shown, and only tags
	 * signed by one ("latest" is the newest such version; any other
	 * is -ENOENT, saying so). NULL: trust the store. */
	const char *trust_file;
};

/**
 * dcr_read_handle_open - a reader of store @s with options @o (NULL:
 * defaults; copied). It lists the store's versions now. 0 and *@out,
 * or -errno (-EBUSY: the cache directory is in use; dcr_errmsg).
 */
DCR_API int dcr_read_handle_open(dcr_store_handle *s,
				 const struct dcr_read_options *o,
				 dcr_read_handle **out);

/** dcr_read_handle_close - close @h (NULL accepted); its files first. */
DCR_API void dcr_read_handle_close(dcr_read_handle *h);

/**
 * dcr_read_resolve - the number of the version @version names (a
 * number, a tag or "latest") into *@out. 0; -ENOENT when there is no
 * such version (or no version at all); -errno if the store could not
 * be listed.
 */
DCR_API int dcr_read_resolve(dcr_read_handle *h, const char *version,
			     uint64_t *out);

/**
 * dcr_read_list - the directories and files of version @version as
 * JSON in *@json (free with dcr_free): {"version": N, "entries":
 * [{"path", "type": "dir"|"file", "mode" (permission bits), "size",
 * "mtime_ns"}, ...]}, in path order, parents before their children,
 * the root left out. 0, -ENOENT, or -errno.
 */
DCR_API int dcr_read_list(dcr_read_handle *h, const char *version, char **json);

/**
 * dcr_read_open - open the regular file @path (relative; a leading '/'
 * is ignored) of version @version. Nothing is read yet. 0 and *@out;
 * -ENOENT (no such version, or no such file in it), -EISDIR (a
 * directory), or -errno.
 */
DCR_API int dcr_read_open(dcr_read_handle *h, const char *version,
			  const char *path, dcr_read_file **out);

/** dcr_read_size - the size in bytes of file @f (0 for NULL). */
DCR_API uint64_t dcr_read_size(const dcr_read_file *f);

/** dcr_read_version - the number of the version @f was opened in. */
DCR_API uint64_t dcr_read_version(const dcr_read_file *f);

/**
 * dcr_read_pread - bytes [@off, @off + @len) of @f into @buf, each
 * chunk verified. Returns the number of bytes read: @len, less only at
 * the end of the file (0 at or past it); or -errno: -EIO when an object
 * the bytes need is missing or damaged or a chunk fails its check (the
 * message names it), -ESTALE when the version was re-published with
 * other content since the open. Thread-safe.
 */
DCR_API int64_t dcr_read_pread(dcr_read_file *f, void *buf, size_t len,
			       uint64_t off);

/** dcr_read_close - close @f (NULL accepted). */
DCR_API void dcr_read_close(dcr_read_file *f);

#ifdef __cplusplus
}
#endif

#endif /* DCR_H */
