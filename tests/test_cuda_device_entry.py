"""The CUDA targets' device entry (codegen/cuda.py ``<entry>_device``) and
``Kernel.on_device`` / ``device_runner`` / ``device_layout`` (polycomp/runtime.py,
polycomp/device_arrays.py), without a GPU.

Under ``cuda-emulated`` numpy arrays play the device's: the device entry must match
numpy and the copying host entry (one launch function serves both) for matmul, softmax,
layernorm, a program of several kernels with a temporary (given by ``work=`` or left to
the entry to allocate), a loop kernel updating in place with a scratch array, and a
parametric kernel; kernel statuses come back as the normal call's errors. Every bad
argument is an ArgumentError (a PolycompError with a hint), never a crash. Under
``cuda``, objects with a stand-in ``__cuda_array_interface__`` pass or fail the same
checks without any GPU, and a call that passes them raises DeviceUnavailableError. The
generated ``.cu`` with its device entry still builds with nvcc (``needs_nvcc``), and
benchmarks/gpu.py's emulated smoke runs in a subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polycomp
from polycomp.errors import ArgumentError, UnsupportedError
from polycomp.targets import get_target
from polycomp.targets.cuda import DeviceUnavailableError, gpu_available
from test_cuda_codegen import EMULATED, MV_LOOPS, OPERATORS
from test_tc_corpus import CORPUS, f32

ROOT = Path(__file__).resolve().parent.parent
needs_cc = pytest.mark.needs_cc

MM = OPERATORS["matmul"][0]
TWO = """def two(float(M, K) A, float(K, N) B, float(N, P) D) -> (E) {
    T(m, n) +=! A(m, k) * B(k, n)
    E(m, p) +=! T(m, n) * D(n, p)
}"""


def run_on_device(kernel, inputs, **kw):
    """The outputs of ``kernel.on_device`` on fresh numpy buffers (poisoned with NaN, so
    an element the kernel fails to write shows)."""
    layout = kernel.device_layout(*inputs)
    out = {n: np.full(s, np.nan, d) for n, (s, d, kind) in layout.items() if kind == "out"}
    return kernel.on_device(*inputs, out=out, **kw), out


# ----------------------------------------------------------------------------- results

@needs_cc
@pytest.mark.parametrize("name", ["matmul", "softmax", "layernorm", "two_kernels", "conv3x3"])
def test_device_entry_matches_numpy_and_the_host_entry(name):
    source, make, reference = OPERATORS[name]
    inputs = make(np.random.default_rng(1))
    kernel = polycomp.compile(source, **EMULATED)
    got, out = run_on_device(kernel, inputs)
    assert got is next(iter(out.values()))  # written in place, returned as a call returns
    np.testing.assert_allclose(got, reference(*inputs), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(got, kernel(*inputs))


@needs_cc
@pytest.mark.parametrize("give_work", [False, True])
def test_several_kernels_with_a_temporary(give_work):
    kernel = polycomp.compile(TWO, **EMULATED)
    rng = np.random.default_rng(2)
    a, b, d = f32(rng, 13, 7), f32(rng, 7, 9), f32(rng, 9, 5)
    layout = kernel.device_layout(a, b, d)
    assert layout == {"E": ((13, 5), "float32", "out"), "T": ((13, 9), "float32", "work")}
    assert kernel.source.count("__global__") >= 2
    work = {"T": np.empty((13, 9), np.float32)} if give_work else None
    got, _ = run_on_device(kernel, [a, b, d], work=work)
    np.testing.assert_allclose(got, a @ b @ d, rtol=1e-4, atol=1e-5)
    if give_work:  # the given temporary was used, not one of the entry's own
        np.testing.assert_allclose(work["T"], a @ b, rtol=1e-4, atol=1e-5)
    text = kernel.source
    launch = text[text.index("static int polycomp_two_launch"):]
    assert launch.count("POLYCOMP_LAUNCH(") >= 2
    after = text[text.index('extern "C" int polycomp_two_device'):]
    assert "POLYCOMP_LAUNCH(" not in after  # one launch sequence, called by both entries
    assert after.count("polycomp_two_launch(") == 2


@needs_cc
def test_loop_kernel_updates_in_place_with_a_scratch_array():
    kernel = polycomp.compile_loops(MV_LOOPS, **EMULATED)
    rng = np.random.default_rng(6)
    a, x, y = rng.random((11, 11)), rng.random(11), np.zeros(11)
    assert kernel.on_device(11, a, x, y) is None
    np.testing.assert_allclose(y, 2 * a @ x)
    assert "polycomp_scratch0" in kernel.source
    with pytest.raises(ArgumentError, match="read-only"):
        y.flags.writeable = False
        kernel.on_device(11, a, x, y)


@needs_cc
def test_parametric_kernel_and_the_runner():
    kernel = polycomp.compile(MM, parametric=True, **EMULATED)
    rng = np.random.default_rng(3)
    for m, k, n in ((5, 3, 7), (9, 4, 2)):
        a, b = f32(rng, m, k), f32(rng, k, n)
        c = np.empty((m, n), np.float32)
        runner = kernel.device_runner(a, b, out={"C": c})
        for _ in range(2):
            c.fill(np.nan)
            assert runner() is c
            np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)


@needs_cc
def test_statuses_come_back_from_the_device_entry():
    gather = polycomp.compile(CORPUS["gather"][0], **EMULATED)
    x, bad = np.ones((7, 3), np.float32), np.array([[0, 7]], np.int32)
    with pytest.raises(polycomp.PolycompError, match="out of bounds"):
        run_on_device(gather, [x, bad])
    good = np.array([[0, 6]], np.int32)  # the status word is zeroed for the next call
    got, _ = run_on_device(gather, [x, good])
    np.testing.assert_array_equal(got, gather(x, good))


# ----------------------------------------------------------------------------- arguments

@needs_cc
def test_argument_errors_on_the_emulated_device():
    kernel = polycomp.compile(MM, **EMULATED)
    rng = np.random.default_rng(4)
    a, b = f32(rng, 6, 4), f32(rng, 4, 5)
    c = np.empty((6, 5), np.float32)
    bad = [
        (lambda: kernel.on_device(a, b), "out= lacks \\['C'\\]"),
        (lambda: kernel.on_device(a, b, out={"C": c, "Z": c}), "not its outputs"),
        (lambda: kernel.on_device(a, b, out={"C": c}, work={"T": c}), "not its temporaries"),
        (lambda: kernel.on_device(a, out={"C": c}), "takes 2 argument"),
        (lambda: kernel.on_device(a.astype(np.float64), b, out={"C": c}), "dtype float32"),
        (lambda: kernel.on_device(a[None], b, out={"C": c}), "rank 2"),
        (lambda: kernel.on_device(a, f32(rng, 3, 5), out={"C": c}), "size K is 4"),
        (lambda: kernel.on_device(np.asfortranarray(a), b, out={"C": c}), "not C-contiguous"),
        (lambda: kernel.on_device(a, b, out={"C": c[:, :4]}), "not C-contiguous"),
        (lambda: kernel.on_device(a, b, out={"C": np.empty((6, 4), np.float32)}),
         "make it \\(6, 5\\)"),
        (lambda: kernel.on_device(a, b, out={"C": c.astype(np.float64)}), "dtype float32"),
        (lambda: kernel.on_device(a.tolist(), b, out={"C": c}), "must be a numpy array"),
    ]
    for call, message in bad:
        with pytest.raises(ArgumentError, match=message) as info:
            call()
        assert str(info.value).startswith("error: ")
    assert "C float32 (6, 5)" in _error(lambda: kernel.on_device(a, b)).hint
    readonly = np.empty((6, 5), np.float32)
    readonly.flags.writeable = False
    with pytest.raises(ArgumentError, match="read-only"):
        kernel.on_device(a, b, out={"C": readonly})
    # an output over an input: refused, the input would change under the kernel
    shared = np.empty(64, np.float32)
    with pytest.raises(ArgumentError, match="share memory"):
        kernel.on_device(shared[:24].reshape(6, 4), b, out={"C": shared[10:40].reshape(6, 5)})


def _error(call) -> ArgumentError:
    with pytest.raises(ArgumentError) as info:
        call()
    return info.value


def test_on_device_needs_a_cuda_target():
    kernel = polycomp.compile(MM, target="openmp")
    a = np.ones((2, 2), np.float32)
    with pytest.raises(UnsupportedError, match="no device entry"):
        kernel.on_device(a, a, out={"C": np.empty((2, 2), np.float32)})


class FakeDeviceArray:
    """An object with a stand-in ``__cuda_array_interface__`` (no GPU behind it)."""

    def __init__(self, shape, typestr="<f4", address=0x7F0000000000, readonly=False,
                 strides=None, **extra):
        self.shape = shape
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (address, readonly), "version": 3,
                                         "strides": strides, **extra}


class Broken:
    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad")


def test_fake_cuda_arrays_are_checked_without_a_gpu():
    if gpu_available()[0]:
        pytest.skip("a GPU is available here: the call would run")
    kernel = polycomp.compile(MM, target="cuda")
    a, b = FakeDeviceArray((6, 4)), FakeDeviceArray((4, 5), address=0x7F0000100000)
    c = FakeDeviceArray((6, 5), address=0x7F0000200000)
    assert kernel.device_layout(a, b) == {"C": ((6, 5), "float32", "out")}
    # accepted by the checks (explicit C strides too); the call needs the GPU
    b_strided = FakeDeviceArray((4, 5), address=0x7F0000100000, strides=(20, 4))
    with pytest.raises(DeviceUnavailableError, match="cuda-emulated"):
        kernel.on_device(a, b_strided, out={"C": c})
    bad = [
        ((np.ones((6, 4), np.float32), b, c), "__cuda_array_interface__", "copy it to the GPU"),
        ((FakeDeviceArray((6, 4), "<f8"), b, c), "dtype float32", None),
        ((FakeDeviceArray((6, 4), strides=(4, 24)), b, c), "not C-contiguous", "contiguous"),
        ((FakeDeviceArray((6, 4), mask=object()), b, c), "masked", None),
        ((FakeDeviceArray((6, 4), version=4), b, c), "version 4", None),
        ((FakeDeviceArray((6, 4), address=0), b, c), "null device pointer", None),
        ((Broken(), b, c), "cannot be read", "detach"),
        ((a, FakeDeviceArray((3, 5), address=0x7F0000100000), c), "size K is 4", None),
        ((a, b, FakeDeviceArray((6, 5), address=0x7F0000200000, readonly=True)), "read-only",
         None),
        ((a, b, FakeDeviceArray((5, 6), address=0x7F0000200000)), "make it", None),
        # C over A's bytes (A is 96 bytes from 0x7F0000000000)
        ((a, b, FakeDeviceArray((6, 5), address=0x7F0000000040)), "share memory", None),
    ]
    for (x, y, z), message, hint in bad:
        with pytest.raises(ArgumentError, match=message) as info:
            kernel.on_device(x, y, out={"C": z})
        if hint:
            assert hint in (info.value.hint or "")
    with pytest.raises(ArgumentError, match="must be a numpy array"):  # and the converse
        polycomp.compile(MM, **EMULATED).on_device(a, b, out={"C": c})


# ----------------------------------------------------------------------------- nvcc

@pytest.mark.needs_nvcc
def test_the_cu_with_its_device_entry_builds_with_nvcc():
    """The whole translation unit, host entries too (``-cubin`` would compile only the
    device side): the target's own build, nvcc -shared."""
    for source, sizes in ((MM, {"M": 256, "N": 256, "K": 256}),
                          (TWO, {"M": 40, "K": 24, "N": 32, "P": 16})):
        kernel = polycomp.compile(source, target="cuda", sizes=sizes)
        compiled = kernel.specialize(sizes, build=False).compiled
        library = get_target("cuda").build(compiled.source, kernel.options)
        assert library.is_file()
        assert "_device(" in compiled.source.text
    resources = polycomp.cuda.ptxas_resources(kernel.source, "sm_90")
    assert resources and all(r.registers > 0 for r in resources)


# ----------------------------------------------------------------------------- benchmark

def _bench(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    path = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    return subprocess.run([sys.executable, "-m", "benchmarks.gpu", *args], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)


@needs_cc
def test_benchmark_emulated_smoke(tmp_path):
    done = _bench("--emulated-smoke", "--only", "sgemm,softmax", "--out", str(tmp_path),
                  tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| case | polycomp ms | numpy ms |" in done.stdout
    assert "| sgemm 32^3 |" in done.stdout and "| softmax 4x16 |" in done.stdout
    assert "WRONG" not in done.stdout
    assert (tmp_path / "gpu-smoke.md").is_file() and (tmp_path / "gpu-smoke.csv").is_file()


def test_benchmark_without_a_gpu_says_why(tmp_path):
    if gpu_available()[0]:
        pytest.skip("a GPU is available here")
    done = _bench("--out", str(tmp_path), tmp_path=tmp_path)
    assert done.returncode == 2 and "no GPU to measure on: " in done.stderr
    assert gpu_available()[1] in done.stderr
    allowed = _bench("--allow-no-gpu", "--out", str(tmp_path), tmp_path=tmp_path)
    assert allowed.returncode == 0 and not list(tmp_path.iterdir())
