"""ONNX lowering: element-by-element operators (numpy broadcasting), one statement each.

Arithmetic, comparisons, logic, activations, math functions and Cast. Their statements
are what the scheduler fuses into the producing convolution or matmul of the group.
"""

from __future__ import annotations

import math

from polycomp import expr as E

from . import NodeContext, call, elem_const, lowering


def _binary(op: str):
    def lower(ctx: NodeContext) -> None:
        dtype = ctx.out_dtype()
        ctx.map_elements(lambda a, b: E.Binary(op, a, b, dtype), [ctx.input(0), ctx.input(1)])
    return lower


for _op, _name in (("add", "Add"), ("sub", "Sub"), ("mul", "Mul"), ("div", "Div")):
    lowering(_name)(_binary(_op))


def _compare(op: str):
    def lower(ctx: NodeContext) -> None:
        ctx.map_elements(lambda a, b: E.Binary(op, a, b, "bool"), [ctx.input(0), ctx.input(1)])
    return lower


for _op, _name in (("eq", "Equal"), ("lt", "Less"), ("gt", "Greater"), ("le", "LessOrEqual"),
                   ("ge", "GreaterOrEqual")):
    lowering(_name)(_compare(_op))


@lowering("And")
def _and(ctx: NodeContext) -> None:
    ctx.map_elements(lambda a, b: E.Binary("and", a, b, "bool"), [ctx.input(0), ctx.input(1)])


@lowering("Or")
def _or(ctx: NodeContext) -> None:
    ctx.map_elements(lambda a, b: E.Binary("or", a, b, "bool"), [ctx.input(0), ctx.input(1)])


@lowering("Xor")
def _xor(ctx: NodeContext) -> None:
    ctx.map_elements(lambda a, b: E.Binary("ne", a, b, "bool"), [ctx.input(0), ctx.input(1)])


@lowering("Not")
def _not(ctx: NodeContext) -> None:
    ctx.map_elements(lambda a: E.Unary("not", a, "bool"), [ctx.input(0)])


def _minmax(ctx: NodeContext, func: str) -> None:
    dtype = ctx.out_dtype()
    fn = ("fmax" if func == "max" else "fmin") if E.is_float(dtype) else func

    def combine(*xs: E.Expr) -> E.Expr:
        out = xs[0]
        for x in xs[1:]:
            out = call(fn, out, x, dtype=dtype)
        return out
    ctx.map_elements(combine, [ctx.input(k) for k in range(ctx.n_inputs)])


@lowering("Max")
def _max(ctx: NodeContext) -> None:
    _minmax(ctx, "max")


@lowering("Min")
def _min(ctx: NodeContext) -> None:
    _minmax(ctx, "min")


@lowering("Sum")
def _sum(ctx: NodeContext) -> None:
    dtype = ctx.out_dtype()

    def combine(*xs: E.Expr) -> E.Expr:
        out = xs[0]
        for x in xs[1:]:
            out = E.Binary("add", out, x, dtype)
        return out
    ctx.map_elements(combine, [ctx.input(k) for k in range(ctx.n_inputs)])


@lowering("Mean")
def _mean(ctx: NodeContext) -> None:
    dtype = ctx.out_dtype()
    n = ctx.n_inputs

    def combine(*xs: E.Expr) -> E.Expr:
        out = xs[0]
        for x in xs[1:]:
            out = E.Binary("add", out, x, dtype)
        return E.Binary("div", out, elem_const(n, dtype), dtype)
    ctx.map_elements(combine, [ctx.input(k) for k in range(n)])


@lowering("Pow")
def _pow(ctx: NodeContext) -> None:
    dtype = ctx.out_dtype()
    exponent = ctx.input(1)
    if not E.is_float(dtype):
        if dtype == "bool":
            raise ctx.unsupported("Pow of bool values")
        if E.is_float(exponent.dtype):
            # numpy (onnx's reference) computes it in double and truncates the result
            ctx.map_elements(lambda a, b: E.Cast(call("pow", E.Cast(a, "float64"), E.Cast(
                b, "float64") if b.dtype != "float64" else b), dtype), [ctx.input(0), exponent])
            return
        # an integer power: codegen's helper multiplies by squaring, wrapping like the type
        ctx.map_elements(lambda a, b: call("pow", a, b, dtype=dtype), [ctx.input(0), exponent])
        return
    if exponent.is_uniform_constant():
        value = float(exponent.value.reshape(-1)[0])  # type: ignore[union-attr]
        if value == 2.0:
            ctx.map_elements(lambda a: E.Binary("mul", a, a, dtype), [ctx.input(0)])
            return
        if value == 1.0:
            ctx.map_elements(lambda a: a, [ctx.input(0)])
            return
        if value == 0.5:
            ctx.map_elements(lambda a: call("sqrt", a), [ctx.input(0)])
            return
    ctx.map_elements(lambda a, b: call("pow", a, E.Cast(b, dtype) if b.dtype != dtype else b,
                                       dtype=dtype), [ctx.input(0), exponent])


def _unary(func: str):
    def lower(ctx: NodeContext) -> None:
        if not E.is_float(ctx.out_dtype()) and func not in ("abs",):
            raise ctx.unsupported(f"{ctx.node.op_type} of {ctx.out_dtype()} values",
                                  hint="this op is lowered for float types")
        ctx.map_elements(lambda a: call(func, a), [ctx.input(0)])
    return lower


for _func, _name in (("exp", "Exp"), ("log", "Log"), ("sqrt", "Sqrt"), ("tanh", "Tanh"),
                     ("erf", "Erf"), ("sigmoid", "Sigmoid"), ("sin", "Sin"), ("cos", "Cos"),
                     ("floor", "Floor"), ("ceil", "Ceil")):
    lowering(_name)(_unary(_func))


@lowering("Abs")
def _abs(ctx: NodeContext) -> None:
    dtype = ctx.out_dtype()
    if E.is_float(dtype):
        ctx.map_elements(lambda a: call("abs", a), [ctx.input(0)])
    else:
        zero = elem_const(0, dtype)
        ctx.map_elements(lambda a: E.Select(E.Binary("lt", a, zero, "bool"),
                                            E.Unary("neg", a, dtype), a, dtype), [ctx.input(0)])


@lowering("Neg")
def _neg(ctx: NodeContext) -> None:
    dtype = ctx.out_dtype()
    ctx.map_elements(lambda a: E.Unary("neg", a, dtype), [ctx.input(0)])


@lowering("Sign")
def _sign(ctx: NodeContext) -> None:
    dtype = ctx.out_dtype()
    zero, one = elem_const(0, dtype), elem_const(1, dtype)
    ctx.map_elements(lambda a: E.Select(E.Binary("gt", a, zero, "bool"), one,
                                        E.Select(E.Binary("lt", a, zero, "bool"),
                                                 E.Unary("neg", one, dtype), zero, dtype),
                                        dtype), [ctx.input(0)])


@lowering("Reciprocal")
def _reciprocal(ctx: NodeContext) -> None:
    dtype = ctx.out_dtype()
    ctx.map_elements(lambda a: E.Binary("div", elem_const(1, dtype), a, dtype), [ctx.input(0)])


@lowering("Relu")
def _relu(ctx: NodeContext) -> None:
    dtype = ctx.out_dtype()
    zero = elem_const(0, dtype)
    if E.is_float(dtype):
        ctx.map_elements(lambda a: call("fmax", a, zero), [ctx.input(0)])
    else:
        ctx.map_elements(lambda a: call("max", a, zero), [ctx.input(0)])


@lowering("LeakyRelu", attrs=("alpha",))
def _leaky_relu(ctx: NodeContext) -> None:
    dtype = ctx.out_dtype()
    alpha = elem_const(float(ctx.attr("alpha", 0.01)), dtype)  # type: ignore[arg-type]
    zero = elem_const(0, dtype)
    ctx.map_elements(lambda a: E.Select(E.Binary("lt", a, zero, "bool"),
                                        E.Binary("mul", alpha, a, dtype), a, dtype),
                     [ctx.input(0)])


@lowering("PRelu")
def _prelu(ctx: NodeContext) -> None:
    dtype = ctx.out_dtype()
    zero = elem_const(0, dtype)
    ctx.map_elements(lambda a, s: E.Select(E.Binary("lt", a, zero, "bool"),
                                           E.Binary("mul", s, a, dtype), a, dtype),
                     [ctx.input(0), ctx.input(1)])


@lowering("Elu", attrs=("alpha",))
def _elu(ctx: NodeContext) -> None:
    dtype = ctx.out_dtype()
    alpha = elem_const(float(ctx.attr("alpha", 1.0)), dtype)  # type: ignore[arg-type]
    zero, one = elem_const(0, dtype), elem_const(1, dtype)
    ctx.map_elements(lambda a: E.Select(
        E.Binary("lt", a, zero, "bool"),
        E.Binary("mul", alpha, E.Binary("sub", call("exp", a), one, dtype), dtype), a, dtype),
        [ctx.input(0)])


@lowering("Selu", attrs=("alpha", "gamma"))
def _selu(ctx: NodeContext) -> None:
    dtype = ctx.out_dtype()
    alpha = float(ctx.attr("alpha", 1.67326319217681884765625))  # type: ignore[arg-type]
    gamma = float(ctx.attr("gamma", 1.05070102214813232421875))  # type: ignore[arg-type]
    zero, one = elem_const(0, dtype), elem_const(1, dtype)
    a_, g_ = elem_const(alpha, dtype), elem_const(gamma, dtype)
    ctx.map_elements(lambda a: E.Binary("mul", g_, E.Select(
        E.Binary("le", a, zero, "bool"),
        E.Binary("mul", a_, E.Binary("sub", call("exp", a), one, dtype), dtype), a, dtype),
        dtype), [ctx.input(0)])


@lowering("Softplus")
def _softplus(ctx: NodeContext) -> None:
    dtype = ctx.out_dtype()
    one = elem_const(1, dtype)
    ctx.map_elements(lambda a: call("log", E.Binary("add", call("exp", a), one, dtype)),
                     [ctx.input(0)])


@lowering("Softsign")
def _softsign(ctx: NodeContext) -> None:
    dtype = ctx.out_dtype()
    one = elem_const(1, dtype)
    ctx.map_elements(lambda a: E.Binary("div", a, E.Binary("add", one, call("abs", a), dtype),
                                        dtype), [ctx.input(0)])


@lowering("HardSigmoid", attrs=("alpha", "beta"))
def _hard_sigmoid(ctx: NodeContext) -> None:
    dtype = ctx.out_dtype()
    alpha = elem_const(float(ctx.attr("alpha", 0.2)), dtype)  # type: ignore[arg-type]
    beta = elem_const(float(ctx.attr("beta", 0.5)), dtype)  # type: ignore[arg-type]
    zero, one = elem_const(0, dtype), elem_const(1, dtype)
    ctx.map_elements(lambda a: call("fmax", zero, call("fmin", one, E.Binary(
        "add", E.Binary("mul", alpha, a, dtype), beta, dtype))), [ctx.input(0)])


@lowering("HardSwish")
def _hard_swish(ctx: NodeContext) -> None:
    dtype = ctx.out_dtype()
    alpha, beta = elem_const(1.0 / 6.0, dtype), elem_const(0.5, dtype)
    zero, one = elem_const(0, dtype), elem_const(1, dtype)
    ctx.map_elements(lambda a: E.Binary("mul", a, call("fmax", zero, call("fmin", one, E.Binary(
        "add", E.Binary("mul", alpha, a, dtype), beta, dtype))), dtype), [ctx.input(0)])


@lowering("Gelu", attrs=("approximate",))
def _gelu(ctx: NodeContext) -> None:
    dtype = ctx.out_dtype()
    half, one = elem_const(0.5, dtype), elem_const(1, dtype)
    if ctx.attr("approximate", "none") == "tanh":
        c = elem_const(math.sqrt(2.0 / math.pi), dtype)
        k = elem_const(0.044715, dtype)
        ctx.map_elements(lambda a: E.Binary("mul", E.Binary("mul", half, a, dtype), E.Binary(
            "add", one, call("tanh", E.Binary("mul", c, E.Binary(
                "add", a, E.Binary("mul", k, E.Binary("mul", a, E.Binary("mul", a, a, dtype),
                                                      dtype), dtype), dtype), dtype)),
            dtype), dtype), [ctx.input(0)])
        return
    if ctx.attr("approximate", "none") != "none":
        raise ctx.unsupported(f"approximate={ctx.attr('approximate')!r}",
                              hint="Gelu's approximate is 'none' or 'tanh'")
    r = elem_const(1.0 / math.sqrt(2.0), dtype)
    ctx.map_elements(lambda a: E.Binary("mul", E.Binary("mul", half, a, dtype), E.Binary(
        "add", one, call("erf", E.Binary("mul", a, r, dtype)), dtype), dtype), [ctx.input(0)])


@lowering("Clip", attrs=("min", "max"))
def _clip(ctx: NodeContext) -> None:
    dtype = ctx.out_dtype()
    fmax, fmin = ("fmax", "fmin") if E.is_float(dtype) else ("max", "min")
    inputs = [ctx.input(0)]
    lo = ctx.optional(1) if ctx.opset >= 11 else None
    hi = ctx.optional(2) if ctx.opset >= 11 else None
    if ctx.opset < 11:
        lo_v, hi_v = ctx.attr("min"), ctx.attr("max")
    else:
        lo_v = hi_v = None

    def clip(a: E.Expr, *bounds: E.Expr) -> E.Expr:
        it = iter(bounds)
        out = a
        if lo is not None:
            out = call(fmax, out, next(it), dtype=dtype)
        elif lo_v is not None:
            out = call(fmax, out, elem_const(lo_v, dtype), dtype=dtype)
        if hi is not None:
            out = call(fmin, out, next(it), dtype=dtype)
        elif hi_v is not None:
            out = call(fmin, out, elem_const(hi_v, dtype), dtype=dtype)
        return out
    inputs += [t for t in (lo, hi) if t is not None]
    ctx.map_elements(clip, inputs)


@lowering("Where")
def _where(ctx: NodeContext) -> None:
    dtype = ctx.out_dtype()
    ctx.map_elements(lambda c, a, b: E.Select(c, a, b, dtype),
                     [ctx.input(0), ctx.input(1), ctx.input(2)])


@lowering("Cast", attrs=("to", "saturate", "round_mode"))
def _cast(ctx: NodeContext) -> None:
    _convert(ctx)


@lowering("CastLike", attrs=("saturate", "round_mode"))
def _cast_like(ctx: NodeContext) -> None:
    # the second input gives only the type, which inference has put on the output
    _convert(ctx)


def _convert(ctx: NodeContext) -> None:
    """Input 0 as the output's type: a C conversion between dtypes polycomp computes
    with; from a storage format (bfloat16, float8, int4, ...), its exact decoding first;
    to one, an encoding of the value (rounding to nearest even, saturating or not as ONNX
    says: polycomp/expr.Conversion)."""
    graph = ctx.graph
    src = graph.values[ctx.node.inputs[0]].format
    dst = graph.values[ctx.node.outputs[0]].format
    dtype = ctx.out_dtype()
    saturate = bool(ctx.attr("saturate", 1))
    round_mode = str(ctx.attr("round_mode", "up"))
    if round_mode not in E.ROUND_MODES:
        raise ctx.unsupported(f"round_mode={round_mode!r}",
                              hint="Cast's round_mode is 'up', 'down' or 'nearest'")

    def convert(a: E.Expr) -> E.Expr:
        if src is not None:
            a = E.convert(a, E.Conversion("decode", src))
        if dst is not None:
            return E.convert(a, E.Conversion(
                "encode", dst, saturate=saturate if dst in SATURATING else True,
                round_mode=round_mode if dst == "float8e8m0" else "up"))
        if a.dtype == dtype:
            return a
        if dtype == "bool":
            return E.Binary("ne", a, elem_const(0, a.dtype), "bool")
        return E.Cast(a, dtype)
    ctx.map_elements(convert, [ctx.input(0)])


# the formats ONNX's saturate attribute applies to
SATURATING = {"float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "float8e8m0"}
