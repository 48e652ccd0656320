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
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "fileio.h"
#include "hash.h"
#include "dview.h"
#include "dview_out.h"

int dcr_dview_copy(int in, uint64_t off, uint64_t len, int out, uint64_t *pos)
{
	loff_t src = (loff_t)off, dst = (loff_t)*pos;
	static const size_t step = 64u << 20;

	while (len) {
		ssize_t n = copy_file_range(in, &src, out, &dst,
					    (size_t)DCR_MIN(len, (uint64_t)step), 0);
		if (n < 0 && (errno == EXDEV || errno == ENOSYS ||
			      errno == EINVAL || errno == EOPNOTSUPP)) {
			uint8_t buf[1u << 16];
			size_t m = (size_t)DCR_MIN(len, (uint64_t)sizeof(buf));
			int ret = dcr_pread_full(in, buf, m, (off_t)src);

			if (ret == 0)
				ret = dcr_pwrite_full(out, buf, m, (off_t)dst);
			if (ret)
				return ret;
			n = (ssize_t)m;
			src += (loff_t)m;
			dst += (loff_t)m;
		} else if (n < 0) {
			return DCR_ERR(-errno);
		} else if (n == 0) {
			return DCR_ERR(-EIO);
		}
		len -= (uint64_t)n;
	}
	*pos = (uint64_t)dst;
	return 0;
}

/* Blocks of the view's check values per unit of dcr_dview_check. */
#define CHECK_BLOCKS 64

/* dcr_dview_check's shared state: the output and what its units found. */
struct check {
	int fd;
	const struct dcr_dview_piece *sg;
	size_t nseg, nbu;    /* pieces; units of CHECK_BLOCKS blocks */
	uint64_t size, nblk;
	struct dcr_dview_sums *sums;
	int *rc;              /* per unit: 0, -EIO (a piece differs) or -errno */
};

/* par_for body: the check values of CHECK_BLOCKS blocks (unit @i <
 * nbu), or the check of piece @i - nbu against its production hash. */
static void check_unit(void *arg, size_t i)
{
	struct check *c = arg;
	/* One block at a time: a buffer below the mmap threshold, reused
	 * from the heap, not fresh pages faulted in per unit. */
	uint8_t *buf = malloc(DCR_DVIEW_BLOCK);
	int ret = buf ? 0 : DCR_ERR(-ENOMEM);

	if (!ret && i < c->nbu) {
		const uint64_t first = i * CHECK_BLOCKS;
		const uint64_t off = first * DCR_DVIEW_BLOCK;
		const size_t n = (size_t)DCR_MIN((uint64_t)CHECK_BLOCKS * DCR_DVIEW_BLOCK,
						 c->size - off);

		for (size_t p = 0, k = 0; !ret && p < n; p += DCR_DVIEW_BLOCK, k++) {
			const size_t m = DCR_MIN((size_t)DCR_DVIEW_BLOCK, n - p);

			ret = dcr_pread_full(c->fd, buf, m, (off_t)(off + p));
			if (!ret)
				dcr_xxh128(buf, m, c->sums->blk[first + k]);
		}
	} else if (!ret) {
		const struct dcr_dview_piece *sg = &c->sg[i - c->nbu];
		struct dcr_xxh_ctx *h = dcr_xxh_new();
		uint64_t off = sg->off, left = sg->len;
		uint8_t got[DCR_XXH_LEN];

		ret = h ? 0 : DCR_ERR(-ENOMEM);
		while (!ret && left) {
			size_t n = (size_t)DCR_MIN(left, (uint64_t)DCR_DVIEW_BLOCK);

			ret = dcr_pread_full(c->fd, buf, n, (off_t)off);
			if (!ret)
				dcr_xxh_update(h, buf, n);
			off += n;
			left -= n;
		}
		if (!ret) {
			dcr_xxh_final(h, got);
			if (memcmp(got, sg->want, DCR_XXH_LEN))
				ret = DCR_ERR(-EIO);
		}
		dcr_xxh_free(h);
	}
	free(buf);
	c->rc[i] = ret;
}

int dcr_dview_check(struct dcr_reader *r, uint64_t from_v, uint64_t to_v,
		    int fd, const struct dcr_dview_piece *sg, size_t nseg,
		    uint64_t size, struct dcr_dview_sums *sums)
{
	const uint64_t nblk = (size + DCR_DVIEW_BLOCK - 1) / DCR_DVIEW_BLOCK;
	struct check c = { .fd = fd, .sg = sg, .nseg = nseg,
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
		else if (ret && ret != -ENOMEM)
			dcr_err("delta view v%" PRIu64 "..v%" PRIu64 ": reading it "
				"back: %s", from_v, to_v, strerror(-ret));
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

int dcr_dview_verify(int fd, const struct dcr_dview_sums *s, uint64_t *bad_off)
{
	uint8_t *buf, got[DCR_XXH_LEN];
	struct stat st;
	int ret = 0;

	if (fstat(fd, &st) < 0)
		return DCR_ERR(-errno);
	if ((uint64_t)st.st_size != s->size) {
		*bad_off = s->size;
		return DCR_ERR(-EIO);
	}
	/* one block's buffer: heap memory reused (dcr_dview_pread) */
	buf = malloc(DCR_DVIEW_BLOCK);
	if (!buf)
		return DCR_ERR(-ENOMEM);
	for (uint64_t o = 0; !ret && o < s->size; o += DCR_DVIEW_BLOCK) {
		const size_t n = (size_t)DCR_MIN((uint64_t)DCR_DVIEW_BLOCK, s->size - o);

		ret = dcr_pread_full(fd, buf, n, (off_t)o);
		if (ret == -ENODATA)
			ret = DCR_ERR(-EIO);
		if (!ret) {
			dcr_xxh128(buf, n, got);
			if (memcmp(got, s->blk[o / DCR_DVIEW_BLOCK], DCR_XXH_LEN))
				ret = DCR_ERR(-EIO);
		}
		if (ret)
			*bad_off = o;
	}
	free(buf);
	return ret;
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
