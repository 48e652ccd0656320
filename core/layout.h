/* SPDX-License-Identifier: MIT */
/*
 * layout.h - which manifest object encodes each version: the store's
 * layout generations (DESIGN.md section 7a, dcrfs-ctl compact).
 *
 * A version's identity and lineage is its manifest versions/<n>, written
 * once by the committer: its files, their digests and chunk hashes, and
 * the parent it was diffed against. Compaction changes how versions are
 * *encoded* (which base each chunk's frame applies to: skip-deltas,
 * re-anchored chunks) without changing what they hold. It never rewrites
 * versions/<n>; it publishes
 *
 *   manifests/<sha256 of the object>  a manifest of version n whose
 *       parent is its new encoding base, whose files and chunk hashes
 *       are versions/<n>'s exactly, and whose chunk references point at
 *       new frames (content-addressed, immutable);
 *   layouts/<gen, ten digits>  created only-if-absent, like a version:
 *       for every version whose encoding is not versions/<n>'s, the
 *       manifest object to read instead (and the version's logical
 *       parent, so nobody has to fetch versions/<n> to learn it).
 *
 * The newest generation is the store's layout; a version it does not
 * list is read from versions/<n>. Each generation lists every replaced
 * version, so a reader needs only the newest. A mount that read an older
 * generation keeps working on it: the frames it names stay until gc's
 * grace period after the newer generation appeared.
 *
 * Encoding (little-endian):
 *
 *   0   8  magic "DCRLAYOU"
 *   8   4  format (1)
 *   12  4  flags (0)
 *   16  8  generation (>= 1)
 *   24  8  creation time, ns since the epoch
 *   32  8  count n
 *   40  n x 48: version (u64, ascending, unique, 1..DCR_VERSION_MAX),
 *              logical parent (u64, < version; 0 = none),
 *              SHA-256 of the manifest object (32 bytes)
 *   40+48n 32  SHA-256 of bytes [0, 40 + 48n)
 *
 * Decoding bounds the count by the bytes present and checks everything
 * above; a reader checks each manifest object against its name, that it
 * is version n, and that it holds exactly what versions/<n> holds
 * (dcr_manifest_same_content) before it serves it.
 */
#ifndef DCR_LAYOUT_H
#define DCR_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "hash.h"
#include "manifest.h"
#include "objstore.h"

#define DCR_LAYOUT_FORMAT 1

struct dcr_layout_entry {
	uint64_t version;
	uint64_t lparent;                 /* the parent in versions/<n> */
	uint8_t mhash[DCR_HASH_LEN];      /* manifests/<hex> to read */
};

struct dcr_layout {
	uint64_t gen;       /* 0: no layout (every version as committed) */
	int64_t ctime_ns;
	size_t n;
	struct dcr_layout_entry *e; /* ascending by version */
	/* Not encoded: the highest generation listed when @gen was read
	 * (dcr_store_find_layout); > gen when newer ones are damaged, and
	 * the next generation is published above it. */
	uint64_t top;
};

/** Free what @l owns and zero it; NULL ok. */
void dcr_layout_free(struct dcr_layout *l);

/** Serialise @l (entries sorted, unique) appended to @out. 0 or -errno. */
int dcr_layout_encode(const struct dcr_layout *l, struct dcr_buf *out);

/** Parse untrusted bytes. 0, -EBADMSG (left zeroed) or -ENOMEM. */
int dcr_layout_decode(const void *p, size_t n, struct dcr_layout *l);

/** @l's entry for version @v, or NULL (read versions/<n>). */
const struct dcr_layout_entry *dcr_layout_find(const struct dcr_layout *l,
					       uint64_t v);

/** "layouts/%010llu". */
void dcr_layout_key(uint64_t gen, char *buf, size_t cap);
/** Parse a layout key (or the prefix-stripped name): 0 or -EINVAL. */
int dcr_layout_gen_from_key(const char *key, uint64_t *gen);
/** "manifests/<64 hex>". */
void dcr_mobj_key(const uint8_t h[DCR_HASH_LEN], char *buf, size_t cap);
/** Parse a manifest object key into @h: 0 or -EINVAL. */
int dcr_mobj_from_key(const char *key, uint8_t h[DCR_HASH_LEN]);

/**
 * dcr_store_find_layout - the newest generation @g with @above < @g <
 * @below (@below 0: no bound) that reads and decodes, into @l (gen 0
 * and no entries if there is none). Lists layouts/ once and reads from
 * the newest down: a generation that is damaged (-EBADMSG, logged once
 * here, naming it) or vanished since listed is passed over, so one bad
 * object never stops a reader. @bad may be NULL; else a generation not
 * to read at all (one found damaged before), raised to the highest
 * generation found damaged now. @l->top is the highest generation
 * listed. 0 or -errno of the listing or of a read (transient: nothing
 * older is guessed at then).
 */
int dcr_store_find_layout(struct dcr_store *st, uint64_t above, uint64_t below,
			  uint64_t *bad, struct dcr_layout *l);

/**
 * dcr_store_layout - the store's newest readable layout generation into
 * @l: dcr_store_find_layout(@st, 0, 0, NULL, @l).
 */
int dcr_store_layout(struct dcr_store *st, struct dcr_layout *l);

/**
 * dcr_store_get_layout - read generation @gen. 0, -ENOENT, -EBADMSG
 * (logged, naming the key) or -errno.
 */
int dcr_store_get_layout(struct dcr_store *st, uint64_t gen,
			 struct dcr_layout *l);

/**
 * dcr_store_put_layout - publish @l as layouts/<@l->gen>, created only
 * if absent (a compaction, gc's rebase or its dropping of removed
 * versions); *@bytes: its size. 0, -EEXIST (logged: another compaction
 * or gc published that generation meanwhile) or -errno (logged).
 */
int dcr_store_put_layout(struct dcr_store *st, const struct dcr_layout *l,
			 uint64_t *bytes);

/**
 * dcr_store_get_mobj - fetch manifests/<@h>, check its bytes hash to
 * @h, decode it and check it is version @v. 0, -ENOENT, -EBADMSG
 * (logged) or -errno (logged).
 */
int dcr_store_get_mobj(struct dcr_store *st, const uint8_t h[DCR_HASH_LEN],
		       uint64_t v, struct dcr_manifest *m);

#endif /* DCR_LAYOUT_H */
