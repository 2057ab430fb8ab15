"""The competing load of the busy-machine benchmark (benchmarks/busy.py): it really
spins on the core it names while the block runs, and is gone after it, errors too.

Nothing here is timed: a spinner is known to spin by the CPU time the kernel has counted
for it, and known to end by itself by waiting for its exit status."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import busy  # noqa: E402

HAS_PROC = Path("/proc/self/stat").exists()
# CPU seconds a spinner has burnt once it is in its loop: Python's start-up alone takes a
# few hundredths, a process that sleeps never gets there
SPINNING_CPU_S = 0.2


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_until_spinning(pid: int, polls: int = 6000) -> None:
    """Return once ``pid`` has burnt SPINNING_CPU_S of CPU; fail after ``polls`` looks
    (a minute: a guard against a spinner that sleeps, not a measurement)."""
    for _ in range(polls):
        if _cpu_seconds(pid) >= SPINNING_CPU_S:
            return
        time.sleep(0.01)
    pytest.fail(f"process {pid} burnt {_cpu_seconds(pid):.2f} s of CPU: it does not spin")


@pytest.mark.skipif(not HAS_PROC, reason="needs Linux /proc")
def test_competing_load_spins_on_its_core_and_ends():
    core = busy.default_core()
    with busy.competing_load(core) as pids:
        assert len(pids) == 1
        wait_until_spinning(pids[0])  # it burns CPU, it does not sleep
        assert os.sched_getaffinity(pids[0]) == {core}
        assert _alive(pids[0])
    assert not _alive(pids[0])


def test_competing_load_is_killed_on_error():
    with pytest.raises(RuntimeError):
        with busy.competing_load() as pids:
            raise RuntimeError("benchmark failed")
    assert not _alive(pids[0])


# Runs a benchmark that dies without cleanup, as a child of a process that adopts its
# orphans (PR_SET_CHILD_SUBREAPER, Linux): the orphaned spinner becomes that process's
# child, so it can wait for the spinner's end and read its exit status.
REAPER = """
import ctypes, os, subprocess, sys
assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
out = subprocess.run([sys.executable, "-c", sys.argv[1], sys.argv[2]], capture_output=True,
                     text=True, check=True).stdout
_, status = os.waitpid(int(out.split()[0]), 0)
print(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux's prctl")
def test_spinner_ends_when_the_benchmark_is_killed():
    """A benchmark killed without cleanup (SIGKILL) must not leave a spinner behind: the
    spinner sees its parent gone and exits by itself (status 0, not a signal)."""
    script = ("import os, sys; sys.path.insert(0, sys.argv[1]); from benchmarks import busy\n"
              "with busy.competing_load() as pids:\n"
              "    print(pids[0], flush=True); os._exit(0)\n")
    # the timeout only keeps a spinner that never ends from hanging the suite
    done = subprocess.run([sys.executable, "-c", REAPER, script, str(ROOT)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["0"]
