#!/usr/bin/env bash
# commit_race.sh - a tree changed between dcrfs-commit's scan and its
# reads publishes nothing from outside the tree: a file swapped for a
# symlink to a secret file outside it, or a directory swapped for a
# symlink to an outside directory, exactly in that window (the test hook
# DCRFS_TEST_COMMIT_BEFORE_OPEN runs the swap before each file is
# opened), fails the commit naming the file, publishes no version and
# uploads none of the secret's bytes. No mount needed.
. "$(dirname "$0")/lib.sh"
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS_CTL"
need_test_hooks
command -v python3 >/dev/null 2>&1 || skip "python3 is missing"

ctl() { t "$DCRFS_CTL" --store "$STORE" "$@"; }
nversions() { ctl log --json | py - 'print(len(d))'; }

mkdir -p "$T/tree/sub" "$T/outside"
rand_file "$T/tree/small.bin" 40000 small
rand_file "$T/tree/sub/x.bin" 50000 x
[ "$(commit "$STORE" "$T/tree")" = 1 ] || fail "the first commit is not version 1"
# Outside the tree: a secret of small.bin's size (the size check does
# not catch it) and a directory like sub/. The racing commits are --full,
# so bytes read would be in a pack as they are (random: zstd keeps them).
rand_file "$T/secret" 40000 secret
rand_file "$T/outside/x.bin" 50000 outside
flip_bytes "$T/tree/small.bin" 0.05 2
flip_bytes "$T/tree/sub/x.bin" 0.05 2

# uploaded FILE - whether a 4 KiB run of FILE's bytes is in any store object
uploaded() {
	python3 - "$1" "$STORE" <<'PY'
import os, sys
needle = open(sys.argv[1], "rb").read()[20000:24096]
for root, _, files in os.walk(sys.argv[2]):
    for n in files:
        if needle in open(os.path.join(root, n), "rb").read():
            sys.exit(0)
sys.exit(1)
PY
}

# race NAME SWAP WHO - commit the tree with SWAP run (sh -c, $1 the file
# about to be opened) before each open; it must fail naming WHO and
# publish nothing.
race() {
	local name=$1 swap=$2 who=$3 rc=0
	rm -f "$T/hook.ran"
	DCRFS_TEST_COMMIT_BEFORE_OPEN="touch '$T/hook.ran'; $swap" \
		commit "$STORE" "$T/tree" --full >"$T/$name.out" 2>"$T/$name.err" || rc=$?
	[ -e "$T/hook.ran" ] || fail "$name: the test hook never ran"
	[ "$rc" = 1 ] || fail "$name: the commit exited $rc (printed $(cat "$T/$name.out")): $(cat "$T/$name.err")"
	[ ! -s "$T/$name.out" ] || fail "$name: a version was printed: $(cat "$T/$name.out")"
	grep -q "$who changed while it was being committed" "$T/$name.err" ||
		fail "$name: no clear message naming $who: $(cat "$T/$name.err")"
	[ "$(nversions)" = 1 ] || fail "$name: a version was published: $(ctl log)"
	log "$name: $(grep -o 'changed while.*' "$T/$name.err" | head -n 1)"
}

# 1. small.bin becomes a symlink to the secret after the scan.
race file 'case "$1" in */small.bin) rm -f "$1" && ln -s "'"$T"'/secret" "$1";; esac' \
	"$T/tree/small.bin"
uploaded "$T/secret" && fail "the secret's bytes were uploaded"
rm "$T/tree/small.bin"
rand_file "$T/tree/small.bin" 40000 small
flip_bytes "$T/tree/small.bin" 0.05 2

# 2. sub/ becomes a symlink to a directory outside the tree.
race dir 'case "$1" in */sub/x.bin) mv "'"$T"'/tree/sub" "'"$T"'/sub.moved" && ln -s "'"$T"'/outside" "'"$T"'/tree/sub";; esac' \
	"$T/tree/sub/x.bin"
uploaded "$T/outside/x.bin" && fail "the outside directory's file was uploaded"
rm "$T/tree/sub"
mv "$T/sub.moved" "$T/tree/sub"

# 3. small.bin replaced by another regular file (same name, new inode).
race replaced 'case "$1" in */small.bin) cp "$1" "$1.new" && mv "$1.new" "$1";; esac' \
	"$T/tree/small.bin"

# 4. The hook armed but changing nothing: the commit goes through.
rm -f "$T/hook.ran"
v=$(DCRFS_TEST_COMMIT_BEFORE_OPEN="touch '$T/hook.ran'" commit "$STORE" "$T/tree") ||
	fail "a commit with a harmless hook failed"
[ -e "$T/hook.ran" ] || fail "the test hook never ran"
[ "$v" = 2 ] || fail "the clean commit printed $v"
log "ok"
