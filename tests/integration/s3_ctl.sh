#!/usr/bin/env bash
# s3_ctl.sh - dcrfs-ctl on an S3 store (radosgw by default, DCR_S3_KIND=moto
# for the other implementation): log --json, show, diff, tag/untag, verify
# of a good store and of one with a damaged pack, compact (layouts/ and
# manifests/ on S3: conditional create, listing), gc's rebase. No mount
# needed: verify --deep reads every file back through the reader.
. "$(dirname "$0")/lib.sh"
. "$DCR_SRCDIR/tests/integration/s3lib.sh"
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS_CTL"
command -v aws >/dev/null 2>&1 || skip "the aws CLI is missing"
s3_store
ctl() { t "$DCRFS_CTL" --store "$STORE" "$@"; }
# pyin SCRIPT - py on standard input
pyin() { py - "$1"; }

make_src "$T/tree.1" 1
next_src 2
next_src 3
for i in 1 2 3; do
	[ "$(commit "$STORE" "$T/tree.$i")" = "$i" ] || fail "commit of tree.$i is not version $i"
done

ctl log --json | pyin 'assert [e["version"] for e in d] == [3, 2, 1], d
assert [e["parent"] for e in d] == [2, 1, 0], d' || fail "log --json over S3"
ctl show 2 --json >"$T/show2.json"
want=$(file_digest "$T/tree.2/a.bin" "$(pyin 'print(d["format"])' <"$T/show2.json")" \
	"$(pyin 'print(d["chunk_size"])' <"$T/show2.json")")
[ "$(pyin 'print([f["digest"] for f in d["files"] if f["path"] == "a.bin"][0])' <"$T/show2.json")" = "$want" ] ||
	fail "show 2 over S3: wrong digest of a.bin"
ctl diff 1 2 --json | pyin '
f = {f["path"]: f for f in d["files"]}
assert f["a.bin"]["status"] == "changed" and f["a.bin"]["changed_bytes"] > 0, f["a.bin"]
assert f["added.2"]["status"] == "added", f
' || fail "diff over S3"
ctl tag eval 2 -q
ctl log --json | pyin 'assert d[1]["tags"] == ["eval"], d' || fail "tag over S3"
ctl untag eval -q
ctl verify --deep -q || fail "verify --deep of a good S3 store failed"

# a damaged pack of version 3: verify names it and exits 1
pack=$(ctl show 3 --json | pyin 'print(d["packs"][0])')
key=${STORE#s3://}/packs/$pack
awscli s3 cp --quiet "s3://$key" "$T/pack"
cp "$T/pack" "$T/pack.good"
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

# a rebase or compaction that meets the damage fails and removes nothing
expect_status 1 "nothing removed" "$DCRFS_CTL" --store "$STORE" gc --keep-last 1 --grace 0
[ "$(ctl log --json | pyin 'print(len(d))')" = 3 ] || fail "a failed gc removed versions"
awscli s3 cp --quiet "$T/pack.good" "s3://$key"

# compact: 3 is built on 2 (3 = 0b11: its skip base is 2), 2 on 1: the
# shape is already the skip-delta one, so --max-depth 2 makes it rewrite
ctl compact --max-depth 2 --json >"$T/c.json"
pyin 'assert d["generation"] == 1 and d["rewritten"] == 1 and d["depth_after"] == 2, d' <"$T/c.json" ||
	fail "compact over S3: $(cat "$T/c.json")"
awscli s3 ls "s3://${STORE#s3://}/layouts/" | grep -q 0000000001 || fail "no layouts/0000000001 on S3"
ctl log --json | pyin 'k = {e["version"]: (e["kind"], e["parent"], e["base"]) for e in d}
assert k[3] == ("compacted", 2, 1), k' || fail "log after compact over S3"
ctl verify --deep -q || fail "verify --deep after compact over S3"

# gc: keep the last version; it is rebased into an anchor, 1 and 2 go
ctl gc --keep-last 1 --grace 0 -q >"$T/gc.out"
grep -q "rewrote version 3: built on version 1, now on nothing" "$T/gc.out" || fail "gc over S3: $(cat "$T/gc.out")"
[ "$(ctl log --json | pyin 'print([(e["version"], e["kind"]) for e in d])')" = "[(3, 'anchor')]" ] ||
	fail "gc --keep-last 1 over S3 left $(ctl log)"
ctl verify --deep -q || fail "verify --deep after gc over S3"
# what the first generation named is gone; the second names 3's anchor
[ "$(awscli s3 ls "s3://${STORE#s3://}/manifests/" | wc -l)" = 1 ] ||
	fail "gc --grace 0 left old manifests/ on S3: $(awscli s3 ls "s3://${STORE#s3://}/manifests/")"
[ "$(awscli s3 ls "s3://${STORE#s3://}/layouts/" | wc -l)" = 1 ] ||
	fail "gc --grace 0 left old layouts/ on S3"
# init in a bucket that does not exist: said so, not "create one with --init"
rc=0
"$DCRFS_CTL" --store "s3://dcrfs-no-such-bucket-$$-$(date +%s)/p" init >"$T/nobucket" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "init in a missing bucket exited $rc: $(cat "$T/nobucket")"
grep -q "the bucket does not exist" "$T/nobucket" ||
	fail "init in a missing bucket does not say the bucket is missing: $(cat "$T/nobucket")"
grep -q "create one with" "$T/nobucket" &&
	fail "init in a missing bucket tells the user to do what they did: $(cat "$T/nobucket")"
log "ok"
