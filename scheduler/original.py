"""The scheduler "none": the program's original order, as a schedule tree.

Input: a Program (its original schedule is a union map to sequential time, e.g.
``{ S0[i] -> [0, i, 0]; S1[i, k] -> [1, i, k] }``). Output: an isl.Schedule with a
sequence node wherever the time has a constant position that differs between
statements, and a one-member band for every loop dimension:

    sequence
      filter S0 -> band [i]
      filter S1 -> band [i] -> band [k]

Nothing is reordered; parallel marks may still be added by a later pass.
"""

from __future__ import annotations

import islpy as isl

from polycomp import islutil as U
from polycomp.ir import Program
from polycomp.options import Options

from .dependences import Dependences


def schedule_original(program: Program, deps: Dependences, options: Options) -> isl.Schedule:
    return tree_from_schedule_map(program.domain(), program.original_schedule)


def tree_from_schedule_map(domain: isl.UnionSet, time: isl.UnionMap) -> isl.Schedule:
    """A schedule tree equivalent to the flat schedule ``time`` (same instance order)."""
    time = time.intersect_domain(domain)
    schedule = isl.Schedule.from_domain(domain)
    if time.is_empty():
        return schedule
    mupa = isl.MultiUnionPwAff.from_union_map(time)
    n_dims = mupa.get_space().dim(isl.dim_type.out)
    return _build(schedule.get_root().child(0), domain, mupa, 0, n_dims).get_schedule()


def _statement_values(upa: isl.UnionPwAff, domain: isl.UnionSet) -> dict[str, int | None]:
    """Per statement: the constant value of this time dimension, or None for a loop."""
    out: dict[str, int | None] = {}
    for s in U.sets_of(domain):
        space = s.get_space().from_domain().add_dims(isl.dim_type.out, 1)
        pa = upa.extract_pw_aff(space).intersect_domain(s)
        lo, hi = U.pw_aff_bounds(pa)
        constant = lo.is_int() and hi.is_int() and lo.to_python() == hi.to_python()
        out[s.get_tuple_name()] = lo.to_python() if constant else None
    return out


def _build(node: isl.ScheduleNode, domain: isl.UnionSet, mupa: isl.MultiUnionPwAff, d: int,
           n_dims: int) -> isl.ScheduleNode:
    """Fill the subtree at ``node`` (a leaf) for the instances in ``domain`` from dim ``d``;
    returns the node at the same position."""
    while d < n_dims:
        upa = mupa.get_at(d).intersect_domain(domain)
        values = _statement_values(upa, domain)
        if any(v is None for v in values.values()):
            band_space = isl.Space.set_alloc(U.CTX, 0, 1).align_params(upa.get_space())
            band = isl.MultiUnionPwAff.from_union_pw_aff_list(
                band_space, isl.UnionPwAffList.from_union_pw_aff(upa))
            node = node.insert_partial_schedule(band)
            return _build(node.child(0), domain, mupa, d + 1, n_dims).parent()
        distinct = sorted(set(values.values()))
        if len(distinct) > 1:
            groups = [U.union_set(s for s in U.sets_of(domain) if values[s.get_tuple_name()] == v)
                      for v in distinct]
            filters = isl.UnionSetList.from_union_set(groups[0])
            for g in groups[1:]:
                filters = filters.add(g)
            node = node.insert_sequence(filters)
            for k, g in enumerate(groups):
                node = _build(node.child(k).child(0), g, mupa, d + 1, n_dims).parent().parent()
            return node
        d += 1
    return node
