#!/usr/bin/env bash
# identity_swap.sh - a version rewritten in place in the store (issue 23
# finding 1) is never read as a mix of its two trees. A running mount
# keeps the old tree's pages in the kernel (keep_cache) under inodes the
# kernel still holds; an open of such an inode between the re-index and
# the kernel invalidation used to bind to the new tree, so one cat read
# the cached half from the old tree and the rest from the new one. The
# window is held open deterministically by the test hook
# DCRFS_TEST_HOLD_INVAL (fs/bg.c): the watcher stops after the reader
# re-indexed the version, before it invalidates the kernel's entries.
. "$(dirname "$0")/lib.sh"
need_fuse
need_bins
if [ "${DCR_TEST_HOOKS:-}" != yes ]; then
	[ -z "${CI:-}" ] || fail "needs a build with --enable-test-hooks (DCRFS_TEST_HOLD_INVAL)"
	skip "needs a build with --enable-test-hooks (DCR_TEST_HOOKS=yes)"
fi

HOLD=$T/hold
SIZE=$((4 * 1024 * 1024))

# Two trees of the same shape and sizes, other bytes.
for x in A B; do
	mkdir -p "$T/$x/d"
	rand_file "$T/$x/a.bin" $SIZE "a$x"
	rand_file "$T/$x/d/b.bin" $SIZE "b$x"
done
[ "$(commit "$STORE" "$T/A" --chunk-size 256K)" = 1 ] || fail "commit of A is not 1"

touch "$HOLD"
DCRFS_TEST_HOLD_INVAL=$HOLD mount_dcrfs "$STORE" "$MNT" poll=0.2,relist=1
LOG=$MOUNT_LOG

# warm PATH - read PATH whole, then drop the page cache of its second
# half: the kernel keeps the first half (keep_cache) for the next open.
warm() {
	t python3 - "$1" $((SIZE / 2)) <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
while os.read(fd, 1 << 20):
    pass
os.posix_fadvise(fd, int(sys.argv[2]), 0, os.POSIX_FADV_DONTNEED)
os.close(fd)
PY
}
for f in a.bin d/b.bin; do
	t cmp "$T/A/$f" "$MNT/v1/$f" || fail "v1/$f is not A's before the swap"
	warm "$MNT/v1/$f"
done
exec 8<"$MNT/v1/d" # a directory of the old tree, held open

# judge WHAT OUT ERR RC ALLOW - what a read of the old tree's inode gave:
# A's bytes whole or a failure are right; B's whole only where ALLOW
# says so (a path walked again); anything else mixes the two trees.
judge() {
	local what=$1 out=$2 err=$3 rc=$4 allow=$5 f=${1#v1/}
	if [ "$rc" != 0 ]; then
		grep -qi "stale" "$err" ||
			fail "$what failed oddly: $(cat "$err")"
		log "$what: $(cat "$err")"
	elif cmp -s "$out" "$T/A/$f"; then
		log "$what: the old tree's bytes"
	elif cmp -s "$out" "$T/B/$f"; then
		log "$what: the new tree's bytes"
		[ "$allow" = B ] || fail "$what, through a handle of the old tree, read the new tree"
	else
		fail "$what mixed the two trees: $(cmp "$out" "$T/A/$f" 2>&1 | head -1 || true); $(cmp "$out" "$T/B/$f" 2>&1 | head -1 || true)"
	fi
}

# --- the store is rewritten in place: v1 is now B
rm "$STORE/versions/0000000001"
[ "$(commit "$STORE" "$T/B" --chunk-size 256K)" = 1 ] || fail "commit of B is not 1"
for ((i = 0; i < 300; i++)); do
	[ -e "$HOLD.held" ] && break
	sleep 0.1
done
[ -e "$HOLD.held" ] || fail "the mount did not re-index v1 within 30 s: $(cat "$LOG")"
grep -q "versions/0000000001 changed in the store" "$LOG" ||
	fail "no log line about v1: $(cat "$LOG")"

# In the window: the path (its dentries and inodes still cached) ...
rc=0
t cat "$MNT/v1/a.bin" >"$T/a.out" 2>"$T/a.err" || rc=$?
judge v1/a.bin "$T/a.out" "$T/a.err" $rc B
# ... and a name below the held directory of the old tree.
rc=0
t cat /dev/fd/8/b.bin >"$T/b.out" 2>"$T/b.err" || rc=$?
judge v1/d/b.bin "$T/b.out" "$T/b.err" $rc A

# --- the kernel is told: the new tree by its path, the old handle stale
rm "$HOLD"
ok=
for ((i = 0; i < 100; i++)); do
	if cmp -s "$T/B/a.bin" "$MNT/v1/a.bin" 2>/dev/null &&
		cmp -s "$T/B/d/b.bin" "$MNT/v1/d/b.bin" 2>/dev/null; then
		ok=1
		break
	fi
	sleep 0.2
done
[ "$ok" ] || fail "v1 does not read as B after the invalidation"
rc=0
t cat /dev/fd/8/b.bin >"$T/b.out" 2>"$T/b.err" || rc=$?
judge v1/d/b.bin "$T/b.out" "$T/b.err" $rc A
exec 8<&-
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"
log "ok: a version rewritten in place is read whole from one tree"
