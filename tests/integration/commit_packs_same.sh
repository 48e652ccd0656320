#!/usr/bin/env bash
# commit_packs_same.sh - the packs of a commit do not depend on the
# number of encoder threads or their timing (issue 19, item 2): the same
# versions (an anchor, then two steps of a safetensors checkpoint and a
# file that is not one) committed with --jobs 1 and with --jobs 2 into
# two new stores give the same pack objects, byte for byte, and each
# pack starts with the DCRPACK2 header HACKING documents (test_commit's
# test_packs_same_across_jobs does the same with small packs, so that a
# commit spans several). No mount needed.
. "$(dirname "$0")/lib.sh"
DCRFS_SYNTH=$DCR_BUILDDIR/dcrfs-synth
need_bins "$DCRFS_SYNTH" "$DCRFS_COMMIT"

t "$DCRFS_SYNTH" init --quiet --size 24M --seed 3 --jobs 1 "$T/s0"
t "$DCRFS_SYNTH" step --quiet --in "$T/s0" --out "$T/s1" --seed 4 --jobs 1 --state "$T/adam.state"
t "$DCRFS_SYNTH" step --quiet --in "$T/s1" --out "$T/s2" --mode uniform --rate 0.05 --seed 5 --jobs 1
for s in s0 s1 s2; do
	rand_file "$T/$s/blob.bin" 3000000 "blob-$s"
done

for j in 1 2; do
	for s in s0 s1 s2; do
		t "$DCRFS_COMMIT" --init --store "$T/store.$j" --cache-dir "$T/cc.$j" \
			--quiet --jobs "$j" "$T/$s" >/dev/null
	done
done

n=$(find "$T/store.1/packs" -type f | wc -l)
[ "$n" -ge 3 ] || fail "only $n packs for 3 commits"
(cd "$T/store.1/packs" && find . -type f | sort) >"$T/packs.1"
(cd "$T/store.2/packs" && find . -type f | sort) >"$T/packs.2"
cmp -s "$T/packs.1" "$T/packs.2" ||
	fail "--jobs 1 and --jobs 2 made different packs: $(diff "$T/packs.1" "$T/packs.2" | head -20)"
while read -r p; do
	cmp -s "$T/store.1/packs/$p" "$T/store.2/packs/$p" || fail "pack $p differs"
	[ "$(head -c 8 "$T/store.1/packs/$p")" = DCRPACK2 ] || fail "pack $p has no DCRPACK2 header"
done <"$T/packs.1"
log "$n packs, the same for --jobs 1 and --jobs 2"
