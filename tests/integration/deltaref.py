# SPDX-License-Identifier: MIT
"""deltaref - a reference generator of dcrfs delta files, for the tests
only (tests/integration/python_delta.sh, tests/bench/bench_apply_delta.py).

Written from the format's text (dcrfs-delta version 1, as the docstring
of python/dcrfs/_delta.py states it), sharing no code with the C view
(fs/delta.c, read/dview.c) or python/dcrfs: from two full safetensors
files it writes the delta file byte for byte. numpy `!=` on the unsigned-integer views of each tensor,
np.flatnonzero for the indices. Also an independent file digest (the
manifest's, for format >= 3: SHA-256 of the list of the chunks' SHA-256s)
and a writer of arbitrary safetensors headers for hostile files.
"""
import hashlib
import json
import struct

import numpy as np

# The safetensors reference's Dtype enum in declaration order, with widths;
# data order is by this rank descending, then by name bytewise.
ORDER = [("BOOL", 1), ("U8", 1), ("I8", 1), ("F8_E5M2", 1), ("F8_E4M3", 1),
         ("I16", 2), ("U16", 2), ("F16", 2), ("BF16", 2), ("I32", 4), ("U32", 4),
         ("F32", 4), ("F64", 8), ("I64", 8), ("U64", 8)]
RANK = {n: i for i, (n, _) in enumerate(ORDER)}
WIDTH = dict(ORDER)
UINT = {1: np.dtype("u1"), 2: np.dtype("<u2"), 4: np.dtype("<u4"), 8: np.dtype("<u8")}


def parse(raw):
    """(header without __metadata__, metadata or None, data bytes) of a
    safetensors file's bytes; None if it is not one."""
    if len(raw) < 8:
        return None
    n = struct.unpack("<Q", raw[:8])[0]
    if n > 100 << 20 or 8 + n > len(raw):
        return None
    try:
        hdr = json.loads(bytes(raw[8:8 + n]).decode("utf-8"))
    except ValueError:
        return None
    if not isinstance(hdr, dict):
        return None
    meta = hdr.pop("__metadata__", None)
    data = raw[8 + n:]
    for k, e in hdr.items():
        try:
            b, end = e["data_offsets"]
            count = int(np.prod(e["shape"], dtype=np.int64))
            if e["dtype"] not in WIDTH or end > len(data) or end - b != count * WIDTH[e["dtype"]]:
                return None
        except (KeyError, TypeError, ValueError):
            return None
    return hdr, meta, data


def layout(tensors, meta):
    """Bytes of a safetensors file: tensors is a list of (name, dtype,
    shape, bytes); meta a dict of str (None: no __metadata__). As
    core/stwriter.c lays it out with flags 0."""
    items = sorted(tensors, key=lambda t: (-RANK[t[1]], t[0].encode("utf-8")))
    hdr, off = {}, 0
    if meta is not None:
        hdr["__metadata__"] = {k: meta[k] for k in sorted(meta, key=lambda s: s.encode())}
    for name, dt, shape, b in items:
        hdr[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
    js = json.dumps(hdr, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    js += b" " * (-len(js) % 8)
    return struct.pack("<Q", len(js)) + js + b"".join(t[3] for t in items)


def names_json(names):
    return json.dumps(sorted(names, key=lambda s: s.encode("utf-8")),
                      separators=(",", ":"), ensure_ascii=False)


def make_delta(a_raw, b_raw, from_version, to_version, from_digest, to_digest,
               digest_kind="sha256-of-chunks"):
    """The delta file (bytes) of one path from version A (a_raw, its bytes,
    or None if the path did not exist there) to version B (b_raw); None if
    B's file is not safetensors (the view leaves it out)."""
    pb = parse(b_raw)
    if pb is None:
        return None
    hb, _, db = pb
    pa = parse(a_raw) if a_raw is not None else None
    ha, da = (pa[0], pa[2]) if pa else ({}, b"")
    if a_raw is None:
        from_digest = ""
    added = [k for k in hb if k not in ha]
    removed = [k for k in ha if k not in hb]
    reshaped, out = [], []
    for k, e in hb.items():
        if k not in ha:
            continue
        f = ha[k]
        if f["dtype"] != e["dtype"] or list(f["shape"]) != list(e["shape"]):
            reshaped.append(k)
            continue
        u = UINT[WIDTH[e["dtype"]]]
        n = f["data_offsets"][1] - f["data_offsets"][0]
        x = np.frombuffer(da, dtype=u, count=n // WIDTH[e["dtype"]], offset=f["data_offsets"][0])
        y = np.frombuffer(db, dtype=u, count=x.size, offset=e["data_offsets"][0])
        nz = np.flatnonzero(x != y)
        if nz.size == 0:
            continue
        idt, ity = ("I32", "<i4") if y.size < 2 ** 31 else ("I64", "<i8")
        out.append((k + ".idx", idt, [nz.size], nz.astype(ity).tobytes()))
        out.append((k + ".val", e["dtype"], [nz.size], y[nz].tobytes()))
    meta = {"format": "dcrfs-delta", "format_version": "1",
            "from_version": str(from_version), "to_version": str(to_version),
            "from_digest": from_digest, "to_digest": to_digest,
            "digest_kind": digest_kind, "added": names_json(added),
            "removed": names_json(removed), "reshaped": names_json(reshaped)}
    return layout(out, meta)


def file_digest(raw, chunk_size):
    """A file's digest as manifests of format >= 3 record it: SHA-256 of
    the concatenated SHA-256s of its chunks of chunk_size bytes."""
    h = hashlib.sha256()
    for i in range(0, len(raw), chunk_size):
        h.update(hashlib.sha256(raw[i:i + chunk_size]).digest())
    return h.hexdigest()


def raw_header(header, data):
    """A safetensors file from a header given as a dict (written as is,
    any content) and data bytes: for hostile files."""
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    return struct.pack("<Q", len(js)) + js + data
