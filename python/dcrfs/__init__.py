# SPDX-License-Identifier: MIT
"""dcrfs - commit model weights to a dcrfs store straight from tensors.

A thin ctypes layer over libdcr (lib/dcr.h): the same pipeline, codec and
guarantees as dcrfs-commit, and no checkpoint file is written::

    import dcrfs
    with dcrfs.Commit("s3://bucket/run1") as c:
        c.add_safetensors("model.safetensors", state_dict)
        v = c.publish(tag="step-100")

and to look after the store as dcrfs-ctl does: log(url), show(url, v),
diff(url, a, b), verify(url, deep=False), gc(url, keep_last=N, ...),
tag(url, name, v) and compact(url). Their results are dcrfs-ctl's
--json output, parsed (dicts and lists, documented in dcrfs-ctl(8)).

To keep a rollout engine's weights current from a mount's delta/ view
(dcrfs(8)) without reloading them: read_delta(path) ({name: (idx, val)},
numpy only), delta_info(path) (what changed, from and to which version; the header only)
and apply_delta(tensors, path, from_digest=... or from_version=...),
which patches torch tensors (any device) or numpy arrays in place after
checking that they are of the delta's from version; a bad file raises
DeltaError. apply_delta(None, path, ..., resolve=fn) patches fused and
tensor-parallel tensors (fn(name) gives (tensor, dst), (tensor, dst,
src, count) or SKIP); iter_delta(path) yields (name, idx, val) for an
engine's own loader.

To load one version and only one from a mount: resolve(mnt) gives
MNT/vN for the version MNT/latest shows now (MNT/latest itself is
looked up again at every path walk, so files opened one by one through
it can come from different versions when a commit lands between them);
wait(mnt, newer_than=None, timeout=None) blocks, without polling, until
latest is newer, and returns its number (MNT/.dcrfs/latest, a file
poll(2) wakes on). Tensor-parallel workers load the version their
leader resolved: resolve(mnt, version=N).

To read a version without a mount (no FUSE, no root; every chunk
verified as a mount does): open(url, version, path) (a binary file
object), load_safetensors(url, version, path, device="cpu") (tensors) and
Reader(url) for many files (python/dcrfs/_read.py).

Tensors are numpy arrays or torch tensors (CPU). Contiguous memory is
read in place (zero-copy): do not modify the tensors until publish()
returns. torch bfloat16 is viewed as int16 (no copy); a non-contiguous
tensor is copied once. Tensor names, paths, metadata keys and values
are str (or bytes) of UTF-8 text without a NUL byte; anything else raises
DcrError (EINVAL) naming it. Leaving the ``with`` block without publish()
(an exception, or simply not calling it) aborts: nothing is published.

libdcr is found through $DCRFS_LIBDCR (a path to the shared library),
then the directory it was installed to (recorded by `make install`),
then the system's library path, then where `make install` (/usr/local/lib)
and the libdcr0 package put it: a copy installed with pip
(``pip install ./python``, python/pyproject.toml) in any venv finds it.
"""
import ctypes
import ctypes.util
import errno
import json
import os
import signal
import sysconfig
import threading

__all__ = ["Commit", "DcrError", "version", "compact", "log", "show", "diff",
           "verify", "gc", "tag", "read_delta", "iter_delta", "delta_info", "apply_delta",
           "SKIP", "DeltaError", "Reader", "open", "load_safetensors",
           "resolve", "latest", "wait"]

_u64 = ctypes.c_uint64


class _Range(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("len", _u64)]


class _Tensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_char_p),
                ("shape", ctypes.POINTER(_u64)), ("ndim", ctypes.c_size_t),
                ("data", ctypes.c_void_p), ("len", _u64)]


class _Progress(ctypes.Structure):
    _fields_ = [("bytes_done", _u64), ("bytes_total", _u64),
                ("bytes_uploaded", _u64), ("phase", ctypes.c_char_p)]


_PROGRESS_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(_Progress))


class _Options(ctypes.Structure):
    _fields_ = [("parent", _u64), ("cache_dir", ctypes.c_char_p),
                ("flags", ctypes.c_uint), ("chunk_size", ctypes.c_uint32),
                ("jobs", ctypes.c_int), ("progress", _PROGRESS_FN),
                ("progress_arg", ctypes.c_void_p)]


class _Info(ctypes.Structure):
    _fields_ = [(n, _u64) for n in ("version", "parent", "files", "dirs",
                                    "bytes_in", "bytes_packed", "manifest_len",
                                    "chunks_same", "chunks_delta", "chunks_full")] + \
               [("packs", ctypes.c_uint32)]


_STORE_INIT = 1
_FULL, _ALLOW_EMPTY, _ALLOW_NONFINITE, _NO_CACHE = 1, 2, 4, 8
_ALLOW_UNCHANGED = 64


def _load():
    cands = []
    if os.environ.get("DCRFS_LIBDCR"):
        cands.append(os.environ["DCRFS_LIBDCR"])
    try:
        from . import _paths
        cands.append(os.path.join(_paths.LIBDIR, "libdcr.so.0"))
    except ImportError:
        pass
    found = ctypes.util.find_library("dcr")
    if found:
        cands.append(found)
    # Installed by pip into a venv: where `make install` (/usr/local) and
    # the libdcr0 package (the multiarch directory) put it, even before
    # ldconfig ran.
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    for d in ("/usr/local/lib", "/usr/lib/" + multiarch, "/usr/lib64", "/usr/lib"):
        p = os.path.join(d, "libdcr.so.0")
        if p not in cands and os.path.exists(p):
            cands.append(p)
    errors = []
    for c in cands:
        try:
            return ctypes.CDLL(c)
        except OSError as e:
            errors.append(str(e))
    raise ImportError("dcrfs: cannot load libdcr (tried %s%s): install it (make "
                      "install, or the libdcr0 package) or set DCRFS_LIBDCR to "
                      "its path (libdcr.so.0)"
                      % (", ".join(cands) or "nothing found",
                         ": " + "; ".join(errors) if errors else ""))


_lib = _load()
_vp = ctypes.c_void_p
_lib.dcr_errmsg.restype = ctypes.c_char_p
_lib.dcr_store_handle_open.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.POINTER(_vp)]
_lib.dcr_store_handle_close.argtypes = [_vp]
_lib.dcr_store_handle_close.restype = None
_lib.dcr_store_handle_latest.argtypes = [_vp, ctypes.POINTER(_u64)]
_lib.dcr_store_compact_opts.argtypes = [_vp, ctypes.c_void_p, ctypes.c_void_p]
_lib.dcr_commit_begin.argtypes = [_vp, ctypes.POINTER(_Options), ctypes.POINTER(_vp)]
_lib.dcr_commit_add_bytes.argtypes = [_vp, ctypes.c_char_p, ctypes.c_uint,
                                      ctypes.POINTER(_Range), ctypes.c_size_t]
_lib.dcr_commit_add_safetensors.argtypes = [_vp, ctypes.c_char_p, ctypes.POINTER(_Tensor),
                                            ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p),
                                            ctypes.c_size_t]
_lib.dcr_commit_add_tree.argtypes = [_vp, ctypes.c_char_p]
_lib.dcr_commit_publish.argtypes = [_vp, ctypes.c_char_p, ctypes.POINTER(_Info)]
_lib.dcr_commit_free.argtypes = [_vp]
_lib.dcr_commit_free.restype = None
_lib.dcr_commit_cancel.argtypes = [_vp]
_lib.dcr_commit_cancel.restype = None
_lib.dcr_commit_set_sign_key.argtypes = [_vp, ctypes.c_char_p]
_lib.dcr_commit_set_meta.argtypes = [_vp, ctypes.c_char_p, ctypes.c_char_p]
_lib.dcr_commit_signer.argtypes = [_vp]
_lib.dcr_commit_signer.restype = ctypes.c_char_p
_pvp = ctypes.POINTER(_vp)
_lib.dcr_free.argtypes = [_vp]
_lib.dcr_free.restype = None
_lib.dcr_store_log.argtypes = [_vp, _pvp]
_lib.dcr_store_show.argtypes = [_vp, ctypes.c_char_p, _pvp]
_lib.dcr_store_diff.argtypes = [_vp, ctypes.c_char_p, ctypes.c_char_p, _pvp]
_lib.dcr_store_verify.argtypes = [_vp, ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t,
                                  ctypes.c_uint, _pvp]
_lib.dcr_store_gc.argtypes = [_vp, ctypes.c_void_p, _pvp]
_lib.dcr_store_tag.argtypes = [_vp, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_u64)]
_lib.dcr_store_tag_signed.argtypes = [_vp, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.POINTER(_u64)]
_lib.dcr_set_log_level.argtypes = [ctypes.c_int]
_lib.dcr_set_log_level.restype = None
_lib.dcr_set_log_errors.argtypes = [ctypes.c_int]
_lib.dcr_set_log_errors.restype = None
# A failing call's errors are raised as DcrError, not printed as well.
_lib.dcr_set_log_errors(0)


class DcrError(OSError):
    """A libdcr call failed: errno is set, str() is libdcr's message."""


def _cstr(s, what, fs=False):
    """s (str or bytes) as the NUL-terminated bytes libdcr takes: a NUL in
    it would cut it short there, so it is refused, as is a str that is not
    Unicode text (lone surrogates); str is encoded as UTF-8, or with the
    filesystem's encoding when fs (a directory to read). libdcr checks
    that names and paths are UTF-8."""
    if fs:
        s = os.fspath(s)  # a pathlib.Path too
    if isinstance(s, str):
        try:
            b = os.fsencode(s) if fs else s.encode("utf-8")
        except UnicodeEncodeError as e:
            raise DcrError(errno.EINVAL, "%s %r is not valid Unicode text (%s)"
                           % (what, s, e.reason)) from None
    elif isinstance(s, (bytes, bytearray)):
        b = bytes(s)
    else:
        raise TypeError("dcrfs: %s must be str or bytes, not %s"
                        % (what, type(s).__name__))
    if b"\0" in b:
        raise DcrError(errno.EINVAL, "%s %r holds a NUL byte, which libdcr "
                       "cannot take (it would be cut there)" % (what, s))
    return b


def _check(ret, what):
    """Raise libdcr's message for a failed call once: it names the object
    already (the store, the path); what is prefixed only when it does not."""
    if ret < 0:
        msg = (_lib.dcr_errmsg() or b"").decode("utf-8", "replace").strip()
        if not msg:
            msg = "%s: %s" % (what, os.strerror(-ret))
        elif os.fsdecode(what) not in msg:
            msg = "%s: %s" % (os.fsdecode(what), msg)
        # libdcr's advice names the command-line flag; here it is an argument
        msg = msg.replace("--allow-nonfinite", "allow_nonfinite=True")
        raise DcrError(-ret, msg)
    return ret


# numpy dtype -> safetensors dtype
_NP_DTYPES = {"float64": "F64", "float32": "F32", "float16": "F16",
              "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8",
              "uint64": "U64", "uint32": "U32", "uint16": "U16", "uint8": "U8",
              "bool": "BOOL"}


def _torch_dtypes(torch):
    m = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16",
         torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32",
         torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}
    for name, st in (("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2")):
        if hasattr(torch, name):
            m[getattr(torch, name)] = st
    return m


def _tensor_bytes(t):
    """(safetensors dtype, shape, address, nbytes, owner) of a tensor or array;
    owner keeps the memory alive (the tensor itself when zero-copy)."""
    mod = type(t).__module__
    if mod.startswith("torch"):
        import torch
        dt = _torch_dtypes(torch).get(t.dtype)
        if dt is None:
            raise TypeError("dcrfs: torch dtype %s has no safetensors name" % t.dtype)
        if t.device.type != "cpu":
            t = t.detach().to("cpu")
        t = t.detach()
        if not t.is_contiguous():
            t = t.contiguous()
        return dt, tuple(t.shape), t.data_ptr(), t.numel() * t.element_size(), t
    import numpy as np
    a = np.asarray(t)
    name = a.dtype.name
    dt = _NP_DTYPES.get(name)
    if dt is None and name == "bfloat16":
        dt = "BF16"
    if dt is None:
        raise TypeError("dcrfs: numpy dtype %s has no safetensors name" % a.dtype)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    if not a.flags["C_CONTIGUOUS"]:
        a = np.ascontiguousarray(a)
    return dt, a.shape, a.ctypes.data, a.nbytes, a


def version(url):
    """The latest version of the store at url (0: none)."""
    s = _vp()
    _check(_lib.dcr_store_handle_open(_cstr(url, "store URL"), 0, ctypes.byref(s)), url)
    try:
        v = _u64()
        _check(_lib.dcr_store_handle_latest(s, ctypes.byref(v)), url)
        return v.value
    finally:
        _lib.dcr_store_handle_close(s)


class _CompactInfo(ctypes.Structure):
    _fields_ = [("generation", _u64), ("rewritten", _u64), ("depth", ctypes.c_uint)]


class _CompactOptions(ctypes.Structure):
    _fields_ = [("max_depth", ctypes.c_uint), ("read_cost", ctypes.c_uint)]


def compact(url, max_depth=0, read_cost=0):
    """Compact the store at url as `dcrfs-ctl compact` does: re-encode its
    versions as skip-deltas of at most max_depth frames per chunk (0: 8),
    a chunk whose frames would cost more than read_cost % of its full
    frame to read stored full (100 to 10000; 0: 150), as --read-cost.
    Returns {"generation", "rewritten", "depth"}; generation 0 when
    nothing needed rewriting."""
    o = _CompactOptions(max_depth, read_cost)
    s = _vp()
    _check(_lib.dcr_store_handle_open(_cstr(url, "store URL"), 0, ctypes.byref(s)), url)
    try:
        info = _CompactInfo()
        _check(_lib.dcr_store_compact_opts(s, ctypes.byref(o), ctypes.byref(info)), url)
        return {"generation": info.generation, "rewritten": info.rewritten,
                "depth": info.depth}
    finally:
        _lib.dcr_store_handle_close(s)


class _GcOptions(ctypes.Structure):
    _fields_ = [("keep_last", _u64), ("keep_tagged", ctypes.c_int),
                ("keep_newer", _u64), ("grace", _u64), ("dry_run", ctypes.c_int),
                ("max_depth", ctypes.c_uint), ("read_cost", ctypes.c_uint)]


class _Store:
    """The store at url, opened for one call (with: closed after)."""

    def __init__(self, url):
        self.url = url
        self.h = _vp()
        _check(_lib.dcr_store_handle_open(_cstr(url, "store URL"), 0,
                                          ctypes.byref(self.h)), url)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _lib.dcr_store_handle_close(self.h)
        return False

    def json(self, fn, *args, keep_on=()):
        """fn(handle, *args, &json) parsed; a failure raises DcrError (with
        .result, the parsed JSON, when ret is in keep_on and one came)."""
        out = _vp()
        ret = fn(self.h, *args, ctypes.byref(out))
        try:
            res = json.loads(ctypes.string_at(out.value).decode("utf-8")) if out.value else None
        finally:
            _lib.dcr_free(out)
        try:
            _check(ret, self.url)
        except DcrError as e:
            if -ret in keep_on:
                e.result = res
            raise
        return res


def _vname(v):
    """A version as libdcr takes it: a number, a tag name or "latest"."""
    return _cstr(str(v) if isinstance(v, int) else v, "version")


def log(url):
    """The versions of the store at url, newest first: a list of dicts, as
    `dcrfs-ctl log --json` prints them (version, parent, base, time,
    time_ns, bytes, stored_bytes, kind, tags, files, chunks)."""
    with _Store(url) as s:
        return s.json(_lib.dcr_store_log)


def show(url, v):
    """Version v (a number, a tag name or "latest") with its files: a
    dict, as `dcrfs-ctl show V --json`."""
    with _Store(url) as s:
        return s.json(_lib.dcr_store_show, _vname(v))


def diff(url, a, b):
    """What changed from version a to version b, per file and per
    safetensors tensor: a dict, as `dcrfs-ctl diff A B --json`."""
    with _Store(url) as s:
        return s.json(_lib.dcr_store_diff, _vname(a), _vname(b))


def verify(url, deep=False, versions=None):
    """Check that every object the versions (default: all) need exists and
    matches its hashes; deep also materializes every file. Returns the
    dict of `dcrfs-ctl verify --json` when everything checks out; damage
    raises DcrError (errno EBADMSG) whose message names each damaged
    object and why, with that dict as .result."""
    vs = [_vname(v) for v in (versions or [])]
    arr = (ctypes.c_char_p * max(1, len(vs)))(*vs)
    with _Store(url) as s:
        return s.json(_lib.dcr_store_verify, arr, len(vs), 1 if deep else 0,
                      keep_on=(errno.EBADMSG,))


def gc(url, keep_last, keep_tagged=True, grace=86400, keep_newer=0, dry_run=False,
       max_depth=0, read_cost=0):
    """Remove the versions outside retention and the objects no kept
    version needs, as `dcrfs-ctl gc` does: the newest keep_last versions
    stay, tagged ones with keep_tagged, those committed within keep_newer
    seconds; packs no manifest names and incomplete uploads go once older
    than grace seconds; read_cost bounds the rebase as compact's does
    (`dcrfs-ctl gc --read-cost`). Returns the dict of `dcrfs-ctl gc --json`."""
    o = _GcOptions(keep_last=keep_last, keep_tagged=1 if keep_tagged else 0,
                   keep_newer=int(keep_newer), grace=int(grace),
                   dry_run=1 if dry_run else 0, max_depth=max_depth,
                   read_cost=read_cost)
    with _Store(url) as s:
        return s.json(_lib.dcr_store_gc, ctypes.byref(o))


def tag(url, name, v, sign_key=None):
    """Point tag name at version v (a number, a tag name or "latest");
    returns the version's number. sign_key: the path of an Ed25519
    private key to sign the tag with, as `dcrfs-ctl tag --sign-key`."""
    out = _u64()
    key = _cstr(sign_key, "sign_key", fs=True) if sign_key is not None else None
    with _Store(url) as s:
        _check(_lib.dcr_store_tag_signed(s.h, _cstr(name, "tag"), _vname(v), key,
                                         ctypes.byref(out)), url)
    return out.value


class _Closing:
    """What owns a libdcr handle: close() when a with block ends and when
    the object is collected (a failing close then says nothing)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Commit(_Closing):
    """One new version of the store at url.

    Options: init (create the store if there is none), parent (0: the
    latest), full (every chunk a full frame), allow_nonfinite,
    allow_empty, allow_unchanged (publish a tree equal to the parent's;
    refused otherwise), no_cache, chunk_size, jobs, cache_dir (the committer's
    cache of the parent tree; default as dcrfs-commit's), log_level
    (0 errors .. 3 debug, default 1), sign_key (the path of an Ed25519
    private key, as dcrfs-commit --sign-key: the version and its tag are
    signed; the key is read here, so a bad one raises before any work),
    meta (a dict of trainer metadata, as dcrfs-commit --meta: keys of
    [A-Za-z0-9._-], str values). After publish(), .signer is the key id
    the version was signed with (None: unsigned). A Commit is used by one
    thread; distinct Commits are independent.
    """

    def __init__(self, url, init=False, parent=0, full=False,
                 allow_nonfinite=False, allow_empty=False, no_cache=False,
                 chunk_size=0, jobs=0, cache_dir=None, log_level=1,
                 allow_unchanged=False, sign_key=None, meta=None):
        _lib.dcr_set_log_level(log_level)
        self._keep = []      # memory the library reads at publish
        self._store = _vp()
        self._c = _vp()
        _check(_lib.dcr_store_handle_open(_cstr(url, "store URL"), _STORE_INIT if init else 0,
                                          ctypes.byref(self._store)), url)
        flags = ((_FULL if full else 0) | (_ALLOW_EMPTY if allow_empty else 0) |
                 (_ALLOW_NONFINITE if allow_nonfinite else 0) |
                 (_NO_CACHE if no_cache else 0) |
                 (_ALLOW_UNCHANGED if allow_unchanged else 0))
        # publish(progress=) is told through this, from the calling thread
        # (which is also where a SIGINT handler of Python's can run)
        self._progress = None
        self._progress_fn = _PROGRESS_FN(self._on_progress)
        o = _Options(parent=parent, cache_dir=_cstr(cache_dir, "cache_dir", fs=True) if cache_dir else None,
                     flags=flags, chunk_size=chunk_size, jobs=jobs,
                     progress=self._progress_fn)
        try:
            _check(_lib.dcr_commit_begin(self._store, ctypes.byref(o),
                                         ctypes.byref(self._c)), url)
            if sign_key is not None:
                _check(_lib.dcr_commit_set_sign_key(
                    self._c, _cstr(sign_key, "sign_key", fs=True)), os.fsdecode(sign_key))
            for k, v in sorted((meta or {}).items()):
                _check(_lib.dcr_commit_set_meta(
                    self._c, _cstr(k, "metadata key"),
                    _cstr(v if isinstance(v, (str, bytes)) else str(v),
                          "metadata value of %r" % (k,))), "meta %s" % (k,))
        except Exception:
            self.close()
            raise
        self.info = None
        self.signer = None

    def add_safetensors(self, path, tensors, metadata=None):
        """Add file path holding tensors (a dict name -> array/tensor) in
        the safetensors format, byte for byte as safetensors.save writes it."""
        items = list(tensors.items())
        arr = (_Tensor * max(1, len(items)))()
        for i, (name, t) in enumerate(items):
            dt, shape, addr, nbytes, owner = _tensor_bytes(t)
            sh = (_u64 * max(1, len(shape)))(*shape)
            nm = _cstr(name, "tensor name")
            self._keep += [owner, sh, nm]
            arr[i] = _Tensor(nm, dt.encode(), sh, len(shape), addr, nbytes)
        kv = []
        for k, v in sorted((metadata or {}).items()):
            kv += [_cstr(k, "metadata key"),
                   _cstr(v if isinstance(v, str) else str(v),
                         "metadata value of %r" % (k,))]
        kva = (ctypes.c_char_p * max(1, len(kv)))(*kv)
        _check(_lib.dcr_commit_add_safetensors(self._c, _cstr(path, "path"), arr,
                                               len(items), kva, len(kv) // 2), path)

    def add_bytes(self, path, data, mode=0o644):
        """Add file path whose bytes are data (bytes-like, read in place)."""
        mv = memoryview(data).cast("B")
        buf = (ctypes.c_char * len(mv)).from_buffer_copy(mv) if mv.readonly else \
            (ctypes.c_char * len(mv)).from_buffer(mv)
        self._keep.append(buf)
        r = _Range(ctypes.addressof(buf), len(mv))
        _check(_lib.dcr_commit_add_bytes(self._c, _cstr(path, "path"), mode,
                                         ctypes.byref(r), 1), path)

    def add_tree(self, directory):
        """Add every file below directory, as dcrfs-commit does."""
        _check(_lib.dcr_commit_add_tree(self._c, _cstr(directory, "directory", fs=True)),
               directory)

    def _on_progress(self, _arg, p):
        if self._progress:
            c = p.contents
            self._progress(c.bytes_done, c.bytes_total, c.bytes_uploaded,
                           (c.phase or b"").decode())

    def publish(self, tag=None, progress=None):
        """Publish everything added; returns the new version number.

        progress: called now and then from this thread as
        progress(bytes_done, bytes_total, bytes_uploaded, phase), phase
        "encode" then "publish"; an exception it raises is not passed on.
        Ctrl-C (SIGINT, in the main thread) stops the commit before it
        publishes: KeyboardInterrupt is raised saying that nothing was
        published and that dcrfs-ctl gc collects the packs it uploaded.
        Once publishing has begun it is too late: the version is published
        and KeyboardInterrupt follows, naming it."""
        info = _Info()
        interrupted = []
        old = None

        def on_sigint(signum, frame):
            interrupted.append(signum)
            _lib.dcr_commit_cancel(self._c)
        if threading.current_thread() is threading.main_thread():
            old = signal.signal(signal.SIGINT, on_sigint)
        self._progress = progress
        try:
            ret = _lib.dcr_commit_publish(self._c, _cstr(tag, "tag") if tag else None,
                                          ctypes.byref(info))
        finally:
            self._progress = None
            self._keep = []
            if old is not None:
                signal.signal(signal.SIGINT, old)
        if ret == -errno.ECANCELED and interrupted:
            raise KeyboardInterrupt((_lib.dcr_errmsg() or b"").decode("utf-8", "replace").strip())
        _check(ret, "publish")
        self.info = info
        signer = _lib.dcr_commit_signer(self._c)
        self.signer = signer.decode() if signer else None
        if interrupted:
            raise KeyboardInterrupt("interrupted too late: version %d is published"
                                    % info.version)
        return info.version

    def abort(self):
        """Discard the commit: nothing is published."""
        self.close()

    def close(self):
        if self._c:
            _lib.dcr_commit_free(self._c)
            self._c = _vp()
        if self._store:
            _lib.dcr_store_handle_close(self._store)
            self._store = _vp()
        self._keep = []


# The delta view's files (python/dcrfs/_delta.py): pure Python and numpy.
from ._delta import SKIP, DeltaError, apply_delta, delta_info, iter_delta, read_delta  # noqa: E402,E501
# Reading without a mount (python/dcrfs/_read.py): open, load_safetensors.
from ._read import Reader, load_safetensors, open  # noqa: E402,A004
from ._mount import latest, resolve, wait  # noqa: E402
