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
unittest.SkipTest; a declined case is reported as skipped, never as passed. At the end of
the session the counts (total, included, excluded, passed, failed, declined with the
reasons grouped) are printed: in the terminal summary without xdist, and on the
terminal's standard error by the last xdist worker to finish (each worker writes its
results into the session's temporary folder; the merged table is also written there, as
onnx-conformance.txt).

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

import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import onnx.backend.test  # noqa: E402, F811 - the module under the importorskip name
from onnx.backend.test.loader import load_model_tests  # noqa: E402

import polycomp.onnx  # noqa: E402
from polycomp.onnx.backend import PolycompBackend  # noqa: E402

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
    @functools.wraps(test)
    def run(self):
        try:
            test(self)
        except unittest.SkipTest as exc:
            RESULTS[name] = ("declined", _reason(exc))
            raise
        except BaseException as exc:
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            RESULTS[name] = ("failed", f"{type(exc).__name__}: {' '.join(lines[:2])}")
            raise
        RESULTS[name] = ("passed", "")
    return run


def _test_class() -> type[unittest.TestCase]:
    runner = onnx.backend.test.BackendTest(PolycompBackend, __name__, TOLERANCES)
    generated = runner.test_cases["OnnxBackendNodeModelTest"]
    cls = type("OnnxNodeConformance", (unittest.TestCase,), {"__module__": __name__})
    for name in INCLUDED:
        setattr(cls, f"{name}_cpu", _recording(name, getattr(generated, f"{name}_cpu")))
    return cls


OnnxNodeConformance = _test_class()


# ----------------------------------------------------------------------------- the summary

def summary(results: dict[str, tuple[str, str]]) -> str:
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
    return "\n".join(lines)


class _TerminalSummary:
    """A plugin registered for the session (without xdist) to print the counts last."""

    def pytest_terminal_summary(self, terminalreporter):
        terminalreporter.write_sep("-", "onnx conformance")
        terminalreporter.write_line(summary(RESULTS))


@pytest.fixture(scope="session", autouse=True)
def conformance_summary(request, tmp_path_factory):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        request.config.pluginmanager.register(_TerminalSummary(), "onnx-conformance-summary")
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
    text = summary(merged)
    (shared / "onnx-conformance.txt").write_text(text + "\n")
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        sys.stderr.write("\n" + text + "\n")
        sys.stderr.flush()
