"""onnx's node conformance cases, run through polycomp.onnx.backend.

``onnx.backend.test.BackendTest`` makes one unittest case per node test that onnx ships
(onnx/backend/test/case/node: a model of one node, or of the ops a function op expands
to, with inputs and the outputs onnx's reference gives). A case is *included* when every
node of its model is of an op type ``polycomp.onnx.supported_ops()`` lists, read from the
model itself when this file is collected, so a lowering registered by any op module
brings its cases in; the others count as "excluded: op not supported" and are not
generated. Further exclusions of cases whose ops are supported are in ``EXCLUDED`` below,
each with its reason.

An included case passes, fails, or is *declined*: polycomp raised UnsupportedError (an
attribute or dtype it does not handle), which backend.prepare turns into
unittest.SkipTest; a declined case is reported as skipped, never as passed.

The floor: tests/onnx_conformance_floor.txt lists the cases polycomp passes (one name a
line). A listed case that fails, is declined (its SkipTest becomes a failure naming the
decline) or is no longer included (its op left supported_ops(), or EXCLUDED took it) fails
its test, so a lowering that starts to raise UnsupportedError cannot hide as a skip.
Listed cases the installed onnx does not generate (an older or newer onnx) are only
counted. To raise the floor after new passes (or to lower it on purpose), run the whole
file and copy the list it wrote, the path the summary prints:

    python -m pytest -q -n 2 tests/test_onnx_conformance.py
    cp <the printed onnx-conformance-floor.txt> tests/onnx_conformance_floor.txt

That list is the cases this run passed plus the listed ones this onnx does not generate;
it is written only when every included case ran (not under ``-k``).

At the end of the session the counts (total, included, excluded, passed, failed, declined
with the reasons grouped, the floor's) are printed: in the terminal summary without
xdist, and on the terminal's standard error by the last xdist worker to finish (each
worker writes its results into the session's temporary folder; the merged table is also
written there, as onnx-conformance.txt, beside the list of passes).

Tolerances are onnx's own per case (rtol 1e-3, atol 1e-7 unless the case says otherwise).
The kernels are compiled with the default options, as a user's are: the whole file takes
about two minutes with ``-n 2`` on a 2-core machine (the cases are tiny: most of the time
is gcc, and onnx generating its cases when the file is collected, about 5 s per process).
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import unittest
import warnings
from collections import Counter
from pathlib import Path

import onnx.backend.test
import pytest
from onnx.backend.test.loader import load_model_tests

import polycomp.onnx
from polycomp.onnx.backend import PolycompBackend

pytestmark = pytest.mark.needs_cc

# cases whose op types polycomp supports but which are not run, by name (a regular
# expression matched with re.search) -> why. What polycomp does not compute with
# (strings, sequences; arithmetic on bfloat16, float8 or int4 values, which it only
# converts; training-mode Dropout and BatchNormalization) it declines itself with an
# UnsupportedError, which is counted, by reason, as declined; this table is for the rest.
EXCLUDED: dict[str, str] = {
    # onnx's reference maps align_corners coordinates with the fractional resized length
    # (4 x 0.6 = 2.4, so x = 3 / 1.4); onnxruntime and polycomp use the output length 2
    # (x = 3), and polycomp follows onnxruntime: the case expects 3.142857, both give 4
    "test_resize_downsample_scales_linear_align_corners":
        "onnx's reference and onnxruntime differ; polycomp follows onnxruntime",
}

# per-case tolerances where onnx's own backends loosen them (case name -> rtol/atol);
# onnx's runner hands them to the comparison (and to prepare, which ignores them)
TOLERANCES: dict[str, dict[str, float]] = {
}


def _node_ops(model) -> set[tuple[str, str]]:
    return {(n.domain if n.domain != "ai.onnx" else "", n.op_type) for n in model.graph.node}


def _classify(case, supported: set[str]) -> str | None:
    """None for an included case, else why it is left out."""
    if any(domain or op not in supported for domain, op in _node_ops(case.model)):
        return "op not supported"
    for pattern, reason in EXCLUDED.items():
        if re.search(pattern, case.name):
            return reason
    return None


SUPPORTED = set(polycomp.onnx.supported_ops())
with warnings.catch_warnings():  # onnx's case generators overflow casts on purpose
    warnings.simplefilter("ignore", RuntimeWarning)
    CASES = {case.name: case for case in load_model_tests(kind="node")}
LEFT_OUT = {name: _classify(case, SUPPORTED) for name, case in CASES.items()}
INCLUDED = sorted(name for name, why in LEFT_OUT.items() if why is None)

FLOOR_FILE = Path(__file__).with_name("onnx_conformance_floor.txt")


def read_floor(path: Path) -> set[str]:
    """The case names a floor file lists (``#`` starts a comment line)."""
    lines = (line.strip() for line in path.read_text().splitlines())
    return {line for line in lines if line and not line.startswith("#")}


# a missing floor file is a collection error, not an empty floor
FLOOR = read_floor(FLOOR_FILE)
NOT_GENERATED = sorted(FLOOR - CASES.keys())
FLOOR_LEFT_OUT = {name: LEFT_OUT[name] for name in sorted(FLOOR & CASES.keys())
                  if LEFT_OUT[name] is not None}

# this process's outcomes: case name -> (outcome, reason)
RESULTS: dict[str, tuple[str, str]] = {}


def _reason(exc: BaseException) -> str:
    """An UnsupportedError's message without the node and value names, so that the
    declines group by what is not supported."""
    text = str(exc).strip()
    text = text.split("\nhint:")[0].split("\n")[0]
    text = re.sub(r"^.*?error: ", "", text)
    text = re.sub(r"node '[^']*' ", "", text)
    text = re.sub(r"\b(graph input|graph output|value|constant|initializer|input|output|"
                  r"tensor|shape of) '[^']*'", r"\1", text)
    return text


def _recording(name: str, test):
    floor = f"{name} is in the floor ({FLOOR_FILE.name})"

    @functools.wraps(test)
    def run(self):
        try:
            test(self)
        except unittest.SkipTest as exc:
            RESULTS[name] = ("declined", _reason(exc))
            if name in FLOOR:
                raise AssertionError(f"{floor} but polycomp declined it: {exc}") from None
            raise
        except BaseException as exc:
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            RESULTS[name] = ("failed", f"{type(exc).__name__}: {' '.join(lines[:2])}")
            if name in FLOOR and hasattr(exc, "add_note"):
                exc.add_note(f"{floor}: it passed before")
            raise
        RESULTS[name] = ("passed", "")
    return run


def _left_out(name: str, why: str):
    def run(self):
        raise AssertionError(f"{name} is in the floor ({FLOOR_FILE.name}) but is no longer "
                             f"run: excluded: {why} (take it out of the floor if that is meant)")
    return run


def _test_class() -> type[unittest.TestCase]:
    runner = onnx.backend.test.BackendTest(PolycompBackend, __name__, TOLERANCES)
    generated = runner.test_cases["OnnxBackendNodeModelTest"]
    cls = type("OnnxNodeConformance", (unittest.TestCase,), {"__module__": __name__})
    for name in INCLUDED:
        setattr(cls, f"{name}_cpu", _recording(name, getattr(generated, f"{name}_cpu")))
    for name, why in FLOOR_LEFT_OUT.items():
        setattr(cls, f"{name}_cpu", _left_out(name, why))
    return cls


OnnxNodeConformance = _test_class()


# ----------------------------------------------------------------------------- the summary

def floor_list(results: dict[str, tuple[str, str]]) -> list[str] | None:
    """The floor a run supports: its passes and the listed cases this onnx does not
    generate; None when not every included case ran."""
    if not set(INCLUDED) <= results.keys():
        return None
    return sorted({n for n, (outcome, _) in results.items() if outcome == "passed"}
                  | set(NOT_GENERATED))


def write_floor(names: list[str], path: Path) -> None:
    header = (f"# onnx node conformance cases polycomp passes (a run with onnx "
              f"{onnx.__version__}):\n"
              f"# tests/test_onnx_conformance.py fails when one of them no longer passes;\n"
              f"# its docstring says how to update this list\n")
    path.write_text(header + "".join(f"{name}\n" for name in names))


def summary(results: dict[str, tuple[str, str]], candidate: Path | None = None) -> str:
    """The counts as printed; ``candidate``: where this run's floor list was written."""
    outcomes = Counter(outcome for outcome, _ in results.values())
    excluded = Counter(why for why in LEFT_OUT.values() if why is not None)
    lines = [f"onnx node conformance (onnx {onnx.__version__}, polycomp supports "
             f"{len(SUPPORTED)} op types): {len(CASES)} cases, {len(INCLUDED)} included, "
             f"{sum(excluded.values())} excluded",
             f"  passed {outcomes['passed']}, failed {outcomes['failed']}, declined "
             f"{outcomes['declined']}"
             + (f", not run {len(INCLUDED) - len(results)}" if len(results) < len(INCLUDED)
                else "")]
    for why, n in excluded.most_common():
        lines.append(f"  excluded: {why}: {n}")
    declined = Counter(reason for outcome, reason in results.values() if outcome == "declined")
    for reason, n in sorted(declined.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"  declined {n:4d}: {reason}")
    for name, (outcome, reason) in sorted(results.items()):
        if outcome == "failed":
            lines.append(f"  FAILED {name}: {reason[:160]}")
    lines.extend(_floor_lines(results, candidate))
    return "\n".join(lines)


def _floor_lines(results: dict[str, tuple[str, str]], candidate: Path | None) -> list[str]:
    passed = {n for n, (outcome, _) in results.items() if outcome == "passed"}
    below = {n: f"{outcome}: {reason}" for n, (outcome, reason) in results.items()
             if n in FLOOR and outcome != "passed"}
    below.update((n, f"excluded: {why}") for n, why in FLOOR_LEFT_OUT.items())
    lines = [f"  floor ({FLOOR_FILE.name}): {len(FLOOR)} cases, {len(below)} below it "
             f"(failed, declined or excluded); in the floor but not generated by this onnx: "
             f"{len(NOT_GENERATED)}",
             f"  passed but not in the floor: {len(passed - FLOOR)}"]
    lines.extend(f"  BELOW FLOOR {name}: {why[:160]}" for name, why in sorted(below.items()))
    if candidate is not None and read_floor(candidate) != FLOOR:
        lines.append(f"  this run's floor: cp {candidate} tests/{FLOOR_FILE.name}")
    return lines


def _write_tables(results: dict[str, tuple[str, str]], folder: Path) -> str:
    """The summary, written into ``folder`` with this run's floor list beside it."""
    names = floor_list(results)
    candidate = None
    if names is not None:
        candidate = folder / "onnx-conformance-floor.txt"
        write_floor(names, candidate)
    text = summary(results, candidate)
    (folder / "onnx-conformance.txt").write_text(text + "\n")
    return text


class _TerminalSummary:
    """A plugin registered for the session (without xdist) to print the counts last."""

    def __init__(self, folder: Path):
        self.folder = folder

    def pytest_terminal_summary(self, terminalreporter):
        terminalreporter.write_sep("-", "onnx conformance")
        terminalreporter.write_line(_write_tables(RESULTS, self.folder))


@pytest.fixture(scope="session", autouse=True)
def conformance_summary(request, tmp_path_factory):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        request.config.pluginmanager.register(_TerminalSummary(tmp_path_factory.getbasetemp()),
                                              "onnx-conformance-summary")
    yield
    if worker is None:
        return
    # xdist: the master never imports this file, so no hook of it runs there; each worker
    # leaves its results, and the one that finds all of them prints the merged table
    shared = tmp_path_factory.getbasetemp().parent
    (shared / f"onnx-conformance-{worker}.json").write_text(json.dumps(RESULTS))
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    parts = sorted(shared.glob("onnx-conformance-gw*.json"))
    if len(parts) < count:
        return
    try:
        os.close(os.open(shared / "onnx-conformance.printed", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return
    merged: dict[str, tuple[str, str]] = {}
    for part in parts:
        merged.update({k: tuple(v) for k, v in json.loads(part.read_text()).items()})
    text = _write_tables(merged, shared)
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        sys.stderr.write("\n" + text + "\n")
        sys.stderr.flush()
