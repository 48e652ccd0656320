#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""rollout_worker.py - a rollout engine's weight loop on a dcrfs mount.

A trainer commits a small torch model, sharded into 4 safetensors files,
every INTERVAL seconds. A leader waits for each new version
(dcrfs.wait: it sleeps in poll(2) on MNT/.dcrfs/latest until latest
moves), resolves it once (dcrfs.resolve: MNT/vN) and sends N to two
worker processes (the tensor-parallel ranks), which load all 4 shards of
that one version from MNT/vN/ (dcrfs.resolve(mnt, version=N)), never
from MNT/latest/, which is looked up again at every open. Each worker
then checks what it holds: every shard of the same training step (no
mixed load) and every tensor bit for bit the trainer's tensors of that
step (recomputed here: the trainer's step is a pure function of its
number).

Run it against a mounted store (the store may be empty; it is created):

  dcrfs /srv/dcr /mnt/dcr -o poll=0.1,cache_dir=/var/cache/dcrfs
  /usr/bin/python3 examples/rollout_worker.py --store /srv/dcr --mnt /mnt/dcr

It prints one line per version loaded and a summary; exit status 0 when
every load was of one version and every tensor the committed one, 1
otherwise, 2 on a usage error. Needs torch (Debian's python3-torch) and
the dcrfs module (PYTHONPATH=python DCRFS_LIBDCR=build/.libs/libdcr.so
from a build tree).
"""
import argparse
import json
import multiprocessing as mp
import os
import struct
import sys
import time

import torch

import dcrfs

SHARDS = 4
DIMS = (128, 256, 256, 256, 128)   # 4 Linear layers: one shard each
SEED = 1234


def shard_name(i):
    return "model-%05d-of-%05d.safetensors" % (i + 1, SHARDS)


def weights(step):
    """The trainer's tensors at step: {shard index: {name: tensor}}. A pure
    function of step (base + step * direction, each from a fixed seed), so
    a worker can recompute what a version must hold."""
    g = torch.Generator().manual_seed(SEED)
    out = {}
    for i in range(SHARDS):
        shard = {}
        for part, shape in (("weight", (DIMS[i + 1], DIMS[i])), ("bias", (DIMS[i + 1],))):
            base = torch.randn(shape, generator=g)
            direction = torch.randn(shape, generator=g)
            t = base + step * 1e-3 * direction
            shard["layers.%d.%s" % (i, part)] = t.to(torch.bfloat16) if part == "weight" else t
        out[i] = shard
    return out


_DT = {"BF16": (torch.bfloat16, 2), "F32": (torch.float32, 4)}


def load_shard(path):
    """(tensors, __metadata__) of one safetensors file, read once."""
    with open(path, "rb") as f:
        raw = bytearray(f.read())
    n = struct.unpack_from("<Q", raw)[0]
    hdr = json.loads(raw[8:8 + n])
    meta = hdr.pop("__metadata__", {})
    out = {}
    for k, e in hdr.items():
        (b, end), (dt, width) = e["data_offsets"], _DT[e["dtype"]]
        out[k] = torch.frombuffer(raw, dtype=dt, offset=8 + n + b,
                                  count=(end - b) // width).reshape(e["shape"]).clone()
    return out, meta


def bits(t):
    return t.contiguous().view(torch.uint8 if t.element_size() == 1 else
                               {2: torch.int16, 4: torch.int32}[t.element_size()])


# ------------------------------------------------------------ trainer

def trainer(store, versions, interval, cache_dir, out):
    """Commit steps 1..versions, one every interval seconds."""
    for step in range(1, versions + 1):
        t0 = time.monotonic()
        w = weights(step)
        with dcrfs.Commit(store, init=True, cache_dir=cache_dir, log_level=0) as c:
            for i in range(SHARDS):
                c.add_safetensors(shard_name(i), w[i], metadata={"step": str(step)})
            v = c.publish()
        out.put(("committed", step, v))
        time.sleep(max(0.0, interval - (time.monotonic() - t0)))
    out.put(("trainer done", versions, 0))


# ------------------------------------------------------------ workers

def worker(rank, mnt, inbox, out):
    """Load every version the leader sends, all shards from MNT/vN/, and
    check it: one step in every shard (else a mixed load), every tensor
    the trainer's of that step (else a wrong tensor)."""
    while True:
        v = inbox.get()
        if v is None:
            return
        vdir = dcrfs.resolve(mnt, version=v)
        held, steps = {}, set()
        for i in range(SHARDS):
            t, meta = load_shard(os.path.join(vdir, shard_name(i)))
            held.update(t)
            steps.add(int(meta.get("step", "-1")))
        mixed = len(steps) != 1
        wrong = 0
        if not mixed:
            want = {}
            for shard in weights(steps.pop()).values():
                want.update(shard)
            wrong = sum(1 for k in want if k not in held or not torch.equal(bits(held[k]),
                                                                              bits(want[k])))
            wrong += len(set(held) - set(want))
        out.put(("loaded", rank, v, sorted(steps) if mixed else None, mixed, wrong))


# ------------------------------------------------------------- leader

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True, help="the store the mount shows (URL or directory)")
    ap.add_argument("--mnt", required=True, help="where the store is mounted (dcrfs -o poll=0.1)")
    ap.add_argument("--versions", type=int, default=100, help="commits to make (default 100)")
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between commits")
    ap.add_argument("--cache-dir", default=None, help="the trainer's commit cache")
    ap.add_argument("--timeout", type=float, default=60,
                    help="most seconds to wait for a version (the first: twice that)")
    a = ap.parse_args()

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    inboxes = [ctx.Queue() for _ in range(2)]
    procs = [ctx.Process(target=worker, args=(r, a.mnt, inboxes[r], out), daemon=True)
             for r in range(2)]
    for p in procs:
        p.start()
    have = dcrfs.latest(a.mnt)   # what is there before the trainer starts
    first = have
    tr = ctx.Process(target=trainer, args=(a.store, a.versions, a.interval, a.cache_dir, out),
                     daemon=True)
    tr.start()

    stats = {"loads": 0, "mixed": 0, "wrong": 0, "versions": 0}
    committed = {}                       # version -> step
    pending = 0
    status = 0

    def drain(block):
        nonlocal pending, status
        while True:
            try:
                msg = out.get(block, a.timeout) if block else out.get_nowait()
            except Exception:
                return
            block = False
            if msg[0] == "committed":
                committed[msg[2]] = msg[1]
            elif msg[0] == "loaded":
                _, rank, v, steps, mixed, wrong = msg
                pending -= 1
                stats["loads"] += 1
                stats["mixed"] += mixed
                stats["wrong"] += wrong
                if mixed or wrong:
                    status = 1
                    print("rank %d: v%d: %s" % (rank, v, "MIXED steps %s" % steps if mixed
                                                else "%d WRONG tensors" % wrong), flush=True)

    last = first + a.versions
    while have < last:
        try:
            # the first version comes after the trainer started (imports)
            v = dcrfs.wait(a.mnt, newer_than=have,
                           timeout=a.timeout * (2 if have == first else 1))
        except TimeoutError as e:
            print("rollout_worker: %s" % e, file=sys.stderr)
            status = 1
            break
        # the leader resolves once; every rank loads that version
        v = int(os.path.basename(dcrfs.resolve(a.mnt, version=v))[1:])
        for q in inboxes:
            q.put(v)
        pending += len(inboxes)
        stats["versions"] += 1
        while pending:
            drain(True)
        have = v
        print("v%d loaded by %d ranks" % (v, len(inboxes)), flush=True)
    for q in inboxes:
        q.put(None)
    for p in procs:
        p.join(a.timeout)
    tr.join(a.timeout)
    drain(False)
    # every version loaded was loaded by both ranks, and is one the
    # trainer committed
    if not stats["versions"] or stats["loads"] != 2 * stats["versions"]:
        status = 1
    print("rollout_worker: %d versions, %d loads by 2 ranks of %d shards each, "
          "%d mixed loads, %d wrong tensors" % (stats["versions"], stats["loads"], SHARDS,
                                               stats["mixed"], stats["wrong"]), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
