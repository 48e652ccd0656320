# SPDX-License-Identifier: MIT
"""bench_apply_delta.py - what a rollout engine pays to move its weights
from v(N-1) to vN, on a mount. Run by scripts/bench-apply (see there);
not part of make check.

  bench_apply_delta.py apply [--device D] [--json F] [--delta-dir DIR] MNT N RUNS FILE...
  bench_apply_delta.py refit [--device D] [--json F] --commit CMD --step CMD MNT HAVE BASE COUNT

apply: (a) re-read vN's files from the mount into fresh tensors on the
device against (b) dcrfs.apply_delta of MNT/delta/vN (every FILE's view,
one call) to tensors holding v(N-1) there. Prints one line per run
(after one untimed warm-up run of each) and a summary with ratios
against baselines of the same run: one memcpy and one SHA-256 pass of
the view's bytes, in this process. Checks once that (b) gives vN bit for
bit. Also reports the view's build (the first lookup of each file).

refit: the engine holds v(HAVE) on the device; COUNT times, the step
command (--step CMD, split as a shell would, then --in PREV --out NEXT
--seed K; PREV first the checkpoint directory BASE, the one committed
as v(HAVE)) makes the next checkpoint (not timed), the commit command
(--commit CMD, then NEXT) publishes it, and from the moment that
returns ("commit end") the engine waits for latest to move
(dcrfs.wait) and then brings its tensors to the new version, the view
path (apply_delta of MNT/delta/vN) and the full-reload path (every file
of MNT/vN loaded onto the device: safetensors.torch.load_file where
safetensors is installed, else read, torch.frombuffer, .to(device))
alternating, first the view. Prints one line per step and a summary
with the ratio view / full and against one SHA-256 pass of vN's files;
checks at the end that the tensors hold the last version bit for bit.
"""
import argparse
import hashlib
import json
import os
import shlex
import shutil
import struct
import subprocess
import sys
import time

import numpy as np
import torch

import dcrfs
from dcrfs import _delta

TORCH_DT = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32,
            "F64": torch.float64, "I64": torch.int64, "I32": torch.int32,
            "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def load(path, device):
    """One file read whole, a fresh tensor per tensor, on device."""
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
        t = torch.frombuffer(raw, dtype=dt, count=cnt, offset=8 + n + b).reshape(e["shape"])
        out[k] = t.clone() if device.type == "cpu" else t.to(device)
    return out


def load_st(path, device):
    """The full-reload path as an engine does it: safetensors' own loader
    where installed."""
    try:
        from safetensors.torch import load_file
    except ImportError:
        return load(path, device)
    return load_file(path, device=str(device))


def load_all(vdir, files, device, loader=load):
    out = {}
    for f in files:
        out.update(loader(os.path.join(vdir, f), device))
    sync(device)
    return out


def same(a, b):
    def bits(t):
        return t.detach().to("cpu").contiguous().view(-1).view(torch.uint8) if t.numel() \
            else torch.empty(0, dtype=torch.uint8)
    return a.keys() == b.keys() and all(torch.equal(bits(a[k]), bits(b[k])) for k in a)


def sha_pass(paths):
    """Seconds for one SHA-256 pass (hashlib) over the files' bytes."""
    t0 = time.perf_counter()
    for p in paths:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for piece in iter(lambda: f.read(1 << 20), b""):
                h.update(piece)
    return time.perf_counter() - t0


def best(fn, n=3):
    b = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        b = min(b, time.perf_counter() - t0)
    return b


def baselines(paths):
    """(one memcpy (min of 3), one SHA-256 pass) of the files' bytes, in
    memory, in seconds."""
    raw = b"".join(open(p, "rb").read() for p in paths)
    src = np.frombuffer(raw, dtype=np.uint8)
    dst = np.empty_like(src)
    dst[:] = 0
    return best(lambda: np.copyto(dst, src)), best(lambda: hashlib.sha256(raw).digest(), 1)


def apply_bench(a):
    dev = torch.device(a.device)
    mnt, n, runs, files = a.mnt, a.n, a.runs, a.files
    ddir = a.delta_dir or os.path.join(mnt, "delta", "v%d" % n)
    vdir = os.path.join(mnt, "v%d" % n)
    prev = load_all(os.path.join(mnt, "v%d" % (n - 1)), files, torch.device("cpu"))
    want = load_all(vdir, files, torch.device("cpu"))        # warms the cache too
    deltas = [os.path.join(ddir, f) for f in files]
    t0 = time.perf_counter()
    for p in deltas:
        os.stat(p)                                           # the lookup builds the view
    build = time.perf_counter() - t0
    sha_full = sha_pass([os.path.join(vdir, f) for f in files])
    memcpy, sha_view = baselines(deltas)
    d = {}
    for p in deltas:
        d.update(dcrfs.read_delta(p))
    nel = sum(len(i) for i, _ in d.values())
    total = sum(t.numel() for t in want.values())
    size_full = sum(os.path.getsize(os.path.join(vdir, f)) for f in files)
    size_delta = sum(os.path.getsize(p) for p in deltas)
    del d
    print("%d file(s), %.1f MiB, %d tensors; view %.1f MiB: %d of %d elements changed "
          "(%.2f %%), %.2f B per changed element; device %s"
          % (len(files), size_full / 2 ** 20, len(want), size_delta / 2 ** 20, nel, total,
             100.0 * nel / total, size_delta / max(nel, 1), dev), flush=True)
    print("view build (first lookup) %.3f s, %.2fx one SHA-256 pass of vN's files (%.3f s, "
          "hashlib, from the mount)" % (build, build / sha_full, sha_full), flush=True)
    work = {k: v.to(dev) for k, v in prev.items()}
    src_arg = ddir if a.delta_dir is None and len(files) > 1 else \
        (deltas if len(files) > 1 else deltas[0])
    got = dcrfs.apply_delta(work, src_arg, from_version=n - 1)
    infos = got.values() if len(files) > 1 else [got]
    for info in infos:
        for k in info["removed"]:
            del work[k]
        for k in info["added"] + info["reshaped"]:
            work[k] = want[k].to(dev)
    if not same(work, want):
        sys.exit("bench_apply_delta: apply_delta of %s to v%d is not v%d" % (ddir, n - 1, n))
    rows = []
    for r in range(-1, runs):        # run 0: a warm-up, not reported
        t0 = time.perf_counter()
        fresh = load_all(vdir, files, dev)
        ta = time.perf_counter() - t0
        del fresh
        for k, v in prev.items():    # the engine holds v(N-1) again (not timed)
            work[k].copy_(v)
        sync(dev)
        t0 = time.perf_counter()
        dcrfs.apply_delta(work, src_arg, from_version=n - 1)
        sync(dev)
        tb = time.perf_counter() - t0
        if r < 0:
            continue
        rows.append((ta, tb))
        print("run %d: (a) full reload %.3f s  (b) apply_delta %.3f s  ratio %.1fx  "
              "(b) = %.1fx memcpy, %.2fx SHA-256 of the view's bytes"
              % (r + 1, ta, tb, ta / tb, tb / memcpy, tb / sha_view), flush=True)
    med = sorted(rows, key=lambda x: x[1])[len(rows) // 2]
    ratios = sorted(x[0] / x[1] for x in rows)
    rc = read_and_check(deltas, dev)
    print("of which reading the view (into %s memory, on %d threads) and checking it %.3f s "
          "(min of 3) = %.1fx one memcpy of its bytes; the patch itself ~%.3f s"
          % ("pinned" if dev.type == "cuda" else "host", _delta._workers(), rc, rc / memcpy,
             max(med[1] - rc, 0.0)), flush=True)
    print("apply_delta median %.3f s: %.1fx one memcpy (%.4f s), %.2fx one SHA-256 pass "
          "(%.3f s) of the view's %.1f MiB; (a)/(b) min %.1fx, median %.1fx"
          % (med[1], med[1] / memcpy, memcpy, med[1] / sha_view, sha_view,
             size_delta / 2 ** 20, ratios[0], ratios[len(ratios) // 2]), flush=True)
    return {"device": str(dev), "files": len(files), "file_bytes": size_full,
            "view_bytes": size_delta, "changed_elements": nel, "elements": total,
            "view_build_s": build, "sha256_full_s": sha_full, "memcpy_view_s": memcpy,
            "sha256_view_s": sha_view, "reload_s": [x[0] for x in rows],
            "apply_s": [x[1] for x in rows], "apply_over_memcpy": med[1] / memcpy,
            "apply_over_sha256": med[1] / sha_view, "reload_over_apply": ratios,
            "read_check_s": rc}


def read_and_check(deltas, dev):
    """apply_delta's first part alone, as it runs it (dcrfs._delta's
    internals: a bench may look inside): the view's files read and
    checked, min of 3."""
    from concurrent.futures import ThreadPoolExecutor
    pool = ThreadPoolExecutor(_delta._workers()) if _delta._workers() > 1 else None

    def once():
        for p in deltas:
            with _delta._Delta(p) as d:
                d.load(dev.type == "cuda", pool)
    return best(once)


def refit_bench(a):
    dev = torch.device(a.device)
    mnt, have = a.mnt, a.have
    vdir = dcrfs.resolve(mnt, version=have)
    files = sorted(os.path.relpath(os.path.join(r, f), vdir) for r, _, fs in os.walk(vdir)
                   for f in fs if f.endswith(".safetensors"))
    tensors = load_all(vdir, files, dev)
    try:
        from safetensors.torch import load_file
        how = load_file.__module__ + ".load_file"
    except ImportError:
        how = "read + torch.frombuffer + .to(device) (no safetensors here)"
    rows = []
    prev = a.base
    for i in range(a.count):
        path = "view" if i % 2 == 0 else "full"
        step = "%s.r%d" % (a.base.rstrip("/"), i)
        subprocess.run(shlex.split(a.step) + ["--in", prev, "--out", step, "--seed",
                                              str(1000 + i)], check=True)
        subprocess.run(shlex.split(a.commit) + [step], check=True, stdout=subprocess.DEVNULL)
        t0 = time.perf_counter()                       # commit end
        v = dcrfs.wait(mnt, newer_than=have, timeout=600)
        t_latest = time.perf_counter() - t0
        lookup = None
        if path == "view":
            ddir = os.path.join(mnt, "delta", "v%d" % v)
            t1 = time.perf_counter()
            for f in files:
                os.stat(os.path.join(ddir, f))
            lookup = time.perf_counter() - t1
            got = dcrfs.apply_delta(tensors, ddir if len(files) > 1
                                    else os.path.join(ddir, files[0]), from_version=have)
            infos = got.values() if len(files) > 1 else [got]
            if any(x["added"] or x["removed"] or x["reshaped"] for x in infos):
                sys.exit("bench_apply_delta: the step changed the tensors' set; "
                         "this bench expects dcrfs-synth steps")
            sync(dev)
        else:
            vd = dcrfs.resolve(mnt, version=v)
            tensors = load_all(vd, files, dev, load_st)
        t_end = time.perf_counter() - t0
        have = v
        # the commit of a step reads its parent's directory: dropped after
        shutil.rmtree(prev)
        prev = step
        rows.append({"path": path, "version": v, "latest_s": t_latest, "tensors_s": t_end,
                     "lookup_s": lookup})
        print("v%d %s: commit end -> latest moved %.3f s -> tensors hold v%d %.3f s%s"
              % (v, "view  " if path == "view" else "reload", t_latest, v, t_end,
                 "" if lookup is None else
                 " (view lookup %.3f s: %s)" % (lookup, "the view was ready" if lookup < 0.05
                                                else "built at the lookup")), flush=True)
    shutil.rmtree(prev)
    vd = dcrfs.resolve(mnt, version=have)
    if not same(tensors, load_all(vd, files, torch.device("cpu"))):
        sys.exit("bench_apply_delta: the tensors do not hold v%d" % have)
    sha = sha_pass([os.path.join(vd, f) for f in files])
    med = {}
    for p in ("view", "full"):
        xs = sorted(r["tensors_s"] for r in rows if r["path"] == p)
        med[p] = xs[len(xs) // 2] if xs else None
    line = "commit end -> %s tensors hold vN, median: view %.3f s, full reload %.3f s" \
        % (dev, med["view"] or float("nan"), med["full"] or float("nan"))
    if med["view"] and med["full"]:
        line += " (view/full %.2f); one SHA-256 pass of vN's files %.3f s: view %.2fx, " \
            "full %.2fx" % (med["view"] / med["full"], sha, med["view"] / sha,
                            med["full"] / sha)
    print(line + "; full reload by %s; tensors hold v%d bit for bit" % (how, have), flush=True)
    return {"device": str(dev), "files": len(files), "rows": rows, "view_s": med["view"],
            "full_s": med["full"], "sha256_full_s": sha, "full_loader": how}


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("apply")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json")
    p.add_argument("--delta-dir")
    p.add_argument("mnt")
    p.add_argument("n", type=int)
    p.add_argument("runs", type=int)
    p.add_argument("files", nargs="+")
    q = sub.add_parser("refit")
    q.add_argument("--device", default="cpu")
    q.add_argument("--json")
    q.add_argument("--commit", required=True)
    q.add_argument("--step", required=True)
    q.add_argument("mnt")
    q.add_argument("have", type=int)
    q.add_argument("base")
    q.add_argument("count", type=int)
    a = ap.parse_args()
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("bench_apply_delta: --device %s, but torch %s has no CUDA device"
              % (a.device, torch.__version__), file=sys.stderr)
        sys.exit(77)
    out = apply_bench(a) if a.mode == "apply" else refit_bench(a)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
