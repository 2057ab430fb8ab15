"""Compile hangs found by the differential fuzzer (python -m polycomp.fuzzing, campaign 77).

* 77:304 and 77:768 (scheduler "isl"): small strided nests whose *parametric* form
  (``Program.generic``, which isl's scheduler schedules) has a context that keeps only
  the sizes' signs; isl's flow analysis of it ran for minutes, in the compiling process,
  where the specialised program's took milliseconds. scheduler/isl_sched.py now computes
  the generic dependences in a child process under ``DEPENDENCE_LIMIT`` seconds and
  otherwise schedules the specialised program with the driver's dependences.

The cases run as the fuzzer runs them (a worker process; gcc -O0 is the oracle). The
structural test checks, without timing anything, that the generic dependence analysis
never runs unbounded in the compiling process.
"""

from __future__ import annotations

import os
import time
import warnings

import pytest

import polycomp
from polycomp.fuzzing.campaign import case_at
from polycomp.fuzzing.harness import Worker
from polycomp.scheduler import isl_sched

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


def fuzz_case(n: int):
    case = case_at(77, n)
    assert case.program.source.startswith(SOURCES[n]), \
        "loopgen draws another program now: build this case by hand from the finding"
    return case


@pytest.fixture(scope="module")
def worker():
    w = Worker(timeout=60.0)
    yield w
    w.close()


@pytest.mark.needs_cc
@pytest.mark.parametrize("n", sorted(SOURCES))
def test_isl_scheduler_cases_compile_and_agree_with_gcc_O0(worker, n):
    case = fuzz_case(n)
    assert case.options["scheduler"] == "isl"
    outcome = worker.run(case)
    assert outcome.status == "ok", f"{outcome.status} at {outcome.stage}: {outcome.detail}"


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
