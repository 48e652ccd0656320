#!/usr/bin/env bash
# badtags.sh - malformed tag objects in a mounted store (issue 30): a
# number too large, "-1", binary, "0x3", "4 ", a 50 MB object. Each is
# ignored (MNT/tags shows only the good tag), counted at every poll in
# status.json errors.tags, and logged at error level once per tag and
# content, not at every poll; a changed object is logged again, and a
# fixed one shows.
. "$(dirname "$0")/lib.sh"
need_fuse
need_bins
mkdir -p "$T/tree"
printf 'a\n' >"$T/tree/a"
[ "$(commit "$STORE" "$T/tree")" = 1 ] || fail "commit 1"
mkdir -p "$STORE/tags"
printf '1\n' >"$STORE/tags/good"
printf '99999999999999999999999\n' >"$STORE/tags/huge_number"
printf -- '-1\n' >"$STORE/tags/minus"
head -c 64 /dev/urandom >"$STORE/tags/binary"
printf '0x3\n' >"$STORE/tags/hex"
printf '4 ' >"$STORE/tags/space"
printf '1\n' >"$STORE/tags/big" && truncate -s 50M "$STORE/tags/big"
bad="huge_number minus binary hex space big"

mount_dcrfs "$STORE" "$MNT" "cache_dir=$T/cache,poll=1"
errs() { py "$MNT/.dcrfs/status.json" 'print(d["errors"]["tags"])'; }
e0=$(errs)
sleep 5
e1=$(errs)
[ "$(ls "$MNT/tags")" = good ] || fail "tags shown: $(ls "$MNT/tags" | tr '\n' ' ')"
[ "$e1" -ge $((e0 + 6 * 3)) ] || fail "malformed tags not counted at every poll: $e0 -> $e1"
for n in $bad; do
	c=$(grep -c "tag object tags/$n is malformed" "$MOUNT_LOG")
	[ "$c" = 1 ] || fail "tags/$n logged $c times in 5 s of poll=1: $(grep "tags/$n" "$MOUNT_LOG")"
done
grep -q "tags/big is malformed (longer than 400 bytes)" "$MOUNT_LOG" || fail "the 50 MB tag: $(grep tags/big "$MOUNT_LOG")"
# a changed object is news, a fixed one shows
printf -- '-2\n' >"$STORE/tags/minus"
printf '1\n' >"$STORE/tags/hex"
sleep 3
[ "$(grep -c "tags/minus is malformed" "$MOUNT_LOG")" = 2 ] || fail "a changed malformed tag not logged again"
[ "$(ls "$MNT/tags" | tr '\n' ' ')" = "good hex " ] || fail "a fixed tag does not show: $(ls "$MNT/tags")"
umount_dcrfs "$MNT" || fail "unmount failed"
log "ok: $(grep -c 'is malformed' "$MOUNT_LOG") lines for 6 malformed tags over 8 polls; errors.tags $e0 -> $e1 in 5 s"
