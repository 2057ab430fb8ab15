"""ONNX import, a step of plan.build_group: a fusion group that works pixel by pixel sees
each image as one row of H x W pixels.

Input: the model's :class:`graph.Graph` and one group's nodes. Output: the graph the
group is lowered from: the same graph, or a copy in which the group's images (N, C, H, W)
are (N, C, 1, H*W). The bytes are the same in the plain layout and in the channel-blocked
one (N, C/L, H, W, L), so nothing outside the group notices: the plan, the memory plan,
the other groups and the host steps keep the model's shapes.

Why: a register tile covers a few output pixels along a row (scheduler/register_tile.py),
and where the row's extent is not a multiple of the tile, the rest of the row is a small
tile whose few accumulators leave the FMA units waiting on their latency. At 7 x 7 a row
is 6 pixels and 1 (its 2 accumulators run at about a fifth of the peak). A 1x1
convolution with unit strides and no padding reads every pixel independently, so its
pixels may be numbered along one row: 49 pixels are 8 tiles of 6 and one of 1, 196 are
32 of 6 and one of 4. Measured (one core of the AVX2 machine, a 1x1 conv + bias +
residual + relu reading a channel-blocked input): 512 -> 2048 channels at 7 x 7 ran at
69.7 GFLOP/s, as one row of 49 at 87.1; 1024 -> 256 at 14 x 14 82.3 and 95.0; 128 -> 512
at 28 x 28 60.3 and 78.2; 64 -> 256 at 56 x 56 65.0 and 66.3.

Which groups: every node a 1x1 convolution (any group count) with unit strides and no
padding over a channel-blocked input, or an element-by-element op in PIXELWISE; every
image the nodes read or write (rank 4, not a constant) of one spatial shape with more
than one row; every other operand broadcast over the pixels (its last two dimensions,
aligned to the image's, 1). A convolution over a plain (N, C, H, W) input is left as it
is: there a row of H*W pixels that is a multiple of the vector width would make the
pixels the vector loop (scheduler/blocking.py's good vector loop) instead of the
channels, and change the layout of every value after it (a MobileNetV2 block at 28 x 28
would lose its channel-blocked depthwise convolution); that path is not measured.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

from .graph import Graph, Node, Value

# element-by-element ops whose operands broadcast numpy's way (BatchNormalization's
# per-channel operands are vectors of C by its own definition)
PIXELWISE = {"Relu", "Add", "Sum", "Sub", "Mul", "Div", "Max", "Min", "Clip", "LeakyRelu",
             "PRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Identity",
             "BatchNormalization"}


def pixels_as_rows(graph: Graph, nodes: Sequence[Node], blocked: Collection[str]) -> Graph:
    """``graph`` with the group's images as one row of pixels when the group qualifies
    (module doc; ``blocked``: the values stored channel-blocked), else ``graph``
    itself."""
    images = _images(graph, nodes, blocked)
    if not images:
        return graph
    values = dict(graph.values)
    for name in images:
        v = values[name]
        n, c, h, w = v.shape
        values[name] = replace(v, shape=(n, c, 1, h * w))
    return replace(graph, values=values)


def _images(graph: Graph, nodes: Sequence[Node], blocked: Collection[str]) -> set[str] | None:
    """The names of the group's images, or None when the group does not qualify."""
    if not any(n.op_type == "Conv" for n in nodes):
        return None  # nothing here tiles pixels in registers
    spatial: set[tuple[int, ...]] = set()
    images: set[str] = set()
    for node in nodes:
        if node.domain not in ("", "ai.onnx"):
            return None
        if node.op_type == "Conv":
            if not _pointwise_conv(graph, node) or node.inputs[0] not in blocked:
                return None
            operands = [node.inputs[0]]
        elif node.op_type == "BatchNormalization":
            operands = node.inputs[:1]
        elif node.op_type in PIXELWISE:
            operands = [i for i in node.inputs if i]
        else:
            return None
        for name in operands + [o for o in node.outputs if o]:
            v = graph.values.get(name)
            if v is None:
                return None
            if v.const is None and len(v.shape) == 4 and (
                    name in node.outputs or tuple(v.shape[2:]) != (1, 1)):
                spatial.add(tuple(v.shape[2:]))
                images.add(name)
            elif name in node.outputs or not _broadcast_over_pixels(v):
                return None
    if len(spatial) != 1:
        return None
    (h, w), = spatial
    return images if h > 1 else None


def _pointwise_conv(graph: Graph, node: Node) -> bool:
    """A 2-D convolution whose output pixel (y, x) reads input pixel (y, x) only."""
    x = graph.values.get(node.inputs[0])
    w = graph.values.get(node.inputs[1]) if len(node.inputs) > 1 else None
    if x is None or w is None or len(x.shape) != 4 or len(w.shape) != 4:
        return False
    if tuple(w.shape[2:]) != (1, 1):
        return False
    attrs = node.attrs
    if any(int(s) != 1 for s in attrs.get("strides", [1, 1])):
        return False
    if any(int(p) != 0 for p in attrs.get("pads", [0, 0, 0, 0])):
        return False
    pad = attrs.get("auto_pad", "NOTSET")
    pad = pad.decode() if isinstance(pad, bytes) else pad
    return pad in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")


def _broadcast_over_pixels(v: Value) -> bool:
    """Whether an operand other than an image is the same at every pixel: its
    dimensions aligned to an image's last two are 1 (or absent)."""
    return len(v.shape) <= 4 and all(d == 1 for d in v.shape[-2:])
