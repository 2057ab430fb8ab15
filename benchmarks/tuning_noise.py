"""How much one trial's measurement varies, timed alone or beside the default (issue 13,
item 3: measurement that can be trusted on a noisy machine).

    python -m benchmarks.tuning_noise [--kernels conv3x3,2mm,gemm-gelu,jacobi-2d]
        [--reps 4] [--points 8] [--sweep FILE] [--quick] [--out benchmarks/results]

For each kernel of benchmarks/tuning.py, at its sizes there: the default and up to
--points other configurations of its restricted space (the fastest points of a sweep
saved by benchmarks/tuning.py with --sweep, else the default's one-step neighbours),
each measured --reps times as polycomp.tune measures a trial, in a child process through
a one-worker pool: once timed alone (measure_trial without TrialSpec.baseline_seconds,
tune(paired=False)) and once in turns beside the default (with it, the default). Each
repetition visits the configurations in a shuffled order, the two kinds one after the
other for each configuration, so both meet the same drift of the machine.

Reported per kernel and kind:

    spread      max / min of a configuration's measurements, the mean over them
    deviation   the median of |measurement / its configuration's median - 1|
    Spearman    the rank correlation of two repetitions, the mean over pairs
    fastest     which configuration (0: the default) each repetition ranks first

A search can only rank what its measurements rank: a Spearman near 1 means that a
second measurement of the same points would order them the same way. Writes
tuning_noise.md and tuning_noise.csv to --out.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import dataclass, replace
from itertools import combinations
from pathlib import Path

import numpy as np

from .tuning import CASES, QUICK_MEMBERS, QUICK_TILE_VALUES, _Bar, restrict, worker_pool

KINDS = ("alone", "beside the default")


@dataclass
class Noise:
    kernel: str
    configs: list[dict[str, int]]
    times: dict[str, np.ndarray]  # kind -> seconds, configuration x repetition


def _ranks(x: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(x))


def stats(times: np.ndarray) -> dict[str, object]:
    """The module doc's figures of one kind's (configuration x repetition) seconds."""
    reps = times.shape[1]
    rel = times / np.median(times, axis=1, keepdims=True)
    pairs = list(combinations(range(reps), 2))
    spearman = [float(np.corrcoef(_ranks(times[:, a]), _ranks(times[:, b]))[0, 1])
                for a, b in pairs] if len(times) > 1 else []
    return {"spread": float(np.mean(times.max(axis=1) / times.min(axis=1))),
            "deviation": float(np.median(np.abs(rel - 1.0))),
            "spearman": float(np.mean(spearman)) if spearman else float("nan"),
            "fastest": [int(np.argmin(times[:, r])) for r in range(reps)]}


def points(name: str, restricted, count: int, sweep: Path | None) -> list[dict[str, int]]:
    """The default, then up to ``count`` others (module doc)."""
    space = restricted.space
    default = dict(space.default)
    others: list[dict[str, int]] = []
    if sweep is not None:
        entry = json.loads(Path(sweep).read_text()).get(name)
        if entry is not None:
            valid = sorted((p for p in entry["points"] if p["status"] == "valid"),
                           key=lambda p: p["time"])
            others = [dict(p["config"]) for p in valid]
    if not others:
        others = [dict(c) for c in space.neighbours(default)]
    keys = {space.key(default)}
    chosen = [default]
    for config in others:
        if len(chosen) > count:
            break
        if space.key(config) not in keys and space.valid(config):
            keys.add(space.key(config))
            chosen.append(config)
    return chosen


def measure_kernel(name: str, args: argparse.Namespace, pool) -> Noise:  # noqa: ANN001
    from polycomp.tuning import Measurer, measure_trial
    from polycomp.tuning.api import prepare

    source, sizes = CASES[name].build(args.quick)
    prepared = prepare(source, sizes, seed=0, time_budget=args.time_budget, function="tuning")
    restricted = (restrict(prepared.space, prepared.infos, QUICK_MEMBERS, QUICK_TILE_VALUES)
                  if args.quick else restrict(prepared.space, prepared.infos))
    configs = points(name, restricted, args.points, args.sweep)
    full = [restricted.complete(c) for c in configs]
    specs = {"alone": replace(prepared.spec, baseline_seconds=None),
             "beside the default": prepared.spec}
    times = {kind: np.zeros((len(full), args.reps)) for kind in KINDS}
    bar = _Bar(len(full) * args.reps * len(KINDS), f"{name}: measurements")
    measurers = {kind: Measurer(measure_trial, (specs[kind],), executor=pool, timeout=120,
                                reference=prepared.reference, rtol=prepared.rtol,
                                atol=prepared.atol, on_outcome=bar.update)
                 for kind in KINDS}
    try:
        for r in range(args.reps):
            order = np.random.default_rng(r).permutation(len(full))
            for i in order:
                for kind in (KINDS if r % 2 == 0 else KINDS[::-1]):
                    outcome = measurers[kind]([full[i]])[0]
                    if not outcome.ok:
                        raise RuntimeError(f"{name}: {configs[i]} measured {outcome.status}: "
                                           f"{outcome.detail}")
                    times[kind][i, r] = outcome.time
    finally:
        bar.close()
        for m in measurers.values():
            m.close()
    return Noise(name, configs, times)


def markdown(results: list[Noise], args: argparse.Namespace) -> str:
    from .operators.__main__ import cpu_and_load

    cpu, load = cpu_and_load()
    lines = [
        "## One trial's measurement, alone or beside the default",
        "",
        f"- CPU: {cpu}; load average at the start: {load}",
        f"- per kernel: the default and up to {args.points} other points of "
        "benchmarks/tuning.py's restricted space ("
        + (f"the fastest of {args.sweep}" if args.sweep else "the default's neighbours")
        + f"), each measured {args.reps} times in a child (polycomp.tuning.measure_trial, "
        f"{args.time_budget:g} s of calls), alone and beside the default",
        "",
        "| kernel | points | kind | spread (mean max/min) | deviation (median) "
        "| Spearman (mean) | fastest per repetition |",
        "|---|---|---|---|---|---|---|",
    ]
    for noise in results:
        for kind in KINDS:
            s = stats(noise.times[kind])
            lines.append(f"| {noise.kernel} | {len(noise.configs)} | {kind} | "
                         f"{s['spread']:.3f} | {s['deviation']:.2%} | {s['spearman']:.2f} | "
                         f"{', '.join(map(str, s['fastest']))} |")
    lines += ["", "Points (0 is the default):", ""]
    for noise in results:
        described = ("{}: {}".format(i, ", ".join(f"{k.rsplit('/', 1)[1]}={v}"
                                                  for k, v in c.items()))
                     for i, c in enumerate(noise.configs))
        lines.append(f"- {noise.kernel}: " + "; ".join(described))
    return "\n".join(lines) + "\n"


def write_csv(results: list[Noise], path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kernel", "point", "config", "kind", "repetition", "seconds"])
        for noise in results:
            for kind in KINDS:
                for i, config in enumerate(noise.configs):
                    for r, seconds in enumerate(noise.times[kind][i]):
                        w.writerow([noise.kernel, i, json.dumps(config), kind, r,
                                    f"{seconds:.6g}"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tuning_noise",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", default=",".join(CASES),
                        help=f"comma-separated, from {', '.join(CASES)}")
    parser.add_argument("--reps", type=int, default=4, help="measurements per point and kind")
    parser.add_argument("--points", type=int, default=8, help="points besides the default")
    parser.add_argument("--sweep", type=Path, default=None,
                        help="a sweep saved by benchmarks/tuning.py: its fastest points")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.kernels.split(",") if n.strip()]
    if not names or any(n not in CASES for n in names):
        parser.error(f"--kernels: from {', '.join(CASES)}")
    if args.reps < 2 or args.points < 1:
        parser.error("--reps must be at least 2 and --points at least 1")
    from polycomp.tuning.api import TIME_BUDGET

    args.time_budget = 0.02 if args.quick else TIME_BUDGET
    pool = worker_pool()
    try:
        results = [measure_kernel(name, args, pool) for name in names]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "tuning_noise-quick" if args.quick else "tuning_noise"
    text = markdown(results, args)
    (args.out / f"{stem}.md").write_text(text)
    write_csv(results, args.out / f"{stem}.csv")
    print(text)
    print(f"wrote {args.out / (stem + '.md')}, {stem}.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
