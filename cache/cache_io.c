/* SPDX-License-Identifier: MIT */
/*
 * cache_io.c - the chunk cache's reads and writes of chunks (see
 * cache.h): a chunk found, read whole or in part and checked
 * (dcr_cache_read, _read_part, _check, _verify), one that fails punched
 * out; the pins of whole slabs for passthrough opens; the writes
 * (dcr_cache_put). The locking notes are in cache_int.h.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "buf.h"
#include "cache_int.h"
#include "common.h"
#include "fileio.h"
#include "hash.h"

/* Rewrite a slab's mtime (its last use) at most this often. */
#define STAMP_INTERVAL_MS (60 * 1000)

static int64_t now_ms(void)
{
	return dcr_now_ns() / 1000000;
}

static bool aligned(const void *p, uint64_t a, uint64_t b)
{
	return ((uintptr_t)p | a | b) % DCR_CACHE_ALIGN == 0;
}

void chunks_take(struct dcr_cache *c, struct slab *s, uint64_t first,
		 uint64_t n)
{
	bool held;

	pthread_rwlock_rdlock(&s->wlock);
	pthread_mutex_lock(&c->lock);
	do {
		held = false;
		for (uint64_t i = first; i < first + n && !held; i++)
			held = bit(s->busy, s->nbits, i);
		if (held)
			pthread_cond_wait(&s->idle, &c->lock);
	} while (held);
	for (uint64_t i = first; i < first + n; i++)
		bit_set(s->busy, i, true);
	pthread_mutex_unlock(&c->lock);
}

void chunks_give(struct dcr_cache *c, struct slab *s, uint64_t first,
		 uint64_t n)
{
	pthread_mutex_lock(&c->lock);
	for (uint64_t i = first; i < first + n; i++)
		bit_set(s->busy, i, false);
	pthread_cond_broadcast(&s->idle);
	pthread_mutex_unlock(&c->lock);
	pthread_rwlock_unlock(&s->wlock);
}

/* Let chunk @i of @s go that dcr_cache_build held by its busy bit
 * alone. */
static void chunks_end(struct dcr_cache *c, struct slab *s, uint64_t i)
{
	pthread_mutex_lock(&c->lock);
	bit_set(s->busy, i, false);
	pthread_cond_broadcast(&s->idle);
	pthread_mutex_unlock(&c->lock);
}

/*
 * Punch out chunk @i of @s after a failed check or write (it is no
 * longer proven). Caller holds the chunk (chunks_take; see the locking
 * notes).
 */
static void punch(struct dcr_cache *c, struct slab *s, uint64_t i)
{
	uint64_t off = i * s->cs;
	uint64_t len = DCR_ROUND_UP((uint64_t)slot_len(s, i), DCR_CACHE_ALIGN);

	sums_drop(c, s, i);
	pthread_mutex_lock(&c->lock);
	s->verified = false;
	if (s->pins) {
		/* The kernel reads this file for a passthrough open: a hole
		 * would read as zeros there. Unlink it whole instead; its
		 * chunks are fetched again into a new slab. */
		bit_set(s->present, i, false);
		bit_set(s->proven, i, false);
		if (!s->dead)
			slab_evict(c, s);
		pthread_mutex_unlock(&c->lock);
		return;
	}
	if (bit(s->present, s->nbits, i)) {
		bit_set(s->present, i, false);
		if (!s->dead) {
			s->bytes -= DCR_MIN(s->bytes, alloc_len(slot_len(s, i)));
			c->bytes -= DCR_MIN(c->bytes, alloc_len(slot_len(s, i)));
		}
	}
	if (i < s->nbits)
		bit_set(s->proven, i, false);
	pthread_mutex_unlock(&c->lock);
	if (!atomic_load(&c->no_punch) &&
	    fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      (off_t)off, (off_t)len) < 0 &&
	    (errno == EOPNOTSUPP || errno == ENOSYS) &&
	    !atomic_exchange(&c->no_punch, true))
		dcr_warn("cache %s: the file system cannot punch holes; "
			 "chunks that fail their check stay allocated and "
			 "are checked again at every mount", c->dir);
}

/* ------------------------------------------------------------- reads */

/*
 * Read @n bytes at @off of slab @s into @dst. A range the page cache
 * holds is copied from it; one that is not resident is read around the
 * page cache (O_DIRECT) when @dst, @off and @n are aligned, so that
 * reading a base chunk once neither allocates and fills page-cache pages
 * for it nor starts read-ahead (which a RWF_NOWAIT read would, and the
 * next chunks would then be read twice). Else (or with @pagecache) a
 * plain read.
 */
int pread_lean(struct dcr_cache *c, struct slab *s, void *dst,
		      size_t n, uint64_t off, bool pagecache)
{
	int dfd, ret, res;

	if (pagecache || n == 0 || atomic_load(&c->no_direct) ||
	    !aligned(dst, n, off))
		return dcr_pread_full(s->fd, dst, n, off);
	res = dcr_resident(s->fd, off, n);
	if (res == 1)
		return dcr_pread_full(s->fd, dst, n, off);
	if (res < 0) {
		/* No cachestat(2) (before Linux 6.5): ask by reading. */
		struct iovec iov = { dst, n };
		ssize_t got = preadv2(s->fd, &iov, 1, (off_t)off, RWF_NOWAIT);

		if (got == (ssize_t)n)
			return 0;
		if (got < 0 && errno != EAGAIN)
			return dcr_pread_full(s->fd, dst, n, off);
	}
	dfd = slab_dfd(c, s);
	if (dfd < 0)
		return dcr_pread_full(s->fd, dst, n, off);
	ret = dcr_pread_full(dfd, dst, n, off);
	if (ret == -EINVAL) {
		atomic_store(&c->no_direct, true);
		ret = dcr_pread_full(s->fd, dst, n, off);
	}
	return ret;
}

/* Whether @len bytes at @p are the chunk @k says (see cache.h). */
static bool proves(const struct dcr_cache_key *k, const void *p, size_t len)
{
	uint8_t got[DCR_HASH_LEN];

	if (k->xxh) {
		dcr_xxh128(p, len, got);
		return memcmp(got, k->xxh, DCR_XXH_LEN) == 0;
	}
	dcr_sha256(p, len, got);
	return dcr_hash_eq(got, k->hash);
}

/*
 * Read chunk @k whole from @s and prove it; copy the slice [@off,
 * @off+@n) into @dst. The chunk is read into @whole if given (@k->len
 * bytes, aligned), else into @dst when the slice is the whole chunk,
 * else into a scratch buffer. With @keep, the sums of its sub-blocks are
 * kept (under the slab opening @epoch) for the partial reads that may
 * follow (sums_read). 0, -EBADMSG (it fails its check) or -errno.
 */
static int verify_read(struct dcr_cache *c, struct slab *s,
		       const struct dcr_cache_key *k, uint32_t off, void *dst,
		       size_t n, bool pagecache, uint8_t *whole, bool keep,
		       uint64_t epoch)
{
	uint8_t *buf;
	int ret;

	if (whole) {
		buf = whole;
	} else if (off == 0 && n == k->len) {
		buf = dst; /* read in place; dst is unspecified on a miss */
	} else {
		buf = dcr_thread_buf(DCR_TBUF_SCRATCH, k->len);
		if (!buf)
			return DCR_ERR(-ENOMEM);
	}
	ret = pread_lean(c, s, buf, k->len, k->chunk * s->cs, pagecache);
	if (ret == -EIO || ret == -ENODATA)
		ret = -EBADMSG;
	if (!ret && !proves(k, buf, k->len))
		ret = -EBADMSG;
	if (!ret && keep)
		sums_keep(c, s, k, epoch, buf);
	if (!ret && buf != dst && n)
		memcpy(dst, buf + off, n);
	return ret;
}

enum { GET_COPY, GET_CHECK, GET_VERIFY };

/*
 * Find chunk @k and make sure it is good: GET_COPY: read it whole and
 * check it (every time: a byte may rot after its first use), and copy
 * bytes [@off, @off+@n) into @dst; GET_CHECK: only prove it, through the
 * page cache, unless this instance proved it already; GET_VERIFY: the
 * same, proven or not. 0 on a hit, 1 on
 * a hit proven now, -ENOENT on a miss (a chunk that fails is punched
 * out, or its pinned slab unlinked), or another -errno on a local I/O
 * error.
 */
static int chunk_get(struct dcr_cache *c, const struct dcr_cache_key *k,
		     int how, uint32_t off, void *dst, size_t n,
		     uint8_t *whole, bool *filled)
{
	int64_t now = now_ms();
	bool present, proven, due;
	bool part = how == GET_COPY && n && n < k->len;
	uint64_t epoch;
	struct slab *s;
	int ret;

	if ((uint64_t)off + n > k->len || k->len == 0)
		return DCR_ERR(-EINVAL);
	s = slab_get(c, k, false, &ret);
	if (!s)
		goto out_miss;
	pthread_mutex_lock(&c->lock);
	present = bit(s->present, s->nbits, k->chunk);
	proven = bit(s->proven, s->nbits, k->chunk);
	epoch = s->epoch;
	if (present && now > s->used_ms)
		s->used_ms = now;
	due = present && now - s->stamped_ms >= STAMP_INTERVAL_MS;
	if (due)
		s->stamped_ms = now;
	pthread_mutex_unlock(&c->lock);
	if (!present) {
		slab_put(c, s);
		ret = -ENOENT;
		goto out_miss;
	}
	if (due)
		stamp(s, now);

	ret = 0;
	if (part) {
		/* A part of a chunk proven whole before (in this instance, or
		 * an earlier one that left its sums): check only the
		 * sub-blocks it covers, against its sums. */
		ret = sums_read(c, s, k, epoch, off, dst, n);
		/* None kept, or a sub-block failed (the bytes, or a sum that
		 * rotted in its file): read it whole and prove it below, which
		 * punches it if the bytes are bad and keeps new sums if not. */
		if (ret == -EAGAIN || ret == -EBADMSG)
			ret = 1;
	} else if (proven && how == GET_CHECK) {
		ret = 0;
	} else {
		ret = 1;
	}
	if (ret == 1) {
		/* Every copy out of a slab is checked, proven or not: a byte
		 * may rot on disk after the chunk's first use. */
		/* The sums are kept for the partial reads that may follow:
		 * those of this read, and of a later mount after a prefetch
		 * proved the chunk (GET_CHECK). */
		ret = verify_read(c, s, k, off, dst, n, how != GET_COPY,
				  whole, part || how == GET_CHECK, epoch);
		if (ret == 0 && filled)
			*filled = whole != NULL;
		if (ret == 0 && !proven) {
			pthread_mutex_lock(&c->lock);
			bit_set(s->proven, k->chunk, true);
			pthread_mutex_unlock(&c->lock);
			ret = 1;
		}
	}
	if (ret == -EBADMSG) {
		char path[PATH_MAX];
		bool rewritten;

		/* A write may have stored the chunk while we read (writes
		 * hold the chunk): then what we read was that write in
		 * progress, not damage, and it reads right now. Another
		 * reader may have punched it already (no longer present). */
		chunks_take(c, s, k->chunk, 1);
		sums_drop(c, s, k->chunk);
		pthread_mutex_lock(&c->lock);
		rewritten = !bit(s->present, s->nbits, k->chunk);
		pthread_mutex_unlock(&c->lock);
		if (!rewritten)
			rewritten = verify_read(c, s, k, 0, NULL, 0, false,
							 NULL, false, 0) == 0;
		if (!rewritten)
			punch(c, s, k->chunk);
		chunks_give(c, s, k->chunk, 1);
		if (!rewritten) {
			dcr_cache_slab_path(c, s->v, s->file, path,
					    sizeof(path));
			dcr_warn("cache: %s: chunk %" PRIu64 " failed its "
				 "check; punched out, it will be fetched "
				 "again", path, k->chunk);
		}
		slab_put(c, s);
		pthread_mutex_lock(&c->lock);
		c->st.corrupt += !rewritten;
		c->st.misses++;
		pthread_mutex_unlock(&c->lock);
		return -ENOENT;
	}
	slab_put(c, s);
	if (ret < 0) {
		dcr_warn("cache: slab v%" PRIu64 ".f%" PRIu32 " chunk %"
			 PRIu64 ": %s", k->v, k->file, k->chunk,
			 dcr_strerror(ret));
		goto out_error;
	}
	pthread_mutex_lock(&c->lock);
	c->st.hits++;
	pthread_mutex_unlock(&c->lock);
	return ret;

out_miss:
	/* Not cached, or cached for an older index of the version
	 * (-ESTALE, fenced): a miss either way. A slab that exists but
	 * cannot be opened is a local error (slab_get logged it). */
	if (ret == -ENOENT || ret == -ESTALE) {
		pthread_mutex_lock(&c->lock);
		c->st.misses++;
		pthread_mutex_unlock(&c->lock);
		return -ENOENT;
	}
out_error:
	pthread_mutex_lock(&c->lock);
	c->st.io_errors += ret != -ENOMEM;
	pthread_mutex_unlock(&c->lock);
	return ret;
}

int dcr_cache_read(struct dcr_cache *c, const struct dcr_cache_key *k,
		   uint32_t off, void *dst, size_t n)
{
	int ret = chunk_get(c, k, GET_COPY, off, dst, n, NULL, NULL);

	return ret > 0 ? 0 : ret;
}

int dcr_cache_read_part(struct dcr_cache *c, const struct dcr_cache_key *k,
			uint32_t off, void *dst, size_t n, void *whole)
{
	bool filled = false;
	int ret = chunk_get(c, k, GET_COPY, off, dst, n, whole, &filled);

	if (ret < 0)
		return ret;
	return filled ? 1 : 0;
}

int dcr_cache_check(struct dcr_cache *c, const struct dcr_cache_key *k)
{
	return chunk_get(c, k, GET_CHECK, 0, NULL, 0, NULL, NULL);
}

int dcr_cache_verify(struct dcr_cache *c, const struct dcr_cache_key *k)
{
	int ret = chunk_get(c, k, GET_VERIFY, 0, NULL, 0, NULL, NULL);

	return ret > 0 ? 0 : ret;
}

/* ------------------------------------------------------------- pins */

/* A pin is its slab: a pinned slab holds a reference, on the table or
 * dead (unlinked) until the pin goes. */
struct dcr_cache_pin;

bool dcr_cache_pin_verified(struct dcr_cache *c,
			    const struct dcr_cache_key *k)
{
	struct slab *s;
	bool v;
	int ret;

	s = slab_get(c, k, false, &ret);
	if (!s)
		return false;
	pthread_mutex_lock(&c->lock);
	v = s->verified;
	pthread_mutex_unlock(&c->lock);
	slab_put(c, s);
	return v;
}

int dcr_cache_pin(struct dcr_cache *c, const struct dcr_cache_key *k,
		  unsigned flags, struct dcr_cache_pin **pin)
{
	char path[PATH_MAX];
	struct stat a, b;
	struct slab *s;
	bool whole = true, first;
	int ret, fd;

	*pin = NULL;
	s = slab_get(c, k, false, &ret);
	if (!s)
		return ret;
	pthread_mutex_lock(&c->lock);
	for (uint64_t i = 0; i < s->nbits && whole; i++)
		whole = bit(s->present, s->nbits, i) &&
			bit(s->proven, s->nbits, i);
	whole = whole && s->size == k->file_size && !s->dead;
	first = whole && s->pins == 0;
	if (whole) {
		s->pins++; /* from here no put, punch or budget touches it */
		c->st.pinned++;
		if (flags & DCR_CACHE_PIN_VERIFIED)
			s->verified = true;
	}
	pthread_mutex_unlock(&c->lock);
	if (!whole) {
		slab_put(c, s);
		return -EAGAIN;
	}
	*pin = (struct dcr_cache_pin *)s;
	/* The kernel reads the backing file to its own end: cut the padding
	 * a direct write of the last chunk left past the file's (no reader
	 * of ours looks there, and nothing else maps it before the first
	 * pin). */
	if (first && fstat(s->fd, &b) == 0 && (uint64_t)b.st_size > s->size) {
		pthread_rwlock_wrlock(&s->wlock);
		if (ftruncate(s->fd, (off_t)s->size) < 0)
			dcr_warn("cache: slab v%" PRIu64 ".f%" PRIu32 ": %s",
				 s->v, s->file, strerror(errno));
		pthread_rwlock_unlock(&s->wlock);
	}
	/* A read-only descriptor of the very inode that was proven. */
	dcr_cache_slab_path(c, s->v, s->file, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 || fstat(fd, &a) < 0 || fstat(s->fd, &b) < 0 ||
	    a.st_ino != b.st_ino || a.st_dev != b.st_dev ||
	    (uint64_t)a.st_size != s->size) {
		ret = fd < 0 ? -errno : -ESTALE;
		if (fd >= 0)
			close(fd);
		dcr_cache_unpin(c, *pin);
		*pin = NULL;
		return ret;
	}
	if (first && (flags & DCR_CACHE_PIN_VERIFIED) &&
	    verity_seal(c, s, fd) == -EBADMSG) {
		close(fd);
		pthread_mutex_lock(&c->lock);
		s->verified = false;
		if (!s->dead)
			slab_evict(c, s);
		pthread_mutex_unlock(&c->lock);
		dcr_cache_unpin(c, *pin);
		*pin = NULL;
		return -EAGAIN;
	}
	return fd;
}

void dcr_cache_unpin(struct dcr_cache *c, struct dcr_cache_pin *pin)
{
	struct slab *s = (struct slab *)pin;

	if (!s)
		return;
	pthread_mutex_lock(&c->lock);
	s->pins--;
	if (s->dead && !s->pins) {
		c->dead_pinned -= DCR_MIN(c->dead_pinned, s->dead_bytes);
		s->dead_bytes = 0;
	}
	c->st.pinned--;
	pthread_mutex_unlock(&c->lock);
	slab_put(c, s);
	evict(c, NULL, 0); /* what it held may have kept the budget full */
}

/* ------------------------------------------------------------ writes */

/*
 * Make @len bytes at @off of @s's mapping @m ready for stores: their
 * blocks allocated, then their pages faulted in by the kernel
 * (MADV_POPULATE_WRITE says what a store into a page it cannot fill
 * would have raised as SIGBUS). 0; -errno of fallocate; or -EAGAIN when
 * the kernel refused to populate (before Linux 5.14 it cannot: mappings
 * are then off for this cache). What fallocate allocated reads as zeros
 * and is not marked present.
 */
static int map_ready(struct dcr_cache *c, struct slab *s, uint8_t *m,
		     uint64_t off, uint64_t len)
{
	const size_t page = (size_t)sysconf(_SC_PAGESIZE);

	if (fallocate(s->fd, 0, (off_t)off, (off_t)len) < 0)
		return -errno;
	if (madvise(m + off, DCR_ROUND_UP((size_t)len, page),
		    MADV_POPULATE_WRITE) < 0) {
		if (errno == EINVAL || errno == EPERM)
			atomic_store(&c->no_map, true);
		return -EAGAIN;
	}
	return 0;
}

/*
 * Write chunks @k[0..@n) (consecutive, held by the caller, none proven)
 * of @s from @data in one call: around the page cache with @direct
 * where the file system allows (whole blocks: past the last chunk's
 * end is padding), else through it, where one call for the run lets
 * the page cache make folios as large as the run. 0, or -errno (the
 * chunks are then punched out).
 */
static int write_run(struct dcr_cache *c, struct slab *s,
		     const struct dcr_cache_key *k, const void *const *data,
		     size_t n, bool direct, bool map)
{
	const uint64_t off = k[0].chunk * (uint64_t)s->cs;
	const uint64_t len = (uint64_t)(n - 1) * s->cs + k[n - 1].len;
	struct iovec iov[DCR_CACHE_RUN_MAX];
	int ret = 0, dfd = -1;
	uint8_t *m;

	for (size_t j = 0; j < n; j++) {
		sums_drop(c, s, k[j].chunk); /* none if unproven: hygiene */
		iov[j].iov_base = (void *)data[j];
		iov[j].iov_len = k[j].len;
	}
	/* Into the mapping, its pages made resident first (map_ready),
	 * so the copies below cannot fault. Any refusal: write(2). */
	if (map && !direct && (m = slab_map(c, s)) &&
	    map_ready(c, s, m, off, len) == 0) {
		for (size_t j = 0; j < n; j++)
			memcpy(m + off + (uint64_t)j * s->cs, data[j],
			       k[j].len);
		return 0;
	}
	if (direct)
		dfd = slab_dfd(c, s);
	if (dfd >= 0) {
		/* Only a file's last chunk is shorter than the stride. */
		iov[n - 1].iov_len = DCR_ROUND_UP((size_t)k[n - 1].len,
						  DCR_CACHE_ALIGN);
		ret = dcr_pwritev_full(dfd, iov, (int)n, off);
		iov[n - 1].iov_len = k[n - 1].len;
		if (ret == -EINVAL) {
			atomic_store(&c->no_direct, true);
			dfd = -1;
		}
	}
	if (dfd < 0)
		ret = dcr_pwritev_full(s->fd, iov, (int)n, off);
	if (ret)
		for (size_t j = 0; j < n; j++)
			punch(c, s, k[j].chunk);
	return ret;
}

/* Chunk @chunk (@len bytes) of @s was written and proven: present,
 * proven, counted once, the slab used now. Caller holds c->lock. */
static void stored_locked(struct dcr_cache *c, struct slab *s,
			  uint64_t chunk, uint32_t len)
{
	if (!bit(s->present, s->nbits, chunk) && !s->dead) {
		s->bytes += alloc_len(len);
		c->bytes += alloc_len(len);
	}
	bit_set(s->present, chunk, true);
	bit_set(s->proven, chunk, true);
	s->used_ms = DCR_MAX(s->used_ms, now_ms());
	c->st.inserts++;
}

int dcr_cache_put_run(struct dcr_cache *c, const struct dcr_cache_key *k,
		      const void *const *data, size_t n, unsigned flags)
{
	bool direct = flags & DCR_CACHE_PUT_DIRECT;
	uint64_t need = 0, first;
	struct slab *s;
	int ret = 0, room;
	size_t j, e;

	if (n == 0 || n > DCR_CACHE_RUN_MAX)
		return n ? DCR_ERR(-EINVAL) : 0;
	for (j = 0; j < n; j++) {
		if (k[j].v != k[0].v || k[j].file != k[0].file ||
		    k[j].gen != k[0].gen || k[j].chunk != k[0].chunk + j ||
		    k[j].len == 0)
			return DCR_ERR(-EINVAL);
		direct = direct && aligned(data[j], 0, 0);
		need += alloc_len(k[j].len);
	}
	first = k[0].chunk;
	s = slab_get(c, &k[0], true, &ret);
	if (!s && ret == -ESTALE)
		return ret; /* built for an older index of the version */
	if (!s && is_full(ret))
		goto err_full;
	if (!s)
		goto err_log;
	if (first + n > s->nbits) {
		slab_put(c, s);
		return DCR_ERR(-EINVAL);
	}
	room = fs_room(c, s, need);
	if (room < 0) {
		slab_put(c, s);
		return room; /* not cached: the file system holds no more */
	}
	/* Writes of other chunks of the slab go on meanwhile. */
	chunks_take(c, s, first, n);
	for (j = 0; j < n; j = e) {
		/* Chunks there and proven stay as they are (readers may be
		 * splicing them): the runs between them are written. */
		pthread_mutex_lock(&c->lock);
		while (j < n && bit(s->proven, s->nbits, first + j))
			j++;
		for (e = j; e < n && !bit(s->proven, s->nbits, first + e); e++)
			;
		pthread_mutex_unlock(&c->lock);
		if (j == n)
			break;
		/* Through the mapping only with room to spare: near a full
		 * file system, write(2) fails each write alone (see
		 * DCR_CACHE_PUT_MAP). */
		ret = write_run(c, s, &k[j], &data[j], e - j, direct,
				(flags & DCR_CACHE_PUT_MAP) && room == 1);
		if (ret)
			break;
		pthread_mutex_lock(&c->lock);
		for (size_t x = j; x < e; x++)
			stored_locked(c, s, first + x, k[x].len);
		pthread_mutex_unlock(&c->lock);
	}
	chunks_give(c, s, first, n);
	if (ret) {
		if (is_full(ret))
			fs_room(c, s, need); /* for the next chunks */
		slab_put(c, s);
		if (is_full(ret))
			goto err_full;
		goto err_log;
	}
	if (room == 1)
		atomic_store(&c->fs_short, false); /* the incident is over */
	evict(c, s, 0);
	slab_put(c, s);
	return 0;

err_full:
	say_short(c); /* the budget reached, not this chunk's error */
	return ret;

err_log:
	dcr_warn("cache: cannot store chunk %" PRIu64 " of slab v%" PRIu64
		 ".f%" PRIu32 ": %s", k[j < n ? j : 0].chunk, k[0].v,
		 k[0].file, dcr_strerror(ret));
	return ret;
}

/* ------------------------------------------------ chunks built in place */

/* A chunk's place held for building it there (dcr_cache_build). */
struct dcr_cache_slot {
	struct slab *s; /* referenced until the end */
	uint64_t chunk;
	uint32_t len;
};

int dcr_cache_build(struct dcr_cache *c, const struct dcr_cache_key *k,
		    uint8_t **out, struct dcr_cache_slot **slot)
{
	struct dcr_cache_slot *x;
	bool proven;
	uint64_t off;
	uint8_t *m;
	struct slab *s;
	int ret = 0;

	*out = NULL;
	*slot = NULL;
	/* Not while the file system is short of the budget: the write
	 * path evicts and says it (fs_room), once per chunk, not twice. */
	if (k->len == 0 || atomic_load(&c->no_map) ||
	    atomic_load(&c->fs_short))
		return -EAGAIN;
	x = malloc(sizeof(*x));
	if (!x)
		return DCR_ERR(-ENOMEM);
	s = slab_get(c, k, true, &ret);
	if (!s) {
		free(x);
		return ret == -ESTALE ? ret : -EAGAIN; /* dcr_cache_put says */
	}
	/* Only with room to spare (see DCR_CACHE_PUT_MAP): near a full file
	 * system the write(2) of dcr_cache_put fails each chunk alone. */
	if (k->chunk >= s->nbits || fs_room(c, s, alloc_len(k->len)) != 1 ||
	    !(m = slab_map(c, s))) {
		slab_put(c, s);
		free(x);
		return -EAGAIN;
	}
	/* Its busy bit, not @wlock: the build spans threads (see the
	 * locking notes in cache_int.h). */
	pthread_mutex_lock(&c->lock);
	while (bit(s->busy, s->nbits, k->chunk))
		pthread_cond_wait(&s->idle, &c->lock);
	proven = bit(s->proven, s->nbits, k->chunk);
	if (!proven)
		bit_set(s->busy, k->chunk, true);
	pthread_mutex_unlock(&c->lock);
	if (proven) {
		slab_put(c, s);
		free(x);
		return -EEXIST;
	}
	off = k->chunk * (uint64_t)s->cs;
	sums_drop(c, s, k->chunk); /* none if unproven: hygiene */
	/* Resident first, so that the stores of the build cannot fault
	 * into SIGBUS. */
	ret = map_ready(c, s, m, off, k->len);
	if (ret) {
		ret = is_full(ret) ? ret : -EAGAIN;
		/* Nothing was written, nothing marked present. */
		chunks_end(c, s, k->chunk);
		slab_put(c, s);
		free(x);
		return ret;
	}
	x->s = s;
	x->chunk = k->chunk;
	x->len = k->len;
	*out = m + off;
	*slot = x;
	return 0;
}

void dcr_cache_build_end(struct dcr_cache *c, struct dcr_cache_slot *x,
			 bool ok)
{
	struct slab *s;

	if (!x)
		return;
	s = x->s;
	if (ok) {
		pthread_mutex_lock(&c->lock);
		stored_locked(c, s, x->chunk, x->len);
		pthread_mutex_unlock(&c->lock);
		atomic_store(&c->fs_short, false); /* room to spare: no
						      incident */
	} else {
		/* Unproven bytes are never served: out of the file. */
		pthread_rwlock_rdlock(&s->wlock);
		punch(c, s, x->chunk);
		pthread_rwlock_unlock(&s->wlock);
	}
	chunks_end(c, s, x->chunk);
	if (ok)
		evict(c, s, 0);
	slab_put(c, s);
	free(x);
}

int dcr_cache_put(struct dcr_cache *c, const struct dcr_cache_key *k,
		  const void *data, unsigned flags)
{
	if (k->len == 0)
		return 0;
	return dcr_cache_put_run(c, k, &data, 1, flags);
}
