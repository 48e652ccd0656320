#!/usr/bin/env bash
# python_apply.sh - apply_delta's fast paths and resolve= (python/dcrfs/
# _delta.py), on reference delta files (tests/integration/deltaref.py) of a
# synthetic bf16/f32 step; python_delta.sh runs the fast-path cases on the
# mount's own view files too. Each result is compared bit for bit with a
# plain per-tensor reference apply:
# - numpy arrays and CPU torch tensors (through numpy views, on threads),
#   and torch tensors patched as on a device (DCRFS_TEST_APPLY_STAGED=1:
#   the staged path CUDA tensors take, run on the CPU), with default and
#   with small pieces on four threads; a sharded list of two files;
# - resolve=: q, k and v fused into one tensor; two tensor-parallel ranks
#   holding half the rows of emb and of the fused qkv (the other rank's
#   indices skipped); dcrfs.SKIP leaving a tensor alone;
# - refused, no tensor changed: a resolve that returns None, two names
#   resolved onto the same elements, a window past its target, an index
#   past the target at an offset, a negative offset, an exception of
#   resolve's own (propagated); a tensor at an offset not a multiple of
#   its width. One tensor under two names (tied) is patched once.
# Uses Debian's python3 (numpy and torch are Debian packages there).
. "$(dirname "$0")/lib.sh"
need_python_libdcr "$DCR_SRCDIR/tests/integration"
t "$PY" "$DCR_SRCDIR/tests/integration/python_apply.py" "$T"
log "ok"
