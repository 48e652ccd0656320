#!/usr/bin/env bash
# unchanged.sh - a tree equal to its parent's is refused (one line,
# nothing published) unless --allow-unchanged (Python: allow_unchanged),
# while a changed mode or byte is committed; a commit whose parent
# stopped being latest while it ran (another committer published
# meanwhile, from the DCRFS_TEST_COMMIT_BEFORE_OPEN hook) warns that
# the other's version is not in it.
. "$(dirname "$0")/lib.sh"
CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$CTL"
mkdir -p "$T/tree/sub"
rand_file "$T/tree/sub/w.bin" 300000 a
echo hello >"$T/tree/r.txt"
commit "$STORE" "$T/tree" >/dev/null
nv() { t "$CTL" --store "$STORE" log --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))'; }

expect_status 1 "$T/tree is unchanged since version 1 \(the same files, modes and bytes\): nothing was published \(pass --allow-unchanged" \
	"$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/cc" "$T/tree"
[ "$(grep -c "error" "$T/out")" = 1 ] || fail "more than one error line: $(cat "$T/out")"
[ "$(nv)" = 1 ] || fail "an unchanged tree was published"
v=$(t "$DCRFS_COMMIT" --quiet --allow-unchanged --store "$STORE" --cache-dir "$T/cc" "$T/tree") ||
	fail "--allow-unchanged refused"
[ "$v" = 2 ] || fail "--allow-unchanged published $v"
chmod 600 "$T/tree/r.txt"
[ "$(t "$DCRFS_COMMIT" --quiet --store "$STORE" --cache-dir "$T/cc" "$T/tree")" = 3 ] ||
	fail "a changed mode was refused"
printf x >>"$T/tree/r.txt"
[ "$(t "$DCRFS_COMMIT" --quiet --store "$STORE" --cache-dir "$T/cc" "$T/tree")" = 4 ] ||
	fail "a changed byte was refused"

LIBDCR=$DCR_BUILDDIR/.libs/libdcr.so
if [ -x /usr/bin/python3 ] && [ -e "$LIBDCR" ]; then
	py_sanitized "$LIBDCR"
	DCRFS_LIBDCR=$LIBDCR PYTHONPATH=$DCR_SRCDIR/python t /usr/bin/python3 - "$STORE" "$T/pc" "$T/tree" <<'PY' ||
import errno, sys
import dcrfs
store, cache, tree = sys.argv[1:]
for allow in (False, True):
    with dcrfs.Commit(store, cache_dir=cache, allow_unchanged=allow) as c:
        c.add_tree(tree)
        try:
            v = c.publish()
        except dcrfs.DcrError as e:
            assert not allow and e.errno == errno.ENODATA and "unchanged since version 4" in str(e), e
        else:
            assert allow and v == 5, (allow, v)
PY
		fail "Python's allow_unchanged"
	log "ok: Python allow_unchanged"
fi

[ "${DCR_TEST_HOOKS:-}" = yes ] || { log "no test hooks: the racing committer part is not run"; exit 0; }
mkdir -p "$T/other"
rand_file "$T/other/o.bin" 1000 o
printf y >>"$T/tree/r.txt"
DCRFS_TEST_COMMIT_BEFORE_OPEN='case "$1" in */r.txt) DCRFS_TEST_COMMIT_BEFORE_OPEN= "'"$DCRFS_COMMIT"'" --quiet --store "'"$STORE"'" --cache-dir "'"$T/oc"'" "'"$T/other"'" >/dev/null;; esac' \
	t "$DCRFS_COMMIT" --store "$STORE" --cache-dir "$T/cc" "$T/tree" >"$T/out" 2>"$T/err" ||
	fail "the racing commit failed: $(cat "$T/err")"
[ "$(cat "$T/out")" = 7 ] || fail "the racing commit published $(cat "$T/out"), not 7"
grep -q "warning: file://$STORE: published as version 7, built on version 5, which stopped being the latest while this commit ran: version 6 is another committer's and not in it" "$T/err" ||
	fail "no warning about the racing committer: $(cat "$T/err")"
log "ok: unchanged trees refused, --allow-unchanged, a racing committer warned of"
