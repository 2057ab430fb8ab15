"""Register promotion: which reduction targets of a loop nest can live in local arrays.

Runs inside the OpenMP printer (codegen/openmp.py), on the isl AST, while the C is
printed. The intra-tile pass (scheduler/intratile.py) leaves conv's and matmul's tiles as

    for (c ...) for (kh ...) for (kw ...)          <- the reduction loops
      #pragma omp simd
      for (fi = 0; fi <= 15; fi++) {               <- the vector loop, constant bounds
        T[n][fo][h][w][fi] += ...; T[n][fo][h][w + 1][fi] += ...; ...   (jammed copies)
      }

where every target stays in place along the loops above the vector loop: the same 16
elements are loaded, updated and stored at every iteration of c, kh and kw. gcc does not
move those loads and stores out of the loops (it cannot tell that nothing else in the
nest touches them once the vector loop is gone), so the nest runs at the speed of its
stores. A local array per target, loaded before the nest and stored after it, is what
gcc keeps in vector registers (conv 3x3 at ResNet's shape: 3.2x faster).

``promotable`` finds such a nest at a loop and proves, with isl on the calls' iterator
expressions, that promotion keeps the meaning:

- the nest is perfect down to the vector loop (no guards, no other statements), the
  bounds of its loops do not depend on each other (so it runs at least once exactly when
  each loop's first iteration passes its test), and the vector loop's bounds are
  constants;
- every statement under the vector loop is a reduction (+ * max min) that does not reduce
  along the vector loop (those get codegen/openmp.py's simd accumulators), with no gather in
  its target;
- each target's element depends on none of the nest's loops above the vector loop, and
  on the vector loop injectively (each lane its own element);
- targets with different element maps never share an element, whatever their lanes;
- no statement of the nest reads a promoted array other than through its own target.
"""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from polycomp import expr as E
from polycomp.ir import Program, Statement
from polycomp.scheduler import tree as T

from . import verify as V
from .ast import loop_iterator

node_type = isl.ast_node_type
op = isl.ast_expr_op_type

REDUCTIONS = ("+", "*", "max", "min")
# locals per nest, in elements: 32 vector registers of 16 floats, with room for the rest
MAX_PROMOTED = 512


@dataclass(frozen=True)
class Nest:
    """A promotable nest: its loops above the vector loop (outermost first), the vector
    loop's iterator and constant bounds, the statements under it, and the number of
    distinct targets (one local each)."""

    loops: tuple[isl.AstNode, ...]
    iterator: str
    first: int
    last: int
    statements: frozenset[str]
    targets: int


def promotable(node: isl.AstNode, program: Program, statements: dict[str, Statement],
               scope: list[str], along_vector: frozenset[str]) -> Nest | None:
    """The nest headed by the loop ``node`` when its reduction targets can be promoted
    (module doc), else None. ``scope``: the iterators of the loops around ``node``;
    ``along_vector``: the statements that reduce along the vector loop."""
    loops = [node]
    body = node.for_get_body()
    while body.get_type() == node_type.for_:
        loops.append(body)
        body = body.for_get_body()
    vector = _vector_loop(body)
    if vector is None:
        return None
    iterator = vector.for_get_iterator().get_id().get_name()
    bounds = _constant_bounds(vector)
    if bounds is None:
        return None
    names = [loop.for_get_iterator().get_id().get_name() for loop in loops]
    for loop in loops:
        used = _ids(loop.for_get_init()) | _ids(loop.for_get_cond())
        if used & (set(names) - {loop.for_get_iterator().get_id().get_name()}):
            return None
    calls: list[isl.AstExpr] = []
    if not _calls(vector.for_get_body(), calls) or not calls:
        return None
    called = [statements[call.get_op_arg(0).get_id().get_name()] for call in calls]
    if any(s.reduction not in REDUCTIONS or s.name in along_vector
           or any(isinstance(n, E.Access) for ix in s.target.indices for n in E.walk(ix))
           for s in called):
        return None
    promoted = {s.target.array for s in called}
    if any(a.array in promoted for s in called for a in E.accesses(s.expr)):
        return None
    iterators = tuple(scope) + tuple(names) + (iterator,)
    elements = _element_maps(calls, called, program, iterators)
    if elements is None:
        return None
    groups = _groups(elements, len(iterators) - 1, len(scope), len(names), bounds)
    if groups is None or groups * (bounds[1] - bounds[0] + 1) > MAX_PROMOTED:
        return None
    return Nest(tuple(loops), iterator, bounds[0], bounds[1],
                frozenset(s.name for s in called), groups)


def _vector_loop(body: isl.AstNode) -> isl.AstNode | None:
    """The loop of a vector mark sitting directly on it (the nest's innermost loop)."""
    if body.get_type() != node_type.mark:
        return None
    name, _, depth = body.mark_get_id().get_name().partition("@")
    inner = body.mark_get_node()
    if (name != T.MARK_VECTOR or not depth or inner.get_type() != node_type.for_
            or inner.for_get_iterator().get_id().get_name() != loop_iterator(int(depth))):
        return None
    return inner


def _constant_bounds(loop: isl.AstNode) -> tuple[int, int] | None:
    init, cond, inc = loop.for_get_init(), loop.for_get_cond(), loop.for_get_inc()
    if (init.get_type() != isl.ast_expr_type.int or inc.get_type() != isl.ast_expr_type.int
            or inc.get_val().to_python() != 1 or cond.get_type() != isl.ast_expr_type.op
            or cond.get_op_type() not in (op.le, op.lt)
            or cond.get_op_arg(1).get_type() != isl.ast_expr_type.int):
        return None
    first = init.get_val().to_python()
    last = cond.get_op_arg(1).get_val().to_python() - (cond.get_op_type() == op.lt)
    return (first, last) if last >= first else None


def _ids(expr: isl.AstExpr) -> set[str]:
    kind = expr.get_type()
    if kind == isl.ast_expr_type.id:
        return {expr.get_id().get_name()}
    if kind != isl.ast_expr_type.op:
        return set()
    out: set[str] = set()
    for k in range(expr.get_op_n_arg()):
        out |= _ids(expr.get_op_arg(k))
    return out


def _calls(node: isl.AstNode, found: list[isl.AstExpr]) -> bool:
    """The calls of a body made of blocks and calls only (False for anything else)."""
    kind = node.get_type()
    if kind == node_type.user:
        found.append(node.user_get_expr())
        return True
    if kind == node_type.block:
        children = node.block_get_children()
        return all(_calls(children.get_at(k), found) for k in range(len(children)))
    return False


def _element_maps(calls: list[isl.AstExpr], called: list[Statement], program: Program,
                  iterators: tuple[str, ...]) -> list[tuple[str, isl.Map]] | None:
    """(array, loop values -> the element the call's statement updates) per call."""
    out = []
    for call, stmt in zip(calls, called):
        function = V.call_function(call, tuple(program.params), iterators, program.context)
        if function is None:
            return None
        write = stmt.write.align_params(function.get_space())
        function = function.align_params(write.get_space())
        out.append((stmt.target.array, write.preimage_domain_pw_multi_aff(function)))
    return out


def _groups(elements: list[tuple[str, isl.Map]], lane: int, n_outer: int, n_nest: int,
            bounds: tuple[int, int]) -> int | None:
    """The number of distinct targets, or None when a target moves along the nest's loops,
    two lanes of one target share an element, or two targets may meet."""
    nest_dims = range(n_outer, n_outer + n_nest)
    distinct: list[tuple[str, isl.Map]] = []
    for array, element in elements:
        if any(element.involves_dims(isl.dim_type.in_, k, 1) for k in nest_dims):
            return None
        if not any(a == array and element.is_equal(e) for a, e in distinct):
            distinct.append((array, element))
    for k, (array, element) in enumerate(distinct):
        for other_array, other in distinct[k:]:
            if other_array != array:
                continue
            meet = _lanes_meeting(element, other, lane, bounds)
            if element is other:  # one target: only the same lane may give its element
                meet = meet - _same_lane(meet.get_space(), lane)
            if not meet.is_empty():
                return None
    return len(distinct)


def _lanes_meeting(a: isl.Map, b: isl.Map, lane: int, bounds: tuple[int, int]) -> isl.Map:
    """Pairs of loop values, equal outside the nest and on the outer loops, whose lanes
    within ``bounds`` reach the same element through ``a`` and ``b``."""
    meet = a.apply_range(b.reverse())
    space = meet.get_space()
    local = isl.LocalSpace.from_space(space)
    for k in range(lane):
        meet = meet.add_constraint(isl.Constraint.equality_alloc(local)
                                   .set_coefficient_val(isl.dim_type.in_, k, 1)
                                   .set_coefficient_val(isl.dim_type.out, k, -1))
    for kind in (isl.dim_type.in_, isl.dim_type.out):
        meet = meet.add_constraint(isl.Constraint.inequality_alloc(local)
                                   .set_coefficient_val(kind, lane, 1)
                                   .set_constant_val(-bounds[0]))
        meet = meet.add_constraint(isl.Constraint.inequality_alloc(local)
                                   .set_coefficient_val(kind, lane, -1)
                                   .set_constant_val(bounds[1]))
    return meet


def _same_lane(space: isl.Space, lane: int) -> isl.Map:
    local = isl.LocalSpace.from_space(space)
    return isl.Map.universe(space).add_constraint(
        isl.Constraint.equality_alloc(local).set_coefficient_val(isl.dim_type.in_, lane, 1)
        .set_coefficient_val(isl.dim_type.out, lane, -1))


def runs_every_update(node: isl.AstNode, nest: Nest, program: Program,
                      statements: dict[str, Statement], scope: list[str]) -> bool:
    """Whether one run of the nest at ``node`` runs every instance of its statements that
    updates the elements it updates, for any values of the loops around it: each of its
    targets then starts the run holding what the other writers left there, as no
    instance of the nest's reductions has run on it before (the AST is checked to run
    each instance once). A reduction tiled across outer loops (a K tile) fails this."""
    params = tuple(program.params) + tuple(scope)
    try:
        runs = V.executed_instances(node, params, program.context)
    except V.Unreadable:  # an AST the reader cannot follow: not proved
        return False
    for name in nest.statements:
        stmt = statements[name]
        done = [m.range() for m in runs if m.range().get_tuple_name() == name]
        if not done:
            return False
        ran = done[0]
        for more in done[1:]:
            ran = ran.union(more)
        domain = stmt.domain.align_params(ran.get_space())
        ran = ran.align_params(domain.get_space()) & domain
        write = stmt.write.align_params(ran.get_space())
        updating = ran.apply(write).apply(write.reverse()) & domain
        if not updating.is_subset(ran):
            return False
    return True
