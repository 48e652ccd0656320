# readers.sh - readers in loops for the tests that replace a mount's
# daemon under them (handover.sh, restart.sh); sourced after lib.sh.
#
# readers_store - commit v1 ($T/tree.1: a.bin of 8 MiB + 12345 bytes,
#   b.bin of 4 MiB) and v2 ($T/tree.2: 5 % of a.bin's bytes changed) into
#   $STORE, 1 MiB chunks.
# readers_start - with v1 ($T/tree.1) and v2 ($T/tree.2) of a.bin and
#   b.bin committed and mounted on $MNT, v2 being prefetched: seven
#   readers (held fds, mmaps and reopens on v2 through the normal path
#   and on v1 through passthrough, and a lookup loop on v1 that times
#   its rounds), each comparing bytes against the committed files; the
#   kernel's cached pages are dropped each round, so reads reach dcrfs.
# readers_stop - stop them; fail on any error or wrong byte; sets
#   READERS_WORST (the longest round of any reader, ms) and leaves the
#   stall reader's rounds over 100 ms in $T/r.stall.*.long.
# pt_opens - status.json's count of passthrough opens on $MNT.

readers_store() {
	local mib=$((1024 * 1024))
	mkdir -p "$T/tree.1" "$T/tree.2"
	rand_file "$T/tree.1/a.bin" $((8 * mib + 12345)) a
	rand_file "$T/tree.1/b.bin" $((4 * mib)) b
	cp -a "$T/tree.1/." "$T/tree.2/"
	flip_bytes "$T/tree.2/a.bin" 0.05 a2
	[ "$(commit "$STORE" "$T/tree.1" --chunk-size 1M)" = 1 ] || fail "commit 1"
	[ "$(commit "$STORE" "$T/tree.2" --chunk-size 1M)" = 2 ] || fail "commit 2"
}

_readers_py() {
	cat >"$T/reader.py" <<'PY'
import mmap, os, sys, time
mode, path, ref, stop, out = sys.argv[1:6]
want = open(ref, "rb").read()
n = 0
worst = 0.0
longs = []  # the lookups that waited (a restart's, a handover's)
def bad(msg):
    open(out, "w").write("%s %s: %s after %d rounds\n" % (mode, path, msg, n))
    sys.exit(1)
try:
    if mode in ("held", "mmap"):
        f = open(path, "rb")
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) if mode == "mmap" else None
    while not os.path.exists(stop):
        t0 = time.monotonic()
        if mode == "stall":
            # a name never seen: each lookup reaches the daemon
            try:
                os.stat("%s/nothing-%d" % (path, n))
                bad("a file that does not exist")
            except FileNotFoundError:
                pass
            got = want = b""
        elif mode == "reopen":
            with open(path, "rb") as g:
                os.posix_fadvise(g.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                got = g.read()
        elif mode == "held":
            # the kernel's cached pages dropped: the reads reach dcrfs
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            got = os.pread(f.fileno(), len(want) + 1, 0)
        else:
            m.madvise(mmap.MADV_DONTNEED)
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            got = m[:]
        took = time.monotonic() - t0
        worst = max(worst, took)
        if mode == "stall" and took > 0.1:
            longs.append(took)
        if got != want:
            bad("wrong bytes")
        n += 1
        time.sleep(0.01)
except OSError as e:
    bad("error %s" % e)
open(out, "w").write("ok %s %s %d rounds, longest round %d ms\n" %
                     (mode, path, n, worst * 1000))
if mode == "stall":
    open(out + ".long", "w").write("".join("%d\n" % (t * 1000) for t in longs))
PY
}

# reader MODE FILE REF - one reader in the background
reader() {
	local out=$T/r.$1.$(basename "$(dirname "$2")").$(basename "$2")
	start_bg python3 "$T/reader.py" "$1" "$2" "$3" "$STOP" "$out"
	RPIDS+=("$BG_PID")
}

readers_start() {
	STOP=$T/stop
	RPIDS=()
	_readers_py
	# v2, being prefetched: opened cold and held, so that every open of
	# it takes the normal path (the kernel refuses mixed opens)
	reader held "$MNT/v2/a.bin" "$T/tree.2/a.bin"
	reader mmap "$MNT/v2/b.bin" "$T/tree.2/b.bin"
	sleep 0.3
	reader reopen "$MNT/v2/a.bin" "$T/tree.2/a.bin"
	# v1 whole in the cache: its opens go through passthrough
	t cat "$MNT/v1/a.bin" "$MNT/v1/b.bin" >/dev/null
	reader reopen "$MNT/v1/b.bin" "$T/tree.1/b.bin"
	reader held "$MNT/v1/a.bin" "$T/tree.1/a.bin"
	reader mmap "$MNT/v1/b.bin" "$T/tree.1/b.bin"
	reader stall "$MNT/v1" /dev/null
	sleep 0.5
}

readers_stop() {
	local f p ms
	: >"$STOP"
	for p in "${RPIDS[@]}"; do
		wait "$p" || true
	done
	READERS_WORST=0
	for f in "$T"/r.*; do
		case $f in *.long) continue ;; esac
		log "$(cat "$f")"
		grep -q '^ok ' "$f" || fail "a reader failed: $(cat "$f")"
		ms=$(sed -n 's/.*longest round \([0-9]*\) ms.*/\1/p' "$f")
		[ "$ms" -gt "$READERS_WORST" ] && READERS_WORST=$ms
	done
	[ "$(ls "$T"/r.* | grep -vc '\.long$')" = 7 ] || fail "a reader left no result"
}

pt_opens() {
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["opens"]["passthrough"])' "$MNT/.dcrfs/status.json"
}
