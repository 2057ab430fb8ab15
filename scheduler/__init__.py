"""Schedulers and schedule-tree passes (installed as polycomp.scheduler).

Every scheduler is a function ``(Program, Dependences, Options) -> isl.Schedule``;
``get_scheduler(name)`` returns the one users name with ``scheduler=``.
"""

from __future__ import annotations

import functools
import importlib

import islpy as isl

from polycomp.errors import InternalError

from .dependences import Dependences, compute_dependences

# name -> "module:function"; imported on first use so that one scheduler's import cost
# (or failure) does not touch the others
SCHEDULERS = {
    "none": "original:schedule_original",
    "isl": "isl_sched:schedule_isl",
    "pluto": "pluto:schedule_pluto",
    "custom": "custom:schedule_custom",
}


def get_scheduler(name: str):
    """The scheduler called ``name``; an isl error inside it (a polycomp defect) comes out
    as an InternalError naming the scheduler."""
    module, function = SCHEDULERS[name].split(":")
    scheduler = getattr(importlib.import_module(f"{__name__}.{module}"), function)

    @functools.wraps(scheduler)
    def run(program, deps, options):
        try:
            return scheduler(program, deps, options)
        except isl.Error as exc:
            raise InternalError(f"scheduler '{name}' failed on '{program.name}': "
                                f"{str(exc).splitlines()[0]}") from exc

    return run


__all__ = ["SCHEDULERS", "Dependences", "compute_dependences", "get_scheduler"]
