"""Memory promotion for the GPU targets: which arrays a kernel stages in ``__shared__``
memory and which elements a thread keeps in a register.

Place in the pipeline: the pass after ``gpu_mapping`` (scheduler/gpu_mapping.py) in the
``cuda`` and ``cuda-emulated`` targets (polycomp/targets/cuda.py), off with
``Options.gpu_promotion=False``. It writes its decisions into the tree as marks; the
geometry (the boxes, as isl piecewise affine functions of the loops around a mark) is
computed again from the final tree by ``plan_at`` when codegen/cuda.py prints them, so a
tree read back from text (or a user's, ``scheduler="custom"``) means the same, and a
mark that does not hold there (a written array, a box without a constant bound, a mark
below a thread loop) is printed as no promotion at all: correct, only slower.

The two marks:

- ``shared:A,B`` directly above a kernel's outermost ``thread`` mark on a path (PPCG's
  place: below the block loops and the sequential tile loop, e.g. a matmul's k tiles).
  Everything above it depends on the block index and the loops around only, so every
  thread of a block reaches it in the same iterations: the copy-in, done by all the
  block's threads together, and its ``__syncthreads()`` are never divergent. For each
  array named: the footprint of the references below the mark at each iteration of the
  loops above it (isl: prefix schedule^-1 . accesses), its rectangular box hull (per
  array dimension ``Map.dim_min``/``dim_max``, what ``get_range_simple_fixed_box_hull``
  computes but with accessors islpy has), a shared buffer of the box's largest size, a
  cooperative copy of the box (consecutive threads on the innermost array dimension:
  coalesced), a barrier after it and one after the uses (the next copy overwrites).
  Only arrays the kernel never writes are staged: no copy-out, so no write that might
  not happen is ever made. Chosen when the references reuse an element (two instances
  below the mark touch it) or are not coalesced (neighbouring threads along x do not
  touch neighbouring elements), while the kernel's boxes fit SHARED_BUDGET (less the
  buffers of the kernel's block reductions, scheduler/gpu_reduction.py).

- ``private:C`` at the child of the band under a kernel's innermost ``thread`` mark (a
  matmul's point loop over k): the element is loaded into a local before the subtree,
  used there, and stored after it. Chosen when, at each iteration of the loops above the
  mark, the references below it touch one element (the footprint is single-valued);
  every reference of the kernel to the array is below the mark; two instances of the
  kernel (at one iteration of the host loops) that touch one element agree on every
  block and thread loop, so the element belongs to one thread; and, when the array is
  written there, it is written at every such iteration (never store a write that might
  not happen). The load and store are guarded by the footprint's domain.

Strides are removed from the boxes: where every element the references touch along a
dimension is a multiple of isl's range stride s away from the lowest, the buffer holds
one element in s (index (i - lo) / s).

Not built: copy-out of written arrays through shared memory. (Block reductions, where a
reduction is spread over threads, are scheduler/gpu_reduction.py's: their partials live
in registers and their tree in a shared buffer of codegen/cuda_reduction.py's.)
"""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl
import numpy as np

from polycomp import expr as E
from polycomp import islutil as U
from polycomp.ir import Program
from polycomp.options import Options

from . import gpu_reduction as RED
from . import tree as T
from .dependences import Dependences
from .gpu_mapping import block_shape
from .gpu_rows import MARK_ROWS

MARK_SHARED = "shared"
MARK_PRIVATE = "private"
PROMOTION_MARKS = (MARK_SHARED, MARK_PRIVATE)
# CUDA's static shared memory per block is 48 KiB; what is left is the margin for the
# compiler's own (ptxas reports it in the same count)
SHARED_BYTES = 48 * 1024
SHARED_BUDGET = 40 * 1024
# isl operations one array's decision may take before it is given up (no promotion)
DECISION_OPERATIONS = 2_000_000


@dataclass(frozen=True)
class Box:
    """The box of one array at a promotion mark: per array dimension, its lowest and
    highest element as functions of the loops above the mark (anonymous set space of
    the mark's schedule depth), the stride every element touched keeps from the lowest
    (isl's range stride: A[2i + 1] touches every other element, which the buffer leaves
    out), and the most elements it holds over all of them (strides removed)."""

    array: str
    lower: tuple[isl.PwAff, ...]
    upper: tuple[isl.PwAff, ...]
    sizes: tuple[int, ...]
    reads: bool
    writes: bool
    strides: tuple[int, ...] = ()

    @property
    def elements(self) -> int:
        return int(np.prod(self.sizes, dtype=np.int64)) if self.sizes else 1


@dataclass(frozen=True)
class Plan:
    """What codegen prints at one promotion mark: its kind, its schedule depth, the
    iterations of the loops above it that reach it, and one Box per array."""

    kind: str
    depth: int
    domain: isl.Set
    boxes: tuple[Box, ...]


def mark_name(kind: str, arrays: list[str]) -> str:
    return f"{kind}:{','.join(arrays)}"


def parse_mark(name: str) -> tuple[str, list[str]] | None:
    """(kind, arrays) of a promotion mark's name, None for any other mark."""
    kind, sep, rest = name.partition(":")
    if not sep or kind not in PROMOTION_MARKS or not rest:
        return None
    return kind, rest.split(",")


# ----------------------------------------------------------------------------- the pass

def promote(schedule: isl.Schedule, program: Program, deps: Dependences,
            options: Options) -> isl.Schedule:
    """The tree with ``shared`` and ``private`` marks (module doc) in every kernel."""
    if not options.gpu_promotion:
        return schedule
    gathered = gathered_arrays(program)
    used: dict[str, int] = {}  # kernel (its position, as text) -> shared bytes chosen

    def go(node: isl.ScheduleNode, kernel: isl.ScheduleNode | None,
           threads_above: bool) -> isl.ScheduleNode:
        start = _depth(node)  # a mark inserted here leaves the node one level deeper
        if T.is_mark(node, T.MARK_KERNEL):
            # a kernel whose tree has promotion marks already (a user's) is kept as it is;
            # so are row blocks (scheduler/gpu_rows.py), whose thread loops are siblings
            kernel = None if _has_promotion_mark(node) or any(
                T.is_mark(n, MARK_ROWS) for n in T.subtree(node)) else node
        if kernel is not None and T.is_mark(node, T.MARK_THREAD):
            if not threads_above:
                node = _insert(node, _choose_shared(node, kernel, program, gathered, used,
                                                    options),
                               MARK_SHARED)
                node = node.child(0)  # the thread mark again
            band = T.below_marks(node)
            if T.is_band(band) and not _has_thread_mark(band) and band.n_children():
                inner = band.child(0)
                chosen = _choose_private(inner, kernel, program, gathered)
                depth = _depth(node)
                if chosen:
                    inner = _insert(inner, chosen, MARK_PRIVATE)
                    node = T.ancestor(inner, _depth(inner) - depth)
            threads_above = True
        for k in range(node.n_children()):
            node = go(node.child(k), kernel, threads_above).parent()
        return T.ancestor(node, _depth(node) - start)

    return go(schedule.get_root(), None, False).get_schedule()


def _insert(node: isl.ScheduleNode, arrays: list[str], kind: str) -> isl.ScheduleNode:
    if not arrays:
        return node
    return node.insert_mark(isl.Id(mark_name(kind, arrays)))


def _choose_shared(node: isl.ScheduleNode, kernel: isl.ScheduleNode, program: Program,
                   gathered: set[str], used: dict[str, int], options: Options) -> list[str]:
    """The arrays to stage at ``node`` (the outermost thread mark): read-only in the
    kernel, with reuse or uncoalesced references, within the kernel's budget."""
    key = str(kernel.get_prefix_schedule_union_map()) + str(kernel.get_domain())
    # a block reduction's tree buffers (codegen/cuda_reduction.py) share the budget
    used.setdefault(key, _reduction_bytes(kernel, program, options))
    written = _written(program, kernel.get_domain())
    chosen = []
    for array in _accessed(program, node.get_domain()):
        if array in written or not _promotable_array(program, array, gathered):
            continue

        def decide(array: str = array) -> Box | None:
            box = footprint_box(node, program, array)
            if box is None or not (has_reuse(node, program, array)
                                   or not coalesced(node, program, array)):
                return None
            return box

        box = U.within_operations(DECISION_OPERATIONS, decide)
        if box is None:
            continue
        size = box.elements * _itemsize(program, array)
        if used.get(key, 0) + size > SHARED_BUDGET:
            continue
        used[key] = used.get(key, 0) + size
        chosen.append(array)
    return chosen


def _choose_private(node: isl.ScheduleNode, kernel: isl.ScheduleNode, program: Program,
                    gathered: set[str]) -> list[str]:
    chosen = []
    for array in _accessed(program, node.get_domain()):
        if not _promotable_array(program, array, gathered):
            continue
        # a register pays when the element is touched more than once below the mark
        ok = U.within_operations(DECISION_OPERATIONS,
                                 lambda a=array: has_reuse(node, program, a)
                                 and private_box(node, kernel, program, a))
        if ok:
            chosen.append(array)
    return chosen


# ----------------------------------------------------------------------------- geometry

def plan_at(node: isl.ScheduleNode, program: Program) -> Plan | None:
    """The plan of the promotion mark at ``node`` when it holds (module doc), else None
    (codegen then prints no promotion there)."""
    parsed = parse_mark(node.mark_get_id().get_name()) if T.is_mark(node) else None
    kernel = _kernel_above(node)
    if parsed is None or kernel is None:
        return None
    kind, arrays = parsed
    gathered = gathered_arrays(program)
    names = {a.name for a in program.arrays}
    boxes = []
    for array in arrays:
        if array not in names or not _promotable_array(program, array, gathered):
            continue
        if kind == MARK_SHARED:
            if _thread_mark_above(node, kernel) or array in _written(program, kernel.get_domain()):
                continue
            box = footprint_box(node, program, array)
        else:
            if _mapped_mark_below(node):
                continue
            box = private_box(node, kernel, program, array)
        if box is not None:
            boxes.append(box)
    if kind == MARK_SHARED and sum(b.elements * _itemsize(program, b.array)
                                   for b in boxes) > SHARED_BUDGET:
        return None
    if not boxes:
        return None
    prefix = node.get_prefix_schedule_union_map().intersect_domain(node.get_domain())
    reached = U.sets_of(prefix.range())
    if len(reached) != 1:
        return None
    return Plan(kind, node.get_schedule_depth(), reached[0], tuple(boxes))


def footprint(node: isl.ScheduleNode, program: Program, array: str,
              reads: bool = True, writes: bool = True) -> isl.Map | None:
    """The elements of ``array`` the instances below ``node`` touch at each iteration of
    the loops above it: { [prefix] -> array[...] } (None when they touch none)."""
    access = _access(program, node.get_domain(), array, reads, writes)
    if access.is_empty():
        return None
    prefix = node.get_prefix_schedule_union_map().intersect_domain(node.get_domain())
    found = prefix.reverse().apply_range(access)
    maps = U.maps_of(found)
    return maps[0] if len(maps) == 1 else None


def footprint_box(node: isl.ScheduleNode, program: Program, array: str) -> Box | None:
    """The rectangular box hull of the footprint at ``node``; None when some dimension's
    extent has no constant bound."""
    fp = footprint(node, program, array)
    if fp is None:
        return None
    lower, upper, sizes, strides = [], [], [], []
    for k in range(fp.dim(isl.dim_type.out)):
        low, high = fp.dim_min(k), fp.dim_max(k)
        most = high.sub(low).max_val()
        if not most.is_int():
            return None
        # every element touched is offset(prefix) + stride * j, the lowest one included:
        # high - low is a multiple of the stride
        stride = fp.get_range_stride_info(k).get_stride()
        stride = int(stride.to_python()) if stride.is_int() and stride.to_python() > 1 else 1
        lower.append(low)
        upper.append(high)
        sizes.append(int(most.to_python()) // stride + 1)
        strides.append(stride)
    reads = not _access(program, node.get_domain(), array, True, False).is_empty()
    writes = not _access(program, node.get_domain(), array, False, True).is_empty()
    return Box(array, tuple(lower), tuple(upper), tuple(sizes), reads, writes,
               tuple(strides))


def private_box(node: isl.ScheduleNode, kernel: isl.ScheduleNode, program: Program,
                array: str) -> Box | None:
    """The one element of ``array`` a thread keeps in a register below ``node`` (module
    doc: single-valued footprint, all of the kernel's references below, one thread per
    element, writes at every iteration they may be), else None."""
    fp = footprint(node, program, array)
    if fp is None or not fp.is_single_valued():
        return None
    in_kernel = _access(program, kernel.get_domain(), array, True, True)
    below = _access(program, node.get_domain(), array, True, True)
    if not in_kernel.subtract(below).is_empty():
        return None
    if not _one_thread(node, kernel, below):
        return None
    written = footprint(node, program, array, reads=False)
    if written is not None and not fp.domain().is_subset(written.domain()):
        return None
    box = footprint_box(node, program, array)
    if box is None or any(s != 1 for s in box.sizes):
        return None
    return box


def _one_thread(node: isl.ScheduleNode, kernel: isl.ScheduleNode,
                access: isl.UnionMap) -> bool:
    """Two instances below ``node`` (at one iteration of the kernel's host loops) that
    touch one element agree on every block and thread loop above ``node``."""
    host = kernel.get_prefix_schedule_union_map().intersect_domain(kernel.get_domain())
    same_host = host.apply_range(host.reverse())
    pairs = access.apply_range(access.reverse()).intersect(same_host)
    prefix = node.get_prefix_schedule_union_map().intersect_domain(node.get_domain())
    deltas = pairs.apply_domain(prefix).apply_range(prefix).deltas()
    if deltas.is_empty():
        return True
    delta = U.sets_of(deltas)[0]
    for depth in _mapped_depths(node, kernel):
        low, high = delta.dim_min_val(depth), delta.dim_max_val(depth)
        if not (low.is_zero() and high.is_zero()):
            return False
    return True


# ----------------------------------------------------------------------------- decisions

def has_reuse(node: isl.ScheduleNode, program: Program, array: str) -> bool:
    """Two instances below ``node`` at one iteration of the loops above it touch one
    element of ``array``."""
    domain = node.get_domain()
    access = _access(program, domain, array, True, True)
    prefix = node.get_prefix_schedule_union_map().intersect_domain(domain)
    pairs = access.apply_range(access.reverse()).intersect(prefix.apply_range(prefix.reverse()))
    return not pairs.subtract(domain.identity()).is_empty()


def coalesced(node: isl.ScheduleNode, program: Program, array: str) -> bool:
    """Each reference to ``array`` below ``node`` touches, from one instance to its
    neighbour along threadIdx.x (the deepest thread loop), the same element or the next
    one along the innermost dimension."""
    for leaf in T.subtree(node):
        if leaf.get_type() != isl.schedule_node_type.leaf:
            continue
        x = _deepest_thread_depth(leaf)
        if x is None:
            continue
        domain = leaf.get_domain()
        prefix = leaf.get_prefix_schedule_union_map().intersect_domain(domain)
        if prefix.is_empty():
            continue
        space = U.maps_of(prefix)[0].get_space().range()
        shift = isl.MultiAff.identity(space.map_from_set())
        shift = shift.set_aff(x, shift.get_aff(x).add_constant_val(isl.Val.int_from_si(U.CTX, 1)))
        neighbour = prefix.apply_range(isl.UnionMap.from_map(isl.Map.from_multi_aff(shift)))
        neighbour = neighbour.apply_range(prefix.reverse())
        for s in program.statements:
            refs = [m for m in (s.write, *s.reads)
                    if m.get_tuple_name(isl.dim_type.out) == array]
            for ref in refs:
                ref = isl.UnionMap.from_map(ref).intersect_domain(domain)
                if ref.is_empty():
                    continue
                pairs = ref.reverse().apply_range(neighbour).apply_range(ref)
                if not pairs.deltas().is_subset(_unit_steps(ref)):
                    return False
    return True


def _unit_steps(ref: isl.UnionMap) -> isl.UnionSet:
    """{ A[0, ..., 0, 0]; A[0, ..., 0, 1] } in the space of ``ref``'s elements."""
    space = U.maps_of(ref)[0].get_space().range()
    rank = space.dim(isl.dim_type.set)
    steps = isl.Set.empty(space)
    for last in (0, 1):
        point = isl.Set.universe(space)
        for k in range(rank):
            value = last if k == rank - 1 else 0
            point = point.fix_val(isl.dim_type.set, k, isl.Val.int_from_si(U.CTX, value))
        steps = steps.union(point)
    return isl.UnionSet.from_set(steps)


# ----------------------------------------------------------------------------- helpers

def gathered_arrays(program: Program) -> set[str]:
    """Arrays some statement reads or writes through a data-dependent index (their
    access maps cover whole dimensions: no footprint means anything)."""
    out = set()
    for s in program.statements:
        for access in [*E.accesses(s.expr), s.target]:
            if any(isinstance(n, E.Access) for index in access.indices for n in E.walk(index)):
                out.add(access.array)
    return out


def _reduction_bytes(kernel: isl.ScheduleNode, program: Program, options: Options) -> int:
    """The shared bytes of the block reductions' buffers in ``kernel``: one partial per
    thread (the block's most threads along x) per reduction statement."""
    total = 0
    for n in T.subtree(kernel):
        names = RED.parse_mark(n.mark_get_id().get_name()) if T.is_mark(n) else None
        for s in program.statements if names else ():
            if s.name in names:
                total += block_shape(options, 1)[0] * np.dtype(s.target.dtype).itemsize
    return total


def _promotable_array(program: Program, array: str, gathered: set[str]) -> bool:
    spec = next((a for a in program.arrays if a.name == array), None)
    return (spec is not None and array not in gathered and spec.role != "local"
            and spec.rank >= 1 and spec.dtype != "float16")


def _itemsize(program: Program, array: str) -> int:
    dtype = program.array(array).dtype
    return 1 if dtype == "bool" else np.dtype(dtype).itemsize


def _access(program: Program, domain: isl.UnionSet, array: str, reads: bool,
            writes: bool) -> isl.UnionMap:
    maps = []
    for s in program.statements:
        chosen = ([s.write] if writes else []) + (list(s.reads) if reads else [])
        maps += [m for m in chosen if m.get_tuple_name(isl.dim_type.out) == array]
    out = isl.UnionMap.empty(domain.get_space())
    for m in maps:
        out = out.union(isl.UnionMap.from_map(m))
    return out.intersect_domain(domain)


def _accessed(program: Program, domain: isl.UnionSet) -> list[str]:
    names = {st.get_tuple_name() for st in U.sets_of(domain)}
    found: list[str] = []
    for s in program.statements:
        if s.name not in names:
            continue
        for m in (s.write, *s.reads):
            a = m.get_tuple_name(isl.dim_type.out)
            if a not in found:
                found.append(a)
    return sorted(found)


def _written(program: Program, domain: isl.UnionSet) -> set[str]:
    names = {st.get_tuple_name() for st in U.sets_of(domain)}
    return {s.write.get_tuple_name(isl.dim_type.out) for s in program.statements
            if s.name in names}


def _has_thread_mark(node: isl.ScheduleNode) -> bool:
    return any(T.is_mark(n, T.MARK_THREAD) for n in T.subtree(node))


def _has_promotion_mark(node: isl.ScheduleNode) -> bool:
    return any(T.is_mark(n) and parse_mark(n.mark_get_id().get_name()) is not None
               for n in T.subtree(node))


def _mapped_mark_below(node: isl.ScheduleNode) -> bool:
    return any(T.is_mark(n, T.MARK_THREAD) or T.is_mark(n, T.MARK_BLOCK)
               for n in T.subtree(node))


def _kernel_above(node: isl.ScheduleNode) -> isl.ScheduleNode | None:
    while node.has_parent():
        node = node.parent()
        if T.is_mark(node, T.MARK_KERNEL):
            return node
    return None


def _thread_mark_above(node: isl.ScheduleNode, kernel: isl.ScheduleNode) -> bool:
    stop = _depth(kernel)
    while node.has_parent() and _depth(node) > stop:
        node = node.parent()
        if T.is_mark(node, T.MARK_THREAD):
            return True
    return False


def _mapped_depths(node: isl.ScheduleNode, kernel: isl.ScheduleNode) -> list[int]:
    """The schedule depths of the block and thread loops above ``node`` in its kernel."""
    depths = []
    stop = _depth(kernel)
    while node.has_parent() and _depth(node) > stop:
        node = node.parent()
        if T.is_mark(node, T.MARK_THREAD) or T.is_mark(node, T.MARK_BLOCK):
            band = T.below_marks(node)
            if T.is_band(band):
                depths += range(band.get_schedule_depth(),
                                band.get_schedule_depth() + band.band_n_member())
    return depths


def _deepest_thread_depth(node: isl.ScheduleNode) -> int | None:
    while node.has_parent():
        node = node.parent()
        if T.is_mark(node, T.MARK_KERNEL):
            return None
        if T.is_mark(node, T.MARK_THREAD):
            band = T.below_marks(node)
            return band.get_schedule_depth() if T.is_band(band) else None
    return None


def _depth(node: isl.ScheduleNode) -> int:
    return node.get_tree_depth()


__all__ = ["promote", "plan_at", "parse_mark", "footprint_box", "private_box", "Box",
           "Plan", "MARK_SHARED", "MARK_PRIVATE", "SHARED_BUDGET"]
