"""The competing load of the busy-machine benchmark (benchmarks/busy.py): it really
spins on the core it names while the block runs, and is gone after it, errors too."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import busy  # noqa: E402


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_competing_load_spins_on_its_core_and_ends():
    core = busy.default_core()
    with busy.competing_load(core) as pids:
        assert len(pids) == 1
        time.sleep(0.5)
        assert _cpu_seconds(pids[0]) > 0.1  # it burns CPU, it does not sleep
        assert os.sched_getaffinity(pids[0]) == {core}
    assert not _alive(pids[0])


def test_competing_load_is_killed_on_error():
    with pytest.raises(RuntimeError):
        with busy.competing_load() as pids:
            raise RuntimeError("benchmark failed")
    assert not _alive(pids[0])


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_spinner_ends_when_the_benchmark_is_killed():
    """A benchmark killed without cleanup (SIGKILL) must not leave a spinner behind."""
    import subprocess
    script = ("import os, sys; sys.path.insert(0, sys.argv[1]); from benchmarks import busy\n"
              "with busy.competing_load() as pids:\n"
              "    print(pids[0], flush=True); os._exit(0)\n")
    out = subprocess.run([sys.executable, "-c", script, str(ROOT)], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    pid = int(out.split()[0])
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)
