#!/usr/bin/env bash
# catalog.sh - the mount survives its own state going bad: an unreadable
# versions/N does not hide N+1 (and is logged once, not every poll); a
# catalog.db with invalid rows, or one that is not a database at all, is
# set aside and rebuilt from the store instead of crashing, hanging or
# refusing to start; and a second dcrfs on the same cache directory is
# refused, naming the pid of the first.
. "$(dirname "$0")/lib.sh"
need_fuse
need_bins
command -v sqlite3 >/dev/null 2>&1 || skip "sqlite3(1) is missing"

mkdir -p "$T/tree"
rand_file "$T/tree/f.bin" 200000 f
printf 'a\n' >"$T/tree/g"
[ "$(commit "$STORE" "$T/tree")" = 1 ] || fail "commit 1"

# wait_for PATH - up to 15 s for PATH to appear
wait_for() {
	local i
	for ((i = 0; i < 150; i++)); do
		[ -e "$1" ] && return 0
		sleep 0.1
	done
	return 1
}

# wait_for_log PATTERN - up to 15 s for the mount's log to show PATTERN
wait_for_log() {
	local i
	for ((i = 0; i < 150; i++)); do
		grep -q -- "$1" "$MOUNT_LOG" && return 0
		sleep 0.1
	done
	return 1
}

# 1. an unreadable versions/0000000002 (a directory) does not stop the
#    mount from seeing version 3 (nor 4), and is logged exactly once: not
#    at every poll, and not never. Each version that shows is a poll
#    after the line, which lists versions/ and meets 2 again.
mount_dcrfs "$STORE" "$MNT" "cache_dir=$CACHE,poll=0.2"
mkdir "$STORE/versions/0000000002"
wait_for_log 'cannot read versions/0000000002' ||
	fail "an unreadable versions/0000000002 was not logged within 15 s: $(cat "$MOUNT_LOG")"
for v in 3 4; do
	flip_bytes "$T/tree/f.bin" 0.01 "f$v"
	[ "$(commit "$STORE" "$T/tree")" = "$v" ] || fail "commit $v"
	wait_for "$MNT/v$v" || fail "v$v not shown 15 s after it was published: $(ls "$MNT")"
	t cmp "$MNT/v$v/f.bin" "$T/tree/f.bin" || fail "v$v/f.bin differs"
	cp "$T/tree/f.bin" "$T/f.v$v"
done
n=$(grep -c 'versions/0000000002' "$MOUNT_LOG" || true)
[ "$n" = 1 ] || fail "versions/0000000002 logged $n times, expected once: $(cat "$MOUNT_LOG")"

# 2. a second dcrfs on the same cache directory is refused, before it
#    daemonizes, naming the first
MNT2=$T/mnt2
mkdir -p "$MNT2"
register_mount "$MNT2"
expect_fail_msg "is in use by another dcrfs (pid $MOUNT_PID, mounted on $MNT)" \
	"$DCRFS" "$STORE" "$MNT2" -o "cache_dir=$CACHE"
mountpoint -q "$MNT2" && fail "the second dcrfs mounted"
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"

DB=$(ls "$CACHE"/*/catalog.db)
DBDIR=$(dirname "$DB")

# check_rebuilt WHAT - mount, read everything, the catalog was set aside
check_rebuilt() {
	local before s now
	# the names of this second and the next 30 are taken (a set-aside
	# of the same second as another): the catalog must pick its own
	now=$(date +%s)
	for ((s = now; s <= now + 30; s++)); do
		[ -e "$DBDIR/catalog.db.corrupt-$s" ] || echo taken >"$DBDIR/catalog.db.corrupt-$s"
	done
	before=$(find "$DBDIR" -name 'catalog.db.corrupt-*' ! -name '*-wal' ! -name '*-shm' | wc -l)
	mount_dcrfs "$STORE" "$MNT" "cache_dir=$CACHE,poll=1"
	t cat "$MNT/v3/g" >/dev/null || fail "$1: cannot read v3/g"
	t cmp "$MNT/v3/f.bin" "$T/f.v3" || fail "$1: v3/f.bin differs"
	t cmp "$MNT/v1/g" "$T/tree/g" || fail "$1: v1/g differs"
	kill -0 "$MOUNT_PID" || fail "$1: dcrfs died"
	grep -q 'catalog.db.corrupt-' "$MOUNT_LOG" ||
		fail "$1: no warning names the set-aside catalog: $(cat "$MOUNT_LOG")"
	umount_dcrfs "$MNT" || fail "$1: dcrfs did not exit cleanly"
	[ "$(find "$DBDIR" -name 'catalog.db.corrupt-*' ! -name '*-wal' ! -name '*-shm' | wc -l)" -gt "$before" ] ||
		fail "$1: no new catalog.db.corrupt-* file (one set aside in the same second as another needs its own name)"
	for ((s = now; s <= now + 30; s++)); do
		[ "$(cat "$DBDIR/catalog.db.corrupt-$s")" = taken ] ||
			fail "$1: the set-aside overwrote catalog.db.corrupt-$s"
	done
}

# 3. invalid rows: chunk size 0 (was: SIGFPE), parent = itself (was: a
#    FUSE thread spinning forever)
sqlite3 "$DB" "UPDATE versions SET chunk_size = 0 WHERE version = 3"
check_rebuilt "chunk_size=0"
sqlite3 "$DB" "UPDATE versions SET parent = 3 WHERE version = 3"
check_rebuilt "parent=self"

# 4. not a database at all (was: refused to start, "file is not a
#    database" / "database disk image is malformed")
head -c 65536 /dev/urandom >"$DB"
check_rebuilt "garbage catalog.db"

# 5. and a clean remount after all that: no new warning
mount_dcrfs "$STORE" "$MNT" "cache_dir=$CACHE,poll=1"
t cmp "$MNT/v3/f.bin" "$T/f.v3" || fail "clean remount: v3/f.bin differs"
! grep -q 'corrupt' "$MOUNT_LOG" || fail "clean remount warned: $(cat "$MOUNT_LOG")"
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"
log "ok"
