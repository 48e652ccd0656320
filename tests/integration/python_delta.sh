#!/usr/bin/env bash
# python_delta.sh - the delta view (MNT/delta/) and the Python module's
# read_delta, delta_info and apply_delta (python/dcrfs/_delta.py). A small
# torch model (~0.8 M parameters) in bf16 (trained natively by AdamW),
# fp16 (a copy of an SGD-trained fp32 master) and fp32 (AdamW) copies,
# four real optimizer steps, each step committed with dcrfs.Commit as
# v1..v5 (with a config.json, a file that v1 and v2 lack, -0.0/+0.0 and
# NaN-payload changes, a tensor name that needs JSON escaping, and from
# v4 an added, a removed, a reshaped and a retyped tensor), then mounted:
# - every delta/vN/FILE and spans delta/vM..vN/FILE equal byte for byte
#   the delta a reference generator (tests/integration/deltaref.py,
#   written from the format, numpy only) computes from the two full
#   files; st_size is exact before the first read; the listing holds
#   v2..v5 and only safetensors files;
# - apply_delta of each to the from version's tensors (torch, and numpy
#   for fp16/fp32) gives the to version's bit-exactly, once the caller
#   reloads what delta_info reports added/reshaped and drops the removed;
# - hostile delta files and targets (wrong dtype, out-of-range, negative,
#   repeated or non-increasing index, idx/val length mismatch, truncated
#   file, header length past EOF or over 100 MiB, not JSON or nested
#   200000 deep, a key twice, unknown dtype, overlapping tensors, a
#   missing pair, no or another format, a missing target tensor, a wrong
#   from_digest, a strided or fp16 target) raise DeltaError naming it,
#   and no tensor changed;
# - apply_delta's fast paths (python_apply.py's, on these files) give the
#   bits of a plain per-tensor reference apply;
# - read_delta, delta_info and apply_delta to numpy arrays do not import
#   torch.
# Uses Debian's python3 (numpy and torch are Debian packages there).
# Exits 77 after the library checks if the mount has no delta/ view.
. "$(dirname "$0")/lib.sh"
need_fuse
need_python_libdcr "$DCR_SRCDIR/tests/integration"
SCRIPT=$DCR_SRCDIR/tests/integration/python_delta.py

t "$PY" "$SCRIPT" commit "$STORE" "$T/commit-cache"
mount_dcrfs "$STORE" "$MNT"
mkdir -p "$T/work"
rc=0
t "$PY" "$SCRIPT" check "$STORE" "$MNT" "$T/work" || rc=$?
umount_dcrfs "$MNT"
[ "$rc" != 77 ] || skip "the mount has no delta/ view (library checked on reference files only)"
[ "$rc" = 0 ] || fail "python_delta.py check failed ($rc)"
log "ok"
