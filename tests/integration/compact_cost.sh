#!/usr/bin/env bash
# compact_cost.sh - compaction's read-cost bound, as dcrfs-ctl compact
# --read-cost PCT, gc --read-cost PCT and Python's compact(read_cost=):
# on one chain of 9 uniform 3 % steps, copied, 100 % stores every changed
# chunk full (no delta frame) and writes more than 400 %, which keeps
# deltas; both stores verify --deep; gc's rebasing at 100 % leaves a
# larger store than at its default; Python with read_cost=100 writes the
# very packs dcrfs-ctl does (compaction is deterministic), and with its
# default those of dcrfs-ctl's default, for compact and gc alike
# (libdcr's dcr_gc_options.read_cost); a bound out of 100..10000, or
# given to a command other than gc and compact, is a usage error (2), and
# a DcrError naming read_cost in Python. Nothing is mounted.
. "$(dirname "$0")/lib.sh"
CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS_SYNTH" "$CTL"
command -v python3 >/dev/null 2>&1 || skip "python3 is missing"
LIBDCR=$DCR_BUILDDIR/.libs/libdcr.so
[ -e "$LIBDCR" ] || skip "$LIBDCR not built"

S=$T/store
t "$DCRFS_SYNTH" init --size 2M --seed 1 --quiet "$T/s1"
rm -f "$T/s1/.dcrfs-synth.state"
for ((v = 1; v <= 9; v++)); do
	[ "$v" = 1 ] || t "$DCRFS_SYNTH" step --mode uniform --rate 0.03 --seed "$v" \
		--in "$T/s$((v - 1))" --out "$T/s$v" --state "$T/state" --quiet
	[ "$(commit "$S" "$T/s$v")" = "$v" ] || fail "s$v is not version $v"
done
for c in c100 c400 cdef p100 pdef pg100 pgdef; do cp -a "$S" "$T/$c"; done

# compact C PCT: dcrfs-ctl compact --json on store copy C (PCT "": default)
compact() {
	t "$CTL" --store "$T/$1" --quiet --json compact ${2:+--read-cost "$2"} >"$T/$1.json" ||
		fail "compact --read-cost ${2:-(default)} failed"
}
compact c100 100
compact c400 400
compact cdef ""
py "$T/c100.json" 'assert d["chunks"]["delta"] == 0 and d["chunks"]["full"] > 0, d'
py "$T/c400.json" 'assert d["chunks"]["delta"] > 0, d'
py "$T/c100.json" '
e = json.load(open(sys.argv[2]))
assert d["bytes_written"] > e["bytes_written"], (d, e)' "$T/c400.json"
packs() { (cd "$T/$1/packs" && find . -type f | sort); }
size() { du -sb "$T/$1/packs" | cut -f1; }
[ "$(size c100)" -gt "$(size c400)" ] ||
	fail "--read-cost 100 left packs of $(size c100) bytes, 400 of $(size c400)"
for c in c100 c400; do
	t "$CTL" --store "$T/$c" --quiet verify --deep || fail "$c does not verify"
done

# gc's rebasing takes the bound too (the oldest kept version becomes the
# anchor; at 100 % the others are full frames as well)
gc() { # COPY [--read-cost PCT]
	local c=$1
	shift
	cp -a "$S" "$T/$c"
	t "$CTL" --store "$T/$c" --quiet gc --keep-last 5 --grace 0 "$@" >/dev/null ||
		fail "gc $* on $c failed"
	t "$CTL" --store "$T/$c" --quiet verify --deep || fail "$c does not verify after gc"
}
gc g100 --read-cost 100
gc gdef
[ "$(size g100)" -gt "$(size gdef)" ] ||
	fail "gc --read-cost 100 left packs of $(size g100) bytes, the default $(size gdef)"

# Python passes the bound: the same packs as dcrfs-ctl's, for 100 and default
py_sanitized "$LIBDCR"
DCRFS_LIBDCR=$LIBDCR PYTHONPATH=$DCR_SRCDIR/python t python3 - "$T" <<'PYEOF' ||
import sys, dcrfs
T = sys.argv[1]
r = dcrfs.compact(T + "/p100", read_cost=100)
assert r["generation"] and r["rewritten"], r
assert dcrfs.compact(T + "/pdef")["generation"], "nothing compacted"
for bad in (99, 10001):
    for call in (lambda: dcrfs.compact(T + "/pdef", read_cost=bad),
                 lambda: dcrfs.gc(T + "/pgdef", keep_last=5, grace=0, read_cost=bad)):
        try:
            call()
        except dcrfs.DcrError as e:
            assert "read_cost" in str(e), str(e)
        else:
            raise AssertionError("read_cost=%d accepted" % bad)
g = dcrfs.gc(T + "/pg100", keep_last=5, grace=0, read_cost=100)
assert g["versions_removed"] == [1, 2, 3, 4], g
dcrfs.gc(T + "/pgdef", keep_last=5, grace=0)
PYEOF
	fail "Python's compact(read_cost=)"
[ "$(packs p100)" = "$(packs c100)" ] || fail "read_cost=100 from Python wrote other packs than dcrfs-ctl's"
[ "$(packs pdef)" = "$(packs cdef)" ] || fail "Python's default wrote other packs than dcrfs-ctl's"
[ "$(packs p100)" != "$(packs pdef)" ] || fail "read_cost=100 from Python changed nothing"
[ "$(packs pg100)" = "$(packs g100)" ] ||
	fail "gc read_cost=100 from Python wrote other packs than dcrfs-ctl gc --read-cost 100's"
[ "$(packs pgdef)" = "$(packs gdef)" ] || fail "Python's gc default wrote other packs than dcrfs-ctl's"

# usage errors
expect_status 2 "--read-cost: '99' must be a percentage from 100 to 10000" \
	"$CTL" --store "$S" compact --read-cost 99
expect_status 2 "--read-cost: '10001' must be" "$CTL" --store "$S" compact --read-cost 10001
expect_status 2 "--read-cost: 'x' must be" "$CTL" --store "$S" gc --keep-last 1 --read-cost x
expect_status 2 "only gc and compact take --read-cost" "$CTL" --store "$S" log --read-cost 100
log "read-cost 100: $(size c100) bytes of packs, 400: $(size c400), default: $(size cdef);" \
	"after gc --keep-last 5: 100: $(size g100), default: $(size gdef)"
