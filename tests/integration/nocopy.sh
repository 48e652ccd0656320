#!/usr/bin/env bash
# nocopy.sh - dcrfs-commit --no-copy: the committed directory itself is
# the next commit's parent (no copy in the cache). Every version must read
# back bit-exactly, including when the parent directory is changed or
# removed behind the committer's back (it must notice, through the chunk
# hashes, and rebuild the parent from the store) and when the same
# directory is committed again after being overwritten in place. Then the
# default without --no-copy or --copy: a new directory per commit is not
# copied into the cache (its path is the next parent), the directory of
# the previous commit committed again (saved in place) is.
. "$(dirname "$0")/lib.sh"
need_fuse
need_bins "$DCRFS_SYNTH"

synth() { t "$DCRFS_SYNTH" "$@" --quiet; }

synth init --size 3M --seed 4 "$T/s0"
synth step --in "$T/s0" --out "$T/s1" --seed 5 --state "$T/adam"
synth step --in "$T/s1" --out "$T/s2" --seed 6 --state "$T/adam"
synth step --in "$T/s2" --out "$T/s3" --seed 7 --state "$T/adam"
for i in 0 1 2 3; do cp -r "$T/s$i" "$T/keep$i"; done

v=$(commit "$STORE" "$T/s0" --no-copy); [ "$v" = 1 ] || fail "v1: got '$v'"
grep -q "^source $T/s0\$" "$T/commit-cache/state" || fail "state does not name s0: $(cat "$T/commit-cache/state")"
[ ! -e "$T/commit-cache/tree" ] || fail "--no-copy left a tree copy in the cache"

# The common case: a new directory per step, the last one as parent.
v=$(commit "$STORE" "$T/s1" --no-copy); [ "$v" = 2 ] || fail "v2: got '$v'"

# The parent directory is changed behind our back: the commit must not
# build deltas against the wrong bytes.
printf 'tampered' | dd of="$T/s1/model.safetensors" bs=1 seek=4096 conv=notrunc status=none
v=$(commit "$STORE" "$T/s2" --no-copy 2>"$T/err3")
[ "$v" = 3 ] || fail "v3: got '$v': $(cat "$T/err3")"
grep -q "stale" "$T/err3" || fail "the tampered parent went unnoticed: $(cat "$T/err3")"

# The parent directory is gone: rebuilt from the store.
rm -rf "$T/s2"
v=$(commit "$STORE" "$T/s3" --no-copy); [ "$v" = 4 ] || fail "v4: got '$v'"

# The same directory committed again after being overwritten in place.
rm -rf "$T/s3"; cp -r "$T/keep1" "$T/s3"
v=$(commit "$STORE" "$T/s3" --no-copy 2>"$T/err5")
[ "$v" = 5 ] || fail "v5: got '$v': $(cat "$T/err5")"
grep -q "cannot serve as the parent" "$T/err5" || fail "no warning about committing the parent's own directory: $(cat "$T/err5")"

mount_dcrfs "$STORE" "$T/mnt"
want=(keep0 keep1 keep2 keep3 keep1)
for i in 1 2 3 4 5; do
	t diff -r "$T/${want[$((i - 1))]}" "$T/mnt/v$i" >/dev/null ||
		fail "v$i differs from ${want[$((i - 1))]}"
done
umount_dcrfs "$T/mnt" || fail "dcrfs did not exit cleanly on unmount"
log "ok: 5 versions committed with --no-copy read back bit-exactly"

# --- the default ---
S2=$T/store2
CC=$T/cc2
st() { cat "$CC/state" 2>/dev/null; }
dflt() { t "$DCRFS_COMMIT" --init --store "$S2" --cache-dir "$CC" "$@"; }
rm -rf "$T/s0" "$T/s1" "$T/s2" "$T/s3"
for i in 0 1 2 3; do cp -r "$T/keep$i" "$T/s$i"; done

v=$(dflt "$T/s0" 2>"$T/d1"); [ "$v" = 1 ] || fail "default v1: '$v': $(cat "$T/d1")"
grep -q "^source $T/s0\$" "$CC/state" || fail "default: a first directory was not recorded as the parent: $(st)"
[ ! -e "$CC/tree" ] || fail "default: a new directory was copied into the cache"
v=$(dflt "$T/s1" 2>"$T/d2"); [ "$v" = 2 ] || fail "default v2: '$v': $(cat "$T/d2")"
grep -q "^source $T/s1\$" "$CC/state" || fail "default: s1 was not recorded as the parent: $(st)"
! grep -q "building the parent\|stale" "$T/d2" || fail "default v2 rebuilt its parent: $(cat "$T/d2")"

# Saved in place: s1 now holds step 2. Its old bytes are gone, so the
# parent is rebuilt once; from then on the directory is copied.
rm -rf "$T/s1"; cp -r "$T/keep2" "$T/s1"
v=$(dflt "$T/s1" 2>"$T/d3"); [ "$v" = 3 ] || fail "default v3: '$v': $(cat "$T/d3")"
grep -q "cannot serve as the parent" "$T/d3" || fail "default v3: no warning: $(cat "$T/d3")"
grep -q "^from $T/s1\$" "$CC/state" || fail "default: the in-place directory was not copied: $(st)"
grep -q "^version 3\$" "$CC/state" || fail "default: state is not version 3: $(st)"
cmp -s "$T/keep2/model.safetensors" "$CC/tree/model.safetensors" || fail "default: the copy is not step 2"
rm -rf "$T/s1"; cp -r "$T/keep3" "$T/s1"
v=$(dflt "$T/s1" 2>"$T/d4"); [ "$v" = 4 ] || fail "default v4: '$v': $(cat "$T/d4")"
! grep -q "building the parent\|stale\|cannot serve" "$T/d4" ||
	fail "default v4 (in place again) did not use the copy: $(cat "$T/d4")"
grep -q "^from $T/s1\$" "$CC/state" || fail "default v4: not copied: $(st)"

# A new directory again: back to recording it; its parent is the copy.
v=$(dflt "$T/s0" 2>"$T/d5"); [ "$v" = 5 ] || fail "default v5: '$v': $(cat "$T/d5")"
! grep -q "building the parent\|stale" "$T/d5" || fail "default v5 rebuilt its parent: $(cat "$T/d5")"
grep -q "^source $T/s0\$" "$CC/state" || fail "default v5: s0 not recorded: $(st)"
[ ! -e "$CC/tree" ] || fail "default v5: a stale copy was left in the cache"

# The recorded directory is gone: rebuilt from the store, with a hint.
mv "$T/s0" "$T/s0.moved"
v=$(dflt "$T/s2" 2>"$T/d6"); [ "$v" = 6 ] || fail "default v6: '$v': $(cat "$T/d6")"
grep -q "is gone" "$T/d6" || fail "default v6: no word about the missing parent: $(cat "$T/d6")"
# --copy copies a new directory.
v=$(dflt --copy "$T/s3" 2>"$T/d7"); [ "$v" = 7 ] || fail "--copy v7: '$v': $(cat "$T/d7")"
grep -q "^from $T/s3\$" "$CC/state" && [ -d "$CC/tree" ] || fail "--copy: no copy: $(st)"
rc=0; t "$DCRFS_COMMIT" --store "$S2" --copy --no-copy "$T/s3" 2>/dev/null || rc=$?
[ "$rc" = 2 ] || fail "--copy --no-copy: status $rc, not a usage error"

mount_dcrfs "$S2" "$T/mnt"
want=(keep0 keep1 keep2 keep3 keep0 keep2 keep3)
for i in 1 2 3 4 5 6 7; do
	t diff -r "$T/${want[$((i - 1))]}" "$T/mnt/v$i" >/dev/null ||
		fail "default v$i differs from ${want[$((i - 1))]}"
done
umount_dcrfs "$T/mnt" || fail "dcrfs did not exit cleanly on unmount"
log "ok: 7 versions committed with the default copy policy read back bit-exactly"
