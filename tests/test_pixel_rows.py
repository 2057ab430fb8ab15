"""A fusion group that works pixel by pixel sees its images as one row of pixels
(frontend/onnx/pixel_rows.py): which groups, and that the models still compute what
onnxruntime computes, with the session users run (2 threads, default options)."""

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import TensorProto as TP, helper as H, numpy_helper as NH

import polycomp.onnx as pco
from polycomp.islutil import pw_aff_value


def _model(h: int, w: int, kernel: int = 1, stride: int = 1, pads: int = 0,
           other: tuple[int, ...] | None = None, ci: int = 16, co: int = 24) -> onnx.ModelProto:
    """x -> 1x1 conv (ci -> ci) -> relu -> conv (ci -> co) + bias -> Add(other) -> relu;
    ``other`` a constant of that shape (None: a runtime residual of the output's shape)."""
    rng = np.random.default_rng(0)
    w0 = NH.from_array((rng.standard_normal((ci, ci, 1, 1)) * 0.2).astype(np.float32), "W0")
    w1 = NH.from_array((rng.standard_normal((co, ci, kernel, kernel)) * 0.2)
                       .astype(np.float32), "W")
    b = NH.from_array(rng.standard_normal(co).astype(np.float32), "B")
    oh, ow = (h + 2 * pads - kernel) // stride + 1, (w + 2 * pads - kernel) // stride + 1
    inits = [w0, w1, b]
    inputs = [H.make_tensor_value_info("x0", TP.FLOAT, [1, ci, h, w])]
    if other is None:
        inputs.append(H.make_tensor_value_info("r", TP.FLOAT, [1, co, oh, ow]))
    else:
        inits.append(NH.from_array(rng.standard_normal(other).astype(np.float32), "r"))
    nodes = [H.make_node("Conv", ["x0", "W0"], ["x1"], name="first"),
             H.make_node("Relu", ["x1"], ["x"], name="relu0"),
             H.make_node("Conv", ["x", "W", "B"], ["y"], name="second",
                         strides=[stride, stride], pads=[pads] * 4),
             H.make_node("Add", ["y", "r"], ["z"], name="residual"),
             H.make_node("Relu", ["z"], ["out"], name="relu1")]
    graph = H.make_graph(nodes, "pixel_rows", inputs,
                         [H.make_tensor_value_info("out", TP.FLOAT, [1, co, oh, ow])], inits)
    return H.make_model(graph, opset_imports=[H.make_opsetid("", 17)])


def _run(model: onnx.ModelProto):
    """The session's output beside onnxruntime's, and the second conv's group."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    data = model.SerializeToString()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # performance warnings are not the subject
        session = pco.InferenceSession(data, options, cache=False)
    rng = np.random.default_rng(1)
    feed = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
            .astype(np.float32) for i in model.graph.input}
    want = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"]).run(
        None, feed)[0]
    got = session.run(None, feed)[0]
    group = next(g for g in session.compiled().plan.groups
                 if any(n.name == "second" for n in g.nodes))
    return got, want, group


def _image_shape(group, value: str) -> tuple[int, ...]:
    """The shape the group's Program gives a value it reads (its logical shape: the
    blocked layout's view keeps it)."""
    array = next(a for a, v in group.inputs if v == value)
    return tuple(pw_aff_value(s, {}) for s in group.program.array(array).shape)


def test_a_pointwise_group_reads_its_images_as_one_row():
    got, want, group = _run(_model(7, 9))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert got.shape == (1, 24, 7, 9)
    assert _image_shape(group, "r") == (1, 24, 1, 63)
    shape = _image_shape(group, "x")
    assert shape[2:4] == (1, 63) or shape[-3:-1] == (1, 63), shape


@pytest.mark.parametrize("case", [
    dict(kernel=3, pads=1),  # a window reads its neighbours
    dict(stride=2),  # skips pixels
    dict(other=(1, 1, 7, 9)),  # an operand that varies over the pixels
    dict(other=(9,)),  # ... broadcast along the rows
])
def test_a_group_that_is_not_pixel_by_pixel_keeps_its_images(case):
    got, want, group = _run(_model(7, 9, **case))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    value = "x" if "other" in case else "r"
    shape = _image_shape(group, value)
    assert 1 not in shape[2:4] or shape[2:4] == (1, 1), shape


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=st.integers(2, 9), w=st.integers(1, 9),
       other=st.sampled_from([None, (1,), (24, 1, 1), (1, 24, 1, 1), (1, 1), (1, 1, 1, 1)]))
def test_pointwise_groups_match_onnxruntime(h, w, other):
    """Any image shape and operands broadcast over the pixels: flattened, same values."""
    got, want, group = _run(_model(h, w, other=other))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    if other is None:
        assert _image_shape(group, "r") == (1, 24, 1, h * w)
