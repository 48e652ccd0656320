#!/usr/bin/env bash
# identity.sh - a version's identity is its manifest (DESIGN.md 7a,
# issue 10 section 3). A manifest deleted by hand and committed again
# under the same number is noticed by a running mount (its periodic
# listing, relist=) and by a remount with the same cache: the new
# tree's bytes are served, the old tree's never again, and the mount
# says so loudly. Versions that gc removed disappear from a running
# mount. A commit cache that holds the replaced version drops itself.
. "$(dirname "$0")/lib.sh"
need_fuse
need_bins
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl

OPTS="cache_dir=$CACHE,poll=0.2,relist=1"

# old.1 .. old.5: two files, a small edit per step
mkdir -p "$T/old.1"
rand_file "$T/old.1/a.bin" $((1024 * 1024 + 12345)) oa
rand_file "$T/old.1/b.bin" $((512 * 1024)) ob
for v in 2 3 4 5; do
	cp -a "$T/old.$((v - 1))" "$T/old.$v"
	flip_bytes "$T/old.$v/a.bin" 0.03 "oa$v"
done
# new.5: another tree for number 5 (b.bin gone, c.bin new, a.bin edited)
new_tree() { # NAME SEED
	mkdir -p "$T/$1"
	cp -a "$T/old.4/a.bin" "$T/$1/a.bin"
	flip_bytes "$T/$1/a.bin" 0.05 "$2a"
	rand_file "$T/$1/c.bin" 300000 "$2c"
}
new_tree new.5 n5
new_tree new2.5 m5
new_tree new3.5 k5

for v in 1 2 3; do
	[ "$(commit "$STORE" "$T/old.$v" --chunk-size 256K)" = $v ] ||
		fail "commit $v"
done
[ "$(commit "$STORE" "$T/old.4" --full)" = 4 ] || fail "commit 4 (anchor)"
[ "$(commit "$STORE" "$T/old.5")" = 5 ] || fail "commit 5"

mount_dcrfs "$STORE" "$MNT" "$OPTS"
LOG1=$MOUNT_LOG
for f in a.bin b.bin; do
	t cmp "$T/old.5/$f" "$MNT/v5/$f" || fail "v5/$f differs before"
done
[ "$(ls "$MNT/v5" | tr '\n' ' ')" = "a.bin b.bin " ] || fail "v5 lists $(ls "$MNT/v5")"
exec 7<"$MNT/v5/a.bin" # an open file of the old tree

# --- an admin deletes v5 and commits again: the new content is v5
rm "$STORE/versions/0000000005"
[ "$(commit "$STORE" "$T/new.5")" = 5 ] || fail "the recommit is not 5"

ok=
for ((i = 0; i < 100; i++)); do
	if [ "$(ls "$MNT/v5" 2>/dev/null | tr '\n' ' ')" = "a.bin c.bin " ] &&
		cmp -s "$T/new.5/a.bin" "$MNT/v5/a.bin"; then
		ok=1
		break
	fi
	sleep 0.2
done
[ "$ok" ] || fail "the running mount still shows the old v5: $(ls "$MNT/v5" | tr '\n' ' ')"
for f in a.bin c.bin; do
	t cmp "$T/new.5/$f" "$MNT/v5/$f" || fail "v5/$f is not the new v5's"
done
[ ! -e "$MNT/v5/b.bin" ] || fail "the old v5's b.bin is still there"
t cat "$MNT/latest/a.bin" | cmp -s - "$T/new.5/a.bin" || fail "latest/a.bin is not the new v5's"
grep -q "versions/0000000005 changed in the store (manifest [0-9a-f]\{12\}\.\. -> [0-9a-f]\{12\}\.\.): re-indexed; the old tree is no longer served" "$LOG1" ||
	fail "no loud log line about v5: $(grep -i 0000000005 "$LOG1")"
# The open file of the old tree stays on it: it reads the old bytes
# (still in the page cache) or fails: EIO once the kernel has dropped
# its inode (lookups of the new tree carry another generation), ESTALE
# from the daemon; never the new tree's bytes.
if t dd bs=64k status=none <&7 >"$T/fd7.out" 2>"$T/fd7.err"; then
	cmp -s "$T/fd7.out" "$T/old.5/a.bin" ||
		fail "an open file of the old v5 read bytes that are not the old v5's"
else
	grep -qi "stale\|input/output error" "$T/fd7.err" ||
		fail "an open file of the old v5 failed oddly: $(cat "$T/fd7.err")"
fi
exec 7<&-

# --- gc removes versions 1-3 (4 is an anchor, 5 its child)
t "$DCRFS_CTL" --store "$STORE" gc --keep-last 2 --no-keep-tagged --grace 0 -q
[ ! -e "$STORE/versions/0000000001" ] || fail "gc kept version 1"
ok=
for ((i = 0; i < 100; i++)); do
	if [ "$(ls "$MNT" | grep '^v' | tr '\n' ' ')" = "v4 v5 " ]; then
		ok=1
		break
	fi
	sleep 0.2
done
[ "$ok" ] || fail "gc'ed versions are still listed: $(ls "$MNT" | tr '\n' ' ')"
[ ! -e "$MNT/v1" ] || fail "v1 can still be looked up"
[ ! -e "$MNT/v3/a.bin" ] || fail "v3/a.bin can still be looked up"
grep -q "versions/0000000002 is gone from the store" "$LOG1" ||
	fail "no log line about the gone v2"
t cmp "$T/old.4/a.bin" "$MNT/v4/a.bin" || fail "v4 broken after gc"
t cmp "$T/new.5/a.bin" "$MNT/v5/a.bin" || fail "v5 broken after gc"
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"

# --- the same while no mount runs: a remount with the same cache
rm "$STORE/versions/0000000005"
[ "$(commit "$STORE" "$T/new2.5")" = 5 ] || fail "the second recommit is not 5"
mount_dcrfs "$STORE" "$MNT" "$OPTS"
for f in a.bin c.bin; do
	t cmp "$T/new2.5/$f" "$MNT/v5/$f" ||
		fail "remount: v5/$f is not the newest v5's (the old tree was served)"
done
grep -q "versions/0000000005 changed in the store (manifest" "$MOUNT_LOG" ||
	fail "remount: no log line about v5"
[ "$(ls "$MNT" | grep '^v' | tr '\n' ' ')" = "v4 v5 " ] ||
	fail "remount lists $(ls "$MNT" | tr '\n' ' ')"
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"

# --- the committer: its cache holds v5 (new2.5); another trainer
# replaces v5 (new3.5); the next commit on v5 drops the stale copy.
rm "$STORE/versions/0000000005"
[ "$(t "$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/other-cache" --quiet "$T/new3.5")" = 5 ] ||
	fail "the other trainer's commit is not 5"
mkdir -p "$T/new.6"
cp -a "$T/new3.5/." "$T/new.6/"
flip_bytes "$T/new.6/a.bin" 0.02 s6
v=$(t "$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/commit-cache" --quiet "$T/new.6" 2>"$T/c6.err") ||
	fail "commit 6: $(cat "$T/c6.err")"
[ "$v" = 6 ] || fail "commit 6 published $v"
grep -q "the commit cache holds version 5 built from manifest [0-9a-f]\{12\}\.\., but the store's version 5 is manifest [0-9a-f]\{12\}\.\.: it changed in the store" "$T/c6.err" ||
	fail "no warning about the stale commit cache: $(cat "$T/c6.err")"
[ "$(grep -c 'does not match version' "$T/c6.err")" = 0 ] ||
	fail "the commit fell back chunk by chunk: $(cat "$T/c6.err")"
mount_dcrfs "$STORE" "$MNT" "$OPTS"
for f in a.bin c.bin; do
	t cmp "$T/new.6/$f" "$MNT/v6/$f" || fail "v6/$f differs"
	t cmp "$T/new3.5/$f" "$MNT/v5/$f" || fail "v5/$f is not the other trainer's"
done
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"
log "ok: a reused version number is noticed, re-indexed and never served stale"
