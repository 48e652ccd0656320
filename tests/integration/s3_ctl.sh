#!/usr/bin/env bash
# s3_ctl.sh - dcrfs-ctl on an S3 store (radosgw by default, DCR_S3_KIND=moto
# for the other implementation): log --json, show, diff, tag/untag, verify
# of a good store and of one with a damaged pack, gc. No mount needed.
. "$(dirname "$0")/lib.sh"
. "$DCR_SRCDIR/tests/integration/s3lib.sh"
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS_CTL"
command -v aws >/dev/null 2>&1 || skip "the aws CLI is missing"
s3_setup

STORE=$(s3_url store)
ctl() { t "$DCRFS_CTL" --store "$STORE" "$@"; }
py() { python3 -c "import json, sys
d = json.load(sys.stdin)
$1"; }

make_src "$T/tree.1" 1
next_src 2
next_src 3
for i in 1 2 3; do
	[ "$(commit "$STORE" "$T/tree.$i")" = "$i" ] || fail "commit of tree.$i is not version $i"
done

ctl log --json | py 'assert [e["version"] for e in d] == [3, 2, 1], d
assert [e["parent"] for e in d] == [2, 1, 0], d' || fail "log --json over S3"
ctl show 2 --json >"$T/show2.json"
want=$(file_digest "$T/tree.2/a.bin" "$(py 'print(d["format"])' <"$T/show2.json")" \
	"$(py 'print(d["chunk_size"])' <"$T/show2.json")")
[ "$(py 'print([f["digest"] for f in d["files"] if f["path"] == "a.bin"][0])' <"$T/show2.json")" = "$want" ] ||
	fail "show 2 over S3: wrong digest of a.bin"
ctl diff 1 2 --json | py '
f = {f["path"]: f for f in d["files"]}
assert f["a.bin"]["status"] == "changed" and f["a.bin"]["changed_bytes"] > 0, f["a.bin"]
assert f["added.2"]["status"] == "added", f
' || fail "diff over S3"
ctl tag eval 2 -q
ctl log --json | py 'assert d[1]["tags"] == ["eval"], d' || fail "tag over S3"
ctl untag eval -q
ctl verify --deep -q || fail "verify --deep of a good S3 store failed"

# a damaged pack of version 3: verify names it and exits 1
pack=$(ctl show 3 --json | py 'print(d["packs"][0])')
key=${STORE#s3://}/packs/$pack
awscli s3 cp --quiet "s3://$key" "$T/pack"
python3 -c 'import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0x01
open(p, "wb").write(b)' "$T/pack"
awscli s3 cp --quiet "$T/pack" "s3://$key"
rc=0
ctl verify >"$T/out" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "verify of a damaged S3 store exited $rc: $(cat "$T/out")"
grep -q "damaged: packs/$pack" "$T/out" || fail "verify does not name packs/$pack: $(cat "$T/out")"

# gc: keep the last version; its chain keeps 1 and 2
ctl gc --keep-last 1 --grace 0 -q >"$T/gc.out"
grep -q "keep version 2: the chain of version 3 needs it" "$T/gc.out" || fail "gc over S3: $(cat "$T/gc.out")"
[ "$(ctl log --json | py 'print(len(d))')" = 3 ] || fail "gc removed a version the chain needs"
log "ok"
