"""Block reductions for the CUDA targets (issue 14 item 3, "reductions map to per-thread
partial results and a block reduction"): scheduler/gpu_reduction.py decides (inside
gpu_mapping), codegen/cuda_reduction.py prints.

A kernel whose parallel loops are short (fewer iterations than a block's threads) and
whose reduction loop is long shares the reduction loop out over threadIdx.x: each
thread accumulates a partial from the operator's identity, the block folds the partials
in shared memory, and thread 0 combines the result into the element. Checked here:
the source has that shape (and loses it with ``gpu_block_reduction=False``); the
emulated runs (``cuda-emulated``: g++, the header's fibers) match numpy for row sums,
full reductions to a scalar, max, min, integer sums and products (bit for bit) at odd
block sizes (1, 3, 32, 33 x 2, ...) and sizes that are no multiple of the block; on and
off agree on the TC corpus and the operator suite; ThreadSanitizer finds no race in the
block-reduced row sum and reports one when a barrier of its tree is taken out; nvcc
builds it for sm_80 within the limits.
"""

from __future__ import annotations

import re

import islpy as isl
import numpy as np
import pytest

import polycomp
import polycomp.cuda
from polycomp import islutil as U
from polycomp.errors import IllegalScheduleError
from polycomp.scheduler import gpu_reduction as R
from polycomp.scheduler import tree as T
from test_cuda_codegen import GPU_PROGRAMS, close, results_with
from test_tc_corpus import CORPUS, f32

needs_cc = pytest.mark.needs_cc
needs_nvcc = pytest.mark.needs_nvcc

ROW_SUM = "def rowsum(float(M, N) A) -> (s) { s(i) +=! A(i, j) }"
COL_SUM = "def colsum(float(M, N) A) -> (s) { s(j) +=! A(i, j) }"
DOT = "def dot(float(N) X, float(N) Y) -> (s) { s() +=! X(i) * Y(i) }"
ROW_MAX = "def rowmax(float(M, N) A) -> (s) { s(i) max=! A(i, j) }"
ROW_MIN = "def rowmin(float(M, N) A) -> (s) { s(i) min=! A(i, j) }"
INT_SUM = "def isum(int32(M, N) A) -> (s) { s(i) +=! A(i, j) * 3 }"
INT_PROD = "def iprod(int64(M, N) A) -> (s) { s(i) *=! A(i, j) }"
INT_MAX = "def imax(int16(M, N) A) -> (s) { s(i) max=! A(i, j) }"


def _ints(dtype, low=-1000, high=1000):
    return lambda r, *shape: r.integers(low, high, size=shape).astype(dtype)


# name -> (source, inputs at (rows, length), numpy reference)
PROGRAMS = {
    "row_sum": (ROW_SUM, lambda r, m, n: [f32(r, m, n) - 0.5], lambda a: a.sum(1)),
    "col_sum": (COL_SUM, lambda r, m, n: [f32(r, n, m) - 0.5], lambda a: a.sum(0)),
    "dot": (DOT, lambda r, m, n: [f32(r, m * n), f32(r, m * n)],
            lambda x, y: np.array(np.dot(x.astype(np.float64), y), np.float32)),
    "row_max": (ROW_MAX, lambda r, m, n: [f32(r, m, n) - 0.5], lambda a: a.max(1)),
    "row_min": (ROW_MIN, lambda r, m, n: [f32(r, m, n) - 0.5], lambda a: a.min(1)),
    # int32 sums that wrap around: the same bits in any order
    "int_sum": (INT_SUM, lambda r, m, n: [_ints(np.int32, -2**30, 2**30)(r, m, n)],
                lambda a: (a.astype(np.int64) * 3).sum(1).astype(np.int32)),
    "int_prod": (INT_PROD, lambda r, m, n: [_ints(np.int64, -3, 4)(r, m, n)],
                 lambda a: np.prod(a, axis=1)),
    "int_max": (INT_MAX, lambda r, m, n: [_ints(np.int16, -30000, 30000)(r, m, n)],
                lambda a: a.max(1)),
}

BLOCKS = [(1,), (3,), (32,), (33, 2), (7, 5), (256,)]
# (rows, reduction length): no multiple of any block; fewer rows than most blocks'
# threads, so that the block reduction applies
SIZES = [(2, 97), (1, 40), (5, 301)]


def reduce_marks(schedule) -> list[frozenset[str]]:
    return [R.parse_mark(n.mark_get_id().get_name()) for n in T.nodes(schedule)
            if T.is_mark(n) and R.parse_mark(n.mark_get_id().get_name()) is not None]


def kernel_text(source: str, k: int) -> str:
    start = source.index(f"_kernel{k}(")
    return source[start:source.index("\n}\n", start)]


def _run(kernel, args):
    return kernel(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])


# ----------------------------------------------------------------------------- decisions

def test_the_member_is_chosen_from_the_extents():
    # a row sum: 13 rows, 4000 columns, 256 threads -> reduce over the columns
    assert R.choose_member([13, 4000], [0], [1], 256, 3) == 1
    # enough rows to fill the block: the usual mapping
    assert R.choose_member([300, 4000], [0], [1], 256, 3) is None
    # a short reduction: not worth the barriers
    assert R.choose_member([13, 20], [0], [1], 256, 3) is None
    # a full reduction (no parallel member at all)
    assert R.choose_member([5000], [], [0], 256, 3) == 0
    # two members not mappable, or the one left not a reduction's, or unknown sizes
    assert R.choose_member([4, 64, 64], [0], [1, 2], 256, 3) is None
    assert R.choose_member([13, 4000], [0], [], 256, 3) is None
    assert R.choose_member([13, None], [0], [1], 256, 3) is None
    # more parallel members than block axes
    assert R.choose_member([2, 2, 64], [0, 1], [2], 256, 1) is None


def test_the_row_sum_is_a_block_reduction():
    kernel = polycomp.compile(ROW_SUM, sizes={"M": 13, "N": 4000}, target="cuda")
    assert reduce_marks(kernel.schedule) == [frozenset({"S1"})]
    text = kernel_text(kernel.source, 0)
    # the columns over the threads, the rows over the blocks
    assert re.search(r"for \(long c1 = \(long\)threadIdx\.x; c1 <= 3999; "
                     r"c1 \+= \(long\)blockDim\.x\)", text), text
    assert re.search(r"for \(long c0 = \(long\)blockIdx\.x; c0 <= 12; c0 \+= "
                     r"\(long\)gridDim\.x\)", text), text
    # a partial from -0.0, a shared buffer, the tree's barriers, thread 0's combine
    part = re.search(r"float (polycomp_part\w+) = \(float\)\(-0\.0\);", text).group(1)
    assert re.search(rf"{part} \+= A\[", text)
    assert re.search(r"__shared__ float polycomp_reduce0_0\[256\];", text)
    assert text.count("__syncthreads();") == 2
    assert re.search(r"if \(polycomp_reduce0_tid == 0\)\s+s\[c0\] = s\[c0\] \+ "
                     r"polycomp_reduce0_0\[0\];", text), text
    # the initialisation: in one thread, in memory, before the first barrier
    assert re.search(r"if \(threadIdx\.x == 0\)\s+s\[c0\] = 0\.0f;", text)
    assert text.index("s[c0] = 0.0f") < text.index("__syncthreads")
    assert "dim3(13, 1, 1), dim3(256, 1, 1)" in kernel.source


def test_block_reductions_can_be_turned_off():
    sizes = {"M": 13, "N": 4000}
    on = polycomp.compile(ROW_SUM, sizes=sizes, target="cuda")
    off = polycomp.compile(ROW_SUM, sizes=sizes, target="cuda", gpu_block_reduction=False)
    assert reduce_marks(off.schedule) == [] and "polycomp_reduce" not in off.source
    # today's mapping: the rows over the threads, each thread a whole row
    assert "dim3(1, 1, 1), dim3(13, 1, 1)" in off.source
    assert on.options.key() != off.options.key()


def test_no_block_reduction_where_the_threads_are_busy_or_the_loop_short():
    many_rows = polycomp.compile(ROW_SUM, sizes={"M": 4000, "N": 4000}, target="cuda")
    short = polycomp.compile(ROW_SUM, sizes={"M": 3, "N": 20}, target="cuda")
    parametric = polycomp.compile(ROW_SUM, target="cuda", parametric=True)
    # sizes unknown: no telling a long loop from a short one
    for kernel in (many_rows, short, parametric):
        assert reduce_marks(kernel.schedule) == []
    assert "polycomp_reduce" not in many_rows.source + short.source


def test_the_reduction_buffer_counts_in_the_shared_memory_budget():
    from polycomp.scheduler import gpu_promotion as PR

    source = "def colsum(double(M, N) A) -> (s) { s(j) +=! A(i, j) }"
    # a column of 5000 doubles read uncoalesced: 40000 bytes, within the staging budget
    # alone, over it with the tree's 1024 doubles
    assert 5000 * 8 <= PR.SHARED_BUDGET < 5000 * 8 + 1024 * 8
    kernel = polycomp.compile(source, sizes={"M": 5000, "N": 3}, target="cuda",
                              gpu_block=(1024,))
    assert reduce_marks(kernel.schedule) == [frozenset({"S1"})]
    assert "shared:" not in kernel.schedule.to_str()
    smaller = polycomp.compile(source, sizes={"M": 1000, "N": 3}, target="cuda",
                               gpu_block=(1024,))
    assert "shared:A" in smaller.schedule.to_str()  # 8000 + 8192 bytes: staged


def test_the_full_reduction_runs_in_one_block():
    kernel = polycomp.compile(DOT, sizes={"N": 5000}, target="cuda")
    assert reduce_marks(kernel.schedule) == [frozenset({"S1"})]
    assert re.search(r"dim3\(1, 1, 1\), dim3\(256, 1, 1\)", kernel.source)
    assert "s[0] = s[0] + polycomp_reduce0_0[0]" in kernel.source


def test_a_reduce_mark_on_a_loop_that_is_no_reduction_is_refused():
    from polycomp.scheduler.gpu_mapping import check_mapping

    kernel = polycomp.compile(ROW_SUM, sizes={"M": 13, "N": 4000}, target="cuda")
    renamed = kernel.schedule.to_str().replace('"reduce:S1"', '"reduce:S0"')
    tree = isl.Schedule.read_from_str(U.CTX, renamed)
    with pytest.raises(IllegalScheduleError, match="no block reduction"):
        check_mapping(tree, kernel.dependences, kernel.program)
    check_mapping(kernel.schedule, kernel.dependences, kernel.program)


# ----------------------------------------------------------------------------- runs

# each program with two block shapes, the shapes rotating over the programs so that
# every shape meets several programs (the whole product cost a minute of the suite)
RUNS = [(name, BLOCKS[(i + k) % len(BLOCKS)])
        for i, name in enumerate(sorted(PROGRAMS)) for k in (0, len(BLOCKS) // 2)]


@needs_cc
@pytest.mark.parametrize("name, block", RUNS,
                         ids=[f"{n}-{'x'.join(map(str, b))}" for n, b in RUNS])
def test_block_reductions_match_numpy(name, block):
    source, inputs, reference = PROGRAMS[name]
    kernel = polycomp.compile(source, target="cuda-emulated", gpu_block=block)
    threads = int(np.prod(block))
    for m, n in SIZES:
        args = inputs(np.random.default_rng(m * 7 + n), m, n)
        got = _run(kernel, args)
        close(got, reference(*args))
        text = kernel.source
        parallel = 1 if name == "dot" else m
        length = m * n if name == "dot" else n
        # the block reduction is there exactly where the decision says so
        assert ("polycomp_reduce" in text) == (parallel < threads and length >= 32), (
            name, block, m, n)


@needs_cc
@pytest.mark.parametrize("grid", [(1,), (2,)])
@pytest.mark.parametrize("name", ["row_sum", "row_max", "int_sum"])
def test_a_block_reduces_several_rows_in_turn(name, grid):
    # fewer blocks than rows: a block's loop over its rows reuses the shared buffer
    source, inputs, reference = PROGRAMS[name]
    kernel = polycomp.compile(source, target="cuda-emulated", gpu_block=(33,), gpu_grid=grid)
    args = inputs(np.random.default_rng(4), 7, 131)
    close(_run(kernel, args), reference(*args))
    assert "polycomp_reduce0_0" in kernel.source
    assert f"dim3({grid[0]}, 1, 1), dim3(33, 1, 1)" in kernel.source


@needs_cc
def test_a_reduction_into_an_element_with_a_value_keeps_it():
    # the running max starts from the first kernel's values: s = s (op) block result
    source = """
    def f(float(M, N) A, float(M) b) -> (s) {
        s(i) = b(i)
        s(i) max= A(i, j)
    }"""
    kernel = polycomp.compile(source, target="cuda-emulated", gpu_block=(64,))
    rng = np.random.default_rng(1)
    a, b = f32(rng, 3, 200) - 0.5, f32(rng, 3) + np.float32([0, 1, 0])
    close(_run(kernel, [a, b]), np.maximum(b, a.max(1)))


@needs_cc
@pytest.mark.parametrize("name", GPU_PROGRAMS)
def test_block_reduction_on_and_off_agree(name):
    on = results_with(name, gpu_block=(33, 2), gpu_block_reduction=True)
    off = results_with(name, gpu_block=(33, 2), gpu_block_reduction=False)
    for a, b in zip(on, off, strict=True):
        close(a, b)  # integers bit for bit; floats up to the order of the sums


@needs_cc
def test_softmax_and_layernorm_at_long_rows():
    # the rows' reductions stay in one thread (a band below the row loop: not built);
    # the results must hold at sizes where a row is long
    for key, args in (("softmax", lambda r: [f32(r, 3, 300)]),
                      ("layernorm", lambda r: [f32(r, 3, 300), f32(r, 300), f32(r, 300),
                                               1e-5])):
        source, _, reference = CORPUS[key]
        values = args(np.random.default_rng(2))
        for block in ((3,), (33, 2)):
            kernel = polycomp.compile(source, target="cuda-emulated", gpu_block=block)
            close(_run(kernel, values), reference(*values))


# ----------------------------------------------------------------------------- TSan

@needs_cc
def test_the_block_reduced_row_sum_is_tsan_clean(tmp_path):
    from test_cuda_tsan import assert_tsan_clean, make_case

    case = make_case("operator/row_sum")
    assert "polycomp_reduce0_0" in case.text  # 13 rows, 40 columns: block-reduced
    assert_tsan_clean(tmp_path, case, "operator/row_sum")


@needs_cc
def test_one_block_reducing_every_row_in_turn_is_tsan_clean(tmp_path, monkeypatch):
    import test_cuda_tsan
    from test_cuda_tsan import assert_tsan_clean, make_case

    # one block for the 13 rows: the buffer is reused from row to row with no barrier
    # between thread 0's read of the result and the next row's stores
    compile_ = polycomp.compile
    monkeypatch.setattr(test_cuda_tsan.polycomp, "compile",
                        lambda *a, **k: compile_(*a, gpu_grid=(1,), **k))
    case = make_case("operator/row_sum")
    assert "polycomp_reduce0_0" in case.text and "dim3(1, 1, 1), dim3(40, 1, 1)" in case.text
    assert_tsan_clean(tmp_path, case, "operator/row_sum, one block")


@needs_cc
def test_tsan_reports_the_race_without_the_reductions_first_barrier(tmp_path):
    from test_cuda_tsan import make_case, run_under_tsan

    case = make_case("operator/row_sum")
    store = re.search(r"polycomp_reduce0_0\[polycomp_reduce0_tid\] = polycomp_part\w+;\n"
                      r"\s*__syncthreads\(\);\n", case.text)
    assert store, case.text
    # thread 0 now reads the partials of the others while they may still store them
    case.text = (case.text[:store.start()]
                 + store.group(0).replace("__syncthreads();", "")
                 + case.text[store.end():])
    done = run_under_tsan(tmp_path, case, attempts=8)
    assert "WARNING: ThreadSanitizer: data race" in done.stderr, done.stderr
    assert done.returncode == 66
    assert re.search(r"polycomp_rowsum_kernel\d+\b.*kernel\.cu:\d+", done.stderr)


# ----------------------------------------------------------------------------- nvcc

@needs_nvcc
def test_nvcc_builds_the_block_reduction_within_the_limits():
    if polycomp.cuda.nvcc_path() is None:
        pytest.skip("nvcc is not on the PATH")
    for source, sizes, dtype_bytes in ((ROW_SUM, {"M": 13, "N": 4000}, 4),
                                       (INT_PROD, {"M": 5, "N": 999}, 8),
                                       (DOT, {"N": 100000}, 4)):
        kernel = polycomp.compile(source, sizes=sizes, target="cuda")
        assert "polycomp_reduce0_0" in kernel.source
        resources = polycomp.cuda.ptxas_resources(kernel.source, "sm_80")
        assert len(resources) == len(re.findall(r"__global__ void", kernel.source))
        reduced = [r for r in resources if r.shared_bytes >= 256 * dtype_bytes]
        assert reduced, resources  # the tree's buffer: 256 threads' partials
        for r in resources:
            assert 0 < r.registers <= 255 and r.shared_bytes <= 48 * 1024
            assert r.spill_stores == 0
        polycomp.cuda.check_limits(resources, threads_per_block=256)
