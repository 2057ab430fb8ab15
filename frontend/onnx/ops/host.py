"""ONNX lowering: the ops the session runs on numpy views between groups (no C).

Reshape, Flatten, Squeeze, Unsqueeze, Identity and Dropout (inference) only change how
a contiguous buffer is indexed; the session applies them with ``numpy.reshape``, which
copies nothing. Their output shapes come from shape inference (graph.py), so one
function serves them all.
"""

from __future__ import annotations

import numpy as np

from ..graph import Graph, Node

# attributes each host op may carry (others are refused like any lowering's)
HOST_ATTRS = {
    "Reshape": {"allowzero"}, "Flatten": {"axis"}, "Squeeze": {"axes"},
    "Unsqueeze": {"axes"}, "Identity": set(), "Dropout": {"seed", "ratio"},
}


def run_host(node: Node, graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The node's outputs from its inputs (views of the first input)."""
    x = np.ascontiguousarray(inputs[0])
    outs = [x.reshape(graph.values[node.outputs[0]].shape)]
    if node.op_type == "Dropout" and len(node.outputs) > 1 and node.outputs[1]:
        outs.append(np.ones(graph.values[node.outputs[1]].shape, dtype=bool))
    return outs
