#!/usr/bin/env bash
# bitrot.sh - a byte flipped inside a cached chunk file, with the file's
# inode, size and times put back as they were (silent media corruption),
# is caught and never served: on the chunk's first use after a remount,
# and during a mount, after the chunk's first use (every chunk read from
# a cache file is checked): the chunk is fetched again from the store.
# With the store's packs gone the same read fails with EIO instead of
# returning the rotten bytes.
. "$(dirname "$0")/lib.sh"
need_fuse
need_bins

mkdir -p "$T/tree.1" "$T/tree.2"
rand_file "$T/tree.1/w.bin" $((2 * 1024 * 1024 + 4096)) w
cp -a "$T/tree.1/w.bin" "$T/tree.2/w.bin"
flip_bytes "$T/tree.2/w.bin" 0.02 w2
[ "$(commit "$STORE" "$T/tree.1" --chunk-size 256K)" = 1 ] || fail "commit 1"
[ "$(commit "$STORE" "$T/tree.2")" = 2 ] || fail "commit 2"

# 1. materialize both versions into the cache
mount_dcrfs "$STORE" "$MNT" "cache_dir=$CACHE,poll=1"
t cmp "$T/tree.1/w.bin" "$MNT/v1/w.bin" || fail "v1 differs on the first read"
t cmp "$T/tree.2/w.bin" "$MNT/v2/w.bin" || fail "v2 differs on the first read"
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"

# 2. rot: one byte of every allocated block of every slab, times
#    restored, pages dropped
nslabs=$(find "$CACHE" -path '*/slabs/*' ! -name '*.sums' -type f | wc -l)
[ "$nslabs" -eq 2 ] || fail "expected 2 slabs (v1 and v2 of w.bin), found $nslabs"
nrot=$(rot_cache "$CACHE")
[ "$nrot" -ge 2 ] || fail "nothing allocated in the slabs to rot"
if [ "$(id -u)" = 0 ]; then
	sync
	echo 3 >/proc/sys/vm/drop_caches
fi

# 3. remount with the packs gone: every read is EIO, never the rot
mv "$STORE/packs" "$T/packs.away"
mkdir "$STORE/packs"
mount_dcrfs "$STORE" "$MNT" "cache_dir=$CACHE,poll=1"
for v in 1 2; do
	if cat "$MNT/v$v/w.bin" >"$T/out.$v" 2>"$T/err.$v"; then
		fail "v$v was served from rotten cache files"
	fi
	grep -q 'Input/output error' "$T/err.$v" ||
		fail "v$v: expected EIO, got: $(cat "$T/err.$v")"
done
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"
grep -q 'failed its check' "$T"/dcrfs.*.log ||
	fail "no log line names the rotten chunks"

# 4. packs back: the same reads fetch again and are right, and the cache
#    is whole again for the next mount
rmdir "$STORE/packs"
mv "$T/packs.away" "$STORE/packs"
mount_dcrfs "$STORE" "$MNT" "cache_dir=$CACHE,poll=1"
t cmp "$T/tree.1/w.bin" "$MNT/v1/w.bin" || fail "v1 differs after the rot"
t cmp "$T/tree.2/w.bin" "$MNT/v2/w.bin" || fail "v2 differs after the rot"
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"
mv "$STORE/packs" "$T/packs.away"
mkdir "$STORE/packs"
mount_dcrfs "$STORE" "$MNT" "cache_dir=$CACHE,poll=1"
t cmp "$T/tree.2/w.bin" "$MNT/v2/w.bin" || fail "v2 not cached again after the rot"
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"

# 5. rot during a mount: v2's chunks written and proven by this mount
#    (prefetch=latest keeps them out of memory and of the kernel's pages
#    of the file), then rotten under it, its pages dropped: every read
#    from the slab is checked, so EIO with the packs gone, one line
#    naming the slab and chunk, and right bytes once the packs are back.
rmdir "$STORE/packs"
mv "$T/packs.away" "$STORE/packs"
mount_dcrfs "$STORE" "$MNT" "cache_dir=$T/cache2,poll=1,prefetch=latest"
LOG=$MOUNT_LOG
for ((i = 0; i < 200; i++)); do
	grep -q "prefetched v2" "$LOG" && break
	sleep 0.1
done
grep -q "prefetched v2" "$LOG" || fail "v2 was not prefetched: $(cat "$LOG")"
nrot2=$(rot_cache "$T/cache2")
[ "$nrot2" -ge 2 ] || fail "nothing of v2 allocated in the slab to rot"
mv "$STORE/packs" "$T/packs.away"
mkdir "$STORE/packs"
if cat "$MNT/v2/w.bin" >"$T/out.5" 2>"$T/err.5"; then
	cmp -s "$T/out.5" "$T/tree.2/w.bin" && fail "v2 read right with neither packs nor a good cache?"
	fail "v2 was served from a cache file that rotted during the mount"
fi
grep -q 'Input/output error' "$T/err.5" ||
	fail "v2 during the mount: expected EIO, got: $(cat "$T/err.5")"
grep -q 'cache: .*/slabs/v0*2\.f0: chunk [0-9]* failed its check; punched out' "$LOG" ||
	fail "no log line names the rotten chunk of v2's slab: $(cat "$LOG")"
rmdir "$STORE/packs"
mv "$T/packs.away" "$STORE/packs"
t cmp "$T/tree.2/w.bin" "$MNT/v2/w.bin" ||
	fail "v2 is not fetched again once the packs are back"
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"
log "ok: $nrot rotten blocks in $nslabs slabs caught; $nrot2 during a mount"
