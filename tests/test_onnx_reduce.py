"""The ONNX frontend's reductions and normalisations (frontend/onnx/ops/reduce.py) against
onnxruntime: Reduce* (axes as attribute and as input, keepdims, negative and empty axes,
noop_with_empty_axes, an axis of extent 0, integer types), ArgMax/ArgMin (ties,
select_last_index), Softmax/LogSoftmax/Hardmax (opset 11's 2-D coercion and opset 13),
LayerNormalization (with and without B, Mean/InvStdDev outputs), MeanVarianceNormalization,
the refusals, and a property test of ReduceSum/ReduceMax against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import onnxruntime as ort
from onnx import TensorProto, helper

import onnx_cases
from onnx_cases import make_model
import polycomp.onnx as pco
from polycomp.errors import UnsupportedError

compiled = pytest.mark.needs_cc


def check(nodes, inputs: dict[str, np.ndarray], outputs: list[str] | None = None,
          opset: int = 18, inits: dict[str, np.ndarray] | None = None) -> list[np.ndarray]:
    return onnx_cases.check(nodes, inputs, outputs, opset, inits)


def refused(nodes, inputs: dict[str, np.ndarray], outputs: list[str], opset: int,
            inits: dict[str, np.ndarray] | None = None, match: str = "") -> None:
    model = make_model(nodes if isinstance(nodes, list) else [nodes], inputs, outputs, opset,
                       inits)
    with pytest.raises(UnsupportedError, match=match):
        pco.InferenceSession(model.SerializeToString(), parallel=False)


RNG = np.random.default_rng(12)
X3 = RNG.standard_normal((2, 3, 4)).astype(np.float32)
POS3 = (np.abs(X3) + 0.25).astype(np.float32)  # for LogSum: a positive sum
REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]


# ----------------------------------------------------------------------------- Reduce*
@compiled
@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_axes_attribute_opset11(op):
    """Opset 11: axes an attribute (a negative one), keepdims=0."""
    check(helper.make_node(op, ["x"], ["y"], axes=[-2], keepdims=0), {"x": POS3}, opset=11)


@compiled
@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_axes_input_opset18(op):
    """Opset 18: axes a constant input (two axes, one negative), keepdims=1."""
    check(helper.make_node(op, ["x", "axes"], ["y"], keepdims=1), {"x": POS3},
          inits={"axes": np.array([0, -1], dtype=np.int64)})


@compiled
def test_reduce_sum_axes_input_opset13():
    check(helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0), {"x": X3}, opset=13,
          inits={"axes": np.array([2, 0], dtype=np.int64)})


@compiled
@pytest.mark.parametrize("op", ["ReduceMean", "ReduceLogSumExp"])
def test_reduce_empty_axes_means_all(op):
    """No axes input, or an empty one: every axis; keepdims=0 gives a scalar."""
    check(helper.make_node(op, ["x"], ["y"], keepdims=0), {"x": X3})
    check(helper.make_node(op, ["x", "axes"], ["y"]), {"x": X3},
          inits={"axes": np.array([], dtype=np.int64)})


@compiled
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceSumSquare"])
def test_reduce_noop_with_empty_axes(op):
    """noop_with_empty_axes=1 and no axes: reduce over no axis, as onnxruntime does."""
    got = check(helper.make_node(op, ["x"], ["y"], noop_with_empty_axes=1), {"x": X3})
    assert got[0].shape == X3.shape


@compiled
def test_reduce_axis_of_extent_zero_gives_the_identity():
    x = np.zeros((2, 0, 3), dtype=np.float32)
    got = check([helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=0),
                 helper.make_node("ReduceMax", ["x", "axes"], ["m"], keepdims=0),
                 helper.make_node("ReduceProd", ["x", "axes"], ["p"], keepdims=0),
                 helper.make_node("ReduceMean", ["x", "axes"], ["a"], keepdims=1),
                 helper.make_node("ReduceLogSumExp", ["x", "axes"], ["l"], keepdims=0)],
                {"x": x}, ["s", "m", "p", "a", "l"], inits={"axes": np.array([1], dtype=np.int64)})
    assert np.all(got[0] == 0) and np.all(got[1] == -np.inf) and np.all(got[2] == 1)
    assert np.all(got[3] == 0) and np.all(got[4] == -np.inf)  # onnxruntime's mean of nothing


@compiled
def test_reduce_unit_and_scalar_shapes():
    """Extent-1 dimensions (no loop of their own) and a rank-0 input."""
    x = RNG.standard_normal((1, 3, 1)).astype(np.float32)
    check([helper.make_node("ReduceMean", ["x"], ["m"], axes=[0, 1], keepdims=1),
           helper.make_node("ReduceL2", ["x"], ["l"], axes=[2], keepdims=0),
           helper.make_node("Softmax", ["x"], ["s"], axis=1)], {"x": x}, ["m", "l", "s"],
          opset=13)
    check(helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0),
          {"x": np.array(2.5, dtype=np.float32)})


@compiled
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_reduce_integers_bit_for_bit(dtype):
    x = RNG.integers(-50, 50, size=(3, 5, 2)).astype(dtype)
    nodes = [helper.make_node(op, ["x", "axes"], [op], keepdims=k)
             for op, k in (("ReduceSum", 0), ("ReduceMax", 1), ("ReduceMin", 0),
                           ("ReduceSumSquare", 1), ("ReduceL1", 0))]
    check(nodes, {"x": x}, [n.output[0] for n in nodes],
          inits={"axes": np.array([1], dtype=np.int64)})


@compiled
def test_reduce_prod_int64_and_max_all_axes():
    x = RNG.integers(-3, 4, size=(4, 3)).astype(np.int64)
    check([helper.make_node("ReduceProd", ["x"], ["p"], axes=[0], keepdims=0),
           helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0)], {"x": x}, ["p", "m"],
          opset=13)


def test_reduce_refusals():
    # axes a runtime input: the output's shape is unknown too (declared symbolically)
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, X3.shape),
                      helper.make_tensor_value_info("axes", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    # a small integer input that axes come from is compiled in, once per value
    session = pco.InferenceSession(model.SerializeToString(), parallel=False)
    reference = ort.InferenceSession(model.SerializeToString())
    for axes in ([1], [-1], [1]):
        feed = {"x": X3, "axes": np.array(axes, dtype=np.int64)}
        np.testing.assert_allclose(session.run(None, feed)[0], reference.run(None, feed)[0],
                                   rtol=1e-5, atol=1e-6)
    assert len(session._compiled) == 2
    # axes computed from a float tensor cannot be compiled in
    graph = helper.make_graph(
        [helper.make_node("Cast", ["f"], ["axes"], to=TensorProto.INT64), node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, X3.shape),
         helper.make_tensor_value_info("f", TensorProto.FLOAT, [100])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    session = pco.InferenceSession(model.SerializeToString(), parallel=False)
    with pytest.raises(UnsupportedError, match="known at compile time"):
        session.run(None, {"x": X3, "f": np.ones(100, dtype=np.float32)})
    refused(helper.make_node("ReduceL2", ["x"], ["y"], axes=[1]),
            {"x": np.ones((2, 3), dtype=np.int32)}, ["y"], 13, match="int32")
    refused(helper.make_node("ReduceLogSumExp", ["x"], ["y"], axes=[1]),
            {"x": np.ones((2, 3), dtype=np.int64)}, ["y"], 13, match="int64")


# ----------------------------------------------------------------------------- ArgMax/ArgMin
TIES = np.array([[1, 3, 3, 0], [2, 2, 2, 2], [-1, 5, 0, 5]], dtype=np.float32)


@compiled
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_extreme_ties(op, last):
    """Ties: the first index by default, the last with select_last_index=1."""
    check([helper.make_node(op, ["x"], ["a"], axis=1, keepdims=0, select_last_index=last),
           helper.make_node(op, ["x"], ["b"], axis=-2, keepdims=1, select_last_index=last)],
          {"x": TIES}, ["a", "b"], opset=13)


@compiled
def test_argmax_int32_three_dims():
    x = RNG.integers(-4, 4, size=(2, 5, 3)).astype(np.int32)
    check(helper.make_node("ArgMax", ["x"], ["y"], axis=1), {"x": x}, opset=13)
    check(helper.make_node("ArgMin", ["x"], ["y"], axis=-1, keepdims=0, select_last_index=1),
          {"x": x}, opset=13)


# ----------------------------------------------------------------------------- softmax family
@compiled
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_opset11_coerced_to_2d(op):
    """Opset 11: axis 1 of a 3-D input normalises over the last two axes together."""
    x = np.round(X3 * 2) if op == "Hardmax" else X3 * 4  # Hardmax: ties across rows
    check(helper.make_node(op, ["x"], ["y"]), {"x": x.astype(np.float32)}, opset=11)


@compiled
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_opset13_one_axis(op):
    x = np.round(X3 * 2) if op == "Hardmax" else X3 * 4
    check([helper.make_node(op, ["x"], ["a"]), helper.make_node(op, ["x"], ["b"], axis=1)],
          {"x": x.astype(np.float32)}, ["a", "b"], opset=13)


@compiled
def test_softmax_large_values_are_stable():
    x = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1000.0, -999.0]], dtype=np.float32)
    got = check([helper.make_node("Softmax", ["x"], ["s"], axis=1),
                 helper.make_node("LogSoftmax", ["x"], ["l"], axis=1)],
                {"x": x}, ["s", "l"], opset=13)
    assert np.all(np.isfinite(got[0])) and np.all(np.isfinite(got[1]))


# ----------------------------------------------------------------------------- normalisations
@compiled
def test_layer_norm_with_bias():
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    check(helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], epsilon=1e-5),
          {"x": x}, opset=17, inits={"g": RNG.standard_normal(16).astype(np.float32),
                                     "b": RNG.standard_normal(16).astype(np.float32)})


@compiled
def test_layer_norm_without_bias_with_statistics():
    """axis=1 of a 3-D input (two normalised axes); Mean and InvStdDev requested."""
    x = (RNG.standard_normal((2, 3, 5)) * 3 + 1).astype(np.float32)
    check(helper.make_node("LayerNormalization", ["x", "g"], ["y", "mean", "inv"], axis=1,
                           epsilon=1e-3), {"x": x}, ["y", "mean", "inv"], opset=17,
          inits={"g": RNG.standard_normal((3, 5)).astype(np.float32)})


@compiled
def test_layer_norm_only_inv_std_dev():
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    check(helper.make_node("LayerNormalization", ["x", "g", "b"], ["y", "", "inv"]), {"x": x},
          ["y", "inv"], opset=17, inits={"g": np.ones(8, np.float32),
                                         "b": np.zeros(8, np.float32)})


def test_layer_norm_refuses_stash_type_0():
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    refused(helper.make_node("LayerNormalization", ["x", "g"], ["y"], stash_type=0), {"x": x},
            ["y"], 17, inits={"g": np.ones(8, np.float32)}, match="stash_type")


@compiled
def test_mean_variance_normalization():
    # opset 9: onnx's strict shape inference rejects the function body of MVN-13
    x = (RNG.standard_normal((2, 3, 4, 5)) * 2 + 3).astype(np.float32)
    check(helper.make_node("MeanVarianceNormalization", ["x"], ["y"]), {"x": x}, opset=9)
    check(helper.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=[1, -1]), {"x": x},
          opset=9)


# ----------------------------------------------------------------------------- property
@st.composite
def reductions(draw):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    axes = draw(st.lists(st.integers(-rank, rank - 1), unique_by=lambda a: a % rank,
                         max_size=rank))
    return shape, axes, draw(st.booleans()), draw(st.sampled_from(["ReduceSum", "ReduceMax"])), \
        draw(st.sampled_from([np.float32, np.int32])), draw(st.integers(0, 2**31 - 1))


@compiled
@settings(max_examples=10, deadline=None)
@given(reductions())
def test_reduce_property_against_numpy(case):
    shape, axes, keepdims, op, dtype, seed = case
    x = np.random.default_rng(seed).integers(-9, 9, size=shape).astype(dtype)
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=int(keepdims))
    model = make_model([node], {"x": x}, ["y"], 18,
                       {"axes": np.array(axes, dtype=np.int64)})
    got = pco.InferenceSession(model.SerializeToString(), parallel=False).run(None, {"x": x})[0]
    fn = np.sum if op == "ReduceSum" else np.max
    want = fn(x, axis=tuple(axes) if axes else None, keepdims=keepdims).astype(dtype)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)  # small integers: exact in float32 too
