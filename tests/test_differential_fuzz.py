"""Differential fuzzing (polycomp.fuzzing): random programs and options against oracles
that do not go through polycomp.

* C loop nests (strided, decreasing, triangular loops, ifs, locals, integer arrays) with
  random Options (pluto/isl/none, fusion, odd tile sizes, unroll, parametric, 1-4
  threads, -O0..-O3 -march=native) against the same C built by ``gcc -O0`` and called
  through ctypes: integers bit for bit.
* Tensor Comprehensions defs against the interpreter in ``fuzzing.tcgen``.

Every case runs in a worker process with a time limit, so a crash or a hang is a test
failure with the program attached, never a dead pytest. In CI the examples are fixed
(hypothesis, derandomised) and take about a minute on two cores; for a longer random
campaign set ``POLYCOMP_FUZZ_MINUTES=N`` or run ``python -m polycomp.fuzzing``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from polycomp.fuzzing import campaign, loopgen, tcgen
from polycomp.fuzzing.draw import HypothesisDraw, RandomDraw
from polycomp.fuzzing.harness import Case, Outcome, Worker, compare, sample_options
from polycomp.fuzzing.minimize import minimize

pytestmark = pytest.mark.needs_cc

CI = settings(derandomize=True, database=None, deadline=None,
              phases=[Phase.explicit, Phase.generate],  # shrinking: fuzzing.minimize, bounded
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# the share of the fixed examples that must be compared, not discarded (all of them are
# now: 45 of 45 loop nests, 30 of 30 TC defs)
MUST_COMPARE = 0.8


@pytest.fixture(scope="module")
def worker():
    w = Worker(timeout=60.0)
    yield w
    w.close()


def check(worker: Worker, case: Case) -> str:
    """The case's status, "ok" or "discard" (undefined behaviour in the program: the
    oracle trapped); anything else fails the test with the case minimised."""
    outcome = worker.run(case)
    if outcome.finding:
        small, small_outcome = minimize(case, outcome, worker, budget_s=60.0)
        pytest.fail(campaign.report(small, small_outcome), pytrace=False)
    assert outcome.status in ("ok", "discard"), campaign.report(case, outcome)
    return outcome.status


def run_examples(worker: Worker, kind: str, examples: int) -> list[str]:
    """The statuses of ``examples`` fixed (derandomised) cases of ``kind``."""
    statuses: list[str] = []

    @settings(CI, max_examples=examples)
    @given(st.data())
    def one(data):
        draw = HypothesisDraw(data)
        statuses.append(check(worker, campaign.make_case(draw, kind, draw.integer(0, 1 << 20))))

    one()
    return statuses


def assert_most_compared(statuses: list[str], examples: int) -> None:
    """A discarded case tests nothing: a generator or an oracle that discards most cases
    (or a search that draws fewer) must fail here, not pass with little compared."""
    ran = statuses.count("ok")
    assert ran >= MUST_COMPARE * examples, \
        f"only {ran} of {examples} cases compared ({len(statuses)} drawn, " \
        f"{statuses.count('discard')} discarded)"


def test_loop_nests_agree_with_gcc_O0(worker):
    assert_most_compared(run_examples(worker, "loops", 45), 45)


def test_tc_defs_agree_with_the_interpreter(worker):
    assert_most_compared(run_examples(worker, "tc", 30), 30)


@pytest.mark.skipif("POLYCOMP_FUZZ_MINUTES" not in os.environ,
                    reason="a long random campaign: set POLYCOMP_FUZZ_MINUTES=N")
def test_random_campaign_for_minutes(capsys):
    minutes = float(os.environ["POLYCOMP_FUZZ_MINUTES"])
    out = os.environ.get("POLYCOMP_FUZZ_OUT", "fuzz-findings")
    summary = campaign.run(minutes=minutes, out_dir=out, minimize_s=120.0)
    with capsys.disabled():
        print(f"\nfuzz campaign seed {summary.seed}: {summary.line()}")
    assert not summary.findings, f"{len(summary.findings)} findings, written to {out}/"


# ----------------------------------------------------------------------------- the fuzzer itself


def test_generated_nests_are_in_bounds_and_deterministic():
    """Arrays are sized from the subscripts: gcc's sanitiser never traps on bounds, and
    the same seed writes the same program."""
    for seed in range(40):
        a, b = loopgen.generate(RandomDraw(seed)), loopgen.generate(RandomDraw(seed))
        assert a.source == b.source and a.args == b.args
        assert a.source.startswith("void kern(") and "[" in a.source
        for spec in a.args:
            if spec.kind == "array":
                assert all(n >= 1 for n in spec.shape), (spec, a.source)


def test_options_cover_the_choices():
    seen = {"scheduler": set(), "threads": set(), "parametric": set(), "fusion": set()}
    for seed in range(200):
        opts, threads = sample_options(RandomDraw(seed))
        seen["scheduler"].add(opts["scheduler"])
        seen["threads"].add(threads)
        seen["parametric"].add(opts.get("parametric", False))
        seen["fusion"].add(opts.get("fusion", "smart"))
    assert seen == {"scheduler": {"pluto", "isl", "none"}, "threads": {1, 2, 3, 4},
                    "parametric": {False, True}, "fusion": {"smart", "max", "typed", "none"}}


def test_tc_interpreter_on_a_known_def():
    """The TC oracle itself: a triangular matrix-vector product and a row maximum."""
    tensors = {"XN": tcgen.Tensor("XN", ("N",), "input"),
               "A": tcgen.Tensor("A", ("N", "N"), "input"),
               "O0": tcgen.Tensor("O0", ("N",), "output"),
               "O1": tcgen.Tensor("O1", ("N",), "output")}
    read_a = ("acc", "A", [("var", "i", "N"), ("var", "r", "N")])
    read_x = ("acc", "XN", [("var", "r", "N")])
    stmts = [tcgen.Stmt("O0", ["i"], "+=!", ("bin", "*", read_a, read_x),
                        {"i": ("size", "N"), "r": ("tri", "i")}, ["i", "r"]),
             tcgen.Stmt("O1", ["i"], "max=!", ("bin", "/", read_a, ("lit", 3)),
                        {"i": ("size", "N"), "r": ("size", "N")}, ["i", "r"])]
    case = tcgen.render("t", tensors, stmts, {"N": 4})
    assert "O0(i) +=! (A(i, r) * XN(r)) where i in 0:N, r in 0:i+1" in case.source
    x = np.array([1, -2, 3, 4], np.int32)
    a = np.arange(-8, 8, dtype=np.int32).reshape(4, 4)
    got = tcgen.interpret(case, [("XN", x), ("A", a)])
    assert np.array_equal(got["O0"], (np.tril(a) @ x).astype(np.int32))
    assert np.array_equal(got["O1"], np.trunc(a / 3).astype(np.int32).max(axis=1))  # C's /
    with pytest.raises(tcgen.Undefined):
        tcgen.interpret(case, [("XN", x * 100000), ("A", a * 100000)])


def test_compare_is_bit_exact_for_integers():
    a = np.arange(6, dtype=np.int64)
    assert compare([("A", a, a.copy())]).status == "ok"
    b = a.copy()
    b[3] += 1
    bad = compare([("A", a, b)])
    assert bad.status == "mismatch" and "[[3]]" in bad.detail


def test_a_crash_and_a_hang_are_findings_not_a_dead_pytest():
    w = Worker(timeout=3.0)
    try:
        crash = w.run(Case("selftest", "crash", {}))
        assert crash.status == "crash" and "SIGABRT" in crash.detail
        hang = w.run(Case("selftest", "hang", {}))
        assert hang.status == "hang"
        # the worker comes back for the next case
        ok = w.run(campaign.make_case(RandomDraw(3), "loops", 3))
        assert isinstance(ok, Outcome) and ok.status not in ("crash", "hang")
    finally:
        w.close()
