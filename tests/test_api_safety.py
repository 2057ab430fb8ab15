"""API safety: every mistake a user can make through the public API is a PolycompError
with a hint, never a TypeError, an isl error, a MemoryError or a dead process.

Regression tests for /work/shared/reliability/{api_non_polycomp_errors,
calls_huge_broadcast_memoryerror, tc_float16_scalar_abi, threads_huge_count_crash,
div_by_constant_zero_sigill}.py.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import polycomp
from polycomp import Program
from polycomp.errors import (ArgumentError, CompilerError, DuplicateNameError,
                             IllegalScheduleError, IntegerDivisionError, OptionError,
                             RangeInferenceError, RankMismatchError)

TC = "def f(float(N) A) -> (B) { B(i) = A(i) * 2 }"
C = "void k(int n, double A[n]) { for (int i = 0; i < n; i++) A[i] = i; }"


def _one(domain: str, array: tuple = ("float64", (4,))) -> dict:
    return dict(domain=domain, write="{ S0[i] -> A[0] }", reads=["{ S0[i] -> A[0] }"])


def _from_isl(shape: tuple, statements: list | None = None) -> Program:
    return Program.from_isl("p", arrays={"A": ("float64", shape)}, statements=statements or [
        dict(domain="{ S0[i] : 0 <= i < 1 }", write="{ S0[i] -> A[i] }",
             reads=["{ S0[i] -> A[i] }"])])


# (what, call, expected class) - each raised something other than a PolycompError before
API_MISTAKES = [
    ("sizes None", lambda: polycomp.compile(TC, sizes={"N": None}), ArgumentError),
    ("sizes nan", lambda: polycomp.compile(TC, sizes={"N": float("nan")}), ArgumentError),
    ("sizes inf", lambda: polycomp.compile(TC, sizes={"N": float("inf")}), ArgumentError),
    ("size name 7", lambda: polycomp.compile(TC, sizes={"N": 3, 7: 2}), ArgumentError),
    ("sizes list", lambda: polycomp.compile(TC, sizes=[3]), ArgumentError),
    ("sizes 2**70", lambda: polycomp.compile(TC, sizes={"N": 2**70}), ArgumentError),
    ("loops sizes None", lambda: polycomp.compile_loops(C, sizes={"n": None}), ArgumentError),
    ("entry=3", lambda: polycomp.compile(TC, entry=3), ArgumentError),
    ("function=3", lambda: polycomp.compile_loops(C, function=3), ArgumentError),
    ("bytes source", lambda: polycomp.compile(TC.encode()), ArgumentError),
    ("None source", lambda: polycomp.compile(None), ArgumentError),
    ("bytes C source", lambda: polycomp.compile_loops(C.encode()), ArgumentError),
    ("file=3", lambda: polycomp.compile(TC + " junk", file=3), ArgumentError),
    ("program not a Program", lambda: polycomp.compile_program(TC), ArgumentError),
    ("custom map not single-valued", lambda: polycomp.compile(
        TC, sizes={"N": 8}, scheduler="custom", schedule="{ S0[i] -> [i]; S0[i] -> [i + 1] }"),
     IllegalScheduleError),
    ("tile_sizes 2**63", lambda: polycomp.compile(TC, tile_sizes=[2**63], parametric=True),
     OptionError),
    ("partition [[]]", lambda: polycomp.compile(TC, sizes={"N": 8}, partition=[[]]), OptionError),
    ("partition twice", lambda: polycomp.Options.create(partition=[["S0"], ["S0"]]), OptionError),
    ("from_isl size ''", lambda: _from_isl(("",)), ArgumentError),
    ("from_isl size '0a'", lambda: _from_isl(("0a",)), ArgumentError),
    ("from_isl extent -1", lambda: _from_isl((-1,)), ArgumentError),
    ("from_isl extent 2.5", lambda: _from_isl((2.5,)), ArgumentError),
    ("from_isl shape 'N'", lambda: Program.from_isl(
        "p", arrays={"A": ("float64", "N")}, statements=[]), ArgumentError),
    ("from_isl array '1A'", lambda: Program.from_isl(
        "p", arrays={"1A": ("float64", (4,))}, statements=[]), ArgumentError),
    ("from_isl statement without write", lambda: Program.from_isl(
        "p", arrays={"A": ("float64", (4,))}, statements=[dict(domain="{ S0[i] : i = 0 }")]),
     ArgumentError),
    ("from_isl two S0", lambda: _from_isl((4,), [_one("{ S0[i] : 0 <= i < 4 }"),
                                               _one("{ S0[i] : 0 <= i < 4 }")]),
     DuplicateNameError),
    ("from_isl unbounded", lambda: _from_isl((4,), [_one("{ S0[i] : i >= 0 }")]),
     RangeInferenceError),
    ("from_isl unbounded for some N", lambda: _from_isl(
        ("N",), [_one("[N] -> { S0[i] : i >= N }")]), RangeInferenceError),
]


@pytest.mark.parametrize("what,call,cls", API_MISTAKES, ids=[m[0] for m in API_MISTAKES])
def test_api_mistake_is_a_polycomp_error(what, call, cls):
    with pytest.raises(cls) as info:
        call()
    assert info.value.hint, f"{what}: no hint in {info.value}"
    assert str(info.value)  # renders (the location may hold any file name)


def test_unbounded_domain_names_the_iterator():
    with pytest.raises(RangeInferenceError, match=r"unbounded domain \(iterator j\)"):
        _from_isl((4,), [dict(domain="{ S0[i, j] : 0 <= i < 4 and j >= i }",
                              write="{ S0[i, j] -> A[0] }", reads=["{ S0[i, j] -> A[0] }"])])


def test_access_with_the_wrong_number_of_iterators():
    with pytest.raises(RankMismatchError, match="takes 1 iterator"):
        _from_isl((4,), [_one("{ S0[i, j] : 0 <= i < 4 and 0 <= j < 4 }")])


def test_bounded_parametric_domain_still_accepted():
    program = _from_isl(("N",), [dict(domain="[N] -> { S0[i] : 0 <= i < N }",
                                      write="{ S0[i] -> A[i] }", reads=["{ S0[i] -> A[i] }"])])
    assert program.params == ("N",)


@pytest.mark.needs_cc
def test_compiler_that_writes_no_library():
    with pytest.raises(CompilerError) as info:
        polycomp.compile(TC, sizes={"N": 8}, cc="true", cache=False)
    assert info.value.hint


# ----------------------------------------------------------------------------- huge arguments

@pytest.mark.needs_cc
def test_huge_broadcast_argument_is_refused_before_copying():
    k = polycomp.compile("def scale(float64(N) A, float64 s) -> (B) { B(i) = A(i) * s }")
    with pytest.raises(ArgumentError, match="more than this machine's memory") as info:
        k(np.broadcast_to(np.ones(1), (2**40,)), 2.0)
    assert info.value.hint


@pytest.mark.needs_cc
def test_buffer_limit_applies_to_copies_and_outputs(monkeypatch):
    import polycomp.memory as memory

    k = polycomp.compile("def scale(float64(N) A) -> (B) { B(i) = A(i) * 2 }")
    strided = np.arange(64.0)[::2]
    assert np.array_equal(k(strided), strided * 2)  # under the limit: copied and run
    monkeypatch.setattr(memory, "memory_limit", lambda: 100)
    with pytest.raises(ArgumentError, match="not C-contiguous"):
        k(strided)  # 256 bytes to copy
    with pytest.raises(ArgumentError, match="output or temporary"):
        k(np.ones(32))  # contiguous: no copy, but B needs 256 bytes


# ----------------------------------------------------------------------------- threads

@pytest.mark.parametrize("count", [100000, 10**20, 2**32 + 3, 2**31])
def test_absurd_thread_counts_are_refused(count):
    from polycomp.threads import get_max_threads

    before = get_max_threads()
    with pytest.raises(OptionError) as info:
        polycomp.set_num_threads(count)
    assert info.value.hint and get_max_threads() == before


def test_thread_count_bound_allows_oversubscription():
    from polycomp.threads import get_max_threads, max_threads

    assert max_threads() >= 64
    before = get_max_threads()
    polycomp.set_num_threads(max_threads())
    assert get_max_threads() == max_threads()
    polycomp.set_num_threads(before)


# ----------------------------------------------------------------------------- every dtype

NUMERIC = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float16", "float32", "float64"]


@pytest.mark.needs_cc
@pytest.mark.parametrize("dtype", NUMERIC)
def test_every_dtype_as_scalar_and_array(dtype):
    k = polycomp.compile(f"def f({dtype}(N) A, {dtype} s) -> (B) {{ B(i) = A(i) * s + s }}")
    rng = np.random.default_rng(1)
    A = rng.integers(0, 10, 16).astype(dtype)
    for s in (3, 0, 1):
        want = A * np.asarray(s, dtype) + np.asarray(s, dtype)
        got = k(A, s)
        assert got.dtype == np.dtype(dtype) and np.array_equal(got, want), (dtype, s, got, want)


@pytest.mark.needs_cc
def test_float16_scalar_is_rounded_like_numpy():
    k = polycomp.compile("def g(float(N) A, half s) -> (B) { B(i) = A(i) + s }")
    for s in (0.5, 0.1, 65504.0, 1e-7, -3.25):
        want = np.ones(3, np.float32) + np.float32(np.float16(s))
        assert np.array_equal(k(np.ones(3, np.float32), s), want), s


@pytest.mark.needs_cc
def test_bool_scalar_and_array():
    k = polycomp.compile("def f(bool(N) A, bool s) -> (B) { B(i) = A(i) && s }")
    A = np.array([True, False, True])
    assert np.array_equal(k(A, True), A) and not k(A, False).any()


# ----------------------------------------------------------------------------- division

@pytest.mark.parametrize("src,column", [
    ("def f(int32(N) A) -> (B) { B(i) = A(i) % 0 }", 42),
    ("def f(int32(N) A) -> (B) { B(i) = A(i) / (1 - 1) }", 43),
    ("def f(int64(N) A) -> (B) { B(i) = A(i) + 3 / 0 }", 46),
])
def test_tc_integer_division_by_literal_zero(src, column):
    with pytest.raises(IntegerDivisionError) as info:
        polycomp.compile(src)
    assert info.value.location.column == column and info.value.hint


@pytest.mark.parametrize("src", [
    "void k(int n, int A[n]) { for (int i = 0; i < n; i++) A[i] = A[i] % 0; }",
    "void k(int n, int A[n]) { for (int i = 0; i < n; i++) A[i] /= 0; }",
    "void k(int n, int A[n]) { for (int i = 0; i < n; i++) A[i] = A[i] / (2 - 2); }",
])
def test_c_integer_division_by_constant_zero(src):
    with pytest.raises(IntegerDivisionError) as info:
        polycomp.compile_loops(src, sizes={"n": 4})
    assert info.value.location is not None and info.value.location.line == 1


@pytest.mark.needs_cc
def test_float_division_by_zero_is_allowed():
    """A zero divisor, literal or +-0.0 at run time, gives IEEE inf, -inf and nan as numpy
    does: no compile-time error, no guard, no trap."""
    k = polycomp.compile("def f(float(N) A, float(N) D) -> (B, C) { B(i) = A(i) / 0\n"
                         " C(i) = A(i) / D(i) }")
    A = np.array([3.5, -2.0, 0.0, -0.0, np.nan, np.inf, -np.inf, 1.0], np.float32)
    D = np.array([0.0, 0.0, 0.0, -0.0, 0.0, -0.0, 0.0, -0.0], np.float32)
    B, C = k(A, D)
    with np.errstate(divide="ignore", invalid="ignore"):
        want_b, want_c = A / np.float32(0), A / D
    assert np.isinf(want_c[[0, 1, 5, 6, 7]]).all() and np.isnan(want_c[[2, 3, 4]]).all()
    for got, want in ((B, want_b), (C, want_c)):
        assert got.dtype == np.float32
        assert np.array_equal(got, want, equal_nan=True), (got, want)  # inf != -inf


# A zero divisor met at run time used to kill the process (SIGFPE): run in a child.
FAULTS = textwrap.dedent("""
    import numpy as np, polycomp
    tc = polycomp.compile("def f(int32(N) A, int32(N) D) -> (B, C) "
                          "{ B(i) = A(i) / D(i)\\n C(i) = A(i) % D(i) }")
    par = polycomp.compile("def g(int64(M,N) A, int64(M,N) D) -> (B) { B(i,j) = A(i,j) / D(i,j) }",
                           parallel_min_work=0)
    loops = polycomp.compile_loops(
        "void k(int n, int A[n], int D[n]) { for (int i = 0; i < n; i++) A[i] /= D[i]; }")
    A = np.array([7, -7, -2**31, 5], np.int32)
    big = np.ones((64, 64), np.int64)
    zero = big.copy(); zero[40, 3] = 0
    calls = [lambda: tc(A, np.array([1, 0, 1, 1], np.int32)),
             lambda: tc(A, np.array([1, 1, -1, 1], np.int32)),
             lambda: par(big, zero),
             lambda: loops(4, A.copy(), np.array([1, 1, 0, 1], np.int32))]
    for call in calls:
        try:
            call()
            print("returned")
        except polycomp.errors.IntegerDivisionError:
            print("IntegerDivisionError")
""")


@pytest.mark.needs_cc
def test_runtime_zero_divisor_raises_instead_of_trapping():
    done = subprocess.run([sys.executable, "-c", FAULTS], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["IntegerDivisionError"] * 4


INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


@pytest.mark.needs_cc
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_guarded_division_keeps_c_semantics(dtype):
    """Truncating / and % as C computes them, under every scheduler, bit for bit."""
    src = f"def f({dtype}(N) A, {dtype}(N) D) -> (Q, R) {{ Q(i) = A(i) / D(i)\n R(i) = A(i) % D(i) }}"
    info = np.iinfo(np.dtype(dtype))
    rng = np.random.default_rng(2)
    A = rng.integers(info.min, info.max, 256, dtype=dtype, endpoint=True)
    D = rng.integers(info.min, info.max, 256, dtype=dtype, endpoint=True)
    D[:8] = np.array([1, 2, 3, 7, 1, 2, 3, 7], dtype)
    if info.min < 0:
        D[8:16] = -np.array([1, 2, 3, 7, 2, 2, 3, 7], dtype)
        A[0] = info.min
    D[D == 0] = 1
    ok = ~((D == -1) & (A == info.min)) if info.min < 0 else np.ones(256, bool)
    A, D = A[ok], D[ok]
    # C: the quotient truncates towards zero, and a == (a / d) * d + a % d
    wide_a, wide_d = A.astype(object), D.astype(object)
    want_q = np.array([abs(a) // abs(d) * (1 if (a >= 0) == (d >= 0) else -1)
                       for a, d in zip(wide_a, wide_d)], dtype=object)
    want_r = wide_a - want_q * wide_d
    results = []
    for scheduler in ("none", "pluto", "isl"):
        q, r = polycomp.compile(src, scheduler=scheduler)(A, D)
        assert np.array_equal(q.astype(object), want_q) and np.array_equal(r.astype(object), want_r)
        results.append((q.tobytes(), r.tobytes()))
    assert len(set(results)) == 1
