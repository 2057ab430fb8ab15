"""Reductions as reductions (scheduler/reductions.py): the chains leave validity, the
other dependences cover whole reductions, marks still respect the chains, exact_fp keeps
the order, and the schedules that this buys (conv without skewed reduction loops)."""

from __future__ import annotations

import islpy as isl
import numpy as np
import pytest

import polycomp
from polycomp import Program
from polycomp import islutil as U
from polycomp.errors import IllegalScheduleError
from polycomp.options import Options
from polycomp.scheduler import compute_dependences, get_scheduler
from polycomp.scheduler import tree as T
from polycomp.scheduler.reductions import relax_reductions, relaxable

MATMUL = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m,n) +=! A(m,k) * B(k,n) }"
CONV = """
def conv(float(N,C,H,W) I, float(F,C,KH,KW) Wt) -> (O) {
  O(n,f,y,x) +=! I(n,c,y+kh,x+kw) * Wt(f,c,kh,kw)
}
"""
INT_SUM = "def isum(int32(M,K) A) -> (S) { S(m) +=! A(m,k) * A(m,k) }"


def deps_of(tc: str, sizes: dict, exact_fp: bool = False):
    kernel = polycomp.compile(tc)
    program = kernel.definition.lower(sizes)
    return program, relax_reductions(program, compute_dependences(program), exact_fp)


def test_the_chain_leaves_validity_and_the_init_covers_the_whole_reduction():
    program, deps = deps_of(MATMUL, {"M": 4, "N": 5, "K": 6})
    chain = deps.reduction
    assert chain is not None and not chain.is_empty()
    assert deps.all().intersect(chain).is_empty()
    # the initialisation S0[m, n] precedes every S1[m, n, k], not only k = 0
    init = deps.flow.union(deps.output)
    for k in range(6):
        assert not init.intersect(isl.UnionMap(
            f"{{ S0[1, 2] -> S1[1, 2, {k}] }}")).is_empty()
    # the original order is still legal, and so is any order of k
    everything = compute_dependences(program)
    assert everything.reduction is None
    assert everything.all().is_subset(deps.all().union(chain))


def test_exact_fp_keeps_float_chains_and_integers_are_always_relaxed():
    program, deps = deps_of(MATMUL, {"M": 4, "N": 5, "K": 6}, exact_fp=True)
    assert deps.reduction is None and not relaxable(program, exact_fp=True)
    program, deps = deps_of(INT_SUM, {"M": 4, "K": 6}, exact_fp=True)
    assert deps.reduction is not None and relaxable(program, exact_fp=True)


def test_a_reduction_reading_its_own_target_keeps_its_order():
    program = Program.from_isl(
        "prefix", arrays={"B": ("float64", (8,)), "A": ("float64", (8,))},
        statements=[dict(domain="{ S0[i, j] : 0 <= i < 8 and 0 <= j < i }",
                         write="{ S0[i, j] -> B[i] }", reads=["{ S0[i, j] -> B[j] }"],
                         reduction="+")])
    assert relaxable(program) == []
    deps = compute_dependences(program)
    assert relax_reductions(program, deps) is deps


def test_a_statement_between_the_updates_keeps_their_order():
    """The original schedule puts a reset of C in the middle of its reduction: extending
    the reset's dependences to the whole reduction would point backwards."""
    program = Program.from_isl(
        "reset", arrays={"C": ("float64", (1,)), "A": ("float64", (10,))},
        statements=[dict(domain="{ S0[k] : 0 <= k < 10 }", write="{ S0[k] -> C[0] }",
                         reads=["{ S0[k] -> A[k] }"], reduction="+"),
                    dict(domain="{ S1[] }", write="{ S1[] -> C[0] }",
                         reads=["{ S1[] -> A[0] }"])],
        schedule="{ S0[k] -> [k, 0]; S1[] -> [4, 1] }")
    deps = compute_dependences(program)
    assert relax_reductions(program, deps) is deps
    a = np.arange(10, dtype=np.float64)
    c = np.zeros(1)
    polycomp.compile_program(program)(c, a)
    assert c[0] == a[0] + a[5:].sum()


@pytest.mark.needs_cc
def test_reordered_reduction_is_legal_by_default_and_refused_under_exact_fp():
    """k reversed: legal for a reduction whose order may change, an error naming the
    broken dependence under exact_fp."""
    reversed_k = "{ S0[m, n] -> [0, m, n, 0]; S1[m, n, k] -> [1, m, n, -k] }"
    a = np.random.default_rng(0).random((6, 7), dtype=np.float32)
    b = np.random.default_rng(1).random((7, 5), dtype=np.float32)
    kernel = polycomp.compile(MATMUL, scheduler="custom", schedule=reversed_k)
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-5)
    with pytest.raises(IllegalScheduleError, match="flow|output|anti"):
        polycomp.compile(MATMUL, scheduler="custom", schedule=reversed_k, exact_fp=True)(a, b)


def matmul_tree_with_mark_on_k(mark: str) -> str:
    """A hand-written tree for MATMUL: bands (m, n), then ``mark`` over the band k."""
    return f"""domain: "{{ S0[m, n]; S1[m, n, k] }}"
child:
  sequence:
  - filter: "{{ S0[m, n] }}"
  - filter: "{{ S1[m, n, k] }}"
    child:
      schedule: "[{{ S1[m, n, k] -> [(m)] }}, {{ S1[m, n, k] -> [(n)] }}]"
      child:
        mark: "{mark}"
        child:
          schedule: "[{{ S1[m, n, k] -> [(k)] }}]"
"""


@pytest.mark.needs_cc
def test_a_parallel_mark_on_a_reduction_loop_is_refused():
    tree = matmul_tree_with_mark_on_k("omp_parallel")
    kernel = polycomp.compile(MATMUL, scheduler="custom", schedule=tree)
    with pytest.raises(IllegalScheduleError, match="carries"):
        kernel(np.ones((3, 4), np.float32), np.ones((4, 2), np.float32))


@pytest.mark.needs_cc
@pytest.mark.parametrize("scheduler", ["pluto", "isl"])
def test_conv_results_match_numpy_and_are_bit_exact_under_exact_fp(scheduler: str):
    rng = np.random.default_rng(2)
    x = rng.random((1, 5, 9, 8), dtype=np.float32)
    w = rng.random((6, 5, 3, 3), dtype=np.float32)
    want = np.zeros((1, 6, 7, 6), np.float64)
    for kh in range(3):
        for kw in range(3):
            want += np.einsum("nchw,fc->nfhw", x[:, :, kh:kh + 7, kw:kw + 6].astype(np.float64),
                              w[:, :, kh, kw].astype(np.float64))
    got = polycomp.compile(CONV, scheduler=scheduler)(x, w)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    exact = polycomp.compile(CONV, scheduler=scheduler, exact_fp=True)(x, w)
    original = polycomp.compile(CONV, scheduler="none", exact_fp=True)(x, w)
    assert np.array_equal(exact, original)


@pytest.mark.needs_cc
@pytest.mark.parametrize("scheduler", ["pluto", "isl"])
def test_integer_reductions_stay_bit_exact(scheduler: str):
    a = np.random.default_rng(3).integers(-1000, 1000, (9, 13)).astype(np.int32)
    got = polycomp.compile(INT_SUM, scheduler=scheduler)(a)
    assert np.array_equal(got, (a.astype(np.int64) ** 2).sum(axis=1).astype(np.int32))


def test_conv_keeps_its_reduction_loops_unskewed_and_vectorises_x():
    """Schedule quality: no band member of Pluto's schedule for conv's reduction
    statement mixes two iterators (the skew 2c + kh that the plain-dependence schedule
    has), and the generated code has a SIMD loop."""
    sizes = {"N": 1, "C": 32, "H": 30, "W": 30, "F": 32, "KH": 3, "KW": 3}
    program, deps = deps_of(CONV, sizes)
    schedule = get_scheduler("pluto")(program, deps, Options())
    members = 0
    for node in T.nodes(schedule):
        if not T.is_band(node):
            continue
        mupa = node.band_get_partial_schedule()
        for k in range(node.band_n_member()):
            for pa in U.to_list(mupa.get_at(k).get_pw_aff_list()):
                if pa.get_domain_space().get_tuple_name(isl.dim_type.set) != "S1":
                    continue
                involved = [d for d in range(pa.dim(isl.dim_type.in_))
                            if pa.involves_dims(isl.dim_type.in_, d, 1)]
                assert len(involved) <= 1, f"member {k} of S1 mixes iterators: {pa}"
                members += 1
    assert members >= 6
    variant = polycomp.compile(CONV).specialize(sizes)
    assert "#pragma omp simd" in variant.compiled.source.text


SOFTMAX = """
def softmax(float(B, M, N) X) -> (Y) {
    mx(b, m) max=! X(b, m, n)
    e(b, m, n) = exp(X(b, m, n) - mx(b, m))
    s(b, m) +=! e(b, m, n)
    Y(b, m, n) = e(b, m, n) / s(b, m)
}
"""
LAYERNORM = """
def layernorm(float(N, D) X, float(D) gamma, float(D) beta) -> (Y) {
    mean(n) +=! X(n, d) / float(D)
    var(n) +=! (X(n, d) - mean(n)) * (X(n, d) - mean(n)) / float(D)
    Y(n, d) = gamma(d) * (X(n, d) - mean(n)) * rsqrt(var(n) + 1e-5) + beta(d)
}
"""


@pytest.mark.needs_cc
def test_softmax_is_one_parallel_loop_with_vector_reductions():
    """Schedule quality: the max, exp, sum and divide share one parallel loop (one
    region, not one per statement), and the row reductions are simd reductions."""
    x = np.random.default_rng(4).standard_normal((3, 8, 40)).astype(np.float32)
    kernel = polycomp.compile(SOFTMAX, parallel_min_work=0)
    got = kernel(x)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-7)
    source = kernel.c_source
    assert source.count("#pragma omp parallel") == 1, source
    assert "reduction(max:" in source and "reduction(+:" in source, source


@pytest.mark.needs_cc
def test_layernorm_is_one_parallel_loop_with_vector_reductions():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((16, 96)).astype(np.float32)
    g, b = rng.random(96, dtype=np.float32), rng.random(96, dtype=np.float32)
    kernel = polycomp.compile(LAYERNORM, parallel_min_work=0)
    mu = x.mean(axis=-1, keepdims=True)
    want = g * (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + 1e-5) + b
    np.testing.assert_allclose(kernel(x, g, b), want, rtol=1e-4, atol=1e-5)
    source = kernel.c_source
    assert source.count("#pragma omp parallel") == 1, source
    assert source.count("reduction(+:") == 2, source


@pytest.mark.needs_cc
def test_exact_fp_keeps_reductions_scalar_and_bit_exact():
    x = np.random.default_rng(6).standard_normal((2, 5, 33)).astype(np.float32)
    exact = polycomp.compile(SOFTMAX, exact_fp=True, parallel_min_work=0)
    assert "reduction(" not in exact.specialize({"B": 2, "M": 5, "N": 33}).compiled.source.text
    original = polycomp.compile(SOFTMAX, scheduler="none", exact_fp=True)
    assert np.array_equal(exact(x), original(x))


@pytest.mark.needs_cc
def test_a_simd_mark_on_a_reduction_loop_accumulates_per_lane():
    """A hand-written tree with the simd mark on k (the reduction loop of matmul) is
    legal: codegen keeps C(m, n) in a local reduced across the lanes."""
    tree = matmul_tree_with_mark_on_k("omp_simd")
    rng = np.random.default_rng(7)
    a, b = rng.random((5, 37), dtype=np.float32), rng.random((37, 6), dtype=np.float32)
    kernel = polycomp.compile(MATMUL, scheduler="custom", schedule=tree)
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-5)
    assert "reduction(+:" in kernel.c_source


@pytest.mark.needs_cc
@pytest.mark.parametrize("n,contracted", [(40, True), (20000, False)])
def test_softmax_rows_live_in_local_arrays(n: int, contracted: bool):
    """Array contraction (scheduler/contraction.py): fused under (b, m), e is a local row
    of the loop body (no full-size buffer, no argument), mx and s local scalars; a row
    past LOCAL_BYTES stays a full array."""
    x = np.random.default_rng(8).standard_normal((2, 3, n)).astype(np.float32)
    kernel = polycomp.compile(SOFTMAX, parallel_min_work=0)
    got = kernel(x)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-9)
    source = kernel.c_source
    assert (f"float e[{n}];" in source) == contracted, source
    entry = source[source.index("int polycomp_softmax("):].splitlines()[0]
    assert ("float *restrict e" in entry) != contracted, entry
    assert "float *restrict mx" not in entry and "float *restrict s" not in entry


GEMM_GELU = """def gemm_bias_gelu(float(M, K) A, float(K, N) B, float(N) bias) -> (Y) {
    C(m, n) +=! A(m, k) * B(k, n)
    Y(m, n) = 0.5 * (C(m, n) + bias(n)) * (1.0 + erf((C(m, n) + bias(n)) * 0.70710678118654752))
}"""


@pytest.mark.needs_cc
def test_a_compute_bound_reduction_keeps_its_vector_loop_beside_its_epilogue():
    """Schedule quality: matmul's reduction is not fused into its GELU epilogue's loops
    (that made k an innermost strided dot product, 40x slower); it keeps a simd loop and
    C stays an array."""
    rng = np.random.default_rng(9)
    a, b = rng.random((64, 96), dtype=np.float32), rng.random((96, 80), dtype=np.float32)
    bias = rng.random(80, dtype=np.float32)
    kernel = polycomp.compile(GEMM_GELU)
    got = kernel(a, b, bias)
    x = a.astype(np.float64) @ b + bias
    from math import erf
    want = 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))
    np.testing.assert_allclose(got, want, rtol=1e-4)
    source = kernel.c_source
    assert "#pragma omp simd" in source and "float C[1]" not in source, source
