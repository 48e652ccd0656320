#!/usr/bin/env bash
# export_read.sh - reading without a mount from Python and from an S3
# store (moto, started here): dcrfs.open gives a binary file object
# (read, readinto, seek, tell, pread, io.BufferedReader over it) whose
# bytes equal the committed file; dcrfs.load_safetensors gives torch
# tensors and numpy arrays whose bytes, dtypes and shapes are those of
# the file (parsed here from the format's spec, independently of the
# module); a missing file raises DcrError ENOENT; trust= sees only the
# versions signed by its keys; and dcrfs-ctl export
# and cat of the S3 store are bit-exact with the committed tree.
. "$(dirname "$0")/lib.sh"
. "$DCR_SRCDIR/tests/integration/s3lib.sh"
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS_SYNTH" "$DCRFS_CTL"
need_python_libdcr
unset DCR_S3_DIR
s3_setup moto

STORE=$(s3_url store)
t "$DCRFS_SYNTH" init --size 4M --seed 5 --quiet "$T/s1"
t "$DCRFS_SYNTH" step --in "$T/s1" --out "$T/s2" --mode uniform --quiet
mkdir -p "$T/s2/sub"
printf 'x\n' >"$T/s2/sub/x"
chmod 0600 "$T/s2/sub/x"
for i in 1 2; do
	init=()
	[ "$i" = 1 ] && init=(--init)
	t "$DCRFS_COMMIT" "${init[@]}" --store "$STORE" --cache-dir "$T/cc" --chunk-size 256K \
		"$T/s$i" >/dev/null 2>"$T/err" || fail "commit $i to $STORE: $(cat "$T/err")"
done

log "dcrfs-ctl export and cat of an S3 store"
t "$DCRFS_CTL" --store "$STORE" export latest "$T/out" 2>"$T/err" || fail "export: $(cat "$T/err")"
diff -r "$T/s2" "$T/out" >/dev/null || fail "export of $STORE differs"
[ "$(stat -c %a "$T/out/sub/x")" = 600 ] || fail "mode not kept"
t "$DCRFS_CTL" --store "$STORE" cat 1 model.safetensors | cmp - "$T/s1/model.safetensors" ||
	fail "cat 1 of $STORE differs"

log "Python: open, load_safetensors"
t "$PY" - "$STORE" "$T" <<'PYEOF' || fail "the Python reader"
import io, json, struct, sys
import numpy as np, torch
import dcrfs

store, T = sys.argv[1], sys.argv[2]
for v in (1, 2):
    src = open("%s/s%d/model.safetensors" % (T, v), "rb").read()
    with dcrfs.open(store, v, "model.safetensors") as f:
        assert isinstance(f, io.RawIOBase) and f.size == len(src) and f.version == v
        assert f.read(100) == src[:100] and f.tell() == 100
        b = bytearray(70000)
        f.seek(300000)
        assert f.readinto(b) == 70000 and bytes(b) == src[300000:370000]
        assert f.seek(-10, io.SEEK_END) == len(src) - 10
        assert f.read() == src[-10:] and f.read() == b""
        assert f.pread(5000, 262140) == src[262140:267140]
        f.seek(0)
        assert f.read() == src
    with io.BufferedReader(dcrfs.open(store, str(v) if v == 1 else "latest",
                                      "/model.safetensors")) as f:
        assert f.read() == src
    n = struct.unpack("<Q", src[:8])[0]
    hdr = json.loads(src[8:8 + n])
    hdr.pop("__metadata__", None)
    pt = dcrfs.load_safetensors(store, v, "model.safetensors")
    na = dcrfs.load_safetensors(store, v, "model.safetensors", framework="np")
    assert set(pt) == set(hdr) == set(na)
    tdt = {"BF16": torch.bfloat16, "F32": torch.float32}
    for k, h in hdr.items():
        want = src[8 + n + h["data_offsets"][0]:8 + n + h["data_offsets"][1]]
        x = pt[k]
        assert x.dtype == tdt[h["dtype"]] and list(x.shape) == h["shape"], k
        assert x.contiguous().view(-1).view(torch.uint8).numpy().tobytes() == want, k
        assert list(na[k].shape) == h["shape"] and na[k].tobytes() == want, k
with dcrfs.Reader(store) as r:
    assert r.resolve("latest") == 2
    paths = [e["path"] for e in r.list(2)["entries"]]
    assert "sub" in paths and "sub/x" in paths, paths
    try:
        r.open(2, "nope")
        raise AssertionError("no error for a missing file")
    except dcrfs.DcrError as e:
        assert e.errno == 2 and "nope" in str(e), e
print("python reader ok")
PYEOF
log "Python: trust= sees only signed versions"
t "$DCRFS_CTL" keygen "$T/key" >/dev/null || fail "keygen failed"
t "$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/cc" --sign-key "$T/key" "$T/s1" >/dev/null 2>&1 ||
	fail "signed commit failed"
t "$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/cc" "$T/s2" >/dev/null 2>&1 || fail "commit failed"
t "$PY" - "$STORE" "$T" <<'PYEOF' || fail "the Python reader with trust="
import sys
import dcrfs
store, T = sys.argv[1], sys.argv[2]
with dcrfs.Reader(store, trust=T + "/key.pub") as r:
    assert r.resolve("latest") == 3
    try:
        r.open(4, "config.json")
        raise AssertionError("an unsigned version was read under trust=")
    except dcrfs.DcrError as e:
        assert e.errno == 2 and "trusted" in str(e), e
with dcrfs.open(store, "latest", "model.safetensors", trust=T + "/key.pub") as f:
    assert f.version == 3 and f.read() == open(T + "/s1/model.safetensors", "rb").read()
PYEOF
log "ok"
