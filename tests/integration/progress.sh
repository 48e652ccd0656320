#!/usr/bin/env bash
# progress.sh - dcrfs-commit --progress prints progress on a stderr that
# is not a terminal, as plain lines (no terminal escapes) ending with the
# publish phase at 100%; without it such a stderr gets none.
. "$(dirname "$0")/lib.sh"
need_bins
mkdir -p "$T/tree"
rand_file "$T/tree/w.bin" 3000000 p
commit "$T/store" "$T/tree" >/dev/null
rand_file "$T/tree/w.bin" 3000000 q
t "$DCRFS_COMMIT" --progress --store "$T/store" --cache-dir "$T/commit-cache" "$T/tree" \
	>/dev/null 2>"$T/err" || fail "commit --progress: $(cat "$T/err")"
grep -qE '^publish: 2\.9 MiB / 2\.9 MiB \(100%\), .*/s, .* uploaded$' "$T/err" ||
	fail "no publish line: $(cat "$T/err")"
! grep -q $'\033' "$T/err" || fail "terminal escapes on a non-terminal: $(cat -v "$T/err")"
printf x >>"$T/tree/w.bin"
t "$DCRFS_COMMIT" --store "$T/store" --cache-dir "$T/commit-cache" "$T/tree" \
	>/dev/null 2>"$T/err" || fail "commit: $(cat "$T/err")"
! grep -qE '^(encode|publish): ' "$T/err" || fail "progress without --progress: $(cat "$T/err")"
log "ok: --progress on a non-terminal"
