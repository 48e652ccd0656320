#!/usr/bin/env bash
# gc_requests.sh - a rebasing gc of a 40-version store lists versions/
# once for its view (store/sview.h) and fetches each manifest object
# once: the index, the rebase's compaction and its scratch reader share
# the one view. The second LIST of versions/ is gc's re-listing before
# orphans go (HACKING, the publish protocol), which must stay. Counted
# by the directory store's request log (DCRFS_TEST_STORE_LOG, a test
# hook).
. "$(dirname "$0")/lib.sh"
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS_SYNTH" "$DCRFS_COMMIT" "$DCRFS_CTL"
if [ "${DCR_TEST_HOOKS:-no}" != yes ]; then
	[ "${CI:-}" != true ] || fail "CI needs a build with --enable-test-hooks"
	skip "needs a build with configure --enable-test-hooks (DCR_TEST_HOOKS=yes)"
fi
export TMPDIR=$T/tmp
mkdir -p "$TMPDIR"

S=$T/store
chain_store "$S" 64K 1 20
# versions 1-20 compacted: the view reads their manifests/<hash>
t "$DCRFS_CTL" -q --store "$S" compact >/dev/null
chain_store "$S" 64K 21 40
[ -e "$S/layouts/0000000001" ] || fail "no layout generation 1"

LOG=$T/requests
DCRFS_TEST_STORE_LOG=$LOG t "$DCRFS_CTL" --store "$S" gc --keep-last 10 --grace 0 \
	>"$T/gc.out" 2>&1 || { cat "$T/gc.out" >&2; fail "gc failed"; }
grep -q "rebase" "$T/gc.out" || { cat "$T/gc.out" >&2; fail "gc did not rebase"; }
[ "$(ls "$S/versions" | wc -l)" = 10 ] || fail "gc did not keep 10 versions"

lists=$(grep -c '^LIST versions/$' "$LOG" || true)
gets=$(grep -c '^GET versions/' "$LOG" || true)
log "LIST versions/: $lists; GET versions/<n>: $gets"
[ "$lists" = 2 ] ||
	fail "gc listed versions/ $lists times (the view once, the re-check before orphans once)"
# every versions/<n> and manifests/<hash> fetched once at most
dups=$(grep -E '^GET (versions|manifests)/' "$LOG" | sort | uniq -d)
[ -z "$dups" ] || fail "fetched more than once: $(echo "$dups" | head -5 | tr '\n' ' ')"
[ "$gets" -le 40 ] || fail "$gets GETs of versions/ for 40 versions"
exit 0
