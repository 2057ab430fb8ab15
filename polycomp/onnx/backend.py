"""polycomp.onnx.backend: polycomp as an ``onnx.backend.base.Backend``.

onnx's own conformance runner (``onnx.backend.test.BackendTest``) drives any backend
through ``prepare``/``run``; this module is that seam for polycomp:

    import onnx.backend.test
    import polycomp.onnx.backend as backend
    globals().update(onnx.backend.test.BackendTest(backend, __name__).test_cases)

A model polycomp cannot lower raises ``unittest.SkipTest`` with the reason from the
frontend's UnsupportedError (the runner then reports it as skipped, not passed). A skip
must not hide a regression: tests/test_onnx_conformance.py keeps a floor of the cases
polycomp passes and fails, rather than skips, a listed case that this raises for.
"""

from __future__ import annotations

import unittest
from collections.abc import Sequence
from typing import Any

import numpy as np

from polycomp.errors import UnsupportedError

from .session import InferenceSession

try:
    import onnx
    from onnx.backend.base import Backend, BackendRep
except ImportError:  # pragma: no cover - the onnx extra is missing
    onnx = None  # type: ignore[assignment]
    Backend = BackendRep = object  # type: ignore[assignment,misc]


class PolycompRep(BackendRep):  # type: ignore[misc,valid-type]
    """A prepared model: positional inputs in the graph's input order. Values of the
    element types polycomp only stores (bfloat16, float8, int4, ...) travel as ml_dtypes
    arrays, as onnx's runner has them (the session converts them)."""

    def __init__(self, session: InferenceSession):
        self.session = session

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        names = [i.name for i in self.session.get_inputs()]
        if isinstance(inputs, dict):
            feed = dict(inputs)
        else:
            values = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            feed = dict(zip(names, values))
        return tuple(self.session.run(None, feed))


class PolycompBackend(Backend):  # type: ignore[misc,valid-type]
    """Compiles a whole model with polycomp (Options as keyword arguments)."""

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> PolycompRep:
        if not cls.supports_device(device):
            raise unittest.SkipTest(f"polycomp runs on the CPU, not {device}")
        # onnx's runner hands a case's own tolerances (rtol, atol) to prepare too
        options = {k: v for k, v in kwargs.items() if k not in ("rtol", "atol")}
        try:
            session = InferenceSession(model, **options)
        except UnsupportedError as exc:
            raise unittest.SkipTest(str(exc)) from None
        return PolycompRep(session)

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: Any, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple[Any, tuple[int, ...]]] | None = None,
                 **kwargs: Any) -> tuple[Any, ...]:
        """One node as a model of its own (inputs typed from the arrays given)."""
        values = list(inputs)
        graph_inputs = [onnx.helper.make_tensor_value_info(
            name, onnx.helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), np.shape(v))
            for name, v in zip(node.input, values) if name]
        outs = []
        for k, name in enumerate(node.output):
            if outputs_info is not None and k < len(outputs_info):
                dtype, shape = outputs_info[k]
                outs.append(onnx.helper.make_tensor_value_info(
                    name, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape))
            else:
                outs.append(onnx.helper.make_empty_tensor_value_info(name))
        opset = kwargs.pop("opset_version", None)
        imports = [onnx.helper.make_opsetid("", opset)] if opset else None
        model = onnx.helper.make_model(onnx.helper.make_graph([node], "node", graph_inputs, outs),
                                       **({"opset_imports": imports} if imports else {}))
        feed = [v for name, v in zip(node.input, values) if name]
        return cls.prepare(model, device, **kwargs).run(feed)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return str(device).upper().startswith("CPU")


prepare = PolycompBackend.prepare
run_model = PolycompBackend.run_model
run_node = PolycompBackend.run_node
supports_device = PolycompBackend.supports_device
is_compatible = PolycompBackend.is_compatible
