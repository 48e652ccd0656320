#!/usr/bin/env bash
# docs.sh - what a newcomer reads agrees with the tools: every tool
# answers --version; every man page's SEE ALSO and the README's layout
# name dcrfs-ctl(8); dcrfs-synth(1)'s example creates the store it
# commits to (--init); show --help does not call dcrfs's digest SHA-256.
. "$(dirname "$0")/lib.sh"
CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$CTL" "$DCRFS_SYNTH"
for b in "$DCRFS" "$DCRFS_COMMIT" "$CTL" "$DCRFS_SYNTH"; do
	out=$(t "$b" --version 2>&1) || fail "$(basename "$b") --version: $out"
	[[ $out == "$(basename "$b") "[0-9]* ]] || fail "$(basename "$b") --version printed '$out'"
done
for p in dcrfs.8 dcrfs-commit.1 dcrfs-synth.1; do
	sed -n '/^\.Sh SEE ALSO/,/^\.Sh/p' "$DCR_SRCDIR/man/$p" | grep -q '^\.Xr dcrfs-ctl 8' ||
		fail "$p: SEE ALSO lacks dcrfs-ctl(8)"
done
grep -q '^man/ .*dcrfs-ctl(8)' "$DCR_SRCDIR/README.md" || fail "the README's layout lacks dcrfs-ctl(8)"
first=$(grep -m1 '^ *dcrfs-commit --' "$DCR_SRCDIR/man/dcrfs-synth.1")
[[ $first == *--init* ]] || fail "dcrfs-synth(1) first commits without --init: $first"
t "$CTL" --help | grep -A1 '^  show V' | grep -q 'SHA-256' && fail "show --help calls the digest SHA-256"
# the example metrics port is not JuiceFS's default (9567)
grep -rn ':9567' "$DCR_SRCDIR/README.md" "$DCR_SRCDIR/man" "$DCR_SRCDIR/examples" \
	"$DCR_SRCDIR/fs" && fail "an example uses JuiceFS's metrics port 9567"
log "ok: --version, SEE ALSO, README layout, synth example, show --help"
