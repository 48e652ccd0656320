#!/usr/bin/env bash
# compact.sh - dcrfs-ctl compact and gc's rebasing on a chain of 52
# versions (a file added and one removed on the way, an anchor committed
# with --full in the middle): the dry run changes nothing; compaction
# bounds every version's depth, publishes one layout generation, and
# every version stays bit-exact through a fresh mount and through a mount
# that was reading the old layout while compaction ran (reads racing the
# compaction); compacting again does nothing, and after more commits
# rewrites only the new versions; gc --keep-last 5 --grace 0 leaves
# exactly five versions, bit-exact, in no more than one raw copy of the
# model; dcrfs-commit --compact-every 4 compacts after versions 4 and 8
# and only then; a layout entry naming a manifest of another version is refused
# (logged) and the version read as committed.
. "$(dirname "$0")/lib.sh"
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS" "$DCRFS_SYNTH" "$DCRFS_CTL"
need_fuse
command -v python3 >/dev/null 2>&1 || skip "python3 is missing"

S=$T/store
N=52
ctl() { t "$DCRFS_CTL" --store "$S" "$@"; }

# v20 to v39 hold one file more; v30 is committed as an anchor.
# shellcheck disable=SC2317,SC2034 # run by chain_store, which reads CHAIN_ARGS
edit() {
	[ "$1" -lt 20 ] || [ "$1" -ge 40 ] || rand_file "$T/s$1/extra.bin" 300000 "e$1"
	[ "$1" != 30 ] || CHAIN_ARGS=(--full)
}
chain_store "$S" 2M 1 "$N" edit
ctl log --json >"$T/log0.json"
py "$T/log0.json" '
k = {e["version"]: e["kind"] for e in d}
assert len(d) == 52 and k[1] == "anchor" and k[30] == "anchor" and k[52] == "delta", k'

# a mount that reads the old layout, and keeps reading while compaction runs
M1=$T/m1
mount_dcrfs "$S" "$M1" "cache_dir=$T/c1,poll=0.2,prefetch=none"
LOG1=$MOUNT_LOG
same "$M1" 29
(
	for ((i = 0; i < 200; i++)); do
		for v in 52 45 38 29; do
			(cd "$T/s$v" && find . -type f -print0 | xargs -0 -I{} cmp -s {} "$M1/v$v/{}") ||
				{ echo "v$v"; exit 1; }
		done
		[ ! -e "$T/stop" ] || exit 0
	done
) >"$T/race.out" 2>&1 &
RACE=$!
_pids+=("$RACE")

# --- the dry run changes nothing
ctl compact --dry-run >"$T/dry.out"
grep -q "would rewrite version 52: built on version 51, now on version 48" "$T/dry.out" ||
	fail "compact --dry-run: $(cat "$T/dry.out")"
[ ! -e "$S/layouts" ] || fail "compact --dry-run published a layout"

# --- compact
ctl compact --json >"$T/c1.json"
py "$T/c1.json" '
assert d["generation"] == 1 and d["rewritten"] > 0, d
assert d["depth_before"] == 29 and d["depth_after"] <= 8, d'
[ -e "$S/layouts/0000000001" ] || fail "no layout generation 1"
ctl log --json >"$T/log1.json"
py "$T/log1.json" '
k = {e["version"]: (e["kind"], e["parent"], e["base"]) for e in d}
assert k[52] == ("compacted", 51, 48), k[52]
assert k[48] == ("compacted", 47, 32), k[48]
assert k[51][0] == "delta" and k[51][2] == 50, k[51]
assert k[30] == ("anchor", 29, 0), k[30]
assert all(k[v][1] == v - 1 for v in range(2, 53)), k'
touch "$T/stop"
wait "$RACE" || fail "a read racing the compaction differed: $(cat "$T/race.out")"
ctl verify --deep -q || fail "verify --deep fails after compact"

# a fresh mount reads every version through the new layout
M2=$T/m2
mount_dcrfs "$S" "$M2" "cache_dir=$T/c2,prefetch=none"
for ((v = 1; v <= N; v++)); do same "$M2" "$v"; done
umount_dcrfs "$M2" || fail "the fresh mount did not exit cleanly"

# the old mount learns the new layout and reads every version right
for ((i = 0; i < 100; i++)); do
	grep -q "layout generation 1" "$LOG1" && break
	sleep 0.1
done
grep -q "layout generation 1" "$LOG1" || fail "the running mount did not log the new layout: $(cat "$LOG1")"
for v in 52 48 40 33 30 29 17 2; do same "$M1" "$v"; done

# --- again: nothing to do; after three more commits, only those
ctl compact --json >"$T/c2.json"
py "$T/c2.json" 'assert d["generation"] == 0 and d["rewritten"] == 0, d'
chain_store "$S" 2M $((N + 1)) $((N + 3))
N=$((N + 3))
ctl compact >"$T/c3.out"
[ "$(grep -c "rewrote version" "$T/c3.out")" -ge 1 ] && ! grep -q "rewrote version [1-4]" "$T/c3.out" &&
	! grep -q "rewrote version 5[0-2]:" "$T/c3.out" ||
	fail "compacting after three commits rewrote older versions: $(cat "$T/c3.out")"
[ -e "$S/layouts/0000000002" ] || fail "no layout generation 2"

# --- gc: exactly the last five, bit-exact, in at most one raw copy
ctl gc --keep-last 5 --grace 0 -q
ctl log --json >"$T/log2.json"
py "$T/log2.json" '
assert [e["version"] for e in d] == [55, 54, 53, 52, 51], [e["version"] for e in d]
assert [e["kind"] for e in d][-1] == "anchor", d[-1]'
raw=$(du -sb "$T/s$N" | cut -f1)
used=$(du -sb "$S" | cut -f1)
[ "$used" -le "$raw" ] || fail "after gc the store holds $used bytes, more than one raw copy ($raw)"
ctl verify --deep -q || fail "verify --deep fails after gc"
M3=$T/m3
mount_dcrfs "$S" "$M3" "cache_dir=$T/c3,prefetch=none"
for ((v = N - 4; v <= N; v++)); do same "$M3" "$v"; done
umount_dcrfs "$M3" || fail "the mount after gc did not exit cleanly"
# the mount that saw every generation follows: the kept versions read right
for ((i = 0; i < 100; i++)); do
	grep -q "layout generation 3" "$LOG1" && break
	sleep 0.1
done
for ((v = N - 4; v <= N; v++)); do same "$M1" "$v"; done
umount_dcrfs "$M1" || fail "the first mount did not exit cleanly"

# --- the automatic policy: dcrfs-commit --compact-every 4
A=$T/auto
for v in 1 2 3 4 5 6 7 8; do
	[ "$(t env DCRFS_COMPACT_EVERY=4 "$DCRFS_COMMIT" --init --store "$A" --cache-dir "$T/cc-auto" \
		"$T/s$((N - 8 + v))" 2>"$T/auto.err")" = "$v" ] || fail "auto: commit $v: $(cat "$T/auto.err")"
	case $v in
	4 | 8) grep -q "compacted: [1-9][0-9]* versions re-encoded (layout generation $((v / 4)))" "$T/auto.err" ||
		fail "auto: no compaction after version $v: $(cat "$T/auto.err")" ;;
	*) ! grep -q compacted "$T/auto.err" || fail "auto: compacted after version $v" ;;
	esac
done
t "$DCRFS_CTL" --store "$A" log --json >"$T/auto.json"
py "$T/auto.json" '
k = {e["version"]: (e["kind"], e["base"]) for e in d}
assert k[8] == ("compacted", 1) and k[4] == ("compacted", 1) and k[6] == ("compacted", 4), k'
t "$DCRFS_CTL" --store "$A" verify --deep -q || fail "auto: verify --deep"
expect_status 2 "compact-every" "$DCRFS_COMMIT" --store "$A" --compact-every x "$T/s1"

# --- a layout naming a manifest of other content is refused, loudly
B=$T/bad
cp -a "$S" "$B"
gen=$(ls "$B/layouts" | tail -1)
python3 - "$B" "$gen" <<'EOF' || fail "could not forge a layout"
import hashlib, os, struct, sys
store, gen = sys.argv[1], int(sys.argv[2])
p = os.path.join(store, "layouts", "%010d" % gen)
b = bytearray(open(p, "rb").read())
n = struct.unpack_from("<Q", b, 32)[0]
# version 55's entry now names version 54's own manifest object, copied
# to manifests/ under its hash (a manifest of version 54, not 55)
src = open(os.path.join(store, "versions", "%010d" % 54), "rb").read()
h = hashlib.sha256(src).digest()
open(os.path.join(store, "manifests", h.hex()), "wb").write(src)
for i in range(n):
    off = 40 + 48 * i
    v = struct.unpack_from("<Q", b, off)[0]
    if v == 55:
        b[off + 16:off + 48] = h
        break
else:
    entries = [(struct.unpack_from("<Q", b, 40 + 48 * i)[0], bytes(b[40 + 48 * i:88 + 48 * i])) for i in range(n)]
    entries.append((55, struct.pack("<QQ", 55, 54) + h))
    entries.sort()
    body = bytearray(b[:40]) + b"".join(e for _, e in entries)
    struct.pack_into("<Q", body, 32, len(entries))
    b = body + hashlib.sha256(body).digest()
    open(p, "wb").write(b)
    sys.exit(0)
b[-32:] = hashlib.sha256(bytes(b[:-32])).digest()
open(p, "wb").write(b)
EOF
M4=$T/m4
mount_dcrfs "$B" "$M4" "cache_dir=$T/c4,prefetch=none"
same "$M4" 54
grep -q "manifests/.*claims to be version 54" "$MOUNT_LOG" ||
	fail "the forged layout entry was not reported: $(cat "$MOUNT_LOG")"
grep -q "version 55 is read as committed" "$MOUNT_LOG" ||
	fail "the mount does not say how it reads version 55: $(cat "$MOUNT_LOG")"
# 55 was not rewritten (it is built on 54 either way): as committed, right
same "$M4" 55
umount_dcrfs "$M4" || true
exit 0
