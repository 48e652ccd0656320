#!/usr/bin/env bash
# s3_fanout.sh - fan-out through the cache tier (scripts/cache-tier:
# Debian's nginx with the slice module) in front of radosgw, the mounts
# signing SigV4 for the tier (-o mirror=URL), the fault proxy between the
# tier and the origin:
#   8 mounts read a version at once, then a new one, through the tier:
#   the origin sends each version's packs about once (bytes counted from
#   the tier's log of upstream bytes); a new version is visible at once
#   (the tier never sees anything but packs); a warm re-read costs the
#   origin 0 bytes; dcrfs-ctl warm fills the tier with a new version's
#   packs, and a cold mount then reads it costing the origin 0 bytes (a
#   warm through a tier that is down fails, naming it); dcrfs-commit
#   --warm-mirror warms a version's packs through the tier before it
#   publishes it, so a mount reading it right after the commit costs the
#   origin 0 pack bytes (a tier that is down or stalled: one line, the
#   version published anyway, within the bound); a ranged GET across a slice boundary and a zero-length
#   object come back right; a corrupted byte in the tier's cache never
#   reaches a reader (refetched from the store); the tier down: reads come
#   from the store; the origin's 5xx through the tier: the mount goes to
#   the store, and the 5xx is not cached.
. "$(dirname "$0")/lib.sh"
. "$DCR_SRCDIR/tests/integration/s3lib.sh"
need_fuse
need_bins
TIER=$DCR_SRCDIR/scripts/cache-tier
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] ||
	skip "nginx is missing (Debian: nginx-light; scripts/install-deps)"
s3_setup
[ "$DCR_S3_SERVER" = radosgw ] || skip "needs radosgw (signatures checked against the Host the tier preserves)"

SLICE=$((1024 * 1024))
STORE=$(s3_url store)
PREFIX=${STORE#s3://"$DCR_S3_BUCKET"/}
NMOUNTS=8

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# the fault proxy between the tier and the origin
RULES=$T/rules.json
echo '[]' >"$RULES"
start_faultproxy "$AWS_ENDPOINT_URL" "$RULES" "$T/faults.log"

# tier_start DIR - a tier in front of the proxy; sets TIER_URL.
tier_start() {
	local port
	port=$(free_port)
	t "$TIER" start --origin "$PROXY" --listen "127.0.0.1:$port" --dir "$1" \
		--size 1g 2>>"$T/tier.log" || { cat "$T/tier.log" >&2; fail "cache-tier start failed"; }
	TIER_DIRS+=("$1")
	TIER_URL=http://127.0.0.1:$port
}
TIER_DIRS=()
_fanout_exit() {
	local rc=$? d
	set +e
	for d in "${TIER_DIRS[@]}"; do
		"$TIER" stop --dir "$d" 2>/dev/null
	done
	local next=_cleanup
	[ "$S3_OWN" = 1 ] && next=_s3_exit
	(exit "$rc")
	"$next" # takes the status from \$?
}
trap _fanout_exit EXIT

# origin_bytes DIR - bytes the origin sent to the tier in DIR (its log of
# $upstream_bytes_received, headers included), every slice counted.
origin_bytes() {
	python3 - "$1/log/access.log" <<'PY'
import re, sys
n = 0
for line in open(sys.argv[1]):
    m = re.search(r" up_bytes=([0-9, :]+)", line)
    if m:
        n += sum(int(x) for x in re.findall(r"[0-9]+", m.group(1)))
print(n)
PY
}

# pack_bytes V... - the stored bytes of the packs the versions' manifests
# name (what a cold mount of those versions may need).
pack_bytes() {
	awscli s3api list-objects-v2 --bucket "$DCR_S3_BUCKET" --prefix "$PREFIX/packs/" \
		--query 'Contents[].[Key,Size]' --output text >"$T/packs.now"
	python3 - "$T/packs.now" "$@" <<'PY'
import sys
old = set()
for f in sys.argv[2:]:
    old |= {l.split()[0] for l in open(f)}
print(sum(int(l.split()[1]) for l in open(sys.argv[1]) if l.split()[0] not in old))
PY
}

# tier_get URL KEY RANGE OUT - a GET of KEY signed (SigV4) for the tier as
# dcrfs signs (Range not signed); RANGE "" for none. Prints the status.
tier_get() {
	python3 - "$@" <<'PY'
import datetime, hashlib, hmac, os, sys, urllib.parse, http.client
url, key, rng, out = sys.argv[1:5]
u = urllib.parse.urlsplit(url)
path = "/%s/%s" % (os.environ["DCR_S3_BUCKET"], key)
now = datetime.datetime.utcnow()
amz, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
region, ak, sk = os.environ["AWS_REGION"], os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
e = hashlib.sha256(b"").hexdigest()
canon = "GET\n%s\n\nhost:%s\nx-amz-content-sha256:%s\nx-amz-date:%s\n\nhost;x-amz-content-sha256;x-amz-date\n%s" % (
    urllib.parse.quote(path), u.netloc, e, amz, e)
scope = "%s/%s/s3/aws4_request" % (day, region)
sts = "AWS4-HMAC-SHA256\n%s\n%s\n%s" % (amz, scope, hashlib.sha256(canon.encode()).hexdigest())
k = ("AWS4" + sk).encode()
for m in (day, region, "s3", "aws4_request"):
    k = hmac.new(k, m.encode(), hashlib.sha256).digest()
sig = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
h = {"x-amz-date": amz, "x-amz-content-sha256": e, "Authorization":
     "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=%s" % (ak, scope, sig)}
if rng:
    h["Range"] = "bytes=" + rng
c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
c.request("GET", urllib.parse.quote(path), headers=h)
r = c.getresponse()
body = r.read()
open(out, "wb").write(body if r.status < 300 else b"")
print(r.status)
PY
}

# read_all MNT V OUT - the SHA-256 of every file of MNT/vV into OUT.
read_all() {
	(cd "$1/v$2" && find . -type f | sort | xargs -r sha256sum) >"$3"
}

# ---------------------------------------------------------- the versions
mkdir -p "$T/tree.1"
rand_file "$T/tree.1/model.bin" $((6 * 1024 * 1024 + 4321)) m1
rand_file "$T/tree.1/small.bin" 70001 s1
: >"$T/tree.1/empty"
(cd "$T/tree.1" && find . -type f | sort | xargs sha256sum) >"$T/want.1"
[ "$(commit "$STORE" "$T/tree.1")" = 1 ] || fail "commit of v1 failed"
pack_bytes >"$T/pb.1"
cp "$T/packs.now" "$T/packs.1"
log "v1: $(cat "$T/pb.1") pack bytes"

tier_start "$T/tier"
# (prefetch=none: the origin bytes are counted per round of reads)
MOPTS="$S3_OPTS,mirror=$TIER_URL,poll=0.2,prefetch=none"

for i in $(seq "$NMOUNTS"); do
	s3_mount "$STORE" "$T/m$i" "$MOPTS,cache_dir=$T/cache.$i"
done

# round N V - every mount reads version V at once; checks the bytes.
round() {
	local v=$1 i pids=()
	for i in $(seq "$NMOUNTS"); do
		read_all "$T/m$i" "$v" "$T/got.$v.$i" &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || fail "mount $((i + 1)): reading v$v failed"
	done
	for i in $(seq "$NMOUNTS"); do
		diff "$T/want.$v" "$T/got.$v.$i" >/dev/null ||
			fail "mount $i read v$v wrong: $(diff "$T/want.$v" "$T/got.$v.$i" | head -3)"
	done
}

# bytes_ok BEFORE PACKBYTES NPACKS WHAT - the origin sent at most the
# packs' bytes plus one slice of rounding per pack, plus 1 KiB of headers
# per upstream response.
bytes_ok() {
	local got ups
	got=$(($(origin_bytes "$T/tier") - $1))
	ups=$(grep -c "up_bytes=[0-9]" "$T/tier/log/access.log")
	log "$4: origin sent $got bytes for $2 pack bytes ($(python3 -c "print(round($got / max($2, 1), 3))")x)"
	[ "$got" -le $(($2 + $3 * SLICE + ups * 1024)) ] ||
		fail "$4: the origin sent $got bytes, more than $2 pack bytes + rounding"
	[ "$got" -ge "$2" ] || fail "$4: the origin sent $got bytes, less than the $2 pack bytes read (the count is wrong)"
}

b0=$(origin_bytes "$T/tier")
round 1
bytes_ok "$b0" "$(cat "$T/pb.1")" "$(wc -l <"$T/packs.1")" "$NMOUNTS mounts read v1"

# a new version is visible at once through a mount with a mirror
mkdir -p "$T/tree.2"
cp -a "$T/tree.1/." "$T/tree.2/"
flip_bytes "$T/tree.2/model.bin" 0.002 2
rand_file "$T/tree.2/added.bin" $((1536 * 1024 + 7)) a2
(cd "$T/tree.2" && find . -type f | sort | xargs sha256sum) >"$T/want.2"
[ "$(commit "$STORE" "$T/tree.2")" = 2 ] || fail "commit of v2 failed"
t0=$(date +%s%N)
wait_for_file "$T/m1/v2" 5 || fail "v2 not visible through the mirrored mount within 5 s"
log "v2 visible through a mirrored mount after $((($(date +%s%N) - t0) / 1000000)) ms"
pack_bytes "$T/packs.1" >"$T/pb.2"
grep -v -F -f <(cut -f1 "$T/packs.1") "$T/packs.now" >"$T/packs.2" || true

b1=$(origin_bytes "$T/tier")
round 2
bytes_ok "$b1" "$(cat "$T/pb.2")" "$(wc -l <"$T/packs.2")" "$NMOUNTS mounts read the new v2"

# the tier saw nothing but pack GETs (versions, manifests, tags, the
# marker and listings went to the store)
if grep -v '^[0-9.]* 403 GET "/" ' "$T/tier/log/access.log" | grep -v ' GET "/[^"]*/packs/[0-9a-f]\{64\}"' |
	grep -q .; then
	fail "the tier was asked for something else than packs: $(grep -v '/packs/' "$T/tier/log/access.log" | head -3)"
fi
for i in $(seq "$NMOUNTS"); do
	py "$T/m$i/.dcrfs/status.json" '
m = d["sources"][1]
assert d["sources"][0]["kind"] == "store" and m["kind"] == "mirror", d["sources"]
assert m["requests"] > 0 and m["bytes"] > 0 and m["errors"] == 0, m' ||
		fail "mount $i: status.json sources: $(grep sources "$T/m$i/.dcrfs/status.json")"
done
for i in $(seq "$NMOUNTS"); do umount_dcrfs "$T/m$i" || fail "unmount of m$i failed"; done

# a warm re-read costs the origin nothing
b2=$(origin_bytes "$T/tier")
s3_mount "$STORE" "$T/w" "$MOPTS,cache_dir=$T/cache.w"
read_all "$T/w" 2 "$T/got.w"
diff "$T/want.2" "$T/got.w" >/dev/null || fail "the warm re-read of v2 is wrong"
[ "$(origin_bytes "$T/tier")" = "$b2" ] ||
	fail "a warm re-read cost the origin $(($(origin_bytes "$T/tier") - b2)) bytes"
grep -q '^dcrfs_source_bytes_total{kind="mirror",source="'"$TIER_URL"'"} [1-9]' "$T/w/.dcrfs/metrics" ||
	fail "metrics count no mirror bytes: $(grep source_ "$T/w/.dcrfs/metrics")"
umount_dcrfs "$T/w"
log "a warm re-read of v2 cost the origin 0 bytes"

# dcrfs-ctl warm: the tier gets v3's packs before any mount reads v3; a
# cold mount then reads v3 (v1 and v2 are in the tier from the rounds)
# costing the origin nothing
mkdir -p "$T/tree.3"
cp -a "$T/tree.2/." "$T/tree.3/"
flip_bytes "$T/tree.3/model.bin" 0.002 3
rand_file "$T/tree.3/added3.bin" $((2560 * 1024 + 11)) a3 # a pack of 3 slices
(cd "$T/tree.3" && find . -type f | sort | xargs sha256sum) >"$T/want.3"
[ "$(commit "$STORE" "$T/tree.3")" = 3 ] || fail "commit of v3 failed"
pack_bytes "$T/packs.1" "$T/packs.2" >"$T/pb.3"
grep -v -F -f <(cut -f1 "$T/packs.1" "$T/packs.2") "$T/packs.now" >"$T/packs.3" || true
[ "$(cat "$T/pb.3")" -gt 0 ] || fail "v3 has no new packs"
b3=$(origin_bytes "$T/tier")
t "$DCR_BUILDDIR/dcrfs-ctl" --store "$STORE" warm --mirror "$TIER_URL" --slice 1M --jobs 4 \
	--json 3 >"$T/warm.json" 2>"$T/warm.err" || fail "dcrfs-ctl warm failed: $(cat "$T/warm.err")"
py "$T/warm.json" '
import sys
want = int(open(sys.argv[2]).read())
assert d["version"] == 3 and d["failed"] == 0 and d["pieces"] >= 3, d
assert d["bytes"] == want and d["bytes_warmed"] == want, (d, want)
assert [m["url"] for m in d["mirrors"]] == [sys.argv[3]], d
assert d["mirrors"][0]["bytes"] == want and d["mirrors"][0]["errors"] == 0, d' "$T/pb.3" "$TIER_URL" ||
	fail "dcrfs-ctl warm --json: $(cat "$T/warm.json")"
bytes_ok "$b3" "$(cat "$T/pb.3")" "$(wc -l <"$T/packs.3")" "dcrfs-ctl warm of v3"
b4=$(origin_bytes "$T/tier")
s3_mount "$STORE" "$T/wv" "$MOPTS,cache_dir=$T/cache.wv"
read_all "$T/wv" 3 "$T/got.wv"
diff "$T/want.3" "$T/got.wv" >/dev/null || fail "v3 read through the warmed tier is wrong"
[ "$(origin_bytes "$T/tier")" = "$b4" ] ||
	fail "after dcrfs-ctl warm, reading v3 cost the origin $(($(origin_bytes "$T/tier") - b4)) bytes"
umount_dcrfs "$T/wv"
log "dcrfs-ctl warm sent v3's $(cat "$T/pb.3") pack bytes through the tier in $(py "$T/warm.json" 'print(d["seconds"])') s; a cold mount then read v3 costing the origin 0 bytes"

# dcrfs-commit --warm-mirror: v4's new packs go through the tier after
# their upload and before v4 is published; a cold mount reading v4 right
# after the commit costs the origin 0 bytes
mkdir -p "$T/tree.4"
cp -a "$T/tree.3/." "$T/tree.4/"
flip_bytes "$T/tree.4/model.bin" 0.002 4
rand_file "$T/tree.4/added4.bin" $((2560 * 1024 + 13)) a4 # a pack of 3 slices
(cd "$T/tree.4" && find . -type f | sort | xargs sha256sum) >"$T/want.4"
b5=$(origin_bytes "$T/tier")
v=$(commit "$STORE" "$T/tree.4" --warm-mirror "$TIER_URL" --warm-slice 1M --log-level info \
	2>"$T/cwarm.err") || fail "dcrfs-commit --warm-mirror failed: $(cat "$T/cwarm.err")"
[ "$v" = 4 ] || fail "dcrfs-commit --warm-mirror published '$v', not 4"
pack_bytes "$T/packs.1" "$T/packs.2" "$T/packs.3" >"$T/pb.4"
grep -v -F -f <(cut -f1 "$T/packs.1" "$T/packs.2" "$T/packs.3") "$T/packs.now" >"$T/packs.4" || true
[ "$(wc -l <"$T/packs.4")" -gt 0 ] || fail "v4 has no new packs"
bytes_ok "$b5" "$(cat "$T/pb.4")" "$(wc -l <"$T/packs.4")" "dcrfs-commit --warm-mirror of v4"
grep -q "warmed the [0-9]* new packs\? (.*) through the mirrors in .* before publishing versions/0000000004" "$T/cwarm.err" ||
	fail "dcrfs-commit --warm-mirror logged no warm before publishing: $(cat "$T/cwarm.err")"
b6=$(origin_bytes "$T/tier")
s3_mount "$STORE" "$T/cw" "$MOPTS,cache_dir=$T/cache.cw"
read_all "$T/cw" 4 "$T/got.cw"
diff "$T/want.4" "$T/got.cw" >/dev/null || fail "v4 read through the tier the commit warmed is wrong"
[ "$(origin_bytes "$T/tier")" = "$b6" ] ||
	fail "after dcrfs-commit --warm-mirror, reading v4 cost the origin $(($(origin_bytes "$T/tier") - b6)) bytes"
umount_dcrfs "$T/cw"
log "dcrfs-commit --warm-mirror warmed v4's $(cat "$T/pb.4") pack bytes before publishing; a cold mount then read v4 costing the origin 0 bytes"

# a ranged GET across a slice boundary, through the tier, right bytes
PACK=$(sort -k2 -n "$T/packs.1" | tail -n 1 | cut -f1)
PSIZE=$(sort -k2 -n "$T/packs.1" | tail -n 1 | cut -f2)
[ "$PSIZE" -gt $((2 * SLICE)) ] || fail "the biggest pack ($PSIZE bytes) does not cross two slices"
st=$(tier_get "$TIER_URL" "$PACK" "$((SLICE - 1000))-$((SLICE + 999))" "$T/cross")
[ "$st" = 206 ] || fail "a GET across a slice boundary: HTTP $st"
awscli s3api get-object --bucket "$DCR_S3_BUCKET" --key "$PACK" \
	--range "bytes=$((SLICE - 1000))-$((SLICE + 999))" "$T/cross.want" >/dev/null
cmp "$T/cross" "$T/cross.want" || fail "a GET across a slice boundary got the wrong bytes"
log "a ranged GET across a slice boundary: 206, right bytes"

# a zero-length object through the tier: no bytes, never an error
EMPTY=$PREFIX/packs/$(sha256sum </dev/null | cut -c1-64)
awscli s3api put-object --bucket "$DCR_S3_BUCKET" --key "$EMPTY" --body "$T/tree.1/empty" >/dev/null
for r in "" "0-" "" "0-1048575"; do
	st=$(tier_get "$TIER_URL" "$EMPTY" "$r" "$T/empty.got")
	case $st in 200 | 206 | 416) ;; *) fail "a zero-length object (range '$r'): HTTP $st" ;; esac
	[ ! -s "$T/empty.got" ] || fail "a zero-length object (range '$r') gave bytes"
done
log "a zero-length object through the tier: no bytes (HTTP $st)"

# a corrupted byte in the tier's cache never reaches a reader
n=0
while IFS= read -r -d '' f; do
	python3 -c 'import os, sys
p = sys.argv[1]
fd = os.open(p, os.O_RDWR)
sz = os.fstat(fd).st_size
b = bytearray(os.pread(fd, 1, sz - 2)); b[0] ^= 0x20
os.pwrite(fd, bytes(b), sz - 2)
os.close(fd)' "$f"
	n=$((n + 1))
done < <(find "$T/tier/cache" -type f -print0)
[ "$n" -gt 0 ] || fail "the tier cached nothing"
s3_mount "$STORE" "$T/c" "$MOPTS,cache_dir=$T/cache.c"
read_all "$T/c" 2 "$T/got.c"
diff "$T/want.2" "$T/got.c" >/dev/null || fail "a corrupted tier cache reached a reader"
grep -q "mirror $TIER_URL: GET .*its bytes failed their check" "$MOUNT_LOG" ||
	fail "no log line names the mirror of a bad frame: $(tail -n 5 "$MOUNT_LOG")"
grep -q '^dcrfs_mirror_refetches_total [1-9]' "$T/c/.dcrfs/metrics" ||
	fail "metrics count no refetch: $(grep refetch "$T/c/.dcrfs/metrics")"
umount_dcrfs "$T/c"
log "$n corrupted slices in the tier: read right ($(grep -c 'failed their check' "$MOUNT_LOG") lines)"

# the tier down: reads come from the store, one log line per incident
t "$TIER" stop --dir "$T/tier"
s3_mount "$STORE" "$T/d" "$MOPTS,cache_dir=$T/cache.d"
read_all "$T/d" 2 "$T/got.d"
diff "$T/want.2" "$T/got.d" >/dev/null || fail "with the tier down, v2 read wrong"
nl=$(grep -c "mirror $TIER_URL: GET .* failed" "$MOUNT_LOG" || true)
[ "$nl" = 1 ] || fail "the tier down: $nl incident lines, expected 1: $(grep mirror "$MOUNT_LOG")"
py "$T/d/.dcrfs/status.json" '
s, m = d["sources"]
assert m["errors"] >= 1 and m["bytes"] == 0, m
assert s["bytes"] > 0, s' || fail "tier down: sources $(grep sources "$T/d/.dcrfs/status.json")"
umount_dcrfs "$T/d"
log "the tier down: v2 read from the store, one incident line"
rc=0
"$DCR_BUILDDIR/dcrfs-ctl" --store "$STORE" warm --mirror "$TIER_URL" 3 >"$T/warm.out" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "dcrfs-ctl warm through a tier that is down: exit $rc, expected 1"
grep -q "through mirror $TIER_URL failed: Connection refused" "$T/warm.out" ||
	fail "dcrfs-ctl warm through a tier that is down does not say why: $(cat "$T/warm.out")"
log "dcrfs-ctl warm through a tier that is down: exit 1, the mirror named"
# dcrfs-commit --warm-mirror through a tier that is down: one line naming
# it, and the version is published anyway
mkdir -p "$T/tree.5"
cp -a "$T/tree.4/." "$T/tree.5/"
rand_file "$T/tree.5/added5.bin" 300007 a5
v=$(commit "$STORE" "$T/tree.5" --warm-mirror "$TIER_URL" 2>"$T/cdown.err") ||
	fail "dcrfs-commit --warm-mirror through a tier that is down failed: $(cat "$T/cdown.err")"
[ "$v" = 5 ] || fail "dcrfs-commit --warm-mirror through a tier that is down published '$v', not 5"
[ "$(grep -c . "$T/cdown.err")" = 1 ] && grep -q "through mirror $TIER_URL: .*; publishing anyway" "$T/cdown.err" ||
	fail "dcrfs-commit --warm-mirror through a tier that is down, expected one line naming it: $(cat "$T/cdown.err")"
log "dcrfs-commit --warm-mirror through a tier that is down: v5 published, one line"

# the origin answers 5xx through a (cold) tier: the mount goes to the
# store; the 5xx reaches it as a 5xx and is not cached
tier_start "$T/tier2"
fault_rules "$RULES" '[{"method": "GET", "path": "/packs/", "fault": "status:503", "count": -1}]'
s3_mount "$STORE" "$T/e" "$S3_OPTS,mirror=$TIER_URL,cache_dir=$T/cache.e,prefetch=none"
read_all "$T/e" 2 "$T/got.e"
diff "$T/want.2" "$T/got.e" >/dev/null || fail "with the origin failing through the tier, v2 read wrong"
grep -q "^status:503 GET" "$T/faults.log" || fail "the fault proxy injected nothing"
grep -q "mirror $TIER_URL: GET .* failed" "$MOUNT_LOG" ||
	fail "no incident line for the tier's 5xx: $(tail -n 5 "$MOUNT_LOG")"
grep -q '^[0-9.]* 503 GET' "$T/tier2/log/access.log" || fail "the tier did not pass the 503 on"
umount_dcrfs "$T/e"
fault_rules "$RULES" '[]'
st=$(tier_get "$TIER_URL" "$PACK" "0-99999" "$T/after5xx")
[ "$st" = 206 ] || fail "after the origin's 503s the tier answers HTTP $st (a cached error?)"
awscli s3api get-object --bucket "$DCR_S3_BUCKET" --key "$PACK" --range "bytes=0-99999" \
	"$T/after5xx.want" >/dev/null
cmp "$T/after5xx" "$T/after5xx.want" || fail "after the 503s the tier serves wrong bytes"
log "the origin's 503 through the tier: read from the store, not cached"

# dcrfs-commit --warm-mirror through a tier whose origin stalls: the warm
# gives up at --warm-timeout (far below the 30 s stall and a mirror
# request's own bound, 10 s), one line, and the version is published
fault_rules "$RULES" '[{"method": "GET", "path": "/packs/", "fault": "stall:30", "count": -1}]'
mkdir -p "$T/tree.6"
cp -a "$T/tree.5/." "$T/tree.6/"
rand_file "$T/tree.6/added6.bin" 300011 a6
t0=$(date +%s%N)
v=$(commit "$STORE" "$T/tree.6" --warm-mirror "$TIER_URL" --warm-timeout 2 2>"$T/cstall.err") ||
	fail "dcrfs-commit --warm-mirror through a stalled tier failed: $(cat "$T/cstall.err")"
ms=$((($(date +%s%N) - t0) / 1000000))
[ "$v" = 6 ] || fail "dcrfs-commit --warm-mirror through a stalled tier published '$v', not 6"
[ "$(grep -c . "$T/cstall.err")" = 1 ] && grep -q "publishing anyway" "$T/cstall.err" ||
	fail "dcrfs-commit --warm-mirror through a stalled tier, expected one line: $(cat "$T/cstall.err")"
[ "$ms" -lt 9000 ] || fail "dcrfs-commit --warm-mirror --warm-timeout 2 through a stalled tier took $ms ms"
fault_rules "$RULES" '[]'
log "dcrfs-commit --warm-mirror --warm-timeout 2 through a stalled tier: v6 published after $ms ms, one line"
