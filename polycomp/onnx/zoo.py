"""Models for tests and benchmarks: onnx's light models with random weights, and models
built here with ``onnx.helper`` (a BERT-style encoder layer, a MobileNetV2 block, a
conv-bn-relu-add block).

The light models shipped in the onnx wheel (``onnx/backend/test/data/light``) make every
weight with ``ConstantOfShape`` 0.02, so their shipped outputs are constants that any
wrong kernel could match; :func:`with_random_weights` replaces those nodes by random
initializers (fixed seed), so that a comparison with onnxruntime checks something.
"""

from __future__ import annotations

import glob
import os

import numpy as np

from polycomp.frontend.onnx.model import onnx, require_onnx


def light_model_paths() -> dict[str, str]:
    """name -> path of each light model in the installed onnx wheel."""
    require_onnx()
    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    return {os.path.basename(p)[len("light_"):-len(".onnx")]: p
            for p in sorted(glob.glob(os.path.join(folder, "light_*.onnx")))}


def with_random_weights(model, seed: int = 0):
    """A copy of ``model`` whose ConstantOfShape weights are random initializers: weights
    of rank >= 2 uniform in +-sqrt(3 / fan_in) (activations keep their scale through
    deep nets), vectors (biases, batch-norm statistics) uniform in [0.5, 1.5] (variances
    stay positive)."""
    require_onnx()
    rng = np.random.default_rng(seed)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    shapes = {t.name: onnx.numpy_helper.to_array(t) for t in out.graph.initializer}
    keep = []
    for node in out.graph.node:
        if node.op_type == "ConstantOfShape" and node.input and node.input[0] in shapes:
            shape = tuple(int(d) for d in shapes[node.input[0]].reshape(-1))
            if len(shape) >= 2:
                bound = np.sqrt(3.0 / max(1, int(np.prod(shape[1:]))))
                data = rng.uniform(-bound, bound, size=shape)
            else:
                data = rng.uniform(0.5, 1.5, size=shape)
            out.graph.initializer.append(
                onnx.numpy_helper.from_array(data.astype(np.float32), node.output[0]))
            continue
        keep.append(node)
    del out.graph.node[:]
    out.graph.node.extend(keep)
    used = {i for n in keep for i in n.input} | {o.name for o in out.graph.output}
    weights = [t for t in out.graph.initializer if t.name in used]
    del out.graph.initializer[:]
    out.graph.initializer.extend(weights)
    inputs = [i for i in out.graph.input if i.name in used]
    if out.ir_version < 4:  # before IR 4 every initializer is also a graph input
        listed = {i.name for i in inputs}
        inputs += [onnx.helper.make_tensor_value_info(
            t.name, t.data_type, list(t.dims)) for t in weights if t.name not in listed]
    del out.graph.input[:]
    out.graph.input.extend(inputs)
    return out


def runtime_input_infos(model) -> list:
    init = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in init]


def random_inputs(model, seed: int = 0, symbolic: int = 1,
                  shapes: dict | None = None) -> dict[str, np.ndarray]:
    """A random feed for the model's runtime inputs (symbolic dimensions = ``symbolic``;
    ``shapes``: input name -> shape, for the inputs it names)."""
    from polycomp.frontend.onnx.graph import ELEM_DTYPES
    rng = np.random.default_rng(seed)
    feed = {}
    for info in runtime_input_infos(model):
        t = info.type.tensor_type
        # a symbolic extent, or an exporter's -1, takes ``symbolic``
        shape = [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else symbolic
                 for d in t.shape.dim]
        if shapes and info.name in shapes:
            shape = list(shapes[info.name])
        dtype = ELEM_DTYPES[t.elem_type]
        if dtype.startswith("float"):
            feed[info.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == "bool":
            feed[info.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            feed[info.name] = rng.integers(0, 8, size=shape).astype(dtype)
    return feed


# ----------------------------------------------------------------------------- built here

def _init(rng, name: str, shape, scale: float | None = None):
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else int(shape[0])
    bound = scale if scale is not None else np.sqrt(3.0 / max(1, fan_in))
    return onnx.numpy_helper.from_array(
        rng.uniform(-bound, bound, size=shape).astype(np.float32), name)


def encoder_layer(seq: int = 128, hidden: int = 768, heads: int = 12, ffn: int = 3072,
                  seed: int = 0, opset: int = 17):
    """A BERT-base encoder layer: self-attention (Q, K, V, softmax, output projection),
    residual + LayerNorm, GELU feed-forward, residual + LayerNorm. Input x: [1, seq, hidden]."""
    require_onnx()
    h = onnx.helper
    rng = np.random.default_rng(seed)
    d = hidden // heads
    inits = [_init(rng, n, s) for n, s in (
        ("Wq", (hidden, hidden)), ("Wk", (hidden, hidden)), ("Wv", (hidden, hidden)),
        ("Wo", (hidden, hidden)), ("W1", (hidden, ffn)), ("W2", (ffn, hidden)))]
    inits += [_init(rng, n, s, 0.1) for n, s in (
        ("bq", (hidden,)), ("bk", (hidden,)), ("bv", (hidden,)), ("bo", (hidden,)),
        ("b1", (ffn,)), ("b2", (hidden,)), ("ln1_b", (hidden,)), ("ln2_b", (hidden,)))]
    inits += [onnx.numpy_helper.from_array((1 + rng.uniform(-0.1, 0.1, hidden)).astype(
        np.float32), n) for n in ("ln1_s", "ln2_s")]
    inits += [onnx.numpy_helper.from_array(np.array(v, dtype=np.int64), n) for n, v in (
        ("heads_shape", [1, seq, heads, d]), ("merge_shape", [1, seq, hidden]))]
    inits.append(onnx.numpy_helper.from_array(np.array(1.0 / np.sqrt(d), dtype=np.float32),
                                              "scale"))
    n = h.make_node
    nodes = []
    for p in "qkv":
        nodes += [n("MatMul", ["x", f"W{p}"], [f"{p}0"], name=f"{p}_proj"),
                  n("Add", [f"{p}0", f"b{p}"], [f"{p}1"], name=f"{p}_bias"),
                  n("Reshape", [f"{p}1", "heads_shape"], [f"{p}2"], name=f"{p}_split_heads")]
    nodes += [n("Transpose", ["q2"], ["q3"], perm=[0, 2, 1, 3], name="q_heads_first"),
              n("Transpose", ["k2"], ["k3"], perm=[0, 2, 3, 1], name="k_heads_first"),
              n("Transpose", ["v2"], ["v3"], perm=[0, 2, 1, 3], name="v_heads_first"),
              n("MatMul", ["q3", "k3"], ["s0"], name="scores"),
              n("Mul", ["s0", "scale"], ["s1"], name="scores_scale"),
              n("Softmax", ["s1"], ["p"], axis=-1, name="attention_softmax"),
              n("MatMul", ["p", "v3"], ["c0"], name="context"),
              n("Transpose", ["c0"], ["c1"], perm=[0, 2, 1, 3], name="context_merge"),
              n("Reshape", ["c1", "merge_shape"], ["c2"], name="context_reshape"),
              n("MatMul", ["c2", "Wo"], ["o0"], name="out_proj"),
              n("Add", ["o0", "bo"], ["o1"], name="out_bias"),
              n("Add", ["o1", "x"], ["r1"], name="residual1"),
              n("LayerNormalization", ["r1", "ln1_s", "ln1_b"], ["y1"], axis=-1,
                epsilon=1e-5, name="ln1"),
              n("MatMul", ["y1", "W1"], ["f0"], name="ffn_in"),
              n("Add", ["f0", "b1"], ["f1"], name="ffn_bias"),
              n("Gelu" if opset >= 20 else "Erf", ["f1"] if opset >= 20 else ["f1s"],
                ["f2"] if opset >= 20 else ["erf"], name="gelu")]
    if opset < 20:  # GELU spelled out, as exporters before opset 20 write it
        inits += [onnx.numpy_helper.from_array(np.array(v, dtype=np.float32), k) for k, v in (
            ("inv_sqrt2", 1 / np.sqrt(2)), ("one", 1.0), ("half", 0.5))]
        nodes.insert(len(nodes) - 1, n("Mul", ["f1", "inv_sqrt2"], ["f1s"], name="gelu_scale"))
        nodes += [n("Add", ["erf", "one"], ["erf1"], name="gelu_add"),
                  n("Mul", ["f1", "erf1"], ["f2h"], name="gelu_mul"),
                  n("Mul", ["f2h", "half"], ["f2"], name="gelu_half")]
    nodes += [n("MatMul", ["f2", "W2"], ["g0"], name="ffn_out"),
              n("Add", ["g0", "b2"], ["g1"], name="ffn_out_bias"),
              n("Add", ["g1", "y1"], ["r2"], name="residual2"),
              n("LayerNormalization", ["r2", "ln2_s", "ln2_b"], ["y"], axis=-1,
                epsilon=1e-5, name="ln2")]
    graph = h.make_graph(nodes, "encoder_layer",
                         [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT,
                                                   [1, seq, hidden])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT,
                                                   [1, seq, hidden])], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])


def mobilenet_block(channels: int = 24, expand: int = 6, size: int = 56, seed: int = 0,
                    opset: int = 17):
    """A MobileNetV2 inverted residual block: 1x1 expand + BN + ReLU6, 3x3 depthwise + BN
    + ReLU6, 1x1 project + BN, residual add. Input x: [1, channels, size, size]."""
    require_onnx()
    h = onnx.helper
    rng = np.random.default_rng(seed)
    hidden = channels * expand
    inits = [_init(rng, "w_expand", (hidden, channels, 1, 1)),
             _init(rng, "w_dw", (hidden, 1, 3, 3)),
             _init(rng, "w_project", (channels, hidden, 1, 1))]
    nodes = []
    n = h.make_node
    for name, c in (("bn1", hidden), ("bn2", hidden), ("bn3", channels)):
        inits += [onnx.numpy_helper.from_array(rng.uniform(0.5, 1.5, c).astype(np.float32),
                                               f"{name}_{k}") for k in ("scale", "var")]
        inits += [onnx.numpy_helper.from_array(rng.uniform(-0.5, 0.5, c).astype(np.float32),
                                               f"{name}_{k}") for k in ("bias", "mean")]
    inits += [onnx.numpy_helper.from_array(np.array(v, dtype=np.float32), k)
              for k, v in (("zero", 0.0), ("six", 6.0))]

    def bn(x, name, y):
        return n("BatchNormalization", [x, f"{name}_scale", f"{name}_bias", f"{name}_mean",
                                        f"{name}_var"], [y], epsilon=1e-5, name=name)
    nodes += [n("Conv", ["x", "w_expand"], ["e0"], kernel_shape=[1, 1], name="expand"),
              bn("e0", "bn1", "e1"),
              n("Clip", ["e1", "zero", "six"], ["e2"], name="relu6_1"),
              n("Conv", ["e2", "w_dw"], ["d0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                group=hidden, name="depthwise"),
              bn("d0", "bn2", "d1"),
              n("Clip", ["d1", "zero", "six"], ["d2"], name="relu6_2"),
              n("Conv", ["d2", "w_project"], ["p0"], kernel_shape=[1, 1], name="project"),
              bn("p0", "bn3", "p1"),
              n("Add", ["p1", "x"], ["y"], name="residual")]
    shape = [1, channels, size, size]
    graph = h.make_graph(nodes, "mobilenet_v2_block",
                         [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, shape)], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
