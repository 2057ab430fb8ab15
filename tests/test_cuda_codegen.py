"""The CUDA targets (issue 14): GPU mapping (scheduler/gpu_mapping.py), the CUDA dialect
(codegen/cuda.py) and the ``cuda`` / ``cuda-emulated`` target objects
(polycomp/targets/cuda.py), with ``--target`` in the CLI.

Without a GPU: every program compiles to CUDA source under ``target="cuda"`` (the isl
AST checked as for OpenMP), and under ``cuda-emulated`` the same text, built by g++ with
polycomp_cuda.h's CPU emulation, runs and must match numpy (floats within tolerance,
integers bit for bit). The mapping is visible as ``kernel``/``block``/``thread`` marks;
a band without parallelism becomes a single-thread kernel; a mapped loop that carries a
dependence inside its kernel is refused. Small blocks keep the emulation fast.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import polycomp
import polycomp.testing
from polycomp.cli import main
from polycomp.errors import IllegalScheduleError, OptionError, UnsupportedError
from polycomp.scheduler import tree as T
from polycomp.targets import get_target
from polycomp.targets.cuda import DeviceUnavailableError, gpu_available
from test_tc_corpus import CORPUS, conv, f32

EXAMPLES = Path(polycomp.__file__).parent / "examples"
EMULATED = {"target": "cuda-emulated", "gpu_block": (8, 4)}
needs_cc = pytest.mark.needs_cc

# deep-learning operators: (source, inputs, numpy reference)
OPERATORS = {
    "matmul": ("def matmul(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }",
               lambda r: [f32(r, 19, 11), f32(r, 11, 37)], lambda a, b: a @ b),
    "conv3x3": ("""
        def conv3x3(float(N, C, H, W) I, float(F, C, KH, KW) Wt, float(F) bias) -> (O) {
            O(n, f, h, w) +=! I(n, c, h + kh, w + kw) * Wt(f, c, kh, kw)
            O(n, f, h, w) = fmax(O(n, f, h, w) + bias(f), 0.0)
        }""", lambda r: [f32(r, 2, 3, 10, 9), f32(r, 5, 3, 3, 3) - 0.5, f32(r, 5) - 0.5],
        lambda i, w, b: np.maximum(conv(i, w, 1) + b[None, :, None, None], 0)),
    "softmax": (CORPUS["softmax"][0], lambda r: [f32(r, 6, 33)], CORPUS["softmax"][2]),
    "layernorm": (CORPUS["layernorm"][0], lambda r: [f32(r, 5, 20), f32(r, 20), f32(r, 20), 1e-5],
                  CORPUS["layernorm"][2]),
    # rows long enough for row blocks (scheduler/gpu_rows.py): a block per row, its loops
    # over the threads, barriers between them; layernorm's rows longer than a block
    "softmax_rows": (CORPUS["softmax"][0], lambda r: [f32(r, 5, 70)], CORPUS["softmax"][2]),
    "layernorm_rows": (CORPUS["layernorm"][0],
                       lambda r: [f32(r, 3, 300), f32(r, 300), f32(r, 300), 1e-5],
                       CORPUS["layernorm"][2]),
    "row_sum": ("def rowsum(float(M, N) A) -> (s) { s(i) +=! A(i, j) }",
                lambda r: [f32(r, 13, 40)], lambda a: a.sum(1)),
    "stencil": ("""
        def blur(float(H, W) A) -> (B) {
            B(i, j) = 0.25 * (A(i, j) + A(i + 1, j) + A(i, j + 1) + A(i + 1, j + 1))
        }""", lambda r: [f32(r, 12, 17)],
        lambda a: 0.25 * (a[:-1, :-1] + a[1:, :-1] + a[:-1, 1:] + a[1:, 1:])),
    # a full reduction, then every element shifted by it: two kernels at least (the
    # shift needs the whole reduction), the reduction a single thread
    "two_kernels": ("""
        def center(float(M, N) A) -> (O) {
            mx() max=! A(i, j)
            O(i, j) = A(i, j) - mx()
        }""", lambda r: [f32(r, 7, 9)], lambda a: a - a.max()),
}

EXAMPLE_SIZES = {
    "conv2d": {"N": 1, "C": 2, "H": 7, "W": 6, "F": 3, "KH": 3, "KW": 2},
    "layernorm": {"N": 4, "D": 10},
    "matmul": {"M": 9, "N": 11, "K": 5},
    "softmax": {"N": 5, "D": 7},
    "trisolve_like": {"N": 9},
}


# a C loop nest with a scratch scalar (s: an array the generated code allocates)
MV_LOOPS = """void mv(int n, double A[n][n], double x[n], double y[n]) {
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (int j = 0; j < n; j++) s += A[i][j] * x[j];
        y[i] = 2.0 * s;
    } }"""


# every TC corpus program and operator, as "corpus/<key>" and "operator/<key>": the
# GPU passes' on/off tests run each
GPU_PROGRAMS = sorted(f"corpus/{k}" for k in CORPUS) + sorted(f"operator/{k}" for k in OPERATORS)


def results_with(name: str, **options) -> tuple:
    """The outputs (a tuple) of program ``name`` of GPU_PROGRAMS under cuda-emulated with
    ``options``, on fixed inputs (copied: a kernel may update an input in place)."""
    family, _, key = name.partition("/")
    source, inputs, _ = (CORPUS if family == "corpus" else OPERATORS)[key][:3]
    args = inputs(np.random.default_rng(5))
    kernel = polycomp.compile(source, target="cuda-emulated", **options)
    out = kernel(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    return out if isinstance(out, tuple) else (out,)


def close(got: np.ndarray, want: object) -> None:
    want = np.asarray(want, dtype=got.dtype)
    if got.dtype.kind in "iub":
        assert np.array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-5)


def marks(schedule) -> list[str]:
    return [n.mark_get_id().get_name() for n in T.nodes(schedule) if T.is_mark(n)]


def kernels(source: str) -> int:
    return len(re.findall(r"__global__ void", source))


def host_part(source: str) -> str:
    """The host side: the launch function both entries call, then the entries."""
    return source[source.index("static int polycomp_"):]


# ----------------------------------------------------------------------------- source

@pytest.mark.parametrize("name", sorted(EXAMPLE_SIZES))
def test_examples_compile_to_cuda_source(name):
    path = EXAMPLES / f"{name}.tc"
    kernel = polycomp.compile(path.read_text(), target="cuda", sizes=EXAMPLE_SIZES[name])
    text = kernel.source
    assert text.count('#include "polycomp_cuda.h"') == 1
    assert kernels(text) >= 1 and "POLYCOMP_LAUNCH(" in text
    assert re.search(r'extern "C" int polycomp_\w+\(', text)
    assert "#pragma omp" not in text and "restrict " not in text.replace("__restrict__ ", "")


def test_every_example_is_covered():
    assert {p.stem for p in EXAMPLES.glob("*.tc")} == set(EXAMPLE_SIZES)


def test_matmul_is_mapped_to_blocks_and_threads():
    kernel = polycomp.compile(OPERATORS["matmul"][0], target="cuda",
                              sizes={"M": 64, "N": 96, "K": 32})
    found = marks(kernel.schedule)
    assert found.count("kernel") == 2  # C = 0, then the products (pluto splits them)
    assert found.count("block") == 4 and found.count("thread") == 4
    text = kernel.source
    # n (contiguous in B and C) is x: neighbouring threads, neighbouring columns
    assert re.search(r"C\[\(\w+ \* c\d+ \+ c\d+\) \* 96 \+ \(32 \* c\d+ \+ c(\d+)\)\]", text)
    x_loop = re.search(r"for \(long (c\d+) = \(long\)threadIdx\.x;", text).group(1)
    assert re.search(rf"\(32 \* c\d+ \+ {x_loop}\)\] \+?= ", text)
    assert "dim3(3, 8, 1), dim3(32, 8, 1)" in host_part(text)
    assert "__launch_bounds__(256)" in text


def test_emit_schedule_shows_the_mapping_marks(capsys):
    path = str(EXAMPLES / "matmul.tc")
    assert main(["compile", path, "--target", "cuda", "--sizes", "M=64,N=64,K=64",
                 "--emit", "schedule"]) == 0
    out = capsys.readouterr().out
    for mark in ("kernel", "block", "thread"):
        assert f'mark: "{mark}"' in out


def test_cli_prints_the_cu_and_refuses_mistakes(capsys, tmp_path):
    path = str(EXAMPLES / "softmax.tc")
    assert main(["compile", path, "--target", "cuda", "--sizes", "N=8,D=16"]) == 0
    assert "__global__" in capsys.readouterr().out
    assert main(["compile", path, "--target", "cudda"]) == 1
    err = capsys.readouterr().err
    assert "did you mean 'cuda'" in err and "Traceback" not in err
    loop = tmp_path / "k.c"
    loop.write_text("void k(int n, double A[n]) { for (int i = 0; i < n; i++) A[i] = 2 * A[i]; }")
    assert main(["compile", str(loop), "--target", "cuda", "--emit", "file"]) == 1
    assert "--emit c" in capsys.readouterr().err
    assert main(["compile", str(loop), "--target", "cuda", "--sizes", "n=10"]) == 0
    assert "__global__" in capsys.readouterr().out


def test_a_band_without_parallelism_is_a_single_thread_kernel():
    source = """void scan(int n, double A[n]) {
        for (int i = 1; i < n; i++) A[i] = A[i - 1] + A[i]; }"""
    kernel = polycomp.compile_loops(source, target="cuda", sizes={"n": 100})
    assert marks(kernel.schedule) == ["kernel"]
    assert kernels(kernel.source) == 1 and "threadIdx" not in kernel.source
    assert "dim3(1, 1, 1), dim3(1, 1, 1)" in host_part(kernel.source)


def test_time_loop_stays_on_the_host():
    """isl's schedule of a 1-D Jacobi stencil: t on the host, one launch per step and
    statement, i shared out in each."""
    source = """void jacobi(int T, int n, double A[n], double B[n]) {
        for (int t = 0; t < T; t++) {
            for (int i = 1; i < n - 1; i++) B[i] = (A[i - 1] + A[i] + A[i + 1]) / 3;
            for (int i = 1; i < n - 1; i++) A[i] = (B[i - 1] + B[i] + B[i + 1]) / 3;
        } }"""
    kernel = polycomp.compile_loops(source, target="cuda", scheduler="isl",
                                    sizes={"T": 5, "n": 40})
    host = host_part(kernel.source)
    assert re.search(r"for \(long c0 = 0; c0 <= 4; c0 \+= 1\)", host)
    assert host.count("POLYCOMP_LAUNCH(") == 2 and "c0, polycomp_dev0" in host
    assert kernels(kernel.source) == 2 and "threadIdx.x" in kernel.source


@pytest.mark.parametrize("block", [(64, 32), (2048,), (0,), (8, 8, 128), (1, 2, 3, 4),
                                   (True,), "32"])
def test_bad_block_sizes_are_option_errors(block):
    with pytest.raises(OptionError, match="gpu_block"):
        polycomp.Options.create(target="cuda", gpu_block=block)


def test_bad_grid_sizes_are_option_errors():
    with pytest.raises(OptionError, match="gpu_grid.*65535"):
        polycomp.Options.create(target="cuda", gpu_grid=[10, 70000])
    assert polycomp.Options.create(gpu_block=[32, 32], gpu_grid=[4]).gpu_block == (32, 32)


def test_float16_is_refused_clearly():
    with pytest.raises(UnsupportedError, match="float16"):
        polycomp.compile("def h(float16(N) A) -> (B) { B(i) = A(i) * 2.0 }", target="cuda",
                         sizes={"N": 4})


def test_calling_a_cuda_kernel_without_a_gpu_is_a_clear_error():
    if gpu_available()[0]:
        pytest.skip("a GPU is available here")
    kernel = polycomp.compile(OPERATORS["matmul"][0], target="cuda",
                              sizes={"M": 4, "N": 4, "K": 4})
    assert "__global__" in kernel.source
    with pytest.raises(DeviceUnavailableError, match="cuda-emulated") as info:
        kernel(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32))
    assert isinstance(info.value, polycomp.PolycompError)


def test_targets_are_registered_with_their_passes():
    cuda, emulated = get_target("cuda"), get_target("cuda-emulated")
    for target in (cuda, emulated):
        assert target.marks == {"kernel", "block", "thread"}
        assert [name for name, _ in target.passes] == ["gpu_mapping", "gpu_promotion"]
        assert not target.neutral_tiling and target.source_suffix == ".cu"
    flags, _ = emulated.build_flags("library", ["x"])
    assert "-std=c++17" in flags and "-pthread" in flags and flags[-2:] == ["-x", "c++"]
    flags, _ = cuda.build_flags("library", ["x"])
    assert "-arch=sm_80" in flags and "-shared" in flags


# ----------------------------------------------------------------------------- running

@needs_cc
@pytest.mark.parametrize("name", sorted(EXAMPLE_SIZES))
def test_examples_run_emulated(name):
    example = (EXAMPLES / f"{name}.tc").read_text()
    definition_sizes = EXAMPLE_SIZES[name]
    kernel = polycomp.compile(example, **EMULATED)
    reference = polycomp.compile(example, scheduler="none", parallel=False)
    rng = np.random.default_rng(1)
    args = polycomp.testing.random_arguments(kernel.interface, definition_sizes, rng)
    got, want = kernel(*args), reference(*args)
    close(got, want)


@needs_cc
@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_operators_run_emulated(name):
    source, make_inputs, reference = OPERATORS[name]
    args = make_inputs(np.random.default_rng(3))
    kernel = polycomp.compile(source, **EMULATED)
    close(kernel(*args), reference(*args))
    if name == "two_kernels":
        assert kernels(kernel.source) >= 2
        assert "dim3(1, 1, 1), dim3(1, 1, 1)" in host_part(kernel.source)
        assert "threadIdx.x" in kernel.source


@needs_cc
@pytest.mark.parametrize("name", sorted(set(CORPUS) - {"matmul", "softmax", "layernorm"}))
def test_tc_corpus_runs_emulated(name):
    source, make_inputs, reference = CORPUS[name]
    args = make_inputs(np.random.default_rng(7))
    kernel = polycomp.compile(source, **EMULATED)
    close(kernel(*args), reference(*args))


@needs_cc
def test_default_blocks_and_a_small_grid_loop_over_everything():
    """gpu_grid of one block: the block loops run every tile in turn; default blocks
    (32, 8) larger than the loops they share."""
    source, make_inputs, reference = OPERATORS["matmul"]
    args = make_inputs(np.random.default_rng(5))
    for options in ({"gpu_grid": (1, 1)}, {}, {"gpu_block": (3,), "gpu_grid": (2,)}):
        kernel = polycomp.compile(source, target="cuda-emulated", **options)
        close(kernel(*args), reference(*args))


@needs_cc
def test_untiled_bands_are_strip_mined_in_place():
    source, make_inputs, reference = OPERATORS["matmul"]
    args = make_inputs(np.random.default_rng(9))
    kernel = polycomp.compile(source, target="cuda-emulated", tile=False, gpu_block=(4, 2))
    close(kernel(*args), reference(*args))
    assert {"kernel", "block", "thread"} <= set(marks(kernel.schedule))


@needs_cc
def test_a_loop_that_starts_anywhere_is_shared_by_value():
    """The first tile's point loop starts at 3, the others at 0: a value's thread is
    ``v mod blockDim`` either way."""
    kernel = polycomp.compile("def tail(float(N) A) -> (B) { B(i) = A(i) * 2.0 where i in 3:N }",
                              target="cuda-emulated", gpu_block=(4,), gpu_grid=(3,))
    a = np.arange(30, dtype=np.float32)
    close(kernel(a), np.where(np.arange(30) >= 3, 2 * a, 0))
    assert "polycomp_floorm((long)threadIdx.x - " in kernel.source


@needs_cc
def test_parametric_kernel_serves_several_sizes():
    kernel = polycomp.compile(OPERATORS["matmul"][0], parametric=True, **EMULATED)
    assert "long M" in kernel.source and "polycomp_imin(polycomp_imax(" in kernel.source
    rng = np.random.default_rng(2)
    for m, k, n in [(5, 3, 7), (17, 9, 33), (1, 1, 1)]:
        a, b = f32(rng, m, k), f32(rng, k, n)
        close(kernel(a, b), a @ b)


@needs_cc
def test_time_loop_runs_emulated():
    source = """void jacobi(int T, int n, double A[n], double B[n]) {
        for (int t = 0; t < T; t++) {
            for (int i = 1; i < n - 1; i++) B[i] = (A[i - 1] + A[i] + A[i + 1]) / 3;
            for (int i = 1; i < n - 1; i++) A[i] = (B[i - 1] + B[i] + B[i + 1]) / 3;
        } }"""
    rng = np.random.default_rng(4)
    a0, b0 = rng.random(30), rng.random(30)
    want_a, want_b = a0.copy(), b0.copy()
    polycomp.compile_loops(source, scheduler="none", parallel=False)(6, 30, want_a, want_b)
    for scheduler in ("isl", "pluto"):
        got_a, got_b = a0.copy(), b0.copy()
        polycomp.compile_loops(source, scheduler=scheduler, **EMULATED)(6, 30, got_a, got_b)
        np.testing.assert_allclose(got_a, want_a, rtol=1e-12)
        np.testing.assert_allclose(got_b, want_b, rtol=1e-12)


@needs_cc
def test_statuses_come_back_from_the_kernels():
    gather = polycomp.compile(CORPUS["gather"][0], **EMULATED)
    with pytest.raises(polycomp.PolycompError, match="out of bounds"):
        gather(np.ones((7, 3), np.float32), np.array([[0, 7]], np.int32))
    divide = polycomp.compile("def d(int32(N) A, int32(N) B) -> (O) { O(i) = A(i) / B(i) }",
                              **EMULATED)
    with pytest.raises(polycomp.errors.IntegerDivisionError):
        divide(np.ones(5, np.int32), np.array([1, 2, 0, 1, 1], np.int32))
    assert divide(np.full(3, 7, np.int32), np.array([2, -1, 7], np.int32)).tolist() == [3, -7, 1]


@needs_cc
def test_scratch_arrays_live_on_the_device():
    kernel = polycomp.compile_loops(MV_LOOPS, **EMULATED)
    rng = np.random.default_rng(6)
    a, x, y = rng.random((13, 13)), rng.random(13), np.zeros(13)
    kernel(13, a, x, y)
    np.testing.assert_allclose(y, 2 * a @ x)
    assert "polycomp_scratch0" in kernel.source


@needs_cc
def test_user_names_that_cuda_or_cpp_reserve_are_escaped():
    source = "def f(float(N) threadIdx, float(N) new) -> (free) { free(i) = threadIdx(i) * new(i) }"
    kernel = polycomp.compile(source, **EMULATED)
    out = kernel(np.full(5, 2, np.float32), np.full(5, 3, np.float32))
    assert out.tolist() == [6.0] * 5
    text = kernel.source
    assert "u_threadIdx" in text and "u_new" in text and "u_free" in text
    assert not re.search(r"[^_]\bnew\[", text)


@needs_cc
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.integers(1, 24), k=st.integers(1, 12), n=st.integers(1, 40),
       block=st.sampled_from([(4, 2), (8, 4), (32,), (5, 3, 2)]))
def test_matmul_emulated_matches_numpy(m, k, n, block):
    rng = np.random.default_rng(m * 10000 + k * 100 + n)
    a, b = f32(rng, m, k), f32(rng, k, n)
    kernel = polycomp.compile(OPERATORS["matmul"][0], target="cuda-emulated", gpu_block=block)
    close(kernel(a, b), a @ b)


# ----------------------------------------------------------------------------- the user's mapping

MATVEC = "def mv(float(M, N) A, float(N) x) -> (y) { y(i) +=! A(i, j) * x(j) }"


def matvec_tree(threads_on: str) -> str:
    """A hand-written mapping of MATVEC at M=6, N=4 (S0: y = 0, S1: the products):
    one thread per i, or (wrong) per j, whose reduction then spans threads."""
    domain = "{ S0[i] : 0 <= i <= 5; S1[i, j] : 0 <= i <= 5 and 0 <= j <= 3 }"
    outer, inner = ("i", "j") if threads_on == "i" else ("j", "i")
    return f"""domain: "{domain}"
child:
  sequence:
  - filter: "{{ S0[i] }}"
    child:
      mark: "kernel"
      child:
        mark: "thread"
        child:
          schedule: "[{{ S0[i] -> [(i)] }}]"
  - filter: "{{ S1[i, j] }}"
    child:
      mark: "kernel"
      child:
        mark: "thread"
        child:
          schedule: "[{{ S1[i, j] -> [({outer})] }}]"
          child:
            schedule: "[{{ S1[i, j] -> [({inner})] }}]"
"""


@needs_cc
def test_a_users_mapping_is_kept_and_checked():
    rng = np.random.default_rng(8)
    a, x = f32(rng, 6, 4), f32(rng, 4)
    good = polycomp.compile(MATVEC, scheduler="custom", schedule=matvec_tree("i"),
                            target="cuda-emulated", gpu_block=(4,))
    close(good(a, x), a @ x)
    # the user's mapping marks are kept (the promotion pass may add its own)
    assert [m for m in marks(good.schedule) if m in T.DECISION_MARKS] == [
        "kernel", "thread", "kernel", "thread"]
    bad = polycomp.compile(MATVEC, scheduler="custom", schedule=matvec_tree("j"),
                           target="cuda-emulated")
    with pytest.raises(IllegalScheduleError, match="'thread' carries a dependence"):
        bad(a, x)
