/* SPDX-License-Identifier: MIT */
/*
 * ccache.h - the committer's cache: the parent version's tree kept
 * between commits, shared by dcrfs-commit and every libdcr user.
 *
 * Layout (default ${XDG_CACHE_HOME:-~/.cache}/dcrfs/commit/<id>/):
 *   lock      flock()ed while open: one commit per cache at a time
 *   state     "version N" - the version that tree/ holds; absent = unknown;
 *             "source PATH" after a no-copy commit: PATH is the parent;
 *             "from PATH" after a copied commit of directory PATH
 *   tree/     the parent version, materialized
 *   stage/    the version being committed (becomes tree/ on success)
 *   reader/   scratch catalog/cache used only while rebuilding tree/
 * Not thread-safe per handle; the lock serializes processes and handles.
 *
 * Opening a default cache (no @dir) removes the sibling default caches
 * not used for DCR_CCACHE_STALE_DAYS that nobody holds (each use touches
 * its lock file): stores no longer committed to do not keep a full tree
 * each forever. Explicit directories are never swept.
 */
#define DCR_CCACHE_STALE_DAYS 14
#ifndef DCR_CCACHE_H
#define DCR_CCACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "objstore.h"

struct dcr_ccache;

/**
 * dcr_ccache_open - open (creating it) the cache @dir of store @st, or
 * the default one if @dir is NULL, and lock it, waiting (with a message)
 * for another committer. Returns 0 or -errno (logged).
 */
int dcr_ccache_open(struct dcr_store *st, const char *dir, bool quiet,
		    struct dcr_ccache **out);

/** dcr_ccache_close - unlock and free @cc; NULL accepted. */
void dcr_ccache_close(struct dcr_ccache *cc);

/**
 * dcr_ccache_copy_wanted - the default for a commit of directory
 * @committing (NULL: from memory): whether to copy it into the cache
 * (DCR_CCACHE_STAGED) rather than record it as the next parent
 * (DCR_CCACHE_SOURCE). True when there is nothing to record (memory) or
 * when @committing is the directory the cached version came from: a
 * trainer that saves in place overwrites its parent. False for a new
 * directory (step-N/ directories): the copy would cost a second write of
 * the checkpoint, while the parent chunks read from the old directory
 * are verified against the parent manifest anyway (a changed or removed
 * directory only costs a rebuild from the store).
 */
bool dcr_ccache_copy_wanted(struct dcr_ccache *cc, const char *committing);

/**
 * dcr_ccache_parent - a directory holding version @parent's tree, into
 * *@dir (owned by @cc, valid until the next call): the cached tree, the
 * source of a no-copy commit, or rebuilt from the store through the read
 * path. @committing is the directory about to be committed (NULL for
 * memory): it can never serve as its own parent. With @rebuild, the tree
 * is rebuilt whatever the state says (after -ESTALE). @mhash (may be
 * NULL) is the SHA-256 of the store's manifest object of @parent: a
 * cached tree recorded as built from another manifest of that number
 * (the version was replaced in the store) is dropped, with one warning
 * naming both, and rebuilt.
 * Returns 0 or -errno (logged).
 */
int dcr_ccache_parent(struct dcr_ccache *cc, uint64_t parent,
		      const uint8_t *mhash, const char *committing,
		      bool rebuild, const char **dir);

/**
 * dcr_ccache_stage - an empty stage directory for the commit to copy the
 * new tree into, or NULL (warned) if it cannot be made: the commit goes
 * on without it.
 */
const char *dcr_ccache_stage(struct dcr_ccache *cc);

/** How dcr_ccache_done keeps the committed version. */
enum dcr_ccache_keep {
	DCR_CCACHE_STAGED,  /* the stage holds it: it becomes the tree */
	DCR_CCACHE_SOURCE,  /* no-copy: @source is the next parent */
	DCR_CCACHE_NOTHING, /* forget it: the next commit rebuilds */
};

/**
 * dcr_ccache_done - version @v (manifest object SHA-256 @mhash),
 * committed from directory @source (NULL: from memory), was published:
 * keep it for the next commit as @keep says. Failures only cost the
 * next commit a rebuild (warned). dcr_ccache_discard drops the stage of
 * a failed commit.
 */
void dcr_ccache_done(struct dcr_ccache *cc, uint64_t v,
		     const uint8_t *mhash, enum dcr_ccache_keep keep,
		     const char *source);
void dcr_ccache_discard(struct dcr_ccache *cc);

#endif /* DCR_CCACHE_H */
