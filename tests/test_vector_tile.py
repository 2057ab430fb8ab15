"""Register tiles (scheduler/register_tile.py) printed as explicit vector code
(codegen/vector_tile.py): the register model's choices, the per-lane proof of each
access, the printed tile against numpy (full and partial tiles, serial and parallel),
and its object code packed whatever gcc's vectoriser does."""

from __future__ import annotations

import platform
import re
import warnings
from fractions import Fraction
from pathlib import Path

import islpy as isl
import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import polycomp
import polycomp.onnx as pco
from polycomp.codegen import vector_tile as VT
from polycomp.codegen.cexpr import Helpers
from polycomp.onnx import zoo
from polycomp.scheduler import cache_model as CM
from polycomp.scheduler import register_tile as RT
from polycomp.scheduler import short_sums as SS

X86 = platform.machine() in ("x86_64", "AMD64")
AVX512 = RT.RegisterFile(32, 64)
AVX2 = RT.RegisterFile(16, 32)

MM = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m,n) +=! A(m,k) * B(k,n) }"
CONV = ("def conv(float(N,C,H,W) I, float(F,C,KH,KW) Wt) -> (O) {\n"
        "  O(n, f, h, w) +=! I(n, c, h + kh, w + kw) * Wt(f, c, kh, kw)"
        " where h in 0:H-KH+1, w in 0:W-KW+1\n}")


def _ref(array: str, write: bool, steps: list[list[int]]) -> CM.Reference:
    rows = tuple(tuple(Fraction(x) for x in row) for row in steps)
    return CM.Reference("S", array, 4, (), rows, (), (), array, write)


# matmul's point band [i, j, k]: C[i, j] += A[i, k] * B[k, j]
C_W = _ref("C", True, [[1, 0, 0], [0, 1, 0]])
MATMUL = [C_W, _ref("A", False, [[1, 0, 0], [0, 0, 1]]),
          _ref("B", False, [[0, 0, 1], [0, 1, 0]]), _ref("C", False, C_W.steps)]
# conv in NCHWc, band [f_block, h, w, c, kh, kw, f_lane]
O_W = _ref("O", True, [[1, 0, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0, 0], [0, 0, 1, 0, 0, 0, 0],
                       [0, 0, 0, 0, 0, 0, 1]])
CONV_REFS = [O_W, _ref("I", False, [[0, 0, 0, 1, 0, 0, 0], [0, 1, 0, 0, 1, 0, 0],
                                    [0, 0, 1, 0, 0, 1, 0]]),
             _ref("W", False, [[1, 0, 0, 0, 0, 0, 0], [0, 0, 0, 1, 0, 0, 0],
                               [0, 0, 0, 0, 1, 0, 0], [0, 0, 0, 0, 0, 1, 0],
                               [0, 0, 0, 0, 0, 0, 1]]),
             _ref("O", False, O_W.steps)]


def test_matmul_tile_is_rows_by_vectors_within_the_register_file():
    tile = RT.choose(MATMUL, 1, [0], [96, 512, 256], 16, AVX512)
    assert tile is not None and tile.vectors >= 2 and dict(tile.factors).get(0, 1) >= 4
    assert tile.accumulators >= AVX512.min_accumulators
    assert tile.accumulators + tile.vectors + RT.RESERVED <= AVX512.vectors
    assert tile.loads_per_fma <= 0.5


def _blocked_input() -> CM.Reference:
    """The channel-blocked input x[c / 16][h + kh][w + kw][c % 16] of the conv band: its
    first and last indices are not affine in c (steps None) and do not move along the
    others (what cache_model._quasi_step finds)."""
    rows = [[0, 0, 0, None, 0, 0, 0], [0, 1, 0, 0, 1, 0, 0], [0, 0, 1, 0, 0, 1, 0],
            [0, 0, 0, None, 0, 0, 0]]
    steps = tuple(tuple(None if x is None else Fraction(x) for x in row) for row in rows)
    return CM.Reference("S", "X", 4, (), steps, (), (), "X", False)


# the reduction tiles scheduler/tiling.py gives 3x3 convs: 16 channels (a column of
# filter blocks over more channels and taps outgrows L1)
@pytest.mark.parametrize("extents", [[4, 28, 28, 16, 3, 3, 16], [32, 7, 7, 256, 1, 1, 16],
                                     [8, 14, 14, 16, 3, 3, 16]])
@pytest.mark.parametrize("blocked", [False, True])
def test_conv_tile_is_filter_blocks_by_a_row_of_pixels(extents, blocked):
    # as MLAS's NCHWc kernel: the input broadcast once per pixel, the filter's blocks as
    # vectors (hand-written C: 7 pixels x 3 blocks 187-205 GFLOP/s, 14 x 1 80-128)
    refs = CONV_REFS if not blocked else [O_W, _blocked_input()] + CONV_REFS[2:]
    tile = RT.choose(refs, 6, [0, 1, 2], extents, 16, AVX512)
    assert tile is not None and tile.vectors == 1
    factors = dict(tile.factors)
    assert factors.get(0, 1) >= 2, tile  # a column of filter blocks
    # partial tiles only where isl writes them without guards (as smaller register
    # tiles): a partial column of blocks holds no partial row of pixels
    (row, width), = ((m, f) for m, f in factors.items() if m)
    assert len(factors) == 2 and (extents[0] % factors[0] == 0 or extents[row] % width == 0)
    assert tile.accumulators >= AVX512.min_accumulators and tile.loads_per_fma < 0.7


@pytest.mark.parametrize("blocks, cut", [(6, 1), (4, 1), (16, None), (32, None)])
def test_few_filter_blocks_leave_the_parallel_loop_to_the_output_rows(blocks, cut):
    # inception's 3x3 convs over 6 blocks at 28 x 28: cut into 4 tiles for the parallel
    # loop, the blocks left one per tile, and each register tile one block by a row of
    # pixels (47 % of the peak); cut along the rows instead, a tile keeps its blocks
    from polycomp.scheduler import tiling  # noqa: PLC0415
    extents = [blocks, 28, 28, 96, 3, 3, 16]
    assert tiling._row_instead_of_column(CONV_REFS, extents, [0, 1, 2], 6) == cut


def test_a_column_that_leaves_a_partial_last_tile_is_not_chosen():
    # squeezenet's last conv: 1000 output channels are 63 blocks, in tiles of 12 blocks;
    # a column of 4 left its last 3 blocks to guarded scalar code (2.35 ms against
    # 1.02 ms with columns of 3, measured at 1 thread); 64 channels per reduction tile,
    # so that the filter column fits L1 whatever the column
    extents = [12, 13, 13, 64, 1, 1, 16]
    shares = [{12: 60 / 63, 3: 3 / 63}] + [{e: 1.0} for e in extents[1:]]
    tile = RT.choose(CONV_REFS, 6, [0, 1, 2], extents, 16, AVX512, shares=shares)
    blind = RT.choose(CONV_REFS, 6, [0, 1, 2], extents, 16, AVX512)
    assert tile is not None and blind is not None
    column = dict(tile.factors)[0]
    assert 12 % column == 0 and 3 % column == 0, tile
    assert 3 % dict(blind.factors)[0] != 0  # blind to the last tile, a partial column


def test_a_blocked_index_stays_in_place_along_the_members_it_does_not_read():
    access = isl.Map("{ S[f, h, w, c] -> X[floor(c / 16), h, w, c mod 16] }")
    affs = CM._access_affs(access)
    assert affs is not None and all(a is not None for a in affs)
    along = {"f": [1, 0, 0, 0], "h": [0, 1, 0, 0], "c": [0, 0, 0, 1],
             "c and f": [1, 0, 0, 1]}
    steps = {k: [CM._quasi_step(a, [Fraction(x) for x in v]) for a in affs]
             for k, v in along.items()}
    assert steps["f"] == [0, 0, 0, 0]
    assert steps["h"][0] == 0 and steps["h"][3] == 0  # h's own index is affine
    assert steps["c"][0] is None and steps["c"][3] is None
    assert steps["c and f"][0] is None


def test_fewer_registers_give_a_smaller_tile():
    big = RT.choose(MATMUL, 1, [0], [96, 512, 256], 16, AVX512)
    small = RT.choose(MATMUL, 1, [0], [96, 512, 256], 8, AVX2)
    assert small is not None and small.accumulators < big.accumulators
    assert small.accumulators + small.vectors + RT.RESERVED <= AVX2.vectors


@settings(max_examples=60, deadline=None)
@given(extents=st.tuples(st.integers(1, 200), st.integers(1, 600), st.integers(1, 300)),
       lanes=st.sampled_from([4, 8, 16]), registers=st.sampled_from([AVX2, AVX512]))
def test_every_chosen_tile_fits(extents, lanes, registers):
    tile = RT.choose(MATMUL, 1, [0], list(extents), lanes, registers)
    if tile is None:
        return
    factors = dict(tile.factors)
    assert tile.accumulators == tile.vectors * factors.get(0, 1)
    assert tile.accumulators + tile.vectors + RT.RESERVED <= registers.vectors
    assert factors.get(0, 1) <= extents[0] and tile.vectors * lanes <= extents[1]
    assert tile.accumulators <= 24


def _step(access: str) -> int | None:
    function = isl.PwMultiAff("{ [c0, c1] -> S[c0, c1] }")
    return VT._step(isl.Map(access), function, 1)


def test_lane_steps_tell_broadcasts_vector_loads_and_others():
    assert _step("{ S[i, j] -> B[i, j] }") == 1
    assert _step("{ S[i, j] -> A[i, 3] }") == 0
    assert _step("{ S[i, j] -> B[i, 2j] }") is None      # strided
    assert _step("{ S[i, j] -> B[j, i] }") is None       # moves an outer index
    assert _step("{ S[i, j] -> B[i, -j] }") is None      # backwards


def _random(shape, seed):
    return np.random.default_rng(seed).random(shape, dtype=np.float32) - 0.5


@pytest.mark.needs_cc
@pytest.mark.parametrize("m,n,k", [(96, 128, 64), (50, 70, 33)])
@pytest.mark.parametrize("parallel_min_work", [None, 0])
def test_matmul_register_tile_matches_numpy(m, n, k, parallel_min_work):
    options = {} if parallel_min_work is None else {"parallel_min_work": parallel_min_work}
    kernel = polycomp.compile(MM, sizes={"M": m, "N": n, "K": k}, **options)
    assert VT.MARKER in kernel.source
    a, b = _random((m, k), 1), _random((k, n), 2)
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)


def _conv_oracle(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    f, c, kh, kw = w.shape
    h, wd = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    out = np.zeros((x.shape[0], f, h, wd), dtype=np.float64)
    for dh in range(kh):
        for dw in range(kw):
            patch = x[:, :, dh:dh + h, dw:dw + wd].astype(np.float64)
            out += np.einsum("nchw,fc->nfhw", patch, w[:, :, dh, dw].astype(np.float64))
    return out


@pytest.mark.needs_cc
@pytest.mark.parametrize("c,f,hw,kk", [(32, 32, 16, 3), (16, 48, 9, 1)])
def test_conv_register_tile_matches_numpy(c, f, hw, kk):
    sizes = {"N": 1, "C": c, "H": hw, "W": hw, "F": f, "KH": kk, "KW": kk}
    kernel = polycomp.compile(CONV, sizes=sizes, parallel_min_work=0)
    assert VT.MARKER in kernel.source
    x, w = _random((1, c, hw, hw), 3), _random((f, c, kk, kk), 4)
    np.testing.assert_allclose(kernel(x, w), _conv_oracle(x, w), rtol=1e-4, atol=1e-4)


@pytest.mark.needs_cc
@pytest.mark.skipif(not X86, reason="reads x86-64 object code")
def test_register_tile_is_packed_even_without_gccs_vectoriser():
    # the tile's vectors are written out: only the omp simd loops depend on gcc
    sizes = {"M": 64, "N": 128, "K": 64}
    flags = ("-O3", "-march=native", "-fno-tree-loop-vectorize", "-fno-tree-slp-vectorize")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", polycomp.PerformanceWarning)  # other loops' own
        kernel = polycomp.compile(MM, sizes=sizes, cflags=flags)
    report = polycomp.inspect(kernel, sizes)
    lines = kernel.source.splitlines()
    tiles = [c for c in report.loops if VT.MARKER in lines[c.loop.line - 2]]
    assert tiles, report.summary()
    assert all(c.packed_fma and not c.scalar_fma for c in tiles), report.summary()
    assert max(len(c.accumulators) for c in tiles) >= RT.FMA_LATENCY * RT.FMA_PORTS


@pytest.mark.needs_cc
@pytest.mark.parametrize("n", [28, 12, 3])
def test_a_vector_loop_of_no_whole_vectors_ends_in_a_partial_chunk(n):
    # ShuffleNet's rows of 28 pixels: 16 lanes and 12, the 12 in one masked vector
    # (they were local arrays updated through memory at every step of the reduction);
    # unblocked, the rows of C are the vector loop
    sizes = {"M": 24, "N": n, "K": 40}
    kernel = polycomp.compile(MM, sizes=sizes, block_channels=False)
    assert VT.MARKER in kernel.source and "polycomp_vload_part_v" in kernel.source
    a, b = _random((24, 40), 5), _random((40, n), 6)
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)
    assert_tiles_packed(kernel, sizes)


def assert_tiles_packed(kernel, sizes) -> None:
    """On x86-64: the kernel has register tiles, and their loops compiled to packed
    FMAs only (polycomp.inspect's machine-code report)."""
    if not X86:
        return
    report = polycomp.inspect(kernel, sizes)
    lines = kernel.source.splitlines()
    tiles = [c for c in report.loops if VT.MARKER in lines[c.loop.line - 2]]
    assert tiles and all(c.packed_fma and not c.scalar_fma for c in tiles), report.summary()


PARTIAL_HARNESS = r"""
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
%s
int main(void) {
  long page = sysconf(_SC_PAGESIZE);
  /* each buffer ends where an inaccessible page starts: a lane past the count faults */
  char *in = mmap(0, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char *out = mmap(0, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  mprotect(in + page, page, PROT_NONE);
  mprotect(out + page, page, PROT_NONE);
  for (int count = 1; count < 16; count++) {
    float *src = (float *)(in + page) - count, *dst = (float *)(out + page) - count;
    for (int i = 0; i < count; i++) { src[i] = (float)(i + 1); dst[i] = -1.0f; }
    dst[-1] = 42.0f;
    polycomp_v16sf v = polycomp_vload_part_v16sf(src, count);
    for (int i = count; i < 16; i++) if (v[i] != 0.0f) { printf("lane %%d\n", i); return 1; }
    polycomp_vstore_part_v16sf(dst, v + v, count);
    for (int i = 0; i < count; i++) if (dst[i] != 2.0f * (i + 1)) return 2;
    if (dst[-1] != 42.0f) return 3;
  }
  puts("ok");
  return 0;
}
"""


@pytest.mark.needs_cc
@pytest.mark.skipif(not X86, reason="compiles for x86-64 with and without AVX-512")
@pytest.mark.parametrize("flags", [("-mavx512f",), ("-mavx2", "-mno-avx512f")])
def test_partial_loads_and_stores_touch_only_their_lanes(tmp_path, flags):
    import subprocess  # noqa: PLC0415
    helpers = Helpers()
    VT.partial("float32", 16, helpers)
    source = tmp_path / "partial.c"
    source.write_text(PARTIAL_HARNESS % "\n".join(helpers.used.values()))
    binary = tmp_path / "partial"
    subprocess.run(["gcc", "-O2", *flags, str(source), "-o", str(binary)], check=True)
    if "-mavx512f" in flags and "avx512f" not in Path("/proc/cpuinfo").read_text():
        return  # compiled (the masked form is valid C); this CPU cannot run it
    done = subprocess.run([str(binary)], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode, done.stdout)


@settings(max_examples=40, deadline=None)
@given(point=st.tuples(st.integers(0, 3), st.integers(0, 6), st.integers(0, 27),
                       st.integers(0, 1023), st.integers(0, 15)))
def test_split_offset_adds_up_to_the_element_a_blocked_read_touches(point):
    # x[c / 16][h][w][c % 16] of a 1x1 conv tile: rows (h, w) apart from the channel c
    read = isl.Map("{ S[f, h, w, c, l] -> X[o0, h, w, c - 16o0] : 16o0 <= c <= 16o0 + 15 }")
    names = ("c1", "c2", "c3", "c4", "c5")
    function = isl.PwMultiAff("{ [c1, c2, c3, c4, c5] -> S[c1, 2 * c2, c3, c4, c5] }")
    strides = [14 * 28 * 16, 28 * 16, 16, 1]
    split = VT.split_offset(read, function, strides, names, {"c4": 0, "c5": 0}, Helpers())
    assert split is not None
    fixed, moving = split
    assert "c4" not in fixed and "c2" not in moving and "c3" not in moving
    values = dict(zip(names, point))
    total = eval(f"({fixed}) + ({moving})".replace("/", "//"), {}, values)  # noqa: S307
    c1, c2, c3, c4, _ = point
    assert total == (c4 // 16) * strides[0] + 2 * c2 * strides[1] + c3 * 16 + c4 % 16


def test_split_offset_refuses_a_division_that_may_round_down_negative():
    read = isl.Map("{ S[c] -> X[o0, c - 16o0] : 16o0 <= c <= 16o0 + 15 }")
    function = isl.PwMultiAff("{ [c1] -> S[c1] }")
    # no lower bound on c1: C's / would round toward zero (rows of 100: c / 16 stays)
    assert VT.split_offset(read, function, [100, 1], ("c1",), {"c1": None}, Helpers()) is None
    split = VT.split_offset(read, function, [100, 1], ("c1",), {"c1": 0}, Helpers())
    assert split is not None and "/ 16" in split[1]


def test_lane_steps_give_a_strided_read_its_step_in_memory():
    # a depthwise filter w[c][kh][kw] along the channel lanes: 9 elements apart
    function = isl.PwMultiAff("{ [c0, c1] -> S[c0, c1] }")
    access = isl.Map("{ S[i, j] -> W[j, i, 0] : 0 <= i <= 2 }")
    assert VT._step(access, function, 1, [9, 3, 1]) == 9
    assert VT._step(access, function, 1) is None  # without strides: not a vector load
    assert VT._step(isl.Map("{ S[i, j] -> W[i, j] }"), function, 1, [16, 1]) == 1


def _filter_as_input(model, node_name: str):
    """The model with the named node's filter an input instead of an initializer."""
    import onnx  # noqa: PLC0415
    model = onnx.ModelProto.FromString(model.SerializeToString())
    name = next(n.input[1] for n in model.graph.node if n.name == node_name)
    init = next(i for i in model.graph.initializer if i.name == name)
    model.graph.initializer.remove(init)
    model.graph.input.append(onnx.helper.make_tensor_value_info(
        name, init.data_type, list(init.dims)))
    return model, {name: onnx.numpy_helper.to_array(init)}


@pytest.mark.needs_cc
@pytest.mark.parametrize("constant", [True, False])
def test_depthwise_taps_in_model_context_load_or_gather_their_filter(constant):
    # a constant filter is stored channel-blocked as the activations (one vector load
    # per tap) and its nine taps are written out (scheduler/short_sums.py); a filter
    # given at run time moves by 9 floats per lane: a gathered vector in a register
    # tile over the taps
    # at 28 x 28 the columns are no multiple of the vector width (8 or 16 lanes): the
    # depthwise conv is channel-blocked (at 56, AVX2's 8 lanes take the columns instead)
    lanes = CM.simd_lanes(4)
    model = zoo.mobilenet_block(size=28)
    feed = zoo.random_inputs(model)
    if not constant:
        model, extra = _filter_as_input(model, "depthwise")
        feed.update(extra)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", polycomp.PerformanceWarning)
        session = pco.InferenceSession(model.SerializeToString())
    got = session.run(None, feed)[0]
    sources = [k.source for k in session.compiled().kernels.values()]
    if constant:
        written = [s for s in sources if f") * 3 + 2) * 3 + 2) * {lanes} + c" in s]  # the last tap
        assert len(written) == 1 and VT.MARKER not in written[0]
        assert not any("polycomp_vgather_v" in s for s in sources)
    else:
        # the depthwise filter's taps, read as Wt[f][0][kh][kw]
        tiles = [s for s in sources if VT.MARKER in s and ") * 1 + 0) * 3 + c" in s]
        assert tiles and all("polycomp_vgather_v" in s for s in tiles)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.needs_cc
@pytest.mark.skipif(not X86, reason="reads x86-64 object code")
def test_a_fully_connected_head_at_batch_1_is_a_packed_register_tile():
    # Gemm(transB) + Softmax as ResNet-50 ends: with the bias as the reduction's init it
    # was scalar code under a guard in the k loop (1.36 ms against onnxruntime's 0.61)
    from onnx import TensorProto, helper, numpy_helper  # noqa: PLC0415
    rng = np.random.default_rng(0)
    k, n = 256, 200
    inits = [numpy_helper.from_array(rng.standard_normal((n, k)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b")]
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc", transB=1),
         helper.make_node("Softmax", ["y"], ["z"], name="softmax")], "head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feed = {"x": rng.standard_normal((1, k)).astype(np.float32)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", polycomp.PerformanceWarning)  # softmax's own loops
        session = pco.InferenceSession(model.SerializeToString())
    got = session.run(None, feed)[0]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    kernel, = session.compiled().kernels.values()
    assert VT.MARKER in kernel.source and "#pragma omp parallel" in kernel.source
    report = polycomp.inspect(kernel)
    lines = kernel.source.splitlines()
    tiles = [c for c in report.loops if VT.MARKER in lines[c.loop.line - 2]]
    # packed FMAs, or packed multiplies and adds: gcc's tuning for AMD Zen splits a chain
    # of FMAs into one accumulator (-mtune=znver2 has avoid_fma_chains), which is shorter
    assert tiles and all((c.packed_fma or c.packed_other) and not (c.scalar_fma or c.scalar_other)
                         for c in tiles), report.summary()


@pytest.mark.needs_cc
@pytest.mark.parametrize("taps", [30, 9])
def test_max_and_min_tiles_keep_the_scalar_selects_nans_included(taps):
    # a pooling window's running max as a vector register (ResNet-50's max pool: 0.33 ->
    # 0.14 ms at 1 thread); the selects skip a NaN operand as the scalar helper does.
    # A window of at most short_sums.MAX_TERMS taps is written out as maxima instead
    # (scheduler/short_sums.py), with the same helper: the same values
    src = ("def m(float(N,K,C) I) -> (O, P) {\n O(n, c) max=! I(n, k, c)\n"
           " P(n, c) min=! I(n, k, c)\n}")
    sizes = {"N": 8, "K": taps, "C": 64}
    x = np.random.default_rng(0).standard_normal((8, taps, 64)).astype(np.float32)
    x[0, 3, 5] = x[1, 0, 7] = np.nan
    x[2, :, 9] = np.nan  # a whole window of NaNs: the initial value stays
    x[3, 8, 10], x[4, 0, 11] = np.inf, -np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", polycomp.PerformanceWarning)
        kernel = polycomp.compile(src, sizes=sizes)
        serial = polycomp.compile(src, sizes=sizes, scheduler="none")
    written_out = taps <= SS.MAX_TERMS
    assert ("polycomp_vmax_v" in kernel.source and "polycomp_vmin_v" in kernel.source) \
        != written_out
    for got, want in zip(kernel(x), serial(x)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.needs_cc
@pytest.mark.parametrize("k", [64, 1024])
def test_a_tile_that_runs_the_whole_sum_starts_from_zero_and_the_zero_fill_goes(k):
    # K = 64: each register tile runs every update of its elements (one K tile), so it
    # starts from the zero the initialisation would have written instead of loading it,
    # and the zero-fill pass over C is left out of the C (codegen/openmp.py). K = 1024
    # is cut into K tiles: a tile then loads what the one before it stored, and the
    # zero-fill stays. Either way the product is right.
    kernel = polycomp.compile(MM, sizes={"M": 96, "N": 128, "K": k})
    splat = re.search(r"_reg\d+_\d+ = \(polycomp_v\d+sf\)\{0\} \+ \(0\.0f\);", kernel.source)
    zero_fill = re.search(r"\bC\[[^\]]*\] = 0\.0f;", kernel.source)
    assert (splat is not None) == (k == 64), kernel.source
    assert (zero_fill is None) == (k == 64), kernel.source
    a, b = _random((96, k), 1), _random((k, 128), 2)
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.needs_cc
@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 40), n=st.integers(2, 80), k=st.sampled_from([1, 3, 17, 64, 300]),
       parallel=st.booleans())
def test_tiles_that_start_from_zero_give_the_product(m, n, k, parallel):
    # whatever the sizes (partial chunks, remainder tiles, a K cut into tiles or not) and
    # whether the tiles run in a thread team: where a tile starts from the initialisation's
    # zero, and where the zero-fill is left out, the product is numpy's
    options = {"parallel_min_work": 0} if parallel else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", polycomp.PerformanceWarning)
        kernel = polycomp.compile(MM, sizes={"M": m, "N": n, "K": k}, **options)
    a, b = _random((m, k), 3), _random((k, n), 4)
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)
