"""Parallel code that does not lose to serial code: small kernels and loops too small
for a parallel region stay serial (the outermost loop too), and libgomp's spin count is
polycomp's (polycomp/threads.py) unless the user set one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import polycomp
from polycomp import threads
from polycomp.scheduler import tree as T

COPY_THEN_SOLVE = """
void k(int n, double L[n][n], double x[n], double b[n]) {
  for (int i = 0; i < n; i++) x[i] = b[i];
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      x[i] += L[i][j] * b[j];
}
"""


def _parallel_marks(kernel, sizes):
    variant = kernel.specialize(sizes)
    return sum(1 for n in T.subtree(variant.compiled.schedule.get_root())
               if T.is_mark(n, T.MARK_PARALLEL))


@pytest.mark.parametrize("n, regions", [(64, 0), (2000, 1)])
def test_outermost_loop_needs_enough_work_for_a_region(n, regions):
    # the copy has n instances: never worth a region at these sizes; the mat-vec has
    # n * n, worth one at 2000 (4e6 instances) and not at 64 (4096 < parallel_min_work)
    kernel = polycomp.compile_loops(COPY_THEN_SOLVE)
    assert _parallel_marks(kernel, {"n": n}) == regions


def test_min_work_zero_marks_every_parallel_loop():
    kernel = polycomp.compile_loops(COPY_THEN_SOLVE, parallel_min_work=0)
    assert _parallel_marks(kernel, {"n": 64}) == 2


@pytest.mark.parametrize("environ, changed, spin", [
    ({}, True, "300000"),
    ({"OMP_WAIT_POLICY": "active"}, False, None),
    ({"GOMP_SPINCOUNT": "100000"}, False, "100000"),
])
def test_spin_count_is_set_unless_the_user_chose(environ, changed, spin):
    environ = dict(environ)
    assert threads.prefer_short_spinning(environ) is changed
    assert environ.get("GOMP_SPINCOUNT") == spin


@pytest.mark.needs_cc
def test_libgomp_is_loaded_with_polycomps_spin_count():
    # a fresh process: libgomp reads the variable once, when the first kernel loads it
    program = ("import numpy as np, polycomp\n"
               "k = polycomp.compile('def f(float(N) A) -> (B) { B(i) = A(i) * 2 }',"
               " parallel_min_work=0)\n"
               "assert (k(np.ones(4096, np.float32)) == 2).all()\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env["OMP_DISPLAY_ENV"] = "verbose"
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "GOMP_SPINCOUNT = '300000'" in done.stdout + done.stderr
