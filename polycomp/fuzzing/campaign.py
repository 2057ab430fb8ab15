"""A fuzz campaign: generate cases for a while, run them, minimise and record the findings.

Place in the pipeline: the driver of ``fuzzing``. Case ``n`` of a campaign with seed
``s`` is drawn from ``RandomDraw(s * 1_000_003 + n)``, so any case can be replayed from
the two integers that the report prints (``python -m polycomp.fuzzing --replay S:N``).
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Callable

from . import loopgen, tcgen
from .draw import Draw, RandomDraw
from .harness import Case, Outcome, Summary, Worker, sample_options
from .minimize import minimize, signature


def make_case(draw: Draw, kind: str, seed: int) -> Case:
    program = loopgen.generate(draw) if kind == "loops" else tcgen.generate(draw)
    options, threads = sample_options(draw)
    return Case(kind, program, options, threads, seed)


def case_at(seed: int, n: int, tc_share: float = 0.3) -> Case:
    index = seed * 1_000_003 + n
    draw = RandomDraw(index)
    kind = "tc" if draw.chance(tc_share) else "loops"
    return make_case(draw, kind, index)


def report(case: Case, outcome: Outcome, origin: str = "") -> str:
    """A finding as Markdown: what happened, where, and the (minimised) program."""
    lang = "c" if case.kind == "loops" else ""
    return (f"### {outcome.status} ({case.kind}) {origin}\n\n"
            f"- stage: `{outcome.stage}`\n- options: `{case.options!r}`, threads {case.threads}"
            f", input seed {case.seed}\n- sizes: `{getattr(case.program, 'sizes', {})}`\n\n"
            f"```{lang}\n{case.program.source.rstrip()}\n```\n\n```\n{outcome.detail.strip()}\n"
            "```\n")


def run(minutes: float | None = None, cases: int | None = None, seed: int | None = None,
        out_dir: str | None = None, timeout: float = 60.0, minimize_s: float = 120.0,
        tc_share: float = 0.3, progress: Callable[[str], None] | None = None) -> Summary:
    """Run cases until ``minutes`` pass or ``cases`` ran; minimise the first few of each
    kind of finding and write them to ``out_dir`` (one .md each and findings.md)."""
    seed = random.randrange(1 << 30) if seed is None else seed
    end = None if minutes is None else time.monotonic() + 60 * minutes
    worker, summary, seen = Worker(timeout), Summary(), {}
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    n = 0
    try:
        while (cases is None or n < cases) and (end is None or time.monotonic() < end):
            case = case_at(seed, n, tc_share)
            outcome = worker.run(case)
            summary.add(case, outcome)
            if outcome.finding or outcome.status == "invalid":
                key = (case.kind,) + signature(outcome) + (outcome.stage,)
                seen[key] = seen.get(key, 0) + 1
                if seen[key] <= 2 and minimize_s > 0:
                    case, outcome = minimize(case, outcome, worker, minimize_s)
                text = report(case, outcome, f"(replay {seed}:{n})")
                if out_dir:
                    with open(os.path.join(out_dir, f"{n:05d}-{outcome.status}.md"), "w") as f:
                        f.write(text)
                    with open(os.path.join(out_dir, "findings.md"), "a") as f:
                        f.write(text + "\n")
                if progress:
                    progress("\n" + text)
            n += 1
            if progress:
                progress(f"\rseed {seed}: {summary.line()}")
    finally:
        worker.close()
    summary.seed = seed  # type: ignore[attr-defined]
    return summary


def replay(spec: str, timeout: float = 60.0) -> tuple[Case, Outcome]:
    seed, n = (int(x) for x in spec.split(":"))
    worker = Worker(timeout)
    try:
        case = case_at(seed, n)
        return case, worker.run(case)
    finally:
        worker.close()


def stderr_progress(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()
