"""The whole-model side of the ONNX frontend: grouping, the memory plan, the compile cache
and the session's reuse of buffers, checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, helper

import polycomp
import polycomp.onnx as pco
from polycomp.errors import ArgumentError
from polycomp.frontend.onnx.memory import plan_memory
from polycomp.frontend.onnx.plan import GroupStep, HostStep
from polycomp.onnx import session as S

from onnx_cases import reference

pytestmark = pytest.mark.needs_cc



def chain_model(ops: list[str], shape=(2, 3, 8)):
    """x -> op0 -> Reshape -> op1 -> Reshape -> ... -> y: each op its own group (the host
    reshape between them ends a group), so values are born and die one after another."""
    nodes, inits = [], []
    flat = [shape[0], int(np.prod(shape[1:]))]
    current = "x"
    for k, op in enumerate(ops):
        nodes.append(helper.make_node(op, [current], [f"a{k}"], name=f"op{k}"))
        target = flat if k % 2 == 0 else list(shape)
        inits.append(onnx.numpy_helper.from_array(np.array(target, dtype=np.int64), f"s{k}"))
        nodes.append(helper.make_node("Reshape", [f"a{k}", f"s{k}"], [f"r{k}"], name=f"rs{k}"))
        current = f"r{k}"
    nodes.append(helper.make_node("Neg", [current], ["y"], name="last"))
    out_shape = flat if len(ops) % 2 == 1 else list(shape)
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _lifetimes(plan):
    """value -> (first step, last step) over the plan, views extending their base."""
    base, birth, death = {}, {}, {}
    for k, step in enumerate(plan.steps):
        if isinstance(step, HostStep):
            src = step.node.inputs[0]
            base[step.node.outputs[0]] = base.get(src, src)
            reads = [i for i in step.node.inputs if i]
        else:
            reads = [v for _, v in step.inputs]
            for _, v in step.outputs:
                birth[v] = k
        for v in reads:
            root = base.get(v, v)
            death[root] = max(death.get(root, -1), k)
    return {v: (birth[v], death.get(v, birth[v])) for v in birth}


def check_no_overlap(plan, memory):
    life = _lifetimes(plan)
    values = plan.graph.values
    spans = {v: (off, off + int(np.prod(values[v].shape)) * np.dtype(values[v].dtype).itemsize)
             for v, off in memory.offsets.items()}
    names = sorted(spans)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            live = life[a][0] <= life[b][1] and life[b][0] <= life[a][1]
            disjoint = spans[a][1] <= spans[b][0] or spans[b][1] <= spans[a][0]
            assert not live or disjoint, (a, b, life[a], life[b], spans[a], spans[b])
        assert spans[a][1] <= memory.arena_bytes


def test_memory_plan_reuses_buffers_and_results_match_onnxruntime():
    model = chain_model(["Relu", "Exp", "Sigmoid", "Tanh", "Abs", "Neg"])
    x = np.random.default_rng(1).standard_normal((2, 3, 8)).astype(np.float32)
    sess = pco.InferenceSession(model)
    compiled = sess.compiled()
    memory = compiled.memory
    assert len(memory.offsets) == 6  # every op's output but the graph output
    assert memory.arena_bytes < memory.intermediate_bytes  # buffers were reused
    check_no_overlap(compiled.plan, memory)
    for _ in range(2):  # the second run reuses the arena
        (got,) = sess.run(None, {"x": x})
        np.testing.assert_allclose(got, reference(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


@settings(max_examples=8, deadline=None)
@given(st.lists(st.sampled_from(["Relu", "Neg", "Abs", "Sigmoid"]), min_size=1, max_size=7))
def test_memory_plan_never_overlaps_live_values(ops):
    model = chain_model(ops)
    from polycomp.frontend.onnx.graph import specialise
    from polycomp.frontend.onnx.model import load_model
    from polycomp.frontend.onnx.plan import build_plan
    plan = build_plan(specialise(load_model(model), {"x": (2, 3, 8)}))
    check_no_overlap(plan, plan_memory(plan))


def test_graph_outputs_are_fresh_arrays_each_run():
    model = chain_model(["Relu", "Exp"])
    x = np.ones((2, 3, 8), dtype=np.float32)
    sess = pco.InferenceSession(model)
    (a,) = sess.run(None, {"x": x})
    (b,) = sess.run(None, {"x": 2 * x})
    assert not np.shares_memory(a, b)
    np.testing.assert_allclose(a, reference(model, {"x": x})[0], rtol=1e-5)


def test_elementwise_consumers_join_their_producers_group():
    nodes = [helper.make_node("Exp", ["x"], ["a"], name="e"),
             helper.make_node("Add", ["a", "x"], ["b"], name="add"),
             helper.make_node("Relu", ["b"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [4, 16])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [4, 16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = pco.InferenceSession(model)
    groups = sess.compiled().plan.groups
    assert [len(g.nodes) for g in groups] == [3]
    roles = {a.role for a in groups[0].program.arrays}
    assert "temporary" in roles or "local" in roles  # a and b never leave the group
    x = np.random.default_rng(2).standard_normal((4, 16)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], reference(model, {"x": x})[0],
                               rtol=1e-5, atol=1e-6)


def test_warm_compile_comes_from_the_disk_cache(monkeypatch):
    model = chain_model(["Relu", "Sigmoid"])
    x = np.random.default_rng(3).standard_normal((2, 3, 8)).astype(np.float32)
    want = pco.InferenceSession(model).run(None, {"x": x})[0]
    S._KERNELS.clear()  # a new process would start like this

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled again instead of reading the cache")
    monkeypatch.setattr("polycomp.compile_cache.compile_program", no_compile)
    got = pco.InferenceSession(model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)
    # other options are other entries: this one must compile (and fails here)
    S._KERNELS.clear()
    with pytest.raises(AssertionError, match="compiled again"):
        pco.InferenceSession(model, unroll=2)


def test_identical_groups_share_one_kernel():
    model = chain_model(["Relu", "Relu", "Relu", "Relu"], shape=(2, 4, 4))
    sess = pco.InferenceSession(model)
    compiled = sess.compiled()
    kernels = {id(k) for k in compiled.kernels.values()}
    # Relu on (2, 16), Relu on (2, 4, 4) twice each, then Neg: three distinct programs
    assert len(compiled.kernels) == 5 and len(kernels) == 3


def test_a_kernel_refuses_a_wrong_output_buffer():
    kernel = polycomp.compile("def f(float(N) A) -> (B) { B(i) = A(i) + 1 }")
    a = np.arange(4, dtype=np.float32)
    out = np.empty(4, dtype=np.float32)
    kernel(a, out={"B": out})
    np.testing.assert_array_equal(out, a + 1)
    with pytest.raises(ArgumentError, match="buffer given for output 'B'"):
        kernel(a, out={"B": np.empty(5, dtype=np.float32)})
    with pytest.raises(ArgumentError):
        kernel(a, out={"B": np.empty(8, dtype=np.float32)[::2]})


def test_group_steps_name_their_nodes():
    model = chain_model(["Relu", "Exp"])
    plan = pco.InferenceSession(model).compiled().plan
    named = [n.name for s in plan.steps if isinstance(s, GroupStep) for n in s.nodes]
    assert named == ["op0", "op1", "last"]


def test_constant_weights_are_packed_once_at_load_time():
    rng = np.random.default_rng(4)
    w = onnx.numpy_helper.from_array(rng.standard_normal((24, 8, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                              name="conv"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 8, 10, 10])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 24, 10, 10])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = pco.InferenceSession(model)
    (group,) = sess.compiled().plan.groups
    packed = [a for a in group.program.arrays if a.name.endswith("_packed")]
    assert packed and all(a.role == "input" for a in packed)
    assert not any(s.name.endswith(("_pack", "_pad")) for s in group.program.statements)
    x = rng.standard_normal((1, 8, 10, 10)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], reference(model, {"x": x})[0],
                               rtol=1e-4, atol=1e-5)
    # without channel blocking nothing is packed, and the result is the same
    plain = pco.InferenceSession(model, block_channels=False)
    assert not any(a.name.endswith("_packed")
                   for a in plain.compiled().plan.groups[0].program.arrays)
    np.testing.assert_allclose(plain.run(None, {"x": x})[0], reference(model, {"x": x})[0],
                               rtol=1e-4, atol=1e-5)
