"""Point-wise temporaries inlined into their one reader (scheduler/inlining.py): where it
applies, where it must not, and that results never change (numpy and scheduler="none",
which never inlines, as oracles)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import polycomp
from polycomp.scheduler.inlining import inline_pointwise

pytestmark = pytest.mark.needs_cc


def _arrays(kernel) -> set[str]:
    return {a.name for a in kernel.program.arrays}


def test_a_pointwise_chain_becomes_one_statement():
    source = """def f(float(N, M) A, float(M) b) -> (O) {
        T(i, j) = A(i, j) + b(j)
        U(i, j) = fmax(T(i, j), 0.0)
        O(i, j) = U(i, j) * 2.0
    }"""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 7)).astype(np.float32)
    b = rng.standard_normal(7).astype(np.float32)
    kernel = polycomp.compile(source)
    got = kernel(a, b)
    np.testing.assert_array_equal(got, np.maximum(a + b, 0) * 2)
    assert not {"T", "U"} & _arrays(kernel)
    assert len(kernel.program.statements) == 1
    reference = polycomp.compile(source, scheduler="none")  # never inlines
    np.testing.assert_array_equal(reference(a, b), got)
    assert {"T", "U"} <= _arrays(reference)


def test_a_value_read_twice_or_broadcast_stays_an_array():
    """Inlining would compute T twice per output (two reads) or once per j (a read
    that is not injective): T stays."""
    twice = polycomp.compile("""def f(float(N) A) -> (O) {
        T(i) = exp(A(i))
        O(i) = T(i) * T(i)
    }""")
    broadcast = polycomp.compile("""def f(float(N) A, float(N, M) B) -> (O) {
        T(i) = exp(A(i))
        O(i, j) = T(i) + B(i, j)
    }""")
    a = np.linspace(-1, 1, 6, dtype=np.float32)
    b = np.ones((6, 3), dtype=np.float32)
    np.testing.assert_allclose(twice(a), np.exp(a) ** 2, rtol=1e-6)
    np.testing.assert_allclose(broadcast(a, b), np.exp(a)[:, None] + b, rtol=1e-6)
    assert "T" in _arrays(twice) and "T" in _arrays(broadcast)


def test_a_value_whose_inputs_change_afterwards_is_not_moved():
    """T reads U, which is written again before O reads T: computed in O, T would see
    the new U."""
    source = """def f(float(N) A) -> (O) {
        U(i) = A(i) * 3.0
        T(i) = U(i) + 1.0
        U(i) = A(i) * 0.0
        O(i) = T(i) + U(i)
    }"""
    a = np.arange(5, dtype=np.float32)
    kernel = polycomp.compile(source)
    np.testing.assert_array_equal(kernel(a), 3 * a + 1)
    assert "T" in _arrays(kernel)


def test_the_inlined_value_keeps_its_type():
    """An int32 temporary of a float expression truncates: inlined, the cast stays."""
    kernel = polycomp.compile("""def f(float(N) A) -> (O) {
        T(i) = int32(A(i) * 2.5)
        O(i) = float(T(i)) + 0.25
    }""")
    a = np.array([0.3, 1.1, -2.7, 3.9], dtype=np.float32)
    np.testing.assert_array_equal(kernel(a), (a * 2.5).astype(np.int32).astype(np.float32) + 0.25)
    assert "T" not in _arrays(kernel)


def test_parametric_programs_are_left_alone():
    kernel = polycomp.compile("""def f(float(N) A) -> (O) {
        T(i) = A(i) + 1.0
        O(i) = T(i) * 2.0
    }""", parametric=True)
    np.testing.assert_array_equal(kernel(np.ones(3, np.float32)), np.full(3, 4, np.float32))
    assert inline_pointwise(kernel.program) is kernel.program


@settings(max_examples=12, deadline=None)
@given(ops=st.lists(st.sampled_from(["+ 1.0", "* 0.5", "- B(i, j)", "* B(i, j)"]),
                    min_size=1, max_size=4),
       n=st.integers(1, 9), m=st.integers(1, 9))
def test_random_chains_match_numpy(ops, n, m):
    lines = ["T0(i, j) = A(i, j)"]
    for k, op in enumerate(ops):
        lines.append(f"T{k + 1}(i, j) = T{k}(i, j) {op}")
    lines.append(f"O(i, j) = T{len(ops)}(i, j)")
    source = "def f(float(N, M) A, float(N, M) B) -> (O) {\n" + "\n".join(lines) + "\n}"
    rng = np.random.default_rng(n * 10 + m)
    a = rng.standard_normal((n, m)).astype(np.float32)
    b = rng.standard_normal((n, m)).astype(np.float32)
    want = a.copy()
    for op in ops:
        want = {"+ 1.0": lambda v: v + np.float32(1), "* 0.5": lambda v: v * np.float32(0.5),
                "- B(i, j)": lambda v: v - b, "* B(i, j)": lambda v: v * b}[op](want)
    kernel = polycomp.compile(source, exact_fp=True)
    np.testing.assert_array_equal(kernel(a, b), want)
    assert len(kernel.program.statements) == 1
