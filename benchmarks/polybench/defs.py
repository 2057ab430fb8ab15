"""Definitions of the 30 PolyBench/C 4.2 kernels used by the benchmark suite.

Every kernel is described by a :class:`KernelDef`:

* ``name``      PolyBench's name ("floyd-warshall", "2mm", ...)
* ``c_file``    file in ``kernels/`` ("-" replaced by "_": ``floyd_warshall.c``,
                ``2mm.c``); it holds exactly one function ``function``
                (``kernel_floyd_warshall``, ``kernel_2mm``, ...)
* ``sizes``     PolyBench 4.2 problem sizes, ``sizes["MINI"] == {"ni": 20, ...}``.
                The keys are the names of the C function's ``int`` parameters.
* ``args``      the C parameters in order (:class:`ArgSpec`).  Array shapes are
                tuples of size-parameter names (or ints).
* ``init(sizes)`` -> dict of every non-``int`` argument (scalar doubles and
                numpy arrays, C-contiguous float64 / int32) following
                PolyBench 4.2's ``init_array``.
* ``numpy_impl(args)`` computes the same result in place with numpy;
  ``numpy_vectorized`` tells whether it is fit to be timed as a peer (see
  :data:`NUMPY_VECTORIZED_RULE`).
* ``check_init(sizes)`` (heat-3d, seidel-2d): perturbed inputs on which every
  variant is checked too, because PolyBench's inputs are a fixed point there.
* ``tc_source`` a Tensor-Comprehensions version where natural, with
  ``tc_args`` (which kernel arguments to pass, in order) and
  ``tc_reference(args)`` (numpy: the outputs the TC function must return, as a
  tuple in the order of the TC ``-> (...)`` list).

Use :func:`make_args` to get a complete, fresh argument dict for a size,
:func:`call_args` to order it like the C parameters, :func:`outputs` for the
arrays the kernel writes, and :func:`get_kernel` / :data:`KERNELS` to look
kernels up.

Notes on deviations from PolyBench's C files (documented in
benchmarks/README.md too):

* every kernel uses ``double`` data, including floyd-warshall (PolyBench uses
  ``int`` there; the path lengths are small integers, exact in double);
  nussinov keeps ``int`` for ``table`` and uses ``int`` (not ``char``) for
  ``seq``;
* durbin's local array ``z[N]`` is a parameter (``double z[n]``) so that every
  array is a parameter; scalars computed inside the nest are local ``double``
  variables declared before ``#pragma scop``;
* nussinov's ``if (i < j-1) ... else ...`` is written as two ``if``s with
  complementary affine conditions; ``match``/``max_score`` are written inline;
* the upper triangle of trmm's ``A`` and trisolv's ``L`` (left uninitialised by
  PolyBench, never read) is zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"

SIZE_NAMES = ("MINI", "SMALL", "MEDIUM", "LARGE")

NUMPY_VECTORIZED_RULE = (
    "numpy_vectorized is True when the numpy version does its work in "
    "whole-array operations; a Python loop is allowed only when it runs at "
    "most O(N) / O(TSTEPS) times with an array operation as its body (time "
    "steps of a stencil, the pivot of floyd-warshall or LU, the rows of a "
    "triangular solve, the recursion of deriche or durbin). It is False when "
    "there are nested Python loops or scalar Python loops (seidel-2d, "
    "nussinov, adi): those versions are references for checking only."
)


@dataclass(frozen=True)
class ArgSpec:
    """One parameter of a kernel's C function."""

    name: str
    kind: str  # "int" | "double" | "array"
    shape: tuple = ()  # arrays: size-parameter names and/or ints
    dtype: str = "float64"  # arrays: "float64" or "int32"
    out: bool = False  # arrays: whether the kernel writes it

    def __post_init__(self) -> None:
        if self.kind not in ("int", "double", "array"):
            raise ValueError(f"bad kind {self.kind!r} for {self.name}")
        if self.kind == "array" and not self.shape:
            raise ValueError(f"array {self.name} needs a shape")

    def resolve_shape(self, sizes: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else int(sizes[d]) for d in self.shape)


@dataclass(frozen=True)
class KernelDef:
    name: str
    category: str
    c_file: str
    function: str
    sizes: Mapping[str, Mapping[str, int]]
    args: tuple[ArgSpec, ...]
    init: Callable[[Mapping[str, int]], dict[str, Any]]
    flops: Callable[[Mapping[str, int]], float] | None = None
    numpy_impl: Callable[[dict[str, Any]], None] | None = None
    numpy_vectorized: bool = False
    tc_source: str | None = None
    tc_args: tuple[str, ...] = ()
    tc_reference: Callable[[dict[str, Any]], tuple] | None = None
    # Extra flags for every C compiler used on this kernel (baseline, Polly).
    cflags: tuple[str, ...] = ()
    # Extra inputs for checking only, for kernels whose PolyBench inputs are a
    # fixed point (see make_check_args); None: the PolyBench inputs suffice.
    check_init: Callable[[Mapping[str, int]], dict[str, Any]] | None = None
    # Comparison tolerance (see compare.py): |got-ref| <= rtol*|ref| + atol*scale
    rtol: float | None = None
    atol: float | None = None
    notes: str = ""

    @property
    def c_path(self) -> Path:
        return KERNEL_DIR / self.c_file

    def c_source(self) -> str:
        return self.c_path.read_text()

    @property
    def out_args(self) -> tuple[ArgSpec, ...]:
        return tuple(a for a in self.args if a.kind == "array" and a.out)

    @property
    def int_params(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args if a.kind == "int")


# --------------------------------------------------------------------------
# helpers for the init functions


def _ar(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int64)


def _g2(a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    return _ar(a)[:, None], _ar(b)[None, :]


def _f(x) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x, dtype=np.float64))


def _z(*shape: int) -> np.ndarray:
    return np.zeros(shape, dtype=np.float64)


def _seq_sum(x: np.ndarray, axis: int = 0) -> np.ndarray:
    """Left-to-right sum (like a C loop), unlike np.sum's pairwise sum."""
    if x.shape[axis] == 0:
        return np.zeros(np.delete(x.shape, axis), dtype=x.dtype)
    return np.take(np.cumsum(x, axis=axis), -1, axis=axis)


def _spd_matrix(n: int) -> np.ndarray:
    """PolyBench's init for cholesky / lu / ludcmp: L L^T with
    L[i][j] = (-j % n) / n + 1 (C's %, i.e. 1 - j/n) for j < i, 1 on the
    diagonal, 0 above."""
    i, j = _g2(n, n)
    low = np.where(j <= i, (-j).astype(np.float64) / n + 1.0, 0.0)
    np.fill_diagonal(low, 1.0)
    return _f(low @ low.T)


# --------------------------------------------------------------------------
# datamining


def _init_correlation(s):
    m, n = s["m"], s["n"]
    i, j = _g2(n, m)
    return dict(
        float_n=float(n),
        data=_f((i * j).astype(np.float64) / m + i),
        corr=_z(m, m),
        mean=_z(m),
        stddev=_z(m),
    )


def _np_correlation(a):
    data, fn = a["data"], a["float_n"]
    eps = 0.1
    mean = data.sum(axis=0) / fn
    std = np.sqrt(((data - mean) * (data - mean)).sum(axis=0) / fn)
    std = np.where(std <= eps, 1.0, std)
    data -= mean
    data /= math.sqrt(fn) * std
    corr = data.T @ data
    np.fill_diagonal(corr, 1.0)
    a["corr"][...] = corr
    a["mean"][...] = mean
    a["stddev"][...] = std


def _init_covariance(s):
    m, n = s["m"], s["n"]
    i, j = _g2(n, m)
    return dict(
        float_n=float(n),
        data=_f(i.astype(np.float64) * j / m),
        cov=_z(m, m),
        mean=_z(m),
    )


def _np_covariance(a):
    data, fn = a["data"], a["float_n"]
    mean = data.sum(axis=0) / fn
    data -= mean
    a["cov"][...] = (data.T @ data) / (fn - 1.0)
    a["mean"][...] = mean


def _tc_covariance(a):
    data, fn = a["data"], a["float_n"]
    mean = data.sum(axis=0) / fn
    cen = data - mean
    return mean, cen, (cen.T @ cen) / (fn - 1.0)


# --------------------------------------------------------------------------
# linear-algebra / blas


def _init_gemm(s):
    ni, nj, nk = s["ni"], s["nj"], s["nk"]
    i, j = _g2(ni, nj)
    C = _f(((i * j + 1) % ni).astype(np.float64) / ni)
    i, k = _g2(ni, nk)
    A = _f((i * (k + 1) % nk).astype(np.float64) / nk)
    k, j = _g2(nk, nj)
    B = _f((k * (j + 2) % nj).astype(np.float64) / nj)
    return dict(alpha=1.5, beta=1.2, C=C, A=A, B=B)


def _np_gemm(a):
    C = a["C"]
    C *= a["beta"]
    C += (a["alpha"] * a["A"]) @ a["B"]


def _tc_gemm(a):
    return (a["alpha"] * (a["A"] @ a["B"]) + a["beta"] * a["C"],)


def _init_gemver(s):
    n = s["n"]
    fn = float(n)
    i = _ar(n)
    ip1 = (i + 1) / fn
    ii, jj = _g2(n, n)
    return dict(
        alpha=1.5,
        beta=1.2,
        A=_f((ii * jj % n).astype(np.float64) / n),
        u1=_f(i),
        v1=_f(ip1 / 4.0),
        u2=_f(ip1 / 2.0),
        v2=_f(ip1 / 6.0),
        w=_z(n),
        x=_z(n),
        y=_f(ip1 / 8.0),
        z=_f(ip1 / 9.0),
    )


def _np_gemver(a):
    A, x, w = a["A"], a["x"], a["w"]
    A += np.outer(a["u1"], a["v1"]) + np.outer(a["u2"], a["v2"])
    x += a["beta"] * (A.T @ a["y"])
    x += a["z"]
    w += a["alpha"] * (A @ x)


def _init_gesummv(s):
    n = s["n"]
    i, j = _g2(n, n)
    return dict(
        alpha=1.5,
        beta=1.2,
        A=_f(((i * j + 1) % n).astype(np.float64) / n),
        B=_f(((i * j + 2) % n).astype(np.float64) / n),
        tmp=_z(n),
        x=_f((_ar(n) % n).astype(np.float64) / n),
        y=_z(n),
    )


def _np_gesummv(a):
    tmp = a["A"] @ a["x"]
    a["tmp"][...] = tmp
    a["y"][...] = a["alpha"] * tmp + a["beta"] * (a["B"] @ a["x"])


def _init_symm(s):
    m, n = s["m"], s["n"]
    i, j = _g2(m, n)
    C = _f(((i + j) % 100).astype(np.float64) / m)
    B = _f(((n + i - j) % 100).astype(np.float64) / m)
    i, j = _g2(m, m)
    A = _f(np.where(j <= i, ((i + j) % 100).astype(np.float64) / m, -999.0))
    return dict(alpha=1.5, beta=1.2, C=C, A=A, B=B)


def _np_symm(a):
    A = a["A"]
    sym = np.tril(A) + np.tril(A, -1).T  # the lower triangle, mirrored
    C = a["C"]
    C *= a["beta"]
    C += a["alpha"] * (sym @ a["B"])


def _init_syr2k(s):
    n, m = s["n"], s["m"]
    i, j = _g2(n, m)
    A = _f(((i * j + 1) % n).astype(np.float64) / n)
    B = _f(((i * j + 2) % m).astype(np.float64) / m)
    i, j = _g2(n, n)
    C = _f(((i * j + 3) % n).astype(np.float64) / m)
    return dict(alpha=1.5, beta=1.2, C=C, A=A, B=B)


def _np_syr2k(a):
    A, B, C = a["A"], a["B"], a["C"]
    new = a["beta"] * C + a["alpha"] * (A @ B.T + B @ A.T)
    low = np.tril(np.ones(C.shape, dtype=bool))
    C[low] = new[low]


def _init_syrk(s):
    n, m = s["n"], s["m"]
    i, j = _g2(n, m)
    A = _f(((i * j + 1) % n).astype(np.float64) / n)
    i, j = _g2(n, n)
    C = _f(((i * j + 2) % m).astype(np.float64) / m)
    return dict(alpha=1.5, beta=1.2, C=C, A=A)


def _np_syrk(a):
    A, C = a["A"], a["C"]
    new = a["beta"] * C + a["alpha"] * (A @ A.T)
    low = np.tril(np.ones(C.shape, dtype=bool))
    C[low] = new[low]


def _tc_syrk(a):
    # The TC version computes the full (symmetric) matrix; its lower
    # triangle is what the C kernel computes.
    return (a["alpha"] * (a["A"] @ a["A"].T) + a["beta"] * a["C"],)


def _init_trmm(s):
    m, n = s["m"], s["n"]
    i, j = _g2(m, m)
    A = _f(np.where(j < i, ((i + j) % m).astype(np.float64) / m, 0.0))
    np.fill_diagonal(A, 1.0)
    i, j = _g2(m, n)
    B = _f(((n + (i - j)) % n).astype(np.float64) / n)
    return dict(alpha=1.5, A=A, B=B)


def _np_trmm(a):
    B = a["B"]
    B[...] = a["alpha"] * (B + np.tril(a["A"], -1).T @ B)


def _init_2mm(s):
    ni, nj, nk, nl = s["ni"], s["nj"], s["nk"], s["nl"]
    i, k = _g2(ni, nk)
    A = _f(((i * k + 1) % ni).astype(np.float64) / ni)
    k, j = _g2(nk, nj)
    B = _f((k * (j + 1) % nj).astype(np.float64) / nj)
    j, l = _g2(nj, nl)
    C = _f(((j * (l + 3) + 1) % nl).astype(np.float64) / nl)
    i, l = _g2(ni, nl)
    D = _f((i * (l + 2) % nk).astype(np.float64) / nk)
    return dict(alpha=1.5, beta=1.2, tmp=_z(ni, nj), A=A, B=B, C=C, D=D)


def _np_2mm(a):
    tmp = (a["alpha"] * a["A"]) @ a["B"]
    a["tmp"][...] = tmp
    D = a["D"]
    D *= a["beta"]
    D += tmp @ a["C"]


def _tc_2mm(a):
    tmp = a["alpha"] * (a["A"] @ a["B"])
    return tmp, tmp @ a["C"] + a["beta"] * a["D"]


def _init_3mm(s):
    ni, nj, nk, nl, nm = s["ni"], s["nj"], s["nk"], s["nl"], s["nm"]
    i, k = _g2(ni, nk)
    A = _f(((i * k + 1) % ni).astype(np.float64) / (5 * ni))
    k, j = _g2(nk, nj)
    B = _f(((k * (j + 1) + 2) % nj).astype(np.float64) / (5 * nj))
    j, m = _g2(nj, nm)
    C = _f((j * (m + 3) % nl).astype(np.float64) / (5 * nl))
    m, l = _g2(nm, nl)
    D = _f(((m * (l + 2) + 2) % nk).astype(np.float64) / (5 * nk))
    return dict(E=_z(ni, nj), A=A, B=B, F=_z(nj, nl), C=C, D=D, G=_z(ni, nl))


def _np_3mm(a):
    E = a["A"] @ a["B"]
    F = a["C"] @ a["D"]
    a["E"][...] = E
    a["F"][...] = F
    a["G"][...] = E @ F


def _tc_3mm(a):
    E = a["A"] @ a["B"]
    F = a["C"] @ a["D"]
    return E, F, E @ F


def _init_atax(s):
    m, n = s["m"], s["n"]
    i, j = _g2(m, n)
    return dict(
        A=_f(((i + j) % n).astype(np.float64) / (5 * m)),
        x=_f(1.0 + _ar(n) / float(n)),
        y=_z(n),
        tmp=_z(m),
    )


def _np_atax(a):
    tmp = a["A"] @ a["x"]
    a["tmp"][...] = tmp
    a["y"][...] = a["A"].T @ tmp


def _tc_atax(a):
    tmp = a["A"] @ a["x"]
    return tmp, a["A"].T @ tmp


def _init_bicg(s):
    m, n = s["m"], s["n"]
    i, j = _g2(n, m)
    return dict(
        A=_f((i * (j + 1) % n).astype(np.float64) / n),
        s=_z(m),
        q=_z(n),
        p=_f((_ar(m) % m).astype(np.float64) / m),
        r=_f((_ar(n) % n).astype(np.float64) / n),
    )


def _np_bicg(a):
    a["s"][...] = a["A"].T @ a["r"]
    a["q"][...] = a["A"] @ a["p"]


def _tc_bicg(a):
    return a["A"].T @ a["r"], a["A"] @ a["p"]


def _init_doitgen(s):
    nr, nq, np_ = s["nr"], s["nq"], s["np"]
    i = _ar(nr)[:, None, None]
    j = _ar(nq)[None, :, None]
    k = _ar(np_)[None, None, :]
    A = _f(((i * j + k) % np_).astype(np.float64) / np_)
    i, j = _g2(np_, np_)
    C4 = _f((i * j % np_).astype(np.float64) / np_)
    return dict(A=A, C4=C4, sum=_z(np_))


def _np_doitgen(a):
    A = a["A"]
    new = A @ a["C4"]
    a["sum"][...] = new[-1, -1]
    A[...] = new


def _tc_doitgen(a):
    return (a["A"] @ a["C4"],)


def _init_mvt(s):
    n = s["n"]
    i = _ar(n)
    ii, jj = _g2(n, n)
    return dict(
        x1=_f((i % n).astype(np.float64) / n),
        x2=_f(((i + 1) % n).astype(np.float64) / n),
        y_1=_f(((i + 3) % n).astype(np.float64) / n),
        y_2=_f(((i + 4) % n).astype(np.float64) / n),
        A=_f((ii * jj % n).astype(np.float64) / n),
    )


def _np_mvt(a):
    a["x1"] += a["A"] @ a["y_1"]
    a["x2"] += a["A"].T @ a["y_2"]


def _tc_mvt(a):
    return a["A"] @ a["y_1"] + a["x1"], a["A"].T @ a["y_2"] + a["x2"]


# --------------------------------------------------------------------------
# linear-algebra / solvers


def _init_cholesky(s):
    return dict(A=_spd_matrix(s["n"]))


def _np_cholesky(a):
    A = a["A"]
    low = np.linalg.cholesky(A)
    A[...] = np.tril(low) + np.triu(A, 1)


def _init_durbin(s):
    n = s["n"]
    return dict(r=_f(n + 1 - _ar(n)), y=_z(n), z=_z(n))


def _np_durbin(a):
    r, y, z = a["r"], a["y"], a["z"]
    n = r.shape[0]
    y[0] = -r[0]
    beta = 1.0
    alpha = -r[0]
    for k in range(1, n):
        beta = (1 - alpha * alpha) * beta
        s = float(np.dot(r[k - 1 :: -1], y[:k]))
        alpha = -(r[k] + s) / beta
        z[:k] = y[:k] + alpha * y[k - 1 :: -1]
        y[:k] = z[:k]
        y[k] = alpha


def _init_gramschmidt(s):
    m, n = s["m"], s["n"]
    i, j = _g2(m, n)
    A = _f(((i * j) % m).astype(np.float64) / m * 100 + 10)
    return dict(A=A, R=_z(n, n), Q=_z(m, n))


def _np_gramschmidt(a):
    # Sums are taken left to right (like the C loops): with M < N the matrix
    # is rank deficient and the trailing columns are amplified rounding
    # noise, which only an identical order of operations reproduces.
    A, R, Q = a["A"], a["R"], a["Q"]
    n = A.shape[1]
    for k in range(n):
        col = A[:, k]
        R[k, k] = math.sqrt(_seq_sum(col * col))
        Q[:, k] = col / R[k, k]
        if k + 1 < n:
            qk = Q[:, k : k + 1]
            R[k, k + 1 :] = _seq_sum(qk * A[:, k + 1 :], axis=0)
            A[:, k + 1 :] = A[:, k + 1 :] - qk * R[k, k + 1 :]


def _lu_inplace(A: np.ndarray) -> None:
    """Doolittle LU without pivoting, right-looking (vectorised) order."""
    n = A.shape[0]
    for k in range(n - 1):
        A[k + 1 :, k] /= A[k, k]
        A[k + 1 :, k + 1 :] -= np.outer(A[k + 1 :, k], A[k, k + 1 :])


def _init_lu(s):
    return dict(A=_spd_matrix(s["n"]))


def _np_lu(a):
    _lu_inplace(a["A"])


def _init_ludcmp(s):
    n = s["n"]
    fn = float(n)
    return dict(
        A=_spd_matrix(n),
        b=_f((_ar(n) + 1) / fn / 2.0 + 4),
        x=_z(n),
        y=_z(n),
    )


def _np_ludcmp(a):
    A, b, x, y = a["A"], a["b"], a["x"], a["y"]
    n = A.shape[0]
    _lu_inplace(A)
    for i in range(n):
        y[i] = b[i] - A[i, :i] @ y[:i]
    for i in range(n - 1, -1, -1):
        x[i] = (y[i] - A[i, i + 1 :] @ x[i + 1 :]) / A[i, i]


def _init_trisolv(s):
    n = s["n"]
    i, j = _g2(n, n)
    L = _f(np.where(j <= i, (i + n - j + 1).astype(np.float64) * 2 / n, 0.0))
    return dict(L=L, x=_f(np.full(n, -999.0)), b=_f(_ar(n)))


def _np_trisolv(a):
    L, x, b = a["L"], a["x"], a["b"]
    for i in range(L.shape[0]):
        x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]


# --------------------------------------------------------------------------
# medley


def _init_deriche(s):
    w, h = s["w"], s["h"]
    i, j = _g2(w, h)
    img = ((313 * i + 991 * j) % 65536).astype(np.float64) / 65535.0
    return dict(alpha=0.25, imgIn=_f(img), imgOut=_z(w, h), y1=_z(w, h), y2=_z(w, h))


def _np_deriche(a):
    alpha = a["alpha"]
    img_in, img_out, y1, y2 = a["imgIn"], a["imgOut"], a["y1"], a["y2"]
    w, h = img_in.shape
    ema = math.exp(-alpha)
    k = (1.0 - ema) * (1.0 - ema) / (1.0 + 2.0 * alpha * ema - math.exp(2.0 * alpha))
    a1 = a5 = k
    a2 = a6 = k * ema * (alpha - 1.0)
    a3 = a7 = k * ema * (alpha + 1.0)
    a4 = a8 = -k * math.exp(-2.0 * alpha)
    b1 = math.pow(2.0, -alpha)
    b2 = -math.exp(-2.0 * alpha)
    c1 = c2 = 1.0

    # causal / anti-causal recursions along j, vectorised over the rows i
    xm1 = np.zeros(w)
    ym1 = np.zeros(w)
    ym2 = np.zeros(w)
    for j in range(h):
        y1[:, j] = a1 * img_in[:, j] + a2 * xm1 + b1 * ym1 + b2 * ym2
        xm1 = img_in[:, j].copy()
        ym2 = ym1
        ym1 = y1[:, j].copy()
    xp1 = np.zeros(w)
    xp2 = np.zeros(w)
    yp1 = np.zeros(w)
    yp2 = np.zeros(w)
    for j in range(h - 1, -1, -1):
        y2[:, j] = a3 * xp1 + a4 * xp2 + b1 * yp1 + b2 * yp2
        xp2 = xp1
        xp1 = img_in[:, j].copy()
        yp2 = yp1
        yp1 = y2[:, j].copy()
    img_out[...] = c1 * (y1 + y2)

    # the same along i, vectorised over the columns j
    tm1 = np.zeros(h)
    ym1 = np.zeros(h)
    ym2 = np.zeros(h)
    for i in range(w):
        y1[i, :] = a5 * img_out[i, :] + a6 * tm1 + b1 * ym1 + b2 * ym2
        tm1 = img_out[i, :].copy()
        ym2 = ym1
        ym1 = y1[i, :].copy()
    tp1 = np.zeros(h)
    tp2 = np.zeros(h)
    yp1 = np.zeros(h)
    yp2 = np.zeros(h)
    for i in range(w - 1, -1, -1):
        y2[i, :] = a7 * tp1 + a8 * tp2 + b1 * yp1 + b2 * yp2
        tp2 = tp1
        tp1 = img_out[i, :].copy()
        yp2 = yp1
        yp1 = y2[i, :].copy()
    img_out[...] = c2 * (y1 + y2)


def _init_floyd_warshall(s):
    n = s["n"]
    i, j = _g2(n, n)
    path = (i * j % 7 + 1).astype(np.float64)
    far = ((i + j) % 13 == 0) | ((i + j) % 7 == 0) | ((i + j) % 11 == 0)
    return dict(path=_f(np.where(far, 999.0, path)))


def _np_floyd_warshall(a):
    path = a["path"]
    for k in range(path.shape[0]):
        np.minimum(path, path[:, k : k + 1] + path[k : k + 1, :], out=path)


def _init_nussinov(s):
    n = s["n"]
    return dict(
        seq=np.ascontiguousarray(((_ar(n) + 1) % 4).astype(np.int32)),
        table=np.zeros((n, n), dtype=np.int32),
    )


def _np_nussinov(a):
    seq = [int(v) for v in a["seq"]]
    T = a["table"]
    n = T.shape[0]
    for i in range(n - 1, -1, -1):
        for j in range(i + 1, n):
            v = int(T[i, j])
            v = max(v, int(T[i, j - 1]))  # j-1 >= 0 always holds here
            if i + 1 < n:
                v = max(v, int(T[i + 1, j]))
                if i < j - 1:
                    v = max(v, int(T[i + 1, j - 1]) + (1 if seq[i] + seq[j] == 3 else 0))
                else:
                    v = max(v, int(T[i + 1, j - 1]))
            if j > i + 1:
                v = max(v, int((T[i, i + 1 : j] + T[i + 2 : j + 1, j]).max()))
            T[i, j] = v


# --------------------------------------------------------------------------
# stencils


def _init_adi(s):
    n = s["n"]
    i, j = _g2(n, n)
    return dict(
        u=_f((i + n - j).astype(np.float64) / n),
        v=_z(n, n),
        p=_z(n, n),
        q=_z(n, n),
    )


def _np_adi(a):
    u, v, p, q = a["u"], a["v"], a["p"], a["q"]
    n = u.shape[0]
    tsteps = a["tsteps"]
    DX = 1.0 / n
    DY = 1.0 / n
    DT = 1.0 / tsteps
    B1, B2 = 2.0, 1.0
    mul1 = B1 * DT / (DX * DX)
    mul2 = B2 * DT / (DY * DY)
    a_ = -mul1 / 2.0
    b_ = 1.0 + mul1
    c_ = a_
    d_ = -mul2 / 2.0
    e_ = 1.0 + mul2
    f_ = d_
    I = slice(1, n - 1)
    Im = slice(0, n - 2)
    Ip = slice(2, n)
    for _t in range(1, tsteps + 1):
        # column sweep: independent for every i in 1..n-2
        v[0, I] = 1.0
        p[I, 0] = 0.0
        q[I, 0] = v[0, I]
        for j in range(1, n - 1):
            den = a_ * p[I, j - 1] + b_
            p[I, j] = -c_ / den
            q[I, j] = (
                -d_ * u[j, Im] + (1.0 + 2.0 * d_) * u[j, I] - f_ * u[j, Ip] - a_ * q[I, j - 1]
            ) / den
        v[n - 1, I] = 1.0
        for j in range(n - 2, 0, -1):
            v[j, I] = p[I, j] * v[j + 1, I] + q[I, j]
        # row sweep
        u[I, 0] = 1.0
        p[I, 0] = 0.0
        q[I, 0] = u[I, 0]
        for j in range(1, n - 1):
            den = d_ * p[I, j - 1] + e_
            p[I, j] = -f_ / den
            q[I, j] = (
                -a_ * v[Im, j] + (1.0 + 2.0 * a_) * v[I, j] - c_ * v[Ip, j] - d_ * q[I, j - 1]
            ) / den
        u[I, n - 1] = 1.0
        for j in range(n - 2, 0, -1):
            u[I, j] = p[I, j] * u[I, j + 1] + q[I, j]


def _init_fdtd_2d(s):
    tmax, nx, ny = s["tmax"], s["nx"], s["ny"]
    i, j = _g2(nx, ny)
    fi = i.astype(np.float64)
    return dict(
        ex=_f(fi * (j + 1) / nx),
        ey=_f(fi * (j + 2) / ny),
        hz=_f(fi * (j + 3) / nx),
        _fict_=_f(_ar(tmax)),
    )


def _np_fdtd_2d(a):
    ex, ey, hz, fict = a["ex"], a["ey"], a["hz"], a["_fict_"]
    for t in range(a["tmax"]):
        ey[0, :] = fict[t]
        ey[1:, :] = ey[1:, :] - 0.5 * (hz[1:, :] - hz[:-1, :])
        ex[:, 1:] = ex[:, 1:] - 0.5 * (hz[:, 1:] - hz[:, :-1])
        hz[:-1, :-1] = hz[:-1, :-1] - 0.7 * (
            ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1]
        )


def _init_heat_3d(s):
    n = s["n"]
    i = _ar(n)[:, None, None]
    j = _ar(n)[None, :, None]
    k = _ar(n)[None, None, :]
    val = (i + j + (n - k)).astype(np.float64) * 10 / n
    return dict(A=_f(val), B=_f(val.copy()))


def _check_heat_3d(s):
    base = _init_heat_3d(s)
    rng = np.random.default_rng(3)
    noise = rng.uniform(0.0, 1.0, base["A"].shape)
    return dict(A=_f(base["A"] + noise), B=_f(base["B"] + noise))


def _heat_step(src: np.ndarray, dst: np.ndarray) -> None:
    c = src[1:-1, 1:-1, 1:-1]
    dst[1:-1, 1:-1, 1:-1] = (
        0.125 * (src[2:, 1:-1, 1:-1] - 2.0 * c + src[:-2, 1:-1, 1:-1])
        + 0.125 * (src[1:-1, 2:, 1:-1] - 2.0 * c + src[1:-1, :-2, 1:-1])
        + 0.125 * (src[1:-1, 1:-1, 2:] - 2.0 * c + src[1:-1, 1:-1, :-2])
        + c
    )


def _np_heat_3d(a):
    A, B = a["A"], a["B"]
    for _t in range(a["tsteps"]):
        _heat_step(A, B)
        _heat_step(B, A)


def _init_jacobi_1d(s):
    n = s["n"]
    i = _ar(n).astype(np.float64)
    return dict(A=_f((i + 2) / n), B=_f((i + 3) / n))


def _np_jacobi_1d(a):
    A, B = a["A"], a["B"]
    for _t in range(a["tsteps"]):
        B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] + A[2:])
        A[1:-1] = 0.33333 * (B[:-2] + B[1:-1] + B[2:])


def _init_jacobi_2d(s):
    n = s["n"]
    i, j = _g2(n, n)
    fi = i.astype(np.float64)
    return dict(A=_f((fi * (j + 2) + 2) / n), B=_f((fi * (j + 3) + 3) / n))


def _np_jacobi_2d(a):
    A, B = a["A"], a["B"]
    for _t in range(a["tsteps"]):
        B[1:-1, 1:-1] = 0.2 * (
            A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1]
        )
        A[1:-1, 1:-1] = 0.2 * (
            B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1]
        )


def _init_seidel_2d(s):
    n = s["n"]
    i, j = _g2(n, n)
    return dict(A=_f((i.astype(np.float64) * (j + 2) + 2) / n))


def _check_seidel_2d(s):
    base = _init_seidel_2d(s)
    rng = np.random.default_rng(2)
    return dict(A=_f(base["A"] + rng.uniform(0.0, 1.0, base["A"].shape)))


def _np_seidel_2d(a):
    A = a["A"]
    n = A.shape[0]
    rows = A.tolist()  # Python floats are IEEE doubles: same arithmetic as C
    for _t in range(a["tsteps"]):
        for i in range(1, n - 1):
            up, cur, dn = rows[i - 1], rows[i], rows[i + 1]
            for j in range(1, n - 1):
                cur[j] = (
                    up[j - 1] + up[j] + up[j + 1]
                    + cur[j - 1] + cur[j] + cur[j + 1]
                    + dn[j - 1] + dn[j] + dn[j + 1]
                ) / 9.0
    A[...] = np.asarray(rows)


# --------------------------------------------------------------------------
# Tensor Comprehensions versions (compiled by polycomp.compile(tc_source))

TC_GEMM = """def gemm(float64(NI,NK) A, float64(NK,NJ) B, float64(NI,NJ) C, float64 alpha, float64 beta) -> (O) {
  O(i,j) +=! A(i,k) * B(k,j)
  O(i,j) = alpha * O(i,j) + beta * C(i,j)
}"""

TC_2MM = """def k2mm(float64(NI,NK) A, float64(NK,NJ) B, float64(NJ,NL) C, float64(NI,NL) D, float64 alpha, float64 beta) -> (tmp, O) {
  tmp(i,j) +=! A(i,k) * B(k,j)
  tmp(i,j) = alpha * tmp(i,j)
  O(i,l) +=! tmp(i,j) * C(j,l)
  O(i,l) = O(i,l) + beta * D(i,l)
}"""

TC_3MM = """def k3mm(float64(NI,NK) A, float64(NK,NJ) B, float64(NJ,NM) C, float64(NM,NL) D) -> (E, F, G) {
  E(i,j) +=! A(i,k) * B(k,j)
  F(j,l) +=! C(j,m) * D(m,l)
  G(i,l) +=! E(i,j) * F(j,l)
}"""

TC_MVT = """def mvt(float64(N,N) A, float64(N) x1, float64(N) x2, float64(N) y_1, float64(N) y_2) -> (o1, o2) {
  o1(i) +=! A(i,j) * y_1(j)
  o1(i) = o1(i) + x1(i)
  o2(i) +=! A(j,i) * y_2(j)
  o2(i) = o2(i) + x2(i)
}"""

TC_ATAX = """def atax(float64(M,N) A, float64(N) x) -> (tmp, y) {
  tmp(i) +=! A(i,j) * x(j)
  y(j) +=! A(i,j) * tmp(i)
}"""

TC_BICG = """def bicg(float64(N,M) A, float64(M) p, float64(N) r) -> (s, q) {
  s(j) +=! r(i) * A(i,j)
  q(i) +=! A(i,j) * p(j)
}"""

TC_DOITGEN = """def doitgen(float64(NR,NQ,NP) A, float64(NP,NP) C4) -> (O) {
  O(r,q,p) +=! A(r,q,s) * C4(s,p)
}"""

TC_COVARIANCE = """def covariance(float64(N,M) data, float64 float_n) -> (mean, cen, cov) {
  mean(j) +=! data(i,j)
  mean(j) = mean(j) / float_n
  cen(i,j) = data(i,j) - mean(j)
  cov(a,b) +=! cen(k,a) * cen(k,b)
  cov(a,b) = cov(a,b) / (float_n - 1.0)
}"""

TC_SYRK = """def syrk(float64(N,M) A, float64(N,N) C, float64 alpha, float64 beta) -> (O) {
  O(i,j) +=! A(i,k) * A(j,k)
  O(i,j) = alpha * O(i,j) + beta * C(i,j)
}"""


# --------------------------------------------------------------------------
# the table

def _I(name: str) -> ArgSpec:
    return ArgSpec(name, "int")


def _D(name: str) -> ArgSpec:
    return ArgSpec(name, "double")


def _Arr(name: str, *shape, out: bool = False, dtype: str = "float64") -> ArgSpec:
    return ArgSpec(name, "array", tuple(shape), dtype, out)


def _sizes(keys: tuple[str, ...], mini, small, medium, large) -> dict:
    return {
        label: dict(zip(keys, vals))
        for label, vals in zip(SIZE_NAMES, (mini, small, medium, large))
    }


def _k(name: str, category: str, **kw) -> KernelDef:
    stem = name.replace("-", "_")
    return KernelDef(
        name=name,
        category=category,
        c_file=f"{stem}.c",
        function=f"kernel_{stem}",
        **kw,
    )


_MN = ("m", "n")
_N = ("n",)
_TN = ("tsteps", "n")

_DEFS = [
    # ---------------------------------------------------------- datamining
    _k(
        "correlation", "datamining",
        sizes=_sizes(_MN, (28, 32), (80, 100), (240, 260), (1200, 1400)),
        args=(_I("m"), _I("n"), _D("float_n"), _Arr("data", "n", "m", out=True),
              _Arr("corr", "m", "m", out=True), _Arr("mean", "m", out=True),
              _Arr("stddev", "m", out=True)),
        init=_init_correlation, numpy_impl=_np_correlation, numpy_vectorized=True,
        flops=lambda s: s["m"] * s["m"] * s["n"] + 5.0 * s["m"] * s["n"],
    ),
    _k(
        "covariance", "datamining",
        sizes=_sizes(_MN, (28, 32), (80, 100), (240, 260), (1200, 1400)),
        args=(_I("m"), _I("n"), _D("float_n"), _Arr("data", "n", "m", out=True),
              _Arr("cov", "m", "m", out=True), _Arr("mean", "m", out=True)),
        init=_init_covariance, numpy_impl=_np_covariance, numpy_vectorized=True,
        flops=lambda s: s["m"] * s["m"] * s["n"] + 2.0 * s["m"] * s["n"],
        tc_source=TC_COVARIANCE, tc_args=("data", "float_n"), tc_reference=_tc_covariance,
    ),
    # ------------------------------------------------------ linear-algebra/blas
    _k(
        "gemm", "linear-algebra/blas",
        sizes=_sizes(("ni", "nj", "nk"), (20, 25, 30), (60, 70, 80), (200, 220, 240),
                     (1000, 1100, 1200)),
        args=(_I("ni"), _I("nj"), _I("nk"), _D("alpha"), _D("beta"),
              _Arr("C", "ni", "nj", out=True), _Arr("A", "ni", "nk"), _Arr("B", "nk", "nj")),
        init=_init_gemm, numpy_impl=_np_gemm, numpy_vectorized=True,
        flops=lambda s: 2.0 * s["ni"] * s["nj"] * s["nk"],
        tc_source=TC_GEMM, tc_args=("A", "B", "C", "alpha", "beta"), tc_reference=_tc_gemm,
    ),
    _k(
        "gemver", "linear-algebra/blas",
        sizes=_sizes(_N, (40,), (120,), (400,), (2000,)),
        args=(_I("n"), _D("alpha"), _D("beta"), _Arr("A", "n", "n", out=True),
              _Arr("u1", "n"), _Arr("v1", "n"), _Arr("u2", "n"), _Arr("v2", "n"),
              _Arr("w", "n", out=True), _Arr("x", "n", out=True), _Arr("y", "n"),
              _Arr("z", "n")),
        init=_init_gemver, numpy_impl=_np_gemver, numpy_vectorized=True,
        flops=lambda s: 10.0 * s["n"] * s["n"],
    ),
    _k(
        "gesummv", "linear-algebra/blas",
        sizes=_sizes(_N, (30,), (90,), (250,), (1300,)),
        args=(_I("n"), _D("alpha"), _D("beta"), _Arr("A", "n", "n"), _Arr("B", "n", "n"),
              _Arr("tmp", "n", out=True), _Arr("x", "n"), _Arr("y", "n", out=True)),
        init=_init_gesummv, numpy_impl=_np_gesummv, numpy_vectorized=True,
        flops=lambda s: 4.0 * s["n"] * s["n"],
    ),
    _k(
        "symm", "linear-algebra/blas",
        sizes=_sizes(_MN, (20, 30), (60, 80), (200, 240), (1000, 1200)),
        args=(_I("m"), _I("n"), _D("alpha"), _D("beta"), _Arr("C", "m", "n", out=True),
              _Arr("A", "m", "m"), _Arr("B", "m", "n")),
        init=_init_symm, numpy_impl=_np_symm, numpy_vectorized=True,
        flops=lambda s: 2.0 * s["m"] * s["m"] * s["n"],
    ),
    _k(
        "syr2k", "linear-algebra/blas",
        sizes=_sizes(_MN, (20, 30), (60, 80), (200, 240), (1000, 1200)),
        args=(_I("n"), _I("m"), _D("alpha"), _D("beta"), _Arr("C", "n", "n", out=True),
              _Arr("A", "n", "m"), _Arr("B", "n", "m")),
        init=_init_syr2k, numpy_impl=_np_syr2k, numpy_vectorized=True,
        flops=lambda s: 2.0 * s["n"] * s["n"] * s["m"],
    ),
    _k(
        "syrk", "linear-algebra/blas",
        sizes=_sizes(_MN, (20, 30), (60, 80), (200, 240), (1000, 1200)),
        args=(_I("n"), _I("m"), _D("alpha"), _D("beta"), _Arr("C", "n", "n", out=True),
              _Arr("A", "n", "m")),
        init=_init_syrk, numpy_impl=_np_syrk, numpy_vectorized=True,
        flops=lambda s: 1.0 * s["n"] * s["n"] * s["m"],
        tc_source=TC_SYRK, tc_args=("A", "C", "alpha", "beta"), tc_reference=_tc_syrk,
    ),
    _k(
        "trmm", "linear-algebra/blas",
        sizes=_sizes(_MN, (20, 30), (60, 80), (200, 240), (1000, 1200)),
        args=(_I("m"), _I("n"), _D("alpha"), _Arr("A", "m", "m"), _Arr("B", "m", "n", out=True)),
        init=_init_trmm, numpy_impl=_np_trmm, numpy_vectorized=True,
        flops=lambda s: 1.0 * s["m"] * s["m"] * s["n"],
    ),
    # ---------------------------------------------------- linear-algebra/kernels
    _k(
        "2mm", "linear-algebra/kernels",
        sizes=_sizes(("ni", "nj", "nk", "nl"), (16, 18, 22, 24), (40, 50, 70, 80),
                     (180, 190, 210, 220), (800, 900, 1100, 1200)),
        args=(_I("ni"), _I("nj"), _I("nk"), _I("nl"), _D("alpha"), _D("beta"),
              _Arr("tmp", "ni", "nj", out=True), _Arr("A", "ni", "nk"), _Arr("B", "nk", "nj"),
              _Arr("C", "nj", "nl"), _Arr("D", "ni", "nl", out=True)),
        init=_init_2mm, numpy_impl=_np_2mm, numpy_vectorized=True,
        flops=lambda s: 2.0 * s["ni"] * s["nj"] * (s["nk"] + s["nl"]),
        tc_source=TC_2MM, tc_args=("A", "B", "C", "D", "alpha", "beta"),
        tc_reference=_tc_2mm,
    ),
    _k(
        "3mm", "linear-algebra/kernels",
        sizes=_sizes(("ni", "nj", "nk", "nl", "nm"), (16, 18, 20, 22, 24),
                     (40, 50, 60, 70, 80), (180, 190, 200, 210, 220),
                     (800, 900, 1000, 1100, 1200)),
        args=(_I("ni"), _I("nj"), _I("nk"), _I("nl"), _I("nm"),
              _Arr("E", "ni", "nj", out=True), _Arr("A", "ni", "nk"), _Arr("B", "nk", "nj"),
              _Arr("F", "nj", "nl", out=True), _Arr("C", "nj", "nm"), _Arr("D", "nm", "nl"),
              _Arr("G", "ni", "nl", out=True)),
        init=_init_3mm, numpy_impl=_np_3mm, numpy_vectorized=True,
        flops=lambda s: 2.0 * (s["ni"] * s["nj"] * s["nk"] + s["nj"] * s["nl"] * s["nm"]
                               + s["ni"] * s["nl"] * s["nj"]),
        tc_source=TC_3MM, tc_args=("A", "B", "C", "D"), tc_reference=_tc_3mm,
    ),
    _k(
        "atax", "linear-algebra/kernels",
        sizes=_sizes(_MN, (38, 42), (116, 124), (390, 410), (1900, 2100)),
        args=(_I("m"), _I("n"), _Arr("A", "m", "n"), _Arr("x", "n"), _Arr("y", "n", out=True),
              _Arr("tmp", "m", out=True)),
        init=_init_atax, numpy_impl=_np_atax, numpy_vectorized=True,
        flops=lambda s: 4.0 * s["m"] * s["n"],
        tc_source=TC_ATAX, tc_args=("A", "x"), tc_reference=_tc_atax,
    ),
    _k(
        "bicg", "linear-algebra/kernels",
        sizes=_sizes(_MN, (38, 42), (116, 124), (390, 410), (1900, 2100)),
        args=(_I("m"), _I("n"), _Arr("A", "n", "m"), _Arr("s", "m", out=True),
              _Arr("q", "n", out=True), _Arr("p", "m"), _Arr("r", "n")),
        init=_init_bicg, numpy_impl=_np_bicg, numpy_vectorized=True,
        flops=lambda s: 4.0 * s["m"] * s["n"],
        tc_source=TC_BICG, tc_args=("A", "p", "r"), tc_reference=_tc_bicg,
    ),
    _k(
        "doitgen", "linear-algebra/kernels",
        sizes=_sizes(("nq", "nr", "np"), (8, 10, 12), (20, 25, 30), (40, 50, 60),
                     (140, 150, 160)),
        args=(_I("nr"), _I("nq"), _I("np"), _Arr("A", "nr", "nq", "np", out=True),
              _Arr("C4", "np", "np"), _Arr("sum", "np", out=True)),
        init=_init_doitgen, numpy_impl=_np_doitgen, numpy_vectorized=True,
        flops=lambda s: 2.0 * s["nr"] * s["nq"] * s["np"] * s["np"],
        tc_source=TC_DOITGEN, tc_args=("A", "C4"), tc_reference=_tc_doitgen,
    ),
    _k(
        "mvt", "linear-algebra/kernels",
        sizes=_sizes(_N, (40,), (120,), (400,), (2000,)),
        args=(_I("n"), _Arr("x1", "n", out=True), _Arr("x2", "n", out=True), _Arr("y_1", "n"),
              _Arr("y_2", "n"), _Arr("A", "n", "n")),
        init=_init_mvt, numpy_impl=_np_mvt, numpy_vectorized=True,
        flops=lambda s: 4.0 * s["n"] * s["n"],
        tc_source=TC_MVT, tc_args=("A", "x1", "x2", "y_1", "y_2"), tc_reference=_tc_mvt,
    ),
    # -------------------------------------------------- linear-algebra/solvers
    _k(
        "cholesky", "linear-algebra/solvers",
        sizes=_sizes(_N, (40,), (120,), (400,), (2000,)),
        args=(_I("n"), _Arr("A", "n", "n", out=True)),
        init=_init_cholesky, numpy_impl=_np_cholesky, numpy_vectorized=True,
        flops=lambda s: s["n"] ** 3 / 3.0,
    ),
    _k(
        "durbin", "linear-algebra/solvers",
        sizes=_sizes(_N, (40,), (120,), (400,), (2000,)),
        args=(_I("n"), _Arr("r", "n"), _Arr("y", "n", out=True), _Arr("z", "n", out=True)),
        init=_init_durbin, numpy_impl=_np_durbin, numpy_vectorized=True,
        flops=lambda s: 3.0 * s["n"] * s["n"],
        notes="z (a local array in PolyBench) is a parameter here",
    ),
    _k(
        "gramschmidt", "linear-algebra/solvers",
        sizes=_sizes(_MN, (20, 30), (60, 80), (200, 240), (1000, 1200)),
        args=(_I("m"), _I("n"), _Arr("A", "m", "n", out=True), _Arr("R", "n", "n", out=True),
              _Arr("Q", "m", "n", out=True)),
        init=_init_gramschmidt, numpy_impl=_np_gramschmidt, numpy_vectorized=True,
        flops=lambda s: 2.0 * s["m"] * s["n"] * s["n"],
        cflags=("-ffp-contract=off",),
        notes="M < N: rank deficient; trailing columns of Q are rounding noise, "
              "reproducible only with the same operation order and no FMA contraction",
    ),
    _k(
        "lu", "linear-algebra/solvers",
        sizes=_sizes(_N, (40,), (120,), (400,), (2000,)),
        args=(_I("n"), _Arr("A", "n", "n", out=True)),
        init=_init_lu, numpy_impl=_np_lu, numpy_vectorized=True,
        flops=lambda s: 2.0 * s["n"] ** 3 / 3.0,
    ),
    _k(
        "ludcmp", "linear-algebra/solvers",
        sizes=_sizes(_N, (40,), (120,), (400,), (2000,)),
        args=(_I("n"), _Arr("A", "n", "n", out=True), _Arr("b", "n"), _Arr("x", "n", out=True),
              _Arr("y", "n", out=True)),
        init=_init_ludcmp, numpy_impl=_np_ludcmp, numpy_vectorized=True,
        flops=lambda s: 2.0 * s["n"] ** 3 / 3.0 + 2.0 * s["n"] ** 2,
    ),
    _k(
        "trisolv", "linear-algebra/solvers",
        sizes=_sizes(_N, (40,), (120,), (400,), (2000,)),
        args=(_I("n"), _Arr("L", "n", "n"), _Arr("x", "n", out=True), _Arr("b", "n")),
        init=_init_trisolv, numpy_impl=_np_trisolv, numpy_vectorized=True,
        flops=lambda s: 1.0 * s["n"] * s["n"],
    ),
    # ------------------------------------------------------------------ medley
    _k(
        "deriche", "medley",
        sizes=_sizes(("w", "h"), (64, 64), (192, 128), (720, 480), (4096, 2160)),
        args=(_I("w"), _I("h"), _D("alpha"), _Arr("imgIn", "w", "h"),
              _Arr("imgOut", "w", "h", out=True), _Arr("y1", "w", "h", out=True),
              _Arr("y2", "w", "h", out=True)),
        init=_init_deriche, numpy_impl=_np_deriche, numpy_vectorized=True,
        flops=lambda s: 32.0 * s["w"] * s["h"],
    ),
    _k(
        "floyd-warshall", "medley",
        sizes=_sizes(_N, (60,), (180,), (500,), (2800,)),
        args=(_I("n"), _Arr("path", "n", "n", out=True)),
        init=_init_floyd_warshall, numpy_impl=_np_floyd_warshall, numpy_vectorized=True,
        flops=lambda s: 2.0 * s["n"] ** 3,
        notes="double instead of PolyBench's int (values are small integers)",
    ),
    _k(
        "nussinov", "medley",
        sizes=_sizes(_N, (60,), (180,), (500,), (2500,)),
        args=(_I("n"), _Arr("seq", "n", dtype="int32"),
              _Arr("table", "n", "n", out=True, dtype="int32")),
        init=_init_nussinov, numpy_impl=_np_nussinov, numpy_vectorized=False,
        flops=lambda s: s["n"] ** 3 / 3.0,
    ),
    # ---------------------------------------------------------------- stencils
    _k(
        "adi", "stencils",
        sizes=_sizes(_TN, (20, 20), (40, 60), (100, 200), (500, 1000)),
        args=(_I("tsteps"), _I("n"), _Arr("u", "n", "n", out=True), _Arr("v", "n", "n", out=True),
              _Arr("p", "n", "n", out=True), _Arr("q", "n", "n", out=True)),
        init=_init_adi, numpy_impl=_np_adi, numpy_vectorized=False,
        flops=lambda s: 30.0 * s["tsteps"] * s["n"] * s["n"],
    ),
    _k(
        "fdtd-2d", "stencils",
        sizes=_sizes(("tmax", "nx", "ny"), (20, 20, 30), (40, 60, 80), (100, 200, 240),
                     (500, 1000, 1200)),
        args=(_I("tmax"), _I("nx"), _I("ny"), _Arr("ex", "nx", "ny", out=True),
              _Arr("ey", "nx", "ny", out=True), _Arr("hz", "nx", "ny", out=True),
              _Arr("_fict_", "tmax")),
        init=_init_fdtd_2d, numpy_impl=_np_fdtd_2d, numpy_vectorized=True,
        flops=lambda s: 11.0 * s["tmax"] * s["nx"] * s["ny"],
    ),
    _k(
        "heat-3d", "stencils",
        sizes=_sizes(_TN, (20, 10), (40, 20), (100, 40), (500, 120)),
        args=(_I("tsteps"), _I("n"), _Arr("A", "n", "n", "n", out=True),
              _Arr("B", "n", "n", "n", out=True)),
        init=_init_heat_3d, numpy_impl=_np_heat_3d, numpy_vectorized=True,
        flops=lambda s: 2.0 * 15.0 * s["tsteps"] * (s["n"] - 2) ** 3,
        check_init=_check_heat_3d,
        notes="PolyBench's initial state is linear in i, j, k: a fixed point of the "
              "stencil, so the outputs equal the inputs; variants are also checked on "
              "check_init's perturbed inputs",
    ),
    _k(
        "jacobi-1d", "stencils",
        sizes=_sizes(_TN, (20, 30), (40, 120), (100, 400), (500, 2000)),
        args=(_I("tsteps"), _I("n"), _Arr("A", "n", out=True), _Arr("B", "n", out=True)),
        init=_init_jacobi_1d, numpy_impl=_np_jacobi_1d, numpy_vectorized=True,
        flops=lambda s: 2.0 * 3.0 * s["tsteps"] * (s["n"] - 2),
    ),
    _k(
        "jacobi-2d", "stencils",
        sizes=_sizes(_TN, (20, 30), (40, 90), (100, 250), (500, 1300)),
        args=(_I("tsteps"), _I("n"), _Arr("A", "n", "n", out=True), _Arr("B", "n", "n", out=True)),
        init=_init_jacobi_2d, numpy_impl=_np_jacobi_2d, numpy_vectorized=True,
        flops=lambda s: 2.0 * 5.0 * s["tsteps"] * (s["n"] - 2) ** 2,
    ),
    _k(
        "seidel-2d", "stencils",
        sizes=_sizes(_TN, (20, 40), (40, 120), (100, 400), (500, 2000)),
        args=(_I("tsteps"), _I("n"), _Arr("A", "n", "n", out=True)),
        init=_init_seidel_2d, numpy_impl=_np_seidel_2d, numpy_vectorized=False,
        flops=lambda s: 9.0 * s["tsteps"] * (s["n"] - 2) ** 2,
        check_init=_check_seidel_2d,
        notes="PolyBench's initial state is bilinear: a fixed point of the 9-point "
              "average up to rounding, so any update order gives the same result; "
              "variants are also checked on check_init's perturbed inputs",
    ),
]

#: name -> KernelDef, in PolyBench's order
KERNELS: dict[str, KernelDef] = {k.name: k for k in _DEFS}
KERNEL_NAMES: tuple[str, ...] = tuple(KERNELS)


def get_kernel(name: str) -> KernelDef:
    """Look a kernel up by PolyBench name, file stem or function name
    ("floyd-warshall", "floyd_warshall", "kernel_floyd_warshall")."""
    key = name.strip()
    if key.startswith("kernel_"):
        key = key[len("kernel_"):]
    if key.endswith(".c"):
        key = key[:-2]
    for k in _DEFS:
        if key in (k.name, k.name.replace("-", "_")):
            return k
    raise KeyError(f"unknown PolyBench kernel {name!r}; known: {', '.join(KERNEL_NAMES)}")


def make_args(kdef: KernelDef, size: str = "MINI") -> dict[str, Any]:
    """A fresh, complete argument dict (ints, doubles, arrays) for ``size``."""
    sizes = dict(kdef.sizes[size.upper()])
    args: dict[str, Any] = dict(sizes)
    args.update(kdef.init(sizes))
    for spec in kdef.args:
        if spec.name not in args:
            raise KeyError(f"{kdef.name}: init gave no value for {spec.name}")
        val = args[spec.name]
        if spec.kind == "array":
            want = spec.resolve_shape(sizes)
            if (not isinstance(val, np.ndarray) or val.shape != want
                    or val.dtype != np.dtype(spec.dtype) or not val.flags.c_contiguous):
                raise TypeError(f"{kdef.name}: bad init for array {spec.name}")
        elif spec.kind == "int":
            args[spec.name] = int(val)
        else:
            args[spec.name] = float(val)
    return args


def make_check_args(kdef: KernelDef, size: str = "MINI") -> dict[str, Any] | None:
    """Inputs for checking only (None when the kernel has no check_init):
    PolyBench's inputs with a deterministic perturbation, for the kernels whose
    PolyBench inputs are a fixed point of the computation (heat-3d, seidel-2d),
    where a wrong schedule would still give the right answer."""
    if kdef.check_init is None:
        return None
    args = make_args(kdef, size)
    sizes = {n: args[n] for n in kdef.int_params}
    for name, val in kdef.check_init(sizes).items():
        old = args[name]
        if isinstance(old, np.ndarray):
            if val.shape != old.shape or val.dtype != old.dtype or not val.flags.c_contiguous:
                raise TypeError(f"{kdef.name}: bad check_init for {name}")
        args[name] = val
    return args


def copy_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """Deep copy of the arrays of an argument dict (scalars are immutable)."""
    return {k: (v.copy(order="C") if isinstance(v, np.ndarray) else v) for k, v in args.items()}


def call_args(kdef: KernelDef, args: Mapping[str, Any]) -> list:
    """The arguments in the C function's order."""
    return [args[a.name] for a in kdef.args]


def outputs(kdef: KernelDef, args: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The arrays the kernel writes."""
    return {a.name: args[a.name] for a in kdef.out_args}


def run_numpy(kdef: KernelDef, args: dict[str, Any]) -> None:
    if kdef.numpy_impl is None:
        raise NotImplementedError(f"{kdef.name} has no numpy version")
    kdef.numpy_impl(args)
