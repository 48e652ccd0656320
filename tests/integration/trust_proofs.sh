#!/usr/bin/env bash
# trust_proofs.sh - how a mount with -o trust= proves the chunks it builds
# (read/rtrust.c): the fast way (each frame's SHA-256, the result's
# XXH3-128) only when every manifest on the chunk's chain is authentic -
# signed by a trusted key, or the parent a signed child binds - and
# committed as read; else by the chunk's SHA-256 in the signed manifest
# (status.json bytes.sha_proven counts those bytes).
#   - a chain of signed versions: nothing proven the slow way;
#   - a chain through an unsigned version no signed child binds (v5 is
#     unsigned, so is its parent v4; v6 signed binds v5 only): the
#     chunks of v12 built over v4 are proven by SHA-256, and read right;
#   - after compaction (layouts are never signed), a compacted version's
#     chunks are proven by SHA-256 under trust=, the fast way without;
# every version reads byte for byte as committed in each case.
. "$(dirname "$0")/lib.sh"
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS" "$DCRFS_SYNTH" "$DCRFS_CTL"
need_fuse

S=$T/store
N=24
ctl() { t "$DCRFS_CTL" --store "$S" "$@"; }
t "$DCRFS_CTL" keygen "$T/k" >/dev/null || fail "keygen"
# shellcheck disable=SC2317,SC2034 # run by chain_store, which reads CHAIN_ARGS
edit() {
	[ "$1" = 4 ] || [ "$1" = 5 ] || CHAIN_ARGS=(--sign-key "$T/k")
}
chain_store "$S" 2M 1 "$N" edit
ctl log --json >"$T/log.json"
py "$T/log.json" '
s = {e["version"]: e["signer"] for e in d}
assert s[4] == "unsigned" and s[5] == "unsigned" and s[3] != "unsigned" and s[6] == s[3], s'

# sha_proven MNT - the bytes the mount proved by whole-chunk SHA-256
sha_proven() {
	cp "$1/.dcrfs/status.json" "$T/st.json"
	py "$T/st.json" 'print(d["bytes"]["sha_proven"])'
}

M=$T/mnt
mount_dcrfs "$S" "$M" "cache_dir=$T/c1,poll=0,prefetch=none,trust=$T/k.pub"
[ -e "$M/v4" ] && fail "the unsigned v4 is shown"
same "$M" 3
[ "$(sha_proven "$M")" = 0 ] || fail "a signed chain was proven by SHA-256: $(sha_proven "$M")"
same "$M" 12
[ "$(sha_proven "$M")" -gt 0 ] || fail "chunks built over the unbound v4 were proven the fast way"
umount_dcrfs "$M" || fail "dcrfs exited with an error"

# The same reads without trust=: all fast.
mount_dcrfs "$S" "$M" "cache_dir=$T/c2,poll=0,prefetch=none"
same "$M" 3
same "$M" 12
[ "$(sha_proven "$M")" = 0 ] || fail "without trust=, $(sha_proven "$M") bytes proven by SHA-256"
umount_dcrfs "$M" || fail "dcrfs exited with an error"

# Compaction: its re-encodings are not signed.
ctl compact --json >"$T/c.json"
py "$T/c.json" 'assert d["rewritten"] > 0, d'
ctl log --json >"$T/log2.json"
cv=$(py "$T/log2.json" 'print(max(e["version"] for e in d if e["kind"] == "compacted" and e["version"] > 6))')
log "compacted: v$cv"
mount_dcrfs "$S" "$M" "cache_dir=$T/c3,poll=0,prefetch=none,trust=$T/k.pub"
same "$M" "$cv"
[ "$(sha_proven "$M")" -gt 0 ] || fail "a layout's chunks were proven the fast way under trust="
umount_dcrfs "$M" || fail "dcrfs exited with an error"
mount_dcrfs "$S" "$M" "cache_dir=$T/c4,poll=0,prefetch=none"
same "$M" "$cv"
[ "$(sha_proven "$M")" = 0 ] || fail "without trust=, a layout's chunks were proven by SHA-256"
umount_dcrfs "$M" || fail "dcrfs exited with an error"
grep -E 'ERROR|error' "$T"/dcrfs.*.log | grep -v 'is not shown (trust=): unsigned' && fail "errors logged"
log "ok: fast proofs on authentic chains only; unbound parents and layouts by SHA-256"
