"""The ONNX frontend's data-movement operators (frontend/onnx/ops/shape.py) against
onnxruntime: Transpose, Concat, Split (attribute, input, num_outputs, uneven), Slice
(attributes, inputs, negative axes and steps, clamping), Gather and GatherElements
(constant and runtime indices, negative indices, an out-of-range runtime index), Pad
(constant / reflect / edge / wrap, cropping, axes), Tile, Expand, Resize (nearest and
linear in each coordinate mode, affine and table-driven source indices),
ConstantOfShape and Range left unfolded, DepthToSpace, SpaceToDepth; the refusals; and a
property test of Slice against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper, numpy_helper

from onnx_cases import check, make_model
import polycomp.onnx as pco
from polycomp.errors import PolycompError, UnsupportedError
from polycomp.frontend.onnx import graph as onnx_graph

pytestmark = pytest.mark.needs_cc
RNG = np.random.default_rng(7)


def rand(*shape: int, dtype=np.float32) -> np.ndarray:
    if np.issubdtype(dtype, np.integer):
        return RNG.integers(-50, 50, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def node(op: str, inputs: list[str], outputs: list[str] | None = None, **attrs):
    return helper.make_node(op, inputs, outputs or ["y"], name=op.lower(), **attrs)


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


# ----------------------------------------------------------------------------- layout

@pytest.mark.parametrize("perm", [[2, 0, 1], None])
def test_transpose(perm):
    attrs = {} if perm is None else {"perm": perm}
    check(node("Transpose", ["x"], **attrs), {"x": rand(2, 3, 4)})


def test_transpose_and_slice_views_feed_a_statement_of_the_group():
    # the views are read in place by the Add and Relu of their group, then exported
    nodes = [node("Relu", ["x"], ["r"]), node("Transpose", ["r"], ["t"], perm=[1, 0]),
             node("Slice", ["t", "s", "e", "a", "st"], ["sl"]),
             node("Add", ["sl", "b"], ["y"])]
    check(nodes, {"x": rand(5, 4), "b": rand(2, 5)},
          inits={"s": i64(-1), "e": i64(-100), "a": i64(0), "st": i64(-2)})


def test_concat_negative_axis_with_a_constant():
    check(node("Concat", ["x", "c", "z"], axis=-1),
          {"x": rand(2, 3, 1), "z": rand(2, 3, 2)}, inits={"c": rand(2, 3, 3)})


def test_concat_int_axis0():
    check(node("Concat", ["x", "z"], axis=0),
          {"x": rand(1, 3, dtype=np.int32), "z": rand(2, 3, dtype=np.int32)})


def test_split_attribute_uneven():
    check(node("Split", ["x"], ["a", "b"], axis=1, split=[1, 3]), {"x": rand(2, 4)}, opset=11)


def test_split_input_negative_axis():
    check(node("Split", ["x", "s"], ["a", "b", "c"], axis=-1), {"x": rand(3, 6)}, opset=13,
          inits={"s": i64(2, 1, 3)})


def test_split_num_outputs_uneven_last_chunk():
    check(node("Split", ["x"], ["a", "b", "c"], axis=0, num_outputs=3), {"x": rand(7, 2)},
          opset=18)


def test_split_equal_default():
    check(node("Split", ["x"], ["a", "b"]), {"x": rand(4, 3, dtype=np.int64)}, opset=13)


def test_slice_opset1_attributes():
    check(node("Slice", ["x"], starts=[1, -3], ends=[3, 100], axes=[0, 1]),
          {"x": rand(4, 5)}, opset=9)


def test_slice_negative_steps_and_clamping():
    # starts/ends far outside the extent are clamped like numpy; negative steps walk back
    check(node("Slice", ["x", "s", "e", "a", "st"]), {"x": rand(4, 5, 6)},
          inits={"s": i64(100, -1, 1), "e": i64(-100, -7, 2**62),
                 "a": i64(0, -2, 2), "st": i64(-1, -2, 2)})


def test_slice_empty_result_and_default_axes():
    check([node("Slice", ["x", "s", "e"], ["y"])], {"x": rand(3, 4)},
          inits={"s": i64(1, 3), "e": i64(3, 3)})


# ----------------------------------------------------------------------------- gathers

def test_gather_constant_negative_scalar_index():
    check(node("Gather", ["x", "i"], axis=1), {"x": rand(2, 5, 3)},
          inits={"i": np.array(-2, dtype=np.int64)})


def test_gather_constant_index_table():
    check(node("Gather", ["x", "i"], axis=-1), {"x": rand(2, 5)},
          inits={"i": np.array([[4, -1], [0, 0], [-5, 2]], dtype=np.int64)})


def test_gather_constant_strided_indices_are_a_view():
    check([node("Gather", ["x", "i"], ["g"], axis=0), node("Neg", ["g"])], {"x": rand(6, 3)},
          inits={"i": i64(5, 3, 1)})


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_gather_runtime_indices(dtype):
    idx = np.array([[0, -1, 2], [-3, 1, 1]], dtype=dtype)
    check(node("Gather", ["x", "i"], axis=1), {"x": rand(2, 3, 4), "i": idx})


def test_gather_runtime_index_out_of_range_is_an_error():
    model = make_model([node("Gather", ["x", "i"], axis=0)],
                       {"x": rand(4, 2), "i": i64(0, 1)}, ["y"], 17)
    sess = pco.InferenceSession(model.SerializeToString(), parallel=False)
    x = rand(4, 2)
    np.testing.assert_array_equal(sess.run(None, {"x": x, "i": i64(3, -4)})[0], x[[3, 0]])
    for bad in (i64(1, 4), i64(-5, 0)):
        with pytest.raises(PolycompError):
            sess.run(None, {"x": x, "i": bad})


def test_gather_elements_runtime_negative_axis():
    idx = np.array([[0, -1], [2, 1], [-3, 0]], dtype=np.int64)
    check(node("GatherElements", ["x", "i"], axis=-1), {"x": rand(3, 3), "i": idx})


def test_gather_elements_constant_indices():
    check(node("GatherElements", ["x", "i"], axis=0), {"x": rand(3, 2, dtype=np.int32)},
          inits={"i": np.array([[2, 0], [-1, 1]], dtype=np.int64)})


# ----------------------------------------------------------------------------- Pad

def test_pad_constant_value_and_crop():
    # a negative pad crops; the border gets constant_value
    check(node("Pad", ["x", "p", "v"], mode="constant"), {"x": rand(3, 4)}, opset=11,
          inits={"p": i64(1, -1, 2, 3), "v": np.array(1.5, dtype=np.float32)})


def test_pad_attribute_opset2():
    check(node("Pad", ["x"], pads=[0, 1, 1, 0, 2, 0], value=-3.0), {"x": rand(2, 2, 3)},
          opset=10)


@pytest.mark.parametrize("mode,opset", [("reflect", 13), ("edge", 13), ("wrap", 19)])
def test_pad_index_modes(mode, opset):
    check(node("Pad", ["x", "p"], mode=mode), {"x": rand(2, 3, 4)}, opset=opset,
          inits={"p": i64(0, 2, 1, 0, 1, 3)})


def test_pad_axes_input_runtime_value():
    # opset 18 axes (negative), a constant_value that is a graph input
    check(node("Pad", ["x", "p", "v", "a"]), {"x": rand(2, 3, dtype=np.int32),
                                             "v": np.array(7, dtype=np.int32)},
          opset=18, inits={"p": i64(2, 1), "a": i64(-1)})


def test_pad_edge_many_pieces_uses_tables():
    # 4 padded axes with 3 pieces each: past MAX_PAD_STATEMENTS, one table-driven statement
    check(node("Pad", ["x", "p"], mode="edge"), {"x": rand(2, 2, 2, 2)},
          inits={"p": i64(1, 1, 1, 1, 1, 1, 1, 1)})


# ----------------------------------------------------------------------------- broadcast

def test_tile():
    check(node("Tile", ["x", "r"]), {"x": rand(2, 1, 3)}, inits={"r": i64(2, 3, 1)})


def test_expand_both_ways():
    check(node("Expand", ["x", "s"]), {"x": rand(3, 1)}, inits={"s": i64(2, 1, 4)})


def test_expand_smaller_shape():
    check(node("Expand", ["x", "s"]), {"x": rand(2, 1, 3, dtype=np.int64)},
          inits={"s": i64(4, 1)})


# ----------------------------------------------------------------------------- fills

@pytest.fixture
def no_folding(monkeypatch):
    """Keep constant nodes as nodes, as graph.py does for outputs past FOLD_LIMIT."""
    monkeypatch.setattr(onnx_graph, "FOLD_LIMIT", 0)


def test_constant_of_shape_unfolded(no_folding):
    value = numpy_helper.from_array(np.array([3], dtype=np.int32), "value")
    check([node("ConstantOfShape", ["s"], ["c"], value=value), node("Add", ["c", "x"])],
          {"x": rand(2, 3, dtype=np.int32)}, inits={"s": i64(2, 3)})


@pytest.mark.parametrize("dtype,args", [(np.float32, (1.5, 4.0, 0.5)),
                                        (np.int32, (10, -2, -3))])
def test_range_unfolded(no_folding, dtype, args):
    inits = {k: np.array(v, dtype=dtype) for k, v in zip("sld", args)}
    check([node("Range", ["s", "l", "d"], ["r"]), node("Add", ["r", "x"])],
          {"x": np.zeros(1, dtype=dtype)}, inits=inits)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space(mode):
    check(node("DepthToSpace", ["x"], blocksize=2, mode=mode), {"x": rand(1, 8, 2, 3)})


def test_space_to_depth():
    check(node("SpaceToDepth", ["x"], blocksize=2), {"x": rand(2, 3, 4, 2)})


# ----------------------------------------------------------------------------- Resize

def resize(inputs: list[str], **attrs):
    return node("Resize", inputs, **attrs)


NO_ROI = np.zeros(0, dtype=np.float32)


@pytest.mark.parametrize("attrs", [
    {},  # half_pixel, round_prefer_floor: x2 is an affine floordiv
    {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
    {"coordinate_transformation_mode": "align_corners", "nearest_mode": "ceil"},
])
def test_resize_nearest_x2(attrs):
    check(resize(["x", "", "s"], mode="nearest", **attrs), {"x": rand(1, 2, 3, 4)}, opset=13,
          inits={"s": np.array([1, 1, 2, 2], dtype=np.float32)})


@pytest.mark.parametrize("nearest_mode,ctm", [("round_prefer_ceil", "half_pixel"),
                                              ("round_prefer_floor", "pytorch_half_pixel")])
def test_resize_nearest_sizes_non_integer(nearest_mode, ctm):
    # 3 -> 7 and 5 -> 3: the source indices come from a table
    check(resize(["x", "", "", "z"], mode="nearest", nearest_mode=nearest_mode,
                 coordinate_transformation_mode=ctm), {"x": rand(2, 3, 5, dtype=np.int32)},
          opset=13, inits={"z": i64(2, 7, 3)})


@pytest.mark.parametrize("ctm", ["half_pixel", "align_corners", "asymmetric",
                                 "pytorch_half_pixel"])
def test_resize_linear_bilinear(ctm):
    check(resize(["x", "roi", "s"], mode="linear", coordinate_transformation_mode=ctm),
          {"x": rand(1, 2, 3, 4)}, opset=11,
          inits={"roi": NO_ROI, "s": np.array([1, 1, 2, 0.5], dtype=np.float32)})


def test_resize_linear_trilinear_sizes_axes():
    check(resize(["x", "", "", "z"], mode="linear", axes=[-3, -2, -1]),
          {"x": rand(1, 1, 2, 3, 4)}, opset=18, inits={"z": i64(4, 5, 3)})


def test_resize_opset10_nearest():
    check(resize(["x", "s"], mode="nearest"), {"x": rand(1, 1, 3, 4)}, opset=10,
          inits={"s": np.array([1, 1, 2, 1.5], dtype=np.float32)})


# ----------------------------------------------------------------------------- refusals

@pytest.mark.parametrize("nodes,inputs,opset,inits,what", [
    (resize(["x", "", "s"], mode="cubic"), {"x": rand(1, 1, 2, 2)}, 13,
     {"s": np.array([1, 1, 2, 2], dtype=np.float32)}, "cubic"),
    (resize(["x", "", "s"], mode="linear", antialias=1), {"x": rand(1, 1, 4, 4)}, 18,
     {"s": np.array([1, 1, 0.5, 0.5], dtype=np.float32)}, "antialias"),
    (resize(["x", "roi", "s"], mode="linear",
            coordinate_transformation_mode="tf_crop_and_resize"), {"x": rand(1, 1, 2, 2)}, 13,
     {"roi": np.array([0, 0, 0, 0, 1, 1, 1, 1], dtype=np.float32),
      "s": np.array([1, 1, 2, 2], dtype=np.float32)}, "tf_crop_and_resize"),
    (node("Pad", ["x", "p"], mode="reflect"), {"x": rand(3, 4)}, 13,
     {"p": i64(0, -1, 0, 1)}, "negative pads"),
])
def test_refused(nodes, inputs, opset, inits, what):
    model = make_model([nodes], inputs, ["y"], opset, inits)
    with pytest.raises(UnsupportedError, match=what):
        pco.InferenceSession(model.SerializeToString(), parallel=False).run(None, inputs)


# ----------------------------------------------------------------------------- property

@st.composite
def slices(draw):
    shape = draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))
    axes = draw(st.permutations(range(len(shape))).map(lambda p: p[:len(shape)]))
    n = draw(st.integers(1, len(shape)))
    specs = []
    for a in axes[:n]:
        bound = shape[a] + 3
        step = draw(st.sampled_from([-3, -2, -1, 1, 2, 3]))
        specs.append((draw(st.integers(-bound, bound)), draw(st.integers(-bound, bound)),
                      a - len(shape) if draw(st.booleans()) else a, step))
    return shape, specs


def onnx_slice(n: int, start: int, end: int, step: int) -> slice:
    """The Python slice selecting what ONNX's Slice selects (its spec's clamping: a start
    is clamped into [0, n] for positive steps and [0, n-1] for negative ones, an end into
    [0, n] and [-1, n-1]; -1 then means "past element 0")."""
    start, end = start + n if start < 0 else start, end + n if end < 0 else end
    if step > 0:
        return slice(min(max(start, 0), n), min(max(end, 0), n), step)
    end = min(max(end, -1), n - 1)
    return slice(min(max(start, 0), n - 1), None if end < 0 else end, step)


@settings(max_examples=10, deadline=None)
@given(slices())
def test_slice_matches_numpy(case):
    shape, specs = case
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    starts, ends, axes, steps = (i64(*v) for v in zip(*specs))
    index = [slice(None)] * len(shape)
    for s, e, a, st_ in specs:
        index[a] = onnx_slice(shape[a], s, e, st_)
    got = check(node("Slice", ["x", "s", "e", "a", "st"]), {"x": x}, opset=13,
                inits={"s": starts, "e": ends, "a": axes, "st": steps})[0]
    np.testing.assert_array_equal(got, x[tuple(index)])
