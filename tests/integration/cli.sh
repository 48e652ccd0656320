#!/usr/bin/env bash
# cli.sh - the command lines: bad arguments give a usage message and a
# non-zero status, --help succeeds, bad input gives a clear error and
# publishes nothing, and dcrfs on a bad store leaves no mount behind.
. "$(dirname "$0")/lib.sh"
need_bins "$DCRFS_SYNTH"

mkdir -p "$T/tree" "$MNT"
printf 'x\n' >"$T/tree/x"

nversions() { { ls "$STORE/versions" 2>/dev/null || true; } | grep -c . || true; }

C=$DCRFS_COMMIT
CC=(--cache-dir "$T/commit-cache")

# --help, --version
expect_status 0 "Usage" "$C" --help
expect_status 0 "Usage|usage" "$DCRFS" --help
expect_status 0 "Usage" "$DCRFS_SYNTH" --help
expect_status 0 "[0-9]+\.[0-9]+" "$C" --version
expect_status 0 "[0-9]+\.[0-9]+" "$DCRFS" --version

# usage errors: status 2 and a pointer to the usage
USAGE="Usage|usage|--help"
expect_status 2 "$USAGE" "$C"
expect_status 2 "$USAGE" "$C" --store "$STORE"
expect_status 2 "$USAGE" "$C" --bogus-option --store "$STORE" "$T/tree"
expect_status 2 "$USAGE" "$C" --store "$STORE" "$T/tree" "$T/tree"
expect_status 2 "jobs" "$C" --store "$STORE" --jobs many "$T/tree"
expect_status 2 "chunk" "$C" --store "$STORE" --chunk-size 1000 "$T/tree"
expect_status 2 "chunk" "$C" --store "$STORE" --chunk-size 128M "$T/tree"
expect_status 2 "parent" "$C" --store "$STORE" --parent abc "$T/tree"
expect_status 2 "tag" "$C" --store "$STORE" --tag ../etc "$T/tree"
expect_status 2 "tag" "$C" --store "$STORE" --tag '' "$T/tree"
expect_status 2 "$USAGE" "$DCRFS_SYNTH"
expect_status 2 "size" "$DCRFS_SYNTH" init "$T/synth"
expect_status 2 "size" "$DCRFS_SYNTH" init --size lots "$T/synth"
expect_status 2 "mode" "$DCRFS_SYNTH" step --in "$T/tree" --out "$T/o" --mode sgd
[ ! -e "$STORE/versions" ] || [ "$(nversions)" = 0 ] ||
	fail "a usage error published something"

# a missing directory: a clear error naming it, nothing published
expect_status 1 "$T/missing" "$C" --store "$STORE" "${CC[@]}" "$T/missing"
[ "$(nversions)" = 0 ] || fail "a failed commit published a version"
# a file instead of a directory
expect_status 1 "$T/tree/x" "$C" --store "$STORE" "${CC[@]}" "$T/tree/x"

# now one good version
[ "$(commit "$STORE" "$T/tree")" = 1 ] || fail "the good commit is not version 1"

# a symlink in the tree: refused, naming it, nothing published
cp -a "$T/tree" "$T/tree.link"
ln -s x "$T/tree.link/the-link"
expect_status 1 "the-link" "$C" --store "$STORE" "${CC[@]}" "$T/tree.link"
[ "$(nversions)" = 1 ] || fail "a commit with a symlink published a version"
# a FIFO too
cp -a "$T/tree" "$T/tree.fifo"
mkfifo "$T/tree.fifo/the-fifo"
expect_status 1 "the-fifo" "$C" --store "$STORE" "${CC[@]}" "$T/tree.fifo"
[ "$(nversions)" = 1 ] || fail "a commit with a FIFO published a version"
# an unreadable file (only meaningful when not root)
if [ "$(id -u)" -ne 0 ]; then
	cp -a "$T/tree" "$T/tree.unreadable"
	printf 'secret\n' >"$T/tree.unreadable/locked"
	chmod 000 "$T/tree.unreadable/locked"
	expect_status 1 "locked" "$C" --store "$STORE" "${CC[@]}" "$T/tree.unreadable"
	[ "$(nversions)" = 1 ] || fail "a commit of an unreadable file published a version"
fi
# a parent that does not exist
expect_status 1 "99" "$C" --store "$STORE" "${CC[@]}" --parent 99 "$T/tree"
[ "$(nversions)" = 1 ] || fail "a commit with a bad parent published a version"
# the store still works
[ "$(commit "$STORE" "$T/tree" --parent 1 --allow-unchanged)" = 2 ] || fail "a commit after the errors failed"

# Stores are created explicitly: without --init, a path that holds no
# store is an error naming it, and nothing is created or written there.
expect_status 1 "no store there.*--init" "$C" --store "$T/typo" "${CC[@]}" "$T/tree"
[ ! -e "$T/typo" ] || fail "a commit to a missing store created $T/typo"
mkdir -p "$T/plain"
cp -a "$T/tree/." "$T/plain/"
expect_status 1 "not a dcrfs store" "$C" --store "$T/plain" "${CC[@]}" "$T/tree"
[ -z "$(find "$T/plain" -mindepth 1 ! -name x)" ] ||
	fail "a commit to a non-store wrote into it: $(ls -A "$T/plain")"
# a malformed URL is an error, never a local directory named so
(cd "$T" && expect_status 1 "malformed store URL" "$C" --init --store s3:/bucket/x "${CC[@]}" "$T/tree")
[ ! -e "$T/s3:" ] || fail "s3:/bucket/x was taken for a local path"
# --init on an existing store is a no-op (the id stays)
id1=$(cat "$STORE/dcrfs-store")
[ "$(commit "$STORE" "$T/tree" --allow-unchanged)" = 3 ] || fail "--init on an existing store did not just commit"
[ "$(cat "$STORE/dcrfs-store")" = "$id1" ] || fail "--init rewrote the store marker"

# An empty tree is refused unless --allow-empty; a shrunk one warns.
mkdir -p "$T/empty/sub"
expect_status 1 "holds no files.*--allow-empty" "$C" --store "$STORE" "${CC[@]}" "$T/empty"
[ "$(nversions)" = 3 ] || fail "an empty commit was published"
v=$(t "$C" --store "$STORE" "${CC[@]}" --quiet --allow-empty "$T/empty") ||
	fail "--allow-empty did not commit"
[ "$v" = 4 ] || fail "--allow-empty printed '$v'"
mkdir -p "$T/big"
rand_file "$T/big/w.bin" $((256 * 1024)) big
[ "$(commit "$STORE" "$T/big")" = 5 ] || fail "commit of big"
mkdir -p "$T/small"
head -c 1000 "$T/big/w.bin" >"$T/small/w.bin"
expect_status 0 "less than half" "$C" --store "$STORE" "${CC[@]}" "$T/small"

# The progress line on a terminal counts uploaded bytes, not bytes read
# (it said "1023.7 MiB uploaded" for a delta whose summary said 17.9 MiB).
if command -v script >/dev/null 2>&1; then
	mkdir -p "$T/prog.1"
	rand_file "$T/prog.1/w.bin" $((6 * 1024 * 1024)) prog
	t "$C" --init --store "$T/pstore" "${CC[@]}.p" --quiet "$T/prog.1" >/dev/null
	cp -a "$T/prog.1" "$T/prog.2"
	flip_bytes "$T/prog.2/w.bin" 0.001 prog2
	t script -qfec "'$C' --store '$T/pstore' --cache-dir '$T/commit-cache.p' '$T/prog.2'" \
		"$T/prog.tty" >/dev/null 2>&1 || fail "commit on a terminal failed: $(cat "$T/prog.tty")"
	python3 - "$T/prog.tty" <<'PY' || fail "the progress line is wrong: $(tr '\r' '\n' <"$T/prog.tty")"
import re, sys
text = open(sys.argv[1], errors="replace").read().replace("\r", "\n")
units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
size = lambda n, u: float(n) * units[u]
summary = re.search(r"([0-9.]+) (B|KiB|MiB|GiB) uploaded in", text)
assert summary, text
total = size(*summary.groups())
progress = [size(n, u) for n, u in re.findall(r"([0-9.]+) (B|KiB|MiB|GiB) uploaded(?! in)", text)]
assert progress, text
assert max(progress) <= total * 1.01 + 1024, (progress, total)
PY
fi

# Default commit caches of stores not committed to for 14 days are
# removed by the next commit that uses a default cache; fresh ones and
# any cache in use stay.
CROOT=$XDG_CACHE_HOME/dcrfs/commit
mkdir -p "$CROOT/stale/tree" "$CROOT/fresh/tree"
: >"$CROOT/stale/lock"
: >"$CROOT/fresh/lock"
touch -d '30 days ago' "$CROOT/stale/lock"
touch -d '2 days ago' "$CROOT/fresh/lock"
t "$C" --store "$STORE" --quiet --allow-unchanged "$T/tree" >/dev/null 2>"$T/sweep.err" ||
	fail "a commit with the default cache failed: $(cat "$T/sweep.err")"
[ ! -e "$CROOT/stale" ] || fail "a stale commit cache was not removed"
[ -d "$CROOT/fresh/tree" ] || fail "a fresh commit cache was removed"

# the store from the environment
v=$(DCRFS_STORE=$STORE t "$C" "${CC[@]}" --quiet --allow-unchanged "$T/tree") ||
	fail "commit with DCRFS_STORE failed"
[ "$v" = 8 ] || fail "commit with DCRFS_STORE printed '$v'"

# non-finite weights: a NaN or Inf in a float tensor of a safetensors
# file is refused, naming file, tensor and count; --allow-nonfinite
# commits it. st_file PATH W0 W1: an F32 tensor "a" (1.0, 2.0) and a
# BF16 tensor "layers.0.w" of four elements, the first two W0 and W1
# (little-endian hex bytes, e.g. 803f = 1.0, c07f = NaN, 807f = Inf).
st_file() {
	local hdr='{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"layers.0.w":{"dtype":"BF16","shape":[4],"data_offsets":[8,16]}}'
	while [ $(( ${#hdr} % 8 )) -ne 0 ]; do hdr="$hdr "; done
	{
		printf "\\x$(printf %02x $(( ${#hdr} & 255 )))\\x$(printf %02x $(( ${#hdr} >> 8 )))\\0\\0\\0\\0\\0\\0"
		printf '%s' "$hdr"
		printf '\x00\x00\x80\x3f\x00\x00\x00\x40'
		printf "\\x${2:0:2}\\x${2:2:2}\\x${3:0:2}\\x${3:2:2}\\x00\\x40\\x80\\x3f"
	} >"$1"
}
mkdir -p "$T/st"
st_file "$T/st/model.safetensors" 803f 7f7f
n=$(nversions)
[ "$(commit "$STORE" "$T/st")" = $((n + 1)) ] || fail "a finite safetensors commit failed"
st_file "$T/st/model.safetensors" c07f 807f
expect_status 1 "model.safetensors: tensor layers.0.w has 2 non-finite values" \
	"$C" --store "$STORE" "${CC[@]}" "$T/st"
grep -qE "nothing (is|was) published" "$T/out" || fail "non-finite refusal: $(cat "$T/out")"
[ "$(nversions)" = $((n + 1)) ] || fail "a commit with a NaN published a version"
st_file "$T/st/model.safetensors" 803f 80ff
expect_status 1 "tensor layers.0.w has 1 non-finite value " \
	"$C" --store "$STORE" "${CC[@]}" "$T/st"
[ "$(commit "$STORE" "$T/st" --allow-nonfinite)" = $((n + 2)) ] ||
	fail "--allow-nonfinite did not commit"
# (into a file: grep -q would leave the help, over 4 KiB, to die of SIGPIPE)
t "$C" --help >"$T/commit.help"
grep -q -- --allow-nonfinite "$T/commit.help" || fail "--help does not list --allow-nonfinite"

# dcrfs: bad command lines and bad stores leave no mount behind
no_mount() {
	! mountpoint -q "$MNT" || fail "$* left a mount on $MNT"
}
if [ -c /dev/fuse ] && command -v fusermount3 >/dev/null 2>&1; then
	register_mount "$MNT" # the cleanup unmounts it if a check below fails
	for args in "" "$STORE"; do
		rc=0
		# shellcheck disable=SC2086
		t "$DCRFS" $args >"$T/out" 2>&1 </dev/null || rc=$?
		[ "$rc" -ne 0 ] || fail "dcrfs ${args:-without arguments} succeeded"
		grep -qE "$USAGE" "$T/out" || fail "dcrfs $args: no usage: $(cat "$T/out")"
		no_mount "dcrfs $args"
	done
	for fg in -f ""; do
		rc=0
		t "$DCRFS" "$T/no-such-store" "$MNT" $fg -o "cache_dir=$T/cache" \
			>"$T/out" 2>&1 || rc=$?
		[ "$rc" -ne 0 ] || fail "dcrfs on a missing store ${fg:+($fg) }succeeded"
		grep -q "no-such-store" "$T/out" ||
			fail "dcrfs on a missing store: no message naming it: $(cat "$T/out")"
		no_mount "dcrfs on a missing store"
	done
	rc=0
	t "$DCRFS" "$STORE" "$T/no-such-dir" -f -o "cache_dir=$T/cache" >"$T/out" 2>&1 || rc=$?
	[ "$rc" -ne 0 ] || fail "dcrfs on a missing mount point succeeded"
	rc=0
	t "$DCRFS" "$STORE" "$MNT" -f -o "cache_dir=$T/cache,poll=often" >"$T/out" 2>&1 || rc=$?
	[ "$rc" -ne 0 ] || fail "dcrfs with poll=often succeeded"
	grep -q poll "$T/out" || fail "dcrfs with poll=often: $(cat "$T/out")"
	no_mount "dcrfs with a bad option"
	rc=0
	t "$DCRFS" "$STORE" "$MNT" -f -o "cache_dir=$T/cache,no_such_option" >"$T/out" 2>&1 || rc=$?
	[ "$rc" -ne 0 ] || fail "dcrfs with an unknown option succeeded"
	no_mount "dcrfs with an unknown option"
	rc=0
	t "$DCRFS" "$STORE" "$MNT" -f -o "cache_dir=$T/cache,secret_key=hunter2" >"$T/out" 2>&1 || rc=$?
	[ "$rc" -ne 0 ] || fail "dcrfs accepted a secret on the command line"
	! grep -q hunter2 "$T/out" || fail "dcrfs echoed a secret: $(cat "$T/out")"
	no_mount "dcrfs with a secret option"
	# a directory that is not a store: refused, and nothing written in it
	expect_status 1 "not a dcrfs store" "$DCRFS" "$T/plain" "$MNT" -f -o "cache_dir=$T/cache"
	[ -z "$(find "$T/plain" -mindepth 1 ! -name x)" ] ||
		fail "dcrfs wrote into a non-store: $(ls -A "$T/plain")"
	no_mount "dcrfs on a non-store"
	# a malformed URL
	expect_status 1 "malformed store URL" "$DCRFS" "s3:/bucket/x" "$MNT" -f -o "cache_dir=$T/cache"
	no_mount "dcrfs on a malformed URL"
	# a mount point with files: refused unless -o nonempty
	touch "$MNT/hidden"
	expect_status 1 "not empty.*nonempty" "$DCRFS" "$STORE" "$MNT" -f -o "cache_dir=$T/cache"
	no_mount "dcrfs on a non-empty mount point"
	_forget_mount "$MNT"
	mount_dcrfs "$STORE" "$MNT" "cache_dir=$T/cache,nonempty"
	[ -e "$MNT/latest" ] || fail "-o nonempty did not mount"
	# a second mount on the same mount point: refused
	expect_status 1 "already a mount point" "$DCRFS" "$STORE" "$MNT" -f -o "cache_dir=$T/cache2"
	[ "$(grep -c " $MNT " /proc/self/mountinfo)" = 1 ] ||
		fail "two mounts on $MNT"
	umount_dcrfs "$MNT" || fail "dcrfs did not exit cleanly"
	rm -f "$MNT/hidden"
	register_mount "$MNT"
	# usage errors exit 2, as in dcrfs-commit
	expect_status 2 "MOUNTPOINT" "$DCRFS" "$STORE"
	expect_status 2 "cache-dir.*needs a value" "$DCRFS" "$STORE" "$MNT" -f --cache-dir
	expect_status 2 "poll" "$DCRFS" "$STORE" "$MNT" -f -o "poll=often"
	# the tools' spelling: --cache-dir DIR, --log=FILE; in the foreground
	# messages go to stderr and to the log file
	"$DCRFS" "$STORE" "$MNT" -f --cache-dir "$T/cache" --log="$T/fg.log" \
		--poll 0.5 >"$T/fg.err" 2>&1 &
	fgpid=$!
	_pids+=("$fgpid")
	register_mount "$MNT"
	for ((i = 0; i < 100; i++)); do mountpoint -q "$MNT" && break; sleep 0.1; done
	mountpoint -q "$MNT" || fail "dcrfs --cache-dir DIR did not mount: $(cat "$T/fg.err")"
	[ -d "$T/cache" ] || fail "--cache-dir was not used"
	t fusermount3 -u "$MNT"
	wait "$fgpid" || fail "dcrfs -f exited non-zero after unmount"
	grep -q "info: mounted" "$T/fg.err" || fail "-f did not log to stderr: $(cat "$T/fg.err")"
	grep -qE '^[0-9-]+T[0-9:.]+Z dcrfs\[[0-9]+\]: info: mounted' "$T/fg.log" ||
		fail "--log did not get the messages: $(cat "$T/fg.log")"
	# detached: with no syslog socket, says where messages go, and they
	# go there (the line explaining an EIO must never be lost)
	if [ ! -S /dev/log ]; then
		t "$DCRFS" "$STORE" "$MNT" -o "cache_dir=$T/cache3" >"$T/bg.err" 2>&1 ||
			fail "dcrfs (detached) failed: $(cat "$T/bg.err")"
		grep -q "messages go to $T/cache3/dcrfs.log" "$T/bg.err" ||
			fail "no word on where messages go: $(cat "$T/bg.err")"
		ls "$MNT/latest/" >/dev/null
		t fusermount3 -u "$MNT"
		for ((i = 0; i < 50; i++)); do
			grep -q "info: unmounting" "$T/cache3/dcrfs.log" && break
			sleep 0.1
		done
		grep -q "info: unmounting" "$T/cache3/dcrfs.log" ||
			fail "the detached daemon's messages were lost: $(cat "$T/cache3/dcrfs.log")"
		# said once, when the log file is new, not on every mount
		for ((i = 0; i < 50; i++)); do
			t "$DCRFS" "$STORE" "$MNT" -o "cache_dir=$T/cache3" >"$T/bg2.err" 2>&1 && break
			sleep 0.1 # the first daemon may still hold the cache's lock
		done
		mountpoint -q "$MNT" || fail "dcrfs (detached, again) failed: $(cat "$T/bg2.err")"
		t fusermount3 -u "$MNT"
		grep -q "no syslog here" "$T/bg2.err" &&
			fail "the no-syslog line is printed on every mount: $(cat "$T/bg2.err")"
	else
		log "this machine has syslog: the no-syslog fallback is not tried"
	fi
	# s3 is not built yet: a clear error, no mount
	rc=0
	t "$DCRFS" "s3://bucket/prefix" "$MNT" -f -o "cache_dir=$T/cache" >"$T/out" 2>&1 || rc=$?
	if [ "$rc" -ne 0 ]; then
		no_mount "dcrfs on an s3:// store"
	else
		umount_dcrfs "$MNT" || true
	fi
else
	log "no FUSE here: dcrfs mount errors not tried"
fi
log "ok"
