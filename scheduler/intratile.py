"""Intra-tile optimisation: loop order inside a tile, SIMD marks, unroll-and-jam.

Input: a schedule tree after tiling and parallelization, the Program, the Dependences and
Options. Output: the same tree where the point band of every tile (below the tiling
pass's ``point_band`` mark; its innermost part when the parallel pass split it, and only
when it is innermost: no band below it) has

1. its members reordered so that the innermost one touches memory with unit stride (or
   not at all) for most references and carries no dependence: it gets a ``vector``
   mark (Options.vectorize) in a band of its own;
2. up to two other members strip-mined by ``Options.unroll`` (unroll-and-jam): the strip
   member stays where the member was, the point member moves *inside* the SIMD loop and
   is marked for full unrolling, so isl's AST generator writes the copies one after the
   other in the body of the vector loop (jammed), sharing loads in registers;
3. or, when no member can be the vector loop because statements fused with a shift
   alternate along it (jacobi-1d, fdtd-2d under pluto), its unit-stride member distributed
   over the statements (``distribute_innermost``): one simd loop per statement, checked
   legal.

matmul's point band [i, j, k] (below the parallel tile loop), unroll 4::

    band [i, j, k]         band [floor(i/4), floor(k/4)]
      sequence S0, S1  ->    mark vector
                               band [j]
                                 band [i mod 4, k mod 4]   (ast loop type: unroll)
                                   sequence S0, S1

    for (i4..) for (k4..)
      #pragma omp simd simdlen(16)
      for (j..) { C[4i4][j] += A[4i4][4k4] * B[4k4][j]; ... 16 copies }

Legality: reordering and strip-mining the members of a permutable band is legal (it is a
tiling of that band). A band that is not permutable keeps its order; only its innermost
member may get the mark. The SIMD member must carry no dependence, checked exactly with
legality.carried_by_member on the final band: a reduction carried by the innermost loop
is never marked (another member is made innermost if one qualifies). A member directly
below a ``parallel`` mark stays first (the mark belongs to it).

Choices. Innermost: members along which no reference jumps in memory (no gathers or
scatters) first, then the highest stride score (cache_model.stride_score: unit-stride
references 1, invariant 1/2); the first of these that carries no dependence is marked, the
first overall if none qualifies (then unmarked). Nor is one marked when it needs gathers
while the first member needs none: a scalar reduction along a row beats SIMD down a
column (row sums: 0.36 ms against 21 ms at 1024², and gcc takes seconds on the gathers). Unrolled: members whose copies reuse data
in registers, scored by the references invariant along the member but not along the
innermost one (loaded inside the vector loop, shared by every copy), best first.

Per band: a ``point_band`` mark whose user value is a tiling.PointSettings (a tiling
policy's choice, e.g. Options.band_config) replaces Options.unroll for that tile, and
its simd member, when legal, is ranked first.

Bands that were not tiled (too small, or Options.tile off) are left as they are; gcc
still vectorises what it can prove safe. The ``point_band`` marks are removed, whatever
the options.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import islpy as isl

from polycomp import islutil as U
from polycomp.ir import Program
from polycomp.options import Options, configure_isl

from . import cache_model as CM
from . import register_tile as RT
from . import tree as T
from .dependences import Dependences
from .legality import carried_by_member, vector_reduction_ok, violated
from .tiling import (MARK_POINT_BAND, PointSettings, band_extent_shares, band_extents,
                     replace_band)

# at most this many statement copies in one unrolled register tile (Options.unroll is
# clamped to it: the C text and gcc's time grow with the copies)
MAX_UNROLLED_COPIES = 256

# may member k of this band be the simd loop? (legality.vector_reduction_ok)
VectorTest = Callable[[isl.ScheduleNode, int], bool]


@dataclass(frozen=True)
class Plan:
    """The new band: ``outer`` members (strip members of unrolled ones as floor(m/f);
    the innermost member, when it appears there, as floor(m/strip)), then ``innermost``
    (m mod strip when strip-mined), then the unrolled point members (m mod f). ``factors``
    gives each unrolled member its own factor (a register tile); else all take ``factor``."""

    outer: tuple[int, ...]
    innermost: int
    unrolled: tuple[int, ...]
    factor: int
    simd: bool
    factors: tuple[int, ...] = ()
    strip: int = 1
    # (member, block): the last outer member written as floor(m/block), m mod block (a
    # register tile's reduction over a channel-blocked operand, _blocked_split)
    split: tuple[int, int] | None = None

    def factor_of(self, m: int) -> int:
        return self.factors[self.unrolled.index(m)] if self.factors else self.factor

    @property
    def n_outer(self) -> int:
        """The band members above the innermost one."""
        return len(self.outer) + (self.split is not None)


def optimize_tiles(schedule: isl.Schedule, program: Program, deps: Dependences,
                   options: Options) -> isl.Schedule:
    """Reorder, mark and unroll every innermost band (see the module doc)."""
    configure_isl()
    # simd and unroll-and-jam must not cut a reduction's chain (carried); distributing
    # the innermost member needs only the order that validity asks for
    relation, validity = deps.carried(), deps.all()
    enabled = options.vectorize or options.unroll >= 2
    vector = lambda band, k: vector_reduction_ok(band, k, deps)  # noqa: E731

    # Programs with reorderable reductions (TC, from_isl) also get their untiled
    # innermost loops planned: fusion leaves a chain such as softmax's as one loop per
    # statement under the shared parallel loops, and gcc vectorises neither a float
    # reduction nor a call to expf there by itself. C loop nests have no such
    # reductions, and their untiled loops stay as gcc would take them.
    leaves = enabled and deps.reduction is not None
    guards = enabled

    def go(node: isl.ScheduleNode) -> isl.ScheduleNode:
        nonlocal guards
        if T.is_mark(node, MARK_POINT_BAND):
            settings = point_settings(node)
            node = node.delete()  # now the point band, or a parallel mark above it
            local = options
            if settings is not None and settings.unroll is not None:
                local = replace(options, unroll=settings.unroll)
            if not (local.vectorize or local.unroll >= 2):
                return node
            guards = True
            return _optimize_points(node, program, relation, local, validity, vector,
                                    settings)
        if leaves and T.is_band(node) and not _has_band_below(node) and not any(
                T.is_mark(n, T.MARK_VECTOR) for n in T.subtree(node)):
            return optimize_band(node, program, relation, options, validity, vector)
        for k in range(node.n_children()):
            node = go(node.child(k)).parent()
        return node

    schedule = go(schedule.get_root()).get_schedule()
    return separate_guards(schedule) if guards else schedule


def point_settings(mark: isl.ScheduleNode) -> PointSettings | None:
    """The tiling policy's settings on a ``point_band`` mark (None: Options' own)."""
    try:
        user = mark.mark_get_id().get_user()
    except TypeError:  # ids read from text carry no user value
        return None
    return user if isinstance(user, PointSettings) else None


def _optimize_points(node: isl.ScheduleNode, program: Program, deps: isl.UnionMap,
                     options: Options, validity: isl.UnionMap | None = None,
                     vector: VectorTest | None = None,
                     settings: PointSettings | None = None) -> isl.ScheduleNode:
    """The innermost band of the chain of bands and parallel marks at ``node``."""
    if T.is_mark(node, T.MARK_PARALLEL):
        return _optimize_points(node.child(0), program, deps, options, validity,
                                vector, settings).parent()
    if not T.is_band(node):
        return node
    if node.n_children() == 1 and (T.is_band(node.child(0))
                                   or T.is_mark(node.child(0), T.MARK_PARALLEL)):
        return _optimize_points(node.child(0), program, deps, options, validity,
                                vector, settings).parent()
    if _has_band_below(node):
        return node
    prefer = None
    if settings is not None and settings.simd is not None:
        # the parallel pass may have split members off the top of the point band
        prefer = settings.simd - (settings.members - node.band_n_member())
        prefer = prefer if 0 <= prefer < node.band_n_member() else None
    return optimize_band(node, program, deps, options, validity, vector, prefer)


def separate_guards(schedule: isl.Schedule) -> isl.Schedule:
    """Loops around a SIMD loop over which statements start or stop (matmul's
    initialisation runs at k = 0 only) get the AST loop type ``separate``: isl then writes
    one copy of the inner loops per part, without the guard that would otherwise sit in
    the vector loop. A loop directly under a ``parallel`` mark stays one loop."""

    def go(node: isl.ScheduleNode, inside: bool) -> isl.ScheduleNode:
        if T.is_mark(node, T.MARK_VECTOR):
            return node
        if T.is_mark(node, T.MARK_PARALLEL):
            inside = True
        if T.is_band(node) and _below(node, T.MARK_VECTOR) and (
                inside or not _below(node, T.MARK_PARALLEL)):
            first = 1 if T.is_mark(node.parent(), T.MARK_PARALLEL) else 0
            # with an isolate option only the isolated part is separated: isl (islpy 2026.2)
            # wrote wrong code (lu) with ``separate`` on the rest of an isolated band too
            isolated = not node.band_get_ast_isolate_option().is_empty()
            for k in range(first, node.band_n_member()):
                if _statements_differ(node, k):
                    if not isolated:
                        node = node.band_member_set_ast_loop_type(k, isl.ast_loop_type.separate)
                    node = node.band_member_set_isolate_ast_loop_type(
                        k, isl.ast_loop_type.separate)
        for k in range(node.n_children()):
            node = go(node.child(k), inside).parent()
        return node

    return go(schedule.get_root(), False).get_schedule()


def _below(node: isl.ScheduleNode, mark: str) -> bool:
    for k in range(node.n_children()):
        child = node.child(k)
        if T.is_mark(child, mark) or _below(child, mark):
            return True
    return False


def _statements_differ(node: isl.ScheduleNode, k: int) -> bool:
    """Some statement runs on a different range of member k than another."""
    ranges = [m.range() for m in U.maps_of(T.member_union_map(node, k))]
    return any(not r.is_equal(ranges[0]) for r in ranges[1:])


def _has_band_below(node: isl.ScheduleNode) -> bool:
    for k in range(node.n_children()):
        child = node.child(k)
        if T.is_band(child) or _has_band_below(child):
            return True
    return False


def optimize_band(node: isl.ScheduleNode, program: Program, deps: isl.UnionMap,
                  options: Options, validity: isl.UnionMap | None = None,
                  vector: VectorTest | None = None,
                  prefer: int | None = None) -> isl.ScheduleNode:
    """One innermost band rewritten; returns the node at the same position. ``deps``:
    what a loop must not carry to be reordered or unrolled; ``validity``: what the
    order must keep (default ``deps``); ``vector(band, k)``: may member k be the simd
    loop (default: it carries nothing in ``deps``); ``prefer``: a member tried first
    as the simd loop (a tiling policy's choice)."""
    depth = node.get_tree_depth()
    plan = plan_band(node, program, deps, options, vector, prefer)
    if (plan is None or not plan.simd) and options.vectorize:
        distributed = distribute_innermost(node, program, deps, validity)
        if distributed is not None:
            return distributed
    if plan is None:
        return node
    lanes = CM.simd_lanes(_vector_itemsize(node, program, plan))
    # a register tile whose full tiles isl cannot isolate within budget would leave
    # guards in every copy (zfnet's 7x7/2 conv, 2 x 8 pixels: 52 ms; 4 ms without):
    # then a register tile unrolled along one member fewer (partial tiles along fewer
    # members, cheaper to isolate), down to none. inception_v1's 3x3 conv at 55 x 55 in
    # tiles of 12 x 16 pixels: 4 x 4 pixels failed, and its plain unroll-and-jam ran 15
    # times slower than a row of pixels. A plan that unrolls nothing never raises
    while True:
        try:
            node = apply_plan(node, plan, deps, lanes)
            break
        except IsolationOutOfBudget:
            plan = plan_band(node, program, deps, options, vector, prefer,
                             register_members=len(plan.unrolled) - 1)
    while node.get_tree_depth() > depth:
        node = node.parent()
    return node


def distribute_innermost(node: isl.ScheduleNode, program: Program, deps: isl.UnionMap,
                         validity: isl.UnionMap | None = None) -> isl.ScheduleNode | None:
    """When no member of a band over several statements can be the vector loop because
    the statements are fused with a shift (jacobi-1d's point band [t, 2t + i] over
    B[i] = f(A[i-1..i+1]); A[i] = f(B[i-1..i+1]), the second shifted by one: the inner
    loop carries B from one statement to the other), distribute the innermost member over
    the sequence below: each statement gets its own innermost loop, free of dependences,
    and marked simd. Legal when no dependence
    between the statements runs backwards once they no longer alternate (checked); None
    when that fails or when some statement's loop would carry a dependence (no gain).
    The member with the most unit-stride references (of a permutable band) is the one
    distributed."""
    kinds = (isl.schedule_node_type.sequence, isl.schedule_node_type.set)
    if node.n_children() != 1 or node.child(0).get_type() not in kinds:
        return None
    depth = node.get_tree_depth()
    n = node.band_n_member()
    pinned = 1 if node.has_parent() and T.is_mark(node.parent(), T.MARK_PARALLEL) else 0
    if n - pinned < 1:
        return None  # the only member is the parallel loop: sinking it would leave the
        # parallel mark above the sequence, with no loop of its own
    if node.band_get_permutable() and n - pinned > 1:
        # the member with unit-stride references goes innermost, as in plan_band
        refs = CM.band_references(node, program)
        loops = [m for m in range(pinned, n) if T.is_loop_member(node, m)]
        if not loops:
            return None
        c = min(loops, key=lambda m: _vector_rank(refs, m))
        if c != n - 1:
            order = Plan(tuple(m for m in range(n) if m != c), c, (), 1, True)
            node = replace_band(node, plan_schedule(node, order), deps, True)
    inner = node.band_split(n - 1).child(0) if n > 1 else node
    split = inner.band_sink()  # now at the sequence, with the member below each filter
    lanes = CM.simd_lanes(max((r.itemsize for r in CM.band_references(node, program)),
                              default=4))
    marked = 0
    for k in range(split.n_children()):
        band = split.child(k).child(0)
        if not T.is_band(band) or not T.is_loop_member(band, 0):
            continue
        if not carried_by_member(band, 0, deps).is_empty():
            return None  # that statement's loop would lose the order it needs, and no simd
        split = band.insert_mark(isl.Id(T.MARK_VECTOR, user=lanes)).parent().parent()
        marked += 1
    if not marked:
        return None
    top = split
    while top.get_tree_depth() > depth:
        top = top.parent()
    domain = top.get_domain()
    times = top.get_prefix_schedule_union_map().flat_range_product(
        top.get_subtree_schedule_union_map()).intersect_domain(domain)
    order = deps if validity is None else validity
    local = order.intersect_domain(domain).intersect_range(domain)
    if not violated(times, local).is_empty():
        return None
    return top


def plan_band(node: isl.ScheduleNode, program: Program, deps: isl.UnionMap,
              options: Options, vector: VectorTest | None = None,
              prefer: int | None = None,
              register_members: int = RT.MAX_MEMBERS) -> Plan | None:
    """The plan of one innermost band: its vector member, then a register tile unrolled
    along at most ``register_members`` members (none: 0), else unroll-and-jam."""
    n = node.band_n_member()
    pinned = 1 if node.has_parent() and T.is_mark(node.parent(), T.MARK_PARALLEL) else 0
    extents = band_extents(node)
    loops = [m for m in range(n) if m >= pinned and (extents[m] is None or extents[m] > 1)]
    if not loops:
        return None
    permutable = bool(node.band_get_permutable()) or n == 1
    refs = CM.band_references(node, program)
    if permutable:
        ranked = sorted(loops, key=lambda m: _vector_rank(refs, m))
        if prefer in ranked:  # the policy's member first; the legality test still decides
            ranked.remove(prefer)
            ranked.insert(0, prefer)
    else:
        ranked = [n - 1] if n - 1 in loops else []  # the order is fixed: only the last
    if not ranked:
        return None
    rest = lambda c: tuple(m for m in range(n) if m != c)  # noqa: E731
    choice = None
    for c in ranked:
        plan = Plan(rest(c) if permutable else tuple(range(c)), c, (), 1, True)
        if _simd_legal(node, plan, deps, permutable, vector):
            choice = plan
            break
    if choice is None or (CM.strided(refs, choice.innermost) and not CM.strided(refs, ranked[0])):
        # no vector loop without gathers where a loop with none exists (softmax's row
        # reduction: better a scalar reduction over a row than SIMD down a column)
        c = ranked[0]
        choice = Plan(rest(c) if permutable else tuple(range(c)), c, (), 1, False)
    if not options.vectorize:
        choice = Plan(choice.outer, choice.innermost, (), 1, False)
    if options.unroll >= 2 and permutable and choice.simd and register_members > 0:
        tiled = _register_tile_plan(node, program, choice, refs, extents, loops, deps,
                                    vector, register_members)
        if tiled is not None:
            return tiled
    if options.unroll >= 2 and permutable:
        choice = _add_unroll(node, choice, refs, extents, loops, deps, options.unroll,
                             vector)
    if not choice.simd and not choice.unrolled and not permutable:
        return None
    return choice


def _register_tile_plan(node: isl.ScheduleNode, program: Program, plan: Plan,
                        refs: list[CM.Reference], extents: list[int | None],
                        loops: list[int], deps: isl.UnionMap,
                        vector: VectorTest | None = None,
                        members: int = RT.MAX_MEMBERS) -> Plan | None:
    """A contraction's register tile (scheduler/register_tile.py): the band of one ``+``
    reduction whose target stays in place along some member gets those reduction members
    just above the vector loop, its vector member strip-mined to the tile's vectors and
    the members the register model picks unrolled by their own factors inside it, so
    that codegen/promote.py keeps every accumulator in a register across the reduction
    loops and codegen/vector_tile.py prints them as vector variables. None when the band
    is not such a contraction, the program is parametric, or no tile fits (the plain
    unroll-and-jam then applies)."""
    domains = U.sets_of(node.get_domain())
    if len(domains) != 1 or program.params or any(extents[m] is None for m in loops):
        # parametric programs: the isolated full register tiles made isl's AST of matmul
        # too costly to check (over 32M operations), and the kernel fell back to the
        # original order; they keep the plain unroll-and-jam
        return None
    try:
        stmt = program.statement(domains[0].get_tuple_name())
    except KeyError:
        return None
    write = [r for r in refs if r.write]
    if stmt.reduction != "+" or len(write) != 1:
        return None
    c = plan.innermost
    reductions = [m for m in loops if m != c and write[0].invariant(m)]
    if not reductions or write[0].invariant(c):
        return None
    candidates = [m for m in loops if m != c and m not in reductions
                  and carried_by_member(node, m, deps).is_empty()]
    lanes = CM.simd_lanes(_vector_itemsize(node, program, plan))
    shares = band_extent_shares(node)
    tile = RT.choose(refs, c, candidates, extents, lanes, shares=shares,
                     max_members=members)
    if tile is None:
        return None
    factors = dict(tile.factors)
    width = tile.vectors * lanes
    strip = width if extents[c] is None or extents[c] > width else 1
    n = node.band_n_member()
    others = [m for m in range(n) if m not in reductions and (m != c or strip > 1)]
    # the loops over register tiles: columns (members the vector operand moves along)
    # outside rows, as BLIS's loop over B's panels runs outside its loop over A's rows: a
    # panel then serves every row of the tile from L1 (a matmul's packed panels, swept
    # once per 6 rows of A, ran at 136 GFLOP/s). A pinned parallel member stays first
    pinned = [m for m in others if node.has_parent() and m == 0
              and T.is_mark(node.parent(), T.MARK_PARALLEL)]
    others = pinned + sorted((m for m in others if m not in pinned),
                             key=lambda m: not RT.is_column(refs, c, m))
    # rows first (members the vector operands stay in place along), then columns: each
    # broadcast is then used by consecutive copies and dies, and the register file holds
    # the accumulators, the vector operands and one broadcast (register_tile's model)
    unrolled = tuple(sorted((m for m in range(n) if m in factors),
                            key=lambda m: (RT.is_column(refs, c, m), m)))
    order = others + [m for m in range(n) if m in reductions]
    candidate = Plan(tuple(order), c, unrolled, max(factors.values(), default=1), True,
                     tuple(factors[m] for m in unrolled), strip,
                     _blocked_split(refs, order[-1], extents, shares[order[-1]], node)
                     if order[-1] in reductions else None)
    if not _simd_legal(node, candidate, deps, True, vector):
        return None
    return candidate


def _blocked_split(refs: list[CM.Reference], m: int, extents: list[int | None],
                   shares: dict[int, float] | None,
                   node: isl.ScheduleNode) -> tuple[int, int] | None:
    """(m, block) where the register tile's innermost reduction loop, member m, runs over
    whole blocks of a channel-blocked read (``x[c / 8][h][w][c % 8]``: a conv over a
    conv's output) for more steps than the printer unrolls: the loop is then written as
    one over blocks and one over a block's lanes, and isl writes the read's indices as
    those two iterators, without a division in the loop (gcc computed ``c / 8`` and the
    flat address at every step: a 1x1 conv over 2048 channels at 7 x 7, 256 channels
    per register tile, ran 1.72 ms so and 1.55 ms split, AVX2). The lanes' loop, at
    most RT.UNROLLED_TAPS steps, is unrolled by the printer (AVX-512's blocks of 16 are
    longer and not split: not measured there). None otherwise: the tile's
    extent along m must be whole blocks, the reads must step one lane per step of m,
    and every tile must start at a block's first lane. Strip-mining keeps the order of
    the instances, so the split is always legal; where a read's blocks are not aligned
    with m's after all, isl writes the division as before. ``shares``: m's extents in
    the tiles (tiling.band_extent_shares, which the caller has)."""
    extent = extents[m]
    if extent is None or extent <= RT.UNROLLED_TAPS:
        return None
    moving = [b for r in refs if r.blocked for b in r.blocked
              if b is not None and b.steps[m] != 0]
    blocks = {b.divisor for b in moving}
    if len(blocks) != 1 or any(b.steps[m] != 1 for b in moving):
        return None
    block = blocks.pop()
    if (block > RT.UNROLLED_TAPS or not shares or any(e % block for e in shares)
            or not _tiles_start_at(node, m, block)):
        return None
    return m, block


def _tiles_start_at(node: isl.ScheduleNode, m: int, block: int) -> bool:
    """Whether member m's first value, for every value of the loops above the band, is a
    multiple of ``block``."""
    maps = U.maps_of(node.get_prefix_schedule_union_map().intersect_domain(node.get_domain()))
    values = U.maps_of(T.member_union_map(node, m))
    if len(maps) != 1 or len(values) != 1:
        return False
    first = maps[0].reverse().apply_range(values[0]).lexmin_pw_multi_aff().get_pw_aff(0)
    return first.mod_val(isl.Val.int_from_si(U.CTX, block)).non_zero_set().is_empty()


def _vector_rank(refs: list[CM.Reference], m: int) -> tuple:
    """Sort key, best vector loop first: no gathers, then the stride score, then the
    later member."""
    return (CM.strided(refs, m), -CM.stride_score(refs, m), -m)


def _add_unroll(node: isl.ScheduleNode, plan: Plan, refs: list[CM.Reference],
                extents: list[int | None], loops: list[int], deps: isl.UnionMap,
                factor: int, vector: VectorTest | None = None) -> Plan:
    c = plan.innermost
    chosen = tuple(sorted(CM.unroll_candidates(
        refs, c, loops, extents, factor,
        lambda m: carried_by_member(node, m, deps).is_empty())))
    # the copies isl writes: factor ** members per statement of the band. unroll=64 on
    # gemm's two members made 9.6 MB of C; past MAX_UNROLLED_COPIES fewer members are
    # unrolled, then by a smaller factor (the loop runs the same instances either way)
    factor = fitting_factor(factor, [extents[m] for m in chosen])
    statements = max(1, len(U.sets_of(node.get_domain())))
    while len(chosen) > 1 and factor ** len(chosen) * statements > MAX_UNROLLED_COPIES:
        chosen = chosen[:-1]
    while chosen and factor > 2 and factor * statements > MAX_UNROLLED_COPIES:
        factor //= 2
    while chosen:
        candidate = Plan(plan.outer, c, chosen, factor, plan.simd)
        if not plan.simd or _simd_legal(node, candidate, deps, True, vector):
            return candidate
        chosen = chosen[:-1]
    return plan


# a register tile factor that leaves at most this share of a member's points in partial
# tiles is taken as it is; else the one that leaves the fewest
PARTIAL_SHARE = 0.1


def fitting_factor(factor: int, extents: list[int | None]) -> int:
    """The unroll factor, at most ``factor``, for members of these extents: partial
    register tiles are written apart and run far slower than full ones (a conv at 7x7
    took 15 ms with 4x4 tiles, 2.9 ms with 3x3; at 14x14, 5.6 ms with 4x4, 2.2 ms with
    2x2), so the largest factor that leaves few points in them, else the fewest."""
    known = [e for e in extents if e]
    if factor <= 2 or not known:
        return factor

    def share(f: int) -> float:
        return max((e % f) / e for e in known)
    for f in range(factor, 1, -1):
        if share(f) <= PARTIAL_SHARE:
            return f
    return min(range(factor, 1, -1), key=lambda f: (share(f), -f))


def _simd_legal(node: isl.ScheduleNode, plan: Plan, deps: isl.UnionMap,
                permutable: bool, vector: VectorTest | None = None) -> bool:
    """The innermost member of the planned band may be a simd loop: it carries no
    dependence, or only reductions along it (``vector``)."""
    test = vector or (lambda band, k: carried_by_member(band, k, deps).is_empty())
    if not permutable and not plan.unrolled:
        return test(node, plan.innermost)
    band = replace_band(node, plan_schedule(node, plan), deps, permutable)
    return test(band, plan.n_outer)


def plan_schedule(node: isl.ScheduleNode, plan: Plan) -> isl.MultiUnionPwAff:
    """The partial schedule of the planned band."""
    mupa = node.band_get_partial_schedule()

    def val(f: int) -> isl.Val:
        return isl.Val.int_from_si(U.CTX, f)
    members = []
    for m in plan.outer:
        upa = mupa.get_at(m)
        if m == plan.innermost:
            upa = upa.scale_down_val(val(plan.strip)).floor()
        elif m in plan.unrolled:
            upa = upa.scale_down_val(val(plan.factor_of(m))).floor()
        if plan.split is not None and m == plan.split[0]:
            members += [upa.scale_down_val(val(plan.split[1])).floor(),
                        upa.mod_val(val(plan.split[1]))]
            continue
        members.append(upa)
    inner = mupa.get_at(plan.innermost)
    members.append(inner.mod_val(val(plan.strip)) if plan.strip > 1 else inner)
    members += [mupa.get_at(m).mod_val(val(plan.factor_of(m))) for m in plan.unrolled]
    if (not plan.unrolled and plan.strip == 1
            and plan.n_outer + 1 == mupa.get_space().dim(isl.dim_type.set)):
        space = mupa.get_space()
    else:
        space = isl.Space.set_alloc(U.CTX, 0, len(members)).align_params(mupa.get_space())
    upas = isl.UnionPwAffList.from_union_pw_aff(members[0])
    for upa in members[1:]:
        upas = upas.add(upa)
    return isl.MultiUnionPwAff.from_union_pw_aff_list(space, upas)


def apply_plan(node: isl.ScheduleNode, plan: Plan, deps: isl.UnionMap,
               lanes: int) -> isl.ScheduleNode:
    """Rewrite the band as planned: [outer] / mark simd / [innermost] / [unrolled]."""
    n = node.band_n_member()
    identity = plan.outer == tuple(range(n - 1)) and plan.innermost == n - 1
    if not identity or plan.unrolled or plan.strip > 1 or plan.split is not None:
        node = replace_band(node, plan_schedule(node, plan), deps,
                            bool(node.band_get_permutable()) or n == 1)
    if not plan.simd and not plan.unrolled:
        return node  # only the order changed: the band stays whole
    if plan.outer:
        node = node.band_split(plan.n_outer).child(0)
    if plan.unrolled:
        node = node.band_split(1).child(0)
        for k in range(node.band_n_member()):
            node = node.band_member_set_ast_loop_type(k, isl.ast_loop_type.unroll)
        node = node.parent()
        outer = node.parent()
        n_outer = plan.n_outer
        if T.is_mark(outer.parent(), T.MARK_PARALLEL) and outer.band_n_member() > 1:
            # the parallel member keeps a band of its own (its mark belongs to one loop,
            # which isolation would split in two); the rest is isolated below it
            outer = outer.band_split(1).child(0)
            n_outer -= 1
            node = outer.child(0)
        full = (_full_register_tiles(node.child(0), n_outer,
                                     [plan.factor_of(m) for m in plan.unrolled], plan.strip,
                                     strict=bool(plan.factors))
                if n_outer and not T.is_mark(outer.parent(), T.MARK_PARALLEL) else None)
        if full is not None:
            node = outer.band_set_ast_build_options(isl.UnionSet(full)).child(0)
    if plan.simd:
        node = node.insert_mark(isl.Id(T.MARK_VECTOR, user=lanes))
    return node


# isl operations (tableau pivots) _full_register_tiles may take; gemm's parametric tiles
# need under 10^4. Past it the isolate option is dropped: isl then guards the unrolled
# copies of the partial and the full register tiles alike (slower inner loops, same
# results). Parametric tiled schedules with strided domains took minutes here.
ISOLATE_OPERATIONS = 200_000
# the budget for a register tile's plan (``strict``), whose fallback is far slower: the
# packed sgemm at 1024 (row tiles of 66, 6-row register tiles: a partial one in the last
# tile) needed 1-2 million (0.15 s), and its fallback's loop compiled to scalar FMAs
REGISTER_TILE_OPERATIONS = 4_000_000


def _full_register_tiles(unrolled: isl.ScheduleNode, n_outer: int,
                         factors: list[int], strip: int = 1,
                         strict: bool = False) -> isl.Set | None:
    """``_isolate_set`` within ISOLATE_OPERATIONS isl operations, else None (``strict``:
    within REGISTER_TILE_OPERATIONS, else IsolationOutOfBudget)."""
    configure_isl()
    done = []

    def isolate() -> isl.Set | None:
        result = _isolate_set(unrolled, n_outer, factors, strip)
        done.append(True)
        return result
    result = U.within_operations(REGISTER_TILE_OPERATIONS if strict else ISOLATE_OPERATIONS,
                                 isolate)
    if not done and strict:
        raise IsolationOutOfBudget  # a register tile's plan: the caller plans without it
    return result


class IsolationOutOfBudget(Exception):
    """The full register tiles of a planned register tile (scheduler/register_tile.py)
    took more than ISOLATE_OPERATIONS to find: its partial tiles would guard every copy,
    and no accumulator would stay in a register."""


def _isolate_set(unrolled: isl.ScheduleNode, n_outer: int,
                 factors: list[int], strip: int = 1) -> isl.Set | None:
    """The isolate option for the band above the SIMD loop: the values of its prefix p and
    members m for which every unrolled copy exists,

        isolate[[p] -> [m]] :  for all c (the SIMD loop) and u in the box of the
                               factors, (p, m, c) scheduled  =>  (p, m, c, u) scheduled

    and, when the SIMD member is strip-mined (a register tile ``strip`` lanes wide), for
    every c in [0, strip) too: codegen/promote.py keeps a tile in registers only when its
    vector loop has constant bounds.

    isl then writes these register tiles apart from the partial ones, without the guards
    that would otherwise sit in every copy inside the vector loop. None when every register
    tile is full (no guards to avoid)."""
    domain = unrolled.get_domain()
    prefix = unrolled.get_prefix_schedule_union_map().intersect_domain(domain)
    pairs = prefix.reverse().apply_range(
        unrolled.band_get_partial_schedule_union_map().intersect_domain(domain))
    maps = U.maps_of(pairs)
    if not maps:
        return None
    scheduled = maps[0]
    for m in maps[1:]:
        scheduled = scheduled.union(m)
    n_unrolled = unrolled.band_n_member()
    n_pm = scheduled.dim(isl.dim_type.in_) - 1  # (p, m) and then the SIMD loop c
    n_p = n_pm - n_outer
    box = isl.Set.universe(isl.Space.set_alloc(U.CTX, 0, n_unrolled))
    for k in range(n_unrolled):
        box = box.lower_bound_val(isl.dim_type.set, k, isl.Val.zero(U.CTX))
        box = box.upper_bound_val(isl.dim_type.set, k,
                                  isl.Val.int_from_si(U.CTX, factors[k] - 1))
    loops = scheduled.domain()
    if strip > 1:
        lanes = isl.Set.universe(isl.Space.set_alloc(U.CTX, 0, 1))
        lanes = lanes.lower_bound_val(isl.dim_type.set, 0, isl.Val.zero(U.CTX))
        lanes = lanes.upper_bound_val(isl.dim_type.set, 0, isl.Val.int_from_si(U.CTX, strip - 1))
        loops = loops.project_out(isl.dim_type.set, n_pm, 1).flat_product(
            lanes.align_params(loops.get_space()))
    wanted = loops.flat_product(box.align_params(loops.get_space()))
    missing = wanted.subtract(scheduled.wrap().flatten())
    if missing.is_empty():
        return None
    partial = missing.project_out(isl.dim_type.set, n_pm, 1 + n_unrolled)
    full = loops.project_out(isl.dim_type.set, n_pm, 1).subtract(partial).coalesce()
    if full.is_empty():
        return None
    hull = full.polyhedral_hull().to_set()
    if hull.is_subset(full):
        full = hull  # isl isolates convex sets only; tile conditions usually are convex
    as_map = isl.Map.from_range(full).move_dims(isl.dim_type.in_, 0, isl.dim_type.out, 0, n_p)
    return as_map.wrap().set_tuple_name("isolate")


def _vector_itemsize(node: isl.ScheduleNode, program: Program, plan: Plan) -> int:
    """The widest element that the vector loop loads or stores with unit stride."""
    sizes = [r.itemsize for r in CM.band_references(node, program)
             if r.unit_stride(plan.innermost) and not r.invariant(plan.innermost)]
    return max(sizes, default=4)
