"""Expression typing: syntax expressions -> typed polycomp.expr trees (part of sema).

Input: one syntax expression (where-bindings already substituted) and a :class:`Scope`
that classifies names. Output: an ``E.Expr`` whose leaves use the user's names, plus
``DimOf`` leaves for ``T.k`` (lower.py replaces them by the extent).

Two kinds of expression are typed here:

* values (statement right-hand sides): numeric types with promotion
  (``polycomp.expr.promote``), bool from comparisons, literal typing rules below;
* indices (inside a tensor access, or a ``where`` range bound): affine integer
  expressions of the statement's indices, the sizes, integer literals and ``T.k``.
  A product of a size (or integer scalar) with an index is a *stride*: allowed, but
  only lowerable once sizes are known. An index that reads a tensor (``T(Idx(i), j)``)
  is a gather: typed as a value, it must be an integer. A range bound may also take
  ``min``/``max`` of such expressions (an ``E.Call`` in the tree; lower.py makes it a
  piecewise isl bound); a tensor index may not.

Literal typing (also in docs/TC.md): a literal is "weak" and takes its type from the
other operand of the operator it meets: an integer literal becomes that type (float32
next to a float32, int8 next to an int8, ...), a float literal becomes that type when
it is a float type and float32 otherwise. Expressions of literals only are folded
exactly (integer ``/`` and ``%`` truncate as in C) and stay weak. A weak value that
meets nothing takes the type of the tensor it is assigned to, or int32 (int64 if it
does not fit) / float32.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field

import numpy as np

from polycomp import expr as E
from polycomp.errors import (
    DefinitionOrderError,
    IntegerDivisionError,
    NonAffineError,
    PolycompError,
    RankMismatchError,
    TypeMismatchError,
    UnknownNameError,
    location_in_text,
)
from polycomp.islutil import constant_value

from . import syntax as S


@dataclass(frozen=True)
class DimOf(E.Expr):
    """``T.k`` before lowering: the extent of dimension ``k`` of tensor ``T`` (int64)."""

    tensor: str
    dim: int
    dtype: str = E.INDEX_DTYPE


FLOAT_FUNCTIONS = {"exp": 1, "log": 1, "sqrt": 1, "rsqrt": 1, "tanh": 1, "erf": 1,
                   "sigmoid": 1, "sin": 1, "cos": 1, "floor": 1, "ceil": 1, "pow": 2, "fma": 3}
NUMERIC_FUNCTIONS = {"abs": 1, "min": 2, "max": 2, "fmin": 2, "fmax": 2}
FUNCTIONS = {**FLOAT_FUNCTIONS, **NUMERIC_FUNCTIONS}
assert set(FUNCTIONS) <= set(E.FUNCTIONS)

ARITH = {"+": "add", "-": "sub", "*": "mul", "/": "div", "%": "mod"}
COMPARE = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}
LOGIC = {"&&": "and", "||": "or"}
CAST_HINT = "convert explicitly with a cast such as float(x), int32(x) or bool(x)"


@dataclass
class TensorInfo:
    """What sema knows about a tensor at the current statement."""

    name: str
    role: str  # "input", "output" or "temporary"
    dtype: str | None  # None until the first write of an untyped output or temporary
    rank: int | None
    dims: tuple[int | str, ...] | None  # declared dims (inputs, typed outputs)
    decl: S.Node | None = None
    written: bool = False  # by an earlier statement

    @property
    def shape_known(self) -> bool:
        return self.dims is not None or self.written


@dataclass
class Scope:
    """Names visible in one statement, and what the typer learns while typing it."""

    source: str
    file: str | None
    tensors: dict[str, TensorInfo]
    sizes: set[str]  # size names from tensor dimensions
    scalars: dict[str, str]  # scalar parameter -> dtype
    indices: set[str]
    first_writer: dict[str, S.Stmt]  # tensor -> the first statement that writes it
    size_scalars: set[str] = field(default_factory=set)  # int scalars used as sizes
    value_scalars: set[str] = field(default_factory=set)  # scalars used as values
    strides: list[S.Expr] = field(default_factory=list)  # index products needing sizes

    def loc(self, node: S.Node):
        return location_in_text(self.source, node.start, node.end - node.start, self.file)

    def text(self, node: S.Node) -> str:
        return self.source[node.start:node.end]


@dataclass(frozen=True)
class Typed:
    """A typed value. ``weak`` is "int" or "float" for literal-only expressions, whose
    exact value is ``value`` and whose type is still to be decided by the context."""

    expr: E.Expr
    weak: str | None = None
    value: int | float | None = None

    @property
    def dtype(self) -> str:
        return self.expr.dtype


@dataclass(frozen=True)
class Index:
    """A typed index expression (int64). ``gather`` when it reads a tensor; ``names``
    are the statement indices it involves (empty for a gather)."""

    expr: E.Expr
    gather: bool
    names: frozenset[str]
    degree: int = 0  # 0: no index involved, 1: affine in the indices
    literal: bool = False  # made of integer literals only


def weak_default(value: float, kind: str) -> str:
    if kind == "float":
        return "float32"
    return "int32" if -(2**31) <= int(value) < 2**31 else "int64"


class Typer:
    """Types the expressions of one statement in a Scope."""

    def __init__(self, scope: Scope):
        self.scope = scope
        self.in_bound = False  # typing a where-range bound: min/max are allowed

    def error(self, cls: type[PolycompError], message: str, node: S.Node, hint: str
              ) -> PolycompError:
        return cls(message, self.scope.loc(node), hint=hint)

    # ================================================================== values
    def value(self, node: S.Expr) -> Typed:
        method = getattr(self, "_v_" + type(node).__name__)
        return method(node)

    def _v_IntLit(self, node: S.IntLit) -> Typed:
        return Typed(E.Const(node.value, "int64"), "int", node.value)

    def _v_FloatLit(self, node: S.FloatLit) -> Typed:
        return Typed(E.Const(node.value, "float32"), "float", node.value)

    def _v_BoolLit(self, node: S.BoolLit) -> Typed:
        return Typed(E.Const(node.value, "bool"))

    def _v_Name(self, node: S.Name) -> Typed:
        name, sc = node.ident.name, self.scope
        if name in sc.indices:
            return Typed(E.Iter(name))
        if name in sc.sizes:
            return Typed(E.Param(name))
        if name in sc.scalars:
            sc.value_scalars.add(name)
            return Typed(E.Scalar(name, sc.scalars[name]))
        if name in sc.tensors:
            return Typed(self.access(node, node.ident, ()))
        if name in FUNCTIONS:
            raise self.error(UnknownNameError, f"'{name}' is a function, not a value", node,
                             f"call it: {name}(x)")
        raise self.unknown(node.ident, "name")

    def _v_DimRef(self, node: S.DimRef) -> Typed:
        return Typed(self.dim_ref(node))

    def _v_Apply(self, node: S.Apply) -> Typed:
        name = node.ident.name
        if name in self.scope.tensors:
            return Typed(self.access(node, node.ident, node.args))
        if name in S.TYPE_NAMES:
            return self.cast(node)
        if name in FUNCTIONS:
            return self.call(node)
        raise self.unknown(node.ident, "tensor or function")

    def _v_Unary(self, node: S.Unary) -> Typed:
        x = self.value(node.operand)
        if node.op == "!":
            self.need_bool(x, node.operand, "'!'")
            return Typed(E.Unary("not", x.expr, "bool"))
        if x.weak:
            return self.weak(-x.value, x.weak, node)  # type: ignore[operator]
        self.need_numeric(x, node.operand, "unary '-'")
        return Typed(E.Unary("neg", x.expr, x.dtype))

    def _v_Binary(self, node: S.Binary) -> Typed:
        a, b = self.value(node.lhs), self.value(node.rhs)
        if node.op in LOGIC:
            self.need_bool(a, node.lhs, f"'{node.op}'")
            self.need_bool(b, node.rhs, f"'{node.op}'")
            return Typed(E.Binary(LOGIC[node.op], a.expr, b.expr, "bool"))
        if a.weak and b.weak:
            folded = self.fold(node.op, a, b, node)
            if folded is not None:
                return folded
        a, b = self.meet(a, b, node)
        if node.op in COMPARE:
            if "bool" in (a.dtype, b.dtype) and (a.dtype != b.dtype or node.op not in ("==", "!=")):
                raise self.error(TypeMismatchError, f"'{node.op}' cannot compare "
                                 f"{a.dtype} with {b.dtype}", node, CAST_HINT)
            return Typed(E.Binary(COMPARE[node.op], a.expr, b.expr, "bool"))
        self.need_numeric(a, node.lhs, f"'{node.op}'")
        self.need_numeric(b, node.rhs, f"'{node.op}'")
        dtype = E.promote(a.dtype, b.dtype)
        if (node.op in ("/", "%") and not E.is_float(dtype) and isinstance(b.expr, E.Const)
                and b.expr.value == 0):
            # gcc compiles an integer division by a constant zero to a trap instruction
            # (ir.validate refuses it too; here the caret points at the divisor)
            raise self.error(IntegerDivisionError, f"integer {'division' if node.op == '/' else 'modulo'} "
                             "by zero", node.rhs,
                             "an integer division or modulo by zero is undefined; use a "
                             "non-zero divisor, or a float type")
        return Typed(E.Binary(ARITH[node.op], a.expr, b.expr, dtype))

    def _v_Ternary(self, node: S.Ternary) -> Typed:
        cond = self.value(node.cond)
        self.need_bool(cond, node.cond, "the condition of '?:'")
        a, b = self.value(node.then), self.value(node.other)
        if a.weak and b.weak:
            kind = "float" if "float" in (a.weak, b.weak) else "int"
            dtype = weak_default(max(abs(a.value), abs(b.value)), kind)  # type: ignore[arg-type]
            a = Typed(self.resolve(a, dtype, node.then))
            b = Typed(self.resolve(b, dtype, node.other))
        a, b = self.meet(a, b, node)
        if (a.dtype == "bool") != (b.dtype == "bool"):
            raise self.error(TypeMismatchError, f"the branches of '?:' have types {a.dtype} "
                             f"and {b.dtype}", node, CAST_HINT)
        dtype = E.promote(a.dtype, b.dtype)
        return Typed(E.Select(cond.expr, a.expr, b.expr, dtype))

    # ------------------------------------------------------------------ weak literals
    def weak(self, value: float, kind: str, node: S.Node) -> Typed:
        if kind == "int":
            if not -(2**63) <= int(value) < 2**63:
                raise self.error(TypeMismatchError, "constant expression overflows int64", node,
                                 "use smaller constants")
            return Typed(E.Const(int(value), "int64"), "int", int(value))
        return Typed(E.Const(float(value), "float32"), "float", float(value))

    def fold(self, op: str, a: Typed, b: Typed, node: S.Binary) -> Typed | None:
        """Literal op literal, computed exactly (C semantics for integer / and %)."""
        x, y = a.value, b.value
        kind = "float" if "float" in (a.weak, b.weak) else "int"
        if op in COMPARE:
            result = {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y,  # type: ignore[operator]
                      "==": x == y, "!=": x != y}[op]
            return Typed(E.Const(bool(result), "bool"))
        if op in ("+", "-", "*"):
            value = {"+": lambda: x + y, "-": lambda: x - y, "*": lambda: x * y}[op]()  # type: ignore[operator]
            return self.weak(value, kind, node)
        if y == 0 or not (math.isfinite(x) and math.isfinite(y)):  # type: ignore[arg-type]
            return None  # left to run time, like C
        if kind == "float":
            if op == "/":
                return self.weak(float(x) / float(y), kind, node)  # type: ignore[arg-type]
            return self.weak(float(np.fmod(float(x), float(y))), kind, node)  # type: ignore[arg-type]
        q = abs(int(x)) // abs(int(y))  # type: ignore[arg-type]
        q = q if (x >= 0) == (y >= 0) else -q  # type: ignore[operator]
        return self.weak(q if op == "/" else int(x) - q * int(y), kind, node)  # type: ignore[arg-type]

    def meet(self, a: Typed, b: Typed, node: S.Node) -> tuple[Typed, Typed]:
        """Give a weak operand the type of the other operand."""
        if a.weak and b.weak:
            kind = "float" if "float" in (a.weak, b.weak) else "int"
            dtype = weak_default(max(abs(a.value), abs(b.value)), kind)  # type: ignore[arg-type]
            return Typed(self.resolve(a, dtype, node)), Typed(self.resolve(b, dtype, node))
        if a.weak:
            return Typed(self.resolve(a, self.literal_type(a, b.dtype, node), node)), b
        if b.weak:
            return a, Typed(self.resolve(b, self.literal_type(b, a.dtype, node), node))
        return a, b

    def literal_type(self, lit: Typed, other: str, node: S.Node) -> str:
        if other == "bool":
            raise self.error(TypeMismatchError, "a number is combined with a bool", node,
                             "use true/false, a comparison, or " + CAST_HINT)
        if lit.weak == "float" and not E.is_float(other):
            return "float32"
        return other

    def resolve(self, t: Typed, dtype: str, node: S.Node) -> E.Expr:
        """The expression of ``t`` at type ``dtype`` (weak literals become constants)."""
        if not t.weak:
            return t.expr if t.dtype == dtype else E.Cast(t.expr, dtype)
        value = t.value
        if dtype == "bool":
            return E.Const(bool(value), "bool")
        if E.is_float(dtype):
            return E.Const(float(value), dtype)  # type: ignore[arg-type]
        if t.weak == "float":
            return E.Cast(E.Const(float(value), "float32"), dtype)  # type: ignore[arg-type]
        info = np.iinfo(np.dtype(dtype))
        if not info.min <= int(value) <= info.max:  # type: ignore[arg-type]
            raise self.error(TypeMismatchError, f"the constant {value} does not fit in {dtype}",
                             node, f"{dtype} holds {info.min}..{info.max}; cast the other operand "
                             "to a wider type")
        return E.Const(int(value), dtype)  # type: ignore[arg-type]

    def strong(self, t: Typed, node: S.Node) -> E.Expr:
        """A value with no context: weak literals take their default type."""
        if not t.weak:
            return t.expr
        return self.resolve(t, weak_default(t.value, t.weak), node)  # type: ignore[arg-type]

    def assign(self, t: Typed, dtype: str, node: S.Node) -> E.Expr:
        """The right-hand side converted to the type of the tensor it is assigned to."""
        if t.weak:
            if dtype == "bool":
                raise self.error(TypeMismatchError, "a number is assigned to a bool tensor",
                                 node, "use true/false or a comparison")
            return self.resolve(t, dtype, node)
        if (t.dtype == "bool") != (dtype == "bool"):
            raise self.error(TypeMismatchError, f"a {t.dtype} value is assigned to a {dtype} "
                             "tensor", node, CAST_HINT)
        return t.expr if t.dtype == dtype else E.Cast(t.expr, dtype)

    # ------------------------------------------------------------------ checks
    def need_bool(self, t: Typed, node: S.Node, what: str) -> None:
        if t.weak or t.dtype != "bool":
            raise self.error(TypeMismatchError, f"{what} needs a bool operand, not "
                             f"{'a number' if t.weak else t.dtype}", node,
                             "compare it (x != 0) or " + CAST_HINT)

    def need_numeric(self, t: Typed, node: S.Node, what: str) -> None:
        if not t.weak and t.dtype == "bool":
            raise self.error(TypeMismatchError, f"{what} needs a number, not a bool", node,
                             "use && || ! for bools, or " + CAST_HINT)

    def unknown(self, ident: S.Ident, what: str) -> PolycompError:
        name, sc = ident.name, self.scope
        if name in sc.first_writer:
            stmt = sc.first_writer[name]
            line = location_in_text(sc.source, stmt.start).line
            return self.error(DefinitionOrderError, f"'{name}' is read before any statement "
                              f"writes it (it is first written at line {line})", ident,
                              "statements run in order: move the statement that defines "
                              f"'{name}' before this one")
        known = list(sc.tensors) + list(FUNCTIONS) + list(sc.indices) + list(sc.sizes) \
            + list(sc.scalars)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean '{close[0]}'?" if close else \
            "declare it as an input in the def's parameter list"
        return self.error(UnknownNameError, f"unknown {what} '{name}'", ident, hint)

    # ------------------------------------------------------------------ calls
    def cast(self, node: S.Apply) -> Typed:
        dtype = S.TYPE_NAMES[node.ident.name]
        if len(node.args) != 1:
            raise self.error(TypeMismatchError, f"the cast {node.ident.name}(...) takes one "
                             f"argument, not {len(node.args)}", node, f"write {node.ident.name}(x)")
        x = self.value(node.args[0])
        if x.weak:
            if dtype != "bool" and not E.is_float(dtype):
                if not math.isfinite(x.value):  # type: ignore[arg-type]
                    raise self.error(TypeMismatchError, f"the constant {x.value} has no {dtype} "
                                     "value", node, "use a finite constant")
                value = int(x.value)  # type: ignore[arg-type]
                return Typed(self.resolve(Typed(x.expr, "int", value), dtype, node))
            return Typed(self.resolve(x, dtype, node))
        return Typed(x.expr if x.dtype == dtype else E.Cast(x.expr, dtype))

    def call(self, node: S.Apply) -> Typed:
        name = node.ident.name
        if len(node.args) != FUNCTIONS[name]:
            raise self.error(TypeMismatchError, f"{name} takes {FUNCTIONS[name]} argument(s), "
                             f"not {len(node.args)}", node,
                             "see the list of built-ins in docs/TC.md")
        args = [self.value(a) for a in node.args]
        for a, n in zip(args, node.args):
            self.need_numeric(a, n, name)
        strong = [a.dtype for a in args if not a.weak]
        if strong:
            dtype = strong[0]
            for d in strong[1:]:
                dtype = E.promote(dtype, d)
            if any(a.weak == "float" for a in args) and not E.is_float(dtype):
                dtype = "float32"
        else:
            kind = "float" if any(a.weak == "float" for a in args) else "int"
            dtype = weak_default(max(abs(a.value) for a in args), kind)  # type: ignore[arg-type]
        if name in FLOAT_FUNCTIONS and not E.is_float(dtype):
            dtype = "float32"  # integer arguments of math functions compute in float32
        exprs = tuple(self.resolve(a, dtype, n) for a, n in zip(args, node.args))
        return Typed(E.Call(name, exprs, dtype))

    # ------------------------------------------------------------------ tensors
    def tensor_for_read(self, ident: S.Ident, node: S.Node) -> TensorInfo:
        t = self.scope.tensors[ident.name]
        if t.role != "input" and not t.written:
            raise self.error(DefinitionOrderError, f"'{t.name}' is read before any statement "
                             "writes it", node, "statements run in order: define "
                             f"'{t.name}' in an earlier statement (a statement may read its own "
                             "left side only after an earlier statement wrote it)")
        return t

    def access(self, node: S.Node, ident: S.Ident, args: tuple[S.Expr, ...]) -> E.Access:
        t = self.tensor_for_read(ident, node)
        return E.Access(t.name, self.access_indices(t, node, args), t.dtype or "float32",
                        loc=self.scope.loc(node))

    def access_indices(self, t: TensorInfo, node: S.Node, args: tuple[S.Expr, ...]
                       ) -> tuple[E.Expr, ...]:
        if t.rank is not None and len(args) != t.rank:
            raise self.error(RankMismatchError, f"'{t.name}' has rank {t.rank} but is accessed "
                             f"with {len(args)} ind{'ex' if len(args) == 1 else 'ices'}", node,
                             f"write {t.name}({', '.join(f'i{k}' for k in range(t.rank))})")
        return tuple(self.index(a).expr for a in args)

    def dim_ref(self, node: S.DimRef) -> E.Expr:
        name = node.ident.name
        if name not in self.scope.tensors:
            raise self.unknown(node.ident, "tensor")
        t = self.scope.tensors[name]
        if not t.shape_known:
            raise self.error(DefinitionOrderError, f"the shape of '{name}' is not known yet",
                             node, f"'{name}.{node.dim}' can be used once a statement before this "
                             "one has written it")
        if not 0 <= node.dim < (t.rank or 0):
            raise self.error(RankMismatchError, f"'{name}' has rank {t.rank}, so it has no "
                             f"dimension {node.dim}", node,
                             f"dimensions are numbered 0..{(t.rank or 1) - 1}")
        return DimOf(name, node.dim)

    # ================================================================== indices
    def index(self, node: S.Expr) -> Index:
        """An index expression: a gather if it reads a tensor, otherwise affine."""
        if self.reads_tensor(node):
            t = self.value(node)
            if t.weak or not E.is_integer(t.dtype):
                raise self.error(TypeMismatchError, f"a data-dependent index must be an "
                                 f"integer, not {t.dtype}", node, "read an integer tensor, or "
                                 "cast the value: int64(x)")
            return Index(t.expr, True, frozenset())
        return self.affine(node)

    def bound(self, node: S.Expr) -> Index:
        """A where-range bound: affine, no tensor reads; ``min`` and ``max`` of affine
        bounds are allowed too (piecewise affine: lower.py turns them into isl PwAffs,
        so ``k in max(0, 1 - h):min(3, H + 1 - h)`` clips a window exactly)."""
        if self.reads_tensor(node):
            raise self.error(NonAffineError, "a range bound cannot read a tensor", node,
                             "bounds are affine expressions of sizes, indices and constants, "
                             "or min/max of them")
        self.in_bound = True
        try:
            return self.affine(node)
        finally:
            self.in_bound = False

    def reads_tensor(self, node: S.Expr) -> bool:
        tensors = self.scope.tensors
        stack = [node]
        while stack:
            n = stack.pop()
            if isinstance(n, (S.Apply, S.Name)) and n.ident.name not in self.scope.indices \
                    and (n.ident.name in tensors or n.ident.name in self.scope.first_writer):
                return True
            stack.extend(S.children(n))
        return False

    def affine(self, node: S.Expr) -> Index:
        method = getattr(self, "_i_" + type(node).__name__, None)
        if method is None:
            raise self.error(NonAffineError, f"'{self.scope.text(node)}' is not an affine "
                             "index expression", node, "indices are sums of indices times "
                             "constants, sizes and constants; a data-dependent index "
                             "reads a tensor")
        return method(node)

    def _i_IntLit(self, node: S.IntLit) -> Index:
        return Index(E.Const(node.value, E.INDEX_DTYPE), False, frozenset(), 0, True)

    def _i_FloatLit(self, node: S.Expr) -> Index:
        raise self.error(TypeMismatchError, "an index must be an integer", node,
                         "indices are integer expressions")

    _i_BoolLit = _i_FloatLit

    def _i_Name(self, node: S.Name) -> Index:
        name, sc = node.ident.name, self.scope
        if name in sc.indices:
            return Index(E.Iter(name), False, frozenset({name}), 1)
        if name in sc.sizes:
            return Index(E.Param(name), False, frozenset())
        if name in sc.scalars:
            if not E.is_integer(sc.scalars[name]):
                raise self.error(TypeMismatchError, f"the {sc.scalars[name]} parameter "
                                 f"'{name}' cannot be used in an index", node,
                                 "only integer parameters may appear in indices")
            sc.size_scalars.add(name)
            return Index(E.Param(name), False, frozenset())
        if name in sc.tensors:
            raise self.error(RankMismatchError, f"'{name}' is a tensor of rank "
                             f"{sc.tensors[name].rank} used without indices", node,
                             f"write {name}(...) with its indices")
        raise self.unknown(node.ident, "name")

    def _i_DimRef(self, node: S.DimRef) -> Index:
        return Index(self.dim_ref(node), False, frozenset())

    def _i_Apply(self, node: S.Apply) -> Index:
        name = node.ident.name
        if name not in ("min", "max"):
            raise self.error(NonAffineError, f"'{self.scope.text(node)}' is not an affine "
                             "index expression", node, "indices are sums of indices times "
                             "constants, sizes and constants; a data-dependent index "
                             "reads a tensor")
        if not self.in_bound:
            # an access through min/max would need a piecewise access map; bounds only
            # constrain the domain, where isl takes pieces (and unions) in its stride
            raise self.error(NonAffineError, f"'{name}' cannot appear in a tensor index",
                             node, f"{name}(a, b) is allowed in where-range bounds ('where "
                             f"k in max(0, 1 - h):min(K, H + 1 - h)'); clip the range of the "
                             "index instead")
        if len(node.args) != 2:
            raise self.error(TypeMismatchError, f"{name} takes 2 arguments, not "
                             f"{len(node.args)}", node, f"write {name}(a, b); nest it for more: "
                             f"{name}(a, {name}(b, c))")
        a, b = self.affine(node.args[0]), self.affine(node.args[1])
        e = E.Call(name, (a.expr, b.expr), E.INDEX_DTYPE)
        # not "literal": constant_value() cannot fold a min/max, so it must not be taken
        # for a constant divisor or factor
        return Index(e, False, a.names | b.names, max(a.degree, b.degree))

    def _i_Unary(self, node: S.Unary) -> Index:
        if node.op != "-":
            raise self.error(NonAffineError, f"'{node.op}' cannot appear in an index", node,
                             "indices are affine: + - * and / % by a constant")
        x = self.affine(node.operand)
        return Index(E.Unary("neg", x.expr, E.INDEX_DTYPE), False, x.names, x.degree, x.literal)

    def _i_Binary(self, node: S.Binary) -> Index:
        if node.op not in ARITH:
            raise self.error(NonAffineError, f"'{node.op}' cannot appear in an index", node,
                             "indices are affine: + - * and / % by a constant")
        a, b = self.affine(node.lhs), self.affine(node.rhs)
        names = a.names | b.names
        if node.op in ("+", "-"):
            e = E.Binary(ARITH[node.op], a.expr, b.expr, E.INDEX_DTYPE)
            return Index(e, False, names, max(a.degree, b.degree), a.literal and b.literal)
        if node.op == "*":
            if a.degree and b.degree:
                raise self.error(NonAffineError, f"'{self.scope.text(node)}' multiplies indices "
                                 "together, which is not affine", node,
                                 "an index may be multiplied by a constant or a size only")
            if not (a.literal or b.literal):
                self.scope.strides.append(node)
            e = E.Binary("mul", a.expr, b.expr, E.INDEX_DTYPE)
            return Index(e, False, names, a.degree + b.degree, a.literal and b.literal)
        if b.degree:
            raise self.error(NonAffineError, f"'{self.scope.text(node)}' divides by an index, "
                             "which is not affine", node, "divide by a positive constant only")
        if b.literal:
            divisor = constant_value(b.expr)
            if divisor is None or divisor <= 0:
                raise self.error(NonAffineError, f"'{self.scope.text(node)}' divides by "
                                 f"{divisor}; an index may only be divided by a positive "
                                 "constant", node, "divide by a positive constant")
        else:
            self.scope.strides.append(node)
        op = "floordiv" if node.op == "/" else "floormod"
        return Index(E.Binary(op, a.expr, b.expr, E.INDEX_DTYPE), False, a.names, a.degree,
                     a.literal and b.literal)


