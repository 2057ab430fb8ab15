"""GPU mapping: which subtrees run as device kernels, and which loops their blocks and
threads share out. The pass of the ``cuda`` and ``cuda-emulated`` targets.

Place in the pipeline: after the scheduler, instead of the CPU tiling (the GPU targets
set ``Target.neutral_tiling`` off: tile sizes here are the blocks' shapes, not the
caches'), before the legality check; ``check_mapping`` (the targets' ``annotate``)
checks the mapped loops, and codegen/cuda.py prints the marks. The next pass,
scheduler/gpu_promotion.py (shared-memory and register promotion, issue 14 item 3),
puts its marks above each kernel's outermost thread mark (below the block loops and the
sequential tile band) and below its innermost thread band.

What the marks mean (scheduler/tree.py names them):

- ``kernel`` above a subtree: it runs on the device as one ``__global__`` launch, once
  per iteration of the host loops around it (sequential on the host; launches on one
  stream run in order, so dependences between kernels and host iterations hold);
- ``block`` / ``thread`` above a single-member band: that loop's iterations are shared
  out over the blocks (threads) along one axis, as a strided loop
  ``for (c = start(idx); c <= ub; c += dim)``, where the owner of a value v is
  ``v mod dim``: any grid or block size runs every iteration exactly once, and a value
  has the same owner wherever the loop is printed. The innermost block (thread) mark on
  a path is axis x, the next y, then z (PPCG's convention), so the member along which the
  arrays are contiguous is put innermost among the thread members: neighbouring threads
  of a warp touch neighbouring elements.

The condition a mapped member keeps (``mappable``): every dependence between two
instances of the kernel that agree on the host loops around it (the reductions' chains
included: a reduction stays in one thread, sequential, except in a block reduction,
below) has distance 0 on it. Then any
two dependent instances of a kernel run in one thread, in the schedule's order, and no
barrier is needed for them (gpu_promotion's shared tiles bring their own barriers).
That is stronger than isl's coincidence (which takes the loops between the kernel and
the member as fixed): a thread may run a sequential loop (the k of a matmul) around its
points, and no thread waits for another.

Placement, per outermost band on each path (a sequence or set node at host level gives
one kernel per child): the fewest leading band members that must stay on the host (a
time loop) so that some member below is mappable; when no member at any depth is, the
subtree runs as a single-thread kernel (grid 1, block 1) rather than failing. In the
kernel band, up to len(block) (default 2; 1 when one member is mappable) mappable
members go to threads, the one with the most unit-stride references as x, and up to
len(grid) (default 3) to blocks: the tiles of the thread members first, then other
mappable members. A permutable band (``Options.tile``) is tiled, PPCG-like:

    band [m, n, k]        kernel
                            block  [floor(m/8)]          (axis y)
                              block  [floor(n/32)]       (axis x)
                                band [floor(k/32)]
                                  thread [m mod 8]       (axis y)
                                    thread [n mod 32]    (axis x)
                                      band [k mod 32]

with tile sizes the block's extents along the thread members, 1 along block-only
members, SEQUENTIAL_TILE along the others. A band that is not permutable keeps its
order: each thread member is strip-mined in place ([m] -> [floor(m/B)] [m mod B], the
same order), which is always legal.

Block reductions (scheduler/gpu_reduction.py, ``Options.gpu_block_reduction``): before
the above, a band whose members are all mappable but one reduction loop r, whose
mappable members have fewer iterations than a block's threads and whose r is long,
becomes block marks on the other members (one band each, no tiles) and a thread mark
on r under a ``reduce:S1`` mark: the threads accumulate partials of S1 along r, the
block combines them (codegen/cuda_reduction.py). ``check_mapping`` checks such a thread
loop with gpu_reduction.reduction_relaxes instead of ``mappable``.

Row blocks (scheduler/gpu_rows.py, the same option), tried before that: a band whose
loop members are all mappable above a sequence of a row's loops (softmax, layernorm)
becomes block marks on its members, a ``rows`` mark above the sequence and a thread
mark (with a reduce mark for a reduction) above each child's loop; codegen puts a
barrier after each child. ``check_mapping`` checks the rows marks (gpu_rows.check_rows)
and refuses a thread loop around only some of its kernel's statements when a dependence
joins them to the others outside a rows mark (no barrier would order them).

Block and grid sizes: ``Options.gpu_block`` (threads per block along x, y, z; its length
is how many members may go to threads; at most 1024 threads in all) and
``Options.gpu_grid`` (the most blocks along x, y, z; its length is how many members may
go to blocks); None chooses (DEFAULT_BLOCKS; grids as large as the loops, within
GRID_LIMITS). Codegen takes the same sizes (``block_shape``). Both, and each kernel
band's tile sizes, pass through the tile policy (scheduler/tiling.py: ``gpu_launch``,
``gpu_tiles``), where a tuner's configuration (``Options.band_config``) replaces them;
a kernel's block is its thread members' tiles, at most the launch shape along each axis
(a larger tile gives each thread several elements, strided by the block).

Which schedule (``map_to_gpu``): Pluto's tree skews a stencil's space loops by time so
that a CPU can tile it; mapped to a GPU, the skewed loop then has to stay on the host,
one launch per step of it. Under scheduler="pluto" with known sizes, a mapping with
launches in host loops or work in single-thread kernels is compared by ``mapping_cost``
with the mapping of isl's tree (outer parallelism first, as PPCG schedules for GPUs),
and the cheaper is taken when it costs under half. Another scheduler named by the user
is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import islpy as isl

from polycomp import islutil as U
from polycomp.errors import IllegalScheduleError, PolycompError
from polycomp.ir import Program
from polycomp.options import GRID_AXIS_LIMITS, Options

from . import cache_model as CM
from . import gpu_reduction as R
from . import gpu_rows as GR
from . import tree as T
from .dependences import Dependences
from .tiling import (BandTiling, BandView, band_extents, is_permutable, observe,
                     observe_bands, policy_for, replace_band, tile_band)

# blocks along x, y, z (polycomp/options.py checks Options.gpu_block and gpu_grid
# against CUDA's limits)
GRID_LIMITS = GRID_AXIS_LIMITS
# threads per block by the number of thread axes, when Options.gpu_block is None: a warp
# along x (coalesced), 256 threads in all
DEFAULT_BLOCKS = {1: (256,), 2: (32, 8), 3: (32, 4, 2)}
DEFAULT_BLOCK_AXES = 2  # thread axes mapped when Options.gpu_block is None
DEFAULT_GRID_AXES = 3  # block axes mapped when Options.gpu_grid is None
# tile size along the band members no block or thread takes (a matmul's k): each thread
# runs them itself; a tile of them is what gpu_promotion stages in shared memory
SEQUENTIAL_TILE = 32

GPU_MARKS = (T.MARK_KERNEL, T.MARK_BLOCK, T.MARK_THREAD)


def block_shape(options: Options, axes: int) -> tuple[int, ...]:
    """Threads per block along the first ``axes`` axes (x first): Options.gpu_block or
    DEFAULT_BLOCKS, reshaped by a configuration's launch knobs (the tile policy)."""
    if axes == 0:
        return ()
    if options.gpu_block is not None:
        shape = tuple(options.gpu_block[:axes])
    else:
        shape = DEFAULT_BLOCKS[axes]
    return policy_for(options).gpu_launch(shape, GRID_LIMITS[0])[0]


def thread_axes(options: Options) -> int:
    return len(options.gpu_block) if options.gpu_block is not None else DEFAULT_BLOCK_AXES


def grid_axes(options: Options) -> int:
    return len(options.gpu_grid) if options.gpu_grid is not None else DEFAULT_GRID_AXES


def grid_limit(options: Options, axis: int) -> int:
    """The most blocks along ``axis`` (0: x): Options.gpu_grid's, within CUDA's."""
    if options.gpu_grid is not None and axis < len(options.gpu_grid):
        limit = min(options.gpu_grid[axis], GRID_LIMITS[axis])
    else:
        limit = GRID_LIMITS[axis]
    if axis == 0:
        limit = min(policy_for(options).gpu_launch((), limit)[1], GRID_LIMITS[0])
    return limit


def has_gpu_marks(schedule: isl.Schedule) -> bool:
    return any(T.is_mark(n) and n.mark_get_id().get_name() in GPU_MARKS
               for n in T.nodes(schedule))


# ----------------------------------------------------------------------------- the pass

def map_to_gpu(schedule: isl.Schedule, program: Program, deps: Dependences,
               options: Options) -> isl.Schedule:
    """The tree with ``kernel``, ``block`` and ``thread`` marks (module doc). A tree that
    has GPU marks already (a user's, ``scheduler="custom"``) is kept as it is; the
    targets check it (``check_mapping``). Under the default scheduler, a mapping that
    leaves launches in host loops or work in single-thread kernels is compared with the
    mapping of isl's schedule (``outer_parallel``), and the cheaper one is taken."""
    if has_gpu_marks(schedule):
        return schedule
    mapped, seen = _mapped(schedule, program, deps, options)
    if options.scheduler == "pluto" and not program.params:
        cost = mapping_cost(mapped)
        # more than one launch per kernel, or serial work: isl's tree may do better
        other = (outer_parallel(program, deps, options)
                 if cost > LAUNCH_MICROSECONDS * count_kernels(mapped) else None)
        if other is not None:
            alternative, also = _mapped(other, program, deps, options)
            if mapping_cost(alternative) < CHOICE_MARGIN * cost:
                mapped, seen = alternative, also
    for band in seen:  # the kernel bands of the tree taken, for observe_bands
        observe(band)
    return mapped


def _mapped(schedule: isl.Schedule, program: Program, deps: Dependences,
            options: Options) -> tuple[isl.Schedule, list]:
    """The mapping of ``schedule`` and the kernel bands it reported."""
    with observe_bands() as seen:
        mapped = _Mapper(program, deps, options).host(schedule.get_root()).get_schedule()
    return mapped, list(seen)


# the cost of a mapping (mapping_cost), in microseconds: a launch, and a statement
# instance run by a single-thread kernel (a GPU thread alone runs about 50 M simple
# statements a second); parallel work counts the same in any mapping and is left out
LAUNCH_MICROSECONDS = 5.0
SERIAL_MICROSECONDS = 0.02
# the other mapping must cost less than this share of the first to be taken
CHOICE_MARGIN = 0.5


def outer_parallel(program: Program, deps: Dependences,
                   options: Options) -> isl.Schedule | None:
    """isl's schedule of the program (outer coincidence first, as PPCG schedules for
    GPUs: Pluto's skewing for tiles gives stencils their locality on a CPU but leaves
    a GPU only a wavefront, one launch per step of the skewed loop); None when the isl
    scheduler fails."""
    from . import get_scheduler  # noqa: PLC0415 - the package imports this module

    try:
        return get_scheduler("isl")(program, deps, options)
    except PolycompError:
        return None


def count_kernels(schedule: isl.Schedule) -> int:
    return sum(1 for n in T.nodes(schedule) if T.is_mark(n, T.MARK_KERNEL))


def mapping_cost(schedule: isl.Schedule) -> float:
    """Microseconds a mapped tree spends beyond its parallel work: a launch per kernel
    and iteration of the host loops around it, and the instances of single-thread
    kernels (bounding boxes of the specialised sets: an estimate, for comparing
    mappings of one program)."""
    cost = 0.0
    for node in T.nodes(schedule):
        if not T.is_mark(node, T.MARK_KERNEL):
            continue
        domain = node.get_domain()
        launches = _box_points(node.get_prefix_schedule_union_map()
                               .intersect_domain(domain).range())
        cost += LAUNCH_MICROSECONDS * max(1, launches)
        if not any(T.is_mark(n, T.MARK_THREAD) for n in T.subtree(node)):
            cost += SERIAL_MICROSECONDS * _box_points(domain)
    return cost


def _box_points(uset: isl.UnionSet) -> int:
    """The points of the bounding boxes of ``uset``'s sets (0 dimensions: 1 each)."""
    total = 0
    for part in U.sets_of(uset):
        count = 1
        for d in range(part.dim(isl.dim_type.set)):
            low, high = part.dim_min_val(d), part.dim_max_val(d)
            if not (low.is_int() and high.is_int()):
                return 2**62  # unbounded: no estimate
            count *= max(0, int(high.to_python()) - int(low.to_python()) + 1)
        total += count
    return total


class _Mapper:
    def __init__(self, program: Program, deps: Dependences, options: Options):
        self.program, self.options, self.deps = program, options, deps
        self.validity = deps.all()
        self.relation = deps.carried()  # what a mapped loop must not carry

    # ------------------------------------------------------------------ host level
    def host(self, node: isl.ScheduleNode) -> isl.ScheduleNode:
        """``node`` rewritten at host level: kernels below it (the node at the same
        position is returned)."""
        kind = node.get_type()
        if kind == isl.schedule_node_type.band:
            return self.band(node)
        if kind == isl.schedule_node_type.leaf:
            return _kernel(node)  # statements outside any loop
        if kind == isl.schedule_node_type.mark and _holds_statements(node):
            # a mark of no GPU meaning (check_marks refuses the decision marks of other
            # targets): the kernel goes around it
            return self._kernel_or_host_loops(node)
        for k in range(node.n_children()):
            node = self.host(node.child(k)).parent()
        return node

    def _kernel_or_host_loops(self, node: isl.ScheduleNode) -> isl.ScheduleNode:
        if self.parallel_below(node.child(0)):
            return self.host(node.child(0)).parent()
        return _kernel(node)

    def band(self, node: isl.ScheduleNode) -> isl.ScheduleNode:
        """A band at host level: a kernel at the fewest host members that leave a
        mappable member; all of them host loops when only a deeper band is mappable;
        else a single-thread kernel. First: a block reduction (gpu_reduction) when the
        band's parallelism is small and a reduction loop is long."""
        if self.options.gpu_block_reduction:
            rows = self.row_blocks(node)
            if rows is not None:
                return _kernel(rows)
            reduced = self.block_reduction(node)
            if reduced is not None:
                return _kernel(reduced)
        n = node.band_n_member()
        for j in range(n):
            mappable = self.mappable_members(node, j)
            if mappable:
                if j == 0:
                    return _kernel(self.map_band(node, mappable))
                inner = node.band_split(j).child(0)
                inner = _kernel(self.map_band(inner, [k - j for k in mappable]))
                return inner.parent()
        if node.n_children() and self.parallel_below(node.child(0)):
            return self.host(node.child(0)).parent()
        return _kernel(node)

    def parallel_below(self, node: isl.ScheduleNode) -> bool:
        """Whether some band at or below ``node`` has a mappable member once the bands
        above it run on the host."""
        kind = node.get_type()
        if kind == isl.schedule_node_type.band:
            n = node.band_n_member()
            if any(self.mappable_members(node, j) for j in range(n)):
                return True
        return any(self.parallel_below(node.child(k)) for k in range(node.n_children()))

    def mappable_members(self, node: isl.ScheduleNode, host: int) -> list[int]:
        """The loop members from ``host`` on that may be mapped in a kernel whose host
        loops are the prefix above the band and its first ``host`` members."""
        prefix = T.outer_schedule(node, host)
        return [k for k in range(host, node.band_n_member())
                if T.is_loop_member(node, k) and mappable(node, k, prefix, self.relation)]

    # ------------------------------------------------------------------ row blocks
    def row_blocks(self, node: isl.ScheduleNode) -> isl.ScheduleNode | None:
        """The band at ``node`` as row blocks (scheduler/gpu_rows.py: its members to
        blocks, a ``rows`` mark above the sequence below, each child's loop to threads),
        or None when that does not apply."""
        n = node.band_n_member()
        if n > grid_axes(self.options):
            return None
        plan = GR.plan_rows(node, self.program, self.deps, self.mappable_members(node, 0))
        if plan is None:
            return None
        top = _mark_leading(node, n, T.MARK_BLOCK)
        rows = GR.insert_rows(_below_marks_and_bands(top, n), plan)
        return _top(rows, top)

    # ------------------------------------------------------------------ block reductions
    def block_reduction(self, node: isl.ScheduleNode) -> isl.ScheduleNode | None:
        """The band at ``node`` as a block reduction (scheduler/gpu_reduction.py: its
        other members to blocks, the reduction member to threadIdx.x under a ``reduce``
        mark), or None when that does not apply."""
        n = node.band_n_member()
        prefix = T.outer_schedule(node, 0)
        # a member of one value (no loop) counts as mappable when it is: a block mark
        # on it maps nothing (codegen), and its extent 1 nothing in the choice
        members = [k for k in range(n) if mappable(node, k, prefix, self.relation)]
        others = [k for k in range(n) if k not in members]
        threads = 1
        for extent in block_shape(self.options, thread_axes(self.options)):
            threads *= extent
        # the cheap test first (extents), then isl's
        r = R.choose_member(band_extents(node), members, others, threads,
                            grid_axes(self.options))
        if r is None or (r != n - 1 and not is_permutable(node, self.validity)):
            return None
        names = R.reduction_statements(node, r, prefix, self.deps)
        if not R.reduction_relaxes(node, r, prefix, names, self.deps, self.program):
            return None
        if r != n - 1:
            node = _permuted(node, [m for m in range(n) if m != r] + [r], self.relation)
        top = node
        if n > 1:
            node = _mark_leading(node.band_split(n - 1), n - 1, T.MARK_BLOCK)
            top = node
            node = _below_marks_and_bands(node, n - 1)
        node = node.insert_mark(isl.Id(T.MARK_THREAD))
        node = node.insert_mark(isl.Id(R.mark_name(names)))
        return _top(node, top)

    # ------------------------------------------------------------------ one kernel
    def map_band(self, node: isl.ScheduleNode, members: list[int]) -> isl.ScheduleNode:
        """The kernel band at ``node`` with its ``members`` (mappable) mapped: the top of
        the rewritten subtree."""
        refs = CM.band_references(node, self.program)
        extents = band_extents(node)
        n = len(extents)
        threads = choose_threads(members, refs, thread_axes(self.options))  # x first
        shape = block_shape(self.options, len(threads))
        sizes = {m: _fit(size, extents[m]) for m, size in zip(threads, shape)}
        others = [m for m in members if m not in threads]
        others.sort(key=lambda m: (-(extents[m] or 2**62), -m))  # the largest first
        blocks = self._blocks(threads, others, sizes, extents)
        tiled = self.options.tile and is_permutable(node, self.validity)
        if tiled:
            # blocks-only members: the tile loop is the member itself
            tile = [sizes[m] if m in sizes else 1 if m in blocks or extents[m] == 1
                    else SEQUENTIAL_TILE for m in range(n)]
            free = [m for m in range(n) if m in sizes or (m not in blocks and extents[m] != 1)]
        else:
            tile = [sizes.get(m, 1) for m in range(n)]
            free = list(threads)
        # the policy's sizes (a tuner's configuration; the above by default)
        view = BandView(node, self.program, self.options, None, extents)
        chosen = policy_for(self.options).gpu_tiles(view, tuple(tile), free)
        observe(replace(view.summary(BandTiling((chosen,))),
                        gpu_members=tuple(m for m in free
                                          if extents[m] is None or extents[m] > 1)))
        if chosen != tuple(tile):
            sizes = {m: max(1, chosen[m]) for m in threads}
            blocks = self._blocks(threads, others, sizes, extents)
        if tiled:
            return self._tiled(node, threads, blocks, [max(1, t) for t in chosen])
        return self._strip_mined(node, threads, blocks, sizes)

    def _blocks(self, threads: list[int], others: list[int], sizes: dict[int, int],
                extents: Sequence[int | None]) -> list[int]:
        """The members whose tile loops go to blocks, x first: the thread members with
        more than one tile, then the other mappable ones, as many as the grid's axes."""
        # a thread member that fits in one tile leaves its tile loop one value: no block
        tiled = [m for m in threads if extents[m] is None or extents[m] > sizes[m]]
        return (tiled + others)[:grid_axes(self.options)]

    def _tiled(self, node: isl.ScheduleNode, threads: list[int], blocks: list[int],
               tile: list[int]) -> isl.ScheduleNode:
        n = node.band_n_member()
        node = tile_band(node, tile, self.relation)
        # tile band: blocks z, y, x, then the rest; point band: threads z, y, x, the rest
        tile_order = blocks[::-1] + [m for m in range(n) if m not in blocks]
        node = _permuted(node, tile_order, self.relation)
        node = _mark_leading(node, len(blocks), T.MARK_BLOCK)
        point = _below_marks_and_bands(node, len(blocks) + (len(blocks) < n))
        point_order = threads[::-1] + [m for m in range(n) if m not in threads]
        point = _permuted(point, point_order, self.relation)
        point = _mark_leading(point, len(threads), T.MARK_THREAD)
        return _top(point, node)

    def _strip_mined(self, node: isl.ScheduleNode, threads: list[int], blocks: list[int],
                     sizes: dict[int, int]) -> isl.ScheduleNode:
        """Each mapped member in its own band, in the band's order: a thread member
        strip-mined into [floor(m/B)] (a block loop when chosen) and [m mod B]."""
        n = node.band_n_member()
        top = node
        for m in range(n):
            if m < n - 1:
                node = node.band_split(1)
            if m in threads:
                node = tile_band(node, [sizes[m]], self.relation)
                if m in blocks:
                    node = node.insert_mark(isl.Id(T.MARK_BLOCK)).child(0)
                node = node.child(0).insert_mark(isl.Id(T.MARK_THREAD)).child(0)
            elif m in blocks:
                node = node.insert_mark(isl.Id(T.MARK_BLOCK)).child(0)
            if m < n - 1:
                node = node.child(0)
        return _top(node, top)


def mappable(node: isl.ScheduleNode, k: int, prefix: isl.UnionMap,
             relation: isl.UnionMap) -> bool:
    """Member ``k`` of the band at ``node`` has distance 0 on every dependence of
    ``relation`` between instances of the band that agree on ``prefix`` (the host loops)."""
    domain = node.get_domain()
    local = relation.intersect_domain(domain).intersect_range(domain)
    same_host = local.intersect(prefix.apply_range(prefix.reverse()))
    member = T.member_union_map(node, k)
    return same_host.subtract(member.apply_range(member.reverse())).is_empty()


def choose_threads(members: list[int], refs: Sequence[CM.Reference],
                   axes: int) -> list[int]:
    """Up to ``axes`` of the mappable ``members``, x first: x the one along which most
    references are contiguous (ties: the innermost), then the innermost others."""
    if not members or axes == 0:
        return []

    def contiguous(m: int) -> tuple[int, float, int]:
        unit = sum(1 for r in refs if r.steps and all(row[m] is not None for row in r.steps)
                   and r.unit_stride(m) and not r.invariant(m))
        return unit, CM.stride_score(refs, m), m

    x = max(members, key=contiguous)
    rest = sorted((m for m in members if m != x), reverse=True)
    return [x] + rest[:axes - 1]


def _fit(size: int, extent: int | None) -> int:
    """A tile of ``size`` along a member of ``extent`` values (no larger than them)."""
    return max(1, min(size, extent)) if extent is not None else size


def _kernel(node: isl.ScheduleNode) -> isl.ScheduleNode:
    """A ``kernel`` mark above ``node``; returns the mark (the node's position)."""
    return node.insert_mark(isl.Id(T.MARK_KERNEL))


def _holds_statements(node: isl.ScheduleNode) -> bool:
    return not node.get_domain().is_empty()


def _permuted(node: isl.ScheduleNode, order: list[int],
              relation: isl.UnionMap) -> isl.ScheduleNode:
    """The band at ``node`` with its members in ``order`` (a permutable band: any order
    is legal)."""
    if order == sorted(order):
        return node
    mupa = node.band_get_partial_schedule()
    upas = isl.UnionPwAffList.from_union_pw_aff(mupa.get_at(order[0]))
    for m in order[1:]:
        upas = upas.add(mupa.get_at(m))
    permuted = isl.MultiUnionPwAff.from_union_pw_aff_list(mupa.get_space(), upas)
    return replace_band(node, permuted, relation, True)


def _mark_leading(node: isl.ScheduleNode, count: int, mark: str) -> isl.ScheduleNode:
    """The first ``count`` members of the band at ``node`` each in a band of its own
    under a ``mark``; returns the top of the chain."""
    top_depth = _depth(node)
    for k in range(count):
        if node.band_n_member() > 1:
            node = node.band_split(1)
        node = node.insert_mark(isl.Id(mark)).child(0)
        if k < count - 1:
            node = node.child(0)
    return T.ancestor(node, _depth(node) - top_depth)


def _below_marks_and_bands(node: isl.ScheduleNode, bands: int) -> isl.ScheduleNode:
    """The node below the next ``bands`` bands from ``node`` (marks skipped)."""
    while bands:
        if T.is_band(node):
            bands -= 1
        node = node.child(0)
    return T.below_marks(node)


def _depth(node: isl.ScheduleNode) -> int:
    return node.get_tree_depth()


def _top(node: isl.ScheduleNode, top: isl.ScheduleNode) -> isl.ScheduleNode:
    """The ancestor of ``node`` at the tree depth of ``top``."""
    return T.ancestor(node, _depth(node) - _depth(top))


# ----------------------------------------------------------------------------- the check

def check_mapping(schedule: isl.Schedule, deps: Dependences,
                  program: Program | None = None) -> None:
    """IllegalScheduleError when a ``block`` or ``thread`` mark is not above a band, or
    its member carries a dependence between instances of its kernel that agree on the
    host loops (a schedule polycomp made that fails is the caller's InternalError). A
    thread mark under a ``reduce`` mark (scheduler/gpu_reduction.py) is checked as a
    block reduction of the statements the mark names (``program`` needed)."""
    relation = deps.carried()
    for node in T.nodes(schedule):
        if not T.is_mark(node, T.MARK_KERNEL):
            continue
        prefix = node.get_prefix_schedule_union_map()
        kernel_domain = node.get_domain()
        for inner in T.subtree(node):
            if T.is_mark(inner, GR.MARK_ROWS):
                GR.check_rows(inner)
            if not (T.is_mark(inner, T.MARK_BLOCK) or T.is_mark(inner, T.MARK_THREAD)):
                continue
            name = inner.mark_get_id().get_name()
            band = inner.child(0)
            while T.is_mark(band):
                band = band.child(0)
            if not T.is_band(band) or band.band_n_member() != 1:
                raise IllegalScheduleError(f"mark '{name}' is not above a band of one member",
                                           hint="split the band so that the mapped member "
                                                "has a band of its own")
            names = _reduced_above(inner, node)
            if names is not None:
                local = band.get_prefix_schedule_union_map().intersect_domain(band.get_domain())
                if name != T.MARK_THREAD or program is None or _has_thread_mark_below(band) \
                        or not R.reduction_relaxes(band, 0, local, names, deps, program):
                    raise IllegalScheduleError(
                        f"a loop marked '{name}' under a '{R.MARK_REDUCE}' mark is no block "
                        f"reduction of {', '.join(sorted(names))}",
                        hint="a reduce mark goes right above the one thread loop of its "
                             "kernel, along which only the statements it names reduce")
                continue
            if not mappable(band, 0, prefix.intersect_domain(band.get_domain()), relation):
                raise IllegalScheduleError(
                    f"a loop marked '{name}' carries a dependence between instances of its "
                    f"kernel", hint="only a loop along which every dependence inside the "
                                    "kernel has distance 0 can be shared out over blocks "
                                    "or threads")
            if name == T.MARK_THREAD and not GR.under_rows(inner, node) and \
                    _crosses(band.get_domain(), kernel_domain, prefix, relation):
                raise IllegalScheduleError(
                    "a loop marked 'thread' shares its iterations out while statements of "
                    "its kernel outside it depend on them (or they on those)",
                    hint="map a loop around every statement of the kernel, or put a "
                         f"'{GR.MARK_ROWS}' mark above the sequence of thread loops (a "
                         "barrier between its children)")
    for node in T.nodes(schedule):
        if (T.is_mark(node, T.MARK_BLOCK) or T.is_mark(node, T.MARK_THREAD)) and \
                not _inside_kernel(node):
            raise IllegalScheduleError(f"mark '{node.mark_get_id().get_name()}' is outside "
                                       f"any 'kernel' mark",
                                       hint="put a 'kernel' mark above the mapped loops")


def _crosses(inside: isl.UnionSet, kernel: isl.UnionSet, prefix: isl.UnionMap,
             relation: isl.UnionMap) -> bool:
    """Whether a dependence of ``relation`` joins an instance in ``inside`` with one of
    the kernel outside it, both in one iteration of the host loops (threads of a loop
    around only some of the kernel's statements would need a barrier for it)."""
    outside = kernel.subtract(inside)
    if outside.is_empty():
        return False
    same_host = prefix.apply_range(prefix.reverse())
    local = relation.intersect(same_host)
    return not (local.intersect_domain(inside).intersect_range(outside).is_empty()
                and local.intersect_domain(outside).intersect_range(inside).is_empty())


def _reduced_above(node: isl.ScheduleNode, kernel: isl.ScheduleNode) -> frozenset[str] | None:
    """The statements of a ``reduce`` mark between ``kernel`` and ``node``, if any."""
    stop = kernel.get_tree_depth()
    while node.has_parent() and node.get_tree_depth() > stop:
        node = node.parent()
        if T.is_mark(node):
            names = R.parse_mark(node.mark_get_id().get_name())
            if names is not None:
                return names
    return None


def _has_thread_mark_below(node: isl.ScheduleNode) -> bool:
    return any(T.is_mark(n, T.MARK_THREAD) for n in list(T.subtree(node))[1:])


def _inside_kernel(node: isl.ScheduleNode) -> bool:
    while node.has_parent():
        node = node.parent()
        if T.is_mark(node, T.MARK_KERNEL):
            return True
    return False


__all__ = ["map_to_gpu", "check_mapping", "mappable", "block_shape", "grid_limit"]
