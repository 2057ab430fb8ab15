"""Strip-mining of statements that touch channel-blocked arrays: Program -> Program.

A statement that reads and writes arrays in a channel-blocked layout (n, c / L, h, w,
c % L) — a convolution's epilogue after channel blocking (blocking.py) and inlining
(inlining.py), when its output is stored blocked too (frontend/onnx/plan.py) —

    S: O(n, f / 16, h, w, f % 16) = relu(T(n, f / 16, h, w, f % 16) + b(f))

iterates f, whose consecutive values are 16 floats apart in both arrays: a vector loop
over w or f gathers and scatters. Renaming its instances by f = 16 fo + fi
(0 <= fi < 16), the same instances in the same original order,

    S': O(n, fo, h, w, fi) = relu(T(n, fo, h, w, fi) + b(16 fo + fi))

makes fi a unit-stride loop for both. The same holds for a depthwise convolution whose
input and accumulator are blocked (its reduction and the accumulator's initialisation).
Applies to a statement whose iterator i occurs in its target as ``i / L`` and ``i % L`` for one constant L, and elsewhere only
in that form or as an affine term (kept as ``L q + r``); the quotient takes i's place
among the iterators and the remainder goes innermost, the blocked arrays' order.
"""

from __future__ import annotations

from dataclasses import fields, replace

import islpy as isl

from polycomp import expr as E
from polycomp import islutil as U
from polycomp.ir import Program, Statement

dim = isl.dim_type


def strip_mine_blocked(program: Program) -> Program:
    """``program`` with every such statement strip-mined (module doc)."""
    if program.params:
        return program
    statements = list(program.statements)
    times = {m.get_tuple_name(dim.in_): m for m in U.maps_of(program.original_schedule)}
    changed = False
    for k, s in enumerate(statements):
        found = _candidate(s)
        if found is None:
            continue
        statements[k], times[s.name] = _strip_mined(s, *found, times[s.name])
        changed = True
    if not changed:
        return program
    schedule = isl.UnionMap.empty(program.original_schedule.get_space())
    for m in times.values():
        schedule = schedule.union(m)
    return replace(program, statements=tuple(statements), original_schedule=schedule)


def _split(node: E.Expr) -> tuple[str, int, str] | None:
    """(iterator, L, "div" | "mod") for ``i / L`` or ``i % L``."""
    if (isinstance(node, E.Binary) and node.op in ("floordiv", "floormod")
            and isinstance(node.lhs, E.Iter) and isinstance(node.rhs, E.Const)
            and isinstance(node.rhs.value, int) and node.rhs.value > 1):
        return node.lhs.name, node.rhs.value, "div" if node.op == "floordiv" else "mod"
    return None


def _candidate(s: Statement) -> tuple[str, int] | None:
    """(iterator, L) when the target is blocked along that iterator (module doc)."""
    accesses = [s.target, *E.accesses(s.expr)]
    if any(isinstance(n, (E.Access, E.Scalar)) for a in accesses for ix in a.indices
           for n in E.walk(ix)):
        return None  # a gather keeps its read map as it is
    splits = [p for ix in s.target.indices for n in E.walk(ix) if (p := _split(n)) is not None]
    if sorted(p[2] for p in splits) != ["div", "mod"] or len({p[:2] for p in splits}) != 1:
        return None
    name, lanes, _ = splits[0]
    for a in accesses:
        for ix in a.indices:
            for n in E.walk(ix):
                split = _split(n)
                if split is not None and split[0] == name and split[1] != lanes:
                    return None
                if (isinstance(n, E.Binary) and n.op in ("floordiv", "floormod")
                        and split is None
                        and any(isinstance(m, E.Iter) and m.name == name for m in E.walk(n))):
                    return None
    return name, lanes


def _strip_mined(s: Statement, name: str, lanes: int, time: isl.Map
                 ) -> tuple[Statement, isl.Map]:
    iters = list(s.iterators)
    quotient, remainder = _fresh(name + "o", iters), _fresh(name + "i", iters)
    new_iters = [quotient if i == name else i for i in iters] + [remainder]
    space = U.set_space(s.name, new_iters, [])
    # S'[..., q, ..., r] -> S[..., L q + r, ...], 0 <= r < L: a bijection onto S's points
    old_of_new = isl.Map("{ %s[%s] -> %s[%s] : 0 <= %s < %d }" % (
        s.name, ", ".join(new_iters), s.name,
        ", ".join(f"{lanes} * {quotient} + {remainder}" if i == name else i for i in iters),
        remainder, lanes))
    domain = s.domain.apply(old_of_new.reverse()).coalesce()
    whole = E.Binary("add", E.Binary("mul", E.Const(lanes, E.INDEX_DTYPE), E.Iter(quotient),
                                     E.INDEX_DTYPE), E.Iter(remainder), E.INDEX_DTYPE)

    def rename(node: E.Expr) -> E.Expr:
        split = _split(node)
        if split is not None and split[0] == name:
            return E.Iter(quotient if split[2] == "div" else remainder)
        if isinstance(node, E.Iter) and node.name == name:
            return whole
        if isinstance(node, E.Binary):
            return replace(node, lhs=rename(node.lhs), rhs=rename(node.rhs))
        return node

    def renamed(access: E.Access) -> E.Access:
        return replace(access, indices=tuple(rename(ix) for ix in access.indices))

    def value(node: E.Expr) -> E.Expr:
        """Accesses renamed whole (their splits before their iterators), other uses of
        the iterator replaced by L q + r."""
        if isinstance(node, E.Access):
            return renamed(node)
        if isinstance(node, E.Iter) and node.name == name:
            return whole
        changes = {}
        for f in fields(node):
            child = getattr(node, f.name)
            if isinstance(child, E.Expr):
                changes[f.name] = value(child)
            elif isinstance(child, tuple) and any(isinstance(c, E.Expr) for c in child):
                changes[f.name] = tuple(value(c) if isinstance(c, E.Expr) else c for c in child)
        return replace(node, **changes) if changes else node

    target = renamed(s.target)
    expr = value(s.expr)

    def access_map(access: E.Access) -> isl.Map:
        return U.access_map(space, access.array, [U.affine(i, space) for i in access.indices])

    reads = [access_map(a) for a in E.accesses(expr)]
    if s.reduction:
        reads.append(access_map(target))  # an update reads its target
    return (replace(s, domain=domain, write=access_map(target), reads=tuple(reads),
                    target=target, expr=expr), old_of_new.apply_range(time))


def _fresh(base: str, taken: list[str]) -> str:
    name = base
    while name in taken:
        name += "_"
    return name


__all__ = ["strip_mine_blocked"]
