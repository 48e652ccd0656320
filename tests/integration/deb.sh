#!/usr/bin/env bash
# deb.sh - the Debian package as an admin uses it: debian/ is built with
# `dpkg-buildpackage -b -us -uc` from a copy of the source tree (the tree
# and its build/ are left alone; no tests inside the package build), the
# four packages are installed with dpkg -i, a tree is committed with
# /usr/bin/dcrfs-commit, the store is mounted with `mount -t fuse.dcrfs`
# (mount(8) -> mount.fuse3 -> /usr/bin/dcrfs, no PATH set up), the
# module is imported and used by /usr/bin/python3, a program is built
# against libdcr through `pkg-config dcr`, the example systemd units pass
# `systemd-analyze verify`, and everything is purged again.
# The build leaves nothing untracked that debian/.gitignore does not name.
# Skips when a dcrfs package is already installed (it is not ours to
# replace) or the packaging tools are missing (scripts/install-deps).
. "$(dirname "$0")/lib.sh"
need_root
need_fuse
command -v dpkg-buildpackage >/dev/null 2>&1 || skip "dpkg-buildpackage missing (scripts/install-deps)"
dpkg-checkbuilddeps "$DCR_SRCDIR/debian/control" >/dev/null 2>&1 ||
	skip "build dependencies missing: $(dpkg-checkbuilddeps "$DCR_SRCDIR/debian/control" 2>&1 | tail -1)"
PKGS=(python3-dcrfs libdcr-dev dcrfs libdcr0)
for p in "${PKGS[@]}"; do
	st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
	case $st in '' | not-installed) ;; *) skip "package $p is already on this machine ($st)" ;; esac
done
for f in /usr/bin/dcrfs /usr/bin/dcrfs-commit /usr/lib/python3/dist-packages/dcrfs; do
	[ -e "$f" ] && skip "$f exists outside any package: not ours to replace"
done

# A copy of the tree, without builds, demos or a configured state.
SRC=$T/src/dcrfs
mkdir -p "$SRC"
tar -C "$DCR_SRCDIR" --exclude-vcs --exclude=./build --exclude='./build-*' \
	--exclude=./demo --exclude=./debian/build --exclude=./autom4te.cache \
	--exclude=./config.status --exclude=./config.log --exclude=./config.h \
	--exclude=./Makefile --exclude=./libtool --exclude=./dcr.pc --exclude=./stamp-h1 \
	-cf - . | tar -C "$SRC" -xf -
# a git repository of the copy, to see what the build leaves behind
# that the .gitignore files do not name
cp "$DCR_SRCDIR/.gitignore" "$SRC/.gitignore"
cp "$DCR_SRCDIR/debian/.gitignore" "$SRC/debian/.gitignore"
git -C "$SRC" init -q && git -C "$SRC" add -A &&
	git -C "$SRC" -c user.name=t -c user.email=t@t commit -qm tree ||
	fail "git init of the copy failed"
log "dpkg-buildpackage -b -us -uc (nocheck, -j$(nproc))"
(cd "$SRC" && DEB_BUILD_OPTIONS="nocheck noddebs parallel=$(nproc)" \
	DCR_TIMEOUT=1500 t dpkg-buildpackage -b -us -uc) >"$T/build.log" 2>&1 ||
	fail "dpkg-buildpackage failed: $(tail -30 "$T/build.log")"
left=$(git -C "$SRC" status --porcelain --untracked-files=all)
[ -z "$left" ] || fail "dpkg-buildpackage left files no .gitignore names: $left"
debs=()
for p in "${PKGS[@]}"; do
	f=$(ls "$T"/src/"${p}"_*.deb 2>/dev/null | head -1)
	[ -n "$f" ] || fail "no $p package built: $(ls "$T/src")"
	debs+=("$f")
done
want_in() { # PACKAGE PATH...
	local deb=$1 p
	shift
	dpkg-deb -c "$deb" | awk '{ print substr($6, 2) }' >"$T/list"
	for p in "$@"; do
		grep -qxF "$p" "$T/list" || fail "$(basename "$deb") lacks $p"
	done
}
MA=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
want_in "${debs[2]}" /usr/bin/dcrfs /usr/bin/dcrfs-commit /usr/bin/dcrfs-ctl /usr/bin/dcrfs-synth \
	/usr/share/man/man8/dcrfs.8.gz /usr/share/man/man8/dcrfs-ctl.8.gz \
	/usr/share/man/man1/dcrfs-commit.1.gz /usr/share/man/man1/dcrfs-synth.1.gz \
	/usr/share/doc/dcrfs/examples/mnt-dcr.mount /usr/share/doc/dcrfs/examples/mnt-dcr.automount \
	/usr/share/doc/dcrfs/examples/dcrfs@.service /usr/share/doc/dcrfs/examples/mnt-dcr.env \
	/usr/share/doc/dcrfs/examples/rollout_worker.py \
	/usr/share/doc/dcrfs/examples/k8s/node-daemonset.yaml /usr/share/doc/dcrfs/examples/k8s/fuse-fd-helper.py \
	/usr/share/bash-completion/completions/dcrfs /usr/share/bash-completion/completions/dcrfs-ctl
want_in "${debs[3]}" "/usr/lib/$MA/libdcr.so.0.0.0"
want_in "${debs[1]}" /usr/include/dcr.h "/usr/lib/$MA/pkgconfig/dcr.pc"
want_in "${debs[0]}" /usr/lib/python3/dist-packages/dcrfs/__init__.py \
	/usr/lib/python3/dist-packages/dcrfs/_delta.py \
	/usr/lib/python3/dist-packages/dcrfs/_read.py \
	/usr/lib/python3/dist-packages/dcrfs/_mount.py \
	/usr/lib/python3/dist-packages/dcrfs/_paths.py
grep -q '\.pyc$' "$T/list" && fail "python3-dcrfs ships .pyc files"

# From here on the packages may be installed: the exit purges them.
purge() {
	dpkg --purge "${PKGS[@]}" >"$T/purge.log" 2>&1 || cat "$T/purge.log" >&2
}
trap '_rc=$?; purge; (exit $_rc); _cleanup' EXIT
t dpkg -i "${debs[@]}" >"$T/install.log" 2>&1 || fail "dpkg -i failed: $(tail -20 "$T/install.log")"

mkdir -p "$T/tree" "$MNT"
rand_file "$T/tree/model.bin" 1300000 deb
printf 'config\n' >"$T/tree/config.json"
v=$(cd / && t env PATH=/usr/bin:/bin dcrfs-commit --init --quiet --store "$STORE" \
	--cache-dir "$T/cc" "$T/tree") || fail "installed dcrfs-commit failed"
[ "$v" = 1 ] || fail "installed dcrfs-commit made version '$v', not 1"

register_mount "$MNT"
t env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin mount -t fuse.dcrfs \
	-o ro,_netdev,cache_dir="$T/cache" "$STORE" "$MNT" >"$T/mount.log" 2>&1 ||
	fail "mount -t fuse.dcrfs failed: $(cat "$T/mount.log")"
[ "$(findmnt -n -o FSTYPE --target "$MNT")" = fuse.dcrfs ] || fail "$MNT is not fuse.dcrfs"
diff -r "$T/tree" "$MNT/latest/" || fail "the mount differs from the tree"
t umount "$MNT" || fail "umount $MNT failed"
_forget_mount "$MNT"

cat >"$T/t.py" <<'PYEOF'
import sys, dcrfs
store, cache = sys.argv[1:3]
assert dcrfs.__file__.startswith("/usr/lib/python3/dist-packages/dcrfs/"), dcrfs.__file__
with dcrfs.Commit(store, cache_dir=cache) as c:
    c.add_bytes("config.json", b"config 2\n")
    info = c.publish()
print(getattr(info, "version", info))
PYEOF
out=$(cd / && t env -u PYTHONPATH -u LD_LIBRARY_PATH /usr/bin/python3 "$T/t.py" "$STORE" "$T/cc" 2>&1) ||
	fail "/usr/bin/python3 with python3-dcrfs: $out"
[ "${out##*$'\n'}" = 2 ] || fail "the Python commit printed '$out', not version 2"

printf '#include <dcr.h>\nint main(void) { dcr_set_log_level(0); return dcr_errmsg() == 0 ? 0 : 0; }\n' >"$T/c.c"
# shellcheck disable=SC2046
cc -o "$T/c" "$T/c.c" $(pkg-config --cflags --libs dcr) 2>"$T/cc.log" ||
	fail "cannot build against libdcr-dev: $(cat "$T/cc.log")"
"$T/c" || fail "a program linked with the installed libdcr does not run"

if command -v systemd-analyze >/dev/null 2>&1; then
	# the service with its own ExecStart= (/usr/bin/dcrfs, installed)
	(cd /usr/share/doc/dcrfs/examples && t systemd-analyze verify ./mnt-dcr.mount ./mnt-dcr.automount \
		./dcrfs@mnt-dcr.service) \
		>"$T/verify.log" 2>&1 || fail "systemd-analyze verify: $(cat "$T/verify.log")"
fi

purge
for f in /usr/bin/dcrfs /usr/lib/python3/dist-packages/dcrfs "/usr/lib/$MA/libdcr.so.0"; do
	[ -e "$f" ] && fail "$f is left after dpkg --purge"
done
log "ok: built, installed, committed, mounted as fuse.dcrfs, used from python3 and C, purged"
