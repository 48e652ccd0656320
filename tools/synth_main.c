/* SPDX-License-Identifier: MIT */
/*
 * synth_main.c - dcrfs-synth: generate realistic transformer
 * checkpoints and the optimizer steps between them, for tests, demos
 * and benchmarks. Here: usage, option parsing, main (the parts are
 * listed in synth.h).
 *
 *   dcrfs-synth init --size S [--seed N] [--shards K] OUTDIR
 *   dcrfs-synth step --in DIR --out DIR [--mode adam|uniform] [--lr LR]
 *                    [--rate P] [--state FILE] [--seed N]
 *
 * init writes a Hugging Face style checkpoint directory: safetensors
 * weights of a Llama-like decoder (BF16 matrices, F32 norms) sized to
 * about S bytes, config.json and small tokenizer files. step reads one
 * such directory and writes the next optimizer step:
 *
 *   adam     fp32 master weights and Adam moments live in a state file
 *            outside the checkpoint (so dcrfs-commit never ships them);
 *            every element gets a N(0,1)-ish gradient, one Adam update,
 *            and is exported to BF16 with round-to-nearest-even. Only
 *            the elements whose master crossed a BF16 rounding boundary
 *            change, about 1-5 % at lr 1e-6..1e-5, as in RL post-training.
 *   uniform  exactly floor(P * n) elements of every tensor change, each
 *            by an XOR of 1..7 in the low mantissa bits.
 *
 * Everything is deterministic in (--seed, input, state) and independent
 * of the number of threads: random streams are seeded per block of
 * elements, never per thread.
 */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "synth.h"
#include "cpus.h"

#define MAX_JOBS 256

static int ncpus(void)
{
	int n = dcr_cpu_budget();

	return n > MAX_JOBS ? MAX_JOBS : n;
}

/* ------------------------------------------------------------ main */

static void usage(FILE *fp)
{
	fprintf(fp,
"Usage: " PROG " init --size SIZE [--seed N] [--shards K] [--jobs N] [--quiet] OUTDIR\n"
"       " PROG " step --in DIR --out DIR [--mode adam|uniform] [--lr LR]\n"
"                   [--rate P] [--state FILE] [--seed N] [--jobs N] [--quiet]\n");
	if (fp == stderr) {
		fprintf(fp, "Try '" PROG " --help' for more information.\n");
		return;
	}
	fprintf(fp,
"\n"
"Generate realistic Llama-like safetensors checkpoints (BF16 matrices, F32\n"
"norms, config.json, tokenizer files) and simulated optimizer steps.\n"
"\n"
"init options:\n"
"  --size SIZE     approximate total size: 256K, 64M, 2G ... (required)\n"
"  --shards K      split into model-0000k-of-0000K.safetensors (default 1)\n"
"step options:\n"
"  --in DIR        checkpoint to start from\n"
"  --out DIR       where to write the next step (created)\n"
"  --mode M        adam (default): fp32 master + Adam moments, bf16 export\n"
"                  uniform: exactly a fraction P of elements change\n"
"  --lr LR         Adam learning rate (default 2e-6: about 3 %% change)\n"
"  --rate P        uniform change rate in [0,1] (default 0.03)\n"
"  --state FILE    Adam state (default: .dcrfs-synth.state next to --out)\n"
"common options:\n"
"  --seed N        random seed (default 0); same seed, same bytes\n"
"  --jobs N        threads (default: number of CPUs)\n"
"  --quiet         no statistics on stderr\n"
"  --help          this text\n"
"  --version       the version\n");
}

int main(int argc, char **argv)
{
	enum { O_SIZE = 256, O_SEED, O_SHARDS, O_IN, O_OUT, O_MODE, O_LR,
	       O_RATE, O_STATE, O_JOBS, O_QUIET, O_HELP };
	static const struct option opts[] = {
		{ "size", required_argument, NULL, O_SIZE },
		{ "seed", required_argument, NULL, O_SEED },
		{ "shards", required_argument, NULL, O_SHARDS },
		{ "in", required_argument, NULL, O_IN },
		{ "out", required_argument, NULL, O_OUT },
		{ "mode", required_argument, NULL, O_MODE },
		{ "lr", required_argument, NULL, O_LR },
		{ "rate", required_argument, NULL, O_RATE },
		{ "state", required_argument, NULL, O_STATE },
		{ "jobs", required_argument, NULL, O_JOBS },
		{ "quiet", no_argument, NULL, O_QUIET },
		{ "help", no_argument, NULL, O_HELP },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t size = 0, seed = 0, shards = 1, jobs = 0;
	const char *in = NULL, *out = NULL, *state = NULL, *cmd;
	bool adam = true, have_size = false;
	double lr = 2e-6, rate = 0.03;
	char *end;
	int c;

	dcr_log_set_prog(PROG);
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		usage(stdout);
		return 0;
	}
	if (argc >= 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V"))) {
		printf(PROG " %s\n", PACKAGE_VERSION);
		return 0;
	}
	if (argc < 2 || (strcmp(argv[1], "init") && strcmp(argv[1], "step"))) {
		if (argc >= 2)
			dcr_err("unknown command '%s'", argv[1]);
		usage(stderr);
		return 2;
	}
	cmd = argv[1];
	argv++;
	argc--;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case O_SIZE:
			if (dcr_parse_size(optarg, &size) || size == 0) {
				dcr_err("bad --size '%s'", optarg);
				return 2;
			}
			have_size = true;
			break;
		case O_SEED:
			if (dcr_parse_u64(optarg, &seed)) {
				dcr_err("bad --seed '%s'", optarg);
				return 2;
			}
			break;
		case O_SHARDS:
			if (dcr_parse_u64(optarg, &shards) || shards < 1 ||
			    shards > 99999) {
				dcr_err("bad --shards '%s'", optarg);
				return 2;
			}
			break;
		case O_JOBS:
			if (dcr_parse_u64(optarg, &jobs) || jobs > MAX_JOBS) {
				dcr_err("bad --jobs '%s' (1..%d)", optarg, MAX_JOBS);
				return 2;
			}
			break;
		case O_IN:
			in = optarg;
			break;
		case O_OUT:
			out = optarg;
			break;
		case O_STATE:
			state = optarg;
			break;
		case O_MODE:
			if (!strcmp(optarg, "adam"))
				adam = true;
			else if (!strcmp(optarg, "uniform"))
				adam = false;
			else {
				dcr_err("bad --mode '%s' (adam or uniform)", optarg);
				return 2;
			}
			break;
		case O_LR:
			errno = 0;
			lr = strtod(optarg, &end);
			if (errno || *end || end == optarg || !(lr > 0) || lr > 1) {
				dcr_err("bad --lr '%s'", optarg);
				return 2;
			}
			break;
		case O_RATE:
			errno = 0;
			rate = strtod(optarg, &end);
			if (errno || *end || end == optarg || !(rate >= 0) || rate > 1) {
				dcr_err("bad --rate '%s' (0..1)", optarg);
				return 2;
			}
			break;
		case O_QUIET:
			quiet = 1;
			break;
		case O_HELP:
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (jobs == 0)
		jobs = (uint64_t)ncpus();

	if (!strcmp(cmd, "init")) {
		if (!have_size || optind != argc - 1 || in || out || state) {
			dcr_err(!have_size ? "init needs --size" :
				"init takes --size, --seed, --shards and one OUTDIR");
			usage(stderr);
			return 2;
		}
		return cmd_init(size, seed, (unsigned)shards, (int)jobs, argv[optind]);
	}
	if (!in || !out || optind != argc || have_size) {
		dcr_err("step needs --in DIR and --out DIR and no other argument");
		usage(stderr);
		return 2;
	}
	return cmd_step(in, out, adam, (float)lr, rate, state, seed, (int)jobs);
}
