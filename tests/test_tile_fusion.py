"""Tile-level fusion of a contraction with its initialisation and epilogue
(scheduler/tile_fusion.py): where it applies, what the tree and the code look like, and
the results against numpy, parallel and serial, with and without the fusion."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import polycomp
from polycomp import islutil as U
from polycomp.scheduler import tree as T

# a 1x1 convolution (channel-blocked by the compiler), then bias and relu
CONV_BIAS_RELU = """
def cbr(float(C,H,W) I, float(F,C) Wt, float(F) B) -> (O, R) {
  O(f,h,w) +=! I(c,h,w) * Wt(f,c)
  R(f,h,w) = fmax(O(f,h,w) + B(f), 0.0)
}
"""
MM_BIAS = """
def mmb(float(M,K) A, float(K,N) Bm, float(N) b) -> (C, D) {
  C(m,n) +=! A(m,k) * Bm(k,n)
  D(m,n) = C(m,n) + b(n)
}
"""


def _compile(src: str, sizes: dict[str, int], **options) -> polycomp.Kernel:
    with warnings.catch_warnings():
        # the NCHW unpack of the blocked output is scalar (not what is tested here)
        warnings.simplefilter("ignore", polycomp.PerformanceWarning)
        return polycomp.compile(src, sizes=sizes, **options)


def _names(node) -> set[str]:
    return {s.get_tuple_name() for s in U.sets_of(node.get_domain())}


def _statements_under(schedule, mark: str) -> list[set[str]]:
    """The statements below each mark of that name."""
    return [_names(n) for n in T.nodes(schedule) if T.is_mark(n, mark)]


@pytest.mark.needs_cc
@pytest.mark.parametrize("parallel", [True, False])
def test_conv_init_and_epilogue_run_inside_the_contractions_tiles(parallel):
    sizes = {"C": 64, "F": 256, "H": 56, "W": 56}  # tiled (at ResNet's shape)
    kernel = _compile(CONV_BIAS_RELU, sizes, parallel=parallel)
    names = {s.name for s in kernel.program.statements}
    contraction = next(s.name for s in kernel.program.statements if s.reduction == "+")
    init = next(s.name for s in kernel.program.statements
                if not s.reads and s.name != contraction and "pack" not in s.name)
    if parallel:
        # one parallel region holds the zeroing, the reduction and the epilogue
        regions = _statements_under(kernel.schedule, T.MARK_PARALLEL)
        fused = [r for r in regions if contraction in r]
        assert len(fused) == 1 and init in fused[0] and "S2" in fused[0], regions
    # the contraction's outer tile loop is a loop of the zeroing and the epilogue too
    tops = [n for n in T.nodes(kernel.schedule) if T.is_band(n)
            and {contraction, init, "S2"} <= _names(n)]
    assert tops and names >= {contraction, init, "S2"}
    rng = np.random.default_rng(0)
    i = rng.standard_normal((64, 56, 56)).astype(np.float32)
    w = rng.standard_normal((256, 64)).astype(np.float32)
    b = rng.standard_normal(256).astype(np.float32)
    o, r = kernel(i, w, b)
    want = np.einsum("chw,fc->fhw", i.astype(np.float64), w.astype(np.float64))
    np.testing.assert_allclose(o, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(r, np.maximum(want + b[:, None, None], 0), rtol=1e-4,
                               atol=1e-4)
    if parallel:
        # the same kernel without the pass: as many parallel regions as loop nests
        apart = _compile(CONV_BIAS_RELU, sizes, fuse_tiles=False)
        assert kernel.source.count("#pragma omp parallel") < \
            apart.source.count("#pragma omp parallel")
        np.testing.assert_allclose(r, apart(i, w, b)[1], rtol=1e-5, atol=1e-5)


@pytest.mark.needs_cc
def test_matmul_epilogue_fused_and_right_on_partial_tiles():
    # sizes that leave partial tiles at every level
    sizes = {"M": 70, "K": 45, "N": 83}
    kernel = _compile(MM_BIAS, sizes)
    bands = [n for n in T.nodes(kernel.schedule) if T.is_band(n)]
    assert any(len(_names(n)) >= 3 for n in bands), T.dump(kernel.schedule)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((70, 45)).astype(np.float32)
    bm = rng.standard_normal((45, 83)).astype(np.float32)
    b = rng.standard_normal(83).astype(np.float32)
    c, d = kernel(a, bm, b)
    want = a.astype(np.float64) @ bm.astype(np.float64)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(d, want + b, rtol=1e-4, atol=1e-4)


@pytest.mark.needs_cc
def test_no_fusion_where_the_epilogue_reads_across_tiles():
    # the epilogue reads an element and its transpose: two tiles (of rows of C) hold
    # what one instance reads (the transpose alone would be one tile: legal, fused)
    src = """
    def t(float(N,N) A, float(N,N) B) -> (C, D) {
      C(i,j) +=! A(i,k) * B(k,j)
      D(i,j) = C(i,j) + C(j,i)
    }
    """
    kernel = _compile(src, {"N": 64})
    contraction = next(s.name for s in kernel.program.statements if s.reduction == "+")
    for n in T.nodes(kernel.schedule):
        if T.is_band(n):
            inside = _names(n)
            assert not (contraction in inside and "S2" in inside), T.dump(kernel.schedule)
    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(2))
    c, d = kernel(a, b)
    want = a.astype(np.float64) @ b
    np.testing.assert_allclose(d, want + want.T, rtol=1e-4, atol=1e-4)
