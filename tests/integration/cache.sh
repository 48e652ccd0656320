#!/usr/bin/env bash
# cache.sh - the chunk cache survives a remount (a second mount reads
# everything with the store's packs gone), a damaged cached chunk is
# never served: it is fetched again from the store, and every chunk a
# read served is cached as its own version's, even one served from
# memory as another version's chunk of the same content.
. "$(dirname "$0")/lib.sh"
need_fuse
need_bins

mkdir -p "$T/tree.1/nested"
rand_file "$T/tree.1/a.bin" $((3 * 1024 * 1024 + 77)) a
rand_file "$T/tree.1/nested/b.bin" $((1024 * 1024)) b
printf 'small\n' >"$T/tree.1/small.txt"
cp -a "$T/tree.1" "$T/tree.2"
flip_bytes "$T/tree.2/a.bin" 0.02 a2
[ "$(commit "$STORE" "$T/tree.1" --chunk-size 256K)" = 1 ] || fail "commit 1"
[ "$(commit "$STORE" "$T/tree.2")" = 2 ] || fail "commit 2"

check_all() { # what
	local i
	for i in 1 2; do
		t diff -r "$T/tree.$i" "$MNT/v$i" || fail "$1: v$i differs from tree.$i"
	done
}

# 1. cold: read everything from the store, filling the cache
mount_dcrfs "$STORE" "$MNT" "cache_dir=$CACHE,poll=1"
check_all "first mount"
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"
nslabs=$(find "$CACHE" -path '*/slabs/*' ! -name '*.sums' -type f | wc -l)
[ "$nslabs" -gt 0 ] || fail "nothing under $CACHE/*/slabs after reading"
log "$nslabs slab files cached"

# 2. warm: the packs are gone, the cache alone serves every byte
mv "$STORE/packs" "$T/packs.away"
mkdir "$STORE/packs"
mount_dcrfs "$STORE" "$MNT" "cache_dir=$CACHE,poll=1"
check_all "remount without packs"
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"
rmdir "$STORE/packs"
mv "$T/packs.away" "$STORE/packs"

# 3. damaged cache: flip a byte in every cached chunk; reads must still
#    return the right bytes, fetched again from the store
rot_cache "$CACHE" >/dev/null
mount_dcrfs "$STORE" "$MNT" "cache_dir=$CACHE,poll=1"
check_all "remount with a damaged cache"
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"

# 4. and the damage was repaired: without the packs, the cache serves all
mv "$STORE/packs" "$T/packs.away"
mkdir "$STORE/packs"
mount_dcrfs "$STORE" "$MNT" "cache_dir=$CACHE,poll=1"
check_all "remount after repair, without packs"
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"
rmdir "$STORE/packs"
mv "$T/packs.away" "$STORE/packs"

# 5. a chunk served from memory as another version's of the same content
#    (nested/b.bin did not change from v1 to v2) is in its own version's
#    slab too: read v2 first, then v1, then v1 again without the packs
rm -rf "$CACHE"
mount_dcrfs "$STORE" "$MNT" "cache_dir=$CACHE,poll=1,prefetch=none"
t diff -r "$T/tree.2" "$MNT/v2" || fail "fresh cache: v2 differs from tree.2"
t diff -r "$T/tree.1" "$MNT/v1" || fail "fresh cache: v1 differs from tree.1"
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"
mv "$STORE/packs" "$T/packs.away"
mkdir "$STORE/packs"
mount_dcrfs "$STORE" "$MNT" "cache_dir=$CACHE,poll=1,prefetch=none"
t diff -r "$T/tree.1" "$MNT/v1" ||
	fail "v1 read after v2, without packs: a chunk v2 shares was not cached as v1's"
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"
log "ok"
