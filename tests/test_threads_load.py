"""The load-adaptive thread count (polycomp/threads.py): a kernel with parallel code uses
no more threads than the cores other processes leave free, restores the requested count
after the call, gives the same results either way, and keeps the exact count when
dynamic adjustment is off (OMP_DYNAMIC=false, ``set_dynamic(False)``)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import polycomp
from polycomp import threads
from polycomp.errors import OptionError

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import busy  # noqa: E402

HAS_PROC = Path("/proc/loadavg").exists() and Path("/proc/self/task").exists()

SCALE = """
void scale(int n, int m, double A[n][m], double B[n][m]) {
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++)
      B[i][j] = 2.0 * A[i][j] + A[i][m - 1 - j];
}
"""


@pytest.fixture
def dynamic():
    """Dynamic adjustment on for one test (the suite runs with it off: conftest.py)."""
    before_flag, before_count = threads.get_dynamic(), threads.get_max_threads()
    threads.set_dynamic(True)
    threads.forget_load()
    yield
    threads.forget_load()
    threads.set_dynamic(before_flag)
    polycomp.set_num_threads(before_count)


@pytest.mark.parametrize("requested, cpus, running, own, expected", [
    (2, 2, 1, 1, 2),    # only the caller runs
    (2, 2, 2, 2, 2),    # the caller and its own spinning worker
    (2, 2, 2, 1, 1),    # one other process on 2 cores
    (2, 2, 5, 1, 1),    # more load than cores: never below 1
    (8, 16, 9, 1, 8),   # 8 others on 16 cores leave 8 free
    (8, 16, 13, 1, 4),
    (4, 2, 1, 1, 4),    # an idle machine keeps an oversubscribed request
    (1, 2, 9, 1, 1),
])
def test_thread_count_follows_the_free_cores(dynamic, requested, cpus, running, own, expected):
    assert threads.threads_for_call(requested, cpus=cpus, running=running, own=own) == expected


def test_no_adjustment_when_turned_off(dynamic):
    threads.set_dynamic(False)
    assert threads.threads_for_call(4, cpus=2, running=30, own=1) == 4
    with pytest.raises(OptionError):
        threads.set_dynamic("yes")  # type: ignore[arg-type]


class _RecordingGomp:
    """libgomp with its omp_set_num_threads calls recorded."""

    def __init__(self, real):
        self.real, self.set_calls = real, []

    def omp_get_max_threads(self):
        return self.real.omp_get_max_threads()

    def omp_set_num_threads(self, n):
        self.set_calls.append(n.value)
        self.real.omp_set_num_threads(n)


@pytest.mark.needs_cc
def test_busy_machine_runs_the_parallel_kernel_on_one_thread_and_restores(dynamic, monkeypatch):
    kernel = polycomp.compile_loops(SCALE, sizes={"n": 64, "m": 48}, parallel_min_work=0)
    assert "#pragma omp" in kernel.c_source
    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 48))
    want = 2.0 * a + a[:, ::-1]
    polycomp.set_num_threads(3)
    gomp = _RecordingGomp(threads._libgomp())
    monkeypatch.setattr(threads, "_libgomp", lambda: gomp)
    monkeypatch.setattr(threads, "running_tasks", lambda: 50)  # a very busy machine
    b = np.zeros_like(a)
    kernel(a.shape[0], a.shape[1], a, b)
    np.testing.assert_array_equal(b, want)
    assert gomp.set_calls == [1, 3]  # 1 thread for the call, then the request again
    assert threads.get_max_threads() == 3
    monkeypatch.setattr(threads, "running_tasks", lambda: 1)  # idle again
    threads.forget_load()  # (a reading serves for LOAD_CHECK_S)
    b = np.zeros_like(a)
    kernel(a.shape[0], a.shape[1], a, b)
    np.testing.assert_array_equal(b, want)
    assert gomp.set_calls == [1, 3]  # nothing to change


@pytest.mark.needs_cc
def test_back_to_back_calls_read_the_load_once(dynamic, monkeypatch):
    kernel = polycomp.compile_loops(SCALE, sizes={"n": 64, "m": 48}, parallel_min_work=0)
    readings = []
    monkeypatch.setattr(threads, "running_tasks", lambda: readings.append(1) or 1)
    monkeypatch.setattr(threads, "LOAD_CHECK_S", 60.0)
    polycomp.set_num_threads(2)
    a = np.ones((64, 48))
    for _ in range(5):
        kernel(a.shape[0], a.shape[1], a, np.zeros_like(a))
    assert len(readings) == 1
    threads.forget_load()
    kernel(a.shape[0], a.shape[1], a, np.zeros_like(a))
    assert len(readings) == 2


@pytest.mark.needs_cc
def test_serial_kernels_do_not_look_at_the_load(dynamic, monkeypatch):
    kernel = polycomp.compile_loops(SCALE, sizes={"n": 4, "m": 4}, parallel=False)
    assert "#pragma omp" not in kernel.c_source

    def fail():
        raise AssertionError("a serial kernel read the load")

    monkeypatch.setattr(threads, "running_tasks", fail)
    a = np.arange(16.0).reshape(4, 4)
    b = np.zeros_like(a)
    kernel(a.shape[0], a.shape[1], a, b)
    np.testing.assert_array_equal(b, 2.0 * a + a[:, ::-1])


def _wait_until_spinning(pid: int, cpu_s: float = 0.2, polls: int = 6000) -> None:
    """Return once ``pid`` has burnt ``cpu_s`` of CPU (Python's start-up is a few
    hundredths: it is in its loop, runnable from then on); fail after ``polls`` looks."""
    def cpu() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    for _ in range(polls):
        if cpu() >= cpu_s:
            return
        time.sleep(0.01)
    pytest.fail(f"the competing process {pid} does not spin ({cpu():.2f} s of CPU)")


@pytest.mark.skipif(not HAS_PROC, reason="reads Linux /proc")
def test_a_real_competing_process_is_seen(dynamic):
    """Once every spinner is in its loop it is always runnable, so the kernel's count
    of runnable tasks holds them all: one reading must see no free core."""
    cpus = os.cpu_count() or 1
    with busy.competing_load(processes=cpus) as pids:
        for pid in pids:
            _wait_until_spinning(pid)
        assert threads.running_tasks() >= cpus + 1  # the spinners and this process
        assert threads.threads_for_call(cpus + 1) == 1


@pytest.mark.skipif(not HAS_PROC, reason="reads Linux /proc")
def test_own_running_threads_are_not_counted_as_load():
    assert threads.own_running_tasks() >= 1  # the caller itself is running
    assert threads.running_tasks() >= 1
