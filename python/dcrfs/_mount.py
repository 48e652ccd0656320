# SPDX-License-Identifier: MIT
"""dcrfs._mount - one version per load, and waiting for the next one,
on a dcrfs mount (dcrfs(8) VERSIONS AND LATEST). Pure Python: needs no
libdcr call, only the mount.

MNT/latest is a symlink the kernel resolves again at every path walk:
opening latest/a then latest/b can give a from vN and b from vN+1 when
a commit lands between the two opens. A loader that reads several files
(shards, a config and its weights) must name one version: resolve(mnt)
reads the symlink once and gives MNT/vN, whose files never change. A
directory descriptor of MNT/latest (os.open(..., O_DIRECTORY)) is
pinned the same way: it is vN's directory, and openat() through it
stays in vN whatever latest does.

MNT/.dcrfs/latest holds the number latest shows and a newline; poll(2)
on an open descriptor of it reports POLLIN|POLLPRI once latest moves
from the number last read from it (pread at offset 0 reads it anew and
re-arms). wait() sleeps in poll on it: no timer, no polling of the store.
"""
import errno
import os
import select
import time

_LATEST_FILE = os.path.join(".dcrfs", "latest")


def _read_number(fd, path):
    raw = os.pread(fd, 32, 0)
    if not raw.endswith(b"\n") or not raw[:-1].isdigit():
        raise OSError(errno.EBADMSG, "%s: %r is not a version number and a newline"
                      % (path, raw))
    return int(raw[:-1])


def _open_latest(mnt):
    path = os.path.join(os.fspath(mnt), _LATEST_FILE)
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC), path
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "%s: no such file (is a dcrfs, one "
                                "with .dcrfs/latest, mounted on %s?)" % (path, mnt)) from None


def latest(mnt):
    """The number of the version MNT/latest shows now (0: none yet)."""
    fd, path = _open_latest(mnt)
    try:
        return _read_number(fd, path)
    finally:
        os.close(fd)


def resolve(mnt, version=None):
    """MNT/vN: the directory of one version, whose files never change.

    version None: the version MNT/latest shows now (the symlink read
    once); a number (or "vN"): that version, e.g. the one a
    tensor-parallel leader resolved and sent to its workers, so that
    every rank loads the same one. Load every file of one model (all its
    shards) from the path returned, never from MNT/latest/, which is
    resolved again at every open. Raises FileNotFoundError when the
    store holds no version yet or version is not in it (gone by gc)."""
    mnt = os.fspath(mnt)
    if version is None:
        try:
            target = os.readlink(os.path.join(mnt, "latest"))
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, "%s/latest: no such file (no "
                                    "version in the store yet, or no dcrfs on %s)"
                                    % (mnt, mnt)) from None
    else:
        v = str(version)
        v = v[1:] if v.startswith("v") else v
        if not v.isdigit() or int(v) < 1:
            raise ValueError("dcrfs.resolve: version %r is not a version number" % (version,))
        target = "v%d" % int(v)
    path = os.path.join(mnt, target)
    if not os.path.isdir(path):
        raise FileNotFoundError(errno.ENOENT, "%s: no such version on this mount"
                                % path)
    return path


def wait(mnt, newer_than=None, timeout=None):
    """Block until MNT/latest shows a version newer than newer_than
    (None: than the one it shows now; 0: any) and return its number.

    Sleeps in poll(2) on MNT/.dcrfs/latest, which the mount wakes the
    moment latest moves (within its poll interval of the commit, plus
    the prefetch with prefetch=latest). timeout: seconds (None: no
    limit); when it passes, raises TimeoutError (an OSError, errno
    ETIMEDOUT) naming the version still shown. Safe from any thread;
    each call opens its own descriptor."""
    if timeout is not None and not timeout >= 0:
        raise ValueError("dcrfs.wait: timeout %r is not a number of seconds >= 0" % (timeout,))
    fd, path = _open_latest(mnt)
    try:
        v = _read_number(fd, path)
        if newer_than is None:
            newer_than = v
        newer_than = int(newer_than)
        end = None if timeout is None else time.monotonic() + timeout
        p = select.poll()
        p.register(fd, select.POLLIN | select.POLLPRI)
        while v <= newer_than:
            ms = None
            if end is not None:
                left = end - time.monotonic()
                if left <= 0:
                    raise TimeoutError(errno.ETIMEDOUT, "%s: latest is still v%d after "
                                       "%g s (waiting for a version newer than v%d)"
                                       % (mnt, v, timeout, newer_than))
                ms = int(left * 1000) + 1
            ev = p.poll(ms)
            if not ev:
                continue
            v = _read_number(fd, path)
            if ev[0][1] & (select.POLLERR | select.POLLNVAL) and v <= newer_than:
                raise OSError(errno.EIO, "%s: poll reports an error (is the dcrfs on %s "
                              "still running?)" % (path, mnt))
        return v
    finally:
        os.close(fd)
