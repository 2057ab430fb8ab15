"""The tolerance rule used to check every variant's outputs.

For each output array (every array the kernel writes, ``ArgSpec.out``)::

    |got - ref| <= RTOL * |ref| + ATOL * scale      element-wise
    scale = max(|ref|) over the array (1.0 if that is 0)

with RTOL = 1e-6 and ATOL = 1e-8 unless a KernelDef overrides them.  NaN and
inf must appear in the same places with the same value.  Integer arrays
(nussinov) must be equal.  This is loose enough for reassociation of sums
(numpy's pairwise sums, BLAS, vectorised or parallel reductions) and for FMA
contraction, and still far tighter than any off-by-one or wrong-dependence
bug, which changes results at the 1e-3 .. 1 level.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

RTOL = 1e-6
ATOL = 1e-8


def compare_array(got: np.ndarray, ref: np.ndarray, rtol: float = RTOL,
                  atol: float = ATOL) -> str | None:
    """None when ``got`` matches ``ref``, else a short description."""
    got = np.asarray(got)
    ref = np.asarray(ref)
    if got.shape != ref.shape:
        return f"shape {got.shape} != {ref.shape}"
    if np.issubdtype(ref.dtype, np.integer):
        bad = got != ref
        if bad.any():
            idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), ref.shape))
            return (f"{int(bad.sum())}/{ref.size} elements differ, e.g. at {idx}: "
                    f"{int(got[idx])} != {int(ref[idx])}")
        return None
    got = got.astype(np.float64, copy=False)
    ref = ref.astype(np.float64, copy=False)
    fin = np.isfinite(ref)
    if not np.array_equal(np.isfinite(got), fin):
        return "non-finite values in different places"
    if not fin.all() and not np.array_equal(got[~fin], ref[~fin], equal_nan=True):
        return "different non-finite values"
    if not fin.any():
        return None
    scale = float(np.max(np.abs(ref[fin])))
    if scale == 0.0:
        scale = 1.0
    err = np.abs(got - ref)
    lim = rtol * np.abs(ref) + atol * scale
    bad = fin & ~(err <= lim)
    if bad.any():
        rel = np.where(fin, err / np.maximum(np.abs(ref), atol * scale), 0.0)
        idx = tuple(int(i) for i in
                    np.unravel_index(int(np.argmax(np.where(bad, rel, -1.0))), ref.shape))
        return (f"{int(bad.sum())}/{ref.size} elements off, worst at {idx}: "
                f"{float(got[idx])!r} vs {float(ref[idx])!r}")
    return None


def compare_outputs(got: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray],
                    rtol: float | None = None, atol: float | None = None) -> str | None:
    """Compare dicts of output arrays; None when all match."""
    rtol = RTOL if rtol is None else rtol
    atol = ATOL if atol is None else atol
    problems = []
    for name, r in ref.items():
        if name not in got:
            problems.append(f"{name}: missing")
            continue
        msg = compare_array(got[name], r, rtol, atol)
        if msg:
            problems.append(f"{name}: {msg}")
    return "; ".join(problems) if problems else None
