"""The CPU emulation of CUDA in polycomp/targets/polycomp_cuda.h (the `cuda-emulated`
target's runtime), on hand-written .cu files that use the header's contract.

The kernels run in both of the emulation's kinds of block threads: fibers (the default)
and OS threads (-DPOLYCOMP_EMULATION_THREADS, which ThreadSanitizer builds get). Each
.cu is compiled by g++ -std=c++17 -pthread -Wall -Wextra -Werror: as a shared
library called by ctypes on numpy arrays, or as a small executable (a `main` in the
test's text) where the test needs a time limit (a hang) or ThreadSanitizer (whose
runtime then need not be preloaded into Python). The ThreadSanitizer tests build a block
reduction in shared memory with -fsanitize=thread: as written it is TSan-clean; with
one __syncthreads() removed, TSan reports the data race, every time (the race is
certain, not timing-dependent: TSan checks happens-before, not overlap).
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from cuda_samples import CXX, TSAN_OPTIONS, VADD_HOST, tsan_problem
from polycomp import cuda

pytestmark = pytest.mark.needs_cc

FLAGS = ["-std=c++17", "-pthread", "-O1", "-Wall", "-Wextra", "-Werror",
         f"-I{cuda.header_dir()}", "-x", "c++"]


def compile_cu(folder: Path, name: str, text: str, *, library: bool,
               extra: tuple[str, ...] = ()) -> Path:
    if shutil.which(CXX) is None:
        pytest.skip(f"no C++ compiler ({CXX})")
    source = folder / f"{name}.cu"
    source.write_text(text)
    output = folder / (f"lib{name}.so" if library else name)
    argv = [CXX, *FLAGS, *(["-fPIC", "-shared"] if library else []), *extra,
            str(source), "-o", str(output)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"{' '.join(argv)}\n{done.stderr}"
    return output


def load(path: Path, entry: str, *argtypes) -> ctypes._CFuncPtr:
    function = getattr(ctypes.CDLL(str(path)), entry)
    function.restype = ctypes.c_int
    function.argtypes = list(argtypes)
    return function


def address(array: np.ndarray) -> int:
    assert array.flags.c_contiguous
    return array.ctypes.data


P, L = ctypes.c_void_p, ctypes.c_long

# the emulation's two kinds of block threads: the -D flags that pick each
MODES = {"fibers": (), "threads": ("-DPOLYCOMP_EMULATION_THREADS",)}
mode = pytest.mark.parametrize("mode", list(MODES))


# --------------------------------------------------------------------- vector add

VADD = r"""
#include "polycomp_cuda.h"

__global__ void vadd(const float *__restrict__ a, const float *__restrict__ b,
                     float *__restrict__ c, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return; /* the last block is partial */
    c[i] = a[i] + b[i];
}

""" + VADD_HOST


@mode
def test_vector_add_matches_numpy(tmp_path, mode):
    vadd = load(compile_cu(tmp_path, "vadd", VADD, library=True, extra=MODES[mode]),
                "polycomp_vadd", L, P, P, P)
    rng = np.random.default_rng(0)
    for n in (1, 128, 1000):
        a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
        c = np.full(n, np.nan, dtype=np.float32)
        assert vadd(n, address(a), address(b), address(c)) == 0
        np.testing.assert_array_equal(c, a + b)


# ------------------------------------------------- block reduction in shared memory

# One block sums 256 elements: each thread loads one into shared memory, then a tree
# of halving strides, a barrier after each step. `BARRIER_AFTER_LOAD` is the barrier
# the TSan negative test removes: without it, thread t < 128 reads s[t + 128] while
# thread t + 128 may not have written it yet.
REDUCTION = r"""
#include "polycomp_cuda.h"
#ifndef BARRIER_AFTER_LOAD
#define BARRIER_AFTER_LOAD __syncthreads()
#endif

__global__ void block_sum(const float *__restrict__ in, float *__restrict__ out) {
    __shared__ float partial[256];
    unsigned int t = threadIdx.x;
    partial[t] = in[blockIdx.x * 256 + t];
    BARRIER_AFTER_LOAD;
    for (unsigned int stride = 128; stride > 0; stride >>= 1) {
        if (t < stride) partial[t] += partial[t + stride];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = partial[0];
}

extern "C" int polycomp_block_sum(long blocks, const float *in, float *out) {
    float *din = nullptr, *dout = nullptr;
    POLYCOMP_ALLOC(din, blocks * 256 * sizeof(float));
    POLYCOMP_ALLOC(dout, blocks * sizeof(float));
    POLYCOMP_COPY_IN(din, in, blocks * 256 * sizeof(float));
    POLYCOMP_LAUNCH(block_sum, dim3(blocks), dim3(256), din, dout);
    POLYCOMP_LAUNCH_CHECK();
    POLYCOMP_SYNC();
    POLYCOMP_COPY_OUT(out, dout, blocks * sizeof(float));
    POLYCOMP_FREE(din);
    POLYCOMP_FREE(dout);
    return 0;
}
"""

# the same reduction as a program: integer-valued data, so the sums are exact
REDUCTION_MAIN = REDUCTION + r"""
#include <cstdio>
int main() {
    const long blocks = 3;
    static float in[blocks * 256], out[blocks];
    for (long i = 0; i < blocks * 256; ++i) in[i] = (float)(i % 7);
    int status = polycomp_block_sum(blocks, in, out);
    for (long b = 0; b < blocks; ++b) {
        float expected = 0;
        for (long i = 0; i < 256; ++i) expected += in[b * 256 + i];
        if (out[b] != expected) {
            std::printf("block %ld: %g, expected %g\n", b, out[b], expected);
            return 1;
        }
    }
    std::printf("ok %d\n", status);
    return status;
}
"""


@mode
def test_block_reduction_in_shared_memory(tmp_path, mode):
    block_sum = load(compile_cu(tmp_path, "reduce", REDUCTION, library=True,
                                extra=MODES[mode]), "polycomp_block_sum", L, P, P)
    rng = np.random.default_rng(1)
    blocks = 5
    data = rng.integers(-50, 50, blocks * 256).astype(np.float32)
    out = np.zeros(blocks, dtype=np.float32)
    assert block_sum(blocks, address(data), address(out)) == 0
    np.testing.assert_array_equal(out, data.reshape(blocks, 256).sum(axis=1))
    # a second call on the same library: the barrier and the statics start afresh
    assert block_sum(blocks, address(data[::-1].copy()), address(out)) == 0
    np.testing.assert_array_equal(out, data[::-1].reshape(blocks, 256).sum(axis=1))


# ------------------------------------------------------------ 2D grid, 2D block

GRID_2D = r"""
#include "polycomp_cuda.h"

/* out[row][col] = 2 * in[row][col] + row - col, over a rows x cols array that the
 * grid covers with a ragged edge; ids[...] records what each thread saw */
__global__ void scale(const double *__restrict__ in, double *__restrict__ out,
                      int *__restrict__ ids, long rows, long cols) {
    long row = (long)blockIdx.y * blockDim.y + threadIdx.y;
    long col = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows || col >= cols) return;
    out[row * cols + col] = 2 * in[row * cols + col] + row - col;
    int *mine = ids + 6 * (row * cols + col);
    mine[0] = blockIdx.x;
    mine[1] = blockIdx.y;
    mine[2] = threadIdx.x;
    mine[3] = threadIdx.y;
    mine[4] = gridDim.x * gridDim.y * gridDim.z;
    mine[5] = blockDim.x * blockDim.y * blockDim.z;
}

extern "C" int polycomp_scale(long rows, long cols, const double *in, double *out, int *ids) {
    double *din = nullptr, *dout = nullptr;
    int *dids = nullptr;
    size_t bytes = rows * cols * sizeof(double);
    POLYCOMP_ALLOC(din, bytes);
    POLYCOMP_ALLOC(dout, bytes);
    POLYCOMP_ALLOC(dids, rows * cols * 6 * sizeof(int));
    POLYCOMP_COPY_IN(din, in, bytes);
    dim3 block(8, 4);
    dim3 grid((cols + block.x - 1) / block.x, (rows + block.y - 1) / block.y);
    POLYCOMP_LAUNCH(scale, grid, block, din, dout, dids, rows, cols);
    POLYCOMP_LAUNCH_CHECK();
    POLYCOMP_SYNC();
    POLYCOMP_COPY_OUT(out, dout, bytes);
    POLYCOMP_COPY_OUT(ids, dids, rows * cols * 6 * sizeof(int));
    POLYCOMP_FREE(din);
    POLYCOMP_FREE(dout);
    POLYCOMP_FREE(dids);
    return 0;
}
"""


@mode
def test_2d_grid_of_2d_blocks(tmp_path, mode):
    scale = load(compile_cu(tmp_path, "grid2d", GRID_2D, library=True, extra=MODES[mode]),
                 "polycomp_scale", L, L, P, P, P)
    rows, cols = 10, 19  # 3 x 3 blocks of 8 x 4, ragged in both directions
    data = np.random.default_rng(2).random((rows, cols))
    out = np.zeros((rows, cols))
    ids = np.full((rows, cols, 6), -1, dtype=np.int32)
    assert scale(rows, cols, address(data), address(out), address(ids)) == 0
    row, col = np.mgrid[0:rows, 0:cols]
    np.testing.assert_array_equal(out, 2 * data + row - col)
    np.testing.assert_array_equal(ids[..., 0], col // 8)
    np.testing.assert_array_equal(ids[..., 1], row // 4)
    np.testing.assert_array_equal(ids[..., 2], col % 8)
    np.testing.assert_array_equal(ids[..., 3], row % 4)
    assert (ids[..., 4] == 3 * 3).all() and (ids[..., 5] == 32).all()


# ------------------------------------------------- early return before a barrier

# Threads 5.. of each block return at once; 0..4 then go through 40 barriers. Each
# returned thread counts as arrived at the block's later barriers, so this finishes;
# an emulation that waited for all 64 threads at every barrier would hang here.
EARLY_RETURN_MAIN = r"""
#include "polycomp_cuda.h"
#include <cstdio>

__global__ void ring(int *out) {
    __shared__ int slot[5];
    unsigned int t = threadIdx.x;
    if (t >= 5) return;
    slot[t] = t;
    __syncthreads();
    for (int round = 0; round < 20; ++round) {
        int next = slot[(t + 1) % 5];
        __syncthreads();
        slot[t] = next;
        __syncthreads();
    }
    out[blockIdx.x * 5 + t] = slot[t];
}

int main() {
    static int out[3 * 5];
    int *dout = nullptr;
    POLYCOMP_ALLOC(dout, sizeof out);
    POLYCOMP_LAUNCH(ring, dim3(3), dim3(64), dout);
    POLYCOMP_LAUNCH_CHECK();
    POLYCOMP_COPY_OUT(out, dout, sizeof out);
    POLYCOMP_FREE(dout);
    for (int b = 0; b < 3; ++b)
        for (int t = 0; t < 5; ++t)
            if (out[b * 5 + t] != (t + 20) % 5) return 1;
    std::puts("ok");
    return 0;
}
"""


@mode
def test_early_return_before_barriers_does_not_hang(tmp_path, mode):
    program = compile_cu(tmp_path, "early", EARLY_RETURN_MAIN, library=False,
                         extra=MODES[mode])
    try:
        done = subprocess.run([str(program)], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("a kernel whose threads return before its barriers hung the emulation")
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


# ------------------------------------------------------------ refused launches

# POLYCOMP_FAIL is the header's hook for the error path: here it records the status
# and jumps to a cleanup that frees what was allocated.
LAUNCH_LIMITS = r"""
#define POLYCOMP_FAIL(code) { status = (code); goto cleanup; }
#include "polycomp_cuda.h"

__global__ void touch(int *flag) {
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) atomicAdd(flag, 1);
}

extern "C" int polycomp_touch(unsigned bx, unsigned by, unsigned bz, unsigned gx,
                              int *flag) {
    int status = 0;
    int *dflag = nullptr;
    POLYCOMP_ALLOC(dflag, sizeof(int));
    *dflag = 0;
    POLYCOMP_LAUNCH(touch, dim3(gx), dim3(bx, by, bz), dflag);
    POLYCOMP_LAUNCH_CHECK();
    POLYCOMP_SYNC();
    POLYCOMP_COPY_OUT(flag, dflag, sizeof(int));
cleanup:
    POLYCOMP_FREE(dflag);
    return status;
}
"""


@pytest.mark.parametrize("block, grid, expected", [
    ((1024, 1, 1), 2, 0),
    ((32, 32, 1), 1, 0),
    ((1025, 1, 1), 1, cuda.STATUS_LAUNCH),
    ((32, 32, 2), 1, cuda.STATUS_LAUNCH),  # 2048 threads
    ((1, 1, 65), 1, cuda.STATUS_LAUNCH),   # blockDim.z is at most 64
    ((0, 1, 1), 1, cuda.STATUS_LAUNCH),
    ((32, 1, 1), 0, cuda.STATUS_LAUNCH),   # an empty grid
])
def test_launch_configuration_limits(tmp_path_factory, block, grid, expected):
    touch = _touch(tmp_path_factory.getbasetemp())
    flag = np.full(1, -1, dtype=np.int32)
    assert touch(*block, grid, address(flag)) == expected
    # a refused launch runs nothing (and the error path skips the copy back)
    assert flag[0] == (grid if expected == 0 else -1)


@functools.lru_cache(maxsize=None)
def _touch(base: Path):
    folder = base / "launch-limits"
    folder.mkdir(exist_ok=True)
    U = ctypes.c_uint
    return load(compile_cu(folder, "touch", LAUNCH_LIMITS, library=True), "polycomp_touch",
                U, U, U, U, P)


ATOMICS = r"""
#include "polycomp_cuda.h"

__global__ void accumulate(float *f, double *d, int *i, long long *l, int *hi, int *lo,
                           float *mm) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(f, 0.5f);
    atomicAdd(d, 0.25);
    atomicAdd(i, 1);
    atomicAdd(l, 3LL);
    atomicMax(hi, t);
    atomicMin(lo, -t);
    if (t == 0) {
        mm[0] = min(2.0f, 3);
        mm[1] = max(-1, 4L);
        mm[2] = min(1.5f, NAN); /* fmin: a NaN loses, as CUDA's min */
    }
}

extern "C" int polycomp_accumulate(float *f, double *d, int *i, long long *l, int *hi,
                                   int *lo, float *mm) {
    POLYCOMP_LAUNCH(accumulate, dim3(4), dim3(100), f, d, i, l, hi, lo, mm);
    POLYCOMP_LAUNCH_CHECK();
    return 0;
}
"""


@mode
def test_atomics_and_min_max(tmp_path, mode):
    accumulate = load(compile_cu(tmp_path, "atomics", ATOMICS, library=True,
                                 extra=MODES[mode]), "polycomp_accumulate", *[P] * 7)
    f, d = np.zeros(1, np.float32), np.zeros(1, np.float64)
    i, l, hi, lo = (np.zeros(1, np.int32), np.zeros(1, np.int64), np.zeros(1, np.int32),
                    np.zeros(1, np.int32))
    mm = np.zeros(3, np.float32)
    assert accumulate(*(address(a) for a in (f, d, i, l, hi, lo, mm))) == 0
    assert (f[0], d[0], i[0], l[0], hi[0], lo[0]) == (200.0, 100.0, 400, 1200, 399, -399)
    assert mm.tolist() == [2.0, 4.0, 1.5]


def test_status_codes_match_the_header():
    text = cuda.HEADER.read_text()
    defined = {int(code): name for name, code in
               re.findall(r"#define POLYCOMP_STATUS_CUDA_(\w+) (\d+)", text)}
    assert defined == {cuda.STATUS_LAUNCH: "LAUNCH", cuda.STATUS_ALLOC: "ALLOC",
                       cuda.STATUS_COPY: "COPY", cuda.STATUS_FREE: "FREE",
                       cuda.STATUS_SYNC: "SYNC"}
    assert set(defined) == set(cuda.STATUS_MESSAGES)
    assert not set(defined) & {1, 2, 3}  # codegen/c.py's codes


# ------------------------------------------------------------------ ThreadSanitizer

def run_tsan(folder: Path, name: str, text: str, *defines: str):
    problem = tsan_problem()  # shared with test_cuda_tsan.py (tests/cuda_samples.py)
    if problem:
        pytest.skip(problem)
    program = compile_cu(folder, name, text, library=False,
                         extra=("-fsanitize=thread", "-g", *defines))
    return subprocess.run([str(program)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TSAN_OPTIONS": TSAN_OPTIONS})


def test_tsan_reduction_is_race_free(tmp_path):
    done = run_tsan(tmp_path, "reduce_tsan", REDUCTION_MAIN)
    assert "ThreadSanitizer" not in done.stderr, done.stderr
    assert done.returncode == 0 and done.stdout.strip() == "ok 0", done.stdout + done.stderr


def test_tsan_reports_a_missing_barrier(tmp_path):
    # the same kernel without the barrier between the loads and the first reads
    done = run_tsan(tmp_path, "reduce_race", REDUCTION_MAIN, "-DBARRIER_AFTER_LOAD=(void)0")
    assert "WARNING: ThreadSanitizer: data race" in done.stderr, done.stderr
    assert done.returncode == 66  # TSAN_OPTIONS exitcode, at the first report
    # the report points into the kernel
    assert re.search(r"block_sum\b.*reduce_race\.cu:\d+", done.stderr), done.stderr
