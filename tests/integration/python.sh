#!/usr/bin/env bash
# python.sh - the Python module (python/dcrfs over libdcr): a torch state
# dict (bf16 and f32 tensors, a few MB) committed twice, the second after
# a simulated step, with no checkpoint file written; both versions read
# back through a mount and compared tensor by tensor; the committed file
# equals the safetensors format's bytes (written here from the spec,
# independently of the library) and parses with the project's parser
# (dcrfs-ctl diff names the changed tensors); a NaN is refused with an
# exception naming the tensor; a NUL or invalid UTF-8 in a tensor name,
# path, metadata key or value or tag is refused with a DcrError naming
# it; an aborted commit publishes nothing. The maintenance calls answer
# as dcrfs-ctl --json does (log, show, diff, gc dry run: equal dicts), tag
# points a tag, verify raises DcrError naming a missing pack, gc removes
# what retention drops.
# Uses Debian's python3 (numpy and torch are Debian packages there).
. "$(dirname "$0")/lib.sh"
need_fuse
need_python_libdcr

# One script: commit, then (after the mount) compare. Phase in $1.
cat >"$T/t.py" <<'PYEOF'
import json, os, struct, sys
import numpy as np, torch
import dcrfs

store, cache, phase = sys.argv[1], sys.argv[2], sys.argv[3]

def state(step):
    g = torch.Generator().manual_seed(1)
    sd = {
        "layers.0.w": torch.randn(512, 1024, generator=g).to(torch.bfloat16),
        "layers.0.b": torch.randn(1024, generator=g),
        "emb": torch.randn(300, 256, generator=g).to(torch.bfloat16),
        "scale": torch.tensor(2.5, dtype=torch.float32),
        "ids": torch.arange(10, dtype=torch.int64),
        # not contiguous: committed from a copy
        "wt": torch.randn(64, 32, generator=g).t(),
    }
    if step:
        w = sd["layers.0.w"].float()
        w += torch.randn(w.shape, generator=g) * 1e-2
        sd["layers.0.w"] = w.to(torch.bfloat16)
    return sd

def reference_bytes(sd, metadata):
    """safetensors format, from the spec: tensors by dtype (the
    reference's Dtype order, descending) then name; header JSON compact,
    __metadata__ first, padded with spaces to 8 bytes."""
    order = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16",
             "BF16", "I32", "U32", "F32", "F64", "I64", "U64"]
    names = {torch.bfloat16: "BF16", torch.float32: "F32", torch.int64: "I64"}
    items = sorted(sd.items(), key=lambda kv: (-order.index(names[kv[1].dtype]), kv[0]))
    hdr, data, off = {}, [], 0
    if metadata:
        hdr["__metadata__"] = metadata
    for k, t in items:
        t = t.contiguous()
        b = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        hdr[k] = {"dtype": names[t.dtype], "shape": list(t.shape),
                  "data_offsets": [off, off + len(b)]}
        data.append(b)
        off += len(b)
    js = json.dumps(hdr, separators=(",", ":")).encode()
    js += b" " * ((8 - len(js) % 8) % 8)
    return struct.pack("<Q", len(js)) + js + b"".join(data)

def parse(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    return raw, hdr, 8 + n

if phase == "commit":
    for step in (0, 1):
        sd = state(step)
        with dcrfs.Commit(store, init=True, cache_dir=cache, chunk_size=65536) as c:
            c.add_safetensors("model.safetensors", sd, metadata={"format": "pt"})
            v = c.publish(tag="step-%d" % step)
        assert v == step + 1, v
        print("committed", v, "delta" if step else "", c.info.chunks_delta, file=sys.stderr)
    # a NaN is refused, naming the tensor; nothing is published
    sd = state(1)
    sd["emb"][3, 7] = float("nan")
    try:
        with dcrfs.Commit(store, cache_dir=cache, log_level=0) as c:
            c.add_safetensors("model.safetensors", sd)
            c.publish()
        sys.exit("a NaN was committed")
    except dcrfs.DcrError as e:
        assert "tensor emb has 1 non-finite value" in str(e), str(e)
        # the advice is the argument, not dcrfs-commit's flag
        assert "allow_nonfinite=True" in str(e) and "--allow" not in str(e), str(e)
    # a NUL or invalid UTF-8 in a name, path, metadata or tag is refused
    # (DcrError EINVAL naming it), never published cut short or as a
    # header that is not JSON
    x = np.arange(4, dtype=np.float32)
    def refused(what, fn, needle):
        c = dcrfs.Commit(store, cache_dir=cache, log_level=0)
        try:
            fn(c)
            c.publish()
            sys.exit("%s was accepted" % what)
        except dcrfs.DcrError as e:
            assert e.errno == 22 and needle in str(e), (what, str(e))
        finally:
            c.close()
    refused("a NUL in a tensor name", lambda c: c.add_safetensors("m.safetensors", {"a\0b": x}),
            "tensor name")
    refused("a NUL in a path", lambda c: c.add_safetensors("m\0.evil", {"a": x}), "path")
    refused("a NUL in a path (bytes)", lambda c: c.add_bytes("m\0.evil", b"hi"), "path")
    refused("a NUL in a metadata value",
            lambda c: c.add_safetensors("m.safetensors", {"a": x}, metadata={"k": "v\0cut"}),
            "metadata value")
    refused("a NUL in a metadata key",
            lambda c: c.add_safetensors("m.safetensors", {"a": x}, metadata={"k\0": "v"}),
            "metadata key")
    refused("a NUL in a tag", lambda c: (c.add_bytes("f", b"hi"), c.publish(tag="t\0x")), "tag")
    refused("a lone surrogate in a tensor name",
            lambda c: c.add_safetensors("m.safetensors", {"a\udcff": x}), "tensor name")
    refused("invalid UTF-8 in a tensor name (bytes)",
            lambda c: c.add_safetensors("m.safetensors", {b"a\xff\xfe": x}), "not valid UTF-8")
    refused("an overlong '/' in a tensor name (bytes)",
            lambda c: c.add_safetensors("m.safetensors", {b"a\xc0\xafb": x}), "not valid UTF-8")
    refused("a lone surrogate in a metadata value",
            lambda c: c.add_safetensors("m.safetensors", {"a": x}, metadata={"k": "\udcff"}),
            "metadata value")
    refused("invalid UTF-8 in a path (bytes)", lambda c: c.add_bytes(b"m\xff", b"hi"),
            "not valid UTF-8")
    assert dcrfs.version(store) == 2, dcrfs.version(store)
    # abort: nothing published
    with dcrfs.Commit(store, cache_dir=cache) as c:
        c.add_safetensors("model.safetensors", state(1))
        c.add_bytes("notes.txt", b"hello")
        c.abort()
    assert dcrfs.version(store) == 2, dcrfs.version(store)
    # compact through the library: with depth 1 every version is an anchor
    info = dcrfs.compact(store, max_depth=1)
    assert info == {"generation": 1, "rewritten": 1, "depth": 1}, info
    assert dcrfs.compact(store, max_depth=1)["generation"] == 0
elif phase == "maint":
    import errno, shutil, subprocess
    ctlbin = sys.argv[4]
    def ctl(*a):
        p = subprocess.run([ctlbin, "--store", store, "--json"] + list(a),
                           capture_output=True, check=True)
        return json.loads(p.stdout)
    assert dcrfs.log(store) == ctl("log"), (dcrfs.log(store), ctl("log"))
    assert [x["version"] for x in dcrfs.log(store)] == [2, 1]
    assert dcrfs.show(store, 2) == ctl("show", "2")
    assert dcrfs.show(store, "step-0") == ctl("show", "step-0")
    d = dcrfs.diff(store, 1, "latest")
    assert d == ctl("diff", "1", "latest")
    ts = {t["name"]: t for f in d["files"] for t in f.get("tensors", [])}
    assert ts["layers.0.w"]["changed_bytes"] > 0 and ts["layers.0.b"]["changed_bytes"] == 0, ts
    assert dcrfs.tag(store, "best", "latest") == 2
    assert "best" in dcrfs.show(store, 2)["tags"]
    try:
        dcrfs.show(store, 7)
        sys.exit("show of a version that does not exist")
    except dcrfs.DcrError as e:
        assert e.errno == errno.ENOENT and "version 7 does not exist" in str(e), str(e)
    assert dcrfs.verify(store)["ok"] and dcrfs.verify(store, deep=True)["ok"]
    assert dcrfs.verify(store, versions=["step-0"])["versions"] == [1]
    # a pack gone: DcrError naming it, with the JSON as .result
    pack = "packs/" + dcrfs.show(store, 2)["packs"][0]
    shutil.move(os.path.join(store, pack), os.path.join(store, "aside"))
    try:
        dcrfs.verify(store)
        sys.exit("verify passed a store missing %s" % pack)
    except dcrfs.DcrError as e:
        assert e.errno == errno.EBADMSG and "damaged: %s: missing" % pack in str(e), str(e)
        assert e.result["damage"][0]["object"] == pack, e.result
    shutil.move(os.path.join(store, "aside"), os.path.join(store, pack))
    # gc: as dcrfs-ctl gc --dry-run says, then for real
    dry = dcrfs.gc(store, keep_last=1, keep_tagged=False, grace=0, dry_run=True)
    assert dry == ctl("gc", "--keep-last", "1", "--no-keep-tagged", "--grace", "0", "-n"), dry
    g = dcrfs.gc(store, keep_last=1, keep_tagged=False, grace=0)
    assert g["versions_removed"] == [1] and g["tags_removed"] == ["step-0"], g
    assert g["packs_deleted"] > 0 and not g["dry_run"], g
    assert [x["version"] for x in dcrfs.log(store)] == [2]
    assert dcrfs.verify(store, deep=True)["ok"]
    try:
        dcrfs.gc(store, keep_last=0)
        sys.exit("gc took keep_last=0")
    except dcrfs.DcrError as e:
        assert e.errno == errno.EINVAL, str(e)
    print("maintenance: log, show, diff, tag, verify, gc", file=sys.stderr)
else:
    mnt = sys.argv[4]
    for step in (0, 1):
        sd = state(step)
        path = os.path.join(mnt, "v%d" % (step + 1), "model.safetensors")
        raw, hdr, base = parse(path)
        assert raw == reference_bytes(sd, {"format": "pt"}), "bytes differ from the format's"
        assert hdr["__metadata__"] == {"format": "pt"}
        for k, t in sd.items():
            h = hdr[k]
            b, e = h["data_offsets"]
            buf = raw[base + b:base + e]
            t = t.contiguous()
            if t.dtype == torch.bfloat16:
                got = torch.from_numpy(np.frombuffer(buf, dtype=np.int16).copy()).view(torch.bfloat16)
            else:
                got = torch.from_numpy(np.frombuffer(buf, dtype=t.numpy().dtype).copy())
            got = got.reshape(h["shape"])
            assert list(got.shape) == list(t.shape), k
            assert torch.equal(got, t), "tensor %s differs" % k
    print("compared", len(sd), "tensors in 2 versions", file=sys.stderr)
PYEOF

t "$PY" "$T/t.py" "$STORE" "$T/commit-cache" commit
[ ! -e "$STORE/versions/0000000003" ] || fail "a refused or aborted commit published version 3"
# (the committer's cache keeps the parent copy, as dcrfs-commit does)
[ -z "$(find "$T" -name '*.safetensors' -not -path "$STORE/*" -not -path "$T/commit-cache/*")" ] ||
	fail "a checkpoint file was written: $(find "$T" -name '*.safetensors')"
mount_dcrfs "$STORE" "$MNT"
t "$PY" "$T/t.py" "$STORE" "$T/commit-cache" compare "$MNT"
# the project's parser reads it: diff names the changed tensor only
"$DCR_BUILDDIR/dcrfs-ctl" --store "$STORE" diff 1 2 >"$T/diff" 2>&1 ||
	fail "dcrfs-ctl diff: $(cat "$T/diff")"
grep -q "layers.0.w" "$T/diff" || fail "diff does not name layers.0.w: $(cat "$T/diff")"
! grep -q "layers.0.b" "$T/diff" || fail "diff names an unchanged tensor: $(cat "$T/diff")"
umount_dcrfs "$MNT"
t "$PY" "$T/t.py" "$STORE" "$T/commit-cache" maint "$DCR_BUILDDIR/dcrfs-ctl"
log "ok"
