#!/usr/bin/env bash
# completion.sh - completions/dcrfs, the bash completion of the four
# tools: it parses (bash -n); completing `dcrfs-ctl ver` gives verify,
# `dcrfs-ctl wa` wait and warm, every command dcrfs-ctl --help lists is
# offered, and options come from each tool's --help (dcrfs-commit
# --allow-non, dcrfs -o poll, dcrfs-synth's subcommands).
set -euo pipefail
SRC=${DCR_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
B=${DCR_BUILDDIR:-$SRC/build}
F=$SRC/completions/dcrfs
fail() { echo "FAIL: completion: $*" >&2; exit 1; }
bash -n "$F" || fail "$F does not parse"
# complete WORD... : COMPREPLY of completing the last word, one a line
complete_words() {
	bash -c '
		. "$1"; shift
		tool=$1; fn=$(complete -p "$(basename "$tool")" | awk "{ print \$3 }")
		COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
		"$fn"; printf "%s\n" "${COMPREPLY[@]}"' sh "$F" "$@"
}
PATH=$B:$PATH
[ "$(complete_words dcrfs-ctl ver)" = verify ] || fail "dcrfs-ctl ver: $(complete_words dcrfs-ctl ver)"
[ "$(complete_words dcrfs-ctl wa | tr '\n' ' ')" = "wait warm " ] ||
	fail "dcrfs-ctl wa: $(complete_words dcrfs-ctl wa)"
want=$(dcrfs-ctl --help | sed -n '/^Commands:/,/^$/p' | awk '/^  [a-z]/ { print $1 }' | sort)
[ "$(wc -l <<<"$want")" -ge 10 ] || fail "dcrfs-ctl --help lists too few commands: $want"
[ "$(complete_words dcrfs-ctl '' | sort)" = "$want" ] || fail "dcrfs-ctl <tab> is not every command"
# has WANT WORD... : completing WORD... offers WANT (the words are taken
# whole first: grep -q on a pipe would end it early, and pipefail fail)
has() {
	local want=$1 got
	shift
	got=$(complete_words "$@")
	grep -qx -- "$want" <<<"$got" || fail "$*: offers $(tr '\n' ' ' <<<"$got"), not $want"
}
has --newer-than dcrfs-ctl --store s wait --new
has --allow-nonfinite dcrfs-commit --allow-non
has 'poll=' dcrfs s m -o po
has 'cache_dir=/x,prefetch=' dcrfs s m -o cache_dir=/x,pre
[ "$(complete_words dcrfs-synth i)" = init ] || fail "dcrfs-synth i"
echo "# ok"
