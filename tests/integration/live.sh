#!/usr/bin/env bash
# live.sh - commits while mounted: a new version appears within the poll
# interval, latest moves to it, and a file opened before the move keeps
# reading the version it was opened at.
. "$(dirname "$0")/lib.sh"
need_fuse
need_bins

POLL=1
SIZE=$((2 * 1024 * 1024))

mkdir -p "$T/tree.1"
rand_file "$T/tree.1/data.bin" "$SIZE" one
printf 'v1\n' >"$T/tree.1/which"
[ "$(commit "$STORE" "$T/tree.1")" = 1 ] || fail "first commit is not version 1"

mount_dcrfs "$STORE" "$MNT" "poll=$POLL"
[ "$(t readlink "$MNT/latest")" = v1 ] || fail "latest is not v1"

# open latest's file and read its first MiB; keep the descriptor
exec 7<"$MNT/latest/data.bin"
t dd bs=1M count=1 iflag=fullblock status=none <&7 >"$T/part1" ||
	fail "first read through the open descriptor failed"

# version 2: every byte of data.bin differs
cp -a "$T/tree.1" "$T/tree.2"
rand_file "$T/tree.2/data.bin" "$SIZE" two
printf 'v2\n' >"$T/tree.2/which"
[ "$(commit "$STORE" "$T/tree.2")" = 2 ] || fail "second commit is not version 2"
committed=$(date +%s%N)

# it must show up within the poll interval (plus slack for a loaded box)
limit=$((POLL * 1000 + 4000))
while :; do
	if [ "$(t readlink "$MNT/latest")" = v2 ] && [ -d "$MNT/v2" ]; then
		break
	fi
	waited=$((($(date +%s%N) - committed) / 1000000))
	[ "$waited" -lt "$limit" ] ||
		fail "latest still $(readlink "$MNT/latest") ${waited} ms after the commit"
	sleep 0.1
done
log "v2 appeared $((($(date +%s%N) - committed) / 1000000)) ms after the commit"
t ls "$MNT" | grep -qx v2 || fail "v2 is not listed in the root"

# the old descriptor still reads version 1, to the end
t cat <&7 >"$T/part2" || fail "reading the rest through the open descriptor failed"
exec 7<&-
cat "$T/part1" "$T/part2" | cmp - "$T/tree.1/data.bin" ||
	fail "a descriptor opened on v1 read bytes of another version"

# new opens of latest see version 2, the old path still version 1
t cmp "$MNT/latest/data.bin" "$T/tree.2/data.bin" || fail "latest/data.bin is not v2's"
[ "$(t cat "$MNT/latest/which")" = v2 ] || fail "latest/which is not v2's"
t cmp "$MNT/v1/data.bin" "$T/tree.1/data.bin" || fail "v1/data.bin changed"

# a descriptor held across the move by another process, too
python3 - "$MNT" "$T" "$STORE" "$DCRFS_COMMIT" <<'PY' || fail "python open-file check failed"
import os, subprocess, sys, time
mnt, tmp, store, commit = sys.argv[1:5]
fd = os.open(os.path.join(mnt, "latest", "data.bin"), os.O_RDONLY)
first = os.pread(fd, 4096, 0)
want = open(os.path.join(tmp, "tree.2", "data.bin"), "rb").read()
assert first == want[:4096], "first page is not v2's"
# version 3, committed while the file is open
t3 = os.path.join(tmp, "tree.3")
subprocess.run(["cp", "-a", os.path.join(tmp, "tree.2"), t3], check=True)
with open(os.path.join(t3, "data.bin"), "r+b") as f:
    f.write(b"\xff" * 65536)
out = subprocess.run([commit, "--store", store, "--cache-dir",
                      os.path.join(tmp, "commit-cache"), "--quiet", t3],
                     check=True, capture_output=True, text=True, timeout=60)
assert out.stdout.strip() == "3", out.stdout
deadline = time.time() + 10
while os.readlink(os.path.join(mnt, "latest")) != "v3":
    assert time.time() < deadline, "v3 did not appear"
    time.sleep(0.1)
got = b""
off = 0
while True:
    b = os.pread(fd, 1 << 20, off)
    if not b:
        break
    got += b
    off += len(b)
os.close(fd)
assert got == want, "an open file changed version under its reader"
PY

umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly on unmount"

# A version is found the moment it is published, however recently a
# lookup missed it: workers open vN as soon as the trainer announces it
# (a lookup answered from a store look older than itself gave ENOENT).
mount_dcrfs "$STORE" "$MNT" "poll=3600"
python3 - "$MNT" "$T" "$STORE" "$DCRFS_COMMIT" <<'PY' || fail "a published version was not found at once"
import os, shutil, subprocess, sys, threading
mnt, tmp, store, commit = sys.argv[1:5]
latest = int(os.readlink(os.path.join(mnt, "latest"))[1:])
stop = False
def probe(v):
    # misses of vN while it is being committed, as impatient workers do
    while not stop:
        os.path.exists(os.path.join(mnt, "v%d" % v))
for k in range(5):
    v = latest + 1 + k
    src = os.path.join(tmp, "tree.p%d" % k)
    shutil.copytree(os.path.join(tmp, "tree.1"), src)
    with open(os.path.join(src, "which"), "w") as f:
        f.write("p%d\n" % k)
    stop = False
    th = threading.Thread(target=probe, args=(v,))
    th.start()
    out = subprocess.run([commit, "--store", store, "--cache-dir",
                          os.path.join(tmp, "commit-cache"), "--quiet", src],
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == str(v), out
    try:
        with open(os.path.join(mnt, "v%d" % v, "which")) as f:
            assert f.read() == "p%d\n" % k
    finally:
        stop = True
        th.join()
PY
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly on unmount"
log "ok"
