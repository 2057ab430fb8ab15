"""Array contraction: (Program, schedule) -> (Program, schedule), after scheduling.

Fusion puts a chain such as softmax's ``e(b, m, n) = exp(...)``, ``s(b, m) +=! e(b, m,
n)``, ``Y(b, m, n) = e(b, m, n) / s(b, m)`` under the shared loops (b, m); the
temporary ``e`` is then written and read back within one iteration of them, yet it is a
full-size array (786 KB at BERT's attention shape) that goes through memory. When every
value of a temporary lives within one iteration of the loops above the point where its
statements part (the sequence or set node below them), each iteration can have its own
small copy: the dimensions of the temporary that those loops fix are dropped, and the
rest becomes a local array of the loop body (``float e[128]``, in L1), declared by the
code generator at a ``local:<array>`` mark.

Conditions, per temporary array (role "temporary", never an output, rank >= 1):
- every statement that touches it lies below one sequence or set node, with no parallel
  loop below that node;
- every value-based flow dependence through it (under the original order, which the
  legal schedule keeps) joins instances with the same schedule above that node, and no
  read of it has no write before it;
- the dropped index dimensions are functions of that outer schedule, the same for every
  access; the kept ones span at most LOCAL_BYTES in all.
Only specialised programs are contracted (a local array needs constant extents).
"""

from __future__ import annotations

from dataclasses import replace

import islpy as isl
import numpy as np

from polycomp import expr as E
from polycomp import islutil as U
from polycomp.ir import Array, Program, Statement

from . import tree as T
from .expansion import array_flow

dim = isl.dim_type

MARK_LOCAL = "local"  # the mark's name is "local:<array>"
# a local array lives on the stack of whichever thread runs the iteration
LOCAL_BYTES = 64 * 1024
# marks below which iterations run in different threads (or kernels)
SHARING = (T.MARK_PARALLEL, T.MARK_KERNEL, T.MARK_BLOCK, T.MARK_THREAD)


def contract_temporaries(program: Program, schedule: isl.Schedule
                         ) -> tuple[Program, isl.Schedule]:
    if program.params:
        return program, schedule
    for array in program.arrays:
        if array.role != "temporary" or array.rank == 0:
            continue
        found = _contraction(program, schedule, array)
        if found is None:
            continue
        program, node = found
        schedule = node.insert_mark(isl.Id(f"{MARK_LOCAL}:{array.name}")).get_schedule()
    return program, schedule


def _touching(program: Program, name: str) -> list[Statement]:
    return [s for s in program.statements
            if s.write.get_tuple_name(dim.out) == name
            or any(r.get_tuple_name(dim.out) == name for r in s.reads)]


def _split_node(schedule: isl.Schedule, names: set[str]) -> isl.ScheduleNode | None:
    """The sequence or set node below which ``names`` part, if a single path of bands
    and marks leads there from the root."""
    node = schedule.get_root()
    while True:
        kind = node.get_type()
        if kind in (isl.schedule_node_type.sequence, isl.schedule_node_type.set):
            return node
        if node.n_children() != 1:
            return None
        node = node.child(0)
        if kind == isl.schedule_node_type.filter:
            inside = {s.get_tuple_name() for s in U.sets_of(node.get_domain())}
            if not names <= inside:
                return None


def _contraction(program: Program, schedule: isl.Schedule, array: Array
                 ) -> tuple[Program, isl.ScheduleNode] | None:
    statements = _touching(program, array.name)
    names = {s.name for s in statements}
    if not statements:
        return None
    node = _split_node(schedule, names)
    if node is None or any(T.is_mark(n, mark) for n in T.subtree(node) for mark in SHARING):
        # a parallel loop below would share one copy among threads; one region around
        # a sequential loop above it (codegen/openmp.py) would give each thread its own.
        # GPU kernels below (or loops mapped to blocks or threads) likewise: a local
        # array lives in one thread
        return None
    prefix = node.get_prefix_schedule_union_map().intersect_domain(node.get_domain())
    if prefix.is_empty() or not _values_stay_inside(program, array.name, prefix):
        return None
    accesses = [(s, m) for s in statements for m in (s.write, *s.reads)
                if m.get_tuple_name(dim.out) == array.name]
    by_time = U.union_map(prefix.reverse().apply_range(
        isl.UnionMap.from_map(m.intersect_domain(s.domain))) for s, m in accesses)
    kept, lows, extents = [], [], []
    for k in range(array.rank):
        values = U.union_map(_dimension(m, k) for m in U.maps_of(by_time))
        if values.is_single_valued():
            continue  # fixed by the loops outside: dropped
        box = _bounds(isl.Set.from_union_set(values.range()))
        if box is None:
            return None
        kept.append(k)
        lows.append(box[0])
        extents.append(box[1] - box[0] + 1)
    if len(kept) == array.rank:
        return None  # nothing to drop: the whole array is live in each iteration
    size = 1
    for e in extents:
        size *= e
    if size * _itemsize(array.dtype) > LOCAL_BYTES:
        return None
    local = replace(array, shape=tuple(U.constant_pw_aff(e) for e in extents), role="local")
    rewritten = {s.name: _rewrite(s, array.name, kept, lows) for s in statements}
    program = replace(
        program, arrays=tuple(local if a.name == array.name else a for a in program.arrays),
        statements=tuple(rewritten.get(s.name, s) for s in program.statements))
    return program, node


def _values_stay_inside(program: Program, name: str, prefix: isl.UnionMap) -> bool:
    """Every value of ``name`` is read in the iteration (of the loops in ``prefix``)
    that wrote it, and no read comes before every write."""
    flow, no_source = array_flow(program, name)
    if not no_source.is_empty():
        return False
    return flow.is_subset(prefix.apply_range(prefix.reverse()))

def _dimension(m: isl.Map, k: int) -> isl.Map:
    n = m.dim(dim.out)
    return m.project_out(dim.out, k + 1, n - k - 1).project_out(dim.out, 0, k)


def _bounds(image: isl.Set) -> tuple[int, int] | None:
    low, high = image.dim_min_val(0), image.dim_max_val(0)
    if not (low.is_int() and high.is_int()):
        return None
    return int(low.to_python()), int(high.to_python())


def _itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize

def _rewrite(s: Statement, name: str, kept: list[int], lows: list[int]) -> Statement:
    """``s`` with every access to ``name`` indexed by the kept dimensions, shifted."""
    space = s.domain.get_space()

    def index(access: E.Access) -> tuple[E.Expr, ...]:
        out = []
        for k, low in zip(kept, lows):
            expr = access.indices[k]
            if low:
                expr = E.Binary("sub", expr, E.Const(low, E.INDEX_DTYPE), E.INDEX_DTYPE)
            out.append(expr)
        return tuple(out)

    def access_map(access: E.Access) -> isl.Map:
        pieces = [U.affine(i, space) for i in index(access)]
        return U.access_map(space, name, pieces)

    def swap(node: E.Expr) -> E.Expr | None:
        if isinstance(node, E.Access) and node.array == name:
            return replace(node, indices=index(node))
        return None

    reads = []
    for r, access in zip(s.reads, s.read_accesses()):
        reads.append(access_map(access) if r.get_tuple_name(dim.out) == name else r)
    write = access_map(s.target) if s.target.array == name else s.write
    target = swap(s.target) if s.target.array == name else s.target
    return replace(s, write=write, reads=tuple(reads), target=target,
                   expr=E.transform(s.expr, swap))  # type: ignore[arg-type]
