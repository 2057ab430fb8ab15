"""Schedule tree -> isl AST.

isl's AST generator writes every loop (no hand-written bound computation). The build's
context carries what is known about the parameters, so that bounds simplify. Mark nodes
(scheduler/tree.py) survive into the AST as mark nodes for codegen/c.py to read.
"""

from __future__ import annotations

import islpy as isl

from polycomp.ir import Program
from polycomp.options import configure_isl


def build_ast(program: Program, schedule: isl.Schedule) -> isl.AstNode:
    configure_isl()
    build = isl.AstBuild.from_context(program.context)
    return build.node_from_schedule(schedule)


def expression_builder(program: Program) -> isl.AstBuild:
    """An AstBuild for printing parameter-only expressions (array extents, sizes)."""
    return isl.AstBuild.from_context(program.context)
