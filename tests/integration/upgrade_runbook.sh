#!/usr/bin/env bash
# upgrade_runbook.sh - dcrfs(8) "Upgrading many nodes" does what it says:
# on a mount made by mount(8) with the options of
# examples/systemd/mnt-dcr.mount (mount.fuse3 rewrites them: the
# takeover must repeat the running daemon's own arguments), the page's
# own commands (its pid= and args= lines, run as printed, the mount
# point moved here) find the daemon and its arguments, and
# `dcrfs --takeover $args` (what the page's systemd-run starts; no
# systemd runs here) takes the mount over: a reader's open file goes on,
# status.json shows the new pid, the log says "handover: took over". A
# takeover with another fixed option is refused with exit status 1 and
# the mount serves on.
. "$(dirname "$0")/lib.sh"
need_fuse
need_root
need_bins
command -v mount.fuse3 >/dev/null 2>&1 || skip "mount.fuse3 missing (scripts/install-deps run)"
PAGE=$DCR_SRCDIR/man/dcrfs.8
UNIT=$DCR_SRCDIR/examples/systemd/mnt-dcr.mount
# the page's literal lines, mdoc escapes undone
sed -n '/^\.Ss Upgrading many nodes/,/^\.S[hs] /p' "$PAGE" | grep -E '^(pid|args)=' |
	sed 's/\\e/\\/g; s|/mnt/dcr|$MNT|g' >"$T/runbook.sh"
[ "$(wc -l <"$T/runbook.sh")" = 2 ] || fail "dcrfs(8) lost its pid= and args= lines: $(cat "$T/runbook.sh")"
grep -q 'dcrfs --takeover \$args' "$PAGE" || fail "dcrfs(8) does not take over with \$args"

mkdir -p "$T/tree" "$T/mnt"
printf 'weights %s\n' {1..2000} >"$T/tree/w.bin"
commit "$T/store" "$T/tree" >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
opts=$(sed -n 's/^Options=//p' "$UNIT" |
	sed "s|cache_dir=[^,]*|cache_dir=$T/cache|; s|metrics=127.0.0.1:[0-9]*|metrics=127.0.0.1:$port|")
t mount -t "fuse.$DCRFS" "$T/store" "$T/mnt" -o "$opts,log=$T/dcrfs.rb.log" ||
	fail "mount(8) with the unit's options"
register_mount "$T/mnt"
exec 8<"$T/mnt/latest/w.bin"
head -c 100 <&8 >"$T/part1"

# shellcheck disable=SC1091
. "$T/runbook.sh"
[ -n "${pid:-}" ] && kill -0 "$pid" || fail "the page's pid= line found no daemon: '${pid:-}'"
[[ $args == *" -o "*cache_dir=* ]] || fail "the page's args= line: '$args'"
# shellcheck disable=SC2086
# (8<&-: the daemon would inherit the reader's descriptor and keep the
# mount busy)
t "$DCRFS" --takeover $args >"$T/takeover.out" 2>&1 8<&- || fail "the takeover: $(cat "$T/takeover.out")"
for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "the old daemon $pid did not exit"
new=$(sed -n 's/.*"pid": \([0-9]*\),.*/\1/p' "$T/mnt/.dcrfs/status.json")
[ -n "$new" ] && [ "$new" != "$pid" ] && kill -0 "$new" ||
	fail "status.json's pid after the takeover: '$new' (old $pid)"
grep -q "dcrfs\[$new\]: info: handover: took over" "$T/dcrfs.rb.log" ||
	fail "the log lacks 'handover: took over': $(tail -5 "$T/dcrfs.rb.log")"
cat <&8 >"$T/part2" || fail "the reader's open file failed across the takeover"
exec 8<&-
cat "$T/part1" "$T/part2" | cmp - "$T/tree/w.bin" || fail "the open file read wrong bytes across the takeover"
m=$(t curl -sf "http://127.0.0.1:$port/metrics" 2>/dev/null) || m=
[ -z "$(command -v curl)" ] || grep -q '^dcrfs_' <<<"$m" || fail "no /metrics after the takeover"

rc=0
# shellcheck disable=SC2086
t "$DCRFS" --takeover $args,passthrough=off >"$T/refused.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q 'takeover refused: passthrough differs' "$T/refused.out" ||
	fail "a refused takeover: status $rc, $(cat "$T/refused.out")"
kill -0 "$new" 2>/dev/null || fail "a refused takeover stopped the serving daemon"
t cmp "$T/tree/w.bin" "$T/mnt/latest/w.bin" || fail "wrong bytes after a refused takeover"
t umount "$T/mnt" || fail "umount"
for ((i = 0; i < 100; i++)); do kill -0 "$new" 2>/dev/null || break; sleep 0.1; done
kill -0 "$new" 2>/dev/null && fail "the daemon $new did not exit at unmount"
log "ok: dcrfs(8)'s upgrade commands take over a mount made by mount(8)"
