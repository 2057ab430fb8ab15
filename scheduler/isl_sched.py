"""The scheduler "isl": isl's own scheduler (a Pluto-like ILP in isl).

Input: Program and Dependences. Output: an isl.Schedule whose bands isl marks permutable
and coincident. Constraints: validity = every dependence (reduction chains excepted,
scheduler/reductions.py); proximity = flow dependences and reduction chains (keep
producers near consumers, partial sums near each other); coincidence = validity and the
chains (coincident members are the parallel ones). Context options (outer coincidence, fusion across SCCs) are set in
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
- the parametric form's own dependence analysis can run for minutes where the
  specialised one takes milliseconds: its context keeps only the sizes' signs, and
  isl's flow analysis splits every strided or guarded domain by each case of the
  parameters (a 4-line nest with steps 3 and 2 took more than a minute). It runs in a
  child too, for at most ``DEPENDENCE_LIMIT`` seconds; past that, the specialised
  program is scheduled with the dependences the driver already computed;
- when both fail, pluto schedules the program, with a SchedulerFallbackWarning.
"""

from __future__ import annotations

import warnings

import islpy as isl

from polycomp.ir import Program
from polycomp.options import Options, configure_isl

from .budget import SchedulerFallbackWarning, in_time_limit
from .dependences import Dependences, compute_dependences
from .reductions import relax_reductions
from .specialize import specialize_schedule

# seconds isl's scheduler may take on one program (PolyBench's kernels take < 0.1 s)
TIME_LIMIT = 5.0
# seconds the parametric program's dependence analysis may take (PolyBench: < 0.1 s)
DEPENDENCE_LIMIT = 2.0


def schedule_isl(program: Program, deps: Dependences, options: Options) -> isl.Schedule:
    generic = program.generic
    reason = ""
    if generic is not None:
        # None: schedule the specialised one
        generic_deps = _generic_dependences(generic, options.exact_fp)
        try:
            if generic_deps is not None:
                schedule = _compute(generic, generic_deps)
                if schedule is not None:
                    return specialize_schedule(schedule, dict(program.sizes),
                                               program.domain())
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


_SEPARATOR = "\n;;\n"


Constraints = tuple[isl.UnionMap, isl.UnionMap, isl.UnionMap]  # validity, coincidence, proximity


def _constraints(deps: Dependences) -> Constraints:
    chains = deps.carried().subtract(deps.all())
    return deps.all(), deps.carried(), deps.flow.union(chains)


def _generic_dependences(generic: Program, exact_fp: bool) -> Constraints | None:
    """The constraints of the parametric program, computed in a child process; None when
    that takes more than DEPENDENCE_LIMIT or fails (the specialised program's dependences,
    which the caller has, are then used with the specialised program)."""
    def constraints() -> str:
        deps = relax_reductions(generic, compute_dependences(generic), exact_fp)
        return _SEPARATOR.join(str(m) for m in _constraints(deps))

    try:
        text = in_time_limit(constraints, DEPENDENCE_LIMIT)
    except TimeoutError:
        return None
    if text is None:
        return None
    validity, coincidence, proximity = text.split(_SEPARATOR)
    return isl.UnionMap(validity), isl.UnionMap(coincidence), isl.UnionMap(proximity)


def _compute(program: Program, deps: Dependences | Constraints) -> isl.Schedule | None:
    """isl's schedule, None when isl reports an error; TimeoutError past TIME_LIMIT.
    ``deps``: the Dependences, or (validity, coincidence, proximity)."""
    configure_isl()
    validity, coincidence, proximity = (_constraints(deps) if isinstance(deps, Dependences)
                                        else deps)
    constraints = (isl.ScheduleConstraints.on_domain(program.domain())
                   .set_context(program.context)
                   .set_validity(validity)
                   .set_coincidence(coincidence)
                   .set_proximity(proximity))
    text = in_time_limit(lambda: str(constraints.compute_schedule()), TIME_LIMIT)
    return None if text is None else isl.Schedule(text)
