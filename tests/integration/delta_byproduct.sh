#!/usr/bin/env bash
# delta_byproduct.sh - the delta view of consecutive versions assembled
# from the changes the mount saw while it built the chunks (issue 32,
# read/dvrec.c): on a mount with prefetch=latest, delta/vN/FILE of every
# safetensors file is byte for byte the reference generator's
# (tests/integration/deltaref.py, numpy) and the comparison's (a mount
# without records), for files whose tensors straddle chunks, an f64
# tensor and a u8 one (recorded at another width: compared), a file whose
# header leaves its tensors at odd offsets, one tensor changed whole
# (planes segments), and four shards; the views of a version committed
# while mounted are built when its prefetch ends (views_ready), mostly
# from records (tensor_bytes_recorded), except a file most of whose
# changed chunks have no record (fresh bytes: full frames), which waits
# for its first read; a rollback span, an anchor
# (full frames) and a version re-encoded by compaction fall back to the
# comparison, with the same bytes. delta_ahead=auto (the default) keeps
# records only once a view was opened, off never.
. "$(dirname "$0")/lib.sh"
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS" "$DCRFS_CTL"
need_fuse
need_numpy
export PYTHONPATH=$DCR_SRCDIR/tests/integration

S=$T/store
CS=65536
FILES="model.safetensors odd.safetensors model-00001-of-00004.safetensors
model-00002-of-00004.safetensors model-00003-of-00004.safetensors
model-00004-of-00004.safetensors fresh.safetensors"

# gen V: the tree $T/s$V (V 1: made; else 3 % of each tensor's elements
# of s$((V-1)) changed in their low bits, in V 3 one tensor whole, in
# V 4 most of fresh.safetensors new random bytes).
gen() {
	"$PY" - "$T" "$1" <<'EOF'
import json, os, struct, sys
import numpy as np
import deltaref
t, v = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(v)
U = {1: "u1", 2: "<u2", 4: "<u4", 8: "<u8"}

def odd_layout(tensors):
    # a header of 8k+3 bytes, not padded: the tensors at odd offsets
    hdr, off = {}, 0
    for name, dt, shape, b in tensors:
        hdr[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
    js = json.dumps(hdr, separators=(",", ":")).encode()
    js += b" " * ((3 - len(js)) % 8)
    return struct.pack("<Q", len(js)) + js + b"".join(x[3] for x in tensors)

def tensors(path):
    raw = open(path, "rb").read()
    h, _, d = deltaref.parse(raw)
    return [(k, e["dtype"], e["shape"], d[e["data_offsets"][0]:e["data_offsets"][1]])
            for k, e in sorted(h.items(), key=lambda kv: kv[1]["data_offsets"][0])]

specs = {
    "model.safetensors": [("a.weight", "BF16", (300, 1000)), ("b.weight", "F32", (70000,)),
                          ("c.f64", "F64", (5000,)), ("d.u8", "U8", (3001,)),
                          ("e.tiny", "BF16", (7,)), ("n.f16", "F16", (33333,))],
    "odd.safetensors": [("x", "BF16", (90001,)), ("y", "F32", (20001,))],
    "fresh.safetensors": [("r", "BF16", (400000,)), ("s", "BF16", (70000,))],
}
for k in range(1, 5):
    specs["model-%05d-of-00004.safetensors" % k] = [
        ("layers.%d.w" % k, "BF16", (256, 512)), ("layers.%d.b" % k, "F32", (4099,))]
out = os.path.join(t, "s%d" % v)
os.makedirs(out)
for f, spec in specs.items():
    if v == 1:
        ts = []
        for name, dt, shape in spec:
            w = deltaref.WIDTH[dt]
            n = int(np.prod(shape))
            ts.append((name, dt, shape, rng.integers(0, 256, n * w, dtype=np.uint8).tobytes()))
    else:
        ts = []
        for name, dt, shape, b in tensors(os.path.join(t, "s%d" % (v - 1), f)):
            w = deltaref.WIDTH[dt]
            a = np.frombuffer(b, dtype=U[w]).copy()
            if v == 3 and name == "b.weight":
                a ^= 1  # every element: a dense change
            elif v == 4 and f == "fresh.safetensors" and name == "r":
                a = rng.integers(0, 1 << 16, a.size, dtype=np.uint16).astype(a.dtype)
            else:
                m = rng.random(a.size) < 0.03
                a[m] ^= rng.integers(1, 8, int(m.sum())).astype(a.dtype)
            ts.append((name, dt, shape, a.tobytes()))
    raw = odd_layout(ts) if f.startswith("odd") else deltaref.layout(ts, None)
    open(os.path.join(out, f), "wb").write(raw)
open(os.path.join(out, "config.json"), "w").write('{"step": %d}\n' % v)
EOF
}

# check MNT FROM TO [SAVE]: every file's delta/vTO (or vFROM..vTO when
# FROM is not TO's parent) is the reference's; SAVE keeps copies.
check() {
	local mnt=$1 from=$2 to=$3 save=${4:-} dir
	dir=$mnt/delta/v$to
	[ "$from" = "$(($to - 1))" ] || dir=$mnt/delta/v$from..v$to
	"$PY" - "$T" "$from" "$to" "$CS" $FILES <<'EOF'
import os, sys, deltaref
t, fv, tv, cs = sys.argv[1:5]
for f in sys.argv[5:]:
    ra = open(os.path.join(t, "s" + fv, f), "rb").read()
    rb = open(os.path.join(t, "s" + tv, f), "rb").read()
    open(os.path.join(t, "want." + f), "wb").write(deltaref.make_delta(
        ra, rb, fv, tv, deltaref.file_digest(ra, int(cs)), deltaref.file_digest(rb, int(cs))))
EOF
	for f in $FILES; do
		t cat "$dir/$f" >"$T/got" || fail "$dir/$f: cannot read"
		cmp -s "$T/got" "$T/want.$f" || fail "$dir/$f differs from the reference's"
		[ -z "$save" ] || cp "$T/got" "$save.$f"
	done
}

status() { cp "$1/.dcrfs/status.json" "$T/st.json"; }

# wait_latest MNT V: /latest of MNT is vV (60 s at most).
wait_latest() {
	local i
	for ((i = 0; i < 600; i++)); do
		[ "$(readlink "$1/latest")" = "v$2" ] && return 0
		sleep 0.1
	done
	fail "latest of $1 is $(readlink "$1/latest"), not v$2"
}

# step V [ARGS...] - s$V made and committed as vV (ARGS to the commit)
# while $M is mounted; waits until $M's latest is vV, its status then in
# $T/st$V.json.
step() {
	local v=$1
	shift
	gen "$v"
	[ "$(commit "$S" "$T/s$v" --chunk-size "$CS" --allow-nonfinite "$@")" = "$v" ] ||
		fail "s$v is not v$v"
	wait_latest "$M" "$v"
	status "$M"
	cp "$T/st.json" "$T/st$v.json"
}

# compared_since OLD - $M's views built since status OLD (a file) were
# compared, none taken from records
compared_since() {
	status "$M"
	py "$T/st.json" 'd = d["delta"]; import json
e = json.load(open(sys.argv[2]))["delta"]
assert d["tensor_bytes_recorded"] == e["tensor_bytes_recorded"], (d, e)
assert d["tensor_bytes_compared"] > e["tensor_bytes_compared"], (d, e)' "$1"
}

for v in 1 2 3; do
	gen "$v"
	[ "$(commit "$S" "$T/s$v" --chunk-size "$CS" --allow-nonfinite)" = "$v" ] || fail "s$v is not v$v"
done

# A mount that prefetches v3: its chunks are built from v2's by v3's
# frames, whose changes are kept; the views are ready when it is done.
M=$T/m
mount_dcrfs "$S" "$M" "cache_dir=$T/c1,poll=0.2,prefetch=latest,delta_ahead=on"
wait_latest "$M" 3
check "$M" 2 3
status "$M"
py "$T/st.json" 'd = d["delta"]
assert d["tensor_bytes_recorded"] > 0 and d["records"]["chunks"] > 0, d'
# A built view is a checked local file: with passthrough the kernel
# reads it and no READ reaches the daemon; two opens of one view at
# once share its file (the kernel refuses two backing files per inode).
"$PY" - "$M/delta/v3/model.safetensors" <<'EOF' || fail "two opens of one view"
import sys
a, b = open(sys.argv[1], "rb"), open(sys.argv[1], "rb")
assert a.read() == b.read()
EOF
status "$M"
if py "$T/st.json" 'sys.exit(0 if d["passthrough"]["active"] else 1)'; then
	py "$T/st.json" 'd = d["delta"]
assert d["opens"]["passthrough"] >= 8 and d["opens"]["normal"] == 0 and d["reads"] == 0, d'
else
	log "passthrough is not active on this mount: views are read by READs"
fi

# v4 committed while mounted: prefetched from v3's cached chunks, its
# views built from the records before latest moves to it, but for
# fresh.safetensors (records for a few of its changed chunks: its view
# would be mostly compared), built at its first read.
cp "$T/st.json" "$T/st3.json"
step 4
py "$T/st4.json" 'd = d["delta"]; import json
e = json.load(open(sys.argv[2]))["delta"]
assert d["views_ready"] - e["views_ready"] == 6, (d, e)
assert d["tensor_bytes_recorded"] > 4 * d["tensor_bytes_compared"], d' "$T/st3.json"
check "$M" 3 4 "$T/rec"
status "$M"
py "$T/st.json" 'd = d["delta"]; import json
e = json.load(open(sys.argv[2]))["delta"]
assert d["views_built"] == e["views_built"] + 1, (d, e)' "$T/st4.json"
# A rollback span: no record is made from v4 to v3; compared.
check "$M" 4 3
# An anchor: full frames, no records; compared.
step 5 --full
check "$M" 4 5
compared_since "$T/st5.json"
umount_dcrfs "$M" || fail "dcrfs exited with an error"

# The comparison's bytes: a mount that keeps no records (delta_ahead=off;
# a new cache) builds delta/v4 by reading both versions.
mount_dcrfs "$S" "$M" "cache_dir=$T/c2,poll=0,prefetch=none,delta_ahead=off"
for f in $FILES; do
	cmp -s "$M/delta/v4/$f" "$T/rec.$f" ||
		fail "delta/v4/$f: records and comparison differ"
done
status "$M"
py "$T/st.json" 'd = d["delta"]
assert d["tensor_bytes_recorded"] == 0 and d["tensor_bytes_compared"] > 0, d
assert d["ahead"] == "off" and not d["ahead_now"], d'
umount_dcrfs "$M" || fail "dcrfs exited with an error"

# Compaction re-encodes the chain (skip-deltas): v7, built on v6, is
# rebased on v5 (the anchor), so a new mount prefetching v7 keeps
# records made from v5: the span v5..v7 takes them; the span v1..v7 has
# no record from v1 and is compared; both as the reference. delta/v7
# still means v6..v7, the parent v7 was committed against (an engine
# holding v6 patches it), and v6..v7 is the same view by name.
gen 6
[ "$(commit "$S" "$T/s6" --chunk-size "$CS" --allow-nonfinite)" = 6 ] || fail "s6 is not v6"
gen 7
[ "$(commit "$S" "$T/s7" --chunk-size "$CS" --allow-nonfinite)" = 7 ] || fail "s7 is not v7"
t "$DCRFS_CTL" --store "$S" compact --max-depth 2 >"$T/compact.out" 2>&1 ||
	fail "compact: $(cat "$T/compact.out")"
grep -q "rewrote version 7: built on version 6, now on version 5" "$T/compact.out" ||
	fail "compact: $(cat "$T/compact.out")"
mount_dcrfs "$S" "$M" "cache_dir=$T/c3,poll=0.2,prefetch=latest,delta_ahead=on"
wait_latest "$M" 7
check "$M" 5 7
status "$M"
cp "$T/st.json" "$T/st7.json"
py "$T/st7.json" 'd = d["delta"]
assert d["tensor_bytes_recorded"] > 4 * d["tensor_bytes_compared"], d'
check "$M" 1 7
compared_since "$T/st7.json"
check "$M" 6 7 "$T/v7"
for f in $FILES; do
	cmp -s "$M/delta/v6..v7/$f" "$T/v7.$f" || fail "delta/v6..v7/$f is not delta/v7/$f"
done
t ls "$M/delta" >"$T/ls" || fail "cannot list delta/"
grep -qx v7 "$T/ls" || fail "delta/ does not list v7: $(cat "$T/ls")"
umount_dcrfs "$M" || fail "dcrfs exited with an error"

# delta_ahead=auto (the default): a mount none of whose readers opened a
# view keeps no records, so its prefetch of v7 pays nothing for views;
# the first open of a view (built by comparison) switches them on, said
# once, and the views of v8, committed then, are ready when latest moves.
mount_dcrfs "$S" "$M" "cache_dir=$T/c4,poll=0.2,prefetch=latest"
wait_latest "$M" 7
status "$M"
py "$T/st.json" 'd = d["delta"]
assert d["ahead"] == "auto" and not d["ahead_now"], d
assert d["records"]["kept"] == 0 and d["views_ready"] == 0, d'
check "$M" 6 7
status "$M"
cp "$T/st.json" "$T/st7a.json"
py "$T/st7a.json" 'd = d["delta"]
assert d["ahead_now"] and d["tensor_bytes_recorded"] == 0, d'
step 8
py "$T/st8.json" 'd = d["delta"]; import json
e = json.load(open(sys.argv[2]))["delta"]
assert d["records"]["kept"] > 0 and d["views_ready"] >= 6, d
rec = d["tensor_bytes_recorded"] - e["tensor_bytes_recorded"]
cmp = d["tensor_bytes_compared"] - e["tensor_bytes_compared"]
assert rec > 4 * cmp, (d, e)' "$T/st7a.json"
check "$M" 7 8
n=$(grep -c "delta views are in use on this mount" "$MOUNT_LOG" || true)
[ "$n" = 1 ] || fail "the switch to views ahead was said $n times: $(cat "$MOUNT_LOG")"
umount_dcrfs "$M" || fail "dcrfs exited with an error"
exit 0
