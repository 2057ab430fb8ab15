"""Shared by the ONNX op tests: a model of a few nodes, run on onnxruntime and polycomp.

Imported after the test module's ``pytest.importorskip("onnx")`` and ``("onnxruntime")``.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

import polycomp.onnx as pco

RTOL, ATOL = 1e-4, 1e-5


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


def check(nodes, inputs: dict[str, np.ndarray], outputs: list[str] | None = None,
          opset: int = 17, inits: dict[str, np.ndarray] | None = None) -> list[np.ndarray]:
    """onnxruntime and polycomp agree: floats within tolerance, the rest (integers,
    booleans) bit for bit, dtypes and shapes equal. Returns polycomp's outputs."""
    nodes = nodes if isinstance(nodes, list) else [nodes]
    outputs = outputs or [o for o in nodes[-1].output if o]
    model = make_model(nodes, inputs, outputs, opset, inits)
    want = reference(model, inputs)
    got = pco.InferenceSession(model.SerializeToString(), parallel=False).run(None, inputs)
    for name, w, g in zip(outputs, want, got):
        assert g.dtype == w.dtype and g.shape == w.shape, (name, g.dtype, w.dtype,
                                                           g.shape, w.shape)
        if np.issubdtype(w.dtype, np.floating):
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=name)
    return got
