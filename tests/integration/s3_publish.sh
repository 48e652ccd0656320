#!/usr/bin/env bash
# s3_publish.sh - a commit's report is true whatever the store answers to
# the manifest's conditional create (faults by tests/integration/
# faultproxy.py on PUT versions/ only): a 200 for an object it did not
# keep (once: the number printed holds the tree; always: exit 1, "nothing
# was published", and nothing was), a create applied but answered 503
# (then 412 on the retry: its own version, not the next number) or reset
# on every attempt until the client gives up (still its own version).
# After each commit: the number printed holds exactly the committed tree
# (dcrfs-ctl show against the files), it is the latest, and no tree is
# published twice. No mount needed.
. "$(dirname "$0")/lib.sh"
. "$DCR_SRCDIR/tests/integration/s3lib.sh"
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS_CTL"
s3_store
RULES=$T/rules.json
FLOG=$T/faults.log
: >"$FLOG"
echo '[]' >"$RULES"
start_faultproxy "$AWS_ENDPOINT_URL" "$RULES" "$FLOG"
export AWS_ENDPOINT_URL=$PROXY
ctl() { t "$DCRFS_CTL" --store "$STORE" "$@"; }

# rules JSON - replace the proxy's rules (it rereads the file)
rules() {
	printf '%s\n' "$1" >"$RULES.tmp"
	mv "$RULES.tmp" "$RULES"
}
# injected FAULT - the proxy's log shows FAULT on a PUT of a manifest
injected() {
	grep -qE "^$1 PUT .*/versions/" "$FLOG"
}
# versions - the store's version numbers, one a line
versions() {
	ctl log --json | py - 'print("\n".join(str(v) for v in sorted(x["version"] for x in d)))'
}
# holds V TREE - version V is exactly TREE: the same paths, kinds, sizes
# and digests (show --json against the files), and verify passes
holds() {
	local v=$1 tree=$2
	ctl show "$v" --json >"$T/show.$v.json" || fail "show $v failed"
	py "$T/show.$v.json" '
import hashlib
tree, fmt, cs = sys.argv[2], d["format"], d["chunk_size"]
def digest(p):
    data = open(p, "rb").read()
    if fmt < 3:
        return hashlib.sha256(data).hexdigest()
    h = hashlib.sha256()
    for i in range(0, len(data), cs):
        h.update(hashlib.sha256(data[i:i + cs]).digest())
    return h.hexdigest()
want = {}
for root, dirs, files in os.walk(tree):
    for n in dirs:
        want[os.path.relpath(os.path.join(root, n), tree)] = ("dir", None)
    for n in files:
        p = os.path.join(root, n)
        want[os.path.relpath(p, tree)] = ("file", digest(p))
got = {f["path"]: (f["type"], f.get("digest") if f["type"] == "file" else None)
       for f in d["files"]}
assert got == want, (sorted(set(got) ^ set(want)),
                     [p for p in got if p in want and got[p] != want[p]])
' "$tree" || fail "version $v does not hold $tree"
	ctl verify "$v" >/dev/null 2>"$T/verify.$v.err" ||
		fail "verify $v: $(cat "$T/verify.$v.err")"
}
# once - no two versions hold the same tree (every tree.N differs)
once() {
	local v
	for v in $(versions); do
		ctl show "$v" --json | py - '
print(hashlib.sha256(json.dumps(sorted((f["path"], f.get("digest"))
    for f in d["files"])).encode()).hexdigest())'
	done | sort | uniq -d >"$T/dups"
	[ ! -s "$T/dups" ] || fail "a tree was published twice: $(versions | tr '\n' ' ')"
}
# commit_ok N FAULT - commit tree.N through the rules in place: exit 0,
# the number printed is the latest and holds tree.N, FAULT was injected
commit_ok() {
	local n=$1 fault=$2 v
	next_src "$n"
	v=$(commit "$STORE" "$T/tree.$n" 2>"$T/commit.$n.err") ||
		fail "$fault: commit failed: $(cat "$T/commit.$n.err")"
	[ -z "$fault" ] || injected "$fault" || fail "$fault was never injected"
	rules '[]'
	[ "$(versions | tail -n 1)" = "$v" ] ||
		fail "$fault: printed $v, but the latest is $(versions | tail -n 1)"
	holds "$v" "$T/tree.$n"
	once
	log "${fault:-no fault}: version $v holds tree.$n"
}

make_src "$T/tree.1" 1
[ "$(commit "$STORE" "$T/tree.1")" = 1 ] || fail "commit through the proxy failed"
holds 1 "$T/tree.1"

# 1. A 200 for a manifest the store did not keep, once: put again; the
#    number printed holds the tree (it used to print 2 and leave v2 empty).
rules '[{"method": "PUT", "path": "/versions/", "fault": "lie", "count": 1}]'
commit_ok 2 lie

# 2. ... every time: exit 1, "nothing was published", and nothing was.
rules '[{"method": "PUT", "path": "/versions/", "fault": "lie", "count": -1}]'
next_src 3
before=$(versions)
rc=0
commit "$STORE" "$T/tree.3" >"$T/lie.out" 2>"$T/lie.err" || rc=$?
rules '[]'
[ "$rc" = 1 ] || fail "a commit whose manifest is never kept exited $rc: $(cat "$T/lie.err")"
[ ! -s "$T/lie.out" ] || fail "a commit whose manifest is never kept printed $(cat "$T/lie.out")"
grep -q "nothing was published" "$T/lie.err" || fail "no clear message: $(cat "$T/lie.err")"
injected lie || fail "the lying PUT was never injected"
[ "$(versions)" = "$before" ] || fail "versions changed: $(versions | tr '\n' ' ')"

# 3. Applied, then answered 503: the retry gets 412 for our own object;
#    it must not publish the same tree again as the next number.
rules '[{"method": "PUT", "path": "/versions/", "fault": "applied:503", "count": 1}]'
commit_ok 3 applied:503

# 4. Applied, then reset, on every attempt (the retries all get 412 and
#    a reset): the client gives up, the read-back finds its own version;
#    it used to say "nothing was published" about it.
rules '[{"method": "PUT", "path": "/versions/", "fault": "applied_reset", "count": -1}]'
commit_ok 4 applied_reset

# 5. Applied, then reset, once: the first PUT of the manifest only, on
#    a connection the client had used before (every earlier request went
#    through the proxy on kept-alive connections). libcurl re-sends a
#    request whose reused connection died before any reply without
#    telling its caller, so the 412 it then returns looks like another
#    commit's object: the commit said "version 5 was taken by another
#    commit" and published the same tree again as 6. The fault case
#    above (reset on every attempt) cannot show this, since curl's own
#    retry is reset too.
rules '[{"method": "PUT", "path": "/versions/", "fault": "applied_reset", "count": 1}]'
commit_ok 5 applied_reset

# 6. And the store goes on: the next clean commit takes the next number.
commit_ok 6 ""
[ "$(versions | tr '\n' ' ')" = "1 2 3 4 5 6 " ] ||
	fail "versions are $(versions | tr '\n' ' '), not 1..6"
log "ok"
