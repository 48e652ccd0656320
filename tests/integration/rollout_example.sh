#!/usr/bin/env bash
# rollout_example.sh - examples/rollout_worker.py, the README's rollout
# loop made whole: a trainer commits a 4-shard torch model every 0.5 s
# into a mounted store (poll=0.1); a leader waits for each version
# (dcrfs.wait), resolves it once and two worker processes load all four
# shards of it from MNT/vN/; every load must be of one training step and
# every tensor the committed one. A short run here (DCR_ROLLOUT_VERSIONS,
# default 12); the issue's 200 loads are 100 versions.
. "$(dirname "$0")/lib.sh"
need_fuse
need_python_libdcr
CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$CTL"
N=${DCR_ROLLOUT_VERSIONS:-12}

t "$CTL" --store "$T/store" init --quiet >/dev/null || fail "dcrfs-ctl init failed"
mount_dcrfs "$T/store" "$T/mnt" "poll=0.1"
timeout -k 5 $((N * 3 + 120)) "$PY" "$DCR_SRCDIR/examples/rollout_worker.py" \
	--store "$T/store" --mnt "$T/mnt" --versions "$N" --interval 0.5 \
	--cache-dir "$T/commit-cache" >"$T/out" 2>&1 ||
	{ cat "$T/out" >&2; fail "rollout_worker.py failed"; }
summary=$(tail -n 1 "$T/out")
log "$summary"
[[ $summary == *" 0 mixed loads, 0 wrong tensors" ]] || fail "summary: $summary"
loads=$(sed -n 's/.* versions, \([0-9]*\) loads .*/\1/p' <<<"$summary")
[ "${loads:-0}" -ge 2 ] || fail "only ${loads:-0} loads"
[ "$(t cat "$T/mnt/.dcrfs/latest")" = "$N" ] || fail "latest is not v$N"
umount_dcrfs "$T/mnt" || fail "unmount failed"
log "ok"
