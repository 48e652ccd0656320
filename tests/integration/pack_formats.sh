#!/usr/bin/env bash
# pack_formats.sh - both pack forms (HACKING, "On-store format"). A store
# written before DCRPACK2 (tests/golden/store-pack1: three versions by
# dcrfs-commit at 4c18c80, format 3 manifests, DCRPACK1 packs named by the
# SHA-256 of their bytes) still verifies, mounts bit-exact and compacts;
# compaction and a commit on top write DCRPACK2 packs (named by the
# SHA-256 of the header and each frame's SHA-256), which verify --deep
# accepts and a fresh mount reads. A pack whose bytes no longer match its
# name while every frame still does (a byte appended, or the header
# changed: only the name can tell) is caught by verify in either form.
. "$(dirname "$0")/lib.sh"
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS" "$DCRFS_CTL" "$DCRFS_COMMIT"
need_fuse

G=$DCR_SRCDIR/tests/golden
S=$T/store
cp -r "$G/store-pack1" "$S"
chmod -R u+w "$S"
ctl() { t "$DCRFS_CTL" --store "$S" "$@"; }
# count_form FORM: packs of $S starting with FORM
count_form() {
	local p n=0
	for p in "$S"/packs/*; do
		[ "$(head -c 8 "$p")" != "$1" ] || n=$((n + 1))
	done
	echo "$n"
}
# check_mount NAME: a fresh mount of $S serves every version of the
# golden trees, byte for byte
check_mount() {
	mount_dcrfs "$S" "$T/m.$1" "cache_dir=$T/c.$1,prefetch=none"
	(cd "$T/m.$1" && sha256sum -c --quiet "$G/store-pack1.sha256") ||
		fail "$1: the mount does not serve the golden trees"
	umount_dcrfs "$T/m.$1" || fail "$1: dcrfs exited with an error"
}
# damaged NAME PACK EDIT: a copy of $S with PACK changed by the Python
# statement EDIT (on the bytearray b) fails verify, naming PACK
damaged() {
	local d=$T/store.$1
	rm -rf "$d"
	cp -r "$S" "$d"
	python3 - "$d/packs/$2" "$3" <<'PY'
import sys
p, edit = sys.argv[1], sys.argv[2]
b = bytearray(open(p, "rb").read())
exec(edit)
open(p, "wb").write(b)
PY
	expect_fail_msg "damaged: packs/$2: content does not match its name" \
		"$DCRFS_CTL" --store "$d" verify
}

[ "$(count_form DCRPACK1)" = 3 ] || fail "the golden store is not three DCRPACK1 packs"
ctl verify -q || fail "verify fails on the DCRPACK1 store"
check_mount pack1
P1=$(basename "$(ls -S "$S"/packs/* | head -n 1)")
damaged p1-append "$P1" 'b += b"\0"'
damaged p1-header "$P1" 'b[:8] = b"DCRPACK0"'

ctl compact --max-depth 1 -q || fail "compact fails on the DCRPACK1 store"
[ "$(count_form DCRPACK2)" = 2 ] || fail "compaction did not write two DCRPACK2 packs"
ctl verify --deep -q >"$T/verify.compacted" 2>&1 ||
	fail "verify --deep fails after compaction: $(cat "$T/verify.compacted")"
# the compacted layout is taken (format 4 manifests of format-3 versions:
# dcr_manifest_same_meaning), not refused with the versions read as before
! grep -q "refused" "$T/verify.compacted" ||
	fail "the compacted layout is refused: $(cat "$T/verify.compacted")"
check_mount compacted

# a commit on top: its delta frames build on DCRPACK1 and DCRPACK2 frames
mount_dcrfs "$S" "$T/m.src" "cache_dir=$T/c.src"
cp -r "$T/m.src/v3" "$T/s4"
umount_dcrfs "$T/m.src" || fail "dcrfs exited with an error"
chmod -R u+w "$T/s4"
flip_bytes "$T/s4/model.safetensors" 0.01 4
[ "$(commit "$S" "$T/s4")" = 4 ] || fail "s4 is not version 4"
[ "$(count_form DCRPACK2)" = 3 ] || fail "the commit did not write a DCRPACK2 pack"
ctl verify --deep -q || fail "verify --deep fails after the commit"
mount_dcrfs "$S" "$T/m.v4" "cache_dir=$T/c.v4,prefetch=none"
cmp -s "$T/s4/model.safetensors" "$T/m.v4/v4/model.safetensors" ||
	fail "v4 is not the tree committed"
umount_dcrfs "$T/m.v4" || fail "dcrfs exited with an error"

for p in "$S"/packs/*; do
	[ "$(head -c 8 "$p")" = DCRPACK2 ] && P2=$(basename "$p")
done
damaged p2-append "$P2" 'b += b"\0"'
damaged p2-header "$P2" 'b[:8] = b"DCRPACK1"'
log "DCRPACK1 and DCRPACK2 packs verify, read and compact; a changed byte outside the frames is caught in both"
