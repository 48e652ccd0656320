#!/usr/bin/env bash
# gc_probe.sh - versions published while gc runs keep their packs, found
# without listing versions/ again: gc probes the numbers after the
# newest it listed (maint/gc.c, gc_recheck). Two versions appear in the
# window before the probe (the test hook DCRFS_TEST_GC_BEFORE_PROBE),
# naming packs that were orphans, older than any grace, when gc listed
# packs/; with --grace 0 only the probe keeps them. Both versions verify
# after gc, and gc listed versions/ once (DCRFS_TEST_STORE_LOG).
. "$(dirname "$0")/lib.sh"
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS_SYNTH" "$DCRFS_COMMIT" "$DCRFS_CTL"
need_test_hooks

S=$T/store
chain_store "$S" 64K 1 3
# versions 4 and 5, committed beside: their packs are copied in now
# (orphans to gc), their manifests only in gc's window
cp -a "$S" "$T/side"
chain_store "$T/side" 64K 4 5
mkdir -p "$T/later"
for p in "$T/side/packs/"*; do
	[ -e "$S/packs/${p##*/}" ] || cp "$p" "$S/packs/"
done
cp "$T/side/versions/0000000004" "$T/side/versions/0000000005" "$T/later/"
LOG=$T/requests
DCRFS_TEST_GC_BEFORE_PROBE="cp $T/later/* $S/versions/" DCRFS_TEST_STORE_LOG=$LOG \
	t "$DCRFS_CTL" --store "$S" gc --keep-last 10 --grace 0 >"$T/gc.out" 2>&1 ||
	{ cat "$T/gc.out" >&2; fail "gc failed"; }
[ -e "$S/versions/0000000005" ] || fail "the hook did not publish versions 4 and 5"
t "$DCRFS_CTL" --store "$S" verify >/dev/null 2>"$T/verify.err" ||
	fail "a version published during gc lost its packs: $(tail -n 3 "$T/verify.err")"
lists=$(grep -c '^LIST versions/$' "$LOG" || true)
[ "$lists" = 1 ] || fail "gc listed versions/ $lists times, not once"
grep -q '^GET versions/0000000006$' "$LOG" || fail "gc did not probe version 6"
grep -q '^GET versions/0000000007$' "$LOG" && fail "gc probed past the first absent version"
log "versions 4 and 5, published during gc, verify; versions/ listed once"
