#!/usr/bin/env bash
# gc_requests.sh - a rebasing gc of a 40-version store lists versions/
# once for its view (store/sview.h) and fetches each manifest object
# once: the index, the rebase's compaction and its scratch reader share
# the one view. Before orphans go, gc finds the versions published
# since by probing the numbers after the newest (HACKING, the publish
# protocol): one GET of the first absent number, no second LIST
# (tests/integration/gc_probe.sh publishes some in that window).
# Counted by the directory store's request log (DCRFS_TEST_STORE_LOG, a
# test hook).
. "$(dirname "$0")/lib.sh"
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS_SYNTH" "$DCRFS_COMMIT" "$DCRFS_CTL"
need_test_hooks
export TMPDIR=$T/tmp
mkdir -p "$TMPDIR"

S=$T/store
chain_store "$S" 64K 1 20
# versions 1-20 compacted: the view reads their manifests/<hash>
t "$DCRFS_CTL" -q --store "$S" compact >/dev/null
chain_store "$S" 64K 21 40
[ -e "$S/layouts/0000000001" ] || fail "no layout generation 1"

cp -a "$S" "$T/store.grace"

# gc_run STORE GRACE KEEP - gc --keep-last KEEP with the request log in
# $T/requests
gc_run() {
	LOG=$T/requests
	rm -f "$LOG"
	DCRFS_TEST_STORE_LOG=$LOG t "$DCRFS_CTL" --store "$1" gc --keep-last "$3" \
		--grace "$2" >"$T/gc.out" 2>&1 || { cat "$T/gc.out" >&2; fail "gc failed"; }
	grep -q "rebase" "$T/gc.out" || { cat "$T/gc.out" >&2; fail "gc did not rebase"; }
	[ "$(ls "$1/versions" | wc -l)" = "$3" ] || fail "gc did not keep $3 versions"
	lists=$(grep -c '^LIST versions/$' "$LOG" || true)
	gets=$(grep -c '^GET versions/' "$LOG" || true)
	[ "$lists" = 1 ] || fail "gc listed versions/ $lists times, not once (the view)"
	# the probe for versions published during gc: the next number, absent
	probes=$(grep -c '^GET versions/0000000041$' "$LOG" || true)
	[ "$probes" = 1 ] || fail "gc probed versions/0000000041 $probes times, not once"
	gets=$((gets - probes))
	log "grace $2: LIST versions/: $lists; GET versions/<n>: $gets and the probe of 41"
	# every versions/<n> and manifests/<hash> fetched once at most
	dups=$(grep -E '^GET (versions|manifests)/' "$LOG" | sort | uniq -d)
	[ -z "$dups" ] || fail "fetched more than once: $(echo "$dups" | head -5 | tr '\n' ' ')"
	[ "$gets" -le 40 ] || fail "$gets GETs of versions/ for 40 versions"
}
gc_run "$S" 0 10
# with a grace, gc also reads the kept versions as the layout before
# the rebase encodes them (mounts may still read it): 16-20, compacted
# before and rebased now, from what the view kept of that layout
gc_run "$T/store.grace" 3600 25
exit 0
