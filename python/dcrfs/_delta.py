# SPDX-License-Identifier: MIT
"""dcrfs._delta - read and apply the sparse delta files of a mount's
``delta/`` view (dcrfs(8); format "dcrfs-delta" version 1).

The format, version 1 (what fs/delta.c serves and tests/integration/
deltaref.py writes independently). A delta file describes the change of
one safetensors file from version A ("from") to version B ("to"). It is
a plain safetensors file laid out as core/stwriter.c lays one out: an
8-byte little-endian header length, compact JSON ("__metadata__" first,
its keys sorted bytewise; then the tensors in data order) padded with
spaces to a multiple of 8, then the tensors' bytes back to back, by
dtype (U64, I64, F64, F32, U32, I32, BF16, F16, U16, I16, F8_E4M3,
F8_E5M2, I8, U8, BOOL) then name, bytewise. For every tensor T in both
files with the same dtype and shape whose bits differ (-0.0 against
+0.0 and NaN payloads count):

- ``T.idx``: I32 if T has fewer than 2**31 elements, else I64; shape
  [n]; the flat (row-major) indices of the elements whose bits differ,
  increasing;
- ``T.val``: T's dtype, shape [n]; B's elements at those indices.

Unchanged tensors are left out. ``__metadata__`` (strings): format
"dcrfs-delta", format_version "1", from_version and to_version
(decimal), from_digest and to_digest (the files' digests as the
manifests record them, lowercase hex; from_digest "" when the path did
not exist in A), digest_kind, and added, removed, reshaped: compact
JSON arrays of tensor names, sorted bytewise (in B only, in A only, in
both with another shape or dtype; the engine reloads or drops them).
If A's file did not exist or is not safetensors, B's tensors are all
added; a B file that is not safetensors has no delta.

Everything here is pure Python and numpy (imported when first needed):
torch is imported only by apply_delta when it is handed torch tensors.
The header is parsed here, with strict bounds, not by a JSON-trusting
reader: a file from a damaged or hostile source raises DeltaError and
changes nothing.
"""
import errno
import json
import os
import struct

# safetensors dtype -> (width in bytes, numpy dtype of the values as
# read_delta gives them: the raw bits for the dtypes numpy lacks)
_DTYPES = {
    "BOOL": (1, "|b1"), "U8": (1, "|u1"), "I8": (1, "|i1"),
    "F8_E5M2": (1, "|u1"), "F8_E4M3": (1, "|u1"),
    "I16": (2, "<i2"), "U16": (2, "<u2"), "F16": (2, "<f2"), "BF16": (2, "<u2"),
    "I32": (4, "<i4"), "U32": (4, "<u4"), "F32": (4, "<f4"),
    "F64": (8, "<f8"), "I64": (8, "<i8"), "U64": (8, "<u8"),
}
_HDR_MAX = 100 << 20          # as core/safetensors.h DCR_SAFETENSORS_HDR_MAX
_FORMAT, _FORMAT_VERSION = "dcrfs-delta", "1"
_LIST_KEYS = ("added", "removed", "reshaped")
_REQUIRED = ("format", "format_version", "from_version", "to_version",
             "from_digest", "to_digest", "digest_kind") + _LIST_KEYS


def _error_class():
    from . import DcrError

    class DeltaError(DcrError, ValueError):
        """A delta file that is not a valid dcrfs-delta file, or that does
        not fit the tensors it is applied to (errno EBADMSG for the file,
        EINVAL for a mismatch with the caller's tensors)."""
    DeltaError.__module__ = "dcrfs"
    return DeltaError


DeltaError = _error_class()


def _bad(path, msg, code=errno.EBADMSG):
    return DeltaError(code, "%s: %s" % (os.fsdecode(path), msg))


def _no_dups(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise ValueError("key %r given twice" % (k,))
        d[k] = v
    return d


def _is_uint(x):
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


class _Delta:
    """One delta file, read once and checked: .meta (delta_info's dict),
    .tensors {name: (idx, val, dtype)} with numpy views of .buf."""

    def __init__(self, path):
        import numpy as np
        self.path = path
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                raise _bad(path, "%d bytes: too short for a safetensors file" % size)
            buf = np.empty(size, dtype=np.uint8)  # aligned: the data stays aligned
            got = f.readinto(memoryview(buf))
            if got != size:
                raise _bad(path, "read %d bytes of %d (truncated while read)" % (got, size))
        (n,) = struct.unpack("<Q", buf[:8].tobytes())
        if n > _HDR_MAX:
            raise _bad(path, "header length %d is more than the format's %d" % (n, _HDR_MAX))
        if n > size - 8:
            raise _bad(path, "header length %d runs past the end of the file (%d bytes)"
                       % (n, size))
        try:
            hdr = json.loads(buf[8:8 + n].tobytes().decode("utf-8"),
                             object_pairs_hook=_no_dups)
        except (ValueError, RecursionError) as e:  # UnicodeDecodeError too
            raise _bad(path, "header is not JSON: %s" % e) from None
        if not isinstance(hdr, dict):
            raise _bad(path, "header is not a JSON object")
        self.buf = buf
        self.meta = self._metadata(hdr.pop("__metadata__", None))
        self.tensors = self._tensors(hdr, buf[8 + n:])

    def _metadata(self, m):
        p = self.path
        if not isinstance(m, dict):
            raise _bad(p, "no __metadata__ object: not a dcrfs delta file")
        if m.get("format") != _FORMAT:
            raise _bad(p, "format %r is not %r" % (m.get("format"), _FORMAT))
        if m.get("format_version") != _FORMAT_VERSION:
            raise _bad(p, "format_version %r is not %r (this dcrfs reads version %s)"
                       % (m.get("format_version"), _FORMAT_VERSION, _FORMAT_VERSION))
        for k in _REQUIRED:
            if not isinstance(m.get(k), str):
                raise _bad(p, "__metadata__ %r is missing or not a string" % k)
        out = dict(m)
        for k in ("from_version", "to_version"):
            if not m[k].isdigit() or not m[k].isascii():
                raise _bad(p, "%s %r is not a version number" % (k, m[k]))
            out[k] = int(m[k])
        for k in ("from_digest", "to_digest"):
            if m[k] != m[k].lower() or any(c not in "0123456789abcdef" for c in m[k]):
                raise _bad(p, "%s %r is not lowercase hex" % (k, m[k]))
        for k in _LIST_KEYS:
            try:
                v = json.loads(m[k])
            except ValueError:
                v = None
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise _bad(p, "%s %r is not a JSON array of tensor names" % (k, m[k]))
            out[k] = v
        return out

    def _tensors(self, hdr, data):
        import numpy as np
        p = self.path
        spans = []
        parts = {}
        for name, e in hdr.items():
            if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
                raise _bad(p, "tensor %s: not {dtype, shape, data_offsets}" % name)
            dt, shape, offs = e["dtype"], e["shape"], e["data_offsets"]
            if dt not in _DTYPES:
                raise _bad(p, "tensor %s: unknown dtype %r" % (name, dt))
            if not isinstance(shape, list) or len(shape) != 1 or not _is_uint(shape[0]):
                raise _bad(p, "tensor %s: shape %r is not [n]" % (name, shape))
            if (not isinstance(offs, list) or len(offs) != 2 or not all(map(_is_uint, offs))
                    or offs[0] > offs[1] or offs[1] > len(data)):
                raise _bad(p, "tensor %s: data_offsets %r outside the %d data bytes"
                           % (name, offs, len(data)))
            width = _DTYPES[dt][0]
            if offs[1] - offs[0] != shape[0] * width:
                raise _bad(p, "tensor %s: %d bytes do not hold %d %s elements"
                           % (name, offs[1] - offs[0], shape[0], dt))
            base, dot, part = name.rpartition(".")
            if not dot or not base or part not in ("idx", "val"):
                raise _bad(p, "tensor %s: not a T.idx or T.val" % name)
            if part == "idx" and dt not in ("I32", "I64"):
                raise _bad(p, "tensor %s: index dtype %s is not I32 or I64" % (name, dt))
            spans.append((offs[0], offs[1], name))
            parts.setdefault(base, {})[part] = (dt, offs, shape[0])
        spans.sort()
        for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
            if b1 < e0:
                raise _bad(p, "tensors %s and %s overlap" % (n0, n1))
        out = {}
        for base, pv in parts.items():
            if set(pv) != {"idx", "val"}:
                have, miss = ("idx", "val") if "idx" in pv else ("val", "idx")
                raise _bad(p, "tensor %s.%s has no %s.%s" % (base, have, base, miss))
            (idt, ioffs, ni), (vdt, voffs, nv) = pv["idx"], pv["val"]
            if ni != nv:
                raise _bad(p, "tensor %s: %d indices but %d values" % (base, ni, nv))
            idx = data[ioffs[0]:ioffs[1]].view(_DTYPES[idt][1])
            val = data[voffs[0]:voffs[1]].view(_DTYPES[vdt][1])
            if ni:
                if idx[0] < 0:
                    raise _bad(p, "tensor %s: negative index %d" % (base, idx[0]))
                if ni > 1 and not bool(np.all(idx[1:] > idx[:-1])):
                    k = int(np.flatnonzero(idx[1:] <= idx[:-1])[0])
                    raise _bad(p, "tensor %s: indices not increasing (%d then %d at %d)"
                               % (base, idx[k], idx[k + 1], k + 1))
            out[base] = (idx, val, vdt)
        return out


def read_delta(path):
    """The changes a delta file holds: ``{name: (idx, val)}``.

    idx: numpy int32 or int64, the flat (row-major) element indices of
    tensor name whose bits changed, increasing; val: the new elements, in
    the numpy dtype of the tensor's (float16, float32, ...), and for the
    dtypes numpy lacks the raw bits (BF16 as uint16, F8_* as uint8).
    The arrays are views of one buffer the file was read into (once).
    Does not import torch. Raises DeltaError (errno EBADMSG) naming what
    is wrong if path is not a valid dcrfs-delta file, OSError if it
    cannot be read. Thread-safe (each call reads its own copy)."""
    return {k: (i, v) for k, (i, v, _) in _Delta(path).tensors.items()}


def iter_delta(path):
    """Yield ``(name, idx, val)`` for each changed tensor of the delta file
    at path, in name order: the same arrays read_delta gives, for an
    engine that feeds sparse patches to its own weight loader (vLLM's
    fused qkv_proj, tensor-parallel slices and SGLang's load_weights
    address tensors by checkpoint name). The whole file is read and
    checked before the first item is yielded; raises DeltaError likewise."""
    d = _Delta(path)
    for name in sorted(d.tensors):
        idx, val, _ = d.tensors[name]
        yield name, idx, val


def delta_info(path):
    """The ``__metadata__`` of a delta file, as a dict: format,
    format_version, from_version and to_version (int), from_digest
    ("" when the file did not exist in the from version), to_digest,
    digest_kind, and added, removed, reshaped (lists of tensor names:
    tensors the caller reloads from the to version's full file, or
    drops). Reads and checks the whole file as read_delta does; raises
    DeltaError likewise."""
    return _Delta(path).meta


def _target(t):
    """(kind, safetensors dtype or None, numel, why not patchable or None)"""
    if type(t).__module__.startswith("torch"):
        import torch
        from . import _torch_dtypes
        dt = _torch_dtypes(torch).get(t.dtype)
        why = None if t.is_contiguous() else "is not contiguous"
        return "torch", dt, t.numel(), why
    import numpy as np
    if not isinstance(t, np.ndarray):
        return None, None, 0, "is a %s, not a torch tensor or numpy array" % type(t).__name__
    from . import _NP_DTYPES
    dt = _NP_DTYPES.get(t.dtype.name, "BF16" if t.dtype.name == "bfloat16" else None)
    why = None
    if not t.flags["C_CONTIGUOUS"]:
        why = "is not C-contiguous"
    elif not t.flags["WRITEABLE"]:
        why = "is read-only"
    return "numpy", dt, t.size, why


def _patch_numpy(t, idx, val):
    """t.reshape(-1)[idx] = val, for a numpy array _target() accepted."""
    if len(idx):
        flat = t.reshape(-1)
        flat[idx] = val if val.dtype == t.dtype else val.view(t.dtype)


def _patch_torch(items):
    """Patch torch tensors in place: items is a list of (t, idx, val)
    that _target() accepted. Per device, every index goes into one int64
    host buffer and every value into one byte buffer (pinned for a CUDA
    device), each moved to the device in one copy; then each tensor is
    patched on its device from slices of those (index_put_). A refit of
    a few hundred tensors thus makes two host-to-device copies, not two
    per tensor, and no pageable-memory copy."""
    import numpy as np
    import torch
    by_dev = {}
    for t, idx, val in items:
        if len(idx):
            by_dev.setdefault(t.device, []).append((t, idx, val))
    for dev, its in by_dev.items():
        pin = dev.type == "cuda"
        n = sum(len(idx) for _, idx, _ in its)
        nbytes = sum((val.nbytes + 7) & ~7 for _, _, val in its)
        hidx = torch.empty(n, dtype=torch.int64, pin_memory=pin)
        hval = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin)
        ni, nv = hidx.numpy(), hval.numpy()
        spans, io, vo = [], 0, 0
        for t, idx, val in its:
            k, b = len(idx), val.nbytes
            ni[io:io + k] = idx
            nv[vo:vo + b] = val.reshape(-1).view(np.uint8)
            spans.append((t, io, k, vo, b))
            io, vo = io + k, vo + ((b + 7) & ~7)
        didx = hidx.to(dev, non_blocking=pin)
        dval = hval.to(dev, non_blocking=pin)
        with torch.no_grad():
            for t, io, k, vo, b in spans:
                t.view(-1).index_put_((didx[io:io + k],), dval[vo:vo + b].view(t.dtype))
        if pin:
            # the tensors hold the new version when apply_delta returns,
            # and the pinned buffers outlive the copies
            torch.cuda.current_stream(dev).synchronize()


def _delta_files(path):
    """path (a delta file, a directory of them such as MNT/delta/vN, or a
    list of files) -> [(key, file path)]: key is the file's path below
    the directory (the path as given, for a list), as from_digest dicts
    use."""
    if isinstance(path, (list, tuple)):
        return [(os.fspath(p), os.fspath(p)) for p in path]
    path = os.fspath(path)
    if not os.path.isdir(path):
        return [(os.path.basename(path), path)]
    out = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for f in sorted(files):
            full = os.path.join(root, f)
            out.append((os.path.relpath(full, path), full))
    if not out:
        raise _bad(path, "holds no delta file", errno.ENOENT)
    return out


def _digest_of(d, path, kind):
    """from_digest as given (str or bytes; "KIND:HEX" as the
    user.dcrfs.digest xattr gives it, or bare HEX) -> lowercase HEX."""
    if isinstance(d, (bytes, bytearray)):
        d = bytes(d).decode("ascii", "replace")
    d = str(d).strip().rstrip("\0")
    k, colon, h = d.rpartition(":")
    if colon and k != kind:
        raise _bad(path, "from_digest %r is a digest of another kind (%s) than "
                   "the delta's (%s)" % (d, k, kind), errno.EINVAL)
    return h.lower()


def _same_width(dt, vdt):
    """A tensor of safetensors dtype dt may take values of vdt: the same,
    or BF16 held as the raw bits in uint16/int16 (numpy has no bf16)."""
    return dt == vdt or (vdt == "BF16" and dt in ("U16", "I16"))


def apply_delta(tensors, path, from_digest=None, from_version=None, check=True):
    """Apply the delta file at path (or every delta file of a sharded
    checkpoint: a list of paths, or a directory such as MNT/delta/vN)
    in place to tensors, a dict
    ``{name: tensor}`` holding the delta's from version (torch tensors
    on any device, or numpy arrays): for each changed tensor,
    ``t.view(-1)[idx] = val``.

    The tensors must be the delta's from version, and apply_delta checks
    it: give from_digest (the digest of the file the tensors were loaded
    from, as the manifest records it: the file's ``user.dcrfs.digest``
    xattr as it is, ``sha256-of-chunks:HEX``, or bare HEX; or the
    to_digest of the previous delta applied) or from_version (the
    version they were loaded from, e.g. the last delta's to_version).
    Without either it raises DeltaError (EINVAL) unless check=False
    says the caller knows (a delta applied to the wrong version succeeds
    and leaves tensors of no version at all).

    Everything is checked first, and only then is anything changed: the
    file (as read_delta), from_digest and from_version equal to the
    file's, every changed tensor present in tensors, contiguous (and
    writeable), of the delta's dtype (BF16 values also go into uint16 or
    int16 arrays holding bf16 bits), with every index < its element
    count. Raises DeltaError naming the first problem found (errno
    EBADMSG: the file; EINVAL: the tensors, from_digest or
    from_version); then no tensor was modified.

    For several files, from_digest is a dict {key: digest} (key: the
    file's path below the directory, or the path as given in a list), or
    from_version gives the one version all of them are from; every
    file is checked, and no tensor may be changed by two files, before
    any tensor changes. A rollback span (MNT/delta/vN..vM, M < N) is
    applied the same way to tensors of vN and gives vM.

    Returns delta_info's dict (for several files: {key: dict}): the
    caller reloads the tensors in its added and reshaped lists from the
    to version's full file and drops those in removed (apply_delta
    leaves them alone). Each file is read once. Torch tensors are
    patched on their device: per device, all indices and all values go
    to it in two copies (from pinned memory for CUDA), then each tensor
    is patched there (index_put_); a CUDA patch is complete when
    apply_delta returns. Not thread-safe for the same tensors."""
    files = _delta_files(path)
    many = isinstance(path, (list, tuple)) or os.path.isdir(os.fspath(path))
    if check and from_digest is None and from_version is None:
        raise _bad(files[0][1], "apply_delta needs from_digest= (the user.dcrfs.digest "
                   "xattr of the file the tensors were loaded from) or "
                   "from_version= (the version they were loaded from), so that "
                   "it never patches tensors of another version; check=False "
                   "applies it unchecked", errno.EINVAL)
    if many and from_digest is not None and not isinstance(from_digest, dict):
        raise _bad(files[0][1], "from_digest for several delta files is a dict "
                   "{path below the directory: digest}; or give from_version=",
                   errno.EINVAL)
    plan, metas, owner = [], {}, {}
    for key, fp in files:
        d = _Delta(fp)
        meta = d.meta
        fd = from_digest.get(key) if isinstance(from_digest, dict) else from_digest
        if check and isinstance(from_digest, dict) and fd is None and from_version is None:
            raise _bad(fp, "from_digest has no entry for %s" % key, errno.EINVAL)
        if check and fd is not None and \
                _digest_of(fd, fp, meta["digest_kind"]) != meta["from_digest"]:
            raise _bad(fp, "from_digest %s is not the delta's, %s: the tensors given "
                       "are not of its from version, v%d"
                       % (fd, meta["from_digest"] or '"" (the file is new)',
                          meta["from_version"]), errno.EINVAL)
        if check and from_version is not None and int(from_version) != meta["from_version"]:
            raise _bad(fp, "the delta is from v%d to v%d, but the tensors given are of v%d"
                       % (meta["from_version"], meta["to_version"], int(from_version)),
                       errno.EINVAL)
        for name, (idx, val, vdt) in sorted(d.tensors.items()):
            if name in owner:
                raise _bad(fp, "tensor %s is also changed by %s" % (name, owner[name]),
                           errno.EINVAL)
            owner[name] = key
            if name not in tensors:
                raise _bad(fp, "tensor %s is not among the tensors given" % name,
                           errno.EINVAL)
            t = tensors[name]
            kind, dt, numel, why = _target(t)
            if why:
                raise _bad(fp, "tensor %s %s" % (name, why), errno.EINVAL)
            if not _same_width(dt, vdt):
                raise _bad(fp, "tensor %s is %s, the delta's values are %s"
                           % (name, dt or getattr(t, "dtype", "?"), vdt), errno.EINVAL)
            if len(idx) and int(idx[-1]) >= numel:
                raise _bad(fp, "tensor %s: index %d out of range (%d elements)"
                           % (name, idx[-1], numel), errno.EINVAL)
            plan.append((kind, t, idx, val))
        metas[key] = meta
    for kind, t, idx, val in plan:
        if kind == "numpy":
            _patch_numpy(t, idx, val)
    torch_items = [(t, idx, val) for kind, t, idx, val in plan if kind == "torch"]
    if torch_items:
        _patch_torch(torch_items)
    return metas if many else metas[files[0][0]]
