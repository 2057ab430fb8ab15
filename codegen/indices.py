"""Array indices with floor division, rewritten by isl where the AST is built.

Place in the pipeline: inside codegen/ast.py's at-each-domain callback (annotating each
statement's AST node) and codegen/c.py's printer (printing the annotation in place of
the index). Input: a Statement, the map from the AST's loop iterators to its instance,
and isl's AstBuild at that point. Output: an isl AstExpr per index of the statement that
divides (``floordiv``/``floormod``, as channel blocking writes them), built by isl in the
build's context.

Why: a channel-blocked read ``x[c / 16][h][w][c % 16]`` under a schedule that tiles ``c``
by 16 becomes ``floord(16 * c4 + c12, 16)`` and ``floorm(16 * c4 + c12, 16)`` when the
loop iterators are substituted into the index; gcc cannot analyse an address made of
those calls inside a vector loop and compiles the loop to scalar code (gcc 12: "data ref
analysis failed", "evolution of base is not affine"). isl knows the loop bounds where it
builds the statement (0 <= c12 <= 15) and writes the same index as ``c4`` and ``c12``;
where a division remains it writes C's ``/`` and ``%`` when the dividend is known to be
non-negative (isl's pdiv), which gcc analyses. The value is the same: isl builds the
expression of the same piecewise quasi-affine function, only simplified in the context
of the instances executed there.
"""

from __future__ import annotations

import islpy as isl

from polycomp import expr as E
from polycomp import islutil as U
from polycomp.ir import Statement

#: the name of the isl id annotating a user node with its indices' expressions
ANNOTATION = "polycomp_indices"
# what an index may be made of to be rewritten (C's truncating div and mod are left as
# they are: isl's floor would differ on negative values)
_AFFINE_OPS = ("add", "sub", "mul", "floordiv", "floormod")


def divided_indices(stmt: Statement) -> list[E.Expr]:
    """The indices of ``stmt``'s accesses (its target first, then its reads in walk
    order) that divide and are quasi-affine: the ones isl rewrites."""
    out: list[E.Expr] = []
    for access in [stmt.target, *E.accesses(stmt.expr)]:
        for index in access.indices:
            nodes = list(E.walk(index))
            if not any(isinstance(n, E.Binary) and n.op in E.INDEX_OPS for n in nodes):
                continue
            if all(isinstance(n, (E.Iter, E.Param, E.Const)) or
                   (isinstance(n, E.Binary) and n.op in _AFFINE_OPS) or
                   (isinstance(n, E.Unary) and n.op == "neg") for n in nodes):
                out.append(index)
    return out


def index_expressions(stmt: Statement, params: list[str], instance: isl.PwMultiAff,
                      build: isl.AstBuild) -> list[isl.AstExpr] | None:
    """isl's expression of each of ``divided_indices(stmt)`` in the AST's iterators
    (``instance``: loop iterators -> the statement's instance), or None when there is
    none or one is not quasi-affine after all."""
    indices = divided_indices(stmt)
    if not indices:
        return None
    space = U.set_space(instance.get_tuple_name(isl.dim_type.out), stmt.iterators, params)
    out = []
    for index in indices:
        try:
            pa = U.affine(index, space)
        except U.NotAffine:
            return None
        pa = pa.align_params(instance.get_space())
        out.append(build.expr_from_pw_aff(
            pa.pullback_pw_multi_aff(instance.align_params(pa.get_space()))))
    return out


def annotate(node: isl.AstNode, exprs: list[isl.AstExpr]) -> isl.AstNode:
    return node.set_annotation(isl.Id(ANNOTATION, user=exprs))


def annotation(node: isl.AstNode) -> list[isl.AstExpr] | None:
    """The expressions ``annotate`` put on a user node, or None."""
    try:
        note = node.get_annotation()
    except isl.Error:
        return None
    if note is None or note.get_name() != ANNOTATION:
        return None
    try:
        return note.get_user()
    except TypeError:
        return None
