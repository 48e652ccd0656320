#!/usr/bin/env bash
# ctl_json.sh - dcrfs-ctl tag, untag and gc take --json: each prints one
# JSON object on stdout and nothing else (what it did; gc: what it
# removed and kept, dry run or not).
. "$(dirname "$0")/lib.sh"
CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$CTL"
mkdir -p "$T/tree"
rand_file "$T/tree/w.bin" 100000 a
t "$DCRFS_COMMIT" --init --quiet --store "$STORE" --cache-dir "$T/cc" "$T/tree" >/dev/null
for s in b c d; do
	rand_file "$T/tree/w.bin" 100000 $s
	t "$DCRFS_COMMIT" --quiet --store "$STORE" --cache-dir "$T/cc" "$T/tree" >/dev/null
done

# one_object FILE PYTHON-ASSERTIONS - FILE is one line, one JSON object o
one_object() {
	python3 - "$1" "$2" <<'PY' || fail "$3 printed: $(cat "$1")"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines
o = json.loads(lines[0])
exec(sys.argv[2])
PY
}

t "$CTL" --store "$STORE" --json tag old 1 >"$T/out" 2>"$T/err" || fail "tag --json: $(cat "$T/err")"
one_object "$T/out" 'assert o == {"tag": "old", "version": 1, "signer": "unsigned"}, o' "tag --json"
t "$CTL" --store "$STORE" --json tag gone 2 >/dev/null
t "$CTL" --store "$STORE" --json untag gone >"$T/out" 2>"$T/err" || fail "untag --json: $(cat "$T/err")"
one_object "$T/out" 'assert o == {"tag": "gone", "removed": True, "version": 2}, o' "untag --json"

t "$CTL" --store "$STORE" --json gc --keep-last 1 --no-keep-tagged --grace 0 -n \
	>"$T/out" 2>"$T/err" || fail "gc -n --json: $(cat "$T/err")"
one_object "$T/out" '
assert o["dry_run"] is True and o["versions_removed"] == [1, 2, 3], o
assert o["tags_removed"] == ["old"] and o["versions_kept"] == 1, o
assert o["packs_deleted"] >= 1 and o["bytes_freed"] > 0, o' "gc -n --json"
[ "$(t "$CTL" --store "$STORE" log --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 4 ] ||
	fail "gc --dry-run --json removed versions"
t "$CTL" --store "$STORE" --json gc --keep-last 2 --grace 0 >"$T/out" 2>"$T/err" ||
	fail "gc --json: $(cat "$T/err")"
one_object "$T/out" '
assert o["dry_run"] is False and o["versions_removed"] == [2], o
assert o["tags_removed"] == [] and o["versions_kept"] == 3, o
for k in ("rebased", "versions_kept_for_chains", "packs_deleted", "bytes_freed",
          "orphans_kept", "orphan_bytes_kept", "previous_layout_packs_kept",
          "previous_layout_bytes_kept", "uploads_aborted", "upload_bytes_aborted",
          "uploads_kept", "commits_running", "grace_seconds"):
    assert k in o, (k, o)' "gc --json"
[ "$(t "$CTL" --store "$STORE" log --json | python3 -c 'import json,sys; print([v["version"] for v in json.load(sys.stdin)])')" = "[4, 3, 1]" ] ||
	fail "gc --json did not remove version 2"
t "$CTL" --store "$STORE" verify --quiet >/dev/null || fail "verify after gc --json"
log "ok: tag, untag, gc --json"
