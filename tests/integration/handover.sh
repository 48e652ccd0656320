#!/usr/bin/env bash
# handover.sh - dcrfs --takeover hands a mount over to a new daemon under
# running readers (fs/handover.h), with no error and no wrong byte:
#  1. readers in loops: reopen-and-read of a version being prefetched
#     (normal path), a file read whole and reopened (passthrough), a file
#     held open across every handover (its handle and backing id adopted)
#     and a file mapped across every handover (mmap), each compared with
#     the committed bytes;
#  2. N handovers (HANDOVERS, default 20), each timed from the new
#     daemon's start to the old one's exit (target 0.5 s; printed);
#     status.json and metrics count them over the mount's daemons;
#  3. what cannot be handed over is refused, the old daemon serving on:
#     another store, another fixed option (passthrough), an open
#     /.dcrfs file.
. "$(dirname "$0")/lib.sh"
. "$DCR_SRCDIR/tests/integration/readers.sh"
need_fuse
need_bins
need_root

N=${HANDOVERS:-20}

readers_store

# v2 stays "being prefetched" for the whole test: each daemon's
# prefetcher starts it again, a block every 50 ms (a longer delay would
# be timed as the old daemon's exit: the hook's sleep is not cut short)
export DCRFS_TEST_PREFETCH_DELAY_MS=50
OPTS="cache_dir=$T/cache,prefetch=latest"
mount_dcrfs "$STORE" "$MNT" "$OPTS"
OLD=$MOUNT_PID

readers_start

# takeover [ARGS...] - start a takeover in the background: sets NEW,
# NEW_LOG
takeover() {
	_nlog=$((_nlog + 1))
	NEW_LOG=$T/dcrfs.$_nlog.log
	"$DCRFS" --takeover "$@" -f >"$NEW_LOG" 2>&1 &
	NEW=$!
	_pids+=("$NEW")
}

# --- 3. refusals: the old daemon serves on
mkdir -p "$T/tree.x"
rand_file "$T/tree.x/x" 1000 x
[ "$(commit "$T/other" "$T/tree.x")" = 1 ] || fail "commit other"
refused() { # WHAT ARGS...
	local what=$1
	shift
	takeover "$@"
	_wait_pid "$NEW" 10 || fail "a refused takeover did not exit"
	grep -q "takeover refused: .*$what" "$NEW_LOG" ||
		{ cat "$NEW_LOG" >&2; fail "no refusal naming '$what'"; }
	kill -0 "$OLD" 2>/dev/null || fail "a refused takeover stopped the old daemon"
}
refused "store differs" "$T/other" "$MNT" -o "$OPTS"
refused "passthrough differs" "$STORE" "$MNT" -o "$OPTS,passthrough=off"
exec 7<"$MNT/.dcrfs/status.json"
refused "of /.dcrfs or /delta are open" "$STORE" "$MNT" -o "$OPTS"
exec 7<&-
log "refusals: ok"
# the mount's counts (status.json "handover"): none yet, a holder keeps it
[ "$(mount_status "$MNT" handover handovers)" = 0 ] ||
	fail "handovers before any: $(cat "$T/status.json")"
[ "$(mount_status "$MNT" handover keeper)" = '"holder"' ] ||
	fail "no keeper named: $(cat "$T/status.json")"

# --- 1, 2. N handovers under the readers
: >"$T/times"
for ((i = 1; i <= N; i++)); do
	t0=$(date +%s%N)
	takeover "$STORE" "$MNT" -o "$OPTS"
	for ((k = 0; k < 500; k++)); do
		kill -0 "$OLD" 2>/dev/null || break
		sleep 0.002
	done
	t1=$(date +%s%N)
	kill -0 "$OLD" 2>/dev/null && { cat "$NEW_LOG" >&2; fail "handover $i: the old daemon did not exit"; }
	wait "$OLD" || fail "handover $i: the old daemon exited with $?"
	kill -0 "$NEW" 2>/dev/null || { cat "$NEW_LOG" >&2; fail "handover $i: the new daemon exited"; }
	echo $(((t1 - t0) / 1000000)) >>"$T/times"
	for j in "${!_mounts[@]}"; do
		[ "${_mounts[$j]}" = "$MNT" ] && _mount_pid[j]=$NEW
	done
	OLD=$NEW
	sleep 0.2
done
sort -n "$T/times" >"$T/times.sorted"
log "handover ms over $N: median $(sed -n "$(((N + 1) / 2))p" "$T/times.sorted"), max $(tail -1 "$T/times.sorted") (target 500)"

# counted over the mount's daemons, each adding its own to the STATE's
[ "$(mount_status "$MNT" handover handovers)" = "$N" ] ||
	fail "status.json does not count $N handovers: $(cat "$T/status.json")"
[ "$(mount_status "$MNT" handover restarts)" = 0 ] ||
	fail "restarts counted without a crash: $(cat "$T/status.json")"
[ "$(mount_status "$MNT" handover keeper)" = '"holder"' ] ||
	fail "the last daemon names no keeper: $(cat "$T/status.json")"
grep -qx "dcrfs_handovers_total $N" "$MNT/.dcrfs/metrics" ||
	fail "metrics: no dcrfs_handovers_total $N: $(grep handover "$MNT/.dcrfs/metrics")"
grep -qx "dcrfs_connection_kept 1" "$MNT/.dcrfs/metrics" ||
	fail "metrics: the connection is not said kept"
sleep 0.5
readers_stop
[ "$(grep -l 'prefetching v2' "$T"/dcrfs.*.log | wc -l)" -ge "$N" ] ||
	fail "v2 was not being prefetched by every daemon"
grep -q 'handover: the kernel can\(not\)\? send requests in flight again' "$NEW_LOG" ||
	fail "the new daemon did not say whether the kernel can resend"
[ "$(pt_opens)" -gt 0 ] || fail "no open went through passthrough in the last daemon"
# the mount is served and unmounts as any other
cmp "$MNT/v2/a.bin" "$T/tree.2/a.bin" || fail "v2/a.bin after the handovers"
umount_dcrfs "$MNT" || fail "unmount after the handovers"

# the baseline: a fresh mount of the same store and cache, timed the
# same way (start to the first answer)
t0=$(date +%s%N)
"$DCRFS" "$STORE" "$MNT" -f -o "$OPTS" >"$T/dcrfs.fresh.log" 2>&1 &
_pids+=("$!")
_mounts+=("$MNT")
_mount_pid+=("$!")
for ((k = 0; k < 5000; k++)); do
	stat "$MNT/v1/a.bin" >/dev/null 2>&1 && break
	sleep 0.002
done
t1=$(date +%s%N)
fresh=$(((t1 - t0) / 1000000))
med=$(sed -n "$(((N + 1) / 2))p" "$T/times.sorted")
log "fresh mount ms: $fresh; handover median / fresh mount: $(python3 -c "print(round($med / max($fresh, 1), 2))")"
umount_dcrfs "$MNT" || fail "unmount of the fresh mount"
log "ok"
