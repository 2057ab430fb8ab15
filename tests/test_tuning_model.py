"""Whole-model tuning (polycomp/tuning/model.py): one budget shared by a model's kernels,
the records applied by later sessions, the CLI's report.

The scheduler is tested on synthetic searches (deterministic, no timing); the real run
tunes a small MobileNetV2 block with a budget of a few measurements: the assertions are
on the plumbing (budget, records, applied configurations, outputs), never on speed."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime
import pytest

from polycomp.cli import main
from polycomp.tuning.model import BudgetTask, share_budget
from polycomp.tuning.sampler import Sampler
from polycomp.tuning.space import Knob, TuningSpace


def _space() -> TuningSpace:
    knobs = (Knob("B@0/tile0", (4, 8, 16, 32, 64), "tile"),
             Knob("B@0/tile1", (4, 8, 16, 32, 64), "tile"))
    return TuningSpace(knobs, {"B@0/tile0": 4, "B@0/tile1": 4})


def _search(best: float, seed: int) -> Sampler:
    """A search whose times fall from 1 (the default) towards ``best`` near (32, 32)."""
    def measure(configs):
        return [best + (1 - best) * (abs(math.log2(c["B@0/tile0"] / 32))
                                     + abs(math.log2(c["B@0/tile1"] / 32))) / 6
                for c in configs]
    return Sampler(_space(), None, measure, budget=100, batch_size=4, seed=seed)


def test_the_budget_goes_where_the_model_time_can_be_won():
    # a heavy kernel that tuning halves, a heavy one already at its best, a light one
    tasks = [BudgetTask("gains", 10.0, _search(0.5, 0)),
             BudgetTask("flat", 10.0, _search(1.0, 1)),
             BudgetTask("light", 0.5, _search(0.5, 2))]
    used, curve = share_budget(tasks, 40, rest=1.0)
    counts = {t.name: len(t.search.trials) for t in tasks}
    assert used == 40 == sum(counts.values()) == len(curve)
    assert all(counts[name] >= 1 for name in counts)  # every task is measured once
    assert counts["gains"] > counts["flat"] > 0 and counts["gains"] > counts["light"]
    # the estimate starts at the profile and only falls
    assert curve[0] <= 1.0 + 10 + 10 + 0.5 and all(a >= b for a, b in zip(curve, curve[1:]))
    assert curve[-1] < 21.5 - 2.0  # the gaining kernel's time is mostly won


def test_a_stopped_search_drops_out_and_the_loop_ends():
    small = TuningSpace((Knob("B@0/tile0", (4, 8), "tile"),), {"B@0/tile0": 4})
    tiny = Sampler(small, None, lambda cs: [1.0] * len(cs), budget=100, batch_size=4)
    tasks = [BudgetTask("tiny", 5.0, tiny), BudgetTask("big", 1.0, _search(0.5, 0))]
    used, _ = share_budget(tasks, 20)
    assert len(tiny.trials) == 2 and tiny.stopped == "exhausted"
    assert used == 20 and len(tasks[1].search.trials) == 18
    # both exhausted before the budget is spent: the loop ends there
    used, _ = share_budget(tasks, 100)
    assert used == 25 - 18 and all(t.search.stopped == "exhausted" for t in tasks)


@pytest.fixture(scope="module")
def block(tmp_path_factory):
    from polycomp.onnx import zoo

    path = tmp_path_factory.mktemp("model") / "block.onnx"
    onnx.save(zoo.mobilenet_block(channels=8, expand=4, size=12), str(path))
    return path


@pytest.mark.needs_cc
def test_tune_a_model_and_later_sessions_use_the_records(block, tmp_path):
    import polycomp.onnx as ort
    from polycomp.onnx import zoo
    from polycomp.tuning.api import best_record
    from polycomp.tuning.model import tune_model

    from polycomp.tuning.records import Records

    db = tmp_path / "records.sqlite"
    untuned = ort.InferenceSession(str(block), records=str(db))  # compiled before tuning
    assert Records.stamp(db) == ""  # no records yet
    lines = []
    result = tune_model(str(block), budget=7, records=db, min_share=0.0, time_budget=0.005,
                        rounds=2, log=lines.append)
    assert result.used == 7 and len(result.curve) == 7
    assert result.outputs_match, result.mismatch
    assert result.before > 0 and result.after > 0 and result.records == str(db)
    assert sum(t.trials for t in result.tasks) == 7 and len(result.tasks) >= 2
    assert all(t.trials >= 1 for t in result.tasks)
    assert any("re-measuring" in line for line in lines)
    # the records' stamp is part of the model cache's key: the session cached above
    # (without records) is not what a session compiles from now
    stamp = Records.stamp(db)
    assert str(db) in stamp and stamp.split("|")[1] == str(Records(db).count())

    # a new session reads the records: each tuned kernel compiled with its best record
    session = ort.InferenceSession(str(block), records=str(db))
    compiled = session.compiled()
    applied = 0
    for name, kernel in compiled.kernels.items():
        record = best_record(kernel.definition.program, kernel.options.with_(band_config={}))
        if record is not None:
            applied += 1
            assert dict(kernel.options.band_config) == record.config
    assert applied == len({t.kernel for t in result.tasks})
    # the oracle is onnxruntime; the untuned session is a second check
    x = zoo.random_inputs(onnx.load(str(block)), seed=5)
    tuned_y = session.run(None, x)[0]
    oracle = onnxruntime.InferenceSession(block.read_bytes(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(tuned_y, oracle.run(None, x)[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(tuned_y, untuned.run(None, x)[0], rtol=1e-4, atol=1e-5)
    # without records (or with tuning="none") the analytical choice, as before
    plain = ort.InferenceSession(str(block), records=str(db), tuning="none").compiled()
    assert all(not k.options.band_config for k in plain.kernels.values())


@pytest.mark.needs_cc
def test_polycomp_tune_model_prints_the_latency_before_and_after(block, tmp_path, capsys):
    db = tmp_path / "cli.sqlite"
    assert main(["tune", str(block), "--budget", "4", "--records", str(db)]) == 0
    out = capsys.readouterr().out
    assert "4 of 4 measurements over" in out and str(db) in out
    assert "model latency: before" in out and "outputs match the untuned model's" in out
    assert "(Conv)" in out  # the kernels' ONNX nodes


@pytest.mark.parametrize("argv, words", [
    (["--budget", "0"], "--trials must be at least 1"),
    (["--random"], "--random is not an option for tuning an .onnx model"),
    (["--shape", "nope=1,2"], "--shape names 'nope', which is not an input"),
])
def test_model_tuning_mistakes_exit_1_without_a_traceback(block, capsys, argv, words, tmp_path):
    assert main(["tune", str(block), "--records", str(tmp_path / "r.sqlite"), *argv]) == 1
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
