"""One C function (pycparser AST) -> statements, arrays and sequential times.

Input: a ``FuncDef`` and the file's Source/macros/typedefs. Output: a :class:`Lowered`
record that frontend/loops/program.py assembles into a Program. The walk keeps a
:class:`Frame` -- the enclosing loops' iterators, the current domain (an isl set over
them and the size parameters, already cut by enclosing ``if`` conditions) and the
prefix of the 2d+1 schedule -- and turns every assignment into one Statement:

    for (i = 0; i < n; i++) {          S0[i]    : 0 <= i < n            time [0, i, 0, 0, 0]
      s = 0;                           S1[i, j] : 0 <= i < n, 0 <= j < i time [0, i, 1, j, 0]
      for (j = 0; j < i; j++) s += A[i][j];
    }

A decreasing loop contributes ``-i`` to the time, so its iterations run in C's order.
Local scalars are zero-dimensional temporary arrays; ``x op= e`` is the plain assignment
``x = x op e`` (an explicit read of ``x``), never a reduction, so nothing is reassociated.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import islpy as isl
from pycparser import c_ast

from polycomp import expr as E
from polycomp import islutil as U
from polycomp.errors import (DuplicateNameError, Location, NonAffineError,
                             TypeMismatchError, UnknownNameError, UnsupportedError)
from polycomp.ir import Statement

from . import ctype
from .affine import DATA_HINT, GENERIC_HINT, AffineBuilder, witness
from .iteration import add_iterator, iteration_set, start_region
from .macros import Macros
from .parameters import declare_parameters, loop_step, loop_variable, size_names, split_body
from .scope import ISL_RESERVED, ArrayVar, Iterator, Local, Names, ScalarParam, Scopes
from .source import Source
from .values import ARITH, ValueBuilder, convert

dim = isl.dim_type

# statements the SCoP cannot contain -> why
_REJECTED = {
    c_ast.While: "'while' loops", c_ast.DoWhile: "'do' loops", c_ast.Goto: "'goto'",
    c_ast.Break: "'break'", c_ast.Continue: "'continue'", c_ast.Return: "'return'",
    c_ast.Switch: "'switch'", c_ast.Label: "labels", c_ast.Case: "'case'",
    c_ast.Default: "'default'",
}


@dataclass(frozen=True)
class Frame:
    """Where the walk is: iterator names, domain (unnamed set), schedule prefix."""

    dims: tuple[str, ...]
    domain: isl.Set
    prefix: tuple[int | tuple[int, int], ...]  # constant positions and (dim, +1/-1)


@dataclass
class Counter:
    """Positions of the statements and loops of one block, in textual order."""

    next: int = 0

    def take(self) -> int:
        self.next += 1
        return self.next - 1


@dataclass
class Lowered:
    name: str
    inputs: list[ScalarParam | ArrayVar]  # the C parameters, in order
    params: list[str]  # size parameters (isl names), in order
    arrays: list[ArrayVar]  # parameters first, then temporaries
    statements: list[Statement] = field(default_factory=list)
    times: list[tuple[int | tuple[int, int], ...]] = field(default_factory=list)
    param_context: isl.Set | None = None


class FunctionLowering:
    """Walks one function; see the module docstring."""

    def __init__(self, func: c_ast.FuncDef, source: Source, macros: Macros,
                 typedefs: dict[str, list[str]]):
        self.func = func
        self.source = source
        self.macros = macros
        self.typedefs = typedefs
        self.names = Names()
        self.scopes = Scopes()
        self.affine = AffineBuilder(self)
        self.values = ValueBuilder(self)
        self.params: list[str] = []
        self.param_context = isl.Set.universe(U.param_space([]))
        self.out: Lowered | None = None

    # ------------------------------------------------------------------ entry
    def run(self) -> Lowered:
        decl = self.func.decl
        result = decl.type.type
        if not (isinstance(result, c_ast.TypeDecl) and isinstance(result.type, c_ast.IdentifierType)
                and result.type.names == ["void"]):
            raise UnsupportedError(f"function '{decl.name}' must return void",
                                   self.loc(self.func.decl),
                                   hint="the kernel updates its array arguments in place")
        before, region = split_body(self)
        inputs = declare_parameters(self, size_names(self, before + region))
        self.out = Lowered(decl.name, inputs, list(self.params),
                           [a for a in inputs if isinstance(a, ArrayVar)],
                           param_context=self.param_context)
        self.scopes.push()
        top = Frame((), isl.Set.universe(U.set_space(None, [], self.params)), ())
        counter = Counter()
        self._block(before + region, top, counter)
        return self.out

    # ------------------------------------------------------------------ helpers
    def lookup(self, name: str):  # noqa: ANN201 - a Symbol or None
        return self.scopes.lookup(name)

    def loc(self, node: c_ast.Node | None, length: int | None = None) -> Location:
        coord = getattr(node, "coord", None)
        if length is None:
            length = len(node.name) if isinstance(node, c_ast.ID) else 1
        return self.source.location(getattr(coord, "line", None),
                                    getattr(coord, "column", None), length)

    def type_words(self, node: c_ast.IdentifierType) -> str | None:
        names = list(node.names)
        seen = 0
        while len(names) == 1 and names[0] in self.typedefs and seen < 16:
            names = list(self.typedefs[names[0]])
            seen += 1
        return ctype.type_of_words(names)

    def decl_dtype(self, node: c_ast.Node, what: str) -> str:
        """The arithmetic dtype of a TypeDecl (a declaration's base type)."""
        if isinstance(node, c_ast.PtrDecl):
            raise UnsupportedError(f"{what} is a pointer", self.loc(node),
                                   hint="declare arrays with their extents, e.g. double A[N]")
        if not (isinstance(node, c_ast.TypeDecl) and isinstance(node.type, c_ast.IdentifierType)):
            raise UnsupportedError(f"{what} has a type the loop frontend does not handle "
                                   f"(struct, union, enum or function)", self.loc(node))
        dtype = self.type_words(node.type)
        if dtype is None:
            raise UnsupportedError(f"{what} has type '{' '.join(node.type.names)}', which is "
                                   f"not an arithmetic type polycomp supports", self.loc(node),
                                   hint="use char, short, int, long, their unsigned forms, "
                                        "_Bool, float or double")
        return dtype

    def typename_dtype(self, node: c_ast.Typename) -> str:
        return self.decl_dtype(node.type, "the cast's target type")

    def literal(self, node: c_ast.Constant) -> tuple[str, int | float]:
        try:
            if node.type == "char":
                return ctype.char_literal(node.value)
            if node.type == "string":
                raise UnsupportedError("string literals are not supported", self.loc(node))
            if node.type in ("float", "double", "long double"):
                return ctype.float_literal(node.value)
            return ctype.int_literal(node.value)
        except ctype.LiteralError as exc:
            raise TypeMismatchError(str(exc), self.loc(node, len(node.value))) from None

    def int_constant(self, node: c_ast.Constant) -> int | None:
        dtype, value = self.literal(node)
        return int(value) if ctype.is_integer(dtype) else None

    def const_int(self, node: c_ast.Node) -> int | None:
        """The value of an integer constant expression (C semantics), or None."""
        expanded = self.macros.expand(node)
        if expanded is not None:
            return self.const_int(expanded)
        if isinstance(node, c_ast.Constant):
            return self.int_constant(node)
        if isinstance(node, c_ast.UnaryOp) and node.op in ("-", "+"):
            inner = self.const_int(node.expr)
            return None if inner is None else (-inner if node.op == "-" else inner)
        if isinstance(node, c_ast.BinaryOp) and node.op in ("+", "-", "*", "/", "%"):
            a, b = self.const_int(node.left), self.const_int(node.right)
            if a is None or b is None or (node.op in "/%" and b == 0):
                return None
            if node.op == "/":
                q = abs(a) // abs(b)
                return q if (a >= 0) == (b >= 0) else -q
            if node.op == "%":
                q = abs(a) // abs(b)
                return a - b * (q if (a >= 0) == (b >= 0) else -q)
            return {"+": a + b, "-": a - b, "*": a * b}[node.op]
        if isinstance(node, c_ast.Cast) and self.typename_dtype(node.to_type) in ("int32", "int64"):
            return self.const_int(node.expr)
        return None

    def variable(self, node: c_ast.ID, write: bool) -> ArrayVar:
        """The array (or local scalar) an access names."""
        symbol = self.lookup(node.name)
        if symbol is None:
            raise UnknownNameError(f"'{node.name}' is not declared", self.loc(node),
                                   hint="declare it as a parameter or a local variable")
        if isinstance(symbol, (Iterator, Local)) and (isinstance(symbol, Iterator)
                                                      or symbol.loop_var):
            if write:
                raise UnsupportedError(f"assignment to loop iterator '{node.name}'",
                                       self.loc(node), hint="loop iterators may change only "
                                                            "in the loop's own step")
            raise UnsupportedError(f"'{node.name}' is a loop iterator; its value outside its "
                                   f"loops is not modelled", self.loc(node))
        if isinstance(symbol, ScalarParam):
            if write:
                raise UnsupportedError(f"assignment to parameter '{node.name}'", self.loc(node),
                                       hint="copy it into a local variable and update that")
            raise TypeMismatchError(f"'{node.name}' is a scalar, not an array", self.loc(node))
        if isinstance(symbol, Local):
            if symbol.array is None:
                symbol.array = ArrayVar(symbol.c_name, self.names.claim(symbol.c_name),
                                        symbol.dtype, (), False, symbol.decl)
                self.out.arrays.append(symbol.array)
            return symbol.array
        return symbol

    def extent(self, node: c_ast.Node | None, array: str, parent: c_ast.Node) -> isl.PwAff:
        """An array extent: an affine expression of the size parameters."""
        if node is None:
            raise UnsupportedError(f"array '{array}' has a dimension without an extent",
                                   self.loc(parent), hint=f"give every dimension an extent, "
                                                          f"e.g. {array}[N][M]")
        where = isl.Set.universe(U.set_space(None, [], self.params))
        try:
            pw = self.affine.expr(node, where).pw
        except NonAffineError as exc:
            exc.hint = "array extents must be integer constants or affine in int parameters"
            raise
        return pw.project_domain_on_params()

    # ------------------------------------------------------------------ statements
    def _block(self, items: list[c_ast.Node], frame: Frame, counter: Counter) -> None:
        for item in items:
            self._statement(item, frame, counter)

    def _statement(self, node: c_ast.Node, frame: Frame, counter: Counter) -> None:
        if isinstance(node, c_ast.Compound):
            self.scopes.push()
            try:
                self._block(node.block_items or [], frame, counter)
            finally:
                self.scopes.pop()
        elif isinstance(node, c_ast.For):
            self._for(node, frame, counter)
        elif isinstance(node, c_ast.If):
            self._if(node, frame, counter)
        elif isinstance(node, c_ast.Assignment):
            self._assign(node, frame, counter)
        elif isinstance(node, c_ast.UnaryOp) and node.op in ("p++", "++", "p--", "--"):
            op = "+=" if "+" in node.op else "-="
            one = c_ast.Constant("int", "1", node.coord)
            self._assign(c_ast.Assignment(op, node.expr, one, node.coord), frame, counter)
        elif isinstance(node, c_ast.Decl):
            self._declaration(node, frame, counter)
        elif isinstance(node, (c_ast.EmptyStatement, c_ast.Pragma)):
            pass
        elif type(node) in _REJECTED:
            raise UnsupportedError(f"{_REJECTED[type(node)]} cannot appear in a SCoP",
                                   self.loc(node), hint="a SCoP holds for loops with affine "
                                                        "bounds, affine ifs and assignments")
        elif isinstance(node, c_ast.FuncCall):
            name = node.name.name if isinstance(node.name, c_ast.ID) else "?"
            raise UnsupportedError(f"call to function '{name}' (it may have side effects)",
                                   self.loc(node, len(name)),
                                   hint="only assignments, for loops and ifs may appear in a SCoP")
        else:
            raise UnsupportedError(f"this statement ({type(node).__name__}) cannot appear in a "
                                   f"SCoP", self.loc(node),
                                   hint="a SCoP holds for loops, ifs and assignments")

    def _if(self, node: c_ast.If, frame: Frame, counter: Counter) -> None:
        try:
            holds, _ = self.affine.cond(node.cond, frame.domain)
        except NonAffineError as exc:
            if exc.hint in (GENERIC_HINT, DATA_HINT):
                    exc.hint = ("'if' conditions must be affine in loop iterators and integer "
                            "parameters; for a data-dependent choice assign a ternary "
                            "(x = c ? a : b)")
            raise
        self._statement(node.iftrue, replace(frame, domain=holds), counter)
        if node.iffalse is not None:
            self._statement(node.iffalse, replace(frame, domain=frame.domain.subtract(holds)),
                            counter)

    def _assign(self, node: c_ast.Assignment, frame: Frame, counter: Counter) -> None:
        if isinstance(node.rvalue, c_ast.Assignment):
            # a chain `a = b = e` (deriche's `a1 = a5 = k`): C assigns `b = e` and gives a
            # the value b then holds, so it is `b = e;` then `a = b;` -- the inner target
            # is read back, converted to a's type exactly as C converts the chain's value
            inner = node.rvalue
            self._assign(inner, frame, counter)
            node = c_ast.Assignment(node.op, node.lvalue, inner.lvalue, node.coord)
        name = f"S{len(self.out.statements)}"
        where = frame.domain.set_tuple_name(name)
        self.values.begin()
        op = node.op
        if op not in ("=", "+=", "-=", "*=", "/=", "%="):
            raise UnsupportedError(f"assignment operator '{op}' is not supported",
                                   self.loc(node), hint="bitwise operators are not supported")
        if not isinstance(node.lvalue, (c_ast.ID, c_ast.ArrayRef)):
            raise UnsupportedError("only array elements and local scalars can be assigned",
                                   self.loc(node.lvalue))
        target, write, array = self.values.access(node.lvalue, where, write=True)
        value = self.values.value(node.rvalue, where)
        if op != "=":
            dtype = ctype.common(target.dtype, value.dtype)
            if op == "%=" and ctype.is_float(dtype):
                raise TypeMismatchError("'%=' needs integer operands", self.loc(node),
                                        hint="use fmod() for floating point remainders")
            value = E.Binary(ARITH[op[0]], convert(target, dtype), convert(value, dtype), dtype)
        expr = convert(value, array.dtype)
        reads = tuple(self.values.maps[a] for a in E.accesses(expr))
        self.out.statements.append(Statement(name, where, write, reads, target, expr, None,
                                             self.loc(node.lvalue)))
        self.out.times.append(frame.prefix + (counter.take(),))

    # ------------------------------------------------------------------ declarations
    def _declaration(self, decl: c_ast.Decl, frame: Frame, counter: Counter) -> None:
        if isinstance(decl.type, c_ast.FuncDecl):
            raise UnsupportedError(f"function declaration '{decl.name}' inside the function",
                                   self.loc(decl))
        if set(decl.storage) & {"static", "extern"}:
            raise UnsupportedError(f"'{' '.join(decl.storage)}' local variable '{decl.name}'",
                                   self.loc(decl), hint="use an automatic local variable")
        self._check_new_name(decl.name, decl)
        if isinstance(decl.type, c_ast.ArrayDecl):
            array = self.array_declaration(decl, is_param=False)
            if decl.init is not None:
                raise UnsupportedError("initialised local arrays are not supported",
                                       self.loc(decl.init))
            self.out.arrays.append(array)
            self.scopes.declare(decl.name, array)
            return
        dtype = self.decl_dtype(decl.type, f"local variable '{decl.name}'")
        self.scopes.declare(decl.name, Local(decl.name, dtype, decl))
        if decl.init is None:
            return
        if isinstance(decl.init, c_ast.InitList):
            raise UnsupportedError("brace initialisers are not supported", self.loc(decl.init))
        target = c_ast.ID(decl.name, decl.coord)
        self._assign(c_ast.Assignment("=", target, decl.init, decl.coord), frame, counter)

    def _check_new_name(self, name: str, decl: c_ast.Node) -> None:
        first = self.scopes.stack[0].get(name)
        if first is not None and isinstance(first, (ScalarParam, ArrayVar)):
            raise DuplicateNameError(f"'{name}' shadows a parameter of the function",
                                     self.loc(decl), hint="rename the local variable")
        if len(self.scopes.stack) > 1 and self.scopes.declared_here(name):
            raise DuplicateNameError(f"'{name}' is declared twice in the same block",
                                     self.loc(decl))

    def array_declaration(self, decl: c_ast.Decl, is_param: bool) -> ArrayVar:
        extents: list[c_ast.Node | None] = []
        node = decl.type
        while isinstance(node, c_ast.ArrayDecl):
            extents.append(node.dim)
            node = node.type
        dtype = self.decl_dtype(node, f"the elements of '{decl.name}'")
        shape = tuple(self.extent(e, decl.name, decl) for e in extents)
        declared = tuple(_declared(pa, self.params) for pa in shape)
        return ArrayVar(decl.name, self.names.claim(decl.name), dtype, shape, is_param, decl,
                        declared)

    # ------------------------------------------------------------------ loops
    def _for(self, node: c_ast.For, frame: Frame, counter: Counter) -> None:
        self.scopes.push()
        try:
            self._loop(node, frame, counter)
        finally:
            self.scopes.pop()

    def _loop(self, node: c_ast.For, frame: Frame, counter: Counter) -> None:
        var, init_node, dtype = loop_variable(self, node)
        step = loop_step(self, node, var)
        if node.cond is None:
            raise UnsupportedError("a for loop without a condition never terminates",
                                   self.loc(node), hint="write an affine loop condition")
        dim_name = self._dim_name(var, frame)
        outer = add_iterator(frame.domain, dim_name)
        init = self.affine.expr(init_node, outer)
        where = start_region(outer, init.pw, step)
        self.scopes.declare(var, Iterator(var, dim_name, dtype))
        holds, _ = self.affine.cond(node.cond, where)
        domain, never = iteration_set(where, holds, step)
        never = never.intersect_params(self.param_context)
        if not never.is_empty():
            raise UnsupportedError(f"this loop may never terminate ({witness(never)})",
                                   self.loc(node.cond),
                                   hint="the condition must become false as the iterator moves "
                                        "in the direction of its step")
        depth = len(frame.dims)
        inner = Frame(frame.dims + (dim_name,), domain,
                      frame.prefix + (counter.take(), (depth, 1 if step > 0 else -1)))
        self._statement(node.stmt, inner, Counter())

    def _dim_name(self, var: str, frame: Frame) -> str:
        name = var
        while name in ISL_RESERVED or name in frame.dims or name in self.params \
                or (name[:1] == "S" and name[1:].isdigit()):
            name += "_"
        return name


def _declared(extent: isl.PwAff, params: list[str]) -> int | str | isl.PwAff:
    """How the Interface shows an extent: an int, a size name, or the PwAff itself."""
    if extent.is_cst() and extent.n_piece() == 1:
        value = U.pw_aff_value(extent, {})
        if value is not None:
            return value
    for p in U.param_names(extent):
        if p in params and extent.is_equal(U.param_pw_aff(p, U.param_names(extent))):
            return p
    return extent
