#!/usr/bin/env bash
# commit_json.sh - dcrfs-commit --json prints one JSON object (version,
# parent, tags, bytes read, stored bytes, seconds) and nothing else on
# stdout; a repeated -t is refused (a usage error naming both) instead of
# keeping the last one silently.
. "$(dirname "$0")/lib.sh"
need_bins "$DCR_BUILDDIR/dcrfs-ctl"
mkdir -p "$T/tree"
rand_file "$T/tree/w.bin" 200000 j
t "$DCRFS_COMMIT" --init --quiet --store "$STORE" --cache-dir "$T/cc" "$T/tree" >/dev/null
rand_file "$T/tree/w.bin" 250000 k
t "$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/cc" --json -t best "$T/tree" \
	>"$T/out" 2>"$T/err" || fail "commit --json: $(cat "$T/err")"
python3 - "$T/out" <<'PY' || fail "commit --json printed: $(cat "$T/out")"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines
o = json.loads(lines[0])
assert set(o) == {"version", "parent", "tags", "bytes", "stored_bytes", "seconds",
                  "signer"}, o
assert o["signer"] == "unsigned", o
assert o["version"] == 2 and o["parent"] == 1 and o["tags"] == ["best"], o
assert o["bytes"] == 250000 and 0 < o["stored_bytes"], o
assert isinstance(o["seconds"], float) and o["seconds"] >= 0, o
PY
expect_status 2 "given twice \('a', 'b'\)" "$DCRFS_COMMIT" --store "$STORE" -t a -t b "$T/tree"
[ "$(t "$DCR_BUILDDIR/dcrfs-ctl" --store "$STORE" log --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 2 ] ||
	fail "the refused commit published something"
log "ok: commit --json, repeated -t refused"
