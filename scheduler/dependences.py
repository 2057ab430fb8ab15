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

from dataclasses import dataclass

import islpy as isl

from polycomp import islutil as U
from polycomp.ir import Program


@dataclass(frozen=True, eq=False)
class Dependences:
    """Dependences between statement instances, all as isl union maps source -> sink.

    flow     value-based read-after-write
    anti     memory-based write-after-read
    output   memory-based write-after-write
    live_in  reads with no write before them (they read the kernel's inputs)
    """

    domain: isl.UnionSet
    flow: isl.UnionMap
    anti: isl.UnionMap
    output: isl.UnionMap
    live_in: isl.UnionMap

    def all(self) -> isl.UnionMap:
        """Every dependence that constrains a schedule (validity)."""
        return self.flow.union(self.anti).union(self.output)

    def kinds(self) -> list[tuple[str, isl.UnionMap]]:
        return [("flow", self.flow), ("anti", self.anti), ("output", self.output)]

    def __str__(self) -> str:
        lines = []
        for kind, deps in self.kinds():
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


def compute_dependences(program: Program) -> Dependences:
    """All dependences of ``program`` under its original (sequential) schedule."""
    # only parameter values in the context matter: a dependence that exists only outside
    # it would make legal schedules look illegal
    context = program.context
    schedule = program.original_schedule.intersect_params(context)
    reads = program.reads().intersect_params(context)
    writes = program.writes().intersect_params(context)
    flow_info = (isl.UnionAccessInfo.from_sink(reads)
                 .set_must_source(writes)
                 .set_schedule_map(schedule)
                 .compute_flow())
    flow = flow_info.get_may_dependence()
    live_in = flow_info.get_may_no_source().coalesce()
    anti = (isl.UnionAccessInfo.from_sink(writes)
            .set_may_source(reads)
            .set_kill(writes)
            .set_schedule_map(schedule)
            .compute_flow()
            .get_may_dependence())
    output = (isl.UnionAccessInfo.from_sink(writes)
              .set_must_source(writes)
              .set_schedule_map(schedule)
              .compute_flow()
              .get_may_dependence())
    return Dependences(program.domain().intersect_params(context), flow, anti, output, live_in)
