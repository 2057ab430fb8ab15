"""Shrink a failing fuzz case: fewer statements, fewer options, one thread.

Place in the pipeline: after the harness has a finding. A candidate is kept when it fails
the same way (same outcome status and, for exceptions, the same exception class), checked
by running it through the same ``Worker``. Loop nests shrink by lines: a statement, a
whole ``for``/``if`` block or an ``else`` branch at a time (the generator writes one
statement per line and a brace per block); a candidate the frontend rejects simply fails
differently and is dropped. TC defs shrink by statements. Options go back to their
defaults one at a time, the thread count to 1.
"""

from __future__ import annotations

import dataclasses
import time

from . import tcgen
from .harness import Case, Outcome, Worker


def signature(outcome: Outcome) -> tuple[str, str]:
    """What "fails the same way" compares: the status and the exception's class."""
    head = outcome.detail.split(":", 1)[0] if outcome.status in ("internal", "rejected") else ""
    return outcome.status, head


def _units(lines: list[str]) -> list[tuple[int, int, str]]:
    """(first, last, replacement) line ranges that can go: statements, blocks, else parts."""
    out = []
    for first, line in enumerate(lines):
        text = line.strip()
        if text.endswith("{") and not text.startswith("}") and not text.startswith("void "):
            depth, last = 0, first
            for last in range(first, len(lines)):
                depth += lines[last].count("{") - lines[last].count("}")
                if depth == 0:
                    break
            out.append((first, last, ""))
        elif text.startswith("} else {"):
            depth, last = 1, first
            for last in range(first + 1, len(lines)):
                depth += lines[last].count("{") - lines[last].count("}")
                if depth == 0:
                    break
            out.append((first, last, line.split("}")[0] + "}"))
        elif text.endswith(";") and not text.startswith("void "):
            out.append((first, first, ""))
    return sorted(out, key=lambda u: u[0] - u[1])  # biggest first


def _loop_candidates(case: Case):
    lines = case.program.source.split("\n")
    for first, last, replacement in _units(lines):
        new = lines[:first] + ([replacement] if replacement else []) + lines[last + 1:]
        program = dataclasses.replace(case.program, source="\n".join(new))
        yield dataclasses.replace(case, program=program)


def _tc_candidates(case: Case):
    p = case.program
    for k in range(len(p.stmts)):
        stmts = p.stmts[:k] + p.stmts[k + 1:]
        if stmts:
            yield dataclasses.replace(case, program=tcgen.render(p.name, p.tensors, stmts, p.sizes))


def _option_candidates(case: Case):
    for key in list(case.options):
        yield dataclasses.replace(case, options={k: v for k, v in case.options.items() if k != key})
    if case.threads != 1:
        yield dataclasses.replace(case, threads=1)


def minimize(case: Case, outcome: Outcome, worker: Worker, budget_s: float = 120.0
             ) -> tuple[Case, Outcome]:
    """The smallest case found within ``budget_s`` that still fails like ``outcome``."""
    want = signature(outcome)
    end = time.monotonic() + budget_s
    if outcome.status == "hang":  # every try costs the whole time limit
        return case, outcome
    improved = True
    while improved and time.monotonic() < end:
        improved = False
        structural = _loop_candidates if case.kind == "loops" else _tc_candidates
        for candidate in [*structural(case), *_option_candidates(case)]:
            if time.monotonic() >= end:
                break
            got = worker.run(candidate)
            if signature(got) == want:
                case, outcome, improved = candidate, got, True
                break
    return case, outcome
