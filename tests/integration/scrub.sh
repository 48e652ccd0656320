#!/usr/bin/env bash
# scrub.sh - rot in a cache file that the kernel reads through FUSE
# passthrough is found by the scrub (-o scrub=1) within its interval,
# counted (status.json "scrub") and logged, and repaired in place: the
# fd and the mapping held since before the rot, and every open after
# it, read the committed bytes again. A chunk that cannot be rebuilt
# (the store gone) takes the file out of the cache, so that the next
# open after the held ones closed reads it again from the store.
# SCRUB_TEST_OPT overrides the mount's scrub option (scrub=0 must fail).
. "$(dirname "$0")/lib.sh"
need_fuse
need_bins
need_root

MiB=$((1024 * 1024))
SCRUB=${SCRUB_TEST_OPT:-scrub=1}

mkdir -p "$T/tree"
rand_file "$T/tree/a.bin" $((4 * MiB + 4321)) a
rand_file "$T/tree/b.bin" $((4 * MiB)) b
[ "$(commit "$STORE" "$T/tree" --chunk-size 1M)" = 1 ] || fail "commit"

# status KEY... - a value of MNT/.dcrfs/status.json (lib.sh mount_status)
status() { mount_status "$MNT" "$@"; }

# rot_hold FILE REF CACHE WANT - open MNT/v1/FILE (passthrough) and map
# it; flip a byte of its slab in CACHE (through the page cache, as any
# writer of the file would); check that the held fd sees the rot (it is
# read by the kernel, not by us), then wait up to 10 s for the scrub's
# status to reach WANT ("repaired" or "dropped") and print what the
# held fd, the mapping and a fresh open read then: "fd=ok|bad map=...
# fresh=..." (and on stderr how long after the rot).
rot_hold() {
	t python3 - "$MNT" "$1" "$2" "$3" "$4" <<'EOF'
import glob, json, mmap, os, re, sys, time
mnt, name, ref, cache, want = sys.argv[1:]
data = open(ref, "rb").read()
f = os.open(f"{mnt}/v1/{name}", os.O_RDONLY)
m = mmap.mmap(f, 0, prot=mmap.PROT_READ)
assert m[:] == data, "bad bytes before the rot"
slabs = [p for p in glob.glob(f"{cache}/*/slabs/v*")
         if re.fullmatch(r"v0*1\.f[0-9]+", os.path.basename(p)) and
         os.path.getsize(p) == len(data)]
assert len(slabs) == 1, slabs
at = 3 * 1024 * 1024 + 777
s = os.open(slabs[0], os.O_RDWR)
os.pwrite(s, bytes([data[at] ^ 0x40]), at)
os.close(s)
if os.pread(f, 1, at)[0] == data[at]:
    sys.exit("the held fd does not see the rot: not a passthrough open?")
t0 = time.time()
while time.time() < t0 + 10:
    st = json.load(open(f"{mnt}/.dcrfs/status.json"))["scrub"]
    if st[want] >= 1:
        break
    time.sleep(0.1)
took = time.time() - t0
def ok(b):
    return "ok" if b == data else "bad"
fd = os.pread(f, len(data) + 1, 0)
fresh = open(f"{mnt}/v1/{name}", "rb").read()
print(f"fd={ok(fd)} map={ok(m[:])} fresh={ok(fresh)}")
print(f"{want} {took:.2f} s after the rot", file=sys.stderr)
m.close()
os.close(f)
EOF
}

# The files are read cold in a mount of their own, so that the mounts
# below hold none of their chunks in memory: a repair must then build
# the chunk from the store, never from the rotten copy in the cache.
mount_dcrfs "$STORE" "$MNT" "cache_dir=$T/cache,prefetch=none,scrub=0"
need_passthrough "$MNT"
grep -q 'scrub: off' "$MOUNT_LOG" || fail "scrub=0 is not said"
t cmp "$T/tree/a.bin" "$MNT/v1/a.bin" || fail "a.bin differs (cold read)"
t cmp "$T/tree/b.bin" "$MNT/v1/b.bin" || fail "b.bin differs (cold read)"
umount_dcrfs "$MNT" || fail "unmount"

# --- 1. rot found within the interval and repaired in place
mount_dcrfs "$STORE" "$MNT" "cache_dir=$T/cache,prefetch=none,$SCRUB"
[ -n "${SCRUB_TEST_OPT:-}" ] || [ "$(status scrub interval)" = 1 ] ||
	fail "status.json scrub.interval is not 1: $(cat "$T/status.json")"
t cat "$MNT/v1/b.bin" >/dev/null # a first passthrough open: fs-verity tried
case $(status scrub verity) in
'"on"') skip "the cache's file system seals files with fs-verity: the kernel checks them, the scrub passes over them" ;;
'"off"') ;;
*) fail "status.json scrub.verity after a passthrough open: $(cat "$T/status.json")" ;;
esac
got=$(rot_hold a.bin "$T/tree/a.bin" "$T/cache" repaired) || fail "rot_hold: $got"
log "after the rot: $got"
[ "$got" = "fd=ok map=ok fresh=ok" ] || fail "rotten bytes served after the scrub's interval: $got"
[ "$(status opens passthrough)" -ge 2 ] || fail "the held opens were not passthrough opens"
[ "$(status scrub rotten)" = 1 ] || fail "scrub.rotten is not 1: $(cat "$T/status.json")"
[ "$(status scrub repaired)" = 1 ] || fail "scrub.repaired is not 1: $(cat "$T/status.json")"
[ "$(status scrub dropped)" = 0 ] || fail "a repairable file was dropped"
[ "$(status fetches)" -ge 1 ] || fail "the repair did not build the chunk from the store"
grep -q 'scrub: a.bin chunk 3 of v1 failed its check' "$MOUNT_LOG" ||
	fail "no log line names the rotten chunk: $(grep scrub "$MOUNT_LOG")"
grep -q 'scrub: a.bin chunk 3 of v1 repaired in place' "$MOUNT_LOG" ||
	fail "no log line says the chunk was repaired"
[ "$(status scrub files_checked)" -ge 1 ] || fail "scrub.files_checked is 0"
[ "$(grep -c 'no fs-verity here' "$MOUNT_LOG")" = 1 ] ||
	fail "the missing fs-verity is not said once: $(grep -c verity "$MOUNT_LOG") lines"
t cmp "$T/tree/a.bin" "$MNT/v1/a.bin" || fail "a.bin differs after the repair"
grep -q 'dcrfs_scrub_repaired_chunks_total 1$' "$MNT/.dcrfs/metrics" ||
	fail "the metrics do not count the repair"
t "$DCR_BUILDDIR/dcrfs-ctl" status "$MNT" | grep -q '^scrub: .* 1 rotten chunks, 1 repaired, 0 files dropped$' ||
	fail "dcrfs-ctl status does not report the scrub: $(t "$DCR_BUILDDIR/dcrfs-ctl" status "$MNT")"
umount_dcrfs "$MNT" || fail "unmount"

# the repair reached the disk, in the same cache file: a new mount checks
# the file whole at its first passthrough open, and it passes unfetched
mount_dcrfs "$STORE" "$MNT" "cache_dir=$T/cache,prefetch=none,scrub=0"
t cmp "$T/tree/a.bin" "$MNT/v1/a.bin" || fail "a.bin differs after a remount"
[ "$(status fetches)" = 0 ] || fail "the repaired file was fetched again"
[ "$(status opens passthrough)" = 1 ] || fail "the repaired file was not opened with passthrough"
umount_dcrfs "$MNT" || fail "unmount"

# --- 2. not repairable (the packs are gone): the file leaves the cache
mount_dcrfs "$STORE" "$MNT" "cache_dir=$T/cache,prefetch=none,$SCRUB"
mv "$STORE/packs" "$STORE/packs.away"
got=$(rot_hold b.bin "$T/tree/b.bin" "$T/cache" dropped) || fail "rot_hold: $got"
mv "$STORE/packs.away" "$STORE/packs"
[ "$(status scrub dropped)" = 1 ] || fail "scrub.dropped is not 1: $(cat "$T/status.json")"
grep -q 'scrub: b.bin chunk 3 of v1 cannot be repaired' "$MOUNT_LOG" ||
	fail "no log line says the file was dropped"
# the held opens kept the dropped file; the next first open reads it anew
t cmp "$T/tree/b.bin" "$MNT/v1/b.bin" || fail "b.bin differs after it was dropped"
[ "$(status opens normal)" -ge 1 ] || fail "b.bin was not read again on the normal path"
umount_dcrfs "$MNT" || fail "unmount"
log "ok: rot found by the scrub, repaired in place or dropped"
