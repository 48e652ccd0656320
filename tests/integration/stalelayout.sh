#!/usr/bin/env bash
# stalelayout.sh - running mounts across compactions and gc, and a
# damaged layout generation:
#  - a mount that polls once an hour reads the kept versions bit-exactly
#    at once after gc --keep-last 5 rebases them: with the default grace
#    without a single failed read (the frames its old layout builds on
#    stay), with --grace 0 through a read that fails, finds the newer
#    layout and starts again;
#  - a mount SIGSTOP'd across compact, commits, compact and a gc that
#    removes the generation in between catches up within a relist
#    interval, without a failed read;
#  - with the newest layouts/ object damaged, a fresh mount reads every
#    version bit-exactly from the generation below it and logs the
#    damaged one once; verify names it (exit 1); compact publishes the
#    next generation, which the running mount takes; verify passes then.
. "$(dirname "$0")/lib.sh"
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS" "$DCRFS_SYNTH" "$DCRFS_CTL"
need_fuse
command -v python3 >/dev/null 2>&1 || skip "python3 is missing"
export TMPDIR=$T/tmp
mkdir -p "$TMPDIR"

S0=$T/store0
ctl() { local s=$1; shift; t "$DCRFS_CTL" -q --store "$s" "$@"; }
# errors LOG: the error lines of a mount's log
errors() { grep -c 'error' "$1" || true; }

chain_store "$S0" 256K 1 12
for ((v = 13; v <= 16; v++)); do chain_tree "$v" 256K; done

# --- gc rebases under a mount that polls once an hour; nothing of the
# kept versions is cached (their chunks come from the store's frames)
for grace in default 0; do
	S=$T/gc-$grace M=$T/m-gc-$grace
	cp -a "$S0" "$S"
	mount_dcrfs "$S" "$M" "cache_dir=$T/c-gc-$grace,poll=3600,relist=3600,prefetch=none"
	log=$MOUNT_LOG
	for ((v = 1; v <= 12; v++)); do ls "$M/v$v" >/dev/null; done
	if [ "$grace" = default ]; then
		ctl "$S" gc --keep-last 5 >/dev/null
	else
		ctl "$S" gc --keep-last 5 --grace 0 >/dev/null
	fi
	[ ! -e "$S/versions/0000000007" ] || fail "gc (grace $grace) removed nothing"
	for ((v = 8; v <= 12; v++)); do same "$M" "$v"; done
	if [ "$grace" = default ]; then
		[ "$(errors "$log")" = 0 ] ||
			fail "reads failed after gc within the grace: $(grep error "$log")"
	else
		grep -q "layout generation 1: .* re-encoded" "$log" ||
			fail "the mount did not take the layout after a failed read: $(cat "$log")"
	fi
	umount_dcrfs "$M" || fail "dcrfs on $M exited with an error"
done

# --- a stopped mount misses a layout generation that gc removes
S=$T/stop M=$T/m-stop
cp -a "$S0" "$S"
mount_dcrfs "$S" "$M" "cache_dir=$T/c-stop,poll=0.2,relist=1,prefetch=none"
log=$MOUNT_LOG
for ((v = 1; v <= 12; v++)); do ls "$M/v$v" >/dev/null; done
kill -STOP "$MOUNT_PID"
ctl "$S" compact >/dev/null
for ((v = 13; v <= 16; v++)); do
	[ "$(commit "$S" "$T/s$v")" = "$v" ] || { kill -CONT "$MOUNT_PID"; fail "s$v is not version $v"; }
done
ctl "$S" compact >/dev/null
ctl "$S" gc --keep-last 100 --grace 0 >/dev/null
[ ! -e "$S/layouts/0000000001" ] && [ -e "$S/layouts/0000000002" ] ||
	{ kill -CONT "$MOUNT_PID"; fail "gc did not leave generation 2 alone: $(ls "$S/layouts")"; }
kill -CONT "$MOUNT_PID"
for ((i = 0; i < 50; i++)); do
	grep -q "layout generation 2: .* re-encoded" "$log" && break
	sleep 0.1
done
grep -q "layout generation 2: .* re-encoded" "$log" ||
	fail "the mount did not find layout generation 2 within 5 s: $(cat "$log")"
for ((v = 1; v <= 16; v++)); do same "$M" "$v"; done
[ "$(errors "$log")" = 0 ] || fail "reads failed after the mount caught up: $(grep error "$log")"
umount_dcrfs "$M" || fail "dcrfs on $M exited with an error"

# --- a damaged newest generation: 1 compacted (the committed frames
# collected), 13 and 14 committed, 2 compacts them, then 2 is damaged
S=$T/bad M=$T/m-bad
cp -a "$S0" "$S"
ctl "$S" compact >/dev/null
ctl "$S" gc --keep-last 100 --grace 0 >/dev/null
for ((v = 13; v <= 14; v++)); do
	[ "$(commit "$S" "$T/s$v")" = "$v" ] || fail "s$v is not version $v"
done
ctl "$S" compact >/dev/null
L2=$S/layouts/0000000002
[ -e "$L2" ] || fail "no layout generation 2"
python3 -c 'import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0x40
open(p, "wb").write(b)' "$L2"
# (log_level=debug: a fresh mount that re-encodes nothing says which
# generation it reads at debug level only)
mount_dcrfs "$S" "$M" "cache_dir=$T/c-bad,poll=0.2,prefetch=none,log_level=debug"
log=$MOUNT_LOG
for ((v = 1; v <= 14; v++)); do same "$M" "$v"; done
[ "$(grep -c 'layouts/0000000002' "$log")" = 1 ] ||
	fail "the damaged generation is not logged once: $(cat "$log")"
grep -q "layout generation 1: " "$log" || fail "the mount did not read generation 1: $(cat "$log")"
[ "$(errors "$log")" = 1 ] || fail "reads failed: $(cat "$log")"
expect_status 1 "damaged: layouts/0000000002" "$DCRFS_CTL" --store "$S" verify
# gc neither stops at it nor collects the generation below it
ctl "$S" gc --keep-last 100 >/dev/null
[ -e "$S/layouts/0000000001" ] || fail "gc deleted the generation mounts read"
ctl "$S" compact --json >"$T/c3.json"
py "$T/c3.json" 'assert d["generation"] == 3, d'
ctl "$S" verify >/dev/null || fail "verify fails after compact superseded the damaged generation"
for ((i = 0; i < 50; i++)); do
	grep -q "layout generation 3: " "$log" && break
	sleep 0.1
done
grep -q "layout generation 3: " "$log" || fail "the mount did not take generation 3: $(cat "$log")"
for ((v = 1; v <= 14; v++)); do same "$M" "$v"; done
[ "$(grep -c 'layouts/0000000002' "$log")" = 1 ] ||
	fail "the damaged generation is logged more than once: $(cat "$log")"
umount_dcrfs "$M" || fail "dcrfs on $M exited with an error"
M=$T/m-bad2
mount_dcrfs "$S" "$M" "cache_dir=$T/c-bad2,poll=0.2,prefetch=none"
for ((v = 1; v <= 14; v++)); do same "$M" "$v"; done
umount_dcrfs "$M" || fail "dcrfs on $M exited with an error"
exit 0
