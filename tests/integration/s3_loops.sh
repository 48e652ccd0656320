#!/usr/bin/env bash
# s3_loops.sh - a server whose answers never end, or that stops answering,
# never keeps dcrfs, dcrfs-ctl or dcrfs-commit: faults injected by the
# proxy on loopback (tests/integration/faultproxy.py).
#  1. A listing that never ends (IsTruncated=true, the same token each
#     time): the mount, `dcrfs-ctl log` and `dcrfs-commit` fail within
#     s3_timeout + 1 s, naming the store and the server.
#  2. A listing answered with garbage or an empty 200 is an error, not an
#     empty store: the mount and `log` fail, and gc deletes nothing.
#  3. SIGTERM with the server not answering: the mount (foreground and
#     detached), `log` and the commit end within 1 s.
#  4. GETs answered with another object's bytes, shifted bytes, an empty
#     200, a huge Content-Length, garbage: the right bytes or EIO, never
#     others.
#  5. `fusermount3 -u` with the store failing (503 forever, stalled,
#     gone): the daemon exits within 1 s of the unmount.
. "$(dirname "$0")/lib.sh"
. "$DCR_SRCDIR/tests/integration/s3lib.sh"
need_fuse
need_bins
s3_store
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
UPSTREAM=$AWS_ENDPOINT_URL
RULES=$T/rules.json
FLOG=$T/faults.log
TO=2 # s3_timeout, seconds
export DCR_S3_READ_TIMEOUT_MS=$((TO * 1000))
: >"$FLOG"
echo '[]' >"$RULES"

# start_proxy - (re)start the fault proxy; sets PROXY, PROXY_PID, P_OPTS
start_proxy() {
	start_faultproxy "$UPSTREAM" "$RULES" "$FLOG"
	export AWS_ENDPOINT_URL=$PROXY
	P_BASE="endpoint=$PROXY,region=$AWS_REGION,credentials=$S3_CREDS,path_style"
	P_OPTS="$P_BASE,s3_timeout=$TO"
}
rules() {
	printf '%s\n' "$1" >"$RULES.tmp"
	mv "$RULES.tmp" "$RULES"
}
injected() {
	grep -qE "^$1 [A-Z]+ .*$2" "$FLOG"
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }
# wait_exit PID MS - wait up to MS ms for PID (a child) to exit; prints
# how long it took; 1 if it did not exit
wait_exit() {
	local pid=$1 t0 ms
	t0=$(now_ms)
	while kill -0 "$pid" 2>/dev/null; do
		ms=$(($(now_ms) - t0))
		[ "$ms" -le "$2" ] || { echo "$ms"; return 1; }
		sleep 0.02
	done
	echo $(($(now_ms) - t0))
}
# must_fail_fast TAG LIMIT_MS CMD... - CMD fails (not by timeout) within
# LIMIT_MS, naming the store and the server; its stderr in $T/TAG.err
must_fail_fast() {
	local tag=$1 limit=$2 t0 ms rc=0
	shift 2
	t0=$(now_ms)
	timeout -k 2 30 "$@" >"$T/$tag.out" 2>"$T/$tag.err" || rc=$?
	ms=$(($(now_ms) - t0))
	[ "$rc" != 0 ] || fail "$tag: succeeded: $(cat "$T/$tag.out")"
	[ "$rc" != 124 ] && [ "$rc" != 137 ] || fail "$tag: still running after 30 s"
	[ "$ms" -le "$limit" ] || fail "$tag: failed after $ms ms (limit $limit ms)"
	grep -qF "s3://$DCR_S3_BUCKET/$S3_RUN/store" "$T/$tag.err" ||
		fail "$tag: the store is not named: $(cat "$T/$tag.err")"
	grep -qF "$PROXY" "$T/$tag.err" ||
		fail "$tag: the server is not named: $(cat "$T/$tag.err")"
	log "$tag: exit $rc after $ms ms: $(grep -m1 -F "$PROXY" "$T/$tag.err")"
}

start_proxy
make_src "$T/tree.1" 1
[ "$(commit "$STORE" "$T/tree.1")" = 1 ] || fail "commit of tree.1 failed"
next_src 2
[ "$(commit "$STORE" "$T/tree.2")" = 2 ] || fail "commit of tree.2 failed"
next_src 3
mkdir -p "$T/mnt"
LIMIT=$(((TO + 1) * 1000))

# 1. A listing that never ends.
rules '[{"method": "GET", "query": "list-type=2", "fault": "list_loop", "count": -1}]'
must_fail_fast loop-mount "$LIMIT" "$DCRFS" "$STORE" "$T/mnt" -f \
	-o "$P_OPTS,cache_dir=$T/cache.loop"
mountpoint -q "$T/mnt" && fail "mounted on a listing that never ends"
grep -q "already given" "$T/loop-mount.err" || fail "no reason: $(cat "$T/loop-mount.err")"
must_fail_fast loop-log "$LIMIT" "$DCRFS_CTL" --store "$STORE" log
must_fail_fast loop-commit "$LIMIT" "$DCRFS_COMMIT" --store "$STORE" \
	--cache-dir "$T/cc.loop" --quiet "$T/tree.3"
injected list_loop / || fail "the looping listing was never served"

# 2. A listing answered with garbage or nothing: an error, not an empty
#    store; gc deletes nothing on it.
for fault in garbage_xml empty200; do
	rules "[{\"method\": \"GET\", \"query\": \"list-type=2\", \"fault\": \"$fault\", \"count\": -1}]"
	must_fail_fast "$fault-mount" "$LIMIT" "$DCRFS" "$STORE" "$T/mnt" -f \
		-o "$P_OPTS,cache_dir=$T/cache.$fault"
	must_fail_fast "$fault-log" "$LIMIT" "$DCRFS_CTL" --store "$STORE" log
	grep -q "malformed ListObjectsV2" "$T/$fault-log.err" ||
		fail "$fault: no reason: $(cat "$T/$fault-log.err")"
	injected "$fault" / || fail "$fault was never injected"
done
# only the listing of versions/ is garbage: gc must not take the packs
# for unreferenced
rules '[{"method": "GET", "query": "prefix=[^&]*versions", "fault": "garbage_xml", "count": -1}]'
rc=0
t "$DCRFS_CTL" --store "$STORE" gc --keep-last 5 --grace 0 >"$T/gc.out" 2>"$T/gc.err" || rc=$?
[ "$rc" = 1 ] || fail "gc on a garbage listing of versions/ exited $rc: $(cat "$T/gc.out" "$T/gc.err")"
grep -q "malformed ListObjectsV2" "$T/gc.err" || fail "gc: no reason: $(cat "$T/gc.err")"
rules '[]'
t "$DCRFS_CTL" --store "$STORE" verify >"$T/verify.out" 2>&1 ||
	fail "the store is damaged after gc met a garbage listing: $(cat "$T/verify.out")"
log "gc on a garbage listing: exit $rc, the store verifies"

# 3. SIGTERM with a server that does not answer.
rules '[{"fault": "stall:60", "count": -1}]'
# sigterm_check TAG CMD... - CMD, stuck on the server, ends within 1 s of
# SIGTERM
sigterm_check() {
	local tag=$1 pid ms
	shift
	"$@" >"$T/$tag.out" 2>"$T/$tag.err" &
	pid=$!
	_pids+=("$pid")
	sleep 1
	kill -0 "$pid" 2>/dev/null || fail "$tag: ended before SIGTERM: $(cat "$T/$tag.err")"
	kill -TERM "$pid"
	ms=$(wait_exit "$pid" 1000) || fail "$tag: still running $ms ms after SIGTERM"
	wait "$pid" 2>/dev/null || true
	log "$tag: ended $ms ms after SIGTERM"
}
sigterm_check term-mount-f "$DCRFS" "$STORE" "$T/mnt" -f -o "$P_BASE,s3_timeout=60,cache_dir=$T/cache.t1"
sigterm_check term-mount "$DCRFS" "$STORE" "$T/mnt" -o "$P_BASE,s3_timeout=60,cache_dir=$T/cache.t2"
grep -q "stopped by signal" "$T/term-mount.err" || fail "the detached mount's end is not said: $(cat "$T/term-mount.err")"
mountpoint -q "$T/mnt" && fail "a mount stopped by SIGTERM is mounted"
DCR_S3_READ_TIMEOUT_MS=60000 sigterm_check term-log "$DCRFS_CTL" --store "$STORE" log
DCR_S3_READ_TIMEOUT_MS=60000 sigterm_check term-commit "$DCRFS_COMMIT" --store "$STORE" \
	--cache-dir "$T/cc.term" --quiet "$T/tree.3"
rules '[]'

# 4. GETs answered with other bytes: right bytes or EIO, never others.
FILES="a.bin nested/deep/c.bin b.txt run.sh added.2"
# One cold mount; each pack GET meets the next fault in the list (the
# manifests' GETs before them give "other" their bytes to answer).
rules '[{"method": "GET", "path": "/packs/", "fault": "other", "count": 2},
	{"method": "GET", "path": "/packs/", "fault": "shift:7", "count": 2},
	{"method": "GET", "path": "/packs/", "fault": "empty200", "count": 2},
	{"method": "GET", "path": "/packs/", "fault": "huge_length", "count": 2},
	{"method": "GET", "path": "/packs/", "fault": "garbage_xml", "count": 2}]'
s3_mount "$STORE" "$T/mnt" "$P_OPTS,cache_dir=$T/cache.get,prefetch=none,fetch_ahead=0"
read_or_eio faults "$T/mnt" 2 "$T/tree.2"
for fault in other shift:7 empty200 huge_length garbage_xml; do
	injected "$fault" /packs/ || fail "$fault was never injected"
done
rules '[]'
read_or_eio faults.after "$T/mnt" 2 "$T/tree.2"
grep -q eio "$T/read.faults.after" && fail "the mount did not heal"
umount_dcrfs "$T/mnt" || fail "dcrfs did not exit cleanly after the faults"
log "GET faults: $(sort "$T/read.faults" | uniq -c | tr -s ' \n' ' ')"
# a manifest answered with another's bytes: fetched again, v2 shows
rules '[{"method": "GET", "path": "/versions/0000000002", "fault": "other", "count": 1}]'
s3_mount "$STORE" "$T/mnt" "$P_OPTS,cache_dir=$T/cache.man,prefetch=none"
injected other /versions/0000000002 || fail "the manifest was never swapped"
read_or_eio manifest "$T/mnt" 2 "$T/tree.2"
grep -q eio "$T/read.manifest" && fail "v2 unreadable after its manifest was swapped once"
umount_dcrfs "$T/mnt" || fail "dcrfs did not exit cleanly"

# 5. Unmounted while the store fails: the daemon exits within 1 s.
# umount_check TAG SECS CMD... - mount with a cold cache, let the
# prefetch meet the failure CMD arms (after the mount) for SECS,
# unmount, time the daemon's exit
umount_check() {
	local tag=$1 secs=$2 ms
	s3_mount "$STORE" "$T/mnt" "$P_BASE,s3_timeout=60,cache_dir=$T/cache.$tag,prefetch=all,poll=0.2"
	shift 2
	"$@"
	sleep "$secs"
	kill -0 "$MOUNT_PID" 2>/dev/null || fail "$tag: the daemon died"
	t fusermount3 -u "$T/mnt" || fail "$tag: fusermount3 -u failed"
	ms=$(wait_exit "$MOUNT_PID" 1000) || fail "$tag: the daemon still runs $ms ms after its unmount"
	_forget_mount "$T/mnt"
	log "$tag: the daemon exited $ms ms after fusermount3 -u"
}
# (with test hooks, each retry waits 5 s: a daemon that slept through
# its wait would be seen)
[ "${DCR_TEST_HOOKS:-no}" = yes ] && export DCRFS_TEST_S3_BACKOFF_MS=5000
umount_check umount-503 2 rules '[{"method": "GET", "path": "/packs/", "fault": "status:503", "count": -1}]'
# every GET stalls: the prefetch's, and the watcher's look for a new
# version (poll=0.2), which the daemon joins
umount_check umount-stall 1 rules '[{"method": "GET", "fault": "stall:60", "count": -1}]'
rules '[]'
umount_check umount-gone 2 kill -KILL "$PROXY_PID"

log "ok"
