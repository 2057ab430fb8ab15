"""Whole-model tuning: one measurement budget shared by an ONNX model's kernels.

Place in the pipeline: around the ONNX session (polycomp/onnx) and the per-kernel tuner
(api.py). Input: a model, its input shapes, a budget of measurements. Output: a
:class:`ModelTuneResult` (the model's latency before and after, a row per tuned kernel,
the estimated latency after each measurement) and the records (records.py) that every
later session with ``tuning="records"`` (the default) compiles its kernels from.

1. The model is compiled untuned (``tuning="none"``) and profiled on random inputs:
   each distinct group kernel's share of the model's time is the sum of the seconds of
   the plan steps that run it (identical groups share one kernel, so one tuning serves
   them all).
2. Every kernel whose share is at least ``min_share`` and whose space has a choice
   becomes a task: ``api.prepare`` (its bands, space, reference outputs) and a Sampler
   advanced batch by batch (``Sampler.step``); its first batch is small, so that each
   task is measured once before the budget is spent on a few.
3. The task scheduler (as Ansor's): the next batch goes to the task with the largest
   estimated gain of model latency per measurement: its weight (seconds in the model)
   times a mix of its recent improvement per trial (the backward gradient) and a
   forward term, its current relative time times the chance that a further trial finds
   a new best (Laplace's rule of succession over its trials so far: a task tried little
   may still gain much, one that keeps finding better configurations draws more, one
   that never does draws less and less). A task whose search stopped drops out.
4. When the budget is spent, each task's best few are re-measured side by side with its
   default (api.confirm_result) and every trial goes to the records.
5. The model is compiled again, with the records, and both models run in interleaved
   rounds on the same inputs (minimum per model): the latency before and after, and
   the after-model's outputs checked against the before-model's.

Measurements do not overlap (one worker by default): two timings on one machine at once
disturb each other. The re-measurement and the before/after runs are outside the budget.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from polycomp.errors import ArgumentError, PolycompError

from .api import (TIME_BUDGET, Prepared, confirm_result, measure_trial, prepare,
                  record_signature)
from .measure import Measurer, Outcome
from .records import Records
from .sampler import Sampler, TuneResult
from .signature import kernel_sizes

# the scheduler's mix of backward gradient and optimistic forward term (Ansor's alpha)
BACKWARD_WEIGHT = 0.2
# the trials a task's recent improvement is measured over
WINDOW = 4
FIRST_BATCH = 3  # a task's first batch: the default and two random configurations
BATCH = 4
MIN_SHARE = 0.01  # kernels under this share of the model's time are not tuned
ROUNDS = 10  # interleaved before/after rounds


@dataclass
class TaskReport:
    """One tuned kernel: where it runs in the model and what tuning found."""

    kernel: str
    nodes: str  # the ONNX nodes of its first group, as the profile names them
    runs: int  # plan steps that run it
    seconds: float  # its profiled seconds in the untuned model (all its runs)
    trials: int
    default_time: float | None
    best_time: float
    best_config: dict[str, int] | None
    stopped: str

    @property
    def speedup(self) -> float | None:
        if self.default_time is None or not math.isfinite(self.best_time):
            return None
        return self.default_time / self.best_time


@dataclass
class ModelTuneResult:
    """``before`` and ``after``: the model's latency (seconds, minimum of interleaved
    runs) untuned and compiled with the records; ``curve``: the scheduler's estimate of
    the latency after each measurement (profiled seconds, each task's scaled by its
    best over its default)."""

    before: float
    after: float
    budget: int
    used: int
    tasks: list[TaskReport] = field(default_factory=list)
    curve: list[float] = field(default_factory=list)
    profiled: float = 0.0  # the untuned model's profiled seconds (sum over its steps)
    outputs_match: bool = True
    mismatch: str = ""
    records: str = ""

    @property
    def speedup(self) -> float:
        return self.before / self.after if self.after > 0 else math.nan


@dataclass(eq=False)
class BudgetTask:
    """One search the budget is shared among: its weight (seconds in the model) and its
    Sampler (or anything with ``step``, ``trials``, ``curve`` and ``stopped``)."""

    name: str
    seconds: float
    search: Any

    @property
    def default_time(self) -> float | None:
        t = self.search.trials[0] if self.search.trials else None
        return t.time if t is not None and t.ok else None

    def relative(self, n: int | None = None) -> float:
        """Best time over the default's after the first ``n`` trials (1 untried)."""
        default = self.default_time
        curve = self.search.curve if n is None else self.search.curve[:n]
        if default is None or not curve or not math.isfinite(curve[-1]):
            return 1.0
        return min(1.0, curve[-1] / default)

    def gain(self) -> float:
        """Estimated model seconds saved per further trial (module doc, step 3)."""
        t = len(self.search.trials)
        if t == 0:
            return math.inf
        now = self.relative()
        back = (self.relative(max(1, t - WINDOW)) - now) / min(WINDOW, max(1, t - 1))
        # the chance that the next trial finds a new best, by Laplace's rule from how
        # often one did so far, times the time there is to win
        curve = self.search.curve
        gains = sum(b < a for a, b in zip(curve, curve[1:]))
        forward = now * (gains + 1) / (t + 2)
        return self.seconds * (BACKWARD_WEIGHT * back + (1 - BACKWARD_WEIGHT) * forward)


def share_budget(tasks: Sequence[BudgetTask], budget: int, rest: float = 0.0,
                 first_batch: int = FIRST_BATCH, batch: int = BATCH) -> tuple[int, list[float]]:
    """Advance the tasks' searches batch by batch until ``budget`` measurements are
    spent or every search stopped (module doc, step 3): a task never measured first
    (the heaviest first), then the one of largest gain. Returns the measurements used
    and the estimated model seconds after each (``rest``: the seconds of what is not
    tuned)."""
    used, curve = 0, []
    while used < budget:
        live = [t for t in tasks if not t.search.stopped]
        if not live:
            break
        task = max(live, key=lambda t: (t.gain(), t.seconds))
        size = first_batch if not task.search.trials else batch
        n = task.search.step(min(size, budget - used))
        if n == 0 and not task.search.stopped:
            task.search.stopped = "exhausted"  # a search that cannot move (never loops)
        used += n
        estimate = rest + sum(t.seconds * t.relative() for t in tasks)
        curve.extend([estimate] * n)
    return used, curve


def _shapes(session: Any, shapes: Mapping[str, Sequence[int]] | None) -> dict[str, tuple]:
    declared = {a.name: a.shape for a in session.get_inputs()}
    shapes = dict(shapes or {})
    out = {}
    for name, dims in declared.items():
        given = shapes.pop(name, None)
        if given is None:
            if not all(isinstance(d, int) for d in dims):
                raise ArgumentError(f"tune: input '{name}' has symbolic dimensions {dims}",
                                    hint=f"give its shape, e.g. shapes={{'{name}': "
                                         "(1, 3, 224, 224)}")
            given = dims
        out[name] = tuple(int(d) for d in given)
    if shapes:
        raise ArgumentError(f"tune: {', '.join(sorted(shapes))} is not an input of the "
                            "model", hint="inputs: " + ", ".join(declared))
    return out


def _kernel_tasks(session: Any, shapes: Mapping[str, tuple], feeds: Mapping[str, np.ndarray],
                  min_share: float, repeat: int) -> tuple[list[tuple], float]:
    """(kernel, name, nodes, runs, seconds) per distinct group kernel with at least
    ``min_share`` of the profiled time, largest first; and the profiled total."""
    compiled = session.compiled(shapes)
    by_step = {name: seconds for name, _, seconds in session.profile(feeds, repeat=repeat)}
    nodes = {step.name: ", ".join(f"{n.name} ({n.op_type})" for n in step.nodes)
             for step in compiled.plan.groups}
    total = sum(by_step.values())
    groups: dict[int, list] = {}
    for name, kernel in compiled.kernels.items():
        entry = groups.setdefault(id(kernel), [kernel, name, nodes.get(name, ""), 0, 0.0])
        entry[3] += 1
        entry[4] += by_step.get(name, 0.0)
    tasks = [tuple(g) for g in groups.values() if total > 0 and g[4] >= min_share * total]
    return sorted(tasks, key=lambda g: -g[4]), total


def _run_both(before: Any, after: Any, feeds: Mapping[str, np.ndarray], rounds: int
              ) -> tuple[float, float]:
    """Minimum seconds of each session's run over interleaved rounds."""
    from polycomp.threads import own_running_tasks

    def settle() -> None:  # the other model's spinning threads asleep first
        end = time.perf_counter() + 0.2
        while own_running_tasks() > 1 and time.perf_counter() < end:
            time.sleep(0.001)

    best = [math.inf, math.inf]
    sessions = (before, after)
    for r in range(rounds):
        for i in ((0, 1) if r % 2 == 0 else (1, 0)):
            settle()
            sessions[i].run(None, feeds)
            start = time.perf_counter()
            sessions[i].run(None, feeds)
            best[i] = min(best[i], time.perf_counter() - start)
    return best[0], best[1]


def tune_model(model: object, shapes: Mapping[str, Sequence[int]] | None = None,
               budget: int = 200, executor: Any = None, records: object = None, *,
               seed: int = 0, min_share: float = MIN_SHARE, timeout: float = 120.0,
               time_budget: float = TIME_BUDGET, rounds: int = ROUNDS,
               progress: Callable[[str, Outcome], None] | None = None,
               log: Callable[[str], None] | None = None,
               **options: object) -> ModelTuneResult:
    """Tune an ONNX model's kernels within ``budget`` measurements in all (module doc).

    model       a path, the model's bytes or a ModelProto
    shapes      input name -> shape (needed for symbolic dimensions)
    executor    any concurrent.futures.Executor for the measurements (default: one
                local worker)
    records     the records' path (default: Options.records, else the cache folder's)
    progress    called with (kernel name, Outcome) after each measurement
    log         called with a line of text at each stage
    options     Options for every kernel (as InferenceSession takes them)
    """
    from polycomp.onnx import InferenceSession
    from polycomp.options import Options

    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
        raise ArgumentError(f"tune: the budget must be a positive integer, not {budget!r}",
                            hint="e.g. budget=200")
    say = log or (lambda line: None)
    for name in ("tuning", "band_config"):
        if name in options:
            raise ArgumentError(f"tune: option '{name}' is the tuner's own",
                                hint=f"leave {name}= out")
    base = Options.create(**options)
    path = records if records is not None else base.records
    db = Records(path) if path is not None else Records()
    options = {**options, "records": str(db.path)}

    say("compiling the model untuned")
    before = InferenceSession(model, **options, tuning="none")
    shapes = _shapes(before, shapes)
    from polycomp.onnx.zoo import random_inputs
    feeds = random_inputs(before._model.model, seed, shapes=shapes)
    found, profiled = _kernel_tasks(before, shapes, feeds, min_share, repeat=5)
    say(f"profiled: {profiled * 1e3:.2f} ms in {len(found)} kernels of at least "
        f"{min_share:.0%} each")

    tasks: list[BudgetTask] = []
    prepared_of: dict[str, tuple[Prepared, Measurer, str, int]] = {}
    for kernel, name, nodes, runs, seconds in found:
        try:
            prepared = prepare(kernel, {}, seed=seed, time_budget=time_budget)
        except PolycompError as exc:
            say(f"  {name}: not tuned ({exc.message})")
            continue
        if prepared.space.size() < 2:
            continue
        measurer = Measurer(
            measure_trial, (prepared.spec,), executor=executor, timeout=timeout,
            reference=prepared.reference, rtol=prepared.rtol, atol=prepared.atol,
            on_outcome=(lambda o, n=name: progress(n, o)) if progress else None)
        search = Sampler(prepared.space, prepared.featurize, measurer, budget=budget,
                         batch_size=BATCH, seed=seed, seeds=_seeds(db, prepared),
                         first_batch=FIRST_BATCH)
        tasks.append(BudgetTask(name, seconds, search))
        prepared_of[name] = (prepared, measurer, nodes, runs)
    say(f"tuning {len(tasks)} kernels with {budget} measurements")

    results: list[tuple[BudgetTask, TuneResult]] = []
    try:
        used, curve = share_budget(tasks, budget, profiled - sum(t.seconds for t in tasks))
        say("re-measuring each kernel's best candidates with its default")
        for task in tasks:
            if not task.search.trials:
                continue
            prepared, measurer = prepared_of[task.name][:2]
            result = task.search.result()
            if result.best_config is not None:
                result = confirm_result(result, measurer, prepared.spec, prepared.space)
            program = prepared.spec.definition.program
            db.add_result(record_signature(program, prepared.options), kernel_sizes(program),
                          result)
            results.append((task, result))
    finally:
        for _, measurer, _, _ in prepared_of.values():
            measurer.close()

    say("compiling the model with the records")
    after = InferenceSession(model, **options, tuning="records")
    after.compiled(shapes)
    want, got = before.run(None, feeds), after.run(None, feeds)
    mismatch = _compare(want, got)
    t_before, t_after = _run_both(before, after, feeds, rounds)
    reports = [TaskReport(t.name, prepared_of[t.name][2], prepared_of[t.name][3], t.seconds,
                          len(t.search.trials), r.default_time, r.best_time,
                          dict(r.best_config) if r.best_config else None,
                          t.search.stopped or "budget")
               for t, r in results]
    return ModelTuneResult(t_before, t_after, budget, used, reports, curve, profiled,
                           not mismatch, mismatch, str(db.path))


def _seeds(db: Records, prepared: Prepared) -> list[dict[str, int]]:
    """The records' best at these sizes and nearest at others, to start from."""
    program = prepared.spec.definition.program
    signature = record_signature(program, prepared.options)
    sizes = kernel_sizes(program)
    return [r.config for r in (db.best(signature, sizes), db.nearest(signature, sizes))
            if r is not None]


def _compare(want: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> str:
    """Why the tuned model's outputs are not the untuned one's (reductions reorder with
    the tiles: float32 within 1e-3 of the largest magnitude), or ''."""
    for k, (w, g) in enumerate(zip(want, got)):
        w, g = np.asarray(w), np.asarray(g)
        if w.shape != g.shape:
            return f"output {k}: shape {g.shape}, untuned {w.shape}"
        if w.dtype.kind in "fc":
            scale = float(np.max(np.abs(w))) if w.size else 0.0
            if not np.allclose(g, w, rtol=1e-3, atol=1e-3 * max(scale, 1e-30)):
                return f"output {k}: differs by up to {float(np.max(np.abs(g - w))):.3g}"
        elif not np.array_equal(w, g):
            return f"output {k}: differs"
    return ""


__all__ = ["BudgetTask", "ModelTuneResult", "TaskReport", "share_budget", "tune_model"]
