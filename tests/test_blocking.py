"""Channel blocking (scheduler/blocking.py) and register promotion (codegen/promote.py).

A convolution's output channels are blocked by the vector width, its weights packed to
match, and the jammed accumulators of the blocked tile kept in local arrays across the
reduction loops. Oracles: numpy in float64, and the unscheduled original
(``scheduler="none"``, which is never blocked) bit for bit under ``exact_fp``. Schedule
quality: the blocked conv's simd loop runs along the channel block, with its
accumulators promoted.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import polycomp
from polycomp.codegen import vector_tile as VT
from polycomp.scheduler import cache_model as CM

LANES = CM.simd_lanes(4)


def conv_tc(stride: int = 1, dilation: int = 1, out: int = 7) -> str:
    return ("def conv(float(N, C, H, W) I, float(F, C, KH, KW) Wt) -> (O) {\n"
            f"  O(n, f, h, w) +=! I(n, c, {stride} * h + {dilation} * kh, "
            f"{stride} * w + {dilation} * kw) * Wt(f, c, kh, kw)\n"
            f"    where h in 0:{out}, w in 0:{out}\n}}")


def conv_reference(x: np.ndarray, w: np.ndarray, stride: int, dilation: int,
                   out: int) -> np.ndarray:
    want = np.zeros((x.shape[0], w.shape[0], out, out))
    for kh in range(w.shape[2]):
        for kw in range(w.shape[3]):
            rows = slice(dilation * kh, dilation * kh + stride * (out - 1) + 1, stride)
            cols = slice(dilation * kw, dilation * kw + stride * (out - 1) + 1, stride)
            want += np.einsum("nchw,fc->nfhw", x[:, :, rows, cols].astype(np.float64),
                              w[:, :, kh, kw].astype(np.float64))
    return want


def conv_case(rng, c: int, f: int, k: int, stride: int, dilation: int, out: int):
    size = stride * (out - 1) + dilation * (k - 1) + 1
    x = rng.standard_normal((1, c, size, size)).astype(np.float32)
    w = rng.standard_normal((f, c, k, k)).astype(np.float32)
    sizes = {"N": 1, "C": c, "H": size, "W": size, "F": f, "KH": k, "KW": k}
    return x, w, sizes


def blocked(kernel, sizes) -> bool:
    program = kernel.specialize(sizes).compiled.program
    return any(a.name.endswith("_packed") for a in program.arrays)


# every window with the default scheduler; isl's (7 s a 3 x 3 case) with a 1 x 1 and a
# strided one
@pytest.mark.needs_cc
@pytest.mark.parametrize("k, stride, dilation, scheduler", [
    (3, 1, 1, "pluto"), (3, 2, 1, "pluto"), (1, 1, 1, "pluto"), (3, 1, 2, "pluto"),
    (3, 2, 1, "isl"), (1, 1, 1, "isl")])
def test_blocked_convolutions_match_numpy_and_the_original_order(k, stride, dilation,
                                                                 scheduler):
    rng = np.random.default_rng(k * 10 + stride + dilation)
    x, w, sizes = conv_case(rng, 5, 2 * LANES, k, stride, dilation, 7)
    source = conv_tc(stride, dilation)
    kernel = polycomp.compile(source, scheduler=scheduler)
    assert blocked(kernel, sizes)
    np.testing.assert_allclose(kernel(x, w),
                               conv_reference(x, w, stride, dilation, 7),
                               rtol=1e-4, atol=1e-4)
    # each output element adds the same terms in the same order as the original
    exact = polycomp.compile(source, scheduler=scheduler, exact_fp=True)
    original = polycomp.compile(source, scheduler="none", exact_fp=True)
    assert blocked(exact, sizes)
    assert np.array_equal(exact(x, w), original(x, w))


@pytest.mark.needs_cc
@settings(max_examples=6, deadline=None)
@given(c=st.integers(1, 4), blocks=st.integers(1, 2), k=st.integers(1, 3),
       stride=st.integers(1, 2), out=st.integers(1, 9), seed=st.integers(0, 2 ** 16))
def test_blocked_convolutions_of_any_small_shape_match_numpy(c, blocks, k, stride, out, seed):
    x, w, _ = conv_case(np.random.default_rng(seed), c, blocks * LANES, k, stride, 1, out)
    got = polycomp.compile(conv_tc(stride, 1, out))(x, w)
    np.testing.assert_allclose(got, conv_reference(x, w, stride, 1, out), rtol=1e-4, atol=1e-4)


@pytest.mark.needs_cc
@pytest.mark.parametrize("f", [LANES + LANES // 2, 3 * LANES - 1])
def test_channels_short_of_whole_blocks_are_padded_with_zero_weights(f):
    # the last block's padding lanes multiply zero weights and are never unpacked
    rng = np.random.default_rng(f)
    x, w, sizes = conv_case(rng, 3, f, 3, 1, 1, 6)
    source = conv_tc(out=6)
    kernel = polycomp.compile(source)
    assert blocked(kernel, sizes)
    np.testing.assert_allclose(kernel(x, w), conv_reference(x, w, 1, 1, 6),
                               rtol=1e-4, atol=1e-4)
    exact = polycomp.compile(source, exact_fp=True)
    assert blocked(exact, sizes)
    assert np.array_equal(exact(x, w), polycomp.compile(source, scheduler="none",
                                                        exact_fp=True)(x, w))


@pytest.mark.needs_cc
def test_what_is_not_blocked():
    rng = np.random.default_rng(5)
    # channels past a whole block by too little to pay for a padded block
    x, w, sizes = conv_case(rng, 3, LANES + 2, 3, 1, 1, 5)
    kernel = polycomp.compile(conv_tc(out=5))
    assert not blocked(kernel, sizes)
    np.testing.assert_allclose(kernel(x, w), conv_reference(x, w, 1, 1, 5),
                               rtol=1e-4, atol=1e-4)
    # the option off, and the original order
    x, w, sizes = conv_case(rng, 3, LANES, 3, 1, 1, 5)
    assert not blocked(polycomp.compile(conv_tc(out=5), block_channels=False), sizes)
    assert not blocked(polycomp.compile(conv_tc(out=5), scheduler="none"), sizes)
    # matmul's columns are a good vector loop already
    mm = polycomp.compile("def mm(float(M,K) A, float(K,N) B) -> (C) { C(m,n) +=! A(m,k) * B(k,n) }")
    assert not blocked(mm, {"M": 2 * LANES, "K": 8, "N": 2 * LANES})
    # depthwise: the channel indexes the input too
    dw = polycomp.compile("def dw(float(C, H, W) I, float(C, KH, KW) Wt) -> (O) {\n"
                          "  O(c, h, w) +=! I(c, h + kh, w + kw) * Wt(c, kh, kw)\n"
                          "    where h in 0:5, w in 0:5\n}")
    assert not blocked(dw, {"C": LANES, "H": 7, "W": 7, "KH": 3, "KW": 3})


@pytest.mark.needs_cc
def test_blocked_conv_vectorises_the_channel_block_with_promoted_accumulators():
    """Schedule quality: a register tile over the LANES channels of a block
    (codegen/vector_tile.py), whose reduction loop updates several vector accumulators,
    and no store of the blocked output inside it."""
    sizes = conv_case(np.random.default_rng(0), 16, 2 * LANES, 3, 1, 1, 12)[2]
    text = polycomp.compile(conv_tc(out=12)).specialize(sizes).compiled.source.text
    lines = [ln.strip() for ln in text.splitlines()]
    tiles = [k for k, ln in enumerate(lines) if ln == VT.MARKER]
    updates = [sum(1 for ln in lines[k + 2:k + 80] if re.match(r"polycomp_reg\d+_\d+ \+=", ln))
               for k in tiles]
    assert updates and max(updates) >= 4, "no register tile over a channel block"
    assert f"polycomp_v{LANES}sf" in text  # one vector per channel block
    # the blocked accumulator is loaded and stored around the reduction, not in it
    body = lines[tiles[updates.index(max(updates))] + 1:]
    assert not any(re.match(r"O_blocked\[.*\] \+=", ln) for ln in body[:40])

@pytest.mark.needs_cc
@pytest.mark.parametrize("scheduler", ["pluto", "isl"])
def test_q_times_k_transposed_blocks_its_columns_per_batch(scheduler):
    """S(b, m, n) += Q(b, m, k) * K(b, n, k): along n, K jumps by a row; n is blocked,
    K packed per batch (b is an index of both operands)."""
    source = ("def qk(float(B, M, D) Q, float(B, N, D) K) -> (S) {\n"
              "  S(b, m, n) +=! Q(b, m, k) * K(b, n, k)\n}")
    rng = np.random.default_rng(7)
    q = rng.standard_normal((3, 5, 9)).astype(np.float32)
    k = rng.standard_normal((3, 2 * LANES, 9)).astype(np.float32)
    kernel = polycomp.compile(source, scheduler=scheduler)
    assert blocked(kernel, {"B": 3, "M": 5, "D": 9, "N": 2 * LANES})
    np.testing.assert_allclose(kernel(q, k), np.einsum("bmk,bnk->bmn", q.astype(np.float64),
                                                       k.astype(np.float64)),
                               rtol=1e-4, atol=1e-4)
