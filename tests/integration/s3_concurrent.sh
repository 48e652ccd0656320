#!/usr/bin/env bash
# s3_concurrent.sh - trainers committing to one S3 store at the same time
# never lose a version: each commit either gets its own number or fails
# cleanly, and every published version reads back as the tree that made
# it. Version manifests are created with If-None-Match: * (see store/s3.h).
. "$(dirname "$0")/lib.sh"
. "$DCR_SRCDIR/tests/integration/s3lib.sh"
need_fuse
need_bins
s3_store
ROUNDS=3
WRITERS=3

make_src "$T/base" 0
v=$(commit "$STORE" "$T/base") || fail "first commit failed"
[ "$v" = 1 ] || fail "first commit printed '$v'"

declare -A made # version -> source tree
made[1]=$T/base
total=1
for ((r = 1; r <= ROUNDS; r++)); do
	pids=()
	for ((w = 1; w <= WRITERS; w++)); do
		src=$T/src.$r.$w
		cp -a "$T/base" "$src"
		flip_bytes "$src/a.bin" 0.02 "$r$w"
		printf 'round %d writer %d\n' "$r" "$w" >"$src/who.txt"
		# each writer is another trainer: its own commit cache
		t "$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/cc.$w" --quiet \
			"$src" >"$T/out.$r.$w" 2>"$T/err.$r.$w" &
		pids+=($!)
	done
	for ((w = 1; w <= WRITERS; w++)); do
		rc=0
		wait "${pids[$((w - 1))]}" || rc=$?
		out=$(cat "$T/out.$r.$w")
		if [ "$rc" = 0 ]; then
			[[ $out =~ ^[0-9]+$ ]] || fail "round $r writer $w printed '$out'"
			[ -z "${made[$out]:-}" ] || fail "version $out was given to two commits"
			made[$out]=$T/src.$r.$w
			total=$((total + 1))
		else
			[ -z "$out" ] || fail "a failed commit printed '$out'"
			[ -s "$T/err.$r.$w" ] || fail "round $r writer $w failed silently"
			log "round $r writer $w failed cleanly: $(tail -n 1 "$T/err.$r.$w")"
		fi
	done
	log "round $r: ${#made[@]} versions so far"
done
[ "$total" -ge $((1 + ROUNDS)) ] || fail "only $total of $((1 + ROUNDS * WRITERS)) commits succeeded"

s3_mount "$STORE" "$T/mnt" "$S3_OPTS"
n=$(find "$T/mnt" -maxdepth 1 -name 'v*' | wc -l)
[ "$n" = "$total" ] || fail "$n versions in the mount, $total commits succeeded"
for v in "${!made[@]}"; do
	t diff -r "${made[$v]}" "$T/mnt/v$v" || fail "v$v differs from ${made[$v]}"
done
umount_dcrfs "$T/mnt" || fail "dcrfs did not unmount cleanly"
log "ok: $total versions from $((1 + ROUNDS * WRITERS)) commits, none lost"
