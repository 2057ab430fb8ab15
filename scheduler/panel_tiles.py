"""Tile sizes of a band over packed panels, as BLIS sizes its blocks: a tiling policy
detail, called by scheduler/tiling.py for a band that scheduler/panels.py packed.

Input: the band's references (scheduler/cache_model.py), its member extents, its
innermost (vector) member, the rows of its register tile and the cache sizes. Output: the
tile sizes, or None when the band is no product over packed panels.

Such a band is C(i, W jo + ji) += A(i, k) * Bp(jo, k, ji) and nothing else: the panel
Bp moves by whole rows of W elements along k (W from two vectors to a register tile's
widest strip, ji's whole extent), stays in place along i and moves by panels along jo;
C stays in place along k. Its point loops run, per panel jo, the rows of the tile in
register tiles of ``rows`` x W with k inside (scheduler/intratile.py puts columns outside
rows), so:

- kc, the tile of k: one micro-panel, kc x W elements of Bp, is read by every register
  tile of rows from L1: kc x W x itemsize fills PANEL_L1 of L1;
- mc, the tile of i: A's block, mc x kc, is read again for every panel of the tile from
  L2 and fills A_L2 of it. mc is a multiple of the register tile's rows, at least half
  of that size, and the tiles share out evenly over the threads (``_balanced``);
- nc, the tile of jo: as many panels as keep A's block, C's tile (mc x nc W, which stays
  in L2 across the k tiles) and the panels' block (kc x nc W) within BLOCK_L2 of L2, at
  most NC_PANELS.

Measured (sgemm 2048, packed, AVX-512): every mc from 48 to 192, nc from 4 to 32 and kc
from 96 to 256 ran within 5 % on one core (127-138 GFLOP/s); on two, 17 row tiles of 126
ran at 232 GFLOP/s and 18 of 114 at 277 (9 tiles each).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from . import cache_model as CM
from . import register_tile as RT

# the share of L1 one micro-panel of the packed operand fills
PANEL_L1 = 2 / 3
# the share of L2 the block of the row operand fills
A_L2 = 1 / 32
# the share of L2 that A's block, C's tile and the panels' block fill together
BLOCK_L2 = 1 / 2
# at most this many panels per tile
NC_PANELS = 8
# the thread counts the row tiles are shared out for, first what matters most (the
# machines this project runs on have 2 cores; the schedule does not depend on the count
# a call runs with)
THREADS = (2, 4)


def panel_sizes(refs: Sequence[CM.Reference], extents: Sequence[int | None], innermost: int,
                lanes: int, register_rows: Callable[[], int], caches: dict[int, int],
                limits: Sequence[int | None] | None = None) -> tuple[int, ...] | None:
    """Tile sizes for a band over packed panels (module doc), or None. ``register_rows``
    gives the register tile's rows (asked only for such a band); ``limits`` caps mc and
    nc (the tiles the parallel loop needs: scheduler/tiling._limits)."""
    roles = _roles(refs, extents, innermost, lanes)
    if roles is None:
        return None
    rows = max(1, register_rows())
    k, i, jo = roles
    width = extents[innermost]
    itemsize = max(r.itemsize for r in refs)
    sizes = [1] * len(extents)
    sizes[innermost] = width  # type: ignore[assignment]
    kc = max(1, int(PANEL_L1 * caches[1] // (width * itemsize)))  # type: ignore[operator]
    sizes[k] = CM.round_size(kc, extents[k], 1, 1)
    mc = max(rows, int(A_L2 * caches[2] // (sizes[k] * itemsize)) // rows * rows)
    if limits is not None and limits[i] is not None and limits[i] < mc:
        mc = max(rows, limits[i] // rows * rows)  # type: ignore[operator]
    sizes[i] = _balanced(mc, extents[i], rows)
    budget = BLOCK_L2 * caches[2] / itemsize - sizes[i] * sizes[k]
    nc = int(budget // (width * (sizes[k] + sizes[i])))  # type: ignore[operator]
    nc = min(nc, NC_PANELS)
    if limits is not None and limits[jo] is not None:
        nc = min(nc, limits[jo])  # type: ignore[type-var]
    sizes[jo] = CM.round_size(max(1, nc), extents[jo], 1, 1)
    return tuple(min(s, e) if e is not None else s for s, e in zip(sizes, extents))


def _balanced(size: int, extent: int | None, step: int) -> int:
    """A tile of the rows, at most ``size`` and at least half of it, a multiple of
    ``step``, whose tiles share out best over THREADS (the parallel loop runs over
    them): the busiest thread's rows over the even share, for each thread count in
    turn, then the larger tile. sgemm 2048 on 2 threads: 17 tiles of 126 rows ran at 232
    GFLOP/s, 22 of 96 at 251."""
    if extent is None:
        return size
    if size >= extent:
        return extent

    def imbalance(tile: int) -> tuple[float, ...]:
        tiles = -(-extent // tile)
        return tuple(round(-(-tiles // p) * tile * p / extent, 3) for p in THREADS)
    candidates = range(size, max(step, size // 2) - 1, -step)
    return min(candidates, key=lambda t: (imbalance(t), -t))


def _roles(refs: Sequence[CM.Reference], extents: Sequence[int | None], innermost: int,
           lanes: int) -> tuple[int, int, int] | None:
    """(k, i, jo): the members along which the panel moves by rows, stays in place, and
    moves by panels; None when no reference is a packed panel of this band or the band
    has other loops (a batch: the cache model sizes those)."""
    writes = [r for r in refs if r.write]
    width = extents[innermost]
    if len(writes) != 1 or width is None or not 2 * lanes <= width <= RT.MAX_VECTORS * lanes:
        return None
    write = writes[0]
    loops = [m for m in range(len(extents)) if m != innermost and (extents[m] or 2) > 1]
    if len(loops) != 3:
        return None
    for p in refs:
        if p.write or len(p.steps) < 2 or p.extents[-1] != width \
                or not p.unit_stride(innermost) or p.steps[-1][innermost] != 1 \
                or any(s is None for row in p.steps for s in row):
            continue
        ks = [m for m in loops if write.invariant(m) and p.steps[-1][m] == 0
              and p.steps[-2][m] == 1 and all(row[m] == 0 for row in p.steps[:-2])]
        rows = [m for m in loops if p.invariant(m) and not write.invariant(m)]
        panels = [m for m in loops if len(p.steps) >= 3 and p.steps[-3][m] == 1
                  and p.steps[-1][m] == 0 and p.steps[-2][m] == 0
                  and write.steps[-1][m] == width
                  and all(row[m] == 0 for row in write.steps[:-1])]
        if len(ks) == 1 and len(rows) == 1 and len(panels) == 1:
            return ks[0], rows[0], panels[0]
    return None
