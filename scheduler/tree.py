"""Helpers over isl schedule trees, and the names of the marks that carry decisions.

Marks are the interface from the scheduler to codegen: the scheduler inserts a mark
above a band; codegen reads it and prints the matching pragma. Codegen never recomputes
a decision.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import islpy as isl

from polycomp import islutil as U

# A mark above a band: the band's outermost loop runs as `#pragma omp parallel for`.
MARK_PARALLEL = "omp_parallel"
# A mark above a band: the band's outermost loop is vectorised (`#pragma omp simd`).
MARK_SIMD = "omp_simd"

node_type = isl.schedule_node_type


def is_band(node: isl.ScheduleNode) -> bool:
    return node.get_type() == node_type.band


def is_mark(node: isl.ScheduleNode, name: str | None = None) -> bool:
    return (node.get_type() == node_type.mark
            and (name is None or node.mark_get_id().get_name() == name))


def member_union_map(node: isl.ScheduleNode, k: int) -> isl.UnionMap:
    """Member ``k`` of a band as a union map from statement instances to [value]."""
    upa = node.band_get_partial_schedule().get_at(k)
    return isl.UnionMap.from_union_pw_aff(upa).intersect_domain(node.get_domain())


def members_union_map(node: isl.ScheduleNode, members: range) -> isl.UnionMap:
    """Members of a band flattened into one union map (the prefix inside the band)."""
    domain = node.get_domain()
    out = isl.UnionMap.from_domain(domain)  # { S[i] -> [] } for every instance
    for k in members:
        out = out.flat_range_product(member_union_map(node, k))
    return out


def outer_schedule(node: isl.ScheduleNode, k: int) -> isl.UnionMap:
    """The schedule around member ``k`` of the band at ``node``: the prefix above the band
    and members 0..k-1, over the band's instances."""
    return node.get_prefix_schedule_union_map().intersect_domain(
        node.get_domain()).flat_range_product(members_union_map(node, range(k)))


def is_loop_member(node: isl.ScheduleNode, k: int) -> bool:
    """Member ``k`` of a band takes more than one value for some values of the loops
    around it (the prefix schedule and members 0..k-1); else isl writes no loop for it
    but computes its one value. After a wavefront a tile loop is a function of the
    wavefront loop; isl's scheduler can put j in a member below one on 788t + j."""
    domain = node.get_domain()
    outer = outer_schedule(node, k)
    member = member_union_map(node, k).intersect_domain(domain)
    same_outer = outer.apply_range(outer.reverse())
    return not same_outer.subtract(member.apply_range(member.reverse())).is_empty()


def nodes(schedule: isl.Schedule) -> Iterator[isl.ScheduleNode]:
    """Every node of the tree, parents before children."""
    return subtree(schedule.get_root())


def subtree(node: isl.ScheduleNode) -> Iterator[isl.ScheduleNode]:
    """``node`` and every node below it, parents before children."""
    yield node
    for k in range(node.n_children()):
        yield from subtree(node.child(k))


def rewrite(schedule: isl.Schedule,
            fn: Callable[[isl.ScheduleNode, bool], tuple[isl.ScheduleNode, bool]]) -> isl.Schedule:
    """Top-down rewrite. ``fn(node, flag)`` returns the node to continue from (at the same
    position, possibly a new node inserted there) and the flag passed to its children."""

    def go(node: isl.ScheduleNode, flag: bool) -> isl.ScheduleNode:
        node, child_flag = fn(node, flag)
        for k in range(node.n_children()):
            node = go(node.child(k), child_flag).parent()
        return node

    return go(schedule.get_root(), False).get_schedule()


def dump(schedule: isl.Schedule) -> str:
    """Block-style YAML of a schedule tree (diff-friendly; reads back with isl.Schedule)."""
    printer = isl.Printer.to_str(U.CTX).set_yaml_style(isl.yaml_style.BLOCK)
    return printer.print_schedule(schedule).get_str()
