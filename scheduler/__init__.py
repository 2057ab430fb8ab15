"""Schedulers and schedule-tree passes (installed as polycomp.scheduler).

Every scheduler is a function ``(Program, Dependences, Options) -> isl.Schedule``;
``get_scheduler(name)`` returns the one users name with ``scheduler=``.

The searching schedulers ("pluto", and "isl", which falls back to pluto) can run for
minutes on a small program (Farkas duals and ILPs whose integers grow without bound); they
run in a child process for at most ``SCHEDULE_LIMIT`` seconds of wall time
(scheduler/budget.py), and past it the program keeps its original order (the scheduler
"none", always legal) with a SchedulerFallbackWarning. The isl scheduler's own limits and
its fallback to pluto run inside that child, so the whole chain ends within the limit.
"""

from __future__ import annotations

import functools
import importlib
import warnings

import islpy as isl

from polycomp.errors import InternalError

from .budget import SchedulerFallbackWarning, call_in_time_limit
from .dependences import Dependences, compute_dependences

# name -> "module:function"; imported on first use so that one scheduler's import cost
# (or failure) does not touch the others
SCHEDULERS = {
    "none": "original:schedule_original",
    "isl": "isl_sched:schedule_isl",
    "pluto": "pluto:schedule_pluto",
    "custom": "custom:schedule_custom",
}
# the schedulers that search (and may search for minutes): run under SCHEDULE_LIMIT
BOUNDED = frozenset({"isl", "pluto"})
# seconds of wall time a searching scheduler may take on one program (PolyBench: < 3 s)
SCHEDULE_LIMIT = 15.0


def get_scheduler(name: str):
    """The scheduler called ``name``; an isl error inside it (a polycomp defect) comes out
    as an InternalError naming the scheduler."""
    module, function = SCHEDULERS[name].split(":")
    scheduler = getattr(importlib.import_module(f"{__name__}.{module}"), function)

    @functools.wraps(scheduler)
    def run(program, deps, options):
        try:
            if name not in BOUNDED:
                return scheduler(program, deps, options)
            return _bounded(name, scheduler, program, deps, options)
        except isl.Error as exc:
            raise InternalError(f"scheduler '{name}' failed on '{program.name}': "
                                f"{str(exc).splitlines()[0]}") from exc

    return run


def _bounded(name, scheduler, program, deps, options) -> isl.Schedule:
    """``scheduler``'s tree computed in a child process within SCHEDULE_LIMIT seconds (its
    exceptions and warnings come back); past the limit the original order."""
    limit = SCHEDULE_LIMIT
    try:
        text = call_in_time_limit(lambda: str(scheduler(program, deps, options)), limit)
    except TimeoutError:
        warnings.warn(f"scheduler '{name}' ran for more than {limit:g} s on "
                      f"'{program.name}'; it keeps its original order",
                      SchedulerFallbackWarning, stacklevel=4)
        from .original import schedule_original
        return schedule_original(program, deps, options)
    return isl.Schedule(text)


__all__ = ["SCHEDULERS", "Dependences", "compute_dependences", "get_scheduler"]
