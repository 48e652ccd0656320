#!/usr/bin/env bash
# chain.sh - a chain of versions with files added, removed, resized and
# unchanged, nested and empty directories, an empty file, an executable,
# and a synthetic safetensors model trained with Adam steps; every
# version read back through one mount and compared with its source tree.
. "$(dirname "$0")/lib.sh"
need_fuse
need_bins "$DCRFS_SYNTH"

N=6

# tree.1: the first version
src=$T/tree.1
mkdir -p "$src/nested/deep" "$src/emptydir"
rand_file "$src/a.bin" $((3 * 1024 * 1024)) a
rand_file "$src/nested/deep/c.bin" $((1536 * 1024 + 123)) c
rand_file "$src/unchanged.bin" $((1024 * 1024)) u
printf 'hello, dcrfs\n' >"$src/b.txt"
: >"$src/empty"
printf '#!/bin/sh\necho hi\n' >"$src/run.sh"
chmod 755 "$src/run.sh"
t "$DCRFS_SYNTH" init --size 4M --seed 11 --quiet "$src/model"

# each next tree: a copy of the previous one, edited
next_tree() { # N
	rm -rf "$T/tree.$1"
	cp -a "$T/tree.$(($1 - 1))" "$T/tree.$1"
	src=$T/tree.$1
	# one Adam step of the model, its state kept outside the trees
	rm -rf "$src/model"
	t "$DCRFS_SYNTH" step --in "$T/tree.$(($1 - 1))/model" --out "$src/model" \
		--state "$T/adam.state" --seed 11 --quiet
}

next_tree 2 # a small edit, a file added
flip_bytes "$src/a.bin" 0.01 2
rand_file "$src/added.bin" 70000 added

next_tree 3 # a file removed, a file grown
rm "$src/b.txt"
rand_file "$T/grow" 100000 grow
cat "$T/grow" >>"$src/nested/deep/c.bin"

next_tree 4 # a file shrunk, a new nested directory
truncate -s $((2560 * 1024 + 1)) "$src/a.bin"
mkdir -p "$src/new/x"
printf 'y\n' >"$src/new/x/y.txt"

next_tree 5 # a directory removed, a file replaced by one of other size
rm -rf "$src/nested"
rand_file "$src/added.bin" 5000 added5

next_tree 6 # nothing but the model changes; committed as a full anchor

# commit them; chunks of 256 KiB so small files span several chunks
for ((i = 1; i <= N; i++)); do
	args=()
	[ "$i" -eq 1 ] && args+=(--chunk-size 256K)
	[ "$i" -eq 3 ] && args+=(--tag mid)
	[ "$i" -eq 6 ] && args+=(--full --tag release)
	v=$(commit "$STORE" "$T/tree.$i" "${args[@]}") ||
		fail "commit of tree.$i failed"
	[ "$v" = "$i" ] || fail "commit of tree.$i printed '$v', expected $i"
	log "committed tree.$i as version $v"
done

mount_dcrfs "$STORE" "$MNT" poll=1

# the root: v1..vN, latest, tags
for ((i = 1; i <= N; i++)); do
	[ -d "$MNT/v$i" ] || fail "$MNT/v$i missing"
done
[ ! -e "$MNT/v$((N + 1))" ] || fail "v$((N + 1)) exists"
[ -L "$MNT/latest" ] || fail "latest is not a symlink"
[ "$(t readlink "$MNT/latest")" = "v$N" ] ||
	fail "latest -> $(readlink "$MNT/latest"), expected v$N"
[ "$(t readlink "$MNT/tags/mid")" = "../v3" ] ||
	fail "tags/mid -> $(readlink "$MNT/tags/mid"), expected ../v3"
[ "$(t readlink "$MNT/tags/release")" = "../v$N" ] ||
	fail "tags/release -> $(readlink "$MNT/tags/release")"

# every version, byte for byte, and every size as stat shows it
for ((i = 1; i <= N; i++)); do
	t diff -r "$T/tree.$i" "$MNT/v$i" || fail "v$i differs from tree.$i"
	(cd "$T/tree.$i" && find . -type f) | while read -r f; do
		want=$(stat -c %s "$T/tree.$i/$f")
		got=$(stat_size "$MNT/v$i/$f")
		[ "$want" = "$got" ] || fail "v$i/$f: size $got, expected $want"
	done
	# permission bits are kept (a read-only mount may drop the w bits)
	for f in run.sh unchanged.bin; do
		want=$(( 0$(stat -c %a "$T/tree.$i/$f") & 0555 ))
		got=$(( 0$(stat -c %a "$MNT/v$i/$f") & 0555 ))
		[ "$want" = "$got" ] ||
			fail "v$i/$f: mode $(stat -c %a "$MNT/v$i/$f"), source $(stat -c %a "$T/tree.$i/$f")"
	done
	[ -d "$MNT/v$i/emptydir" ] || fail "v$i/emptydir missing"
	[ -f "$MNT/v$i/empty" ] && [ "$(stat_size "$MNT/v$i/empty")" = 0 ] ||
		fail "v$i/empty is not an empty file"
	log "v$i matches tree.$i"
done

# the paths users open
t cmp "$MNT/latest/model/model.safetensors" "$T/tree.$N/model/model.safetensors" ||
	fail "latest/model/model.safetensors differs"
t diff -r "$T/tree.3" "$MNT/tags/mid/" || fail "tags/mid/ differs from tree.3"
[ ! -e "$MNT/v3/b.txt" ] || fail "v3/b.txt was removed but is shown"
[ ! -e "$MNT/v5/nested" ] || fail "v5/nested was removed but is shown"

# the model really changed at every step, but only a little
cmp -s "$T/tree.1/model/model.safetensors" "$T/tree.2/model/model.safetensors" &&
	fail "the Adam step did not change the model"

umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly on unmount"
log "ok"
