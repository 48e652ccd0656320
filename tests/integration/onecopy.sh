#!/usr/bin/env bash
# onecopy.sh - a prefetch builds each chunk in its place in the cache
# (issue 31: the base read into the slab's mapping, the frames applied
# and the proof made there; dcr_cache_build). A chunk whose proof fails
# there must never be served, in this mount or a later one from the
# same cache, and its place is punched out:
#  - v1 (4 MiB, 256 KiB chunks) prefetched into the cache, unmounted;
#  - v2, a small edit of it, committed, and a byte of v2's only pack
#    flipped: one delta frame is bad, the base of its chunk is cached;
#  - a mount with prefetch=latest builds v2's chunks in place: the bad
#    one fails its proof (named in the log);
#  - every chunk of v2 read (256 KiB reads) is either v2's bytes or
#    EIO, at least one is EIO, none is v1's (the base it was built on);
#  - no read finds a chunk of the cache failing its check (a failed
#    build kept as proven would be caught there, and logged);
#  - after the unmount the failed chunk's range of v2's slab holds no
#    data (punched), and a new mount on the same cache serves the same.
. "$(dirname "$0")/lib.sh"
need_fuse
need_bins

S=$T/store
M=$T/m
C=$T/cache
CS=$((256 * 1024))
SIZE=$((4 * 1024 * 1024))

packs() { { ls "$S/packs" 2>/dev/null || true; } | sort; }

mkdir -p "$T/s1"
rand_file "$T/s1/a.bin" "$SIZE" one
[ "$(commit "$S" "$T/s1" --chunk-size 256K)" = 1 ] || fail "s1 is not v1"

mount_dcrfs "$S" "$M" "cache_dir=$C,poll=0.2,prefetch=latest"
for ((i = 0; i < 300; i++)); do
	py "$M/.dcrfs/status.json" 'sys.exit(d["prefetch"]["done"] < 1)' && break
	sleep 0.1
done
py "$M/.dcrfs/status.json" 'assert d["prefetch"]["done"] >= 1, d["prefetch"]'
umount_dcrfs "$M" || fail "the first mount did not exit cleanly"

cp -a "$T/s1" "$T/s2"
flip_bytes "$T/s2/a.bin" 0.0005 two
before=$(packs)
[ "$(commit "$S" "$T/s2" --chunk-size 256K)" = 2 ] || fail "s2 is not v2"
pack=$(comm -13 <(echo "$before") <(packs))
[ "$(echo "$pack" | grep -c .)" = 1 ] || fail "v2 added packs '$pack', expected one"
python3 - "$S/packs/$pack" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    data = bytearray(f.read())
    data[len(data) // 2] ^= 0x40
    f.seek(0)
    f.write(data)
PY

# check MNT: every chunk of v2/a.bin is v2's or EIO, none v1's; prints
# the failed chunks' numbers
check() {
	python3 - "$1/v2/a.bin" "$T/s1/a.bin" "$T/s2/a.bin" "$CS" <<'PY'
import errno, os, sys
path, one, two, cs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
a, b = open(one, "rb").read(), open(two, "rb").read()
fd = os.open(path, os.O_RDONLY)
bad = []
for i in range(len(b) // cs):
    try:
        got = os.pread(fd, cs, i * cs)
    except OSError as e:
        assert e.errno == errno.EIO, e
        bad.append(i)
        continue
    want = b[i * cs:(i + 1) * cs]
    if got != want:
        what = "v1's (the base)" if got == a[i * cs:(i + 1) * cs] else "wrong"
        sys.exit("chunk %d of v2/a.bin was served with %s bytes" % (i, what))
assert bad, "no chunk failed: the flipped byte missed every frame"
print(" ".join(map(str, bad)))
PY
}

mount_dcrfs "$S" "$M" "cache_dir=$C,poll=0.2,prefetch=latest"
for ((i = 0; i < 300; i++)); do
	grep -q "corrupt" "$MOUNT_LOG" && break
	sleep 0.1
done
grep -q "corrupt" "$MOUNT_LOG" || fail "the prefetch named no corrupt frame: $(cat "$MOUNT_LOG")"
sleep 0.5 # the prefetch's batch ends its places
bad=$(check "$M") || fail "$bad"
log "chunks failing their proof: $bad"
umount_dcrfs "$M" || true
# nothing unproven was kept as the cache's: no chunk of it fails the
# check every copy out of the cache makes (which would catch it too)
! grep "failed its check" "$MOUNT_LOG" ||
	fail "the cache held a chunk that had failed its proof"

# v2's slab: the failed chunks' ranges hold no data (punched out)
slab=$(find "$C" -path '*/slabs/v0000000002.f*' ! -name '*.sums' -type f | head -n1)
[ -n "$slab" ] || fail "no slab of v2 under $C: $(find "$C" -type f)"
python3 - "$slab" "$CS" $bad <<'PY'
import os, sys
path, cs = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_RDONLY)
for i in map(int, sys.argv[3:]):
    try:
        d = os.lseek(fd, i * cs, os.SEEK_DATA)
    except OSError:
        continue  # no data from there on
    if d < (i + 1) * cs:
        sys.exit("chunk %d of %s holds data at %d: its place was not punched"
                 % (i, path, d))
PY

# a later mount of the same cache: still never served
mount_dcrfs "$S" "$M" "cache_dir=$C,poll=0,prefetch=none"
bad2=$(check "$M") || fail "$bad2"
umount_dcrfs "$M" || true
! grep "failed its check" "$MOUNT_LOG" ||
	fail "the cache held a chunk that had failed its proof"
log "ok: chunks $bad failed their proof in place and were never served"
