"""Tiling (scheduler/tiling.py) and its cache model (scheduler/cache_model.py): the tiled
schedule as a map, what is not tiled, wavefronts, sizes from the model, and tiled kernels
against numpy and the original order."""

import re
import islpy as isl
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import polycomp
from polycomp.options import Options, configure_isl
from polycomp.scheduler import cache_model as CM
from polycomp.scheduler import compute_dependences, get_scheduler
from polycomp.scheduler import tree as T
from polycomp.scheduler.legality import check_schedule, is_parallel_member
from polycomp.scheduler.parallel import mark_parallel
from polycomp.scheduler.tiling import (MARK_POINT_BAND, band_extent_shares, band_extents, set_coincidence,
                                       tile_bands, tile_sizes)
from polycomp.testing import check_against_reference

from oracles import JACOBI1D, JACOBI2D, MATMUL, SEIDEL1D, SEIDEL2D, TRANSPOSE_ADD
from programs import jacobi1d, matmul, seidel1d
from test_tiling_programs import (band_schedule, definition, jacobi2d, marks, scheduled,
                                  seidel2d, transpose_add)

SEIDEL_SKEWED = ["[T, N] -> { S0[t, i] -> [(t)] }", "[T, N] -> { S0[t, i] -> [(2t + i)] }"]


def tiled(program, schedule=None, **options):
    """The tiling pass alone, on ``schedule`` or on isl's (whose trees these tests know)."""
    options.setdefault("scheduler", "isl")
    configure_isl()
    deps = compute_dependences(program)
    opts = Options.create(**options)
    if schedule is None:
        schedule = get_scheduler(opts.scheduler)(program, deps, opts)
    return tile_bands(schedule, program, deps, opts), deps


def bands(schedule):
    return [n for n in T.nodes(schedule) if T.is_band(n)]


def on_domain(umap, program):
    return umap.intersect_domain(program.domain())


# ----------------------------------------------------------------------------- structure

def test_matmul_tiled_with_32_32_8_is_the_expected_map():
    program = matmul()
    schedule, deps = tiled(program, tile_sizes=(32, 32, 8))
    expected = isl.UnionMap(
        "[M, N, K] -> { S0[i, j] -> [floor(i/32), floor(j/32), 0, i mod 32, j mod 32, 0, 0];"
        " S1[i, j, k] -> [floor(i/32), floor(j/32), floor(k/8), i mod 32, j mod 32, k mod 8, 1] }")
    assert on_domain(schedule.get_map(), program).is_equal(on_domain(expected, program))
    tile, point = bands(schedule)
    assert tile.band_get_permutable() and point.band_get_permutable()
    assert [tile.band_member_get_coincident(k) for k in range(3)] == [True, True, False]
    assert [point.band_member_get_coincident(k) for k in range(3)] == [True, True, False]
    assert len(marks(schedule, MARK_POINT_BAND)) == 1
    check_schedule(schedule, deps)


def test_a_point_band_knows_its_last_tiles_extents():
    # 1000 output channels in blocks of 16 are 63 blocks: tiles of 12 leave 3 in the last
    domain = isl.UnionSet("{ S[b, p] : 0 <= b < 63 and 0 <= p < 13 }")
    node = isl.Schedule.from_domain(domain).get_root().child(0).insert_partial_schedule(
        isl.MultiUnionPwAff("[{ S[b, p] -> [(b)] }, { S[b, p] -> [(p)] }]"))
    sizes = isl.MultiVal.zero(node.band_get_space()).set_at(0, 12).set_at(1, 13)
    point = node.band_tile(sizes).child(0)
    assert band_extents(point) == [12, 13]
    shares = band_extent_shares(point)
    assert shares[0] == pytest.approx({12: 60 / 63, 3: 3 / 63}) and shares[1] == {13: 1.0}


def test_a_short_size_list_repeats_its_last_size():
    program = matmul()
    schedule, _ = tiled(program, tile_sizes=(16,))
    expected = isl.UnionMap(
        "[M, N, K] -> { S1[i, j, k] -> [floor(i/16), floor(j/16), floor(k/16), i mod 16, "
        "j mod 16, k mod 16, 1]; S0[i, j] -> [floor(i/16), floor(j/16), 0, i mod 16, "
        "j mod 16, 0, 0] }")
    assert on_domain(schedule.get_map(), program).is_equal(on_domain(expected, program))


def test_a_band_flagged_not_permutable_is_not_tiled():
    program = seidel1d()
    original = band_schedule(program, SEIDEL_SKEWED, permutable=False)
    schedule, _ = tiled(program, original, tile_sizes=(4, 4))
    assert schedule.plain_is_equal(original)


def test_a_band_wrongly_flagged_permutable_is_not_tiled():
    # (t, i) is a legal order for seidel, but the distance (1, -1) makes it not permutable
    program = seidel1d()
    original = band_schedule(program, ["[T, N] -> { S0[t, i] -> [(t)] }",
                                       "[T, N] -> { S0[t, i] -> [(i)] }"], permutable=True)
    schedule, _ = tiled(program, original, tile_sizes=(4, 4))
    assert schedule.plain_is_equal(original)


def test_one_member_bands_and_bands_smaller_than_a_tile_are_not_tiled():
    program = jacobi1d()
    schedule, _ = tiled(program, scheduler="isl", tile_sizes=(8, 8))  # [t] -> [i] bands
    assert all(b.band_n_member() == 1 for b in bands(schedule))
    small = matmul().specialize({"M": 8, "N": 16, "K": 4})
    schedule, _ = tiled(small, tile_sizes=(32, 32, 8))
    assert len(bands(schedule)) == 1 and not marks(schedule, MARK_POINT_BAND)


def test_wavefront_skews_the_tile_loops_of_seidel():
    program = seidel1d()
    schedule, deps = tiled(program, band_schedule(program, SEIDEL_SKEWED), tile_sizes=(4, 8))
    tile = bands(schedule)[0]
    expected = isl.UnionMap("[T, N] -> { S0[t, i] -> [floor(t/4) + floor((2t + i)/8), "
                            "floor((2t + i)/8)] }")
    got = tile.band_get_partial_schedule_union_map()
    assert on_domain(got, program).is_equal(on_domain(expected, program))
    relation = deps.all()
    assert not is_parallel_member(tile, 0, relation) and is_parallel_member(tile, 1, relation)
    check_schedule(schedule, deps)
    # the parallel pass puts its mark on the second tile loop: one front per parallel loop
    marked = mark_parallel(schedule, deps)
    (mark,) = marks(marked, T.MARK_PARALLEL)
    assert mark.get_schedule_depth() == 1
    check_schedule(marked, deps)


def test_no_wavefront_when_a_tile_loop_is_parallel_or_when_off():
    program = seidel1d()
    plain, _ = tiled(program, band_schedule(program, SEIDEL_SKEWED), tile_sizes=(4, 8),
                     wavefront=False)
    expected = isl.UnionMap("[T, N] -> { S0[t, i] -> [floor(t/4), floor((2t + i)/8)] }")
    got = bands(plain)[0].band_get_partial_schedule_union_map()
    assert on_domain(got, program).is_equal(on_domain(expected, program))
    mm, _ = tiled(matmul(), tile_sizes=(32, 32, 8))  # Ti is parallel: left alone
    got = bands(mm)[0].band_get_partial_schedule_union_map()
    assert on_domain(got, matmul()).is_equal(on_domain(isl.UnionMap(
        "[M, N, K] -> { S1[i, j, k] -> [floor(i/32), floor(j/32), floor(k/8)]; "
        "S0[i, j] -> [floor(i/32), floor(j/32), 0] }"), matmul()))


def test_coincident_flags_are_exact_after_the_wavefront():
    program = seidel1d()
    schedule, deps = tiled(program, band_schedule(program, SEIDEL_SKEWED), tile_sizes=(4, 8))
    relation = deps.all()
    for band in bands(schedule):
        flags = [band.band_member_get_coincident(k) for k in range(band.band_n_member())]
        recomputed = set_coincidence(band, relation)
        assert flags == [recomputed.band_member_get_coincident(k)
                         for k in range(band.band_n_member())]


def test_two_levels_nest_l2_tiles_of_l1_tiles():
    program = matmul().specialize({"M": 512, "N": 512, "K": 512})
    options = Options(tile_sizes=(8, 16, 8), l2_tile=True)
    deps = compute_dependences(program)
    isl_tree = get_scheduler("isl")(program, deps, options)
    (l2_sizes, l1_sizes) = tile_sizes(isl_tree.get_root().child(0), program, options,
                                      deps.all())
    assert l1_sizes == (8, 16, 8) and all(o >= s for o, s in zip(l2_sizes, l1_sizes))
    ri, rj, rk = (o // s for o, s in zip(l2_sizes, l1_sizes))
    schedule, deps = tiled(program, isl_tree, tile_sizes=(8, 16, 8), l2_tile=True)
    outer, inner, point = bands(schedule)
    assert all(b.band_n_member() == 3 and b.band_get_permutable() for b in (outer, inner, point))
    # L2 tiles count L1 tiles: outer = floor(L1 tile / ratio), inner = L1 tile mod ratio
    expected = isl.UnionMap(
        f"{{ S1[i, j, k] -> [floor(i/{8 * ri}), floor(j/{16 * rj}), floor(k/{8 * rk}), "
        f"floor(i/8) mod {ri}, floor(j/16) mod {rj}, floor(k/8) mod {rk}, "
        f"i mod 8, j mod 16, k mod 8, 1] }}")
    s1 = schedule.get_map().intersect_domain(program.statement("S1").domain)
    assert s1.is_equal(expected.intersect_domain(program.statement("S1").domain))
    check_schedule(schedule, deps)


def test_tiling_a_jacobi2d_isl_schedule_keeps_it_legal_and_parallel():
    program = jacobi2d().specialize({"T": 16, "N": 200})
    schedule, deps = scheduled(program, scheduler="isl", tile_sizes=(8, 16, 16))
    check_schedule(schedule, deps)
    assert marks(schedule, T.MARK_PARALLEL)
    assert len(bands(schedule)) >= 2  # some band was tiled


# ----------------------------------------------------------------------------- model

def test_cache_sizes_fall_back_when_sysfs_is_unreadable(monkeypatch):
    CM.cache_sizes.cache_clear()
    monkeypatch.setattr(CM, "SYSFS_CACHE", "/nonexistent/polycomp")
    try:
        assert CM.cache_sizes()[1] == 32 * 1024 and CM.cache_sizes()[2] == 1024 * 1024
    finally:
        CM.cache_sizes.cache_clear()
    assert CM._parse_size("48K") == 48 * 1024 and CM._parse_size("2048K") == 2 * 1024 ** 2
    assert CM._parse_size("1M") == 1024 ** 2


def test_cache_sizes_a_vm_reports_are_clamped():
    # this project's VMs report a 480 MiB L3: tiles are never blocked for it
    sizes = CM.sane_cache_sizes({1: 48 * 1024, 2: 2 * 1024 ** 2, 3: 480 * 1024 ** 2})
    assert sizes == {1: 48 * 1024, 2: 2 * 1024 ** 2, 3: CM.CACHE_BOUNDS[3][1]}
    assert CM.sane_cache_sizes({1: 1024}) == {1: CM.CACHE_BOUNDS[1][0], 2: 1024 ** 2}


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.integers(1, 3), st.integers(0, 2 ** 34), max_size=3))
def test_sane_cache_sizes_are_bounded_and_grow_by_level(reported):
    sizes = CM.sane_cache_sizes(reported)
    assert {1, 2} <= set(sizes) and set(reported) <= set(sizes)
    levels = sorted(sizes)
    assert all(sizes[a] <= sizes[b] for a, b in zip(levels, levels[1:]))
    for level, size in sizes.items():
        low, high = CM.CACHE_BOUNDS[level]
        assert low <= size <= high  # the bounds themselves grow by level


def test_matmul_footprint_is_the_sum_of_its_three_tiles():
    for dtype, size in (("float32", 4), ("float64", 8)):
        program = matmul(dtype)
        schedule = get_scheduler("isl")(program, compute_dependences(program), Options())
        refs = CM.band_references(schedule.get_root().child(0), program)
        for ti, tj, tk in ((32, 32, 8), (4, 64, 16), (1, 1, 1)):
            assert CM.footprint(refs, (ti, tj, tk)) == size * (ti * tj + ti * tk + tk * tj)
        # C is reused along k (three references: S0's write, S1's read and write)
        assert CM.reuse(refs, 3) == [1, 1, 3]


def test_stencil_references_with_offsets_share_one_group():
    program = jacobi2d()
    schedule = band_schedule(program, [
        "[T, N] -> { S0[t, i, j] -> [(i)]; S1[t, i, j] -> [(i)] }",
        "[T, N] -> { S0[t, i, j] -> [(j)]; S1[t, i, j] -> [(j)] }"])
    refs = CM.band_references(schedule.get_root().child(0), program)
    # A: (ti + 2)(tj + 2) from S0's five reads and S1's write; B: ti * tj, twice (equal)
    assert CM.footprint(refs, (10, 20)) == 8 * (12 * 22 + 10 * 20)


def test_model_sizes_fit_the_capacity_and_respect_unroll_and_lanes():
    program = matmul().specialize({"M": 2048, "N": 2048, "K": 2048})
    schedule = get_scheduler("isl")(program, compute_dependences(program), Options())
    band = schedule.get_root().child(0)
    refs = CM.band_references(band, program)
    for capacity in (16 * 1024, 256 * 1024, 1024 * 1024):
        choice = CM.choose_tile_sizes(refs, band_extents(band), capacity, unroll=4, lanes=16,
                                      innermost=1)
        ti, tj, tk = choice.sizes
        assert choice.footprint <= capacity
        assert ti % 4 == 0 and tk % 4 == 0 and tj % 16 == 0
        assert tk >= ti  # k carries the most reuse (C)
    choice = CM.choose_tile_sizes(refs, [20, 30, 2048], 1024 * 1024, unroll=4, lanes=16)
    assert choice.sizes[:2] == (20, 30)  # capped at the extents, the rest grows


def test_only_unrolled_members_widen_the_row_of_the_vector_loop():
    """matmul unrolls i and k around j (each keeps a reference in place); a stencil band
    unrolls nothing, so the vector loop's L1 row may be as long as one row of each array
    (heat-3d at LARGE: 8 values of k per tile before, 1.9x faster with whole rows)."""
    mm = matmul().specialize({"M": 2048, "N": 2048, "K": 2048})
    band = get_scheduler("isl")(mm, compute_dependences(mm), Options()).get_root().child(0)
    refs = CM.band_references(band, mm)
    assert sorted(CM.unroll_candidates(refs, 1, [0, 1, 2], band_extents(band), 4)) == [0, 2]
    program = jacobi2d().specialize({"T": 10, "N": 4000})
    schedule = band_schedule(program, [
        "{ S0[t, i, j] -> [(i)]; S1[t, i, j] -> [(i)] }",
        "{ S0[t, i, j] -> [(j)]; S1[t, i, j] -> [(j)] }"])
    band = schedule.get_root().child(0)
    refs = CM.band_references(band, program)
    assert CM.unroll_candidates(refs, 1, [0, 1]) == ()
    extents = band_extents(band)
    rows = {}
    for unrolled in (None, ()):
        choice = CM.choose_tile_sizes(refs, extents, 1024 * 1024, unroll=4, lanes=8,
                                      innermost=1, row_capacity=16 * 1024, unrolled=unrolled)
        rows[unrolled] = choice.sizes[1]
        # the row: 3 rows of A and one of B along j
        assert CM.footprint(refs, (1 if unrolled == () else 4, rows[unrolled])) <= 16 * 1024
    assert rows[()] > 2 * rows[None]


# ----------------------------------------------------------------------------- differential

@pytest.mark.needs_cc
@pytest.mark.parametrize("sizes", [(8, 16, 4), (5, 7, 3), (32, 32, 8)])
@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_tiled_matmul_matches_the_original_order(sizes, dtype):
    result = check_against_reference(definition(matmul(dtype)), {"M": 37, "N": 45, "K": 29},
                                     dict(scheduler="isl", tile_sizes=sizes), oracle=MATMUL)
    assert result.agreed == ["numpy", "scheduler=none"], result.mismatches


@pytest.mark.needs_cc
@pytest.mark.parametrize("make,sizes,tiles,oracle", [
    (jacobi2d, {"T": 5, "N": 23}, (4, 8, 8), JACOBI2D),
    (seidel2d, {"T": 3, "N": 19}, (2, 4, 8), SEIDEL2D),
    (transpose_add, {"M": 33, "N": 21}, (8, 4), TRANSPOSE_ADD),
])
def test_tiled_stencils_and_transposes_match_the_original_order(make, sizes, tiles, oracle):
    result = check_against_reference(definition(make()), sizes,
                                     dict(scheduler="isl", tile_sizes=tiles), oracle=oracle)
    assert result.agreed == ["numpy", "scheduler=none"], result.mismatches


@pytest.mark.needs_cc
@pytest.mark.parametrize("tiles", [(4, 8), (3, 5)])
def test_wavefront_tiled_seidel_is_bit_identical(tiles):
    program = seidel1d()
    specialised = program.specialize({"T": 9, "N": 40})
    tree = band_schedule(specialised, ["{ S0[t, i] -> [(t)] }",
                                       "{ S0[t, i] -> [(2t + i)] }"]).to_str()
    # parallel_min_work=0: parallel fronts even at this size
    options = dict(scheduler="custom", schedule=tree, tile_sizes=tiles, parallel_min_work=0)
    result = check_against_reference(definition(program), {"T": 9, "N": 40}, options,
                                     oracle=SEIDEL1D)
    assert result.agreed == ["numpy", "scheduler=none"], result.mismatches
    kernel = polycomp.compile_program(program, sizes={"T": 9, "N": 40}, **options)
    # one region around the wavefront loop, a worksharing loop per front (codegen/openmp.py)
    assert "#pragma omp for" in kernel.c_source


@pytest.mark.needs_cc
def test_model_sized_and_two_level_tiles_match_the_original_order():
    for options in (dict(scheduler="isl"), dict(scheduler="isl", l2_tile=True),
                    dict(scheduler="isl", l2_tile=True, tile_sizes=(4, 8, 4))):
        result = check_against_reference(definition(matmul("int32")),
                                         {"M": 70, "N": 300, "K": 90}, options, oracle=MATMUL)
        assert result.agreed == ["numpy", "scheduler=none"], (options, result.mismatches)
    result = check_against_reference(definition(jacobi1d()), {"T": 6, "N": 50},
                                     dict(scheduler="isl", tile_sizes=(4, 4)), oracle=JACOBI1D)
    assert result.agreed == ["numpy", "scheduler=none"], result.mismatches


# ----------------------------------------------------------------------------- legality

@pytest.mark.parametrize("options", [
    dict(scheduler="isl", tile_sizes=(32, 32, 8)), dict(scheduler="isl", l2_tile=True),
    dict(scheduler="isl", wavefront=False), dict(scheduler="none", tile_sizes=(4,)),
    dict(scheduler="isl", tile_sizes=(8,), parallel=False),
])
@pytest.mark.parametrize("make", [matmul, jacobi1d, seidel1d, jacobi2d, seidel2d])
def test_every_tiled_schedule_is_legal(make, options):
    schedule, deps = scheduled(make(), **options)
    check_schedule(schedule, deps)
    assert not marks(schedule, MARK_POINT_BAND)  # the intra-tile pass removed them


@pytest.mark.needs_cc
def test_matmul_c_has_a_parallel_tile_loop_and_a_simd_innermost_loop():
    kernel = polycomp.compile_program(matmul(), scheduler="isl", tile_sizes=(32, 64, 16),
                                      sizes={"M": 128, "N": 128, "K": 128})
    text = kernel.c_source
    assert "#pragma omp parallel for" in text and "#pragma omp simd" in text
    lines = [ln.strip() for ln in text.splitlines()]
    # the parallel loop counts tiles (step 1 over 128/32 tiles)
    par = lines.index("#pragma omp parallel for")
    assert lines[par + 1].startswith("for (long c0 = 0; c0 <= 3;")
    # the simd loop is innermost: its body holds statements, no loop
    for k, line in enumerate(lines):
        if line.startswith("#pragma omp simd"):
            assert lines[k + 1].startswith("for ")
            body = lines[k + 2:lines.index("}", k + 2)]
            assert not any(b.startswith("for ") for b in body)
    a, b = np.ones((128, 128), np.float32), np.ones((128, 128), np.float32)
    c = np.zeros((128, 128), np.float32)
    kernel(a, b, c)
    assert np.all(c == 128)


def test_the_model_leaves_bands_without_reuse_untiled():
    # a spatial stencil sweep streams through its data once: nothing to keep in cache
    program = jacobi2d().specialize({"T": 4, "N": 300})
    schedule, _ = scheduled(program, scheduler="isl")
    assert all(b.band_n_member() <= 2 for b in bands(schedule))
    assert len(bands(schedule)) == 3  # [t], then one [i, j] band per statement
    # explicit sizes tile it anyway; a transpose (cache lines along the outer loop) is tiled
    schedule, _ = scheduled(program, scheduler="isl", tile_sizes=(8, 8))
    assert len(bands(schedule)) > 3
    schedule, _ = scheduled(transpose_add().specialize({"M": 300, "N": 300}), scheduler="isl")
    assert len(bands(schedule)) >= 2


def test_the_model_leaves_several_tiles_for_the_parallel_and_wavefront_loops():
    program = matmul().specialize({"M": 2048, "N": 2048, "K": 2048})
    deps = compute_dependences(program)
    band = get_scheduler("isl")(program, deps, Options()).get_root().child(0)
    (sizes,) = tile_sizes(band, program, Options(), deps.all())
    assert 2048 // sizes[0] >= 4
    program = seidel1d().specialize({"T": 200, "N": 2000})
    deps = compute_dependences(program)
    band = band_schedule(program, ["{ S0[t, i] -> [(t)] }",
                                   "{ S0[t, i] -> [(2t + i)] }"]).get_root().child(0)
    (sizes,) = tile_sizes(band, program, Options(), deps.all())
    assert 200 // sizes[0] >= 4 and 2397 // sizes[1] >= 4


@pytest.mark.parametrize("size, extent, limit, want", [
    (4, 12, 3, 3),     # 3 uneven tiles for the parallel loop -> 4 tiles of 3
    (4, 4, 1, 4),      # rounded up to one whole tile: left whole (reuse kept)
    (8, 64, 16, 8),    # within the limit
    (8, 10, 2, 2),     # the largest divisor of 10 within 2
    (6, 7, 1, 1),      # a prime extent: tiles of 1
    (4, None, 2, 4),   # parametric extent: nothing to divide
])
def test_rounding_keeps_the_tiles_the_parallel_loop_asked_for(size, extent, limit, want):
    from polycomp.scheduler.cache_model import _within_limit
    assert _within_limit(size, extent, limit) == want


@pytest.mark.needs_cc
def test_batched_matmul_leaves_at_least_four_parallel_tiles():
    """Schedule quality: 12 batches give the parallel loop 4 tiles (3 uneven ones before),
    and the result still matches numpy."""
    src = "def bmm(float(B, M, K) Q, float(B, K, N) Kt) -> (S) { S(b, m, n) +=! Q(b, m, k) * Kt(b, k, n) }"
    kernel = polycomp.compile(src)
    rng = np.random.default_rng(1)
    q = rng.random((12, 64, 32), np.float32)
    k = rng.random((12, 32, 64), np.float32)
    np.testing.assert_allclose(kernel(q, k), q @ k, rtol=1e-4)
    text = kernel.c_source
    trips = [int(m) for m in re.findall(
        r"#pragma omp parallel for\s*\n\s*for \(long c\d+ = 0; c\d+ <= (\d+);", text)]
    assert trips and max(trips) + 1 >= 4, trips
