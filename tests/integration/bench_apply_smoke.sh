#!/usr/bin/env bash
# bench_apply_smoke.sh - scripts/bench-apply runs end to end on a tiny
# sharded checkpoint (2 files, one run, two refit steps: one through the
# view, one full reload) and writes its JSON: the apply rows with their
# ratios over the memcpy and SHA-256 baselines, the refit rows "commit
# end -> tensors hold vN" for both paths, tensors checked bit for bit.
# --device cuda runs the same on CUDA tensors where torch has a CUDA
# device (checked likewise), and where it has none must exit 77 saying
# why (checked: this test passes then, it does not skip).
# Checks that the benchmark works, not how fast anything is.
. "$(dirname "$0")/lib.sh"

need_bins "$DCRFS_SYNTH"
need_fuse
need_python_libdcr

run_bench() {
	TMPDIR=$T timeout -k 5 300 bash "$DCR_SRCDIR/scripts/bench-apply" -b "$DCR_BUILDDIR" \
		-s 8M -R 1 --shards 2 --refit 2 "$@"
}
run_bench --device cpu --json "$T/cpu.json" >"$T/cpu.log" 2>&1 ||
	{ cat "$T/cpu.log" >&2; fail "scripts/bench-apply --device cpu failed"; }
check_json() {
	"$PY" - "$1" "$2" <<'PYEOF' || { cat "$T/$2.log" >&2; fail "bad $1"; }
import json, sys
d = json.load(open(sys.argv[1]))
a, r = d["apply"], d["refit"]
assert a["device"].startswith(sys.argv[2]) and a["files"] == 2, a
assert a["apply_over_memcpy"] > 0 and a["apply_over_sha256"] > 0 and len(a["apply_s"]) == 1, a
assert r["files"] == 2 and [x["path"] for x in r["rows"]] == ["view", "full"], r
assert r["view_s"] > 0 and r["full_s"] > 0 and r["rows"][0]["lookup_s"] is not None, r
PYEOF
}
check_json "$T/cpu.json" cpu
grep -q "tensors hold v4 bit for bit" "$T/cpu.log" || fail "no bit-exact line in the refit's output"

rc=0
run_bench --device cuda --json "$T/cuda.json" >"$T/cuda.log" 2>&1 || rc=$?
if "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
	[ "$rc" = 0 ] || { cat "$T/cuda.log" >&2; fail "scripts/bench-apply --device cuda failed ($rc)"; }
	check_json "$T/cuda.json" cuda
	log "ok (cpu and cuda)"
	exit 0
fi
[ "$rc" = 77 ] || { cat "$T/cuda.log" >&2; fail "--device cuda without CUDA: exit $rc, not 77"; }
grep -q "has no CUDA device" "$T/cuda.log" || { cat "$T/cuda.log" >&2; fail "no reason given"; }
log "ok (cpu; --device cuda exits 77 here as it must: $(tail -1 "$T/cuda.log"))"
