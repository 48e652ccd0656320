#!/usr/bin/env bash
# remount.sh - a remount right after an unmount works: 20 rounds of
# mount (detached, as from a script or systemd) + `fusermount3 -u` on
# the same cache directory, with no pause; the daemon that was unmounted
# may still be exiting, and the new one waits for its cache directory
# instead of failing with "in use by another dcrfs". A second mount of a
# cache directory that is mounted still fails at once, naming the mount.
. "$(dirname "$0")/lib.sh"
need_bins
need_fuse
mkdir -p "$T/tree" "$T/mnt" "$T/mnt2"
rand_file "$T/tree/w.bin" 300000 r
commit "$T/store" "$T/tree" >/dev/null
# prefetch=all: work in flight when the unmount comes.
for i in $(seq 1 20); do
	t "$DCRFS" "$T/store" "$T/mnt" -o "cache_dir=$T/cache,prefetch=all" \
		>"$T/mount.out" 2>&1 || fail "mount $i of 20 failed: $(cat "$T/mount.out")"
	register_mount "$T/mnt"
	cmp -s "$T/mnt/latest/w.bin" "$T/tree/w.bin" || fail "mount $i: wrong bytes"
	t fusermount3 -u "$T/mnt" || fail "fusermount3 -u after mount $i failed"
	_forget_mount "$T/mnt"
done
log "20 rounds of mount + fusermount3 -u: ok"

# A daemon slow to exit (a test hook holds it 1.5 s after its unmount):
# the next mount waits for it, and says so.
if [ "${DCR_TEST_HOOKS:-no}" = yes ]; then
	DCRFS_TEST_EXIT_DELAY_MS=1500 t "$DCRFS" "$T/store" "$T/mnt" -o "cache_dir=$T/cache" \
		>"$T/mount.out" 2>&1 || fail "mount failed: $(cat "$T/mount.out")"
	register_mount "$T/mnt"
	t fusermount3 -u "$T/mnt" || fail "fusermount3 -u failed"
	_forget_mount "$T/mnt"
	mount_dcrfs "$T/store" "$T/mnt" "cache_dir=$T/cache"
	grep -q "waited [0-9]* ms for the dcrfs unmounted from it to exit" "$MOUNT_LOG" ||
		fail "no word of the wait: $(cat "$MOUNT_LOG")"
	cmp -s "$T/mnt/latest/w.bin" "$T/tree/w.bin" || fail "wrong bytes after the wait"
	log "$(grep -o "waited [0-9]* ms" "$MOUNT_LOG") for a daemon slow to exit"
	umount_dcrfs "$T/mnt" || fail "unmount"
else
	[ "${CI:-}" = true ] && fail "needs a build with configure --enable-test-hooks"
	log "not tried without test hooks: a daemon slow to exit"
fi

# A cache directory in use by a live mount: refused at once.
mount_dcrfs "$T/store" "$T/mnt" "cache_dir=$T/cache"
t0=$(date +%s%N)
expect_status 1 "is in use by another dcrfs \(pid $MOUNT_PID, mounted on $T/mnt\)" \
	"$DCRFS" "$T/store" "$T/mnt2" -f -o cache_dir="$T/cache"
ms=$((($(date +%s%N) - t0) / 1000000))
[ "$ms" -lt 2000 ] || fail "refusing a cache directory in use took $ms ms"
umount_dcrfs "$T/mnt" || fail "unmount"
log "ok: a cache directory in use is refused in $ms ms"
