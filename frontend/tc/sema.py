"""TC semantic analysis: syntax tree -> checked definitions, ready to lower.

Input: a :class:`syntax.Module`. Output: one :class:`CheckedDef` per def, holding the
interface, the tensors with their roles, and per statement the typed expression trees
(polycomp.expr, with the user's names), its indices (left side first, then reduction
indices in order of first appearance), its ``where`` ranges and the range-inference
plan (ranges.py). Everything that can be checked without knowing the sizes is checked
here: names, duplicates, ranks, definition order, types, affine indices, whether every
index's range can be inferred. lower.py then computes the ranges with isl. The type
of an untyped output or temporary comes from all its writes (``infer_written_types``).

    def f(float(N) A) -> (B) { B(i) = A(i) * 2 }
      -> statement 0: B(i) = A(i) * 2.0f (float32), index i bounded by A(i) dim 0
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from polycomp import expr as E
from polycomp.errors import (
    DefinitionOrderError,
    DuplicateNameError,
    ParseError,
    PolycompError,
    RangeInferenceError,
    RankMismatchError,
    TypeMismatchError,
    UnknownNameError,
    UnsupportedError,
    location_in_text,
)
from polycomp.ir import Interface, ScalarArg, TensorArg, format_access

from . import syntax as S
from .parser import MAX_DEPTH
from .ranges import Given, Inferred, Occurrence, plan
from .typecheck import CAST_HINT, FUNCTIONS, Scope, TensorInfo, Typed, Typer, weak_default

BUILTINS = frozenset(FUNCTIONS) | frozenset(S.TYPE_NAMES)

# Names isl's parser reads as keywords (case-insensitively): sizes and indices with these
# names get '_' appended in the Program, so that printed sets parse back.
ISL_KEYWORDS = frozenset({"exists", "and", "or", "implies", "not", "infty", "infinity", "nan",
                          "min", "max", "rat", "true", "false", "ceild", "floord", "mod",
                          "ceil", "floor"})

MAX_LET_SIZE = 20000  # nodes of a statement after substituting its where bindings


@dataclass(frozen=True)
class CheckedStmt:
    number: int
    syntax: S.Stmt
    text: str
    tensor: str
    op: str | None  # reduction operator, None for '='
    init: bool  # the '!' forms: initialise with the identity first
    target: E.Access
    expr: E.Expr
    indices: tuple[str, ...]  # left-hand side indices first, then reduction indices
    n_lhs: int
    given: tuple[Given, ...]
    occurrences: tuple[Occurrence, ...]
    plan: tuple[Inferred, ...]
    strides: tuple[S.Expr, ...]  # index products that need known sizes


@dataclass(frozen=True)
class CheckedDef:
    name: str
    syntax: S.Def
    source: str
    file: str | None
    tensors: dict[str, TensorInfo]  # inputs, outputs, temporaries (first-write order)
    params: tuple[str, ...]  # inputs (tensors and scalars) in declared order
    scalars: dict[str, str]  # scalar parameter -> dtype
    sizes: tuple[str, ...]  # size names: from tensor dimensions, then integer scalars
    dim_sizes: frozenset[str]
    size_scalars: frozenset[str]  # integer scalars used in indices or range bounds
    value_scalars: frozenset[str]  # scalars used in expressions
    outputs: tuple[str, ...]
    statements: tuple[CheckedStmt, ...]
    isl_names: dict[str, str]  # user name -> isl name, for sizes and indices
    interface: Interface
    gradient: S.Gradient | None


def check_module(module: S.Module) -> list[CheckedDef]:
    out: list[CheckedDef] = []
    seen: dict[str, S.Def] = {}
    for d in module.defs:
        if d.name.name in seen:
            line = location_in_text(module.source, seen[d.name.name].start).line
            raise DuplicateNameError(f"a def named '{d.name.name}' is already defined at line "
                                     f"{line}", _loc(module, d.name), hint="rename one of them")
        seen[d.name.name] = d
        out.append(DefChecker(module, d, infer_written_types(module, d)).run())
    return out


# ----------------------------------------------------------------------------- written types
#
# An untyped output or temporary takes one type from *all* its writes, not from the
# first one: ``T(i) = 0`` followed by ``T(i) += A(i, k) * 0.5`` makes T float32 (typed
# by its first write it would be int32, and the float sums would be truncated). The
# types of the written values can depend on the types of other temporaries (and of T
# itself, through reads), so they are found by checking the def leniently (a statement
# that fails is skipped: the strict check that follows reports it) until the types stop
# changing; they only ever widen, so this ends.

MAX_TYPE_ROUNDS = 64


@dataclass(frozen=True)
class WrittenType:
    """The type of an untyped output or temporary, and the write that decided whether it
    holds bools or numbers (its first write of a value that is not a literal)."""

    dtype: str
    origin: S.Stmt


@dataclass(frozen=True)
class Write:
    """A statement's right-hand side value (typed, before conversion) into a tensor."""

    tensor: str
    value: Typed
    stmt: S.Stmt


def infer_written_types(module: S.Module, d: S.Def) -> dict[str, WrittenType]:
    """The type of every untyped output or temporary written by several statements."""
    declared = {p.name.name for p in d.params} | {o.name.name for o in d.outputs if o.type}
    counts = Counter(s.lhs.name for s in d.stmts if s.lhs.name not in declared)
    if all(c < 2 for c in counts.values()):
        return {}  # one write each: its value's type, as the strict check finds it
    types: dict[str, WrittenType] = {}
    for _ in range(MAX_TYPE_ROUNDS):
        new = join_writes(DefChecker(module, d, types).probe(), types)
        if new == types:
            break
        types = new
    return types


def join_writes(writes: list[Write], previous: dict[str, WrittenType]
                ) -> dict[str, WrittenType]:
    """Per tensor, the type of its written values combined as the operands of one
    arithmetic expression are (``polycomp.expr.promote``: float beats int, wider beats
    narrower), a literal adopting the type of the others: ``0`` next to float32 values
    is float32, ``0.5`` next to int32 values makes float32, literals alone take their
    default type (int32, int64 if needed, float32). An integer literal that does not fit
    in the others' integer type widens it to the literal's default type instead of
    being an error. Bool values do not mix with numbers: the first non-literal write
    decides, and the strict check reports a write of the other kind."""
    by_tensor: dict[str, list[Write]] = {}
    for w in writes:
        by_tensor.setdefault(w.tensor, []).append(w)
    out = dict(previous)
    for name, ws in by_tensor.items():
        strong = [w for w in ws if not w.value.weak]
        origin = previous[name].origin if name in previous else \
            strong[0].stmt if strong else ws[0].stmt
        is_bool = any(w.stmt is origin and not w.value.weak and w.value.dtype == "bool"
                      for w in ws) or (name in previous and previous[name].dtype == "bool")
        if is_bool:
            out[name] = WrittenType("bool", origin)
            continue
        dtype: str | None = previous[name].dtype if name in previous else None
        for w in strong:
            if w.value.dtype != "bool":
                dtype = w.value.dtype if dtype is None else E.promote(dtype, w.value.dtype)
        weak = [w.value for w in ws if w.value.weak]
        if any(v.weak == "float" for v in weak) and (dtype is None or not E.is_float(dtype)):
            dtype = "float32" if dtype is None else E.promote(dtype, "float32")
        ints = [int(v.value) for v in weak if v.weak == "int"]  # type: ignore[arg-type]
        if ints and dtype is None:
            dtype = weak_default(max(ints, key=abs), "int")
        elif ints and not E.is_float(dtype):  # type: ignore[arg-type]
            for v in ints:
                if not _fits(v, dtype):  # type: ignore[arg-type]
                    dtype = E.promote(dtype, weak_default(v, "int"))  # type: ignore[arg-type]
                    if not _fits(v, dtype):  # e.g. -1 next to uint64
                        dtype = "int64"
        if dtype is not None:
            out[name] = WrittenType(dtype, origin)
    return out


def _fits(value: int, dtype: str) -> bool:
    info = np.iinfo(np.dtype(dtype))
    return int(info.min) <= value <= int(info.max)


def _loc(module: S.Module, node: S.Node):
    return location_in_text(module.source, node.start, node.end - node.start, module.file)


class DefChecker:
    """Checks one def: its parameter list, outputs, then each statement in order."""

    def __init__(self, module: S.Module, d: S.Def, types: dict[str, WrittenType] | None = None):
        self.module, self.d = module, d
        self.types = types or {}  # untyped outputs and temporaries: their type
        self.writes: list[Write] = []  # every value written to one of them, in order
        self.tensors: dict[str, TensorInfo] = {}
        self.scalars: dict[str, str] = {}
        self.sizes: list[str] = []
        self.size_scalars: set[str] = set()
        self.value_scalars: set[str] = set()

    def error(self, cls: type, message: str, node: S.Node, hint: str):
        return cls(message, _loc(self.module, node), hint=hint)

    def probe(self) -> list[Write]:
        """Check leniently, skipping statements that fail; the values written to untyped
        outputs and temporaries."""
        try:
            self.params()
            self.outputs()
        except PolycompError:
            return []  # no statement can be checked: the strict check reports it
        first_writer: dict[str, S.Stmt] = {}
        for stmt in self.d.stmts:
            first_writer.setdefault(stmt.lhs.name, stmt)
        for k, stmt in enumerate(self.d.stmts):
            try:
                StatementChecker(self, k, stmt, first_writer).run()
            except PolycompError:
                continue
        return self.writes

    def run(self) -> CheckedDef:
        self.params()
        self.outputs()
        first_writer: dict[str, S.Stmt] = {}
        for stmt in self.d.stmts:
            first_writer.setdefault(stmt.lhs.name, stmt)
        statements = [StatementChecker(self, k, stmt, first_writer).run()
                      for k, stmt in enumerate(self.d.stmts)]
        for o in self.d.outputs:
            if not self.tensors[o.name.name].written:
                raise self.error(DefinitionOrderError, f"output '{o.name.name}' is never written",
                                 o.name, f"add a statement '{o.name.name}(...) = ...', or remove "
                                 "it from the outputs")
        sizes = tuple(self.sizes) + tuple(p.name.name for p in self.d.params
                                          if p.name.name in self.size_scalars
                                          and p.name.name not in self.sizes)
        isl_names = self.isl_names(sizes, statements)
        return CheckedDef(
            self.d.name.name, self.d, self.module.source, self.module.file, dict(self.tensors),
            tuple(p.name.name for p in self.d.params), dict(self.scalars), sizes,
            frozenset(self.sizes), frozenset(self.size_scalars), frozenset(self.value_scalars),
            tuple(o.name.name for o in self.d.outputs), tuple(statements), isl_names,
            self.interface(isl_names), self.d.gradient)

    # ------------------------------------------------------------------ declarations
    def claim(self, ident: S.Ident, what: str) -> None:
        """Checks that a newly declared name is free."""
        name = ident.name
        if name in FUNCTIONS:
            raise self.error(DuplicateNameError, f"{what} '{name}' has the name of a built-in "
                             "function", ident, "choose another name")
        if name in S.TYPE_NAMES:
            raise self.error(DuplicateNameError, f"{what} '{name}' has the name of a type",
                             ident, "choose another name")
        for table, kind in ((self.tensors, "tensor"), (self.scalars, "parameter")):
            if name in table:
                raise self.error(DuplicateNameError, f"{what} '{name}' has the same name as "
                                 f"an earlier {kind}", ident, "every name in a def must be "
                                 "unique: rename one of them")

    def params(self) -> None:
        for p in self.d.params:
            self.claim(p.name, "parameter")
            name = p.name.name
            if p.type.dims is None:
                if name in self.sizes and not E.is_integer(p.type.dtype):
                    raise self.error(DuplicateNameError, f"parameter '{name}' has the name of a "
                                     "size", p.name, "only an integer parameter may share its "
                                     "name with a size")
                self.scalars[name] = p.type.dtype
                continue
            dims = self.dims(p.type, p.name)
            self.tensors[name] = TensorInfo(name, "input", p.type.dtype, len(dims), dims, p)
        for name in self.sizes:
            if name in self.tensors:
                raise self.error(DuplicateNameError, f"size '{name}' has the name of a tensor",
                                 self.tensors[name].decl.name, "rename the size or the tensor")
            if name in self.scalars:
                if not E.is_integer(self.scalars[name]):
                    decl = next(p.name for p in self.d.params if p.name.name == name)
                    raise self.error(DuplicateNameError, f"parameter '{name}' has the name of a "
                                     "size", decl, "only an integer parameter may share "
                                     "its name with a size")
                self.size_scalars.add(name)

    def dims(self, spec: S.TypeSpec, owner: S.Ident, outputs: bool = False
             ) -> tuple[int | str, ...]:
        out: list[int | str] = []
        for d in spec.dims or ():
            if isinstance(d, S.IntLit):
                out.append(d.value)
                continue
            if outputs and d.name not in self.sizes:
                if d.name in self.scalars and E.is_integer(self.scalars[d.name]):
                    self.size_scalars.add(d.name)
                else:
                    raise self.error(UnknownNameError, f"unknown size '{d.name}' in the shape of "
                                     f"'{owner.name}'", d, "an output's sizes must be sizes of "
                                     "the inputs, integer parameters or integers")
            elif not outputs and d.name not in self.sizes:
                self.sizes.append(d.name)
            out.append(d.name)
        return tuple(out)

    def outputs(self) -> None:
        for o in self.d.outputs:
            name = o.name.name
            if name in self.tensors and self.tensors[name].role == "input":
                raise self.error(DuplicateNameError, f"output '{name}' has the name of an input",
                                 o.name, "outputs are new tensors: give it another name")
            self.claim(o.name, "output")
            if name in self.sizes:
                raise self.error(DuplicateNameError, f"output '{name}' has the name of a size",
                                 o.name, "rename the output or the size")
            dims = self.dims(o.type, o.name, outputs=True) if o.type else None
            self.tensors[name] = TensorInfo(name, "output", o.type.dtype if o.type else None,
                                            len(dims) if dims is not None else None, dims, o)

    # ------------------------------------------------------------------ results
    def isl_names(self, sizes: tuple[str, ...], statements: list[CheckedStmt]) -> dict[str, str]:
        used = set(self.tensors) | set(self.scalars) | set(sizes)
        for s in statements:
            used |= set(s.indices)
        out = {}
        for name in list(sizes) + [i for s in statements for i in s.indices]:
            if name in out:
                continue
            new = name
            if name.lower() in ISL_KEYWORDS:
                new = name + "_"
                while new in used:
                    new += "_"
                used.add(new)
            out[name] = new
        return out

    def interface(self, isl_names: dict[str, str]) -> Interface:
        inputs: list[TensorArg | ScalarArg] = []
        for p in self.d.params:
            name = p.name.name
            if name in self.tensors:
                t = self.tensors[name]
                dims = tuple(d if isinstance(d, int) else isl_names.get(d, d) for d in t.dims or ())
                inputs.append(TensorArg(name, t.dtype or "float32", dims))
            else:
                is_size = name in self.size_scalars
                inputs.append(ScalarArg(isl_names.get(name, name) if is_size else name,
                                        self.scalars[name], is_size))
        return Interface(tuple(inputs), tuple(o.name.name for o in self.d.outputs))


class StatementChecker:
    """Checks one statement: where clauses, indices, left side, types, ranges."""

    def __init__(self, owner: DefChecker, number: int, stmt: S.Stmt,
                 first_writer: dict[str, S.Stmt]):
        self.owner, self.number, self.stmt = owner, number, stmt
        self.module = owner.module
        self.scope = Scope(self.module.source, self.module.file, owner.tensors,
                           set(owner.sizes), owner.scalars, set(), first_writer)
        self.scope.size_scalars = owner.size_scalars
        self.scope.value_scalars = owner.value_scalars
        self.lets: dict[str, S.LetClause] = {}
        self.ranges: dict[str, S.RangeClause] = {}
        self.exists: list[S.ExistsClause] = []
        self.first_use: dict[str, tuple[int, int]] = {}

    def error(self, cls: type, message: str, node: S.Node, hint: str):
        return cls(message, _loc(self.module, node), hint=hint)

    def run(self) -> CheckedStmt:
        stmt = self.stmt
        self.split_where()
        subst = Substituter(self)
        rhs = subst.expr(stmt.rhs)
        exists = [subst.expr(c.access) for c in self.exists]
        bounds = {name: (subst.expr(c.lo), subst.expr(c.hi)) for name, c in self.ranges.items()}
        lhs = self.lhs_indices()
        indices = self.collect_indices(rhs, lhs)
        self.scope.indices = set(indices)
        self.check_exists_names(exists)
        reduction = [i for i in indices if i not in lhs]
        if stmt.op is None and reduction:
            raise self.error(TypeMismatchError, f"index '{reduction[0]}' appears only on the "
                             "right-hand side, so it is a reduction index, but '=' does not "
                             "reduce", stmt.lhs, "use a reduction such as '+=!', or add the "
                             "index to the left-hand side")
        tensor = self.lhs_tensor(rhs, exists)
        typer = Typer(self.scope)
        value = typer.value(rhs)
        untyped = tensor.role != "input" and tensor.dims is None
        if untyped:
            self.owner.writes.append(Write(tensor.name, value, stmt))
        inferred = self.owner.types.get(tensor.name) if untyped else None
        if inferred is not None:
            self.check_write_kind(tensor.name, value, inferred, rhs)
        dtype = tensor.dtype or (inferred.dtype if inferred else typer.strong(value, rhs).dtype)
        if stmt.op is not None and dtype == "bool":
            raise self.error(TypeMismatchError, f"the reduction '{stmt.op}=' cannot combine bool "
                             "values", stmt.lhs, "cast the values to a number first, e.g. "
                             "int32(x)")
        expr = typer.assign(value, dtype, rhs)
        target = E.Access(tensor.name, tuple(E.Iter(i) for i in lhs), dtype,
                          loc=_loc(self.module, self.lhs_node()))
        occurrences = self.occurrences(typer, expr, target, tensor, exists)
        given = self.given(typer, bounds)
        inferred = plan(indices, given, occurrences, self.first_use, self.module.source,
                        self.module.file)
        tensor.written, tensor.rank, tensor.dtype = True, len(lhs), dtype
        return CheckedStmt(self.number, stmt, self.module.source[stmt.start:stmt.end],
                           tensor.name, stmt.op, stmt.init, target, expr, tuple(indices),
                           len(lhs), given, occurrences, inferred, tuple(self.scope.strides))

    def check_write_kind(self, name: str, value: Typed, inferred: WrittenType,
                         rhs: S.Expr) -> None:
        """An inferred tensor holds bools or numbers, not both (no promotion joins them)."""
        is_bool = not value.weak and value.dtype == "bool"
        if is_bool == (inferred.dtype == "bool") or inferred.origin is self.stmt:
            return
        line = location_in_text(self.module.source, inferred.origin.start).line
        what = "a bool value" if is_bool else \
            "a number" if value.weak else f"a {value.dtype} value"
        other = "bool values" if inferred.dtype == "bool" else "numbers"
        raise self.error(TypeMismatchError, f"'{name}' is written with {what} here but with "
                         f"{other} at line {line}; its type ({inferred.dtype}) comes from all "
                         "its writes, and bool does not mix with numbers", rhs,
                         "make every write the same kind: " + CAST_HINT + ", or declare "
                         "the output with a type")

    def lhs_node(self) -> S.Node:
        stmt = self.stmt
        end = stmt.indices[-1].end + 1 if stmt.indices else stmt.lhs.end
        return S.Ident(stmt.lhs.start, min(end, stmt.op_start) if stmt.indices else end,
                       stmt.lhs.name)

    # ------------------------------------------------------------------ where clauses
    def taken(self, ident: S.Ident, what: str) -> None:
        name = ident.name
        kinds = ((self.scope.tensors, "a tensor"), (self.scope.first_writer, "a tensor"),
                 (self.scope.sizes, "a size"),
                 (self.scope.scalars, "a parameter"), (self.lets, "a where binding"),
                 (self.ranges, "a ranged index"))
        if name in BUILTINS:
            raise self.error(DuplicateNameError, f"{what} '{name}' has the name of a built-in",
                             ident, "choose another name")
        for table, kind in kinds:
            if name in table:
                raise self.error(DuplicateNameError, f"{what} '{name}' has the name of {kind}",
                                 ident, "choose another name")

    def split_where(self) -> None:
        for c in self.stmt.where:
            if isinstance(c, S.LetClause):
                self.taken(c.name, "where binding")
                if c.name.name in (i.name for i in self.stmt.indices):
                    raise self.error(DuplicateNameError, f"where binding '{c.name.name}' has the "
                                     "name of an index", c.name, "choose another name")
                self.lets[c.name.name] = c
            elif isinstance(c, S.RangeClause):
                if c.index.name in self.ranges:
                    raise self.error(DuplicateNameError, f"index '{c.index.name}' has two "
                                     "ranges", c.index, "give each index one range")
                self.taken(c.index, "ranged index")
                self.ranges[c.index.name] = c
            else:
                self.exists.append(c)

    # ------------------------------------------------------------------ indices
    def lhs_indices(self) -> list[str]:
        out: list[str] = []
        for ident in self.stmt.indices:
            name = ident.name
            for table, kind in ((self.scope.tensors, "a tensor"), (self.scope.sizes, "a size"),
                                (self.scope.scalars, "a parameter"), (self.lets, "a where binding"),
                                (self.scope.first_writer, "a tensor")):
                if name in table:
                    raise self.error(DuplicateNameError, f"index '{name}' has the name of {kind}",
                                     ident, "choose another index name")
            if name in out:
                raise self.error(DuplicateNameError, f"index '{name}' appears twice on the "
                                 "left-hand side", ident, "each left-hand side index must be "
                                 "distinct: write a diagonal as O(i) = A(i, i)")
            out.append(name)
            self.first_use.setdefault(name, (ident.start, ident.end))
        return out

    def collect_indices(self, rhs: S.Expr, lhs: list[str]) -> list[str]:
        """Left-hand side indices, then new indices of the right side in textual order."""
        sc = self.scope
        not_index = set(sc.tensors) | sc.sizes | set(sc.scalars) | set(sc.first_writer)
        seen: list[tuple[str, S.Node, bool]] = []
        stack: list[tuple[S.Expr, bool]] = [(rhs, False)]
        while stack:
            node, in_index = stack.pop()
            if isinstance(node, S.Name) and node.ident.name not in not_index:
                seen.append((node.ident.name, node, in_index))
            sub = in_index or (isinstance(node, S.Apply) and (
                node.ident.name in sc.tensors or node.ident.name in sc.first_writer))
            stack.extend((c, sub) for c in reversed(S.children(node)))
        index_like = {n for n, _, ctx in seen if ctx} | set(self.ranges) | set(lhs)
        out = list(lhs)
        for name, node, _ in seen:
            if name in index_like and name not in out:
                out.append(name)
                self.first_use.setdefault(name, (node.start, node.end))
        for name, clause in self.ranges.items():
            if name not in out:
                raise self.error(UnknownNameError, f"'{name}' has a range but is not an index of "
                                 "this statement", clause.index, "use it in the statement, or "
                                 "remove the range")
        return out

    def check_exists_names(self, exists: list[S.Expr]) -> None:
        for node in exists:
            stack = [node]
            while stack:
                n = stack.pop()
                if isinstance(n, S.Name):
                    name = n.ident.name
                    if name not in self.scope.indices and name not in self.scope.sizes \
                            and name not in self.scope.scalars and name not in self.scope.tensors:
                        raise self.error(UnknownNameError, f"'{name}' is not an index of this "
                                         "statement", n, "an exists clause only helps infer the "
                                         "ranges of indices used in the statement")
                stack.extend(S.children(n))

    # ------------------------------------------------------------------ left side
    def lhs_tensor(self, rhs: S.Expr, exists: list[S.Expr]) -> TensorInfo:
        stmt, sc = self.stmt, self.scope
        name = stmt.lhs.name
        if name in BUILTINS:
            raise self.error(DuplicateNameError, f"cannot write to '{name}': it is a built-in",
                             stmt.lhs, "choose another tensor name")
        for table, kind in ((sc.sizes, "a size"), (sc.scalars, "a scalar parameter"),
                            (self.lets, "a where binding")):
            if name in table:
                raise self.error(DuplicateNameError, f"cannot write to '{name}': it is {kind}",
                                 stmt.lhs, "write to an output or a new temporary tensor")
        if name in sc.indices:
            raise self.error(DuplicateNameError, f"tensor '{name}' has the name of an index",
                             stmt.lhs, "rename the index or the tensor")
        t = sc.tensors.get(name)
        if t is None:
            t = TensorInfo(name, "temporary", None, None, None, stmt.lhs)
            sc.tensors[name] = t
        if t.role == "input":
            raise self.error(DefinitionOrderError, f"cannot write to input '{name}'", stmt.lhs,
                             "inputs are read-only: write the result to an output or a temporary")
        if t.rank is not None and t.rank != len(stmt.indices):
            count = len(stmt.indices)
            raise self.error(RankMismatchError, f"'{name}' has rank {t.rank} but the left-hand "
                             f"side has {count} ind{'ex' if count == 1 else 'ices'}",
                             self.lhs_node(), f"write {name} with {t.rank} indices")
        reads_self = any(_mentions(e, name) for e in [rhs, *exists])
        if reads_self and stmt.init:
            raise self.error(DefinitionOrderError, f"'{name}' is read by the statement that "
                             "initialises it", stmt.lhs, f"an '{stmt.op}=!' statement first "
                             f"resets '{name}': read it in a separate statement")
        if not t.written and (reads_self or (stmt.op is not None and not stmt.init)):
            what = "reads" if reads_self else f"accumulates into ('{stmt.op}=' without '!')"
            raise self.error(DefinitionOrderError, f"this statement {what} '{name}' before any "
                             "statement writes it", stmt.lhs,
                             f"use '{stmt.op or '+'}=!' to start from the identity, or write "
                             f"'{name}' in an earlier statement")
        return t

    # ------------------------------------------------------------------ ranges
    def occurrences(self, typer: Typer, expr: E.Expr, target: E.Access, tensor: TensorInfo,
                    exists: list[S.Expr]) -> tuple[Occurrence, ...]:
        out = [_occurrence(a, "read", self.module.source) for a in E.accesses(expr)]
        if tensor.shape_known:
            out.append(_occurrence(target, "write", self.module.source))
        for node in exists:
            if not isinstance(node, (S.Apply, S.Name)) or node.ident.name not in self.scope.tensors:
                raise self.error(ParseError, "an exists clause must be a tensor access", node,
                                 "write 'exists T(i, j)' with T a tensor of known shape")
            t = self.scope.tensors[node.ident.name]
            if not t.shape_known:
                raise self.error(DefinitionOrderError, f"the shape of '{t.name}' is not known "
                                 "yet", node, "exists can use inputs, typed outputs and tensors "
                                 "written by earlier statements")
            args = node.args if isinstance(node, S.Apply) else ()
            access = E.Access(t.name, typer.access_indices(t, node, args), t.dtype or "float32",
                              loc=_loc(self.module, node))
            for a in E.accesses(access):
                out.append(_occurrence(a, "exists" if a is access else "read", self.module.source))
        return tuple(out)

    def given(self, typer: Typer, bounds: dict[str, tuple[S.Expr, S.Expr]]) -> tuple[Given, ...]:
        out = []
        for name, (lo_node, hi_node) in bounds.items():
            lo, hi = typer.bound(lo_node), typer.bound(hi_node)
            clause = self.ranges[name]
            if name in lo.names | hi.names:
                raise self.error(RangeInferenceError, f"the range of '{name}' refers to "
                                 f"'{name}' itself", clause, "bounds may use sizes, constants "
                                 "and other indices")
            out.append(Given(name, lo.expr, hi.expr, lo.names | hi.names,
                             self.module.source[clause.start:clause.end], clause.start, clause.end))
        return tuple(out)


def _mentions(node: S.Expr, name: str) -> bool:
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (S.Apply, S.Name, S.DimRef)) and n.ident.name == name \
                and not isinstance(n, S.DimRef):
            return True
        stack.extend(S.children(n))
    return False


def _occurrence(access: E.Access, kind: str, source: str) -> Occurrence:
    names, gather = [], []
    for tree in access.indices:
        nodes = list(E.walk(tree))
        is_gather = any(isinstance(n, E.Access) for n in nodes)
        gather.append(is_gather)
        names.append(frozenset() if is_gather else
                     frozenset(n.name for n in nodes if isinstance(n, E.Iter)))
    loc = access.loc
    start = end = 0
    text = format_access(access)
    if loc is not None and loc.line is not None:
        start = _offset(source, loc.line, loc.column)
        end = start + loc.length
        text = " ".join(source[start:end].split())
    return Occurrence(access.array, kind, access.indices, tuple(names), tuple(gather),
                      text, start, end)


def _offset(source: str, line: int, column: int) -> int:
    pos = 0
    for _ in range(line - 1):
        pos = source.find("\n", pos) + 1
    return pos + column - 1


class Substituter:
    """Replaces where-bound names by their (substituted) expressions, detecting cycles
    and bounding the depth and size of the result."""

    def __init__(self, checker: StatementChecker):
        self.checker = checker
        self.lets = checker.lets
        self.done: dict[str, tuple[S.Expr, int]] = {}
        self.active: list[str] = []

    def expr(self, node: S.Expr) -> S.Expr:
        return self.sub(node, 1)[0]

    def sub(self, node: S.Expr, level: int) -> tuple[S.Expr, int]:
        """(substituted node, its size in nodes); ``level`` is its depth in the result."""
        if level > MAX_DEPTH:
            raise self.checker.error(UnsupportedError, "expression too deep after substituting "
                                     "where bindings", node, "simplify the where bindings")
        if isinstance(node, (S.Name, S.Apply, S.DimRef)) and node.ident.name in self.lets:
            if not isinstance(node, S.Name):
                raise self.checker.error(UnknownNameError, f"'{node.ident.name}' is a where "
                                         "binding, not a tensor", node,
                                         f"use it as a value: {node.ident.name}")
            return self.expand(node, level)
        kids = S.children(node)
        if not kids:
            return node, 1
        new, size = [], 1
        for c in kids:
            n, s = self.sub(c, level + 1)
            new.append(n)
            size += s
        if size > MAX_LET_SIZE:
            raise self.checker.error(UnsupportedError, "where bindings expand to a too large "
                                     "expression", node, "bind fewer repeated sub-expressions")
        if all(a is b for a, b in zip(new, kids)):
            return node, size
        depth = 1 + max(n.depth for n in new)
        if isinstance(node, S.Apply):
            return S.Apply(node.start, node.end, depth, node.ident, tuple(new)), size
        if isinstance(node, S.Unary):
            return S.Unary(node.start, node.end, depth, node.op, new[0]), size
        if isinstance(node, S.Binary):
            return S.Binary(node.start, node.end, depth, node.op, new[0], new[1]), size
        return S.Ternary(node.start, node.end, depth, new[0], new[1], new[2]), size

    def expand(self, use: S.Name, level: int) -> tuple[S.Expr, int]:
        name = use.ident.name
        if name in self.active:
            cycle = " -> ".join(self.active[self.active.index(name):] + [name])
            raise self.checker.error(DefinitionOrderError, f"where bindings form a cycle: "
                                     f"{cycle}", use, "a binding may use other bindings, "
                                     "but not itself")
        if name not in self.done:
            self.active.append(name)
            self.done[name] = self.sub(self.lets[name].value, level)
            self.active.pop()
        value, size = self.done[name]
        if level + value.depth - 1 > MAX_DEPTH:
            raise self.checker.error(UnsupportedError, "expression too deep after substituting "
                                     "where bindings", use, "simplify the where bindings")
        return value, size
