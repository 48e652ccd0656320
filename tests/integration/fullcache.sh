#!/usr/bin/env bash
# fullcache.sh - a full disk under the committer's cache, then under a
# mount's cache.
#
# 1. The committer: the copy of the committed tree is only an
# optimisation: when it cannot be written the commit still publishes
# (with one warning) and reads back bit-exactly. When the next commit
# cannot rebuild its parent there, it fails with a clear message and
# publishes nothing; with room again it succeeds.
#
# 2. A mount whose cache directory is a 3 MiB tmpfs, with the default
# cache_size (10G): it says once that the cache keeps to what the file
# system holds, follows 31 versions committed while it is mounted (each
# appears and reads bit-exactly, so the catalog stays writable), still
# indexes one when another writer has taken every free byte, and logs a
# bounded number of lines, not one per chunk.
. "$(dirname "$0")/lib.sh"
need_fuse
need_root
need_bins "$DCRFS_SYNTH"

SMALL=$T/small
mkdir -p "$SMALL"
t mount -t tmpfs -o size=1m tmpfs "$SMALL" || skip "cannot mount a tmpfs"
MC=$T/mcache
_umount_small() {
	local rc=$? m
	umount_dcrfs "$T/mnt2" 2>/dev/null
	for m in "$MC" "$SMALL"; do
		mountpoint -q "$m" 2>/dev/null || continue
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
	done
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

# 2. The mount's cache on a 3 MiB tmpfs.
mkdir -p "$MC"
t mount -t tmpfs -o size=3m tmpfs "$MC" || skip "cannot mount a tmpfs"
S2=$T/store2
M2=$T/mnt2
synth init --size 1M --seed 21 "$T/m1"
[ "$(commit "$S2" "$T/m1" --chunk-size 64K)" = 1 ] || fail "m1 is not v1"
next() { # I: commit version I, a step from I-1
	synth step --in "$T/m$(($1 - 1))" --out "$T/m$1" --seed "$1" --state "$T/adam2"
	rm -f "$T/m$1/.dcrfs-synth.state"
	[ "$(commit "$S2" "$T/m$1")" = "$1" ] || fail "m$1 is not v$1"
}
appears() { # I: wait for v I to appear, then read it whole
	local n
	for ((n = 0; n < 100; n++)); do
		[ -e "$M2/v$1" ] && break
		sleep 0.1
	done
	[ -e "$M2/v$1" ] || fail "v$1 committed while mounted did not appear: $(tail -5 "$MOUNT_LOG")"
	t diff -r "$T/m$1" "$M2/v$1" >/dev/null || fail "v$1 differs"
}
for i in 2 3 4; do next "$i"; done
mount_dcrfs "$S2" "$M2" "cache_dir=$MC/c,poll=0.2"
for i in 1 2 3 4; do t diff -r "$T/m$i" "$M2/v$i" >/dev/null || fail "v$i differs"; done
for ((i = 5; i <= 34; i++)); do
	next "$i"
	appears "$i"
	t diff -r "$T/m$((i - 3))" "$M2/v$((i - 3))" >/dev/null || fail "v$((i - 3)) differs"
done
free=$(df -k --output=avail "$MC" | tail -1)
[ "$free" -ge 256 ] || fail "the cache left ${free} KiB free for the catalog"
# Another writer takes every free byte: the catalog makes room in the
# cache for the next version.
# (dd's ENOSPC is the proof: a df after it races with the mount, which
# may free a few KiB meanwhile - a catalog checkpoint, a slab evicted)
dd if=/dev/zero of="$MC/filler" bs=4k 2>"$T/dd.err" && fail "the filler did not fill $MC"
grep -q "No space left on device" "$T/dd.err" || fail "the filler failed otherwise: $(cat "$T/dd.err")"
next 35
appears 35
rm -f "$MC/filler"
t diff -r "$T/m34" "$M2/v34" >/dev/null || fail "v34 differs after the filler"
umount_dcrfs "$M2" || fail "dcrfs did not exit cleanly on unmount"
n=$(grep -c "is more than its file system holds" "$MOUNT_LOG" || true)
[ "$n" = 1 ] || fail "the cache too big for its file system was said $n times: $(head -5 "$MOUNT_LOG")"
n=$(grep -cE "warning|error" "$MOUNT_LOG" || true)
log "$n warnings and errors over 35 versions on a 3 MiB cache"
[ "$n" -le 4 ] || fail "$n warnings and errors: $(sort "$MOUNT_LOG" | uniq -c | sort -rn | head -5)"
log "ok"
