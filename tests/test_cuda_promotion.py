"""Memory promotion for the CUDA targets (issue 14 item 3): scheduler/gpu_promotion.py
decides, codegen/cuda_promotion.py prints.

Without a GPU the promoted code runs under ``cuda-emulated`` (g++, the header's CPU
emulation: a block's threads as fibers meeting at ``__syncthreads()``) against numpy,
with blocks and grids that do not divide the loops (strided thread loops: a thread may
run several iterations, or none, and still reaches every barrier) and sizes that are not
multiples of the tiles (boxes cut at the arrays' edges). Promotion on and off must give
the same results on the TC corpus (the same operations in the same order: bit for bit).
What must not be promoted is not: a written array is never staged in shared memory, a
register is refused when its element is not written at every iteration that reads it,
and a box over the shared-memory budget stays in global memory. nvcc reports the shared
bytes of the staged tiles; ThreadSanitizer sees no race in the promoted matmul and
reports one when its barrier after the copy is taken out.
"""

from __future__ import annotations

import re

import islpy as isl
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import polycomp
import polycomp.cuda
from polycomp import islutil as U
from polycomp.scheduler import gpu_promotion as PR
from polycomp.scheduler import tree as T
from test_cuda_codegen import GPU_PROGRAMS, close, results_with
from test_tc_corpus import conv, f32

needs_cc = pytest.mark.needs_cc
needs_nvcc = pytest.mark.needs_nvcc

MATMUL = "def mm(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
CHAIN = """
def mm2(float(M, K) A, float(K, L) B, float(L, N) C) -> (D) {
    T(m, l) +=! A(m, k) * B(k, l)
    D(m, n) +=! T(m, l) * C(l, n)
}"""
CONV = """
def conv(float(N, C, H, W) I, float(F, C, KH, KW) Wt) -> (O) {
    O(n, f, h, w) +=! I(n, c, h + kh, w + kw) * Wt(f, c, kh, kw)
}"""
# A read along its rows by threads that run along its columns: neighbouring threads
# touch elements a row apart (no reuse, not coalesced)
TRANSPOSED = "def tr(float(M, N) A) -> (B) { B(j, i) = A(i, j) * 2.0 }"
STENCIL = """
def blur(float(H, W) A) -> (B) {
    B(i, j) = 0.2 * (A(i, j) + A(i + 1, j) + A(i, j + 1) + A(i + 2, j + 1) + A(i + 1, j + 2))
}"""
# every third element of a row: the box along it has a stride of 3, left out of the buffer
STRIDED = "def sub(float(M, W) A) -> (B) { B(i, j) = A(i, 3 * j + 1) * 2.0 }"
INT_MATMUL = "def imm(int32(M, K) A, int32(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"


def _ints(r, *shape):
    return r.integers(-9, 9, size=shape).astype(np.int32)


# name -> (source, inputs, numpy reference, arrays that must be staged in shared memory)
PROGRAMS = {
    "matmul": (MATMUL, lambda r: [f32(r, 37, 45), f32(r, 45, 29)], lambda a, b: a @ b,
               {"A", "B"}),
    "chain": (CHAIN, lambda r: [f32(r, 13, 11), f32(r, 11, 17), f32(r, 17, 9)],
              lambda a, b, c: (a @ b) @ c, {"A", "B", "C"}),
    "conv": (CONV, lambda r: [f32(r, 2, 3, 11, 10), f32(r, 5, 3, 3, 2)],
             lambda i, w: conv(i, w, 1), {"I", "Wt"}),
    "transposed": (TRANSPOSED, lambda r: [f32(r, 19, 23)], lambda a: (a * 2).T, {"A"}),
    "stencil": (STENCIL, lambda r: [f32(r, 21, 26)],
                lambda a: 0.2 * (a[:-2, :-2] + a[1:-1, :-2] + a[:-2, 1:-1] + a[2:, 1:-1]
                                 + a[1:-1, 2:]), {"A"}),
    "strided": (STRIDED, lambda r: [f32(r, 13, 47)], lambda a: a[:, 1::3] * 2, {"A"}),
    "int_matmul": (INT_MATMUL, lambda r: [_ints(r, 15, 22), _ints(r, 22, 13)],
                   lambda a, b: a @ b, {"A", "B"}),
}

# (gpu_block, gpu_grid): odd blocks, grids smaller than the tiles (blocks loop), 1 to 3
# thread axes
SHAPES = [((8, 4), None), ((5, 3), (2, 3)), ((3,), (2,)), ((16, 2), (1, 1)),
          ((7, 3, 2), (2, 2, 1))]


def promotion_marks(schedule) -> list[tuple[str, list[str]]]:
    found = []
    for node in T.nodes(schedule):
        if T.is_mark(node):
            parsed = PR.parse_mark(node.mark_get_id().get_name())
            if parsed is not None:
                found.append(parsed)
    return found


def staged(schedule, kind: str = PR.MARK_SHARED) -> set[str]:
    return {a for k, arrays in promotion_marks(schedule) if k == kind for a in arrays}


def kernel_text(source: str, k: int) -> str:
    start = source.index(f"_kernel{k}(")
    return source[start:source.index("\n}\n", start)]


# ----------------------------------------------------------------------------- source

def test_matmul_stages_its_tiles_and_keeps_its_element_in_a_register():
    kernel = polycomp.compile(MATMUL, sizes={"M": 256, "K": 256, "N": 256}, target="cuda")
    assert staged(kernel.schedule) == {"A", "B"}
    assert staged(kernel.schedule, PR.MARK_PRIVATE) == {"C"}
    text = kernel_text(kernel.source, 1)
    # an 8x32 tile of A and a 32x32 tile of B (blocks of 32x8 threads, k tiles of 32)
    assert re.search(r"__shared__ float \w+\[256\];", text)
    assert re.search(r"__shared__ float \w+\[1024\];", text)
    # a barrier after the copy and one before the next copy overwrites it
    assert text.count("__syncthreads();") == 2
    # the products read the tiles, and accumulate into the register, not C
    update = next(line for line in text.splitlines() if "+=" in line and "c5" not in line.split("+=")[0]
                  and "for" not in line)
    assert "A[" not in update and "B[" not in update and "C[" not in update
    # the copy runs over every thread of the block, whatever its shape
    assert "threadIdx.z" in text and "blockDim.z" in text


def test_promotion_can_be_turned_off():
    on = polycomp.compile(MATMUL, sizes={"M": 64, "K": 64, "N": 64}, target="cuda")
    off = polycomp.compile(MATMUL, sizes={"M": 64, "K": 64, "N": 64}, target="cuda",
                           gpu_promotion=False)
    assert "__shared__" in on.source and "__shared__" not in off.source
    assert promotion_marks(off.schedule) == [] and "__syncthreads" not in off.source
    assert on.options.key() != off.options.key()


def written(kernel) -> set[str]:
    return {s.write.get_tuple_name(isl.dim_type.out) for s in kernel.program.statements}


def staged_where_written(kernel) -> set[str]:
    """Arrays some shared mark stages in a kernel whose statements write them."""
    found = set()
    for node in T.nodes(kernel.schedule):
        parsed = PR.parse_mark(node.mark_get_id().get_name()) if T.is_mark(node) else None
        if parsed is None or parsed[0] != PR.MARK_SHARED:
            continue
        up = node
        while not T.is_mark(up, T.MARK_KERNEL):
            up = up.parent()
        names = {piece.get_tuple_name() for piece in U.sets_of(up.get_domain())}
        found |= {s.write.get_tuple_name(isl.dim_type.out) for s in kernel.program.statements
                  if s.name in names} & set(parsed[1])
    return found


def test_written_arrays_are_never_staged_in_shared_memory():
    kernel = polycomp.compile(MATMUL, sizes={"M": 64, "K": 64, "N": 64}, target="cuda")
    assert "C" in written(kernel) and "C" not in staged(kernel.schedule)  # reused along k
    # T is written by the first product's kernel and staged by the second's
    chain = polycomp.compile(CHAIN, sizes={"M": 13, "K": 11, "L": 17, "N": 9}, target="cuda")
    assert "T" in staged(chain.schedule) and "T" in written(chain)
    assert staged_where_written(chain) == set() and staged_where_written(kernel) == set()


def test_a_box_over_the_shared_budget_stays_in_global_memory():
    # one thread axis of 1024 threads along n: a k tile of B is 32 x 1024 floats (128 KiB)
    kernel = polycomp.compile(MATMUL, sizes={"M": 3, "K": 40, "N": 1100}, target="cuda",
                              gpu_block=(1024,), block_channels=False)
    assert 32 * 1024 * 4 > PR.SHARED_BUDGET
    assert staged(kernel.schedule) == {"A"}
    assert "[32768]" not in kernel.source


LOOPS = """
void f(int N, int M, float A[N][M], float y[N], float z[N][M]) {
  for (int i = 0; i < N; i++)
    for (int j = 0; j < M; j++) {
      z[i][j] = y[i] * A[i][j];
      if (i < 3) y[i] = y[i] + 1.0f;
    }
}
"""


@needs_cc
def test_a_write_that_may_not_happen_is_not_promoted():
    # y(i) is read at every i but written only where i < 3: a register stored back at
    # every i would write elements the program never writes
    kernel = polycomp.compile_loops(LOOPS, target="cuda-emulated", gpu_block=(4, 2))
    assert "y" not in staged(kernel.schedule, PR.MARK_PRIVATE)
    assert "y" not in staged(kernel.schedule)
    rng = np.random.default_rng(3)
    a, y = f32(rng, 7, 5), f32(rng, 7)
    z = np.zeros((7, 5), np.float32)
    want_y, want_z = y.copy(), np.zeros_like(z)
    for i in range(7):
        for j in range(5):
            want_z[i, j] = want_y[i] * a[i, j]
            if i < 3:
                want_y[i] += 1
    kernel(7, 5, a, y, z)
    close(y, want_y)
    close(z, want_z)


def test_the_plans_at_the_marks():
    # at M=40, K=70, N=33 the tiles at the edges are smaller: the buffers take the
    # largest box, the copies only what is there
    kernel = polycomp.compile(MATMUL, sizes={"M": 40, "K": 70, "N": 33}, target="cuda",
                              block_channels=False)
    plans = {}
    for node in T.nodes(kernel.schedule):
        if T.is_mark(node) and PR.parse_mark(node.mark_get_id().get_name()):
            plan = PR.plan_at(node, kernel.program)
            plans[plan.kind] = {box.array: box for box in plan.boxes}
    assert plans[PR.MARK_SHARED]["A"].sizes == (8, 32)
    assert plans[PR.MARK_SHARED]["B"].sizes == (32, 32)
    assert not plans[PR.MARK_SHARED]["A"].writes
    c = plans[PR.MARK_PRIVATE]["C"]
    assert c.sizes == (1, 1) and c.reads and c.writes


def test_strides_are_removed_from_the_boxes():
    kernel = polycomp.compile(STRIDED, sizes={"M": 13, "W": 47}, target="cuda",
                              gpu_block=(8, 4))
    (node,) = [n for n in T.nodes(kernel.schedule) if T.is_mark(n)
               and PR.parse_mark(n.mark_get_id().get_name()) == (PR.MARK_SHARED, ["A"])]
    (box,) = PR.plan_at(node, kernel.program).boxes
    # 4 rows of 8 threads along j read A(i, 3j + 1): 8 elements a row, not 22
    assert box.strides == (1, 3) and box.sizes == (4, 8)
    assert "__shared__ float polycomp_shared0_0[32];" in kernel.source


# ----------------------------------------------------------------------------- runs

# each program with two of the shapes, rotating over the programs so that every shape
# meets several programs (the whole product cost 27 s of the suite's CPU time)
SHAPED = [(name, SHAPES[(i + k) % len(SHAPES)])
          for i, name in enumerate(sorted(PROGRAMS)) for k in (0, 2)]


@needs_cc
@pytest.mark.parametrize("name, shape", SHAPED,
                         ids=[f"{n}-block{s[0]}-grid{s[1]}" for n, s in SHAPED])
def test_promoted_programs_match_numpy(name, shape):
    source, inputs, reference, must_stage = PROGRAMS[name]
    block, grid = shape
    kernel = polycomp.compile(source, target="cuda-emulated", gpu_block=block, gpu_grid=grid)
    args = inputs(np.random.default_rng(len(name)))
    close(kernel(*args), reference(*args))
    assert must_stage <= staged(kernel.schedule), kernel.source
    assert staged_where_written(kernel) == set()
    assert "__shared__" in kernel.source


@needs_cc
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.integers(1, 40), k=st.integers(1, 70), n=st.integers(1, 40),
       block=st.sampled_from([(8, 4), (5, 3), (3,), (32, 2), (2, 2, 2)]),
       grid=st.sampled_from([None, (1,), (2, 3), (3, 1, 2)]),
       parametric=st.booleans())
def test_promoted_matmul_at_any_size_and_shape(m, k, n, block, grid, parametric):
    kernel = polycomp.compile(MATMUL, target="cuda-emulated", gpu_block=block, gpu_grid=grid,
                              parametric=parametric)
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a, b = f32(rng, m, k), f32(rng, k, n)
    close(kernel(a, b), a @ b)


@needs_cc
@pytest.mark.parametrize("name", GPU_PROGRAMS)
def test_promotion_on_and_off_agree(name):
    """The same operations in the same order, through registers and shared tiles or
    not: the results are identical, floats included."""
    on = results_with(name, gpu_block=(5, 3), gpu_promotion=True)
    off = results_with(name, gpu_block=(5, 3), gpu_promotion=False)
    for a, b in zip(on, off, strict=True):
        np.testing.assert_array_equal(a, b)


@needs_cc
def test_a_users_promotion_mark_that_does_not_hold_is_not_printed():
    from test_cuda_codegen import MATVEC, matvec_tree

    tree = matvec_tree("i").replace(
        """      mark: "kernel"
      child:
        mark: "thread"
        child:
          schedule: "[{ S1""",
        """      mark: "kernel"
      child:
        mark: "shared:y,A"
        child:
         mark: "thread"
         child:
          schedule: "[{ S1""")
    assert "shared:y,A" in tree
    kernel = polycomp.compile(MATVEC, scheduler="custom", schedule=tree,
                              target="cuda-emulated", gpu_block=(4,))
    rng = np.random.default_rng(8)
    a, x = f32(rng, 6, 4), f32(rng, 4)
    close(kernel(a, x), a @ x)
    # the user's mark is kept, the pass adds none to that kernel, and y (written) is
    # read and written in global memory: one shared buffer, A's
    assert ("shared", ["y", "A"]) in promotion_marks(kernel.schedule)
    assert len(re.findall(r"__shared__", kernel.source)) == 1


# ----------------------------------------------------------------------------- nvcc, TSan

@needs_nvcc
def test_nvcc_reports_the_staged_tiles_within_the_limits():
    if polycomp.cuda.nvcc_path() is None:
        pytest.skip("nvcc is not on the PATH")
    kernel = polycomp.compile(MATMUL, sizes={"M": 256, "K": 256, "N": 256}, target="cuda")
    resources = polycomp.cuda.ptxas_resources(kernel.source, "sm_80")
    by_name = {r.kernel: r for r in resources}
    main = by_name["polycomp_mm_kernel1"]
    assert main.shared_bytes == (8 * 32 + 32 * 32) * 4  # the two tiles, nothing else
    assert main.spill_stores == 0
    polycomp.cuda.check_limits(resources, 256)


HOST_MAIN = r"""
#include <cstdio>
#include <cmath>
int main() {
    const int M = %(m)d, K = %(k)d, N = %(n)d;
    static float A[M * K], B[K * N], C[M * N];
    for (int i = 0; i < M * K; ++i) A[i] = (float)(i %% 7) - 3.0f;
    for (int i = 0; i < K * N; ++i) B[i] = (float)(i %% 5) - 2.0f;
    int status = polycomp_mm(A, B, C);
    for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
            float want = 0;
            for (int k = 0; k < K; ++k) want += A[m * K + k] * B[k * N + n];
            if (std::fabs(C[m * N + n] - want) > 1e-3f) {
                std::printf("C[%%d][%%d] = %%g, expected %%g\n", m, n, C[m * N + n], want);
                return 1;
            }
        }
    std::printf("ok %%d\n", status);
    return status;
}
"""


# the harness builds with -Wall -Wextra -Werror; a generated kernel takes every array,
# used or not
QUIET = ("-Wno-unused-parameter",)


def _tsan_source(barrier_after_copy: bool) -> str:
    sizes = {"m": 12, "k": 40, "n": 10}
    kernel = polycomp.compile(MATMUL, sizes={"M": 12, "K": 40, "N": 10}, target="cuda",
                              gpu_block=(8, 4))
    text = kernel.source
    assert "__syncthreads();" in text
    if not barrier_after_copy:
        text = text.replace("__syncthreads();", "(void)0;", 1)
    return text + HOST_MAIN % sizes


@needs_cc
def test_tsan_sees_no_race_in_the_promoted_matmul(tmp_path):
    from test_cuda_emulation import run_tsan

    done = run_tsan(tmp_path, "mm_tsan", _tsan_source(True), *QUIET)
    assert "ThreadSanitizer" not in done.stderr, done.stderr
    assert done.returncode == 0 and done.stdout.strip() == "ok 0", done.stdout + done.stderr


@needs_cc
def test_tsan_reports_the_promoted_matmul_without_its_barrier(tmp_path):
    from test_cuda_emulation import run_tsan

    done = run_tsan(tmp_path, "mm_race", _tsan_source(False), *QUIET)
    assert "WARNING: ThreadSanitizer: data race" in done.stderr, done.stderr
