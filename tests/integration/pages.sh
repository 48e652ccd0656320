#!/usr/bin/env bash
# pages.sh - the pages a mount leaves in the page cache are as good as a
# local file's (issue 31, item 5): after the cache file left the page
# cache, a fresh mount's first open checks it and hands it to the kernel
# (passthrough); a re-read and an mmap page-touch of it then run about
# as fast as those of a local copy with the same history (written,
# evicted, read once). scripts/bench-pages measures it (128 MiB here);
# the bounds are generous so that a loaded machine does not flake them:
#  - re-read and mmap page-touch >= 0.5x the local copy (the target of
#    the benchmark is 0.9; the check's pages used to give 0.1 for the
#    touch);
#  - the folios holding the cache file are on average at least half as
#    large as the local copy's (the check used to leave them in 4 KiB
#    pages where a local file gets 2 MiB ones). This one is no timing.
#  - right after the prefetch (no eviction), at least half of the cache
#    file is in 2 MiB folios, where the file system gives a read local
#    file such folios: a prefetch writes each run of neighbouring
#    chunks with one call (dcr_cache_put_run); written chunk by chunk
#    it was held in folios of one chunk (1 MiB), and an mmap
#    page-touch ran at a tenth of the speed. No timing either.
# A timing that misses its bound is measured once more (a loaded machine
# can slow one run; a regression misses it every time).
. "$(dirname "$0")/lib.sh"
need_fuse
need_root
need_bins "$DCRFS_SYNTH" "$DCR_BUILDDIR/tests/bench/bench_readfile"

# judge - 0 when the figures of $out meet the bounds; else 1 (timing
# only) or 2 (the folio sizes: no timing, so never retried), with why
judge() {
	py "$out/bench-pages.json" 'e = d["evicted"]
fm, fn = e["folios"]["mount"], e["folios"]["native"]
if fm["kib_per_page"] < 0.5 * fn["kib_per_page"]:
    print("the cache file is held in folios of %.0f KiB on average, the "
          "local copy in %.0f KiB ones" % (fm["kib_per_page"], fn["kib_per_page"]))
    sys.exit(2)
wm = d["written"]["folios"]["mount"]
if fn["pmd_share"] >= 0.25 and wm["pmd_share"] < 0.5:
    print("right after the prefetch %.0f %% of the cache file is in 2 MiB "
          "folios (a local file read back: %.0f %%)" % (100 * wm["pmd_share"],
          100 * fn["pmd_share"]))
    sys.exit(2)
bad = []
if e["reread"] < 0.5:
    bad.append("re-read %.2fx the local copy (< 0.5)" % e["reread"])
if e["touch"] < 0.5:
    bad.append("mmap page-touch %.2fx the local copy (< 0.5)" % e["touch"])
if bad:
    print("; ".join(bad))
    sys.exit(1)'
}

# A loaded machine can slow one run's timings: a timing that misses its
# bound is measured once more (a regression misses it every time).
for attempt in 1 2; do
	out=$T/out.$attempt
	rc=0
	BUILD=$DCR_BUILDDIR TMPDIR=$T t bash "$DCR_SRCDIR/scripts/bench-pages" \
		--size 128M --reps 7 --out "$out" >/dev/null 2>"$T/bench.log" || rc=$?
	if [ "$rc" = 77 ]; then
		skip "$(grep 'cannot run here' "$T/bench.log" || tail -n1 "$T/bench.log")"
	fi
	[ "$rc" = 0 ] || { cat "$T/bench.log" >&2; fail "scripts/bench-pages failed ($rc)"; }
	cat "$T/bench.log"
	rc=0
	why=$(judge) || rc=$?
	[ "$rc" = 1 ] && [ "$attempt" = 1 ] && { log "timing missed ($why): once more"; continue; }
	[ "$rc" = 0 ] ||
		fail "the pages the check left are worse than a local file's: $why"
	break
done
log "ok: $(py "$out/bench-pages.json" 'e = d["evicted"]
print("re-read %.2fx, touch %.2fx, folios %.0f / %.0f KiB" % (e["reread"], e["touch"],
      e["folios"]["mount"]["kib_per_page"], e["folios"]["native"]["kib_per_page"]))')"
