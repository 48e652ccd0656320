# shellcheck shell=bash
# lib.sh - shared helpers of the dcrfs integration tests. Source it first:
#
#   . "$(dirname "$0")/lib.sh"
#
# It sets strict mode, finds the binaries, makes a private temporary
# directory $T, and installs an EXIT trap that unmounts every mount the
# test made and kills only the processes the test started (by recorded
# PID). Exit status 77 means "skipped" to automake.
#
# Environment:
#   DCR_BUILDDIR  where dcrfs, dcrfs-commit and dcrfs-synth are
#                 (make check sets it; default: ../../build from here)
#   DCR_SRCDIR    the source tree (default: ../.. from here)
#   TMPDIR        parent of the per-test directory (default /tmp)
#   DCR_KEEP=1    keep the per-test directory after the test
#   DCR_TIMEOUT   seconds allowed for one step that may hang (default 60)

set -euo pipefail

_lib_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DCR_SRCDIR=${DCR_SRCDIR:-$(cd "$_lib_dir/../.." && pwd)}
DCR_BUILDDIR=${DCR_BUILDDIR:-$DCR_SRCDIR/build}
DCR_TIMEOUT=${DCR_TIMEOUT:-60}

DCRFS=$DCR_BUILDDIR/dcrfs
DCRFS_COMMIT=$DCR_BUILDDIR/dcrfs-commit
DCRFS_SYNTH=$DCR_BUILDDIR/dcrfs-synth

TEST_NAME=$(basename "$0" .sh)

# Never touch the user's real caches, whatever a program defaults to.
export XDG_CACHE_HOME
T=$(mktemp -d "${TMPDIR:-/tmp}/dcrfs-$TEST_NAME.XXXXXX")
T=$(cd "$T" && pwd -P)
XDG_CACHE_HOME=$T/xdg-cache

# Where most tests keep their store, mount point and cache (mount_dcrfs's
# default cache_dir); a test with other places sets its own.
STORE=$T/store
MNT=$T/mnt
CACHE=$T/cache

_pids=()     # processes this test started
_mounts=()   # mount points this test mounted
_mount_pid=()  # the dcrfs PID of each entry of _mounts ("" if unknown)
_nlog=0

log() { printf '# %s\n' "$*"; }

# fail MESSAGE - the test failed.
fail() {
	printf 'FAIL: %s: %s\n' "$TEST_NAME" "$*" >&2
	exit 1
}

# skip REASON - the test cannot run here (automake: SKIP).
skip() {
	printf 'SKIP: %s: %s\n' "$TEST_NAME" "$*"
	exit 77
}

# t CMD... - run a step that could hang if dcrfs misbehaves, bounded.
t() {
	timeout -k 5 "$DCR_TIMEOUT" "$@"
}

need_bins() {
	local b
	for b in "$DCRFS" "$DCRFS_COMMIT" "$@"; do
		[ -x "$b" ] || fail "$b not built (DCR_BUILDDIR=$DCR_BUILDDIR)"
	done
}

# need_fuse - skip unless this machine can mount FUSE filesystems.
# py_sanitized LIB - when LIB (libdcr.so) was built with the sanitizers
# (scripts/check with DCR_SANITIZE=1), Python must load their runtimes
# first: export LD_PRELOAD with them for the rest of the test, and keep
# LeakSanitizer from reporting the interpreter's own lifetime
# allocations. Nothing otherwise.
py_sanitized() {
	ldd "$1" 2>/dev/null | grep -q libasan || return 0
	local pre
	pre=$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)
	export LD_PRELOAD=$pre${LD_PRELOAD:+:$LD_PRELOAD}
	export ASAN_OPTIONS=detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}
}

# need_numpy - Debian's python3 with numpy (PY), else skip.
need_numpy() {
	PY=/usr/bin/python3
	[ -x "$PY" ] || skip "$PY not found"
	"$PY" -c 'import numpy' 2>/dev/null ||
		skip "$PY lacks numpy (apt-get install python3-numpy)"
}

# need_python_libdcr [PYTHONPATH...] - Debian's python3 with numpy and
# torch (PY, or DCR_PYTHON) and the built libdcr (LIBDCR), else skip (77;
# under CI, scripts/check fails the run on it); exports DCRFS_LIBDCR and
# PYTHONPATH (python/ and the directories given) for the Python module.
need_python_libdcr() {
	PY=${DCR_PYTHON:-/usr/bin/python3}
	[ -x "$PY" ] || skip "$PY not found"
	"$PY" -c 'import numpy, torch' 2>/dev/null ||
		skip "$PY lacks numpy or torch (apt-get install python3-numpy python3-torch)"
	LIBDCR=$DCR_BUILDDIR/.libs/libdcr.so
	[ -e "$LIBDCR" ] || skip "$LIBDCR not built"
	local pp=$DCR_SRCDIR/python d
	for d in "$@"; do pp=$pp:$d; done
	export DCRFS_LIBDCR=$LIBDCR PYTHONPATH=$pp
	py_sanitized "$LIBDCR"
}

need_fuse() {
	[ -c /dev/fuse ] || skip "/dev/fuse is missing"
	[ -r /dev/fuse ] && [ -w /dev/fuse ] || skip "/dev/fuse is not accessible"
	command -v fusermount3 >/dev/null 2>&1 || skip "fusermount3 is missing"
	command -v mountpoint >/dev/null 2>&1 || skip "mountpoint(1) is missing"
	grep -qw fuse /proc/filesystems 2>/dev/null ||
		skip "the kernel has no fuse filesystem"
}

need_root() {
	[ "$(id -u)" -eq 0 ] || skip "needs root"
}

# commit STORE DIR [ARGS...] - dcrfs-commit DIR into STORE with a commit
# cache private to this test; prints the version on stdout.
commit() {
	local store=$1 dir=$2
	shift 2
	t "$DCRFS_COMMIT" --init --store "$store" --cache-dir "$T/commit-cache" \
		--quiet "$@" "$dir"
}

# chain_tree V SIZE - the source tree $T/s$V of a synthetic chain: for V 1
# dcrfs-synth init (SIZE, seed 1, no state kept in the tree), after it one
# step from $T/s$((V - 1)) (3 % of the values, uniformly, seed V; the
# synth state in $T/state, so the trees are made in order).
chain_tree() {
	if [ "$1" = 1 ]; then
		t "$DCRFS_SYNTH" init --size "$2" --seed 1 --quiet "$T/s1"
		rm -f "$T/s1/.dcrfs-synth.state"
	else
		t "$DCRFS_SYNTH" step --mode uniform --rate 0.03 --seed "$1" \
			--in "$T/s$(($1 - 1))" --out "$T/s$1" --state "$T/state" --quiet
	fi
}

# chain_store STORE SIZE FROM TO [EDIT] - make the trees $T/s$FROM to
# $T/s$TO (chain_tree) and commit each into STORE, as version $v (else
# the test fails). EDIT, a shell function, runs as EDIT V after tree V
# is made and before its commit: it may change the tree and set
# CHAIN_ARGS, the extra dcrfs-commit arguments of that commit (none
# unless it does).
chain_store() {
	local store=$1 size=$2 from=$3 to=$4 edit=${5:-} v
	for ((v = from; v <= to; v++)); do
		chain_tree "$v" "$size"
		CHAIN_ARGS=()
		[ -z "$edit" ] || "$edit" "$v"
		[ "$(commit "$store" "$T/s$v" ${CHAIN_ARGS[@]+"${CHAIN_ARGS[@]}"})" = "$v" ] ||
			fail "s$v is not version $v"
	done
}

# same MNT V: version V under MNT is byte for byte the source tree $T/s$V
# (the same files, the same bytes).
same() {
	local mnt=$1 v=$2
	diff <(cd "$T/s$v" && find . -type f | sort) <(cd "$mnt/v$v" && find . -type f | sort) >/dev/null ||
		fail "v$v under $mnt does not list the files of s$v"
	(cd "$T/s$v" && find . -type f -print0 | xargs -0 -I{} cmp -s {} "$mnt/v$v/{}") ||
		fail "v$v under $mnt differs from s$v"
}

# _forget_mount MNT - drop MNT from the bookkeeping.
_forget_mount() {
	local i
	for i in "${!_mounts[@]}"; do
		if [ "${_mounts[$i]}" = "$1" ]; then
			unset '_mounts[i]' '_mount_pid[i]'
		fi
	done
}

# mount_dcrfs STORE MNT [OPTS] - mount STORE on MNT with dcrfs in the
# foreground, in the background of this shell; OPTS is a comma list of
# -o options (cache_dir defaults to $T/cache). Waits until MNT is a mount
# point. Sets MOUNT_PID and MOUNT_LOG.
mount_dcrfs() {
	local store=$1 mnt=$2 opts=${3:-} i
	case ",$opts," in
	*,cache_dir=*) ;;
	*) opts="cache_dir=$T/cache${opts:+,$opts}" ;;
	esac
	mkdir -p "$mnt"
	_nlog=$((_nlog + 1))
	MOUNT_LOG=$T/dcrfs.$_nlog.log
	log "dcrfs $store $mnt -f -o $opts"
	"$DCRFS" "$store" "$mnt" -f -o "$opts" >"$MOUNT_LOG" 2>&1 &
	MOUNT_PID=$!
	_pids+=("$MOUNT_PID")
	_mounts+=("$mnt")
	_mount_pid+=("$MOUNT_PID")
	for ((i = 0; i < 200; i++)); do
		if mountpoint -q "$mnt"; then
			return 0
		fi
		if ! kill -0 "$MOUNT_PID" 2>/dev/null; then
			wait "$MOUNT_PID" 2>/dev/null || true
			_forget_mount "$mnt"
			cat "$MOUNT_LOG" >&2
			fail "dcrfs exited before $mnt was mounted"
		fi
		sleep 0.1
	done
	cat "$MOUNT_LOG" >&2
	fail "$mnt not mounted after 20 s"
}

# _wait_pid PID SECONDS - wait for a child to exit; 1 if it did not.
_wait_pid() {
	local pid=$1 n=$(($2 * 10)) i
	for ((i = 0; i < n; i++)); do
		kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
		sleep 0.1
	done
	return 1
}

# umount_dcrfs MNT - unmount MNT and wait for its daemon to exit.
# Returns non-zero if the daemon exited with an error.
umount_dcrfs() {
	local mnt=$1 pid="" i rc=0
	for i in "${!_mounts[@]}"; do
		[ "${_mounts[$i]}" = "$mnt" ] && pid=${_mount_pid[$i]}
	done
	if mountpoint -q "$mnt"; then
		t fusermount3 -u "$mnt" 2>/dev/null ||
			t fusermount3 -uz "$mnt" 2>/dev/null ||
			t umount -l "$mnt" 2>/dev/null || true
	fi
	_forget_mount "$mnt"
	if [ -n "$pid" ]; then
		if ! _wait_pid "$pid" 10; then
			kill -TERM "$pid" 2>/dev/null || true
			_wait_pid "$pid" 5 || kill -KILL "$pid" 2>/dev/null || true
			return 1
		fi
		wait "$pid" 2>/dev/null || rc=$?
	fi
	mountpoint -q "$mnt" && return 1
	return "$rc"
}

# register_mount MNT - a mount made some other way (mount -T ...): the
# cleanup unmounts it; its daemon is not our child.
register_mount() {
	_mounts+=("$1")
	_mount_pid+=("")
}

# start_bg CMD... - start a background process the cleanup will kill;
# sets BG_PID.
start_bg() {
	"$@" &
	BG_PID=$!
	_pids+=("$BG_PID")
}

_cleanup() {
	local rc=$? i pid m idx
	set +e
	idx=("${!_mounts[@]}")
	for ((i = ${#idx[@]} - 1; i >= 0; i--)); do
		m=${_mounts[${idx[$i]}]}
		if mountpoint -q "$m"; then
			timeout -k 2 10 fusermount3 -u "$m" 2>/dev/null ||
				timeout -k 2 10 fusermount3 -uz "$m" 2>/dev/null ||
				timeout -k 2 10 umount -l "$m" 2>/dev/null
		fi
	done
	for pid in "${_pids[@]}"; do
		kill -0 "$pid" 2>/dev/null || continue
		_wait_pid "$pid" 3 && continue
		kill -TERM "$pid" 2>/dev/null
		_wait_pid "$pid" 5 || kill -KILL "$pid" 2>/dev/null
	done
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
		for f in "$T"/dcrfs.*.log; do
			[ -s "$f" ] || continue
			echo "--- $f"
			# a sanitizer's report is kept whole: its stacks are
			# what explains the failure
			if grep -q 'Sanitizer' "$f"; then
				sed -n '/==[0-9]*==ERROR\|runtime error/,$p' "$f"
			else
				tail -n 40 "$f"
			fi
		done
	fi
	if [ "${DCR_KEEP:-0}" = 1 ]; then
		echo "# kept $T"
	else
		# never follow into a mount that could not be removed
		if ! grep -qF " $T/" /proc/self/mounts; then
			rm -rf "$T"
		else
			echo "# $T still has mounts; not removed" >&2
		fi
	fi
	exit "$rc"
}
trap _cleanup EXIT
trap 'exit 130' INT TERM
# a command failing under set -e says where, instead of a silent exit
set -E
trap 'printf "FAIL: %s: line %s: %s (status %s)\n" "$TEST_NAME" "$LINENO" "$BASH_COMMAND" "$?" >&2' ERR

# make_tree DIR SEED SIZE... - write files f0 f1 ... of the given sizes
# (bytes) with deterministic pseudo-random content.
rand_file() { # PATH SIZE SEED
	python3 - "$1" "$2" "$3" <<'PY'
import random, sys
path, size, seed = sys.argv[1], int(sys.argv[2]), sys.argv[3]
r = random.Random(seed)
with open(path, "wb") as f:
    left = size
    while left:
        n = min(left, 1 << 20)
        f.write(r.randbytes(n))
        left -= n
PY
}

# flip_bytes PATH FRACTION SEED - change about FRACTION of the bytes of
# PATH in place (a small edit, like a training step).
flip_bytes() {
	python3 - "$1" "$2" "$3" <<'PY'
import random, sys
path, frac, seed = sys.argv[1], float(sys.argv[2]), sys.argv[3]
r = random.Random(seed)
with open(path, "r+b") as f:
    data = bytearray(f.read())
    for _ in range(max(1, int(len(data) * frac))):
        i = r.randrange(len(data))
        data[i] ^= 1 + r.randrange(255)
    f.seek(0)
    f.write(data)
PY
}

# stat_size PATH
# rot_cache CACHE_DIR - silent media corruption of a dcrfs cache: flip
# one byte in every allocated 4 KiB block of every slab, put each file's
# times back (same inode, size and mtime) and drop its pages. Prints the
# number of blocks flipped.
rot_cache() {
	find "$1" -path '*/slabs/*' ! -name '*.sums' -type f -print0 | xargs -0 python3 -c 'import os, sys
n = 0
for p in sys.argv[1:]:
    st = os.stat(p)
    fd = os.open(p, os.O_RDWR)
    off = 0
    while True:  # one byte in every allocated 4 KiB block
        try:
            d = os.lseek(fd, off, os.SEEK_DATA)
        except OSError:
            break
        h = os.lseek(fd, d, os.SEEK_HOLE)
        for b in range(d, h, 4096):
            at = min(b + 7, h - 1)  # a slab ends where its file does
            x = bytearray(os.pread(fd, 1, at))
            x[0] ^= 0x01
            os.pwrite(fd, bytes(x), at)
            n += 1
        off = h
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    st2 = os.stat(p)
    assert (st2.st_ino, st2.st_size, st2.st_mtime_ns) == \
        (st.st_ino, st.st_size, st.st_mtime_ns), p
print(n)
'
}

# py FILE SCRIPT [ARGS...] - run the Python SCRIPT with the JSON document
# in FILE (- : standard input) as d; ARGS are sys.argv[2:].
py() {
	local f=$1 s=$2
	shift 2
	python3 -c "import json, sys, hashlib, os
d = json.load(sys.stdin if sys.argv[1] == '-' else open(sys.argv[1]))
$s" "$f" "$@"
}

stat_size() { t stat -c %s "$1"; }

# need_test_hooks - the build has the test hooks (configure
# --enable-test-hooks; make check exports DCR_TEST_HOOKS): else skip
# (77), or fail under CI=true (HACKING, test hooks).
need_test_hooks() {
	if [ "${DCR_TEST_HOOKS:-no}" != yes ]; then
		[ "${CI:-}" != true ] || fail "CI needs a build with configure --enable-test-hooks"
		skip "needs a build with configure --enable-test-hooks (DCR_TEST_HOOKS=yes)"
	fi
}

# mount_status MNT KEY... - a value of MNT/.dcrfs/status.json, as JSON
# (a string keeps its quotes); copied to $T/status.json for messages.
mount_status() {
	local mnt=$1
	shift
	t cat "$mnt/.dcrfs/status.json" >"$T/status.json"
	py "$T/status.json" 'v = d
for k in sys.argv[2:]:
    v = v[k]
print(json.dumps(v))' "$@"
}

# need_passthrough MNT - the mount on MNT (mounted by mount_dcrfs) got
# FUSE passthrough: skip (77) where the kernel does not offer it; fail
# where it offers it and the mount did not get it.
need_passthrough() {
	[ "$(mount_status "$1" passthrough offered)" = true ] ||
		skip "this kernel does not offer FUSE passthrough (CONFIG_FUSE_PASSTHROUGH, Linux >= 6.9)"
	[ "$(mount_status "$1" passthrough active)" = true ] ||
		fail "the kernel offers passthrough but the mount did not get it: $(grep -i passthrough "$MOUNT_LOG")"
}

# expect_status WANT OUTPUT_PATTERN CMD... - CMD exits WANT and its
# output (stdout and stderr) contains OUTPUT_PATTERN (a grep -E regex)
expect_status() {
	local want=$1 pat=$2 rc=0
	shift 2
	t "$@" >"$T/out" 2>&1 </dev/null || rc=$?
	[ "$rc" = "$want" ] || fail "'$*' exited $rc, expected $want: $(cat "$T/out")"
	grep -qE -- "$pat" "$T/out" || fail "'$*': no '$pat' in: $(cat "$T/out")"
}

# expect_fail_msg MESSAGE CMD... - CMD must fail and print MESSAGE.
expect_fail_msg() {
	local want=$1 out rc=0
	shift
	out=$(t "$@" 2>&1) || rc=$?
	[ "$rc" -ne 0 ] || fail "'$*' succeeded, expected '$want'"
	case "$out" in
	*"$want"*) ;;
	*) fail "'$*' failed without '$want': $out" ;;
	esac
}

cd "$T"

# file_digest FILE FORMAT CHUNK_SIZE - the digest a manifest of FORMAT
# records for FILE: its SHA-256 before format 3, the SHA-256 of its chunk
# SHA-256s from 3 on (dcr_file_hasher).
file_digest() {
	python3 - "$@" <<'PY'
import hashlib, sys
path, fmt, cs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = open(path, "rb").read()
if fmt < 3:
    print(hashlib.sha256(data).hexdigest())
else:
    h = hashlib.sha256()
    for i in range(0, len(data), cs):
        h.update(hashlib.sha256(data[i:i + cs]).digest())
    print(h.hexdigest())
PY
}
