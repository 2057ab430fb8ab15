"""ONNX Pow of integer tensors: frontend/onnx/ops/elementwise.py lowers an integer power
to a Call codegen prints as a helper multiplying by squaring (codegen/cexpr._ipow_c),
and an integer base with a float exponent to double pow truncated. numpy, which onnx's
reference runs, is the oracle (it wraps on overflow as the C helper does)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper as h

from polycomp.onnx.backend import PolycompBackend

pytestmark = pytest.mark.needs_cc

N = 64
_REPS: dict[tuple[int, int], object] = {}


def rep(base: int, exponent: int):
    if (base, exponent) not in _REPS:
        graph = h.make_graph([h.make_node("Pow", ["x", "y"], ["z"])], "pow",
                             [h.make_tensor_value_info("x", base, [N]),
                              h.make_tensor_value_info("y", exponent, [N])],
                             [h.make_tensor_value_info("z", base, [N])])
        model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
        _REPS[(base, exponent)] = PolycompBackend.prepare(model, parallel=False)
    return _REPS[(base, exponent)]


@pytest.mark.parametrize("base", [T.INT32, T.INT64],  # what ONNX allows
                         ids=T.DataType.Name)
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_integer_power_wraps_like_numpy(base, seed):
    rng = np.random.default_rng(seed)
    dtype = onnx.helper.tensor_dtype_to_np_dtype(base)
    info = np.iinfo(dtype)
    x = rng.integers(max(info.min, -1000), min(info.max, 1000), N, endpoint=True).astype(dtype)
    x[:4] = [0, 1, info.max, info.min]
    e = rng.integers(0, 70, N).astype(np.int64)
    got, = rep(base, T.INT64).run([x, e])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(got, np.power(x, e.astype(dtype)))


def test_negative_exponent_truncates():
    x = np.array([1, -1, -1, 2, -3, 0] + [5] * (N - 6), np.int32)
    e = np.array([-3, -3, -2, -1, -2, 0] + [2] * (N - 6), np.int32)
    got, = rep(T.INT32, T.INT32).run([x, e])
    want = np.trunc(np.float64(x) ** e.astype(np.float64)).astype(np.int32)  # 1/b^n, truncated
    np.testing.assert_array_equal(got, want)


def test_integer_base_float_exponent_truncates():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 50, N).astype(np.int64)
    e = rng.uniform(-1, 3, N).astype(np.float32)
    got, = rep(T.INT64, T.FLOAT).run([x, e])
    with np.errstate(all="ignore"):
        want = np.power(x.astype(np.float64), e.astype(np.float64)).astype(np.int64)
    np.testing.assert_array_equal(got, want)
