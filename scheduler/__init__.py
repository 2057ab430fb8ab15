"""Schedulers and schedule-tree passes (installed as polycomp.scheduler).

Every scheduler is a function ``(Program, Dependences, Options) -> isl.Schedule``;
``get_scheduler(name)`` returns the one users name with ``scheduler=``.
"""

from __future__ import annotations

import importlib

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
    module, function = SCHEDULERS[name].split(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), function)


__all__ = ["SCHEDULERS", "Dependences", "compute_dependences", "get_scheduler"]
