"""The scheduler "isl": isl's own scheduler (a Pluto-like ILP in isl).

Input: Program and Dependences. Output: an isl.Schedule whose bands isl marks permutable
and coincident. Constraints: validity = every dependence; proximity = flow dependences
(keep producers near consumers); coincidence = every dependence (coincident members are
the parallel ones). Context options (outer coincidence, fusion across SCCs) are set in
polycomp.options.configure_isl.

A program specialised to sizes is scheduled in its parametric form (``Program.generic``)
and the tree specialised afterwards, as PPCG does: with constant bounds isl's ILP finds
hyperplanes whose coefficients grow with the sizes (see scheduler/specialize.py).

isl can give up or run away, and a user who asked for "isl" still gets a kernel:
- on the parametric form it can fail ("unable to carry dependences": the generic
  program's context lacks the bounds that make the given sizes valid, and the
  dependences it then sees need more than affine hyperplanes); the specialised
  program is scheduled instead;
- on a small program with constant bounds its ILP can run for minutes (the tableau's
  integers grow to thousands of digits). It runs in a child process
  (scheduler/budget.py) for at most ``TIME_LIMIT`` seconds;
- when both fail, pluto schedules the program, with a SchedulerFallbackWarning.
"""

from __future__ import annotations

import warnings

import islpy as isl

from polycomp.ir import Program
from polycomp.options import Options, configure_isl

from .budget import SchedulerFallbackWarning, in_time_limit
from .dependences import Dependences, compute_dependences
from .specialize import specialize_schedule

# seconds isl's scheduler may take on one program (PolyBench's kernels take < 0.1 s)
TIME_LIMIT = 5.0


def schedule_isl(program: Program, deps: Dependences, options: Options) -> isl.Schedule:
    generic = program.generic
    reason = ""
    if generic is not None:
        try:
            schedule = _compute(generic, compute_dependences(generic))
            if schedule is not None:
                return specialize_schedule(schedule, dict(program.sizes), program.domain())
            reason = "it found no schedule for the parametric program"
        except TimeoutError:
            reason = f"it ran for more than {TIME_LIMIT:g} s"
    if not reason.startswith("it ran"):
        try:
            schedule = _compute(program, deps)
            if schedule is not None:
                return schedule
            reason = "it found no schedule"
        except TimeoutError:
            reason = f"it ran for more than {TIME_LIMIT:g} s"
    from .pluto import schedule_pluto
    warnings.warn(f"isl's scheduler gave up on '{program.name}' ({reason}); "
                  f"scheduled with pluto instead", SchedulerFallbackWarning, stacklevel=2)
    return schedule_pluto(program, deps, options)


def _compute(program: Program, deps: Dependences) -> isl.Schedule | None:
    """isl's schedule, None when isl reports an error; TimeoutError past TIME_LIMIT."""
    configure_isl()
    validity = deps.all()
    constraints = (isl.ScheduleConstraints.on_domain(program.domain())
                   .set_context(program.context)
                   .set_validity(validity)
                   .set_coincidence(validity)
                   .set_proximity(deps.flow))
    text = in_time_limit(lambda: str(constraints.compute_schedule()), TIME_LIMIT)
    return None if text is None else isl.Schedule(text)
