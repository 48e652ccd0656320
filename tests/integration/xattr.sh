#!/usr/bin/env bash
# xattr.sh - the provenance extended attributes (dcrfs(8) PROVENANCE):
#  1. every node of a version tree (/vN, its files and directories, and
#     the same through latest/ and tags/NAME) lists exactly
#     user.dcrfs.version, .parent, .time, .digest, .signer (and one
#     user.dcrfs.meta.KEY per metadata entry), each with the value
#     computed from what was committed and what the store holds: the
#     number and parent and time of dcrfs-ctl show --json, a file's
#     digest recomputed from its bytes (sha256-of-chunks), a directory's
#     the manifest's check recomputed from the manifest object; checked
#     with os.getxattr/os.listxattr, getfattr(1), and getxattr(2) and
#     listxattr(2) themselves (a size-0 query says the size, one byte
#     short is ERANGE); unknown names are ENODATA;
#  2. the root, /tags and its symlinks, /latest itself, /.dcrfs and
#     /delta carry none;
#  3. setting or removing one fails (EROFS or ENOTSUP), with setfattr
#     too, as mounted (the kernel's ro flag refuses it) and without the
#     ro flag (DCRFS_TEST_KERNEL_RW=1: dcrfs's own handlers refuse it);
#  4. a file and a directory opened through latest/ keep reporting the
#     version they were opened on after a commit (signed: its signer is
#     the key's id) moves latest;
#  5. a file opened with FUSE passthrough answers the same (when the
#     kernel offers passthrough; else that part is skipped, said so);
#  6. the most metadata a manifest carries (256 keys of 64 bytes, values
#     of 4096) is listed and read whole; a version rewritten in the
#     store: descriptors of its old tree fail with ESTALE (never the new
#     tree's values), its path then answers the new tree's.
# Uses Debian's /usr/bin/python3 and getfattr/setfattr (package attr).
. "$(dirname "$0")/lib.sh"
need_fuse
need_bins
CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$CTL"
PY=${DCR_PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || skip "$PY not found"
{ command -v getfattr && command -v setfattr; } >/dev/null ||
	skip "getfattr/setfattr missing (apt-get install attr)"
XP=("$PY" "$DCR_SRCDIR/tests/integration/xattr_prov.py")

MiB=$((1024 * 1024))
# What the reader shows as the signer of an unsigned version.
SIGNER=unsigned
M=(--meta step=200 --meta run.id=exp-7_b --meta note='lr 3e-4, warm "start"')
META2='{"step": "200", "run.id": "exp-7_b", "note": "lr 3e-4, warm \"start\""}'

mkdir -p "$T/s1/sub/deeper" "$T/s1/emptydir"
rand_file "$T/s1/a.bin" $((3 * MiB + 12345)) a
rand_file "$T/s1/sub/b.bin" 70000 b
printf 'hello\n' >"$T/s1/sub/deeper/c.txt"
: >"$T/s1/empty"
[ "$(commit "$STORE" "$T/s1" --chunk-size 1M)" = 1 ] || fail "commit 1"
cp -a "$T/s1" "$T/s2"
flip_bytes "$T/s2/a.bin" 0.01 a2
printf 'two\n' >"$T/s2/sub/new.txt"
[ "$(commit "$STORE" "$T/s2" "${M[@]}")" = 2 ] || fail "commit 2"
t "$CTL" --store "$STORE" tag good 1 >/dev/null
for v in 1 2; do
	t "$CTL" --store "$STORE" --json show "$v" >"$T/show$v.json"
done

mount_dcrfs "$STORE" "$MNT" "poll=1"
[ "$(t readlink "$MNT/latest")" = v2 ] || fail "latest is not v2"

# --- 1. every node, every name, every way of asking
t "${XP[@]}" tree "$MNT" v1 "$T/show1.json" "$STORE" "$T/s1" "$SIGNER" {} ||
	fail "v1's attributes"
t "${XP[@]}" tree "$MNT" v2 "$T/show2.json" "$STORE" "$T/s2" "$SIGNER" "$META2" ||
	fail "v2's attributes"
t "${XP[@]}" tree "$MNT" latest "$T/show2.json" "$STORE" "$T/s2" "$SIGNER" "$META2" ||
	fail "latest/'s attributes are not v2's"
t "${XP[@]}" tree "$MNT" tags/good "$T/show1.json" "$STORE" "$T/s1" "$SIGNER" {} ||
	fail "tags/good/'s attributes are not v1's"
# getfattr -n / --only-values, and ENODATA through getfattr
[ "$(t getfattr --absolute-names --only-values -n user.dcrfs.version "$MNT/latest/sub/b.bin")" = 2 ] ||
	fail "getfattr -n user.dcrfs.version of latest/sub/b.bin is not 2"
[ "$(t getfattr --absolute-names --only-values -n user.dcrfs.meta.step "$MNT/v2")" = 200 ] ||
	fail "getfattr -n user.dcrfs.meta.step of v2 is not 200"
expect_status 1 'No such attribute' getfattr -n user.dcrfs.nope "$MNT/v1/a.bin"
expect_status 1 'No such attribute' getfattr -n user.dcrfs.meta.step "$MNT/v1/a.bin"
log "ok: every node of v1, v2, latest/, tags/good"

# --- 2. nothing outside the version trees
t "${XP[@]}" none "$MNT" || fail "an inode outside the version trees has attributes"
[ -z "$(t getfattr --absolute-names -h -d -m - "$MNT" "$MNT/latest" "$MNT/tags/good" 2>&1)" ] ||
	fail "getfattr shows attributes outside the version trees"

# --- 3. read-only
for p in v1 v1/a.bin v2/sub latest/sub/b.bin; do
	t "${XP[@]}" readonly "$MNT/$p" || fail "an attribute of $p could be changed"
done
expect_status 1 'Read-only file system|Operation not supported' \
	setfattr -n user.dcrfs.version -v 9 "$MNT/v1/a.bin"
expect_status 1 'Read-only file system|Operation not supported' \
	setfattr -x user.dcrfs.version "$MNT/v1/a.bin"
[ "$(t getfattr --absolute-names --only-values -n user.dcrfs.version "$MNT/v1/a.bin")" = 1 ] ||
	fail "user.dcrfs.version of v1/a.bin changed"
log "ok: nothing outside the versions, nothing can be set"

# --- 4. descriptors opened through latest/ keep their version (v3,
# committed meanwhile, is signed: its signer is the key's id)
KEYID=$(t "$CTL" --json keygen "$T/key" | py - 'print(d["key_id"])')
cp -a "$T/s2" "$T/s3"
flip_bytes "$T/s3/a.bin" 0.01 a3
t "$PY" - "$MNT" "$T" "$STORE" "$DCRFS_COMMIT" "$T/key" <<'PY' || fail "a descriptor opened through latest/ changed version"
import json, os, subprocess, sys, time
mnt, tmp, store, commit, key = sys.argv[1:6]
P = "user.dcrfs."
fd = os.open(os.path.join(mnt, "latest", "a.bin"), os.O_RDONLY)
dfd = os.open(os.path.join(mnt, "latest", "sub"), os.O_RDONLY | os.O_DIRECTORY)
before = {k: os.getxattr(fd, k) for k in os.listxattr(fd)}
dbefore = {k: os.getxattr(dfd, k) for k in os.listxattr(dfd)}
assert before[P + "version"] == b"2", before
assert dbefore[P + "version"] == b"2", dbefore
out = subprocess.run([commit, "--store", store, "--cache-dir",
                      os.path.join(tmp, "commit-cache"), "--quiet",
                      "--meta", "step=300", "--sign-key", key,
                      os.path.join(tmp, "s3")],
                     check=True, capture_output=True, text=True, timeout=60)
assert out.stdout.strip() == "3", out.stdout
deadline = time.time() + 15
while os.readlink(os.path.join(mnt, "latest")) != "v3":
    assert time.time() < deadline, "v3 did not appear"
    time.sleep(0.1)
after = {k: os.getxattr(fd, k) for k in os.listxattr(fd)}
dafter = {k: os.getxattr(dfd, k) for k in os.listxattr(dfd)}
assert after == before, (before, after)
assert dafter == dbefore, (dbefore, dafter)
# and a new open through latest/ is v3's, with v3's digest and metadata
new = os.path.join(mnt, "latest", "a.bin")
assert os.getxattr(new, P + "version") == b"3"
assert os.getxattr(new, P + "parent") == b"2"
assert os.getxattr(new, P + "digest") != before[P + "digest"]
assert os.getxattr(new, P + "meta.step") == b"300"
assert os.getxattr(os.path.join(mnt, "latest", "sub"), P + "digest") != \
    dbefore[P + "digest"]
os.close(fd)
os.close(dfd)
print("held descriptors kept v2 after latest moved to v3")
PY
t "$CTL" --store "$STORE" --json show 3 >"$T/show3.json"
t "${XP[@]}" tree "$MNT" latest "$T/show3.json" "$STORE" "$T/s3" "$KEYID" \
	'{"step": "300"}' ||
	fail "latest/'s attributes are not v3's"
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"

# --- 3 again, without the kernel's ro flag: now the refusals are dcrfs's
# own (a test hook: only in a build configured with --enable-test-hooks).
# The same mount serves part 5.
PT_OPTS="cache_dir=$T/cache.pt,prefetch=none,passthrough=auto"
if [ "${DCR_TEST_HOOKS:-no}" = yes ]; then
	DCRFS_TEST_KERNEL_RW=1 mount_dcrfs "$STORE" "$MNT" "$PT_OPTS"
	! findmnt -n -o OPTIONS --target "$MNT" | tr ',' '\n' | grep -qx ro ||
		fail "DCRFS_TEST_KERNEL_RW=1 still mounted ro: dcrfs's handlers are not reached"
	for p in v1 v1/a.bin v2/sub latest/sub/b.bin; do
		t "${XP[@]}" readonly "$MNT/$p" || fail "dcrfs let an attribute of $p change"
	done
	expect_status 1 'Read-only file system' \
		setfattr -n user.dcrfs.version -v 9 "$MNT/v1/a.bin"
	expect_status 1 'Read-only file system' \
		setfattr -x user.dcrfs.version "$MNT/v1/a.bin"
	[ "$(t getfattr --absolute-names --only-values -n user.dcrfs.version "$MNT/v1/a.bin")" = 1 ] ||
		fail "user.dcrfs.version of v1/a.bin changed through dcrfs's handlers"
	log "ok: dcrfs's own handlers refuse setting and removing"
else
	[ "${CI:-}" = true ] && fail "needs a build with configure --enable-test-hooks"
	log "dcrfs's own setxattr/removexattr not reached: no test hooks in this build"
	mount_dcrfs "$STORE" "$MNT" "$PT_OPTS"
fi

# --- 5. passthrough opens: xattr requests still reach the daemon
t "$PY" - "$MNT" "$T/show2.json" <<'PY' || fail "a passthrough open's attributes"
import json, os, sys, time
mnt, showfile = sys.argv[1:3]
P = "user.dcrfs."
show = json.load(open(showfile))
want = {e["path"]: e["digest_kind"] + ":" + e["digest"] for e in show["files"]
        if e["type"] == "file"}

def status():
    with open(os.path.join(mnt, ".dcrfs", "status.json")) as f:
        return json.load(f)

s = status()
if not (s["passthrough"]["offered"] and s["passthrough"]["active"]):
    print("part 5 skipped: this kernel does not offer FUSE passthrough")
    sys.exit(0)
path = os.path.join(mnt, "v2", "a.bin")
with open(path, "rb") as f:   # cold: the normal path fills the cache
    f.read()
deadline = time.time() + 20
while True:  # once the cache holds it whole (written behind the read)
    before = status()["opens"]["passthrough"]
    fd = os.open(path, os.O_RDONLY)
    if status()["opens"]["passthrough"] == before + 1:
        break
    os.close(fd)
    assert time.time() < deadline, "v2/a.bin is never opened with passthrough"
    time.sleep(0.2)
assert os.read(fd, 1)  # the kernel serves it
assert os.getxattr(fd, P + "version") == b"2"
assert os.getxattr(fd, P + "digest").decode() == want["a.bin"]
assert os.getxattr(fd, P + "meta.step") == b"200"
os.close(fd)
print("a passthrough open answers its attributes")
PY
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"

# --- 6. a version rewritten in the store: a descriptor of its old tree
# fails ESTALE, never answers with the new tree's values; the path then
# answers the new tree's
S2=$T/store2
mkdir -p "$T/A" "$T/B"
rand_file "$T/A/a.bin" 100000 A
rand_file "$T/B/a.bin" 100000 B
# A carries the most metadata a manifest may: 256 keys of 64 bytes (a
# list of 20.8 KB), three values of 4096 bytes
mapfile -t BIG < <(python3 -c 'for i in range(256):
    print("--meta")
    print("k%03d%s=%s" % (i, "x" * 60, ("v%d" % i) * (4096 // len("v%d" % i)) if i < 3 else i))')
[ "$(commit "$S2" "$T/A" "${BIG[@]}")" = 1 ] || fail "commit of A is not 1"
mount_dcrfs "$S2" "$MNT" "cache_dir=$T/cache.s2,poll=0.2,relist=1"
t "$PY" - "$MNT" "$S2" "$T" "$DCRFS_COMMIT" "$CTL" "$MOUNT_LOG" <<'PY' || fail "a re-indexed version's old descriptor"
import errno, json, os, subprocess, sys, time
mnt, store, tmp, commit, ctl, log = sys.argv[1:7]
P = "user.dcrfs."
path = os.path.join(mnt, "v1", "a.bin")
fd = os.open(path, os.O_RDONLY)
dfd = os.open(os.path.join(mnt, "v1"), os.O_RDONLY | os.O_DIRECTORY)
old = os.getxattr(fd, P + "digest")
dold = os.getxattr(dfd, P + "time")
names = os.listxattr(fd)
keys = ["k%03d%s" % (i, "x" * 60) for i in range(256)]
assert names[5:] == [P + "meta." + k for k in keys], names[:8]
assert sum(len(n) + 1 for n in names) > 20000
for i in range(256):
    want = ("v%d" % i) * (4096 // len("v%d" % i)) if i < 3 else str(i)
    assert os.getxattr(dfd, P + "meta." + keys[i]) == want.encode(), i
os.unlink(os.path.join(store, "versions", "0000000001"))
out = subprocess.run([commit, "--store", store, "--cache-dir",
                      os.path.join(tmp, "commit-cache"), "--quiet",
                      os.path.join(tmp, "B")], check=True,
                     capture_output=True, text=True, timeout=60)
assert out.stdout.strip() == "1", out.stdout
show = json.loads(subprocess.run([ctl, "--store", store, "--json", "show", "1"],
                                 check=True, capture_output=True, text=True,
                                 timeout=60).stdout)
new = ("%s:%s" % (show["files"][0]["digest_kind"],
                  show["files"][0]["digest"])).encode()
assert new != old
deadline = time.time() + 30
while "versions/0000000001 changed in the store" not in open(log).read():
    assert time.time() < deadline, "v1 was not re-indexed"
    time.sleep(0.1)
for f, name, was in ((fd, "digest", old), (dfd, "time", dold)):
    while True:  # the old tree's values until it is stale, never the new
        try:
            got = os.getxattr(f, P + name)
        except OSError as e:
            assert e.errno == errno.ESTALE, "errno %d, not ESTALE" % e.errno
            break
        assert got == was, "an old descriptor answered %r, not %r" % (got, was)
        assert time.time() < deadline, "an old descriptor never went stale"
        time.sleep(0.1)
    try:
        os.listxattr(f)
        raise AssertionError("listxattr of a stale descriptor answered")
    except OSError as e:
        assert e.errno == errno.ESTALE, "listxattr: errno %d" % e.errno
while True:  # the path, once the kernel was told, is the new tree's
    try:
        if os.getxattr(path, P + "digest") == new:
            break
    except OSError as e:
        assert e.errno == errno.ESTALE, e
    assert time.time() < deadline, "the path never answered the new tree"
    time.sleep(0.2)
os.close(fd)
os.close(dfd)
print("an old tree's descriptors went stale; the path answers the new tree")
PY
umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"
log "ok"
