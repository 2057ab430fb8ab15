"""The TC corpus: every program compiled under every scheduler, checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import polycomp

pytestmark = pytest.mark.needs_cc

SCHEDULERS = ["none", "isl"]


def f32(rng, *shape):
    return rng.uniform(0.1, 1.0, size=shape).astype(np.float32)


def pool_windows(x, k, s):
    win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))
    return win[:, :, ::s, ::s]


def conv(i, w, stride):
    win = np.lib.stride_tricks.sliding_window_view(i, w.shape[2:], axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("nchwij,fcij->nfhw", win, w)


CORPUS = {
    "matmul": ("""
        def matmul(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }""",
        lambda r: [f32(r, 9, 7), f32(r, 7, 5)], lambda a, b: a @ b),
    "batched_matmul": ("""
        def bmm(float(B, M, K) X, float(B, K, N) Y) -> (Z) { Z(b, m, n) +=! X(b, m, k) * Y(b, k, n) }""",
        lambda r: [f32(r, 3, 6, 4), f32(r, 3, 4, 5)], lambda x, y: x @ y),
    "matvec": ("""
        def mv(float(M, N) A, float(N) x) -> (y) { y(i) +=! A(i, j) * x(j) }""",
        lambda r: [f32(r, 11, 6), f32(r, 6)], lambda a, x: a @ x),
    "transpose": ("""
        def transpose(float(M, N) A) -> (T) { T(j, i) = A(i, j) }""",
        lambda r: [f32(r, 5, 8)], lambda a: a.T),
    "conv2d_stride1": ("""
        def conv(float(N, C, H, W) I, float(F, C, KH, KW) Wt) -> (O) {
            O(n, f, h, w) +=! I(n, c, h + kh, w + kw) * Wt(f, c, kh, kw)
        }""", lambda r: [f32(r, 2, 3, 9, 8), f32(r, 4, 3, 3, 2)], lambda i, w: conv(i, w, 1)),
    "conv2d_stride2": ("""
        def conv(float(N, C, H, W) I, float(F, C, KH, KW) Wt) -> (O) {
            O(n, f, h, w) +=! I(n, c, 2 * h + kh, 2 * w + kw) * Wt(f, c, kh, kw)
        }""", lambda r: [f32(r, 2, 3, 11, 9), f32(r, 4, 3, 3, 3)], lambda i, w: conv(i, w, 2)),
    "depthwise_conv": ("""
        def dw(float(N, C, H, W) I, float(C, KH, KW) Wt) -> (O) {
            O(n, c, h, w) +=! I(n, c, h + kh, w + kw) * Wt(c, kh, kw)
        }""", lambda r: [f32(r, 2, 3, 7, 6), f32(r, 3, 2, 3)],
        lambda i, w: np.einsum("nchwij,cij->nchw",
                               np.lib.stride_tricks.sliding_window_view(i, w.shape[1:], axis=(2, 3)), w)),
    "max_pool": ("""
        def maxpool(float(N, C, H, W) I) -> (O) {
            O(n, c, h, w) max=! I(n, c, 2 * h + kh, 2 * w + kw) where kh in 0:2, kw in 0:2
        }""", lambda r: [f32(r, 2, 3, 8, 6)], lambda i: pool_windows(i, 2, 2).max(axis=(4, 5))),
    "avg_pool": ("""
        def avgpool(float(N, C, H, W) I) -> (O) {
            S(n, c, h, w) +=! I(n, c, h + kh, w + kw) where kh in 0:3, kw in 0:3
            O(n, c, h, w) = S(n, c, h, w) / 9.0
        }""", lambda r: [f32(r, 1, 2, 7, 6)], lambda i: pool_windows(i, 3, 1).mean(axis=(4, 5))),
    "softmax": ("""
        def softmax(float(N, D) X) -> (Y) {
            mx(n) max=! X(n, d)
            e(n, d) = exp(X(n, d) - mx(n))
            s(n) +=! e(n, d)
            Y(n, d) = e(n, d) / s(n)
        }""", lambda r: [f32(r, 4, 9)],
        lambda x: np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)),
    "layernorm": ("""
        def ln(float(N, D) X, float(D) g, float(D) b, float eps) -> (Y) {
            mean(n) +=! X(n, d) / float(X.1)
            var(n) +=! (X(n, d) - mean(n)) * (X(n, d) - mean(n)) / float(X.1)
            Y(n, d) = g(d) * (X(n, d) - mean(n)) * rsqrt(var(n) + eps) + b(d)
        }""", lambda r: [f32(r, 3, 10), f32(r, 10), f32(r, 10), 1e-5],
        lambda x, g, b, eps: g * (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + eps) + b),
    "outer_product": ("""
        def outer(float(M) a, float(N) b) -> (O) { O(i, j) = a(i) * b(j) }""",
        lambda r: [f32(r, 6), f32(r, 4)], np.outer),
    "reduce_to_scalar": ("""
        def dot(float(N) X) -> (s) { s() +=! X(i) * X(i) }""",
        lambda r: [f32(r, 17)], lambda x: np.array(np.dot(x, x), np.float32)),
    "elementwise_chain": ("""
        def chain(float(N, M) A, float(N, M) B) -> (O) {
            t1(i, j) = A(i, j) * B(i, j)
            t2(i, j) = tanh(t1(i, j)) + 1.0
            O(i, j) = t2(i, j) > 1.5 ? sqrt(t2(i, j)) : t2(i, j) * 2.0
        }""", lambda r: [f32(r, 5, 7), f32(r, 5, 7)],
        lambda a, b: np.where(np.tanh(a * b) + 1 > 1.5, np.sqrt(np.tanh(a * b) + 1), (np.tanh(a * b) + 1) * 2)),
    "triangular_where": ("""
        def prefix(float(N) X) -> (P) { P(i) +=! X(j) where i in 0:N, j in 0:i+1 }""",
        lambda r: [f32(r, 12)], np.cumsum),
    "gather": ("""
        def embed(float(V, D) T, int32(B, L) Idx) -> (O) { O(b, l, d) = T(Idx(b, l), d) }""",
        lambda r: [f32(r, 7, 3), r.integers(0, 7, size=(2, 4)).astype(np.int32)],
        lambda t, idx: t[idx]),
    "integer_bit_exact": ("""
        def ints(int32(N) A, int32(N) B) -> (O) {
            O(i) +=! (A(i) * 7 + B(j) % 5) / 3 where j in 0:i+1
        }""", lambda r: [r.integers(-50, 50, 13).astype(np.int32), r.integers(0, 50, 13).astype(np.int32)],
        lambda a, b: np.array([sum(int(np.trunc((int(a[i]) * 7 + int(b[j]) % 5) / 3))
                                   for j in range(i + 1)) for i in range(13)], np.int32)),
}


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_matches_numpy(name, scheduler):
    source, make_inputs, reference = CORPUS[name]
    args = make_inputs(np.random.default_rng(7))
    got = polycomp.compile(source, scheduler=scheduler)(*args)
    want = reference(*args)
    if got.dtype.kind in "iub":
        assert np.array_equal(got, want)
    else:
        np.testing.assert_allclose(got, np.asarray(want, dtype=got.dtype), rtol=2e-4, atol=1e-5)


def test_gather_out_of_range_index_is_an_error_not_a_crash():
    source = CORPUS["gather"][0]
    table = np.ones((7, 3), np.float32)
    with pytest.raises(polycomp.PolycompError, match="out of bounds"):
        polycomp.compile(source)(table, np.array([[0, 7]], np.int32))


def test_parametric_kernel_serves_several_sizes():
    kernel = polycomp.compile(CORPUS["conv2d_stride1"][0], parametric=True)
    rng = np.random.default_rng(3)
    for shape in [(1, 2, 6, 5), (2, 2, 9, 7)]:
        i, w = f32(rng, *shape), f32(rng, 3, 2, 3, 2)
        np.testing.assert_allclose(kernel(i, w), conv(i, w, 1), rtol=2e-4)
    assert "long H" in kernel.c_source or "long W" in kernel.c_source
