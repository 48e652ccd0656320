#!/usr/bin/env bash
# delta_nospace.sh - a delta view built where its file system has no
# room: the view is stored through a shared mapping of its file
# (read/dview_out.h), where a store into a page the file system cannot
# give would kill the daemon with SIGBUS. The build must fail instead,
# with ENOSPC said in the log, the mount alive and serving; with room
# again the same view builds, byte for byte what a roomy mount built.
. "$(dirname "$0")/lib.sh"
need_fuse
need_root

chain_store "$STORE" 4M 1 2
V=delta/v2/model.safetensors

# The reference: the view built on a roomy cache.
mount_dcrfs "$STORE" "$MNT" "poll=0"
t cp "$MNT/$V" "$T/ref"
umount_dcrfs "$MNT" || fail "the first mount did not exit cleanly"
S=$(stat -c %s "$T/ref")
[ "$S" -gt 65536 ] || fail "the view is $S bytes: too small to fill past"

# The cache on a tmpfs; both versions read whole, so the view needs no
# chunk written; records on (delta_ahead=on), so it needs no scratch
# file either: only its own file.
MC=$T/mcache
mkdir -p "$MC"
t mount -t tmpfs -o size=24m tmpfs "$MC" || skip "cannot mount a tmpfs"
register_mount "$MC"
mount_dcrfs "$STORE" "$MNT" "cache_dir=$MC/c,poll=0,prefetch=none,delta_ahead=on"
same "$MNT" 1
same "$MNT" 2

# Another writer takes all but half the view's bytes.
avail=$(df -B1 --output=avail "$MC" | tail -1)
fill=$(( (avail - S / 2) / 4096 * 4096 ))
t fallocate -l "$fill" "$MC/filler"
log "view $S bytes; $(df -B1 --output=avail "$MC" | tail -1) bytes left"
if cat "$MNT/$V" >/dev/null 2>"$T/cat.err"; then
	fail "the view was read with $(df -B1 --output=avail "$MC" | tail -1) bytes left"
fi
log "read without room: $(cat "$T/cat.err")"
mountpoint -q "$MNT" || fail "the mount died building a view without room: $(tail -5 "$MOUNT_LOG")"
kill -0 "$MOUNT_PID" 2>/dev/null || fail "dcrfs died: $(tail -5 "$MOUNT_LOG")"
grep -q "No space left on device" "$MOUNT_LOG" ||
	fail "the log does not say why the view failed: $(tail -5 "$MOUNT_LOG")"
same "$MNT" 2

# Room again: the same bytes.
rm -f "$MC/filler"
t cmp "$T/ref" "$MNT/$V" || fail "the view built after the room came back differs"
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly on unmount"
log "ok"
