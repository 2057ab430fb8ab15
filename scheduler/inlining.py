"""Inlining of point-wise temporaries: Program -> Program, before the dependences.

A temporary written element by element by one plain assignment and read by one other
statement, once per element,

    P: X(i, j) = f(A(i, j), b(j))
    C: Y(i, j) = g(X(i, j))            ->      C: Y(i, j) = g(f(A(i, j), b(j)))

is computed where it is read: X and P disappear. This is what a convolution's epilogue
needs: after channel blocking (scheduler/blocking.py) a conv + bias + ReLU group is
"unpack the blocked accumulator, add the bias, clamp", three passes over an array of
the output's size each (plus three more arrays); inlined, one pass reads the blocked
accumulator and writes the output. On a 3x3 stride-2 conv of 3 channels at 111 x 111
the passes were most of the time (Halide calls this ``compute_inline``).

When X has several writers, each writing its own elements (the cells of a sum written
out by scheduler/short_sums.py: a convolution's interior and its border), C is split
into parts by the writer of the element it reads, and each part gets its writer's
value: one statement per cell, from the sum to the output.

When it applies: X is a temporary (never an input or output); P is its only writer (or
the writer of the elements a part of C reads), a plain assignment whose target indices
are its iterators, each once (or any injective indices that C reads X through, position
by position, writing the same lanes: a channel-blocked value), and whose reads are
affine; C is the only statement that reads X, through one access, injective over C's
domain (each element read once: nothing is computed twice) and covered by what P
writes; every element P reads has its final value when P runs (every write of it
comes before), so reading it later, in C, gives the same value. The value keeps X's
type (a cast where the expression's differs). The arithmetic is the same operations
on the same values, so exact_fp holds. Specialised programs only (no size
parameters), as for channel blocking.
"""

from __future__ import annotations

from dataclasses import replace

import islpy as isl

from polycomp import expr as E
from polycomp import islutil as U
from polycomp.ir import Program, Statement

from .blocking import _fresh


def inline_pointwise(program: Program) -> Program:
    """``program`` with every inlinable temporary inlined (module doc), to a fixpoint."""
    if program.params:
        return program
    while True:
        for array in program.arrays:
            if array.role != "temporary":
                continue
            inlined = _inline(program, array.name)
            if inlined is not None:
                program = inlined
                break
        else:
            return program


def _inline(program: Program, x: str) -> Program | None:
    writers = [s for s in program.statements if s.target.array == x]
    readers = [s for s in program.statements
               if any(a.array == x for a in E.accesses(s.expr)) or
               (s.reduction and s.target.array == x)]
    if not writers or len(readers) != 1:
        return None
    (c,) = readers
    times = {m.get_tuple_name(isl.dim_type.in_): m for m in U.maps_of(program.original_schedule)}
    pieces = [(writers[0], c)] if len(writers) == 1 else _pieces(program, writers, c, x, times)
    if pieces is None:
        return None
    consumers = []
    for p, piece in pieces:
        consumer = _inlined(program, p, piece, x, times)
        if consumer is None:
            return None
        consumers.append(consumer)
    gone = {p.name for p in writers} | {c.name}
    schedule = U.union_map([m for name, m in times.items() if name not in gone] +
                           [times[piece.name] for _, piece in pieces])
    statements = []
    for s in program.statements:
        if s is c:
            statements += consumers
        elif s.name not in gone:
            statements.append(s)
    return replace(program,
                   arrays=tuple(a for a in program.arrays if a.name != x),
                   statements=tuple(statements), original_schedule=schedule)


def _pieces(program: Program, writers: list[Statement], c: Statement, x: str,
            times: dict[str, isl.Map]) -> list[tuple[Statement, Statement]] | None:
    """X written by several statements, each element by one of them (the cells of a
    written-out sum, scheduler/short_sums.py): C split by the writer of the element it
    reads, each part paired with that writer; ``times`` gets the parts' original
    times. None when writers overlap or C reads X through more than one access."""
    uses = [k for k, a in enumerate(E.accesses(c.expr)) if a.array == x]
    if len(uses) != 1 or c.reduction:
        return None
    read = c.reads[uses[0]].intersect_domain(c.domain)
    written = [w.write.intersect_domain(w.domain).range() for w in writers]
    for i, a in enumerate(written):
        if any(not (a & b).is_empty() for b in written[i + 1:]):
            return None
    taken = {s.name for s in program.statements} - {c.name}
    out, covered = [], isl.Set.empty(c.domain.get_space())
    for k, (w, elements) in enumerate(zip(writers, written)):
        domain = read.intersect_range(elements).domain()
        if domain.is_empty():
            continue
        covered = covered | domain
        name = _fresh(f"{c.name}_{k}", taken)
        piece = _renamed(c, name, domain)
        times[name] = times[c.name].intersect_domain(domain).set_tuple_name(
            isl.dim_type.in_, name)
        out.append((w, piece))
    return out if c.domain.is_subset(covered) else None


def _renamed(s: Statement, name: str, domain: isl.Set) -> Statement:
    """``s`` over a part of its domain, as a statement of its own named ``name``."""
    def named(m: isl.Map) -> isl.Map:
        return m.set_tuple_name(isl.dim_type.in_, name)
    return replace(s, name=name, domain=domain.set_tuple_name(name), write=named(s.write),
                   reads=tuple(named(r) for r in s.reads))


def _inlined(program: Program, p: Statement, c: Statement, x: str,
             times: dict[str, isl.Map]) -> Statement | None:
    """C with P's value in place of its read of X; None where the module doc's
    conditions fail for this pair."""
    if p is c or p.reduction is not None or c.target.array == x:
        return None
    names = [i.name for i in p.target.indices if isinstance(i, E.Iter)]
    plain = len(names) == len(p.target.indices) and sorted(names) == sorted(p.iterators)
    if not plain and not _same_elements(p, c):
        return None
    if any(_data_dependent(a) for a in E.accesses(p.expr)):
        return None
    uses = [a for a in E.accesses(c.expr) if a.array == x]
    if len(uses) != 1 or any(_data_dependent(a) for a in E.accesses(c.expr)):
        return None
    (use,) = uses
    read = c.reads[E.accesses(c.expr).index(use)].intersect_domain(c.domain)
    if not read.is_injective():
        return None
    if not read.range().is_subset(p.write.intersect_domain(p.domain).range()):
        return None
    if not _before(p.write.intersect_domain(p.domain), read, times[p.name], times[c.name]):
        return None  # C would read an element before P writes it
    if not all(_before(w.write.intersect_domain(w.domain), r.intersect_domain(p.domain),
                       times[w.name], times[p.name])
               for a, r in zip(E.accesses(p.expr), p.reads)
               for w in program.statements if w.target.array == a.array):
        return None  # an element P reads is written again after P read it
    # the element C reads, as P's iterators
    value = E.substitute(p.expr, dict(zip(names, use.indices)) if plain else
                         {n: E.Iter(m, E.INDEX_DTYPE) for n, m in zip(p.iterators, c.iterators)})
    if _dtype(value) != use.dtype:
        value = E.Cast(value, use.dtype)
    expr = E.transform(c.expr, lambda node: value if node == use else None)
    return _rebuilt(c, expr)


def _same_elements(p: Statement, c: Statement) -> bool:
    """P's target is no plain list of its iterators (a channel-blocked layout:
    ``X(n, c // 16, h, w, c % 16)``), but C reads X through the same index functions of
    its own iterators (equal on C's domain, which lies in P's), and P writes each
    element once: C's instance x reads what P's instance x wrote. C writes in the same
    lanes (its target's last index is X's): a C that unpacks X to another layout stays
    a pass of its own, or P's arithmetic would run along strided lanes."""
    uses = [k for k, a in enumerate(E.accesses(c.expr)) if a.array == p.target.array]
    if len(uses) != 1 or len(p.iterators) != len(c.iterators) or not c.target.indices:
        return False
    renamed = p.domain.set_tuple_name(c.name)
    if not c.domain.is_subset(renamed) or not p.write.intersect_domain(p.domain).is_injective():
        return False
    read = c.reads[uses[0]].intersect_domain(c.domain)
    if not read.is_equal(p.write.set_tuple_name(isl.dim_type.in_, c.name)
                         .intersect_domain(c.domain)):
        return False
    last = read.dim(isl.dim_type.out) - 1
    write = c.write.intersect_domain(c.domain)
    return write.project_out(isl.dim_type.out, 0, write.dim(isl.dim_type.out) - 1).is_equal(
        read.project_out(isl.dim_type.out, 0, last))


def _data_dependent(access: E.Access) -> bool:
    return any(isinstance(n, (E.Access, E.Scalar)) for ix in access.indices
               for n in E.walk(ix))


def _dtype(expr: E.Expr) -> str | None:
    return getattr(expr, "dtype", None)


def _before(write: isl.Map, read: isl.Map, write_time: isl.Map, read_time: isl.Map) -> bool:
    """Every instance of ``write`` comes before every instance of ``read`` that touches
    the same element (in the original order)."""
    pairs = write.apply_range(read.reverse())  # W[z] -> R[x]: the same element
    if pairs.is_empty():
        return True
    order = pairs.apply_domain(write_time).apply_range(read_time)
    return order.is_subset(isl.Map.lex_lt(order.get_space().domain()))


def _rebuilt(s: Statement, expr: E.Expr) -> Statement:
    """``s`` computing ``expr``, its read maps made again (one per access, in walk
    order, then the target for a reduction)."""
    space = s.domain.get_space()

    def access_map(access: E.Access) -> isl.Map:
        return U.access_map(space, access.array, [U.affine(i, space) for i in access.indices])

    reads = [access_map(a) for a in E.accesses(expr)]
    if s.reduction:
        reads.append(access_map(s.target))
    return replace(s, expr=expr, reads=tuple(reads))


__all__ = ["inline_pointwise"]
