#!/usr/bin/env bash
# threads.sh - one CPU budget for the mount's CPU-bound pools (issue 31):
# status.json and the metrics report "threads": N with -o threads=N and,
# without the option, the CPUs the process may use (1 under
# taskset -c 0); the busy seconds per stage move once a version is
# prefetched; a bad threads= is refused. dcrfs-ctl --threads N runs
# verify --deep, and a bad --threads is a usage error.
. "$(dirname "$0")/lib.sh"
need_fuse
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS_SYNTH" "$DCRFS_CTL"
command -v python3 >/dev/null 2>&1 || skip "python3 is missing"
command -v taskset >/dev/null 2>&1 || skip "taskset (util-linux) is missing"

S=$MNT/.dcrfs/status.json

t "$DCRFS_SYNTH" init --size 4M --shards 3 --seed 1 --quiet "$T/s1"
rm -f "$T/s1/.dcrfs-synth.state"
[ "$(commit "$STORE" "$T/s1")" = 1 ] || fail "s1 is not version 1"

# threads=16: reported as such, and the stages' busy seconds move with
# the prefetch of v1 (every shard materialized, decode and write busy)
mount_dcrfs "$STORE" "$MNT" "poll=0.1,prefetch=latest,threads=16"
for ((i = 0; i < 100; i++)); do
	cp "$S" "$T/st.json"
	py "$T/st.json" 'sys.exit(0 if d["prefetch"]["done"] == 1 else 1)' && break
	sleep 0.1
done
py "$T/st.json" '
assert d["threads"] == 16, d.get("threads")
b = d["busy_s"]
assert set(b) == {"fetch", "decode", "write", "check"}, b
assert b["decode"] > 0 and b["write"] > 0 and b["fetch"] > 0, b
assert d["prefetch"]["done"] == 1, d["prefetch"]' ||
	fail "threads=16: $(cat "$T/st.json")"
grep -q '^dcrfs_threads 16$' "$MNT/.dcrfs/metrics" ||
	fail "metrics lack dcrfs_threads 16: $(grep threads "$MNT/.dcrfs/metrics")"
grep -q '^dcrfs_busy_decode_seconds_total [0-9.e+-]*$' "$MNT/.dcrfs/metrics" ||
	fail "metrics lack dcrfs_busy_decode_seconds_total"
same "$MNT" 1
umount_dcrfs "$MNT" || fail "unmount failed"

# without the option: the CPU budget, 1 under taskset -c 0
mask=$(taskset -pc $$ | sed 's/.*: //')
taskset -pc 0 $$ >/dev/null || skip "cannot set this shell's affinity"
mount_dcrfs "$STORE" "$MNT" "poll=0,prefetch=none,cache_dir=$T/cache1"
taskset -pc "$mask" $$ >/dev/null
py "$S" 'assert d["threads"] == 1, d.get("threads")' ||
	fail "under taskset -c 0: threads $(grep -o '"threads": [0-9]*' "$S")"
same "$MNT" 1
umount_dcrfs "$MNT" || fail "unmount failed"

# a bad value is refused, naming the option
expect_status 2 'threads' "$DCRFS" "$STORE" "$MNT" -f -o "cache_dir=$T/c2,threads=0" ||
	fail "threads=0 accepted"

# dcrfs-ctl --threads
out=$(t "$DCRFS_CTL" --store "$STORE" --threads 3 verify --deep 2>&1) ||
	fail "verify --deep --threads 3: $out"
expect_status 2 'threads' "$DCRFS_CTL" --store "$STORE" --threads 0 verify ||
	fail "--threads 0 accepted"
log "ok: threads=16 reported, busy seconds move, 1 under taskset -c 0, ctl --threads"
