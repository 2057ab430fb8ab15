"""The GPU targets' choice between Pluto's schedule and isl's (scheduler/gpu_mapping.py,
``map_to_gpu``): Pluto skews stencils for CPU tiles, which on a GPU leaves one launch per
step of the skewed loop; PPCG's schedule (isl's, outer parallelism first) launches each
statement once per time step. The cheaper mapping by ``mapping_cost`` is taken, and the
result still matches the unscheduled program."""

from __future__ import annotations

import re

import numpy as np
import pytest

import polycomp
from polycomp.scheduler import gpu_mapping as G
from polycomp.scheduler import tree as T

JACOBI_2D = """void jacobi(int tsteps, int n, double A[n][n], double B[n][n]) {
  for (int t = 0; t < tsteps; t++) {
    for (int i = 1; i < n - 1; i++)
      for (int j = 1; j < n - 1; j++)
        B[i][j] = 0.2 * (A[i][j] + A[i][j-1] + A[i][1+j] + A[1+i][j] + A[i-1][j]);
    for (int i = 1; i < n - 1; i++)
      for (int j = 1; j < n - 1; j++)
        A[i][j] = 0.2 * (B[i][j] + B[i][j-1] + B[i][1+j] + B[1+i][j] + B[i-1][j]);
  }
}"""
SIZES = {"tsteps": 6, "n": 30}


def host_part(source: str) -> str:
    return source[source.index("static int polycomp_"):]


def kernel_marks(schedule) -> int:
    return sum(1 for n in T.nodes(schedule) if T.is_mark(n, T.MARK_KERNEL))


def test_a_skewed_stencil_launches_each_statement_once_per_time_step():
    kernel = polycomp.compile_loops(JACOBI_2D, target="cuda", sizes=SIZES)
    host = host_part(kernel.source)
    # one host loop (t) and two launches in it, each a 2-D grid of 2-D blocks
    assert re.findall(r"for \(long (c\d+) = ", host) == ["c0"]
    assert host.count("POLYCOMP_LAUNCH(") == 2
    assert kernel_marks(kernel.schedule) == 2
    assert G.mapping_cost(kernel.schedule) == 2 * SIZES["tsteps"] * G.LAUNCH_MICROSECONDS


def test_pluto_s_mapping_stays_where_it_launches_once():
    matmul = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m,n) +=! A(m,k) * B(k,n) }"
    kernel = polycomp.compile(matmul, target="cuda")
    kernel.specialize({"M": 64, "N": 64, "K": 64})
    schedule = kernel.schedule
    assert G.mapping_cost(schedule) == G.LAUNCH_MICROSECONDS * G.count_kernels(schedule)
    # pluto's tree: the same as when the choice is not offered
    assert "scheduler=pluto" in kernel.source.splitlines()[0]


def test_the_choice_is_the_cheaper_mapping(monkeypatch):
    chosen = polycomp.compile_loops(JACOBI_2D, target="cuda", sizes=SIZES)
    margin = G.CHOICE_MARGIN
    monkeypatch.setattr(G, "CHOICE_MARGIN", 0.0)  # never take the alternative
    plain = polycomp.compile_loops(JACOBI_2D, target="cuda", sizes=SIZES)
    assert G.mapping_cost(chosen.schedule) < margin * G.mapping_cost(plain.schedule)
    # pluto's skewed tree puts the skewed loop on the host too
    assert len(re.findall(r"for \(long c\d+ = ", host_part(plain.source))) == 2


def test_an_explicit_scheduler_is_kept():
    kernel = polycomp.compile_loops(JACOBI_2D, target="cuda", scheduler="none", sizes=SIZES)
    host = host_part(kernel.source)
    assert "scheduler=none" in kernel.source.splitlines()[0]
    assert re.findall(r"for \(long (c\d+) = ", host) == ["c0"]


@pytest.mark.parametrize("size", [(4, 12), (6, 30)])
def test_the_chosen_mapping_computes_what_the_program_does(size):
    tsteps, n = size
    rng = np.random.default_rng(n)
    a0, b0 = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    results = []
    for options in ({"target": "cuda-emulated"}, {"scheduler": "none"}):
        kernel = polycomp.compile_loops(JACOBI_2D, **options)
        a, b = a0.copy(), b0.copy()
        kernel(tsteps, n, a, b)
        results.append((a, b))
        if options.get("target"):  # the call ran the chosen mapping: t alone on the host
            assert re.findall(r"for \(long (c\d+) = ", host_part(kernel.source)) == ["c0"]
    (a1, b1), (a2, b2) = results
    assert np.array_equal(a1, a2) and np.array_equal(b1, b2)


def test_the_tuning_space_has_the_bands_of_the_tree_taken():
    from polycomp.tuning.api import space_of

    kernel = polycomp.compile_loops(JACOBI_2D, target="cuda-emulated", sizes=SIZES)
    space, infos = space_of(kernel, sizes=SIZES)
    # the two kernels of isl's tree, not also the one of pluto's skewed tree
    assert len(infos) == kernel_marks(kernel.schedule) == 2
    default = polycomp.compile_loops(JACOBI_2D, target="cuda-emulated", sizes=SIZES,
                                     band_config=space.default)
    assert default.source.split("\n", 1)[1] == kernel.source.split("\n", 1)[1]
