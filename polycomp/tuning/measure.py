"""Measurement: run configurations, each in a process of its own, through any Executor.

Place in the pipeline: the sampler's (sampler.py) ``measure_batch``. Input: a
measurement function ``fn(config, *args)`` (a top-level function: it is pickled by
reference) returning seconds, or ``(seconds, output)`` when the output is to be checked
against a reference. Output: one :class:`Outcome` per configuration, in order:

    valid    the seconds it took (the output, if checked, matched the reference)
    invalid  it raised (a configuration that does not compile, a refused schedule...)
    crash    its process died (a signal, a non-zero exit) or the executor lost it
    timeout  it ran past ``timeout`` seconds and was killed
    wrong    its output differs from the reference

A failure never stops the batch: each call runs in a child process (forked when that is
safe, else a fresh interpreter), so a segfaulting kernel or an endless loop takes only
its child down. The children run inside the executor's workers: a local
``ProcessPoolExecutor`` by default, or any ``concurrent.futures.Executor`` (dask's
``Client.get_executor()`` plugs in unchanged); the workers only forward. The default
pool has one worker: two timings on one machine at once disturb each other. A worker with an OpenMP runtime loaded (a
polycomp kernel ran in it, or in the process it was forked from) starts its children
as fresh interpreters, never as forks (see _fork_is_safe).

``time_callable`` is the timing rule for a noisy machine (as benchmarks/operators does
it): an untimed warm-up call, then calls until a time budget is spent (at least a few),
and the minimum counts: noise only ever adds time.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib.util
import math
import multiprocessing
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

STATUSES = ("valid", "invalid", "crash", "timeout", "wrong")
# seconds the executor may take beyond a task's own timeout (start-up, queueing) before
# the task counts as lost
EXECUTOR_SLACK = 30.0


@dataclass(frozen=True)
class Outcome:
    """What one measurement gave. ``time`` is seconds for a valid one, else None."""

    status: str
    time: float | None = None
    detail: str = ""
    value: Any = None  # what a raw call (Measurer.call) returned

    @property
    def ok(self) -> bool:
        return self.status == "valid"


@dataclass(frozen=True)
class Task:
    """One measurement, as plain picklable data."""

    fn: Callable[..., Any]
    config: Mapping[str, int]
    args: tuple = ()
    reference: Any = None
    rtol: float = 1e-4
    atol: float = 1e-5
    timeout: float = 60.0
    isolation: str = "auto"  # "fork", "subprocess" or "auto" (fork when safe)
    sys_path: tuple[str, ...] = ()
    raw: bool = False  # fn(*args)'s value comes back as Outcome.value, unchecked


# ----------------------------------------------------------------------------- in the child

def _evaluate(task: Task) -> Outcome:
    """Run the measurement and check its output (in the child process)."""
    try:
        if task.raw:
            return Outcome("valid", None, "", task.fn(*task.args))
        result = task.fn(dict(task.config), *task.args)
    except BaseException as exc:  # noqa: BLE001 - every failure is an outcome
        return Outcome("invalid", None, _summary(exc))
    seconds, output = (result if isinstance(result, tuple) else (result, None))
    try:
        seconds = float(seconds)
    except (TypeError, ValueError):
        return Outcome("invalid", None, f"the measurement returned {seconds!r}, not seconds")
    if not math.isfinite(seconds) or seconds < 0:
        return Outcome("invalid", None, f"the measurement returned {seconds} seconds")
    if task.reference is not None:
        problem = mismatch(output, task.reference, task.rtol, task.atol)
        if problem:
            return Outcome("wrong", None, problem)
    return Outcome("valid", seconds, "")


def mismatch(got: Any, want: Any, rtol: float, atol: float) -> str | None:
    """Why ``got`` is not ``want`` (arrays, or tuples/lists of them), or None."""
    if isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            return f"expected {len(want)} outputs, got {type(got).__name__}"
        for k, (g, w) in enumerate(zip(got, want)):
            problem = mismatch(g, w, rtol, atol)
            if problem:
                return f"output {k}: {problem}"
        return None
    if got is None:
        return "no output to check against the reference"
    g, w = np.asarray(got), np.asarray(want)
    if g.shape != w.shape:
        return f"shape {g.shape} instead of {w.shape}"
    if not np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
        err = np.abs(g.astype(float) - w.astype(float))
        return f"max abs error {np.nanmax(err):.3g} (rtol {rtol}, atol {atol})"
    return None


def _summary(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    return "".join(lines).strip()[-2000:]


def _fork_child(task: Task, conn) -> None:
    # the parent's fatal-signal dumps (pytest turns faulthandler on) would print into
    # the parent's terminal: a crash is reported as an outcome instead
    import faulthandler
    faulthandler.disable()
    try:
        conn.send(_evaluate(task))
    finally:
        conn.close()
        # skip atexit handlers and buffered I/O inherited from the parent: a forked
        # child of a pytest or dask process must not flush their state
        os._exit(0)


# ----------------------------------------------------------------------------- in a worker

def run_isolated(task: Task) -> Outcome:
    """Run one task in a child process under its timeout (what executor workers run)."""
    mode = task.isolation
    if mode == "auto":
        mode = "fork" if _fork_is_safe() else "subprocess"
    if mode == "fork":
        return _run_forked(task)
    if mode == "subprocess":
        return _run_subprocess(task)
    raise ValueError(f"isolation must be 'auto', 'fork' or 'subprocess', not {mode!r}")


def _fork_is_safe() -> bool:
    # fork copies one thread: with others running (dask's worker threads, a thread pool)
    # the child may inherit a held lock. Daemonic processes may not start children.
    # A process with an OpenMP runtime loaded may hold (or have inherited from the
    # process it was forked from) a thread pool whose threads a fork does not copy: a
    # child's next parallel region then waits for them forever (a polycomp kernel called
    # in a forked child after one ran in the parent hung 2 times in 10). A CUDA context
    # does not survive a fork either: the child's first CUDA call fails.
    return (hasattr(os, "fork") and threading.active_count() == 1
            and not multiprocessing.current_process().daemon and not _openmp_loaded())


# runtimes whose threads or device contexts a forked child cannot use
OPENMP_RUNTIMES = ("libgomp", "libomp", "libiomp", "libcuda.so", "libcudart")


def _openmp_loaded() -> bool:
    """Whether an OpenMP or CUDA runtime is mapped into this process."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            return any(name in line for line in f for name in OPENMP_RUNTIMES)
    except OSError:
        return False  # no procfs: nothing to tell by



def _run_forked(task: Task) -> Outcome:
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_fork_child, args=(task, send))
    child.start()
    send.close()
    try:
        # poll returns on data or on the child's end (EOF), or at the timeout
        if not receive.poll(task.timeout):
            return Outcome("timeout", None, f"no result within {task.timeout:g} s")
        try:
            return receive.recv()
        except (EOFError, OSError):
            child.join(5)
            return Outcome("crash", None, _exit_text(child.exitcode))
    finally:
        receive.close()
        if child.is_alive():
            child.kill()
        child.join(5)


def _run_subprocess(task: Task) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="polycomp-measure-") as tmp:
        task_path, result_path = os.path.join(tmp, "task.pkl"), os.path.join(tmp, "out.pkl")
        with open(task_path, "wb") as f:
            pickle.dump(task, f)
        argv = [sys.executable, "-c",
                "import sys; from polycomp.tuning.measure import _subprocess_main; "
                "_subprocess_main(sys.argv[1], sys.argv[2])", task_path, result_path]
        env = dict(os.environ)
        # the task's path, else this process's: the function must import there as here
        paths = task.sys_path or tuple(p for p in sys.path if p)
        env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
        try:
            done = subprocess.run(argv, capture_output=True, timeout=task.timeout, env=env,
                                  check=False)
        except subprocess.TimeoutExpired:
            return Outcome("timeout", None, f"no result within {task.timeout:g} s")
        try:
            with open(result_path, "rb") as f:
                return pickle.load(f)
        except (OSError, EOFError, pickle.UnpicklingError):
            tail = done.stderr.decode(errors="replace").strip()[-1000:]
            detail = _exit_text(done.returncode) + (f": {tail}" if tail else "")
            return Outcome("crash", None, detail)


def _subprocess_main(task_path: str, result_path: str) -> None:
    try:
        with open(task_path, "rb") as f:
            task = pickle.load(f)
    except Exception as exc:  # noqa: BLE001 - e.g. the function's module is not importable
        outcome = Outcome("invalid", None, f"cannot load the task: {_summary(exc)}")
    else:
        outcome = _evaluate(task)
    with open(result_path + ".tmp", "wb") as f:
        pickle.dump(outcome, f)
    os.replace(result_path + ".tmp", result_path)  # a crash while writing leaves nothing


def _exit_text(code: int | None) -> str:
    if code is None:
        return "the measurement process did not end"
    if code < 0:
        import signal
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


# ----------------------------------------------------------------------------- the batch

class Measurer:
    """``measure_batch`` for the sampler: configurations in, Outcomes out, in order.

    fn         top-level function ``fn(config, *args)`` -> seconds or (seconds, output)
    args       plain data passed after the configuration (e.g. a kernel's source)
    executor   any concurrent.futures.Executor; default a one-worker process pool,
               made on first use and shut down by ``close()``
    timeout    seconds per measurement (the child is killed past it)
    reference  the right output, checked in the child (rtol/atol as numpy.allclose)
    isolation  "auto" (fork when the worker is single-threaded), "fork", "subprocess"
    on_outcome called with each Outcome as it comes back, in order (a progress bar)
    """

    def __init__(self, fn: Callable[..., Any], args: Sequence[Any] = (), *,
                 executor: cf.Executor | None = None, timeout: float = 60.0,
                 reference: Any = None, rtol: float = 1e-4, atol: float = 1e-5,
                 isolation: str = "auto",
                 on_outcome: Callable[[Outcome], None] | None = None):
        self.fn, self.args = fn, tuple(args)
        self.on_outcome = on_outcome
        self.timeout = timeout
        self.reference, self.rtol, self.atol = reference, rtol, atol
        self.isolation = isolation
        self._executor = executor
        self._own = executor is None

    @property
    def executor(self) -> cf.Executor:
        if self._executor is None:
            self._executor = cf.ProcessPoolExecutor(max_workers=1)
        return self._executor

    def task(self, config: Mapping[str, int]) -> Task:
        return Task(self.fn, dict(config), self.args, self.reference, self.rtol, self.atol,
                    self.timeout, self.isolation, tuple(p for p in sys.path if p))

    def __call__(self, configs: Sequence[Mapping[str, int]]) -> list[Outcome]:
        futures = [self.executor.submit(run_isolated, self.task(c)) for c in configs]
        return self._collect(futures, self.timeout, self.on_outcome)

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> Outcome:
        """``fn(*args)`` run isolated like a measurement (a child process through the
        executor): a valid Outcome whose ``value`` is what it returned, or the failure.
        For measurements that are not one configuration's (the tuner's interleaved
        re-measurement of its best candidates)."""
        timeout = self.timeout if timeout is None else timeout
        task = Task(fn, {}, tuple(args), None, self.rtol, self.atol, timeout, self.isolation,
                    tuple(p for p in sys.path if p), raw=True)
        return self._collect([self.executor.submit(run_isolated, task)], timeout, None)[0]

    def _collect(self, futures: list, timeout: float,
                 on_outcome: Callable[[Outcome], None] | None) -> list[Outcome]:
        # one deadline for the batch: the tasks may queue behind each other
        deadline = time.monotonic() + EXECUTOR_SLACK + timeout * len(futures)
        out = []
        for future in futures:
            try:
                out.append(future.result(timeout=max(0.0, deadline - time.monotonic())))
            except cf.TimeoutError:
                future.cancel()
                out.append(Outcome("timeout", None, "the executor returned no result in time"))
            except Exception as exc:  # noqa: BLE001 - a lost worker (BrokenProcessPool...)
                out.append(Outcome("crash", None, f"executor: {_summary(exc)}"))
                if isinstance(exc, cf.BrokenExecutor) and self._own:
                    self._executor = None  # a fresh pool for the next batch
            if on_outcome is not None:
                on_outcome(out[-1])
        return out

    def close(self) -> None:
        if self._own and self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ----------------------------------------------------------------------------- timing

def time_callable(call: Callable[[], Any], budget: float = 0.2, min_repeats: int = 3,
                  max_repeats: int = 10_000, warmup: int = 1,
                  clock: Callable[[], float] = time.perf_counter) -> float:
    """The minimum seconds of ``call()`` over repeated runs (module doc): ``warmup``
    untimed calls, then at least ``min_repeats`` timed ones, more until ``budget``
    seconds of calls are spent, at most ``max_repeats``. ``clock`` reads seconds (a test
    passes a scripted one)."""
    for _ in range(warmup):
        call()
    best, spent, runs = math.inf, 0.0, 0
    while runs < min_repeats or (spent < budget and runs < max_repeats):
        start = clock()
        call()
        elapsed = clock() - start
        best, spent, runs = min(best, elapsed), spent + elapsed, runs + 1
    return best


class CopiesTimedWarning(UserWarning):
    """GPU tuning times the host entry, copies to and from the device included."""


def times_copies(kernel: Any) -> bool:
    """Whether a trial of ``kernel`` times its host entry although its target has a device
    entry: no array library (CuPy, PyTorch) is installed to stage the arrays on the GPU,
    so every timed call copies its inputs there and its outputs back (device_call)."""
    from polycomp.targets import get_target  # noqa: PLC0415 - the compiler, lazily

    target = kernel.options.target
    if target == "cuda-emulated" or not hasattr(get_target(target), "load_device"):
        return False
    return not any(importlib.util.find_spec(name) for name in ("cupy", "torch"))


def device_call(kernel: Any, args: Sequence[Any]) -> Callable[[], Any] | None:
    """A call of ``kernel``'s device entry on ``args`` staged on the device once (its
    outputs and temporaries allocated there), for timing a GPU target without the host
    entry's copies and allocations; None when the target has no device entry or no
    array library can hold the arrays (cuda: CuPy, else PyTorch; cuda-emulated: numpy)."""
    from polycomp.targets import get_target  # noqa: PLC0415 - the compiler, lazily

    target = kernel.options.target
    if not hasattr(get_target(target), "load_device"):
        return None
    if target == "cuda-emulated":
        put = np.ascontiguousarray
        empty = lambda shape, dtype: np.empty(shape, dtype)  # noqa: E731
    else:
        try:
            import cupy  # noqa: PLC0415
            put, empty = cupy.asarray, lambda shape, dtype: cupy.empty(shape, dtype)  # noqa: E731
        except ImportError:
            try:
                import torch  # noqa: PLC0415
            except ImportError:
                return None
            put = lambda a: torch.from_numpy(np.ascontiguousarray(a)).cuda()  # noqa: E731
            empty = lambda shape, dtype: torch.empty(  # noqa: E731
                shape, dtype=getattr(torch, dtype), device="cuda")
    staged = [put(a) if isinstance(a, np.ndarray) else a for a in args]
    layout = kernel.device_layout(*staged)
    buffers = {name: empty(shape, dtype) for name, (shape, dtype, _) in layout.items()}
    return kernel.device_runner(
        *staged, out={n: b for n, b in buffers.items() if layout[n][2] == "out"},
        work={n: b for n, b in buffers.items() if layout[n][2] == "work"})
