#!/usr/bin/env bash
# fdstore.sh - examples/systemd/dcrfs@.service, and systemd's fd store as
# the keeper of a mount (fs/fdstore.h), under a real systemd:
#  1. `systemd-analyze verify` accepts the unit (the program's path moved
#     to the build's), which has what the restart and the reload need;
#  2. a real service manager (systemd --user, PID 1 here is not systemd:
#     run in namespaces of its own, a mount namespace with /run/systemd
#     marked as booted, a cgroup namespace rooted at a cgroup made for
#     this test, a PID namespace) starts dcrfs as the unit's service with
#     the unit's settings (its program, env file and log moved into this
#     test): READY=1, the connection and its state in the fd store, no
#     holder; under the readers of handover.sh and restart.sh, N times
#     (RESTARTS, default 10) 2 x `systemctl reload` (a handover: MAINPID=
#     of the new daemon, the old state dropped from the store) then kill
#     -9 of the main process, which systemd restarts with the fd store's
#     descriptors (LISTEN_FDS): 0 errors, 0 wrong bytes, the longest
#     stall and each restart's time printed; status.json counts them and
#     names systemd as the keeper; a reload refused (a fixed option
#     changed) fails and the daemon serves on; a reload's daemon killed
#     between storing its state and dropping the old one (test hook):
#     the restart takes the newer; `systemctl stop` unmounts.
SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
. "$(dirname "$0")/lib.sh"
command -v systemd-analyze >/dev/null 2>&1 || skip "systemd-analyze missing (scripts/install-deps)"
UNIT=$DCR_SRCDIR/examples/systemd/dcrfs@.service
[ -f "$UNIT" ] && [ -f "$DCR_SRCDIR/examples/systemd/mnt-dcr.env" ] || fail "examples/systemd/dcrfs@.service or mnt-dcr.env missing"
need_bins

# --- 1. the unit, as shipped but for the program's path
if [ -z "${DCRFS_FDSTORE_INNER:-}" ]; then
	mkdir -p "$T/units"
	sed "s|/usr/bin/dcrfs|$DCRFS|g" "$UNIT" >"$T/units/dcrfs@.service"
	(cd "$T/units" && t systemd-analyze verify --man=no ./dcrfs@mnt-dcr.service) \
		>"$T/verify.log" 2>&1 || fail "systemd-analyze verify: $(cat "$T/verify.log")"
	[ -s "$T/verify.log" ] && fail "systemd-analyze verify warns: $(cat "$T/verify.log")"
	for l in Type=notify NotifyAccess=all Restart=on-failure; do
		grep -qx "$l" "$UNIT" || fail "the unit lacks $l"
	done
	[ "$(sed -n 's/^FileDescriptorStoreMax=//p' "$UNIT")" -ge 2 ] || fail "FileDescriptorStoreMax= below 2"
	grep -q '^ExecReload=/usr/bin/dcrfs --takeover ' "$UNIT" || fail "ExecReload= is not dcrfs --takeover"
	grep -q 'dcrfs@\.service' "$DCR_SRCDIR/man/dcrfs.8" || fail "dcrfs(8) does not document the service unit"
	# the runbook's upgrade is the reload this test runs
	sed -n '/^\.Ss Upgrading many nodes/,/^\.S[hs] /p' "$DCR_SRCDIR/man/dcrfs.8" |
		grep -x 'systemctl reload dcrfs@mnt-dcr' >/dev/null || fail "dcrfs(8) Upgrading many nodes lacks 'systemctl reload dcrfs@mnt-dcr'"
	log "unit verifies"
fi

# --- 2. under a real systemd
need_fuse
need_root
need_test_hooks
SD=/lib/systemd/systemd
[ -x "$SD" ] || skip "$SD missing: no systemd to run (apt-get install systemd)"
command -v unshare >/dev/null 2>&1 || skip "unshare(1) missing"

if [ -z "${DCRFS_FDSTORE_INNER:-}" ]; then
	# A cgroup of our own, which systemd --user sees as its root (the
	# cgroup namespace); it runs in it and in nothing above it.
	if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
		CG=/sys/fs/cgroup/dcrfs-test-fdstore-$$
	else
		[ -d /sys/fs/cgroup/systemd ] || skip "no name=systemd cgroup hierarchy and no cgroup v2"
		CG=/sys/fs/cgroup/systemd/dcrfs-test-fdstore-$$
	fi
	mkdir "$CG" || skip "cannot make a cgroup for the test's systemd ($CG)"
	rc=0
	(
		echo "$BASHPID" >"$CG/cgroup.procs"
		DCRFS_FDSTORE_INNER=$CG exec unshare -m -C -p -f --mount-proc \
			--kill-child bash "$SELF"
	) || rc=$?
	# the namespace's processes are gone with it: its cgroups are empty
	find "$CG" -depth -type d -exec rmdir {} \; 2>/dev/null || true
	[ -d "$CG" ] && log "warning: $CG left behind"
	exit "$rc"
fi

# Inside the namespaces: this shell is PID 1 of its PID namespace, in the
# cgroup namespace's root.
mount --make-rprivate /
# This namespace began with a copy of every FUSE mount up outside (other
# tests' mounts, under a parallel make check). A copy keeps its
# connection alive: the other test's unmount would never reach its
# daemon, which then never exits. Detach the copies here.
awk '$3 ~ /^fuse/ { print $2 }' /proc/self/mounts | sort -r |
	while read -r m; do umount -l "$(printf '%b' "$m")" 2>/dev/null || true; done
mount -t tmpfs tmpfs /sys/fs/cgroup
case $DCRFS_FDSTORE_INNER in
/sys/fs/cgroup/systemd/*)
	mkdir /sys/fs/cgroup/systemd
	mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd ;;
*)
	umount /sys/fs/cgroup
	mount -t cgroup2 cgroup2 /sys/fs/cgroup ;;
esac
# systemd --user runs only on a machine booted with systemd: say so in
# this namespace only
mkdir -p /run/systemd
mount -t tmpfs tmpfs /run/systemd
mkdir /run/systemd/system
export XDG_RUNTIME_DIR=$T/run XDG_CONFIG_HOME=$T/config
mkdir -m 700 -p "$XDG_RUNTIME_DIR" "$XDG_CONFIG_HOME/systemd/user"
# its log target "console" is /dev/console: a file of this test here
: >"$T/systemd.log"
mount --bind "$T/systemd.log" /dev/console
"$SD" --user --log-target=console --log-level=${DCRFS_SD_LOG_LEVEL:-notice} >"$T/systemd.log" 2>&1 &
_pids+=("$!")
SDPID=$!
for ((k = 0; k < 200; k++)); do
	[ -S "$XDG_RUNTIME_DIR/systemd/private" ] && break
	kill -0 "$SDPID" 2>/dev/null || { cat "$T/systemd.log" >&2; fail "systemd --user exited"; }
	sleep 0.05
done
sc() { t systemctl --user "$@"; }

. "$DCR_SRCDIR/tests/integration/readers.sh"
readers_store
mkdir -p "$MNT"
INST=$(systemd-escape --path "$MNT")
U="dcrfs@$INST.service"
LOGF=$T/dcrfs.log
sed "s|/usr/bin/dcrfs|$DCRFS|g; s|^EnvironmentFile=.*|EnvironmentFile=$T/dcrfs.env|" \
	"$DCR_SRCDIR/examples/systemd/dcrfs@.service" >"$XDG_CONFIG_HOME/systemd/user/dcrfs@.service"
# the example's env file with the store, cache and log of this test;
# v2 stays "being prefetched", and each LOOKUP and READ takes 20 ms, so
# that kills find requests in flight (restart.sh)
sed "s|^DCRFS_STORE=.*|DCRFS_STORE=$STORE|; s|^DCRFS_OPTIONS=.*|DCRFS_OPTIONS=ro,cache_dir=$T/cache,prefetch=latest,log=$LOGF|" \
	"$DCR_SRCDIR/examples/systemd/mnt-dcr.env" >"$T/dcrfs.env"
printf 'DCRFS_TEST_PREFETCH_DELAY_MS=50\nDCRFS_TEST_REQ_DELAY_MS=20\n' >>"$T/dcrfs.env"
# no journald here: the service's own output (what dcrfs says on stderr
# before its log is open) goes to a file
mkdir -p "$XDG_CONFIG_HOME/systemd/user/dcrfs@.service.d"
printf '[Service]\nStandardOutput=append:%s\nStandardError=append:%s\n' \
	"$T/svc.out" "$T/svc.out" >"$XDG_CONFIG_HOME/systemd/user/dcrfs@.service.d/out.conf"
sc daemon-reload
register_mount "$MNT"
# say - what the service said and how it stands, for a failure
say() { cat "$T/svc.out" >&2; sc status "$U" >&2 || true; }
sc start "$U" || { cat "$T/systemd.log" "$LOGF" >&2; fail "systemctl start $U"; }
mountpoint -q "$MNT" || fail "the service did not mount $MNT"
main_pid() { sc show -p MainPID --value "$U"; }
nstore() { sc show -p NFileDescriptorStore --value "$U"; }
grep -q "systemd's fd store keeps the mount" "$LOGF" || { cat "$LOGF" >&2; fail "the fd store is not the keeper"; }
grep -q 'restart: holder' "$LOGF" && fail "a holder was started under systemd (one keeper per mount)"
[ "$(mount_status "$MNT" handover keeper)" = '"systemd"' ] || fail "status.json: $(cat "$T/status.json")"
for ((k = 0; k < 100; k++)); do [ "$(nstore)" = 2 ] && break; sleep 0.05; done
[ "$(nstore)" = 2 ] || fail "the fd store holds $(nstore) descriptors, not the connection and the state"
log "started: main pid $(main_pid), fd store $(nstore)"

readers_start

N=${RESTARTS:-10}
H=2
: >"$T/startup"
: >"$T/reloads"
for ((i = 1; i <= N; i++)); do
	for ((h = 1; h <= H; h++)); do
		old=$(main_pid)
		t0=$(date +%s%N)
		sc reload "$U" || { tail -20 "$LOGF" >&2; fail "reload $i.$h"; }
		t1=$(date +%s%N)
		new=$(main_pid)
		[ "$new" != "$old" ] && [ "$new" != 0 ] || fail "reload $i.$h: systemd did not follow the new daemon (MainPID $old -> $new)"
		[ "$(sc show -p ActiveState --value "$U")" = active ] || fail "reload $i.$h: the unit is not active"
		echo $(((t1 - t0) / 1000000)) >>"$T/reloads"
		sleep 0.2
	done
	old=$(main_pid)
	t0=$(date +%s%N)
	kill -KILL "$old"
	for ((k = 0; k < 3000; k++)); do
		p=$(main_pid)
		[ "$p" != "$old" ] && [ "$p" != 0 ] &&
			[ "$(sc show -p ActiveState --value "$U")" = active ] && break
		sleep 0.01
	done
	t1=$(date +%s%N)
	p=$(main_pid)
	[ "$p" != "$old" ] && [ "$p" != 0 ] || { tail -20 "$LOGF" >&2; cat "$T/systemd.log" >&2; fail "restart $i: systemd did not restart dcrfs"; }
	echo $(((t1 - t0) / 1000000)) >>"$T/startup"
	sleep 0.3
done
[ "$(grep -c 'restart: took over' "$LOGF")" = "$N" ] || { cat "$LOGF" >&2; fail "not $N restarts from the fd store"; }
[ "$(grep -c 'handover: took over' "$LOGF")" = $((N * H)) ] || fail "not $((N * H)) handovers"
grep -q 'restart: the kernel sends the requests' "$LOGF" || fail "no resend after a restart"
[ "$(mount_status "$MNT" handover restarts)" = "$N" ] || fail "status.json restarts: $(cat "$T/status.json")"
[ "$(mount_status "$MNT" handover handovers)" = $((N * H)) ] || fail "status.json handovers: $(cat "$T/status.json")"
[ "$(mount_status "$MNT" handover keeper)" = '"systemd"' ] || fail "status.json keeper: $(cat "$T/status.json")"
[ "$(nstore)" = 2 ] || fail "the fd store holds $(nstore) descriptors after the handovers (an old state was not dropped)"
grep -q 'restart: holder' "$LOGF" && fail "a holder was started under systemd"
log "status.json: $(mount_status "$MNT" handover)"
sort -n "$T/reloads" >"$T/reloads.sorted"
sort -n "$T/startup" >"$T/startup.sorted"
log "systemctl reload ms over $((N * H)): median $(sed -n "$(((N * H + 1) / 2))p" "$T/reloads.sorted"), max $(tail -1 "$T/reloads.sorted")"
log "kill -9 to active again ms over $N: median $(sed -n "$(((N + 1) / 2))p" "$T/startup.sorted"), max $(tail -1 "$T/startup.sorted")"

sleep 0.5
readers_stop
max_start=$(tail -1 "$T/startup.sorted")
log "longest reader stall across $N kill -9 restarts by systemd and $((N * H)) reloads: $READERS_WORST ms (target <= 1000 + start-up, max kill-to-active $max_start ms)"
[ "$READERS_WORST" -le $((1000 + max_start + 500)) ] || fail "a reader stalled $READERS_WORST ms"
cmp "$MNT/v2/a.bin" "$T/tree.2/a.bin" || fail "v2/a.bin after the restarts"

# a reload that cannot hand over (an option fixed at mount changed in the
# env file) fails, the daemon serving on and the unit active
old=$(main_pid)
cp "$T/dcrfs.env" "$T/dcrfs.env.good"
sed -i 's|^DCRFS_OPTIONS=.*|&,passthrough=off|' "$T/dcrfs.env"
sc reload "$U" 2>"$T/reload.err" && fail "a reload with another fixed option succeeded"
grep -q 'handover: refused: passthrough differs' "$LOGF" || { tail -5 "$LOGF" >&2; fail "the refusal is not said"; }
[ "$(main_pid)" = "$old" ] || fail "a refused reload changed the main process"
[ "$(sc show -p ActiveState --value "$U")" = active ] || fail "a refused reload stopped the unit"
cp "$T/dcrfs.env.good" "$T/dcrfs.env"
# a reload's daemon killed between storing its state and dropping its
# predecessor's (the test hook, once): systemd restarts the unit with
# both states; the restart takes the newer (its counts have that
# handover) and drops the other
printf 'DCRFS_TEST_FDSTORE_DIE_BEFORE_DROP=%s\n' "$T/die" >>"$T/dcrfs.env"
: >"$T/die"
old=$(main_pid)
sc reload "$U" || fail "the reload before the hook's kill"
for ((k = 0; k < 1000; k++)); do
	[ "$(grep -c 'restart: took over' "$LOGF")" = $((N + 1)) ] &&
		[ "$(sc show -p ActiveState --value "$U")" = active ] && break
	sleep 0.01
done
grep -q 'test hook: killed before dropping' "$LOGF" || fail "the hook did not kill the reload's daemon"
[ "$(grep -c 'restart: took over' "$LOGF")" = $((N + 1)) ] || { say; fail "no restart after the kill between the two states"; }
grep -q "restart: systemd's fd store keeps the mount .*; dropped dcrfs-state-" "$LOGF" || fail "the stale state was not dropped"
[ "$(mount_status "$MNT" handover handovers)" = $((N * H + 1)) ] ||
	fail "the restart took the older state: $(cat "$T/status.json")"
[ "$(mount_status "$MNT" handover restarts)" = $((N + 1)) ] || fail "status.json restarts: $(cat "$T/status.json")"
for ((k = 0; k < 100; k++)); do [ "$(nstore)" = 2 ] && break; sleep 0.05; done
[ "$(nstore)" = 2 ] || fail "the fd store holds $(nstore) descriptors after the double state"
cp "$T/dcrfs.env.good" "$T/dcrfs.env"
log "a kill between the two states: the newer taken, the other dropped"
cmp "$MNT/v1/a.bin" "$T/tree.1/a.bin" || fail "v1/a.bin after the double state"
cmp "$MNT/v2/b.bin" "$T/tree.2/b.bin" || fail "v2/b.bin after the double state"

sc stop "$U" || fail "systemctl stop"
for ((k = 0; k < 100; k++)); do mountpoint -q "$MNT" || break; sleep 0.05; done
mountpoint -q "$MNT" && fail "systemctl stop did not unmount $MNT"
_forget_mount "$MNT"
[ "$(nstore)" = 0 ] || fail "the fd store holds $(nstore) descriptors after the stop"
log "ok"
