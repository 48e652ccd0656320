#!/usr/bin/env bash
# sign_commit.sh - the writer's side of signed versions (issue 20):
# dcrfs-ctl keygen (a 0600 private key and KEYFILE.pub, the key id as
# openssl computes it from the public key, never overwriting); versions
# signed through dcrfs-commit --sign-key, DCRFS_SIGN_KEY and Python
# Commit(sign_key=), with --meta / meta= metadata; log and show --json
# show each version's signer and metadata; verify without --trust reports
# unsigned versions and passes, verify --trust passes with the right key
# (and with two keys: rotation) and fails naming the version for another
# key or an unsigned version; a manifest replayed into another store, a
# forged signature and a manifest copied to another number fail verify;
# signed tags (dcrfs-commit -t with a key, dcrfs-ctl tag --sign-key) carry
# the signer's public key; a corrupt or missing key, a private key
# group or others may read, a store without an id
# and bad metadata fail with a clear message before anything is uploaded.
. "$(dirname "$0")/lib.sh"
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS_CTL"
need_python_libdcr
command -v openssl >/dev/null 2>&1 || skip "openssl(1) is missing"
ctl() { t "$DCRFS_CTL" --store "$STORE" "$@"; }
npacks() { find "$1/packs" -type f 2>/dev/null | wc -l; }
nversions() { find "$1/versions" -type f 2>/dev/null | wc -l; }
# the key id of a PEM public key, computed here: the first 8 bytes of
# the SHA-256 of the raw 32-byte Ed25519 key (sign.h)
keyid() { openssl pkey -pubin -in "$1" -outform DER | tail -c 32 | sha256sum | cut -c1-16; }
# the raw public key of a PEM public key, in hex
pubhex() { openssl pkey -pubin -in "$1" -outform DER | tail -c 32 | od -An -tx1 | tr -d ' \n'; }

# --- keygen
t "$DCRFS_CTL" keygen "$T/k1" >"$T/kg.out" || fail "keygen failed"
[ "$(stat -c %a "$T/k1")" = 600 ] || fail "the private key is mode $(stat -c %a "$T/k1"), not 600"
[ -s "$T/k1.pub" ] || fail "keygen wrote no $T/k1.pub"
K1=$(keyid "$T/k1.pub")
grep -q "key id $K1" "$T/kg.out" || fail "keygen printed another key id than $K1: $(cat "$T/kg.out")"
grep -q "$T/k1.pub" "$T/kg.out" || fail "keygen does not name the public key: $(cat "$T/kg.out")"
sum=$(sha256sum "$T/k1" "$T/k1.pub")
expect_status 1 "k1.*exists" "$DCRFS_CTL" keygen "$T/k1"
[ "$(sha256sum "$T/k1" "$T/k1.pub")" = "$sum" ] || fail "keygen overwrote an existing key"
t "$DCRFS_CTL" keygen --json "$T/k2" >"$T/kg.json"
K2=$(keyid "$T/k2.pub")
py "$T/kg.json" '
assert d == {"key_id": sys.argv[2], "private_key": sys.argv[3],
             "public_key": sys.argv[3] + ".pub"}, d' "$K2" "$T/k2" ||
	fail "keygen --json: $(cat "$T/kg.json")"
[ "$K1" != "$K2" ] || fail "two keys with one id"

# --- versions: signed by the CLI, the environment, unsigned, Python
mkdir "$T/tree"
rand_file "$T/tree/w.bin" 300000 a
commit "$STORE" "$T/tree" --sign-key "$T/k1" --meta step=1 --meta lr=3e-4 --json >"$T/c1.json"
py "$T/c1.json" 'assert d["version"] == 1 and d["signer"] == sys.argv[2], d' "$K1" ||
	fail "commit --json of a signed version: $(cat "$T/c1.json")"
rand_file "$T/tree/w.bin" 300000 b
DCRFS_SIGN_KEY=$T/k1 commit "$STORE" "$T/tree" -t best --json >"$T/c2.json"
py "$T/c2.json" 'assert d["version"] == 2 and d["signer"] == sys.argv[2], d' "$K1" ||
	fail "DCRFS_SIGN_KEY did not sign: $(cat "$T/c2.json")"
rand_file "$T/tree/w.bin" 300000 c
commit "$STORE" "$T/tree" --json >"$T/c3.json" 2>"$T/c3.err"
py "$T/c3.json" 'assert d["version"] == 3 and d["signer"] == "unsigned", d' ||
	fail "an unsigned commit: $(cat "$T/c3.json")"
# on a signed parent it is never silent: trust= mounts would stay on v2
grep -q "warning: .*version 2 is signed (key $K1) and this commit is not: mounts with trust= will not show it" \
	"$T/c3.err" || fail "an unsigned commit on a signed version went silently: $(cat "$T/c3.err")"
"$PY" - "$STORE" "$T/k1" "$T/cc-py" "$K1" <<'PY' || fail "Python signed commit"
import sys, numpy as np, dcrfs
store, key, cache, kid = sys.argv[1:5]
# a key that is not one is refused before any work
open(cache + ".bad", "w").write("not a key\n")
try:
    dcrfs.Commit(store, sign_key=cache + ".bad", cache_dir=cache)
    raise SystemExit("a bad key was taken")
except dcrfs.DcrError as e:
    assert ".bad" in str(e), e
try:
    dcrfs.Commit(store, meta={"bad key": "x"}, cache_dir=cache)
    raise SystemExit("a bad metadata key was taken")
except dcrfs.DcrError as e:
    assert "bad key" in str(e), e
with dcrfs.Commit(store, sign_key=key, meta={"step": 4, "note": "é"}, cache_dir=cache) as c:
    c.add_safetensors("model.safetensors", {"w": np.arange(1000, dtype=np.float32)})
    v = c.publish()
    assert v == 4 and c.signer == kid, (v, c.signer)
with dcrfs.Commit(store, cache_dir=cache) as c:
    c.add_bytes("x", b"y")
    assert c.publish() == 5 and c.signer is None, c.signer
PY

# --- log and show: signer and metadata
ctl log --json >"$T/log.json"
py "$T/log.json" '
k1 = sys.argv[2]
got = {e["version"]: (e["signer"], e["meta"]) for e in d}
assert got == {5: ("unsigned", {}), 4: (k1, {"note": "é", "step": "4"}),
               3: ("unsigned", {}), 2: (k1, {}),
               1: (k1, {"lr": "3e-4", "step": "1"})}, got
' "$K1" || fail "log --json signers/metadata: $(cat "$T/log.json")"
ctl show 1 --json | py - 'assert d["signer"] == sys.argv[2] and d["meta"] == {"lr": "3e-4", "step": "1"} and d["format"] == 5, d' "$K1" ||
	fail "show --json of version 1"
ctl show 3 --json | py - 'assert d["signer"] == "unsigned" and d["meta"] == {} and d["format"] == 4, d' ||
	fail "show --json of an unsigned version"
ctl log | grep -qE "^ +1 +0 .* $K1 " || fail "log does not show the signer: $(ctl log)"
ctl show 1 | grep -qx "meta: step=1" || fail "show does not list the metadata: $(ctl show 1)"

# --- verify: without --trust unsigned is reported, not a failure
expect_status 0 "unsigned: version 3" "$DCRFS_CTL" --store "$STORE" verify
ctl verify --json >"$T/v.json"
py "$T/v.json" '
st = {g["version"]: (g["signer"], g["status"]) for g in d["signatures"]}
k1 = sys.argv[2]
assert d["ok"] and st == {1: (k1, "valid"), 2: (k1, "valid"), 3: ("unsigned", "unsigned"),
                          4: (k1, "valid"), 5: ("unsigned", "unsigned")}, d
' "$K1" || fail "verify --json signatures: $(cat "$T/v.json")"
# with --trust: the right key passes, another key or no signature fails
expect_status 0 "3 versions \(3 signed, against the trust file\).*ok" \
	"$DCRFS_CTL" --store "$STORE" verify --trust "$T/k1.pub" 1 2 4
# (intact versions the trust file does not cover: untrusted, not damaged)
expect_status 1 "untrusted: versions/0000000003: unsigned" \
	"$DCRFS_CTL" --store "$STORE" verify --trust "$T/k1.pub"
grep -q "checked: UNTRUSTED" "$T/out" || fail "verify --trust calls unsigned versions: $(cat "$T/out")"
expect_status 1 "untrusted: versions/0000000001: signed by key $K1, which the trust file does not hold" \
	"$DCRFS_CTL" --store "$STORE" verify --trust "$T/k2.pub" 1
grep -q "affects version 1 (all of it)" "$T/out" || fail "verify does not name version 1: $(cat "$T/out")"
grep -qE "damaged|DAMAGED" "$T/out" && fail "verify --trust OTHER.pub calls intact versions damaged: $(cat "$T/out")"
{ echo "# rotation: the new key and the old"; cat "$T/k2.pub"; echo; cat "$T/k1.pub"; } >"$T/both.pub"
expect_status 0 "ok" "$DCRFS_CTL" --store "$STORE" verify --trust "$T/both.pub" 1 2 4
# a private key file is no trust file: say to give the .pub
expect_status 1 "key 1 is a private key: trust takes the public one \(KEYFILE.pub" \
	"$DCRFS_CTL" --store "$STORE" verify --trust "$T/k1" 1
expect_status 1 "its directory does not exist: create it first" \
	"$DCRFS_CTL" keygen "$T/no-such-dir/key"
expect_status 2 "only verify, export and cat take --trust" "$DCRFS_CTL" --store "$STORE" log --trust "$T/k1.pub"

# --- forgeries verify catches
# a signature damaged in place (in a copy of the store)
cp -a "$STORE" "$T/forged"
obj=$T/forged/versions/0000000004
size=$(stat -c %s "$obj")
# the block ends: signature (64), parent check (32), id length (1), id (32)
off=$((size - 32 - 1 - 32 - 64 + 5))
printf '\x55' | dd of="$obj" bs=1 seek=$off conv=notrunc status=none
expect_status 1 "versions/0000000004: its signature \(key $K1\) does not verify" \
	"$DCRFS_CTL" --store "$T/forged" verify 4
# version 1's manifest copied to number 6: it says it is version 1
cp "$STORE/versions/0000000001" "$T/forged/versions/0000000006"
expect_status 1 "versions/0000000006" "$DCRFS_CTL" --store "$T/forged" verify 6
# replayed into another store: made for another store
t "$DCRFS_CTL" --store "$T/other" init >/dev/null 2>&1
mkdir -p "$T/other/versions"
cp -a "$STORE/packs" "$T/other/"
cp "$STORE/versions/0000000001" "$T/other/versions/"
expect_status 1 "versions/0000000001: signed by key $K1 for another store" \
	"$DCRFS_CTL" --store "$T/other" verify --trust "$T/k1.pub"
t "$DCRFS_CTL" --store "$T/other" log --json | py - 'assert d[0]["signer"] == "invalid", d' ||
	fail "a replayed version's signer is not shown as invalid"

# --- signed tags
tagline() { sed -n 2p "$STORE/tags/$1"; }
[ "$(head -n1 "$STORE/tags/best")" = 2 ] || fail "tags/best: $(cat "$STORE/tags/best")"
tagline best | grep -q "$(pubhex "$T/k1.pub")" || fail "dcrfs-commit -t with a key wrote an unsigned tag: $(cat "$STORE/tags/best")"
ctl tag --sign-key "$T/k2" --json rc 4 >"$T/tag.json"
py "$T/tag.json" 'assert d == {"tag": "rc", "version": 4, "signer": sys.argv[2]}, d' "$K2" ||
	fail "tag --sign-key --json: $(cat "$T/tag.json")"
tagline rc | grep -q "$(pubhex "$T/k2.pub")" || fail "tags/rc is not signed by k2: $(cat "$STORE/tags/rc")"
[ "$(wc -l <"$STORE/tags/rc")" = 2 ] || fail "tags/rc is not two lines"
ctl tag plain 3
[ "$(cat "$STORE/tags/plain")" = 3 ] || fail "an unsigned tag is not the number alone"
ctl log --json | py - '
tags = {e["version"]: e["tags"] for e in d}
assert tags[2] == ["best"] and tags[4] == ["rc"] and tags[3] == ["plain"], tags' ||
	fail "signed tags are not listed"
ctl show best --json | py - 'assert d["version"] == 2' || fail "show of a signed tag"
ctl log --json | py - '
ts = {e["version"]: e["tag_signers"] for e in d}
assert ts[2] == {"best": sys.argv[2]} and ts[4] == {"rc": sys.argv[3]}, ts
assert ts[3] == {"plain": "unsigned"} and ts[1] == {}, ts' "$K1" "$K2" ||
	fail "tag signers: $(ctl log --json)"
ctl show 4 | grep -qx "tag rc: $K2" || fail "show does not name the tag's signer: $(ctl show 4)"
# a signed tag moved to another version by hand: its signature is invalid
cp -a "$STORE" "$T/movedtag"
sed -i 1s/.*/3/ "$T/movedtag/tags/rc"
t "$DCRFS_CTL" --store "$T/movedtag" show 3 --json | py - 'assert d["tag_signers"]["rc"] == "invalid", d' ||
	fail "a moved signed tag is not invalid"
"$PY" - "$STORE" "$T/k1" "$K1" <<'PY' || fail "Python tag(sign_key=)"
import sys, dcrfs
store, key, kid = sys.argv[1:4]
assert dcrfs.tag(store, "py", 1, sign_key=key) == 1
assert len(open(store + "/tags/py").read().splitlines()) == 2
PY
expect_status 1 "bad" "$DCRFS_CTL" --store "$STORE" tag --sign-key "$T/cc-py.bad" bad 1
[ ! -e "$STORE/tags/bad" ] || fail "a tag was written with a bad key"
expect_status 2 "only tag takes --sign-key" "$DCRFS_CTL" --store "$STORE" log --sign-key "$T/k1"

# --- a bad key or metadata, a store without an id: nothing uploaded
rand_file "$T/tree/w.bin" 300000 d
p0=$(npacks "$STORE") v0=$(nversions "$STORE")
head -c 200 /dev/urandom >"$T/junk.key"
expect_status 1 "junk.key" "$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/commit-cache" --sign-key "$T/junk.key" "$T/tree"
DCRFS_SIGN_KEY=$T/missing.key expect_status 1 "missing.key" "$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/commit-cache" "$T/tree"
expect_status 1 "junk.key" "$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/commit-cache" --sign-key "$T/junk.key" --meta a=b "$T/tree"
expect_status 1 "bad key" "$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/commit-cache" --meta "bad key=1" "$T/tree"
expect_status 2 "not KEY=VALUE" "$DCRFS_COMMIT" --store "$STORE" --meta novalue "$T/tree"
# a private key others may read is refused (as ssh refuses one), by the
# CLI, the environment, dcrfs-ctl tag and Python
cp "$T/k1" "$T/k644" && chmod 644 "$T/k644"
cp "$T/k1" "$T/k640" && chmod 640 "$T/k640"
expect_status 1 "k644: the private key is accessible by group or others \(mode 0644\).*chmod 600" \
	"$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/commit-cache" --sign-key "$T/k644" "$T/tree"
DCRFS_SIGN_KEY=$T/k640 expect_status 1 "k640: .*mode 0640" \
	"$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/commit-cache" "$T/tree"
expect_status 1 "k644: the private key is accessible by group or others" \
	"$DCRFS_CTL" --store "$STORE" tag --sign-key "$T/k644" open644 1
[ ! -e "$STORE/tags/open644" ] || fail "a tag was written with a mode 644 key"
"$PY" - "$STORE" "$T/k644" "$T/tree" >"$T/py644.out" 2>&1 <<'PY' || fail "Python took a mode 644 key: $(cat "$T/py644.out")"
import sys, dcrfs
store, key, tree = sys.argv[1:4]
for f in (lambda: dcrfs.tag(store, "py644", 1, sign_key=key),
          lambda: dcrfs.Commit(store, sign_key=key).__enter__()):
    try:
        f()
    except OSError as e:
        assert "accessible by group or others" in str(e) or e.errno == 13, e
    else:
        raise SystemExit("accepted")
PY
[ "$(npacks "$STORE")" = "$p0" ] && [ "$(nversions "$STORE")" = "$v0" ] ||
	fail "a refused commit uploaded something ($p0 -> $(npacks "$STORE") packs)"
L=$T/legacy
commit "$L" "$T/tree" >/dev/null
rm "$L/dcrfs-store"
rand_file "$T/tree/w.bin" 300000 e
p0=$(npacks "$L")
expect_status 1 "before store markers" "$DCRFS_COMMIT" --store "$L" --cache-dir "$T/commit-cache" --sign-key "$T/k1" "$T/tree"
[ "$(npacks "$L")" = "$p0" ] && [ "$(nversions "$L")" = 1 ] || fail "a legacy store got packs from a signed commit"
log "ok: keygen, signed commits (CLI, env, Python), metadata, verify --trust, forgeries, signed tags, refusals"
