#!/usr/bin/env bash
# no_test_hooks.sh - what is installed carries no test hook (issue 19,
# item 6): every source of a program or library (core/ store/ cache/ read/ commit/ maint/ lib/ fs/
# tools/), preprocessed as a build configured without
# --enable-test-hooks sees it (config.h without DCR_TEST_HOOKS), names
# no DCRFS_TEST_* variable and no dcr_s3_test_* hook; and when this
# build is one (DCR_TEST_HOOKS=no), its binaries and libdcr hold none
# of those strings or symbols either. Skipped (77) without a C compiler.
set -euo pipefail

S=${DCR_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
B=${DCR_BUILDDIR:-$S/build}
CC=${CC:-cc}
PAT='DCRFS_TEST_|dcr_s3_test_|lose_repl'
command -v "$CC" >/dev/null 2>&1 || { echo "SKIP: no_test_hooks: no C compiler ($CC)"; exit 77; }
[ -e "$B/config.h" ] || { echo "FAIL: no_test_hooks: no $B/config.h" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dcr-nohooks.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
grep -v 'DCR_TEST_HOOKS' "$B/config.h" >"$tmp/config.h"
# shellcheck disable=SC2046
flags=(-I"$tmp" -I"$S" -I"$S/core" -I"$S/store" -I"$S/cache" -I"$S/read" -I"$S/commit" -I"$S/maint" -I"$S/lib" -I"$S/fs" -I"$S/tools"
       $(pkg-config --cflags fuse3 libcurl sqlite3 2>/dev/null || true))
status=0
for f in "$S"/core/*.c "$S"/store/*.c "$S"/cache/*.c "$S"/read/*.c "$S"/commit/*.c "$S"/maint/*.c "$S"/lib/*.c "$S"/fs/*.c "$S"/tools/*.c; do
	if ! "$CC" -E -P "${flags[@]}" "$f" -o "$tmp/out.i" 2>"$tmp/err"; then
		printf 'FAIL: no_test_hooks: cannot preprocess %s: %s\n' "${f#"$S"/}" "$(head -3 "$tmp/err")" >&2
		status=1
		continue
	fi
	if grep -Eq "$PAT" "$tmp/out.i"; then
		printf 'FAIL: no_test_hooks: %s keeps a test hook without DCR_TEST_HOOKS: %s\n' \
			"${f#"$S"/}" "$(grep -Eo "[A-Za-z_]*($PAT)[A-Za-z_]*" "$tmp/out.i" | sort -u | tr '\n' ' ')" >&2
		status=1
	fi
done
if [ "${DCR_TEST_HOOKS:-no}" = no ]; then
	for bin in "$B"/dcrfs "$B"/dcrfs-commit "$B"/dcrfs-ctl "$B"/.libs/libdcr.so*; do
		[ -f "$bin" ] || continue
		if strings -a "$bin" | grep -Eq "$PAT"; then
			printf 'FAIL: no_test_hooks: %s holds %s\n' "${bin#"$B"/}" \
				"$(strings -a "$bin" | grep -Eo "[A-Za-z_]*($PAT)[A-Za-z_]*" | sort -u | tr '\n' ' ')" >&2
			status=1
		else
			echo "ok: ${bin#"$B"/} holds no test hook"
		fi
	done
fi
[ "$status" = 0 ] && echo "ok: no source keeps a test hook without DCR_TEST_HOOKS"
exit "$status"
