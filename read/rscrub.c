/* SPDX-License-Identifier: MIT */
/*
 * rscrub.c - the read path's side of the mount's scrub
 * (dcr_reader_scrub_backing, reader.h): a file open through FUSE
 * passthrough is read by the kernel from its pinned cache file, which
 * dcr_reader_backing_open checked whole before the file's first such
 * open, and never again on the kernel's reads. Each chunk of it is read
 * again from the cache file and checked (cache/cache_scrub.c); a chunk
 * that fails is built again from its chain, as a read that missed would
 * build it (fetched, decoded and proven against the manifest, but
 * without reading its own rotten copy), and written over the rotten one
 * in place, so that the opens and mappings the kernel already serves
 * from that file read right bytes from then on. If it cannot be built
 * or written, the file is taken out of the cache: its next first open
 * takes the normal path, which materializes it again.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "chunk.h"
#include "common.h"
#include "reader_int.h"

/* Build chunk @chunk of file @file of @rv (reference @ref, @clen bytes)
 * into @out from its chain, not from its own place in the cache. 0 or
 * -errno (logged). */
static int rebuild(struct dcr_reader *r, struct rver *rv, uint32_t file,
		   uint64_t chunk, const struct dcr_catalog_chunk *ref,
		   uint32_t clen, uint8_t *out)
{
	struct piece p = {
		.w = { .rv = rv, .file = file, .chunk = chunk },
		.ref = *ref,
		.clen = clen,
		.n = clen,
		.dst = out,
	};
	struct rreq q = { .rebuild = true };

	if (r->read_timeout_ns)
		q.deadline = dcr_mono_ns() + r->read_timeout_ns;
	return materialize_batch(r, &p, 1, 1, &q);
}

/*
 * Check chunk @i of entry @idx of version @v (tree @tree) in @pin, and
 * repair it if it fails. 0 (good or repaired), -ENOENT/-ESTALE (the
 * version or its tree is gone), or -errno (the file was dropped from the
 * cache, or a local error); *@len: the chunk's length, 0 past the end.
 */
static int scrub_one(struct dcr_reader *r, uint64_t v, uint32_t tree,
		     uint32_t idx, struct dcr_cache_pin *pin, uint64_t i,
		     uint8_t **buf, size_t *cap, uint32_t *len,
		     struct dcr_scrub_counts *cnt)
{
	struct dcr_catalog_chunk ref;
	struct dcr_cache_key k;
	struct rver *rv;
	uint32_t sub;
	int ret;

	*len = 0;
	ret = get_ver(r, v, &rv);
	if (ret)
		return ret;
	if (rv->tree != tree)
		return -ESTALE;
	if (idx == 0 || idx >= rv->info.nentries ||
	    rv->entries[idx].type != DCR_FT_REG)
		return -ENOENT;
	if (i >= dcr_chunk_count(rv->entries[idx].size, rv->chunk_size))
		return 0;
	ret = ref_get(r, rv, idx - 1, i, &ref);
	if (ret)
		return ret;
	cache_key(&k, rv, idx - 1, i, &ref);
	if (*cap < 2 * (size_t)k.len) {
		/* two chunks: what was read, and what was built */
		void *b;

		if (posix_memalign(&b, DCR_CACHE_ALIGN, 2 * (size_t)k.len))
			return DCR_ERR(-ENOMEM);
		free(*buf);
		*buf = b;
		*cap = 2 * (size_t)k.len;
	}
	ret = dcr_cache_scrub_chunk(r->cache, pin, &k, *buf, &sub);
	*len = k.len;
	if (ret != -EBADMSG)
		return ret;

	cnt->rotten++;
	if (sub == UINT32_MAX)
		dcr_err("scrub: %s chunk %" PRIu64 " of v%" PRIu64 " failed "
			"its check in the cache (its hash); rebuilding it",
			rv->m.files[k.file].path, i, v);
	else
		dcr_err("scrub: %s chunk %" PRIu64 " of v%" PRIu64 " failed "
			"its check in the cache (the 64 KiB at %" PRIu64
			" in the chunk); rebuilding it",
			rv->m.files[k.file].path, i, v, (uint64_t)sub << 16);
	ret = rebuild(r, rv, k.file, i, &ref, k.len, *buf + k.len);
	if (!ret)
		ret = dcr_cache_repair_chunk(r->cache, pin, &k, *buf + k.len,
					     *buf);
	if (!ret) {
		cnt->repaired++;
		dcr_warn("scrub: %s chunk %" PRIu64 " of v%" PRIu64
			 " repaired in place: open files and their mappings "
			 "read the committed bytes again",
			 rv->m.files[k.file].path, i, v);
		return 0;
	}
	dcr_cache_pin_drop(r->cache, pin);
	cnt->dropped++;
	dcr_err("scrub: %s chunk %" PRIu64 " of v%" PRIu64 " cannot be "
		"repaired (%s): the file is taken out of the cache, and "
		"read again from the store once its open descriptors are "
		"closed", rv->m.files[k.file].path, i, v, dcr_strerror(ret));
	return ret < 0 ? ret : DCR_ERR(-EIO);
}

int dcr_reader_scrub_backing(struct dcr_reader *r, uint64_t v, uint32_t tree,
			     uint32_t idx, struct dcr_cache_pin *pin,
			     dcr_scrub_pace_fn pace, void *arg,
			     struct dcr_scrub_counts *cnt)
{
	uint8_t *buf = NULL;
	size_t cap = 0;
	uint32_t len;
	int ret = 0;

	if (dcr_cache_pin_sealed(r->cache, pin))
		return 0; /* fs-verity: the kernel checks every page */
	for (uint64_t i = 0;; i++) {
		read_enter(r);
		ret = scrub_one(r, v, tree, idx, pin, i, &buf, &cap, &len, cnt);
		read_leave(r);
		if (ret || !len)
			break;
		cnt->bytes += len;
		if (pace && pace(arg, len)) {
			ret = 1;
			break;
		}
	}
	if (ret == 0)
		cnt->files++;
	free(buf);
	return ret;
}
