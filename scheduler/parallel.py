"""Parallelization: mark the outermost loop that carries no dependence.

Input: a schedule tree and the dependences. Output: the same tree with a
``parallel`` mark (scheduler/tree.py) above the first band member, top-down, that
carries no dependence (scheduler/legality.py decides that exactly, whatever flags the
scheduler set). A member deeper in a band is split off first so that the mark sits
directly above it. Nothing below a marked loop is marked again: OpenMP regions are
never nested. A loop whose every run has too little work for a parallel region
(Options.parallel_min_work), the outermost loop included, is left serial, and so is
everything below it: a small kernel runs serially.

    band [t]            band [t]                       (t carries the stencil's dependence)
      band [i, j]  ->     mark parallel
                            band [i, j]                 (i carries none: parallel for)
"""

from __future__ import annotations

import islpy as isl

from polycomp import islutil as U
from polycomp.ir import Program

from . import cache_model as CM
from . import tree as T
from .dependences import Dependences
from .legality import is_parallel_member

# an instance that misses the cache (its reference strides along the parallel loop)
STRIDED_WEIGHT = 16


def mark_parallel(schedule: isl.Schedule, deps: Dependences, program: Program | None = None,
                  min_work: int = 0) -> isl.Schedule:
    """The schedule with its parallel marks (see the module doc); without the ``program``,
    or with ``min_work`` 0, every dependence-free loop counts as worth a region."""
    relation = deps.carried()

    def visit(node: isl.ScheduleNode, inside: bool) -> tuple[isl.ScheduleNode, bool]:
        if inside:
            return node, True
        if T.is_mark(node, T.MARK_PARALLEL):
            return node, True
        if not T.is_band(node) or _is_marked(node):
            return node, False
        if _has_mark_below(node):
            return node, False  # the user placed a parallel loop inside: never nest regions
        for k in range(node.band_n_member()):
            if not T.is_loop_member(node, k):
                continue
            if is_parallel_member(node, k, relation):
                if program is not None and min_work and _too_little_work(
                        node, k, program, min_work):
                    return node, True  # deeper loops have even less: leave them serial
                if k > 0:
                    node = node.band_split(k).child(0)
                    node = node.insert_mark(isl.Id(T.MARK_PARALLEL)).parent()
                    return node, False  # the mark is a child now: the visit continues into it
                return node.insert_mark(isl.Id(T.MARK_PARALLEL)), True
        return node, False

    return T.rewrite(schedule, visit)


def _too_little_work(node: isl.ScheduleNode, k: int, program: Program, min_work: int) -> bool:
    """Each run of member k (one parallel region per point of the serial loops around it,
    one in all for an outermost loop) has less work than ``min_work`` statement
    instances: starting the region would cost more than the work it shares (doitgen: two
    regions of 160 instances per (r, q), half its time; trisolv's 2000-element copy). An
    instance whose reference jumps in memory along the member counts STRIDED_WEIGHT (a
    cache miss each: nussinov's column walks are worth parallel regions of ~1250).
    Counts are bounding boxes of the specialised domains; with symbolic sizes the loop
    is always marked."""
    domain = node.get_domain()
    regions = _box_volume(U.sets_of(T.outer_schedule(node, k).range()))
    work = _box_volume(U.sets_of(domain))
    if regions is None or work is None:
        return False
    strided = CM.strided(CM.band_references(node, program), k)
    return work * (STRIDED_WEIGHT if strided else 1) < min_work * regions


def _box_volume(sets: list[isl.Set]) -> int | None:
    """The summed bounding-box sizes of ``sets`` (None when a bound is not a number)."""
    total = 0
    for s in sets:
        size = 1
        for d in range(s.dim(isl.dim_type.set)):
            lo, hi = s.dim_min_val(d), s.dim_max_val(d)
            if not (lo.is_int() and hi.is_int()):
                return None
            size *= int(hi.to_python()) - int(lo.to_python()) + 1
        total += size
    return total


def _is_marked(node: isl.ScheduleNode) -> bool:
    parent = node.parent() if node.has_parent() else None
    return parent is not None and T.is_mark(parent, T.MARK_PARALLEL)


def _has_mark_below(node: isl.ScheduleNode) -> bool:
    return any(T.is_mark(n, T.MARK_PARALLEL) for n in T.subtree(node))
