"""The passes that run after a scheduler, in order: each (schedule, program, deps,
options) -> schedule, writing its decisions into the tree as band splits and marks.

Order: the target-neutral passes here (tiling: new tile and point bands), then the
target's own (Options.target, polycomp/targets/; a target with ``neutral_tiling`` off,
as the GPU ones, tiles in its own passes): for OpenMP, parallel (marks the
outermost dependence-free loop, a tile loop when there is one; never nested), then
intra-tile (reorders the innermost bands below any parallel mark, marks the innermost
loop vector and unrolls and jams register tiles inside it). See docs/TILING.md.
"""

from __future__ import annotations

from collections.abc import Callable

import islpy as isl

from polycomp.errors import InternalError
from polycomp.ir import Program
from polycomp.options import Options
from polycomp.targets import get_target

from .dependences import Dependences
from .tiling import tile_bands

Pass = Callable[[isl.Schedule, Program, Dependences, Options], isl.Schedule]


def _tiling(schedule: isl.Schedule, program: Program, deps: Dependences,
            options: Options) -> isl.Schedule:
    return tile_bands(schedule, program, deps, options) if options.tile else schedule


# the passes every target runs, before its own (Target.passes)
PASSES: list[tuple[str, Pass]] = [
    ("tiling", _tiling),
]


def run_passes(schedule: isl.Schedule, program: Program, deps: Dependences,
               options: Options) -> isl.Schedule:
    target = get_target(options.target)
    for name, fn in [*(PASSES if target.neutral_tiling else []), *target.passes]:
        try:
            schedule = fn(schedule, program, deps, options)
        except isl.Error as exc:  # a polycomp defect: name the stage, not isl's C function
            raise InternalError(f"the {name} pass failed on '{program.name}': "
                                f"{str(exc).splitlines()[0]}") from exc
    return schedule
