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
PY=/usr/bin/python3
[ -x "$PY" ] || skip "$PY not found"
"$PY" -c 'import numpy' 2>/dev/null || skip "$PY lacks numpy (apt-get install python3-numpy)"
CTL=$DCR_BUILDDIR/dcrfs-ctl
need_bins "$CTL"

B=$T/build
P=$T/prefix
STORE=$T/store
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
