"""The Pluto scheduler: known answers, band properties, fusion modes, partitions,
fallbacks, the description text, and legality on random programs."""

from __future__ import annotations

import islpy as isl
import pytest

from benchmarks.polybench import defs
from polycomp import Program
from polycomp import islutil as U
from polycomp.errors import IllegalScheduleError
from polycomp.frontend.loops import parse_c
from polycomp.options import Options
from polycomp.scheduler import compute_dependences
from polycomp.scheduler import tree as T
from polycomp.scheduler.describe import describe_schedule
from polycomp.scheduler.legality import check_schedule
from polycomp.scheduler.pluto import schedule_pluto
from polycomp.scheduler.pluto_ilp import Config, orthogonal_complement, rank

from programs import jacobi1d, matmul, seidel1d
from test_pluto_kernels import KERNELS, fdtd_2d, heat_3d, jacobi_2d, lu, seidel_2d

dim = isl.dim_type


def pluto(program: Program, **options):
    deps = compute_dependences(program)
    schedule = schedule_pluto(program, deps, Options(scheduler="pluto", **options))
    check_schedule(schedule, deps)
    return schedule, deps


def bands(schedule: isl.Schedule) -> list[isl.ScheduleNode]:
    return [n for n in T.nodes(schedule) if T.is_band(n)]


def band_map(node: isl.ScheduleNode) -> isl.UnionMap:
    return node.band_get_partial_schedule_union_map().intersect_domain(node.get_domain())


def same_map(a: isl.UnionMap, text: str) -> bool:
    return a.is_equal(isl.UnionMap(text).intersect_domain(a.domain()))


def tileable(node: isl.ScheduleNode, deps) -> bool:
    """Every member has distance >= 0 on every dependence whose ends agree on the
    dimensions above the band (Pluto's tiling condition)."""
    relation = deps.all().intersect_domain(node.get_domain()).intersect_range(node.get_domain())
    prefix = node.get_prefix_schedule_union_map()
    live = relation.intersect(prefix.apply_range(prefix.reverse()))
    for k in range(node.band_n_member()):
        member = T.member_union_map(node, k)
        distances = live.apply_domain(member).apply_range(member).deltas()
        if not distances.is_subset(isl.UnionSet("{ [d] : d >= 0 }")):
            return False
    return True


# ----------------------------------------------------------------------------- known answers

def test_matmul_keeps_i_j_k_with_i_and_j_parallel():
    schedule, deps = pluto(matmul())
    update = next(b for b in bands(schedule) if b.band_n_member() == 3)
    assert same_map(band_map(update), "{ S1[i, j, k] -> [i, j, k] }")
    assert update.band_get_permutable()
    assert [update.band_member_get_coincident(k) for k in range(3)] == [True, True, False]


def test_matmul_max_fusion_shares_the_band_with_the_initialisation():
    schedule, deps = pluto(matmul(), fusion="max")
    band = schedule.get_root().child(0)
    assert T.is_band(band) and band.band_n_member() == 3
    assert same_map(band_map(band), "{ S0[i, j] -> [i, j, 0]; S1[i, j, k] -> [i, j, k] }")
    assert band.child(0).get_type() == isl.schedule_node_type.sequence


def test_jacobi_1d_is_time_skewed_with_a_shift_and_one_tileable_band():
    schedule, deps = pluto(jacobi1d())
    expected = isl.UnionMap("{ S0[t, i] -> [t, 2t + i, 0]; S1[t, i] -> [t, 2t + i + 1, 1] }")
    assert schedule.get_map().is_equal(expected.intersect_domain(schedule.get_domain()))
    band = schedule.get_root().child(0)
    assert band.band_n_member() == 2 and band.band_get_permutable() and tileable(band, deps)
    assert band.child(0).get_type() == isl.schedule_node_type.sequence


def test_seidel_2d_gets_pluto_s_skewed_permutable_band():
    schedule, deps = pluto(seidel_2d())
    band = schedule.get_root().child(0)
    assert same_map(band_map(band), "{ S0[t, i, j] -> [t, t + i, 2t + i + j] }")
    assert band.band_n_member() == 3 and band.band_get_permutable() and tileable(band, deps)
    assert not any(band.band_member_get_coincident(k) for k in range(3))


def test_lu_gets_the_right_looking_order_in_one_permutable_band():
    # the outer row is the pivot (k; j for the division S1): every dependence has
    # distance 0 or 1 on it (u = 0, w = 1), while i would need u = 1 (distance up to N)
    schedule, deps = pluto(lu())
    band = schedule.get_root().child(0)
    assert band.band_n_member() == 3 and band.band_get_permutable() and tileable(band, deps)
    assert same_map(band_map(band), "{ S0[i, j, k] -> [k, i, j]; S1[i, j] -> [j, i, j]; "
                                    "S2[i, j, k] -> [k, i, j] }")
    assert [band.band_member_get_coincident(k) for k in range(3)] == [False, True, False]


@pytest.mark.parametrize("make", [jacobi_2d, heat_3d, fdtd_2d])
def test_stencils_get_a_full_depth_tileable_band_with_a_time_skew(make):
    program = make()
    schedule, deps = pluto(program)
    band = schedule.get_root().child(0)
    depth = max(len(s.iterators) for s in program.statements)
    assert band.band_n_member() == depth and band.band_get_permutable() and tileable(band, deps)
    # every inner member is skewed by t (none is a plain spatial loop: tiles need the skew)
    domain = program.statement("S1").domain
    for k in range(1, depth):
        upa = band.band_get_partial_schedule().get_at(k)
        pa = upa.extract_pw_aff(domain.get_space().from_domain().add_dims(dim.out, 1))
        aff = pa.get_pieces()[0][1]
        assert aff.get_coefficient_val(dim.in_, 0).to_python() > 0


@pytest.mark.parametrize("make", [jacobi1d, jacobi_2d, heat_3d, seidel_2d, fdtd_2d, lu])
def test_specialised_sizes_give_the_parametric_hyperplanes(make):
    program = make()
    schedule, _ = pluto(program)
    sizes = {p: 30 if p in ("T",) else 1000 for p in program.params}
    fixed, _ = pluto(program.specialize(sizes))
    # compare on the domain: a single-statement schedule's map may come back unrestricted
    domain = fixed.get_domain()
    assert fixed.get_map().intersect_domain(domain).is_equal(
        U_specialize(schedule.get_map(), sizes).intersect_domain(domain))


def U_specialize(umap: isl.UnionMap, sizes: dict[str, int]) -> isl.UnionMap:
    from polycomp import islutil as U
    return U.specialize(umap, sizes)


def test_a_reversed_loop_gets_a_negative_coefficient():
    # A[i] = A[i + 1] + 1 run from the top down: only -i (or the original order) is legal
    program = Program.from_isl(
        "reversed", arrays={"A": ("int64", ("N",))},
        statements=[dict(domain="[N] -> { S0[i] : 0 <= i < N - 1 }", write="{ S0[i] -> A[i] }",
                         reads=["{ S0[i] -> A[i + 1] }"], body=lambda a: a + 1)],
        schedule="{ S0[i] -> [-i] }")
    schedule, deps = pluto(program)
    assert same_map(band_map(schedule.get_root().child(0)), "{ S0[i] -> [-i] }")


# ----------------------------------------------------------------------------- fusion

def producer_consumer(stencil: bool) -> Program:
    """S0: B[i] = A[i]; S1: C[i] = B[i] (or B[i - 1] + B[i + 1] when ``stencil``)."""
    reads = (["[N] -> { S1[i] -> B[i - 1] }", "[N] -> { S1[i] -> B[i + 1] }"] if stencil
             else ["{ S1[i] -> B[i] }"])
    return Program.from_isl(
        "pc", arrays={"A": ("int64", ("N",)), "B": ("int64", ("N",)), "C": ("int64", ("N",))},
        statements=[dict(domain="[N] -> { S0[i] : 0 <= i < N }", write="{ S0[i] -> B[i] }",
                         reads=["{ S0[i] -> A[i] }"], body=lambda a: a + 1),
                    dict(domain="[N] -> { S1[i] : 1 <= i < N - 1 }", write="{ S1[i] -> C[i] }",
                         reads=reads, body=lambda *r: sum(r[1:], r[0]))])


def top_loops(schedule: isl.Schedule, context: str = "[N] -> { : N >= 3 }") -> int:
    """How many loops the generated code has at the outermost level."""
    ast = isl.AstBuild.from_context(isl.Set(context)).node_from_schedule(schedule)
    if ast.get_type() == isl.ast_node_type.for_:
        return 1
    children = ast.block_get_children()
    return sum(1 for k in range(len(children))
               if children.get_at(k).get_type() == isl.ast_node_type.for_)


@pytest.mark.parametrize("fusion", ["smart", "max", "typed"])
def test_producer_and_consumer_are_fused(fusion):
    schedule, deps = pluto(producer_consumer(stencil=False), fusion=fusion)
    band = schedule.get_root().child(0)
    assert T.is_band(band) and same_map(band_map(band), "{ S0[i] -> [i]; S1[i] -> [i] }")
    assert band.band_member_get_coincident(0)
    assert top_loops(schedule) == 1


def test_fusion_none_distributes_every_scc():
    schedule, deps = pluto(producer_consumer(stencil=False), fusion="none")
    assert schedule.get_root().child(0).get_type() == isl.schedule_node_type.sequence
    assert top_loops(schedule) == 2


@pytest.mark.parametrize("fusion, fused", [("smart", False), ("max", True), ("typed", False)])
def test_typed_and_smart_fusion_refuse_to_lose_parallelism(fusion, fused):
    # each loop alone is parallel; fused (with a shift) the loop carries S0 -> S1
    schedule, deps = pluto(producer_consumer(stencil=True), fusion=fusion)
    assert (top_loops(schedule) == 1) == fused
    if not fused:
        assert all(b.band_member_get_coincident(0) for b in bands(schedule))


def test_smart_fusion_inside_a_loop_keeps_locality_over_parallelism():
    """Two statements that share data, each with a parallel first loop alone, and a fused
    loop that is not parallel: outermost, smart fusion keeps them apart (the test above);
    below a loop, where a parallel loop would start a parallel region per outer
    iteration, it fuses them for locality, as Pluto does (durbin: 3x faster fused)."""
    from types import SimpleNamespace

    from polycomp.scheduler import fusion

    facts = {n: fusion.StatementFacts(n, k, 1, frozenset({"B"})) for k, n in
             enumerate(["S0", "S1"])}
    pieces = [SimpleNamespace(source="S0", target="S1")]

    def solve(names):
        return SimpleNamespace(coincident=len(names) == 1)

    assert fusion.partition("smart", ["S0", "S1"], pieces, facts, solve,
                            outermost=True) == [["S0"], ["S1"]]
    assert fusion.partition("smart", ["S0", "S1"], pieces, facts, solve,
                            outermost=False) == [["S0", "S1"]]


def test_typed_fusion_refuses_to_fuse_a_parallel_loop_with_a_sequential_one():
    program = Program.from_isl(
        "mixed", arrays={"A": ("int64", ("N",)), "B": ("int64", ("N",))},
        statements=[dict(domain="[N] -> { S0[i] : 0 <= i < N }", write="{ S0[i] -> B[i] }",
                         reads=["{ S0[i] -> A[i] }"], body=lambda a: a + 1),
                    dict(domain="[N] -> { S1[i] : 1 <= i < N }", write="{ S1[i] -> B[i] }",
                         reads=["{ S1[i] -> B[i - 1] }"], body=lambda a: a + 1)])
    assert top_loops(pluto(program, fusion="typed")[0]) == 2
    assert top_loops(pluto(program, fusion="max")[0]) == 1


def test_smart_fusion_cuts_between_different_depths():
    schedule, _ = pluto(matmul(), fusion="smart")
    assert schedule.get_root().child(0).get_type() == isl.schedule_node_type.sequence


# ----------------------------------------------------------------------------- partitions

def test_forced_partition_distributes_the_groups():
    schedule, _ = pluto(producer_consumer(stencil=False), partition=(("S0",), ("S1",)))
    assert top_loops(schedule) == 2


def test_forced_partition_orders_groups_by_dependences():
    schedule, _ = pluto(producer_consumer(stencil=False), partition=(("S1",), ("S0",)))
    assert top_loops(schedule) == 2


def test_forced_partition_that_splits_a_cycle_is_refused_naming_a_dependence():
    with pytest.raises(IllegalScheduleError, match=r"dependence S\d -> S\d"):
        pluto(jacobi1d(), partition=(("S0",), ("S1",)))


def test_forced_fusion_of_a_reversal_uses_negative_coefficients():
    # S1 reads B backwards: fusing needs S0's loop reversed (Pluto+'s negative coefficients)
    program = Program.from_isl(
        "reverse", arrays={"A": ("int64", ("N",)), "B": ("int64", ("N",))},
        statements=[dict(domain="[N] -> { S0[i] : 0 <= i < N }", write="{ S0[i] -> B[i] }",
                         reads=["{ S0[i] -> A[i] }"], body=lambda a: a + 1),
                    dict(domain="[N] -> { S1[i] : 0 <= i < N }", write="{ S1[i] -> A[i] }",
                         reads=["[N] -> { S1[i] -> B[N - 1 - i] }"], body=lambda a: a + 1)])
    assert top_loops(pluto(program)[0]) == 2
    fused, _ = pluto(program, partition=(("S0", "S1"),))
    assert fused.get_map().is_equal(isl.UnionMap("[N] -> { S0[i] -> [-i, 0]; S1[i] -> [i, 1] }")
                                    .intersect_domain(fused.get_domain()))


def test_forced_fusion_without_a_common_loop_is_refused():
    # S0 is a scan (its loop must go forward), and S1 reads its results backwards: no row
    # without a parametric shift serves both
    program = Program.from_isl(
        "scan_reverse", arrays={"A": ("int64", ("N",)), "B": ("int64", ("N",))},
        statements=[dict(domain="[N] -> { S0[i] : 1 <= i < N }", write="{ S0[i] -> B[i] }",
                         reads=["{ S0[i] -> B[i - 1] }", "{ S0[i] -> A[i] }"],
                         body=lambda b, a: a + b),
                    dict(domain="[N] -> { S1[i] : 0 <= i < N }", write="{ S1[i] -> A[i] }",
                         reads=["[N] -> { S1[i] -> B[N - 1 - i] }"], body=lambda b: b + 1)])
    assert top_loops(pluto(program)[0]) == 2
    with pytest.raises(IllegalScheduleError, match="cannot share an outer loop"):
        pluto(program, partition=(("S0", "S1"),))


# ----------------------------------------------------------------------------- fallbacks

@pytest.mark.parametrize("bound", [0, 1])
@pytest.mark.parametrize("make", KERNELS, ids=lambda f: f.__name__)
def test_tight_coefficient_bounds_fall_back_to_legal_schedules(make, bound):
    """With no room for Pluto's rows the scheduler falls back (negative coefficients,
    Feautrier rows, then the original order) and still respects every dependence."""
    program = make()
    deps = compute_dependences(program)
    schedule = schedule_pluto(program, deps, Options(), Config(coefficient_bound=bound))
    check_schedule(schedule, deps)


def test_linear_algebra_helpers():
    assert rank([(1, 0, 0, 5), (2, 0, 0, 1)], 3) == 1
    assert orthogonal_complement([(1, 0, 0)], 3) == [(0, 1, 0), (0, 0, 1)]
    assert orthogonal_complement([(1, 1, 0)], 2) == [(1, -1)]
    assert orthogonal_complement([(2, 1, 0), (1, 0, 0)], 2) == []


# ----------------------------------------------------------------------------- description

def test_describe_schedule_names_hyperplanes_bands_and_carried_dependences():
    schedule, deps = pluto(jacobi1d())
    text = describe_schedule(schedule, deps)
    assert "S0: (t, 2t + i, [0])" in text
    assert "S1: (t, 2t + i + 1, [1])" in text
    assert "band 0: 2 members, S0 S1, permutable" in text
    assert "S1 -> S0 (flow, anti)" in text
    assert "sequence: [S0] [S1]" in text


def test_describe_schedule_marks_coincident_members_and_works_on_any_schedule():
    schedule, deps = pluto(matmul())
    text = describe_schedule(schedule, deps)
    assert "0: S1 i  (coincident)" in text
    assert "2: S1 k\n     carries: S1 -> S1 (flow, anti, output)" in text
    original = compute_dependences(seidel1d())
    from polycomp.scheduler import get_scheduler
    plain = get_scheduler("none")(seidel1d(), original, Options())
    assert "S0: (t, i)" in describe_schedule(plain, original)


def test_a_parallel_band_over_cut_statements_is_distributed_into_their_bands():
    """gramschmidt: smart fusion puts R[k][j] += Q[i][k] * A[i][j] and
    A[i][j] -= Q[i][k] * R[k][j] under one j loop and cuts their i loops apart; j carries
    nothing, so it is distributed into each statement's band: (j, i), tileable, where
    the intra-tile pass makes j the vector loop (3.5 s -> 0.41 s at LARGE)."""
    kdef = defs.get_kernel("gramschmidt")
    program = parse_c(kdef.c_source()).get(kdef.function).lower(kdef.sizes["SMALL"])
    deps = compute_dependences(program)
    inner = {"S5", "S6"}  # the two statements of the j loop
    schedule = schedule_pluto(program, deps, Options(scheduler="pluto", fusion="smart"))
    check_schedule(schedule, deps)
    own = []
    for band in bands(schedule):
        names = {m.get_tuple_name(isl.dim_type.in_) for m in U.maps_of(band_map(band))}
        if len(names) == 1 and names <= inner:
            own.append(band.band_n_member())
    assert own == [2, 2], schedule


def test_a_padded_3x3_convs_big_piece_keeps_its_exact_rows_only():
    """A 3x3 conv reading its padded input (64 channels at 56 x 56): after the equalities,
    the dependence piece keeps 9 variables, and relaxing its sizes (farkas.Sizes) costs
    isl's cone computation over half a minute where the exact one takes a tenth of a
    second (the scheduler's whole limit is 15 s): the piece keeps its exact rows, and a
    smaller one is still relaxed."""
    from polycomp.scheduler import farkas as F  # noqa: PLC0415

    big = isl.Set(
        "{ [i1, i2, i3, j1, j2, j3, k, a, b] : 0 <= i1 <= 63 and 0 <= i2 <= 55 and "
        "0 <= i3 <= 55 and 0 <= j1 <= 63 and i2 - 1 <= j2 <= i2 + 1 and 0 <= j2 <= 55 and "
        "i3 - 1 <= j3 <= i3 + 1 and 0 <= j3 <= 55 and 0 <= k <= 63 and 0 <= a <= 2 and "
        "0 <= b <= 2 }").detect_equalities().remove_redundancies()
    small = big.project_out(isl.dim_type.set, 2, 1).project_out(isl.dim_type.set, 4, 1)
    for poly, relaxed in ((big, False), (small, True)):
        sizes = F.Sizes.of([poly], [])
        piece = F._piece("S", "T", 3, 6, 0, poly, sizes)
        assert piece.rows and (piece.relaxed is not None) == relaxed
    assert F.farkas_rows(big, F.RELAXED_MAX_VARIABLES) is None
