"""Helpers over isl schedule trees, and the names of the marks that carry decisions.

Marks are the interface from the scheduler to codegen: the scheduler (a target's passes,
polycomp/targets/) inserts a mark above a band; the target's code generator reads it and
prints what it means there (OpenMP: a pragma). Codegen never recomputes a decision.

The names are the target's business, not the scheduler's: ``parallel`` (the band's
outermost loop runs its iterations concurrently) and ``vector`` (it is vectorised) are
what the OpenMP target prints as ``omp parallel for`` and ``omp simd``; ``kernel``,
``block`` and ``thread`` are reserved for the GPU targets (nothing produces them yet).
Schedules written before the names were neutral say ``omp_parallel`` and ``omp_simd``:
``canonical_marks`` renames them (scheduler/custom.py applies it to a user's tree).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import islpy as isl

from polycomp import islutil as U

# A mark above a band: the band's outermost loop runs its iterations concurrently
# (OpenMP: `#pragma omp parallel for`).
MARK_PARALLEL = "parallel"
# A mark above a band: the band's outermost loop is vectorised (OpenMP: `#pragma omp simd`).
MARK_VECTOR = "vector"
# Reserved for the GPU targets: a subtree that runs as one device kernel, and the band
# members mapped to its blocks and threads.
MARK_KERNEL = "kernel"
MARK_BLOCK = "block"
MARK_THREAD = "thread"

# marks that belong to one band member's loop (codegen/ast.py renames them name@depth)
LOOP_MARKS = (MARK_PARALLEL, MARK_VECTOR)
# every mark that states a decision some target prints; a target refuses those of them
# it does not print (polycomp/targets/base.py Target.marks)
DECISION_MARKS = (MARK_PARALLEL, MARK_VECTOR, MARK_KERNEL, MARK_BLOCK, MARK_THREAD)
# the names these marks had when OpenMP was the only target: still read, never written
MARK_ALIASES = {"omp_parallel": MARK_PARALLEL, "omp_simd": MARK_VECTOR}

node_type = isl.schedule_node_type


def is_band(node: isl.ScheduleNode) -> bool:
    return node.get_type() == node_type.band


def is_mark(node: isl.ScheduleNode, name: str | None = None) -> bool:
    return (node.get_type() == node_type.mark
            and (name is None or node.mark_get_id().get_name() == name))


def mark_user(mark: isl.Id) -> object:
    """A mark id's user value (a pass's annotation), None for ids read from text."""
    try:
        return mark.get_user()
    except TypeError:  # ids read from text carry no user value
        return None


def below_marks(node: isl.ScheduleNode) -> isl.ScheduleNode:
    """The first node at or below ``node`` that is no mark (marks have one child)."""
    while is_mark(node):
        node = node.child(0)
    return node


def ancestor(node: isl.ScheduleNode, generations: int) -> isl.ScheduleNode:
    """The node ``generations`` levels above ``node``."""
    for _ in range(generations):
        node = node.parent()
    return node


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


def outer_schedule_mupa(node: isl.ScheduleNode, k: int) -> isl.MultiUnionPwAff:
    """``outer_schedule`` as a multi union piecewise affine function (what isl's eq_at
    takes): the prefix above the band, then members 0..k-1."""
    out = node.get_prefix_schedule_multi_union_pw_aff()
    partial = node.band_get_partial_schedule()
    for j in range(k):
        out = out.flat_range_product(isl.MultiUnionPwAff.from_union_pw_aff(partial.get_at(j)))
    return out


def is_loop_member(node: isl.ScheduleNode, k: int) -> bool:
    """Member ``k`` of a band takes more than one value for some values of the loops
    around it (the prefix schedule and members 0..k-1); else isl writes no loop for it
    but computes its one value. After a wavefront a tile loop is a function of the
    wavefront loop; isl's scheduler can put j in a member below one on 788t + j."""
    # { outer values -> member values } is a function exactly when no two instances
    # share the outer values and differ in the member; it is computed without the
    # relation between pairs of instances, which doubles the dimensions isl works in
    outer = outer_schedule(node, k)
    member = member_union_map(node, k)
    return not outer.reverse().apply_range(member).is_single_valued()


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


def canonical_marks(schedule: isl.Schedule) -> isl.Schedule:
    """The tree with every mark named by an old alias (``MARK_ALIASES``) renamed to its
    neutral name, its user value kept; the same tree when there is none."""

    def go(node: isl.ScheduleNode) -> isl.ScheduleNode:
        if is_mark(node) and node.mark_get_id().get_name() in MARK_ALIASES:
            mark = node.mark_get_id()
            user = mark_user(mark)
            renamed = MARK_ALIASES[mark.get_name()]
            node = node.delete().insert_mark(isl.Id(renamed) if user is None
                                             else isl.Id(renamed, user=user))
        for k in range(node.n_children()):
            node = go(node.child(k)).parent()
        return node

    if not any(is_mark(n) and n.mark_get_id().get_name() in MARK_ALIASES for n in nodes(schedule)):
        return schedule
    return go(schedule.get_root()).get_schedule()


def dump(schedule: isl.Schedule) -> str:
    """Block-style YAML of a schedule tree (diff-friendly; reads back with isl.Schedule)."""
    printer = isl.Printer.to_str(U.CTX).set_yaml_style(isl.yaml_style.BLOCK)
    return printer.print_schedule(schedule).get_str()


# a mark as ``to_portable`` records it: the child positions from the root to it, its
# name and its id's user value (None for none)
PortableMark = tuple[tuple[int, ...], str, object]


def to_portable(schedule: isl.Schedule) -> tuple[str, tuple[PortableMark, ...]]:
    """The tree as isl text that isl reads back, and its marks, so that ``from_portable``
    gives the same tree with the same mark ids in another process. isl text keeps a
    mark's name but not the Python value its id carries (lanes, reductions, a band's
    intra-tile settings), and isl prints a mark above a leaf in a form its own reader
    refuses ("expecting child"): those marks are left out of the text."""
    marks: list[PortableMark] = []
    above_leaves: list[tuple[int, ...]] = []

    def visit(node: isl.ScheduleNode, path: tuple[int, ...]) -> None:
        if is_mark(node):
            mark = node.mark_get_id()
            user = mark_user(mark)
            marks.append((path, mark.get_name(), user))
            if below_marks(node).get_type() == node_type.leaf:  # marks, then a leaf
                above_leaves.append(path)
        for k in range(node.n_children()):
            visit(node.child(k), (*path, k))

    visit(schedule.get_root(), ())
    # deepest first: a deleted mark moves only the marks and the leaf below it
    for path in reversed(above_leaves):
        schedule = _at(schedule, path).delete().get_schedule()
    return schedule.to_str(), tuple(marks)


def from_portable(text: str, marks: tuple[PortableMark, ...]) -> isl.Schedule:
    """The tree ``to_portable`` described (its text and its marks)."""
    schedule = isl.Schedule(text)
    for path, name, user in marks:  # parents first: each insertion keeps later paths
        node = _at(schedule, path)
        if is_mark(node):
            if node.mark_get_id().get_name() != name:
                raise ValueError(f"a portable tree has mark {node.mark_get_id().get_name()!r} "
                                 f"where its marks say {name!r}")
            node = node.delete()
        elif node.get_type() != node_type.leaf:
            raise ValueError(f"a portable tree has no mark {name!r} at {path}")
        node = node.insert_mark(isl.Id(name) if user is None else isl.Id(name, user=user))
        schedule = node.get_schedule()
    return schedule


def _at(schedule: isl.Schedule, path: tuple[int, ...]) -> isl.ScheduleNode:
    node = schedule.get_root()
    for k in path:
        node = node.child(k)
    return node
