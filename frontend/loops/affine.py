"""Affine C expressions and conditions -> isl PwAffs and sets, with C's semantics.

Input: a pycparser expression in an affine position (a loop bound, an ``if`` condition,
an array subscript, an array extent) and ``where``, the set of points (loop iterators
and size parameters) at which C evaluates it. Output: an :class:`Affine` (the isl PwAff
and the same value as an index tree for codegen), or for a condition the subset of
``where`` on which it holds.

    i + 1, 2 * j - n, min(i, n), max(a, b), c ? a : b      -> piecewise quasi-affine
    (i + n) / 2, i % 4                                       -> floor(...) and mod, but only
        where isl proves the numerator non-negative: C truncates toward zero
    i < n && (j >= 1 || !(k == 0))                            -> sets; && and || evaluate
        their right operand only where C does (short-circuit)

Everything else (floating point, array elements, products of iterators, calls) raises
NonAffineError pointing at the offending sub-expression.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import islpy as isl
from pycparser import c_ast

from polycomp import expr as E
from polycomp.errors import NonAffineError, UnknownNameError, UnsupportedError

from . import ctype
from .scope import ArrayVar, Iterator, Local, ScalarParam

if TYPE_CHECKING:
    from .lower import FunctionLowering

dim = isl.dim_type
INDEX = E.INDEX_DTYPE
COMPARE = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}
_SET_OF = {"lt": "lt_set", "le": "le_set", "gt": "gt_set", "ge": "ge_set", "eq": "eq_set",
           "ne": "ne_set"}
BUILTIN_MINMAX = ("min", "max")
GENERIC_HINT = ("bounds, conditions and subscripts must be affine in the loop iterators and "
                "integer parameters")
DATA_HINT = ("array elements are data: indirect indexing (A[B[i]]) and data-dependent bounds "
             "or conditions are not affine")


@dataclass(frozen=True)
class Affine:
    """One affine value: as isl sees it and as codegen prints it (int64 index tree)."""

    pw: isl.PwAff
    tree: E.Expr


class AffineBuilder:
    """Turns C expressions into isl objects for one function (see the module docstring)."""

    def __init__(self, low: FunctionLowering):
        self.low = low

    # ------------------------------------------------------------------ values
    def expr(self, node: c_ast.Node, where: isl.Set) -> Affine:
        expanded = self.low.macros.expand(node)
        if expanded is not None:
            return self.expr(expanded, where)
        space = where.get_space()
        if isinstance(node, c_ast.Constant):
            return self._constant(node, space)
        if isinstance(node, c_ast.ID):
            return self._name(node, space)
        if isinstance(node, c_ast.UnaryOp) and node.op in ("p++", "p--", "++", "--"):
            raise UnsupportedError(f"'{node.op.lstrip('p')}' used inside an expression is not "
                                   f"supported", self.low.loc(node),
                                   hint="increment in a statement of its own (x++; or x += 1;)")
        if isinstance(node, c_ast.UnaryOp) and node.op in ("-", "+"):
            inner = self.expr(node.expr, where)
            if node.op == "+":
                return inner
            return Affine(inner.pw.neg(), E.Unary("neg", inner.tree, INDEX))
        if isinstance(node, c_ast.BinaryOp) and node.op in ("+", "-", "*", "/", "%"):
            return self._binary(node, where)
        if isinstance(node, c_ast.TernaryOp):
            cond, cond_tree = self.cond(node.cond, where)
            other = where.subtract(cond)
            a, b = self.expr(node.iftrue, cond), self.expr(node.iffalse, other)
            pw = a.pw.intersect_domain(cond).union_add(b.pw.intersect_domain(other))
            return Affine(pw, E.Select(cond_tree, a.tree, b.tree, INDEX))
        if isinstance(node, c_ast.FuncCall) and call_name(node) in BUILTIN_MINMAX:
            return self._minmax(node, where)
        if isinstance(node, c_ast.Cast):
            dtype = self.low.typename_dtype(node.to_type)
            if dtype not in ("int32", "int64"):
                raise self._not_affine(node, f"a cast to {ctype.C_NAMES.get(dtype, dtype)}")
            return self.expr(node.expr, where)
        hint = DATA_HINT if isinstance(node, c_ast.ArrayRef) else None
        raise self._not_affine(node, describe(node), hint=hint)

    def _constant(self, node: c_ast.Constant, space: isl.Space) -> Affine:
        value = self.low.int_constant(node)
        if value is None:
            raise self._not_affine(node, f"the constant {node.value}",
                                   hint="bounds, conditions and subscripts must be integers")
        return Affine(_const(space, value), E.Const(value, INDEX))

    def _name(self, node: c_ast.ID, space: isl.Space) -> Affine:
        symbol = self.low.lookup(node.name)
        ls = isl.LocalSpace.from_space(space)
        if isinstance(symbol, Iterator):
            pos = space.find_dim_by_name(dim.set, symbol.dim)
            return Affine(isl.PwAff.var_on_domain(ls, dim.set, pos), E.Iter(symbol.dim))
        if isinstance(symbol, ScalarParam) and symbol.is_size:
            pos = space.find_dim_by_name(dim.param, symbol.name)
            return Affine(isl.PwAff.var_on_domain(ls, dim.param, pos), E.Param(symbol.name))
        if symbol is None:
            raise UnknownNameError(f"'{node.name}' is not declared", self.low.loc(node),
                                   hint="declare it as a parameter of the function or a "
                                        "local variable")
        if isinstance(symbol, Local) and symbol.loop_var:
            raise self._not_affine(node, f"'{node.name}' outside the loops it is the "
                                         f"iterator of",
                                   hint="its value after a loop is not part of the SCoP model")
        what = {ScalarParam: "a scalar parameter", ArrayVar: "a variable computed in the SCoP",
                Local: "a local variable"}.get(type(symbol), "a variable")
        if isinstance(symbol, ArrayVar) and symbol.is_param:
            what = "an array"
        if isinstance(symbol, ScalarParam) and ctype.is_integer(symbol.dtype):
            raise self._not_affine(node, f"parameter '{node.name}' of type "
                                         f"{ctype.C_NAMES[symbol.dtype]}",
                                   hint="parameters used in bounds, conditions and subscripts "
                                        "must be int or long")
        raise self._not_affine(node, f"'{node.name}', {what},",
                               hint="bounds, conditions and subscripts may use loop "
                                    "iterators, integer parameters and constants only")

    def _binary(self, node: c_ast.BinaryOp, where: isl.Set) -> Affine:
        op = node.op
        if op in ("/", "%"):
            return self._division(node, where)
        a, b = self.expr(node.left, where), self.expr(node.right, where)
        if op == "+":
            return Affine(a.pw.add(b.pw), E.Binary("add", a.tree, b.tree, INDEX))
        if op == "-":
            return Affine(a.pw.sub(b.pw), E.Binary("sub", a.tree, b.tree, INDEX))
        if not (a.pw.is_cst() or b.pw.is_cst()):
            raise self._not_affine(node, "a product of two non-constant terms",
                                   hint="one factor of '*' must be a constant")
        return Affine(a.pw.mul(b.pw), E.Binary("mul", a.tree, b.tree, INDEX))

    def _division(self, node: c_ast.BinaryOp, where: isl.Set) -> Affine:
        divisor = self.low.const_int(node.right)
        if divisor is None or divisor <= 0:
            raise self._not_affine(node, f"'{node.op}' by something other than a positive "
                                         f"integer constant",
                                   hint="divide only by positive integer constants")
        num = self.expr(node.left, where)
        negative = where.intersect_params(self.low.param_context) \
            .intersect(num.pw.lt_set(_const(where.get_space(), 0)))
        if not negative.is_empty():
            raise NonAffineError(
                f"C's '{node.op}' truncates toward zero, and the left operand can be negative "
                f"here ({witness(negative)})", self.low.loc(node),
                hint="only division of a provably non-negative value is affine; add a "
                     "condition or bound that keeps it >= 0")
        val = isl.Val.int_from_si(isl.DEFAULT_CONTEXT, divisor)
        const = E.Const(divisor, INDEX)
        if node.op == "/":
            return Affine(num.pw.scale_down_val(val).floor(),
                          E.Binary("floordiv", num.tree, const, INDEX))
        return Affine(num.pw.mod_val(val), E.Binary("floormod", num.tree, const, INDEX))

    def _minmax(self, node: c_ast.FuncCall, where: isl.Set) -> Affine:
        name = call_name(node)
        args = list(node.args.exprs) if node.args is not None else []
        if len(args) != 2:
            raise self._not_affine(node, f"{name}() with {len(args)} arguments",
                                   hint=f"{name} takes two arguments")
        a, b = (self.expr(x, where) for x in args)
        pw = a.pw.min(b.pw) if name == "min" else a.pw.max(b.pw)
        return Affine(pw, E.Call(name, (a.tree, b.tree), INDEX))

    # ------------------------------------------------------------------ conditions
    def cond(self, node: c_ast.Node, where: isl.Set) -> tuple[isl.Set, E.Expr]:
        """The subset of ``where`` on which the condition holds, and its tree."""
        expanded = self.low.macros.expand(node)
        if expanded is not None:
            return self.cond(expanded, where)
        if isinstance(node, c_ast.BinaryOp) and node.op in COMPARE:
            op = COMPARE[node.op]
            a, b = self.expr(node.left, where), self.expr(node.right, where)
            holds = where.intersect(getattr(a.pw, _SET_OF[op])(b.pw))
            return holds, E.Binary(op, a.tree, b.tree, "bool")
        if isinstance(node, c_ast.BinaryOp) and node.op == "&&":
            left, lt = self.cond(node.left, where)
            right, rt = self.cond(node.right, left)
            return right, E.Binary("and", lt, rt, "bool")
        if isinstance(node, c_ast.BinaryOp) and node.op == "||":
            left, lt = self.cond(node.left, where)
            right, rt = self.cond(node.right, where.subtract(left))
            return left.union(right), E.Binary("or", lt, rt, "bool")
        if isinstance(node, c_ast.UnaryOp) and node.op == "!":
            inner, tree = self.cond(node.expr, where)
            return where.subtract(inner), E.Unary("not", tree, "bool")
        if isinstance(node, c_ast.TernaryOp):
            c, ct = self.cond(node.cond, where)
            a, at = self.cond(node.iftrue, c)
            b, bt = self.cond(node.iffalse, where.subtract(c))
            return a.union(b), E.Select(ct, at, bt, "bool")
        value = self.expr(node, where)
        zero = _const(where.get_space(), 0)
        return where.intersect(value.pw.ne_set(zero)), \
            E.Binary("ne", value.tree, E.Const(0, INDEX), "bool")

    # ------------------------------------------------------------------ errors
    def _not_affine(self, node: c_ast.Node, what: str, hint: str | None = None) -> NonAffineError:
        return NonAffineError(
            f"{what} is not affine", self.low.loc(node),
            hint=hint or GENERIC_HINT)


def _const(space: isl.Space, value: int) -> isl.PwAff:
    ls = isl.LocalSpace.from_space(space)
    return isl.PwAff.from_aff(isl.Aff.val_on_domain(ls, isl.Val.int_from_si(
        isl.DEFAULT_CONTEXT, value)))


def call_name(node: c_ast.FuncCall) -> str | None:
    return node.name.name if isinstance(node.name, c_ast.ID) else None


def witness(points: isl.Set) -> str:
    point = points.sample_point()
    space = point.get_space()
    parts = []
    for kind in (dim.param, dim.set):
        for k in range(space.dim(kind)):
            parts.append(f"{space.get_dim_name(kind, k)} = "
                         f"{point.get_coordinate_val(kind, k).to_python()}")
    return "e.g. at " + ", ".join(parts) if parts else "always"


def describe(node: c_ast.Node) -> str:
    if isinstance(node, c_ast.ArrayRef):
        return "an array element"
    if isinstance(node, c_ast.FuncCall):
        return f"a call to {call_name(node) or 'a function'}"
    if isinstance(node, c_ast.BinaryOp):
        return f"the operator '{node.op}'"
    if isinstance(node, c_ast.UnaryOp):
        return f"the operator '{node.op}'"
    if isinstance(node, c_ast.Assignment):
        return "an assignment"
    return f"a {type(node).__name__} expression"
