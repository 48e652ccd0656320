# SPDX-License-Identifier: MIT
"""apply_profile.py - apply_delta of one view onto CPU tensors (numpy and
torch) against baselines of the same run, min of 5 each: one memcpy and
one SHA-256 pass of the view's bytes, one memcpy of the model's bytes
(a 3 % uniform step touches nearly every 64-byte line of the model, so
the patch writes, at best, at the speed of a copy of the model). Not
part of make check; runs with whichever dcrfs is first on PYTHONPATH,
so the same command with main's python/ compares the two.

  apply_profile.py DELTA FILE [--cprofile]

DELTA: a delta file (e.g. a copy of MNT/delta/v2/model.safetensors);
FILE: the from version's safetensors file (e.g. MNT/v1/model.safetensors).
--cprofile: also print cProfile's top functions of one torch apply.
"""
import cProfile
import hashlib
import json
import pstats
import struct
import sys
import time

import numpy as np
import torch

import dcrfs
from dcrfs import _delta

NP = {"BF16": "<u2", "F16": "<f2", "F32": "<f4", "F64": "<f8", "I64": "<i8", "I32": "<i4",
      "I16": "<i2", "I8": "|i1", "U8": "|u1", "BOOL": "|b1"}


def best(f, k=5):
    b = float("inf")
    for _ in range(k):
        t = time.perf_counter()
        f()
        b = min(b, time.perf_counter() - t)
    return b


def main():
    delta, model = sys.argv[1], sys.argv[2]
    raw = open(model, "rb").read()
    n = struct.unpack_from("<Q", raw)[0]
    hdr = json.loads(raw[8:8 + n])
    hdr.pop("__metadata__", None)

    def arrays():
        out = {}
        for k, e in hdr.items():
            dt = np.dtype(NP[e["dtype"]])
            b, end = e["data_offsets"]
            out[k] = np.frombuffer(raw, dtype=dt, offset=8 + n + b,
                                   count=(end - b) // dt.itemsize).copy().reshape(e["shape"])
        return out
    tnp = arrays()
    tth = {k: torch.from_numpy(v.view("<i2")).view(torch.bfloat16)
           if hdr[k]["dtype"] == "BF16" else torch.from_numpy(v) for k, v in arrays().items()}
    view = open(delta, "rb").read()
    vs = np.frombuffer(view, np.uint8)
    vd = np.empty_like(vs)
    vd[:] = 0
    big = np.frombuffer(raw, np.uint8)
    bd = np.empty_like(big)
    bd[:] = 0
    r = {"memcpy_view": best(lambda: np.copyto(vd, vs)),
         "sha256_view": best(lambda: hashlib.sha256(view).digest(), 2),
         "memcpy_model": best(lambda: np.copyto(bd, big), 3)}
    if hasattr(_delta._Delta, "load"):
        r["read_check"] = best(lambda: _delta._Delta(delta).load(False, None))
    r["apply_numpy"] = best(lambda: dcrfs.apply_delta(tnp, delta, check=False))
    r["apply_torch"] = best(lambda: dcrfs.apply_delta(tth, delta, check=False))
    print("view %.1f MiB, model %.1f MiB, patched on %d thread(s): " % (len(view) / 2 ** 20, len(raw) / 2 ** 20,
                                                        getattr(_delta, "_workers", lambda: 1)())
          + ", ".join("%s %.4f s" % kv for kv in r.items()))
    for k in ("apply_numpy", "apply_torch"):
        print("%s = %.1fx one memcpy of the view, %.2fx one SHA-256 pass of the view, "
              "%.2fx one memcpy of the model" % (k, r[k] / r["memcpy_view"],
                                                 r[k] / r["sha256_view"], r[k] / r["memcpy_model"]))
    if "--cprofile" in sys.argv:
        pr = cProfile.Profile()
        pr.enable()
        dcrfs.apply_delta(tth, delta, check=False)
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(10)


if __name__ == "__main__":
    main()
