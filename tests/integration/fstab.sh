#!/usr/bin/env bash
# fstab.sh - mount and unmount the way an admin does: an fstab line,
# `mount -T FSTAB MNT` (mount(8) runs mount.fuse3, which runs dcrfs),
# `umount MNT`.
. "$(dirname "$0")/lib.sh"
need_fuse
need_root
need_bins
[ -x /sbin/mount.fuse3 ] || [ -x /usr/sbin/mount.fuse3 ] || [ -x /sbin/mount.fuse ] ||
	skip "mount.fuse3 is missing"
mount --help 2>&1 | grep -q -- '--fstab' || skip "mount(8) has no -T/--fstab"

mkdir -p "$T/tree/sub" "$MNT"
rand_file "$T/tree/model.bin" 1500000 m
printf 'config\n' >"$T/tree/sub/config.json"
[ "$(commit "$STORE" "$T/tree" --tag first)" = 1 ] || fail "commit is not version 1"

# 1. The line an admin writes, type fuse.dcrfs. mount(8) runs mount.fuse3
#    with PATH removed, so "dcrfs" must be in the default path (/usr/sbin,
#    /usr/local/sbin, ...): a build directory first in PATH is not seen.
#    In a private mount namespace /usr/local/sbin is covered with a
#    directory holding a link to the build's dcrfs; nothing changes
#    outside the namespace.
if command -v unshare >/dev/null 2>&1 &&
   unshare -m --propagation private true 2>/dev/null; then
	mkdir -p "$T/sbin" "$T/mnt-ns"
	ln -s "$DCRFS" "$T/sbin/dcrfs"
	printf '%s %s fuse.dcrfs ro,allow_other,_netdev,cache_dir=%s,poll=1 0 0\n' \
		"$STORE" "$T/mnt-ns" "$T/cache-ns" >"$T/fstab.ns"
	cat >"$T/ns.sh" <<'NS'
set -eu
T=$1
trap 'if mountpoint -q "$T/mnt-ns"; then umount "$T/mnt-ns"; fi' EXIT
mount --bind "$T/sbin" /usr/local/sbin
mount -T "$T/fstab.ns" "$T/mnt-ns"
test "$(findmnt -n -o FSTYPE --target "$T/mnt-ns")" = fuse.dcrfs
diff -r "$T/tree" "$T/mnt-ns/latest/"
umount "$T/mnt-ns"
! mountpoint -q "$T/mnt-ns"
echo ns-ok
NS
	out=$(t unshare -m --propagation private bash "$T/ns.sh" "$T" 2>&1) ||
		fail "fuse.dcrfs fstab line in a private namespace: $out"
	[ "${out##*$'\n'}" = ns-ok ] || fail "namespace test: $out"
	log "type fuse.dcrfs: mount -T, diff, umount ok"
else
	log "no private mount namespaces here; type fuse.dcrfs not tried"
fi

# 2. The form that names the program (type fuse, source PROGRAM#STORE),
#    in this namespace, with the full checks.
printf '# dcrfs test fstab\n%s#%s %s fuse ro,allow_other,_netdev,cache_dir=%s,poll=1 0 0\n' \
	"$DCRFS" "$STORE" "$MNT" "$T/cache" >"$T/fstab"
register_mount "$MNT"
t mount -T "$T/fstab" "$MNT" || fail "mount -T $T/fstab $MNT failed"
mountpoint -q "$MNT" || fail "$MNT is not a mount point after mount -T"

fstype=$(findmnt -n -o FSTYPE --target "$MNT")
[ "$fstype" = fuse.dcrfs ] || fail "fstype is '$fstype', expected fuse.dcrfs"
findmnt -n -o SOURCE --target "$MNT" | grep -qF "$STORE" ||
	fail "the mount's source is '$(findmnt -n -o SOURCE --target "$MNT")'"
findmnt -n -o OPTIONS --target "$MNT" | tr ',' '\n' | grep -qx ro ||
	fail "not mounted ro"

t diff -r "$T/tree" "$MNT/latest/" || fail "latest/ differs from the tree"
t diff -r "$T/tree" "$MNT/tags/first/" || fail "tags/first/ differs from the tree"
[ "$(t readlink "$MNT/latest")" = v1 ] || fail "latest is not v1"

# allow_other: another user can read it
if id nobody >/dev/null 2>&1 && command -v setpriv >/dev/null 2>&1; then
	chmod 711 "$T" # mktemp made it 0700: let nobody reach the mount point
	t setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups \
		cat "$MNT/latest/sub/config.json" >"$T/as-nobody" ||
		fail "user nobody cannot read through allow_other"
	cmp -s "$T/as-nobody" "$T/tree/sub/config.json" || fail "nobody read other bytes"
fi

t umount "$MNT" || fail "umount $MNT failed"
! mountpoint -q "$MNT" || fail "$MNT still mounted after umount"
log "ok"
