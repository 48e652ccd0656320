/* SPDX-License-Identifier: MIT */
/*
 * testchain.h - a chain of versions committed for a unit test: each
 * commit diffs the source directory against the previous version's tree
 * (kept in a parent directory, as dcrfs-commit's cache keeps it) and keeps
 * the new version's manifest. Header-only, like testutil.h; include it
 * after testutil.h.
 */
#ifndef DCR_TESTCHAIN_H
#define DCR_TESTCHAIN_H

#include "commit.h"
#include "manifest.h"
#include "objstore.h"

/**
 * struct tu_chain - the state of a chain: the store, the directories
 * (source, the parent's tree, a staging area) and the versions so far,
 * whose manifests are @man[1..@nver] (an array the caller sizes).
 */
struct tu_chain {
	struct dcr_store *st;
	const char *src, *par, *stage;
	struct dcr_manifest *man;
	uint64_t nver;
};

/**
 * tu_chain_commit - commit @c->src as the next version with chunks of
 * @chunk_size on @jobs threads: its manifest into @c->man, its tree
 * becomes the parent of the next. Fails the test on any error.
 */
static inline void tu_chain_commit(struct tu_chain *c, uint32_t chunk_size,
				   int jobs)
{
	struct dcr_commit_result r;
	uint64_t parent = c->nver;
	struct dcr_commit_opts o = {
		.parent = parent,
		.parent_manifest = parent ? &c->man[parent] : NULL,
		.parent_dir = c->par,
		.stage_dir = c->stage,
		.chunk_size = chunk_size,
		.jobs = jobs,
	};

	assert_int_equal(tu_sh("rm -rf '%s' && mkdir -p '%s'", c->stage,
			       c->stage), 0);
	assert_int_equal(dcr_commit(c->st, c->src, &o, &r), 0);
	assert_true(r.version == parent + 1);
	assert_int_equal(dcr_store_get_manifest(c->st, r.version,
						&c->man[r.version]), 0);
	assert_int_equal(tu_sh("rm -rf '%s' && mv '%s' '%s'", c->par,
			       c->stage, c->par), 0);
	c->nver = r.version;
}

#endif /* DCR_TESTCHAIN_H */
