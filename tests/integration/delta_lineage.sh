#!/usr/bin/env bash
# delta_lineage.sh - spans of the delta view (MNT/delta) follow the
# lineage the versions were committed in, across versions gc removed
# (issue 32): with v1 tagged and v2, v3 removed by gc --keep-last 2 (v4
# rebased on v1), delta/v1..v5 is found and takes v1's tensors to v5's
# bit for bit, delta/v5 (committed on v4) is v4..v5, and delta/v4, whose
# committed parent v3 is gone, does not exist (nor is it listed).
. "$(dirname "$0")/lib.sh"
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS" "$DCRFS_CTL"
need_fuse
need_numpy

S=$T/store
M=$T/mnt
chain_store "$S" 1M 1 5
t "$DCRFS_CTL" --store "$S" tag keep 1 >/dev/null || fail "cannot tag v1"
t "$DCRFS_CTL" --store "$S" gc --keep-last 2 --grace 0 >"$T/gc.out" 2>&1 ||
	fail "gc: $(cat "$T/gc.out")"
mount_dcrfs "$S" "$M" "poll=0"
[ -e "$M/v3" ] && fail "gc kept v3: $(cat "$T/gc.out")"
[ "$(ls "$M/delta" | tr '\n' ' ')" = "v5 " ] ||
	fail "delta lists '$(ls "$M/delta" | tr '\n' ' ')', not v5"
[ -e "$M/delta/v4" ] && fail "delta/v4 exists, though v3 (its committed parent) is gone"
# apply DELTA FROM TO: the view applied to FROM's tensors gives TO's
apply() {
	"$PY" - "$1" "$2" "$3" <<'PYEOF' || fail "$1 applied to $2 is not $3"
import json, struct, sys
import numpy as np
def parse(p):
    raw = open(p, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]
dh, dd = parse(sys.argv[1])
ah, ad = parse(sys.argv[2])
bh, bd = parse(sys.argv[3])
meta = dh.pop("__metadata__")
out = bytearray(ad)
for k, e in dh.items():
    if not k.endswith(".idx"):
        continue
    name = k[:-4]
    v = dh[name + ".val"]
    w = (v["data_offsets"][1] - v["data_offsets"][0]) // max(1, v["shape"][0])
    idx = np.frombuffer(dd[e["data_offsets"][0]:e["data_offsets"][1]],
                        dtype="<i4" if e["dtype"] == "I32" else "<i8")
    val = dd[v["data_offsets"][0]:v["data_offsets"][1]]
    o = ah[name]["data_offsets"][0]
    for j, i in enumerate(idx):
        out[o + int(i) * w:o + (int(i) + 1) * w] = val[j * w:(j + 1) * w]
assert bytes(out) == bd and ah == bh, "differs"
PYEOF
}
[ -f "$M/delta/v1..v5/model.safetensors" ] ||
	fail "delta/v1..v5 is not found across the versions gc removed"
apply "$M/delta/v1..v5/model.safetensors" "$M/v1/model.safetensors" "$M/v5/model.safetensors"
apply "$M/delta/v5/model.safetensors" "$M/v4/model.safetensors" "$M/v5/model.safetensors"
apply "$M/delta/v5..v1/model.safetensors" "$M/v5/model.safetensors" "$M/v1/model.safetensors"
umount_dcrfs "$M" || fail "dcrfs exited with an error"
log "ok"
