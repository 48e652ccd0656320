#!/usr/bin/env bash
# trust.sh - mounts with -o trust=FILE (issue 20): only versions signed by
# a listed key are shown and latest never points elsewhere. Forged
# versions are dropped into the store of a live mount, each a complete
# version whose packs are there too:
#   v3  signed by the trusted key, one byte of its signature flipped
#   v4  signed by a key that is not trusted
#   v5  unsigned
#   v6  validly signed by the trusted key, but for another store
#   v7  a copy of v2's signed manifest (it claims to be version 2)
# None is listed, none becomes latest, each is logged once with its
# reason and counted in the metrics. A genuine v8 then is (parent 2), and
# reads byte for byte; deleting it from the store does not move latest
# back, not even across a remount. Tags: only a tag signed by a trusted
# key is followed. Rotation: a trust file with an old and a new key shows
# both keys' versions; one with the new key alone shows only its own.
# Without trust= everything is shown, as before. A bad trust file fails
# the mount with a clear message.
. "$(dirname "$0")/lib.sh"
need_fuse
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
PY=/usr/bin/python3

# ci STORE CACHE DIR [ARGS...] - commit with a commit cache of its own
ci() {
	local store=$1 cache=$2 dir=$3
	shift 3
	t "$DCRFS_COMMIT" --init --store "$store" --cache-dir "$cache" --quiet \
		"$@" "$dir"
}
# take FROM V - copy version V of store FROM (its manifest and every
# pack) into $STORE, as a bucket writer could
take() {
	cp -n "$1"/packs/* "$STORE/packs/"
	cp "$1/versions/$(printf %010d "$2")" "$STORE/versions/"
}
# wait_for COND... - until the shell condition holds (mounts poll at 0.2 s)
wait_for() {
	local i
	for ((i = 0; i < 100; i++)); do
		eval "$*" && return 0
		sleep 0.1
	done
	return 1
}
versions() { ls "$MNT" | grep '^v[0-9]' | sort -V | tr '\n' ' '; }

for k in k1 k2 k3; do
	t "$DCRFS_CTL" keygen "$T/$k" >/dev/null || fail "keygen $k"
done
id1=$("$DCRFS_CTL" keygen --json "$T/kx" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["key_id"])')
[ "${#id1}" = 16 ] || fail "keygen --json: key id '$id1'"
k1id=$(openssl pkey -pubin -in "$T/k1.pub" -outform DER | tail -c 32 | sha256sum | cut -c1-16)

for v in 1 2 3 4 5 6 8 9; do
	mkdir -p "$T/s$v"
	rand_file "$T/s$v/model.bin" 300000 "$v"
	echo "step $v" >"$T/s$v/config.json"
done
[ "$(ci "$STORE" "$T/cc" "$T/s1" --sign-key "$T/k1")" = 1 ] || fail "v1"
[ "$(ci "$STORE" "$T/cc" "$T/s2" --sign-key "$T/k1" --meta step=2)" = 2 ] || fail "v2"

mount_dcrfs "$STORE" "$MNT" "poll=0.2,relist=0.5,trust=$T/k1.pub"
[ "$(versions)" = "v1 v2 " ] || fail "trusted mount lists '$(versions)'"
[ "$(readlink "$MNT/latest")" = v2 ] || fail "latest is $(readlink "$MNT/latest")"
cmp "$MNT/latest/model.bin" "$T/s2/model.bin" || fail "v2 reads wrong"
[ "$(getfattr --absolute-names --only-values -n user.dcrfs.signer "$MNT/v2")" = "$k1id" ] ||
	fail "v2's signer is not k1 ($k1id)"

# The forgeries, made in a copy of the store (the same store id) and one
# other store, then put in place.
cp -a "$STORE" "$T/copy"
cp -a "$T/cc" "$T/cc-copy"
[ "$(ci "$T/copy" "$T/cc-copy" "$T/s3" --sign-key "$T/k1")" = 3 ] || fail "copy v3"
[ "$(ci "$T/copy" "$T/cc-copy" "$T/s4" --sign-key "$T/k2")" = 4 ] || fail "copy v4"
[ "$(ci "$T/copy" "$T/cc-copy" "$T/s5")" = 5 ] || fail "copy v5"
# flip a byte of v3's signature (64 bytes, 65 before the store id's 33)
"$PY" - "$T/copy/versions/0000000003" <<'EOF'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) - 33 - 32 - 1 - 20] ^= 0x01
open(p, "wb").write(bytes(b))
EOF
for v in 1 2 3 4 5 6; do
	[ "$(ci "$T/other" "$T/cc-other" "$T/s$v" --sign-key "$T/k1")" = "$v" ] || fail "other v$v"
done
take "$T/copy" 3
take "$T/copy" 4
take "$T/copy" 5
take "$T/other" 6
cp "$STORE/versions/0000000002" "$STORE/versions/0000000007"

for why in "version 3 is not shown (trust=): its signature does not verify" \
	"version 4 is not shown (trust=): signed by a key not in the trust file" \
	"version 5 is not shown (trust=): unsigned" \
	"version 6 is not shown (trust=): signed for another store"; do
	wait_for 'grep -qF "$why" "$MOUNT_LOG"' || fail "not logged: $why"
done
wait_for 'grep -q "0000000007.*claims to be version 2" "$MOUNT_LOG"' ||
	fail "the copied manifest is not refused"
sleep 1.2 # a few more polls and two whole listings
[ "$(versions)" = "v1 v2 " ] || fail "forged versions listed: '$(versions)'"
[ "$(readlink "$MNT/latest")" = v2 ] || fail "latest moved to $(readlink "$MNT/latest")"
for v in 3 4 5 6 7; do
	[ -e "$MNT/v$v" ] && fail "v$v can be looked up"
	[ -e "$MNT/delta/v$v" ] && fail "delta/v$v can be looked up"
done
for why in "its signature does not verify" "signed by a key not in" "unsigned" \
	"signed for another store"; do
	n=$(grep -cF "not shown (trust=): $why" "$MOUNT_LOG")
	[ "$n" = 1 ] || fail "'$why' logged $n times, not once"
done
m=$MNT/.dcrfs/metrics
for r in bad_signature untrusted_key unsigned other_store; do
	grep -q "^dcrfs_rejected_total{reason=\"$r\"} 1$" "$m" ||
		fail "metrics: $(grep rejected "$m")"
done
cp "$MNT/.dcrfs/status.json" "$T/st.json"
py "$T/st.json" 'assert d["trust"]["keys"] == 1 and d["trust"]["rejected"]["bad"] == 1 and d["versions"] == 2 and d["latest"] == 2, d["trust"]'
# and in dcrfs-ctl status's text, not only under --json
st=$(t "$DCR_BUILDDIR/dcrfs-ctl" status "$MNT") || fail "dcrfs-ctl status failed"
grep -qx "trust: *1 keys; rejected 1 unsigned, 1 with a bad signature, 1 for another store, 1 by another key, [0-9]* tags (not shown: see the mount's log)" <<<"$st" ||
	fail "status does not show the rejected versions: $st"

# A genuine version after them is shown, and reads right.
[ "$(ci "$STORE" "$T/cc" "$T/s8" --sign-key "$T/k1" --parent 2)" = 8 ] || fail "v8"
wait_for '[ "$(readlink "$MNT/latest")" = v8 ]' || fail "latest is not v8: $(readlink "$MNT/latest")"
[ "$(versions)" = "v1 v2 v8 " ] || fail "lists '$(versions)'"
same "$MNT" 8

# Tags: signed by k1 followed; unsigned, by k2, or on a forged version not.
t "$DCRFS_CTL" --store "$STORE" tag --sign-key "$T/k1" best 2 >/dev/null || fail "tag best"
t "$DCRFS_CTL" --store "$STORE" tag plain 1 >/dev/null || fail "tag plain"
t "$DCRFS_CTL" --store "$STORE" tag --sign-key "$T/k2" other 1 >/dev/null || fail "tag other"
wait_for '[ "$(readlink "$MNT/tags/best" 2>/dev/null)" = ../v2 ]' ||
	fail "the signed tag is not followed: $(ls -l "$MNT/tags")"
sleep 0.5
[ "$(ls "$MNT/tags")" = best ] || fail "tags: $(ls "$MNT/tags" | tr '\n' ' ')"
grep -q "tag plain (version 1) is ignored (trust=): unsigned" "$MOUNT_LOG" || fail "plain tag not logged"
grep -q "tag other (version 1) is ignored (trust=): signed by a key not in" "$MOUNT_LOG" ||
	fail "k2's tag not logged"

# Rollback: v8 deleted from the store; latest does not go back to v2.
rm "$STORE/versions/0000000008"
wait_for 'grep -q "version 8 is no longer served" "$MOUNT_LOG"' || fail "v8's removal not seen"
[ "$(readlink "$MNT/latest")" = v8 ] || fail "latest went back to $(readlink "$MNT/latest")"
[ -e "$MNT/latest/model.bin" ] && fail "latest resolves to a version that is gone"
umount_dcrfs "$MNT" || fail "dcrfs exited with an error"
# ... not even across a remount of the same cache directory
mount_dcrfs "$STORE" "$MNT" "poll=0.2,trust=$T/k1.pub"
[ "$(readlink "$MNT/latest")" = v8 ] || fail "remounted, latest is $(readlink "$MNT/latest")"
umount_dcrfs "$MNT" || fail "dcrfs exited with an error"

# Rotation: k3 replaces k1; a trust file with both shows both. (The
# copied v7 removed, the next number is 7 again.)
rm "$STORE/versions/0000000007"
[ "$(ci "$STORE" "$T/cc" "$T/s9" --sign-key "$T/k3" --parent 2)" = 7 ] || fail "k3's v7"
mv "$T/s9" "$T/s7"
cat "$T/k1.pub" "$T/k3.pub" >"$T/both.pub"
mount_dcrfs "$STORE" "$MNT" "poll=0,cache_dir=$T/cache-both,trust=$T/both.pub"
[ "$(versions)" = "v1 v2 v7 " ] || fail "both keys: '$(versions)'"
[ "$(readlink "$MNT/latest")" = v7 ] || fail "both keys: latest $(readlink "$MNT/latest")"
same "$MNT" 7
umount_dcrfs "$MNT" || fail "dcrfs exited with an error"
mount_dcrfs "$STORE" "$MNT" "poll=0,cache_dir=$T/cache-k3,trust=$T/k3.pub"
[ "$(versions)" = "v7 " ] || fail "k3 alone: '$(versions)'"
# v7's parent (v2, signed by k1, not trusted here) is pinned by v7's
# signature: its bytes are built on it, proven.
same "$MNT" 7
umount_dcrfs "$MNT" || fail "dcrfs exited with an error"

# Without trust=: every version, as before; the forged signature shows
# as "invalid", the unsigned one as such.
mount_dcrfs "$STORE" "$MNT" "poll=0,cache_dir=$T/cache-open"
[ "$(versions)" = "v1 v2 v3 v4 v5 v6 v7 " ] || fail "untrusted mount lists '$(versions)'"
[ "$(getfattr --absolute-names --only-values -n user.dcrfs.signer "$MNT/v3")" = invalid ] || fail "v3's signer"
[ "$(getfattr --absolute-names --only-values -n user.dcrfs.signer "$MNT/v5")" = unsigned ] || fail "v5's signer"
[ "$(getfattr --absolute-names --only-values -n user.dcrfs.signer "$MNT/v6")" = invalid ] || fail "v6's signer"
umount_dcrfs "$MNT" || fail "dcrfs exited with an error"
# ... and a trust= mount of the cache directory it filled starts afresh
mount_dcrfs "$STORE" "$MNT" "poll=0,cache_dir=$T/cache-open,trust=$T/k1.pub"
grep -q "filled by a mount that trusted the store" "$MOUNT_LOG" || fail "the untrusted cache was kept"
[ "$(versions)" = "v1 v2 " ] || fail "lists '$(versions)'"
umount_dcrfs "$MNT" || fail "dcrfs exited with an error"

# A bad trust file: no mount, a message that says why.
echo "not a key" >"$T/bad.pub"
for f in "$T/bad.pub" "$T/k1" "$T/missing.pub"; do
	if "$DCRFS" "$STORE" "$MNT" -f -o "cache_dir=$T/cache-bad,trust=$f" >"$T/bad.log" 2>&1; then
		fail "mounted with trust=$f"
	fi
	grep -q "trust=$f: no mount" "$T/bad.log" || fail "trust=$f: $(cat "$T/bad.log")"
	mountpoint -q "$MNT" && fail "mounted"
done
log "ok: forgeries never shown, latest never back, tags, rotation, bad trust files"
