"""The examples/ scripts run end to end at small sizes and check themselves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.needs_cc
def test_jacobi_2d_walkthrough(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "jacobi_2d.py"), "--n", "40", "--steps", "4",
         "--threads", "1"],
        capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for step in ("1. dependences", "2. Pluto's hyperplanes", "3. after tiling",
                 "4. the generated C", "5. checked", "6. your own"):
        assert step in out
    assert "outputs match scheduler='none': True" in out
    assert "legal, outputs match: True" in out
    assert "is refused" in out and "dependence" in out
