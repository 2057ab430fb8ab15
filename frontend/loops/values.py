"""C value expressions -> typed polycomp expression trees with C's exact semantics.

Input: a pycparser expression on the right of an assignment, and ``where``, the points of
the statement's domain at which C evaluates it. Output: an ``E.Expr`` whose every node has
the dtype C gives it, with C's implicit conversions made explicit, e.g. for ``int i`` and
``float x[n]``:

    x[i] * 2.0 + i      ->  Binary("add", Binary("mul", Cast(x[i], float64), 2.0, float64),
                                          Cast(Cast(Iter(i), int32), float64), float64)

so the C that codegen prints computes what the user's C computes. Array accesses are
recorded with their isl access maps (``self.maps``); ``?:``, ``&&`` and ``||`` with an affine
condition restrict the accesses of the operand C may skip to the points where C
evaluates it (``i > 0 ? A[i - 1] : 0`` reads ``A[i - 1]`` only where ``i > 0``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import islpy as isl
import numpy as np
from pycparser import c_ast

from polycomp import expr as E
from polycomp import islutil as U
from polycomp.errors import (NonAffineError, RankMismatchError, TypeMismatchError,
                             UnknownNameError, UnsupportedError)

from . import ctype
from .affine import COMPARE, call_name, describe
from .scope import ArrayVar, Iterator, Local, ScalarParam

if TYPE_CHECKING:
    from .lower import FunctionLowering

ARITH = {"+": "add", "-": "sub", "*": "mul", "/": "div", "%": "mod"}
BITWISE = ("&", "|", "^", "<<", ">>", "~")

# C math function -> (polycomp function, dtype of its arguments and result)
MATH = {name: (name, "float64") for name in
        ("sqrt", "exp", "log", "tanh", "sin", "cos", "floor", "ceil", "erf", "pow", "fmax",
         "fmin", "fma")}
MATH.update({name + "f": (name, "float32") for name in list(MATH)})
MATH.update({"fabs": ("abs", "float64"), "fabsf": ("abs", "float32"), "abs": ("abs", "int32"),
             "labs": ("abs", "int64"), "llabs": ("abs", "int64")})


def convert(value: E.Expr, dtype: str) -> E.Expr:
    """``value`` converted to ``dtype`` as C converts it (constants folded when exact)."""
    if value.dtype == dtype:
        return value
    if isinstance(value, E.Const) and not isinstance(value.value, bool):
        folded = _fold(value.value, dtype)
        if folded is not None:
            return folded
    return E.Cast(value, dtype)


def _fold(value: int | float, dtype: str) -> E.Expr | None:
    if ctype.is_float(dtype):
        converted = float(np.array(value).astype(dtype))
        return E.Const(converted, dtype) if converted == value else None
    if dtype == "int32" and isinstance(value, int) and ctype.fits(value, dtype):
        return E.Const(value, dtype)
    return None


def literal(dtype: str, value: int | float) -> E.Expr:
    """A constant of a C type that codegen prints with that type (see codegen/cexpr.py:
    small integers print without a suffix, as C ints)."""
    if ctype.is_float(dtype) or dtype == "int32" or dtype == "uint64":
        return E.Const(value, dtype)
    if dtype == "int64" and not ctype.fits(int(value), "int32"):
        return E.Const(int(value), dtype)  # printed with an LL suffix
    return E.Cast(E.Const(int(value), "int64" if not ctype.fits(int(value), "int32")
                          else "int32"), dtype)


def truth(value: E.Expr) -> E.Expr:
    """A scalar as a C condition (``x`` means ``x != 0``)."""
    if value.dtype == "bool":
        return value
    return E.Binary("ne", value, literal(value.dtype, 0.0 if ctype.is_float(value.dtype) else 0),
                    "bool")


class ValueBuilder:
    """Builds the typed value of one statement at a time (``begin`` resets the accesses)."""

    def __init__(self, low: FunctionLowering):
        self.low = low
        self.maps: dict[E.Access, isl.Map] = {}

    def begin(self) -> None:
        self.maps = {}

    # ------------------------------------------------------------------ dispatch
    def value(self, node: c_ast.Node, where: isl.Set) -> E.Expr:
        expanded = self.low.macros.expand(node)
        if expanded is not None:
            return self.value(expanded, where)
        if isinstance(node, c_ast.Constant):
            return self._constant(node)
        if isinstance(node, c_ast.ID):
            return self._name(node, where)
        if isinstance(node, c_ast.ArrayRef):
            return self.access(node, where)[0]
        if isinstance(node, c_ast.UnaryOp):
            return self._unary(node, where)
        if isinstance(node, c_ast.BinaryOp):
            return self._binary(node, where)
        if isinstance(node, c_ast.TernaryOp):
            return self._ternary(node, where)
        if isinstance(node, c_ast.Cast):
            return convert(self.value(node.expr, where), self.low.typename_dtype(node.to_type))
        if isinstance(node, c_ast.FuncCall):
            return self._call(node, where)
        if isinstance(node, c_ast.Assignment):
            raise UnsupportedError("an assignment used as a value is not supported",
                                   self.low.loc(node), hint="write each assignment as its "
                                                            "own statement")
        if isinstance(node, c_ast.ExprList):
            raise UnsupportedError("the comma operator is not supported", self.low.loc(node))
        raise UnsupportedError(f"{describe(node)} is not supported in a statement",
                               self.low.loc(node))

    def _constant(self, node: c_ast.Constant) -> E.Expr:
        dtype, value = self.low.literal(node)
        return literal(dtype, value)

    def _name(self, node: c_ast.ID, where: isl.Set) -> E.Expr:
        symbol = self.low.lookup(node.name)
        if isinstance(symbol, Iterator):
            return convert(E.Iter(symbol.dim), symbol.dtype)
        if isinstance(symbol, ScalarParam):
            if symbol.is_size:
                return convert(E.Param(symbol.name), symbol.dtype)
            return E.Scalar(symbol.name, symbol.dtype)
        if isinstance(symbol, (ArrayVar, Local)):
            return self.access(node, where)[0]
        raise UnknownNameError(f"'{node.name}' is not declared", self.low.loc(node),
                               hint="declare it as a parameter or a local variable")

    # ------------------------------------------------------------------ accesses
    def access(self, node: c_ast.Node, where: isl.Set,
               write: bool = False) -> tuple[E.Access, isl.Map, ArrayVar]:
        """An array element or local scalar: its Access node, access map and array."""
        subscripts: list[c_ast.Node] = []
        base = node
        while isinstance(base, c_ast.ArrayRef):
            subscripts.insert(0, base.subscript)
            base = base.name
        if not isinstance(base, c_ast.ID):
            raise UnsupportedError("only named arrays can be subscripted", self.low.loc(base),
                                   hint="pointer arithmetic and casts of arrays are not "
                                        "supported")
        array = self.low.variable(base, write)
        if len(subscripts) != len(array.shape):
            raise RankMismatchError(
                f"'{base.name}' has {len(array.shape)} dimension(s) but is used with "
                f"{len(subscripts)} subscript(s)", self.low.loc(node, len(base.name)),
                hint="index every dimension (rows of an array are not values)")
        pws, trees = [], []
        for sub in subscripts:
            aff = self.low.affine.expr(sub, where)
            pws.append(aff.pw)
            trees.append(aff.tree)
        amap = U.access_map(where.get_space(), array.name, pws).intersect_domain(where)
        access = E.Access(array.name, tuple(trees), array.dtype, loc=self.low.loc(node))
        if access in self.maps:
            amap = self.maps[access].union(amap).coalesce()
        self.maps[access] = amap
        if write:
            array.written = True
        else:
            array.read = True
        return access, amap, array

    # ------------------------------------------------------------------ operators
    def _unary(self, node: c_ast.UnaryOp, where: isl.Set) -> E.Expr:
        op = node.op
        if op in ("p++", "p--", "++", "--"):
            raise UnsupportedError(f"'{op.lstrip('p')}' used inside an expression is not "
                                   f"supported", self.low.loc(node),
                                   hint="increment in a statement of its own (x++; or x += 1;)")
        if op in ("&", "*"):
            raise UnsupportedError(f"pointer operator '{op}' is not supported",
                                   self.low.loc(node), hint="use array subscripts")
        if op == "~":
            raise UnsupportedError("bitwise operators are not supported", self.low.loc(node))
        if op not in ("-", "+", "!"):
            raise UnsupportedError(f"operator '{op}' is not supported", self.low.loc(node))
        operand = self.value(node.expr, where)
        if op == "!":
            return E.Unary("not", truth(operand), "bool")
        dtype = ctype.promote(operand.dtype)
        operand = convert(operand, dtype)
        if op == "+":
            return operand
        if isinstance(operand, E.Const) and ctype.is_float(dtype):
            return E.Const(-operand.value, dtype)
        return E.Unary("neg", operand, dtype)

    def _binary(self, node: c_ast.BinaryOp, where: isl.Set) -> E.Expr:
        op = node.op
        if op in BITWISE:
            raise UnsupportedError(f"bitwise operator '{op}' is not supported",
                                   self.low.loc(node))
        if op in ("&&", "||"):
            left = self.value(node.left, where)
            right = self.value(node.right, self._evaluated(node.left, where, op == "&&"))
            return E.Binary("and" if op == "&&" else "or", truth(left), truth(right), "bool")
        left, right = self.value(node.left, where), self.value(node.right, where)
        dtype = ctype.common(left.dtype, right.dtype)
        if op == "%" and ctype.is_float(dtype):
            raise TypeMismatchError("'%' needs integer operands", self.low.loc(node),
                                    hint="use fmod() for floating point remainders")
        a, b = convert(left, dtype), convert(right, dtype)
        if op in COMPARE:
            return E.Binary(COMPARE[op], a, b, "bool")
        if op in ARITH:
            return E.Binary(ARITH[op], a, b, dtype)
        raise UnsupportedError(f"operator '{op}' is not supported", self.low.loc(node))

    def _ternary(self, node: c_ast.TernaryOp, where: isl.Set) -> E.Expr:
        cond = truth(self.value(node.cond, where))
        then = self.value(node.iftrue, self._evaluated(node.cond, where, True))
        other = self.value(node.iffalse, self._evaluated(node.cond, where, False))
        dtype = ctype.common(then.dtype, other.dtype)
        return E.Select(cond, convert(then, dtype), convert(other, dtype), dtype)

    def _evaluated(self, cond: c_ast.Node, where: isl.Set, holds: bool) -> isl.Set:
        """Where C evaluates the operand guarded by ``cond`` (``holds``: when it is true):
        exact for an affine condition, all of ``where`` for a data-dependent one."""
        try:
            yes, _ = self.low.affine.cond(cond, where)
        except NonAffineError:
            return where
        return yes if holds else where.subtract(yes)

    # ------------------------------------------------------------------ calls
    def _call(self, node: c_ast.FuncCall, where: isl.Set) -> E.Expr:
        name = call_name(node)
        args = list(node.args.exprs) if node.args is not None else []
        if name in ("min", "max") and self.low.lookup(name) is None:
            return self._minmax(node, name, args, where)
        if name not in MATH:
            raise UnsupportedError(
                f"call to unknown function '{name or '?'}' (it may have side effects)",
                self.low.loc(node, len(name or "?")),
                hint="only <math.h> functions (sqrt, exp, log, pow, fabs, fmax, ...), min and "
                     "max may be called inside the SCoP")
        func, dtype = MATH[name]
        if len(args) != E.FUNCTIONS[func]:
            raise TypeMismatchError(f"{name}() takes {E.FUNCTIONS[func]} argument(s), got "
                                    f"{len(args)}", self.low.loc(node, len(name)))
        values = tuple(convert(self.value(a, where), dtype) for a in args)
        return E.Call(func, values, dtype)

    def _minmax(self, node: c_ast.FuncCall, name: str, args: list,
                where: isl.Set) -> E.Expr:
        """min/max with the usual macro meaning: ((a) < (b) ? (a) : (b))."""
        if len(args) != 2:
            raise TypeMismatchError(f"{name}() takes 2 arguments, got {len(args)}",
                                    self.low.loc(node, len(name)))
        a, b = (self.value(x, where) for x in args)
        dtype = ctype.common(a.dtype, b.dtype)
        a, b = convert(a, dtype), convert(b, dtype)
        return E.Select(E.Binary("lt" if name == "min" else "gt", a, b, "bool"), a, b, dtype)
