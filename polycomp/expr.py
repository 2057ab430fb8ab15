"""The typed scalar expression tree of a statement body.

Frontends build these trees; codegen prints them (codegen/cexpr.py holds the table
from operator to C). Leaves are array accesses, statement iterators, size parameters,
scalar arguments and constants. Every node carries its result ``dtype`` as a numpy
dtype name ("float32", "int64", "bool", ...). Index expressions of accesses are trees
too (affine ones use only Iter, Param, Const, add, sub, mul, floordiv, floormod);
the polyhedral view of the same accesses is the statement's isl maps.

Example: ``C(m, n) +=! A(m, k) * B(k, n)`` has the body
``Binary("mul", Access("A", (Iter("m"), Iter("k"))), Access("B", (Iter("k"), Iter("n"))))``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

INDEX_DTYPE = "int64"

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64")

UNARY_OPS = ("neg", "not")
ARITH_OPS = ("add", "sub", "mul", "div", "mod")
INDEX_OPS = ("floordiv", "floormod")  # floor semantics, for index arithmetic
COMPARE_OPS = ("lt", "le", "gt", "ge", "eq", "ne")
LOGIC_OPS = ("and", "or")
BINARY_OPS = ARITH_OPS + INDEX_OPS + COMPARE_OPS + LOGIC_OPS

# name -> number of arguments
FUNCTIONS = {
    "exp": 1, "log": 1, "sqrt": 1, "rsqrt": 1, "tanh": 1, "erf": 1, "abs": 1, "sigmoid": 1,
    "fmax": 2, "fmin": 2, "min": 2, "max": 2, "pow": 2, "fma": 3,
    "sin": 1, "cos": 1, "floor": 1, "ceil": 1,
}

REDUCTIONS = ("+", "*", "max", "min")

# Storage formats: element types polycomp stores but does not compute with (ONNX's
# bfloat16, float8, float4 and 4/2-bit integers). An array of one holds its bit patterns
# in the storage dtype, one element per unit, as ml_dtypes lays them out (a 4- or 2-bit
# value in the low bits of a byte); expressions only convert to and from them, through
# the Calls named by ``conversion`` (codegen/cexpr.py prints their C). Decoding is exact
# into the decoded dtype: float32 holds every value of the float formats.
# format -> (storage dtype, decoded dtype)
FORMATS = {
    "bfloat16": ("uint16", "float32"),
    "float8e4m3fn": ("uint8", "float32"), "float8e4m3fnuz": ("uint8", "float32"),
    "float8e5m2": ("uint8", "float32"), "float8e5m2fnuz": ("uint8", "float32"),
    "float8e8m0": ("uint8", "float32"), "float4e2m1": ("uint8", "float32"),
    "int4": ("uint8", "int8"), "uint4": ("uint8", "uint8"),
    "int2": ("uint8", "int8"), "uint2": ("uint8", "uint8"),
}
ROUND_MODES = ("up", "down", "nearest")  # float8e8m0's rounding (ONNX Cast's round_mode)


@dataclass(frozen=True)
class Conversion:
    """What a conversion Call does: decode a storage format (its bit patterns in
    ``FORMATS[fmt][0]``) into ``FORMATS[fmt][1]``, or encode any numeric value into it.
    ``saturate``: out-of-range values become the largest finite value rather than
    Inf/NaN (the float8 formats only; float4e2m1 always saturates, bfloat16 never);
    ``round_mode``: float8e8m0's rounding."""

    direction: str  # "decode" | "encode"
    fmt: str
    saturate: bool = True
    round_mode: str = "up"

    @property
    def func(self) -> str:
        """The Call's function name, e.g. ``encode_float8e4m3fn_nosat``."""
        name = f"{self.direction}_{self.fmt}"
        if self.direction == "encode" and self.fmt == "float8e8m0":
            name += f"_{self.round_mode}"
        if self.direction == "encode" and not self.saturate:
            name += "_nosat"
        return name

    @property
    def dtype(self) -> str:
        storage, decoded = FORMATS[self.fmt]
        return decoded if self.direction == "decode" else storage


def conversion(func: str) -> Conversion | None:
    """The Conversion a Call's function name stands for, or None for other functions."""
    direction, _, rest = func.partition("_")
    if direction not in ("decode", "encode"):
        return None
    parts = rest.split("_")
    fmt, flags = parts[0], parts[1:]
    if fmt not in FORMATS:
        return None
    out = Conversion(direction, fmt, saturate="nosat" not in flags,
                     round_mode=next((f for f in flags if f in ROUND_MODES), "up"))
    return out if out.func == func else None


def convert(node: Expr, conv: Conversion) -> Expr:
    """``node`` decoded or encoded as ``conv`` says (a Call codegen prints)."""
    return Call(conv.func, (node,), conv.dtype)


def is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def is_integer(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


def reduction_identity(op: str, dtype: str) -> int | float | bool:
    """The value a reduction starts from (``op=!``): 0, 1, or the dtype's lowest/highest."""
    if op == "+":
        return False if dtype == "bool" else 0
    if op == "*":
        return True if dtype == "bool" else 1
    if dtype == "bool":
        return op == "min"
    if is_float(dtype):
        return -math.inf if op == "max" else math.inf
    info = np.iinfo(np.dtype(dtype))
    return int(info.min) if op == "max" else int(info.max)


class Expr:
    """Base of all expression nodes; every concrete node is a frozen dataclass."""

    dtype: str

    def children(self) -> tuple[Expr, ...]:
        out: list[Expr] = []
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, Expr):
                out.append(value)
            elif isinstance(value, tuple):
                out.extend(v for v in value if isinstance(v, Expr))
        return tuple(out)


@dataclass(frozen=True)
class Const(Expr):
    value: int | float | bool
    dtype: str


@dataclass(frozen=True)
class Iter(Expr):
    """A statement iterator (a dimension of the statement's domain)."""

    name: str
    dtype: str = INDEX_DTYPE


@dataclass(frozen=True)
class Param(Expr):
    """A size parameter (an isl parameter of the program)."""

    name: str
    dtype: str = INDEX_DTYPE


@dataclass(frozen=True)
class Scalar(Expr):
    """A scalar argument passed by value at call time (e.g. ``float eps``)."""

    name: str
    dtype: str


@dataclass(frozen=True)
class Access(Expr):
    """An array element; zero indices for a zero-rank array."""

    array: str
    indices: tuple[Expr, ...]
    dtype: str
    loc: Any = field(default=None, compare=False, repr=False)  # errors.Location, for messages


@dataclass(frozen=True)
class Unary(Expr):
    op: str
    operand: Expr
    dtype: str


@dataclass(frozen=True)
class Binary(Expr):
    op: str
    lhs: Expr
    rhs: Expr
    dtype: str


@dataclass(frozen=True)
class Select(Expr):
    cond: Expr
    then: Expr
    other: Expr
    dtype: str


@dataclass(frozen=True)
class Cast(Expr):
    operand: Expr
    dtype: str


@dataclass(frozen=True)
class Call(Expr):
    func: str
    args: tuple[Expr, ...]
    dtype: str


def walk(expr: Expr) -> Iterator[Expr]:
    """Every node of the tree, parents before children."""
    yield expr
    for child in expr.children():
        yield from walk(child)


def accesses(expr: Expr) -> list[Access]:
    """Every array access in the tree, outer ones first (indices of gathers included)."""
    return [node for node in walk(expr) if isinstance(node, Access)]


def transform(expr: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """Rebuild the tree bottom-up; ``fn`` returns a replacement for a node or None to keep it."""
    changes = {}
    for f in fields(expr):  # type: ignore[arg-type]
        value = getattr(expr, f.name)
        if isinstance(value, Expr):
            changes[f.name] = transform(value, fn)
        elif isinstance(value, tuple) and any(isinstance(v, Expr) for v in value):
            changes[f.name] = tuple(transform(v, fn) if isinstance(v, Expr) else v for v in value)
    rebuilt = replace(expr, **changes) if changes else expr  # type: ignore[type-var]
    result = fn(rebuilt)
    return rebuilt if result is None else result


def substitute(expr: Expr, values: dict[str, Expr], kind: type = Iter) -> Expr:
    """Replace leaves of class ``kind`` (Iter, Param or Scalar) by name."""
    def swap(node: Expr) -> Expr | None:
        if isinstance(node, kind) and node.name in values:  # type: ignore[attr-defined]
            return values[node.name]  # type: ignore[attr-defined]
        return None
    return transform(expr, swap)


# ----------------------------------------------------------------------------- building sugar
# Researchers writing Program.from_isl bodies combine reads with Python operators.

def promote(a: str, b: str) -> str:
    """The dtype of a binary arithmetic result: float beats int, wider beats narrower."""
    if a == b:
        return a
    fa, fb = is_float(a), is_float(b)
    if fa != fb:
        return a if fa else b
    if a == "bool":
        return b
    if b == "bool":
        return a
    size = {d: np.dtype(d).itemsize for d in (a, b)}
    if size[a] != size[b]:
        return a if size[a] > size[b] else b
    return a if a.startswith("int") else b


def lift(value: Expr | int | float | bool, like: Expr | None = None) -> Expr:
    """A Python number as a Const, typed like ``like`` where that makes sense."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool):
        return Const(value, "bool")
    if isinstance(value, int):
        return Const(value, like.dtype if like is not None else "int64")
    dtype = like.dtype if like is not None and is_float(like.dtype) else "float64"
    return Const(float(value), dtype)


def _binary(op: str, a: Expr | float, b: Expr | float) -> Expr:
    left = lift(a, b if isinstance(b, Expr) else None)
    right = lift(b, left)
    dtype = "bool" if op in COMPARE_OPS or op in LOGIC_OPS else promote(left.dtype, right.dtype)
    return Binary(op, left, right, dtype)


def _install_operators() -> None:
    for name, op, swapped in (("add", "add", False), ("sub", "sub", False), ("mul", "mul", False),
                              ("truediv", "div", False), ("mod", "mod", False),
                              ("radd", "add", True), ("rsub", "sub", True), ("rmul", "mul", True),
                              ("rtruediv", "div", True), ("lt", "lt", False), ("le", "le", False),
                              ("gt", "gt", False), ("ge", "ge", False)):
        def method(self: Expr, other: Expr | float, _op: str = op, _swapped: bool = swapped) -> Expr:
            return _binary(_op, other, self) if _swapped else _binary(_op, self, other)
        setattr(Expr, f"__{name}__", method)
    Expr.__neg__ = lambda self: Unary("neg", self, self.dtype)  # type: ignore[attr-defined]


_install_operators()
