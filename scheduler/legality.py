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
    """The dependences that ``schedule_map`` runs backwards or at the same time.

    Each dependence map is first carried into time, ``{ θ(s) -> θ(t) }``, and tested
    against ``{ x -> y : x >=lex y }`` on that one time space: cheap even for tiled,
    wavefronted schedules full of floor divisions. Only a dependence that fails is
    intersected with ``θ_S >=lex θ_T`` over instances, to name the broken pairs (comparing
    whole schedule maps lexicographically up front multiplies their pieces and can take
    minutes on a tiled stencil)."""
    broken = isl.UnionMap.empty(deps.get_space())
    for dep in U.maps_of(deps):
        udep = isl.UnionMap.from_map(dep)
        times = udep.apply_domain(schedule_map).apply_range(schedule_map)
        if all(t.intersect(isl.Map.lex_ge(t.get_space().domain())).is_empty()
               for t in U.maps_of(times)):
            continue
        ends = schedule_map.intersect_domain(isl.UnionSet(dep.domain()).union(
            isl.UnionSet(dep.range())))  # the two statements' schedules only
        broken = broken.union(udep.intersect(ends.lex_ge_union_map(ends)))
    return broken


def carried_by_member(node: isl.ScheduleNode, k: int, deps: isl.UnionMap) -> isl.UnionMap:
    """The dependences carried by member ``k`` of the band at ``node``: those whose ends
    agree on every outer dimension and differ on member k."""
    domain = node.get_domain()
    local = deps.intersect_domain(domain).intersect_range(domain)
    # isl's eq_at keeps the pairs whose two ends agree under a schedule, without the
    # relation between all pairs of instances (twice the dimensions) it would build here
    same_outer = local.eq_at_multi_union_pw_aff(T.outer_schedule_mupa(node, k))
    member = isl.MultiUnionPwAff.from_union_pw_aff(node.band_get_partial_schedule().get_at(k))
    return same_outer.subtract(same_outer.eq_at_multi_union_pw_aff(member))


def is_parallel_member(node: isl.ScheduleNode, k: int, deps: isl.UnionMap) -> bool:
    return carried_by_member(node, k, deps).is_empty()


def vector_reduction_ok(node: isl.ScheduleNode, k: int, deps: Dependences) -> bool:
    """May member ``k`` of the band at ``node`` be a SIMD loop? It carries no validity
    dependence, and every reduction chain it carries is a reduction *along* it: the
    instances of a statement that differ only in member k (same schedule above, in the
    band's other members and below the band) update one element, so the code generator
    can accumulate them in a private variable (``#pragma omp simd reduction``)."""
    if not carried_by_member(node, k, deps.all()).is_empty():
        return False
    if deps.reduction is None:
        return True
    carried = carried_by_member(node, k, deps.reduction)
    if carried.is_empty():
        return True
    domain = node.get_domain()
    key = node.get_prefix_schedule_union_map().intersect_domain(domain)
    for m in range(node.band_n_member()):
        if m != k:
            key = key.flat_range_product(T.member_union_map(node, m).intersect_domain(domain))
    if node.n_children() == 1:
        below = node.child(0).get_subtree_schedule_union_map().intersect_domain(domain)
        if not below.is_empty():
            key = key.flat_range_product(below)
    same_run = key.apply_range(key.reverse())
    for statement in U.sets_of(carried.domain()):
        own = isl.UnionSet.from_set(statement)
        pairs = same_run.intersect_domain(own).intersect_range(own)
        if not pairs.is_subset(deps.reduction_elements):
            return False
    return True


def scheduled_domain(schedule: isl.Schedule) -> isl.UnionSet:
    """The instances the tree schedules: those that reach a leaf through its filters, less
    any that a band on the way does not map. (``get_map().domain()`` is the same set, but
    projecting a tiled schedule's floor divisions leaves existentials that make the subset
    test against the domain take minutes.)"""
    covered = isl.UnionSet.empty(schedule.get_domain().get_space())
    for node in T.nodes(schedule):
        if node.get_type() == isl.schedule_node_type.leaf:
            covered = covered.union(node.get_domain())
    for node in T.nodes(schedule):
        if T.is_band(node) and node.band_n_member() > 0:
            mapped = node.band_get_partial_schedule_union_map().domain()
            covered = covered.subtract(node.get_domain().subtract(mapped))
    return covered


def check_schedule(schedule: isl.Schedule, deps: Dependences) -> None:
    """Raise IllegalScheduleError naming a broken dependence or a wrongly marked loop."""
    smap = schedule.get_map().intersect_domain(schedule.get_domain())
    covered = scheduled_domain(schedule)
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
    # a parallel loop must not carry a reduction's chain either; a simd loop may carry
    # reductions along it, which the code generator accumulates per lane
    everything = deps.carried()
    for node in T.nodes(schedule):
        for mark in (T.MARK_PARALLEL, T.MARK_VECTOR):
            if T.is_mark(node, mark):
                band = node.child(0)
                while T.is_mark(band):
                    band = band.child(0)
                if not T.is_band(band):
                    raise IllegalScheduleError(f"mark '{mark}' is not above a band")
                if mark == T.MARK_VECTOR and vector_reduction_ok(band, 0, deps):
                    continue
                carried = carried_by_member(band, 0, everything)
                if not carried.is_empty():
                    example = U.maps_of(carried.coalesce())[0]
                    raise IllegalScheduleError(
                        f"a loop marked '{mark}' carries the dependence {example}",
                        hint="only loops that carry no dependence can run in parallel")
