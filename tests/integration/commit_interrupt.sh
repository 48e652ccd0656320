#!/usr/bin/env bash
# commit_interrupt.sh - Ctrl-C (SIGINT) during a commit: dcrfs-commit
# says how far it got, that nothing was published, and that the packs it
# uploaded are left for dcrfs-ctl gc, which does delete them; it dies of
# the signal (status 130). The interrupt comes at a fixed point: before
# the second file is opened, once the first file's pack is stored
# (the DCRFS_TEST_COMMIT_BEFORE_OPEN hook).
. "$(dirname "$0")/lib.sh"
CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$CTL"
[ "${DCR_TEST_HOOKS:-}" = yes ] || skip "needs a build with --enable-test-hooks (DCR_TEST_HOOKS=yes)"
mkdir -p "$T/tree"
rand_file "$T/tree/s.bin" 10000 s
commit "$STORE" "$T/tree" >/dev/null
# a.bin fills a pack (64 MiB) that is uploaded before b.bin is opened
rand_file "$T/tree/a.bin" $((70 << 20)) a
rand_file "$T/tree/b.bin" 100000 b
packs() { find "$STORE/packs" -type f | wc -l; }
before=$(packs)
rc=0
DCRFS_TEST_COMMIT_BEFORE_OPEN='case "$1" in */b.bin)
	for i in $(seq 300); do [ "$(find "'"$STORE"'/packs" -type f | wc -l)" -gt '"$before"' ] && break; sleep 0.1; done
	kill -INT $PPID;; esac' \
	t "$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/commit-cache" "$T/tree" >"$T/out" 2>"$T/err" || rc=$?
[ "$rc" = 130 ] || fail "interrupted commit exited $rc, not 130 (SIGINT): $(cat "$T/err")"
grep -qE "dcrfs-commit: interrupted after reading [0-9]+ of 70 MiB: nothing was published; the packs it uploaded and its incomplete uploads are named by no manifest, and 'dcrfs-ctl gc' deletes them once they are older than its grace period" "$T/err" ||
	fail "no report of the interrupted commit: $(cat "$T/err")"
[ ! -s "$T/out" ] || fail "a version was printed: $(cat "$T/out")"
[ "$(packs)" -gt "$before" ] || fail "no pack was uploaded before the interrupt"
[ "$(t "$CTL" --store "$STORE" log --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 1 ] ||
	fail "the interrupted commit published a version"
t "$CTL" --store "$STORE" gc --keep-last 1 --grace 0 >"$T/gc" 2>&1 || fail "gc: $(cat "$T/gc")"
grep -q "named by no manifest" "$T/gc" || fail "gc deleted no orphan: $(cat "$T/gc")"
[ "$(packs)" = "$before" ] || fail "gc left $(( $(packs) - before )) orphan packs"
t "$CTL" --store "$STORE" verify --quiet >/dev/null || fail "verify after gc"
# and the next commit works
t "$DCRFS_COMMIT" --quiet --store "$STORE" --cache-dir "$T/commit-cache" "$T/tree" >/dev/null ||
	fail "the commit after the interrupted one failed"
log "ok: an interrupted commit says what it left, gc collects it"
