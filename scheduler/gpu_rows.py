"""Row blocks for the GPU targets: one block per row of a fused row-wise chain (softmax,
layernorm), its threads sharing out each loop over the row, with barriers between them.

Place in the pipeline: inside the pass ``gpu_mapping`` (scheduler/gpu_mapping.py), which
asks ``plan_rows`` about each band at host level before a block reduction or the usual
mapping (``Options.gpu_block_reduction``, which turns both off). The ``rows`` mark it
writes is checked by ``check_rows`` (from gpu_mapping.check_mapping) and printed by
codegen/cuda.py.

Why: fusion puts softmax's statements under the loops over rows,

    band [b, m]                        every member mappable (rows are independent)
      sequence
        mx(b, m) = -inf                a statement of the row
        band [n]  mx max= X(b, m, n)   a reduction along the row
        band [n]  e = exp(X - mx)      a parallel loop along the row
        band [n]  s += e
        band [n]  Y = e / s

and the usual mapping gives the rows to threads: one thread walks a whole row four
times, neighbouring threads a row apart in memory (no coalescing), and a BERT shape
(128 rows) fills one block of one multiprocessor. Here the rows go to blocks and each
row's loops to the block's threads:

    kernel
      block [b]  block [m]             one row per block (strided over the grid)
        rows
          sequence                     __syncthreads() after each child (codegen)
            mx(b, m) = -inf            run by thread 0
            reduce:S1  thread [n]      partials, a tree, thread 0 combines into mx
            thread [n]  e = ...        n strided over threadIdx.x
            reduce:S3  thread [n]
            thread [n]  Y = ...

Why that is correct (what ``check_rows`` checks on any tree with a rows mark):

- the block members carry no dependence between instances of the kernel (gpu_mapping's
  check of every block mark), so rows never wait for each other;
- each child of the sequence is a statement outside any loop (thread 0 runs it) or one
  band of one member under a thread mark, with every statement of the child below it:
  the thread check (distance 0, or a block reduction's relaxed chains) covers the
  dependences inside a child;
- a dependence between two children runs from an earlier child to a later one (the
  sequence is the schedule's order, which the legality check holds to), and a barrier
  separates every child from the next: the writes before it are seen after it by the
  whole block (global and shared memory);
- every barrier is reached by every thread of the block: above the rows mark only
  block and host loops vary, and the thread loops are strided loops every thread
  enters.

The temporaries the chain reads across children (mx, e, s) stay arrays in global
memory: scheduler/contraction.py keeps a temporary whole when threads share its
iterations (a thread mark below its sequence node).

When (``plan_rows``): known sizes; every loop member of the band mappable; below it (marks
skipped) a sequence whose children are each a statement or a one-member band over one
statement group with nothing below it but statements; each such band mappable or a
relaxable block reduction (gpu_reduction.reduction_relaxes); and at least one of them
MIN_ROW long (a row shorter than a warp leaves most of a block idle: the usual mapping
then keeps threads busier).
"""

from __future__ import annotations

import islpy as isl

from polycomp.errors import IllegalScheduleError
from polycomp.ir import Program

from . import gpu_reduction as R
from . import tree as T
from .dependences import Dependences
from .tiling import band_extents

MARK_ROWS = "rows"
# a row loop shorter than this (a warp) keeps the usual mapping
MIN_ROW = 32


def _is_leaf(node: isl.ScheduleNode) -> bool:
    return T.below_marks(node).get_type() == isl.schedule_node_type.leaf


def _sequence_children(node: isl.ScheduleNode) -> list[isl.ScheduleNode] | None:
    """The children of the sequence at ``node`` (marks skipped): each filter's child."""
    node = T.below_marks(node)
    if node.get_type() != isl.schedule_node_type.sequence:
        return None
    return [node.child(k).child(0) for k in range(node.n_children())]


def plan_rows(node: isl.ScheduleNode, program: Program, deps: Dependences,
              mappable_members: list[int]) -> list[tuple[int, frozenset[str] | None]] | None:
    """For the band at ``node`` (host level), whose ``mappable_members`` are known: per
    child of the sequence below it, ``(k, None)`` for a thread loop or ``(k, names)``
    for a block reduction of ``names`` (a statement child is left out), or None when
    the band is no row-wise chain (module doc)."""
    from .gpu_mapping import mappable  # noqa: PLC0415 (gpu_mapping imports this module)

    if program.params or not node.n_children():
        return None
    loops = [k for k in range(node.band_n_member()) if T.is_loop_member(node, k)]
    if any(k not in mappable_members for k in loops):
        return None  # (a member of one value is no loop: its block mark maps nothing)
    children = _sequence_children(node.child(0))
    if children is None:
        return None
    relation = deps.carried()
    plan: list[tuple[int, frozenset[str] | None]] = []
    longest = 0
    for k, child in enumerate(children):
        inner = T.below_marks(child)
        if inner.get_type() == isl.schedule_node_type.leaf:
            continue  # a statement of the row: thread 0
        if not T.is_band(inner) or inner.band_n_member() != 1 or not inner.n_children() \
                or not _is_leaf(inner.child(0)):
            return None
        extent = band_extents(inner)[0]
        if extent is None:
            return None
        longest = max(longest, extent)
        prefix = T.outer_schedule(inner, 0)
        if mappable(inner, 0, prefix, relation):
            plan.append((k, None))
            continue
        names = R.reduction_statements(inner, 0, prefix, deps)
        if not names or not R.reduction_relaxes(inner, 0, prefix, names, deps, program):
            return None
        plan.append((k, names))
    if not plan or longest < MIN_ROW:
        return None
    return plan


def insert_rows(top: isl.ScheduleNode,
                plan: list[tuple[int, frozenset[str] | None]]) -> isl.ScheduleNode:
    """The ``rows`` mark above the sequence at ``top`` (marks skipped) and the thread
    (and reduce) marks of ``plan`` above its children's bands; returns the rows mark."""
    sequence = T.below_marks(top)
    depth = sequence.get_tree_depth()
    for k, names in plan:
        band = T.below_marks(sequence.child(k).child(0))
        band = band.insert_mark(isl.Id(T.MARK_THREAD))
        if names is not None:
            band = band.insert_mark(isl.Id(R.mark_name(names)))
        while band.get_tree_depth() > depth:
            band = band.parent()
        sequence = band
    return sequence.insert_mark(isl.Id(MARK_ROWS))


def check_rows(node: isl.ScheduleNode) -> None:
    """IllegalScheduleError unless the ``rows`` mark at ``node`` is above a sequence
    whose children are each a statement, or a thread mark (under an optional reduce
    mark) above a one-member band with only statements below (module doc)."""
    children = _sequence_children(node.child(0))
    if children is None:
        raise IllegalScheduleError(f"a '{MARK_ROWS}' mark is not above a sequence",
                                   hint="put it right above the sequence of a row's loops")
    for child in children:
        inner = child
        while T.is_mark(inner) and not T.is_mark(inner, T.MARK_THREAD):
            inner = inner.child(0)
        if inner.get_type() == isl.schedule_node_type.leaf:
            continue
        band = inner.child(0) if T.is_mark(inner, T.MARK_THREAD) else None
        if band is None or not T.is_band(band) or band.band_n_member() != 1 or \
                not band.n_children() or not _is_leaf(band.child(0)):
            raise IllegalScheduleError(
                f"a child of a '{MARK_ROWS}' sequence is neither a statement nor one "
                f"thread loop over statements",
                hint="each child of a rows sequence is a statement (thread 0 runs it) or "
                     "a 'thread' mark above a one-member band with statements below")


def under_rows(node: isl.ScheduleNode, kernel: isl.ScheduleNode) -> bool:
    """Whether a ``rows`` mark lies between ``kernel`` and ``node``."""
    stop = kernel.get_tree_depth()
    while node.has_parent() and node.get_tree_depth() > stop:
        node = node.parent()
        if T.is_mark(node, MARK_ROWS):
            return True
    return False


__all__ = ["MARK_ROWS", "plan_rows", "insert_rows", "check_rows", "under_rows"]
