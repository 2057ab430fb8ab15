"""A window's taps in the register tile (codegen/openmp.py, scheduler/register_tile.py,
scheduler/tiling.py): the innermost reduction loop of a few constant steps is unrolled,
the register model leaves the registers that unrolling needs, and the reduction tile is
cut until the tile's filter column fits L1. Results against numpy and onnxruntime, the
tile's object code packed."""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from polycomp.codegen import vector_tile as VT
from polycomp.scheduler import cache_model as CM
from polycomp.scheduler import register_tile as RT
from polycomp.scheduler import tiling
from test_vector_tile import (
    AVX512,
    CONV,
    CONV_REFS,
    _conv_oracle,
    _random,
    assert_tiles_packed,
)

import polycomp
import polycomp.onnx as pco

# the caches of the machine the constants were measured on (48 KiB L1d, 2 MiB L2)
CACHES = {1: 48 * 1024, 2: 2 * 1024 * 1024, 3: 32 * 1024 * 1024}


@pytest.fixture
def avx512_machine(monkeypatch):
    monkeypatch.setattr(CM, "cache_sizes", lambda: dict(CACHES))
    monkeypatch.setattr(RT, "machine_registers", lambda: AVX512)


def _unrolled_markers(source: str) -> list[str]:
    """The pragma line above each register tile's marker."""
    lines = source.splitlines()
    return [lines[k - 1].strip() for k, line in enumerate(lines) if VT.MARKER in line]


def _held(tile: RT.RegisterTile, refs, vector: int, extents) -> int:
    return RT.column_bytes(tile, refs, vector, extents, AVX512) // (
        AVX512.vector_bytes * RT.reduction_points(refs, vector, extents))


@pytest.mark.parametrize("taps", [3, 5, 1])
def test_unrolled_taps_leave_registers_for_the_next_taps(taps, avx512_machine):
    extents = [16, 8, 20, 16, taps, taps, 16]
    tile = RT.choose(CONV_REFS, 6, [0, 1, 2], extents, 16, AVX512)
    assert tile is not None
    held = _held(tile, CONV_REFS, 6, extents)
    if taps > 1:
        assert tile.taps == taps
        assert tile.accumulators + held + AVX512.reserved_unrolled <= AVX512.vectors, tile
    else:
        assert tile.taps == 1
        assert tile.accumulators + held + RT.RESERVED <= AVX512.vectors, tile
    if taps < 5:
        # a column of filter blocks by a row of pixels; a 5x5 window's 16 channels make
        # a column of 4 blocks 100 KB (past L1), and the tile one block wide
        assert dict(tile.factors).get(0, 1) >= 2, tile


def test_a_row_of_pixels_shares_its_broadcasts_across_the_taps(avx512_machine):
    # kw unrolled: pixel p at tap kw reads the input pixel p + 1 reads at tap kw - 1;
    # 7 pixels over 3 taps are 9 broadcasts, which fit beside 3 x 7 accumulators
    tile = RT.choose(CONV_REFS, 6, [0, 1, 2], [16, 8, 14, 16, 3, 3, 16], 16, AVX512)
    assert tile is not None and dict(tile.factors) == {0: 3, 2: 7}, tile
    assert tile.loads == 3 * 3 + (7 + 3 - 1) and tile.taps == 3
    # along the output rows nothing is shared: each row's taps are loads of their own
    rows = RT._tile(RT._reads(CONV_REFS, CONV_REFS[0]), 6, 1, {0: 3, 1: 7}, (5, 3), 8)
    assert rows.loads == 3 * 3 + 7 * 3


def test_a_column_past_l1_costs_more_than_one_that_fits(avx512_machine):
    # the same tile over 16 and over 64 channels: only the second reads its filter
    # column (4 blocks x channels x 9 taps x 64 bytes) from L2
    small = RT.choose(CONV_REFS, 6, [0, 1, 2], [4, 1, 20, 16, 3, 3, 16], 16, AVX512)
    big = RT.choose(CONV_REFS, 6, [0, 1, 2], [4, 1, 20, 64, 3, 3, 16], 16, AVX512)
    assert small is not None and big is not None
    assert RT.column_bytes(small, CONV_REFS, 6, [4, 1, 20, 16, 3, 3, 16]) <= CACHES[1]
    assert RT.column_bytes(big, CONV_REFS, 6, [4, 1, 20, 64, 3, 3, 16]) > CACHES[1]
    assert big.expected > small.expected


def test_the_reduction_tile_is_cut_until_the_filter_column_fits_l1(avx512_machine):
    # a 3x3 conv over 256 channels at 56 x 56 took 32 channels per tile and a column of
    # 6 blocks: 110 KB of filter read from L2 by every register tile
    extents = [16, 56, 56, 256, 3, 3, 16]
    loops = list(range(7))
    sizes = tiling._column_in_l1((16, 8, 20, 32, 3, 3, 16), CONV_REFS, 6, loops,
                                 extents, 4)
    assert sizes[3] == 16 and sizes[:2] == (16, 8) and sizes[4:] == (3, 3, 16)
    tile = RT.choose(CONV_REFS, 6, [0, 1, 2], list(sizes), 16, AVX512)
    assert tile is not None
    assert RT.column_bytes(tile, CONV_REFS, 6, list(sizes)) <= CACHES[1]
    # the 20-pixel tiles of the row moved down to 14: two rows of 7 pixels, a multiple
    # that divides 56, where 20 left a partial register tile in every tile
    assert sizes[2] == 14 and 56 % sizes[2] == 0
    assert sizes[2] % dict(tile.factors)[2] == 0, tile


def test_a_column_that_fits_keeps_its_reduction_tile(avx512_machine):
    # a 1x1 conv's 64 channels: a 4-block column is 16 KB; halving would only load and
    # store the accumulators twice as often
    sizes = (16, 8, 28, 64, 1, 1, 16)
    assert tiling._column_in_l1(sizes, CONV_REFS, 6, [0, 1, 2, 3, 6],
                                [16, 56, 56, 256, 1, 1, 16], 4) == sizes


@pytest.mark.needs_cc
@pytest.mark.parametrize("kk,hw", [(3, 16), (5, 12)])
def test_a_windows_taps_are_unrolled_in_the_register_tile(kk, hw):
    sizes = {"N": 1, "C": 32, "H": hw, "W": hw, "F": 48, "KH": kk, "KW": kk}
    kernel = polycomp.compile(CONV, sizes=sizes, parallel_min_work=0)
    assert f"#pragma GCC unroll {kk}" in _unrolled_markers(kernel.source)
    x, w = _random((1, 32, hw, hw), 7), _random((48, 32, kk, kk), 8)
    np.testing.assert_allclose(kernel(x, w), _conv_oracle(x, w), rtol=1e-4, atol=1e-4)
    assert_tiles_packed(kernel, sizes)


def _blocked_conv_model(c: int, hw: int) -> bytes:
    """A 1x1 conv, then a 3x3 conv with bias and Relu: the 3x3 reads the channel-blocked
    output of the first, as inside ResNet and VGG."""
    rng = np.random.default_rng(0)

    def weight(name, *shape):
        return numpy_helper.from_array(
            (rng.standard_normal(shape) * 0.1).astype(np.float32), name)
    nodes = [helper.make_node("Conv", ["x", "w0"], ["y0"], name="pre"),
             helper.make_node("Conv", ["y0", "w", "b"], ["y"], name="conv3x3",
                              pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["y"], ["z"], name="relu")]
    graph = helper.make_graph(
        nodes, "taps", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, c, hw, hw])],
        [weight("w0", c, c, 1, 1), weight("w", c, c, 3, 3), weight("b", c)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]) \
        .SerializeToString()


@pytest.mark.needs_cc
def test_a_blocked_3x3_conv_unrolls_its_taps_in_model_context():
    # rows of 16 pixels: at 14, gcc unrolls the 14-step loop that unpacks the blocked
    # output into NCHW before it vectorises it, and that unpack is scalar (a known gap)
    model = _blocked_conv_model(64, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("error", polycomp.PerformanceWarning)
        session = pco.InferenceSession(model)
    sources = [k.source for k in session.compiled().kernels.values()]
    assert any("#pragma GCC unroll 3" in _unrolled_markers(s) for s in sources)
    x = {"x": np.random.default_rng(1).standard_normal((1, 64, 16, 16)).astype(np.float32)}
    expected = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, x)
    np.testing.assert_allclose(session.run(None, x)[0], expected[0], rtol=1e-4, atol=1e-4)


def test_remainders_of_different_sizes_are_charged_as_guarded_code(avx512_machine):
    # vgg19's 28 x 28 conv: pixel tiles of 16 and 12 left remainders of 7 and 3 under
    # 2 x 9 register tiles, which isl writes as one guarded loop, accumulating in memory
    # (8 % of the peak); the tile must leave no remainder in either
    shares = [{8: 1.0}, {16: 16 / 28, 12: 12 / 28}, {16: 16 / 28, 12: 12 / 28},
              {32: 1.0}, {3: 1.0}, {3: 1.0}, {16: 1.0}]
    extents = [8, 16, 16, 32, 3, 3, 16]
    tile = RT.choose(CONV_REFS, 6, [0, 1, 2], extents, 16, AVX512, shares=shares)
    assert tile is not None
    for m, f in tile.factors:
        rests = {e % f for e in shares[m] if e % f}
        assert len(rests) <= 1, tile


def test_the_reduction_and_row_tiles_are_chosen_together(avx512_machine):
    # the same conv at 28 x 28 over 256 channels: 16 channels and rows of 14 pixels
    # (two 7-pixel register tiles), where 32 channels alone kept rows of 16
    extents = [32, 28, 28, 256, 3, 3, 16]
    sizes = tiling._column_in_l1((8, 16, 16, 32, 3, 3, 16), CONV_REFS, 6, list(range(7)),
                                 extents, 4)
    assert sizes[3] == 16 and sizes[2] == 14, sizes
