#!/usr/bin/env bash
# ctl_progress.sh - dcrfs-ctl verify --deep, compact and gc show their
# progress as dcrfs-commit does: with --progress on a stderr that is not
# a terminal, plain lines (no terminal escapes) ending each phase at
# 100%, with or without --json (stdout stays one JSON object); without
# --progress such a stderr gets none; on a terminal (script(1)) the line
# is redrawn in place, and --json silences it there.
. "$(dirname "$0")/lib.sh"
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS_CTL"
command -v python3 >/dev/null 2>&1 || skip "python3 is missing"

S=$T/store
ctl() { t "$DCRFS_CTL" --store "$S" "$@"; }
mkdir -p "$T/tree"
rand_file "$T/tree/w.bin" 2000000 a
commit "$S" "$T/tree" >/dev/null
for s in b c d; do
	flip_bytes "$T/tree/w.bin" 0.001 "$s"
	commit "$S" "$T/tree" >/dev/null
done

# expect_line FILE REGEX - FILE has a line matching REGEX, and no escapes
expect_line() {
	grep -qE "$2" "$1" || fail "no line /$2/ in: $(cat -v "$1")"
	! grep -q $'\033' "$1" || fail "terminal escapes on a non-terminal: $(cat -v "$1")"
}
# no_progress FILE
no_progress() {
	! grep -qE '^(check packs|materialize|compact|rebase|read manifests|remove versions|delete packs): ' "$1" ||
		fail "progress without --progress: $(cat -v "$1")"
}
pct100='\(100%\), [0-9.]+ [KMG]?i?B/s$'

ctl verify --deep >/dev/null 2>"$T/err" || fail "verify --deep: $(cat "$T/err")"
no_progress "$T/err"
ctl verify --deep --progress >/dev/null 2>"$T/err" || fail "verify --deep --progress: $(cat "$T/err")"
expect_line "$T/err" "^check packs: .* / .* $pct100"
expect_line "$T/err" "^materialize: 7\.6 MiB / 7\.6 MiB $pct100"
ctl verify --deep --progress --json >"$T/out" 2>"$T/err" ||
	fail "verify --json --progress: $(cat "$T/err")"
expect_line "$T/err" "^materialize: 7\.6 MiB / 7\.6 MiB $pct100"
python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$T/out" ||
	fail "verify --json --progress: stdout is not one JSON value: $(cat "$T/out")"

ctl compact --max-depth 1 >/dev/null 2>"$T/err" || fail "compact: $(cat "$T/err")"
no_progress "$T/err"
for s in e f; do
	flip_bytes "$T/tree/w.bin" 0.001 "$s"
	commit "$S" "$T/tree" >/dev/null
done
ctl compact --max-depth 1 --progress >"$T/out" 2>"$T/err" || fail "compact --progress: $(cat "$T/err")"
expect_line "$T/err" '^compact: 6 / 6 versions \(100%\), [0-9.]+ versions/s$'
grep -q '^rewrote version 6' "$T/out" || fail "compact printed: $(cat "$T/out")"

ctl gc --keep-last 2 --grace 0 --progress >"$T/out" 2>"$T/err" || fail "gc --progress: $(cat "$T/err")"
expect_line "$T/err" '^read manifests: 6 / 6 versions \(100%\), [0-9.]+ versions/s$'
expect_line "$T/err" '^remove versions: 4 / 4 versions \(100%\), [0-9.]+ versions/s$'
expect_line "$T/err" "^delete packs: .* / .* $pct100"
grep -q '^remove version 1$' "$T/out" || fail "gc printed: $(cat "$T/out")"
flip_bytes "$T/tree/w.bin" 0.001 g
commit "$S" "$T/tree" >/dev/null
ctl gc --keep-last 2 --grace 0 --json >"$T/out" 2>"$T/err" || fail "gc --json: $(cat "$T/err")"
no_progress "$T/err"
python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$T/out" ||
	fail "gc --json: stdout is not one JSON value: $(cat "$T/out")"
log "ok: --progress on a non-terminal"

# on a terminal: redrawn in place, unless --json
if ! script -qec true /dev/null >/dev/null 2>&1; then
	log "script(1) cannot make a terminal here: terminal checks left out"
	exit 0
fi
q=$(printf '%q ' "$DCRFS_CTL" --store "$S" verify --deep)
t script -qec "$q" /dev/null >"$T/tty" || fail "verify on a terminal: $(cat -v "$T/tty")"
grep -q $'\r\033\\[Kmaterialize: ' "$T/tty" || fail "no progress on a terminal: $(cat -v "$T/tty")"
t script -qec "$q --json" /dev/null >"$T/tty" || fail "verify --json on a terminal: $(cat -v "$T/tty")"
no_progress "$T/tty"
! grep -q 'materialize: ' "$T/tty" || fail "progress with --json on a terminal: $(cat -v "$T/tty")"
log "ok: on a terminal"
