"""Convolutions over channel-blocked inputs in model context (a conv whose input another
conv wrote NCHWc): what a tile touches (scheduler/cache_model.BlockedIndex), the
reduction tiles that follow, the register tile's reduction split into blocks and lanes
(scheduler/intratile._blocked_split), and the register tile kept with fewer unrolled
members when isl cannot isolate its full tiles in budget."""

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as H
from onnx import numpy_helper as NH

import polycomp.onnx as pco
from polycomp.codegen.vector_tile import MARKER
from polycomp.scheduler import cache_model as CM
from polycomp.scheduler import register_tile as RT
from polycomp.scheduler.tiling import observe_bands


def _two_convs(ci: int, co: int, hw: int, stride: int) -> onnx.ModelProto:
    """x0 -> 1x1 conv (ci -> ci) -> relu -> 1x1 conv (ci -> co, stride) + bias + r -> relu:
    the second conv reads the first's output channel-blocked, as in ResNet-50."""
    rng = np.random.default_rng(0)
    w0 = NH.from_array((rng.standard_normal((ci, ci, 1, 1)) * 0.05).astype(np.float32), "W0")
    w = NH.from_array((rng.standard_normal((co, ci, 1, 1)) * 0.05).astype(np.float32), "W")
    b = NH.from_array(rng.standard_normal(co).astype(np.float32), "B")
    out = (hw - 1) // stride + 1
    nodes = [H.make_node("Conv", ["x0", "W0"], ["x1"], name="first"),
             H.make_node("Relu", ["x1"], ["x"], name="relu0"),
             H.make_node("Conv", ["x", "W", "B"], ["y"], strides=[stride, stride], name="second"),
             H.make_node("Add", ["y", "r"], ["z"], name="residual"),
             H.make_node("Relu", ["z"], ["out"], name="relu1")]
    graph = H.make_graph(nodes, "two_convs",
                         [H.make_tensor_value_info("x0", TP.FLOAT, [1, ci, hw, hw]),
                          H.make_tensor_value_info("r", TP.FLOAT, [1, co, out, out])],
                         [H.make_tensor_value_info("out", TP.FLOAT, [1, co, out, out])],
                         [w0, w, b])
    return H.make_model(graph, opset_imports=[H.make_opsetid("", 17)])


def _compiled(model: onnx.ModelProto):
    """The session (checked against onnxruntime) and the bands its compile tiled."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    data = model.SerializeToString()
    with observe_bands() as seen, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # performance warnings are not the subject
        session = pco.InferenceSession(data, options, cache=False)
    rng = np.random.default_rng(1)
    feed = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
            .astype(np.float32) for i in model.graph.input}
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_allclose(session.run(None, feed)[0], want, rtol=1e-4, atol=1e-4)
    return session, list(seen)


def _blocked_conv(bands, channels: int):
    """The second conv's band (it reads a blocked array), its blocked read and its
    reduction member over ``channels`` input channels."""
    for band in bands:
        reads = [r for r in band.references if r.blocked and not r.write]
        writes = [r for r in band.references if r.write]
        if not reads or len(writes) != 1 or len(band.extents) != 8:
            continue
        reduced = [m for m, e in enumerate(band.extents)
                   if e == channels and writes[0].invariant(m)]
        if reduced:
            return band, reads[0], reduced[0]
    raise AssertionError("no band of a conv over a channel-blocked input")


def test_a_blocked_input_touches_the_channels_of_the_reduction_tile_only():
    _, bands = _compiled(_two_convs(64, 128, 14, 1))
    band, read, k = _blocked_conv(bands, 64)
    lanes = [b for b in read.blocked if b is not None]
    assert sorted(b.mod for b in lanes) == [False, True]
    assert {b.divisor for b in lanes} == {CM.simd_lanes(4)}  # a vector's floats per block
    # a 1x1 conv's 14 x 14 pixels are one row of 196 (frontend/onnx/pixel_rows.py)
    pixels = [m for m, e in enumerate(band.extents) if e == 14 * 14]
    assert len(pixels) == 1
    for channels in (4, 8, 16, 64):
        sizes = [1] * len(band.extents)
        sizes[k] = channels
        sizes[pixels[0]] = 49
        # channels x 7 x 7 floats: the block dimension spans channels / 8 blocks, the
        # lane dimension min(8, channels) lanes. Before, every tile counted all 64
        assert CM.footprint([read], sizes) == 4 * 49 * channels


@pytest.mark.parametrize("ci,co,hw,stride", [(512, 256, 14, 1), (512, 512, 14, 2)])
def test_a_conv_over_a_blocked_input_keeps_a_long_reduction_tile(ci, co, hw, stride):
    """With the input's footprint taken as its whole channel range, these convs got
    reduction tiles of 8 and 4 channels: 8 accumulators loaded and stored for every 32
    or 64 FMAs (ResNet-50's last two stages ran 10-25 % slower so)."""
    session, bands = _compiled(_two_convs(ci, co, hw, stride))
    band, _, k = _blocked_conv(bands, ci)
    assert band.tiling.levels[0][k] >= 32
    # the register tile's reduction runs over blocks, then over a block's lanes
    # (intratile._blocked_split): its reads index the input without a division. Only
    # blocks whose lanes the printer unrolls are split (8 floats, AVX2; AVX-512's blocks
    # of 16 are not)
    compiled = session.compiled()
    group = next(g for g in compiled.plan.groups if any(n.name == "second" for n in g.nodes))
    second = str(compiled.kernels[group.name].source)
    assert MARKER in second
    lanes = CM.simd_lanes(4)
    split = lanes <= RT.UNROLLED_TAPS
    for tile in second.split(MARKER)[1:]:
        fmas = [line for line in tile.split("vstore")[0].splitlines() if "+=" in line]
        assert fmas
        if split:
            assert not any("/" in line or "%" in line for line in fmas), fmas[:2]
    assert (f"#pragma GCC unroll {lanes}" in second) == split


def test_a_register_tile_that_isl_cannot_isolate_keeps_one_unrolled_member(monkeypatch):
    """When the full register tiles of a tile unrolled along two members (output blocks
    x pixels) are out of isl's budget, the tile is planned again along one member, not
    dropped: inception_v1's 3x3 conv at 55 x 55 ran 15 times slower without one."""
    from polycomp.scheduler import intratile
    original = intratile._full_register_tiles
    refused, applied = [], []

    def two_members_out_of_budget(node, n_outer, factors, strip=1, strict=False):
        if strict and len(factors) >= 2:
            refused.append(tuple(factors))
            raise intratile.IsolationOutOfBudget
        return original(node, n_outer, factors, strip, strict)

    def recorded(node, plan, deps, lanes):
        result = apply_plan(node, plan, deps, lanes)  # raises before it is recorded
        applied.append(plan)
        return result
    apply_plan = intratile.apply_plan
    monkeypatch.setattr(intratile, "_full_register_tiles", two_members_out_of_budget)
    monkeypatch.setattr(intratile, "apply_plan", recorded)
    from polycomp.onnx import session as onnx_session
    monkeypatch.setattr(onnx_session, "_KERNELS", {})  # compile again, not from this process
    _compiled(_two_convs(64, 128, 14, 1))  # checked against onnxruntime
    assert refused  # the conv's first plan unrolled two members
    # the plan applied in its place is still a register tile (its own factor per
    # unrolled member), along one member; before, plain unroll-and-jam (no factors)
    assert any(len(p.factors) == 1 for p in applied)
    assert all(len(p.factors) < 2 for p in applied)
