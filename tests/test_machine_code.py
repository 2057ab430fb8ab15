"""The machine-code check (polycomp/machine_code.py, polycomp.inspect): loops the schedule
marks vector are found in the C, the object code's arithmetic is attributed to them
through the line tables, a marked loop compiled to scalar code is reported and warned
about, and the conv and matmul groups of models are vector in model context."""

from __future__ import annotations

import platform
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import polycomp
import polycomp.onnx as pco
from onnx_cases import conv_chain
from polycomp import machine_code as mc

X86 = platform.machine() in ("x86_64", "AMD64")

C_TEXT = """\
static int f_par0(long c1, float *restrict a, const float *restrict b)
{
  int s = 0;
  for (long c2 = 0; c2 <= 7; c2 += 1)
    #pragma omp simd
    for (long c3 = 0; c3 <= 15; c3 += 1)
      a[c2 * 16 + c3] += b[c3] * 2.0f;
  return s;
}

int f(float *restrict a, const float *restrict b)
{
  #pragma omp simd simdlen(16)
  for (long c0 = 0; c0 <= 15; c0 += 1)
  {
    {
      a[c0] = b[c0] + b[c0];
    }
  }
  return 0;
}
"""


def test_marked_loops_are_found_with_their_body_lines():
    loops = mc.marked_loops(C_TEXT, "k.c")
    assert [(lp.function, lp.line, lp.last) for lp in loops] == [("f_par0", 6, 7),
                                                                  ("f", 14, 19)]
    assert loops[0].statement.startswith("a[c2 * 16 + c3] +=")
    assert loops[1].statement == "a[c0] = b[c0] + b[c0];"
    assert not loops[0].copies_only and not loops[1].copies_only


LISTING = """\
0000000000000000 <f_par0>:
f_par0():
/cache/k.c:4
   0:\tmov    %rdi,%rax
/cache/k.c:7
   4:\tvfmadd231ps (%rsi),%zmm1,%zmm0
   a:\tvfmadd231ps 0x40(%rsi),%zmm1,%zmm2
/cache/k.c:7 (discriminator 2)
  10:\tvfmadd213ss (%rsi),%xmm1,%xmm3
/cache/k.c:3
  16:\tvmulss %xmm0,%xmm0,%xmm0
0000000000000040 <f>:
f():
/cache/k.c:17
  40:\tvmovss (%rsi),%xmm0
  44:\tvaddss %xmm0,%xmm0,%xmm0
"""


def test_instructions_are_attributed_to_the_marked_loop_of_their_line():
    report = mc.inspect_listing(LISTING, "k.o", {"/cache/k.c": C_TEXT})
    first, second = report.loops
    assert (first.packed_fma, first.scalar_fma, first.width) == (2, 1, 512)
    assert first.accumulators == {"zmm0", "zmm2"}
    assert not first.scalar                   # packed arithmetic: the main loop is vector
    assert second.scalar and second.scalar_other == 1   # scalar adds only
    assert report.scalar_loops == [second]
    assert report.functions == {"f_par0": (2, 1)}
    assert "SCALAR" in report.summary() and "vector" in report.summary()


def test_a_copy_is_not_judged_by_the_arithmetic_of_the_loop_gcc_fused_it_with():
    # gcc 12 unrolls a 120-element copy and interleaves it with the scalar sum after it;
    # the line table then puts some of the sum's vaddss on the copy's lines (onnx's
    # test_layer_normalization_4d_axis0_expanded warned "compiled to scalar")
    text = C_TEXT.replace("a[c0] = b[c0] + b[c0];", "a[c0] = b[c0];")
    loops = mc.marked_loops(text, "k.c")
    assert [lp.copies_only for lp in loops] == [False, True]
    report = mc.inspect_listing(LISTING, "k.o", {"/cache/k.c": text})
    first, second = report.loops
    assert second.scalar_other == 1 and not second.judged and not second.scalar
    assert report.scalar_loops == [] and not first.scalar
    assert "no FP arithmetic" in report.summary()
    # a zero-fill, a fill with -inf and a layout copy are copies; arithmetic is not
    for statement, copy in (("t3[(c0 * 56 + c1) * 16 + c2] = 0.0f;", True),
                            ("m[c0] = -INFINITY;", True),
                            ("t7[c0 * 3136 + c1] = t3[(c1 / 16) * 50176 + c0];", True),
                            ("y[c0] = x[c0] * 2.0f;", False),
                            ("y[c0] = polycomp_fmax_float32(x[c0], 0.0f);", False),
                            ("y[c0] = (float)x[c0];", False)):
        assert bool(mc._COPY.match(statement)) == copy, statement


def test_compiler_reasons_are_read_per_loop():
    loop = mc.marked_loops(C_TEXT, "k.c")[0]
    report = ("k.c:6:23: missed: couldn't vectorize loop\n"
              "k.c:7:9: missed: not vectorized: data ref analysis failed: _1 = *_2;\n"
              "k.c:30:1: missed: not vectorized: something else\n")
    assert mc.compiler_reasons(report, [loop]) == {6: "data ref analysis failed: _1 = *_2;"}


MM = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m,n) +=! A(m,k) * B(k,n) }"
SIZES = {"M": 64, "N": 64, "K": 64}
TADD = "def tadd(float(N,N) A) -> (B) { B(i,j) = A(i,j) + A(j,i) }"


@pytest.mark.needs_cc
@pytest.mark.skipif(not X86, reason="reads x86-64 object code")
def test_a_matmul_compiles_to_packed_fmas():
    report = polycomp.inspect(polycomp.compile(MM, sizes=SIZES), SIZES)
    judged = [c for c in report.loops if c.judged]
    assert report.checked and judged and not report.scalar_loops, report.summary()
    assert sum(c.packed_fma for c in judged) > 0 and max(c.width for c in judged) >= 256


@pytest.mark.needs_cc
@pytest.mark.skipif(not X86, reason="reads x86-64 object code")
def test_a_marked_loop_compiled_scalar_is_reported():
    # a transpose-add (tiled: the transposed read reuses lines) with gcc's vectoriser
    # off: its omp simd loop is scalar, and the build says so, naming the loop (gcc gives
    # no reason here: the vectoriser never ran). Register tiles are not at stake: their
    # vectors are written out (codegen/vector_tile.py, tests/test_vector_tile.py)
    flags = ("-O3", "-march=native", "-fno-tree-loop-vectorize", "-fno-tree-slp-vectorize")
    with pytest.warns(polycomp.PerformanceWarning, match="marked vector but compiled"):
        kernel = polycomp.compile(TADD, sizes={"N": 64}, cflags=flags)
    report = polycomp.inspect(kernel, {"N": 64})
    judged = [c for c in report.loops if c.judged]
    assert judged and all(c.scalar for c in judged), report.summary()
    a = np.random.default_rng(0).random((64, 64), dtype=np.float32)
    np.testing.assert_array_equal(kernel(a), a + a.T)  # correct, only slow


def contraction_loops(report: mc.MachineCodeReport) -> list[mc.LoopCode]:
    """The marked loops that do multiply-adds: the convolutions' and matmuls' own."""
    return [c for c in report.loops if c.packed_fma or c.scalar_fma]


# ResNet-50's bottleneck shapes at reduced spatial size (the channel counts, and so the
# blocking and the reduction loops, are the model's)
@pytest.mark.needs_cc
@pytest.mark.skipif(not X86, reason="reads x86-64 object code")
@pytest.mark.parametrize("c,m,f,h,k,stride", [(256, 64, 64, 14, 3, 1),
                                               (1024, 256, 1024, 7, 1, 1),
                                               (512, 128, 128, 14, 3, 2)])
def test_resnet_convolutions_are_vector_in_model_context(c, m, f, h, k, stride):
    model = conv_chain(c, m, f, h, k, stride)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", polycomp.PerformanceWarning)  # judged below
        session = pco.InferenceSession(model)
    report = polycomp.inspect(session)
    loops = contraction_loops(report)
    assert len(loops) >= 2, report.summary()
    assert not [c for c in loops if c.scalar], report.summary()
    assert all(c.width >= 256 for c in loops), report.summary()


def dense_block(c: int, h: int) -> bytes:
    """Two layers of a DenseNet block: each concatenates what came before with a new
    conv's output, and the next layer normalises that concatenation
    (BatchNormalization, Relu) before its conv. The BN reads a concat, not a conv, so it
    stays a pass of its own with a square root per channel (frontend/onnx/rewrite.py
    folds only BN behind a conv), over a channel-blocked input, as in DenseNet-121."""
    rng = np.random.default_rng(0)
    inits = {"W1": (c, c, 1, 1), "W2": (c, c, 1, 1), "W3": (c, 2 * c, 1, 1),
             "scale": (2 * c,), "bias": (2 * c,), "mean": (2 * c,)}
    inits = {k: (rng.standard_normal(v) * 0.1).astype(np.float32) for k, v in inits.items()}
    inits["var"] = rng.random(2 * c).astype(np.float32) + 0.5
    nodes = [helper.make_node("Conv", ["x", "W1"], ["a"], name="conv1"),
             helper.make_node("Conv", ["a", "W2"], ["b"], name="conv2"),
             helper.make_node("Concat", ["a", "b"], ["ab"], name="concat1", axis=1),
             helper.make_node("BatchNormalization", ["ab", "scale", "bias", "mean", "var"],
                              ["n"], name="bn"),
             helper.make_node("Relu", ["n"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "W3"], ["d"], name="conv3"),
             helper.make_node("Concat", ["ab", "d"], ["y"], name="concat2", axis=1)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3 * c, h, h])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


@pytest.mark.needs_cc
@pytest.mark.skipif(not X86, reason="reads x86-64 object code")
def test_a_batchnorm_pass_with_its_square_root_is_vector_in_model_context():
    # sqrtf may set errno: without -fno-math-errno (polycomp/build.py) gcc guards the
    # call with a branch and leaves the whole element-wise loop scalar ("control flow in
    # loop"); DenseNet-121 had 46 such groups
    model = dense_block(64, 14)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", polycomp.PerformanceWarning)  # judged below
        session = pco.InferenceSession(model)
    report = polycomp.inspect(session)
    assert report.checked and not report.scalar_loops, report.summary()
    normalising = [c for c in report.loops
                   if c.judged and "bn (" in report.groups.get(c.loop.source, "")]
    assert normalising and all(c.width >= 256 for c in normalising), report.summary()
    x = np.random.default_rng(1).standard_normal((1, 64, 14, 14)).astype(np.float32)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(session.run(None, {"x": x})[0], want[0], rtol=1e-4, atol=1e-4)
