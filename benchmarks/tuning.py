"""The tile sampler against the ground truth and against random search (issue 13).

    python -m benchmarks.tuning [--kernels conv3x3,2mm,gemm-gelu,jacobi-2d] [--seeds 5]
        [--budget 16] [--quick] [--live] [--sweep FILE] [--out benchmarks/results]

The claim judged: averaged over --seeds seeds, the best configuration the model-guided
sampler (polycomp/tuning/sampler.py) finds within --budget measurements is within 10 %
of the ground-truth best, and better than (here: at least as good as) the best random
search finds within twice that budget; and the tuned configuration is never slower than
the default (the analytical choice), up to the re-measurement's noise (2 %).

Kernels (float32 TC, float64 PolyBench C; default sizes, --quick much smaller ones):

    conv3x3    ResNet-50 layer1 3x3 convolution, N=1, C=K=64, 56x56 output (TC, padded
               input as in benchmarks/operators)
    2mm        PolyBench 2mm, the C file of benchmarks/polybench, LARGE sizes
    gemm-gelu  BERT-base FFN matmul + bias + GELU, 128x768 by 768x3072 (TC)
    jacobi-2d  PolyBench jacobi-2d, the C file of benchmarks/polybench (compile_loops),
               100 time steps on 1000x1000 (time-tiled: its band is (t, i, j))

The restricted space (so that an exhaustive sweep takes minutes per kernel): only the
tile sizes of the main band (the tiled band with the most iterations) are searched, for
its three longest members, each among the powers of two 4 to 256 within its extent plus
the default's own value (--values sets the powers); every other knob (the other members'
tiles, unroll-and-jam, the SIMD member, L2 tiles, the other bands) stays at the
default. At most 8 x 8 x 8 = 512 points; the parallel-tiles prune of polycomp.tune
applies as in a real search. Until stop 25 the powers were 8 to 128 (--values
8,16,32,64,128: at most 216 points), the region of the real space (which holds 1 to
the extent) where most points are good: conv3x3 had 64 points, so random search with 32
measurements saw half of them and met one of the four fastest with a chance of about
94 %, and the two searches could only tie, up to the re-measurement's noise.
--quick: the two longest members among 8 and 16 (at most 9 points), tiny sizes.

Method, per kernel:

1. Sweep (saved as tuning-sweep.json; --sweep FILE replays a saved one): every point of
   the restricted space measured once as polycomp.tune measures a trial
   (polycomp.tuning.measure_trial in a child process: compiled with
   Options.band_config, checked against the default's outputs, then timed in turns
   beside the default: its minimum over 0.2 s of calls over the default's, times the
   default's seconds in this process; --unpaired: its own minimum, as until stop 25),
   through a one-worker pool (no overlapping timings).
2. Searches: for each seed, the Sampler and RandomSearch, each with --budget, twice and
   four times as many measurements (the criteria compare the sampler at --budget with
   random search at twice it), over the restricted space. By default they replay the sweep's
   measurements (a measurement is the one the sweep took of that point, which is what a
   live search would have measured, without paying for it again: every search sees the
   same noise); --live measures each search's configurations afresh instead.
3. Re-measurement: the sweep's ten fastest points, the default and every search's best
   three are compiled in this process (sharing one set of temporaries, as the tuner's
   confirmation does) and timed in interleaved rounds, 20 rounds. Each
   turn waits for the previous kernel's threads to settle, makes one untimed call, then
   times calls for as long as a turn of polycomp.tune's confirmation lasts (2 x the
   time budget / api.CONFIRM_ROUNDS, at least one call) and keeps their minimum. One
   call per turn, as this benchmark timed until stop 24, scored sub-millisecond kernels
   on eight threads by their thread wake-up: the odd and even rounds of one run ranked
   conv3x3's points differently by up to 20 %. The odd rounds are the tuner's confirmation (polycomp.tune's
   item-3 rule, api.CONFIRM_TOP and CONFIRM_MARGIN): each search's declared winner is
   the fastest of its best three there, if it beats the default by more than the
   margin, else the default. The even rounds score: the ground truth is the fastest of
   the top ten and the default, and every ratio below compares those times (minimum
   over the even rounds), so no pick is scored by the timings that chose it. The
   searches' own bests, unconfirmed, are reported beside them.

No record is read or written (the searches run outside polycomp.tune, and its records
are never opened): the user's tuning records are untouched. Writes tuning.md,
tuning.csv and tuning.png (tuning-quick.* with --quick) to --out.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# polycomp.tune's confirmation: how many of a search's best are re-measured beside the
# default, and by how much one must beat it
from polycomp.tuning.api import CONFIRM_MARGIN, CONFIRM_ROUNDS, CONFIRM_TOP

KERNEL_DIR = Path(__file__).resolve().parent / "polybench" / "kernels"

# the restricted space (module doc)
TILE_VALUES = (4, 8, 16, 32, 64, 128, 256)
MEMBERS = 3
QUICK_TILE_VALUES = (8, 16)
QUICK_MEMBERS = 2
# the criteria (module doc)
WITHIN = 0.10  # the sampler's best, over the ground truth's, at most 1 + WITHIN
NOISE = 0.02  # tuned over default above 1 + NOISE counts as slower
TOP = 10  # the sweep's fastest points re-measured
ROUNDS = 20  # interleaved rounds of the re-measurement (half confirm, half score)
TIME_BUDGET = 0.2  # seconds of timed calls per sweep measurement (as polycomp.tune)
TIMEOUT = 120.0  # seconds per measurement before its child is killed

Key = tuple[int, ...]


# ----------------------------------------------------------------------------- kernels

@dataclass(frozen=True)
class Case:
    name: str
    what: str
    build: Callable[[bool], tuple[Any, dict[str, int]]]  # quick -> (source or Kernel, sizes)


def _conv(quick: bool):
    from .operators import defs

    c, hw = (8, 12) if quick else (64, 56)
    op = defs.conv("conv3x3", "ResNet-50 layer1", c, c, hw, 3)
    return op.tc, {"N": 1, "C": c, "H": hw + 2, "W": hw + 2, "F": c, "KH": 3, "KW": 3}


def _gemm_gelu(quick: bool):
    from .operators import defs

    m, k, n = (16, 32, 48) if quick else (128, 768, 3072)
    return defs.matmul_bias_gelu(m, k, n).tc, {"M": m, "K": k, "N": n}


def _polybench(file: str, sizes: dict[str, int], quick_sizes: dict[str, int]):
    def build(quick: bool):
        import polycomp

        kernel = polycomp.compile_loops((KERNEL_DIR / file).read_text(), tuning="none")
        return kernel, dict(quick_sizes if quick else sizes)
    return build


CASES = {c.name: c for c in (
    Case("conv3x3", "ResNet-50 3x3 conv (TC)", _conv),
    Case("2mm", "PolyBench 2mm (C, LARGE)",
         _polybench("2mm.c", {"ni": 800, "nj": 900, "nk": 1100, "nl": 1200},
                    {"ni": 24, "nj": 20, "nk": 28, "nl": 32})),
    Case("gemm-gelu", "BERT FFN matmul + bias + GELU (TC)", _gemm_gelu),
    Case("jacobi-2d", "PolyBench jacobi-2d (C)",
         _polybench("jacobi_2d.c", {"tsteps": 100, "n": 1000}, {"tsteps": 4, "n": 40})),
)}


# ----------------------------------------------------------------------------- the space

@dataclass
class Restricted:
    """The searched part of a kernel's space: ``space`` holds the chosen knobs, every
    other knob keeps the full space's default (``complete``)."""

    space: Any  # TuningSpace
    full: Any  # TuningSpace
    band: str

    def complete(self, config: Mapping[str, int]) -> dict[str, int]:
        return {**self.full.default, **config}


class _Within:  # a prune rule: the full space's (e.g. too few parallel tiles)
    def __init__(self, full, default: Mapping[str, int]):
        self.full, self.default = full, dict(default)

    def __call__(self, config: Mapping[str, int]) -> bool:
        return self.full.valid({**self.default, **config})


def main_band(bands: Sequence[Any]) -> Any:
    """The band with the most iterations (the first of equals)."""
    from polycomp.tuning.space import UNKNOWN_EXTENT

    return max(bands, key=lambda b: math.prod(e or UNKNOWN_EXTENT for e in b.extents))


def restrict(full, bands: Sequence[Any], members: int = MEMBERS,
             values: Sequence[int] = TILE_VALUES) -> Restricted:
    """The module doc's restriction of ``full`` (a TuningSpace over ``bands``, BandInfo):
    the tile knobs of the main band's ``members`` longest members, among ``values``
    within the extent (the default's value is added by TuningSpace)."""
    from polycomp.tuning.space import UNKNOWN_EXTENT, Knob, TuningSpace

    band = main_band(bands)
    tiled = [(m, e or UNKNOWN_EXTENT) for m, e in enumerate(band.extents)
             if f"{band.id}/tile{m}" in full.names]
    longest = sorted(sorted(tiled, key=lambda me: (-me[1], me[0]))[:members])
    knobs = []
    for m, extent in longest:
        name = f"{band.id}/tile{m}"
        within = tuple(v for v in values if v <= extent) or (full.default[name],)
        knobs.append(Knob(name, within, "tile"))
    default = {k.name: full.default[k.name] for k in knobs}
    space = TuningSpace(tuple(knobs), default, _Within(full, full.default))
    return Restricted(space, full, band.id)


# ----------------------------------------------------------------------------- summary

@dataclass
class Summary:
    ground_truth: float  # re-measured seconds of the best of the top ten and the default
    default: float
    sampler: list[float]  # per seed: its best's re-measured time over the ground truth
    random: list[float]
    tuned_vs_default: list[float]  # per seed: its best over the default

    @property
    def sampler_mean(self) -> float:
        return sum(self.sampler) / len(self.sampler)

    @property
    def random_mean(self) -> float:
        return sum(self.random) / len(self.random)

    @property
    def within(self) -> bool:
        return self.sampler_mean <= 1.0 + WITHIN

    @property
    def beats_random(self) -> bool:
        # "better than random": never worse on average; both at the optimum is a tie
        return self.sampler_mean <= self.random_mean

    @property
    def never_slower(self) -> bool:
        return max(self.tuned_vs_default) <= 1.0 + NOISE

    @property
    def passed(self) -> bool:
        return self.within and self.beats_random and self.never_slower


def summarize(times: Mapping[Key, float], truth: Sequence[Key], default: Key,
              sampler: Sequence[Key], random: Sequence[Key]) -> Summary:
    """The criteria from re-measured ``times``: ``truth`` the keys the ground truth is
    the best of (the top ten and the default), ``sampler`` and ``random`` each search's
    best per seed."""
    if not sampler or len(sampler) != len(random):
        raise ValueError("one best per seed for each search")
    best = min(times[k] for k in truth)
    return Summary(best, times[default], [times[k] / best for k in sampler],
                   [times[k] / best for k in random],
                   [times[k] / times[default] for k in sampler])


def mean_curve(curves: Sequence[Sequence[float]], scale: float) -> list[float]:
    """The mean over seeds of best-so-far curves, over ``scale``; a point where some
    curve has nothing valid yet is inf."""
    n = max((len(c) for c in curves), default=0)
    out = []
    for i in range(n):
        column = [c[min(i, len(c) - 1)] for c in curves if c]
        out.append(sum(column) / len(column) / scale if column else math.inf)
    return out


# ----------------------------------------------------------------------------- running

class _Bar:
    """tqdm when installed (as benchmarks/operators), else a line per tenth."""

    def __init__(self, total: int, desc: str):
        self.total, self.desc, self.n = total, desc, 0
        try:
            from tqdm import tqdm
        except ImportError:
            self.bar = None
            print(f"{desc}: {total} steps", file=sys.stderr, flush=True)
        else:
            self.bar = tqdm(total=total, desc=desc, file=sys.stderr)

    def update(self, _: object = None) -> None:
        self.n += 1
        if self.bar is not None:
            self.bar.update(1)
        elif self.n == self.total or self.n % max(1, self.total // 10) == 0:
            print(f"  {self.desc}: {self.n}/{self.total}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@dataclass
class KernelRun:
    case: Case
    sizes: dict[str, int]
    restricted: Restricted | None = None
    points: int = 0
    table: dict[Key, Any] = field(default_factory=dict)  # key -> Outcome of the sweep
    sweep_s: float = math.nan
    # search -> per seed: its declared winner (confirmed), its own best, its best three
    picks: dict[str, list[Key]] = field(default_factory=dict)
    raw: dict[str, list[Key]] = field(default_factory=dict)
    tops: dict[str, list[list[Key]]] = field(default_factory=dict)
    curves: dict[str, list[list[float]]] = field(default_factory=dict)
    top: list[Key] = field(default_factory=list)
    times: dict[Key, float] = field(default_factory=dict)  # re-measured: scoring rounds
    confirm_times: dict[Key, float] = field(default_factory=dict)  # confirming rounds
    summary: Summary | None = None
    raw_summary: Summary | None = None  # the same criteria on the unconfirmed picks
    error: str = ""

    @property
    def default(self) -> Key:
        return self.restricted.space.key(self.restricted.space.default)

    def mean_ratio(self, search: str, raw: bool = False) -> float:
        """The mean over seeds of ``search``'s declared winner (``raw``: its own best),
        re-measured, over the ground truth."""
        picks = (self.raw if raw else self.picks)[search]
        return sum(self.times[k] for k in picks) / len(picks) / self.summary.ground_truth

    def sweep_time(self, key: Key) -> float | None:
        outcome = self.table.get(key)
        return outcome.time if outcome is not None and outcome.ok else None


def run_kernel(case: Case, args: argparse.Namespace, pool) -> KernelRun:  # noqa: ANN001
    from polycomp.tuning import Measurer, RandomSearch, Sampler, measure_trial
    from polycomp.tuning.api import prepare

    source, sizes = case.build(args.quick)
    run = KernelRun(case, sizes)
    prepared = prepare(source, sizes, seed=0, time_budget=args.time_budget, function="tuning",
                       paired=not args.unpaired)
    restricted = restrict(prepared.space, prepared.infos,
                          QUICK_MEMBERS if args.quick else MEMBERS, args.values)
    run.restricted = restricted
    space = restricted.space
    points = list(space.points())
    run.points = len(points)

    def measurer(bar: _Bar) -> Measurer:
        return Measurer(measure_trial, (prepared.spec,), executor=pool, timeout=TIMEOUT,
                        reference=prepared.reference, rtol=prepared.rtol, atol=prepared.atol,
                        on_outcome=bar.update)

    saved = load_sweep(args.sweep, case.name, sizes, space) if args.sweep else None
    if saved is not None:
        run.table, run.sweep_s = saved
    else:
        bar = _Bar(len(points), f"{case.name}: sweep")
        start = time.perf_counter()
        with measurer(bar) as measure:
            outcomes = measure([restricted.complete(c) for c in points])
        bar.close()
        run.sweep_s = time.perf_counter() - start
        run.table = {space.key(c): o for c, o in zip(points, outcomes)}

    def featurize(config):
        return prepared.featurize(restricted.complete(config))

    searches = {f"{name}@{budget}": (search, budget)
                for name, search in (("sampler", Sampler), ("random", RandomSearch))
                for budget in args.budgets}
    live = _Bar(len(args.seeds) * 2 * sum(args.budgets), f"{case.name}: live searches") \
        if args.live else None
    for name, (search, budget) in searches.items():
        run.raw[name], run.tops[name], run.curves[name] = [], [], []
        for seed in args.seeds:
            if live is not None:
                with measurer(live) as measure:
                    def measure_batch(configs, measure=measure):
                        return measure([restricted.complete(c) for c in configs])
                    result = search(space, featurize, measure_batch, budget=budget,
                                    seed=seed).run()
            else:
                def measure_batch(configs):
                    return [run.table[space.key(c)] for c in configs]
                result = search(space, featurize, measure_batch, budget=budget,
                                seed=seed).run()
            if result.best_config is None:
                raise RuntimeError(f"{case.name}: the {name} search found nothing valid")
            run.raw[name].append(space.key(result.best_config))
            fastest = sorted((t for t in result.trials if t.ok), key=lambda t: t.time)
            run.tops[name].append([space.key(t.config) for t in fastest[:CONFIRM_TOP]])
            run.curves[name].append(list(result.curve))
    if live is not None:
        live.close()

    valid = sorted((k for k in run.table if run.sweep_time(k) is not None),
                   key=lambda k: run.sweep_time(k))
    run.top = valid[:args.top]
    keys = list(dict.fromkeys([*run.top, run.default,
                               *(k for tops in run.tops.values() for t in tops for k in t)]))
    rounds = remeasure(prepared, restricted, keys, args.rounds, case.name,
                       args.time_budget)
    run.confirm_times = {k: min(v[0::2]) for k, v in rounds.items()}
    run.times = {k: min(v[1::2] or v) for k, v in rounds.items()}
    run.picks = {name: [confirmed_pick(t, run.default, run.confirm_times) for t in tops]
                 for name, tops in run.tops.items()}
    for attr, picks in (("summary", run.picks), ("raw_summary", run.raw)):
        setattr(run, attr, summarize(run.times, [*run.top, run.default], run.default,
                                     picks[f"sampler@{args.budget}"],
                                     picks[f"random@{2 * args.budget}"]))
    return run


def confirmed_pick(top: Sequence[Key], default: Key, times: Mapping[Key, float]) -> Key:
    """polycomp.tune's declared winner (api.confirm_result): the fastest of a search's
    best few re-measured beside the default, if faster than the default by more than
    CONFIRM_MARGIN, else the default (a tie keeps the analytical choice)."""
    best = min(top, key=lambda k: times[k], default=default)
    return best if times[best] < (1.0 - CONFIRM_MARGIN) * times[default] else default


def save_sweep(runs: list[KernelRun], path: Path) -> None:
    """The sweeps' measurements as JSON (``--sweep`` replays them: searches and
    re-measurement run again, the sweep does not)."""
    data = {}
    for run in runs:
        if run.restricted is None or not run.table:
            continue
        space = run.restricted.space
        data[run.case.name] = {
            "sizes": run.sizes, "sweep_s": run.sweep_s,
            "points": [{"config": space.from_key(k), "status": o.status, "time": o.time}
                       for k, o in run.table.items()]}
    path.write_text(json.dumps(data, indent=1) + "\n")


def load_sweep(path: Path, name: str, sizes: Mapping[str, int], space) -> \
        tuple[dict[Key, Any], float] | None:  # noqa: ANN001 - TuningSpace
    """A saved sweep of ``name`` at ``sizes`` over exactly ``space``'s points, or None
    (then the sweep is measured)."""
    from polycomp.tuning.measure import Outcome

    entry = json.loads(Path(path).read_text()).get(name)
    if entry is None or entry["sizes"] != dict(sizes):
        return None
    table = {space.key(p["config"]): Outcome(p["status"], p["time"]) for p in entry["points"]}
    if set(table) != {space.key(c) for c in space.points()}:
        return None
    return table, float(entry["sweep_s"])


def remeasure(prepared, restricted: Restricted, keys: list[Key], rounds: int,
              label: str, time_budget: float) -> dict[Key, list[float]]:  # noqa: ANN001
    """Seconds per configuration (``prepared``: an api.Prepared) in each of the
    interleaved rounds (module doc), in this process (the sweep's children are gone:
    their times are not comparable across the fork, turn for turn, as these are)."""
    from polycomp.tuning.measure import time_callable

    from .operators.__main__ import settle

    turn = 2 * time_budget / CONFIRM_ROUNDS

    space = restricted.space
    bar = _Bar(len(keys) + rounds, f"{label}: re-measure")
    calls = {}
    args = prepared.spec.arguments()  # shared: only times are taken here
    for key in keys:
        kernel = prepared.spec.kernel(restricted.complete(space.from_key(key)))
        kernel.specialize(prepared.spec.sizes)
        # one set of temporaries for all, as polycomp.tune's confirmation does: where
        # a buffer lies is then no difference between the points
        kernel.share_temporaries(prepared.kernel, prepared.spec.sizes)
        calls[key] = (lambda k=kernel: k(*args))
        bar.update()
    seen: dict[Key, list[float]] = {key: [] for key in keys}
    for r in range(rounds):
        order = keys[r % len(keys):] + keys[:r % len(keys)]  # no fixed first or last turn
        for key in order:
            settle()
            seen[key].append(time_callable(calls[key], budget=turn, min_repeats=1))
        bar.update()
    bar.close()
    return seen


# ----------------------------------------------------------------------------- output

def fmt_ms(seconds: float | None) -> str:
    return "-" if seconds is None or not math.isfinite(seconds) else f"{seconds * 1e3:.4g} ms"


def _knobs(run: KernelRun) -> str:
    space = run.restricted.space
    return "; ".join(f"{k.name.rsplit('/', 1)[1]} {{{', '.join(map(str, k.values))}}}"
                     for k in space.knobs)


def header(args: argparse.Namespace) -> list[str]:
    from .operators.__main__ import cpu_and_load
    cpu, load = cpu_and_load()
    members, values = QUICK_MEMBERS if args.quick else MEMBERS, args.values
    return [
        "## Tile sampler against the ground truth and random search" +
        (" (--quick smoke run)" if args.quick else ""),
        "",
        f"- date: {time.strftime('%Y-%m-%dT%H:%M:%S')}; CPU: {cpu} ({os.cpu_count()} logical "
        f"CPUs; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')}); load "
        f"average at start: {load}",
        f"- space (restricted, for an exhaustive sweep): the tile sizes of the main band's "
        f"{members} longest members among {', '.join(map(str, values))} (within the extent) "
        "plus the default's own value; every other knob at the default",
        f"- searches: the sampler and random search, each with "
        f"{', '.join(map(str, args.budgets))} measurements, seeds "
        f"{', '.join(map(str, args.seeds))}; "
        + ("measured live" if args.live else "replaying the sweep's measurements"),
        "- a measurement: " + ("its own minimum over "
                               if args.unpaired else "timed in turns beside the default: "
                               "its minimum over the default's, times the default's, over ")
        + f"{args.time_budget:g} s of calls (in a child: polycomp.tuning.measure_trial)"
        + ("" if args.sweep is None else f"; the sweep replayed from {args.sweep}"),
        f"- ground truth: the sweep's top {args.top} and the default re-measured with every "
        f"search's best {CONFIRM_TOP} in {args.rounds} interleaved rounds, on shared "
        f"temporaries (a turn: the "
        f"minimum over {2 * args.time_budget / CONFIRM_ROUNDS:.2g} s of calls); each search's "
        "declared winner is polycomp.tune's (the fastest of its best "
        f"{CONFIRM_TOP} in the odd rounds, if over {CONFIRM_MARGIN:.0%} faster than the "
        "default); ratios are times in the even rounds (minimum) over the ground truth's",
        f"- criteria: sampler mean ratio <= {1 + WITHIN:.2f}; sampler mean <= random mean; "
        f"tuned / default <= {1 + NOISE:.2f} for every seed",
        *(["- --quick: microsecond kernels and 3 rounds, so the criteria are noise here; "
           "the run checks the plumbing only"] if args.quick else []),
        "",
    ]


def markdown(runs: list[KernelRun], args: argparse.Namespace) -> str:
    lines = header(args)
    cols = ["kernel", "sizes", "points (valid)", "sweep", "default", "ground truth",
            *(f"random@{b}" for b in args.budgets),
            *(f"sampler@{b}" + (" (mean / worst)" if b == args.budget else "")
              for b in args.budgets),
            "tuned / default (worst)", "within 10 %", "beats random", "never slower"]
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "---|" * len(cols))
    for run in runs:
        sizes = ", ".join(f"{k}={v}" for k, v in run.sizes.items())
        s = run.summary
        if s is None:
            lines.append(f"| {run.case.name} | {sizes} | " + " | ".join(
                ["-"] * (len(cols) - 3)) + f" | ERROR: {run.error.replace('|', '/')} |")
            continue
        valid = sum(o.ok for o in run.table.values())
        yes = {True: "yes", False: "**no**"}
        lines.append("| " + " | ".join([
            run.case.name, sizes, f"{run.points} ({valid})", f"{run.sweep_s:.0f} s",
            fmt_ms(s.default), fmt_ms(s.ground_truth),
            *(f"{run.mean_ratio(f'random@{b}'):.3f}" for b in args.budgets),
            *(f"{s.sampler_mean:.3f} / {max(s.sampler):.3f}" if b == args.budget
              else f"{run.mean_ratio(f'sampler@{b}'):.3f}" for b in args.budgets),
            f"{max(s.tuned_vs_default):.3f}",
            yes[s.within], yes[s.beats_random], yes[s.never_slower]]) + " |")
    lines.append("")
    lines.append("Each search column: the mean over seeds of its declared winner's re-measured "
                 "time over the ground truth's; the criteria compare sampler@"
                 f"{args.budget} with random@{2 * args.budget}.")
    lines.append("")
    lines.append("The searches' own bests, unconfirmed (the same criteria):")
    lines.append("")
    lines.append(f"| kernel | sampler@{args.budget} (mean / worst) | random@{2 * args.budget} "
                 "| within 10 % | beats random | never slower |")
    lines.append("|---|---|---|---|---|---|")
    for run in runs:
        r = run.raw_summary
        if r is None:
            continue
        yes = {True: "yes", False: "**no**"}
        lines.append(f"| {run.case.name} | {r.sampler_mean:.3f} / {max(r.sampler):.3f} | "
                     f"{r.random_mean:.3f} | {yes[r.within]} | {yes[r.beats_random]} | "
                     f"{yes[r.never_slower]} |")
    lines.append("")
    lines.append("Searched knobs per kernel (main band; the default's value included):")
    lines.append("")
    for run in runs:
        if run.restricted is not None:
            lines.append(f"- {run.case.name} ({run.case.what}), band {run.restricted.band}: "
                         f"{_knobs(run)}")
    return "\n".join(lines) + "\n"


def write_csv(runs: list[KernelRun], args: argparse.Namespace, path: Path) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["kernel", "role", "seed", "config", "sweep_s", "remeasured_s",
                    "over_ground_truth", "over_default", "curve_s"])
        for run in runs:
            if run.summary is None:
                w.writerow([run.case.name, "error", "", "", "", "", "", "", run.error])
                continue
            space, s = run.restricted.space, run.summary

            def row(role, seed, key, curve=()):
                t = run.times.get(key)
                w.writerow([run.case.name, role, seed, json.dumps(space.from_key(key)),
                            _g(run.sweep_time(key)), _g(t),
                            _g(t / s.ground_truth if t else None),
                            _g(t / s.default if t else None),
                            ";".join(_g(c) for c in curve)])
            row("default", "", run.default)
            for i, key in enumerate(run.top):
                row(f"top{i + 1}", "", key)
            for name in run.picks:
                for seed, key, curve in zip(args.seeds, run.picks[name], run.curves[name]):
                    row(name, seed, key, curve)
                for seed, key in zip(args.seeds, run.raw[name]):
                    row(f"{name} own best", seed, key)


def _g(x: float | None) -> str:
    return "" if x is None or not math.isfinite(x) else f"{x:.6g}"


def plot(runs: list[KernelRun], args: argparse.Namespace, path: Path) -> bool:
    """Per kernel: the mean best-so-far (sweep seconds over the sweep's best) of each
    search against measurements, the ground truth as a line at 1; False without
    matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    runs = [r for r in runs if r.summary is not None]
    if not runs:
        return False
    cols = min(2, len(runs))
    rows = -(-len(runs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 4 * rows), squeeze=False)
    for ax, run in zip(axes.flat, runs):
        best = min(t for t in (run.sweep_time(k) for k in run.table) if t is not None)
        longest = max(args.budgets)
        for name, style in ((f"sampler@{longest}", "-"), (f"random@{longest}", "--")):
            curve = mean_curve(run.curves[name], best)
            points = [(i + 1, v) for i, v in enumerate(curve) if math.isfinite(v)]
            if points:
                xs, ys = zip(*points)
                ax.step(xs, ys, where="post", linestyle=style,
                        label=f"{name} (mean of {len(args.seeds)} seeds)")
        ax.axhline(1.0, color="black", linewidth=0.8, label="ground truth (sweep's best)")
        ax.axhline(1.0 + WITHIN, color="black", linewidth=0.8, linestyle=":",
                   label=f"+{WITHIN:.0%}")
        default = run.sweep_time(run.default)
        if default is not None:
            ax.axhline(default / best, color="gray", linewidth=0.8, linestyle="-.",
                       label="default")
        for b in args.budgets[:-1]:
            ax.axvline(b, color="gray", linewidth=0.5)
        ax.set_title(f"{run.case.name} ({run.points} points)")
        ax.set_xlabel("measurements")
        ax.set_ylabel("best so far / sweep's best")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(runs):]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# ----------------------------------------------------------------------------- main

def worker_pool():
    """One measuring worker started by a fork server: its trials are forks of a process
    with no OpenMP runtime loaded (polycomp.cli.worker_pool)."""
    from polycomp.cli import worker_pool as pool

    return pool(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tuning", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", default=",".join(CASES),
                        help=f"comma-separated, from {', '.join(CASES)}")
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 per search")
    parser.add_argument("--budget", type=int, default=None,
                        help="the sampler's measurements the criteria judge (both searches "
                             "also run with 2x and 4x; random search is judged at 2x; "
                             "default 16, 4 with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes and a space of at most 9 points (a smoke run)")
    parser.add_argument("--live", action="store_true",
                        help="measure the searches' configurations afresh instead of "
                             "replaying the sweep's measurements")
    parser.add_argument("--top", type=int, default=None,
                        help=f"the sweep's fastest points re-measured (default {TOP}, 3 "
                             "with --quick)")
    parser.add_argument("--rounds", type=int, default=None,
                        help=f"re-measurement rounds (default {ROUNDS}, 3 with --quick)")
    parser.add_argument("--sweep", type=Path, default=None,
                        help="replay the sweep saved in this JSON file (written by every run "
                             "as tuning-sweep.json) for the kernels it holds at the same "
                             "sizes and space, instead of measuring it again")
    parser.add_argument("--values", default=None,
                        help="the tile sizes of the restricted space, comma-separated (default "
                             f"{','.join(map(str, TILE_VALUES))}; "
                             f"{','.join(map(str, QUICK_TILE_VALUES))} with --quick)")
    parser.add_argument("--unpaired", action="store_true",
                        help="time each sweep (or --live) measurement alone, not beside the "
                             "default (polycomp.tune(paired=False); as until stop 25)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.kernels.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown or not names:
        parser.error(f"unknown kernels {unknown}; known: {', '.join(CASES)}")
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    try:
        args.values = (tuple(sorted({int(v) for v in args.values.split(",") if v.strip()}))
                       if args.values else QUICK_TILE_VALUES if args.quick else TILE_VALUES)
    except ValueError:
        parser.error("--values: comma-separated integers, e.g. 8,16,32")
    if not args.values or min(args.values) < 1:
        parser.error("--values: positive tile sizes")
    args.budget = args.budget or (4 if args.quick else 16)
    args.top = args.top or (3 if args.quick else TOP)
    args.rounds = args.rounds or (3 if args.quick else ROUNDS)
    if args.budget < 1 or args.top < 1 or args.rounds < 1:
        parser.error("--budget, --top and --rounds must be at least 1")
    args.seeds = list(range(args.seeds))
    args.budgets = (args.budget, 2 * args.budget, 4 * args.budget)
    args.time_budget = 0.02 if args.quick else TIME_BUDGET

    import polycomp

    runs: list[KernelRun] = []
    pool = worker_pool()
    try:
        for name in names:
            case = CASES[name]
            try:
                run = run_kernel(case, args, pool)
            except (polycomp.PolycompError, RuntimeError) as exc:
                run = KernelRun(case, case.build(args.quick)[1],
                                error=f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
            runs.append(run)
            s = run.summary
            print(f"  {name}: " + (run.error if s is None else
                                   f"ground truth {fmt_ms(s.ground_truth)}, default "
                                   f"{fmt_ms(s.default)}, sampler {s.sampler_mean:.3f}, "
                                   f"random {s.random_mean:.3f}"), file=sys.stderr, flush=True)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "tuning-quick" if args.quick else "tuning"
    text = markdown(runs, args)
    (args.out / f"{stem}.md").write_text(text)
    write_csv(runs, args, args.out / f"{stem}.csv")
    save_sweep(runs, args.out / f"{stem}-sweep.json")
    plotted = plot(runs, args, args.out / f"{stem}.png")
    print(text)
    print(f"wrote {args.out / (stem + '.md')}, {stem}.csv, {stem}-sweep.json"
          + (f", {stem}.png" if plotted else ""))
    # the criteria are the table's to report; only a kernel that could not run fails
    return 0 if all(r.summary is not None for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
