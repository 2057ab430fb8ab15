"""``polycomp run``: compile, check against the original order, and time one kernel."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .options import Options
from .runtime import Definition, Kernel
from .testing import median_time, random_arguments, results, same_values
from .threads import set_num_threads


@dataclass
class RunReport:
    name: str
    scheduler: str
    sizes: Mapping[str, int]
    ok: bool
    seconds: float
    reference_seconds: float
    mismatches: list[str]
    target: str = "openmp"

    def __str__(self) -> str:
        sizes = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        check = "matches scheduler=none" if self.ok else f"MISMATCH in {', '.join(self.mismatches)}"
        target = "" if self.target == "openmp" else f" target={self.target}"
        return (f"{self.name} ({sizes}) scheduler={self.scheduler}{target}: {check}\n"
                f"  time {self.seconds * 1e3:.3f} ms (median), "
                f"original order {self.reference_seconds * 1e3:.3f} ms, "
                f"speedup {self.reference_seconds / max(self.seconds, 1e-12):.2f}x")


def run_and_check(definition: Definition, sizes: Mapping[str, int], scheduler: str,
                  repeat: int = 5, threads: int | None = None,
                  schedule: str | None = None, target: str = "openmp") -> RunReport:
    """``definition`` at ``sizes`` under ``scheduler`` and ``target``, checked against
    the original order on the CPU (openmp, scheduler none) and both timed."""
    if threads is not None:
        set_num_threads(threads)
    args = random_arguments(definition.interface, sizes, np.random.default_rng(0))
    kernel = Kernel(definition, Options.create(scheduler=scheduler, schedule=schedule,
                                               target=target))
    reference = Kernel(definition, Options.create(scheduler="none", parallel=False))
    got, want = results(kernel, args), results(reference, args)
    names = list(definition.interface.outputs) + [f"argument {k}" for k in range(len(got))]
    bad = [n for n, a, b in zip(names, got, want) if not same_values(a, b)]
    copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    seconds = median_time(lambda: kernel(*copies), repeat)
    ref_seconds = median_time(lambda: reference(*copies), repeat)
    return RunReport(definition.name, scheduler, dict(sizes), not bad, seconds, ref_seconds, bad,
                     target)
