#!/usr/bin/env bash
# readahead_gets.sh - a sequential cold read is fetched in read-ahead
# jobs of several chunks, one coalesced GET each: the window moves on by
# one chunk a read, and read-ahead must not send the chunk each read
# uncovers as a GET of its own (it did: one GET per chunk, 4x the GETs of
# a whole group, which over S3 made a cold read latency-bound).
. "$(dirname "$0")/lib.sh"
need_fuse
need_bins

mkdir -p "$T/tree"
# 64 chunks of 1 MiB of incompressible bytes: full frames of ~1 MiB,
# neighbours in one pack; a read-ahead job is 4 of them (4 MiB).
rand_file "$T/tree/w.bin" $((64 * 1024 * 1024)) w
[ "$(commit "$STORE" "$T/tree")" = 1 ] || fail "commit"

mount_dcrfs "$STORE" "$MNT" "cache_dir=$T/cache,poll=0,prefetch=none,passthrough=off"
t cmp "$T/tree/w.bin" "$MNT/v1/w.bin" || fail "v1/w.bin differs"
fetches=$(py "$MNT/.dcrfs/status.json" 'print(d["fetches"])')
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"
log "64 chunks read cold in $fetches GETs"
# One GET a job of 4, and a few led by the reader itself before
# read-ahead started; one GET a chunk is a failure.
[ "$fetches" -le 32 ] || fail "a cold sequential read took $fetches GETs for 64 chunks (read-ahead is not coalescing)"
log "ok"
