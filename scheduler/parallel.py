"""Parallelization: mark the outermost loop that carries no dependence.

Input: a schedule tree and the dependences. Output: the same tree with an
``omp_parallel`` mark (scheduler/tree.py) above the first band member, top-down, that
carries no dependence (scheduler/legality.py decides that exactly, whatever flags the
scheduler set). A member deeper in a band is split off first so that the mark sits
directly above it. Nothing below a marked loop is marked again: OpenMP regions are
never nested.

    band [t]            band [t]                       (t carries the stencil's dependence)
      band [i, j]  ->     mark omp_parallel
                            band [i, j]                 (i carries none: parallel for)
"""

from __future__ import annotations

import islpy as isl

from . import tree as T
from .dependences import Dependences
from .legality import is_parallel_member


def mark_parallel(schedule: isl.Schedule, deps: Dependences) -> isl.Schedule:
    relation = deps.all()

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
                if k > 0:
                    node = node.band_split(k).child(0)
                    node = node.insert_mark(isl.Id(T.MARK_PARALLEL)).parent()
                    return node, False  # the mark is a child now: the visit continues into it
                return node.insert_mark(isl.Id(T.MARK_PARALLEL)), True
        return node, False

    return T.rewrite(schedule, visit)


def _is_marked(node: isl.ScheduleNode) -> bool:
    parent = node.parent() if node.has_parent() else None
    return parent is not None and T.is_mark(parent, T.MARK_PARALLEL)


def _has_mark_below(node: isl.ScheduleNode) -> bool:
    return any(T.is_mark(n, T.MARK_PARALLEL) for n in T.subtree(node))
