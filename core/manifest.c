/* SPDX-License-Identifier: MIT */
/*
 * manifest.c - encode, decode and validate version manifests.
 *
 * Body (before zstd), all integers LEB128 varints unless noted:
 *
 *   version, parent, zigzag(ctime_ns), chunk_size
 *   npacks, npacks x 32-byte pack hash
 *   nfiles, then per file, in path order:
 *     path length, path bytes, type (u8), mode, size, zigzag(mtime_ns)
 *     regular files only:
 *       sha256 (32 bytes; from format 3 dcr_file_digest),
 *       base + 1 (0 = no base)
 *       per chunk (count derived from size and chunk_size):
 *         kind (u8); unless SAME: pack index, offset, length,
 *         and from format 2 the frame's SHA-256 (32 bytes);
 *         chunk hash (32 bytes); from format 2 the chunk's XXH3-128
 *         (16 bytes)
 *   format 5: nmeta, then per entry key length, key, value length, value
 *
 * After the checksum, a format 5 manifest with DCR_MAN_SIGNED carries its
 * signature block (manifest.h); its meaning is sign.c's.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "chunk.h"
#include "common.h"
#include "frame.h"
#include "manifest.h"

static const uint8_t man_magic[8] = { 'D', 'C', 'R', 'M', 'A', 'N', 'I', 'F' };
#define MAN_HDR_LEN 32
/* Smallest encoded chunk entry (SAME: kind + hash) and file entry. */
#define MIN_CHUNK_ENC (1 + DCR_HASH_LEN)
#define MIN_FILE_ENC 6
/* Decompressed/compressed ratio beyond which a body is refused. */
#define MAX_BODY_RATIO 64

static uint64_t zigzag(int64_t v)
{
	return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static int64_t unzigzag(uint64_t v)
{
	return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

void dcr_manifest_free(struct dcr_manifest *m)
{
	if (!m)
		return;
	for (uint32_t i = 0; i < m->nfiles; i++) {
		free(m->files[i].path);
		free(m->files[i].chunks);
	}
	free(m->files);
	free(m->packs);
	for (uint32_t i = 0; i < m->nmeta; i++) {
		free(m->meta[i].key);
		free(m->meta[i].value);
	}
	free(m->meta);
	memset(m, 0, sizeof(*m));
}

int dcr_manifest_dup(struct dcr_manifest *dst, const struct dcr_manifest *src)
{
	*dst = *src;
	dst->packs = NULL;
	dst->files = NULL;
	dst->meta = NULL;
	dst->nfiles = dst->npacks = dst->nmeta = 0;
	if (src->npacks &&
	    !(dst->packs = malloc((size_t)src->npacks * sizeof(*src->packs))))
		goto err_free;
	if (src->npacks)
		memcpy(dst->packs, src->packs, (size_t)src->npacks * sizeof(*src->packs));
	dst->npacks = src->npacks;
	if (src->nfiles && !(dst->files = calloc(src->nfiles, sizeof(*dst->files))))
		goto err_free;
	for (uint32_t i = 0; i < src->nfiles; i++) {
		const struct dcr_file *f = &src->files[i];
		struct dcr_file *g = &dst->files[i];

		*g = *f;
		g->chunks = NULL;
		if (!(g->path = strdup(f->path)))
			goto err_free;
		dst->nfiles = i + 1; /* freed with what it holds */
		if (f->nchunks &&
		    !(g->chunks = malloc(f->nchunks * sizeof(*f->chunks))))
			goto err_free;
		if (f->nchunks)
			memcpy(g->chunks, f->chunks, f->nchunks * sizeof(*f->chunks));
	}
	dst->nfiles = src->nfiles;
	for (uint32_t i = 0; i < src->nmeta; i++)
		if (dcr_manifest_set_meta(dst, src->meta[i].key, src->meta[i].value))
			goto err_free;
	return 0;
err_free:
	dcr_manifest_free(dst);
	return DCR_ERR(-ENOMEM);
}

bool dcr_meta_key_valid(const char *key)
{
	size_t n = strlen(key);

	if (n == 0 || n > DCR_META_KEY_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = key[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

const char *dcr_manifest_get_meta(const struct dcr_manifest *m,
				  const char *key)
{
	for (uint32_t i = 0; i < m->nmeta; i++)
		if (!strcmp(m->meta[i].key, key))
			return m->meta[i].value;
	return NULL;
}

int dcr_manifest_copy_provenance(struct dcr_manifest *dst,
				 const struct dcr_manifest *src)
{
	for (uint32_t i = 0; i < dst->nmeta; i++) {
		free(dst->meta[i].key);
		free(dst->meta[i].value);
	}
	free(dst->meta);
	dst->meta = NULL;
	dst->nmeta = 0;
	for (uint32_t i = 0; i < src->nmeta; i++) {
		int ret = dcr_manifest_set_meta(dst, src->meta[i].key,
						src->meta[i].value);
		if (ret)
			return ret;
	}
	memcpy(dst->check, src->check, DCR_HASH_LEN);
	dst->has_sig = src->has_sig;
	dst->sig = src->sig;
	dst->cparent = src->cparent;
	return 0;
}

int dcr_manifest_set_meta(struct dcr_manifest *m, const char *key,
			  const char *value)
{
	uint32_t i = 0;

	if (!dcr_meta_key_valid(key)) {
		dcr_err("metadata key \"%s\": 1 to %d of A-Z a-z 0-9 . _ -",
			key, DCR_META_KEY_MAX);
		return DCR_ERR(-EINVAL);
	}
	if (strlen(value) > DCR_META_VALUE_MAX) {
		dcr_err("metadata %s: the value is longer than %d bytes", key,
			DCR_META_VALUE_MAX);
		return DCR_ERR(-EINVAL);
	}
	char *v = strdup(value);
	if (!v)
		return DCR_ERR(-ENOMEM);
	while (i < m->nmeta && strcmp(m->meta[i].key, key) < 0)
		i++;
	if (i < m->nmeta && !strcmp(m->meta[i].key, key)) {
		free(m->meta[i].value);
		m->meta[i].value = v;
		return 0;
	}
	if (m->nmeta == DCR_META_MAX) {
		dcr_err("metadata %s: more than %d entries", key, DCR_META_MAX);
		free(v);
		return DCR_ERR(-EINVAL);
	}
	struct dcr_meta *nm = realloc(m->meta, (m->nmeta + 1) * sizeof(*nm));
	char *k = strdup(key);
	if (!nm || !k) {
		if (nm)
			m->meta = nm;
		free(k);
		free(v);
		return DCR_ERR(-ENOMEM);
	}
	m->meta = nm;
	memmove(nm + i + 1, nm + i, (m->nmeta - i) * sizeof(*nm));
	nm[i].key = k;
	nm[i].value = v;
	m->nmeta++;
	return 0;
}

int dcr_path_valid(const char *path, size_t len)
{
	if (len == 0 || len > DCR_PATH_MAX || path[0] == '/' ||
	    path[len - 1] == '/')
		return 0;
	if (memchr(path, 0, len))
		return 0;
	const char *p = path, *end = path + len;
	while (p < end) {
		const char *slash = memchr(p, '/', (size_t)(end - p));
		const char *ce = slash ? slash : end;
		size_t cl = (size_t)(ce - p);
		if (cl == 0 || (cl == 1 && p[0] == '.') ||
		    (cl == 2 && p[0] == '.' && p[1] == '.') || cl > 255)
			return 0;
		p = ce + 1;
	}
	return 1;
}

struct find_key {
	const struct dcr_manifest *m;
	const char *path;
	size_t len;
};

/* File @i's path against the key's @len bytes, as strcmp orders them. */
static int find_cmp(const struct find_key *k, size_t i)
{
	const char *p = k->m->files[i].path;
	size_t plen = strlen(p);
	int c = memcmp(p, k->path, DCR_MIN(plen, k->len));

	return c ? c : plen < k->len ? -1 : plen > k->len ? 1 : 0;
}

static bool find_before(const void *arg, size_t i)
{
	return find_cmp(arg, i) < 0;
}

int64_t dcr_manifest_find_n(const struct dcr_manifest *m, uint32_t n,
			    const char *path, size_t len)
{
	const struct find_key k = { .m = m, .path = path, .len = len };
	size_t hi = DCR_MIN(n, m->nfiles);
	size_t i = dcr_partition_point(hi, find_before, &k);

	return i < hi && !find_cmp(&k, i) ? (int64_t)i : -1;
}

int64_t dcr_manifest_find(const struct dcr_manifest *m, const char *path)
{
	return dcr_manifest_find_n(m, m->nfiles, path, strlen(path));
}

int dcr_file_digest(const struct dcr_file *f, uint8_t out[DCR_HASH_LEN])
{
	struct dcr_sha256_ctx *c = dcr_sha256_new();

	if (!c)
		return DCR_ERR(-ENOMEM);
	for (uint64_t i = 0; i < f->nchunks; i++)
		dcr_sha256_update(c, f->chunks[i].hash, DCR_HASH_LEN);
	dcr_sha256_final(c, out);
	dcr_sha256_free(c);
	return 0;
}

struct dcr_file_hasher {
	struct dcr_sha256_ctx *file;  /* the bytes (< 3) or the list (3) */
	struct dcr_sha256_ctx *chunk; /* the current chunk (3) */
	uint32_t chunk_size;          /* 0 before format 3 */
	uint64_t in_chunk;            /* bytes of the current chunk */
};

struct dcr_file_hasher *dcr_file_hasher_new(uint32_t format,
					    uint32_t chunk_size)
{
	struct dcr_file_hasher *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	h->chunk_size = format >= 3 ? chunk_size : 0;
	h->file = dcr_sha256_new();
	h->chunk = h->chunk_size ? dcr_sha256_new() : NULL;
	if (!h->file || (h->chunk_size && !h->chunk)) {
		dcr_file_hasher_free(h);
		return NULL;
	}
	return h;
}

/* Close the current chunk into the list. */
static void hasher_end_chunk(struct dcr_file_hasher *h)
{
	uint8_t d[DCR_HASH_LEN];

	dcr_sha256_final(h->chunk, d);
	dcr_sha256_reset(h->chunk);
	dcr_sha256_update(h->file, d, sizeof(d));
	h->in_chunk = 0;
}

void dcr_file_hasher_update(struct dcr_file_hasher *h, const void *data,
			    size_t len)
{
	const uint8_t *p = data;

	if (!h->chunk_size) {
		dcr_sha256_update(h->file, p, len);
		return;
	}
	while (len) {
		size_t n = (size_t)DCR_MIN((uint64_t)len,
					   h->chunk_size - h->in_chunk);
		dcr_sha256_update(h->chunk, p, n);
		h->in_chunk += n;
		p += n;
		len -= n;
		if (h->in_chunk == h->chunk_size)
			hasher_end_chunk(h);
	}
}

void dcr_file_hasher_final(struct dcr_file_hasher *h,
			   uint8_t out[DCR_HASH_LEN])
{
	if (h->chunk_size && h->in_chunk)
		hasher_end_chunk(h);
	dcr_sha256_final(h->file, out);
	dcr_sha256_reset(h->file);
}

void dcr_file_hasher_free(struct dcr_file_hasher *h)
{
	if (!h)
		return;
	dcr_sha256_free(h->file);
	dcr_sha256_free(h->chunk);
	free(h);
}

const char *dcr_file_digest_kind(uint32_t format)
{
	return format >= 3 ? "sha256-of-chunks" : "sha256";
}

static int parent_dir_listed(const struct dcr_manifest *m, const char *path)
{
	const char *slash = strrchr(path, '/');

	if (!slash)
		return 1;
	int64_t i = dcr_manifest_find_n(m, m->nfiles, path, (size_t)(slash - path));
	return i >= 0 && m->files[i].type == DCR_FT_DIR;
}

static int meta_valid(const struct dcr_manifest *m)
{
	if (m->nmeta > DCR_META_MAX)
		return 0;
	for (uint32_t i = 0; i < m->nmeta; i++) {
		if (!dcr_meta_key_valid(m->meta[i].key) ||
		    strlen(m->meta[i].value) > DCR_META_VALUE_MAX ||
		    (i && strcmp(m->meta[i - 1].key, m->meta[i].key) >= 0))
			return 0;
	}
	return 1;
}

int dcr_manifest_validate(const struct dcr_manifest *m)
{
	if (!meta_valid(m))
		return DCR_ERR(-EINVAL);
	if ((m->format && (m->format < DCR_MANIFEST_FORMAT_MIN ||
			   m->format > DCR_MANIFEST_FORMAT)) ||
	    m->version == 0 || m->version > DCR_VERSION_MAX ||
	    m->parent >= m->version ||
	    !dcr_chunk_size_valid(m->chunk_size))
		return DCR_ERR(-EBADMSG);
	for (uint32_t i = 0; i < m->nfiles; i++) {
		const struct dcr_file *f = &m->files[i];
		if (!f->path || !dcr_path_valid(f->path, strlen(f->path)))
			return DCR_ERR(-EBADMSG);
		if (i > 0 && strcmp(m->files[i - 1].path, f->path) >= 0)
			return DCR_ERR(-EBADMSG);
		if (!parent_dir_listed(m, f->path))
			return DCR_ERR(-EBADMSG);
		if (f->mode & ~07777u)
			return DCR_ERR(-EBADMSG);
		if (f->type == DCR_FT_DIR) {
			if (f->size || f->nchunks || f->base != DCR_NO_BASE)
				return DCR_ERR(-EBADMSG);
			continue;
		}
		if (f->type != DCR_FT_REG ||
		    f->nchunks != dcr_chunk_count(f->size, m->chunk_size))
			return DCR_ERR(-EBADMSG);
		for (uint64_t c = 0; c < f->nchunks; c++) {
			const struct dcr_chunk_ref *r = &f->chunks[c];
			switch (r->kind) {
			case DCR_CK_SAME:
				if (f->base == DCR_NO_BASE || !m->parent)
					return DCR_ERR(-EBADMSG);
				break;
			case DCR_CK_DELTA:
				if (f->base == DCR_NO_BASE || !m->parent)
					return DCR_ERR(-EBADMSG);
				/* fallthrough */
			case DCR_CK_FULL:
				if (r->pack >= m->npacks ||
				    r->len < DCR_FRAME_HDR_LEN ||
				    r->len > DCR_FRAME_HDR_LEN + DCR_CHUNK_MAX + (DCR_CHUNK_MAX >> 4) ||
				    r->off > UINT64_MAX - r->len)
					return DCR_ERR(-EBADMSG);
				break;
			default:
				return DCR_ERR(-EBADMSG);
			}
		}
	}
	return 0;
}

int dcr_manifest_check_parent(const struct dcr_manifest *m,
			      const struct dcr_manifest *p)
{
	if (m->parent != p->version)
		return DCR_ERR(-EBADMSG);
	for (uint32_t i = 0; i < m->nfiles; i++) {
		const struct dcr_file *f = &m->files[i];
		if (f->base == DCR_NO_BASE)
			continue;
		/* Chunks can only refer to the parent's at the same chunk size. */
		if (f->base >= p->nfiles || m->chunk_size != p->chunk_size)
			return DCR_ERR(-EBADMSG);
		const struct dcr_file *b = &p->files[f->base];
		if (b->type != DCR_FT_REG || b->size != f->size)
			return DCR_ERR(-EBADMSG);
		for (uint64_t c = 0; c < f->nchunks; c++)
			if (f->chunks[c].kind == DCR_CK_SAME &&
			    (!dcr_hash_eq(f->chunks[c].hash, b->chunks[c].hash) ||
			     (m->format >= 2 && p->format >= 2 &&
			      memcmp(f->chunks[c].xxh, b->chunks[c].xxh,
				     DCR_XXH_LEN) != 0)))
				return DCR_ERR(-EBADMSG);
	}
	return 0;
}

int dcr_manifest_needs_parent(const struct dcr_manifest *m)
{
	for (uint32_t f = 0; f < m->nfiles; f++)
		for (uint64_t k = 0; k < m->files[f].nchunks; k++)
			if (m->files[f].chunks[k].kind != DCR_CK_FULL)
				return 1;
	return 0;
}

int dcr_manifest_same_files(const struct dcr_manifest *a,
			    const struct dcr_manifest *b, unsigned flags)
{
	bool times = flags & DCR_SAME_TIMES;

	if (a->chunk_size != b->chunk_size || a->nfiles != b->nfiles ||
	    (times && a->ctime_ns != b->ctime_ns))
		return 0;
	/* Files are sorted by path: the same set is the same sequence. */
	for (uint32_t i = 0; i < a->nfiles; i++) {
		const struct dcr_file *f = &a->files[i], *g = &b->files[i];
		if (strcmp(f->path, g->path) || f->type != g->type ||
		    f->mode != g->mode || f->size != g->size ||
		    (times && f->mtime_ns != g->mtime_ns) ||
		    !dcr_hash_eq(f->sha256, g->sha256))
			return 0;
	}
	return 1;
}

int dcr_manifest_same_meaning(uint32_t a, uint32_t b)
{
	/* 4 is 3's bytes and meaning (what it adds is in the frames), and
	 * 5 is 4's (what it adds is metadata and a signature) */
	return (a >= 4 ? 3 : a) == (b >= 4 ? 3 : b);
}

int dcr_manifest_same_content(const struct dcr_manifest *a,
			      const struct dcr_manifest *b)
{
	if (a->version != b->version ||
	    !dcr_manifest_same_meaning(a->format, b->format) ||
	    !dcr_manifest_same_files(a, b, DCR_SAME_TIMES))
		return 0;
	for (uint32_t i = 0; i < a->nfiles; i++) {
		const struct dcr_file *f = &a->files[i], *g = &b->files[i];
		if (f->nchunks != g->nchunks)
			return 0;
		for (uint64_t c = 0; c < f->nchunks; c++)
			if (!dcr_hash_eq(f->chunks[c].hash, g->chunks[c].hash) ||
			    memcmp(f->chunks[c].xxh, g->chunks[c].xxh, DCR_XXH_LEN))
				return 0;
	}
	return 1;
}

/* ------------------------------------------------------------ encode */

#define TRY(expr)                     \
	do {                          \
		int ret_ = (expr);    \
		if (ret_)             \
			return ret_;  \
	} while (0)

static int encode_body(const struct dcr_manifest *m, uint32_t fmt,
		       struct dcr_buf *b)
{
	TRY(dcr_buf_put_varint(b, m->version));
	TRY(dcr_buf_put_varint(b, m->parent));
	TRY(dcr_buf_put_varint(b, zigzag(m->ctime_ns)));
	TRY(dcr_buf_put_varint(b, m->chunk_size));
	TRY(dcr_buf_put_varint(b, m->npacks));
	for (uint32_t i = 0; i < m->npacks; i++)
		TRY(dcr_buf_append(b, m->packs[i], DCR_HASH_LEN));
	TRY(dcr_buf_put_varint(b, m->nfiles));
	for (uint32_t i = 0; i < m->nfiles; i++) {
		const struct dcr_file *f = &m->files[i];
		size_t pl = strlen(f->path);
		TRY(dcr_buf_put_varint(b, pl));
		TRY(dcr_buf_append(b, f->path, pl));
		TRY(dcr_buf_putc(b, f->type));
		TRY(dcr_buf_put_varint(b, f->mode));
		TRY(dcr_buf_put_varint(b, f->size));
		TRY(dcr_buf_put_varint(b, zigzag(f->mtime_ns)));
		if (f->type != DCR_FT_REG)
			continue;
		TRY(dcr_buf_append(b, f->sha256, DCR_HASH_LEN));
		TRY(dcr_buf_put_varint(b, f->base == DCR_NO_BASE ? 0 : (uint64_t)f->base + 1));
		for (uint64_t c = 0; c < f->nchunks; c++) {
			const struct dcr_chunk_ref *r = &f->chunks[c];
			TRY(dcr_buf_putc(b, r->kind));
			if (r->kind != DCR_CK_SAME) {
				TRY(dcr_buf_put_varint(b, r->pack));
				TRY(dcr_buf_put_varint(b, r->off));
				TRY(dcr_buf_put_varint(b, r->len));
				if (fmt >= 2)
					TRY(dcr_buf_append(b, r->fhash,
							   DCR_HASH_LEN));
			}
			TRY(dcr_buf_append(b, r->hash, DCR_HASH_LEN));
			if (fmt >= 2)
				TRY(dcr_buf_append(b, r->xxh, DCR_XXH_LEN));
		}
	}
	if (fmt < 5)
		return 0;
	TRY(dcr_buf_put_varint(b, m->nmeta));
	for (uint32_t i = 0; i < m->nmeta; i++) {
		size_t kl = strlen(m->meta[i].key), vl = strlen(m->meta[i].value);
		TRY(dcr_buf_put_varint(b, kl));
		TRY(dcr_buf_append(b, m->meta[i].key, kl));
		TRY(dcr_buf_put_varint(b, vl));
		TRY(dcr_buf_append(b, m->meta[i].value, vl));
	}
	return 0;
}

int dcr_manifest_encode(const struct dcr_manifest *m, struct dcr_buf *out)
{
	return dcr_manifest_encode_flags(m, 0, out, NULL);
}

int dcr_manifest_encode_flags(const struct dcr_manifest *m, uint32_t flags,
			      struct dcr_buf *out, uint8_t *check)
{
	uint32_t fmt = m->format ? m->format : DCR_MANIFEST_FORMAT_PLAIN;
	struct dcr_buf body;
	int ret = dcr_manifest_validate(m);

	if (ret || (flags & ~DCR_MAN_SIGNED))
		return DCR_ERR(-EINVAL);
	if (flags || m->nmeta) {
		/* what format 5 adds has format 3's meaning of digests */
		if (fmt < 3)
			return DCR_ERR(-EINVAL);
		fmt = 5;
	}
	dcr_buf_init(&body, DCR_MANIFEST_BODY_MAX);
	ret = encode_body(m, fmt, &body);
	if (ret)
		goto err_free_body;
	size_t bound = ZSTD_compressBound(body.len);
	size_t start = out->len;
	ret = dcr_buf_reserve(out, start + MAN_HDR_LEN + bound + DCR_HASH_LEN);
	if (ret)
		goto err_free_body;
	uint8_t *h = out->data + start;
	size_t clen = ZSTD_compress(h + MAN_HDR_LEN, bound, body.data, body.len, 3);
	if (ZSTD_isError(clen)) {
		dcr_err("zstd: %s", ZSTD_getErrorName(clen));
		ret = DCR_ERR(-EIO);
		goto err_free_body;
	}
	memcpy(h, man_magic, 8);
	dcr_put_le32(h + 8, fmt);
	dcr_put_le32(h + 12, flags);
	dcr_put_le64(h + 16, body.len);
	dcr_put_le64(h + 24, clen);
	dcr_sha256(h, MAN_HDR_LEN + clen, h + MAN_HDR_LEN + clen);
	if (check)
		memcpy(check, h + MAN_HDR_LEN + clen, DCR_HASH_LEN);
	out->len = start + MAN_HDR_LEN + clen + DCR_HASH_LEN;
	ret = 0;
err_free_body:
	dcr_buf_free(&body);
	return ret;
}

/* Signature block: alg, public key, signature, parent check, store id. */
#define SIG_FIXED (1 + DCR_SIG_PUB_LEN + DCR_SIG_LEN + DCR_HASH_LEN + 1)

int dcr_manifest_put_sig(const struct dcr_sig *s, struct dcr_buf *out)
{
	size_t il = strlen(s->store_id);
	uint8_t l = (uint8_t)il;

	if (il == 0 || il > DCR_SIG_STORE_ID_MAX)
		return DCR_ERR(-EINVAL);
	TRY(dcr_buf_putc(out, s->alg));
	TRY(dcr_buf_append(out, s->pub, DCR_SIG_PUB_LEN));
	TRY(dcr_buf_append(out, s->sig, DCR_SIG_LEN));
	TRY(dcr_buf_append(out, s->parent_check, DCR_HASH_LEN));
	TRY(dcr_buf_putc(out, l));
	return dcr_buf_append(out, s->store_id, il);
}

int dcr_sig_decode(const void *data, size_t n, struct dcr_sig *s)
{
	const uint8_t *p = data;

	memset(s, 0, sizeof(*s));
	if (n < SIG_FIXED + 1)
		return DCR_ERR(-EBADMSG);
	size_t il = p[SIG_FIXED - 1];
	if (il == 0 || il > DCR_SIG_STORE_ID_MAX || n != SIG_FIXED + il ||
	    memchr(p + SIG_FIXED, 0, il))
		return DCR_ERR(-EBADMSG);
	s->alg = p[0];
	memcpy(s->pub, p + 1, DCR_SIG_PUB_LEN);
	memcpy(s->sig, p + 1 + DCR_SIG_PUB_LEN, DCR_SIG_LEN);
	memcpy(s->parent_check, p + 1 + DCR_SIG_PUB_LEN + DCR_SIG_LEN,
	       DCR_HASH_LEN);
	memcpy(s->store_id, p + SIG_FIXED, il);
	s->store_id[il] = 0;
	return 0;
}

/* ------------------------------------------------------------ decode */

static int decode_meta(struct dcr_rd *r, struct dcr_manifest *m)
{
	uint64_t n, kl, vl;
	const uint8_t *p;

	TRY(dcr_rd_varint_max(r, DCR_META_MAX, &n));
	if (n && !(m->meta = calloc(n, sizeof(*m->meta))))
		return DCR_ERR(-ENOMEM);
	for (uint64_t i = 0; i < n; i++) {
		struct dcr_meta *e = &m->meta[i];
		m->nmeta = (uint32_t)i + 1; /* so free() sees what was built */
		TRY(dcr_rd_varint_max(r, DCR_META_KEY_MAX, &kl));
		TRY(dcr_rd_bytes(r, kl, &p));
		if (!(e->key = strndup((const char *)p, kl)))
			return DCR_ERR(-ENOMEM);
		TRY(dcr_rd_varint_max(r, DCR_META_VALUE_MAX, &vl));
		TRY(dcr_rd_bytes(r, vl, &p));
		if (memchr(p, 0, vl) || memchr(e->key, 0, kl) ||
		    strlen(e->key) != kl)
			return DCR_ERR(-EBADMSG);
		if (!(e->value = strndup((const char *)p, vl)))
			return DCR_ERR(-ENOMEM);
	}
	return 0; /* keys: dcr_manifest_validate */
}

static int decode_file(struct dcr_rd *r, const struct dcr_manifest *m,
		       struct dcr_file *f)
{
	uint64_t pl, mode, size, mt, base;
	const uint8_t *p;
	uint8_t type;

	TRY(dcr_rd_varint_max(r, DCR_PATH_MAX, &pl));
	TRY(dcr_rd_bytes(r, pl, &p));
	if (!dcr_path_valid((const char *)p, pl))
		return DCR_ERR(-EBADMSG);
	if (!(f->path = malloc(pl + 1)))
		return DCR_ERR(-ENOMEM);
	memcpy(f->path, p, pl);
	f->path[pl] = 0;
	TRY(dcr_rd_u8(r, &type));
	TRY(dcr_rd_varint_max(r, 07777, &mode));
	TRY(dcr_rd_varint(r, &size));
	TRY(dcr_rd_varint(r, &mt));
	f->type = type;
	f->mode = (uint32_t)mode;
	f->size = size;
	f->mtime_ns = unzigzag(mt);
	f->base = DCR_NO_BASE;
	if (type == DCR_FT_DIR)
		return size ? DCR_ERR(-EBADMSG) : 0;
	if (type != DCR_FT_REG)
		return DCR_ERR(-EBADMSG);
	TRY(dcr_rd_bytes(r, DCR_HASH_LEN, &p));
	memcpy(f->sha256, p, DCR_HASH_LEN);
	TRY(dcr_rd_varint_max(r, UINT32_MAX, &base));
	f->base = base ? (uint32_t)(base - 1) : DCR_NO_BASE;
	uint64_t n = dcr_chunk_count(size, m->chunk_size);
	/* Bound the allocation by the bytes actually present. */
	if (n > dcr_rd_left(r) / MIN_CHUNK_ENC)
		return DCR_ERR(-EBADMSG);
	f->nchunks = n;
	if (n && !(f->chunks = calloc(n, sizeof(*f->chunks))))
		return DCR_ERR(-ENOMEM);
	for (uint64_t c = 0; c < n; c++) {
		struct dcr_chunk_ref *cr = &f->chunks[c];
		uint64_t pack, off, len;
		TRY(dcr_rd_u8(r, &cr->kind));
		if (cr->kind > DCR_CK_DELTA)
			return DCR_ERR(-EBADMSG);
		if (cr->kind != DCR_CK_SAME) {
			TRY(dcr_rd_varint_max(r, UINT32_MAX, &pack));
			TRY(dcr_rd_varint(r, &off));
			TRY(dcr_rd_varint_max(r, UINT32_MAX, &len));
			cr->pack = (uint32_t)pack;
			cr->off = off;
			cr->len = (uint32_t)len;
			if (m->format >= 2) {
				TRY(dcr_rd_bytes(r, DCR_HASH_LEN, &p));
				memcpy(cr->fhash, p, DCR_HASH_LEN);
			}
		}
		TRY(dcr_rd_bytes(r, DCR_HASH_LEN, &p));
		memcpy(cr->hash, p, DCR_HASH_LEN);
		if (m->format >= 2) {
			TRY(dcr_rd_bytes(r, DCR_XXH_LEN, &p));
			memcpy(cr->xxh, p, DCR_XXH_LEN);
		}
	}
	return 0;
}

static int decode_body(struct dcr_rd *r, struct dcr_manifest *m)
{
	uint64_t v, cs, n;
	const uint8_t *p;

	TRY(dcr_rd_varint(r, &m->version));
	TRY(dcr_rd_varint(r, &m->parent));
	TRY(dcr_rd_varint(r, &v));
	m->ctime_ns = unzigzag(v);
	TRY(dcr_rd_varint_max(r, DCR_CHUNK_MAX, &cs));
	if (!dcr_chunk_size_valid(cs))
		return DCR_ERR(-EBADMSG);
	m->chunk_size = (uint32_t)cs;
	TRY(dcr_rd_varint_max(r, dcr_rd_left(r) / DCR_HASH_LEN, &n));
	m->npacks = (uint32_t)n;
	if (n) {
		TRY(dcr_rd_bytes(r, n * DCR_HASH_LEN, &p));
		if (!(m->packs = malloc(n * DCR_HASH_LEN)))
			return DCR_ERR(-ENOMEM);
		memcpy(m->packs, p, n * DCR_HASH_LEN);
	}
	TRY(dcr_rd_varint_max(r, DCR_MIN(dcr_rd_left(r) / MIN_FILE_ENC, UINT32_MAX - 1), &n));
	if (n && !(m->files = calloc(n, sizeof(*m->files))))
		return DCR_ERR(-ENOMEM);
	for (uint64_t i = 0; i < n; i++) {
		m->nfiles = (uint32_t)i + 1; /* so free() sees what was built */
		TRY(decode_file(r, m, &m->files[i]));
	}
	if (m->format >= 5)
		TRY(decode_meta(r, m));
	return dcr_rd_left(r) ? DCR_ERR(-EBADMSG) : 0;
}

int dcr_manifest_decode(const void *data, size_t n, struct dcr_manifest *m)
{
	const uint8_t *h = data;
	uint8_t sum[DCR_HASH_LEN];
	int ret;

	memset(m, 0, sizeof(*m));
	if (n < MAN_HDR_LEN + DCR_HASH_LEN || memcmp(h, man_magic, 8) != 0 ||
	    dcr_get_le32(h + 8) < DCR_MANIFEST_FORMAT_MIN)
		return DCR_ERR(-EBADMSG);
	uint32_t fmt = dcr_get_le32(h + 8), flags = dcr_get_le32(h + 12);
	uint64_t blen = dcr_get_le64(h + 16);
	uint64_t clen = dcr_get_le64(h + 24);
	if (clen > n - MAN_HDR_LEN - DCR_HASH_LEN || blen > DCR_MANIFEST_BODY_MAX ||
	    blen > clen * MAX_BODY_RATIO + 65536)
		return DCR_ERR(-EBADMSG);
	size_t after = n - MAN_HDR_LEN - DCR_HASH_LEN - clen;
	dcr_sha256(h, MAN_HDR_LEN + clen, sum);
	if (!dcr_hash_eq(sum, h + MAN_HDR_LEN + clen))
		return DCR_ERR(-EBADMSG);
	/* Intact, but newer than this reader: not damage. */
	if (fmt > DCR_MANIFEST_FORMAT)
		return -EPROTONOSUPPORT;
	if (flags & ~(fmt >= 5 ? DCR_MAN_SIGNED : 0))
		return DCR_ERR(-EBADMSG);
	if (flags & DCR_MAN_SIGNED) {
		if ((ret = dcr_sig_decode(h + n - after, after, &m->sig)))
			return ret;
		m->has_sig = true;
	} else if (after) {
		return DCR_ERR(-EBADMSG);
	}
	uint8_t *body = malloc(blen ? blen : 1);
	if (!body)
		return DCR_ERR(-ENOMEM);
	size_t got = ZSTD_decompress(body, blen, h + MAN_HDR_LEN, clen);
	if (ZSTD_isError(got) || got != blen) {
		ret = DCR_ERR(-EBADMSG);
		goto err_free_body;
	}
	struct dcr_rd r;
	dcr_rd_init(&r, body, blen);
	m->format = fmt;
	memcpy(m->check, sum, DCR_HASH_LEN);
	ret = decode_body(&r, m);
	m->cparent = m->parent;
	if (!ret)
		ret = dcr_manifest_validate(m);
	if (ret == -EINVAL)
		ret = -EBADMSG;
err_free_body:
	free(body);
	if (ret)
		dcr_manifest_free(m);
	return ret;
}

/* -------------------------------------------------------------- keys */

void dcr_version_key(uint64_t v, char *buf, size_t cap)
{
	snprintf(buf, cap, "versions/%010" PRIu64, v);
}

void dcr_pack_key(const uint8_t h[DCR_HASH_LEN], char *buf, size_t cap)
{
	char hex[DCR_HASH_HEX_LEN + 1];

	dcr_hash_hex(h, hex);
	snprintf(buf, cap, "packs/%s", hex);
}

int dcr_key_number(const char *key, const char *prefix, uint64_t *v)
{
	size_t pl = strlen(prefix);

	if (!strncmp(key, prefix, pl))
		key += pl;
	if (strlen(key) != 10)
		return -EINVAL;
	for (int i = 0; i < 10; i++)
		if (key[i] < '0' || key[i] > '9')
			return -EINVAL;
	int ret = dcr_parse_u64(key, v);
	if (ret)
		return ret;
	return *v && *v <= DCR_VERSION_MAX ? 0 : -EINVAL;
}

int dcr_version_from_key(const char *key, uint64_t *v)
{
	return dcr_key_number(key, "versions/", v);
}
