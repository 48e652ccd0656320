#!/usr/bin/env bash
# s3_faults.sh - S3 failures (radosgw: it checks signatures and can lose
# its gateway while the cluster stays up): a wrong secret makes the commit
# fail saying why and publish nothing; a credentials file readable by
# others is refused; the gateway stopped mid-read gives EIO within the
# bounded time, the mount stays up and reads work again once it is back.
. "$(dirname "$0")/lib.sh"
. "$DCR_SRCDIR/tests/integration/s3lib.sh"
need_fuse
need_bins
# This test stops and restarts the gateway: never do that to a server the
# other tests (running in parallel) share.
unset DCR_S3_DIR
command -v aws >/dev/null 2>&1 || skip "the aws CLI is missing"
s3_setup radosgw
[ "$DCR_S3_SERVER" = radosgw ] || skip "needs radosgw (DCR_S3_DIR is a $DCR_S3_SERVER server)"

STORE=$(s3_url store)
make_src "$T/tree.1" 1
v=$(commit "$STORE" "$T/tree.1") || fail "commit of tree.1 failed"
[ "$v" = 1 ] || fail "commit printed '$v'"

# wrong secret: a clear message, exit 1, nothing published
next_src 2
rc=0
AWS_SECRET_ACCESS_KEY=not-the-secret-key-0000000000000000000000 \
	t "$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/cc-wrong" --quiet \
	"$T/tree.2" >"$T/out" 2>"$T/err" || rc=$?
[ "$rc" = 1 ] || fail "commit with a wrong secret exited $rc, expected 1"
[ ! -s "$T/out" ] || fail "commit with a wrong secret printed a version: $(cat "$T/out")"
grep -q "SignatureDoesNotMatch" "$T/err" || fail "no reason given: $(cat "$T/err")"
grep -q "wrong secret key" "$T/err" || fail "no hint given: $(cat "$T/err")"
grep -q "not-the-secret" "$T/err" && fail "the secret appears in the message"
awscli s3 ls --recursive "$STORE/versions/" >"$T/ls" || true
[ "$(grep -c versions/ "$T/ls")" = 1 ] || fail "versions after a refused commit: $(cat "$T/ls")"
log "wrong secret: $(grep -m1 SignatureDoesNotMatch "$T/err")"

# a credentials file readable by others is refused by the mount
cp "$S3_CREDS" "$T/creds644"
chmod 644 "$T/creds644"
mkdir -p "$T/mnt-bad"
rc=0
t "$DCRFS" "$STORE" "$T/mnt-bad" -f -o "cache_dir=$T/cache-bad,${S3_OPTS/credentials=$S3_CREDS/credentials=$T/creds644}" \
	>"$T/err" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "dcrfs accepted a mode 644 credentials file"
mountpoint -q "$T/mnt-bad" && fail "dcrfs mounted with a mode 644 credentials file"
grep -q "accessible by group or others" "$T/err" || fail "mode 644 refused without saying why: $(cat "$T/err")"
log "mode 644 credentials refused: $(grep -m1 accessible "$T/err")"

# gateway gone mid-read: EIO within the bounded time, mount stays up
export DCR_S3_READ_TIMEOUT_MS=4000
s3_mount "$STORE" "$T/mnt" "$S3_OPTS,cache_dir=$T/cache,prefetch=none"
t cat "$T/mnt/v1/b.txt" >/dev/null || fail "read before the outage failed"
"$S3_SERVER" stop-gateway "$S3_DIR"
start=$(date +%s)
if t cat "$T/mnt/v1/a.bin" >/dev/null 2>"$T/err"; then
	"$S3_SERVER" start-gateway "$S3_DIR"
	fail "reading a cold file with the gateway down succeeded"
fi
took=$(($(date +%s) - start))
grep -q "Input/output error" "$T/err" || fail "read with the gateway down: $(cat "$T/err"), expected EIO"
[ "$took" -le 40 ] || fail "EIO took $took s"
mountpoint -q "$T/mnt" || fail "the mount went away during the outage"
ls "$T/mnt/v1" >/dev/null || fail "listing failed during the outage"
log "gateway down: EIO after $took s, mount still up"
"$S3_SERVER" start-gateway "$S3_DIR" 2>>"$T/s3-start.log"
t cmp "$T/tree.1/a.bin" "$T/mnt/v1/a.bin" || fail "read after the gateway came back failed"
t diff -r "$T/tree.1" "$T/mnt/v1" || fail "v1 differs after the outage"
umount_dcrfs "$T/mnt" || fail "dcrfs did not unmount cleanly"
log "ok"
