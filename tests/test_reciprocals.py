"""Division by a loop-invariant divisor as a multiplication by its reciprocal
(scheduler/reciprocals.py): where it applies, where it does not, exact_fp, and the
results against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import polycomp
from polycomp import expr as E
from polycomp.scheduler.reciprocals import hoist_reciprocals

SOFTMAX = """
def softmax(float(M, N) X) -> (Y) {
    mx(m) max=! X(m, n)
    e(m, n) = exp(X(m, n) - mx(m))
    s(m) +=! e(m, n)
    Y(m, n) = e(m, n) / s(m)
}
"""
ELEMENTWISE = "def q(float(N) A, float(N) B) -> (C) { C(i) = A(i) / B(i) }"


def _divisions(program) -> list[E.Binary]:
    return [n for s in program.statements for n in E.walk(s.expr)
            if isinstance(n, E.Binary) and n.op == "div"]


def test_an_invariant_divisor_becomes_a_reciprocal_and_the_reads_stay():
    program = polycomp.compile(SOFTMAX, sizes={"M": 8, "N": 32}).program
    before = [d for d in _divisions(program)]
    rewritten = hoist_reciprocals(program)
    # the kernel's program is rewritten already: its one division divides 1
    assert all(isinstance(d.lhs, E.Const) and d.lhs.value == 1.0 for d in before)
    assert rewritten is program  # nothing left to rewrite: a fixpoint
    for s in program.statements:
        assert len(s.reads) >= len(E.accesses(s.expr))


def test_an_elementwise_divisor_stays_a_division():
    program = polycomp.compile(ELEMENTWISE, sizes={"N": 64}).program
    (d,) = _divisions(program)
    assert isinstance(d.lhs, E.Access)


@pytest.mark.needs_cc
@pytest.mark.parametrize("exact_fp", [False, True])
def test_softmax_with_and_without_reciprocals_matches_numpy(exact_fp):
    kernel = polycomp.compile(SOFTMAX, sizes={"M": 24, "N": 48}, exact_fp=exact_fp)
    divisions = _divisions(kernel.program)
    if exact_fp:
        assert divisions and not any(isinstance(d.lhs, E.Const) for d in divisions)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((24, 48)).astype(np.float32)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(kernel(x), e / e.sum(axis=1, keepdims=True),
                               rtol=2e-6, atol=1e-7)


def test_a_c_loop_nest_keeps_its_divisions():
    # C's arithmetic is C's: an invariant divisor stays a division (gcc -O3 would too)
    src = """
    void scale(int n, float A[n][n], float d[n]) {
      for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
          A[i][j] = A[i][j] / d[i];
    }
    """
    kernel = polycomp.compile_loops(src, "scale")
    (d,) = _divisions(kernel.program.specialize({"n": 8}))
    assert isinstance(d.lhs, E.Access)
    assert hoist_reciprocals(kernel.program) is kernel.program
