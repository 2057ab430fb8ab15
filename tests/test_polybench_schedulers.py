"""Every PolyBench kernel at MINI size, under every scheduler, against gcc.

The C file compiled by gcc (benchmarks/polybench/peers.py, sequential, -O3) is the
oracle; polycomp compiles the same file with ``compile_loops`` under each scheduler
(tiling, parallel marks, SIMD and unroll-and-jam included) and must produce the same
outputs within the benchmark's tolerance (benchmarks/polybench/compare.py). heat-3d and
seidel-2d also run on their perturbed inputs: on PolyBench's own inputs they are fixed
points of their stencils, so a wrong order of updates would go unnoticed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import polycomp  # noqa: E402
from benchmarks.polybench import compare, defs, peers  # noqa: E402

pytestmark = pytest.mark.needs_cc

SCHEDULERS = ("none", "isl", "pluto")


@pytest.fixture(scope="module")
def so_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("polybench-gcc")


def _inputs(kdef: defs.KernelDef) -> list[dict]:
    inputs = [defs.make_args(kdef, "MINI")]
    perturbed = defs.make_check_args(kdef, "MINI")
    if perturbed is not None:
        inputs.append(perturbed)
    return inputs


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("name", list(defs.KERNEL_NAMES))
def test_kernel_matches_gcc(name: str, scheduler: str, so_dir: Path):
    kdef = defs.get_kernel(name)
    baseline = peers.load_c_kernel(kdef, "gcc", so_dir)
    options = {"cflags": ("-O3", "-march=native", *kdef.cflags)} if kdef.cflags else {}
    kernel = polycomp.compile_loops(kdef.c_source(), function=kdef.function,
                                    scheduler=scheduler, **options)
    inputs = _inputs(kdef)
    for args in inputs:
        expected, got = defs.copy_args(args), defs.copy_args(args)
        baseline(expected)
        kernel(*defs.call_args(kdef, got))
        problem = compare.compare_outputs(defs.outputs(kdef, got), defs.outputs(kdef, expected),
                                          kdef.rtol, kdef.atol)
        assert problem is None, f"{name} under {scheduler}: {problem}"
    # the outputs really changed (on the perturbed inputs for the fixed-point stencils):
    # a kernel that writes nothing would otherwise pass
    assert compare.compare_outputs(defs.outputs(kdef, got), defs.outputs(kdef, inputs[-1])) \
        is not None, f"{name}: the outputs equal the inputs"
