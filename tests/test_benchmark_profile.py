"""benchmarks/profile.py: the per-group profile of one model written as a table and a
bar chart; the chart and the table on made-up rows, then one run of the command on a
one-convolution model."""

from __future__ import annotations

import re
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from benchmarks.profile import load, main, markdown, plot_profile
from polycomp.onnx.profile import ProfileRow

PNG = b"\x89PNG\r\n\x1a\n"

# run order: g0, g1, g2; g1 has no onnxruntime time (nodes onnxruntime fused elsewhere)
ROWS = [ProfileRow("g0", "conv (Conv), relu (Relu)", 2e-3, 8_000_000, 100.0, 2.5e-3),
        ProfileRow("g1", "pool (MaxPool)", 5e-4, 0, 100.0, None),
        ProfileRow("g2", "fc (Gemm)", 1e-3, 30_000_000, 100.0, 4e-4)]


def test_the_chart_has_one_bar_per_group_in_run_order(tmp_path):
    path = tmp_path / "chart.png"
    fig = plot_profile(ROWS, path, "made-up rows")
    assert path.read_bytes().startswith(PNG)
    share, times = fig.axes
    (bars,) = share.containers
    assert len(bars) == len(ROWS)
    assert [b.get_width() for b in bars] == pytest.approx([4.0, 0.0, 30.0])  # % of 100
    labels = [t.get_text() for t in share.get_yticklabels()]
    assert [label.split()[0] for label in labels] == ["g0", "g1", "g2"]
    assert labels[0] == "g0 Conv+Relu"
    assert share.yaxis_inverted()  # the first group to run is drawn on top
    polycomp_bars, ort_bars = times.containers
    assert len(polycomp_bars) == 3 and len(ort_bars) == 2  # g1 has no onnxruntime time
    assert [b.get_width() for b in ort_bars] == pytest.approx([2.5, 0.4])  # in ms


def test_the_markdown_has_the_header_and_every_group():
    text = markdown(ROWS, "made_up", 2, 100.0, {"CPU": "a test CPU", "load": "0.5"}, 1e-4)
    assert text.startswith("## Per-group profile: made_up, 2 thread(s)")
    assert "- CPU: a test CPU" in text and "- load: 0.5" in text
    first = [line.split()[0] for line in text.splitlines() if line.split()]
    assert sorted(word for word in first if re.fullmatch(r"g\d+", word)) == ["g0", "g1", "g2"]
    assert "fc (Gemm)" in text and "pool (MaxPool)" in text
    assert "0.100 ms in nodes of its own" in text


def test_a_model_name_comes_from_benchmarks_models_and_an_unknown_one_is_refused():
    name, model, feed = load("mobilenet_block")
    assert name == "mobilenet_block"
    inputs = [i.name for i in model.graph.input
              if i.name not in {t.name for t in model.graph.initializer}]
    assert sorted(feed) == sorted(inputs)
    with pytest.raises(SystemExit, match="unknown model"):
        load("no_such_model")


def conv_relu(path) -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"], name="relu")], "conv_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


@pytest.mark.needs_cc
def test_the_command_writes_the_table_and_the_chart(tmp_path, capsys):
    conv_relu(tmp_path / "conv_relu.onnx")
    out = tmp_path / "results"
    assert main(["--model", str(tmp_path / "conv_relu.onnx"), "--repeat", "2",
                 "--out", str(out)]) == 0
    text = (out / "profile_conv_relu_1t.md").read_text()
    assert (out / "profile_conv_relu_1t.png").read_bytes().startswith(PNG)
    assert "- check: ok" in text and "measured FP32 peak" in text
    (row,) = [line for line in text.splitlines() if "conv (Conv)" in line]
    ort_ms = row.split()[5]
    assert float(ort_ms) > 0  # onnxruntime's profiler found the same nodes
    err = capsys.readouterr().err
    assert err.index("compiling") < err.index("checking") < err.index("timing")
