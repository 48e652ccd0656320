#!/usr/bin/env bash
# killgc.sh - kill -9 of dcrfs-ctl gc and compact at every store
# mutation: strace injects SIGKILL at the Nth unlinkat (a directory
# store's delete), renameat (a put) and linkat (a put-if-absent: a
# version, a layout), for every N a whole run makes. After each kill,
# every version still listed verifies, and a second run of the same
# command completes and leaves a store that verifies, with the versions
# retention keeps. The store: a chain of 14 versions, compacted after 8
# and the committed encoding collected (so the versions gc removes are
# readable only as the layout encodes them), a tag on
# version 3 (removed versions on both sides of a kept one); gc
# --keep-last 5 rebases the kept versions, with --grace 0 (packs
# deleted) and with the default grace (packs kept for mounts on the old
# layout).
. "$(dirname "$0")/lib.sh"
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS_SYNTH" "$DCRFS_CTL"
command -v strace >/dev/null 2>&1 || skip "strace is missing"
strace -f -o /dev/null -e inject=unlinkat:error=ENOENT:when=1 true 2>/dev/null ||
	skip "strace cannot trace here (ptrace refused, or no inject support)"
# scratch caches of the rebasing compaction, left behind by kills
export TMPDIR=$T/tmp
mkdir -p "$TMPDIR"

S0=$T/store0
t "$DCRFS_SYNTH" init --size 192K --seed 1 --quiet "$T/s1"
rm -f "$T/s1/.dcrfs-synth.state"
for ((v = 1; v <= 14; v++)); do
	[ "$v" = 1 ] || t "$DCRFS_SYNTH" step --mode uniform --rate 0.03 --seed "$v" \
		--in "$T/s$((v - 1))" --out "$T/s$v" --state "$T/state" --quiet
	[ "$(commit "$S0" "$T/s$v")" = "$v" ] || fail "s$v is not version $v"
	if [ "$v" = 8 ]; then
		# compacted, and the committed encoding collected (as past the grace)
		t "$DCRFS_CTL" -q --store "$S0" compact >/dev/null
		t "$DCRFS_CTL" -q --store "$S0" gc --keep-last 8 --grace 0 >/dev/null
	fi
done
t "$DCRFS_CTL" --store "$S0" tag keep3 3
[ -e "$S0/layouts/0000000001" ] || fail "no layout generation 1"

# versions STORE - the listed version numbers, ascending, one line
versions() { (cd "$1/versions" && ls | sed 's/^0*//' | sort -n | tr '\n' ' '); }
# calls SYSCALL CMD... - how many SYSCALL calls a whole run of CMD makes
calls() {
	local sc=$1
	shift
	rm -rf "$T/s"
	cp -a "$S0" "$T/s"
	t strace -f -qq -o "$T/count.trace" -e trace="$sc" "$DCRFS_CTL" -q --store "$T/s" \
		"$@" >/dev/null 2>&1 || fail "$* failed under strace"
	grep -c " $sc(" "$T/count.trace" || true
}

# killed WANT SYSCALL CMD... - kill CMD at every SYSCALL call; after
# each kill the store verifies and CMD run again completes, leaving the
# versions WANT
killed() {
	local want=$1 sc=$2 n total rc
	shift 2
	total=$(calls "$sc" "$@")
	[ "$total" -gt 0 ] || fail "$* makes no $sc call: not a directory store's syscall?"
	log "$*: kill at each of $total ${sc}s"
	for ((n = 1; n <= total; n++)); do
		rm -rf "$T/s"
		cp -a "$S0" "$T/s"
		rc=0
		t strace -f -qq -o /dev/null -e trace="$sc" -e inject="$sc:signal=KILL:when=$n" \
			"$DCRFS_CTL" -q --store "$T/s" "$@" >"$T/kill.out" 2>&1 || rc=$?
		[ "$rc" != 0 ] || fail "$*: not killed at $sc $n of $total"
		t "$DCRFS_CTL" -q --store "$T/s" verify >"$T/verify.out" 2>&1 ||
			fail "$*: killed at $sc $n of $total, versions $(versions "$T/s")listed do not verify: $(cat "$T/verify.out")"
		t "$DCRFS_CTL" -q --store "$T/s" "$@" >"$T/again.out" 2>&1 ||
			fail "$*: killed at $sc $n of $total, a second run fails: $(cat "$T/again.out")"
		t "$DCRFS_CTL" -q --store "$T/s" verify >"$T/verify.out" 2>&1 ||
			fail "$*: killed at $sc $n of $total, then run again: $(cat "$T/verify.out")"
		[ "$(versions "$T/s")" = "$want" ] ||
			fail "$*: killed at $sc $n of $total, then run again: versions $(versions "$T/s")"
	done
}

keep="3 10 11 12 13 14 "
all="1 2 3 4 5 6 7 8 9 10 11 12 13 14 "
killed "$keep" unlinkat gc --keep-last 5 --grace 0
killed "$keep" renameat gc --keep-last 5 --grace 0
killed "$keep" linkat gc --keep-last 5 --grace 0
killed "$keep" unlinkat gc --keep-last 5
killed "$all" renameat compact --max-depth 3
killed "$all" linkat compact --max-depth 3

# what the default grace kept, a later gc past it collects: every pack
# is then named by a kept version
rm -rf "$T/s"
cp -a "$S0" "$T/s"
t "$DCRFS_CTL" -q --store "$T/s" gc --keep-last 5 >/dev/null
t "$DCRFS_CTL" -q --store "$T/s" gc --keep-last 5 --grace 0 >/dev/null
t "$DCRFS_CTL" -q --store "$T/s" verify --deep >/dev/null
for v in $keep; do
	(cd "$T/s$v" && find . -type f | sort) >"$T/want"
	t "$DCRFS_CTL" --store "$T/s" show "$v" --json |
		py - 'print("\n".join(sorted("./" + f["path"] for f in d["files"] if f["type"] == "file")))' >"$T/got"
	cmp -s "$T/want" "$T/got" || fail "version $v does not list the files of s$v"
done
exit 0
