"""Distribute a parallel band over the bands below its sequence, for deeper tileable bands.

Stage: the last step of the Pluto scheduler under ``fusion="smart"`` (scheduler/pluto.py).
Input: its schedule tree and the dependences. Output: the same tree where a band that
carries no dependence and sits on a sequence (or set) of children that each start with a
band is moved into every child and joined with that child's band:

    band [j]                        sequence
      sequence             ->         filter S5: band [j, i]
        filter S5: band [i]           filter S6: band [j, i]
        filter S6: band [i]

Smart fusion fuses statements under a common loop one level at a time and cuts the next
level when they cannot share it; the one-member band above the cut can then be neither
tiled nor interchanged with the loops below it (gramschmidt: the j loop over the i loops
of R[k][j] += Q[i][k] * A[i][j] and A[i][j] -= Q[i][k] * R[k][j], each i loop a column walk:
3.5 s at LARGE, against 0.41 s once each statement has its own (j, i) band, where the
intra-tile pass makes j the vector loop). Legal: a band that carries no dependence can be
distributed; each joined band is kept only when it is permutable (else nothing changes).
"""

from __future__ import annotations

import islpy as isl

from . import tree as T
from .legality import is_parallel_member
from .tiling import is_permutable, set_coincidence


def distribute_parallel_bands(schedule: isl.Schedule, deps: isl.UnionMap,
                              carried: isl.UnionMap | None = None) -> isl.Schedule:
    """``deps``: validity; ``carried``: what a parallel member must not carry (default
    ``deps``)."""
    carried = deps if carried is None else carried

    def go(node: isl.ScheduleNode) -> isl.ScheduleNode:
        if T.is_band(node):
            moved = _distribute(node, deps, carried)
            if moved is not None:
                node = moved
        for k in range(node.n_children()):
            node = go(node.child(k)).parent()
        return node

    return go(schedule.get_root()).get_schedule()


def _distribute(node: isl.ScheduleNode, deps: isl.UnionMap,
                carried: isl.UnionMap) -> isl.ScheduleNode | None:
    """The sequence that replaces the band at ``node``, or None."""
    kinds = (isl.schedule_node_type.sequence, isl.schedule_node_type.set)
    if node.n_children() != 1 or node.child(0).get_type() not in kinds:
        return None
    split = node.child(0)
    if not all(T.is_band(split.child(k).child(0)) for k in range(split.n_children())):
        return None
    if not all(is_parallel_member(node, m, carried) for m in range(node.band_n_member())):
        return None
    outer = node.band_get_partial_schedule()
    joined = node.delete()  # now the sequence
    for k in range(joined.n_children()):
        band = joined.child(k).child(0)
        domain = band.get_domain()
        mupa = outer.intersect_domain(domain).flat_range_product(
            band.band_get_partial_schedule())
        candidate = band.delete().insert_partial_schedule(mupa).band_set_permutable(1)
        if not is_permutable(candidate, deps):
            return None
        candidate = set_coincidence(candidate, carried)
        joined = candidate.parent().parent()
    return joined
