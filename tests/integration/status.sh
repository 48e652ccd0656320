#!/usr/bin/env bash
# status.sh - the mount's hidden status files and dcrfs-ctl status:
# MNT/.dcrfs is found by lookup but not listed in the root, is read-only,
# status.json reports the store, latest and versions (and follows a new
# version and the prefetch of it), the counters move with reads (bytes
# read, fetched, materialized, verified, hits on a re-read), metrics is
# Prometheus text, and dcrfs-ctl status MNT [--json] prints the same -
# of a dcrfs mount only: not of a plain directory with a status file of
# its own, nor a FIFO there (without hanging), a directory inside the
# mount, or another FUSE file system.
. "$(dirname "$0")/lib.sh"
need_fuse
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS_SYNTH" "$DCRFS_CTL"
command -v python3 >/dev/null 2>&1 || skip "python3 is missing"

S=$MNT/.dcrfs/status.json

t "$DCRFS_SYNTH" init --size 2M --seed 1 --quiet "$T/s1"
rm -f "$T/s1/.dcrfs-synth.state"
[ "$(commit "$STORE" "$T/s1")" = 1 ] || fail "s1 is not version 1"
mount_dcrfs "$STORE" "$MNT" "poll=0.2,prefetch=latest"

# hidden, found by lookup, read-only
ls -a "$MNT" | grep -q dcrfs && fail "the root lists .dcrfs: $(ls -a "$MNT")"
[ -d "$MNT/.dcrfs" ] || fail ".dcrfs is not found by lookup"
[ "$(ls "$MNT/.dcrfs" | tr '\n' ' ')" = "latest metrics status.json " ] ||
	fail ".dcrfs lists $(ls "$MNT/.dcrfs")"
if (echo x >"$S") 2>/dev/null; then fail "status.json is writable"; fi
cp "$S" "$T/st.json"
py "$T/st.json" '
assert d["store"] == "file://" + sys.argv[2], d["store"]
assert d["latest"] == 1 and d["versions"] == 1, d
assert d["prefetch"]["mode"] == "latest", d
for k in ("cache", "bytes", "errors", "prefetch", "rss_bytes"):
    assert k in d, k
assert d["cache"]["budget"] > 0, d' "$STORE"
# size 0, like /proc (the text is made at open): cp and cat copy it whole
[ "$(stat -c %s "$S")" = 0 ] || fail "status.json has a size: $(stat -c %s "$S")"
cp "$S" "$T/st.cp" && py "$T/st.cp" 'assert d["latest"] == 1' || fail "cp of status.json is not whole JSON"

# a new version: latest and the prefetch of it follow
t "$DCRFS_SYNTH" step --mode uniform --rate 0.03 --seed 2 --in "$T/s1" --out "$T/s2" --state "$T/adam" --quiet
[ "$(commit "$STORE" "$T/s2")" = 2 ] || fail "s2 is not version 2"
for ((i = 0; i < 100; i++)); do
	cp "$S" "$T/st.json"
	py "$T/st.json" 'sys.exit(0 if d["latest"] == 2 and d["prefetch"]["done"] == 2 else 1)' && break
	sleep 0.1
done
py "$T/st.json" '
assert d["latest"] == 2 and d["versions"] == 2, d
assert d["prefetch"]["done"] == 2 and d["prefetch"]["versions_done"] >= 1, d
b = d["bytes"]
assert b["materialized"] > 0 and b["verified"] >= b["materialized"], b
assert b["fetched"] > 0, b
assert d["cache"]["bytes"] > 0, d' || fail "after v2 and its prefetch: $(cat "$T/st.json")"

# reads count; a re-read of prefetched bytes hits
before=$(py "$T/st.json" 'print(d["cache"]["hits"])')
cmp "$MNT/v2/model.safetensors" "$T/s2/model.safetensors" || fail "v2 reads wrong"
cp "$S" "$T/st.json"
# (with passthrough the kernel reads the prefetched file itself: the
# open is counted, the daemon serves no read)
py "$T/st.json" '
if d["passthrough"]["active"]:
    assert d["opens"]["passthrough"] >= 1, d["opens"]
    assert d["passthrough"]["reads_seen"] == 0 and d["reads"] == 0, d
else:
    assert d["reads"] > 0 and d["bytes"]["read"] > 0, d
    assert d["cache"]["hits"] > int(sys.argv[2]), d
    assert 0 < d["cache"]["hit_rate"] <= 1, d
assert d["errors"] == {"reads": 0, "fetches": 0, "refreshes": 0, "cache": 0, "tags": 0}, d["errors"]' "$before" || fail "after a read: $(cat "$T/st.json")"

# metrics: Prometheus text
cp "$MNT/.dcrfs/metrics" "$T/metrics"
grep -q '^dcrfs_latest_version 2$' "$T/metrics" || fail "metrics: $(cat "$T/metrics")"
grep -q "^dcrfs_info{store=\"file://$STORE\",prefetch=\"latest\"} 1$" "$T/metrics" ||
	fail "metrics has no dcrfs_info: $(head "$T/metrics")"
grep -q '^# TYPE dcrfs_verified_bytes_total counter$' "$T/metrics" || fail "metrics: no TYPE lines"
grep -q '^dcrfs_errors_total{kind="fetch"} 0$' "$T/metrics" || fail "metrics: no errors"
if grep -vE '^(# (HELP|TYPE) dcrfs_[a-z_]+ .+|dcrfs_[a-z_]+(\{[a-z]+="[^"]*"(,[a-z]+="[^"]*")*\})? [0-9.e+-]+)$' "$T/metrics"; then
	fail "metrics has lines that are not Prometheus text"
fi

# dcrfs-ctl status
t "$DCRFS_CTL" status "$MNT" --json >"$T/ctl.json"
py "$T/ctl.json" 'assert d["latest"] == 2 and d["versions"] == 2 and "store" in d, d' ||
	fail "dcrfs-ctl status --json: $(cat "$T/ctl.json")"
t "$DCRFS_CTL" status "$MNT" >"$T/ctl.txt"
grep -q "^latest: *v2 (2 versions known" "$T/ctl.txt" || fail "dcrfs-ctl status: $(cat "$T/ctl.txt")"
grep -q "^store: *file://$STORE" "$T/ctl.txt" || fail "dcrfs-ctl status: $(cat "$T/ctl.txt")"
rc=0
t "$DCRFS_CTL" status "$T" >"$T/out" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "dcrfs-ctl status of a directory that is no mount exited $rc"
grep -q "is a dcrfs mounted" "$T/out" || fail "dcrfs-ctl status of no mount: $(cat "$T/out")"

# refused: not a dcrfs mount  (status_refused DIR WHY)
status_refused() {
	local rc=0
	timeout -k 2 10 "$DCRFS_CTL" status "$1" >"$T/out" 2>&1 || rc=$?
	[ "$rc" = 1 ] || fail "dcrfs-ctl status of $2 exited $rc (124: it hung): $(cat "$T/out")"
	grep -q "$3" "$T/out" || fail "dcrfs-ctl status of $2: $(cat "$T/out")"
	if grep -q '"latest"\|^latest:' "$T/out"; then fail "dcrfs-ctl status of $2 printed it: $(cat "$T/out")"; fi
}
mkdir -p "$T/fake/.dcrfs" "$T/fifo/.dcrfs"
cp "$T/ctl.json" "$T/fake/.dcrfs/status.json"
status_refused "$T/fake" "a plain directory with a status.json" "is not a dcrfs mount"
mkfifo "$T/fifo/.dcrfs/status.json"
status_refused "$T/fifo" "a directory with a FIFO for status.json" "is not a dcrfs mount"
status_refused "$MNT/v2" "a directory inside the mount" "give the directory it is mounted on"
mount_dcrfs "$STORE" "$T/other" "cache_dir=$T/cache2,subtype=other"
status_refused "$T/other" "a FUSE file system of another type" "fuse.other, not fuse.dcrfs"
umount_dcrfs "$T/other"

umount_dcrfs "$MNT"
log "ok"
