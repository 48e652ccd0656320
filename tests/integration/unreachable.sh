#!/usr/bin/env bash
# unreachable.sh - an S3 endpoint nothing listens on fails a mount,
# dcrfs-ctl and dcrfs-commit at once (2 attempts, not the whole retry
# budget of 10) with the cause named, "cannot reach the store at URL:
# Connection refused", and no "Input/output error" echo; the mount adds
# only that its cache holds nothing to start from. No server is needed.
. "$(dirname "$0")/lib.sh"
CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$CTL"

# a loopback port nothing listens on
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
EP=http://127.0.0.1:$PORT
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
unset AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 AWS_PROFILE
mkdir -p "$T/tree" "$T/mnt"
rand_file "$T/tree/w.bin" 50000 u
CAUSE="cannot reach the store at $EP: Connection refused"

# fast CMD... - CMD fails within 5 s naming the cause, once, and no EIO
fast() {
	local start=$SECONDS
	expect_status 1 "$CAUSE" "$@"
	[ $((SECONDS - start)) -le 5 ] || fail "'$*' took $((SECONDS - start)) s"
	[ "$(grep -c "$CAUSE" "$T/out")" = 1 ] || fail "'$*': the cause more than once: $(cat "$T/out")"
	grep -q "gave up after 2 attempts" "$T/out" || fail "'$*': not 2 attempts: $(cat "$T/out")"
	! grep -q "Input/output error" "$T/out" || fail "'$*': an EIO echo: $(cat "$T/out")"
}
fast "$DCRFS" s3://dcrtest/p "$T/mnt" -f -o "cache_dir=$T/cache,endpoint=$EP,path_style"
grep -q "not mounted: s3://dcrtest/p cannot be reached (above) and the cache in $T/cache holds nothing" "$T/out" ||
	fail "the mount does not say why it did not start from its cache: $(cat "$T/out")"
[ "$(grep -c . "$T/out")" = 2 ] || fail "more than 2 lines: $(cat "$T/out")"
mountpoint -q "$T/mnt" && fail "mounted"
fast "$CTL" --store s3://dcrtest/p --endpoint-url "$EP" log
fast "$DCRFS_COMMIT" --store s3://dcrtest/p --endpoint-url "$EP" --cache-dir "$T/cc" "$T/tree"
log "ok: an unreachable endpoint fails at once, named"
