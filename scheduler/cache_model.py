"""The cache model: how data moves through one band, and the tile sizes that fit a cache.

Input: a band node of a schedule tree and the Program (its accesses and dtypes).
Output: per array reference, the change of every array index per unit step of every band
member (``Reference.steps``), and from those the tile footprint as a polynomial in the
tile sizes and the tile sizes chosen for a cache level (``choose_tile_sizes``).

Steps. For a statement S the full schedule is ``prefix × band × below`` (one row of
affine coefficients over S's iterators per time dimension). A unit step of band member m
with every other time dimension fixed is the direction ``x_m`` solving ``R x_m = e_m``;
the index ``f_d`` of an access then moves by ``F_d · x_m`` (F_d: its coefficients). Floor
divisions (tile members, point members ``i mod T``) are ignored: inside a tile, ``i mod T``
moves with ``i``.

Footprint. The elements a tile of sizes ``t`` touches through the references of one
group (same array, same linear part; offsets differ by ``o``) are, per array dimension d,

    span_d(t) = 1 + Σ_m |F_d·x_m| (t_m - 1) + Σ_q |F_d·x_q| (E_q - 1) + (max o_d - min o_d)

(q: loops below the band, extent E_q), capped at the array extent, and

    footprint(t) = Σ_groups itemsize · Π_d span_d(t)          (bytes; a polynomial in t)

Example, matmul S1[i, j, k]: C[i, j] += A[i, k] * B[k, j] on the band [i, j, k]:
footprint = 4 (t_i t_j + t_i t_k + t_k t_j) bytes for float32.

Sizes (``choose_tile_sizes``): the member that will be the innermost (vector) loop is
sized first, for L1: with the members that will be unrolled and jammed spanning one
register tile (the unroll factor each; ``unroll_candidates``) and the others one value, its
run must touch at most ``fraction × L1``. Every other member m gets a weight
``1 + r_m``, r_m the number of references invariant along m (data reused while m runs),
and sizes ``t_m = α (1 + r_m)`` with the largest α whose whole footprint fits
``fraction × L2``. Sizes are rounded down to a multiple of the unroll factor (of the SIMD
width for the innermost), capped at the extent, and moved down to a divisor of the extent
when one is at least half as large (else evened out over the same number of tiles).
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import islpy as isl
import numpy as np

from polycomp import islutil as U
from polycomp.ir import Program

dim = isl.dim_type

FALLBACK_CACHES = {1: 32 * 1024, 2: 1024 * 1024}
SYSFS_CACHE = "/sys/devices/system/cpu/cpu0/cache"
# the fraction of a cache level a tile's data may fill (the rest: other data, conflicts)
CACHE_FRACTION = 0.5
# an extent we cannot compute (a size parameter) counts as this long
UNKNOWN_EXTENT = 1024
# at most this many members are unrolled and jammed (unroll² copies of the body)
MAX_UNROLLED = 2


# ----------------------------------------------------------------------------- the machine

# what a data cache of each level may plausibly hold per core, in bytes; sysfs outside
# these bounds is clamped into them. Virtual machines report what the host's hypervisor
# passes through: this project's machines say 480 MiB of L3 (a whole host's, or none),
# and blocking for that would make tiles that fit no cache. Clamping also keeps the
# tiles (and the tuning signature) the same on machines of one type whose hypervisors
# report their shared caches differently.
CACHE_BOUNDS = {1: (16 * 1024, 128 * 1024), 2: (256 * 1024, 8 * 1024 ** 2),
                3: (2 * 1024 ** 2, 64 * 1024 ** 2)}


@functools.lru_cache(maxsize=1)
def cache_sizes() -> dict[int, int]:
    """Data cache capacity in bytes by level, from sysfs (32K L1 / 1M L2 if unreadable),
    sanity-checked (``sane_cache_sizes``)."""
    return sane_cache_sizes(_sysfs_cache_sizes())


def sane_cache_sizes(reported: dict[int, int]) -> dict[int, int]:
    """The levels L1 and L2 always (FALLBACK_CACHES where missing), each reported size
    clamped into CACHE_BOUNDS, and each level at least as large as the one below it."""
    sizes = {level: reported.get(level, default) for level, default in FALLBACK_CACHES.items()}
    sizes |= {level: s for level, s in reported.items() if level not in FALLBACK_CACHES}
    out: dict[int, int] = {}
    for level in sorted(sizes):
        low, high = CACHE_BOUNDS.get(level, (0, None))
        size = max(sizes[level], low)
        if high is not None:
            size = min(size, high)
        if out:
            size = max(size, out[max(out)])
        out[level] = size
    return out


def _sysfs_cache_sizes() -> dict[int, int]:
    sizes: dict[int, int] = {}
    try:
        entries = sorted(os.listdir(SYSFS_CACHE))
    except OSError:
        entries = []
    for entry in entries:
        if not entry.startswith("index"):
            continue
        path = os.path.join(SYSFS_CACHE, entry)
        try:
            level = int(_read(path, "level"))
            kind = _read(path, "type")
            size = _parse_size(_read(path, "size"))
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and level not in sizes:
            sizes[level] = size
    return sizes


def _read(directory: str, name: str) -> str:
    with open(os.path.join(directory, name)) as f:
        return f.read().strip()


def _parse_size(text: str) -> int:
    match = re.fullmatch(r"(\d+)\s*([KMG]?)B?", text.strip(), re.IGNORECASE)
    if match is None:
        raise ValueError(text)
    scale = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}[match.group(2).upper()]
    return int(match.group(1)) * scale


@functools.lru_cache(maxsize=1)
def simd_bytes() -> int:
    """The widest vector register in bytes (64 with AVX-512, 32 with AVX, else 16)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f
                          if line.startswith("flags")), [])
    except OSError:
        return 32
    if "avx512f" in flags:
        return 64
    if "avx" in flags or "avx2" in flags:
        return 32
    return 16


def cpu_identity(path: str = "/proc/cpuinfo") -> tuple[str, int, int] | None:
    """(vendor_id, cpu family, model) of the first CPU in /proc/cpuinfo, or None where it
    cannot be read (what the register model keys the FMA latency by)."""
    fields: dict[str, str] = {}
    try:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
        return fields["vendor_id"], int(fields["cpu family"]), int(fields["model"])
    except (OSError, KeyError, ValueError):
        return None


def simd_lanes(itemsize: int) -> int:
    return max(1, simd_bytes() // max(1, itemsize))


# ----------------------------------------------------------------------------- references

@dataclass(frozen=True)
class BlockedIndex:
    """An index ``scale * floor(e / divisor)`` (a block of a channel-blocked layout) or
    ``e mod divisor`` (a lane of it), e affine in the statement's variables.

    Its step along a member is no constant (it jumps once per ``divisor`` steps of e),
    so a Reference gives it none; but what a tile touches along it follows from e's
    own steps: ``span``. Without it the footprint took the whole dimension: a 1x1
    convolution over 1024 channel-blocked channels counted all of its input's channels
    in every tile, whatever the reduction tile, and got reduction tiles of 4 or 8
    channels (each reloading and storing its accumulators after 4 or 8 FMAs)."""

    divisor: int
    mod: bool
    steps: tuple[Fraction, ...]  # e's step per band member
    inner: int                   # e's range swept by the loops below the band
    scale: int = 1

    def span(self, sizes: Sequence[float]) -> float:
        """Index values the dimension takes in a tile of ``sizes``, the tile aligned to
        the blocks (tiles of whole blocks, or of a divisor of one, start at a block's
        first lane: 64 channels are 8 blocks of 8 lanes, 4 channels one block's 4)."""
        swept = 1.0 + self.inner + sum(float(abs(step)) * (size - 1)
                                      for step, size in zip(self.steps, sizes) if step)
        if self.mod:
            return min(float(self.divisor), swept)
        return abs(self.scale) * (math.ceil(swept / self.divisor) - 1) + 1.0


@dataclass(frozen=True)
class Reference:
    """One access of one statement, seen from a band.

    steps        per array dimension, per band member: how much the index moves for a unit
                 step of the member (None: not affine, or the member is no direction of S)
    inner        per array dimension: the index range swept by the loops below the band
    offset       per array dimension: the constant part (groups references)
    key          array, steps and parameter terms: references with equal keys touch the
                 same elements up to their offsets (one group in the footprint)
    blocked      per array dimension: the BlockedIndex where the index is a block or a
                 lane of a channel-blocked layout (its steps are None), else None
    """

    statement: str
    array: str
    itemsize: int
    extents: tuple[int | None, ...]
    steps: tuple[tuple[Fraction | None, ...], ...]
    inner: tuple[int, ...]
    offset: tuple[int, ...]
    key: str
    write: bool
    blocked: tuple[BlockedIndex | None, ...] = ()

    @functools.cached_property
    def float_steps(self) -> tuple[tuple[float, ...] | None, ...]:
        """``steps`` as magnitudes in floats, per array dimension (None where a step is
        unknown): what ``footprint``, called for every tile size tried, reads."""
        return tuple(None if any(v is None for v in row) else tuple(float(abs(v)) for v in row)
                     for row in self.steps)

    @functools.cached_property
    def _invariant_members(self) -> frozenset[int]:
        width = len(self.steps[0]) if self.steps else 0
        return frozenset(m for m in range(width) if all(row[m] == 0 for row in self.steps))

    def invariant(self, m: int) -> bool:
        """The same element for every value of member m."""
        if not self.steps:
            return True
        return m in self._invariant_members

    def unit_stride(self, m: int) -> bool:
        """Consecutive elements (or the same one) along member m: row-major, so the last
        index moves by ±1 and the others do not move."""
        if not self.steps:
            return True
        *outer, last = self.steps
        return all(row[m] == 0 for row in outer) and last[m] in (1, -1)


def band_references(node: isl.ScheduleNode, program: Program) -> list[Reference]:
    """Every read and write of every statement scheduled by the band at ``node``."""
    domain = node.get_domain()
    prefix = node.get_prefix_schedule_union_map()
    full = prefix.flat_range_product(node.get_subtree_schedule_union_map())
    n_prefix = _n_out(prefix)
    n_band = node.band_n_member()
    out: list[Reference] = []
    for piece in U.sets_of(domain):
        name = piece.get_tuple_name()
        try:
            stmt = program.statement(name)
        except KeyError:
            continue
        smap = next(m for m in U.maps_of(full) if m.get_tuple_name(dim.in_) == name)
        rows = [_linear_row(pa) for pa in _pw_affs(smap)]
        directions = [_plain(x) for x in _directions(rows, n_prefix, n_band)]
        inner_dirs = [(_plain(_directions_one(rows, q)), _extent(smap, piece, q))
                      for q in range(n_prefix + n_band, len(rows)) if any(rows[q])]
        for access, write in [(stmt.write, True)] + [(r, False) for r in stmt.reads]:
            out.append(_reference(name, access, write, directions, inner_dirs, program))
    return out


def _n_out(umap: isl.UnionMap) -> int:
    maps = U.maps_of(umap)
    return maps[0].dim(dim.out) if maps else 0


def _pw_affs(smap: isl.Map) -> list[isl.PwAff]:
    pma = isl.PwMultiAff.from_map(smap)
    return [pma.get_pw_aff(k) for k in range(smap.dim(dim.out))]


def _linear_row(pa: isl.PwAff) -> list[Fraction]:
    """The coefficients of the input dimensions (floor divisions left out)."""
    pieces = pa.get_pieces()
    if not pieces:
        return [Fraction(0)] * pa.dim(dim.in_)
    aff = pieces[0][1]
    return [Fraction(str(aff.get_coefficient_val(dim.in_, j))) for j in range(aff.dim(dim.in_))]


def _directions(rows: list[list[Fraction]], n_prefix: int,
                n_band: int) -> list[list[Fraction]]:
    return [_directions_one(rows, n_prefix + m) for m in range(n_band)]


def _directions_one(rows: list[list[Fraction]], target: int) -> list[Fraction]:
    """x with rows[target]·x = 1 and every other row · x = 0. Zero when there is no such
    step: the member is constant for this statement (it runs at one value only) or a
    combination of the other dimensions."""
    width = len(rows[target])
    if not any(rows[target]):
        return [Fraction(0)] * width
    system = [row + [Fraction(int(k == target))] for k, row in enumerate(rows) if any(row)]
    return _solve(system, width) or [Fraction(0)] * width


def _solve(augmented: list[list[Fraction]], width: int) -> list[Fraction] | None:
    """A solution of the linear system (free variables 0), or None if inconsistent."""
    m = [row[:] for row in augmented]
    pivots: list[int] = []
    r = 0
    for c in range(width):
        pivot = next((k for k in range(r, len(m)) if m[k][c] != 0), None)
        if pivot is None:
            continue
        m[r], m[pivot] = m[pivot], m[r]
        m[r] = [v / m[r][c] for v in m[r]]
        for k in range(len(m)):
            if k != r and m[k][c] != 0:
                m[k] = [a - m[k][c] * b for a, b in zip(m[k], m[r])]
        pivots.append(c)
        r += 1
    if any(row[width] != 0 for row in m[r:]):
        return None
    x = [Fraction(0)] * width
    for k, c in enumerate(pivots):
        x[c] = m[k][width]
    return x


def _extent(smap: isl.Map, piece: isl.Set, q: int) -> int:
    values = smap.intersect_domain(piece).range()
    lo, hi = values.dim_min_val(q), values.dim_max_val(q)
    if lo.is_int() and hi.is_int():
        return int(hi.to_python()) - int(lo.to_python()) + 1
    return UNKNOWN_EXTENT


def _reference(name: str, access: isl.Map, write: bool,
               directions: list[list[Fraction]],
               inner_dirs: list[tuple[list[Fraction], int]],
               program: Program) -> Reference:
    array_name = access.get_tuple_name(dim.out)
    array = program.array(array_name)
    itemsize = np.dtype(array.dtype).itemsize
    extents = tuple(U.pw_aff_value(pa, {}) if not U.param_names(pa) else None
                    for pa in array.shape)
    affs = _access_affs(access)
    steps, inner, offset, key, blocked = [], [], [], [array_name], []
    for d in range(access.dim(dim.out)):
        aff = affs[d] if affs is not None else None
        if aff is None or aff.dim(dim.div):
            # not affine (a channel-blocked index: c / 16, c mod 16): no step, except
            # along the members whose directions leave every variable it reads alone
            steps.append(tuple(_quasi_step(aff, x) for x in directions))
            inner.append(extents[d] if d < len(extents) and extents[d] else UNKNOWN_EXTENT)
            offset.append(0)
            block = _blocked_index(aff, directions, inner_dirs) if aff is not None else None
            blocked.append(block)
            key.append(f"?{d}" if block is None else
                       f"?{d}:{block.scale},{block.divisor},{int(block.mod)},"
                       + ",".join(map(str, block.steps)))
            continue
        blocked.append(None)
        coeffs = _plain([Fraction(str(aff.get_coefficient_val(dim.in_, j)))
                         for j in range(aff.dim(dim.in_))])
        steps.append(tuple(_dot(coeffs, x) for x in directions))
        inner.append(int(sum(abs(_dot(coeffs, x)) * (e - 1) for x, e in inner_dirs)))
        const = aff.get_constant_val()
        offset.append(int(const.to_python()) if const.is_int() else 0)
        params = [str(aff.get_coefficient_val(dim.param, j)) for j in range(aff.dim(dim.param))]
        key.append(",".join(map(str, steps[-1])) + "|" + ",".join(params))
    return Reference(name, array_name, itemsize, extents, tuple(steps), tuple(inner),
                     tuple(offset), ";".join(key), write,
                     tuple(blocked) if any(b is not None for b in blocked) else ())


def _blocked_index(aff: isl.Aff, directions: list[list[int | Fraction]],
                   inner_dirs: list[tuple[list[int | Fraction], int]]) -> BlockedIndex | None:
    """The BlockedIndex an index with one floor division is, where it is ``c *
    floor(e / B) + const`` or ``e mod B`` (isl: ``e - B * floor(e / B)``) with e
    affine; else None."""
    if aff.dim(dim.div) != 1:
        return None
    div = aff.get_div(0)
    divisor = div.get_denominator_val()
    scale = aff.get_coefficient_val(dim.div, 0)
    if not divisor.is_int() or not scale.is_int() or div.dim(dim.div) > 1:
        return None
    b = int(divisor.to_python())
    c = int(scale.to_python())
    n = aff.dim(dim.in_)
    numerator = [Fraction(str(div.get_coefficient_val(dim.in_, j))) * b for j in range(n)]
    linear = [Fraction(str(aff.get_coefficient_val(dim.in_, j))) for j in range(n)]
    if any(v.denominator != 1 for v in numerator) or b < 2:
        return None
    if any(aff.get_coefficient_val(dim.param, j).is_zero() is False
           for j in range(aff.dim(dim.param))):
        return None
    if not any(linear):
        mod = False
    elif c == -b and linear == numerator:
        mod, c = True, 1
    else:
        return None
    e = _plain(numerator)
    return BlockedIndex(b, mod, tuple(_dot(e, x) for x in directions),
                        int(sum(abs(_dot(e, x)) * (extent - 1) for x, extent in inner_dirs)),
                        c)


def _access_affs(access: isl.Map) -> list[isl.Aff | None] | None:
    """One quasi-affine expression per array dimension (None where the index is not one
    expression over the whole domain)."""
    if not access.is_single_valued():
        return None
    pma = isl.PwMultiAff.from_map(access)
    out: list[isl.Aff | None] = []
    for d in range(access.dim(dim.out)):
        pieces = pma.get_pw_aff(d).get_pieces()
        out.append(pieces[0][1] if len(pieces) == 1 else None)
    return out


def _quasi_step(aff: isl.Aff | None, direction: Sequence[Fraction]) -> Fraction | None:
    """The step of a quasi-affine index along a direction: 0 when the direction moves
    none of the statement's variables the index involves, else None (unknown)."""
    if aff is None:
        return None
    moved = [j for j, v in enumerate(direction) if v != 0]
    if any(aff.involves_dims(dim.in_, j, 1) for j in moved):
        return None
    return Fraction(0)


def _plain(row: Sequence[Fraction]) -> list[int | Fraction]:
    """The row with its integral entries as ints: the dot products below run per
    reference and band member, and Fraction arithmetic was a sixth of a model's compile."""
    return [int(v) if v.denominator == 1 else v for v in row]


def _dot(a: Sequence[int | Fraction], b: Sequence[int | Fraction]) -> int | Fraction:
    total: int | Fraction = 0
    for x, y in zip(a, b):
        if x and y:
            total += x * y
    return total


# ----------------------------------------------------------------------------- footprints

def footprint(refs: Sequence[Reference], sizes: Sequence[float]) -> float:
    """Bytes touched by one tile of ``sizes`` (the polynomial in the module docstring)."""
    groups: dict[str, list[Reference]] = {}
    for ref in refs:
        groups.setdefault(ref.key, []).append(ref)
    total = 0.0
    for members in groups.values():
        ref = members[0]
        elements = 1.0
        for d, row in enumerate(ref.float_steps):
            block = ref.blocked[d] if ref.blocked else None
            if block is not None:
                span = block.span(sizes)
            elif row is None:
                span = float(ref.extents[d] or UNKNOWN_EXTENT)
            else:
                spread = max(r.offset[d] for r in members) - min(r.offset[d] for r in members)
                span = 1.0 + ref.inner[d] + spread
                for m, step in enumerate(row):
                    span += step * (sizes[m] - 1)
            cap = ref.extents[d] if d < len(ref.extents) else None
            elements *= min(span, cap) if cap else span
        total += elements * ref.itemsize
    return total


def reuse(refs: Sequence[Reference], n_members: int) -> list[int]:
    """Per member: how many references are invariant along it (data reused as it runs)."""
    return [sum(1 for r in refs if r.invariant(m)) for m in range(n_members)]


def has_reuse(refs: Sequence[Reference], members: Sequence[int]) -> bool:
    """Some reference touches one element from several iterations of the band (its steps
    along ``members`` have rank below their number: a direction in the band keeps it in
    place), or walks a cache line along a member that is not the innermost (a transpose:
    the line is reused only if the inner loops come back before it is evicted). Without
    either, every tile streams through its data once, as the untiled loops do, and tiling
    gains nothing (a spatial stencil sweep)."""
    for ref in refs:
        if any(ref.unit_stride(m) and not ref.invariant(m) for m in members[:-1]):
            return True
        rows = [[row[m] for m in members] for row in ref.steps]
        if any(v is None for row in rows for v in row):
            continue
        if _rank(rows, len(members)) < len(members):
            return True
    return False


def _rank(rows: list[list[Fraction | None]], width: int) -> int:
    m = [[Fraction(v) for v in row] for row in rows]  # type: ignore[arg-type]
    rank = 0
    for c in range(width):
        pivot = next((k for k in range(rank, len(m)) if m[k][c] != 0), None)
        if pivot is None:
            continue
        m[rank], m[pivot] = m[pivot], m[rank]
        for k in range(len(m)):
            if k != rank and m[k][c] != 0:
                f = m[k][c] / m[rank][c]
                m[k] = [a - f * b for a, b in zip(m[k], m[rank])]
        rank += 1
    return rank


def innermost_candidate(refs: Sequence[Reference], members: Sequence[int]) -> int | None:
    """The member with the most unit-stride references (the intra-tile pass makes it the
    innermost loop): ties go to the later member."""
    best, best_score = None, -1.0
    for m in members:
        score = stride_score(refs, m)
        if score >= best_score:
            best, best_score = m, score
    return best


def unroll_candidates(refs: Sequence[Reference], innermost: int, members: Sequence[int],
                      extents: Sequence[int | None] | None = None,
                      factor: int = 1, independent: Callable[[int], bool] | None = None
                      ) -> tuple[int, ...]:
    """The members the intra-tile pass unrolls and jams around the ``innermost`` (vector)
    loop, best first: those along which some reference stays in place while it moves along
    the innermost one (loaded once in the vector loop, shared by every copy), at most
    MAX_UNROLLED of them, and only members with at least ``factor`` values. Members whose
    copies are ``independent`` (they carry no dependence) come before the others: copies
    along a reduction member update one accumulator one after the other, a chain as long
    as the unroll, where conv's output rows and columns give one accumulator each."""

    def score(m: int) -> int:
        return sum(1 for r in refs if r.invariant(m) and not r.invariant(innermost))

    candidates = [m for m in members if m != innermost and score(m) > 0
                  and (extents is None or extents[m] is None or extents[m] >= factor)]
    candidates.sort(key=lambda m: (independent is not None and not independent(m), -score(m)))
    return tuple(candidates[:MAX_UNROLLED])


def strided(refs: Sequence[Reference], m: int) -> bool:
    """Some reference jumps in memory along member m (a gather or scatter in SIMD code, a
    cache miss per instance). References of statements that member m does not move
    (steps None) do not count."""
    return any(all(row[m] is not None for row in r.steps)
               and not r.invariant(m) and not r.unit_stride(m) for r in refs)


def stride_score(refs: Sequence[Reference], m: int) -> float:
    """Unit-stride references count 1, invariant ones 1/2 (no vector load at all, but no
    vector work either), others 0."""
    score = 0.0
    for r in refs:
        if r.invariant(m):
            score += 0.5
        elif r.unit_stride(m):
            score += 1.0
    return score


@dataclass(frozen=True)
class TileChoice:
    sizes: tuple[int, ...]
    footprint: float
    capacity: float


def choose_tile_sizes(refs: Sequence[Reference], extents: Sequence[int | None],
                      capacity: float, unroll: int = 1, lanes: int = 1,
                      innermost: int | None = None, row_capacity: float | None = None,
                      limits: Sequence[int | None] | None = None,
                      minimum: int = 2,
                      unrolled: Sequence[int] | None = None) -> TileChoice:
    """Tile sizes whose footprint fits ``capacity`` bytes (see the module doc).

    With ``innermost`` and ``row_capacity``, that member is sized first: the data one run
    of it touches while the ``unrolled`` members (default: all others) span one register
    tile (``unroll`` values each) and the rest one value must fit ``row_capacity`` (the L1
    share). The other members then grow in proportion to
    ``1 + reuse`` until the whole tile fills ``capacity``. Sizes are multiples of
    ``unroll`` (of ``lanes`` for the innermost member), at most the member's extent, and
    moved down to a divisor of the extent when one is at least half as large (no
    partial tiles), else evened out over as many tiles. ``limits`` (default: the extents)
    caps sizes further, e.g. to leave several tiles for the parallel loop."""
    n = len(extents)
    limit = list(limits) if limits is not None else list(extents)
    weights = [1.0 + r for r in reuse(refs, n)]
    fixed: dict[int, float] = {m: 1.0 for m in range(n) if extents[m] == 1}
    step = _steps(n, unroll, lanes, innermost)
    if innermost is not None and row_capacity and innermost not in fixed:
        row = [fixed.get(m, float(min(max(1, unroll), extents[m] or unroll))
                         if unrolled is None or m in unrolled else 1.0) for m in range(n)]

        def with_inner(size: float) -> list[float]:
            return [size if m == innermost else row[m] for m in range(n)]

        size = _largest(lambda t: footprint(refs, with_inner(t)) <= row_capacity)
        if limit[innermost] is not None:
            size = min(size, float(limit[innermost]))  # type: ignore[arg-type]
        fixed[innermost] = float(round_size(size, extents[innermost], step[innermost], minimum))
    # grow α by bisection; members that reach their extent are fixed there and the rest grow on
    for _ in range(n + 1):
        def sizes_at(alpha: float) -> list[float]:
            return [fixed.get(m, max(1.0, alpha * weights[m])) for m in range(n)]
        sizes = sizes_at(_largest(lambda a: footprint(refs, sizes_at(a)) <= capacity))
        capped = {m: float(limit[m]) for m in range(n) if m not in fixed  # type: ignore[arg-type]
                  and limit[m] is not None and sizes[m] >= limit[m]}  # type: ignore[operator]
        if not capped:
            break
        fixed.update(capped)
    rounded = tuple(_within_limit(
        int(sizes[m]) if m in fixed and m == innermost else
        int(round_size(sizes[m], extents[m], step[m], minimum)), extents[m], limit[m])
        for m in range(n))
    return TileChoice(rounded, float(footprint(refs, rounded)), capacity)


def _within_limit(size: int, extent: int | None, limit: int | None) -> int:
    """``size``, or when rounding to the unroll step took it past a ``limit`` below the
    extent (the tiles left for the parallel loop) and still leaves several tiles, the
    largest divisor of the extent within the limit: batched matmul's 12 batches made 3
    tiles of 4 on 2 threads (one thread did two), where the limit asked for at least 4.
    A member rounded up to one whole tile is left so: the parallel loop then comes from
    a deeper member, and the tile keeps its reuse (conv 1x1's 4 channel blocks, tiled
    by 1, streamed the input 4 times: 23 % slower)."""
    if (limit is None or extent is None or limit >= extent or size <= limit
            or size >= extent):
        return size
    return max(d for d in range(1, limit + 1) if extent % d == 0)


def _steps(n: int, unroll: int, lanes: int, innermost: int | None) -> list[int]:
    u = max(1, unroll)
    return [u * lanes // int(np.gcd(u, lanes)) if m == innermost else u for m in range(n)]


def _largest(fits, limit: float = 1e7) -> float:
    """The largest x >= 0 with fits(x) (fits is monotone), by doubling and bisection."""
    lo, hi = 0.0, 1.0
    while fits(hi) and hi < limit:
        lo, hi = hi, hi * 2
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def round_size(size: float, extent: int | None, step: int, minimum: int) -> int:
    """``size`` as a tile: a multiple of ``step``, at least ``minimum``, at most the
    extent, moved down to a divisor of the extent when one is at least half as large,
    else evened out over as many tiles (no small last tile)."""
    if extent == 1:
        return 1
    if extent is not None and size >= extent:
        return int(extent)
    value = max(int(size) // step * step, step, minimum)
    if extent is not None:
        divisors = [d for d in range(value, value // 2, -step) if extent % d == 0]
        if divisors:
            return divisors[0]
        # as many tiles as with ``value``, evened out: no small last tile
        tiles = -(-extent // value)
        balanced = -(-(-(-extent // tiles)) // step) * step
        return min(value, balanced)
    return value
