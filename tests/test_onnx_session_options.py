"""onnxruntime's session arguments on polycomp's InferenceSession: the thread count is
honoured, device providers are refused or fall back with a warning, and every other
changed setting warns instead of vanishing (polycomp/onnx/ort_options.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import polycomp.onnx as pco
from polycomp.errors import ArgumentError, UnsupportedError
from polycomp.onnx.ort_options import (ProviderFallbackWarning, UnsupportedOptionWarning,
                                       session_settings)

pytestmark = pytest.mark.needs_cc


def relu_model() -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 256])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 256])
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "x"], ["m"]),
                               helper.make_node("Relu", ["m"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


# A fresh process, so that no earlier parallel region has started OpenMP's workers: the
# tasks of the process are counted before and after the first run. libgomp starts its
# workers at the first parallel region that asks for more than one thread and keeps them.
THREADS = textwrap.dedent("""
    import os, sys
    import numpy as np, onnxruntime as ort
    import polycomp.onnx as pco
    from polycomp import threads
    threads.set_dynamic(False)  # the count asked for, whatever the machine's load
    model = open(sys.argv[1], "rb").read()
    so = ort.SessionOptions()
    so.intra_op_num_threads = int(sys.argv[2])
    session = pco.InferenceSession(model, sess_options=so)
    x = np.random.default_rng(0).random((256, 256), dtype=np.float32)
    before = len(os.listdir("/proc/self/task"))
    y, = session.run(None, {"x": x})
    after = len(os.listdir("/proc/self/task"))
    assert np.allclose(y, np.maximum(x @ x, 0), rtol=1e-4), "wrong result"
    print(after - before)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts tasks in /proc")
@pytest.mark.parametrize("threads", [1, 2])
def test_intra_op_num_threads_sets_the_threads_of_a_run(tmp_path, threads):
    path = tmp_path / "m.onnx"
    path.write_bytes(relu_model())
    done = subprocess.run([sys.executable, "-c", THREADS, str(path), str(threads)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    # one thread: no worker started; two: libgomp's one worker beside the caller
    assert int(done.stdout.split()[-1]) == threads - 1, done.stdout


def test_the_thread_count_reaches_the_library(monkeypatch):
    seen: list[object] = []
    import polycomp.onnx.library as library
    real = library.call_threads

    def spy(threads=None):
        seen.append(threads)
        return real(threads)
    monkeypatch.setattr(library, "call_threads", spy)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    session = pco.InferenceSession(relu_model(), sess_options=so)
    assert session.get_session_options() is so
    x = np.ones((256, 256), np.float32)
    session.run(None, {"x": x})
    session.profile({"x": x}, repeat=1)
    assert seen == [1, 1]


def test_default_options_warn_about_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        settings = session_settings(ort.SessionOptions(), ["CPUExecutionProvider"], None)
    assert settings.threads is None


@pytest.mark.parametrize("attr,value", [
    ("graph_optimization_level", ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
    ("execution_mode", ort.ExecutionMode.ORT_PARALLEL),
    ("enable_profiling", True),
    ("inter_op_num_threads", 3),
    ("optimized_model_filepath", "opt.onnx"),
])
def test_a_setting_polycomp_does_not_honour_warns(attr, value):
    so = ort.SessionOptions()
    setattr(so, attr, value)
    with pytest.warns(UnsupportedOptionWarning, match=attr):
        session_settings(so)


def test_logging_settings_are_accepted_quietly():
    so = ort.SessionOptions()
    so.log_severity_level = 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        session_settings(so)


def test_a_device_only_provider_list_is_refused():
    with pytest.raises(UnsupportedError, match="CUDAExecutionProvider") as info:
        pco.InferenceSession(relu_model(), providers=["CUDAExecutionProvider"])
    assert info.value.hint


def test_a_device_provider_before_the_cpu_falls_back_with_a_warning():
    with pytest.warns(ProviderFallbackWarning, match="CUDAExecutionProvider"):
        session = pco.InferenceSession(
            relu_model(), providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    x = np.ones((256, 256), np.float32)
    assert np.allclose(session.run(None, {"x": x})[0], x @ x)


def test_cpu_provider_options_warn():
    with pytest.warns(UnsupportedOptionWarning, match="use_arena"):
        session_settings(None, [("CPUExecutionProvider", {"use_arena": "0"})])


@pytest.mark.parametrize("providers,provider_options", [
    ("CPUExecutionProvider", None),
    ([1], None),
    (["CPUExecutionProvider"], [{}, {}]),
    (None, [{}]),
])
def test_malformed_provider_arguments_are_argument_errors(providers, provider_options):
    with pytest.raises(ArgumentError):
        session_settings(None, providers, provider_options)


@pytest.mark.parametrize("threads", [-1, 10**6])
def test_a_bad_thread_count_is_an_argument_error(threads):
    so = type("Options", (), {"intra_op_num_threads": threads})()
    with pytest.raises(ArgumentError, match="intra_op_num_threads"):
        session_settings(so)


def test_run_options_terminate_stops_the_run_and_other_settings_warn():
    session = pco.InferenceSession(relu_model())
    x = np.ones((256, 256), np.float32)
    ro = ort.RunOptions()
    ro.only_execute_path_to_fetches = True
    with pytest.warns(UnsupportedOptionWarning, match="only_execute_path_to_fetches"):
        session.run(None, {"x": x}, run_options=ro)
    ro = ort.RunOptions()
    ro.terminate = True
    with pytest.raises(ArgumentError, match="terminate"):
        session.run(None, {"x": x}, run_options=ro)
