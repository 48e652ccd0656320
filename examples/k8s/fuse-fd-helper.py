#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""fuse-fd-helper.py - mount a FUSE file system for a daemon that may not.

  fuse-fd-helper.py MOUNTPOINT -- DAEMON ARGS...

Opens /dev/fuse, mounts it on MOUNTPOINT (read-only, nosuid, nodev,
allow_other, fuse.dcrfs), then runs DAEMON ARGS with every "{fd}" in
ARGS replaced by /dev/fd/N, the open descriptor, after dropping
CAP_SYS_ADMIN from its bounding set (setpriv, util-linux). dcrfs takes
such a mount point as given (dcrfs(8): a mount point /dev/fd/N):

  fuse-fd-helper.py /dcr/mnt -- dcrfs s3://weights/run7 {fd} -f \\
      -o cache_dir=/var/cache/dcrfs

This is layout B of examples/k8s/README.md: the privilege to mount is
in this helper, for the one mount(2) it makes; the daemon that parses
store bytes runs without it (no passthrough then: the kernel wants
CAP_SYS_ADMIN to register backing files, and dcrfs says so once).
Exit status: the daemon's, or 1 when the mount fails (with the reason),
2 on a usage error.
"""
import ctypes
import errno
import os
import stat
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV = 1, 2, 4


def main(argv):
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        return 2
    mnt, cmd = argv[1], argv[3:]
    try:
        if not stat.S_ISDIR(os.stat(mnt).st_mode):
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        fd = os.open("/dev/fuse", os.O_RDWR)
    except OSError as e:
        sys.stderr.write("fuse-fd-helper: mount on %s: %s\n"
                         % (mnt, e.strerror))
        return 1
    data = "fd=%d,rootmode=40000,user_id=%d,group_id=%d,allow_other" % (
        fd, os.getuid(), os.getgid())
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"dcrfs", mnt.encode(), b"fuse.dcrfs",
                  MS_RDONLY | MS_NOSUID | MS_NODEV, data.encode()) != 0:
        err = ctypes.get_errno()
        sys.stderr.write("fuse-fd-helper: mount on %s: %s\n"
                         % (mnt, os.strerror(err)))
        return 1
    os.set_inheritable(fd, True)
    cmd = [a.replace("{fd}", "/dev/fd/%d" % fd) for a in cmd]
    try:
        os.execvp("setpriv", ["setpriv", "--bounding-set=-sys_admin",
                              "--"] + cmd)
    except OSError as e:
        sys.stderr.write("fuse-fd-helper: setpriv: %s\n" % e.strerror)
        libc.umount2(mnt.encode(), 2)  # MNT_DETACH: leave no dead mount
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
