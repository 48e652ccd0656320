#!/usr/bin/env bash
# ctl.sh - dcrfs-ctl on a local store: log --json lists every version with
# its fields, show gives the sources' sizes and SHA-256, diff counts what
# changed (checked against the files themselves), tag/untag round trip,
# verify passes a good store and names a damaged or missing pack (exit 1),
# gc keeps what the chains of kept versions need and collects the rest,
# init creates a store once and refuses an existing one, gc collects
# orphan packs and temporaries of killed commits once past the grace
# period and not before, usage errors exit 2. No mount needed.
. "$(dirname "$0")/lib.sh"
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS_SYNTH" "$DCRFS_CTL"
command -v python3 >/dev/null 2>&1 || skip "python3 is missing"

ctl() { t "$DCRFS_CTL" --store "$STORE" "$@"; }

# Three versions: an anchor, a step, a step that also adds a file.
t "$DCRFS_SYNTH" init --size 3M --seed 1 --quiet "$T/s1"
t "$DCRFS_SYNTH" step --mode uniform --rate 0.02 --seed 2 --in "$T/s1" --out "$T/s2" --quiet
t "$DCRFS_SYNTH" step --mode uniform --rate 0.02 --seed 3 --in "$T/s2" --out "$T/s3" --quiet
rand_file "$T/s3/extra.bin" 100000 x
for i in 1 2 3; do
	rm -f "$T"/s$i/.dcrfs-synth.state
	[ "$(commit "$STORE" "$T/s$i")" = "$i" ] || fail "commit of s$i is not version $i"
done

# --- log
ctl log >"$T/log.txt"
grep -qE '^ +3 +2 ' "$T/log.txt" || fail "log: no line for version 3: $(cat "$T/log.txt")"
ctl log --json >"$T/log.json"
py "$T/log.json" '
T = sys.argv[2]
assert [e["version"] for e in d] == [3, 2, 1], d
assert [e["parent"] for e in d] == [2, 1, 0], d
assert [e["kind"] for e in d] == ["delta", "delta", "anchor"], d
for e in d:
    for k in ("version", "parent", "time", "bytes", "stored_bytes", "kind", "tags"):
        assert k in e, (k, e)
    src = os.path.join(T, "s%d" % e["version"])
    want = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(src) for f in fs)
    assert e["bytes"] == want, (e, want)
    assert e["tags"] == [], e
    assert e["time"].endswith("Z"), e
# a step stores far less than the anchor
assert 0 < d[1]["stored_bytes"] < d[2]["stored_bytes"] / 4, d
' "$T" || fail "log --json is wrong: $(cat "$T/log.json")"
# DCRFS_STORE names the store too
DCRFS_STORE=$STORE t "$DCRFS_CTL" log --json | py /dev/stdin 'assert len(d) == 3' ||
	fail "DCRFS_STORE is not used"

# --- show: sizes and SHA-256 of the source files
ctl show 3 --json >"$T/show.json"
fmt=$(py "$T/show.json" 'print(d["format"])')
cs=$(py "$T/show.json" 'print(d["chunk_size"])')
for f in "$T"/s3/*; do
	printf '%s %s\n' "$(file_digest "$f" "$fmt" "$cs")" "$(basename "$f")"
done >"$T/s3.sha"
py "$T/show.json" '
want = dict(reversed(l.split()) for l in open(sys.argv[2]))
files = {f["path"]: f for f in d["files"]}
assert set(files) == set(want), (sorted(files), sorted(want))
kind = "sha256" if d["format"] < 3 else "sha256-of-chunks"
for p, h in want.items():
    assert files[p]["digest"] == h and files[p]["digest_kind"] == kind, p
    assert files[p].get("sha256", h) == h, p
    assert files[p]["size"] == os.path.getsize(os.path.join(sys.argv[3], p)), p
assert d["version"] == 3 and d["parent"] == 2 and d["format"] >= 2
' "$T/s3.sha" "$T/s3" || fail "show --json disagrees with the files"
ctl show latest | grep -q extra.bin || fail "show latest does not list extra.bin"

# --- diff: exact changed bytes and chunks against the files themselves
ctl diff 1 2 --json >"$T/diff.json"
py "$T/diff.json" '
cs = 1 << 20
a = open(sys.argv[2] + "/model.safetensors", "rb").read()
b = open(sys.argv[3] + "/model.safetensors", "rb").read()
nd = sum(x != y for x, y in zip(a, b))
nc = sum(a[i:i + cs] != b[i:i + cs] for i in range(0, len(b), cs))
f = {f["path"]: f for f in d["files"]}
m = f["model.safetensors"]
assert m["status"] == "changed" and m["changed_bytes"] == nd, (m, nd)
assert m["changed_chunks"] == nc, (m, nc)
assert 0 < m["stored_bytes"] < len(b) / 4, m
assert f["config.json"]["status"] == "unchanged"
assert d["total"]["changed_bytes"] == nd
# every changed byte is inside a tensor (the header did not change)
assert sum(t["changed_bytes"] for t in m["tensors"]) == nd, m
assert any(t["changed_bytes"] == 0 for t in m["tensors"]) or nd > 0
' "$T/s1" "$T/s2" || fail "diff --json is wrong"
ctl diff 2 3 --json | py /dev/stdin '
f = {f["path"]: f for f in d["files"]}
assert f["extra.bin"]["status"] == "added" and f["extra.bin"]["changed_bytes"] == 100000, f
' || fail "diff 2 3 does not show extra.bin as added"
ctl diff 1 2 | grep -qE '^changed +model.safetensors' || fail "diff text output has no changed model"

# --- tag / untag
ctl tag eval 2
ctl log --json | py /dev/stdin 'assert [e["tags"] for e in d] == [[], ["eval"], []], d' ||
	fail "log does not show tag eval on version 2"
[ "$(ctl show eval --json | py /dev/stdin 'print(d["version"])')" = 2 ] ||
	fail "show eval is not version 2"
ctl tag eval latest
[ "$(ctl show eval --json | py /dev/stdin 'print(d["version"])')" = 3 ] ||
	fail "tag eval latest did not move the tag"
ctl untag eval
ctl log --json | py /dev/stdin 'assert all(e["tags"] == [] for e in d), d' ||
	fail "untag left the tag"
expect_status 1 "no tag" "$DCRFS_CTL" --store "$STORE" untag eval
expect_status 1 "does not exist" "$DCRFS_CTL" --store "$STORE" tag eval 99
expect_status 1 "does not exist" "$DCRFS_CTL" --store "$STORE" show 99

# --- verify: a good store
ctl verify -q
ctl verify --deep -q
ctl verify --json -q 2 | py /dev/stdin 'assert d["ok"] and d["versions"] == [2] and d["damage"] == []' ||
	fail "verify --json 2 is wrong"

# one flipped byte in version 2's pack: named, with the versions it breaks
cp -a "$STORE" "$T/bad"
pack=$(ctl show 2 --json | py /dev/stdin 'print(d["packs"][0])')
python3 -c 'import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0x40
open(p, "wb").write(b)' "$T/bad/packs/$pack"
expect_status 1 "damaged: packs/$pack" "$DCRFS_CTL" --store "$T/bad" verify
grep -q "affects version 2: model.safetensors" "$T/out" || fail "verify does not name version 2: $(cat "$T/out")"
grep -q "affects version 3: model.safetensors" "$T/out" || fail "verify does not name version 3, built on 2: $(cat "$T/out")"
expect_status 1 "packs/$pack" "$DCRFS_CTL" --store "$T/bad" verify 3
t "$DCRFS_CTL" --store "$T/bad" verify -q 1 || fail "verify 1 fails, but version 1 needs nothing of version 2's pack"
rc=0
t "$DCRFS_CTL" --store "$T/bad" verify --json -q >"$T/v.json" || rc=$?
[ "$rc" = 1 ] || fail "verify --json of a damaged store exited $rc"
py "$T/v.json" '
assert not d["ok"]
o = d["damage"][0]
assert o["object"] == "packs/" + sys.argv[2], o
assert {a["version"] for a in o["affects"]} == {2, 3}, o
' "$pack" || fail "verify --json: $(cat "$T/v.json")"

# the anchor's pack missing: every version is damaged
rm -rf "$T/bad" && cp -a "$STORE" "$T/bad"
anchor=$(ctl show 1 --json | py /dev/stdin 'print(d["packs"][0])')
rm "$T/bad/packs/$anchor"
expect_status 1 "packs/$anchor: missing" "$DCRFS_CTL" --store "$T/bad" verify 3
# a corrupt manifest
rm -rf "$T/bad" && cp -a "$STORE" "$T/bad"
printf 'garbage' >"$T/bad/versions/0000000002"
expect_status 1 "versions/0000000002" "$DCRFS_CTL" --store "$T/bad" verify 3
expect_status 1 "" "$DCRFS_CTL" --store "$T/bad" log

# --- gc: 1 anchor, 2 3 deltas, 4 anchor, 5 delta; tag eval on 2; an orphan
G=$T/gcstore
cp -a "$STORE" "$G"
gc() { t "$DCRFS_CTL" --store "$G" "$@"; }
gc tag eval 2
[ "$(commit "$G" "$T/s3" --full)" = 4 ] || fail "the anchor is not version 4"
t "$DCRFS_SYNTH" step --mode uniform --rate 0.02 --seed 4 --in "$T/s3" --out "$T/s4" --quiet
rm -f "$T/s4/.dcrfs-synth.state"
[ "$(commit "$G" "$T/s4")" = 5 ] || fail "s4 is not version 5"
printf 'orphan' >"$G/packs/$(printf '%064d' 7)"
versions() { gc log --json | py /dev/stdin 'print(" ".join(str(e["version"]) for e in d))'; }
packs_of() { for v in "$@"; do gc show "$v" --json | py /dev/stdin 'print("\n".join(d["packs"]))'; done | sort; }

gc gc --keep-last 2 --dry-run >"$T/gc.out"
grep -q "would remove version 3" "$T/gc.out" || fail "gc --dry-run: $(cat "$T/gc.out")"
grep -q "would remove version 1" "$T/gc.out" || fail "gc --dry-run keeps version 1: $(cat "$T/gc.out")"
# the tagged version 2 is built on 1, which goes: it is rebased (made an
# anchor); 4 is an anchor and 5 is built on it: both stay as they are
grep -q "would rewrite version 2: built on version 1, now on nothing" "$T/gc.out" ||
	fail "gc does not say it rebases version 2: $(cat "$T/gc.out")"
! grep -q "rewrite version [45]" "$T/gc.out" || fail "gc rewrites versions it need not: $(cat "$T/gc.out")"
[ "$(versions)" = "5 4 3 2 1" ] || fail "gc --dry-run removed something: $(versions)"
[ ! -e "$G/layouts" ] || fail "gc --dry-run published a layout"

digest_of() { gc show "$1" --json | py /dev/stdin 'print(" ".join(f["digest"] for f in d["files"] if f["type"] == "file"))'; }
d2=$(digest_of 2)
old2=$(packs_of 2)
want=$( (packs_of 1 4 5; echo "$old2") | sort)
gc gc --keep-last 2 -q >"$T/gc.out"
[ "$(versions)" = "5 4 2" ] || fail "gc --keep-last 2 left $(versions), expected 5 4 2"
[ -e "$G/packs/$(printf '%064d' 7)" ] || fail "gc deleted an orphan pack within the grace period"
[ "$(gc log --json | py /dev/stdin 'print([e["kind"] for e in d if e["version"] == 2][0])')" = anchor ] ||
	fail "version 2 is not an anchor after gc: $(gc log)"
[ "$(digest_of 2)" = "$d2" ] || fail "version 2's files changed"
# the rebased version's frames are new; its old ones, and version 1's
# that they build on, stay for the grace period (a mount may still read
# the old layout)
[ "$(cd "$G/packs" && ls | grep -v '^0000' | sort | comm -23 - <(packs_of 2))" = "$want" ] ||
	fail "gc left other packs than versions 2 (old and new), 4 and 5 need"
gc verify --deep -q || fail "a kept version is broken after gc"
gc show 5 --json >"$T/show5.json"
[ "$(py "$T/show5.json" 'print([f["digest"] for f in d["files"] if f["path"] == "model.safetensors"][0])')" = \
	"$(file_digest "$T/s4/model.safetensors" "$(py "$T/show5.json" 'print(d["format"])')" \
		"$(py "$T/show5.json" 'print(d["chunk_size"])')")" ] || fail "version 5 changed"

want=$(packs_of 4 5)
gc gc --keep-last 2 --no-keep-tagged --grace 0 -q
[ "$(versions)" = "5 4" ] || fail "gc --no-keep-tagged left $(versions)"
[ "$(cd "$G/packs" && ls | sort)" = "$want" ] || fail "gc --grace 0 left packs no version needs"
[ -z "$(ls "$G/tags")" ] || fail "the tag of a removed version is still there"
[ -z "$(ls "$G/manifests")" ] || fail "gc --grace 0 left manifests no layout names: $(ls "$G/manifests")"
[ "$(ls "$G/layouts" | wc -l)" = 1 ] || fail "gc --grace 0 left old layouts: $(ls "$G/layouts")"
gc verify --deep -q || fail "version 4 or 5 is broken after gc"
# only the last version, built on 4: it becomes an anchor, 4 goes
d5=$(digest_of 5)
gc gc --keep-last 1 --grace 0 -q
[ "$(versions)" = "5" ] || fail "gc --keep-last 1 left $(versions)"
[ "$(digest_of 5)" = "$d5" ] || fail "version 5's files changed"
gc verify --deep -q || fail "version 5 is broken after gc --keep-last 1"

# --- init: a new store, once
t "$DCRFS_CTL" --store "$T/new" init --json >"$T/init.json"
py "$T/init.json" '
assert d["store"] == "file://" + sys.argv[2], d
assert len(d["id"]) == 32 and d["format"] == 1, d' "$T/new"
grep -q "^id $(py "$T/init.json" 'print(d["id"])')\$" "$T/new/dcrfs-store" ||
	fail "init: the marker does not hold the id it printed"
expect_status 1 "store already" "$DCRFS_CTL" --store "$T/new" init
expect_status 1 "store already" "$DCRFS_CTL" --store "$STORE" init
[ "$(t "$DCRFS_COMMIT" --store "$T/new" --cache-dir "$T/cc-new" --quiet "$T/s1")" = 1 ] ||
	fail "no commit without --init into a store made by dcrfs-ctl init"
expect_status 1 "not a dcrfs store" "$DCRFS_COMMIT" --store "$T/new/versions" --quiet "$T/s1"

# --- gc of what killed commits leave behind, past the grace period only
O=$T/orphans
# bigger than one pack (64 MiB): the first pack lands well before the
# manifest, and the commit is killed as soon as it does
t "$DCRFS_SYNTH" init --size 160M --seed 5 --quiet "$T/big"
rm -f "$T/big/.dcrfs-synth.state"
npacks() { ls "$O/packs" | grep -c . || true; }
tries=0
while :; do
	rm -rf "$O" "$T/cc-o"
	[ "$(commit "$O" "$T/s1")" = 1 ] || fail "s1 is not version 1 of $O"
	base=$(npacks)
	start_bg "$DCRFS_COMMIT" --store "$O" --cache-dir "$T/cc-o" --quiet --jobs 1 "$T/big"
	for ((i = 0; i < 6000 && $(npacks) == base; i++)); do
		kill -0 "$BG_PID" 2>/dev/null || break
		sleep 0.01
	done
	kill -KILL "$BG_PID" 2>/dev/null || true
	wait "$BG_PID" 2>/dev/null || true
	[ -e "$O/versions/0000000002" ] || [ "$(npacks)" -le "$base" ] || break
	tries=$((tries + 1))
	[ "$tries" -lt 5 ] || skip "no kill landed between the upload of a pack and the publication"
done
mkdir -p "$O/.tmp"
printf 'half a pack' >"$O/.tmp/put.stale1" # what a kill inside a put leaves
n_orphans=$(($(npacks) - base))
log "killed commits left $n_orphans orphan packs and $(ls "$O/.tmp" | grep -c .) temporaries"
t "$DCRFS_CTL" --store "$O" gc --keep-last 5 >"$T/gc.out" 2>&1
grep -q "$n_orphans packs .* named by no manifest .* were kept" "$T/gc.out" ||
	fail "gc does not report the young orphans it keeps: $(cat "$T/gc.out")"
[ "$(npacks)" -eq $((n_orphans + base)) ] || fail "gc deleted young orphans (default grace)"
t "$DCRFS_CTL" --store "$O" gc --keep-last 5 --grace 1h -q
[ "$(npacks)" -eq $((n_orphans + base)) ] || fail "gc deleted orphans younger than --grace 1h"
[ -e "$O/.tmp/put.stale1" ] || fail "gc deleted a young temporary"
# two hours old, in a store made three hours ago (gc believes no time
# older than the store)
touch -d '2 hours ago' "$O"/packs/* "$O"/.tmp/*
sed -i "s/^created .*/created $(($(date +%s) - 3 * 3600))/" "$O/dcrfs-store"
t "$DCRFS_CTL" --store "$O" gc --keep-last 5 --grace 1h --dry-run >"$T/gc.out" 2>&1
[ "$(npacks)" -eq $((n_orphans + base)) ] || fail "gc --dry-run deleted orphans"
grep -q "would abort incomplete upload .tmp/put.stale1" "$T/gc.out" ||
	fail "gc --dry-run does not name the stale temporary: $(cat "$T/gc.out")"
t "$DCRFS_CTL" --store "$O" gc --keep-last 5 --grace 1h >"$T/gc.out" 2>&1
[ "$(npacks)" -eq "$base" ] || fail "gc left orphans older than the grace: $(cat "$T/gc.out")"
[ -z "$(ls "$O/.tmp")" ] || fail "gc left stale temporaries: $(ls "$O/.tmp")"
grep -q "named by no manifest" "$T/gc.out" || fail "gc does not say why it deleted: $(cat "$T/gc.out")"
t "$DCRFS_CTL" --store "$O" verify --deep -q || fail "version 1 broke in the collection of orphans"
[ "$(commit "$O" "$T/big")" = 2 ] || fail "no commit after the collection"

# --- usage errors: status 2
U="Usage|usage|--help"
expect_status 0 "Usage" "$DCRFS_CTL" --help
expect_status 0 "[0-9]+\.[0-9]+" "$DCRFS_CTL" --version
expect_status 2 "$U" "$DCRFS_CTL" --store "$STORE"
expect_status 2 "unknown command" "$DCRFS_CTL" --store "$STORE" frobnicate
expect_status 2 "$U" "$DCRFS_CTL" --store "$STORE" --bogus log
expect_status 2 "arguments" "$DCRFS_CTL" --store "$STORE" show
expect_status 2 "usage: dcrfs-ctl \\[OPTIONS\\] diff A B" "$DCRFS_CTL" --store "$STORE" diff 1
# the store given where a command's argument goes: say where it belongs
expect_status 2 "the store is an option: dcrfs-ctl --store $STORE log" "$DCRFS_CTL" log "$STORE"
expect_status 2 "arguments" "$DCRFS_CTL" --store "$STORE" log 1
expect_status 2 "deep" "$DCRFS_CTL" --store "$STORE" log --deep
expect_status 2 "tag name" "$DCRFS_CTL" --store "$STORE" tag ../x 1
expect_status 2 "keep-last" "$DCRFS_CTL" --store "$STORE" gc
expect_status 2 "keep-last" "$DCRFS_CTL" --store "$STORE" gc --keep-last 0
expect_status 2 "duration" "$DCRFS_CTL" --store "$STORE" gc --keep-last 1 --grace soon
expect_status 2 "only gc" "$DCRFS_CTL" --store "$STORE" log --keep-last 1
expect_status 2 "no store" env -u DCRFS_STORE "$DCRFS_CTL" log
expect_status 1 "$T/nothing" "$DCRFS_CTL" --store "$T/nothing" log
[ ! -e "$T/nothing" ] || fail "dcrfs-ctl created a store"
# a directory that is not a store is said so, not listed as an empty store
mkdir -p "$T/notastore"
rc=0
t "$DCRFS_CTL" --store "$T/notastore" log >"$T/nas.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "not a dcrfs store" "$T/nas.out" ||
	fail "log of a non-store: status $rc: $(cat "$T/nas.out")"
[ -z "$(ls -A "$T/notastore")" ] || fail "dcrfs-ctl wrote into a non-store"
log "ok"
