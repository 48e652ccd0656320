#!/usr/bin/env bash
# examples_k8s.sh - the Kubernetes examples in examples/k8s (README.md
# there): every manifest parses and holds the fields its layout depends
# on (examples_k8s.py: mount propagation, privileged where it mounts,
# the DaemonSet's surge and dcrfs --takeover, no privilege without a
# mount), checked offline with Debian's python3-yaml (no cluster, no
# kubeconform in bookworm); and layout B's helper, fuse-fd-helper.py,
# mounts a store for a dcrfs without CAP_SYS_ADMIN on this machine, a
# mount that --takeover cannot take over (README.md says so).
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
