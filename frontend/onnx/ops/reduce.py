"""ONNX lowering: reductions and normalisations (Reduce*, ArgMax/ArgMin, Softmax family,
LayerNormalization, MeanVarianceNormalization).

Input: a :class:`NodeContext` whose input is a tensor of the group. Output: statements
in the shape Tensor Comprehensions writes them, ``acc(kept) op=! f(X(all))``: an
initialisation of the accumulator to the reduction's identity, then one statement with
``reduction="+" | "*" | "max" | "min"`` over every input point (the scheduler's
scheduler/reductions.py recognises it and may reorder, vectorise and fuse its loops),
then, where the op needs one, a finishing statement over the kept points (the mean's
division, L2's square root, softmax's normalisation). Reducing an axis of extent 0
leaves the update statement empty, so the result is the identity.

Axes are compile-time constants (an attribute, or the ``axes`` input from ReduceSum-13
and the other Reduce ops at opset 18): the loop nest of each statement is fixed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from polycomp import expr as E

from ..builder import Tensor, broadcast, const, flat_index
from . import NodeContext, call, lowering

Index = tuple[E.Expr, ...]
ZERO = E.Const(0, E.INDEX_DTYPE)
INT64_MAX = int(np.iinfo(np.int64).max)


# ----------------------------------------------------------------------------- helpers
def _axis(ctx: NodeContext, axis: object, rank: int, what: str = "axis") -> int:
    """``axis`` in [-rank, rank) as a non-negative axis."""
    a = int(axis)  # type: ignore[call-overload]
    if not -rank <= a < rank:
        raise ctx.unsupported(f"{what} {a} is out of range for an input of rank {rank}")
    return a % rank if rank else a


def _kept(shape: Sequence[int], axes: frozenset[int], keepdims: bool) -> tuple[int, ...]:
    """The shape of a reduction over ``axes`` (1 at the reduced axes, or dropped)."""
    return tuple(1 if k in axes else int(s) for k, s in enumerate(shape)
                 if keepdims or k not in axes)


def _reduced_index(i: Index, axes: frozenset[int], keepdims: bool) -> Index:
    """The accumulator element an input point at ``i`` contributes to."""
    return tuple(ZERO if k in axes else it for k, it in enumerate(i)
                 if keepdims or k not in axes)


def _cast(value: E.Expr, dtype: str) -> E.Expr:
    return value if value.dtype == dtype else E.Cast(value, dtype)


def _bin(op: str, a: E.Expr, b: E.Expr) -> E.Expr:
    return E.Binary(op, a, b, a.dtype)


def _points(ctx: NodeContext, shape: Sequence[int]) -> tuple[Index, list[int]]:
    """The index of every point of ``shape`` over the iterators of its dimensions of
    extent other than 1 (0 at the others), and those extents. A statement then has no
    pinned dimension (``S[i0, i1 = 0]``) for the scheduler to align with another
    statement's loop: the keepdims accumulator of LayerNormalization fuses into the row
    loop like TC's ``mean(n)``."""
    live = [k for k, extent in enumerate(shape) if extent != 1]
    its = iter(ctx.iterators(len(live)))
    return tuple(next(its) if k in live else ZERO for k in range(len(shape))), \
        [int(shape[k]) for k in live]


def _init(ctx: NodeContext, acc: Tensor, value: int | float | bool) -> None:
    """Every element of ``acc`` = ``value`` (the reduction's identity)."""
    j, extents = _points(ctx, acc.shape)
    ctx.b.assign(acc[j], const(value, acc.dtype), extents, location=ctx.location)


def _reduce(ctx: NodeContext, acc: Tensor, op: str, shape: Sequence[int],
            axes: frozenset[int], keepdims: bool, value: Callable[[Index], E.Expr]) -> None:
    """``acc(kept) op=! value(i)`` over every point ``i`` of ``shape``: the identity,
    then the reduction statement (``keepdims``: acc has extent 1 at the reduced axes)."""
    _init(ctx, acc, E.reduction_identity(op, acc.dtype))
    i, extents = _points(ctx, shape)
    ctx.b.assign(acc[_reduced_index(i, axes, keepdims)], _cast(value(i), acc.dtype), extents,
                 reduction=op, location=ctx.location)


def _finish(ctx: NodeContext, out: Tensor, fn: Callable[[Index], E.Expr]) -> None:
    """``out(j) = fn(j)`` over every element of ``out``."""
    j, extents = _points(ctx, out.shape)
    ctx.b.assign(out[j], _cast(fn(j), out.dtype), extents, location=ctx.location)


def _temp(ctx: NodeContext, what: str, dtype: str, shape: Sequence[int]) -> Tensor:
    return ctx.b.new_array(f"{ctx.node.outputs[0]}:{what}", dtype, shape)


def _require_float(ctx: NodeContext, dtype: str) -> None:
    if not E.is_float(dtype):
        raise ctx.unsupported(f"{ctx.node.op_type} of {dtype} values",
                              hint=f"{ctx.node.op_type} is lowered for float types")


def _abs(x: E.Expr) -> E.Expr:
    if E.is_float(x.dtype):
        return call("abs", x)
    if x.dtype.startswith("uint") or x.dtype == "bool":
        return x
    return E.Select(E.Binary("lt", x, const(0, x.dtype), "bool"), E.Unary("neg", x, x.dtype),
                    x, x.dtype)


def _finite_or_zero(m: E.Expr) -> E.Expr:
    """``m``, or 0 where it is infinite: the shift of a log-sum-exp (a row of -inf, or one
    holding +inf, must not give inf - inf)."""
    inf = const(math.inf, m.dtype)
    return E.Select(E.Binary("lt", call("abs", m), inf, "bool"), m, const(0, m.dtype), m.dtype)


# ----------------------------------------------------------------------------- Reduce*
@dataclass(frozen=True)
class _Kind:
    op: str  # the reduction operator
    element: Callable[[E.Expr], E.Expr]  # what is reduced, from the input element
    finish: Callable[[E.Expr, int], E.Expr] | None = None  # (accumulated, count) -> result
    float_only: bool = False


def _square(x: E.Expr) -> E.Expr:
    return _bin("mul", x, x)


def _mean(acc: E.Expr, n: int) -> E.Expr:
    """The sum over n; 0 for no elements, as onnxruntime gives (and no 0 / 0)."""
    return _bin("div", acc, const(max(n, 1), acc.dtype))


KINDS = {
    "ReduceSum": _Kind("+", lambda x: x),
    "ReduceMean": _Kind("+", lambda x: x, _mean),
    "ReduceMax": _Kind("max", lambda x: x),
    "ReduceMin": _Kind("min", lambda x: x),
    "ReduceProd": _Kind("*", lambda x: x),
    "ReduceL1": _Kind("+", _abs),
    "ReduceL2": _Kind("+", _square, lambda acc, n: call("sqrt", acc), float_only=True),
    "ReduceSumSquare": _Kind("+", _square),
    "ReduceLogSum": _Kind("+", lambda x: x, lambda acc, n: call("log", acc), float_only=True),
}
REDUCE_ATTRS = ("axes", "keepdims", "noop_with_empty_axes")


def _reduce_axes(ctx: NodeContext, rank: int) -> frozenset[int]:
    """The reduced axes: the attribute (older opsets) or the constant second input;
    none given means all, or none with noop_with_empty_axes."""
    axes = ctx.attr("axes")
    if axes is None and ctx.has_input(1):
        axes = [int(a) for a in ctx.constant(1, "axes").reshape(-1)]
    if not axes:
        return frozenset() if int(ctx.attr("noop_with_empty_axes", 0)) else frozenset(range(rank))
    out = [_axis(ctx, a, rank, "axes entry") for a in axes]  # type: ignore[union-attr]
    if len(set(out)) != len(out):
        raise ctx.unsupported(f"axes {list(axes)} repeat an axis")  # type: ignore[arg-type]
    return frozenset(out)


def _lower_reduce(ctx: NodeContext) -> None:
    x = ctx.input(0)
    dtype = ctx.out_dtype()
    axes = _reduce_axes(ctx, x.rank)
    keepdims = bool(int(ctx.attr("keepdims", 1)))  # type: ignore[call-overload]
    if ctx.node.op_type == "ReduceLogSumExp":
        _require_float(ctx, dtype)
        _log_sum_exp(ctx, x, axes, keepdims)
        return
    kind = KINDS[ctx.node.op_type]
    if kind.float_only:
        _require_float(ctx, dtype)
    out = ctx.output()
    n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    if kind.finish is None:  # the output is the accumulator
        _reduce(ctx, out, kind.op, x.shape, axes, keepdims, lambda i: kind.element(x[i]))
        return
    acc = _temp(ctx, "acc", dtype, out.shape)
    _reduce(ctx, acc, kind.op, x.shape, axes, keepdims, lambda i: kind.element(x[i]))
    _finish(ctx, out, lambda j: kind.finish(acc[j], n))  # type: ignore[misc]


def _log_sum_exp(ctx: NodeContext, x: Tensor, axes: frozenset[int], keepdims: bool) -> None:
    """log(sum(exp(x - m))) + m with m the maximum: no overflow for large x."""
    out = ctx.output()
    mx = _temp(ctx, "max", out.dtype, out.shape)
    s = _temp(ctx, "sum", out.dtype, out.shape)
    _reduce(ctx, mx, "max", x.shape, axes, keepdims, lambda i: x[i])
    _reduce(ctx, s, "+", x.shape, axes, keepdims, lambda i: call(
        "exp", _bin("sub", _cast(x[i], out.dtype),
                    _finite_or_zero(mx[_reduced_index(i, axes, keepdims)]))))
    _finish(ctx, out, lambda j: _bin("add", call("log", s[j]), _finite_or_zero(mx[j])))


for _name in list(KINDS) + ["ReduceLogSumExp"]:
    lowering(_name, attrs=REDUCE_ATTRS)(_lower_reduce)


# ----------------------------------------------------------------------------- ArgMax/ArgMin
def _arg_extreme(ctx: NodeContext, op: str) -> None:
    """The max (min) of the value, then the first (or last) index holding it: a min
    (max) reduction of the index over the positions equal to the extreme."""
    x = ctx.input(0)
    if x.rank == 0:
        raise ctx.unsupported("a scalar input", hint="ArgMax/ArgMin need an axis")
    axis = _axis(ctx, ctx.attr("axis", 0), x.rank)
    if x.shape[axis] == 0:
        raise ctx.unsupported(f"axis {axis} has extent 0: there is no index to return")
    keepdims = bool(int(ctx.attr("keepdims", 1)))  # type: ignore[call-overload]
    last = bool(int(ctx.attr("select_last_index", 0)))  # type: ignore[call-overload]
    axes = frozenset((axis,))
    out = ctx.output()
    extreme = _temp(ctx, op, x.dtype, out.shape)
    _reduce(ctx, extreme, op, x.shape, axes, keepdims, lambda i: x[i])
    pick = "max" if last else "min"
    none = E.reduction_identity(pick, out.dtype)  # never chosen where a position matches

    def position(i: Index) -> E.Expr:
        hit = E.Binary("eq", x[i], extreme[_reduced_index(i, axes, keepdims)], "bool")
        return E.Select(hit, _cast(i[axis], out.dtype), const(none, out.dtype), out.dtype)
    _reduce(ctx, out, pick, x.shape, axes, keepdims, position)


ARG_ATTRS = ("axis", "keepdims", "select_last_index")


@lowering("ArgMax", attrs=ARG_ATTRS)
def _argmax(ctx: NodeContext) -> None:
    _arg_extreme(ctx, "max")


@lowering("ArgMin", attrs=ARG_ATTRS)
def _argmin(ctx: NodeContext) -> None:
    _arg_extreme(ctx, "min")


# ----------------------------------------------------------------------------- Softmax family
def _softmax_axes(ctx: NodeContext, rank: int) -> frozenset[int]:
    """Before opset 13 the input is read as 2-D [prod(d[:axis]), prod(d[axis:])] (axis 1
    by default): a reduction over every axis from ``axis`` on, in row-major order. From
    opset 13, one axis (-1 by default)."""
    if rank == 0:
        raise ctx.unsupported("a scalar input", hint=f"{ctx.node.op_type} needs an axis")
    if ctx.opset < 13:
        axis = int(ctx.attr("axis", 1))  # type: ignore[call-overload]
        if not -rank <= axis <= rank:
            raise ctx.unsupported(f"axis {axis} is out of range for an input of rank {rank}")
        return frozenset(range(axis if axis >= 0 else axis + rank, rank))
    return frozenset((_axis(ctx, ctx.attr("axis", -1), rank),))


def _row_max(ctx: NodeContext, x: Tensor, axes: frozenset[int]) -> Tensor:
    """max over ``axes`` into a temporary of the kept axes."""
    mx = _temp(ctx, "max", x.dtype, _kept(x.shape, axes, False))
    _reduce(ctx, mx, "max", x.shape, axes, False, lambda i: x[i])
    return mx


@lowering("Softmax", attrs=("axis",))
def _softmax(ctx: NodeContext) -> None:
    """TC's softmax: mx max=! X; e = exp(X - mx); s +=! e; Y = e / s."""
    x = ctx.input(0)
    _require_float(ctx, x.dtype)
    axes = _softmax_axes(ctx, x.rank)
    mx = _row_max(ctx, x, axes)
    e = _temp(ctx, "exp", x.dtype, x.shape)
    row = lambda i: _reduced_index(i, axes, False)  # noqa: E731
    _finish(ctx, e, lambda i: call("exp", _bin("sub", x[i], mx[row(i)])))
    s = _temp(ctx, "sum", x.dtype, mx.shape)
    _reduce(ctx, s, "+", x.shape, axes, False, lambda i: e[i])
    out = ctx.output()
    _finish(ctx, out, lambda i: _bin("div", e[i], s[row(i)]))


@lowering("LogSoftmax", attrs=("axis",))
def _log_softmax(ctx: NodeContext) -> None:
    """mx max=! X; s +=! exp(X - mx); Y = X - mx - log(s)."""
    x = ctx.input(0)
    _require_float(ctx, x.dtype)
    axes = _softmax_axes(ctx, x.rank)
    mx = _row_max(ctx, x, axes)
    row = lambda i: _reduced_index(i, axes, False)  # noqa: E731
    s = _temp(ctx, "sum", x.dtype, mx.shape)
    _reduce(ctx, s, "+", x.shape, axes, False,
            lambda i: call("exp", _bin("sub", x[i], mx[row(i)])))
    out = ctx.output()
    _finish(ctx, out, lambda i: _bin("sub", _bin("sub", x[i], mx[row(i)]),
                                     call("log", s[row(i)])))


@lowering("Hardmax", attrs=("axis",))
def _hardmax(ctx: NodeContext) -> None:
    """1 at the first maximum of each row (row-major order over the reduced axes), 0
    elsewhere: the maximum, then the least flat position holding it."""
    x = ctx.input(0)
    axes = _softmax_axes(ctx, x.rank)
    mx = _row_max(ctx, x, axes)
    row = lambda i: _reduced_index(i, axes, False)  # noqa: E731
    reduced = sorted(axes)

    def flat(i: Index) -> E.Expr:
        return flat_index([i[a] for a in reduced], [x.shape[a] for a in reduced])
    first = _temp(ctx, "first", E.INDEX_DTYPE, mx.shape)
    _reduce(ctx, first, "min", x.shape, axes, False, lambda i: E.Select(
        E.Binary("eq", x[i], mx[row(i)], "bool"), flat(i), const(INT64_MAX, E.INDEX_DTYPE),
        E.INDEX_DTYPE))
    out = ctx.output()
    _finish(ctx, out, lambda i: E.Select(E.Binary("eq", flat(i), first[row(i)], "bool"),
                                         const(1, out.dtype), const(0, out.dtype), out.dtype))


# ----------------------------------------------------------------------------- normalisations
def _stat(ctx: NodeContext, k: int, what: str, dtype: str, shape: tuple[int, ...]) -> Tensor:
    """The array of a statistic (mean, 1/std): output k itself when the node requests it
    with this dtype, else a temporary (copied to output k by :func:`_publish`)."""
    if ctx.has_output(k) and ctx.out_dtype(k) == dtype and ctx.out_shape(k) == shape:
        return ctx.output(k)
    return _temp(ctx, what, dtype, shape)


def _publish(ctx: NodeContext, k: int, stat: Tensor) -> None:
    """Output k (when requested and not ``stat`` itself) = ``stat`` in its dtype."""
    if ctx.has_output(k) and ctx.node.outputs[k] not in ctx.produced:
        out = ctx.output(k)
        _finish(ctx, out, lambda j: _cast(stat[j], out.dtype))


def _mean_var(ctx: NodeContext, x: Tensor, axes: frozenset[int], dtype: str,
              mean: Tensor, var: Tensor) -> Callable[[Index], E.Expr]:
    """TC's layernorm statistics: mean +=! X / n; var +=! (X - mean)^2 / n (two passes:
    no cancellation). Returns i -> X(i) - mean, in ``dtype``."""
    n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    inv_n = const(1.0 / n if n else math.nan, dtype)

    def centred(i: Index) -> E.Expr:
        return _bin("sub", _cast(x[i], dtype), mean[_reduced_index(i, axes, True)])
    _reduce(ctx, mean, "+", x.shape, axes, True, lambda i: _bin("mul", _cast(x[i], dtype), inv_n))
    _reduce(ctx, var, "+", x.shape, axes, True, lambda i: _bin("mul", _square(centred(i)), inv_n))
    return centred


@lowering("LayerNormalization", attrs=("axis", "epsilon", "stash_type"))
def _layer_norm(ctx: NodeContext) -> None:
    """Y = (X - mean) * rsqrt(var + epsilon) * Scale + B over the axes from ``axis`` on;
    Mean and InvStdDev (outputs 1, 2) when requested."""
    x = ctx.input(0)
    _require_float(ctx, x.dtype)
    if int(ctx.attr("stash_type", 1)) != 1:  # type: ignore[call-overload]
        raise ctx.unsupported(f"stash_type={ctx.attr('stash_type')}",
                              hint="statistics are computed in float32 (stash_type=1)")
    if x.rank == 0:
        raise ctx.unsupported("a scalar input", hint="LayerNormalization needs an axis")
    axis = _axis(ctx, ctx.attr("axis", -1), x.rank)
    axes = frozenset(range(axis, x.rank))
    dtype = "float64" if x.dtype == "float64" else "float32"  # stash_type=1: at least float
    eps = const(float(ctx.attr("epsilon", 1e-5)), dtype)  # type: ignore[arg-type]
    shape = _kept(x.shape, axes, True)
    mean = _stat(ctx, 1, "mean", dtype, shape)
    var = _temp(ctx, "var", dtype, shape)
    centred = _mean_var(ctx, x, axes, dtype, mean, var)
    _publish(ctx, 1, mean)
    if ctx.has_output(2):
        inv = _stat(ctx, 2, "inv_std", dtype, shape)
        _finish(ctx, inv, lambda j: call("rsqrt", _bin("add", var[j], eps)))
        _publish(ctx, 2, inv)
    scale, bias = ctx.input(1), ctx.optional(2)
    out = ctx.output(0)

    def normalised(i: Index) -> E.Expr:
        y = _bin("mul", _bin("mul", _cast(broadcast(scale, i), dtype), centred(i)),
                 call("rsqrt", _bin("add", var[_reduced_index(i, axes, True)], eps)))
        return y if bias is None else _bin("add", y, _cast(broadcast(bias, i), dtype))
    _finish(ctx, out, normalised)


@lowering("MeanVarianceNormalization", attrs=("axes",))
def _mvn(ctx: NodeContext) -> None:
    """Y = (X - mean) / (sqrt(var) + 1e-9) over ``axes`` (default [0, 2, 3]), as
    onnxruntime computes it."""
    x = ctx.input(0)
    _require_float(ctx, x.dtype)
    raw = ctx.attr("axes", [0, 2, 3])
    axes = frozenset(_axis(ctx, a, x.rank, "axes entry") for a in raw)  # type: ignore[union-attr]
    dtype = "float64" if x.dtype == "float64" else "float32"
    shape = _kept(x.shape, axes, True)
    mean = _temp(ctx, "mean", dtype, shape)
    var = _temp(ctx, "var", dtype, shape)
    centred = _mean_var(ctx, x, axes, dtype, mean, var)
    eps = const(1e-9, dtype)
    _finish(ctx, ctx.output(), lambda i: _bin("div", centred(i), _bin(
        "add", call("sqrt", var[_reduced_index(i, axes, True)]), eps)))
