#!/usr/bin/env bash
# s3_gc.sh - dcrfs-ctl gc on an S3 store (radosgw by default, DCR_S3_KIND=moto
# for the other implementation): incomplete multipart uploads (what a
# commit killed in the middle of a big pack leaves, billed until aborted)
# and packs no manifest names are kept while younger than --grace and
# collected once older; uploads of other prefixes are never touched; an
# upload time older than the store (moto's placeholder) is not believed.
. "$(dirname "$0")/lib.sh"
. "$DCR_SRCDIR/tests/integration/s3lib.sh"
DCRFS_CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$DCRFS_CTL"
command -v aws >/dev/null 2>&1 || skip "the aws CLI is missing"
s3_store
BUCKET=${STORE#s3://}
BUCKET=${BUCKET%%/*}
PREFIX=${STORE#s3://"$BUCKET"/}
ctl() { t "$DCRFS_CTL" --store "$STORE" "$@"; }

make_src "$T/tree.1" 1
[ "$(commit "$STORE" "$T/tree.1")" = 1 ] || fail "commit of tree.1 is not version 1"

# start_upload KEY - an incomplete multipart upload with one part
start_upload() {
	local id
	id=$(awscli s3api create-multipart-upload --bucket "$BUCKET" --key "$1" \
		--query UploadId --output text)
	head -c 100000 /dev/urandom >"$T/part"
	awscli s3api upload-part --bucket "$BUCKET" --key "$1" --part-number 1 \
		--upload-id "$id" --body "$T/part" >/dev/null
}
# uploads PREFIX - the keys of the incomplete uploads under PREFIX, sorted
uploads() {
	awscli s3api list-multipart-uploads --bucket "$BUCKET" --prefix "$1" \
		--query 'Uploads[].Key' --output text | tr '\t' '\n' | grep -v '^None$' | sort || true
}
orphan=packs/$(printf '%064d' 9)

start_upload "$PREFIX/packs/$(printf '%064d' 1)"
start_upload "$PREFIX-other/packs/$(printf '%064d' 2)" # not this store
printf 'orphan' >"$T/orphan"
awscli s3 cp --quiet "$T/orphan" "$STORE/$orphan"
[ "$(uploads "$PREFIX/")" = "$PREFIX/packs/$(printf '%064d' 1)" ] ||
	fail "the test's upload is not listed: $(uploads "$PREFIX/")"

# moto reports every upload as started at 2010-11-10T20:48:33Z: gc takes
# a time older than the store for unknown, and keeps such uploads
placeholder=0
case $(awscli s3api list-multipart-uploads --bucket "$BUCKET" --prefix "$PREFIX/" \
	--query 'Uploads[0].Initiated' --output text) in
2010-*) placeholder=1; log "the server reports placeholder upload times" ;;
esac

# young: kept, and said so
ctl gc --keep-last 1 --grace 1h >"$T/gc.out" 2>&1
grep -q "1 packs .* named by no manifest and 1 incomplete uploads were kept" "$T/gc.out" ||
	fail "gc does not report the young orphans: $(cat "$T/gc.out")"
[ -n "$(uploads "$PREFIX/")" ] || fail "gc aborted an upload younger than the grace"
awscli s3api head-object --bucket "$BUCKET" --key "$PREFIX/$orphan" >/dev/null ||
	fail "gc deleted an orphan pack younger than the grace"

# a second upload, younger than the grace (10 s) the next gc is given,
# made once the orphan pack (made after the first upload) is 11 s old by
# the server's own stamp: a wait on that time, not a fixed sleep from
# here (the calls above took part of it). The second upload's own calls
# and gc's start must take under 10 s (the aws CLI takes seconds per
# call on a busy host: 4 s and 3 s were too tight a grace for them).
lm=$(awscli s3api head-object --bucket "$BUCKET" --key "$PREFIX/$orphan" \
	--query LastModified --output text)
old_at=$(($(date -d "$lm" +%s) + 11))
now=$(date +%s)
[ "$old_at" -le "$((now + 12))" ] || fail "the orphan's time $lm is ahead of this clock ($(date -u))"
wait_s=$((old_at > now ? old_at - now : 0))
sleep "$wait_s"
log "waited $wait_s s for the orphan to be 11 s old"
start_upload "$PREFIX/packs/$(printf '%064d' 3)"
ctl gc --keep-last 1 --grace 10s >"$T/gc.out" 2>&1
if [ "$placeholder" = 1 ]; then
	[ "$(uploads "$PREFIX/" | wc -l)" = 2 ] ||
		fail "gc aborted an upload whose age it cannot know: $(uploads "$PREFIX/")"
else
	grep -q "abort incomplete upload packs/$(printf '%064d' 1)" "$T/gc.out" ||
		fail "gc does not name the stale upload: $(cat "$T/gc.out")"
	[ "$(uploads "$PREFIX/")" = "$PREFIX/packs/$(printf '%064d' 3)" ] ||
		fail "after gc --grace 10s the uploads are: $(uploads "$PREFIX/")"
fi
[ -n "$(uploads "$PREFIX-other/")" ] || fail "gc aborted an upload of another prefix"
if awscli s3api head-object --bucket "$BUCKET" --key "$PREFIX/$orphan" >/dev/null 2>&1; then
	fail "gc kept an orphan pack older than the grace"
fi
ctl verify -q || fail "version 1 broke in the collection"

# --grace 0: everything incomplete goes
ctl gc --keep-last 1 --grace 0 -q >/dev/null
[ -z "$(uploads "$PREFIX/")" ] || fail "gc --grace 0 left uploads: $(uploads "$PREFIX/")"
id=$(awscli s3api list-multipart-uploads --bucket "$BUCKET" --prefix "$PREFIX-other/" \
	--query 'Uploads[0].UploadId' --output text)
awscli s3api abort-multipart-upload --bucket "$BUCKET" --upload-id "$id" \
	--key "$PREFIX-other/packs/$(printf '%064d' 2)"
log "ok"
