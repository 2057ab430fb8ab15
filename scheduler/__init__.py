"""Schedulers and schedule-tree passes (installed as polycomp.scheduler).

Every scheduler is a function ``(Program, Dependences, Options) -> isl.Schedule``;
``SCHEDULERS`` maps the names users pass as ``scheduler=`` to them.
"""

from .dependences import Dependences, compute_dependences
from .isl_sched import schedule_isl
from .original import schedule_original

SCHEDULERS = {
    "none": schedule_original,
    "isl": schedule_isl,
}

__all__ = ["SCHEDULERS", "Dependences", "compute_dependences"]
