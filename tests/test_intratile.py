"""Intra-tile optimisation (scheduler/intratile.py): the order of the point loops, the SIMD
mark on a unit-stride loop that carries nothing, unroll-and-jam, and the kernels that
result against numpy and the original order."""

import os
import shutil
import subprocess

import islpy as isl
import pytest

import polycomp
from polycomp import Program
from polycomp.options import Options
from polycomp.scheduler import cache_model as CM
from polycomp.scheduler import compute_dependences
from polycomp.scheduler import tree as T
from polycomp.scheduler.legality import carried_by_member, check_schedule
from polycomp.scheduler.passes import run_passes
from polycomp.testing import Oracle, check_against_reference

from oracles import JACOBI1D, LU, MATMUL, ROW_SUMS, SEIDEL1D, TRANSPOSE_ADD, wrapped
from programs import matmul, seidel1d
from test_tiling_programs import (band_schedule, definition, lu, marks, row_sums, scheduled,
                                  transpose_add)

def long_strides() -> Program:
    """A[i, j] = A[i - 8, j] + A[i, j - 8]: with 8x8 tiles no dependence stays in a tile."""
    return Program.from_isl(
        "long_strides", arrays={"A": ("int64", ("N", "N"))},
        statements=[dict(domain="[N] -> { S0[i, j] : 8 <= i < N and 8 <= j < N }",
                         write="{ S0[i, j] -> A[i, j] }",
                         reads=["{ S0[i, j] -> A[i - 8, j] }", "{ S0[i, j] -> A[i, j - 8] }"],
                         body=lambda a, b: a + 2 * b)])


def _long_strides(A):
    a = A.tolist()
    for i in range(8, len(a)):
        for j in range(8, len(a)):
            a[i][j] = a[i - 8][j] + 2 * a[i][j - 8]
    return {"A": wrapped(a, A.dtype)}


def prefix2d() -> Program:
    """A[i, j] += A[i - 1, j] + A[i, j - 1]: distances (1, 0) and (0, 1)."""
    return Program.from_isl(
        "prefix2d", arrays={"A": ("int64", ("N", "N"))},
        statements=[dict(domain="[N] -> { S0[i, j] : 1 <= i < N and 1 <= j < N }",
                         write="{ S0[i, j] -> A[i, j] }",
                         reads=["{ S0[i, j] -> A[i - 1, j] }", "{ S0[i, j] -> A[i, j - 1] }"],
                         body=lambda a, b: a - b, reduction="+")])


def _prefix2d(A):
    a = A.tolist()
    for i in range(1, len(a)):
        for j in range(1, len(a)):
            a[i][j] += a[i - 1][j] - a[i][j - 1]
    return {"A": wrapped(a, A.dtype)}


LONG_STRIDES, PREFIX2D = Oracle("numpy", _long_strides), Oracle("numpy", _prefix2d)


def member_map(node, k, program, statement):
    return T.member_union_map(node, k).intersect_domain(program.statement(statement).domain)


def expect_member(node, k, program, statement, text):
    domain = program.statement(statement).domain
    assert member_map(node, k, program, statement).is_equal(
        isl.UnionMap(text).intersect_domain(domain))


def simd_band(schedule):
    (mark,) = marks(schedule, T.MARK_VECTOR)
    return mark.child(0)


# ----------------------------------------------------------------------------- structure

def test_simd_mark_sits_on_the_unit_stride_member_of_matmul():
    program = matmul()
    schedule, deps = scheduled(program, scheduler="isl", tile_sizes=(32, 32, 8))
    band = simd_band(schedule)
    assert band.band_n_member() == 1
    expect_member(band, 0, program, "S1", "[M, N, K] -> { S1[i, j, k] -> [j mod 32] }")
    assert carried_by_member(band, 0, deps.all()).is_empty()
    # every reference is unit-stride (C, B) or invariant (A) along it
    refs = CM.band_references(band, program)
    assert {r.array for r in refs if r.unit_stride(0) and not r.invariant(0)} == {"B", "C"}
    assert {r.array for r in refs if r.invariant(0)} == {"A"}


def test_unroll_and_jam_unrolls_i_and_k_inside_the_simd_loop():
    program = matmul()
    schedule, _ = scheduled(program, scheduler="isl", tile_sizes=(32, 32, 8), unroll=4)
    band = simd_band(schedule)
    unrolled = band.child(0)
    assert T.is_band(unrolled) and unrolled.band_n_member() == 2
    assert all(unrolled.band_member_get_ast_loop_type(k) == isl.ast_loop_type.unroll
               for k in range(2))
    expect_member(unrolled, 0, program, "S1", "[M, N, K] -> { S1[i, j, k] -> [i mod 4] }")
    expect_member(unrolled, 1, program, "S1", "[M, N, K] -> { S1[i, j, k] -> [k mod 4] }")
    # the strip members stay outside, in the order of the point band
    outer = band.parent().parent()
    expect_member(outer, 0, program, "S1",
                  "[M, N, K] -> { S1[i, j, k] -> [floor((i mod 32)/4)] }")
    expect_member(outer, 1, program, "S1", "[M, N, K] -> { S1[i, j, k] -> [floor((k mod 8)/4)] }")

def test_full_register_tiles_are_isolated_from_partial_ones():
    # 70 = 2 * 32 + 6 and 70 = 8 * 8 + 6: partial tiles whose last i strip is partial
    program = matmul().specialize({"M": 70, "N": 70, "K": 70})
    schedule, _ = scheduled(program, scheduler="isl", tile_sizes=(32, 32, 8), unroll=4)
    outer = simd_band(schedule).parent().parent()
    assert "isolate" in str(outer.band_get_ast_build_options())
    text = isl.AstBuild.from_context(isl.Set("{ : }")).node_from_schedule(schedule).to_C_str()
    lines = [ln.strip() for ln in text.splitlines()]
    # somewhere the vector loop body is 16 unguarded copies of S1, one after the other
    runs = [k for k in range(len(lines) - 15)
            if all(ln.startswith("S1(") for ln in lines[k:k + 16])]
    assert runs


@pytest.mark.parametrize("extents, factor", [([7], 3), ([7, 7], 3), ([14, 14], 2), ([13], 4),
                                             ([28, 28], 4), ([55, 55], 4), ([None], 4),
                                             ([28, 14], 2)])
def test_the_unroll_factor_leaves_few_points_in_partial_register_tiles(extents, factor):
    from polycomp.scheduler.intratile import fitting_factor
    assert fitting_factor(4, extents) == factor
    assert fitting_factor(2, extents) == 2


def test_full_register_tiles_are_isolated_below_a_parallel_loop():
    # a blocked conv at 55 x 55: its jammed 4 x 4 tiles sit in the band of the parallel
    # channel-block loop; the full tiles are written without guards, their accumulators
    # promoted to locals
    kernel = polycomp.compile(
        "def conv(float(N, C, H, W) I, float(F, C, KH, KW) Wt) -> (O) {\n"
        "  O(n, f, h, w) +=! I(n, c, h + kh, w + kw) * Wt(f, c, kh, kw)\n"
        "    where h in 0:55, w in 0:55\n}")
    lanes = CM.simd_lanes(4)
    kernel.specialize({"N": 1, "C": 4, "H": 57, "W": 57, "F": 4 * lanes, "KH": 3, "KW": 3})
    source = kernel.c_source
    assert "#pragma omp parallel for" in source and "_packed" in source
    assert "polycomp_reg" in source


def column_sums() -> Program:
    """s[j] += A[i, j]: the unit-stride loop j carries nothing; i carries the reduction."""
    return Program.from_isl(
        "column_sums", arrays={"A": ("float64", ("M", "N")), "s": ("float64", ("N",))},
        statements=[
            dict(domain="[N] -> { S0[j] : 0 <= j < N }", write="{ S0[j] -> s[j] }", reads=[],
                 body=lambda: 0),
            dict(domain="[M, N] -> { S1[i, j] : 0 <= i < M and 0 <= j < N }",
                 write="{ S1[i, j] -> s[j] }", reads=["{ S1[i, j] -> A[i, j] }"],
                 body=lambda a: a, reduction="+")])


def test_a_reduction_on_the_unit_stride_loop_is_not_traded_for_simd_with_gathers():
    # s[i] += A[i, j]: SIMD along i would gather A down a column; the row loop j stays
    # innermost, a scalar reduction, unmarked
    program = row_sums()
    schedule, deps = scheduled(program, scheduler="isl", tile_sizes=(8, 8))
    assert not marks(schedule, T.MARK_VECTOR)
    check_schedule(schedule, deps)


def test_a_reduction_moves_outward_when_a_gather_free_loop_can_be_simd():
    program = column_sums()
    schedule, deps = scheduled(program, scheduler="isl", tile_sizes=(8, 8))
    band = simd_band(schedule)
    expect_member(band, 0, program, "S1", "[M, N] -> { S1[i, j] -> [j mod 8] }")
    check_schedule(schedule, deps)


def test_no_simd_mark_when_every_point_loop_carries_a_dependence():
    # distances (1, 0) and (0, 1): whichever point loop is innermost carries one of them
    program = prefix2d()
    deps = compute_dependences(program)
    tree = band_schedule(program, ["[N] -> { S0[i, j] -> [(i)] }", "[N] -> { S0[i, j] -> [(j)] }"])
    schedule = run_passes(tree, program, deps, Options(tile_sizes=(4, 8)))
    assert not marks(schedule, T.MARK_VECTOR)
    check_schedule(schedule, deps)


def test_a_point_loop_under_a_parallel_mark_stays_outermost():
    program = long_strides()
    deps = compute_dependences(program)
    tree = band_schedule(program, ["[N] -> { S0[i, j] -> [(i)] }", "[N] -> { S0[i, j] -> [(j)] }"])
    schedule = run_passes(tree, program, deps, Options(tile_sizes=(8, 8), wavefront=False,
                                                       unroll=0))
    (parallel,) = marks(schedule, T.MARK_PARALLEL)
    assert parallel.get_schedule_depth() == 2  # below both tile loops: on the point band
    expect_member(parallel.child(0), 0, program, "S0", "[N] -> { S0[i, j] -> [i mod 8] }")
    band = simd_band(schedule)
    expect_member(band, 0, program, "S0", "[N] -> { S0[i, j] -> [j mod 8] }")
    check_schedule(schedule, deps)


def test_options_turn_simd_and_unroll_off():
    program = matmul()
    schedule, _ = scheduled(program, scheduler="isl", tile_sizes=(32, 32, 8), vectorize=False)
    assert not marks(schedule, T.MARK_VECTOR)
    assert any(T.is_band(n) and n.band_member_get_ast_loop_type(0) == isl.ast_loop_type.unroll
               for n in T.nodes(schedule))
    schedule, _ = scheduled(program, scheduler="isl", tile_sizes=(32, 32, 8), unroll=0)
    assert marks(schedule, T.MARK_VECTOR)
    assert not any(T.is_band(n) and n.band_member_get_ast_loop_type(k) == isl.ast_loop_type.unroll
                   for n in T.nodes(schedule) for k in range(n.band_n_member()))
    schedule, _ = scheduled(program, scheduler="isl", tile_sizes=(32, 32, 8), unroll=0,
                            vectorize=False)
    assert not marks(schedule, T.MARK_VECTOR)


def test_untiled_bands_are_left_alone():
    program = matmul()
    schedule, _ = scheduled(program, scheduler="isl", tile=False)
    assert not marks(schedule, T.MARK_VECTOR)
    assert sum(1 for n in T.nodes(schedule) if T.is_band(n)) == 1


# ----------------------------------------------------------------------------- gcc

@pytest.mark.needs_cc
def test_gcc_vectorises_the_jammed_matmul_body(tmp_path):
    kernel = polycomp.compile_program(matmul(), scheduler="isl", tile_sizes=(32, 64, 16),
                                      sizes={"M": 128, "N": 128, "K": 128})
    source = tmp_path / "mm.c"
    source.write_text(kernel.c_source)
    cc = os.environ.get("CC", "gcc").split()[0]
    if shutil.which(cc) is None or "gcc" not in os.path.basename(cc):
        pytest.skip("needs gcc for -fopt-info-vec")
    run = subprocess.run([cc, "-O3", "-march=native", "-fopenmp", "-fopt-info-vec-optimized",
                          "-c", str(source), "-o", str(tmp_path / "mm.o")],
                         capture_output=True, text=True, check=True)
    assert "loop vectorized" in run.stdout + run.stderr
    assert "simdlen(" in kernel.c_source


# ----------------------------------------------------------------------------- differential

@pytest.mark.needs_cc
@pytest.mark.parametrize("unroll,tiles", [(2, (8, 16, 6)), (3, (9, 16, 6)), (4, (6, 20, 5))])
@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_unrolled_vectorised_matmul_matches_the_original_order(unroll, tiles, dtype):
    result = check_against_reference(definition(matmul(dtype)), {"M": 31, "N": 45, "K": 23},
                                     dict(scheduler="isl", tile_sizes=tiles, unroll=unroll),
                                     oracle=MATMUL)
    assert result.agreed == ["numpy", "scheduler=none"], result.mismatches


@pytest.mark.needs_cc
@pytest.mark.parametrize("make,sizes,options,oracle", [
    (row_sums, {"M": 37, "N": 29}, dict(tile_sizes=(8, 8)), ROW_SUMS),
    (transpose_add, {"M": 33, "N": 47}, dict(tile_sizes=(16, 8), unroll=2), TRANSPOSE_ADD),
    (long_strides, {"N": 45}, dict(tile_sizes=(8, 8), wavefront=False), LONG_STRIDES),
    (prefix2d, {"N": 33}, dict(tile_sizes=(4, 8)), PREFIX2D),
    # triangular: isolated partial register tiles, separated loops
    (lu, {"N": 24}, dict(), LU),
])
def test_intra_tile_kernels_match_the_original_order(make, sizes, options, oracle):
    result = check_against_reference(definition(make()), sizes, dict(scheduler="isl", **options),
                                     oracle=oracle)
    assert result.agreed == ["numpy", "scheduler=none"], result.mismatches


@pytest.mark.needs_cc
def test_reordered_tiles_without_simd_are_bit_identical():
    program = prefix2d()
    sizes = {"N": 29}
    tree = band_schedule(program.specialize(sizes), ["{ S0[i, j] -> [(i)] }",
                                                     "{ S0[i, j] -> [(j)] }"]).to_str()
    result = check_against_reference(definition(program), sizes,
                                     dict(scheduler="custom", schedule=tree, tile_sizes=(4, 8)),
                                     oracle=PREFIX2D)
    assert result.agreed == ["numpy", "scheduler=none"], result.mismatches
    result = check_against_reference(definition(seidel1d()), {"T": 7, "N": 30},
                                     dict(scheduler="isl", tile_sizes=(4, 4)), oracle=SEIDEL1D)
    assert result.agreed == ["numpy", "scheduler=none"], result.mismatches


@pytest.mark.needs_cc
def test_statements_fused_with_a_shift_get_one_vector_loop_each():
    """jacobi-1d under pluto: the point band [t, 2t + i] carries B from S0 to the shifted
    S1 along 2t + i, so no member can be a vector loop; the innermost member is
    distributed over the sequence instead, and each statement's loop is marked simd."""
    from programs import jacobi1d

    program = jacobi1d()
    sizes = {"T": 20, "N": 300}
    schedule, deps = scheduled(program.specialize(sizes), scheduler="pluto",
                               tile_sizes=(8, 64))
    simd = marks(schedule, T.MARK_VECTOR)
    assert len(simd) == 2
    for mark in simd:
        band = mark.child(0)
        assert T.is_band(band) and carried_by_member(band, 0, deps.all()).is_empty()
    check_schedule(schedule, deps)
    result = check_against_reference(definition(program), sizes,
                                     dict(scheduler="pluto", tile_sizes=(8, 64)), oracle=JACOBI1D)
    assert result.agreed == ["numpy", "scheduler=none"], result.mismatches
