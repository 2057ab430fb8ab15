"""The storage formats: ONNX's bfloat16, float8, float4 and 4/2-bit integer types.

polycomp stores these (polycomp/expr.FORMATS: bit patterns in uint16/uint8, as ml_dtypes
lays them out) and converts them in generated C (codegen/cexpr.conversion_c), through
Cast and CastLike; the backend passes ml_dtypes arrays as their bit patterns. Each
conversion is checked here through the whole pipeline (a model of Cast nodes, compiled
and run) against the oracles onnx's conformance cases come from: ml_dtypes for
decoding, every bit pattern of each format; onnx's reference Cast (ml_dtypes, with
onnx's own saturation and float8e8m0 rounding) for encoding, on a large sample of
float32 bit patterns and on each format's edge cases (its values, the halfway points
between them, one float32 ulp either side, overflow, NaN, +-Inf, zeros, subnormals).
"""

from __future__ import annotations

import platform

import ml_dtypes
import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper as h
from onnx.reference.ops.op_cast import cast_to

from polycomp import expr as E
from polycomp.errors import ArgumentError, UnsupportedError
from polycomp.frontend.onnx.graph import ELEM_FORMATS
from polycomp.onnx.backend import PolycompBackend

pytestmark = pytest.mark.needs_cc

OPSET = onnx.defs.onnx_opset_version()
FORMAT_ELEMS = {fmt: elem for elem, fmt in ELEM_FORMATS.items()}
FLOAT8 = ("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz")
SUBBYTE_BITS = {"float4e2m1": 4, "int4": 4, "uint4": 4, "int2": 2, "uint2": 2}


def ml(fmt: str) -> np.dtype:
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(FORMAT_ELEMS[fmt]))


def storage(fmt: str) -> str:
    return E.FORMATS[fmt][0]


def cast_model(src: int, casts: list[tuple[int, dict]], n: int, opset: int = OPSET):
    """One input x of element type ``src`` and n elements; output k is Cast(x) with
    ``casts[k]`` = (to, attributes)."""
    nodes, outputs = [], []
    for k, (to, attrs) in enumerate(casts):
        nodes.append(h.make_node("Cast", ["x"], [f"y{k}"], to=to, **attrs))
        outputs.append(h.make_tensor_value_info(f"y{k}", to, [n]))
    graph = h.make_graph(nodes, "casts", [h.make_tensor_value_info("x", src, [n])], outputs)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])


def run(model, *feeds):
    return PolycompBackend.prepare(model, parallel=False).run(list(feeds))


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal bit patterns, except that a NaN need only be a NaN (its sign and payload
    are not specified); both arrays of the same ml_dtypes (or numpy) dtype."""
    assert got.dtype == want.dtype and got.shape == want.shape
    width = f"uint{8 * want.dtype.itemsize}"
    nan = np.isnan(want.astype(np.float64))
    assert np.isnan(got.astype(np.float64)[nan]).all()
    bad = np.flatnonzero((got.view(width) != want.view(width)) & ~nan)
    assert bad.size == 0, (f"{bad.size} differ, e.g. at {bad[:5]}: got "
                           f"{got.view(width)[bad[:5]]}, want {want.view(width)[bad[:5]]}")


def all_codes(fmt: str) -> np.ndarray:
    """Every bit pattern of the format, as ml_dtypes values."""
    count = 1 << SUBBYTE_BITS.get(fmt, 8 * np.dtype(storage(fmt)).itemsize)
    return np.arange(count, dtype=storage(fmt)).view(ml(fmt))


# ----------------------------------------------------------------------------- decoding

@pytest.mark.parametrize("fmt", sorted(FORMAT_ELEMS))
def test_decode_every_bit_pattern(fmt):
    """Each format's every value to float32 and float16 (to int8/uint8 too for the
    integer ones), as ml_dtypes converts it."""
    codes = all_codes(fmt)
    targets = [T.FLOAT, T.FLOAT16, T.DOUBLE]
    if fmt in ("int4", "int2"):
        targets.append(T.INT8)
    if fmt in ("uint4", "uint2"):
        targets.append(T.UINT8)
    if fmt == "bfloat16":
        targets.append(T.INT32)
    got = run(cast_model(FORMAT_ELEMS[fmt], [(t, {}) for t in targets], codes.size), codes)
    for out, to in zip(got, targets):
        want = codes.astype(onnx.helper.tensor_dtype_to_np_dtype(to)) if to != T.INT32 else \
            np.where(np.isfinite(codes.astype(np.float32)), codes.astype(np.float32), 0) \
            .astype(np.int32)
        if to == T.INT32:  # bfloat16 -> int32 only where C defines it (finite, in range)
            ok = np.abs(np.nan_to_num(codes.astype(np.float32), nan=np.inf)) < 2**31
            out, want = out[ok], want[ok]
        assert_same(out, want)


# ----------------------------------------------------------------------------- encoding

def samples(fmt: str, seed: int = 0) -> np.ndarray:
    """float32 inputs for encoding to ``fmt``: random bit patterns, the format's values,
    the halfway points between neighbours, one float32 ulp either side of each, and the
    special values."""
    rng = np.random.default_rng(seed)
    parts = [rng.integers(0, 2**32, 60000, dtype=np.uint64).astype(np.uint32).view(np.float32)]
    values = np.unique(all_codes(fmt).astype(np.float32))
    values = values[np.isfinite(values)]
    halfway = (values[:-1].astype(np.float64) + values[1:]) / 2
    points = np.concatenate([values, halfway.astype(np.float32)])
    parts += [points, np.nextafter(points, np.float32(np.inf)),
              np.nextafter(points, np.float32(-np.inf))]
    top = np.float32(values.max())
    parts.append(top * rng.uniform(0.9, 1.3, 2000).astype(np.float32))  # around overflow
    parts.append(np.ldexp(rng.uniform(-2, 2, 4000), rng.integers(-140, 20, 4000))
                 .astype(np.float32))  # every scale, float32 subnormals included
    parts.append(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45,
                           3.4e38, -3.4e38, 2.0**31, -2.0**31 - 256, 2.0**31 - 128],
                          np.float32))
    return np.concatenate(parts).astype(np.float32)


def oracle(x: np.ndarray, fmt: str, saturate: bool = True, round_mode: str = "up"):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return cast_to(x, FORMAT_ELEMS[fmt], saturate, round_mode)


def encodings(fmt: str) -> list[dict]:
    if fmt in FLOAT8:
        return [{}, {"saturate": 0}]
    if fmt == "float8e8m0":
        return [{"round_mode": m, "saturate": s} for m in E.ROUND_MODES for s in (1, 0)]
    return [{}]


@pytest.mark.parametrize("fmt", sorted(FORMAT_ELEMS))
def test_encode_float32(fmt):
    x = samples(fmt)
    if fmt in ("int4", "uint4", "int2", "uint2"):
        # float -> integer is undefined past int32 in C (ml_dtypes relies on x86's
        # INT32_MIN there; polycomp gives the same low bits, checked by hand below)
        x = x[np.abs(np.nan_to_num(x, nan=np.inf)) < 2**31]
    variants = encodings(fmt)
    got = run(cast_model(T.FLOAT, [(FORMAT_ELEMS[fmt], a) for a in variants], x.size), x)
    for out, attrs in zip(got, variants):
        want = oracle(x, fmt, bool(attrs.get("saturate", 1)), attrs.get("round_mode", "up"))
        assert_same(out, want)


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="ml_dtypes gives what the machine's conversion gives")
def test_float_to_small_integers_out_of_range():
    """Past int32 (and NaN, Inf) C leaves float -> integer undefined; polycomp gives the
    low bits of INT32_MIN (zero), as ml_dtypes on x86 (onnx's reference) does; in range
    a float truncates and wraps."""
    x = np.array([np.nan, np.inf, -np.inf, 2.0**31, -2.0**31 - 256, 1e30, -7.9, 7.9, 9.5,
                  -9.5, 2.0**31 - 128], np.float32)
    fmts = ["int4", "uint4", "int2", "uint2"]
    got = run(cast_model(T.FLOAT, [(FORMAT_ELEMS[f], {}) for f in fmts], x.size), x)
    for fmt, out in zip(fmts, got):
        assert_same(out, oracle(x, fmt))


@pytest.mark.parametrize("src", [T.FLOAT16, T.DOUBLE, T.INT32, T.INT64, T.UINT8, T.BOOL],
                         ids=T.DataType.Name)
def test_encode_other_sources(src):
    """float16, double (through float32, as ml_dtypes converts), integers (4/2-bit
    targets wrap) and bool, to every format."""
    rng = np.random.default_rng(1)
    dtype = onnx.helper.tensor_dtype_to_np_dtype(src)
    if src == T.FLOAT16:
        x = np.arange(2**16, dtype=np.uint16).view(np.float16)
    elif src == T.DOUBLE:
        x = np.concatenate([samples("float8e4m3fn").astype(np.float64),
                            rng.standard_normal(5000) * 10.0 ** rng.integers(-8, 8, 5000)])
    elif src == T.BOOL:
        x = np.array([True, False, True])
    else:
        info = np.iinfo(dtype)
        x = np.concatenate([rng.integers(max(info.min, -2**31), min(info.max, 2**31), 20000,
                                         dtype=dtype, endpoint=True),
                            np.arange(max(int(info.min), -600), min(int(info.max), 600))
                            .astype(dtype)])
    fmts = sorted(FORMAT_ELEMS)
    if src in (T.FLOAT16, T.DOUBLE):  # float -> integer: only where defined
        fmts = [f for f in fmts if f not in SUBBYTE_BITS or f == "float4e2m1"]
    got = run(cast_model(src, [(FORMAT_ELEMS[f], {}) for f in fmts], x.size), x)
    for fmt, out in zip(fmts, got):
        assert_same(out, oracle(x, fmt))


def test_format_to_format():
    """bfloat16 -> float8 and int4 -> float4: decoded exactly, then encoded once."""
    codes = all_codes("bfloat16")
    fmts = ["float8e4m3fn", "float8e5m2fnuz", "float4e2m1", "int4", "bfloat16"]
    got = run(cast_model(T.BFLOAT16, [(FORMAT_ELEMS[f], {}) for f in fmts], codes.size),
              codes)
    for fmt, out in zip(fmts, got):
        finite = np.isfinite(codes.astype(np.float32)) | (fmt not in SUBBYTE_BITS)
        small = np.abs(codes.astype(np.float32)) < 2**31
        keep = finite & (small | (fmt not in SUBBYTE_BITS))
        assert_same(out[keep], oracle(codes.astype(np.float32), fmt)[keep])
    codes = all_codes("int4")
    out, = run(cast_model(T.INT4, [(T.FLOAT4E2M1, {})], codes.size), codes)
    assert_same(out, oracle(codes.astype(np.float32), "float4e2m1"))


_SESSIONS: dict[str, object] = {}


def _e4m3_session():
    if "e4m3" not in _SESSIONS:
        _SESSIONS["e4m3"] = PolycompBackend.prepare(
            cast_model(T.FLOAT, [(T.FLOAT8E4M3FN, {}), (T.FLOAT8E5M2, {"saturate": 0}),
                                 (T.BFLOAT16, {})], 1), parallel=False)
    return _SESSIONS["e4m3"]


@settings(max_examples=300, deadline=None)
@given(st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True))
def test_encode_any_float32(x):
    """Any float32, saturating and not, agrees with onnx's reference."""
    a = np.array([x], np.float32)
    got = _e4m3_session().run([a])
    for out, (fmt, sat) in zip(got, [("float8e4m3fn", True), ("float8e5m2", False),
                                     ("bfloat16", True)]):
        assert_same(out, oracle(a, fmt, sat))


# ----------------------------------------------------------------------------- the IR names

@pytest.mark.parametrize("fmt", sorted(E.FORMATS))
def test_conversion_names_round_trip(fmt):
    for direction in ("decode", "encode"):
        for saturate in (True, False):
            for mode in E.ROUND_MODES:
                conv = E.Conversion(direction, fmt, saturate, mode)
                parsed = E.conversion(conv.func)
                assert parsed is not None and parsed.func == conv.func
                assert parsed.dtype == conv.dtype
    assert E.conversion("exp") is None and E.conversion("decode_float7") is None


# ----------------------------------------------------------------------------- where allowed

def test_views_and_castlike_move_storage_values():
    """Identity and Reshape (host views) pass bfloat16 through; CastLike takes the type
    of its second input."""
    x = (np.arange(12, dtype=np.float32).reshape(3, 4) * 1.5).astype(ml_dtypes.bfloat16)
    like = np.zeros(1, ml_dtypes.float8_e5m2)
    nodes = [h.make_node("Identity", ["x"], ["a"]),
             h.make_node("Reshape", ["a", "shape"], ["b"]),
             h.make_node("CastLike", ["b", "like"], ["c"])]
    graph = h.make_graph(
        nodes, "views", [h.make_tensor_value_info("x", T.BFLOAT16, [3, 4]),
                         h.make_tensor_value_info("like", T.FLOAT8E5M2, [1])],
        [h.make_tensor_value_info("b", T.BFLOAT16, [2, 6]),
         h.make_tensor_value_info("c", T.FLOAT8E5M2, [2, 6])],
        [onnx.numpy_helper.from_array(np.array([2, 6], np.int64), "shape")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)])
    b, c = run(model, x, like)
    assert_same(b, x.reshape(2, 6))
    assert_same(c, x.reshape(2, 6).astype(np.float32).astype(ml_dtypes.float8_e5m2))


def test_feed_of_another_dtype_is_refused():
    """A float32 array fed for a bfloat16 input is an ArgumentError, not its bytes read
    as bfloat16 bit patterns."""
    model = cast_model(T.BFLOAT16, [(T.FLOAT, {})], 4)
    with pytest.raises(ArgumentError, match="bfloat16"):
        run(model, np.zeros(4, np.float32))
    with pytest.raises(ArgumentError, match="bfloat16"):
        run(model, np.zeros(4, np.uint16))


def test_computing_with_a_storage_format_is_refused_by_node():
    graph = h.make_graph([h.make_node("Add", ["x", "x"], ["y"], name="adder")], "g",
                         [h.make_tensor_value_info("x", T.BFLOAT16, [4])],
                         [h.make_tensor_value_info("y", T.BFLOAT16, [4])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)])
    from polycomp.onnx import InferenceSession
    with pytest.raises(UnsupportedError, match=r"adder.*BFLOAT16.*only converts"):
        InferenceSession(model)


def test_unknown_round_mode_is_refused():
    model = cast_model(T.FLOAT, [(T.FLOAT8E8M0, {"round_mode": "sideways"})], 2)
    from polycomp.onnx import InferenceSession
    with pytest.raises(UnsupportedError, match=r"Cast#0.*round_mode='sideways'"):
        InferenceSession(model)


def test_the_session_takes_and_gives_ml_dtypes_arrays():
    """Without the backend: onnxruntime's interface names the types, takes the ml_dtypes
    array and hands one back; another dtype is refused, never read as bit patterns."""
    from polycomp.onnx import InferenceSession
    model = cast_model(T.BFLOAT16, [(T.FLOAT8E4M3FN, {})], 5)
    session = InferenceSession(model)
    assert [i.type for i in session.get_inputs()] == ["tensor(bfloat16)"]
    assert [o.type for o in session.get_outputs()] == ["tensor(float8e4m3fn)"]
    x = np.array([0.5, -3.0, 448.0, 1e-3, 17.0], np.float32).astype(ml_dtypes.bfloat16)
    (y,) = session.run(None, {"x": x})  # the output is y0 (cast_model's naming)
    assert y.dtype == ml_dtypes.float8_e4m3fn
    assert_same(y, cast_to(x, T.FLOAT8E4M3FN, True))
    with pytest.raises(ArgumentError, match="bfloat16"):
        session.run(None, {"x": x.astype(np.float32)})
