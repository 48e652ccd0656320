#!/usr/bin/env bash
# fds.sh - a mount's open descriptors stay bounded as versions come
# (issue 30: 15 -> 126 over 59 versions in a soak, not known to level
# off): 50 versions of three files, each read through latest/ as it
# appears, open 150 slabs; the daemon's descriptors level off (idle
# slabs beyond the cache's cap are closed, least recently used first)
# instead of growing by two per version. scripts/bench-fds measures the
# same over 1,000 versions.
. "$(dirname "$0")/lib.sh"
need_fuse
need_bins
N=50
mkdir -p "$T/tree"
rand_file "$T/tree/a.bin" 70000 a
rand_file "$T/tree/b.bin" 9000 b
rand_file "$T/tree/c.bin" 5000 c
commit "$T/store" "$T/tree" >/dev/null
mount_dcrfs "$T/store" "$T/mnt" "cache_dir=$T/cache,poll=0.2,prefetch=latest"
nfd() { find /proc/"$MOUNT_PID"/fd -mindepth 1 2>/dev/null | wc -l; }
for ((v = 2; v <= N; v++)); do
	printf '%08d' "$v" | dd of="$T/tree/a.bin" bs=1 seek=$((v * 500)) conv=notrunc status=none
	printf '%08d' "$v" | dd of="$T/tree/b.bin" bs=1 seek=$((v * 80)) conv=notrunc status=none
	printf '%08d' "$v" | dd of="$T/tree/c.bin" bs=1 seek=$((v * 50)) conv=notrunc status=none
	commit "$T/store" "$T/tree" --cache-dir "$T/ccache" >/dev/null 2>&1 || fail "commit $v failed"
	for _ in $(seq 100); do [ -e "$T/mnt/v$v" ] && break; sleep 0.05; done
	cat "$T/mnt/latest/a.bin" "$T/mnt/latest/b.bin" "$T/mnt/latest/c.bin" >/dev/null || fail "read of v$v failed"
	[ "$v" != 30 ] || at30=$(nfd)
done
cmp "$T/mnt/latest/a.bin" "$T/tree/a.bin" || fail "latest/a.bin differs"
atN=$(nfd)
[ "$atN" -le $((at30 + 8)) ] ||
	fail "descriptors grow with versions: $at30 at v30, $atN at v$N: $(ls -l /proc/"$MOUNT_PID"/fd | tail -5)"
umount_dcrfs "$T/mnt" || fail "unmount failed"
log "ok: $at30 descriptors at v30, $atN at v$N (150 slabs opened)"
