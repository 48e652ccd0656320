/* SPDX-License-Identifier: MIT */
/*
 * cache_scrub.c - the chunk cache's side of the mount's scrub (cache.h,
 * dcr_cache_scrub_chunk and what goes with it): a slab pinned for FUSE
 * passthrough is read by the kernel without us, so a byte that rots in
 * it after its check at the first passthrough open would be served to
 * every reader of it. The scrub re-reads the chunks of pinned slabs as
 * the kernel would serve them (the page cache where it holds them, else
 * the disk, read around the page cache so that a pass does not push the
 * readers' pages out), checks them against their sub-block sums, and
 * has a chunk that fails rewritten in place with bytes its caller
 * proved - the same bytes the chunk was proven to hold, over the same
 * range, through the page cache: no hole, no truncation, so the opens
 * and mappings the kernel already serves from the slab read right bytes
 * from then on (see notes/fuse-passthrough.md on what must never happen
 * under an open). A chunk that cannot be repaired takes its slab out of
 * the cache instead (unlinked; the pins keep the inode for the opens
 * that hold it), so that the file's next first open materializes it
 * again. The locking notes are in cache_int.h.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "cache_int.h"
#include "common.h"
#include "fileio.h"
#include "hash.h"

/* Whether @len bytes at @p are the chunk @k says (its check value, or
 * its SHA-256 for a format 1 manifest). */
static bool key_proves(const struct dcr_cache_key *k, const uint8_t *p)
{
	uint8_t got[DCR_HASH_LEN];

	if (k->xxh) {
		dcr_xxh128(p, k->len, got);
		return memcmp(got, k->xxh, DCR_XXH_LEN) == 0;
	}
	dcr_sha256(p, k->len, got);
	return dcr_hash_eq(got, k->hash);
}

/* The slab of @pin if @k is one of its chunks, else NULL. */
static struct slab *pin_slab(const struct dcr_cache_pin *pin,
			     const struct dcr_cache_key *k)
{
	struct slab *s = (struct slab *)pin;

	if (!s || s->v != k->v || s->file != k->file || s->size != k->file_size ||
	    s->cs != k->chunk_size || k->len == 0 ||
	    k->len != slot_len(s, k->chunk) || s->fd < 0)
		return NULL;
	return s;
}

struct dcr_cache_pin *dcr_cache_pin_hold(struct dcr_cache *c,
					 struct dcr_cache_pin *pin)
{
	struct slab *s = (struct slab *)pin;

	pthread_mutex_lock(&c->lock);
	s->pins++;
	s->refs++;
	c->st.pinned++;
	pthread_mutex_unlock(&c->lock);
	return pin;
}

int dcr_cache_scrub_chunk(struct dcr_cache *c, struct dcr_cache_pin *pin,
			  const struct dcr_cache_key *k, uint8_t *buf,
			  uint32_t *sub)
{
	struct slab *s = pin_slab(pin, k);
	uint64_t epoch;
	int ret;

	if (!s)
		return DCR_ERR(-EINVAL);
	pthread_mutex_lock(&c->lock);
	epoch = s->epoch;
	pthread_mutex_unlock(&c->lock);
	/* What the kernel serves: resident pages from memory, the rest from
	 * the disk around the page cache (aligned ranges; a file's short
	 * last chunk goes through it). */
	ret = pread_lean(c, s, buf, k->len, k->chunk * s->cs, false);
	if (ret == -EIO || ret == -ENODATA)
		return -EBADMSG; /* the disk itself says so */
	if (ret)
		return ret;
	*sub = UINT32_MAX;
	ret = sums_check(c, s, k, epoch, buf, sub);
	if (ret != -EAGAIN)
		return ret;
	/* No sums for it: the chunk's own check value decides, and its sums
	 * are kept for the next pass. */
	if (!key_proves(k, buf))
		return -EBADMSG;
	sums_keep(c, s, k, epoch, buf);
	return 0;
}

int dcr_cache_repair_chunk(struct dcr_cache *c, struct dcr_cache_pin *pin,
			   const struct dcr_cache_key *k, const uint8_t *data,
			   uint8_t *buf)
{
	struct slab *s = pin_slab(pin, k);
	uint64_t off, epoch;
	int ret;

	if (!s)
		return DCR_ERR(-EINVAL);
	if (!key_proves(k, data))
		return DCR_ERR(-EINVAL); /* never write what is not proven */
	off = k->chunk * s->cs;
	chunks_take(c, s, k->chunk, 1);
	pthread_mutex_lock(&c->lock);
	epoch = s->epoch;
	pthread_mutex_unlock(&c->lock);
	sums_drop(c, s, k->chunk);
	/* Through the page cache (never O_DIRECT: the pages mapped by the
	 * kernel's readers must hold the new bytes), then to the disk. */
	ret = dcr_pwrite_full(s->fd, data, k->len, off);
	if (!ret && fdatasync(s->fd) < 0)
		ret = -errno;
	/* Read back as a reader would, and proven once more. */
	if (!ret)
		ret = dcr_pread_full(s->fd, buf, k->len, off);
	if (!ret && !key_proves(k, buf))
		ret = -EBADMSG;
	if (!ret)
		sums_keep(c, s, k, epoch, buf);
	chunks_give(c, s, k->chunk, 1);
	return ret;
}

void dcr_cache_pin_drop(struct dcr_cache *c, struct dcr_cache_pin *pin)
{
	struct slab *s = (struct slab *)pin;

	pthread_mutex_lock(&c->lock);
	s->verified = false;
	if (!s->dead)
		slab_evict(c, s);
	pthread_mutex_unlock(&c->lock);
}
