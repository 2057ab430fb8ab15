"""The per-group profile (polycomp/onnx/profile.py, polycomp/peak.py, ``polycomp run
model.onnx --profile``): the work counted from each group's Program, the rate and the
share of the measured peak, onnxruntime's per-node times put beside the right group."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polycomp.onnx as pco
from polycomp import expr as E
from polycomp.cli import main
from polycomp.onnx.profile import (ProfileRow, format_profile, program_flops,
                                   statement_flops, with_onnxruntime)
from polycomp.peak import peak_gflops

pytestmark = pytest.mark.needs_cc

N, C, F, H, K = 1, 8, 16, 10, 3
OUT = H - K + 1  # no padding: every tap of every output reads the input


def conv_model() -> bytes:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((F, C, K, K)).astype(np.float32)
    b = rng.standard_normal(F).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
         helper.make_node("Relu", ["c"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, C, H, H])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N, F, OUT, OUT])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def test_statement_flops_count_float_arithmetic_and_the_reduction():
    x = E.Access("x", (E.Iter("i", E.INDEX_DTYPE),), "float32")
    w = E.Access("w", (E.Iter("i", E.INDEX_DTYPE),), "float32")
    assert statement_flops(E.Binary("mul", x, w, "float32"), "+") == 2
    assert statement_flops(E.Binary("add", x, w, "float32"), None) == 1
    relu = E.Call("max", (x, E.Const(0.0, "float32")), "float32")
    assert statement_flops(relu, None) == 0
    ints = E.Access("n", (E.Iter("i", E.INDEX_DTYPE),), "int32")
    assert statement_flops(E.Binary("mul", ints, ints, "int32"), "+") == 0


def test_a_convolution_groups_work_is_its_multiply_adds_and_bias():
    session = pco.InferenceSession(conv_model())
    compiled = session.compiled()
    (name,) = [s.name for s in compiled.plan.groups if s.program is not None]
    flops = program_flops(compiled.kernels[name].definition.program)
    outputs = N * F * OUT * OUT
    assert flops == 2 * outputs * C * K * K + outputs  # a multiply-add per tap, a bias add


def test_rows_get_onnxruntime_time_of_their_own_nodes():
    rows = [ProfileRow("g0", "conv (Conv), relu (Relu)", 2e-3, 4_000_000, 100.0),
            ProfileRow("g1", "mm (MatMul)", 1e-3, 1_000_000, 100.0)]
    names = {"g0": ["conv", "c", "relu", "y"], "g1": ["mm", "z"]}
    out, other = with_onnxruntime(rows, names, {"conv": 1e-3, "y_nchwc": 2e-4,
                                                "ReorderOutput": 5e-4})
    assert out[0].onnxruntime_seconds == pytest.approx(1.2e-3)  # its fused node counts
    assert out[1].onnxruntime_seconds is None and other == pytest.approx(5e-4)
    assert out[0].gflops == pytest.approx(2.0) and out[0].share_of_peak == pytest.approx(0.02)
    table = format_profile(out, 1, 100.0, other)
    assert table.index("g0") < table.index("g1")  # slowest first
    assert "2.0" in table.splitlines()[2] and "2.0%" in table


def test_the_measured_peak_is_positive_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYCOMP_CACHE_DIR", str(tmp_path))
    first = peak_gflops(1)
    assert first > 0.1
    assert (tmp_path / "peak.json").exists()
    assert peak_gflops(1) == first  # read back, not measured again


def test_polycomp_run_profile_prints_each_group_beside_onnxruntime(tmp_path, capsys):
    path = tmp_path / "conv.onnx"
    path.write_bytes(conv_model())
    assert main(["run", str(path), "--profile", "--repeat", "2", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "per-group profile, 1 thread(s); measured FP32 peak" in out
    (row,) = [line for line in out.splitlines() if "conv (Conv)" in line]
    fields = row.split()
    assert float(fields[2]) == pytest.approx((2 * F * OUT * OUT * C * K * K
                                              + F * OUT * OUT) / 1e9, abs=1e-3)
    assert fields[5] != "-"  # onnxruntime's time of the conv node is there


def test_the_session_prints_its_profile_at_its_own_thread_count():
    so = type("Options", (), {"intra_op_num_threads": 1})()
    session = pco.InferenceSession(conv_model(), sess_options=so)
    x = np.random.default_rng(1).standard_normal((N, C, H, H)).astype(np.float32)
    table = session.profile_table({"x": x}, repeat=2, compare=False)
    assert table.startswith("per-group profile, 1 thread(s)")
    assert "conv (Conv), relu (Relu)" in table and "ort" in table.splitlines()[1]


def test_profile_is_for_onnx_models(tmp_path, capsys):
    tc = tmp_path / "k.tc"
    tc.write_text("def f(float(N) A) -> (B) { B(i) = A(i) * 2.0 }")
    assert main(["run", str(tc), "--sizes", "N=8", "--profile"]) == 1
    assert "--profile is for .onnx models" in capsys.readouterr().err
