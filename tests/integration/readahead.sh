#!/usr/bin/env bash
# readahead.sh - -o readahead=SIZE is what the mount gets: the bdi's
# read_ahead_kb reads SIZE once mounted, above the 1 MiB that FUSE init
# used to cap it at (8M) and below it (64K); the default is 1M. A mount
# that may not set it (not root) says so in a warning.
. "$(dirname "$0")/lib.sh"
need_bins
need_fuse
need_root
mkdir -p "$T/tree"
rand_file "$T/tree/w.bin" 100000 r
commit "$T/store" "$T/tree" >/dev/null

# ra_kb MNT - the read_ahead_kb of the bdi mounted on MNT
ra_kb() { cat "/sys/class/bdi/$(mountpoint -d "$1")/read_ahead_kb"; }

for want in 8M:8192 64K:64 "":1024; do
	opt=${want%%:*} kb=${want#*:}
	mount_dcrfs "$T/store" "$T/mnt" "${opt:+readahead=$opt}"
	got=$(ra_kb "$T/mnt")
	[ "$got" = "$kb" ] || fail "-o readahead=${opt:-(default)}: read_ahead_kb is $got, not $kb"
	cmp -s "$T/mnt/latest/w.bin" "$T/tree/w.bin" || fail "readahead=$opt: wrong bytes"
	umount_dcrfs "$T/mnt" || fail "unmount"
done
log "ok: read_ahead_kb follows -o readahead (8M, 64K, default 1M)"

# Not root: the bdi cannot be written; a warning says so (where nobody
# may mount: /dev/fuse open to all, a setuid fusermount3).
if [ ! -r /dev/fuse ] || [ ! -w /dev/fuse ] || ! command -v setpriv >/dev/null ||
   [ ! -u "$(command -v fusermount3)" ] || [ "$(stat -c %a /dev/fuse)" != 666 ]; then
	log "the unprivileged part is not run: nobody cannot mount here"
	exit 0
fi
U=$T/user
mkdir -p "$U/mnt"
cp -r "$T/store" "$U/store"
chown -R nobody "$U"
chmod 755 "$T"
if ! t setpriv --reuid=nobody --regid=nogroup --clear-groups "$DCRFS" "$U/store" "$U/mnt" \
	-o cache_dir="$U/cache,readahead=8M" >"$T/user.log" 2>&1; then
	fail "an unprivileged mount failed: $(cat "$T/user.log")"
fi
register_mount "$U/mnt"
grep -q "warning: -o readahead: cannot set /sys/class/bdi/.*/read_ahead_kb to 8192 KiB" "$T/user.log" ||
	fail "no warning for an unprivileged readahead=8M: $(cat "$T/user.log")"
t fusermount3 -u "$U/mnt"
log "ok: an unprivileged -o readahead says it has no effect"
