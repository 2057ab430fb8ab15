"""The parts of a function around its statements: the SCoP region, the parameters, and
the header of each ``for`` loop.

* :func:`split_body`: the declarations before ``#pragma scop`` and the region up to
  ``#pragma endscop`` (the whole body without pragmas); anything else outside the region
  is rejected, because it would not be compiled.
* :func:`size_names`: the names used in affine positions (bounds, conditions, subscripts,
  extents). An ``int``/``long`` parameter among them is a *size*: an isl parameter of the
  Program (``ScalarArg(is_size=True)``); other scalar parameters are plain values.
* :func:`declare_parameters`: one symbol per C parameter, in order.
* :func:`loop_variable`, :func:`loop_step`: ``for (int i = e; ...; i += c)`` -> ``i, e, c``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import islpy as isl
from pycparser import c_ast

from polycomp import islutil as U
from polycomp.errors import (DuplicateNameError, PolycompError, UnknownNameError,
                             UnsupportedError)

from .scope import ArrayVar, Iterator, Local, ScalarParam

if TYPE_CHECKING:
    from .lower import FunctionLowering

dim = isl.dim_type
SIZE_DTYPES = ("int32", "int64")


# ----------------------------------------------------------------------------- the region

def _pragma(node: c_ast.Node) -> str | None:
    if isinstance(node, c_ast.Pragma):
        word = node.string.strip()
        return word if word in ("scop", "endscop") else None
    return None


def split_body(low: FunctionLowering) -> tuple[list[c_ast.Node], list[c_ast.Node]]:
    """(declarations before the SCoP, the SCoP's statements)."""
    items = list(low.func.body.block_items or [])
    marks = [(k, _pragma(item)) for k, item in enumerate(items) if _pragma(item)]
    for item in items:
        for inner in _descendants(item):
            if _pragma(inner):
                raise UnsupportedError(f"'#pragma {_pragma(inner)}' must be at the top level "
                                       f"of the function body", low.loc(inner))
    if not marks:
        if items and isinstance(items[-1], c_ast.Return) and items[-1].expr is None:
            items = items[:-1]
        return [], items
    words = [w for _, w in marks]
    if words != ["scop", "endscop"]:
        node = items[marks[0][0]]
        raise UnsupportedError("expected one '#pragma scop' followed by one '#pragma endscop'",
                               low.loc(node), hint="mark exactly one region of the function")
    start, end = marks[0][0], marks[1][0]
    before, after = items[:start], items[end + 1:]
    for item in before:
        if not isinstance(item, (c_ast.Decl, c_ast.EmptyStatement, c_ast.Pragma)):
            raise UnsupportedError("only declarations may come before '#pragma scop'",
                                   low.loc(item), hint="code outside the SCoP would not be "
                                                       "compiled; move it inside the region")
    for item in after:
        if isinstance(item, c_ast.Return) and item.expr is None:
            continue
        if not isinstance(item, (c_ast.Decl, c_ast.EmptyStatement, c_ast.Pragma)):
            raise UnsupportedError("only declarations may come after '#pragma endscop'",
                                   low.loc(item), hint="code outside the SCoP would not be "
                                                       "compiled; move it inside the region")
    return before, items[start + 1:end]


def _descendants(node: c_ast.Node):  # noqa: ANN202 - a generator of nodes
    for _, child in node.children():
        yield child
        yield from _descendants(child)


# ----------------------------------------------------------------------------- sizes

def size_names(low: FunctionLowering, items: list[c_ast.Node]) -> set[str]:
    """Every identifier used in an affine position of the function."""
    found: set[str] = set()

    def ids(node: c_ast.Node | None, depth: int = 0) -> None:
        if node is None or depth > 64:
            return
        if isinstance(node, (c_ast.ID, c_ast.FuncCall)):
            try:
                expanded = low.macros.expand(node)
            except PolycompError:
                expanded = None
            if expanded is not None:
                ids(expanded, depth + 1)
                return
        if isinstance(node, c_ast.ID):
            found.add(node.name)
        for _, child in node.children():
            ids(child, depth + 1)

    def walk(node: c_ast.Node) -> None:
        if isinstance(node, c_ast.For):
            ids(node.init)
            ids(node.cond)
            ids(node.next)
        elif isinstance(node, c_ast.If):
            ids(node.cond)
        elif isinstance(node, c_ast.ArrayRef):
            ids(node.subscript)
        elif isinstance(node, c_ast.ArrayDecl):
            ids(node.dim)
        for _, child in node.children():
            walk(child)

    for param in _parameter_decls(low):
        walk(param)
    for item in items:
        walk(item)
    return found


# ----------------------------------------------------------------------------- parameters

def _parameter_decls(low: FunctionLowering) -> list[c_ast.Node]:
    args = low.func.decl.type.args
    decls = list(args.params) if args is not None else []
    if len(decls) == 1 and isinstance(decls[0], c_ast.Typename) \
            and isinstance(decls[0].type, c_ast.TypeDecl) \
            and getattr(decls[0].type.type, "names", None) == ["void"]:
        return []
    return decls


def declare_parameters(low: FunctionLowering, sizes: set[str]) -> list[ScalarParam | ArrayVar]:
    decls = _parameter_decls(low)
    if low.func.param_decls:
        raise UnsupportedError("K&R-style parameter declarations are not supported",
                               low.loc(low.func.decl))
    for decl in decls:
        if not isinstance(decl, c_ast.Decl) or not decl.name:
            raise UnsupportedError("every parameter needs a name and a type", low.loc(decl))
    # sizes first, so that array extents can use them whatever their position
    size_params: dict[str, str] = {}
    for decl in decls:
        if isinstance(decl.type, c_ast.TypeDecl) and decl.name in sizes \
                and decl.name not in size_params:
            dtype = low.decl_dtype(decl.type, f"parameter '{decl.name}'")
            if dtype in SIZE_DTYPES:
                size_params[decl.name] = low.names.claim(decl.name)
    low.params.extend(size_params.values())
    space = U.set_space(None, [], low.params)
    ls = isl.LocalSpace.from_space(space)
    context = isl.Set.universe(space)
    for k in range(len(low.params)):
        var = isl.PwAff.var_on_domain(ls, dim.param, k)
        context = context.intersect(var.ge_set(var.sub(var)))
    low.param_context = context.params()
    out: list[ScalarParam | ArrayVar] = []
    for decl in decls:
        if low.scopes.lookup(decl.name) is not None:
            raise DuplicateNameError(f"parameter '{decl.name}' is declared twice", low.loc(decl))
        symbol = _parameter(low, decl, size_params)
        low.scopes.declare(decl.name, symbol)
        out.append(symbol)
    return out


def _parameter(low: FunctionLowering, decl: c_ast.Decl,
               size_params: dict[str, str]) -> ScalarParam | ArrayVar:
    if isinstance(decl.type, c_ast.ArrayDecl):
        return low.array_declaration(decl, is_param=True)
    if isinstance(decl.type, c_ast.PtrDecl):
        raise UnsupportedError(f"pointer parameter '{decl.name}' is not supported",
                               low.loc(decl, len(decl.name)),
                               hint=f"declare it as an array with its extents, e.g. "
                                    f"double {decl.name}[N] or double {decl.name}[N][M]")
    dtype = low.decl_dtype(decl.type, f"parameter '{decl.name}'")
    if decl.name in size_params:
        return ScalarParam(decl.name, size_params[decl.name], dtype, True, decl)
    return ScalarParam(decl.name, low.names.claim(decl.name), dtype, False, decl)


# ----------------------------------------------------------------------------- loop headers

def loop_variable(low: FunctionLowering, node: c_ast.For) -> tuple[str, c_ast.Node, str]:
    """(the iterator's C name, its initial value, its dtype)."""
    init = node.init
    if init is None:
        raise UnsupportedError("a for loop needs an initialisation of its iterator",
                               low.loc(node), hint="write for (i = lb; i < ub; i++)")
    if isinstance(init, c_ast.DeclList):
        if len(init.decls) != 1 or init.decls[0].init is None:
            raise UnsupportedError("the for-initialisation must declare one initialised "
                                   "iterator", low.loc(init))
        decl = init.decls[0]
        dtype = low.decl_dtype(decl.type, f"loop iterator '{decl.name}'")
        low._check_new_name(decl.name, decl)
        if any(isinstance(n, c_ast.ID) and n.name == decl.name
               for n in [decl.init, *_descendants(decl.init)]):
            raise UnsupportedError(f"the initial value of '{decl.name}' uses '{decl.name}' itself",
                                   low.loc(decl.init))
        _check_iterator_type(low, decl.name, dtype, decl)
        return decl.name, decl.init, dtype
    if not (isinstance(init, c_ast.Assignment) and init.op == "="
            and isinstance(init.lvalue, c_ast.ID)):
        raise UnsupportedError("the for-initialisation must assign one iterator (i = lb)",
                               low.loc(init))
    name = init.lvalue.name
    symbol = low.lookup(name)
    if symbol is None:
        raise UnknownNameError(f"'{name}' is not declared", low.loc(init.lvalue))
    if isinstance(symbol, Iterator):
        raise UnsupportedError(f"'{name}' is already the iterator of an enclosing loop",
                               low.loc(init.lvalue), hint="use a different iterator name")
    if isinstance(symbol, ScalarParam):
        raise UnsupportedError(f"parameter '{name}' cannot be a loop iterator",
                               low.loc(init.lvalue), hint="declare a local iterator")
    if isinstance(symbol, ArrayVar) or (isinstance(symbol, Local) and symbol.array is not None):
        raise UnsupportedError(f"'{name}' is used both as a value and as a loop iterator",
                               low.loc(init.lvalue), hint="use a separate variable for each")
    _check_iterator_type(low, name, symbol.dtype, init.lvalue)
    symbol.loop_var = True
    return name, init.rvalue, symbol.dtype


def _check_iterator_type(low: FunctionLowering, name: str, dtype: str, node: c_ast.Node) -> None:
    if dtype not in SIZE_DTYPES:
        raise UnsupportedError(f"loop iterator '{name}' must be an int or a long", low.loc(node),
                               hint="unsigned, narrow and floating-point iterators are not "
                                    "supported")


def loop_step(low: FunctionLowering, node: c_ast.For, var: str) -> int:
    """The constant step of the loop, from i++, i--, i += c, i -= c or i = i +/- c."""
    nxt = node.next
    step: int | None = None
    target: c_ast.Node | None = None
    if isinstance(nxt, c_ast.UnaryOp) and nxt.op in ("p++", "++", "p--", "--"):
        target, step = nxt.expr, (1 if "+" in nxt.op else -1)
    elif isinstance(nxt, c_ast.Assignment) and nxt.op in ("+=", "-="):
        target, value = nxt.lvalue, low.const_int(nxt.rvalue)
        step = None if value is None else (value if nxt.op == "+=" else -value)
    elif isinstance(nxt, c_ast.Assignment) and nxt.op == "=" \
            and isinstance(nxt.rvalue, c_ast.BinaryOp) and nxt.rvalue.op in ("+", "-"):
        target, rhs = nxt.lvalue, nxt.rvalue
        if _is_id(rhs.left, var):
            value = low.const_int(rhs.right)
            step = None if value is None else (value if rhs.op == "+" else -value)
        elif rhs.op == "+" and _is_id(rhs.right, var):
            step = low.const_int(rhs.left)
    where = nxt if nxt is not None else node
    if target is not None and not _is_id(target, var):
        raise UnsupportedError(f"the loop step must update the iterator '{var}'", low.loc(where))
    if step is None:
        raise UnsupportedError("the loop step must be i++, i--, i += c or i -= c with an "
                               "integer constant c", low.loc(where))
    if step == 0:
        raise UnsupportedError("a loop step of 0 never terminates", low.loc(where))
    return step


def _is_id(node: c_ast.Node, name: str) -> bool:
    return isinstance(node, c_ast.ID) and node.name == name
