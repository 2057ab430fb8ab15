import islpy as isl
import pytest

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
