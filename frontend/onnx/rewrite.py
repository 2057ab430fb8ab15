"""ONNX import, graph rewrites between graph.specialise and plan.build_plan: Graph -> Graph.

Each rewrite is a pure function returning a new :class:`graph.Graph` (the input one is
left as it is) with the same runtime inputs and outputs and the same results up to
floating-point rounding.

``fold_batchnorm``: an inference BatchNormalization applied to a Conv's output is an
affine map per output channel, so it folds into the Conv's constant weights and bias at
load time (every exporter leaves BN nodes behind convolutions; folded, the network runs
one convolution statement instead of a convolution and a pass over its output):

    W'[f, ...] = W[f, ...] * a[f]        a = scale / sqrt(var + epsilon)
    b'[f]      = (b[f] - mean[f]) * a[f] + B[f]      (b = 0 without a bias)

The Conv then writes the BN's output directly and the BN node is gone.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .graph import Graph, Node, Value


def fold_batchnorm(graph: Graph) -> Graph:
    """``graph`` with every foldable Conv -> BatchNormalization pair folded (module doc).

    Foldable: the BN is in inference mode with one output, its scale, B, mean and var
    are constants; its input is the output of a Conv (default domain) with constant
    weights (and a constant bias or none), read by nothing else and not a graph output.
    """
    consumers = graph.consumers()
    producer = {o: n for n in graph.nodes for o in n.outputs if o}
    outputs = set(graph.outputs)
    values = dict(graph.values)
    taken = set(values) | {name for n in graph.nodes for name in n.inputs + n.outputs}
    replaced: dict[str, Node] = {}  # conv node name -> folded conv
    removed: set[str] = set()  # BN node names
    for bn in graph.nodes:
        conv = _foldable(graph, bn, producer, consumers, outputs)
        if conv is None or conv.name in replaced:
            continue
        w_name, b_name = _fresh(f"{conv.name}_bn_weights", taken), \
            _fresh(f"{conv.name}_bn_bias", taken)
        weights, bias = _folded(graph, conv, bn)
        w_value = graph.values[conv.inputs[1]]
        values[w_name] = Value(w_name, w_value.dtype, tuple(weights.shape), weights)
        values[b_name] = Value(b_name, w_value.dtype, tuple(bias.shape), bias)
        del values[conv.outputs[0]]  # the conv now writes the BN's output
        replaced[conv.name] = replace(conv, inputs=[conv.inputs[0], w_name, b_name],
                                      outputs=[bn.outputs[0]], attrs=dict(conv.attrs))
        removed.add(bn.name)
    if not replaced:
        return replace(graph, nodes=list(graph.nodes), values=dict(graph.values),
                       inputs=list(graph.inputs), outputs=list(graph.outputs))
    nodes = [replaced.get(n.name, n) for n in graph.nodes if n.name not in removed]
    return replace(graph, nodes=nodes, values=values, inputs=list(graph.inputs),
                   outputs=list(graph.outputs))


def _foldable(graph: Graph, bn: Node, producer: dict[str, Node],
              consumers: dict[str, list[Node]], outputs: set[str]) -> Node | None:
    """The Conv ``bn`` folds into, or None."""
    if bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx"):
        return None
    if int(bn.attrs.get("training_mode", 0)) or int(bn.attrs.get("spatial", 1)) != 1:
        return None
    if set(bn.attrs) - {"epsilon", "momentum", "spatial", "training_mode"}:
        return None  # what the lowering would refuse is left to refuse there
    if any(o for o in bn.outputs[1:]) or len(bn.inputs) != 5 or not all(bn.inputs):
        return None
    if any(graph.values[i].const is None for i in bn.inputs[1:]):
        return None
    x = bn.inputs[0]
    conv = producer.get(x)
    if conv is None or conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx"):
        return None
    if x in outputs or len(consumers.get(x, [])) != 1 or len(conv.inputs) < 2:
        return None
    weights = graph.values[conv.inputs[1]]
    if weights.const is None or not np.issubdtype(weights.const.dtype, np.floating):
        return None
    if len(conv.inputs) > 2 and conv.inputs[2] and graph.values[conv.inputs[2]].const is None:
        return None
    channels = weights.shape[0]
    if any(graph.values[i].shape != (channels,) for i in bn.inputs[1:]):
        return None
    if graph.values[bn.outputs[0]].dtype != weights.dtype:
        return None
    return conv


def _folded(graph: Graph, conv: Node, bn: Node) -> tuple[np.ndarray, np.ndarray]:
    """The new weights and bias, computed in float64 and stored in the weights' dtype."""
    weights = graph.values[conv.inputs[1]].const
    assert weights is not None
    dtype = weights.dtype
    scale, shift, mean, var = (np.asarray(graph.values[i].const, dtype=np.float64)
                               for i in bn.inputs[1:])
    eps = float(bn.attrs.get("epsilon", 1e-5))
    a = scale / np.sqrt(var + eps)
    has_bias = len(conv.inputs) > 2 and conv.inputs[2]
    bias = (np.asarray(graph.values[conv.inputs[2]].const, dtype=np.float64) if has_bias
            else np.zeros_like(a))
    w = weights.astype(np.float64) * a.reshape((-1,) + (1,) * (weights.ndim - 1))
    b = (bias - mean) * a + shift
    return w.astype(dtype), b.astype(dtype)


def _fresh(base: str, taken: set[str]) -> str:
    """``base``, or ``base_<k>``: a value name no node or value of the graph uses."""
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name
