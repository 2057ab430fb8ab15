"""Reductions as reductions: Dependences -> Dependences, between the dependence analysis
and the schedulers.

The accumulation chain of a reduction statement (``C(m, n) +=! A(m, k) * B(k, n)``:
S1[m, n, k] -> S1[m, n, k + 1] through C(m, n)) is, to the exact analysis, an ordinary
flow, anti and output dependence. Kept as such it fixes the order of the reduction
loops: conv's chain over (c, kh, kw) has distance (1, -2, -2) when kw wraps, and Pluto
and isl skew the reduction loops to carry it. For ``+ * max min`` the order does not
change the result (up to floating-point rounding), so Tensor Comprehensions and TVM
reorder them freely; so does polycomp, by default:

* the chains (dependences between instances of one relaxable reduction statement that
  update the same element) leave the validity relations and become
  ``Dependences.reduction``;
* every other dependence that ends at (or starts from) an instance of such a
  statement is extended to all instances updating the same element: the initialisation
  must precede the whole reduction, and a consumer must follow all of it, not only its
  first or last instance (as Polly's reduction modelling does). With ``E`` the relation
  "same statement, same element" plus the identity: ``D' = E . D . E``;
* schedulers and tiling then see validity = the extended relations, so reduction loops
  permute, tile and interchange; parallel and SIMD marks are checked against validity
  plus the chains (``Dependences.carried``), so no loop that carries a reduction runs
  in parallel unless the code generator emits the reduction for it.

A reduction statement is relaxable when its value does not read its own target array
(other than the accumulation itself: reading other elements of a partly reduced array
would see a different mix of partial sums), and, under ``Options.exact_fp``, when its
type is an integer (integer + * max min give the same bits in any order, with the
two's-complement wrap-around the hardware gives; float reductions then keep their
order). The extension must keep every dependence forward in the original order (it
does for TC's statements, each a whole loop nest); when it does not, nothing is relaxed.

After scheduling, ``annotate_simd_reductions`` records on each vector mark which statements
reduce along its loop (the code generator accumulates exactly those per lane), and drops
a vector mark whose accumulated values another statement touches in the same iteration.
"""

from __future__ import annotations

from dataclasses import replace

import islpy as isl

from polycomp import expr as E
from polycomp import islutil as U
from polycomp.ir import Program, Statement

from . import tree as T
from .dependences import Dependences
from .legality import carried_by_member, violated

RELAXABLE = ("+", "*", "max", "min")


def relaxable(program: Program, exact_fp: bool = False) -> list[Statement]:
    """The reduction statements whose accumulation order may change."""
    out = []
    for s in program.statements:
        if s.reduction not in RELAXABLE:
            continue
        if exact_fp and E.is_float(s.target.dtype):
            continue
        if any(a.array == s.target.array for a in E.accesses(s.expr)):
            continue
        out.append(s)
    return out


def same_element(statements: list[Statement]) -> isl.UnionMap:
    """{ R[a] -> R[b] : R writes the same element at a and b } for each statement."""
    out = []
    for s in statements:
        write = s.write.intersect_domain(s.domain)
        out.append(write.apply_range(write.reverse()))
    return U.union_map(out)


def relax_reductions(program: Program, deps: Dependences, exact_fp: bool = False
                     ) -> Dependences:
    """``deps`` with the accumulation chains of the relaxable reductions moved to
    ``reduction`` and every other dependence on them extended (see the module doc)."""
    statements = relaxable(program, exact_fp)
    if not statements:
        return deps
    same = same_element(statements)
    star = same.union(deps.domain.identity())
    chains = deps.all().intersect(same)
    if chains.is_empty():
        return deps

    def extend(relation: isl.UnionMap) -> isl.UnionMap:
        rest = relation.subtract(same)
        return rest.apply_domain(star).apply_range(star)

    flow, anti, output = extend(deps.flow), extend(deps.anti), extend(deps.output)
    original = program.original_schedule.intersect_params(program.context)
    for relation in (flow, anti, output):
        if not violated(original, relation).is_empty():
            return deps  # a statement between the updates of one element: keep the order
    return replace(deps, flow=flow, anti=anti, output=output, reduction=chains,
                   reduction_elements=same)


def annotate_simd_reductions(schedule: isl.Schedule, deps: Dependences) -> isl.Schedule:
    """Every vector mark's id with ``user = (lanes, names)``: the statements whose
    reduction chains its loop carries, i.e. the reductions along it (checked by
    legality.vector_reduction_ok); the code generator accumulates those, and only those,
    in lane-private locals."""
    if deps.reduction is None:
        return schedule

    def go(node: isl.ScheduleNode) -> isl.ScheduleNode:
        if T.is_mark(node, T.MARK_VECTOR):
            band = node.child(0)
            while T.is_mark(band):
                band = band.child(0)
            if T.is_band(band):
                carried = carried_by_member(band, 0, deps.reduction)
                names = frozenset(m.get_tuple_name(isl.dim_type.in_)
                                  for m in U.maps_of(carried))
                if names and _touched_by_others(band, names, deps):
                    # another statement in the same iteration reads or writes what is
                    # accumulated (an initialisation fused into a one-iteration loop):
                    # no lane-private copy then, and so no simd loop
                    node = node.delete()
                    for k in range(node.n_children()):
                        node = go(node.child(k)).parent()
                    return node
                mark = node.mark_get_id()
                try:
                    lanes = mark.get_user()
                except TypeError:  # ids read from text carry no user value
                    lanes = None
                if isinstance(lanes, tuple):
                    lanes = lanes[0]
                node = node.delete().insert_mark(isl.Id(mark.get_name(), user=(lanes, names)))
        for k in range(node.n_children()):
            node = go(node.child(k)).parent()
        return node

    return go(schedule.get_root()).get_schedule()


def _touched_by_others(band: isl.ScheduleNode, names: frozenset[str], deps: Dependences) -> bool:
    """A dependence between a statement of ``names`` and another statement below the band
    whose ends run in the same iteration of the loops around the band's first member."""
    domain = band.get_domain()
    inside = isl.UnionSet.empty(domain.get_space())
    others = isl.UnionSet.empty(domain.get_space())
    for part in U.sets_of(domain):
        if part.get_tuple_name() in names:
            inside = inside.union(isl.UnionSet.from_set(part))
        else:
            others = others.union(isl.UnionSet.from_set(part))
    if others.is_empty():
        return False
    outer = T.outer_schedule(band, 0)
    same = outer.apply_range(outer.reverse())
    relation = deps.all().union(deps.reduction) if deps.reduction is not None else deps.all()
    between = (relation.intersect_domain(inside).intersect_range(others)
               .union(relation.intersect_domain(others).intersect_range(inside)))
    return not between.intersect(same).is_empty()
