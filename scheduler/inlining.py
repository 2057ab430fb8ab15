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

When it applies: X is a temporary (never an input or output); P is its only writer, a
plain assignment whose target indices are its iterators, each once, and whose reads
are affine; C is the only statement that reads X, through one access, injective over
C's domain (each element read once: nothing is computed twice) and covered by what P
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
    if len(writers) != 1 or len(readers) != 1:
        return None
    (p,), (c,) = writers, readers
    if p is c or p.reduction is not None or c.target.array == x:
        return None
    names = [i.name for i in p.target.indices if isinstance(i, E.Iter)]
    if len(names) != len(p.target.indices) or sorted(names) != sorted(p.iterators):
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
    times = {m.get_tuple_name(isl.dim_type.in_): m for m in U.maps_of(program.original_schedule)}
    if not _before(p.write.intersect_domain(p.domain), read, times[p.name], times[c.name]):
        return None  # C would read an element before P writes it
    if not all(_before(w.write.intersect_domain(w.domain), r.intersect_domain(p.domain),
                       times[w.name], times[p.name])
               for a, r in zip(E.accesses(p.expr), p.reads)
               for w in program.statements if w.target.array == a.array):
        return None  # an element P reads is written again after P read it
    # the element C reads, as P's iterators
    value = E.substitute(p.expr, dict(zip(names, use.indices)))
    if _dtype(value) != use.dtype:
        value = E.Cast(value, use.dtype)
    expr = E.transform(c.expr, lambda node: value if node == use else None)
    consumer = _rebuilt(c, expr)
    schedule = isl.UnionMap.empty(program.original_schedule.get_space())
    for m in U.maps_of(program.original_schedule):
        if m.get_tuple_name(isl.dim_type.in_) != p.name:
            schedule = schedule.union(m)
    return replace(program,
                   arrays=tuple(a for a in program.arrays if a.name != x),
                   statements=tuple(consumer if s is c else s
                                    for s in program.statements if s is not p),
                   original_schedule=schedule)


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
