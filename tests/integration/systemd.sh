#!/usr/bin/env bash
# systemd.sh - the example units in examples/systemd (shipped in the
# dcrfs package's examples, documented in dcrfs(8)): `systemd-analyze
# verify` accepts them (it needs no running systemd), and the mount
# unit's Options= line, with its cache directory and metrics port moved
# into this test, mounts a store with the dcrfs under test and serves
# /metrics on loopback.
. "$(dirname "$0")/lib.sh"
command -v systemd-analyze >/dev/null 2>&1 || skip "systemd-analyze missing (scripts/install-deps)"
EX=$DCR_SRCDIR/examples/systemd
[ -f "$EX/mnt-dcr.mount" ] && [ -f "$EX/mnt-dcr.automount" ] || fail "example units missing in $EX"
grep -q 'mnt-dcr\.mount' "$DCR_SRCDIR/man/dcrfs.8" || fail "dcrfs(8) does not document the units"

# --man=no: dcrfs(8) is not installed from a build tree (deb.sh checks
# the Documentation= line against the installed page).
(cd "$EX" && t systemd-analyze verify --man=no ./mnt-dcr.mount ./mnt-dcr.automount) \
	>"$T/verify.log" 2>&1 || fail "systemd-analyze verify: $(cat "$T/verify.log")"
[ -s "$T/verify.log" ] && fail "systemd-analyze verify warns: $(cat "$T/verify.log")"
grep -qx 'Type=fuse.dcrfs' "$EX/mnt-dcr.mount" || fail "the mount unit is not Type=fuse.dcrfs"
opts=$(sed -n 's/^Options=//p' "$EX/mnt-dcr.mount")
case ",$opts," in *,_netdev,*) ;; *) fail "Options= lacks _netdev: $opts" ;; esac
case ",$opts," in *,cache_dir=*) ;; *) fail "Options= lacks cache_dir: $opts" ;; esac
case ",$opts," in *,metrics=127.0.0.1:*) ;; *) fail "Options= serves metrics beyond loopback: $opts" ;; esac

# The same options on a real mount (mount.fuse3 drops _netdev itself).
need_fuse
need_root
need_bins
command -v curl >/dev/null 2>&1 || skip "curl missing"
mkdir -p "$T/tree"
printf 'weights\n' >"$T/tree/w.bin"
commit "$T/store" "$T/tree" >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
o=$(printf '%s' "$opts" | tr ',' '\n' | grep -v '^_netdev$' |
	sed "s|^cache_dir=.*|cache_dir=$T/cache|; s|^metrics=127.0.0.1:.*|metrics=127.0.0.1:$port|" | paste -sd,)
mount_dcrfs "$T/store" "$T/mnt" "$o"
cmp "$T/tree/w.bin" "$T/mnt/latest/w.bin" || fail "the unit's options serve wrong bytes"
m=$(t curl -sf "http://127.0.0.1:$port/metrics") || fail "no /metrics on 127.0.0.1:$port"
grep -q '^dcrfs_' <<<"$m" || fail "/metrics is not dcrfs's Prometheus text: $m"
umount_dcrfs "$T/mnt" || fail "unmount failed"
log "ok: units verify; their options mount and serve /metrics on loopback"
