#!/usr/bin/env bash
# readonly.sh - every kind of write to the mount fails with EROFS
# ("Read-only file system"), and nothing changes: first as mounted (the
# kernel's ro flag refuses most writes before dcrfs sees them), then with
# the kernel flag off (DCRFS_TEST_KERNEL_RW=1), where dcrfs's own write
# handlers must refuse every one.
. "$(dirname "$0")/lib.sh"
need_fuse
need_bins

EROFS="Read-only file system"

mkdir -p "$T/tree/d"
rand_file "$T/tree/f" 100000 f
printf 'x\n' >"$T/tree/d/g"
[ "$(commit "$STORE" "$T/tree" --tag t1)" = 1 ] || fail "commit is not version 1"

# writes_fail - the battery of writes, against the mount at $MNT
writes_fail() {
V=$MNT/v1
expect_fail_msg "$EROFS" touch "$V/new"
expect_fail_msg "$EROFS" touch "$V/f"
expect_fail_msg "$EROFS" sh -c "echo x >'$V/f'"
expect_fail_msg "$EROFS" sh -c "echo x >>'$V/f'"
expect_fail_msg "$EROFS" sh -c "echo x >'$V/d/new'"
expect_fail_msg "$EROFS" truncate -s 0 "$V/f"
expect_fail_msg "$EROFS" mkdir "$V/newdir"
expect_fail_msg "$EROFS" mkdir "$MNT/v9"
expect_fail_msg "$EROFS" rm -f "$V/f"
expect_fail_msg "$EROFS" rm -f "$V/d/g"
expect_fail_msg "$EROFS" rmdir "$V/d"
expect_fail_msg "$EROFS" rm -rf "$V"
expect_fail_msg "$EROFS" mv "$V/f" "$V/f2"
expect_fail_msg "$EROFS" mv "$V/f" "$V/d/f"
expect_fail_msg "$EROFS" mv "$MNT/v1" "$MNT/v2"
expect_fail_msg "$EROFS" chmod 600 "$V/f"
expect_fail_msg "$EROFS" chmod 700 "$V/d"
expect_fail_msg "$EROFS" chown 1:1 "$V/f"
expect_fail_msg "$EROFS" ln -s f "$V/link"
expect_fail_msg "$EROFS" ln "$V/f" "$V/hard"
expect_fail_msg "$EROFS" rm -f "$MNT/latest"
expect_fail_msg "$EROFS" ln -sfn v1 "$MNT/latest"
expect_fail_msg "$EROFS" rm -f "$MNT/tags/t1"
expect_fail_msg "$EROFS" touch "$MNT/tags/new"
expect_fail_msg "$EROFS" python3 -c "import os; os.open('$V/f', os.O_RDWR)"
expect_fail_msg "$EROFS" python3 -c "import os; os.open('$V/f', os.O_WRONLY | os.O_TRUNC)"
expect_fail_msg "$EROFS" python3 -c "import os; os.open('$V/new', os.O_CREAT | os.O_WRONLY)"
expect_fail_msg "$EROFS" mknod "$V/fifo" p
expect_fail_msg "$EROFS" python3 -c "import os; os.setxattr('$V/f', 'user.x', b'1')"
}

mount_dcrfs "$STORE" "$MNT" poll=1
writes_fail

# nothing changed, and the mount is still serving
mountpoint -q "$MNT" || fail "the mount went away"
t diff -r "$T/tree" "$V" || fail "v1 changed"
[ "$(t readlink "$MNT/latest")" = v1 ] || fail "latest changed"
[ "$(t ls "$V" | tr '\n' ' ')" = "d f " ] || fail "v1 lists: $(ls "$V")"

# the mount itself says ro
findmnt -n -o OPTIONS --target "$MNT" | tr ',' '\n' | grep -qx ro ||
	fail "the mount is not ro: $(findmnt -n -o OPTIONS --target "$MNT")"

umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly on unmount"

# The same without the kernel's ro flag: now every refusal is dcrfs's
# (a test hook: only in a build configured with --enable-test-hooks).
if [ "${DCR_TEST_HOOKS:-no}" != yes ]; then
	[ "${CI:-}" = true ] && fail "needs a build with configure --enable-test-hooks"
	log "ok (dcrfs's own EROFS handlers not reached: no test hooks in this build)"
	exit 0
fi
DCRFS_TEST_KERNEL_RW=1 mount_dcrfs "$STORE" "$MNT" poll=1
! findmnt -n -o OPTIONS --target "$MNT" | tr ',' '\n' | grep -qx ro ||
	fail "DCRFS_TEST_KERNEL_RW=1 still mounted ro: the handlers are not reached"
writes_fail
t diff -r "$T/tree" "$V" || fail "v1 changed through dcrfs's own handlers"
[ "$(t readlink "$MNT/latest")" = v1 ] || fail "latest changed"
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly on unmount"
log "ok"
