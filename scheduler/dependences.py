"""Exact dependence analysis: Program -> Dependences.

Flow (read-after-write) dependences are value-based: isl's access-info flow analysis
finds, for every read instance, the last write before it in the original schedule.
Anti (write-after-read) and output (write-after-write) dependences are computed the same
way, as PPCG does: for every write, the reads since the previous write of that element
(anti) and that previous write (output). Every memory-based conflict is the end of a
chain of these, so a schedule that keeps them forward keeps all conflicts forward, and a
loop that carries none of them carries no conflict; they are far smaller relations,
which keeps the schedulers fast. The relations are deliberately not coalesced: isl would
merge a stencil's neighbour reads into one polyhedron with many faces (heat-3d's seven
become an octahedron), whose Farkas dual makes the schedulers run for minutes; the
printout coalesces for reading only.

Example, ``C(i) += A(i, k)`` (S0 initialises C, S1 accumulates):
    flow   { S0[i] -> S1[i, 0]; S1[i, k] -> S1[i, k + 1] }
    anti   { S1[i, k] -> S1[i, k + 1] }      (S1 reads C(i), the next S1 overwrites it)
    output { S0[i] -> S1[i, 0]; S1[i, k] -> S1[i, k + 1] }
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import islpy as isl

from polycomp import islutil as U
from polycomp.errors import InternalError
from polycomp.ir import Program

from .budget import in_time_limit


@dataclass(frozen=True, eq=False)
class Dependences:
    """Dependences between statement instances, all as isl union maps source -> sink.

    flow      value-based read-after-write
    anti      memory-based write-after-read
    output    memory-based write-after-write
    live_in   reads with no write before them (they read the kernel's inputs)
    reduction the accumulation chains of reductions whose order may change (None: no
              such chain; set by scheduler/reductions.py, which also extends the other
              three kinds to whole reductions)
    reduction_elements
              for those statements, every pair of instances that update the same element
    """

    domain: isl.UnionSet
    flow: isl.UnionMap
    anti: isl.UnionMap
    output: isl.UnionMap
    live_in: isl.UnionMap
    reduction: isl.UnionMap | None = None
    reduction_elements: isl.UnionMap | None = None

    def all(self) -> isl.UnionMap:
        """Every dependence that constrains a schedule (validity)."""
        return self.flow.union(self.anti).union(self.output)

    def carried(self) -> isl.UnionMap:
        """What a parallel or SIMD loop must not carry: validity plus the reductions'
        chains (a loop that carries a chain needs the reduction emitted for it)."""
        everything = self.all()
        return everything if self.reduction is None else everything.union(self.reduction)

    def kinds(self) -> list[tuple[str, isl.UnionMap]]:
        """The validity kinds, each of which a schedule must keep forward."""
        return [("flow", self.flow), ("anti", self.anti), ("output", self.output)]

    def all_kinds(self) -> list[tuple[str, isl.UnionMap]]:
        """The validity kinds and, if any, the reorderable reduction chains."""
        chains = [] if self.reduction is None else [("reduction", self.reduction)]
        return self.kinds() + chains

    def __str__(self) -> str:
        lines = []
        for kind, deps in self.all_kinds():
            maps = U.maps_of(deps.coalesce())
            lines.append(f"{kind} ({len(maps)}):" if maps else f"{kind}: none")
            for m in sorted(maps, key=lambda m: (m.get_tuple_name(isl.dim_type.in_),
                                                  m.get_tuple_name(isl.dim_type.out))):
                lines.append(f"  {m.get_tuple_name(isl.dim_type.in_)} -> "
                             f"{m.get_tuple_name(isl.dim_type.out)}: {m}")
                distance = _distance(m)
                if distance:
                    lines.append(f"      distance {distance}")
        return "\n".join(lines)


def _distance(m: isl.Map) -> str:
    """The distance vectors of a dependence between instances of one statement."""
    if m.get_tuple_name(isl.dim_type.in_) != m.get_tuple_name(isl.dim_type.out):
        return ""
    return str(m.deltas().coalesce())


# seconds the exact (value-based) analysis may take before the memory-based superset is
# used instead (PolyBench's kernels: < 0.5 s; a parametric fuzz nest ran for minutes)
EXACT_LIMIT = 5.0

_SEPARATOR = "\n;;\n"


def compute_dependences(program: Program) -> Dependences:
    """All dependences of ``program`` under its original (sequential) schedule.

    isl's exact analysis can run for minutes on a small parametric nest (its flow
    analysis splits every strided or guarded domain by each case of the parameters), and
    islpy holds the GIL inside isl, so it runs in a child process (scheduler/budget.py)
    for at most ``EXACT_LIMIT`` seconds; its relations come back as isl text, which
    reads back as the same relations. Past the limit, or when isl fails, the
    memory-based dependences (a superset: legal schedules stay legal, the schedulers
    only see more constraints) are used."""
    # only parameter values in the context matter: a dependence that exists only outside
    # it would make legal schedules look illegal
    context = program.context
    schedule = program.original_schedule.intersect_params(context)
    reads = program.reads().intersect_params(context)
    writes = program.writes().intersect_params(context)
    domain = program.domain().intersect_params(context)

    def exact() -> str:
        deps = _exact(program, reads, writes, schedule)
        return "" if deps is None else _SEPARATOR.join(
            str(m) for m in (deps.flow, deps.anti, deps.output, deps.live_in))

    try:
        text = in_time_limit(exact, EXACT_LIMIT)
    except TimeoutError:
        text = None
    if text:
        flow, anti, output, live_in = (isl.UnionMap(t) for t in text.split(_SEPARATOR))
        return Dependences(domain, flow, anti, output, live_in)
    try:
        return _memory_based(program, reads, writes, schedule)
    except isl.Error as exc:
        raise InternalError(f"dependence analysis failed for '{program.name}': "
                            f"{str(exc).splitlines()[0]}") from exc


def _exact(program: Program, reads: isl.UnionMap, writes: isl.UnionMap,
           schedule: isl.UnionMap) -> Dependences | None:
    """isl's value-based analysis; None where isl fails on it."""
    try:
        return _analyse(program, reads, writes, lambda info: info.set_schedule_map(schedule))
    except isl.Error:
        pass
    # isl's compute_flow fails on some valid inputs ("affine expression involves some of
    # the domain dimensions", raised while it drops a factor of a product domain from a
    # lexmax that still mentions it: seen with a strided loop, an if that splits the
    # domain into pieces and a scalar written at two depths). First its schedule-tree
    # path (the one PPCG uses; a single band of the same time dimensions is the same
    # order), which avoids the bug in some of these; then memory-based dependences.
    try:
        tree = isl.Schedule.from_domain(schedule.domain()).insert_partial_schedule(
            isl.MultiUnionPwAff.from_union_map(schedule))
        return _analyse(program, reads, writes, lambda info: info.set_schedule(tree))
    except isl.Error:
        return None


def _analyse(program: Program, reads: isl.UnionMap, writes: isl.UnionMap,
             with_schedule: Callable[[isl.UnionAccessInfo], isl.UnionAccessInfo]
             ) -> Dependences:
    """The three dependence kinds, with ``with_schedule`` giving each query the order."""
    flow_info = with_schedule(isl.UnionAccessInfo.from_sink(reads)
                              .set_must_source(writes)).compute_flow()
    flow = flow_info.get_may_dependence()
    live_in = flow_info.get_may_no_source().coalesce()
    anti = with_schedule(isl.UnionAccessInfo.from_sink(writes)
                         .set_may_source(reads)
                         .set_kill(writes)).compute_flow().get_may_dependence()
    output = with_schedule(isl.UnionAccessInfo.from_sink(writes)
                           .set_must_source(writes)).compute_flow().get_may_dependence()
    context = program.context
    return Dependences(program.domain().intersect_params(context), flow, anti, output, live_in)


def _memory_based(program: Program, reads: isl.UnionMap, writes: isl.UnionMap,
                  schedule: isl.UnionMap) -> Dependences:
    """Memory-based dependences with plain set operations, the fallback when isl's
    value-based analysis fails: every earlier write of the element a read sees (flow),
    every earlier read of the element a write overwrites (anti), every earlier write of
    it (output). Each is a superset of the exact relation, so a schedule that keeps them
    forward is legal; the schedulers only see more (transitively implied) dependences.
    live_in stays exact: the reads with no write of their element before them.

        before = { a -> b : θ(a) <lex θ(b) }
        flow   = (W ∘ R⁻¹) ∩ before          { w -> r : W(w) = R(r) }
    """
    before = schedule.lex_lt_union_map(schedule)
    flow = writes.apply_range(reads.reverse()).intersect(before)
    anti = reads.apply_range(writes.reverse()).intersect(before)
    output = writes.apply_range(writes.reverse()).intersect(before)
    written_before = before.reverse().apply_range(writes)   # r -> elements written before r
    live_in = reads.subtract(written_before).coalesce()
    domain = program.domain().intersect_params(program.context)
    return Dependences(domain, flow, anti, output, live_in)
