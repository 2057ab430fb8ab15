"""TC syntax tree: what the parser produces and sema reads.

Every node records its source span (``start``, ``end``: character offsets) so that
errors can point at it. Expression nodes also record their ``depth`` (1 for a leaf),
which the parser bounds so that no later recursive pass can overflow the stack.

    def mm(float(M,K) A, float(K,N) B) -> (C) { C(m,n) +=! A(m,k) * B(k,n) }

parses to ``Def(name=Ident("mm"), params=(Param(TypeSpec("float32", dims=(M, K)), A), ...),
outputs=(Output(None, C),), stmts=(Stmt(lhs=C, indices=(m, n), op="+", init=True,
rhs=Binary("*", Apply(A, (m, k)), Apply(B, (k, n))), ...),))``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Node:
    start: int
    end: int


# ----------------------------------------------------------------------------- expressions

@dataclass(frozen=True)
class Expr(Node):
    depth: int


@dataclass(frozen=True)
class Ident(Node):
    """A name as written (tensor, index, size, parameter, function or type)."""

    name: str


@dataclass(frozen=True)
class IntLit(Expr):
    value: int


@dataclass(frozen=True)
class FloatLit(Expr):
    value: float


@dataclass(frozen=True)
class BoolLit(Expr):
    value: bool


@dataclass(frozen=True)
class Name(Expr):
    """A bare identifier in an expression: index, size, scalar, binding or 0-d tensor."""

    ident: Ident


@dataclass(frozen=True)
class Apply(Expr):
    """``f(args)``: a tensor access, a built-in function call or a cast (``float(x)``)."""

    ident: Ident
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class DimRef(Expr):
    """``T.k``: the extent of dimension ``k`` of tensor ``T``."""

    ident: Ident
    dim: int


@dataclass(frozen=True)
class Unary(Expr):
    op: str  # "-" or "!"
    operand: Expr


@dataclass(frozen=True)
class Binary(Expr):
    op: str  # + - * / % < <= > >= == != && ||
    lhs: Expr
    rhs: Expr


@dataclass(frozen=True)
class Ternary(Expr):
    cond: Expr
    then: Expr
    other: Expr


def children(node: Expr) -> tuple[Expr, ...]:
    """Sub-expressions in textual order."""
    if isinstance(node, Apply):
        return node.args
    if isinstance(node, Unary):
        return (node.operand,)
    if isinstance(node, Binary):
        return (node.lhs, node.rhs)
    if isinstance(node, Ternary):
        return (node.cond, node.then, node.other)
    return ()


# ----------------------------------------------------------------------------- statements

@dataclass(frozen=True)
class RangeClause(Node):
    """``where i in lo:hi`` (half open)."""

    index: Ident
    lo: Expr
    hi: Expr


@dataclass(frozen=True)
class LetClause(Node):
    """``where t = expr``: ``t`` stands for ``expr`` wherever it is used."""

    name: Ident
    value: Expr


@dataclass(frozen=True)
class ExistsClause(Node):
    """``where exists T(i)``: T(i) bounds i during range inference; nothing is read."""

    access: Expr


Clause = RangeClause | LetClause | ExistsClause


@dataclass(frozen=True)
class Stmt(Node):
    """``lhs(indices) op rhs where clauses``. ``op`` is None for '=', else the reduction
    operator ("+", "*", "max", "min"); ``init`` is True for the '!' forms."""

    lhs: Ident
    indices: tuple[Ident, ...]
    op: str | None
    init: bool
    op_start: int
    op_end: int
    rhs: Expr
    where: tuple[Clause, ...]


# ----------------------------------------------------------------------------- definitions

@dataclass(frozen=True)
class TypeSpec(Node):
    """A scalar type, with ``dims`` for a tensor (``float(M, 4)``; ``()`` for rank 0)."""

    dtype: str
    dims: tuple[Ident | IntLit, ...] | None  # None: a scalar, not a tensor


@dataclass(frozen=True)
class Param(Node):
    type: TypeSpec
    name: Ident


@dataclass(frozen=True)
class Output(Node):
    type: TypeSpec | None  # None: type and shape inferred from the statements
    name: Ident


@dataclass(frozen=True)
class Gradient(Node):
    """``<=> name(args)`` after a def: the name of its gradient def (metadata only)."""

    name: Ident
    args: tuple[Ident, ...]


@dataclass(frozen=True)
class Def(Node):
    name: Ident
    params: tuple[Param, ...]
    outputs: tuple[Output, ...]
    stmts: tuple[Stmt, ...]
    gradient: Gradient | None


@dataclass(frozen=True)
class Module:
    source: str
    file: str | None
    defs: tuple[Def, ...]


# ----------------------------------------------------------------------------- types

# type names as written -> numpy dtype names (polycomp.expr.DTYPES)
TYPE_NAMES = {
    "bool": "bool", "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
    "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
    "float16": "float16", "half": "float16", "float32": "float32", "float": "float32",
    "float64": "float64", "double": "float64",
}
