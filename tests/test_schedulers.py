import islpy as isl
import pytest

from polycomp import Program
from polycomp.errors import IllegalScheduleError
from polycomp.options import Options
from polycomp.scheduler import compute_dependences, get_scheduler
from polycomp.scheduler import tree as T
from polycomp.scheduler.legality import check_schedule, is_parallel_member
from polycomp.scheduler.original import tree_from_schedule_map
from polycomp.scheduler.parallel import mark_parallel

from programs import jacobi1d, matmul, seidel1d

PROGRAMS = [matmul, jacobi1d, seidel1d]


def order(smap: isl.UnionMap) -> isl.UnionMap:
    return smap.lex_lt_union_map(smap)


@pytest.mark.parametrize("make", PROGRAMS)
def test_none_keeps_the_original_order(make):
    program = make()
    schedule = get_scheduler("none")(program, compute_dependences(program), Options())
    smap = schedule.get_map().intersect_domain(program.domain())
    assert order(smap).is_equal(order(program.original_schedule.intersect_domain(program.domain())))


@pytest.mark.parametrize("name", ["none", "isl"])
@pytest.mark.parametrize("make", PROGRAMS)
def test_every_scheduler_is_legal_with_parallel_marks(name, make):
    program = make()
    deps = compute_dependences(program)
    schedule = mark_parallel(get_scheduler(name)(program, deps, Options()), deps)
    check_schedule(schedule, deps)


def test_parallel_marks_outermost_dependence_free_loop():
    program = jacobi1d()
    deps = compute_dependences(program)
    schedule = mark_parallel(get_scheduler("none")(program, deps, Options()), deps)
    marks = [n for n in T.nodes(schedule) if T.is_mark(n, T.MARK_PARALLEL)]
    # the time loop carries dependences; each of the two inner i loops is parallel
    assert len(marks) == 2
    for mark in marks:
        assert mark.get_schedule_depth() == 1


@pytest.mark.parametrize("n, min_work, marked", [
    (1000, 20000, 0),        # 998 instances per time step: not worth a parallel region
    (1000, 0, 2),            # unless asked for
    (100000, 20000, 2),      # 99998 per step: parallel
])
def test_parallel_regions_inside_serial_loops_need_enough_work(n, min_work, marked):
    program = jacobi1d().specialize({"T": 50, "N": n})
    deps = compute_dependences(program)
    schedule = mark_parallel(get_scheduler("none")(program, deps, Options()), deps, program,
                             min_work)
    assert len([m for m in T.nodes(schedule) if T.is_mark(m, T.MARK_PARALLEL)]) == marked
    check_schedule(schedule, deps)


def test_strided_instances_count_as_more_work():
    """Column walks (one cache miss per instance) are worth a region with fewer of them."""
    program = Program.from_isl(
        "columns", arrays={"A": ("float64", ("N", "N"))},
        statements=[dict(domain="[N] -> { S0[j, i] : 0 <= j < N and 0 <= i < N and j >= 1 }",
                         write="{ S0[j, i] -> A[i, j] }", reads=["{ S0[j, i] -> A[i, j - 1] }"],
                         body=lambda a: a + 1.0)]).specialize({"N": 2000})
    deps = compute_dependences(program)
    schedule = mark_parallel(get_scheduler("none")(program, deps, Options()), deps, program,
                             20000)  # 2000 instances per j, each a cache miss: 32000
    assert len([m for m in T.nodes(schedule) if T.is_mark(m, T.MARK_PARALLEL)]) == 1


def test_seidel_has_no_parallel_loop_in_original_order():
    program = seidel1d()
    deps = compute_dependences(program)
    schedule = mark_parallel(get_scheduler("none")(program, deps, Options()), deps)
    assert not any(T.is_mark(n, T.MARK_PARALLEL) for n in T.nodes(schedule))


def test_legality_rejects_interchange_of_a_carried_stencil():
    program = seidel1d()
    deps = compute_dependences(program)
    swapped = tree_from_schedule_map(program.domain(), isl.UnionMap("{ S0[t, i] -> [i, t] }"))
    with pytest.raises(IllegalScheduleError, match="breaks a (flow|anti|output) dependence"):
        check_schedule(swapped, deps)


def test_legality_rejects_a_parallel_mark_on_a_carrying_loop():
    program = seidel1d()
    deps = compute_dependences(program)
    schedule = get_scheduler("none")(program, deps, Options())
    band = schedule.get_root().child(0)
    assert T.is_band(band) and not is_parallel_member(band, 0, deps.all())
    marked = band.insert_mark(isl.Id(T.MARK_PARALLEL)).get_schedule()
    with pytest.raises(IllegalScheduleError, match="carries the dependence"):
        check_schedule(marked, deps)


def test_legality_rejects_a_schedule_that_drops_instances():
    program = matmul()
    deps = compute_dependences(program)
    partial = tree_from_schedule_map(
        isl.UnionSet("[M, N] -> { S0[i, j] : 0 <= i < M and 0 <= j < N }"),
        isl.UnionMap("{ S0[i, j] -> [i, j] }"))
    with pytest.raises(IllegalScheduleError, match="cover"):
        check_schedule(partial, deps)


def test_custom_schedule_is_used_when_legal_and_refused_when_not():
    import numpy as np

    import polycomp

    a = np.arange(12, dtype=np.int64)
    legal = polycomp.compile_program(seidel1d(), scheduler="custom",
                                     schedule="{ S0[t, i] -> [t, i] }")
    b = a.copy()
    legal(2, b)
    reference = polycomp.compile_program(seidel1d(), scheduler="none")
    c = a.copy()
    reference(2, c)
    assert np.array_equal(b, c)
    illegal = polycomp.compile_program(seidel1d(), scheduler="custom",
                                       schedule="{ S0[t, i] -> [i, t] }")
    with pytest.raises(IllegalScheduleError, match="dependence"):
        illegal(2, a.copy())
