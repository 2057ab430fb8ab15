"""The ``polycomp`` command on ONNX models: compile (plan, C, IR, schedule, one library), run
(checked against onnxruntime), and errors printed without a traceback."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from polycomp.cli import main

pytestmark = pytest.mark.needs_cc


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    """x (N, 4) -> MatMul-free little net: y = tanh(x * w + b), z = y reshaped to (N*2, 2)."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 4, dtype=np.float32), "w")
    b = numpy_helper.from_array(np.array([0.5], np.float32), "b")
    shape = numpy_helper.from_array(np.array([-1, 2], np.int64), "shape")
    nodes = [h.make_node("Mul", ["x", "w"], ["xw"], name="scale"),
             h.make_node("Add", ["xw", "b"], ["s"], name="shift"),
             h.make_node("Tanh", ["s"], ["y"], name="tanh"),
             h.make_node("Reshape", ["y", "shape"], ["z"], name="flat")]
    graph = h.make_graph(nodes, "little", [h.make_tensor_value_info("x", T.FLOAT, ["N", 4])],
                         [h.make_tensor_value_info("z", T.FLOAT, ["M", 2])], [w, b, shape])
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    path = tmp_path_factory.mktemp("cli") / "little.onnx"
    path.write_bytes(m.SerializeToString())
    return path


def test_compile_emit_plan_lists_groups_nodes_and_values(model_file, capsys):
    assert main(["compile", str(model_file), "--emit", "plan", "--shape", "x=3,4"]) == 0
    out = capsys.readouterr().out
    assert "little.onnx (x=3x4)" in out
    assert "group g0: scale (Mul), shift (Add), tanh (Tanh)" in out
    assert "in   t0   <- x float32[3, 4]" in out
    assert "-> y float32[3, 4]" in out
    assert "host flat (Reshape): y, shape -> z" in out
    assert "outputs: z float32[6, 2]" in out


def test_compile_emits_c_ir_schedule_and_one_library(model_file, tmp_path, capsys):
    assert main(["compile", str(model_file), "--emit", "c"]) == 0  # N defaults to 1
    assert "// ---- group g0: scale (Mul)" in capsys.readouterr().out
    assert main(["compile", str(model_file), "--emit", "ir", "--sizes", "N=2"]) == 0
    assert "program onnx_group" in capsys.readouterr().out
    assert main(["compile", str(model_file), "--emit", "schedule"]) == 0
    assert "domain:" in capsys.readouterr().out
    library = tmp_path / "little.so"
    assert main(["compile", str(model_file), "-o", str(library), "--sizes", "N=5"]) == 0
    described = json.loads((tmp_path / "little.so.json").read_text())
    assert described["inputs"] == [{"slot": 0, "name": "x", "shape": [5, 4]}]
    assert [o["graph_outputs"] for o in described["outputs"]] == [["z"]]
    # the library alone, called through its one entry from C's point of view (ctypes),
    # with the constants read from the file beside it, gives onnxruntime's answer
    lib = ctypes.CDLL(str(library))
    blob = (tmp_path / "little.so.constants").read_bytes()
    consts = [np.frombuffer(blob, dtype=c["dtype"], count=int(np.prod(c["shape"])),
                            offset=c["offset"]).reshape(c["shape"]).copy()
              for c in described["constants"]]
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    z = np.empty(described["outputs"][0]["shape"], np.float32)
    arena = np.zeros(max(1, described["arena_bytes"]), np.uint8)
    ptrs = lambda arrays: (ctypes.c_void_p * max(1, len(arrays)))(  # noqa: E731
        *[a.ctypes.data for a in arrays])
    status = lib.polycomp_model_run(ptrs([x]), ptrs([z]), ptrs(consts),
                                    ctypes.c_void_p(arena.ctypes.data))
    assert status == 0
    want = ort.InferenceSession(model_file.read_bytes(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(z.reshape(want.shape), want, rtol=1e-5, atol=1e-6)


def test_run_checks_against_onnxruntime_and_times(model_file, capsys):
    assert main(["run", str(model_file), "--shape", "x=5,4", "--repeat", "3"]) == 0
    out = capsys.readouterr().out
    assert "little.onnx (x=5x4)" in out and "matches onnxruntime (max abs error" in out
    assert "compile" in out and "ms (median of 3)" in out


def test_errors_exit_1_with_a_message_and_no_traceback(model_file, tmp_path, capsys):
    assert main(["compile", str(model_file), "--shape", "x=3,5"]) == 1
    assert "does not fit the declared shape" in capsys.readouterr().err
    assert main(["run", str(model_file), "--shape", "q=1"]) == 1
    assert "'q', which is not an input" in capsys.readouterr().err
    assert main(["compile", str(model_file), "--emit", "deps"]) == 1
    assert "not for .onnx models" in capsys.readouterr().err
    # a name with a terminal escape is printed escaped
    evil = h.make_model(h.make_graph(
        [h.make_node("Evil", ["x"], ["y"], name="\x1b[2Jgotcha", domain="com.evil")], "g",
        [h.make_tensor_value_info("x", T.FLOAT, [3])],
        [h.make_tensor_value_info("y", T.FLOAT, [3])]),
        opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.evil", 1)])
    evil_file = tmp_path / "evil.onnx"
    evil_file.write_bytes(evil.SerializeToString())
    assert main(["compile", str(evil_file)]) == 1
    err = capsys.readouterr().err
    assert "\\x1b[2Jgotcha" in err and "\x1b" not in err and "com.evil" in err
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07not a model" * 10)
    done = subprocess.run([sys.executable, "-m", "polycomp.cli", "run", str(bad)],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "bad.onnx" in done.stderr and "error:" in done.stderr


def test_help_says_what_o_writes_for_a_model():
    done = subprocess.run([sys.executable, "-m", "polycomp.cli", "compile", "--help"],
                          capture_output=True, text=True)
    text = " ".join(done.stdout.split())  # argparse wraps the help text
    assert done.returncode == 0 and "one shared library" in text and "--shape" in text
