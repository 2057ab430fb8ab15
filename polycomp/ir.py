"""The polyhedral IR: what every frontend produces and every later stage reads.

A :class:`Program` is a list of :class:`Statement` objects over :class:`Array` objects,
with size parameters (isl parameters), scalar arguments, and the original (sequential)
schedule. Each statement has an integer-set domain, one write map, its read maps, and a
typed expression tree (polycomp/expr.py) for the value it computes. Frontends also say
how a user calls the kernel (:class:`Interface`).

Programs are values: frozen dataclasses holding isl objects. ``Program.specialize``
substitutes sizes; ``Program.validate`` proves with isl that every access stays inside
its array, or raises OutOfBoundsError with a witness point.

The research door: ``Program.from_isl`` builds a Program from isl strings, e.g.::

    Program.from_isl(
        "stencil",
        arrays={"A": ("float64", ("N",)), "B": ("float64", ("N",))},
        statements=[dict(domain="[N] -> { S0[i] : 1 <= i < N - 1 }",
                         write="{ S0[i] -> B[i] }",
                         reads=["{ S0[i] -> A[i - 1] }", "{ S0[i] -> A[i + 1] }"],
                         body=lambda a, b: (a + b) * 0.5)])
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import islpy as isl

from . import expr as E
from . import islutil as U
from .errors import (IntegerDivisionError, Location, OutOfBoundsError, PolycompError,
                     RangeInferenceError, UnknownNameError)

# scratch: an array the compiler introduced (scheduler/expansion.py); the generated code
# allocates it, so it is no argument of the kernel. local: a temporary contracted to a
# local array of a loop body (scheduler/contraction.py), no argument either
ROLES = ("input", "output", "inout", "temporary", "scratch", "local")
dim = isl.dim_type


@dataclass(frozen=True, eq=False)
class Array:
    """A tensor the program touches. ``shape`` holds one parameter-only PwAff per
    dimension (a constant after specialisation); rank 0 means a single element."""

    name: str
    dtype: str
    shape: tuple[isl.PwAff, ...]
    role: str

    @property
    def rank(self) -> int:
        return len(self.shape)

    def extents(self, sizes: Mapping[str, int] | None = None) -> tuple[int, ...]:
        """Integer extents, given the sizes (none needed once specialised)."""
        out = []
        for k, pa in enumerate(self.shape):
            value = U.pw_aff_value(pa, dict(sizes or {}))
            if value is None:
                raise PolycompError(f"the extent of dimension {k} of '{self.name}' is undefined "
                                    f"for sizes {dict(sizes or {})}")
            out.append(value)
        return tuple(out)

    def bounds(self) -> isl.Set:
        """{ name[o0, ...] : 0 <= ok < shape_k } over the parameters of the shape."""
        params = sorted({p for pa in self.shape for p in U.param_names(pa)})
        result = isl.Set.universe(U.set_space(None, [f"o{k}" for k in range(self.rank)], params))
        for k, extent in enumerate(self.shape):
            # the extent as a function on the array's index space, then o_k < extent
            on_space = extent.add_dims(dim.in_, self.rank).align_params(result.get_space())
            coord = isl.PwAff.var_on_domain(isl.LocalSpace.from_space(on_space.get_space().domain()),
                                            dim.set, k)
            result = result & coord.lt_set(on_space) & coord.ge_set(coord.sub(coord))
        return result.set_tuple_name(self.name)


@dataclass(frozen=True, eq=False)
class Statement:
    """One statement: ``target op= expr`` for every point of ``domain``.

    ``reads`` lists one map per Access in ``E.accesses(expr)`` (walk order), then, for a
    reduction, the write map again (the update reads its target). A data-dependent
    index (gather) gives a read map that covers the whole dimension.
    """

    name: str
    domain: isl.Set
    write: isl.Map
    reads: tuple[isl.Map, ...]
    target: E.Access
    expr: E.Expr
    reduction: str | None = None  # "+", "*", "max", "min", or None for plain assignment
    location: Location | None = None

    @property
    def iterators(self) -> tuple[str, ...]:
        return tuple(U.dim_names(self.domain))

    def read_accesses(self) -> list[E.Access]:
        """The Access node of each read map, in the same order as ``reads``."""
        out = E.accesses(self.expr)
        return out + [self.target] if self.reduction else out


@dataclass(frozen=True)
class TensorArg:
    """A tensor argument: declared dims are ints, size names (bound from this argument's
    shape if not bound yet) or parameter-only PwAffs (checked)."""

    name: str
    dtype: str
    dims: tuple[int | str | isl.PwAff, ...]
    updated: bool = False  # written in place (loop-nest kernels)


@dataclass(frozen=True)
class ScalarArg:
    """A scalar argument; ``is_size`` when its value is also a size parameter."""

    name: str
    dtype: str
    is_size: bool = False


@dataclass(frozen=True)
class Interface:
    """How a user calls a kernel: positional ``inputs``; ``outputs`` are allocated by the
    runtime and returned (one array, or a tuple in this order)."""

    inputs: tuple[TensorArg | ScalarArg, ...]
    outputs: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class Program:
    """Statements in textual order over arrays, with parameters and the original order.

    params             isl parameter names (sizes); empty once specialised
    arrays             every array, in C-argument order
    scalars            scalar arguments passed by value (name, dtype)
    statements         in textual order; names S0, S1, ... (C-safe)
    original_schedule  union map from statement instances to sequential time
    context            constraints on the params (e.g. sizes >= 1)
    sizes              the size values this program was specialised to (for printing)
    generic            the parametric program this one was specialised from (None if it
                       was not): a scheduler may schedule that one and specialise the tree
    """

    name: str
    params: tuple[str, ...]
    arrays: tuple[Array, ...]
    statements: tuple[Statement, ...]
    original_schedule: isl.UnionMap
    context: isl.Set
    scalars: tuple[ScalarArg, ...] = ()
    sizes: tuple[tuple[str, int], ...] = ()
    notes: tuple[str, ...] = field(default=())
    generic: Program | None = field(default=None, repr=False)

    # ------------------------------------------------------------------ views
    def array(self, name: str) -> Array:
        for a in self.arrays:
            if a.name == name:
                return a
        raise KeyError(name)

    def domain(self) -> isl.UnionSet:
        return U.union_set(s.domain for s in self.statements).coalesce()

    def writes(self) -> isl.UnionMap:
        return U.union_map(s.write.intersect_domain(s.domain) for s in self.statements)

    def reads(self) -> isl.UnionMap:
        return U.union_map(r.intersect_domain(s.domain) for s in self.statements for r in s.reads)

    def statement(self, name: str) -> Statement:
        for s in self.statements:
            if s.name == name:
                return s
        raise KeyError(name)

    # ------------------------------------------------------------------ transforms
    def specialize(self, sizes: Mapping[str, int]) -> Program:
        """The same program with every parameter in ``sizes`` replaced by its value."""
        sizes = {k: int(v) for k, v in sizes.items() if k in self.params}
        missing = [p for p in self.params if p not in sizes]
        if missing:
            raise PolycompError(f"no value for size(s) {', '.join(missing)}")
        ctx = self.context.intersect_params(U.fix_params(sizes, U.param_names(self.context)))
        if ctx.is_empty():
            raise PolycompError(f"sizes {sizes} do not satisfy the program's constraints "
                                f"{self.context}")
        values = {p: E.Const(v, E.INDEX_DTYPE) for p, v in sizes.items()}

        def spec_stmt(s: Statement) -> Statement:
            return replace(
                s, domain=U.specialize(s.domain, sizes), write=U.specialize(s.write, sizes),
                reads=tuple(U.specialize(r, sizes) for r in s.reads),
                target=E.substitute(s.target, values, E.Param),  # type: ignore[arg-type]
                expr=E.substitute(s.expr, values, E.Param))

        return replace(
            self, params=(),
            arrays=tuple(replace(a, shape=tuple(U.specialize(pa, sizes) for pa in a.shape))
                         for a in self.arrays),
            statements=tuple(spec_stmt(s) for s in self.statements),
            original_schedule=U.specialize(self.original_schedule, sizes),
            context=isl.Set.universe(U.param_space([])),
            sizes=tuple(sorted({**dict(self.sizes), **sizes}.items())),
            generic=(self.generic or self) if self.params else self.generic)

    # ------------------------------------------------------------------ checks
    def validate(self) -> Program:
        """Prove every access in bounds (for every parameter value in the context), every
        domain bounded, and no integer division by a constant zero."""
        for s in self.statements:
            _check_bounded(self, s)
            _check_divisions(s)
            accesses = [(s.write, s.target)] + list(zip(s.reads, s.read_accesses()))
            for access_map, node in accesses:
                _check_in_bounds(self, s, access_map, node)
        return self

    # ------------------------------------------------------------------ research door
    @staticmethod
    def from_isl(name: str, arrays: Mapping[str, tuple[str, Sequence[int | str]]],
                 statements: Sequence[Mapping[str, object]],
                 context: str | None = None, schedule: str | None = None) -> Program:
        """A Program from isl strings; see the module docstring for an example.

        Each statement has ``domain``, ``write``, ``reads`` (isl map strings), ``body``
        (a function of one Access per read, returning the value; default: the first read)
        and optionally ``reduction`` ("+", "*", "max", "min"). Without ``schedule`` the
        statements run one after the other, each in the lexicographic order of its domain.
        All arrays are updated in place; sizes are bound from their shapes.
        """
        from .from_isl import program_from_isl  # local import: from_isl builds on this module
        return program_from_isl(name, arrays, statements, context, schedule)

    def interface(self) -> Interface:
        """The in-place calling convention: first the sizes no array shape determines (as
        integers), then every array, updated in place, in order."""
        tensors = tuple(TensorArg(a.name, a.dtype, _declared_dims(a), updated=True)
                        for a in self.arrays)
        in_shapes = {d for t in tensors for d in t.dims if isinstance(d, str)}
        sizes = tuple(ScalarArg(p, "int64", is_size=True) for p in self.params
                      if p not in in_shapes)
        return Interface(sizes + tensors)


def _declared_dims(array: Array) -> tuple[int | str | isl.PwAff, ...]:
    out: list[int | str | isl.PwAff] = []
    for pa in array.shape:
        names = U.param_names(pa)
        single = [p for p in names if pa.is_equal(U.param_pw_aff(p, names))]
        if pa.is_cst() and pa.n_piece() == 1:
            out.append(U.pw_aff_value(pa, {}) or 0)
        elif single:
            out.append(single[0])
        else:
            out.append(pa)
    return tuple(out)


def _check_bounded(program: Program, stmt: Statement) -> None:
    """A domain unbounded for some parameter value would make a loop without end (isl
    prints `for (c0 = 0; ; c0 += 1)`); its accesses can still all be in bounds."""
    domain = stmt.domain.intersect_params(program.context)
    if domain.is_bounded():
        return
    n = domain.dim(dim.set)
    free = [name for k, name in enumerate(stmt.iterators)
            if not domain.project_out(dim.set, k + 1, n - k - 1).project_out(dim.set, 0, k)
            .is_bounded()]
    which = f" (iterator {', '.join(free)})" if free else ""
    raise RangeInferenceError(
        f"statement {stmt.name} has an unbounded domain{which}: {stmt.domain}; its loops "
        "would never end", stmt.location,
        hint="bound every iterator from both sides for every size, e.g. "
             "{ S0[i] : 0 <= i < N }")


def _check_divisions(stmt: Statement) -> None:
    """An integer / or % whose divisor is a constant zero (after folding literals and
    substituting sizes) is refused here: gcc compiles it to a trap instruction that kills
    the process. Divisors known only at run time are checked by the generated code."""
    for node in E.walk(stmt.expr):
        if (isinstance(node, E.Binary) and node.op in ("div", "mod", "floordiv", "floormod")
                and not E.is_float(node.lhs.dtype) and not E.is_float(node.rhs.dtype)
                and constant_value(node.rhs) == 0):
            raise IntegerDivisionError(
                f"statement {stmt.name} divides by zero: {format_expr(node)}"
                + ("" if isinstance(node.rhs, E.Const) else
                   f" (the divisor {format_expr(node.rhs)} is 0)"),
                getattr(node.rhs, "loc", None) or stmt.location,
                hint="an integer division or modulo by zero is undefined; use a non-zero "
                     "divisor, or a float type")


def constant_value(node: E.Expr) -> int | float | bool | None:
    """The value of an expression of constants only (integer / and % truncate, as in C),
    or None."""
    if isinstance(node, E.Const):
        return node.value
    if isinstance(node, E.Cast) and not E.is_float(node.dtype):
        v = constant_value(node.operand)
        return None if v is None or isinstance(v, float) and not math.isfinite(v) else int(v)
    if isinstance(node, E.Unary) and node.op == "neg":
        v = constant_value(node.operand)
        return None if v is None else -v
    if isinstance(node, E.Binary) and node.op in ("add", "sub", "mul", "div", "mod"):
        a, b = constant_value(node.lhs), constant_value(node.rhs)
        if a is None or b is None:
            return None
        if node.op in ("add", "sub", "mul"):
            return a + b if node.op == "add" else a - b if node.op == "sub" else a * b
        if b == 0 or isinstance(a, float) or isinstance(b, float):
            return None
        q = abs(int(a)) // abs(int(b))
        q = q if (a >= 0) == (b >= 0) else -q
        return q if node.op == "div" else int(a) - q * int(b)
    return None


def _check_in_bounds(program: Program, stmt: Statement, access_map: isl.Map, node: E.Access) -> None:
    try:
        array = program.array(access_map.get_tuple_name(dim.out))
    except KeyError:
        raise UnknownNameError(f"statement {stmt.name} accesses unknown array "
                               f"'{access_map.get_tuple_name(dim.out)}'", node.loc or stmt.location)
    if access_map.dim(dim.out) != array.rank:
        raise PolycompError(f"statement {stmt.name} accesses '{array.name}' with "
                            f"{access_map.dim(dim.out)} indices, but it has rank {array.rank}",
                            node.loc or stmt.location)
    touched = access_map.intersect_domain(stmt.domain).intersect_params(program.context)
    outside = touched.intersect_range(array.bounds().complement())
    if outside.is_empty():
        return
    params, coords = U.point_values(outside.wrap().sample_point())
    n_in = access_map.dim(dim.in_)
    where = ", ".join(f"{n} = {v}" for n, v in zip(stmt.iterators, coords[:n_in]))
    if params:
        where += " (" + ", ".join(f"{n} = {v}" for n, v in params.items()) + ")"
    element = f"{array.name}[{', '.join(str(c) for c in coords[n_in:])}]"
    extents = ", ".join(str(U.pw_aff_value(pa, params)) for pa in array.shape)
    raise OutOfBoundsError(
        f"access {format_access(node)} in statement {stmt.name} can go out of bounds: "
        f"at {where} it touches {element}, but '{array.name}' has shape ({extents})",
        node.loc or stmt.location,
        hint="restrict the iteration range (a where clause or loop bound) or enlarge the array")


def format_access(node: E.Access) -> str:
    return f"{node.array}({', '.join(format_expr(i) for i in node.indices)})"


_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "floordiv": "//",
           "floormod": "%%", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==",
           "ne": "!=", "and": "&&", "or": "||"}


def format_expr(node: E.Expr) -> str:
    """A readable one-line rendering of an expression tree (for messages and printouts)."""
    if isinstance(node, E.Const):
        return repr(node.value) if not isinstance(node.value, bool) else str(node.value).lower()
    if isinstance(node, (E.Iter, E.Param, E.Scalar)):
        return node.name
    if isinstance(node, E.Access):
        return format_access(node)
    if isinstance(node, E.Unary):
        return ("-" if node.op == "neg" else "!") + _paren(node.operand)
    if isinstance(node, E.Binary):
        return f"{_paren(node.lhs)} {_SYMBOL[node.op]} {_paren(node.rhs)}"
    if isinstance(node, E.Select):
        return f"{_paren(node.cond)} ? {_paren(node.then)} : {_paren(node.other)}"
    if isinstance(node, E.Cast):
        return f"{node.dtype}({format_expr(node.operand)})"
    if isinstance(node, E.Call):
        return f"{node.func}({', '.join(format_expr(a) for a in node.args)})"
    return str(node)


def _paren(node: E.Expr) -> str:
    text = format_expr(node)
    return f"({text})" if isinstance(node, (E.Binary, E.Select)) else text


def format_statement(stmt: Statement) -> str:
    op = {None: "=", "+": "+=", "*": "*=", "max": "max=", "min": "min="}[stmt.reduction]
    return f"{stmt.name}: {format_access(stmt.target)} {op} {format_expr(stmt.expr)}"


def sequential_schedule(statements: Sequence[Statement]) -> isl.UnionMap:
    """Statements one after the other, each in the lexicographic order of its domain:
    { S_k[i0, ..] -> [k, i0, .., 0, ..] } padded to the deepest statement."""
    depth = max((len(s.iterators) for s in statements), default=0)
    maps = []
    for k, s in enumerate(statements):
        space = s.domain.get_space()
        ls = isl.LocalSpace.from_space(space)
        affs = [isl.Aff.val_on_domain(ls, isl.Val.int_from_si(U.CTX, k))]
        affs += [isl.Aff.var_on_domain(ls, dim.set, j) for j in range(len(s.iterators))]
        affs += [isl.Aff.zero_on_domain(ls)] * (depth - len(s.iterators))
        target = isl.Space.create_from_names(U.CTX, in_=list(s.iterators),
                                             out=[f"t{j}" for j in range(depth + 1)],
                                             params=U.param_names(space))
        target = target.set_tuple_name(dim.in_, s.name)
        aff_list = isl.AffList.alloc(U.CTX, len(affs))
        for a in affs:
            aff_list = aff_list.add(a)
        ma = isl.MultiAff.from_aff_list(target, aff_list)
        maps.append(isl.Map.from_multi_aff(ma).intersect_domain(s.domain))
    return U.union_map(maps)
