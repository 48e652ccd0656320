/* SPDX-License-Identifier: MIT */
/*
 * cache_verity.c - sealing a slab with fs-verity at its first pin for a
 * FUSE passthrough open (cache.h, dcr_cache_pin), where the kernel and
 * the cache's file system support it: the kernel then checks every page
 * of the file it reads from the disk against the file's Merkle tree and
 * fails a rotten one with EIO, instead of serving it, so the scrub
 * (cache_scrub.c) passes over a sealed slab.
 *
 * The seal is checked against the mount's own proof: the fs-verity
 * digest (core/verity.h) of the slab's bytes, read right after every
 * chunk of them was proven against the manifest for this pin, must be
 * what FS_IOC_MEASURE_VERITY reports for the tree the kernel built; a
 * slab sealed by an earlier mount is measured and checked the same way.
 * A mismatch takes the slab out of the cache (the file goes the normal
 * way, and is materialized again).
 *
 * Sealing needs the file open for writing nowhere: the slab's own
 * descriptors are turned read-only first (dup3 over them: a sealed file
 * is never written again, and a pinned one is not written anyway). A
 * kernel or file system without fs-verity is found at the first try,
 * on a file of one byte at the first pin, said once, and never tried
 * again in the mount.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/fsverity.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cache_int.h"
#include "common.h"
#include "verity.h"

/* Turn @s's descriptors read-only (sealing fails with ETXTBSY while a
 * writable one is open). Caller holds @s->wlock. 0 or -errno. */
static int slab_readonly(struct dcr_cache *c, struct slab *s)
{
	char path[PATH_MAX];
	int ro, dro = -1;

	dcr_cache_slab_path(c, s->v, s->file, path, sizeof(path));
	ro = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (ro < 0)
		return -errno;
	pthread_mutex_lock(&c->lock);
	slab_unmap(s); /* a writable mapping is a writer too */
	if (s->dfd >= 0)
		dro = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC | O_NOFOLLOW);
	if (dup3(ro, s->fd, O_CLOEXEC) < 0 ||
	    (s->dfd >= 0 && (dro < 0 || dup3(dro, s->dfd, O_CLOEXEC) < 0))) {
		int err = -errno;

		pthread_mutex_unlock(&c->lock);
		close(ro);
		if (dro >= 0)
			close(dro);
		return err;
	}
	pthread_mutex_unlock(&c->lock);
	close(ro);
	if (dro >= 0)
		close(dro);
	return 0;
}

/* Whether @err from FS_IOC_ENABLE_VERITY says the feature is missing
 * (the kernel, the file system, or this file system's mount). */
static bool verity_missing(int err)
{
	return err == ENOTTY || err == EOPNOTSUPP || err == ENOSYS ||
	       err == EINVAL || err == EPERM || err == EACCES;
}

/* Whether sealing works in the cache's directory, tried on a file of
 * one byte (so that a cache without it pays no digest of a whole slab):
 * sets @c->verity, and says once when it does not. */
static void verity_probe(struct dcr_cache *c)
{
	static atomic_uint seq;
	struct fsverity_enable_arg arg = {
		.version = 1,
		.hash_algorithm = FS_VERITY_HASH_ALG_SHA256,
		.block_size = DCR_VERITY_BLOCK,
	};
	char path[PATH_MAX];
	int fd, err = 0;

	snprintf(path, sizeof(path), "%s/.verity-probe.%ld.%u", c->dir,
		 (long)getpid(), atomic_fetch_add(&seq, 1));
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, "x", 1) != 1)
		err = errno ? errno : EIO;
	if (fd >= 0)
		close(fd);
	if (!err) {
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || ioctl(fd, FS_IOC_ENABLE_VERITY, &arg) < 0)
			err = errno;
		if (fd >= 0)
			close(fd);
	}
	unlink(path);
	if (!err) {
		int zero = 0;

		if (atomic_compare_exchange_strong(&c->verity, &zero, 1))
			dcr_info("cache %s: fs-verity on: the kernel checks "
				 "every page of the files it reads through "
				 "passthrough", c->dir);
	} else if (atomic_exchange(&c->verity, -1) >= 0) {
		dcr_info("cache %s: no fs-verity here (%s): files read "
			 "through passthrough are re-checked by the scrub "
			 "(-o scrub) instead", c->dir, strerror(err));
	}
}

int verity_seal(struct dcr_cache *c, struct slab *s, int fd)
{
	struct fsverity_enable_arg arg = {
		.version = 1,
		.hash_algorithm = FS_VERITY_HASH_ALG_SHA256,
		.block_size = DCR_VERITY_BLOCK,
	};
	struct {
		struct fsverity_digest d;
		uint8_t buf[64];
	} m = { .d = { .digest_size = 64 } };
	uint8_t want[DCR_HASH_LEN];
	int ret, err = 0;

	if (atomic_load(&c->verity) == 0)
		verity_probe(c);
	if (atomic_load(&c->verity) < 0)
		return 1;
	/* The digest of the bytes just proven (in the page cache now). */
	ret = dcr_verity_digest_fd(fd, s->size, want);
	if (ret)
		return ret;
	pthread_rwlock_wrlock(&s->wlock);
	if (ioctl(fd, FS_IOC_ENABLE_VERITY, &arg) < 0) {
		err = errno;
		if (err == ETXTBSY && slab_readonly(c, s) == 0)
			err = ioctl(fd, FS_IOC_ENABLE_VERITY, &arg) < 0 ? errno : 0;
	}
	pthread_rwlock_unlock(&s->wlock);
	if (err && err != EEXIST) { /* EEXIST: sealed by an earlier mount */
		if (verity_missing(err)) /* not for this file after all */
			return 1;
		dcr_warn("cache: slab v%" PRIu64 ".f%" PRIu32 ": cannot seal it "
			 "with fs-verity: %s", s->v, s->file, strerror(err));
		return 1;
	}
	if (ioctl(fd, FS_IOC_MEASURE_VERITY, &m) < 0)
		return -errno;
	if (m.d.digest_algorithm != FS_VERITY_HASH_ALG_SHA256 ||
	    m.d.digest_size != DCR_HASH_LEN ||
	    memcmp(m.d.digest, want, DCR_HASH_LEN) != 0) {
		dcr_err("cache: slab v%" PRIu64 ".f%" PRIu32 ": its fs-verity "
			"digest is not that of the bytes just proven; taken out "
			"of the cache", s->v, s->file);
		return -EBADMSG;
	}
	pthread_mutex_lock(&c->lock);
	s->sealed = true;
	c->st.sealed++;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

bool dcr_cache_pin_sealed(struct dcr_cache *c, struct dcr_cache_pin *pin)
{
	struct slab *s = (struct slab *)pin;
	bool sealed;

	pthread_mutex_lock(&c->lock);
	sealed = s->sealed;
	pthread_mutex_unlock(&c->lock);
	return sealed;
}
