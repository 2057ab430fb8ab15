import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import polycomp
from polycomp.errors import ArgumentError, CompilerError

from programs import matmul

pytestmark = pytest.mark.needs_cc


@pytest.fixture(scope="module")
def mm():
    return polycomp.compile_program(matmul())


def arrays(m=8, k=6, n=5, dtype=np.float32):
    rng = np.random.default_rng(0)
    return rng.random((m, k)).astype(dtype), rng.random((k, n)).astype(dtype), np.zeros((m, n), dtype)


def test_wrong_count(mm):
    a, b, c = arrays()
    with pytest.raises(ArgumentError, match="takes 3 argument"):
        mm(a, b)


def test_wrong_dtype(mm):
    a, b, c = arrays()
    with pytest.raises(ArgumentError, match="dtype float32"):
        mm(a.astype(np.float64), b, c)


def test_wrong_rank(mm):
    a, b, c = arrays()
    with pytest.raises(ArgumentError, match="rank 2"):
        mm(a.reshape(-1), b, c)


def test_inconsistent_sizes(mm):
    a, b, c = arrays()
    with pytest.raises(ArgumentError, match="size K"):
        mm(a, np.zeros((7, 5), np.float32), c)


def test_output_too_small_cannot_be_written_past(mm):
    a, b, _ = arrays()
    big = np.zeros((100,), np.float32)
    small = big[:20].reshape(4, 5)  # a view into a larger buffer: must be rejected by shape
    with pytest.raises(ArgumentError, match="size M"):
        mm(a, b, small)
    assert not big.any()


def test_not_an_array(mm):
    a, b, c = arrays()
    with pytest.raises(ArgumentError, match="numpy array"):
        mm(a.tolist(), b, c)


def test_read_only_output(mm):
    a, b, c = arrays()
    c.flags.writeable = False
    with pytest.raises(ArgumentError, match="read-only"):
        mm(a, b, c)


def test_aliasing_output(mm):
    a = np.zeros((6, 6), np.float32)
    with pytest.raises(ArgumentError, match="share memory"):
        mm(a, a, a)


def test_non_contiguous_arguments_are_copied_and_written_back(mm):
    a, b, c = arrays()
    a_strided = np.asfortranarray(a)
    c_view = np.zeros((5, 8), np.float32).T  # not C-contiguous
    mm(a_strided, b[:, :], c_view)
    np.testing.assert_allclose(c_view, a @ b, rtol=1e-5)


def test_missing_compiler_is_a_clear_error():
    kernel = polycomp.compile_program(matmul(), cc="no-such-compiler-xyz")
    with pytest.raises(CompilerError, match="not found"):
        kernel(*arrays())


CHILD = textwrap.dedent("""
    import sys, numpy as np
    sys.path.insert(0, {tests!r})
    import polycomp
    from programs import matmul
    kernel = polycomp.compile_program(matmul(), scheduler="isl")
    a = np.ones((64, 32), np.float32); b = np.ones((32, 48), np.float32); c = np.zeros((64, 48), np.float32)
    kernel(a, b, c)
    assert (c == 32).all()
    print("ok")
""")


def test_concurrent_processes_share_the_cache_safely(tmp_path):
    env = dict(os.environ, POLYCOMP_CACHE_DIR=str(tmp_path / "cache"))
    code = CHILD.format(tests=os.path.dirname(__file__))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert out.strip() == "ok"
    libraries = list((tmp_path / "cache").glob("*.so"))
    assert len(libraries) == 1  # one kernel, one library: no partial or duplicate files
    assert not list((tmp_path / "cache").glob(".*tmp"))


def test_outputs_and_temporaries_are_cache_line_aligned():
    from polycomp.memory import ALIGNMENT, aligned_empty, aligned_zeros, is_aligned

    shapes = [((3, 5), "float32"), ((1,), "int8"), ((7, 9, 2), "float64"), ((0, 4), "int32")]
    for shape, dtype in shapes:
        for make in (aligned_empty, aligned_zeros):
            a = make(shape, dtype)
            assert a.shape == shape and a.dtype == np.dtype(dtype) and a.flags.c_contiguous
            assert a.size == 0 or a.ctypes.data % ALIGNMENT == 0  # empty: nothing to load
    assert not aligned_zeros((4, 4), "float64").any()
    kernel = polycomp.compile(
        "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m,n) +=! A(m,k) * B(k,n) }")
    a = np.ones((5, 3), np.float32)
    c = kernel(a, a.T.copy())
    assert is_aligned(c) and np.array_equal(c, np.full((5, 5), 3, np.float32))


# ----------------------------------------------------------------------------- call plans

TWO_STAGE = """def two(float(N) A, float(N) C) -> (B) {
    T(i) = A(i) * 2
    B(i) = T(i) + C(i)
}"""


@pytest.mark.needs_cc
def test_a_second_call_with_the_same_sizes_asks_isl_nothing(monkeypatch):
    """The extents of outputs and temporaries are computed once per size set (a call
    used to evaluate them with isl each time: most of its 25 us)."""
    from polycomp import islutil
    kernel = polycomp.compile(TWO_STAGE)
    a, c = np.arange(8, dtype=np.float32), np.ones(8, np.float32)
    kernel(a, c)
    calls = []
    real = islutil.pw_aff_value
    monkeypatch.setattr(islutil, "pw_aff_value", lambda *x: calls.append(x) or real(*x))
    assert np.array_equal(kernel(a, c), a * 2 + c)
    assert calls == []
    kernel(np.ones(5, np.float32), np.ones(5, np.float32))  # a new size set: planned anew
    assert calls


@pytest.mark.needs_cc
def test_reused_temporaries_are_not_shared_by_concurrent_calls():
    import threading
    kernel = polycomp.compile(TWO_STAGE)
    n = 200_000
    inputs = [(np.full(n, k, np.float32), np.full(n, -k, np.float32)) for k in range(8)]
    results: dict[int, np.ndarray] = {}

    def call(k: int) -> None:
        for _ in range(5):
            results[k] = kernel(*inputs[k])

    threads = [threading.Thread(target=call, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(8):
        assert np.array_equal(results[k], np.full(n, k, np.float32)), k


MM2 = """def mm2(float(M, K) A, float(K, N) B, float(N, L) C) -> (D) {
    T(m, n) +=! A(m, k) * B(k, n)
    D(m, l) +=! T(m, n) * C(n, l)
}"""


@pytest.mark.needs_cc
def test_two_kernels_of_one_program_can_share_their_temporaries():
    """The tuner times two configurations on the same temporaries: calls of either
    reuse the one set, and each still computes its own result."""
    from polycomp.runtime import Kernel

    first = polycomp.compile(MM2, tuning="none")
    second = Kernel(first.definition, first.options.with_(tile=False))
    rng = np.random.default_rng(0)
    a, b, c = (rng.integers(-3, 4, size=s).astype(np.float32) for s in ((4, 5), (5, 6), (6, 7)))
    sizes = {"M": 4, "K": 5, "N": 6, "L": 7}
    want = a @ b @ c  # small integers: exact in float32 in any order
    np.testing.assert_array_equal(first(a, b, c), want)
    assert first._plan(sizes).temporaries == (("T", (4, 6), "float32"),)
    assert second.share_temporaries(first, sizes)
    for _ in range(3):
        np.testing.assert_array_equal(second(a, b, c), want)
        np.testing.assert_array_equal(first(a, b, c), want)
    buffers = first._plan(sizes).spare_temporaries
    assert second._plan(sizes).spare_temporaries is buffers and len(buffers) == 1
    # other temporaries (by name here): each keeps its own
    renamed = polycomp.compile(MM2.replace("T(", "U("), tuning="none")
    assert not second.share_temporaries(renamed, sizes)
    assert second._plan(sizes).spare_temporaries is buffers


@pytest.mark.needs_cc
def test_outputs_are_zeroed_only_where_the_kernel_leaves_elements_unwritten():
    """An output written whole (and never read before written) is allocated without
    zeroing (a pass over it per call); one with unwritten elements keeps its zeros."""
    from polycomp import runtime

    whole = polycomp.compile("def f(float(N) A) -> (B) { B(i) = A(i) * 2 where i in 0:N }")
    part = polycomp.compile("def g(float(N) A) -> (B) { B(i) = A(i) * 2 where i in 1:N }")
    summed = polycomp.compile("def h(float(N, K) A) -> (B) { B(i) +=! A(i, k) }")
    a = np.ones(6, np.float32)
    for _ in range(3):  # reused memory from earlier calls must not show through
        np.testing.assert_array_equal(whole(a), [2] * 6)
        np.testing.assert_array_equal(part(a * 5), [0] + [10] * 5)
        np.testing.assert_array_equal(summed(np.ones((6, 3), np.float32)), [3] * 6)
    verdicts = {}
    for name, kernel in (("whole", whole), ("part", part), ("summed", summed)):
        compiled = kernel._describe()
        verdicts[name] = runtime._written_whole(compiled, compiled.program.array("B"))
    assert verdicts == {"whole": True, "part": False, "summed": True}
