#!/usr/bin/env bash
# s3_proxy.sh - faults injected between dcrfs and a real S3 server by a
# proxy on loopback (tests/integration/faultproxy.py): 5xx and 429
# answers, connections reset mid-body, truncated and stalled bodies, 200
# to ranged GETs, flipped bytes, a reset while a PUT body is sent. Every
# read returns the right bytes or EIO, never others, and the mount heals
# when the proxy does; a manifest damaged on the way does not hide its
# version; commits either fail cleanly or publish versions that read back
# bit-exactly. Each fault is checked to have really been injected.
. "$(dirname "$0")/lib.sh"
. "$DCR_SRCDIR/tests/integration/s3lib.sh"
need_fuse
need_bins
s3_store
UPSTREAM=$AWS_ENDPOINT_URL
RULES=$T/rules.json
FLOG=$T/faults.log
: >"$FLOG"
echo '[]' >"$RULES"
start_faultproxy "$UPSTREAM" "$RULES" "$FLOG"
export AWS_ENDPOINT_URL=$PROXY
P_OPTS="endpoint=$PROXY,region=$AWS_REGION,credentials=$S3_CREDS,path_style,s3_timeout=4"

# rules JSON - replace the proxy's rules (s3lib.sh fault_rules)
rules() { fault_rules "$RULES" "$1"; }
# injected FAULT PATH_RE - the proxy's log shows FAULT on a matching path
injected() {
	grep -qE "^$1 [A-Z]+ .*$2" "$FLOG"
}

make_src "$T/tree.1" 1
[ "$(commit "$STORE" "$T/tree.1")" = 1 ] || fail "commit through the proxy failed"
FILES="a.bin nested/deep/c.bin b.txt run.sh"

# 1. Read faults that heal: each on a cold mount, then the same reads
#    again once the fault is spent.
k=0
for fault in status:503 status:500 status:429 reset truncate flip \
	ignore_range stall_body:1; do
	k=$((k + 1))
	rules "[{\"method\": \"GET\", \"path\": \"/packs/\", \"fault\": \"$fault\", \"count\": 2}]"
	s3_mount "$STORE" "$T/mnt" "$P_OPTS,cache_dir=$T/cache.$k,fetch_ahead=0"
	read_or_eio "$fault" "$T/mnt" 1 "$T/tree.1"
	injected "$fault" /packs/ || fail "$fault was never injected"
	rules '[]'
	read_or_eio "$fault.after" "$T/mnt" 1 "$T/tree.1"
	grep -q eio "$T/read.$fault.after" && fail "$fault: the mount did not heal"
	umount_dcrfs "$T/mnt" || fail "dcrfs did not exit cleanly after $fault"
	log "$fault: $(sort "$T/read.$fault" | uniq -c | tr -s ' \n' ' ')"
done

# 2. A store that keeps failing: EIO within a bounded time, no hang; the
#    mount heals when the store does.
rules '[{"method": "GET", "path": "/packs/", "fault": "status:503", "count": -1}]'
s3_mount "$STORE" "$T/mnt" "$P_OPTS,cache_dir=$T/cache.dead,fetch_ahead=0"
t0=$(date +%s)
if t cat "$T/mnt/v1/a.bin" >/dev/null 2>"$T/dead.err"; then
	fail "a read succeeded with every pack GET failing"
fi
grep -q "Input/output error" "$T/dead.err" || fail "no EIO from a dead store: $(cat "$T/dead.err")"
took=$(($(date +%s) - t0))
# s3_timeout bounds the whole read(2), not each GET (it took 2-3 times
# the bound when every GET had its own)
[ "$took" -le 7 ] || fail "a read against a dead store took $took s (s3_timeout=4)"
log "dead store: EIO after $took s"
rules '[]'
# A chunk whose read just timed out fails at once for a second: wait for
# the first file to read again (the mount healed), 10 s at most.
for ((i = 0; i < 100; i++)); do
	cat "$T/mnt/v1/a.bin" >/dev/null 2>&1 && break
	sleep 0.1
done
read_or_eio dead.after "$T/mnt" 1 "$T/tree.1"
grep -q eio "$T/read.dead.after" && fail "the mount did not heal after the store did"

# 3. A manifest damaged on the way: fetched again, the version shows.
rules '[{"method": "GET", "path": "/versions/0000000002", "fault": "flip", "count": 1}]'
next_src 2
[ "$(commit "$STORE" "$T/tree.2")" = 2 ] || fail "commit of tree.2 failed"
umount_dcrfs "$T/mnt" || fail "dcrfs did not exit cleanly"
s3_mount "$STORE" "$T/mnt" "$P_OPTS,cache_dir=$T/cache.m,poll=0.3"
wait_for_file "$T/mnt/v2" 20 || fail "v2 never showed after one damaged GET of its manifest"
injected flip /versions/0000000002 || fail "the manifest was never damaged"
FILES="$FILES added.2"
read_or_eio manifest "$T/mnt" 2 "$T/tree.2"
grep -q eio "$T/read.manifest" && fail "v2 unreadable after a damaged manifest GET"

# 4. Upload faults: a reset while a pack's body is sent and 503s are
#    retried; the versions read back bit-exactly.
for fault in reset_upload status:503; do
	rules "[{\"method\": \"PUT\", \"path\": \"/packs/\", \"fault\": \"$fault\", \"count\": 2}]"
	n=$(($(ls "$T" | grep -c '^tree\.') + 1))
	next_src "$n"
	v=$(commit "$STORE" "$T/tree.$n" 2>"$T/commit.$n.err") ||
		fail "commit with $fault failed: $(cat "$T/commit.$n.err")"
	injected "$fault" /packs/ || fail "$fault was never injected"
	FILES="$FILES added.$n"
	wait_for_file "$T/mnt/v$v" 20 || fail "v$v never showed"
	read_or_eio "put-$fault" "$T/mnt" "$v" "$T/tree.$n"
	grep -q eio "$T/read.put-$fault" && fail "v$v (committed through $fault) is unreadable"
done
# A store that answers pack PUTs 200 without storing them (a lying
# proxy): every pack is confirmed before the manifest is created, so the
# commit fails and nothing is published.
rules '[{"method": "PUT", "path": "/packs/", "fault": "lie", "count": -1}]'
n=$(($(ls "$T" | grep -c '^tree\.') + 1))
next_src "$n"
before=$(readlink "$T/mnt/latest")
rc=0
commit "$STORE" "$T/tree.$n" >"$T/lie.out" 2>"$T/lie.err" || rc=$?
[ "$rc" = 1 ] || fail "a commit whose packs were never stored exited $rc: $(cat "$T/lie.err")"
[ ! -s "$T/lie.out" ] || fail "a commit whose packs were never stored printed a version"
injected lie /packs/ || fail "the lying PUT was never injected"
rules '[]'
# Published means versions/N in the store: ask it, not the mount after a
# guessed number of its polls.
t "$DCR_BUILDDIR/dcrfs-ctl" --store "$STORE" log --json >"$T/lie.json" ||
	fail "dcrfs-ctl log failed"
py "$T/lie.json" 'assert max(v["version"] for v in d) == int(sys.argv[2][1:]), d' "$before" ||
	fail "a version without its packs was published: $(cat "$T/lie.json")"
[ "$(readlink "$T/mnt/latest")" = "$before" ] || fail "the mount shows a version without its packs"
umount_dcrfs "$T/mnt" || fail "dcrfs did not exit cleanly"

# 5. No credentials: an error naming where they were looked for, not a
#    silent unsigned request; nothing published.
rc=0
env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_PROFILE HOME="$T/nohome" \
	AWS_SHARED_CREDENTIALS_FILE="$T/nohome/creds" AWS_CONFIG_FILE="$T/nohome/config" \
	"$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/cc-anon" "$T/tree.1" \
	>"$T/anon.out" 2>"$T/anon.err" || rc=$?
[ "$rc" = 1 ] || fail "a commit without credentials exited $rc: $(cat "$T/anon.err")"
grep -q "no AWS credentials found" "$T/anon.err" || fail "no clear reason: $(cat "$T/anon.err")"
[ ! -s "$T/anon.out" ] || fail "a commit without credentials printed a version"

# 6. A host that does not resolve (in a network namespace of our own,
#    which has no DNS): named, and given up on quickly.
if unshare -n true 2>/dev/null; then
	t0=$(date +%s%N)
	rc=0
	AWS_ENDPOINT_URL=http://s3.dcrfs-test.invalid:7480 t unshare -n \
		"$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/cc-dns" "$T/tree.1" \
		>/dev/null 2>"$T/dns.err" || rc=$?
	ms=$((($(date +%s%N) - t0) / 1000000))
	[ "$rc" = 1 ] || fail "a commit to an unresolvable host exited $rc"
	grep -q "s3.dcrfs-test.invalid" "$T/dns.err" || fail "the host is not named: $(cat "$T/dns.err")"
	[ "$ms" -lt 15000 ] || fail "giving up on an unresolvable host took $ms ms"
	log "unresolvable host: failed in $ms ms"
else
	log "no network namespaces here: the DNS case is not tried"
fi
log "ok"
