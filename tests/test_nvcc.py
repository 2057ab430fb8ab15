"""polycomp/cuda.py: finding the CUDA toolkit, nvcc's resource report and the launch
limits, and ``available()`` (which never raises).

The nvcc tests (``needs_nvcc``: skipped where nvcc is missing) compile hand-written
kernels to cubins for sm_80 and sm_90 once per module and share the reports. One
kernel's static shared array is over 48 KiB: ptxas refuses it, which ``-ptx`` alone
never finds out (the last test shows that it passes there). The ``available()`` tests
run against small stand-ins for pycuda (a package on a temporary sys.path), one per
reason, so they need neither pycuda nor a driver.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cuda_samples import VADD_HOST
from polycomp import cuda
from polycomp.errors import CompilerError, PolycompError, ResourceLimitError

ARCHS = ("sm_80", "sm_90")

KERNELS = r"""
#include "polycomp_cuda.h"

__global__ void vadd(const float *__restrict__ a, const float *__restrict__ b,
                     float *__restrict__ c, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

__global__ void block_sum(const float *__restrict__ in, float *__restrict__ out) {
    __shared__ float partial[256];
    unsigned int t = threadIdx.x;
    partial[t] = in[blockIdx.x * 256 + t];
    __syncthreads();
    for (unsigned int stride = 128; stride > 0; stride >>= 1) {
        if (t < stride) partial[t] += partial[t + stride];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = partial[0];
}

/* a local array indexed by run-time values lives on the stack */
__global__ void scatter(float *a, int n) {
    float r[64];
    for (int i = 0; i < 64; ++i) r[i] = a[(i * 7 + threadIdx.x) % n];
    for (int k = 0; k < n; ++k) r[k % 64] += r[(k * 13) % 64] * 1.5f;
    float s = 0;
    for (int i = 0; i < 64; ++i) s += r[i];
    a[threadIdx.x] = s;
}

extern "C" __global__ void plain_name(int *x) { x[threadIdx.x] = 1; }

/* the header's host macros under nvcc */
""" + VADD_HOST

# 48 values live at once: more than -maxrregcount=16 (which ptxas raises to 24) holds
SPILLING = r"""
__global__ void many_live(const float *__restrict__ in, float *__restrict__ out) {
    float v[48];
#pragma unroll
    for (int i = 0; i < 48; ++i) v[i] = in[threadIdx.x * 48 + i];
    float s = 0;
#pragma unroll
    for (int i = 0; i < 48; ++i) s += v[i] * v[47 - i];
#pragma unroll
    for (int i = 0; i < 48; ++i) out[threadIdx.x * 48 + i] = v[i] * s;
}
"""

# 12289 floats: 49156 bytes, 4 over the 48 KiB of static shared memory
TOO_MUCH_SHARED = r"""
__global__ void big_tile(float *out) {
    __shared__ float tile[12289];
    tile[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = tile[(threadIdx.x + 1) % 12289];
}
"""


@pytest.fixture(scope="module")
def reports():
    if cuda.nvcc_path() is None:
        pytest.skip("nvcc not found")
    return {arch: {k.kernel: k for k in cuda.ptxas_resources(KERNELS, arch)}
            for arch in ARCHS}


# --------------------------------------------------------------------- toolkit

@pytest.mark.needs_nvcc
def test_toolkit_root_without_cuda_home(monkeypatch):
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    nvcc = cuda.nvcc_path()
    assert nvcc is not None and os.path.isabs(nvcc)
    root = cuda.toolkit_root()
    assert root is not None
    assert (root / "include" / "cuda.h").is_file()
    assert (root / "bin" / "ptxas").is_file()


@pytest.mark.needs_nvcc
@pytest.mark.parametrize("how", ["symlink", "wrapper script"])
def test_toolkit_root_through_a_symlink_or_a_wrapper(tmp_path, monkeypatch, how):
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    real = Path(os.path.realpath(cuda.nvcc_path()))
    root = cuda.toolkit_root()
    folder = tmp_path / "bin"
    folder.mkdir()
    nvcc = folder / "nvcc"
    if how == "symlink":
        nvcc.symlink_to(real)
    else:  # what this machine's /usr/local/bin/nvcc is: `exec <root>/bin/nvcc "$@"`
        nvcc.write_text(f'#!/bin/sh\nexec "{real}" "$@"\n')
        nvcc.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    assert cuda.nvcc_path() == str(nvcc)
    assert cuda.toolkit_root() == root


def test_cuda_home_wins_when_it_is_a_toolkit(tmp_path, monkeypatch):
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cuda_runtime.h").write_text("")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert cuda.toolkit_root() == tmp_path.resolve()


# --------------------------------------------------------------- ptxas's report

@pytest.mark.needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
def test_resources_per_kernel(reports, arch):
    kernels = reports[arch]
    assert set(kernels) == {"vadd", "block_sum", "scatter", "plain_name"}
    for kernel in kernels.values():
        assert kernel.arch == arch
        assert 1 <= kernel.registers <= 255
    assert kernels["vadd"].name.startswith("_Z4vadd")
    assert kernels["plain_name"].name == "plain_name"  # extern "C": not mangled
    assert kernels["vadd"].shared_bytes == 0
    assert kernels["block_sum"].shared_bytes == 256 * 4
    assert kernels["block_sum"].barriers >= 1
    assert kernels["scatter"].stack_bytes >= 64 * 4  # the local array
    assert kernels["vadd"].stack_bytes == 0
    for kernel in kernels.values():
        cuda.check_limits(kernel, 256)


@pytest.mark.needs_nvcc
def test_spills_are_parsed():
    kernels = cuda.ptxas_resources(SPILLING, "sm_80", flags=["-maxrregcount=16"])
    (kernel,) = kernels
    assert kernel.kernel == "many_live" and kernel.registers <= 24  # ptxas's floor
    assert kernel.spill_stores > 0 and kernel.spill_loads > 0
    assert kernel.stack_bytes > 0


@pytest.mark.needs_nvcc
def test_source_from_a_path_with_its_own_includes(tmp_path):
    (tmp_path / "sizes.h").write_text("#define TILE 64\n")
    source = tmp_path / "tiled.cu"
    source.write_text('#include "polycomp_cuda.h"\n#include "sizes.h"\n'
                      "__global__ void tiled(float *a) {\n"
                      "    __shared__ float t[TILE];\n"
                      "    t[threadIdx.x] = a[threadIdx.x];\n"
                      "    __syncthreads();\n"
                      "    a[threadIdx.x] = t[TILE - 1 - threadIdx.x];\n}\n")
    (kernel,) = cuda.ptxas_resources(source, "sm_90")
    assert (kernel.kernel, kernel.shared_bytes) == ("tiled", 64 * 4)


@pytest.mark.needs_nvcc
def test_nvcc_error_is_a_compiler_error():
    with pytest.raises(CompilerError, match="nvcc failed") as caught:
        cuda.ptxas_resources("__global__ void broken(float *a) { a[0] = undeclared; }",
                             "sm_80")
    assert "undeclared" in str(caught.value)


@pytest.mark.needs_nvcc
def test_static_shared_memory_over_48k_is_refused_by_the_cubin_path(tmp_path):
    with pytest.raises(ResourceLimitError) as caught:
        cuda.ptxas_resources(TOO_MUCH_SHARED, "sm_80")
    message = str(caught.value)
    assert "big_tile" in message and "49156" in message and "49152" in message
    assert isinstance(caught.value, PolycompError)
    # -ptx stops before ptxas: it takes the same kernel without a word
    source = tmp_path / "big.cu"
    source.write_text(TOO_MUCH_SHARED)
    done = subprocess.run([cuda.nvcc_path(), "-ptx", "-arch=sm_80", str(source), "-o",
                           str(tmp_path / "big.ptx")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "big_tile" in (tmp_path / "big.ptx").read_text()


@pytest.mark.needs_nvcc
def test_header_host_side_compiles_warning_free_under_nvcc(tmp_path):
    source = tmp_path / "kernels.cu"
    source.write_text(KERNELS)
    obj = tmp_path / "kernels.o"
    done = subprocess.run([cuda.nvcc_path(), "-c", "-arch=sm_80", f"-I{cuda.header_dir()}",
                           "-Xcompiler", "-Wall,-Werror", str(source), "-o", str(obj)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert b"polycomp_vadd" in obj.read_bytes()


def test_missing_nvcc_is_a_compiler_error():
    with pytest.raises(CompilerError, match="cannot run nvcc"):
        cuda.ptxas_resources("", "sm_80", nvcc="/nonexistent/bin/nvcc")


def test_parse_a_report():
    report = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z6kernelPfS_i' for 'sm_80'
ptxas info    : Function properties for _Z6kernelPfS_i
    48 bytes stack frame, 40 bytes spill stores, 36 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 48 bytes cumulative stack size, 8192 bytes smem, 16 bytes lmem, 372 bytes cmem[0]
ptxas info    : Compile time = 3.2 ms
ptxas info    : Compiling entry function 'plain' for 'sm_90'
ptxas info    : Function properties for plain
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, 360 bytes cmem[0]
"""
    first, second = cuda.parse_ptxas(report)
    assert first == cuda.KernelResources(
        name="_Z6kernelPfS_i", kernel="kernel", arch="sm_80", registers=255,
        shared_bytes=8192, spill_stores=40, spill_loads=36, stack_bytes=48,
        local_bytes=16, barriers=1)
    assert (second.kernel, second.arch, second.registers, second.shared_bytes,
            second.barriers) == ("plain", "sm_90", 8, 0, 0)


# --------------------------------------------------------------------- limits

def _kernel(registers=32, shared=0, arch="sm_80"):
    return cuda.KernelResources(name="_Z1kv", kernel="k", arch=arch, registers=registers,
                                shared_bytes=shared, spill_stores=0, spill_loads=0,
                                stack_bytes=0)


@pytest.mark.parametrize("registers, threads, fits", [
    (64, 1024, True),    # 64 x 1024 = 65536 exactly
    (65, 1024, False),   # 65 x 32 = 2080 per warp, given as 2304: 73728 for 32 warps
    (255, 256, True),    # 255 x 32 -> 8192 per warp x 8 warps = 65536
    (255, 257, False),   # a ninth warp
    (128, 512, True),
    (129, 512, False),
])
def test_register_limit(registers, threads, fits):
    if fits:
        cuda.check_limits(_kernel(registers), threads)
    else:
        with pytest.raises(ResourceLimitError, match=f"{registers} registers per thread"):
            cuda.check_limits(_kernel(registers), threads)


def test_thread_and_shared_limits():
    cuda.check_limits([_kernel(shared=48 * 1024), _kernel(arch="sm_90")], 1024 // 32)
    with pytest.raises(ResourceLimitError, match="1025 threads"):
        cuda.check_limits(_kernel(8), 1025)
    with pytest.raises(ResourceLimitError, match="0 threads"):
        cuda.check_limits(_kernel(8), 0)
    with pytest.raises(ResourceLimitError, match="49153 bytes of static shared memory") as e:
        cuda.check_limits(_kernel(shared=48 * 1024 + 1), 128)
    assert "kernel 'k' (sm_80)" in str(e.value) and e.value.hint


# ------------------------------------------------------------------ available()

@pytest.fixture
def fake_pycuda(tmp_path, monkeypatch):
    """Writes a stand-in pycuda whose driver module has the given body, first on
    sys.path; the real one (if any) comes back afterwards."""
    saved = {name: module for name, module in sys.modules.items()
             if name == "pycuda" or name.startswith("pycuda.")}
    for name in saved:
        del sys.modules[name]

    def make(driver_body: str) -> None:
        package = tmp_path / "pycuda"
        package.mkdir()
        (package / "__init__.py").write_text("")
        (package / "driver.py").write_text(driver_body)
        monkeypatch.syspath_prepend(str(tmp_path))

    yield make
    for name in [n for n in sys.modules if n == "pycuda" or n.startswith("pycuda.")]:
        del sys.modules[name]
    sys.modules.update(saved)


DEVICE = """
class Device:
    def __init__(self, index): self.index = index
    @staticmethod
    def count(): return {count}
    def name(self): return "Fake GPU"
    def compute_capability(self): return (9, 0)
"""


@pytest.mark.parametrize("driver_body, ok, reason", [
    ("raise ImportError('libcuda.so.1: cannot open shared object file: No such file or "
     "directory')", False, "no CUDA driver: import pycuda.driver failed (libcuda.so.1"),
    ("raise ImportError('undefined symbol: cuArrayCreate_v2')", False, "no CUDA driver"),
    ("raise ImportError('numpy.core.multiarray failed to import')", False,
     "pycuda is installed but does not import"),
    ("def init():\n    raise RuntimeError('cuInit failed: no CUDA-capable device is "
     "detected')", False, "no CUDA device: cuInit failed"),
    ("def init():\n    raise RuntimeError('cuInit failed: CUDA driver version is "
     "insufficient for CUDA runtime version')", False,
     "the CUDA driver did not start: cuInit failed: CUDA driver version"),
    ("def init(): pass\n" + DEVICE.format(count=0), False, "no CUDA device"),
    ("def init(): pass\n" + DEVICE.format(count=2), True, "2 CUDA devices: Fake GPU (sm_90)"),
    ("def init(): pass\nclass Device:\n    @staticmethod\n    def count(): raise "
     "TypeError('odd')", False, "checking for a CUDA device failed: TypeError: odd"),
    ("raise SystemError('broken extension')", False,
     "checking for a CUDA device failed: SystemError: broken extension"),
])
def test_available_reasons(fake_pycuda, driver_body, ok, reason):
    fake_pycuda(driver_body)
    result = cuda.available()
    assert result[0] is ok and result[1].startswith(reason), result


# A stand-in for the driver library (libcuda.so.1): cuInit returns INIT, the device
# count is COUNT; the rest answers as a driver does.
FAKE_DRIVER = r"""
#include <string.h>
int cuInit(unsigned int flags) { (void)flags; return INIT; }
int cuDeviceGetCount(int *count) { *count = COUNT; return 0; }
int cuDeviceGet(int *device, int ordinal) { *device = ordinal; return 0; }
int cuDeviceGetName(char *name, int len, int device) {
    (void)device; strncpy(name, "Fake GPU", (size_t)len); return 0; }
int cuDeviceGetAttribute(int *value, int attribute, int device) {
    (void)device; *value = attribute == 75 ? 9 : 0; return 0; }
int cuGetErrorName(int status, const char **name) {
    *name = status == 100 ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_INSUFFICIENT_DRIVER";
    return 0; }
"""


def _without_pycuda(monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "pycuda" else real(name, *a))


@pytest.mark.needs_cc
@pytest.mark.parametrize("init, count, ok, reason", [
    (100, 0, False, "no CUDA device: cuInit failed (CUDA_ERROR_NO_DEVICE, 100)"),
    (35, 0, False, "the CUDA driver did not start: cuInit failed "
                   "(CUDA_ERROR_INSUFFICIENT_DRIVER, 35)"),
    (0, 0, False, "no CUDA device: the driver started and found none"),
    (0, 2, True, "2 CUDA devices: Fake GPU (sm_90), Fake GPU (sm_90)"),
])
def test_available_without_pycuda_asks_the_driver(tmp_path, monkeypatch, init, count, ok,
                                                   reason):
    """Without pycuda, available() loads the driver library itself (ctypes)."""
    source, library = tmp_path / "driver.c", tmp_path / "libcuda.so.1"
    source.write_text(FAKE_DRIVER)
    subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC", f"-DINIT={init}",
                    f"-DCOUNT={count}", str(source), "-o", str(library)], check=True)
    _without_pycuda(monkeypatch)
    monkeypatch.setattr(cuda, "DRIVER_LIBRARY", str(library))
    assert cuda.available() == (ok, reason)


def test_available_without_pycuda_or_driver(monkeypatch):
    _without_pycuda(monkeypatch)
    monkeypatch.setattr(cuda, "DRIVER_LIBRARY", "libpolycomp-no-such-driver.so.1")
    ok, reason = cuda.available()
    assert not ok and reason.startswith(
        "no CUDA driver: libpolycomp-no-such-driver.so.1 does not load"), reason


def test_available_here_never_raises():
    ok, reason = cuda.available()
    assert isinstance(ok, bool) and isinstance(reason, str) and reason
