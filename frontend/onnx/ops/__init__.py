"""ONNX lowering, the operator table: one function per op type, registered here.

Input: a :class:`NodeContext` (the node, its inputs as builder Tensors, its inferred
output types). Output: statements added to the group's builder and a Tensor bound to each
output. Each op module (elementwise.py, nn.py, shape.py, reduce.py) registers its
lowerings with :func:`lowering`, naming the attributes it implements: any other
attribute of a node, or a value the lowering does not handle, is an UnsupportedError
naming the node, raised before anything is compiled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from polycomp import expr as E
from polycomp.errors import Location, UnsupportedError

from ..builder import GroupBuilder, Tensor, broadcast
from ..graph import Graph, Node
from ..model import NeedsValueError

LoweringFn = Callable[["NodeContext"], None]


@dataclass(frozen=True)
class OpLowering:
    op_type: str
    fn: LoweringFn
    attrs: frozenset[str]
    check: Callable[["NodeContext"], None] | None = None  # refusals before lowering


LOWERINGS: dict[str, OpLowering] = {}

# ops the session runs between groups on numpy views (no copy, no C): a reshape of a
# contiguous buffer is free
HOST_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}
# ops graph.py always evaluates at compile time (every shape is static there): no lowering
FOLDED_OPS = {"Constant", "Shape", "Size"}


def lowering(*op_types: str, attrs: Iterable[str] = (),
             check: Callable[["NodeContext"], None] | None = None) -> Callable[[LoweringFn], LoweringFn]:
    """Register ``fn`` as the lowering of ``op_types``, implementing ``attrs``."""
    def register(fn: LoweringFn) -> LoweringFn:
        for op in op_types:
            LOWERINGS[op] = OpLowering(op, fn, frozenset(attrs), check)
        return fn
    return register


def supported_ops() -> list[str]:
    """The op types of the default ONNX domain polycomp lowers, sorted."""
    _load()
    return sorted(set(LOWERINGS) | HOST_OPS | FOLDED_OPS)


def _load() -> None:
    from . import elementwise, host, nn, reduce, shape  # noqa: F401  (they register)


@dataclass(eq=False)
class NodeContext:
    """What a lowering sees of its node."""

    node: Node
    graph: Graph
    b: GroupBuilder
    tensors: dict[str, Tensor]  # value name -> Tensor in this group
    produced: dict[str, Tensor] = field(default_factory=dict)

    # ------------------------------------------------------------------ node
    @property
    def location(self) -> Location:
        return self.node.location

    @property
    def opset(self) -> int:
        return self.graph.opset

    def attr(self, name: str, default: object = None) -> object:
        value = self.node.attrs.get(name, default)
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        return value

    def unsupported(self, what: str, hint: str | None = None) -> UnsupportedError:
        return UnsupportedError(f"node '{self.node.name}' ({self.node.op_type}): {what}",
                                self.location, hint=hint)

    # ------------------------------------------------------------------ inputs
    @property
    def n_inputs(self) -> int:
        return len(self.node.inputs)

    def has_input(self, k: int) -> bool:
        return k < len(self.node.inputs) and self.node.inputs[k] != ""

    def input(self, k: int) -> Tensor:
        if not self.has_input(k):
            raise self.unsupported(f"input {k} is missing")
        return self.tensors[self.node.inputs[k]]

    def optional(self, k: int) -> Tensor | None:
        return self.input(k) if self.has_input(k) else None

    def constant(self, k: int, what: str = "") -> np.ndarray | None:
        """The compile-time value of input k (None when the input is omitted)."""
        if not self.has_input(k):
            return None
        value = self.graph.values[self.node.inputs[k]].const
        if value is None:
            raise NeedsValueError(
                f"node '{self.node.name}' ({self.node.op_type}): input {k}"
                f"{' (' + what + ')' if what else ''} must be known at compile time",
                self.node.inputs[k], self.location,
                hint="a shape, axis or pad input computed from large or float tensors is "
                     "not supported (small integer graph inputs are compiled in per value)")
        return np.asarray(value)

    def table(self, data: np.ndarray, dtype: str) -> Tensor:
        """A compile-time table as an input array of the group (e.g. source indices of a
        Resize, read as a data-dependent index)."""
        return self.b.table(data, dtype, self.node.name)

    def is_constant(self, k: int) -> bool:
        return self.has_input(k) and self.graph.values[self.node.inputs[k]].const is not None

    # ------------------------------------------------------------------ outputs
    def out_dtype(self, k: int = 0) -> str:
        return self.graph.values[self.node.outputs[k]].dtype

    def out_shape(self, k: int = 0) -> tuple[int, ...]:
        return self.graph.values[self.node.outputs[k]].shape

    def has_output(self, k: int) -> bool:
        return k < len(self.node.outputs) and self.node.outputs[k] != ""

    def output(self, k: int = 0) -> Tensor:
        """A fresh array for output k (its inferred dtype and shape), bound to it."""
        name = self.node.outputs[k]
        tensor = self.b.new_array(name, self.out_dtype(k), self.out_shape(k))
        self.bind(k, tensor)
        return tensor

    def bind(self, k: int, tensor: Tensor) -> None:
        """Output k is ``tensor`` (e.g. a view of an input)."""
        name = self.node.outputs[k]
        self.tensors[name] = tensor
        self.produced[name] = tensor

    # ------------------------------------------------------------------ common shapes
    def iterators(self, n: int) -> tuple[E.Iter, ...]:
        return GroupBuilder.iterators(n)

    def map_elements(self, fn: Callable[..., E.Expr], inputs: Sequence[Tensor], k: int = 0,
                     ) -> Tensor:
        """Output k = fn(*inputs) element by element, with numpy broadcasting."""
        shape = self.out_shape(k)
        out = self.output(k)
        i = self.iterators(len(shape))
        value = fn(*[broadcast(t, i) for t in inputs])
        self.b.assign(out[i], value, shape, location=self.location)
        return out


# the ops that may read or write a value of a storage format (bfloat16, float8, int4, ...:
# graph.ELEM_FORMATS): they convert it; every other op would compute with its bit
# patterns. The host views (HOST_OPS) move such values too: they never look at elements.
FORMAT_OPS = {"Cast", "CastLike"}


def lower_node(ctx: NodeContext) -> None:
    """Check the node against its lowering's attributes, then lower it."""
    entry = LOWERINGS.get(ctx.node.op_type)
    if entry is None or ctx.node.domain not in ("", "ai.onnx"):
        raise unsupported_op(ctx.node)
    check_node(ctx.node, ctx)
    check_formats(ctx.node, ctx.graph)
    entry.fn(ctx)


def check_formats(node: Node, graph: Graph) -> None:
    """A node outside FORMAT_OPS touching a storage-format value is refused by name."""
    if node.op_type in FORMAT_OPS:
        return
    for kind, names in (("input", node.inputs), ("output", node.outputs)):
        for name in names:
            value = graph.values.get(name) if name else None
            if value is not None and value.format is not None:
                raise UnsupportedError(  # the format's name upper-cased is ONNX's
                    f"node '{node.name}' ({node.op_type}): {kind} '{name}' has element type "
                    f"{value.format.upper()}, which polycomp only converts", node.location,
                    hint="polycomp stores " + value.format + " values and converts them "
                         "(Cast, CastLike); cast to a type it computes with first")


def check_node(node: Node, ctx: NodeContext | None = None) -> None:
    """Refuse what the lowering does not implement, before anything is compiled."""
    _load()
    if node.op_type in HOST_OPS and node.domain in ("", "ai.onnx"):
        return
    entry = LOWERINGS.get(node.op_type)
    if entry is None or node.domain not in ("", "ai.onnx"):
        raise unsupported_op(node)
    extra = sorted(set(node.attrs) - entry.attrs)
    if extra:
        raise UnsupportedError(
            f"node '{node.name}' ({node.op_type}): attribute '{extra[0]}' is not supported",
            node.location, hint=f"{node.op_type} is lowered with attributes "
                                f"{', '.join(sorted(entry.attrs)) or '(none)'}")
    if entry.check is not None and ctx is not None:
        entry.check(ctx)


def unsupported_op(node: Node) -> UnsupportedError:
    domain = f" of domain '{node.domain}'" if node.domain not in ("", "ai.onnx") else ""
    return UnsupportedError(f"node '{node.name}': op type '{node.op_type}'{domain} is not "
                            "supported", node.location,
                            hint="polycomp.onnx.supported_ops() lists the supported op types")


def elem_const(value: float | int | bool, dtype: str) -> E.Const:
    """A literal of ``dtype``."""
    from ..builder import const
    return const(value, dtype)


def call(func: str, *args: E.Expr, dtype: str | None = None) -> E.Expr:
    return E.Call(func, tuple(args), dtype or args[0].dtype)
