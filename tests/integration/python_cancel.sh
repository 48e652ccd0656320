#!/usr/bin/env bash
# python_cancel.sh - Python's Commit.publish(progress=) calls progress
# (bytes done, total, uploaded, phase) up to the publish phase with all
# bytes done; Ctrl-C (SIGINT) during publish() stops the commit before
# it publishes: KeyboardInterrupt says nothing was published and that
# dcrfs-ctl gc collects the packs, and the store has no new version.
# The SIGINT is sent from the first progress call (a fixed point).
. "$(dirname "$0")/lib.sh"
CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$CTL"
PY=${DCR_PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || skip "$PY not found"
LIBDCR=$DCR_BUILDDIR/.libs/libdcr.so
[ -e "$LIBDCR" ] || fail "$LIBDCR not built"
export DCRFS_LIBDCR=$LIBDCR PYTHONPATH=$DCR_SRCDIR/python
py_sanitized "$LIBDCR"
t "$PY" - "$STORE" "$T/cc" <<'PY' || fail "the Python part failed"
import os, signal, sys
import dcrfs
store, cache = sys.argv[1], sys.argv[2]
data = os.urandom(6 << 20)

calls = []
with dcrfs.Commit(store, init=True, cache_dir=cache) as c:
    c.add_bytes("w.bin", data)
    v = c.publish(progress=lambda *a: calls.append(a))
assert v == 1, v
assert calls and all(len(a) == 4 for a in calls), calls
done, total, up, phase = calls[-1]
assert phase == "publish" and done == total == len(data) and up > 0, calls[-1]
assert {a[3] for a in calls} <= {"encode", "publish"}, calls

sent = []
def interrupt(*a):
    if not sent:
        sent.append(1)
        os.kill(os.getpid(), signal.SIGINT)
c = dcrfs.Commit(store, cache_dir=cache)
c.add_bytes("w.bin", data[::-1])
try:
    c.publish(progress=interrupt)
except KeyboardInterrupt as e:
    msg = str(e)
    assert "cancelled" in msg and "nothing was published" in msg and "dcrfs-ctl gc" in msg, msg
else:
    raise AssertionError("publish() was not interrupted")
finally:
    c.close()
# the handler is Python's own again
assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
print("ok")
PY
[ "$(t "$CTL" --store "$STORE" log --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 1 ] ||
	fail "the interrupted publish() published a version"
log "ok: publish(progress=), Ctrl-C in publish() publishes nothing and says so"
