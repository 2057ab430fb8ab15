"""numpy oracles (polycomp.testing.Oracle) for the programs of tests/programs.py and
tests/test_tiling_programs.py: each takes a kernel's arguments in interface order and
returns the arrays the program writes, computed without polycomp, in the program's
original order where the order matters (no tests here).

Integer recurrences run on Python integers and wrap to the array's width at the end:
two's complement wrapping commutes with + and *, so this is what C computes when a value
overflows on the way.
"""

from __future__ import annotations

import numpy as np

from polycomp.testing import Oracle


def wrapped(values: list, dtype: np.dtype) -> np.ndarray:
    """Python integers (nested lists) as ``dtype``, wrapped modulo 2**bits."""
    info = np.iinfo(dtype)
    span = 1 << info.bits
    wrap = np.frompyfunc(lambda v: (v - info.min) % span + info.min, 1, 1)
    return wrap(np.array(values, dtype=object)).astype(dtype)


def _matmul(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> dict[str, np.ndarray]:
    if A.dtype.kind in "iu":  # numpy's integer matmul wraps in the array's width, as C
        return {"C": A @ B}
    return {"C": (A.astype(np.float64) @ B.astype(np.float64)).astype(A.dtype)}


def _jacobi1d(T: int, A: np.ndarray, B: np.ndarray) -> dict[str, np.ndarray]:
    for _ in range(T):
        B[1:-1] = (A[:-2] + A[1:-1] + A[2:]) * 0.33333
        A[1:-1] = B[1:-1]
    return {"A": A, "B": B}


def _jacobi2d(T: int, A: np.ndarray, B: np.ndarray) -> dict[str, np.ndarray]:
    for _ in range(T):
        B[1:-1, 1:-1] = (A[1:-1, 1:-1] + A[:-2, 1:-1] + A[2:, 1:-1] + A[1:-1, :-2]
                         + A[1:-1, 2:]) * 0.2
        A[1:-1, 1:-1] = B[1:-1, 1:-1]
    return {"A": A, "B": B}


def _seidel1d(T: int, A: np.ndarray) -> dict[str, np.ndarray]:
    a = A.tolist()
    for _ in range(T):
        for i in range(1, len(a) - 1):
            a[i] = a[i - 1] * 3 + a[i + 1]
    return {"A": wrapped(a, A.dtype)}


def _seidel2d(T: int, A: np.ndarray) -> dict[str, np.ndarray]:
    a = A.tolist()
    n = len(a)
    for _ in range(T):
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                a[i][j] = a[i - 1][j] + a[i][j - 1] + a[i + 1][j] - a[i][j + 1]
    return {"A": wrapped(a, A.dtype)}


def _transpose_add(A: np.ndarray, B: np.ndarray) -> dict[str, np.ndarray]:
    return {"B": B + A.T * A.dtype.type(3)}


def _row_sums(A: np.ndarray, s: np.ndarray) -> dict[str, np.ndarray]:
    return {"s": A.sum(axis=1)}


def _lu(A: np.ndarray) -> dict[str, np.ndarray]:
    # every value a row reads in one statement is final by then: the k loops are sums
    for i in range(A.shape[0]):
        for j in range(i):
            A[i, j] += (A[i, :j] + A[:j, j]).sum()
            A[i, j] += A[j, j]
        A[i, i:] += A[i, :i].sum() + A[:i, i:].sum(axis=0)
    return {"A": A}


MATMUL = Oracle("numpy", _matmul)
JACOBI1D = Oracle("numpy", _jacobi1d)
JACOBI2D = Oracle("numpy", _jacobi2d)
SEIDEL1D = Oracle("numpy", _seidel1d)
SEIDEL2D = Oracle("numpy", _seidel2d)
TRANSPOSE_ADD = Oracle("numpy", _transpose_add)
ROW_SUMS = Oracle("numpy", _row_sums)
LU = Oracle("numpy", _lu)
