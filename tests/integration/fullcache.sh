#!/usr/bin/env bash
# fullcache.sh - a full disk under the committer's cache. The copy of the
# committed tree is only an optimisation: when it cannot be written the
# commit still publishes (with one warning) and reads back bit-exactly.
# When the next commit cannot rebuild its parent there, it fails with a
# clear message and publishes nothing; with room again it succeeds.
. "$(dirname "$0")/lib.sh"
need_fuse
need_root
need_bins "$DCRFS_SYNTH"

STORE=$T/store
SMALL=$T/small
mkdir -p "$SMALL"
t mount -t tmpfs -o size=1m tmpfs "$SMALL" || skip "cannot mount a tmpfs"
_umount_small() {
	local rc=$?
	umount "$SMALL" 2>/dev/null || umount -l "$SMALL" 2>/dev/null
	(exit "$rc")
	_cleanup
}
trap _umount_small EXIT

synth() { t "$DCRFS_SYNTH" "$@" --quiet; }
synth init --size 3M --seed 8 "$T/s0"
synth step --in "$T/s0" --out "$T/s1" --seed 9 --state "$T/adam"

# --copy: this is about the copy in the cache (not made by default for a
# new directory)
C=("$DCRFS_COMMIT" --init --copy --store "$STORE" --cache-dir "$SMALL/cc")

rc=0
v=$(t "${C[@]}" "$T/s0" 2>"$T/err1") || rc=$?
[ "$rc" = 0 ] && [ "$v" = 1 ] || fail "v1 with a full cache disk: status $rc, '$v': $(cat "$T/err1")"
grep -q "cannot keep a copy of the committed tree" "$T/err1" ||
	fail "no warning about the stage copy: $(cat "$T/err1")"
[ "$(grep -c "cannot keep a copy" "$T/err1")" = 1 ] ||
	fail "the warning is not said once: $(cat "$T/err1")"

# The next commit needs the parent and has no room to rebuild it.
rc=0
t "${C[@]}" "$T/s1" >"$T/out2" 2>"$T/err2" || rc=$?
[ "$rc" = 1 ] || fail "v2 with no room to rebuild the parent: status $rc: $(cat "$T/err2")"
grep -q "No space left on device" "$T/err2" || fail "no clear reason: $(cat "$T/err2")"
[ ! -s "$T/out2" ] || fail "a failed commit printed a version: $(cat "$T/out2")"
[ ! -e "$STORE/versions/0000000002" ] || fail "a failed commit published version 2"

# With room again the same commit works.
v=$(commit "$STORE" "$T/s1") || fail "v2 with a roomy cache failed"
[ "$v" = 2 ] || fail "v2: got '$v'"

mount_dcrfs "$STORE" "$T/mnt"
t diff -r "$T/s0" "$T/mnt/v1" >/dev/null || fail "v1 differs"
t diff -r "$T/s1" "$T/mnt/v2" >/dev/null || fail "v2 differs"
umount_dcrfs "$T/mnt" || fail "dcrfs did not exit cleanly on unmount"
log "ok"
