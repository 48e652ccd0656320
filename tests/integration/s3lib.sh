# shellcheck shell=bash
# s3lib.sh - an S3 server for the S3 integration tests. Source it after
# lib.sh, then call s3_setup.
#
# Environment:
#   DCR_S3_DIR   a server already started with "scripts/s3-server start
#                KIND DIR" (e.g. once by scripts/check for all tests): use
#                it and leave it running. Otherwise each test starts its
#                own server under $T and stops it (by PID) on exit.
#   DCR_S3_KIND  radosgw (default) or moto, for a server of our own.
#
# After s3_setup: the server's env is exported (AWS_ENDPOINT_URL, keys,
# AWS_REGION, DCR_S3_BUCKET, DCR_S3_SERVER), S3_DIR is its directory,
# S3_CREDS a 0600 AWS credentials file with its keys, S3_OPTS the mount
# options that reach it without any environment (endpoint, region,
# credentials, path_style), and s3_url NAME names a store private to this
# run of this test.

S3_SERVER=$DCR_SRCDIR/scripts/s3-server
S3_OWN=0

_s3_exit() {
	local rc=$?
	set +e
	if [ "$S3_OWN" = 1 ]; then
		# unmount first, so no daemon waits on a server that is gone
		local m
		for m in "${_mounts[@]}"; do
			mountpoint -q "$m" && timeout -k 2 10 fusermount3 -u "$m" 2>/dev/null
		done
		"$S3_SERVER" stop "$S3_DIR" >/dev/null 2>&1
	fi
	(exit "$rc")
	_cleanup
}

# s3_setup [KIND] - find or start the server; skip (77) if none can run.
s3_setup() {
	local kind=${1:-${DCR_S3_KIND:-radosgw}} rc=0
	command -v python3 >/dev/null 2>&1 || skip "python3 is missing"
	if [ -n "${DCR_S3_DIR:-}" ]; then
		[ -f "$DCR_S3_DIR/env" ] || skip "DCR_S3_DIR=$DCR_S3_DIR has no env file"
		S3_DIR=$DCR_S3_DIR
	else
		S3_DIR=$T/s3
		trap _s3_exit EXIT
		S3_OWN=1
		log "starting $kind (scripts/s3-server start $kind $S3_DIR)"
		"$S3_SERVER" start "$kind" "$S3_DIR" >"$T/s3-start.log" 2>&1 || rc=$?
		if [ "$rc" -ne 0 ]; then
			tail -n 20 "$T/s3-start.log" >&2
			skip "cannot start an S3 server ($kind): status $rc"
		fi
		log "$(tail -n 1 "$T/s3-start.log")"
	fi
	# shellcheck disable=SC1091
	. "$S3_DIR/env"
	S3_RUN=$TEST_NAME-$(date +%s)-$$
	S3_CREDS=$T/s3-creds
	(umask 077 && printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
		"$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" >"$S3_CREDS")
	S3_OPTS="endpoint=$AWS_ENDPOINT_URL,region=$AWS_REGION,credentials=$S3_CREDS,path_style"
}

# s3_store [KIND] - s3_setup, then STORE: this run's store "store".
s3_store() {
	s3_setup "$@"
	STORE=$(s3_url store)
}

# s3_url NAME - a store URL private to this test run.
s3_url() {
	printf 's3://%s/%s/%s' "$DCR_S3_BUCKET" "$S3_RUN" "$1"
}

# awscli ARGS... - the aws CLI against the test server, bounded.
awscli() {
	t aws --endpoint-url "$AWS_ENDPOINT_URL" "$@"
}

# s3_mount STORE MNT OPTS - mount_dcrfs without any AWS_* variable or
# ~/.aws in dcrfs's environment, as from fstab: OPTS must say it all.
s3_mount() {
	local saved home=$HOME
	saved=$(export -p | grep -E '^declare -x AWS_' | sed 's/^declare -x/declare -gx/' || true)
	unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_REGION \
		AWS_DEFAULT_REGION AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 AWS_PROFILE
	HOME=$T/nohome
	mount_dcrfs "$@"
	HOME=$home
	eval "$saved"
}

# fault_rules FILE JSON - replace the rules of a faultproxy.py: a new
# file renamed over FILE, so its inode differs and the proxy (which
# compares FILE's inode, size and mtime at every request) applies JSON
# from its next request on, with no wait for a coarse mtime to move.
fault_rules() {
	printf '%s\n' "$2" >"$1.tmp"
	mv "$1.tmp" "$1"
}

# start_faultproxy UPSTREAM RULES LOG - a fault proxy on loopback
# (tests/integration/faultproxy.py) in front of the S3 endpoint UPSTREAM,
# applying the rules in file RULES (fault_rules replaces them) and
# logging each fault to LOG; sets PROXY (its URL) and PROXY_PID. The
# test's cleanup stops it (start_bg); a second call starts another.
start_faultproxy() {
	rm -f "$T/proxy.port"
	start_bg python3 "$DCR_SRCDIR/tests/integration/faultproxy.py" \
		"$1" "$2" "$T/proxy.port" "$3"
	PROXY_PID=$BG_PID
	wait_for_file "$T/proxy.port" 20 || fail "the fault proxy did not start"
	PROXY=http://127.0.0.1:$(cat "$T/proxy.port")
}

# read_or_eio TAG MNT V TREE - every file of $FILES under MNT/vV is
# TREE's bytes or fails with EIO, never other bytes; writes "ok" or "eio"
# per file into $T/read.TAG
read_or_eio() {
	local tag=$1 mnt=$2 v=$3 tree=$4 f out
	: >"$T/read.$tag"
	for f in $FILES; do
		out=$T/out.$tag.$(basename "$f")
		if t cat "$mnt/v$v/$f" >"$out" 2>"$out.err"; then
			cmp -s "$out" "$tree/$f" || fail "$tag: v$v/$f: WRONG BYTES served"
			echo ok >>"$T/read.$tag"
		else
			grep -q "Input/output error" "$out.err" ||
				fail "$tag: v$v/$f: neither the bytes nor EIO: $(cat "$out.err")"
			echo eio >>"$T/read.$tag"
		fi
	done
}

# wait_for_file PATH SECONDS - until PATH exists; 1 if it never does.
wait_for_file() {
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		[ -e "$1" ] && return 0
		sleep 0.1
	done
	return 1
}

# make_src DIR SEED - a small tree: two binary files across several
# chunks, a nested one, a text file, an empty file and an executable.
make_src() {
	local d=$1 s=$2
	mkdir -p "$d/nested/deep" "$d/emptydir"
	rand_file "$d/a.bin" $((3 * 1024 * 1024 + 17)) "a$s"
	rand_file "$d/nested/deep/c.bin" $((1536 * 1024 + 123)) "c$s"
	printf 'hello %s\n' "$s" >"$d/b.txt"
	: >"$d/empty"
	printf '#!/bin/sh\necho %s\n' "$s" >"$d/run.sh"
	chmod 755 "$d/run.sh"
}

# next_src N - tree.N: tree.N-1 with a small edit and a new file.
next_src() {
	rm -rf "$T/tree.$1"
	cp -a "$T/tree.$(($1 - 1))" "$T/tree.$1"
	flip_bytes "$T/tree.$1/a.bin" 0.01 "$1"
	rand_file "$T/tree.$1/added.$1" $((70000 + $1)) "add$1"
}
