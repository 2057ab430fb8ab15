"""ONNX lowering: the compute-heavy operators, each a reduction statement over its window.

Conv, ConvTranspose, Gemm, MatMul, the pools, LRN and the normalisations. Each is written
the way a TC author writes it, since that is the shape the scheduler was tuned on
(scheduler/blocking.py blocks it, intra-tile vectorises it): an init statement, then one
``+=`` (or ``max=``) statement over the output iterators followed by the reduction
iterators, whose value is the product of two plain accesses:

    O[n, f, y, x] = 0
    O[n, f, y, x] += X[n, c, y*s + ky*d - p, x*s + kx*d - p] * W[f, c, ky, kx]
        where 0 <= y*s + ky*d - p < H and 0 <= x*s + kx*d - p < W

Padding is a ``where`` on the input index, emitted only for the sides where a window
can stick out (pools, ConvTranspose), except in Conv, which by default reads a
zero-padded copy of its input made in the same group (PAD_BY_COPY, see _padded: a box
domain is what channel blocking takes, and it was faster on every measured ResNet and
MobileNet shape but one). What does not fit the product (a bias, Gemm's alpha, an
average's divisor) is an element-by-element statement after the reduction, which the
scheduler fuses with it. Output shapes come from shape inference (ctx.out_shape); the
window arithmetic here is checked against them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from polycomp import expr as E
from polycomp.scheduler import cache_model as CM
from polycomp.scheduler.short_sums import MAX_CELLS as SHORT_SUM_CELLS
from polycomp.scheduler.short_sums import MAX_TERMS as SHORT_SUM_TERMS

from ..builder import Tensor, broadcast
from . import NodeContext, call, elem_const, lowering

IDX = E.INDEX_DTYPE
AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


# ----------------------------------------------------------------------------- index helpers

def _c(value: int) -> E.Const:
    return E.Const(int(value), IDX)


def _linear(terms: Sequence[tuple[E.Expr, int]], offset: int = 0) -> E.Expr:
    """sum(coef * it) + offset as an index expression (affine: constant coefficients)."""
    out: E.Expr | None = None
    for it, coef in terms:
        if coef == 0 or (isinstance(it, E.Const) and it.value == 0):
            continue
        term = it if coef == 1 else E.Binary("mul", _c(coef), it, IDX)
        out = term if out is None else E.Binary("add", out, term, IDX)
    if out is None:
        return _c(offset)
    if offset > 0:
        return E.Binary("add", out, _c(offset), IDX)
    if offset < 0:
        return E.Binary("sub", out, _c(-offset), IDX)
    return out


def _cmp(op: str, lhs: E.Expr, rhs: int) -> E.Expr:
    return E.Binary(op, lhs, _c(rhs), "bool")


def _all(conds: Sequence[E.Expr]) -> E.Expr | None:
    out: E.Expr | None = None
    for c in conds:
        out = c if out is None else E.Binary("and", out, c, "bool")
    return out


def _iters(n: int) -> tuple[E.Iter, ...]:
    return tuple(E.Iter(f"i{k}") for k in range(n))


def _mul(a: E.Expr, b: E.Expr, dtype: str) -> E.Expr:
    return E.Binary("mul", a, b, dtype)


# ----------------------------------------------------------------------------- attributes

def _ints(ctx: NodeContext, name: str, n: int, default: int) -> list[int]:
    value = ctx.attr(name)
    if value is None:
        return [default] * n
    out = [int(v) for v in value]  # type: ignore[union-attr]
    if len(out) != n:
        raise ctx.unsupported(f"{name} has {len(out)} values for {n} spatial dimensions")
    return out


def _int(ctx: NodeContext, name: str, default: int) -> int:
    return int(ctx.attr(name, default))  # type: ignore[call-overload]


def _float(ctx: NodeContext, name: str, default: float) -> float:
    return float(ctx.attr(name, default))  # type: ignore[arg-type]


def _require_float(ctx: NodeContext, dtype: str) -> None:
    if not E.is_float(dtype):
        raise ctx.unsupported(f"{ctx.node.op_type} of {dtype} values",
                              hint=f"{ctx.node.op_type} is lowered for float types")


def _kernel(ctx: NodeContext, weights: Sequence[int] | None, rank: int) -> list[int]:
    """The kernel's spatial extents: the weights' (Conv), checked against kernel_shape."""
    if weights is None:
        if ctx.attr("kernel_shape") is None:
            raise ctx.unsupported("kernel_shape is missing")
        kernel = _ints(ctx, "kernel_shape", rank, 1)
    else:
        kernel = [int(k) for k in weights]
        if ctx.attr("kernel_shape") is not None:
            declared = _ints(ctx, "kernel_shape", rank, 1)
            if declared != kernel:
                raise ctx.unsupported(f"kernel_shape {declared} differs from the weights' "
                                      f"spatial shape {kernel}")
    if any(k < 1 for k in kernel):
        raise ctx.unsupported(f"kernel_shape {kernel}")
    return kernel


@dataclass(frozen=True)
class Axis:
    """One spatial dimension of a sliding window: output index o reads input indices
    o*stride + k*dilation - begin for k in [0, kernel)."""

    size: int  # input extent
    out: int  # output extent
    kernel: int
    stride: int
    dilation: int
    begin: int  # padding before
    end: int  # padding after

    def index(self, o: E.Expr, k: E.Expr) -> E.Expr:
        return _linear([(o, self.stride), (k, self.dilation)], -self.begin)

    @property
    def span_end(self) -> int:
        """One past the last input index any window reads, counted from -begin."""
        return (self.out - 1) * self.stride + (self.kernel - 1) * self.dilation + 1

    @property
    def sticks_out(self) -> bool:
        return self.begin > 0 or self.span_end - self.begin > self.size

    def bounds(self, o: E.Expr, k: E.Expr) -> list[E.Expr]:
        """0 <= index < size, each side only where some window crosses it."""
        conds = []
        if self.begin > 0:
            conds.append(_cmp("ge", self.index(o, k), 0))
        if self.span_end - self.begin > self.size:
            conds.append(_cmp("lt", self.index(o, k), self.size))
        return conds


def _window(ctx: NodeContext, spatial: Sequence[int], kernel: Sequence[int],
            out: Sequence[int]) -> list[Axis]:
    """The window of each spatial dimension (strides, dilations, pads or auto_pad)."""
    r = len(spatial)
    strides = _ints(ctx, "strides", r, 1)
    dilations = _ints(ctx, "dilations", r, 1)
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if auto_pad not in AUTO_PADS:
        raise ctx.unsupported(f"auto_pad={auto_pad!r}", hint="auto_pad is one of "
                              + ", ".join(AUTO_PADS))
    if any(s < 1 for s in strides) or any(d < 1 for d in dilations):
        raise ctx.unsupported(f"strides {strides} / dilations {dilations}",
                              hint="strides and dilations are at least 1")
    if auto_pad == "NOTSET":
        pads = _ints(ctx, "pads", 2 * r, 0)
        if any(p < 0 for p in pads):
            raise ctx.unsupported(f"negative pads {pads}")
        begins, ends = pads[:r], pads[r:]
    else:
        begins, ends = [], []
        for j in range(r):
            span = (kernel[j] - 1) * dilations[j] + 1
            total = max(0, (out[j] - 1) * strides[j] + span - spatial[j]) \
                if auto_pad != "VALID" else 0
            begin = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            begins.append(begin)
            ends.append(total - begin)
    return [Axis(int(spatial[j]), int(out[j]), int(kernel[j]), strides[j], dilations[j],
                 begins[j], ends[j]) for j in range(r)]


def _check_extents(ctx: NodeContext, axes: Sequence[Axis], ceil_mode: bool = False) -> None:
    """The inferred output extents are the ones the window arithmetic gives (a
    disagreement would be a wrong answer: refuse it)."""
    for a in axes:
        span = (a.kernel - 1) * a.dilation + 1
        room = a.size + a.begin + a.end - span
        want = room // a.stride + 1 if room >= 0 else 0
        if ceil_mode:
            # rounded up, but a last window that would start in the end padding is
            # dropped (onnxruntime, onnx's reference); onnx's shape inference keeps it
            ceil = -(-room // a.stride) + 1 if room >= 0 else 0
            want = ceil - 1 if ceil > 0 and (ceil - 1) * a.stride >= a.size + a.begin else ceil
            if a.out == ceil != want:
                raise ctx.unsupported(
                    f"ceil_mode with a last window starting in the end padding (input "
                    f"{a.size}, kernel {a.kernel}, stride {a.stride}, pads {a.begin}+{a.end})",
                    hint=f"onnx's shape inference gives {ceil} outputs, onnxruntime {want}; "
                         "reduce the end padding")
        if a.out != want:
            raise ctx.unsupported(f"output extent {a.out} does not match the window (input "
                                  f"{a.size}, kernel {a.kernel}, stride {a.stride}, dilation "
                                  f"{a.dilation}, pads {a.begin}+{a.end})")


# ----------------------------------------------------------------------------- convolution

def _channels(group: int, out_per_group: int, in_per_group: int, iters: Sequence[E.Iter],
              reduce_c: E.Iter | None) -> tuple[list[int], E.Expr, E.Expr, E.Expr]:
    """The channel iterators' extents and, from ``iters`` (those iterators) and the
    reduction iterator ``reduce_c``: (extents, output channel, input channel, weights'
    channel-in-group index). One iterator f unless groups hold several output channels
    each (then g, m with f = g*M + m, so that no index needs a division)."""
    c = reduce_c if reduce_c is not None else _c(0)
    if group == 1:
        (f,) = iters
        return [out_per_group], f, c, c
    if out_per_group == 1:  # depthwise and the like: the group is the output channel
        (f,) = iters
        return [group], f, _linear([(f, in_per_group), (c, 1)]), c
    g, m = iters
    return ([group, out_per_group], _linear([(g, out_per_group), (m, 1)]),
            _linear([(g, in_per_group), (c, 1)]), c)


def _conv_iterators(n_batch: int, group: int, per_group: int, c_group: int,
                    out: Sequence[int], kernel: Sequence[int]):
    """The iterators of a (transposed) convolution's reduction: n, the channel(s), the
    output positions, then the input channel in its group (kept when it has more than one
    value, or without groups: a plain W[f, c, ...] for blocking) and the kernel offsets.
    Returns (n, channel iterators, positions, kernel offsets, extents, output channel,
    input channel, weights' channel-in-group index, whether c is kept)."""
    r = len(out)
    n_chan = 1 if group == 1 or per_group == 1 else 2
    keep_c = group == 1 or c_group > 1
    n_out = 1 + n_chan + r
    it = _iters(n_out + int(keep_c) + r)
    n, chans, pos = it[0], it[1:1 + n_chan], it[1 + n_chan:n_out]
    c = it[n_out] if keep_c else None
    ks = it[n_out + int(keep_c):]
    chan_extents, f, cin, wc = _channels(group, per_group, c_group, chans, c)
    extents = [n_batch] + chan_extents + list(out) + ([c_group] if keep_c else []) + list(kernel)
    return n, chans, pos, ks, extents, f, cin, wc, keep_c


def _accumulate(ctx: NodeContext, shape: Sequence[int], dtype: str, epilogue: bool,
                block: int | None = None) -> Tensor:
    """The reduction's target: the output itself, or a temporary the epilogue reads
    (channel-blocked by ``block``)."""
    if not epilogue and not block:
        return ctx.output(0)
    return ctx.b.new_array(ctx.node.outputs[0] + "#acc", dtype, shape, block=block)


def _init(ctx: NodeContext, target: Tensor, value: E.Expr) -> None:
    i = _iters(target.rank)
    ctx.b.assign(target[i], value, target.shape, location=ctx.location)


def _add_bias(ctx: NodeContext, acc: Tensor, bias: Tensor) -> None:
    """output[n, f, ...] = acc[n, f, ...] + bias[f]."""
    out = ctx.output(0)
    i = _iters(out.rank)
    total = E.Binary("add", acc[i], bias[(i[1],)], acc.dtype)  # in the accumulator's type
    ctx.b.assign(out[i], total, out.shape, location=ctx.location)


def _has_bias(bias: Tensor) -> bool:
    """A bias that is not a constant 0."""
    return not (bias.value is not None and bias.is_uniform_constant()
                and float(bias.value.reshape(-1)[0]) == 0.0)


# Conv pads with a copy (see _padded) rather than with `where` conditions on the window
PAD_BY_COPY = True


def _padded(ctx: NodeContext, x: Tensor, axes: list[Axis]) -> tuple[Tensor, list[Axis]]:
    """``x`` copied into a zero-filled array that every window fits in, and the windows
    on it: the convolution's domain is then a box. A box is what scheduler/blocking.py
    blocks (a `where` on the window makes the domain a polyhedron it leaves alone), and
    it keeps the intra-tile pass off a known failure (report: a simd loop over kx with
    row and column copies unrolled below it, whose bounds then depend on kx). The copy
    is one pass over the input; a 3x3 convolution reads each element 9*F times."""
    if not any(a.sticks_out for a in axes):
        return x, axes
    extents = [a.span_end for a in axes]
    # a channel-blocked input gets a padded copy in its layout: a copy between layouts
    # is a transposition, a copy within one streams
    padded = ctx.b.new_array(ctx.node.outputs[0] + "#padded", x.dtype,
                             tuple(x.shape[:2]) + tuple(extents), block=ctx.b.blocked(x))
    _init(ctx, padded, elem_const(0, x.dtype))
    i = _iters(x.rank)
    inner = [min(a.size, e - a.begin) for a, e in zip(axes, extents)]
    shifted = tuple(_linear([(o, 1)], a.begin) for o, a in zip(i[2:], axes))
    ctx.b.assign(padded[i[:2] + shifted], x[i], list(x.shape[:2]) + inner,
                 location=ctx.location)
    return padded, [Axis(e, a.out, a.kernel, a.stride, a.dilation, 0, 0)
                    for a, e in zip(axes, extents)]


def _short_depthwise(ctx: NodeContext, x: Tensor, w: Tensor, group: int, m_out: int,
                     kernel: Sequence[int], dtype: str, axes: Sequence[Axis]) -> bool:
    """A depthwise convolution whose few taps scheduler/short_sums.py writes out, each
    output one sum over its window: it reads its input unpadded (channel-blocked or
    NCHW), the window's bounds as its domain (the short sum splits the border off into
    statements of their own, so the interior runs without guards; at most
    short_sums.MAX_CELLS of them, else the copy stays). A padded copy cost as much as
    the taps themselves: MobileNetV2's 3x3 depthwise convolution over 144 channels at
    56 x 56 took 51 us to pad and 52 us to compute on 2 threads."""
    return (group == m_out == x.shape[1]
            and w.value is not None and dtype in ("float32", "float64")
            and 2 <= math.prod(kernel) <= SHORT_SUM_TERMS
            and math.prod(_tap_sets(a) for a in axes) <= SHORT_SUM_CELLS)


def _tap_sets(a: Axis) -> int:
    """How many different sets of taps the outputs along one axis take (1: no output's
    window sticks out; 3: a 3-wide window padded by 1 on both sides)."""
    return len({tuple(k for k in range(a.kernel)
                      if 0 <= o * a.stride + k * a.dilation - a.begin < a.size)
                for o in range(a.out)})


def _conv_operands(ctx: NodeContext) -> tuple[Tensor, Tensor, Tensor | None, str, int]:
    """(X, W, optional bias, dtype, spatial rank) of a Conv or ConvTranspose, checked."""
    x, w, bias = ctx.input(0), ctx.input(1), ctx.optional(2)
    dtype = ctx.out_dtype()
    _require_float(ctx, dtype)
    r = x.rank - 2
    if r < 1 or w.rank != x.rank:
        raise ctx.unsupported(f"input of rank {x.rank} with weights of rank {w.rank}")
    return x, w, bias, dtype, r


@lowering("Conv", attrs=("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"))
def _conv(ctx: NodeContext) -> None:
    x, w, bias, dtype, r = _conv_operands(ctx)
    n_batch, c_in = x.shape[:2]
    m_out, c_group = w.shape[:2]
    group = _int(ctx, "group", 1)
    if group < 1 or c_in != c_group * group or m_out % group:
        raise ctx.unsupported(f"group={group} with {c_in} input and {m_out} output channels "
                              f"(weights {list(w.shape)})")
    kernel = _kernel(ctx, w.shape[2:], r)
    out_shape = ctx.out_shape()
    axes = _window(ctx, x.shape[2:], kernel, out_shape[2:])
    _check_extents(ctx, axes)
    if PAD_BY_COPY and not _short_depthwise(ctx, x, w, group, m_out, kernel, dtype, axes):
        x, axes = _padded(ctx, x, axes)
    m_group = m_out // group

    n, chans, pos, ks, extents, f, cin, wc, keep_c = _conv_iterators(
        n_batch, group, m_group, c_group, [a.out for a in axes], kernel)
    x_index = (n, cin) + tuple(a.index(o, k) for a, o, k in zip(axes, pos, ks))
    where = _all([cond for a, o, k in zip(axes, pos, ks) for cond in a.bounds(o, k)])

    if (len(chans) == 2 and keep_c and w.value is not None and dtype in ("float32", "float64")
            and _blockable_groups(m_group, c_group, kernel)):
        _grouped_conv(ctx, x[x_index], w, chans, (n,) + pos, wc, ks, extents, where, bias)
        return
    # float16 sums accumulate in float32, as onnx's reference and onnxruntime do: a
    # float16 partial sum per term lost up to 2 ulps on 4 terms (onnx's
    # causal_conv_with_state_silu_fp16 case)
    wide = "float32" if dtype == "float16" else dtype
    has_bias = bias is not None and _has_bias(bias)
    # an output stored channel-blocked (plan.py) is written by an epilogue: the
    # reduction's own target stays plain, which channel blocking needs
    relaid = ctx.node.outputs[0] in ctx.b.layouts
    # a depthwise convolution of a channel-blocked input accumulates blocked too: its
    # channels are then the unit-stride loop of input, accumulator and output alike
    block = ctx.b.blocked(x) if group == c_in and m_out == c_in else None
    acc = _accumulate(ctx, out_shape, wide, has_bias or wide != dtype or relaid, block)
    _init(ctx, acc, elem_const(0, wide))
    xv, wv = x[x_index], w[(f, wc) + ks]
    if block and w.value is not None and wide == dtype:
        # the filter blocked as its input: (1, C, kh, kw) stored (1, C/16, kh, kw, 16)
        filters = w.value.reshape((1, m_out) + tuple(w.shape[2:]))  # one channel per group
        table = ctx.b.blocked_table(filters, dtype, "depthwise", block)
        wv = table[(_c(0), f) + ks]
    if wide != dtype:
        xv, wv = E.Cast(xv, wide), E.Cast(wv, wide)
    ctx.b.assign(acc[(n, f) + pos], _mul(xv, wv, wide), extents,
                 reduction="+", where=where, location=ctx.location)
    if has_bias:
        _add_bias(ctx, acc, bias)  # type: ignore[arg-type]
    elif wide != dtype or relaid or block:
        out = ctx.output(0)
        i = _iters(out.rank)
        ctx.b.assign(out[i], acc[i], out.shape, location=ctx.location)  # rounded once


def _blockable_groups(per_group: int, c_group: int, kernel: Sequence[int]) -> bool:
    """Whether channel blocking will take a grouped convolution's channels per group
    (scheduler/blocking.py: at least a vector of them, padding at most a third more)
    and each output sums enough terms to pay for its vector accumulators' loads and
    stores (ShuffleNet's first 1x1 convolution, 6 input channels per group, ran at half
    the speed blocked)."""
    lanes = CM.simd_lanes(4)
    padded = -(-per_group // lanes) * lanes
    return (per_group >= lanes and 3 * padded <= 4 * per_group
            and c_group * math.prod(kernel) >= lanes)


def _grouped_conv(ctx: NodeContext, operand: E.Expr, w: Tensor, chans: Sequence[E.Iter],
                  outer: tuple[E.Expr, ...], wc: E.Expr, ks: Sequence[E.Iter],
                  extents: list[int], where: E.Expr | None, bias: Tensor | None) -> None:
    """A grouped convolution with several channels per group and constant weights:
    weights (G, M, C/G, k...) and accumulator (N, G, M, spatial...) with the group and
    the channel in it as dimensions of their own. The product then has the plain
    weights and target indices channel blocking asks for (scheduler/blocking.py blocks
    M, one group after the other); written with f = g*M + m, no blocking applied, and
    ShuffleNet's 4-group 1x1 convolutions at 7 x 7 ran at a tenth of the ungrouped
    ones' speed. Consumers read the accumulator through a 4-D view."""
    g, m = chans
    dtype = ctx.out_dtype()
    out_shape = ctx.out_shape()
    group, per_group = extents[1], extents[2]
    weights = ctx.table(w.value.reshape((group, per_group) + tuple(w.shape[1:])), dtype)
    acc = ctx.b.new_array(ctx.node.outputs[0] + "#acc", dtype,
                          (out_shape[0], group, per_group) + tuple(out_shape[2:]))
    _init(ctx, acc, elem_const(0, dtype))
    n, pos = outer[0], outer[1:]
    ctx.b.assign(acc[(n, g, m) + pos], _mul(operand, weights[(g, m, wc) + tuple(ks)], dtype),
                 extents, reduction="+", where=where, location=ctx.location)
    # (n, f, ...) -> (n, f / M, f % M, ...): reshape_view's general form goes through
    # the flat offset, whose divisions gcc cannot vectorise the epilogue through
    flat = acc.with_view(out_shape, lambda idx, _m=E.Const(per_group, E.INDEX_DTYPE): (
        idx[0], E.Binary("floordiv", idx[1], _m, E.INDEX_DTYPE),
        E.Binary("floormod", idx[1], _m, E.INDEX_DTYPE)) + tuple(idx[2:]))
    if bias is not None and _has_bias(bias):
        _add_bias(ctx, flat, bias)
    else:
        ctx.bind(0, flat)


@lowering("ConvTranspose", attrs=("auto_pad", "dilations", "group", "kernel_shape",
                                  "output_padding", "output_shape", "pads", "strides"))
def _conv_transpose(ctx: NodeContext) -> None:
    """Gather form: output y adds X[(y + p - k*d) / s] * W[k] over the k for which the
    division is exact and lands in the input."""
    x, w, bias, dtype, r = _conv_operands(ctx)
    n_batch, c_in = x.shape[:2]
    group = _int(ctx, "group", 1)
    if group < 1 or w.shape[0] != c_in or c_in % group:
        raise ctx.unsupported(f"group={group} with {c_in} input channels (weights "
                              f"{list(w.shape)})")
    c_group, m_group = c_in // group, w.shape[1]
    kernel = _kernel(ctx, w.shape[2:], r)
    out_shape = ctx.out_shape()
    axes = _transposed_window(ctx, x.shape[2:], kernel, out_shape[2:])

    n, chans, pos, ks, extents, f, cin, _, _ = _conv_iterators(
        n_batch, group, m_group, c_group, [a.out for a in axes], kernel)
    m_in_group = chans[-1] if len(chans) == 2 else (f if group == 1 else _c(0))
    x_index: list[E.Expr] = [n, cin]
    conds: list[E.Expr] = []
    for a, o, k in zip(axes, pos, ks):
        # the input position times the stride: y + begin - k*d
        scaled = _linear([(o, 1), (k, -a.dilation)], a.begin)
        if a.stride == 1:
            x_index.append(scaled)
        else:
            x_index.append(E.Binary("floordiv", scaled, _c(a.stride), IDX))
            conds.append(E.Binary("eq", E.Binary("floormod", scaled, _c(a.stride), IDX),
                                  _c(0), "bool"))
        if a.begin - (a.kernel - 1) * a.dilation < 0:
            conds.append(_cmp("ge", scaled, 0))
        if a.out - 1 + a.begin > (a.size - 1) * a.stride:
            conds.append(_cmp("le", scaled, (a.size - 1) * a.stride))

    acc = _accumulate(ctx, out_shape, dtype, bias is not None and _has_bias(bias))
    _init(ctx, acc, elem_const(0, dtype))
    ctx.b.assign(acc[(n, f) + pos], _mul(x[tuple(x_index)], w[(cin, m_in_group) + ks], dtype),
                 extents, reduction="+", where=_all(conds), location=ctx.location)
    if bias is not None and _has_bias(bias):
        _add_bias(ctx, acc, bias)


def _transposed_window(ctx: NodeContext, spatial: Sequence[int], kernel: Sequence[int],
                       out: Sequence[int]) -> list[Axis]:
    """ConvTranspose's axes: ``begin`` is how much of the full output (stride*(H-1) +
    span + output_padding) is cut at the start."""
    r = len(spatial)
    strides = _ints(ctx, "strides", r, 1)
    dilations = _ints(ctx, "dilations", r, 1)
    extra = _ints(ctx, "output_padding", r, 0)
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if auto_pad not in AUTO_PADS:
        raise ctx.unsupported(f"auto_pad={auto_pad!r}")
    if any(s < 1 for s in strides) or any(d < 1 for d in dilations) or any(e < 0 for e in extra):
        raise ctx.unsupported(f"strides {strides} / dilations {dilations} / output_padding "
                              f"{extra}")
    explicit = ctx.attr("output_shape") is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER")
    pads = _ints(ctx, "pads", 2 * r, 0) if not explicit and auto_pad == "NOTSET" else [0] * 2 * r
    if any(p < 0 for p in pads):
        raise ctx.unsupported(f"negative pads {pads}")
    axes = []
    for j in range(r):
        full = strides[j] * (spatial[j] - 1) + extra[j] + (kernel[j] - 1) * dilations[j] + 1
        if explicit:
            # onnxruntime's rule (the spec's): SAME_UPPER cuts less at the start
            total = max(0, full - out[j])
            begin = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        else:
            begin = pads[j]
            if full - pads[j] - pads[r + j] != out[j]:
                raise ctx.unsupported(f"output extent {out[j]} does not match the window "
                                      f"(full extent {full}, pads {pads[j]}+{pads[r + j]})")
        axes.append(Axis(int(spatial[j]), int(out[j]), int(kernel[j]), strides[j],
                         dilations[j], begin, 0))
    return axes


# ----------------------------------------------------------------------------- matrix products

@lowering("MatMul")
def _matmul(ctx: NodeContext) -> None:
    """numpy's matmul: a 1-D operand is a row (left) or column (right) vector whose unit
    dimension is dropped from the result; batch dimensions broadcast."""
    a, b = ctx.input(0), ctx.input(1)
    dtype = ctx.out_dtype()
    if a.rank == 0 or b.rank == 0:
        raise ctx.unsupported("MatMul of a scalar")
    out_shape = ctx.out_shape()
    out = ctx.output(0)
    k_extent = a.shape[-1]
    if k_extent != b.shape[0 if b.rank == 1 else -2]:
        raise ctx.unsupported(f"inner extents differ: {list(a.shape)} x {list(b.shape)}")
    rank = len(out_shape)
    it = _iters(rank + 1)
    o, k = it[:rank], it[rank]
    n_batch = rank - (a.rank >= 2) - (b.rank >= 2)
    batch = o[:n_batch]
    m = o[n_batch] if a.rank >= 2 else None
    ncol = o[-1] if b.rank >= 2 else None

    def batch_index(t: Tensor) -> tuple[E.Expr, ...]:
        dims = t.shape[:-2]
        lead = n_batch - len(dims)
        return tuple(_c(0) if e == 1 else batch[lead + j] for j, e in enumerate(dims))

    a_index = batch_index(a) + ((m,) if m is not None else ()) + (k,)
    b_index = batch_index(b) + (k,) + ((ncol,) if ncol is not None else ())
    _init(ctx, out, elem_const(0, dtype))
    ctx.b.assign(out[o], _mul(a[a_index], b[b_index], dtype), list(out_shape) + [k_extent],
                 reduction="+", location=ctx.location)


@lowering("Gemm", attrs=("alpha", "beta", "transA", "transB"))
def _gemm(ctx: NodeContext) -> None:
    """Y = alpha * A' B' + beta * C: beta * C is the init (TC's fully connected layer);
    an alpha other than 1 scales an accumulator in an element-by-element statement."""
    a, b, c = ctx.input(0), ctx.input(1), ctx.optional(2)
    dtype = ctx.out_dtype()
    alpha = _float(ctx, "alpha", 1.0)
    beta = _float(ctx, "beta", 1.0)
    if a.rank != 2 or b.rank != 2:
        raise ctx.unsupported(f"operands of rank {a.rank} and {b.rank}", hint="Gemm takes "
                              "matrices")
    if not E.is_float(dtype) and (alpha != 1.0 or beta not in (0.0, 1.0)):
        raise ctx.unsupported(f"alpha={alpha}, beta={beta} with {dtype} values")
    trans_a, trans_b = _int(ctx, "transA", 0), _int(ctx, "transB", 0)
    m_extent, n_extent = ctx.out_shape()
    k_extent = a.shape[0] if trans_a else a.shape[1]
    # one row (a fully connected layer at batch 1): no iterator for it, so that the
    # scheduler's first loop is the output column, not a loop of one iteration that
    # every statement trivially shares (fusion would take it for a parallel loop)
    row = m_extent == 1
    if row:
        (n, k), m = _iters(2), _c(0)
    else:
        m, n, k = _iters(3)
    rows = () if row else (m_extent,)
    at = (lambda m_, n_: (n_,)) if row else (lambda m_, n_: (m_, n_))  # noqa: E731
    product = _mul(a[(k, m) if trans_a else (m, k)], b[(n, k) if trans_b else (k, n)], dtype)
    c_term = None
    if c is not None and beta != 0.0:
        c_term = broadcast(c, (m, n))
        if beta != 1.0:
            c_term = _mul(elem_const(beta, dtype), c_term, dtype)
    # constant weights with a bias (a fully connected layer): the product accumulates
    # from 0 and the bias is added after, as Conv's, so that channel blocking can pack
    # the weights (scheduler/blocking.py blocks reductions that start from 0 only); with
    # the bias as the init, ResNet-50's 2048 -> 1000 head ran as scalar code, 2.2x
    # onnxruntime's time
    bias_after = c_term is not None and b.value is not None and E.is_float(dtype)
    out = ctx.output(0)
    if alpha == 1.0 and not bias_after:
        ctx.b.assign(out[(m, n)], c_term if c_term is not None else elem_const(0, dtype),
                     rows + (n_extent,), location=ctx.location)
        ctx.b.assign(out[(m, n)], product, rows + (n_extent, k_extent), reduction="+",
                     location=ctx.location)
        return
    acc = _accumulate(ctx, rows + (n_extent,), dtype, True)
    _init(ctx, acc, elem_const(0, dtype))
    ctx.b.assign(acc[at(m, n)], product, rows + (n_extent, k_extent), reduction="+",
                 location=ctx.location)
    value = acc[at(m, n)]
    if alpha != 1.0:
        value = _mul(elem_const(alpha, dtype), value, dtype)
    if c_term is not None:
        value = E.Binary("add", value, c_term, dtype)
    ctx.b.assign(out[(m, n)], value, rows + (n_extent,), location=ctx.location)


# ----------------------------------------------------------------------------- pooling

def _pool_setup(ctx: NodeContext) -> tuple[Tensor, list[Axis], bool]:
    x = ctx.input(0)
    r = x.rank - 2
    if r < 1:
        raise ctx.unsupported(f"input of rank {x.rank}")
    ceil_mode = bool(ctx.attr("ceil_mode", 0))
    kernel = _kernel(ctx, None, r)
    axes = _window(ctx, x.shape[2:], kernel, ctx.out_shape()[2:])
    _check_extents(ctx, axes, ceil_mode)
    return x, axes, ceil_mode


def _pool_statement(ctx: NodeContext, target: Tensor, x: Tensor, axes: Sequence[Axis],
                    reduction: str) -> None:
    """target[n, c, o...] (reduction)= X[n, c, window...] over the window's valid part."""
    r = len(axes)
    it = _iters(2 + 2 * r)
    n, c, pos, ks = it[0], it[1], it[2:2 + r], it[2 + r:]
    x_index = (n, c) + tuple(a.index(o, k) for a, o, k in zip(axes, pos, ks))
    where = _all([cond for a, o, k in zip(axes, pos, ks) for cond in a.bounds(o, k)])
    extents = list(x.shape[:2]) + [a.out for a in axes] + [a.kernel for a in axes]
    ctx.b.assign(target[(n, c) + pos], x[x_index], extents, reduction=reduction, where=where,
                 location=ctx.location)


@lowering("MaxPool", attrs=("auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads",
                            "storage_order", "strides"))
def _max_pool(ctx: NodeContext) -> None:
    if ctx.has_output(1):
        raise ctx.unsupported("the Indices output", hint="only the pooled values are computed")
    # storage_order only changes the Indices output, which is refused
    x, axes, _ = _pool_setup(ctx)
    dtype = ctx.out_dtype()
    out = ctx.output(0)
    _init(ctx, out, elem_const(E.reduction_identity("max", dtype), dtype))
    _pool_statement(ctx, out, x, axes, "max")


@lowering("AveragePool", attrs=("auto_pad", "ceil_mode", "count_include_pad", "dilations",
                                "kernel_shape", "pads", "strides"))
def _average_pool(ctx: NodeContext) -> None:
    """The window sum, then a division by the number of elements counted: those inside
    the input (count_include_pad=0) or inside the padded input (=1; a ceil_mode window
    sticking out past the end padding counts only up to it), as onnxruntime does."""
    x, axes, _ = _pool_setup(ctx)
    dtype = ctx.out_dtype()
    _require_float(ctx, dtype)
    include_pad = bool(ctx.attr("count_include_pad", 0))
    acc = _accumulate(ctx, ctx.out_shape(), dtype, True, ctx.b.blocked(x))  # x's layout
    _init(ctx, acc, elem_const(0, dtype))
    _pool_statement(ctx, acc, x, axes, "+")
    out = ctx.output(0)
    i = _iters(out.rank)
    count = _window_count(axes, i[2:], include_pad)
    divisor = elem_const(count, dtype) if isinstance(count, int) else E.Cast(count, dtype)
    ctx.b.assign(out[i], E.Binary("div", acc[i], divisor, dtype), out.shape,
                 location=ctx.location)


def _window_count(axes: Sequence[Axis], pos: Sequence[E.Expr], include_pad: bool) -> int | E.Expr:
    """The number of counted elements in the window at ``pos``: a product over the
    axes, each a constant or a closed form in the output index."""
    total: int | E.Expr = 1
    for a, o in zip(axes, pos):
        lo, hi = (-a.begin, a.size + a.end) if include_pad else (0, a.size)
        table = [_axis_count(a, y, lo, hi) for y in range(a.out)]
        factor: int | E.Expr = table[0] if len(set(table)) <= 1 else _axis_count_expr(a, o, lo, hi)
        if isinstance(factor, int) and isinstance(total, int):
            total *= factor
        else:
            lhs = _c(total) if isinstance(total, int) else total
            rhs = _c(factor) if isinstance(factor, int) else factor
            total = E.Binary("mul", lhs, rhs, IDX)
    return total


def _axis_count(a: Axis, o: int, lo: int, hi: int) -> int:
    return sum(1 for k in range(a.kernel) if lo <= o * a.stride + k * a.dilation - a.begin < hi)


def _axis_count_expr(a: Axis, o: E.Expr, lo: int, hi: int) -> E.Expr:
    """#{k in [0, kernel): lo <= o*s + k*d - begin < hi} = max(0, kmax - kmin + 1) with
    kmin = max(0, ceil((lo + begin - o*s) / d)), kmax = min(kernel-1, floor((hi - 1 +
    begin - o*s) / d))."""
    def over_d(num: E.Expr) -> E.Expr:
        return num if a.dilation == 1 else E.Binary("floordiv", num, _c(a.dilation), IDX)
    kmin = call("max", _c(0), over_d(_linear([(o, -a.stride)], lo + a.begin + a.dilation - 1)))
    kmax = call("min", _c(a.kernel - 1), over_d(_linear([(o, -a.stride)], hi - 1 + a.begin)))
    return call("max", _c(0), E.Binary("add", E.Binary("sub", kmax, kmin, IDX), _c(1), IDX))


def _global_pool(ctx: NodeContext, reduction: str) -> None:
    x = ctx.input(0)
    dtype = ctx.out_dtype()
    if x.rank < 3:
        raise ctx.unsupported(f"input of rank {x.rank}")
    r = x.rank - 2
    out = ctx.output(0)
    it = _iters(2 + r)
    n, c = it[0], it[1]
    target = out[(n, c) + (_c(0),) * r]
    if reduction == "max":
        _init(ctx, out, elem_const(E.reduction_identity("max", dtype), dtype))
        value = x[it]
    else:
        _require_float(ctx, dtype)
        _init(ctx, out, elem_const(0, dtype))
        # as TC's global average pool: each term divided (one pass, no epilogue)
        value = E.Binary("div", x[it], elem_const(math.prod(x.shape[2:]), dtype), dtype)
    ctx.b.assign(target, value, x.shape, reduction=reduction, location=ctx.location)


@lowering("GlobalAveragePool")
def _global_average_pool(ctx: NodeContext) -> None:
    _global_pool(ctx, "+")


@lowering("GlobalMaxPool")
def _global_max_pool(ctx: NodeContext) -> None:
    _global_pool(ctx, "max")


# ----------------------------------------------------------------------------- normalisation

@lowering("LRN", attrs=("alpha", "beta", "bias", "size"))
def _lrn(ctx: NodeContext) -> None:
    """Y = X * (bias + alpha/size * sum of squares over the channel window)^-beta."""
    x = ctx.input(0)
    dtype = ctx.out_dtype()
    _require_float(ctx, dtype)
    if ctx.attr("size") is None or _int(ctx, "size", 0) < 1:
        raise ctx.unsupported(f"size={ctx.attr('size')}")
    size = _int(ctx, "size", 0)
    alpha = _float(ctx, "alpha", 1e-4)
    beta = _float(ctx, "beta", 0.75)
    bias = _float(ctx, "bias", 1.0)
    if x.rank < 3:
        raise ctx.unsupported(f"input of rank {x.rank}")
    before = (size - 1) // 2
    squares = ctx.b.new_array(ctx.node.outputs[0] + "#squares", dtype, x.shape)
    _init(ctx, squares, elem_const(0, dtype))
    it = _iters(x.rank + 1)
    out_it, j = it[:x.rank], it[x.rank]
    channel = _linear([(out_it[1], 1), (j, 1)], -before)
    xi = x[(out_it[0], channel) + out_it[2:]]
    conds = []
    if before > 0:
        conds.append(_cmp("ge", channel, 0))
    if size - 1 - before > 0:
        conds.append(_cmp("lt", channel, x.shape[1]))
    ctx.b.assign(squares[out_it], _mul(xi, xi, dtype), list(x.shape) + [size], reduction="+",
                 where=_all(conds), location=ctx.location)
    out = ctx.output(0)
    i = _iters(x.rank)
    scale = E.Binary("add", elem_const(bias, dtype),
                     _mul(elem_const(alpha / size, dtype), squares[i], dtype), dtype)
    ctx.b.assign(out[i], _mul(x[i], call("pow", scale, elem_const(-beta, dtype)), dtype),
                 x.shape, location=ctx.location)


@lowering("BatchNormalization", attrs=("epsilon", "momentum", "spatial", "training_mode"))
def _batch_norm(ctx: NodeContext) -> None:
    """Inference: Y = (X - mean) * scale / sqrt(var + epsilon) + B per channel (a
    Conv's constant BatchNormalization is folded into its weights before: rewrite.py)."""
    if _int(ctx, "training_mode", 0):
        raise ctx.unsupported("training_mode=1", hint="polycomp compiles models for inference")
    if _int(ctx, "spatial", 1) != 1:
        raise ctx.unsupported("spatial=0", hint="per-activation statistics are not supported")
    extra = [k for k in range(1, len(ctx.node.outputs)) if ctx.has_output(k)]
    if extra:
        raise ctx.unsupported(f"output {extra[0]} (running statistics)",
                              hint="only the normalised output Y is computed (inference)")
    dtype = ctx.out_dtype()
    _require_float(ctx, dtype)
    x, scale, b, mean, var = (ctx.input(k) for k in range(5))
    if x.rank < 2:
        raise ctx.unsupported(f"input of rank {x.rank}")
    eps = elem_const(_float(ctx, "epsilon", 1e-5), dtype)
    for t in (scale, b, mean, var):
        if t.shape != (x.shape[1],):
            raise ctx.unsupported(f"'{t.name}' of shape {list(t.shape)} for {x.shape[1]} "
                                  "channels")

    out = ctx.output(0)
    i = _iters(x.rank)
    ch = (i[1],)
    factor = _mul(scale[ch], call("rsqrt", E.Binary("add", var[ch], eps, dtype)), dtype)
    value = E.Binary("add", _mul(E.Binary("sub", x[i], mean[ch], dtype), factor, dtype),
                     b[ch], dtype)
    ctx.b.assign(out[i], value, x.shape, location=ctx.location)


@lowering("InstanceNormalization", attrs=("epsilon",))
def _instance_norm(ctx: NodeContext) -> None:
    """Per (n, c): mean and variance over the spatial positions (two reductions, as
    TC's layer norm), then Y = scale * (X - mean) / sqrt(var + epsilon) + B."""
    x, scale, b = ctx.input(0), ctx.input(1), ctx.input(2)
    dtype = ctx.out_dtype()
    _require_float(ctx, dtype)
    if x.rank < 3:
        raise ctx.unsupported(f"input of rank {x.rank}")
    eps = elem_const(_float(ctx, "epsilon", 1e-5), dtype)
    count = elem_const(math.prod(x.shape[2:]), dtype)
    name = ctx.node.outputs[0]
    mean = ctx.b.new_array(name + "#mean", dtype, x.shape[:2])
    var = ctx.b.new_array(name + "#var", dtype, x.shape[:2])
    i = _iters(x.rank)
    nc = i[:2]
    _init(ctx, mean, elem_const(0, dtype))
    ctx.b.assign(mean[nc], E.Binary("div", x[i], count, dtype), x.shape, reduction="+",
                 location=ctx.location)
    centred = E.Binary("sub", x[i], mean[nc], dtype)
    _init(ctx, var, elem_const(0, dtype))
    ctx.b.assign(var[nc], E.Binary("div", _mul(centred, centred, dtype), count, dtype), x.shape,
                 reduction="+", location=ctx.location)
    out = ctx.output(0)
    ch = (i[1],)
    factor = _mul(scale[ch], call("rsqrt", E.Binary("add", var[nc], eps, dtype)), dtype)
    ctx.b.assign(out[i], E.Binary("add", _mul(centred, factor, dtype), b[ch], dtype), x.shape,
                 location=ctx.location)
