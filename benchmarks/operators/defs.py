"""The deep-learning operator suite: each operator at a real model's shape (batch 1), as
a TC def for polycomp, a single-node (or few-node) ONNX graph for onnxruntime, and a
numpy version where numpy has the operator.

Padding: the convolutions and the max pool take an input that is already padded, and
the ONNX node gets ``pads`` 0 on that same input, so that both sides do the same work
(padding is a graph-level question left to the ONNX import). float32 throughout.

``work`` is what the GFLOP/s or GB/s column divides by: 2 x multiply-adds for the
compute-bound operators, the bytes read and written once for the memory-bound ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from math import sqrt

import numpy as np

F32 = np.float32


@dataclass(frozen=True)
class Operator:
    name: str
    model: str  # where the shape comes from
    tc: str  # one def; its inputs in this order are `inputs`
    inputs: tuple[tuple[str, tuple[int, ...]], ...]  # (name, shape), float32
    onnx: Callable[[], object]  # builds the onnx.ModelProto (imported lazily)
    work: float  # flops or bytes
    unit: str  # "GFLOP/s" or "GB/s"
    numpy: Callable[..., np.ndarray] | None = None
    scalars: dict[str, float] = field(default_factory=dict)  # TC scalar arguments

    def make_inputs(self, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [rng.standard_normal(shape).astype(F32) for _, shape in self.inputs]


# ----------------------------------------------------------------------------- ONNX graphs

def _model(nodes, inputs, output, out_shape, initializers=()):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        nodes, "op",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, list(out_shape))],
        initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _const(name: str, value: float):
    from onnx import helper, TensorProto
    return helper.make_tensor(name, TensorProto.FLOAT, [], [value])


def _node(op, ins, outs, **attrs):
    from onnx import helper
    return helper.make_node(op, ins, outs, **attrs)


# ----------------------------------------------------------------------------- operators

def conv(name: str, model: str, c: int, f: int, hw: int, k: int, stride: int = 1,
         group: int = 1) -> Operator:
    """NCHW convolution of a padded input (pad (k-1)/2 already applied)."""
    pad = (k - 1) // 2
    out = (hw + 2 * pad - k) // stride + 1
    hin = hw + 2 * pad
    x = ("I", (1, c, hin, hin))
    s = stride
    if group == 1:
        w = ("Wt", (f, c, k, k))
        tc = (f"def {name.replace('-', '_')}(float(N, C, H, W) I, float(F, C, KH, KW) Wt) -> (O) {{\n"
              f"    O(n, f, h, w) +=! I(n, c, {s} * h + kh, {s} * w + kw) * Wt(f, c, kh, kw)"
              f" where h in 0:{out}, w in 0:{out}\n}}")
        macs = f * c * k * k * out * out
    else:
        assert group == c == f
        w = ("Wt", (c, 1, k, k))
        tc = (f"def {name.replace('-', '_')}(float(N, C, H, W) I, float(C, ONE, KH, KW) Wt) -> (O) {{\n"
              f"    O(n, c, h, w) +=! I(n, c, {s} * h + kh, {s} * w + kw) * Wt(c, 0, kh, kw)"
              f" where h in 0:{out}, w in 0:{out}\n}}")
        macs = c * k * k * out * out

    def onnx_model():
        node = _node("Conv", ["I", "Wt"], ["O"], kernel_shape=[k, k], strides=[s, s],
                     pads=[0, 0, 0, 0], group=group)
        return _model([node], [x, w], "O", (1, f, out, out))

    return Operator(name, model, tc, (x, w), onnx_model, 2.0 * macs, "GFLOP/s")


def matmul_bias_gelu(m: int, k: int, n: int) -> Operator:
    tc = ("def gemm_bias_gelu(float(M, K) A, float(K, N) B, float(N) bias) -> (Y) {\n"
          "    C(m, n) +=! A(m, k) * B(k, n)\n"
          "    Y(m, n) = 0.5 * (C(m, n) + bias(n)) * (1.0 + erf((C(m, n) + bias(n)) * 0.70710678118654752))\n"
          "}")

    def onnx_model():
        nodes = [_node("MatMul", ["A", "B"], ["C"]), _node("Add", ["C", "bias"], ["X"]),
                 _node("Mul", ["X", "r2"], ["Xs"]), _node("Erf", ["Xs"], ["E"]),
                 _node("Add", ["E", "one"], ["E1"]), _node("Mul", ["X", "E1"], ["XE"]),
                 _node("Mul", ["XE", "half"], ["Y"])]
        return _model(nodes, [("A", (m, k)), ("B", (k, n)), ("bias", (n,))], "Y", (m, n),
                      [_const("r2", 1 / sqrt(2)), _const("one", 1.0), _const("half", 0.5)])

    return Operator("gemm+bias+gelu", "BERT-base FFN", tc,
                    (("A", (m, k)), ("B", (k, n)), ("bias", (n,))), onnx_model,
                    2.0 * m * n * k, "GFLOP/s")


def fully_connected(k: int, n: int) -> Operator:
    tc = ("def fc(float(M, K) A, float(K, N) B, float(N) bias) -> (Y) {\n"
          "    Y(m, n) = bias(n) where m in 0:M\n"
          "    Y(m, n) += A(m, k) * B(k, n)\n"
          "}")

    def onnx_model():
        nodes = [_node("MatMul", ["A", "B"], ["C"]), _node("Add", ["C", "bias"], ["Y"])]
        return _model(nodes, [("A", (1, k)), ("B", (k, n)), ("bias", (n,))], "Y", (1, n))

    return Operator("fc 2048x1000", "ResNet-50 classifier", tc,
                    (("A", (1, k)), ("B", (k, n)), ("bias", (n,))), onnx_model,
                    2.0 * k * n, "GFLOP/s", numpy=lambda a, b, c: a @ b + c)


def batched_matmul(b: int, m: int, k: int, n: int) -> Operator:
    tc = ("def bmm(float(B, M, K) Q, float(B, K, N) Kt) -> (S) {\n"
          "    S(b, m, n) +=! Q(b, m, k) * Kt(b, k, n)\n}")

    def onnx_model():
        return _model([_node("MatMul", ["Q", "Kt"], ["S"])],
                      [("Q", (b, m, k)), ("Kt", (b, k, n))], "S", (b, m, n))

    return Operator("batched matmul QK^T", "BERT-base attention", tc,
                    (("Q", (b, m, k)), ("Kt", (b, k, n))), onnx_model, 2.0 * b * m * n * k,
                    "GFLOP/s", numpy=lambda q, kt: q @ kt)


def softmax(b: int, m: int, n: int) -> Operator:
    tc = ("def softmax(float(B, M, N) X) -> (Y) {\n"
          "    mx(b, m) max=! X(b, m, n)\n"
          "    e(b, m, n) = exp(X(b, m, n) - mx(b, m))\n"
          "    s(b, m) +=! e(b, m, n)\n"
          "    Y(b, m, n) = e(b, m, n) / s(b, m)\n}")

    def onnx_model():
        return _model([_node("Softmax", ["X"], ["Y"], axis=-1)], [("X", (b, m, n))], "Y",
                      (b, m, n))

    def numpy_softmax(x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    return Operator("softmax", "BERT-base attention", tc, (("X", (b, m, n)),), onnx_model,
                    2.0 * 4 * b * m * n, "GB/s", numpy=numpy_softmax)


def layernorm(m: int, d: int) -> Operator:
    eps = 1e-5
    tc = ("def layernorm(float(N, D) X, float(D) gamma, float(D) beta) -> (Y) {\n"
          "    mean(n) +=! X(n, d) / float(D)\n"
          "    var(n) +=! (X(n, d) - mean(n)) * (X(n, d) - mean(n)) / float(D)\n"
          f"    Y(n, d) = gamma(d) * (X(n, d) - mean(n)) * rsqrt(var(n) + {eps}) + beta(d)\n}}")

    def onnx_model():
        node = _node("LayerNormalization", ["X", "gamma", "beta"], ["Y"], axis=-1, epsilon=eps)
        return _model([node], [("X", (m, d)), ("gamma", (d,)), ("beta", (d,))], "Y", (m, d))

    def numpy_layernorm(x, g, bt):
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        return g * (x - mu) / np.sqrt(var + F32(eps)) + bt

    return Operator("layernorm", "BERT-base", tc,
                    (("X", (m, d)), ("gamma", (d,)), ("beta", (d,))), onnx_model,
                    4.0 * 2 * m * d, "GB/s", numpy=numpy_layernorm)


def maxpool(c: int, hw: int) -> Operator:
    """3x3 stride 2 max pool of a padded input (ResNet's stem)."""
    hin, out = hw + 2, hw // 2
    tc = ("def maxpool(float(N, C, H, W) I) -> (O) {\n"
          "    O(n, c, h, w) max=! I(n, c, 2 * h + kh, 2 * w + kw)"
          f" where h in 0:{out}, w in 0:{out}, kh in 0:3, kw in 0:3\n}}")

    def onnx_model():
        node = _node("MaxPool", ["I"], ["O"], kernel_shape=[3, 3], strides=[2, 2],
                     pads=[0, 0, 0, 0])
        return _model([node], [("I", (1, c, hin, hin))], "O", (1, c, out, out))

    return Operator("maxpool 3x3/2", "ResNet-50 stem", tc, (("I", (1, c, hin, hin)),),
                    onnx_model, 4.0 * (c * hin * hin + c * out * out), "GB/s")


def global_avgpool(c: int, hw: int) -> Operator:
    tc = ("def avgpool(float(N, C, H, W) I) -> (O) {\n"
          "    O(n, c) +=! I(n, c, h, w) / float(H * W)\n}")

    def onnx_model():
        nodes = [_node("GlobalAveragePool", ["I"], ["P"]),
                 _node("Flatten", ["P"], ["O"], axis=1)]
        return _model(nodes, [("I", (1, c, hw, hw))], "O", (1, c))

    return Operator("global avgpool", "ResNet-50 head", tc, (("I", (1, c, hw, hw)),),
                    onnx_model, 4.0 * c * hw * hw, "GB/s",
                    numpy=lambda x: x.mean(axis=(2, 3)))


def bias_residual_relu(c: int, hw: int) -> Operator:
    tc = ("def add_relu(float(N, C, H, W) X, float(C) bias, float(N, C, H, W) R) -> (Y) {\n"
          "    Y(n, c, h, w) = fmax(X(n, c, h, w) + bias(c) + R(n, c, h, w), 0.0)\n}")

    def onnx_model():
        from onnx import helper, TensorProto
        shape = helper.make_tensor("shape", TensorProto.INT64, [4], [1, c, 1, 1])
        nodes = [_node("Reshape", ["bias", "shape"], ["b4"]), _node("Add", ["X", "b4"], ["Xb"]),
                 _node("Add", ["Xb", "R"], ["S"]), _node("Relu", ["S"], ["Y"])]
        return _model(nodes, [("X", (1, c, hw, hw)), ("bias", (c,)), ("R", (1, c, hw, hw))],
                      "Y", (1, c, hw, hw), [shape])

    return Operator("bias+residual+relu", "ResNet-50 block", tc,
                    (("X", (1, c, hw, hw)), ("bias", (c,)), ("R", (1, c, hw, hw))), onnx_model,
                    4.0 * 3 * c * hw * hw, "GB/s",
                    numpy=lambda x, b, r: np.maximum(x + b[None, :, None, None] + r, F32(0)))


def suite() -> list[Operator]:
    return [
        conv("conv3x3", "ResNet-50 layer2", 128, 128, 28, 3),
        conv("conv3x3-s2", "ResNet-50 layer2 down", 64, 128, 56, 3, stride=2),
        conv("conv1x1", "ResNet-50 layer1", 256, 64, 56, 1),
        conv("depthwise3x3", "MobileNetV2", 144, 144, 56, 3, group=144),
        maxpool(64, 112),
        global_avgpool(2048, 7),
        matmul_bias_gelu(128, 768, 3072),
        fully_connected(2048, 1000),
        batched_matmul(12, 128, 64, 128),
        softmax(12, 128, 128),
        layernorm(128, 768),
        bias_residual_relu(256, 56),
    ]


def get(names: str) -> list[Operator]:
    ops = suite()
    if not names:
        return ops
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    by_name = {o.name: o for o in ops}
    missing = [n for n in wanted if n not in by_name]
    if missing:
        raise SystemExit(f"unknown operators {missing}; known: {sorted(by_name)}")
    return [by_name[n] for n in wanted]
