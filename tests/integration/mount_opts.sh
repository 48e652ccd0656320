#!/usr/bin/env bash
# mount_opts.sh - dcrfs's -o values (fs/args.c's option table): each bad
# value is a usage error (exit 2) with its one message, naming the option,
# the value and what is valid; the first bad one in table order is the one
# reported; the values at each bound are accepted (checking goes on to
# the mount point, which is missing here: exit 1). Nothing is mounted.
. "$(dirname "$0")/lib.sh"
need_bins "$DCRFS"
STORE=$T/store MNT=$T/no-such-mountpoint
mkdir -p "$STORE"

bad() { # OPTS MESSAGE
	local out rc=0
	out=$(t "$DCRFS" "$STORE" "$MNT" -f -o "$1" 2>&1 </dev/null) || rc=$?
	[ "$rc" = 2 ] || fail "-o $1 exited $rc, expected 2: $out"
	[ "$out" = "dcrfs: $2" ] || fail "-o $1 said '$out', expected 'dcrfs: $2'"
}
good() { # OPTS
	local out rc=0
	out=$(t "$DCRFS" "$STORE" "$MNT" -f -o "$1" 2>&1 </dev/null) || rc=$?
	[ "$rc" = 1 ] && [[ "$out" == "dcrfs: bad mount point '$MNT'"* ]] ||
		fail "-o $1 was refused (exit $rc): $out"
}

H_POLL="seconds, 0 or 0.05 to 604800; e.g. 5, 0.25"
bad "cache_size=0" "bad cache_size '0' (e.g. 512M, 50G)"
bad "cache_size=12Q" "bad cache_size '12Q' (e.g. 512M, 50G)"
good "cache_size=1"
bad "poll=0.049" "bad poll '0.049' ($H_POLL)"
bad "poll=604800.001" "bad poll '604800.001' ($H_POLL)"
bad "poll=1.2345" "bad poll '1.2345' ($H_POLL)"
good "poll=0"; good "poll=0.05"; good "poll=604800"
bad "relist=0" "bad relist '0' (seconds, 0.05 to 604800; e.g. 60)"
bad "relist=604801" "bad relist '604801' (seconds, 0.05 to 604800; e.g. 60)"
good "relist=0.05"; good "relist=604800"
bad "prefetch=Latest" "bad prefetch 'Latest' (none, latest or all)"
good "prefetch=none"; good "prefetch=latest"; good "prefetch=all"
bad "latest_wait=604801" "bad latest_wait '604801' (seconds, 0 to 604800)"
bad "latest_wait=-1" "bad latest_wait '-1' (seconds, 0 to 604800)"
good "latest_wait=0"; good "latest_wait=604800"
bad "passthrough=on" "bad passthrough 'on' (auto or off)"
good "passthrough=auto"; good "passthrough=off"
bad "readahead=1025M" "bad readahead '1025M' (0 to 1G)"
good "readahead=0"; good "readahead=1G"
bad "s3_timeout=0" "bad s3_timeout '0' (seconds, 1 to 86400)"
bad "s3_timeout=1.5" "bad s3_timeout '1.5' (seconds, 1 to 86400)"
bad "s3_timeout=86401" "bad s3_timeout '86401' (seconds, 1 to 86400)"
good "s3_timeout=1"; good "s3_timeout=86400"
bad "fetch_threads=0" "bad fetch_threads '0' (1 to 64)"
bad "fetch_threads=65" "bad fetch_threads '65' (1 to 64)"
good "fetch_threads=1"; good "fetch_threads=64"
bad "fetch_ahead=16385M" "bad fetch_ahead '16385M' (0 to 16G)"
good "fetch_ahead=0"; good "fetch_ahead=16G"
bad "log_level=loud" "bad log_level 'loud' (error, warn, info or debug)"
good "log_level=warning"; good "log_level=debug"
bad "metrics=9741" "bad metrics '9741' (HOST:PORT, e.g. 127.0.0.1:9741)"
good "metrics=127.0.0.1:9741"
# the first bad value in table order, whatever the command line's order
bad "poll=x,log_level=x" "bad log_level 'x' (error, warn, info or debug)"
bad "fetch_ahead=x,cache_size=0" "bad cache_size '0' (e.g. 512M, 50G)"
# the spaced long form takes the same path
out=$(t "$DCRFS" "$STORE" "$MNT" -f --poll x 2>&1) && fail "--poll x was accepted"
[ "$out" = "dcrfs: bad poll 'x' ($H_POLL)" ] || fail "--poll x said: $out"
# the long options other mounts (mountpoint-s3) and the dcrfs tools take
out=$(t "$DCRFS" "$STORE" "$MNT" --foreground --allow-other --read-only 2>&1 </dev/null) &&
	fail "mounted on a missing mount point"
[[ $out == "dcrfs: bad mount point '$MNT'"* ]] ||
	fail "--foreground --allow-other --read-only were refused: $out"
out=$(t "$DCRFS" "$STORE" "$MNT" -f --endpoint-url http://127.0.0.1:1 2>&1 </dev/null) &&
	fail "mounted on a missing mount point"
out2=$(t "$DCRFS" "$STORE" "$MNT" -f -o endpoint=http://127.0.0.1:1 2>&1 </dev/null) &&
	fail "mounted on a missing mount point"
[ "$out" = "$out2" ] || fail "--endpoint-url said '$out', -o endpoint= '$out2'"
out=$(t "$DCRFS" "$STORE" "$MNT" --foreground=yes 2>&1 </dev/null) && fail "--foreground=yes taken"
[[ $out == *"unknown option"* ]] || fail "--foreground=yes said: $out"
log "every option's bad values refused with its message, its bounds accepted"
