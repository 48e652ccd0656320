# SPDX-License-Identifier: MIT
"""Reading a version's files without a mount (libdcr's dcr_read_*, lib/dcr.h).

Every byte comes through libdcr's read path, as through a mount: the chunk
cache, ranged GETs of the frames it lacks, each chunk verified bit-exactly
against the version's manifest; a byte that cannot be proven raises
DcrError (EIO) naming the object, never returns wrong data. No FUSE, no
root: for pods without /dev/fuse.

    with dcrfs.open("s3://bucket/run1", "latest", "model.safetensors") as f:
        header = f.read(8)

    tensors = dcrfs.load_safetensors("s3://bucket/run1", 42, "model.safetensors")

A version is a number, a tag name or "latest". Without cache_dir each
Reader (and each open()/load_safetensors call) uses a private cache in
$TMPDIR, removed at close; cache_dir keeps one, in a mount's layout (one
user at a time: a directory a mount holds raises DcrError EBUSY).
"""
import ctypes
import io
import json
import os

from . import DcrError, _Closing, _check, _cstr, _lib, _vname, _vp

_u64 = ctypes.c_uint64


class _ReadOptions(ctypes.Structure):
    _fields_ = [("cache_dir", ctypes.c_char_p), ("cache_size", _u64),
                ("trust_file", ctypes.c_char_p)]


_lib.dcr_read_handle_open.argtypes = [_vp, ctypes.POINTER(_ReadOptions), ctypes.POINTER(_vp)]
_lib.dcr_read_handle_close.argtypes = [_vp]
_lib.dcr_read_handle_close.restype = None
_lib.dcr_read_resolve.argtypes = [_vp, ctypes.c_char_p, ctypes.POINTER(_u64)]
_lib.dcr_read_list.argtypes = [_vp, ctypes.c_char_p, ctypes.POINTER(_vp)]
_lib.dcr_read_open.argtypes = [_vp, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_vp)]
_lib.dcr_read_size.argtypes = [_vp]
_lib.dcr_read_size.restype = _u64
_lib.dcr_read_version.argtypes = [_vp]
_lib.dcr_read_version.restype = _u64
_lib.dcr_read_pread.argtypes = [_vp, ctypes.c_void_p, ctypes.c_size_t, _u64]
_lib.dcr_read_pread.restype = ctypes.c_int64
_lib.dcr_read_close.argtypes = [_vp]
_lib.dcr_read_close.restype = None


class Reader(_Closing):
    """A reader of the store at url (its versions listed at open); open()
    files of any version through it. trust: a file of PEM public keys (a
    mount's -o trust=): only versions and tags signed by one are seen. Thread-safe: its files may be read
    from several threads at once. Close it (or use ``with``) after its
    files."""

    def __init__(self, url, cache_dir=None, cache_size=0, trust=None):
        self.url = url
        self._s = _vp()
        self._h = _vp()
        _check(_lib.dcr_store_handle_open(_cstr(url, "store URL"), 0,
                                          ctypes.byref(self._s)), url)
        o = _ReadOptions(_cstr(cache_dir, "cache_dir", fs=True) if cache_dir else None,
                         int(cache_size),
                         _cstr(trust, "trust", fs=True) if trust else None)
        try:
            _check(_lib.dcr_read_handle_open(self._s, ctypes.byref(o),
                                             ctypes.byref(self._h)), url)
        except BaseException:
            self.close()
            raise

    def _handle(self):
        if not self._h:
            raise ValueError("dcrfs: I/O operation on a closed Reader")
        return self._h

    def resolve(self, version):
        """The number of the version a number, tag or "latest" names."""
        v = _u64()
        _check(_lib.dcr_read_resolve(self._handle(), _vname(version), ctypes.byref(v)),
               str(version))
        return v.value

    def list(self, version):
        """Version's directories and files: {"version": N, "entries":
        [{"path", "type": "dir" or "file", "mode", "size", "mtime_ns"}]}."""
        out = _vp()
        _check(_lib.dcr_read_list(self._handle(), _vname(version), ctypes.byref(out)),
               str(version))
        try:
            return json.loads(ctypes.string_at(out).decode("utf-8"))
        finally:
            _lib.dcr_free(out)

    def open(self, version, path):
        """The file path of version as a binary file object (File)."""
        return File(self, version, path)

    def close(self):
        if self._h:
            _lib.dcr_read_handle_close(self._h)
            self._h = _vp()
        if self._s:
            _lib.dcr_store_handle_close(self._s)
            self._s = _vp()


class File(io.RawIOBase):
    """A file of a version, read-only and seekable: read, readinto, seek,
    tell, readall, and pread(n, offset) (no position; thread-safe).
    size and version (the number it resolved to) are attributes."""

    def __init__(self, reader, version, path, _owns_reader=False):
        super().__init__()
        self._r = reader
        self._owns = _owns_reader
        self._f = _vp()
        self._pos = 0
        self.name = os.fsdecode(path) if isinstance(path, bytes) else str(path)
        _check(_lib.dcr_read_open(reader._handle(), _vname(version),
                                  _cstr(path, "path"), ctypes.byref(self._f)),
               self.name)
        self.size = _lib.dcr_read_size(self._f)
        self.version = _lib.dcr_read_version(self._f)

    def readable(self):
        return True

    def seekable(self):
        return True

    def _fh(self):
        if self.closed or not self._f:
            raise ValueError("dcrfs: I/O operation on a closed file")
        return self._f

    def _pread_into(self, mv, offset):
        """Fill the writable byte memoryview mv from offset: bytes read."""
        n = len(mv)
        if n == 0:
            return 0
        if mv.readonly:
            raise TypeError("dcrfs: readinto needs a writable buffer")
        addr = ctypes.addressof((ctypes.c_char * n).from_buffer(mv))
        return _check(_lib.dcr_read_pread(self._fh(), addr, n, offset), self.name)

    def readinto(self, b):
        mv = memoryview(b).cast("B")
        n = self._pread_into(mv, self._pos)
        self._pos += n
        return n

    def readall(self):
        left = max(self.size - self._pos, 0)
        buf = bytearray(left)
        n = self._pread_into(memoryview(buf), self._pos) if left else 0
        self._pos += n
        del buf[n:]
        return bytes(buf)

    def pread(self, n, offset):
        """n bytes (fewer at the end of the file) at offset, as bytes;
        the position is left alone."""
        buf = bytearray(max(0, min(n, self.size - offset)))
        got = self._pread_into(memoryview(buf), offset) if buf else 0
        del buf[got:]
        return bytes(buf)

    def seek(self, offset, whence=io.SEEK_SET):
        self._fh()
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self.size + offset
        else:
            raise ValueError("dcrfs: invalid whence (%r)" % (whence,))
        if pos < 0:
            raise OSError(22, "dcrfs: negative seek position %d" % pos)
        self._pos = pos
        return pos

    def tell(self):
        self._fh()
        return self._pos

    def close(self):
        if self._f:
            _lib.dcr_read_close(self._f)
            self._f = _vp()
        if self._owns and self._r is not None:
            self._r.close()
            self._r = None
        super().close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def open(url, version, path, cache_dir=None, trust=None):  # noqa: A001
    """File path of version of the store at url as a binary file object
    (a context manager; read, readinto, seek, tell), every byte verified.
    It has a Reader of its own, closed with it; for many files, open them
    through one Reader."""
    r = Reader(url, cache_dir=cache_dir, trust=trust)
    try:
        return File(r, version, path, _owns_reader=True)
    except BaseException:
        r.close()
        raise


# safetensors dtype -> (torch dtype name, numpy dtype): numpy has no
# bfloat16 nor float8, so those come as uint16 / uint8 (the bits).
_ST_DTYPES = {"F64": ("float64", "<f8"), "F32": ("float32", "<f4"),
              "F16": ("float16", "<f2"), "BF16": ("bfloat16", "<u2"),
              "I64": ("int64", "<i8"), "I32": ("int32", "<i4"),
              "I16": ("int16", "<i2"), "I8": ("int8", "i1"),
              "U64": ("uint64", "<u8"), "U32": ("uint32", "<u4"),
              "U16": ("uint16", "<u2"), "U8": ("uint8", "u1"),
              "BOOL": ("bool", "?"), "F8_E4M3": ("float8_e4m3fn", "u1"),
              "F8_E5M2": ("float8_e5m2", "u1")}


def _parse_header(buf, name):
    if len(buf) < 8:
        raise DcrError(22, "%s: not a safetensors file (%d bytes)" % (name, len(buf)))
    n = int.from_bytes(bytes(buf[:8]), "little")
    if n > len(buf) - 8:
        raise DcrError(22, "%s: not a safetensors file (header of %d bytes)" % (name, n))
    try:
        hdr = json.loads(bytes(buf[8:8 + n]).decode("utf-8"))
    except ValueError as e:
        raise DcrError(22, "%s: not a safetensors file (%s)" % (name, e)) from None
    hdr.pop("__metadata__", None)
    base = 8 + n
    for k, t in hdr.items():
        b, e = t["data_offsets"]
        if t["dtype"] not in _ST_DTYPES:
            raise DcrError(22, "%s: tensor %s: dtype %s unknown" % (name, k, t["dtype"]))
        if not 0 <= b <= e <= len(buf) - base:
            raise DcrError(22, "%s: tensor %s: offsets out of the file" % (name, k))
    return hdr, base


def load_safetensors(url, version, path, device="cpu", cache_dir=None, framework=None,
                     trust=None):
    """The tensors of the safetensors file path of version, {name: tensor},
    bit-exact to the file a mount shows (every chunk verified). torch
    tensors on device when torch is installed (framework="pt"), else
    numpy arrays (framework="np"; BF16 as uint16 and F8 as uint8, the
    bits, and device must be "cpu"). The file is read once into one
    buffer that the CPU tensors share. cache_dir, trust: as Reader's."""
    if framework is None:
        try:
            import torch  # noqa: F401
            framework = "pt"
        except ImportError:
            framework = "np"
    if framework not in ("pt", "np"):
        raise ValueError("dcrfs: framework must be 'pt' or 'np'")
    import numpy as np
    with open(url, version, path, cache_dir=cache_dir, trust=trust) as f:
        buf = np.empty(f.size, dtype=np.uint8)
        got = f.readinto(memoryview(buf)) if f.size else 0
        if got != f.size:
            raise DcrError(5, "%s: read %d of %d bytes" % (f.name, got, f.size))
        name = f.name
    hdr, base = _parse_header(memoryview(buf), name)
    out = {}
    if framework == "np":
        if str(device) != "cpu":
            raise ValueError("dcrfs: numpy arrays live on the CPU (device=%r)" % (device,))
        for k, t in hdr.items():
            b, e = t["data_offsets"]
            a = buf[base + b:base + e].view(np.dtype(_ST_DTYPES[t["dtype"]][1]))
            out[k] = a.reshape(t["shape"])
        return out
    import torch
    raw = torch.from_numpy(buf)
    for k, t in hdr.items():
        b, e = t["data_offsets"]
        dt = getattr(torch, _ST_DTYPES[t["dtype"]][0], None)
        if dt is None:
            raise DcrError(22, "%s: tensor %s: this torch has no %s" % (name, k, t["dtype"]))
        try:
            x = raw[base + b:base + e].view(dt).reshape(t["shape"])
        except RuntimeError:  # an offset not aligned to its dtype: a copy
            x = raw[base + b:base + e].clone().view(dt).reshape(t["shape"])
        out[k] = x if str(device) == "cpu" else x.to(device)
    return out
