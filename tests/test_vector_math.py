"""Vector math (codegen/openmp.py, polycomp/build.py): simd loops that call exp, log, tanh,
erf, ... use glibc's libmvec where the system has it. Its error bound is what we state:
at most 4 ulp from the correctly rounded value over the ranges below (float32 and
float64), checked here against numpy in float64/longdouble."""

from __future__ import annotations

import numpy as np
import pytest

import polycomp
from polycomp.build import libmvec_functions

pytestmark = pytest.mark.needs_cc

CASES = {  # TC function -> (numpy reference, input range)
    "exp": (np.exp, (-80.0, 80.0)),
    "log": (np.log, (1e-30, 1e30)),
    "tanh": (np.tanh, (-20.0, 20.0)),
    "sin": (np.sin, (-100.0, 100.0)),
    "cos": (np.cos, (-100.0, 100.0)),
}


def ulps(got: np.ndarray, want: np.ndarray, dtype) -> float:
    spacing = np.spacing(np.abs(want).astype(dtype)).astype(np.float64)
    return float(np.max(np.abs(got.astype(np.float64) - want) / spacing))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("func", sorted(CASES))
def test_vector_math_stays_within_4_ulp(func: str, dtype: str):
    reference, (lo, hi) = CASES[func]
    tc_type = "float" if dtype == "float32" else "double"
    kernel = polycomp.compile(f"def f({tc_type}(N) X) -> (Y) {{ Y(i) = {func}(X(i)) }}")
    rng = np.random.default_rng(sum(map(ord, func + dtype)))
    if func == "log":
        x = np.exp(rng.uniform(np.log(lo), np.log(hi), 20000)).astype(dtype)
    else:
        x = rng.uniform(lo, hi, 20000).astype(dtype)
    got = kernel(x)
    want = reference(x.astype(np.longdouble)).astype(np.float64)
    assert ulps(got, want, dtype) <= 4.0
    name = {"float32": f"{func}f", "float64": func}[dtype]
    if name in libmvec_functions():
        assert f"#ifdef POLYCOMP_MVEC_{name}" in kernel.c_source


def test_exact_fp_keeps_the_scalar_functions():
    kernel = polycomp.compile("def f(float(N) X) -> (Y) { Y(i) = exp(X(i)) }", exact_fp=True)
    kernel(np.ones(64, np.float32))
    assert "POLYCOMP_MVEC" not in kernel.c_source
