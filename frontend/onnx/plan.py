"""ONNX import, step 3: a static graph -> fusion groups -> one Program per group.

Input: a :class:`graph.Graph` (one set of input shapes). Output: a :class:`ModelPlan`, the
steps a session runs in order: a :class:`GroupStep` per fusion group (a Program and which
graph values go in and come out) and a :class:`HostStep` per view op between groups.

Grouping: each compute-heavy node (convolution, matmul, pooling) starts a group, and the
nodes that consume what the open group produces join it (bias, activation, residual add,
the statements of a normalisation), up to ``MAX_NODES``. The scheduler then decides the
fusion inside a group from the exact dependences; groups keep each Program small (the
schedulers' cost grows faster than linearly with statements).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from polycomp import expr as E
from polycomp.errors import Location, UnsupportedError
from polycomp.ir import Program

from .builder import GroupBuilder, Tensor
from .graph import Graph, Node
from .ops import HOST_OPS, NodeContext, check_node, lower_node
from .ops.host import HOST_ATTRS
from .rewrite import fold_batchnorm

# a node of these types starts a new group: its loops are the group's main nest
ANCHORS = {"Conv", "ConvTranspose", "Gemm", "MatMul", "MaxPool", "AveragePool", "LRN",
           "GlobalAveragePool", "GlobalMaxPool", "Resize", "Gather", "Concat"}
MAX_NODES = 8
INLINE_LIMIT = 1  # constants of at most this many elements become literals


@dataclass
class GroupStep:
    name: str
    nodes: list[Node]
    program: Program | None  # None when the group computes nothing (empty tensors)
    inputs: list[tuple[str, str]]  # (array, value) in the Program's input order
    outputs: list[tuple[str, str]]  # (array, value)
    empty_outputs: list[str] = field(default_factory=list)  # values with no elements
    tables: dict[str, np.ndarray] = field(default_factory=dict)  # builder.table data
    signature: str = ""  # GroupBuilder.signature: the compile cache's key for the group
    # the constant inputs whose work was split off (frontend/onnx/prepack.py), "" if none
    prepacked: str = ""


@dataclass
class HostStep:
    node: Node


@dataclass
class ModelPlan:
    graph: Graph
    steps: list[GroupStep | HostStep]

    @property
    def groups(self) -> list[GroupStep]:
        return [s for s in self.steps if isinstance(s, GroupStep)]


def check_supported(graph: Graph) -> None:
    """Every node lowerable, before anything is compiled."""
    for node in graph.nodes:
        if node.op_type in HOST_OPS and node.domain in ("", "ai.onnx"):
            extra = sorted(set(node.attrs) - HOST_ATTRS[node.op_type])
            if extra:
                raise UnsupportedError(f"node '{node.name}' ({node.op_type}): attribute "
                                       f"'{extra[0]}' is not supported", node.location)
            if node.op_type == "Dropout" and len(node.inputs) > 2 and node.inputs[2]:
                mode = graph.values[node.inputs[2]].const
                if mode is None or bool(np.asarray(mode).reshape(-1)[0]):
                    raise UnsupportedError(f"node '{node.name}' (Dropout): training mode is "
                                           "not supported", node.location,
                                           hint="polycomp compiles models for inference")
            continue
        check_node(node)


def partition(graph: Graph) -> list[list[Node] | Node]:
    """Groups of nodes (lists) and host nodes, in an order that respects the data flow."""
    out: list[list[Node] | Node] = []
    current: list[Node] = []
    produced: set[str] = set()
    hosted: set[str] = set()  # outputs of host nodes met while the open group grew
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    deferred: dict[str, Node] = {}  # value -> a view node moved into its consumer's group
    for node in graph.nodes:
        if node.op_type in HOST_OPS:
            out.append(node)
            hosted.update(node.outputs)
            continue
        if _deferrable(node, consumers, outputs):
            deferred[node.outputs[0]] = node
            continue
        before = _pull_deferred(node, deferred)
        runtime_inputs = [i for n in before + [node] for i in n.inputs
                          if i and graph.values[i].const is None and i not in deferred]
        # a node reading a host node's output that depends on the open group cannot
        # join it: the host node runs after the whole group
        joins = (current and node.op_type not in ANCHORS
                 and len(current) + len(before) < MAX_NODES
                 and any(i in produced for i in runtime_inputs)
                 and not any(i in hosted for i in runtime_inputs))
        if not joins:
            if current:
                out.append(current)
            current, produced, hosted = [], set(), set()
        for n in before + [node]:
            current.append(n)
            produced.update(o for o in n.outputs if o)
    if current:
        out.append(current)
    return _topological(out)


# a Transpose read by one compute node becomes a view in that node's group (an index
# permutation of its accesses) instead of a copy of its own
VIEW_OPS = {"Transpose"}


def _deferrable(node: Node, consumers: dict[str, list[Node]], outputs: set[str]) -> bool:
    if node.op_type not in VIEW_OPS or len(node.outputs) != 1 or node.outputs[0] in outputs:
        return False
    users = consumers.get(node.outputs[0], [])
    return len(users) == 1 and users[0].op_type not in HOST_OPS


def _pull_deferred(node: Node, deferred: dict[str, Node]) -> list[Node]:
    """The deferred view nodes ``node`` reads (and those they read), producers first."""
    found: list[Node] = []
    for i in node.inputs:
        producer = deferred.pop(i, None)
        if producer is not None:
            found += _pull_deferred(producer, deferred) + [producer]
    return found


def _topological(parts: list[list[Node] | Node]) -> list[list[Node] | Node]:
    """Order parts so that each runs after the producers of its inputs (splitting a
    group where one of its nodes needs a later part's output)."""
    producer: dict[str, int] = {}
    for k, part in enumerate(parts):
        for node in ([part] if isinstance(part, Node) else part):
            for o in node.outputs:
                producer[o] = k
    done: set[int] = set()
    order: list[list[Node] | Node] = []

    def visit(k: int, stack: set[int]) -> None:
        if k in done:
            return
        part = parts[k]
        nodes = [part] if isinstance(part, Node) else part
        inside = {o for n in nodes for o in n.outputs}
        for n in nodes:
            for i in n.inputs:
                if i and i in producer and i not in inside and producer[i] != k:
                    if producer[i] in stack:
                        raise UnsupportedError("internal grouping cycle")  # pragma: no cover
                    visit(producer[i], stack | {k})
        done.add(k)
        order.append(part)

    for k in range(len(parts)):
        visit(k, set())
    return order


def build_plan(graph: Graph) -> ModelPlan:
    check_supported(graph)
    graph = fold_batchnorm(graph)  # BN behind a conv: folded into its weights at load time
    parts = partition(graph)
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    steps: list[GroupStep | HostStep] = []
    for k, part in enumerate(parts):
        if isinstance(part, Node):
            steps.append(HostStep(part))
            continue
        inside = {n.name for n in part}
        exported = {o for n in part for o in n.outputs if o and (
            o in outputs or any(c.name not in inside for c in consumers.get(o, [])))}
        steps.append(build_group(graph, part, exported, f"g{k}"))
    return ModelPlan(graph, steps)


def build_group(graph: Graph, nodes: Sequence[Node], exported: set[str], name: str) -> GroupStep:
    b = GroupBuilder("onnx_group")  # one name: identical groups give identical Programs
    tensors: dict[str, Tensor] = {}
    inputs: list[tuple[str, str]] = []
    empty = [v for v in exported if 0 in graph.values[v].shape]
    for node in nodes:
        for value in node.inputs:
            if not value or value in tensors:
                continue
            v = graph.values[value]
            if v.const is not None and (v.const.size <= INLINE_LIMIT and v.const.size > 0):
                tensors[value] = Tensor(value, v.dtype, v.shape, None, None, v.const)
                continue
            t = b.input(value, v.dtype, v.shape, v.const)
            tensors[value] = t
            inputs.append((t.array, value))  # type: ignore[arg-type]
        ctx = NodeContext(node, graph, b, tensors)
        lower_node(ctx)
        for o in node.outputs:
            if o and o not in tensors:
                raise UnsupportedError(f"node '{node.name}' ({node.op_type}): output '{o}' is "
                                       "not computed", node.location)
    outs: list[tuple[str, str]] = []
    for value in sorted(exported, key=lambda v: [o for n in nodes for o in n.outputs].index(v)):
        if value in empty:
            continue
        t = tensors[value]
        if t.array is None or t.view is not None or b.arrays[t.array].role == "input":
            t = _materialise(b, graph, t, value)
            tensors[value] = t
        b.export(t)
        outs.append((t.array, value))  # type: ignore[arg-type]
    if not b.statements:
        return GroupStep(name, list(nodes), None, [], [], sorted(exported))
    program = b.program()
    inputs += [(a, v) for a, d in b.arrays.items() if (v := d.value_name) in b.tables]
    signature = b.signature() + "\ninputs " + ",".join(a for a, _ in inputs) + \
        "\noutputs " + ",".join(a for a, _ in outs)
    return GroupStep(name, list(nodes), program, inputs, outs, empty, dict(b.tables), signature)


def _materialise(b: GroupBuilder, graph: Graph, t: Tensor, value: str) -> Tensor:
    """A copy of a view, input or constant into an array of its own (to export it)."""
    out = b.new_array(value, t.dtype, t.shape)
    i = GroupBuilder.iterators(len(t.shape))
    b.assign(out[i], t[i], t.shape)
    return out


def location_of(node: Node) -> Location:
    return node.location


__all__ = ["ModelPlan", "GroupStep", "HostStep", "build_plan", "partition", "E"]
