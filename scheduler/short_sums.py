"""Short sums written out: Program -> Program, before the dependences (specialised
programs), after channel blocking and panel packing (scheduler/panels.py), before
inlining (scheduler/inlining.py).

A "+" reduction over a few terms per element, from zero, whose operands all move with
the element's last index (a depthwise convolution's taps, an average pool's window), or
a "max" or "min" one from any constant (a max pool's window from -inf),

    I: X(e) = 0
    S: X(e) += f(e, r)            for the taps r of e's window, at most MAX_TERMS

becomes assignments that add the terms in S's order,

    S': X(e) = ((0 + f(e, r0)) + f(e, r1)) + ...

so that X is a value computed point-wise, which inlining then computes where it is
read: the epilogue (bias, activation) runs on the sum in registers. Before, a depthwise
3x3 convolution of MobileNetV2 zeroed X, loaded and stored each register tile of it and
read it again in the epilogue: four passes over an array of the output's size for nine
FMAs per element (0.25 ms for 144 channels at 56 x 56, onnxruntime 0.11).

Where the window's taps depend on the element (a convolution that reads its input
unpadded, its window's bounds in S's domain: frontend/onnx/ops/nn.py), the elements
are split into cells that take the same taps, one statement each: the interior with
every tap, each side and corner of the border with the taps that fall inside the
input. The interior then runs without a guard, and no padded copy is made.

A product whose operand stays in place along the element's last index (a broadcast: a
1x1 convolution's input, a matmul's A) keeps its reduction: its register tile reuses the
broadcast across a row of outputs (scheduler/register_tile.py), unless the sum is a
window's (some index adds a kept iterator and a reduced one, ``h + kh``: an NCHW
depthwise convolution, whose filter taps broadcast along a row of pixels). The sum
keeps its order and its zero, so exact_fp holds.

A max or min is written out as the reduction computed it: the same helper, the same
order, so every element is bit for bit what the loop gave; only where nothing else in
the program reads it (``_read_by_others``). Before, each output pixel of
ResNet-50's max pool ran its nine taps as one dependent chain of maxima, one pixel at a
time (0.275 ms on one core of the AVX2 machine; written out 0.111, onnxruntime 0.107).

When it applies: S is a float "+", "max" or "min" reduction whose reduced iterators
(those in no index of its target) have constant bounds spanning at most MAX_TERMS
points, of which S takes 2 or more; the elements fall into at most MAX_CELLS cells; its
expression does not read X; every read's last index uses every iterator of the target's
last index, or, in a window, the read uses none of them; I, the only other writer of X,
assigns a constant (0 for a sum) to exactly the elements S updates, all before S, and
every other reader of X runs after S; S runs apart from every other statement (all of
its instances before or after all of the other's).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import islpy as isl

from polycomp import expr as E
from polycomp import islutil as U
from polycomp.ir import Program, Statement

from .blocking import _all_before, _fresh, constant_init, zero_init

dim = isl.dim_type

# the most terms a sum is written out with (a 5 x 5 depthwise window)
MAX_TERMS = 25
# the most cells of the same taps (a 3 x 3 window padded by 1: corners, sides,
# interior). A statement each, and the passes' time grows with them: a 5 x 5 window
# padded by 2 (25 cells) took 7.3 s to compile against 3.0 s with its padded copy, for
# 84 us against 101 us at 32 channels of 56 x 56
MAX_CELLS = 9


def write_out_short_sums(program: Program) -> Program:
    """``program`` with every short sum written out (module doc)."""
    if program.params:
        return program
    for s in list(program.statements):
        written = _written_out(program, s)
        if written is not None:
            program = written
    return program


def _iterators(e: E.Expr) -> set[str]:
    return {n.name for n in E.walk(e) if isinstance(n, E.Iter)}


# how a written-out sum combines its terms: as the reduction did (codegen/c.py prints a
# max or min reduction and the max or min Call with the same helper)
COMBINE = {"+": lambda total, term, dtype: E.Binary("add", total, term, dtype),
           "max": lambda total, term, dtype: E.Call("max", (total, term), dtype),
           "min": lambda total, term, dtype: E.Call("min", (total, term), dtype)}


def _written_out(program: Program, s: Statement) -> Program | None:
    if s.reduction not in COMBINE or s.target.dtype not in ("float32", "float64"):
        return None
    kept = set().union(*(_iterators(i) for i in s.target.indices)) if s.target.indices else set()
    reduced = [n for n in s.iterators if n not in kept]
    if not reduced:
        return None
    reads = E.accesses(s.expr)
    last = _iterators(s.target.indices[-1]) if s.target.indices else set()
    if not last or any(a.array == s.target.array or not a.indices for a in reads):
        return None
    window = any(_iterators(i) & kept and _iterators(i) & set(reduced)
                 for a in reads for i in a.indices)
    for a in reads:
        if last <= _iterators(a.indices[-1]):
            continue  # moves along the lanes
        if window and not last & set().union(*(_iterators(i) for i in a.indices)):
            continue  # a window's weight, the same for every lane: broadcast
        return None
    taps = _taps(s, reduced)
    if taps is None or len(taps) < 2:
        return None
    cells = _cells(taps)
    if cells is None:
        return None
    init = zero_init(program, s) if s.reduction == "+" else constant_init(program, s)
    if init is None or not _apart(program, s, init):
        return None
    if s.reduction != "+" and _read_by_others(program, s):
        return None
    times = {m.get_tuple_name(dim.in_): m for m in U.maps_of(program.original_schedule)}
    taken = {t.name for t in program.statements} - {s.name}
    written = []
    for k, (cell, members) in enumerate(cells):
        name = s.name if len(cells) == 1 else _fresh(f"{s.name}_{k}", taken)
        total: E.Expr = init.expr
        for point in members:
            term = E.substitute(s.expr, {n: E.Const(v, E.INDEX_DTYPE)
                                         for n, v in zip(reduced, point)})
            total = COMBINE[s.reduction](total, term, s.target.dtype)
        written.append((_assignment(s, name, cell.set_tuple_name(name), total),
                        _first_time(times[s.name], s, reduced, members[0], cell, name)))
    schedule = U.union_map([t for _, t in written] + [
        m for name, m in times.items() if name not in (s.name, init.name)])
    notes = program.notes + (f"{s.name}: its sums of at most {len(taps)} terms written out"
                             + (f" in {len(cells)} cells of the same taps"
                                if len(cells) > 1 else ""),)
    statements = []
    for t in program.statements:
        if t is s:
            statements += [w for w, _ in written]
        elif t is not init:
            statements.append(t)
    return replace(program, statements=tuple(statements), original_schedule=schedule,
                   notes=notes, generic=None).validate()


def _taps(s: Statement, reduced: list[str]
          ) -> list[tuple[tuple[int, ...], isl.Set]] | None:
    """Each point r of the reduced iterators' bounds that some element takes, with the
    elements that take it (over the kept iterators), in S's order; None when the bounds
    are not constant or span more than MAX_TERMS points."""
    ranges = []
    for n in reduced:
        k = s.iterators.index(n)
        low, high = s.domain.dim_min_val(k), s.domain.dim_max_val(k)
        if not (low.is_int() and high.is_int()):
            return None
        ranges.append(range(low.to_python(), high.to_python() + 1))
    if math.prod(len(r) for r in ranges) > MAX_TERMS:
        return None
    positions = sorted((s.iterators.index(n) for n in reduced), reverse=True)
    out = []
    for point in itertools.product(*ranges):
        elements = s.domain
        for n, v in zip(reduced, point):
            elements = elements.fix_val(dim.set, s.iterators.index(n),
                                        isl.Val.int_from_si(U.CTX, v))
        for k in positions:
            elements = elements.project_out(dim.set, k, 1)
        if not elements.is_empty():
            out.append((point, elements.set_tuple_name(s.name)))
    return out


def _cells(taps: list[tuple[tuple[int, ...], isl.Set]]
           ) -> list[tuple[isl.Set, list[tuple[int, ...]]]] | None:
    """The elements split into cells that take the same taps, each cell with its taps in
    S's order; None beyond MAX_CELLS cells."""
    everything = taps[0][1]
    for _, elements in taps[1:]:
        everything = everything | elements
    cells: list[tuple[isl.Set, list[tuple[int, ...]]]] = [(everything.coalesce(), [])]
    for point, elements in taps:
        split = []
        for cell, members in cells:
            inside, outside = cell & elements, cell - elements
            if not inside.is_empty():
                split.append((inside.coalesce(), members + [point]))
            if not outside.is_empty():
                split.append((outside.coalesce(), members))
        cells = split
        if len(cells) > MAX_CELLS:
            return None
    return cells


def _assignment(s: Statement, name: str, domain: isl.Set, expr: E.Expr) -> Statement:
    """``s.target = expr`` over ``domain`` (its tuple named ``name``)."""
    space = domain.get_space()

    def access_map(access: E.Access) -> isl.Map:
        return U.access_map(space, access.array, [U.affine(i, space) for i in access.indices])

    reads = tuple(access_map(a) for a in E.accesses(expr))
    return Statement(name, domain, access_map(s.target), reads, s.target, expr, None,
                     s.location)


def _first_time(time: isl.Map, s: Statement, reduced: list[str], first: tuple[int, ...],
                cell: isl.Set, name: str) -> isl.Map:
    """The cell's elements at the time of their first term in S."""
    for n, v in zip(reduced, first):
        time = time.fix_val(dim.in_, s.iterators.index(n), isl.Val.int_from_si(U.CTX, v))
    for k in sorted((s.iterators.index(n) for n in reduced), reverse=True):
        time = time.project_out(dim.in_, k, 1)
    return time.set_tuple_name(dim.in_, name).intersect_domain(cell.set_tuple_name(name))


def _read_by_others(program: Program, s: Statement) -> bool:
    """Whether a statement other than S reads S's target (an epilogue in the group).
    A max pool read so is left a reduction: DenseNet-121's first pool, written out with
    its batch norm, scale and relu in 16 jammed copies of nine maxima each, was not
    if-converted by gcc 12 (control flow in the simd loop) and ran scalar: 1.84 ms
    against 1.34 as a reduction (one core of the AVX2 machine)."""
    name = s.target.array
    return any(r.get_tuple_name(dim.out) == name for t in program.statements if t is not s
               for r in t.reads)


def _apart(program: Program, s: Statement, init: Statement) -> bool:
    """S runs all of its instances before or after all of every other statement's (I
    goes away): no statement runs between a sum's first term and its last, so the sum
    may be taken at S's first instance."""
    time = program.original_schedule
    return all(_all_before(time, s.domain, t.domain) or _all_before(time, t.domain, s.domain)
               for t in program.statements if t is not s and t is not init)


__all__ = ["MAX_CELLS", "MAX_TERMS", "write_out_short_sums"]
