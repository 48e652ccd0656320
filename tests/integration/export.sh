#!/usr/bin/env bash
# export.sh - dcrfs-ctl export and cat (no mount): the files of a version
# bit-exact with the committed tree (cmp), with its modes; a re-run skips
# the files there and proven and re-exports one that was changed; an
# export killed with -9 in the middle of a file leaves only complete
# files and part files, and a re-run finishes it; a damaged pack fails
# the export clearly and leaves no complete-looking wrong file.
. "$(dirname "$0")/lib.sh"
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS_SYNTH" "$DCRFS_CTL"
need_test_hooks
command -v python3 >/dev/null 2>&1 || skip "python3 is missing"

CTL=("$DCRFS_CTL" --store "$STORE")

# same_tree A B - the same paths, bytes and permission bits.
same_tree() {
	diff -r "$1" "$2" >/dev/null || fail "$2 differs from $1: $(diff -rq "$1" "$2" | head -3)"
	(cd "$1" && find . -printf '%P %m %y\n' | sort) >"$T/modes.a"
	(cd "$2" && find . -printf '%P %m %y\n' | sort) >"$T/modes.b"
	cmp -s "$T/modes.a" "$T/modes.b" || fail "modes differ: $(diff "$T/modes.a" "$T/modes.b" | head -4)"
}

# json_field FILE KEY - a member of the JSON object in FILE.
json_field() {
	python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}

# 20M: the model spans 3 pieces (8 MiB each), so a kill after its first
# piece (below) lands while the export is held before the next one
t "$DCRFS_SYNTH" init --size 20M --seed 3 --quiet "$T/s1"
t "$DCRFS_SYNTH" step --in "$T/s1" --out "$T/s2" --mode uniform --quiet
mkdir -p "$T/s2/sub/deep"
printf 'hello\n' >"$T/s2/sub/deep/f"
chmod 0640 "$T/s2/sub/deep/f"
chmod 0750 "$T/s2/sub"
chmod 0755 "$T/s2/config.json"
: >"$T/s2/empty"
t "$DCRFS_COMMIT" --init --store "$STORE" --cache-dir "$T/cc" --chunk-size 1M "$T/s1" >/dev/null 2>&1
t "$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/cc" --tag two "$T/s2" >/dev/null 2>&1

log "export by tag: bit-exact, modes kept"
t "${CTL[@]}" export two "$T/out" 2>"$T/err" || fail "export failed: $(cat "$T/err")"
same_tree "$T/s2" "$T/out"
[ ! -e "$T/out/.dcrfs-export" ] || fail "the export's cache was left in DIR"
find "$T/out" -name '*.dcrfs-part' | grep -q . && fail "part files left"
grep -q "exported to $T/out" "$T/err" || fail "no summary: $(cat "$T/err")"

log "cat: bit-exact; clear errors"
t "${CTL[@]}" cat 1 model.safetensors | cmp - "$T/s1/model.safetensors" || fail "cat 1 differs"
t "${CTL[@]}" cat latest /sub/deep/f | cmp - "$T/s2/sub/deep/f" || fail "cat latest differs"
rc=0; t "${CTL[@]}" cat 2 nope >/dev/null 2>"$T/err" || rc=$?
[ "$rc" = 1 ] && grep -q "nope: no such file in version 2" "$T/err" || fail "cat of a missing file: $rc $(cat "$T/err")"
rc=0; t "${CTL[@]}" cat 2 sub >/dev/null 2>"$T/err" || rc=$?
[ "$rc" = 1 ] && grep -q "a directory" "$T/err" || fail "cat of a directory: $rc $(cat "$T/err")"
rc=0; t "${CTL[@]}" export 7 "$T/none" 2>"$T/err" || rc=$?
[ "$rc" = 1 ] && grep -q "version 7 does not exist" "$T/err" || fail "export of no version: $rc $(cat "$T/err")"
rc=0; t "${CTL[@]}" export 2 2>"$T/err" || rc=$?
[ "$rc" = 2 ] || fail "export without DIR: status $rc"

log "a re-run proves and skips; a changed file is exported again"
t "${CTL[@]}" export --json 2 "$T/out" >"$T/j" 2>"$T/err" || fail "re-run failed: $(cat "$T/err")"
[ "$(json_field "$T/j" skipped)" = 7 ] && [ "$(json_field "$T/j" exported)" = 0 ] ||
	fail "re-run did not skip every file: $(cat "$T/j")"
# the same size, one byte changed in its middle
python3 - "$T/out/model.safetensors" <<'EOF'
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
sz = os.fstat(fd).st_size
b = os.pread(fd, 1, sz // 2)
os.pwrite(fd, bytes([b[0] ^ 1]), sz // 2)
EOF
t "${CTL[@]}" export --json 2 "$T/out" >"$T/j" 2>"$T/err" || fail "re-run failed: $(cat "$T/err")"
[ "$(json_field "$T/j" exported)" = 1 ] && [ "$(json_field "$T/j" skipped)" = 6 ] ||
	fail "the changed file was not exported again: $(cat "$T/j")"
same_tree "$T/s2" "$T/out"

log "kill -9 in the middle of a file, then a re-run"
DCRFS_TEST_EXPORT_DELAY_MS=1000 "${CTL[@]}" export --jobs 1 2 "$T/k" 2>"$T/kerr" &
kpid=$!
_pids+=("$kpid")
for ((i = 0; i < 200; i++)); do
	[ -e "$T/k/model.safetensors.dcrfs-part" ] && break
	sleep 0.05
done
[ -e "$T/k/model.safetensors.dcrfs-part" ] || fail "the export never started the model"
sleep 0.3
kill -9 "$kpid"
wait "$kpid" 2>/dev/null || true
[ ! -e "$T/k/model.safetensors" ] || fail "a model file before its export ended"
# every complete-named file is the committed one
n=0
while IFS= read -r -d '' f; do
	rel=${f#"$T/k/"}
	cmp -s "$f" "$T/s2/$rel" || fail "after kill -9: $rel is not the committed file"
	n=$((n + 1))
done < <(find "$T/k" -path "$T/k/.dcrfs-export" -prune -o -type f ! -name '*.dcrfs-part' -print0)
[ "$n" -ge 1 ] || fail "no file was complete before the kill"
t "${CTL[@]}" export --json 2 "$T/k" >"$T/j" 2>"$T/err" || fail "resume failed: $(cat "$T/err")"
[ "$(json_field "$T/j" skipped)" = "$n" ] || fail "resume did not skip the $n complete files: $(cat "$T/j")"
same_tree "$T/s2" "$T/k"
find "$T/k" -name '*.dcrfs-part' | grep -q . && fail "part files left after resume"
[ ! -e "$T/k/.dcrfs-export" ] || fail "the export's cache was left in DIR"

log "--cache-dir: one user at a time, said clearly"
DCRFS_TEST_EXPORT_DELAY_MS=1000 "${CTL[@]}" export --jobs 1 --cache-dir "$T/busy" 2 "$T/b1" 2>/dev/null &
bpid=$!
_pids+=("$bpid")
for ((i = 0; i < 200; i++)); do
	[ -e "$T/b1/config.json" ] && break
	sleep 0.05
done
rc=0; t "${CTL[@]}" export --cache-dir "$T/busy" 2 "$T/b2" 2>"$T/err" || rc=$?
kill -9 "$bpid" 2>/dev/null || true
wait "$bpid" 2>/dev/null || true
[ "$rc" = 1 ] && grep -q "is in use by another dcrfs (pid $bpid)" "$T/err" ||
	fail "a cache directory in use: status $rc: $(cat "$T/err")"

log "--cache-dir: kept, and reused by the next export"
t "${CTL[@]}" export --cache-dir "$T/rc" 2 "$T/c1" 2>/dev/null || fail "export --cache-dir failed"
[ -d "$T/rc" ] || fail "--cache-dir not kept"
same_tree "$T/s2" "$T/c1"

log "--trust: only signed versions are seen"
t "$DCRFS_CTL" keygen "$T/key" >/dev/null || fail "keygen failed"
t "$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/cc" --sign-key "$T/key" "$T/s1" >/dev/null 2>&1 ||
	fail "signed commit failed"
t "$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/cc" "$T/s2" >/dev/null 2>&1 ||
	fail "unsigned commit failed"
t "${CTL[@]}" export --trust "$T/key.pub" latest "$T/tr" 2>"$T/err" || fail "export --trust: $(cat "$T/err")"
same_tree "$T/s1" "$T/tr"
rc=0; t "${CTL[@]}" cat --trust "$T/key.pub" 2 config.json >/dev/null 2>"$T/err" || rc=$?
[ "$rc" = 1 ] && grep -q "not signed by a trusted key" "$T/err" ||
	fail "cat --trust of an unsigned version: status $rc: $(cat "$T/err")"

log "a damaged pack: export fails clearly, no wrong file"
for p in "$STORE"/packs/*; do
	python3 - "$p" <<'EOF'
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
sz = os.fstat(fd).st_size
b = os.pread(fd, 1, sz // 2)
os.pwrite(fd, bytes([b[0] ^ 0x40]), sz // 2)
EOF
done
rc=0; t "${CTL[@]}" export 2 "$T/d" 2>"$T/err" || rc=$?
[ "$rc" = 1 ] || fail "export of a damaged version: status $rc"
grep -q "packs/" "$T/err" || fail "no line names the damaged pack: $(cat "$T/err")"
grep -q "model.safetensors: not exported" "$T/err" || fail "the failed file is not named: $(cat "$T/err")"
[ ! -e "$T/d/model.safetensors" ] || fail "a model file after a failed export"
find "$T/d" -name '*.dcrfs-part' | grep -q . && fail "part files left after a failure"
while IFS= read -r -d '' f; do
	rel=${f#"$T/d/"}
	cmp -s "$f" "$T/s2/$rel" || fail "after a failed export: $rel is not the committed file"
done < <(find "$T/d" -type f -print0)
# the chunks a cache proved earlier are still served from it
t "${CTL[@]}" cat --cache-dir "$T/rc" 2 model.safetensors | cmp - "$T/s2/model.safetensors" ||
	fail "cat from a cache that holds the version differs"
log "ok"
