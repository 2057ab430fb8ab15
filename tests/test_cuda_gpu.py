"""``target="cuda"`` on a real GPU (issue 14, item 8): every test here is marked
``needs_gpu`` and skips with ``polycomp.cuda.available()``'s reason elsewhere (CI has no
GPU; benchmarks/gpu.py's module doc has the recipe for a session lent one).

Both entries of the generated ``.cu`` run against numpy: the copying host entry (the
normal call on numpy arrays) and the device entry (``Kernel.on_device`` on PyTorch CUDA
tensors, and CuPy arrays where CuPy is there), for the operator programs of
tests/test_cuda_codegen.py at small sizes, a program of several kernels with a
temporary, a larger matmul at the default block sizes, kernel statuses, and the
argument checks on real device arrays.
"""

from __future__ import annotations

import numpy as np
import pytest

import polycomp
from polycomp.errors import ArgumentError
from test_cuda_codegen import OPERATORS
from test_cuda_device_entry import TWO
from test_tc_corpus import CORPUS, f32

pytestmark = [pytest.mark.needs_gpu, pytest.mark.needs_nvcc]

PROGRAMS = {**OPERATORS,
            "two": (TWO, lambda r: [f32(r, 33, 17), f32(r, 17, 40), f32(r, 40, 9)],
                    lambda a, b, d: a @ b @ d)}


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    return torch


def on_device(kernel, inputs, to_device, empty):
    """Runs ``kernel.on_device`` on device copies of ``inputs``; the outputs as numpy."""
    device = [to_device(x) if isinstance(x, np.ndarray) else x for x in inputs]
    layout = kernel.device_layout(*device)
    out = {n: empty(s, d) for n, (s, d, kind) in layout.items() if kind == "out"}
    got = kernel.on_device(*device, out=out)
    assert got is next(iter(out.values()))
    return got


def test_available_says_which_gpu():
    ok, reason = polycomp.cuda.available()
    assert ok and "CUDA device" in reason


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_both_entries_match_numpy(torch, name):
    source, make, reference = PROGRAMS[name]
    inputs = make(np.random.default_rng(7))
    want = reference(*inputs)
    kernel = polycomp.compile(source, target="cuda")
    np.testing.assert_allclose(kernel(*inputs), want, rtol=1e-4, atol=1e-5)
    got = on_device(kernel, inputs, lambda x: torch.from_numpy(x).cuda(),
                    lambda s, d: torch.full(s, float("nan"), dtype=getattr(torch, d),
                                            device="cuda"))
    np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-4, atol=1e-5)


def test_cupy_arrays(torch):  # noqa: ARG001 - the GPU is up
    cupy = pytest.importorskip("cupy")
    source, make, reference = PROGRAMS["softmax"]
    inputs = make(np.random.default_rng(8))
    kernel = polycomp.compile(source, target="cuda")
    got = on_device(kernel, inputs, cupy.asarray, lambda s, d: cupy.empty(s, d))
    np.testing.assert_allclose(cupy.asnumpy(got), reference(*inputs), rtol=1e-4, atol=1e-5)


def test_a_larger_matmul_at_the_default_blocks(torch):
    rng = np.random.default_rng(9)
    a, b = f32(rng, 512, 384), f32(rng, 384, 256)
    kernel = polycomp.compile(OPERATORS["matmul"][0], target="cuda")
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-3, atol=1e-3)
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    c = torch.empty((512, 256), device="cuda")
    runner = kernel.device_runner(ta, tb, out={"C": c})
    for _ in range(3):
        c.fill_(float("nan"))
        runner()
        torch.testing.assert_close(c, ta @ tb, rtol=1e-3, atol=1e-3)


def test_statuses_come_back_from_the_gpu(torch):
    gather = polycomp.compile(CORPUS["gather"][0], target="cuda")
    x = torch.ones((7, 3), device="cuda")
    out = {"O": torch.empty(gather.device_layout(x, torch.zeros((1, 2)))["O"][0],
                            device="cuda")}
    with pytest.raises(polycomp.PolycompError, match="out of bounds"):
        gather.on_device(x, torch.tensor([[0, 7]], dtype=torch.int32, device="cuda"), out=out)
    gather.on_device(x, torch.tensor([[0, 6]], dtype=torch.int32, device="cuda"), out=out)


def test_argument_checks_on_real_device_arrays(torch):
    kernel = polycomp.compile(OPERATORS["matmul"][0], target="cuda")
    a, b = torch.ones((6, 4), device="cuda"), torch.ones((4, 5), device="cuda")
    c = torch.empty((6, 5), device="cuda")
    with pytest.raises(ArgumentError, match="copy it to the GPU"):
        kernel.on_device(np.ones((6, 4), np.float32), b, out={"C": c})
    with pytest.raises(ArgumentError, match="not C-contiguous"):
        kernel.on_device(torch.ones((4, 6), device="cuda").t(), b, out={"C": c})
    with pytest.raises(ArgumentError, match="cannot be read"):
        kernel.on_device(a.clone().requires_grad_(), b, out={"C": c})
    with pytest.raises(ArgumentError, match="dtype float32"):
        kernel.on_device(a.double(), b, out={"C": c})
    # an input and the output carved from one allocation
    storage = torch.ones(30, device="cuda")
    with pytest.raises(ArgumentError, match="share memory"):
        kernel.on_device(storage[:24].view(6, 4), b, out={"C": storage.view(6, 5)})
    kernel.on_device(a, b, out={"C": c})
    assert torch.equal(c, torch.full((6, 5), 4.0, device="cuda"))
