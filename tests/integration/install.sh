#!/usr/bin/env bash
# install.sh - `make install` of libdcr and the Python module, used by
# Debian's /usr/bin/python3 as a user would: the tree is configured in a
# scratch directory with a temporary --prefix and PYTHON=/usr/bin/python3,
# only what the module needs is built and installed (libdcr and
# python/dcrfs with its generated _paths.py), then the installed module
# is imported with PYTHONPATH set to the installed site directory and no
# LD_LIBRARY_PATH or DCRFS_LIBDCR, and commits a numpy state dict to a
# local store; dcrfs-ctl (from the build under test) verifies it.
# Checks that the site directory is the one Debian's python3 reads for
# that prefix (PREFIX/lib/python3.X/dist-packages, as
# /usr/local/lib/python3.X/dist-packages), that the module imported is
# the installed one and that it loaded the installed libdcr.
. "$(dirname "$0")/lib.sh"
need_numpy
CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$CTL"

B=$T/build
P=$T/prefix
mkdir -p "$B"
# -O0: this is about installed files, not speed; keeps the build short.
(cd "$B" && DCR_TIMEOUT=300 t "$DCR_SRCDIR/configure" -q --prefix="$P" \
	PYTHON="$PY" CFLAGS='-O0 -g0') >"$T/configure.log" 2>&1 ||
	fail "configure failed: $(tail -20 "$T/configure.log")"
DCR_TIMEOUT=600 t make -C "$B" -j2 -s libdcr.la python/dcrfs/_paths.py >"$T/make.log" 2>&1 ||
	fail "build failed: $(tail -20 "$T/make.log")"
DCR_TIMEOUT=120 t make -C "$B" -s install-libLTLIBRARIES install-dcrfspyPYTHON \
	install-nodist_dcrfspyPYTHON >"$T/install.log" 2>&1 ||
	fail "make install failed: $(tail -20 "$T/install.log")"

# Where Debian's python3 looks for a prefix: its posix_local scheme for
# /usr (i.e. /usr/local/lib/python3.X/dist-packages) with /usr/local
# replaced by the prefix.
rel=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib", "posix_local", vars={"base": "/usr"}))')
case $rel in
/usr/local/*) SITE=$P/${rel#/usr/local/} ;;
*) skip "$PY is not Debian's (site dir $rel)" ;;
esac
[ -f "$SITE/dcrfs/__init__.py" ] ||
	fail "the module is not installed in $SITE, where $PY looks: $(cd "$P" && find . -name '__init__.py')"
grep -q "^LIBDIR = '$P/lib'\$" "$SITE/dcrfs/_paths.py" ||
	fail "_paths.py does not name the installed libdir: $(cat "$SITE/dcrfs/_paths.py" 2>&1)"
ls "$P"/lib/libdcr.so.0* >/dev/null 2>&1 || fail "libdcr is not installed in $P/lib"

cat >"$T/t.py" <<'PYEOF'
import os, sys
import numpy as np
import dcrfs

site, prefix, store, cache = sys.argv[1:5]
assert os.path.realpath(dcrfs.__file__).startswith(os.path.realpath(site) + "/"), dcrfs.__file__
rng = np.random.default_rng(3)
sd = {
    "layers.0.w": rng.standard_normal((256, 512)).astype(np.float32),
    "layers.0.b": rng.standard_normal(512).astype(np.float32),
    "ids": np.arange(10, dtype=np.int64),
}
with dcrfs.Commit(store, init=True, cache_dir=cache) as c:
    c.add_safetensors("model.safetensors", sd, metadata={"step": "1"})
    c.add_bytes("config.json", b'{"hidden": 512}\n')
    info = c.publish()
libs = [l.split()[-1] for l in open("/proc/self/maps") if "libdcr.so" in l]
want = os.path.realpath(os.path.join(prefix, "lib"))
assert libs and all(os.path.realpath(l).startswith(want + "/") for l in libs), libs
print(getattr(info, "version", info))
PYEOF
out=$(t env -u LD_LIBRARY_PATH -u DCRFS_LIBDCR PYTHONPATH="$SITE" \
	"$PY" "$T/t.py" "$SITE" "$P" "$STORE" "$T/cc" 2>&1) ||
	fail "the installed module failed: $out"
t "$CTL" --store "$STORE" verify --deep >"$T/verify" 2>&1 ||
	fail "the committed version does not verify: $(cat "$T/verify")"
t "$CTL" --store "$STORE" show 1 >"$T/show" 2>&1 || fail "show 1: $(cat "$T/show")"
grep -q "model.safetensors" "$T/show" && grep -q "config.json" "$T/show" ||
	fail "version 1 lacks the committed files: $(cat "$T/show")"
log "ok: installed module ($SITE) committed version 1 with the installed libdcr"

# 2. As the README's newcomer does it: `../configure && make install`
#    with no PYTHON= and no --prefix, a pyenv-like python3 first on PATH
#    (configure must still choose /usr/bin/python3, the one that reads
#    the result), then `/usr/bin/python3 -c 'import dcrfs; dcrfs.Commit'`
#    from any directory with no PYTHONPATH, then `make uninstall` leaves
#    nothing. The build directory holds core/ as every out-of-tree build
#    does: configure says nothing about it. /usr/local is a scratch
#    directory in a private mount namespace: nothing changes outside it.
[ "$(id -u)" -eq 0 ] || { log "not root: default-prefix install not tried"; exit 0; }
unshare -m --propagation private true 2>/dev/null || {
	log "no private mount namespaces: default-prefix install not tried"
	exit 0
}
B2=$T/build2
mkdir -p "$B2/core" "$T/fakebin" "$T/usrlocal"
printf '#!/bin/sh\necho "the pyenv python3 was run" >&2\nexit 1\n' >"$T/fakebin/python3"
cp "$T/fakebin/python3" "$T/fakebin/python"
chmod +x "$T/fakebin/python3" "$T/fakebin/python"
(cd "$B2" && PATH=$T/fakebin:$PATH DCR_TIMEOUT=300 t "$DCR_SRCDIR/configure" \
	CFLAGS='-O0 -g0') >"$T/configure2.log" 2>&1 ||
	fail "configure with the default prefix failed: $(tail -20 "$T/configure2.log")"
grep -q "cannot remove 'core'" "$T/configure2.log" &&
	fail "configure complains about core/: $(grep -c "cannot remove 'core'" "$T/configure2.log") lines"
line=$(grep 'python module:' "$T/configure2.log") || fail "no python module line in configure's summary"
case $line in
*'${'*) fail "configure's summary is unexpanded: $line" ;;
*"/usr/local/lib/python3"*"/dist-packages/dcrfs (/usr/bin/python3)") ;;
*) fail "configure chose another python or directory: $line" ;;
esac
DCR_TIMEOUT=600 t make -C "$B2" -j2 -s libdcr.la python/dcrfs/_paths.py >"$T/make2.log" 2>&1 ||
	fail "build failed: $(tail -20 "$T/make2.log")"
cat >"$T/ns2.sh" <<'NS'
set -eu
T=$1 B2=$2
mount --bind "$T/usrlocal" /usr/local
make -C "$B2" -s install-libLTLIBRARIES install-dcrfspyPYTHON install-nodist_dcrfspyPYTHON
cd /
env -u PYTHONPATH -u LD_LIBRARY_PATH -u DCRFS_LIBDCR /usr/bin/python3 -c \
	'import dcrfs, sys; dcrfs.Commit; print(dcrfs.__file__)'
make -C "$B2" -s uninstall-libLTLIBRARIES uninstall-dcrfspyPYTHON uninstall-nodist_dcrfspyPYTHON
left=$(find /usr/local -name 'libdcr*' -o -name '__init__.py' -path '*dcrfs*' | head -3)
[ -z "$left" ] || { echo "left after uninstall: $left"; exit 1; }
echo ns2-ok
NS
out=$(t unshare -m --propagation private bash "$T/ns2.sh" "$T" "$B2" 2>&1) ||
	fail "default-prefix install, import, uninstall: $out"
[ "${out##*$'\n'}" = ns2-ok ] || fail "default-prefix install: $out"
case $out in
*/usr/local/lib/python3*/dist-packages/dcrfs/__init__.py*) ;;
*) fail "/usr/bin/python3 imported dcrfs from elsewhere: $out" ;;
esac
log "ok: configure && make install with the default prefix: /usr/bin/python3 imports dcrfs; uninstall leaves nothing"
