"""Scalar expansion (scheduler/expansion.py): which scalars are expanded, that the
results stay those of gcc on the same C, and that it buys the schedule it is for."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import polycomp
from polycomp.frontend.loops import parse_c
from polycomp.scheduler.expansion import expand_scalars
from test_loops_frontend import check, rand

KERNELS = Path(__file__).resolve().parent.parent / "benchmarks" / "polybench" / "kernels"


def lowered(src: str, sizes=None):
    return parse_c(src).get().lower(sizes)


def scratch(program) -> dict[str, int]:
    return {a.name: a.rank for a in program.arrays if a.role == "scratch"}


def test_ludcmp_gets_one_array_per_live_range():
    program = lowered((KERNELS / "ludcmp.c").read_text())
    expanded = expand_scalars(program)
    # the two reductions of the LU part over (i, j), the two solves over i
    assert sorted(scratch(expanded).values()) == [1, 1, 2, 2]
    assert "w" not in {a.name for a in expanded.arrays}
    assert len(expanded.statements) == len(program.statements)
    # the parametric form is expanded the same way (isl's scheduler schedules it)
    specialised = expand_scalars(lowered((KERNELS / "ludcmp.c").read_text(), {"n": 9}))
    assert scratch(specialised.generic) == scratch(specialised)


CARRIED = """
void carried(int n, double A[n][n], double y[n])
{
  double s;
  s = 0.0;
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < n; j++)
      s += A[i][j];
    y[i] = s;
  }
}
"""

FROM_BEFORE = """
void from_before(int n, double A[n][n], double y[n])
{
  double s;
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < n; j++)
      s += A[i][j];
    y[i] = s;
  }
}
"""


def test_a_value_carried_across_the_loops_keeps_its_cell():
    program = lowered(CARRIED)
    assert expand_scalars(program) is program


def test_a_value_from_before_the_kernel_keeps_its_cell():
    program = lowered(FROM_BEFORE)
    assert expand_scalars(program) is program


SCALARS = """
void scalars(int n, int m, double A[n][m], double B[m][n], double x[m], double y[n],
             int P[n][m])
{
  double s, t;
  int q;
  /* a dot product per row (expanded over i) */
  for (int i = 0; i < n; i++) {
    s = 0.0;
    for (int j = 0; j < m; j++)
      s += A[i][j] * x[j];
    y[i] = s;
  }
  /* a reduction per (i, j) over a triangular k, two statements after it */
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++) {
      t = B[j][i];
      for (int k = 0; k < i; k++)
        t -= A[k][j] * y[k];
      A[i][j] = t * 0.5;
      x[j] = x[j] + t;
    }
  /* the same scalar reused with a stride and a guard; integers compare bit for bit */
  for (int i = 0; i < n; i += 2) {
    q = i;
    for (int j = 1; j < m; j++)
      if (j % 3 != 0)
        q = q * 3 + P[i][j - 1] - j;
    P[i][0] = q;
  }
  /* a range with no inner loop: renamed, not expanded */
  for (int i = 0; i < n; i++) {
    s = y[i] * 2.0;
    y[i] = s + 1.0;
  }
}
"""


def test_each_range_is_named_and_expanded_as_needed():
    expanded = expand_scalars(lowered(SCALARS))
    assert sorted(scratch(expanded).values()) == [0, 1, 1, 2]
    assert not {"s", "t", "q"} & {a.name for a in expanded.arrays}


def scalars_args(n: int, m: int) -> list:
    return [n, m, rand(n, m), rand(m, n), rand(m), rand(n), rand(n, m, dtype="int32")]


@pytest.mark.needs_cc
@pytest.mark.parametrize("n,m", [(1, 1), (2, 3), (7, 5), (12, 17)])
def test_expanded_programs_match_gcc(n: int, m: int):
    check(SCALARS, scalars_args(n, m), schedulers=("pluto", "isl"))


@pytest.mark.needs_cc
def test_scratch_arrays_take_their_extents_from_the_sizes():
    """Parametric: the generated code sizes its mallocs from the size arguments."""
    check(SCALARS, scalars_args(7, 5), schedulers=("pluto",), parametric=True)


@pytest.mark.needs_cc
def test_ludcmp_matches_gcc_under_every_scheduler():
    n = 23
    a = rand(n, n) + n * np.eye(n)
    check((KERNELS / "ludcmp.c").read_text(), [n, a, rand(n), rand(n), rand(n)],
          schedulers=("pluto", "isl"))


def test_expansion_frees_ludcmp_for_parallel_tiles():
    """Schedule quality: with its scalar expanded ludcmp's LU part gets parallel loops (a
    wavefront of tiles, as lu); with expansion off it has none."""
    src = (KERNELS / "ludcmp.c").read_text()
    on = polycomp.compile_loops(src, sizes={"n": 200}).c_source
    off = polycomp.compile_loops(src, sizes={"n": 200}, expand_scalars=False).c_source
    assert "#pragma omp" in on and "malloc(" in on and "free(" in on
    assert "#pragma omp" not in off and "malloc(" not in off


DEGENERATE = """
void kern(int N, int B[N + 11][N + 13], signed char D[N + 9][N + 5]) {
  for (int i = 3; i >= 0; i -= 3) {
    long t0 = B[i + 3][i + 2] + B[-i + 3][2 * i + 5];
    for (int j = i; j < N + 1; j++) {
      double t1 = (i + j < 3 ? (t0 - B[i + j + 4][j + 3]) : (t0 * D[2 * i - j + N + 2][i + j + 1]));
    }
  }
}
"""


def test_a_specialised_program_is_expanded_as_its_parametric_form():
    """Fuzz 1212:1622: at N = 0 the j loop is a single point, which changed the decisions
    for the specialised program (t1 expanded, t0 not) against the parametric one (the
    reverse); isl's scheduler schedules the parametric form, and its tree broke t0's
    output dependence in the specialised program (an InternalError)."""
    for n in (0, 1, 4):
        specialised = expand_scalars(lowered(DEGENERATE, {"N": n}))
        assert scratch(specialised) == scratch(specialised.generic)
    kernel = polycomp.compile_loops(DEGENERATE, scheduler="isl")
    b = np.arange(11 * 13, dtype=np.int32).reshape(11, 13)
    kernel(0, b, np.zeros((9, 5), np.int8))  # compiles and runs at N = 0
