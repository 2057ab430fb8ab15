"""The research API: legality-checked transforms of a kernel's schedule tree.

``ScheduleEditor`` wraps an isl.Schedule and the program's dependences. Every transform
returns a new editor (schedules are values) and is checked against the dependences at
once: a transform that breaks one raises IllegalScheduleError naming it. Bands are
selected by their index in a top-down walk (0 = outermost) or by a statement name (the
outermost band that schedules that statement).

    k2 = kernel.transform(lambda s: s.tile("S1", [32, 32, 32]).parallelize("S1"))

Transforms and the relations they implement (band members φ0, φ1, ... of one band):
    tile(b, [T0, T1])     φk -> (floor(φk / Tk) ; φk mod Tk)   tile band above point band
    interchange(b, i, j)  swap φi and φj
    skew(b, i, j, f)      φi -> φi + f·φj
    shift(b, i, S, c)     φi -> φi + c on statement S only
    fuse(seq)             children bands of a sequence -> one band above the sequence
    distribute(b)         a band above a sequence -> one copy of the band per child
    unroll(b, i)          member i is fully unrolled by isl's AST generator
    parallelize(b, i)     member i gets a `parallel` mark (OpenMP: `omp parallel for`;
                          it must carry no dependence)
    vectorize(b, i)       member i gets a `vector` mark (OpenMP: `omp simd`; it must
                          carry no dependence)
"""

from __future__ import annotations

from collections.abc import Sequence

import islpy as isl

from polycomp import islutil as U
from polycomp.errors import IllegalScheduleError, OptionError

from . import tree as T
from .dependences import Dependences
from .legality import check_schedule

Selector = int | str


def _without_build_options(schedule: isl.Schedule) -> isl.Schedule:
    """The tree with no band's AST build options (isolate, separate: code shape only)."""

    def clear(node: isl.ScheduleNode) -> isl.ScheduleNode:
        if T.is_band(node) and not node.band_get_ast_build_options().is_empty():
            space = node.band_get_ast_build_options().get_space()
            node = node.band_set_ast_build_options(isl.UnionSet.empty(space))
        return node

    return schedule.map_schedule_node_bottom_up(clear)


class ScheduleEditor:
    def __init__(self, schedule: isl.Schedule, deps: Dependences):
        # a tree with omp_* marks reads as ever; the isolate options the intra-tile pass
        # gives its register tiles are hints for isl's AST generator about the tree as
        # it was, and they anchor the subtree: isl refuses to tile a band above them
        self.schedule = _without_build_options(T.canonical_marks(schedule))
        self.deps = deps

    # ------------------------------------------------------------------ finding bands
    def bands(self) -> list[isl.ScheduleNode]:
        return [n for n in T.nodes(self.schedule) if T.is_band(n)]

    def band(self, selector: Selector) -> isl.ScheduleNode:
        bands = self.bands()
        if isinstance(selector, int) and not isinstance(selector, bool):
            if not 0 <= selector < len(bands):
                raise OptionError(f"there is no band {selector}: the schedule has {len(bands)}")
            return bands[selector]
        if isinstance(selector, str):
            for node in bands:
                names = {s.get_tuple_name() for s in U.sets_of(node.get_domain())}
                if selector in names:
                    return node
            raise OptionError(f"no band schedules statement '{selector}'")
        raise OptionError(f"select a band by index or statement name, not {selector!r}")

    def _member(self, node: isl.ScheduleNode, k: int) -> int:
        if not isinstance(k, int) or not 0 <= k < node.band_n_member():
            raise OptionError(f"the band has {node.band_n_member()} member(s); there is no member {k}")
        return k

    def _done(self, node: isl.ScheduleNode) -> ScheduleEditor:
        schedule = node.get_schedule()
        check_schedule(schedule, self.deps)
        return ScheduleEditor(schedule, self.deps)

    # ------------------------------------------------------------------ transforms
    def tile(self, band: Selector, sizes: Sequence[int]) -> ScheduleEditor:
        node = self.band(band)
        sizes = list(sizes)
        if not sizes or not all(isinstance(t, int) and t >= 1 for t in sizes):
            raise OptionError(f"tile sizes must be positive integers, not {sizes!r}")
        if len(sizes) > node.band_n_member():
            raise OptionError(f"{len(sizes)} tile sizes for a band of {node.band_n_member()} members")
        if len(sizes) < node.band_n_member():
            node = node.band_split(len(sizes))
        values = isl.MultiVal.zero(node.band_get_space())
        for k, t in enumerate(sizes):
            values = values.set_at(k, t)
        return self._done(node.band_tile(values))

    def interchange(self, band: Selector, i: int, j: int) -> ScheduleEditor:
        node = self.band(band)
        order = list(range(node.band_n_member()))
        order[self._member(node, i)], order[self._member(node, j)] = j, i
        return self._done(_permute(node, order))

    def skew(self, band: Selector, i: int, j: int, factor: int = 1) -> ScheduleEditor:
        node = self.band(band)
        mupa = node.band_get_partial_schedule()
        target, source = mupa.get_at(self._member(node, i)), mupa.get_at(self._member(node, j))
        skewed = target.add(source.scale_val(isl.Val.int_from_si(U.CTX, factor)))
        return self._done(_replace_members(node, {i: skewed}))

    def shift(self, band: Selector, i: int, statement: str, amount: int) -> ScheduleEditor:
        node = self.band(band)
        upa = node.band_get_partial_schedule().get_at(self._member(node, i))
        sets = [s for s in U.sets_of(node.get_domain()) if s.get_tuple_name() == statement]
        if not sets:
            raise OptionError(f"statement '{statement}' is not scheduled by this band")
        space = sets[0].get_space()
        offset = isl.PwAff.from_aff(isl.Aff.val_on_domain(isl.LocalSpace.from_space(space),
                                                          isl.Val.int_from_si(U.CTX, amount)))
        return self._done(_replace_members(node, {i: upa.union_add(
            isl.UnionPwAff.from_pw_aff(offset))}))

    def fuse(self, band: Selector) -> ScheduleEditor:
        """Fuse the bands directly below the sequence that is the child of ``band``'s
        parent chain: select one of the sibling bands; all siblings must have as many
        members."""
        node = self.band(band)
        seq = node.parent().parent() if node.has_parent() else None
        if seq is None or seq.get_type() not in (T.node_type.sequence, T.node_type.set):
            raise OptionError("fuse needs a band that is one child of a sequence")
        parts = []
        for k in range(seq.n_children()):
            child = seq.child(k).child(0)
            if not T.is_band(child) or child.band_n_member() != node.band_n_member():
                raise OptionError("fuse needs every child of the sequence to start with a band "
                                  f"of {node.band_n_member()} member(s)")
            # each band may define its members beyond its filter: keep its own statements
            parts.append(child.band_get_partial_schedule().intersect_domain(child.get_domain()))
        for k in range(seq.n_children()):
            seq = seq.child(k).child(0).delete().parent().parent()
        fused = parts[0]
        for p in parts[1:]:
            fused = fused.union_add(p)
        return self._done(seq.insert_partial_schedule(fused))

    def distribute(self, band: Selector) -> ScheduleEditor:
        node = self.band(band)
        return self._done(node.band_sink())

    def unroll(self, band: Selector, i: int) -> ScheduleEditor:
        node = self.band(band)
        return self._done(node.band_member_set_ast_loop_type(self._member(node, i),
                                                             isl.ast_loop_type.unroll))

    def parallelize(self, band: Selector, i: int = 0) -> ScheduleEditor:
        return self._mark(band, i, T.MARK_PARALLEL)

    def vectorize(self, band: Selector, i: int = 0) -> ScheduleEditor:
        return self._mark(band, i, T.MARK_VECTOR)

    def _mark(self, band: Selector, i: int, mark: str) -> ScheduleEditor:
        node = self.band(band)
        self._member(node, i)
        if i > 0:
            node = node.band_split(i).child(0)
        if node.band_n_member() > 1 and mark == T.MARK_VECTOR:
            node = node.band_split(1)
        if node.has_parent() and T.is_mark(node.parent(), mark):
            return self  # already marked
        return self._done(node.insert_mark(isl.Id(mark)))

    def __str__(self) -> str:
        return T.dump(self.schedule)


def _permute(node: isl.ScheduleNode, order: list[int]) -> isl.ScheduleNode:
    mupa = node.band_get_partial_schedule()
    return _rebuild(node, [mupa.get_at(k) for k in order])


def _replace_members(node: isl.ScheduleNode, new: dict[int, isl.UnionPwAff]) -> isl.ScheduleNode:
    mupa = node.band_get_partial_schedule()
    return _rebuild(node, [new.get(k, mupa.get_at(k)) for k in range(node.band_n_member())])


def _rebuild(node: isl.ScheduleNode, members: list[isl.UnionPwAff]) -> isl.ScheduleNode:
    """Replace a band's members; the result is not marked permutable or coincident (the
    scheduler's flags no longer apply), so later passes re-derive what they need."""
    mupa = node.band_get_partial_schedule()
    upa_list = isl.UnionPwAffList.from_union_pw_aff(members[0])
    for m in members[1:]:
        upa_list = upa_list.add(m)
    new = isl.MultiUnionPwAff.from_union_pw_aff_list(mupa.get_space(), upa_list)
    return node.delete().insert_partial_schedule(new)


__all__ = ["ScheduleEditor", "IllegalScheduleError"]
