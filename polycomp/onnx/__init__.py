"""polycomp.onnx: whole ONNX models compiled by polycomp, used like onnxruntime.

    import polycomp.onnx as ort          # instead of: import onnxruntime as ort
    session = ort.InferenceSession("model.onnx")
    (y,) = session.run(None, {"x": x})

``supported_ops()`` lists the op types the frontend lowers (frontend/onnx/ops);
``polycomp.onnx.backend`` is an ``onnx.backend.base.Backend`` for onnx's test runner.
"""

from __future__ import annotations

from polycomp.frontend.onnx.model import ModelError
from polycomp.frontend.onnx.ops import supported_ops

from .session import CompiledModel, InferenceSession, NodeArg, compile_onnx

__all__ = ["InferenceSession", "NodeArg", "CompiledModel", "ModelError", "compile_onnx",
           "supported_ops"]
