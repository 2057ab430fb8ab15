"""Whole ONNX models against onnxruntime, compiled as users get them: the default
options (fusion groups, channel-blocked convolutions with prepacked weights, OpenMP
parallel loops), in a fresh compile cache (a real compile, not a cached library).

Models: three of the onnx wheel's light models with random weights
(polycomp.onnx.zoo.with_random_weights, as benchmarks/models.py loads them) and the two
models the code base builds (zoo.encoder_layer at BERT-base's size, zoo.mobilenet_block).

Which light models, and why: their input is fixed at 1x3x224x224 (a Reshape of fixed
shape feeds each Gemm), and a smaller image saves little (squeezenet at 96x96 compiled
in 18 CPU seconds against 21 at 224x224): the cost is compiling their fusion groups.
Compile CPU seconds with an empty cache, measured here: alexnet 13 (plus 6 to make its
61 M random weights), zfnet512 13 (plus 9), shufflenet 15, squeezenet 21, resnet50 36,
inception_v1 61; densenet121, inception_v2 and vgg19 are larger still. Kept, for about
20 CPU seconds (the suite's 10 minutes on 2 cores leave no more):

- shufflenet: grouped and depthwise convolutions, BatchNormalization folded into them,
  the channel shuffle (Reshape, Transpose, Reshape), Sum residuals, AveragePool;
Left out: squeezenet (fire modules: Concat of 1x1 and 3x3 branches, ceil-mode MaxPool,
GlobalAveragePool, Dropout, each checked alone in the op tests; 21 CPU seconds),
bvlc_alexnet and zfnet512 (11x11 stride-4 and 5x5 convolutions, LRN and a
Gemm over 9216 inputs: tests/test_onnx_nn.py checks those ops alone, and the two models
cost 20 CPU seconds each), resnet50 and inception_v1 (their operators are the ones
above, at two to three times the compile time), and the larger ones.

The light models end in a Softmax, which random weights saturate (shufflenet's output
is one-hot to 1e-32: any kernel that keeps the arg-max would pass), so the Softmax's
input, the logits, is compared too.

Tolerance, for float32 through a deep net: every output within
``rtol * |want| + atol_scale * max|want|``. polycomp sums in other orders than
onnxruntime (channel blocks, SIMD lanes, tiles); a float32 sum of K products reordered
errs by about sqrt(K) units in the last place of its magnitude (6e-8 * 96 = 6e-6 for
alexnet's K = 9216), and those errors add up layer by layer, relative to each layer's
scale; an element near zero (a logit that cancels) keeps only the absolute part. So
1e-4 of the output's largest magnitude and 1e-3 of each element; the errors measured
were 10 times smaller (largest: alexnet, 9e-6 of the output's scale), while a wrong
kernel (a window off by one, a tile left out) errs by the activations' own scale.
"""

from __future__ import annotations

import platform
from collections.abc import Callable

import numpy as np
import onnx
import pytest

import polycomp
import polycomp.onnx as pco
from onnx_cases import assert_outputs_match, reference
from polycomp.frontend.onnx.plan import GroupStep
from polycomp.onnx import zoo
from polycomp.scheduler import cache_model as CM

pytestmark = pytest.mark.needs_cc

RTOL, ATOL_SCALE = 1e-3, 1e-4

# models with a channel-blocked convolution (scheduler/blocking.py): shufflenet's 28, 14
# and 7 output columns are no multiple of any vector width; mobilenet_block's 56 columns
# are one of 8 lanes (AVX2), and then they are its convolutions' vector loop instead
CONV_MODELS = {"shufflenet": lambda lanes: True,
               "mobilenet_block": lambda lanes: 56 % lanes != 0}
# BERT-base's dense layers and attention, MobileNetV2's 1x1 and depthwise convolutions:
# their loops marked vector must be packed in the object code (polycomp.inspect)
VECTOR_CHECKED = ("encoder_layer", "mobilenet_block")


def light_model(name: str) -> onnx.ModelProto:
    """The light model ``name`` with random weights, its final Softmax's input (the
    logits) exposed as a second output."""
    model = zoo.with_random_weights(onnx.load(zoo.light_model_paths()[name]))
    outputs = {o.name for o in model.graph.output}
    (softmax,) = [n for n in model.graph.node if n.op_type == "Softmax" and n.output[0] in outputs]
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    (logits,) = [v for v in inferred.graph.value_info if v.name == softmax.input[0]]
    model.graph.output.append(logits)
    return model


MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "shufflenet": lambda: light_model("shufflenet"),
    "encoder_layer": zoo.encoder_layer,
    "mobilenet_block": zoo.mobilenet_block,
}


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    """An empty compile cache: each model is compiled, not loaded."""
    monkeypatch.setenv("POLYCOMP_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_matches_onnxruntime(name):
    model = MODELS[name]()
    feed = zoo.random_inputs(model, seed=1)
    want = reference(model, feed)
    session = pco.InferenceSession(model.SerializeToString())
    got = session.run(None, feed)
    names = [o.name for o in model.graph.output]
    assert len(got) == len(want) == len(names)
    for output, w, g in zip(names, want, got, strict=True):
        atol = ATOL_SCALE * float(np.abs(w).max()) if w.size else 0.0
        assert_outputs_match([output], [w], [g], "default options", rtol=RTOL, atol=atol)

    # what ran is what the default options make of a whole model
    compiled = session.compiled()
    assert not compiled.from_cache
    groups = [s for s in compiled.plan.steps if isinstance(s, GroupStep)]
    assert any(len(s.nodes) > 1 for s in groups), "no fusion group of several nodes"
    assert any("omp parallel" in k.source for k in compiled.kernels.values()), \
        "no parallel region"
    if name in CONV_MODELS and CONV_MODELS[name](CM.simd_lanes(4)):
        assert any(s.prepacked for s in groups), "no channel-blocked convolution"
    if name in VECTOR_CHECKED and platform.machine() in ("x86_64", "AMD64"):
        # each contraction fused with its epilogue as the model runs it: every loop
        # marked vector compiled to packed arithmetic
        report = polycomp.inspect(session)
        contractions = [c for c in report.loops if c.packed_fma or c.scalar_fma]
        assert contractions and not report.scalar_loops, report.summary()
        assert min(c.width for c in contractions) >= 256, report.summary()

