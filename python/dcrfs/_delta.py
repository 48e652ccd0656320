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
_READ_PIECE = 8 << 20         # a parallel read's pieces are no smaller
_PATCH_PIECE = 1 << 18        # nor a parallel patch's (indices)
_CHECK_PIECE = 1 << 20        # indices checked as one piece
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
    """One delta file, opened: __init__ reads and checks its header (.meta,
    delta_info's dict; .parts {name: (idx dtype, idx offset, n, val
    dtype, val offset)}, offsets into the data section), load() reads
    and checks its data (.data, a numpy uint8 array of the data section;
    .tensors {name: (idx, val, dtype)}, numpy views of it). The file
    stays open in between, so both come from the one file: close() it
    (or use ``with``)."""

    def __init__(self, path):
        self.path = path
        self.data = self.host = None
        self.tensors = {}
        self._f = open(path, "rb")
        try:
            self._header()
        except BaseException:
            self.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self._f is not None:
            self._f.close()
            self._f = None

    def _pread(self, n, off):
        """n bytes at off, or DeltaError (the file is shorter than it said)."""
        out = bytearray(n)
        got = self._readinto(memoryview(out), off)
        if got != n:
            raise _bad(self.path, "read %d bytes of %d at %d (truncated while read)"
                       % (got, n, off))
        return bytes(out)

    def _readinto(self, mv, off):
        fd, got = self._f.fileno(), 0
        while got < len(mv):
            k = os.preadv(fd, [mv[got:]], off + got)
            if k <= 0:
                break
            got += k
        return got

    def _header(self):
        p = self.path
        self.size = size = os.fstat(self._f.fileno()).st_size
        if size < 8:
            raise _bad(p, "%d bytes: too short for a safetensors file" % size)
        (n,) = struct.unpack("<Q", self._pread(8, 0))
        if n > _HDR_MAX:
            raise _bad(p, "header length %d is more than the format's %d" % (n, _HDR_MAX))
        if n > size - 8:
            raise _bad(p, "header length %d runs past the end of the file (%d bytes)"
                       % (n, size))
        try:
            hdr = json.loads(self._pread(n, 8).decode("utf-8"), object_pairs_hook=_no_dups)
        except (ValueError, RecursionError) as e:  # UnicodeDecodeError too
            raise _bad(p, "header is not JSON: %s" % e) from None
        if not isinstance(hdr, dict):
            raise _bad(p, "header is not a JSON object")
        self.base = 8 + n
        self.meta = self._metadata(hdr.pop("__metadata__", None))
        self.parts = self._parts(hdr, size - 8 - n)

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

    def _parts(self, hdr, ndata):
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
                    or offs[0] > offs[1] or offs[1] > ndata):
                raise _bad(p, "tensor %s: data_offsets %r outside the %d data bytes"
                           % (name, offs, ndata))
            width = _DTYPES[dt][0]
            if offs[1] - offs[0] != shape[0] * width:
                raise _bad(p, "tensor %s: %d bytes do not hold %d %s elements"
                           % (name, offs[1] - offs[0], shape[0], dt))
            # the format lays tensors out widest dtype first, so each starts
            # at a multiple of its width: typed views of the data need it
            if offs[0] % width:
                raise _bad(p, "tensor %s: data offset %d is not a multiple of its "
                           "width (%d)" % (name, offs[0], width))
            base, dot, part = name.rpartition(".")
            if not dot or not base or part not in ("idx", "val"):
                raise _bad(p, "tensor %s: not a T.idx or T.val" % name)
            if part == "idx" and dt not in ("I32", "I64"):
                raise _bad(p, "tensor %s: index dtype %s is not I32 or I64" % (name, dt))
            spans.append((offs[0], offs[1], name))
            parts.setdefault(base, {})[part] = (dt, offs[0], shape[0])
        spans.sort()
        for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
            if b1 < e0:
                raise _bad(p, "tensors %s and %s overlap" % (n0, n1))
        out = {}
        for base, pv in parts.items():
            if set(pv) != {"idx", "val"}:
                have, miss = ("idx", "val") if "idx" in pv else ("val", "idx")
                raise _bad(p, "tensor %s.%s has no %s.%s" % (base, have, base, miss))
            (idt, ioff, ni), (vdt, voff, nv) = pv["idx"], pv["val"]
            if ni != nv:
                raise _bad(p, "tensor %s: %d indices but %d values" % (base, ni, nv))
            out[base] = (idt, ioff, ni, vdt, voff)
        return out

    def load(self, pin=False, pool=None):
        """Read the data section (into pinned host memory if pin, as torch
        tensor .host; in pieces on pool's threads if given) and check every
        index tensor: non-negative, increasing. Fills .data and .tensors."""
        import numpy as np
        n = self.size - self.base
        if os.fstat(self._f.fileno()).st_size != self.size:
            raise _bad(self.path, "changed size while read (was %d bytes)" % self.size)
        if pin:
            import torch
            self.host = torch.empty(max(n, 1), dtype=torch.uint8, pin_memory=True)
            buf = self.host.numpy()[:n]
        else:
            buf = np.empty(n, dtype=np.uint8)  # aligned: the data stays aligned
        mv = memoryview(buf)
        piece = max(_READ_PIECE, -(-n // _workers()))
        offs = range(0, n, piece)
        if pool is not None and len(offs) > 1:
            got = sum(pool.map(lambda o: self._readinto(mv[o:o + piece], self.base + o), offs))
        else:
            got = self._readinto(mv, self.base)
        if got != n:
            raise _bad(self.path, "read %d bytes of %d (truncated while read)"
                       % (self.base + got, self.size))
        self.data = buf
        jobs = []
        for base, (idt, ioff, ni, vdt, voff) in self.parts.items():
            iw, vw = _DTYPES[idt][0], _DTYPES[vdt][0]
            idx = buf[ioff:ioff + ni * iw].view(_DTYPES[idt][1])
            val = buf[voff:voff + ni * vw].view(_DTYPES[vdt][1])
            if ni and idx[0] < 0:
                raise _bad(self.path, "tensor %s: negative index %d" % (base, idx[0]))
            # increasing, checked in pieces (overlapping by one element):
            # their temporaries stay in the CPU's cache, and pool's
            # threads check several at once
            for a in range(0, ni - 1, _CHECK_PIECE):
                jobs.append((base, idx, a, min(a + _CHECK_PIECE, ni - 1) + 1))
            self.tensors[base] = (idx, val, vdt)
        ok = (pool.map(_first_not_increasing, jobs) if pool is not None and len(jobs) > 1
              else map(_first_not_increasing, jobs))
        for (base, idx, _, _), k in zip(jobs, ok):
            if k is not None:
                raise _bad(self.path, "tensor %s: indices not increasing (%d then %d at %d)"
                           % (base, idx[k], idx[k + 1], k + 1))
        return self


def _first_not_increasing(job):
    """The first k in a..b-2 with idx[k + 1] <= idx[k], or None."""
    import numpy as np
    _, idx, a, b = job
    up = idx[a + 1:b] > idx[a:b - 1]
    return None if up.all() else a + int(np.argmin(up))


def _read(path):
    """The delta file at path, read whole and checked (a closed _Delta)."""
    with _Delta(path) as d:
        return d.load()


def _workers():
    """Threads for a parallel read or patch: the CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return os.cpu_count() or 1


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
    return {k: (i, v) for k, (i, v, _) in _read(path).tensors.items()}


def iter_delta(path):
    """Yield ``(name, idx, val)`` for each changed tensor of the delta file
    at path, in name order: the same arrays read_delta gives, for an
    engine that feeds sparse patches to its own weight loader (vLLM's
    fused qkv_proj, tensor-parallel slices and SGLang's load_weights
    address tensors by checkpoint name). The whole file is read and
    checked before the first item is yielded; raises DeltaError likewise."""
    d = _read(path)
    for name in sorted(d.tensors):
        idx, val, _ = d.tensors[name]
        yield name, idx, val


def delta_info(path):
    """The ``__metadata__`` of a delta file, as a dict: format,
    format_version, from_version and to_version (int), from_digest
    ("" when the file did not exist in the from version), to_digest,
    digest_kind, and added, removed, reshaped (lists of tensor names:
    tensors the caller reloads from the to version's full file, or
    drops). Reads the header only, not the data: its metadata and the
    tensors' layout are checked as read_delta checks them (DeltaError
    likewise), the indices and values are not (read_delta, iter_delta
    and apply_delta check them before they use any)."""
    with _Delta(path) as d:
        return d.meta


class _Skip:
    """The type of SKIP: what a resolve= function returns for a tensor this
    engine (or this rank) does not hold on purpose."""
    __slots__ = ()

    def __repr__(self):
        return "dcrfs.SKIP"


SKIP = _Skip()

# element width -> the integer dtypes a patch moves the elements' bits as
_INT_NP = {1: "|u1", 2: "<i2", 4: "<i4", 8: "<i8"}


def _target(t):
    """(kind, safetensors dtype or None, numel, why not patchable or None);
    kind: "numpy", "torch" (a CPU tensor) or "device" (any other)."""
    if type(t).__module__.startswith("torch"):
        import torch
        from . import _torch_dtypes
        dt = _torch_dtypes(torch).get(t.dtype)
        why = None if t.is_contiguous() else "is not contiguous"
        return ("torch" if t.device.type == "cpu" else "device"), dt, t.numel(), why
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


def _torch_int(width):
    import torch
    return {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[width]


class _Item:
    """One tensor's patch, checked: target t (kind as _target's) gets
    the elements lo..hi of delta d's name at flat index idx + shift."""
    __slots__ = ("name", "t", "kind", "d", "lo", "hi", "shift", "width", "key", "span")

    def flat(self):
        """t's elements as one flat array of integers of their width
        (numpy for a numpy array or a CPU tensor, else a torch tensor)."""
        t = self.t
        if self.kind == "numpy":
            return t.reshape(-1).view(_INT_NP[self.width])
        flat = t.detach().view(-1).view(_torch_int(self.width))
        return flat.numpy() if self.kind == "torch" else flat

    def arrays(self):
        """(idx, val): the numpy views of the file's elements to patch."""
        idx, val, _ = self.d.tensors[self.name]
        return idx[self.lo:self.hi], val[self.lo:self.hi].view(_INT_NP[self.width])


def _resolved(name, got, fp):
    """resolve(name)'s answer -> (tensor, dst, src, count) (src and count
    None for the whole tensor), None for SKIP; DeltaError if malformed."""
    if got is SKIP:
        return None
    if got is None:
        raise _bad(fp, "resolve(%r) gave None: return dcrfs.SKIP to leave a "
                   "tensor out on purpose" % name, errno.EINVAL)
    if not isinstance(got, tuple) or len(got) not in (2, 4) or \
            not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                    for x in got[1:]):
        raise _bad(fp, "resolve(%r) gave %r, not (tensor, dst) or (tensor, dst, src, "
                   "count) with non-negative integer offsets" % (name, got), errno.EINVAL)
    return got if len(got) == 4 else (got[0], got[1], None, None)


def _address(t, kind):
    """(memory key, address of element 0, element size) of a target."""
    if kind == "numpy":
        return "cpu", t.ctypes.data, t.itemsize
    return str(t.device), t.data_ptr(), t.element_size()


def _check_overlap(plan, fp_of):
    """No two patches may write the same memory (two names resolved onto
    one slice, or one tensor under two names): DeltaError, unless they
    are one patch twice (an engine's alias of a tied tensor), of which
    one is dropped. Returns the plan to apply."""
    import numpy as np
    order = sorted(plan, key=lambda it: (it.key, it.span))
    keep = []
    for it in order:
        prev = keep[-1] if keep else None
        if prev is not None and prev.key == it.key and it.span[0] < prev.span[1]:
            (pi, pv), (ii, iv) = prev.arrays(), it.arrays()
            if prev.span == it.span and prev.width == it.width and \
                    np.array_equal(pi, ii) and np.array_equal(pv, iv):
                continue
            raise _bad(fp_of[id(it)], "tensors %s and %s would patch the same elements "
                       "of one target" % (prev.name, it.name), errno.EINVAL)
        keep.append(it)
    return keep


def _scatter(flat, shift, idx, val):
    """flat[idx + shift] = val, for numpy arrays, without a temporary for
    a shift >= 0. Releases the GIL for the copy (numpy does)."""
    if shift >= 0:
        (flat[shift:] if shift else flat)[idx] = val
    else:
        flat[idx.astype("<i8") + shift] = val


def _patch_host(items, pool):
    """Patch numpy arrays and CPU torch tensors: each through a numpy view
    of its elements as integers of their width (the bits move as they
    are), straight from the file's buffer, in pieces of _PATCH_PIECE
    indices or more on pool's threads (disjoint elements: the patches'
    spans were checked apart)."""
    total = sum(it.hi - it.lo for it in items)
    piece = max(_PATCH_PIECE, -(-total // (4 * _workers())))
    jobs = []
    for it in items:
        flat = it.flat()
        idx, val = it.arrays()
        for a in range(0, len(idx), piece):
            jobs.append((flat, it.shift, idx[a:a + piece], val[a:a + piece]))
    if pool is None or len(jobs) < 2:
        for j in jobs:
            _scatter(*j)
    else:
        for f in [pool.submit(_scatter, *j) for j in jobs]:
            f.result()


def _patch_staged(items):
    """Patch torch tensors on a device (CUDA, or any but the CPU): per
    device and file, the span of the file's data section its patches
    use goes to the device in one copy (from the pinned buffer the file
    was read into, for CUDA: asynchronous, no pageable staging), the
    indices as the file has them (I32 widened to int64 on the device, all
    at once, a shift added there); then each tensor is patched there
    (index_put_ on its elements viewed as integers of their width). A CUDA patch is
    complete when this returns."""
    import torch
    groups = {}
    for it in items:
        groups.setdefault((str(it.t.device), id(it.d)), []).append(it)
    devs = set()
    for its in groups.values():
        d, dev = its[0].d, its[0].t.device
        host = d.host if d.host is not None else torch.from_numpy(d.data)
        ranges = []
        for it in its:
            idt, ioff, _, vdt, voff = d.parts[it.name]
            iw = _DTYPES[idt][0]
            ranges.append((ioff + it.lo * iw, ioff + it.hi * iw, voff + it.lo * it.width,
                           voff + it.hi * it.width, iw))
        a = min(min(r[0], r[2]) for r in ranges) & ~7
        b = max(max(r[1], r[3]) for r in ranges)
        dbuf = host[a:b].to(dev, non_blocking=d.host is not None)
        with torch.no_grad():
            # every I32 index of the file widened in one kernel: the format
            # lays them out back to back
            narrow = [r for r in ranges if r[4] == 4]
            if narrow:
                w0, w1 = min(r[0] for r in narrow), max(r[1] for r in narrow)
                wide = dbuf[w0 - a:w1 - a].view(torch.int32).long()
            for it, (i0, i1, v0, v1, iw) in zip(its, ranges):
                if iw == 4:
                    di = wide[(i0 - w0) // 4:(i1 - w0) // 4]
                else:
                    di = dbuf[i0 - a:i1 - a].view(torch.int64)
                if it.shift:
                    di = di + it.shift
                it.flat().index_put_((di,), dbuf[v0 - a:v1 - a].view(_torch_int(it.width)))
        devs.add(dev)
    for dev in devs:
        if dev.type == "cuda":
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


def apply_delta(tensors, path, from_digest=None, from_version=None, check=True,
                resolve=None):
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

    resolve (instead of tensors, which may then be None): for engines
    whose tensors are not the checkpoint's one for one, a function
    called with each changed checkpoint tensor's name that returns

    - ``(tensor, dst)``: the checkpoint tensor's elements sit at
      ``tensor.view(-1)[dst:]`` (a fused tensor, e.g. vLLM's qkv_proj
      holding q_proj, k_proj and v_proj back to back: dst is where
      k_proj starts); every changed element must fall inside tensor;
    - ``(tensor, dst, src, count)``: tensor holds only the checkpoint
      tensor's flat elements src..src+count-1, at ``tensor.view(-1)
      [dst:dst+count]`` (a tensor-parallel slice along the first
      dimension, which is contiguous in row-major order; fused or not):
      the changed elements inside that window are applied, the others
      (other ranks' slices) are skipped; the window must fit in tensor.
      A slice along another dimension is not contiguous: feed those
      through iter_delta;
    - ``dcrfs.SKIP``: this engine or rank holds no part of it, on
      purpose (a pipeline stage's missing layers). None (e.g. a resolve
      that fell off its end) raises DeltaError (EINVAL): a tensor is
      never left stale by accident.

    Exceptions resolve raises propagate, before any tensor changed.

    Everything is checked first, and only then is anything changed: the
    file (as read_delta), from_digest and from_version equal to the
    file's, every changed tensor present in tensors (or resolved),
    contiguous (and writeable), of the delta's dtype (BF16 values also
    go into uint16 or int16 arrays holding bf16 bits), with every index
    inside its target, and no two patches writing the same elements
    (two names resolved onto one slice; one patch given twice, as a
    tied tensor under two names, is applied once). Raises DeltaError
    naming the first problem found (errno EBADMSG: the file; EINVAL:
    the tensors, resolve, from_digest or from_version); then no tensor
    was modified.

    For several files, from_digest is a dict {key: digest} (key: the
    file's path below the directory, or the path as given in a list), or
    from_version gives the one version all of them are from; every
    file is checked, and no tensor may be changed by two files, before
    any tensor changes. A rollback span (MNT/delta/vN..vM, M < N) is
    applied the same way to tensors of vN and gives vM.

    Returns delta_info's dict (for several files: {key: dict}): the
    caller reloads the tensors in its added and reshaped lists from the
    to version's full file and drops those in removed (apply_delta
    leaves them alone). Each file is read once, into one buffer (pinned
    host memory when a target is a CUDA tensor), in pieces on threads
    for a large file. numpy arrays and CPU torch tensors are patched
    from that buffer through numpy views of their bits, on one thread
    per CPU this process may use. Other torch tensors are patched on
    their device: per device and file, the bytes its patches use go to
    it in one copy, and each tensor is patched there (index_put_); a
    CUDA patch is complete when apply_delta returns. Not thread-safe
    for the same tensors."""
    from concurrent.futures import ThreadPoolExecutor
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
    if resolve is None and tensors is None:
        raise _bad(files[0][1], "apply_delta needs tensors or resolve=", errno.EINVAL)
    staged_cpu = os.environ.get("DCRFS_TEST_APPLY_STAGED") == "1"   # HACKING
    workers = _workers()
    pool = ThreadPoolExecutor(workers, thread_name_prefix="dcrfs-apply") \
        if workers > 1 else None
    try:
        plan, metas, owner, fp_of = [], {}, {}, {}
        for key, fp in files:
            with _Delta(fp) as d:
                metas[key] = _check_meta(d.meta, key, fp, from_digest, from_version, check)
                targets = []
                for name in sorted(d.parts):
                    if name in owner:
                        raise _bad(fp, "tensor %s is also changed by %s" % (name, owner[name]),
                                   errno.EINVAL)
                    owner[name] = key
                    if resolve is not None:
                        got = _resolved(name, resolve(name), fp)
                        if got is None:
                            continue
                        t, dst, src, count = got
                    elif name not in tensors:
                        raise _bad(fp, "tensor %s is not among the tensors given" % name,
                                   errno.EINVAL)
                    else:
                        t, dst, src, count = tensors[name], 0, None, None
                    kind, dt, numel, why = _target(t)
                    if why:
                        raise _bad(fp, "tensor %s %s" % (name, why), errno.EINVAL)
                    vdt = d.parts[name][3]
                    if not _same_width(dt, vdt):
                        raise _bad(fp, "tensor %s is %s, the delta's values are %s"
                                   % (name, dt or getattr(t, "dtype", "?"), vdt), errno.EINVAL)
                    if kind == "torch" and staged_cpu:
                        kind = "device"
                    if count is not None and dst + count > numel:
                        raise _bad(fp, "tensor %s: resolve's window of %d elements at %d "
                                   "does not fit in its target (%d elements)"
                                   % (name, count, dst, numel), errno.EINVAL)
                    targets.append((name, t, kind, numel, dst, src, count, _DTYPES[vdt][0]))
                pin = any(k == "device" and t.device.type == "cuda"
                          for _, t, k, *_ in targets)
                d.load(pin, pool)
            for name, t, kind, numel, dst, src, count, width in targets:
                idx = d.tensors[name][0]
                if count is None:
                    lo, hi, shift = 0, len(idx), dst
                    if hi and dst + int(idx[-1]) >= numel:
                        raise _bad(fp, "tensor %s: index %d out of range (%d elements%s)"
                                   % (name, idx[-1], numel, ", at %d" % dst if dst else ""),
                                   errno.EINVAL)
                else:
                    lo, hi = (int(x) for x in idx.searchsorted([src, src + count]))
                    shift = dst - src
                if hi <= lo:
                    continue
                it = _Item()
                it.name, it.t, it.kind, it.d, it.lo, it.hi = name, t, kind, d, lo, hi
                it.shift, it.width = shift, width
                dev, addr, size = _address(t, kind)
                it.key = dev
                it.span = (addr + (int(idx[lo]) + shift) * size,
                           addr + (int(idx[hi - 1]) + shift + 1) * size)
                plan.append(it)
                fp_of[id(it)] = fp
        plan = _check_overlap(plan, fp_of)
        # everything checked: now, and only now, change the tensors
        host = [it for it in plan if it.kind != "device"]
        if host:
            _patch_host(host, pool)
        staged = [it for it in plan if it.kind == "device"]
        if staged:
            _patch_staged(staged)
    finally:
        if pool is not None:
            pool.shutdown()
    return metas if many else metas[files[0][0]]


def _check_meta(meta, key, fp, from_digest, from_version, check):
    """A file's delta_info dict, once from_digest and from_version are
    checked against it."""
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
    return meta
