#!/usr/bin/env bash
# threads_only_wq.sh - threads are made in one place (issue 19, item 1):
# no source of a program or library (core/ store/ cache/ read/ commit/
# maint/ lib/ tools/) but core/wq.c calls pthread_create or thrd_create; fs/ keeps its own
# background threads (fs/bg.c). Everything else runs on a core/wq queue
# (dcr_wq_submit, dcr_wq_par_for). A comment naming either call counts
# too: say "a thread of its own" instead.
set -euo pipefail

S=${DCR_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
status=0
for f in "$S"/core/*.c "$S"/store/*.c "$S"/cache/*.c "$S"/read/*.c "$S"/commit/*.c "$S"/maint/*.c "$S"/lib/*.c "$S"/tools/*.c "$S"/python/*.c; do
	[ -e "$f" ] || continue
	case ${f#"$S"/} in core/wq.c) continue ;; esac
	if hits=$(grep -nE '\b(pthread|thrd)_create\b' "$f"); then
		while IFS= read -r h; do
			printf 'FAIL: threads_only_wq: %s:%s (threads belong on core/wq)\n' \
				"${f#"$S"/}" "$h" >&2
		done <<<"$hits"
		status=1
	fi
done
[ "$status" = 0 ] && echo "PASS: threads_only_wq"
exit "$status"
