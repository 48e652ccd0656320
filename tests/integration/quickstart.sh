#!/usr/bin/env bash
# quickstart.sh - scripts/quickstart, run in a copy of the source tree
# (DEMO_SIZE=4M): it asks only about the packages of
# `scripts/install-deps --demo` (the build and fuse3: no Ceph, torch or
# clang; a dpkg-query on PATH logs the questions and answers "installed",
# so nothing is installed), it leaves build/ - scripts/check's build
# directory, which check rebuilds and cleans - alone, and the demo mount's
# daemon runs a binary outside build/, so a later scripts/check cannot
# replace or delete it.
. "$(dirname "$0")/lib.sh"
need_fuse
command -v git >/dev/null 2>&1 && [ -d "$DCR_SRCDIR/.git" ] || [ -f "$DCR_SRCDIR/.git" ] ||
	skip "the source tree is not a git checkout (nothing to copy it with)"
for p in $("$DCR_SRCDIR/scripts/install-deps" --demo --print); do
	[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" = installed ] ||
		skip "package $p of the demo is not installed (scripts/install-deps --demo)"
done

# the default (CI, scripts/check) still installs everything
all=$("$DCR_SRCDIR/scripts/install-deps" --print)
for p in ceph-mon radosgw python3-torch clang fuse3 libfuse3-dev; do
	grep -qx "$p" <<<"$all" || fail "scripts/install-deps no longer installs $p by default"
done

# the tree as a clone would have it (with this checkout's uncommitted edits)
mkdir -p "$T/src" "$T/shim"
(cd "$DCR_SRCDIR" && git ls-files -z | xargs -0 cp -a --parents -t "$T/src") ||
	fail "cannot copy the source tree"
cat >"$T/shim/dpkg-query" <<SH
#!/bin/sh
# the package asked about is the last argument
for p; do :; done
echo "\$p" >>"$T/asked"
printf installed
SH
chmod +x "$T/shim/dpkg-query"

(cd "$T/src" && PATH=$T/shim:$PATH DEMO_SIZE=4M JOBS=2 \
	timeout -k 10 1500 scripts/quickstart) >"$T/qs.log" 2>&1 ||
	{ register_mount "$T/src/demo/mnt"; fail "quickstart failed: $(tail -n 30 "$T/qs.log")"; }
register_mount "$T/src/demo/mnt"
mountpoint -q "$T/src/demo/mnt" || fail "no demo mount: $(tail -n 20 "$T/qs.log")"

# the packages: the demo's only
[ -s "$T/asked" ] || fail "quickstart asked about no package"
bad=$(grep -E '^(ceph|radosgw|python3-torch|clang|llvm|libclang|nginx|fio|s3fs)' "$T/asked" || true)
[ -z "$bad" ] || fail "quickstart asked for packages the demo does not need: $(echo $bad)"
grep -qx fuse3 "$T/asked" || fail "quickstart did not ask for fuse3: $(cat "$T/asked")"

# the build: not in build/, and the mount's daemon runs none of it
[ ! -e "$T/src/build" ] || fail "quickstart built in build/, which scripts/check rebuilds and cleans"
pid=$(pgrep -xf "$T/src/[^ ]*dcrfs $T/src/demo/store $T/src/demo/mnt .*" | head -n1 || true)
[ -n "$pid" ] || fail "cannot find the demo mount's daemon: $(pgrep -af dcrfs)"
exe=$(readlink "/proc/$pid/exe")
case $exe in
"$T/src/build/"*) fail "the demo mount runs $exe, under scripts/check's build/" ;;
"$T/src/"*) ;;
*) fail "the demo mount runs $exe, not a binary of this tree" ;;
esac
grep -q 'build-demo/dcrfs-commit --store demo/store' "$T/qs.log" ||
	fail "quickstart's closing hint does not name the binaries it built: $(tail -n 12 "$T/qs.log")"
log "ok: quickstart asks for $(wc -l <"$T/asked") packages, builds and mounts from $exe"
