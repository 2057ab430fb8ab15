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

Built in: ``openmp`` (targets/openmp.py: OpenMP C, gcc, ctypes), ``cuda`` and
``cuda-emulated`` (targets/cuda.py: CUDA from scheduler/gpu_mapping.py's marks, built by
nvcc for a GPU, or by g++ on CPU threads with polycomp_cuda.h). A new backend is a new
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


def _cuda() -> Target:
    from .cuda import CudaTarget
    return CudaTarget()


def _cuda_emulated() -> Target:
    from .cuda import CudaEmulatedTarget
    return CudaEmulatedTarget()


register_target("openmp", _openmp)
register_target("cuda", _cuda)
register_target("cuda-emulated", _cuda_emulated)

__all__ = ["Target", "check_target_name", "get_target", "register_target", "target_names",
           "unregister_target"]
