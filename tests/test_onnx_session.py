"""polycomp.onnx.InferenceSession: onnxruntime's interface, and models built to break it.

The API half checks what onnxruntime's session does (input and output descriptions,
output selection, a dynamic batch dimension, refusing bad feeds) against onnxruntime
itself. The hostile half hands the session models a malicious or broken file could hold:
each must end in a PolycompError naming the node or tensor, never a crash, never C code
from a name, never a read outside the model's folder.
"""

from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import polycomp
import polycomp.onnx as pco
from polycomp.errors import (ArgumentError, ParseError, PolycompError,
                             UnsupportedError)
from polycomp.onnx import ModelError

pytestmark = pytest.mark.needs_cc

F = T.FLOAT
OPTIONS = {"parallel": False}  # tiny shapes: no OpenMP region to build


def tensor(name, shape, elem=F):
    return h.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, initializers=(), name="g", opset=17):
    graph = h.make_graph(nodes, name, inputs, outputs, list(initializers))
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])


def reference(m, feed):
    return ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)


def close(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.fixture(scope="module")
def batched():
    """y = relu(x + c), z = y * x over a symbolic batch dimension N."""
    c = numpy_helper.from_array(np.array([0.5, -1.0, 2.0], np.float32), "c")
    m = model([h.make_node("Add", ["x", "c"], ["s"], name="add"),
               h.make_node("Relu", ["s"], ["y"], name="relu"),
               h.make_node("Mul", ["y", "x"], ["z"], name="mul")],
              [tensor("x", ["N", 3])], [tensor("y", ["N", 3]), tensor("z", ["N", 3])], [c])
    return m, pco.InferenceSession(m.SerializeToString(), **OPTIONS)


# ----------------------------------------------------------------------------- the API

def test_inputs_and_outputs_are_described_like_onnxruntime(batched):
    m, session = batched
    theirs = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for ours, want in ((session.get_inputs(), theirs.get_inputs()),
                       (session.get_outputs(), theirs.get_outputs())):
        assert [(a.name, a.type, list(a.shape)) for a in ours] == \
            [(a.name, a.type, list(a.shape)) for a in want]
    assert session.get_inputs()[0].shape == ["N", 3]
    assert session.get_outputs()[1].type == "tensor(float)"


def test_run_all_outputs_a_subset_and_another_order(batched):
    m, session = batched
    x = rand(4, 3)
    y, z = reference(m, {"x": x})
    close(session.run(None, {"x": x}), [y, z])
    close(session.run(["z"], {"x": x}), [z])
    close(session.run(["z", "y"], {"x": x}), [z, y])


def test_a_dynamic_batch_dimension_compiles_per_size(batched):
    m, session = batched
    for n in (2, 5, 2):
        x = rand(n, 3, seed=n)
        close(session.run(None, {"x": x}), reference(m, {"x": x}))
    shapes = [shape for key in session._compiled for _, shape in key[0]]
    assert shapes.count((2, 3)) == 1 and shapes.count((5, 3)) == 1


@pytest.mark.parametrize("feed, output_names, message", [
    ({"x": np.zeros((2, 3), np.float64)}, None, "dtype float64"),
    ({"x": np.zeros((2, 3, 1), np.float32)}, None, "rank 3"),
    ({"x": np.zeros((2, 4), np.float32)}, None, "shape"),
    ({}, None, "'x' is missing"),
    ({"x": np.zeros((2, 3), np.float32), "w": np.zeros(3, np.float32)}, None,
     "'w' is not an input"),
    ({"x": np.zeros((2, 3), np.float32)}, ["nope"], "'nope' is not an output"),
    ({"x": np.zeros((2, 3), np.float32)}, "y", "list or None"),
    ([np.zeros((2, 3), np.float32)], None, "dict"),
])
def test_bad_feeds_are_argument_errors(batched, feed, output_names, message):
    _, session = batched
    with pytest.raises(ArgumentError, match=message):
        session.run(output_names, feed)


def test_compiled_needs_every_symbolic_dimension(batched):
    _, session = batched
    with pytest.raises(ArgumentError, match="symbolic dimensions have no default"):
        session.compiled()
    with pytest.raises(ArgumentError, match="every input"):
        session.compiled({"x": (2, -3)})
    assert session.compiled({"x": (2, 3)}).graph.values["z"].shape == (2, 3)


def test_compile_onnx_is_the_session_from_a_path_bytes_or_proto(tmp_path, batched):
    m, _ = batched
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    x = rand(3, 3)
    want = reference(m, {"x": x})
    for source in (str(path), path, m.SerializeToString(), m):
        session = polycomp.compile_onnx(source, **OPTIONS)
        assert isinstance(session, pco.InferenceSession)
        close(session.run(None, {"x": x}), want)


# ----------------------------------------------------------------------------- hostile names

C_NAMES = ['x"; system("rm -rf /"); //', "*/ int main(void) { return 1; } /*",
           "line\nbreak", "it's", "a.b", "a_b", "#define x 1", "\\", "t0", "S0"]


def test_names_holding_c_code_and_colliding_after_escaping_work():
    """Every value, node and the graph carry names C could not take: the model still
    computes what onnxruntime computes (names never reach the C; 'a.b' and 'a_b' stay two
    values)."""
    x, w = C_NAMES[0], C_NAMES[1]
    nodes = [h.make_node("Add", [x, "a.b"], ["a_b"], name=C_NAMES[2]),
             h.make_node("Mul", ["a_b", "a.b"], [C_NAMES[3]], name="a.b"),
             h.make_node("Sub", [C_NAMES[3], w], ["t0"], name="a_b"),
             h.make_node("Relu", ["t0"], ["S0"], name="*/")]
    m = model(nodes, [tensor(x, [2, 3]), tensor("a.b", [2, 3])], [tensor("S0", [2, 3])],
              [numpy_helper.from_array(np.full((2, 3), 0.25, np.float32), w)],
              name='graph"*/\n#include <stdio.h>')
    feed = {x: rand(2, 3, seed=1), "a.b": rand(2, 3, seed=2)}
    session = pco.InferenceSession(m, **OPTIONS)
    close(session.run(None, feed), reference(m, feed))
    for kernel in session.compiled().kernels.values():
        source = kernel.c_source
        assert "rm -rf" not in source and "main(void)" not in source and "stdio" not in source


def test_duplicate_and_missing_node_names_are_told_apart():
    """Two nodes named 'n' in two groups (MatMul starts one): the grouping tells them
    apart, and so do the names of unnamed nodes."""
    weight = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    nodes = [h.make_node("Relu", ["x"], ["a"], name="n"),
             h.make_node("MatMul", ["a", "w"], ["b"], name="n"),
             h.make_node("Exp", ["b"], ["c"]),
             h.make_node("Abs", ["c"], ["y"], name="Exp#2")]
    m = model(nodes, [tensor("x", [2, 4])], [tensor("y", [2, 3])],
              [numpy_helper.from_array(weight, "w")])
    x = rand(2, 4)
    session = pco.InferenceSession(m, **OPTIONS)
    # onnxruntime refuses two nodes of one name; ONNX itself does not
    close(session.run(None, {"x": x}), [np.abs(np.exp(np.maximum(x, 0) @ weight))])
    names = [n.name for n in session.compiled().graph.nodes]
    assert len(set(names)) == 4 and len(session.compiled().plan.groups) == 2


# ----------------------------------------------------------------------------- hostile models

def _relu(shape, out_shape=None):
    return model([h.make_node("Relu", ["x"], ["y"], name="relu")], [tensor("x", shape)],
                 [tensor("y", out_shape if out_shape is not None else shape)])


def _add_with(init, shape=(3,)):
    return model([h.make_node("Add", ["x", init.name], ["y"], name="add")],
                 [tensor("x", list(shape))], [tensor("y", list(shape))], [init])


def _raw_tensor(name, dims):
    t = T()
    t.name, t.data_type = name, F
    t.dims.extend(dims)
    t.raw_data = b"\0" * 12
    return t


def _custom_domain():
    m = model([h.make_node("Evil", ["x"], ["y"], name="evil", domain="com.evil")],
              [tensor("x", [3])], [tensor("y", [3])])
    m.opset_import.append(h.make_opsetid("com.evil", 1))
    return m


HOSTILE = {
    "negative input dim": (_relu([-3, 2]), ModelError, "x"),
    "huge input dim": (_relu([2**40]), ModelError, "x"),
    "huge intermediate": (model([h.make_node("Expand", ["x", "s"], ["y"], name="expand")],
                                [tensor("x", [1])], [tensor("y", [2**20, 2**20])],
                                [numpy_helper.from_array(np.array([2**20, 2**20]), "s")]),
                          ModelError, "y"),
    # 12 bytes declaring 2^40 elements: shape inference's data propagation would
    # densify them and the process be killed
    "a sparse constant bomb": (model([h.make_node("Constant", [], ["c"], name="bomb",
                                                  sparse_value=h.make_sparse_tensor(
        numpy_helper.from_array(np.array([1.0], np.float32), "v"),
        numpy_helper.from_array(np.array([5], np.int64), "i"), [2**40])),
        h.make_node("Add", ["x", "c"], ["y"], name="add")],
        [tensor("x", [1])], [tensor("y", [2**40])]), ModelError, "bomb"),
    "a constant range of 2^40": (model([h.make_node("Range", ["a", "b", "d"], ["r"],
                                                    name="range"),
                                        h.make_node("Add", ["x", "r"], ["y"], name="add")],
                                       [tensor("x", [1])], [tensor("y", [2**40])],
                                       [numpy_helper.from_array(np.array(v, np.float32), n)
                                        for v, n in ((0, "a"), (2.0**40, "b"), (1, "d"))]),
                                 ModelError, "'r'"),
    "negative initializer dim": (_add_with(_raw_tensor("w", [-1, 3])), ModelError, "w"),
    "huge initializer dim": (_add_with(_raw_tensor("w", [2**40])), ModelError, "w"),
    "initializer data too short": (_add_with(_raw_tensor("w", [5]), (5,)), ModelError, "w"),
    "inconsistent shapes": (model([h.make_node("Add", ["x", "z"], ["y"], name="bad_add")],
                                  [tensor("x", [2, 3]), tensor("z", [4, 5])],
                                  [tensor("y", [2, 3])]), ModelError, "bad_add"),
    "a cycle": (model([h.make_node("Add", ["x", "d"], ["c"], name="n1"),
                       h.make_node("Relu", ["c"], ["d"], name="n2")],
                      [tensor("x", [3])], [tensor("d", [3])]), ModelError, "'d'"),
    "a dangling input": (model([h.make_node("Add", ["x", "w"], ["y"], name="add")],
                               [tensor("x", [3])], [tensor("y", [3])]), ModelError, "'w'"),
    "an output nobody computes": (model([h.make_node("Relu", ["x"], ["y"], name="relu")],
                                        [tensor("x", [3])], [tensor("nowhere", [3])]),
                                  ModelError, "nowhere"),
    "an unknown op type": (model([h.make_node("FooBar", ["x"], ["y"], name="foo")],
                                 [tensor("x", [3])], [tensor("y", [3])]), ModelError, "foo"),
    "an op of a custom domain": (_custom_domain(), UnsupportedError, "evil"),
    "a sequence input": (model([h.make_node("Identity", ["x"], ["y"], name="id")],
                               [h.make_tensor_sequence_value_info("x", F, [3])],
                               [h.make_tensor_sequence_value_info("y", F, [3])]),
                         UnsupportedError, "'x'"),
    "a bfloat16 input": (model([h.make_node("Relu", ["x"], ["y"], name="relu")],
                               [tensor("x", [3], T.BFLOAT16)], [tensor("y", [3], T.BFLOAT16)]),
                         UnsupportedError, "BFLOAT16"),
    "a sparse initializer": (model([h.make_node("Add", ["x", "sp"], ["y"], name="add")],
                                   [tensor("x", [3])], [tensor("y", [3])]), UnsupportedError,
                             "'sp'"),
    "an old opset": (model([h.make_node("Relu", ["x"], ["y"], name="relu")],
                           [tensor("x", [3])], [tensor("y", [3])], opset=5),
                     UnsupportedError, "opset 5"),
}


HOSTILE["a sparse initializer"][0].graph.sparse_initializer.append(h.make_sparse_tensor(
    numpy_helper.from_array(np.array([1.0], np.float32), "sp"),
    numpy_helper.from_array(np.array([1], np.int64), "sp_indices"), [3]))


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_models_are_polycomp_errors_naming_the_culprit(case):
    m, error, culprit = HOSTILE[case]
    with pytest.raises(error) as info:
        pco.InferenceSession(m.SerializeToString(), **OPTIONS)
    assert culprit in str(info.value), str(info.value)


def test_a_zero_extent_gives_an_empty_result():
    m = _relu([0, 3])
    x = np.zeros((0, 3), np.float32)
    got = pco.InferenceSession(m, **OPTIONS).run(None, {"x": x})
    close(got, reference(m, {"x": x}))


@pytest.mark.parametrize("data", [b"", b"\x08\x07garbage" * 50, b"\xff" * 64])
def test_garbage_is_a_parse_or_model_error(data):
    with pytest.raises((ParseError, ModelError)):
        pco.InferenceSession(data)


def test_a_truncated_file_is_refused(tmp_path, batched):
    m, _ = batched
    data = m.SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises((ParseError, ModelError)) as info:
        pco.InferenceSession(str(path))
    assert "cut.onnx" in str(info.value)


def test_a_missing_file_or_a_wrong_kind_is_an_argument_error(tmp_path):
    with pytest.raises(ArgumentError, match="cannot read"):
        pco.InferenceSession(str(tmp_path / "none.onnx"))
    with pytest.raises(ArgumentError, match="cannot read"):
        pco.InferenceSession(str(tmp_path))
    with pytest.raises(ArgumentError):
        pco.InferenceSession(42)


# ----------------------------------------------------------------------------- external data

def _external(location: str, folder):
    """A model whose initializer 'w' lives in ``location`` (relative to ``folder``)."""
    w = numpy_helper.from_array(np.array([1.0, 2.0, 3.0], np.float32), "w")
    w.ClearField("raw_data")
    w.ClearField("float_data")
    w.data_location = T.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "12")):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    path = folder / "m.onnx"
    path.write_bytes(_add_with(w).SerializeToString())
    return path


@pytest.fixture
def folders(tmp_path):
    inner = tmp_path / "model"
    inner.mkdir()
    secret = tmp_path / "outside.bin"
    secret.write_bytes(np.array([7.0, 7.0, 7.0], np.float32).tobytes())
    return inner, secret


def test_external_data_inside_the_folder_is_read(folders):
    inner, _ = folders
    (inner / "w.bin").write_bytes(np.array([1.0, 2.0, 3.0], np.float32).tobytes())
    x = rand(3)
    got = pco.InferenceSession(str(_external("w.bin", inner)), **OPTIONS).run(None, {"x": x})
    close(got, [x + np.array([1.0, 2.0, 3.0], np.float32)])


@pytest.mark.parametrize("where", ["relative", "absolute", "symlink", "nul"])
def test_external_data_outside_the_folder_is_refused(folders, where, monkeypatch):
    inner, secret = folders
    location = {"relative": "../outside.bin", "absolute": str(secret),
                "symlink": "link.bin", "nul": "w.bin\0../outside.bin"}[where]
    if where == "symlink":
        os.symlink(secret, inner / "link.bin")
    path = _external(location, inner)
    opened = []

    def spy(real):
        def opener(file, *args, **kwargs):
            opened.append(os.fspath(file) if not isinstance(file, int) else file)
            return real(file, *args, **kwargs)
        return opener
    monkeypatch.setattr("builtins.open", spy(open))
    monkeypatch.setattr(os, "open", spy(os.open))
    try:
        with pytest.raises(ModelError, match="'w'.*outside the model's folder"):
            pco.InferenceSession(str(path))
    finally:
        monkeypatch.undo()
    assert str(path) in opened
    assert not any(str(f).endswith(("outside.bin", "link.bin")) for f in opened), opened


def test_external_data_past_the_end_of_its_file_is_refused(folders):
    inner, _ = folders
    (inner / "w.bin").write_bytes(b"\0" * 8)  # 12 bytes wanted
    with pytest.raises(ModelError, match="'w'"):
        pco.InferenceSession(str(_external("w.bin", inner)))


def test_external_data_of_a_model_given_as_bytes_is_refused(folders):
    inner, _ = folders
    path = _external("w.bin", inner)
    with pytest.raises(ModelError, match="'w'.*external file"):
        pco.InferenceSession(path.read_bytes())


def test_external_data_in_a_constant_node_is_checked_too(folders):
    inner, _ = folders
    value = numpy_helper.from_array(np.array([1.0, 2.0, 3.0], np.float32), "cval")
    value.ClearField("raw_data")
    value.data_location = T.EXTERNAL
    entry = value.external_data.add()
    entry.key, entry.value = "location", "../outside.bin"
    m = model([h.make_node("Constant", [], ["c"], value=value, name="const"),
               h.make_node("Add", ["x", "c"], ["y"], name="add")],
              [tensor("x", [3])], [tensor("y", [3])])
    path = inner / "c.onnx"
    path.write_bytes(m.SerializeToString())
    with pytest.raises(ModelError, match="outside the model's folder"):
        pco.InferenceSession(str(path))


def test_external_data_in_a_subgraph_is_checked_too(folders):
    """An If whose condition is a constant is folded by onnx's reference evaluator, which
    would read its branch's external initializer relative to the current directory."""
    inner, _ = folders
    w = numpy_helper.from_array(np.array([1.0, 2.0, 3.0], np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = T.EXTERNAL
    entry = w.external_data.add()
    entry.key, entry.value = "location", "../outside.bin"
    branch = h.make_graph([h.make_node("Identity", ["w"], ["wb"])], "then", [],
                          [tensor("wb", [3])], [w])
    other = h.make_graph([h.make_node("Identity", ["zero"], ["wz"])], "else", [],
                         [tensor("wz", [3])],
                         [numpy_helper.from_array(np.zeros(3, np.float32), "zero")])
    m = model([h.make_node("If", ["cond"], ["c"], then_branch=branch, else_branch=other,
                           name="if"),
               h.make_node("Add", ["x", "c"], ["y"], name="add")],
              [tensor("x", [3])], [tensor("y", [3])],
              [numpy_helper.from_array(np.array(True), "cond")])
    path = inner / "if.onnx"
    path.write_bytes(m.SerializeToString())
    with pytest.raises(ModelError, match="'w'.*outside the model's folder"):
        pco.InferenceSession(str(path))


# ----------------------------------------------------------------------------- the backend

def test_the_backend_declines_what_polycomp_does_not_support():
    import unittest

    from polycomp.onnx import backend
    with pytest.raises(unittest.SkipTest, match="com.evil"):
        backend.prepare(_custom_domain())
    m = _relu([2, 3])
    x = rand(2, 3)
    (y,) = backend.run_model(m, [x], parallel=False, rtol=1e-3)
    np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_an_exporters_minus_one_extent_is_dynamic():
    # PaddleOCR's classifier declares its input [-1, 3, ?, ?] and its output [-1, 2]
    w = numpy_helper.from_array(rand(3, 2, seed=9), "w")
    graph = h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"])], "g",
                         [h.make_tensor_value_info("x", T.FLOAT, [-1, 3])],
                         [h.make_tensor_value_info("y", T.FLOAT, [-1, 2])], [w])
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    session = pco.InferenceSession(m.SerializeToString())
    assert session.get_inputs()[0].shape == [None, 3]
    for n in (1, 4):
        x = rand(n, 3, seed=n)
        close(session.run(None, {"x": x}), reference(m, {"x": x}))


@pytest.mark.parametrize("target", ["cuda", "cuda-emulated"])
def test_models_refuse_the_gpu_targets_with_a_hint(target):
    relu = model([h.make_node("Relu", ["x"], ["y"])], [tensor("x", [2, 3])], [tensor("y", [2, 3])])
    with pytest.raises(PolycompError, match=f"target 'openmp' only, not '{target}'") as info:
        pco.InferenceSession(relu.SerializeToString(), target=target)
    assert info.value.hint
