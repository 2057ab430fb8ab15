"""``polycomp demo``, the README's first command, run as users run it: a separate
process, a fresh compile cache, full sizes (about 5 s). It must exit 0, report every
bundled example checked against numpy under every scheduler, and say that all matched.
Timings are printed too; nothing here reads them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from polycomp.demo import EXAMPLE_LIST

pytestmark = pytest.mark.needs_cc

SCHEDULERS = ("none", "isl", "pluto")  # run_demo's default: what `polycomp demo` runs


def test_demo_checks_every_example_against_numpy(tmp_path):
    env = dict(os.environ, POLYCOMP_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("OMP_DYNAMIC", None)  # conftest's setting for the tests, not the user's
    # the timeout only keeps a hung demo from hanging the suite
    done = subprocess.run([sys.executable, "-m", "polycomp.cli", "demo"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stdout.splitlines()
    assert "each example against numpy" in lines[0] and "full sizes" in lines[0], lines[0]
    rule = next(k for k, line in enumerate(lines) if line and set(line) == {"-"})
    assert lines[rule - 1].split()[:3] == ["example", "scheduler", "check"], lines[rule - 1]
    rows = []
    for line in lines[rule + 1:]:
        if not line.strip():
            break
        rows.append(line.split()[:3])
    want = [[e.file.removesuffix(".tc"), s] for e in EXAMPLE_LIST for s in SCHEDULERS]
    assert [r[:2] for r in rows] == want, rows
    assert all(r[2] == "ok" for r in rows), done.stdout
    assert "all examples match numpy" in lines, done.stdout
    assert "FAILED" not in done.stdout and "WRONG" not in done.stdout
