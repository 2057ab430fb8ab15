"""Dividing indices rewritten by isl where the AST is built (codegen/indices.py): a
channel-blocked read under a schedule that tiles the channel prints without floord or
floorm calls, and the kernels still compute what onnxruntime and numpy compute."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pytest

import polycomp
import polycomp.onnx as pco
from polycomp import expr as E
from polycomp.codegen.indices import divided_indices
from onnx_cases import conv_chain

pytestmark = pytest.mark.needs_cc


def test_divided_indices_are_the_quasi_affine_ones_that_divide():
    i, j = E.Iter("i", E.INDEX_DTYPE), E.Iter("j", E.INDEX_DTYPE)
    sixteen = E.Const(16, E.INDEX_DTYPE)
    q = E.Binary("floordiv", i, sixteen, E.INDEX_DTYPE)
    r = E.Binary("floormod", i, sixteen, E.INDEX_DTYPE)
    c_div = E.Binary("div", j, sixteen, E.INDEX_DTYPE)  # C's: left alone
    read = E.Access("x", (q, j, r), "float32")
    gather = E.Access("y", (E.Binary("floordiv", E.Access("g", (i,), E.INDEX_DTYPE),
                                     sixteen, E.INDEX_DTYPE),), "float32")
    # divided_indices reads a statement's target and expression only
    stmt = SimpleNamespace(target=E.Access("o", (i, c_div), "float32"),
                           expr=E.Binary("add", read, gather, "float32"))
    assert [id(n) for n in divided_indices(stmt)] == [id(q), id(r)]


def test_a_blocked_conv_chain_reads_its_blocked_input_without_floord():
    # 7 columns: no multiple of any vector width, so both convs are channel-blocked
    model = conv_chain(64, 64, 32, 7, 3, 1)
    session = pco.InferenceSession(model)
    texts = [k.specialize({}, build=False).compiled.source.text
             for k in session.compiled().kernels.values()]
    conv2 = [t for t in texts if "t1_packed" in t and "t0[(((" in t]
    assert conv2 and all("polycomp_floord" not in t and "polycomp_floorm" not in t
                         for t in conv2), conv2
    x = np.random.default_rng(3).standard_normal((1, 64, 7, 7)).astype(np.float32)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(session.run(None, {"x": x})[0], want[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [37, 64])
def test_a_dividing_tc_index_matches_numpy(n):
    # B(i) reads A at i / 4 and i % 4 (floor division on non-negative i): isl writes the
    # index in the loop's context, the values must not change
    kernel = polycomp.compile("""
    def f(float(M, 4) A, float(N) C) -> (B) {
        B(i) = A(i / 4, i % 4) * C(i)
    }""")
    rng = np.random.default_rng(0)
    a = rng.random(((n + 3) // 4, 4), dtype=np.float32)
    c = rng.random(n, dtype=np.float32)
    np.testing.assert_array_equal(kernel(a, c), a.reshape(-1)[:n] * c)
