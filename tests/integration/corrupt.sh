#!/usr/bin/env bash
# corrupt.sh - damaged stores: a flipped byte in a pack and a deleted pack
# make reads of the affected file fail with EIO (never wrong bytes) while
# every other file stays readable and the mount stays up; a corrupt
# manifest is skipped with a log line naming it.
. "$(dirname "$0")/lib.sh"
need_fuse
need_bins

EIO="Input/output error"
SIZE=$((2 * 1024 * 1024))

packs() { { ls "$STORE/packs" 2>/dev/null || true; } | sort; }

# one new file per version, so that each version's pack holds only the
# frames of that file
mkdir -p "$T/tree"
printf 'small\n' >"$T/tree/small.txt"
rand_file "$T/tree/a.bin" "$SIZE" a
declare -A pack_of
for f in a b c d; do
	[ -f "$T/tree/$f.bin" ] || rand_file "$T/tree/$f.bin" "$SIZE" "$f"
	before=$(packs)
	v=$(commit "$STORE" "$T/tree" --chunk-size 256K) || fail "commit failed"
	new=$(comm -13 <(echo "$before") <(packs))
	[ "$(echo "$new" | grep -c .)" = 1 ] ||
		fail "version $v added packs '$new', expected exactly one"
	pack_of[$f]=$new
	cp -a "$T/tree" "$T/tree.$v"
	log "version $v: $f.bin in pack $new"
done
# versions: 1 {small,a}  2 {+b}  3 {+c}  4 {+d}

# a flipped byte in the middle of a.bin's pack
python3 - "$STORE/packs/${pack_of[a]}" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    data = bytearray(f.read())
    data[len(data) // 2] ^= 0x40
    f.seek(0)
    f.write(data)
PY
# c.bin's pack deleted
rm "$STORE/packs/${pack_of[c]}"
# version 4's manifest corrupted
man4=$(ls "$STORE/versions" | sort | tail -n 1)
python3 - "$STORE/versions/$man4" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    data = bytearray(f.read())
    data[len(data) // 2] ^= 0x01
    f.seek(0)
    f.write(data)
PY

mount_dcrfs "$STORE" "$MNT" poll=1

# the corrupt manifest: version 4 left out, named in the log, mount up
[ ! -e "$MNT/v4" ] || fail "v4 has a corrupt manifest but is shown"
[ "$(t readlink "$MNT/latest")" = v3 ] ||
	fail "latest -> $(readlink "$MNT/latest"), expected v3"
grep -q "$man4" "$MOUNT_LOG" ||
	fail "no log line names the corrupt manifest $man4: $(cat "$MOUNT_LOG")"

# read_fails PATH REFERENCE - reading PATH fails with EIO, and whatever it
# returned before failing is a prefix of REFERENCE
read_fails() {
	local rc=0 got
	t cat "$1" >"$T/out" 2>"$T/err" || rc=$?
	[ "$rc" -ne 0 ] || fail "reading $1 succeeded despite the damage"
	grep -q "$EIO" "$T/err" || fail "reading $1: $(cat "$T/err"), expected EIO"
	got=$(stat -c %s "$T/out")
	[ "$got" -lt "$(stat -c %s "$2")" ] || fail "$1: read everything yet failed"
	cmp -s -n "$got" "$T/out" "$2" || fail "$1: wrong bytes were returned"
}

for i in 1 2 3; do
	read_fails "$MNT/v$i/a.bin" "$T/tree.1/a.bin"
done
read_fails "$MNT/v3/c.bin" "$T/tree.3/c.bin"
# still failing the second time: nothing bad was cached
read_fails "$MNT/v1/a.bin" "$T/tree.1/a.bin"
# a partial read of an intact chunk before the damaged one works
t dd if="$MNT/v1/a.bin" bs=256K count=1 status=none | cmp - <(head -c 262144 "$T/tree.1/a.bin") ||
	fail "the first chunk of a.bin is unreadable"

# everything else reads fine
for i in 1 2 3; do
	t cmp "$MNT/v$i/small.txt" "$T/tree.$i/small.txt" || fail "v$i/small.txt"
done
t cmp "$MNT/v2/b.bin" "$T/tree.2/b.bin" || fail "v2/b.bin unreadable"
t cmp "$MNT/v3/b.bin" "$T/tree.3/b.bin" || fail "v3/b.bin unreadable"
mountpoint -q "$MNT" || fail "the mount went away"
kill -0 "$MOUNT_PID" || fail "dcrfs died"

# the log names the damaged pack
grep -q "${pack_of[a]}" "$MOUNT_LOG" ||
	fail "no log line names the damaged pack ${pack_of[a]}"

umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly on unmount"
log "ok"
