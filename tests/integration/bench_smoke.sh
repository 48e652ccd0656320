#!/usr/bin/env bash
# bench_smoke.sh - scripts/bench --smoke runs end to end (tiny sizes, one
# run) and writes its table and JSON; so do scripts/bench-delta and
# scripts/bench-scale. Checks that the benchmark works,
# not how fast anything is: the figures are not judged.
. "$(dirname "$0")/lib.sh"

need_bins "$DCRFS_SYNTH"
need_fuse
command -v numfmt >/dev/null 2>&1 || skip "numfmt (coreutils) is missing"

out=$T/out
BUILD=$DCR_BUILDDIR TMPDIR=$T timeout -k 5 120 \
	bash "$DCR_SRCDIR/scripts/bench" --smoke --out "$out" >"$T/bench.log" 2>&1 ||
	{ cat "$T/bench.log" >&2; fail "scripts/bench --smoke failed"; }

md=$out/bench-read.md
[ -s "$md" ] || fail "no $md"
for row in "ceiling: bench_splicefs" "materialized v2, fresh mount" \
	"first read of v2, v1 materialized" "re-read of open v2" \
	"mmap of v2" "prefetch=latest" "daemon peak RSS"; do
	grep -qF "| $row" "$md" || fail "row '$row' missing from $md"
done
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["gbps"]["ceiling"] > 0 and d["gbps"]["materialized"] > 0' \
	"$out/bench-read.json" || fail "bad $out/bench-read.json"

# scripts/bench-delta --smoke: the delta view's cost table.
BUILD=$DCR_BUILDDIR TMPDIR=$T timeout -k 5 120 \
	bash "$DCR_SRCDIR/scripts/bench-delta" --smoke --out "$out" >"$T/bench-delta.log" 2>&1 ||
	{ cat "$T/bench-delta.log" >&2; fail "scripts/bench-delta --smoke failed"; }
/usr/bin/python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["ratio"] >= 0 and d["changed_elements"] > 0 and d["bytes_per_changed"] >= 6, d' \
	"$out/bench-delta.json" || fail "bad $out/bench-delta.json"
# scripts/bench-scale --smoke: per-stage CPU spread, on 2 shards.
BUILD=$DCR_BUILDDIR TMPDIR=$T timeout -k 5 120 \
	python3 "$DCR_SRCDIR/scripts/bench-scale" --smoke --shards 2 --out "$out" >"$T/bench-scale.log" 2>&1 ||
	{ cat "$T/bench-scale.log" >&2; fail "scripts/bench-scale --smoke failed"; }
/usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
L = d["layouts"][0]
assert L["shards"] == 2 and L["sha256_cpu_s"] > 0, L
assert set(L["stages"]) == {"prefetch", "prefetch_warm", "prefetch_warm_views",
                            "delta_first_read", "cold_read", "delta_view",
                            "verify_deep"}, L["stages"]
for k, s in L["stages"].items():
    if k == "delta_first_read":  # a ready view: its read may take under a tick
        assert s["cpu_s"] >= 0 and s["files"] == 2 and 0 <= s["ready"] <= 2, (k, s)
        continue
    if k == "delta_view" and s["cpu_s"] == 0:  # from records: may take under a tick
        continue
    assert s["cpu_s"] > 0 and 0 < s["busiest"] <= 1 and s["threads_2pct"] >= 1, (k, s)
assert L["stages"]["prefetch"]["threads_reported"] == 4, L["stages"]["prefetch"]
assert L["stages"]["prefetch_warm"]["sha_ratio"] > 0, L["stages"]["prefetch_warm"]
assert L["stages"]["prefetch_warm_views"]["views_ready"] == 2, L["stages"]["prefetch_warm_views"]' \
	"$out/bench-scale.json" || fail "bad $out/bench-scale.json"
grep -qF '| prefetch |' "$out/bench-scale.md" || fail "no prefetch row in bench-scale.md"
grep -qF 'prefetch on warm memory' "$out/bench-scale.md" || fail "no warm prefetch line in bench-scale.md"
grep -qF 'delta views ahead' "$out/bench-scale.md" || fail "no views-ahead line in bench-scale.md"
log "bench smoke ok: $(grep -c '^|' "$md") table rows, bench-delta $(grep -c '^|' "$out/bench-delta.md") rows"
