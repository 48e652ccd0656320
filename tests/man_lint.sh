#!/usr/bin/env bash
# man_lint.sh - every man page lints clean: `mandoc -Tlint -W warning`
# prints nothing. Skipped (77) when mandoc is not installed.
set -euo pipefail

DCR_SRCDIR=${DCR_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
MANDOC=${MANDOC:-}
[ -n "$MANDOC" ] || MANDOC=$(command -v mandoc || true)
if [ -z "$MANDOC" ]; then
	echo "SKIP: man_lint: mandoc is not installed"
	exit 77
fi

shopt -s nullglob
pages=("$DCR_SRCDIR"/man/*.[0-9])
[ ${#pages[@]} -gt 0 ] || { echo "FAIL: man_lint: no man pages in $DCR_SRCDIR/man" >&2; exit 1; }

status=0
for page in "${pages[@]}"; do
	out=$("$MANDOC" -Tlint -W warning "$page" 2>&1) || true
	if [ -n "$out" ]; then
		printf 'FAIL: %s\n%s\n' "${page##*/}" "$out" >&2
		status=1
	else
		echo "ok: ${page##*/}"
	fi
done
exit "$status"
