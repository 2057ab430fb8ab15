"""Legality: a schedule tree checked against the dependences.

A schedule is legal iff every dependence goes forward in time:
    deps ∩ { s -> t : Θ(s) >=lex Θ(t) } = ∅
and a loop marked parallel (or simd) is legal iff it carries no dependence: among the
dependences whose ends agree on every outer schedule dimension, each has distance 0 on
that loop. The pipeline runs ``check_schedule`` on every schedule it produces.
"""

from __future__ import annotations

import islpy as isl

from polycomp import islutil as U
from polycomp.errors import IllegalScheduleError

from . import tree as T
from .dependences import Dependences


def violated(schedule_map: isl.UnionMap, deps: isl.UnionMap) -> isl.UnionMap:
    """The dependences that ``schedule_map`` runs backwards or at the same time."""
    return deps.intersect(schedule_map.lex_ge_union_map(schedule_map))


def carried_by_member(node: isl.ScheduleNode, k: int, deps: isl.UnionMap) -> isl.UnionMap:
    """The dependences carried by member ``k`` of the band at ``node``: those whose ends
    agree on every outer dimension and differ on member k."""
    domain = node.get_domain()
    local = deps.intersect_domain(domain).intersect_range(domain)
    outer = node.get_prefix_schedule_union_map().flat_range_product(
        T.members_union_map(node, range(k)))
    same_outer = local.intersect(outer.apply_range(outer.reverse()))
    member = T.member_union_map(node, k)
    return same_outer.subtract(member.apply_range(member.reverse()))


def is_parallel_member(node: isl.ScheduleNode, k: int, deps: isl.UnionMap) -> bool:
    return carried_by_member(node, k, deps).is_empty()


def check_schedule(schedule: isl.Schedule, deps: Dependences) -> None:
    """Raise IllegalScheduleError naming a broken dependence or a wrongly marked loop."""
    smap = schedule.get_map().intersect_domain(schedule.get_domain())
    covered = smap.domain()
    if not deps.domain.is_subset(covered):
        missing = deps.domain.subtract(covered)
        raise IllegalScheduleError(f"the schedule does not cover every statement instance: "
                                   f"{missing.coalesce()} is not scheduled")
    for kind, relation in deps.kinds():
        broken = violated(smap, relation)
        if not broken.is_empty():
            example = U.maps_of(broken.coalesce())[0]
            raise IllegalScheduleError(
                f"the schedule breaks a {kind} dependence: {example} "
                f"(the source does not run before the sink)",
                hint="choose a transformation that keeps every dependence going forward")
    everything = deps.all()
    for node in T.nodes(schedule):
        for mark in (T.MARK_PARALLEL, T.MARK_SIMD):
            if T.is_mark(node, mark):
                band = node.child(0)
                while T.is_mark(band):
                    band = band.child(0)
                if not T.is_band(band):
                    raise IllegalScheduleError(f"mark '{mark}' is not above a band")
                carried = carried_by_member(band, 0, everything)
                if not carried.is_empty():
                    example = U.maps_of(carried.coalesce())[0]
                    raise IllegalScheduleError(
                        f"a loop marked '{mark}' carries the dependence {example}",
                        hint="only loops that carry no dependence can run in parallel")
