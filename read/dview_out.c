/* SPDX-License-Identifier: MIT */
/*
 * dview_out.c - a delta view's output: copies, the read-back check and
 * the check values' readers (see dview_out.h and dview.h).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "fileio.h"
#include "hash.h"
#include "dview.h"
#include "dview_out.h"

int dcr_dview_out_map(int fd, uint64_t size, uint8_t **map)
{
	void *m;

	*map = NULL;
	if (size == 0)
		return 0;
	if (ftruncate(fd, (off_t)size) < 0)
		return DCR_ERR(-errno);
	m = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return DCR_ERR(-errno);
	*map = m;
	return 0;
}

void dcr_dview_out_unmap(uint8_t *map, uint64_t size)
{
	if (map)
		munmap(map, (size_t)size);
}

/* [@off, @off+@len) of a mapping @map widened to whole pages. */
static void page_span(const uint8_t *map, uint64_t off, uint64_t len,
		      uint8_t **p, size_t *n)
{
	const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	const uint64_t a = off / page * page;

	*p = (uint8_t *)map + a;
	*n = (size_t)(DCR_ROUND_UP(off + len, page) - a);
}

int dcr_dview_out_ready(int fd, uint8_t *map, uint64_t off, uint64_t len)
{
	uint8_t *p;
	size_t n;
	int e;

	if (len == 0)
		return 0;
	page_span(map, off, len, &p, &n);
	if (madvise(p, n, MADV_POPULATE_WRITE) == 0)
		return 0;
	e = errno;
	if (e != EINVAL && e != EPERM && e != EFAULT)
		return DCR_ERR(-e);
	/* A kernel that cannot populate (before 5.14), or a page the
	 * kernel could not fill (EFAULT: a store there would have raised
	 * SIGBUS): blocks allocated for the range make the stores safe, or
	 * say why not (ENOSPC). */
	if (fallocate(fd, 0, (off_t)off, (off_t)len) < 0)
		return DCR_ERR(-errno);
	return e == EFAULT ? DCR_ERR(-EIO) : 0;
}

/* Blocks of the view's check values per unit of dcr_dview_check. */
#define CHECK_BLOCKS 64

/* dcr_dview_check's shared state: the output and what its units found. */
struct check {
	const uint8_t *map;
	const struct dcr_dview_piece *sg;
	size_t nseg, nbu;    /* pieces; units of CHECK_BLOCKS blocks */
	uint64_t size, nblk;
	struct dcr_dview_sums *sums;
	int *rc;              /* per unit: 0, -EIO (a piece differs) or -errno */
};

/* Make [@off, @off+@len) of @map resident for reading: -EFAULT where
 * the kernel could not fill a page (where a load would have raised
 * SIGBUS), else 0 (a kernel that cannot populate: the loads fault the
 * pages in themselves). */
static int resident(const uint8_t *map, uint64_t off, uint64_t len)
{
	uint8_t *p;
	size_t n;

	page_span(map, off, len, &p, &n);
	if (len && madvise(p, n, MADV_POPULATE_READ) < 0 && errno == EFAULT)
		return DCR_ERR(-EFAULT);
	return 0;
}

/* par_for body: the check values of CHECK_BLOCKS blocks (unit @i <
 * nbu), or the check of piece @i - nbu against its production hash;
 * hashed from the output's own page cache through its mapping. */
static void check_unit(void *arg, size_t i)
{
	struct check *c = arg;
	uint8_t got[DCR_XXH_LEN];
	int ret;

	if (i < c->nbu) {
		const uint64_t first = i * CHECK_BLOCKS;
		const uint64_t off = first * DCR_DVIEW_BLOCK;
		const uint64_t n = DCR_MIN((uint64_t)CHECK_BLOCKS * DCR_DVIEW_BLOCK,
					   c->size - off);

		ret = resident(c->map, off, n);
		for (uint64_t p = 0, k = 0; !ret && p < n; p += DCR_DVIEW_BLOCK, k++)
			dcr_xxh128(c->map + off + p,
				   (size_t)DCR_MIN((uint64_t)DCR_DVIEW_BLOCK, n - p),
				   c->sums->blk[first + k]);
	} else {
		const struct dcr_dview_piece *sg = &c->sg[i - c->nbu];

		ret = resident(c->map, sg->off, sg->len);
		if (!ret) {
			dcr_xxh128(c->map + sg->off, (size_t)sg->len, got);
			if (memcmp(got, sg->want, DCR_XXH_LEN))
				ret = DCR_ERR(-EIO);
		}
	}
	c->rc[i] = ret;
}

int dcr_dview_check(struct dcr_reader *r, uint64_t from_v, uint64_t to_v,
		    const uint8_t *map, const struct dcr_dview_piece *sg,
		    size_t nseg, uint64_t size, struct dcr_dview_sums *sums)
{
	const uint64_t nblk = (size + DCR_DVIEW_BLOCK - 1) / DCR_DVIEW_BLOCK;
	struct check c = { .map = map, .sg = sg, .nseg = nseg,
			   .size = size, .nblk = nblk, .sums = sums,
			   .nbu = (size_t)((nblk + CHECK_BLOCKS - 1) / CHECK_BLOCKS) };
	uint64_t pos = 0;
	int ret = 0;

	c.rc = calloc(c.nbu + nseg + 1, sizeof(*c.rc));
	sums->blk = calloc(nblk ? nblk : 1, sizeof(*sums->blk));
	if (!c.rc || !sums->blk) {
		ret = DCR_ERR(-ENOMEM);
		goto out;
	}
	for (size_t k = 0; k < nseg; k++) {
		if (sg[k].off != pos)
			break;
		pos += sg[k].len;
	}
	if (pos != size) {
		ret = DCR_ERR(-EIO); /* never: the pieces make the output */
		dcr_err("delta view v%" PRIu64 "..v%" PRIu64 ": its pieces do "
			"not cover its %" PRIu64 " bytes (EIO)", from_v, to_v,
			size);
		goto out;
	}
	dcr_reader_par_for(r, c.nbu + nseg, check_unit, &c);
	for (size_t i = 0; i < c.nbu + nseg && !ret; i++) {
		ret = c.rc[i];
		if (ret == -EIO && i >= c.nbu)
			dcr_err("delta view v%" PRIu64 "..v%" PRIu64 ": %s "
				"read back differs from what was built at byte %"
				PRIu64 " (EIO)", from_v, to_v,
				sg[i - c.nbu].name, sg[i - c.nbu].off);
		else if (ret == -EFAULT)
			dcr_err("delta view v%" PRIu64 "..v%" PRIu64 ": reading it "
				"back: the kernel could not give its pages back "
				"(an I/O error of its local file?) (EIO)", from_v,
				to_v);
		if (ret == -EFAULT)
			ret = -EIO;
	}
	sums->n = nblk;
	sums->size = size;
out:
	if (ret)
		dcr_dview_sums_free(sums);
	free(c.rc);
	return ret;
}

void dcr_dview_sums_free(struct dcr_dview_sums *s)
{
	if (!s)
		return;
	free(s->blk);
	memset(s, 0, sizeof(*s));
}

/* dcr_dview_verify's shared state. */
struct verify {
	int fd;
	const struct dcr_dview_sums *s;
	uint64_t bad;   /* the first block found bad; atomic (min) */
	int err;        /* the first error found; atomic */
};

/* par_for body: blocks [@i * CHECK_BLOCKS, +CHECK_BLOCKS) read (pread:
 * a fresh mapping's page tables cost more than the copy) and checked
 * against their check values; the first that differs lowers v->bad. */
static void verify_unit(void *arg, size_t i)
{
	struct verify *v = arg;
	const uint64_t off = (uint64_t)i * CHECK_BLOCKS * DCR_DVIEW_BLOCK;
	const uint64_t end = DCR_MIN(off + (uint64_t)CHECK_BLOCKS * DCR_DVIEW_BLOCK,
				     v->s->size);
	/* one block's buffer: heap memory reused (dcr_dview_pread) */
	uint8_t *buf = malloc(DCR_DVIEW_BLOCK), got[DCR_XXH_LEN];
	uint64_t bad = off, cur;
	int err = buf ? 0 : DCR_ERR(-ENOMEM);

	for (uint64_t o = off; !err && o < end; o += DCR_DVIEW_BLOCK) {
		const size_t n = (size_t)DCR_MIN((uint64_t)DCR_DVIEW_BLOCK, end - o);

		bad = o;
		err = dcr_pread_full(v->fd, buf, n, (off_t)o);
		if (err == -ENODATA)
			err = DCR_ERR(-EIO);
		if (!err) {
			dcr_xxh128(buf, n, got);
			if (memcmp(got, v->s->blk[o / DCR_DVIEW_BLOCK], DCR_XXH_LEN))
				err = DCR_ERR(-EIO);
		}
	}
	free(buf);
	if (!err)
		return;
	cur = __atomic_load_n(&v->bad, __ATOMIC_RELAXED);
	while (bad < cur &&
	       !__atomic_compare_exchange_n(&v->bad, &cur, bad, false,
					    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	__atomic_compare_exchange_n(&v->err, &(int){ 0 }, err, false,
				    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

int dcr_dview_verify(struct dcr_reader *r, int fd,
		     const struct dcr_dview_sums *s, uint64_t *bad_off)
{
	struct verify v = { .fd = fd, .s = s, .bad = UINT64_MAX };
	struct stat st;

	if (fstat(fd, &st) < 0)
		return DCR_ERR(-errno);
	if ((uint64_t)st.st_size != s->size) {
		*bad_off = s->size;
		return DCR_ERR(-EIO);
	}
	dcr_reader_par_for(r, (size_t)((s->n + CHECK_BLOCKS - 1) / CHECK_BLOCKS),
			   verify_unit, &v);
	if (v.err)
		*bad_off = v.bad;
	return v.err;
}

ssize_t dcr_dview_pread(int fd, const struct dcr_dview_sums *s, void *dst,
			size_t len, uint64_t off, uint64_t *bad_off)
{
	uint64_t end, first, last;
	uint8_t *buf, got[DCR_XXH_LEN];
	int ret;

	if (off >= s->size || len == 0)
		return 0;
	end = off + DCR_MIN((uint64_t)len, s->size - off);
	first = off / DCR_DVIEW_BLOCK * DCR_DVIEW_BLOCK;
	last = DCR_MIN(s->size, (end + DCR_DVIEW_BLOCK - 1) / DCR_DVIEW_BLOCK *
				DCR_DVIEW_BLOCK);
	/* Block by block through one block's buffer (below the mmap
	 * threshold: heap memory reused, not pages faulted in per read);
	 * each block is checked before its bytes are copied out, and a
	 * failed block ends the read with its error. */
	buf = malloc(DCR_DVIEW_BLOCK);
	if (!buf)
		return DCR_ERR(-ENOMEM);
	for (uint64_t o = first; o < last; o += DCR_DVIEW_BLOCK) {
		const size_t n = (size_t)DCR_MIN((uint64_t)DCR_DVIEW_BLOCK, last - o);
		const uint64_t a = DCR_MAX(o, off), z = DCR_MIN(o + n, end);

		ret = dcr_pread_full(fd, buf, n, (off_t)o);
		if (ret) {
			*bad_off = o;
			free(buf);
			return ret == -ENODATA ? DCR_ERR(-EIO) : ret;
		}
		dcr_xxh128(buf, n, got);
		if (memcmp(got, s->blk[o / DCR_DVIEW_BLOCK], DCR_XXH_LEN)) {
			*bad_off = o;
			free(buf);
			return DCR_ERR(-EIO);
		}
		memcpy((uint8_t *)dst + (a - off), buf + (a - o), (size_t)(z - a));
	}
	free(buf);
	return (ssize_t)(end - off);
}
