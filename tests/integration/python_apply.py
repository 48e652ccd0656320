# SPDX-License-Identifier: MIT
"""python_apply.py - driven by python_apply.sh (see there), and imported
by python_delta.py, which runs check() on the mount's own view files.

  python_apply.py WORKDIR    reference delta files of a synthetic step

Each case compares apply_delta's result bit for bit with a plain
reference (``flat_bits[idx] = val_bits`` per tensor, written here from
the format) and checks that a refused call changed no tensor.
"""
import errno
import os
import sys

import numpy as np
import torch

import dcrfs
import deltaref
from dcrfs import _delta

# name -> (dtype, shape); q, k and v fuse into one qkv tensor the way
# vLLM's QKVParallelLinear holds them; tied.a and tied.b are one tensor
# saved twice (both changed alike)
SHAPES = {"layers.0.q": ("BF16", (64, 32)), "layers.0.k": ("BF16", (16, 32)),
          "layers.0.v": ("BF16", (16, 32)), "emb": ("BF16", (100, 32)),
          "norm": ("F32", (32,)), "same": ("BF16", (8, 8)),
          "tied.a": ("BF16", (4, 16)), "tied.b": ("BF16", (4, 16))}
NPDT = {"BF16": "<u2", "F32": "<u4"}
TDT = {"BF16": torch.bfloat16, "F32": torch.float32}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def versions(seed=7, rate=0.05):
    """Two versions of SHAPES as {name: numpy array of the bits}: the
    second changes about rate of the elements of all but "same"."""
    g = np.random.default_rng(seed)
    a = {k: g.integers(0, 1 << (16 if dt == "BF16" else 32), size=s, dtype=NPDT[dt])
         for k, (dt, s) in SHAPES.items()}
    a["tied.b"] = a["tied.a"].copy()
    b = {k: v.copy() for k, v in a.items()}
    for k, v in b.items():
        if k in ("same", "tied.b"):
            continue
        flat = v.reshape(-1)
        hit = g.random(flat.size) < rate
        # the edges of the tensor-parallel halves change too
        hit[[0, flat.size // 2 - 1, flat.size // 2, -1]] = True
        flat[hit] ^= g.integers(1, 1 << 15, size=int(hit.sum()), dtype=flat.dtype)
    b["tied.b"] = b["tied.a"].copy()
    return a, b


def raw(v):
    return deltaref.layout([(k, SHAPES[k][0], SHAPES[k][1], x.tobytes())
                            for k, x in v.items()], None)


def write_delta(work, a, b, name="d.safetensors", va=1, vb=2):
    p = os.path.join(work, name)
    with open(p, "wb") as f:
        f.write(deltaref.make_delta(raw(a), raw(b), va, vb, "a" * 64, "b" * 64))
    return p


def as_torch(v):
    return {k: torch.from_numpy(x.copy().view("<i2" if SHAPES[k][0] == "BF16" else "<f4"))
            .view(TDT[SHAPES[k][0]]) for k, x in v.items()}


def bits(t):
    if isinstance(t, np.ndarray):
        return t.tobytes()
    return t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes()


def snapshot(ts):
    return {k: bits(t) for k, t in ts.items()}


def ref_apply(ts, path):
    """The plain reference: each tensor's bits, flat, indexed by idx."""
    for name, idx, val in dcrfs.iter_delta(path):
        u = "<u%d" % val.itemsize
        t = ts[name]
        flat = t.reshape(-1) if isinstance(t, np.ndarray) else \
            t.view(-1).view(torch.uint8).numpy()
        flat.view(u)[idx] = val.view(u)
    return ts


def refused(call, needle, ts, code=errno.EINVAL, exc=dcrfs.DeltaError):
    before = snapshot(ts)
    try:
        call()
    except exc as e:
        if exc is dcrfs.DeltaError:
            assert e.errno == code and needle in str(e), (needle, e.errno, str(e))
        else:
            assert needle in str(e), (needle, str(e))
    else:
        sys.exit("apply_delta took a call that should fail with %r" % needle)
    assert snapshot(ts) == before, "a refused apply (%s) changed a tensor" % needle


class Small:
    """Pieces of a few hundred elements and four threads, so that the
    parallel read and patch run with many pieces on a small file."""

    def __enter__(self):
        self.saved = _delta._READ_PIECE, _delta._PATCH_PIECE, _delta._workers
        _delta._READ_PIECE, _delta._PATCH_PIECE = 256, 100
        _delta._workers = lambda: 4
        return self

    def __exit__(self, *exc):
        _delta._READ_PIECE, _delta._PATCH_PIECE, _delta._workers = self.saved


def as_numpy(ts):
    """torch tensors -> numpy arrays of their elements (bf16 as uint16
    bits, what a numpy engine holds)."""
    out = {}
    for k, t in ts.items():
        u = t.detach().contiguous().view(-1).view(torch.uint8).numpy().copy()
        out[k] = u.view("<u2" if t.dtype == torch.bfloat16 else
                        t.detach().numpy().dtype).reshape(t.shape)
    return out


def fast_paths(path, make_old, from_version):
    """apply_delta onto numpy arrays, CPU torch tensors and (the device
    path, run on the CPU) torch tensors staged as for a device, with
    default and with small pieces on several threads: the reference's
    bits. make_old() gives fresh torch tensors of the from version."""
    want = snapshot(ref_apply(make_old(), path))
    runs = 0
    for staged in ("0", "1"):
        os.environ["DCRFS_TEST_APPLY_STAGED"] = staged
        for small in (False, True):
            for kind in ("numpy", "torch"):
                if kind == "numpy" and staged == "1":
                    continue
                ts = make_old() if kind == "torch" else as_numpy(make_old())
                if small:
                    with Small():
                        dcrfs.apply_delta(ts, path, from_version=from_version)
                else:
                    dcrfs.apply_delta(ts, path, from_version=from_version)
                got = snapshot(ts)
                bad = [k for k in want if got[k] != want[k]]
                assert not bad, "%s (staged %s, small pieces %s): %s differ from the " \
                    "reference" % (kind, staged, small, bad)
                runs += 1
    os.environ.pop("DCRFS_TEST_APPLY_STAGED")
    return runs


def resolve_cases(work):
    """resolve= onto fused and tensor-parallel targets, SKIP, and the
    refusals; torch CPU tensors and numpy arrays."""
    a, b = versions()
    p = write_delta(work, a, b)
    names = ("layers.0.q", "layers.0.k", "layers.0.v")
    n = [a[k].size for k in names]
    cases = 0
    for kind in ("torch", "staged", "numpy"):
        # staged: torch tensors patched as on a device (DCRFS_TEST_APPLY_STAGED)
        os.environ["DCRFS_TEST_APPLY_STAGED"] = "1" if kind == "staged" else "0"

        def fresh(v):
            t = as_torch(v)
            return as_numpy(t) if kind == "numpy" else t

        def fuse(v):
            parts = [fresh(v)[k].reshape(-1) for k in names]
            return np.concatenate(parts) if kind == "numpy" else torch.cat(parts)
        # fused: q, k and v back to back in one tensor
        ts, qkv = fresh(a), fuse(a)
        off = dict(zip(names, (0, n[0], n[0] + n[1])))

        def res(name, ts=ts, qkv=qkv):
            return (qkv, off[name]) if name in off else (ts[name], 0)
        dcrfs.apply_delta(None, p, from_version=1, resolve=res)
        assert bits(qkv) == bits(fuse(b)), "%s: the fused qkv is not v2's q, k, v" % kind
        want = snapshot(fresh(b))
        got = snapshot(ts)
        assert all(got[k] == want[k] for k in ts if k not in off), kind
        cases += 1
        # tensor-parallel: two ranks, each holding half the rows of emb and
        # of q, k, v fused (rank r: [q rows of r | k rows of r | v rows of r])
        full = {k: fresh(b)[k] for k in names + ("emb",)}
        for r in range(2):
            ts = fresh(a)
            halves = {k: ts[k].reshape(-1)[r * (a[k].size // 2):(r + 1) * (a[k].size // 2)]
                      for k in names + ("emb",)}
            emb_r = halves["emb"].copy() if kind == "numpy" else halves["emb"].clone()
            qkv_r = np.concatenate([halves[k] for k in names]) if kind == "numpy" else \
                torch.cat([halves[k] for k in names])
            dst = dict(zip(names, (0, n[0] // 2, n[0] // 2 + n[1] // 2)))

            def tp(name, ts=ts, r=r, qkv_r=qkv_r, emb_r=emb_r, dst=dst):
                if name in dst:
                    c = a[name].size // 2
                    return qkv_r, dst[name], r * c, c
                if name == "emb":
                    c = a["emb"].size // 2
                    return emb_r, 0, r * c, c
                return ts[name], 0
            dcrfs.apply_delta(None, p, from_version=1, resolve=tp)
            for k in names + ("emb",):
                c = a[k].size // 2
                w = full[k].reshape(-1)[r * c:(r + 1) * c]
                g = emb_r if k == "emb" else qkv_r[dst[k]:dst[k] + c]
                assert bits(g) == bits(w), "%s rank %d: %s is not v2's slice" % (kind, r, k)
        cases += 1
        # SKIP leaves a tensor alone on purpose; the others are patched
        ts = fresh(a)
        dcrfs.apply_delta(None, p, from_version=1,
                          resolve=lambda name: dcrfs.SKIP if name == "norm" else (ts[name], 0))
        got, want, old = snapshot(ts), snapshot(fresh(b)), snapshot(fresh(a))
        assert got["norm"] == old["norm"] and got["emb"] == want["emb"], kind
        cases += 1
        # refused, nothing changed
        ts = fresh(a)
        qkv = fuse(a)

        def fell_off(name):
            if name != "norm":
                return ts[name], 0
        refused(lambda: dcrfs.apply_delta(None, p, from_version=1, resolve=fell_off),
                "dcrfs.SKIP", ts)
        refused(lambda: dcrfs.apply_delta(
            None, p, from_version=1,
            resolve=lambda name: (qkv, 0) if name in names else (ts[name], 0)),
            "would patch the same elements", ts)
        refused(lambda: dcrfs.apply_delta(
            None, p, from_version=1,
            resolve=lambda name: (ts["emb"], 0, 0, a["emb"].size + 1) if name == "emb"
            else (ts[name], 0)), "does not fit", ts)
        refused(lambda: dcrfs.apply_delta(
            None, p, from_version=1,
            resolve=lambda name: (ts["emb"], 1) if name == "emb" else (ts[name], 0)),
            "out of range", ts)
        refused(lambda: dcrfs.apply_delta(
            None, p, from_version=1,
            resolve=lambda name: (ts[name], -1)), "non-negative integer", ts)
        refused(lambda: dcrfs.apply_delta(None, p, from_version=1,
                                          resolve=lambda name: ts[name + "x"]),
                "emb", ts, exc=KeyError)
        cases += 6
        # one tensor saved under two names (tied): patched once; two names
        # with different changes onto one tensor: refused
        ts = fresh(a)
        ts["tied.b"] = ts["tied.a"]
        dcrfs.apply_delta(ts, p, from_version=1)
        assert bits(ts["tied.a"]) == bits(fresh(b)["tied.a"]), kind
        ts = fresh(a)
        ts["norm2"] = ts["emb"]
        refused(lambda: dcrfs.apply_delta(
            None, p, from_version=1,
            resolve=lambda name: (ts["emb"], 0) if name == "layers.0.q" else (ts[name], 0)),
            "would patch the same elements", ts)
        cases += 2
    os.environ.pop("DCRFS_TEST_APPLY_STAGED")
    return cases


def misaligned(work):
    """A tensor at an offset that is not a multiple of its width (the
    format never writes one; typed views need it): refused."""
    a, b = versions()
    good = deltaref.parse(open(write_delta(work, a, b), "rb").read())
    hdr, meta, data = good
    name = [k for k in hdr if hdr[k]["dtype"] == "BF16"][-1]
    hdr = {k: dict(v) for k, v in hdr.items()}
    o = hdr[name]["data_offsets"]
    hdr[name]["data_offsets"] = [o[0] + 1, o[1] + 1]
    p = os.path.join(work, "misaligned.safetensors")
    with open(p, "wb") as f:
        f.write(deltaref.raw_header(dict([("__metadata__", meta)] + list(hdr.items())),
                                    data + b"\0\0"))
    ts = as_torch(a)
    refused(lambda: dcrfs.apply_delta(ts, p, from_version=1), "not a multiple of its width",
            ts, code=errno.EBADMSG)
    return 1


def check(work):
    """Every case on reference files of the synthetic step."""
    a, b = versions()
    p = write_delta(work, a, b)
    n = fast_paths(p, lambda: as_torch(a), 1)
    assert snapshot(ref_apply(as_torch(a), p)) == snapshot(as_torch(b)), "the reference apply"
    # sharded: two files through one call
    s1 = {k: v for k, v in a.items() if k < "m"}
    s2 = {k: v for k, v in a.items() if k >= "m"}
    p1 = write_delta(work, s1, {k: b[k] for k in s1}, "s1.safetensors")
    p2 = write_delta(work, s2, {k: b[k] for k in s2}, "s2.safetensors")
    for staged in ("0", "1"):
        os.environ["DCRFS_TEST_APPLY_STAGED"] = staged
        ts = as_torch(a)
        with Small():
            dcrfs.apply_delta(ts, [p1, p2], from_version=1)
        assert snapshot(ts) == snapshot(as_torch(b)), "sharded (staged %s)" % staged
        n += 1
    os.environ.pop("DCRFS_TEST_APPLY_STAGED")
    n += resolve_cases(work)
    n += misaligned(work)
    log("apply paths and resolve=: %d cases bit-exact or refused untouched" % n)


if __name__ == "__main__":
    check(sys.argv[1])
