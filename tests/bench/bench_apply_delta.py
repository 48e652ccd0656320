# SPDX-License-Identifier: MIT
"""bench_apply_delta.py - what a rollout engine pays to move its weights
from v(N-1) to vN: (a) re-read vN's full file from the mount into fresh
torch tensors (read the file, torch.frombuffer per tensor, clone: the
loader an engine would use) against (b) dcrfs.apply_delta of
MNT/delta/vN/FILE to tensors holding v(N-1). Run by scripts/bench-apply
(see there); not part of make check.

  bench_apply_delta.py MNT N FILE RUNS [DELTA]

DELTA: a delta file to use instead of MNT/delta/vN/FILE (the reference
generator's, when the mount has no delta view). Prints one line per run
(after one untimed warm-up run of each) and a summary; checks once that
(b) gives vN bit for bit. Also reports the view's build (the first
lookup of the delta file) against one SHA-256 pass over vN's file read
from the mount (the issue's target: <= 1.5x).
"""
import hashlib
import os
import struct
import sys
import time
import json

import torch

import dcrfs

TORCH_DT = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32,
            "F64": torch.float64, "I64": torch.int64, "I32": torch.int32,
            "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}


def load(path):
    """(a): the whole file read once, a fresh tensor per tensor."""
    with open(path, "rb") as f:
        raw = bytearray(os.fstat(f.fileno()).st_size)
        f.readinto(raw)
    n = struct.unpack_from("<Q", raw)[0]
    hdr = json.loads(bytes(raw[8:8 + n]))
    hdr.pop("__metadata__", None)
    out = {}
    for k, e in hdr.items():
        b, end = e["data_offsets"]
        dt = TORCH_DT[e["dtype"]]
        cnt = (end - b) // torch.empty(0, dtype=dt).element_size()
        out[k] = torch.frombuffer(raw, dtype=dt, count=cnt, offset=8 + n + b).clone() \
            .reshape(e["shape"])
    return out


def same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k].view(torch.uint8) if a[k].dim()
                                                    else a[k], b[k].view(torch.uint8)
                                                    if b[k].dim() else b[k]) for k in a)


def main():
    mnt, n, fname, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    delta = sys.argv[5] if len(sys.argv) > 5 else os.path.join(mnt, "delta", "v%d" % n, fname)
    full = os.path.join(mnt, "v%d" % n, fname)
    prev = load(os.path.join(mnt, "v%d" % (n - 1), fname))   # what the engine holds
    want = load(full)                                        # warms the cache too
    t0 = time.perf_counter()
    os.stat(delta)                                           # the lookup builds the view
    build = time.perf_counter() - t0
    t0 = time.perf_counter()
    h = hashlib.sha256()
    with open(full, "rb") as f:
        for piece in iter(lambda: f.read(1 << 20), b""):
            h.update(piece)
    sha = time.perf_counter() - t0
    t0 = time.perf_counter()
    info = dcrfs.delta_info(delta)                           # first read
    first = time.perf_counter() - t0
    d = dcrfs.read_delta(delta)
    nel = sum(len(i) for i, _ in d.values())
    total = sum(t.numel() for t in want.values())
    size_full, size_delta = os.path.getsize(full), os.path.getsize(delta)
    print("file %s: %.1f MiB, %d tensors; delta %.1f MiB: %d of %d elements changed (%.2f %%)"
          ", %.2f B per changed element" % (fname, size_full / 2 ** 20, len(want),
                                            size_delta / 2 ** 20, nel, total, 100.0 * nel / total,
                                            size_delta / max(nel, 1)), flush=True)
    print("view build (first lookup) %.3f s, %.2fx one SHA-256 pass of vN's file (%.3f s, "
          "hashlib, from the mount); first delta_info %.3f s"
          % (build, build / sha, sha, first), flush=True)
    del d
    work = {k: v.clone() for k, v in prev.items()}
    got = dcrfs.apply_delta(work, delta, from_version=n - 1)
    for k in got["removed"]:
        del work[k]
    for k in got["added"] + got["reshaped"]:
        work[k] = want[k]
    if not same(work, want):
        sys.exit("bench_apply_delta: apply_delta of %s to v%d is not v%d" % (delta, n - 1, n))
    ratios = []
    for r in range(-1, runs):        # run 0: a warm-up, not reported
        t0 = time.perf_counter()
        fresh = load(full)
        a = time.perf_counter() - t0
        del fresh
        for k, v in prev.items():    # the engine holds v(N-1) again (not timed)
            work[k].copy_(v)
        t0 = time.perf_counter()
        dcrfs.apply_delta(work, delta, from_version=n - 1)
        b = time.perf_counter() - t0
        if r < 0:
            continue
        ratios.append(a / b)
        print("run %d: (a) full reload %.3f s  (b) apply_delta %.3f s  ratio %.1fx"
              % (r + 1, a, b, a / b), flush=True)
    print("ratio (a)/(b): min %.1fx, median %.1fx (target >= 5x)"
          % (min(ratios), sorted(ratios)[len(ratios) // 2]), flush=True)
    del info


if __name__ == "__main__":
    main()
