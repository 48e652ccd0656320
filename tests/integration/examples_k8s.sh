#!/usr/bin/env bash
# examples_k8s.sh - the Kubernetes examples in examples/k8s (README.md
# there): every manifest parses and holds the fields its layout depends
# on (examples_k8s.py: mount propagation, privileged where it mounts,
# the DaemonSet's surge and dcrfs --takeover, no privilege without a
# mount), checked offline with Debian's python3-yaml (no cluster, no
# kubeconform in bookworm); and layout B's helper, fuse-fd-helper.py,
# mounts a store for a dcrfs without CAP_SYS_ADMIN on this machine, a
# mount that --takeover cannot take over (README.md says so); and the
# DaemonSet's entrypoint and probe, run as an old and a surged pod, hand
# the mount over under an open file.
. "$(dirname "$0")/lib.sh"
python3 -c 'import yaml' 2>/dev/null || skip "python3-yaml missing (scripts/install-deps test)"
EX=$DCR_SRCDIR/examples/k8s
[ -f "$EX/README.md" ] || fail "no $EX/README.md"
out=$(python3 "$DCR_SRCDIR/tests/integration/examples_k8s.py" "$EX" 2>&1) ||
	fail "the manifests: $out"
log "ok: the manifests parse and hold their layouts' fields"

# layout B for real: the helper mounts, dcrfs serves /dev/fd/N without
# CAP_SYS_ADMIN, the bytes are the committed ones
need_fuse
need_root
need_bins
command -v setpriv >/dev/null || skip "setpriv (util-linux) missing"
mkdir -p "$T/tree" "$T/mnt"
printf 'weights %s\n' {1..1000} >"$T/tree/w.bin"
commit "$T/store" "$T/tree" >/dev/null
start_bg python3 "$EX/fuse-fd-helper.py" "$T/mnt" -- "$DCRFS" "$T/store" '{fd}' -f \
	-o "cache_dir=$T/cache,log=$T/dcrfs.fd.log" </dev/null >"$T/dcrfs.helper.log" 2>&1
register_mount "$T/mnt"
for ((i = 0; i < 100; i++)); do
	[ -e "$T/mnt/latest" ] && break
	kill -0 "$BG_PID" 2>/dev/null || break
	sleep 0.1
done
[ -e "$T/mnt/latest" ] || fail "the helper's mount is not served: $(cat "$T/dcrfs.helper.log")"
t cmp "$T/tree/w.bin" "$T/mnt/latest/w.bin" || fail "wrong bytes through the helper's mount"
capbnd=$(sed -n 's/^CapBnd:[[:space:]]*//p' "/proc/$BG_PID/status")
[ $((0x$capbnd & (1 << 21))) = 0 ] || fail "dcrfs kept CAP_SYS_ADMIN (CapBnd $capbnd)"
[ "$(readlink "/proc/$BG_PID/exe")" = "$(readlink -f "$DCRFS")" ] ||
	fail "the helper did not exec dcrfs: $(readlink "/proc/$BG_PID/exe")"
# README.md: no takeover of this layout (the daemon serves /dev/fd/N, its
# handover socket is named after that); refused, the mount serves on
rc=0
t "$DCRFS" --takeover "$T/store" "$T/mnt" -f -o "cache_dir=$T/cache" >"$T/to.log" 2>&1 || rc=$?
[ "$rc" != 0 ] && grep -q 'takeover: no dcrfs to take over from' "$T/to.log" ||
	fail "a takeover of a /dev/fd/N mount: status $rc, $(cat "$T/to.log") (update examples/k8s/README.md)"
t cmp "$T/tree/w.bin" "$T/mnt/latest/w.bin" || fail "the helper's mount after a refused takeover"
t umount "$T/mnt" || fail "umount of the helper's mount"
_wait_pid "$BG_PID" 10 || fail "dcrfs did not exit at unmount"
# a mount point that is no directory: the helper says why, leaves nothing
rc=0
t python3 "$EX/fuse-fd-helper.py" "$T/tree/w.bin" -- "$DCRFS" "$T/store" '{fd}' -f \
	>"$T/bad.log" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q 'fuse-fd-helper: mount on' "$T/bad.log" ||
	fail "a bad mount point: status $rc, $(cat "$T/bad.log")"
log "ok: fuse-fd-helper.py mounts for a dcrfs without CAP_SYS_ADMIN"

# layout A's upgrade for real: the DaemonSet's entrypoint and readiness
# probe, as the manifest has them (paths moved here, a local store), run
# as an old pod and a surged new one
python3 - "$EX/node-daemonset.yaml" "$T/ds" <<'PY'
import sys, yaml
ds = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "DaemonSet"][0]
c = ds["spec"]["template"]["spec"]["containers"][0]
open(sys.argv[2] + ".entry", "w").write(c["args"][0])
open(sys.argv[2] + ".probe", "w").write(c["readinessProbe"]["exec"]["command"][2])
PY
pod() { # NAME: the entrypoint of one pod (its own /run)
	sed "s|/var/lib/dcrfs/mnt|$T/lib/mnt|g; s|/usr/bin/dcrfs|$DCRFS|g; s|/run/dcrfs.pid|$T/$1.pid|g" "$T/ds.entry"
}
ready() { # NAME: the pod's readiness probe passes
	sh -c "$(sed "s|/var/lib/dcrfs/mnt|$T/lib/mnt|g; s|/run/dcrfs.pid|$T/$1.pid|g" "$T/ds.probe")"
}
export DCRFS_STORE=$T/store DCRFS_OPTIONS="ro,allow_other,cache_dir=$T/kcache,log=$T/dcrfs.ds.log"
mkdir -p "$T/lib"
start_bg sh -c "$(pod old)" >"$T/dcrfs.podold.log" 2>&1
OLDPOD=$BG_PID
register_mount "$T/lib/mnt"
for ((i = 0; i < 100; i++)); do ready old 2>/dev/null && break; sleep 0.1; done
ready old || fail "the first pod is not ready: $(tail -5 "$T/dcrfs.ds.log")"
exec 9<"$T/lib/mnt/latest/w.bin"
head -c 100 <&9 >"$T/ds.part1"
start_bg sh -c "$(pod new)" 9<&- >"$T/dcrfs.podnew.log" 2>&1
NEWPOD=$BG_PID
for ((i = 0; i < 100; i++)); do ready new 2>/dev/null && break; sleep 0.1; done
ready new || fail "the surged pod did not take over: $(tail -5 "$T/dcrfs.ds.log")"
grep -q 'handover: took over' "$T/dcrfs.ds.log" || fail "no 'handover: took over' in the log"
ready old 2>/dev/null && fail "the old pod is still ready after the takeover"
kill -0 "$(cat "$T/old.pid")" 2>/dev/null && fail "the old pod's dcrfs serves on"
kill -0 "$OLDPOD" || fail "the old pod's entrypoint exited after handing over (the kubelet would restart it)"
cat <&9 >"$T/ds.part2" || fail "a reader's open file failed across the takeover"
exec 9<&-
cat "$T/ds.part1" "$T/ds.part2" | cmp - "$T/tree/w.bin" || fail "wrong bytes across the DaemonSet's takeover"
kill -TERM "$OLDPOD"
_wait_pid "$OLDPOD" 5 || fail "the old pod did not stop at SIGTERM"
t cmp "$T/tree/w.bin" "$T/lib/mnt/latest/w.bin" || fail "the mount after the old pod's deletion"
kill -TERM "$NEWPOD"
_wait_pid "$NEWPOD" 10 || fail "the serving pod did not stop at SIGTERM"
mountpoint -q "$T/lib/mnt" && fail "the serving pod's SIGTERM did not unmount"
log "ok: the DaemonSet's entrypoint upgrades by --takeover, readers unharmed"
