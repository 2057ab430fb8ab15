"""The ONNX frontend's compute-heavy operators (frontend/onnx/ops/nn.py) and the
Conv + BatchNormalization folding (frontend/onnx/rewrite.py), against onnxruntime.

Each test builds a small model with onnx.helper (output shapes from onnx's shape
inference), runs it in onnxruntime and in polycomp.onnx, and compares every output
(floats to rtol 1e-4, integers bit for bit). Plus: refusals name the node, a property
test of Conv over random windows, and the schedule of a 3x3 convolution (a simd loop
innermost in its main nest).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper

from onnx_cases import assert_outputs_match, other_variants

import polycomp.onnx as pco
from polycomp.codegen import vector_tile as VT
from polycomp.errors import UnsupportedError
from polycomp.frontend.onnx import build_plan, load_model, specialise
from polycomp.frontend.onnx.rewrite import fold_batchnorm
from polycomp.scheduler import cache_model as CM

pytestmark = pytest.mark.needs_cc

F32 = TensorProto.FLOAT
ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
        np.dtype(np.int32): TensorProto.INT32, np.dtype(np.int8): TensorProto.INT8,
        np.dtype(np.int64): TensorProto.INT64}


# ----------------------------------------------------------------------------- helpers

def make_model(nodes, feeds: dict[str, np.ndarray], inits: dict[str, np.ndarray] | None = None,
               outputs: list[str] | None = None, opset: int = 17):
    """A model of ``nodes`` with runtime inputs shaped like ``feeds``; output types from
    onnx's shape inference."""
    outputs = outputs or [nodes[-1].output[0]]
    ins = [helper.make_tensor_value_info(k, ELEM[v.dtype], list(v.shape)) for k, v in feeds.items()]
    inits_ = [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()]
    opsets = [helper.make_opsetid("", opset)]
    probe = helper.make_model(helper.make_graph(
        nodes, "g", ins, [helper.make_empty_tensor_value_info(o) for o in outputs], inits_),
        opset_imports=opsets)
    inferred = onnx.shape_inference.infer_shapes(probe, strict_mode=True)
    infos = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    model = helper.make_model(helper.make_graph(nodes, "g", ins, [infos[o] for o in outputs],
                                                inits_), opset_imports=opsets)
    onnx.checker.check_model(model, full_check=True)
    return model


def reference(model, feeds):
    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)


def check(model, feeds, rtol=1e-4, atol=1e-5, **options):
    """polycomp.onnx and onnxruntime agree on every output; the polycomp session. Without
    options, the default code and the kind of code (serial or parallel) it is not are
    both checked (onnx_cases.other_variants)."""
    want = reference(model, feeds)
    names = [o.name for o in model.graph.output]
    data = model.SerializeToString()
    session = pco.InferenceSession(data, **options)
    assert_outputs_match(names, want, session.run(None, feeds),
                         f"options {options}" if options else "default options", rtol, atol)
    if not options:
        for other in other_variants(session, feeds):
            got = pco.InferenceSession(data, **other).run(None, feeds)
            assert_outputs_match(names, want, got, f"options {other}", rtol, atol)
    return session


def rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def node(op, inputs, outputs, name=None, **attrs):
    return helper.make_node(op, inputs, outputs, name=name or op.lower(), **attrs)


# ----------------------------------------------------------------------------- Conv

CONV_CASES = {
    # name: (x shape, w shape, bias?, attrs)
    "3x3-pad1-bias": ((2, 3, 7, 7), (4, 3, 3, 3), True, dict(pads=[1, 1, 1, 1])),
    "stride2-asym-pads": ((1, 3, 9, 8), (5, 3, 3, 2), True,
                          dict(strides=[2, 2], pads=[0, 1, 2, 0], kernel_shape=[3, 2])),
    "dilation2": ((1, 2, 9, 9), (3, 2, 3, 3), False, dict(dilations=[2, 2], pads=[2, 1, 0, 2])),
    "grouped": ((2, 4, 6, 6), (6, 2, 3, 3), True, dict(group=2, pads=[1, 1, 1, 1])),
    "depthwise": ((1, 4, 7, 7), (4, 1, 3, 3), True, dict(group=4, strides=[2, 2],
                                                         pads=[1, 1, 1, 1])),
    "depthwise-x2": ((1, 3, 6, 6), (6, 1, 3, 3), False, dict(group=3, pads=[1, 0, 1, 0])),
    "same-upper-s2": ((1, 2, 8, 7), (3, 2, 3, 4), True, dict(auto_pad="SAME_UPPER",
                                                             strides=[2, 2])),
    "same-lower": ((1, 2, 6, 6), (3, 2, 4, 2), False, dict(auto_pad="SAME_LOWER")),
    "valid": ((1, 2, 6, 5), (2, 2, 3, 3), False, dict(auto_pad="VALID", strides=[1, 2])),
    "1x1": ((2, 8, 5, 5), (8, 8, 1, 1), True, {}),
    "1d": ((2, 3, 9), (4, 3, 3), True, dict(strides=[2], pads=[1, 2], dilations=[2])),
    "3d": ((1, 2, 4, 5, 4), (3, 2, 2, 3, 2), True, dict(pads=[1, 0, 1, 0, 1, 1])),
    # the random windows' find: gcc 12 lost the padded copy's middle rows
    "pads-1011": ((1, 1, 3, 2), (2, 1, 2, 2), True, dict(pads=[1, 0, 1, 1])),
}


@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv_matches_onnxruntime(case):
    xs, ws, with_bias, attrs = CONV_CASES[case]
    rng = np.random.default_rng(len(case))
    inits = {"w": rand(rng, *ws)}
    if with_bias:
        inits["b"] = rand(rng, ws[0])
    model = make_model([node("Conv", ["x", "w"] + (["b"] if with_bias else []), ["y"], **attrs)],
                       {"x": rand(rng, *xs)}, inits)
    check(model, {"x": rand(rng, *xs)})


def test_conv_with_runtime_weights_and_a_following_relu():
    rng = np.random.default_rng(1)
    feeds = {"x": rand(rng, 1, 3, 6, 6), "w": rand(rng, 4, 3, 3, 3), "b": rand(rng, 4)}
    model = make_model([node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                        node("Relu", ["c"], ["y"])], feeds)
    check(model, feeds)


@settings(max_examples=8, deadline=None)
@given(n=st.integers(1, 2), groups=st.sampled_from([1, 1, 2]), cg=st.integers(1, 3),
       mg=st.integers(1, 3), size=st.integers(1, 8), k=st.integers(1, 3),
       stride=st.integers(1, 3), dilation=st.integers(1, 2),
       pads=st.tuples(*[st.integers(0, 2)] * 4), seed=st.integers(0, 2 ** 16))
def test_conv_property_random_windows(n, groups, cg, mg, size, k, stride, dilation, pads, seed):
    span = (k - 1) * dilation + 1
    h, w = size + 1, size  # not square
    pads = [min(p, span - 1) for p in pads]  # onnxruntime wants pads below the window
    if h + pads[0] + pads[2] < span or w + pads[1] + pads[3] < span:
        return
    rng = np.random.default_rng(seed)
    x = rand(rng, n, cg * groups, h, w)
    inits = {"w": rand(rng, mg * groups, cg, k, k), "b": rand(rng, mg * groups)}
    model = make_model([node("Conv", ["x", "w", "b"], ["y"], group=groups, strides=[stride] * 2,
                             dilations=[dilation] * 2, pads=list(pads))], {"x": x}, inits)
    check(model, {"x": x})


# ----------------------------------------------------------------------------- ConvTranspose

CONV_T_CASES = {
    "s2-outpad-pads": ((1, 3, 4, 4), (3, 2, 3, 3), True,
                       dict(strides=[2, 2], output_padding=[1, 1], pads=[1, 0, 0, 1])),
    "grouped-dilated": ((2, 4, 3, 4), (4, 3, 2, 3), True, dict(group=2, dilations=[2, 1],
                                                               strides=[1, 2])),
    "depthwise": ((1, 3, 4, 4), (3, 1, 3, 3), False, dict(group=3, strides=[2, 2],
                                                          pads=[1, 1, 1, 1])),
    "output-shape": ((1, 2, 3, 3), (2, 2, 3, 3), False, dict(strides=[2, 2],
                                                             output_shape=[6, 7])),
    "same-upper": ((1, 2, 3, 4), (2, 3, 3, 3), True, dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    "same-lower": ((1, 2, 3, 4), (2, 3, 3, 2), False, dict(strides=[2, 3],
                                                           auto_pad="SAME_LOWER")),
    "1d-s3": ((2, 2, 5), (2, 3, 4), True, dict(strides=[3], pads=[2, 1], output_padding=[2])),
}


@pytest.mark.parametrize("case", sorted(CONV_T_CASES))
def test_conv_transpose_matches_onnxruntime(case):
    xs, ws, with_bias, attrs = CONV_T_CASES[case]
    rng = np.random.default_rng(len(case) + 7)
    inits = {"w": rand(rng, *ws)}
    if with_bias:
        inits["b"] = rand(rng, ws[1] * attrs.get("group", 1))
    model = make_model([node("ConvTranspose", ["x", "w"] + (["b"] if with_bias else []), ["y"],
                             **attrs)], {"x": rand(rng, *xs)}, inits)
    check(model, {"x": rand(rng, *xs)})


# ----------------------------------------------------------------------------- Gemm, MatMul

@pytest.mark.parametrize("trans_a, trans_b, alpha, beta, c_shape", [
    (0, 0, 1.0, 1.0, (5,)),
    (1, 0, 1.0, 0.5, (3, 1)),
    (0, 1, 2.0, 1.0, (1, 5)),
    (1, 1, 0.5, -1.5, (3, 5)),
    (0, 0, 1.5, 1.0, None),
    (0, 1, 1.0, 2.0, ()),
])
def test_gemm_matches_onnxruntime(trans_a, trans_b, alpha, beta, c_shape):
    rng = np.random.default_rng(3)
    a = rand(rng, *((4, 3) if trans_a else (3, 4)))
    b = rand(rng, *((5, 4) if trans_b else (4, 5)))
    feeds = {"a": a, "b": b}
    inputs = ["a", "b"]
    if c_shape is not None:
        feeds["c"] = rand(rng, *c_shape)
        inputs.append("c")
    model = make_model([node("Gemm", inputs, ["y"], transA=trans_a, transB=trans_b, alpha=alpha,
                             beta=beta)], feeds)
    check(model, feeds)


@pytest.mark.parametrize("rows, trans_b, alpha, beta", [
    (1, 1, 1.0, 1.0),  # a fully connected layer at batch 1: bias added after the sum
    (1, 0, 0.5, 2.0),
    (3, 1, 1.0, -1.0),
    (1, 1, 1.0, 0.0),
])
def test_gemm_with_constant_weights_matches_onnxruntime(rows, trans_b, alpha, beta):
    rng = np.random.default_rng(5)
    k, n = 40, 37  # 37 columns: channel blocking pads the last block
    weights = rand(rng, *((n, k) if trans_b else (k, n)))
    feeds = {"a": rand(rng, rows, k)}
    model = make_model([node("Gemm", ["a", "w", "c"], ["y"], transB=trans_b, alpha=alpha,
                             beta=beta)], feeds, {"w": weights, "c": rand(rng, n)})
    check(model, feeds)


@pytest.mark.parametrize("a_shape, b_shape, dtype", [
    ((3, 4), (4, 5), np.float32),
    ((2, 1, 3, 4), (5, 4, 2), np.float32),  # batch dimensions broadcast both ways
    ((4,), (2, 4, 3), np.float32),  # 1-D left: a row, dropped
    ((2, 3, 4), (4,), np.float32),  # 1-D right: a column, dropped
    ((6,), (6,), np.float32),  # a dot product, rank 0
    ((2, 3, 4), (2, 4, 3), np.int32),
])
def test_matmul_matches_onnxruntime(a_shape, b_shape, dtype):
    rng = np.random.default_rng(4)
    if dtype == np.int32:
        feeds = {"a": rng.integers(-9, 9, a_shape).astype(dtype),
                 "b": rng.integers(-9, 9, b_shape).astype(dtype)}
    else:
        feeds = {"a": rand(rng, *a_shape), "b": rand(rng, *b_shape)}
    check(make_model([node("MatMul", ["a", "b"], ["y"])], feeds), feeds)


# ----------------------------------------------------------------------------- pooling

POOL_CASES = {
    # name: (op, x shape, attrs, opset)
    "max-s2-pads": ("MaxPool", (2, 3, 7, 7), dict(kernel_shape=[3, 3], strides=[2, 2],
                                                  pads=[1, 1, 1, 1]), 17),
    "max-ceil": ("MaxPool", (1, 2, 8, 7), dict(kernel_shape=[3, 2], strides=[2, 2],
                                               ceil_mode=1, pads=[1, 0, 0, 0]), 17),
    "max-dilated-asym": ("MaxPool", (1, 2, 9, 8), dict(kernel_shape=[2, 3], dilations=[2, 1],
                                                       pads=[0, 2, 1, 0]), 17),
    "max-same-upper": ("MaxPool", (1, 2, 6, 5), dict(kernel_shape=[3, 3], strides=[2, 2],
                                                     auto_pad="SAME_UPPER"), 17),
    "max-1d-storage": ("MaxPool", (2, 3, 9), dict(kernel_shape=[3], strides=[2],
                                                  storage_order=0), 17),
    "max-3d": ("MaxPool", (1, 2, 4, 5, 4), dict(kernel_shape=[2, 2, 2], pads=[1, 0, 1, 0, 1, 0]),
               17),
    "avg-pads-excl": ("AveragePool", (2, 2, 7, 7), dict(kernel_shape=[3, 3], strides=[2, 2],
                                                        pads=[1, 1, 1, 1]), 17),
    "avg-pads-incl": ("AveragePool", (1, 2, 7, 6), dict(kernel_shape=[3, 3], strides=[2, 1],
                                                        pads=[1, 2, 0, 1],
                                                        count_include_pad=1), 17),
    "avg-ceil-incl": ("AveragePool", (1, 2, 6, 9), dict(kernel_shape=[3, 2], strides=[2, 3],
                                                        pads=[1, 1, 1, 1], ceil_mode=1,
                                                        count_include_pad=1), 17),
    "avg-ceil-excl": ("AveragePool", (1, 2, 7, 10), dict(kernel_shape=[3, 3], strides=[2, 3],
                                                         pads=[1, 0, 0, 0], ceil_mode=1), 17),
    "avg-same-lower": ("AveragePool", (1, 2, 6, 7), dict(kernel_shape=[3, 2], strides=[2, 2],
                                                         auto_pad="SAME_LOWER"), 17),
    "avg-same-upper-incl": ("AveragePool", (1, 1, 6, 5), dict(
        kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER", count_include_pad=1), 17),
    "avg-dilated": ("AveragePool", (1, 2, 9, 7), dict(kernel_shape=[3, 2], dilations=[2, 2],
                                                      pads=[1, 1, 2, 0], strides=[2, 1]), 19),
    "avg-dilated-ceil-incl": ("AveragePool", (1, 1, 7, 7), dict(
        kernel_shape=[3, 3], dilations=[2, 1], strides=[2, 2], pads=[1, 0, 2, 1], ceil_mode=1,
        count_include_pad=1), 19),
}


@pytest.mark.parametrize("case", sorted(POOL_CASES))
def test_pooling_matches_onnxruntime(case):
    op, xs, attrs, opset = POOL_CASES[case]
    rng = np.random.default_rng(len(case))
    feeds = {"x": rand(rng, *xs)}
    check(make_model([node(op, ["x"], ["y"], **attrs)], feeds, opset=opset), feeds)


def test_int8_max_pool_is_bit_exact():
    rng = np.random.default_rng(8)
    feeds = {"x": rng.integers(-128, 128, (1, 2, 6, 6)).astype(np.int8)}
    check(make_model([node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], pads=[1, 1, 0, 0])],
                     feeds), feeds)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools_match_onnxruntime(op):
    rng = np.random.default_rng(9)
    feeds = {"x": rand(rng, 2, 3, 5, 4)}
    check(make_model([node(op, ["x"], ["y"])], feeds), feeds)


# ----------------------------------------------------------------------------- normalisation

@pytest.mark.parametrize("size", [3, 5])  # onnxruntime wants it odd
def test_lrn_matches_onnxruntime(size):
    rng = np.random.default_rng(size)
    feeds = {"x": rand(rng, 2, 6, 3, 4)}
    check(make_model([node("LRN", ["x"], ["y"], size=size, alpha=0.02, beta=0.6, bias=1.5)],
                     feeds), feeds)


def test_instance_normalization_matches_onnxruntime():
    rng = np.random.default_rng(11)
    feeds = {"x": rand(rng, 2, 3, 5, 4) * 3 + 1}
    inits = {"s": rand(rng, 3), "b": rand(rng, 3)}
    check(make_model([node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-3)],
                     feeds, inits), feeds)


@pytest.mark.parametrize("opset", [7, 9, 15])
def test_batch_normalization_of_a_runtime_value(opset):
    """Not after a Conv: lowered as the per-channel affine map (the inputs here are
    runtime values, so nothing folds)."""
    rng = np.random.default_rng(12)
    feeds = {"x": rand(rng, 2, 4, 3, 3), "s": rand(rng, 4), "b": rand(rng, 4),
             "m": rand(rng, 4), "v": np.abs(rand(rng, 4)) + 0.1}
    extra = {"spatial": 1} if opset < 9 else {}
    bn = node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3,
              momentum=0.8, **extra)
    check(make_model([bn], feeds, opset=opset), feeds)


# ----------------------------------------------------------------------------- BN folding

def conv_bn_model(with_bias=True, extra_reader=False, taken_name=None):
    """x -> Conv -> BatchNormalization -> Relu (-> y), optionally the conv output also
    read by a second node (then nothing folds)."""
    rng = np.random.default_rng(13)
    inits = {"w": rand(rng, 8, 3, 3, 3), "s": rand(rng, 8), "bb": rand(rng, 8),
             "m": rand(rng, 8), "v": np.abs(rand(rng, 8)) + 0.5}
    conv_in = ["x", "w"]
    if with_bias:
        inits["cb"] = rand(rng, 8)
        conv_in.append("cb")
    if taken_name is not None:  # a value named like the folded constants would be
        inits[taken_name] = np.ones(1, np.float32)
    nodes = [node("Conv", conv_in, ["c"], name="conv", pads=[1, 1, 1, 1]),
             node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"], name="bn",
                  epsilon=1e-3),
             node("Relu", ["n"], ["y"], name="relu")]
    outputs = ["y"]
    if extra_reader:
        nodes.append(node("Neg", ["c"], ["z"], name="neg"))
        outputs.append("z")
    if taken_name is not None:
        nodes.append(node("Add", ["y", taken_name], ["t"], name="uses_taken"))
        outputs = ["t"]
    feeds = {"x": rand(rng, 2, 3, 6, 5)}
    return make_model(nodes, feeds, inits, outputs), feeds


def graph_as_model(graph, like):
    """A Graph (after rewriting) back as an ONNX model, for onnxruntime."""
    nodes = [helper.make_node(n.op_type, n.inputs, n.outputs, name=n.name, **n.attrs)
             for n in graph.nodes]
    used = {i for n in graph.nodes for i in n.inputs}
    inits = [numpy_helper.from_array(v.const, k) for k, v in graph.values.items()
             if v.const is not None and k in used]
    ins = [i for i in like.graph.input if i.name in graph.inputs]
    return helper.make_model(helper.make_graph(nodes, "folded", ins, list(like.graph.output),
                                               inits), opset_imports=list(like.opset_import))


@pytest.mark.parametrize("with_bias", [True, False])
def test_fold_batchnorm_rewrites_the_graph(with_bias):
    model, feeds = conv_bn_model(with_bias, taken_name="conv_bn_weights")
    graph = specialise(load_model(model), {"x": feeds["x"].shape})
    folded = fold_batchnorm(graph)
    assert [n.op_type for n in graph.nodes] == ["Conv", "BatchNormalization", "Relu", "Add"]
    assert [n.op_type for n in folded.nodes] == ["Conv", "Relu", "Add"]  # input untouched
    conv = folded.nodes[0]
    assert conv.outputs == ["n"] and "c" not in folded.values and "c" in graph.values
    w_name, b_name = conv.inputs[1:]
    assert w_name not in graph.values and b_name not in graph.values  # fresh names
    assert w_name != "conv_bn_weights"
    # the folded weights against the definition, in float64
    v = graph.values
    a = v["s"].const / np.sqrt(v["v"].const.astype(np.float64) + 1e-3)
    np.testing.assert_allclose(folded.values[w_name].const,
                               v["w"].const * a[:, None, None, None], rtol=1e-6)
    bias = v["cb"].const if with_bias else 0.0
    np.testing.assert_allclose(folded.values[b_name].const,
                               (bias - v["m"].const) * a + v["bb"].const, rtol=1e-5, atol=1e-6)
    # the folded graph computes what the model does
    want = reference(model, feeds)[0]
    np.testing.assert_allclose(reference(graph_as_model(folded, model), feeds)[0], want,
                               rtol=1e-4, atol=1e-5)
    assert [s.name for s in build_plan(folded).groups]  # lowers


def test_fold_batchnorm_leaves_a_shared_conv_output_alone():
    model, feeds = conv_bn_model(extra_reader=True)
    graph = specialise(load_model(model), {"x": feeds["x"].shape})
    assert [n.op_type for n in fold_batchnorm(graph).nodes] == [n.op_type for n in graph.nodes]
    check(model, feeds)  # BatchNormalization lowered


def test_folded_batchnorm_is_gone_from_the_session_plan():
    model, feeds = conv_bn_model()
    session = check(model, feeds)
    plan = session.compiled().plan
    assert "BatchNormalization" not in [n.op_type for g in plan.groups for n in g.nodes]


# ----------------------------------------------------------------------------- refusals

REFUSED = {
    # name: (node, inputs, opset, what the message names)
    "bn-training": (node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
                         name="bn_train",
                         training_mode=1), 15, "training_mode"),
    "bn-per-activation": (node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"],
                               name="bn_spatial0", spatial=0), 7, "spatial"),
    "maxpool-indices": (node("MaxPool", ["x"], ["y", "idx"], name="pool_idx",
                             kernel_shape=[2, 2]), 17, "Indices"),
    # onnx's shape inference keeps a last window that starts in the end padding,
    # onnxruntime drops it: refused rather than answered with the wrong shape
    "avgpool-ceil-in-pad": (node("AveragePool", ["x"], ["y"], name="pool_ceil",
                                 kernel_shape=[3, 3], strides=[4, 4], pads=[0, 0, 2, 2],
                                 ceil_mode=1), 17, "ceil_mode"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_unsupported_attribute_values_name_the_node(case):
    op_node, opset, what = REFUSED[case]
    rng = np.random.default_rng(14)
    feeds = {"x": rand(rng, 1, 2, 7, 7)}
    inits = {k: rand(rng, 2) ** 2 for k in ("s", "b", "m", "v") if k in op_node.input}
    model = make_model([op_node], feeds, inits, outputs=list(op_node.output), opset=opset)
    with pytest.raises(UnsupportedError) as err:
        pco.InferenceSession(model.SerializeToString()).run(None, feeds)
    assert op_node.name in str(err.value) and what in str(err.value), str(err.value)


# ----------------------------------------------------------------------------- schedule

def test_conv3x3_main_nest_is_vectorised():
    """A ResNet-style 3x3 convolution (pad 1) has its output channels blocked and
    compiles to C whose deepest loop, the main nest's innermost, is vector: ``#pragma omp
    simd`` or a register tile's."""
    rng = np.random.default_rng(15)
    feeds = {"x": rand(rng, 1, 32, 14, 14)}
    model = make_model([node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], feeds,
                       {"w": rand(rng, 32, 32, 3, 3) * np.float32(0.1)})
    session = check(model, feeds, rtol=1e-4, atol=1e-4)
    compiled = session.compiled()
    (step,) = compiled.plan.groups
    kernel = compiled.kernels[step.name]
    source = kernel.c_source
    if CM.simd_lanes(4) >= 4:  # channel blocking (scheduler/blocking.py) applies
        assert any("blocked" in n for n in kernel.specialize({}).compiled.program.notes)
    # the deepest loop of the C text (the kernel's loops are indented by depth; a loop
    # body may sit in a function of its own, outlined for the parallel loop)
    loops = [(len(ln) - len(ln.lstrip()), k) for k, ln in enumerate(source.splitlines())
             if ln.lstrip().startswith("for (")]
    assert loops, source
    indent, line = max(loops)
    pragma = source.splitlines()[line - 1].strip()
    # an omp simd loop, or the reduction loop of a register tile whose vectors are
    # written out (codegen/vector_tile.py)
    assert pragma.startswith("#pragma omp simd") or pragma == VT.MARKER, (pragma, source)
