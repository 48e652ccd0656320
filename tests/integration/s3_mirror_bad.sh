#!/usr/bin/env bash
# s3_mirror_bad.sh - a mirror that damages every body it serves (the
# fault proxy flipping a byte of each pack GET, in front of the S3
# server, given as -o mirror=) is backed off like a failing one (issue
# 30): the file reads right, few GETs go to the mirror (not one per
# frame, each fetched again from the store), and its failure is logged
# once per incident, not once per frame.
. "$(dirname "$0")/lib.sh"
. "$DCR_SRCDIR/tests/integration/s3lib.sh"
need_fuse
need_bins
command -v python3 >/dev/null 2>&1 || skip "python3 is missing"
s3_setup moto # light enough; the mirror logic is ours
STORE=$(s3_url store)
RULES=$T/rules.json
FLOG=$T/faults.log
: >"$FLOG"
printf '%s\n' '[{"method": "GET", "path": "/packs/", "fault": "flip"}]' >"$RULES"
start_faultproxy "$AWS_ENDPOINT_URL" "$RULES" "$FLOG"
MIRROR=$PROXY

mkdir -p "$T/tree"
N=16
rand_file "$T/tree/w.bin" $((8 * 65536)) w
for ((v = 1; v <= N; v++)); do
	[ "$v" = 1 ] || flip_bytes "$T/tree/w.bin" 0.01 "$v"
	[ "$(commit "$STORE" "$T/tree" --chunk-size 64K)" = "$v" ] || fail "commit $v failed"
	cp "$T/tree/w.bin" "$T/want.$v"
done
s3_mount "$STORE" "$T/mnt" "$S3_OPTS,mirror=$MIRROR,cache_dir=$T/cache,prefetch=none"
# each version read after the one before: its own pack, its own GETs
for ((v = 1; v <= N; v++)); do
	cmp "$T/mnt/v$v/w.bin" "$T/want.$v" || fail "v$v: WRONG BYTES through a damaging mirror"
done
read -r mreq refetches < <(py "$T/mnt/.dcrfs/status.json" '
m = [s for s in d["sources"] if s["kind"] == "mirror"][0]
print(m["requests"], d["refetches"])')
grep -q "^flip GET .*/packs/" "$FLOG" || fail "the proxy damaged nothing: $(head -3 "$FLOG")"
lines=$(grep -c "its bytes failed their check" "$MOUNT_LOG" || true)
umount_dcrfs "$T/mnt" || fail "unmount failed"
[ "$mreq" -le $((N / 2)) ] || fail "$mreq GETs for $N versions went to a mirror damaging every body"
[ "$refetches" -le $((N / 2)) ] || fail "$refetches frames fetched twice"
[ "$lines" -le 2 ] || fail "$lines lines about the damaging mirror: $(grep 'failed their check' "$MOUNT_LOG" | head -3)"
log "ok: $N versions read right; $mreq GETs to the damaging mirror, $refetches refetched, $lines log lines"
