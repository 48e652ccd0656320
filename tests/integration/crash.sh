#!/usr/bin/env bash
# crash.sh - kill -9 dcrfs-commit at several moments of a commit of a
# 128 MiB checkpoint into a store that already has versions: afterwards
# the store's latest is the old one or a complete new one that reads back
# bit-exactly through a mount - never a half version - and the next
# commit (with the commit cache the killed one left behind) succeeds.
. "$(dirname "$0")/lib.sh"
need_fuse
need_bins "$DCRFS_SYNTH"

CC=$T/commit-cache
SIZE=${DCR_CRASH_SIZE:-128M}

nversions() { { ls "$STORE/versions" 2>/dev/null || true; } | grep -c . || true; }
npacks() { { ls "$STORE/packs" 2>/dev/null || true; } | grep -c . || true; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

t "$DCRFS_SYNTH" init --size "$SIZE" --seed 3 --quiet "$T/ckpt.1"
t "$DCRFS_SYNTH" step --in "$T/ckpt.1" --out "$T/ckpt.2" --state "$T/adam" --seed 3 --quiet
t "$DCRFS_SYNTH" step --in "$T/ckpt.2" --out "$T/ckpt.3" --state "$T/adam" --seed 3 --quiet
rm -f "$T/adam"

[ "$(commit "$STORE" "$T/ckpt.1")" = 1 ] || fail "first commit is not version 1"
# an uninterrupted commit of one step, timed: the kills are spread over it
start=$(now_ms)
[ "$(commit "$STORE" "$T/ckpt.2")" = 2 ] || fail "second commit is not version 2"
D=$(($(now_ms) - start))
log "an uninterrupted commit of a step takes $D ms"
cp -a "$CC" "$T/cc.good" # the commit cache holding version 2

declare -A tree_of=([1]=ckpt.1 [2]=ckpt.2)
interrupted=0 orphans=0
for pct in 1 10 25 40 55 70 85 90 95 100; do
	delay_ms=$((D * pct / 100))
	before=$(nversions)
	packs_before=$(npacks)
	# a warm commit cache, so that the kill lands in the commit itself
	# (unless the previous attempt published: then it must rebuild)
	rm -rf "$CC"
	cp -a "$T/cc.good" "$CC"
	start_bg "$DCRFS_COMMIT" --store "$STORE" --cache-dir "$CC" --quiet \
		--jobs 2 "$T/ckpt.3" >"$T/out" 2>"$T/err"
	pid=$BG_PID
	sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
	kill -KILL "$pid" 2>/dev/null || true
	rc=0
	wait "$pid" 2>/dev/null || rc=$?
	after=$(nversions)
	case "$after" in
	"$before")
		interrupted=$((interrupted + 1))
		[ "$(npacks)" -gt "$packs_before" ] && orphans=$((orphans + 1))
		log "killed at $delay_ms ms (status $rc): latest still $after, $(( $(npacks) - packs_before )) orphan packs"
		;;
	$((before + 1)))
		tree_of[$after]=ckpt.3
		log "killed at $delay_ms ms (status $rc): version $after was already complete"
		;;
	*)
		fail "after a kill at $delay_ms ms the store went from $before to $after versions"
		;;
	esac
	# latest is always the highest manifest: no gap, no stray name
	for ((v = 1; v <= after; v++)); do
		[ -f "$STORE/versions/$(printf '%010d' "$v")" ] ||
			fail "versions/ has no manifest $v of $after: $(ls "$STORE/versions")"
	done
done
[ "$interrupted" -gt 0 ] || fail "every commit finished before its kill; nothing was tested"
log "$interrupted of 10 commits interrupted before publishing ($orphans after uploading packs)"

# the commit cache the last kill left behind: the next commit recovers
last=$(nversions)
v=$(commit "$STORE" "$T/ckpt.3" --allow-unchanged) || fail "the commit after the kills failed"
[ "$v" = $((last + 1)) ] || fail "the commit after the kills printed '$v', expected $((last + 1))"
tree_of[$v]=ckpt.3

# every version reads back bit-exactly
mount_dcrfs "$STORE" "$MNT" poll=1
[ "$(t readlink "$MNT/latest")" = "v$v" ] || fail "latest is not v$v"
for ((i = 1; i <= v; i++)); do
	t diff -r "$T/${tree_of[$i]}" "$MNT/v$i" || fail "v$i differs from ${tree_of[$i]}"
	log "v$i == ${tree_of[$i]}"
done
[ ! -e "$MNT/v$((v + 1))" ] || fail "a version beyond $v is shown"
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly on unmount"
log "ok"
