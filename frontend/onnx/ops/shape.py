"""ONNX lowering: data-movement operators (layout, slicing, gathering, padding, resizing).

Input: a :class:`NodeContext` whose shape, axis, pad and repeat inputs are compile-time
constants (graph.py folded them; a runtime one is refused by ``ctx.constant``). Output:
for an op that only re-indexes its input (Transpose, Slice, Split, Tile, Expand,
DepthToSpace, SpaceToDepth, Gather with affine constant indices) a *view* bound to the
output, an index rewrite that costs nothing: the consuming statement reads the input
directly, and plan.py copies a view into an array only when it leaves the group. The
others write their output with copy statements whose indices are affine in the iterators
(Concat, Pad) or contain an access of an index array (Gather and GatherElements with
runtime indices; Resize and Pad through index tables computed here), which codegen
bounds-checks at run time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from itertools import product

import numpy as np

from polycomp import expr as E

from ..builder import Tensor, broadcast_indices, const
from ..model import ModelError, onnx
from . import NodeContext, lowering

INDEX = E.INDEX_DTYPE
Index = tuple[E.Expr, ...]

# past this many region statements, Pad reads through index tables in one statement
MAX_PAD_STATEMENTS = 27


# ----------------------------------------------------------------------------- index sugar
# Small constant-folding builders keep index trees short (they are printed into C and
# turned into isl maps for every statement).

def _c(value: int) -> E.Const:
    return E.Const(int(value), INDEX)


def _value(node: E.Expr) -> int | None:
    return int(node.value) if isinstance(node, E.Const) else None


def _add(a: E.Expr, b: E.Expr | int) -> E.Expr:
    b = _c(b) if isinstance(b, int) else b
    va, vb = _value(a), _value(b)
    if va is not None and vb is not None:
        return _c(va + vb)
    if vb == 0:
        return a
    if va == 0:
        return b
    return E.Binary("add", a, b, INDEX)


def _mul(a: E.Expr, k: int) -> E.Expr:
    va = _value(a)
    if va is not None:
        return _c(va * k)
    if k == 0:
        return _c(0)
    return a if k == 1 else E.Binary("mul", a, _c(k), INDEX)


def _floordiv(a: E.Expr, k: int) -> E.Expr:
    return a if k == 1 else E.Binary("floordiv", a, _c(k), INDEX)


def _floormod(a: E.Expr, k: int) -> E.Expr:
    return _c(0) if k == 1 else E.Binary("floormod", a, _c(k), INDEX)


def _replace(idx: Index, axis: int, new: E.Expr | Sequence[E.Expr], width: int = 1) -> Index:
    """``idx`` with ``width`` entries at ``axis`` replaced by ``new``."""
    new = (new,) if isinstance(new, E.Expr) else tuple(new)
    return tuple(idx[:axis]) + new + tuple(idx[axis + width:])


def _as_index(value: E.Expr) -> E.Expr:
    return value if value.dtype == INDEX else E.Cast(value, INDEX)


def _wrap_negative(value: E.Expr, extent: int) -> E.Expr:
    """A runtime index, with ONNX's negative indices counted from the end."""
    value = _as_index(value)
    return E.Select(E.Binary("lt", value, _c(0), "bool"), _add(value, extent), value, INDEX)


# ----------------------------------------------------------------------------- helpers

def _view(t: Tensor, shape: Sequence[int], fn: Callable[[Index], Index]) -> Tensor:
    """``t`` seen with ``shape`` through the index map ``fn``; an inlined constant (one
    value, no array) stays that constant."""
    if t.array is None:
        return Tensor(t.name, t.dtype, tuple(int(s) for s in shape), None, None, t.value)
    return t.with_view(shape, fn)


def _invalid(ctx: NodeContext, what: str) -> ModelError:
    return ModelError(f"node '{ctx.node.name}' ({ctx.node.op_type}): {what}", ctx.location)


def _axis(ctx: NodeContext, axis: object, rank: int, name: str = "axis") -> int:
    a = int(axis)  # type: ignore[arg-type]
    if not -rank <= a < rank:
        raise _invalid(ctx, f"{name} {a} is out of range for rank {rank}")
    return a + rank if a < 0 else a


def _ints(values: object) -> list[int]:
    return [int(v) for v in np.asarray(values).reshape(-1)]


def _check_shape(ctx: NodeContext, shape: Sequence[int], k: int = 0) -> None:
    """The shape this lowering computes agrees with shape inference's."""
    if tuple(shape) != tuple(ctx.out_shape(k)):
        raise ctx.unsupported(f"output {k} would have shape {list(shape)} but shape "
                              f"inference gives {list(ctx.out_shape(k))}")


def _copy(ctx: NodeContext, k: int, value: Callable[[Index], E.Expr]) -> Tensor:
    """Output k as an array, element i = value(i)."""
    shape = ctx.out_shape(k)
    out = ctx.output(k)
    i = ctx.iterators(len(shape))
    ctx.b.assign(out[i], value(i), shape, location=ctx.location)
    return out


def _affine_fit(values: np.ndarray) -> tuple[int, list[int]] | None:
    """``(c, s)`` with values[j] == c + sum_k s[k] * j[k] for every index j, or None."""
    if values.size == 0:
        return 0, [0] * values.ndim
    origin = int(values.reshape(-1)[0])
    steps = []
    for k, extent in enumerate(values.shape):
        unit = [0] * values.ndim
        unit[k] = 1 if extent > 1 else 0
        steps.append(int(values[tuple(unit)]) - origin if extent > 1 else 0)
    grid = np.indices(values.shape, dtype=np.int64)
    fitted = origin + sum((s * g for s, g in zip(steps, grid)), np.zeros(values.shape, np.int64))
    return (origin, steps) if np.array_equal(fitted, values) else None


def _quasi_affine_1d(values: np.ndarray, ratios: Sequence[Fraction]) -> tuple[int, int, int] | None:
    """``(a, b, c)`` with values[o] == (a*o + b) // c for every o (c > 0), trying the
    slopes a/c in ``ratios`` (and 0 and 1), or None."""
    n = len(values)
    if n == 0:
        return 0, 0, 1
    o = np.arange(n, dtype=np.int64)
    first = int(values[0])
    candidates = [Fraction(0), Fraction(1)] + [r for r in ratios if r >= 0]
    for r in dict.fromkeys(candidates):
        a, c = r.numerator, r.denominator
        if c > 256:  # each candidate costs c comparisons of the table
            continue
        for b in range(c * first, c * first + c):
            if np.array_equal((a * o + b) // c, values):
                return a, b, c
    return None


def _index_from_table(ctx: NodeContext, values: np.ndarray, it: E.Expr,
                      ratios: Sequence[Fraction] = ()) -> E.Expr:
    """Source index ``values[it]`` along one axis: an affine expression of ``it`` when
    the table is one, else a read of the table (a data-dependent index)."""
    fit = _quasi_affine_1d(values, ratios)
    if fit is not None:
        a, b, c = fit
        return _floordiv(_add(_mul(it, a), b), c)
    table = ctx.table(np.asarray(values, dtype=np.int64), INDEX)
    return table[(it,)]


# ----------------------------------------------------------------------------- Transpose

@lowering("Transpose", attrs=("perm",))
def _transpose(ctx: NodeContext) -> None:
    x = ctx.input(0)
    perm = ctx.attr("perm")
    perm = list(range(x.rank))[::-1] if perm is None else \
        [int(p) for p in perm]  # type: ignore[union-attr]
    if sorted(perm) != list(range(x.rank)):
        raise _invalid(ctx, f"perm {perm} is not a permutation of the {x.rank} axes")
    shape = tuple(x.shape[p] for p in perm)
    inverse = [0] * len(perm)
    for k, p in enumerate(perm):
        inverse[p] = k
    ctx.bind(0, _view(x, shape, lambda idx: tuple(idx[k] for k in inverse)))


# ----------------------------------------------------------------------------- Concat, Split

@lowering("Concat", attrs=("axis",))
def _concat(ctx: NodeContext) -> None:
    shape = ctx.out_shape()
    axis = _axis(ctx, ctx.attr("axis", 0), len(shape))
    out = ctx.output()
    offset = 0
    for k in range(ctx.n_inputs):
        t = ctx.input(k)
        i = ctx.iterators(t.rank)
        target = _replace(i, axis, _add(i[axis], offset))
        ctx.b.assign(out[target], t[i], t.shape, location=ctx.location)
        offset += t.shape[axis]
    if offset != shape[axis]:
        raise _invalid(ctx, f"inputs of total extent {offset} along axis {axis}, output "
                            f"{shape[axis]}")


def _split_sizes(ctx: NodeContext, extent: int, n: int) -> list[int]:
    split = ctx.attr("split") if ctx.opset < 13 else (
        ctx.constant(1, "split") if ctx.has_input(1) else None)
    if split is not None and np.asarray(split).size > 0:
        sizes = _ints(split)
    elif ctx.attr("num_outputs") is not None:
        parts = int(ctx.attr("num_outputs"))  # type: ignore[arg-type]
        chunk = -(-extent // parts)  # ceil: the last chunk is the smaller one
        sizes = [min(chunk, max(extent - chunk * k, 0)) for k in range(parts)]
    else:
        if extent % n:
            raise _invalid(ctx, f"extent {extent} does not split evenly into {n} outputs")
        sizes = [extent // n] * n
    if len(sizes) != n or sum(sizes) != extent or min(sizes, default=0) < 0:
        raise _invalid(ctx, f"split sizes {sizes} do not cover extent {extent} with {n} "
                            "outputs")
    return sizes


@lowering("Split", attrs=("axis", "split", "num_outputs"))
def _split(ctx: NodeContext) -> None:
    x = ctx.input(0)
    axis = _axis(ctx, ctx.attr("axis", 0), x.rank)
    sizes = _split_sizes(ctx, x.shape[axis], len(ctx.node.outputs))
    offset = 0
    for k, size in enumerate(sizes):
        if ctx.has_output(k):
            shape = _replace(x.shape, axis, (size,))  # type: ignore[arg-type]
            _check_shape(ctx, shape, k)
            ctx.bind(k, _view(x, shape, lambda idx, o=offset: _replace(
                idx, axis, _add(idx[axis], o))))
        offset += size


# ----------------------------------------------------------------------------- Slice

def _slice_params(ctx: NodeContext) -> tuple[list[int], list[int], list[int], list[int]]:
    if ctx.opset < 10:
        starts, ends = _ints(ctx.attr("starts", [])), _ints(ctx.attr("ends", []))
        axes = ctx.attr("axes")
        axes = list(range(len(starts))) if axes is None else _ints(axes)
        return starts, ends, axes, [1] * len(starts)
    starts = _ints(ctx.constant(1, "starts"))
    ends = _ints(ctx.constant(2, "ends"))
    axes_v = ctx.constant(3, "axes")
    steps_v = ctx.constant(4, "steps")
    axes = list(range(len(starts))) if axes_v is None else _ints(axes_v)
    steps = [1] * len(starts) if steps_v is None else _ints(steps_v)
    return starts, ends, axes, steps


# ONNX's clamping differs from Python's in one case: a negative step with a start before
# the first element starts at element 0 (Python's slice is empty)
def _slice_start(start: int, step: int, n: int) -> int:
    start = start + n if start < 0 else start
    return min(max(start, 0), n if step > 0 else n - 1)


def _slice_end(end: int, step: int, n: int) -> int:
    end = end + n if end < 0 else end
    return min(max(end, 0), n) if step > 0 else min(max(end, -1), n - 1)


@lowering("Slice", attrs=("starts", "ends", "axes"))
def _slice(ctx: NodeContext) -> None:
    x = ctx.input(0)
    starts, ends, axes, steps = _slice_params(ctx)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise _invalid(ctx, "starts, ends, axes and steps differ in length")
    first = [0] * x.rank
    stride = [1] * x.rank
    shape = list(x.shape)
    seen: set[int] = set()
    for s, e, a, st in zip(starts, ends, axes, steps):
        axis = _axis(ctx, a, x.rank, "axes entry")
        if axis in seen:
            raise _invalid(ctx, f"axis {axis} is sliced twice")
        seen.add(axis)
        if st == 0:
            raise _invalid(ctx, "a step is 0")
        first[axis], stride[axis] = _slice_start(s, st, x.shape[axis]), st
        shape[axis] = len(range(first[axis], _slice_end(e, st, x.shape[axis]), st))
    _check_shape(ctx, shape)
    ctx.bind(0, _view(x, shape, lambda idx: tuple(
        _add(_mul(i, st), f) for i, f, st in zip(idx, first, stride))))


# ----------------------------------------------------------------------------- Gather

def _constant_indices(ctx: NodeContext, extent: int) -> np.ndarray | None:
    """The indices input's compile-time value, negatives wrapped and range-checked."""
    if not ctx.is_constant(1):
        return None
    values = ctx.constant(1).astype(np.int64)  # type: ignore[union-attr]
    if values.size and (values.min() < -extent or values.max() >= extent):
        raise _invalid(ctx, f"an index is outside [-{extent}, {extent})")
    return np.where(values < 0, values + extent, values)


@lowering("Gather", attrs=("axis",))
def _gather(ctx: NodeContext) -> None:
    data = ctx.input(0)
    axis = _axis(ctx, ctx.attr("axis", 0), data.rank)
    extent = data.shape[axis]
    q = len(ctx.graph.values[ctx.node.inputs[1]].shape)
    shape = tuple(data.shape[:axis]) + tuple(ctx.graph.values[ctx.node.inputs[1]].shape) \
        + tuple(data.shape[axis + 1:])
    _check_shape(ctx, shape)
    values = _constant_indices(ctx, extent)
    if values is not None:
        fit = _affine_fit(values)
        if fit is not None:  # a scalar, a range, a strided range: a view
            origin, steps = fit

            def fn(idx: Index) -> Index:
                src: E.Expr = _c(origin)
                for s, i in zip(steps, idx[axis:axis + q]):
                    src = _add(src, _mul(i, s))
                return _replace(idx, axis, src, q)
            ctx.bind(0, _view(data, shape, fn))
            return
        table = ctx.table(values, INDEX)
        _copy(ctx, 0, lambda i: data[_replace(i, axis, table[i[axis:axis + q]], q)])
        return
    indices = ctx.input(1)
    _copy(ctx, 0, lambda i: data[_replace(
        i, axis, _wrap_negative(indices[i[axis:axis + q]], extent), q)])


@lowering("GatherElements", attrs=("axis",))
def _gather_elements(ctx: NodeContext) -> None:
    data = ctx.input(0)
    axis = _axis(ctx, ctx.attr("axis", 0), data.rank)
    extent = data.shape[axis]
    values = _constant_indices(ctx, extent)
    if values is not None:
        table = ctx.table(values, INDEX) if values.size > 1 else None
        flat = values.reshape(-1)

        def source(i: Index) -> E.Expr:
            return table[i] if table is not None else _c(int(flat[0]) if flat.size else 0)
    else:
        indices = ctx.input(1)

        def source(i: Index) -> E.Expr:
            return _wrap_negative(indices[i], extent)
    _copy(ctx, 0, lambda i: data[_replace(i, axis, source(i))])


# ----------------------------------------------------------------------------- Pad

def _pad_params(ctx: NodeContext, rank: int) -> tuple[list[int], list[int]]:
    """Per-axis (begin, end) pads, over all axes."""
    if ctx.opset < 11:
        pads = _ints(ctx.attr("pads", []))
        axes = list(range(rank))
    else:
        pads = _ints(ctx.constant(1, "pads"))
        axes_v = ctx.constant(3, "axes") if ctx.opset >= 18 else None
        axes = list(range(rank)) if axes_v is None else \
            [_axis(ctx, a, rank, "axes entry") for a in _ints(axes_v)]
    if len(pads) != 2 * len(axes):
        raise _invalid(ctx, f"{len(pads)} pads for {len(axes)} axes")
    begin, end = [0] * rank, [0] * rank
    for k, a in enumerate(axes):
        begin[a], end[a] = pads[k], pads[k + len(axes)]
    return begin, end


def _pad_value(ctx: NodeContext, dtype: str) -> E.Expr:
    if ctx.opset < 11:
        return const(float(ctx.attr("value", 0.0)), dtype)  # type: ignore[arg-type]
    value = ctx.optional(2)
    if value is None or value.size == 0:
        return const(0, dtype)
    if value.size != 1:
        raise _invalid(ctx, "constant_value has more than one element")
    read = value[(_c(0),) * value.rank]
    return read if read.dtype == dtype else E.Cast(read, dtype)


def _pad_constant(ctx: NodeContext, x: Tensor, begin: list[int], end: list[int]) -> None:
    """A fill of the border and a copy of the interior (negative pads crop)."""
    shape = ctx.out_shape()
    out = ctx.output()
    i = ctx.iterators(len(shape))
    lo = [max(0, b) for b in begin]
    hi = [min(n, b + s) for n, b, s in zip(shape, begin, x.shape)]
    border: E.Expr | None = None
    for k in range(len(shape)):
        for cond in ([E.Binary("lt", i[k], _c(lo[k]), "bool")] if lo[k] > 0 else []) + \
                ([E.Binary("ge", i[k], _c(hi[k]), "bool")] if hi[k] < shape[k] else []):
            border = cond if border is None else E.Binary("or", border, cond, "bool")
    interior = [h - lo_ for lo_, h in zip(lo, hi)]
    if any(e <= 0 for e in interior):
        border = E.Const(True, "bool")
    if border is not None:
        ctx.b.assign(out[i], _pad_value(ctx, x.dtype), shape, where=border,
                     location=ctx.location)
    if all(e > 0 for e in interior):
        ctx.b.assign(out[tuple(_add(it, l_) for it, l_ in zip(i, lo))],
                     x[tuple(_add(it, l_ - b) for it, l_, b in zip(i, lo, begin))],
                     interior, location=ctx.location)


def _runs(table: np.ndarray) -> list[tuple[int, int, int, int]]:
    """``table`` cut into maximal runs of constant step: (out start, length, source
    start, step)."""
    runs = []
    p, n = 0, len(table)
    while p < n:
        step = int(table[p + 1] - table[p]) if p + 1 < n else 0
        q = p + 1
        while q < n and int(table[q] - table[q - 1]) == step:
            q += 1
        runs.append((p, q - p, int(table[p]), step))
        p = q
    return runs


def _pad_indexed(ctx: NodeContext, x: Tensor, begin: list[int], end: list[int],
                 mode: str) -> None:
    """edge / reflect / wrap: each output element copies one input element. Per axis the
    source index (numpy's pad of 0..n-1) is piecewise affine: one statement per product
    of pieces, or past MAX_PAD_STATEMENTS a single statement reading index tables."""
    if any(b < 0 or e < 0 for b, e in zip(begin, end)):
        raise ctx.unsupported(f"negative pads with mode '{mode}'",
                              hint="negative pads (cropping) are lowered for mode 'constant'")
    if any(n == 0 and (b or e) for n, b, e in zip(x.shape, begin, end)):
        raise _invalid(ctx, f"mode '{mode}' pads an axis of extent 0")
    tables = [np.pad(np.arange(n, dtype=np.int64), (b, e), mode=mode)
              for n, b, e in zip(x.shape, begin, end)]
    runs = [_runs(t) for t in tables]
    shape = ctx.out_shape()
    out = ctx.output()
    if math.prod(len(r) for r in runs) <= MAX_PAD_STATEMENTS:
        for pieces in product(*runs):
            i = ctx.iterators(len(shape))
            target = tuple(_add(it, p[0]) for it, p in zip(i, pieces))
            source = tuple(_add(_mul(it, p[3]), p[2]) for it, p in zip(i, pieces))
            ctx.b.assign(out[target], x[source], [p[1] for p in pieces],
                         location=ctx.location)
        return
    i = ctx.iterators(len(shape))
    source = tuple(it if len(r) == 1 else _index_from_table(ctx, t, it)
                   for it, r, t in zip(i, runs, tables))
    ctx.b.assign(out[i], x[source], shape, location=ctx.location)


@lowering("Pad", attrs=("mode", "pads", "value"))
def _pad(ctx: NodeContext) -> None:
    x = ctx.input(0)
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ctx.unsupported(f"mode '{mode}'", hint="Pad is lowered for modes constant, "
                                                     "reflect, edge and wrap")
    begin, end = _pad_params(ctx, x.rank)
    _check_shape(ctx, [n + b + e for n, b, e in zip(x.shape, begin, end)])
    if mode == "constant":
        _pad_constant(ctx, x, begin, end)
    else:
        _pad_indexed(ctx, x, begin, end, mode)


# ----------------------------------------------------------------------------- Tile, Expand

@lowering("Tile")
def _tile(ctx: NodeContext) -> None:
    x = ctx.input(0)
    repeats = _ints(ctx.constant(1, "repeats"))
    if len(repeats) != x.rank or min(repeats, default=0) < 0:
        raise _invalid(ctx, f"repeats {repeats} for rank {x.rank}")
    shape = [n * r for n, r in zip(x.shape, repeats)]
    _check_shape(ctx, shape)
    ctx.bind(0, _view(x, shape, lambda idx: tuple(
        i if r == 1 else _floormod(i, n) for i, n, r in zip(idx, x.shape, repeats))))


@lowering("Expand")
def _expand(ctx: NodeContext) -> None:
    x = ctx.input(0)
    target = _ints(ctx.constant(1, "shape"))
    rank = max(x.rank, len(target))
    a = [1] * (rank - x.rank) + list(x.shape)
    t = [1] * (rank - len(target)) + target
    if any(p != q and 1 not in (p, q) for p, q in zip(a, t)):
        raise _invalid(ctx, f"shape {list(x.shape)} does not broadcast to {target}")
    shape = [max(p, q) if 0 not in (p, q) else 0 for p, q in zip(a, t)]
    _check_shape(ctx, shape)
    ctx.bind(0, _view(x, shape, lambda idx: broadcast_indices(x, idx)))


# ----------------------------------------------------------------------------- fills

@lowering("ConstantOfShape", attrs=("value",))
def _constant_of_shape(ctx: NodeContext) -> None:
    value = ctx.attr("value")
    v = 0 if value is None else onnx.numpy_helper.to_array(value).reshape(-1)[0].item()
    dtype = ctx.out_dtype()
    _copy(ctx, 0, lambda i: const(v, dtype))


@lowering("Range")
def _range(ctx: NodeContext) -> None:
    start, delta = ctx.constant(0, "start"), ctx.constant(2, "delta")
    ctx.constant(1, "limit")
    dtype = ctx.out_dtype()
    s, d = const(start.item(), dtype), const(delta.item(), dtype)  # type: ignore[union-attr]
    _copy(ctx, 0, lambda i: E.Binary("add", s, E.Binary("mul", E.Cast(i[0], dtype), d, dtype),
                                     dtype))


# ----------------------------------------------------------------------------- depth <-> space

def _blocksize(ctx: NodeContext, x: Tensor) -> int:
    b = int(ctx.attr("blocksize", 0))  # type: ignore[arg-type]
    if b <= 0 or x.rank != 4:
        raise _invalid(ctx, f"blocksize {b} on a rank-{x.rank} input (needs >= 1 and rank 4)")
    return b


def _block_mode(ctx: NodeContext) -> str:
    """DepthToSpace's and SpaceToDepth's channel order: DCR (depth, column, row) or CRD."""
    mode = ctx.attr("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise ctx.unsupported(f"mode '{mode}'",
                              hint=f"{ctx.node.op_type} modes are DCR and CRD")
    return str(mode)


@lowering("DepthToSpace", attrs=("blocksize", "mode"))
def _depth_to_space(ctx: NodeContext) -> None:
    x = ctx.input(0)
    b = _blocksize(ctx, x)
    mode = _block_mode(ctx)
    n, c, h, w = x.shape
    if c % (b * b):
        raise _invalid(ctx, f"{c} channels are not a multiple of blocksize^2 = {b * b}")
    cout = c // (b * b)
    shape = (n, cout, h * b, w * b)
    _check_shape(ctx, shape)

    def fn(idx: Index) -> Index:
        i0, ch, y, z = idx
        block = _add(_mul(_floormod(y, b), b), _floormod(z, b))  # offset inside the block
        channel = _add(_mul(block, cout), ch) if mode == "DCR" else _add(_mul(ch, b * b), block)
        return (i0, channel, _floordiv(y, b), _floordiv(z, b))
    ctx.bind(0, _view(x, shape, fn))


@lowering("SpaceToDepth", attrs=("blocksize", "mode"))
def _space_to_depth(ctx: NodeContext) -> None:
    x = ctx.input(0)
    b = _blocksize(ctx, x)
    mode = _block_mode(ctx)
    n, c, h, w = x.shape
    if h % b or w % b:
        raise _invalid(ctx, f"spatial extents {h}x{w} are not multiples of blocksize {b}")
    shape = (n, c * b * b, h // b, w // b)
    _check_shape(ctx, shape)

    def fn(idx: Index) -> Index:
        i0, k, y, z = idx
        if mode == "DCR":  # k = (row * b + col) * c + channel
            row, col = _floordiv(k, c * b), _floormod(_floordiv(k, c), b)
            channel = _floormod(k, c)
        else:  # CRD: k = (channel * b + row) * b + col
            row, col = _floormod(_floordiv(k, b), b), _floormod(k, b)
            channel = _floordiv(k, b * b)
        return (i0, channel, _add(_mul(y, b), row), _add(_mul(z, b), col))
    ctx.bind(0, _view(x, shape, fn))


# ----------------------------------------------------------------------------- Resize

RESIZE_MODES = ("nearest", "linear")
COORDINATE_MODES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel",
                    "half_pixel_symmetric")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _resize_scales(ctx: NodeContext, x: Tensor, shape: Sequence[int]) -> list[float]:
    """The scale factor of every axis (what maps output to input coordinates)."""
    rank = x.rank
    if ctx.opset < 11:
        return [float(s) for s in _floats(ctx.constant(1, "scales"))]
    axes_attr = ctx.attr("axes")
    axes = list(range(rank)) if axes_attr is None else \
        [_axis(ctx, a, rank, "axes entry") for a in _ints(axes_attr)]
    scales_v = ctx.constant(2, "scales") if ctx.has_input(2) else None
    sizes_v = ctx.constant(3, "sizes") if ctx.has_input(3) else None
    out = [1.0] * rank
    if scales_v is not None and scales_v.size:
        for a, s in zip(axes, _floats(scales_v)):
            out[a] = float(s)
        return out
    if sizes_v is None or sizes_v.size == 0:
        raise _invalid(ctx, "neither scales nor sizes is given")
    # like onnxruntime, the scale of a sizes input is size / in in single precision; the
    # policies then take one scale for all axes (the output shape follows from it)
    ratios = [np.float32(size) / np.float32(x.shape[a])
              for a, size in zip(axes, _floats(sizes_v))]
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
    if policy == "not_larger":
        ratios = [min(ratios)] * len(axes)
    elif policy == "not_smaller":
        ratios = [max(ratios)] * len(axes)
    elif policy != "stretch":
        raise ctx.unsupported(f"keep_aspect_ratio_policy '{policy}'")
    for a, r in zip(axes, ratios):
        out[a] = float(r)
    return out


def _floats(values: np.ndarray | None) -> list[float]:
    return [float(v) for v in np.asarray(values).reshape(-1)]


def _source_coordinates(mode: str, n_in: int, n_out: int, scale: float) -> np.ndarray:
    """x_original of every output coordinate, in single precision as onnxruntime."""
    f = np.float32
    y = np.arange(n_out, dtype=f)
    s = f(scale)
    half = f(0.5)
    if mode == "asymmetric":
        return y / s
    if mode == "half_pixel":
        return (y + half) / s - half
    if mode == "pytorch_half_pixel":
        return (y + half) / s - half if n_out > 1 else np.zeros(n_out, f)
    if mode == "align_corners":
        return y * f(n_in - 1) / f(n_out - 1) if n_out > 1 else np.zeros(n_out, f)
    # half_pixel_symmetric
    adjustment = f(n_out) / (s * f(n_in))
    offset = f(n_in) / f(2) * (f(1) - adjustment)
    return offset + (y + half) / s - half


def _nearest(x: np.ndarray, mode: str, downsample: bool) -> np.ndarray:
    floor = np.floor(x)
    if mode == "round_prefer_floor":
        r = np.where(x == floor + np.float32(0.5), floor, np.floor(x + np.float32(0.5)))
    elif mode == "round_prefer_ceil":
        r = np.floor(x + np.float32(0.5))
    elif mode == "floor":
        r = floor
    elif mode == "ceil":
        r = np.ceil(x)
    else:  # "simple", Resize-10: truncation, or ceil when shrinking
        r = np.ceil(x) if downsample else np.trunc(x)
    return r.astype(np.int64)


def _resize_taps(n_in: int, n_out: int, scale: float, mode: str,
                 coordinates: str, nearest_mode: str, dtype: str
                 ) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """Per output coordinate along one axis: the (source index, weight) taps; a weight
    None means 1."""
    x = _source_coordinates(coordinates, n_in, n_out, scale)
    if mode == "nearest":
        return [(np.clip(_nearest(x, nearest_mode, scale < 1), 0, n_in - 1), None)]
    x = np.clip(x, np.float32(0), np.float32(n_in - 1))
    lo = np.minimum(x.astype(np.int64), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = (x - lo.astype(np.float32)).astype(np.float32)
    if not frac.any():
        return [(lo, None)]
    w_hi = np.where(lo == hi, np.float32(0.5), frac)
    w_lo = np.where(lo == hi, np.float32(0.5), np.float32(1) - frac)
    return [(lo, w_lo.astype(dtype)), (hi, w_hi.astype(dtype))]


@lowering("Resize", attrs=("mode", "nearest_mode", "coordinate_transformation_mode",
                           "cubic_coeff_a", "exclude_outside", "extrapolation_value",
                           "antialias", "axes", "keep_aspect_ratio_policy"))
def _resize(ctx: NodeContext) -> None:
    x = ctx.input(0)
    shape = ctx.out_shape()
    dtype = x.dtype
    mode = ctx.attr("mode", "nearest")
    if mode not in RESIZE_MODES:
        raise ctx.unsupported(f"mode '{mode}'", hint="Resize is lowered for modes nearest "
                                                     "and linear")
    if ctx.opset < 11:
        coordinates, nearest_mode = "asymmetric", "simple"
    else:
        coordinates = ctx.attr("coordinate_transformation_mode", "half_pixel")
        nearest_mode = ctx.attr("nearest_mode", "round_prefer_floor")
    if coordinates not in COORDINATE_MODES:
        raise ctx.unsupported(f"coordinate_transformation_mode '{coordinates}'",
                              hint="lowered: " + ", ".join(COORDINATE_MODES))
    if mode == "nearest" and nearest_mode not in NEAREST_MODES + ("simple",):
        raise ctx.unsupported(f"nearest_mode '{nearest_mode}'")
    if int(ctx.attr("antialias", 0)):  # type: ignore[arg-type]
        raise ctx.unsupported("antialias=1", hint="Resize is lowered without antialiasing")
    if int(ctx.attr("exclude_outside", 0)):  # type: ignore[arg-type]
        raise ctx.unsupported("exclude_outside=1")
    if mode == "linear" and not E.is_float(dtype):
        raise ctx.unsupported(f"linear Resize of {dtype} values",
                              hint="linear Resize is lowered for float types")
    if len(shape) != x.rank:
        raise _invalid(ctx, "the output rank differs from the input's")
    scales = _resize_scales(ctx, x, shape)
    if tuple(shape) == tuple(x.shape):  # onnxruntime copies then, whatever the scales
        ctx.bind(0, x)
        return
    out = ctx.output()
    i = ctx.iterators(len(shape))
    axis_taps: list[list[tuple[E.Expr, E.Expr | None]]] = []
    for k, (n_in, n_out, s) in enumerate(zip(x.shape, shape, scales)):
        if (n_in == n_out and s == 1.0) or n_in == 0:  # every mode maps y to y
            axis_taps.append([(i[k], None)])
            continue
        ratios = [Fraction(n_in, max(n_out, 1))]
        if s > 0:
            ratios.append(Fraction(1 / s).limit_denominator(256))
        taps = []
        for src, weight in _resize_taps(n_in, n_out, s, mode, coordinates,
                                        nearest_mode, dtype):
            w = None if weight is None else ctx.table(weight, dtype)[(i[k],)]
            taps.append((_index_from_table(ctx, src, i[k], ratios), w))
        axis_taps.append(taps)
    value: E.Expr | None = None
    for combo in product(*axis_taps):
        term = x[tuple(src for src, _ in combo)]
        for _, w in combo:
            if w is not None:
                term = E.Binary("mul", w, term, dtype)
        value = term if value is None else E.Binary("add", value, term, dtype)
    ctx.b.assign(out[i], value, shape, location=ctx.location)  # type: ignore[arg-type]
