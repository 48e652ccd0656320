#!/usr/bin/python3
"""xattr_prov.py - the checks of tests/integration/xattr.sh: the
provenance extended attributes of a dcrfs mount (dcrfs(8) PROVENANCE),
through os.getxattr / os.listxattr, getfattr(1) and libc's getxattr(2)
and listxattr(2) themselves (size 0, ERANGE), against what the test
committed and what the store holds (dcrfs-ctl show --json, the manifest
objects of a directory store). Expected values are computed here from
the committed trees and the store's bytes, never from the mount.

  xattr_prov.py tree MNT DIR SHOW STORE SRC SIGNER [META]
      every node of MNT/DIR (DIR: vN, latest, tags/NAME) carries exactly
      the attributes of version SHOW (dcrfs-ctl show --json output) whose
      files are the tree SRC; SIGNER the signer expected, META a JSON
      object of the trainer metadata expected (default none)
  xattr_prov.py none MNT
      the inodes outside the version trees carry no attribute
  xattr_prov.py readonly PATH
      setting or removing an attribute fails with EROFS or ENOTSUP
"""
import ctypes
import errno
import hashlib
import json
import os
import struct
import subprocess
import sys
import time

P = "user.dcrfs."
FIXED = [P + "version", P + "parent", P + "time", P + "digest", P + "signer"]
UNKNOWN = [P + "nope", P + "meta.nope", P + "meta.", P + "meta", "user.dcrfs",
           P + "version.x", P + "VERSION", "user.other", "security.selinux",
           "trusted.dcrfs.version"]

libc = ctypes.CDLL(None, use_errno=True)
libc.getxattr.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p,
                          ctypes.c_size_t]
libc.getxattr.restype = ctypes.c_ssize_t
libc.listxattr.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
libc.listxattr.restype = ctypes.c_ssize_t


def iso(ns):
    """ISO 8601 UTC with nanoseconds of ns since the epoch."""
    s, r = divmod(ns, 10**9)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s)) + ".%09dZ" % r


def manifest_check(store, v):
    """The manifest's check: SHA-256 of its header and body (the 32
    bytes after them in the object say the same, which proves that this
    reads the format right)."""
    with open(os.path.join(store, "versions", "%010d" % v), "rb") as f:
        obj = f.read()
    assert obj[:8] == b"DCRMANIF", "v%d: not a manifest" % v
    n = struct.unpack_from("<Q", obj, 24)[0]
    h = hashlib.sha256(obj[:32 + n]).digest()
    assert obj[32 + n:64 + n] == h, "v%d: check misread" % v
    return h.hex()


def file_digest(path, kind, chunk_size):
    """A file's digest as the manifest's format defines it (dcrfs(8))."""
    with open(path, "rb") as f:
        data = f.read()
    if kind == "sha256":
        return hashlib.sha256(data).hexdigest()
    assert kind == "sha256-of-chunks", kind
    h = hashlib.sha256()
    for off in range(0, len(data), chunk_size):
        h.update(hashlib.sha256(data[off:off + chunk_size]).digest())
    return h.hexdigest()


def c_getxattr(path, name, size):
    """libc getxattr of size bytes: (length, value or None, errno)."""
    buf = ctypes.create_string_buffer(max(size, 1))
    n = libc.getxattr(path.encode(), name.encode(), buf if size else None,
                      size)
    return n, (buf.raw[:n] if n >= 0 and size else None), \
        (ctypes.get_errno() if n < 0 else 0)


def c_listxattr(path, size):
    buf = ctypes.create_string_buffer(max(size, 1))
    n = libc.listxattr(path.encode(), buf if size else None, size)
    return n, (buf.raw[:n] if n >= 0 and size else None), \
        (ctypes.get_errno() if n < 0 else 0)


def getfattr_dump(path):
    """What getfattr -d -m - shows of path, as a dict."""
    out = subprocess.run(["getfattr", "-d", "-m", "-", "-e", "text",
                          "--absolute-names", path], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    got = {}
    for line in out.splitlines():
        if not line or line.startswith("#"):
            continue
        k, v = line.split("=", 1)
        assert v.startswith('"') and v.endswith('"'), line
        got[k] = unescape(v[1:-1])
    return got


def unescape(v):
    r"""getfattr -e text's quoting undone: \\, \" and \NNN (octal)."""
    out, i = bytearray(), 0
    b = v.encode()
    while i < len(b):
        if b[i:i + 1] == b"\\" and b[i + 1:i + 4].isdigit():
            out.append(int(b[i + 1:i + 4], 8))
            i += 4
        elif b[i:i + 1] == b"\\":
            out += b[i + 1:i + 2]
            i += 2
        else:
            out += b[i:i + 1]
            i += 1
    return out.decode()


def expect_enodata(what, fn):
    try:
        v = fn()
    except OSError as e:
        assert e.errno == errno.ENODATA, "%s: errno %d, not ENODATA" % (
            what, e.errno)
        return
    raise AssertionError("%s: gave %r, not ENODATA" % (what, v))


def check_node(path, want):
    """path carries exactly want (an ordered dict of name -> value)."""
    names = os.listxattr(path)
    assert names == list(want), "%s lists %r, not %r" % (path, names,
                                                           list(want))
    for k, v in want.items():
        got = os.getxattr(path, k)
        assert got == v.encode(), "%s %s = %r, not %r" % (path, k, got, v)
    for k in UNKNOWN:
        expect_enodata("%s %s" % (path, k), lambda: os.getxattr(path, k))
    # getxattr(2) and listxattr(2) themselves: size 0 says the size
    # needed, a buffer one byte short fails ERANGE, an exact one works
    wantlist = b"".join(k.encode() + b"\0" for k in want)
    n, _, e = c_listxattr(path, 0)
    assert n == len(wantlist), "%s: listxattr size 0 = %d (errno %d), " \
        "not %d" % (path, n, e, len(wantlist))
    n, _, e = c_listxattr(path, len(wantlist) - 1)
    assert n == -1 and e == errno.ERANGE, \
        "%s: listxattr one byte short = %d errno %d" % (path, n, e)
    n, val, _ = c_listxattr(path, len(wantlist))
    assert val == wantlist, "%s: listxattr exact = %r" % (path, val)
    for k, v in want.items():
        b = v.encode()
        n, _, e = c_getxattr(path, k, 0)
        assert n == len(b), "%s %s: size 0 = %d errno %d" % (path, k, n, e)
        if len(b) > 1:  # (a size of 0 is the query of the size)
            n, _, e = c_getxattr(path, k, len(b) - 1)
            assert n == -1 and e == errno.ERANGE, \
                "%s %s: one byte short = %d errno %d" % (path, k, n, e)
        if b:
            n, val, _ = c_getxattr(path, k, len(b))
            assert val == b, "%s %s: exact = %r" % (path, k, val)
    n, _, e = c_getxattr(path, P + "nope", 0)
    assert n == -1 and e == errno.ENODATA, "size-0 query of an unknown name"
    got = getfattr_dump(path)
    assert got == dict(want), "getfattr -d %s: %r, not %r" % (path, got,
                                                              dict(want))


def cmd_tree(mnt, d, showfile, store, src, signer, meta="{}"):
    with open(showfile) as f:
        show = json.load(f)
    meta = json.loads(meta)
    v = show["version"]
    common = {
        P + "version": str(v),
        P + "parent": str(show["parent"]),
        P + "time": iso(show["time_ns"]),
    }
    assert show["time"] == iso(show["time_ns"])[:19] + "Z", show["time"]
    assert show["signer"] == signer, "show says signer %r" % show["signer"]
    assert show.get("meta", {}) == meta, "show says meta %r" % show.get("meta")
    files = {e["path"]: e for e in show["files"]}
    check = manifest_check(store, v)
    top = os.path.join(mnt, d)
    seen = 0
    for root, dirs, names in os.walk(src):
        rel = os.path.relpath(root, src)
        rel = "" if rel == "." else rel
        for name in [None] + sorted(names):
            r = os.path.join(rel, name) if name else rel
            if name is None:
                assert r == "" or files[r]["type"] == "dir", r
                digest = "manifest-sha256:" + check
            else:
                e = files[r]
                assert e["type"] == "file", r
                want = file_digest(os.path.join(src, r), e["digest_kind"],
                                   show["chunk_size"])
                assert e["digest"] == want, "show's digest of %s" % r
                digest = e["digest_kind"] + ":" + want
            want = dict(common)
            want[P + "digest"] = digest
            want[P + "signer"] = signer
            for k in sorted(meta):
                want[P + "meta." + k] = meta[k]
            check_node(os.path.join(top, r) if r else top, want)
            seen += 1
    assert seen == len(files) + 1, "%d nodes checked, show has %d" % (
        seen, len(files) + 1)
    print("%s: %d nodes" % (d, seen))


def cmd_none(mnt):
    for r in ["", "tags", ".dcrfs", ".dcrfs/status.json", ".dcrfs/metrics",
              "delta", "latest"]:
        p = os.path.join(mnt, r)
        if not os.path.lexists(p):
            assert r == "delta", p  # a mount may have no delta view
            continue
        names = os.listxattr(p, follow_symlinks=False)
        assert names == [], "%s lists %r" % (p, names)
        n, _, e = c_listxattr(p, 0) if not os.path.islink(p) else (0, 0, 0)
        assert n == 0, "%s: listxattr size 0 = %d errno %d" % (p, n, e)
        for k in FIXED + UNKNOWN:
            expect_enodata("%s %s" % (p, k),
                           lambda: os.getxattr(p, k, follow_symlinks=False))
    tags = os.listdir(os.path.join(mnt, "tags"))
    for t in tags:
        p = os.path.join(mnt, "tags", t)
        assert os.listxattr(p, follow_symlinks=False) == [], p
    print("no attributes outside the version trees (%d tags)" % len(tags))


def cmd_readonly(path):
    for fn, what in ((lambda: os.setxattr(path, P + "version", b"9"), "set"),
                     (lambda: os.setxattr(path, "user.x", b"1"), "set new"),
                     (lambda: os.removexattr(path, P + "version"), "remove")):
        try:
            fn()
        except OSError as e:
            assert e.errno in (errno.EROFS, errno.ENOTSUP), \
                "%s %s: errno %d" % (what, path, e.errno)
            continue
        raise AssertionError("%s %s succeeded" % (what, path))


def main(argv):
    cmd, args = argv[1], argv[2:]
    if cmd == "tree":
        cmd_tree(*args)
    elif cmd == "none":
        cmd_none(*args)
    elif cmd == "readonly":
        cmd_readonly(*args)
    else:
        raise SystemExit("xattr_prov.py: unknown command " + cmd)


if __name__ == "__main__":
    main(sys.argv)
