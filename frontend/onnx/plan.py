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

from polycomp.scheduler import cache_model as CM
from polycomp.scheduler.blocking import block_channels

from .builder import GroupBuilder, Tensor, blocked_shape
from .graph import Graph, Node
from .ops import HOST_OPS, NodeContext, check_node, lower_node
from .ops.host import HOST_ATTRS
from .pixel_rows import pixels_as_rows
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
    # values stored channel-blocked between groups -> the block (see build_plan)
    layouts: dict[str, int] = field(default_factory=dict)

    @property
    def groups(self) -> list[GroupStep]:
        return [s for s in self.steps if isinstance(s, GroupStep)]

    def stored_shape(self, value: str) -> tuple[int, ...]:
        shape = self.graph.values[value].shape
        block = self.layouts.get(value)
        return blocked_shape(shape, block) if block else tuple(shape)


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
    layouts: dict[str, int] = {}
    for k, part in enumerate(parts):
        if isinstance(part, Node):
            steps.append(HostStep(part))
            continue
        inside = {n.name for n in part}
        exported = {o for n in part for o in n.outputs if o and (
            o in outputs or any(c.name not in inside for c in consumers.get(o, [])))}
        step = build_group(graph, part, exported, f"g{k}", layouts)
        relaid = _blocked_outputs(graph, step, part, exported, consumers, outputs, layouts)
        if relaid:
            layouts.update(relaid)
            step = build_group(graph, part, exported, f"g{k}", layouts)
        steps.append(step)
    return ModelPlan(graph, steps, layouts)


def _blocked_outputs(graph: Graph, step: GroupStep, nodes: Sequence[Node], exported: set[str],
                     consumers: dict, outputs: set[str], layouts: dict[str, int]
                     ) -> dict[str, int]:
    """The values this group should hand on channel-blocked: when channel blocking
    blocks its convolution (scheduler/blocking.py), its output comes out of the
    reduction as (n, c / L, h, w, c % L); stored in that layout it is written in one
    streaming pass, where the plain layout costs a transposition that took four times
    as long as a 1x1 convolution of 24 channels itself (MobileNetV2's expansion at
    56 x 56). Only float32 4-D values with at least L channels (padding at most a
    third more), read by nodes of other groups only (no host view, no graph output:
    those see the bytes as they are). A depthwise convolution of a blocked input keeps
    the layout (it accumulates blocked: ops/nn.py)."""
    if step.program is None:
        return {}
    lanes = CM.simd_lanes(4)
    wanted = {}
    for value in exported:
        v = graph.values[value]
        if value in outputs or v.dtype != "float32" or len(v.shape) != 4:
            continue
        channels = v.shape[1]
        padded = -(-channels // lanes) * lanes
        if channels < lanes or 3 * padded > 4 * channels:
            continue
        readers = consumers.get(value, [])
        if not readers or not all(_reads_blocked_well(graph, c) for c in readers):
            continue
        wanted[value] = lanes
    if not wanted:
        return {}
    if _keeps_channel_blocks(graph, nodes[0], layouts, lanes):
        return wanted
    if any(n.op_type == "Conv" for n in nodes) and \
            any("blocked" in n for n in block_channels(step.program).notes):
        return wanted
    return {}


# ops whose lowering reads a channel-blocked input as well as a plain one: a channel's
# elements stay unit-stride, or its index is a whole-block offset (a grouped convolution
# of 68 channels per group, g*68 + c, divides into the block index in every inner step:
# ShuffleNet's ran eight times slower on a blocked input)
READS_BLOCKED = {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
                 "Concat", "Add", "Sum", "Sub", "Mul", "Relu", "Clip", "LeakyRelu", "PRelu",
                 "Sigmoid", "HardSigmoid", "HardSwish", "BatchNormalization"}


def _reads_blocked_well(graph: Graph, node: Node) -> bool:
    if node.op_type not in READS_BLOCKED or node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type == "Conv":
        group = int(node.attrs.get("group", 1))
        return group == 1 or group == graph.values[node.inputs[0]].shape[1]
    if node.op_type in ("MaxPool", "AveragePool"):
        # a pool accumulates in its input's layout, so a blocked input is read well only
        # when its output may stay blocked too: else the pool's window loop reads blocked
        # and writes plain, a transposition gcc left scalar (ShuffleNet's first max pool,
        # read by grouped convs: 0.35 ms, onnxruntime 0.11; the model 5.17 -> 4.95 ms)
        out = node.outputs[0]
        readers = graph.consumers().get(out, [])
        if len([o for o in node.outputs if o]) != 1:  # a max pool's indices: plain
            return False
        return bool(readers) and out not in graph.outputs and all(
            _reads_blocked_well(graph, reader) for reader in readers)
    return True


def _keeps_channel_blocks(graph: Graph, anchor: Node, layouts: dict[str, int],
                          lanes: int) -> bool:
    """Whether the group's first node works channel by channel on a blocked input, so
    that its output is best stored blocked as well: a depthwise convolution or a pooling
    (they accumulate in the input's layout, ops/nn.py), or a Concat along the channels
    of blocked inputs whose channel counts are whole blocks (a copy of whole blocks)."""
    first = anchor.inputs[0] if anchor.inputs else ""
    if anchor.op_type in ("MaxPool", "AveragePool"):
        return first in layouts and len(anchor.outputs) == 1
    if anchor.op_type == "Conv":
        channels = graph.values[first].shape[1] if first in graph.values else -1
        return first in layouts and int(anchor.attrs.get("group", 1)) == channels \
            == graph.values[anchor.outputs[0]].shape[1]
    if anchor.op_type == "Concat":
        rank = len(graph.values[anchor.outputs[0]].shape)
        axis = int(anchor.attrs.get("axis", 0))
        return (axis % rank == 1 if rank else False) and all(
            i in layouts and graph.values[i].shape[1] % lanes == 0 for i in anchor.inputs)
    return False


def build_group(graph: Graph, nodes: Sequence[Node], exported: set[str], name: str,
                layouts: dict[str, int] | None = None) -> GroupStep:
    b = GroupBuilder("onnx_group")  # one name: identical groups give identical Programs
    b.layouts = dict(layouts or {})
    graph = pixels_as_rows(graph, nodes, b.layouts)
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
        if not b.is_stored_as(t) or b.arrays[t.array].role == "input":
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
