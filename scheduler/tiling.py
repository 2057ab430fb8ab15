"""Tiling: rectangular tiles for every permutable band, optional second level, wavefronts.

Input: a schedule tree whose bands carry correct permutable flags, the Program, the
Dependences and Options. Output: the same instances in a new order, with each tiled band
replaced by a tile band (which tile) above a point band (which point inside the tile).
A band is tileable iff it is permutable: every dependence not carried further out has a
non-negative distance on every member, so the tile loops may run in any order.

    band [i, j, k]  permutable           band [floor(i/32), floor(j/32), floor(k/8)]  (tiles)
      sequence S0, S1              ->      band [i mod 32, j mod 32, k mod 8]         (points)
                                              sequence S0, S1

that is, for matmul with sizes (32, 32, 8) (isl options: tile loops count tiles, point
loops start at 0):

    { S1[i, j, k] -> [floor(i/32), floor(j/32), floor(k/8), i mod 32, j mod 32, k mod 8, 1] }

Which bands: the outermost permutable band on each path with at least two loop members
(members that take more than one value), and, when the cache model picks the sizes, some
reference reused inside the band (cache_model.has_reuse: a spatial stencil sweep streams
through its data once, tiled or not). A one-member band is never tiled: strip-mining
alone, [floor(i/T), i mod T], visits the instances in the same order as [i] and gains
nothing; locality comes from interchanging point loops inward past other loops, which
needs a second member. A band whose every member fits in one tile is left alone too.

Sizes: ``Options.tile_sizes`` (outermost first; a shorter list repeats its last size) or
the cache model (scheduler/cache_model.py). ``Options.l2_tile`` adds a level: tiles of
tiles sized for L2, holding tiles sized for L1.

The seam (issue 13): a ``TilePolicy`` decides, per band, from a ``BandView`` (the band's
stable id ``<statements>@<position>``, its member extents and the cache model's features),
a ``BandTiling``: sizes per level, and optionally the band's unroll-and-jam factor and
simd member, which travel to the intra-tile pass on the ``point_band`` mark. It is the
one place a configuration enters: the default ``TilePolicy`` is the analytical choice
above; ``ConfiguredPolicy`` takes ``Options.band_config`` (what polycomp.tune found) for
the bands it names and the default for the others. ``observe_bands`` collects every band
a policy decides inside it, with its features (polycomp.tuning.space_of builds the space from it).

Wavefront (``Options.wavefront``): when no member of the tile band is parallel (seidel,
time-tiled stencils) the tile loops are skewed, ``(T0, T1, ...) -> (T0 + T1, T1, ...)``.
Tile-level distances are componentwise non-negative (the band is permutable), so two tiles
in the same front ``T0 + T1`` cannot depend on each other through T1: the second loop
becomes parallel, and the parallel pass marks it. Each front is one ``omp parallel for``.

Coincident flags of every band this pass writes are recomputed exactly (a member is
coincident iff every dependence that reaches the band with equal outer schedule has
distance 0 on it). A ``point_band`` mark above each point band tells the intra-tile pass
(scheduler/intratile.py) where the tiles' insides are; that pass removes the marks.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace

import islpy as isl

from polycomp import islutil as U
from polycomp.ir import Program
from polycomp.options import Options, configure_isl

from . import cache_model as CM
from . import panel_tiles as PT
from . import register_tile as RT
from . import tree as T
from .dependences import Dependences
from .legality import is_parallel_member

# The cache level that one level of tiles fills (the level below is served by the order
# of the point loops: a register tile plus one row of the stride-1 loop). With l2_tile the
# inner tiles fill L1 and the outer ones L2.
SINGLE_LEVEL = 2
TWO_LEVELS = (2, 1)
# the model leaves at least this many tiles along each member up to the first parallel one
# (both first members when none is parallel: the wavefront needs tiles along both)
MIN_TILES = 4
# a tile of fewer values than this along the first parallel member re-reads what stays in
# place along it often enough to cut another member instead (_limits)
SHORT_TILE = 64
# the column of a register tile (scheduler/register_tile.py) that a parallel member must
# leave whole in each tile: MLAS's NCHWc kernel takes up to 4 blocks of filters
COLUMN = 4

# A mark above the point band of a tile (read and removed by scheduler/intratile.py).
MARK_POINT_BAND = "point_band"


def tile_bands(schedule: isl.Schedule, program: Program, deps: Dependences,
               options: Options, policy: TilePolicy | None = None) -> isl.Schedule:
    """Tile every outermost permutable band of two or more loops (see the module doc),
    with the sizes ``policy`` gives (default: ``policy_for(options)``)."""
    configure_isl()
    policy = policy if policy is not None else policy_for(options)
    # permutability is about order (validity); coincidence and parallel members must
    # also respect the reductions' chains (carried)
    validity, relation = deps.all(), deps.carried()

    def go(node: isl.ScheduleNode) -> isl.ScheduleNode:
        if T.is_band(node) and _tileable(node, validity):
            tiled = _tile(node, program, relation, options, policy)
            if tiled is not None:
                return tiled
        for k in range(node.n_children()):
            node = go(node.child(k)).parent()
        return node

    return go(schedule.get_root()).get_schedule()


def _tileable(node: isl.ScheduleNode, deps: isl.UnionMap) -> bool:
    """Flagged permutable (and really so: a hand-written tree may claim too much), with at
    least two loop members, and not decided already: no loop mark below it and no subtree
    that isl cannot tile (a tree read back from ``--emit schedule`` is tiled and marked)."""
    if node.is_subtree_anchored() or any(
            T.is_mark(n, T.MARK_PARALLEL) or T.is_mark(n, T.MARK_VECTOR) for n in T.subtree(node)):
        return False
    return (bool(node.band_get_permutable())
            and sum(1 for e in band_extents(node) if e is None or e > 1) >= 2
            and is_permutable(node, deps))


def is_permutable(node: isl.ScheduleNode, deps: isl.UnionMap) -> bool:
    """Every dependence that reaches the band with equal outer schedule goes forward or
    stays on every member: { s -> t : φ_k(s) > φ_k(t) } holds for none of them."""
    live = _live(node, deps)
    for k in range(node.band_n_member()):
        member = T.member_union_map(node, k)
        if not live.intersect(member.lex_gt_union_map(member)).is_empty():
            return False
    return True


def _live(node: isl.ScheduleNode, deps: isl.UnionMap) -> isl.UnionMap:
    """The dependences between instances of the band whose ends run at the same outer
    schedule (the others are carried further out)."""
    domain = node.get_domain()
    prefix = node.get_prefix_schedule_union_map()
    return (deps.intersect_domain(domain).intersect_range(domain)
            .intersect(prefix.apply_range(prefix.reverse())))


def _tile(node: isl.ScheduleNode, program: Program, deps: isl.UnionMap,
          options: Options, policy: TilePolicy | None = None) -> isl.ScheduleNode | None:
    """The tiled band (the node at the same position), or None when tiling gains nothing."""
    extents = band_extents(node)
    if not options.tile_sizes:
        loops = [m for m, e in enumerate(extents) if e is None or e > 1]
        if not CM.has_reuse(CM.band_references(node, program), loops):
            return None
    view = BandView(node, program, options, deps, extents)
    tiling = (policy if policy is not None else policy_for(options)).tiling(view)
    levels = tiling.levels
    inner = levels[-1]
    tiled = not all(e is not None and e <= s for e, s in zip(extents, inner))
    observed = _OBSERVED.get()
    if observed is not None:
        # a band the policy leaves whole (one tile holds it) is reported too: another
        # policy may tile it
        observed.append(view.summary(tiling, tiled))
    if not tiled:
        return None
    node = tile_band(node, inner, deps)
    settings = (PointSettings(tiling.unroll, tiling.simd, len(inner))
                if tiling.unroll is not None or tiling.simd is not None else None)
    # the band's own intra-tile settings ride on the mark (no user value: Options')
    mark = (isl.Id(MARK_POINT_BAND) if settings is None
            else isl.Id(MARK_POINT_BAND, user=settings))
    node = node.child(0).insert_mark(mark).parent()
    if len(levels) > 1:
        ratio = [max(1, outer // size) for outer, size in zip(levels[0], inner)]
        if any(r > 1 for r in ratio):
            node = tile_band(node, ratio, deps)
    if options.wavefront:
        node = wavefront(node, deps)
    return node


def tile_sizes(node: isl.ScheduleNode, program: Program, options: Options,
               deps: isl.UnionMap | None = None) -> list[tuple[int, ...]]:
    """Sizes per level, outermost level first, one size per band member (the default
    policy's choice)."""
    return list(analytical_levels(BandView(node, program, options, deps), options))


def analytical_levels(band: BandView, options: Options) -> tuple[tuple[int, ...], ...]:
    """``Options.tile_sizes`` or the cache model, per level (the module doc)."""
    n = len(band.extents)
    if options.tile_sizes:
        given = list(options.tile_sizes)
        fixed = [e == 1 for e in band.extents]  # no loop: tiling it gains nothing
        inner = tuple(1 if fixed[k] else given[min(k, len(given) - 1)] for k in range(n))
        if not options.l2_tile:
            return (inner,)
        outer = band.model(TWO_LEVELS[0])
        return (tuple(max(o, s) for o, s in zip(outer, inner)), inner)
    if not options.l2_tile:
        return (band.model(SINGLE_LEVEL),)
    return tuple(band.model(level) for level in TWO_LEVELS)


# ----------------------------------------------------------------------------- the seam

@dataclass(frozen=True)
class BandTiling:
    """A policy's decision for one band: tile sizes per level (outermost level first, one
    size per member), and the band's unroll-and-jam factor and simd member (the member's
    index in the band; None: the intra-tile pass decides from Options as usual)."""

    levels: tuple[tuple[int, ...], ...]
    unroll: int | None = None
    simd: int | None = None


@dataclass(frozen=True)
class PointSettings:
    """The user value of a ``point_band`` mark (read by scheduler/intratile.py):
    ``members`` is how many members the point band had when tiled, so that the simd
    member can be found in the part the parallel pass may have split off."""

    unroll: int | None
    simd: int | None
    members: int


@dataclass(frozen=True)
class TiledBand:
    """Plain data about one band as it was tiled (what ``observe_bands`` collects)."""

    id: str
    extents: tuple[int | None, ...]
    tiling: BandTiling
    lanes: int
    vector_members: tuple[int, ...]  # members along which some reference has stride 1
    # the dependence-free members, in order: the parallel tile loop comes from the first
    # one cut into several tiles
    parallel: tuple[int, ...]
    references: tuple[CM.Reference, ...]
    tiled: bool = True  # False: the sizes held the whole band, which stayed as it was
    # a GPU kernel band (scheduler/gpu_mapping.py): the members whose tile a
    # configuration may set (thread and sequential members); None: a CPU band
    gpu_members: tuple[int, ...] | None = None

    def footprint(self, sizes: Sequence[float]) -> float:
        """Bytes one tile of ``sizes`` touches (cache_model.footprint)."""
        return CM.footprint(self.references, sizes)


class BandView:
    """What a TilePolicy sees of a band about to be tiled: its stable ``id`` (the
    statements under it and its position among the bands above them, as
    polycomp.tuning.space.band_id writes it), the ``extents`` of its members, and the
    cache model's features, each computed when first asked for."""

    def __init__(self, node: isl.ScheduleNode, program: Program, options: Options,
                 deps: isl.UnionMap | None, extents: Sequence[int | None] | None = None):
        self.node, self.program, self.options, self.deps = node, program, options, deps
        self.extents = tuple(band_extents(node) if extents is None else extents)
        self._model: dict[int, tuple[int, ...]] = {}

    @functools.cached_property
    def id(self) -> str:
        from polycomp.tuning.space import band_id  # plain text helpers: no cycle
        statements = [s.get_tuple_name() for s in U.sets_of(self.node.get_domain())]
        return band_id(statements, band_position(self.node))

    def model(self, level: int) -> tuple[int, ...]:
        """The cache model's sizes for one cache level."""
        if level not in self._model:
            self._model[level] = model_sizes(self.node, self.program, self.options, level,
                                             self.deps)
        return self._model[level]

    @functools.cached_property
    def references(self) -> tuple[CM.Reference, ...]:
        return tuple(CM.band_references(self.node, self.program))

    @functools.cached_property
    def loops(self) -> tuple[int, ...]:
        return tuple(m for m, e in enumerate(self.extents) if e is None or e > 1)

    @functools.cached_property
    def lanes(self) -> int:
        return CM.simd_lanes(min((r.itemsize for r in self.references), default=4))

    @functools.cached_property
    def vector_members(self) -> tuple[int, ...]:
        return tuple(m for m in self.loops if any(
            r.unit_stride(m) and not r.invariant(m) for r in self.references))

    @functools.cached_property
    def parallel(self) -> tuple[int, ...]:
        """The dependence-free loop members, in order: the parallel tile loop comes from
        the first of them that the tile sizes cut into several tiles (the parallel pass
        marks the first dependence-free loop, and a member one tile holds is no loop: a
        conv's 4 blocks of output channels, one tile, leave the loop to its rows)."""
        if self.deps is None:
            return ()
        return tuple(m for m in self.loops if is_parallel_member(self.node, m, self.deps))

    def summary(self, tiling: BandTiling, tiled: bool = True) -> TiledBand:
        return TiledBand(self.id, self.extents, tiling, self.lanes, self.vector_members,
                         self.parallel, self.references, tiled)


def band_position(node: isl.ScheduleNode) -> int:
    """How many bands are above ``node`` (its position among the bands on its path)."""
    n = 0
    while node.has_parent():
        node = node.parent()
        n += T.is_band(node)
    return n


class TilePolicy:
    """The default policy: the analytical choice (``Options.tile_sizes`` or the cache
    model; intra-tile settings from Options); for the GPU targets' mapping the mapping's
    own tiles and the launch sizes of Options."""

    def __init__(self, options: Options):
        self.options = options

    def tiling(self, band: BandView) -> BandTiling:
        return BandTiling(analytical_levels(band, self.options))

    def gpu_tiles(self, band: BandView, default: tuple[int, ...],
                  members: Sequence[int]) -> tuple[int, ...]:
        """A GPU kernel band's tile sizes (scheduler/gpu_mapping.py: along a thread
        member the block's extent in elements, along a sequential one the tile each step
        stages); ``members``: those a configuration may set."""
        return default

    def gpu_launch(self, block: tuple[int, ...], grid_x: int) -> tuple[tuple[int, ...], int]:
        """Threads per block along x, y, z and the most blocks along x, from the
        mapping's defaults (Options.gpu_block, gpu_grid)."""
        return block, grid_x


class ConfiguredPolicy(TilePolicy):
    """Per-band settings (``Options.band_config``, or ``config``: knob -> value) for the
    bands they name; the default policy for the others, and for the members and knobs a
    band's settings leave out (a tile size: the model's for the levels asked for)."""

    def __init__(self, options: Options, config: Mapping[str, int] | None = None):
        super().__init__(options)
        pairs = dict(options.band_config) if config is None else dict(config)
        self.bands: dict[str, dict[str, int]] = {}
        for name, value in pairs.items():
            band, knob = name.rsplit("/", 1)
            self.bands.setdefault(band, {})[knob] = int(value)

    def tiling(self, band: BandView) -> BandTiling:
        knobs = self.bands.get(band.id)
        if not knobs:
            return super().tiling(band)
        l2 = bool(knobs.get("l2", int(self.options.l2_tile)))
        base = analytical_levels(band, replace(self.options, l2_tile=l2))
        inner = tuple(1 if e == 1 else int(knobs.get(f"tile{m}", base[-1][m]))
                      for m, e in enumerate(band.extents))
        levels: tuple[tuple[int, ...], ...] = (inner,)
        if l2:
            # the outer level stays the model's L2 choice, never smaller than the inner
            levels = (tuple(max(o, s) for o, s in zip(base[0], inner)), inner)
        simd = knobs.get("simd", -1)
        return BandTiling(levels, knobs.get("unroll"), simd if simd >= 0 else None)

    def gpu_tiles(self, band: BandView, default: tuple[int, ...],
                  members: Sequence[int]) -> tuple[int, ...]:
        knobs = self.bands.get(band.id, {})
        return tuple(int(knobs.get(f"tile{m}", size)) if m in members else size
                     for m, size in enumerate(default))

    def gpu_launch(self, block: tuple[int, ...], grid_x: int) -> tuple[tuple[int, ...], int]:
        knobs = self.bands.get("gpu", {})
        return gpu_block_shape(block, knobs.get("threads"), knobs.get("x")), \
            int(knobs.get("grid", grid_x))


def gpu_block_shape(block: tuple[int, ...], threads: int | None,
                    x: int | None) -> tuple[int, ...]:
    """``block`` (threads along x, y, z) reshaped to ``threads`` in all with ``x`` along
    x (either None: as in ``block``); the axes after y keep their share where they can.
    One pair of knobs serves kernels of one, two or three thread axes alike."""
    if not block or (threads is None and x is None):
        return block
    total = threads if threads is not None else math.prod(block)
    if len(block) == 1:
        return (max(1, total),)
    along_x = max(1, min(x if x is not None else block[0], total))
    rest = max(1, total // along_x)
    if len(block) == 2:
        return (along_x, rest)
    along_z = max(1, min(block[2], rest))
    return (along_x, max(1, rest // along_z), along_z)


def observe(summary: TiledBand) -> None:
    """Report a band to ``observe_bands`` (the GPU mapping reports its kernel bands)."""
    observed = _OBSERVED.get()
    if observed is not None:
        observed.append(summary)


def policy_for(options: Options) -> TilePolicy:
    return ConfiguredPolicy(options) if options.band_config else TilePolicy(options)


_OBSERVED: ContextVar[list[TiledBand] | None] = ContextVar("polycomp_tiled_bands",
                                                           default=None)


@contextmanager
def observe_bands() -> Iterator[list[TiledBand]]:
    """Collect a TiledBand for every band a policy decides inside the block (whether it
    was tiled or not; this thread only)."""
    seen: list[TiledBand] = []
    token = _OBSERVED.set(seen)
    try:
        yield seen
    finally:
        _OBSERVED.reset(token)


def model_sizes(node: isl.ScheduleNode, program: Program, options: Options,
                level: int, deps: isl.UnionMap | None = None) -> tuple[int, ...]:
    """Tile sizes from the cache model for the given cache level."""
    refs = CM.band_references(node, program)
    extents = band_extents(node)
    loops = [m for m, e in enumerate(extents) if e is None or e > 1]
    innermost = CM.innermost_candidate(refs, loops) if options.vectorize else None
    itemsize = min((r.itemsize for r in refs), default=4)
    caches = CM.cache_sizes()
    capacity = CM.CACHE_FRACTION * caches[level]
    row = CM.CACHE_FRACTION * caches[max(1, level - 1)]  # the vector loop's row: L1
    unroll = options.unroll if options.unroll >= 2 else 1
    unrolled = (CM.unroll_candidates(refs, innermost, loops, extents, unroll)
                if innermost is not None and unroll >= 2 else ())
    if innermost is not None and not options.l2_tile:
        panels = PT.panel_sizes(
            refs, extents, innermost, CM.simd_lanes(itemsize),
            lambda: _register_rows(refs, innermost, loops, extents, itemsize),
            caches, _limits(node, extents, deps, refs, innermost))
        if panels is not None:
            return panels
    choice = CM.choose_tile_sizes(refs, extents, capacity, unroll=unroll,
                                  lanes=CM.simd_lanes(itemsize), innermost=innermost,
                                  row_capacity=row,
                                  limits=_limits(node, extents, deps, refs, innermost),
                                  unrolled=unrolled)
    if innermost is None:
        return choice.sizes
    return _column_in_l1(choice.sizes, refs, innermost, loops, extents, itemsize)


def _column_in_l1(sizes: tuple[int, ...], refs: Sequence[CM.Reference], innermost: int,
                  loops: Sequence[int], extents: list[int | None],
                  itemsize: int) -> tuple[int, ...]:
    """``sizes`` with the largest reduction tile halved (down to a vector's lanes: a
    channel-blocked operand's block) where the register tile at the smaller size costs
    less, each size with its rows of whole register tiles (``_rows_of_whole_tiles``).
    The register model charges a tile whose column (its vector operands over the
    reduction) does not fit L1, since the next tile along its rows reads the column
    again (register_tile.L2_LOAD); each halving costs the accumulators' loads and
    stores once more per sweep. A 3x3 conv over 256 channels took 32 channels per
    tile, a filter column of 110 KB for 6 blocks; 16 channels and 4 blocks fit L1."""
    writes = [r for r in refs if r.write]
    if len(writes) != 1:
        return sizes
    reductions = [m for m in loops if m != innermost and writes[0].invariant(m)
                  and sizes[m] > 1]
    if not reductions:
        return sizes
    cut = max(reductions, key=lambda m: (sizes[m], -m))
    candidates = [m for m in loops if m != innermost and not writes[0].invariant(m)]
    lanes = CM.simd_lanes(itemsize)
    best: tuple[float, tuple[int, ...]] | None = None
    size = sizes[cut]
    while True:
        trial = _rows_of_whole_tiles(tuple(size if m == cut else s for m, s in enumerate(sizes)),
                                     refs, innermost, candidates, extents, lanes)
        tile = RT.choose(refs, innermost, candidates, list(trial), lanes,
                         shares=_tile_shares(trial, extents))
        if tile is None:
            break
        sweep = RT.reduction_points(refs, innermost, list(trial))
        cost = tile.expected + 2.0 / sweep
        if best is None or cost < best[0] - 1e-9:
            best = (cost, trial)
        half = size // 2
        if size % 2 or half < lanes or extents[cut] is None or extents[cut] % half:
            break
        size = half
    return sizes if best is None else best[1]


def _rows_of_whole_tiles(sizes: tuple[int, ...], refs: Sequence[CM.Reference],
                         innermost: int, candidates: Sequence[int],
                         extents: list[int | None], lanes: int) -> tuple[int, ...]:
    """``sizes`` with the tile along each row member (a member the register tile may
    unroll that its vector operands stay in place along: a conv's pixels; those of the
    tile chosen at ``sizes`` first) moved down, by at most half, to a multiple of some
    factor that divides the member's extent, where the register tile there costs less,
    or at equal cost runs along the taps (register_tile._along_taps): a row of 7 pixels
    fits 56, 28 and 14 pixels, and 20-pixel tiles of 56 left 4 x 5 tiles and a partial
    one; 16 of 28 columns left remainders of 1 and 2 pixels, so a 3x3 conv's tile went
    down its rows, where 14 columns give it a row of 5 + 5 + 4 pixels."""
    tile = RT.choose(refs, innermost, candidates, list(sizes), lanes,
                     shares=_tile_shares(sizes, extents))
    if tile is None:
        return sizes
    chosen_members = [m for m, _ in tile.factors]
    for m in chosen_members + [m for m in candidates if m not in chosen_members]:
        extent = extents[m]
        if extent is None or RT.is_column(refs, innermost, m):
            continue
        options = {sizes[m]} | {
            max(k for k in range(f, sizes[m] + 1, f) if extent % k == 0)
            for f in range(2, RT.MAX_FACTOR + 1)
            if any(extent % k == 0 for k in range(f, sizes[m] + 1, f))}
        scored = []
        for size in options:
            if 2 * size < sizes[m]:
                continue
            trial = tuple(size if k == m else s for k, s in enumerate(sizes))
            chosen = RT.choose(refs, innermost, candidates, list(trial), lanes,
                               shares=_tile_shares(trial, extents))
            if chosen is not None:
                scored.append((round(chosen.expected, 6), not chosen.along_taps, -size))
        if scored:
            sizes = tuple(-min(scored)[2] if k == m else s for k, s in enumerate(sizes))
    return sizes


def _tile_shares(sizes: Sequence[int], extents: Sequence[int | None]
                 ) -> list[dict[int, float] | None]:
    """Per member: {extent in a tile: share of the points}, for tiles of ``sizes`` (what
    band_extent_shares reads from the tiled band: a full size and a last remainder)."""
    out: list[dict[int, float] | None] = []
    for size, extent in zip(sizes, extents):
        if extent is None or size >= extent:
            out.append({min(size, extent) if extent else size: 1.0})
            continue
        full, rest = divmod(extent, size)
        shares = {size: full * size / extent}
        if rest:
            shares[rest] = rest / extent
        out.append(shares)
    return out


def _register_rows(refs: Sequence[CM.Reference], innermost: int, loops: Sequence[int],
                   extents: list[int | None], itemsize: int) -> int:
    """The product of the register tile's unroll factors other than the vector member's
    (its rows), from the register model over the whole band: what a tile's size along
    its rows should be a multiple of."""
    writes = [r for r in refs if r.write]
    candidates = [m for m in loops if m != innermost and writes
                  and not writes[0].invariant(m)]
    tile = RT.choose(refs, innermost, candidates, extents, CM.simd_lanes(itemsize))
    return math.prod(f for _, f in tile.factors) if tile is not None else 1


def _limits(node: isl.ScheduleNode, extents: list[int | None],
            deps: isl.UnionMap | None,
            refs: Sequence[CM.Reference] | None = None,
            innermost: int | None = None) -> list[int | None]:
    """Extents, divided by MIN_TILES for the members that parallel loops come from (a
    conv's output rows rather than a short column of its filter blocks: see
    ``_row_instead_of_column``)."""
    loops = [m for m, e in enumerate(extents) if e is None or e > 1]
    parallel = [m for m in loops if deps is not None and is_parallel_member(node, m, deps)]
    first = parallel[0] if parallel else None
    row = _row_instead_of_column(refs, extents, parallel, innermost)
    if row is not None:
        # twice as many tiles: rows are cheap to cut, and 7 tiles on 2 threads ran 4:3
        return [max(1, e // (2 * MIN_TILES)) if m == row and e is not None else e
                for m, e in enumerate(extents)]
    if len(parallel) > 1 and refs is not None and extents[first] is not None \
            and 1 < extents[first] // MIN_TILES < SHORT_TILE \
            and _invariant_bytes(refs, first) > CM.CACHE_FRACTION * CM.cache_sizes()[2]:
        # each short tile of the first parallel member streams again, from memory, what
        # stays in place along it: cut another parallel member that leaves less behind
        # (matmul at BERT's 128 x 768 x 3072: m cut to 32 re-read B, 9.4 MB, per tile,
        # 7.9 ms on one thread; n cut instead re-reads A, 0.4 MB: 4.7 ms). Tiles of 250
        # rows (PolyBench's gemm at LARGE) re-read too little to matter: there the cut
        # of n ran 5-10 % slower
        best = min(parallel, key=lambda m: (_invariant_bytes(refs, m), parallel.index(m)))
        if best != first:
            return [max(1, e // MIN_TILES) if m == best and e is not None else e
                    for m, e in enumerate(extents)]
    spread = loops[:loops.index(first) + 1] if first is not None else loops[:2]
    return [max(1, e // MIN_TILES) if m in spread and e is not None else e
            for m, e in enumerate(extents)]


def _row_instead_of_column(refs: Sequence[CM.Reference] | None, extents: list[int | None],
                           parallel: list[int], innermost: int | None) -> int | None:
    """The parallel member to cut into tiles for the parallel loop when the first one is
    a short column of a register tile (a conv's few blocks of output channels, along
    which its filter moves): cut into MIN_TILES, each tile would hold fewer blocks than
    a register tile's column, and every tile would run one block by a row of pixels,
    about one load per FMA (inception's 3 x 3 convs over 6 blocks at 28 x 28: 47 % of
    the peak). The first parallel member that is a row instead (a conv's output rows),
    or None to keep the first."""
    if refs is None or innermost is None or not parallel:
        return None
    first = parallel[0]
    if (extents[first] is None or extents[first] // MIN_TILES >= COLUMN
            or not RT.is_column(refs, innermost, first)):
        return None
    rows = [m for m in parallel[1:] if m != innermost and extents[m] is not None
            and extents[m] >= MIN_TILES and not RT.is_column(refs, innermost, m)]
    return rows[0] if rows else None


def _invariant_bytes(refs: Sequence[CM.Reference], m: int) -> float:
    """Bytes of the arrays that some reference reads in place along member m."""
    seen: dict[str, float] = {}
    for r in refs:
        if r.invariant(m) and not r.write:
            size = float(r.itemsize)
            for e in r.extents:
                size *= e if e else CM.UNKNOWN_EXTENT
            seen[r.array] = size
    return sum(seen.values())


def band_extents(node: isl.ScheduleNode) -> list[int | None]:
    """Per member: how many values it takes over the band's instances (None: depends on
    a size parameter). A member with one value once the loops around it are fixed counts
    1: it is no loop, and tiling it would only give isl's AST generator a floor and a
    modulo of outer loops to solve for (the isl in islpy 2026.2 solved one of those
    wrongly for adi)."""
    out: list[int | None] = []
    for k in range(node.band_n_member()):
        if not T.is_loop_member(node, k):
            out.append(1)
            continue
        lo: int | None = None
        hi: int | None = None
        unknown = False
        for values in U.sets_of(T.member_union_map(node, k).range()):
            vmin, vmax = values.dim_min_val(0), values.dim_max_val(0)
            if not (vmin.is_int() and vmax.is_int()):
                unknown = True
                break
            a, b = int(vmin.to_python()), int(vmax.to_python())
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else max(hi, b)
        out.append(None if unknown else 1 if lo is None or hi is None else hi - lo + 1)
    return out


def band_extent_shares(node: isl.ScheduleNode) -> list[dict[int, float] | None]:
    """Per member: {extent: share of the band's points}, where the extent is how many
    values the member takes for one value of the loops above the band. A point band of a
    tiled band has its tile size as extent in most tiles and the remainder in the last
    (1000 output channels in blocks of 16 and tiles of 12 blocks: {12: 60/63, 3: 3/63});
    ``band_extents`` sees the first only. None for a member whose extent is not a
    constant per piece, or when the band has more than one statement."""
    out: list[dict[int, float] | None] = []
    maps = U.maps_of(node.get_prefix_schedule_union_map().intersect_domain(node.get_domain()))
    for k in range(node.band_n_member()):
        if len(maps) != 1:
            out.append(None)
            continue
        values = U.maps_of(T.member_union_map(node, k))
        if len(values) != 1:
            out.append(None)
            continue
        pairs = maps[0].reverse().apply_range(values[0])  # prefix -> member value
        count = pairs.lexmax_pw_multi_aff().get_pw_aff(0).sub(
            pairs.lexmin_pw_multi_aff().get_pw_aff(0))
        pieces: list[tuple[isl.Set, isl.Aff]] = []
        count.foreach_piece(lambda s, a: pieces.append((s, a)))
        weights: dict[int, int] = {}
        for where, aff in pieces:
            value = aff.get_constant_val() if aff.is_cst() else None
            points = where.count_val() if value is not None else None
            if value is None or not value.is_int() or not points.is_int():
                weights = {}
                break
            extent = int(value.to_python()) + 1
            weights[extent] = weights.get(extent, 0) + extent * int(points.to_python())
        total = sum(weights.values())
        out.append({e: w / total for e, w in weights.items()} if total else None)
    return out


def tile_band(node: isl.ScheduleNode, sizes: Sequence[int],
              deps: isl.UnionMap) -> isl.ScheduleNode:
    """``band_tile`` with one size per member; returns the tile band (the point band is its
    child), both with exact coincident flags."""
    mv = isl.MultiVal.zero(node.band_get_space())
    for k, size in enumerate(sizes):
        mv = mv.set_at(k, int(size))
    node = node.band_tile(mv)
    node = set_coincidence(node.child(0), deps).parent()
    return set_coincidence(node, deps)


def wavefront(node: isl.ScheduleNode, deps: isl.UnionMap) -> isl.ScheduleNode:
    """Skew the tile band ``(T0, T1, ...) -> (T0 + T1, T1, ...)`` when none of its members
    is parallel and the skew makes T1 parallel; otherwise return it unchanged."""
    n = node.band_n_member()
    if n < 2 or any(is_parallel_member(node, k, deps) for k in range(n)):
        return node
    mupa = node.band_get_partial_schedule()
    skewed = mupa.set_at(0, mupa.get_at(0).add(mupa.get_at(1)))
    candidate = replace_band(node, skewed, deps)
    if not is_parallel_member(candidate, 1, deps):
        return node
    return candidate


def replace_band(node: isl.ScheduleNode, mupa: isl.MultiUnionPwAff,
                 deps: isl.UnionMap, permutable: bool = True) -> isl.ScheduleNode:
    """The band at ``node`` replaced by one with partial schedule ``mupa`` (the caller
    guarantees that the order is legal); returns the new band."""
    node = node.delete().insert_partial_schedule(mupa)
    node = node.band_set_permutable(int(permutable))
    return set_coincidence(node, deps)


def set_coincidence(node: isl.ScheduleNode, deps: isl.UnionMap) -> isl.ScheduleNode:
    """Exact coincident flags: member k is coincident iff every dependence whose ends run
    at the same outer schedule has distance 0 on member k."""
    live = _live(node, deps)
    for k in range(node.band_n_member()):
        member = T.member_union_map(node, k)
        moving = live.subtract(member.apply_range(member.reverse()))
        node = node.band_member_set_coincident(k, int(moving.is_empty()))
    return node
