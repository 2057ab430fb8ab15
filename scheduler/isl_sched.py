"""The scheduler "isl": isl's own scheduler (a Pluto-like ILP in isl).

Input: Program and Dependences. Output: an isl.Schedule whose bands isl marks permutable
and coincident. Constraints: validity = every dependence; proximity = flow dependences
(keep producers near consumers); coincidence = every dependence (coincident members are
the parallel ones). Context options (outer coincidence, fusion across SCCs) are set in
polycomp.options.configure_isl.

A program specialised to sizes is scheduled in its parametric form (``Program.generic``)
and the tree specialised afterwards, as PPCG does: with constant bounds isl's ILP finds
hyperplanes whose coefficients grow with the sizes (see scheduler/specialize.py).
"""

from __future__ import annotations

import islpy as isl

from polycomp.ir import Program
from polycomp.options import Options, configure_isl

from .dependences import Dependences, compute_dependences
from .specialize import specialize_schedule


def schedule_isl(program: Program, deps: Dependences, options: Options) -> isl.Schedule:
    generic = program.generic
    if generic is None:
        return _compute(program, deps)
    schedule = _compute(generic, compute_dependences(generic))
    return specialize_schedule(schedule, dict(program.sizes), program.domain())


def _compute(program: Program, deps: Dependences) -> isl.Schedule:
    configure_isl()
    validity = deps.all()
    constraints = (isl.ScheduleConstraints.on_domain(program.domain())
                   .set_context(program.context)
                   .set_validity(validity)
                   .set_coincidence(validity)
                   .set_proximity(deps.flow))
    return constraints.compute_schedule()
