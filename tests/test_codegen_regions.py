"""One OpenMP region around a sequential loop (codegen/openmp.py, ``shares_one_region``).

A time loop or a wavefront around parallel loops is printed as one ``omp parallel``
region holding the sequential loop, with an ``omp for`` per parallel loop, instead of
one ``omp parallel for`` region per iteration; a statement between the sequential loop
and the parallel loop keeps the region-per-iteration shape at that level. Structural
tests count the pragmas in the C; differential tests compare the results, bit for bit on
integers, with the original order run serially, on 1, 2 and 3 threads, including the
gather (status 1) and division (status 2) faults raised from inside a hoisted region.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import polycomp
from polycomp.errors import ArgumentError, IntegerDivisionError
from polycomp.threads import get_max_threads

from programs import seidel1d
from test_tiling_programs import band_schedule

pytestmark = pytest.mark.needs_cc

JACOBI2D = """
void jac(int T, int N, long A[N][N], long B[N][N]) {
  for (int t = 0; t < T; t++) {
    for (int i = 1; i < N - 1; i++)
      for (int j = 1; j < N - 1; j++)
        B[i][j] = (A[i][j] + A[i - 1][j] + A[i + 1][j] + A[i][j - 1] + A[i][j + 1]) / 5;
    for (int i = 1; i < N - 1; i++)
      for (int j = 1; j < N - 1; j++)
        A[i][j] = B[i][j] - t;
  }
}"""

SEIDEL2D = """
void sei(int T, int N, long A[N][N]) {
  for (int t = 0; t < T; t++)
    for (int i = 1; i < N - 1; i++)
      for (int j = 1; j < N - 1; j++)
        A[i][j] = (A[i - 1][j] + A[i][j - 1] + A[i + 1][j] + A[i][j + 1] + A[i][j]) % 1009;
}"""

# two sequential loops around the parallel one: the region goes around the outer
NESTED = """
void nest(int T, int S, int N, long A[N]) {
  for (int t = 0; t < T; t++)
    for (int u = 0; u < S; u++)
      for (int i = 0; i < N; i++)
        A[i] = (A[i] * 3 + u - t) % 10007;
}"""

# a statement in the time loop: every thread would run it, so no region around t
STATEMENT = """
void mix(int T, int N, long A[N], long s[T]) {
  for (int t = 0; t < T; t++) {
    s[t] = A[0] + t;
    for (int i = 0; i < N; i++)
      A[i] = (A[i] * 3 + s[t]) % 10007;
  }
}"""

# ... and with a second sequential loop below the statement, the region goes around that
STATEMENT_THEN_LOOP = """
void mix2(int T, int S, int N, long A[N], long s[T]) {
  for (int t = 0; t < T; t++) {
    s[t] = A[0] + t;
    for (int u = 0; u < S; u++)
      for (int i = 0; i < N; i++)
        A[i] = (A[i] * 3 + s[t] + u) % 10007;
  }
}"""

# a gather and a division by data inside the parallel loop, under a sequential loop over
# k (a custom schedule puts k outside d): the faults are met inside the hoisted region
GATHER_INLINE = ("def g(int64(V, D) T, int32(K) Idx, int64(K) Dv) -> (O) "
                 "{ O(d) +=! T(Idx(k), d) / Dv(k) }",
                 "{ S0[d] -> [0, 0, d]; S1[d, k] -> [1, k, d] }")
# the same with a loop in the parallel loop's body: outlined, its status propagated
GATHER_OUTLINED = ("def g(int64(V, D) T, int32(K) Idx, int64(K, E) Dv) -> (O) "
                   "{ O(d, e) +=! T(Idx(k), d) / Dv(k, e) }",
                   "{ S0[d, e] -> [0, 0, d, e]; S1[d, e, k] -> [1, k, d, e] }")
GATHER_SIZES = {"V": 7, "D": 30, "K": 5, "E": 9}

SERIAL = dict(scheduler="none", parallel=False)


def pragmas(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("#pragma omp")]


def shape(text: str) -> tuple[int, int, int]:
    """(bare `omp parallel` regions, `omp for` loops, `omp parallel for` loops)."""
    found = pragmas(text)
    return (found.count("#pragma omp parallel"), found.count("#pragma omp for"),
            found.count("#pragma omp parallel for"))


@pytest.fixture
def restore_threads():
    before = get_max_threads()
    yield
    polycomp.set_num_threads(before)


def wavefront_seidel1d(tiles=(4, 8)) -> tuple[polycomp.Program, dict]:
    program = seidel1d()
    sizes = {"T": 9, "N": 40}
    tree = band_schedule(program.specialize(sizes), ["{ S0[t, i] -> [(t)] }",
                                                     "{ S0[t, i] -> [(2t + i)] }"]).to_str()
    return program, dict(scheduler="custom", schedule=tree, tile_sizes=tiles,
                         parallel_min_work=0)


def loop_kernels() -> list[tuple[str, str, dict, dict]]:
    """(name, C source, sizes, options) of the kernels whose region is hoisted."""
    return [("jacobi2d", JACOBI2D, {"T": 4, "N": 30}, dict(scheduler="isl")),
            ("seidel2d_tiled", SEIDEL2D, {"T": 6, "N": 40},
             dict(scheduler="isl", tile_sizes=(4, 4, 4))),
            ("nested", NESTED, {"T": 4, "S": 3, "N": 50}, dict(scheduler="none")),
            ("statement_then_loop", STATEMENT_THEN_LOOP, {"T": 4, "S": 3, "N": 50},
             dict(scheduler="none"))]


# ----------------------------------------------------------------------------- structure

def test_time_stepped_jacobi2d_is_one_region_with_a_worksharing_loop_per_sweep():
    kernel = polycomp.compile_loops(JACOBI2D, sizes={"T": 4, "N": 30}, scheduler="isl",
                                    parallel_min_work=0)
    assert shape(kernel.c_source) == (1, 2, 0)
    # the region encloses the time loop, the worksharing loops are inside it
    text = kernel.c_source
    region = text.index("#pragma omp parallel\n")
    time_loop = text.index("for (long c0", region)
    assert text.index("#pragma omp for", region) > time_loop
    assert "restrict" in text[:text.index("int polycomp_jac(")]  # outlined bodies stay


@pytest.mark.parametrize("make", ["seidel1d_custom", "seidel2d_isl"])
def test_wavefronted_kernel_is_one_region(make):
    if make == "seidel1d_custom":
        program, options = wavefront_seidel1d()
        kernel = polycomp.compile_program(program, sizes={"T": 9, "N": 40}, **options)
    else:
        kernel = polycomp.compile_loops(SEIDEL2D, sizes={"T": 6, "N": 40}, scheduler="isl",
                                        tile_sizes=(4, 4, 4), parallel_min_work=0)
    regions, shared, per_iteration = shape(kernel.c_source)
    assert (regions, per_iteration) == (1, 0) and shared >= 1


def test_region_goes_around_the_outermost_sequential_loop():
    kernel = polycomp.compile_loops(NESTED, sizes={"T": 4, "S": 3, "N": 50},
                                    scheduler="none", parallel_min_work=0)
    text = kernel.c_source
    assert shape(text) == (1, 1, 0)
    body = text[text.index("int polycomp_nest("):]
    # the region comes before both sequential loops
    assert body.index("#pragma omp parallel\n") < body.index("for (long c0")


def test_a_statement_in_the_sequential_loop_keeps_a_region_per_iteration():
    kernel = polycomp.compile_loops(STATEMENT, sizes={"T": 4, "N": 50}, scheduler="none",
                                    parallel_min_work=0)
    assert shape(kernel.c_source) == (0, 0, 1)


def test_below_a_statement_the_region_goes_around_the_inner_sequential_loop():
    kernel = polycomp.compile_loops(STATEMENT_THEN_LOOP, sizes={"T": 4, "S": 3, "N": 50},
                                    scheduler="none", parallel_min_work=0)
    text = kernel.c_source
    assert shape(text) == (1, 1, 0)
    body = text[text.index("int polycomp_mix2("):]
    # t, then the statement, then the region around u
    t_loop, statement = body.index("for (long c0"), body.index("s[c0] =")
    region = body.index("#pragma omp parallel\n")
    assert t_loop < statement < region < body.index("for (long c1")


def test_an_outermost_parallel_loop_keeps_its_parallel_for():
    kernel = polycomp.compile_loops(
        "void f(int N, long A[N]) { for (int i = 0; i < N; i++) A[i] = A[i] * 2; }",
        sizes={"N": 64}, scheduler="none", parallel_min_work=0)
    assert shape(kernel.c_source) == (0, 0, 1)


@pytest.mark.parametrize("source,schedule", [GATHER_INLINE, GATHER_OUTLINED])
def test_gather_kernels_hoist_their_region(source, schedule):
    kernel = polycomp.compile(source, sizes=GATHER_SIZES, scheduler="custom",
                              schedule=schedule, parallel_min_work=0)
    text = kernel.c_source
    # the initialisation loop is a parallel loop of its own; the k loop holds the region
    assert shape(text) == (1, 1, 1)
    region = text[text.index("#pragma omp parallel\n"):]
    assert "#pragma omp atomic write" in region  # the status writes inside stay atomic
    assert text.index("int polycomp_status = 0;", text.index("int polycomp_g(")) < \
        text.index("#pragma omp parallel\n")  # declared before the region: shared


# ----------------------------------------------------------------------------- results

def _run_same(kernel, reference, args, threads: int) -> None:
    polycomp.set_num_threads(threads)
    got = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    want = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    out_got, out_want = kernel(*got), reference(*want)
    for g, w in zip(got, want):
        if isinstance(g, np.ndarray):
            assert np.array_equal(g, w)
    if out_want is not None:
        assert np.array_equal(out_got, out_want)


@pytest.mark.parametrize("name,source,sizes,options", loop_kernels(),
                         ids=[k[0] for k in loop_kernels()])
def test_hoisted_regions_match_the_serial_original_order(name, source, sizes, options,
                                                         restore_threads):
    kernel = polycomp.compile_loops(source, sizes=sizes, parallel_min_work=0, **options)
    assert shape(kernel.c_source)[0] == 1, name
    reference = polycomp.compile_loops(source, sizes=sizes, **SERIAL)
    rng = np.random.default_rng(5)
    n = sizes["N"]
    arrays = {"jac": [rng.integers(-50, 50, (n, n)), np.zeros((n, n), np.int64)],
              "sei": [rng.integers(0, 1000, (n, n))],
              "nest": [rng.integers(0, 10000, n)],
              "mix2": [rng.integers(0, 10000, n), np.zeros(sizes["T"], np.int64)]}
    entry = re.search(r"void (\w+)\(", source).group(1)
    # the sizes dicts list the C parameters in their order
    args = list(sizes.values()) + [a.astype(np.int64) for a in arrays[entry]]
    for threads in (1, 2, 3):
        _run_same(kernel, reference, args, threads)


@pytest.mark.parametrize("tiles", [(4, 8), (3, 5)])
def test_hoisted_wavefront_matches_the_serial_original_order(tiles, restore_threads):
    program, options = wavefront_seidel1d(tiles)
    sizes = {"T": 9, "N": 40}
    kernel = polycomp.compile_program(program, sizes=sizes, **options)
    assert shape(kernel.c_source)[:2] == (1, 1)
    reference = polycomp.compile_program(program, sizes=sizes, **SERIAL)
    for threads in (1, 2, 3):
        _run_same(kernel, reference, [9, np.arange(40, dtype=np.int64) % 7], threads)


@pytest.fixture(scope="module")
def gather_kernels():
    built = {}
    for which, (source, schedule) in (("inline", GATHER_INLINE),
                                      ("outlined", GATHER_OUTLINED)):
        built[which] = (
            polycomp.compile(source, sizes=GATHER_SIZES, scheduler="custom",
                             schedule=schedule, parallel_min_work=0),
            polycomp.compile(source, sizes=GATHER_SIZES, **SERIAL))
    return built


def _gather_inputs(which: str, fault: str, data: st.DataObject):
    v, d, k, e = (GATHER_SIZES[n] for n in "VDKE")
    table = np.arange(v * d, dtype=np.int64).reshape(v, d) * 37 - 500
    idx = np.array(data.draw(st.lists(st.integers(0, v - 1), min_size=k, max_size=k)),
                   np.int32)
    shape_dv = (k,) if which == "inline" else (k, e)
    nonzero = st.integers(-9, 9).filter(bool)
    dv = np.array(data.draw(st.lists(nonzero, min_size=int(np.prod(shape_dv)),
                                     max_size=int(np.prod(shape_dv)))), np.int64)
    dv = dv.reshape(shape_dv)
    if fault == "gather":
        at = data.draw(st.integers(0, k - 1))
        idx[at] = data.draw(st.sampled_from([-1, v, v + 3]))
    elif fault == "division":
        dv[np.unravel_index(data.draw(st.integers(0, dv.size - 1)), dv.shape)] = 0
    return table, idx, dv


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), which=st.sampled_from(["inline", "outlined"]),
       fault=st.sampled_from(["none", "gather", "division"]),
       threads=st.sampled_from([1, 2, 3]))
def test_faults_inside_a_hoisted_region_are_reported(gather_kernels, restore_threads, data,
                                                     which, fault, threads):
    kernel, reference = gather_kernels[which]
    assert shape(kernel.c_source)[0] == 1
    args = _gather_inputs(which, fault, data)
    polycomp.set_num_threads(threads)
    if fault == "none":
        assert np.array_equal(kernel(*args), reference(*args))
        return
    error = ArgumentError if fault == "gather" else IntegerDivisionError
    match = "out of bounds" if fault == "gather" else "division"
    with pytest.raises(error, match=match):
        reference(*args)
    with pytest.raises(error, match=match):
        kernel(*args)
