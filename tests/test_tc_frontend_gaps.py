"""Two TC frontend gaps, closed (frontend/tc):

1. An untyped output or temporary takes its type from *all* its writes (sema.py
   ``infer_written_types``), so ``T(i) = 0`` followed by ``T(i) += A(i, k) * 0.5`` is
   float32, not an int32 that truncates the float sums; bool and number writes into one
   tensor are a TypeMismatchError.
2. ``min``/``max`` in ``where`` range bounds (typecheck.py ``bound``, lower.py ``bound``):
   clipped windows such as a padded convolution written without padding the input,
   and the non-convex forms (min in a lower bound, max in an upper bound).

The oracles are numpy computations of the same formulas.
"""

from __future__ import annotations

import islpy as isl
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import polycomp
from polycomp.errors import (
    NonAffineError,
    PolycompError,
    RangeInferenceError,
    TypeMismatchError,
    UnsupportedError,
)
from polycomp.frontend.tc import parse

needs_cc = pytest.mark.needs_cc


def dtypes(src: str, sizes: dict) -> dict[str, str]:
    program = parse(src).get(None).lower(sizes)
    return {a.name: a.dtype for a in program.arrays}


def expect_error(src: str, cls: type, line: int, sizes=None) -> PolycompError:
    """The error of ``src`` (raised by parse, or by lower with ``sizes``) is ``cls`` at
    ``line`` with a column, a caret excerpt and a hint."""
    with pytest.raises(PolycompError) as info:
        d = parse(src, file="gap.tc").get(None)
        if sizes is not None:
            d.lower(sizes if sizes else None)
    err = info.value
    assert type(err) is cls, f"expected {cls.__name__}, got {type(err).__name__}: {err}"
    loc = err.location
    assert loc is not None and loc.file == "gap.tc"
    assert loc.line == line, str(err)
    assert loc.column is not None and loc.column >= 1
    text = str(err)
    assert text.startswith(f"gap.tc:{line}:{loc.column}: error: ")
    assert any(ln.strip().startswith("^") for ln in text.splitlines()), text
    assert err.hint
    return err


# ============================================================================ 1. types

INIT_FORMS = {
    "assign 0": "T(i) = 0 where i in 0:N",
    "+=! 0": "T(i) +=! 0 where i in 0:N",
    "+=! of ints": "T(i) +=! C(i, k)",
}


@needs_cc
@pytest.mark.parametrize("form", list(INIT_FORMS))
def test_float_update_after_integer_init_is_not_truncated(form):
    src = f"""def f(float(N, K) A, int32(N, K) C) -> (O) {{
  {INIT_FORMS[form]}
  T(i) += A(i, k) * 0.5
  O(i) = T(i)
}}"""
    rng = np.random.default_rng(1)
    a = rng.uniform(0.0, 1.0, (7, 5)).astype(np.float32)
    c = rng.integers(-4, 5, (7, 5)).astype(np.int32)
    start = c.sum(axis=1) if form == "+=! of ints" else np.zeros(7)
    want = start + (a.astype(np.float64) * 0.5).sum(axis=1)
    assert dtypes(src, {"N": 7, "K": 5}) == {"A": "float32", "C": "int32", "O": "float32",
                                              "T": "float32"}
    got = polycomp.compile(src)(a, c)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@needs_cc
def test_untyped_output_written_twice_is_float():
    src = """def f(float(N, K) A) -> (T) {
  T(i) = 1 where i in 0:N
  T(i) += A(i, k) / 3
}"""
    a = np.random.default_rng(2).uniform(0.0, 1.0, (4, 6)).astype(np.float32)
    got = polycomp.compile(src)(a)
    np.testing.assert_allclose(got, 1 + (a.astype(np.float64) / 3).sum(axis=1), rtol=1e-5)


@needs_cc
def test_a_read_before_the_widening_write_sees_the_final_type():
    # U reads T before the statement that makes T float: U is float32 too, and the types
    # settle only after a second round of inference.
    src = """def f(float(N, K) A) -> (O) {
  T(i) = 0 where i in 0:N
  U(i) = T(i) + 1
  T(i) += A(i, k) * 0.25
  U(i) += T(i) * 2
  O(i) = U(i)
}"""
    assert dtypes(src, {"N": 3, "K": 4})["U"] == "float32"
    a = np.random.default_rng(3).uniform(0.0, 1.0, (3, 4)).astype(np.float32)
    got = polycomp.compile(src)(a)
    np.testing.assert_allclose(got, 1 + 2 * (a.astype(np.float64) * 0.25).sum(axis=1),
                               rtol=1e-5)


@needs_cc
def test_self_reads_widen_to_the_widest_write():
    src = """def f(float(N) A, double s) -> (T) {
  T(i) = 1 where i in 0:N
  T(i) = T(i) * 2
  T(i) = T(i) + s * A(i)
}"""
    assert dtypes(src, {"N": 5})["T"] == "float64"
    a = np.random.default_rng(4).uniform(0.0, 1.0, 5).astype(np.float32)
    got = polycomp.compile(src)(a, 0.1)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, 2 + 0.1 * a.astype(np.float64), rtol=1e-12)


# (types of the writes, the tensor's type) by the expression promotion rules
PROMOTIONS = [
    (["int32", "float32"], "float32"),
    (["float32", "int32"], "float32"),
    (["int8", "int16"], "int16"),
    (["float32", "float64"], "float64"),
    (["int64", "float32"], "float32"),
    (["uint8", "int32"], "int32"),
]


@pytest.mark.parametrize("types,want", PROMOTIONS, ids=["-".join(p[0]) for p in PROMOTIONS])
def test_written_types_promote(types, want):
    params = ", ".join(f"{t}(N) X{k}" for k, t in enumerate(types))
    body = "\n".join(f"  T(i) {'=' if k == 0 else '+='} X{k}(i)" for k in range(len(types)))
    src = f"def f({params}) -> (T) {{\n{body}\n}}"
    assert dtypes(src, {"N": 2})["T"] == want


@pytest.mark.parametrize("first,second,want", [
    ("0", "I(i)", "int8"),  # an integer literal adopts the other writes' type
    ("300", "I(i)", "int32"),  # ... unless it does not fit: then its own default type
    ("0.5", "I(i)", "float32"),  # a float literal next to integers makes float32
    ("0", "H(i)", "float16"),  # an integer literal adopts a float type
    ("0", "3000000000", "int64"),  # literals only: their default type
])
def test_literals_adopt_the_type_of_the_other_writes(first, second, want):
    src = f"""def f(int8(N) I, float16(N) H) -> (T) {{
  T(i) = {first} where i in 0:N
  T(i) += {second} where i in 0:N
}}"""
    assert dtypes(src, {"N": 3})["T"] == want


def test_a_single_write_keeps_its_value_type():
    src = "def f(int8(N) I) -> (T) { T(i) = I(i) + 1 }"
    assert dtypes(src, {"N": 3})["T"] == "int8"


def test_bool_then_number_is_a_type_error():
    err = expect_error("""def f(float(N) A) -> (O) {
  T(i) = A(i) > 0
  T(i) = A(i) * 2
  O(i) = T(i) ? 1.0 : 0.0
}""", TypeMismatchError, 3)
    assert "bool" in err.message and "line 2" in err.message
    assert err.location.column == 10


def test_number_then_bool_is_a_type_error():
    err = expect_error("""def f(float(N) A) -> (T) {
  T(i) = A(i)
  T(i) = A(i) > 0
}""", TypeMismatchError, 3)
    assert "line 2" in err.message


def test_literal_then_bool_is_a_type_error():
    err = expect_error("""def f(float(N) A) -> (T) {
  T(i) = 0 where i in 0:N
  T(i) = A(i) > 0
}""", TypeMismatchError, 2)
    assert "line 3" in err.message


@needs_cc
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(init=st.sampled_from(["0", "1", "-2"]), scale=st.sampled_from(["0.5", "0.125", "3.75"]),
       n=st.integers(1, 6), k=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_integer_init_then_float_reduction_matches_numpy(init, scale, n, k, seed):
    src = f"""def f(float(N, K) A) -> (O) {{
  T(i) = {init} where i in 0:N
  T(i) += A(i, k) * {scale}
  O(i) = T(i) * 2
}}"""
    a = np.random.default_rng(seed).uniform(-1.0, 1.0, (n, k)).astype(np.float32)
    want = 2 * (int(init) + (a.astype(np.float64) * float(scale)).sum(axis=1))
    np.testing.assert_allclose(polycomp.compile(src)(a), want, rtol=1e-5, atol=1e-5)


# ============================================================================ 2. min/max bounds

def conv1d_reference(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    """Zero-padded 1-d correlation: out[h] = sum_k xpad[h + k] * w[k]."""
    xp = np.pad(x.astype(np.float64), pad)
    out_len = len(xp) - len(w) + 1
    return np.array([xp[h:h + len(w)] @ w.astype(np.float64) for h in range(out_len)])


def conv2d_same_reference(i: np.ndarray, w: np.ndarray) -> np.ndarray:
    p = np.pad(i.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(p, (3, 3), axis=(2, 3))
    return np.einsum("nchwij,fcij->nfhw", win, w.astype(np.float64))


CONV_SAME = """def conv(float(N, C, H, W) I, float(F, C, 3, 3) Wt) -> (float(N, F, H, W) O) {
  O(n, f, h, w) +=! I(n, c, h + kh - 1, w + kw - 1) * Wt(f, c, kh, kw)
      where kh in max(0, 1 - h):min(3, H + 1 - h), kw in max(0, 1 - w):min(3, W + 1 - w)
}"""


@needs_cc
@pytest.mark.parametrize("scheduler", ["none", "isl", "pluto"])
@pytest.mark.parametrize("shape", [(1, 2, 5, 7), (2, 3, 1, 1), (1, 1, 2, 9), (1, 2, 3, 4)])
def test_padded_3x3_conv_with_clipped_windows(scheduler, shape):
    rng = np.random.default_rng(sum(shape))
    i = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((4, shape[1], 3, 3)).astype(np.float32)
    got = polycomp.compile(CONV_SAME, scheduler=scheduler)(i, w)
    np.testing.assert_allclose(got, conv2d_same_reference(i, w), rtol=1e-4, atol=1e-5)


@needs_cc
def test_clipped_conv_parametric_kernel_serves_several_sizes():
    kernel = polycomp.compile(CONV_SAME, scheduler="none", parametric=True)
    rng = np.random.default_rng(5)
    for shape in [(1, 1, 1, 3), (2, 2, 6, 5)]:
        i = rng.standard_normal(shape).astype(np.float32)
        w = rng.standard_normal((3, shape[1], 3, 3)).astype(np.float32)
        np.testing.assert_allclose(kernel(i, w), conv2d_same_reference(i, w), rtol=1e-4,
                                   atol=1e-5)


def test_max_lower_and_min_upper_bounds_are_the_conjunction():
    d = parse(CONV_SAME).get(None)
    program = d.lower({"N": 1, "C": 1, "H": 4, "W": 4, "F": 1})
    dom = program.statements[1].domain
    # every point of the domain, against the bounds evaluated in Python
    points = []
    dom.foreach_point(lambda p: points.append(tuple(
        p.get_coordinate_val(isl.dim_type.set, k).to_python() for k in range(7))))
    names = [dom.get_dim_name(isl.dim_type.set, k) for k in range(7)]
    want = {(n, f, h, w, c, kh, kw) for n in range(1) for f in range(1) for h in range(4)
            for w in range(4) for c in range(1)
            for kh in range(max(0, 1 - h), min(3, 4 + 1 - h))
            for kw in range(max(0, 1 - w), min(3, 4 + 1 - w))}
    order = [names.index(x) for x in ("n", "f", "h", "w", "c", "kh", "kw")]
    assert {tuple(p[k] for k in order) for p in points} == want
    assert "where clause" in d.explain_ranges({"N": 1, "C": 1, "H": 4, "W": 4, "F": 1})


@needs_cc
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=st.integers(1, 9), k=st.integers(1, 4), pad=st.integers(0, 5),
       scheduler=st.sampled_from(["none", "isl"]), seed=st.integers(0, 2**16))
def test_clipped_1d_conv_matches_numpy(h, k, pad, scheduler, seed):
    # pad >= k leaves windows at the edges with no point at all: those outputs stay 0
    out_len = h + 2 * pad - k + 1
    if out_len < 1:
        pad = k  # keep the output non-empty
        out_len = h + 2 * pad - k + 1
    src = f"""def conv1(float(H) X, float(K) Wt) -> (O) {{
  O(o) +=! X(o + j - {pad}) * Wt(j)
      where o in 0:H + {2 * pad} - K + 1, j in max(0, {pad} - o):min(K, H + {pad} - o)
}}"""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(h).astype(np.float32)
    w = rng.standard_normal(k).astype(np.float32)
    got = polycomp.compile(src, scheduler=scheduler)(x, w)
    assert got.shape == (out_len,)
    np.testing.assert_allclose(got, conv1d_reference(x, w, pad), rtol=1e-4, atol=1e-5)


NON_CONVEX = """def band(float(N, N) A) -> (float(N) O) {
  O(i) +=! A(i, j) where j in min(i, N - 1 - i):max(i + 1, N - i)
}"""


@needs_cc
@pytest.mark.parametrize("n", [1, 2, 5, 8])
@pytest.mark.parametrize("scheduler", ["none", "isl"])
def test_min_lower_bound_and_max_upper_bound_give_a_union(n, scheduler):
    a = np.random.default_rng(n).standard_normal((n, n)).astype(np.float32)
    want = np.array([a[i, min(i, n - 1 - i):max(i + 1, n - i)].astype(np.float64).sum()
                     for i in range(n)])
    got = polycomp.compile(NON_CONVEX, scheduler=scheduler)(a)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@needs_cc
def test_non_convex_bounds_in_parametric_mode():
    kernel = polycomp.compile(NON_CONVEX, scheduler="none", parametric=True)
    for n in (3, 6):
        a = np.random.default_rng(n).standard_normal((n, n)).astype(np.float32)
        want = [a[i, min(i, n - 1 - i):max(i + 1, n - i)].astype(np.float64).sum()
                for i in range(n)]
        np.testing.assert_allclose(kernel(a), want, rtol=1e-5, atol=1e-5)


@needs_cc
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 9), a=st.integers(-3, 3), b=st.integers(0, 4), c=st.integers(1, 4),
       seed=st.integers(0, 2**16))
def test_nested_min_max_bounds_match_numpy(n, a, b, c, seed):
    src = f"""def f(float(N, N) A) -> (float(N) O) {{
  O(i) +=! A(i, j) * 2
      where j in max(0, max(i + {a}, N - {b} - i)):min(N, min(i + {c}, 2 * i + 1) + 1)
}}"""
    x = np.random.default_rng(seed).standard_normal((n, n)).astype(np.float32)
    want = np.zeros(n)
    for i in range(n):
        lo, hi = max(0, max(i + a, n - b - i)), min(n, min(i + c, 2 * i + 1) + 1)
        want[i] = 2 * x[i, lo:hi].astype(np.float64).sum() if lo < hi else 0.0
    np.testing.assert_allclose(polycomp.compile(src)(x), want, rtol=1e-5, atol=1e-5)


def test_min_in_a_tensor_index_is_an_error():
    err = expect_error("""def f(float(N) A) -> (B) {
  B(i) = A(min(i, 3))
}""", NonAffineError, 2)
    assert "where-range bounds" in err.hint
    assert err.location.column == 12


def test_min_with_three_arguments_is_an_error():
    expect_error("""def f(float(N) A) -> (float(N) B) {
  B(i) +=! A(k) where k in 0:min(i, 3, N)
}""", TypeMismatchError, 2)


def test_min_of_a_product_of_indices_is_an_error():
    expect_error("""def f(float(N, N) A) -> (float(N) B) {
  B(i) +=! A(i, k) where k in 0:min(i * i, N)
}""", NonAffineError, 2)


def test_min_reading_a_tensor_is_an_error():
    expect_error("""def f(float(N, N) A, int32(N) L) -> (float(N) B) {
  B(i) +=! A(i, k) where k in 0:min(L(i), N)
}""", NonAffineError, 2)


def test_min_referring_to_its_own_index_is_an_error():
    expect_error("""def f(float(N, N) A) -> (float(N) B) {
  B(i) +=! A(i, k) where k in max(0, k - 1):N
}""", RangeInferenceError, 2)


def test_size_times_min_needs_sizes():
    src = """def f(float(N, N) A, int32 S) -> (float(N) B) {
  B(i) +=! A(i, k) where k in 0:min(N, S * max(i, 1))
}"""
    expect_error(src, UnsupportedError, 2, sizes={})
    program = parse(src).get(None).lower({"N": 4, "S": 2})  # a constant factor once specialised
    assert program.statements[1].domain.is_bounded()


def test_dividing_by_a_min_is_an_error_with_the_clause_location():
    err = expect_error("""def f(float(N, N) A) -> (float(N) B) {
  B(i) +=! A(i, k) where k in 0:min(N, i / max(1, 2) + 1)
}""", NonAffineError, 2, sizes={"N": 4})
    assert err.location.column == 26  # the where clause
