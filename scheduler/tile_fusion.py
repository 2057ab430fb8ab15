"""Tile-level fusion of a contraction with its initialisation and its epilogue.

Place in the pipeline: an OpenMP pass between the parallel and the intra-tile passes
(polycomp/targets/openmp.py), on the tiled tree (the tiling pass's point-band marks are
still in it; the intra-tile pass then plans the point bands below F as anywhere else).
Input: the schedule, the program, its dependences. Output: the schedule with, where the
pattern below is found, the initialisation and the epilogue of a contraction run inside
the contraction's outer tile loops; the driver checks the result against the
dependences as any other schedule.

Why. Pluto's smart fusion cuts between statements of different depth, so a
convolution's zero-initialisation (depth 3 over the output), its reduction (depth 4,
over the input channels too) and its epilogue (bias, residual sum, relu: depth 3) run
as three loop nests one after the other, each a full pass over the output: a 1x1
convolution of ResNet-50 at 56 x 56 x 256 writes its 3.2 MB output five times over
memory (zero, load and store per tile, read by the epilogue, written by it). Run inside
the contraction's tile, the initialisation writes and the epilogue reads a tile that is
still in cache: Halide's and TVM's ``compute_at`` of a producer and a consumer at the
consumer's tile, which an experienced user expects the compiler to do by itself.

The pattern, in the first sequence below the root (outer loops that every statement
shares, as a batch loop, may lie above it): a child whose only statement C is a ``+=``
reduction into array T, whose tile band B (the last band above the point-band mark) lies
on a single path of bands and marks below the filter; the child just before it, if each
of its statements writes T and reads nothing (the initialisation); the child just after
it, if each of its statements reads T, or an array written by a statement of the same
child that is mapped already (the epilogue: an unpack of the channel-blocked T, then the
bias and activation that read the unpacked array). The fused band F is the longest
prefix of the members from the filter down to B that are a function of C's written
element (members that move with the reduction's own loops, as a tiled reduction
dimension, stay out): each element of T then belongs to one tile, and so does each
instance of the initialisation (through the element it writes) and of the epilogue
(through the element it reads, every read of T in one tile). The three children become
one:

    band F (C's members; the tile of the element for the others)         [parallel]
      sequence
        the initialisation's subtree
        C's subtree (as before)
        the epilogue's subtree

Every dependence among them links instances of one element, so of one tile, and the
sequence orders them as before within it. F gets a parallel mark at the member where C's
was, when that member carries no dependence in F (checked; otherwise the pass leaves
the tree as it was); the parallel marks inside the three subtrees go (regions never
nest).
"""

from __future__ import annotations

import islpy as isl

from polycomp import islutil as U
from polycomp.ir import Program
from polycomp.options import Options

from . import tree as T
from .dependences import Dependences
from .legality import carried_by_member
from .tiling import MARK_POINT_BAND


def fuse_into_tiles(schedule: isl.Schedule, program: Program, deps: Dependences,
                    options: Options) -> isl.Schedule:
    """The schedule with every contraction's initialisation and epilogue run inside its
    outer tile loops (module doc); the schedule as it was where the pattern is absent."""
    if not options.tile or not options.fuse_tiles:
        return schedule
    seq = _first_sequence(schedule.get_root())
    if seq is None:
        return schedule
    path = _path(seq)
    i = 0
    while i < seq.n_children():
        fused = _fuse_at(seq, i, program, deps)
        if fused is not None:
            seq = _at(fused.root(), path)
        i += 1
    return seq.get_schedule()


def _first_sequence(node: isl.ScheduleNode) -> isl.ScheduleNode | None:
    """The sequence node at the end of the root's single-child path (outer loops all the
    statements share, such as a batch loop, may lie above it)."""
    while node.n_children() == 1:
        node = node.child(0)
    return node if node.get_type() == T.node_type.sequence else None


def _path(node: isl.ScheduleNode) -> list[int]:
    out = []
    while node.has_parent():
        out.append(node.get_child_position())
        node = node.parent()
    return out[::-1]


def _at(root: isl.ScheduleNode, path: list[int]) -> isl.ScheduleNode:
    for c in path:
        root = root.child(c)
    return root


def _names(node: isl.ScheduleNode) -> list[str]:
    return [s.get_tuple_name() for s in U.sets_of(node.filter_get_filter())]


def _tile_chain(child: isl.ScheduleNode
                ) -> tuple[isl.ScheduleNode, int, int | None] | None:
    """(B, the band members from the child's filter down to B's bottom, the member at
    which a parallel mark sits or None): B is the tile band, the last band above the
    tiling pass's point-band mark on the single path below the filter (through bands
    and marks); None when the child is not tiled, or a parallel mark lies elsewhere."""
    node, members, mark_at, band = child.child(0), 0, None, None
    while not T.is_mark(node, MARK_POINT_BAND):
        if T.is_mark(node, T.MARK_PARALLEL):
            mark_at = members
        elif T.is_band(node):
            members += node.band_n_member()
            band = node
        elif not T.is_mark(node):
            return None
        if node.n_children() != 1:
            return None
        node = node.child(0)
    marks = [n for n in T.subtree(child) if T.is_mark(n, T.MARK_PARALLEL)]
    if band is None or len(marks) > (mark_at is not None):
        return None  # a parallel loop below B: F's sequence would sit inside a region
    return band, members, mark_at


def _fuse_at(seq: isl.ScheduleNode, i: int, program: Program,
             deps: Dependences) -> isl.ScheduleNode | None:
    """The tree with child i's contraction fused with its neighbours (module doc), as a
    node of the new tree; None where the pattern is absent."""
    names = _names(seq.child(i))
    if len(names) != 1:
        return None
    stmt = program.statement(names[0])
    chain = _tile_chain(seq.child(i))
    if stmt.reduction != "+" or chain is None:
        return None
    band, n, mark_at = chain
    target = stmt.write.get_tuple_name(isl.dim_type.out)
    # the members from the filter to B's bottom, without those of the loops around seq
    prefix = band.child(0).get_prefix_schedule_union_map()
    tile = _project_head(prefix, seq.get_schedule_depth())
    written = isl.UnionMap(stmt.write.intersect_domain(stmt.domain))
    k, of_element = _element_tiles(written, tile, n)
    if k == 0 or (mark_at is not None and k <= mark_at):
        return None
    init = _initialisation(seq, i, program, target, of_element)
    epilogue = _epilogue(seq, i, program, target, of_element)
    if init is None and epilogue is None:
        return None
    first = i - 1 if init is not None else i
    maps = [_project_tail(tile.intersect_domain(isl.UnionSet(stmt.domain)), n, k)]
    for part in (init, epilogue):
        if part is not None:
            maps += part
    fused = U.union_map(maps)
    group = [first + j for j in range(1 + (init is not None) + (epilogue is not None))]
    band_f = _rebuild(seq, group, fused)
    if band_f is None or mark_at is None:
        return band_f
    # F's member at the mark runs in parallel as C's loop did (the pass adds locality,
    # it must not take a parallel loop away): checked, else no fusion
    if mark_at:
        band_f = band_f.band_split(mark_at).child(0)
    if not carried_by_member(band_f, 0, deps.carried()).is_empty():
        return None
    return band_f.insert_mark(isl.Id(T.MARK_PARALLEL))


def _project_head(umap: isl.UnionMap, d: int) -> isl.UnionMap:
    """Without the first d output dimensions."""
    if d == 0:
        return umap
    return U.union_map(m.project_out(isl.dim_type.out, 0, d) for m in U.maps_of(umap))


def _project_tail(tiles: isl.UnionMap, n: int, k: int) -> isl.UnionMap:
    """The first k of n output dimensions."""
    return U.union_map(m.project_out(isl.dim_type.out, k, n - k) for m in U.maps_of(tiles))


def _element_tiles(written: isl.UnionMap, tile: isl.UnionMap,
                   n: int) -> tuple[int, isl.UnionMap]:
    """(k, element -> its tile in B's first k members): the longest prefix of B that is a
    function of the written element."""
    of_element = written.reverse().apply_range(tile)
    for k in range(n, 0, -1):
        prefix = _project_tail(of_element, n, k)
        if prefix.is_single_valued():
            return k, prefix
    return 0, of_element


def _initialisation(seq: isl.ScheduleNode, i: int, program: Program, target: str,
                    of_element: isl.UnionMap) -> list[isl.UnionMap] | None:
    """Child i-1's statements -> the tile of the element they write, when each writes
    the contraction's target and reads nothing; else None."""
    if i == 0:
        return None
    out = []
    for name in _names(seq.child(i - 1)):
        s = program.statement(name)
        if s.reads or s.reduction or s.write.get_tuple_name(isl.dim_type.out) != target:
            return None
        tile = isl.UnionMap(s.write.intersect_domain(s.domain)).apply_range(of_element)
        if not tile.is_single_valued() or not tile.domain().is_equal(isl.UnionSet(s.domain)):
            return None
        out.append(tile)
    return out or None


def _epilogue(seq: isl.ScheduleNode, i: int, program: Program, target: str,
              of_element: isl.UnionMap) -> list[isl.UnionMap] | None:
    """Child i+1's statements -> their tile, through an element they read whose tile is
    known (the contraction's target, or what a statement of the child mapped before it
    wrote); None when some statement has no such read or reads across tiles."""
    if i + 1 >= seq.n_children():
        return None
    known = {target: of_element}
    out = []
    names = _names(seq.child(i + 1))
    pending = [program.statement(n) for n in names]
    progress = True
    while pending and progress:
        progress = False
        for s in list(pending):
            tile = _tile_through_reads(s, known)
            if tile is None:
                continue
            out.append(tile)
            array = s.write.get_tuple_name(isl.dim_type.out)
            written = isl.UnionMap(s.write.intersect_domain(s.domain))
            of_written = written.reverse().apply_range(tile)
            if array not in known and of_written.is_single_valued():
                known[array] = of_written
            pending.remove(s)
            progress = True
    if pending or not any(s.reads for s in map(program.statement, names)):
        return None
    return out


def _tile_through_reads(s, known: dict[str, isl.UnionMap]) -> isl.UnionMap | None:
    """The statement's instances -> tile through its reads of known arrays: one tile per
    instance, every instance covered, and every such read in that same tile."""
    tile = None
    domain = isl.UnionSet(s.domain)
    for read in s.reads:
        array = read.get_tuple_name(isl.dim_type.out)
        if array not in known:
            continue
        through = isl.UnionMap(read.intersect_domain(s.domain)).apply_range(known[array])
        if not through.is_single_valued() or not through.domain().is_equal(domain):
            return None
        if tile is None:
            tile = through
        elif not tile.is_equal(through):
            return None
    return tile


def _rebuild(seq: isl.ScheduleNode, group: list[int], fused: isl.UnionMap
             ) -> isl.ScheduleNode | None:
    """The tree with the sequence's children ``group`` (consecutive) under one band F of
    ``fused``, returned at F; the parallel marks inside them removed."""
    n = seq.n_children()
    where = _path(seq)
    filters = [seq.child(j).filter_get_filter() for j in range(n)]
    parts: list[isl.UnionSet] = []
    before = [filters[j] for j in range(0, group[0])]
    after = [filters[j] for j in range(group[-1] + 1, n)]
    if before:
        parts.append(U.union_set(before))
    parts.append(U.union_set([filters[j] for j in group]))
    if after:
        parts.append(U.union_set(after))
    position = 1 if before else 0
    filter_list = isl.UnionSetList.alloc(U.CTX, len(parts))
    for p in parts:
        filter_list = filter_list.add(p)
    node = seq.insert_sequence(filter_list)
    # node: the new sequence; its child `position` holds the group's filtered sequence
    inner = node.child(position).child(0)
    inner = _strip_parallel_marks(inner)
    band = inner.insert_partial_schedule(isl.MultiUnionPwAff.from_union_map(fused))
    # splice the neighbours' sequences back into the outer one
    top = _at(band.root(), where)
    for j in reversed(range(top.n_children())):
        if j != position and top.child(j).child(0).get_type() == T.node_type.sequence:
            top = top.sequence_splice_child(j)
    # find F again: the band whose domain is the group's
    wanted = U.union_set([filters[j] for j in group])
    for candidate in T.subtree(top):
        if T.is_band(candidate) and candidate.get_domain().is_equal(wanted) and \
                candidate.parent().get_type() == T.node_type.filter:
            return candidate
    return None


def _strip_parallel_marks(node: isl.ScheduleNode) -> isl.ScheduleNode:
    """The subtree at node without parallel marks, returned at the same position."""
    def go(n: isl.ScheduleNode) -> isl.ScheduleNode:
        if T.is_mark(n, T.MARK_PARALLEL):
            return go(n.delete())
        for c in range(n.n_children()):
            n = go(n.child(c)).parent()
        return n
    return go(node)
