#!/usr/bin/env bash
# gc_commit_race.sh - gc never takes a running commit's packs, and no
# commit reports a version it did not publish whole (issue 30, item 2).
#
# 1. Rounds of a commit stalled between its pack check and its publish
#    (the test hook DCRFS_TEST_COMMIT_BEFORE_PUBLISH runs, in that
#    window, a wait past the grace and then `gc --grace 1`): its packs
#    are older than the grace and named by no manifest, but the commit's
#    intent (intents/ in the store) keeps them. Every commit exits 0,
#    prints the next version, and every version passes verify. Before
#    intents, gc deleted the packs and the commit exited 0 for a version
#    whose every chunk was missing.
# 2. A pack deleted anyway in that window (rm, as a gc that could not
#    see the intent would): the commit fails, naming the damaged version,
#    and prints no version.
# 3. An intent older than 24 h (a commit killed by SIGKILL) is not
#    honoured and gc deletes it; a live one keeps only the orphans written
#    since it began (less 10 min); --grace 0 honours none.
#
# DCR_GC_RACE_ROUNDS=N sets the rounds of part 1 (default 3; the report
# of issue 30 ran 50). No mount needed.
. "$(dirname "$0")/lib.sh"
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS_CTL"
need_test_hooks
ROUNDS=${DCR_GC_RACE_ROUNDS:-3}

ctl() { t "$DCRFS_CTL" --store "$STORE" "$@"; }
nintents() { find "$STORE/intents" -type f 2>/dev/null | wc -l; }

mkdir -p "$T/tree"
head -c $((600 * 1024)) /dev/urandom >"$T/tree/a.bin"
head -c $((300 * 1024)) /dev/urandom >"$T/tree/b.bin"
[ "$(commit "$STORE" "$T/tree")" = 1 ] || fail "the first commit is not version 1"

# 1. gc in the window, past the grace, every round
WINDOW="sleep 1.5; $DCRFS_CTL --store $STORE gc --keep-last 1000 --grace 1 >>$T/gc.log 2>&1"
want=1
for ((r = 1; r <= ROUNDS; r++)); do
	# a change per round without a Python start (seconds on a busy host)
	head -c 4096 /dev/urandom | dd of="$T/tree/a.bin" bs=4096 seek=$((r % 100)) \
		conv=notrunc status=none
	head -c 5000 /dev/urandom >"$T/tree/new.$r"
	want=$((want + 1))
	rc=0
	v=$(DCRFS_TEST_COMMIT_BEFORE_PUBLISH=$WINDOW commit "$STORE" "$T/tree" \
		2>"$T/commit.$r.err") || rc=$?
	[ "$rc" = 0 ] || fail "round $r: the commit failed ($rc): $(cat "$T/commit.$r.err")"
	[ "$v" = "$want" ] || fail "round $r: the commit printed '$v', not $want"
	ctl verify "$v" >/dev/null 2>"$T/verify.$r.err" ||
		fail "round $r: version $v was reported published but fails verify: $(tail -n 3 "$T/verify.$r.err")"
	grep -q "commits are running" "$T/gc.log" ||
		fail "round $r: gc did not say that it kept a running commit's packs: $(cat "$T/gc.log")"
	[ "$(nintents)" = 0 ] || fail "round $r: the commit left its intent: $(ls "$STORE/intents")"
done
ctl verify >/dev/null 2>"$T/verify.err" || fail "verify of the store: $(tail -n 3 "$T/verify.err")"
log "$ROUNDS commits stalled past the grace while gc ran: every version verifies"

# 2. a pack gone in the window anyway: the commit fails, naming the version
head -c 4096 /dev/urandom | dd of="$T/tree/a.bin" bs=4096 conv=notrunc status=none
want=$((want + 1))
ls "$STORE/packs" | sort >"$T/packs.before"
RM="ls $STORE/packs | sort | comm -13 $T/packs.before - | sed 's|^|$STORE/packs/|' | xargs rm -f"
rc=0
out=$(DCRFS_TEST_COMMIT_BEFORE_PUBLISH=$RM commit "$STORE" "$T/tree" 2>"$T/gone.err") || rc=$?
[ "$rc" != 0 ] || fail "a commit whose packs were deleted before its publish exited 0 (printed '$out')"
[ -z "$out" ] || fail "a commit whose version is damaged printed '$out'"
grep -q "version $want is published but .* packs are gone" "$T/gone.err" ||
	fail "no message naming the damaged version $want: $(cat "$T/gone.err")"
ctl verify "$want" >/dev/null 2>&1 && fail "version $want should be damaged (the test deleted its packs)"
log "a pack deleted in the window: the commit failed naming version $want"
rm -f "$STORE/versions/$(printf '%010d' "$want")" # the test's own damage

# 3. expired, live, and --grace 0
mkdir -p "$STORE/intents"
orphan() { head -c 100 /dev/urandom >"$STORE/packs/$(printf '%064d' "$1")"; }
orphan 1
orphan 2
touch -d '2 hours ago' "$STORE/packs/$(printf '%064d' 1)"
touch -d '3 seconds ago' "$STORE/packs/$(printf '%064d' 2)"
echo "commit pid 1 on test" >"$STORE/intents/0123456789abcdef0123456789abcdef"
touch -d '1 minute ago' "$STORE/intents/0123456789abcdef0123456789abcdef"
echo "commit pid 2 on test" >"$STORE/intents/fedcba9876543210fedcba9876543210"
touch -d '25 hours ago' "$STORE/intents/fedcba9876543210fedcba9876543210"
sed -i "s/^created .*/created $(($(date +%s) - 30 * 3600))/" "$STORE/dcrfs-store"
ctl gc --keep-last 1000 --grace 1 --json >"$T/gc3.json" 2>"$T/gc3.err" ||
	fail "gc failed: $(cat "$T/gc3.err")"
[ ! -e "$STORE/intents/fedcba9876543210fedcba9876543210" ] ||
	fail "gc kept an intent older than 24 h"
[ -e "$STORE/intents/0123456789abcdef0123456789abcdef" ] || fail "gc deleted a live intent"
[ ! -e "$STORE/packs/$(printf '%064d' 1)" ] ||
	fail "gc kept an orphan written an hour before the oldest running commit began"
[ -e "$STORE/packs/$(printf '%064d' 2)" ] ||
	fail "gc deleted an orphan written after a running commit began"
grep -q '"commits_running": 1,' "$T/gc3.json" || fail "commits_running: $(cat "$T/gc3.json")"
ctl gc --keep-last 1000 --grace 0 -q >/dev/null || fail "gc --grace 0 failed"
[ ! -e "$STORE/packs/$(printf '%064d' 2)" ] || fail "gc --grace 0 honoured an intent"
ctl verify >/dev/null 2>"$T/verify.err" || fail "verify of the store: $(tail -n 3 "$T/verify.err")"
log "ok"
