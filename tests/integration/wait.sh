#!/usr/bin/env bash
# wait.sh - waiting for the next version, and loading one version only:
# - MNT/.dcrfs/latest holds latest's number; poll(2) on an open
#   descriptor of it reports nothing while latest stays, POLLIN|POLLPRI
#   once it moves, and nothing again after a pread at 0 re-armed it;
# - dcrfs-ctl wait MNT: --timeout exits 1, --newer-than, --json, and it
#   returns the version committed while it waits;
# - dcrfs.wait/resolve/latest (python/dcrfs/_mount.py), the time from a
#   publish to the wake of dcrfs.wait (poll=0.1: target 0.2 s);
# - a directory descriptor of MNT/latest stays on its version for
#   openat while latest moves (what resolve() gives by name).
. "$(dirname "$0")/lib.sh"
need_fuse
need_bins
CTL=$DCR_BUILDDIR/dcrfs-ctl
LIBDCR=$DCR_BUILDDIR/.libs/libdcr.so
PY=${DCR_PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || skip "$PY not found"
[ -e "$LIBDCR" ] || skip "$LIBDCR not built"
export DCRFS_LIBDCR=$LIBDCR PYTHONPATH=$DCR_SRCDIR/python
py_sanitized "$LIBDCR"

tree() { # tree V: files a and b holding "vV"
	mkdir -p "$T/t$1"
	printf 'v%s' "$1" >"$T/t$1/a"
	printf 'v%s' "$1" >"$T/t$1/b"
}
tree 1
[ "$(commit "$STORE" "$T/t1")" = 1 ] || fail "first commit is not version 1"
mount_dcrfs "$STORE" "$MNT" "poll=0.1"

[ "$(t cat "$MNT/.dcrfs/latest")" = 1 ] || fail ".dcrfs/latest is not 1: $(cat "$MNT/.dcrfs/latest")"
t ls "$MNT/.dcrfs" | grep -qx latest || fail ".dcrfs/latest is not listed"

# dcrfs-ctl wait: a timeout exits 1 and says so; --newer-than 0 returns at once
start=$(date +%s%N)
rc=0
t "$CTL" wait "$MNT" --timeout 0.3 >"$T/out" 2>"$T/err" || rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
[ "$rc" = 1 ] || fail "wait --timeout 0.3 exited $rc, not 1"
[ "$ms" -ge 300 ] || fail "wait --timeout 0.3 returned after $ms ms"
grep -q "still v1 after 0.3 s" "$T/err" || fail "no timeout message: $(cat "$T/err")"
[ "$(t "$CTL" wait "$MNT" --newer-than 0)" = 1 ] || fail "wait --newer-than 0 is not 1"
rc=0
t "$CTL" wait "$MNT" --timeout x 2>/dev/null || rc=$?
[ "$rc" = 2 ] || fail "wait --timeout x exited $rc, not 2"
rc=0
t "$CTL" log --timeout 1 2>/dev/null || rc=$?
[ "$rc" = 2 ] || fail "log --timeout exited $rc, not 2"

# The poll descriptor, the pinned directory, dcrfs.wait and resolve.
t "$PY" - "$MNT" "$STORE" "$DCRFS_COMMIT" "$T" <<'PY' || fail "python checks failed"
import os, select, subprocess, sys, threading, time
import dcrfs

mnt, store, commit, T = sys.argv[1:]

def do_commit(v):
    d = os.path.join(T, "t%d" % v)
    os.makedirs(d, exist_ok=True)
    for f in "ab":
        with open(os.path.join(d, f), "w") as fh:
            fh.write("v%d" % v)
    out = subprocess.run([commit, "--store", store, "--cache-dir", os.path.join(T, "commit-cache"),
                          "--quiet", d], check=True, stdout=subprocess.PIPE).stdout
    assert int(out) == v, (out, v)

lf = os.path.join(mnt, ".dcrfs", "latest")
fd = os.open(lf, os.O_RDONLY)
p = select.poll()
p.register(fd, select.POLLIN | select.POLLPRI)
ev = p.poll(300)
assert ev == [], "poll reports %r before latest moved" % ev
assert os.pread(fd, 32, 0) == b"1\n"

pinned = os.open(os.path.join(mnt, "latest"), os.O_RDONLY | os.O_DIRECTORY)
assert dcrfs.resolve(mnt) == os.path.join(mnt, "v1"), dcrfs.resolve(mnt)
assert dcrfs.latest(mnt) == 1

do_commit(2)
t0 = time.monotonic()
ev = p.poll(10000)
assert ev and ev[0][1] & select.POLLIN and ev[0][1] & select.POLLPRI, \
    "poll after the commit: %r after %.1f s" % (ev, time.monotonic() - t0)
assert os.pread(fd, 32, 0) == b"2\n"
ev = p.poll(200)
assert ev == [], "poll reports %r after the new number was read" % ev
# the pinned directory still is v1's; latest/ is v2's
with open(os.open("a", os.O_RDONLY, dir_fd=pinned), "rb") as f:
    assert f.read() == b"v1", "openat through a descriptor of latest left v1"
with open(os.path.join(mnt, "latest", "a"), "rb") as f:
    assert f.read() == b"v2"
os.close(pinned)
assert dcrfs.resolve(mnt) == os.path.join(mnt, "v2")
assert dcrfs.resolve(mnt, version=1) == os.path.join(mnt, "v1")
assert dcrfs.resolve(mnt, version="v2") == os.path.join(mnt, "v2")
try:
    dcrfs.resolve(mnt, version=99)
    sys.exit("resolve of a missing version")
except FileNotFoundError as e:
    assert "v99" in str(e), str(e)

# dcrfs.wait: timeout, newer_than, and woken by a commit
t0 = time.monotonic()
try:
    dcrfs.wait(mnt, timeout=0.3)
    sys.exit("dcrfs.wait returned without a new version")
except TimeoutError as e:
    assert "still v2" in str(e) and time.monotonic() - t0 >= 0.3, str(e)
assert dcrfs.wait(mnt, newer_than=1, timeout=5) == 2

# The time from a publish to the wake of dcrfs.wait (poll=0.1): from
# publish() returning (the version may be seen before it returns), and
# from publish() being called (an upper bound: the commit's own work too)
lat, upper = [], []
for v in range(3, 8):
    got = {}

    def waiter():
        got["v"] = dcrfs.wait(mnt, newer_than=v - 1, timeout=20)
        got["t"] = time.monotonic()
    th = threading.Thread(target=waiter)
    th.start()
    time.sleep(0.05)
    with dcrfs.Commit(store) as c:
        c.add_bytes("a", b"v%d" % v)
        c.add_bytes("b", b"v%d" % v)
        called = time.monotonic()
        assert c.publish() == v
        published = time.monotonic()
    th.join()
    assert got.get("v") == v, got
    lat.append(got["t"] - published)
    upper.append(got["t"] - called)
lat.sort()
upper.sort()
print("# dcrfs.wait woke %.3f s (median) %.3f s (max) after publish() returned, "
      "%.3f s (median) %.3f s (max) after it was called; poll=0.1"
      % (lat[len(lat) // 2], lat[-1], upper[len(upper) // 2], upper[-1]))
assert lat[-1] < 2.0, lat
os.close(fd)
PY

# dcrfs-ctl wait returns the version committed while it waits
t "$CTL" wait "$MNT" --newer-than 7 --timeout 20 --json >"$T/wait.json" &
wpid=$!
_pids+=("$wpid")
sleep 0.3
tree 8
[ "$(commit "$STORE" "$T/t8")" = 8 ] || fail "commit is not version 8"
wait "$wpid" || fail "dcrfs-ctl wait exited $?"
grep -q '"version": 8' "$T/wait.json" || fail "wait --json: $(cat "$T/wait.json")"
grep -q '"timed_out": false' "$T/wait.json" || fail "wait --json: $(cat "$T/wait.json")"

umount_dcrfs "$MNT" || fail "unmount failed"
log "ok"
