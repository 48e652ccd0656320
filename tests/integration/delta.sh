#!/usr/bin/env bash
# delta.sh - the delta view (MNT/delta, issue 21): the root lists
# "delta"; /delta lists vN for every version with a parent; /delta/vN
# lists the safetensors files of vN (subdirectories as directories, no
# other files); stat's size is the number of bytes read, before the
# first read; the file is a safetensors file (parsed here by hand with
# Debian's python3 and numpy, no dcrfs module) whose indices and values
# applied to v(N-1)'s tensors give vN's bit-exactly; a span v1..v3
# (looked up, not listed) applied to v1 gives v3, and a rollback span
# v3..v1 applied to v3 gives v1; bogus spans are
# ENOENT; everything is read-only; status.json counts the views built;
# views evicted past their budget are rebuilt with the same bytes; a byte
# of a view's local file changed after its build is EIO, never served.
. "$(dirname "$0")/lib.sh"
need_fuse
need_numpy

# A subdirectory with a safetensors file that changes with each step.
add_sub() {
	mkdir -p "$T/s$1/sub"
	cp "$T/s$1/model.safetensors" "$T/s$1/sub/part.safetensors"
}
chain_store "$STORE" 2M 1 3 add_sub
# A branch: v4 is s3's tree committed on v1 (its lineage is 4, 1).
[ "$(commit "$STORE" "$T/s3" --parent 1)" = 4 ] || fail "the branch is not v4"
mount_dcrfs "$STORE" "$MNT" "poll=0"

ls "$MNT" | grep -qx delta || fail "the root does not list delta: $(ls "$MNT")"
[ "$(ls "$MNT/delta" | tr '\n' ' ')" = "v2 v3 v4 " ] ||
	fail "delta lists '$(ls "$MNT/delta" | tr '\n' ' ')', not v2 v3 v4"
[ "$(ls "$MNT/delta/v2" | tr '\n' ' ')" = "model.safetensors sub " ] ||
	fail "delta/v2 lists '$(ls "$MNT/delta/v2" | tr '\n' ' ')'"
[ "$(ls "$MNT/delta/v2/sub")" = part.safetensors ] || fail "delta/v2/sub lists $(ls "$MNT/delta/v2/sub")"
[ -e "$MNT/delta/v2/config.json" ] && fail "a file that is not safetensors is in the view"
[ -e "$MNT/delta/v1" ] && fail "v1 has no parent, yet delta/v1 exists"

# stat's size before any read is the size read.
for f in v2/model.safetensors v3/model.safetensors v2/sub/part.safetensors; do
	sz=$(stat -c %s "$MNT/delta/$f")
	rd=$(cat "$MNT/delta/$f" | wc -c)
	[ "$sz" = "$rd" ] || fail "delta/$f: stat says $sz bytes, $rd read"
	[ "$sz" -gt 100 ] || fail "delta/$f: $sz bytes"
done

# Spans: found by lookup, not listed; anything else is ENOENT.
[ -f "$MNT/delta/v1..v3/model.safetensors" ] || fail "delta/v1..v3 is not found"
ls "$MNT/delta" | grep -q '\.\.' && fail "delta lists a span"
# A rollback span (M > N, N in M's lineage) is found too.
[ -f "$MNT/delta/v3..v1/model.safetensors" ] || fail "the rollback span delta/v3..v1 is not found"
[ -f "$MNT/delta/v4..v1/model.safetensors" ] || fail "the rollback span delta/v4..v1 is not found"
# v2 and v3 are not in v4's lineage, either way round.
for bogus in v2..v2 v0..v3 v1..v9 v1..v3x vx v2.. ..v3 v01..v3 v2..v4 v3..v4 v4..v3 v4..v2 v9..v1; do
	if stat "$MNT/delta/$bogus" >/dev/null 2>&1; then
		fail "delta/$bogus exists"
	fi
	err=$(stat "$MNT/delta/$bogus" 2>&1 || true)
	case $err in *"No such file"*) ;; *) fail "delta/$bogus: $err" ;; esac
done

# Read-only.
if (echo x >"$MNT/delta/v2/model.safetensors") 2>/dev/null; then
	fail "a delta file is writable"
fi
if mkdir "$MNT/delta/v2/new" 2>/dev/null; then fail "mkdir in delta succeeded"; fi

# Apply by hand: vN-1's tensors + delta/vN = vN's, bit-exactly.
apply() { # FROM TO DELTA FILE
	"$PY" - "$T/s$1/$4" "$T/s$2/$4" "$3" "$1" "$2" <<'EOF'
import json, struct, sys
import numpy as np

def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__", {})
    return b, 8 + n, h, meta

raw = {"BF16": np.uint16, "F16": np.uint16, "F32": np.uint32, "F64": np.uint64,
       "I64": np.int64, "I32": np.int32, "U8": np.uint8, "I8": np.uint8,
       "I16": np.uint16, "U16": np.uint16, "BOOL": np.uint8,
       "F8_E4M3": np.uint8, "F8_E5M2": np.uint8}

def tensor(f, name):
    b, base, h, _ = f
    t = h[name]
    s, e = t["data_offsets"]
    return np.frombuffer(b[base + s:base + e], dtype=raw[t["dtype"]]).copy()

a, b, d = load(sys.argv[1]), load(sys.argv[2]), load(sys.argv[3])
meta = d[3]
assert meta["format"] == "dcrfs-delta" and meta["format_version"] == "1", meta
assert meta["from_version"] == sys.argv[4] and meta["to_version"] == sys.argv[5], meta
assert meta["added"] == "[]" and meta["removed"] == "[]" and meta["reshaped"] == "[]", meta
assert len(meta["from_digest"]) == 64 and len(meta["to_digest"]) == 64, meta
# Data order: the reference's, every tensor naturally aligned, no gaps.
end = 0
for name, t in sorted(d[2].items(), key=lambda kv: kv[1]["data_offsets"]):
    assert t["data_offsets"][0] == end, (name, t)
    end = t["data_offsets"][1]
assert d[1] + end == len(d[0]), "trailing bytes"
changed = total = 0
for name in a[2]:
    x, y = tensor(a, name), tensor(b, name)
    total += x.size
    if name + ".idx" in d[2]:
        idx, val = tensor(d, name + ".idx"), tensor(d, name + ".val")
        assert d[2][name + ".idx"]["dtype"] == "I32"
        assert d[2][name + ".val"]["dtype"] == a[2][name]["dtype"]
        assert len(idx) == len(val) and len(idx) > 0
        assert np.all(np.diff(idx) > 0), name + ": indices not increasing"
        x[idx] = val
        changed += len(idx)
    else:
        assert name + ".val" not in d[2]
    assert np.array_equal(x, y), name + ": not bit-exact"
assert changed > 0, "nothing changed"
bytes_t = len(d[0]) - d[1]
print(f"{sys.argv[3]}: {changed} of {total} elements changed, "
      f"{bytes_t / changed:.2f} B per changed element")
EOF
}
apply 1 2 "$MNT/delta/v2/model.safetensors" model.safetensors || fail "delta/v2 does not turn v1 into v2"
apply 2 3 "$MNT/delta/v3/model.safetensors" model.safetensors || fail "delta/v3 does not turn v2 into v3"
apply 1 2 "$MNT/delta/v2/sub/part.safetensors" sub/part.safetensors || fail "delta/v2/sub does not turn v1 into v2"
apply 1 3 "$MNT/delta/v1..v3/model.safetensors" model.safetensors || fail "delta/v1..v3 does not turn v1 into v3"
apply 3 1 "$MNT/delta/v3..v1/model.safetensors" model.safetensors || fail "delta/v3..v1 does not turn v3 back into v1"
apply 3 2 "$MNT/delta/v3..v2/sub/part.safetensors" sub/part.safetensors || fail "delta/v3..v2/sub does not turn v3 back into v2"
# The branch: delta/v4 is from its parent v1, the same as v1..v4, and
# turns v1 into s3's tree (its to_version is 4).
cmp "$MNT/delta/v4/model.safetensors" "$MNT/delta/v1..v4/model.safetensors" ||
	fail "delta/v4 and delta/v1..v4 differ"
LC_ALL=C sed 's/"to_version":"3"/"to_version":"4"/' "$MNT/delta/v1..v3/model.safetensors" |
	cmp - "$MNT/delta/v4/model.safetensors" || fail "delta/v4 is not delta/v1..v3 with to_version 4"
# delta/v3 and delta/v2..v3 are one node (the same from and to).
cmp "$MNT/delta/v3/model.safetensors" "$MNT/delta/v2..v3/model.safetensors" ||
	fail "delta/v3 and delta/v2..v3 differ"

cp "$MNT/.dcrfs/status.json" "$T/st.json"
# 5 forward views and 3 rollback ones (v3..v1, v4..v1, v3..v2/sub)
py "$T/st.json" 'assert d["delta"]["views_built"] == 8 and d["delta"]["bytes_built"] > 0, d["delta"]'
grep -q '^dcrfs_delta_views_built_total [1-9]' "$MNT/.dcrfs/metrics" || fail "metrics lack dcrfs_delta_views_built_total"
for f in v2/model.safetensors v1..v3/model.safetensors; do
	cp "$MNT/delta/$f" "$T/view.$(echo "$f" | tr / _)"
done
umount_dcrfs "$MNT" || fail "dcrfs exited with an error"
grep -E 'ERROR|error' "$MOUNT_LOG" && fail "errors logged"

# A view budget smaller than one view (an eighth of cache_size): every
# view is dropped once closed and rebuilt at its next open, with the
# same size and bytes.
mount_dcrfs "$STORE" "$MNT" "poll=0,cache_dir=$T/cache2,cache_size=1M"
for round in 1 2; do
	for f in v2/model.safetensors v1..v3/model.safetensors; do
		sz=$(stat -c %s "$MNT/delta/$f")
		cmp "$MNT/delta/$f" "$T/view.$(echo "$f" | tr / _)" ||
			fail "delta/$f differs from the first mount's (round $round)"
		[ "$sz" = "$(stat -c %s "$T/view.$(echo "$f" | tr / _)")" ] || fail "delta/$f: size $sz"
	done
done
cp "$MNT/.dcrfs/status.json" "$T/st2.json"
py "$T/st2.json" 'd = d["delta"]; assert d["views_built"] >= 4 and d["bytes_kept"] <= (1 << 20) // 8, d'
umount_dcrfs "$MNT" || fail "dcrfs exited with an error"
grep -E 'ERROR|error' "$MOUNT_LOG" && fail "errors logged"

# A byte of a view's local file that changes after the build (bit rot)
# is never served: the read fails with EIO, logged, and the next open
# rebuilds the view with the right bytes. The file is unlinked: it is
# changed through the daemon's descriptor of it (/proc/PID/fd). With
# passthrough (the kernel reads the file) the open checks the whole
# file; without, each read checks its blocks.
for pt in auto off; do
mount_dcrfs "$STORE" "$MNT" "poll=0,cache_dir=$T/cache3$pt,passthrough=$pt,delta_ahead=on"
ref=$T/view.v2_model.safetensors
sz=$(stat -c %s "$MNT/delta/v2/model.safetensors") # built, not read
"$PY" - "$MOUNT_PID" "$T/cache3" "$sz" <<'EOF2' || fail "no view file among the daemon's descriptors"
import os, sys
pid, cache, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
d = f"/proc/{pid}/fd"
for fd in os.listdir(d):
    try:
        link = os.readlink(f"{d}/{fd}")
    except OSError:
        continue
    if link.startswith(cache) and link.endswith("(deleted)") and \
            os.stat(f"{d}/{fd}").st_size == size:
        f = os.open(f"{d}/{fd}", os.O_RDWR)
        b = bytearray(os.pread(f, 1, size // 2))
        b[0] ^= 0x20
        os.pwrite(f, bytes(b), size // 2)
        os.close(f)
        sys.exit(0)
sys.exit(1)
EOF2
if cat "$MNT/delta/v2/model.safetensors" >"$T/rotten" 2>"$T/rotten.err"; then
	cmp -s "$T/rotten" "$ref" && fail "the changed byte was not in the view file"
	fail "a view whose local file changed was served"
fi
grep -q "Input/output error" "$T/rotten.err" || fail "not EIO: $(cat "$T/rotten.err")"
grep -q "delta view v1..v2 .*differ from what was built" "$MOUNT_LOG" ||
	fail "the damaged view is not logged: $(cat "$MOUNT_LOG")"
cmp "$MNT/delta/v2/model.safetensors" "$ref" || fail "the rebuilt view differs"
cp "$MNT/.dcrfs/status.json" "$T/st3.json"
# (and the view of v4, the prefetched latest, when it was built from the
# prefetch's records: views_ready)
py "$T/st3.json" 'assert d["delta"]["views_built"] - d["delta"]["views_ready"] == 2, d["delta"]'
umount_dcrfs "$MNT" || fail "dcrfs exited with an error"
[ "$(grep -c 'ERROR\|error' "$MOUNT_LOG")" = 1 ] || fail "more than one error logged: $(cat "$MOUNT_LOG")"
done

# Listing /delta (names and attributes) loads no version's tree: it
# needs parents and tree numbers only (a store of months of versions).
# A remount of an indexed cache without prefetch starts with one tree
# (latest's, for the root's time); listing all four loaded them all.
for pass in index list; do
	mount_dcrfs "$STORE" "$MNT" "poll=0,prefetch=none,cache_dir=$T/cache4"
	if [ $pass = list ]; then
		ls -l "$MNT/delta" >/dev/null
		loaded=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["trees_loaded"])' \
			"$MNT/.dcrfs/status.json")
		[ "$loaded" -le 1 ] || fail "listing /delta loaded $loaded versions' trees"
	fi
	umount_dcrfs "$MNT" || fail "dcrfs exited with an error"
done
log "ok"
