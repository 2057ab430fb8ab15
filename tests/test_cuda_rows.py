"""Row blocks (scheduler/gpu_rows.py): softmax and layernorm at row lengths a warp or
more run one row per block, each row's loops strided over the block's threads, with a
barrier between them; the results match numpy at block sizes that divide the rows or
not, with rows in turns over a small grid; the check refuses sibling thread loops
without a rows mark; TSan sees the race when the barrier after the row's maximum is
dropped. (The TSan-clean runs and nvcc's resources of softmax_rows and layernorm_rows
are test_cuda_tsan.py's and test_cuda_nvcc_corpus.py's, over test_cuda_codegen's
OPERATORS.)"""

from __future__ import annotations

import re

import numpy as np
import pytest

import polycomp
from polycomp.errors import IllegalScheduleError
from polycomp.scheduler import gpu_mapping as G
from polycomp.scheduler import gpu_rows as GR
from polycomp.scheduler import tree as T
from test_cuda_codegen import close, host_part
from test_cuda_tsan import make_case, run_under_tsan
from test_tc_corpus import CORPUS

pytestmark = pytest.mark.needs_cc

SOFTMAX, SOFTMAX_REF = CORPUS["softmax"][0], CORPUS["softmax"][2]
LAYERNORM, LAYERNORM_REF = CORPUS["layernorm"][0], CORPUS["layernorm"][2]


def mark_names(schedule) -> list[str]:
    return [n.mark_get_id().get_name() for n in T.nodes(schedule) if T.is_mark(n)]


def f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def test_softmax_runs_a_block_per_row_and_its_loops_over_the_threads():
    kernel = polycomp.compile(SOFTMAX, target="cuda")
    kernel.specialize({"N": 96, "D": 700}, build=False)
    names = mark_names(kernel.schedule)
    assert names.count(GR.MARK_ROWS) == 1 and names.count("kernel") == 1
    # the max and the sum are block reductions; exp and the division plain thread loops
    assert sum(n.startswith("reduce:") for n in names) == 2 and names.count("thread") == 4
    # 96 rows: 96 blocks of 256 threads (each thread 3 columns of 700)
    assert re.search(r"dim3\(96, 1, 1\), dim3\(256, 1, 1\)", host_part(kernel.source))
    # a barrier after each of the row's 6 statements, beside the reductions' own
    assert kernel.source.count("__syncthreads();") >= 6 + 2 * 2
    assert "if (threadIdx.x == 0)" in kernel.source  # mx = -inf, s = 0: thread 0


def test_short_rows_and_the_option_off_keep_the_usual_mapping():
    short = polycomp.compile(SOFTMAX, target="cuda")
    short.specialize({"N": 96, "D": 16}, build=False)
    assert GR.MARK_ROWS not in mark_names(short.schedule)
    off = polycomp.compile(SOFTMAX, target="cuda", gpu_block_reduction=False)
    off.specialize({"N": 96, "D": 700}, build=False)
    assert GR.MARK_ROWS not in mark_names(off.schedule)


@pytest.mark.parametrize("shape,options", [
    ((7, 64), {}),
    ((3, 300), {"gpu_block": (64,)}),     # each thread 5 columns, the last fewer
    ((9, 45), {"gpu_grid": (2,)}),        # two blocks take the rows in turns
    ((4, 40), {"gpu_block": (1,)}),       # one thread: the reductions' trees are empty
    ((5, 257), {"gpu_block": (96,)}),     # a block no power of two
])
def test_row_blocks_compute_softmax_and_layernorm(shape, options):
    rng = np.random.default_rng(sum(shape))
    x = f32(rng, *shape)
    softmax = polycomp.compile(SOFTMAX, target="cuda-emulated", **options)
    close(softmax(x), SOFTMAX_REF(x))
    assert GR.MARK_ROWS in mark_names(softmax.schedule)
    g, b = f32(rng, shape[1]), f32(rng, shape[1])
    layernorm = polycomp.compile(LAYERNORM, target="cuda-emulated", **options)
    close(layernorm(x, g, b, 1e-5), LAYERNORM_REF(x, g, b, 1e-5))
    assert GR.MARK_ROWS in mark_names(layernorm.schedule)


def _without_rows_mark(schedule):
    for node in T.nodes(schedule):
        if T.is_mark(node, GR.MARK_ROWS):
            return node.delete().get_schedule()
    raise AssertionError("no rows mark")


def test_the_check_wants_a_rows_mark_between_sibling_thread_loops():
    kernel = polycomp.compile(SOFTMAX, target="cuda")
    variant = kernel.specialize({"N": 8, "D": 64}, build=False)
    compiled = variant.compiled
    G.check_mapping(compiled.schedule, compiled.dependences, compiled.program)  # as made
    stripped = _without_rows_mark(compiled.schedule)
    with pytest.raises(IllegalScheduleError, match="rows"):
        G.check_mapping(stripped, compiled.dependences, compiled.program)


def test_a_rows_mark_must_sit_above_a_sequence():
    kernel = polycomp.compile(SOFTMAX, target="cuda")
    compiled = kernel.specialize({"N": 8, "D": 64}, build=False).compiled
    for node in T.nodes(compiled.schedule):
        if T.is_mark(node, T.MARK_THREAD):  # a rows mark where there is no sequence
            moved = node.insert_mark(isl_id(GR.MARK_ROWS)).get_schedule()
            break
    with pytest.raises(IllegalScheduleError, match="not above a sequence"):
        G.check_mapping(moved, compiled.dependences, compiled.program)


def isl_id(name: str):
    import islpy as isl

    return isl.Id(name)


def test_tsan_sees_the_race_when_the_barrier_after_the_maximum_goes(tmp_path):
    case = make_case("operator/softmax_rows")
    lines = case.text.splitlines()
    use = next(i for i, line in enumerate(lines) if "expf(" in line)  # e = exp(X - mx)
    barrier = max(i for i in range(use) if lines[i].strip() == "__syncthreads();")
    del lines[barrier]
    case.text = "\n".join(lines) + "\n"
    done = run_under_tsan(tmp_path, case, attempts=8)
    assert "WARNING: ThreadSanitizer: data race" in done.stderr, done.stderr
    assert done.returncode == 66
