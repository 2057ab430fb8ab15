"""The register tile of a contraction: which point loops are unrolled, by how much, and
how many vectors wide the vector loop is, from a model of the machine's registers.

Place in the pipeline: called by the intra-tile pass (scheduler/intratile.py) for a
point band whose statement is a reduction, once the vector member is chosen. Input: the
band's references (scheduler/cache_model.Reference), the vector member, the members that
may be unrolled (the target moves along them and they carry nothing), their extents, the
lanes per vector. Output: a RegisterTile (members -> factors, vectors per row), or None.

The model. A register tile keeps ``accumulators`` = vectors x (product of the unrolled
factors) partial results in vector registers across the reduction loops, which the
intra-tile pass moves inside the tile. Per step of the reduction every accumulator takes
one FMA; the reads cost one load per distinct element they touch in the tile: a read
that moves along the vector member is ``vectors`` vector loads per copy along the
unrolled members it moves with, a read that does not is one broadcast per such copy.
Where the printer unrolls the innermost reduction loop (a window's taps, ``taps``), a
step counts all of them, and a broadcast that moves along the taps as along a row of
the tile is loaded once per distinct element when they fit the spare registers (7
pixels under 3 taps: 9 broadcasts, not 21).
The tile must fit: accumulators + the vector operands held across the copies + RESERVED
<= the register file (the copies are ordered rows first, so one broadcast at a time is
live; a quarter of the file where the printer unrolls the innermost reduction loop, a
window's few taps, since gcc then loads the next taps' operands early); it should have
at least FMA latency x FMA ports accumulators (else the FMA units wait on their own
results), and at most 16 unless it loads at most once per two FMAs (then 24: a tile
bound by its loads gains nothing from more, and gcc spilled). Among the tiles that fit:
the fewest loads per FMA over all points, the partial register tiles at the ends of the
loops included (``_expected_cost``), then a tile whose broadcasts move along the taps
(``_along_taps``: a conv's row of pixels), then the most accumulators, then the fewest
rows of data. A tile whose column (its vector operands over the whole reduction: a
conv's filter blocks x channels x taps) does not fit L1 pays L2_LOAD per held vector per step: the
next tile along its rows reads the column again (scheduler/tiling.py cuts the reduction
tile until a cheaper tile fits). A channel-blocked convolution's best tiles are columns
of output-channel blocks (the filter's vectors) times a row of pixels (the input's
broadcasts), as in MLAS's NCHWc kernel: measured here (AVX-512, one core, NCHWc input,
hand-written C of the same shape) 7 pixels x 3 blocks ran a 14 x 14 x 1024 -> 256 1x1
conv at 187 GFLOP/s and a 28 x 28 x 128 3x3 conv at 205, against 80-107 and 117-128 for
14 or 4 x 4 pixels of one block; 28 accumulators (7 x 4) fell to 157. matmul [i, j, k]
at BERT's FFN shape: 4 rows x 4 vectors. (BLIS's and MLAS's SGEMM kernels use 6 x 4 and
12 x 2 vectors.)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from . import cache_model as CM

# the FMA's latency in cycles and the FMA units per core (Skylake-SP and later x86 cores
# with two 512-bit units; one unit halves the accumulators a tile needs, not the shape)
FMA_LATENCY = 4
FMA_PORTS = 2
# cores whose FMA takes 5 cycles instead ((vendor, family, model or None for every model),
# from the vendors' optimisation manuals): AMD's family 17h (Zen, Zen+, Zen 2) and Intel's
# Haswell. On a Zen 2 a 3x3 NCHWc conv (128 channels at 28 x 28, hand-written C, one core)
# ran 2 blocks x 5 pixels (10 accumulators) at 90 GFLOP/s, 2 x 6 at 94 and 1 block x 7
# pixels, the tile that 4 cycles x 2 units asked for, at 67
SLOW_FMA = {("AuthenticAMD", 23, None), ("GenuineIntel", 6, 60), ("GenuineIntel", 6, 63),
            ("GenuineIntel", 6, 69), ("GenuineIntel", 6, 70)}
SLOW_FMA_LATENCY = 5
# the most vectors one row of a tile spans, and the largest unroll factor considered
MAX_VECTORS = 4
MAX_FACTOR = 16
# at most this many members unrolled (isl writes factor ** members copies)
MAX_MEMBERS = 2
# registers left over for a broadcast operand and the compiler's own use (gcc spilled
# accumulators of a 28-accumulator conv tile that left it one)
RESERVED = 2
# ... and where the innermost reduction loop is unrolled, a share of the register file
# (1 / RESERVED_UNROLLED_SHARE): gcc then loads the next taps' operands early. A 3x3
# NCHWc conv with kw unrolled (hand-written C, one core, 16 channels per reduction tile)
# ran on 32 registers (AVX-512) 3 blocks x 7 pixels (24 registers with the filter
# vectors) at 183 GFLOP/s, 4 x 6 (28) at 168, 3 x 8 (27) at 156, 6 blocks x 4 rows (30)
# at 130; on 16 (AVX2, 128 channels at 28 x 28) 2 blocks x 5 pixels (12) at 90, 2 x 6
# (14) at 47, its accumulators spilled
RESERVED_UNROLLED_SHARE = 4
# the most steps of a register tile's innermost reduction loop that the printer unrolls
# (codegen/openmp.py: ``#pragma GCC unroll``): a window's taps along one axis
UNROLLED_TAPS = 8
# loads per FMA charged for the points of a partial register tile that isl writes with
# guards in its copies (codegen/promote.py then keeps no accumulator in a register):
# squeezenet's last conv, 63 channel blocks in tiles of 12 by 4-block columns, spent 45 %
# of its time in the last 3 blocks, about 16 times a full tile's time per point
UNPROMOTED = 4.0
# loads per FMA charged for each vector operand a tile reads from L2 rather than L1: a
# 3x3 NCHWc conv (256 channels at 56 x 56, one core, 32 channels per reduction tile) ran
# 6 blocks x 4 rows of pixels (a 110 KB filter column, past the 48 KB L1) at 121 GFLOP/s
# and 3 blocks x 7 pixels (55 KB) at 146; with 16 channels per reduction tile (28 KB),
# 3 x 7 ran at 183 and 4 x 6 at 168, 6 x 4 at 130 (hand-written C, kw unrolled)
L2_LOAD = 1.0


@dataclass(frozen=True)
class RegisterFile:
    """What the model knows of the machine: vector registers, their bytes, the FMA."""

    vectors: int
    vector_bytes: int
    fma_latency: int = FMA_LATENCY
    fma_ports: int = FMA_PORTS

    @property
    def min_accumulators(self) -> int:
        return self.fma_latency * self.fma_ports

    @property
    def reserved_unrolled(self) -> int:
        """Registers left over where the printer unrolls the taps (RESERVED_UNROLLED_SHARE)."""
        return self.vectors // RESERVED_UNROLLED_SHARE


def machine_registers() -> RegisterFile:
    """This machine's register file: 32 vector registers with AVX-512, else 16; its FMA
    latency from the core (``fma_latency``)."""
    width = CM.simd_bytes()
    return RegisterFile(32 if width >= 64 else 16, width, fma_latency(CM.cpu_identity()))


def fma_latency(identity: tuple[str, int, int] | None) -> int:
    """The FMA latency of a core named by (vendor, family, model) (SLOW_FMA), else
    FMA_LATENCY."""
    if identity is None:
        return FMA_LATENCY
    vendor, family, model = identity
    slow = (vendor, family, model) in SLOW_FMA or (vendor, family, None) in SLOW_FMA
    return SLOW_FMA_LATENCY if slow else FMA_LATENCY


@dataclass(frozen=True)
class RegisterTile:
    """Unroll factor per band member (members not named are not unrolled) and the number
    of vectors the vector member's register tile spans (its strip: vectors x lanes)."""

    factors: tuple[tuple[int, int], ...]
    vectors: int
    accumulators: int
    loads: int
    # loads per FMA over all of the band's points: partial tiles and L2 reads included
    expected: float = field(default=0.0, compare=False)
    # the steps of the innermost reduction loop that the printer unrolls (a window's
    # taps, ``taps``) and that ``loads`` counts together; 1 when it is not unrolled
    taps: int = 1
    # whether a broadcast operand moves along an unrolled member as along the taps (a
    # conv's row of pixels under kw): the copies then read neighbouring elements
    along_taps: bool = field(default=False, compare=False)

    @property
    def loads_per_fma(self) -> float:
        return self.loads / (self.accumulators * self.taps)


def choose(refs: Sequence[CM.Reference], vector: int, candidates: Sequence[int],
           extents: Sequence[int | None], lanes: int,
           registers: RegisterFile | None = None,
           shares: Sequence[Mapping[int, float] | None] | None = None,
           max_members: int = MAX_MEMBERS) -> RegisterTile | None:
    """The register tile for a band whose written reference is ``refs``' write (module
    doc): ``candidates`` are the members that may be unrolled (they carry nothing);
    ``shares``, per member, the extents it has in the tiles and their shares of the
    points (scheduler/tiling.band_extent_shares; else ``extents`` alone). None when no
    tile of at least two accumulators fits. At most ``max_members`` members are
    unrolled."""
    registers = registers or machine_registers()

    def spread(m: int) -> Mapping[int, float]:
        given = shares[m] if shares is not None else None
        return given or ({extents[m]: 1.0} if extents[m] else {})
    writes = [r for r in refs if r.write]
    if len(writes) != 1:
        return None
    write = writes[0]
    reads = _reads(refs, write)
    members = [m for m in candidates if m != vector and not write.invariant(m)]
    columns = {m for m in members if is_column(refs, vector, m)}
    sweep = reduction_points(refs, vector, extents)
    unrolled = taps(refs, vector, extents)
    reserved = RESERVED if unrolled is None else registers.reserved_unrolled
    best, best_key = None, None
    for vectors in range(1, MAX_VECTORS + 1):
        strip = vectors * lanes
        if extents[vector] is not None and extents[vector] < strip:
            break
        for n in range(0, min(max_members, MAX_MEMBERS) + 1):
            for chosen in itertools.combinations(members, n):
                for factors in itertools.product(range(2, MAX_FACTOR + 1), repeat=n):
                    if any(extents[m] is not None and extents[m] < f
                           for m, f in zip(chosen, factors)):
                        continue
                    unroll = dict(zip(chosen, factors))
                    if vectors > 1 and any(c in columns for c in chosen):
                        # a strip of several vectors is one row of the vector operand;
                        # copies along its columns would read several rows far apart
                        # (a matmul's packed panels: 4 rows x 3 panels x 2 vectors ran
                        # at 121 GFLOP/s, 6 rows x 4 vectors of one panel at 167)
                        continue
                    held = _held(reads, vector, vectors, unroll)
                    spare = registers.vectors - held - vectors * math.prod(unroll.values())
                    tile = _tile(reads, vector, vectors, unroll, unrolled, spare)
                    if (tile.accumulators < 2
                            or tile.accumulators + held + reserved > registers.vectors
                            or tile.accumulators > _most_accumulators(tile)):
                        continue
                    cost, partial = _expected_cost(reads, vector, vectors, unroll, strip,
                                                   spread, unrolled, spare)
                    cost += _column_cost(reads, vector, vectors, unroll, tile,
                                         sweep, registers)
                    along = _along_taps(reads, vector, unroll, unrolled)
                    key = (tile.accumulators < registers.min_accumulators, round(cost, 6),
                           not along, partial > 0, -tile.accumulators,
                           _pointers(reads, unroll))
                    if best_key is None or key < best_key:
                        best, best_key = replace(tile, expected=cost, along_taps=along), key
    return best


def taps(refs: Sequence[CM.Reference], vector: int,
         extents: Sequence[int | None]) -> tuple[int, int] | None:
    """(member, steps) of the innermost reduction loop of a register tile when the
    printer unrolls it (at most UNROLLED_TAPS constant steps: a 3x3 window's kw), else
    None. The intra-tile pass orders a tile's reduction loops as their members."""
    writes = [r for r in refs if r.write]
    if len(writes) != 1:
        return None
    reductions = [m for m in range(len(extents)) if m != vector and writes[0].invariant(m)
                  and extents[m] != 1]
    if not reductions:
        return None
    last = max(reductions)
    steps = extents[last]
    return (last, steps) if steps is not None and 1 < steps <= UNROLLED_TAPS else None


def reduction_points(refs: Sequence[CM.Reference], vector: int,
                     extents: Sequence[int | None]) -> int:
    """The reduction steps a register tile runs between loading and storing its
    accumulators: the product of the extents of the members its target stays in place
    along (an unknown extent counts as cache_model.UNKNOWN_EXTENT)."""
    writes = [r for r in refs if r.write]
    if len(writes) != 1:
        return 1
    return math.prod(e if e is not None else CM.UNKNOWN_EXTENT
                     for m, e in enumerate(extents)
                     if m != vector and writes[0].invariant(m))


def column_bytes(tile: RegisterTile, refs: Sequence[CM.Reference], vector: int,
                 extents: Sequence[int | None], registers: RegisterFile | None = None) -> int:
    """The bytes of vector operands one register tile reads over its reduction (a conv's
    filter column: blocks x channels x taps x one vector each)."""
    registers = registers or machine_registers()
    writes = [r for r in refs if r.write]
    if len(writes) != 1:
        return 0
    held = _held(_reads(refs, writes[0]), vector, tile.vectors, dict(tile.factors))
    return held * registers.vector_bytes * reduction_points(refs, vector, extents)


def _column_cost(reads: Sequence[CM.Reference], vector: int, vectors: int,
                 factors: dict[int, int], tile: RegisterTile, sweep: int,
                 registers: RegisterFile) -> float:
    """Loads per FMA charged for vector operands that come from L2: a tile's column
    (its held vectors over the whole reduction) that does not fit L1 is read again from
    L2 by the next tile along its rows, once per held vector per reduction step."""
    held = _held(reads, vector, vectors, factors)
    if held * registers.vector_bytes * sweep <= CM.cache_sizes()[1]:
        return 0.0
    return L2_LOAD * held / tile.accumulators


def is_column(refs: Sequence[CM.Reference], vector: int, m: int) -> bool:
    """Whether some vector operand (a read that moves along the ``vector`` member) moves
    along member m too: a column of the tile (conv's filter blocks), else a row."""
    writes = [r for r in refs if r.write]
    reads = _reads(refs, writes[0]) if len(writes) == 1 else [r for r in refs if not r.write]
    return any(not r.invariant(vector) and not r.invariant(m) for r in reads)


def _reads(refs: Sequence[CM.Reference], write: CM.Reference) -> list[CM.Reference]:
    """The reads other than the reduction's read of its own target."""
    return [r for r in refs if not r.write
            and not (r.array == write.array and r.steps == write.steps)]


def _most_accumulators(tile: RegisterTile) -> int:
    """A tile that loads about once per FMA is bound by the load ports, and more
    accumulators only add register pressure (conv3x3 at ResNet's shape: 1.12 ms with 16,
    1.9 ms with 21 or 24); one that loads half as often can use 24 (SGEMM's 8 x 3
    vectors, as in MLAS's 12 x 2)."""
    return 24 if tile.loads_per_fma <= 0.5 else 16


def _pointers(reads: Sequence[CM.Reference], factors: dict[int, int]) -> int:
    """Rows of data the copies read: copies along a member that moves a read in an
    outer dimension are rows apart (the last tie-break: the fewer, the fewer cache lines
    and the simpler the addresses; with constant strides every copy is one base pointer
    and a displacement, so this is no limit)."""
    total = 0
    for r in reads:
        count = 1
        for m, f in factors.items():
            if any(row[m] != 0 for row in r.steps[:-1]):
                count *= f
        total += count
    return total


def _tile(reads: Sequence[CM.Reference], vector: int, vectors: int,
          factors: dict[int, int], unrolled: tuple[int, int] | None = None,
          spare: int | None = None) -> RegisterTile:
    """The tile's accumulators and its loads per reduction step, counted over the
    ``unrolled`` taps when the innermost reduction loop is unrolled. A broadcast that
    moves along the taps as along an unrolled member (the input under a window's kw
    and a row of pixels) touches f + taps - 1 distinct elements, not f x taps, and gcc
    loads each once where they fit the ``spare`` registers, give or take one (3 blocks
    x 7 pixels of a 3x3 conv: 9 broadcasts per 63 FMAs beside 24 registers of
    accumulators and filter vectors, reloading none)."""
    accumulators = vectors
    for f in factors.values():
        accumulators *= f
    member, steps = unrolled if unrolled is not None else (None, 1)
    loads = 0
    for r in reads:
        count = 1 if r.invariant(vector) else vectors
        moves = member is not None and not r.invariant(member)
        shared = None
        if moves and r.invariant(vector):
            shared = next((m for m in factors if not r.invariant(m)
                           and _same_steps(r, m, member)), None)
        distinct = count
        for m, f in factors.items():
            if not r.invariant(m):
                count *= f
                distinct *= f + steps - 1 if m == shared else f
        if shared is not None and spare is not None and distinct <= spare + 1:
            loads += distinct
        else:
            loads += count * (steps if moves else 1)
    return RegisterTile(tuple(sorted(factors.items())), vectors, accumulators, loads,
                        taps=steps)


def _along_taps(reads: Sequence[CM.Reference], vector: int, factors: dict[int, int],
                unrolled: tuple[int, int] | None) -> bool:
    """Whether some broadcast read moves along an unrolled member as along the unrolled
    taps (``_tile``'s shared broadcast): a conv's tile along its row of pixels rather
    than down its column of rows. At equal loads the row of pixels ran faster: a 3x3
    NCHWc conv on the AVX2 machine (one core, in model context, 2 blocks x 5 pixels),
    256 channels at 14 x 14 83.6 GFLOP/s down the rows, 86.8 along them; 128 channels at
    28 x 28 80.3 and 84.0 (gcc keeps a row's broadcasts across the taps, 7 loads for 5
    pixels x 3 taps, where the rows' take 15)."""
    if unrolled is None:
        return False
    member = unrolled[0]
    return any(r.invariant(vector) and not r.invariant(member)
               and any(not r.invariant(m) and _same_steps(r, m, member) for m in factors)
               for r in reads)


def _same_steps(r: CM.Reference, m: int, other: int) -> bool:
    """Whether read r's indices move alike along members m and other."""
    return all(row[m] is not None and row[m] == row[other] for row in r.steps)


def _held(reads: Sequence[CM.Reference], vector: int, vectors: int,
          factors: dict[int, int]) -> int:
    """Vector operands kept in registers across the copies of one reduction step: the
    reads that move along the vector member (a broadcast comes from memory)."""
    held = 0
    for r in reads:
        if r.invariant(vector):
            continue
        count = vectors
        for m, f in factors.items():
            if not r.invariant(m):
                count *= f
        held += count
    return held


def _expected_cost(reads: Sequence[CM.Reference], vector: int, vectors: int,
                   factors: dict[int, int], strip: int,
                   spread: Callable[[int], Mapping[int, float]],
                   unrolled: tuple[int, int] | None = None,
                   spare: int | None = None) -> tuple[float, float]:
    """Loads per FMA over all of the band's points, partial register tiles included, and
    the share of the points in partial tiles (at equal cost, the tile without them is
    the simpler code).

    A member whose extent in some tiles is not a multiple of its factor leaves a partial
    register tile at the end of its loop. Where no member inside it (in the band's order,
    which is the order of the loops over register tiles) has a partial tile too, isl
    writes that remainder as a smaller register tile of its own, with no guard: it costs
    that tile's loads per FMA (13 pixels by 7 are a 7-pixel and a 6-pixel tile). Where
    one does, or where the member's tiles leave remainders of different sizes (tiles of
    16 and 12 pixels by 9: 7 and 3, which isl writes as one remainder loop under a
    guard; vgg19's 28 x 28 conv ran at 8 % of the peak so), the remainder's loop holds
    full and partial copies of the inner member under guards and keeps nothing in
    registers: UNPROMOTED. So is a partial strip of
    the vector member charged, although codegen/vector_tile.py now prints it as a masked
    vector in registers (ShuffleNet's 28-pixel rows: 16 + 12 lanes); the charge has not
    been measured again."""
    dims = dict(factors)
    if strip > 1:
        dims[vector] = strip
    remainders = {d: {extent % f: share * (extent % f) / extent
                      for extent, share in spread(d).items() if extent % f}
                  for d, f in dims.items()}
    partial = {d: sum(r.values()) for d, r in remainders.items()}
    full = _tile(reads, vector, vectors, factors, unrolled, spare)
    cost = max(0.0, 1.0 - sum(partial.values())) * full.loads_per_fma
    for d, rests in remainders.items():
        guarded = (d == vector or len(rests) > 1
                   or any(partial[e] > 0 for e in dims if e > d))
        for rest, share in rests.items():
            if guarded:
                cost += share * UNPROMOTED
            else:
                cost += share * _tile(reads, vector, vectors, {**factors, d: rest},
                                      unrolled, spare).loads_per_fma
    return cost, sum(partial.values())
