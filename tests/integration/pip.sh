#!/usr/bin/env bash
# pip.sh - the Python module as a package (python/pyproject.toml, its
# in-tree build backend python/_build/dcrfs_build.py): in a fresh venv
# of the python3 on PATH (pyenv's, not Debian's), offline,
# `python -m pip install --no-index --no-build-isolation ./python`
# installs it; `import dcrfs; dcrfs.log(store)` then works with libdcr
# from $DCRFS_LIBDCR, and from where the system has it (make install,
# the .deb) when it has one. The package's version is configure.ac's.
. "$(dirname "$0")/lib.sh"
need_bins
PY=$(command -v python3) || skip "no python3 on PATH"
"$PY" -c 'import venv, ensurepip' 2>/dev/null ||
	skip "$PY has no venv/ensurepip module"
LIBDCR=$DCR_BUILDDIR/.libs/libdcr.so
[ -e "$LIBDCR" ] || skip "$LIBDCR not built"
py_sanitized "$LIBDCR"
log "python3 on PATH: $PY ($("$PY" --version 2>&1))"

want=$(sed -n 's/^AC_INIT(\[dcrfs\], \[\([^]]*\)\].*/\1/p' "$DCR_SRCDIR/configure.ac")
got=$(sed -n 's/^version = "\(.*\)"/\1/p' "$DCR_SRCDIR/python/pyproject.toml")
[ -n "$want" ] && [ "$want" = "$got" ] ||
	fail "python/pyproject.toml's version '$got' is not configure.ac's '$want'"

# a copy of python/: the build writes nothing into the source tree
mkdir -p "$T/src"
cp -a "$DCR_SRCDIR/python/." "$T/src/"
rm -f "$T/src/dcrfs/_paths.py"
# (ensurepip installs pip into the venv: slow on a busy machine)
timeout -k 5 $((DCR_TIMEOUT * 4)) "$PY" -m venv "$T/venv" >"$T/venv.log" 2>&1 ||
	{ cat "$T/venv.log" >&2; fail "python3 -m venv failed"; }
timeout -k 5 $((DCR_TIMEOUT * 4)) env -u PYTHONPATH "$T/venv/bin/python" -m pip install \
	--no-index --no-build-isolation --disable-pip-version-check -q "$T/src" >"$T/pip.log" 2>&1 ||
	{ cat "$T/pip.log" >&2; fail "pip install ./python failed"; }

mkdir -p "$T/tree"
printf 'hello\n' >"$T/tree/a"
[ "$(commit "$T/store" "$T/tree")" = 1 ] || fail "commit is not version 1"
check() { # check: import the installed dcrfs (not the tree's) and log
	(cd "$T" && t env -u PYTHONPATH "$@" "$T/venv/bin/python" -c '
import sys, dcrfs
assert dcrfs.__file__.startswith(sys.prefix), dcrfs.__file__
log = dcrfs.log(sys.argv[1])
assert [v["version"] for v in log] == [1], log
assert callable(dcrfs.resolve) and callable(dcrfs.wait)
print("ok", dcrfs.__file__)' "$T/store")
}
check DCRFS_LIBDCR="$LIBDCR" >"$T/out" 2>&1 || { cat "$T/out" >&2; fail "import dcrfs; dcrfs.log failed"; }
log "$(cat "$T/out")"
for lib in /usr/local/lib/libdcr.so.0 /usr/lib/*/libdcr.so.0; do
	[ -e "$lib" ] || continue
	check -u DCRFS_LIBDCR >"$T/out" 2>&1 ||
		{ cat "$T/out" >&2; fail "with $lib installed, dcrfs did not find it"; }
	log "libdcr found without DCRFS_LIBDCR ($lib)"
	break
done
log "ok"
