#!/usr/bin/env bash
# deadmount.sh - a mount whose daemon was killed ("Transport endpoint is
# not connected") is named as such, with the command that clears it
# (fusermount3 -u MNT), both by dcrfs asked to mount there again and by
# dcrfs-ctl status; after that command, mounting there works.
. "$(dirname "$0")/lib.sh"
CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$CTL"
need_fuse
mkdir -p "$T/tree"
rand_file "$T/tree/w.bin" 100000 d
commit "$T/store" "$T/tree" >/dev/null
mount_dcrfs "$T/store" "$T/mnt" restart_wait=0 # no holder: the mount dies with dcrfs
kill -KILL "$MOUNT_PID"
_wait_pid "$MOUNT_PID" 10 || fail "dcrfs survived SIGKILL"
stat "$T/mnt" >/dev/null 2>"$T/stat.err" && fail "the killed mount still answers"
grep -q "Transport endpoint is not connected" "$T/stat.err" ||
	fail "not a dead mount: $(cat "$T/stat.err")"

expect_status 1 "a dead FUSE mount \(its daemon is gone\); unmount it first \(fusermount3 -u $T/mnt\)" \
	"$DCRFS" "$T/store" "$T/mnt" -f -o cache_dir="$T/cache"
[ "$(grep -c . "$T/out")" = 1 ] || fail "more than one line: $(cat "$T/out")"
expect_status 1 "a dead dcrfs mount; unmount it \(fusermount3 -u $T/mnt\)" \
	"$CTL" status "$T/mnt"
t fusermount3 -u "$T/mnt" || fail "fusermount3 -u the dead mount"
_forget_mount "$T/mnt"
mount_dcrfs "$T/store" "$T/mnt"
cmp -s "$T/mnt/latest/w.bin" "$T/tree/w.bin" || fail "wrong bytes after remounting"
umount_dcrfs "$T/mnt" || fail "unmount"
log "ok: a dead mount is named with fusermount3 -u, by dcrfs and dcrfs-ctl status"
