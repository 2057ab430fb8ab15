"""Panel packing of a matrix product's streamed operand (scheduler/panels.py) and the
tile sizes of the packed band (scheduler/panel_tiles.py): results against numpy and
onnxruntime, when the pass applies and when it does not, the tiles it gets, and its
micro-kernel in the machine code."""

import math

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from polycomp.scheduler import cache_model as CM
from polycomp.scheduler import panel_tiles as PT
from polycomp.scheduler import tiling
from polycomp.scheduler.panels import MIN_ROWS, PANEL_ROW_BYTES, PANEL_VECTORS, pack_panels

import polycomp
import polycomp.onnx as pco

MM = "def mm(float(M,K) A, float(K,N) B) -> (C) { C(m,n) +=! A(m,k) * B(k,n) }"
BMM = ("def bmm(float(G,M,K) A, float(G,K,N) B) -> (C) "
       "{ C(g,m,n) +=! A(g,m,k) * B(g,k,n) }")
LONG = PANEL_ROW_BYTES // 4  # the shortest row of floats that is packed
# a panel's columns of floats: 4 vectors of this machine's width (64 with AVX-512, 32 with AVX2)
WIDTH = PANEL_VECTORS * CM.simd_lanes(4)


def _program(src, sizes):
    return polycomp.compile(src).definition.lower(sizes)


def _panels(program):
    return [a for a in program.arrays if a.name.endswith("_panels")]


@pytest.mark.parametrize("src,sizes,shape_a,shape_b", [
    # rows of C not a multiple of the register tile's; K not a multiple of anything
    (MM, {"M": 45, "K": 19, "N": LONG}, (45, 19), (19, LONG)),
    # a batch of products: each batch packs its own panels
    (BMM, {"G": 2, "M": 20, "K": 7, "N": LONG + WIDTH}, (2, 20, 7), (2, 7, LONG + WIDTH)),
])
def test_packed_products_match_numpy_in_parallel_tiled_code(src, sizes, shape_a, shape_b):
    program = pack_panels(_program(src, sizes))
    (panels,) = _panels(program)
    assert panels.extents()[-2:] == (shape_b[-2], WIDTH)
    rng = np.random.default_rng(3)
    a = rng.standard_normal(shape_a).astype(np.float32)
    b = rng.standard_normal(shape_b).astype(np.float32)
    kernel = polycomp.compile(src)
    got = kernel(a, b)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    text = kernel.c_source
    assert "_panels" in text and "#pragma omp parallel for" in text
    # exact_fp keeps each sum's order: bit for bit the original order's result
    exact = polycomp.compile(src, exact_fp=True)
    plain = polycomp.compile(src, scheduler="none", exact_fp=True)
    np.testing.assert_array_equal(exact(a, b), plain(a, b))


@pytest.mark.parametrize("src,sizes,why", [
    (MM, {"M": MIN_ROWS - 1, "K": 8, "N": LONG}, "too few rows of C reuse a panel"),
    (MM, {"M": 64, "K": 8, "N": LONG // 2}, "rows of B too short to conflict in L1"),
    (MM, {"M": 64, "K": 8, "N": LONG + 16}, "N not a multiple of the panel"),
    ("def mv(float(M,K) A, float(K) x) -> (y) { y(m) +=! A(m,k) * x(k) }",
     {"M": 64, "K": LONG}, "no operand moves along the vector loop and a reduced index"),
])
def test_products_that_are_not_packed(src, sizes, why):
    program = _program(src, sizes)
    assert pack_panels(program) is program, why


def test_the_packed_band_gets_blis_sizes_and_vector_code():
    """sgemm at 1024: a micro-panel (kc x WIDTH floats) fills PANEL_L1 of L1, the row tile
    is a multiple of the register tile's rows and shares out evenly over two threads,
    and the micro-kernel is packed FMAs in the object code."""
    n = 1024
    with tiling.observe_bands() as seen:
        kernel = polycomp.compile(MM)
        report = polycomp.inspect(kernel, sizes={"M": n, "K": n, "N": n})
    bands = {b.id: b for b in seen}
    band = bands["S1@0"]
    assert band.extents == (n, n // WIDTH, n, WIDTH)
    (mc, nc, kc, width), = band.tiling.levels
    caches = CM.cache_sizes()
    assert width == WIDTH and kc * WIDTH * 4 <= PT.PANEL_L1 * caches[1] < 2 * kc * WIDTH * 4
    tiles = math.ceil(n / mc)
    assert math.ceil(tiles / 2) * mc * 2 <= 1.1 * n
    assert 1 <= nc <= PT.NC_PANELS
    # every loop marked vector in the kernel is packed FMAs of the machine's width
    fma = [x for x in report.loops if x.packed_fma or x.scalar_fma]
    assert fma and all(x.scalar_fma == 0 and x.width == 8 * CM.simd_bytes() for x in fma)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-3, atol=1e-3)


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 400), extent=st.integers(1, 5000), step=st.integers(1, 8))
def test_row_tiles_are_multiples_of_the_register_rows_and_share_out_best(size, extent, step):
    size = max(step, size // step * step)
    tile = PT._balanced(size, extent, step)
    if size >= extent:
        assert tile == extent
        return
    assert tile % step == 0 and size // 2 <= tile <= size

    def busiest(t, p):
        tiles = -(-extent // t)
        return round(-(-tiles // p) * t * p / extent, 3)
    for other in range(size, max(step, size // 2) - 1, -step):
        assert [busiest(tile, p) for p in PT.THREADS] <= [busiest(other, p) for p in PT.THREADS]


def test_a_model_packs_its_constant_matmul_weights_once_at_load_time():
    rng = np.random.default_rng(5)
    w = onnx.numpy_helper.from_array(rng.standard_normal((24, LONG)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, LONG])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = pco.InferenceSession(model)
    (group,) = sess.compiled().plan.groups
    packed = _panels(group.program)
    assert packed and all(a.role == "input" for a in packed)
    assert not any(s.name.endswith("_panels") for s in group.program.statements)
    x = rng.standard_normal((32, 24)).astype(np.float32)
    import onnxruntime as ort
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], expected, rtol=1e-4, atol=1e-4)


def test_isls_scheduler_gets_the_product_unpacked_and_right():
    """isl's scheduler schedules the parametric program, which packing would drop
    (panels.packs_panels): its product stays unpacked, and matches numpy."""
    rng = np.random.default_rng(6)
    a = rng.standard_normal((20, 9)).astype(np.float32)
    b = rng.standard_normal((9, LONG)).astype(np.float32)
    kernel = polycomp.compile(MM, scheduler="isl")
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)
    assert "_panels" not in kernel.c_source
    packed = polycomp.compile(MM)
    np.testing.assert_allclose(packed(a, b), a @ b, rtol=1e-4, atol=1e-4)
    assert "_panels" in packed.c_source
