"""The search: which configurations to measure, batch after batch (AKG's tile sampler).

Place in the pipeline: the tuner's loop. Input: a TuningSpace (space.py), a featuriser
(configuration -> numbers: ``space.encode`` by default, or one adding footprints and
trip counts), ``measure_batch`` (configurations -> Outcomes: measure.Measurer, or any
function; a plain float counts as a valid time and None as invalid) and a budget.
Output: a :class:`TuneResult`: the best configuration and time, the default's time,
the best time after each measurement, and every trial.

``Sampler`` (model-guided):

1. Round 1 measures the default (the analytical model's choice), any ``seeds`` (e.g. a
   record's best at other sizes, projected into the space), the default's neighbours
   (one step along one knob), then random valid points, FIRST_BATCH in all.
2. A cost model (cost_model.py) is fitted on the features and log times of every trial
   so far; an invalid trial counts as twice the slowest valid one, which steers the
   search off the regions that fail without refusing them outright.
3. Later rounds, in batches of BATCH: in a space of at most RANK_ALL points the model
   ranks every unmeasured configuration, and the batch is mostly the best ranked of
   those near the best measured ones (within NEAR_STEPS knob steps of the NEAR_PARENTS
   fastest), the rest (GLOBAL_SHARE) the best ranked anywhere: a model fitted on a
   dozen points is trustworthy only near them (a trust region), and a replay of
   measured sweeps (benchmarks/tuning.py, 60 seeds) found this better than ranking the
   whole space on 3 of 4 kernels and equal on the fourth. In a larger
   one they evolve the best measured configurations: each generation mutates every
   member of a population along one knob (space.mutate) and keeps a child when the
   model ranks it better than its parent, or else with the simulated-annealing
   probability exp(-Δ/T) (Δ in standardised predicted log time, T cooling to zero over
   the generations). Every child proposed joins a pool, and the batch is the pool's
   unmeasured configurations the model ranks best, plus a share ``explore`` of random
   ones (the model is wrong where it has seen nothing).
4. Refit after every batch; stop at ``budget`` measurements, when ``patience``
   measurements in a row bring no gain over the best, or when the space is exhausted.

``RandomSearch`` has the same interface: the default, the seeds, then random points.
Nothing is measured twice.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .cost_model import CostModel
from .measure import Outcome
from .space import Config, TuningSpace

# a trial that failed counts, for the model, as this many times the slowest valid one
INVALID_PENALTY = 2.0
# the Sampler's batches: round 1 (the default, the seeds, the default's neighbours, then
# random points) and each later one; small, so that the model is refitted often (a
# replay of measured sweeps, benchmarks/tuning.py, found 6 then 4 better within 16
# measurements than 8 then 8, which leaves the model one round)
FIRST_BATCH = 6
BATCH = 4
# spaces of at most this many points are ranked whole by the model; larger ones are
# explored by the evolutionary walk
RANK_ALL = 4096
# the trust region of a ranked space's later batches (module doc, item 3): points within
# NEAR_STEPS steps (summed over the knobs' sorted values) of the NEAR_PARENTS fastest
# measured ones fill all but GLOBAL_SHARE of a batch
NEAR_STEPS = 2
NEAR_PARENTS = 3
GLOBAL_SHARE = 0.25


@dataclass(frozen=True)
class Trial:
    """One measured configuration. ``source``: default, seed, random or model."""

    index: int
    config: Config
    status: str
    time: float | None
    detail: str = ""
    source: str = "random"
    round: int = 0

    @property
    def ok(self) -> bool:
        return self.status == "valid"


@dataclass
class TuneResult:
    best_config: Config | None
    best_time: float
    default_config: Config
    default_time: float | None
    curve: list[float] = field(default_factory=list)  # best time after each measurement
    trials: list[Trial] = field(default_factory=list)
    stopped: str = ""  # why the search ended: budget, patience, exhausted
    # polycomp.tune: the compile keywords of the best configuration (the options tuned
    # with, and band_config when some trial was valid)
    best_options: dict[str, Any] = field(default_factory=dict)
    # polycomp.tune: the search's best candidates and the default re-measured in
    # interleaved rounds (api.confirm_result), (configuration, seconds) each; best_time and
    # default_time are then these seconds, the curve keeps the search's
    confirmed: list[tuple[Config, float]] = field(default_factory=list)

    @property
    def speedup(self) -> float | None:
        """Default time over best time (None when the default failed)."""
        if self.default_time is None or not math.isfinite(self.best_time):
            return None
        return self.default_time / self.best_time

    def best_within(self, n: int) -> float:
        """The best time after the first ``n`` measurements (inf if none was valid)."""
        if not self.curve:
            return math.inf
        return self.curve[min(n, len(self.curve)) - 1]


class _Search:
    """What both searches share: bookkeeping, measuring batches, stopping."""

    def __init__(self, space: TuningSpace, featurize: Callable[[Mapping[str, int]], Any] | None,
                 measure_batch: Callable[[list[Config]], Sequence[Any]], budget: int = 64,
                 batch_size: int = 8, seed: int = 0, patience: int | None = None,
                 seeds: Sequence[Mapping[str, int]] = (), min_gain: float = 0.0):
        if budget < 1 or batch_size < 1:
            raise ValueError("budget and batch_size must be at least 1")
        self.space = space
        self.featurize = featurize or space.encode
        self.measure_batch = measure_batch
        self.budget, self.batch_size = budget, batch_size
        self.patience = patience
        self.min_gain = min_gain
        self.rng = np.random.default_rng(seed)
        self.seeds = [space.project(s) for s in seeds]
        self.trials: list[Trial] = []
        self.seen: set[tuple[int, ...]] = set()
        self.curve: list[float] = []
        self.best: Trial | None = None
        self.since_gain = 0
        self.round = 0
        self.stopped = ""  # why the search ended (budget, patience, exhausted)
        # round 1: the default, the seeds (the Sampler: the default's neighbours)
        # and random points, up to this many
        self.first_batch = batch_size

    # ------------------------------------------------------------------ the loop
    def run(self) -> TuneResult:
        """Measure batch after batch until a stopping rule holds; the result."""
        while self.step():
            pass
        return self.result()

    def step(self, limit: int | None = None) -> int:
        """Measure the next batch (at most ``limit`` configurations): how many were
        measured, 0 once the search has stopped (``stopped`` says why). A caller sharing
        one budget among searches (tuning/model.py) advances each by steps."""
        if self.stopped:
            return 0
        room = self.budget - len(self.trials)
        if limit is not None:
            room = min(room, max(0, limit))
        if room <= 0:
            if len(self.trials) >= self.budget:
                self.stopped = "budget"
            return 0
        batch = self._next_batch(room)[:room]
        if not batch:
            self.stopped = "exhausted"
            return 0
        self._measure(batch)
        self.round += 1
        if len(self.trials) >= self.budget:
            self.stopped = "budget"
        elif self.patience is not None and self.since_gain >= self.patience:
            self.stopped = "patience"
        return len(batch)

    def result(self) -> TuneResult:
        """The search so far: its best, the default's time, the curve and the trials."""
        default = self.trials[0] if self.trials else None
        return TuneResult(
            best_config=dict(self.best.config) if self.best else None,
            best_time=self.best.time if self.best else math.inf,
            default_config=dict(default.config if default else self.space.default),
            default_time=default.time if default is not None and default.ok else None,
            curve=list(self.curve), trials=list(self.trials), stopped=self.stopped)

    def _next_batch(self, room: int) -> list[tuple[Config, str]]:
        if self.round == 0:
            first = [(self.space.default, "default")] + [(s, "seed") for s in self.seeds]
            batch = self._unique(first)
            batch += self._first_points(max(0, min(self.first_batch, room) - len(batch)),
                                        avoid={self.space.key(c) for c, _ in batch})
            return batch + self._random(max(0, min(self.first_batch, room) - len(batch)),
                                        avoid={self.space.key(c) for c, _ in batch})
        return self._propose(min(self.batch_size, room))

    def _first_points(self, n: int, avoid: set) -> list[tuple[Config, str]]:
        """What round 1 adds after the default and the seeds (random search: nothing
        but random points, which the caller adds)."""
        return []

    def _propose(self, n: int) -> list[tuple[Config, str]]:
        return self._random(n)

    # ------------------------------------------------------------------ helpers
    def _unique(self, items: Sequence[tuple[Config, str]]) -> list[tuple[Config, str]]:
        out, keys = [], set()
        for config, source in items:
            key = self.space.key(config)
            if key not in self.seen and key not in keys:
                keys.add(key)
                out.append((config, source))
        return out

    def _random(self, n: int, avoid: set | None = None) -> list[tuple[Config, str]]:
        """Up to ``n`` unmeasured random valid configurations (fewer when the draws keep
        landing on measured ones: a nearly exhausted space)."""
        out: list[tuple[Config, str]] = []
        taken = set(self.seen) | (avoid or set())
        misses = 0
        while len(out) < n and misses < 50 * max(1, n):
            try:
                config = self.space.sample(self.rng)
            except RuntimeError:
                break
            key = self.space.key(config)
            if key in taken:
                misses += 1
                continue
            taken.add(key)
            out.append((config, "random"))
        return out

    def _measure(self, batch: list[tuple[Config, str]]) -> None:
        outcomes = list(self.measure_batch([dict(c) for c, _ in batch]))
        if len(outcomes) != len(batch):
            raise RuntimeError(f"measure_batch returned {len(outcomes)} results "
                               f"for {len(batch)} configurations")
        for (config, source), raw in zip(batch, outcomes):
            outcome = _outcome(raw)
            trial = Trial(len(self.trials), dict(config), outcome.status, outcome.time,
                          outcome.detail, source, self.round)
            self.trials.append(trial)
            self.seen.add(self.space.key(config))
            previous = self.best.time if self.best else math.inf
            if trial.ok and trial.time < previous * (1.0 - self.min_gain):
                self.since_gain = 0
            else:
                self.since_gain += 1
            if trial.ok and (self.best is None or trial.time < self.best.time):
                self.best = trial
            self.curve.append(self.best.time if self.best else math.inf)


def _log(seconds: float) -> float:
    return math.log(max(seconds, 1e-12))  # a 0 s timer reading is no reason to stop


def _outcome(raw: Any) -> Outcome:
    if isinstance(raw, Outcome):
        return raw
    if raw is None:
        return Outcome("invalid", None, "no time")
    seconds = float(raw)
    if not math.isfinite(seconds) or seconds < 0:
        return Outcome("invalid", None, f"time {seconds}")
    return Outcome("valid", seconds)


class RandomSearch(_Search):
    """The baseline: the default and the seeds, then uniformly random valid points."""


class Sampler(_Search):
    """Model-guided search (module doc).

    model        a factory of objects with fit(X, y) and predict(X) (cost_model.py)
    explore      the share of each later batch drawn at random
    parents      how many of the best measured configurations seed the evolution
    generations  rounds of mutation per batch; children per parent per generation
    """

    def __init__(self, space: TuningSpace, featurize=None, measure_batch=None, budget: int = 64,
                 batch_size: int = BATCH, seed: int = 0, patience: int | None = None,
                 seeds: Sequence[Mapping[str, int]] = (), min_gain: float = 0.0, *,
                 model: Callable[[], Any] = CostModel, explore: float = 0.0,
                 parents: int = 4, generations: int = 6, children: int = 4,
                 temperature: float = 0.5, first_batch: int = FIRST_BATCH):
        if measure_batch is None:
            raise ValueError("Sampler needs measure_batch")
        super().__init__(space, featurize, measure_batch, budget, batch_size, seed, patience,
                         seeds, min_gain)
        self.first_batch = first_batch
        self.model_factory = model
        self.explore = explore
        self.parents, self.generations, self.children = parents, generations, children
        self.temperature = temperature
        self.model = None

    def _fit(self) -> bool:
        valid = [t for t in self.trials if t.ok]
        if len(valid) < 3:
            return False  # nothing to rank by yet
        worst = max(_log(t.time) for t in valid)
        X = np.array([self.featurize(t.config) for t in self.trials], dtype=float)
        y = np.array([_log(t.time) if t.ok else worst + math.log(INVALID_PENALTY)
                      for t in self.trials])
        self.model = self.model_factory().fit(X, y)
        return True

    def _predict(self, configs: Sequence[Mapping[str, int]]) -> np.ndarray:
        X = np.array([self.featurize(c) for c in configs], dtype=float)
        return np.asarray(self.model.predict(X), dtype=float)

    def _first_points(self, n: int, avoid: set) -> list[tuple[Config, str]]:
        """Up to half of ``n``: the default's neighbours, one step along one knob (a
        random choice of them): the analytical choice is usually near a good point, and
        they show the model each knob's slope there; the random rest of the batch shows
        it the space (a default far from the optimum is all slope)."""
        n = (n + 1) // 2
        near = [c for c in self.space.neighbours(self.space.default)
                if self.space.key(c) not in avoid and self.space.key(c) not in self.seen]
        if len(near) > n:
            near = [near[i] for i in sorted(self.rng.choice(len(near), n, replace=False))]
        return [(c, "neighbour") for c in near]

    def _propose(self, n: int) -> list[tuple[Config, str]]:
        if n <= 0:
            return []
        if not self._fit():
            return self._random(n)
        n_random = int(round(self.explore * n))
        if n - n_random <= 0:
            return self._random(n)
        if self.space.size() <= RANK_ALL:
            picked = self._trust_region(self._ranked_space(), n - n_random)
        else:
            ranked = sorted(self._evolve().items(), key=lambda item: item[1][1])
            picked = [(config, "model") for _, (config, _) in ranked[:n - n_random]]
        taken = {self.space.key(c) for c, _ in picked}
        picked += self._random(n - len(picked), avoid=taken)
        return picked

    def _ranked_space(self) -> dict[tuple[int, ...], tuple[Config, float]]:
        """Every unmeasured valid configuration with its prediction (a small space:
        ranking all of it costs less than one measurement, and misses nothing an
        evolutionary walk would have to stumble on)."""
        points = [c for c in self.space.points() if self.space.key(c) not in self.seen]
        if not points:
            return {}
        scores = self._predict(points)
        return {self.space.key(c): (c, float(v)) for c, v in zip(points, scores)}

    def _trust_region(self, pool: dict[tuple[int, ...], tuple[Config, float]],
                      n: int) -> list[tuple[Config, str]]:
        """``n`` of the ranked ``pool``: the best ranked near the fastest measured points
        (all but GLOBAL_SHARE of them), then the best ranked of the rest."""
        parents = [t.config for t in sorted((t for t in self.trials if t.ok),
                                            key=lambda t: t.time)[:NEAR_PARENTS]]
        ranked = sorted(pool.values(), key=lambda item: item[1])
        near = [c for c, _ in ranked
                if any(self.space.steps(c, p) <= NEAR_STEPS for p in parents)]
        picked = near[:n - int(n * GLOBAL_SHARE)]
        taken = {self.space.key(c) for c in picked}
        picked += [c for c, _ in ranked if self.space.key(c) not in taken][:n - len(picked)]
        return [(c, "model") for c in picked]

    def _evolve(self) -> dict[tuple[int, ...], tuple[Config, float]]:
        """Unmeasured configurations met by the model-guided walk, with predictions."""
        valid = sorted((t for t in self.trials if t.ok), key=lambda t: t.time)
        population = [dict(t.config) for t in valid[:self.parents]]
        scores = self._predict(population)
        # Δ in units of the spread of the model's view of the measured points, so that
        # one temperature suits any model's scale
        spread = float(np.std(self._predict([t.config for t in self.trials]))) or 1.0
        pool: dict[tuple[int, ...], tuple[Config, float]] = {}
        for gen in range(self.generations):
            temp = self.temperature * (1.0 - gen / self.generations)
            kids = [self.space.mutate(p, self.rng) for p in population
                    for _ in range(self.children)]
            kid_scores = self._predict(kids)
            for config, score in zip(kids, kid_scores):
                key = self.space.key(config)
                if key not in self.seen:
                    pool[key] = (config, float(score))
            nxt, nxt_scores = [], []
            for i, (parent, p_score) in enumerate(zip(population, scores)):
                block = slice(i * self.children, (i + 1) * self.children)
                j = int(np.argmin(kid_scores[block]))
                kid, k_score = kids[block][j], float(kid_scores[block][j])
                delta = (k_score - p_score) / spread
                if delta < 0 or (temp > 0 and self.rng.random() < math.exp(-delta / temp)):
                    nxt.append(kid)
                    nxt_scores.append(k_score)
                else:
                    nxt.append(parent)
                    nxt_scores.append(float(p_score))
            population, scores = nxt, np.asarray(nxt_scores)
        return pool
