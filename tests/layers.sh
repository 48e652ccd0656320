#!/usr/bin/env bash
# layers.sh - the folders are the layers (HACKING, "Layout and dependency
# rules"), and no include runs back up one. Each folder may include the
# headers of the folders listed after it below, and its own; file names
# are unique across the tree, so a header names its folder. Also: a
# folder's *_int.h is its own; <curl/*> only in store/, <sqlite3.h> only
# in cache/, <fuse*> only in fs/; tools/ never include lib/libdcr_int.h.
set -euo pipefail

S=${DCR_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
declare -A may=(
	[core]=""
	[store]="core"
	[cache]="core store"
	[read]="core store cache"
	[commit]="core store cache read"
	[maint]="core store cache read commit"
	[lib]="core store cache read commit maint"
	[fs]="core store cache read"
	[tools]="core store cache read commit maint lib"
)
declare -A home=()
for d in "${!may[@]}"; do
	for h in "$S/$d"/*.h; do
		[ -e "$h" ] || continue
		home[$(basename "$h")]=$d
	done
done
status=0
bad() {
	printf 'FAIL: layers: %s\n' "$*" >&2
	status=1
}
for d in "${!may[@]}"; do
	for f in "$S/$d"/*.[ch]; do
		[ -e "$f" ] || continue
		rel=${f#"$S"/}
		while IFS= read -r line; do
			n=${line%%:*}
			inc=${line#*:}
			case $inc in
			*'#include "'*)
				h=${inc#*\"}
				h=${h%%\"*}
				h=$(basename "$h")
				t=${home[$h]:-}
				[ -n "$t" ] || continue # config.h, generated
				[ "$t" = "$d" ] && continue
				case $h in *_int.h)
					bad "$rel:$n includes $t/$h: another folder's internals"
					continue ;;
				esac
				case " ${may[$d]} " in
				*" $t "*) ;;
				*) bad "$rel:$n includes $t/$h: $d/ may include ${may[$d]:-nothing} only" ;;
				esac
				;;
			*'<curl/'*) [ "$d" = store ] || bad "$rel:$n includes <curl/...> outside store/" ;;
			*'<sqlite3.h>'*) [ "$d" = cache ] || bad "$rel:$n includes <sqlite3.h> outside cache/" ;;
			*'<fuse'*) [ "$d" = fs ] || bad "$rel:$n includes <fuse...> outside fs/" ;;
			esac
		done < <(grep -n '^[[:space:]]*#[[:space:]]*include' "$f" || true)
	done
done
[ "$status" = 0 ] && echo "PASS: layers"
exit "$status"
