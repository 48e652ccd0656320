/* SPDX-License-Identifier: MIT */
/*
 * synth_init.c - dcrfs-synth init: a Llama-like model's shape for a
 * size (struct arch), its tensors, and the checkpoint directory written
 * from them: the safetensors shards (filled by the init workers),
 * their index, config.json, generation and tokenizer files (synth.h:
 * cmd_init).
 */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "json.h"
#include "stwriter.h"
#include "synth.h"

struct arch {
	uint64_t h, inter, layers, vocab, heads, kv_heads, head_dim;
};

static uint64_t round_up(uint64_t x, uint64_t m)
{
	return (x + m - 1) / m * m;
}

static void arch_from_hidden(struct arch *a, uint64_t h)
{
	a->h = h;
	a->head_dim = h <= 64 ? h : h < 2048 ? 64 : 128;
	a->heads = h / a->head_dim;
	a->kv_heads = a->heads >= 8 ? a->heads / 4 : a->heads;
	a->inter = round_up(8 * h / 3, h >= 64 ? 64 : 16);
}

static uint64_t arch_layer_bytes(const struct arch *a)
{
	uint64_t kv = a->kv_heads * a->head_dim;

	return 2 * (2 * a->h * a->h + 2 * kv * a->h + 3 * a->inter * a->h) +
	       4 * 2 * a->h /* F32 norms */ + 10 * 170 /* header */;
}

static uint64_t arch_fixed_bytes(const struct arch *a)
{
	return 2 * 2 * a->vocab * a->h + 4 * a->h + 3 * 170 + 64;
}

static uint64_t arch_bytes(const struct arch *a)
{
	return arch_fixed_bytes(a) + a->layers * arch_layer_bytes(a);
}

/* Pick a Llama-like shape of about @target bytes. */
static void arch_for_size(uint64_t target, struct arch *a)
{
	static const uint64_t hs[] = {
		16, 32, 48, 64, 128, 192, 256, 384, 512, 768, 1024, 1536,
		2048, 3072, 4096, 5120, 6144, 8192, 12288, 16384,
	};
	uint64_t l0;

	arch_from_hidden(a, hs[0]);
	for (size_t i = 0; i < DCR_ARRAY_SIZE(hs); i++) {
		struct arch c;
		arch_from_hidden(&c, hs[i]);
		c.layers = DCR_MAX(hs[i] / 128, 1);
		c.vocab = DCR_MIN(DCR_MAX(hs[i] * 8, 64), 32000);
		if (i > 0 && arch_bytes(&c) > target)
			break;
		*a = c;
	}
	/* fill with layers (at most 4x the natural depth), then vocabulary */
	l0 = a->layers;
	if (arch_fixed_bytes(a) < target)
		a->layers = (target - arch_fixed_bytes(a)) / arch_layer_bytes(a);
	a->layers = DCR_MIN(DCR_MAX(a->layers, 1), 4 * l0);
	uint64_t rest = a->layers * arch_layer_bytes(a) + 4 * a->h + 3 * 170 + 64;
	uint64_t v = rest < target ? (target - rest) / (4 * a->h) : 0;
	uint64_t q = v >= 256 ? 64 : 8;
	a->vocab = DCR_MAX(v / q * q, 16);
}

static void add_tensor(struct stfile *f, const char *name,
		       enum dcr_float_fmt fmt, uint64_t d0, uint64_t d1,
		       float mean, float std)
{
	struct tensor *t = stfile_add(f);

	t->name = xstrdup(name);
	t->id = fnv1a(name);
	t->fmt = fmt;
	snprintf(t->dtype, sizeof(t->dtype), "%s",
		 fmt == DCR_FF_BF16 ? "BF16" : "F32");
	t->ndim = d1 ? 2 : 1;
	t->shape[0] = d0;
	t->shape[1] = d1;
	t->nelem = d1 ? d0 * d1 : d0;
	t->mean = mean;
	t->std = std;
}

/* All tensors of the model, in the order a Llama checkpoint holds them. */
static void model_tensors(const struct arch *a, struct stfile *all)
{
	char name[256];
	uint64_t h = a->h, kv = a->kv_heads * a->head_dim;
	float std = 0.02f, ostd = 0.02f / sqrtf(2.0f * (float)a->layers);

	add_tensor(all, "model.embed_tokens.weight", DCR_FF_BF16, a->vocab, h, 0, std);
	for (uint64_t l = 0; l < a->layers; l++) {
#define LAYER(n, dt, d0, d1, mu, sd)                                          \
	do {                                                                  \
		snprintf(name, sizeof(name), "model.layers.%" PRIu64 ".%s",   \
			 l, n);                                               \
		add_tensor(all, name, dt, d0, d1, mu, sd);                    \
	} while (0)
		LAYER("input_layernorm.weight", DCR_FF_F32, h, 0, 1.0f, 0.05f);
		LAYER("self_attn.q_proj.weight", DCR_FF_BF16, h, h, 0, std);
		LAYER("self_attn.k_proj.weight", DCR_FF_BF16, kv, h, 0, std);
		LAYER("self_attn.v_proj.weight", DCR_FF_BF16, kv, h, 0, std);
		LAYER("self_attn.o_proj.weight", DCR_FF_BF16, h, h, 0, ostd);
		LAYER("post_attention_layernorm.weight", DCR_FF_F32, h, 0, 1.0f, 0.05f);
		LAYER("mlp.gate_proj.weight", DCR_FF_BF16, a->inter, h, 0, std);
		LAYER("mlp.up_proj.weight", DCR_FF_BF16, a->inter, h, 0, std);
		LAYER("mlp.down_proj.weight", DCR_FF_BF16, h, a->inter, 0, ostd);
#undef LAYER
	}
	add_tensor(all, "model.norm.weight", DCR_FF_F32, h, 0, 1.0f, 0.05f);
	add_tensor(all, "lm_head.weight", DCR_FF_BF16, a->vocab, h, 0, std);
}

/*
 * The header of @f (8-byte length, JSON, padding) into *@hdr (malloc'ed),
 * laid out by core's writer with the tensors in @f's order; their data
 * offsets are assigned here. 0 or -errno (logged).
 */
static int st_header(struct stfile *f, char **hdr)
{
	struct dcr_st_tensor *ts = xcalloc(f->n ? f->n : 1, sizeof(*ts));
	size_t *order = xcalloc(f->n ? f->n : 1, sizeof(*order));
	const struct dcr_st_meta meta = { "format", "pt" };
	uint64_t off = 0;
	size_t len;

	for (size_t i = 0; i < f->n; i++) {
		struct tensor *t = &f->t[i];
		t->off = off;
		t->end = off + t->nelem * sim_width(t);
		off = t->end;
		ts[i] = (struct dcr_st_tensor){ t->name, t->dtype, t->shape,
						(size_t)t->ndim, NULL,
						t->end - t->off };
	}
	int e = dcr_safetensors_layout(ts, f->n, &meta, 1, DCR_ST_GIVEN_ORDER,
				       hdr, &len, order);
	free(order);
	free(ts);
	if (e)
		return e;
	f->hdr_len = len - 8;
	f->data_len = off;
	return 0;
}

static int write_safetensors(const char *path, struct stfile *f, uint64_t seed,
			     int jobs)
{
	char *hdr;
	struct map m;
	struct work w;
	int e;

	if ((e = st_header(f, &hdr))) {
		dcr_err("%s: cannot lay out its header: %s", path, strerror(-e));
		return e;
	}
	e = map_create(path, 8 + f->hdr_len + f->data_len, &m);
	if (e) {
		free(hdr);
		dcr_err("%s: %s", path, strerror(-e));
		return e;
	}
	memcpy(m.p, hdr, 8 + f->hdr_len);
	free(hdr);
	memset(&w, 0, sizeof(w));
	w.kind = W_INIT;
	w.f = f;
	w.out = m.p + 8 + f->hdr_len;
	w.seed = seed;
	run_work(&w, jobs);
	e = map_close(&m);
	if (e)
		dcr_err("%s: %s", path, strerror(-e));
	return e;
}

static void json_config(FILE *f, const struct arch *a, uint64_t seed)
{
	fprintf(f,
		"{\n"
		"  \"architectures\": [\"LlamaForCausalLM\"],\n"
		"  \"model_type\": \"llama\",\n"
		"  \"hidden_size\": %" PRIu64 ",\n"
		"  \"intermediate_size\": %" PRIu64 ",\n"
		"  \"num_hidden_layers\": %" PRIu64 ",\n"
		"  \"num_attention_heads\": %" PRIu64 ",\n"
		"  \"num_key_value_heads\": %" PRIu64 ",\n"
		"  \"head_dim\": %" PRIu64 ",\n"
		"  \"vocab_size\": %" PRIu64 ",\n"
		"  \"hidden_act\": \"silu\",\n"
		"  \"max_position_embeddings\": 4096,\n"
		"  \"rms_norm_eps\": 1e-05,\n"
		"  \"rope_theta\": 10000.0,\n"
		"  \"tie_word_embeddings\": false,\n"
		"  \"bos_token_id\": 1,\n"
		"  \"eos_token_id\": 2,\n"
		"  \"torch_dtype\": \"bfloat16\",\n"
		"  \"dcrfs_synth_seed\": %" PRIu64 "\n"
		"}\n",
		a->h, a->inter, a->layers, a->heads, a->kv_heads, a->head_dim,
		a->vocab, seed);
}

/* A small BPE-looking tokenizer.json: specials, byte tokens, syllables. */
static void json_tokenizer(FILE *f, const struct arch *a)
{
	static const char cons[] = "bcdfghjklmnprstvwz";
	static const char vow[] = "aeiou";
	uint64_t n = DCR_MIN(a->vocab, 1024), id = 0;

	fprintf(f, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n"
		"  \"padding\": null,\n  \"added_tokens\": [\n");
	static const char *sp[] = { "<unk>", "<s>", "</s>" };
	for (int i = 0; i < 3; i++)
		fprintf(f, "    {\"id\": %d, \"content\": \"%s\", \"special\": true}%s\n",
			i, sp[i], i < 2 ? "," : "");
	fprintf(f, "  ],\n  \"model\": {\n    \"type\": \"BPE\",\n"
		"    \"unk_token\": \"<unk>\",\n    \"byte_fallback\": true,\n"
		"    \"vocab\": {");
	for (int i = 0; i < 3 && id < n; i++, id++)
		fprintf(f, "%s\n      \"%s\": %" PRIu64, id ? "," : "", sp[i], id);
	for (unsigned byte = 0; byte < 256 && id < n; byte++, id++)
		fprintf(f, ",\n      \"<0x%02X>\": %" PRIu64, byte, id);
	for (uint64_t k = 0; id < n; k++, id++) {
		/* bijective base-90 syllable strings: unique by construction */
		char s[32];
		int len = 0;
		uint64_t x = k;
		do {
			unsigned syl = (unsigned)(x % 90);
			s[len++] = cons[syl / 5];
			s[len++] = vow[syl % 5];
			x = x / 90;
		} while (x-- > 0 && len < 28);
		s[len] = 0;
		fprintf(f, ",\n      \"%s%s\": %" PRIu64, k % 3 ? "" : "_", s, id);
	}
	fprintf(f, "\n    },\n    \"merges\": []\n  }\n}\n");
}

/* One "@sep\"@tensor\": \"@file\"" of the index's weight_map to @f. */
static void index_entry(FILE *f, const char *sep, const char *tensor,
			const char *file)
{
	fputs(sep, f);
	dcr_json_str(f, tensor);
	fputs(": ", f);
	dcr_json_str(f, file);
}

/* Write @tx's text to @dir/@name; @tx is freed. 0 or -errno (logged). */
static int write_text(const char *dir, const char *name, struct text *tx)
{
	char *p = path_join(dir, name);
	int e;

	text_done(tx);
	e = write_file(p, tx->p, tx->len);
	if (e)
		dcr_err("%s: %s", p, strerror(-e));
	free(p);
	text_free(tx);
	return e;
}

int cmd_init(uint64_t size, uint64_t seed, unsigned shards, int jobs,
		    const char *outdir)
{
	struct arch a;
	struct stfile all = { 0 };
	struct text tx = { 0 }, idx = { 0 };
	uint64_t total = 0, written = 0;
	int64_t t0 = dcr_mono_ns();
	int e;
	char hs[32];

	e = dcr_mkdir_p(outdir, 0755);
	if (e) {
		dcr_err("%s: %s", outdir, strerror(-e));
		return 1;
	}
	arch_for_size(size, &a);
	model_tensors(&a, &all);
	for (size_t i = 0; i < all.n; i++)
		total += all.t[i].nelem * sim_width(&all.t[i]);
	if (shards > all.n)
		shards = (unsigned)all.n;

	/* split in model order, each shard closing at k/shards of the bytes */
	size_t next = 0;
	uint64_t acc = 0;
	if (shards > 1) {
		text_start(&idx);
		fprintf(idx.f, "{\n  \"metadata\": {\"total_size\": %" PRIu64 "},\n"
			"  \"weight_map\": {", total);
	}
	for (unsigned k = 1; k <= shards; k++) {
		struct stfile f = { 0 };
		char name[64];
		uint64_t goal = total / shards * k;

		if (shards > 1)
			snprintf(name, sizeof(name), "model-%05u-of-%05u.safetensors",
				 k, shards);
		else
			snprintf(name, sizeof(name), "model.safetensors");
		/* leave at least one tensor for each remaining shard */
		while (next < all.n && (f.n == 0 || (acc < goal &&
		       all.n - next > shards - k))) {
			struct tensor *t = stfile_add(&f);
			*t = all.t[next];
			t->name = xstrdup(all.t[next].name);
			acc += t->nelem * sim_width(t);
			if (shards > 1)
				index_entry(idx.f, next ? ",\n    " : "\n    ",
					    t->name, name);
			next++;
		}
		if (k == shards) {
			while (next < all.n) {
				struct tensor *t = stfile_add(&f);
				*t = all.t[next];
				t->name = xstrdup(all.t[next].name);
				if (shards > 1)
					index_entry(idx.f, ",\n    ", t->name, name);
				next++;
			}
		}
		char *p = path_join(outdir, name);
		e = write_safetensors(p, &f, seed, jobs);
		free(p);
		written += 8 + f.hdr_len + f.data_len;
		stfile_free(&f);
		if (e)
			goto err;
	}
	if (shards > 1) {
		fputs("\n  }\n}\n", idx.f);
		if ((e = write_text(outdir, "model.safetensors.index.json", &idx)))
			goto err;
	}
	text_start(&tx);
	json_config(tx.f, &a, seed);
	if ((e = write_text(outdir, "config.json", &tx)))
		goto err;
	text_start(&tx);
	fputs("{\n  \"bos_token_id\": 1,\n  \"eos_token_id\": 2,\n"
	      "  \"do_sample\": true,\n  \"temperature\": 1.0,\n"
	      "  \"top_p\": 1.0\n}\n", tx.f);
	if ((e = write_text(outdir, "generation_config.json", &tx)))
		goto err;
	text_start(&tx);
	fputs("{\n  \"tokenizer_class\": \"LlamaTokenizerFast\",\n"
	      "  \"bos_token\": \"<s>\",\n  \"eos_token\": \"</s>\",\n"
	      "  \"unk_token\": \"<unk>\",\n  \"model_max_length\": 4096,\n"
	      "  \"add_bos_token\": true\n}\n", tx.f);
	if ((e = write_text(outdir, "tokenizer_config.json", &tx)))
		goto err;
	text_start(&tx);
	json_tokenizer(tx.f, &a);
	if ((e = write_text(outdir, "tokenizer.json", &tx)))
		goto err;

	double dt = (double)(dcr_mono_ns() - t0) * 1e-9;
	msg("init: hidden %" PRIu64 ", %" PRIu64 " layer%s, intermediate %" PRIu64
	    ", vocab %" PRIu64 ", %zu tensors in %u file%s: %s in %.2f s (%.0f MB/s)",
	    a.h, a.layers, a.layers == 1 ? "" : "s", a.inter, a.vocab, all.n, shards, shards > 1 ? "s" : "",
	    dcr_format_size(written, hs, sizeof(hs)), dt,
	    (double)written / 1e6 / (dt > 1e-9 ? dt : 1e-9));
	text_free(&tx);
	text_free(&idx);
	stfile_free(&all);
	return 0;
err:
	text_free(&tx);
	text_free(&idx);
	stfile_free(&all);
	return 1;
}
