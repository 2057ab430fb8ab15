"""The ``openmp`` target: OpenMP C for CPUs, built by the host C compiler, called by ctypes.

Place in the pipeline: the default ``Options.target``. What it owns (targets/base.py):

- passes after tiling: ``parallel`` (scheduler/parallel.py: a ``parallel`` mark on the
  outermost dependence-free loop worth a thread team; Options.parallel and
  parallel_min_work) and ``intratile`` (scheduler/intratile.py: point-loop order,
  ``vector`` marks, unroll-and-jam);
- marks it prints: ``parallel`` (``omp parallel for``) and ``vector`` (``omp simd``);
- after the legality check: the reductions each vector loop accumulates per lane
  (scheduler/reductions.annotate_simd_reductions);
- code: codegen/openmp.py (the OpenMP dialect of codegen/c.py's printer);
- build: ``-fopenmp -fPIC`` with ``-shared`` (a library) or ``-c`` (an object), the
  ``-DPOLYCOMP_MVEC_<f>`` flags and ``-lmvec`` for the vector math libmvec serves
  (build.vector_math_flags), ``-lm``; the compiler and optimisation flags are
  build.compiler_command's; cache keys hash the compiler's identity and the CPU model;
- calls: under threads.call_threads (the thread count adapted to the load) when the C
  has OpenMP regions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

import islpy as isl

from polycomp import build
from polycomp.codegen.openmp import generate_openmp
from polycomp.codegen.source import Source
from polycomp.ir import Program
from polycomp.options import Options
from polycomp.scheduler import tree as T
from polycomp.scheduler.dependences import Dependences
from polycomp.scheduler.intratile import optimize_tiles
from polycomp.scheduler.parallel import mark_parallel
from polycomp.scheduler.reductions import annotate_simd_reductions
from polycomp.scheduler.tile_fusion import fuse_into_tiles
from polycomp.threads import call_threads

from .native import NativeTarget

OPENMP_FLAGS = ("-fopenmp", "-fPIC")


def _parallel(schedule: isl.Schedule, program: Program, deps: Dependences,
              options: Options) -> isl.Schedule:
    if not options.parallel:
        return schedule
    return mark_parallel(schedule, deps, program, options.parallel_min_work)


class OpenMPTarget(NativeTarget):
    """OpenMP C for CPUs (module doc)."""

    name = "openmp"
    marks = frozenset({T.MARK_PARALLEL, T.MARK_VECTOR})
    passes = (("parallel", _parallel), ("tile_fusion", fuse_into_tiles),
              ("intratile", optimize_tiles))

    def annotate(self, schedule: isl.Schedule, program: Program, deps: Dependences,
                 options: Options) -> isl.Schedule:
        return annotate_simd_reductions(schedule, deps)

    def generate(self, program: Program, schedule: isl.Schedule, options: Options,
                 ordered: isl.UnionMap) -> Source:
        return generate_openmp(program, schedule, options, ordered)

    def build_flags(self, step: str, texts: Sequence[str]) -> tuple[list[str], list[str]]:
        if step == "link":
            libraries = sorted({lib for text in texts for lib in build.vector_math_flags(text)[1]})
            return [*OPENMP_FLAGS, "-shared"], [*libraries, "-lm"]
        (text,) = texts
        defines, libraries = build.vector_math_flags(text)
        if step == "object":
            return [*OPENMP_FLAGS, "-c", *defines], []
        if step == "library":
            return [*OPENMP_FLAGS, "-shared", *defines], [*libraries, "-lm"]
        raise ValueError(f"no build step '{step}'")

    def calling(self, source: Source) -> Callable[[], AbstractContextManager] | None:
        return call_threads if "#pragma omp" in source.text else None
