#!/usr/bin/env bash
# compact_scratch.sh - compaction's scratch cache ($TMPDIR/dcrfs-compact.*)
# left by a compact or gc killed with kill -9 is collected by the next
# run (issue 30: 19 of them, 573 MB, were never collected): a directory
# whose owner lock nobody holds is removed, as is an old one without an
# owner file (an older build's); one whose owner is alive, a recent one
# without an owner file and another user's are kept; the run leaves no
# scratch of its own.
. "$(dirname "$0")/lib.sh"
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS_CTL"
command -v flock >/dev/null 2>&1 || skip "flock(1) is missing"
S=$T/store
mkdir -p "$T/tree" "$T/tmp"
rand_file "$T/tree/w.bin" 300000 a
for v in 1 2 3 4; do
	[ "$v" = 1 ] || flip_bytes "$T/tree/w.bin" 0.01 "$v"
	commit "$S" "$T/tree" >/dev/null
done
TMP=$T/tmp
mkdir "$TMP/dcrfs-compact.dead01" "$TMP/dcrfs-compact.live01" \
	"$TMP/dcrfs-compact.old001" "$TMP/dcrfs-compact.new001" "$TMP/dcrfs-compact.other1"
: >"$TMP/dcrfs-compact.dead01/owner"
head -c 100000 /dev/urandom >"$TMP/dcrfs-compact.dead01/slab"
: >"$TMP/dcrfs-compact.live01/owner"
touch -d '-1 hour' "$TMP/dcrfs-compact.old001"
chown 12345 "$TMP/dcrfs-compact.other1"
touch -d '-1 hour' "$TMP/dcrfs-compact.other1"
# a live owner: flock(1) holds the lock until its sleep ends
flock "$TMP/dcrfs-compact.live01/owner" sleep 60 &
LIVE=$!
sleep 0.3
TMPDIR=$TMP t "$DCRFS_CTL" --store "$S" compact --max-depth 1 >"$T/out" 2>&1 ||
	fail "compact failed: $(cat "$T/out")"
kill "$LIVE" 2>/dev/null || true
wait "$LIVE" 2>/dev/null || true
left=$(cd "$TMP" && ls | tr '\n' ' ')
[ "$left" = "dcrfs-compact.live01 dcrfs-compact.new001 dcrfs-compact.other1 " ] ||
	fail "scratch directories after compact: $left"
grep -q "removing $TMP/dcrfs-compact.dead01, a scratch directory left by a process that is gone" "$T/out" ||
	fail "the removal is not logged: $(cat "$T/out")"
log "ok: stale scratch collected ($(grep -c removing "$T/out") removed), live ones kept"
