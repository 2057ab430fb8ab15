"""The passes that run after a scheduler, in order: each (schedule, program, deps,
options) -> schedule, writing its decisions into the tree as band splits and marks."""

from __future__ import annotations

from collections.abc import Callable

import islpy as isl

from polycomp.ir import Program
from polycomp.options import Options

from .dependences import Dependences
from .parallel import mark_parallel

Pass = Callable[[isl.Schedule, Program, Dependences, Options], isl.Schedule]


def _parallel(schedule: isl.Schedule, program: Program, deps: Dependences,
              options: Options) -> isl.Schedule:
    return mark_parallel(schedule, deps) if options.parallel else schedule


PASSES: list[tuple[str, Pass]] = [
    ("parallel", _parallel),
]


def run_passes(schedule: isl.Schedule, program: Program, deps: Dependences,
               options: Options) -> isl.Schedule:
    for _, fn in PASSES:
        schedule = fn(schedule, program, deps, options)
    return schedule
