"""TC lowering: a checked def (sema.py) -> polycomp.ir.Program.

Input: a :class:`sema.CheckedDef` and optionally the sizes. Output: a validated
Program. With sizes, every size becomes a constant first (so ``S*h`` strides are
affine) and the Program has no parameters; without, sizes are isl parameters.

Per TC statement, in order:

1. the domain: ``where`` ranges (bounds with min/max become piecewise, see
   ``Lowering.bound``), then each inferred index's exact interval (ranges.interval),
   over ``[sizes] -> { [left-side indices, reduction indices] }``;
2. for ``op=!``: an init statement ``T(lhs) = identity`` over the left-side indices;
   then the update statement with ``reduction=op`` (reads end with the write map);
3. the written tensor's shape, for outputs and temporaries without a declared
   shape: ``extent_k = max(written index k) + 1`` over all writes so far.

    C(m, n) +=! A(m, k) * B(k, n)     ->
    S0: [M, N, K] -> { S0[m, n] : 0 <= m < M and 0 <= n < N }          C(m, n) = 0
    S1: [M, N, K] -> { S1[m, n, k] : 0 <= m < M and 0 <= n < N and 0 <= k < K }
        write { S1[m, n, k] -> C[m, n] }, reads A[m, k], B[k, n], C[m, n]

The context holds sizes >= 1 and every condition that keeps an inferred range
non-empty (``H >= KH`` for a convolution); specialised sizes that violate one are an
ArgumentError.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import index as as_int

import islpy as isl

from polycomp import expr as E
from polycomp import islutil as U
from polycomp.errors import (
    ArgumentError,
    Location,
    NonAffineError,
    RangeInferenceError,
    UnsupportedError,
    location_in_text,
)
from polycomp.ir import Array, Program, ScalarArg, Statement, sequential_schedule

from . import ranges as R
from .sema import CheckedDef, CheckedStmt
from .typecheck import DimOf

dim = isl.dim_type


@dataclass
class RangeLine:
    """One line of ``explain_ranges``: an index of a statement and where its range is from."""

    statement: str
    index: str
    lo: isl.PwAff | None
    hi: isl.PwAff | None  # exclusive
    reason: str
    text: str = ""  # the where clause, for given ranges


@dataclass
class Lowered:
    program: Program
    ranges: list[RangeLine] = field(default_factory=list)


def lower_def(cdef: CheckedDef, sizes: Mapping[str, int] | None, validate: bool = True) -> Lowered:
    try:
        return Lowering(cdef, sizes).run(validate)
    except isl.Error as exc:  # a bug, or an input isl cannot handle: never a bare isl.Error
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UnsupportedError(f"isl failed while lowering '{cdef.name}': {first}",
                               _def_loc(cdef), hint="simplify the def; please report this "
                               "program as a polycomp bug") from None


def _def_loc(cdef: CheckedDef) -> Location:
    n = cdef.syntax.name
    return location_in_text(cdef.source, n.start, n.end - n.start, cdef.file)


class Lowering:
    def __init__(self, cdef: CheckedDef, sizes: Mapping[str, int] | None):
        self.cdef = cdef
        self.names = cdef.isl_names
        self.values = self.check_sizes(sizes)
        self.params = [] if self.values is not None else [self.names[s] for s in cdef.sizes]
        self.context = isl.Set.universe(U.param_space(self.params))
        if self.values is None:  # tensor extents are >= 1, integer parameters >= 0
            for s in cdef.sizes:
                p = U.param_pw_aff(self.names[s], self.params)
                low = 1 if s in cdef.dim_sizes else 0
                self.context &= p.ge_set(U.constant_pw_aff(low, self.params))
        self.shapes: dict[str, tuple[isl.PwAff, ...]] = {}
        self.images: dict[str, isl.Set] = {}
        for name, t in cdef.tensors.items():
            if t.dims is not None:
                self.shapes[name] = tuple(self.declared_extent(d) for d in t.dims)
        self.statements: list[Statement] = []
        self.lines: list[RangeLine] = []

    # ------------------------------------------------------------------ sizes
    def check_sizes(self, sizes: Mapping[str, int] | None) -> dict[str, int] | None:
        if sizes is None:
            return None
        out: dict[str, int] = {}
        missing = []
        for s in self.cdef.sizes:
            key = s if s in sizes else self.names[s] if self.names[s] in sizes else None
            if key is None:
                missing.append(s)
                continue
            value = sizes[key]
            try:
                if isinstance(value, bool):
                    raise TypeError
                out[s] = as_int(value)
            except TypeError:
                raise ArgumentError(f"size '{s}' must be an integer, not {value!r}",
                                    _def_loc(self.cdef), hint="pass sizes as Python ints") from None
            if abs(out[s]) >= 2**62:
                raise ArgumentError(f"size '{s}' = {out[s]} is too large", _def_loc(self.cdef),
                                    hint="sizes must fit comfortably in 64 bits")
            if s in self.cdef.dim_sizes and out[s] < 1:
                raise ArgumentError(f"size '{s}' must be at least 1, not {out[s]}",
                                    _def_loc(self.cdef), hint="tensor extents are positive")
        if missing:
            raise ArgumentError(f"no value for size(s) {', '.join(missing)} of "
                                f"'{self.cdef.name}'", _def_loc(self.cdef),
                                hint=f"pass sizes for {', '.join(self.cdef.sizes)}")
        return out

    def declared_extent(self, d: int | str) -> isl.PwAff:
        if isinstance(d, int):
            return U.constant_pw_aff(d, self.params)
        if self.values is not None:
            return U.constant_pw_aff(self.values[d], self.params)
        return U.param_pw_aff(self.names[d], self.params)

    def condition(self, cond: isl.Set, message: str, loc: Location | None) -> None:
        """Sizes must satisfy ``cond``: a constraint of the context, or checked now."""
        cond = R.simplify_params(cond)
        if self.values is not None:
            if cond.is_empty():
                shown = ", ".join(f"{k}={v}" for k, v in self.values.items())
                raise ArgumentError(f"for sizes {shown}, {message}", loc,
                                    hint="these sizes are too small for the def")
            return
        new = self.context & cond
        if new.is_empty():
            raise RangeInferenceError(f"{message}, whatever the sizes", loc,
                                      hint="check the where ranges and the declared shapes")
        self.context = new.coalesce()

    # ------------------------------------------------------------------ expression trees
    def prep(self, tree: E.Expr) -> E.Expr:
        """User names -> isl names; sizes -> constants when specialised; T.k -> extent."""
        values, names, size_scalars = self.values, self.names, self.cdef.size_scalars

        def fn(node: E.Expr) -> E.Expr | None:
            if isinstance(node, E.Iter):
                return E.Iter(names.get(node.name, node.name), node.dtype)
            if isinstance(node, E.Param):
                if values is not None:
                    return E.Const(values[node.name], E.INDEX_DTYPE)
                return E.Param(names[node.name], node.dtype)
            if isinstance(node, E.Scalar) and node.name in size_scalars:
                return E.Scalar(names[node.name], node.dtype)
            if isinstance(node, DimOf):
                return self.extent_expr(node)
            return None

        return E.transform(tree, fn)

    def extent_expr(self, node: DimOf) -> E.Expr:
        pa = self.shapes[node.tensor][node.dim]
        if self.values is not None:
            return E.Const(U.pw_aff_value(pa, {}) or 0, E.INDEX_DTYPE)
        pa = pa.gist_params(self.context).coalesce()
        pieces = pa.get_pieces()
        if len(pieces) != 1:
            raise UnsupportedError(f"'{node.tensor}.{node.dim}' has a piecewise extent ({pa}), "
                                   "which parametric mode cannot use in an expression",
                                   _def_loc(self.cdef), hint="lower with sizes")
        aff = pieces[0][1]
        return U.aff_to_expr(aff, [], U.param_names(aff))

    def affine(self, tree: E.Expr, space: isl.Space, cs: CheckedStmt) -> isl.PwAff:
        try:
            return U.affine(self.prep(tree), space)
        except U.NotAffine:
            loc = _loc(self.cdef, cs.syntax)
            raise NonAffineError(f"an index of statement {cs.number} is not affine after "
                                 "substituting the sizes", loc,
                                 hint="indices are affine expressions of indices and sizes"
                                 ) from None

    def bound(self, tree: E.Expr, space: isl.Space, cs: CheckedStmt, given: R.Given
              ) -> isl.PwAff:
        """A where-range bound as a PwAff: affine, or built from affine pieces with min
        and max (sema allows those in bounds only). isl keeps the pieces: ``lo <= v``
        with ``lo = max(a, b)`` is ``a <= v and b <= v``, with ``lo = min(a, b)`` it is
        the union ``a <= v or b <= v``."""
        if not any(isinstance(n, E.Call) for n in E.walk(tree)):
            return self.affine(tree, space, cs)
        tree = self.prep(tree)

        def go(node: E.Expr) -> isl.PwAff:
            if not any(isinstance(n, E.Call) for n in E.walk(node)):
                return U.affine(node, space)
            if isinstance(node, E.Call) and node.func in ("min", "max") and len(node.args) == 2:
                a, b = go(node.args[0]), go(node.args[1])
                return a.min(b) if node.func == "min" else a.max(b)
            if isinstance(node, E.Cast) and E.is_integer(node.dtype):
                return go(node.operand)
            if isinstance(node, E.Unary) and node.op == "neg":
                return go(node.operand).neg()
            if isinstance(node, E.Binary):
                if node.op in ("add", "sub"):
                    a, b = go(node.lhs), go(node.rhs)
                    return a.add(b) if node.op == "add" else a.sub(b)
                if node.op == "mul":
                    a, b = go(node.lhs), go(node.rhs)
                    if a.is_cst():
                        return b.mul(a)
                    if b.is_cst():
                        return a.mul(b)
                elif node.op in ("floordiv", "floormod"):
                    den = U.constant_value(node.rhs)
                    if den is not None and den > 0:
                        a = go(node.lhs)
                        val = isl.Val.int_from_si(a.get_ctx(), den)
                        return a.scale_down_val(val).floor() if node.op == "floordiv" \
                            else a.mod_val(val)
            raise U.NotAffine(node)

        try:
            return go(tree)
        except U.NotAffine:
            raise NonAffineError(f"a bound of '{given.text}' is not affine after "
                                 "substituting the sizes", _loc(self.cdef, given),
                                 hint="bounds are affine expressions of indices and sizes, "
                                      "or min/max of them; multiply and divide only by "
                                      "constants, never by a min/max") from None

    # ------------------------------------------------------------------ run
    def run(self, validate: bool) -> Lowered:
        for cs in self.cdef.statements:
            if cs.strides and self.values is None:
                node = cs.strides[0]
                text = self.cdef.source[node.start:node.end]
                raise UnsupportedError(
                    f"'{text}' multiplies (or divides) by a size, which is not affine in "
                    "parametric mode", _loc(self.cdef, node),
                    hint="lower with sizes: the def is then specialised and the stride "
                         "becomes a constant")
            self.statement(cs)
        return Lowered(self.program(validate), self.lines)

    def statement(self, cs: CheckedStmt) -> None:
        names = [self.names[i] for i in cs.indices]
        space = U.set_space(None, names, self.params)
        constraints, known = self.domain(cs, space)
        domain = _named(known, names, "S")
        if not domain.is_bounded():
            raise RangeInferenceError("the where ranges do not bound every index of the "
                                      "statement", _loc(self.cdef, cs.syntax),
                                      hint="give every ranged index a lower and an upper bound "
                                           "that do not depend on each other in a cycle")
        target = self.prep(cs.target)
        expr = self.prep(cs.expr)
        written = []
        if cs.init:
            lhs_known = isl.Set.universe(space)
            for i in cs.indices[:cs.n_lhs]:
                lhs_known &= constraints[i]
            n = len(names)
            init_dom = lhs_known.project_out(dim.set, cs.n_lhs, n - cs.n_lhs)
            sname = f"S{len(self.statements)}"
            init_dom = _named(init_dom, names[:cs.n_lhs], sname)
            identity = E.reduction_identity(cs.op, target.dtype)
            written.append(self.add(sname, init_dom, target, E.Const(identity, target.dtype),
                                    None, cs))
        sname = f"S{len(self.statements)}"
        written.append(self.add(sname, domain.set_tuple_name(sname), target, expr, cs.op, cs))
        self.record_ranges(cs, [s.name for s in self.statements[-len(written):]])
        self.update_shape(cs, written)

    def domain(self, cs: CheckedStmt, space: isl.Space) -> tuple[dict[str, isl.Set], isl.Set]:
        """Per index, the constraints giving its range; and their conjunction."""
        constraints: dict[str, isl.Set] = {}
        known = isl.Set.universe(space)
        for g in cs.given:
            v = R.variable(space, self.names[g.index])
            c = self.bound(g.lo, space, cs, g).le_set(v) & v.lt_set(self.bound(g.hi, space, cs, g))
            constraints[g.index] = c
            known &= c
        self.pending: dict[str, tuple[isl.PwAff, isl.PwAff]] = {}
        for inf in cs.plan:
            pos = cs.indices.index(inf.index)
            dims = []
            for occ_no, ds in inf.bounds:
                occ = cs.occurrences[occ_no]
                shape = self.shapes[occ.tensor]
                for d in ds:
                    dims.append((self.affine(occ.indices[d], space, cs), R.lift(shape[d], space),
                                 occ.names[d] <= {inf.index}))
            values = R.interval(known, pos, dims)
            first = cs.occurrences[inf.bounds[0][0]]
            loc = location_in_text(self.cdef.source, first.start, first.end - first.start,
                                   self.cdef.file)
            if not values.is_bounded():
                cls = ArgumentError if self.values is not None else RangeInferenceError
                raise cls(f"the accesses that should bound index '{inf.index}' do not bound it"
                          + (" for these sizes" if self.values is not None else ""), loc,
                          hint=f"give its range with a where clause: 'where {inf.index} in lo:hi'")
            nonempty = R.simplify_params(values.params())
            self.condition(nonempty, f"the range of index '{inf.index}' inferred from "
                           f"{first.text} is empty", loc)
            lo = values.dim_min(0).gist_params(nonempty).coalesce()
            hi = values.dim_max(0).gist_params(nonempty).coalesce()
            v = R.variable(space, self.names[inf.index])
            c = R.lift(lo, space).le_set(v) & v.le_set(R.lift(hi, space))
            c = c.intersect_params(nonempty)
            constraints[inf.index] = c
            known &= c
            self.pending[inf.index] = (lo, hi + 1)
        return constraints, known

    def add(self, name: str, domain: isl.Set, target: E.Access, expr: E.Expr,
            reduction: str | None, cs: CheckedStmt) -> Statement:
        space = domain.get_space()
        write = U.access_map(space, target.array, [U.affine(i, space) for i in target.indices])
        reads = [self.read_map(space, a) for a in E.accesses(expr)]
        if reduction is not None:
            reads.append(write)
        stmt = Statement(name, domain.coalesce(), write, tuple(reads), target, expr, reduction,
                         target.loc)
        self.statements.append(stmt)
        return stmt

    def read_map(self, space: isl.Space, access: E.Access) -> isl.Map:
        """{ S[..] -> T[..] }; a data-dependent dimension covers the whole extent."""
        gather = [any(isinstance(n, E.Access) for n in E.walk(t)) for t in access.indices]
        zero = U.affine(E.Const(0, E.INDEX_DTYPE), space)
        pas = [zero if g else U.affine(t, space) for t, g in zip(access.indices, gather)]
        m = U.access_map(space, access.array, pas)
        if not any(gather):
            return m
        for k, g in enumerate(gather):
            if g:
                m = m.project_out(dim.out, k, 1).insert_dims(dim.out, k, 1) \
                     .set_dim_name(dim.out, k, f"o{k}")
        m = m.set_tuple_name(dim.out, access.array)
        rng_space = U.set_space(None, [f"o{k}" for k in range(len(gather))], self.params)
        ls = isl.LocalSpace.from_space(rng_space)
        rng = isl.Set.universe(rng_space)
        for k, g in enumerate(gather):
            if g:
                coord = isl.PwAff.var_on_domain(ls, dim.set, k)
                extent = R.lift(self.shapes[access.array][k], rng_space)
                rng = rng & coord.ge_set(coord.sub(coord)) & coord.lt_set(extent)
        return m.intersect_range(rng.set_tuple_name(access.array))

    def update_shape(self, cs: CheckedStmt, written: list[Statement]) -> None:
        t = self.cdef.tensors[cs.tensor]
        if t.dims is not None:
            return
        image = self.images.get(cs.tensor)
        for s in written:
            part = s.write.intersect_domain(s.domain).range()
            image = part if image is None else image | part
        self.images[cs.tensor] = image.coalesce()
        line = cs.target.loc.line if cs.target.loc else "?"
        self.condition(image.params(), f"the statement at line {line} writes no element of "
                       f"'{cs.tensor}'", cs.target.loc)
        rank = image.dim(dim.set)
        self.shapes[cs.tensor] = tuple((image.dim_max(k) + 1).coalesce() for k in range(rank))

    def record_ranges(self, cs: CheckedStmt, statement_names: list[str]) -> None:
        for sname in statement_names:
            count = cs.n_lhs if sname != statement_names[-1] else len(cs.indices)
            for i in cs.indices[:count]:
                given = next((g for g in cs.given if g.index == i), None)
                if given is not None:
                    self.lines.append(RangeLine(sname, i, None, None, "where clause", given.text))
                    continue
                inf = next(x for x in cs.plan if x.index == i)
                lo, hi = self.pending[i]
                self.lines.append(RangeLine(sname, i, lo, hi, _reason(cs, inf)))

    # ------------------------------------------------------------------ program
    def program(self, validate: bool) -> Program:
        cdef = self.cdef
        ctx = self.context.coalesce()
        arrays = []
        for name, t in cdef.tensors.items():
            shape = tuple(pa.gist_params(ctx).coalesce() if self.values is None else pa
                          for pa in self.shapes[name])
            arrays.append(Array(name, t.dtype or "float32", shape, t.role))
        order = {"input": 0, "output": 1, "temporary": 2}
        arrays.sort(key=lambda a: order[a.role])  # stable: declared / first-write order
        scalars = tuple(
            ScalarArg(self.names[p] if p in cdef.size_scalars else p, cdef.scalars[p],
                      p in cdef.size_scalars)
            for p in cdef.params if p in cdef.scalars
            and (p not in cdef.size_scalars or p in cdef.value_scalars))
        sizes = () if self.values is None else tuple(
            sorted((self.names[k], v) for k, v in self.values.items()))
        program = Program(cdef.name, tuple(self.params), tuple(arrays), tuple(self.statements),
                          sequential_schedule(self.statements), ctx, scalars, sizes)
        self.context = ctx
        return program.validate() if validate else program


def _named(s: isl.Set, names: list[str], tuple_name: str) -> isl.Set:
    for k, n in enumerate(names):
        s = s.set_dim_name(dim.set, k, n)
    return s.set_tuple_name(tuple_name)


def _loc(cdef: CheckedDef, node) -> Location:
    return location_in_text(cdef.source, node.start, node.end - node.start, cdef.file)


def _reason(cs: CheckedStmt, inf) -> str:
    parts: list[str] = []
    for occ_no, dims in inf.bounds:
        occ = cs.occurrences[occ_no]
        what = {"read": "", "write": " (the left-hand side)", "exists": " (exists)"}[occ.kind]
        if len(dims) == 1:
            where = f"dimension {dims[0]} of {occ.tensor}"
        else:
            where = f"dimensions {', '.join(str(d) for d in dims)} of {occ.tensor}"
        part = f"{occ.text}{what}, {where}"
        if part not in parts:
            parts.append(part)
    text = "bounded by " + "; ".join(parts)
    return f"round {inf.round}: {text}" if inf.round > 1 else text


def format_ranges(lines: list[RangeLine], context: isl.Set) -> str:
    """The text of ``polycomp compile --emit ranges``."""
    build = isl.AstBuild.from_context(context)
    out = []
    for line in lines:
        if line.lo is None:
            out.append(f"{line.statement}: {line.text}  ({line.reason})")
            continue
        lo = build.expr_from_pw_aff(line.lo.gist_params(context).coalesce()).to_C_str()
        hi = build.expr_from_pw_aff(line.hi.gist_params(context).coalesce()).to_C_str()
        out.append(f"{line.statement}: {line.index} in {lo}:{hi}  ({line.reason})")
    return "\n".join(out)
