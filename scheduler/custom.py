"""The scheduler "custom": the user's own schedule, checked like any other.

Input: Options.schedule, either an isl schedule tree in YAML (``{ domain: ..., child:
... }`` or block style, alone or as ``polycomp compile --emit schedule`` prints it) or a
union map from statement instances to time
(``{ S0[i, j] -> [j, i] }``). Output: the tree, restricted to the program's domain. The
pipeline checks it against the dependences; a violation is the user's
IllegalScheduleError, naming the broken dependence.

Marks in the tree use the neutral names of scheduler/tree.py (``parallel``, ``vector``);
the names they had when OpenMP was polycomp's only target (``omp_parallel``,
``omp_simd``) are read as aliases of those.
"""

from __future__ import annotations

import islpy as isl

from polycomp.errors import IllegalScheduleError, ParseError
from polycomp.ir import Program
from polycomp.options import Options

from . import tree as T
from .dependences import Dependences
from .original import tree_from_schedule_map

# the line before the YAML tree in `polycomp compile --emit schedule` (polycomp/driver.py)
SCHEDULE_TREE_HEADING = "schedule tree:"


def schedule_custom(program: Program, deps: Dependences, options: Options) -> isl.Schedule:
    text = (options.schedule or "").strip()
    if SCHEDULE_TREE_HEADING in text:  # the whole of `--emit schedule`: keep the tree
        text = text.split(SCHEDULE_TREE_HEADING, 1)[1].strip()
    domain = program.domain()
    if "domain" in text.split(":")[0] or text.startswith("domain"):
        try:
            schedule = isl.Schedule(text)
        except isl.Error as exc:
            raise ParseError(f"cannot read the schedule tree: {str(exc).splitlines()[0]}",
                             hint="give isl's YAML form, e.g. from `polycomp compile --emit schedule`") from None
        if not domain.is_subset(schedule.get_domain()):
            raise IllegalScheduleError("the schedule tree's domain does not contain every "
                                       "statement instance of the program",
                                       hint="a tree written for other sizes does not fit: print "
                                            "it with the same sizes (`--emit schedule --sizes ...`), "
                                            "or compile parametric for a parametric tree")
        return T.canonical_marks(schedule.intersect_domain(domain))
    try:
        time = isl.UnionMap(text)
    except isl.Error as exc:
        raise ParseError(f"cannot read the schedule map: {str(exc).splitlines()[0]}",
                         hint="e.g. { S0[i, j] -> [j, i] }") from None
    if not time.intersect_domain(domain).is_single_valued():
        raise IllegalScheduleError("the schedule map gives some statement instance two times",
                                   hint="give each statement one affine map, e.g. "
                                        "{ S0[i, j] -> [j, i] }")
    return tree_from_schedule_map(domain, time)
