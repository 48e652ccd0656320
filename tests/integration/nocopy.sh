#!/usr/bin/env bash
# nocopy.sh - dcrfs-commit --no-copy: the committed directory itself is
# the next commit's parent (no copy in the cache). Every version must read
# back bit-exactly, including when the parent directory is changed or
# removed behind the committer's back (it must notice, through the chunk
# hashes, and rebuild the parent from the store) and when the same
# directory is committed again after being overwritten in place.
. "$(dirname "$0")/lib.sh"
need_fuse
need_bins "$DCRFS_SYNTH"

STORE=$T/store
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
