"""Tuning spaces: the configurations a tuner may try for one kernel.

Place in the pipeline: between the scheduler and the sampler. Input: plain data about
the tiled bands of a schedule tree (a :class:`BandInfo` per band: a stable id, the
members' extents, the SIMD lanes, which members may be the vector loop), and the
analytical model's choice. Output: a :class:`TuningSpace`, a list of :class:`Knob`
(a name and its candidate values) that the sampler (sampler.py) draws, mutates and
encodes as numbers for the cost model (cost_model.py).

It reads no isl object and no scheduler module: whoever wires it into
scheduler/tiling.py (a tile-size policy seam) produces BandInfo records and turns a
configuration back into per-band sizes; this module only knows the names below.

Knob names, per band ``b`` (``band_id``: its statements' names and its position):
``b/tile<m>`` the tile size of member m (powers of two and divisors of the extent,
within the extent: ``tile_candidates``), ``b/unroll`` the unroll-and-jam factor,
``b/simd`` the member made the vector loop (-1: the model's choice), ``b/l2`` a second
level of tiles (0/1). The GPU targets' kernel bands have tile knobs only (along a
thread member the block's extent in elements), and the program the launch knobs
``gpu/threads``, ``gpu/x`` and ``gpu/grid`` (``launch_knobs``). A configuration is a
plain dict from knob name to value.

Invalid points are pruned through a caller's ``prune(config) -> bool`` (True: keep),
e.g. a tile footprint over a cache level, or too few tiles for the threads
(``min_parallel_tiles`` is one such rule). The default configuration, the model's
choice, is always in the space (its values are added to the knobs if missing) and is
never pruned: it is the point every search is measured against.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

Config = dict[str, int]
# an extent that depends on a size parameter is searched as if it were this long
UNKNOWN_EXTENT = 1024
UNROLL_FACTORS = (1, 2, 4, 8)
# how many draws sample()/mutate() make before saying the space is (nearly) all pruned
MAX_DRAWS = 1000


def tile_candidates(extent: int | None, limit: int | None = None) -> tuple[int, ...]:
    """Tile sizes worth trying along a loop of ``extent`` iterations: the powers of two
    below it and its divisors (no partial last tile), and the extent itself (one tile),
    all at most ``limit`` when given. An unknown extent gets powers of two only."""
    if extent is None:
        top = limit or UNKNOWN_EXTENT
        return tuple(1 << k for k in range(top.bit_length()) if 1 << k <= top)
    if extent < 1:
        raise ValueError(f"a loop extent must be positive, not {extent}")
    values = {1 << k for k in range(extent.bit_length()) if 1 << k <= extent}
    values.update(_divisors(extent))
    if limit is not None:
        values = {v for v in values if v <= max(1, limit)}
    return tuple(sorted(values))


def _divisors(n: int) -> set[int]:
    out = set()
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            out.update((d, n // d))
    return out


def band_id(statements: Sequence[str], position: int) -> str:
    """A band's name that survives rescheduling at other sizes: the statements under
    it (sorted) and its position among the bands on their path (0: outermost)."""
    return f"{'+'.join(sorted(statements))}@{position}"


@dataclass(frozen=True)
class Knob:
    """One dimension of the space. ``values`` sorted ascending; ``kind`` tells how it is
    encoded for the cost model: "tile" and "unroll" as log2, the rest as is."""

    name: str
    values: tuple[int, ...]
    kind: str = "tile"

    def __post_init__(self):
        if not self.values:
            raise ValueError(f"knob {self.name} has no candidate values")
        object.__setattr__(self, "values", tuple(sorted(set(int(v) for v in self.values))))

    def index(self, value: int) -> int:
        return self.values.index(int(value))

    def nearest(self, value: int) -> int:
        """The candidate closest to ``value`` (in log scale for sizes and factors)."""
        if self.kind in ("tile", "unroll") and value > 0:
            return min(self.values, key=lambda v: (abs(math.log2(max(v, 1)) - math.log2(value)), v))
        return min(self.values, key=lambda v: (abs(v - value), v))


@dataclass(frozen=True)
class BandInfo:
    """What the scheduler knows about one tiled band (plain data).

    id            band_id(...)
    extents       per member: its trip count (None: a size parameter)
    lanes         SIMD lanes of the band's narrowest element type
    simd_members  members that may be the vector loop (stride 1 for some reference);
                  empty: no simd knob
    unroll        unroll-and-jam factors to try (empty: no unroll knob)
    l2            whether a second level of tiles may be tried
    limits        per member: the largest tile size worth trying (None: the extent)
    parallel      the dependence-free members, in order: the parallel tile loop comes
                  from the first one a configuration cuts into several tiles
                  (parallel_tiles)
    members       the members with a tile knob (None: every loop member); a GPU
                  kernel band's thread and sequential members
    floors        per member: the smallest tile size worth trying (None: 1)
    """

    id: str
    extents: tuple[int | None, ...]
    lanes: int = 1
    simd_members: tuple[int, ...] = ()
    unroll: tuple[int, ...] = UNROLL_FACTORS
    l2: bool = True
    limits: tuple[int | None, ...] | None = None
    parallel: tuple[int, ...] = ()
    members: tuple[int, ...] | None = None
    floors: tuple[int, ...] | None = None

    def parallel_tiles(self, config: Mapping[str, int]) -> int:
        """The iterations of the parallel tile loop under ``config``: the tiles of the
        first ``parallel`` member it cuts into several (the parallel pass marks the first
        dependence-free tile loop, and a member one tile holds is no loop); 1 when none."""
        for m in self.parallel:
            extent = self.extents[m] or UNKNOWN_EXTENT
            tiles = -(-extent // max(1, int(config.get(f"{self.id}/tile{m}", extent))))
            if tiles > 1:
                return tiles
        return 1

    def knobs(self) -> list[Knob]:
        out = []
        for m, extent in enumerate(self.extents):
            if extent == 1 or (self.members is not None and m not in self.members):
                continue  # no loop (nothing to tile), or a size the mapping fixes
            limit = self.limits[m] if self.limits is not None else None
            values = tile_candidates(extent, limit)
            if self.floors is not None:
                values = tuple(v for v in values if v >= self.floors[m]) or values[-1:]
            out.append(Knob(f"{self.id}/tile{m}", values, "tile"))
        if self.unroll and len(set(self.unroll)) > 1:
            out.append(Knob(f"{self.id}/unroll", tuple(self.unroll), "unroll"))
        if self.simd_members:
            out.append(Knob(f"{self.id}/simd", (-1, *self.simd_members), "choice"))
        if self.l2:
            out.append(Knob(f"{self.id}/l2", (0, 1), "flag"))
        return out


@dataclass
class TuningSpace:
    """A product of knobs, minus what ``prune`` refuses, plus ``default`` always."""

    knobs: tuple[Knob, ...]
    default: Config | None = None
    prune: Callable[[Mapping[str, int]], bool] | None = None
    _by_name: dict[str, Knob] = field(init=False, repr=False)

    def __post_init__(self):
        self.knobs = tuple(self.knobs)
        names = [k.name for k in self.knobs]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate knob names in {names}")
        if self.default is None:
            # no model: the middle of every knob, a neutral start
            self.default = {k.name: k.values[len(k.values) // 2] for k in self.knobs}
        missing = set(names) ^ set(self.default)
        if missing:
            raise ValueError(f"the default configuration does not match the knobs: "
                             f"{sorted(missing)}")
        # the model's choice is always in the space, even off the candidate grid
        self.knobs = tuple(k if int(self.default[k.name]) in k.values
                           else Knob(k.name, (*k.values, int(self.default[k.name])), k.kind)
                           for k in self.knobs)
        self.default = {k.name: int(self.default[k.name]) for k in self.knobs}
        self._by_name = {k.name: k for k in self.knobs}

    @classmethod
    def from_bands(cls, bands: Sequence[BandInfo], default: Mapping[str, int] | None = None,
                   prune: Callable[[Mapping[str, int]], bool] | None = None) -> TuningSpace:
        knobs = [k for band in bands for k in band.knobs()]
        return cls(tuple(knobs), dict(default) if default is not None else None, prune)

    # ------------------------------------------------------------------ views
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.knobs)

    def knob(self, name: str) -> Knob:
        return self._by_name[name]

    def size(self) -> int:
        """How many points before pruning."""
        return math.prod(len(k.values) for k in self.knobs)

    def key(self, config: Mapping[str, int]) -> tuple[int, ...]:
        """A hashable form of a configuration (knob order)."""
        return tuple(int(config[name]) for name in self.names)

    def from_key(self, key: Sequence[int]) -> Config:
        return dict(zip(self.names, (int(v) for v in key)))

    def valid(self, config: Mapping[str, int]) -> bool:
        """Not refused by the prune hook (the default never is)."""
        if self.key(config) == self.key(self.default):
            return True
        return self.prune is None or bool(self.prune(config))

    def contains(self, config: Mapping[str, int]) -> bool:
        if set(config) != set(self.names):
            return False
        if any(int(config[k.name]) not in k.values for k in self.knobs):
            return False
        return self.valid(config)

    # ------------------------------------------------------------------ drawing
    def sample(self, rng: np.random.Generator) -> Config:
        """A uniformly drawn valid configuration (rejection sampling)."""
        for _ in range(MAX_DRAWS):
            config = {k.name: int(k.values[rng.integers(len(k.values))]) for k in self.knobs}
            if self.valid(config):
                return config
        raise RuntimeError(f"no valid configuration in {MAX_DRAWS} draws: the prune hook "
                           "refuses (nearly) the whole space")

    def mutate(self, config: Mapping[str, int], rng: np.random.Generator,
               jump: float = 0.2) -> Config:
        """``config`` with one knob changed: to a neighbouring value (one or two steps
        along the sorted candidates), or with probability ``jump`` to any other value.
        Neighbours first: performance is smooth in log tile size, apart from cliffs."""
        movable = [k for k in self.knobs if len(k.values) > 1]
        if not movable:
            return dict(config)
        for _ in range(MAX_DRAWS):
            knob = movable[rng.integers(len(movable))]
            here = knob.index(config[knob.name])
            if rng.random() < jump:
                there = int(rng.integers(len(knob.values) - 1))
                there += there >= here  # any index but here
            else:
                step = int(rng.choice((-2, -1, 1, 2), p=(0.15, 0.35, 0.35, 0.15)))
                there = min(max(here + step, 0), len(knob.values) - 1)
                if there == here:
                    continue
            out = dict(config)
            out[knob.name] = knob.values[there]
            if self.valid(out):
                return out
        return dict(config)

    def neighbours(self, config: Mapping[str, int]) -> Iterator[Config]:
        """Every valid configuration one step away along one knob."""
        for knob in self.knobs:
            here = knob.index(config[knob.name])
            for there in (here - 1, here + 1):
                if 0 <= there < len(knob.values):
                    out = dict(config)
                    out[knob.name] = knob.values[there]
                    if self.valid(out):
                        yield out

    def steps(self, a: Mapping[str, int], b: Mapping[str, int]) -> int:
        """How many one-knob steps (along each knob's sorted values) lead from ``a`` to
        ``b``."""
        return sum(abs(k.index(a[k.name]) - k.index(b[k.name])) for k in self.knobs)

    def project(self, config: Mapping[str, int]) -> Config:
        """The point of this space nearest to ``config`` (a record from other sizes):
        each knob's nearest candidate, the default's value for knobs it lacks."""
        out = {k.name: (k.nearest(int(config[k.name])) if k.name in config
                        else self.default[k.name]) for k in self.knobs}
        return out if self.valid(out) else dict(self.default)

    def points(self, limit: int = 1_000_000) -> Iterator[Config]:
        """Every valid configuration (small spaces: tests, exhaustive baselines)."""
        if self.size() > limit:
            raise ValueError(f"the space has {self.size()} points, over the limit {limit}")
        for idx in np.ndindex(*(len(k.values) for k in self.knobs)):
            config = {k.name: k.values[i] for k, i in zip(self.knobs, idx)}
            if self.valid(config):
                yield config

    # ------------------------------------------------------------------ numbers
    def encode(self, config: Mapping[str, int]) -> np.ndarray:
        """Numeric features of a configuration: log2 of sizes and factors, flags as 0/1,
        a choice (the simd member) one-hot. The default featuriser of the sampler."""
        out: list[float] = []
        for knob in self.knobs:
            v = int(config[knob.name])
            if knob.kind in ("tile", "unroll"):
                out.append(math.log2(max(v, 1)))
            elif knob.kind == "choice":
                out.extend(float(v == c) for c in knob.values)
            else:
                out.append(float(v))
        return np.asarray(out)


class Featurizer:  # a picklable callable: config -> feature row
    """Features for the cost model beyond ``space.encode``, from the bands' plain data:
    per band, log2 of the number of tiles along each member (trip counts of the tile
    loops), log2 of the tiles the parallel members give the threads, how many vectors
    fill the simd member's tile (its size over the lanes, log2), and, when the caller
    passes ``footprint(band_id, sizes) -> bytes`` (the cache model's per-reference sum),
    log2 of the tile's footprint and of its ratio to each cache level in ``caches``."""

    def __init__(self, space: TuningSpace, bands: Sequence[BandInfo],
                 footprint: Callable[[str, tuple[int, ...]], float] | None = None,
                 caches: Sequence[int] = ()):
        self.space, self.bands = space, tuple(bands)
        self.footprint, self.caches = footprint, tuple(caches)

    def sizes(self, band: BandInfo, config: Mapping[str, int]) -> tuple[int, ...]:
        """The band's tile sizes in a configuration (a member with no knob: one tile)."""
        return tuple(int(config.get(f"{band.id}/tile{m}", e or UNKNOWN_EXTENT))
                     for m, e in enumerate(band.extents))

    def __call__(self, config: Mapping[str, int]) -> np.ndarray:
        out = [self.space.encode(config)]
        for band in self.bands:
            sizes = self.sizes(band, config)
            extents = [e or UNKNOWN_EXTENT for e in band.extents]
            tiles = [-(-e // max(1, t)) for e, t in zip(extents, sizes)]
            row = [math.log2(n) for n in tiles]
            row.append(math.log2(band.parallel_tiles(config)))
            simd = int(config.get(f"{band.id}/simd", -1))
            member = simd if simd >= 0 else (band.simd_members[0] if band.simd_members
                                             else len(sizes) - 1)
            row.append(math.log2(max(1.0, sizes[member] / max(1, band.lanes))))
            if self.footprint is not None:
                bytes_ = max(1.0, float(self.footprint(band.id, sizes)))
                row.append(math.log2(bytes_))
                row += [math.log2(bytes_ / c) for c in self.caches]
            out.append(np.asarray(row))
        return np.concatenate(out)


# the GPU launch knobs' candidates: threads per block, threads along x, most blocks
# along x (a grid smaller than the tiles makes each block run several in turn)
GPU_THREADS = (64, 128, 256, 512, 1024)
GPU_X = (8, 16, 32, 64, 128)
GPU_GRID = (64, 256, 1024, 4096)
# a GPU kernel band's tile sizes: at most this many elements along a member (a block
# tile, or the sequential tile its shared buffers hold), at least GPU_TILE_MIN
GPU_TILE_LIMIT = 128
GPU_TILE_MIN = 4


def launch_knobs(axes: int, block: Sequence[int], grid_x: int) -> list[Knob]:
    """The GPU launch knobs of a program whose kernels use up to ``axes`` thread axes,
    with the default ``block`` shape and most blocks along x ``grid_x`` among them."""
    out = [Knob("gpu/threads", (*GPU_THREADS, math.prod(block)), "tile")]
    if axes >= 2:
        out.append(Knob("gpu/x", (*GPU_X, block[0]), "tile"))
    out.append(Knob("gpu/grid", (*GPU_GRID, grid_x), "tile"))
    return out


class launch_fits:  # noqa: N801 - used like a function: a picklable prune rule
    """A prune rule: no more threads along x than in the block."""

    def __call__(self, config: Mapping[str, int]) -> bool:
        return config.get("gpu/x", 0) <= config.get("gpu/threads", 1 << 30)


class min_parallel_tiles:  # noqa: N801 - used like a function: a picklable prune rule
    """A prune rule: each band's parallel tile loop must have at least ``threads``
    iterations (BandInfo.parallel_tiles; threads with nothing to do waste the machine)."""

    def __init__(self, bands: Sequence[BandInfo], threads: int):
        self.bands = tuple(bands)
        self.threads = threads

    def __call__(self, config: Mapping[str, int]) -> bool:
        return all(band.parallel_tiles(config) >= self.threads
                   for band in self.bands if band.parallel)


class all_of:  # noqa: N801 - a picklable conjunction of prune rules
    def __init__(self, *rules: Callable[[Mapping[str, int]], bool]):
        self.rules = rules

    def __call__(self, config: Mapping[str, int]) -> bool:
        return all(rule(config) for rule in self.rules)
