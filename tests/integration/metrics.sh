#!/usr/bin/env bash
# metrics.sh - the mount's scrape endpoint and log level:
#  - -o metrics=127.0.0.1:PORT serves GET /metrics, Prometheus text with
#    the same metrics as MNT/.dcrfs/metrics, counting the reads made;
#    other paths are 404, other methods 405; unmounting stops it;
#  - 20 slow clients (a header line every 2 s) do not keep it
#    unreachable (a deadline for the request head, the oldest dropped);
#  - a port in use fails the mount at once (exit 1), naming the address;
#    a malformed metrics= is a usage error (2);
#  - -o log_level=error logs no info line; debug logs debug lines; on a
#    compacted store, "0 versions re-encoded" is not said at info;
#  - a bad log_level is a usage error (2).
. "$(dirname "$0")/lib.sh"
need_fuse
need_bins "$DCR_BUILDDIR/dcrfs-ctl"
command -v curl >/dev/null 2>&1 || skip "curl missing"
CTL=$DCR_BUILDDIR/dcrfs-ctl
mkdir -p "$T/tree"
rand_file "$T/tree/w.bin" 3000000 m
for i in 1 2 3 4; do
	[ "$i" = 1 ] || printf 'abc' | dd of="$T/tree/w.bin" bs=1 seek=$((i * 700000)) \
		conv=notrunc 2>/dev/null
	commit "$STORE" "$T/tree" >/dev/null
done
t "$CTL" --store "$STORE" --quiet compact --max-depth 2 >/dev/null || fail "compact failed"
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
PORT=$(free_port)

mount_dcrfs "$STORE" "$T/mnt" "metrics=127.0.0.1:$PORT,log_level=debug,prefetch=none"
cat "$T/mnt/latest/w.bin" >/dev/null
m=$(t curl -sf "http://127.0.0.1:$PORT/metrics") || fail "GET /metrics failed"
f=$(cat "$T/mnt/.dcrfs/metrics")
names() { sed -n 's/^\(dcrfs_[a-z_]*\).*/\1/p' | sort -u; }
[ -n "$(names <<<"$m")" ] || fail "/metrics has no dcrfs_ metric: $m"
[ "$(names <<<"$m")" = "$(names <<<"$f")" ] ||
	fail "/metrics and .dcrfs/metrics differ: $(diff <(names <<<"$m") <(names <<<"$f"))"
grep -q '^# TYPE dcrfs_' <<<"$m" || fail "/metrics lacks # TYPE lines"
reads=$(sed -n 's/^dcrfs_reads_total \([0-9]*\)$/\1/p' <<<"$m")
[ -n "$reads" ] && [ "$reads" -gt 0 ] || fail "/metrics counts no reads: $(grep reads <<<"$m")"
ct=$(curl -s -o /dev/null -w '%{content_type}' "http://127.0.0.1:$PORT/metrics")
case $ct in text/plain*version=0.0.4*) ;; *) fail "content type '$ct'" ;; esac
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/")" = 404 ] || fail "/ is not 404"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$PORT/metrics")" = 405 ] ||
	fail "POST is not 405"

# 20 slow clients (a header line every 2 s, never ending their request
# head; libmicrohttpd's inactivity timeout never fires) do not keep
# /metrics unreachable: each scrape within 3 s.
python3 - "$PORT" >"$T/slow.log" 2>&1 <<'PY' &
import socket, sys, time
socks = []
for i in range(20):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
    socks.append(s)
end = time.time() + 12
while time.time() < end:
    time.sleep(2)
    for s in socks:
        try:
            s.sendall(b"X-Slow: 1\r\n")
        except OSError:
            pass
PY
SLOW_PID=$!
sleep 1
for i in 1 2 3 4; do
	t curl -sf --max-time 3 -o /dev/null "http://127.0.0.1:$PORT/metrics" ||
		fail "/metrics unreachable under 20 slow clients (scrape $i)"
	sleep 1.5
done
kill "$SLOW_PID" 2>/dev/null || true
wait "$SLOW_PID" 2>/dev/null || true

# The port is taken now: a second mount fails at once, naming it.
mkdir -p "$T/mnt2"
expect_status 1 "cannot serve metrics on 127.0.0.1:$PORT: Address already in use" \
	"$DCRFS" "$STORE" "$T/mnt2" -f -o "cache_dir=$T/cache2,metrics=127.0.0.1:$PORT"
mountpoint -q "$T/mnt2" && fail "$T/mnt2 was mounted"
expect_status 2 "bad metrics" "$DCRFS" "$STORE" "$T/mnt2" -f -o metrics=9741
expect_status 2 "bad log_level" "$DCRFS" "$STORE" "$T/mnt2" -f -o log_level=loud

umount_dcrfs "$T/mnt" || fail "unmount failed"
grep -q ': debug: ' "$MOUNT_LOG" || fail "log_level=debug logged no debug line: $(cat "$MOUNT_LOG")"
grep ': info: .*re-encoded' "$MOUNT_LOG" && fail "routine 're-encoded' at info"
curl -s -o /dev/null "http://127.0.0.1:$PORT/metrics" && fail "/metrics still served after unmount"

mount_dcrfs "$STORE" "$T/mnt" "log_level=error"
cmp "$T/tree/w.bin" "$T/mnt/latest/w.bin" || fail "wrong bytes"
umount_dcrfs "$T/mnt" || fail "unmount failed"
[ -s "$MOUNT_LOG" ] && fail "log_level=error logged: $(cat "$MOUNT_LOG")"
log "ok: /metrics on loopback as .dcrfs/metrics, port in use named, log levels"
