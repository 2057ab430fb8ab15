"""Schedule quality of fused convolution groups, guarded: channel blocking reaches grouped
convolutions, and a conv's epilogue (unpack, bias, activation, residual) is one pass over
the output. Every case is also checked against onnxruntime."""

from __future__ import annotations

import islpy as isl
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import polycomp.onnx as pco
from polycomp import expr as E
from polycomp.scheduler import cache_model as CM

from onnx_cases import reference

pytestmark = [pytest.mark.needs_cc,
              pytest.mark.skipif(CM.simd_lanes(4) < 4, reason="channel blocking needs SIMD")]


def _conv_model(c_in, c_out, group, size, kernel=1, residual=False, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((c_out, c_in // group, kernel, kernel)).astype(np.float32) * 0.2
    b = rng.standard_normal(c_out).astype(np.float32)
    pad = kernel // 2
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=group,
                              kernel_shape=[kernel, kernel], pads=[pad] * 4, name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c_in, size, size])]
    if residual:
        nodes.append(helper.make_node("Add", ["r", "skip"], ["y"], name="add"))
        inputs.append(helper.make_tensor_value_info("skip", TensorProto.FLOAT,
                                                    [1, c_out, size, size]))
    else:
        nodes[-1].output[0] = "y"
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, [1, c_out, size, size])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    feed = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
            .astype(np.float32) for i in inputs}
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), feed



def _program(session):
    compiled = session.compiled()
    (step,) = compiled.plan.groups
    return compiled.kernels[step.name].specialize({}, build=False).compiled.program


@pytest.mark.parametrize("c, group, size", [(544, 4, 7), (96, 2, 9)])
def test_grouped_convolutions_are_channel_blocked(c, group, size):
    """ShuffleNet's 4-group 1x1 conv at 7 x 7 ran at a tenth of the speed of ungrouped ones
    before its channels per group were blocked."""
    model, feed = _conv_model(c, c, group, size)
    session = pco.InferenceSession(model)
    program = _program(session)
    assert any("blocked" in n for n in program.notes), program.notes
    np.testing.assert_allclose(session.run(None, feed)[0], reference(model, feed)[0],
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("residual", [False, True])
def test_a_conv_epilogue_is_one_pass(residual):
    """After the blocked reduction, one statement reads the blocked accumulator and
    writes the output (unpack + bias + ReLU (+ residual) inlined: scheduler/inlining.py);
    no array of the output's size is left in between."""
    model, feed = _conv_model(16, 32, 1, 12, kernel=3, residual=residual)
    session = pco.InferenceSession(model)
    program = _program(session)
    assert any("blocked" in n for n in program.notes)
    blocked = [a.name for a in program.arrays if a.name.endswith("_blocked")]
    readers = [s for s in program.statements
               if any(r.get_tuple_name(isl.dim_type.out) in blocked for r in s.reads)
               and s.target.array not in blocked]
    outputs = [a.name for a in program.arrays if a.role == "output"]
    assert [s.target.array for s in readers] == outputs
    assert not [a for a in program.arrays if a.role == "temporary"
                and a.name not in blocked and np.prod(a.extents({})) >= 32 * 12 * 12]
    np.testing.assert_allclose(session.run(None, feed)[0], reference(model, feed)[0],
                               rtol=1e-4, atol=1e-4)


def _chain_model(seed=1):
    """conv -> relu -> maxpool -> depthwise conv -> 1x1 convs -> concat -> conv: values
    between groups that only convolutions, poolings and a channel concat read."""
    rng = np.random.default_rng(seed)

    def weight(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.2, name)
    inits = [weight("w0", 32, 3, 3, 3), weight("b0", 32), weight("wd", 32, 1, 3, 3),
             weight("wa", 16, 32, 1, 1), weight("wb", 32, 32, 1, 1), weight("wc", 24, 48, 3, 3)]
    n = helper.make_node
    nodes = [n("Conv", ["x", "w0", "b0"], ["c0"], kernel_shape=[3, 3], pads=[1] * 4, name="c0"),
             n("Relu", ["c0"], ["r0"], name="r0"),
             n("MaxPool", ["r0"], ["p0"], kernel_shape=[2, 2], strides=[2, 2], name="p0"),
             n("Conv", ["p0", "wd"], ["d0"], kernel_shape=[3, 3], pads=[1] * 4, group=32,
               name="dw"),
             n("Clip", ["d0", "lo", "hi"], ["d1"], name="relu6"),
             n("Conv", ["d1", "wa"], ["a"], kernel_shape=[1, 1], name="ca"),
             n("Conv", ["d1", "wb"], ["b"], kernel_shape=[1, 1], name="cb"),
             n("Concat", ["a", "b"], ["cat"], axis=1, name="cat"),
             n("Conv", ["cat", "wc"], ["y"], kernel_shape=[3, 3], pads=[1] * 4, name="last")]
    inits += [numpy_helper.from_array(np.float32(0), "lo"), numpy_helper.from_array(np.float32(6), "hi")]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 20, 18])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 24, 10, 9])], inits)
    feed = {"x": rng.standard_normal((1, 3, 20, 18)).astype(np.float32)}
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), feed


def test_values_between_convolutions_stay_channel_blocked():
    """A blocked conv's output, read only by other groups' convs, pools and a channel
    concat, is stored (n, c / L, h, w, c % L): no group transposes it back and forth
    (plan.py), and each group's statements that write such a value run their channels
    in blocks with a unit-stride inner loop (scheduler/stripmining.py)."""
    model, feed = _chain_model()
    session = pco.InferenceSession(model)
    compiled = session.compiled()
    lanes = CM.simd_lanes(4)
    assert {"r0", "p0", "d1", "cat"} <= set(compiled.plan.layouts), compiled.plan.layouts
    assert all(block == lanes for block in compiled.plan.layouts.values())
    # nothing leaves the model blocked: its output is plain
    assert "y" not in compiled.plan.layouts
    for step in compiled.plan.groups:
        program = compiled.kernels[step.name].specialize({}, build=False).compiled.program
        for s in program.statements:
            shape = program.array(s.target.array).extents({})
            if len(shape) == 5 and shape[-1] == lanes:  # a blocked array's writer:
                # its lane index is a plain iterator, the innermost of its domain
                last = s.target.indices[-1]
                assert isinstance(last, E.Iter) and last.name == s.iterators[-1], s
    np.testing.assert_allclose(session.run(None, feed)[0], reference(model, feed)[0],
                               rtol=1e-4, atol=1e-4)


def test_a_pool_whose_readers_need_plain_values_reads_a_plain_input():
    """A max pool accumulates in its input's layout: read by a grouped conv (which reads
    blocked values badly, plan.READS_BLOCKED), its output is plain, so its input is
    plain too; a blocked input would make the pool's window loop a transposition from
    blocked to plain, which gcc left scalar (ShuffleNet's first pool). In
    test_values_between_convolutions_stay_channel_blocked the pool's reader is a
    depthwise conv, and both stay blocked."""
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.2, name)
             for name, shape in (("w0", (32, 3, 3, 3)), ("b0", (32,)), ("wg", (32, 16, 1, 1)))]
    n = helper.make_node
    nodes = [n("Conv", ["x", "w0", "b0"], ["c0"], kernel_shape=[3, 3], pads=[1] * 4, name="c0"),
             n("Relu", ["c0"], ["r0"], name="r0"),
             n("MaxPool", ["r0"], ["p0"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4,
               name="p0"),
             n("Conv", ["p0", "wg"], ["y"], kernel_shape=[1, 1], group=2, name="grouped")]
    graph = helper.make_graph(nodes, "pool", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 24, 24])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 32, 12, 12])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feed = {"x": rng.standard_normal((1, 3, 24, 24)).astype(np.float32)}
    session = pco.InferenceSession(model)
    layouts = session.compiled().plan.layouts
    assert "p0" not in layouts and "r0" not in layouts, layouts
    np.testing.assert_allclose(session.run(None, feed)[0], reference(model, feed)[0],
                               rtol=1e-4, atol=1e-4)
