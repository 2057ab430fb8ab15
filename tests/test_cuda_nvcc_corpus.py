"""Issue 14's checks without a GPU: the code the ``cuda`` target generates for every
program of the TC corpus and every deep-learning operator of tests/test_cuda_codegen.py
(at the sizes their tests run them) goes through nvcc to a cubin for sm_80 and sm_90
with ``-Xptxas -v``; each kernel's registers and static shared memory are parsed
(polycomp.cuda.ptxas_resources) and must let its block launch (check_limits: at most
1024 threads, the registers of the whole block within the file, shared memory within
48 KiB). ``-ptx`` alone would miss a shared-memory overflow; the cubin does not.

The nvcc runs (two per program, a few seconds each) are shared by the tests through a
module fixture and run two at a time."""

from __future__ import annotations

import concurrent.futures as cf
import re

import numpy as np
import pytest

import polycomp
import polycomp.cuda
from polycomp.arguments import bind
from test_cuda_codegen import OPERATORS
from test_tc_corpus import CORPUS

pytestmark = pytest.mark.needs_nvcc
ARCHS = ("sm_80", "sm_90")
PROGRAMS = {**{f"corpus/{k}": v[:2] for k, v in CORPUS.items()},
            **{f"operator/{k}": v[:2] for k, v in OPERATORS.items()}}


def _cuda_source(source: str, make_inputs) -> tuple[str, int]:
    """The .cu of the program at its test's sizes, and its threads per block."""
    kernel = polycomp.compile(source, target="cuda")
    args = make_inputs(np.random.default_rng(0))
    sizes = bind(kernel.definition.name, kernel.interface, args).sizes
    kernel.specialize(sizes, build=False)
    text = kernel.source
    blocks = {tuple(int(v) for v in m) for m in
              re.findall(r"dim3\(\d+, \d+, \d+\), dim3\((\d+), (\d+), (\d+)\)", text)}
    assert blocks, "no launch in the host entry"
    return text, max(x * y * z for x, y, z in blocks)


@pytest.fixture(scope="module")
def compiled():
    if polycomp.cuda.nvcc_path() is None:
        pytest.skip("nvcc is not on the PATH")
    sources = {name: _cuda_source(*PROGRAMS[name]) for name in PROGRAMS}
    with cf.ThreadPoolExecutor(2) as pool:
        futures = {(name, arch): pool.submit(polycomp.cuda.ptxas_resources, text, arch)
                   for name, (text, _) in sources.items() for arch in ARCHS}
        return {key: (f.result(), sources[key[0]]) for key, f in futures.items()}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_cuda_code_builds_for_the_gpu_and_fits_its_limits(compiled, name, arch):
    resources, (text, threads) = compiled[(name, arch)]
    # one ptxas report per __global__ kernel of the source
    assert len(resources) == len(re.findall(r"__global__ void", text)) >= 1
    for r in resources:
        assert r.arch == arch and 0 < r.registers <= 255
        assert r.shared_bytes <= 48 * 1024
    polycomp.cuda.check_limits(resources, threads_per_block=threads)
