"""Shared by the ONNX op tests: a model of a few nodes, run on onnxruntime and polycomp.

onnx and onnxruntime are test dependencies (the ``test`` extra installs them): they are
imported plainly, and a missing one is an error, not a skip.

:func:`check` compiles each case as users get it and as the other kind of code
(serial or parallel), and compares each with onnxruntime:

- the default options (``pco.InferenceSession(model_bytes)``: fused groups, channel
  blocking, parallel loops where the work pays for a thread team);
- where that code has no OpenMP parallel region, ``parallel_min_work=0``: every
  dependence-free loop the scheduler would make parallel gets its thread team. The op
  cases are small: none of them reaches the default threshold
  (``Options.parallel_min_work``, 20000 iterations of work), so their default code is
  the serial code (the generated C of all 107 cases of test_onnx_shape.py and
  test_onnx_reduce.py was identical with and without ``parallel=False`` when this was
  written) and without this variant no op's OpenMP code would meet the oracle;
- where it has one, ``parallel=False``: the serial code (elsewhere ``parallel=False``
  gives the default's C again: it only leaves the parallel marks out);
- both, where the default's code cannot be looked at (a model compiled per value of an
  input: ``InferenceSession.compiled`` takes shapes only).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import polycomp.onnx as pco
from polycomp.frontend.onnx.model import NeedsValueError

RTOL, ATOL = 1e-4, 1e-5

# the other variants check() runs (module docstring)
FORCED_PARALLEL = {"parallel_min_work": 0}
SERIAL = {"parallel": False}


def make_model(nodes, inputs: dict[str, np.ndarray], outputs: list[str], opset: int,
               inits: dict[str, np.ndarray] | None = None):
    """A model of ``nodes`` with runtime ``inputs`` (their dtypes and shapes) and
    constant ``inits``; output types from onnx's shape inference."""
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in inputs.items()]
    outs = [helper.make_empty_tensor_value_info(n) for n in outputs]
    init = [numpy_helper.from_array(np.asarray(v), n) for n, v in (inits or {}).items()]
    graph = helper.make_graph(nodes, "g", ins, outs, init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset <= 18 else 9
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    del model.graph.output[:]
    model.graph.output.extend(inferred.graph.output)
    onnx.checker.check_model(model)
    return model


def reference(model, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs for ``model`` (a ModelProto) on ``feed``: the oracle."""
    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)


def assert_outputs_match(names: list[str], want: list[np.ndarray], got: list[np.ndarray],
                         variant: str, rtol: float = RTOL, atol: float = ATOL) -> None:
    """``got`` (polycomp's, compiled as ``variant`` says) equals onnxruntime's ``want``:
    as many outputs, dtypes and shapes equal, floats within tolerance, the rest
    (integers, booleans) bit for bit."""
    assert len(got) == len(want) == len(names), (variant, len(names), len(want), len(got))
    for name, w, g in zip(names, want, got, strict=True):
        where = f"{name} ({variant})"
        assert g.dtype == w.dtype and g.shape == w.shape, (where, g.dtype, w.dtype,
                                                           g.shape, w.shape)
        if np.issubdtype(w.dtype, np.floating):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=where)
        else:
            np.testing.assert_array_equal(g, w, err_msg=where)


def other_variants(session: pco.InferenceSession, inputs: dict[str, np.ndarray]
                   ) -> list[dict[str, object]]:
    """The options to compile with besides the default ones ``session`` has: the kind of
    code (serial or parallel) the default code on ``inputs`` is not; both where that
    cannot be told (a model compiled per value of an input)."""
    try:
        compiled = session.compiled({k: v.shape for k, v in inputs.items()})
    except NeedsValueError:
        return [FORCED_PARALLEL, SERIAL]
    parallel = any("omp parallel" in k.source for k in compiled.kernels.values())
    return [SERIAL] if parallel else [FORCED_PARALLEL]


def check(nodes, inputs: dict[str, np.ndarray], outputs: list[str] | None = None,
          opset: int = 17, inits: dict[str, np.ndarray] | None = None) -> list[np.ndarray]:
    """onnxruntime and polycomp agree, for each variant of the module docstring: floats
    within tolerance, the rest bit for bit, dtypes and shapes equal. Returns polycomp's
    outputs under the default options."""
    nodes = nodes if isinstance(nodes, list) else [nodes]
    outputs = outputs or [o for o in nodes[-1].output if o]
    model = make_model(nodes, inputs, outputs, opset, inits)
    want = reference(model, inputs)
    data = model.SerializeToString()
    default = pco.InferenceSession(data)
    got = default.run(None, inputs)
    assert_outputs_match(outputs, want, got, "default options")
    for options in other_variants(default, inputs):
        variant = ", ".join(f"{k}={v}" for k, v in options.items())
        assert_outputs_match(outputs, want,
                             pco.InferenceSession(data, **options).run(None, inputs), variant)
    return got


def conv_chain(c: int, m: int, f: int, h: int, k: int, stride: int) -> bytes:
    """conv(c -> m, 1x1) + relu, then conv(m -> f, k x k, stride) + relu: the second conv
    reads the first's channel-blocked output, as inside a ResNet bottleneck."""
    rng = np.random.default_rng(0)
    out = (h + 2 * (k // 2) - k) // stride + 1
    weights = {"W1": rng.standard_normal((m, c, 1, 1)) * 0.1,
               "B1": rng.standard_normal(m), "W2": rng.standard_normal((f, m, k, k)) * 0.1,
               "B2": rng.standard_normal(f)}
    nodes = [helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"], name="conv2",
                              kernel_shape=[k, k], pads=[k // 2] * 4, strides=[stride] * 2),
             helper.make_node("Relu", ["c2"], ["y"], name="relu2")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, f, out, out])],
        [numpy_helper.from_array(v.astype(np.float32), n) for n, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()
