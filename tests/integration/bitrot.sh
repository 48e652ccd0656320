#!/usr/bin/env bash
# bitrot.sh - a byte flipped inside a cached chunk file, with the file's
# inode, size and times put back as they were (silent media corruption),
# is caught on the chunk's first use after a remount and never served:
# the chunk is fetched again from the store. With the store's packs gone
# the same read fails with EIO instead of returning the rotten bytes.
. "$(dirname "$0")/lib.sh"
need_fuse
need_bins

STORE=$T/store
MNT=$T/mnt
CACHE=$T/cache

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
nslabs=$(find "$CACHE" -path '*/slabs/*' -type f | wc -l)
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
log "ok: $nrot rotten blocks in $nslabs slabs caught"
