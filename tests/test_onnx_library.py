"""A whole model as one C library with one entry (polycomp/onnx/library.py), and the disk
cache of whole models (polycomp/onnx/model_cache.py), checked against onnxruntime."""

from __future__ import annotations

import ctypes

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polycomp.onnx as pco
from polycomp.errors import PolycompError
from polycomp.frontend.onnx.plan import GroupStep
from polycomp.onnx import session as S

from onnx_cases import reference

pytestmark = pytest.mark.needs_cc



def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "m", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _conv_model(seed=0, channels=8):
    """conv + relu, a reshape, a matmul + bias: three groups and a host step."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((channels, 3, 3, 3)).astype(np.float32) * 0.3
    m = rng.standard_normal((channels * 36, 5)).astype(np.float32) * 0.1
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                              name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
             helper.make_node("MatMul", ["f", "m"], ["y"], name="fc")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 6, 6])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
                  [numpy_helper.from_array(w, "w"), numpy_helper.from_array(m, "m")])


def test_a_model_is_one_library_with_one_entry():
    model = _conv_model()
    sess = pco.InferenceSession(model)
    compiled = sess.compiled()
    library = compiled.library
    groups = [s.name for s in compiled.plan.steps
              if isinstance(s, GroupStep) and s.program is not None]
    assert list(library.step_names) == groups and len(groups) >= 2
    lib = ctypes.CDLL(library.path)
    assert hasattr(lib, "polycomp_model_run") and hasattr(lib, "polycomp_model_step")
    # every distinct kernel is in that one library
    for k in range(len({id(k) for k in compiled.kernels.values()})):
        assert hasattr(lib, f"polycomp_model_kernel_{k}")
    x = np.random.default_rng(1).standard_normal((2, 3, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], reference(model, {"x": x})[0],
                               rtol=1e-4, atol=1e-5)
    # weights reach the C as pointers, never as text
    w = numpy_helper.to_array(model.graph.initializer[0])
    texts = [library.source] + [k.c_source for k in compiled.kernels.values()]
    for value in w.reshape(-1)[:8]:
        assert not any(f"{value:.5f}"[:7] in t for t in texts)


def test_outputs_that_share_bytes_are_handed_out_separately():
    """y1 a computed value, y2 the same value, y3 the feed, y4 a constant: four arrays,
    none sharing memory with another, the feed or the next run's results."""
    c = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "k")
    nodes = [helper.make_node("Relu", ["x"], ["y1"], name="relu"),
             helper.make_node("Identity", ["y1"], ["y2"], name="same"),
             helper.make_node("Identity", ["x"], ["y3"], name="feed"),
             helper.make_node("Identity", ["k"], ["y4"], name="const")]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3])
            for n in ("y1", "y2", "y3", "y4")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                   outs, [c])
    sess = pco.InferenceSession(model)
    x = np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)
    got = sess.run(None, {"x": x})
    for a, b in zip(got, reference(model, {"x": x})):
        np.testing.assert_array_equal(a, b)
    arrays = got + [x]
    for i in range(len(arrays)):
        for j in range(i + 1, len(arrays)):
            assert not np.shares_memory(arrays[i], arrays[j]), (i, j)
    again = sess.run(None, {"x": -x})
    np.testing.assert_array_equal(got[0], np.maximum(x, 0))  # not overwritten by the run
    assert not np.shares_memory(again[0], got[0])


def test_profile_times_every_group():
    model = _conv_model(channels=4)
    sess = pco.InferenceSession(model)
    x = np.zeros((2, 3, 6, 6), np.float32)
    rows = sess.profile({"x": x}, repeat=2)
    groups = [r for r in rows if r[0] in sess.compiled().library.step_names]
    assert len(groups) == len(sess.compiled().library.step_names)
    assert all(r[2] > 0 for r in groups)


def test_a_warm_session_comes_from_the_model_cache_without_lowering(monkeypatch):
    model = _conv_model(seed=3)
    x = np.random.default_rng(4).standard_normal((2, 3, 6, 6)).astype(np.float32)
    want = pco.InferenceSession(model).run(None, {"x": x})[0]
    S._KERNELS.clear()

    def no_lowering(*args, **kwargs):
        raise AssertionError("lowered again instead of reading the model cache")
    monkeypatch.setattr(S, "build_plan", no_lowering)
    warm = pco.InferenceSession(model)
    np.testing.assert_array_equal(warm.run(None, {"x": x})[0], want)
    assert warm.compiled().from_cache
    # the weights are part of the key: other weights are another model
    other = _conv_model(seed=5)
    with pytest.raises(AssertionError, match="lowered again"):
        pco.InferenceSession(other)
    # and so are the options
    with pytest.raises(AssertionError, match="lowered again"):
        pco.InferenceSession(model, unroll=2)
    monkeypatch.undo()
    # what the cache does not hold (the plan, the kernels) is made when asked for
    compiled = warm.compiled()
    assert [s.name for s in compiled.plan.groups if s.program is not None] == \
        list(compiled.library.step_names)


def test_a_group_status_names_the_group():
    nodes = [helper.make_node("Gather", ["x", "i"], ["g"], axis=0, name="gather"),
             helper.make_node("Relu", ["g"], ["y"], name="relu")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 2]),
                           helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])])
    sess = pco.InferenceSession(model)
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    with pytest.raises(PolycompError, match="group 'g0'.*out of bounds"):
        sess.run(None, {"x": x, "i": np.array([0, 9], np.int64)})
    np.testing.assert_array_equal(sess.run(None, {"x": x, "i": np.array([3, 1], np.int64)})[0],
                                  x[[3, 1]])


def test_a_known_model_skips_the_checker_and_a_changed_one_does_not(monkeypatch):
    """onnx's checker takes seconds on a large model: the model cache remembers the
    digests that passed it. Other bytes are checked as ever."""
    model = _conv_model(seed=6)
    x = np.random.default_rng(7).standard_normal((2, 3, 6, 6)).astype(np.float32)
    want = pco.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    S._KERNELS.clear()

    def checker_ran(*args, **kwargs):
        raise AssertionError("the checker ran again")
    monkeypatch.setattr(onnx.checker, "check_model", checker_ran)
    np.testing.assert_array_equal(
        pco.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0], want)
    with pytest.raises(PolycompError, match="checker ran again"):
        pco.InferenceSession(_conv_model(seed=8).SerializeToString())
    # without the cache nothing is remembered
    with pytest.raises(PolycompError, match="checker ran again"):
        pco.InferenceSession(model.SerializeToString(), cache=False)
