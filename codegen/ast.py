"""Schedule tree -> isl AST.

isl's AST generator writes every loop (no hand-written bound computation). The build's
context carries what is known about the parameters, so that bounds simplify. Mark nodes
(scheduler/tree.py) survive into the AST as mark nodes for codegen/c.py to read; each
loop mark's name gets the schedule depth of the member it marks (``omp_parallel@2``), because
isl writes no loop for a member that takes one value there, and the loop then found below
the mark belongs to a deeper member, which the mark says nothing about.
"""

from __future__ import annotations

import islpy as isl

from polycomp.ir import Program
from polycomp.options import configure_isl
from polycomp.scheduler import tree as T

LOOP_MARKS = (T.MARK_PARALLEL, T.MARK_SIMD)


def build_ast(program: Program, schedule: isl.Schedule) -> isl.AstNode:
    configure_isl()
    build = isl.AstBuild.from_context(program.context)
    return build.node_from_schedule(with_mark_depths(schedule))


def with_mark_depths(schedule: isl.Schedule) -> isl.Schedule:
    """Every loop mark renamed ``name@depth``, its user value kept."""

    def go(node: isl.ScheduleNode) -> isl.ScheduleNode:
        if T.is_mark(node) and node.mark_get_id().get_name() in LOOP_MARKS:
            mark = node.mark_get_id()
            try:
                user = mark.get_user()
            except TypeError:  # ids read from text carry no user value
                user = None
            name = f"{mark.get_name()}@{node.get_schedule_depth()}"
            node = node.delete().insert_mark(isl.Id(name, user=user))
        for k in range(node.n_children()):
            node = go(node.child(k)).parent()
        return node

    return go(schedule.get_root()).get_schedule()


def loop_iterator(depth: int) -> str:
    """The name isl's AST generator gives the loop of schedule dimension ``depth``."""
    return f"c{depth}"


def expression_builder(program: Program) -> isl.AstBuild:
    """An AstBuild for printing parameter-only expressions (array extents, sizes)."""
    return isl.AstBuild.from_context(program.context)
