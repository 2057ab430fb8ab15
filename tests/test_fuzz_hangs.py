"""Compile hangs found by the differential fuzzer (python -m polycomp.fuzzing, campaign 77).

* 77:304 and 77:768 (scheduler "isl"; now run with the fallbacks below): small strided nests whose *parametric* form
  (``Program.generic``, which isl's scheduler schedules) has a context that keeps only
  the sizes' signs; isl's flow analysis of it ran for minutes, in the compiling process,
  where the specialised program's took milliseconds. scheduler/isl_sched.py now computes
  the generic dependences in a child process under ``DEPENDENCE_LIMIT`` seconds and
  otherwise schedules the specialised program with the driver's dependences.

* 77:876, 77:905, 77:1605, 4242:849 (schedulers "pluto" and "isl", some parametric):
  isl's exact dependence analysis of the parametric program ran for tens of seconds,
  then pluto's Farkas duals and ILPs for minutes. scheduler/dependences.py now runs the
  exact analysis in a child under ``EXACT_LIMIT`` (then the memory-based superset), and
  scheduler/__init__.py every searching scheduler (the isl chain included) under
  ``SCHEDULE_LIMIT`` (then the original order, with a SchedulerFallbackWarning). Here
  they run in this process with tiny limits, so that the fallbacks are what is tested.

* 8484:190, 8484:547 (schedulers "isl" and "pluto", parametric): the exact half of the AST check
  (codegen/verify.py) ran for minutes inside its isl operation budget (one subset test
  whose operations isl does not count as pivots). It now runs in a child under
  ``EXACT_SECONDS`` too; past it the AST is not trusted and the original order is
  compiled, with a SchedulerFallbackWarning.

* 9595:1333 (scheduler "isl", tile size 2): isl's AST generator itself ran for minutes on
  a 15-line tiled nest, without counting the operations its budget would stop. Code
  generation (AST, check, C) now runs in a child under ``driver.CODEGEN_SECONDS``; past it
  the original order is compiled, with a SchedulerFallbackWarning.

The cases run as the fuzzer runs them (a worker process; gcc -O0 is the oracle). No test
times anything: each asserts that the compiler's own limit fired (the warning or the
fallback it reports) and that the kernel is still right. Which of the limits fires first
depends on the machine's speed, so the tests accept any of them. The structural test
checks that the generic dependence analysis never runs unbounded in the compiling process.
"""

from __future__ import annotations

import os
import time
import warnings

import numpy as np
import pytest

import polycomp
from polycomp.fuzzing.campaign import case_at
import polycomp.scheduler as scheduler_package
from polycomp.fuzzing.worker import run_case
from polycomp import driver
from polycomp.codegen import verify
from polycomp.scheduler import budget, dependences, isl_sched, pluto
from polycomp.scheduler.budget import SchedulerFallbackWarning

# the programs of the finding files, as case_at(77, n) draws them
SOURCES = {
    304: """void kern(int N, int a0, unsigned A[3 * N + 8][3 * N + 3]) {
  for (int i = 2; i < N + 1; i++) {
    for (int j = 1; j <= N - 1; j += 3) {
      double t0 = A[-i + j + N + 6][i + 1];
      for (int k = 0; k <= N - j - 1; k += 2) {
        A[(k) / 2 + 7][2 * i + 2]++;""",
    768: """void kern(int N, int M, int a0, double A[3 * N + 5][3 * N + 11], unsigned char B""",
}
# (campaign, case) -> the start of its program
BOUNDED_SOURCES = {
    (77, 876): "void kern(int N, int M, long a1, double d0, long A[N + 2 * M + 10]",
    (77, 905): "void kern(int N, int M, short A[N + M + 3], unsigned B[2 * N + M + 11]",
    (77, 1605): "void kern(int N, unsigned A[3 * N + 4], unsigned long B[4 * N + 5]",
    (4242, 849): "void kern(int N, int M, int a0, long a1, int A[2 * N + M + 8]",
    (8484, 190): "void kern(int N, int M, int a0, long a1, unsigned A[N + 1], int B[2 * N",
    (8484, 547): "void kern(int N, long A[N + 13], long B[N + 5], short C[N + 10][N + 8]",
    (9595, 1333): "void kern(long a1, long A[19], int B[15][9][16], long C[11][13]",
}


def fuzz_case(n: int, seed: int = 77):
    case = case_at(seed, n)
    start = SOURCES[n] if seed == 77 and n in SOURCES else BOUNDED_SOURCES[seed, n]
    assert case.program.source.startswith(start), \
        "loopgen draws another program now: build this case by hand from the finding"
    return case


@pytest.mark.needs_cc
@pytest.mark.parametrize("seed,n", sorted(BOUNDED_SOURCES) + [(77, n) for n in sorted(SOURCES)])
def test_slow_analysis_and_scheduling_fall_back_and_agree_with_gcc_O0(monkeypatch, seed, n):
    monkeypatch.setattr(dependences, "EXACT_LIMIT", 0.3)
    monkeypatch.setattr(scheduler_package, "SCHEDULE_LIMIT", 0.5)
    monkeypatch.setattr(verify, "EXACT_SECONDS", 1.0)
    monkeypatch.setattr(driver, "CODEGEN_SECONDS", 4.0)
    case = fuzz_case(n, seed)
    # these ran for minutes unbounded; with the limits above each stage is cut short
    # (and says so in a SchedulerFallbackWarning) or finishes within them. Whether a
    # limit fires depends on the machine's speed, so only the result is asserted: that a
    # limit which fires leads to a right program is what matters, and the tests below
    # check each limit itself on a computation that never ends
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SchedulerFallbackWarning)
        outcome = run_case(case, lambda message: None)
    assert outcome.status == "ok", f"{outcome.status} at {outcome.stage}: {outcome.detail}"


def _runaway(*args, **kwargs):
    while True:
        pass


@pytest.mark.needs_cc
@pytest.mark.parametrize("name", ["pluto", "isl"])
def test_a_scheduler_that_never_returns_ends_in_the_original_order(monkeypatch, name):
    """pluto never returns (and isl finds nothing, so its chain ends in pluto): the
    compile ends after the limit with the original order and a warning naming it."""
    monkeypatch.setattr(pluto, "schedule_pluto", _runaway)
    monkeypatch.setattr(isl_sched, "_compute", lambda program, deps: None)
    monkeypatch.setattr(scheduler_package, "SCHEDULE_LIMIT", 0.3)
    source = ("void k(int N, double A[N][N]) { for (int i = 1; i < N; i++) "
              "for (int j = 0; j < N; j++) A[i][j] += A[i - 1][j]; }")
    with pytest.warns(SchedulerFallbackWarning, match=f"'{name}' ran for more than 0.3 s"):
        kernel = polycomp.compile_loops(source, "k", scheduler=name)
        kernel.specialize({"N": 6})
    A = np.arange(36, dtype=float).reshape(6, 6)
    expected = A.copy()
    for i in range(1, 6):
        expected[i] += expected[i - 1]
    kernel(6, A)
    assert np.array_equal(A, expected)


def test_slow_exact_analysis_gives_the_memory_based_superset(monkeypatch):
    from programs import jacobi1d
    program = jacobi1d()
    exact = dependences.compute_dependences(program)
    monkeypatch.setattr(dependences, "_exact", lambda *args: time.sleep(60))
    monkeypatch.setattr(dependences, "EXACT_LIMIT", 0.2)
    timeouts = []

    def recording(fn, seconds):
        try:
            return budget.in_time_limit(fn, seconds)
        except TimeoutError as exc:
            timeouts.append(str(exc))
            raise

    monkeypatch.setattr(dependences, "in_time_limit", recording)
    superset = dependences.compute_dependences(program)
    assert timeouts == ["no result within 0.2 s"]  # the limit killed the sleeping child
    for kind in ("flow", "anti", "output"):
        assert getattr(exact, kind).is_subset(getattr(superset, kind)), kind
    assert not exact.output.is_equal(superset.output)  # the memory-based one, not exact


def test_exact_dependences_come_back_from_the_child_unchanged():
    from programs import jacobi1d, matmul
    for program in (matmul(), jacobi1d()):
        context = program.context
        here = dependences._exact(program, program.reads().intersect_params(context),
                                  program.writes().intersect_params(context),
                                  program.original_schedule.intersect_params(context))
        there = dependences.compute_dependences(program)
        for kind in ("flow", "anti", "output", "live_in"):
            assert getattr(here, kind).is_equal(getattr(there, kind)), kind


@pytest.mark.needs_cc
def test_generic_dependence_analysis_is_bounded(monkeypatch):
    """A generic dependence analysis that never ends (simulated) must not hold up the
    compile: it runs in a child that is killed, and the specialised program is scheduled
    by isl (no fallback to pluto)."""
    real = isl_sched.compute_dependences
    parent = os.getpid()

    def runaway(program):
        if program.params:  # the generic program
            assert os.getpid() != parent, \
                "the parametric program's dependences were computed in the compiling process"
            time.sleep(60)
        return real(program)

    monkeypatch.setattr(isl_sched, "compute_dependences", runaway)
    monkeypatch.setattr(isl_sched, "DEPENDENCE_LIMIT", 0.2)
    case = fuzz_case(304)
    with warnings.catch_warnings():
        warnings.simplefilter("error", isl_sched.SchedulerFallbackWarning)
        kernel = polycomp.compile_loops(case.program.source, case.program.function,
                                        **case.options)
        kernel.specialize(case.program.sizes)
    assert "scheduler=isl" in kernel.c_source


@pytest.mark.needs_cc
def test_an_ast_too_costly_to_check_falls_back_to_the_original_order(monkeypatch):
    """4242:1166 (isl, parametric): reading isl's AST back (codegen/verify.py) ran for
    minutes of set intersections. Past READBACK_OPERATIONS the driver compiles the
    original order, whose AST is checked in its turn; here with a budget that only the
    original order's AST fits in."""
    monkeypatch.setattr(verify, "READBACK_OPERATIONS", 3000)
    source = ("void k(int N, long A[N][N]) { for (int i = 1; i < N; i++) "
              "for (int j = 0; j < N; j += 2) A[i][j] += A[i - 1][j] - 3 * A[i][j / 2]; }")
    with pytest.warns(SchedulerFallbackWarning, match="original loop order"):
        kernel = polycomp.compile_loops(source, "k", tile_sizes=[2, 3], parametric=True)
    assert "#pragma omp" not in kernel.c_source  # the unmarked original order
    A = np.arange(49, dtype=np.int64).reshape(7, 7)
    expected = A.copy()
    for i in range(1, 7):
        for j in range(0, 7, 2):
            expected[i, j] += expected[i - 1, j] - 3 * expected[i, j // 2]
    kernel(7, A)
    assert np.array_equal(A, expected)


FUZZ_4242_4081 = """void kern(int N, long A[2 * N + 7][3 * N + 5]) {
  for (int i = 1; i <= N - 1; i++) {
    for (int j = 1; j < N; j++) {
      for (int k = N + 1 - 1; k >= 1; k -= 3) {
        A[2 * i + 5][j - k + 4] = (j % 4);
        A[i + 7][j + 2 * k + 2] -= A[k + 4][k + 2];
      }
      A[2 * j + 8][2 * i + j + 1] = ((int) (A[i + j + 8][i + 4] - A[2 * i + 7][i + j + 1]));
    }
  }
}"""


@pytest.mark.needs_cc
def test_an_ast_isl_gets_wrong_falls_back_to_the_original_order():
    """4242:4081 (isl scheduler): isl's AST for the schedule misses instances of S1 in every
    build (the check catches it); the kernel is the original order instead, not an error."""
    from polycomp.fuzzing.loopgen import ArgSpec
    from polycomp.fuzzing.oracle import run_gcc
    with pytest.warns(SchedulerFallbackWarning, match="original loop order"):
        kernel = polycomp.compile_loops(FUZZ_4242_4081, "kern", scheduler="isl", sizes={"N": 4})
    A = (np.arange(15 * 17, dtype=np.int64).reshape(15, 17) * 7) % 23
    expected = A.copy()
    specs = [ArgSpec("N", "size", "int32", 4), ArgSpec("A", "array", "int64", shape=(15, 17))]
    run_gcc(FUZZ_4242_4081, "kern", specs, [4, expected])
    kernel(4, A)
    assert np.array_equal(A, expected)
