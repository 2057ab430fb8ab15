"""Targets: what turns a checked schedule tree into code that runs, one object per backend.

Place in the pipeline: everything up to tiling is target-neutral (frontends, dependences,
schedulers, scheduler/tiling.py). ``Options.target`` names a target; the stages after
that ask its object (polycomp/targets/base.py ``Target``) for what they do:

    scheduler/passes.run_passes   tiling, then target.passes (OpenMP: parallel marks,
                                  intra-tile order, vector marks, unroll-and-jam)
    polycomp/driver.py            target.check_marks and legality.check_schedule, then
                                  target.annotate (after the check), contraction, then
                                  target.generate -> Source
    polycomp/build.py             target.compiler_command, target.build_flags and
                                  target.key_fields (with target.name: the cache key)
    polycomp/runtime.py           target.build + target.load -> the entry, called under
                                  target.calling (OpenMP: the thread count)

Built in: ``openmp`` (targets/openmp.py: OpenMP C, gcc, ctypes). A new backend is a new
module with a Target subclass and one ``register_target`` line below; no stage branches
on a target's name.
"""

from __future__ import annotations

from .base import Target
from .registry import (check_target_name, get_target, register_target, target_names,
                       unregister_target)


def _openmp() -> Target:
    from .openmp import OpenMPTarget
    return OpenMPTarget()


register_target("openmp", _openmp)

__all__ = ["Target", "check_target_name", "get_target", "register_target", "target_names",
           "unregister_target"]
