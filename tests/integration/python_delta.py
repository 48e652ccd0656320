# SPDX-License-Identifier: MIT
"""python_delta.py - driven by python_delta.sh (see there).

  python_delta.py commit STORE CACHE        train and commit v1..v5
  python_delta.py check STORE MNT WORKDIR   deltas: view bytes, apply, hostile
"""
import errno
import json
import os
import struct
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn

import dcrfs
import deltaref
import python_apply

FILES = ("bf16/model.safetensors", "fp16/model.safetensors", "fp32/model.safetensors")
LAST = 5
# names that need escaping or are not ASCII: the C view's JSON must agree
ODD = "aux.\u00fcn\u00ef\tc\u00f6de\x01\"q\""


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ------------------------------------------------------------- commit phase
class Net(nn.Module):
    """A small language model: ~0.8 M parameters (3 MB in fp32)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(1000, 128)
        self.l1 = nn.Linear(128, 512)
        self.l2 = nn.Linear(512, 1000)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(self.emb(x))))


def train(step_count):
    """The three parameter copies after each of step_count real steps:
    fp32 trained by AdamW, bf16 trained natively (AdamW in bf16: many
    updates round away, a sparse change), fp16 a copy of an fp32 master
    trained by SGD with momentum (only the embedding rows seen change)."""
    torch.manual_seed(0)
    f32, b16, sgd = Net(), Net(), Net()
    b16.load_state_dict(f32.state_dict())
    sgd.load_state_dict(f32.state_dict())
    b16 = b16.to(torch.bfloat16)
    o32 = torch.optim.AdamW(f32.parameters(), lr=1e-3)
    o16 = torch.optim.AdamW(b16.parameters(), lr=3e-5, weight_decay=0.0)
    osg = torch.optim.SGD(sgd.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    out = []
    for step in range(step_count + 1):
        if step:
            x = torch.randint(0, 1000, (8, 16), generator=g)
            y = torch.randint(0, 1000, (8, 16), generator=g)
            for m, o in ((f32, o32), (b16, o16), (sgd, osg)):
                o.zero_grad()
                loss = nn.functional.cross_entropy(m(x).float().reshape(-1, 1000), y.reshape(-1))
                loss.backward()
                o.step()
        sd = lambda m, dt: {k: v.detach().to(dt).clone() for k, v in m.state_dict().items()}
        out.append({"fp32": sd(f32, torch.float32), "bf16": sd(b16, torch.bfloat16),
                    "fp16": sd(sgd, torch.float16)})
    return out


def extras(v, copies):
    """What version v adds to the trained tensors: odd names, -0.0 and NaN
    payloads, and (from v4) an added, a removed, a reshaped and a retyped
    tensor."""
    f32 = copies["fp32"]
    f32["aux.signs"] = torch.tensor([0.0, 1.0, -0.0, 2.0] * 8)
    if v >= 3:
        f32["aux.signs"][0] = -0.0   # +0.0 -> -0.0 (equal as floats)
        f32["aux.signs"][2] = 0.0    # -0.0 -> +0.0
    nan = np.full(16, np.nan, dtype=np.float32).view(np.uint32)
    nan[5] = 0x7fc00001 if v >= 3 else 0x7fc00000  # another NaN payload
    f32["aux.nan"] = torch.from_numpy(nan.view(np.float32).copy())
    if v < 4:
        f32["aux.removed"] = torch.arange(12, dtype=torch.float32)
        f32["aux.reshaped"] = torch.arange(512, dtype=torch.float32).reshape(16, 32)
        f32["aux.retyped"] = torch.ones(8, dtype=torch.float32)
    else:
        f32["aux.added"] = torch.full((3, 5), 7.0)
        f32["aux.reshaped"] = torch.arange(512, dtype=torch.float32).reshape(32, 16) + v
        f32["aux.retyped"] = torch.ones(8, dtype=torch.float16)
    copies["bf16"][ODD] = torch.full((64,), float(v), dtype=torch.bfloat16)
    copies["bf16"]["aux.empty"] = torch.zeros(0, 4, dtype=torch.bfloat16)
    return copies


def commit(store, cache):
    states = train(LAST - 1)
    for v in range(1, LAST + 1):
        copies = extras(v, states[v - 1])
        with dcrfs.Commit(store, init=(v == 1), cache_dir=cache, chunk_size=65536,
                          allow_nonfinite=True) as c:
            for prec in ("bf16", "fp16", "fp32"):
                c.add_safetensors("%s/model.safetensors" % prec, copies[prec],
                                  metadata={"format": "pt", "step": str(v - 1)})
            c.add_bytes("config.json", json.dumps({"step": v - 1}).encode())
            if v >= 3:  # a file that v1 and v2 lack: all its tensors are added
                c.add_safetensors("new.safetensors",
                                  {"w": torch.full((10,), float(v), dtype=torch.float16)})
            got = c.publish(tag="step-%d" % (v - 1))
        assert got == v, (got, v)
    log("committed v1..v%d" % LAST)


# -------------------------------------------------------------- check phase
TORCH_DT = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32,
            "I64": torch.int64, "I32": torch.int32}
NP_DT = {"BF16": "<u2", "F16": "<f2", "F32": "<f4", "I64": "<i8", "I32": "<i4"}


def read(path):
    with open(path, "rb") as f:
        return f.read()


def load_torch(raw):
    """Fresh torch tensors of a full safetensors file's bytes."""
    if raw is None:
        return {}
    hdr, _, data = deltaref.parse(raw)
    data = bytearray(data)
    out = {}
    for k, e in hdr.items():
        b, end = e["data_offsets"]
        dt = TORCH_DT[e["dtype"]]
        n = (end - b) // deltaref.WIDTH[e["dtype"]]
        t = torch.frombuffer(data, dtype=dt, count=n, offset=b) if n else torch.empty(0, dtype=dt)
        out[k] = t.clone().reshape(e["shape"])
    return out


def load_numpy(raw):
    hdr, _, data = deltaref.parse(raw)
    return {k: np.frombuffer(data, dtype=NP_DT[e["dtype"]], offset=e["data_offsets"][0],
                             count=int(np.prod(e["shape"], dtype=np.int64))).reshape(e["shape"]).copy()
            for k, e in hdr.items()}


def bits(t):
    if isinstance(t, np.ndarray):
        return (t.dtype.str, t.shape, t.tobytes())
    return (str(t.dtype), tuple(t.shape), t.contiguous().view(torch.uint8).numpy().tobytes()
            if t.numel() else b"")


def bits_np(a):
    return a.tobytes()


def same(a, b):
    return a.keys() == b.keys() and all(bits(a[k]) == bits(b[k]) for k in a)


def finish(tensors, info, full):
    """The caller's part after apply_delta: reload added and reshaped
    tensors from the full file, drop the removed ones."""
    for k in info["removed"]:
        del tensors[k]
    for k in info["added"] + info["reshaped"]:
        tensors[k] = full[k]
    return tensors


class Checker:
    def __init__(self, store, mnt, work):
        self.store, self.mnt, self.work = store, mnt, work
        self.view = os.path.isdir(os.path.join(mnt, "delta"))
        self.shows = {v: dcrfs.show(store, v) for v in range(1, LAST + 1)}
        self.checked = 0

    def raw(self, v, f):
        p = os.path.join(self.mnt, "v%d" % v, f)
        return read(p) if os.path.exists(p) else None

    def digest(self, v, f):
        """The manifest's digest of f in v, checked against our own."""
        s = self.shows[v]
        e = [x for x in s["files"] if x["path"] == f]
        if not e:
            return "", None
        e = e[0]
        assert e["digest_kind"] == "sha256-of-chunks", e
        own = deltaref.file_digest(self.raw(v, f), s["chunk_size"])
        assert own == e["digest"], (v, f, own, e["digest"])
        return e["digest"], e["digest_kind"]

    def delta(self, m, n, f):
        """(path, bytes) of the delta of f from vm to vn: the view's file,
        compared with the reference's bytes; the reference's own file when
        the mount has no delta view."""
        fd, _ = self.digest(m, f)
        td, kind = self.digest(n, f)
        ref = deltaref.make_delta(self.raw(m, f), self.raw(n, f), m, n, fd, td, kind)
        name = "v%d" % n if m == n - 1 else "v%d..v%d" % (m, n)
        if not self.view:
            p = os.path.join(self.work, "%s-%s" % (name, f.replace("/", "_")))
            with open(p, "wb") as fh:
                fh.write(ref)
            return p, ref
        p = os.path.join(self.mnt, "delta", name, f)
        size = os.stat(p).st_size    # before the first read
        got = read(p)
        assert len(got) == size, "%s: st_size %d, read %d bytes" % (p, size, len(got))
        if got != ref:
            self.explain(p, got, ref)
        assert os.stat(p).st_size == size, p
        return p, got

    def explain(self, p, got, ref):
        g, r = deltaref.parse(got), deltaref.parse(ref)
        if g is None:
            sys.exit("%s: not a safetensors file (%d bytes)" % (p, len(got)))
        msg = ["%s: %d bytes differ from the reference's %d" % (p, len(got), len(ref))]
        if g[1] != r[1]:
            msg.append("metadata %r != reference %r" % (g[1], r[1]))
        if g[0] != r[0]:
            msg.append("tensors %s != reference %s" % (sorted(g[0]), sorted(r[0])))
        n = struct.unpack("<Q", got[:8])[0]
        if got[:8 + n] != ref[:8 + n]:
            msg.append("header: %r\nreference: %r" % (got[8:8 + n][:600], ref[8:8 + n][:600]))
        sys.exit("\n".join(msg))

    def step(self, m, n, f):
        """Apply the delta of f from vm to vn to vm's tensors: vn's, bit for
        bit (torch, and numpy where numpy has the dtype)."""
        p, raw = self.delta(m, n, f)
        old, new = self.raw(m, f), self.raw(n, f)
        full = load_torch(new)
        info = dcrfs.delta_info(p)
        assert info["from_version"] == m and info["to_version"] == n, info
        assert info["format"] == "dcrfs-delta" and info["format_version"] == "1", info
        fd, _ = self.digest(m, f)
        assert info["from_digest"] == fd and info["to_digest"] == self.digest(n, f)[0], info
        t = load_torch(old)
        before = {k: bits(v) for k, v in t.items()}
        got = dcrfs.apply_delta(t, p, from_digest=fd)
        assert got == info, (got, info)
        changed = [k for k in t if k in full and bits(t[k]) != before[k]]
        d = dcrfs.read_delta(p)
        assert sorted(changed) == sorted(d), (sorted(changed), sorted(d))
        assert same(finish(t, info, full), full), "%s: applied to v%d is not v%d" % (p, m, n)
        # numpy, where it has the dtype; bf16 held as uint16 and as int16
        # bits (Debian's numpy has no bfloat16), the digest as the xattr
        # gives it ("sha256-of-chunks:HEX")
        for bf16_as in (("<u2", "<i2") if "bf16" in f else (None,)):
            a = load_numpy(old) if old is not None else {}
            new_np = load_numpy(new)
            if bf16_as:
                a = {k: v.view(bf16_as) if v.dtype.str == "<u2" else v for k, v in a.items()}
                new_np = {k: v.view(bf16_as) if v.dtype.str == "<u2" else v
                          for k, v in new_np.items()}
            dcrfs.apply_delta(a, p, from_version=m, from_digest="sha256-of-chunks:" + fd)
            assert same(finish(a, info, new_np), new_np), "%s (numpy %s)" % (p, bf16_as)
        # size: <= 6.5 B per changed bf16 element, plus the header
        if f.startswith("bf16") and d:
            hl = struct.unpack("<Q", raw[:8])[0] + 8
            nel = sum(len(i) for i, _ in d.values())
            assert len(raw) - hl <= 6.5 * nel, (len(raw), hl, nel)
        self.checked += 1
        return info, d

    def run(self):
        infos = {}
        for n in range(2, LAST + 1):
            for f in FILES + ("new.safetensors",):
                if self.raw(n, f) is None:
                    continue
                infos[n, f] = self.step(n - 1, n, f)
        for m, n in ((1, 5), (2, 4), (3, 5), (2, 5), (1, 3)):
            for f in FILES + ("new.safetensors",):
                infos[m, n, f] = self.step(m, n, f)
        # rollback spans: delta/vM..vN with M > N takes vM's tensors back
        # to vN, bit for bit (tensors added since N come back as removed)
        for m, n in ((3, 2), (5, 1), (4, 2), (5, 3)):
            for f in FILES:
                infos[m, n, f] = self.step(m, n, f)
        i = infos[4, 2, "fp32/model.safetensors"][0]
        assert i["removed"] == ["aux.added"] and i["added"] == ["aux.removed"], i
        self.several()
        # real steps changed every precision (the bf16 one sparsely)
        for f in FILES:
            for n in range(2, LAST + 1):
                assert infos[n, f][1], "%s: v%d changed nothing" % (f, n)
        i, d = infos[2, "bf16/model.safetensors"]
        nel = sum(len(x) for x, _ in d.values())
        total = sum(t.numel() for t in load_torch(self.raw(2, "bf16/model.safetensors")).values())
        assert 0 < nel < total, (nel, total)
        log("bf16 step 1 changed %d of %d elements" % (nel, total))
        # -0.0 / +0.0 and NaN payloads are changes; equal floats or not
        d3 = infos[3, "fp32/model.safetensors"][1]
        assert list(d3["aux.signs"][0]) == [0, 2] and list(d3["aux.nan"][0]) == [5], d3
        assert ODD in infos[2, "bf16/model.safetensors"][1]
        # structure: reported, and the rest applied (checked in step)
        for key in ((4, "fp32/model.safetensors"), (2, 5, "fp32/model.safetensors")):
            i = infos[key][0]
            assert i["added"] == ["aux.added"], i
            assert i["removed"] == ["aux.removed"], i
            assert i["reshaped"] == ["aux.reshaped", "aux.retyped"], i
        i = infos[5, "fp32/model.safetensors"][0]
        assert i["added"] == i["removed"] == i["reshaped"] == [], i
        i = infos[3, "new.safetensors"][0]
        assert i["from_digest"] == "" and i["added"] == ["w"], i
        assert infos[1, 5, "new.safetensors"][0]["added"] == ["w"]
        if self.view:
            self.listing()
        log("%d deltas applied bit-exactly%s" % (self.checked, " (view bytes = reference)"
                                                  if self.view else " (reference files only)"))

    def several(self):
        """iter_delta gives read_delta's arrays; apply_delta of a list of
        files checks every one before it changes a tensor (a tensor two
        files change, a wrong from_digest entry), and returns one info
        per file."""
        f = "bf16/model.safetensors"
        p, _ = self.delta(2, 3, f)
        d = dcrfs.read_delta(p)
        items = list(dcrfs.iter_delta(p))
        assert [k for k, _, _ in items] == sorted(d), [k for k, _, _ in items]
        for k, i, v in items:
            assert bits_np(i) == bits_np(d[k][0]) and bits_np(v) == bits_np(d[k][1]), k
        t = load_torch(self.raw(2, f))
        before = {k: bits(v) for k, v in t.items()}
        q, _ = self.delta(2, 3, "fp32/model.safetensors")
        for files, kw, why in (([p, os.path.join(os.path.dirname(p), ".", os.path.basename(p))], {"from_version": 2},
                                "also changed by"),
                               ([p, q], {"from_version": 2}, "not among the tensors given"),
                               ([p, q], {"from_digest": {p: self.digest(2, f)[0]}}, "no entry")):
            try:
                dcrfs.apply_delta(t, files, **kw)
                sys.exit("apply_delta of %s took %r" % (files, kw))
            except dcrfs.DeltaError as e:
                assert why in str(e), (why, e)
        try:
            dcrfs.apply_delta(t, [p], from_digest={p: "0" * 64})
            sys.exit("apply_delta took a wrong from_digest entry")
        except dcrfs.DeltaError as e:
            assert "not the delta's" in str(e), e
        assert {k: bits(v) for k, v in t.items()} == before, "a refused apply changed tensors"
        got = dcrfs.apply_delta(t, [p], from_version=2)
        assert list(got) == [p], got
        full = load_torch(self.raw(3, f))
        assert same(finish(t, got[p], full), full), "list apply is not v3"

    def listing(self):
        """delta/ lists vN for each version with a parent; delta/vN lists
        vN's safetensors files only."""
        top = sorted(os.listdir(os.path.join(self.mnt, "delta")))
        assert top == ["v%d" % n for n in range(2, LAST + 1)], top
        for n in range(2, LAST + 1):
            files = []
            for r, _, fs in os.walk(os.path.join(self.mnt, "delta", "v%d" % n)):
                rel = os.path.relpath(r, os.path.join(self.mnt, "delta", "v%d" % n))
                files += [os.path.normpath(os.path.join(rel, x)) for x in fs]
            want = sorted(FILES + (("new.safetensors",) if n >= 3 else ()))
            assert sorted(files) == want, (n, files)
        assert not os.path.exists(os.path.join(self.mnt, "delta", "v1")), "delta/v1 exists"
        assert not os.path.exists(os.path.join(self.mnt, "delta", "v2", "config.json"))


# ---------------------------------------------------------------- hostile
def hostile(work, good_path, tensors, digest):
    """Files handed to apply_delta that must fail cleanly: DeltaError (a
    DcrError and a ValueError) naming the problem, no tensor changed."""
    good = read(good_path)
    hdr, meta, data = deltaref.parse(good)
    # the tensor applied last (sorted names): a file that fails there must
    # not have changed the others
    last = max(k.rpartition(".")[0] for k in hdr)
    assert len(hdr) >= 4, sorted(hdr)
    ie, ve = hdr[last + ".idx"], hdr[last + ".val"]
    numel = tensors[last].numel()

    def rebuild(h=None, m=meta, d=data):
        h = dict(hdr if h is None else h)
        return deltaref.raw_header(dict([("__metadata__", m)] + list(h.items())), d)

    def with_hdr(name, **kv):
        h = {k: dict(v) for k, v in hdr.items()}
        h[name].update(kv)
        return rebuild(h)

    def poke(off, fmt, *vals):
        d = bytearray(data)
        struct.pack_into(fmt, d, off, *vals)
        return rebuild(d=bytes(d))

    i0 = ie["data_offsets"][0]
    first_two = struct.unpack_from("<2i", data, i0)
    n = ie["shape"][0]
    assert n >= 2, "the last tensor changed fewer than 2 elements: %r" % ie
    hl = struct.unpack("<Q", good[:8])[0]
    hj = b'{"' + last.encode() + b'.idx":' + json.dumps(ie).encode() + b"," + \
        good[9:8 + hl].rstrip(b" ")
    hj += b" " * (-len(hj) % 8)
    twice = struct.pack("<Q", len(hj)) + hj + data
    short = dict(ve, shape=[n - 1], data_offsets=[ve["data_offsets"][0], ve["data_offsets"][1] - 2])
    cases = [
        ("wrong dtype", with_hdr(last + ".val", dtype="F16"), "the delta's values are F16"),
        ("out-of-range index", poke(i0 + 4 * (n - 1), "<i", numel), "out of range"),
        ("negative index", poke(i0, "<i", -1), "negative index"),
        ("idx/val length mismatch", with_hdr(last + ".val", **short), "indices but"),
        ("non-increasing idx", poke(i0, "<2i", first_two[1], first_two[0]), "not increasing"),
        ("repeated idx", poke(i0, "<2i", first_two[0], first_two[0]), "not increasing"),
        ("truncated file", good[:-3], "outside the"),
        ("header length past EOF", struct.pack("<Q", len(good)) + good[8:], "past the end"),
        ("header length > 100 MiB", struct.pack("<Q", (100 << 20) + 8) + good[8:], "more than"),
        ("shorter than 8 bytes", good[:5], "too short"),
        ("header not JSON", good[:8] + b"[" + good[9:], "not JSON"),
        ("a key twice", twice, "given twice"),
        ("JSON nested 200000 deep", struct.pack("<Q", 200000) + b"[" * 200000, "not JSON"),
        ("unknown dtype", with_hdr(last + ".val", dtype="F12"), "unknown dtype"),
        ("idx dtype not I32/I64", with_hdr(last + ".idx", dtype="U32"), "index dtype"),
        ("overlapping tensors", with_hdr(last + ".val", data_offsets=ie["data_offsets"],
                                         dtype="I32"), "overlap"),
        ("bytes != shape x width", with_hdr(last + ".val", shape=[n + 1]), "do not hold"),
        ("idx without val", rebuild({k: v for k, v in hdr.items() if k != last + ".val"}),
         "has no"),
        ("not a T.idx/T.val", rebuild(dict(hdr, **{"stray": ie})), "not a T.idx"),
        ("no __metadata__", deltaref.raw_header(hdr, data), "no __metadata__"),
        ("another format", rebuild(m=dict(meta, format="other")), "format"),
        ("format version 2", rebuild(m=dict(meta, format_version="2")), "format_version"),
        ("added not a list", rebuild(m=dict(meta, added="x")), "added"),
    ]
    missing = {k: v for k, v in tensors.items() if k != last}
    before = {k: bits(v) for k, v in tensors.items()}
    checked = 0
    for what, raw, needle in cases + [("a missing target tensor", good, "not among"),
                                      ("a wrong from_digest", good, "from_digest")]:
        p = os.path.join(work, "hostile.safetensors")
        with open(p, "wb") as fh:
            fh.write(raw)
        target = missing if what == "a missing target tensor" else tensors
        fd = "0" * 64 if what == "a wrong from_digest" else digest
        try:
            dcrfs.apply_delta(target, p, from_digest=fd)
            sys.exit("apply_delta took a file with %s" % what)
        except dcrfs.DeltaError as e:
            assert isinstance(e, dcrfs.DcrError) and isinstance(e, ValueError)
            assert e.errno in (errno.EBADMSG, errno.EINVAL), (what, e.errno)
            assert needle in str(e) and p in str(e), (what, str(e))
        assert {k: bits(v) for k, v in tensors.items()} == before, "%s changed a tensor" % what
        checked += 1
    # delta_info reads the header only: a file whose data is bad still
    # gives its metadata (read_delta refused it above); a bad header is
    # refused as read_delta refuses it
    want = dcrfs.delta_info(good_path)
    for what, raw, needle in cases:
        p = os.path.join(work, "hostile.safetensors")
        with open(p, "wb") as fh:
            fh.write(raw)
        if what in ("non-increasing idx", "repeated idx", "negative index"):
            assert dcrfs.delta_info(p) == want, what
        elif what in ("truncated file", "no __metadata__", "header not JSON",
                      "overlapping tensors", "format version 2"):
            try:
                dcrfs.delta_info(p)
                sys.exit("delta_info took a file with %s" % what)
            except dcrfs.DeltaError as e:
                assert needle in str(e) and p in str(e), (what, str(e))
    # the from version unchecked, or not the delta's: refused (item 5 of
    # issue 33: a delta applied to another version's tensors made them of
    # no version at all, silently)
    fv = dcrfs.delta_info(good_path)["from_version"]
    for what, kw, needle in (
            ("no from_digest or from_version", {}, "needs from_digest= "),
            ("a wrong from_version", {"from_version": fv + 1}, "are of v%d" % (fv + 1)),
            ("a digest of another kind", {"from_digest": "sha256:" + digest}, "another kind"),
            ("a wrong xattr digest", {"from_digest": b"sha256-of-chunks:" + b"1" * 64},
             "from_digest")):
        try:
            dcrfs.apply_delta(tensors, good_path, **kw)
            sys.exit("apply_delta took %s" % what)
        except dcrfs.DeltaError as e:
            assert e.errno == errno.EINVAL and needle in str(e), (what, str(e))
        checked += 1
    assert {k: bits(v) for k, v in tensors.items()} == before
    # a tensor to patch that is not contiguous, or of another dtype: refused
    t = tensors[last]
    strided = torch.empty(2 * numel, dtype=t.dtype)[::2].reshape(t.shape)
    for what, t2, needle in (("not contiguous", strided, "not contiguous"),
                             ("fp16", t.to(torch.float16), "is F16")):
        try:
            dcrfs.apply_delta(dict(tensors, **{last: t2}), good_path, from_digest=digest)
            sys.exit("apply_delta patched a tensor that is %s" % what)
        except dcrfs.DeltaError as e:
            assert needle in str(e), str(e)
        checked += 1
    assert {k: bits(v) for k, v in tensors.items()} == before
    # and the good file still applies
    dcrfs.apply_delta(tensors, good_path, from_digest=digest)
    assert {k: bits(v) for k, v in tensors.items()} != before
    log("%d hostile files and targets refused, tensors untouched" % checked)


def no_torch(p):
    """read_delta and delta_info, and apply_delta to numpy arrays, do not
    import torch."""
    code = ("import sys, dcrfs; d = dcrfs.read_delta(sys.argv[1]); dcrfs.delta_info(sys.argv[1]);"
            "assert d and 'torch' not in sys.modules, sorted(sys.modules);"
            "import numpy as np; dcrfs.apply_delta({k: np.zeros(1 << 20, np.float32) for k in d},"
            " sys.argv[1], check=False); assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code, p], check=True)


def fake_mount(c, work):
    """Without a delta view: a tree laid out as a mount with one (vN/F
    links to the mount's files, delta/ the reference's files), for the
    README's worker."""
    top = os.path.join(work, "fake")

    def put(p, data=None, link=None):
        os.makedirs(os.path.dirname(p), exist_ok=True)
        if link:
            os.symlink(link, p)
            return
        with open(p, "wb") as fh:
            fh.write(data)
    for n in range(1, LAST + 1):
        for f in FILES:
            put(os.path.join(top, "v%d" % n, f), link=os.path.join(c.mnt, "v%d" % n, f))
            for m in range(1, n):
                name = "v%d" % n if m == n - 1 else "v%d..v%d" % (m, n)
                put(os.path.join(top, "delta", name, f), c.delta(m, n, f)[1])
    os.symlink("v%d" % LAST, os.path.join(top, "latest"))
    return top


def readme_worker(c, mnt):
    """The README's rollout worker (its first code block after the
    heading), run against this mount: from v1, v4 and v3 (each file) to
    latest by delta, span or reload, bit-exactly; a wrong digest held
    falls back to a full reload."""
    import re
    readme = read(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                               "README.md")).decode()
    sec = readme[readme.index("### Keeping a rollout worker's weights current"):]
    code = re.search(r"```python\n(.*?)```", sec, re.S).group(1)
    code, k = re.subn(r'^MNT, FILE = .*$', "MNT, FILE = None, None", code, flags=re.M)
    assert k == 1, "the README's worker sets MNT, FILE otherwise"
    ns = {}
    exec(compile(code, "README.md (worker)", "exec"), ns)
    ns["MNT"] = mnt
    runs = 0
    for f in FILES:
        ns["FILE"] = f
        want = load_torch(read(os.path.join(mnt, "v%d" % LAST, f)))
        for have, digest in ((1, None), (LAST - 1, None), (3, "0" * 64), (LAST, None)):
            w = ns["load"](os.path.join(mnt, "v%d" % have, f))
            v, dg = ns["update"](w, have, digest)
            assert v == LAST and same(w, want), (f, have, v)
            # a delta applied: the to_digest; a reload: none known
            assert dg == (None if digest or have == LAST else c.digest(LAST, f)[0]), (f, have, dg)
            runs += 1
    log("README worker: %d updates to v%d" % (runs, LAST))


def main():
    phase = sys.argv[1]
    if phase == "commit":
        commit(sys.argv[2], sys.argv[3])
        return
    store, mnt, work = sys.argv[2:5]
    c = Checker(store, mnt, work)
    c.run()
    f = "bf16/model.safetensors"
    p, _ = c.delta(2, 3, f)
    hostile(work, p, load_torch(c.raw(2, f)), c.digest(2, f)[0])
    no_torch(c.delta(2, 3, "fp32/model.safetensors")[0])
    # apply_delta's fast paths (numpy, CPU torch, staged as for a device;
    # small pieces on threads) on the mount's own files: the reference's bits
    runs = 0
    for f in FILES:
        old = c.raw(2, f)
        runs += python_apply.fast_paths(c.delta(2, 3, f)[0], lambda: load_torch(old), 2)
    log("fast paths: %d applies bit-exact" % runs)
    readme_worker(c, mnt if c.view else fake_mount(c, work))
    if not c.view:
        sys.exit(77)


if __name__ == "__main__":
    main()
