"""``Target``: what one backend owns, from the scheduled tree to a callable entry.

Place in the pipeline: after the scheduler and the target-neutral passes (tiling); the
stages that ask a target are listed in polycomp/targets/__init__.py. A target object is
stateless and shared (one per process, built by the registry on first use).

A target owns

- ``passes``: the decision passes that run after tiling, each ``(schedule, program,
  deps, options) -> schedule`` (scheduler/passes.py runs them and names a failing one);
  ``neutral_tiling`` False skips the target-neutral tiling before them (a GPU target
  tiles for its blocks in its own mapping pass, not for the CPU's caches), and
  ``launch_knobs`` True gives the tuner's space the GPU launch knobs, and
  ``packs_channels`` False skips channel blocking (a CPU vector layout);
- ``marks``: the decision marks (scheduler/tree.DECISION_MARKS) its code generator
  prints. ``check_marks`` refuses a schedule with any other one: a user's tree with
  ``block`` marks given to a CPU target fails loudly instead of running sequentially;
- ``annotate``: what codegen needs on the marks, added after the legality check (it
  decides nothing the check would have to see);
- ``generate``: the Source (text, entry, arguments) of a checked, annotated tree;
- ``build``, ``load``, ``calling``: the artifact on disk (cached), the entry callable,
  and what surrounds each call;
- ``key_fields``: what, beside the source and the command line, makes a build differ
  (the compiler's identity, the machine): hashed into cache keys with the target's name.

The runtime calls every entry the same way: the arguments in the Source's order (int64
sizes, scalars as their C types, the addresses of C-contiguous host arrays), an int
status back (0, or codegen/c.py's codes). targets/native.py implements the build and
load halves for a host compiler and ctypes.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from polycomp.errors import IllegalScheduleError

if TYPE_CHECKING:
    import islpy as isl

    from polycomp.codegen.source import Source
    from polycomp.ir import Program
    from polycomp.options import Options
    from polycomp.scheduler.dependences import Dependences

    Pass = Callable[[isl.Schedule, Program, Dependences, Options], isl.Schedule]


class Target(abc.ABC):
    """One backend (module doc). Subclasses set ``name``, ``marks`` and ``passes``."""

    name: str = ""
    marks: frozenset[str] = frozenset()
    passes: Sequence[tuple[str, Pass]] = ()
    neutral_tiling: bool = True
    # whether the tuner's space has the GPU launch knobs (polycomp/tuning/space.py)
    launch_knobs: bool = False
    # whether Options.block_channels applies (scheduler/blocking.py packs weights for
    # the CPU's vector loop; a GPU's threads want the plain layout)
    packs_channels: bool = True

    def check_marks(self, schedule: isl.Schedule) -> None:
        """IllegalScheduleError when ``schedule`` has a decision mark this target does
        not print."""
        from polycomp.scheduler import tree as T

        for node in T.nodes(schedule):
            if not T.is_mark(node):
                continue
            mark = node.mark_get_id().get_name()
            if mark in T.DECISION_MARKS and mark not in self.marks:
                prints = ", ".join(sorted(self.marks)) or "no decision marks"
                raise IllegalScheduleError(
                    f"the schedule has a '{mark}' mark, which target '{self.name}' does "
                    f"not print", hint=f"target '{self.name}' prints {prints}: remove the "
                                       f"mark, or compile for a target that has it")

    def annotate(self, schedule: isl.Schedule, program: Program, deps: Dependences,
                 options: Options) -> isl.Schedule:
        """The checked tree with what codegen needs added to its marks."""
        return schedule

    @abc.abstractmethod
    def generate(self, program: Program, schedule: isl.Schedule, options: Options,
                 ordered: isl.UnionMap) -> Source:
        """The code of ``schedule``; ``ordered``: the dependences it was checked against
        (its AST must keep them forward, codegen/verify.py)."""

    @abc.abstractmethod
    def build(self, source: Source, options: Options) -> Path:
        """The built artifact of ``source`` (from the cache when there)."""

    @abc.abstractmethod
    def load(self, source: Source, options: Options) -> Callable[..., int]:
        """The entry of ``source``, built and loaded, callable with its arguments."""

    def calling(self, source: Source) -> Callable[[], AbstractContextManager] | None:
        """A context manager factory put around each call of the entry, or None."""
        return None

    def key_fields(self, options: Options) -> tuple[str, ...]:
        """What makes a build differ beside its source and command line."""
        return ()

    def __repr__(self) -> str:
        return f"<polycomp target '{self.name}'>"
