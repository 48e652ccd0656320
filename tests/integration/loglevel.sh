#!/usr/bin/env bash
# loglevel.sh - the log level and the AWS flags of every tool, and one
# line per error:
#  - dcrfs-commit and dcrfs-ctl --log-level: error shows no info line
#    (and beats -v), info shows the summary, a bad level is a usage
#    error (2) (the mount's -o log_level: metrics.sh);
#  - a failed commit says why once, without an echo line after it;
#  - --region, --profile and --endpoint-url beat AWS_REGION, the
#    AWS_ACCESS_KEY_ID variables and AWS_ENDPOINT_URL, as in the aws CLI
#    (each bad flag value is named although the variable is good; no
#    request is sent: all fail while the settings are resolved).
. "$(dirname "$0")/lib.sh"
need_bins "$DCR_BUILDDIR/dcrfs-ctl"
CTL=$DCR_BUILDDIR/dcrfs-ctl
mkdir -p "$T/tree" "$T/empty"
rand_file "$T/tree/w.bin" 300000 a

# --log-level on dcrfs-commit
t "$DCRFS_COMMIT" --init --store "$STORE" --cache-dir "$T/cc" --log-level error \
	"$T/tree" >"$T/out" 2>"$T/err" || fail "commit --log-level error: $(cat "$T/err")"
[ -s "$T/err" ] && fail "commit --log-level error printed: $(cat "$T/err")"
rand_file "$T/tree/w.bin" 300000 b
t "$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/cc" --log-level info \
	"$T/tree" >"$T/out" 2>"$T/err" || fail "commit --log-level info: $(cat "$T/err")"
grep -q ': info: version 2 ' "$T/err" || fail "commit --log-level info shows no summary: $(cat "$T/err")"
rand_file "$T/tree/w.bin" 300000 b2
t "$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/cc" -v --log-level error \
	"$T/tree" >"$T/out" 2>"$T/err" || fail "commit -v --log-level error: $(cat "$T/err")"
[ -s "$T/err" ] && fail "--log-level error does not beat -v: $(cat "$T/err")"
expect_status 2 "not error, warn" "$DCRFS_COMMIT" --store "$STORE" --log-level loud "$T/tree"

# --log-level on dcrfs-ctl: compact logs at info, not at error
t "$CTL" --store "$STORE" --log-level error compact >"$T/out" 2>"$T/err" ||
	fail "ctl compact: $(cat "$T/err")"
[ -s "$T/err" ] && fail "ctl --log-level error printed: $(cat "$T/err")"
expect_status 2 "not error, warn" "$CTL" --store "$STORE" --log-level loud log

# One line for a refused commit, no echo of it.
expect_status 1 "holds no files" "$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/cc" "$T/empty"
t "$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/cc" "$T/empty" >"$T/out" 2>"$T/err" || true
[ "$(grep -c ': error: ' "$T/err")" = 1 ] || fail "an empty tree gives not one error line: $(cat "$T/err")"
t "$DCRFS_COMMIT" --store "$T/nostore" "$T/tree" >"$T/out" 2>"$T/err" || true
[ "$(wc -l <"$T/err")" = 1 ] || fail "a missing store gives not one line: $(cat "$T/err")"

# Python: a failure is raised once, with one message naming the store
# once, and not printed on stderr as well.
LIBDCR=$DCR_BUILDDIR/.libs/libdcr.so.0
if [ -e "$LIBDCR" ]; then
	py_sanitized "$LIBDCR"
	DCRFS_LIBDCR=$LIBDCR PYTHONPATH=$DCR_SRCDIR/python t python3 - "$T/nostore" \
		>"$T/out" 2>"$T/err" <<'PY' || fail "python: $(cat "$T/out" "$T/err")"
import sys, dcrfs
url = sys.argv[1]
try:
    dcrfs.Commit(url)
except dcrfs.DcrError as e:
    msg = e.strerror
    assert msg.count(url) == 1, msg
    assert "\n" not in msg, msg
    assert "no store there" in msg, msg
    print("raised")
PY
	[ "$(cat "$T/out")" = raised ] || fail "python did not raise: $(cat "$T/out")"
	[ -s "$T/err" ] && fail "python printed the error as well: $(cat "$T/err")"
fi

# AWS flags beat the variables (nothing is listening anywhere).
export HOME=$T/home AWS_ACCESS_KEY_ID=AKIDTEST AWS_SECRET_ACCESS_KEY=secret \
	AWS_REGION=us-east-1 AWS_ENDPOINT_URL=http://127.0.0.1:9
unset AWS_PROFILE AWS_DEFAULT_REGION AWS_ENDPOINT_URL_S3 AWS_CONFIG_FILE AWS_SHARED_CREDENTIALS_FILE
mkdir -p "$HOME"
for tool in "$CTL --store s3://bkt/p" "$DCRFS_COMMIT --store s3://bkt/p"; do
	# shellcheck disable=SC2086
	set -- $tool
	last=log
	[ "$1" = "$DCRFS_COMMIT" ] && last=$T/tree
	expect_fail_msg "invalid region 'bad region'" "$@" --region 'bad region' "$last"
	expect_fail_msg "AWS profile 'nosuch' not found" "$@" --profile nosuch "$last"
	expect_fail_msg "endpoint 'ftp://x' is not http" "$@" --endpoint-url ftp://x "$last"
done
log "ok: --log-level, log_level, one line per error, AWS flag precedence"
