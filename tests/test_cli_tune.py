"""``polycomp tune`` (polycomp/cli.py) and the tuning benchmark (benchmarks/tuning.py):
a tiny matmul tuned from the command line with its records, curve and random baseline;
the mistakes a user can make exit 1 without a traceback; the benchmark's space
restriction and criteria on synthetic data, and its --quick mode end to end."""

from __future__ import annotations

import ast
import csv
import json
import importlib.util
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polycomp
from polycomp.cli import main
from polycomp.tuning import api
from polycomp.tuning.records import CONFIRMED, REMEASURED, Records
from polycomp.tuning.space import BandInfo, TuningSpace

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import tuning as bench  # noqa: E402

MATMUL = "def matmul(float(M, K) A, float(K, N) B) -> (C) {\n  C(m, n) +=! A(m, k) * B(k, n)\n}\n"
SIZES = {"M": 24, "N": 16, "K": 20}
FAST = ["--sizes", "M=24,N=16,K=20", "--time-budget", "0.005"]
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


@pytest.fixture
def tc_file(tmp_path):
    path = tmp_path / "mm.tc"
    path.write_text(MATMUL)
    return path


def _printed_config(out: str) -> dict:
    match = re.search(r"band_config=(\{.*?\})\)\s*$", out, re.M)
    assert match, out
    return ast.literal_eval(match.group(1))


@pytest.mark.needs_cc
def test_tune_a_tiny_matmul_from_the_command_line(tc_file, tmp_path, capsys):
    db = tmp_path / "records.sqlite"
    assert main(["tune", str(tc_file), *FAST, "--trials", "4", "--records", str(db)]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "model search" in captured.err  # the progress bar (or its plain lines)
    default = re.search(r"default\s+([\d.e+-]+) ms", out).group(1)
    best = re.search(r"best\s+([\d.e+-]+) ms\s+([\d.]+)x the default's speed", out)
    assert "S1@0: tile0" in out and "polycomp.compile(source, sizes={'M': 24" in out
    config = _printed_config(out)
    # every trial stored, and the printed configuration is the best record
    records = Records(db)
    remeasured = int(re.search(r"the default and the best (\d+) re-measured", out).group(1))
    assert records.count() == 4 + 1 + remeasured  # the trials, the re-measurement's
    program = polycomp.compile(MATMUL).definition.lower(SIZES)
    from polycomp.tuning.signature import kernel_signature, kernel_sizes
    key = kernel_signature(program), kernel_sizes(program)
    assert records.best(*key).config == config
    # the times printed are the re-measured ones in the records, and the winner is the
    # one the re-measurement declares (the fastest unless within the margin of the default)
    rows = records.trials(*key)
    default_config = next(r.config for r in rows if r.source == "default")
    again = [(r.config, r.time) for r in rows if r.source in (CONFIRMED, REMEASURED)]
    again.sort(key=lambda pair: pair[0] != default_config)  # the default first
    assert len(again) == 1 + remeasured and again[0][0] == default_config
    times = dict((json.dumps(c, sort_keys=True), t) for c, t in again)
    default_s, best_s = times[json.dumps(default_config, sort_keys=True)], \
        times[json.dumps(config, sort_keys=True)]
    assert default == f"{default_s * 1e3:.4g}" and best.group(1) == f"{best_s * 1e3:.4g}"
    assert best.group(2) == f"{default_s / best_s:.2f}"
    fastest, fastest_s = min(again, key=lambda pair: pair[1])
    assert config == (fastest if fastest_s < default_s * (1 - api.CONFIRM_MARGIN)
                      else default_config)
    # and the keywords printed compile a kernel that computes the product
    rng = np.random.default_rng(1)
    A = rng.uniform(-1, 1, (24, 20)).astype(np.float32)
    B = rng.uniform(-1, 1, (20, 16)).astype(np.float32)
    tuned = polycomp.compile(MATMUL, sizes=SIZES, tuning="none", band_config=config)
    np.testing.assert_allclose(tuned(A, B), A @ B, rtol=1e-4, atol=1e-4)


@pytest.mark.needs_cc
@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="--plot needs matplotlib")
def test_random_baseline_and_the_curve_plot(tc_file, tmp_path, capsys):
    db, png = tmp_path / "records.sqlite", tmp_path / "curve.png"
    assert main(["tune", str(tc_file), *FAST, "--trials", "3", "--records", str(db),
                 "--random", "--plot", str(png), "--workers", "2", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"random\s+[\d.e+-]+ ms\s+best of 3 random", out), out
    assert f"plot: {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    remeasured = int(re.search(r"the default and the best (\d+) re-measured", out).group(1))
    # the model-guided search's trials and re-measurement; the random search stores nothing
    assert Records(db).count() == 3 + 1 + remeasured


def test_plot_without_matplotlib_says_so_before_tuning(tc_file, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    assert main(["tune", str(tc_file), *FAST, "--plot", str(tmp_path / "c.png")]) == 1
    err = capsys.readouterr().err
    assert "needs matplotlib" in err and "hint:" in err and "Traceback" not in err


@pytest.mark.parametrize("argv, words", [
    (["--trials", "2"], "needs --sizes"),                        # no sizes at all
    (["--sizes", "M=4,N=4"], "no value for K"),                  # one missing
    (["--sizes", "M=4,N=4,K=4,Q=2"], "not a size of matmul"),    # one too many
    (["--sizes", "M=four"], "cannot read size"),
    (["--sizes", "M=4,N=4,K=4", "--trials", "0"], "--trials must be at least 1"),
    (["--sizes", "M=4,N=4,K=4", "--workers", "0"], "--workers must be at least 1"),
    (["--sizes", "M=4,N=4,K=4", "--plot", "/no/such/dir/c.png"], "cannot write the plot"),
])
def test_mistakes_exit_1_without_a_traceback(tc_file, capsys, argv, words):
    assert main(["tune", str(tc_file), *argv]) == 1
    err = capsys.readouterr().err
    assert words in err and "error:" in err and "Traceback" not in err


def test_models_and_bad_files_are_refused(tmp_path, capsys):
    model = tmp_path / "model.onnx"
    model.write_bytes(b"not even a model")
    assert main(["tune", str(model), "--sizes", "N=1"]) == 1
    err = capsys.readouterr().err
    assert "is not an ONNX model" in err and "hint:" in err
    assert "Traceback" not in err
    broken = tmp_path / "bad.tc"
    broken.write_text("def f(float(N) A) -> (B) {\n  B(i) = A(i) +* 2\n}\n")
    assert main(["tune", str(broken), "--sizes", "N=8"]) == 1
    err = capsys.readouterr().err
    assert "bad.tc:2:" in err and "^" in err and "Traceback" not in err
    assert main(["tune", str(tmp_path / "missing.tc"), "--sizes", "N=8"]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_help_names_the_default_single_worker():
    done = subprocess.run([sys.executable, "-m", "polycomp.cli", "tune", "--help"],
                          capture_output=True, text=True)
    assert done.returncode == 0 and "--workers" in done.stdout
    assert "default 1" in " ".join(done.stdout.split())


# ----------------------------------------------------------------------------- benchmark

def test_the_restriction_keeps_the_main_bands_longest_members():
    small = BandInfo("S0@0", (16, 16), unroll=(1, 4), l2=False)
    main_band = BandInfo("S1@0", (100, 3, 64, 40), unroll=(1, 2, 4), simd_members=(2, 3))
    default = {"S0@0/tile0": 16, "S0@0/tile1": 16, "S0@0/unroll": 4,
               "S1@0/tile0": 50, "S1@0/tile1": 3, "S1@0/tile2": 32, "S1@0/tile3": 8,
               "S1@0/unroll": 4, "S1@0/simd": -1, "S1@0/l2": 0}
    full = TuningSpace.from_bands([small, main_band], default=default,
                                  prune=lambda c: c["S1@0/tile0"] <= 64)
    restricted = bench.restrict(full, [small, main_band], members=3, values=(8, 16, 32, 64, 128))
    assert restricted.band == "S1@0"
    space = restricted.space
    # members 0 (100), 2 (64) and 3 (40), not 1 (3); powers of two within the extent,
    # and the default's own 50
    assert {k.name: k.values for k in space.knobs} == {
        "S1@0/tile0": (8, 16, 32, 50, 64), "S1@0/tile2": (8, 16, 32, 64),
        "S1@0/tile3": (8, 16, 32)}
    assert space.default == {"S1@0/tile0": 50, "S1@0/tile2": 32, "S1@0/tile3": 8}
    points = list(space.points())
    assert len(points) == 5 * 4 * 3  # the full space's prune refuses none of these
    config = restricted.complete(points[0])
    assert config["S1@0/unroll"] == 4 and config["S0@0/tile1"] == 16 and len(config) == 10
    # the full space's prune applies through the restriction
    tight = TuningSpace.from_bands([small, main_band], default=default,
                                   prune=lambda c: c["S1@0/tile0"] <= 16)
    kept = list(bench.restrict(tight, [small, main_band], values=(8, 16, 32, 64, 128))
                .space.points())
    assert len(kept) == 2 * 4 * 3 + 1
    # the default values: the powers of two from 4 to 256 (within the extents)
    assert {k.name: k.values for k in bench.restrict(full, [small, main_band]).space.knobs} == {
        "S1@0/tile0": (4, 8, 16, 32, 50, 64), "S1@0/tile2": (4, 8, 16, 32, 64),
        "S1@0/tile3": (4, 8, 16, 32)}
    # past the prune's limit only the default itself, which is never pruned
    assert [p for p in kept if p["S1@0/tile0"] > 16] == [space.default]


def test_the_criteria_from_synthetic_measurements():
    times = {(1,): 1.00, (2,): 1.05, (3,): 1.30, (4,): 1.20, (5,): 0.98}
    truth = [(1,), (2,), (3,), (4,)]  # top ten and default; (5,) only a search's pick
    s = bench.summarize(times, truth, default=(4,), sampler=[(1,), (2,), (5,)],
                        random=[(3,), (2,), (1,)])
    assert s.ground_truth == 1.0 and s.default == 1.2
    assert s.sampler == pytest.approx([1.0, 1.05, 0.98])
    assert s.sampler_mean == pytest.approx(3.03 / 3)
    assert s.random_mean == pytest.approx(3.35 / 3)
    assert s.within and s.beats_random and s.never_slower and s.passed
    # a sampler stuck at a slow point fails all three
    slow = bench.summarize(times, truth, (4,), sampler=[(3,), (3,), (1,)], random=[(1,)] * 3)
    assert max(slow.tuned_vs_default) == pytest.approx(1.3 / 1.2)
    assert not (slow.within or slow.beats_random or slow.never_slower or slow.passed)
    # close to the best and ahead of random, but 5 % slower than a default that is the
    # best: slower beyond the noise
    behind = bench.summarize(times, truth, (1,), sampler=[(2,)], random=[(3,)])
    assert behind.within and behind.beats_random and not behind.never_slower
    # a tie with random (both at the optimum) counts as not worse
    assert bench.summarize(times, truth, (4,), sampler=[(1,)], random=[(1,)]).beats_random
    with pytest.raises(ValueError):
        bench.summarize(times, truth, (4,), sampler=[(1,)], random=[])


def test_the_declared_winner_follows_polycomp_tune_s_confirmation():
    times = {(0,): 1.00, (1,): 0.95, (2,): 0.90, (3,): 0.995}
    # the fastest of the search's best few, when it beats the default by over the margin
    assert bench.confirmed_pick([(1,), (2,)], (0,), times) == (2,)
    # within the margin of the default: the default stays (the analytical choice)
    assert bench.confirmed_pick([(3,)], (0,), times) == (0,)
    assert bench.confirmed_pick([], (0,), times) == (0,)
    assert bench.CONFIRM_TOP >= 1 and 0 < bench.CONFIRM_MARGIN < 0.1


def test_mean_curves_over_seeds():
    curves = [[4.0, 2.0, 2.0], [math.inf, 3.0], [4.0, 4.0, 1.0]]
    assert bench.mean_curve(curves, 2.0) == [math.inf, 1.5, (2 + 3 + 1) / 3 / 2]
    assert bench.mean_curve([], 1.0) == []


@pytest.mark.needs_cc
def test_the_benchmark_quick_mode_end_to_end(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "benchmarks.tuning", "--quick", "--kernels",
                           "gemm-gelu", "--seeds", "1", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    text = (tmp_path / "tuning-quick.md").read_text()
    assert "| gemm-gelu | M=16, K=32, N=48 |" in text and "restricted" in text
    rows = list(csv.DictReader(open(tmp_path / "tuning-quick.csv")))
    roles = [r["role"] for r in rows]
    searches = {f"{name}@{budget}" for name in ("sampler", "random") for budget in (4, 8, 16)}
    assert roles[0] == "default" and "top1" in roles and searches <= set(roles)
    assert {f"{s} own best" for s in searches} <= set(roles)  # the unconfirmed picks too
    for r in rows:
        assert float(r["remeasured_s"]) > 0
    # the ground truth is the fastest of the default and the top ten, re-measured
    ratios = [float(r["over_ground_truth"]) for r in rows
              if r["role"] == "default" or r["role"].startswith("top")]
    assert min(ratios) == 1.0
    assert "The searches' own bests, unconfirmed" in text
    for budget in (4, 8, 16):  # --quick: budgets of 4, 8 and 16 (at most the 9 points)
        sampler = next(r for r in rows if r["role"] == f"sampler@{budget}")
        assert len(sampler["curve_s"].split(";")) == min(budget, 9)
    assert "| sampler@8 | sampler@16 |" in text
    # the sweep is saved, and --sweep replays it instead of measuring again
    sweep = json.loads((tmp_path / "tuning-quick-sweep.json").read_text())
    assert len(sweep["gemm-gelu"]["points"]) == 9
    again = subprocess.run([sys.executable, "-m", "benchmarks.tuning", "--quick", "--kernels",
                            "gemm-gelu", "--seeds", "1", "--out", str(tmp_path / "again"),
                            "--sweep", str(tmp_path / "tuning-quick-sweep.json")],
                           capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "gemm-gelu: sweep" not in again.stderr
    assert f"| {sweep['gemm-gelu']['sweep_s']:.0f} s |" in (
        tmp_path / "again" / "tuning-quick.md").read_text()
    if HAS_MATPLOTLIB:
        assert (tmp_path / "tuning-quick.png").stat().st_size > 5000
