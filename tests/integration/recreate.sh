#!/usr/bin/env bash
# recreate.sh - a store deleted and created again at the same path is a
# new store: a mount that reuses its cache directory serves none of the
# old store's bytes or versions (issue 11's wrong-byte finding: every
# block of v1-v3 used to come back from the old catalog and slabs).
. "$(dirname "$0")/lib.sh"
need_fuse
need_bins

# make_trees TAG - three versions of two files, seeded by TAG
make_trees() {
	mkdir -p "$T/$1.1"
	rand_file "$T/$1.1/a.bin" $((1024 * 1024 + 12345)) "$1a"
	rand_file "$T/$1.1/b.bin" $((512 * 1024)) "$1b"
	for v in 2 3; do
		cp -a "$T/$1.$((v - 1))" "$T/$1.$v"
		flip_bytes "$T/$1.$v/a.bin" 0.03 "$1a$v"
	done
}
make_trees old
make_trees new

for v in 1 2 3; do
	[ "$(commit "$STORE" "$T/old.$v" --chunk-size 256K)" = $v ] ||
		fail "old commit $v"
done
mount_dcrfs "$STORE" "$MNT" "cache_dir=$CACHE"
for v in 1 2 3; do
	t cmp "$T/old.$v/a.bin" "$MNT/v$v/a.bin" || fail "old v$v differs"
done
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"

# The same path, a new store with other content (and a fresh commit
# cache, as a new trainer would have).
rm -rf "$STORE" "$T/commit-cache"
for v in 1 2 3; do
	[ "$(commit "$STORE" "$T/new.$v" --chunk-size 256K)" = $v ] ||
		fail "new commit $v"
done
mount_dcrfs "$STORE" "$MNT" "cache_dir=$CACHE"
for v in 1 2 3; do
	for f in a.bin b.bin; do
		t cmp "$T/new.$v/$f" "$MNT/v$v/$f" ||
			fail "v$v/$f: the old store's bytes were served"
	done
done
[ "$(readlink "$MNT/latest")" = v3 ] || fail "latest is not v3"
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"
grep -q 'created anew' "$MOUNT_LOG" || fail "no log line says the store is new"

# A new version of the new store is seen, and the cache stays bound to
# it: a remount serves v4 from the cache without its packs.
mkdir -p "$T/new.4"
cp -a "$T/new.3/." "$T/new.4/"
flip_bytes "$T/new.4/b.bin" 0.03 nb4
[ "$(commit "$STORE" "$T/new.4")" = 4 ] || fail "new commit 4"
mount_dcrfs "$STORE" "$MNT" "cache_dir=$CACHE"
t cmp "$T/new.4/b.bin" "$MNT/v4/b.bin" || fail "v4 differs"
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"
! grep -q 'created anew' "$MOUNT_LOG" || fail "the same store was taken for a new one"
log "ok: a recreated store served only its own bytes"
