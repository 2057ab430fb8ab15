"""Block reductions for the GPU targets: a reduction loop shared out over a block's
threads, each thread accumulating a partial result, the block combining them.

Place in the pipeline: inside the pass ``gpu_mapping`` (scheduler/gpu_mapping.py), which
asks ``plan_block_reduction`` about each band before it maps it the usual way; off with
``Options.gpu_block_reduction=False`` (then the tree is exactly gpu_mapping's). The
mark it writes, ``reduce:S1,S2``, is checked by gpu_mapping.check_mapping and printed by
codegen/cuda_reduction.py.

Why: gpu_mapping maps only loops along which every dependence has distance 0, the
reductions' chains included, so a reduction stays in one thread. A row sum
``s(i) +=! A(i, j)`` with few rows and long rows then runs on a handful of threads,
each looping over a whole row; a full reduction to a scalar runs on one thread.

What: for a band whose members are all mappable but one, ``r``, whose only obstacle is
the chains of relaxable reductions (scheduler/reductions.py: + * max min; not bool),
and when the mappable members have fewer iterations than a block has threads while
``r`` is long (``choose_member``, a pure function of the extents), the band becomes

    kernel
      block [i]            one member per block mark (x innermost), strided over blocks
        reduce:S1          the statements that reduce along r
          thread [j]       r over threadIdx.x, strided
            (the band's children)

Each block owns the output elements of its iterations (the chains have distance 0 on
the block members, so no two blocks update one element: no atomics). Codegen prints, at
the ``reduce`` mark: a partial per thread initialised to the operator's identity, the
thread loop with the reduction statements accumulating into it (every other statement
as usual: an initialisation ``s(i) = 0`` at j = 0 writes memory in the thread that owns
j = 0), a tree reduction of the partials in shared memory, and thread 0 combining the
block's result into the element: ``s = s (op) total``, so the element's value before
the reduction (its initialisation) is kept.

Why that is correct (what ``reduction_relaxes`` checks with isl): along r the only
dependences with a non-zero distance are the chains of the reduction statements R
(relaxed: they accumulate in partials) and dependences into R from a statement writing
R's element (the initialisation: it writes memory before the block's barrier, the
combine reads it after); every other dependence has distance 0 on r (one thread, in
order). The other statements of the band touch nothing that the same block iteration
touches except R's elements, before R (so they may run in any thread: isl prints an
initialisation at j = 0 before the loop, and codegen runs what is outside the thread
loop in thread 0), and the element R updates is a function of the block loops (one
combine per block iteration).

Softmax's and layernorm's rows (a band [n] over a sequence of d loops, the reductions
among them) are scheduler/gpu_rows.py's row blocks, which put this module's reduce marks
on the sequence's reduction loops. Not built: two reduction members, thread axes beside
the reduction's, warp shuffles.
"""

from __future__ import annotations

from collections.abc import Sequence

import islpy as isl

from polycomp import islutil as U
from polycomp.ir import Program

from . import tree as T
from .dependences import Dependences
from .reductions import RELAXABLE

MARK_REDUCE = "reduce"
# a reduction loop shorter than a warp is left sequential: the block reduction's
# barriers would cost more than the loop
MIN_REDUCTION = 32
# element types a block reduction accumulates (codegen/cuda_reduction.py's identities)
DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float32", "float64")


def mark_name(statements: Sequence[str]) -> str:
    return f"{MARK_REDUCE}:{','.join(sorted(statements))}"


def parse_mark(name: str) -> frozenset[str] | None:
    """The statements of a ``reduce:`` mark's name, None for any other mark."""
    kind, sep, rest = name.partition(":")
    if kind != MARK_REDUCE or not sep or not rest:
        return None
    return frozenset(rest.split(","))


def choose_member(extents: Sequence[int | None], mappable: Sequence[int],
                  reducible: Sequence[int], threads: int, grid_axes: int) -> int | None:
    """The member to reduce over a block's threads, or None (the usual mapping).

    ``extents``: the band's members' numbers of values (None: unknown); ``mappable``:
    the members any dependence leaves at distance 0; ``reducible``: those that only the
    reductions' chains keep from it; ``threads``: a block's threads under the usual
    mapping; ``grid_axes``: how many members may go to blocks. Chosen when every other
    member is mappable (each goes to blocks), the mappable members have fewer iterations
    in all than ``threads`` (the usual mapping leaves threads idle) and the member is
    at least MIN_REDUCTION long."""
    n = len(extents)
    others = [m for m in range(n) if m not in mappable]
    if len(others) != 1 or others[0] not in reducible or len(mappable) > grid_axes:
        return None
    r = others[0]
    if any(extents[m] is None for m in range(n)):
        return None  # sizes unknown: no way to tell small from large
    parallel = 1
    for m in mappable:
        parallel *= extents[m]  # type: ignore[operator]
    if parallel >= threads or extents[r] < MIN_REDUCTION:  # type: ignore[operator]
        return None
    return r


def reduction_statements(node: isl.ScheduleNode, r: int, prefix: isl.UnionMap,
                         deps: Dependences) -> frozenset[str]:
    """The statements whose reduction chains member ``r`` of the band at ``node``
    carries between instances that agree on ``prefix``."""
    if deps.reduction is None:
        return frozenset()
    chains = _local(deps.reduction, node, prefix)
    member = T.member_union_map(node, r)
    carried = chains.subtract(member.apply_range(member.reverse()))
    return frozenset(m.get_tuple_name(isl.dim_type.in_) for m in U.maps_of(carried))


def relaxed_relation(node: isl.ScheduleNode, names: frozenset[str], deps: Dependences,
                     program: Program) -> isl.UnionMap:
    """``deps.carried()`` without what a block reduction of ``names`` takes care of:
    their chains, and dependences into them from writers of their elements."""
    relation = deps.carried()
    domain = node.get_domain()
    reduced = _instances(domain, names)
    if deps.reduction is not None:
        chains = deps.reduction.intersect_domain(reduced).intersect_range(reduced)
        relation = relation.subtract(chains)
    return relation.subtract(_writers_into(domain, reduced, program))


def _writers_into(domain: isl.UnionSet, reduced: isl.UnionSet,
                  program: Program) -> isl.UnionMap:
    """{ P[x] -> S[y] : P[x] writes the element S[y] updates, S[y] in ``reduced`` }."""
    writes = U.union_map([s.write for s in program.statements]).intersect_domain(domain)
    return writes.apply_range(writes.intersect_domain(reduced).reverse())


def reduction_relaxes(node: isl.ScheduleNode, r: int, prefix: isl.UnionMap,
                      names: frozenset[str], deps: Dependences, program: Program) -> bool:
    """Whether member ``r`` of the band at ``node`` may be shared out over a block's
    threads with ``names`` reduced per thread and combined (module doc)."""
    from .gpu_mapping import mappable  # noqa: PLC0415 (gpu_mapping imports this module)

    if not names:
        return False
    statements = {s.name: s for s in program.statements}
    for name in names:
        s = statements.get(name)
        if s is None or s.reduction not in RELAXABLE or s.target.dtype not in DTYPES:
            return False
    if not mappable(node, r, prefix, relaxed_relation(node, names, deps, program)):
        return False
    domain = node.get_domain()
    reduced = _instances(domain, names)
    others = domain.subtract(reduced)
    # the loops around r: the host's and the other members (the block loops)
    outer = prefix.intersect_domain(domain)
    for m in range(node.band_n_member()):
        if m != r:
            outer = outer.flat_range_product(T.member_union_map(node, m))
    # the other statements (initialisations) touch nothing the block's iteration
    # touches, but the elements the reductions update, before them: they may run in
    # any thread (codegen runs one that isl prints outside the thread loop in thread 0)
    relation = deps.all() if deps.reduction is None else deps.all().union(deps.reduction)
    same = relation.intersect(outer.apply_range(outer.reverse()))
    touching = same.intersect_domain(others).union(same.intersect_range(others))
    if not touching.subtract(_writers_into(domain, reduced, program)).is_empty():
        return False
    for s in program.statements:
        if s.name in names:
            write = isl.UnionMap.from_map(s.write).intersect_domain(reduced)
            if not outer.intersect_domain(reduced).reverse().apply_range(write).is_single_valued():
                return False
    return True


def _instances(domain: isl.UnionSet, names: frozenset[str]) -> isl.UnionSet:
    out = isl.UnionSet.empty(domain.get_space())
    for part in U.sets_of(domain):
        if part.get_tuple_name() in names:
            out = out.union(isl.UnionSet.from_set(part))
    return out


def _local(relation: isl.UnionMap, node: isl.ScheduleNode,
           prefix: isl.UnionMap) -> isl.UnionMap:
    """``relation`` between instances of the band at ``node`` that agree on ``prefix``."""
    domain = node.get_domain()
    local = relation.intersect_domain(domain).intersect_range(domain)
    return local.intersect(prefix.apply_range(prefix.reverse()))


__all__ = ["MARK_REDUCE", "mark_name", "parse_mark", "choose_member",
           "reduction_statements", "relaxed_relation", "reduction_relaxes"]
