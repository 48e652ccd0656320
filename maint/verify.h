/* SPDX-License-Identifier: MIT */
/*
 * verify.h - check that every object some versions (and the chains they
 * build on) need exists and checks out, and trace each damaged object
 * down the chains to the files and chunks it makes unreadable
 * (`dcrfs-ctl verify`, dcrfs-ctl(8)).
 *
 * Shallow: every manifest is read and checked against its parent; every
 * pack holding a needed frame is fetched whole and checked against its
 * name; every needed frame against its SHA-256 (format 1 manifests have
 * none: full frames are decoded and checked against the chunk's SHA-256,
 * delta chunks materialized through the read path). Deep: every file of
 * every target is also materialized through the read path and checked
 * against its digest, on every thread of the CPU budget (core/cpus.h).
 * Signatures: dcr_verify_trust. Works over an index (index.h); one call
 * at a time per index.
 */
#ifndef DCR_VERIFY_H
#define DCR_VERIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "index.h"

/* A pack larger than this is not read into memory (it is reported as
 * "too large to check"). */
#define DCR_VERIFY_PACK_MAX ((size_t)1 << 30)

/** One version's part of what a damaged object makes unreadable. */
struct dcr_verify_hit {
	uint64_t version;
	const char *path;   /* the file (owned by the index); NULL: all of
			       the version (its manifest) */
	uint64_t chunks;    /* of the file's chunks, unreadable */
	uint64_t nchunks;   /* the file's chunks */
};

/** A damaged object. */
struct dcr_verify_damage {
	char *object;       /* its key ("packs/<hex>", "versions/<n>", a
			       layout, or "versions/<n>/<path>" for a file
			       that did not materialize) */
	char *reason;
	struct dcr_verify_hit *hits; /* by version, ascending */
	size_t nhits;       /* 0: no frame a checked version needs */
	bool untrusted;     /* not damage: an intact version that is
			       unsigned or signed by a key the trust file
			       does not hold */
};

/** What verify found about one checked version's signature. */
struct dcr_verify_sig {
	uint64_t version;
	char signer[24];     /* its signature's key id, or "unsigned" */
	/* "valid", "unsigned", "bad" (does not verify), "other-store"
	 * (made for another store), "untrusted" (a key the trust set does
	 * not hold), "wrong-parent" (it binds another manifest than its
	 * parent's); static */
	const char *status;
	bool ok;             /* not damage (valid; unsigned without trust) */
};

/** What dcr_verify found. */
struct dcr_verify_result {
	uint64_t packs_checked, bytes_checked;
	uint64_t *versions;  /* checked (the targets), ascending */
	size_t nversions;
	struct dcr_verify_damage *damage; /* in the order found; a signature
					     that fails is damage of its
					     versions/<n>, after the rest */
	size_t ndamage;      /* 0: everything checks out */
	struct dcr_verify_sig *sigs; /* per readable target, ascending */
	size_t nsigs;
};

/**
 * dcr_verify - check versions @vs[0..n) of @ix (listed ones; n 0: every
 * version), with @deep also materializing every file, reporting progress
 * to @pg (NULL: none; phases "check packs" and "materialize", in bytes).
 * A damaged generation of the layout above the one read is damage too.
 * Returns 0 and fills @r (free with dcr_verify_result_free; the paths
 * point into @ix's manifests) whether or not damage was found:
 * r->ndamage says. -ENOENT if a version of @vs is not listed; other
 * -errno if the check itself could not be made (logged); @r is then
 * empty.
 */
int dcr_verify(struct dcr_index *ix, const uint64_t *vs, size_t n, int deep,
	       const struct dcr_pg *pg, struct dcr_verify_result *r);

struct dcr_trust;

/**
 * dcr_verify_trust - dcr_verify, and every target's signature checked
 * (sign.h) for this store, against @trust unless NULL: its own manifest
 * versions/<n> (never a compacted encoding), and the parent manifest's
 * check it binds against that parent's (when the parent is still in
 * the store). A signature that does not verify, was made for another
 * store or binds another parent manifest is damage; with @trust so is
 * an unsigned version or one signed by a key @trust does not hold.
 * Without @trust an unsigned version is only reported (r->sigs).
 * Returns as dcr_verify.
 */
int dcr_verify_trust(struct dcr_index *ix, const uint64_t *vs, size_t n,
		     int deep, const struct dcr_trust *trust,
		     const struct dcr_pg *pg, struct dcr_verify_result *r);

/** dcr_verify_result_free - free what @r holds (it stays empty). */
void dcr_verify_result_free(struct dcr_verify_result *r);

#endif /* DCR_VERIFY_H */
