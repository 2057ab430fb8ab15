"""Short sums written out (scheduler/short_sums.py) and what follows from them: a
depthwise convolution and a max pool that read their input unpadded, one statement per cell of its
border (inlining, scheduler/inlining.py, carries the epilogue into each), and a pad copy
that smart fusion keeps apart from the stencil reading it (scheduler/fusion.py)."""

from __future__ import annotations

import platform
import warnings
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import polycomp
import polycomp.onnx as pco
from polycomp import expr as E
from polycomp.driver import analyze_program
from polycomp.frontend.onnx.plan import GroupStep
from polycomp.scheduler import fusion

pytestmark = pytest.mark.needs_cc

CHANNELS = 32


def depthwise_model(size: int, kernel: int, stride: int, pads: list[int],
                    blocked: bool = True):
    """x -> 1x1 conv -> relu -> depthwise conv (bias) -> clip(0, 6) -> 1x1 conv: the
    depthwise convolution's input and output are channel-blocked, as in MobileNetV2;
    without the first convolution (``blocked`` False) they are NCHW, as in ShuffleNet."""
    rng = np.random.default_rng(kernel * 10 + stride)
    c = CHANNELS
    inits = [
        numpy_helper.from_array(rng.standard_normal((c, c, 1, 1)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((c, 1, kernel, kernel)).astype(np.float32),
                                "w2"),
        numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b2"),
        numpy_helper.from_array(rng.standard_normal((c, c, 1, 1)).astype(np.float32), "w3"),
        numpy_helper.from_array(np.array(0, np.float32), "lo"),
        numpy_helper.from_array(np.array(6, np.float32), "hi")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="expand"),
             helper.make_node("Relu", ["a"], ["r"], name="relu")] if blocked else []
    nodes += [helper.make_node("Conv", ["r" if blocked else "x", "w2", "b2"], ["d"],
                               name="depthwise", group=c,
                               kernel_shape=[kernel, kernel], strides=[stride, stride],
                               pads=pads),
              helper.make_node("Clip", ["d", "lo", "hi"], ["p"], name="clip"),
              helper.make_node("Conv", ["p", "w3"], ["y"], name="project")]
    out = [(size + pads[k] + pads[k + 2] - kernel) // stride + 1 for k in (0, 1)]
    graph = helper.make_graph(
        nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c] + out)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def cells(size: int, kernel: int, stride: int, pads: list[int]) -> int:
    """How many different sets of taps the output positions take (numpy, by hand)."""
    top, left, bottom, right = pads[0], pads[1], pads[2], pads[3]
    out_h = (size + top + bottom - kernel) // stride + 1
    out_w = (size + left + right - kernel) // stride + 1

    def taps(o: int, begin: int) -> tuple[int, ...]:
        return tuple(k for k in range(kernel) if 0 <= o * stride + k - begin < size)

    return len({(taps(y, top), taps(x, left)) for y in range(out_h) for x in range(out_w)})


def depthwise_group(model, feed: dict):
    """(the session, the step of the depthwise convolution's group), its output checked
    against onnxruntime's."""
    session = pco.InferenceSession(model.SerializeToString())
    got = session.run(None, feed)[0]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    (step,) = [s for s in session.compiled().plan.steps if isinstance(s, GroupStep)
               and any(n.name == "depthwise" for n in s.nodes)]
    return session, step


def padded_copy(program, size: int) -> bool:
    """Whether an array of the group is larger than the input in a spatial dimension."""
    return any(max(a.extents()[2:4]) > size for a in program.arrays if a.rank >= 4)


@pytest.mark.parametrize("size, kernel, stride, pads, blocked", [
    (14, 3, 1, [1, 1, 1, 1], True),
    (14, 3, 2, [1, 1, 1, 1], True),
    (14, 3, 2, [0, 0, 1, 1], True),  # SAME_UPPER's padding: at the end only
    (13, 5, 2, [2, 2, 2, 2], True),
    (28, 3, 1, [1, 1, 1, 1], False),  # NCHW: the taps' weights broadcast along a row
    (28, 3, 2, [1, 1, 1, 1], False),
])
def test_a_padded_depthwise_convolution_is_written_out_cell_by_cell(size, kernel, stride, pads,
                                                                    blocked):
    model = depthwise_model(size, kernel, stride, pads, blocked)
    feed = {"x": np.random.default_rng(1).standard_normal(
        (1, CHANNELS, size, size)).astype(np.float32)}
    session, step = depthwise_group(model, feed)
    assert not padded_copy(step.program, size)
    program, _ = analyze_program(step.program, session.options)
    expected = cells(size, kernel, stride, pads)
    assert any(f"in {expected} cells" in note for note in program.notes), program.notes
    # the clip's output is written by one plain statement per cell: sum, bias and clip
    # in one expression, no accumulator left
    writers = [s for s in program.statements if s.target.array == step.outputs[0][0]]
    assert len(writers) == expected
    assert all(s.reduction is None and any(isinstance(n, E.Call) for n in E.walk(s.expr))
               for s in writers)
    assert all(a.role != "temporary" for a in program.arrays)
    if platform.machine() in ("x86_64", "AMD64"):
        report = polycomp.inspect(session)
        assert not report.scalar_loops, report.summary()


@pytest.mark.parametrize("case", ["filter at run time", "25 cells"])
def test_where_the_taps_are_not_written_out_the_input_is_padded(case):
    # a filter given at run time is no constant laid out as the activations: the
    # reduction stays, over the padded copy's box (register tiles,
    # scheduler/register_tile.py); a 5 x 5 window padded by 2 would fall into 25 cells,
    # more than short_sums.MAX_CELLS (each a statement the passes pay for): its sums
    # are written out over the padded copy, in one statement
    size, kernel, pads = (14, 3, [1, 1, 1, 1]) if case != "25 cells" else (12, 5, [2, 2, 2, 2])
    model = depthwise_model(size, kernel, 1, pads)
    feed = {"x": np.random.default_rng(2).standard_normal((1, CHANNELS, size, size))
            .astype(np.float32)}
    if case == "filter at run time":
        init = next(i for i in model.graph.initializer if i.name == "w2")
        feed["w2"] = numpy_helper.to_array(init)
        model.graph.initializer.remove(init)
        model.graph.input.append(helper.make_tensor_value_info("w2", TensorProto.FLOAT,
                                                               list(feed["w2"].shape)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", polycomp.PerformanceWarning)
        session, step = depthwise_group(model, feed)
    assert padded_copy(step.program, size)
    program, _ = analyze_program(step.program, session.options)
    written = [note for note in program.notes if "written out" in note]
    if case == "25 cells":
        assert len(written) == 1 and "cells" not in written[0], program.notes
    else:
        assert not written and any(s.reduction == "+" for s in program.statements)


def pool_model(size: int, kernel: int, stride: int, pads: list[int], relu: bool = False):
    """x -> 1x1 conv -> max pool -> 1x1 conv: the pool's input and output channel-blocked,
    as ResNet-50's max pool after its stem. Both convs are identities (a sum of the one
    term times 1 and zeros: exact), so the output is the pool of x, bit for bit."""
    c = CHANNELS
    eye = np.eye(c, dtype=np.float32).reshape(c, c, 1, 1)
    inits = [numpy_helper.from_array(eye, w) for w in ("w1", "w3")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="expand"),
             helper.make_node("MaxPool", ["a"], ["p"], name="pool", kernel_shape=[kernel, kernel],
                              strides=[stride, stride], pads=pads)]
    if relu:
        # an epilogue in the pool's group reads its output, which leaves the group too
        # (channel-blocked, as DenseNet's first pool into its first dense block)
        nodes += [helper.make_node("Relu", ["p"], ["q"], name="relu"),
                  helper.make_node("Conv", ["q", "w3"], ["y1"], name="project"),
                  helper.make_node("Conv", ["p", "w3"], ["y2"], name="side"),
                  helper.make_node("Add", ["y1", "y2"], ["y"], name="sum")]
    else:
        nodes.append(helper.make_node("Conv", ["p", "w3"], ["y"], name="project"))
    out = [(size + pads[k] + pads[k + 2] - kernel) // stride + 1 for k in (0, 1)]
    graph = helper.make_graph(
        nodes, "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c] + out)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("size, kernel, stride, pads", [
    (28, 3, 2, [1, 1, 1, 1]),  # ResNet's: 3 x 3, stride 2, padded by 1 (4 cells)
    (14, 3, 1, [1, 1, 1, 1]),
    (13, 2, 2, [0, 0, 1, 1]),
])
def test_a_max_pool_window_is_written_out_as_maxima_cell_by_cell(size, kernel, stride, pads):
    # a max reduction of a few taps from -inf: written out as the reduction computed it
    # (the same helper, the same order), so every element is bit for bit the maximum;
    # before, each output pixel ran its taps as one dependent chain of maxima (ResNet-50's
    # pool: 0.275 ms, written out 0.111, onnxruntime 0.107 on one core)
    model = pool_model(size, kernel, stride, pads)
    rng = np.random.default_rng(3)
    feed = {"x": rng.standard_normal((1, CHANNELS, size, size)).astype(np.float32)}
    session = pco.InferenceSession(model.SerializeToString())
    (step,) = [s for s in session.compiled().plan.steps if isinstance(s, GroupStep)
               and any(n.name == "pool" for n in s.nodes)]
    program, _ = analyze_program(step.program, session.options)
    expected = cells(size, kernel, stride, pads)
    assert any("written out" in note and (expected == 1 or f"in {expected} cells" in note)
               for note in program.notes), program.notes
    assert not any(s.reduction for s in program.statements
                   if s.target.array == step.outputs[0][0])
    got = session.run(None, feed)[0]
    padded = np.pad(feed["x"], [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])],
                    constant_values=-np.inf)
    out = [(size + pads[k] + pads[k + 2] - kernel) // stride + 1 for k in (0, 1)]
    want = np.full((1, CHANNELS) + tuple(out), -np.inf, np.float32)
    for kh in range(kernel):
        for kw in range(kernel):
            want = np.maximum(want, padded[:, :, kh:kh + stride * out[0]:stride,
                                           kw:kw + stride * out[1]:stride])
    np.testing.assert_array_equal(got, want)
    if platform.machine() in ("x86_64", "AMD64"):
        report = polycomp.inspect(session)
        assert not report.scalar_loops, report.summary()


def test_a_max_pool_that_an_epilogue_reads_stays_a_reduction():
    # DenseNet-121's first pool with its batch norm and relu, written out, ran scalar
    # (gcc 12 did not if-convert the jammed copies): the reduction stays
    size, kernel, stride, pads = 28, 3, 2, [1, 1, 1, 1]
    model = pool_model(size, kernel, stride, pads, relu=True)
    feed = {"x": np.random.default_rng(4).standard_normal((1, CHANNELS, size, size))
            .astype(np.float32)}
    session = pco.InferenceSession(model.SerializeToString())
    (step,) = [s for s in session.compiled().plan.steps if isinstance(s, GroupStep)
               and any(n.name == "pool" for n in s.nodes)]
    assert any(n.name == "relu" for n in step.nodes)
    program, _ = analyze_program(step.program, session.options)
    assert not any("written out" in note for note in program.notes), program.notes
    assert any(s.reduction == "max" for s in program.statements)
    got = session.run(None, feed)[0]
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_smart_fusion_keeps_a_copy_apart_from_the_stencil_that_reads_it():
    # inside a loop smart fusion fuses for locality; a copy (a convolution's padded
    # input) fused with its stencil only moves the borders' guards into both
    facts = {"S0": fusion.StatementFacts("S0", 0, 2, frozenset({"A", "P"}), copies="P"),
             "S1": fusion.StatementFacts("S1", 1, 2, frozenset({"P", "B"}),
                                         stencil_reads=frozenset({"P"}))}
    pieces = [SimpleNamespace(source="S0", target="S1")]

    def solve(names):
        return SimpleNamespace(coincident=True)

    for outermost in (True, False):
        assert fusion.partition("smart", ["S0", "S1"], pieces, facts, solve,
                                outermost=outermost) == [["S0"], ["S1"]]
    # the same pair where S0 computes (no copy), or S1 reads P once: fused
    computes = dict(facts, S0=fusion.StatementFacts("S0", 0, 2, frozenset({"A", "P"})))
    once = dict(facts, S1=fusion.StatementFacts("S1", 1, 2, frozenset({"P", "B"})))
    for variant in (computes, once):
        assert fusion.partition("smart", ["S0", "S1"], pieces, variant, solve,
                                outermost=False) == [["S0", "S1"]]
