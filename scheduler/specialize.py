"""Specialise a schedule tree found for a parametric program to fixed sizes.

A scheduler may work on the program before its sizes were substituted (``Program.generic``)
and hand the result to the passes, which run on the specialised program. This module
rebuilds such a tree node by node over the specialised domain: every band's partial
schedule, every filter, with the sizes put in and the parameters dropped; permutable and
coincident flags and marks are kept. The structure of the tree does not change.

Why schedule the parametric program at all: isl's scheduler, given constant loop bounds,
picks hyperplanes whose coefficients grow with the bounds (ludcmp at SMALL:
14042i + 117j; adi at MEDIUM: 788t + j), which serialise the whole nest and run hundreds of
times slower than the original order. On the parametric program it cannot, and it finds
the schedule PPCG would (for adi also in 0.1 s instead of 18 s at SMALL).
"""

from __future__ import annotations

from collections.abc import Mapping

import islpy as isl

from polycomp import islutil as U

from .tree import node_type


def specialize_schedule(schedule: isl.Schedule, sizes: Mapping[str, int],
                        domain: isl.UnionSet) -> isl.Schedule:
    """``schedule`` (over a parametric domain) with ``sizes`` substituted, over ``domain``
    (the same statements, specialised)."""
    root = schedule.get_root()
    if root.get_type() != node_type.domain:
        raise ValueError(f"cannot specialise a schedule whose root is {root.get_type()}")
    target = isl.Schedule.from_domain(domain).get_root().child(0)
    return _copy(root.child(0), target, dict(sizes)).get_schedule()


def _copy(src: isl.ScheduleNode, dst: isl.ScheduleNode,
          sizes: dict[str, int]) -> isl.ScheduleNode:
    """Insert a specialised copy of the subtree at ``src`` at the leaf ``dst``; return the
    node at ``dst``'s position."""
    kind = src.get_type()
    if kind == node_type.leaf:
        return dst
    if kind == node_type.band:
        partial = U.specialize(isl.UnionMap.from_multi_union_pw_aff(
            src.band_get_partial_schedule()), sizes)
        dst = dst.insert_partial_schedule(isl.MultiUnionPwAff.from_union_map(partial))
        dst = dst.band_set_permutable(src.band_get_permutable())
        for k in range(src.band_n_member()):
            dst = dst.band_member_set_coincident(k, src.band_member_get_coincident(k))
        return _copy(src.child(0), dst.child(0), sizes).parent()
    if kind in (node_type.sequence, node_type.set):
        filters = isl.UnionSetList.alloc(U.CTX, src.n_children())
        for i in range(src.n_children()):
            filters = filters.add(U.specialize(src.child(i).filter_get_filter(), sizes))
        dst = (dst.insert_sequence(filters) if kind == node_type.sequence
               else dst.insert_set(filters))
        for i in range(src.n_children()):
            # each child of a sequence is a filter node; copy below it
            dst = _copy(src.child(i).child(0), dst.child(i).child(0), sizes).parent().parent()
        return dst
    if kind == node_type.filter:
        dst = dst.insert_filter(U.specialize(src.filter_get_filter(), sizes))
        return _copy(src.child(0), dst.child(0), sizes).parent()
    if kind == node_type.mark:
        dst = dst.insert_mark(src.mark_get_id())
        return _copy(src.child(0), dst.child(0), sizes).parent()
    raise ValueError(f"cannot specialise a schedule tree with a {kind} node")
