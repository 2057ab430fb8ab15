"""The ONNX frontend: an ONNX model -> fusion groups, each a polycomp.ir.Program.

Stages, one module each: model.py (read, check, external data kept inside the model's
folder), graph.py (input shapes fixed, shapes inferred, constants folded: a static graph),
plan.py (nodes into fusion groups and host view ops), builder.py (the statements of one
group: tensors, views, broadcasting), ops/ (one lowering per op type). The session that
runs a plan is polycomp/onnx/session.py.
"""

from __future__ import annotations

from .graph import Graph, specialise
from .model import LoadedModel, ModelError, load_model
from .ops import supported_ops
from .plan import ModelPlan, build_plan

__all__ = ["Graph", "LoadedModel", "ModelError", "ModelPlan", "build_plan", "load_model",
           "specialise", "supported_ops"]
